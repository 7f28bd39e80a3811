//! Tests of the built-in adapters for OpenAI-compatible APIs (deepseek, mistral, groq,
//! github) and Ollama's native API. Inputs are the recorded wire examples under
//! `adapters/testdata/<adapter>/`; expected outputs are golden files in
//! `adapters/testdata/<adapter>/golden/` (refresh with `UPDATE_GOLDEN=1`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;

use super::tests::{golden, read};

fn builtin(name: &str) -> Arc<Adapter> {
    AdapterSet::load(Path::new("/nonexistent-hearth-data-dir"))
        .get(name)
        .unwrap_or_else(|e| panic!("built-in {name}: {e}"))
}

/// Payloads of a recorded stream: the `data:` lines of an SSE file, or every non-empty
/// line of a `.jsonl` / `.ndjson` file.
fn payloads(text: &str, sse: bool) -> Vec<&str> {
    if sse {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .collect()
    } else {
        text.lines().filter(|l| !l.trim().is_empty()).collect()
    }
}

/// What a consumer assembles from a stream, tool calls joined by index (as `llm::Assembly`).
#[derive(Debug, Default)]
struct Assembled {
    content: String,
    reasoning: String,
    calls: BTreeMap<u32, (String, String, String)>,
    finish_reason: Option<String>,
    usage: Option<TokenUsage>,
    done: bool,
    chunks: usize,
}

impl Assembled {
    fn to_json(&self) -> Value {
        json!({
            "content": self.content,
            "reasoning_content": self.reasoning,
            "finish_reason": self.finish_reason,
            "token_usage": self.usage,
            "done": self.done,
            "chunks": self.chunks,
            "tool_calls": self.calls.iter().map(|(i, (id, name, args))| json!({
                "index": i, "id": id, "name": name,
                "arguments": serde_json::from_str::<Value>(args)
                    .unwrap_or_else(|e| panic!("call {i}: arguments {args:?}: {e}")),
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
        if chunk.finish_reason.is_some() {
            out.finish_reason = chunk.finish_reason;
        }
        if chunk.token_usage.is_some() {
            out.usage = chunk.token_usage;
        }
        out.done |= chunk.done;
    }
    out
}

fn usage(prompt: u64, completion: u64, total: u64) -> Option<TokenUsage> {
    Some(TokenUsage {
        prompt,
        completion,
        total,
    })
}

/// A unified CompletionRequest with the usual history: system, multimodal user turn,
/// assistant turn with reasoning and two tool calls (OpenAI-style ids), two tool results,
/// a follow-up user turn; tools, tool_choice and extra top-level keys.
fn unified_history(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture, and what is the weather in Beijing?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}}
            ]},
            {"role": "assistant", "content": "", "reasoning_content": "The user wants the weather.",
             "tool_calls": [
                {"id": "call_abc123", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"北京\"}"}},
                {"id": "gSIMJiOkT", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
             ]},
            {"role": "tool", "tool_call_id": "call_abc123", "content": "天气：晴"},
            {"role": "tool", "tool_call_id": "gSIMJiOkT", "content": "12:00"},
            {"role": "assistant", "content": "Sunny, and it is noon.", "reasoning_content": "Both answers are in."},
            {"role": "user", "content": "Thanks!"}
        ],
        "temperature": 0.7,
        "max_tokens": 4096.0,
        "stream": true,
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "get_time", "description": "Current time",
              "parameters": {"type": "object", "properties": {}, "required": []}}}
        ],
        "tool_choice": "auto",
        "disable_thinking": true,
        "user": "hearth-test",
        "seed": 42
    })
}

// ---------------------------------------------------------------- all of them

#[test]
fn compat_builtins_metadata() {
    for (name, endpoint, format) in [
        ("deepseek", "/chat/completions", StreamFormat::Sse),
        ("mistral", "/v1/chat/completions", StreamFormat::Sse),
        ("groq", "/openai/v1/chat/completions", StreamFormat::Sse),
        ("github", "/chat/completions", StreamFormat::Sse),
        ("ollama", "/api/chat", StreamFormat::Ndjson),
    ] {
        let a = builtin(name);
        assert_eq!(a.name(), name);
        assert_eq!(a.endpoint(), endpoint, "{name}");
        assert_eq!(a.stream_format(), format, "{name}");
        assert!(a.supports_streaming(), "{name}");
        assert_eq!(a.file(), format!("adapters/{name}.lua (built-in)"));
    }
    assert_eq!(builtin("openai").stream_format(), StreamFormat::Sse);
    let gh = builtin("github");
    assert_eq!(gh.headers()["X-GitHub-Api-Version"], "2022-11-28");
    assert_eq!(gh.headers()["Accept"], "application/vnd.github+json");
    for name in ["deepseek", "mistral", "groq", "ollama"] {
        assert!(builtin(name).headers().is_empty(), "{name}");
    }
}

#[test]
fn stream_format_is_checked_at_load() {
    let source = |format: &str| {
        format!(
            "return {{ name = 'x', stream_format = '{format}', \
             transform_request = function(r) return r end, \
             transform_response = function(r) return r end }}"
        )
    };
    let load = |format: &str| Adapter::from_source("x.lua", &source(format), &Limits::default());
    assert_eq!(load("sse").unwrap().stream_format(), StreamFormat::Sse);
    assert_eq!(
        load("ndjson").unwrap().stream_format(),
        StreamFormat::Ndjson
    );
    let e = load("lines").unwrap_err().to_string();
    assert!(
        e.contains("adapter.stream_format: expected \"sse\" or \"ndjson\", got \"lines\""),
        "{e}"
    );
}

/// The four OpenAI-compatible adapters start from `builtin("openai")` rather than copying it.
#[test]
fn compat_adapters_build_on_the_openai_builtin() {
    for name in ["deepseek", "mistral", "groq", "github"] {
        let text = read(&format!("../{name}.lua"));
        assert!(text.contains("builtin(\"openai\")"), "{name}.lua");
        assert!(
            text.lines().count() < 150,
            "{name}.lua is no copy of openai.lua"
        );
    }
}

/// Every adapter turns the same history into a request its API takes (golden per adapter).
#[test]
fn compat_requests_from_the_same_history() {
    for (name, model) in [
        ("deepseek", "deepseek-v4-flash"),
        ("mistral", "mistral-small-latest"),
        ("groq", "llama-3.3-70b-versatile"),
        ("github", "openai/gpt-4.1"),
        ("ollama", "llama3.2"),
    ] {
        let out = builtin(name)
            .transform_request(&unified_history(model))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.get("disable_thinking").is_none(), "{name}");
        assert!(out.get("user").is_none() || name != "mistral", "{name}");
        golden(&format!("{name}/golden/request-history.json"), &out);
    }
}

// ---------------------------------------------------------------- deepseek

#[test]
fn deepseek_request_thinking_toggle_and_reasoning_kept() {
    let a = builtin("deepseek");
    let out = a
        .transform_request(&unified_history("deepseek-v4-flash"))
        .unwrap();
    assert_eq!(out["thinking"], json!({"type": "disabled"}));
    assert_eq!(out["max_tokens"], json!(4096));
    assert_eq!(out["stream_options"], json!({"include_usage": true}));
    assert_eq!(out["seed"], json!(42), "extra keys pass through");
    assert_eq!(
        out["messages"][2]["reasoning_content"],
        json!("The user wants the weather.")
    );
    assert_eq!(
        out["messages"][5]["reasoning_content"],
        json!("Both answers are in.")
    );
    assert_eq!(
        out["messages"][2]["tool_calls"][0]["id"],
        json!("call_abc123")
    );

    // Thinking on (the default): an assistant tool-call turn that lost its reasoning gets
    // an empty one (DeepSeek 400s without it); other roles never carry one.
    let mut req = unified_history("deepseek-v4-pro");
    req.as_object_mut().unwrap().remove("disable_thinking");
    req["messages"][2]
        .as_object_mut()
        .unwrap()
        .remove("reasoning_content");
    req["messages"][6]["reasoning_content"] = json!("stray");
    let out = a.transform_request(&req).unwrap();
    assert!(out.get("thinking").is_none());
    assert_eq!(out["messages"][2]["reasoning_content"], json!(""));
    assert!(out["messages"][6].get("reasoning_content").is_none());
    assert!(out["messages"][0].get("reasoning_content").is_none());

    // The caller's own `thinking` wins over disable_thinking.
    let mut req = unified_history("deepseek-v4-pro");
    req["thinking"] = json!({"type": "enabled"});
    let out = a.transform_request(&req).unwrap();
    assert_eq!(out["thinking"], json!({"type": "enabled"}));
    assert_eq!(
        out["messages"][2]["reasoning_content"],
        json!("The user wants the weather.")
    );
}

#[test]
fn deepseek_responses() {
    let a = builtin("deepseek");
    let out = a
        .transform_response(&read("deepseek/deepseek-reasoning-response.json"))
        .unwrap();
    assert!(out
        .content
        .starts_with("The word \"strawberry\" contains three"));
    assert!(out.reasoning_content.starts_with("We are asked:"));
    assert_eq!(out.finish_reason, "stop");
    assert_eq!(out.token_usage, usage(18, 345, 363).unwrap());
    golden(
        "deepseek/golden/response-reasoning.json",
        &serde_json::to_value(&out).unwrap(),
    );

    let out = a
        .transform_response(&read("deepseek/deepseek-toolcall-reasoning-response.json"))
        .unwrap();
    assert_eq!(out.content, "");
    assert!(out
        .reasoning_content
        .starts_with("The user is asking for the weather"));
    assert_eq!(out.finish_reason, "tool_calls");
    assert_eq!(
        out.tool_calls,
        vec![ToolCall {
            id: "call_00_9V0vrf86Pc9aelHCJMZqnJBo".into(),
            name: "weather".into(),
            arguments: json!({"location": "San Francisco"}),
            ..Default::default()
        }]
    );
    golden(
        "deepseek/golden/response-toolcall-reasoning.json",
        &serde_json::to_value(&out).unwrap(),
    );
}

#[test]
fn deepseek_stream_reasoning_then_toolcall() {
    let a = builtin("deepseek");
    let text = read("deepseek/deepseek-stream-toolcall-reasoning.jsonl");
    let got = assemble(&a, &payloads(&text, false));
    assert!(got
        .reasoning
        .starts_with("The user is asking for the weather in San Francisco."));
    assert_eq!(got.content, "");
    assert_eq!(got.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(got.usage, usage(339, 83, 422));
    assert_eq!(got.calls.len(), 1);
    assert_eq!(got.calls[&0].0, "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF");
    golden(
        "deepseek/golden/stream-toolcall-reasoning.json",
        &got.to_json(),
    );
}

#[test]
fn deepseek_error_names_the_message() {
    let e = builtin("deepseek")
        .transform_response(&read(
            "deepseek/deepseek-error-reasoning-content-missing.json",
        ))
        .unwrap_err();
    assert!(matches!(e, AdapterError::Upstream { .. }));
    assert_eq!(
        e.to_string(),
        "adapter deepseek: transform_response: API error: The `reasoning_content` in the thinking \
         mode must be passed back to the API. (type invalid_request_error)"
    );
}

// ---------------------------------------------------------------- mistral

#[test]
fn mistral_request_ids_fields_and_names() {
    let a = builtin("mistral");
    let out = a
        .transform_request(&unified_history("mistral-small-latest"))
        .unwrap();
    let calls = &out["messages"][2]["tool_calls"];
    let remapped = calls[0]["id"].as_str().unwrap();
    assert_eq!(remapped.len(), 9);
    assert!(
        remapped.bytes().all(|b| b.is_ascii_alphanumeric()),
        "{remapped}"
    );
    assert_ne!(remapped, "call_abc123");
    assert_eq!(
        calls[1]["id"],
        json!("gSIMJiOkT"),
        "a valid Mistral id is kept"
    );
    assert_eq!(
        out["messages"][3]["tool_call_id"],
        json!(remapped),
        "pairs still match"
    );
    assert_eq!(out["messages"][3]["name"], json!("get_weather"));
    assert_eq!(out["messages"][4]["tool_call_id"], json!("gSIMJiOkT"));
    assert_eq!(out["messages"][4]["name"], json!("get_time"));
    // The same id maps to the same replacement every time; different ids differ.
    let again = a.transform_request(&unified_history("m")).unwrap();
    assert_eq!(again["messages"][2]["tool_calls"][0]["id"], json!(remapped));
    let mut other = unified_history("m");
    other["messages"][2]["tool_calls"][0]["id"] = json!("toolu_01A09q90qw90lq917835lq9");
    let other = a.transform_request(&other).unwrap();
    assert_ne!(other["messages"][2]["tool_calls"][0]["id"], json!(remapped));
    // Only Mistral's fields.
    assert_eq!(out["random_seed"], json!(42));
    for k in ["seed", "user", "stream_options", "disable_thinking"] {
        assert!(out.get(k).is_none(), "{k}");
    }
    assert!(out["messages"][2].get("reasoning_content").is_none());
    assert_eq!(out["max_tokens"], json!(4096));
}

#[test]
fn mistral_response_stream_and_error() {
    let a = builtin("mistral");
    let out = a
        .transform_response(&read("mistral/mistral-toolcall-response.json"))
        .unwrap();
    assert_eq!(out.finish_reason, "tool_calls");
    assert_eq!(out.token_usage, usage(124, 22, 146).unwrap());
    assert_eq!(out.tool_calls[0].id, "gSIMJiOkT");
    assert_eq!(
        out.tool_calls[0].arguments,
        json!({"location": "San Francisco"})
    );
    golden(
        "mistral/golden/response-toolcall.json",
        &serde_json::to_value(&out).unwrap(),
    );

    let text = read("mistral/mistral-stream-toolcall.jsonl");
    let got = assemble(&a, &payloads(&text, false));
    assert_eq!(got.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(got.usage, usage(124, 22, 146));
    assert_eq!(got.calls[&0].0, "gSIMJiOkT");
    golden("mistral/golden/stream-toolcall.json", &got.to_json());

    let e = super::tests::api_error(
        a.transform_response(&read("mistral/mistral-error-toolcall-id.json")),
    );
    assert_eq!(
        e,
        super::tests::typed(
            None,
            "invalid_request_error",
            "",
            "Tool call id was abc123 but must be a-z, A-Z, 0-9, with a length of 9."
        )
    );
}

/// Magistral answers with content chunks; `thinking` parts are reasoning.
#[test]
fn mistral_thinking_chunks_are_reasoning() {
    let a = builtin("mistral");
    let body = json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
        "content": [
            {"type": "thinking", "thinking": [{"type": "text", "text": "Two plus two."}]},
            {"type": "text", "text": "4"}
        ]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}});
    let out = a.transform_response(&body.to_string()).unwrap();
    assert_eq!(
        (out.content.as_str(), out.reasoning_content.as_str()),
        ("4", "Two plus two.")
    );
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": [
        {"type": "thinking", "thinking": [{"type": "text", "text": "Hm"}]}]}}]});
    let c = a
        .transform_stream_chunk(&chunk.to_string())
        .unwrap()
        .unwrap();
    assert_eq!(
        (c.content.as_str(), c.reasoning_content.as_str()),
        ("", "Hm")
    );
}

// ---------------------------------------------------------------- groq

#[test]
fn groq_request_drops_unsupported_fields() {
    let mut req = unified_history("llama-3.3-70b-versatile");
    req["logprobs"] = json!(true);
    req["logit_bias"] = json!({"50256": -100});
    req["messages"][1]["name"] = json!("alice");
    let out = builtin("groq").transform_request(&req).unwrap();
    assert!(out.get("logprobs").is_none() && out.get("logit_bias").is_none());
    assert!(out["messages"][1].get("name").is_none());
    assert!(out["messages"][2].get("reasoning_content").is_none());
    assert_eq!(out["stream_options"], json!({"include_usage": true}));
    assert_eq!(out["seed"], json!(42));
}

#[test]
fn groq_response_stream_and_stream_error() {
    let a = builtin("groq");
    let out = a
        .transform_response(&read("groq/groq-toolcall-response.json"))
        .unwrap();
    assert_eq!(out.tool_calls[0].id, "ax9fskhev");
    assert_eq!(out.tool_calls[0].arguments, json!({}));
    assert_eq!(out.token_usage, usage(218, 15, 233).unwrap());
    golden(
        "groq/golden/response-toolcall.json",
        &serde_json::to_value(&out).unwrap(),
    );

    let text = read("groq/groq-stream-toolcall.jsonl");
    let got = assemble(&a, &payloads(&text, false));
    assert_eq!(got.usage, usage(210, 15, 225));
    assert_eq!(
        got.calls[&0],
        ("tk85n1k4m".into(), "weather".into(), "{}".into())
    );
    golden("groq/golden/stream-toolcall.json", &got.to_json());

    // Usage only under `x_groq` (older streams) is read too.
    let x = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}}"#;
    let c = a.transform_stream_chunk(x).unwrap().unwrap();
    assert_eq!(c.token_usage, usage(1, 2, 3));

    // The in-stream `event: error` frame, as recorded.
    let sse = read("groq/groq-stream-error-tool-use-failed.sse");
    let frames = payloads(&sse, true);
    assert_eq!(frames.len(), 1);
    let e = a.transform_stream_chunk(frames[0]).unwrap_err().to_string();
    assert_eq!(
        e,
        "adapter groq: transform_stream_chunk: API error: Failed to call a function. Please adjust \
         your prompt. See 'failed_generation' for more details.; failed generation: Tool use \
         failed: JSON does not match the expected schema for tool calls (HTTP 400, type \
         invalid_request_error, code tool_use_failed)"
    );
}

// ---------------------------------------------------------------- github

#[test]
fn github_request_reasoning_models() {
    let a = builtin("github");
    let out = a
        .transform_request(&unified_history("openai/gpt-4.1"))
        .unwrap();
    assert_eq!(out["max_tokens"], json!(4096));
    assert_eq!(out["temperature"], json!(0.7));
    assert!(out["messages"][2].get("reasoning_content").is_none());
    for model in [
        "openai/o3-mini",
        "o1",
        "openai/gpt-5-mini",
        "OpenAI/o4-mini",
    ] {
        let out = a.transform_request(&unified_history(model)).unwrap();
        assert_eq!(out["max_completion_tokens"], json!(4096), "{model}");
        assert!(
            out.get("max_tokens").is_none() && out.get("temperature").is_none(),
            "{model}"
        );
    }
}

/// GitHub Models speaks OpenAI's wire format: the OpenAI recordings stand in for it.
#[test]
fn github_response_stream_and_error() {
    let a = builtin("github");
    let out = a
        .transform_response(&read("openai/openai-chat-parallel-toolcalls-response.json"))
        .unwrap();
    assert_eq!(out.tool_calls.len(), 2);
    assert_eq!(out.token_usage, usage(149, 60, 209).unwrap());
    golden(
        "github/golden/response-parallel-toolcalls.json",
        &serde_json::to_value(&out).unwrap(),
    );

    let sse = read("openai/openai-chat-stream-parallel-toolcalls-usage.sse");
    let got = assemble(&a, &payloads(&sse, true));
    assert_eq!(got.calls.len(), 2);
    assert_eq!(got.usage, usage(149, 60, 209));
    golden(
        "github/golden/stream-parallel-toolcalls-usage.json",
        &got.to_json(),
    );

    // Azure's content-filter preamble: no choices, nothing to pass on.
    let pre = r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}"#;
    assert!(a.transform_stream_chunk(pre).unwrap().is_none());

    let e = a
        .transform_response(&read("github/github-error-404-unknown-model.json"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "adapter github: transform_response: API error: Unknown model: /claude-sonnet-3.5 (code \
         unknown_model)"
    );
}

// ---------------------------------------------------------------- ollama

/// `.jsonc` → JSON: drops `//` comment lines (the docs' only use of comments).
fn strip_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The docs' "with history, with tools" request, produced from the equivalent unified one.
#[test]
fn ollama_request_matches_the_documented_history() {
    let expected: Value = serde_json::from_str(&strip_comments(&read(
        "ollama/ollama-chat-request-history-tool.jsonc",
    )))
    .unwrap();
    let unified = json!({
        "model": "llama3.2",
        "messages": [
            {"role": "user", "content": "what is the weather in Toronto?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Toronto\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_0", "content": "11 degrees celsius"}
        ],
        "stream": false,
        "tools": expected["tools"].clone(),
        "tool_choice": "auto"
    });
    let out = builtin("ollama").transform_request(&unified).unwrap();
    assert_eq!(out, expected);

    // The documented tools-only request round-trips too.
    let doc: Value = serde_json::from_str(&read("ollama/ollama-chat-request-tools.json")).unwrap();
    assert_eq!(builtin("ollama").transform_request(&doc).unwrap(), doc);
}

#[test]
fn ollama_request_options_images_thinking_and_parallel_results() {
    let a = builtin("ollama");
    let out = a.transform_request(&unified_history("llama3.2")).unwrap();
    assert_eq!(
        out["options"],
        json!({"temperature": 0.7, "num_predict": 4096, "seed": 42})
    );
    assert_eq!(out["think"], json!(false));
    assert_eq!(out["stream"], json!(true));
    assert!(out.get("tool_choice").is_none() && out.get("user").is_none());
    let user = &out["messages"][1];
    assert_eq!(
        user["content"],
        json!("What is in this picture, and what is the weather in Beijing?")
    );
    assert_eq!(user["images"], json!(["iVBORw0KGgo="]));
    let assistant = &out["messages"][2];
    assert_eq!(assistant["thinking"], json!("The user wants the weather."));
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        json!({"city": "北京"}),
        "an object, not JSON text"
    );
    assert_eq!(out["messages"][3]["tool_name"], json!("get_weather"));
    assert_eq!(out["messages"][4]["tool_name"], json!("get_time"));

    // No stream flag → `stream: false` (Ollama streams by default); a remote image is dropped.
    let req = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "text", "text": "hi"}]}]});
    let out = a.transform_request(&req).unwrap();
    assert_eq!(out["stream"], json!(false));
    assert_eq!(out["messages"][0], json!({"role": "user", "content": "hi"}));
    assert!(out.get("options").is_none());

    // The docs' parallel example: four calls, four results matched by position when the
    // history has no ids.
    let doc: Value = serde_json::from_str(&read(
        "ollama/ollama-chat-request-parallel-toolresults.json",
    ))
    .unwrap();
    let mut unified = doc.clone();
    for (i, m) in unified["messages"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        if m["role"] == "tool" {
            m.as_object_mut().unwrap().remove("tool_name");
        }
        if i == 1 {
            for tc in m["tool_calls"].as_array_mut().unwrap() {
                let args = tc["function"]["arguments"].to_string();
                tc["function"] = json!({"name": tc["function"]["name"], "arguments": args});
            }
        }
    }
    let out = a.transform_request(&unified).unwrap();
    let names: Vec<&Value> = out["messages"].as_array().unwrap()[2..]
        .iter()
        .map(|m| &m["tool_name"])
        .collect();
    let expected: Vec<&Value> = doc["messages"].as_array().unwrap()[2..]
        .iter()
        .map(|m| &m["tool_name"])
        .collect();
    assert_eq!(names, expected);
    assert_eq!(
        out["messages"][1]["tool_calls"][2]["function"]["arguments"],
        json!({"city": "London"})
    );
}

#[test]
fn ollama_responses() {
    let a = builtin("ollama");
    for (file, golden_file, name, args, u) in [
        (
            "ollama-chat-toolcall-response.json",
            "response-toolcall.json",
            "get_weather",
            json!({"city": "Tokyo"}),
            (169, 18),
        ),
        (
            "ollama-chat-toolcall-response-raw.json",
            "response-toolcall-raw.json",
            "get_temperature_at_location",
            json!({"location": "East Michelle"}),
            (167, 20),
        ),
    ] {
        let out = a
            .transform_response(&read(&format!("ollama/{file}")))
            .unwrap();
        assert_eq!(
            out.tool_calls,
            vec![ToolCall {
                id: String::new(), // Ollama gives none: the broker makes one up
                name: name.into(),
                arguments: args,
                ..Default::default()
            }],
            "{file}"
        );
        assert_eq!(out.finish_reason, "tool_calls", "Ollama says `stop`");
        assert_eq!(
            out.token_usage,
            usage(u.0, u.1, u.0 + u.1).unwrap(),
            "{file}"
        );
        golden(
            &format!("ollama/golden/{golden_file}"),
            &serde_json::to_value(&out).unwrap(),
        );
    }
    let text = json!({"model": "qwen3", "message": {"role": "assistant", "content": "Hi!",
        "thinking": "Greet back."}, "done": true, "done_reason": "stop"});
    let out = a.transform_response(&text.to_string()).unwrap();
    assert_eq!(
        (out.content.as_str(), out.reasoning_content.as_str()),
        ("Hi!", "Greet back.")
    );
    assert_eq!(out.token_usage, TokenUsage::default());

    let e = a
        .transform_response(r#"{"error":"model \"llama9\" not found, try pulling it first"}"#)
        .unwrap_err()
        .to_string();
    assert_eq!(
        super::tests::api_error(
            a.transform_response(r#"{"error":"model \"llama9\" not found, try pulling it first"}"#)
        ),
        UpstreamError::message("model \"llama9\" not found, try pulling it first")
    );
    assert_eq!(
        e,
        "adapter ollama: transform_response: API error: model \"llama9\" not found, try pulling it first"
    );
}

/// The docs' streamed tool call (pretty-printed there; one object a line on the wire).
#[test]
fn ollama_stream_toolcall() {
    let a = builtin("ollama");
    let text = read("ollama/ollama-chat-stream-tools-doc.txt");
    let lines: Vec<String> = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|v| v.unwrap().to_string())
        .collect();
    assert_eq!(lines.len(), 2);
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let got = assemble(&a, &refs);
    assert!(got.done);
    assert_eq!(got.finish_reason.as_deref(), Some("stop"));
    assert_eq!(got.usage, usage(169, 15, 184));
    assert_eq!(got.calls.len(), 1);
    golden("ollama/golden/stream-toolcall.json", &got.to_json());

    // Calls in separate chunks never share an index (each arrives whole).
    let chunk = |city: &str| {
        json!({"message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": city}}}]}, "done": false})
        .to_string()
    };
    let (c1, c2) = (chunk("Paris"), chunk("Rome"));
    let a = builtin("ollama");
    let got = assemble(&a, &[&c1, "", &c2]);
    assert_eq!(got.calls.len(), 2);
    let args: Vec<Value> = got
        .calls
        .values()
        .map(|c| serde_json::from_str(&c.2).unwrap())
        .collect();
    assert_eq!(
        args,
        vec![json!({"city": "Paris"}), json!({"city": "Rome"})]
    );
    assert!(
        got.calls.values().all(|c| c.0.is_empty()),
        "no ids from Ollama: the broker makes them up"
    );

    // Text and thinking deltas.
    let t = a
        .transform_stream_chunk(
            r#"{"message":{"role":"assistant","content":"Hel","thinking":"hm"},"done":false}"#,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        (t.content.as_str(), t.reasoning_content.as_str(), t.done),
        ("Hel", "hm", false)
    );
}

/// An error line in the middle of an NDJSON stream (after a 200) fails the stream with it.
#[test]
fn ollama_stream_error_midstream() {
    let a = builtin("ollama");
    let text = read("ollama/ollama-stream-error-midstream.ndjson");
    let lines = payloads(&text, false);
    assert_eq!(lines.len(), 5);
    for line in &lines[..4] {
        // /api/generate lines (`response`, no `message`): nothing for a chat consumer.
        assert!(a.transform_stream_chunk(line).unwrap().is_none());
    }
    assert_eq!(
        super::tests::api_error(a.transform_stream_chunk(lines[4])),
        UpstreamError::message("an error was encountered while running the model")
    );
}
