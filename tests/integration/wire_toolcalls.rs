//! Tool calls end to end through a real broker and a loopback server that sends exact
//! bytes in several writes (`wire_server`): parallel calls that share `index: 0` or carry
//! none, calls without ids (the ids the broker makes up must reach the next request on
//! the calls and on their results, distinct through each family's id mapping), and the
//! unified finish reason `tool_calls` when a server says `stop` with calls (seen in the
//! broker's debug line "LLM answered … finish_reason=…").

use std::collections::HashSet;

use hearth_proto::v1::chat_event::Event;
use hearth_proto::v1::UseSourceRequest;
use serde_json::{json, Value};

use crate::harness::{final_of, py_echo, Broker};
use crate::wire_server::{Reply, WireServer};

/// Bytes per write: SSE lines, JSON and UTF-8 split anywhere.
const WRITE: usize = 7;

fn sse(events: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for e in events {
        out += &format!("data: {e}\n\n");
    }
    out += "data: [DONE]\n\n";
    out.into_bytes()
}

fn ndjson(lines: &[Value]) -> Vec<u8> {
    lines
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .into_bytes()
}

fn reply(content_type: &str, body: Vec<u8>) -> Reply {
    Reply::ok(content_type, Reply::split(&body, WRITE))
}

fn openai_chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

/// A call fragment in OpenAI's stream shape; `index`/`id` left out when `None`.
fn openai_call(index: Option<u32>, id: Option<&str>, name: &str, args: &Value) -> Value {
    let mut c = json!({"type": "function",
        "function": {"name": name, "arguments": args.to_string()}});
    if let Some(i) = index {
        c["index"] = json!(i);
    }
    if let Some(id) = id {
        c["id"] = json!(id);
    }
    c
}

/// The answer after the tools ran, per family (plain or streamed).
fn final_reply(family: &str, stream: bool) -> Reply {
    match (family, stream) {
        ("ollama", true) => reply(
            "application/x-ndjson",
            ndjson(&[
                json!({"model": "m", "message": {"role": "assistant", "content": "done"},
                "done": true, "done_reason": "stop"}),
            ]),
        ),
        ("ollama", false) => reply(
            "application/json",
            json!({"model": "m", "message": {"role": "assistant", "content": "done"},
                "done": true, "done_reason": "stop"})
            .to_string()
            .into_bytes(),
        ),
        ("anthropic", _) => reply(
            "application/json",
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 1}})
            .to_string()
            .into_bytes(),
        ),
        ("gemini", _) => reply(
            "application/json",
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "done"}]},
                "finishReason": "STOP"}]})
            .to_string()
            .into_bytes(),
        ),
        (_, true) => reply(
            "text/event-stream",
            sse(&[
                openai_chunk(json!({"role": "assistant", "content": "done"}), None),
                openai_chunk(json!({}), Some("stop")),
            ]),
        ),
        (_, false) => reply(
            "application/json",
            json!({"id": "c", "object": "chat.completion", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]})
            .to_string()
            .into_bytes(),
        ),
    }
}

/// A broker with the `w` echo plugin (`w_echo`, `w_sleep`) and one source per
/// (name, adapter, url).
async fn broker(sources: &[(&str, &str, &str)], stream: bool) -> Broker {
    let mut cfg = String::new();
    for (i, (name, adapter, url)) in sources.iter().enumerate() {
        cfg += &format!(
            "[[sources]]\nname = \"{name}\"\nadapter = \"{adapter}\"\nbase_url = \"{url}\"\n\
             model = \"m\"\napi_key = \"k\"\npriority = {i}\n"
        );
    }
    cfg += &format!("[agent]\nstream = {stream}\n");
    let mut b =
        Broker::spawn_with_files(vec![py_echo("w", json!({}))], &[], &[("hearth.toml", &cfg)])
            .await;
    b.wait_ready("w").await;
    b
}

/// Runs one chat; checks it ended with "done" after `calls` tool calls that all ran, with
/// distinct non-empty call ids. Returns (tool, args) of the calls in order.
async fn chat(b: &mut Broker, user: &str, calls: usize) -> Vec<(String, Value)> {
    let events = b.chat("go", user).await;
    let f = final_of(&events);
    assert!(f.error.is_empty(), "{f:?}\n{}", b.log());
    assert_eq!(f.text, "done", "{events:?}");
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallStarted(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), calls, "{events:?}");
    let ids: HashSet<&str> = started.iter().map(|t| t.call_id.as_str()).collect();
    assert!(
        ids.len() == calls && !ids.contains(""),
        "call ids not distinct: {started:?}"
    );
    for e in &events {
        if let Event::ToolCallFinished(t) = e {
            assert!(t.success, "{t:?}");
        }
    }
    started
        .iter()
        .map(|t| (t.tool.clone(), serde_json::from_str(&t.args_json).unwrap()))
        .collect()
}

/// A call as a request carries it: (id, tool, arguments).
type SentCall = (String, String, Value);
/// A result as a request carries it: (the id of the call it answers, content).
type SentResult = (String, String);

/// In an OpenAI-shaped request body: the assistant's calls (id, name, arguments) and the
/// tool results (tool_call_id, content).
fn openai_sent(body: &Value) -> (Vec<SentCall>, Vec<SentResult>) {
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    for m in body["messages"].as_array().unwrap() {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            let f = &c["function"];
            let args = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
            calls.push((
                c["id"].as_str().unwrap().to_owned(),
                f["name"].as_str().unwrap().to_owned(),
                args,
            ));
        }
        if m["role"] == "tool" {
            results.push((
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            ));
        }
    }
    (calls, results)
}

/// In an Anthropic request body: the `tool_use` blocks (id, name, input) and the
/// `tool_result` blocks (tool_use_id, content).
fn anthropic_sent(body: &Value) -> (Vec<SentCall>, Vec<SentResult>) {
    let (mut uses, mut results) = (Vec::new(), Vec::new());
    for m in body["messages"].as_array().unwrap() {
        for block in m["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_use") => uses.push((
                    block["id"].as_str().unwrap().to_owned(),
                    block["name"].as_str().unwrap().to_owned(),
                    block["input"].clone(),
                )),
                Some("tool_result") => results.push((
                    block["tool_use_id"].as_str().unwrap().to_owned(),
                    block["content"].to_string(),
                )),
                _ => {}
            }
        }
    }
    (uses, results)
}

/// Every call has its own non-empty id and every result names one call, whose echo it is
/// (`w_echo` answers its arguments, each with its own `tag`).
fn assert_paired(calls: &[SentCall], results: &[SentResult]) {
    let ids: HashSet<&str> = calls.iter().map(|c| c.0.as_str()).collect();
    assert!(
        ids.len() == calls.len() && !ids.contains(""),
        "ids not distinct: {calls:?}"
    );
    assert_eq!(results.len(), calls.len(), "{results:?}");
    for (id, content) in results {
        let call = calls
            .iter()
            .find(|c| &c.0 == id)
            .unwrap_or_else(|| panic!("result {content:?} names no call ({id}): {calls:?}"));
        let tag = call.2["tag"].as_str().unwrap();
        assert!(content.contains(tag), "result of {call:?} is {content:?}");
    }
}

fn answered_finish_reasons(b: &Broker) -> Vec<String> {
    b.log()
        .lines()
        .filter(|l| l.contains("LLM answered"))
        .filter_map(|l| l.split("finish_reason=").nth(1))
        .map(|r| r.split_whitespace().next().unwrap_or_default().to_owned())
        .collect()
}

/// The bytes of the report: parallel calls `a` and `b` both at `index: 0` (Ollama's
/// `/v1` stream), each whole in its own chunk. Both run, with their own arguments, and
/// the next request carries both calls and both results under their ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_at_index_zero_both_run() {
    let first = sse(&[
        openai_chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [
                openai_call(Some(0), Some("a"), "w_echo", &json!({"tag": "first"}))]}),
            None,
        ),
        openai_chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [
                openai_call(Some(0), Some("b"), "w_echo", &json!({"tag": "second"}))]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
    ]);
    let server = WireServer::start(vec![
        reply("text/event-stream", first),
        final_reply("openai", true),
    ])
    .await;
    let mut b = broker(&[("s", "openai", &server.url)], true).await;
    let calls = chat(&mut b, "u", 2).await;
    assert_eq!(
        calls,
        [
            ("w_echo".to_owned(), json!({"tag": "first"})),
            ("w_echo".to_owned(), json!({"tag": "second"})),
        ]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let (sent, results) = openai_sent(&requests[1].json());
    let ids: Vec<&str> = sent.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_paired(&sent, &results);
}

/// Calls without any `index`, one per chunk (Mistral's stream shape), through the mistral
/// adapter: both run; Mistral's own 9-character ids come back as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_an_index_both_run() {
    let first = sse(&[
        openai_chunk(json!({"role": "assistant", "content": ""}), None),
        openai_chunk(
            json!({"content": null, "tool_calls": [
                openai_call(None, Some("gSIMJiOkT"), "w_echo", &json!({"tag": "first"}))]}),
            None,
        ),
        openai_chunk(
            json!({"content": null, "tool_calls": [
                openai_call(None, Some("Qb7kLm2Xe"), "w_echo", &json!({"tag": "second"}))]}),
            Some("tool_calls"),
        ),
    ]);
    let server = WireServer::start(vec![
        reply("text/event-stream", first),
        final_reply("mistral", true),
    ])
    .await;
    let mut b = broker(&[("s", "mistral", &server.url)], true).await;
    let calls = chat(&mut b, "u", 2).await;
    assert_eq!(calls[0].1, json!({"tag": "first"}));
    assert_eq!(calls[1].1, json!({"tag": "second"}));
    let (sent, results) = openai_sent(&server.requests()[1].json());
    let ids: Vec<&str> = sent.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(ids, ["gSIMJiOkT", "Qb7kLm2Xe"]);
    assert_paired(&sent, &results);
}

/// `"id": ""` (Gemini's OpenAI-compatible endpoint), plain and streamed (no index either),
/// with `finish_reason: "stop"`: the broker makes up distinct ids, the next request
/// carries them on the calls and their results, and the finish reason is `tool_calls`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_with_empty_ids_get_ids_their_results_answer() {
    for stream in [false, true] {
        let first = if stream {
            reply(
                "text/event-stream",
                sse(&[
                    openai_chunk(
                        json!({"role": "assistant", "tool_calls": [
                            openai_call(None, Some(""), "w_echo", &json!({"tag": "first"}))]}),
                        None,
                    ),
                    openai_chunk(
                        json!({"role": "assistant", "tool_calls": [
                            openai_call(None, Some(""), "w_echo", &json!({"tag": "second"}))]}),
                        None,
                    ),
                    openai_chunk(json!({"role": "assistant"}), Some("stop")),
                ]),
            )
        } else {
            let calls = [
                openai_call(None, Some(""), "w_echo", &json!({"tag": "first"})),
                openai_call(None, Some(""), "w_echo", &json!({"tag": "second"})),
            ];
            reply(
                "application/json",
                json!({"id": "c", "object": "chat.completion", "choices": [{"index": 0,
                    "message": {"role": "assistant", "tool_calls": calls},
                    "finish_reason": "stop"}]})
                .to_string()
                .into_bytes(),
            )
        };
        for family in ["openai", "mistral"] {
            let server = WireServer::start(vec![first.clone(), final_reply(family, stream)]).await;
            let mut b = broker(&[("s", family, &server.url)], stream).await;
            chat(&mut b, "u", 2).await;
            let (sent, results) = openai_sent(&server.requests()[1].json());
            assert_paired(&sent, &results);
            for (id, _, _) in &sent {
                match family {
                    "mistral" => assert!(
                        id.len() == 9 && id.bytes().all(|c| c.is_ascii_alphanumeric()),
                        "{id}"
                    ),
                    _ => assert!(id.starts_with("call_hearth_"), "{id}"),
                }
            }
            assert_eq!(
                answered_finish_reasons(&b),
                ["tool_calls", "stop"],
                "{family} stream={stream}"
            );
        }
    }
}

/// Gemini gives no ids: the broker's ids keep the calls apart on the broker's side and
/// are not sent back to Gemini; results answer their calls in order, by name. A later
/// turn's calls get ids of their own (not `call_0` again), so the history still has one
/// id per call when it moves to Anthropic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_calls_without_ids_get_ids_unique_in_the_conversation() {
    let calls = |tags: &[&str]| {
        let parts: Vec<Value> = tags
            .iter()
            .map(|t| json!({"functionCall": {"name": "w_echo", "args": {"tag": t}}}))
            .collect();
        let body = json!({"candidates": [{"content": {"role": "model", "parts": parts},
            "finishReason": "STOP"}]});
        reply("application/json", body.to_string().into_bytes())
    };
    let server = WireServer::start(vec![
        calls(&["first", "second"]),
        final_reply("gemini", false),
        calls(&["third"]),
        final_reply("gemini", false),
    ])
    .await;
    let claude = WireServer::start(vec![final_reply("anthropic", false)]).await;
    let mut b = broker(
        &[
            ("gemini", "gemini", &server.url),
            ("claude", "anthropic", &claude.url),
        ],
        false,
    )
    .await;
    chat(&mut b, "u", 2).await;
    let body = server.requests()[1].json();
    let parts: Vec<Value> = body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .collect();
    let sent: Vec<&Value> = parts.iter().filter_map(|p| p.get("functionCall")).collect();
    let results: Vec<&Value> = parts
        .iter()
        .filter_map(|p| p.get("functionResponse"))
        .collect();
    assert_eq!(sent.len(), 2, "{body}");
    assert!(sent.iter().all(|c| c.get("id").is_none()), "{body}");
    assert_eq!(results.len(), 2, "{body}");
    for (r, tag) in results.iter().zip(["first", "second"]) {
        assert_eq!(r["name"], "w_echo");
        assert!(r["response"].to_string().contains(tag), "{r}");
        assert!(r.get("id").is_none(), "{r}");
    }
    assert_eq!(answered_finish_reasons(&b), ["tool_calls", "stop"]);

    chat(&mut b, "u", 1).await;
    continue_on(&mut b, "claude").await;
    let (uses, results) = anthropic_sent(&claude.requests()[0].json());
    assert_eq!(uses.len(), 3, "{uses:?}");
    assert_paired(&uses, &results);
}

/// Switches the broker to `source` (`hearth llm use`) and asks once more; the answer
/// must be the scripted final one.
async fn continue_on(b: &mut Broker, source: &str) {
    let req = b.admin.with_token(UseSourceRequest {
        name: source.into(),
    });
    b.admin.client().use_source(req).await.unwrap();
    let f = final_of(&b.chat("and now?", "u").await);
    assert_eq!(f.text, "done", "{f:?}");
}

/// A conversation whose calls came from an OpenAI-compatible source with ids `a.1` and
/// `a:1` moves to Anthropic (`hearth llm use`): the two calls keep two different
/// `tool_use` ids and each result answers its own call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_moved_to_anthropic_keeps_its_calls_apart() {
    let first = json!({"id": "c", "object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "tool_calls": [
            openai_call(None, Some("a.1"), "w_echo", &json!({"tag": "first"})),
            openai_call(None, Some("a:1"), "w_echo", &json!({"tag": "second"}))]},
        "finish_reason": "tool_calls"}]});
    let compat = WireServer::start(vec![
        reply("application/json", first.to_string().into_bytes()),
        final_reply("openai", false),
    ])
    .await;
    let claude = WireServer::start(vec![final_reply("anthropic", false)]).await;
    let mut b = broker(
        &[
            ("compat", "openai", &compat.url),
            ("claude", "anthropic", &claude.url),
        ],
        false,
    )
    .await;
    chat(&mut b, "u", 2).await;
    continue_on(&mut b, "claude").await;

    let (uses, results) = anthropic_sent(&claude.requests()[0].json());
    assert_eq!(uses.len(), 2, "{uses:?}");
    assert_paired(&uses, &results);
}

/// Ollama says `done_reason: "stop"` after tool calls, plain and NDJSON (two calls in
/// two lines, no ids): both run, the finish reason is `tool_calls`, and the results go
/// back named by tool in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_stop_with_calls_is_tool_calls_plain_and_ndjson() {
    let call = |tag: &str| json!({"function": {"name": "w_echo", "arguments": {"tag": tag}}});
    for stream in [false, true] {
        let first = if stream {
            reply(
                "application/x-ndjson",
                ndjson(&[
                    json!({"model": "m", "message": {"role": "assistant", "content": "",
                        "tool_calls": [call("first")]}, "done": false}),
                    json!({"model": "m", "message": {"role": "assistant", "content": "",
                        "tool_calls": [call("second")]}, "done": false}),
                    json!({"model": "m", "message": {"role": "assistant", "content": ""},
                        "done": true, "done_reason": "stop", "prompt_eval_count": 20,
                        "eval_count": 9}),
                ]),
            )
        } else {
            reply(
                "application/json",
                json!({"model": "m", "message": {"role": "assistant", "content": "",
                    "tool_calls": [call("first"), call("second")]},
                    "done": true, "done_reason": "stop"})
                .to_string()
                .into_bytes(),
            )
        };
        let server = WireServer::start(vec![first, final_reply("ollama", stream)]).await;
        let mut b = broker(&[("s", "ollama", &server.url)], stream).await;
        let calls = chat(&mut b, "u", 2).await;
        assert_eq!(calls[0].1, json!({"tag": "first"}), "stream={stream}");
        assert_eq!(calls[1].1, json!({"tag": "second"}), "stream={stream}");
        assert_eq!(
            answered_finish_reasons(&b),
            ["tool_calls", "stop"],
            "stream={stream}"
        );
        let body = server.requests()[1].json();
        let tools: Vec<&Value> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .collect();
        assert_eq!(tools.len(), 2, "{body}");
        for (m, tag) in tools.iter().zip(["first", "second"]) {
            assert_eq!(m["tool_name"], "w_echo");
            assert!(m["content"].as_str().unwrap().contains(tag), "{m}");
        }
    }
}
