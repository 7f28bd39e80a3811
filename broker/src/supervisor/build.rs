//! A plugin's build step (manifest `build`, e.g. `["go", "build", "-buildvcs=false",
//! "-o", "bin/plugin", "."]` or `["cargo", "build", "--release"]`): a program and its
//! arguments, no shell, run in the plugin folder before a process of the plugin starts.
//!
//! When: if the entry is missing or older than the newest source file in the plugin
//! folder (the mtime rule, [`staleness`]) — at load, restart, crash restart and a
//! `--watch` reload; and always on an explicit reload (`hearth plugins reload`, the
//! admin page, `hearth dev`'s reload), where the tool's own up-to-date check decides (a
//! `go build` with nothing to do takes ~0.1 s): that also picks up edits outside the
//! folder, which the mtime rule cannot see (a `replace` to an SDK checkout, a Cargo path
//! dependency).
//!
//! While it runs the plugin is `building` and no process of it exists; the startup
//! timeout starts after it. A reload's new version builds beside the serving one, which
//! stays `ready` (its reason says that the new version is building). The build's output
//! goes line by line into the plugin's log (`hearth plugins logs`) between marker lines.
//! A build that fails, times out (`build_timeout_s`; its whole process group is killed)
//! or cannot start marks the plugin `failed`, naming the first line of its output that
//! says what is wrong ([`first_error_line`], e.g. `./main.go:12:2: undefined: foo`) — no
//! restart loop: a compile error does not fix itself. A reload, a restart or (with
//! `--watch`) a saved fix tries again; a failed reload keeps the previous version serving.
//!
//! The build runs in its own process group with its own environment ([`build_env`]: the
//! plugins' allow-list, the manifest's `env` and `env_passthrough`, and the toolchains'
//! variables `GO*`, `CGO_*`, `CARGO_*` but tokens, `RUSTUP_*`) and, where Landlock is
//! available, its own ruleset ([`grants`]): the system and the toolchain, the plugin
//! folder (written: `bin/`, `target/`), the Go and Cargo caches, local `replace` and path
//! dependency targets, the manifest's `sandbox.read`/`write` — never the broker's data dir
//! or other plugins' folders. A plugin's own ruleset could not build (it cannot write its
//! folder nor the caches). Network is not restricted: a build may download modules.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hearth_proto::v1::PluginState;

use super::plugin::Plugin;
use super::process;
use super::sandbox::{self, BuildGrants, SandboxState};
use super::SupervisorConfig;
use crate::manifest::PluginSpec;

/// Most files and folders the mtime rule looks at; a bigger folder is always built.
const MAX_WALK_ENTRIES: usize = 50_000;
/// Deepest folder level the mtime rule descends to.
const MAX_WALK_DEPTH: usize = 32;
/// How long the build's output may still be read after it ended.
const OUTPUT_FLUSH: Duration = Duration::from_secs(2);
/// Longest error line quoted in a failed plugin's reason, in bytes.
const MAX_WHY_BYTES: usize = 400;

/// Why a build step did not produce a plugin to start.
#[derive(Debug)]
pub(super) enum Failure {
    /// It failed, timed out, could not start or produced no entry: `exit` says which
    /// ("build failed (exit status 1)"), `why` is the line of its output that names
    /// the error.
    Failed {
        /// What happened to the build.
        exit: String,
        /// The first line of its output that names an error.
        why: Option<String>,
    },
    /// The plugin task stopped this process (superseded, unloaded) during its build.
    Stopped,
}

/// The command line as the log shows it: arguments with spaces or quotes quoted.
pub fn shown(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `path` counts as a source of the build of a plugin in `dir` whose entry is
/// `entry`: a file below `dir` that is not the entry, not in `bin/`, `target/`,
/// `node_modules/`, `__pycache__/` or a dot-folder, not in the entry's top folder when
/// the entry is nested (`dist/` for `dist/index.js`), and not a dot-file or an editor's
/// swap or backup file. `--watch` reloads a plugin with a build only for these changes,
/// so the build's own output does not reload it again.
pub fn is_source(dir: &Path, entry: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(dir) else {
        return false;
    };
    if rel.as_os_str().is_empty() || crate::watch::ignored(rel) {
        return false;
    }
    if rel.components().next() == Some(Component::Normal("bin".as_ref())) {
        return false;
    }
    if let Ok(entry_rel) = entry.strip_prefix(dir) {
        if rel == entry_rel {
            return false;
        }
        let mut parts = entry_rel.components();
        if let (Some(top), Some(_)) = (parts.next(), parts.next()) {
            if rel.starts_with(top) {
                return false;
            }
        }
    }
    true
}

/// The newest source of the plugin in `dir` ([`is_source`]) and its mtime; `Err` when
/// the folder has more than [`MAX_WALK_ENTRIES`] entries. Sources are files (links to
/// files count with their target's mtime; links to folders are not followed) and the
/// folders holding them, whose mtime changes when a file is added, removed or renamed
/// — except the folder of the entry itself, which the build's writing of the entry
/// changes.
fn newest_source(dir: &Path, entry: &Path) -> Result<Option<(PathBuf, SystemTime)>, ()> {
    let mut newest: Option<(PathBuf, SystemTime)> = None;
    let mut consider = |path: PathBuf, modified: SystemTime| {
        if newest.as_ref().is_none_or(|(_, t)| modified > *t) {
            newest = Some((path, modified));
        }
    };
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((folder, depth)) = stack.pop() {
        if entry.parent() != Some(folder.as_path()) {
            if let Ok(modified) = std::fs::metadata(&folder).and_then(|m| m.modified()) {
                consider(folder.clone(), modified);
            }
        }
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for item in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK_ENTRIES {
                return Err(());
            }
            let path = item.path();
            if !is_source(dir, entry, &path) {
                continue;
            }
            let Ok(kind) = item.file_type() else { continue };
            if kind.is_dir() {
                if depth < MAX_WALK_DEPTH {
                    stack.push((path, depth + 1));
                }
                continue;
            }
            let meta = if kind.is_symlink() {
                std::fs::metadata(&path)
            } else {
                item.metadata()
            };
            let Some(modified) = meta
                .ok()
                .filter(|m| m.is_file())
                .and_then(|m| m.modified().ok())
            else {
                continue;
            };
            consider(path, modified);
        }
    }
    Ok(newest)
}

/// The mtime rule: why the plugin of `spec` must be built before it starts (its entry
/// is missing, or a source is newer: a file edited, added, removed or renamed), or
/// `None` when its entry is up to date.
pub fn staleness(spec: &PluginSpec) -> Option<String> {
    let rel = |p: &Path| match p.strip_prefix(&spec.dir) {
        Ok(r) if r.as_os_str().is_empty() => "the plugin folder".to_string(),
        Ok(r) => r.display().to_string(),
        Err(_) => p.display().to_string(),
    };
    let entry = rel(&spec.entry);
    let built = match std::fs::metadata(&spec.entry).and_then(|m| m.modified()) {
        Ok(t) => t,
        Err(_) => return Some(format!("{entry} does not exist")),
    };
    match newest_source(&spec.dir, &spec.entry) {
        Err(()) => Some(format!(
            "the folder has over {MAX_WALK_ENTRIES} files: not compared, always built"
        )),
        Ok(Some((path, modified))) if modified > built => {
            Some(format!("{} is newer than {entry}", rel(&path)))
        }
        Ok(_) => None,
    }
}

/// Whether a broker variable is a toolchain's own: Go's (`GO` and no `_`, which keeps
/// `GOOGLE_*` keys out), `CGO_*`, Cargo's (`CARGO_*` but its tokens), `RUSTUP_*`, and
/// the compilers those use.
fn toolchain_var(name: &str) -> bool {
    (name.starts_with("GO") && !name.contains('_'))
        || name.starts_with("CGO_")
        || (name.starts_with("CARGO_") && !name.contains("TOKEN"))
        || name.starts_with("RUSTUP_")
        || matches!(
            name,
            "RUSTC"
                | "RUSTC_WRAPPER"
                | "RUSTFLAGS"
                | "RUSTDOCFLAGS"
                | "CC"
                | "CXX"
                | "PKG_CONFIG_PATH"
        )
}

/// The environment of `spec`'s build: the plugins' allow-list
/// ([`process::BASE_ENV`] and `LC_*`) and the toolchains' own variables from
/// `broker_env`, `TMPDIR` = `tmp`, the manifest's `env`, and the variables its
/// `env_passthrough` names. No session variables: a build does not talk to the broker.
pub fn build_env(
    spec: &PluginSpec,
    broker_env: &[(String, String)],
    tmp: &Path,
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = broker_env
        .iter()
        .filter(|(k, _)| {
            process::BASE_ENV.contains(&k.as_str()) || k.starts_with("LC_") || toolchain_var(k)
        })
        .cloned()
        .collect();
    env.insert("TMPDIR".into(), tmp.display().to_string());
    env.extend(spec.env.clone());
    process::passthrough(spec, broker_env, &mut env);
    env.into_iter().collect()
}

/// `key` in `env`, if set and not empty.
fn var<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// Go's build and module caches under `env` (`GOCACHE`, else `$XDG_CACHE_HOME/go-build`
/// or `~/.cache/go-build`; `GOMODCACHE`, else `$GOPATH/pkg/mod` or `~/go/pkg/mod`).
fn go_caches(env: &[(String, String)]) -> Vec<PathBuf> {
    let home = var(env, "HOME").map(PathBuf::from);
    let cache = var(env, "GOCACHE").map(PathBuf::from).or_else(|| {
        var(env, "XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".cache")))
            .map(|c| c.join("go-build"))
    });
    let modcache = var(env, "GOMODCACHE").map(PathBuf::from).or_else(|| {
        var(env, "GOPATH")
            .and_then(|p| std::env::split_paths(p).next())
            .or_else(|| home.as_ref().map(|h| h.join("go")))
            .map(|p| p.join("pkg/mod"))
    });
    cache
        .into_iter()
        .chain(modcache)
        .filter(|p| p.is_absolute())
        .collect()
}

/// Local folders `dir/go.mod` replaces modules with (`replace x => ../sdk-go`).
fn go_replace_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(dir.join("go.mod")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        let directive = if in_block {
            if line == ")" {
                in_block = false;
                continue;
            }
            line
        } else if let Some(rest) = line.strip_prefix("replace") {
            let rest = rest.trim();
            if rest == "(" {
                in_block = true;
                continue;
            }
            rest
        } else {
            continue;
        };
        let Some((_, target)) = directive.split_once("=>") else {
            continue;
        };
        let target = target
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_matches(['"', '`']);
        if target.starts_with("./") || target.starts_with("../") || target.starts_with('/') {
            out.push(dir.join(target));
        }
    }
    out
}

/// Folders the `path = "…"` keys of `dir`'s `Cargo.toml` and `.cargo/config.toml` name
/// (path dependencies, `[patch]` entries), relative to `dir`.
fn cargo_path_deps(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for file in ["Cargo.toml", ".cargo/config.toml", ".cargo/config"] {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            continue;
        };
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            let mut rest = line;
            while let Some(at) = rest.find("path") {
                let before = rest[..at].chars().next_back();
                let after = rest[at + 4..].trim_start();
                rest = &rest[at + 4..];
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                    continue;
                }
                let Some(value) = after.strip_prefix('=').map(str::trim_start) else {
                    continue;
                };
                let Some(quoted) = value.strip_prefix('"') else {
                    continue;
                };
                if let Some(end) = quoted.find('"') {
                    out.push(dir.join(&quoted[..end]));
                }
            }
        }
    }
    out
}

/// What the build of `spec` with `program` and `env` may use (see the module doc):
/// its toolchain (the program's prefix, rustup's toolchains, Go's env file), the Go and
/// Cargo caches (Go's are created for a Go build so that they can be granted), local
/// `replace` and path dependency targets, the manifest's `sandbox.read`/`write`, the
/// folder of an entry outside the plugin folder, and, as its own, the plugin folder
/// and `tmp`.
pub fn grants(
    spec: &PluginSpec,
    program: &Path,
    env: &[(String, String)],
    tmp: &Path,
) -> BuildGrants {
    let mut g = BuildGrants::default();
    let home = var(env, "HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h != Path::new("/"));
    if let Some(prefix) = std::fs::canonicalize(program)
        .ok()
        .and_then(|real| real.parent().and_then(Path::parent).map(Path::to_path_buf))
        .filter(|p| p != Path::new("/"))
    {
        g.read.push(prefix);
    }
    let go_build =
        program.file_name().is_some_and(|n| n == "go") || spec.dir.join("go.mod").is_file();
    for cache in go_caches(env) {
        if go_build {
            // What `go` would create on its first run, where the ruleset allows no mkdir.
            let _ = std::fs::create_dir_all(&cache);
        }
        g.write.push(cache);
    }
    let cargo_home = var(env, "CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".cargo")));
    let rustup_home = var(env, "RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".rustup")));
    g.write.extend(cargo_home);
    g.read.extend(rustup_home);
    if let Some(target) = var(env, "CARGO_TARGET_DIR").map(|t| spec.dir.join(t)) {
        let _ = std::fs::create_dir_all(&target);
        g.write.push(target);
    }
    if let Some(h) = &home {
        g.read.push(h.join(".config/go"));
    }
    let own = std::fs::canonicalize(&spec.dir).unwrap_or_else(|_| spec.dir.clone());
    for dep in go_replace_dirs(&spec.dir)
        .into_iter()
        .chain(cargo_path_deps(&spec.dir))
    {
        if !std::fs::canonicalize(&dep).is_ok_and(|real| real.starts_with(&own)) {
            g.read.push(dep);
        }
    }
    g.read.extend(spec.sandbox.read.iter().cloned());
    g.write.extend(spec.sandbox.write.iter().cloned());
    if !spec.entry.starts_with(&spec.dir) {
        if let Some(parent) = spec.entry.parent() {
            g.write.push(parent.to_path_buf());
        }
    }
    g.read.retain(|p| p.exists());
    g.write.retain(|p| p.exists());
    g.own.push(spec.dir.clone());
    g.own.push(tmp.to_path_buf());
    g
}

/// Whether `line` looks like a compiler's diagnostic with a location
/// (`./main.go:12:2: undefined: foo`, `src/x.c:3:1: error: …`), not a warning or note.
fn located_error(line: &str) -> bool {
    let mut parts = line.splitn(3, ':');
    let (Some(file), Some(number), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !file.is_empty()
        && !file.contains(char::is_whitespace)
        && !number.is_empty()
        && number.chars().all(|c| c.is_ascii_digit())
        && !rest.contains(" warning:")
        && !rest.contains(" note:")
}

/// The line of a build's output (`lines`, in order) that says what is wrong: the first
/// compiler diagnostic with a location (Go, C), `error: …` / `error[E…]: …` (Rust;
/// with its ` --> file:line:col` location appended), or a line of the `go` command
/// (`go: …`); else the process's usual reason line ([`process::why_line`]). Capped.
pub fn first_error_line(lines: &[String]) -> Option<String> {
    let mut picked = None;
    for (i, line) in lines.iter().enumerate() {
        let text = line.trim();
        if text.starts_with("error:") || text.starts_with("error[") {
            let location = lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty())
                .and_then(|l| l.strip_prefix("-->"))
                .map(str::trim);
            picked = Some(match location {
                Some(at) => format!("{text} ({at})"),
                None => text.to_string(),
            });
            break;
        }
        if located_error(text) || text.starts_with("go: ") || text.starts_with("fatal error:") {
            picked = Some(text.to_string());
            break;
        }
    }
    let picked = picked.or_else(|| process::why_line(lines))?;
    if picked.len() <= MAX_WHY_BYTES {
        return Some(picked);
    }
    let mut cut = MAX_WHY_BYTES;
    while !picked.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(format!("{}…", &picked[..cut]))
}

/// `<data_dir>/tmp/.build-<name>/<generation>`: the `TMPDIR` of the build for process
/// `generation`, made empty before it and removed after it (plugin names never start
/// with a dot, so it is no plugin's temp dir; a superseded build's cleanup never meets
/// the next build's files).
pub fn build_tmp_dir(config: &SupervisorConfig, plugin: &str, generation: u64) -> PathBuf {
    config
        .data_dir
        .join("tmp")
        .join(format!(".build-{plugin}"))
        .join(generation.to_string())
}

/// Runs `spec`'s build step for process `generation` of `plugin` when it is due
/// (`always`: an explicit reload; else the mtime rule, [`staleness`]). `Ok` when the
/// process may start (built, up to date, or no build step). `stop` ends when the plugin
/// task stops this process: the build's group is then killed.
pub(super) async fn before_start(
    plugin: &Arc<Plugin>,
    spec: &PluginSpec,
    config: &SupervisorConfig,
    generation: u64,
    always: bool,
    stop: impl Future<Output = ()>,
) -> Result<(), Failure> {
    let Some(argv) = spec.build.as_ref() else {
        return Ok(());
    };
    if !plugin.wants(generation) {
        // Superseded or stopped before its build began.
        return Err(Failure::Stopped);
    }
    let name = plugin.name().to_string();
    let due = if always {
        Some("explicit reload".to_string())
    } else {
        let owned = spec.clone();
        tokio::task::spawn_blocking(move || staleness(&owned))
            .await
            .unwrap_or_else(|_| Some("its sources could not be compared".into()))
    };
    let Some(due) = due else {
        tracing::debug!(plugin = %name, generation, "build skipped: {} is up to date", spec.entry.display());
        return Ok(());
    };
    let command = shown(argv);
    let note = {
        let mut s = plugin.status.lock().unwrap();
        if s.current == generation && s.serving == 0 {
            s.state = PluginState::Building;
            s.reason = format!("building: {command}");
        } else {
            s.reason = format!("building the new version: {command}");
        }
        s.reason.clone()
    };
    let result = run(plugin, spec, argv, config, generation, &due, stop).await;
    let mut s = plugin.status.lock().unwrap();
    if s.reason == note {
        s.reason = String::new();
    }
    if result.is_ok() {
        if s.state == PluginState::Building && s.current == generation {
            s.state = PluginState::Starting;
        }
        // The startup timeout and `startup_ms` count from now, not from before the build.
        if let Some(i) = s.instance_mut(generation) {
            i.started = Instant::now();
        }
    }
    result
}

/// Runs the build (see [`before_start`]).
async fn run(
    plugin: &Arc<Plugin>,
    spec: &PluginSpec,
    argv: &[String],
    config: &SupervisorConfig,
    generation: u64,
    due: &str,
    stop: impl Future<Output = ()>,
) -> Result<(), Failure> {
    let name = plugin.name().to_string();
    let failed = |exit: String, why: Option<String>| {
        tracing::error!(plugin = %name, generation, "{exit}{}", why.as_deref().map(|w| format!(": {w}")).unwrap_or_default());
        Failure::Failed { exit, why }
    };
    let broker_env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let tmp = build_tmp_dir(config, &name, generation);
    let env = build_env(spec, &broker_env, &tmp);
    let program = process::resolve_program(&argv[0], &spec.dir, &env);
    let prepared = {
        let spec = spec.clone();
        let env = env.clone();
        let program = program.clone();
        let tmp = tmp.clone();
        let protected = config.protected.read().unwrap().clone();
        tokio::task::spawn_blocking(move || {
            process::private_dir(&tmp, true).map_err(|e| e.to_string())?;
            let grants = grants(&spec, &program, &env, &tmp);
            sandbox::prepare_build(spec.sandbox.enabled, &grants, &protected)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
    };
    let (ruleset, state) = match prepared {
        Ok(Ok(p)) => {
            for path in &p.refused {
                tracing::warn!(plugin = %name, path = %path.display(), "build sandbox: path not granted: it is inside the broker's data dir or a plugin root");
            }
            (Some(p.ruleset), p.state)
        }
        Ok(Err(state)) => {
            if state == SandboxState::Unavailable {
                tracing::warn!(plugin = %name, "the build runs without a sandbox: no Landlock in this kernel");
            }
            (None, state)
        }
        Err(e) => return Err(failed(format!("build not started: its sandbox: {e}"), None)),
    };
    let mut child = match process::spawn_build(&program, &argv[1..], &spec.dir, env, ruleset).await
    {
        Ok(child) => child,
        Err(e) => return Err(failed(format!("build could not start: {e}"), None)),
    };
    let pid = child.id().unwrap_or(0);
    config.reaper.track(pid);
    let command = shown(argv);
    tracing::info!(plugin = %name, pid, generation, sandbox = %state, "building ({due}): {command}");
    let logs = plugin.logs().clone();
    logs.started(
        pid,
        generation,
        &format!("build: {command} ({due}; sandbox {state})"),
    );
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(tokio::spawn(process::capture(
            out,
            name.clone(),
            "stdout",
            logs.clone(),
            None,
            pid,
            generation,
        )));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(tokio::spawn(process::capture(
            err,
            name.clone(),
            "stderr",
            logs.clone(),
            None,
            pid,
            generation,
        )));
    }
    let started = Instant::now();
    let limit = Duration::from_secs_f64(spec.build_timeout_s);
    tokio::pin!(stop);
    enum End {
        Exited(std::io::Result<std::process::ExitStatus>),
        TimedOut,
        Stopped,
    }
    let end = tokio::select! {
        status = child.wait() => End::Exited(status),
        _ = tokio::time::sleep(limit) => End::TimedOut,
        _ = &mut stop => End::Stopped,
    };
    // The build's whole group goes: compilers and linkers it started, on a timeout too.
    process::signal_group(pid, libc::SIGKILL);
    let _ = child.wait().await;
    config.reaper.untrack(pid);
    for reader in readers {
        let _ = tokio::time::timeout(OUTPUT_FLUSH, reader).await;
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let output = || -> Vec<String> {
        logs.tail_lines(process::KEPT_LINES)
            .into_iter()
            .filter(|l| l.pid == pid && l.stream != "broker")
            .map(|l| l.text)
            .collect()
    };
    let took = started.elapsed().as_secs_f64();
    let outcome = match end {
        End::Stopped => {
            logs.started(
                pid,
                generation,
                "build stopped: the process was superseded or stopped",
            );
            return Err(Failure::Stopped);
        }
        End::TimedOut => Err(failed(
            format!(
                "build timed out after {} s (build_timeout_s; its process group was killed)",
                spec.build_timeout_s
            ),
            None,
        )),
        End::Exited(Err(e)) => Err(failed(format!("build failed: waiting for it: {e}"), None)),
        End::Exited(Ok(status)) if !status.success() => {
            let why = first_error_line(&output());
            Err(failed(
                format!("build failed ({})", process::describe_exit(status)),
                why,
            ))
        }
        End::Exited(Ok(_)) if !spec.entry.exists() => Err(failed(
            format!(
                "build succeeded but did not produce {} (the manifest's `entry`)",
                spec.entry.display()
            ),
            None,
        )),
        End::Exited(Ok(_)) => Ok(()),
    };
    match &outcome {
        Ok(()) => {
            tracing::info!(plugin = %name, pid, generation, "build succeeded in {took:.2} s");
            logs.started(pid, generation, &format!("build succeeded in {took:.2} s"));
        }
        Err(Failure::Failed { exit, why }) => {
            let text = match why {
                Some(why) => format!("{exit}: {why}"),
                None => exit.clone(),
            };
            logs.started(pid, generation, &text);
        }
        Err(Failure::Stopped) => {}
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// A plugin folder with `files` (relative path, age in seconds before now).
    fn folder(files: &[(&str, u64)]) -> (tempfile::TempDir, PluginSpec) {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("gp");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("plugin.json"),
            r#"{"runtime":"exec","entry":"bin/plugin","build":["go","build","-o","bin/plugin","."]}"#,
        )
        .unwrap();
        let now = SystemTime::now();
        age(&dir.join("plugin.json"), now - Duration::from_secs(1000));
        for (rel, secs) in files {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "x").unwrap();
            age(&path, now - Duration::from_secs(*secs));
        }
        // Folders as old as the oldest file: nothing was added or removed since.
        age_folders(&dir, now - Duration::from_secs(1000));
        let spec = PluginSpec::load(&dir).unwrap();
        (root, spec)
    }

    fn age(path: &Path, at: SystemTime) {
        let file = if path.is_dir() {
            std::fs::File::open(path)
        } else {
            std::fs::File::options().write(true).open(path)
        };
        file.unwrap().set_modified(at).unwrap();
    }

    fn age_folders(dir: &Path, at: SystemTime) {
        for item in std::fs::read_dir(dir).unwrap().flatten() {
            if item.file_type().unwrap().is_dir() {
                age_folders(&item.path(), at);
            }
        }
        age(dir, at);
    }

    #[test]
    fn the_mtime_rule_builds_a_missing_or_older_entry_only() {
        let (_root, spec) = folder(&[("main.go", 100)]);
        assert_eq!(staleness(&spec).unwrap(), "bin/plugin does not exist");

        let (_root, spec) = folder(&[("main.go", 100), ("bin/plugin", 50)]);
        assert_eq!(staleness(&spec), None, "built after the last edit");

        let (_root, spec) = folder(&[("main.go", 100), ("pkg/util/x.go", 10), ("bin/plugin", 50)]);
        assert_eq!(
            staleness(&spec).unwrap(),
            "pkg/util/x.go is newer than bin/plugin"
        );

        // The manifest is a source too (a changed `build` line).
        let (_root, spec) = folder(&[("main.go", 100), ("bin/plugin", 50)]);
        age(&spec.dir.join("plugin.json"), SystemTime::now());
        assert_eq!(
            staleness(&spec).unwrap(),
            "plugin.json is newer than bin/plugin"
        );

        // A source removed (or renamed) after the build.
        let (_root, spec) = folder(&[("main.go", 100), ("pkg/x.go", 100), ("bin/plugin", 50)]);
        std::fs::remove_file(spec.dir.join("pkg/x.go")).unwrap();
        assert_eq!(staleness(&spec).unwrap(), "pkg is newer than bin/plugin");
        let (_root, spec) = folder(&[("main.go", 100), ("old.go", 100), ("bin/plugin", 50)]);
        std::fs::remove_file(spec.dir.join("old.go")).unwrap();
        assert_eq!(
            staleness(&spec).unwrap(),
            "the plugin folder is newer than bin/plugin"
        );

        // Output, caches, dot-folders, dependencies and editor files are not sources.
        let (_root, spec) = folder(&[
            ("main.go", 100),
            ("bin/plugin", 50),
            ("bin/other", 1),
            ("target/debug/x", 1),
            (".git/index", 1),
            (".env", 1),
            ("node_modules/m/index.js", 1),
            ("__pycache__/m.pyc", 1),
            ("main.go~", 1),
            (".main.go.swp", 1),
        ]);
        assert_eq!(staleness(&spec), None);

        // An entry at the top of the folder: writing it changes the folder's mtime,
        // which then does not count.
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("top");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("plugin.json"),
            r#"{"runtime":"exec","entry":"plugin","build":["go","build","-o","plugin","."]}"#,
        )
        .unwrap();
        let now = SystemTime::now();
        age(&dir.join("plugin.json"), now - Duration::from_secs(100));
        std::fs::write(dir.join("plugin"), "x").unwrap();
        age(&dir.join("plugin"), now - Duration::from_secs(50));
        let spec = PluginSpec::load(&dir).unwrap();
        assert_eq!(staleness(&spec), None);
    }

    #[test]
    fn a_nested_entry_leaves_its_top_folder_out_of_the_sources() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        let entry = dir.join("dist/index.js");
        assert!(!is_source(dir, &entry, &dir.join("dist/index.js")));
        assert!(!is_source(dir, &entry, &dir.join("dist/chunk.js")));
        assert!(is_source(dir, &entry, &dir.join("src/index.ts")));
        // An entry at the top: only itself is output.
        let entry = dir.join("plugin");
        assert!(!is_source(dir, &entry, &entry));
        assert!(is_source(dir, &entry, &dir.join("lib/x.go")));
        assert!(!is_source(dir, &entry, Path::new("/elsewhere/x.go")));
    }

    #[test]
    fn the_first_error_line_is_the_compilers() {
        let go = lines(&[
            "# example.com/weather",
            "./main.go:12:2: undefined: foo",
            "./main.go:14:9: cannot use x (variable of type int) as string value",
        ]);
        assert_eq!(
            first_error_line(&go).unwrap(),
            "./main.go:12:2: undefined: foo"
        );
        let go_tool = lines(&["go: cannot find main module, but found .git/config in /x"]);
        assert_eq!(
            first_error_line(&go_tool).unwrap(),
            "go: cannot find main module, but found .git/config in /x"
        );
        let rust = lines(&[
            "   Compiling demo v0.1.0 (/p)",
            "warning: unused variable: `y`",
            " --> src/main.rs:2:9",
            "error[E0425]: cannot find value `foo` in this scope",
            " --> src/main.rs:3:5",
            "  |",
            "error: could not compile `demo` (bin \"demo\") due to 1 previous error",
        ]);
        assert_eq!(
            first_error_line(&rust).unwrap(),
            "error[E0425]: cannot find value `foo` in this scope (src/main.rs:3:5)"
        );
        let c = lines(&[
            "x.c:1:1: warning: return type defaults to 'int'",
            "x.c:2:5: error: 'y' undeclared",
        ]);
        assert_eq!(
            first_error_line(&c).unwrap(),
            "x.c:2:5: error: 'y' undeclared"
        );
        let script = lines(&["compiling", "something went wrong", ""]);
        assert_eq!(first_error_line(&script).unwrap(), "something went wrong");
        assert_eq!(first_error_line(&[]), None);
        let long = lines(&[&format!("main.go:1:1: {}", "é".repeat(400))]);
        assert!(first_error_line(&long).unwrap().len() <= MAX_WHY_BYTES + 3);
    }

    #[test]
    fn the_build_environment_passes_toolchain_variables_but_not_secrets_or_the_session() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("p");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("plugin.json"),
            r#"{"runtime":"exec","entry":"bin/p","build":["go","build"],"env":{"MODE":"x"},"env_passthrough":["MYAPP_*"]}"#,
        )
        .unwrap();
        let spec = PluginSpec::load(&dir).unwrap();
        let broker: Vec<(String, String)> = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/me"),
            ("GOFLAGS", "-mod=vendor"),
            ("GOPROXY", "https://proxy"),
            ("GOOGLE_API_KEY", "secret"),
            ("CGO_ENABLED", "0"),
            ("CARGO_HOME", "/c"),
            ("CARGO_REGISTRY_TOKEN", "secret"),
            ("RUSTUP_TOOLCHAIN", "stable"),
            ("RUSTFLAGS", "-Dwarnings"),
            ("OPENAI_API_KEY", "secret"),
            ("HEARTH_TOKEN", "stale"),
            ("MYAPP_URL", "u"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let env: BTreeMap<String, String> = build_env(&spec, &broker, Path::new("/t"))
            .into_iter()
            .collect();
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "CARGO_HOME",
                "CGO_ENABLED",
                "GOFLAGS",
                "GOPROXY",
                "HOME",
                "MODE",
                "MYAPP_URL",
                "PATH",
                "RUSTFLAGS",
                "RUSTUP_TOOLCHAIN",
                "TMPDIR"
            ]
        );
        assert_eq!(env["TMPDIR"], "/t");
    }

    #[test]
    fn local_replace_and_path_dependency_targets_are_found() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        std::fs::write(
            dir.join("go.mod"),
            "module x\n\nrequire github.com/a/b v0.0.0\n\nreplace github.com/a/b => ../../sdk-go // checkout\nreplace (\n\tgithub.com/c/d v1.0.0 => /abs/d\n\tgithub.com/e/f => github.com/g/f v1.2.0\n)\n",
        )
        .unwrap();
        assert_eq!(
            go_replace_dirs(dir),
            [dir.join("../../sdk-go"), PathBuf::from("/abs/d")]
        );
        std::fs::create_dir_all(dir.join(".cargo")).unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            "[dependencies]\nhearth-plugin = { path = \"../sdk-rust\", version = \"1\" }\nserde = \"1\" # path = \"nope\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(".cargo/config.toml"),
            "[patch.crates-io]\nhearth-proto = { path = \"/repo/proto\" }\n",
        )
        .unwrap();
        assert_eq!(
            cargo_path_deps(dir),
            [dir.join("../sdk-rust"), PathBuf::from("/repo/proto")]
        );
    }

    #[test]
    fn arguments_are_shown_quoted_when_needed() {
        let argv = lines(&["sh", "-c", "echo 'hi' > out", "-o", "bin/plugin"]);
        assert_eq!(
            shown(&argv),
            r#"sh -c 'echo '\''hi'\'' > out' -o bin/plugin"#
        );
    }
}
