"""W3C trace context from the broker (InvokeTool / RunStage / HandleEvent `traceparent`,
`tracestate`) reaches handlers, and with OpenTelemetry installed their spans are children
of the broker's span; progress counts (`value`, `total`) reach the wire."""

import asyncio
import threading

import pytest

from hearth_plugin import Plugin, Sender, Stage, StageContext, current_trace_context, progress
from hearth_plugin.testing import ProgressReport, load

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"
TRACESTATE = "hearth=1,other=x"


def traced_plugin(tracer=None):
    """Tools (plain and async), a stage hook and an event handler that record what they saw."""
    seen = {}

    class Events(Plugin):
        def handle_event(self, sender):
            seen["event"] = (sender.traceparent, sender.tracestate, current_trace_context())

    plugin = Events("traced")

    def span(name):
        if tracer is None:
            return None
        with tracer.start_as_current_span(name) as s:
            return s

    @plugin.tool
    def plain(sender: Sender) -> str:
        """A plain handler (runs in the thread pool)."""
        seen["plain"] = (current_trace_context(), sender.traceparent, sender.tracestate,
                         threading.current_thread().name)
        span("plain_work")
        return "ok"

    @plugin.tool
    async def coro() -> str:
        """An async handler (runs on the loop)."""
        await asyncio.sleep(0)
        seen["coro"] = current_trace_context()
        span("coro_work")
        return "ok"

    @plugin.tool
    def counts() -> str:
        """Reports progress both ways."""
        progress("half", 0.5)
        progress("page 3", value=3, total=10)
        progress("items", value=7)
        progress()
        return "ok"

    def hook(ctx: StageContext) -> None:
        seen["stage"] = (ctx.traceparent, ctx.tracestate, current_trace_context())
        span("stage_work")

    original_start = plugin.start

    def start(sdk):
        sdk.register_stage(Stage.ON_INPUT, hook)
        return original_start(sdk)

    plugin.start = start  # type: ignore[method-assign]
    return plugin, seen


def test_trace_context_reaches_tools_stages_and_events():
    plugin, seen = traced_plugin()
    with load(plugin) as t:
        assert t.call("plain", traceparent=TRACEPARENT, tracestate=TRACESTATE).content == "ok"
        assert t.call("coro", traceparent=TRACEPARENT, tracestate=TRACESTATE).content == "ok"
        t.run_stage("on_input", raw_message="hi", traceparent=TRACEPARENT, tracestate=TRACESTATE)
        assert t.handle_event("/x y", traceparent=TRACEPARENT, tracestate=TRACESTATE).error == ""
    ctx, tp, ts, thread = seen["plain"]
    assert (ctx, tp, ts) == ((TRACEPARENT, TRACESTATE), TRACEPARENT, TRACESTATE)
    assert thread.startswith("hearth-handler")  # the context crossed into the pool thread
    assert seen["coro"] == (TRACEPARENT, TRACESTATE)
    assert seen["stage"] == (TRACEPARENT, TRACESTATE, (TRACEPARENT, TRACESTATE))
    assert seen["event"] == (TRACEPARENT, TRACESTATE, (TRACEPARENT, TRACESTATE))


def test_no_trace_context_when_the_broker_does_not_trace():
    plugin, seen = traced_plugin()
    with load(plugin) as t:
        t.call("plain")
        t.call("coro")
        t.run_stage("on_input", raw_message="hi")
    assert seen["plain"][:3] == (("", ""), "", "")
    assert seen["coro"] == ("", "")
    assert seen["stage"] == ("", "", ("", ""))
    assert current_trace_context() == ("", "")  # outside any call


def test_progress_counts_reach_the_wire():
    plugin, _ = traced_plugin()
    with load(plugin) as t:
        r = t.call("counts")
    assert r.progress == (ProgressReport("half", 0.5, 0.0, 0.0),
                          ProgressReport("page 3", pytest.approx(0.3), 3.0, 10.0),
                          ProgressReport("items", -1.0, 7.0, 0.0),
                          ProgressReport("", -1.0, 0.0, 0.0))


def test_progress_rejects_a_count_that_is_not_a_number():
    plugin = Plugin("bad_progress")

    @plugin.tool
    def bad() -> str:
        """Sends a bad count."""
        progress("x", value="many")  # type: ignore[arg-type]
        return "unreachable"

    with load(plugin) as t:
        r = t.call("bad")
    assert not r.success and "value must be a number" in r.error


# ------------------------------------------------------------------ OpenTelemetry


@pytest.fixture
def otel():
    """A local TracerProvider exporting to memory (the global provider is left alone)."""
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    yield provider.get_tracer("hearth-test"), exporter
    provider.shutdown()


def test_handler_spans_are_children_of_the_broker_span(otel):
    tracer, exporter = otel
    plugin, _ = traced_plugin(tracer)
    with load(plugin) as t:
        t.call("plain", traceparent=TRACEPARENT, tracestate=TRACESTATE)
        t.call("coro", traceparent=TRACEPARENT)
        t.run_stage("on_input", raw_message="hi", traceparent=TRACEPARENT)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(spans) == ["coro_work", "plain_work", "stage_work"]
    for s in spans.values():
        assert format(s.context.trace_id, "032x") == TRACE_ID, s.name
        assert s.parent is not None and format(s.parent.span_id, "016x") == SPAN_ID, s.name
        assert s.parent.is_remote
    assert spans["plain_work"].context.trace_state.get("hearth") == "1"


def test_without_or_with_a_malformed_traceparent_spans_are_roots(otel):
    tracer, exporter = otel
    plugin, seen = traced_plugin(tracer)
    with load(plugin) as t:
        assert t.call("plain").success
        bad = "00-" + "0" * 32 + "-" + SPAN_ID + "-01"  # all-zero trace id: invalid
        assert t.call("coro", traceparent=bad).success
        assert t.call("plain", traceparent="not a traceparent").success
    assert seen["plain"][0] == ("not a traceparent", "")  # exposed as sent, never an error
    spans = exporter.get_finished_spans()
    assert len(spans) == 3
    assert all(s.parent is None for s in spans)
    assert len({s.context.trace_id for s in spans}) == 3
