//! W3C trace context from the broker (InvokeTool / RunStage / HandleEvent `traceparent`,
//! `tracestate`) reaches handlers, and with the `opentelemetry` feature their spans are
//! children of the broker's span; progress counts reach the wire.

use std::sync::{Arc, Mutex};

use hearth_plugin::testing::{Harness, ProgressReport};
use hearth_plugin::{
    async_trait, current_trace_context, BoxError, CallContext, Event, Plugin, PluginMetadata,
    Registrar, Stage, StageContext, ToolDef, Trigger,
};
use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::{json, Value};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN_ID: &str = "00f067aa0ba902b7";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACESTATE: &str = "hearth=1,other=x";

/// What one handler saw: traceparent, tracestate, current_trace_context().
type Seen = (Option<String>, Option<String>, Option<(String, String)>);

#[derive(Default, Clone)]
struct Record(Arc<Mutex<Vec<(&'static str, Seen)>>>);

impl Record {
    fn push(&self, who: &'static str, seen: Seen) {
        self.0.lock().unwrap().push((who, seen));
    }

    fn take(&self) -> Vec<(&'static str, Seen)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct Traced {
    seen: Record,
    tracer: opentelemetry_sdk::trace::SdkTracer,
}

#[async_trait]
impl Plugin for Traced {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "traced".into(),
            version: "1.0.0".into(),
            ..Default::default()
        }
    }

    async fn start(&mut self, sdk: &mut Registrar) -> Result<(), BoxError> {
        let (seen, tracer) = (self.seen.clone(), self.tracer.clone());
        sdk.register_tool_with_context(
            "traced",
            ToolDef::default(),
            move |ctx: CallContext, _args: Value| {
                let (seen, tracer) = (seen.clone(), tracer.clone());
                async move {
                    seen.push(
                        "tool",
                        (
                            ctx.traceparent().map(str::to_string),
                            ctx.tracestate().map(str::to_string),
                            current_trace_context(),
                        ),
                    );
                    tokio::task::yield_now().await;
                    // The handler runs inside the broker's context: a span started
                    // with the ambient context is its child.
                    tracer.in_span("tool_work", |_| {});
                    // And explicitly, from the call's context.
                    let span = tracer.start_with_context("explicit_work", &ctx.otel_context());
                    drop(span);
                    Ok::<_, String>(json!("ok"))
                }
            },
        )?;
        sdk.register_tool_with_context(
            "counts",
            ToolDef::default(),
            |ctx: CallContext, _args: Value| async move {
                ctx.progress("half", Some(0.5));
                ctx.progress_count("page 3", 3.0, Some(10.0));
                ctx.progress_count("items", 7.0, None);
                ctx.progress("none", None);
                Ok::<_, String>(json!("ok"))
            },
        )?;
        let (seen, tracer) = (self.seen.clone(), self.tracer.clone());
        sdk.register_stage(Stage::OnInput, move |ctx: StageContext| {
            let (seen, tracer) = (seen.clone(), tracer.clone());
            async move {
                seen.push("stage", (None, None, current_trace_context()));
                tracer.in_span("stage_work", |_| {});
                Ok::<_, String>(ctx)
            }
        });
        let seen = self.seen.clone();
        sdk.register_trigger(Trigger::Command("/x".into()), move |ev: Event| {
            let seen = seen.clone();
            async move {
                let parent = ev.otel_context().span().span_context().clone();
                assert_eq!(parent.span_id().to_string(), SPAN_ID);
                seen.push(
                    "event",
                    (
                        ev.traceparent().map(str::to_string),
                        ev.tracestate().map(str::to_string),
                        current_trace_context(),
                    ),
                );
                Ok::<_, String>(())
            }
        })?;
        Ok(())
    }
}

fn tracer() -> (SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    (provider, exporter)
}

async fn start() -> (Harness, Record, SdkTracerProvider, InMemorySpanExporter) {
    let (provider, exporter) = tracer();
    let seen = Record::default();
    let plugin = Traced {
        seen: seen.clone(),
        tracer: provider.tracer("hearth-test"),
    };
    (
        Harness::start(plugin).await.unwrap(),
        seen,
        provider,
        exporter,
    )
}

#[tokio::test]
async fn trace_context_reaches_tools_stages_and_events() {
    let (t, seen, _provider, exporter) = start().await;
    t.set_trace_context(TRACEPARENT, TRACESTATE);
    assert!(t.call("traced", json!({})).await.unwrap().success);
    t.run_stage(Stage::OnInput, StageContext::default())
        .await
        .unwrap();
    let ev = t
        .deliver(&Trigger::Command("/x".into()), "/x", vec![])
        .await;
    assert_eq!(ev.unwrap().error, None);

    let both = Some((TRACEPARENT.to_string(), TRACESTATE.to_string()));
    let full = (
        Some(TRACEPARENT.to_string()),
        Some(TRACESTATE.to_string()),
        both.clone(),
    );
    assert_eq!(
        seen.take(),
        vec![
            ("tool", full.clone()),
            ("stage", (None, None, both)),
            ("event", full)
        ]
    );

    let spans = exporter.get_finished_spans().unwrap();
    let mut names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    names.sort();
    assert_eq!(names, ["explicit_work", "stage_work", "tool_work"]);
    for s in &spans {
        assert_eq!(
            s.span_context.trace_id().to_string(),
            TRACE_ID,
            "{}",
            s.name
        );
        assert_eq!(s.parent_span_id.to_string(), SPAN_ID, "{}", s.name);
        assert!(s.parent_span_is_remote, "{}", s.name);
        assert_eq!(s.span_context.trace_state().get("hearth"), Some("1"));
    }
}

#[tokio::test]
async fn without_or_with_a_malformed_traceparent_spans_are_roots() {
    let (t, seen, _provider, exporter) = start().await;
    assert!(t.call("traced", json!({})).await.unwrap().success);
    t.set_trace_context("not a traceparent", "");
    assert!(t.call("traced", json!({})).await.unwrap().success);
    t.set_trace_context(format!("00-{}-{SPAN_ID}-01", "0".repeat(32)), "");
    assert!(t.call("traced", json!({})).await.unwrap().success);
    let seen = seen.take();
    assert_eq!(seen[0].1, (None, None, None));
    // Exposed as the broker sent it, never an error.
    assert_eq!(seen[1].1 .0.as_deref(), Some("not a traceparent"));
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 6);
    for s in &spans {
        assert!(!s.parent_span_is_remote, "{}", s.name);
        assert_eq!(s.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    }
}

#[tokio::test]
async fn progress_counts_reach_the_wire() {
    let (t, _, _provider, _) = start().await;
    let r = t.call("counts", json!({})).await.unwrap();
    let got: Vec<(String, Option<f64>, f64, f64)> = r
        .progress_reports
        .into_iter()
        .map(|p: ProgressReport| (p.message, p.fraction, p.progress, p.total))
        .collect();
    assert_eq!(
        got,
        [
            ("half".to_string(), Some(0.5), 0.0, 0.0),
            ("page 3".to_string(), Some(0.3), 3.0, 10.0),
            ("items".to_string(), None, 7.0, 0.0),
            ("none".to_string(), None, 0.0, 0.0),
        ]
    );
    assert_eq!(r.progress, ["half", "page 3", "items", "none"]);
}

#[test]
fn a_standalone_context_carries_a_given_trace_context() {
    let ctx = CallContext::standalone("p", "t");
    assert_eq!((ctx.traceparent(), ctx.tracestate()), (None, None));
    let ctx = ctx.with_trace_context(TRACEPARENT, "");
    assert_eq!(
        (ctx.traceparent(), ctx.tracestate()),
        (Some(TRACEPARENT), None)
    );
    let span = ctx.otel_context().span().span_context().clone();
    assert_eq!(span.trace_id().to_string(), TRACE_ID);
    assert!(span.is_remote());
}
