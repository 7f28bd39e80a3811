'use strict';

// Pure pieces: result mapping, declaration conversion, address parsing, plugin
// discovery, and the lean require of the package entry.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const results = require('../lib/results');
const spec = require('../lib/spec');
const { grpcTarget } = require('../lib/session');
const { pluginFromExports } = require('../lib/load');
const { Plugin } = require('..');

describe('result mapping', () => {
  it('HomeAgent values', () => {
    assert.deepEqual(results.fromValue('hi'), { success: true, content: 'hi', dataJson: '', error: '' });
    assert.deepEqual(results.fromValue({ temp: 25, weather: '晴' }), { success: true, content: '{"temp":25,"weather":"晴"}', dataJson: '{"temp":25,"weather":"晴"}', error: '' });
    assert.deepEqual(results.fromValue(0), { success: true, content: '0', dataJson: '0', error: '' });
    assert.deepEqual(results.fromValue(null), { success: true, content: 'null', dataJson: 'null', error: '' });
    assert.deepEqual(results.fromValue(undefined), { success: true, content: '', dataJson: '', error: '' });
    assert.deepEqual(results.fromValue({ isError: true, content: '错误描述' }), { success: false, content: '', dataJson: '', error: '错误描述' });
    assert.deepEqual(results.fromValue({ isError: false, content: 'x' }).success, true);
    assert.throws(() => results.fromValue({ n: 1n }), TypeError, 'BigInt is not JSON: the session turns the throw into an error result');
  });

  it('LinkZone objects pass through, other values fall back', () => {
    assert.deepEqual(results.fromLinkZone({ success: true, content: 'c', data: { a: 1 } }), { success: true, content: 'c', dataJson: '{"a":1}', error: '' });
    assert.deepEqual(results.fromLinkZone({ success: false, error: '计算错误: x' }), { success: false, content: '', dataJson: '', error: '计算错误: x' });
    assert.deepEqual(results.fromLinkZone({ success: true, content: { k: 1 } }).content, '{"k":1}');
    assert.deepEqual(results.fromLinkZone('text'), { success: true, content: 'text', dataJson: '', error: '' });
  });

  it('error text is "<Name>: <message>"', () => {
    assert.equal(results.errorText(new RangeError('too big')), 'RangeError: too big');
    class WeatherError extends Error { constructor(m) { super(m); this.name = 'WeatherError'; } }
    assert.equal(results.errorText(new WeatherError('no city')), 'WeatherError: no city');
    assert.equal(results.errorText('plain string'), 'Error: plain string');
  });
});

describe('declarations', () => {
  it('ai.tool → AiTool', () => {
    const a = spec.aiTool({
      parameters: [{ name: 'n', type: 'number', description: 'count', default: 3, enum: [1, 3], example: 3 }],
      usage: 'u', when_to_use: 'w', continue: true, max_calls: 2, confirm: true, cooldown: 5, timeout: 30,
    }, 'p');
    assert.deepEqual(a.parameters[0], { name: 'n', type: 'number', description: 'count', required: false, defaultJson: '3', enumJson: '[1,3]', example: '3' });
    assert.deepEqual([a.usage, a.whenToUse, a.continueConversation, a.maxCalls, a.confirm, a.cooldownS, a.timeoutS], ['u', 'w', true, 2, true, 5, 30]);
    assert.equal('chainable' in a, false);
    assert.equal(spec.aiTool({ parameters: [], chainable: true }, 'p').chainable, true);
  });

  it('invalid declarations name the plugin and the item', () => {
    assert.throws(() => spec.aiTool({ parameters: {} }, 'calc'), /plugin calc: ai\.tool\.parameters: expected an array/);
    assert.throws(() => spec.aiTool({ parameters: [{ name: 'x', enum: 'a' }] }, 'calc'), /plugin calc: ai\.tool parameter `x`: enum must be an array/);
    assert.throws(() => spec.aiTool({ parameters: [], cooldown: -1 }, 'calc'), /plugin calc: ai\.tool\.cooldown: expected a non-negative number, got -1/);
    assert.throws(() => spec.triggerSpecs([{ type: 9, pattern: 'x' }], 'w'), /plugin w: triggers\[0\]: type 9 is not 0\.\.4/);
    assert.throws(() => spec.homeAgentTool('t', { parameters: [] }, 'ha'), /plugin ha: tool t: parameters must be a JSON Schema object/);
    assert.throws(() => spec.configDef({ key: 'k', type: 'date' }, 'ha'), /plugin ha: config k: type must be string, number, integer or boolean, got "date"/);
    assert.throws(() => spec.configDef({ type: 'string' }, 'ha'), /plugin ha: registerDef: missing key/);
  });

  it('triggers accept numbers and names; inject args become a string map', () => {
    assert.deepEqual(spec.triggerSpecs([{ type: 0, pattern: '/w' }, { type: 'Regex', pattern: '^a$' }], 'w'), [{ type: 0, pattern: '/w' }, { type: 2, pattern: '^a$' }]);
    assert.deepEqual(spec.injectSpec({ usage: 'u', format: '/w {city}', args: { city: '城市' } }, 'w'), { usage: 'u', format: '/w {city}', args: { city: '城市' } });
  });
});

describe('HEARTH_ADDR', () => {
  it('maps to grpc-js targets', () => {
    assert.equal(grpcTarget('unix:///tmp/h/hearth.sock'), 'unix:///tmp/h/hearth.sock');
    assert.equal(grpcTarget('unix:/tmp/h/hearth.sock'), 'unix:/tmp/h/hearth.sock');
    assert.equal(grpcTarget('http://127.0.0.1:50051'), '127.0.0.1:50051');
    assert.equal(grpcTarget('127.0.0.1:50051'), '127.0.0.1:50051');
    assert.throws(() => grpcTarget('https://example.com:443'), /unsupported scheme/);
  });
});

describe('plugin discovery', () => {
  it('finds classes, instances, default exports and factories', async () => {
    class LZ extends Plugin {}
    LZ.metadata = { name: 'lz' };
    assert.ok((await pluginFromExports(LZ, 'f.js')) instanceof LZ);
    assert.ok((await pluginFromExports({ default: LZ }, 'f.js')) instanceof LZ);
    const ha = { name: () => 'ha', start() {}, stop() {} };
    assert.equal(await pluginFromExports(ha, 'f.js'), ha);
    class HA { name() { return 'ha2'; } start() {} }
    assert.ok((await pluginFromExports(HA, 'f.js')) instanceof HA);
    function Old() {}
    Old.prototype.start = function start() {};
    Old.prototype.name = function name() { return 'old'; };
    assert.ok((await pluginFromExports(Old, 'f.js')) instanceof Old);
    const made = await pluginFromExports({ NewPlugin: async (name) => ({ name: () => name, start() {} }) }, '/p/fac/index.js');
    assert.equal(made.name(), 'fac');
  });

  it('names a plugin from metadata, name(), then HEARTH_PLUGIN', () => {
    const { pluginLabel } = require('../lib/plugin');
    class LZ extends Plugin {}
    LZ.metadata = { name: 'lz' };
    assert.equal(pluginLabel(new LZ(), 'env'), 'lz');
    assert.equal(pluginLabel({ name: () => 'ha', start() {} }, 'env'), 'ha');
    assert.equal(pluginLabel({ start() {} }, 'env'), 'env');
    assert.equal(pluginLabel({ start() {} }), 'Object');
  });

  it('says what is wrong, naming the file', async () => {
    await assert.rejects(pluginFromExports(undefined, '/p/x.js'), /\/p\/x\.js exports no plugin: .*got nothing/);
    class NoMeta extends Plugin { async executeTool() { return 1; } }
    await assert.rejects(pluginFromExports(NoMeta, '/p/y.js'), /\/p\/y\.js: class NoMeta is not a plugin: a LinkZone plugin needs static metadata/);
  });
});

it('require("hearth-plugin") stays lean: no gRPC or generated stubs loaded', () => {
  const out = execFileSync(process.execPath, ['-e', `
    require('hearth-plugin');
    const loaded = Object.keys(require.cache);
    console.log(JSON.stringify(loaded.filter((f) => /grpc-js|protobufjs|gen[\\\\/]hearth/.test(f)).length));
  `], { cwd: path.join(__dirname, 'fixtures', 'calculator'), encoding: 'utf8' });
  assert.equal(out.trim(), '0');
});

describe('stage context conversion', () => {
  const stages = require('../lib/stages');
  // A fresh wire context per use: toWire reuses the one it got (each call has its own).
  const fresh = () => ({
    rawMessage: 'hi', userId: 'u', contextMsgsJson: '[ {"role": "user", "content": "hi"} ]',
    extraJson: '{ "k": 1 }', tokenUsage: { prompt: 3 }, phase: 2, toolCalls: [], toolResults: [], memory: [],
  });
  const wire = fresh();

  it('passes fields a handler did not use through unchanged', () => {
    const ctx = stages.fromWire(fresh());
    ctx.rawMessage = 'changed';
    const w = stages.toWire(ctx);
    assert.equal(w.contextMsgsJson, wire.contextMsgsJson, 'not re-encoded');
    assert.equal(w.extraJson, wire.extraJson);
    assert.equal(w.rawMessage, 'changed');
  });

  it('re-encodes a field read and changed in place, and one replaced', () => {
    const ctx = stages.fromWire(fresh());
    ctx.contextMsgs.push({ role: 'system', content: 'x' });
    ctx.extra = { k: 2 };
    const w = stages.toWire(ctx);
    assert.deepEqual(JSON.parse(w.contextMsgsJson), [{ role: 'user', content: 'hi' }, { role: 'system', content: 'x' }]);
    assert.deepEqual(JSON.parse(w.extraJson), { k: 2 });
    assert.deepEqual(w.tokenUsage, { prompt: 3 });
  });

  it('a new object built from the context is encoded in full', () => {
    const ctx = stages.fromWire(fresh());
    const w = stages.toWire({ ...ctx, finalText: 'done' });
    assert.deepEqual(JSON.parse(w.contextMsgsJson), [{ role: 'user', content: 'hi' }]);
    assert.equal(w.finalText, 'done');
  });
});

describe('CallState (a call\'s abort state, its AbortSignal made on first use)', () => {
  const { CallState } = require('../lib/session');
  it('a signal taken after the abort is already aborted, with the reason', () => {
    const st = new CallState();
    const why = Object.assign(new Error('call 7 cancelled by the broker'), { name: 'AbortError' });
    st.abort(why);
    assert.equal(st.aborted, true);
    assert.equal(st.signal.aborted, true);
    assert.equal(st.signal.reason, why);
  });
  it('a signal taken before the abort fires abort once', () => {
    const st = new CallState();
    const { signal } = st;
    let fired = 0;
    signal.addEventListener('abort', () => { fired += 1; });
    assert.equal(signal.aborted, false);
    st.abort(new Error('first'));
    st.abort(new Error('second'));
    assert.equal(fired, 1);
    assert.equal(signal.reason.message, 'first');
    assert.equal(st.signal, signal, 'one signal per call');
  });
});
