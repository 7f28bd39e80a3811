//! Ollama's chat API (`POST …/api/chat`; messages as OpenAI's, read by
//! [`super::openai::turns`]): answers as one JSON object or NDJSON lines ending with
//! `done: true` (`shared/wire/ollama-*`).

use std::time::Duration;

use serde_json::{json, Value};

use super::{Frames, Pacer, Reply};

/// The API's `done_reason` for a family-neutral finish reason (Ollama says `stop`
/// after tool calls too).
fn done_reason(finish: &str) -> &str {
    match finish {
        "tool_calls" => "stop",
        other => other,
    }
}

/// `{model, created_at, message, done: false}`: a line of a stream before the last.
fn line(reply: &Reply, message: Value) -> Value {
    json!({
        "model": reply.model,
        "created_at": created_at(),
        "message": message,
        "done": false,
    })
}

/// The last line, or the whole non-streamed answer: `message` with `done_reason`, the
/// counts and (made-up) durations.
fn done(reply: &Reply, message: Value) -> Value {
    let mut out = line(reply, message);
    for (key, value) in [
        ("done_reason", json!(done_reason(&reply.finish_reason))),
        ("done", json!(true)),
        ("total_duration", json!(2_400_000)),
        ("load_duration", json!(100_000)),
        ("prompt_eval_count", json!(reply.usage.prompt)),
        ("prompt_eval_duration", json!(800_000)),
        ("eval_count", json!(reply.usage.completion)),
        ("eval_duration", json!(1_500_000)),
    ] {
        out[key] = value;
    }
    out
}

fn tool_calls(reply: &Reply) -> Value {
    reply
        .tool_calls
        .iter()
        .map(|c| json!({ "function": { "name": c.name, "arguments": c.arguments_value() } }))
        .collect()
}

/// The non-streamed answer.
pub(super) fn response(reply: &Reply) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": reply.content.as_deref().unwrap_or_default(),
    });
    if let Some(thinking) = &reply.reasoning {
        message["thinking"] = json!(thinking);
    }
    if !reply.tool_calls.is_empty() {
        message["tool_calls"] = tool_calls(reply);
    }
    done(reply, message)
}

/// The streamed answer: a line per thinking and text chunk, the tool calls together in
/// one line, then the `done: true` line.
pub(super) fn stream(reply: &Reply) -> Frames {
    let mut pacer = Pacer::new(reply.pause);
    let mut lines: Vec<(Duration, Value)> = Vec::new();
    let message = |content: &str| json!({ "role": "assistant", "content": content });
    for piece in reply.text_pieces(reply.reasoning.as_deref()) {
        let mut m = message("");
        m["thinking"] = json!(piece);
        lines.push((pacer.next(), line(reply, m)));
    }
    for piece in reply.text_pieces(reply.content.as_deref()) {
        lines.push((pacer.next(), line(reply, message(&piece))));
    }
    if !reply.tool_calls.is_empty() {
        let mut m = message("");
        m["tool_calls"] = tool_calls(reply);
        lines.push((pacer.next(), line(reply, m)));
    }
    lines.push((Duration::ZERO, done(reply, message(""))));
    Frames {
        content_type: "application/x-ndjson",
        frames: lines
            .into_iter()
            .map(|(pause, v)| (pause, format!("{v}\n")))
            .collect(),
    }
}

/// Now as Ollama writes it: RFC 3339 UTC with microseconds.
fn created_at() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}
