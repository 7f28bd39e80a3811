//! Adapter benchmark: what each built-in Lua adapter (`adapters/*.lua`) costs per request
//! and per streamed chunk. Prints Markdown tables; see BENCHMARKS.md ("Adapters: transform
//! cost per built-in").
//!
//! Every adapter in `hearth_broker::adapters::BUILTINS` is loaded the way the broker loads it
//! (`AdapterSet::load` on an empty data dir) and called directly on one thread:
//!
//! - `transform_request` of a unified request: 20 messages (system, users, assistants
//!   with two tool calls each, tool results, answers), 5 tools with schemas, streaming on,
//!   and one image (`data:` URL in the first user message) for every family whose API takes
//!   images (all but DeepSeek),
//! - `transform_response` of a plain text reply and of a reply with 2 tool calls,
//! - `transform_stream_chunk` of a text delta, of a tool-call arguments chunk, and of every
//!   chunk of a recorded stream in turn,
//!
//! each in that family's wire format, built from the recorded examples in
//! `adapters/testdata/<family>/` (see [`inputs`] for which are recorded and which are
//! derived from a recorded one). A built-in with no samples here is measured on OpenAI's
//! (and says so). Calls are interleaved: every (adapter, operation) pair runs a slice of
//! its calls in each of `HEARTH_BENCH_ROUNDS` rounds, so load that comes and goes on a
//! shared machine spreads over all of them instead of one.
//!
//! Also the Lua JSON bridge on the openai request (probe scripts doing less than an
//! adapter), the part that dominates `transform_request`; one adapter called from 1, 2
//! and 4 threads at once, and while another caller is stuck in a pathological pattern;
//! and the VM pool (openai, gemini): a session per call, calls in one session, a new VM
//! per call from bytecode.
//!
//! Run (release):
//!
//! ```text
//! cargo bench -p hearth-broker --bench adapters
//! ```
//!
//! Knobs (environment):
//! - `HEARTH_BENCH_ITERS` measured calls per adapter and operation (default 5000)
//! - `HEARTH_BENCH_WARMUP` warm-up calls per adapter and operation (default 500)
//! - `HEARTH_BENCH_ROUNDS` rounds the measured calls are spread over (default 5)
//! - `HEARTH_BENCH_IMAGE_KB` size of the image in the request before base64 (default 16)
//! - `HEARTH_BENCH_ONLY` comma-separated adapters to measure (default: every built-in)
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;

use common::{env_num, loadavg, machine, summarize, thread_cpu_us, Summary};

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use hearth_broker::adapters::{Adapter, AdapterSet, Limits, BUILTINS};
use serde_json::{json, Value};

/// What is measured, in table order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Request,
    ResponseText,
    ResponseCalls,
    ChunkText,
    ChunkArgs,
    Stream,
}

const OPS: [Op; 6] = [
    Op::Request,
    Op::ResponseText,
    Op::ResponseCalls,
    Op::ChunkText,
    Op::ChunkArgs,
    Op::Stream,
];

impl Op {
    fn header(self) -> &'static str {
        match self {
            Op::Request => "transform_request",
            Op::ResponseText => "response: text",
            Op::ResponseCalls => "response: 2 tool calls",
            Op::ChunkText => "chunk: text delta",
            Op::ChunkArgs => "chunk: tool-call args",
            Op::Stream => "chunk: recorded stream, each in turn",
        }
    }
}

/// One family's inputs, in its wire format.
struct Inputs {
    request: Value,
    /// Whether the request carries the image.
    image: bool,
    response_text: String,
    response_calls: String,
    chunk_text: String,
    chunk_args: String,
    /// Every payload of a recorded stream (SSE `data:` fields or NDJSON lines).
    stream: Vec<String>,
    /// False for a built-in this bench has no samples for (OpenAI's are used).
    own_samples: bool,
}

const REPLY: &str = "It's 14 °C with light rain in Paris, warming to 18 °C by Wednesday. 5 × 17 = 85. Your trip notes mention the train at 9:12 from Gare de Lyon.";
const DELTA: &str = " weather in";

fn testdata(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../adapters/testdata")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn testdata_json(rel: &str) -> Value {
    serde_json::from_str(&testdata(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The `data:` payloads of an SSE file.
fn sse_data(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.trim().to_owned())
        .collect()
}

/// The non-empty lines of a JSONL/NDJSON file.
fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Concatenated (pretty-printed) JSON objects → one compact line each, as NDJSON.
fn objects(text: &str) -> Vec<String> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .map(|v| v.expect("JSON object").to_string())
        .collect()
}

/// The first chunk of an OpenAI-shaped stream with a tool-call arguments fragment (no id:
/// not the call's first chunk); else the first with a tool call (APIs that send a call
/// whole, in one chunk).
fn openai_args_chunk(stream: &[String]) -> String {
    let calls = |c: &String| parse(c)["choices"][0]["delta"]["tool_calls"][0].clone();
    stream
        .iter()
        .find(|c| {
            let call = calls(c);
            call.get("id").is_none()
                && call["function"]["arguments"]
                    .as_str()
                    .is_some_and(|a| !a.is_empty())
        })
        .or_else(|| stream.iter().find(|c| calls(c).is_object()))
        .expect("a tool-call chunk in the stream")
        .clone()
}

/// An OpenAI-shaped chunk with its delta replaced by a text delta.
fn openai_text_chunk(like: &str) -> String {
    let mut c = parse(like);
    c["choices"][0]["delta"] = json!({ "content": DELTA });
    c["choices"][0]["finish_reason"] = Value::Null;
    c.to_string()
}

/// An OpenAI-shaped response with the message replaced by a text answer.
fn openai_text_response(like: &Value) -> String {
    let mut r = like.clone();
    r["choices"][0]["message"] = json!({ "role": "assistant", "content": REPLY });
    r["choices"][0]["finish_reason"] = json!("stop");
    r.to_string()
}

/// An OpenAI-shaped response with one tool call → two (the second a copy with another id,
/// name and arguments).
fn openai_two_calls(one: &Value, id: &str) -> String {
    let mut r = one.clone();
    let calls = r["choices"][0]["message"]["tool_calls"]
        .as_array_mut()
        .expect("tool_calls");
    assert_eq!(calls.len(), 1);
    let mut second = calls[0].clone();
    second["id"] = json!(id);
    second["function"]["name"] = json!("calculator");
    second["function"]["arguments"] = json!("{\"expression\": \"5*17\"}");
    if second.get("index").is_some() {
        second["index"] = json!(1);
    }
    calls.push(second);
    r.to_string()
}

/// The inputs of `adapter`'s family; the comment of each family says which are recorded
/// (`adapters/testdata/`) and which derived from a recorded one. Responses are compact
/// re-serializations (keys sorted) of the bodies; recorded chunks are verbatim.
fn inputs(adapter: &str, image_kb: usize) -> Inputs {
    let image = image_url(image_kb * 1024);
    let (model, with_image, response_text, response_calls, chunk_text, chunk_args, stream) =
        match adapter {
            // OpenAI; GitHub Models speaks OpenAI's wire format (no recorded success bodies
            // of its own). Recorded: the 2-call response, the stream and its args chunk.
            // Derived: the text reply (same body, message replaced) and the text delta
            // (an args chunk with the delta replaced; the recorded stream has no text).
            "openai" | "github" => {
                let calls = testdata_json("openai/openai-chat-parallel-toolcalls-response.json");
                let stream = sse_data(&testdata(
                    "openai/openai-chat-stream-parallel-toolcalls-usage.sse",
                ));
                let args = openai_args_chunk(&stream);
                (
                    if adapter == "github" {
                        "openai/gpt-4.1"
                    } else {
                        "gpt-4o"
                    },
                    true,
                    openai_text_response(&calls),
                    calls.to_string(),
                    openai_text_chunk(&args),
                    args,
                    stream,
                )
            }
            // Recorded: the text reply (deepseek-reasoner, with its reasoning), the stream
            // (reasoning, then a tool call in fragments) and its args chunk. Derived: the
            // 2-call response (recorded 1-call response + a second call), the text delta.
            // No image: DeepSeek's chat API takes text only.
            "deepseek" => {
                let stream = lines(&testdata(
                    "deepseek/deepseek-stream-toolcall-reasoning.jsonl",
                ));
                let args = openai_args_chunk(&stream);
                (
                    "deepseek-chat",
                    false,
                    testdata_json("deepseek/deepseek-reasoning-response.json").to_string(),
                    openai_two_calls(
                        &testdata_json("deepseek/deepseek-toolcall-reasoning-response.json"),
                        "call_01_Qw3rTy7uIoPaSdFgHjKlZxCv",
                    ),
                    openai_text_chunk(&args),
                    args,
                    stream,
                )
            }
            // Mistral and Groq send a tool call whole, in one chunk (recorded). Derived: the
            // text reply and the 2-call response from the recorded 1-call response, the
            // text delta from the stream's first (role) chunk.
            "mistral" | "groq" => {
                let one = testdata_json(&format!("{adapter}/{adapter}-toolcall-response.json"));
                let stream = lines(&testdata(&format!(
                    "{adapter}/{adapter}-stream-toolcall.jsonl"
                )));
                let args = openai_args_chunk(&stream);
                (
                    if adapter == "mistral" {
                        "mistral-small-latest"
                    } else {
                        "meta-llama/llama-4-scout-17b-16e-instruct"
                    },
                    true,
                    openai_text_response(&one),
                    openai_two_calls(&one, "pQ7rT2xYz"),
                    openai_text_chunk(&stream[0]),
                    args,
                    stream,
                )
            }
            // Recorded: the stream, its text delta and its input_json_delta chunk. Derived
            // from the recorded text + tool_use response: the text reply (text block only,
            // end_turn) and the 2-call response (a second tool_use block).
            "anthropic" => {
                let one = testdata_json("anthropic/anthropic-response-text-tooluse.json");
                let mut text = one.clone();
                text["content"] = json!([{ "type": "text", "text": REPLY }]);
                text["stop_reason"] = json!("end_turn");
                let mut calls = one;
                let blocks = calls["content"].as_array_mut().expect("content");
                let mut second = blocks[1].clone();
                second["id"] = json!("toolu_01A09q90qw90lq917835lq9");
                second["input"] = json!({ "location": "New York, NY", "units": "f" });
                blocks.push(second);
                let stream = sse_data(&testdata("anthropic/anthropic-stream-text-tooluse.sse"));
                let find = |kind: &str| {
                    stream
                        .iter()
                        .find(|c| {
                            let d = &parse(c)["delta"];
                            d["type"] == kind
                                && (d["text"].as_str().is_some_and(|t| t.len() > 1)
                                    || d["partial_json"].as_str().is_some_and(|t| !t.is_empty()))
                        })
                        .expect("delta in the stream")
                        .clone()
                };
                (
                    "claude-sonnet-4-5",
                    true,
                    text.to_string(),
                    calls.to_string(),
                    find("text_delta"),
                    find("input_json_delta"),
                    stream,
                )
            }
            // The Gemini API sends a functionCall whole, in one chunk (recorded, with its
            // thought signature). Derived from the recorded Gemini 3 functionCall response:
            // the text reply and the 2-call response (a second functionCall part); the text
            // delta from the recorded functionCall chunk.
            "gemini" => {
                let one =
                    testdata_json("gemini/gemini-response-functioncall-thoughtsignature.json");
                let mut text = one.clone();
                text["candidates"][0]["content"]["parts"] = json!([{ "text": REPLY }]);
                text["candidates"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("finishMessage");
                let mut calls = one;
                calls["candidates"][0]["content"]["parts"]
                    .as_array_mut()
                    .expect("parts")
                    .push(json!({ "functionCall": { "name": "calculator", "args": { "expression": "5*17" } } }));
                let stream = lines(&testdata("gemini/gemini-stream-functioncall.jsonl"));
                let mut delta = parse(&stream[0]);
                delta["candidates"][0]["content"]["parts"] = json!([{ "text": DELTA }]);
                (
                    "gemini-2.5-flash",
                    true,
                    text.to_string(),
                    calls.to_string(),
                    delta.to_string(),
                    stream[0].clone(),
                    stream,
                )
            }
            // Ollama's /api/chat NDJSON: a tool call comes whole, in one line (the documented
            // stream, recorded pretty-printed, compacted here). Derived from the recorded
            // tool-call response: the text reply and the 2-call response; the text delta
            // from the stream's first line.
            "ollama" => {
                let one = testdata_json("ollama/ollama-chat-toolcall-response.json");
                let mut text = one.clone();
                text["message"] = json!({ "role": "assistant", "content": REPLY });
                let mut calls = one;
                calls["message"]["tool_calls"]
                    .as_array_mut()
                    .expect("tool_calls")
                    .push(json!({ "function": { "name": "calculator", "arguments": { "expression": "5*17" } } }));
                let stream = objects(&testdata("ollama/ollama-chat-stream-tools-doc.txt"));
                let mut delta = parse(&stream[0]);
                delta["message"] = json!({ "role": "assistant", "content": DELTA });
                (
                    "llama3.2-vision",
                    true,
                    text.to_string(),
                    calls.to_string(),
                    delta.to_string(),
                    stream[0].clone(),
                    stream,
                )
            }
            // A built-in this bench has no samples for: OpenAI's (most new adapters are
            // OpenAI-compatible); if they do not fit, the table says "error".
            _ => {
                let mut i = inputs("openai", image_kb);
                i.own_samples = false;
                return i;
            }
        };
    Inputs {
        request: unified_request(model, with_image.then_some(image.as_str())),
        image: with_image,
        response_text,
        response_calls,
        chunk_text,
        chunk_args,
        stream,
        own_samples: true,
    }
}

/// A `data:image/png;base64,` URL of `bytes` bytes of (pseudo-random) image data.
fn image_url(bytes: usize) -> String {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::from("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA");
    let mut x: u32 = 0x2545_f491;
    while out.len() < 22 + bytes.div_ceil(3) * 4 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.push(B64[(x % 64) as usize] as char);
    }
    out
}

/// A unified request: system prompt, 19 more messages (users, assistants with two tool
/// calls, tool results, answers), 5 tools with schemas, streaming on; the first user
/// message carries `image` when given.
fn unified_request(model: &str, image: Option<&str>) -> Value {
    let tool = |name: &str, desc: &str, props: Value, required: Value| {
        json!({"type": "function", "function": {"name": name, "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required}}})
    };
    let tools = vec![
        tool(
            "weather",
            "Current weather and a 3-day forecast for a city.",
            json!({"city": {"type": "string", "description": "City name"}, "units": {"type": "string", "enum": ["c", "f"]}}),
            json!(["city"]),
        ),
        tool(
            "calculator",
            "Evaluates an arithmetic expression.",
            json!({"expression": {"type": "string", "description": "e.g. (2+3)*4"}}),
            json!(["expression"]),
        ),
        tool(
            "search_notes",
            "Full-text search in the user's notes.",
            json!({"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50}}),
            json!(["query"]),
        ),
        tool(
            "send_message",
            "Sends a message to a contact.",
            json!({"to": {"type": "string"}, "text": {"type": "string"}, "urgent": {"type": "boolean"}}),
            json!(["to", "text"]),
        ),
        tool(
            "calendar_add",
            "Adds an event to the calendar.",
            json!({"title": {"type": "string"}, "start": {"type": "string", "format": "date-time"}, "minutes": {"type": "integer"}}),
            json!(["title", "start"]),
        ),
    ];
    let mut messages = vec![
        json!({"role": "system", "content": "You are Hearth, a helpful assistant running on the user's machine. Answer briefly; use the tools when they help. Today is Monday."}),
    ];
    let mut n = 0;
    while messages.len() < 20 {
        n += 1;
        let question = format!("Question {n}: what's the weather in Paris, and what is {n} * 17? Also check my notes about the trip.");
        messages.push(match (n, image) {
            (1, Some(url)) => json!({"role": "user", "content": [
                {"type": "text", "text": format!("{question} And what is in this picture?")},
                {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}
            ]}),
            _ => json!({"role": "user", "content": question}),
        });
        if messages.len() >= 20 {
            break;
        }
        if n % 2 == 1 {
            messages.push(json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": format!("call_{n}a"), "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\",\"units\":\"c\"}"}},
                {"id": format!("call_{n}b"), "type": "function", "function": {"name": "calculator", "arguments": format!("{{\"expression\":\"{n}*17\"}}")}}
            ]}));
            messages.push(json!({"role": "tool", "tool_call_id": format!("call_{n}a"), "content": "Paris: 14 °C, light rain; tomorrow 16 °C, cloudy; then 18 °C, sunny."}));
            messages.push(json!({"role": "tool", "tool_call_id": format!("call_{n}b"), "content": format!("{}", n * 17)}));
        }
        messages.push(json!({"role": "assistant", "content": format!("It's 14 °C with light rain in Paris, warming to 18 °C by Wednesday. {n} × 17 = {}. Your trip notes mention the train at 9:12 from Gare de Lyon.", n * 17)}));
    }
    messages.truncate(20);
    json!({"model": model, "messages": messages, "tools": tools, "tool_choice": "auto", "stream": true, "max_tokens": 1024})
}

/// One adapter under test: its inputs, and per operation the latencies (µs) and the
/// thread CPU time (µs) of the measured calls.
struct Bench {
    name: String,
    adapter: Arc<Adapter>,
    inputs: Inputs,
    /// Why an operation cannot be measured on these inputs (the call's error).
    errors: Vec<(usize, String)>,
    wall: Vec<Vec<f64>>,
    cpu: Vec<f64>,
    next_chunk: usize,
}

impl Bench {
    /// One call of `op`.
    fn call(&mut self, op: Op) -> Result<(), String> {
        let a = &self.adapter;
        let i = &self.inputs;
        let e = |e: hearth_broker::adapters::AdapterError| e.to_string();
        match op {
            Op::Request => {
                black_box(a.transform_request(black_box(&i.request)).map_err(e)?);
            }
            Op::ResponseText => {
                black_box(
                    a.transform_response(black_box(&i.response_text))
                        .map_err(e)?,
                );
            }
            Op::ResponseCalls => {
                black_box(
                    a.transform_response(black_box(&i.response_calls))
                        .map_err(e)?,
                );
            }
            Op::ChunkText => {
                black_box(
                    a.transform_stream_chunk(black_box(&i.chunk_text))
                        .map_err(e)?,
                );
            }
            Op::ChunkArgs => {
                black_box(
                    a.transform_stream_chunk(black_box(&i.chunk_args))
                        .map_err(e)?,
                );
            }
            Op::Stream => {
                let c = &i.stream[self.next_chunk % i.stream.len()];
                self.next_chunk += 1;
                black_box(a.transform_stream_chunk(black_box(c)).map_err(e)?);
            }
        }
        Ok(())
    }

    /// Checks that each input does what its column says (so a sample that an adapter
    /// skips or misreads is not timed as if it were the real thing). Records failures.
    fn check(&mut self, image_marker: &str) {
        let a = self.adapter.clone();
        let i = &self.inputs;
        let mut errors = Vec::new();
        let mut fail = |op: Op, what: String| {
            let at = OPS.iter().position(|o| *o == op).unwrap();
            errors.push((at, what));
        };
        match a.transform_request(&i.request) {
            Ok(out) => {
                if i.image && !out.to_string().contains(image_marker) {
                    fail(Op::Request, "the image is not in the output".into());
                }
            }
            Err(e) => fail(Op::Request, e.to_string()),
        }
        match a.transform_response(&i.response_text) {
            Ok(r) if r.content.is_empty() || !r.tool_calls.is_empty() => fail(
                Op::ResponseText,
                format!("expected text without tool calls, got {r:?}"),
            ),
            Ok(_) => {}
            Err(e) => fail(Op::ResponseText, e.to_string()),
        }
        match a.transform_response(&i.response_calls) {
            Ok(r) if r.tool_calls.len() != 2 => fail(
                Op::ResponseCalls,
                format!("expected 2 tool calls, got {}", r.tool_calls.len()),
            ),
            Ok(_) => {}
            Err(e) => fail(Op::ResponseCalls, e.to_string()),
        }
        match a.transform_stream_chunk(&i.chunk_text) {
            Ok(Some(c)) if !c.content.is_empty() => {}
            Ok(other) => fail(
                Op::ChunkText,
                format!("expected a text delta, got {other:?}"),
            ),
            Err(e) => fail(Op::ChunkText, e.to_string()),
        }
        match a.transform_stream_chunk(&i.chunk_args) {
            Ok(Some(c)) if c.tool_calls.iter().any(|t| !t.arguments.is_empty()) => {}
            Ok(other) => fail(
                Op::ChunkArgs,
                format!("expected tool-call arguments, got {other:?}"),
            ),
            Err(e) => fail(Op::ChunkArgs, e.to_string()),
        }
        for c in &i.stream {
            if let Err(e) = a.transform_stream_chunk(c) {
                fail(Op::Stream, e.to_string());
                break;
            }
        }
        self.errors = errors;
    }

    fn failed(&self, at: usize) -> bool {
        self.errors.iter().any(|(i, _)| *i == at)
    }

    /// `n` calls of `op`, timed one by one (or not at all for warm-up).
    fn run(&mut self, at: usize, n: usize, measure: bool) {
        if self.failed(at) {
            return;
        }
        let op = OPS[at];
        if !measure {
            for _ in 0..n {
                self.call(op).expect("checked");
            }
            return;
        }
        let cpu0 = thread_cpu_us();
        for _ in 0..n {
            let t = Instant::now();
            self.call(op).expect("checked");
            self.wall[at].push(t.elapsed().as_secs_f64() * 1e6);
        }
        self.cpu[at] += thread_cpu_us() - cpu0;
    }
}

/// The Lua JSON bridge on each of `requests`: scripts that only pass it through, decode
/// it, or decode and re-encode it, next to serde alone.
fn bridge(requests: &[(&str, &Value)], iters: usize, warmup: usize) {
    let time = |f: &mut dyn FnMut()| -> (Summary, f64) {
        for _ in 0..warmup {
            f();
        }
        let cpu0 = thread_cpu_us();
        let mut us = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            f();
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        (summarize(us), (thread_cpu_us() - cpu0) / iters as f64)
    };
    println!("## Lua JSON bridge (probe scripts on the `openai` request)\n");
    println!(
        "{iters} calls each after {warmup} warm-up, µs per call; loadavg {}.\n",
        loadavg()
    );
    println!("| what | request | p50 | p99 | mean | CPU/call |");
    println!("|---|---|---:|---:|---:|---:|");
    let probes: Vec<(&str, Adapter)> = [
        (
            "script returns its input (host only: serialize, call, parse the output)",
            "return s",
        ),
        (
            "script: `json.decode(s)`, returns `\"{}\"`",
            "json.decode(s) return \"{}\"",
        ),
        (
            "script: `json.encode(json.decode(s))`",
            "return json.encode(json.decode(s))",
        ),
    ]
    .into_iter()
    .map(|(what, body)| {
        let src = format!(
            "return {{ name = \"probe\", endpoint = \"/x\",\n\
             transform_request = function(s) {body} end,\n\
             transform_response = function(s) return s end }}"
        );
        let probe =
            Adapter::from_source("probe.lua", &src, &Limits::default()).expect("probe adapter");
        (what, probe)
    })
    .collect();
    for (label, request) in requests {
        let text = request.to_string();
        let label = format!("{label} ({} B)", text.len());
        let row = |what: &str, (s, cpu): (Summary, f64)| {
            println!(
                "| {what} | {label} | {:.1} | {:.1} | {:.1} | {cpu:.1} |",
                s.p50, s.p99, s.mean
            );
        };
        for (what, probe) in &probes {
            row(
                what,
                time(&mut || {
                    black_box(probe.transform_request(black_box(request)).unwrap());
                }),
            );
        }
        row(
            "for scale: `serde_json::to_string`",
            time(&mut || {
                black_box(serde_json::to_string(black_box(request)).unwrap());
            }),
        );
        row(
            "for scale: serde `from_str` + `to_string`",
            time(&mut || {
                let v: Value = serde_json::from_str(black_box(&text)).unwrap();
                black_box(serde_json::to_string(&v).unwrap());
            }),
        );
    }
    println!();
}

/// `n` timed calls of `f` after `warmup` untimed ones: latencies (µs) and mean thread CPU
/// time per call (µs).
fn timed(n: usize, warmup: usize, f: &mut dyn FnMut()) -> (Summary, f64) {
    for _ in 0..warmup {
        f();
    }
    let cpu0 = thread_cpu_us();
    let mut us = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (summarize(us), (thread_cpu_us() - cpu0) / n as f64)
}

/// What the wall-time bound costs and what the VM pool buys (BENCHMARKS.md "Adapters",
/// "VM pool"), on the openai and gemini built-ins: a call through a session of its own
/// (what `Adapter::transform_*` does: check out a VM, run the call on its thread, check it
/// back in), calls inside one session (what the LLM client does: one VM per completion),
/// and one new VM per call from the precompiled bytecode (`Limits::idle_vms = 0`). Thread
/// CPU is the caller's; the VM thread's work is not in it.
fn pool(benches: &[Bench], iters: usize, warmup: usize) {
    println!("## VM pool: per-call cost of the wall-time bound\n");
    println!(
        "µs per call, p50 / p99 (caller's thread CPU per call); {iters} calls per cell after {warmup} warm-up (a new VM per call: {} after {}); loadavg {}.\n",
        iters / 10,
        warmup / 10,
        loadavg()
    );
    println!("| adapter | how | transform_request | chunk: recorded stream, each in turn |");
    println!("|---|---|---:|---:|");
    let cell = |(s, cpu): (Summary, f64)| format!("{:.1} / {:.1} ({cpu:.1})", s.p50, s.p99);
    for b in benches
        .iter()
        .filter(|b| b.name == "openai" || b.name == "gemini")
    {
        let a = &b.adapter;
        let (request, stream) = (&b.inputs.request, &b.inputs.stream);
        let mut next = 0;
        let mut chunk = |a: &dyn Fn(&str)| {
            a(&stream[next % stream.len()]);
            next += 1;
        };
        let one_shot = (
            timed(iters, warmup, &mut || {
                black_box(a.transform_request(black_box(request)).unwrap());
            }),
            timed(iters, warmup, &mut || {
                chunk(&|c| {
                    black_box(a.transform_stream_chunk(c).unwrap());
                })
            }),
        );
        let session = a.session();
        let in_session = (
            timed(iters, warmup, &mut || {
                black_box(session.transform_request(black_box(request)).unwrap());
            }),
            timed(iters, warmup, &mut || {
                chunk(&|c| {
                    black_box(session.transform_stream_chunk(c).unwrap());
                })
            }),
        );
        drop(session);
        let source = BUILTINS.iter().find(|(n, _)| *n == b.name).unwrap().1;
        let fresh = Adapter::from_source(
            &format!("{}.lua", b.name),
            source,
            &Limits {
                idle_vms: 0,
                ..Limits::default()
            },
        )
        .expect("built-in loads");
        let per_call = (
            timed(iters / 10, warmup / 10, &mut || {
                black_box(fresh.transform_request(black_box(request)).unwrap());
            }),
            timed(iters / 10, warmup / 10, &mut || {
                chunk(&|c| {
                    black_box(fresh.transform_stream_chunk(c).unwrap());
                })
            }),
        );
        for (how, (r, c)) in [
            (
                "a session per call (checkout, VM thread, checkin)",
                one_shot,
            ),
            (
                "calls in one session (as the LLM client makes them)",
                in_session,
            ),
            ("a new VM per call, from bytecode", per_call),
        ] {
            println!("| {} | {how} | {} | {} |", b.name, cell(r), cell(c));
        }
    }
    println!();
}

/// Calls from several threads at once on one adapter, each thread its own calls; and
/// calls made while another caller is stuck in a pathological pattern. Only API that the
/// single-VM host had too, so the same code measures before and after.
fn concurrency(benches: &[Bench], iters: usize) {
    let Some(b) = benches.iter().find(|b| b.name == "openai") else {
        return;
    };
    println!("## One adapter, several callers at once (openai)\n");
    println!(
        "{iters} calls in all per row, split over the threads; µs per call; loadavg {}.\n",
        loadavg()
    );
    println!("| operation | threads | calls/s | p50 | p99 |");
    println!("|---|---:|---:|---:|---:|");
    let stream = Arc::new(b.inputs.stream.clone());
    let request = Arc::new(b.inputs.request.clone());
    for op in ["transform_request", "chunk: recorded stream"] {
        for threads in [1usize, 2, 4] {
            let per = iters / threads;
            let barrier = Arc::new(std::sync::Barrier::new(threads));
            let started = Instant::now();
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (a, barrier) = (b.adapter.clone(), barrier.clone());
                    let (request, stream) = (request.clone(), stream.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        let mut us = Vec::with_capacity(per);
                        for i in 0..per {
                            let t0 = Instant::now();
                            if op == "transform_request" {
                                black_box(a.transform_request(&*request).unwrap());
                            } else {
                                let c = &stream[(i + t) % stream.len()];
                                black_box(a.transform_stream_chunk(c).unwrap());
                            }
                            us.push(t0.elapsed().as_secs_f64() * 1e6);
                        }
                        us
                    })
                })
                .collect();
            let us: Vec<f64> = workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect();
            let took = started.elapsed().as_secs_f64();
            let n = us.len();
            let s = summarize(us);
            println!(
                "| {op} | {threads} | {:.0} | {:.1} | {:.1} |",
                n as f64 / took,
                s.p50,
                s.p99
            );
        }
    }

    // A script stuck in `string.find` on one caller; another caller's calls meanwhile.
    let slow = Arc::new(
        Adapter::from_source(
            "slow.lua",
            "local a = { name = 'slow', endpoint = '' }\n\
             function a.transform_request(raw)\n\
               if raw:find('stuck', 1, true) then string.find(string.rep('a', 500), '.-.-.-b') end\n\
               return '{}'\n\
             end\n\
             function a.transform_response(raw) return raw end\n\
             return a",
            &Limits::default(),
        )
        .expect("probe loads"),
    );
    let stuck = {
        let slow = slow.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let r = slow.transform_request(&json!({"stuck": true}));
            (t.elapsed(), r.err().map(|e| e.to_string()))
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (s, _) = timed(200, 0, &mut || {
        black_box(slow.transform_request(&json!({})).unwrap());
    });
    let (stuck_took, error) = stuck.join().unwrap();
    println!(
        "\nWhile one call is stuck in `string.find(string.rep(\"a\", 500), \".-.-.-b\")` (it returned after {:.2} s: {}), 200 calls of another caller: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs.\n",
        stuck_took.as_secs_f64(),
        error.as_deref().unwrap_or("ok"),
        s.p50,
        s.p99,
        s.max
    );
}

fn main() {
    let iters = env_num("HEARTH_BENCH_ITERS", 5000) as usize;
    let warmup = env_num("HEARTH_BENCH_WARMUP", 500) as usize;
    let rounds = env_num("HEARTH_BENCH_ROUNDS", 5).max(1) as usize;
    let image_kb = env_num("HEARTH_BENCH_IMAGE_KB", 16) as usize;
    let only: Option<Vec<String>> = std::env::var("HEARTH_BENCH_ONLY")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
    assert!(
        iters >= rounds,
        "HEARTH_BENCH_ITERS must be ≥ HEARTH_BENCH_ROUNDS"
    );

    println!("# Hearth adapter benchmark\n");
    println!("{}", machine());
    println!(
        "iters={iters} warmup={warmup} rounds={rounds} image={image_kb} KiB only={}\n",
        only.as_ref().map_or("all".into(), |o| o.join(","))
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let set = AdapterSet::load(dir.path());
    let marker = &image_url(image_kb * 1024)[40..72];
    let mut benches: Vec<Bench> = Vec::new();
    for (name, _) in BUILTINS {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let adapter = set
            .get(name)
            .unwrap_or_else(|e| panic!("built-in {name}: {e}"));
        let mut b = Bench {
            name: name.to_string(),
            adapter,
            inputs: inputs(name, image_kb),
            errors: Vec::new(),
            wall: vec![Vec::with_capacity(iters); OPS.len()],
            cpu: vec![0.0; OPS.len()],
            next_chunk: 0,
        };
        b.check(marker);
        benches.push(b);
    }
    assert!(!benches.is_empty(), "HEARTH_BENCH_ONLY matched no built-in");

    let load_start = loadavg();
    let started = Instant::now();
    for b in &mut benches {
        for at in 0..OPS.len() {
            b.run(at, warmup, false);
        }
    }
    for round in 0..rounds {
        let n = iters / rounds + usize::from(round < iters % rounds);
        for b in &mut benches {
            for at in 0..OPS.len() {
                b.run(at, n, true);
            }
        }
    }
    let took = started.elapsed();
    let load_end = loadavg();

    println!("## Transform cost per call (µs, p50 / p99)\n");
    println!(
        "{iters} calls per cell after {warmup} warm-up, in {rounds} interleaved rounds, one thread; {:.0} s; loadavg at start {load_start}, at end {load_end}.\n",
        took.as_secs_f64()
    );
    print!("| adapter |");
    for op in OPS {
        print!(" {} |", op.header());
    }
    println!();
    println!("|---|{}", "---:|".repeat(OPS.len()));
    let mut summaries: Vec<Vec<Option<Summary>>> = Vec::new();
    for b in &benches {
        let s: Vec<Option<Summary>> = b
            .wall
            .iter()
            .map(|w| (!w.is_empty()).then(|| summarize(w.clone())))
            .collect();
        let label = if b.inputs.own_samples {
            b.name.clone()
        } else {
            format!("{} (OpenAI's samples)", b.name)
        };
        print!("| {label} |");
        for (at, s) in s.iter().enumerate() {
            match s {
                Some(s) => print!(" {:.1} / {:.1} |", s.p50, s.p99),
                None if b.failed(at) => print!(" error |"),
                None => print!(" – |"),
            }
        }
        println!();
        summaries.push(s);
    }

    println!("\nMean wall time and mean thread CPU time per call (µs, mean / CPU): where the two differ, the thread was waiting for a core.\n");
    print!("| adapter |");
    for op in OPS {
        print!(" {} |", op.header());
    }
    println!();
    println!("|---|{}", "---:|".repeat(OPS.len()));
    for (b, s) in benches.iter().zip(&summaries) {
        print!("| {} |", b.name);
        for (at, s) in s.iter().enumerate() {
            match s {
                Some(s) => print!(" {:.1} / {:.1} |", s.mean, b.cpu[at] / s.n as f64),
                None => print!(" – |"),
            }
        }
        println!();
    }

    println!("\nInput sizes (bytes; the request as the unified JSON the adapter gets, and what it sends):\n");
    println!("| adapter | request in → out | image | response: text | response: 2 tool calls | chunk: text | chunk: args | recorded stream |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for b in &benches {
        let i = &b.inputs;
        let out = b
            .adapter
            .transform_request(&i.request)
            .map_or("error".into(), |o| o.to_string().len().to_string());
        println!(
            "| {} | {} → {out} | {} | {} | {} | {} | {} | {} chunks, {}–{} |",
            b.name,
            i.request.to_string().len(),
            if i.image { "yes" } else { "no" },
            i.response_text.len(),
            i.response_calls.len(),
            i.chunk_text.len(),
            i.chunk_args.len(),
            i.stream.len(),
            i.stream.iter().map(String::len).min().unwrap_or(0),
            i.stream.iter().map(String::len).max().unwrap_or(0),
        );
    }
    let mut failed = false;
    for b in &benches {
        for (at, why) in &b.errors {
            failed = true;
            println!("\n{}: {}: not measured: {why}", b.name, OPS[*at].header());
        }
    }
    println!();

    if let Some(openai) = benches.iter().find(|b| b.name == "openai") {
        let plain = unified_request("gpt-4o", None);
        bridge(
            &[
                ("with the image", &openai.inputs.request),
                ("without the image", &plain),
            ],
            iters,
            warmup,
        );
    }
    concurrency(&benches, iters);
    pool(&benches, iters, warmup);
    println!("loadavg at the end: {}", loadavg());
    if failed {
        std::process::exit(1);
    }
}
