//! One LLM API request observed: the `chat {model}` span (CLIENT) and the request's
//! metrics (`hearth_llm_requests_total`, `gen_ai_client_inference_*`), from one place so
//! both say the same. A request dropped unfinished (its turn cancelled) counts as
//! `cancelled`.

use std::time::Instant;

use opentelemetry::trace::SpanKind;
use opentelemetry::{KeyValue, StringValue, Value};

use super::metrics::{record_llm_request, LlmRequest};
use super::names::*;
use super::trace::{self, Span};
use crate::adapters::CompletionResponse;
use crate::llm::{Failure, LlmError, Source};

/// A request in flight; [`Observed::finish`] records it.
#[derive(Debug)]
pub struct Observed {
    source: String,
    provider: String,
    model: String,
    started: Instant,
    span: Option<Span>,
    done: bool,
    metrics: bool,
}

/// Starts observing a request to `source` for `model` (streamed or not). `None` when
/// neither metrics nor tracing is on.
pub fn start(source: &Source, model: &str, stream: bool) -> Option<Observed> {
    let metrics = super::metrics::get().is_some();
    let provider = provider_name(&source.adapter).to_string();
    let span = trace::start(format!("chat {model}"), SpanKind::Client, None, || {
        let mut a = vec![
            KeyValue::new(OPERATION_NAME, "chat"),
            KeyValue::new(PROVIDER_NAME, provider.clone()),
            KeyValue::new(REQUEST_MODEL, model.to_string()),
            KeyValue::new(REQUEST_STREAM, stream),
            KeyValue::new(HEARTH_SOURCE, source.name.clone()),
        ];
        if let Some(c) = opentelemetry::Context::current().get::<trace::Conversation>() {
            a.push(KeyValue::new(CONVERSATION_ID, c.id.clone()));
            *c.provider.lock().unwrap() = Some(provider.clone());
        }
        if let Ok(url) = reqwest::Url::parse(&source.base_url) {
            if let Some(host) = url.host_str() {
                a.push(KeyValue::new(SERVER_ADDRESS, host.to_string()));
            }
            if let Some(port) = url.port_or_known_default() {
                a.push(KeyValue::new(SERVER_PORT, i64::from(port)));
            }
        }
        a
    });
    if !metrics && span.is_none() {
        return None;
    }
    Some(Observed {
        source: source.name.clone(),
        provider,
        model: model.to_string(),
        started: Instant::now(),
        span,
        done: false,
        metrics,
    })
}

/// The closed `outcome` label and `error.type` of a failed request.
fn classify(e: &LlmError) -> (&'static str, String) {
    match e {
        LlmError::Cancelled => ("cancelled", "cancelled".into()),
        LlmError::Upstream { error, .. } => {
            let outcome = match Failure::of(e) {
                Failure::RateLimited => "rate_limited",
                _ => "error",
            };
            let ty = error
                .status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "_OTHER".into());
            (outcome, ty)
        }
        LlmError::Http { message, .. }
            if message.contains("timed out") || message.starts_with("no streamed data") =>
        {
            ("timeout", "timeout".into())
        }
        LlmError::Http { .. } => ("error", "_OTHER".into()),
        _ => ("error", "_OTHER".into()),
    }
}

impl Observed {
    /// Records the request's end: span attributes (response model, finish reasons,
    /// usage) or its error, and the metrics.
    pub fn finish(mut self, result: &Result<CompletionResponse, LlmError>) {
        self.done = true;
        let (outcome, error_type, input, output) = match result {
            Ok(r) => (
                "ok",
                String::new(),
                r.token_usage.prompt,
                r.token_usage.completion,
            ),
            Err(e) => {
                let (o, t) = classify(e);
                (o, t, 0, 0)
            }
        };
        if let Some(span) = &self.span {
            match result {
                Ok(r) => {
                    span.set(KeyValue::new(RESPONSE_MODEL, self.model.clone()));
                    let reasons = if r.finish_reason.is_empty() {
                        Vec::new()
                    } else {
                        vec![StringValue::from(r.finish_reason.clone())]
                    };
                    span.set(KeyValue::new(FINISH_REASONS, Value::Array(reasons.into())));
                    // Only what the API reported (zeros mean it said nothing).
                    if input > 0 || output > 0 {
                        span.set(KeyValue::new(USAGE_INPUT, input as i64));
                        span.set(KeyValue::new(USAGE_OUTPUT, output as i64));
                    }
                }
                Err(e) => span.fail(&error_type, e.to_string()),
            }
        }
        self.record(outcome, &error_type, input, output);
    }

    fn record(&self, outcome: &'static str, error_type: &str, input: u64, output: u64) {
        if !self.metrics {
            return;
        }
        record_llm_request(&LlmRequest {
            source: &self.source,
            provider: &self.provider,
            model: &self.model,
            outcome,
            error_type,
            elapsed: self.started.elapsed(),
            input_tokens: input,
            output_tokens: output,
        });
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if !self.done {
            if let Some(span) = &self.span {
                span.fail("cancelled", "cancelled");
            }
            self.record("cancelled", "cancelled", 0, 0);
        }
    }
}
