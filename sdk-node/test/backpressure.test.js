'use strict';

// Large results and write backpressure, with the stress plugin (tests/plugins/stress.js,
// P_big): the broker stops reading, the plugin's writes back up (write() → false), the
// SDK queues and flushes on 'drain'; nothing is lost.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { FakeBroker, STRESS_PLUGIN, eventually } = require('./helpers/broker');

const MiB = 1024 * 1024;

describe('large results and backpressure', () => {
  let broker;
  let p;
  before(async () => {
    broker = await FakeBroker.start();
    p = await broker.attach(STRESS_PLUGIN, { name: 'st', env: { HEARTH_SDK_DEBUG: '1' } });
  });
  after(() => broker.close());

  it('delivers a 6 MiB result intact', async () => {
    const r = await p.session.call1(1, 'st_big', { bytes: 6 * MiB });
    assert.equal(r.success, true);
    assert.equal(Buffer.byteLength(r.content), 6 * MiB);
    assert.match(r.content, /^x+$/);
  });

  it('queues writes while the broker does not read and flushes them on drain', async () => {
    p.session.call.pause(); // stop reading: HTTP/2 flow control pushes back on the plugin
    p.session.invoke(10, 'st_big', { bytes: 6 * MiB });
    for (let i = 0; i < 40; i++) p.session.invoke(100 + i, 'st_echo', { x: i });
    const blocked = /backpressure: write\(\) returned false; queueing until drain/;
    assert.match(await eventually(() => p.proc.stderr, blocked), blocked);
    p.session.call.resume();
    const big = await p.session.result(10, 10000);
    assert.equal(big.content.length, 6 * MiB);
    for (let i = 0; i < 40; i++) {
      const r = await p.session.result(100 + i);
      assert.deepEqual(JSON.parse(r.content), { x: i });
    }
    const m = /drain: flushing (\d+) queued message\(s\)/.exec(await eventually(() => p.proc.stderr, /drain: flushing/));
    assert.ok(m && Number(m[1]) > 0, `no drain flush logged:\n${p.proc.stderr}`);
    // Ping still answered afterwards.
    p.session.send({ ping: { nonce: 5 } });
    assert.equal(Number((await p.session.nextOf('pong')).nonce), 5);
  });

  it('turns a result over the 64 MiB limit into an error result and keeps the session', async () => {
    const r = await p.session.call1(20, 'st_big', { bytes: 65 * MiB }, undefined);
    assert.equal(r.success, false);
    assert.match(r.error, /^tool st_big: result is \d+ bytes, over the 64 MiB message limit$/);
    const ok = await p.session.call1(21, 'st_echo', { still: 'here' });
    assert.deepEqual(JSON.parse(ok.content), { still: 'here' });
  });
});
