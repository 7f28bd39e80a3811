//! Stress plugin: the Rust member of the cross-language stress plugins
//! (`tests/plugins/STRESS.md`), for the broker's integration tests and the chaos
//! benchmark.
//!
//! Tool prefix `P` = `$HEARTH_TOOL_PREFIX` if set and non-empty, else `$HEARTH_PLUGIN`.
//!
//! - `P_echo` (any object): content = JSON text of the arguments, data = the arguments.
//! - `P_sleep` (`{"ms": int, "progress_ms"?: int}`): sleeps `ms`, sending `Progress`
//!   every `progress_ms`; on Cancel prints `P_sleep: cancelled` to stdout.
//! - `P_fail` (`{}`): panics `P_fail: failing on purpose` → the SDK sends the error
//!   result `tool P_fail panicked: P_fail: failing on purpose` and keeps serving.
//! - `P_big` (`{"bytes": int}`): content of exactly `bytes` bytes of `x`. Over the
//!   64 MiB message limit the SDK answers `tool P_big: result is N bytes, over the
//!   64 MiB message limit` instead and keeps serving.
//! - `P_hang` (`{}`): `std::thread::sleep` on the current-thread runtime, forever: the
//!   whole process freezes, pings go unanswered.
//! - `P_t0` … `P_t1999` (`{}`, fault `many_tools` only): each answers its own name.
//!
//! `HEARTH_FAULT`, a comma-separated list:
//! - `exit_before_hello`: exit 1 before dialling the broker.
//! - `hang_before_hello`: never dial; sleep until killed.
//! - `exit_after_hello`: send `Hello`, then exit 1 (no `Register`).
//! - `never_register`: send `Hello`, then never `Register`; sleep until killed (pings
//!   go unanswered).
//! - `wrong_version`: `Hello.protocol_version` = `99.0.0`; the broker answers
//!   `Rejected` and the plugin exits 3.
//! - `crash_mid_call`: `P_sleep` exits the process with status 1 halfway through.
//! - `flood`: a background thread writes one 10 MB line to stdout, then a line of
//!   invalid UTF-8, then ~1 MB/s of lines to each of stdout and stderr until killed.
//! - `junk_stdout`: banners and invalid UTF-8 on stdout at start and on every call.
//! - `grandchild`: at start, spawns `sleep 3600` (same process group; stdin null,
//!   stdout/stderr inherited) and prints `GRANDCHILD_PID=<pid>` to stdout.
//! - `many_tools`: also registers `P_t0` … `P_t1999`.
//! - `bad_schema`: also registers `P_bad_schema` with parameters `{"type": 12}`.
//!
//! Tools are registered in the order `P_echo`, `P_sleep`, `P_fail`, `P_big`, `P_hang`,
//! then `P_bad_schema`, then `P_t0` … `P_t1999`.
//!
//! Run: `cargo build -p hearth-plugin --example stress` → `target/debug/examples/stress`.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use hearth_plugin::{
    async_trait, Args, BoxError, CallContext, Plugin, PluginMetadata, Tool, ToolDefinition,
    ToolResult,
};
use serde_json::{json, Value};

/// Faults that change how tools behave or which exist.
#[derive(Clone, Copy, Default)]
struct Faults {
    crash_mid_call: bool,
    junk_stdout: bool,
    many_tools: bool,
    bad_schema: bool,
}

fn junk(what: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("*** stress plugin banner: {what} ***\n").as_bytes());
    let _ = out.write_all(b"\xff\xfe\xc3\x28 invalid utf-8 \x80\x80\n");
    let _ = out.write_all(b"partial line without newline ");
    let _ = out.flush();
}

/// `flood`: runs on its own thread until a write fails (pipe closed) or the process dies.
fn flood() {
    let line: Vec<u8> = {
        let mut l = b"flood ".to_vec();
        l.resize(1023, b'f');
        l.push(b'\n');
        l
    };
    let mut out = std::io::stdout();
    let err = std::io::stderr();
    let big = vec![b'F'; 10_000_000];
    {
        let mut out = out.lock();
        let start = out
            .write_all(&big)
            .and_then(|()| out.write_all(b"\n\xff\xfe\xc3\x28 flood: invalid utf-8 \x80\n"))
            .and_then(|()| out.flush());
        if start.is_err() {
            return;
        }
    }
    // ~100 KiB per 100 ms on each stream.
    loop {
        for _ in 0..100 {
            if out.lock().write_all(&line).is_err() || err.lock().write_all(&line).is_err() {
                return;
            }
        }
        let _ = out.flush();
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Echo,
    Sleep,
    Fail,
    Big,
    Hang,
    BadSchema,
    /// `P_tN`: answers its own name.
    Named,
}

struct StressTool {
    name: String,
    kind: Kind,
    faults: Faults,
}

/// Prints `NAME: cancelled` when a `P_sleep` call is dropped before it finished (the
/// SDK aborts the task of a cancelled call).
struct CancelNotice<'a> {
    name: &'a str,
    done: bool,
}

impl Drop for CancelNotice<'_> {
    fn drop(&mut self) {
        if !self.done {
            println!("{}: cancelled", self.name);
            let _ = std::io::stdout().flush();
        }
    }
}

fn uint(args: &Args, key: &str) -> Option<u64> {
    args.get(key).and_then(Value::as_u64)
}

impl StressTool {
    async fn sleep(&self, ctx: &CallContext, args: &Args) -> Result<ToolResult, BoxError> {
        let ms = uint(args, "ms").unwrap_or(0);
        let total = Duration::from_millis(ms);
        let mut notice = CancelNotice {
            name: &self.name,
            done: false,
        };
        let step = uint(args, "progress_ms")
            .map(Duration::from_millis)
            .unwrap_or(total);
        let start = tokio::time::Instant::now();
        let deadline = start + total;
        let crash_at = self.faults.crash_mid_call.then(|| start + total / 2);
        loop {
            let now = tokio::time::Instant::now();
            if let Some(at) = crash_at {
                if now >= at {
                    notice.done = true;
                    eprintln!(
                        "{}: crash_mid_call during call {}",
                        self.name,
                        ctx.call_id()
                    );
                    std::process::exit(1);
                }
            }
            if now >= deadline {
                notice.done = true;
                return Ok(ToolResult::ok(format!("slept {ms} ms")));
            }
            let next = crash_at.map_or(deadline, |at| at.min(deadline));
            let wake = (next - now).min(step.max(Duration::from_millis(1)));
            tokio::select! {
                _ = tokio::time::sleep(wake) => {
                    let now = tokio::time::Instant::now();
                    if now < deadline && crash_at.is_none_or(|at| now < at) {
                        let done = now.duration_since(start).as_secs_f64();
                        ctx.progress("still sleeping", Some(done / total.as_secs_f64()));
                    }
                }
                _ = ctx.cancelled() => return Err(format!("{}: cancelled", self.name).into()),
            }
        }
    }
}

#[async_trait]
impl Tool for StressTool {
    fn definition(&self) -> ToolDefinition {
        let empty = json!({"type": "object", "properties": {}});
        let (description, parameters) = match self.kind {
            Kind::Echo => (
                "Returns its arguments (test tool).",
                json!({"type": "object"}),
            ),
            Kind::Sleep => (
                "Sleeps `ms` milliseconds, with progress every `progress_ms` (test tool).",
                json!({
                    "type": "object",
                    "properties": {
                        "ms": {"type": "integer", "minimum": 0},
                        "progress_ms": {"type": "integer", "minimum": 1}
                    },
                    "required": ["ms"]
                }),
            ),
            Kind::Fail => ("Fails on purpose (test tool).", empty),
            Kind::Big => (
                "Returns `bytes` bytes of `x` (test tool).",
                json!({
                    "type": "object",
                    "properties": {"bytes": {"type": "integer", "minimum": 0}},
                    "required": ["bytes"]
                }),
            ),
            Kind::Hang => ("Freezes the whole plugin process (test tool).", empty),
            Kind::BadSchema => (
                "Has an invalid parameters schema (test tool).",
                json!({"type": 12}),
            ),
            Kind::Named => ("Answers its own name (test tool).", empty),
        };
        ToolDefinition {
            name: self.name.clone(),
            description: description.into(),
            parameters,
        }
    }

    fn validate(&self, args: &Args) -> Result<(), BoxError> {
        let need = |key: &str| match uint(args, key) {
            Some(_) => Ok(()),
            None => Err(format!("`{key}` must be a non-negative integer").into()),
        };
        match self.kind {
            Kind::Sleep => need("ms"),
            Kind::Big => need("bytes"),
            _ => Ok(()),
        }
    }

    async fn execute(&self, ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
        if self.faults.junk_stdout {
            junk(&format!("call {} of {}", ctx.call_id(), self.name));
        }
        match self.kind {
            Kind::Echo => {
                let args = Value::Object(args);
                Ok(ToolResult::ok(args.to_string()).with_data(args))
            }
            Kind::Sleep => self.sleep(ctx, &args).await,
            Kind::Fail => panic!("{}: failing on purpose", self.name),
            Kind::Big => {
                let bytes = uint(&args, "bytes").unwrap_or(0);
                let bytes = usize::try_from(bytes).map_err(|_| "`bytes` is too large")?;
                Ok(ToolResult::ok("x".repeat(bytes)))
            }
            Kind::Hang => {
                eprintln!("{}: freezing the process", self.name);
                // Blocks the runtime's only thread: no task (Ping included) runs again.
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            Kind::BadSchema => Ok(ToolResult::ok("should never be called")),
            Kind::Named => Ok(ToolResult::ok(self.name.clone())),
        }
    }
}

struct StressPlugin {
    prefix: String,
    faults: Faults,
}

#[async_trait]
impl Plugin for StressPlugin {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: String::new(), // the broker's name for us (HEARTH_PLUGIN)
            version: "0.1.0".into(),
            author: "hearth".into(),
            description: "Rust stress plugin for tests (tests/plugins/STRESS.md)".into(),
        }
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let tool = |suffix: &str, kind| -> Arc<dyn Tool> {
            Arc::new(StressTool {
                name: format!("{}_{suffix}", self.prefix),
                kind,
                faults: self.faults,
            })
        };
        let mut tools = vec![
            tool("echo", Kind::Echo),
            tool("sleep", Kind::Sleep),
            tool("fail", Kind::Fail),
            tool("big", Kind::Big),
            tool("hang", Kind::Hang),
        ];
        if self.faults.bad_schema {
            tools.push(tool("bad_schema", Kind::BadSchema));
        }
        if self.faults.many_tools {
            tools.extend((0..2000).map(|i| tool(&format!("t{i}"), Kind::Named)));
        }
        tools
    }
}

fn main() {
    let fault = std::env::var("HEARTH_FAULT").unwrap_or_default();
    let has = |f: &str| fault.split(',').any(|x| x.trim() == f);
    if has("exit_before_hello") {
        eprintln!("stress: exit_before_hello");
        std::process::exit(1);
    }
    if has("hang_before_hello") {
        eprintln!("stress: hang_before_hello");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let faults = Faults {
        crash_mid_call: has("crash_mid_call"),
        junk_stdout: has("junk_stdout"),
        many_tools: has("many_tools"),
        bad_schema: has("bad_schema"),
    };
    if has("flood") {
        std::thread::spawn(flood);
    }
    if faults.junk_stdout {
        junk("starting");
    }
    if has("grandchild") {
        match std::process::Command::new("sleep")
            .arg("3600")
            .stdin(std::process::Stdio::null())
            .spawn()
        {
            Ok(child) => {
                println!("GRANDCHILD_PID={}", child.id());
                let _ = std::io::stdout().flush();
            }
            Err(e) => eprintln!("stress: grandchild: cannot spawn `sleep 3600`: {e}"),
        }
    }
    let prefix = match std::env::var("HEARTH_TOOL_PREFIX") {
        Ok(p) if !p.is_empty() => p,
        _ => std::env::var("HEARTH_PLUGIN").unwrap_or_default(),
    };
    let wrong_version = has("wrong_version");
    let exit_after_hello = has("exit_after_hello");
    let never_register = has("never_register");
    hearth_plugin::serve_configured(StressPlugin { prefix, faults }, |mut config| {
        if wrong_version {
            config = config.with_protocol_version("99.0.0");
        }
        if exit_after_hello {
            config = config.after_hello(|| async {
                eprintln!("stress: exit_after_hello");
                let _ = std::io::stdout().flush();
                std::process::exit(1);
            });
        } else if never_register {
            config = config.after_hello(|| async {
                eprintln!("stress: never_register");
                std::future::pending::<()>().await
            });
        }
        config
    })
}
