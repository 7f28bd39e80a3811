//! __NAME__: a Hearth plugin in Rust (Cyrene style: a `Tool` with definition and execute).
//! `src/main.rs` serves it; `cargo test` runs its tests without a broker.

use std::sync::Arc;

use hearth_plugin::{
    async_trait, Args, BoxError, CallContext, Plugin, PluginMetadata, Tool, ToolDefinition,
    ToolResult,
};
use serde_json::{json, Value};

/// Greets someone by name.
pub struct GreetTool;

#[async_trait]
impl Tool for GreetTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "__TOOL__".into(),
            description: "Greet someone by name".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Who to greet"},
                    "excited": {"type": "boolean", "description": "End with an exclamation mark"}
                },
                "required": ["name"]
            }),
        }
    }

    async fn execute(&self, _ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
        let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
        let excited = args.get("excited").and_then(Value::as_bool).unwrap_or(false);
        let mark = if excited { "!" } else { "." };
        Ok(ToolResult::ok(format!("Hello, {name}{mark}")))
    }
}

/// The plugin: its metadata and its tools.
pub struct GreeterPlugin;

#[async_trait]
impl Plugin for GreeterPlugin {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "__NAME__".into(),
            version: "0.1.0".into(),
            author: String::new(),
            description: "__NAME__: says hello".into(),
        }
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(GreetTool)]
    }
}
