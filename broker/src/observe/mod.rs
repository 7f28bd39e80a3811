//! What operators see of a running broker (issue 15; design notes in
//! docs/design/operators-research.md):
//!
//! - [`metrics`]: Prometheus metrics at `/metrics` on `--http-listen`;
//! - [`trace`]: OpenTelemetry spans (GenAI conventions) exported over OTLP when the
//!   standard `OTEL_*` variables ask for it, and the W3C trace context sent to plugins;
//! - [`health`]: gRPC health on the broker's listeners, `/healthz` and `/readyz`;
//! - [`logs`]: `--log-format text|json`;
//! - [`http`]: the `--http-listen` server; [`admin`]: its admin page.
//!
//! All of it costs nothing measurable when off: metrics record only when the HTTP
//! listener is configured, spans only when an OTLP endpoint is.

pub mod admin;
pub mod health;
pub mod http;
pub mod llm;
pub mod logs;
pub mod metrics;
pub mod names;
pub mod trace;
