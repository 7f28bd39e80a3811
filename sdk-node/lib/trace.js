'use strict';

/**
 * W3C trace context from the broker (`traceparent` / `tracestate` on InvokeTool,
 * RunStage and HandleEvent; empty when the broker does not trace) and the optional
 * `@opentelemetry/api` peer dependency.
 *
 * When `@opentelemetry/api` can be required, each traced handler runs inside
 * `api.context.with(parent, …)`, `parent` being the broker's span as a remote span
 * context: spans the handler starts (with a context manager registered, e.g. the
 * SDK's AsyncLocalStorageContextManager) are children of the broker's span. The
 * parent is built from the parsed `traceparent`, not with `api.propagation.extract`,
 * which is a no-op until an SDK registers a propagator. The API is required on the
 * first traced call, so untraced sessions never load it. A malformed `traceparent`
 * gives no context; it is never an error.
 */

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const ALL_ZERO = /^0+$/;

/** @type {any} `@opentelemetry/api`, null when absent; undefined until first needed. */
let api;

/** @returns {any} the `@opentelemetry/api` module, or null when it is not installed. */
function otelApi() {
  if (api === undefined) {
    try {
      api = require('@opentelemetry/api');
    } catch {
      api = null;
    }
  }
  return api;
}

/**
 * A `traceparent` of version 00 → its ids and flags; null when malformed or when an id
 * is all zeros (invalid per W3C Trace Context).
 * @param {string | null | undefined} traceparent
 * @returns {{traceId: string, spanId: string, traceFlags: number} | null}
 */
function parseTraceparent(traceparent) {
  const m = TRACEPARENT.exec(traceparent || '');
  if (!m || ALL_ZERO.test(m[1]) || ALL_ZERO.test(m[2])) return null;
  return { traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16) };
}

/**
 * The OpenTelemetry context whose active span is the broker's (remote) span, or
 * undefined when there is no valid `traceparent` or `@opentelemetry/api` is absent.
 * @param {string | null | undefined} traceparent
 * @param {string | null | undefined} tracestate
 * @returns {any}
 */
function otelContext(traceparent, tracestate) {
  if (!traceparent) return undefined;
  const parsed = parseTraceparent(traceparent);
  const otel = parsed && otelApi();
  if (!parsed || !otel) return undefined;
  try {
    /** @type {any} */
    const spanContext = { ...parsed, isRemote: true };
    if (tracestate && typeof otel.createTraceState === 'function') spanContext.traceState = otel.createTraceState(tracestate);
    return otel.trace.setSpanContext(otel.ROOT_CONTEXT, spanContext);
  } catch {
    return undefined;
  }
}

/**
 * The trace fields every handler context carries.
 * @param {{traceparent?: string | null, tracestate?: string | null}} msg InvokeTool, RunStage or HandleEvent
 * @returns {{traceparent: string, tracestate: string, otelContext: any}}
 */
function traceFields(msg) {
  const traceparent = msg.traceparent || '';
  const tracestate = msg.tracestate || '';
  return { traceparent, tracestate, otelContext: otelContext(traceparent, tracestate) };
}

/**
 * Runs `fn` with `ctx` as the active OpenTelemetry context (just runs it when undefined).
 * @template T
 * @param {any} ctx
 * @param {() => T} fn
 * @returns {T}
 */
function runIn(ctx, fn) {
  return ctx === undefined ? fn() : otelApi().context.with(ctx, fn);
}

module.exports = { parseTraceparent, otelContext, traceFields, runIn };
