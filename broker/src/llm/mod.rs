//! LLM sources and the HTTP client that talks to them through a Lua adapter.
//!
//! - [`config`]: `<data_dir>/hearth.toml` (`[[sources]]`, `[agent]`) and the quick-start
//!   flags/environment.
//! - [`message`]: the unified messages and completion request, typed.
//! - [`pool`]: the sources' health, failover order and load (`max_concurrent` slots).
//! - [`failover`]: one completion across the sources in order.
//! - this module: [`LlmClient::complete`] — unified CompletionRequest → adapter →
//!   HTTP (plain or SSE) → adapter → unified [`CompletionResponse`], text deltas to
//!   the caller as they arrive, streamed tool-call fragments assembled by index.

pub mod config;
pub mod failover;
pub mod message;
pub mod pool;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::adapters::{
    AdapterError, AdapterSet, CompletionResponse, StreamChunk, StreamFormat, TokenUsage, ToolCall,
};
pub use config::{AgentSettings, Source};
pub use message::{CompletionRequest, FunctionCall, Message, MessageToolCall};
pub use pool::{SourcePool, SourceSlot, SourceStatus};

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
    /// The HTTP request failed (connect, TLS, reset, timeout).
    #[error("LLM source {source_name}: {url}: {message}")]
    Http {
        /// Source name.
        source_name: String,
        /// URL requested.
        url: String,
        /// What failed.
        message: String,
    },
    /// The API answered an error status.
    #[error("LLM source {source_name}: HTTP {status} from {url}: {message}")]
    Status {
        /// Source name.
        source_name: String,
        /// URL requested.
        url: String,
        /// HTTP status.
        status: u16,
        /// The API's error message or the start of its body.
        message: String,
        /// `Retry-After` in seconds, when given.
        retry_after_s: Option<u64>,
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
        self.send(source, &adapter, &request, stream, on_delta, cancel)
            .await
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
        let adapter_err = |error| LlmError::Adapter {
            source_name: name.clone(),
            error,
        };
        let body = adapter.transform_request(request).map_err(adapter_err)?;
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
        if !status.is_success() {
            let retry_after_s = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let text = resp.text().await.unwrap_or_default();
            // The adapter knows the API's error shape; its script error names it.
            let message = match adapter.transform_response(&text) {
                Err(AdapterError::Script { message, .. }) => message,
                _ => quote(&text),
            };
            return Err(LlmError::Status {
                source_name: name.clone(),
                url: url.clone(),
                status: status.as_u16(),
                message,
                retry_after_s,
            });
        }
        if !stream {
            let text = tokio::select! {
                t = resp.text() => t.map_err(|e| http_err(describe(&e)))?,
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            };
            let out = adapter.transform_response(&text).map_err(adapter_err)?;
            if !out.content.is_empty() {
                on_delta(Delta::Text(out.content.clone()));
            }
            return Ok(out);
        }

        let mut acc = Assembly::default();
        // One payload: an SSE `data:` field or an NDJSON line. false = end of stream.
        let mut handle = |data: &str| -> Result<bool, LlmError> {
            let data = data.trim();
            if data == "[DONE]" {
                return Ok(false);
            }
            if !data.is_empty() {
                if let Some(chunk) = adapter.transform_stream_chunk(data).map_err(adapter_err)? {
                    acc.add(chunk, &mut on_delta);
                }
            }
            Ok(true)
        };
        let idle = |_| {
            http_err(format!(
                "no streamed data for {} s",
                source.timeout.as_secs()
            ))
        };
        match adapter.stream_format() {
            StreamFormat::Sse => {
                let mut events = resp.bytes_stream().eventsource();
                loop {
                    let next = tokio::select! {
                        n = tokio::time::timeout(source.timeout, events.next()) => n.map_err(idle)?,
                        _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                    };
                    match next {
                        None => break,
                        Some(Err(e)) => return Err(http_err(format!("stream broke: {e}"))),
                        Some(Ok(ev)) => {
                            if !handle(&ev.data)? {
                                break;
                            }
                        }
                    }
                }
            }
            // Ollama: one JSON object per line; a line may span reads.
            StreamFormat::Ndjson => {
                let mut bytes = resp.bytes_stream();
                let mut buf: Vec<u8> = Vec::new();
                loop {
                    let next = tokio::select! {
                        n = tokio::time::timeout(source.timeout, bytes.next()) => n.map_err(idle)?,
                        _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                    };
                    match next {
                        None => break,
                        Some(Err(e)) => {
                            return Err(http_err(format!("stream broke: {}", describe(&e))))
                        }
                        Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                    }
                    while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=i).collect();
                        handle(&String::from_utf8_lossy(&line))?;
                    }
                }
                handle(&String::from_utf8_lossy(&buf))?;
            }
        }
        Ok(acc.finish())
    }
}

/// Streamed chunks put together.
#[derive(Default)]
struct Assembly {
    content: String,
    reasoning: String,
    finish_reason: String,
    usage: TokenUsage,
    /// index → (id, name, arguments text, thought signature)
    calls: BTreeMap<u32, (String, String, String, Option<String>)>,
}

impl Assembly {
    fn add(&mut self, chunk: StreamChunk, on_delta: &mut impl FnMut(Delta)) {
        if !chunk.content.is_empty() {
            self.content.push_str(&chunk.content);
            on_delta(Delta::Text(chunk.content));
        }
        if !chunk.reasoning_content.is_empty() {
            self.reasoning.push_str(&chunk.reasoning_content);
            on_delta(Delta::Reasoning(chunk.reasoning_content));
        }
        for d in chunk.tool_calls {
            let entry = self.calls.entry(d.index).or_default();
            if let Some(id) = d.id.filter(|s| !s.is_empty()) {
                entry.0 = id;
            }
            if let Some(name) = d.name.filter(|s| !s.is_empty()) {
                entry.1 = name;
            }
            entry.2.push_str(&d.arguments);
            if let Some(sig) = d.thought_signature.filter(|s| !s.is_empty()) {
                entry.3 = Some(sig);
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
    fn finish(self) -> CompletionResponse {
        let tool_calls = self
            .calls
            .into_values()
            .map(|(id, name, args, thought_signature)| {
                let arguments = if args.trim().is_empty() {
                    Value::Object(Default::default())
                } else {
                    serde_json::from_str::<Value>(&args)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or(Value::String(args))
                };
                ToolCall {
                    id,
                    name,
                    arguments,
                    thought_signature,
                }
            })
            .collect();
        CompletionResponse {
            content: self.content,
            reasoning_content: self.reasoning,
            finish_reason: self.finish_reason,
            token_usage: self.usage,
            tool_calls,
        }
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
