//! MCP client config files → Hearth MCP plugins: `hearth mcp import FILE` and the
//! broker's `<data_dir>/mcp.json`.
//!
//! People already list their MCP servers for Claude Desktop, Claude Code, Cursor or VS
//! Code. This module reads such a file and turns each server into a Hearth plugin
//! manifest (`plugin.json`, runtime `"mcp"`), so the servers can be moved over without
//! retyping them. It depends on nothing of the broker's: [`parse`] is text in, JSON
//! values out; [`write()`] puts them in plugin folders; [`specs_from_file`] reads the
//! broker's own `mcp.json`, whose servers become plugins without folders.
//!
//! # Files
//! The format is told by content, not by file name:
//! - `mcpServers` — Claude Desktop, Claude Code's `.mcp.json`, Cursor;
//! - `servers` (+ `inputs`) — VS Code's `mcp.json` (and `mcp.servers` in its settings);
//! - `projects.<path>.mcpServers` — Claude Code's `~/.claude.json`, read together with
//!   its top-level `mcpServers`. One server name in several of them: the first is used
//!   (top level, then projects in map order), a different definition is a warning.
//!
//! Comments and trailing commas (VS Code's files are JSONC) are accepted.
//!
//! # Servers
//! An entry with `command` is a stdio server (`args` appended, `env`, VS Code's
//! `envFile` merged under `env`, `cwd`); one with `url` is a Streamable HTTP server
//! (`headers`). `type` may be absent, `stdio`, `http`, `streamable-http` or
//! `streamableHttp`; `sse` is refused, Hearth's MCP client having no legacy HTTP+SSE
//! transport. The bridge `npx [-y] mcp-remote URL [--header "K: V"]…` becomes a `url`
//! server, so Hearth speaks Streamable HTTP itself, unless the URL ends in `/sse`.
//! `"disabled": true` servers are skipped. A server that cannot be imported is listed in
//! [`ImportPlan::skipped`] with the reason; the others are still imported.
//!
//! # Variables
//! Hearth resolves `${env:NAME}` (also `${env:NAME:-default}`) and `${setting:KEY}` when
//! it starts the plugin, so they stay references in `plugin.json`:
//!
//! | in the client's file | in `plugin.json` |
//! |---|---|
//! | `${VAR}`, `${VAR:-default}` (Claude Code) | `${env:VAR}`, `${env:VAR:-default}` |
//! | `${env:NAME}` (Cursor, VS Code), `${setting:KEY}` | kept |
//! | `${userHome}` | the home directory, now |
//! | `${workspaceFolder}`, `${workspaceFolderBasename}` | the project folder of a `.vscode/` or `.cursor/` file (its parent), now; elsewhere an error |
//! | `${pathSeparator}`, `${/}` | `/` |
//! | `${input:id}` (VS Code prompts) | an error for that server |
//!
//! Literal values, secrets included, are copied as they are: `plugin.json` is written
//! with mode 0600 in a 0700 folder.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

/// Longest plugin name, in bytes (the broker's `manifest::MAX_NAME_BYTES`).
const MAX_NAME_BYTES: usize = 64;

/// `type` values of a server entry that Hearth can connect to.
const TYPES: &[&str] = &["stdio", "http", "streamable-http", "streamableHttp"];

/// One server of a client config, as a Hearth plugin manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The plugin name: the server's name lowercased, characters other than ASCII
    /// letters, digits, `_` and `-` replaced by `_`, leading `_`/`-` dropped.
    pub name: String,
    /// The server's name as written in the file.
    pub server: String,
    /// The `plugin.json` value, an object with exactly these keys:
    /// `{"name", "description", "runtime": "mcp", "command": [program, args…], "env"?,
    /// "cwd"?}` for a stdio server, `{"name", "description", "runtime": "mcp", "url",
    /// "headers"?}` for a Streamable HTTP one (`env` and `headers` are objects of
    /// strings, absent when empty).
    pub manifest: Value,
}

/// A server of the file that was not imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The server's name as written in the file.
    pub server: String,
    /// Why, and what to do about it (without the server's name).
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server {:?}: {}", self.server, self.reason)
    }
}

/// What a client config file turns into.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportPlan {
    /// The servers to become plugins, in the file's map order (serde_json's: sorted by
    /// name unless its `preserve_order` feature is on); plugin names are unique.
    pub servers: Vec<Imported>,
    /// Servers left out: disabled, or with a problem that names the key.
    pub skipped: Vec<Skipped>,
    /// Things imported differently from how the client would run them, each naming its
    /// server (ignored keys, a bridge replaced, a name defined twice …).
    pub warnings: Vec<String>,
}

/// Why a config file could not be imported, or its plugins not written. Problems of
/// one server are not errors: they are in [`ImportPlan::skipped`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The file is not JSON (nor JSON with comments); the message has line and column.
    #[error("{path}: not valid JSON: {source}")]
    Json {
        /// The config file.
        path: PathBuf,
        /// The parse error, with its line and column.
        source: serde_json::Error,
    },
    /// The top level is not a JSON object.
    #[error("{path}: the top level is {found}, expected an object with `mcpServers` or `servers`")]
    NotAnObject {
        /// The config file.
        path: PathBuf,
        /// What it is instead ("an array" …).
        found: &'static str,
    },
    /// No key that lists MCP servers.
    #[error(
        "{path}: no MCP servers: expected a `mcpServers` key (Claude Desktop, Claude Code, Cursor) or `servers` (VS Code); {}",
        describe_keys(.keys)
    )]
    NoServers {
        /// The config file.
        path: PathBuf,
        /// The top-level keys that were found.
        keys: Vec<String>,
    },
    /// The servers key holds something other than an object.
    #[error("{path}: `{key}` is {found}, expected an object of servers by name")]
    ServersNotObject {
        /// The config file.
        path: PathBuf,
        /// The key, e.g. `mcpServers` or `projects./home/me/app.mcpServers`.
        key: String,
        /// What it is instead.
        found: &'static str,
    },
    /// A server entry is not an object.
    #[error("{path}: server {server:?} in `{key}`: expected an object, got {found}")]
    EntryNotObject {
        /// The config file.
        path: PathBuf,
        /// The key that lists the server.
        key: String,
        /// The server's name.
        server: String,
        /// What the entry is instead.
        found: &'static str,
    },
    /// A file system operation of [`write()`] failed.
    #[error("{path}: cannot {op}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What was being done ("create the folder", "write" …).
        op: &'static str,
        /// The I/O error.
        source: io::Error,
    },
    /// A plan handed to [`write()`] has a name that cannot be a plugin folder.
    #[error("{name:?} is not a plugin name: use 1 to {MAX_NAME_BYTES} letters, digits, `_`, `-` or `.`, starting with a letter or digit")]
    InvalidName {
        /// The name.
        name: String,
    },
    /// A plan handed to [`write()`] has two servers of one name.
    #[error("two servers are both named {name:?}")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// The plugin's folder exists and is not an MCP plugin: it is never touched.
    #[error("{dir}: exists and is not an MCP plugin ({found}); left untouched: rename the server in the config file, or move that folder away")]
    NotMcpPlugin {
        /// The plugin folder.
        dir: PathBuf,
        /// What is there ("runtime \"python\"", "no plugin.json" …).
        found: String,
    },
    /// An MCP plugin of that name exists and overwriting was not asked for.
    #[error("{dir}: an MCP plugin of that name already exists; pass --force to replace it")]
    Exists {
        /// The plugin folder.
        dir: PathBuf,
    },
}

/// Parses a client config file's text into plugin manifests, one per server.
///
/// `source` is the file's path: it is named in messages and descriptions, relative
/// `envFile` and `cwd` paths are resolved from its folder, and for a `.vscode/mcp.json`
/// or `.cursor/mcp.json` its dot-folder's parent is `${workspaceFolder}`. The home
/// directory for `${userHome}` is `$HOME`. Nothing is written.
///
/// Errors, for the whole file: [`ImportError::Json`] (with line and column),
/// [`ImportError::NotAnObject`], [`ImportError::NoServers`] (names the keys found),
/// [`ImportError::ServersNotObject`], [`ImportError::EntryNotObject`]. A problem of
/// one server skips that server ([`ImportPlan::skipped`]).
pub fn parse(text: &str, source: &Path) -> Result<ImportPlan, ImportError> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    parse_with_home(text, source, home)
}

/// Reads and parses `<data_dir>/mcp.json` (any format [`parse`] takes), the servers the
/// broker runs as plugins without folders. A missing file is an empty plan, as an
/// absent plugins folder is no plugins.
///
/// Errors: [`ImportError::Read`] if the file exists but cannot be read, and those of
/// [`parse`].
pub fn specs_from_file(path: &Path) -> Result<ImportPlan, ImportError> {
    match fs::read_to_string(path) {
        Ok(text) => parse(&text, path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(ImportPlan::default()),
        Err(source) => Err(ImportError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes each server of `plan` as `<plugins_dir>/<name>/plugin.json`: pretty JSON with
/// a trailing newline, mode 0600, in a folder of mode 0700, through a temporary file
/// renamed into place. `plugins_dir` is created if missing. Returns the `plugin.json`
/// paths written, in plan order.
///
/// Everything is checked before anything is written: a folder that exists and is not
/// an MCP plugin (no `plugin.json`, or its `runtime` is not `"mcp"`) is never touched
/// ([`ImportError::NotMcpPlugin`]); an MCP one is replaced only if `overwrite`
/// ([`ImportError::Exists`] otherwise). Other errors: [`ImportError::InvalidName`],
/// [`ImportError::DuplicateName`] (for hand-made plans), [`ImportError::Io`].
pub fn write(
    plan: &ImportPlan,
    plugins_dir: &Path,
    overwrite: bool,
) -> Result<Vec<PathBuf>, ImportError> {
    let mut names = BTreeSet::new();
    for server in &plan.servers {
        if !is_plugin_name(&server.name) {
            return Err(ImportError::InvalidName {
                name: server.name.clone(),
            });
        }
        if !names.insert(server.name.as_str()) {
            return Err(ImportError::DuplicateName {
                name: server.name.clone(),
            });
        }
        check_existing(&plugins_dir.join(&server.name), overwrite)?;
    }
    let io_err = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Io { path, op, source }
    };
    DirBuilder::new()
        .recursive(true)
        .create(plugins_dir)
        .map_err(io_err("create the plugins folder", plugins_dir))?;
    let mut written = Vec::with_capacity(plan.servers.len());
    for server in &plan.servers {
        let dir = plugins_dir.join(&server.name);
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                    .map_err(io_err("set the mode of", &dir))?;
            }
            Err(e) => return Err(io_err("create the folder", &dir)(e)),
        }
        let mut text =
            serde_json::to_string_pretty(&server.manifest).expect("a JSON value serializes");
        text.push('\n');
        let path = dir.join("plugin.json");
        write_atomically(&path, text.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

/// [`parse`] with the home directory given (tests use a temp dir).
fn parse_with_home(
    text: &str,
    source: &Path,
    home: Option<PathBuf>,
) -> Result<ImportPlan, ImportError> {
    let path = std::path::absolute(source).unwrap_or_else(|_| source.to_path_buf());
    let value: Value =
        serde_json::from_str(&strip_jsonc(text)).map_err(|source| ImportError::Json {
            path: path.clone(),
            source,
        })?;
    let Value::Object(top) = value else {
        return Err(ImportError::NotAnObject {
            path,
            found: kind(&value),
        });
    };
    let groups = server_groups(&top, &path)?;
    let file = SourceFile {
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        workspace: workspace_of(&path, home.as_deref()),
        inputs: inputs(&top),
        home,
        path,
    };

    let mut plan = ImportPlan::default();
    // Server name → (its entry, where it was found), for names listed more than once.
    let mut seen: BTreeMap<&str, (&Value, String)> = BTreeMap::new();
    // Plugin name → the server that has it.
    let mut taken: BTreeMap<String, &str> = BTreeMap::new();
    for group in &groups {
        let place = match group.project {
            Some(project) => format!("project {project}"),
            None => format!("`{}`", group.key),
        };
        for (server, entry) in group.servers {
            let Value::Object(fields) = entry else {
                return Err(ImportError::EntryNotObject {
                    path: file.path.clone(),
                    key: group.key.clone(),
                    server: server.clone(),
                    found: kind(entry),
                });
            };
            if let Some((first, first_place)) = seen.get(server.as_str()) {
                if *first != entry {
                    plan.warnings.push(format!(
                        "server {server:?} of {place} is ignored: the one of {first_place} comes first"
                    ));
                }
                continue;
            }
            seen.insert(server, (entry, place.clone()));
            let skip = |reason: String| Skipped {
                server: server.clone(),
                reason,
            };
            if fields.get("disabled") == Some(&Value::Bool(true)) {
                plan.skipped.push(skip(
                    "disabled in the client's config (`\"disabled\": true`)".into(),
                ));
                continue;
            }
            let name = match plugin_name(server) {
                Ok(name) => name,
                Err(reason) => {
                    plan.skipped.push(skip(reason));
                    continue;
                }
            };
            if let Some(other) = taken.get(&name) {
                plan.skipped.push(skip(format!(
                    "its plugin name {name:?} is already taken by server {other:?}; rename one of them in the file"
                )));
                continue;
            }
            match file.convert(fields) {
                Ok(converted) => {
                    let mut manifest = Map::new();
                    manifest.insert("name".into(), name.clone().into());
                    let description = match group.project {
                        Some(project) => format!(
                            "MCP server {server} of project {project} (imported from {})",
                            file.path.display()
                        ),
                        None => format!(
                            "MCP server {server} (imported from {})",
                            file.path.display()
                        ),
                    };
                    manifest.insert("description".into(), description.into());
                    manifest.insert("runtime".into(), "mcp".into());
                    manifest.extend(converted.fields);
                    plan.warnings.extend(
                        converted
                            .warnings
                            .into_iter()
                            .map(|w| format!("server {server:?}: {w}")),
                    );
                    taken.insert(name.clone(), server);
                    plan.servers.push(Imported {
                        name,
                        server: server.clone(),
                        manifest: Value::Object(manifest),
                    });
                }
                Err(reason) => plan.skipped.push(skip(reason)),
            }
        }
    }
    Ok(plan)
}

/// One object of servers in the file.
struct Group<'a> {
    /// Its key path, for messages.
    key: String,
    /// The project path of a `~/.claude.json` `projects` entry.
    project: Option<&'a str>,
    servers: &'a Map<String, Value>,
}

/// The file's objects of servers, in the order they are read: `mcpServers`, `servers`,
/// `mcp.servers`, then `projects.<path>.mcpServers`.
fn server_groups<'a>(
    top: &'a Map<String, Value>,
    path: &Path,
) -> Result<Vec<Group<'a>>, ImportError> {
    let not_object = |key: String, value: &Value| ImportError::ServersNotObject {
        path: path.to_path_buf(),
        key,
        found: kind(value),
    };
    let mut groups = Vec::new();
    let mut push = |key: String, project: Option<&'a str>, value: &'a Value| match value {
        Value::Object(servers) => {
            groups.push(Group {
                key,
                project,
                servers,
            });
            Ok(())
        }
        other => Err(not_object(key, other)),
    };
    for key in ["mcpServers", "servers"] {
        if let Some(value) = top.get(key) {
            push(key.into(), None, value)?;
        }
    }
    if let Some(value) = top.get("mcp").and_then(|mcp| mcp.get("servers")) {
        push("mcp.servers".into(), None, value)?;
    }
    if let Some(Value::Object(projects)) = top.get("projects") {
        for (project, entry) in projects {
            if let Some(value) = entry.get("mcpServers") {
                push(
                    format!("projects.{project}.mcpServers"),
                    Some(project),
                    value,
                )?;
            }
        }
    }
    if groups.is_empty() {
        return Err(ImportError::NoServers {
            path: path.to_path_buf(),
            keys: top.keys().cloned().collect(),
        });
    }
    Ok(groups)
}

/// VS Code's `inputs`: id → description.
fn inputs(top: &Map<String, Value>) -> BTreeMap<String, String> {
    let list = top
        .get("inputs")
        .or_else(|| top.get("mcp").and_then(|mcp| mcp.get("inputs")));
    let Some(Value::Array(list)) = list else {
        return BTreeMap::new();
    };
    list.iter()
        .filter_map(|input| {
            let id = input.get("id")?.as_str()?;
            let description = input
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("no description");
            Some((id.to_string(), description.to_string()))
        })
        .collect()
}

/// `${workspaceFolder}` of a config file: the parent of its `.vscode`/`.cursor` folder,
/// unless that is the home directory (a user-level file, used with any workspace).
fn workspace_of(path: &Path, home: Option<&Path>) -> Result<PathBuf, String> {
    let dot_dir = path.parent().filter(|dir| {
        matches!(
            dir.file_name().and_then(|n| n.to_str()),
            Some(".vscode" | ".cursor")
        )
    });
    match dot_dir.and_then(Path::parent) {
        Some(workspace) if Some(workspace) == home => Err(format!(
            "{} is a user-level config, used with whichever folder the client has open",
            path.display()
        )),
        Some(workspace) => Ok(workspace.to_path_buf()),
        None => Err(format!(
            "it is known only for a project's .vscode/mcp.json or .cursor/mcp.json, and {} is neither",
            path.display()
        )),
    }
}

/// The config file, for resolving one server's values.
struct SourceFile {
    path: PathBuf,
    /// The file's folder.
    dir: PathBuf,
    home: Option<PathBuf>,
    /// `${workspaceFolder}`, or why it is unknown.
    workspace: Result<PathBuf, String>,
    /// VS Code `inputs`: id → description.
    inputs: BTreeMap<String, String>,
}

/// A server's manifest keys after `name`, `description` and `runtime`.
struct Converted {
    fields: Map<String, Value>,
    warnings: Vec<String>,
}

/// An `env` value: rewritten like the others, or literal (from an `envFile`).
struct EnvValue {
    text: String,
    literal: bool,
}

impl SourceFile {
    /// One server entry → its manifest keys; `Err` is the reason to skip it.
    fn convert(&self, entry: &Map<String, Value>) -> Result<Converted, String> {
        let kind_of_type = match entry.get("type") {
            None => None,
            Some(Value::String(t)) => Some(t.as_str()),
            Some(other) => return Err(format!("`type` must be a string, got {}", kind(other))),
        };
        let url = entry.get("url");
        match kind_of_type {
            None => {}
            Some(t) if TYPES.contains(&t) => {}
            Some("sse") => {
                let url = url.and_then(Value::as_str).unwrap_or("URL");
                return Err(format!(
                    "type \"sse\" (the legacy HTTP+SSE transport) is not supported: Hearth's MCP client speaks Streamable HTTP only. \
                     If the server also serves Streamable HTTP (often at /mcp instead of /sse), set \"type\": \"http\" and that URL; \
                     otherwise bridge it through stdio: \"command\": \"npx\", \"args\": [\"-y\", \"mcp-remote\", \"{url}\"]"
                ));
            }
            Some(t) => {
                return Err(format!(
                    "unknown `type` {t:?}; Hearth takes {}",
                    TYPES.join(", ")
                ))
            }
        }
        match (entry.get("command"), url) {
            (Some(_), Some(_)) => Err("has both `command` and `url`; keep one".into()),
            (None, None) => Err(
                "has neither `command` (a stdio server) nor `url` (a Streamable HTTP server)"
                    .into(),
            ),
            (Some(_), None) if matches!(kind_of_type, Some(t) if t != "stdio") => Err(format!(
                "`type` is {:?} but there is a `command` and no `url`",
                kind_of_type.unwrap_or_default()
            )),
            (None, Some(_)) if kind_of_type == Some("stdio") => {
                Err("`type` is \"stdio\" but there is a `url` and no `command`".into())
            }
            (Some(command), None) => self.stdio(entry, command),
            (None, Some(url)) => self.remote(entry, url),
        }
    }

    /// A `command` entry: a stdio server, or an `mcp-remote` bridge turned into a
    /// `url` one.
    fn stdio(&self, entry: &Map<String, Value>, command: &Value) -> Result<Converted, String> {
        let command = match command {
            Value::String(c) if !c.trim().is_empty() => c,
            Value::String(_) => return Err("`command` is empty".into()),
            other => return Err(format!("`command`: expected a string, got {}", kind(other))),
        };
        let args = match entry.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(args)) => args
                .iter()
                .enumerate()
                .map(|(i, arg)| {
                    scalar(arg)
                        .ok_or_else(|| format!("`args[{i}]`: expected a string, got {}", kind(arg)))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => return Err(format!("`args`: expected an array, got {}", kind(other))),
        };
        let env = self.env(entry)?;
        let mut warnings = Vec::new();
        let mut used = vec!["type", "disabled", "command", "args", "env", "envFile"];

        match mcp_remote(command, &args) {
            Bridge::Url { url, headers } => {
                let mut used_env = BTreeSet::new();
                let mut header_map = Map::new();
                for (name, value) in headers {
                    let value = substitute_env(&value, &env, &mut used_env);
                    let value = self.rewrite(&value, &format!("mcp-remote --header {name}"))?;
                    header_map.insert(name, value.into());
                }
                let url = self.rewrite(&url, "mcp-remote URL")?;
                let mut note = format!(
                    "the mcp-remote bridge is imported as a direct Streamable HTTP connection to {url}"
                );
                if header_map.is_empty() {
                    note.push_str(
                        "; mcp-remote also did OAuth logins, which Hearth does not: if the server asks for one, add an `Authorization` header to `headers` by hand",
                    );
                }
                let dropped: Vec<&str> = env
                    .keys()
                    .map(String::as_str)
                    .filter(|k| !used_env.contains(*k))
                    .collect();
                if !dropped.is_empty() {
                    note.push_str(&format!(
                        "; env {} (set for the mcp-remote process) dropped",
                        dropped.join(", ")
                    ));
                }
                warnings.push(note);
                used.push("cwd");
                ignored_keys(entry, &used, &mut warnings);
                let mut fields = Map::new();
                fields.insert("url".into(), url.into());
                if !header_map.is_empty() {
                    fields.insert("headers".into(), Value::Object(header_map));
                }
                return Ok(Converted { fields, warnings });
            }
            Bridge::Keep(Some(why)) => warnings.push(format!(
                "its mcp-remote bridge is kept as a command ({why})"
            )),
            Bridge::Keep(None) | Bridge::No => {}
        }

        let mut argv = vec![Value::String(self.rewrite(command, "command")?)];
        for (i, arg) in args.iter().enumerate() {
            argv.push(self.rewrite(arg, &format!("args[{i}]"))?.into());
        }
        let mut fields = Map::new();
        fields.insert("command".into(), Value::Array(argv));
        if !env.is_empty() {
            let mut env_map = Map::new();
            for (key, value) in env {
                let text = if value.literal {
                    if value.text.contains("${") {
                        warnings.push(format!(
                            "env {key} from `envFile` contains `${{`, which Hearth will read as a reference when it starts the plugin"
                        ));
                    }
                    value.text
                } else {
                    self.rewrite(&value.text, &format!("env.{key}"))?
                };
                env_map.insert(key, text.into());
            }
            fields.insert("env".into(), Value::Object(env_map));
        }
        used.push("cwd");
        match entry.get("cwd") {
            None | Some(Value::Null) => {}
            Some(Value::String(cwd)) => {
                let cwd = self.rewrite(cwd, "cwd")?;
                if cwd.contains("${") {
                    // The broker checks the folder when it loads the manifest.
                    return Err(format!(
                        "`cwd` {cwd:?} must be a path known now, not a reference; write the folder by hand"
                    ));
                }
                let cwd = if cwd.starts_with('/') {
                    cwd
                } else {
                    let base = self.workspace.as_ref().unwrap_or(&self.dir);
                    base.join(&cwd).to_string_lossy().into_owned()
                };
                fields.insert("cwd".into(), cwd.into());
            }
            Some(other) => return Err(format!("`cwd`: expected a string, got {}", kind(other))),
        }
        ignored_keys(entry, &used, &mut warnings);
        Ok(Converted { fields, warnings })
    }

    /// A `url` entry: a Streamable HTTP server.
    fn remote(&self, entry: &Map<String, Value>, url: &Value) -> Result<Converted, String> {
        let Value::String(url) = url else {
            return Err(format!("`url`: expected a string, got {}", kind(url)));
        };
        let url = self.rewrite(url, "url")?;
        if !url.starts_with("${") && !is_http(&url) {
            return Err(format!(
                "`url` {url:?} is not an http:// or https:// URL (Hearth's MCP client connects over HTTP only)"
            ));
        }
        let mut warnings = Vec::new();
        if entry.get("type").is_none() && ends_in_sse(&url) {
            warnings.push(format!(
                "{url} ends in /sse: if the server speaks only the legacy HTTP+SSE transport, Hearth cannot connect; then use its Streamable HTTP URL (often /mcp) or bridge it with `npx -y mcp-remote {url}`"
            ));
        }
        let mut fields = Map::new();
        fields.insert("url".into(), url.into());
        match entry.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(headers)) => {
                let mut out = Map::new();
                for (name, value) in headers {
                    let value = scalar(value).ok_or_else(|| {
                        format!("`headers.{name}`: expected a string, got {}", kind(value))
                    })?;
                    out.insert(
                        name.clone(),
                        self.rewrite(&value, &format!("headers.{name}"))?.into(),
                    );
                }
                if !out.is_empty() {
                    fields.insert("headers".into(), Value::Object(out));
                }
            }
            Some(other) => {
                return Err(format!(
                    "`headers`: expected an object, got {}",
                    kind(other)
                ))
            }
        }
        ignored_keys(
            entry,
            &["type", "disabled", "url", "headers"],
            &mut warnings,
        );
        Ok(Converted { fields, warnings })
    }

    /// `envFile` (literal values) overlaid by `env` (values still to rewrite); null
    /// values in `env` are left out.
    fn env(&self, entry: &Map<String, Value>) -> Result<BTreeMap<String, EnvValue>, String> {
        let mut env = BTreeMap::new();
        match entry.get("envFile") {
            None | Some(Value::Null) => {}
            Some(Value::String(file)) => {
                let file = self.rewrite(file, "envFile")?;
                if file.contains("${") {
                    return Err(format!(
                        "`envFile` {file:?} must be a path known now (it is read at import), not a reference"
                    ));
                }
                let path = self.dir.join(&file);
                let text = fs::read_to_string(&path)
                    .map_err(|e| format!("`envFile` {}: cannot read: {e}", path.display()))?;
                for (key, text) in parse_env_file(&text)
                    .map_err(|e| format!("`envFile` {}: {e}", path.display()))?
                {
                    env.insert(
                        key,
                        EnvValue {
                            text,
                            literal: true,
                        },
                    );
                }
            }
            Some(other) => {
                return Err(format!("`envFile`: expected a string, got {}", kind(other)))
            }
        }
        match entry.get("env") {
            None | Some(Value::Null) => {}
            Some(Value::Object(vars)) => {
                for (key, value) in vars {
                    if value.is_null() {
                        env.remove(key);
                        continue;
                    }
                    let text = scalar(value).ok_or_else(|| {
                        format!("`env.{key}`: expected a string, got {}", kind(value))
                    })?;
                    env.insert(
                        key.clone(),
                        EnvValue {
                            text,
                            literal: false,
                        },
                    );
                }
            }
            Some(other) => return Err(format!("`env`: expected an object, got {}", kind(other))),
        }
        Ok(env)
    }

    /// `text` with the client's variables in Hearth's syntax (see the module docs);
    /// `key` names the value in errors.
    fn rewrite(&self, text: &str, key: &str) -> Result<String, String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                // Not a reference: the client passes it as it is, and so does Hearth.
                out.push_str(&rest[start..]);
                return Ok(out);
            };
            out.push_str(&self.variable(&after[..end], key)?);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The replacement of `${inner}`.
    fn variable(&self, inner: &str, key: &str) -> Result<String, String> {
        if let Some(id) = inner.strip_prefix("input:") {
            let description = match self.inputs.get(id) {
                Some(d) => format!("{d:?}"),
                None => "not declared in `inputs`".into(),
            };
            return Err(format!(
                "`{key}` uses ${{input:{id}}} ({description}), a value VS Code prompts for; Hearth cannot prompt at import. \
                 Set it by hand: put the value, or ${{env:NAME}} to take it from the broker's environment, in place of ${{input:{id}}} and import again"
            ));
        }
        if inner.starts_with("env:") || inner.starts_with("setting:") {
            return Ok(format!("${{{inner}}}"));
        }
        let workspace = || {
            self.workspace.as_ref().map_err(|why| {
                format!("`{key}`: ${{{inner}}} cannot be resolved: {why}; write the path by hand")
            })
        };
        match inner {
            "userHome" => {
                let home = self.home.as_ref().ok_or_else(|| {
                    format!("`{key}`: ${{userHome}} cannot be resolved: HOME is not set")
                })?;
                return path_text(home, key);
            }
            "workspaceFolder" => return path_text(workspace()?, key),
            "workspaceFolderBasename" => {
                let name = workspace()?.file_name().unwrap_or_default();
                return path_text(Path::new(name), key);
            }
            "pathSeparator" | "/" => return Ok("/".into()),
            _ => {}
        }
        let name = inner.split_once(":-").map_or(inner, |(name, _)| name);
        if is_identifier(name) {
            Ok(format!("${{env:{inner}}}"))
        } else {
            Err(format!(
                "`{key}`: unsupported variable ${{{inner}}}; Hearth knows ${{env:NAME}}, ${{env:NAME:-default}} and ${{setting:KEY}}, \
                 and import resolves ${{userHome}} and ${{workspaceFolder}}; write the value by hand"
            ))
        }
    }
}

/// A path as manifest text (the manifest is UTF-8).
fn path_text(path: &Path, key: &str) -> Result<String, String> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("`{key}`: the path {} is not UTF-8", path.display()))
}

/// Warns about the entry's keys that have no Hearth equivalent.
fn ignored_keys(entry: &Map<String, Value>, used: &[&str], warnings: &mut Vec<String>) {
    let ignored: Vec<String> = entry
        .keys()
        .filter(|k| !used.contains(&k.as_str()))
        .map(|k| format!("`{k}`"))
        .collect();
    if !ignored.is_empty() {
        warnings.push(format!(
            "ignored {} (no Hearth equivalent for this server)",
            ignored.join(", ")
        ));
    }
}

/// What a `command` entry is with respect to `mcp-remote`.
#[derive(Debug, PartialEq)]
enum Bridge {
    /// Not `npx [-y] mcp-remote …`.
    No,
    /// `npx [-y] mcp-remote URL [--header "K: V"]…`: the URL and headers.
    Url {
        url: String,
        headers: Vec<(String, String)>,
    },
    /// `mcp-remote`, to keep as a command (a `/sse` URL), with why if it is not that.
    Keep(Option<String>),
}

/// Recognises `npx [-y|--yes] mcp-remote[@version] URL [--header "K: V"]…` (also
/// `--header=K:V`, `--allow-http`, `--debug`, `--silent`, `--transport http-only|http-first`).
fn mcp_remote(command: &str, args: &[String]) -> Bridge {
    if Path::new(command).file_name().and_then(|n| n.to_str()) != Some("npx") {
        return Bridge::No;
    }
    let mut args = args.iter().map(String::as_str).peekable();
    while matches!(args.peek(), Some(&("-y" | "--yes"))) {
        args.next();
    }
    match args.next() {
        Some(package) if package == "mcp-remote" || package.starts_with("mcp-remote@") => {}
        _ => return Bridge::No,
    }
    let Some(url) = args.next() else {
        return Bridge::Keep(Some("no URL after mcp-remote".into()));
    };
    if !is_http(url) {
        return Bridge::Keep(Some(format!("its URL {url:?} is not http:// or https://")));
    }
    if ends_in_sse(url) {
        return Bridge::Keep(None);
    }
    let mut headers = Vec::new();
    while let Some(arg) = args.next() {
        let header = match arg {
            "--header" => args.next(),
            _ if arg.starts_with("--header=") => Some(&arg["--header=".len()..]),
            "--allow-http" | "--debug" | "--silent" => continue,
            "--transport" => match args.next() {
                Some("http-only" | "http-first") => continue,
                other => {
                    return Bridge::Keep(Some(format!(
                        "option `--transport {}` asks for SSE",
                        other.unwrap_or_default()
                    )))
                }
            },
            other => {
                return Bridge::Keep(Some(format!(
                    "mcp-remote option `{other}` has no Hearth equivalent"
                )))
            }
        };
        match header.and_then(|h| h.split_once(':')) {
            Some((name, value)) if !name.trim().is_empty() => {
                headers.push((name.trim().to_string(), value.trim().to_string()));
            }
            _ => {
                return Bridge::Keep(Some(format!(
                    "`--header {}` is not `Name: value`",
                    header.unwrap_or_default()
                )))
            }
        }
    }
    Bridge::Url {
        url: url.to_string(),
        headers,
    }
}

/// mcp-remote expands `${NAME}` in header values from its own environment, which is the
/// entry's `env`: replaces those whose NAME the entry sets, noting which were used.
fn substitute_env(
    text: &str,
    env: &BTreeMap<String, EnvValue>,
    used: &mut BTreeSet<String>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}').map(|end| (&after[..end], end)) {
            Some((name, end)) if env.contains_key(name) => {
                out.push_str(&env[name].text);
                used.insert(name.to_string());
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str("${");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `url` starts with `http://` or `https://` (any case).
fn is_http(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// Whether the URL's path ends in `/sse` (query and fragment aside).
fn ends_in_sse(url: &str) -> bool {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    path.trim_end_matches('/')
        .to_ascii_lowercase()
        .ends_with("/sse")
}

/// `KEY=VALUE` lines of a dotenv file: blank lines and `#` comments skipped, `export `
/// allowed, values in `"…"` (with `\n`, `\"`, `\\`) or `'…'` (literal), or bare (up
/// to a ` #` comment). Errors name the line.
fn parse_env_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut vars = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map_or(line, str::trim_start);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: expected KEY=VALUE", i + 1));
        };
        let key = key.trim();
        if !is_identifier(key) {
            return Err(format!("line {}: {key:?} is not a variable name", i + 1));
        }
        vars.push((key.to_string(), dotenv_value(value.trim())));
    }
    Ok(vars)
}

/// One dotenv value, unquoted.
fn dotenv_value(value: &str) -> String {
    if let Some(inner) = value.strip_prefix('\'') {
        if let Some(end) = inner.find('\'') {
            return inner[..end].to_string();
        }
    } else if let Some(inner) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return out,
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(other) => out.push(other),
                    None => out.push('\\'),
                },
                c => out.push(c),
            }
        }
        // No closing quote: taken as written, below.
    }
    match value.find(" #") {
        Some(comment) => value[..comment].trim_end().to_string(),
        None => value.to_string(),
    }
}

/// A server name → its plugin name, or why it has none.
fn plugin_name(server: &str) -> Result<String, String> {
    let mapped: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let name = mapped.trim_start_matches(['_', '-']);
    if name.is_empty() {
        return Err(if server.is_empty() {
            "an empty server name cannot name a plugin; give it a name in the file".into()
        } else {
            "the name has no ASCII letter or digit to make a plugin name of; rename it in the file"
                .into()
        });
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "its plugin name would be longer than {MAX_NAME_BYTES} characters; rename it in the file"
        ));
    }
    Ok(name.to_string())
}

/// The broker's rule (`manifest::check_name`): 1 to 64 ASCII letters, digits, `_`, `-`,
/// `.`, starting with a letter or digit — never a path.
fn is_plugin_name(name: &str) -> bool {
    name.len() <= MAX_NAME_BYTES
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn is_identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A string, number or boolean as text.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A JSON value's kind, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// "keys found: a, b" (at most 12), or "the object is empty".
fn describe_keys(keys: &[String]) -> String {
    const SHOWN: usize = 12;
    if keys.is_empty() {
        return "the object is empty".into();
    }
    let mut text = format!(
        "keys found: {}",
        keys.iter()
            .take(SHOWN)
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if keys.len() > SHOWN {
        text.push_str(&format!(" and {} more", keys.len() - SHOWN));
    }
    text
}

/// JSON with comments (`//`, `/* */`) and trailing commas → JSON, comments and those
/// commas turned into spaces so that error lines and columns stay right. A leading
/// byte-order mark is dropped.
fn strip_jsonc(text: &str) -> String {
    let bytes = text.strip_prefix('\u{feff}').unwrap_or(text).as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        if in_string {
            out.push(b);
            if b == b'\\' {
                if let Some(n) = next {
                    out.push(n);
                    i += 1;
                }
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
        } else if b == b'"' {
            in_string = true;
            out.push(b);
            i += 1;
        } else if b == b'/' && next == Some(b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b == b'/' && next == Some(b'*') {
            out.extend_from_slice(b"  ");
            i += 2;
            while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                out.push(if bytes[i] == b'\n' { b'\n' } else { b' ' });
                i += 1;
            }
            if i < bytes.len() {
                out.extend_from_slice(b"  ");
                i += 2;
            }
        } else {
            out.push(b);
            i += 1;
        }
    }
    // Trailing commas: a `,` outside strings followed by whitespace and `}` or `]`.
    let mut in_string = false;
    let mut escaped = false;
    for i in 0..out.len() {
        let b = out[i];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b',' {
            let after = out[i + 1..].iter().find(|c| !c.is_ascii_whitespace());
            if matches!(after, Some(b'}' | b']')) {
                out[i] = b' ';
            }
        }
    }
    String::from_utf8(out).expect("only ASCII bytes outside strings were replaced")
}

/// Writes `path` through a temporary file in its folder (mode 0600, fsynced) renamed
/// over it, then fsyncs the folder.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ImportError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(
        ".plugin.json.tmp-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(source) = written {
        let _ = fs::remove_file(&tmp);
        return Err(ImportError::Io {
            path: tmp,
            op: "write",
            source,
        });
    }
    if let Err(source) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(ImportError::Io {
            path: path.to_path_buf(),
            op: "rename into place",
            source,
        });
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| ImportError::Io {
            path: dir.to_path_buf(),
            op: "fsync",
            source,
        })
}

/// Checks that `dir` may be written by [`write()`]: absent, or an MCP plugin and
/// `overwrite`.
fn check_existing(dir: &Path, overwrite: bool) -> Result<(), ImportError> {
    let not_mcp = |found: String| ImportError::NotMcpPlugin {
        dir: dir.to_path_buf(),
        found,
    };
    match fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ImportError::Io {
                path: dir.to_path_buf(),
                op: "inspect",
                source,
            })
        }
        Ok(meta) if !meta.is_dir() => return Err(not_mcp("a file, not a folder".into())),
        Ok(_) => {}
    }
    let manifest = dir.join("plugin.json");
    let text = match fs::read_to_string(&manifest) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(not_mcp("no plugin.json".into()))
        }
        Err(source) => {
            return Err(ImportError::Io {
                path: manifest,
                op: "read",
                source,
            })
        }
    };
    let runtime = serde_json::from_str::<Value>(&text)
        .map(|v| v.get("runtime").and_then(Value::as_str).map(str::to_string));
    match runtime {
        Ok(Some(runtime)) if runtime == "mcp" => {
            if overwrite {
                Ok(())
            } else {
                Err(ImportError::Exists {
                    dir: dir.to_path_buf(),
                })
            }
        }
        Ok(Some(runtime)) => Err(not_mcp(format!("runtime {runtime:?}"))),
        Ok(None) => Err(not_mcp("plugin.json has no `runtime`".into())),
        Err(_) => Err(not_mcp("plugin.json is not valid JSON".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A temp dir standing for the home directory, with helpers to place files in it.
    struct Home {
        dir: tempfile::TempDir,
    }

    impl Home {
        fn new() -> Home {
            Home {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn path(&self) -> &Path {
            self.dir.path()
        }

        /// Writes `rel` under the home dir (creating folders) and returns its path.
        fn file(&self, rel: &str, text: &str) -> PathBuf {
            let path = self.path().join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, text).unwrap();
            path
        }

        /// Writes `rel` and parses it with this home.
        fn parse(&self, rel: &str, text: &str) -> ImportPlan {
            let path = self.file(rel, text);
            parse_with_home(text, &path, Some(self.path().to_path_buf())).unwrap()
        }

        fn parse_err(&self, rel: &str, text: &str) -> String {
            let path = self.file(rel, text);
            parse_with_home(text, &path, Some(self.path().to_path_buf()))
                .unwrap_err()
                .to_string()
        }
    }

    fn server<'a>(plan: &'a ImportPlan, name: &str) -> &'a Value {
        &plan
            .servers
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no server {name} in {plan:#?}"))
            .manifest
    }

    fn skipped<'a>(plan: &'a ImportPlan, server: &str) -> &'a str {
        &plan
            .skipped
            .iter()
            .find(|s| s.server == server)
            .unwrap_or_else(|| panic!("{server} not skipped in {plan:#?}"))
            .reason
    }

    fn names(plan: &ImportPlan) -> Vec<&str> {
        plan.servers.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn claude_desktop_stdio_servers_with_literal_secrets() {
        let home = Home::new();
        let text = r#"{
          "mcpServers": {
            "github": {
              "command": "npx",
              "args": ["-y", "@modelcontextprotocol/server-github"],
              "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret123"}
            },
            "filesystem": {
              "command": "npx",
              "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop", "/Users/me/Downloads"]
            }
          },
          "globalShortcut": "Ctrl+Space"
        }"#;
        let plan = home.parse(".config/Claude/claude_desktop_config.json", text);
        let source = home
            .path()
            .join(".config/Claude/claude_desktop_config.json");
        assert_eq!(names(&plan), ["filesystem", "github"]);
        assert!(
            plan.skipped.is_empty() && plan.warnings.is_empty(),
            "{plan:#?}"
        );
        assert_eq!(
            server(&plan, "github"),
            &json!({
                "name": "github",
                "description": format!("MCP server github (imported from {})", source.display()),
                "runtime": "mcp",
                "command": ["npx", "-y", "@modelcontextprotocol/server-github"],
                "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret123"}
            })
        );
        let fs_server = server(&plan, "filesystem");
        assert_eq!(fs_server["command"][3], "/Users/me/Desktop");
        assert!(fs_server.get("env").is_none() && fs_server.get("url").is_none());
        assert_eq!(plan.servers[1].server, "github");
    }

    #[test]
    fn claude_code_project_file_variables_http_and_sse() {
        let home = Home::new();
        let text = r#"{
          "mcpServers": {
            "api": {
              "type": "http",
              "url": "${API_BASE_URL:-https://api.example.com}/mcp",
              "headers": {"Authorization": "Bearer ${API_KEY}", "X-Debug": "${DEBUG:-false}"}
            },
            "legacy": {"type": "sse", "url": "https://old.example.com/sse"},
            "local": {
              "type": "stdio",
              "command": "${HOME}/bin/server",
              "args": ["--token", "${TOKEN}", "--level=${LEVEL:-}", "$NOT_A_REFERENCE", "${unclosed"],
              "env": {"CACHE": "${XDG_CACHE_HOME:-/tmp/cache}"}
            }
          }
        }"#;
        let plan = home.parse("proj/.mcp.json", text);
        assert_eq!(names(&plan), ["api", "local"]);
        let api = server(&plan, "api");
        assert_eq!(
            api["url"],
            "${env:API_BASE_URL:-https://api.example.com}/mcp"
        );
        assert_eq!(
            api["headers"],
            json!({"Authorization": "Bearer ${env:API_KEY}", "X-Debug": "${env:DEBUG:-false}"})
        );
        assert!(api.get("command").is_none());
        let local = server(&plan, "local");
        assert_eq!(
            local["command"],
            json!([
                "${env:HOME}/bin/server",
                "--token",
                "${env:TOKEN}",
                "--level=${env:LEVEL:-}",
                "$NOT_A_REFERENCE",
                "${unclosed"
            ])
        );
        assert_eq!(
            local["env"],
            json!({"CACHE": "${env:XDG_CACHE_HOME:-/tmp/cache}"})
        );

        let reason = skipped(&plan, "legacy");
        assert!(
            reason.contains("\"sse\"") && reason.contains("Streamable HTTP"),
            "{reason}"
        );
        assert!(
            reason.contains(r#""args": ["-y", "mcp-remote", "https://old.example.com/sse"]"#),
            "{reason}"
        );
    }

    #[test]
    fn claude_json_user_and_project_servers() {
        let home = Home::new();
        let text = r#"{
          "numStartups": 12,
          "mcpServers": {
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}
          },
          "projects": {
            "/home/me/a": {
              "allowedTools": [],
              "mcpServers": {
                "memory": {"command": "node", "args": ["other.js"]},
                "db": {"command": "uvx", "args": ["mcp-server-sqlite", "--db-path", "a.db"]}
              }
            },
            "/home/me/b": {
              "mcpServers": {
                "db": {"command": "uvx", "args": ["mcp-server-sqlite", "--db-path", "a.db"]},
                "search": {"type": "http", "url": "https://search.example.com/mcp"}
              }
            },
            "/home/me/c": {"mcpServers": {}},
            "/home/me/d": {"history": []}
          }
        }"#;
        let plan = home.parse(".claude.json", text);
        assert_eq!(names(&plan), ["memory", "db", "search"]);
        assert_eq!(
            server(&plan, "memory")["command"][2],
            "@modelcontextprotocol/server-memory"
        );
        let db = server(&plan, "db");
        assert!(
            db["description"]
                .as_str()
                .unwrap()
                .starts_with("MCP server db of project /home/me/a (imported from "),
            "{db}"
        );
        // A different `memory` in project a: warned; the same `db` in project b: silent.
        assert_eq!(plan.warnings.len(), 1, "{:#?}", plan.warnings);
        let warning = &plan.warnings[0];
        assert!(
            warning.contains("\"memory\"")
                && warning.contains("project /home/me/a")
                && warning.contains("`mcpServers` comes first"),
            "{warning}"
        );
        assert!(plan.skipped.is_empty());
    }

    #[test]
    fn claude_json_with_projects_only() {
        let home = Home::new();
        let plan = home.parse(
            ".claude.json",
            r#"{"projects": {"/p": {"mcpServers": {"x": {"command": "x"}}}}}"#,
        );
        assert_eq!(names(&plan), ["x"]);
        let err = home.parse_err(
            ".claude.json",
            r#"{"projects": {"/p": {"mcpServers": ["x"]}}}"#,
        );
        assert!(
            err.contains("`projects./p.mcpServers` is an array"),
            "{err}"
        );
    }

    #[test]
    fn cursor_env_user_home_workspace_remote_and_disabled() {
        let home = Home::new();
        let text = r#"{
          "mcpServers": {
            "notes": {
              "command": "${userHome}/.local/bin/notes-mcp",
              "args": ["--root", "${workspaceFolder}/notes", "--name", "${workspaceFolderBasename}"],
              "env": {"NOTES_TOKEN": "${env:NOTES_TOKEN}", "SEP": "a${pathSeparator}b${/}c"}
            },
            "remote": {
              "url": "https://mcp.example.com/mcp",
              "headers": {"API_KEY": "${env:EXAMPLE_KEY}", "X-Tenant": "acme"}
            },
            "old": {"command": "old-server", "disabled": true}
          }
        }"#;
        let plan = home.parse("work/app/.cursor/mcp.json", text);
        let workspace = home.path().join("work/app");
        assert_eq!(names(&plan), ["notes", "remote"]);
        let notes = server(&plan, "notes");
        assert_eq!(
            notes["command"],
            json!([
                format!("{}/.local/bin/notes-mcp", home.path().display()),
                "--root",
                format!("{}/notes", workspace.display()),
                "--name",
                "app"
            ])
        );
        assert_eq!(
            notes["env"],
            json!({"NOTES_TOKEN": "${env:NOTES_TOKEN}", "SEP": "a/b/c"})
        );
        assert_eq!(
            server(&plan, "remote"),
            &json!({
                "name": "remote",
                "description": format!(
                    "MCP server remote (imported from {})",
                    workspace.join(".cursor/mcp.json").display()
                ),
                "runtime": "mcp",
                "url": "https://mcp.example.com/mcp",
                "headers": {"API_KEY": "${env:EXAMPLE_KEY}", "X-Tenant": "acme"}
            })
        );
        assert!(skipped(&plan, "old").contains("disabled"));
        assert_eq!(
            plan.skipped[0].to_string(),
            format!("server \"old\": {}", plan.skipped[0].reason)
        );
    }

    #[test]
    fn workspace_folder_is_unknown_outside_a_project_dot_folder() {
        let home = Home::new();
        let text = r#"{"mcpServers": {"notes": {"command": "n", "args": ["${workspaceFolder}"]}}}"#;
        // The user-level Cursor file: the workspace is whatever Cursor has open.
        let plan = home.parse(".cursor/mcp.json", text);
        let reason = skipped(&plan, "notes");
        assert!(
            reason.contains("`args[0]`")
                && reason.contains("${workspaceFolder}")
                && reason.contains("user-level"),
            "{reason}"
        );
        let plan = home.parse("proj/.mcp.json", text);
        let reason = skipped(&plan, "notes");
        assert!(
            reason.contains("only for a project's .vscode/mcp.json or .cursor/mcp.json"),
            "{reason}"
        );
        assert!(plan.servers.is_empty());
    }

    #[test]
    fn user_home_without_home_is_a_server_error() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"{"mcpServers": {"a": {"command": "${userHome}/a"}, "b": {"command": "b"}}}"#;
        let plan = parse_with_home(text, &dir.path().join("c.json"), None).unwrap();
        assert_eq!(names(&plan), ["b"]);
        assert!(skipped(&plan, "a").contains("HOME is not set"));
    }

    #[test]
    fn vscode_servers_inputs_env_file_and_workspace() {
        let home = Home::new();
        home.file(
            "repo/.env",
            "# secrets\nexport DB_URL=postgres://localhost/db\nQUOTED=\"a b\\n\" # note\nSINGLE='x # y'\nBARE=v # comment\nOVERRIDDEN=from-file\n\n",
        );
        home.file("repo/.vscode/local.env", "LOCAL=1\n");
        let text = r#"{
          // VS Code's file is JSONC.
          "inputs": [
            {"type": "promptString", "id": "github_token", "description": "GitHub Personal Access Token", "password": true}
          ],
          "servers": {
            "github": {
              "type": "http",
              "url": "https://api.githubcopilot.com/mcp/",
              "headers": {"Authorization": "Bearer ${input:github_token}"}
            },
            "db": {
              "type": "stdio",
              "command": "uvx",
              "args": ["mcp-db", "--root", "${workspaceFolder}"],
              "envFile": "${workspaceFolder}/.env",
              "env": {"OVERRIDDEN": "from-env", "PORT": 5432, "UNSET": null},
              "cwd": "${workspaceFolder}/tools",
            },
            "local": {"type": "stdio", "command": "./run.sh", "envFile": "local.env", "cwd": "sub", "dev": {"watch": "src/**"}},
            "ghost": {"type": "stdio", "command": "x", "env": {"T": "${input:missing}"}},
          },
        }"#;
        let plan = home.parse("repo/.vscode/mcp.json", text);
        let repo = home.path().join("repo");
        assert_eq!(names(&plan), ["db", "local"]);

        let reason = skipped(&plan, "github");
        assert!(
            reason.contains("`headers.Authorization`")
                && reason.contains("${input:github_token}")
                && reason.contains("\"GitHub Personal Access Token\"")
                && reason.contains("by hand"),
            "{reason}"
        );
        assert!(skipped(&plan, "ghost").contains("not declared in `inputs`"));

        assert_eq!(
            server(&plan, "db"),
            &json!({
                "name": "db",
                "description": format!(
                    "MCP server db (imported from {})",
                    repo.join(".vscode/mcp.json").display()
                ),
                "runtime": "mcp",
                "command": ["uvx", "mcp-db", "--root", repo.to_str().unwrap()],
                "env": {
                    "DB_URL": "postgres://localhost/db",
                    "QUOTED": "a b\n",
                    "SINGLE": "x # y",
                    "BARE": "v",
                    "OVERRIDDEN": "from-env",
                    "PORT": "5432"
                },
                "cwd": format!("{}/tools", repo.display())
            })
        );
        let local = server(&plan, "local");
        assert_eq!(local["env"], json!({"LOCAL": "1"}));
        assert_eq!(
            local["cwd"],
            repo.join("sub").to_str().unwrap(),
            "relative cwd: from the workspace"
        );
        assert_eq!(local["command"], json!(["./run.sh"]));
        assert!(
            plan.warnings
                .iter()
                .any(|w| w.starts_with("server \"local\": ignored `dev`")),
            "{:#?}",
            plan.warnings
        );
    }

    #[test]
    fn vscode_settings_mcp_section() {
        let home = Home::new();
        let plan = home.parse(
            ".config/Code/User/settings.json",
            r#"{"editor.fontSize": 14, "mcp": {"inputs": [{"id": "k", "description": "Key"}], "servers": {"s": {"command": "s", "env": {"K": "${input:k}"}}}}}"#,
        );
        assert!(plan.servers.is_empty());
        assert!(skipped(&plan, "s").contains("(\"Key\")"));
    }

    #[test]
    fn env_file_problems_skip_the_server() {
        let home = Home::new();
        home.file("p/.vscode/bad.env", "OK=1\nthis line has no equals\n");
        home.file("p/.vscode/badkey.env", "1X=2\n");
        let text = r#"{"mcpServers": {
            "bad": {"command": "x", "envFile": "bad.env"},
            "badkey": {"command": "x", "envFile": "badkey.env"},
            "missing": {"command": "x", "envFile": "nope.env"},
            "reference": {"command": "x", "envFile": "${env:ENV_FILE}"}
        }}"#;
        let plan = home.parse("p/.vscode/mcp.json", text);
        assert!(plan.servers.is_empty());
        let bad = skipped(&plan, "bad");
        assert!(
            bad.contains("bad.env") && bad.contains("line 2: expected KEY=VALUE"),
            "{bad}"
        );
        assert!(skipped(&plan, "badkey").contains("line 1: \"1X\" is not a variable name"));
        let missing = skipped(&plan, "missing");
        assert!(
            missing.contains("nope.env") && missing.contains("cannot read"),
            "{missing}"
        );
        assert!(skipped(&plan, "reference").contains("read at import"));
    }

    #[test]
    fn env_file_value_with_a_reference_is_kept_with_a_warning() {
        let home = Home::new();
        home.file("p/.env", "A=${B}\n");
        let plan = home.parse(
            "p/c.json",
            r#"{"mcpServers": {"x": {"command": "x", "envFile": ".env"}}}"#,
        );
        assert_eq!(server(&plan, "x")["env"], json!({"A": "${B}"}));
        assert!(
            plan.warnings[0].contains("env A from `envFile`"),
            "{:?}",
            plan.warnings
        );
    }

    #[test]
    fn dotenv_values() {
        assert_eq!(dotenv_value("plain"), "plain");
        assert_eq!(dotenv_value("a#b"), "a#b");
        assert_eq!(dotenv_value("a #b"), "a");
        assert_eq!(dotenv_value(r#""x \"y\" \\ z""#), r#"x "y" \ z"#);
        assert_eq!(dotenv_value(r#""unterminated"#), r#""unterminated"#);
        assert_eq!(dotenv_value("'it''s'"), "it");
        assert_eq!(dotenv_value(""), "");
    }

    #[test]
    fn mcp_remote_bridge_becomes_a_url_server() {
        let home = Home::new();
        let text = r#"{"mcpServers": {
            "atlassian": {"command": "npx", "args": ["-y", "mcp-remote", "https://mcp.atlassian.com/v1/mcp"]},
            "linear": {
              "command": "npx",
              "args": ["mcp-remote@0.1.29", "https://mcp.linear.app/mcp", "--header", "Authorization:${AUTH_HEADER}",
                       "--header=X-Team: core", "--transport", "http-first", "--debug"],
              "env": {"AUTH_HEADER": "Bearer lin_123", "NODE_OPTIONS": "--max-old-space-size=512"}
            },
            "envref": {
              "command": "/usr/local/bin/npx",
              "args": ["--yes", "mcp-remote", "https://x.example.com/mcp", "--header", "Authorization: Bearer ${TOKEN}"]
            },
            "sse": {"command": "npx", "args": ["-y", "mcp-remote", "https://old.example.com/sse?k=1"]},
            "oauth": {"command": "npx", "args": ["-y", "mcp-remote", "https://y.example.com/mcp", "3334", "--static-oauth-client-info", "{}"]},
            "sseonly": {"command": "npx", "args": ["-y", "mcp-remote", "https://z.example.com/mcp", "--transport", "sse-only"]},
            "other": {"command": "npx", "args": ["-y", "some-server", "https://z.example.com/mcp"]}
        }}"#;
        let plan = home.parse("c/claude_desktop_config.json", text);
        assert!(plan.skipped.is_empty(), "{plan:#?}");

        let atlassian = server(&plan, "atlassian");
        assert_eq!(atlassian["url"], "https://mcp.atlassian.com/v1/mcp");
        assert!(atlassian.get("command").is_none() && atlassian.get("headers").is_none());
        let linear = server(&plan, "linear");
        assert_eq!(linear["url"], "https://mcp.linear.app/mcp");
        assert_eq!(
            linear["headers"],
            json!({"Authorization": "Bearer lin_123", "X-Team": "core"})
        );
        assert!(linear.get("env").is_none());
        assert_eq!(
            server(&plan, "envref")["headers"],
            json!({"Authorization": "Bearer ${env:TOKEN}"})
        );
        // Kept as commands.
        assert_eq!(
            server(&plan, "sse")["command"],
            json!(["npx", "-y", "mcp-remote", "https://old.example.com/sse?k=1"])
        );
        assert_eq!(
            server(&plan, "oauth")["command"][3],
            "https://y.example.com/mcp"
        );
        assert_eq!(server(&plan, "sseonly")["command"][4], "--transport");
        assert_eq!(server(&plan, "other")["command"][1], "-y");

        let warning = |name: &str| {
            plan.warnings
                .iter()
                .filter(|w| w.starts_with(&format!("server {name:?}:")))
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        };
        let w = warning("atlassian");
        assert!(
            w.contains("direct Streamable HTTP connection") && w.contains("OAuth"),
            "{w}"
        );
        let w = warning("linear");
        assert!(
            w.contains("env NODE_OPTIONS") && !w.contains("OAuth"),
            "{w}"
        );
        assert!(warning("sse").is_empty(), "a /sse bridge is kept silently");
        assert!(warning("oauth").contains("option `3334`"));
        assert!(warning("sseonly").contains("--transport sse-only"));
        assert!(warning("other").is_empty());
    }

    #[test]
    fn mcp_remote_recognition() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            mcp_remote("node", &args(&["mcp-remote", "https://a/mcp"])),
            Bridge::No
        );
        assert_eq!(mcp_remote("npx", &args(&["-y"])), Bridge::No);
        assert_eq!(
            mcp_remote("npx", &args(&["mcp-remote"])),
            Bridge::Keep(Some("no URL after mcp-remote".into()))
        );
        assert!(matches!(
            mcp_remote("npx", &args(&["mcp-remote", "ftp://a"])),
            Bridge::Keep(Some(_))
        ));
        assert!(matches!(
            mcp_remote("npx", &args(&["mcp-remote", "https://a/mcp", "--header", "novalue"])),
            Bridge::Keep(Some(why)) if why.contains("not `Name: value`")
        ));
        assert!(matches!(
            mcp_remote("npx", &args(&["mcp-remote", "https://a/mcp", "--header"])),
            Bridge::Keep(Some(_))
        ));
        assert_eq!(
            mcp_remote("npx", &args(&["-y", "mcp-remote", "https://a/SSE/"])),
            Bridge::Keep(None)
        );
        assert_eq!(
            mcp_remote(
                "npx",
                &args(&[
                    "-y",
                    "mcp-remote",
                    "http://localhost:8080/mcp",
                    "--allow-http"
                ])
            ),
            Bridge::Url {
                url: "http://localhost:8080/mcp".into(),
                headers: vec![]
            }
        );
    }

    #[test]
    fn remote_url_servers() {
        let home = Home::new();
        let text = r#"{"mcpServers": {
            "a": {"url": "https://a.example.com/sse"},
            "b": {"type": "streamable-http", "url": "https://b.example.com/mcp"},
            "c": {"type": "streamableHttp", "url": "${env:C_URL}", "headers": {"N": 1}},
            "d": {"type": "http", "url": "unix:///tmp/d.sock#/mcp"},
            "e": {"type": "http", "url": 5},
            "f": {"url": "https://f.example.com/mcp", "headers": ["x"]},
            "g": {"url": "https://g.example.com/mcp", "headers": {"X": "${config:foo}"}}
        }}"#;
        let plan = home.parse("p/mcp.json", text);
        assert_eq!(names(&plan), ["a", "b", "c"]);
        assert!(plan
            .warnings
            .iter()
            .any(|w| w.starts_with("server \"a\":") && w.contains("ends in /sse")));
        assert_eq!(server(&plan, "c")["url"], "${env:C_URL}");
        assert_eq!(server(&plan, "c")["headers"], json!({"N": "1"}));
        assert!(skipped(&plan, "d").contains("not an http:// or https:// URL"));
        assert!(skipped(&plan, "e").contains("`url`: expected a string, got a number"));
        assert!(skipped(&plan, "f").contains("`headers`: expected an object, got an array"));
        let g = skipped(&plan, "g");
        assert!(
            g.contains("`headers.X`: unsupported variable ${config:foo}"),
            "{g}"
        );
    }

    #[test]
    fn entry_shape_problems_skip_only_that_server() {
        let home = Home::new();
        let text = r#"{"mcpServers": {
            "both": {"command": "x", "url": "https://x"},
            "neither": {"args": ["x"]},
            "unknown": {"type": "websocket", "url": "wss://x"},
            "typenum": {"type": 1, "command": "x"},
            "stdiourl": {"type": "stdio", "url": "https://x"},
            "httpcmd": {"type": "http", "command": "x"},
            "badarg": {"command": "x", "args": ["a", {"b": 1}]},
            "argsobj": {"command": "x", "args": {"a": 1}},
            "badenv": {"command": "x", "env": {"A": ["b"]}},
            "emptycmd": {"command": " "},
            "cmdnum": {"command": 3},
            "badcwd": {"command": "x", "cwd": 1},
            "refcwd": {"command": "x", "cwd": "${HOME}/src"},
            "ok": {"command": "ok", "args": [1, true, "s"], "disabled": false, "cwd": "/srv", "timeout": 30, "autoApprove": []}
        }}"#;
        let plan = home.parse("p/mcp.json", text);
        assert_eq!(names(&plan), ["ok"]);
        let expect = [
            ("both", "has both `command` and `url`"),
            ("neither", "has neither `command`"),
            ("unknown", "unknown `type` \"websocket\""),
            ("typenum", "`type` must be a string, got a number"),
            ("stdiourl", "`type` is \"stdio\" but there is a `url`"),
            ("httpcmd", "`type` is \"http\" but there is a `command`"),
            ("badarg", "`args[1]`: expected a string, got an object"),
            ("argsobj", "`args`: expected an array, got an object"),
            ("badenv", "`env.A`: expected a string, got an array"),
            ("emptycmd", "`command` is empty"),
            ("cmdnum", "`command`: expected a string, got a number"),
            ("badcwd", "`cwd`: expected a string, got a number"),
            (
                "refcwd",
                "`cwd` \"${env:HOME}/src\" must be a path known now",
            ),
        ];
        for (server, message) in expect {
            let reason = skipped(&plan, server);
            assert!(reason.contains(message), "{server}: {reason}");
        }
        assert_eq!(plan.skipped.len(), expect.len());
        let ok = server(&plan, "ok");
        assert_eq!(ok["command"], json!(["ok", "1", "true", "s"]));
        assert_eq!(ok["cwd"], "/srv");
        assert_eq!(
            plan.warnings,
            ["server \"ok\": ignored `autoApprove`, `timeout` (no Hearth equivalent for this server)"]
        );
    }

    #[test]
    fn names_are_sanitised_and_clashes_refused() {
        let home = Home::new();
        let long = "x".repeat(65);
        let text = format!(
            r#"{{"mcpServers": {{
                "": {{"command": "a"}},
                "!!!": {{"command": "a"}},
                "@scope/Server.Name": {{"command": "a"}},
                "GitHub": {{"command": "a"}},
                "My Server!": {{"command": "a"}},
                "github": {{"command": "b"}},
                "{long}": {{"command": "a"}}
            }}}}"#
        );
        let plan = home.parse("p/mcp.json", &text);
        assert_eq!(names(&plan), ["scope_server_name", "github", "my_server_"]);
        assert!(skipped(&plan, "").contains("empty server name"));
        assert!(skipped(&plan, "!!!").contains("no ASCII letter or digit"));
        assert!(skipped(&plan, &long).contains("longer than 64"));
        let clash = skipped(&plan, "github");
        assert!(
            clash.contains("plugin name \"github\" is already taken by server \"GitHub\""),
            "{clash}"
        );
        assert_eq!(plugin_name("a-B_c").unwrap(), "a-b_c");
        assert_eq!(plugin_name("-x").unwrap(), "x");
        assert_eq!(plugin_name("日本x").unwrap(), "x");
        for s in &plan.servers {
            assert!(is_plugin_name(&s.name), "{}", s.name);
        }
    }

    #[test]
    fn variables_rewritten() {
        let home = Home::new();
        let file = SourceFile {
            path: home.path().join("w/.vscode/mcp.json"),
            dir: home.path().join("w/.vscode"),
            home: Some(home.path().to_path_buf()),
            workspace: Ok(home.path().join("w")),
            inputs: BTreeMap::new(),
        };
        let ok = |text: &str| file.rewrite(text, "k").unwrap();
        assert_eq!(ok("plain"), "plain");
        assert_eq!(
            ok("${A}${B:-x}-${env:C}${env:D:-y}"),
            "${env:A}${env:B:-x}-${env:C}${env:D:-y}"
        );
        assert_eq!(ok("${_x1}"), "${env:_x1}");
        assert_eq!(ok("${setting:api_key}"), "${setting:api_key}");
        assert_eq!(ok("${userHome}/x"), format!("{}/x", home.path().display()));
        assert_eq!(
            ok("${workspaceFolder}"),
            home.path().join("w").to_str().unwrap()
        );
        assert_eq!(ok("$A ${"), "$A ${");
        assert_eq!(ok("${A:-http://x}"), "${env:A:-http://x}");
        let err = |text: &str| file.rewrite(text, "k").unwrap_err();
        assert!(err("${config:x}").contains("`k`: unsupported variable ${config:x}"));
        assert!(err("${1A}").contains("unsupported"));
        assert!(err("${}").contains("unsupported"));
        assert!(err("${input:x}").contains("`k` uses ${input:x}"));
    }

    #[test]
    fn jsonc_comments_and_trailing_commas() {
        let text = "\u{feff}{\n  // a comment\n  \"url\": \"https://x//y\", /* block\n comment */ \"s\": \"a,}\\\" // no\",\n  \"list\": [1, 2,],\n}\n";
        let value: Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        assert_eq!(
            value,
            json!({"url": "https://x//y", "s": "a,}\" // no", "list": [1, 2]})
        );
        // Positions survive: the error is on line 3.
        let err = serde_json::from_str::<Value>(&strip_jsonc("{\n/* x\n*/ \"a\" 1}")).unwrap_err();
        assert_eq!((err.line(), err.column()), (3, 8));
    }

    #[test]
    fn whole_file_errors_name_the_file() {
        let home = Home::new();
        let path = home.path().join("p/bad.json");
        let err = home.parse_err(
            "p/bad.json",
            "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"\n  }\n",
        );
        assert!(
            err.starts_with(&format!("{}: not valid JSON: ", path.display())),
            "{err}"
        );
        assert!(err.contains("line 5 column 0"), "{err}");

        let err = home.parse_err("p/bad.json", "[1]");
        assert!(err.contains("the top level is an array"), "{err}");

        let err = home.parse_err("p/bad.json", r#"{"theme": "dark", "servers2": {}}"#);
        assert_eq!(
            err,
            format!(
                "{}: no MCP servers: expected a `mcpServers` key (Claude Desktop, Claude Code, Cursor) or `servers` (VS Code); keys found: `servers2`, `theme`",
                path.display()
            )
        );
        let err = home.parse_err("p/bad.json", "{}");
        assert!(err.ends_with("; the object is empty"), "{err}");
        let many: Vec<String> = (0..15).map(|i| format!("\"k{i:02}\": 1")).collect();
        let err = home.parse_err("p/bad.json", &format!("{{{}}}", many.join(",")));
        assert!(err.ends_with("`k11` and 3 more"), "{err}");

        let err = home.parse_err("p/bad.json", r#"{"mcpServers": ["a"]}"#);
        assert!(
            err.ends_with("`mcpServers` is an array, expected an object of servers by name"),
            "{err}"
        );

        let err = home.parse_err(
            "p/bad.json",
            r#"{"servers": {"ok": {"command": "x"}, "weird": "npx foo"}}"#,
        );
        assert_eq!(
            err,
            format!(
                "{}: server \"weird\" in `servers`: expected an object, got a string",
                path.display()
            )
        );
    }

    #[test]
    fn parse_makes_a_relative_source_absolute() {
        let plan = parse(
            r#"{"mcpServers": {"a": {"command": "a"}}}"#,
            Path::new("rel/mcp.json"),
        )
        .unwrap();
        let description = plan.servers[0].manifest["description"].as_str().unwrap();
        let expected = std::env::current_dir().unwrap().join("rel/mcp.json");
        assert!(
            description.ends_with(&format!("(imported from {})", expected.display())),
            "{description}"
        );
    }

    fn plan_of(text: &str, dir: &Path) -> ImportPlan {
        parse_with_home(text, &dir.join("mcp.json"), None).unwrap()
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn write_creates_private_plugin_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let plan = plan_of(
            r#"{"mcpServers": {"github": {"command": "npx", "env": {"T": "secret"}}, "api": {"url": "https://a/mcp"}}}"#,
            tmp.path(),
        );
        let plugins = tmp.path().join("data/plugins");
        let written = write(&plan, &plugins, false).unwrap();
        assert_eq!(
            written,
            [
                plugins.join("api/plugin.json"),
                plugins.join("github/plugin.json")
            ]
        );
        for (path, imported) in written.iter().zip(&plan.servers) {
            let text = fs::read_to_string(path).unwrap();
            assert!(
                text.ends_with("}\n") && text.contains("\n  \"runtime\": \"mcp\""),
                "{text}"
            );
            assert_eq!(
                serde_json::from_str::<Value>(&text).unwrap(),
                imported.manifest
            );
            assert_eq!(mode(path), 0o600);
            assert_eq!(mode(path.parent().unwrap()), 0o700);
        }
        let leftovers: Vec<_> = fs::read_dir(plugins.join("github"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, ["plugin.json"], "no temporary files left");
    }

    #[test]
    fn write_replaces_an_mcp_plugin_only_with_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let plugins = tmp.path().join("plugins");
        let first = plan_of(
            r#"{"mcpServers": {"a": {"command": "one"}, "b": {"command": "b"}}}"#,
            tmp.path(),
        );
        write(&first, &plugins, false).unwrap();
        fs::set_permissions(plugins.join("a"), fs::Permissions::from_mode(0o755)).unwrap();

        let second = plan_of(
            r#"{"mcpServers": {"a": {"command": "two"}, "c": {"command": "c"}}}"#,
            tmp.path(),
        );
        let err = write(&second, &plugins, false).unwrap_err();
        assert!(matches!(err, ImportError::Exists { .. }));
        assert_eq!(
            err.to_string(),
            format!(
                "{}: an MCP plugin of that name already exists; pass --force to replace it",
                plugins.join("a").display()
            )
        );
        assert!(
            !plugins.join("c").exists(),
            "nothing is written when one server cannot be"
        );

        write(&second, &plugins, true).unwrap();
        let a: Value =
            serde_json::from_str(&fs::read_to_string(plugins.join("a/plugin.json")).unwrap())
                .unwrap();
        assert_eq!(a["command"], json!(["two"]));
        assert_eq!(mode(&plugins.join("a")), 0o700);
        assert!(plugins.join("b/plugin.json").exists() && plugins.join("c/plugin.json").exists());
    }

    #[test]
    fn write_never_touches_other_plugins() {
        let tmp = tempfile::tempdir().unwrap();
        let plugins = tmp.path().join("plugins");
        let plan = plan_of(
            r#"{"mcpServers": {"calc": {"command": "x"}, "bare": {"command": "x"}, "file": {"command": "x"}, "broken": {"command": "x"}, "noruntime": {"command": "x"}}}"#,
            tmp.path(),
        );
        let cases = [
            (
                "calc",
                Some(r#"{"name": "calc", "runtime": "python"}"#),
                "runtime \"python\"",
            ),
            ("bare", None, "no plugin.json"),
            ("broken", Some("{not json"), "plugin.json is not valid JSON"),
            (
                "noruntime",
                Some(r#"{"entry": "main.py"}"#),
                "plugin.json has no `runtime`",
            ),
        ];
        for (name, manifest, found) in cases {
            let dir = plugins.join(name);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("main.py"), "print(1)\n").unwrap();
            if let Some(manifest) = manifest {
                fs::write(dir.join("plugin.json"), manifest).unwrap();
            }
            for overwrite in [false, true] {
                let err = write(&plan, &plugins, overwrite).unwrap_err();
                assert!(matches!(err, ImportError::NotMcpPlugin { .. }), "{err}");
                let text = err.to_string();
                assert!(
                    text.starts_with(&format!(
                        "{}: exists and is not an MCP plugin ({found}); left untouched",
                        dir.display()
                    )),
                    "{text}"
                );
            }
            fs::remove_dir_all(&dir).unwrap();
        }
        fs::create_dir_all(&plugins).unwrap();
        fs::write(plugins.join("file"), "x").unwrap();
        let err = write(&plan, &plugins, true).unwrap_err().to_string();
        assert!(err.contains("(a file, not a folder)"), "{err}");
        assert_eq!(fs::read_to_string(plugins.join("file")).unwrap(), "x");
        assert_eq!(
            fs::read_dir(&plugins).unwrap().count(),
            1,
            "nothing else written"
        );
    }

    #[test]
    fn write_checks_hand_made_plans() {
        let tmp = tempfile::tempdir().unwrap();
        let imported = |name: &str| Imported {
            name: name.into(),
            server: name.into(),
            manifest: json!({"name": name, "runtime": "mcp", "url": "https://x"}),
        };
        for bad in ["../x", "", ".hidden", "a/b"] {
            let plan = ImportPlan {
                servers: vec![imported(bad)],
                ..ImportPlan::default()
            };
            let err = write(&plan, tmp.path(), true).unwrap_err();
            assert!(
                matches!(err, ImportError::InvalidName { .. }),
                "{bad}: {err}"
            );
        }
        let plan = ImportPlan {
            servers: vec![imported("a"), imported("a")],
            ..ImportPlan::default()
        };
        assert_eq!(
            write(&plan, tmp.path(), true).unwrap_err().to_string(),
            "two servers are both named \"a\""
        );
        assert_eq!(
            write(&ImportPlan::default(), &tmp.path().join("new"), false).unwrap(),
            Vec::<PathBuf>::new()
        );
        assert!(
            tmp.path().join("new").is_dir(),
            "the plugins folder is created"
        );
    }

    #[test]
    fn specs_from_file_reads_the_data_dir_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("mcp.json");
        assert_eq!(
            specs_from_file(&path).unwrap(),
            ImportPlan::default(),
            "missing = no servers"
        );
        fs::write(&path, r#"{"mcpServers": {"w": {"url": "https://w/mcp", "headers": {"Authorization": "Bearer ${setting:w_token}"}}}}"#).unwrap();
        let plan = specs_from_file(&path).unwrap();
        assert_eq!(
            server(&plan, "w")["headers"]["Authorization"],
            "Bearer ${setting:w_token}"
        );
        fs::write(&path, "{\"mcpServers\": ").unwrap();
        let err = specs_from_file(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}: not valid JSON", path.display())),
            "{err}"
        );
        let err = specs_from_file(tmp.path()).unwrap_err();
        assert!(matches!(err, ImportError::Read { .. }), "a folder: {err}");
    }
}
