'use strict';

// The broker-mirroring pieces of hearth-plugin/testing on their own: the argument
// validator against texts the broker's validator produced, the permission matrix
// (permissions.rs tests), trigger matching (triggers/mod.rs), and the fake stores'
// semantics (storage/*.rs).

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const schema = require('../testing/schema');
const permissions = require('../testing/permissions');
const triggers = require('../testing/triggers');
const { SettingsStore, SECRET_MASK } = require('../testing/host/settings');
const { GraphMemoryStore } = require('../testing/host/memory');
const { DocMemoryStore, KnowledgeStore, sanitizeName } = require('../testing/host/search');
const { FakeHost } = require('../testing/host');
const { validateArguments, HarnessError } = require('hearth-plugin/testing');
// The broker's texts; the broker's own tests (broker/src/golden.rs) check this file
// against the broker's validator, so it fails there first when the broker changes.
const GOLDEN = require('./fixtures/schema-golden.json');

describe('argument validation', () => {
  it(`gives the broker's text for each of ${GOLDEN.cases.length} cases (${GOLDEN.source})`, () => {
    for (const { schema: s, args, expected } of GOLDEN.cases) {
      const v = schema.firstViolation(s, args);
      assert.equal(v ? schema.violationText(v) : 'OK', expected, JSON.stringify({ s, args }));
    }
  });

  it('validateArguments names the argument', () => {
    const s = { type: 'object', properties: { stops: { type: 'array', items: { type: 'object', properties: { name: { type: 'string' } } } } } };
    assert.deepEqual(validateArguments(s, { stops: [{ name: 'a' }, { name: 5 }] }), { argument: 'stops.1.name', message: 'argument `stops.1.name`: 5 is not of type "string"' });
    assert.equal(validateArguments(s, { stops: [] }), null);
    assert.deepEqual(validateArguments(s, 'x'), { argument: '', message: 'arguments must be a JSON object, got "x"' });
  });

  it('derives LinkZone schemas and descriptions as the broker does', () => {
    const p = (name, type, required, o = {}) => ({ name, type, description: `the ${name}`, required, defaultJson: '', enumJson: '', example: '', ...o });
    assert.deepEqual(schema.linkZoneSchema([p('city', 'string', true), p('days', 'number', false, { defaultJson: '1' }), p('unit', 'string', false, { enumJson: '["c","f"]', example: 'c' })]), {
      type: 'object',
      properties: {
        city: { type: 'string', description: 'the city' },
        days: { type: 'number', description: 'the days', default: 1 },
        unit: { type: 'string', description: 'the unit', enum: ['c', 'f'], examples: ['c'] },
      },
      required: ['city'],
    });
    assert.deepEqual(schema.linkZoneSchema([p('x', '', false)]).properties.x.type, 'string');
    assert.throws(() => schema.linkZoneSchema([p('a', 'float', true)]), /^Error: parameter `a`: type `float` is not one of string, number, integer, boolean, object, array$/);
    assert.throws(() => schema.linkZoneSchema([p('a', 'string', true), p('a', 'string', false)]), /parameter `a` is defined twice/);
    assert.throws(() => schema.linkZoneSchema([p('a', 'string', true, { enumJson: '{}' })]), /parameter `a`: enum must be an array/);
    assert.equal(schema.linkZoneDescription('查询天气', '当用户询问天气时'), '查询天气\nWhen to use: 当用户询问天气时');
    assert.equal(schema.linkZoneDescription('', 'w'), 'When to use: w');
    assert.equal(schema.linkZoneDescription(' u ', ''), 'u');
  });

  it('checks schemas at registration', () => {
    assert.equal(schema.checkToolSchema({ type: 'object', properties: {} }), null);
    assert.equal(schema.checkToolSchema({}), null);
    assert.match(schema.checkToolSchema({ type: 12 }), /^parameters is not a valid JSON Schema at \/type:/);
    assert.equal(schema.checkToolSchema({ type: 'string' }), 'parameters must describe an object ("type": "object"), not "string"');
    assert.equal(schema.checkToolSchema([]), 'parameters must be a JSON Schema object');
    assert.match(schema.checkToolSchema({ type: 'object', properties: { a: { pattern: '(' } } }), /at \/properties\/a\/pattern: "\(" is not a "regex"/);
    assert.match(schema.checkToolSchema({ type: 'object', required: 'a' }), /at \/required: "a" is not of type "array"/);
    assert.equal(schema.toolNameProblem('a'.repeat(65)), 'tool name is 65 bytes; at most 64');
    assert.equal(schema.toolNameProblem(''), 'tool name is empty');
    assert.equal(schema.toolNameProblem('ok-name_2'), null);
  });
});

describe('permission matrix (permissions.rs)', () => {
  const { ON_INPUT, PRE_ACTION, BEFORE_TOOLCALL, AFTER_OUTPUT } = permissions;
  const base = () => ({
    rawMessage: 'hi', userId: 'u', groupId: '', contextMsgsJson: '[]', llmText: '', reasoningContent: '', tokenUsage: {},
    toolCalls: [{ id: 'c1', name: 't', plugin: '', argumentsJson: '{}', deny: false, denyReason: '' }], toolResults: [], finalText: '',
    response: null, phase: 0, memory: [], noMemory: false, extraJson: '{}',
  });

  it('re-serialized JSON is not a write', () => {
    const ctx = base();
    const p = { ...base(), contextMsgsJson: ' [ ] ', extraJson: '{ }' };
    assert.deepEqual(permissions.apply(PRE_ACTION, permissions.visibleOf(PRE_ACTION, true), ctx, p), []);
  });

  it('fields not sent are neither applied nor reported', () => {
    const ctx = { ...base(), contextMsgsJson: '[{"role":"user","content":"hi"}]', memory: [{ role: '', content: '', score: 0 }], phase: PRE_ACTION };
    const visible = permissions.visibleOf(PRE_ACTION, false);
    const sent = permissions.view(PRE_ACTION, ctx, visible);
    assert.equal(sent.contextMsgsJson, '');
    assert.deepEqual([sent.rawMessage, sent.memory.length], ['', 1]);
    assert.deepEqual(permissions.apply(PRE_ACTION, visible, ctx, sent), []);
    assert.ok(ctx.contextMsgsJson.includes('hi') && ctx.rawMessage === 'hi');
  });

  it('deny alone is allowed only before_toolcall', () => {
    for (let stage = ON_INPUT; stage <= AFTER_OUTPUT; stage++) {
      const ctx = base();
      const p = base();
      p.toolCalls[0] = { ...p.toolCalls[0], deny: true, denyReason: 'no' };
      const visible = { rawMessage: false, contextMsgs: false, memory: false, llmText: false, toolCalls: true, toolResults: false, finalText: false };
      const dropped = permissions.apply(stage, visible, ctx, p);
      assert.equal(ctx.toolCalls[0].deny, stage === BEFORE_TOOLCALL, `stage ${stage}`);
      assert.deepEqual(dropped, stage === BEFORE_TOOLCALL ? [] : ['tool_call.deny'], `stage ${stage}`);
    }
  });
});

describe('trigger matching (triggers/mod.rs)', () => {
  it('splits words with quotes and segments at punctuation', () => {
    assert.deepEqual(triggers.words(' a "New York" "say \\"hi\\"" b '), ['a', 'New York', 'say "hi"', 'b']);
    assert.deepEqual(triggers.words('""'), ['']);
    assert.deepEqual(triggers.segments("what's the weather, today?今天，天气"), ["what's", 'the', 'weather', 'today', '今天', '天气']);
  });

  it('matches in registration order with the broker\'s params', () => {
    const { triggers: set, rejected } = triggers.compile([
      { type: 0, pattern: '/w' }, { type: 1, pattern: 'Rain' }, { type: 2, pattern: '^(\\d+)\\+(\\d+)?' }, { type: 2, pattern: 'x\\d' }, { type: 3, pattern: 'Weather' }, { type: 4, pattern: '*' },
    ], null);
    assert.deepEqual(rejected, []);
    const m = (text) => {
      const r = triggers.matchMessage(set, text);
      return r && [r.trigger.type, r.params];
    };
    assert.deepEqual(m('  /w 北京 3  '), [0, ['北京', '3']]);
    // Not the command /w (no space after it), but the segment `weather` (`/` is punctuation).
    assert.deepEqual(m('/weather'), [3, []]);
    assert.deepEqual(m('will it RAIN today'), [1, ['will', 'it', 'today']]);
    assert.deepEqual(m('1+'), [2, ['1', '']]);
    assert.deepEqual(m('ax9b'), [2, ['x9']]);
    assert.deepEqual(m('the weather?'), [3, ['the']]);
    assert.equal(m('weathering'), null);
    assert.deepEqual(triggers.matchEvent(set, 'reply', 'done'), { trigger: { type: 4, pattern: '*' }, params: ['done'] });
  });
});

describe('fake settings store (storage/settings.rs)', () => {
  it('keeps JSON types, names tables like the broker, reports NOT_FOUND with key and table', () => {
    const s = new SettingsStore();
    for (const v of [42, 1.5, true, '42', { a: [1, null] }, null, '']) {
      s.set('typed', 'k', v);
      assert.deepEqual(s.get('typed', 'k'), v);
    }
    assert.throws(() => s.get(null, 'nope'), { code: 'NOT_FOUND', message: 'no `nope` in config' });
    assert.throws(() => s.get('my-plugin', 'token'), { code: 'NOT_FOUND', message: 'no `token` in config_my_plugin' });
    assert.equal(s.tableName('my-plugin'), null, 'reads create no table');
    s.set('my-plugin', 'a', 1);
    s.set('my_plugin', 'a', 1);
    s.set('x; DROP TABLE config', 'a', 1);
    assert.deepEqual([s.tableName('my-plugin'), s.tableName('my_plugin'), s.tableName('x; DROP TABLE config')], ['config_my_plugin', 'config_my_plugin_2', 'config_x__drop_table_config']);
    assert.throws(() => s.get('', 'a'), { code: 'INVALID_ARGUMENT', message: 'settings: empty plugin name' });
    assert.throws(() => s.set(null, '', 1), { code: 'INVALID_ARGUMENT', message: 'settings: empty key' });
    assert.deepEqual(s.plugins(), ['my-plugin', 'my_plugin', 'typed', 'x; DROP TABLE config']);
  });

  it('defs write defaults only when unset; secrets by def or by core key name are masked', () => {
    const s = new SettingsStore();
    s.set('p', 'days', 5);
    s.registerDef('p', { key: 'days', default: 3, type: 'number', display_name: '' });
    s.registerDef('p', { key: 'unit', default: 'c', type: 'string', display_name: '' });
    s.registerDef('p', { key: 'api_key', type: 'string', display_name: 'Key', secret: true });
    s.set('p', 'api_key', 'sk-1');
    s.set(null, 'llm.openai.API-Key', 'sk-2');
    s.set(null, 'core.bot_token', 'x');
    s.set(null, 'core.name', 'hearth');
    assert.deepEqual([s.get('p', 'days'), s.get('p', 'unit')], [5, 'c']);
    assert.deepEqual(s.dump(), { core: { 'core.bot_token': SECRET_MASK, 'core.name': 'hearth', 'llm.openai.API-Key': SECRET_MASK }, plugins: { p: { api_key: SECRET_MASK, days: 5, unit: 'c' } } });
    assert.equal(s.read('p', 'api_key', true), SECRET_MASK);
    assert.equal(s.read('p', 'api_key', false), 'sk-1');
    assert.equal(s.isSecret(null, 'smtp_password'), true, 'set or not');
    assert.deepEqual(s.defs('p').map((d) => d.key), ['api_key', 'days', 'unit']);
  });

  it('answers rpcs with the broker\'s capability rules and secret masking', () => {
    const h = new FakeHost();
    h.grant('reader', ['settings_core', 'settings_cross']);
    h.grant('admin', ['settings_core', 'settings_cross', 'settings_secrets']);
    h.settings.set(null, 'llm.openai.api_key', 'sk');
    h.settings.registerDef('qq', { key: 'token', type: 'string', display_name: '', secret: true });
    h.settings.set('qq', 'token', 't0');
    const call = (plugin, method, req) => { try { return h.answer(method, plugin, req); } catch (e) { return `${e.code}: ${e.message}`; } };
    assert.deepEqual(call('reader', 'settings.getCore', { key: 'llm.openai.api_key' }), { valueJson: '"••••••"' });
    assert.deepEqual(call('admin', 'settings.getCore', { key: 'llm.openai.api_key' }), { valueJson: '"sk"' });
    assert.equal(call('reader', 'settings.setPlugin', { plugin: 'qq', key: 'token', valueJson: '"t1"' }), 'PERMISSION_DENIED: plugin reader: Settings.SetPlugin: `token` of plugin qq is secret; overwriting it needs capability `settings_secrets`; add it to `capabilities` in its plugin.json');
    assert.deepEqual(call('qq', 'settings.get', { key: 'token' }), { valueJson: '"t0"' });
    assert.equal(call('plain', 'settings.getCore', { key: 'x' }), 'PERMISSION_DENIED: plugin plain: Settings.GetCore needs capability `settings_core`; add it to `capabilities` in its plugin.json');
    assert.equal(call('plain', 'settings.set', { key: 'k', valueJson: '' }), 'INVALID_ARGUMENT: Settings.Set: value_json is empty; send JSON text (e.g. "\\"text\\"", 3, true, null)');
    assert.match(call('plain', 'settings.set', { key: 'k', valueJson: '{x' }), /^INVALID_ARGUMENT: Settings\.Set: value_json is not JSON: /);
    assert.equal(call('reader', 'settings.getPlugin', { plugin: ' ', key: 'k' }), 'INVALID_ARGUMENT: Settings.GetPlugin: `plugin` is empty');
    assert.equal(call('p', 'textMemory.append', { role: ' ', content: 'x' }), 'INVALID_ARGUMENT: TextMemory.Append: `role` is empty (system, user or assistant)');
    assert.equal(call('p', 'input.injectText', { text: ' ' }), 'INVALID_ARGUMENT: plugin p: inject: text is empty');
    assert.equal(call('p', 'input.injectText', { text: 'x', priority: 9 }), 'INVALID_ARGUMENT: priority 9 is not a level: 1 background, 2 message, 3 interactive, 4 critical');
    assert.throws(() => h.grant('p', ['memroy']), HarnessError);
  });
});

describe('fake graph memory (storage/memory.rs)', () => {
  it('commits, recalls breadth first, merges and purges like the broker', () => {
    const g = new GraphMemoryStore();
    assert.throws(() => g.commit([{ subject: 'a', relation: 'r', object: 'b' }, { subject: ' ', relation: 'r', object: 'b' }]), { code: 'INVALID_ARGUMENT', message: 'commit: triple 1: empty `subject`' });
    assert.equal(g.introspect().entities, 0, 'nothing of a failed commit is stored');
    assert.equal(g.commit([
      { subject: 'Alice', relation: 'knows', object: 'Bob', subject_type: 'Person', session_id: 's1' },
      { subject: 'bob', relation: 'works_at', object: 'Acme' },
      { subject: 'Acme', relation: 'in', object: 'Paris', object_type: 'Location' },
      { subject: 'ALICE', relation: 'knows', object: 'bob' },
    ]), 3);
    assert.deepEqual(g.recall(['ali'], 0), { entities: [{ name: 'Alice', type: 'Person', mention_count: 2 }], relations: [] });
    const two = g.recall(['alice', ' '], 2);
    assert.deepEqual(two.entities.map((e) => e.name), ['Alice', 'Bob', 'Acme']);
    assert.deepEqual(two.relations.map((r) => r.relation_type), ['knows', 'works_at']);
    assert.deepEqual(g.recall([], 3), { entities: [], relations: [] });
    assert.throws(() => g.mergeEntities('bob', ' BOB'), { code: 'INVALID_ARGUMENT', message: 'merge entities: `bob` and `BOB` are the same entity' });
    assert.throws(() => g.mergeEntities('Zed', 'Bob'), { code: 'NOT_FOUND', message: 'no `Zed` in entities' });
    g.commit([{ subject: 'Bobby', relation: 'works_at', object: 'Acme' }, { subject: 'Bobby', relation: 'likes', object: 'tea' }]);
    assert.equal(g.mergeEntities('Bobby', 'Bob'), 1, 'the duplicate works_at is dropped, likes moves');
    assert.deepEqual(g.recall(['bob'], 1).relations.map((r) => `${r.source_name} ${r.relation_type} ${r.target_name}`), ['Alice knows Bob', 'Bob works_at Acme', 'Bob likes tea']);
    assert.throws(() => g.purge({}, 'soft'), { code: 'INVALID_ARGUMENT', message: 'purge: no criteria (give at least one of subject_contains, target_contains, relation_type, session_id)' });
    assert.throws(() => g.purge({ who: 'x' }, 'soft'), { message: 'purge: unknown criterion `who` (expected one of subject_contains, target_contains, relation_type, session_id)' });
    assert.throws(() => g.purge({ session_id: 's1' }, 'gentle'), { message: 'purge: mode "gentle": expected "soft" or "hard"' });
    assert.equal(g.purge({ session_id: 's1' }, 'soft'), 1);
    assert.deepEqual([g.introspect().relations, g.introspect().inactive_relations], [3, 1]);
    assert.equal(g.purge({ subject_contains: 'BOB', relation_type: 'likes' }, 'hard'), 1);
    assert.equal(g.recall(['tea'], 1).entities.length, 0, 'the orphan is gone');
  });
});

describe('fake documents and knowledge (storage/docs.rs, knowledge.rs)', () => {
  it('finds Chinese and English text, ranks, respects topK, refuses empty documents', () => {
    const d = new DocMemoryStore();
    for (const [id, title, content] of [['sunny', '日记', '今天天气很好'], ['rain', '预报', '明天会下雨，记得带伞'], ['cold', '', '明天气温很低'], ['en', 'Weather report', 'Heavy rain is expected in the evening'], ['rust', 'Rust', 'Rust has no garbage collector']]) d.insert({ id, title, content });
    const ids = (docs) => docs.map((x) => x.id);
    // The broker finds both (the second through its character phrase 天 气); its jieba
    // words rank 今天天气 first, which the fake does not promise.
    const found = d.query('天气', 10);
    assert.deepEqual(ids(found).sort(), ['cold', 'sunny']);
    assert.ok(found.every((x, i) => x.score > 0 && (i === 0 || found[i - 1].score >= x.score)));
    assert.deepEqual(ids(d.query('下雨', 10)), ['rain']);
    assert.deepEqual(ids(d.query('雨', 10)), ['rain']);
    assert.deepEqual(ids(d.query('WEATHER', 10)), ['en']);
    assert.deepEqual(ids(d.query('rain 下雨 weather', 10)), ['en', 'rain']);
    assert.deepEqual(d.query('snow 雪', 10), []);
    assert.deepEqual(d.query('"foo" OR NEAR(', 10), []);
    assert.throws(() => d.insert({ id: 'x', title: ' ', content: '' }), { code: 'INVALID_ARGUMENT', message: 'insert doc x: title and content are both empty' });
    assert.match(d.insert({ content: 'generated' }), /^doc_[0-9a-f]{16}$/);
    for (let i = 0; i < 30; i++) d.insert({ id: `a${i}`, content: `${'apple '.repeat((i % 7) + 1)}${'filler '.repeat(i)}` });
    assert.equal(d.query('apple', 3).length, 3);
    assert.equal(d.query('apple', 0).length, 5);
    assert.equal(d.query('apple', 1000).length, 30);
    d.remove('a0');
    assert.throws(() => d.remove('a0'), { code: 'NOT_FOUND', message: 'no `a0` in doc_memory' });
  });

  it('sanitizes knowledge names like the broker and searches name and content', () => {
    assert.equal(sanitizeName('天气/北京'), '天气_北京');
    assert.equal(sanitizeName('../secret'), '_._secret');
    assert.equal(sanitizeName('notes.md'), 'notes');
    assert.throws(() => sanitizeName(' .md '), { code: 'INVALID_ARGUMENT' });
    const k = new KnowledgeStore();
    assert.equal(k.add('faq.md', 'Hearth brokers plugins'), 'faq');
    k.add('天气', '晴');
    assert.deepEqual(k.list(), ['faq', '天气']);
    assert.deepEqual(k.search('天气').map((e) => e.name), ['天气']);
    assert.deepEqual(k.search('plugins').map((e) => e.name), ['faq']);
  });
});
