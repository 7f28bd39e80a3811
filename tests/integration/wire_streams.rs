//! Odd streams, the APIs' errors and redirects end to end: a real broker whose sources
//! point at a loopback server ([`WireServer`]) that sends exact bytes in several writes.
//! CR-only SSE whose last event has no blank line; a stream cut in the middle of a tool
//! call (SSE and NDJSON); Groq's `event: error`; Anthropic's `overloaded_error` after
//! HTTP 200 (failover); Ollama's bare `{"error": …}` line; a 307 to another origin.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{example, final_of, repo, Broker};
use crate::wire_server::{Reply, WireServer};

/// `[[sources]]` entries: (name, adapter, base_url), in priority order; streaming on.
fn config(sources: &[(&str, &str, &str)]) -> String {
    let mut cfg = String::new();
    for (i, (name, adapter, base)) in sources.iter().enumerate() {
        cfg += &format!(
            "[[sources]]\nname = \"{name}\"\nadapter = \"{adapter}\"\nbase_url = \"{base}\"\n\
             model = \"m\"\napi_key = \"key-{name}\"\npriority = {}\n",
            i + 1
        );
    }
    cfg + "[agent]\nstream = true\n"
}

async fn broker(sources: &[(&str, &str, &str)]) -> Broker {
    Broker::spawn_with_files(vec![], &[], &[("hearth.toml", &config(sources))]).await
}

fn sse(body: &str) -> Reply {
    Reply::ok("text/event-stream", Reply::split(body.as_bytes(), 7))
}

/// An OpenAI chat stream answering `text`.
fn openai_text(text: &str) -> Reply {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    sse(&format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(json!({"role": "assistant", "content": text}), Value::Null),
        chunk(json!({}), json!("stop")),
    ))
}

/// A Gemini stream event: `part` of the reply, with `finishReason` STOP when `last`.
fn gemini_event(part: Value, last: bool) -> String {
    let mut event = json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}],
                           "responseId": "r"});
    if last {
        event["candidates"][0]["finishReason"] = json!("STOP");
        event["usageMetadata"] =
            json!({"promptTokenCount": 9, "candidatesTokenCount": 4, "totalTokenCount": 13});
    }
    format!("data: {event}")
}

/// Gemini's `streamGenerateContent?alt=sse` with CR-only line ends; the last event — the
/// one with `finishReason` — has no line end at all. Both turns (a tool call, then the
/// answer) arrive whole: the call runs, and the answer is not cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cr_only_stream_with_an_unterminated_last_event() {
    let call = format!(
        "{}\r\r{}",
        gemini_event(json!({"text": "Let me compute. "}), false),
        gemini_event(
            json!({"functionCall": {"name": "calculator", "args": {"expression": "(2+3)*4"}}}),
            true
        ),
    );
    let answer = format!(
        "{}\r\r{}\r{}",
        gemini_event(json!({"text": "(2+3)*4 = "}), false),
        ": a comment line",
        gemini_event(json!({"text": "20 ✓"}), true),
    );
    let server = WireServer::start(vec![sse(&call), sse(&answer)]).await;
    let cfg = config(&[("g", "gemini", &server.url)]);
    let mut b =
        Broker::spawn_with_files(vec![example("calculator")], &[], &[("hearth.toml", &cfg)]).await;
    b.wait_ready("calculator").await;
    let f = final_of(&b.chat("what is (2+3)*4?", "u").await);
    assert!(f.error.is_empty(), "{f:?}\n{}", b.log());
    assert!(f.text.ends_with("(2+3)*4 = 20 ✓"), "{f:?}");
    assert_eq!(f.iterations, 2, "{f:?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].path.ends_with(":streamGenerateContent?alt=sse"));
    let second = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(
        second.contains("functionResponse") && second.contains("20"),
        "{second}"
    );
}

/// A stream that ends after a tool call began and before any finish reason is an error
/// naming the call — for SSE (OpenAI) and NDJSON (Ollama) — not a shorter answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_in_the_middle_of_a_tool_call_is_an_error() {
    let openai = format!(
        "data: {}\n\n",
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0,
               "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
               "type": "function", "function": {"name": "calculator", "arguments": "{\"expre"}}]},
               "finish_reason": null}]})
    );
    let ollama = format!(
        "{}\n",
        json!({"model": "m", "message": {"role": "assistant", "content": "",
               "tool_calls": [{"function": {"name": "calculator",
                               "arguments": {"expression": "1+1"}}}]}, "done": false})
    );
    for (adapter, reply, path, id) in [
        ("openai", sse(&openai), "/v1", " (call_1)"),
        (
            "ollama",
            Reply::ok("application/x-ndjson", Reply::split(ollama.as_bytes(), 5)),
            "",
            "",
        ),
    ] {
        let server = WireServer::start(vec![reply]).await;
        let base = format!("{}{path}", server.url);
        let mut b = broker(&[(adapter, adapter, &base)]).await;
        let f = final_of(&b.chat("add", "u").await);
        assert!(
            f.error.starts_with(&format!("LLM source {adapter}: "))
                && f.error.ends_with(&format!(
                    "the stream ended in the middle of tool call calculator{id}: no finish reason came"
                )),
            "{adapter}: {f:?}"
        );
        assert_eq!(
            server.requests().len(),
            1,
            "{adapter}: the call was not run"
        );
    }
}

/// Groq's `event: error` (`tool_use_failed`, after HTTP 200) is Groq's error as Groq said
/// it — an invalid request, so no other source is tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groq_error_event_is_the_providers_error_and_is_not_retried() {
    let capture = std::fs::read_to_string(
        repo().join("adapters/testdata/groq/groq-stream-error-tool-use-failed.sse"),
    )
    .unwrap();
    let groq = WireServer::start(vec![sse(&capture)]).await;
    let backup = WireServer::start(vec![openai_text("from the backup")]).await;
    let backup_url = format!("{}/v1", backup.url);
    let mut b = broker(&[
        ("groq", "groq", &groq.url),
        ("backup", "openai", &backup_url),
    ])
    .await;
    let f = final_of(&b.chat("call a tool", "u").await);
    assert_eq!(
        f.error,
        "LLM source groq: API error: Failed to call a function. Please adjust your prompt. See \
         'failed_generation' for more details.; failed generation: Tool use failed: JSON does not \
         match the expected schema for tool calls (HTTP 400, type invalid_request_error, code \
         tool_use_failed)",
        "{f:?}"
    );
    assert_eq!(groq.requests().len(), 1);
    assert!(
        backup.requests().is_empty(),
        "an invalid request was retried"
    );
    assert!(
        b.log()
            .contains("LLM source groq rejected the request (not retried)"),
        "{}",
        b.log()
    );
    // The source stays usable: the request was wrong, not the source.
    let (code, out, _) = b.cli(&["llm", "list"]);
    assert_eq!(code, 0);
    let groq_line = out.lines().find(|l| l.contains("groq")).unwrap_or_default();
    assert!(!groq_line.contains("cooldown"), "{out}");
}

/// Anthropic's `overloaded_error` inside a stream that began with HTTP 200 and sent no
/// text: the provider's error, the source cools down and the next source answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_overloaded_after_200_fails_over_to_the_next_source() {
    let capture = std::fs::read_to_string(
        repo().join("adapters/testdata/anthropic/anthropic-stream-error-overloaded.sse"),
    )
    .unwrap();
    let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
        "role": "assistant", "model": "m", "content": [], "stop_reason": null,
        "usage": {"input_tokens": 5, "output_tokens": 1}}});
    let body = format!(
        "event: message_start\r\ndata: {start}\r\n\r\nevent: ping\r\ndata: {{\"type\": \"ping\"}}\r\n\r\n{capture}"
    );
    let claude = WireServer::start(vec![sse(&body)]).await;
    let backup = WireServer::start(vec![openai_text("from the backup")]).await;
    let backup_url = format!("{}/v1", backup.url);
    let mut b = broker(&[
        ("claude", "anthropic", &claude.url),
        ("backup", "openai", &backup_url),
    ])
    .await;
    let f = final_of(&b.chat("hi", "u").await);
    assert!(f.error.is_empty(), "{f:?}");
    assert_eq!(f.text, "from the backup");
    assert_eq!((claude.requests().len(), backup.requests().len()), (1, 1));
    let log = b.log();
    assert!(
        log.contains(
            "LLM source claude failed (LLM source claude: API error: Overloaded (type \
             overloaded_error)); cooling down"
        ),
        "{log}"
    );
    // The next turn goes to the backup while claude cools down.
    let f = final_of(&b.chat("again", "u").await);
    assert_eq!(f.text, "from the backup");
    assert_eq!((claude.requests().len(), backup.requests().len()), (1, 2));
    let (_, out, _) = b.cli(&["llm", "list"]);
    let line = out
        .lines()
        .find(|l| l.contains("claude"))
        .unwrap_or_default();
    assert!(line.contains("cooldown"), "{out}");
}

/// Ollama's bare `{"error": …}` line in the middle of an NDJSON stream is Ollama's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_error_line_in_the_stream_is_the_providers_error() {
    let body = format!(
        "{}\r\n{}\r\n",
        json!({"model": "m", "message": {"role": "assistant", "content": "Yes"}, "done": false}),
        json!({"error": "an error was encountered while running the model"}),
    );
    let server = WireServer::start(vec![Reply::ok(
        "application/x-ndjson",
        Reply::split(body.as_bytes(), 9),
    )])
    .await;
    let mut b = broker(&[("local", "ollama", &server.url)]).await;
    let f = final_of(&b.chat("hi", "u").await);
    assert_eq!(
        f.error, "LLM source local: API error: an error was encountered while running the model",
        "{f:?}"
    );
}

/// A 307 to another origin is not followed: that origin gets no request (and so no key),
/// and the error names the Location. A 307 to the source's own origin is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_to_another_origin_are_not_followed() {
    for (adapter, header) in [("anthropic", "x-api-key"), ("gemini", "x-goog-api-key")] {
        let other = WireServer::start(vec![openai_text("stolen")]).await;
        let location = format!("{}/collect", other.url);
        let server = WireServer::start(vec![Reply {
            status: 307,
            headers: vec![
                ("Location".into(), location.clone()),
                ("Content-Length".into(), "0".into()),
            ],
            chunks: vec![],
            pause: Duration::from_millis(1),
        }])
        .await;
        let mut b = broker(&[("src", adapter, &server.url)]).await;
        let f = final_of(&b.chat("hi", "u").await);
        assert!(
            f.error
                .contains(&format!("redirects (HTTP 307) to {location}: not followed")),
            "{adapter}: {f:?}"
        );
        assert!(
            other.requests().is_empty(),
            "{adapter}: the other origin got a request"
        );
        let sent = server.requests();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].header(header), Some("key-src"), "{adapter}");
    }

    // Same origin, 307 (method and body kept): followed, with the key.
    let text = json!({"type": "content_block_delta", "index": 0,
                      "delta": {"type": "text_delta", "text": "moved fine"}});
    let answer = format!(
        "event: content_block_start\ndata: {}\n\nevent: content_block_delta\ndata: {text}\n\n\
         event: message_delta\ndata: {}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
    );
    let server = WireServer::start(vec![
        Reply {
            status: 307,
            headers: vec![
                ("Location".into(), "/v1/messages?moved=1".into()),
                ("Content-Length".into(), "0".into()),
            ],
            chunks: vec![],
            pause: Duration::from_millis(1),
        },
        sse(&answer),
    ])
    .await;
    let mut b = broker(&[("src", "anthropic", &server.url)]).await;
    let f = final_of(&b.chat("hi", "u").await);
    assert_eq!(
        (f.text.as_str(), f.error.as_str()),
        ("moved fine", ""),
        "{f:?}"
    );
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].path, "/v1/messages?moved=1");
    assert_eq!(sent[1].method, "POST");
    assert_eq!(sent[1].header("x-api-key"), Some("key-src"));
    assert_eq!(sent[1].json()["messages"], sent[0].json()["messages"]);
}
