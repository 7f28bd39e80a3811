//! The Cyrene hello plugin, served by Hearth: one tool, `hello`, that greets the user.
//!
//! Build it and copy the binary next to `plugin.json`:
//! `cargo build -p hello --release && mkdir -p examples/plugins/hello/bin &&
//! cp target/release/hello examples/plugins/hello/bin/`.

use std::sync::Arc;

use hearth_plugin::{
    async_trait, Args, BoxError, CallContext, Plugin, PluginMetadata, Tool, ToolDefinition,
    ToolResult,
};
use serde_json::{json, Value};

/// Greets `name` (default 开拓者).
struct HelloTool;

#[async_trait]
impl Tool for HelloTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "hello".into(),
            description: "向用户打招呼。当用户说你好/嗨/哈喽时调用。".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "用户名字（可选）"}
                }
            }),
        }
    }

    async fn execute(&self, _ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
        let name = match args.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name,
            _ => "开拓者",
        };
        Ok(ToolResult::ok(format!("{name}，昔涟向你问好♪")))
    }
}

/// The plugin: metadata as in its `plugin.json`, and [`HelloTool`].
struct HelloPlugin;

#[async_trait]
impl Plugin for HelloPlugin {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "hello".into(),
            version: "1.0.0".into(),
            author: "hearth".into(),
            description: "示例插件：向用户问好".into(),
        }
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(HelloTool)]
    }
}

fn main() {
    hearth_plugin::serve(HelloPlugin)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn greet(args: Value) -> ToolResult {
        let Value::Object(args) = args else {
            unreachable!()
        };
        let ctx = CallContext::standalone("hello", "hello");
        HelloTool.execute(&ctx, args).await.unwrap()
    }

    #[tokio::test]
    async fn greets_by_name_or_trailblazer() {
        assert_eq!(
            greet(json!({"name": "三月七"})).await.output,
            "三月七，昔涟向你问好♪"
        );
        assert_eq!(greet(json!({})).await.output, "开拓者，昔涟向你问好♪");
        assert_eq!(
            greet(json!({"name": ""})).await.output,
            "开拓者，昔涟向你问好♪"
        );
    }

    #[test]
    fn tool_list_matches_metadata() {
        let tools = HelloPlugin.tools();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].definition().name, "hello");
        assert_eq!(HelloPlugin.metadata().name, "hello");
    }
}
