//! The wire as providers send it, through each family's adapter and the broker's stream
//! reader (`llm::replay_stream`, the code a live answer goes through): SSE with LF, CRLF
//! or CR-only line ends, split into reads anywhere, without its last blank line or line
//! end; streams cut in the middle of a tool call; and the APIs' errors — bodies, error
//! events, error lines — as typed API errors. Golden files:
//! `<family>/golden/replay-<capture>.json` and `<family>/golden/errors.json`; refresh with
//! `UPDATE_GOLDEN=1`.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::tests::{golden, read};
use super::*;
use crate::llm::{replay_reads, replay_stream, StreamError};

/// A fresh copy of built-in `name` (adapters that keep stream state start clean).
fn adapter(name: &str) -> Arc<Adapter> {
    AdapterSet::load(Path::new("/nonexistent-hearth-data-dir"))
        .get(name)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A capture as the API sends it, LF line ends: `.sse` as recorded; `.jsonl` (one
/// payload a line) as SSE `data:` events; Ollama's pretty-printed doc as NDJSON lines.
fn capture(rel: &str) -> String {
    let text = read(rel);
    if rel.ends_with(".sse") {
        text
    } else if rel.ends_with(".jsonl") {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("data: {l}\n\n"))
            .collect()
    } else {
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map(|v| format!("{}\n", v.unwrap()))
            .collect()
    }
}

/// The whole response as JSON; ids the broker made up (random) read `call_hearth_*`.
fn response_json(r: &CompletionResponse) -> Value {
    let mut v = serde_json::to_value(r).unwrap();
    for call in v["tool_calls"].as_array_mut().into_iter().flatten() {
        if call["id"]
            .as_str()
            .is_some_and(|id| id.starts_with(super::types::SYNTHESIZED_ID_PREFIX))
        {
            call["id"] = json!("call_hearth_*");
        }
    }
    v
}

/// (adapter, capture) of every family's streamed tool calls.
const STREAMS: &[(&str, &str)] = &[
    (
        "openai",
        "openai/openai-chat-stream-parallel-toolcalls-usage.sse",
    ),
    (
        "github",
        "openai/openai-chat-stream-parallel-toolcalls-usage.sse",
    ),
    (
        "deepseek",
        "deepseek/deepseek-stream-toolcall-reasoning.jsonl",
    ),
    ("groq", "groq/groq-stream-toolcall.jsonl"),
    ("mistral", "mistral/mistral-stream-toolcall.jsonl"),
    ("anthropic", "anthropic/anthropic-stream-text-tooluse.sse"),
    ("anthropic", "anthropic/anthropic-stream-tooluse-padded.sse"),
    (
        "anthropic",
        "anthropic/anthropic-stream-tooluse-noargs.jsonl",
    ),
    ("gemini", "gemini/gemini-stream-functioncall.jsonl"),
    (
        "gemini",
        "gemini/gemini-stream-noargs-functioncall-vertex.jsonl",
    ),
    (
        "gemini",
        "gemini/gemini-stream-parallel-partialargs-vertex.jsonl",
    ),
    ("ollama", "ollama/ollama-chat-stream-tools-doc.txt"),
];

fn stem(rel: &str) -> &str {
    let file = rel.rsplit('/').next().unwrap();
    file.split('.').next().unwrap()
}

/// LF, CRLF and CR-only line ends, with or without the last blank line and line end, in
/// one read or split anywhere: the same answer, the one in the golden file.
#[test]
fn every_family_reads_its_streams_with_any_framing() {
    for &(name, rel) in STREAMS {
        let lf = capture(rel);
        let want = replay_stream(&adapter(name), lf.clone().into_bytes())
            .unwrap_or_else(|e| panic!("{name} {rel}: {e}"));
        assert!(!want.tool_calls.is_empty(), "{name} {rel}: no tool calls");
        golden(
            &format!("{name}/golden/replay-{}.json", stem(rel)),
            &response_json(&want),
        );
        let trimmed = lf.trim_end_matches('\n').to_owned();
        for (ends, body) in [
            ("CRLF", lf.replace('\n', "\r\n")),
            ("CR", lf.replace('\n', "\r")),
            ("LF, no last blank line", format!("{trimmed}\n")),
            ("LF, no last line end", trimmed.clone()),
            ("CR, no last line end", trimmed.replace('\n', "\r")),
        ] {
            let bytes = body.as_bytes();
            let got = replay_stream(&adapter(name), bytes.to_vec())
                .unwrap_or_else(|e| panic!("{name} {rel} {ends}: {e}"));
            assert_eq!(
                response_json(&got),
                response_json(&want),
                "{name} {rel} {ends}"
            );
            // Reads of a few bytes: CR|LF pairs, UTF-8 characters and events split.
            for size in [1, 2, 3, 7, 64] {
                let reads: Vec<&[u8]> = bytes.chunks(size).collect();
                let got = replay_reads(&adapter(name), reads)
                    .unwrap_or_else(|e| panic!("{name} {rel} {ends} reads of {size}: {e}"));
                assert_eq!(
                    response_json(&got),
                    response_json(&want),
                    "{name} {rel} {ends} reads of {size}"
                );
            }
        }
    }
}

/// Gemini's stream (no `[DONE]`) with CR-only line ends whose last event — the one with
/// `finishReason` — has no line end at all: delivered, not dropped.
#[test]
fn gemini_cr_only_last_event_without_its_blank_line_is_delivered() {
    let chunk = |text: &str, finish: Option<&str>| {
        let mut c = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                           "index": 0}], "responseId": "r1"});
        if let Some(f) = finish {
            c["candidates"][0]["finishReason"] = json!(f);
            c["usageMetadata"] =
                json!({"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5});
        }
        c.to_string()
    };
    let body = format!(
        "data: {}\r\rdata: {}",
        chunk("Hello, ", None),
        chunk("world.", Some("STOP"))
    );
    let r = replay_stream(&adapter("gemini"), body.into_bytes()).unwrap();
    assert_eq!(r.content, "Hello, world.");
    assert_eq!(r.finish_reason, "stop");
    assert_eq!(r.token_usage.total, 5);
}

/// The finish of a stream, in each family's words.
const FINISH_MARKERS: &[&str] = &[
    "\"finish_reason\":\"",
    "\"stop_reason\":\"",
    "\"finishReason\"",
    "\"done\":true",
];

/// Cut after each whole event: once a tool call began and before the finish came, the
/// answer is an error naming the call, never a shorter answer; before the call began or
/// after the finish, the answer as far as it went.
#[test]
fn a_stream_cut_in_the_middle_of_a_tool_call_is_an_error() {
    // Vertex's partial arguments are held by the adapter until the call closes: nothing
    // of a call reaches the broker before that, so there is nothing to cut.
    let streams = STREAMS
        .iter()
        .filter(|(_, rel)| !rel.contains("partialargs"));
    let mut cuts = 0;
    for &(name, rel) in streams {
        let full = capture(rel);
        let whole = replay_stream(&adapter(name), full.clone().into_bytes()).unwrap();
        let names: Vec<String> = whole
            .tool_calls
            .iter()
            .map(|c| format!("\"{}\"", c.name))
            .collect();
        let separator = match adapter(name).stream_format() {
            StreamFormat::Sse => "\n\n",
            StreamFormat::Ndjson => "\n",
        };
        let ends: Vec<usize> = full.match_indices(separator).map(|(i, _)| i).collect();
        for &end in &ends[..ends.len() - 1] {
            let prefix = &full[..end + separator.len()];
            let compact = prefix.replace(": ", ":");
            let began = names.iter().any(|n| prefix.contains(n.as_str()));
            let finished = FINISH_MARKERS.iter().any(|m| compact.contains(m));
            let got = replay_stream(&adapter(name), prefix.as_bytes().to_vec());
            if began && !finished {
                cuts += 1;
                match got {
                    Err(StreamError::Cut(m)) => assert!(
                        m.contains("in the middle of tool call") && m.contains("no finish reason"),
                        "{name} {rel}: {m}"
                    ),
                    other => panic!("{name} {rel} cut at {end}: {other:?}"),
                }
            } else {
                assert!(got.is_ok(), "{name} {rel} cut at {end}: {got:?}");
            }
        }
    }
    assert!(cuts >= 8, "only {cuts} cuts in the middle of a call");

    // NDJSON: Ollama's call arrives whole, but the stream ends before `done`.
    let ollama = capture("ollama/ollama-chat-stream-tools-doc.txt");
    let first = ollama.lines().next().unwrap();
    let e = replay_stream(&adapter("ollama"), first.as_bytes().to_vec()).unwrap_err();
    assert!(
        e.to_string()
            .contains("in the middle of tool call get_weather"),
        "{e}"
    );
    // A last line cut short is said to be cut, not a script's JSON error.
    let anthropic = capture("anthropic/anthropic-stream-text-tooluse.sse");
    let at = anthropic.find("input_json_delta").unwrap();
    let e = replay_stream(&adapter("anthropic"), anthropic.as_bytes()[..at].to_vec()).unwrap_err();
    assert!(
        matches!(&e, StreamError::Cut(m) if m.starts_with("the stream ended in the middle of an event")),
        "{e:?}"
    );
    // `[DONE]` ends an answer even without a finish reason.
    let done =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\
                \"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n\
                data: [DONE]\n\n";
    let r = replay_stream(&adapter("openai"), done.as_bytes().to_vec()).unwrap();
    assert_eq!(r.tool_calls.len(), 1);
}

/// An error as the broker sees it: the function and the typed fields.
fn error_json(function: &str, e: &UpstreamError) -> Value {
    json!({
        "function": function,
        "status": e.status,
        "type": e.kind,
        "code": e.code,
        "message": e.message,
        "retry_after_s": e.retry_after_s,
        "request_id": e.request_id,
    })
}

fn typed_error(name: &str, r: Result<impl std::fmt::Debug, AdapterError>) -> Value {
    match r {
        Err(AdapterError::Upstream {
            function, error, ..
        }) => error_json(&function, &error),
        other => panic!("{name}: expected the API's typed error, got {other:?}"),
    }
}

/// Every recorded error body and error event of each family is the API's typed error,
/// for the non-streamed body and inside a stream alike.
#[test]
fn every_family_raises_the_apis_errors_typed() {
    let families: &[(&str, &[&str])] = &[
        (
            "openai",
            &[
                "openai/openai-chat-error-400-invalid-request.json",
                "openai/openai-chat-error-429-insufficient-quota.json",
            ],
        ),
        (
            "deepseek",
            &["deepseek/deepseek-error-reasoning-content-missing.json"],
        ),
        ("mistral", &["mistral/mistral-error-toolcall-id.json"]),
        ("github", &["github/github-error-404-unknown-model.json"]),
        ("groq", &["groq/groq-stream-error-tool-use-failed.sse"]),
        (
            "anthropic",
            &[
                "anthropic/anthropic-error-400-toolresult-without-tooluse.json",
                "anthropic/anthropic-error-429-rate-limit.json",
                "anthropic/anthropic-error-529-overloaded.json",
                "anthropic/anthropic-stream-error-overloaded.sse",
            ],
        ),
        (
            "gemini",
            &["gemini/gemini-error-429-resource-exhausted.json"],
        ),
        ("ollama", &["ollama/ollama-stream-error-midstream.ndjson"]),
    ];
    for &(name, files) in families {
        let a = adapter(name);
        let mut out = serde_json::Map::new();
        for &rel in files {
            let text = read(rel);
            let got = if rel.ends_with(".json") {
                // As a body, and (compact) as a `data:` payload of a stream.
                let compact =
                    serde_json::to_string(&serde_json::from_str::<Value>(&text).unwrap()).unwrap();
                let body = typed_error(rel, a.transform_response(&text));
                let chunk = typed_error(rel, a.transform_stream_chunk(&compact));
                assert_eq!(body["message"], chunk["message"], "{rel}");
                json!({ "body": body, "stream": chunk })
            } else {
                // The whole stream through the broker's reader.
                match replay_stream(&a, text.into_bytes()) {
                    Err(StreamError::Upstream(e)) => error_json("stream", &e),
                    other => panic!("{rel}: {other:?}"),
                }
            };
            out.insert(stem(rel).to_owned(), got);
        }
        golden(&format!("{name}/golden/errors.json"), &Value::Object(out));
    }
}

/// `event: error` is the API's error even when the adapter cannot read its data, and a
/// script's `raise_api_error` checks what it is given.
#[test]
fn error_events_and_raise_api_error_fields() {
    let body = "event: error\ndata: upstream connect error\n\n";
    match replay_stream(&adapter("openai"), body.as_bytes().to_vec()) {
        Err(StreamError::Upstream(e)) => {
            assert_eq!(*e, UpstreamError::message("upstream connect error"))
        }
        other => panic!("{other:?}"),
    }

    let script = |body: &str| {
        Adapter::from_source(
            "t.lua",
            &format!(
                "return {{ name = 't', transform_request = function(r) return r end,
                 transform_response = function(r) {body} end }}"
            ),
            &Limits::default(),
        )
        .unwrap()
    };
    // Typed, through a script's own pcall and re-raise.
    let a = script(
        "local ok, e = pcall(raise_api_error, {status = 503, type = 'unavailable', code = 7,
           message = 'down', retry_after = '1.5', request_id = json.null}) error(e)",
    );
    let e = super::tests::api_error(a.transform_response("{}"));
    assert_eq!(
        (
            e.status,
            e.kind.as_str(),
            e.code.as_str(),
            e.message.as_str(),
            e.retry_after_s
        ),
        (Some(503), "unavailable", "7", "down", Some(2))
    );
    for (call, needle) in [
        ("raise_api_error({messge = 'x'})", "unknown field `messge`"),
        (
            "raise_api_error({status = {}})",
            "field `status`: expected an HTTP status",
        ),
        ("raise_api_error(42)", "expected a table"),
    ] {
        let e = script(call).transform_response("{}").unwrap_err();
        assert!(
            matches!(&e, AdapterError::Script { message, .. } if message.contains(needle)),
            "{call}: {e:?}"
        );
    }
}
