'use strict';

// The Node stress plugin (tests/plugins/stress.js, spec tests/plugins/STRESS.md) against
// the fake broker: its tools, the faults a fake broker can observe, and the SDK test hooks
// (hearthProtocolVersion, hearthAfterHello) they use.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { FakeBroker, STRESS_PLUGIN, fixture, eventually } = require('./helpers/broker');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Resolves with the Pong for `nonce`, or null when none comes within `ms`. */
async function pong(session, nonce, ms) {
  session.send({ ping: { nonce } });
  try {
    return await session.next((m) => m.msg === 'pong' && Number(m.pong.nonce) === nonce, ms, `pong ${nonce}`);
  } catch (_) {
    return null;
  }
}

describe('stress plugin (tests/plugins/stress.js)', () => {
  let broker;
  before(async () => { broker = await FakeBroker.start(); });
  after(() => broker.close());

  it('many_tools,bad_schema: registers 2,006 tools and serves them', async () => {
    const p = await broker.attach(STRESS_PLUGIN, { name: 'st', env: { HEARTH_FAULT: 'many_tools,bad_schema' } });
    const names = p.register.tools.map((t) => t.name);
    assert.equal(p.register.plugin.name, 'st');
    assert.equal(names.length, 2006);
    assert.deepEqual(names.slice(0, 5), ['st_echo', 'st_sleep', 'st_fail', 'st_big', 'st_hang']);
    assert.ok(names.includes('st_t0') && names.includes('st_t1999'));
    const bad = p.register.tools.find((t) => t.name === 'st_bad_schema');
    assert.deepEqual(JSON.parse(bad.parametersJson), { type: 12 });
    assert.equal((await p.session.call1(1, 'st_t1999', {})).content, 'st_t1999');
    const echo = await p.session.call1(2, 'st_echo', { a: [1, '二'] });
    assert.deepEqual([echo.success, JSON.parse(echo.content), echo.dataJson], [true, { a: [1, '二'] }, echo.content]);
    const fail = await p.session.call1(3, 'st_fail', {});
    assert.deepEqual([fail.success, fail.error], [false, 'Error: st_fail: failing on purpose']);
    assert.equal((await p.session.call1(4, 'st_t0', {})).content, 'st_t0', 'still serving after P_fail');
    p.session.send({ shutdown: { graceMs: 1000 } });
    assert.equal((await p.proc.exit(3000)).code, 0);
  });

  it('P_sleep: Progress every progress_ms, "P_sleep: cancelled" on Cancel; HEARTH_TOOL_PREFIX; junk_stdout', async () => {
    const p = await broker.attach(STRESS_PLUGIN, { name: 'st', env: { HEARTH_TOOL_PREFIX: 'px', HEARTH_FAULT: 'junk_stdout' } });
    assert.equal(p.register.tools[0].name, 'px_echo');
    const done = await p.session.call1(1, 'px_sleep', { ms: 50 });
    assert.equal(done.content, 'slept 50 ms');
    p.session.invoke(2, 'px_sleep', { ms: 5000, progress_ms: 40 });
    const first = await p.session.nextOf('progress');
    const second = await p.session.nextOf('progress');
    assert.equal(String(first.callId), '2');
    assert.match(second.message, /^slept \d+ of 5000 ms$/);
    assert.ok(second.fraction > 0 && second.fraction < 1, String(second.fraction));
    p.session.send({ cancel: { callId: 2, reason: 'test' } });
    const out = await eventually(() => p.proc.stdout, /px_sleep: cancelled/);
    assert.match(out, /px_sleep: cancelled\n/);
    assert.match(out, /\*\*\* stress plugin st banner: start \*\*\*\n\uFFFD/);
    assert.match(out, /banner: call \*\*\*/);
    assert.equal(p.session.messages.some((m) => m.msg === 'toolResult' && String(m.toolResult.callId) === '2'), false);
  });

  it('P_hang freezes the whole process: Ping gets no Pong', async () => {
    const p = await broker.attach(STRESS_PLUGIN, { name: 'st' });
    assert.ok(await pong(p.session, 1, 2000), 'answers Ping before P_hang');
    p.session.invoke(1, 'st_hang', {});
    await eventually(() => p.proc.stderr, /st_hang: freezing/);
    assert.equal(await pong(p.session, 2, 700), null);
    assert.ok(p.proc.running);
    p.proc.proc.kill('SIGKILL');
  });

  it('crash_mid_call: P_sleep exits 1 halfway', async () => {
    const p = await broker.attach(STRESS_PLUGIN, { name: 'st', env: { HEARTH_FAULT: 'crash_mid_call' } });
    p.session.invoke(1, 'st_sleep', { ms: 600 });
    assert.equal((await p.proc.exit(5000)).code, 1);
    assert.match(p.proc.stderr, /st_sleep: crashing mid-call \(crash_mid_call\)/);
  });

  it('exit_before_hello: exit 1 without dialling', async () => {
    const proc = broker.spawn(STRESS_PLUGIN, { name: 'st', env: { HEARTH_FAULT: 'exit_before_hello' } });
    assert.equal((await proc.exit()).code, 1);
    assert.match(proc.stderr, /stress: exit_before_hello/);
    assert.equal(broker.sessions.length, 0);
  });

  it('wrong_version: Hello carries 99.0.0; Rejected → exit 3', async () => {
    const proc = broker.spawn(STRESS_PLUGIN, { name: 'st', env: { HEARTH_FAULT: 'wrong_version' } });
    const s = await broker.nextSession();
    assert.equal((await s.nextOf('hello')).protocolVersion, '99.0.0');
    s.send({ rejected: { reason: 'unsupported protocol version 99.0.0 (broker speaks 1.x)', items: [] } });
    assert.equal((await proc.exit()).code, 3);
    assert.match(proc.stderr, /broker rejected the registration: unsupported protocol version 99\.0\.0/);
  });

  it('exit_after_hello: Hello, no Register, exit 1', async () => {
    const proc = broker.spawn(STRESS_PLUGIN, { name: 'st', env: { HEARTH_FAULT: 'exit_after_hello' } });
    const s = await broker.nextSession();
    assert.equal((await s.nextOf('hello')).protocolVersion, '1.0.0');
    assert.equal((await proc.exit()).code, 1);
    assert.deepEqual(s.messages.map((m) => m.msg), []);
    assert.match(proc.stderr, /hearthAfterHello ended the session before Register \(exit code 1\)/);
  });

  it('never_register,grandchild: Hello, then no Register and no Pong, even after the stream ends; GRANDCHILD_PID', async () => {
    const proc = broker.spawn(STRESS_PLUGIN, { name: 'st', env: { HEARTH_FAULT: 'never_register,grandchild' } });
    const s = await broker.nextSession();
    await s.nextOf('hello');
    assert.equal(await pong(s, 1, 500), null);
    assert.deepEqual(s.messages.map((m) => m.msg), []);
    s.end();
    await sleep(300);
    assert.ok(proc.running, `exited: ${proc.stderr}`);
    const pid = Number(/GRANDCHILD_PID=(\d+)\n/.exec(proc.stdout)[1]);
    process.kill(pid, 0); // alive
    process.kill(pid, 'SIGKILL');
    proc.proc.kill('SIGKILL');
  });

  it('flood: Pings are answered while it floods stdout and stderr', async () => {
    const p = await broker.attach(STRESS_PLUGIN, { name: 'st', env: { HEARTH_FAULT: 'flood' } });
    const re = /x\n\uFFFD+[^\n]*flood: invalid utf-8 line[^\n]*\nflood \./;
    assert.match(await eventually(() => p.proc.stdout, re, 8000), re);
    for (let i = 1; i <= 5; i++) {
      assert.ok(await pong(p.session, i, 5000), `ping ${i} unanswered while flooding`);
      await sleep(50);
    }
    assert.match(p.proc.stderr, /flood \.{1017}\n/);
    assert.ok(p.proc.stdout.length > 10 * 1024 * 1024);
    p.proc.proc.kill('SIGKILL');
  });
});

describe('test hooks', () => {
  let broker;
  before(async () => { broker = await FakeBroker.start(); });
  after(() => broker.close());

  it('a static hearthAfterHello that returns nothing runs before Register; a Ping meanwhile is answered', async () => {
    const proc = broker.spawn(fixture('after-hello'));
    const s = await broker.nextSession();
    await s.nextOf('hello');
    s.send({ ping: { nonce: 9 } });
    assert.equal(Number((await s.nextOf('pong')).nonce), 9);
    const register = await s.nextOf('register');
    assert.equal(register.tools[0].name, 'late_echo');
    // The hook ran to its end (it writes this line just before returning).
    assert.match(await eventually(() => proc.stderr, /after-hello hook done/), /after-hello hook done/);
    s.send({ registered: { plugin: 'late', tools: ['late_echo'], protocolVersion: '1.0.0' } });
    assert.deepEqual(JSON.parse((await s.call1(1, 'late_echo', { ok: 1 })).content), { ok: 1 });
    s.send({ shutdown: { graceMs: 1000 } });
    assert.equal((await proc.exit()).code, 0);
  });
});
