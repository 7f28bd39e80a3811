//! Hearth: an out-of-process plugin broker for LLM agents.
//!
//! The broker spawns every plugin (Python, Node, Rust …) as a supervised child
//! process; each dials back over gRPC (`PluginHost.Attach`), registers its tools and
//! stage hooks, and answers calls on that one stream. The broker runs the agent: the
//! message pipeline with the plugins' stage hooks around the LLM tool-calling loop.
//! The `hearth` CLI talks to a running broker through the `Admin` and `Agent`
//! services on `<data_dir>/hearth.sock`.
//!
//! # Layout
//! - [`manifest`]: plugins on disk (`plugin.json`, runtime inference, discovery).
//! - [`schema`]: JSON Schema checks of tool parameters and call arguments; LinkZone
//!   `ai.tool` parameter lists → JSON Schema.
//! - [`registry`]: which plugin owns which tool, and every plugin's stage hooks.
//! - [`router`]: every call to a plugin (tool, stage hook, event handler): lookup,
//!   argument check, timeout policy, `max_concurrency`, never-sent retry.
//! - [`triggers`]: LinkZone triggers (types 0–4) and `ai.inject` specs: matching
//!   messages and LLM-written commands, parameters, the system-prompt section, and
//!   their delivery.
//! - [`pipeline`]: stages in order, the permission matrix, running a stage's hooks,
//!   `ai.tool` policies, memory recall.
//! - [`agent`]: many conversations at once — the scheduler (per-conversation order,
//!   priorities, round-robin, bounded queues), one turn (stage hooks around the LLM
//!   tool-calling loop), tool calls with their policies, interrupts, history.
//! - [`llm`]: LLM sources (`hearth.toml`), their failover and load, the typed
//!   messages, and the HTTP client (plain and SSE) that talks to them through an
//!   adapter.
//! - [`adapters`]: the Lua adapter host — sandboxed Lua 5.4 scripts (built-ins from the
//!   top-level `adapters/`, overrides from `<data_dir>/adapters/`) that translate between
//!   the unified completion request/response/stream chunk and each LLM API's JSON.
//! - [`supervisor`]: spawn, handshake, heartbeat, restart (policy, crash budget),
//!   drain, side-by-side reload and stop plugin processes, and processes attached by
//!   hand with one-time tokens; the session of each plugin and its calls in flight;
//!   the reaper that cleans up if the broker is killed.
//! - [`grpc`]: thin service implementations (`PluginHost`, `Admin`, `Agent`, `Input`,
//!   the host services) and the token checks in front of them.
//! - [`server`]: `hearth run` — listeners, admin token, discovery, graceful stop.
//! - [`watch`]: `hearth run --watch` — reload plugins whose files change.
//! - [`storage`]: the broker's state — `hearth.db` (SQLite, WAL, schema migrations) or a
//!   PostgreSQL database shared by several brokers (`storage::pg`: pool, schema,
//!   conversation leases, notifications): conversation history, settings, graph
//!   memory, DocMemory, Knowledge, TextMemory; [`storage_cli`]: `hearth storage
//!   migrate|check`.
//! - [`cli`]: the `hearth` command line and its client side; [`chat`]: `hearth chat`
//!   and `hearth inject`; [`settings_cli`]: `hearth settings`; [`term`]: control and
//!   bidi characters from plugins and the LLM escaped in the log and on a terminal.
//! - [`scaffold`]: `hearth new` — a plugin folder per language and style, with a test.
//! - [`dev`]: `hearth dev` — the plugin author's inner loop, and `hearth dev llm-server`
//!   (the scripted LLM server of crate `hearth-scripted`, for offline tests and demos).
//! - [`observe`]: what operators see — Prometheus metrics, OpenTelemetry traces
//!   (GenAI conventions), gRPC health and `/healthz`/`/readyz`, JSON logs, the
//!   `--http-listen` server and its admin page.
//! - [`nats`]: the NATS connection (`[nats]` config: servers, TLS, credentials);
//!   [`remote`]: plugins on other machines — `hearth node` (a plugin host) and the
//!   broker's side that learns and calls its plugins over NATS.
//! - [`error`]: error types and their one mapping to `tonic::Status`.

pub mod adapters;
pub mod agent;
pub mod chat;
pub mod cli;
pub mod dev;
pub mod error;
#[cfg(test)]
mod golden;
pub mod grpc;
pub mod llm;
pub mod manifest;
pub mod mcp;
pub mod nats;
pub mod observe;
pub mod pipeline;
pub mod registry;
pub mod remote;
pub mod router;
pub mod scaffold;
pub mod schema;
pub mod server;
pub mod settings_cli;
pub mod storage;
pub mod storage_cli;
pub mod supervisor;
pub mod term;
#[doc(hidden)]
pub mod testing;
pub mod triggers;
pub mod watch;

/// The commit this binary was built from (12 hex digits), or `unknown` outside a git checkout; `HEARTH_COMMIT` at build
/// time overrides it.
pub const BUILD_COMMIT: &str = env!("HEARTH_BUILD_COMMIT");
