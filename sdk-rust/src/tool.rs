//! Tools, Cyrene style: [`Tool`] with `definition` / `validate` / `execute`, and the
//! [`CallContext`] a running call sees.

use std::time::Duration;

use async_trait::async_trait;
use hearth_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::linkzone::AiTool;
use crate::trace::Trace;
use crate::{BoxError, Host};

/// A tool's arguments: the JSON object the LLM passed.
pub type Args = serde_json::Map<String, Value>;

/// What the LLM sees of a tool (Cyrene `ToolDefinition`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Tool name, unique across all plugins (prefix it with the plugin name).
    pub name: String,
    /// What the LLM reads to decide whether to call the tool.
    pub description: String,
    /// JSON Schema of the arguments object (`{"type": "object", ...}`).
    pub parameters: Value,
}

/// Outcome of a tool call (Cyrene `ToolResult`, same JSON shape, plus optional
/// structured `data`).
///
/// On the wire `output` becomes `content` and `data` becomes `data_json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// Name of the tool; filled in by the SDK when left empty.
    #[serde(default)]
    pub tool_name: String,
    /// Whether the call succeeded.
    pub success: bool,
    /// Result text for the LLM, in natural language.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// Error text when `success` is false.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Structured result, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ToolResult {
    /// A successful result with `output` for the LLM.
    pub fn ok(output: impl Into<String>) -> Self {
        ToolResult {
            success: true,
            output: output.into(),
            ..Default::default()
        }
    }

    /// A failed result with `error` for the LLM.
    pub fn err(error: impl Into<String>) -> Self {
        ToolResult {
            success: false,
            error: error.into(),
            ..Default::default()
        }
    }

    /// This result with structured `data` attached.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The wire form for call `call_id` of tool `tool`.
    pub(crate) fn into_wire(self, call_id: u64, tool: &str) -> pb::ToolResult {
        let error = if !self.success && self.error.is_empty() {
            format!("tool {tool} failed without an error message")
        } else {
            self.error
        };
        pb::ToolResult {
            call_id,
            success: self.success,
            content: self.output,
            data_json: self.data.map(|d| d.to_string()).unwrap_or_default(),
            error,
            content_blocks_json: String::new(),
        }
    }
}

/// A tool (Cyrene `Tool`). The SDK calls [`validate`](Tool::validate) and, only when it
/// passes, [`execute`](Tool::execute); a validation error becomes an error result.
///
/// Each call runs as its own tokio task, so many calls of one tool may run at once.
/// `execute` runs on the plugin's single-threaded runtime: move blocking or CPU-heavy
/// work to [`tokio::task::spawn_blocking`].
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// Name, description and JSON Schema of the tool. Called once, at registration.
    fn definition(&self) -> ToolDefinition;

    /// Checks the arguments before [`execute`](Tool::execute). The default accepts
    /// everything (the broker has already checked them against the schema).
    fn validate(&self, _args: &Args) -> Result<(), BoxError> {
        Ok(())
    }

    /// LinkZone `ai.tool` policies of the tool (call limits, confirmation, cooldown,
    /// timeout), sent with its definition. The default has none.
    fn ai_tool(&self) -> Option<AiTool> {
        None
    }

    /// Runs the tool. `Err` becomes a failed result carrying the error's text; so does
    /// a panic ("tool NAME panicked: …"). The plugin keeps serving either way.
    async fn execute(&self, ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError>;
}

/// Who a call is made for (LinkZone `sender`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// User id.
    pub user_id: String,
    /// Group id, empty outside groups.
    pub group_id: String,
    /// Input channel, e.g. `cli`.
    pub channel: String,
    /// Conversation / session id.
    pub session_id: String,
}

impl From<pb::Sender> for Caller {
    fn from(s: pb::Sender) -> Self {
        Caller {
            user_id: s.user_id,
            group_id: s.group_id,
            channel: s.channel,
            session_id: s.session_id,
        }
    }
}

/// What a running call can see: its id, caller, deadline and cancellation.
///
/// Cheap to clone; a clone may be moved into tasks the handler spawns.
#[derive(Clone, Debug)]
pub struct CallContext {
    call_id: u64,
    tool: String,
    plugin: String,
    caller: Caller,
    timeout: Option<Duration>,
    cancel: CancellationToken,
    out: Option<mpsc::UnboundedSender<pb::PluginMessage>>,
    host: Option<Host>,
    trace: Trace,
}

impl CallContext {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        call_id: u64,
        tool: String,
        plugin: String,
        caller: Caller,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        out: mpsc::UnboundedSender<pb::PluginMessage>,
        host: Host,
        trace: Trace,
    ) -> Self {
        CallContext {
            call_id,
            tool,
            plugin,
            caller,
            timeout,
            cancel,
            out: Some(out),
            host: Some(host),
            trace,
        }
    }

    /// A context attached to no session, for calling a tool directly (unit tests):
    /// call id 0, no deadline, never cancelled unless you cancel
    /// [`cancellation_token`](Self::cancellation_token); progress goes nowhere.
    pub fn standalone(plugin: impl Into<String>, tool: impl Into<String>) -> Self {
        CallContext {
            call_id: 0,
            tool: tool.into(),
            plugin: plugin.into(),
            caller: Caller::default(),
            timeout: None,
            cancel: CancellationToken::new(),
            out: None,
            host: None,
            trace: Trace::default(),
        }
    }

    /// This context with the W3C trace context `traceparent` / `tracestate`, as a
    /// tracing broker would send them (for calling a tool directly in tests).
    pub fn with_trace_context(
        mut self,
        traceparent: impl Into<String>,
        tracestate: impl Into<String>,
    ) -> Self {
        self.trace = Trace::new(traceparent.into(), tracestate.into());
        self
    }

    /// The W3C `traceparent` of the broker span this call belongs to
    /// (`00-<trace id>-<span id>-<flags>`, as the broker sent it); `None` when the
    /// broker does not trace.
    pub fn traceparent(&self) -> Option<&str> {
        self.trace.traceparent()
    }

    /// The W3C `tracestate` sent with [`traceparent`](Self::traceparent); `None` when
    /// empty.
    pub fn tracestate(&self) -> Option<&str> {
        self.trace.tracestate()
    }

    /// The broker's span as an OpenTelemetry parent context, for starting spans
    /// explicitly (`tracer.start_with_context(name, &ctx.otel_context())`). The SDK
    /// already polls the handler with it as the current context; without a valid
    /// `traceparent` this is [`opentelemetry::Context::current`].
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn otel_context(&self) -> opentelemetry::Context {
        self.trace
            .otel_parent()
            .unwrap_or_else(opentelemetry::Context::current)
    }

    /// The call's id, unique within the session.
    pub fn call_id(&self) -> u64 {
        self.call_id
    }

    /// Name of the tool being called.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Name the broker knows this plugin by (`HEARTH_PLUGIN`).
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Who the call is made for.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Time the broker gives the call before it answers the caller with a timeout.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The call's cancellation token: cancelled when the broker cancels the call
    /// (timeout, caller gone) or the plugin shuts down. The SDK also aborts the
    /// handler's task then; the token is for work the handler spawned elsewhere
    /// (other tasks, `spawn_blocking` loops).
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The broker's host services (settings, memory, input, …); `None` in a
    /// [`standalone`](Self::standalone) context.
    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }

    /// Whether the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes when the call is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// Tells the broker the call is still alive (extends its timeout, bounded).
    /// `fraction` is 0..=1 when known. Returns false when the session is gone.
    pub fn progress(&self, message: impl Into<String>, fraction: Option<f64>) -> bool {
        self.send_progress(message.into(), fraction.unwrap_or(-1.0), 0.0, 0.0)
    }

    /// [`progress`](Self::progress) as a count: `done` units of work of `total`
    /// (`None` when the total is unknown), e.g. `ctx.progress_count("page 3", 3.0,
    /// Some(10.0))` for "3 of 10". The broker passes the counts on to callers as they
    /// are (MCP `progress` / `total`); the fraction is derived from them when the total
    /// is known. Returns false when the session is gone.
    pub fn progress_count(
        &self,
        message: impl Into<String>,
        done: f64,
        total: Option<f64>,
    ) -> bool {
        let total = total.unwrap_or(0.0);
        let fraction = if total > 0.0 {
            (done / total).clamp(0.0, 1.0)
        } else {
            -1.0
        };
        self.send_progress(message.into(), fraction, done, total)
    }

    fn send_progress(&self, message: String, fraction: f64, done: f64, total: f64) -> bool {
        let Some(out) = &self.out else { return false };
        out.send(pb::PluginMessage {
            msg: Some(pb::plugin_message::Msg::Progress(pb::Progress {
                call_id: self.call_id,
                message,
                fraction,
                progress: done,
                total,
            })),
        })
        .is_ok()
    }
}
