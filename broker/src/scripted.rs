//! A scripted LLM server: a real HTTP server on loopback that speaks the OpenAI
//! chat-completions wire format (plain JSON and SSE streaming) and answers from a
//! script, so tests and the README demo run offline through the real HTTP client,
//! adapter and tool-loop path.
//!
//! - CLI: `hearth dev llm-server --script FILE [--listen 127.0.0.1:0]` prints
//!   `listening on http://127.0.0.1:PORT/v1` once bound and serves until SIGINT/SIGTERM.
//! - Tests: [`ScriptedLlm::start`] binds `127.0.0.1:0` in a task and stops on drop;
//!   [`ScriptedLlm::requests`] returns every request body received. [`serve`] runs
//!   the server on a listener of your own until a shutdown future completes.
//!
//! # Routes
//! - `POST /v1/chat/completions` and `POST /chat/completions`: answer from the script.
//! - `GET /requests`: every request body received so far, as a JSON array (bodies
//!   that are not JSON are recorded as JSON strings).
//!
//! # Script format
//! A JSON object (`"_comment"` keys are allowed and ignored; other unknown keys are
//! errors, to catch typos):
//!
//! ```json
//! {
//!   "steps": [
//!     { "after_tool": false,
//!       "tool_calls": [ { "name": "calculator", "arguments": { "expression": "(2+3)*4" } },
//!                       { "name": "weather", "arguments": { "city": "Paris" } } ] },
//!     { "after_tool": true, "content": "The tools said:\n{tool_results}", "chunk_chars": 6 }
//!   ],
//!   "default": { "content": "I only know two tricks." }
//! }
//! ```
//!
//! For each request the server picks the first step whose `match` (if set) is a
//! substring of the last user message and whose `after_tool` (if set) agrees with
//! whether the last message has role `tool`; else `default`; else it answers 400 with
//! an OpenAI error body (`code: "no_step_matched"`). Steps are not consumed: the same
//! conversation state always gets the same answer. Fields of a step:
//!
//! | field | meaning |
//! | --- | --- |
//! | `match` | substring of the last user message (optional) |
//! | `after_tool` | only when the last message is (`true`) / is not (`false`) a tool result |
//! | `match_system` | only when some system message contains this text (an interrupt, a hook's note) |
//! | `content` | answer text; `{tool_results}` = contents of the tool messages since the last assistant message joined with `\n`, `{user}` = the last user message |
//! | `reasoning_content` | reasoning text (DeepSeek style `reasoning_content`), same placeholders |
//! | `tool_calls` | `[{"name": …, "arguments": {…}}]`; ids are `call_<n>`, unique per server; `arguments` is serialized to a JSON string, or sent verbatim when it is a string (for malformed-arguments tests) |
//! | `finish_reason` | overrides `"tool_calls"` (when there are tool calls) / `"stop"` |
//! | `chunk_chars` | characters per streamed content chunk (default 8; 0 = one chunk) |
//! | `chunk_delay_ms` | pause between streamed content / reasoning chunks |
//! | `delay_ms` | pause before answering at all (for timeout tests) |
//! | `status` | answer with this HTTP status instead of a completion (default 500 when only `error_body` is set) |
//! | `error_body` | the body of that answer: JSON, or a string sent verbatim (default: an OpenAI error object) |
//! | `usage` | `{"prompt_tokens": n, "completion_tokens": n}`; missing numbers are estimated (bytes / 4) |
//!
//! Non-streamed answers are `chat.completion` objects; with `"stream": true` the answer
//! is `text/event-stream` with `data: {chat.completion.chunk}` events: a role delta,
//! reasoning and content chunks, each tool call as deltas by index (the first with id,
//! name and empty arguments, then the arguments text in up to three fragments), a
//! final chunk with `finish_reason`, a usage-only chunk (`"choices": []`) when
//! `stream_options.include_usage` is true, then `data: [DONE]` — the shapes of the
//! real API (see `shared/wire/openai-chat-stream-parallel-toolcalls-usage.sse`).
//! A client that disconnects mid-stream just ends that stream.
//!
//! `examples/llm-script.json` is the script of the README demo.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// Largest request body accepted (long conversations with big tool results).
const MAX_BODY_BYTES: usize = 64 << 20;
/// Default characters per streamed content chunk.
const DEFAULT_CHUNK_CHARS: usize = 8;
/// Fragments a streamed tool call's arguments text is split into (at most).
const ARGUMENT_FRAGMENTS: usize = 3;

/// A script: the answers of a [`ScriptedLlm`] (format in the [module docs](self)).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Candidate answers, tried in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// The answer when no step matches (none: 400 `no_step_matched`).
    #[serde(default)]
    pub default: Option<Step>,
    /// Free text for the reader of the script file; ignored.
    #[serde(default, rename = "_comment")]
    pub comment: Option<Value>,
}

/// One scripted answer and when it applies.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Applies only when the last user message contains this text.
    #[serde(default, rename = "match")]
    pub matches: Option<String>,
    /// Applies only when the last message is (`true`) / is not (`false`) a tool result.
    #[serde(default)]
    pub after_tool: Option<bool>,
    /// Applies only when some system message contains this text (e.g. an interrupt).
    #[serde(default)]
    pub match_system: Option<String>,
    /// Answer text (`{tool_results}` and `{user}` are substituted).
    #[serde(default)]
    pub content: Option<String>,
    /// Reasoning text (same substitutions).
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// Tool calls of the answer, in order.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedToolCall>,
    /// Overrides the finish reason (`tool_calls` / `stop`).
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Characters per streamed content chunk (default 8; 0 = one chunk).
    #[serde(default)]
    pub chunk_chars: Option<usize>,
    /// Milliseconds between streamed chunks.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    /// Milliseconds to wait before answering.
    #[serde(default)]
    pub delay_ms: u64,
    /// Answer with this HTTP status and [`Step::error_body`] instead of a completion.
    #[serde(default)]
    pub status: Option<u16>,
    /// Body of the error answer: JSON, or a string sent verbatim.
    #[serde(default)]
    pub error_body: Option<Value>,
    /// Token counts to report; missing ones are estimated.
    #[serde(default)]
    pub usage: Option<ScriptedUsage>,
    /// Free text for the reader of the script file; ignored.
    #[serde(default, rename = "_comment")]
    pub comment: Option<Value>,
}

/// A tool call in a scripted answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    /// Tool (function) name.
    pub name: String,
    /// Arguments: serialized to a JSON string, or sent verbatim when a string.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    json!({})
}

/// Token counts reported in `usage`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedUsage {
    /// Prompt tokens (estimated when missing).
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens (estimated when missing).
    #[serde(default)]
    pub completion_tokens: Option<u64>,
}

/// A script that could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The script file could not be read.
    #[error("reading LLM script {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The script is not JSON of the script format.
    #[error("LLM script {origin}")]
    Parse {
        /// The file, or `<inline>`.
        origin: String,
        /// Why.
        source: serde_json::Error,
    },
    /// A step has an invalid value.
    #[error("LLM script {origin}: {step}: {message}")]
    Invalid {
        /// The file, or `<inline>`.
        origin: String,
        /// `steps[i]` or `default`.
        step: String,
        /// What is wrong.
        message: String,
    },
}

impl Script {
    /// Reads and checks a script file.
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_owned(),
            source,
        })?;
        Script::parse(&text, &path.display().to_string())
    }

    /// Parses and checks a script from JSON text.
    pub fn from_json(text: &str) -> Result<Script, ScriptError> {
        Script::parse(text, "<inline>")
    }

    /// Parses and checks a script from a JSON value (handy with `json!` in tests).
    pub fn from_value(value: Value) -> Result<Script, ScriptError> {
        let script = serde_json::from_value(value).map_err(|source| ScriptError::Parse {
            origin: "<inline>".into(),
            source,
        })?;
        Script::check(script, "<inline>")
    }

    fn parse(text: &str, origin: &str) -> Result<Script, ScriptError> {
        let script = serde_json::from_str(text).map_err(|source| ScriptError::Parse {
            origin: origin.into(),
            source,
        })?;
        Script::check(script, origin)
    }

    fn check(script: Script, origin: &str) -> Result<Script, ScriptError> {
        let named = script
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("steps[{i}]"), s))
            .chain(script.default.iter().map(|s| ("default".to_string(), s)));
        for (step, s) in named {
            if let Some(status) = s.status {
                if !(100..=599).contains(&status) {
                    return Err(ScriptError::Invalid {
                        origin: origin.into(),
                        step,
                        message: format!("`status`: {status} is not an HTTP status (100-599)"),
                    });
                }
            }
        }
        Ok(script)
    }

    /// The step answering a conversation (see the [module docs](self)).
    fn pick(&self, conv: &Conversation) -> Option<&Step> {
        self.steps
            .iter()
            .find(|s| {
                s.matches
                    .as_deref()
                    .is_none_or(|m| conv.last_user.contains(m))
                    && s.after_tool.is_none_or(|t| t == conv.last_is_tool)
                    && s.match_system
                        .as_deref()
                        .is_none_or(|m| conv.system.iter().any(|t| t.contains(m)))
            })
            .or(self.default.as_ref())
    }
}

/// What the script looks at in a request.
#[derive(Debug, Default)]
struct Conversation {
    last_user: String,
    last_is_tool: bool,
    tool_results: String,
    /// Texts of the system messages.
    system: Vec<String>,
}

impl Conversation {
    fn of(request: &Value) -> Conversation {
        let empty = Vec::new();
        let messages = request["messages"].as_array().unwrap_or(&empty);
        let role = |m: &Value| m["role"].as_str().unwrap_or_default().to_owned();
        let last_user = messages
            .iter()
            .rev()
            .find(|m| role(m) == "user")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default();
        let since_assistant = messages
            .iter()
            .rposition(|m| role(m) == "assistant")
            .map_or(0, |i| i + 1);
        let tool_results = messages[since_assistant..]
            .iter()
            .filter(|m| role(m) == "tool")
            .map(|m| text_of(&m["content"]))
            .collect::<Vec<_>>()
            .join("\n");
        Conversation {
            last_user,
            last_is_tool: messages.last().is_some_and(|m| role(m) == "tool"),
            tool_results,
            system: messages
                .iter()
                .filter(|m| role(m) == "system")
                .map(|m| text_of(&m["content"]))
                .collect(),
        }
    }

    /// `template` with `{tool_results}` and `{user}` substituted (one pass: the
    /// substituted text is not searched again).
    fn fill(&self, template: &str) -> String {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            rest = &rest[i..];
            if let Some(r) = rest.strip_prefix("{tool_results}") {
                out.push_str(&self.tool_results);
                rest = r;
            } else if let Some(r) = rest.strip_prefix("{user}") {
                out.push_str(&self.last_user);
                rest = r;
            } else {
                out.push('{');
                rest = &rest[1..];
            }
        }
        out.push_str(rest);
        out
    }
}

/// The text of a message `content`: a string, or the `text` of its parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().or(p.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// State shared by the handlers of one server.
#[derive(Debug)]
struct Shared {
    script: Script,
    requests: Mutex<Vec<Value>>,
    next_call: AtomicU64,
    next_completion: AtomicU64,
}

impl Shared {
    fn new(script: Script) -> Shared {
        Shared {
            script,
            requests: Mutex::new(Vec::new()),
            next_call: AtomicU64::new(1),
            next_completion: AtomicU64::new(1),
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Serves `script` on `listener` until `shutdown` completes (then lets answers in
/// progress finish).
pub async fn serve(
    script: Script,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_shared(Arc::new(Shared::new(script)), listener, shutdown).await
}

async fn serve_shared(
    shared: Arc<Shared>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // TCP_NODELAY: streamed events must not wait for the client's delayed ACK
    // (measured: ~40 ms per streamed answer without it).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown)
        .await
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/requests", get(list_requests))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(shared)
}

/// A scripted LLM server on `127.0.0.1:<free port>`, running in a task; stops when
/// dropped.
#[derive(Debug)]
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
}

impl ScriptedLlm {
    /// Binds `127.0.0.1:0` and serves `script` in a task. Call it inside a Tokio
    /// runtime.
    ///
    /// # Panics
    /// If no loopback port can be bound, or outside a Tokio runtime (test helper).
    pub fn start(script: Script) -> ScriptedLlm {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(TcpListener::from_std)
            .expect("scripted LLM: binding 127.0.0.1:0");
        let addr = listener.local_addr().expect("scripted LLM: local address");
        let shared = Arc::new(Shared::new(script));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = serve_shared(shared.clone(), listener, async move {
            let _ = stopped.await;
        });
        tokio::spawn(async move {
            if let Err(e) = task.await {
                tracing::warn!(%addr, "scripted LLM server: {e}");
            }
        });
        ScriptedLlm {
            addr,
            shared,
            stop: Some(stop),
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI-style base URL, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn list_requests(State(shared): State<Arc<Shared>>) -> Response {
    json_response(StatusCode::OK, &Value::Array(shared.requests()))
}

async fn not_found() -> Response {
    openai_error(
        StatusCode::NOT_FOUND,
        "hearth scripted LLM: unknown route (POST /v1/chat/completions, GET /requests)",
        "invalid_request_error",
        "not_found",
    )
}

async fn chat_completions(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    shared
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(request.clone());
    if !request.is_object() {
        return openai_error(
            StatusCode::BAD_REQUEST,
            "hearth scripted LLM: the request body is not a JSON object",
            "invalid_request_error",
            "invalid_json",
        );
    }
    let conv = Conversation::of(&request);
    let Some(step) = shared.script.pick(&conv) else {
        return openai_error(
            StatusCode::BAD_REQUEST,
            &format!(
                "hearth scripted LLM: no step matched (last user message {:?}, last message {}a tool result)",
                conv.last_user,
                if conv.last_is_tool { "" } else { "not " }
            ),
            "invalid_request_error",
            "no_step_matched",
        );
    };
    tracing::debug!(last_user = %conv.last_user, "scripted LLM request");
    if step.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(step.delay_ms)).await;
    }
    if step.status.is_some() || step.error_body.is_some() {
        return scripted_error(step);
    }
    let reply = Reply::new(&shared, step, &conv, &request);
    if request["stream"].as_bool() == Some(true) {
        let include_usage = request["stream_options"]["include_usage"].as_bool() == Some(true);
        stream_response(reply.events(step, include_usage))
    } else {
        json_response(StatusCode::OK, &reply.completion())
    }
}

/// One answer, ready to be sent as a completion or as chunks.
#[derive(Debug)]
struct Reply {
    id: String,
    created: u64,
    model: String,
    content: Option<String>,
    reasoning: Option<String>,
    /// (id, name, arguments text)
    tool_calls: Vec<(String, String, String)>,
    finish_reason: String,
    usage: Value,
}

impl Reply {
    fn new(shared: &Shared, step: &Step, conv: &Conversation, request: &Value) -> Reply {
        let content = step.content.as_deref().map(|t| conv.fill(t));
        let reasoning = step.reasoning_content.as_deref().map(|t| conv.fill(t));
        let tool_calls: Vec<_> = step
            .tool_calls
            .iter()
            .map(|c| {
                let n = shared.next_call.fetch_add(1, Ordering::Relaxed);
                let arguments = match &c.arguments {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (format!("call_{n}"), c.name.clone(), arguments)
            })
            .collect();
        let natural = if tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let finish_reason = step.finish_reason.as_deref().unwrap_or(natural).to_owned();
        let estimate = |bytes: usize| (bytes as u64 / 4).max(1);
        let generated = content.as_deref().map_or(0, str::len)
            + reasoning.as_deref().map_or(0, str::len)
            + tool_calls
                .iter()
                .map(|(_, n, a)| n.len() + a.len())
                .sum::<usize>();
        let usage = step.usage.unwrap_or_default();
        let prompt = usage
            .prompt_tokens
            .unwrap_or_else(|| estimate(request["messages"].to_string().len()));
        let completion = usage
            .completion_tokens
            .unwrap_or_else(|| estimate(generated));
        let n = shared.next_completion.fetch_add(1, Ordering::Relaxed);
        Reply {
            id: format!("chatcmpl-scripted-{n}"),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            model: request["model"].as_str().unwrap_or("scripted").to_owned(),
            content,
            reasoning,
            tool_calls,
            finish_reason,
            usage: json!({
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }),
        }
    }

    /// The non-streamed `chat.completion` object.
    fn completion(&self) -> Value {
        let mut message = json!({
            "role": "assistant",
            "content": self.content,
            "refusal": null,
        });
        if let Some(r) = &self.reasoning {
            message["reasoning_content"] = json!(r);
        }
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|(id, name, arguments)| {
                    json!({
                        "id": id,
                        "type": "function",
                        "function": { "name": name, "arguments": arguments },
                    })
                })
                .collect();
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.finish_reason,
            }],
            "usage": self.usage,
        })
    }

    /// A `chat.completion.chunk` with one choice.
    fn chunk(&self, delta: Value, finish_reason: Option<&str>, include_usage: bool) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        });
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The SSE `data:` payloads of the streamed answer, each with the pause before it.
    fn events(&self, step: &Step, include_usage: bool) -> Vec<(Duration, String)> {
        let pause = Duration::from_millis(step.chunk_delay_ms);
        let size = step.chunk_chars.unwrap_or(DEFAULT_CHUNK_CHARS);
        let mut events = Vec::new();
        let mut push = |pause: Duration, v: Value| events.push((pause, v.to_string()));

        let mut first = json!({
            "role": "assistant",
            "content": if self.content.is_some() { json!("") } else { Value::Null },
        });
        if self.reasoning.is_some() {
            first["reasoning_content"] = json!("");
        }
        push(Duration::ZERO, self.chunk(first, None, include_usage));
        let mut next_pause = Duration::ZERO;
        for piece in split_chars(self.reasoning.as_deref().unwrap_or_default(), size) {
            let delta = json!({ "content": null, "reasoning_content": piece });
            push(next_pause, self.chunk(delta, None, include_usage));
            next_pause = pause;
        }
        for piece in split_chars(self.content.as_deref().unwrap_or_default(), size) {
            let delta = json!({ "content": piece });
            push(next_pause, self.chunk(delta, None, include_usage));
            next_pause = pause;
        }
        for (index, (id, name, arguments)) in self.tool_calls.iter().enumerate() {
            let open = json!({ "tool_calls": [{
                "index": index,
                "id": id,
                "type": "function",
                "function": { "name": name, "arguments": "" },
            }]});
            push(next_pause, self.chunk(open, None, include_usage));
            let per = arguments
                .chars()
                .count()
                .div_ceil(ARGUMENT_FRAGMENTS)
                .max(1);
            for fragment in split_chars(arguments, per) {
                let delta = json!({ "tool_calls": [{
                    "index": index,
                    "function": { "arguments": fragment },
                }]});
                push(Duration::ZERO, self.chunk(delta, None, include_usage));
            }
            next_pause = pause;
        }
        push(
            Duration::ZERO,
            self.chunk(json!({}), Some(&self.finish_reason), include_usage),
        );
        if include_usage {
            push(
                Duration::ZERO,
                json!({
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": self.usage,
                }),
            );
        }
        events.push((Duration::ZERO, "[DONE]".to_string()));
        events
    }
}

/// `text` in pieces of `size` characters (`size` 0: one piece; empty text: none).
fn split_chars(text: &str, size: usize) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    if size == 0 {
        return vec![text.to_owned()];
    }
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Sends `events` as SSE, pausing before each as scripted; a client that goes away
/// ends the sending task.
fn stream_response(events: Vec<(Duration, String)>) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        for (pause, data) in events {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            if tx
                .send(Ok(Bytes::from(format!("data: {data}\n\n"))))
                .await
                .is_err()
            {
                tracing::debug!("scripted LLM: client left mid-stream");
                return;
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// The scripted HTTP error answer of `step`.
fn scripted_error(step: &Step) -> Response {
    let status = step
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match &step.error_body {
        Some(Value::String(text)) => Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Body::from(text.clone()))
            .unwrap_or_else(|_| Response::new(Body::empty())),
        Some(body) => json_response(status, body),
        None => openai_error(
            status,
            &format!(
                "hearth scripted LLM: scripted error (HTTP {})",
                status.as_u16()
            ),
            "server_error",
            "scripted_error",
        ),
    }
}

fn openai_error(status: StatusCode, message: &str, kind: &str, code: &str) -> Response {
    json_response(
        status,
        &json!({ "error": {
            "message": message,
            "type": kind,
            "param": null,
            "code": code,
        }}),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// `hearth dev …`
#[derive(Debug, clap::Subcommand)]
pub enum DevCommand {
    /// Serve an OpenAI-compatible chat-completions endpoint that answers from a
    /// script (offline tests and demos); prints `listening on http://ADDR/v1`.
    LlmServer {
        /// Script file (JSON; format in `examples/llm-script.json`).
        #[arg(long, value_name = "FILE")]
        script: PathBuf,
        /// Address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
        listen: SocketAddr,
    },
}

/// Runs a `hearth dev` command (the CLI's entry point into this module).
pub fn dev_command(command: DevCommand) -> anyhow::Result<ExitCode> {
    match command {
        DevCommand::LlmServer { script, listen } => {
            let script = Script::load(&script)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(run_llm_server(script, listen))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn run_llm_server(script: Script, listen: SocketAddr) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    use tokio::signal::unix::{signal, SignalKind};

    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{addr}/v1")?;
        out.flush()?;
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let mut server = tokio::spawn(serve(script, listener, async move {
        let _ = stopped.await;
    }));
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        done = &mut server => return Ok(done??),
    }
    let _ = stop.send(());
    // Answers in progress get a moment; a scripted `delay_ms` does not hold us up.
    if let Ok(done) = tokio::time::timeout(Duration::from_secs(1), server).await {
        done??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> Script {
        Script::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llm-script.json"))
            .expect("examples/llm-script.json")
    }

    fn user(text: &str) -> Value {
        json!({ "role": "user", "content": text })
    }

    async fn post(llm: &ScriptedLlm, body: Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/chat/completions", llm.base_url()))
            .json(&body)
            .send()
            .await
            .expect("POST")
    }

    /// The `data:` payloads of an SSE body.
    fn sse_data(body: &str) -> Vec<String> {
        body.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| e.strip_prefix("data: ").expect("data: event").to_owned())
            .collect()
    }

    /// The conversation after the demo's first turn: both tool results in.
    fn after_tools() -> Value {
        json!([
            user("What is (2+3)*4, and the weather in Paris?"),
            { "role": "assistant", "content": null, "tool_calls": [
                { "id": "call_1", "type": "function",
                  "function": { "name": "calculator", "arguments": "{\"expression\":\"(2+3)*4\"}" } },
                { "id": "call_2", "type": "function",
                  "function": { "name": "weather", "arguments": "{\"city\":\"Paris\"}" } } ] },
            { "role": "tool", "tool_call_id": "call_1", "content": "(2+3)*4 = 20" },
            { "role": "tool", "tool_call_id": "call_2",
              "content": [{ "type": "text", "text": "Paris: 18°C, cloudy" }] },
        ])
    }

    #[tokio::test]
    async fn plain_answer_with_parallel_tool_calls() {
        let llm = ScriptedLlm::start(demo());
        let resp = post(
            &llm,
            json!({ "model": "gpt-test", "messages": [user("hi")] }),
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/json");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["model"], "gpt-test");
        let choice = &body["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["role"], "assistant");
        let calls = choice["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["id"], "call_1");
        assert_eq!(calls[0]["type"], "function");
        assert_eq!(calls[0]["function"]["name"], "calculator");
        let args: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({ "expression": "(2+3)*4" }));
        assert_eq!(calls[1]["id"], "call_2");
        assert_eq!(calls[1]["function"]["name"], "weather");
        assert_eq!(
            body["usage"],
            json!({ "prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160 })
        );

        // Ids stay unique across requests of one server.
        let again: Value = post(&llm, json!({ "messages": [user("hi")] }))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            again["choices"][0]["message"]["tool_calls"][0]["id"],
            "call_3"
        );
        assert_eq!(again["model"], "scripted");
        assert_ne!(again["id"], body["id"]);
    }

    #[tokio::test]
    async fn after_tool_step_substitutes_tool_results() {
        let llm = ScriptedLlm::start(demo());
        let body: Value = post(&llm, json!({ "messages": after_tools() }))
            .await
            .json()
            .await
            .unwrap();
        let choice = &body["choices"][0];
        assert_eq!(choice["finish_reason"], "stop");
        assert_eq!(
            choice["message"]["content"],
            "Here is what I found:\n(2+3)*4 = 20\nParis: 18°C, cloudy\n\
             So (2+3)*4 is 20, and that is the weather in Paris."
        );
        assert!(choice["message"].get("tool_calls").is_none());
    }

    #[tokio::test]
    async fn stream_splits_content_and_tool_call_arguments() {
        let llm = ScriptedLlm::start(demo());
        let resp = post(
            &llm,
            json!({ "messages": [user("hi")], "stream": true,
                    "stream_options": { "include_usage": true } }),
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let events = sse_data(&resp.text().await.unwrap());
        assert_eq!(events.last().unwrap(), "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"));
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");

        let mut content = String::new();
        let mut calls: Vec<(String, String, String)> = Vec::new();
        for c in &chunks[..chunks.len() - 2] {
            let delta = &c["choices"][0]["delta"];
            assert!(c["choices"][0]["finish_reason"].is_null());
            assert!(c["usage"].is_null());
            if let Some(piece) = delta["content"].as_str() {
                assert!(piece.chars().count() <= 8);
                content.push_str(piece);
            }
            for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                let i = tc["index"].as_u64().unwrap() as usize;
                if let Some(id) = tc["id"].as_str() {
                    assert_eq!(i, calls.len(), "a new tool call opens the next index");
                    assert_eq!(tc["function"]["arguments"], "");
                    let name = tc["function"]["name"].as_str().unwrap().to_owned();
                    calls.push((id.to_owned(), name, String::new()));
                } else {
                    assert!(tc["function"].get("name").is_none());
                    calls[i]
                        .2
                        .push_str(tc["function"]["arguments"].as_str().unwrap());
                }
            }
        }
        assert_eq!(content, "Let me work that out and check the weather.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].0, "call_1");
        assert_eq!(calls[1].1, "weather");
        let args: Value = serde_json::from_str(&calls[1].2).unwrap();
        assert_eq!(args, json!({ "city": "Paris" }));

        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(finish["choices"][0]["delta"], json!({}));
        let usage = &chunks[chunks.len() - 1];
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 160);
    }

    #[tokio::test]
    async fn stream_without_usage_and_with_chunk_delay() {
        let llm = ScriptedLlm::start(demo());
        let started = std::time::Instant::now();
        let resp = post(&llm, json!({ "messages": after_tools(), "stream": true })).await;
        let events = sse_data(&resp.text().await.unwrap());
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let pieces: Vec<&str> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .filter(|p| !p.is_empty())
            .collect();
        assert!(pieces.iter().all(|p| p.chars().count() <= 6));
        assert!(pieces
            .concat()
            .starts_with("Here is what I found:\n(2+3)*4 = 20\n"));
        // 25 ms between content chunks.
        assert!(started.elapsed() >= Duration::from_millis(25 * (pieces.len() as u64 - 1)));
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "stop");
        assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    }

    #[tokio::test]
    async fn steps_match_in_order_then_default_then_400() {
        let script = json!({ "steps": [
            { "match": "weather", "content": "sunny, you said: {user}" },
            { "match": "weather", "content": "never reached" },
            { "match": "tool", "after_tool": true, "content": "got {tool_results}" },
        ]});
        let llm = ScriptedLlm::start(Script::from_value(script.clone()).unwrap());
        let content = |body: Value| body["choices"][0]["message"]["content"].clone();
        let body: Value = post(&llm, json!({ "messages": [user("the weather?")] }))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(content(body), "sunny, you said: the weather?");

        // `after_tool` needs a tool message last; `{tool_results}` only since the
        // last assistant message.
        let msgs = json!([user("tool please"),
            { "role": "assistant", "content": "a" }, { "role": "tool", "content": "old" },
            { "role": "assistant", "content": "b" }, { "role": "tool", "content": "{user}" }]);
        let body: Value = post(&llm, json!({ "messages": msgs }))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            content(body),
            "got {user}",
            "substituted text is not searched again"
        );

        let resp = post(&llm, json!({ "messages": [user("tool please")] })).await;
        assert_eq!(resp.status(), 400);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "no_step_matched");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tool please"));

        let mut with_default = script;
        with_default["default"] = json!({ "content": "default answer" });
        let llm = ScriptedLlm::start(Script::from_value(with_default).unwrap());
        let body: Value = post(&llm, json!({ "messages": [user("anything")] }))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(content(body), "default answer");
    }

    #[tokio::test]
    async fn scripted_http_errors() {
        let script = json!({ "steps": [
            { "match": "quota", "status": 429,
              "error_body": { "error": { "message": "slow down", "type": "rate_limit_error" } } },
            { "match": "boom", "status": 503 },
            { "match": "html", "status": 502, "error_body": "<html>bad gateway</html>" },
        ]});
        let llm = ScriptedLlm::start(Script::from_value(script).unwrap());
        let resp = post(&llm, json!({ "messages": [user("quota")], "stream": true })).await;
        assert_eq!(resp.status(), 429);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["message"], "slow down");

        let resp = post(&llm, json!({ "messages": [user("boom")] })).await;
        assert_eq!(resp.status(), 503);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "scripted_error");

        let resp = post(&llm, json!({ "messages": [user("html")] })).await;
        assert_eq!(resp.status(), 502);
        assert_eq!(resp.text().await.unwrap(), "<html>bad gateway</html>");
    }

    #[tokio::test]
    async fn requests_are_recorded_and_listed() {
        let llm = ScriptedLlm::start(demo());
        let first = json!({ "model": "m", "messages": [user("one")] });
        post(&llm, first.clone()).await;
        let resp = reqwest::Client::new()
            .post(format!("http://{}/v1/chat/completions", llm.addr()))
            .body("not json")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let listed: Value = reqwest::get(format!("http://{}/requests", llm.addr()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed, json!([first, "not json"]));
        assert_eq!(Value::Array(llm.requests()), listed);

        let resp = reqwest::get(format!("http://{}/nope", llm.addr()))
            .await
            .unwrap();
        assert_eq!(resp.status(), 404);
    }

    #[tokio::test]
    async fn client_leaving_mid_stream_and_timeouts_do_not_hurt_the_server() {
        let script = json!({ "steps": [
            { "match": "slow", "delay_ms": 2000, "content": "late" },
            { "content": "x".repeat(200), "chunk_chars": 1, "chunk_delay_ms": 20 },
        ]});
        let llm = ScriptedLlm::start(Script::from_value(script).unwrap());
        let mut resp = post(&llm, json!({ "messages": [user("hi")], "stream": true })).await;
        let first = resp.chunk().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: "));
        drop(resp);

        let timed_out = reqwest::Client::new()
            .post(format!("{}/chat/completions", llm.base_url()))
            .timeout(Duration::from_millis(100))
            .json(&json!({ "messages": [user("slow")] }))
            .send()
            .await;
        assert!(timed_out.unwrap_err().is_timeout());

        tokio::time::sleep(Duration::from_millis(100)).await;
        let body: Value = post(&llm, json!({ "messages": [user("hi")] }))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "x".repeat(200));
    }

    #[tokio::test]
    async fn serve_stops_on_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(demo(), listener, async move {
            let _ = stopped.await;
        }));
        let resp = reqwest::get(format!("http://{addr}/requests"))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("server stopped")
            .unwrap()
            .unwrap();
    }

    /// The error and its sources on one line, as the CLI prints them.
    fn chain(err: &dyn std::error::Error) -> String {
        let mut line = err.to_string();
        let mut source = err.source();
        while let Some(e) = source {
            line = format!("{line}: {e}");
            source = e.source();
        }
        line
    }

    #[test]
    fn script_errors_name_the_problem() {
        let err = Script::from_json(r#"{"steps": [{"contnet": "typo"}]}"#).unwrap_err();
        let line = chain(&err);
        assert!(
            line.starts_with("LLM script <inline>: unknown field `contnet`"),
            "{line}"
        );
        let err = Script::from_json(r#"{"steps": [{}, {"status": 1000}]}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "LLM script <inline>: steps[1]: `status`: 1000 is not an HTTP status (100-599)"
        );
        let err = Script::load(Path::new("/nonexistent/script.json")).unwrap_err();
        assert_eq!(
            chain(&err),
            "reading LLM script /nonexistent/script.json: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn split_chars_keeps_characters_whole() {
        assert_eq!(split_chars("héllo wörld", 4), ["héll", "o wö", "rld"]);
        assert_eq!(split_chars("abc", 0), ["abc"]);
        assert!(split_chars("", 3).is_empty());
    }
}
