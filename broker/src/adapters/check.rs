//! `hearth adapters list` and `hearth adapters check NAME`: what the broker would load
//! from the built-ins and `<data_dir>/adapters/`, and a dry run of one adapter's
//! transforms on sample data, each failure with its script line. Each returns a
//! [`Report`]: the text for people and the same as JSON (`--json`).

use std::path::Path;

use serde_json::{json, Value};

use super::{AdapterError, AdapterSet};

/// What `hearth adapters …` prints: text for people and JSON for scripts, and whether
/// everything passed.
#[derive(Debug, Clone)]
pub struct Report {
    /// Lines for people (`✓ step: detail`, `✗ step: error`).
    pub text: String,
    /// The same for scripts.
    pub json: Value,
    /// Whether every step passed (for a listing: every script loaded).
    pub ok: bool,
    /// No adapter of that name (neither built in nor a script).
    pub not_found: bool,
}

/// The steps of a check or replay, as text and JSON as they happen.
#[derive(Debug, Default)]
struct Steps {
    text: String,
    json: Vec<Value>,
    ok: bool,
}

impl Steps {
    fn new() -> Steps {
        Steps {
            ok: true,
            ..Steps::default()
        }
    }

    fn step(&mut self, what: &str, r: Result<String, String>) {
        match r {
            Ok(detail) => {
                self.text.push_str(&format!("✓ {what}: {detail}\n"));
                self.json
                    .push(json!({"step": what, "ok": true, "detail": detail}));
            }
            Err(e) => {
                self.ok = false;
                self.text.push_str(&format!("✗ {what}: {e}\n"));
                self.json
                    .push(json!({"step": what, "ok": false, "error": e}));
            }
        }
    }

    /// A step that did not run, and why.
    fn skipped(&mut self, what: &str, why: &str) {
        self.text.push_str(&format!("- {what}: {why}\n"));
        self.json
            .push(json!({"step": what, "ok": null, "skipped": why}));
    }

    fn report(self, adapter: &str, extra: Option<(&str, Value)>, not_found: bool) -> Report {
        let mut json = json!({"adapter": adapter, "ok": self.ok, "steps": self.json});
        if let Some((key, value)) = extra {
            json[key] = value;
        }
        Report {
            text: self.text,
            json,
            ok: self.ok,
            not_found,
        }
    }
}

/// The adapters of `data_dir` with the limits its `hearth.toml` sets
/// (`[llm] adapter_timeout_ms`, `[adapters] http_allow`), as the broker loads them;
/// defaults when there is no `hearth.toml` or it does not parse (the broker would
/// refuse to start then, and says why).
fn load(data_dir: &Path) -> AdapterSet {
    match crate::llm::config::Config::load(data_dir, &Default::default()) {
        Ok(config) => AdapterSet::load_with(data_dir, &config.adapter_limits),
        Err(_) => AdapterSet::load(data_dir),
    }
}

/// One line per adapter: name, version, endpoint, streaming, file; then the scripts
/// that failed to load with their error. JSON: `{"adapters": [{name, version,
/// streaming, endpoint, file}], "errors": [{name, error}]}`.
pub fn list(data_dir: &Path) -> Report {
    let set = load(data_dir);
    let mut out = format!(
        "{:<12} {:<8} {:<9} {:<40} FILE\n",
        "NAME", "VERSION", "STREAMING", "ENDPOINT"
    );
    let mut adapters = Vec::new();
    for name in set.names() {
        let a = set.get(&name).expect("listed adapters load");
        out.push_str(&format!(
            "{:<12} {:<8} {:<9} {:<40} {}\n",
            a.name(),
            a.version(),
            if a.supports_streaming() { "yes" } else { "no" },
            a.endpoint(),
            a.file()
        ));
        adapters.push(json!({
            "name": a.name(), "version": a.version(), "streaming": a.supports_streaming(),
            "endpoint": a.endpoint(), "file": a.file(),
        }));
    }
    let mut errors = Vec::new();
    for (name, e) in set.errors() {
        out.push_str(&format!("{name:<12} FAILED   {e}\n"));
        errors.push(json!({"name": name, "error": e.to_string()}));
    }
    Report {
        text: out,
        json: json!({"adapters": adapters, "errors": errors}),
        ok: set.errors().is_empty(),
        not_found: false,
    }
}

/// The report of a check or replay that could not load adapter `name`.
fn not_loaded(name: &str, e: &AdapterError) -> Report {
    let mut steps = Steps::new();
    steps.step("load", Err(e.to_string()));
    let not_found = matches!(e, AdapterError::NotFound { .. });
    steps.report(name, None, not_found)
}

/// A unified CompletionRequest exercising history, tool calls and results, tools.
fn sample_request() -> Value {
    json!({
        "model": "sample-model",
        "messages": [
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": "What is (2+3)*4?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "calculator", "arguments": "{\"expression\":\"(2+3)*4\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "(2+3)*4 = 20"},
            {"role": "user", "content": "Thanks!"}
        ],
        "tools": [{"type": "function", "function": {"name": "calculator", "description": "Evaluates arithmetic.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}],
        "tool_choice": "auto",
        "temperature": 0.7,
        "max_tokens": 256,
        "stream": false
    })
}

/// Checks adapter `name`: it loads, `transform_request` turns the sample request
/// into JSON, and the script's own `samples` (optional: `adapter.samples = {response =
/// "<API JSON>", stream = {"<data payload>", …}}`) go through `transform_response` and
/// `transform_stream_chunk`. Returns the report (ok when everything passed).
pub fn check(data_dir: &Path, name: &str) -> Report {
    let set = load(data_dir);
    let adapter = match set.get(name) {
        Ok(a) => a,
        Err(e) => return not_loaded(name, &e),
    };
    let mut steps = Steps::new();
    steps.step(
        "load",
        Ok(format!(
            "{} {} ({})",
            adapter.name(),
            adapter.version(),
            adapter.file()
        )),
    );
    let mut step = |what: &str, r: Result<String, AdapterError>| {
        steps.step(what, r.map_err(|e| e.to_string()))
    };
    let mut request = sample_request();
    step(
        "transform_request",
        adapter
            .transform_request(&request)
            .map(|v| format!("{} bytes of JSON", v.to_string().len())),
    );
    request["stream"] = json!(true);
    if adapter.supports_streaming() {
        step(
            "transform_request (stream)",
            adapter.transform_request(&request).map(|_| "ok".into()),
        );
    }
    let samples = adapter.samples();
    match &samples.response {
        Some(body) => step(
            "transform_response (sample)",
            adapter.transform_response(body).map(|r| {
                format!(
                    "content {:?}, {} tool call(s), finish {:?}",
                    r.content,
                    r.tool_calls.len(),
                    r.finish_reason
                )
            }),
        ),
        None => steps.skipped("transform_response", "no `samples.response` in the script"),
    }
    if samples.stream.is_empty() && adapter.supports_streaming() {
        steps.skipped(
            "transform_stream_chunk",
            "no `samples.stream` in the script",
        );
    }
    for (i, data) in samples.stream.iter().enumerate() {
        steps.step(
            &format!("transform_stream_chunk (sample {i})"),
            adapter
                .transform_stream_chunk(data)
                .map(|c| match c {
                    Some(c) => format!(
                        "{} chars, {} tool-call fragment(s){}",
                        c.content.len(),
                        c.tool_calls.len(),
                        if c.done { ", done" } else { "" }
                    ),
                    None => "skipped".into(),
                })
                .map_err(|e| e.to_string()),
        );
    }
    steps.report(name, None, false)
}

/// A capture of a provider's answer to replay through an adapter.
#[derive(Debug, Clone)]
pub enum Capture {
    /// A non-streamed response body.
    Response(std::path::PathBuf),
    /// A streamed body: SSE or NDJSON bytes as the API sent them.
    Stream(std::path::PathBuf),
}

/// `hearth adapters check NAME --response FILE | --stream FILE`: replays `capture`
/// through adapter `name` the way the broker reads a live answer (for a stream: the
/// same framing, chunk transform and tool-call assembly) and reports the text, each
/// tool call (id, name, arguments), the finish reason and the usage (JSON: the
/// steps and `completion`). The report is ok when the replay succeeded; a failure
/// names the step, as a live request would.
pub fn replay(data_dir: &Path, name: &str, capture: Capture) -> Report {
    let set = load(data_dir);
    let adapter = match set.get(name) {
        Ok(a) => a,
        Err(e) => return not_loaded(name, &e),
    };
    let (path, streamed) = match &capture {
        Capture::Response(p) => (p, false),
        Capture::Stream(p) => (p, true),
    };
    let mut steps = Steps::new();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            steps.step(&path.display().to_string(), Err(e.to_string()));
            return steps.report(name, None, false);
        }
    };
    steps.step(
        "load",
        Ok(format!(
            "{} {} ({})",
            adapter.name(),
            adapter.version(),
            adapter.file()
        )),
    );
    let result = if streamed {
        crate::llm::replay_stream(&adapter, bytes).map_err(|e| e.to_string())
    } else {
        adapter
            .transform_response(&String::from_utf8_lossy(&bytes))
            .map(|mut r| {
                // What a live answer gets: ids for calls without one, `tool_calls`.
                r.settle_tool_calls();
                r
            })
            .map_err(|e| e.to_string())
    };
    let what = if streamed {
        "stream"
    } else {
        "transform_response"
    };
    match result {
        Ok(r) => {
            steps.step(what, Ok(path.display().to_string()));
            steps.text.push_str(&describe(&r));
            let completion = json!({
                "text": r.content, "reasoning": r.reasoning_content,
                "tool_calls": r.tool_calls.iter().map(|c| json!({
                    "id": c.id, "name": c.name, "arguments": c.arguments,
                })).collect::<Vec<_>>(),
                "finish_reason": r.finish_reason,
                "usage": {"prompt": r.token_usage.prompt, "completion": r.token_usage.completion,
                    "total": r.token_usage.total},
            });
            steps.report(name, Some(("completion", completion)), false)
        }
        Err(e) => {
            steps.step(what, Err(e));
            steps.report(name, None, false)
        }
    }
}

/// The parts of a completion a user checks against their provider, one per line.
fn describe(r: &super::CompletionResponse) -> String {
    let mut out = String::new();
    let one_line = |s: &str| s.replace('\n', "\\n");
    out.push_str(&format!("  text: {:?}\n", r.content));
    if !r.reasoning_content.is_empty() {
        out.push_str(&format!("  reasoning: {:?}\n", r.reasoning_content));
    }
    out.push_str(&format!("  tool calls: {}\n", r.tool_calls.len()));
    for (i, call) in r.tool_calls.iter().enumerate() {
        out.push_str(&format!(
            "    [{i}] id {:?} name {:?} arguments {}\n",
            call.id,
            call.name,
            one_line(&call.arguments.to_string())
        ));
    }
    out.push_str(&format!("  finish reason: {:?}\n", r.finish_reason));
    let u = &r.token_usage;
    out.push_str(&format!(
        "  usage: prompt {}, completion {}, total {}\n",
        u.prompt, u.completion, u.total
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(rel: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../adapters/testdata")
            .join(rel)
    }

    #[test]
    fn captures_replay_with_ids_names_arguments_and_finish_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let stream = testdata("openai/openai-chat-stream-parallel-toolcalls-usage.sse");
        let Report {
            text: report,
            ok,
            json,
            ..
        } = replay(dir.path(), "openai", Capture::Stream(stream));
        assert_eq!(
            json["completion"]["tool_calls"].as_array().map(Vec::len),
            Some(2),
            "{json}"
        );
        assert!(ok, "{report}");
        assert!(report.contains("tool calls: 2"), "{report}");
        assert!(report.contains("[1] id \"call_"), "{report}");
        assert!(report.contains("finish reason: \"tool_calls\""), "{report}");
        assert!(report.contains("usage: prompt "), "{report}");

        let body = testdata("anthropic/anthropic-response-text-tooluse.json");
        let Report {
            text: report, ok, ..
        } = replay(dir.path(), "anthropic", Capture::Response(body));
        assert!(ok, "{report}");
        assert!(
            report.contains("tool calls: 1") && report.contains("name \""),
            "{report}"
        );

        // A capture of an error is reported as the provider's error, not passed.
        let error = testdata("anthropic/anthropic-error-529-overloaded.json");
        let Report {
            text: report, ok, ..
        } = replay(dir.path(), "anthropic", Capture::Response(error));
        assert!(!ok && report.contains("overloaded"), "{report}");
        let Report {
            text: report, ok, ..
        } = replay(
            dir.path(),
            "openai",
            Capture::Stream(dir.path().join("nope.sse")),
        );
        assert!(!ok && report.contains("nope.sse"), "{report}");
    }

    #[test]
    fn the_builtin_openai_passes_and_a_broken_script_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let Report {
            text: report, ok, ..
        } = check(dir.path(), "openai");
        assert!(ok, "{report}");
        assert!(
            report.contains("✓ transform_response (sample): content \"\", 1 tool call(s)"),
            "{report}"
        );
        assert!(
            report.contains("✓ transform_stream_chunk (sample 2)"),
            "{report}"
        );
        std::fs::create_dir(dir.path().join("adapters")).unwrap();
        std::fs::write(
            dir.path().join("adapters/mine.lua"),
            "local adapter = {name = 'mine', endpoint = '/x'}\n\
             function adapter.transform_request(raw)\n  error('cannot map this request')\nend\n\
             function adapter.transform_response(raw) return raw end\nreturn adapter\n",
        )
        .unwrap();
        let Report {
            text: report, ok, ..
        } = check(dir.path(), "mine");
        assert!(!ok);
        assert!(
            report.contains("✗ transform_request") && report.contains("mine.lua:3:"),
            "{report}"
        );
        std::fs::write(
            dir.path().join("adapters/bad.lua"),
            "local adapter = {\nreturn adapter\n",
        )
        .unwrap();
        let Report {
            text: report, ok, ..
        } = check(dir.path(), "bad");
        assert!(
            !ok && report.contains("✗ load") && report.contains("bad.lua:2:"),
            "{report}"
        );
        let listing = list(dir.path());
        assert!(
            listing.text.contains("bad          FAILED"),
            "{}",
            listing.text
        );
        assert_eq!(listing.json["errors"][0]["name"], "bad", "{}", listing.json);
        assert!(check(dir.path(), "nope").not_found);
    }
}
