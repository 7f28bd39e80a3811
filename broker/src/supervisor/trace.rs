//! `hearth dev --trace`: every message on a plugin's session, decoded, one line each
//! (tracing target `hearth_broker::trace`, level info) — but the heartbeat (`Ping` /
//! `Pong`, every 2 s), which would bury the rest. Off by default, at the cost of one
//! relaxed atomic load per message.

use std::sync::atomic::{AtomicBool, Ordering};

use hearth_proto::v1::host_message::Msg as HostMsg;
use hearth_proto::v1::plugin_message::Msg as PluginMsg;
use hearth_proto::v1::HostMessage;
use tokio::sync::mpsc;
use tonic::Status;

/// Longest traced message text, in bytes; the rest is cut with a note of its size.
const MAX_LINE: usize = 4000;

static ON: AtomicBool = AtomicBool::new(false);

/// Turns tracing of session messages on for the whole broker process.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether session messages are traced.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

fn line(text: String) -> String {
    if text.len() <= MAX_LINE {
        return text;
    }
    let mut cut = MAX_LINE;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…[{} bytes in all]", &text[..cut], text.len())
}

/// Traces a message the plugin sent.
pub fn inbound(plugin: &str, msg: &PluginMsg) {
    if enabled() && !matches!(msg, PluginMsg::Pong(_)) {
        tracing::info!(target: "hearth_broker::trace", "{plugin} → broker {}", line(format!("{msg:?}")));
    }
}

/// Returns `rx`, or when tracing is on a receiver fed through a task that traces each
/// message the broker sends `plugin`.
pub fn outbound(
    plugin: &str,
    mut rx: mpsc::Receiver<Result<HostMessage, Status>>,
) -> mpsc::Receiver<Result<HostMessage, Status>> {
    if !enabled() {
        return rx;
    }
    let (tx, traced) = mpsc::channel(1);
    let plugin = plugin.to_string();
    tokio::spawn(async move {
        while let Some(item) = rx.recv().await {
            match &item {
                Ok(HostMessage {
                    msg: Some(HostMsg::Ping(_)),
                }) => {}
                Ok(HostMessage { msg: Some(m) }) => tracing::info!(
                    target: "hearth_broker::trace",
                    "broker → {plugin} {}",
                    line(format!("{m:?}"))
                ),
                Ok(_) => {}
                Err(s) => tracing::info!(
                    target: "hearth_broker::trace",
                    "broker → {plugin} ends the session: {:?} {}",
                    s.code(),
                    s.message()
                ),
            }
            if tx.send(item).await.is_err() {
                break;
            }
        }
    });
    traced
}
