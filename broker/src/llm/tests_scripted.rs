//! Every LLM API family of the scripted server (crate `hearth-scripted`) answered
//! through its built-in adapter and the broker's LLM client, plain and streamed, and
//! each family's error shapes read by its adapter.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hearth_scripted::{Family, Script, ScriptedLlm};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::adapters::AdapterSet;
use crate::llm::{Delta, LlmClient, LlmError, Source};

const REASONING: &str = "Two tools at once.";
const TEXT: &str = "Let me check both.";

async fn post(url: String, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("POST")
}

fn user_turn() -> Value {
    json!([{ "role": "user", "content": "hi" }])
}

fn two_tools_script() -> Script {
    Script::from_value(json!({ "steps": [
        { "after_tool": false, "reasoning_content": REASONING, "content": TEXT,
          "chunk_chars": 4, "usage": { "prompt_tokens": 50, "completion_tokens": 20 },
          "tool_calls": [
              { "name": "calculator", "arguments": { "expression": "(2+3)*4" } },
              { "name": "weather", "arguments": { "city": "Paris", "days": 2 } } ] },
        { "after_tool": true, "content": "Results:\n{tool_results}" },
    ]}))
    .unwrap()
}

fn tool(name: &str, arg: &str) -> Value {
    json!({ "type": "function", "function": { "name": name, "description": name,
        "parameters": { "type": "object", "properties": { arg: { "type": "string" } } } } })
}

/// (source, expected family, path of a plain request, of a streamed one)
fn sources(llm: &ScriptedLlm) -> Vec<(Source, Family, &'static str, &'static str)> {
    let source = |adapter: &str, base_url: String| Source {
        max_concurrent: 0,
        name: adapter.into(),
        base_url,
        model: "scripted-model".into(),
        api_key: Some("test-key".into()),
        api_key_env: None,
        adapter: adapter.into(),
        priority: 0,
        timeout: Duration::from_secs(20),
    };
    let gemini = "/v1beta/models/scripted-model:generateContent";
    let gemini_stream = "/v1beta/models/scripted-model:streamGenerateContent?alt=sse";
    vec![
        (
            source("openai", llm.base_url()),
            Family::OpenAi,
            "/v1/chat/completions",
            "/v1/chat/completions",
        ),
        (
            source("deepseek", llm.root_url()),
            Family::OpenAi,
            "/chat/completions",
            "/chat/completions",
        ),
        (
            source("anthropic", llm.root_url()),
            Family::Anthropic,
            "/v1/messages",
            "/v1/messages",
        ),
        (
            source("gemini", llm.root_url()),
            Family::Gemini,
            gemini,
            gemini_stream,
        ),
        (
            source("ollama", llm.root_url()),
            Family::Ollama,
            "/api/chat",
            "/api/chat",
        ),
    ]
}

#[tokio::test]
async fn every_family_answers_two_tool_calls_through_its_builtin_adapter() {
    let llm = ScriptedLlm::start(two_tools_script());
    let client = LlmClient::new(Arc::new(AdapterSet::load(Path::new(
        "/nonexistent/hearth-data-dir",
    ))));
    let cancel = CancellationToken::new();
    for (source, family, plain_path, stream_path) in sources(&llm) {
        for stream in [false, true] {
            let case = format!("{} stream={stream}", source.adapter);
            let seen = llm.exchanges().len();
            let mut messages = vec![
                json!({ "role": "system", "content": "be brief" }),
                json!({ "role": "user", "content": "what is (2+3)*4 and the weather in Paris?" }),
            ];
            let request = |messages: &[Value]| {
                json!({ "messages": messages, "stream": stream,
                        "tools": [tool("calculator", "expression"), tool("weather", "city")] })
            };
            let mut deltas = Vec::new();
            let first = client
                .complete(&source, request(&messages), |d| deltas.push(d), &cancel)
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            let names: Vec<&str> = first.tool_calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["calculator", "weather"], "{case}");
            assert_eq!(
                first.tool_calls[0].arguments,
                json!({ "expression": "(2+3)*4" })
            );
            assert_eq!(
                first.tool_calls[1].arguments,
                json!({ "city": "Paris", "days": 2 })
            );
            assert_eq!(first.content, TEXT, "{case}");
            assert_eq!(first.reasoning_content, REASONING, "{case}");
            assert_eq!(
                (first.token_usage.prompt, first.token_usage.completion),
                (50, 20),
                "{case}"
            );
            let texts = deltas
                .iter()
                .filter(|d| matches!(d, Delta::Text(_)))
                .count();
            assert_eq!(texts, if stream { 5 } else { 1 }, "{case}: {deltas:?}");

            let sent = llm.exchanges()[seen].clone();
            assert_eq!(sent.family, family, "{case}");
            let path = if stream { stream_path } else { plain_path };
            assert_eq!(sent.path, path, "{case}");
            let key = match family {
                Family::Anthropic => sent.headers["x-api-key"].clone(),
                Family::Gemini => sent.headers["x-goog-api-key"].clone(),
                _ => sent.headers["authorization"].replace("Bearer ", ""),
            };
            assert_eq!(key, "test-key", "{case}");
            // The ids the wire carried reached the broker; made-up ones are distinct.
            let ids: Vec<&str> = first.tool_calls.iter().map(|c| c.id.as_str()).collect();
            match sent.tool_calls[0].id {
                Some(_) => {
                    let sent_ids: Vec<_> = sent.tool_calls.iter().map(|c| c.id.clone()).collect();
                    assert_eq!(
                        sent_ids,
                        ids.iter().map(|i| Some(i.to_string())).collect::<Vec<_>>()
                    );
                }
                None => assert!(!ids[0].is_empty() && ids[0] != ids[1], "{case}: {ids:?}"),
            }

            // The second round, as the tool loop sends it: both results come back.
            messages.push(json!({
                "role": "assistant", "content": first.content,
                "reasoning_content": first.reasoning_content,
                "tool_calls": first.tool_calls.iter().map(|c| json!({
                    "id": c.id, "type": "function",
                    "function": { "name": c.name, "arguments": c.arguments.to_string() } }))
                    .collect::<Vec<_>>(),
            }));
            for (call, result) in first
                .tool_calls
                .iter()
                .zip(["(2+3)*4 = 20", "Paris: sunny"])
            {
                messages
                    .push(json!({ "role": "tool", "tool_call_id": call.id, "content": result }));
            }
            let second = client
                .complete(&source, request(&messages), |_| {}, &cancel)
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(
                second.content, "Results:\n(2+3)*4 = 20\nParis: sunny",
                "{case}"
            );
            assert!(second.tool_calls.is_empty(), "{case}");
            assert_eq!(second.finish_reason, "stop", "{case}");
            assert_eq!(llm.exchanges().len(), seen + 2, "{case}");
        }
    }
}

#[tokio::test]
async fn errors_come_in_each_familys_shape_and_the_adapters_read_them() {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({ "steps": [
            { "match": "busy", "status": 429 },
        ]}))
        .unwrap(),
    );
    let client = LlmClient::new(Arc::new(AdapterSet::load(Path::new(
        "/nonexistent/hearth-data-dir",
    ))));
    let cancel = CancellationToken::new();
    for (source, family, _, _) in sources(&llm) {
        for (text, status, needle) in [
            ("hello", 400, "no step matched"),
            ("busy now", 429, "scripted error (HTTP 429)"),
        ] {
            let request = json!({ "messages": [{ "role": "user", "content": text }] });
            let err = client
                .complete(&source, request, |_| {}, &cancel)
                .await
                .unwrap_err();
            let LlmError::Upstream { error, .. } = &err else {
                panic!("{family:?}: {err}");
            };
            assert_eq!(error.status, Some(status), "{family:?}");
            assert!(error.message.contains(needle), "{family:?}: {error}");
        }
    }
    let resp = post(
        format!("{}/v1/messages", llm.root_url()),
        json!({ "messages": user_turn() }),
    )
    .await;
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["type"], "error");
    assert_eq!(err["error"]["type"], "invalid_request_error");
    let resp = post(
        format!("{}/v1beta/models/m:generateContent", llm.root_url()),
        json!({ "contents": [{ "role": "user", "parts": [{ "text": "busy" }] }] }),
    )
    .await;
    let err: Value = resp.json().await.unwrap();
    assert_eq!(
        (&err["error"]["code"], &err["error"]["status"]),
        (&json!(429), &json!("RESOURCE_EXHAUSTED"))
    );
    let resp = post(
        format!("{}/api/chat", llm.root_url()),
        json!("not an object"),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.unwrap();
    assert!(err["error"].as_str().unwrap().contains("not a JSON object"));
    let resp = reqwest::get(format!("{}/api/chat", llm.root_url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
}
