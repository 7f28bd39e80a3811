//! Hearth: an out-of-process plugin broker for LLM agents.
//!
//! The broker spawns every plugin (Python, Node, Rust …) as a supervised child
//! process; each dials back over gRPC (`PluginHost.Attach`), registers its tools,
//! and answers tool calls on that one stream. The `hearth` CLI talks to a running
//! broker through the `Admin` service on `<data_dir>/hearth.sock`.
//!
//! # Layout
//! - [`manifest`]: plugins on disk (`plugin.json`, runtime inference, discovery).
//! - [`schema`]: JSON Schema checks of tool parameters and call arguments; LinkZone
//!   `ai.tool` parameter lists → JSON Schema.
//! - [`registry`]: which plugin owns which tool.
//! - [`adapters`]: the Lua adapter host — sandboxed Lua 5.4 scripts (built-ins from the
//!   top-level `adapters/`, overrides from `<data_dir>/adapters/`) that translate between
//!   the unified completion request/response/stream chunk and each LLM API's JSON.
//! - [`supervisor`]: spawn, handshake, heartbeat, restart (policy, crash budget),
//!   drain, reload and stop plugin processes; the session of each plugin and its
//!   calls in flight; the reaper that cleans up if the broker is killed.
//! - [`grpc`]: thin service implementations (`PluginHost`, `Admin`).
//! - [`server`]: `hearth run` — listeners, admin token, discovery, graceful stop.
//! - [`watch`]: `hearth run --watch` — reload plugins whose files change.
//! - [`cli`]: the `hearth` command line and its client side.
//! - [`error`]: error types and their one mapping to `tonic::Status`.

pub mod adapters;
pub mod cli;
pub mod error;
pub mod grpc;
pub mod manifest;
pub mod registry;
pub mod schema;
pub mod server;
pub mod supervisor;
pub mod watch;
