//! LLM sources and the HTTP client that talks to them through a Lua adapter.
//!
//! - [`config`]: `<data_dir>/hearth.toml` (`[[sources]]`, `[agent]`) and the quick-start
//!   flags/environment.
//! - [`message`]: the unified messages and completion request, typed.
//! - [`pool`]: the sources' health, failover order and load (`max_concurrent` slots).
//! - [`failover`]: one completion across the sources in order.
//! - `stream`: a streamed answer's framing (SSE with LF, CRLF or CR line ends; NDJSON),
//!   its end (`[DONE]`, or the bytes' end — an error when cut in the middle of a tool
//!   call) and the API's errors inside it; [`replay_stream`] replays a capture.
//! - this module: [`LlmClient::complete`] — unified CompletionRequest → adapter →
//!   HTTP (plain or SSE) → adapter → unified [`CompletionResponse`], text deltas to
//!   the caller as they arrive, streamed tool-call fragments assembled by index (a
//!   fragment that opens another call starts a new one: `Assembly`). Every response
//!   leaves with one unique id per call and `tool_calls` as its finish reason when it has
//!   calls ([`CompletionResponse::settle_tool_calls`]). The API's errors are
//!   [`LlmError::Upstream`]; redirects are followed only within the source's origin.

pub mod config;
pub mod failover;
pub mod message;
pub mod pool;
mod stream;
#[cfg(test)]
mod tests_scripted;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::adapters::{
    AdapterError, AdapterSet, CompletionResponse, StreamChunk, TokenUsage, ToolCall, ToolCallDelta,
    UpstreamError,
};
pub use config::{AgentSettings, Source};
pub use message::{CompletionRequest, FunctionCall, Message, MessageToolCall};
pub use pool::{Failure, SourcePool, SourceSlot, SourceStatus};
#[cfg(test)]
pub(crate) use stream::replay_reads;
pub use stream::{replay_stream, StreamError};

/// Longest error body quoted in an error, in bytes.
const MAX_QUOTED_BODY: usize = 2048;

/// Why a completion failed. Every variant names the source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// No source is configured.
    #[error("no LLM source configured: add a [[sources]] entry to <data_dir>/hearth.toml or pass --llm-url")]
    NoSource,
    /// The source's adapter failed to load or its script failed.
    #[error("LLM source {source_name}: {error}")]
    Adapter {
        /// Source name.
        source_name: String,
        /// The adapter's error (names adapter, function, line).
        error: AdapterError,
    },
    /// The HTTP request failed (connect, TLS, reset, timeout), or its stream ended before
    /// the answer did (in the middle of an event or a tool call).
    #[error("LLM source {source_name}: {url}: {message}")]
    Http {
        /// Source name.
        source_name: String,
        /// URL requested.
        url: String,
        /// What failed.
        message: String,
    },
    /// The API answered an error: an error status (its body read by the adapter), an
    /// error body, or an error event inside a stream. What failover does with it:
    /// [`Failure::of`].
    #[error("LLM source {source_name}: {error}")]
    Upstream {
        /// Source name.
        source_name: String,
        /// URL requested.
        url: String,
        /// The API's error: HTTP status when known, type, code, message.
        error: Box<UpstreamError>,
    },
    /// The API answered with a redirect that is not followed: to another origin (where
    /// the source's key must not go), from https to http, or one that would drop the body.
    #[error(
        "LLM source {source_name}: {url} redirects (HTTP {status}) to {location}: not followed, \
         the API key goes only to the source's own origin (set base_url to the address the API \
         answers on)"
    )]
    Redirect {
        /// Source name.
        source_name: String,
        /// URL requested.
        url: String,
        /// The 3xx status.
        status: u16,
        /// The `Location` header.
        location: String,
    },
    /// The request was cancelled (an interrupt).
    #[error("LLM request cancelled")]
    Cancelled,
}

/// Something the caller sees while a completion streams.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    /// Reply text.
    Text(String),
    /// Reasoning text.
    Reasoning(String),
}

/// HTTP client for LLM sources.
#[derive(Debug, Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    adapters: Arc<AdapterSet>,
}

impl LlmClient {
    /// A client using `adapters`.
    pub fn new(adapters: Arc<AdapterSet>) -> LlmClient {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(redirect_policy())
            .build()
            .expect("an HTTP client without custom TLS roots builds");
        LlmClient { http, adapters }
    }

    /// The adapters in use.
    pub fn adapters(&self) -> &Arc<AdapterSet> {
        &self.adapters
    }

    /// Runs one completion of `request` (the unified CompletionRequest of the seed,
    /// `model` filled from the source when missing) against `source`. With
    /// `request.stream == true` the answer is read as SSE and each text delta is
    /// passed to `on_delta` as it arrives. Cancelling `cancel` aborts the request.
    pub async fn complete(
        &self,
        source: &Source,
        mut request: Value,
        on_delta: impl FnMut(Delta),
        cancel: &CancellationToken,
    ) -> Result<CompletionResponse, LlmError> {
        let adapter = self.adapter(source)?;
        if request
            .get("model")
            .is_none_or(|m| m.as_str().is_none_or(str::is_empty))
        {
            request["model"] = Value::String(source.model.clone());
        }
        let stream = request
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            && adapter.supports_streaming();
        request["stream"] = Value::Bool(stream);
        self.send(source, &adapter, &request, stream, on_delta, cancel)
            .await
    }

    /// [`LlmClient::complete`] for a typed request (the tool loop's path): `model`
    /// empty = the source's, streaming only when the adapter can. The request is
    /// serialized once, for the adapter.
    pub async fn complete_request(
        &self,
        source: &Source,
        request: &CompletionRequest<'_>,
        on_delta: impl FnMut(Delta),
        cancel: &CancellationToken,
    ) -> Result<CompletionResponse, LlmError> {
        let adapter = self.adapter(source)?;
        let stream = request.stream && adapter.supports_streaming();
        let request = CompletionRequest {
            model: if request.model.is_empty() {
                &source.model
            } else {
                request.model
            },
            stream,
            ..*request
        };
        let observed = crate::observe::llm::start(source, request.model, stream);
        let result = self
            .send(source, &adapter, &request, stream, on_delta, cancel)
            .await;
        if let Some(o) = observed {
            o.finish(&result);
        }
        result
    }

    fn adapter(&self, source: &Source) -> Result<Arc<crate::adapters::Adapter>, LlmError> {
        self.adapters
            .get(&source.adapter)
            .map_err(|error| LlmError::Adapter {
                source_name: source.name.clone(),
                error,
            })
    }

    async fn send<T: serde::Serialize + ?Sized>(
        &self,
        source: &Source,
        adapter: &crate::adapters::Adapter,
        request: &T,
        stream: bool,
        mut on_delta: impl FnMut(Delta),
        cancel: &CancellationToken,
    ) -> Result<CompletionResponse, LlmError> {
        let name = source.name.clone();
        // Some APIs stream from another path (Gemini's `:streamGenerateContent`).
        let path = match stream {
            true => adapter.stream_endpoint().unwrap_or(adapter.endpoint()),
            false => adapter.endpoint(),
        };
        let url = format!(
            "{}/{}",
            source.base_url.trim_end_matches('/'),
            path.replace("{model}", &source.model)
                .trim_start_matches('/')
        );
        let http_err = |message: String| LlmError::Http {
            source_name: name.clone(),
            url: url.clone(),
            message,
        };
        let upstream_err = |error| LlmError::Upstream {
            source_name: name.clone(),
            url: url.clone(),
            error,
        };
        // The API's error, raised by the script, is the provider's error, not the adapter's.
        let adapter_err = |error| match error {
            AdapterError::Upstream { error, .. } => upstream_err(error),
            error => LlmError::Adapter {
                source_name: name.clone(),
                error,
            },
        };
        // One VM for this completion's transforms (a stream's state stays with it); its
        // scripts' http_get / http_post may reach this source's host.
        let transforms = adapter.session_for(&source.base_url);
        let body = transforms.transform_request(request).map_err(adapter_err)?;
        let mut req = self
            .http
            .post(&url)
            .header("content-type", "application/json")
            .json(&body);
        // The key goes where the API wants it: `Authorization: Bearer` unless the
        // adapter names a header (Anthropic `x-api-key`, Gemini `x-goog-api-key`).
        if let Some(key) = source.api_key() {
            req = match adapter.auth_header() {
                Some(header) => req.header(header, key),
                None => req.bearer_auth(key),
            };
        }
        for (k, v) in adapter.headers() {
            req = req.header(k.as_str(), v.as_str());
        }
        if !stream {
            req = req.timeout(source.timeout);
        }
        let send = req.send();
        let resp = tokio::select! {
            r = send => r.map_err(|e| http_err(describe(&e)))?,
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
        };
        let status = resp.status();
        if status.is_redirection() {
            let location = resp
                .headers()
                .get("location")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_else(|| "(no Location header)".to_owned());
            return Err(LlmError::Redirect {
                source_name: name.clone(),
                url: url.clone(),
                status: status.as_u16(),
                location,
            });
        }
        if !status.is_success() {
            let retry_after_s = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let text = resp.text().await.unwrap_or_default();
            // The adapter knows the API's error shape and raises it typed; a script that
            // raises a plain error (written before `raise_api_error`) still names it; a
            // body no script reads (a proxy's page) is quoted with the URL that gave it.
            let mut error = match transforms.transform_response(&text) {
                Err(AdapterError::Upstream { error, .. }) => error,
                Err(AdapterError::Script { message, .. }) => {
                    Box::new(UpstreamError::message(message))
                }
                _ => Box::new(UpstreamError::message(format!(
                    "{url} answered: {}",
                    quote(&text)
                ))),
            };
            error.status = Some(status.as_u16());
            error.retry_after_s = retry_after_s.or(error.retry_after_s);
            return Err(upstream_err(error));
        }
        if !stream {
            let text = tokio::select! {
                t = resp.text() => t.map_err(|e| http_err(describe(&e)))?,
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            };
            let mut out = transforms.transform_response(&text).map_err(adapter_err)?;
            out.settle_tool_calls();
            if !out.content.is_empty() {
                on_delta(Delta::Text(out.content.clone()));
            }
            return Ok(out);
        }

        let idle = |_| {
            http_err(format!(
                "no streamed data for {} s",
                source.timeout.as_secs()
            ))
        };
        let stream_err = |e| match e {
            StreamError::Adapter(error) => adapter_err(error),
            StreamError::Upstream(error) => upstream_err(error),
            StreamError::Cut(message) => http_err(message),
        };
        // SSE or NDJSON, framed in `stream`; a frame may span reads.
        let mut reader = stream::Reader::new(&transforms);
        let mut bytes = resp.bytes_stream();
        loop {
            let next = tokio::select! {
                n = tokio::time::timeout(source.timeout, bytes.next()) => n.map_err(idle)?,
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            };
            match next {
                None => break,
                Some(Err(e)) => return Err(http_err(format!("stream broke: {}", describe(&e)))),
                Some(Ok(chunk)) => {
                    if reader.feed(&chunk, &mut on_delta).map_err(stream_err)? {
                        break;
                    }
                }
            }
        }
        reader.finish(&mut on_delta).map_err(stream_err)
    }
}

/// Redirects of API calls: followed only to the same origin (scheme, host and port) and
/// only as 307/308 (which keep the method and body), five at most. Any other comes back as
/// the 3xx, an [`LlmError::Redirect`] naming its `Location`: the source's key must not go
/// to another origin (reqwest strips only `Authorization` there, not `x-api-key` or
/// `x-goog-api-key`), and never from https to http.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        if same_origin && keeps_body && attempt.previous().len() <= 5 {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// Streamed chunks put together.
///
/// Tool-call fragments join the call their `index` names, except that a fragment that
/// opens another call starts a new one at that index (see [`PartialCall::opened_by`]):
/// Ollama's OpenAI-compatible stream sends parallel calls all at `index: 0`, Mistral's
/// sends calls with no index at all (each one at position 0 of its chunk). Calls keep the
/// order in which they started. [`Assembly::finish`] applies the broker's tool-call rules
/// ([`CompletionResponse::settle_tool_calls`]): ids for calls without one, `tool_calls`
/// as the finish reason.
#[derive(Default)]
pub(crate) struct Assembly {
    content: String,
    reasoning: String,
    finish_reason: String,
    usage: TokenUsage,
    /// Calls in the order they started.
    calls: Vec<PartialCall>,
    /// Stream index → the call in `calls` that index names now.
    by_index: HashMap<u32, usize>,
}

/// A streamed tool call being put together.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    thought_signature: Option<String>,
}

impl PartialCall {
    /// Whether fragment `d`, at this call's index, opens another call: it carries an id
    /// other than this call's, or (without an id) a name when this call already has
    /// another name, or the same name and complete arguments that `d` would extend.
    /// A server that repeats the id or the name on every fragment continues the call.
    fn opened_by(&self, d: &ToolCallDelta) -> bool {
        let id = d.id.as_deref().filter(|s| !s.is_empty());
        let name = d.name.as_deref().filter(|s| !s.is_empty());
        if let Some(id) = id.filter(|_| !self.id.is_empty()) {
            return id != self.id;
        }
        match name {
            Some(name) if !self.name.is_empty() => {
                name != self.name
                    || (!d.arguments.trim().is_empty()
                        && serde_json::from_str::<serde::de::IgnoredAny>(&self.arguments).is_ok())
            }
            _ => false,
        }
    }
}

impl Assembly {
    pub(crate) fn add(&mut self, chunk: StreamChunk, on_delta: &mut impl FnMut(Delta)) {
        if !chunk.content.is_empty() {
            self.content.push_str(&chunk.content);
            on_delta(Delta::Text(chunk.content));
        }
        if !chunk.reasoning_content.is_empty() {
            self.reasoning.push_str(&chunk.reasoning_content);
            on_delta(Delta::Reasoning(chunk.reasoning_content));
        }
        for d in chunk.tool_calls {
            let at = match self.by_index.get(&d.index) {
                Some(&at) if !self.calls[at].opened_by(&d) => at,
                _ => {
                    self.calls.push(PartialCall::default());
                    self.by_index.insert(d.index, self.calls.len() - 1);
                    self.calls.len() - 1
                }
            };
            let call = &mut self.calls[at];
            if let Some(id) = d.id.filter(|s| !s.is_empty()) {
                call.id = id;
            }
            if let Some(name) = d.name.filter(|s| !s.is_empty()) {
                call.name = name;
            }
            call.arguments.push_str(&d.arguments);
            if let Some(sig) = d.thought_signature.filter(|s| !s.is_empty()) {
                call.thought_signature = Some(sig);
            }
        }
        if let Some(r) = chunk.finish_reason.filter(|r| !r.is_empty()) {
            self.finish_reason = r;
        }
        // Field by field: some APIs send prompt tokens early and completion tokens
        // late (Anthropic's message_start / message_delta); a zero never erases a count.
        if let Some(u) = chunk.token_usage {
            for (mine, theirs) in [
                (&mut self.usage.prompt, u.prompt),
                (&mut self.usage.completion, u.completion),
                (&mut self.usage.total, u.total),
            ] {
                if theirs > 0 {
                    *mine = theirs;
                }
            }
            self.usage.total = self
                .usage
                .total
                .max(self.usage.prompt + self.usage.completion);
        }
    }

    /// The whole response; arguments text that is not a JSON object is kept as a
    /// JSON string so the tool loop can answer that call with a clear error.
    pub(crate) fn finish(self) -> CompletionResponse {
        let tool_calls = self
            .calls
            .into_iter()
            .map(|c| {
                let arguments = if c.arguments.trim().is_empty() {
                    Value::Object(Default::default())
                } else {
                    serde_json::from_str::<Value>(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or(Value::String(c.arguments))
                };
                ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments,
                    thought_signature: c.thought_signature,
                }
            })
            .collect();
        let mut out = CompletionResponse {
            content: self.content,
            reasoning_content: self.reasoning,
            finish_reason: self.finish_reason,
            token_usage: self.usage,
            tool_calls,
        };
        out.settle_tool_calls();
        out
    }
}

fn describe(e: &reqwest::Error) -> String {
    let mut msg = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

fn quote(body: &str) -> String {
    let body = body.trim();
    if body.len() <= MAX_QUOTED_BODY {
        return body.to_string();
    }
    let mut end = MAX_QUOTED_BODY;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &body[..end])
}
