"""Hearth Python plugin for the broker's tracing tests: a tool whose handler starts a span
with the OpenTelemetry SDK, exported over OTLP http/protobuf, so the test can check the
plugin's span joined the broker's trace (trace id, parent = the broker's span).

Tool: traced(text) -> {"traceparent": what the handler saw (hearth_plugin.current_trace_context),
"trace_id", "span_id", "parent_span_id": of the `plugin_work` span (hex, "" when none),
"text": text}. The span is exported (SimpleSpanProcessor) and force-flushed before the tool
returns.

Env (the broker passes them when it traces): OTEL_EXPORTER_OTLP_ENDPOINT (base URL; the
exporter posts to <endpoint>/v1/traces), OTEL_SERVICE_NAME (resource `service.name`,
default "otel_py"). OTEL_EXPORTER_OTLP_PROTOCOL is not read: this plugin always sends
http/protobuf. Needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http
(tests/requirements.txt).
"""
import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from hearth_plugin import current_trace_context, tool

_provider = TracerProvider(resource=Resource.create(
    {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "otel_py"}))
# The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (and _TRACES_ENDPOINT) itself.
_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
_tracer = _provider.get_tracer("otel_py")


@tool
def traced(text: str) -> dict[str, str]:
    """Starts the span `plugin_work` inside the broker's trace and exports it."""
    traceparent, _ = current_trace_context()
    with _tracer.start_as_current_span("plugin_work", attributes={"hearth.text": text}) as span:
        ctx = span.get_span_context()
        parent = getattr(span, "parent", None)
    _provider.force_flush()
    return {
        "traceparent": traceparent,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_span_id": format(parent.span_id, "016x") if parent is not None else "",
        "text": text,
    }
