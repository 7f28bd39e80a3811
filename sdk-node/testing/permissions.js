'use strict';

/**
 * The stage permission matrix, as the broker enforces it (a line-by-line mirror of
 * broker/src/pipeline/permissions.rs): what a hook of each stage receives (`visibleOf`,
 * `view`) and which of its writes are kept (`apply`, which returns the fields whose
 * changes were dropped).
 *
 * | field | on_input | pre_action | post_action | before_toolcall | after_toolcall | before_output | after_output |
 * |---|---|---|---|---|---|---|---|
 * | raw_message | rw | | | | | | |
 * | context_msgs | | rw | | | | | |
 * | llm_text | | | rw | | | | |
 * | tool_calls | | | rw | rw | | | |
 * | tool_call.deny | | | | rw | | | |
 * | tool_results | | | | | rw | | |
 * | final_text | | | | | | rw | r |
 * | response | rw | rw | rw | rw | rw | rw | |
 *
 * `extra` is writable in every stage but after_output; user_id, group_id,
 * reasoning_content, token_usage, phase, memory and no_memory are read-only. A field a
 * stage does not send is neither applied nor reported.
 *
 * Contexts here are "wire" objects: the generated `StageContext` field names in
 * camelCase with JSON fields as text (`contextMsgsJson`, `extraJson`,
 * `toolCalls[].argumentsJson`, `toolResults[].resultJson`), `response` a string or
 * null, `tokenUsage` numbers, `phase` the stage number.
 */

const { jsonEqual } = require('./schema');

/** Wire stage numbers (hearth.v1.Stage). */
const ON_INPUT = 1;
const PRE_ACTION = 2;
const POST_ACTION = 3;
const BEFORE_TOOLCALL = 4;
const AFTER_TOOLCALL = 5;
const BEFORE_OUTPUT = 6;
const AFTER_OUTPUT = 7;

/**
 * @typedef {{rawMessage: boolean, contextMsgs: boolean, memory: boolean, llmText: boolean, toolCalls: boolean, toolResults: boolean, finalText: boolean}} Visible
 */

/**
 * What a hook of `stage` receives besides the fields every stage sees; `contextMsgs`
 * false for a hook that declared it does not read them.
 * @param {number} stage
 * @param {boolean} contextMsgs
 * @returns {Visible}
 */
function visibleOf(stage, contextMsgs) {
  return {
    rawMessage: stage === ON_INPUT,
    contextMsgs: stage === PRE_ACTION && contextMsgs,
    memory: stage === PRE_ACTION,
    llmText: stage === POST_ACTION,
    toolCalls: stage === POST_ACTION || stage === BEFORE_TOOLCALL,
    toolResults: stage === AFTER_TOOLCALL,
    finalText: stage === BEFORE_OUTPUT || stage === AFTER_OUTPUT,
  };
}

/** @param {any[]} list */
const copyList = (list) => list.map((x) => ({ ...x }));

/**
 * The context a hook of `stage` receives: `ctx` with only the `visible` fields and
 * those every stage sees.
 * @param {number} stage
 * @param {any} ctx
 * @param {Visible} visible
 */
function view(stage, ctx, visible) {
  const pick = (/** @type {boolean} */ on, /** @type {string} */ s) => (on ? s : '');
  return {
    rawMessage: pick(visible.rawMessage, ctx.rawMessage),
    userId: ctx.userId,
    groupId: ctx.groupId,
    contextMsgsJson: pick(visible.contextMsgs, ctx.contextMsgsJson),
    llmText: pick(visible.llmText, ctx.llmText),
    reasoningContent: pick(visible.llmText, ctx.reasoningContent),
    tokenUsage: { ...ctx.tokenUsage },
    toolCalls: visible.toolCalls ? copyList(ctx.toolCalls) : [],
    toolResults: visible.toolResults ? copyList(ctx.toolResults) : [],
    finalText: pick(visible.finalText, ctx.finalText),
    response: ctx.response,
    phase: stage,
    memory: visible.memory ? copyList(ctx.memory) : [],
    noMemory: ctx.noMemory,
    extraJson: ctx.extraJson,
  };
}

/**
 * True when JSON texts `a` and `b` hold the same value (SDKs re-serialize JSON).
 * @param {string} a
 * @param {string} b
 */
function sameJson(a, b) {
  if (a === b) return true;
  const parse = (/** @type {string} */ s) => {
    if (!s.trim()) return null;
    try { return JSON.parse(s); } catch (_) { return s; }
  };
  return jsonEqual(parse(a), parse(b));
}

/** @param {any[]} a @param {any[]} b */
function sameCallsIgnoringDeny(a, b) {
  return a.length === b.length && a.every((x, i) => {
    const y = b[i];
    return x.id === y.id && x.name === y.name && x.plugin === y.plugin && sameJson(x.argumentsJson, y.argumentsJson);
  });
}

/**
 * True when a call of `proposed` has a deny flag or reason other than the same call
 * (by id) in `current` (a new call counts as not denied).
 * @param {any[]} current
 * @param {any[]} proposed
 */
function denyChanged(current, proposed) {
  return proposed.some((p) => {
    const c = current.find((x) => x.id === p.id);
    const [deny, reason] = c ? [c.deny, c.denyReason] : [false, ''];
    return p.deny !== deny || p.denyReason !== reason;
  });
}

/** @param {Record<string, number>} a @param {Record<string, number>} b */
function sameMap(a, b) {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && a[k] === b[k]);
}

/** @param {any[]} a @param {any[]} b */
function sameMemory(a, b) {
  return a.length === b.length && a.every((x, i) => x.role === b[i].role && x.content === b[i].content && x.score === b[i].score);
}

/**
 * Applies the writes of `proposed` (a hook's returned context) to `current` (changed in
 * place) as `stage` allows, and returns the names of the fields whose changes were
 * dropped. Only the fields the hook received are looked at.
 * @param {number} stage
 * @param {Visible} visible
 * @param {any} current
 * @param {any} proposed
 * @returns {string[]}
 */
function apply(stage, visible, current, proposed) {
  /** @type {string[]} */
  const dropped = [];
  const take = (/** @type {boolean} */ allowed, /** @type {boolean} */ changed, /** @type {string} */ name) => {
    if (changed && !allowed) dropped.push(name);
    return changed && allowed;
  };

  if (visible.rawMessage && take(stage === ON_INPUT, proposed.rawMessage !== current.rawMessage, 'raw_message')) {
    current.rawMessage = proposed.rawMessage;
  }
  if (visible.contextMsgs) {
    const msgsChanged = !sameJson(proposed.contextMsgsJson, current.contextMsgsJson);
    if (take(stage === PRE_ACTION, msgsChanged, 'context_msgs')) current.contextMsgsJson = proposed.contextMsgsJson;
  }
  if (visible.llmText && take(stage === POST_ACTION, proposed.llmText !== current.llmText, 'llm_text')) {
    current.llmText = proposed.llmText;
  }
  if (visible.toolCalls) {
    const callsChanged = !sameCallsIgnoringDeny(proposed.toolCalls, current.toolCalls);
    const denyDiff = denyChanged(current.toolCalls, proposed.toolCalls);
    if (stage === BEFORE_TOOLCALL) {
      if (callsChanged || denyDiff) current.toolCalls = proposed.toolCalls;
    } else if (stage === POST_ACTION) {
      take(false, denyDiff, 'tool_call.deny');
      if (callsChanged) {
        current.toolCalls = proposed.toolCalls.map((/** @type {any} */ c) => ({ ...c, deny: false, denyReason: '' }));
      }
    } else {
      take(false, callsChanged, 'tool_calls');
      take(false, denyDiff, 'tool_call.deny');
    }
  }
  if (visible.toolResults) {
    const a = proposed.toolResults;
    const b = current.toolResults;
    const resultsChanged = a.length !== b.length || a.some((/** @type {any} */ x, /** @type {number} */ i) => x.callId !== b[i].callId
      || x.name !== b[i].name || x.plugin !== b[i].plugin || x.success !== b[i].success || !sameJson(x.resultJson, b[i].resultJson));
    if (take(stage === AFTER_TOOLCALL, resultsChanged, 'tool_results')) current.toolResults = proposed.toolResults;
  }
  if (visible.finalText && take(stage === BEFORE_OUTPUT, proposed.finalText !== current.finalText, 'final_text')) {
    current.finalText = proposed.finalText;
  }
  if (take(stage !== AFTER_OUTPUT, proposed.response !== current.response, 'response')) {
    current.response = proposed.response;
  }
  if (take(stage !== AFTER_OUTPUT, !sameJson(proposed.extraJson, current.extraJson), 'extra')) {
    current.extraJson = proposed.extraJson;
  }
  // Read-only everywhere.
  const readOnly = [
    [proposed.userId !== current.userId, 'user_id'],
    [proposed.groupId !== current.groupId, 'group_id'],
    [visible.llmText && proposed.reasoningContent !== current.reasoningContent, 'reasoning_content'],
    [!sameMap(proposed.tokenUsage, current.tokenUsage), 'token_usage'],
    [proposed.phase !== current.phase, 'phase'],
    [visible.memory && !sameMemory(proposed.memory, current.memory), 'memory'],
    [proposed.noMemory !== current.noMemory, 'no_memory'],
  ];
  for (const [changed, name] of readOnly) take(false, /** @type {boolean} */ (changed), /** @type {string} */ (name));
  return dropped;
}

module.exports = { visibleOf, view, apply, sameJson, ON_INPUT, PRE_ACTION, POST_ACTION, BEFORE_TOOLCALL, AFTER_TOOLCALL, BEFORE_OUTPUT, AFTER_OUTPUT };
