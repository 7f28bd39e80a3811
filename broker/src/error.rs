//! Broker errors and their one mapping to `tonic::Status`.

use tonic::{Code, Status};

/// Why a tool call did not produce a plugin's result. Every variant names the tool,
/// and the plugin where there is one.
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
    #[error("plugin {plugin} is not ready for tool {tool}: {reason}")]
    NotReady {
        /// Plugin name.
        plugin: String,
        /// Tool name.
        tool: String,
        /// State and cause.
        reason: String,
    },
    /// The plugin's session ended while the call was in flight.
    #[error("plugin {plugin} {reason} during {tool}")]
    PluginGone {
        /// Plugin name.
        plugin: String,
        /// Tool name.
        tool: String,
        /// What happened, e.g. "exited with exit status 1; restarting".
        reason: String,
    },
    /// No result within the call's timeout; the plugin was sent `Cancel`.
    #[error("plugin {plugin}: tool {tool} timed out after {after_ms} ms")]
    Timeout {
        /// Plugin name.
        plugin: String,
        /// Tool name.
        tool: String,
        /// The timeout that elapsed, in milliseconds.
        after_ms: u64,
    },
}

impl From<CallError> for Status {
    fn from(e: CallError) -> Status {
        let code = match &e {
            CallError::UnknownTool { .. } => Code::NotFound,
            CallError::InvalidArguments { .. } => Code::InvalidArgument,
            CallError::NotReady { .. } | CallError::PluginGone { .. } => Code::Unavailable,
            CallError::Timeout { .. } => Code::DeadlineExceeded,
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
    /// The operation did not complete in time.
    #[error("plugin {plugin}: {what}")]
    Failed {
        /// Plugin name.
        plugin: String,
        /// What failed.
        what: String,
    },
}

impl From<PluginError> for Status {
    fn from(e: PluginError) -> Status {
        let code = match &e {
            PluginError::Unknown(_) => Code::NotFound,
            PluginError::Load { .. } => Code::FailedPrecondition,
            PluginError::Failed { .. } => Code::Unavailable,
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
