//! The README's first plugin and its test (the "Testing" section), run for real.
//! `the_readme_shows_this_code` checks that the README quotes the two marked parts of
//! this file unchanged, so the README's test is a test that passes.

// README plugin: begin
use std::sync::Arc;
use hearth_plugin::{async_trait, Args, BoxError, CallContext, Plugin, PluginMetadata, Tool, ToolDefinition, ToolResult};
use serde_json::{json, Value};

struct Hello;

#[async_trait]
impl Tool for Hello {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition { name: "hello".into(), description: "Greets the user.".into(),
            parameters: json!({"type": "object", "properties": {"name": {"type": "string"}}}) }
    }
    async fn execute(&self, _ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
        let name = args.get("name").and_then(Value::as_str).unwrap_or("world");
        Ok(ToolResult::ok(format!("Hello, {name}!")))
    }
}

struct HelloPlugin;

#[async_trait]
impl Plugin for HelloPlugin {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata { name: "hello".into(), version: "1.0.0".into(), ..Default::default() }
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> { vec![Arc::new(Hello)] }
}
// README plugin: end

// README test: begin
#[cfg(test)]
mod tests {
    use super::*;
    use hearth_plugin::testing::{Harness, HarnessError};

    #[tokio::test]
    async fn greets_by_name() -> Result<(), HarnessError> {
        let t = Harness::start(HelloPlugin).await?;
        let r = t.call("hello", json!({"name": "Ann"})).await?;
        assert!(r.success, "{}", r.error);
        assert_eq!(r.content, "Hello, Ann!");

        // Arguments are checked against the tool's JSON Schema first, as the broker does.
        let err = t.call("hello", json!({"name": 5})).await.unwrap_err();
        assert_eq!(err.to_string(), r#"tool hello: argument `name`: 5 is not of type "string""#);
        t.shutdown().await
    }
}
// README test: end

#[test]
fn the_readme_shows_this_code() {
    let readme = include_str!("../README.md");
    let this = include_str!("readme.rs");
    for part in ["plugin", "test"] {
        let begin = format!("// README {part}: begin\n");
        let end = format!("// README {part}: end");
        let start = this.find(&begin).expect("begin marker") + begin.len();
        let stop = this.find(&end).expect("end marker");
        let code = &this[start..stop];
        assert!(
            readme.contains(code),
            "README.md does not show the {part} of tests/readme.rs unchanged:\n{code}"
        );
    }
}
