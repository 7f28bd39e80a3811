//! The `--http-listen` server (loopback only): `/metrics` (Prometheus), `/healthz`,
//! `/readyz` (no token; bodies say nothing but the status) and the admin page
//! ([`super::admin`]) at `/`.
//!
//! - `GET /metrics` (a loopback `Host` only: no DNS rebinding): Prometheus text 0.0.4 (`text/plain; version=0.0.4`), or OpenMetrics
//!   1.0 when the scraper's `Accept` names `application/openmetrics-text` (Prometheus
//!   does).
//! - `GET /healthz`: 200 `ok` while the process serves HTTP.
//! - `GET /readyz`: 200 `ready`, or 503 `not ready` (see [`super::health::Readiness`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::health::Readiness;
use crate::agent::Agent;
use crate::grpc::AdminService;
use crate::llm::SourcePool;
use crate::storage::Settings;
use crate::supervisor::Supervisor;

/// What the HTTP server's handlers (and the admin page) reach: the broker's own
/// services, in process.
pub struct HttpState {
    /// Readiness for `/readyz`.
    pub readiness: Arc<Readiness>,
    /// Plugins: status, logs, restart/reload/unload.
    pub supervisor: Arc<Supervisor>,
    /// The Admin service, as the CLI uses it over gRPC.
    pub admin: AdminService,
    /// The agent (a chat turn from the admin page).
    pub agent: Agent,
    /// LLM sources with their state.
    pub sources: Arc<SourcePool>,
    /// Core and plugin settings in hearth.db.
    pub settings: Settings,
    /// The data dir.
    pub data_dir: PathBuf,
    /// The admin token (login to the admin page).
    pub admin_token: Arc<str>,
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

/// The router: metrics and health, plus the admin page.
pub fn router(state: Arc<HttpState>) -> axum::Router {
    axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state.clone())
        .merge(super::admin::router(state))
}

async fn metrics(headers: HeaderMap) -> Response {
    // Plugin, tool and model names: not for a page that rebound a name to 127.0.0.1
    // (scrapers send the target's own Host).
    if let Err(e) = super::admin::auth::loopback_host(&headers) {
        return (StatusCode::FORBIDDEN, e).into_response();
    }
    let Some(m) = super::metrics::get() else {
        return (StatusCode::NOT_FOUND, "metrics are off\n").into_response();
    };
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let (body, content_type) = m.render(openmetrics);
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn healthz() -> Response {
    ([(header::CACHE_CONTROL, "no-store")], "ok\n").into_response()
}

async fn readyz(State(state): State<Arc<HttpState>>) -> Response {
    let (status, body) = match state.readiness.check() {
        Ok(()) => (StatusCode::OK, "ready\n"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
    };
    (status, [(header::CACHE_CONTROL, "no-store")], body).into_response()
}

/// A plugin host's (`hearth node`) HTTP endpoints: `/metrics`, `/healthz`, and `/readyz`
/// (200 while `ready()` says so: connected to NATS and not stopping; else 503).
pub fn node_router(ready: Arc<dyn Fn() -> bool + Send + Sync>) -> axum::Router {
    axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route(
            "/readyz",
            get(move || {
                let ready = ready();
                async move {
                    let (status, body) = if ready {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    };
                    (status, [(header::CACHE_CONTROL, "no-store")], body).into_response()
                }
            }),
        )
}

/// Binds `addr` (loopback only; checked by the caller before anything is created).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    use anyhow::Context as _;
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--http-listen: binding {addr}"))
}
