//! The SDK's error type.

use hearth_proto::v1::RejectedItem;

/// Error type for plugin code: tool handlers, `validate`, `init`, `start` and `stop`
/// return it, so `?` works on any error and `"text".into()` builds one.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why serving a plugin failed. Each variant names what failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A variable the broker sets when it spawns a plugin is missing.
    #[error("environment variable {var} is not set (the broker sets it when it spawns a plugin)")]
    MissingEnv {
        /// The variable's name, e.g. `HEARTH_ADDR`.
        var: &'static str,
    },
    /// `HEARTH_ADDR` is neither `unix:///abs/path` nor `http://host:port`.
    #[error("broker address {addr:?} is neither unix:///abs/path nor http://host:port")]
    BadAddr {
        /// The address as given.
        addr: String,
    },
    /// Neither `HEARTH_TOKEN_FD` nor `HEARTH_TOKEN` is set.
    #[error(
        "no spawn token: neither HEARTH_TOKEN_FD nor HEARTH_TOKEN is set (the broker passes \
         the token in a pipe named by HEARTH_TOKEN_FD; set HEARTH_TOKEN for a manual run)"
    )]
    MissingToken,
    /// `HEARTH_TOKEN_FD` is not a file descriptor number, or the spawn token cannot be
    /// read from that fd.
    #[error("HEARTH_TOKEN_FD={value}: {detail}")]
    TokenFd {
        /// The variable's value as given.
        value: String,
        /// What went wrong, e.g. `cannot read the token: fd 3 is not open`.
        detail: String,
    },
    /// The spawn token cannot travel as gRPC metadata.
    #[error("plugin {plugin}: the spawn token is not a valid gRPC metadata value")]
    BadToken {
        /// The plugin's name.
        plugin: String,
    },
    /// Dialling the broker failed.
    #[error("connect to {addr} failed: {detail}")]
    Connect {
        /// The broker address.
        addr: String,
        /// The transport error with its causes.
        detail: String,
    },
    /// The broker refused to open the session (e.g. `UNAUTHENTICATED` for a bad token).
    #[error("plugin {plugin}: attach to {addr} failed: {} ({})", status.message(), status.code())]
    Attach {
        /// The plugin's name.
        plugin: String,
        /// The broker address.
        addr: String,
        /// The gRPC status the broker answered.
        status: Box<tonic::Status>,
    },
    /// The broker refused the registration as a whole.
    #[error("plugin {plugin}: registration rejected: {reason}{}", fmt_items(items))]
    Rejected {
        /// The plugin's name.
        plugin: String,
        /// The broker's reason.
        reason: String,
        /// The offending items, each with its reason.
        items: Vec<RejectedItem>,
    },
    /// Two tools of the plugin have the same name.
    #[error("plugin {plugin}: tool name {tool:?} is registered twice")]
    DuplicateTool {
        /// The plugin's name.
        plugin: String,
        /// The duplicated tool name.
        tool: String,
    },
    /// The same trigger (type and pattern) is registered twice.
    #[error("plugin {plugin}: trigger {trigger} is registered twice")]
    DuplicateTrigger {
        /// The plugin's name.
        plugin: String,
        /// The trigger, e.g. `command /weather`.
        trigger: String,
    },
    /// `Plugin::init` failed.
    #[error("plugin {plugin}: init failed: {source}")]
    Init {
        /// The plugin's name.
        plugin: String,
        /// What `init` returned.
        source: BoxError,
    },
    /// `Plugin::start` failed.
    #[error("plugin {plugin}: start failed: {source}")]
    Start {
        /// The plugin's name.
        plugin: String,
        /// What `start` returned.
        source: BoxError,
    },
    /// The session stream failed (broker gone, connection reset, …).
    #[error("plugin {plugin}: session stream failed: {} ({})", status.message(), status.code())]
    Stream {
        /// The plugin's name.
        plugin: String,
        /// The gRPC status of the failure.
        status: Box<tonic::Status>,
    },
    /// The broker closed the session before answering the registration.
    #[error("plugin {plugin}: broker closed the session before answering Register")]
    ClosedBeforeRegistered {
        /// The plugin's name.
        plugin: String,
    },
    /// The broker sent something the protocol does not allow at that point.
    #[error("plugin {plugin}: protocol error: {detail}")]
    Protocol {
        /// The plugin's name.
        plugin: String,
        /// What was wrong.
        detail: String,
    },
    /// The tokio runtime for [`serve`](crate::serve) could not be built.
    #[error("cannot start the tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl Error {
    /// Process exit code [`serve`](crate::serve) uses for this error: 3 for a rejected
    /// registration, 2 for a bad environment, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Rejected { .. } => 3,
            Error::MissingEnv { .. }
            | Error::MissingToken
            | Error::TokenFd { .. }
            | Error::BadAddr { .. }
            | Error::BadToken { .. } => 2,
            _ => 1,
        }
    }
}

fn fmt_items(items: &[RejectedItem]) -> String {
    items
        .iter()
        .map(|i| format!("; {} {}: {}", i.kind, i.name, i.reason))
        .collect()
}

/// `err` and its sources, joined with ": ".
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        cur = e.source();
    }
    text
}
