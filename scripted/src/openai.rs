//! OpenAI chat completions (`POST …/chat/completions`; DeepSeek's `reasoning_content`
//! too): the request's messages, and answers as `chat.completion` objects or
//! `chat.completion.chunk` SSE streams (`shared/wire/openai-chat-*`,
//! `shared/wire/deepseek-*`). Ollama's messages have the same shape.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::{argument_fragments, json_response, text_of, Frames, Pacer, Reply, Role, Turn};

/// The messages of a request (OpenAI and Ollama).
pub(super) fn turns(request: &Value) -> Vec<Turn> {
    let empty = Vec::new();
    request["messages"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|m| {
            let role = match m["role"].as_str().unwrap_or_default() {
                "system" | "developer" => Role::System,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                "tool" => Role::Tool,
                _ => Role::Other,
            };
            Turn::new(role, text_of(&m["content"]))
        })
        .collect()
}

impl Reply {
    fn completion_id(&self) -> String {
        format!("chatcmpl-scripted-{}", self.n)
    }

    fn openai_usage(&self) -> Value {
        json!({
            "prompt_tokens": self.usage.prompt,
            "completion_tokens": self.usage.completion,
            "total_tokens": self.usage.prompt + self.usage.completion,
        })
    }

    /// A `chat.completion.chunk` with one choice.
    fn chunk(&self, delta: Value, finish_reason: Option<&str>, include_usage: bool) -> Value {
        let mut chunk = json!({
            "id": self.completion_id(),
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        });
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }
}

/// The non-streamed `chat.completion` object.
pub(super) fn completion(reply: &Reply) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": reply.content,
        "refusal": null,
    });
    if let Some(r) = &reply.reasoning {
        message["reasoning_content"] = json!(r);
    }
    if !reply.tool_calls.is_empty() {
        message["tool_calls"] = reply
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": { "name": c.name, "arguments": c.arguments },
                })
            })
            .collect();
    }
    json!({
        "id": reply.completion_id(),
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": reply.finish_reason,
        }],
        "usage": reply.openai_usage(),
    })
}

/// The SSE stream: `data: {chunk}` events, then `data: [DONE]`.
pub(super) fn stream(reply: &Reply, include_usage: bool) -> Frames {
    let mut events: Vec<(Duration, String)> = Vec::new();
    let mut push = |pause: Duration, v: Value| events.push((pause, v.to_string()));
    let mut pacer = Pacer::new(reply.pause);

    let mut first = json!({
        "role": "assistant",
        "content": if reply.content.is_some() { json!("") } else { Value::Null },
    });
    if reply.reasoning.is_some() {
        first["reasoning_content"] = json!("");
    }
    push(Duration::ZERO, reply.chunk(first, None, include_usage));
    for piece in reply.text_pieces(reply.reasoning.as_deref()) {
        let delta = json!({ "content": null, "reasoning_content": piece });
        push(pacer.next(), reply.chunk(delta, None, include_usage));
    }
    for piece in reply.text_pieces(reply.content.as_deref()) {
        let delta = json!({ "content": piece });
        push(pacer.next(), reply.chunk(delta, None, include_usage));
    }
    for (index, call) in reply.tool_calls.iter().enumerate() {
        let open = json!({ "tool_calls": [{
            "index": index,
            "id": call.id,
            "type": "function",
            "function": { "name": call.name, "arguments": "" },
        }]});
        push(pacer.next(), reply.chunk(open, None, include_usage));
        for fragment in argument_fragments(&call.arguments) {
            let delta = json!({ "tool_calls": [{
                "index": index,
                "function": { "arguments": fragment },
            }]});
            push(Duration::ZERO, reply.chunk(delta, None, include_usage));
        }
    }
    push(
        Duration::ZERO,
        reply.chunk(json!({}), Some(&reply.finish_reason), include_usage),
    );
    if include_usage {
        push(
            Duration::ZERO,
            json!({
                "id": reply.completion_id(),
                "object": "chat.completion.chunk",
                "created": reply.created,
                "model": reply.model,
                "choices": [],
                "usage": reply.openai_usage(),
            }),
        );
    }
    events.push((Duration::ZERO, "[DONE]".to_string()));
    Frames {
        content_type: "text/event-stream",
        frames: events
            .into_iter()
            .map(|(pause, data)| (pause, format!("data: {data}\n\n")))
            .collect(),
    }
}

/// An OpenAI error answer.
pub(super) fn error(status: StatusCode, message: &str, kind: &str, code: &str) -> Response {
    json_response(
        status,
        &json!({ "error": {
            "message": message,
            "type": kind,
            "param": null,
            "code": code,
        }}),
    )
}
