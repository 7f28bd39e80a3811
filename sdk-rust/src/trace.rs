//! W3C trace context from the broker: the `traceparent` / `tracestate` fields of
//! `InvokeTool`, `RunStage` and `HandleEvent` (empty when the broker does not trace).
//!
//! The session runs each handler inside [`scope`]: [`current_trace_context`] then
//! answers for the task (stage hooks have no context object of their own), and with the
//! cargo feature `opentelemetry` the handler's future is polled with the broker's span
//! as the current OpenTelemetry context, so spans the handler starts are its children.
//! The `traceparent` is parsed here (version `00`, lowercase hex, non-zero ids) instead
//! of with `opentelemetry_sdk`'s propagator, so the feature adds only the
//! `opentelemetry` API crate. A malformed `traceparent` gives no OpenTelemetry context;
//! it is never an error.

use std::future::Future;

tokio::task_local! {
    static CURRENT: Trace;
}

/// The trace context of one call, as the broker sent it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Trace {
    pub(crate) traceparent: String,
    pub(crate) tracestate: String,
}

impl Trace {
    pub(crate) fn new(traceparent: String, tracestate: String) -> Trace {
        Trace {
            traceparent,
            tracestate,
        }
    }

    /// `traceparent`, `None` when empty.
    pub(crate) fn traceparent(&self) -> Option<&str> {
        (!self.traceparent.is_empty()).then_some(self.traceparent.as_str())
    }

    /// `tracestate`, `None` when empty.
    pub(crate) fn tracestate(&self) -> Option<&str> {
        (!self.tracestate.is_empty()).then_some(self.tracestate.as_str())
    }

    /// The broker's span as the parent context, or `None` without a valid `traceparent`.
    #[cfg(feature = "opentelemetry")]
    pub(crate) fn otel_parent(&self) -> Option<opentelemetry::Context> {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        let (trace_id, span_id, flags) = parse_traceparent(&self.traceparent)?;
        let state = if self.tracestate.is_empty() {
            TraceState::default()
        } else {
            self.tracestate.parse().unwrap_or_default()
        };
        let span = SpanContext::new(
            TraceId::from(trace_id),
            SpanId::from(span_id),
            TraceFlags::new(flags),
            true,
            state,
        );
        Some(opentelemetry::Context::new().with_remote_span_context(span))
    }
}

/// `00-<32 hex>-<16 hex>-<2 hex>` (lowercase) → (trace id, span id, flags); `None` when
/// malformed or when an id is all zeros (invalid per W3C Trace Context).
#[cfg(any(feature = "opentelemetry", test))]
pub(crate) fn parse_traceparent(traceparent: &str) -> Option<(u128, u64, u8)> {
    let b = traceparent.as_bytes();
    if b.len() != 55 || &b[..3] != b"00-" || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let hex = |s: &str| {
        s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    };
    let (t, s, f) = (
        &traceparent[3..35],
        &traceparent[36..52],
        &traceparent[53..],
    );
    if !hex(t) || !hex(s) || !hex(f) {
        return None;
    }
    let trace_id = u128::from_str_radix(t, 16).ok()?;
    let span_id = u64::from_str_radix(s, 16).ok()?;
    let flags = u8::from_str_radix(f, 16).ok()?;
    (trace_id != 0 && span_id != 0).then_some((trace_id, span_id, flags))
}

/// Runs `fut` (a handler's task) as part of `trace`: [`current_trace_context`] answers
/// inside it and, with the `opentelemetry` feature and a valid `traceparent`, the
/// broker's span is the current OpenTelemetry context while it is polled.
pub(crate) async fn scope<F: Future>(trace: Trace, fut: F) -> F::Output {
    if trace.traceparent.is_empty() {
        return fut.await;
    }
    #[cfg(feature = "opentelemetry")]
    if let Some(parent) = trace.otel_parent() {
        use opentelemetry::context::FutureExt;
        return CURRENT.scope(trace, fut.with_context(parent)).await;
    }
    CURRENT.scope(trace, fut).await
}

/// `(traceparent, tracestate)` of the tool call, stage hook or event handler running
/// in this task: the W3C trace context of the broker span it belongs to, as the broker
/// sent it (`tracestate` may be empty). `None` when the broker does not trace, or
/// outside a handler's task (a task the handler spawns does not inherit it).
///
/// Tool and event handlers also have [`CallContext::traceparent`] and
/// [`Event::traceparent`]; this is for stage hooks, which get only the
/// [`StageContext`](crate::StageContext).
///
/// [`CallContext::traceparent`]: crate::CallContext::traceparent
/// [`Event::traceparent`]: crate::Event::traceparent
pub fn current_trace_context() -> Option<(String, String)> {
    CURRENT
        .try_with(|t| (t.traceparent.clone(), t.tracestate.clone()))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_a_valid_traceparent() {
        assert_eq!(
            parse_traceparent(TP),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, 1))
        );
    }

    #[test]
    fn rejects_malformed_traceparents() {
        for bad in [
            "",
            "garbage",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473+-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-é",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn scope_sets_the_task_trace_context() {
        assert_eq!(current_trace_context(), None);
        let seen = scope(Trace::new(TP.into(), "a=1".into()), async {
            current_trace_context()
        })
        .await;
        assert_eq!(seen, Some((TP.to_string(), "a=1".to_string())));
        let untraced = scope(Trace::default(), async { current_trace_context() }).await;
        assert_eq!(untraced, None);
    }
}
