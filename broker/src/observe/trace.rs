//! OpenTelemetry traces following the GenAI semantic conventions, exported over OTLP.
//!
//! **On** only when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! is set (or `OTEL_TRACES_EXPORTER=otlp`), unless `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none`. The OTLP crate reads the other standard variables itself:
//! `…_PROTOCOL` (`http/protobuf`, the default, or `grpc`), `…_HEADERS`, `…_TIMEOUT`,
//! `…_COMPRESSION`; the SDK reads `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_TRACES_SAMPLER[_ARG]` and `OTEL_BSP_*`. **Off**, every helper here is one
//! `OnceLock::get` and returns `None`: no span, no attribute built, no bytes on the wire.
//!
//! Spans (names in [`super::names`]):
//! - `invoke_agent` per turn (INTERNAL), parent: the caller's `traceparent` metadata;
//! - `chat {model}` per LLM request (CLIENT), one per failover attempt;
//! - `execute_tool {tool}` per tool call (INTERNAL) — from the agent, `Admin.CallTool`
//!   and the MCP server;
//! - `hook {stage}` per stage hook (INTERNAL); `event {plugin}` per trigger delivery.
//!
//! The context of the span a plugin request belongs to travels in `InvokeTool`,
//! `RunStage` and `HandleEvent` as W3C `traceparent`/`tracestate` ([`current_w3c`]),
//! made current for a future with [`opentelemetry::context::FutureExt::with_context`].

use std::borrow::Cow;
use std::sync::OnceLock;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

static TRACING: OnceLock<Tracing> = OnceLock::new();

/// Default export queue when `OTEL_BSP_MAX_QUEUE_SIZE` is unset: the SDK's 2048 drops
/// spans in bursts at the thousands of tool calls per second a broker serves.
const DEFAULT_QUEUE: usize = 65_536;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the standard variables ask for OTLP trace export (see the module docs).
pub fn wanted() -> bool {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return false;
    }
    match env("OTEL_TRACES_EXPORTER").map(|v| v.trim().to_ascii_lowercase()) {
        Some(v) if v == "none" => false,
        Some(v) if v.split(',').any(|e| e.trim() == "otlp") => true,
        Some(v) => {
            tracing::warn!("OTEL_TRACES_EXPORTER={v}: only `otlp` and `none` are supported; traces are not exported");
            false
        }
        None => {
            env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
                || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        }
    }
}

/// Starts the exporter when [`wanted`]; must run inside the tokio runtime (the gRPC
/// exporter's channel binds to it). Returns a one-line description for the log, or the
/// reason it could not start (tracing then stays off; the broker runs on).
pub fn init() -> Option<Result<String, String>> {
    if !wanted() {
        return None;
    }
    Some(build())
}

fn build() -> Result<String, String> {
    use opentelemetry::trace::TracerProvider as _;
    // The HTTP exporter's reqwest 0.13 (and the gRPC one's rustls for https) use the
    // process's rustls provider.
    crate::mcp::install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .build()
        .map_err(|e| format!("OTLP trace exporter: {e}"))?;
    let mut batch = opentelemetry_sdk::trace::BatchConfigBuilder::default();
    if env("OTEL_BSP_MAX_QUEUE_SIZE").is_none() {
        batch = batch.with_max_queue_size(DEFAULT_QUEUE);
    }
    let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch.build())
        .build();
    let mut resource = opentelemetry_sdk::Resource::builder();
    let named = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    if !named {
        resource = resource.with_service_name("hearth");
    }
    let resource = resource
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let service = resource
        .get(&opentelemetry::Key::new("service.name"))
        .map(|v| v.to_string())
        .unwrap_or_default();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer_with_scope(
        opentelemetry::InstrumentationScope::builder("hearth")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    );
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .unwrap_or_else(|| "(default)".into());
    let _ = TRACING.set(Tracing { provider, tracer });
    Ok(format!(
        "tracing: OTLP {protocol} → {endpoint} (service.name={service})"
    ))
}

/// Whether spans are recorded.
pub fn enabled() -> bool {
    TRACING.get().is_some()
}

/// Exports what is queued and stops the exporter (blocking; run it off the runtime's
/// workers, e.g. in `spawn_blocking`).
pub fn shutdown() {
    if let Some(t) = TRACING.get() {
        if let Err(e) = t.provider.shutdown() {
            tracing::warn!("tracing: flushing spans at stop: {e}");
        }
    }
}

/// A started span and the context that holds it. Ends when [`Span::end`] is called or
/// it is dropped.
#[derive(Debug)]
pub struct Span {
    cx: Context,
}

impl Span {
    /// The context to run children in (`fut.with_context(span.context().clone())`).
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// Sets one attribute.
    pub fn set(&self, kv: KeyValue) {
        self.cx.span().set_attribute(kv);
    }

    /// Marks the span failed: status Error with `description`, and `error.type`.
    pub fn fail(&self, error_type: &str, description: impl Into<Cow<'static, str>>) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(
            super::names::ERROR_TYPE,
            error_type.to_string(),
        ));
        span.set_status(Status::error(description));
    }

    /// The trace id, 32 hex digits (for log lines).
    pub fn trace_id(&self) -> String {
        self.cx.span().span_context().trace_id().to_string()
    }

    /// Ends the span now.
    pub fn end(self) {}
}

impl Drop for Span {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// Starts a span named `name` of `kind` with `attributes`, as a child of `parent` (else
/// of the current context); `None` when tracing is off.
pub fn start(
    name: impl Into<Cow<'static, str>>,
    kind: SpanKind,
    parent: Option<&Context>,
    attributes: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Span> {
    let t = TRACING.get()?;
    let current;
    let parent = match parent {
        Some(p) => p,
        None => {
            current = Context::current();
            &current
        }
    };
    let span = t
        .tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes())
        .start_with_context(&t.tracer, parent);
    Some(Span {
        cx: parent.with_span(span),
    })
}

tokio::task_local! {
    /// The `traceparent`/`tracestate` a broker sent with a call a plugin host runs.
    static FORWARDED: (String, String);
}

/// Runs `fut` (a plugin host's run of a broker's call) with the broker's `traceparent`
/// and `tracestate`: [`current_w3c`] gives them to the plugin when the node has no
/// span of its own, so the plugin's spans join the broker's trace.
pub async fn with_forwarded<F: std::future::Future>(
    traceparent: String,
    tracestate: String,
    fut: F,
) -> F::Output {
    FORWARDED.scope((traceparent, tracestate), fut).await
}

fn forwarded() -> (String, String) {
    FORWARDED.try_with(Clone::clone).unwrap_or_default()
}

/// The W3C `traceparent` and `tracestate` of the current context's span, for a plugin
/// request; else what a broker forwarded with the call ([`with_forwarded`]); empty
/// strings when there is neither.
pub fn current_w3c() -> (String, String) {
    if TRACING.get().is_none() {
        return forwarded();
    }
    let cx = Context::current();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return forwarded();
    }
    // The W3C format, written directly (what TraceContextPropagator::inject writes,
    // without its carrier map): version 00, trace id, span id, flags.
    (
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        ),
        sc.trace_state().header(),
    )
}

/// The trace id of the current span (32 hex), for log fields; `None` when off.
pub fn current_trace_id() -> Option<String> {
    TRACING.get()?;
    let cx = Context::current();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// The remote parent a caller sent (`traceparent`/`tracestate` in gRPC metadata or MCP
/// `_meta`); `None` when off or absent or malformed.
pub fn extract(get: impl Fn(&str) -> Option<String>) -> Option<Context> {
    TRACING.get()?;
    struct Carrier([String; 2]);
    impl Extractor for Carrier {
        fn get(&self, key: &str) -> Option<&str> {
            let v = match key {
                "traceparent" => &self.0[0],
                "tracestate" => &self.0[1],
                _ => return None,
            };
            (!v.is_empty()).then_some(v.as_str())
        }
        fn keys(&self) -> Vec<&str> {
            vec!["traceparent", "tracestate"]
        }
    }
    let carrier = Carrier([
        get("traceparent").unwrap_or_default(),
        get("tracestate").unwrap_or_default(),
    ]);
    if carrier.0[0].is_empty() {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// [`extract`] from gRPC request metadata.
pub fn from_metadata(md: &tonic::metadata::MetadataMap) -> Option<Context> {
    extract(|k| md.get(k).and_then(|v| v.to_str().ok()).map(str::to_string))
}

/// An `execute_tool {tool}` span (INTERNAL) with `gen_ai.tool.name`, `gen_ai.tool.call.id`
/// (when `call_id` is not empty), `gen_ai.tool.type` and `hearth.plugin`; child of
/// `parent`, else of the current context. `None` when off.
pub fn tool_span(
    tool: &str,
    call_id: &str,
    plugin: &str,
    parent: Option<&Context>,
) -> Option<Span> {
    use super::names::*;
    start(
        format!("execute_tool {tool}"),
        SpanKind::Internal,
        parent,
        || {
            let mut a = vec![
                KeyValue::new(OPERATION_NAME, "execute_tool"),
                KeyValue::new(TOOL_NAME, tool.to_string()),
                KeyValue::new(TOOL_TYPE, "function"),
                KeyValue::new(HEARTH_PLUGIN, plugin.to_string()),
            ];
            if !call_id.is_empty() {
                a.push(KeyValue::new(TOOL_CALL_ID, call_id.to_string()));
            }
            a
        },
    )
}

/// `error.type` for a gRPC status a call ended with (low cardinality).
pub fn status_error_type(s: &tonic::Status) -> &'static str {
    match s.code() {
        tonic::Code::DeadlineExceeded => "timeout",
        tonic::Code::NotFound => "not_found",
        tonic::Code::InvalidArgument => "invalid_args",
        tonic::Code::Unavailable => "plugin_gone",
        tonic::Code::Cancelled => "cancelled",
        tonic::Code::PermissionDenied | tonic::Code::FailedPrecondition => "denied",
        tonic::Code::ResourceExhausted => "denied",
        _ => "_OTHER",
    }
}

/// A `hook {stage}` span (INTERNAL) with `hearth.stage`, `hearth.plugin`,
/// `hearth.hook_id`; child of the current context. `None` when off.
pub fn hook_span(stage: &'static str, plugin: &str, hook_id: &str) -> Option<Span> {
    use super::names::*;
    start(format!("hook {stage}"), SpanKind::Internal, None, || {
        vec![
            KeyValue::new(HEARTH_STAGE, stage),
            KeyValue::new(HEARTH_PLUGIN, plugin.to_string()),
            KeyValue::new(HEARTH_HOOK_ID, hook_id.to_string()),
        ]
    })
}

/// An `event {plugin}` span (INTERNAL) for a trigger delivered to `plugin`.
pub fn event_span(plugin: &str, trigger: &str) -> Option<Span> {
    use super::names::*;
    start(format!("event {plugin}"), SpanKind::Internal, None, || {
        vec![
            KeyValue::new(HEARTH_PLUGIN, plugin.to_string()),
            KeyValue::new(HEARTH_TRIGGER, trigger.to_string()),
        ]
    })
}

/// What a turn's context carries for the spans inside it: the conversation
/// (`gen_ai.conversation.id` of its chat spans) and the provider of the last LLM
/// request (the turn span's `gen_ai.provider.name`, set when the turn ends).
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The conversation key, e.g. `user:cli/alice`.
    pub id: String,
    /// `gen_ai.provider.name` of the source that answered last.
    pub provider: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl Span {
    /// Sets `gen_ai.provider.name` on a turn span from its last LLM request.
    pub fn set_turn_provider(&self) {
        let provider = self
            .cx
            .get::<Conversation>()
            .and_then(|c| c.provider.lock().unwrap().clone());
        if let Some(p) = provider {
            self.set(KeyValue::new(super::names::PROVIDER_NAME, p));
        }
    }
}

/// An `invoke_agent` span (INTERNAL) for a turn of `conversation`, child of `parent`
/// (the caller's trace context) or a root; its context carries the conversation for the
/// turn's chat spans. `None` when off.
pub fn turn_span(conversation: &str, parent: Option<&Context>) -> Option<Span> {
    use super::names::*;
    let root = Context::new();
    let mut span = start(
        SPAN_INVOKE_AGENT,
        SpanKind::Internal,
        Some(parent.unwrap_or(&root)),
        || {
            vec![
                KeyValue::new(OPERATION_NAME, "invoke_agent"),
                KeyValue::new(CONVERSATION_ID, conversation.to_string()),
            ]
        },
    )?;
    span.cx = span.cx.with_value(Conversation {
        id: conversation.to_string(),
        provider: Default::default(),
    });
    Some(span)
}

/// The TCP port of the OTLP endpoint plugins are given (the URL's, or its scheme's
/// default) when it is on this machine (`localhost` or a loopback address); `None`
/// when tracing is off, no endpoint is set, or it is remote. A plugin whose sandbox
/// lists `net_connect` ports may connect to this one as well; Landlock matches ports
/// only, so a remote collector's port (often 443) is never opened this way.
pub fn collector_port() -> Option<u16> {
    TRACING.get()?;
    let endpoint =
        env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))?;
    let url = reqwest::Url::parse(&endpoint).ok()?;
    let host = url.host_str()?;
    let local = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !local {
        return None;
    }
    url.port_or_known_default()
}
