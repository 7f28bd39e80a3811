//! Tests of the built-in `anthropic.lua` adapter against recorded Anthropic Messages API
//! traffic (`adapters/testdata/anthropic/anthropic-*`, copied verbatim from the shared wire
//! collection). Golden files: `adapters/testdata/anthropic/golden/`; refresh with
//! `UPDATE_GOLDEN=1`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;

fn read(rel: &str) -> String {
    super::tests::read(&format!("anthropic/{rel}"))
}

fn read_json(rel: &str) -> Value {
    super::tests::read_json(&format!("anthropic/{rel}"))
}

/// Compares `actual` with `adapters/testdata/anthropic/golden/<name>` (UPDATE_GOLDEN=1 refreshes).
fn golden(name: &str, actual: &Value) {
    super::tests::golden(&format!("anthropic/golden/{name}"), actual)
}

fn anthropic() -> Arc<Adapter> {
    AdapterSet::load(Path::new("/nonexistent-hearth-data-dir"))
        .get("anthropic")
        .expect("built-in anthropic loads")
}

/// The event payloads of a stream file: the `data:` lines of an `.sse` file, or every
/// line of a `.jsonl` fixture (SSE framing already removed).
fn payloads(text: &str, jsonl: bool) -> Vec<&str> {
    if jsonl {
        return text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .collect()
}

/// A stream put together the way the broker's `Assembly` does (tool calls by index).
#[derive(Debug, Default)]
struct Assembled {
    content: String,
    reasoning: String,
    calls: BTreeMap<u32, (String, String, String)>,
    finish_reason: String,
    usage: Option<TokenUsage>,
    done: bool,
    chunks: usize,
}

impl Assembled {
    fn json(&self) -> Value {
        json!({
            "content": self.content,
            "reasoning_content": self.reasoning,
            "finish_reason": self.finish_reason,
            "token_usage": self.usage,
            "done": self.done,
            "chunks": self.chunks,
            "tool_calls": self.calls.iter().map(|(index, (id, name, args))| json!({
                "index": index, "id": id, "name": name, "arguments": args,
            })).collect::<Vec<_>>(),
        })
    }
}

fn assemble(adapter: &Adapter, payloads: &[&str]) -> Assembled {
    let mut out = Assembled::default();
    for data in payloads {
        let Some(chunk) = adapter
            .transform_stream_chunk(data)
            .unwrap_or_else(|e| panic!("{e}"))
        else {
            continue;
        };
        out.chunks += 1;
        out.content += &chunk.content;
        out.reasoning += &chunk.reasoning_content;
        for d in chunk.tool_calls {
            let entry = out.calls.entry(d.index).or_default();
            if let Some(id) = d.id.filter(|s| !s.is_empty()) {
                entry.0 = id;
            }
            if let Some(name) = d.name.filter(|s| !s.is_empty()) {
                entry.1 = name;
            }
            entry.2 += &d.arguments;
        }
        if let Some(r) = chunk.finish_reason {
            out.finish_reason = r;
        }
        if chunk.token_usage.is_some() {
            out.usage = chunk.token_usage;
        }
        out.done |= chunk.done;
    }
    out
}

fn stream(file: &str) -> Assembled {
    let text = read(file);
    assemble(&anthropic(), &payloads(&text, file.ends_with(".jsonl")))
}

fn args(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

// ---------------------------------------------------------------- metadata

#[test]
fn anthropic_metadata() {
    let a = anthropic();
    assert_eq!(a.name(), "anthropic");
    assert_eq!(a.endpoint(), "/v1/messages");
    assert_eq!(
        a.headers().get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert_eq!(a.headers().len(), 1);
    // Anthropic takes the key in `x-api-key`, not as a bearer token.
    assert_eq!(a.auth_header(), Some("x-api-key"));
    assert!(a.supports_streaming());
    assert_eq!(a.file(), "adapters/anthropic.lua (built-in)");
}

// ---------------------------------------------------------------- request

#[test]
fn anthropic_request_matches_the_recorded_wire_request() {
    // The unified form of the SDK's recorded request: same conversation, OpenAI shapes.
    let out = anthropic()
        .transform_request(&read_json("unified-request-weather.json"))
        .unwrap();
    let mut wire = read_json("anthropic-request-tools-toolresult.json");
    // `caller` is a field the SDK's tool runner adds; the API does not require it.
    wire["messages"][1]["content"][1]
        .as_object_mut()
        .unwrap()
        .remove("caller");
    assert_eq!(out, wire, "{}", serde_json::to_string_pretty(&out).unwrap());
    golden("request-weather.json", &out);
}

#[test]
fn anthropic_request_history_tools_images_stream() {
    let out = anthropic()
        .transform_request(&read_json("unified-request-history.json"))
        .unwrap();
    assert_eq!(
        out["system"],
        json!("You are a helpful assistant.\n\nAnswer in one sentence.")
    );
    assert_eq!(out["max_tokens"], json!(2048), "an integer");
    assert_eq!(out["temperature"], json!(1), "clamped to the API's range");
    assert_eq!(out["stream"], json!(true));
    assert_eq!(out["metadata"], json!({"user_id": "hearth-test"}));
    for dropped in ["disable_thinking", "seed", "user", "parallel_tool_calls"] {
        assert!(out.get(dropped).is_none(), "{dropped} must not be sent");
    }
    assert_eq!(
        out["tool_choice"],
        json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        out["tools"][1],
        json!({"name": "get_time", "description": "Current time",
               "input_schema": {"type": "object", "properties": {}, "required": []}})
    );
    assert_eq!(
        out["tools"][2]["input_schema"],
        json!({"type": "object", "properties": {}})
    );

    let messages = out["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    // Images: an http URL and a base64 data URL.
    assert_eq!(
        messages[0]["content"][1],
        json!({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}})
    );
    assert_eq!(
        messages[0]["content"][2],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
    );
    // Empty assistant text is dropped; tool calls become tool_use with parsed input; the
    // id is made safe for the API, one to one (`.` → `-2e`, `:` → `-3a`); reasoning is not
    // replayed.
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "tool_use", "id": "toolu_abc123", "name": "get_weather", "input": {"city": "北京"}},
            {"type": "tool_use", "id": "call-2edef-3a456", "name": "get_time", "input": {}}
        ])
    );
    // Two tool results and the next user text: one user message, results first.
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_abc123", "content": "天气：晴"},
            {"type": "tool_result", "tool_use_id": "call-2edef-3a456", "content": "12:00"},
            {"type": "text", "text": "Thanks! And the moon?"}
        ])
    );
    // A call without an id gets one, and the result without tool_call_id answers it;
    // arguments that are not JSON are kept as `_raw`.
    assert_eq!(
        messages[3]["content"][1],
        json!({"type": "tool_use", "id": "toolu_hearth_1", "name": "moon_phase", "input": {"_raw": "not json"}})
    );
    assert_eq!(
        messages[4]["content"],
        json!([{"type": "tool_result", "tool_use_id": "toolu_hearth_1", "content": "waxing gibbous"}])
    );
    golden("request-history.json", &out);
}

#[test]
fn anthropic_request_defaults_and_tool_choice_mapping() {
    let a = anthropic();
    let base = json!({
        "model": "claude-haiku-4-5",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    });
    let out = a.transform_request(&base).unwrap();
    assert_eq!(
        out["max_tokens"],
        json!(4096),
        "max_tokens is required: default"
    );
    assert_eq!(out["messages"], json!([{"role": "user", "content": "hi"}]));
    assert!(out.get("system").is_none() && out.get("stream").is_none());
    assert!(out.get("temperature").is_none() && out.get("tool_choice").is_none());

    for (choice, expected) in [
        (json!("auto"), json!({"type": "auto"})),
        (json!("none"), json!({"type": "none"})),
        (json!("required"), json!({"type": "any"})),
        (
            json!({"type": "function", "function": {"name": "f"}}),
            json!({"type": "tool", "name": "f"}),
        ),
        (json!({"type": "any"}), json!({"type": "any"})),
    ] {
        let mut req = base.clone();
        req["tool_choice"] = choice.clone();
        let out = a.transform_request(&req).unwrap();
        assert_eq!(out["tool_choice"], expected, "tool_choice {choice}");
    }

    // No tools: neither tools nor tool_choice; `stop` becomes stop_sequences.
    let req = json!({
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [], "tool_choice": "auto", "stop": "END", "temperature": 0.2, "top_p": 0.9,
    });
    let out = a.transform_request(&req).unwrap();
    assert!(out.get("tools").is_none() && out.get("tool_choice").is_none());
    assert_eq!(out["stop_sequences"], json!(["END"]));
    assert_eq!(out["temperature"], json!(0.2));
    assert_eq!(out["top_p"], json!(0.9));
}

// ---------------------------------------------------------------- response

#[test]
fn anthropic_response_text_and_tool_use() {
    let out = anthropic()
        .transform_response(&read("anthropic-response-text-tooluse.json"))
        .unwrap();
    assert_eq!(
        out.content,
        "I'll get the weather for each of those cities. Let me start by checking San Francisco."
    );
    assert_eq!(out.finish_reason, "tool_calls");
    assert_eq!(out.tool_calls.len(), 1, "tool calls are not dropped");
    assert_eq!(out.tool_calls[0].id, "toolu_01LRanfq6DmHn1yDTB4d1SAh");
    assert_eq!(out.tool_calls[0].name, "get_weather");
    assert_eq!(
        out.tool_calls[0].arguments,
        json!({"location": "San Francisco, CA", "units": "f"})
    );
    assert_eq!(
        out.token_usage,
        TokenUsage {
            prompt: 701,
            completion: 93,
            total: 794
        }
    );
    golden(
        "response-text-tooluse.json",
        &serde_json::to_value(&out).unwrap(),
    );
}

#[test]
fn anthropic_response_thinking_stop_reasons_and_cache_usage() {
    let a = anthropic();
    let body = json!({
        "type": "message", "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xyz"},
            {"type": "text", "text": "Hello"},
            {"type": "text", "text": " world"},
            {"type": "tool_use", "id": "toolu_1", "name": "noargs", "input": {}}
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 100,
                  "cache_creation_input_tokens": 5, "output_tokens": 7}
    });
    let out = a.transform_response(&body.to_string()).unwrap();
    assert_eq!(out.content, "Hello world");
    assert_eq!(out.reasoning_content, "Let me think.");
    assert_eq!(
        out.finish_reason, "tool_calls",
        "`end_turn` with a tool call"
    );
    assert_eq!(out.tool_calls[0].arguments, json!({}));
    assert_eq!(
        out.token_usage,
        TokenUsage {
            prompt: 115,
            completion: 7,
            total: 122
        }
    );
    for (stop, finish) in [
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("stop_sequence", "stop"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
    ] {
        let body = json!({"content": [], "stop_reason": stop});
        let out = a.transform_response(&body.to_string()).unwrap();
        assert_eq!(out.finish_reason, finish, "{stop}");
        assert!(out.content.is_empty() && out.tool_calls.is_empty());
    }
}

// ---------------------------------------------------------------- stream

#[test]
fn anthropic_stream_text_then_tool_use() {
    let s = stream("anthropic-stream-text-tooluse.sse");
    assert_eq!(
        s.content,
        "I'll check the current weather in Paris for you."
    );
    assert_eq!(s.calls.len(), 1);
    let (id, name, arguments) = &s.calls[&1];
    assert_eq!(id, "toolu_01NRLabsLyVHZPKxbKvkfSMn");
    assert_eq!(name, "get_weather");
    assert_eq!(args(arguments), json!({"location": "Paris"}));
    assert_eq!(s.finish_reason, "tool_calls");
    assert!(s.done);
    // This (older) recording's message_delta has only output_tokens; the stateless adapter
    // reports prompt 0 there, and the whole-usage replacement of the assembly loses the
    // 377 input tokens of message_start (see the adapter's header).
    assert_eq!(
        s.usage,
        Some(TokenUsage {
            prompt: 0,
            completion: 65,
            total: 65
        })
    );
    golden("stream-text-tooluse.json", &s.json());
}

#[test]
fn anthropic_stream_padded_tool_use_only() {
    let s = stream("anthropic-stream-tooluse-padded.sse");
    assert_eq!(s.content, "");
    let (id, name, arguments) = &s.calls[&0];
    assert_eq!(id, "toolu_018acGYLtfR52q9yDbWaEdQZ");
    assert_eq!(name, "get_weather");
    assert_eq!(
        args(arguments),
        json!({"location": "San Francisco, CA", "units": "f"})
    );
    assert_eq!(s.finish_reason, "tool_calls");
    assert_eq!(
        s.usage,
        Some(TokenUsage {
            prompt: 656,
            completion: 74,
            total: 730
        }),
        "message_delta repeats input_tokens"
    );
    golden("stream-tooluse-padded.json", &s.json());
}

#[test]
fn anthropic_stream_tool_use_without_arguments() {
    let s = stream("anthropic-stream-tooluse-noargs.jsonl");
    assert_eq!(s.content, "I'll update the issue list for you.");
    let (id, name, arguments) = &s.calls[&1];
    assert_eq!(id, "toolu_01QE1WLsSVp5hy5Q3GmGTmjP");
    assert_eq!(name, "updateIssueList");
    // No fragments: the broker's assembly turns empty arguments text into `{}`.
    assert_eq!(arguments, "");
    assert_eq!(s.finish_reason, "tool_calls");
    golden("stream-tooluse-noargs.json", &s.json());
}

#[test]
fn anthropic_stream_truncated_by_max_tokens() {
    let s = stream("anthropic-stream-tooluse-maxtokens-truncated.sse");
    assert!(s
        .content
        .starts_with("I'll create a comprehensive tax guide"));
    let (id, name, arguments) = &s.calls[&1];
    assert_eq!(id, "toolu_01EKqbqmZrGRXy18eN7m9kvY");
    assert_eq!(name, "make_file");
    assert!(
        serde_json::from_str::<Value>(arguments).is_err(),
        "the cut-off input is not valid JSON: {arguments}"
    );
    assert!(arguments.ends_with("\n\"Filing taxes"));
    assert_eq!(
        s.finish_reason, "length",
        "the caller sees the turn was cut off"
    );
    golden("stream-tooluse-maxtokens-truncated.json", &s.json());
}

#[test]
fn anthropic_stream_events_one_by_one() {
    let a = anthropic();
    let chunk = |data: &str| a.transform_stream_chunk(data).unwrap();
    assert_eq!(chunk(r#"{"type": "ping"}"#), None);
    assert_eq!(chunk(r#"{"type":"content_block_stop","index":0}"#), None);
    assert_eq!(chunk(r#"{"type":"some_future_event"}"#), None);
    assert_eq!(
        chunk(
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#
        ),
        None
    );
    let c = chunk(
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm"}}"#,
    )
    .unwrap();
    assert_eq!(c.reasoning_content, "Hmm");
    assert_eq!(c.content, "");
    assert_eq!(
        chunk(
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}"#
        ),
        None
    );
    let c = chunk(r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"a"}}"#)
        .unwrap();
    assert_eq!(
        c.tool_calls,
        vec![ToolCallDelta {
            index: 3,
            id: None,
            name: None,
            arguments: "{\"a".into(),
            thought_signature: None,
        }]
    );
    // A tool_use block that carries its whole input at the start (no deltas follow).
    let c = chunk(r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_x","name":"f","input":{"q":1}}}"#)
        .unwrap();
    assert_eq!(c.tool_calls[0].index, 2);
    assert_eq!(c.tool_calls[0].arguments, r#"{"q":1}"#);
    let c = chunk(
        r#"{"type":"message_start","message":{"usage":{"input_tokens":377,"output_tokens":1}}}"#,
    )
    .unwrap();
    assert_eq!(
        c.token_usage,
        Some(TokenUsage {
            prompt: 377,
            completion: 1,
            total: 378
        })
    );
    assert!(!c.done);
    let c = chunk(r#"{"type":"message_stop"}"#).unwrap();
    assert!(c.done);
}

// ---------------------------------------------------------------- errors

#[test]
fn anthropic_error_bodies_are_typed_api_errors() {
    use super::tests::{api_error, typed};
    let a = anthropic();
    let e = a
        .transform_response(&read("anthropic-error-400-toolresult-without-tooluse.json"))
        .unwrap_err();
    assert!(matches!(e, AdapterError::Upstream { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "adapter anthropic: transform_response: API error: messages.0.content.1: unexpected \
         `tool_use_id` found in `tool_result` blocks: toolu_01GHndag5wQmbzNihYmV2UBj. Each \
         `tool_result` block must have a corresponding `tool_use` block in the previous \
         message. (type invalid_request_error, request_id req_011CYHyk9NPsBYeGbC9LuDNK)"
    );

    let e = api_error(a.transform_response(&read("anthropic-error-429-rate-limit.json")));
    assert_eq!(e.kind, "rate_limit_error");
    assert!(
        e.message
            .starts_with("This request would exceed your organization's rate limit"),
        "{e}"
    );

    let e = api_error(a.transform_response(&read("anthropic-error-529-overloaded.json")));
    assert_eq!(e, typed(None, "overloaded_error", "", "Overloaded"));

    // The `event: error` of a stream that had started with 200: no status, the type says it.
    let sse = read("anthropic-stream-error-overloaded.sse");
    let e = api_error(a.transform_stream_chunk(payloads(&sse, false)[0]));
    assert_eq!(e, typed(None, "overloaded_error", "", "Overloaded"));

    let e = a
        .transform_response("<html>502 Bad Gateway</html>")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "adapter anthropic: transform_response: response is not a JSON object: <html>502 Bad Gateway</html>"
    );
}
