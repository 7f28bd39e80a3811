//! Stage-hook test plugin (Rust) for the broker's pipeline tests; the Node twin is
//! `tests/plugins/hooks.js` and behaves the same. `P` = `$HEARTH_PLUGIN`.
//!
//! - Tool `P_ping` (no parameters) answers `pong from P`.
//! - `$HOOKS`, comma-separated directives, registered in the order given:
//!   - `noop`: a hook at every stage that changes nothing (the benchmarks' hook cost).
//!   - `trace`: a plain hook at every stage. `on_input` … `before_output` append
//!     `"P:<stage>"` to `extra.trace` (`extra_json` becomes an object and `trace` an
//!     array if they are not); `after_output` (read-only) prints
//!     `TRACE P after_output final=<final_text>`.
//!   - `deny=<tool>`: `before_toolcall`; every tool call named `<tool>` gets
//!     `deny = true`, `deny_reason = "not allowed by P"`.
//!   - `own`: `before_toolcall` with own-tools scope; prints `OWN P <tool name>` for
//!     each tool call in the context.
//!
//! stdout is flushed after every line.
//!
//! Run: `cargo build -p hearth-plugin --example hooks` → `target/debug/examples/hooks`.

use std::io::Write;

use hearth_plugin::{
    async_trait, BoxError, Plugin, PluginMetadata, Registrar, Stage, StageContext, ToolDef,
};
use serde_json::{json, Map, Value};

const STAGES: [Stage; 7] = [
    Stage::OnInput,
    Stage::PreAction,
    Stage::PostAction,
    Stage::BeforeToolcall,
    Stage::AfterToolcall,
    Stage::BeforeOutput,
    Stage::AfterOutput,
];

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Appends `entry` to `extra.trace` in the context's `extra_json`.
fn append_trace(ctx: &mut StageContext, entry: &str) {
    let mut extra = match serde_json::from_str::<Value>(&ctx.extra_json) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let trace = extra
        .entry("trace")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !trace.is_array() {
        *trace = Value::Array(Vec::new());
    }
    if let Value::Array(a) = trace {
        a.push(Value::String(entry.to_owned()));
    }
    ctx.extra_json = Value::Object(extra).to_string();
}

struct Hooks {
    name: String,
    directives: Vec<String>,
}

#[async_trait]
impl Plugin for Hooks {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: self.name.clone(),
            version: "1.0.0".into(),
            description: "Stage-hook test plugin".into(),
            ..Default::default()
        }
    }

    async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
        let name = self.name.clone();
        let pong = format!("pong from {name}");
        host.register_tool(
            format!("{name}_ping"),
            ToolDef {
                description: "Answers pong.".into(),
                parameters: json!({"type": "object", "properties": {}}),
                ..Default::default()
            },
            move |_args| {
                let pong = pong.clone();
                async move { Ok::<_, String>(Value::String(pong)) }
            },
        )?;

        for d in &self.directives {
            if d == "noop" {
                for stage in STAGES {
                    host.register_stage(
                        stage,
                        |ctx: StageContext| async move { Ok::<_, String>(ctx) },
                    );
                }
            } else if d == "trace" {
                for stage in STAGES {
                    let name = name.clone();
                    if stage == Stage::AfterOutput {
                        host.register_stage(stage, move |ctx: StageContext| {
                            say(&format!(
                                "TRACE {name} after_output final={}",
                                ctx.final_text
                            ));
                            async move { Ok::<_, String>(ctx) }
                        });
                    } else {
                        let entry = format!("{name}:{}", hearth_plugin::proto::stage_name(stage));
                        host.register_stage(stage, move |mut ctx: StageContext| {
                            append_trace(&mut ctx, &entry);
                            async move { Ok::<_, String>(ctx) }
                        });
                    }
                }
            } else if let Some(tool) = d.strip_prefix("deny=") {
                let tool = tool.to_owned();
                let reason = format!("not allowed by {name}");
                host.register_stage(Stage::BeforeToolcall, move |mut ctx: StageContext| {
                    for t in ctx.tool_calls.iter_mut().filter(|t| t.name == tool) {
                        t.deny = true;
                        t.deny_reason = reason.clone();
                    }
                    async move { Ok::<_, String>(ctx) }
                });
            } else if d == "own" {
                let name = name.clone();
                host.register_stage_own_tools(Stage::BeforeToolcall, move |ctx: StageContext| {
                    for t in &ctx.tool_calls {
                        say(&format!("OWN {name} {}", t.name));
                    }
                    async move { Ok::<_, String>(ctx) }
                });
            } else {
                return Err(format!("hooks: unknown HOOKS directive {d:?}").into());
            }
        }
        Ok(())
    }
}

fn main() {
    let name = std::env::var("HEARTH_PLUGIN")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "hooks".into());
    let directives = std::env::var("HOOKS")
        .unwrap_or_default()
        .split(',')
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
        .collect();
    hearth_plugin::serve(Hooks { name, directives })
}
