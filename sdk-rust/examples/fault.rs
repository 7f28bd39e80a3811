//! Fault-injection plugin for the broker's integration tests and benchmarks.
//!
//! Tools (all names get the prefix `<HEARTH_PLUGIN>_` when `HEARTH_TOOL_PREFIX` is set
//! to anything non-empty, so several copies can run side by side):
//! - `rs_echo` (HomeAgent style): returns its arguments as given (content = their JSON
//!   text, data_json = the same JSON).
//! - `rs_sleep` (Cyrene style): `{"ms": N, "progress_ms": P?}` sleeps N ms, sending a
//!   `Progress` every P ms when P is given; honours cancellation.
//! - `rs_panic`: panics ("rs_panic: panicking on purpose").
//!
//! `HEARTH_FAULT`, a comma-separated list:
//! - `exit_before_hello`: exit with status 1 before dialling the broker.
//! - `hang_before_hello`: never dial; sleep until killed.
//! - `junk_stdout`: print banners and invalid UTF-8 bytes to stdout before serving and
//!   on every call.
//! - `bad_schema`: also register `rs_bad_schema`, whose parameters_json is `{"type":12}`.
//! - `exit_mid_call`: `rs_sleep` exits the process with status 1 halfway through.
//!
//! Run: `cargo build -p hearth-sdk --example fault` → `target/debug/examples/fault`.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use hearth_sdk::{
    async_trait, Args, BoxError, CallContext, Plugin, PluginMetadata, Registrar, Tool, ToolDef,
    ToolDefinition, ToolResult,
};
use serde_json::{json, Value};

/// Faults selected by `HEARTH_FAULT`.
#[derive(Clone, Copy, Default)]
struct Faults {
    junk_stdout: bool,
    bad_schema: bool,
    exit_mid_call: bool,
}

fn junk(what: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("*** fault plugin banner: {what} ***\n").as_bytes());
    let _ = out.write_all(b"\xff\xfe\xc3\x28 invalid utf-8 \x80\x80\n");
    let _ = out.write_all(b"partial line without newline ");
    let _ = out.flush();
}

struct SleepTool {
    name: String,
    faults: Faults,
}

#[async_trait]
impl Tool for SleepTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name.clone(),
            description: "Sleeps `ms` milliseconds (test tool).".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "ms": {"type": "integer", "minimum": 0},
                    "progress_ms": {"type": "integer", "minimum": 1}
                },
                "required": ["ms"]
            }),
        }
    }

    fn validate(&self, args: &Args) -> Result<(), BoxError> {
        match args.get("ms") {
            Some(v) if v.as_u64().is_some() => Ok(()),
            _ => Err("`ms` must be a non-negative integer".into()),
        }
    }

    async fn execute(&self, ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
        if self.faults.junk_stdout {
            junk(&format!("call {} of {}", ctx.call_id(), self.name));
        }
        let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
        let total = Duration::from_millis(ms);
        if self.faults.exit_mid_call {
            tokio::time::sleep(total / 2).await;
            eprintln!("fault: exit_mid_call during call {}", ctx.call_id());
            std::process::exit(1);
        }
        let step = args
            .get("progress_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .unwrap_or(total);
        let deadline = tokio::time::Instant::now() + total;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(ToolResult::ok(format!("slept {ms} ms")));
            }
            tokio::select! {
                _ = tokio::time::sleep((deadline - now).min(step)) => {
                    if tokio::time::Instant::now() < deadline {
                        ctx.progress("still sleeping", None);
                    }
                }
                _ = ctx.cancelled() => return Err("cancelled".into()),
            }
        }
    }
}

struct PanicTool {
    name: String,
}

#[async_trait]
impl Tool for PanicTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name.clone(),
            description: "Panics (test tool).".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }
    }

    async fn execute(&self, _ctx: &CallContext, _args: Args) -> Result<ToolResult, BoxError> {
        panic!("rs_panic: panicking on purpose")
    }
}

/// A tool whose schema is not a valid JSON Schema.
struct BadSchemaTool {
    name: String,
}

#[async_trait]
impl Tool for BadSchemaTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name.clone(),
            description: "Has an invalid parameters schema (test tool).".into(),
            parameters: json!({"type": 12}),
        }
    }

    async fn execute(&self, _ctx: &CallContext, _args: Args) -> Result<ToolResult, BoxError> {
        Ok(ToolResult::ok("should never be called"))
    }
}

struct FaultPlugin {
    prefix: String,
    faults: Faults,
}

impl FaultPlugin {
    fn name(&self, tool: &str) -> String {
        format!("{}{tool}", self.prefix)
    }
}

#[async_trait]
impl Plugin for FaultPlugin {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: String::new(), // the broker's name for us (HEARTH_PLUGIN)
            version: "0.1.0".into(),
            author: "hearth".into(),
            description: "Rust fault-injection plugin for tests".into(),
        }
    }

    async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
        let junk_stdout = self.faults.junk_stdout;
        let def = ToolDef {
            description: "Returns its arguments as given (test tool).".into(),
            parameters: json!({"type": "object"}),
        };
        host.register_tool(self.name("rs_echo"), def, move |args: Value| async move {
            if junk_stdout {
                junk("echo");
            }
            Ok::<_, String>(args)
        })?;
        Ok(())
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(SleepTool {
                name: self.name("rs_sleep"),
                faults: self.faults,
            }),
            Arc::new(PanicTool {
                name: self.name("rs_panic"),
            }),
        ];
        if self.faults.bad_schema {
            tools.push(Arc::new(BadSchemaTool {
                name: self.name("rs_bad_schema"),
            }));
        }
        tools
    }
}

fn main() {
    let fault = std::env::var("HEARTH_FAULT").unwrap_or_default();
    let has = |f: &str| fault.split(',').any(|x| x.trim() == f);
    if has("exit_before_hello") {
        eprintln!("fault: exit_before_hello");
        std::process::exit(1);
    }
    if has("hang_before_hello") {
        eprintln!("fault: hang_before_hello");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let faults = Faults {
        junk_stdout: has("junk_stdout"),
        bad_schema: has("bad_schema"),
        exit_mid_call: has("exit_mid_call"),
    };
    if faults.junk_stdout {
        junk("starting");
    }
    let prefix = match std::env::var("HEARTH_TOOL_PREFIX") {
        Ok(v) if !v.is_empty() => {
            format!("{}_", std::env::var("HEARTH_PLUGIN").unwrap_or_default())
        }
        _ => String::new(),
    };
    hearth_sdk::serve(FaultPlugin { prefix, faults })
}
