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

/**
 * Wire StageContext → handler object.
 * @param {any} c
 */
function fromWire(c) {
  /** @type {Record<string, number>} */
  const tokenUsage = {};
  for (const [k, v] of Object.entries(c.tokenUsage || {})) tokenUsage[k] = Number(v);
  return {
    rawMessage: c.rawMessage,
    userId: c.userId,
    groupId: c.groupId,
    contextMsgs: parse(c.contextMsgsJson, []),
    llmText: c.llmText,
    reasoningContent: c.reasoningContent,
    tokenUsage,
    toolCalls: (c.toolCalls || []).map((/** @type {any} */ t) => ({
      id: t.id, name: t.name, plugin: t.plugin, arguments: parse(t.argumentsJson, {}), deny: t.deny, denyReason: t.denyReason,
    })),
    toolResults: (c.toolResults || []).map((/** @type {any} */ r) => ({
      callId: r.callId, name: r.name, plugin: r.plugin, success: r.success, result: parse(r.resultJson, null),
    })),
    finalText: c.finalText,
    response: c.response == null ? null : c.response,
    phase: STAGES[c.phase - 1] || '',
    memory: (c.memory || []).map((/** @type {any} */ m) => ({ role: m.role, content: m.content, score: m.score })),
    noMemory: c.noMemory,
    extra: parse(c.extraJson, {}),
  };
}

/**
 * Handler object → wire StageContext.
 * @param {any} c
 */
function toWire(c) {
  /** @type {any} */
  const w = {
    rawMessage: String(c.rawMessage || ''),
    userId: String(c.userId || ''),
    groupId: String(c.groupId || ''),
    contextMsgsJson: text(c.contextMsgs),
    llmText: String(c.llmText || ''),
    reasoningContent: String(c.reasoningContent || ''),
    tokenUsage: Object.fromEntries(Object.entries(c.tokenUsage || {}).map(([k, v]) => [k, Math.trunc(Number(v) || 0)])),
    toolCalls: (c.toolCalls || []).map((/** @type {any} */ t) => ({
      id: String(t.id || ''), name: String(t.name || ''), plugin: String(t.plugin || ''), argumentsJson: text(t.arguments), deny: t.deny === true, denyReason: String(t.denyReason || ''),
    })),
    toolResults: (c.toolResults || []).map((/** @type {any} */ r) => ({
      callId: String(r.callId || ''), name: String(r.name || ''), plugin: String(r.plugin || ''), success: r.success === true, resultJson: text(r.result),
    })),
    finalText: String(c.finalText || ''),
    phase: STAGES.indexOf(c.phase) + 1,
    memory: (c.memory || []).map((/** @type {any} */ m) => ({ role: String(m.role || ''), content: String(m.content || ''), score: Number(m.score) || 0 })),
    noMemory: c.noMemory === true,
    extraJson: text(c.extra),
  };
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
