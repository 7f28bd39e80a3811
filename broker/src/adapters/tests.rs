//! Tests of the adapter host and the built-in adapters. Golden files live in
//! `adapters/testdata/<adapter>/golden/`; refresh with `UPDATE_GOLDEN=1`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;

pub(super) fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/testdata")
}

pub(super) fn read(rel: &str) -> String {
    let path = testdata().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(super) fn read_json(rel: &str) -> Value {
    serde_json::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Compares `actual` with the golden file (as JSON values: `[]` ≠ `{}`, `1` ≠ `1.0`).
pub(super) fn golden(rel: &str, actual: &Value) {
    let path = testdata().join(rel);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_string_pretty(actual).unwrap() + "\n").unwrap();
        return;
    }
    let expected: Value = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).unwrap(),
        Err(e) => panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        ),
    };
    assert_eq!(
        actual,
        &expected,
        "{} differs:\n{}",
        path.display(),
        serde_json::to_string_pretty(actual).unwrap()
    );
}

/// The API error a transform raised with `raise_api_error`; panics on any other result.
pub(super) fn api_error<T: std::fmt::Debug>(r: Result<T, AdapterError>) -> UpstreamError {
    match r {
        Err(AdapterError::Upstream { error, .. }) => *error,
        other => panic!("expected the API's typed error, got {other:?}"),
    }
}

/// An [`UpstreamError`] from its fields (`retry_after_s` and `request_id` unset).
pub(super) fn typed(status: Option<u16>, kind: &str, code: &str, message: &str) -> UpstreamError {
    let mut e = UpstreamError::message(message);
    e.status = status;
    e.kind = kind.into();
    e.code = code.into();
    e
}

fn openai() -> Arc<Adapter> {
    AdapterSet::load(Path::new("/nonexistent-hearth-data-dir"))
        .get("openai")
        .expect("built-in openai loads")
}

fn script(name: &str, source: &str) -> Adapter {
    Adapter::from_source(&format!("{name}.lua"), source, &Limits::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Payloads of the `data:` lines of an SSE file.
fn sse_data(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .collect()
}

/// What a consumer assembles from a stream: tool calls joined by index.
#[derive(Debug, Default)]
struct Assembled {
    content: String,
    reasoning: String,
    calls: BTreeMap<u32, (String, String, String)>,
    finish_reason: Option<String>,
    usage: Option<TokenUsage>,
    done: bool,
}

fn assemble(adapter: &Adapter, payloads: &[&str]) -> (Assembled, Vec<Value>) {
    let mut out = Assembled::default();
    let mut chunks = Vec::new();
    for data in payloads {
        let Some(chunk) = adapter
            .transform_stream_chunk(data)
            .unwrap_or_else(|e| panic!("{e}"))
        else {
            continue;
        };
        chunks.push(serde_json::to_value(&chunk).unwrap());
        out.content += &chunk.content;
        out.reasoning += &chunk.reasoning_content;
        for d in chunk.tool_calls {
            let entry = out.calls.entry(d.index).or_default();
            if let Some(id) = d.id {
                entry.0 = id;
            }
            if let Some(name) = d.name {
                entry.1 = name;
            }
            entry.2 += &d.arguments;
        }
        if chunk.finish_reason.is_some() {
            out.finish_reason = chunk.finish_reason;
        }
        if chunk.token_usage.is_some() {
            out.usage = chunk.token_usage;
        }
        out.done |= chunk.done;
    }
    (out, chunks)
}

// ---------------------------------------------------------------- openai.lua

#[test]
fn openai_metadata() {
    let a = openai();
    assert_eq!(a.name(), "openai");
    assert_eq!(a.endpoint(), "/chat/completions");
    assert!(a.headers().is_empty());
    assert!(a.supports_streaming());
    assert_eq!(a.file(), "adapters/openai.lua (built-in)");
}

#[test]
fn openai_request_official_example_passes_through() {
    let request = read_json("openai/openai-chat-toolcall-request.json");
    let out = openai().transform_request(&request).unwrap();
    // The unified request of this example is already OpenAI's wire shape: unchanged.
    assert_eq!(out, request);
    golden("openai/golden/request-toolcall.json", &out);
}

#[test]
fn openai_request_history_tools_stream() {
    let request = read_json("openai/unified-request-history.json");
    let out = openai().transform_request(&request).unwrap();
    assert!(out.get("disable_thinking").is_none());
    assert_eq!(out["stream_options"], json!({"include_usage": true}));
    assert_eq!(out["max_tokens"], json!(4096), "an integer, not 4096.0");
    assert_eq!(out["temperature"], json!(0.7));
    assert_eq!(out["user"], json!("hearth-test"), "extra keys pass through");
    assert_eq!(out["seed"], json!(42));
    assert_eq!(out["metadata"], json!({}), "{{}} stays an object");
    assert_eq!(
        out["tools"][1]["function"]["parameters"]["properties"],
        json!({})
    );
    assert_eq!(
        out["tools"][1]["function"]["parameters"]["required"],
        json!([]),
        "[] stays an array"
    );
    let assistant = &out["messages"][2];
    assert!(assistant.get("reasoning_content").is_none());
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        json!("{\"city\": \"北京\"}")
    );
    assert_eq!(
        out["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_abc123", "content": "天气：晴"})
    );
    assert_eq!(
        out["messages"][1], request["messages"][1],
        "multimodal content unchanged"
    );
    golden("openai/golden/request-history.json", &out);
}

#[test]
fn openai_request_drops_empty_tools_and_encodes_object_arguments() {
    let request = json!({
        "model": "m",
        "messages": [
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "function": {"name": "f", "arguments": {"x": [1, 2.5, {}], "y": []}}}
            ]},
            {"role": "user", "content": "hi", "tool_calls": []}
        ],
        "tools": [],
        "tool_choice": "auto",
        "stream": false
    });
    let out = openai().transform_request(&request).unwrap();
    assert!(out.get("tools").is_none() && out.get("tool_choice").is_none());
    assert!(out.get("stream_options").is_none());
    let call = &out["messages"][0]["tool_calls"][0];
    assert_eq!(call["type"], json!("function"));
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"x": [1, 2.5, {}], "y": []}));
    assert!(out["messages"][1].get("tool_calls").is_none());
}

#[test]
fn openai_response_toolcall() {
    let out = openai()
        .transform_response(&read("openai/openai-chat-toolcall-response.json"))
        .unwrap();
    assert_eq!(
        out,
        CompletionResponse {
            content: String::new(),
            reasoning_content: String::new(),
            finish_reason: "tool_calls".into(),
            token_usage: TokenUsage {
                prompt: 82,
                completion: 17,
                total: 99
            },
            tool_calls: vec![ToolCall {
                id: "call_abc123".into(),
                name: "get_current_weather".into(),
                arguments: json!({"location": "Boston, MA"}),
                ..Default::default()
            }],
        }
    );
    golden(
        "openai/golden/response-toolcall.json",
        &serde_json::to_value(&out).unwrap(),
    );
}

#[test]
fn openai_response_parallel_toolcalls() {
    let out = openai()
        .transform_response(&read("openai/openai-chat-parallel-toolcalls-response.json"))
        .unwrap();
    assert_eq!(out.tool_calls.len(), 2);
    assert_eq!(
        out.tool_calls[0].arguments,
        json!({"city": "Edinburgh", "country": "GB", "units": "c"})
    );
    assert_eq!(out.tool_calls[1].name, "get_stock_price");
    assert_eq!(
        out.tool_calls[1].arguments,
        json!({"ticker": "AAPL", "exchange": "NASDAQ"})
    );
    assert_eq!(
        out.token_usage,
        TokenUsage {
            prompt: 149,
            completion: 60,
            total: 209
        }
    );
    golden(
        "openai/golden/response-parallel-toolcalls.json",
        &serde_json::to_value(&out).unwrap(),
    );
}

#[test]
fn openai_response_text_reasoning_and_bad_arguments() {
    let body = json!({
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "Hello!", "reasoning_content": "thinking",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": "}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": ""}},
                {"id": "c", "type": "function", "function": {"name": "h", "arguments": "[1]"}}
            ]}}]
    });
    let out = openai().transform_response(&body.to_string()).unwrap();
    assert_eq!(out.content, "Hello!");
    assert_eq!(out.reasoning_content, "thinking");
    assert_eq!(out.finish_reason, "tool_calls", "`stop` with tool calls");
    assert_eq!(out.token_usage, TokenUsage::default());
    assert_eq!(out.tool_calls[0].arguments, json!({"_raw": "{\"x\": "}));
    assert_eq!(out.tool_calls[1].arguments, json!({}));
    assert_eq!(out.tool_calls[2].arguments, json!({"_raw": "[1]"}));
}

#[test]
fn openai_error_bodies_are_typed_api_errors() {
    let a = openai();
    let e = a
        .transform_response(&read("openai/openai-chat-error-400-invalid-request.json"))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "adapter openai: transform_response: API error: Unsupported parameter: 'max_tokens' is not \
         supported with this model. Use 'max_completion_tokens' instead. (param max_tokens) (type \
         invalid_request_error, code unsupported_parameter)"
    );
    let e = api_error(a.transform_response(&read(
        "openai/openai-chat-error-429-insufficient-quota.json",
    )));
    assert_eq!(
        (e.status, e.kind.as_str(), e.code.as_str()),
        (None, "insufficient_quota", "insufficient_quota")
    );
    assert!(
        e.message.starts_with("You exceeded your current quota"),
        "{e}"
    );

    // An error frame inside a stream (Groq sends these as `event: error`).
    let frame = r#"{"error":{"message":"Failed to call a function.","type":"invalid_request_error","code":"tool_use_failed"}}"#;
    assert_eq!(
        api_error(a.transform_stream_chunk(frame)),
        typed(
            None,
            "invalid_request_error",
            "tool_use_failed",
            "Failed to call a function."
        )
    );

    // Not JSON at all (a proxy's HTML page).
    let e = a
        .transform_response("<html>502 Bad Gateway</html>")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "adapter openai: transform_response: response is not a JSON object: <html>502 Bad Gateway</html>"
    );
    // Groq's `event: error` frame, as recorded: it names its status.
    let sse = read("openai/compat/groq-stream-error-tool-use-failed.sse");
    let e = api_error(a.transform_stream_chunk(sse_data(&sse)[0]));
    assert_eq!(
        (e.status, e.kind.as_str(), e.code.as_str()),
        (Some(400), "invalid_request_error", "tool_use_failed")
    );
    assert!(e.message.starts_with("Failed to call a function"), "{e}");
}

#[test]
fn openai_stream_parallel_toolcalls_usage() {
    let a = openai();
    let sse = read("openai/openai-chat-stream-parallel-toolcalls-usage.sse");
    let payloads = sse_data(&sse);
    assert_eq!(payloads.len(), 26);
    let (got, chunks) = assemble(&a, &payloads);
    assert_eq!(got.content, "");
    assert_eq!(got.finish_reason.as_deref(), Some("tool_calls"));
    assert!(got.done);
    assert_eq!(
        got.usage,
        Some(TokenUsage {
            prompt: 149,
            completion: 60,
            total: 209
        })
    );
    assert_eq!(got.calls.len(), 2);
    let (id, name, args) = &got.calls[&0];
    assert_eq!(
        (id.as_str(), name.as_str()),
        ("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs")
    );
    assert_eq!(
        serde_json::from_str::<Value>(args).unwrap(),
        json!({"city": "Edinburgh", "country": "GB", "units": "c"})
    );
    let (id, name, args) = &got.calls[&1];
    assert_eq!(
        (id.as_str(), name.as_str()),
        ("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price")
    );
    assert_eq!(
        serde_json::from_str::<Value>(args).unwrap(),
        json!({"ticker": "AAPL", "exchange": "NASDAQ"})
    );
    // The role-only first chunk and `[DONE]` are skipped.
    assert_eq!(chunks.len(), 24);
    golden(
        "openai/golden/stream-parallel-toolcalls-usage.json",
        &Value::Array(chunks),
    );
}

/// OpenAI-compatible streams of other providers, recorded (`.jsonl`: one `data:` payload
/// a line): DeepSeek (reasoning + tool call), Groq (usage under `x_groq` too), Mistral (no
/// `index` on the tool call, finish and usage on the same chunk).
#[test]
fn openai_adapter_reads_compatible_streams() {
    let a = openai();
    for (file, usage, reasoning) in [
        (
            "deepseek-stream-toolcall-reasoning.jsonl",
            (339, 83, 422),
            true,
        ),
        ("groq-stream-toolcall.jsonl", (210, 15, 225), false),
        ("mistral-stream-toolcall.jsonl", (124, 22, 146), false),
    ] {
        let text = read(&format!("openai/compat/{file}"));
        let payloads: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let (got, _) = assemble(&a, &payloads);
        assert_eq!(got.finish_reason.as_deref(), Some("tool_calls"), "{file}");
        let u = got.usage.unwrap_or_else(|| panic!("{file}: no usage"));
        assert_eq!((u.prompt, u.completion, u.total), usage, "{file}");
        assert_eq!(!got.reasoning.is_empty(), reasoning, "{file}");
        assert_eq!(got.calls.len(), 1, "{file}");
        let (id, name, args) = &got.calls[&0];
        assert!(
            !id.is_empty() && !name.is_empty(),
            "{file}: {id:?} {name:?}"
        );
        let args: Value =
            serde_json::from_str(args).unwrap_or_else(|e| panic!("{file}: {args:?}: {e}"));
        assert!(args.is_object(), "{file}: {args}");
    }
}

#[test]
fn openai_stream_text_and_reasoning_deltas() {
    let a = openai();
    let payloads = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"finish_reason":null}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Let me"},"finish_reason":null}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
        "[DONE]",
    ];
    let (got, chunks) = assemble(&a, &payloads);
    assert_eq!(chunks.len(), 3);
    assert_eq!(
        (got.content.as_str(), got.reasoning.as_str()),
        ("Hi there", "Let me")
    );
    assert_eq!(got.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        got.usage,
        Some(TokenUsage {
            prompt: 3,
            completion: 2,
            total: 5
        })
    );
}

// ---------------------------------------------------------------- host: JSON, outputs, errors

/// An adapter whose transforms hand their input back: for testing the host's parsing.
const ECHO: &str = r#"
local a = { name = "echo", version = "0.1", endpoint = "/echo", headers = { ["X-Test"] = "1" } }
function a.transform_request(raw) return json.encode(json.decode(raw)) end
function a.transform_response(raw) return raw end
function a.transform_stream_chunk(raw) return raw end
return a
"#;

/// Same, but returning tables instead of JSON text.
const ECHO_TABLES: &str = r#"
local a = { name = "echo_tables", endpoint = "/echo" }
function a.transform_request(raw) return json.decode(raw) end
function a.transform_response(raw) return json.decode(raw) end
function a.transform_stream_chunk(raw) if raw == "skip" then return nil end return json.decode(raw) end
return a
"#;

#[test]
fn json_round_trip_is_exact() {
    let value = json!({
        "empty_array": [], "empty_object": {}, "nested": [[], {}, [{}], {"a": []}],
        "int": 42, "negative": -7, "float": 1.5, "integral_float": 3.0, "big": 9_007_199_254_740_993_i64,
        "text": "天气 \u{0000} \"quoted\"", "bool": false, "array_nulls": [1, null, 3]
    });
    for a in [script("echo", ECHO), script("echo_tables", ECHO_TABLES)] {
        assert_eq!(a.transform_request(&value).unwrap(), value, "{}", a.name());
    }
    // A null object member is left out (reads as nil in Lua); array positions hold.
    let out = script("echo", ECHO)
        .transform_request(&json!({"a": null, "b": [null]}))
        .unwrap();
    assert_eq!(out, json!({"b": [null]}));
}

#[test]
fn json_encode_of_lua_built_tables() {
    let a = script(
        "built",
        r#"
local a = { name = "built", endpoint = "" }
function a.transform_request(raw)
  return json.encode({ empty = {}, list = { 1, 2, 3 }, float = 2.5, int = 7 // 1, null = json.null,
                       arr = json.array(), arr2 = json.array({ "a" }), holes = { 1, nil, 3 } })
end
function a.transform_response(raw) return json.encode({ mixed = { 1, 2, x = 3 } }) end
function a.transform_stream_chunk(raw)
  if raw == "fn" then return json.encode({ messages = { { content = print } } }) end
  if raw == "cycle" then local t = {} t.self = t return json.encode(t) end
  if raw == "nan" then return json.encode({ x = 0/0 }) end
  if raw == "sparse" then return json.encode({ [1] = 1, [100] = 2 }) end
  if raw == "key" then return json.encode({ [true] = 1 }) end
end
return a
"#,
    );
    assert_eq!(
        a.transform_request(&json!({})).unwrap(),
        json!({"empty": {}, "list": [1, 2, 3], "float": 2.5, "int": 7, "null": null, "arr": [], "arr2": ["a"],
               "holes": [1, null, 3]})
    );
    let e = a.transform_response("{}").unwrap_err().to_string();
    assert!(
        e.contains("json.encode: at `mixed`: table mixes array items and named keys"),
        "{e}"
    );
    for (input, expected) in [
        (
            "fn",
            "json.encode: at `messages[0].content`: cannot encode a function",
        ),
        ("cycle", "json.encode: at `self.self.self"),
        (
            "nan",
            "json.encode: at `x`: cannot encode NaN (not a finite number)",
        ),
        (
            "sparse",
            "json.encode: array too sparse (2 items, highest index 100)",
        ),
        (
            "key",
            "json.encode: cannot encode a table key of type boolean",
        ),
    ] {
        let e = a.transform_stream_chunk(input).unwrap_err().to_string();
        assert!(e.contains(expected), "{input}: {e}");
    }
}

#[test]
fn output_parsing_is_lenient_but_typed() {
    let a = script("echo", ECHO);
    assert_eq!(a.headers().get("X-Test").map(String::as_str), Some("1"));
    assert_eq!(a.version(), "0.1");

    // Missing fields default; the seed's single `tool_call`; arguments as JSON text.
    let out = a
        .transform_response(r#"{"content":"hi","tool_call":{"id":"x","name":"f","arguments":"{\"a\":1}"},"token_usage":{"prompt":1.0}}"#)
        .unwrap();
    assert_eq!(out.content, "hi");
    assert_eq!(
        out.tool_calls,
        vec![ToolCall {
            id: "x".into(),
            name: "f".into(),
            arguments: json!({"a": 1}),
            ..Default::default()
        }]
    );
    assert_eq!(
        out.token_usage,
        TokenUsage {
            prompt: 1,
            completion: 0,
            total: 0
        }
    );
    assert_eq!(
        a.transform_response(r#"{"content":null}"#).unwrap(),
        CompletionResponse::default()
    );

    let err = |body: &str| a.transform_response(body).unwrap_err().to_string();
    assert_eq!(
        err(r#"{"content":5}"#),
        "adapter echo: transform_response: field `content`: expected string, got number"
    );
    assert_eq!(
        err(r#"{"tool_calls":[{"name":"f","arguments":[1]}]}"#),
        "adapter echo: transform_response: field `tool_calls[0].arguments`: expected object or JSON text, got array"
    );
    assert_eq!(
        err(r#"{"tool_calls":[{"name":"f"},{"name":7}]}"#),
        "adapter echo: transform_response: field `tool_calls[1].name`: expected string, got number"
    );
    assert_eq!(
        err(r#"{"token_usage":{"total":-1}}"#),
        "adapter echo: transform_response: field `token_usage.total`: expected a non-negative integer"
    );
    assert!(err(r#"{"tool_calls":[{"arguments":"{oops"}]}"#)
        .contains("`tool_calls[0].arguments`: not valid JSON text"));
    assert!(err("[1]").contains("returned value: expected object, got array"));
    assert!(err("not json").contains("returned value: not valid JSON"));
    assert!(err("").contains("got an empty string"));

    // Stream chunks: "" skips; `tool_call` object with object arguments; index by position.
    assert_eq!(a.transform_stream_chunk("").unwrap(), None);
    let chunk = a
        .transform_stream_chunk(r#"{"content":"","done":true,"tool_call":{"id":"c","name":"w","arguments":{"city":"北"}}}"#)
        .unwrap()
        .unwrap();
    assert!(chunk.done);
    assert_eq!(
        chunk.tool_calls,
        vec![ToolCallDelta {
            index: 0,
            id: Some("c".into()),
            name: Some("w".into()),
            arguments: r#"{"city":"北"}"#.into(),
            ..Default::default()
        }]
    );
    let chunk = a
        .transform_stream_chunk(
            r#"{"tool_calls":[{"arguments":"{"},{"index":5,"arguments":"}"}],"finish_reason":""}"#,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        (chunk.tool_calls[0].index, chunk.tool_calls[1].index),
        (0, 5)
    );
    assert_eq!(chunk.finish_reason, None);
    let e = a.transform_stream_chunk(r#"{"done":"yes"}"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "adapter echo: transform_stream_chunk: field `done`: expected boolean, got string"
    );

    // Tables instead of JSON text; an empty Lua table is an empty list of tool calls.
    let t = script("echo_tables", ECHO_TABLES);
    assert_eq!(
        t.transform_response(r#"{"content":"x","tool_calls":{}}"#)
            .unwrap()
            .content,
        "x"
    );
    assert_eq!(t.transform_stream_chunk("skip").unwrap(), None);
}

#[test]
fn script_errors_name_adapter_function_and_line() {
    let a = script(
        "liner",
        "local a = { name = \"liner\", endpoint = \"/x\" }\n\
         function a.transform_request(raw)\n\
           error(\"boom\")\n\
         end\n\
         function a.transform_response(raw)\n\
           return json.decode(raw)\n\
         end\n\
         return a\n",
    );
    let e = a.transform_request(&json!({})).unwrap_err();
    assert_eq!(
        e.to_string(),
        "adapter liner: transform_request: liner.lua:3: boom"
    );
    let e = a.transform_response("{nope").unwrap_err().to_string();
    assert!(
        e.starts_with("adapter liner: transform_response: json.decode: "),
        "{e}"
    );
    assert!(e.ends_with("(at liner.lua:6)"), "{e}");
    let e = a.transform_stream_chunk("{}").unwrap_err();
    assert_eq!(
        e,
        AdapterError::StreamingUnsupported {
            adapter: "liner".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "adapter liner: streaming is not supported (the script has no transform_stream_chunk)"
    );
}

#[test]
fn load_errors_name_file_and_line() {
    let e = Adapter::from_source(
        "bad.lua",
        "local a = {\nname = \"bad\"\nfunction oops",
        &Limits::default(),
    )
    .unwrap_err();
    let AdapterError::Load { file, message } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(file, "bad.lua");
    assert!(message.starts_with("bad.lua:3:"), "{message}");

    let cases = [
        ("return 5", "the script must return the adapter table, it returned integer"),
        ("return { endpoint = '/x' }", "adapter.name is missing"),
        ("return { name = 'x' }", "adapter.transform_request is missing"),
        (
            "return { name = 'x', transform_request = print, transform_response = print, headers = { 1 } }",
            "adapter.headers: expected string = string, got integer = integer",
        ),
        ("return { name = 'x', transform_request = 1 }", "adapter.transform_request: expected function, got integer"),
    ];
    for (source, expected) in cases {
        let e = Adapter::from_source("x.lua", source, &Limits::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("adapter file x.lua: ") && e.contains(expected),
            "{source}: {e}"
        );
    }
}

// ---------------------------------------------------------------- sandbox

#[test]
fn sandbox_has_no_unsafe_libraries() {
    let a = script(
        "probe",
        r#"
local a = { name = "probe", endpoint = "" }
function a.transform_request(raw)
  local bytecode_ok, bytecode_err = load("\27Lua\84\0\25\147\r\n\26\n")
  local mode_ok, mode_err = pcall(load, "return 1", "x", "b")
  return json.encode({
    os = type(os), io = type(io), require = type(require), package = type(package),
    debug = type(debug), dofile = type(dofile), loadfile = type(loadfile),
    dump = type(string.dump), coroutine = type(coroutine),
    bytecode = tostring(bytecode_ok) .. " " .. tostring(bytecode_err),
    mode = tostring(mode_ok) .. " " .. tostring(mode_err),
    text = load("return 1 + 1")(),
    gc_stop = (pcall(collectgarbage, "stop")),
    gc_count = type(collectgarbage("count")),
  })
end
function a.transform_response(raw) return raw end
return a
"#,
    );
    let out = a.transform_request(&json!({})).unwrap();
    for lib in [
        "os",
        "io",
        "require",
        "package",
        "debug",
        "dofile",
        "loadfile",
        "dump",
        "coroutine",
    ] {
        assert_eq!(out[lib], json!("nil"), "{lib}");
    }
    let bytecode = out["bytecode"].as_str().unwrap();
    assert!(
        bytecode.starts_with("nil ") && bytecode.contains("binary chunk"),
        "{bytecode}"
    );
    assert!(
        out["mode"].as_str().unwrap().contains("only text chunks"),
        "{out}"
    );
    assert_eq!(out["text"], json!(2));
    assert_eq!(out["gc_stop"], json!(false));
    assert_eq!(out["gc_count"], json!("number"));
}

const LOOPER: &str = r#"
local a = { name = "looper", endpoint = "" }
function a.transform_request(raw)
  if raw == '"spin"' then while true do end end
  if raw == '"sneaky"' then
    while true do pcall(function() while true do end end) end
  end
  if raw == '"grow"' then
    local t = {}
    for i = 1, 1e12 do t[i] = string.rep("x", 1024) .. i end
  end
  if raw == '"rep"' then return string.rep("x", 1 << 30) end
  return raw
end
function a.transform_response(raw) return raw end
return a
"#;

#[test]
fn instruction_bound_stops_endless_loops() {
    let limits = Limits {
        instructions: 1_000_000,
        ..Limits::default()
    };
    let a = Adapter::from_source("looper.lua", LOOPER, &limits).unwrap();
    let e = a.transform_request(&json!("spin")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "adapter looper: transform_request exceeded 1000000 instructions"
    );
    // pcall cannot swallow the bound.
    let e = a.transform_request(&json!("sneaky")).unwrap_err();
    assert!(
        matches!(
            e,
            AdapterError::InstructionLimit {
                limit: 1_000_000,
                ..
            }
        ),
        "{e}"
    );
    // The VM is fine afterwards, and the budget is per call.
    for _ in 0..3 {
        assert_eq!(a.transform_request(&json!("ok")).unwrap(), json!("ok"));
    }
    // The script's top level is bounded too.
    let e = Adapter::from_source("spin.lua", "while true do end", &limits).unwrap_err();
    assert!(
        matches!(e, AdapterError::InstructionLimit { ref function, .. } if function == "load"),
        "{e}"
    );
}

#[test]
fn memory_bound_stops_huge_allocations() {
    let limits = Limits {
        memory: 16 << 20,
        ..Limits::default()
    };
    let a = Adapter::from_source("looper.lua", LOOPER, &limits).unwrap();
    let e = a.transform_request(&json!("rep")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "adapter looper: transform_request exceeded the memory limit of 16777216 bytes"
    );
    let e = a.transform_request(&json!("grow")).unwrap_err();
    assert!(matches!(e, AdapterError::MemoryLimit { .. }), "{e}");
    assert_eq!(a.transform_request(&json!("ok")).unwrap(), json!("ok"));
}

// ---------------------------------------------------------------- AdapterSet

const OVERRIDE: &str = r#"
return { name = "openai", version = "9.9", endpoint = "/v9/chat",
         transform_request = function(raw) return raw end,
         transform_response = function(raw) return '{"content":"overridden"}' end }
"#;

#[test]
fn data_dir_overrides_and_isolates_broken_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let adapters = dir.path().join("adapters");
    std::fs::create_dir(&adapters).unwrap();
    std::fs::write(adapters.join("openai.lua"), OVERRIDE).unwrap();
    std::fs::write(
        adapters.join("broken.lua"),
        "local a = {}\na.name = 'broken'\na.endpoint = = '/x'\nreturn a\n",
    )
    .unwrap();
    std::fs::write(
        adapters.join("boom.lua"),
        "local x = 1\nerror('top level failure')\n",
    )
    .unwrap();
    std::fs::write(adapters.join("wrongname.lua"), ECHO).unwrap();
    std::fs::write(adapters.join("echo.lua"), ECHO).unwrap();
    std::fs::write(adapters.join("notes.txt"), "not an adapter").unwrap();

    let set = AdapterSet::load(dir.path());
    let builtins: Vec<String> = BUILTINS.iter().map(|(n, _)| n.to_string()).collect();
    let mut expected: Vec<String> = builtins
        .iter()
        .cloned()
        .chain(["echo".to_string()])
        .collect();
    expected.sort();
    assert_eq!(set.names(), expected);
    assert_eq!(
        set.errors().keys().collect::<Vec<_>>(),
        ["boom", "broken", "wrongname"]
    );

    let openai = set.get("openai").unwrap();
    assert_eq!((openai.version(), openai.endpoint()), ("9.9", "/v9/chat"));
    assert_eq!(
        openai.file(),
        adapters.join("openai.lua").display().to_string()
    );
    assert_eq!(
        openai.transform_response("{}").unwrap().content,
        "overridden"
    );
    assert_eq!(
        set.get("echo")
            .unwrap()
            .transform_response(r#"{"content":"ok"}"#)
            .unwrap()
            .content,
        "ok"
    );

    let broken = set.get("broken").unwrap_err().to_string();
    let path = adapters.join("broken.lua").display().to_string();
    assert!(
        broken.starts_with(&format!("adapter file {path}: {path}:3:")),
        "{broken}"
    );
    let boom = set.get("boom").unwrap_err().to_string();
    assert!(boom.contains("boom.lua:2: top level failure"), "{boom}");
    assert!(
        matches!(set.get("wrongname").unwrap_err(), AdapterError::NameMismatch { ref declared, .. } if declared == "echo")
    );
    let e = set.get("nope").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "adapter nope: not found (available: {})",
            expected.join(", ")
        )
    );
}

#[test]
fn broken_override_does_not_fall_back_to_the_builtin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("adapters")).unwrap();
    std::fs::write(dir.path().join("adapters/openai.lua"), "return {").unwrap();
    let set = AdapterSet::load(dir.path());
    assert!(matches!(set.get("openai"), Err(AdapterError::Load { .. })));
    assert!(!set.names().contains(&"openai".to_string()));
}

#[test]
fn builtins_load_without_a_data_dir() {
    let set = AdapterSet::load(Path::new("/nonexistent-hearth-data-dir"));
    assert!(set.errors().is_empty(), "{:?}", set.errors());
    let mut builtins: Vec<String> = BUILTINS.iter().map(|(n, _)| n.to_string()).collect();
    builtins.sort();
    assert_eq!(set.names(), builtins);
}

// ---------------------------------------------------------------- concurrency and http

#[test]
fn adapter_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Adapter>();
    assert_send_sync::<AdapterSet>();
    assert_send_sync::<AdapterError>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_share_one_adapter() {
    let a = openai();
    let body = read("openai/openai-chat-parallel-toolcalls-response.json");
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (a, body) = (a.clone(), body.clone());
            tokio::spawn(async move {
                for _ in 0..20 {
                    let out = a.transform_response(&body).unwrap();
                    assert_eq!(out.tool_calls.len(), 2);
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// A one-thread HTTP/1.1 server answering `status` with `<METHOD> <path> <body>`.
pub(super) fn http_server(
    status: &'static str,
    connections: usize,
) -> (String, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        for _ in 0..connections {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            let mut byte = [0u8; 1];
            while !buf.ends_with(b"\r\n\r\n") {
                if stream.read(&mut byte).unwrap() == 0 {
                    break;
                }
                buf.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0usize);
            let mut body = vec![0u8; length];
            stream.read_exact(&mut body).unwrap();
            let mut first = head.lines().next().unwrap_or("").split(' ');
            let reply = format!(
                "{} {} {}",
                first.next().unwrap(),
                first.next().unwrap(),
                String::from_utf8_lossy(&body)
            );
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (url, handle)
}

pub(super) const NET: &str = r#"
local a = { name = "net", endpoint = "" }
function a.transform_request(raw)
  local r = json.decode(raw)
  if r.body then return json.encode({ got = http_post(r.url, r.body) }) end
  return json.encode({ got = http_get(r.url) })
end
function a.transform_response(raw) return raw end
return a
"#;

/// The `net` script, allowed (`[adapters] http_allow`) to reach the host of `url`.
pub(super) fn net_adapter(url: &str) -> Adapter {
    let limits = Limits {
        http_allow: vec![HostPort::of_url(url).unwrap()],
        ..Limits::default()
    };
    Adapter::from_source("net.lua", NET, &limits).unwrap()
}

pub(super) fn net_call(a: &Adapter, url: &str, body: Option<&str>) -> Result<String, AdapterError> {
    let mut request = json!({ "url": url });
    if let Some(b) = body {
        request["body"] = json!(b);
    }
    a.transform_request(&request)
        .map(|v| v["got"].as_str().unwrap().to_owned())
}

#[test]
fn http_builtins_outside_a_runtime() {
    let (url, server) = http_server("200 OK", 2);
    let a = net_adapter(&url);
    assert_eq!(
        net_call(&a, &format!("{url}/token"), None).unwrap(),
        "GET /token "
    );
    assert_eq!(
        net_call(&a, &format!("{url}/p"), Some(r#"{"k":1}"#)).unwrap(),
        r#"POST /p {"k":1}"#
    );
    server.join().unwrap();

    let (url, server) = http_server("500 Internal Server Error", 1);
    let a = net_adapter(&url);
    let e = net_call(&a, &format!("{url}/x"), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("http_get {url}/x: HTTP 500")), "{e}");
    server.join().unwrap();
    let e = net_call(&a, "file:///etc/passwd", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("only http and https URLs are allowed"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_builtins_inside_a_multi_thread_runtime() {
    let (url, server) = http_server("200 OK", 2);
    let a = Arc::new(net_adapter(&url));
    // In `block_on` (the test body) and on a worker thread (a spawned task).
    assert_eq!(
        net_call(&a, &format!("{url}/mt"), None).unwrap(),
        "GET /mt "
    );
    let task = tokio::spawn(async move { net_call(&a, &format!("{url}/worker"), None) });
    assert_eq!(task.await.unwrap().unwrap(), "GET /worker ");
    server.join().unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn http_builtins_inside_a_current_thread_runtime() {
    let (url, server) = http_server("200 OK", 1);
    let a = net_adapter(&url);
    assert_eq!(
        net_call(&a, &format!("{url}/ct"), None).unwrap(),
        "GET /ct "
    );
    server.join().unwrap();
}

// ---------------------------------------------------------------- cost (printed, not asserted)

#[test]
fn print_transform_cost() {
    let a = openai();
    let request = read_json("openai/unified-request-history.json");
    let response = read("openai/openai-chat-parallel-toolcalls-response.json");
    let sse = read("openai/openai-chat-stream-parallel-toolcalls-usage.sse");
    let payloads = sse_data(&sse);
    let n = 200u32;
    let t = std::time::Instant::now();
    for _ in 0..n {
        a.transform_request(&request).unwrap();
    }
    let per_request = t.elapsed() / n;
    let t = std::time::Instant::now();
    for _ in 0..n {
        a.transform_response(&response).unwrap();
    }
    let per_response = t.elapsed() / n;
    let t = std::time::Instant::now();
    for _ in 0..n {
        for p in &payloads {
            a.transform_stream_chunk(p).unwrap();
        }
    }
    let per_chunk = t.elapsed() / (n * payloads.len() as u32);
    eprintln!(
        "openai adapter cost (debug build unless --release): transform_request {per_request:?}, \
         transform_response {per_response:?}, transform_stream_chunk {per_chunk:?} per chunk"
    );
}

#[test]
fn a_script_can_start_from_a_builtin_and_change_what_differs() {
    let a = script(
        "compat",
        r#"
        local adapter = builtin("openai")
        adapter.name = "compat"
        adapter.endpoint = "/openai/v1/chat/completions"
        local inner = adapter.transform_request
        adapter.transform_request = function(raw)
          local req = json.decode(inner(raw))
          req.temperature = 1
          return json.encode(req)
        end
        return adapter
        "#,
    );
    assert_eq!(
        (a.name(), a.endpoint()),
        ("compat", "/openai/v1/chat/completions")
    );
    let out = a
        .transform_request(
            &serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .unwrap();
    assert_eq!(out["temperature"], 1);
    assert_eq!(out["messages"][0]["content"], "hi");
    // The built-in's response transform came along.
    let r = a
        .transform_response(r#"{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}"#)
        .unwrap();
    assert_eq!(r.content, "ok");
    let e =
        Adapter::from_source("x.lua", "return builtin('nope')", &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("no built-in adapter `nope`"), "{e}");
}
