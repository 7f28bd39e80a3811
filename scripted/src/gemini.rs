//! Gemini `generateContent` (`POST …/models/{model}:generateContent` and
//! `:streamGenerateContent`): the request's `systemInstruction` and contents
//! (`functionResponse` parts are tool results), and answers as GenerateContentResponses,
//! one JSON body or a stream of them (`shared/wire/gemini-*`).

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};

use super::{text_of, Frames, Pacer, Reply, Role, Turn};

/// `systemInstruction`, then the contents: `model` turns are the assistant's; in the
/// others each `functionResponse` part is a tool result, the text the user's turn.
pub(super) fn turns(request: &Value) -> Vec<Turn> {
    let mut turns = Vec::new();
    let system = &request["systemInstruction"];
    if !system.is_null() {
        turns.push(Turn::new(Role::System, text_of(&system["parts"])));
    }
    for content in request["contents"].as_array().into_iter().flatten() {
        let parts = &content["parts"];
        if content["role"] == "model" {
            turns.push(Turn::new(Role::Assistant, text_of(parts)));
            continue;
        }
        let results: Vec<&Value> = parts
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("functionResponse"))
            .collect();
        for r in &results {
            turns.push(Turn::new(Role::Tool, response_text(&r["response"])));
        }
        let text = text_of(parts);
        if results.is_empty() || !text.is_empty() {
            turns.push(Turn::new(Role::User, text));
        }
    }
    turns
}

/// A `functionResponse.response` as text: its `result` when that is all it holds (how
/// the adapter wraps a plain-text tool result), else its JSON.
fn response_text(response: &Value) -> String {
    match response.as_object() {
        Some(o) if o.len() == 1 && o.contains_key("result") => match &o["result"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        _ => response.to_string(),
    }
}

/// The API's `finishReason` for a family-neutral finish reason (Gemini says STOP after
/// function calls too).
fn finish_reason(finish: &str) -> String {
    match finish {
        "stop" | "tool_calls" => "STOP".to_owned(),
        "length" => "MAX_TOKENS".to_owned(),
        "content_filter" => "SAFETY".to_owned(),
        other => other.to_uppercase(),
    }
}

fn usage_metadata(reply: &Reply) -> Value {
    let u = reply.usage;
    let mut meta = json!({
        "promptTokenCount": u.prompt,
        "candidatesTokenCount": u.completion - u.reasoning,
        "totalTokenCount": u.prompt + u.completion,
        "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": u.prompt }],
    });
    if u.reasoning > 0 {
        meta["thoughtsTokenCount"] = json!(u.reasoning);
    }
    meta
}

/// The `thoughtSignature` the scripted server puts on the first call of a response
/// (Gemini 3 signs the first `functionCall` part of a turn and wants it back).
pub const THOUGHT_SIGNATURE: &str = "c2NyaXB0ZWQgdGhvdWdodCBzaWduYXR1cmU=";

/// Call `i` of a response as a `functionCall` part (the first one signed).
fn function_call((i, call): (usize, &super::Call)) -> Value {
    let mut part = json!({ "functionCall": { "name": call.name, "args": call.arguments_value() } });
    if i == 0 {
        part["thoughtSignature"] = json!(THOUGHT_SIGNATURE);
    }
    part
}

/// A GenerateContentResponse with `parts` (and `finishReason` when given).
fn response_with(reply: &Reply, parts: Vec<Value>, finish: Option<&str>) -> Value {
    let mut candidate = json!({
        "content": { "parts": parts, "role": "model" },
        "index": 0,
    });
    if let Some(f) = finish {
        candidate["finishReason"] = json!(finish_reason(f));
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": usage_metadata(reply),
        "modelVersion": reply.model,
        "responseId": format!("scripted-{}", reply.n),
    })
}

/// The non-streamed response.
pub(super) fn response(reply: &Reply) -> Value {
    let mut parts = Vec::new();
    if let Some(thought) = &reply.reasoning {
        parts.push(json!({ "text": thought, "thought": true }));
    }
    if let Some(text) = reply.content.as_deref().filter(|t| !t.is_empty()) {
        parts.push(json!({ "text": text }));
    }
    parts.extend(reply.tool_calls.iter().enumerate().map(function_call));
    if parts.is_empty() {
        parts.push(json!({ "text": "" }));
    }
    response_with(reply, parts, Some(&reply.finish_reason))
}

/// The streamed response: one response per thought and text chunk, the function calls
/// together in one, `finishReason` on the last; as SSE (`data:` events separated by
/// CRLF pairs, as the API sends them) or, without `alt=sse`, as one JSON array.
pub(super) fn stream(reply: &Reply, sse: bool) -> Frames {
    let mut pacer = Pacer::new(reply.pause);
    let mut chunks: Vec<(Duration, Vec<Value>)> = Vec::new();
    for piece in reply.text_pieces(reply.reasoning.as_deref()) {
        chunks.push((
            pacer.next(),
            vec![json!({ "text": piece, "thought": true })],
        ));
    }
    for piece in reply.text_pieces(reply.content.as_deref()) {
        chunks.push((pacer.next(), vec![json!({ "text": piece })]));
    }
    if !reply.tool_calls.is_empty() {
        let calls = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(function_call)
            .collect();
        chunks.push((pacer.next(), calls));
    }
    if chunks.is_empty() {
        chunks.push((Duration::ZERO, vec![json!({ "text": "" })]));
    }
    let last = chunks.len() - 1;
    let mut frames: Vec<(Duration, String)> = chunks
        .into_iter()
        .enumerate()
        .map(|(i, (pause, parts))| {
            let finish = (i == last).then_some(reply.finish_reason.as_str());
            let data = response_with(reply, parts, finish);
            let frame = match (sse, i) {
                (true, _) => format!("data: {data}\r\n\r\n"),
                (false, 0) => format!("[{data}"),
                (false, _) => format!(",\r\n{data}"),
            };
            (pause, frame)
        })
        .collect();
    if sse {
        return Frames {
            content_type: "text/event-stream",
            frames,
        };
    }
    frames.push((Duration::ZERO, "]".to_owned()));
    Frames {
        content_type: "application/json; charset=UTF-8",
        frames,
    }
}

/// A Google API error body (`{"error": {code, message, status}}`).
pub(super) fn error(status: StatusCode, message: &str) -> Value {
    let code = match status.as_u16() {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        code if code < 500 => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    };
    json!({ "error": { "code": status.as_u16(), "message": message, "status": code } })
}
