//! Plugins on disk: `<plugins_dir>/<name>/plugin.json` (Cyrene's manifest, extended)
//! and runtime inference for directories without one.
//!
//! Shape (every field optional):
//! ```json
//! { "name": "calculator", "version": "1.0.0", "author": "…", "description": "…",
//!   "runtime": "python", "entry": "main.py", "args": [], "env": {},
//!   "python": "/path/to/python3", "node": "/path/to/node",
//!   "restart": {"max_restarts": 3, "window_s": 300, "backoff_initial_ms": 200, "backoff_max_ms": 30000},
//!   "startup_timeout_s": 10, "call_timeout_s": 60, "max_total_s": 600,
//!   "ping_interval_ms": 2000, "hung_timeout_ms": 10000, "max_concurrency": 0,
//!   "capabilities": ["memory", "knowledge", "llm", "input", "settings_cross", "settings_core"],
//!   "env_passthrough": ["AWS_PROFILE", "MYAPP_*"], "allow_loader_env": false,
//!   "sandbox": {"read": ["~/models"], "write": ["/srv/out"], "net_connect": ["api.example.com:443"]},
//!   "build": ["go", "build", "-buildvcs=false", "-o", "bin/plugin", "."], "build_timeout_s": 600 }
//! ```
//!
//! Trust: the manifest is trusted as code is — it says what runs. A relative `entry`
//! must stay inside the plugin folder (symlinks resolved); an absolute one may be
//! anywhere (its folder becomes readable in the sandbox). `env` may not set the
//! session variables the broker sets (`HEARTH_ADDR`, `HEARTH_PLUGIN`, `HEARTH_TOKEN`,
//! `HEARTH_TOKEN_FD`, `HEARTH_PLUGIN_DATA`), nor the dynamic loader's `LD_*` variables
//! unless `"allow_loader_env": true`. `env_passthrough` names broker environment
//! variables the plugin also gets (a trailing `*` matches a prefix); everything else in
//! the broker's environment stays out (see `supervisor::process::BASE_ENV`).
//!
//! `sandbox` is `true` (the default), `false` (run unconfined, logged as a warning) or
//! an object widening it: `read` and `write` paths (relative to the plugin folder, `~/`
//! for the home dir) and `net_connect`, the only `host:port`s it may open TCP
//! connections to (Landlock enforces the ports only; absent = any).
//!
//! `max_concurrency` caps the plugin's calls in flight at once — tools, stage hooks
//! and event handlers together, across all conversations; the broker queues calls
//! beyond it (each waits at most its timeout). 0 or absent = no cap; 1 = one call at a
//! time, for plugins that are not safe to call concurrently.
//!
//! `capabilities` says which host services the plugin may call (see
//! [`CAPABILITIES`]); without the field a plugin gets [`DEFAULT_CAPABILITIES`].
//!
//! `build` is a program and its arguments (no shell) that produce the entry, run in
//! the plugin folder before a start when the entry is missing or older than the newest
//! source file (see `supervisor::build`); `build_timeout_s` bounds it (default
//! [`DEFAULT_BUILD_TIMEOUT_S`]). With `build`, `runtime` must be given and the entry
//! need not exist yet. Not for MCP servers.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::time::Duration;

use serde::Deserialize;

/// How a plugin process is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// `<python> -m hearth_plugin run <entry>`.
    Python,
    /// `<node> -e <bootstrap> <entry>`; the bootstrap resolves `hearth-plugin/runner`
    /// from the plugin's directory.
    Node,
    /// The entry is an executable (e.g. a Rust plugin binary).
    Exec,
    /// An MCP server: a `command` speaking MCP over stdio, or a Streamable HTTP `url`
    /// (see [`McpSpec`]); the broker is its MCP client.
    Mcp,
}

impl Runtime {
    /// The manifest spelling: `python`, `node` or `exec`.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Python => "python",
            Runtime::Node => "node",
            Runtime::Exec => "exec",
            Runtime::Mcp => "mcp",
        }
    }
}

/// Default seconds from spawn to registration before a plugin counts as crashed.
pub const DEFAULT_STARTUP_TIMEOUT_S: f64 = 10.0;
/// Default seconds a tool call may take.
pub const DEFAULT_CALL_TIMEOUT_S: f64 = 60.0;

/// Default bound in seconds on a call extended by `Progress`.
pub const DEFAULT_MAX_TOTAL_S: f64 = 600.0;
/// Default heartbeat interval in milliseconds.
pub const DEFAULT_PING_INTERVAL_MS: u64 = 2000;
/// Default time without a `Pong` after which a plugin is hung, in milliseconds.
pub const DEFAULT_HUNG_TIMEOUT_MS: u64 = 10_000;
/// Default seconds a build step may run before its process group is killed: a cold Go
/// build of a gRPC plugin takes ~20 s on a small machine, a cold Rust one minutes.
pub const DEFAULT_BUILD_TIMEOUT_S: f64 = 600.0;

/// `plugin.json` as written by the author.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: Option<String>,
    version: Option<String>,
    #[allow(dead_code)] // shown by later admin views
    author: Option<String>,
    #[allow(dead_code)]
    description: Option<String>,
    runtime: Option<String>,
    entry: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    python: Option<String>,
    node: Option<String>,
    startup_timeout_s: Option<f64>,
    call_timeout_s: Option<f64>,
    #[serde(default)]
    restart: RawRestart,
    max_total_s: Option<f64>,
    ping_interval_ms: Option<u64>,
    hung_timeout_ms: Option<u64>,
    max_concurrency: Option<u32>,
    capabilities: Option<Vec<String>>,
    #[serde(default)]
    env_passthrough: Vec<String>,
    #[serde(default)]
    allow_loader_env: bool,
    sandbox: Option<serde_json::Value>,
    // Checked by hand (not typed) so that a bad value is an error naming the field.
    build: Option<serde_json::Value>,
    build_timeout_s: Option<f64>,
    // `"runtime": "mcp"` only (see McpSpec).
    command: Option<Vec<String>>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    cwd: Option<String>,
    tool_prefix: Option<String>,
    #[serde(default)]
    confirm_destructive: bool,
    protocol: Option<String>,
}

/// How the broker reaches an MCP server (`"runtime": "mcp"`).
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// `command`: a process speaking MCP (JSON-RPC lines) on stdin/stdout; stderr is
    /// its log. `program` is `command[0]`, `args` the rest. Runs in `cwd` (manifest
    /// `cwd`, default the plugin folder).
    Stdio {
        /// The program (a name looked up on `PATH`, or a path).
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its working directory (absolute).
        cwd: PathBuf,
    },
    /// `url`: a Streamable HTTP endpoint (`https://…/mcp`) with extra `headers`, whose
    /// values may hold `${env:NAME}`, `${env:NAME:-default}` and `${setting:KEY}`
    /// references resolved at each connect.
    Http {
        /// The endpoint.
        url: String,
        /// Header name → value (unresolved).
        headers: BTreeMap<String, String>,
    },
}

/// Which MCP protocol revision the broker asks an MCP server for (manifest `protocol`).
#[derive(Debug, Clone, PartialEq)]
pub enum McpProtocol {
    /// `"auto"` (default): the current revision (`server/discover`, 2026-07-28),
    /// falling back to the `initialize` handshake (2025-11-25 and older) when the
    /// server does not know it; a fallback is remembered for the plugin's restarts.
    Auto,
    /// `"legacy"`: the `initialize` handshake only (2025-11-25 and older).
    Legacy,
    /// A revision by date, e.g. `"2026-07-28"` or `"2025-06-18"`: only that one.
    Pinned(String),
}

/// An MCP plugin's own settings (manifest keys beside `"runtime": "mcp"`).
#[derive(Debug, Clone, PartialEq)]
pub struct McpSpec {
    /// stdio or Streamable HTTP.
    pub transport: McpTransport,
    /// Prepended to every tool name the server offers (manifest `tool_prefix`), to
    /// avoid clashes; names are then made LLM-safe (other characters become `_`).
    pub tool_prefix: String,
    /// Tools annotated `destructiveHint: true` get the `confirm` policy (manifest
    /// `confirm_destructive`).
    pub confirm_destructive: bool,
    /// Protocol revision choice.
    pub protocol: McpProtocol,
}

/// Default seconds for an MCP server to start and list its tools: `npx -y` and `uvx`
/// may download the server first.
pub const DEFAULT_MCP_STARTUP_TIMEOUT_S: f64 = 60.0;

/// Protocol revisions a manifest may pin (those the broker's MCP SDK speaks).
pub const MCP_PROTOCOL_VERSIONS: &[&str] = &[
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandboxRules {
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
    net_connect: Option<Vec<String>>,
}

/// The manifest's `sandbox`: whether the plugin runs under Landlock and what it may
/// use beyond its defaults (see `supervisor::sandbox`).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxSpec {
    /// `false` only for `"sandbox": false`.
    pub enabled: bool,
    /// Extra readable paths (absolute).
    pub read: Vec<PathBuf>,
    /// Extra writable paths (absolute).
    pub write: Vec<PathBuf>,
    /// The only TCP `(host, port)`s it may connect to; `None` = any.
    pub net_connect: Option<Vec<(String, u16)>>,
}

impl Default for SandboxSpec {
    fn default() -> Self {
        SandboxSpec {
            enabled: true,
            read: Vec::new(),
            write: Vec::new(),
            net_connect: None,
        }
    }
}

/// Environment variables the broker sets for every plugin; a manifest cannot set them.
pub const SESSION_ENV: &[&str] = &[
    hearth_proto::ENV_ADDR,
    hearth_proto::ENV_PLUGIN,
    hearth_proto::ENV_TOKEN,
    hearth_proto::ENV_TOKEN_FD,
    hearth_proto::ENV_PLUGIN_DATA,
];

/// Whether `name` steers the dynamic loader (`LD_PRELOAD`, `LD_LIBRARY_PATH`, …).
pub fn is_loader_env(name: &str) -> bool {
    name.starts_with("LD_")
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRestart {
    max_restarts: Option<u32>,
    window_s: Option<f64>,
    backoff_initial_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
}

/// When and how fast a crashed plugin is restarted (manifest `restart`).
///
/// A plugin that crashes `max_restarts` times within `window_s` seconds is marked
/// `failed` (HomeAgent's and VS Code's budget: 3 crashes in 5 minutes) and stays so
/// until `hearth plugins restart`. Between crashes the delay grows exponentially from
/// `backoff_initial` to `backoff_max`, with jitter; a run of `HEALTHY_UPTIME` resets it.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    /// Crashes within `window` that mark the plugin failed (0 = never restart).
    pub max_restarts: u32,
    /// The crash-counting window.
    pub window: Duration,
    /// First restart delay.
    pub backoff_initial: Duration,
    /// Longest restart delay.
    pub backoff_max: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 3,
            window: Duration::from_secs(300),
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// A plugin ready to be spawned: its manifest with defaults applied and paths resolved.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    /// The manifest's `name`, else the directory's name.
    pub name: String,
    /// Plugin directory (absolute); the process's working directory.
    pub dir: PathBuf,
    /// How to start it.
    pub runtime: Runtime,
    /// Entry file (absolute).
    pub entry: PathBuf,
    /// Extra arguments after the entry.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Interpreter override for `python` runtime (manifest `python`).
    pub python: Option<String>,
    /// Binary override for `node` runtime (manifest `node`).
    pub node: Option<String>,
    /// Seconds from spawn to registration.
    pub startup_timeout_s: f64,
    /// Default per-call timeout in seconds.
    pub call_timeout_s: f64,
    /// Upper bound in seconds of a call whose timeout `Progress` keeps extending.
    pub max_total_s: f64,
    /// Restart policy.
    pub restart: RestartPolicy,
    /// Interval between heartbeat pings.
    pub ping_interval: Duration,
    /// A plugin that answers no ping for this long is hung: killed and restarted.
    pub hung_timeout: Duration,
    /// Manifest version, if any.
    pub version: String,
    /// Host-service capabilities granted (manifest `capabilities`, else
    /// [`DEFAULT_CAPABILITIES`]); each one of [`CAPABILITIES`].
    pub capabilities: Vec<String>,
    /// Most calls (tools, stage hooks, event handlers) in flight at once; 0 = no cap.
    pub max_concurrency: u32,
    /// Broker environment variables passed through (manifest `env_passthrough`;
    /// names, or prefixes ending in `*`).
    pub env_passthrough: Vec<String>,
    /// Whether `env`/`env_passthrough` may carry `LD_*` variables.
    pub allow_loader_env: bool,
    /// Sandbox switch and widenings.
    pub sandbox: SandboxSpec,
    /// `"runtime": "mcp"`: how to reach the server; `None` for other runtimes.
    pub mcp: Option<McpSpec>,
    /// The build step (manifest `build`): program and arguments run in the plugin
    /// folder before a start when the entry is missing or older than its sources.
    pub build: Option<Vec<String>>,
    /// Seconds the build may run (manifest `build_timeout_s`).
    pub build_timeout_s: f64,
}

/// Every capability a manifest may grant, with what it allows. A plugin's own
/// settings (get, set, list, register_def, defs; its secrets in clear) and
/// `Settings.Plugins` need none; core settings need `settings_core`. Secrets of the
/// core and of other plugins read as `"••••••"` and cannot be overwritten without
/// `settings_secrets` (on top of `settings_core` / `settings_cross`; `Dump` masks them
/// always). Injected input is attributed to the plugin (user `plugin:<name>`); naming
/// another user or source needs `input_as_user` (on top of `input`).
pub const CAPABILITIES: &[(&str, &str)] = &[
    ("memory", "Memory (graph), TextMemory and DocMemory"),
    ("knowledge", "Knowledge"),
    (
        "mcp",
        "Mcp: list and read MCP servers' resources and prompts (plugins with \"runtime\": \"mcp\")",
    ),
    ("llm", "Llm: list, choose and read the LLM source"),
    (
        "input",
        "Input: inject text into the agent, attributed to the plugin",
    ),
    (
        "input_as_user",
        "Input: inject text as a user (`source`/user id of someone else), into their history",
    ),
    (
        "settings_core",
        "Settings.GetCore/ListCore/SetCore: read and write core settings (secrets masked)",
    ),
    (
        "settings_cross",
        "Settings.GetPlugin/SetPlugin/ListPlugin/Dump: other plugins' settings (secrets masked)",
    ),
    (
        "settings_secrets",
        "read and overwrite secret settings of other plugins and of the core in clear",
    ),
];

/// Capabilities of a plugin whose manifest has no `capabilities` field: what a
/// HomeAgent plugin uses routinely, but not other plugins' or core settings.
pub const DEFAULT_CAPABILITIES: &[&str] = &["memory", "knowledge", "llm", "input"];

/// Why a plugin directory could not be turned into a [`PluginSpec`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// `plugin.json` could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The manifest path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `plugin.json` is not valid JSON of the expected shape.
    #[error("{path}: invalid plugin.json: {source}")]
    Parse {
        /// The manifest path.
        path: PathBuf,
        /// The parse error (names the field and line).
        source: serde_json::Error,
    },
    /// A field has a value the broker cannot use.
    #[error("{path}: field `{field}`: {message}")]
    Field {
        /// The manifest path.
        path: PathBuf,
        /// Field name.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// No `runtime` in the manifest (or no manifest) and nothing to infer it from.
    #[error("not a plugin directory: {dir} ({}cannot infer the runtime: no main.py, index.js, package.json or executable `{name}`)", if *.manifest { "plugin.json names no `runtime`, and " } else { "no plugin.json, and " })]
    NoRuntime {
        /// The plugin directory.
        dir: PathBuf,
        /// The directory's name.
        name: String,
        /// A plugin.json exists (without `runtime`), e.g. another system's manifest.
        manifest: bool,
    },
    /// The entry file does not exist.
    #[error("plugin {plugin}: entry {entry} does not exist")]
    MissingEntry {
        /// Plugin name.
        plugin: String,
        /// Entry path.
        entry: PathBuf,
    },
}

impl PluginSpec {
    /// The spec of an ad-hoc plugin: a process started by hand that attached as `name`
    /// (`hearth plugins attach-token`) while no folder of that name is loaded. Default
    /// capabilities, timeouts and policies; no folder and nothing to spawn.
    pub fn attached(name: &str) -> PluginSpec {
        PluginSpec {
            name: name.into(),
            dir: PathBuf::new(),
            runtime: Runtime::Exec,
            entry: PathBuf::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            python: None,
            node: None,
            startup_timeout_s: DEFAULT_STARTUP_TIMEOUT_S,
            call_timeout_s: DEFAULT_CALL_TIMEOUT_S,
            max_total_s: DEFAULT_MAX_TOTAL_S,
            restart: RestartPolicy::default(),
            ping_interval: Duration::from_millis(DEFAULT_PING_INTERVAL_MS),
            hung_timeout: Duration::from_millis(DEFAULT_HUNG_TIMEOUT_MS),
            version: String::new(),
            capabilities: DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()).collect(),
            max_concurrency: 0,
            env_passthrough: Vec::new(),
            allow_loader_env: false,
            sandbox: SandboxSpec::default(),
            mcp: None,
            build: None,
            build_timeout_s: DEFAULT_BUILD_TIMEOUT_S,
        }
    }

    /// Reads `dir/plugin.json` if present, else infers the runtime from the files in
    /// `dir`. `dir` need not be absolute.
    pub fn load(dir: &Path) -> Result<PluginSpec, ManifestError> {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let manifest_path = dir.join("plugin.json");
        let mut raw = match std::fs::read(&manifest_path) {
            Ok(bytes) => serde_json::from_slice::<RawManifest>(&bytes).map_err(|source| {
                ManifestError::Parse {
                    path: manifest_path.clone(),
                    source,
                }
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => RawManifest::default(),
            Err(source) => {
                return Err(ManifestError::Read {
                    path: manifest_path,
                    source,
                })
            }
        };
        let field = |field: &'static str, message: String| ManifestError::Field {
            path: manifest_path.clone(),
            field,
            message,
        };

        let name = match raw.name.take() {
            Some(n) if n.trim().is_empty() => return Err(field("name", "is empty".into())),
            Some(n) => n,
            None => dir_name.clone(),
        };
        // The name names folders (`plugin-data/<name>`, `tmp/<name>`): one plain
        // component, never a path.
        if let Err(why) = check_name(&name) {
            let field_name = if manifest_path.exists() {
                "name"
            } else {
                "(folder name)"
            };
            return Err(field(field_name, why));
        }
        let raw_entry_relative = raw
            .entry
            .as_deref()
            .is_some_and(|e| !Path::new(e).is_absolute());
        let runtime = match raw.runtime.as_deref() {
            Some("python") => Some(Runtime::Python),
            Some("node") => Some(Runtime::Node),
            Some("exec") => Some(Runtime::Exec),
            Some("mcp") => Some(Runtime::Mcp),
            Some(other) => {
                return Err(field(
                    "runtime",
                    format!("`{other}` is not one of python, node, exec, mcp"),
                ))
            }
            None => None,
        };
        let mcp = mcp_spec(&raw, runtime, &dir).map_err(|(f, m)| field(f, m))?;
        let build = build_spec(raw.build.take(), runtime).map_err(|(f, m)| field(f, m))?;
        if build.is_none() && raw.build_timeout_s.is_some() {
            return Err(field(
                "build_timeout_s",
                "bounds the `build` step, and this manifest has none".into(),
            ));
        }
        let (runtime, entry) = match (runtime, raw.entry) {
            (Some(Runtime::Mcp), _) => (Runtime::Mcp, mcp_entry(mcp.as_ref(), &dir)),
            (Some(rt), Some(entry)) => (rt, dir.join(entry)),
            (Some(rt), None) => {
                let entry = match rt {
                    Runtime::Python => Some(dir.join("main.py")),
                    Runtime::Node => node_entry(&dir),
                    Runtime::Exec => Some(dir.join(&dir_name)),
                    Runtime::Mcp => Some(dir.clone()),
                };
                (
                    rt,
                    entry.ok_or_else(|| field("entry", "missing and not inferable".into()))?,
                )
            }
            (None, entry) => {
                let (rt, inferred) = infer(&dir, &dir_name).map_err(|e| match e {
                    ManifestError::NoRuntime { dir, name, .. } => ManifestError::NoRuntime {
                        dir,
                        name,
                        manifest: manifest_path.exists(),
                    },
                    other => other,
                })?;
                (rt, entry.map(|e| dir.join(e)).unwrap_or(inferred))
            }
        };
        // With a build step the entry may not exist yet: the build makes it.
        if runtime != Runtime::Mcp && build.is_none() && !entry.exists() {
            return Err(ManifestError::MissingEntry {
                plugin: name,
                entry,
            });
        }
        let stays_inside = if entry.exists() {
            inside(&entry, &dir)
        } else {
            inside_lexically(&entry, &dir)
        };
        if raw_entry_relative && runtime != Runtime::Mcp && !stays_inside {
            return Err(field(
                "entry",
                format!(
                    "{} leaves the plugin folder; a relative entry must stay inside it (an absolute path is allowed)",
                    entry.display()
                ),
            ));
        }
        for key in raw.env.keys() {
            if SESSION_ENV.contains(&key.as_str()) {
                return Err(field(
                    "env",
                    format!("`{key}` is set by the broker for each spawn and cannot be overridden"),
                ));
            }
            if is_loader_env(key) && !raw.allow_loader_env {
                return Err(field(
                    "env",
                    format!("`{key}` steers the dynamic loader; add \"allow_loader_env\": true if the plugin really needs it"),
                ));
            }
        }
        for name in &raw.env_passthrough {
            let bare = name.trim_end_matches('*');
            if bare.is_empty() || bare.contains('*') || bare.contains('=') {
                return Err(field(
                    "env_passthrough",
                    format!("`{name}` is not a variable name or a prefix ending in `*`"),
                ));
            }
            if SESSION_ENV.iter().any(|s| s.starts_with(bare)) && name.ends_with('*')
                || SESSION_ENV.contains(&name.as_str())
            {
                return Err(field(
                    "env_passthrough",
                    format!("`{name}` would pass the broker's own session variables"),
                ));
            }
            if is_loader_env(bare) && !raw.allow_loader_env {
                return Err(field(
                    "env_passthrough",
                    format!("`{name}` steers the dynamic loader; add \"allow_loader_env\": true if the plugin really needs it"),
                ));
            }
        }
        let sandbox = sandbox_spec(raw.sandbox, &dir).map_err(|(f, m)| field(f, m))?;
        let timeout = |field_name: &'static str, v: Option<f64>, default: f64| match v {
            None => Ok(default),
            Some(v) if v.is_finite() && v > 0.0 => Ok(v),
            Some(v) => Err(field(
                field_name,
                format!("{v} is not a positive number of seconds"),
            )),
        };
        Ok(PluginSpec {
            name,
            runtime,
            entry,
            args: raw.args,
            env: raw.env,
            python: raw.python,
            node: raw.node,
            startup_timeout_s: timeout(
                "startup_timeout_s",
                raw.startup_timeout_s,
                if runtime == Runtime::Mcp {
                    DEFAULT_MCP_STARTUP_TIMEOUT_S
                } else {
                    DEFAULT_STARTUP_TIMEOUT_S
                },
            )?,
            call_timeout_s: timeout("call_timeout_s", raw.call_timeout_s, DEFAULT_CALL_TIMEOUT_S)?,
            max_total_s: timeout("max_total_s", raw.max_total_s, DEFAULT_MAX_TOTAL_S)?,
            restart: {
                let d = RestartPolicy::default();
                let r = raw.restart;
                let initial = r
                    .backoff_initial_ms
                    .map(Duration::from_millis)
                    .unwrap_or(d.backoff_initial);
                let max = r
                    .backoff_max_ms
                    .map(Duration::from_millis)
                    .unwrap_or(d.backoff_max);
                if initial.is_zero() || max < initial {
                    return Err(field(
                        "restart",
                        format!(
                            "backoff_initial_ms ({}) must be > 0 and <= backoff_max_ms ({})",
                            initial.as_millis(),
                            max.as_millis()
                        ),
                    ));
                }
                RestartPolicy {
                    max_restarts: r.max_restarts.unwrap_or(d.max_restarts),
                    window: Duration::from_secs_f64(timeout(
                        "restart.window_s",
                        r.window_s,
                        d.window.as_secs_f64(),
                    )?),
                    backoff_initial: initial,
                    backoff_max: max,
                }
            },
            ping_interval: Duration::from_millis(
                raw.ping_interval_ms
                    .unwrap_or(DEFAULT_PING_INTERVAL_MS)
                    .max(10),
            ),
            hung_timeout: Duration::from_millis(
                raw.hung_timeout_ms
                    .unwrap_or(DEFAULT_HUNG_TIMEOUT_MS)
                    .max(50),
            ),
            version: raw.version.unwrap_or_default(),
            max_concurrency: raw.max_concurrency.unwrap_or(0),
            env_passthrough: raw.env_passthrough,
            allow_loader_env: raw.allow_loader_env,
            sandbox,
            mcp,
            build_timeout_s: timeout(
                "build_timeout_s",
                raw.build_timeout_s,
                DEFAULT_BUILD_TIMEOUT_S,
            )?,
            build,
            capabilities: match raw.capabilities {
                None => DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()).collect(),
                Some(list) => {
                    if let Some(bad) = list
                        .iter()
                        .find(|c| !CAPABILITIES.iter().any(|(k, _)| k == c))
                    {
                        let known: Vec<_> = CAPABILITIES.iter().map(|(k, _)| *k).collect();
                        return Err(field(
                            "capabilities",
                            format!("unknown capability `{bad}`; known: {}", known.join(", ")),
                        ));
                    }
                    list
                }
            },
            dir,
        })
    }
}

/// An example of `build`, for error messages.
const BUILD_EXAMPLE: &str = r#"["go", "build", "-buildvcs=false", "-o", "bin/plugin", "."]"#;

/// `build` as written → program and arguments; errors name the field. `runtime` must
/// be explicit (what the build produces cannot be inferred before it ran), and MCP
/// servers have none.
fn build_spec(
    raw: Option<serde_json::Value>,
    runtime: Option<Runtime>,
) -> Result<Option<Vec<String>>, (&'static str, String)> {
    let list = match raw {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::Array(list)) => list,
        Some(other) => {
            return Err((
                "build",
                format!("{other} is not an array of strings (the program and its arguments, no shell), e.g. {BUILD_EXAMPLE}"),
            ))
        }
    };
    let mut argv = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        match item.as_str() {
            Some(s) if s.contains('\0') => {
                return Err(("build", format!("item {i} contains a NUL byte")))
            }
            Some(s) => argv.push(s.to_string()),
            None => {
                return Err((
                    "build",
                    format!("item {i} ({item}) is not a string; give the program and its arguments as strings, e.g. {BUILD_EXAMPLE}"),
                ))
            }
        }
    }
    match argv.first() {
        None => {
            return Err((
                "build",
                format!("is empty; give the program and its arguments, e.g. {BUILD_EXAMPLE}, or leave `build` out"),
            ))
        }
        Some(program) if program.trim().is_empty() => {
            return Err(("build", "the program (item 0) is empty".into()))
        }
        Some(_) => {}
    }
    match runtime {
        Some(Runtime::Mcp) => Err((
            "build",
            "is not supported for MCP servers (\"runtime\": \"mcp\"); build the server beforehand".into(),
        )),
        None => Err((
            "build",
            "needs `runtime` (and usually `entry`): the build's output cannot be inferred before it ran".into(),
        )),
        Some(_) => Ok(Some(argv)),
    }
}

/// Whether `path` (which need not exist) stays inside `dir` by its components: no `..`
/// leads out. The nearest existing ancestor must also resolve inside `dir` (no link
/// leads out).
fn inside_lexically(path: &Path, dir: &Path) -> bool {
    use std::path::Component;
    let Ok(rel) = path.strip_prefix(dir) else {
        return false;
    };
    let mut depth = 0usize;
    for c in rel.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            _ => return false,
        }
    }
    path.ancestors()
        .find(|a| a.exists())
        .is_some_and(|existing| inside(existing, dir))
}

/// The MCP part of a manifest: `Some` for `"runtime": "mcp"` (exactly one of
/// `command`, `url`), `None` otherwise (and then no MCP key may be set). Errors name
/// the field.
fn mcp_spec(
    raw: &RawManifest,
    runtime: Option<Runtime>,
    dir: &Path,
) -> Result<Option<McpSpec>, (&'static str, String)> {
    if runtime != Some(Runtime::Mcp) {
        let set = [
            ("command", raw.command.is_some()),
            ("url", raw.url.is_some()),
            ("headers", !raw.headers.is_empty()),
            ("cwd", raw.cwd.is_some()),
            ("tool_prefix", raw.tool_prefix.is_some()),
            ("confirm_destructive", raw.confirm_destructive),
            ("protocol", raw.protocol.is_some()),
        ];
        if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
            return Err((
                key,
                "is for MCP servers only: add \"runtime\": \"mcp\"".into(),
            ));
        }
        return Ok(None);
    }
    if raw.entry.is_some() || !raw.args.is_empty() {
        let key = if raw.entry.is_some() { "entry" } else { "args" };
        return Err((
            key,
            "an MCP server is started by `command` (program and arguments in one array), not entry/args".into(),
        ));
    }
    let transport = match (&raw.command, &raw.url) {
        (Some(_), Some(_)) => {
            return Err(("url", "give either `command` (stdio) or `url` (Streamable HTTP), not both".into()))
        }
        (None, None) => {
            return Err((
                "command",
                "an MCP server needs `command` (e.g. [\"npx\", \"-y\", \"@modelcontextprotocol/server-everything\"]) or `url` (\"https://…/mcp\")".into(),
            ))
        }
        (Some(command), None) => {
            let Some((program, args)) = command.split_first().filter(|(p, _)| !p.trim().is_empty())
            else {
                return Err(("command", "is empty; give the program and its arguments".into()));
            };
            if !raw.headers.is_empty() {
                return Err(("headers", "are for `url` servers; a stdio server gets `env`".into()));
            }
            let cwd = dir.join(raw.cwd.as_deref().unwrap_or("."));
            if !cwd.is_dir() {
                return Err(("cwd", format!("{} is not a folder", cwd.display())));
            }
            McpTransport::Stdio {
                program: program.clone(),
                args: args.to_vec(),
                cwd: std::path::absolute(&cwd).unwrap_or(cwd),
            }
        }
        (None, Some(url)) => {
            let lower = url.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                return Err(("url", format!("`{url}` is not an http:// or https:// URL")));
            }
            if raw.cwd.is_some() || !raw.env.is_empty() {
                let key = if raw.cwd.is_some() { "cwd" } else { "env" };
                return Err((key, "is for `command` servers; a `url` server gets `headers`".into()));
            }
            for (name, value) in &raw.headers {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(("headers", format!("`{name}` is not a valid header name")));
                }
                if value.contains(['\r', '\n']) {
                    return Err(("headers", format!("the value of `{name}` contains a line break")));
                }
            }
            McpTransport::Http {
                url: url.clone(),
                headers: raw.headers.clone(),
            }
        }
    };
    let protocol = match raw.protocol.as_deref() {
        None | Some("auto") => McpProtocol::Auto,
        Some("legacy") => McpProtocol::Legacy,
        Some(v) if MCP_PROTOCOL_VERSIONS.contains(&v) => McpProtocol::Pinned(v.to_string()),
        Some(other) => {
            return Err((
                "protocol",
                format!(
                    "`{other}` is not auto, legacy or one of {}",
                    MCP_PROTOCOL_VERSIONS.join(", ")
                ),
            ))
        }
    };
    let tool_prefix = raw.tool_prefix.clone().unwrap_or_default();
    if tool_prefix.len() > 32 {
        return Err(("tool_prefix", "is longer than 32 bytes".into()));
    }
    Ok(Some(McpSpec {
        transport,
        tool_prefix,
        confirm_destructive: raw.confirm_destructive,
        protocol,
    }))
}

/// What the sandbox treats as an MCP server's entry: for a stdio server, the first
/// argument that names an existing file (a script: its folder is granted), else the
/// plugin folder itself.
fn mcp_entry(mcp: Option<&McpSpec>, dir: &Path) -> PathBuf {
    if let Some(McpSpec {
        transport: McpTransport::Stdio { args, .. },
        ..
    }) = mcp
    {
        for arg in args.iter().filter(|a| !a.starts_with('-')) {
            let path = dir.join(arg);
            if path.is_file() {
                return std::path::absolute(&path).unwrap_or(path);
            }
        }
    }
    dir.to_path_buf()
}

/// Longest plugin name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// A plugin name is 1 to [`MAX_NAME_BYTES`] ASCII letters, digits, `_`, `-` and `.`,
/// starting with a letter or digit: it names the plugin's folders in the data dir, so
/// it can never be a path (`a/b`, `..`, `/`). The error says what is wrong.
pub fn check_name(name: &str) -> Result<(), String> {
    let starts_well = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let allowed = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !starts_well || !allowed || name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{name:?} is not a plugin name: use 1 to {MAX_NAME_BYTES} letters, digits, `_`, `-` or `.`, starting with a letter or digit"
        ));
    }
    Ok(())
}

/// Whether `path` (symlinks resolved) lies inside `dir`.
fn inside(path: &Path, dir: &Path) -> bool {
    match (std::fs::canonicalize(path), std::fs::canonicalize(dir)) {
        (Ok(p), Ok(d)) => p.starts_with(d),
        _ => false,
    }
}

/// A manifest path: `~/x` from the home dir, relative from the plugin folder.
fn manifest_path(text: &str, dir: &Path) -> PathBuf {
    match text.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(rest),
        None => dir.join(text),
    }
}

/// `sandbox` as written → [`SandboxSpec`]; errors name the sub-field.
fn sandbox_spec(
    raw: Option<serde_json::Value>,
    dir: &Path,
) -> Result<SandboxSpec, (&'static str, String)> {
    let rules: RawSandboxRules = match raw {
        None | Some(serde_json::Value::Bool(true)) => return Ok(SandboxSpec::default()),
        Some(serde_json::Value::Bool(false)) => {
            return Ok(SandboxSpec {
                enabled: false,
                ..SandboxSpec::default()
            })
        }
        Some(rules @ serde_json::Value::Object(_)) => serde_json::from_value(rules)
            .map_err(|e| ("sandbox", format!("{e} (keys: read, write, net_connect)")))?,
        Some(other) => {
            return Err((
                "sandbox",
                format!("{other} is not true, false or an object {{read, write, net_connect}}"),
            ))
        }
    };
    let net_connect = match rules.net_connect {
        None => None,
        Some(list) => Some(
            list.iter()
                .map(|item| {
                    let (host, port) = item.rsplit_once(':').ok_or_else(|| {
                        (
                            "sandbox.net_connect",
                            format!("`{item}` is not host:port (e.g. api.example.com:443)"),
                        )
                    })?;
                    let port = port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                        (
                            "sandbox.net_connect",
                            format!("`{item}`: `{port}` is not a TCP port (1-65535)"),
                        )
                    })?;
                    Ok((host.to_string(), port))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    Ok(SandboxSpec {
        enabled: true,
        read: rules.read.iter().map(|p| manifest_path(p, dir)).collect(),
        write: rules.write.iter().map(|p| manifest_path(p, dir)).collect(),
        net_connect,
    })
}

/// Node entry: `index.js`, else `package.json`'s `main`.
fn node_entry(dir: &Path) -> Option<PathBuf> {
    let index = dir.join("index.js");
    if index.exists() {
        return Some(index);
    }
    let pkg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("package.json")).ok()?).ok()?;
    let main = pkg
        .get("main")
        .and_then(|m| m.as_str())
        .unwrap_or("index.js");
    Some(dir.join(main))
}

fn infer(dir: &Path, dir_name: &str) -> Result<(Runtime, PathBuf), ManifestError> {
    if dir.join("main.py").exists() {
        return Ok((Runtime::Python, dir.join("main.py")));
    }
    if dir.join("index.js").exists() || dir.join("package.json").exists() {
        if let Some(entry) = node_entry(dir) {
            return Ok((Runtime::Node, entry));
        }
    }
    let exe = dir.join(dir_name);
    let executable = std::fs::metadata(&exe)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    if executable {
        return Ok((Runtime::Exec, exe));
    }
    Err(ManifestError::NoRuntime {
        dir: dir.to_path_buf(),
        name: dir_name.to_string(),
        manifest: false,
    })
}

/// Every subdirectory of each directory in `roots`, sorted by name within a root;
/// roots that do not exist are skipped. Hidden directories (`.name`) and
/// `node_modules` are not plugins.
pub fn discover(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| e.path())
            .filter(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default();
                !name.starts_with('.') && name != "node_modules"
            })
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the temp dir, removed when the guard drops (also when the
    /// test fails).
    fn tempdir(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("hearth-manifest-{tag}"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn a_manifest_without_runtime_is_named_as_such_when_nothing_can_be_inferred() {
        let root = tempdir("noruntime");
        let dir = root.path().join("hello_cy");
        std::fs::create_dir_all(&dir).unwrap();
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(err.contains("(no plugin.json, and cannot infer"), "{err}");
        // A Cyrene-style plugin.json: metadata only.
        std::fs::write(
            dir.join("plugin.json"),
            r#"{"name":"hello_cy","version":"1.0.0","author":"me","description":"hi"}"#,
        )
        .unwrap();
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("(plugin.json names no `runtime`, and cannot infer"),
            "{err}"
        );
    }

    #[test]
    fn infers_python_and_uses_dir_name() {
        let root = tempdir("py");
        let dir = root.path().join("calc");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.py"), "").unwrap();
        let spec = PluginSpec::load(&dir).unwrap();
        assert_eq!(spec.name, "calc");
        assert_eq!(spec.runtime, Runtime::Python);
        assert_eq!(spec.call_timeout_s, DEFAULT_CALL_TIMEOUT_S);
    }

    #[test]
    fn manifest_name_wins_and_bad_runtime_is_named() {
        let root = tempdir("mf");
        let dir = root.path().join("d");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.js"), "").unwrap();
        std::fs::write(dir.join("plugin.json"), r#"{"name":"w","runtime":"node"}"#).unwrap();
        let spec = PluginSpec::load(&dir).unwrap();
        assert_eq!((spec.name.as_str(), spec.runtime), ("w", Runtime::Node));
        std::fs::write(dir.join("plugin.json"), r#"{"runtime":"ruby"}"#).unwrap();
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(err.contains("runtime") && err.contains("ruby"), "{err}");
        std::fs::write(dir.join("plugin.json"), r#"{"call_timeout_s":-1}"#).unwrap();
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(err.contains("call_timeout_s"), "{err}");
    }

    #[test]
    fn capabilities_default_and_unknown_ones_are_named() {
        let root = tempdir("caps");
        let dir = root.path().join("c");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.py"), "").unwrap();
        assert_eq!(
            PluginSpec::load(&dir).unwrap().capabilities,
            DEFAULT_CAPABILITIES
        );
        std::fs::write(
            dir.join("plugin.json"),
            r#"{"capabilities":["settings_cross"]}"#,
        )
        .unwrap();
        assert_eq!(
            PluginSpec::load(&dir).unwrap().capabilities,
            ["settings_cross"]
        );
        std::fs::write(dir.join("plugin.json"), r#"{"capabilities":["root"]}"#).unwrap();
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("unknown capability `root`; known: memory"),
            "{err}"
        );
    }

    #[test]
    fn a_plugin_name_is_never_a_path() {
        for good in ["calculator", "hc_node", "my-plugin.v2", "A1"] {
            check_name(good).unwrap();
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "/",
            "a/b",
            "../adapters",
            "a b",
            "-x",
            "名字",
        ] {
            let err = check_name(bad).unwrap_err();
            assert!(err.contains("is not a plugin name"), "{bad}: {err}");
        }
        assert!(check_name(&"x".repeat(MAX_NAME_BYTES + 1)).is_err());
        let root = tempdir("name");
        let dir = root.path().join("d");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.py"), "").unwrap();
        std::fs::write(dir.join("plugin.json"), r#"{"name":"../adapters"}"#).unwrap();
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("field `name`") && err.contains("../adapters"),
            "{err}"
        );
    }

    #[test]
    fn a_build_step_is_checked_and_its_entry_may_be_missing() {
        let root = tempdir("build");
        let dir = root.path().join("gp");
        std::fs::create_dir_all(&dir).unwrap();
        let write = |json: &str| std::fs::write(dir.join("plugin.json"), json).unwrap();
        write(
            r#"{"runtime":"exec","entry":"bin/plugin","build":["go","build","-o","bin/plugin","."]}"#,
        );
        let spec = PluginSpec::load(&dir).unwrap();
        assert_eq!(
            spec.build.as_deref().unwrap(),
            ["go", "build", "-o", "bin/plugin", "."]
        );
        assert_eq!(spec.build_timeout_s, DEFAULT_BUILD_TIMEOUT_S);
        assert_eq!(spec.entry, dir.join("bin/plugin"));
        // Without `build` the missing entry is an error, as before.
        write(r#"{"runtime":"exec","entry":"bin/plugin"}"#);
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");

        for (json, needle) in [
            (
                r#"{"runtime":"exec","entry":"p","build":"go build"}"#,
                "is not an array of strings",
            ),
            (r#"{"runtime":"exec","entry":"p","build":[]}"#, "is empty"),
            (
                r#"{"runtime":"exec","entry":"p","build":["go",1]}"#,
                "item 1 (1) is not a string",
            ),
            (
                r#"{"runtime":"exec","entry":"p","build":[" "]}"#,
                "the program (item 0) is empty",
            ),
            (
                r#"{"runtime":"exec","entry":"p","build":{"cmd":"go"}}"#,
                "is not an array of strings",
            ),
            (r#"{"entry":"p","build":["make"]}"#, "needs `runtime`"),
            (
                r#"{"runtime":"mcp","command":["x"],"build":["make"]}"#,
                "not supported for MCP",
            ),
            (
                r#"{"runtime":"exec","entry":"p","build":["make"],"build_timeout_s":0}"#,
                "field `build_timeout_s`: 0 is not a positive",
            ),
            (
                r#"{"runtime":"exec","entry":"../p","build":["make"]}"#,
                "leaves the plugin folder",
            ),
        ] {
            write(json);
            let err = PluginSpec::load(&dir).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
            if !needle.contains("leaves") {
                assert!(err.contains("field `build"), "{json}: {err}");
            }
        }
        std::fs::write(dir.join("p"), "").unwrap();
        write(r#"{"runtime":"exec","entry":"p","build_timeout_s":5}"#);
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("field `build_timeout_s`") && err.contains("has none"),
            "{err}"
        );
        write(r#"{"runtime":"exec","entry":"p","build":null}"#);
        assert!(PluginSpec::load(&dir).unwrap().build.is_none());
    }

    #[test]
    fn nothing_to_infer_is_a_clear_error() {
        let root = tempdir("none");
        let dir = root.path().join("empty");
        std::fs::create_dir_all(&dir).unwrap();
        let err = PluginSpec::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("not a plugin directory") && err.contains("cannot infer the runtime"),
            "{err}"
        );
    }
}
