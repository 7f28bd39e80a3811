//! Every metric, span and attribute name Hearth emits, in one place, so a rename in the
//! (still Development-status) OpenTelemetry GenAI conventions is a one-line change.
//!
//! GenAI names follow github:open-telemetry/semantic-conventions-genai as of 2026-09
//! (`client-inference.md`, `gen-ai-metrics.md`, `gen-ai-token-metrics.md`); their
//! Prometheus forms follow the OpenTelemetry spec's `prometheus_and_openmetrics.md`
//! (`.` → `_`, unit suffix `_seconds`, `_total` on counters, `{token}` dropped). See
//! docs/design/operators-research.md §1.4–1.6.

/// Buckets (seconds) of tool-call and hook durations: 0.5 ms … 60 s.
pub const CALL_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];
/// Buckets (seconds) of whole turns, as `gen_ai.invoke_agent.duration`: 0.1 … 409.6 s.
pub const TURN_BUCKETS: [f64; 13] = [
    0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6,
];
/// Buckets (seconds) the GenAI conventions give for `gen_ai.client.inference.duration`
/// and `gen_ai.execute_tool.duration`.
pub const GENAI_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

// Span names and attributes (GenAI semantic conventions).
/// Span of a whole turn.
pub const SPAN_INVOKE_AGENT: &str = "invoke_agent";
/// `gen_ai.operation.name`.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`.
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.request.model`.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.response.model`.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.response.finish_reasons` (string[]).
pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.usage.input_tokens`.
pub const USAGE_INPUT: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`.
pub const USAGE_OUTPUT: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.conversation.id`.
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.request.stream`.
pub const REQUEST_STREAM: &str = "gen_ai.request.stream";
/// `gen_ai.tool.name`.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.call.id`.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.type`.
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// `error.type`, from a closed set: `timeout`, `tool_error`, `plugin_gone`, `denied`,
/// `invalid_args`, `cancelled`, an HTTP status of an LLM API, `_OTHER`.
pub const ERROR_TYPE: &str = "error.type";
/// `server.address` of an LLM API.
pub const SERVER_ADDRESS: &str = "server.address";
/// `server.port` of an LLM API.
pub const SERVER_PORT: &str = "server.port";
/// Hearth's own: the plugin that served a tool call, hook or event.
pub const HEARTH_PLUGIN: &str = "hearth.plugin";
/// Hearth's own: the pipeline stage of a hook span.
pub const HEARTH_STAGE: &str = "hearth.stage";
/// Hearth's own: the hook id of a hook span.
pub const HEARTH_HOOK_ID: &str = "hearth.hook_id";
/// Hearth's own: the trigger pattern of an event span.
pub const HEARTH_TRIGGER: &str = "hearth.trigger";
/// Hearth's own: the LLM source (hearth.toml name) of a chat span.
pub const HEARTH_SOURCE: &str = "hearth.source";

/// `gen_ai.provider.name` for a built-in adapter name (the spec's well-known values
/// where one exists; otherwise the adapter's own name).
pub fn provider_name(adapter: &str) -> &str {
    match adapter {
        "gemini" => "gcp.gemini",
        "mistral" => "mistral_ai",
        "azure" | "azure-openai" => "azure.ai.openai",
        "bedrock" => "aws.bedrock",
        "xai" => "x_ai",
        other => other,
    }
}
