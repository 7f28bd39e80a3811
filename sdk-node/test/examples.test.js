'use strict';

// Ported LinkZone plugins run with only the import changed: the weather example
// (ai.tool + ai.inject + triggers), the calculator fixture, an ES module plugin; and
// entry files that export nothing usable fail clearly.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { FakeBroker, fixture } = require('./helpers/broker');

const WEATHER = path.resolve(__dirname, '..', '..', 'examples', 'plugins', 'weather', 'index.js');

describe('examples/plugins/weather', () => {
  let broker;
  let p;
  before(async () => {
    broker = await FakeBroker.start();
    p = await broker.attach(WEATHER, { env: { WEATHER_TODAY: '2026-07-01' } });
  });
  after(() => broker.close());

  it('registers ai.tool (no parameters_json), ai.inject and the /weather trigger', () => {
    const r = p.register;
    assert.equal(r.plugin.name, 'weather');
    assert.equal(r.tools.length, 1);
    const t = r.tools[0];
    assert.equal(t.name, 'weather');
    assert.equal(t.parametersJson, '');
    assert.equal(t.aiTool.usage, '查询指定城市的天气信息');
    assert.equal(t.aiTool.whenToUse, '当用户询问天气、气温、是否下雨等问题时');
    assert.deepEqual(t.aiTool.parameters.map((x) => [x.name, x.type, x.required, x.defaultJson]), [['city', 'string', true, ''], ['days', 'number', false, '1']]);
    assert.equal(r.inject.usage, '查询天气信息');
    assert.equal(r.inject.format, '/weather {city}');
    assert.deepEqual({ ...r.inject.args }, { city: '城市名称' });
    assert.deepEqual(r.triggers.map((x) => [x.type, x.pattern]), [[0, '/weather']]);
  });

  it('returns a deterministic forecast as JSON content', async () => {
    const a = await p.session.call1(1, 'weather', { city: '北京', days: 3 });
    assert.equal(a.success, true, a.error);
    const data = JSON.parse(a.content);
    assert.equal(data.city, '北京');
    assert.deepEqual(data.forecast.map((d) => d.date), ['2026-07-01', '2026-07-02', '2026-07-03']);
    for (const d of data.forecast) {
      assert.ok(d.high >= d.low, `high ${d.high} >= low ${d.low}`);
      assert.ok(d.high > 20 && d.high < 40, `Beijing July high ${d.high}`);
      assert.equal(typeof d.condition, 'string');
    }
    const b = await p.session.call1(2, 'weather', { city: '北京市', days: 3 });
    assert.equal(b.content, a.content, 'same city and dates → same forecast');
    const london = JSON.parse((await p.session.call1(3, 'weather', { city: 'london' })).content);
    assert.equal(london.city_en, 'London');
    assert.equal(london.forecast.length, 1, 'days defaults to 1');
    assert.notEqual(JSON.stringify(london.forecast[0]), JSON.stringify(data.forecast[0]));
  });

  it('answers an unknown city with a clear error result', async () => {
    const r = await p.session.call1(4, 'weather', { city: 'Atlantis' });
    assert.equal(r.success, false);
    assert.match(r.error, /^UnknownCityError: unknown city "Atlantis"; known cities: 北京 \(Beijing\), 上海 \(Shanghai\)/);
    const bad = await p.session.call1(5, 'weather', { city: '上海', days: 30 });
    assert.equal(bad.error, 'RangeError: days must be an integer from 1 to 7, got 30');
  });

  it('serves /weather through handleEvent: Reply then EventDone', async () => {
    p.session.send({ handleEvent: { callId: 10, message: '/weather 上海', params: ['上海'], sender: { userId: 'u' }, trigger: { type: 0, pattern: '/weather' } } });
    const reply = await p.session.nextOf('reply');
    assert.equal(String(reply.callId), '10');
    assert.match(reply.text, /^上海（Shanghai）天气：\n2026-07-01 \S+ -?\d+~-?\d+°C 湿度\d+% \S+ 降水概率\d+%\n（离线示例数据）$/);
    const done = await p.session.nextOf('eventDone');
    assert.deepEqual([String(done.callId), done.error], ['10', '']);
  });
});

describe('ported LinkZone plugins', () => {
  let broker;
  before(async () => { broker = await FakeBroker.start(); });
  after(() => broker.close());

  it('runs the calculator with only the import changed', async () => {
    const p = await broker.attach(fixture('calculator'));
    const t = p.register.tools[0];
    assert.deepEqual([t.name, t.parametersJson, t.description], ['calculator', '', '']);
    assert.deepEqual(t.aiTool.parameters.map((x) => [x.name, x.required]), [['expression', true]]);
    const cases = [
      ['1 + 2 * 3', true, '1 + 2 * 3 = 7'],
      ['(1 + 2) * 3', true, '(1 + 2) * 3 = 9'],
      ['2 ^ 3 ^ 2', true, '2 ^ 3 ^ 2 = 512'],
      ['-2 ** 2', true, '-2 ** 2 = -4'],
      ['10 / 4 - .5', true, '10 / 4 - .5 = 2'],
      ['（3 + 5）× 2 ÷ 4', true, '（3 + 5）× 2 ÷ 4 = 4'],
      ['0.1 + 0.2', true, '0.1 + 0.2 = 0.3'],
      ['7 % 4', true, '7 % 4 = 3'],
      ['1 / 0', false, '计算错误: 除数不能为零 (位置 6)'],
      ['2 * (3 + 4', false, '计算错误: 缺少右括号 (位置 11)'],
      ['process.exit(1)', false, "计算错误: 无法识别的字符 'p' (位置 1)"],
      ['1 +', false, '计算错误: 表达式不完整 (位置 4)'],
      ['', false, '计算错误: 表达式为空'],
    ];
    let id = 1;
    for (const [expression, ok, text] of cases) {
      const r = await p.session.call1(id++, 'calculator', { expression });
      assert.equal(r.success, ok, expression);
      assert.equal(ok ? r.content : r.error, text, expression);
    }
  });

  it('runs an ES module plugin: static metadata, every ai.tool field, data, handleEvent', async () => {
    const p = await broker.attach(fixture('greeter-esm', 'index.mjs'));
    const r = p.register;
    assert.deepEqual({ ...r.plugin }, { name: 'greeter', version: '2.1.0', author: 'hearth tests', description: 'greets people' });
    const a = r.tools[0].aiTool;
    assert.deepEqual(a.parameters.map((x) => ({ ...x })), [
      { name: 'name', type: 'string', description: 'who to greet', required: true, defaultJson: '', enumJson: '', example: 'Ada' },
      { name: 'style', type: 'string', description: 'tone', required: false, defaultJson: '"warm"', enumJson: '["warm","formal"]', example: '' },
    ]);
    assert.deepEqual([a.continueConversation, a.chainable, a.maxCalls, a.confirm, a.cooldownS, a.timeoutS], [true, false, 3, true, 1.5, 20]);
    assert.deepEqual(r.triggers.map((x) => [x.type, x.pattern]), [[0, '/greet'], [2, '^hello (\\w+)$']]);
    assert.equal(r.inject.format, '/greet {name}');

    const res = await p.session.call1(1, 'greeter', { name: 'Ada' }, { userId: 'u7', groupId: 'g9', channel: 'qq', sessionId: 's' });
    assert.deepEqual([res.success, res.content, JSON.parse(res.dataJson)], [true, 'hello Ada (for u7@g9/qq)', { name: 'Ada', n: 1 }]);

    p.session.send({ handleEvent: { callId: 2, message: '/greet Bo', params: ['Bo'] } });
    assert.equal((await p.session.nextOf('reply')).text, 'hi Bo');
    assert.equal((await p.session.nextOf('reply')).text, 'bye Bo');
    assert.equal((await p.session.nextOf('eventDone')).error, '');
  });

  it('runs a HomeAgent default export from a "type": "module" package', async () => {
    const p = await broker.attach(fixture('homeagent-type-module'));
    assert.equal(p.register.plugin.name, 'ha_esm');
    assert.deepEqual(JSON.parse(p.register.tools[0].parametersJson).required, ['text']);
    const r = await p.session.call1(1, 'ha_esm_upper', { text: 'hearth' });
    assert.deepEqual([r.success, r.content, r.dataJson], [true, 'HEARTH', '']);
  });

  it('leaves chainable unset when the metadata does not say', async () => {
    const p = await broker.attach(fixture('calculator'));
    assert.equal(Object.prototype.hasOwnProperty.call(p.register.tools[0].aiTool, 'chainable'), false);
  });

  it('fails with exit 2 and names the file when the entry exports no plugin', async () => {
    const file = fixture('empty');
    const proc = broker.spawn(file);
    assert.equal((await proc.exit()).code, 2);
    assert.ok(proc.stderr.includes(`${file} exports no plugin`), proc.stderr);
    assert.match(proc.stderr, /got an object with keys \[helper\]/);
  });

  it('fails with exit 2 and names plugin and item on invalid metadata', async () => {
    const proc = broker.spawn(fixture('bad-metadata'));
    assert.equal((await proc.exit()).code, 2);
    assert.match(proc.stderr, /plugin bad: ai\.tool\.parameters\[0\]: missing name/);
  });

  it("serves a plugin through the broker's own NODE_BOOTSTRAP (broker/src/supervisor/process.rs)", async (t) => {
    const src = path.resolve(__dirname, '..', '..', 'broker', 'src', 'supervisor', 'process.rs');
    if (!fs.existsSync(src)) return t.skip('broker source not present');
    const m = /const NODE_BOOTSTRAP: &str = "((?:[^"\\]|\\[\s\S])*)";/.exec(fs.readFileSync(src, 'utf8'));
    assert.ok(m, 'NODE_BOOTSTRAP not found in process.rs');
    // Rust string: `\` + newline + indentation is a continuation; unescape \" and \\.
    const bootstrap = m[1].replace(/\\\n\s*/g, '').replace(/\\(["\\'])/g, '$1');
    const entry = fixture('calculator');
    const proc = spawn(process.execPath, ['-e', bootstrap, entry, '--extra-arg'], {
      cwd: path.dirname(entry),
      env: { ...process.env, HEARTH_ADDR: broker.addr, HEARTH_PLUGIN: 'calculator', HEARTH_TOKEN: broker.token },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const exited = new Promise((resolve) => proc.on('exit', resolve));
    try {
      const s = await broker.nextSession();
      await s.nextOf('register');
      s.send({ registered: { plugin: 'calculator', tools: ['calculator'] } });
      assert.equal((await s.call1(1, 'calculator', { expression: '2^10' })).content, '2^10 = 1024');
      s.send({ shutdown: { graceMs: 1000 } });
      assert.equal(await exited, 0);
    } finally {
      proc.kill('SIGKILL');
    }
  });

  it('serves a plugin with `hearth-node run` (the bin)', async () => {
    const bin = path.join(__dirname, '..', 'bin', 'hearth-node.js');
    const proc = spawn(process.execPath, [bin, 'run', fixture('calculator')], {
      env: { ...process.env, HEARTH_ADDR: broker.addr, HEARTH_PLUGIN: 'calculator', HEARTH_TOKEN: broker.token },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const exited = new Promise((resolve) => proc.on('exit', resolve));
    try {
      const s = await broker.nextSession();
      assert.equal((await s.nextOf('register')).tools[0].name, 'calculator');
      s.send({ registered: { plugin: 'calculator', tools: ['calculator'] } });
      assert.equal((await s.call1(1, 'calculator', { expression: '6*7' })).content, '6*7 = 42');
      s.send({ shutdown: { graceMs: 1000 } });
      assert.equal(await exited, 0);
    } finally {
      proc.kill('SIGKILL');
    }
  });
});
