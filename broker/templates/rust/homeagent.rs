//! __NAME__: a Hearth plugin in Rust (HomeAgent style: `start` + `register_tool`).
//! `src/main.rs` serves it; `cargo test` runs its tests without a broker.

use hearth_plugin::{async_trait, BoxError, Plugin, PluginMetadata, Registrar, ToolDef};
use serde_json::{json, Value};

/// The plugin: its metadata, and its tools registered in `start`.
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

    async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
        let def = ToolDef {
            description: "Greet someone by name".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Who to greet"},
                    "excited": {"type": "boolean", "description": "End with an exclamation mark"}
                },
                "required": ["name"]
            }),
            ..Default::default()
        };
        host.register_tool("__TOOL__", def, |args: Value| async move {
            let name = args["name"].as_str().unwrap_or_default().to_string();
            let mark = if args["excited"].as_bool().unwrap_or(false) { "!" } else { "." };
            Ok::<_, String>(Value::String(format!("Hello, {name}{mark}")))
        })?;
        Ok(())
    }
}
