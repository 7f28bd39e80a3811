//! The plugins' and sources' buttons: restart, reload, unload, use. Each is a POST
//! (checked by [`Admin::post`]) that calls the supervisor or source pool as the
//! `Admin` gRPC service does, then redirects with a message saying how it went.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::html::{seg, Flash};
use super::{Admin, AdminState};

/// Which supervisor operation.
#[derive(Debug, Clone, Copy)]
enum Op {
    Restart,
    Reload,
    Unload,
}

pub(super) async fn restart(
    State(admin): AdminState,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    plugin_op(admin, name, headers, body, Op::Restart).await
}

pub(super) async fn reload(
    State(admin): AdminState,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    plugin_op(admin, name, headers, body, Op::Reload).await
}

pub(super) async fn unload(
    State(admin): AdminState,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    plugin_op(admin, name, headers, body, Op::Unload).await
}

async fn plugin_op(
    admin: Arc<Admin>,
    name: String,
    headers: HeaderMap,
    body: Bytes,
    op: Op,
) -> Response {
    let post = match admin.post(&headers, &body) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let supervisor = &admin.http.supervisor;
    tracing::info!(plugin = %name, "admin page: {op:?}");
    let outcome = match op {
        Op::Restart => supervisor.restart(&name).await,
        Op::Reload => supervisor.reload(&name).await,
        Op::Unload => supervisor.unload(&name).await,
    };
    // Back where the button was: the plugin's page (the table after an unload).
    let back = match (op, post.field("back")) {
        (Op::Unload, _) | (_, None) => "/".to_string(),
        (_, Some(_)) => format!("/plugins/{}", seg(&name)),
    };
    let flash = match outcome {
        Ok(s) => Flash::ok(match op {
            Op::Restart => format!("plugin {name} restarted (pid {})", s.pid),
            Op::Reload => format!("plugin {name} reloaded (pid {})", s.pid),
            Op::Unload => format!("plugin {name} unloaded"),
        }),
        Err(e) => Flash::error(format!(
            "{}: {e}",
            match op {
                Op::Restart => "restart",
                Op::Reload => "reload",
                Op::Unload => "unload",
            }
        )),
    };
    admin.done(&post.session, flash, &back)
}

pub(super) async fn use_source(
    State(admin): AdminState,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let post = match admin.post(&headers, &body) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let name = post.field("source").unwrap_or("").to_string();
    let flash = match admin.http.sources.set_current(&name) {
        Ok(()) => Flash::ok(format!("LLM source {name} is tried first now")),
        Err(e) => Flash::error(e.to_string()),
    };
    admin.done(&post.session, flash, "/llm")
}
