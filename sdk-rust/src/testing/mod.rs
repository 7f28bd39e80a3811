//! Test a plugin without a broker (feature `testing`).
//!
//! [`Harness`] serves your plugin in process — the SDK's real session code, over a real
//! gRPC connection on a temp Unix socket — to a fake broker ([`FakeBroker`]) whose
//! host services ([`FakeHost`]) keep settings, memory, documents and knowledge in
//! memory (and MCP servers' canned resources and prompts) and answer as the broker does. The harness then drives the plugin as the
//! broker would:
//!
//! - [`Harness::call`]: a tool call, with the arguments checked against the tool's
//!   JSON Schema first (a violation is [`HarnessError::InvalidArguments`] naming the
//!   argument, as the broker reports it); returns a [`ToolOutcome`] (`success`,
//!   `content`, `data`, `error`).
//! - [`Harness::tools`], [`hooks`](Harness::hooks), [`triggers`](Harness::triggers),
//!   [`inject`](Harness::inject): what the plugin registered, after the broker's
//!   registration rules (an invalid tool name or schema fails [`Harness::start`] with
//!   [`HarnessError::Rejected`] naming it).
//! - [`Harness::run_stage`]: the plugin's stage hooks on a
//!   [`StageContext`](crate::StageContext), through the stage permission matrix;
//!   the [`StageOutcome`] has the context the pipeline would go on with and the
//!   writes the matrix dropped.
//! - [`Harness::message`], [`emit`](Harness::emit), [`llm_line`](Harness::llm_line):
//!   a message, broker event or LLM-written command matched against the plugin's
//!   triggers as the broker matches them; the [`EventOutcome`] has the
//!   `sender.reply` texts.
//! - [`Harness::host`]: seed and inspect the fake host services.
//!
//! Add the feature under dev-dependencies, with a tokio runtime for the tests:
//!
//! ```toml
//! [dev-dependencies]
//! hearth-plugin = { version = "0.1", features = ["testing"] }
//! tokio = { version = "1", features = ["macros", "rt"] }
//! ```
//!
//! # Example: a Cyrene-style tool
//!
//! ```
//! use std::sync::Arc;
//!
//! use hearth_plugin::testing::{Harness, HarnessError};
//! use hearth_plugin::{
//!     async_trait, Args, BoxError, CallContext, Plugin, PluginMetadata, Tool, ToolDefinition,
//!     ToolResult,
//! };
//! use serde_json::{json, Value};
//!
//! struct Hello;
//!
//! #[async_trait]
//! impl Tool for Hello {
//!     fn definition(&self) -> ToolDefinition {
//!         ToolDefinition {
//!             name: "hello".into(),
//!             description: "Greets the user.".into(),
//!             parameters: json!({
//!                 "type": "object",
//!                 "properties": {"name": {"type": "string"}},
//!                 "required": ["name"],
//!             }),
//!         }
//!     }
//!
//!     async fn execute(&self, _ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
//!         let name = args["name"].as_str().unwrap_or_default();
//!         Ok(ToolResult::ok(format!("Hello, {name}!")))
//!     }
//! }
//!
//! struct HelloPlugin;
//!
//! #[async_trait]
//! impl Plugin for HelloPlugin {
//!     fn metadata(&self) -> PluginMetadata {
//!         PluginMetadata { name: "hello".into(), version: "1.0.0".into(), ..Default::default() }
//!     }
//!
//!     fn tools(&self) -> Vec<Arc<dyn Tool>> {
//!         vec![Arc::new(Hello)]
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), HarnessError> {
//! // In a test: #[tokio::test] async fn greets() -> Result<(), HarnessError> { … }
//! let t = Harness::start(HelloPlugin).await?;
//! let r = t.call("hello", json!({"name": "Ann"})).await?;
//! assert!(r.success);
//! assert_eq!(r.content, "Hello, Ann!");
//!
//! // Checked against the schema before the plugin sees it, as the broker does.
//! let err = t.call("hello", json!({"name": 5})).await.unwrap_err();
//! assert_eq!(err.to_string(), r#"tool hello: argument `name`: 5 is not of type "string""#);
//! assert_eq!(t.tools()[0].name, "hello");
//! t.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Example: HomeAgent style — settings, a stage hook, a trigger
//!
//! ```
//! use hearth_plugin::testing::Harness;
//! use hearth_plugin::{
//!     async_trait, BoxError, ConfigDef, Event, Plugin, PluginMetadata, Registrar, Stage,
//!     StageContext, ToolDef, Trigger,
//! };
//! use serde_json::{json, Value};
//!
//! struct Weather;
//!
//! #[async_trait]
//! impl Plugin for Weather {
//!     fn metadata(&self) -> PluginMetadata {
//!         PluginMetadata { name: "weather".into(), version: "1.0.0".into(), ..Default::default() }
//!     }
//!
//!     async fn start(&mut self, sdk: &mut Registrar) -> Result<(), BoxError> {
//!         let host = sdk.host().expect("served").clone();
//!         host.settings()
//!             .register_def(ConfigDef {
//!                 key: "units".into(),
//!                 r#type: "string".into(),
//!                 default: Some(json!("metric")),
//!                 ..Default::default()
//!             })
//!             .await?;
//!         let def = ToolDef {
//!             description: "Weather of a city".into(),
//!             parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
//!             ..Default::default()
//!         };
//!         let settings = host.settings();
//!         sdk.register_tool("weather_query", def, move |args: Value| {
//!             let settings = settings.clone();
//!             async move {
//!                 let units = settings.get("units").await.map_err(|e| e.to_string())?;
//!                 Ok::<_, String>(json!({"city": args["city"], "temp": 25, "units": units}))
//!             }
//!         })?;
//!         // on_input may rewrite the message; user_id is read-only everywhere.
//!         sdk.register_stage(Stage::OnInput, |mut ctx: StageContext| async move {
//!             ctx.raw_message = ctx.raw_message.trim().to_string();
//!             ctx.user_id = "admin".into();
//!             Ok::<_, String>(ctx)
//!         });
//!         sdk.register_trigger(Trigger::Command("/weather".into()), |ev: Event| async move {
//!             ev.reply(format!("{}: sunny", ev.param(0).unwrap_or("Beijing")));
//!             Ok::<_, String>(())
//!         })?;
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let t = Harness::builder(Weather).setting("units", "imperial").start().await?;
//! let r = t.call("weather_query", json!({"city": "Paris"})).await?;
//! assert_eq!(r.data, Some(json!({"city": "Paris", "temp": 25, "units": "imperial"})));
//!
//! // A value of the wrong type for its ConfigDef is refused, as a host service error.
//! assert!(t.host().set_setting("units", 3).is_err());
//!
//! let ctx = StageContext {
//!     raw_message: "  hi  ".into(),
//!     user_id: "u1".into(),
//!     ..Default::default()
//! };
//! let out = t.run_stage(Stage::OnInput, ctx).await?;
//! assert_eq!(out.context.raw_message, "hi");
//! assert_eq!(out.context.user_id, "u1", "dropped by the permission matrix");
//! assert_eq!(out.dropped_fields(), ["user_id"]);
//!
//! let ev = t.message("/weather Paris").await?.expect("the command trigger matches");
//! assert_eq!(ev.replies, ["Paris: sunny"]);
//! assert!(t.message("what's up").await?.is_none());
//! t.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! - `harness`: [`Harness`], [`HarnessBuilder`] and the outcomes.
//! - `broker`: [`FakeBroker`] and [`BrokerSession`], the wire-level fake (also for
//!   running a plugin binary as a process: [`FakeBroker::env`]).
//! - `host`: [`FakeHost`], the in-memory host services and their tonic services.
//! - `registration`, `schema`, `triggers`: the broker's rules, mirrored (registration
//!   checks, argument schemas, trigger matching); the broker's files are the
//!   reference. Their tests check them against the golden files in the repository's
//!   `tests/golden/` (setting types, triggers), which the broker's tests check the
//!   broker against. The stage permission matrix is not mirrored: broker and harness
//!   run the same code, [`hearth_proto::permissions`].
//! - `error`: [`HarnessError`].

mod broker;
mod error;
mod harness;
mod host;
mod registration;
mod schema;
mod triggers;

pub use broker::{BrokerSession, FakeBroker, DEFAULT_WAIT};
pub use error::HarnessError;
pub use harness::{
    DroppedWrite, EventOutcome, Harness, HarnessBuilder, HookFailure, ProgressReport, StageOutcome,
    ToolOutcome,
};
pub use host::{FakeHost, InjectKind, Injected, McpCall, ALL_CAPABILITIES, DEFAULT_CAPABILITIES};
pub use registration::{HookInfo, ToolInfo};

/// What a masked secret reads as (`"••••••"`), in `Settings.Dump` and for callers
/// without capability `settings_secrets`.
pub const SECRET_MASK: &str = host::SECRET_MASK;

/// The golden file `name` of the repository's `tests/golden/` (the broker's rules the
/// fakes copy: see `broker/src/golden.rs`), or `None` when it is not there, as when the
/// packaged crate is tested outside the repository: the test then passes without
/// checking anything, saying so on stderr.
#[cfg(test)]
pub(crate) fn golden_file(name: &str) -> Option<serde_json::Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden")
        .join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "skipped: {} not found (not in the Hearth repository)",
                path.display()
            );
            return None;
        }
        Err(e) => panic!("{}: {e}", path.display()),
    };
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}
