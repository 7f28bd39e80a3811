//! Log output on stderr: `--log-format text` (for people; control and bidi characters in
//! fields escaped) or `json` (tracing-subscriber's JSON, one object per line).
//!
//! Log lines written inside a tool call or a turn carry that span's fields: `plugin`,
//! `tool`, `call_id` (tool calls), `conversation` (turns) and `trace_id` (32 hex, when
//! tracing is on). In JSON they are under `"span"`; in text they prefix the message.
//! The filter is `HEARTH_LOG` (EnvFilter syntax), default `info,rmcp=warn`.

/// The `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum LogFormat {
    /// One line per event, for people (timestamps, level, fields).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, the event's
    /// fields, and `span` (the innermost span's fields).
    Json,
}

/// Installs the global subscriber; call once at start.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HEARTH_LOG")
        // rmcp logs every notification at info; its warnings are what operators need.
        // The OTel SDK's internal logs: only its problems (dropped spans, failed exports).
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(
                "info,rmcp=warn,opentelemetry=warn,opentelemetry_sdk=warn",
            )
        });
    match format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .fmt_fields(crate::term::EscapedFields)
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init(),
    }
}
