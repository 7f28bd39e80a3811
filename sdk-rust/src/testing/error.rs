//! [`HarnessError`]: why the harness could not run something.

use hearth_proto::v1::RejectedItem;

/// Why the test harness (or the fake broker) could not do what was asked. A tool that
/// answers with a failed result is not an error: that is
/// [`ToolOutcome::success`](super::ToolOutcome::success) `== false`.
///
/// Each variant names the plugin and what was being done; the `Display` text is one
/// line, e.g. `tool hello: argument `name`: 5 is not of type "string"`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// Serving the plugin failed: `init` or `start` returned an error, two tools share
    /// a name, … (the SDK's own error, as `serve` would report it).
    #[error("{0}")]
    Serve(#[source] crate::Error),
    /// The broker's registration rules refused the plugin or some of its items
    /// (invalid tool name or JSON Schema, bad trigger, inject spec without a format,
    /// incompatible protocol version).
    /// [`allow_rejected`](super::HarnessBuilder::allow_rejected) keeps the accepted
    /// items instead.
    #[error(
        "plugin {plugin}: registration rejected: {reason}{}",
        items_text(items)
    )]
    Rejected {
        /// The plugin's name.
        plugin: String,
        /// The broker's reason.
        reason: String,
        /// Each refused item (`kind` tool / stage / trigger / inject / config_def), with
        /// its reason.
        items: Vec<RejectedItem>,
    },
    /// No registered tool has this name (the broker answers NOT_FOUND).
    #[error("unknown tool `{tool}`")]
    UnknownTool {
        /// The name asked for.
        tool: String,
    },
    /// The arguments are not an object or violate the tool's JSON Schema; the plugin
    /// was not called. `message` names the argument as the broker does, e.g.
    /// ``argument `city`: 3 is not of type "string"``.
    #[error("tool {tool}: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong, naming the argument.
        message: String,
    },
    /// No answer within the harness's timeout; the plugin was sent `Cancel` (for a
    /// call) and the harness gave up on it.
    #[error("plugin {plugin}: {what} timed out after {after_ms} ms")]
    Timeout {
        /// The plugin's name.
        plugin: String,
        /// What was waited for, e.g. `tool hello`, `stage hook on_input#0`.
        what: String,
        /// The timeout, in milliseconds.
        after_ms: u64,
    },
    /// The plugin's session ended (it returned from `serve`, panicked or closed the
    /// stream) before answering.
    #[error("plugin {plugin}: session ended during {what}: {reason}")]
    SessionEnded {
        /// The plugin's name.
        plugin: String,
        /// What was waited for.
        what: String,
        /// How it ended.
        reason: String,
    },
    /// The plugin sent something the protocol does not allow at that point.
    #[error("plugin {plugin}: protocol error: {detail}")]
    Protocol {
        /// The plugin's name.
        plugin: String,
        /// What was wrong.
        detail: String,
    },
    /// Setting up the fake host failed: a seeded setting of the wrong type, an empty
    /// key, …
    #[error("fake host: {detail}")]
    Host {
        /// What was refused, as the broker's host service would say it.
        detail: String,
    },
    /// `plugin.json` given to [`HarnessBuilder::manifest`](super::HarnessBuilder::manifest)
    /// could not be read or parsed.
    #[error("{path}: {detail}")]
    Manifest {
        /// The manifest path.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// The fake broker's socket could not be set up.
    #[error("fake broker: {0}")]
    Io(#[from] std::io::Error),
}

fn items_text(items: &[RejectedItem]) -> String {
    items
        .iter()
        .map(|i| format!("; {} {}: {}", i.kind, i.name, i.reason))
        .collect()
}
