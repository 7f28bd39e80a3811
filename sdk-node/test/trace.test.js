'use strict';

// W3C trace context from the broker (InvokeTool / RunStage / HandleEvent `traceparent`,
// `tracestate`) reaches handlers as ctx.traceparent / ctx.tracestate / ctx.otelContext;
// with @opentelemetry/api and an SDK registered, a handler's spans are children of the
// broker's span. Progress counts ({progress, total}) reach the wire.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const api = require('@opentelemetry/api');
const { TracerProvider, SimpleSpanProcessor, InMemorySpanExporter } = require('@opentelemetry/sdk-trace');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { load } = require('hearth-plugin/testing');
const { parseTraceparent } = require('../lib/trace');

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN_ID = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${SPAN_ID}-01`;
const TRACESTATE = 'hearth=1,other=x';

const exporter = new InMemorySpanExporter();
const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
const tracer = provider.getTracer('hearth-test');
const contextManager = new AsyncLocalStorageContextManager();

/** What each handler saw, by handler. */
const seen = {};

/** A span started after an await, as real handlers do (needs the async context manager). */
async function work(name) {
  await new Promise((resolve) => setTimeout(resolve, 1));
  tracer.startSpan(name).end();
}

const plugin = {
  name: () => 'traced',
  start(sdk) {
    sdk.registerTool('traced', { description: 'records its trace context', parameters: { type: 'object', properties: {} } }, async (_args, ctx) => {
      seen.tool = { traceparent: ctx.traceparent, tracestate: ctx.tracestate, otelContext: ctx.otelContext };
      await work('tool_work');
      return 'ok';
    });
    sdk.registerTool('counts', { description: 'reports progress', parameters: { type: 'object', properties: {} } }, (_args, ctx) => {
      ctx.progress('half', 0.5);
      ctx.progress('page 3', { progress: 3, total: 10 });
      ctx.progress('items', { progress: 7 });
      ctx.progress('explicit', { progress: 1, total: 4, fraction: 0.3 });
      ctx.progress('none');
      return 'ok';
    });
    sdk.registerStage('on_input', async (_ctx, info) => {
      seen.stage = { traceparent: info.traceparent, tracestate: info.tracestate, hasContext: info.otelContext !== undefined };
      await work('stage_work');
    });
  },
};

describe('trace context', () => {
  let t;
  before(async () => {
    api.context.setGlobalContextManager(contextManager.enable());
    t = await load(plugin);
  });
  after(async () => {
    await t.close();
    api.context.disable();
    await provider.shutdown();
  });

  it('reaches tool handlers and stage hooks, and their spans join the broker trace', async () => {
    exporter.reset();
    assert.equal((await t.call('traced', {}, { traceparent: TRACEPARENT, tracestate: TRACESTATE })).content, 'ok');
    assert.equal(seen.tool.traceparent, TRACEPARENT);
    assert.equal(seen.tool.tracestate, TRACESTATE);
    const sc = api.trace.getSpanContext(seen.tool.otelContext);
    assert.deepEqual({ traceId: sc.traceId, spanId: sc.spanId, isRemote: sc.isRemote }, { traceId: TRACE_ID, spanId: SPAN_ID, isRemote: true });
    assert.equal(sc.traceState.get('hearth'), '1');

    await t.runStage('on_input', { rawMessage: 'hi' }, { traceparent: TRACEPARENT });
    assert.deepEqual(seen.stage, { traceparent: TRACEPARENT, tracestate: '', hasContext: true });

    const spans = Object.fromEntries(exporter.getFinishedSpans().map((s) => [s.name, s]));
    assert.deepEqual(Object.keys(spans).sort(), ['stage_work', 'tool_work']);
    for (const s of Object.values(spans)) {
      assert.equal(s.spanContext().traceId, TRACE_ID, s.name);
      assert.equal(s.parentSpanContext && s.parentSpanContext.spanId, SPAN_ID, s.name);
    }
  });

  it('without or with a malformed traceparent: empty fields, no context, root spans', async () => {
    exporter.reset();
    await t.call('traced', {});
    assert.deepEqual(seen.tool, { traceparent: '', tracestate: '', otelContext: undefined });
    for (const bad of ['garbage', `00-${'0'.repeat(32)}-${SPAN_ID}-01`, `00-${TRACE_ID}-${'0'.repeat(16)}-01`, `00-${TRACE_ID.toUpperCase()}-${SPAN_ID}-01`]) {
      const r = await t.call('traced', {}, { traceparent: bad });
      assert.equal(r.success, true, bad);
      assert.equal(seen.tool.traceparent, bad); // exposed as the broker sent it
      assert.equal(seen.tool.otelContext, undefined, bad);
    }
    const spans = exporter.getFinishedSpans();
    assert.equal(spans.length, 5);
    for (const s of spans) assert.equal(s.parentSpanContext, undefined);
  });

  it('parseTraceparent accepts version 00 only, with non-zero ids', () => {
    assert.deepEqual(parseTraceparent(TRACEPARENT), { traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: 1 });
    assert.equal(parseTraceparent(`01-${TRACE_ID}-${SPAN_ID}-01`), null);
    assert.equal(parseTraceparent(`${TRACEPARENT}-extra`), null);
    assert.equal(parseTraceparent(''), null);
  });

  it('progress counts reach the wire', async () => {
    const r = await t.call('counts', {});
    assert.deepEqual(r.progress, [
      { message: 'half', fraction: 0.5, progress: 0, total: 0 },
      { message: 'page 3', fraction: 0.3, progress: 3, total: 10 },
      { message: 'items', fraction: null, progress: 7, total: 0 },
      { message: 'explicit', fraction: 0.3, progress: 1, total: 4 },
      { message: 'none', fraction: null, progress: 0, total: 0 },
    ]);
  });
});
