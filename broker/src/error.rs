//! Broker errors and their one mapping to `tonic::Status`.

use std::fmt;

use hearth_proto::v1::Stage;
use tonic::{Code, Status};

/// What a call to a plugin was for, as errors and logs name it: `tool calc_eval`,
/// `stage pre_action hook h-1`, `event handler of `/weather``.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A tool call (`InvokeTool`).
    Tool(String),
    /// A stage hook (`RunStage`).
    Hook {
        /// The stage.
        stage: Stage,
        /// The plugin's id of the hook.
        hook_id: String,
    },
    /// A LinkZone trigger's event handler (`HandleEvent`).
    Event {
        /// The trigger's pattern (`/weather`, `message`).
        trigger: String,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tool(name) => write!(f, "tool {name}"),
            Target::Hook { stage, hook_id } => write!(
                f,
                "stage {} hook {hook_id}",
                hearth_proto::stage_name(*stage)
            ),
            Target::Event { trigger } => write!(f, "event handler of `{trigger}`"),
        }
    }
}

/// Why a call to a plugin (tool, stage hook or event handler) did not produce the
/// plugin's answer. Every variant names what was called, and the plugin where there is
/// one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No ready plugin offers this tool.
    #[error("unknown tool `{tool}`")]
    UnknownTool {
        /// Tool name as asked.
        tool: String,
    },
    /// The arguments are not a JSON object or violate the tool's schema; the plugin
    /// was not called.
    #[error("tool {tool}: {message}")]
    InvalidArguments {
        /// Tool name.
        tool: String,
        /// Names the argument, e.g. "argument `expression`: 12 is not of type \"string\"".
        message: String,
    },
    /// The plugin is not ready (restarting, failed or stopped) and did not become
    /// ready within the wait bound.
    #[error("plugin {plugin} is not ready for {target}: {reason}")]
    NotReady {
        /// Plugin name.
        plugin: String,
        /// What was called.
        target: Target,
        /// State and cause.
        reason: String,
    },
    /// The plugin's session ended while the call was in flight.
    #[error("plugin {plugin} {reason} during {target}")]
    PluginGone {
        /// Plugin name.
        plugin: String,
        /// What was called.
        target: Target,
        /// What happened, e.g. "exited with exit status 1; restarting".
        reason: String,
    },
    /// No result within the call's timeout; the plugin was sent `Cancel`.
    #[error("plugin {plugin}: {target} timed out after {after_ms} ms")]
    Timeout {
        /// Plugin name.
        plugin: String,
        /// What was called.
        target: Target,
        /// The timeout that elapsed, in milliseconds.
        after_ms: u64,
    },
    /// The plugin declares `max_concurrency` and that many of its calls stayed in
    /// flight for the whole timeout: this call was never sent.
    #[error("plugin {plugin}: {target} was not sent: {} of the plugin (its max_concurrency) stayed in flight for {waited_ms} ms", crate::term::count(*.max_concurrency as usize, "call", "calls"))]
    Saturated {
        /// Plugin name.
        plugin: String,
        /// What was called.
        target: Target,
        /// The plugin's `max_concurrency`.
        max_concurrency: u32,
        /// How long the call waited for a free slot, in milliseconds.
        waited_ms: u64,
    },
    /// The call to a plugin on a plugin host is larger than the NATS server takes in
    /// one message: it was never sent.
    #[error("plugin {plugin}: {target} was not sent: the call is {bytes} bytes, more than the NATS server takes in one message (max_payload {max} bytes)")]
    TooLarge {
        /// Plugin name.
        plugin: String,
        /// What was called.
        target: Target,
        /// The encoded call's size, in bytes.
        bytes: usize,
        /// The server's `max_payload`, in bytes.
        max: usize,
    },
}

impl CallError {
    /// The call never reached the plugin (unknown tool, bad arguments, plugin not
    /// ready, no free slot): nothing ran.
    pub fn not_sent(&self) -> bool {
        matches!(
            self,
            CallError::UnknownTool { .. }
                | CallError::InvalidArguments { .. }
                | CallError::NotReady { .. }
                | CallError::Saturated { .. }
                | CallError::TooLarge { .. }
        )
    }
}

impl CallError {
    /// The low-cardinality `error.type` of this error (spans, metrics).
    pub fn error_type(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. }
            | CallError::InvalidArguments { .. }
            | CallError::TooLarge { .. } => "invalid_args",
            CallError::NotReady { .. } | CallError::PluginGone { .. } => "plugin_gone",
            CallError::Timeout { .. } => "timeout",
            CallError::Saturated { .. } => "denied",
        }
    }
}

impl From<CallError> for Status {
    fn from(e: CallError) -> Status {
        let code = match &e {
            CallError::UnknownTool { .. } => Code::NotFound,
            CallError::InvalidArguments { .. } => Code::InvalidArgument,
            CallError::NotReady { .. } | CallError::PluginGone { .. } => Code::Unavailable,
            CallError::Timeout { .. } | CallError::Saturated { .. } => Code::DeadlineExceeded,
            CallError::TooLarge { .. } => Code::ResourceExhausted,
        };
        Status::new(code, e.to_string())
    }
}

/// Errors of operating on plugins (admin operations).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// No plugin of this name is loaded.
    #[error("unknown plugin `{0}`")]
    Unknown(String),
    /// The plugin directory could not be loaded (manifest, entry, name in use).
    #[error("plugin {plugin}: {reason}")]
    Load {
        /// Plugin (or directory) name.
        plugin: String,
        /// Why, naming the file or field.
        reason: String,
    },
    /// The operation failed or did not complete in time.
    #[error("plugin {plugin}: {what}")]
    Failed {
        /// Plugin name.
        plugin: String,
        /// What failed.
        what: String,
    },
    /// A newer operation on the plugin (a later reload, a restart, an unload, a
    /// process attached by hand) replaced this one before it completed.
    #[error("plugin {plugin}: {why}")]
    Superseded {
        /// Plugin name.
        plugin: String,
        /// What replaced it.
        why: String,
    },
}

impl From<PluginError> for Status {
    fn from(e: PluginError) -> Status {
        let code = match &e {
            PluginError::Unknown(_) => Code::NotFound,
            PluginError::Load { .. } => Code::FailedPrecondition,
            PluginError::Failed { .. } => Code::Unavailable,
            PluginError::Superseded { .. } => Code::Aborted,
        };
        Status::new(code, e.to_string())
    }
}

impl From<crate::storage::StorageError> for Status {
    /// NOT_FOUND for a missing key or entity, INVALID_ARGUMENT for a bad request,
    /// INTERNAL (with the file and operation) for anything else.
    fn from(e: crate::storage::StorageError) -> Status {
        use crate::storage::StorageError as E;
        let code = match &e {
            E::NotFound { .. } => Code::NotFound,
            E::Invalid { .. } => Code::InvalidArgument,
            _ => Code::Internal,
        };
        Status::new(code, e.to_string())
    }
}
