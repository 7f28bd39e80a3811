//! Spawning one plugin process: command line per runtime, environment, its own
//! process group, PR_SET_PDEATHSIG, and capped line-by-line capture of its output.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::manifest::{PluginSpec, Runtime};

/// Longest captured output line in bytes; the rest of a longer line is dropped and
/// the line is marked `…[cut N bytes]`.
pub const MAX_LINE_BYTES: usize = 16 * 1024;
/// Output lines kept per plugin for `plugins list` reasons and later `plugins logs`.
pub const KEPT_LINES: usize = 500;

/// Bootstrap for Node plugins: resolves `hearth-sdk/runner` from the plugin's own
/// directory (its node_modules, the parents', NODE_PATH) and serves the entry file
/// given as the first argument.
const NODE_BOOTSTRAP: &str = "const p=require('path');const e=p.resolve(process.argv[1]);\
let r;try{r=require.resolve('hearth-sdk/runner',{paths:[p.dirname(e)]})}catch(_){r='hearth-sdk/runner'}\
require(r).main(e)";

/// Interpreters used when a manifest names none.
#[derive(Debug, Clone)]
pub struct Interpreters {
    /// Python for `runtime: python` (env `HEARTH_PYTHON`, default `python3`).
    pub python: String,
    /// Node for `runtime: node` (env `HEARTH_NODE`, default `node`).
    pub node: String,
}

impl Interpreters {
    /// From `HEARTH_PYTHON` / `HEARTH_NODE`, else `python3` / `node`.
    pub fn from_env() -> Interpreters {
        Interpreters {
            python: std::env::var("HEARTH_PYTHON").unwrap_or_else(|_| "python3".into()),
            node: std::env::var("HEARTH_NODE").unwrap_or_else(|_| "node".into()),
        }
    }
}

/// The program and arguments that start `spec`.
pub fn command_line(spec: &PluginSpec, interp: &Interpreters) -> (String, Vec<String>) {
    let entry = spec.entry.to_string_lossy().into_owned();
    let (program, mut args) = match spec.runtime {
        Runtime::Python => (
            spec.python.clone().unwrap_or_else(|| interp.python.clone()),
            vec!["-m".into(), "hearth".into(), "run".into(), entry],
        ),
        Runtime::Node => (
            spec.node.clone().unwrap_or_else(|| interp.node.clone()),
            vec!["-e".into(), NODE_BOOTSTRAP.into(), entry],
        ),
        Runtime::Exec => (entry, vec![]),
    };
    args.extend(spec.args.iter().cloned());
    (program, args)
}

/// Spawns the plugin in its own process group (pgid = pid), with stdin closed,
/// stdout/stderr piped, the Hearth environment, and (Linux) SIGKILL on broker death.
pub fn spawn(
    spec: &PluginSpec,
    interp: &Interpreters,
    addr: &str,
    token: &str,
) -> std::io::Result<Child> {
    let (program, args) = command_line(spec, interp);
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .current_dir(&spec.dir)
        .envs(&spec.env)
        .env(hearth_proto::ENV_ADDR, addr)
        .env(hearth_proto::ENV_PLUGIN, &spec.name)
        .env(hearth_proto::ENV_TOKEN, token)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe libc calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The broker may have died between fork and prctl.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    cmd.spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot start `{program}`: {e}")))
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
        Some(sig) => format!("signal {sig} ({})", signal_name(sig)),
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
        _ => "signal",
    }
}

/// One captured output line.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    /// The line, capped and with invalid UTF-8 replaced.
    pub text: String,
    /// When it was read.
    pub at: std::time::SystemTime,
}

/// The last [`KEPT_LINES`] output lines of a plugin (both streams, across its
/// restarts), and a feed of new lines for followers.
#[derive(Debug)]
pub struct LogRing {
    lines: Mutex<VecDeque<LogLine>>,
    feed: tokio::sync::broadcast::Sender<LogLine>,
}

impl Default for LogRing {
    fn default() -> Self {
        LogRing {
            lines: Mutex::new(VecDeque::new()),
            feed: tokio::sync::broadcast::Sender::new(256),
        }
    }
}

impl LogRing {
    fn push(&self, line: LogLine) {
        let mut lines = self.lines.lock().unwrap();
        if lines.len() == KEPT_LINES {
            lines.pop_front();
        }
        lines.push_back(line.clone());
        // No followers is fine.
        let _ = self.feed.send(line);
    }

    /// The last `n` lines as `[stream] text`, oldest first.
    pub fn tail(&self, n: usize) -> Vec<String> {
        self.tail_lines(n)
            .into_iter()
            .map(|l| format!("[{}] {}", l.stream, l.text))
            .collect()
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

/// Reads `reader` line by line until EOF, logging each line tagged with the plugin
/// and stream and keeping it in `ring`. Lines are capped at [`MAX_LINE_BYTES`] and
/// non-UTF-8 bytes are replaced, so no output can exhaust the broker's memory.
pub async fn capture<R: AsyncRead + Unpin>(
    reader: R,
    plugin: String,
    stream: &'static str,
    ring: Arc<LogRing>,
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
        tracing::info!(target: "hearth::plugin", plugin = %plugin, stream, "{text}");
        ring.push(LogLine {
            stream,
            text,
            at: std::time::SystemTime::now(),
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
