//! The live parts: a plugin's log as Server-Sent Events (the kept tail, then each new
//! line; `EventSource` in admin.js), and a chat turn's events as NDJSON streamed in
//! the answer to its POST (`fetch` + `ReadableStream` in admin.js).
//!
//! Both are streams polled by the connection itself, not tasks: a browser that goes
//! away drops them. The log stream also ends when the plugin is unloaded and when
//! the broker stops (so the server drains at once).

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream, StreamExt as _};
use hearth_proto::v1::{ChatEvent, Priority};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::{refused, AdminState};
use crate::agent::TurnInput;
use crate::supervisor::process::LogLine;

/// Who the chat box speaks as.
pub(super) const CHAT_USER: &str = "admin";
/// The chat box's channel.
pub(super) const CHAT_CHANNEL: &str = "admin";

/// Lines of the kept log sent first.
const TAIL: usize = 200;

/// How often a log stream looks whether the broker is stopping.
const STOP_POLL: Duration = Duration::from_millis(500);

fn unix_ms(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn log_event(l: &LogLine) -> Event {
    Event::default().data(
        json!({"stream": l.stream, "text": l.text, "pid": l.pid, "generation": l.generation, "unix_ms": unix_ms(l.at)})
            .to_string(),
    )
}

/// `GET /plugins/{name}/logs`: `text/event-stream`, one `data:` JSON object per line
/// (`stream`, `text`, `pid`, `unix_ms`). 401 without a session, 404 for an unknown
/// plugin.
pub(super) async fn logs(
    State(admin): AdminState,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if admin.sessions.get(&headers).is_none() {
        return refused(StatusCode::UNAUTHORIZED, "log in first (/login)");
    }
    let Some(plugin) = admin.http.supervisor.plugin(&name) else {
        return refused(
            StatusCode::NOT_FOUND,
            &format!("no plugin named `{name}` is loaded"),
        );
    };
    let (tail, feed) = plugin.logs().follow(TAIL);
    drop(plugin);
    let readiness = admin.http.readiness.clone();
    let tail = stream::iter(tail.iter().map(log_event).map(Ok).collect::<Vec<_>>());
    let live = stream::unfold(Some(feed), move |feed| {
        let readiness = readiness.clone();
        async move {
            let mut feed = feed?;
            loop {
                if readiness.is_stopping() {
                    return None;
                }
                let next = tokio::select! {
                    next = feed.recv() => next,
                    _ = tokio::time::sleep(STOP_POLL) => continue,
                };
                let event = match next {
                    Ok(l) => log_event(&l),
                    Err(RecvError::Lagged(n)) => Event::default().data(
                        json!({"stream": "broker", "pid": 0,
                            "unix_ms": unix_ms(std::time::SystemTime::now()),
                            "text": format!("…[{} skipped: the reader fell behind]",
                                crate::term::count(n as usize, "line", "lines"))})
                        .to_string(),
                    ),
                    // The plugin was unloaded.
                    Err(RecvError::Closed) => return None,
                };
                return Some((Ok::<_, Infallible>(event), Some(feed)));
            }
        }
    });
    Sse::new(tail.chain(live))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn ndjson_line(e: ChatEvent) -> Option<Result<Bytes, Infallible>> {
    // The shape of `hearth chat --json`.
    let mut line = crate::chat::event_json(&e.event?).to_string();
    line.push('\n');
    Some(Ok(Bytes::from(line)))
}

fn ndjson(events: impl Stream<Item = ChatEvent> + Send + 'static) -> Response {
    (
        [(header::CONTENT_TYPE, "application/x-ndjson; charset=utf-8")],
        Body::from_stream(events.filter_map(|e| async move { ndjson_line(e) })),
    )
        .into_response()
}

/// `POST /chat` (fields `csrf`, `message`): the turn's events, one JSON object a
/// line, until its `final`. 400 for an empty message, 503 when the agent takes no
/// input (busy conversation, stopping).
pub(super) async fn chat(State(admin): AdminState, headers: HeaderMap, body: Bytes) -> Response {
    let post = match admin.post(&headers, &body) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let message = post.field("message").unwrap_or("").to_string();
    if message.trim().is_empty() {
        return refused(StatusCode::BAD_REQUEST, "the message is empty");
    }
    let submitted = admin.http.agent.submit(TurnInput {
        text: message,
        user_id: CHAT_USER.into(),
        group_id: String::new(),
        channel: CHAT_CHANNEL.into(),
        no_memory: false,
        // The page has no confirmation dialog (yet): such tools are not run.
        can_confirm: false,
        priority: Priority::Interactive,
        injected_by: None,
        trace_parent: None,
    });
    match submitted {
        Ok((_, events)) => ndjson(tokio_stream::wrappers::UnboundedReceiverStream::new(events)),
        Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}
