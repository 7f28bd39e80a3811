//! Spawning one plugin process: command line per runtime, a clean environment, its
//! token on an inherited pipe, its sandbox, its own process group, PR_SET_PDEATHSIG
//! (from a thread that never exits), and capped line-by-line capture of its output.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use super::sandbox::{self, Protected, SandboxState};
use crate::manifest::{McpTransport, PluginSpec, Runtime};

/// Longest captured output line in bytes; the rest of a longer line is dropped and
/// the line is marked `…[cut N bytes]`.
pub const MAX_LINE_BYTES: usize = 16 * 1024;
/// Output lines kept per plugin for `plugins list` reasons and later `plugins logs`.
pub const KEPT_LINES: usize = 500;

/// Bootstrap for Node plugins: resolves `hearth-plugin/runner` from the plugin's own
/// directory (its node_modules, the parents', NODE_PATH) and serves the entry file
/// given as the first argument.
/// When `hearth-plugin` cannot be found at all, its last stderr line (the reason
/// `plugins list` shows) says so and how to install it, instead of a Node stack.
const NODE_BOOTSTRAP: &str = "const p=require('path');const e=p.resolve(process.argv[1]);\
let r;try{r=require.resolve('hearth-plugin/runner',{paths:[p.dirname(e)]})}catch(_){\
try{r=require.resolve('hearth-plugin/runner')}catch(_){process.stderr.write('hearth-plugin: cannot load '+e+\
\": module 'hearth-plugin' not found (the broker resolves hearth-plugin/runner from \"+p.dirname(e)+\
'); run `npm install hearth-plugin` in '+p.dirname(e)+'\\n');process.exit(2)}}require(r).main(e)";

/// Interpreters used when a manifest names none.
#[derive(Debug, Clone)]
pub struct Interpreters {
    /// Python for `runtime: python` (env `HEARTH_PYTHON`, default `python3`).
    pub python: String,
    /// Node for `runtime: node` (env `HEARTH_NODE`, default `node`).
    pub node: String,
}

impl Interpreters {
    /// From `HEARTH_PYTHON` / `HEARTH_NODE`, else `python3` / `node`. A relative path
    /// (`.venv/bin/python`) is taken from the current directory, as a shell would, not
    /// from each plugin's folder, where plugins start.
    pub fn from_env() -> Interpreters {
        let program = |var: &str, default: &str| {
            let value = std::env::var(var).unwrap_or_else(|_| default.into());
            let path = std::path::Path::new(&value);
            if value.contains('/') && path.is_relative() {
                if let Ok(abs) = std::path::absolute(path) {
                    return abs.to_string_lossy().into_owned();
                }
            }
            value
        };
        Interpreters {
            python: program("HEARTH_PYTHON", "python3"),
            node: program("HEARTH_NODE", "node"),
        }
    }
}

/// The program and arguments that start `spec`.
pub fn command_line(spec: &PluginSpec, interp: &Interpreters) -> (String, Vec<String>) {
    let entry = spec.entry.to_string_lossy().into_owned();
    let (program, mut args) = match spec.runtime {
        Runtime::Python => (
            spec.python.clone().unwrap_or_else(|| interp.python.clone()),
            vec!["-m".into(), "hearth_plugin".into(), "run".into(), entry],
        ),
        Runtime::Node => (
            spec.node.clone().unwrap_or_else(|| interp.node.clone()),
            vec!["-e".into(), NODE_BOOTSTRAP.into(), entry],
        ),
        Runtime::Exec => (entry, vec![]),
        Runtime::Mcp => match spec.mcp.as_ref().map(|m| &m.transport) {
            Some(McpTransport::Stdio { program, args, .. }) => (program.clone(), args.clone()),
            // A `url` server has no process; nothing calls this for one.
            _ => (String::new(), vec![]),
        },
    };
    args.extend(spec.args.iter().cloned());
    (program, args)
}

/// Variables of the broker's environment every plugin gets: what runtimes need to
/// find programs, libraries, locales, time zones and TLS roots, and nothing that
/// usually holds a secret. `LC_*` are passed too. Anything else only through the
/// manifest's `env` or `env_passthrough`.
pub const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "PYTHONPATH",
    "NODE_PATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
];

/// The file descriptor number on which a plugin finds its token pipe
/// ([`hearth_proto::ENV_TOKEN_FD`]).
pub const TOKEN_FD: i32 = 3;

/// What a spawn needs besides the manifest.
#[derive(Debug)]
pub struct Launch<'a> {
    /// Address the plugin dials (`HEARTH_ADDR`).
    pub addr: &'a str,
    /// Its fresh spawn token (passed through a pipe on fd [`TOKEN_FD`]).
    pub token: &'a str,
    /// Its own data directory (`HEARTH_PLUGIN_DATA`), created 0700.
    pub data: PathBuf,
    /// Its own temp directory (`TMPDIR`), emptied and created 0700 at each spawn.
    pub tmp: PathBuf,
    /// What the sandbox keeps out.
    pub protected: &'a Protected,
}

/// A started plugin process and how it is confined.
#[derive(Debug)]
pub struct Spawned {
    /// The process.
    pub child: Child,
    /// Its sandbox.
    pub sandbox: SandboxState,
    /// Time spent preparing its folders and sandbox before the fork.
    pub prepared_in: std::time::Duration,
}

/// The standard OpenTelemetry variables a plugin gets when the broker traces.
pub const OTEL_ENV: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_PROPAGATORS",
];

/// The environment of `spec`'s process: [`BASE_ENV`] (and `LC_*`) from `broker_env`,
/// `TMPDIR`, [`OTEL_ENV`] and `OTEL_SERVICE_NAME` (the plugin's name) when the broker
/// traces, the manifest's `env`, the variables `env_passthrough` names, then the
/// session variables.
pub fn plugin_env(
    spec: &PluginSpec,
    broker_env: &[(String, String)],
    launch: &Launch<'_>,
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = broker_env
        .iter()
        .filter(|(k, _)| BASE_ENV.contains(&k.as_str()) || k.starts_with("LC_"))
        .cloned()
        .collect();
    env.insert("TMPDIR".into(), launch.tmp.display().to_string());
    if crate::observe::trace::enabled() {
        // Where the broker sends its spans, so a plugin's own spans (children of the
        // broker's, through `traceparent`) reach the same collector; its service name
        // is the plugin's. Not `OTEL_EXPORTER_OTLP_HEADERS`: often a collector
        // credential, passed only when `env_passthrough` names it.
        for (k, v) in broker_env {
            if OTEL_ENV.contains(&k.as_str()) {
                env.insert(k.clone(), v.clone());
            }
        }
        env.insert("OTEL_SERVICE_NAME".into(), spec.name.clone());
    }
    env.extend(spec.env.clone());
    passthrough(spec, broker_env, &mut env);
    if spec.runtime == Runtime::Mcp {
        // An MCP server speaks MCP on stdio: no session with the broker, no token.
        return env.into_iter().collect();
    }
    env.insert(hearth_proto::ENV_ADDR.into(), launch.addr.into());
    env.insert(hearth_proto::ENV_PLUGIN.into(), spec.name.clone());
    env.insert(hearth_proto::ENV_TOKEN_FD.into(), TOKEN_FD.to_string());
    env.insert(
        hearth_proto::ENV_PLUGIN_DATA.into(),
        launch.data.display().to_string(),
    );
    env.insert("PYTHONUNBUFFERED".into(), "1".into());
    env.into_iter().collect()
}

/// Adds to `env` the variables of `broker_env` the manifest's `env_passthrough` names
/// (a name, or a prefix ending in `*`), never a session variable and a loader variable
/// (`LD_PRELOAD` …) only with `allow_loader_env`. Plugins and builds alike.
pub(super) fn passthrough(
    spec: &PluginSpec,
    broker_env: &[(String, String)],
    env: &mut BTreeMap<String, String>,
) {
    for (key, value) in broker_env {
        let passed = spec
            .env_passthrough
            .iter()
            .any(|p| match p.strip_suffix('*') {
                Some(prefix) => key.starts_with(prefix),
                None => key == p,
            });
        let session = crate::manifest::SESSION_ENV.contains(&key.as_str());
        if passed && !session && (spec.allow_loader_env || !crate::manifest::is_loader_env(key)) {
            env.insert(key.clone(), value.clone());
        }
    }
}

/// `program` as an absolute path: relative to the plugin folder `dir` (its working
/// directory) when it has a `/`, else the first executable match on `PATH`. The
/// sandbox is built for, and the process started from, this one path.
pub(super) fn resolve_program(program: &str, dir: &Path, env: &[(String, String)]) -> PathBuf {
    if program.contains('/') {
        return dir.join(program);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/bin:/bin");
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| program.into())
}

/// The umask plugins get (the operator's, from before the broker tightened its own).
static PLUGIN_UMASK: AtomicU32 = AtomicU32::new(0o022);

/// Sets the umask plugin processes start with (the broker's own stays 077).
pub fn set_plugin_umask(mask: u32) {
    PLUGIN_UMASK.store(mask, Ordering::Relaxed);
}

/// A job for the spawner thread.
type SpawnJob = Box<dyn FnOnce() + Send>;

/// The thread every plugin is forked from. PR_SET_PDEATHSIG fires when the *thread*
/// that forked the child exits, not the process: forked from a tokio worker, a plugin
/// was SIGKILLed when that worker retired (a worker that ran `block_in_place` becomes
/// a blocking-pool thread and exits after 10 s idle). This thread never exits, so the
/// signal comes only when the broker process dies.
fn spawner() -> &'static std::sync::mpsc::Sender<SpawnJob> {
    static SPAWNER: OnceLock<std::sync::mpsc::Sender<SpawnJob>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("hearth-spawner".into())
            .spawn(move || {
                for job in rx {
                    // A panicking job must not end this thread: every plugin it forked
                    // would get its parent-death SIGKILL.
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                        tracing::error!("a plugin spawn panicked; the spawner goes on");
                    }
                }
            })
            .expect("starting the plugin spawner thread");
        tx
    })
}

/// Spawns the plugin in its own session and process group (pgid = pid), with stdin closed,
/// stdout/stderr piped, a clean environment ([`plugin_env`]), its token on fd
/// [`TOKEN_FD`], its sandbox (unless opted out or unavailable), the operator's umask,
/// and (Linux) SIGKILL when the broker dies. `started` gets the new pid on the
/// spawner thread right after the fork, before this future is woken: a plugin that
/// registers within a scheduling round then already has its pid recorded. Errors: the
/// program cannot start, its folders cannot be created, or its sandbox cannot be built
/// (it is then not started).
pub async fn spawn(
    spec: &PluginSpec,
    interp: &Interpreters,
    launch: &Launch<'_>,
    started: impl FnOnce(u32) + Send + 'static,
) -> std::io::Result<Spawned> {
    let (program, args) = command_line(spec, interp);
    // Variables that are not UTF-8 cannot be on the allow-list's names; skip them
    // (std::env::vars would panic on one).
    let broker_env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let env = plugin_env(spec, &broker_env, launch);
    let cwd = match spec.mcp.as_ref().map(|m| &m.transport) {
        Some(McpTransport::Stdio { cwd, .. }) => cwd.clone(),
        _ => spec.dir.clone(),
    };
    let program_path = resolve_program(&program, &cwd, &env);

    // Folders, probes and the ruleset: blocking work, off the async workers.
    let preparing = std::time::Instant::now();
    let prepared = {
        let spec = spec.clone();
        let (data, tmp) = (launch.data.clone(), launch.tmp.clone());
        let protected = launch.protected.clone();
        let env = env.clone();
        let program_path = program_path.clone();
        tokio::task::spawn_blocking(move || {
            private_dir(&data, false)?;
            private_dir(&tmp, true)?;
            sandbox::prepare(&spec, &program_path, &env, &data, &tmp, &protected)
                .map_err(std::io::Error::other)
        })
        .await
        .map_err(std::io::Error::other)??
    };
    let (ruleset, state) = match prepared {
        Ok(p) => {
            for path in &p.refused {
                tracing::warn!(plugin = %spec.name, path = %path.display(), "sandbox path not granted: it is inside the broker's data dir or a plugin root");
            }
            if spec.sandbox.net_connect.is_some()
                && matches!(p.state, SandboxState::Landlock { ports: None, .. })
            {
                tracing::warn!(plugin = %spec.name, "sandbox.net_connect is not enforced: this kernel's Landlock (ABI < 4) cannot restrict TCP");
            }
            (Some(p.ruleset), p.state)
        }
        Err(state) => (None, state),
    };

    let (reader, mut writer) = std::io::pipe()?;
    {
        use std::io::Write;
        // A token is far below the pipe's buffer: this never blocks.
        writer.write_all(launch.token.as_bytes())?;
    }
    drop(writer);

    let mcp = spec.runtime == Runtime::Mcp;
    let mut cmd = Command::new(&program_path);
    cmd.args(&args)
        .current_dir(&cwd)
        .env_clear()
        .envs(env)
        // An MCP server's protocol channel is stdin/stdout.
        .stdin(if mcp {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let token_fd = reader.as_raw_fd();
    let ruleset_fd = ruleset.as_ref().map(|r| r.as_raw_fd());
    let umask = PLUGIN_UMASK.load(Ordering::Relaxed) as libc::mode_t;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            detach_and_confine(parent, umask, ruleset_fd)?;
            if mcp {
                return Ok(());
            }
            if token_fd == TOKEN_FD {
                // dup2 onto itself keeps close-on-exec: clear it instead.
                if libc::fcntl(token_fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(token_fd, TOKEN_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }

    // The fds the child inherited are closed after the fork, in the broker.
    let child = spawn_on_spawner(cmd, (reader, ruleset), started)
        .await
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot start `{}`: {e}", program_path.display()),
            )
        })?;
    Ok(Spawned {
        child,
        sandbox: state,
        prepared_in: preparing.elapsed(),
    })
}

/// Starts a plugin's build step (see [`super::build`]): `program` with `args` in `cwd`
/// with exactly `env`, stdin closed and stdout/stderr piped, in its own session and
/// process group, forked from the spawner thread with PR_SET_PDEATHSIG, with the
/// operator's umask and confined by `ruleset` when given. Errors say which program
/// could not start.
pub(super) async fn spawn_build(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: Vec<(String, String)>,
    ruleset: Option<std::os::fd::OwnedFd>,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let ruleset_fd = ruleset.as_ref().map(|r| r.as_raw_fd());
    let umask = PLUGIN_UMASK.load(Ordering::Relaxed) as libc::mode_t;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || detach_and_confine(parent, umask, ruleset_fd));
    }
    spawn_on_spawner(cmd, ruleset, |_| {}).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot run `{}`: {e}", program.display()))
    })
}

/// In a forked child before `exec` (plugins and builds alike): its own session (and so
/// its own process group, pgid = pid: no controlling terminal to inject keystrokes
/// into, and the supervisor and the reaper signal the whole group), SIGKILL when the
/// broker dies (and `_exit` if it already died between fork and prctl), the operator's
/// umask, and the Landlock ruleset when given.
///
/// # Safety
/// Runs between fork and exec: it makes only async-signal-safe libc calls.
unsafe fn detach_and_confine(
    parent: libc::pid_t,
    umask: libc::mode_t,
    ruleset_fd: Option<std::os::fd::RawFd>,
) -> std::io::Result<()> {
    if libc::setsid() < 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[cfg(target_os = "linux")]
    {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    if libc::getppid() != parent {
        libc::_exit(1);
    }
    libc::umask(umask);
    if ruleset_fd.is_some() {
        sandbox::restrict_self(ruleset_fd)?;
    }
    Ok(())
}

/// Forks `cmd` on the spawner thread (so PR_SET_PDEATHSIG follows a thread that lives
/// as long as the broker) and drops `inherited` — the fds the child inherits — in the
/// broker right after the fork, and gives `started` the child's pid there. Errors: the
/// spawn's own, or the spawner thread gone.
async fn spawn_on_spawner(
    mut cmd: Command,
    inherited: impl Send + 'static,
    started: impl FnOnce(u32) + Send + 'static,
) -> std::io::Result<Child> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle = tokio::runtime::Handle::current();
    let job: SpawnJob = Box::new(move || {
        let _runtime = handle.enter();
        let result = cmd.spawn();
        drop(inherited);
        if let Some(pid) = result.as_ref().ok().and_then(Child::id) {
            // The caller still gets its child when `started` panics.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| started(pid))).is_err() {
                tracing::error!(pid, "recording a spawned plugin's pid panicked");
            }
        }
        let _ = tx.send(result);
    });
    spawner()
        .send(job)
        .map_err(|_| std::io::Error::other("the plugin spawner thread is gone"))?;
    rx.await
        .map_err(|_| std::io::Error::other("the plugin spawner failed (see the broker's log)"))?
}

/// Creates `dir` (and parents) mode 0700; `fresh` empties it first.
pub(super) fn private_dir(dir: &Path, fresh: bool) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if fresh {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("emptying {}: {e}", dir.display()),
                ))
            }
            _ => {}
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| std::io::Error::new(e.kind(), format!("creating {}: {e}", dir.display())))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Sends `signal` to the process group `pgid`. Errors (no such group) are ignored:
/// the group being gone is the goal.
pub fn signal_group(pgid: u32, signal: libc::c_int) {
    if pgid > 1 {
        // SAFETY: plain syscall on a positive pgid.
        unsafe {
            libc::killpg(pgid as libc::pid_t, signal);
        }
    }
}

/// Describes how a process ended: "exit status 1" or "signal 9 (SIGKILL)".
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(sig) => match signal_name(sig) {
            "" => format!("signal {sig}"),
            name => format!("signal {sig} ({name})"),
        },
        None => "unknown exit".into(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "",
    }
}

/// One captured output line, or a line of the broker's own between them
/// ([`LogRing::started`]).
#[derive(Debug, Clone)]
pub struct LogLine {
    /// `stdout`, `stderr`, or `broker` for the broker's own lines.
    pub stream: &'static str,
    /// The line, capped and with invalid UTF-8 replaced.
    pub text: String,
    /// When it was read.
    pub at: std::time::SystemTime,
    /// The process that wrote it (a `broker` line: the process it is about); 0 if
    /// unknown.
    pub pid: u32,
    /// The plugin's process generation (1 for its first process, +1 per start); 0 if
    /// unknown.
    pub generation: u64,
}

/// The last [`KEPT_LINES`] output lines of a plugin (both streams, across its
/// restarts), and a feed of new lines for followers.
#[derive(Debug)]
pub struct LogRing {
    lines: Mutex<VecDeque<LogLine>>,
    feed: tokio::sync::broadcast::Sender<LogLine>,
    /// The generation of the last process started (for lines noted without one).
    generation: std::sync::atomic::AtomicU64,
}

impl Default for LogRing {
    fn default() -> Self {
        LogRing {
            lines: Mutex::new(VecDeque::new()),
            feed: tokio::sync::broadcast::Sender::new(256),
            generation: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl LogRing {
    /// Adds a line the broker received for the plugin other than through its output
    /// pipes (e.g. an MCP server's `notifications/message`) on stream `stream`.
    pub fn note(&self, stream: &'static str, text: String, pid: u32) {
        let generation = self.generation.load(std::sync::atomic::Ordering::Relaxed);
        self.push(LogLine {
            stream,
            text,
            at: std::time::SystemTime::now(),
            pid,
            generation,
        });
    }

    fn push(&self, line: LogLine) {
        let mut lines = self.lines.lock().unwrap();
        if lines.len() == KEPT_LINES {
            lines.pop_front();
        }
        lines.push_back(line.clone());
        // No followers is fine.
        let _ = self.feed.send(line);
    }

    /// Marks the start of process `pid` of `generation` between the output lines
    /// (`why`: "started", "restart 2; last exit: exit status 1" …), so `plugins logs`
    /// shows where one process ends and the next begins.
    pub fn started(&self, pid: u32, generation: u64, why: &str) {
        self.generation
            .store(generation, std::sync::atomic::Ordering::Relaxed);
        self.push(LogLine {
            stream: "broker",
            text: format!("pid {pid} {why}"),
            at: std::time::SystemTime::now(),
            pid,
            generation,
        });
    }

    /// The last `n` output lines (not the broker's own) as `[stream] text`, oldest
    /// first.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        let mut tail: Vec<String> = lines
            .iter()
            .rev()
            .filter(|l| l.stream != "broker")
            .take(n)
            .map(|l| format!("[{}] {}", l.stream, l.text))
            .collect();
        tail.reverse();
        tail
    }

    /// The last `n` lines, oldest first.
    pub fn tail_lines(&self, n: usize) -> Vec<LogLine> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .skip(lines.len().saturating_sub(n))
            .cloned()
            .collect()
    }

    /// The last `n` lines and a receiver of every later line, with no gap between.
    pub fn follow(&self, n: usize) -> (Vec<LogLine>, tokio::sync::broadcast::Receiver<LogLine>) {
        let lines = self.lines.lock().unwrap();
        let rx = self.feed.subscribe();
        let tail = lines
            .iter()
            .skip(lines.len().saturating_sub(n))
            .cloned()
            .collect();
        (tail, rx)
    }
}

/// Lines of one process's stderr kept to say why it ended.
const TAIL_LINES: usize = 40;
/// Longest reason line taken from a process's output, in bytes.
const MAX_WHY_BYTES: usize = 400;

/// The last stderr lines of one process (the [`LogRing`] mixes a plugin's processes:
/// during a reload the old and the new one write at once).
#[derive(Debug, Default)]
pub struct ProcessTail {
    lines: Mutex<VecDeque<String>>,
}

impl ProcessTail {
    fn push(&self, line: &str) {
        let mut lines = self.lines.lock().unwrap();
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.to_string());
    }

    /// The line that says why the process failed (see [`why_line`]).
    pub fn why(&self) -> Option<String> {
        let lines: Vec<String> = self.lines.lock().unwrap().iter().cloned().collect();
        why_line(&lines)
    }
}

/// The stderr line that says why a process failed: a Go runtime panic or fatal error
/// (`panic: …`, `fatal error: …`; the goroutine dump after it says less), else the
/// first line that names an error (`SyntaxError: …`, `hearth: … import failed: …`,
/// `Error: Cannot find module`, a Rust panic with its message), else the last
/// non-empty line; capped.
pub fn why_line(lines: &[String]) -> Option<String> {
    let go_panic = lines.iter().find(|l| {
        let l = l.trim_end();
        l.starts_with("panic: ") || l.starts_with("fatal error: ")
    });
    let names_error = |l: &str| {
        let head = l.trim_start();
        head.contains("Error")
            || head.contains("error:")
            || head.contains("Exception")
            || head.contains("panicked at")
    };
    let picked = if let Some(go) = go_panic {
        go.trim().to_string()
    } else {
        match lines.iter().position(|l| names_error(l)) {
            Some(i) if lines[i].contains("panicked at") => match lines.get(i + 1) {
                Some(message) if !message.trim().is_empty() => {
                    format!("{} {}", lines[i].trim(), message.trim())
                }
                _ => lines[i].trim().to_string(),
            },
            Some(i) => lines[i].trim().to_string(),
            None => lines
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())?
                .trim()
                .to_string(),
        }
    };
    if picked.len() <= MAX_WHY_BYTES {
        return Some(picked);
    }
    let mut cut = MAX_WHY_BYTES;
    while !picked.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(format!("{}…", &picked[..cut]))
}

/// Reads `reader` line by line until EOF, logging each line tagged with the plugin
/// and stream and keeping it in `ring` (and in `tail`, the process's own). Lines are
/// capped at [`MAX_LINE_BYTES`] and non-UTF-8 bytes are replaced, so no output can
/// exhaust the broker's memory.
pub async fn capture<R: AsyncRead + Unpin>(
    reader: R,
    plugin: String,
    stream: &'static str,
    ring: Arc<LogRing>,
    tail: Option<Arc<ProcessTail>>,
    pid: u32,
    generation: u64,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut line = Vec::with_capacity(256);
    let mut dropped = 0usize;
    let emit = |line: &mut Vec<u8>, dropped: &mut usize| {
        let mut text = String::from_utf8_lossy(line)
            .trim_end_matches('\r')
            .to_string();
        if *dropped > 0 {
            text.push_str(&format!("…[cut {} bytes]", *dropped));
        }
        tracing::info!(target: "hearth_broker::plugin", plugin = %plugin, stream, pid, generation, "{text}");
        if let Some(tail) = &tail {
            tail.push(&text);
        }
        ring.push(LogLine {
            stream,
            text,
            at: std::time::SystemTime::now(),
            pid,
            generation,
        });
        line.clear();
        *dropped = 0;
    };
    loop {
        let buf = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => buf,
        };
        let (chunk, consumed, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        let take = chunk.len().min(room);
        line.extend_from_slice(&chunk[..take]);
        dropped += chunk.len() - take;
        reader.consume(consumed);
        if end {
            emit(&mut line, &mut dropped);
        }
    }
    if !line.is_empty() || dropped > 0 {
        emit(&mut line, &mut dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper(dir: &Path) -> PluginSpec {
        use std::os::unix::fs::PermissionsExt;
        let plugin = dir.join("sleeper");
        std::fs::create_dir_all(&plugin).unwrap();
        let entry = plugin.join("sleeper");
        std::fs::write(&entry, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).unwrap();
        crate::manifest::PluginSpec::load(&plugin).unwrap()
    }

    fn launch<'a>(dir: &Path, protected: &'a Protected) -> Launch<'a> {
        Launch {
            addr: "unix:///nowhere",
            token: "t0ken",
            data: dir.join("data/plugin-data/sleeper"),
            tmp: dir.join("data/tmp/sleeper"),
            protected,
        }
    }

    /// Panics with `why` and the process's stat line unless `pid` is sleeping or
    /// running (not a zombie, not gone).
    fn assert_alive(pid: u32, why: &str) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next();
        assert!(matches!(state, Some("S" | "R")), "{why}: {stat:?}");
    }

    /// PR_SET_PDEATHSIG fires when the forking *thread* exits: a plugin spawned while
    /// the broker ran on a thread that later ends (a retired blocking-pool thread) must
    /// live on.
    #[test]
    fn a_plugin_outlives_the_thread_that_asked_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let spec = sleeper(dir.path());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        let protected = Protected::default();
        let root = dir.path().to_path_buf();
        // The pid reaches `started` on the spawner thread, before `spawn` returns.
        let (tx, started) = std::sync::mpsc::channel();
        let child = std::thread::spawn(move || {
            let interp = Interpreters::from_env();
            let started = move |pid| tx.send(pid).unwrap();
            handle
                .block_on(spawn(&spec, &interp, &launch(&root, &protected), started))
                .unwrap()
                .child
        })
        .join()
        .unwrap();
        let pid = child.id().unwrap();
        assert_eq!(started.try_recv(), Ok(pid));
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_alive(pid, "plugin died with its thread");
        signal_group(pid, libc::SIGKILL);
        drop(child);
        drop(rt);
    }

    /// A `started` callback that panics costs neither the spawn nor the spawner thread:
    /// the caller gets its child, plugins forked before live on (their parent-death
    /// signal follows that thread), and the next spawn works.
    #[tokio::test]
    async fn a_panicking_started_callback_leaves_the_spawner_running() {
        let dir = tempfile::tempdir().unwrap();
        let spec = sleeper(dir.path());
        let (interp, protected) = (Interpreters::from_env(), Protected::default());
        let launch = launch(dir.path(), &protected);
        let before = spawn(&spec, &interp, &launch, |_| {}).await.unwrap().child;
        let panicked = spawn(&spec, &interp, &launch, |_| {
            panic!("deliberate (test): a started callback that panics")
        })
        .await
        .expect("the spawn's child, despite its callback")
        .child;
        let after = spawn(&spec, &interp, &launch, |_| {}).await.unwrap().child;
        std::thread::sleep(std::time::Duration::from_millis(300));
        for child in [&before, &panicked, &after] {
            let pid = child.id().unwrap();
            assert_alive(pid, &format!("plugin {pid} died"));
            signal_group(pid, libc::SIGKILL);
        }
    }

    #[test]
    fn the_line_that_says_why() {
        let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let python = lines(&[
            "hearth: plugin file /p/main.py: import failed: SyntaxError: invalid syntax (main.py, line 2)",
            "Traceback (most recent call last):",
            "SyntaxError: invalid syntax",
        ]);
        assert_eq!(
            why_line(&python).unwrap(),
            "hearth: plugin file /p/main.py: import failed: SyntaxError: invalid syntax (main.py, line 2)"
        );
        let node = lines(&[
            "/p/index.js:3",
            "  foo(",
            "  ^",
            "",
            "SyntaxError: missing ) after argument list",
            "    at wrapSafe (node:internal)",
            "",
            "Node.js v20.1.0",
        ]);
        assert_eq!(
            why_line(&node).unwrap(),
            "SyntaxError: missing ) after argument list"
        );
        let rust = lines(&[
            "thread 'main' panicked at src/main.rs:3:5:",
            "no config",
            "note: run with `RUST_BACKTRACE=1`",
        ]);
        assert_eq!(
            why_line(&rust).unwrap(),
            "thread 'main' panicked at src/main.rs:3:5: no config"
        );
        let go = lines(&[
            "2026/12/02 serving; last Error count 0",
            "panic: boom",
            "",
            "goroutine 7 [running]:",
            "main.(*plugin).Start.func1()",
            "\t/p/main.go:12 +0x25",
            "created by main.(*plugin).Start in goroutine 1",
        ]);
        assert_eq!(why_line(&go).unwrap(), "panic: boom");
        let fatal = lines(&[
            "fatal error: concurrent map writes",
            "",
            "goroutine 9 [running]:",
        ]);
        assert_eq!(
            why_line(&fatal).unwrap(),
            "fatal error: concurrent map writes"
        );
        assert_eq!(why_line(&lines(&["starting", "bye", ""])).unwrap(), "bye");
        assert_eq!(why_line(&[]), None);
    }

    #[test]
    fn the_environment_is_an_allow_list() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = sleeper(dir.path());
        spec.env.insert("MODE".into(), "x".into());
        spec.env_passthrough = vec!["AWS_PROFILE".into(), "MYAPP_*".into(), "LD_PRELOAD".into()];
        let broker: Vec<(String, String)> = [
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C.UTF-8"),
            ("OPENAI_API_KEY", "sk-1"),
            ("HEARTH_LLM_API_KEY", "sk-2"),
            ("AWS_PROFILE", "dev"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("MYAPP_URL", "u"),
            ("LD_PRELOAD", "/evil.so"),
            ("HEARTH_TOKEN", "stale"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let protected = Protected::default();
        let env: BTreeMap<String, String> =
            plugin_env(&spec, &broker, &launch(dir.path(), &protected))
                .into_iter()
                .collect();
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "AWS_PROFILE",
                "HEARTH_ADDR",
                "HEARTH_PLUGIN",
                "HEARTH_PLUGIN_DATA",
                "HEARTH_TOKEN_FD",
                "LC_ALL",
                "MODE",
                "MYAPP_URL",
                "PATH",
                "PYTHONUNBUFFERED",
                "TMPDIR"
            ]
        );
        assert_eq!(env["HEARTH_TOKEN_FD"], "3");
        spec.allow_loader_env = true;
        let env = plugin_env(&spec, &broker, &launch(dir.path(), &protected));
        assert!(env.iter().any(|(k, _)| k == "LD_PRELOAD"));
    }
}
