//! The families other than OpenAI's: routes, how each family's requests are read and
//! the answers' wire shapes (the broker's `llm::tests_scripted` runs every family
//! through its built-in adapter and the LLM client).

use serde_json::{json, Value};

use super::*;

fn route(uri: &str) -> Option<Route> {
    Route::of(&uri.parse::<Uri>().unwrap())
}

#[test]
fn the_path_chooses_the_family() {
    let family = |uri: &str| route(uri).map(|r| r.family);
    assert_eq!(family("/v1/chat/completions"), Some(Family::OpenAi));
    assert_eq!(family("/chat/completions"), Some(Family::OpenAi));
    assert_eq!(family("/v1/messages"), Some(Family::Anthropic));
    assert_eq!(family("/proxy/v1/messages"), Some(Family::Anthropic));
    assert_eq!(family("/api/chat"), Some(Family::Ollama));
    let g = route("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse").unwrap();
    assert_eq!(
        (g.family, g.model.as_deref(), g.path_streams, g.sse),
        (Family::Gemini, Some("gemini-2.5-flash"), true, true)
    );
    let g = route("/v1beta/models/m:generateContent").unwrap();
    assert_eq!((g.path_streams, g.sse), (false, false));
    for other in [
        "/v1/models/m:countTokens",
        "/v1beta/models/:generateContent",
        "/v1/completions",
        "/messages",
        "/nope",
    ] {
        assert_eq!(route(other), None, "{other}");
    }
}

/// A fixture of the shared wire collection, as the adapters' golden tests read it.
fn wire(rel: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../adapters/testdata")
        .join(rel);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn selectors_read_recorded_requests_of_each_family() {
    let conv = Conversation::of(
        Family::Anthropic,
        &wire("anthropic/anthropic-request-tools-toolresult.json"),
    );
    assert!(conv.last_is_tool);
    assert!(conv
        .last_user
        .starts_with("What's the weather in San Francisco"));
    assert_eq!(
        conv.tool_results,
        r#"{"location": "San Francisco, CA", "temperature": "68\u00b0F", "condition": "Sunny"}"#
    );

    let conv = Conversation::of(
        Family::Gemini,
        &wire("gemini/gemini-request-functiondeclarations-functionresponse.json"),
    );
    assert!(conv.last_is_tool);
    assert_eq!(
        conv.last_user,
        "Which theaters in Mountain View show Barbie movie?"
    );
    let result: Value = serde_json::from_str(&conv.tool_results).unwrap();
    assert_eq!(result["content"]["movie"], "Barbie");

    let conv = Conversation::of(
        Family::Ollama,
        &wire("ollama/ollama-chat-request-parallel-toolresults.json"),
    );
    assert!(conv.last_is_tool);
    assert_eq!(conv.tool_results, "22°C\nPartly cloudy\n15°C\nRainy");

    // System text in each family's place; a user turn with text after tool results.
    let conv = Conversation::of(
        Family::Anthropic,
        &json!({ "system": [{ "type": "text", "text": "Interrupt from cli: STOP" }],
                 "messages": [{ "role": "user", "content": [
                     { "type": "tool_result", "tool_use_id": "t1", "content": "r" },
                     { "type": "text", "text": "and now?" } ] }] }),
    );
    assert_eq!(conv.system, ["Interrupt from cli: STOP"]);
    assert_eq!(
        (conv.last_is_tool, conv.last_user.as_str()),
        (false, "and now?")
    );
    let conv = Conversation::of(
        Family::Gemini,
        &json!({ "systemInstruction": { "parts": [{ "text": "be brief" }] },
                 "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] }),
    );
    assert_eq!(conv.system, ["be brief"]);
    assert_eq!((conv.last_is_tool, conv.last_user.as_str()), (false, "hi"));
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

#[tokio::test]
async fn anthropic_answers_as_the_messages_api() {
    let llm = ScriptedLlm::start(two_tools_script());
    let url = format!("{}/v1/messages", llm.root_url());
    let body = json!({ "model": "claude-test", "max_tokens": 100, "messages": user_turn() });
    let msg: Value = post(url.clone(), body.clone()).await.json().await.unwrap();
    assert_eq!(
        (&msg["type"], &msg["role"], &msg["model"]),
        (
            &json!("message"),
            &json!("assistant"),
            &json!("claude-test")
        )
    );
    let kinds: Vec<&str> = msg["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"]);
    assert_eq!(msg["content"][2]["id"], "toolu_scripted_1");
    assert_eq!(
        msg["content"][3]["input"],
        json!({ "city": "Paris", "days": 2 })
    );
    assert_eq!(msg["stop_reason"], "tool_use");
    assert_eq!(msg["usage"]["input_tokens"], 50);
    assert_eq!(msg["usage"]["output_tokens"], 20);

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let resp = post(url, streamed).await;
    assert_eq!(
        resp.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    let text = resp.text().await.unwrap();
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (event, data) = e.split_once('\n').unwrap();
            let event = event.strip_prefix("event: ").unwrap().to_owned();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], event.as_str());
            (event, data)
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(e, _)| e == "content_block_start")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(starts.len(), 4);
    assert_eq!(starts[3]["index"], 3);
    assert_eq!(starts[3]["content_block"]["type"], "tool_use");
    assert_eq!(starts[3]["content_block"]["input"], json!({}));
    // The second call's input arrives as several input_json_delta fragments.
    let fragments: Vec<&str> = events
        .iter()
        .filter(|(_, d)| d["index"] == 3 && d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(fragments[0], "");
    assert!(fragments.len() >= 3, "{fragments:?}");
    let input: Value = serde_json::from_str(&fragments.concat()).unwrap();
    assert_eq!(input, json!({ "city": "Paris", "days": 2 }));
    let (_, delta) = &events[events.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 20);
}

#[tokio::test]
async fn gemini_streams_sse_with_crlf_or_one_json_array() {
    let llm = ScriptedLlm::start(two_tools_script());
    let base = format!("{}/v1beta/models/gemini-test", llm.root_url());
    let body = json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] });
    let plain: Value = post(format!("{base}:generateContent"), body.clone())
        .await
        .json()
        .await
        .unwrap();
    let candidate = &plain["candidates"][0];
    assert_eq!(candidate["finishReason"], "STOP");
    assert_eq!(candidate["content"]["role"], "model");
    let parts = candidate["content"]["parts"].as_array().unwrap();
    assert_eq!(parts[0], json!({ "text": REASONING, "thought": true }));
    assert_eq!(parts[1], json!({ "text": TEXT }));
    assert_eq!(
        parts[3],
        json!({ "functionCall": { "name": "weather", "args": { "city": "Paris", "days": 2 } } })
    );
    assert_eq!(plain["modelVersion"], "gemini-test");
    let usage = &plain["usageMetadata"];
    assert_eq!(
        usage["candidatesTokenCount"].as_u64().unwrap()
            + usage["thoughtsTokenCount"].as_u64().unwrap(),
        20
    );
    assert_eq!(usage["totalTokenCount"], 70);

    let sse = post(
        format!("{base}:streamGenerateContent?alt=sse"),
        body.clone(),
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(sse.ends_with("\r\n\r\n"));
    let chunks: Vec<Value> = sse
        .split("\r\n\r\n")
        .filter(|e| !e.is_empty())
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    // 5 thought pieces, 5 text pieces (4 characters each), the calls in one.
    assert_eq!(chunks.len(), 11);
    let last = chunks.last().unwrap();
    assert_eq!(
        last["candidates"][0]["content"]["parts"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert!(chunks[..10]
        .iter()
        .all(|c| c["candidates"][0].get("finishReason").is_none()));
    assert!(chunks.iter().all(|c| c["responseId"] == last["responseId"]));

    let array: Value = post(format!("{base}:streamGenerateContent"), body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(array.as_array().unwrap().len(), 11);
}

#[tokio::test]
async fn ollama_streams_ndjson_unless_told_not_to() {
    let llm = ScriptedLlm::start(two_tools_script());
    let url = format!("{}/api/chat", llm.root_url());
    let resp = post(
        url.clone(),
        json!({ "model": "llama-test", "messages": user_turn() }),
    )
    .await;
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let text = resp.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 12, "5 thinking, 5 text, the calls, done");
    assert!(lines[..11].iter().all(|l| l["done"] == false));
    assert_eq!(lines[0]["message"]["thinking"], "Two ");
    let calls = &lines[10]["message"]["tool_calls"];
    assert_eq!(
        calls[0]["function"]["arguments"],
        json!({ "expression": "(2+3)*4" })
    );
    assert!(calls[0].get("id").is_none());
    let done = &lines[11];
    assert_eq!(
        (&done["done"], &done["done_reason"]),
        (&json!(true), &json!("stop"))
    );
    assert_eq!(
        (&done["prompt_eval_count"], &done["eval_count"]),
        (&json!(50), &json!(20))
    );
    let created = done["created_at"].as_str().unwrap();
    assert!(created.len() == 27 && created.ends_with('Z'), "{created}");

    let plain: Value = post(
        url,
        json!({ "model": "llama-test", "messages": user_turn(), "stream": false }),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(plain["done"], true);
    assert_eq!(plain["message"]["content"], TEXT);
    assert_eq!(
        plain["message"]["tool_calls"][1]["function"]["name"],
        "weather"
    );
}

#[tokio::test]
async fn exchanges_are_listed_with_family_path_headers_and_calls() {
    let llm = ScriptedLlm::start(two_tools_script());
    reqwest::Client::new()
        .post(format!(
            "{}/v1beta/models/g:streamGenerateContent?alt=sse",
            llm.root_url()
        ))
        .header("x-goog-api-key", "k")
        .json(&json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] }))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    post(
        format!("{}/v1/messages", llm.root_url()),
        json!({ "messages": user_turn() }),
    )
    .await;
    let listed: Value = reqwest::get(format!("{}/exchanges", llm.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed[0]["family"], "gemini");
    assert_eq!(
        listed[0]["path"],
        "/v1beta/models/g:streamGenerateContent?alt=sse"
    );
    assert_eq!(listed[0]["headers"]["x-goog-api-key"], "k");
    assert_eq!(
        listed[0]["tool_calls"],
        json!([{ "id": null, "name": "calculator" }, { "id": null, "name": "weather" }])
    );
    assert_eq!(listed[1]["family"], "anthropic");
    assert_eq!(listed[1]["tool_calls"][0]["id"], "toolu_scripted_3");
    let bodies: Vec<Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["body"].clone())
        .collect();
    assert_eq!(bodies, llm.requests());
}
