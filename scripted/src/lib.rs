#![doc = include_str!("../../docs/llm-script.md")]

mod anthropic;
mod gemini;
/// The `thoughtSignature` the scripted Gemini server signs the first call of a response with.
pub use gemini::THOUGHT_SIGNATURE as GEMINI_THOUGHT_SIGNATURE;
mod ollama;
mod openai;
#[cfg(test)]
mod tests_families;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
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

/// The LLM API family of a request, chosen by its path (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub enum Family {
    /// `POST …/chat/completions`: OpenAI chat completions (DeepSeek and the other
    /// OpenAI-compatible APIs).
    #[serde(rename = "openai")]
    OpenAi,
    /// `POST …/v1/messages`: Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// `POST …/models/{model}:generateContent` / `:streamGenerateContent`: Gemini.
    #[serde(rename = "gemini")]
    Gemini,
    /// `POST …/api/chat`: Ollama's native chat API.
    #[serde(rename = "ollama")]
    Ollama,
}

/// Where a request went: its family and what the path says beyond that.
#[derive(Debug, Clone, PartialEq)]
struct Route {
    family: Family,
    /// The model named in the path (Gemini).
    model: Option<String>,
    /// Streamed because of the path (Gemini's `:streamGenerateContent`).
    path_streams: bool,
    /// `alt=sse` in the query (Gemini streams: SSE rather than a JSON array).
    sse: bool,
}

impl Route {
    fn of(uri: &Uri) -> Option<Route> {
        let path = uri.path();
        let plain = |family| Route {
            family,
            model: None,
            path_streams: false,
            sse: false,
        };
        if path.ends_with("/chat/completions") {
            return Some(plain(Family::OpenAi));
        }
        if path.ends_with("/v1/messages") {
            return Some(plain(Family::Anthropic));
        }
        if path.ends_with("/api/chat") {
            return Some(plain(Family::Ollama));
        }
        let (dir, last) = path.rsplit_once('/')?;
        let (model, method) = last.split_once(':')?;
        if !dir.ends_with("/models") || model.is_empty() {
            return None;
        }
        let path_streams = match method {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return None,
        };
        let sse = uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
        Some(Route {
            family: Family::Gemini,
            model: Some(model.to_owned()),
            path_streams,
            sse,
        })
    }

    /// Whether `request` asks for a streamed answer.
    fn streams(&self, request: &Value) -> bool {
        match self.family {
            Family::OpenAi | Family::Anthropic => request["stream"].as_bool() == Some(true),
            Family::Gemini => self.path_streams,
            // Ollama streams unless told not to.
            Family::Ollama => request["stream"].as_bool() != Some(false),
        }
    }
}

/// One request the server received, as [`ScriptedLlm::exchanges`] and `GET /exchanges`
/// list it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Exchange {
    /// The family its path chose.
    pub family: Family,
    /// Path and query, e.g. `/v1beta/models/m:streamGenerateContent?alt=sse`.
    pub path: String,
    /// Request headers, names lower-case (repeated ones joined with `, `).
    pub headers: BTreeMap<String, String>,
    /// The body: JSON, or a JSON string when it was not JSON.
    pub body: Value,
    /// The tool calls the server answered with (none for an error answer).
    pub tool_calls: Vec<SentToolCall>,
}

/// A tool call the server sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SentToolCall {
    /// Its id on the wire (`None` where the family has no call ids: Gemini, Ollama).
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
}

/// A message of a request, whatever the family's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    System,
    User,
    Assistant,
    Tool,
    Other,
}

/// A message of a request in the family-neutral shape the script looks at.
#[derive(Debug)]
struct Turn {
    role: Role,
    text: String,
}

impl Turn {
    fn new(role: Role, text: String) -> Turn {
        Turn { role, text }
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
    fn of(family: Family, request: &Value) -> Conversation {
        let turns = match family {
            Family::OpenAi | Family::Ollama => openai::turns(request),
            Family::Anthropic => anthropic::turns(request),
            Family::Gemini => gemini::turns(request),
        };
        Conversation::from_turns(&turns)
    }

    fn from_turns(turns: &[Turn]) -> Conversation {
        let texts = |role: Role, turns: &[Turn]| -> Vec<String> {
            turns
                .iter()
                .filter(|t| t.role == role)
                .map(|t| t.text.clone())
                .collect()
        };
        let since_assistant = turns
            .iter()
            .rposition(|t| t.role == Role::Assistant)
            .map_or(0, |i| i + 1);
        Conversation {
            last_user: turns
                .iter()
                .rev()
                .find(|t| t.role == Role::User)
                .map(|t| t.text.clone())
                .unwrap_or_default(),
            last_is_tool: turns.last().is_some_and(|t| t.role == Role::Tool),
            tool_results: texts(Role::Tool, &turns[since_assistant..]).join("\n"),
            system: texts(Role::System, turns),
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
    exchanges: Mutex<Vec<Exchange>>,
    next_call: AtomicU64,
    next_completion: AtomicU64,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
}

/// Counts one completion being answered while it lives.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn start(shared: &Arc<Shared>) -> InFlight {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shared {
    fn new(script: Script) -> Shared {
        Shared {
            script,
            exchanges: Mutex::new(Vec::new()),
            next_call: AtomicU64::new(1),
            next_completion: AtomicU64::new(1),
            in_flight: AtomicU64::new(0),
            peak_in_flight: AtomicU64::new(0),
        }
    }

    fn exchanges(&self) -> std::sync::MutexGuard<'_, Vec<Exchange>> {
        self.exchanges.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn requests(&self) -> Vec<Value> {
        self.exchanges().iter().map(|e| e.body.clone()).collect()
    }

    /// Records an exchange; returns its position.
    fn record(&self, exchange: Exchange) -> usize {
        let mut all = self.exchanges();
        all.push(exchange);
        all.len() - 1
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
    // The families' routes have free prefixes and Gemini's `{model}:method` segment:
    // the fallback dispatches them by path.
    Router::new()
        .route("/requests", get(list_requests))
        .route("/exchanges", get(list_exchanges))
        .route("/stats", get(stats))
        .fallback(answer)
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

    /// The server's root, `http://127.0.0.1:PORT`: the base URL of Anthropic, Gemini,
    /// Ollama and DeepSeek sources (their adapters' endpoints carry the version).
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests()
    }

    /// Every request received so far with its family, path, headers and the tool calls
    /// answered, in order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.shared.exchanges().clone()
    }

    /// Completions being answered now (a streamed one until its last event is sent).
    pub fn in_flight(&self) -> u64 {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// The most completions answered at once so far.
    pub fn peak_in_flight(&self) -> u64 {
        self.shared.peak_in_flight.load(Ordering::SeqCst)
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

async fn stats(State(shared): State<Arc<Shared>>) -> Response {
    let stats = json!({
        "requests": shared.exchanges().len(),
        "in_flight": shared.in_flight.load(Ordering::SeqCst),
        "peak_in_flight": shared.peak_in_flight.load(Ordering::SeqCst),
    });
    json_response(StatusCode::OK, &stats)
}

async fn list_exchanges(State(shared): State<Arc<Shared>>) -> Response {
    let all = serde_json::to_value(&*shared.exchanges()).unwrap_or_default();
    json_response(StatusCode::OK, &all)
}

fn not_found() -> Response {
    openai::error(
        StatusCode::NOT_FOUND,
        "hearth scripted LLM: unknown route (POST …/chat/completions, …/v1/messages, \
         …/models/{model}:generateContent, …/models/{model}:streamGenerateContent, \
         …/api/chat; GET /requests, /exchanges, /stats)",
        "invalid_request_error",
        "not_found",
    )
}

/// Answers a request to any path: the family's route, or 404.
async fn answer(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(route) = Route::of(&uri) else {
        return not_found();
    };
    let in_flight = InFlight::start(&shared);
    let family = route.family;
    if method != Method::POST {
        return error_response(
            family,
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("hearth scripted LLM: {method} {}: use POST", uri.path()),
            "invalid_request_error",
            "method_not_allowed",
        );
    }
    let request = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let at = shared.record(Exchange {
        family,
        path: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned()),
        headers: header_map(&headers),
        body: request.clone(),
        tool_calls: Vec::new(),
    });
    if !request.is_object() {
        return error_response(
            family,
            StatusCode::BAD_REQUEST,
            "hearth scripted LLM: the request body is not a JSON object",
            "invalid_request_error",
            "invalid_json",
        );
    }
    let conv = Conversation::of(family, &request);
    let Some(step) = shared.script.pick(&conv) else {
        return error_response(
            family,
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
    tracing::debug!(?family, last_user = %conv.last_user, "scripted LLM request");
    if step.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(step.delay_ms)).await;
    }
    if step.status.is_some() || step.error_body.is_some() {
        return scripted_error(family, step);
    }
    let reply = Reply::new(&shared, &route, step, &conv, &request);
    shared.exchanges()[at].tool_calls = reply
        .tool_calls
        .iter()
        .map(|c| SentToolCall {
            id: c.id.clone(),
            name: c.name.clone(),
        })
        .collect();
    if route.streams(&request) {
        stream_response(reply.stream(&route, &request), in_flight)
    } else {
        json_response(StatusCode::OK, &reply.body())
    }
}

fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        out.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    out
}

/// A tool call of an answer.
#[derive(Debug)]
struct Call {
    /// Its id on the wire (none for Gemini and Ollama).
    id: Option<String>,
    name: String,
    /// The arguments as JSON text (or the scripted string, verbatim).
    arguments: String,
}

impl Call {
    /// The arguments where the wire wants a JSON value (Anthropic `input`, Gemini
    /// `args`, Ollama `arguments`): parsed, or the text as a JSON string.
    fn arguments_value(&self) -> Value {
        serde_json::from_str(&self.arguments)
            .unwrap_or_else(|_| Value::String(self.arguments.clone()))
    }
}

/// Token counts of an answer.
#[derive(Debug, Clone, Copy)]
struct Usage {
    prompt: u64,
    /// Reasoning included.
    completion: u64,
    /// The reasoning's share of `completion`.
    reasoning: u64,
}

/// One answer in family-neutral form, rendered by the family's module.
#[derive(Debug)]
struct Reply {
    family: Family,
    /// Number of this answer on the server (response ids).
    n: u64,
    created: u64,
    model: String,
    content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Vec<Call>,
    /// `stop`, `tool_calls` or the scripted value, translated by each family.
    finish_reason: String,
    usage: Usage,
    /// Characters per streamed text chunk (0: one chunk).
    chunk_chars: usize,
    /// Pause between streamed chunks.
    pause: Duration,
}

impl Reply {
    fn new(
        shared: &Shared,
        route: &Route,
        step: &Step,
        conv: &Conversation,
        request: &Value,
    ) -> Reply {
        let family = route.family;
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
                let id = match family {
                    Family::OpenAi => Some(format!("call_{n}")),
                    Family::Anthropic => Some(format!("toolu_scripted_{n}")),
                    Family::Gemini | Family::Ollama => None,
                };
                Call {
                    id,
                    name: c.name.clone(),
                    arguments,
                }
            })
            .collect();
        let natural = if tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let finish_reason = step.finish_reason.as_deref().unwrap_or(natural).to_owned();
        let estimate = |bytes: usize| (bytes as u64 / 4).max(1);
        let reasoning_bytes = reasoning.as_deref().map_or(0, str::len);
        let generated = content.as_deref().map_or(0, str::len)
            + reasoning_bytes
            + tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.len())
                .sum::<usize>();
        let conversation = match family {
            Family::Gemini => &request["contents"],
            _ => &request["messages"],
        };
        let scripted = step.usage.unwrap_or_default();
        let prompt = scripted
            .prompt_tokens
            .unwrap_or_else(|| estimate(conversation.to_string().len()));
        let completion = scripted
            .completion_tokens
            .unwrap_or_else(|| estimate(generated));
        let reasoning_tokens = match reasoning_bytes {
            0 => 0,
            bytes => estimate(bytes).min(completion),
        };
        let model = route
            .model
            .clone()
            .or_else(|| request["model"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "scripted".to_owned());
        Reply {
            family,
            n: shared.next_completion.fetch_add(1, Ordering::Relaxed),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            model,
            content,
            reasoning,
            tool_calls,
            finish_reason,
            usage: Usage {
                prompt,
                completion,
                reasoning: reasoning_tokens,
            },
            chunk_chars: step.chunk_chars.unwrap_or(DEFAULT_CHUNK_CHARS),
            pause: Duration::from_millis(step.chunk_delay_ms),
        }
    }

    /// The non-streamed answer.
    fn body(&self) -> Value {
        match self.family {
            Family::OpenAi => openai::completion(self),
            Family::Anthropic => anthropic::message(self),
            Family::Gemini => gemini::response(self),
            Family::Ollama => ollama::response(self),
        }
    }

    /// The streamed answer.
    fn stream(&self, route: &Route, request: &Value) -> Frames {
        match self.family {
            Family::OpenAi => {
                let include_usage =
                    request["stream_options"]["include_usage"].as_bool() == Some(true);
                openai::stream(self, include_usage)
            }
            Family::Anthropic => anthropic::stream(self),
            Family::Gemini => gemini::stream(self, route.sse),
            Family::Ollama => ollama::stream(self),
        }
    }

    /// The text in streamed pieces.
    fn text_pieces(&self, text: Option<&str>) -> Vec<String> {
        split_chars(text.unwrap_or_default(), self.chunk_chars)
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

/// A streamed tool call's arguments text in up to [`ARGUMENT_FRAGMENTS`] pieces.
fn argument_fragments(arguments: &str) -> Vec<String> {
    let per = arguments
        .chars()
        .count()
        .div_ceil(ARGUMENT_FRAGMENTS)
        .max(1);
    split_chars(arguments, per)
}

/// The pauses of a stream: none before the first paced piece, the scripted pause
/// before every later one.
#[derive(Debug)]
struct Pacer {
    pause: Duration,
    next: Duration,
}

impl Pacer {
    fn new(pause: Duration) -> Pacer {
        Pacer {
            pause,
            next: Duration::ZERO,
        }
    }

    fn next(&mut self) -> Duration {
        std::mem::replace(&mut self.next, self.pause)
    }
}

/// A streamed answer: its content type and its framed pieces, each with the pause
/// before it.
#[derive(Debug)]
struct Frames {
    content_type: &'static str,
    frames: Vec<(Duration, String)>,
}

/// Sends `frames`, pausing before each as scripted; a client that goes away ends the
/// sending task.
fn stream_response(frames: Frames, in_flight: InFlight) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        let _in_flight = in_flight;
        for (pause, frame) in frames.frames {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            if tx.send(Ok(Bytes::from(frame))).await.is_err() {
                tracing::debug!("scripted LLM: client left mid-stream");
                return;
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, frames.content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// The scripted HTTP error answer of `step`.
fn scripted_error(family: Family, step: &Step) -> Response {
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
        None => error_response(
            family,
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

/// An error answer in the family's shape; `kind` and `code` are OpenAI's `type` and
/// `code` (the other families derive theirs from the status).
fn error_response(
    family: Family,
    status: StatusCode,
    message: &str,
    kind: &str,
    code: &str,
) -> Response {
    match family {
        Family::OpenAi => openai::error(status, message, kind, code),
        Family::Anthropic => json_response(status, &anthropic::error(status, message)),
        Family::Gemini => json_response(status, &gemini::error(status, message)),
        Family::Ollama => json_response(status, &json!({ "error": message })),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// Serves `script` on `listen` until SIGINT or SIGTERM (what `hearth dev llm-server`
/// runs): prints `listening on http://ADDR/v1` on stdout once bound, then answers
/// until a signal comes; answers in progress get up to one second to finish.
///
/// # Errors
/// Binding `listen` fails (the message names the address), or installing the signal
/// handlers fails.
pub async fn serve_until_signal(script: Script, listen: SocketAddr) -> std::io::Result<()> {
    use std::io::Write;
    use tokio::signal::unix::{signal, SignalKind};

    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding {listen}: {e}")))?;
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
        done = &mut server => return done.map_err(std::io::Error::other)?,
    }
    let _ = stop.send(());
    // Answers in progress get a moment; a scripted `delay_ms` does not hold us up.
    if let Ok(done) = tokio::time::timeout(Duration::from_secs(1), server).await {
        done.map_err(std::io::Error::other)??;
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
