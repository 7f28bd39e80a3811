//! Tool calls through every adapter family and the broker's stream assembly
//! ([`crate::llm::Assembly`], the code a live answer goes through): parallel calls that
//! share an `index` or carry none, calls without ids, ids an API would merge, and the
//! unified finish reason. Inputs: `adapters/testdata/toolcalls/` (see its README) and the
//! families' recorded captures; golden files in `adapters/testdata/toolcalls/golden/`
//! (refresh with `UPDATE_GOLDEN=1`). Ids the broker makes up are random: checked here for
//! shape and uniqueness, shown as `call_hearth_*` in the golden files.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::tests::{golden, read, read_json};
use super::types::SYNTHESIZED_ID_PREFIX;
use super::*;
use crate::llm::Assembly;

/// The OpenAI-compatible families: their stream reader is openai.lua's.
const COMPAT: [&str; 5] = ["openai", "deepseek", "groq", "github", "mistral"];

fn adapter(name: &str) -> Arc<Adapter> {
    AdapterSet::load(Path::new("/nonexistent-hearth-data-dir"))
        .get(name)
        .unwrap_or_else(|e| panic!("built-in {name}: {e}"))
}

/// The payloads of a stream file: `data:` lines of SSE, else every non-empty line
/// (`.jsonl`, `.ndjson`).
fn payloads(text: &str) -> Vec<String> {
    if text.lines().any(|l| l.starts_with("data:")) {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|l| l.trim().to_owned())
            .collect()
    } else {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// A stream put together as the broker does: each payload through the adapter's
/// `transform_stream_chunk` into an [`Assembly`] (`[DONE]` ends it).
fn stream(name: &str, payloads: &[String]) -> CompletionResponse {
    let a = adapter(name);
    let mut acc = Assembly::default();
    for p in payloads {
        if p == "[DONE]" {
            break;
        }
        if let Some(chunk) = a
            .transform_stream_chunk(p)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
        {
            acc.add(chunk, &mut |_| {});
        }
    }
    acc.finish()
}

fn stream_file(name: &str, rel: &str) -> CompletionResponse {
    stream(name, &payloads(&read(rel)))
}

/// A plain response as the broker takes it (`transform_response`, then the broker's rules).
fn response(name: &str, body: &str) -> CompletionResponse {
    let mut r = adapter(name)
        .transform_response(body)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    r.settle_tool_calls();
    r
}

fn is_synthesized(id: &str) -> bool {
    id.strip_prefix(SYNTHESIZED_ID_PREFIX)
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The response as JSON, every call's id checked (non-empty, unique) and a made-up id
/// shown as `call_hearth_*`.
fn view(r: &CompletionResponse) -> Value {
    let mut seen = HashSet::new();
    for c in &r.tool_calls {
        assert!(!c.id.is_empty(), "a call without an id: {r:?}");
        assert!(seen.insert(c.id.clone()), "id {} twice: {r:?}", c.id);
    }
    let mut v = serde_json::to_value(r).unwrap();
    for c in v["tool_calls"].as_array_mut().unwrap() {
        if is_synthesized(c["id"].as_str().unwrap()) {
            c["id"] = json!(format!("{SYNTHESIZED_ID_PREFIX}*"));
        }
    }
    v
}

fn calls(r: &CompletionResponse) -> Vec<(&str, Value)> {
    r.tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.clone()))
        .collect()
}

// ---------------------------------------------------------------- one call per call

/// Ollama's `/v1` stream sends parallel calls all at `index: 0` (ollama#15457): a new id at
/// an index in use starts a new call, in every OpenAI-compatible family.
#[test]
fn parallel_calls_at_one_index_stay_separate() {
    for name in COMPAT {
        let r = stream_file(name, "toolcalls/compat-stream-same-index.sse");
        assert_eq!(
            calls(&r),
            [
                (
                    "file_write",
                    json!({"filePath": "hello.py", "content": "print(\"hello\")"})
                ),
                (
                    "file_write",
                    json!({"filePath": "world.py", "content": "print(\"world\")"})
                ),
            ],
            "{name}"
        );
        let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_8vu2xq3e", "call_k1hz4m0w"], "{name}");
        golden("toolcalls/golden/stream-same-index.json", &view(&r));
    }
}

/// Calls with no `index` at all, one per chunk (Mistral's shape): each is its own call.
#[test]
fn calls_without_an_index_in_separate_chunks_stay_separate() {
    for name in COMPAT {
        let r = stream_file(name, "toolcalls/compat-stream-no-index.jsonl");
        assert_eq!(
            calls(&r),
            [
                ("weather", json!({"location": "San Francisco"})),
                ("weather", json!({"location": "Paris"})),
            ],
            "{name}"
        );
        assert_eq!(
            (r.tool_calls[0].id.as_str(), r.tool_calls[1].id.as_str()),
            ("gSIMJiOkT", "Qb7kLm2Xe")
        );
        assert_eq!(r.finish_reason, "tool_calls");
        golden("toolcalls/golden/stream-no-index.json", &view(&r));
    }
}

/// Neither index nor id (an empty one), one call per chunk, `stop`: two calls with made-up
/// ids, finish reason `tool_calls`.
#[test]
fn calls_without_index_or_id_get_their_own_ids() {
    for name in COMPAT {
        let r = stream_file(name, "toolcalls/compat-stream-empty-ids-stop.sse");
        assert_eq!(
            calls(&r),
            [
                ("get_weather", json!({"city": "Paris"})),
                ("get_weather", json!({"city": "Rome"})),
            ],
            "{name}"
        );
        assert!(r.tool_calls.iter().all(|c| is_synthesized(&c.id)), "{r:?}");
        assert_eq!(r.finish_reason, "tool_calls", "{name}");
        golden("toolcalls/golden/stream-empty-ids-stop.json", &view(&r));
    }
}

/// A server that repeats id and name on every fragment: still one call per call (the
/// OpenAI recorded stream, with ids only on the first fragment, is covered by its own
/// golden test).
#[test]
fn fragments_repeating_id_and_name_continue_their_call() {
    for name in COMPAT {
        let r = stream_file(name, "toolcalls/compat-stream-repeated-fragments.sse");
        assert_eq!(
            calls(&r),
            [
                ("get_weather", json!({"city": "Paris"})),
                ("get_time", json!({"tz": "CET"})),
            ],
            "{name}"
        );
        golden("toolcalls/golden/stream-repeated-fragments.json", &view(&r));
    }
    // The same name at an index whose call is still open continues it; once its
    // arguments are complete, the same name again starts the next call.
    let chunk = |name: Option<&str>, args: &str| {
        let mut call = json!({"function": {"arguments": args}});
        if let Some(n) = name {
            call["function"]["name"] = json!(n);
        }
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}).to_string()
    };
    let r = stream(
        "openai",
        &[
            chunk(Some("f"), "{\"a\":"),
            chunk(Some("f"), "1}"),
            chunk(Some("f"), "{\"a\":2}"),
            chunk(None, ""),
        ],
    );
    assert_eq!(calls(&r), [("f", json!({"a": 1})), ("f", json!({"a": 2}))]);
}

/// The issue's own bytes: calls `a` and `b`, both at index 0, each whole.
#[test]
fn the_reported_index_zero_stream_keeps_call_a() {
    let chunk = |id: &str, name: &str, args: &str| {
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id,
            "type": "function", "function": {"name": name, "arguments": args}}]}}]})
        .to_string()
    };
    for name in COMPAT {
        let r = stream(
            name,
            &[chunk("a", "a", r#"{"a":1}"#), chunk("b", "b", r#"{"b":2}"#)],
        );
        assert_eq!(
            calls(&r),
            [("a", json!({"a": 1})), ("b", json!({"b": 2}))],
            "{name}"
        );
        assert_eq!(
            r.finish_reason, "tool_calls",
            "no finish reason, calls made"
        );
    }
}

/// Families whose calls carry their own stream index (Anthropic content blocks, Gemini's
/// numbering, Ollama's counter) keep parallel calls apart through the same assembly.
#[test]
fn parallel_calls_of_the_other_families() {
    let r = stream_file(
        "anthropic",
        "toolcalls/anthropic-stream-parallel-tooluse.sse",
    );
    assert_eq!(
        calls(&r),
        [
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Rome"})),
        ]
    );
    assert_eq!(r.tool_calls[1].id, "toolu_01B");
    golden("toolcalls/golden/anthropic-stream-parallel.json", &view(&r));

    let r = stream_file(
        "gemini",
        "gemini/gemini-stream-parallel-partialargs-vertex.jsonl",
    );
    assert_eq!(r.tool_calls.len(), 2);
    assert!(r.tool_calls.iter().all(|c| is_synthesized(&c.id)), "{r:?}");
    golden("toolcalls/golden/gemini-stream-parallel.json", &view(&r));

    let r = stream_file("ollama", "toolcalls/ollama-stream-parallel.ndjson");
    assert_eq!(
        calls(&r),
        [
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Rome"})),
        ]
    );
    golden("toolcalls/golden/ollama-stream-parallel.json", &view(&r));
}

// ---------------------------------------------------------------- ids

/// A call without an id gets a made-up one, unique in the response and across responses;
/// an id repeated within a response is replaced. Plain and streamed, every family whose
/// API can leave the id out.
#[test]
fn calls_without_ids_get_unique_ids() {
    let mut all = HashSet::new();
    let mut check = |what: &str, r: &CompletionResponse, calls: usize| {
        assert_eq!(r.tool_calls.len(), calls, "{what}: {r:?}");
        for c in &r.tool_calls {
            assert!(is_synthesized(&c.id), "{what}: {}", c.id);
            assert!(all.insert(c.id.clone()), "{what}: {} seen before", c.id);
        }
    };
    let body = read("toolcalls/compat-response-empty-ids-stop.json");
    for name in COMPAT {
        let r = response(name, &body);
        check(name, &r, 2);
        golden("toolcalls/golden/response-empty-ids-stop.json", &view(&r));
        check(name, &response(name, &body), 2); // the same body again: new ids
        check(
            name,
            &stream_file(name, "toolcalls/compat-stream-empty-ids-stop.sse"),
            2,
        );
    }
    for (name, rel, n) in [
        ("ollama", "ollama/ollama-chat-toolcall-response.json", 1),
        ("gemini", "gemini/gemini-response-functioncall.json", 1),
    ] {
        let r = response(name, &read(rel));
        check(rel, &r, n);
        check(rel, &response(name, &read(rel)), n);
    }
    check(
        "ollama stream",
        &stream_file("ollama", "toolcalls/ollama-stream-parallel.ndjson"),
        2,
    );
    check(
        "gemini stream",
        &stream_file("gemini", "gemini/gemini-stream-functioncall.jsonl"),
        1,
    );

    // Ids the API gave are kept; a second call with the same id gets its own.
    let body = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "call_1", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}}]});
    let r = response("openai", &body.to_string());
    assert_eq!(r.tool_calls[0].id, "call_1");
    assert!(is_synthesized(&r.tool_calls[1].id), "{r:?}");
}

// ---------------------------------------------------------------- finish reason

/// `tool_calls` whenever at least one call was emitted and the turn ended normally, in
/// every family; `length` (a call cut off) and a reply without calls keep their reason.
#[test]
fn finish_reason_is_tool_calls_when_calls_were_made() {
    let mut cases: Vec<(String, CompletionResponse, &str)> = Vec::new();
    let plain = read("toolcalls/compat-response-empty-ids-stop.json");
    for name in COMPAT {
        cases.push((
            format!("{name} plain stop"),
            response(name, &plain),
            "tool_calls",
        ));
        cases.push((
            format!("{name} stream stop"),
            stream_file(name, "toolcalls/compat-stream-empty-ids-stop.sse"),
            "tool_calls",
        ));
        // `stop` on a later chunk than the calls (the adapter sees one chunk at a time).
        let late = [
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1",
                "function": {"name": "f", "arguments": "{}"}}]}}]})
            .to_string(),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string(),
        ];
        cases.push((
            format!("{name} late stop"),
            stream(name, &late),
            "tool_calls",
        ));
        let text = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Hi"}}]});
        cases.push((
            format!("{name} text"),
            response(name, &text.to_string()),
            "stop",
        ));
    }
    cases.push((
        "ollama plain".into(),
        response("ollama", &read("ollama/ollama-chat-toolcall-response.json")),
        "tool_calls",
    ));
    let doc = read("ollama/ollama-chat-stream-tools-doc.txt");
    let lines: Vec<String> = serde_json::Deserializer::from_str(&doc)
        .into_iter::<Value>()
        .map(|v| v.unwrap().to_string())
        .collect();
    cases.push((
        "ollama ndjson (calls, then a done chunk saying stop)".into(),
        stream("ollama", &lines),
        "tool_calls",
    ));
    cases.push((
        "ollama ndjson parallel".into(),
        stream_file("ollama", "toolcalls/ollama-stream-parallel.ndjson"),
        "tool_calls",
    ));
    let ollama_text = json!({"model": "m", "message": {"role": "assistant", "content": "Hi"},
        "done": true, "done_reason": "stop"});
    cases.push((
        "ollama text".into(),
        response("ollama", &ollama_text.to_string()),
        "stop",
    ));
    cases.push((
        "anthropic stream".into(),
        stream_file("anthropic", "anthropic/anthropic-stream-text-tooluse.sse"),
        "tool_calls",
    ));
    cases.push((
        "anthropic plain".into(),
        response(
            "anthropic",
            &read("anthropic/anthropic-response-text-tooluse.json"),
        ),
        "tool_calls",
    ));
    cases.push((
        "anthropic cut by max_tokens".into(),
        stream_file(
            "anthropic",
            "anthropic/anthropic-stream-tooluse-maxtokens-truncated.sse",
        ),
        "length",
    ));
    cases.push((
        "gemini plain".into(),
        response("gemini", &read("gemini/gemini-response-functioncall.json")),
        "tool_calls",
    ));
    cases.push((
        "gemini stream".into(),
        stream_file(
            "gemini",
            "gemini/gemini-stream-parallel-partialargs-vertex.jsonl",
        ),
        "tool_calls",
    ));
    let mut table = serde_json::Map::new();
    for (what, r, want) in &cases {
        assert_eq!(r.finish_reason, *want, "{what}: {r:?}");
        table.insert(what.clone(), json!(r.finish_reason));
    }
    golden(
        "toolcalls/golden/finish-reasons.json",
        &Value::Object(table),
    );
}

// ---------------------------------------------------------------- history ids

/// Expected pairing in `unified-history-odd-ids.json`: result text → (tool, arguments).
fn answered(content: &str) -> (&'static str, Value) {
    match content {
        "sunny" => ("get_weather", json!({"city": "Paris"})),
        "12:00" => ("get_time", json!({"tz": "CET"})),
        "rain" => ("get_weather", json!({"city": "Rome"})),
        "no news" => ("get_news", json!({"topic": "Rome"})),
        "20:00" => ("get_time", json!({"tz": "JST"})),
        "06:00" => ("get_time", json!({"tz": "EST"})),
        other => panic!("unexpected result {other}"),
    }
}

/// One call as a family sends it: (id or "", name, arguments).
type SentCall = (String, String, Value);
/// One result as a family sends it: (id or "", name or "", text).
type SentResult = (String, String, String);

/// The calls and results of a family's request body.
fn sent(family: &str, body: &Value) -> (Vec<SentCall>, Vec<SentResult>) {
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let args = |v: &Value| match v {
        Value::String(t) => serde_json::from_str(t).unwrap(),
        other => other.clone(),
    };
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    match family {
        "anthropic" => {
            for m in list(&body["messages"]) {
                for b in list(&m["content"]) {
                    match b["type"].as_str() {
                        Some("tool_use") => {
                            calls.push((s(&b["id"]), s(&b["name"]), b["input"].clone()))
                        }
                        Some("tool_result") => {
                            results.push((s(&b["tool_use_id"]), String::new(), s(&b["content"])))
                        }
                        _ => {}
                    }
                }
            }
        }
        "gemini" => {
            for c in list(&body["contents"]) {
                for p in list(&c["parts"]) {
                    let (fc, fr) = (&p["functionCall"], &p["functionResponse"]);
                    if fc.is_object() {
                        calls.push((s(&fc["id"]), s(&fc["name"]), fc["args"].clone()));
                    }
                    if fr.is_object() {
                        results.push((s(&fr["id"]), s(&fr["name"]), s(&fr["response"]["result"])));
                    }
                }
            }
        }
        _ => {
            for m in list(&body["messages"]) {
                for c in list(&m["tool_calls"]) {
                    let f = &c["function"];
                    calls.push((s(&c["id"]), s(&f["name"]), args(&f["arguments"])));
                }
                if m["role"] == "tool" {
                    let name = m["tool_name"].as_str().or(m["name"].as_str());
                    results.push((
                        s(&m["tool_call_id"]),
                        name.unwrap_or_default().to_owned(),
                        s(&m["content"]),
                    ));
                }
            }
        }
    }
    (calls, results)
}

/// A history with calls without ids, ids that differ only in characters an API rejects
/// and an id a later turn repeats: in every family's request each call has its own id
/// (where the family sends ids) and each result names the call it answers.
#[test]
fn history_ids_stay_distinct_and_paired_in_every_family() {
    let history = read_json("toolcalls/unified-history-odd-ids.json");
    for family in [
        "openai",
        "deepseek",
        "groq",
        "github",
        "mistral",
        "anthropic",
        "gemini",
        "ollama",
    ] {
        let body = adapter(family)
            .transform_request(&history)
            .unwrap_or_else(|e| panic!("{family}: {e}"));
        let (calls, results) = sent(family, &body);
        assert_eq!(calls.len(), 6, "{family}: {calls:?}");
        assert_eq!(results.len(), 6, "{family}: {results:?}");
        let by_id = matches!(family, "gemini" | "ollama")
            .then_some(())
            .is_none();
        if by_id {
            let ids: HashSet<&str> = calls.iter().map(|c| c.0.as_str()).collect();
            assert_eq!(ids.len(), 6, "{family}: ids not distinct: {calls:?}");
            assert!(!ids.contains(""), "{family}: {calls:?}");
        }
        for (id, name, text) in &results {
            let want = answered(text);
            if by_id {
                let call = calls
                    .iter()
                    .find(|c| &c.0 == id)
                    .unwrap_or_else(|| panic!("{family}: result {text:?} names no call ({id})"));
                assert_eq!(
                    (call.1.as_str(), &call.2),
                    (want.0, &want.1),
                    "{family}: {text}"
                );
            } else {
                assert_eq!(name, want.0, "{family}: result {text:?}");
            }
        }
        match family {
            "mistral" => assert!(
                calls
                    .iter()
                    .all(|c| c.0.len() == 9 && c.0.bytes().all(|b| b.is_ascii_alphanumeric())),
                "{calls:?}"
            ),
            "anthropic" => assert!(
                calls.iter().all(|c| c
                    .0
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')),
                "{calls:?}"
            ),
            // Ids Gemini did not make are sent to it, each once per call.
            "gemini" => {
                let given: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
                assert_eq!(given, ["", "", "a.1", "a:1", "", ""], "{calls:?}");
            }
            _ => {}
        }
        golden(&format!("toolcalls/golden/request-{family}.json"), &body);
    }
}

/// Anthropic's id mapping is one to one: ids that differ only in characters the API
/// rejects, or look like another id's mapping, stay different, and the results follow.
#[test]
fn anthropic_ids_map_one_to_one() {
    let ids = [
        "a.1",
        "a:1",
        "a_1",
        "a-1",
        "a--1",
        "a-2e1",
        "a 1",
        "a\u{e9}1",
        "toolu_hearth_1",
        "",
    ];
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    messages.push(
        json!({"role": "assistant", "content": "", "tool_calls": ids.iter()
        .map(|id| json!({"id": id, "type": "function",
            "function": {"name": "f", "arguments": format!("{{\"id\": {}}}", json!(id))}}))
        .collect::<Vec<_>>()}),
    );
    for id in ids.iter().rev() {
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": format!("for {id}")}));
    }
    let req = json!({"model": "m", "messages": messages});
    let body = adapter("anthropic").transform_request(&req).unwrap();
    let (calls, results) = sent("anthropic", &body);
    let sent_ids: HashSet<&str> = calls.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(sent_ids.len(), ids.len(), "{calls:?}");
    for (id, _, _) in &calls {
        assert!(
            !id.is_empty()
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{id}"
        );
    }
    for (id, _, text) in &results {
        let call = calls.iter().find(|c| &c.0 == id).unwrap();
        assert_eq!(text, &format!("for {}", call.2["id"].as_str().unwrap()));
    }
    golden("toolcalls/golden/anthropic-ids.json", &body["messages"]);
}
