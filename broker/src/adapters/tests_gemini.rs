//! Tests of the built-in `gemini.lua` adapter against recorded Gemini API traffic
//! (`adapters/testdata/gemini/gemini-*`, copied verbatim from the shared wire collection)
//! and unified requests written for these tests (`unified-request-*.json`). Golden files:
//! `adapters/testdata/gemini/golden/`; refresh with `UPDATE_GOLDEN=1`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;

fn read(rel: &str) -> String {
    super::tests::read(&format!("gemini/{rel}"))
}

fn read_json(rel: &str) -> Value {
    super::tests::read_json(&format!("gemini/{rel}"))
}

/// Compares `actual` with `adapters/testdata/gemini/golden/<name>` (UPDATE_GOLDEN=1 refreshes).
fn golden(name: &str, actual: &Value) {
    super::tests::golden(&format!("gemini/golden/{name}"), actual)
}

/// A fresh built-in gemini adapter (its own VM, so no stream state from other tests).
fn gemini() -> Arc<Adapter> {
    AdapterSet::load(Path::new("/nonexistent-hearth-data-dir"))
        .get("gemini")
        .expect("built-in gemini loads")
}

/// A `.jsonl` fixture re-wrapped as Gemini's SSE (`data: …` + CRLF CRLF, as the real
/// `alt=sse` stream frames it), then read back as an SSE reader would: the `data:` payloads.
fn sse_payloads(jsonl: &str) -> Vec<String> {
    let sse: String = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("data: {l}\r\n\r\n"))
        .collect();
    sse.split("\r\n\r\n")
        .filter_map(|event| {
            event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .reduce(|a, _| a)
                .map(str::to_owned)
        })
        .collect()
}

/// The stream put together the way the broker does: tool-call fragments joined by index.
#[derive(Debug, Default)]
struct Assembled {
    content: String,
    reasoning: String,
    /// index → (id, name, arguments text)
    calls: BTreeMap<u32, (String, String, String)>,
    finish_reason: Option<String>,
    usage: Option<TokenUsage>,
    done: bool,
}

impl Assembled {
    fn add(&mut self, chunk: StreamChunk) {
        self.content += &chunk.content;
        self.reasoning += &chunk.reasoning_content;
        for d in chunk.tool_calls {
            let entry = self.calls.entry(d.index).or_default();
            if let Some(id) = d.id {
                entry.0 = id;
            }
            if let Some(name) = d.name {
                entry.1 = name;
            }
            entry.2 += &d.arguments;
        }
        if chunk.finish_reason.is_some() {
            self.finish_reason = chunk.finish_reason;
        }
        if chunk.token_usage.is_some() {
            self.usage = chunk.token_usage;
        }
        self.done |= chunk.done;
    }

    /// The result as JSON, arguments parsed (they must be whole JSON objects).
    fn to_json(&self) -> Value {
        let calls: Vec<Value> = self
            .calls
            .iter()
            .map(|(index, (id, name, args))| {
                let arguments: Value = serde_json::from_str(args)
                    .unwrap_or_else(|e| panic!("call {index}: arguments {args:?}: {e}"));
                assert!(arguments.is_object(), "call {index}: {args}");
                json!({"index": index, "id": id, "name": name, "arguments": arguments})
            })
            .collect();
        json!({
            "content": self.content,
            "reasoning_content": self.reasoning,
            "tool_calls": calls,
            "finish_reason": self.finish_reason,
            "token_usage": self.usage,
            "done": self.done,
        })
    }
}

/// Runs a stream fixture through the adapter: (assembled, the chunks it returned).
fn run_stream(adapter: &Adapter, fixture: &str) -> (Assembled, Vec<Value>) {
    let mut acc = Assembled::default();
    let mut chunks = Vec::new();
    for data in sse_payloads(&read(fixture)) {
        let chunk = adapter
            .transform_stream_chunk(&data)
            .unwrap_or_else(|e| panic!("{fixture}: {e}"));
        if let Some(chunk) = chunk {
            chunks.push(serde_json::to_value(&chunk).unwrap());
            acc.add(chunk);
        }
    }
    (acc, chunks)
}

/// Every key of every object in `v`, recursively.
fn all_keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                all_keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| all_keys(x, out)),
        _ => {}
    }
}

/// JSON Schema `type` names of the cookbook (`OBJECT`, `STRING`) lower-cased.
fn lowercase_types(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match (k.as_str(), x) {
                    ("type", Value::String(s)) => *s = s.to_lowercase(),
                    (_, x) => lowercase_types(x),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(lowercase_types),
        _ => {}
    }
}

// ---------------------------------------------------------------- metadata

#[test]
fn gemini_metadata() {
    let a = gemini();
    assert_eq!(a.name(), "gemini");
    assert_eq!(a.endpoint(), "/v1beta/models/{model}:generateContent");
    assert_eq!(
        a.stream_endpoint(),
        Some("/v1beta/models/{model}:streamGenerateContent?alt=sse")
    );
    assert!(a.headers().is_empty());
    assert!(a.supports_streaming());
    assert_eq!(a.file(), "adapters/gemini.lua (built-in)");
}

#[test]
fn stream_endpoint_is_optional() {
    let source = r#"return { name = "x", endpoint = "/e",
        transform_request = function(j) return j end,
        transform_response = function(j) return j end }"#;
    let a = Adapter::from_source("x.lua", source, &Limits::default()).unwrap();
    assert_eq!(a.stream_endpoint(), None);
    let bad = r#"return { name = "x", stream_endpoint = 3,
        transform_request = function(j) return j end,
        transform_response = function(j) return j end }"#;
    let e = Adapter::from_source("x.lua", bad, &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("stream_endpoint"), "{e}");
}

// ---------------------------------------------------------------- requests

#[test]
fn gemini_request_matches_the_cookbook_example() {
    let out = gemini()
        .transform_request(&read_json("unified-request-theaters.json"))
        .unwrap();
    golden("request-theaters.json", &out);

    // Same conversation as Google's cookbook request, with today's spellings: the function
    // result in a `user` turn (the cookbook's legacy role is `function`), and a placeholder
    // signature on the current turn's call (Gemini 3 requires one).
    let mut cookbook = read_json("gemini-request-functiondeclarations-functionresponse.json");
    let contents = out["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 3);
    assert_eq!(contents[0], cookbook["contents"][0]);
    assert_eq!(contents[1]["role"], "model");
    assert_eq!(
        contents[1]["parts"][0]["functionCall"],
        cookbook["contents"][1]["parts"][0]["functionCall"]
    );
    assert_eq!(
        contents[1]["parts"][0]["thoughtSignature"],
        "skip_thought_signature_validator"
    );
    assert_eq!(contents[2]["role"], "user");
    assert_eq!(contents[2]["parts"], cookbook["contents"][2]["parts"]);
    // Declarations: the cookbook's, with JSON Schema's lower-case type names.
    lowercase_types(&mut cookbook["tools"]);
    assert_eq!(out["tools"], cookbook["tools"]);
    assert_eq!(
        out["toolConfig"],
        json!({"functionCallingConfig": {"mode": "AUTO"}})
    );
    assert_eq!(
        out["generationConfig"],
        json!({"temperature": 0.7, "maxOutputTokens": 4096})
    );
    assert!(out.get("model").is_none() && out.get("stream").is_none());
}

#[test]
fn gemini_request_history_system_media_parallel_results_schema() {
    let out = gemini()
        .transform_request(&read_json("unified-request-history.json"))
        .unwrap();
    golden("request-history.json", &out);

    assert_eq!(
        out["systemInstruction"],
        json!({"parts": [{"text": "You are Hearth's assistant."}, {"text": "Answer briefly."}]})
    );
    let contents = out["contents"].as_array().unwrap();
    let roles: Vec<&str> = contents
        .iter()
        .map(|c| c["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "model", "user", "model", "user", "model", "user", "model", "user"]
    );
    // A past turn keeps no placeholder signature; the current turn's steps get a real one
    // (carried on the unified tool call) or the placeholder.
    assert!(contents[1]["parts"][0].get("thoughtSignature").is_none());
    let step = &contents[5]["parts"];
    assert_eq!(step[0], json!({"text": "Let me check."}));
    assert_eq!(step[1]["thoughtSignature"], "EskgCsYgAb4+REAL");
    assert!(step[2].get("thoughtSignature").is_none());
    assert_eq!(
        contents[7]["parts"][0]["thoughtSignature"],
        "skip_thought_signature_validator"
    );
    // `call_0` is reused by the second turn: the latest assistant call names the result.
    assert_eq!(
        contents[2]["parts"][0]["functionResponse"],
        json!({"name": "weather", "response": {"sky": "rain", "c": 12}})
    );
    assert_eq!(
        contents[6]["parts"],
        json!([
            {"functionResponse": {"name": "calculator", "response": {"result": "5"}}},
            {"functionResponse": {"name": "weather", "response": {"sky": "sun", "c": 20}}},
        ])
    );
    // An id that is not ours is echoed; broken arguments are kept as `_raw`.
    assert_eq!(
        contents[7]["parts"][0]["functionCall"],
        json!({"id": "fc_vertex_7", "name": "calculator", "args": {"_raw": "not json"}})
    );
    assert_eq!(
        contents[8]["parts"][0]["functionResponse"]["id"],
        "fc_vertex_7"
    );
    assert_eq!(
        contents[4]["parts"][1],
        json!({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}})
    );
    assert_eq!(
        contents[4]["parts"][2],
        json!({"fileData": {
            "fileUri": "https://example.com/photos/cat.jpg", "mimeType": "image/jpeg",
        }})
    );

    // Schema keys Gemini rejects are gone, everywhere.
    let mut keys = Vec::new();
    all_keys(&out["tools"], &mut keys);
    for bad in [
        "$schema",
        "$ref",
        "$defs",
        "additionalProperties",
        "examples",
        "exclusiveMaximum",
        "uniqueItems",
        "allOf",
        "const",
    ] {
        assert!(
            !keys.iter().any(|k| k == bad),
            "{bad} left in {}",
            out["tools"]
        );
    }
    let decls = &out["tools"][0]["functionDeclarations"];
    let weather = &decls[0]["parameters"];
    assert_eq!(weather["required"], json!(["city"]));
    assert!(weather["properties"]["city"].get("format").is_none());
    assert_eq!(weather["properties"]["when"]["format"], "date-time");
    assert_eq!(
        weather["properties"]["unit"],
        json!({"type": "string", "nullable": true, "enum": ["c", "f"], "default": "c"})
    );
    assert_eq!(
        weather["properties"]["mode"],
        json!({"type": "string", "nullable": true, "title": "Mode"})
    );
    assert_eq!(
        weather["properties"]["place"]["required"],
        json!(["lat", "lon"])
    );
    assert_eq!(
        weather["properties"]["place"]["description"],
        "Where exactly"
    );
    assert_eq!(
        weather["properties"]["extra"]["properties"]["lat"]["format"],
        "double"
    );
    assert_eq!(
        weather["properties"]["level"],
        json!({"type": "integer", "description": "One of: 1, 2, 3."})
    );
    assert_eq!(weather["properties"]["tags"]["items"]["enum"], json!(["x"]));
    // A tool without parameters declares none.
    assert_eq!(
        decls[2],
        json!({"name": "now", "description": "The current time"})
    );

    assert_eq!(
        out["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}})
    );
    assert_eq!(
        out["generationConfig"],
        json!({
            "temperature": 0.2, "maxOutputTokens": 1024, "topP": 0.9, "stopSequences": ["END"],
            "thinkingConfig": {"thinkingLevel": "low"},
        })
    );
    assert!(out["generationConfig"]["maxOutputTokens"].is_u64());
    assert_eq!(out["safetySettings"][0]["threshold"], "BLOCK_NONE");
    for dropped in [
        "model",
        "stream",
        "disable_thinking",
        "some_other_extra",
        "messages",
    ] {
        assert!(out.get(dropped).is_none(), "{dropped}");
    }
}

#[test]
fn gemini_request_signature_spellings_and_recursive_refs() {
    let request = json!({
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "thought_signature": "SIG-MSG",
             "tool_calls": [{"id": "call_0", "type": "function",
                             "function": {"name": "a", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "[1,2]"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "call_0", "type": "function",
                             "function": {"name": "b", "arguments": ""},
                             "extra_content": {"google": {"thought_signature": "SIG-COMPAT"}}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": ""},
        ],
        "tools": [{"type": "function", "function": {"name": "tree", "parameters": {
            "type": "object",
            "properties": {"root": {"$ref": "#/definitions/Node"}},
            "definitions": {"Node": {"type": "object", "properties": {
                "label": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/definitions/Node"}},
            }}},
        }}}],
    });
    let out = gemini().transform_request(&request).unwrap();
    let contents = &out["contents"];
    assert_eq!(contents[1]["parts"][0]["thoughtSignature"], "SIG-MSG");
    assert_eq!(
        contents[1]["parts"][0]["functionCall"],
        json!({"name": "a", "args": {}})
    );
    assert_eq!(
        contents[2]["parts"][0]["functionResponse"],
        json!({"name": "a", "response": {"result": "[1,2]"}})
    );
    assert_eq!(contents[3]["parts"][0]["thoughtSignature"], "SIG-COMPAT");
    assert_eq!(contents[4]["parts"][0]["functionResponse"]["name"], "b");
    assert!(out.get("toolConfig").is_none() && out.get("generationConfig").is_none());

    // A recursive schema is cut after a bounded number of `$ref`s, as an open object.
    let mut node = &out["tools"][0]["functionDeclarations"][0]["parameters"]["properties"]["root"];
    let mut depth = 0;
    while let Some(items) = node["properties"]["children"].get("items") {
        assert_eq!(node["properties"]["label"], json!({"type": "string"}));
        node = items;
        depth += 1;
    }
    assert!((5..=10).contains(&depth), "depth {depth}");
    assert_eq!(node["type"], "object");
}

#[test]
fn gemini_request_tool_result_without_its_call_is_an_error() {
    let request = json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_9", "content": "x"},
    ]});
    let e = gemini().transform_request(&request).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("call_9") && text.contains("no earlier assistant tool call"),
        "{text}"
    );
}

// ---------------------------------------------------------------- responses

#[test]
fn gemini_response_functioncall() {
    let out = gemini()
        .transform_response(&read("gemini-response-functioncall.json"))
        .unwrap();
    assert_eq!(out.content, "");
    assert_eq!(out.finish_reason, "tool_calls");
    assert_eq!(out.token_usage, TokenUsage::default());
    assert_eq!(out.tool_calls.len(), 1);
    assert_eq!(
        out.tool_calls[0].id, "",
        "no id from Gemini: the broker makes one up"
    );
    assert_eq!(out.tool_calls[0].name, "find_theaters");
    assert_eq!(
        out.tool_calls[0].arguments,
        json!({"movie": "Barbie", "location": "Mountain View, CA"})
    );
    golden(
        "response-functioncall.json",
        &serde_json::to_value(&out).unwrap(),
    );
}

#[test]
fn gemini_response_functioncall_thoughtsignature() {
    let out = gemini()
        .transform_response(&read("gemini-response-functioncall-thoughtsignature.json"))
        .unwrap();
    assert_eq!(out.finish_reason, "tool_calls");
    assert_eq!(
        out.token_usage,
        TokenUsage {
            prompt: 29,
            completion: 15 + 893,
            total: 937
        }
    );
    assert_eq!(
        out.tool_calls[0].id, "",
        "no id from Gemini: the broker makes one up"
    );
    assert_eq!(out.tool_calls[0].name, "weather");
    assert_eq!(
        out.tool_calls[0].arguments,
        json!({"location": "San Francisco"})
    );
    golden(
        "response-functioncall-thoughtsignature.json",
        &serde_json::to_value(&out).unwrap(),
    );
}

#[test]
fn gemini_response_text_thoughts_and_finish_reasons() {
    let a = gemini();
    let body = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "Thinking about it.", "thought": true},
        {"text": "Hello "}, {"text": "there."},
    ]}, "finishReason": "MAX_TOKENS"}],
    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}});
    let out = a.transform_response(&body.to_string()).unwrap();
    assert_eq!(out.content, "Hello there.");
    assert_eq!(out.reasoning_content, "Thinking about it.");
    assert_eq!(out.finish_reason, "length");
    assert_eq!(out.token_usage.total, 7);
    for (reason, expected) in [
        ("STOP", "stop"),
        ("SAFETY", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "malformed_function_call"),
    ] {
        let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}]},
                                          "finishReason": reason}]});
        assert_eq!(
            a.transform_response(&body.to_string())
                .unwrap()
                .finish_reason,
            expected
        );
    }
    let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"}});
    let e = a.transform_response(&blocked.to_string()).unwrap_err();
    assert!(e.to_string().contains("blocked the prompt: SAFETY"), "{e}");
}

#[test]
fn gemini_error_429_names_the_api_message() {
    let a = gemini();
    let body = read("gemini-error-429-resource-exhausted.json");
    let e = super::tests::api_error(a.transform_response(&body));
    let mut want = super::tests::typed(
        Some(429),
        "RESOURCE_EXHAUSTED",
        "",
        "You exceeded your current quota, please check your plan.",
    );
    want.retry_after_s = Some(35); // RetryInfo "34.4s", rounded up
    assert_eq!(e, want);
    assert_eq!(
        e.to_string(),
        "API error: You exceeded your current quota, please check your plan. (HTTP 429, type \
         RESOURCE_EXHAUSTED, retry after 35 s)"
    );
    // The same inside a stream, and as the one-element array of a non-SSE stream.
    let compact =
        serde_json::to_string(&read_json("gemini-error-429-resource-exhausted.json")).unwrap();
    assert_eq!(
        super::tests::api_error(a.transform_stream_chunk(&compact)),
        want
    );
    assert_eq!(
        super::tests::api_error(a.transform_response(&format!("[{compact}]"))),
        want
    );
    let e = a.transform_response("<html>502</html>").unwrap_err();
    assert!(e.to_string().contains("not JSON: <html>502"), "{e}");
}

// ---------------------------------------------------------------- streams

#[test]
fn gemini_stream_functioncall() {
    let (acc, chunks) = run_stream(&gemini(), "gemini-stream-functioncall.jsonl");
    let out = acc.to_json();
    assert_eq!(
        out["tool_calls"],
        json!([{"index": 0, "id": "", "name": "weather",
                "arguments": {"location": "San Francisco"}}])
    );
    assert_eq!(out["finish_reason"], "tool_calls");
    assert_eq!(out["done"], true);
    assert_eq!(
        out["token_usage"],
        json!({"prompt": 29, "completion": 60, "total": 89})
    );
    golden(
        "stream-functioncall.json",
        &json!({"chunks": chunks, "assembled": out}),
    );
}

#[test]
fn gemini_stream_noargs_functioncall_vertex() {
    let (acc, chunks) = run_stream(&gemini(), "gemini-stream-noargs-functioncall-vertex.jsonl");
    let out = acc.to_json();
    assert!(out["reasoning_content"]
        .as_str()
        .unwrap()
        .starts_with("**Processing User Requests**"));
    assert_eq!(out["content"], "");
    assert_eq!(
        out["tool_calls"],
        json!([
            {"index": 0, "id": "", "name": "read_theme", "arguments": {}},
            {"index": 1, "id": "", "name": "read_screen", "arguments": {"id": "A"}},
            {"index": 2, "id": "", "name": "read_screen", "arguments": {"id": "B"}},
            {"index": 3, "id": "", "name": "read_screen", "arguments": {"id": "C"}},
        ])
    );
    assert_eq!(out["finish_reason"], "tool_calls");
    assert_eq!(
        out["token_usage"],
        json!({"prompt": 249, "completion": 241, "total": 490})
    );
    // A call arrives whole in one fragment, or (`willContinue`) announced with its name
    // when it opens and its arguments when it closes: 3 of the 4 here.
    let fragments: usize = chunks
        .iter()
        .map(|c| c["tool_calls"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(fragments, 7);
    golden(
        "stream-noargs-functioncall-vertex.json",
        &json!({"chunks": chunks, "assembled": out}),
    );
}

#[test]
fn gemini_stream_parallel_partialargs_vertex() {
    let (acc, chunks) = run_stream(&gemini(), "gemini-stream-parallel-partialargs-vertex.jsonl");
    let out = acc.to_json();
    assert_eq!(
        out["tool_calls"],
        json!([
            {"index": 0, "id": "", "name": "getWeather", "arguments": {"location": "Boston"}},
            {"index": 1, "id": "", "name": "getWeather",
             "arguments": {"location": "San Francisco"}},
        ])
    );
    assert_eq!(out["finish_reason"], "tool_calls");
    assert_eq!(out["done"], true);
    assert_eq!(
        out["token_usage"],
        json!({"prompt": 26, "completion": 155, "total": 181})
    );
    golden(
        "stream-parallel-partialargs-vertex.json",
        &json!({"chunks": chunks, "assembled": out}),
    );
}

#[test]
fn gemini_streams_sharing_the_adapter_do_not_mix() {
    // Two streams interleaved chunk by chunk through one adapter (one VM) assemble exactly
    // as each does alone: the partialArgs state is kept per responseId.
    let alone_a = run_stream(&gemini(), "gemini-stream-noargs-functioncall-vertex.jsonl").0;
    let alone_b = run_stream(&gemini(), "gemini-stream-parallel-partialargs-vertex.jsonl").0;
    let a_data = sse_payloads(&read("gemini-stream-noargs-functioncall-vertex.jsonl"));
    let b_data = sse_payloads(&read("gemini-stream-parallel-partialargs-vertex.jsonl"));
    let shared = gemini();
    let (mut a, mut b) = (Assembled::default(), Assembled::default());
    for i in 0..a_data.len().max(b_data.len()) {
        for (data, acc) in [(a_data.get(i), &mut a), (b_data.get(i), &mut b)] {
            if let Some(data) = data {
                if let Some(chunk) = shared.transform_stream_chunk(data).unwrap() {
                    acc.add(chunk);
                }
            }
        }
    }
    assert_eq!(a.to_json(), alone_a.to_json());
    assert_eq!(b.to_json(), alone_b.to_json());
    // A finished stream leaves no state: replaying it numbers its calls from 0 again.
    let again = run_stream(&shared, "gemini-stream-parallel-partialargs-vertex.jsonl").0;
    assert_eq!(again.to_json(), alone_b.to_json());
}

#[test]
fn gemini_stream_text_and_partial_values() {
    let a = gemini();
    let chunks = [
        json!({"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]}),
        json!({"candidates": [{"content": {"parts": [{"text": "lo"}]}}]}),
        json!({"candidates": [{"content": {"parts": [
            {"functionCall": {"name": "set", "willContinue": true}}]}}]}),
        json!({"candidates": [{"content": {"parts": [{"functionCall": {"partialArgs": [
            {"jsonPath": "$.n", "numberValue": 2},
            {"jsonPath": "$.flags[0]", "boolValue": true},
            {"jsonPath": "$.o['k y'].z", "nullValue": "NULL_VALUE"},
            {"jsonPath": "$.s", "stringValue": "a", "willContinue": true},
        ], "willContinue": true}}]}}]}),
        json!({"candidates": [{"content": {"parts": [{"functionCall": {"partialArgs": [
            {"jsonPath": "$.s", "stringValue": "b"}], "willContinue": true}}]}}]}),
        // The stream ends without closing the call: finishReason closes it.
        json!({"candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}]}),
    ];
    let mut acc = Assembled::default();
    let mut skipped = 0;
    for c in &chunks {
        match a.transform_stream_chunk(&c.to_string()).unwrap() {
            Some(chunk) => acc.add(chunk),
            None => skipped += 1,
        }
    }
    assert_eq!(
        skipped, 2,
        "the call's partial chunks carry nothing yet (its opening announces it)"
    );
    let out = acc.to_json();
    assert_eq!(out["content"], "Hello");
    assert_eq!(
        out["tool_calls"],
        json!([{"index": 0, "id": "", "name": "set", "arguments":
                {"n": 2, "flags": [true], "o": {"k y": {"z": null}}, "s": "ab"}}])
    );
    assert_eq!(out["finish_reason"], "tool_calls");
}

/// Vertex streams a call's arguments over several chunks (`willContinue`): a stream
/// cut before the call closes is a cut tool call, not a short answer.
#[test]
fn gemini_stream_cut_inside_a_continued_call_is_an_error() {
    let a = gemini();
    // Each stream its own responseId, as Gemini sends them (the script keeps a
    // stream's state by it).
    let stream = |id: &str, closed: bool| {
        let mut events = vec![
            json!({"responseId": id, "candidates": [{"content": {"parts": [{"text": "checking"}]}}]}),
            json!({"responseId": id, "candidates": [{"content": {"parts": [
                {"functionCall": {"name": "set", "willContinue": true}}]}}]}),
            json!({"responseId": id, "candidates": [{"content": {"parts": [{"functionCall": {"partialArgs": [
                {"jsonPath": "$.n", "numberValue": 2}], "willContinue": true}}]}}]}),
        ];
        if closed {
            events.push(json!({"responseId": id, "candidates": [{"content": {"parts": [{"functionCall": {"partialArgs": [
                {"jsonPath": "$.s", "stringValue": "x"}]}}]}, "finishReason": "STOP"}]}));
        }
        events
            .iter()
            .map(|e| format!("data: {e}\r\n\r\n"))
            .collect::<String>()
    };
    let err = crate::llm::replay_stream(&a, stream("r1", false).into_bytes()).unwrap_err();
    assert!(err.to_string().contains("set"), "{err}");
    // Without responseIds too: the cut stream's VM is not reused, so its open call
    // cannot leak into the next stream.
    crate::llm::replay_stream(&a, stream("", false).into_bytes()).unwrap_err();
    // Closed and finished, the same call comes out whole.
    let whole = stream("", true);
    let out = crate::llm::replay_stream(&a, whole.into_bytes()).unwrap();
    assert_eq!(out.tool_calls.len(), 1);
    assert_eq!(out.tool_calls[0].name, "set");
    assert_eq!(out.tool_calls[0].arguments, json!({"n": 2, "s": "x"}));
    assert_eq!(out.finish_reason, "tool_calls");
}
