'use strict';

// The plugin session against a fake broker, with real plugin processes
// (fixtures/homeagent: HomeAgent style, one tool per behaviour; the stress plugin's tools
// and faults are in stress.test.js).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const Long = require('long');
const { FakeBroker, fixture, eventually } = require('./helpers/broker');

const HA = fixture('homeagent');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe('session with a HomeAgent-style plugin', () => {
  let broker;
  let p;
  before(async () => {
    broker = await FakeBroker.start();
    p = await broker.attach(HA);
  });
  after(() => broker.close());

  it('sends Hello with protocol version, sdk, features and pid', () => {
    assert.equal(p.hello.protocolVersion, '1.0.0');
    assert.equal(p.hello.sdk, 'hearth-plugin-node');
    assert.equal(p.hello.sdkVersion, require('../package.json').version);
    assert.deepEqual(p.hello.features, ['cancel', 'progress', 'trace', 'batch']);
    assert.equal(p.hello.pid, p.proc.proc.pid);
  });

  it('registers HomeAgent tools with the given JSON Schema and no aiTool', () => {
    assert.equal(p.register.plugin.name, 'homeagent');
    const echo = p.register.tools.find((t) => t.name === 'ha_echo');
    assert.ok(echo, 'ha_echo registered');
    assert.equal(echo.description, 'returns its arguments');
    assert.deepEqual(JSON.parse(echo.parametersJson), { type: 'object', properties: { x: { type: 'number' } } });
    assert.equal(echo.aiTool, null);
    const fail = p.register.tools.find((t) => t.name === 'ha_fail');
    assert.deepEqual(JSON.parse(fail.parametersJson), { type: 'object', properties: {} }, 'missing parameters default to an empty object schema');
    assert.deepEqual(p.register.stages.map((h) => [h.stage, h.ownToolsOnly, h.hookId, h.noContextMsgs]), [
      [1, false, 'on_input#0', false], [4, true, 'before_toolcall#1', false], [6, false, 'before_output#2', false],
      [2, false, 'pre_action#3', true],
    ]);
    assert.deepEqual(p.register.configDefs.map((d) => ({ ...d })), [
      { key: 'provider_key', defaultJson: '', type: 'string', displayName: 'API Key', description: '第三方服务 API 密钥', category: '', options: [], required: true, secret: true },
      { key: 'days', defaultJson: '3', type: 'number', displayName: '', description: '', category: '', options: ['1', '3', '7'], min: 1, max: 7, step: 1, required: false, secret: false },
    ]);
    assert.equal(p.register.inject, null);
    assert.deepEqual(p.register.triggers, []);
  });

  it('maps a non-string value to JSON content and data_json', async () => {
    const r = await p.session.call1(1, 'ha_echo', { x: 42, s: '天气', nested: { a: [1, 2] } });
    assert.equal(r.success, true);
    assert.deepEqual(JSON.parse(r.content), { x: 42, s: '天气', nested: { a: [1, 2] } });
    assert.equal(r.dataJson, r.content);
    assert.equal(r.error, '');
  });

  it('maps a string to content as is, without data_json', async () => {
    const r = await p.session.call1(2, 'ha_text', { text: 'plain "text"' });
    assert.deepEqual([r.success, r.content, r.dataJson], [true, 'plain "text"', '']);
  });

  it('maps {isError: true, content} to success=false with that error', async () => {
    const r = await p.session.call1(3, 'ha_fail', {});
    assert.deepEqual([r.success, r.error, r.content], [false, 'bad input: x must be positive', '']);
  });

  it('maps undefined to an empty successful result', async () => {
    const r = await p.session.call1(4, 'ha_nothing', {});
    assert.deepEqual([r.success, r.content, r.dataJson], [true, '', '']);
  });

  it('turns a thrown error into "<Name>: <message>" and keeps serving', async () => {
    const r = await p.session.call1(5, 'ha_throw', {});
    assert.deepEqual([r.success, r.error], [false, 'TypeError: boom at call']);
    const again = await p.session.call1(6, 'ha_text', { text: 'alive' });
    assert.equal(again.content, 'alive');
    const re = /tool ha_throw \(call 5\) failed: TypeError: boom at call/;
    assert.match(await eventually(() => p.proc.stderr, re), re);
  });

  it('answers an unknown tool with an error naming it', async () => {
    const r = await p.session.call1(7, 'no_such_tool', {});
    assert.equal(r.success, false);
    assert.match(r.error, /plugin homeagent has no tool no_such_tool/);
  });

  it('matches 50 concurrent calls by call_id', async () => {
    const ids = Array.from({ length: 50 }, (_, i) => 1000 + i);
    // Later calls sleep less, so results come back out of order.
    for (const id of ids) p.session.invoke(id, 'ha_sleep', { ms: (1049 - id) * 4, id });
    const got = await Promise.all(ids.map((id) => p.session.result(id)));
    for (const [i, r] of got.entries()) {
      assert.equal(r.success, true, r.error);
      assert.deepEqual(JSON.parse(r.content), { id: ids[i], callId: String(ids[i]) });
    }
  });

  it('echoes 64-bit call ids and ping nonces exactly', async () => {
    const big = Long.fromString('18446744073709551615', true);
    const r = await p.session.call1(big, 'ha_text', { text: 'x' });
    assert.equal(r.callId.toString(), '18446744073709551615');
    const nonce = Long.fromString('9007199254740993', true);
    p.session.send({ ping: { nonce } });
    const pong = await p.session.nextOf('pong');
    assert.equal(pong.nonce.toString(), '9007199254740993');
  });

  it('answers Ping while a handler awaits a long promise', async () => {
    p.session.invoke(2000, 'ha_sleep', { ms: 4000, id: 1 });
    await sleep(50);
    p.session.send({ ping: { nonce: 77 } });
    // Answered while the 4 s handler is still awaiting (it is cancelled below).
    const pong = await p.session.nextOf('pong', 3000);
    assert.equal(Number(pong.nonce), 77);
    p.session.send({ cancel: { callId: 2000, reason: 'test cleanup' } });
  });

  it('Cancel aborts the handler signal and no result is sent', async () => {
    const marker = path.join(broker.dir, 'aborted.txt');
    p.session.invoke(3000, 'ha_wait_abort', { marker });
    await sleep(100);
    p.session.send({ cancel: { callId: 3000, reason: 'caller went away' } });
    for (let i = 0; i < 100 && !fs.existsSync(marker); i++) await sleep(20);
    assert.match(fs.readFileSync(marker, 'utf8'), /aborted: call 3000 cancelled by the broker: caller went away/);
    // A later call's result arrives; the cancelled call's never does.
    await p.session.call1(3001, 'ha_text', { text: 'after' });
    await sleep(100);
    assert.equal(p.session.messages.some((m) => m.msg === 'toolResult' && String(m.toolResult.callId) === '3000'), false);
  });

  it('sends Progress for the call', async () => {
    p.session.invoke(4000, 'ha_progress', {});
    const prog = await p.session.nextOf('progress');
    assert.deepEqual([String(prog.callId), prog.message, prog.fraction], ['4000', 'half way', 0.5]);
    assert.equal((await p.session.result(4000)).content, 'done');
  });

  it('runs stage hooks: context round trip, short-circuit response, deny, errors', async () => {
    const Long = require('long');
    p.session.send({ runStage: { callId: 6000, stage: 1, hookId: 'on_input#0', timeoutMs: 1000, context: {
      rawMessage: '  hi  ', userId: 'blocked_user', groupId: 'g', phase: 1, tokenUsage: { prompt: Long.fromNumber(12) },
      contextMsgsJson: '[{"role":"user","content":"hi"}]', extraJson: '{"seen":1,"k":"v"}', memory: [{ role: 'user', content: 'm', score: 0.5 }],
    } } });
    const r1 = await p.session.nextOf('stageResult');
    assert.equal(String(r1.callId), '6000');
    assert.equal(r1.error, '');
    const c = r1.context;
    assert.deepEqual([c.rawMessage, c.response, c.userId, c.phase], ['hi', '已被限制使用', 'blocked_user', 1]);
    assert.deepEqual(JSON.parse(c.extraJson), { seen: 2, k: 'v' });
    assert.deepEqual(JSON.parse(c.contextMsgsJson), [{ role: 'user', content: 'hi' }]);
    assert.equal(Number(c.tokenUsage.prompt), 12);
    assert.deepEqual([c.memory[0].content, c.memory[0].score], ['m', 0.5]);

    p.session.send({ runStage: { callId: 6001, stage: 4, hookId: 'before_toolcall#1', context: { phase: 4, toolCalls: [
      { id: 'a', name: 'ha_echo', plugin: 'homeagent', argumentsJson: '{"danger":true}' },
      { id: 'b', name: 'ha_text', plugin: 'homeagent', argumentsJson: '{"text":"ok"}' },
    ] } } });
    const r2 = await p.session.nextOf('stageResult');
    assert.deepEqual(r2.context.toolCalls.map((t) => [t.id, t.deny, t.denyReason, JSON.parse(t.argumentsJson)]), [
      ['a', true, 'homeagent: ha_echo refuses danger', { danger: true }], ['b', false, '', { text: 'ok' }],
    ]);
    assert.equal(Object.prototype.hasOwnProperty.call(r2.context, 'response'), false, 'response stays unset');

    p.session.send({ runStage: { callId: 6002, stage: 6, hookId: 'before_output#2', context: { finalText: 'x', phase: 6 } } });
    const r3 = await p.session.nextOf('stageResult');
    assert.equal(r3.error, 'RangeError: stage exploded');
    assert.equal(r3.context.finalText, 'x');
    p.session.send({ runStage: { callId: 6003, stage: 2, hookId: 'pre_action#9', context: {} } });
    assert.match((await p.session.nextOf('stageResult')).error, /plugin homeagent has no stage hook pre_action#9/);
  });

  it('reaches host services with its token (ctx.host, sdk.injectText)', async () => {
    broker.host.settings.set('homeagent', 'city', '北京');
    const r = await p.session.call1(7000, 'ha_setting', { key: 'city' });
    assert.deepEqual([r.success, r.content], [true, '北京'], 'a string value is the content as is');
    assert.equal(broker.host.settings.get('homeagent', 'city.copy'), '北京');
    const missing = await p.session.call1(7001, 'ha_setting', { key: 'nope' });
    assert.equal(missing.error, 'HostError: plugin homeagent: settings.get: NOT_FOUND: no `nope` in config_homeagent');
    const inj = await p.session.call1(7002, 'ha_inject', { text: '提醒：喝水' });
    assert.equal(inj.content, 'injected');
    const sent = (/** @type {string} */ method) => broker.lastCall(method);
    assert.deepEqual(sent('input.injectText'), { source: 'homeagent', channel: 'timer', text: '提醒：喝水', userId: '', groupId: '', priority: 0 });
    const as = { method: 'injectText', plugin: 'homeagent', source: 'plugin:homeagent', userId: 'plugin:homeagent', channel: 'timer', noMemory: false, interrupt: false };
    assert.deepEqual(broker.host.injected.at(-1), { ...as, groupId: '', text: '提醒：喝水', priority: 'background' });
    // The conversation and priority travel with the input.
    await p.session.call1(7003, 'ha_inject', { text: 'to the group', group: 'g1' });
    assert.deepEqual(sent('input.injectText'), { source: 'homeagent', channel: 'timer', text: 'to the group', userId: '', groupId: 'g1', priority: 2 });
    assert.deepEqual(broker.host.injected.at(-1), { ...as, groupId: 'g1', text: 'to the group', priority: 'message' });
    // Speaking as another user needs capability input_as_user (the broker's rule).
    const ann = await p.session.call1(7004, 'ha_inject', { text: 'to ann', user: 'ann' });
    assert.deepEqual(sent('input.injectText'), { source: 'homeagent', channel: 'timer', text: 'to ann', userId: 'ann', groupId: '', priority: 4 });
    assert.match(ann.error, /^HostError: plugin homeagent: input\.injectText: PERMISSION_DENIED: plugin homeagent: Input\.InjectText: `user_id` "ann" is not this plugin \(plugin:homeagent\); injecting as another user or source needs capability `input_as_user`/);
    broker.host.grant('homeagent', ['input', 'input_as_user']);
    await p.session.call1(7005, 'ha_inject', { text: 'to ann', user: 'ann' });
    assert.deepEqual(broker.host.injected.at(-1), { ...as, userId: 'ann', groupId: '', text: 'to ann', priority: 'critical' });
  });

  it('keeps working when the plugin floods stdout', async () => {
    const r = await p.session.call1(5000, 'ha_noisy', {});
    assert.equal(r.content, 'still fine');
    assert.match(await eventually(() => p.proc.stdout, /junk line 1999/), /junk on stdout at load time[\s\S]*junk line 0 [\s\S]*junk line 1999 /);
  });
});

describe('session lifecycle', () => {
  let broker;
  before(async () => { broker = await FakeBroker.start(); });
  after(() => broker.close());

  it('Shutdown calls stop(), closes the stream and exits 0 within grace_ms', async () => {
    const marker = path.join(broker.dir, 'stopped.txt');
    const p = await broker.attach(HA, { env: { STOP_MARKER: marker } });
    p.session.invoke(1, 'ha_sleep', { ms: 10000, id: 1 }); // in flight: abandoned, not waited for
    await sleep(50);
    p.session.send({ shutdown: { graceMs: 1500, reason: 'test' } });
    // The 10 s handler is abandoned, not waited for: the bounds below are far under 10 s.
    await p.session.waitEnd(8000);
    const { code } = await p.proc.exit(8000);
    assert.equal(code, 0);
    assert.equal(fs.readFileSync(marker, 'utf8'), 'stopped');
  });

  it('exits when the broker closes the stream, calling stop()', async () => {
    const marker = path.join(broker.dir, 'stopped2.txt');
    const p = await broker.attach(HA, { env: { STOP_MARKER: marker } });
    p.session.end();
    const { code } = await p.proc.exit(3000);
    assert.equal(code, 0);
    assert.equal(fs.readFileSync(marker, 'utf8'), 'stopped');
    assert.match(p.proc.stderr, /broker closed the session/);
  });

  it('exits 1 when the stream fails (broker killed mid-session)', async () => {
    const other = await FakeBroker.start();
    try {
      const p = await other.attach(HA);
      other.server.forceShutdown();
      const { code } = await p.proc.exit(3000);
      assert.equal(code, 1);
      assert.match(p.proc.stderr, /session stream failed/);
    } finally {
      await other.close();
    }
  });

  it('dials HEARTH_ADDR as unix:/abs/path and as http://127.0.0.1:PORT', async () => {
    const p1 = await broker.attach(HA, { env: { HEARTH_ADDR: `unix:${broker.sock}` } });
    assert.equal((await p1.session.call1(1, 'ha_text', { text: 'unix:/' })).content, 'unix:/');
    p1.session.send({ shutdown: { graceMs: 1000 } });
    assert.equal((await p1.proc.exit()).code, 0);
    const port = await new Promise((resolve, reject) => broker.server.bindAsync('127.0.0.1:0', require('@grpc/grpc-js').ServerCredentials.createInsecure(), (e, port) => (e ? reject(e) : resolve(port))));
    const p2 = await broker.attach(HA, { env: { HEARTH_ADDR: `http://127.0.0.1:${port}` } });
    assert.equal((await p2.session.call1(1, 'ha_text', { text: 'tcp' })).content, 'tcp');
    p2.session.send({ shutdown: { graceMs: 1000 } });
    assert.equal((await p2.proc.exit()).code, 0);
  });

  it('exits 1 with UNAUTHENTICATED on a wrong token', async () => {
    const before = broker.unauthenticated;
    const proc = broker.spawn(HA, { token: 'stale-token' });
    const { code } = await proc.exit(5000);
    assert.equal(code, 1);
    assert.equal(broker.unauthenticated, before + 1);
    assert.match(proc.stderr, /UNAUTHENTICATED: invalid or stale x-hearth-token/);
  });

  it('exits 1 when nothing listens on HEARTH_ADDR', async () => {
    const proc = broker.spawn(HA, { env: { HEARTH_ADDR: `unix://${path.join(broker.dir, 'nobody.sock')}` } });
    const { code } = await proc.exit(8000);
    assert.equal(code, 1);
    assert.match(proc.stderr, /UNAVAILABLE/);
  });

  it('exits 2 when HEARTH_ADDR is not set', async () => {
    const proc = broker.spawn(HA, { env: { HEARTH_ADDR: '' } });
    const { code } = await proc.exit(5000);
    assert.equal(code, 2);
    assert.match(proc.stderr, /HEARTH_ADDR is not set/);
  });

  it('exits 3 on Rejected, with the reason and items on stderr', async () => {
    const proc = broker.spawn(HA);
    const s = await broker.nextSession();
    await s.nextOf('register');
    s.send({ rejected: { reason: 'protocol major version 1 not supported', items: [{ kind: 'plugin', name: 'homeagent', reason: 'too old' }] } });
    const { code } = await proc.exit(5000);
    assert.equal(code, 3);
    assert.match(proc.stderr, /broker rejected the registration: protocol major version 1 not supported/);
    assert.match(proc.stderr, /rejected plugin homeagent: too old/);
  });

  it('logs each item of Registered.rejected by name and serves the rest', async () => {
    const p = await broker.attach(HA, { rejected: [{ kind: 'tool', name: 'ha_fail', reason: 'duplicate tool name (plugin other has it)' }] });
    const r = await p.session.call1(1, 'ha_text', { text: 'ok' });
    assert.equal(r.content, 'ok');
    const re = /broker rejected tool ha_fail: duplicate tool name \(plugin other has it\)/;
    assert.match(await eventually(() => p.proc.stderr, re), re);
    p.session.send({ shutdown: { graceMs: 1000 } });
    assert.equal((await p.proc.exit(2000)).code, 0);
  });
});

describe('batches (feature "batch")', () => {
  let broker;
  before(async () => { broker = await FakeBroker.start(); });
  after(() => broker.close());

  for (const features of [['cancel', 'progress', 'batch'], ['cancel', 'progress']]) {
    it(`reads a HostBatch and ${features.includes('batch') ? 'answers calls that finish together in PluginBatch' : 'sends no PluginBatch when the broker did not offer it'}`, async () => {
      const p = await broker.attach(HA, { features });
      const ids = Array.from({ length: 20 }, (_, i) => 100 + i);
      const msgs = ids.map((callId, i) => ({ invokeTool: { callId, tool: 'ha_echo', argsJson: JSON.stringify({ x: i }), timeoutMs: 5000 } }));
      msgs.push({ ping: { nonce: 77 } });
      p.session.send({ batch: { msgs } });
      const results = await Promise.all(ids.map((id) => p.session.result(id)));
      assert.deepEqual(results.map((r) => JSON.parse(r.content)), ids.map((_, i) => ({ x: i })));
      assert.equal(Number((await p.session.nextOf('pong')).nonce), 77);
      if (features.includes('batch')) assert.ok(p.session.batches >= 1 && p.session.batches < 20, `batches: ${p.session.batches}`);
      else assert.equal(p.session.batches, 0);
      // A lone call is answered on its own, and a nested batch is ignored with a log line.
      p.session.send({ batch: { msgs: [{ batch: { msgs: [] } }] } });
      const before = p.session.batches;
      assert.deepEqual(JSON.parse((await p.session.call1(500, 'ha_echo', { x: -1 })).content), { x: -1 });
      assert.equal(p.session.batches, before);
      await eventually(() => p.proc.stderr, /ignoring a batch nested in a batch/);
      p.session.send({ shutdown: { graceMs: 1000 } });
      assert.equal((await p.proc.exit(2000)).code, 0);
    });
  }

  it('frames PluginBatch by hand exactly as protobufjs encodes it', () => {
    const { batchMessage } = require('../lib/session');
    const { hearth } = require('../gen/hearth');
    const PM = hearth.v1.PluginMessage;
    const parts = [
      { toolResult: { callId: 1, success: true, content: 'x'.repeat(200) } },
      { eventDone: { callId: 2, error: '' } },
      { toolResult: { callId: 300000, success: false, error: '天气'.repeat(5000) } },
    ];
    const encoded = parts.map((m) => Buffer.from(PM.encode(m).finish()));
    const ours = batchMessage(encoded);
    assert.deepEqual(ours, Buffer.from(PM.encode({ batch: { msgs: parts } }).finish()));
    assert.deepEqual(PM.decode(ours).batch.msgs.map((m) => m.msg), ['toolResult', 'eventDone', 'toolResult']);
  });
});
