'use strict';

/**
 * HomeAgent stage hooks: stage names ↔ wire enum, and StageContext wire ↔ the plain
 * object handlers see (camelCase; `*_json` fields parsed: contextMsgs, toolCalls[].arguments,
 * toolResults[].result, extra; `response` is a string or null).
 */

const { DeclarationError } = require('./spec');

/** HomeAgent stage names, in pipeline order; the wire enum is index + 1. */
const STAGES = ['on_input', 'pre_action', 'post_action', 'before_toolcall', 'after_toolcall', 'before_output', 'after_output'];

/** Stage name constants, as the HomeAgent SDK names them (`Stage.OnInput` = "on_input"). */
const Stage = Object.freeze({
  OnInput: 'on_input',
  PreAction: 'pre_action',
  PostAction: 'post_action',
  BeforeToolcall: 'before_toolcall',
  AfterToolcall: 'after_toolcall',
  BeforeOutput: 'before_output',
  AfterOutput: 'after_output',
});

/**
 * A stage name ("on_input") or wire number (1..7) → wire number.
 * @param {unknown} stage
 * @param {string} plugin
 * @returns {number}
 */
function stageNumber(stage, plugin) {
  if (typeof stage === 'number' && Number.isInteger(stage) && stage >= 1 && stage <= 7) return stage;
  const i = typeof stage === 'string' ? STAGES.indexOf(stage.toLowerCase()) : -1;
  if (i < 0) throw new DeclarationError(`plugin ${plugin}: unknown stage ${JSON.stringify(stage)} (expected one of ${STAGES.join(', ')})`);
  return i + 1;
}

/** @param {string} text @param {unknown} empty */
const parse = (text, empty) => (text ? JSON.parse(text) : empty);
/** @param {unknown} v */
const text = (v) => (v === undefined || v === null ? '' : JSON.stringify(v));

/** The state a context from the wire keeps: the wire message and the lazy fields used. */
const ST = Symbol('hearth.stageState');

/** The lazy fields: name, bit, decoder (wire → handler value), encoder (handler value → wire field). */
const LAZY = [
  ['contextMsgs', 1, (/** @type {any} */ c) => parse(c.contextMsgsJson, []), 'contextMsgsJson', (/** @type {any} */ v) => text(v)],
  ['tokenUsage', 2, (/** @type {any} */ c) => {
    /** @type {Record<string, number>} */
    const out = {};
    for (const [k, v] of Object.entries(c.tokenUsage || {})) out[k] = Number(v);
    return out;
  }, 'tokenUsage', (/** @type {any} */ v) => Object.fromEntries(Object.entries(v || {}).map(([k, n]) => [k, Math.trunc(Number(n) || 0)]))],
  ['toolCalls', 4, (/** @type {any} */ c) => (c.toolCalls || []).map((/** @type {any} */ t) => ({
    id: t.id, name: t.name, plugin: t.plugin, arguments: parse(t.argumentsJson, {}), deny: t.deny, denyReason: t.denyReason,
  })), 'toolCalls', (/** @type {any} */ v) => (v || []).map((/** @type {any} */ t) => ({
    id: String(t.id || ''), name: String(t.name || ''), plugin: String(t.plugin || ''), argumentsJson: text(t.arguments), deny: t.deny === true, denyReason: String(t.denyReason || ''),
  }))],
  ['toolResults', 8, (/** @type {any} */ c) => (c.toolResults || []).map((/** @type {any} */ r) => ({
    callId: r.callId, name: r.name, plugin: r.plugin, success: r.success, result: parse(r.resultJson, null),
  })), 'toolResults', (/** @type {any} */ v) => (v || []).map((/** @type {any} */ r) => ({
    callId: String(r.callId || ''), name: String(r.name || ''), plugin: String(r.plugin || ''), success: r.success === true, resultJson: text(r.result),
  }))],
  ['memory', 16, (/** @type {any} */ c) => (c.memory || []).map((/** @type {any} */ m) => ({ role: m.role, content: m.content, score: m.score })),
    'memory', (/** @type {any} */ v) => (v || []).map((/** @type {any} */ m) => ({ role: String(m.role || ''), content: String(m.content || ''), score: Number(m.score) || 0 }))],
  ['extra', 32, (/** @type {any} */ c) => parse(c.extraJson, {}), 'extraJson', (/** @type {any} */ v) => text(v)],
];

/**
 * The StageContext a handler gets: plain fields as own properties, the JSON-shaped ones
 * (contextMsgs, tokenUsage, toolCalls, toolResults, memory, extra) decoded from the wire
 * on first use. A spread copy (`{...ctx, finalText}`) keeps the link to the wire: fields
 * it does not set stay as they were.
 */
class StageCtx {
  /** @param {any} c the wire StageContext */
  constructor(c) {
    this.rawMessage = c.rawMessage;
    this.userId = c.userId;
    this.groupId = c.groupId;
    this.llmText = c.llmText;
    this.reasoningContent = c.reasoningContent;
    this.finalText = c.finalText;
    this.response = c.response == null ? null : c.response;
    this.phase = STAGES[c.phase - 1] || '';
    this.noMemory = c.noMemory;
    /** @type {any} */
    this[ST] = { wire: c, used: 0, values: {} };
  }

  /** Every field, decoded (for JSON.stringify and logging). */
  toJSON() {
    /** @type {any} */
    const out = { ...this };
    for (const [name] of LAZY) out[name] = /** @type {any} */ (this)[name];
    return out;
  }
}
for (const [name, bit, decode] of LAZY) {
  Object.defineProperty(StageCtx.prototype, name, {
    enumerable: true,
    get() {
      const st = this[ST];
      if (!(st.used & bit)) { st.values[name] = decode(st.wire); st.used |= bit; }
      return st.values[name];
    },
    set(v) {
      const st = this[ST];
      st.values[name] = v;
      st.used |= bit;
    },
  });
}

/**
 * Wire StageContext → handler object (decoding lazily, see StageCtx).
 * @param {any} c
 */
function fromWire(c) {
  return new StageCtx(c);
}

/**
 * Handler object → wire StageContext. A context from fromWire (or a spread copy of one)
 * goes back as the wire message it came in, with the plain fields set from the
 * handler's object and only the JSON fields it used re-encoded; any other object is
 * encoded in full.
 * @param {any} c
 */
function toWire(c) {
  const st = c[ST];
  if (st !== undefined) {
    const w = st.wire;
    w.rawMessage = String(c.rawMessage || '');
    w.userId = String(c.userId || '');
    w.groupId = String(c.groupId || '');
    w.llmText = String(c.llmText || '');
    w.reasoningContent = String(c.reasoningContent || '');
    w.finalText = String(c.finalText || '');
    w.phase = STAGES.indexOf(c.phase) + 1;
    w.noMemory = c.noMemory === true;
    w.response = c.response != null ? String(c.response) : null;
    for (const [name, bit, , field, encode] of LAZY) {
      if (Object.prototype.hasOwnProperty.call(c, name)) w[field] = encode(c[name]);
      else if (st.used & bit) w[field] = encode(st.values[name]);
    }
    return w;
  }
  /** @type {any} */
  const w = {
    rawMessage: String(c.rawMessage || ''),
    userId: String(c.userId || ''),
    groupId: String(c.groupId || ''),
    llmText: String(c.llmText || ''),
    reasoningContent: String(c.reasoningContent || ''),
    finalText: String(c.finalText || ''),
    phase: STAGES.indexOf(c.phase) + 1,
    noMemory: c.noMemory === true,
  };
  for (const [name, , , field, encode] of LAZY) w[field] = encode(c[name]);
  if (c.response != null) w.response = String(c.response);
  return w;
}

/** Input priority levels (seed): background 1, message 2, interactive 3, critical 4. */
const PRIORITIES = ['background', 'message', 'interactive', 'critical'];

/**
 * undefined/null → 0 (the default of the path); a level name or 1..4 → its wire number.
 * @param {unknown} priority
 * @param {string} plugin
 * @returns {number}
 */
function priorityNumber(priority, plugin) {
  if (priority == null) return 0;
  if (typeof priority === 'number' && Number.isInteger(priority) && priority >= 1 && priority <= 4) return priority;
  const i = typeof priority === 'string' ? PRIORITIES.indexOf(priority.toLowerCase()) : -1;
  if (i < 0) throw new DeclarationError(`plugin ${plugin}: unknown priority ${JSON.stringify(priority)} (expected one of ${PRIORITIES.join(', ')} or 1-4)`);
  return i + 1;
}

module.exports = { STAGES, Stage, PRIORITIES, stageNumber, priorityNumber, fromWire, toWire };
