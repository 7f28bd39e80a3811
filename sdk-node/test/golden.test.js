'use strict';

// The broker's rules that hearth-plugin/testing copies, checked against the golden files
// in the repository's tests/golden/, which the broker's own tests check the broker
// against (broker/src/golden.rs). A change of a rule in the broker fails there until the
// golden file is regenerated, and then here until the copy follows:
// - setting-types.json: the type check of a setting value against its ConfigDef
//   (testing/host/settings.js, the broker's `ConfigDef::check`);
// - stage-permissions.json: the stage permission matrix (testing/permissions.js, the
//   broker's pipeline/permissions.rs);
// - triggers.json: trigger compiling and matching (testing/triggers.js, the broker's
//   triggers/).
// Skipped when the golden files are not there (the package outside the repository).

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const permissions = require('../testing/permissions');
const triggers = require('../testing/triggers');
const { SettingsStore, checkSetting } = require('../testing/host/settings');
const { canonical } = require('../testing/host/json');

const GOLDEN = path.join(__dirname, '..', '..', 'tests', 'golden');

/** The golden file `name`, or null (the test is skipped) when it is not there. */
function golden(t, name) {
  const file = path.join(GOLDEN, name);
  if (!fs.existsSync(file)) {
    t.skip(`${file} not found (run from the Hearth repository)`);
    return null;
  }
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

describe('setting types (tests/golden/setting-types.json)', () => {
  it('the fake checks each value as the broker does', (t) => {
    const g = golden(t, 'setting-types.json');
    if (!g) return;
    assert.ok(g.cases.length > 20);
    const wrong = [];
    for (const c of g.cases) {
      const got = checkSetting({ key: 'k', type: c.type, display_name: '', secret: c.secret }, c.value_json);
      if (got !== c.error) wrong.push(`${JSON.stringify(c)}: got ${JSON.stringify(got)}`);
    }
    assert.deepEqual(wrong, []);
  });

  it('a refused value names key and scope and is not written; an accepted one is kept as the broker keeps it', (t) => {
    const g = golden(t, 'setting-types.json');
    if (!g) return;
    for (const c of g.cases) {
      for (const [scope, where] of [[null, 'core'], ['weather', 'plugin weather']]) {
        const s = new SettingsStore();
        s.registerDef(scope, { key: 'k', type: c.type, display_name: '', secret: c.secret });
        const value = JSON.parse(c.value_json);
        if (c.error === null) {
          s.set(scope, 'k', value, c.value_json);
          assert.equal(s.readText(scope, 'k', false), canonical(c.value_json));
          continue;
        }
        assert.throws(() => s.set(scope, 'k', value, c.value_json), { code: 'INVALID_ARGUMENT', message: `setting \`k\` of ${where}: ${c.error}` });
        assert.throws(() => s.get(scope, 'k'), { code: 'NOT_FOUND' });
      }
    }
  });
});

const STAGES = { on_input: 1, pre_action: 2, post_action: 3, before_toolcall: 4, after_toolcall: 5, before_output: 6, after_output: 7 };

/** A context (wire shape) of `stage` with every field set. @param {number} stage */
const fullContext = (stage) => ({
  rawMessage: 'hi',
  userId: 'u',
  groupId: 'g',
  contextMsgsJson: '[{"role":"user","content":"hi"}]',
  llmText: 'text',
  reasoningContent: 'why',
  tokenUsage: { total: 1 },
  toolCalls: [{ id: 'c1', name: 't', plugin: 'p', argumentsJson: '{}', deny: false, denyReason: '' }],
  toolResults: [{ callId: 'c1', name: 't', plugin: 'p', success: true, resultJson: '1' }],
  finalText: 'final',
  response: 'earlier',
  phase: stage,
  memory: [{ role: 'user', content: 'm', score: 1 }],
  noMemory: true,
  extraJson: '{"a":1}',
});

/** The golden file's field names → the wire context's. */
const FIELD = {
  raw_message: 'rawMessage',
  user_id: 'userId',
  group_id: 'groupId',
  context_msgs: 'contextMsgsJson',
  llm_text: 'llmText',
  reasoning_content: 'reasoningContent',
  token_usage: 'tokenUsage',
  tool_calls: 'toolCalls',
  'tool_call.deny': 'toolCalls',
  tool_results: 'toolResults',
  final_text: 'finalText',
  response: 'response',
  phase: 'phase',
  memory: 'memory',
  no_memory: 'noMemory',
  extra: 'extraJson',
};

const clone = (/** @type {any} */ c) => JSON.parse(JSON.stringify(c));

/** A hook's answer: what it was sent with `field` written (a list it was not sent gets an entry). */
function writeField(sent, field) {
  const c = clone(sent);
  switch (field) {
    case 'raw_message': c.rawMessage = 'changed'; break;
    case 'user_id': c.userId = 'mallory'; break;
    case 'group_id': c.groupId = 'other'; break;
    case 'context_msgs': c.contextMsgsJson = '[{"role":"system","content":"x"}]'; break;
    case 'llm_text': c.llmText = 'changed'; break;
    case 'reasoning_content': c.reasoningContent = 'changed'; break;
    case 'token_usage': c.tokenUsage.total = 9; break;
    case 'tool_calls':
      if (c.toolCalls.length) c.toolCalls[0].argumentsJson = '{"a":1}';
      else c.toolCalls.push({ id: 'new', name: 't', plugin: '', argumentsJson: '{}', deny: false, denyReason: '' });
      break;
    case 'tool_call.deny':
      if (c.toolCalls.length) Object.assign(c.toolCalls[0], { deny: true, denyReason: 'no' });
      else c.toolCalls.push({ id: 'new', name: '', plugin: '', argumentsJson: '', deny: true, denyReason: 'no' });
      break;
    case 'tool_results':
      if (c.toolResults.length) c.toolResults[0].resultJson = '2';
      else c.toolResults.push({ callId: 'new', name: '', plugin: '', success: false, resultJson: '2' });
      break;
    case 'final_text': c.finalText = 'changed'; break;
    case 'response': c.response = 'changed'; break;
    case 'phase': c.phase = (c.phase % 7) + 1; break;
    case 'memory':
      if (c.memory.length) c.memory[0].content = 'changed';
      else c.memory.push({ role: 'user', content: 'changed', score: 1 });
      break;
    case 'no_memory': c.noMemory = !c.noMemory; break;
    case 'extra': c.extraJson = '{"k":1}'; break;
    default: throw new Error(field);
  }
  return c;
}

/** Whether `field` of `after` differs from `before`. */
function differs(field, before, after) {
  if (field === 'tool_call.deny') {
    return before.toolCalls.some((/** @type {any} */ a, /** @type {number} */ i) => after.toolCalls[i] && (a.deny !== after.toolCalls[i].deny || a.denyReason !== after.toolCalls[i].denyReason));
  }
  return JSON.stringify(before[FIELD[field]]) !== JSON.stringify(after[FIELD[field]]);
}

describe('stage permission matrix (tests/golden/stage-permissions.json)', () => {
  it('the harness copy sends and keeps what the broker does, and reports what it drops', (t) => {
    const g = golden(t, 'stage-permissions.json');
    if (!g) return;
    assert.deepEqual([...g.fields].sort(), Object.keys(FIELD).sort(), 'a StageContext field the test does not know');
    assert.deepEqual(g.hooks.map((h) => [h.stage, h.no_context_msgs]), [...Object.keys(STAGES).map((s) => [s, false]), ['pre_action', true]]);
    const wrong = [];
    for (const hook of g.hooks) {
      const stage = STAGES[hook.stage];
      const visible = permissions.visibleOf(stage, !hook.no_context_msgs);
      for (const field of g.fields) {
        const full = fullContext(stage);
        const sent = permissions.view(stage, clone(full), visible);
        const isVisible = JSON.stringify(sent[FIELD[field]]) === JSON.stringify(full[FIELD[field]]);
        const current = clone(full);
        const dropped = permissions.apply(stage, visible, current, writeField(sent, field));
        const kept = differs(field, full, current);
        const where = `${hook.stage} (no_context_msgs ${hook.no_context_msgs}) ${field}`;
        const want = hook.fields[field];
        if (want.visible !== isVisible || want.kept !== kept) wrong.push(`${where}: golden ${JSON.stringify(want)}, harness visible ${isVisible} kept ${kept}`);
        const reported = isVisible && !kept ? [field] : [];
        if (JSON.stringify(dropped) !== JSON.stringify(reported)) wrong.push(`${where}: reported ${JSON.stringify(dropped)}`);
      }
    }
    assert.deepEqual(wrong, []);
  });
});

describe('triggers (tests/golden/triggers.json)', () => {
  it('the harness compiles and matches as the broker does', (t) => {
    const g = golden(t, 'triggers.json');
    if (!g) return;
    assert.ok(g.cases.length > 20);
    const wrong = [];
    for (const c of g.cases) {
      const list = c.triggers.map(([type, pattern]) => ({ type, pattern }));
      const compiled = list.map((tr) => {
        const r = triggers.compile([tr], null).rejected[0];
        if (!r) return null;
        return tr.type === 2 ? r.reason.split(':')[0] : r.reason;
      });
      const set = triggers.compile(list, null).triggers;
      const m = c.event !== undefined ? triggers.matchEvent(set, c.event, c.message) : triggers.matchMessage(set, c.message);
      const got = m && { trigger: list.indexOf(m.trigger), params: m.params };
      const where = `${JSON.stringify(c.triggers)} ${JSON.stringify(c.message)}${c.event !== undefined ? ` (event ${c.event})` : ''}`;
      if (JSON.stringify(compiled) !== JSON.stringify(c.compiled)) wrong.push(`${where}: compiled ${JSON.stringify(compiled)}, golden ${JSON.stringify(c.compiled)}`);
      try {
        assert.deepEqual(got, c.match);
      } catch (_) {
        wrong.push(`${where}: matched ${JSON.stringify(got)}, golden ${JSON.stringify(c.match)}`);
      }
    }
    assert.deepEqual(wrong, []);
  });
});
