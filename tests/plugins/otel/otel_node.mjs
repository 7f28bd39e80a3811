// Hearth Node plugin for the broker's tracing tests: a tool whose handler starts a span
// with the OpenTelemetry SDK, exported over OTLP http/protobuf, so the test can check the
// plugin's span joined the broker's trace (trace id, parent = the broker's span).
//
// Tool: traced({text}) -> {traceparent: ctx.traceparent (what the handler saw), trace_id,
// span_id, parent_span_id: of the `plugin_work` span (hex, '' when none), text}. The span
// is exported (SimpleSpanProcessor) and force-flushed before the tool returns. The span is
// started with the ambient context (after an await), which the SDK set to the broker's
// span: api.context.with(parent, handler) + AsyncLocalStorageContextManager.
//
// Env (the broker passes them when it traces): OTEL_EXPORTER_OTLP_ENDPOINT (base URL; the
// exporter posts to <endpoint>/v1/traces), OTEL_SERVICE_NAME (resource `service.name`,
// default 'otel_node'). OTEL_EXPORTER_OTLP_PROTOCOL is not read: always http/protobuf.
// Needs the root devDependencies @opentelemetry/{api, sdk-trace, context-async-hooks,
// resources, exporter-trace-otlp-proto}.
import * as api from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';

const provider = new TracerProvider({
  resource: resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME || 'otel_node' }),
  // The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (and _TRACES_ENDPOINT) itself.
  spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter() })],
});
api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const tracer = provider.getTracer('otel_node');

export default {
  name: () => 'otel_node',
  start(sdk) {
    sdk.registerTool('traced', {
      description: 'Starts the span plugin_work inside the broker trace and exports it.',
      parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
    }, async ({ text }, ctx) => {
      await new Promise((resolve) => setImmediate(resolve));
      const span = tracer.startSpan('plugin_work', { attributes: { 'hearth.text': text } });
      const sc = span.spanContext();
      const parent = span.parentSpanContext;
      span.end();
      await provider.forceFlush();
      return { traceparent: ctx.traceparent, trace_id: sc.traceId, span_id: sc.spanId, parent_span_id: parent ? parent.spanId : '', text };
    });
  },
  stop: () => provider.shutdown(),
};
