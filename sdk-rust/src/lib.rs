//! Write Hearth plugins in Rust.
//!
//! A Hearth plugin is a child process of the broker. It dials back over gRPC
//! (`HEARTH_ADDR`, `HEARTH_PLUGIN`, and the spawn token read from the pipe named by
//! `HEARTH_TOKEN_FD`), registers its tools and then answers calls. This crate does all
//! of that: you write the tools, [`serve`] runs the session.
//!
//! Two styles, mixable in one plugin:
//! - **Cyrene**: implement [`Tool`] (`definition` / `validate` / `execute`) and return
//!   the tools from [`Plugin::tools`]. `validate` runs first; its error becomes a failed
//!   result and `execute` is not called.
//! - **HomeAgent**: in [`Plugin::start`], call [`Registrar::register_tool`] with a
//!   [`ToolDef`] and an async closure taking the arguments as a [`serde_json::Value`],
//!   and [`Registrar::register_stage`] for pipeline stage hooks.
//!
//! LinkZone's parts come along: [`Registrar::register_trigger`] with a [`Trigger`] and
//! a handler of [`Event`]s (`sender.param(i)`, `sender.reply(text)`),
//! [`Registrar::set_inject`] ([`AiInject`]), and `ai.tool` policies ([`AiTool`]) from
//! [`Tool::ai_tool`] or [`ToolDef::ai_tool`].
//!
//! Each call runs as its own task: many calls are in flight at once, a `Ping` is
//! answered while handlers are busy, a panicking handler becomes a failed result
//! ("tool NAME panicked: …") and the plugin keeps serving, and a `Cancel` from the
//! broker cancels the call's [`CallContext::cancellation_token`] and aborts its task.
//! On `Shutdown` the SDK calls [`Plugin::stop`] and exits 0 within the grace period.
//!
//! # Example
//!
//! A complete plugin with one tool of each style:
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use hearth_plugin::async_trait;
//! use hearth_plugin::{
//!     Args, BoxError, CallContext, Plugin, PluginMetadata, Registrar, Tool, ToolDef,
//!     ToolDefinition, ToolResult,
//! };
//! use serde_json::{json, Value};
//!
//! struct HelloTool;
//!
//! #[async_trait]
//! impl Tool for HelloTool {
//!     fn definition(&self) -> ToolDefinition {
//!         ToolDefinition {
//!             name: "hello".into(),
//!             description: "Greets the user. Call it when the user says hello.".into(),
//!             parameters: json!({
//!                 "type": "object",
//!                 "properties": {"name": {"type": "string", "description": "user name"}},
//!             }),
//!         }
//!     }
//!
//!     fn validate(&self, args: &Args) -> Result<(), BoxError> {
//!         match args.get("name") {
//!             None | Some(Value::String(_)) => Ok(()),
//!             Some(_) => Err("`name` must be a string".into()),
//!         }
//!     }
//!
//!     async fn execute(&self, _ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
//!         let name = args.get("name").and_then(Value::as_str).unwrap_or("world");
//!         Ok(ToolResult::ok(format!("Hello, {name}!")))
//!     }
//! }
//!
//! struct HelloPlugin;
//!
//! #[async_trait]
//! impl Plugin for HelloPlugin {
//!     fn metadata(&self) -> PluginMetadata {
//!         PluginMetadata {
//!             name: "hello".into(),
//!             version: "1.0.0".into(),
//!             author: "you".into(),
//!             description: "Says hello".into(),
//!         }
//!     }
//!
//!     fn tools(&self) -> Vec<Arc<dyn Tool>> {
//!         vec![Arc::new(HelloTool)]
//!     }
//!
//!     async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
//!         let def = ToolDef {
//!             description: "Weather of a city".into(),
//!             parameters: json!({
//!                 "type": "object",
//!                 "properties": {"city": {"type": "string"}},
//!                 "required": ["city"],
//!             }),
//!             ..Default::default()
//!         };
//!         host.register_tool("weather_query", def, |args: Value| async move {
//!             let city = args["city"].as_str().unwrap_or_default().to_string();
//!             if city.is_empty() {
//!                 // A failed result that the LLM should not retry.
//!                 return Ok::<_, String>(json!({"isError": true, "content": "no city"}));
//!             }
//!             Ok(json!({"city": city, "temp": 25, "weather": "sunny"}))
//!         })?;
//!         Ok(())
//!     }
//! }
//!
//! fn main() {
//!     hearth_plugin::serve(HelloPlugin)
//! }
//! ```
//!
//! Tests and embedders that do not want environment variables use [`serve_with`] with a
//! [`ServeConfig`]. To test a plugin without a broker, enable the feature `testing`
//! (under `[dev-dependencies]`) and use `testing::Harness`: it serves the plugin in
//! process against a fake broker with in-memory host services and drives it as the
//! broker would (tool calls with schema checks, stage hooks through the permission
//! matrix, trigger events); its module docs have runnable examples.
//!
//! # Layout
//! - `tool`: [`Tool`], [`ToolDefinition`], [`ToolResult`], [`CallContext`].
//! - `plugin`: [`Plugin`], [`PluginMetadata`], [`Registrar`] (HomeAgent `register_tool`,
//!   `register_stage`; LinkZone `register_trigger`, `set_inject`).
//! - `linkzone`: [`Trigger`], [`AiTool`], [`AiInject`] and their wire forms.
//! - `event`: [`Event`], what a trigger's handler receives (`reply`, `param`).
//! - `serve`: [`serve`], [`serve_async`], [`serve_with`], [`serve_configured`]; the
//!   session loop.
//! - `host`: [`Host`], token-carrying clients of the broker's host services.
//! - `apis`: the typed host APIs with the seed's names ([`Settings`], [`Memory`],
//!   [`TextMemory`], [`DocMemory`], [`Knowledge`], [`Llm`]), [`Mcp`] (MCP servers'
//!   resources and prompts) and [`HostError`].
//! - `trace`: the broker's W3C trace context around each handler
//!   ([`current_trace_context`]; OpenTelemetry with the feature `opentelemetry`).
//! - `transport`: dialling `unix://` and `http://` broker addresses.
//! - `error`: [`Error`].
//! - `testing` (feature `testing`): the test harness, the fake broker and host services.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod apis;
mod error;
mod event;
mod host;
mod linkzone;
mod plugin;
mod serve;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod tool;
mod trace;
mod transport;

pub use async_trait::async_trait;
pub use hearth_proto as proto;
pub use hearth_proto::v1::{Stage, StageContext};
pub use tokio_util::sync::CancellationToken;

pub use apis::{
    code_name, ConfigDef, Doc, DocMemory, Entity, HostError, Knowledge, KnowledgeEntry, Llm, Mcp,
    Memory, Relation, Settings, TextEvent, TextMemory, Triple, MCP_METHODS,
};
pub use error::{BoxError, Error};
pub use event::Event;
pub use hearth_proto::v1::Priority;
pub use host::{Host, HostChannel, Inject, TokenInterceptor};
pub use linkzone::{AiInject, AiTool, Trigger};
pub use plugin::{Plugin, PluginConfig, PluginMetadata, Registrar, StageOptions, ToolDef};
pub use serve::{
    serve, serve_async, serve_configured, serve_with, ServeConfig, FEATURES, SDK_NAME,
};
pub use tool::{Args, CallContext, Caller, Tool, ToolDefinition, ToolResult};
pub use trace::current_trace_context;

/// Compiles the README's example as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
