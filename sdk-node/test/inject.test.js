'use strict';

// LinkZone inject mode: `@ai-trigger-*` header comments (lib/header.js), Register's
// inject and triggers, and HandleEvent → Reply* → EventDone, with the fixtures and the
// test plugin tests/plugins/lz_translate.js.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { FakeBroker, fixture } = require('./helpers/broker');
const { parseHeader, HeaderError } = require('../lib/header');

const TEST_PLUGINS = path.resolve(__dirname, '..', '..', 'tests', 'plugins');
const WEATHER = { usage: '查询天气信息', format: '/weather {city}', args: { city: '城市名称' } };

/**
 * One HandleEvent round trip, or several at once: sends the events, then reads until each
 * sent EventDone. Resolves with [[replies in order, error], …] in the order given.
 * @param {any} session
 * @param {Array<{callId: number, message: string, params: string[], sender?: object, trigger?: object}>} events
 */
async function roundTrips(session, events) {
  for (const e of events) {
    session.send({ handleEvent: { sender: { userId: 'u1' }, trigger: { type: 0, pattern: e.message.split(' ')[0] }, timeoutMs: 10000, ...e } });
  }
  const ids = new Set(events.map((e) => String(e.callId)));
  /** @type {Map<string, string[]>} */
  const replies = new Map([...ids].map((id) => [id, []]));
  /** @type {Map<string, string>} */
  const done = new Map();
  while (done.size < ids.size) {
    const m = await session.next((x) => x.msg === 'reply' || x.msg === 'eventDone', 10000, 'Reply or EventDone');
    const body = m[m.msg];
    const id = String(body.callId);
    assert.ok(ids.has(id) && !done.has(id), `unexpected ${m.msg} for call ${id}`);
    if (m.msg === 'reply') replies.get(id).push(body.text);
    else done.set(id, body.error);
  }
  return events.map((e) => [replies.get(String(e.callId)), done.get(String(e.callId))]);
}

/** @returns {Promise<[string[], string]>} */
async function roundTrip(session, callId, message, params, extra = {}) {
  return (await roundTrips(session, [{ callId, message, params, ...extra }]))[0];
}

describe('header comments (lib/header.js)', () => {
  it('reads // lines, /* */ and /** */ blocks, after a shebang and use strict', () => {
    const line = '// @ai-triggerable true\n// @ai-trigger-usage 查询天气信息\n// @ai-trigger-format /weather {city}\n// @ai-trigger-args {"city":"城市名称"}\nconst x = 1;\n';
    assert.deepEqual(parseHeader(line, 'F'), WEATHER);
    const block = [
      '#!/usr/bin/env node',
      "'use strict';",
      '/**',
      ' * Weather plugin. Prose that mentions @ai-trigger-usage is not a tag; @ai-trigger-other is ignored.',
      ' *',
      ' * @ai-triggerable TRUE',
      ' *   @ai-trigger-usage 查询天气信息',
      ' */',
      '/* @ai-trigger-format /weather {city} */',
      '// @ai-trigger-args {"city":"城市名称"}',
      "const { Plugin } = require('hearth-plugin');",
      '// @ai-trigger-usage after the first statement: not part of the header',
    ].join('\r\n');
    assert.deepEqual(parseHeader(block, 'F'), WEATHER);
    assert.deepEqual(parseHeader('/** @ai-triggerable */\n// @ai-trigger-usage u\n// @ai-trigger-format /u {x}\n', 'F'), { usage: 'u', format: '/u {x}', args: {} });
  });

  it('declares nothing without @ai-triggerable true', () => {
    const tags = '// @ai-trigger-usage u\n// @ai-trigger-format /u\n';
    assert.equal(parseHeader(tags, 'F'), undefined);
    assert.equal(parseHeader(`// @ai-triggerable false\n${tags}`, 'F'), undefined);
    assert.equal(parseHeader(`const a = 1;\n// @ai-triggerable true\n${tags}`, 'F'), undefined);
    assert.equal(parseHeader('', 'F'), undefined);
  });

  const bad = [
    ['// @ai-triggerable true\n// @ai-trigger-usage u\n// @ai-trigger-format f\n// @ai-trigger-args {city: 1}\n', 'F: line 4: @ai-trigger-args: not valid JSON'],
    ['/*\n@ai-trigger-args ["city"]\n*/', 'F: line 2: @ai-trigger-args: expected a JSON object of strings, got array: ["city"]'],
    ['// @ai-trigger-args {"city": 1}', "F: line 1: @ai-trigger-args: argument 'city': the description must be a string, got 1"],
    ['// @ai-trigger-args', 'F: line 1: @ai-trigger-args: expected a JSON object of strings'],
    ['// @ai-triggerable yes', "F: line 1: @ai-triggerable must be true or false, got 'yes'"],
    ['// @ai-triggerable true\n// @ai-trigger-usage u', 'F: line 1: @ai-triggerable true needs @ai-trigger-format'],
    ['// @ai-trigger-usage a\n\n// @ai-trigger-usage b', 'F: line 3: @ai-trigger-usage given twice (first on line 1)'],
  ];
  for (const [text, message] of bad) {
    it(`rejects ${JSON.stringify(text.split('\n').at(-1).slice(0, 40))} naming the line`, () => {
      assert.throws(() => parseHeader(text, 'F'), (e) => e instanceof HeaderError && e.message.startsWith(message));
    });
  }
});

describe('header comments end to end', () => {
  let broker;
  before(async () => { broker = await FakeBroker.start(); });
  after(() => broker.close());

  it('registers the inject spec of a /** */ header (ES module) with metadata triggers', async () => {
    const p = await broker.attach(fixture('inject-block', 'index.mjs'));
    assert.deepEqual(p.register.tools, []);
    assert.deepEqual([p.register.inject.usage, p.register.inject.format, { ...p.register.inject.args }], [WEATHER.usage, WEATHER.format, WEATHER.args]);
    assert.deepEqual(p.register.triggers.map((t) => [t.type, t.pattern]), [[0, '/weather']]);
    assert.deepEqual(await roundTrip(p.session, 1, '/weather 北京', ['北京']), [['weather of 北京'], '']);
  });

  it("lets metadata's explicit ai.inject win over the header", async () => {
    const p = await broker.attach(fixture('inject-explicit'));
    assert.deepEqual([p.register.inject.usage, p.register.inject.format, { ...p.register.inject.args }], ['from metadata', '/weather {place}', {}]);
  });

  it('fails with exit 2 naming the file and line of malformed @ai-trigger-args', async () => {
    const entry = fixture('bad-header');
    const proc = broker.spawn(entry);
    const { code } = await proc.exit(10000);
    assert.equal(code, 2, proc.stderr);
    assert.ok(proc.stderr.includes(`plugin file ${entry}: line 5: @ai-trigger-args: not valid JSON`), proc.stderr);
  });
});

for (const style of ['async', 'sync']) {
  describe(`HandleEvent round trips (${style} handleEvent)`, () => {
    let broker;
    let p;
    before(async () => {
      broker = await FakeBroker.start();
      p = await broker.attach(fixture('events'), { env: style === 'sync' ? { EVENTS_SYNC: '1' } : {} });
    });
    after(() => broker.close());

    it('registers the // header inject and both triggers', () => {
      assert.equal(p.register.inject.format, '/ev {what} {arg}');
      assert.deepEqual({ ...p.register.inject.args }, { what: 'several | boom | silent | json | 其他', arg: '任意参数' });
      assert.deepEqual(p.register.triggers.map((t) => [t.type, t.pattern]), [[0, '/ev'], [1, 'ping']]);
    });

    it('gives the handler message, params, sender; param(i) out of range is null', async () => {
      const [replies, error] = await roundTrip(p.session, 1, '/ev 中文 参数', ['中文', '参数'], { sender: { userId: 'u1', groupId: 'g1', channel: 'qq' } });
      assert.equal(error, '');
      assert.deepEqual(JSON.parse(replies[0]), {
        p0: '中文', p1: '参数', p9: null, neg: null, half: null, message: '/ev 中文 参数', params: ['中文', '参数'], user: 'u1', group: 'g1', channel: 'qq',
      });
      const [none] = await roundTrip(p.session, 2, 'ping', [], { trigger: { type: 1, pattern: 'ping' } });
      assert.equal(JSON.parse(none[0]).p0, null);
    });

    it('sends several replies in order, then EventDone', async () => {
      assert.deepEqual(await roundTrip(p.session, 3, '/ev several', ['several']), [['part 0', 'part 1', 'part 2'], '']);
    });

    it('sends EventDone with no replies for a handler that never replies', async () => {
      assert.deepEqual(await roundTrip(p.session, 4, '/ev silent', ['silent']), [[], '']);
    });

    it('turns a thrown error into EventDone.error after the replies sent so far', async () => {
      assert.deepEqual(await roundTrip(p.session, 5, '/ev boom x', ['boom', 'x']), [['before the error'], 'RangeError: no such thing: x']);
    });

    it('sends a non-string reply as JSON text', async () => {
      assert.deepEqual(await roundTrip(p.session, 6, '/ev json', ['json']), [['{"k":[1,"二"]}'], '']);
    });

    it('keeps each event\'s replies in order with several events in flight', async () => {
      const events = [10, 11, 12, 13, 14].map((callId) => ({ callId, message: '/ev several', params: ['several'] }));
      for (const r of await roundTrips(p.session, events)) assert.deepEqual(r, [['part 0', 'part 1', 'part 2'], '']);
      assert.ok(p.proc.running);
    });
  });
}

describe('tests/plugins/lz_translate.js', () => {
  const { cases } = JSON.parse(fs.readFileSync(path.join(TEST_PLUGINS, 'lz_translate_cases.json'), 'utf8'));
  let broker;
  let p;
  before(async () => {
    broker = await FakeBroker.start();
    p = await broker.attach(path.join(TEST_PLUGINS, 'lz_translate.js'), { name: 'translate' });
  });
  after(() => broker.close());

  it('registers the seed metadata: inject and the /translate trigger, no tools', () => {
    const r = p.register;
    assert.equal(r.plugin.name, 'translate');
    assert.deepEqual(r.tools, []);
    assert.deepEqual([r.inject.usage, r.inject.format, { ...r.inject.args }], ['翻译文本到指定语言', '/translate {text} {lang}', { text: '要翻译的文本', lang: '目标语言（如 en、ja、zh）'}]);
    assert.deepEqual(r.triggers.map((t) => [t.type, t.pattern]), [[0, '/translate']]);
  });

  it('replies like the Python twin (lz_translate_cases.json)', async () => {
    let callId = 100;
    for (const c of cases) {
      const got = await roundTrip(p.session, callId++, ['/translate', ...c.params].join(' '), c.params);
      assert.deepEqual(got, [c.replies, c.error], JSON.stringify(c));
    }
  });
});
