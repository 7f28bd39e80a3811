//! Token probe: a plugin that reports what it and a child process of it see of the
//! token variables, for `tests/process.rs` (the spawn token arrives through an
//! inherited pipe, `HEARTH_TOKEN_FD`, never through the environment).
//!
//! Tool `token_probe` (no parameters) answers the JSON text
//! `{"fd_env": …, "token_env": …, "child_fd_env": …}`: `HEARTH_TOKEN_FD` and
//! `HEARTH_TOKEN` in this process (null when unset) and `HEARTH_TOKEN_FD` as
//! `sh -c` sees it (`unset` when unset).
//!
//! Run: `cargo build -p hearth-plugin --example token_probe` →
//! `target/debug/examples/token_probe`.

use hearth_plugin::{async_trait, BoxError, Plugin, PluginMetadata, Registrar, ToolDef};
use serde_json::{json, Value};

struct TokenProbe;

#[async_trait]
impl Plugin for TokenProbe {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "token_probe".into(),
            version: "1.0.0".into(),
            description: "Reports the token variables (SDK tests)".into(),
            ..Default::default()
        }
    }

    async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
        let def = ToolDef {
            description: "What this plugin and its children see of the token variables".into(),
            parameters: json!({"type": "object", "properties": {}}),
            ..Default::default()
        };
        host.register_tool("token_probe", def, |_args: Value| async move {
            let child = tokio::process::Command::new("sh")
                .args(["-c", "printf %s \"${HEARTH_TOKEN_FD-unset}\""])
                .output()
                .await
                .map_err(|e| format!("sh: {e}"))?;
            Ok::<_, String>(json!({
                "fd_env": std::env::var("HEARTH_TOKEN_FD").ok(),
                "token_env": std::env::var("HEARTH_TOKEN").ok(),
                "child_fd_env": String::from_utf8_lossy(&child.stdout),
            }))
        })?;
        Ok(())
    }
}

fn main() {
    hearth_plugin::serve(TokenProbe)
}
