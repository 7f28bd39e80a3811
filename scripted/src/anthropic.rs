//! Anthropic Messages (`POST …/v1/messages`): the request's `system` and messages
//! (`tool_result` blocks are tool results), and answers as `message` objects or named
//! SSE events (`shared/wire/anthropic-*`).

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};

use super::{argument_fragments, text_of, Frames, Pacer, Reply, Role, Turn};

/// The `signature` of a scripted `thinking` block (the API's are opaque base64).
const SIGNATURE: &str = "c2NyaXB0ZWQgdGhpbmtpbmc=";

/// `system`, then the messages; a user message's `tool_result` blocks are tool results
/// (each a turn), its text the user's turn.
pub(super) fn turns(request: &Value) -> Vec<Turn> {
    let mut turns = Vec::new();
    if !request["system"].is_null() {
        turns.push(Turn::new(Role::System, text_of(&request["system"])));
    }
    for m in request["messages"].as_array().into_iter().flatten() {
        let content = &m["content"];
        match m["role"].as_str().unwrap_or_default() {
            "assistant" => turns.push(Turn::new(Role::Assistant, text_of(content))),
            "user" => {
                let results: Vec<&Value> = content
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "tool_result")
                    .collect();
                for r in &results {
                    turns.push(Turn::new(Role::Tool, text_of(&r["content"])));
                }
                // `text_of` skips the tool_result blocks (they have no `text`).
                let text = text_of(content);
                if results.is_empty() || !text.is_empty() {
                    turns.push(Turn::new(Role::User, text));
                }
            }
            _ => turns.push(Turn::new(Role::Other, text_of(content))),
        }
    }
    turns
}

/// The API's `stop_reason` for a family-neutral finish reason.
fn stop_reason(finish: &str) -> &str {
    match finish {
        "stop" => "end_turn",
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        "content_filter" => "refusal",
        other => other,
    }
}

fn usage(reply: &Reply, output_tokens: u64) -> Value {
    json!({
        "input_tokens": reply.usage.prompt,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    })
}

fn message_id(reply: &Reply) -> String {
    format!("msg_scripted_{}", reply.n)
}

/// The non-streamed `message`.
pub(super) fn message(reply: &Reply) -> Value {
    let mut content = Vec::new();
    if let Some(thinking) = &reply.reasoning {
        content.push(json!({ "type": "thinking", "thinking": thinking, "signature": SIGNATURE }));
    }
    if let Some(text) = reply.content.as_deref().filter(|t| !t.is_empty()) {
        content.push(json!({ "type": "text", "text": text }));
    }
    for call in &reply.tool_calls {
        content.push(json!({
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": call.arguments_value(),
        }));
    }
    json!({
        "id": message_id(reply),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": stop_reason(&reply.finish_reason),
        "stop_sequence": null,
        "usage": usage(reply, reply.usage.completion),
    })
}

/// The stream's events; each frame is `event: <type>\ndata: <json>\n\n`.
#[derive(Debug, Default)]
struct Events {
    frames: Vec<(Duration, String)>,
    /// Content blocks opened so far (the next block's index).
    blocks: usize,
}

impl Events {
    fn push(&mut self, pause: Duration, event: Value) {
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        self.frames
            .push((pause, format!("event: {kind}\ndata: {event}\n\n")));
    }

    /// Opens the next content block (a `ping` follows the first, as the API does).
    fn open(&mut self, pause: Duration, block: Value) -> usize {
        let index = self.blocks;
        self.push(
            pause,
            json!({ "type": "content_block_start", "index": index, "content_block": block }),
        );
        if index == 0 {
            self.push(Duration::ZERO, json!({ "type": "ping" }));
        }
        self.blocks += 1;
        index
    }

    fn delta(&mut self, pause: Duration, index: usize, delta: Value) {
        self.push(
            pause,
            json!({ "type": "content_block_delta", "index": index, "delta": delta }),
        );
    }

    fn close(&mut self, index: usize) {
        self.push(
            Duration::ZERO,
            json!({ "type": "content_block_stop", "index": index }),
        );
    }
}

/// The streamed answer: `message_start`, the content blocks (thinking, text, one per
/// tool call with its input JSON in fragments), `message_delta`, `message_stop`.
pub(super) fn stream(reply: &Reply) -> Frames {
    let mut ev = Events::default();
    let mut pacer = Pacer::new(reply.pause);
    ev.push(
        Duration::ZERO,
        json!({ "type": "message_start", "message": {
            "id": message_id(reply),
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": usage(reply, 1),
        }}),
    );
    if let Some(thinking) = &reply.reasoning {
        let i = ev.open(
            Duration::ZERO,
            json!({ "type": "thinking", "thinking": "", "signature": "" }),
        );
        for piece in reply.text_pieces(Some(thinking)) {
            ev.delta(
                pacer.next(),
                i,
                json!({ "type": "thinking_delta", "thinking": piece }),
            );
        }
        ev.delta(
            Duration::ZERO,
            i,
            json!({ "type": "signature_delta", "signature": SIGNATURE }),
        );
        ev.close(i);
    }
    if let Some(text) = reply.content.as_deref().filter(|t| !t.is_empty()) {
        let i = ev.open(Duration::ZERO, json!({ "type": "text", "text": "" }));
        for piece in reply.text_pieces(Some(text)) {
            ev.delta(
                pacer.next(),
                i,
                json!({ "type": "text_delta", "text": piece }),
            );
        }
        ev.close(i);
    }
    for call in &reply.tool_calls {
        let i = ev.open(
            pacer.next(),
            json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": {} }),
        );
        let json_delta =
            |partial: &str| json!({ "type": "input_json_delta", "partial_json": partial });
        ev.delta(Duration::ZERO, i, json_delta(""));
        for fragment in argument_fragments(&call.arguments) {
            ev.delta(Duration::ZERO, i, json_delta(&fragment));
        }
        ev.close(i);
    }
    ev.push(
        Duration::ZERO,
        json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason(&reply.finish_reason), "stop_sequence": null },
            "usage": usage(reply, reply.usage.completion),
        }),
    );
    ev.push(Duration::ZERO, json!({ "type": "message_stop" }));
    Frames {
        content_type: "text/event-stream; charset=utf-8",
        frames: ev.frames,
    }
}

/// An Anthropic error body (`{"type": "error", "error": {type, message}}`).
pub(super) fn error(status: StatusCode, message: &str) -> Value {
    let kind = match status.as_u16() {
        400 | 413 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({
        "type": "error",
        "error": { "type": kind, "message": message },
        "request_id": "req_scripted",
    })
}
