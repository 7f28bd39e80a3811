//! LinkZone events: what an event handler ([`Registrar::register_trigger`]) receives
//! when a message matched one of its triggers (`HandleEvent`), and `sender.reply`.
//!
//! [`Registrar::register_trigger`]: crate::Registrar::register_trigger

use std::time::Duration;

use hearth_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::linkzone::Trigger;
use crate::tool::Caller;
use crate::trace::Trace;
use crate::Host;

/// A message that matched one of the plugin's triggers (LinkZone `handleEvent(sender)`).
///
/// [`param`](Self::param) is LinkZone's `sender.param(i)`, [`reply`](Self::reply) its
/// `sender.reply(text)` (any number of times; each text reaches the user). The handler
/// returns when it is done: `Ok(())`, or `Err(e)`, which the broker logs. Cheap to
/// clone; a clone may be moved into tasks the handler spawns.
#[derive(Clone, Debug)]
pub struct Event {
    call_id: u64,
    plugin: String,
    message: String,
    params: Vec<String>,
    caller: Caller,
    trigger: Trigger,
    timeout: Option<Duration>,
    cancel: CancellationToken,
    out: Option<mpsc::UnboundedSender<pb::PluginMessage>>,
    host: Option<Host>,
    trace: Trace,
}

impl Event {
    /// The event of `HandleEvent` `ev` (whose trigger is `trigger`) in a session.
    pub(crate) fn from_wire(
        ev: pb::HandleEvent,
        trigger: Trigger,
        plugin: String,
        cancel: CancellationToken,
        out: mpsc::UnboundedSender<pb::PluginMessage>,
        host: Host,
    ) -> Event {
        Event {
            trace: Trace::new(ev.traceparent, ev.tracestate),
            call_id: ev.call_id,
            plugin,
            message: ev.message,
            params: ev.params,
            caller: ev.sender.map(Into::into).unwrap_or_default(),
            trigger,
            timeout: (ev.timeout_ms > 0).then(|| Duration::from_millis(ev.timeout_ms.into())),
            cancel,
            out: Some(out),
            host: Some(host),
        }
    }

    /// An event attached to no session, for calling a handler directly (unit tests):
    /// call id 0, no caller, no deadline; [`reply`](Self::reply) goes nowhere and
    /// returns false. The harness in `testing` (feature `testing`) runs handlers in a
    /// real session and collects their replies instead.
    pub fn standalone(
        plugin: impl Into<String>,
        trigger: Trigger,
        message: impl Into<String>,
        params: Vec<String>,
    ) -> Event {
        Event {
            call_id: 0,
            plugin: plugin.into(),
            message: message.into(),
            params,
            caller: Caller::default(),
            trigger,
            timeout: None,
            cancel: CancellationToken::new(),
            out: None,
            host: None,
            trace: Trace::default(),
        }
    }

    /// The W3C `traceparent` of the broker span this event belongs to (as the broker
    /// sent it); `None` when the broker does not trace.
    pub fn traceparent(&self) -> Option<&str> {
        self.trace.traceparent()
    }

    /// The W3C `tracestate` sent with [`traceparent`](Self::traceparent); `None` when
    /// empty.
    pub fn tracestate(&self) -> Option<&str> {
        self.trace.tracestate()
    }

    /// The broker's span as an OpenTelemetry parent context (see
    /// [`CallContext::otel_context`](crate::CallContext::otel_context)).
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn otel_context(&self) -> opentelemetry::Context {
        self.trace
            .otel_parent()
            .unwrap_or_else(opentelemetry::Context::current)
    }

    /// The event's id, unique within the session.
    pub fn call_id(&self) -> u64 {
        self.call_id
    }

    /// Name the broker knows this plugin by.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// The whole message that matched (for an event trigger, the event's text).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The parameters parsed from the message (see [`Trigger`]).
    pub fn params(&self) -> &[String] {
        &self.params
    }

    /// LinkZone `sender.param(i)`: parameter `i`, `None` past the end.
    pub fn param(&self, i: usize) -> Option<&str> {
        self.params.get(i).map(String::as_str)
    }

    /// Who sent the message.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The trigger that matched.
    pub fn trigger(&self) -> &Trigger {
        &self.trigger
    }

    /// Time the broker gives the handler, when it set one.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The broker's host services; `None` for a [`standalone`](Self::standalone) event.
    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }

    /// Cancelled when the broker cancels the event or the plugin shuts down.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// LinkZone `sender.reply(text)`: sends `text` to the user now (`Reply` on the
    /// session). Returns false when the session is gone (or the event is standalone).
    pub fn reply(&self, text: impl Into<String>) -> bool {
        let Some(out) = &self.out else { return false };
        out.send(pb::PluginMessage {
            msg: Some(pb::plugin_message::Msg::Reply(pb::Reply {
                call_id: self.call_id,
                text: text.into(),
            })),
        })
        .is_ok()
    }
}
