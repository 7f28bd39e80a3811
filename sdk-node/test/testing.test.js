'use strict';

// hearth-plugin/testing: load() runs a plugin's real session against the in-process
// fake broker; calls are checked against the tool's JSON Schema first, events match
// triggers, stage hooks go through the permission matrix, host services are fakes with
// the broker's semantics.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const testing = require('hearth-plugin/testing');
const { Plugin, Stage, HostError } = require('hearth-plugin');
const { fixture } = require('./helpers/broker');

const { load, HarnessError, InvalidArgumentsError, FakeHost } = testing;

/** Rejects with a HarnessError of `code` whose message matches `re`. */
async function rejectsWith(promise, code, re) {
  const e = await promise.then(() => null, (x) => x);
  assert.ok(e instanceof HarnessError, `expected a HarnessError ${code}, got ${e && e.stack}`);
  assert.equal(e.code, code, e.message);
  if (re) assert.match(e.message, re);
  return e;
}

class Echo extends Plugin {
  static metadata = {
    name: 'echo',
    version: '1.2.3',
    triggers: [{ type: 0, pattern: '/echo' }, { type: 'keyword', pattern: 'ping' }, { type: 'regex', pattern: '^say (\\w+) to (\\w+)$' }, { type: 'segment', pattern: 'weather' }, { type: 'event', pattern: 'reply' }],
    ai: {
      tool: {
        parameters: [
          { name: 'text', type: 'string', description: 'what to echo', required: true },
          { name: 'times', type: 'integer', description: 'repeat', default: 1 },
          { name: 'mode', type: 'string', description: 'how', enum: ['plain', 'upper', 'fail', 'throw', 'progress', 'hang'] },
        ],
        usage: 'Echoes text',
        when_to_use: 'when asked to echo',
      },
      inject: { usage: 'echo text', format: '/echo {text}', args: { text: 'the text' } },
    },
  };

  constructor() {
    super();
    this.aborted = null;
    this.stopped = false;
  }

  async executeTool(sender, args, ctx) {
    const text = String(args.text).repeat(args.times ?? 1);
    switch (args.mode) {
      case 'upper': return { success: true, content: text.toUpperCase(), data: { len: text.length, who: sender.userId } };
      case 'fail': return { success: false, error: `cannot echo ${text}` };
      case 'throw': throw new RangeError(`bad ${text}`);
      case 'progress':
        ctx.progress('half', 0.5);
        ctx.progress('almost');
        return { success: true, content: 'done' };
      case 'hang':
        return new Promise((resolve) => {
          ctx.signal.addEventListener('abort', () => { this.aborted = ctx.signal.reason.message; resolve({ success: true, content: 'too late' }); });
        });
      default: return { success: true, content: `${sender.userId}@${sender.channel}: ${text}` };
    }
  }

  async handleEvent(sender) {
    if (sender.param(0) === 'boom') {
      await sender.reply('before');
      throw new TypeError('exploded');
    }
    await sender.reply(`params=${JSON.stringify(sender.params)}`);
    await sender.reply({ user: sender.userId, message: sender.message });
  }

  stop() { this.stopped = true; }
}

describe('testing: a LinkZone class', () => {
  let t;
  before(async () => { t = await load(Echo, { sender: { userId: 'ann', channel: 'qq' } }); });
  after(() => t.close());

  it('lists the tool as the broker registers it (derived schema and description)', () => {
    assert.equal(t.name, 'echo');
    assert.deepEqual(t.info, { name: 'echo', version: '1.2.3', author: '', description: '' });
    assert.deepEqual(t.tools.map((x) => x.name), ['echo']);
    const tool = t.tool('echo');
    assert.equal(tool.description, 'Echoes text\nWhen to use: when asked to echo');
    assert.deepEqual(tool.parameters, {
      type: 'object',
      properties: {
        text: { type: 'string', description: 'what to echo' },
        times: { type: 'integer', description: 'repeat', default: 1 },
        mode: { type: 'string', description: 'how', enum: ['plain', 'upper', 'fail', 'throw', 'progress', 'hang'] },
      },
      required: ['text'],
    });
    assert.deepEqual(tool.aiTool.parameters[1], { name: 'times', type: 'integer', description: 'repeat', required: false, default: 1 });
    assert.deepEqual([tool.aiTool.usage, tool.aiTool.chainable, tool.aiTool.timeout], ['Echoes text', true, 0]);
    assert.deepEqual(t.inject, { usage: 'echo text', format: '/echo {text}', args: { text: 'the text' } });
    assert.deepEqual(t.triggers.map((x) => x.type), [0, 1, 2, 3, 4]);
    assert.deepEqual(t.hooks, []);
    assert.equal(t.tool('nope'), undefined);
  });

  it('calls the tool with the sender and maps the result', async () => {
    assert.deepEqual(await t.call('echo', { text: 'hi' }), { success: true, content: 'ann@qq: hi', data: null, error: '', progress: [] });
    const up = await t.call('echo', { text: 'ab', times: 2, mode: 'upper' }, { sender: { userId: 'bob' } });
    assert.deepEqual([up.content, up.data], ['ABAB', { len: 4, who: 'bob' }]);
    assert.deepEqual(await t.call('echo', { text: 'x', mode: 'fail' }), { success: false, content: '', data: null, error: 'cannot echo x', progress: [] });
    const thrown = await t.call('echo', { text: 'x', mode: 'throw' });
    assert.deepEqual([thrown.success, thrown.error], [false, 'RangeError: bad x']);
    assert.ok(t.logs.some((l) => l.includes('tool echo (call') && l.includes('RangeError: bad x')), t.logs.join('\n'));
    const p = await t.call('echo', { text: 'x', mode: 'progress' });
    assert.deepEqual(p.progress, [{ message: 'half', fraction: 0.5, progress: 0, total: 0 }, { message: 'almost', fraction: null, progress: 0, total: 0 }]);
  });

  it('checks arguments against the schema first, in the broker\'s words', async () => {
    const cases = [
      [{ text: 12 }, 'text', 'argument `text`: 12 is not of type "string"'],
      [{}, '', 'arguments: "text" is a required property'],
      [{ text: 'x', times: 1.5 }, 'times', 'argument `times`: 1.5 is not of type "integer"'],
      [{ text: 'x', mode: 'loud' }, 'mode', 'argument `mode`: "loud" is not one of "plain", "upper" or 4 other candidates'],
    ];
    for (const [args, argument, reason] of cases) {
      const e = await t.call('echo', args).then(() => null, (x) => x);
      assert.ok(e instanceof InvalidArgumentsError, String(e));
      assert.deepEqual([e.code, e.plugin, e.tool, e.argument, e.reason], ['INVALID_ARGUMENTS', 'echo', 'echo', argument, reason]);
      assert.equal(e.message, `plugin echo: tool echo: ${reason}`);
    }
    await assert.rejects(t.call('echo', ['x']), { name: 'InvalidArgumentsError', message: 'plugin echo: tool echo: arguments must be a JSON object, got ["x"]' });
    await rejectsWith(t.call('echoo', {}), 'UNKNOWN_TOOL', /^plugin echo: unknown tool `echoo` \(its tools: echo\)$/);
  });

  it('cancels a call past its timeout or on abort; the handler sees its signal abort', async () => {
    const e = await rejectsWith(t.call('echo', { text: 'x', mode: 'hang' }, { timeoutMs: 30 }), 'TIMEOUT', /^plugin echo: tool echo \(call \d+\) timed out after 30 ms$/);
    assert.equal(e.timeoutMs, 30);
    await t.call('echo', { text: 'after' }); // the session goes on
    assert.match(t.plugin.aborted, /cancelled by the broker: timed out after 30 ms/);
    const ac = new AbortController();
    const pending = t.call('echo', { text: 'x', mode: 'hang' }, { signal: ac.signal });
    ac.abort(new Error('test gave up'));
    await assert.rejects(pending, /test gave up/);
    await t.call('echo', { text: 'after' });
    assert.match(t.plugin.aborted, /cancelled by the broker: the caller went away/);
  });

  it('delivers events matched by the broker\'s trigger rules and collects replies', async () => {
    const cases = [
      ['/echo a "b c"', 0, ['a', 'b c']],
      ['say PING now', 1, ['say', 'now']],
      ['say hi to bob', 2, ['hi', 'bob']],
      ["what's the weather, today?", 3, ["what's", 'the', 'today']],
    ];
    for (const [message, type, params] of cases) {
      const r = await t.event(message, { sender: { userId: 'eve' } });
      assert.deepEqual([r.trigger.type, r.params, r.error], [type, params, ''], message);
      assert.deepEqual(r.replies, [`params=${JSON.stringify(params)}`, JSON.stringify({ user: 'eve', message })]);
    }
    const boom = await t.event('/echo boom');
    assert.deepEqual([boom.replies, boom.error], [['before'], 'TypeError: exploded']);
    const ev = await t.event('the reply text', { event: 'reply' });
    assert.deepEqual([ev.trigger, ev.params], [{ type: 4, pattern: 'reply' }, ['the reply text']]);
    const given = await t.event('anything', { params: ['p0'] });
    assert.deepEqual(given.params, ['p0']);
    await rejectsWith(t.event('/echoes x'), 'NO_TRIGGER', /^plugin echo: no trigger matches "\/echoes x" \(triggers: command \/echo, keyword ping, regex .*, segment weather, event reply\)$/);
    await rejectsWith(t.event('x', { event: 'message' }), 'NO_TRIGGER', /no event trigger for `message`/);
  });

  it('close() sends Shutdown: stop() runs and the session exits 0; later calls fail', async () => {
    const u = await load(Echo);
    await u.close();
    assert.equal(u.plugin.stopped, true);
    assert.equal(u.exitCode, 0);
    await u.close();
    await rejectsWith(u.call('echo', { text: 'x' }), 'CLOSED');
  });
});

describe('testing: a HomeAgent plugin object and the host services', () => {
  let t;
  const plugin = {
    name: () => 'ha',
    async start(sdk) {
      this.sdk = sdk;
      sdk.registerDef({ key: 'days', type: 'number', default: 3, min: 1, max: 7 });
      sdk.registerDef({ key: 'api_key', type: 'string', secret: true });
      this.seenAtStart = await sdk.settings().get('city');
      const tool = (name, parameters, fn) => sdk.registerTool(name, { description: name, parameters: { type: 'object', properties: parameters } }, fn);
      tool('setting', { key: { type: 'string' } }, async ({ key }) => ({ value: await sdk.settings().get(key) }));
      tool('put', { key: { type: 'string' }, value: {} }, async ({ key, value }) => { await sdk.settings().set(key, value); return 'ok'; });
      tool('core', { key: { type: 'string' } }, async ({ key }) => ({ value: await sdk.settings().getCore(key) }));
      tool('set_in', { scope: { type: 'string' }, key: { type: 'string' }, value: {} }, async ({ scope, key, value }) => {
        await (scope === 'core' ? sdk.settings().setCore(key, value) : sdk.settings().setPlugin(scope, key, value));
        return 'ok';
      });
      tool('dump', {}, async () => sdk.settings().dump());
      tool('other', { plugin: { type: 'string' }, key: { type: 'string' } }, async (a) => ({ value: await sdk.settings().getPlugin(a.plugin, a.key) }));
      tool('remember', {}, async () => sdk.memory().commit([['Alice', 'likes', 'tea'], ['alice ', 'likes', 'Tea'], { subject: 'Tea', relation: 'grown_in', object: 'China', object_type: 'Location' }]));
      tool('recall', { k: { type: 'string' }, depth: { type: 'integer' } }, async ({ k, depth }) => sdk.memory().recall([k], depth));
      tool('note', {}, async () => { await sdk.textMemory().append({ role: 'user', content: '记一下', timestamp: 17 }); return 'noted'; });
      tool('docs', { q: { type: 'string' } }, async ({ q }) => {
        await sdk.docMemory().insert({ id: 'sunny', title: '日记', content: '今天天气很好' });
        await sdk.docMemory().insert({ id: 'rain', title: '预报', content: '明天会下雨，记得带伞' });
        await sdk.docMemory().insert({ id: 'en', title: 'Weather report', content: 'Heavy rain is expected in the evening' });
        return (await sdk.docMemory().query(q, 10)).map((d) => d.id);
      });
      tool('kb', {}, async () => { await sdk.knowledge().add('天气/北京', '北京的天气'); return sdk.knowledge().search('天气'); });
      tool('llm', { name: { type: 'string' } }, async ({ name }) => { await sdk.llm().setSource(name); return sdk.llm().currentSource(); });
      tool('inject', { text: { type: 'string' } }, async ({ text }) => { await sdk.injectTextNoMemory('timer', text, { priority: 'interactive' }); return 'sent'; });
      tool('later', {}, async () => {
        await sdk.registerTool('late', { description: 'registered at run time', parameters: { type: 'object', properties: { n: { type: 'number' } }, required: ['n'] } }, ({ n }) => n * 2);
        return 'registered';
      });
      tool('drop', {}, async () => { await sdk.unregisterTool('late'); return 'dropped'; });
      tool('bad_later', {}, async () => sdk.registerTool('bad name', {}, () => 1).then(() => 'ok', (e) => e.message));
    },
  };

  before(async () => {
    t = await load(plugin, {
      settings: { city: '北京', days: 5 },
      coreSettings: { 'llm.openai.api_key': 'sk-core', 'core.daemon.data_dir': '/data' },
      pluginSettings: { qq: { napcat_url: 'ws://x' } },
      capabilities: ['memory', 'knowledge', 'llm', 'input', 'settings_core', 'settings_cross'],
      llmSources: ['openai', 'deepseek'],
    });
  });
  after(() => t.close());

  it('seeds settings before start(); defs and their defaults as the broker stores them', async () => {
    assert.equal(t.plugin.seenAtStart, '北京');
    assert.deepEqual(t.settings.all(), { city: '北京', days: 5 }, 'a default never overwrites a value');
    assert.deepEqual(t.settings.defs().map((d) => d.key), ['api_key', 'days']);
    assert.deepEqual((await t.call('setting', { key: 'days' })).data, { value: 5 });
    const missing = await t.call('setting', { key: 'nope' });
    assert.equal(missing.error, 'HostError: plugin ha: settings.get: NOT_FOUND: no `nope` in config_ha');
    await t.call('put', { key: 'obj', value: { a: [1, null] } });
    assert.deepEqual(t.settings.get('obj'), { a: [1, null] });
    await t.call('put', { key: 'api_key', value: 'sk-own' });
    assert.equal(t.settings.get('api_key'), 'sk-own', 'own secrets in clear');
  });

  it('a setting of the wrong type for its def is refused as the broker refuses it', async () => {
    const refused = (scope, key, got) => `setting \`${key}\` of ${scope}: expected ${got}`;
    assert.throws(() => t.settings.set('days', '4'), { name: 'HarnessError', code: 'INVALID_ARGUMENT', message: refused('plugin ha', 'days', 'a number (its def\'s type is `number`), got "4" (a string)') });
    // min and max (and options) are for a settings UI: the broker does not check them.
    t.settings.set('days', 9);
    assert.equal(t.settings.get('days'), 9);
    t.settings.set('days', null);
    t.settings.set('days', 4);
    assert.equal(t.settings.get('days'), 4);
    // From the plugin: the same code and message, and nothing written.
    const put = await t.call('put', { key: 'days', value: 'four' });
    assert.equal(put.error, `HostError: plugin ha: settings.set: INVALID_ARGUMENT: ${refused('plugin ha', 'days', 'a number (its def\'s type is `number`), got "four" (a string)')}`);
    assert.equal(t.settings.get('days'), 4);
    const secret = await t.call('put', { key: 'api_key', value: 7 });
    assert.equal(secret.error, `HostError: plugin ha: settings.set: INVALID_ARGUMENT: ${refused('plugin ha', 'api_key', 'a string (its def\'s type is `string`), got a number (a secret: value not shown)')}`);
    // Core and other plugins' settings (a harness of its own: the core table is shared).
    const typed = new FakeHost();
    typed.settings.registerDef(null, { key: 'core.port', type: 'integer', display_name: 'Port' });
    typed.settings.registerDef('qq', { key: 'enabled', type: 'boolean', display_name: 'On' });
    const v = await load(plugin, { host: typed, settings: { city: 'x' }, capabilities: ['settings_core', 'settings_cross'] });
    try {
      const core = await v.call('set_in', { scope: 'core', key: 'core.port', value: 80.5 });
      assert.equal(core.error, `HostError: plugin ha: settings.setCore: INVALID_ARGUMENT: ${refused('core', 'core.port', 'an integer (its def\'s type is `integer`), got 80.5 (a number with a fraction)')}`);
      assert.equal((await v.call('set_in', { scope: 'core', key: 'core.port', value: 8080 })).content, 'ok');
      const other = await v.call('set_in', { scope: 'qq', key: 'enabled', value: [true] });
      assert.equal(other.error, `HostError: plugin ha: settings.setPlugin: INVALID_ARGUMENT: ${refused('plugin qq', 'enabled', 'a boolean (true or false) (its def\'s type is `boolean`), got [true] (an array)')}`);
      // The value as the plugin wrote it: `2.0` is an f64 for the broker (an integer
      // still: a whole number), `2.5` is not.
      assert.throws(() => typed.answer('settings.setCore', 'ha', { key: 'core.port', valueJson: '2.5' }), { code: 'INVALID_ARGUMENT', message: refused('core', 'core.port', 'an integer (its def\'s type is `integer`), got 2.5 (a number with a fraction)') });
      typed.answer('settings.setCore', 'ha', { key: 'core.port', valueJson: '2.0' });
      assert.equal(typed.answer('settings.getCore', 'ha', { key: 'core.port' }).valueJson, '2.0');
      assert.throws(() => v.settings.setCore('core.port', '2'), { code: 'INVALID_ARGUMENT', message: refused('core', 'core.port', 'an integer (its def\'s type is `integer`), got "2" (a string)') });
    } finally {
      await v.close();
    }
    // Seeding: a value for a key whose def is already stored is checked; one set before
    // the plugin registers the def is stored (the broker checks writes, not defs).
    const host = new FakeHost();
    host.settings.registerDef('ha', { key: 'days', type: 'number', display_name: 'Days' });
    await rejectsWith(load(plugin, { host, settings: { days: 'three' } }), 'INVALID_ARGUMENT', /^setting `days` of plugin ha: expected a number \(its def's type is `number`\), got "three" \(a string\)$/);
    const u = await load(plugin, { settings: { city: 'x', days: 'three' } });
    try {
      assert.equal(u.settings.get('days'), 'three');
    } finally {
      await u.close();
    }
  });

  it('masks secrets of other scopes and in dump()', async () => {
    assert.deepEqual((await t.call('core', { key: 'llm.openai.api_key' })).data, { value: '••••••' });
    assert.deepEqual((await t.call('core', { key: 'core.daemon.data_dir' })).data, { value: '/data' });
    assert.deepEqual((await t.call('other', { plugin: 'qq', key: 'napcat_url' })).data, { value: 'ws://x' });
    const dump = (await t.call('dump', {})).data;
    assert.deepEqual(dump.core, { 'core.daemon.data_dir': '/data', 'llm.openai.api_key': '••••••' });
    assert.equal(dump.plugins.ha.api_key, '••••••');
    assert.deepEqual(t.settings.dump().plugins.qq, { napcat_url: 'ws://x' });
    assert.equal(t.settings.getCore('llm.openai.api_key'), 'sk-core', 'the test reads in clear');
  });

  it('graph memory, text memory, documents, knowledge, LLM sources and input', async () => {
    assert.equal((await t.call('remember', {})).data, 2, 'the duplicate relation is not added');
    const g = (await t.call('recall', { k: 'ALICE', depth: 2 })).data;
    assert.deepEqual(g.entities, [{ name: 'Alice', type: '', mention_count: 2 }, { name: 'tea', type: '', mention_count: 3 }, { name: 'China', type: 'Location', mention_count: 1 }]);
    assert.deepEqual(g.relations, [{ source_name: 'Alice', target_name: 'tea', relation_type: 'likes' }, { source_name: 'tea', target_name: 'China', relation_type: 'grown_in' }]);
    assert.deepEqual(t.memory.introspect().relation_types, { grown_in: 1, likes: 1 });

    await t.call('note', {});
    assert.deepEqual(t.textMemory.events, [{ role: 'user', content: '记一下', timestamp: 17, channel: '' }]);

    assert.deepEqual((await t.call('docs', { q: '天气' })).data, ['sunny']);
    assert.deepEqual((await t.call('docs', { q: '雨' })).data, ['rain']);
    assert.deepEqual((await t.call('docs', { q: 'rain 下雨 weather' })).data, ['en', 'rain']);
    assert.equal(t.docMemory.stats().docs, 3);

    const kb = (await t.call('kb', {})).data;
    assert.deepEqual(kb.map((e) => e.name), ['天气_北京']);
    assert.ok(kb[0].score > 0);

    assert.equal((await t.call('llm', { name: 'deepseek' })).content, 'deepseek');
    assert.equal(t.llm.current(), 'deepseek');
    assert.equal((await t.call('llm', { name: 'gpt' })).error, 'HostError: plugin ha: llm.setSource: NOT_FOUND: plugin ha: set_source: unknown LLM source `gpt` (known: openai, deepseek)');

    await t.call('inject', { text: '到点了' });
    assert.deepEqual(t.injected.at(-1), { method: 'injectTextNoMemory', plugin: 'ha', source: 'plugin:ha', userId: 'plugin:ha', groupId: '', channel: 'timer', text: '到点了', priority: 'interactive', noMemory: true, interrupt: false });
    assert.deepEqual(t.hostCalls.at(-1).method, 'input.injectTextNoMemory');
  });

  it('override() makes a host call fail or answer as the test says', async () => {
    t.override('settings.get', { code: 'UNAVAILABLE', details: 'broker restarting' });
    assert.equal((await t.call('setting', { key: 'city' })).error, 'HostError: plugin ha: settings.get: UNAVAILABLE: broker restarting');
    t.override('settings.get', (req) => ({ valueJson: JSON.stringify(`canned ${req.key}`) }));
    assert.deepEqual((await t.call('setting', { key: 'city' })).data, { value: 'canned city' });
    t.override('settings.get', undefined);
    assert.deepEqual((await t.call('setting', { key: 'city' })).data, { value: '北京' });
  });

  it('tools registered and withdrawn at run time are checked like the broker does', async () => {
    await t.call('later', {});
    assert.deepEqual(t.tool('late').parameters.required, ['n']);
    assert.equal((await t.call('late', { n: 21 })).content, '42');
    await assert.rejects(t.call('late', { n: 'x' }), { name: 'InvalidArgumentsError', argument: 'n' });
    await t.call('drop', {});
    assert.equal(t.tool('late'), undefined);
    assert.equal((await t.call('bad_later', {})).content, "plugin ha: register tool bad name failed: tool name contains ' '; use letters, digits, `_` and `-`");
  });
});

describe('testing: capabilities and manifests', () => {
  it('takes name and capabilities from plugin.json; a missing capability is PERMISSION_DENIED', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-testing-'));
    try {
      fs.writeFileSync(path.join(dir, 'plugin.json'), JSON.stringify({ name: 'memo', runtime: 'node', entry: 'index.js', capabilities: ['knowledge'] }));
      fs.writeFileSync(path.join(dir, 'index.js'), `
        module.exports = {
          name: () => 'memo_plugin',
          start(sdk) {
            sdk.registerTool('save', {}, async () => { await sdk.memory().commit([['a', 'b', 'c']]); return 'saved'; });
            sdk.registerTool('kb', {}, async () => sdk.knowledge().list());
          },
        };`);
      const t = await load(path.join(dir, 'index.js'));
      try {
        assert.equal(t.name, 'memo', 'the broker knows it by its manifest name');
        // The SDK names the plugin by its own name(); the broker by its manifest's.
        assert.equal((await t.call('save', {})).error, 'HostError: plugin memo_plugin: memory.commit: PERMISSION_DENIED: plugin memo: Memory.Commit needs capability `memory`; add it to `capabilities` in its plugin.json');
        assert.deepEqual((await t.call('kb', {})).data, []);
      } finally {
        await t.close();
      }
      const u = await load(path.join(dir, 'index.js'), { capabilities: ['memory'], name: 'other' });
      try {
        assert.equal((await u.call('save', {})).content, 'saved');
        assert.equal(u.memory.introspect().relations, 1);
      } finally {
        await u.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('testing: load failures', () => {
  it('names what the broker would reject; allowRejected loads the rest', async () => {
    const bad = {
      name: () => 'bad',
      start(sdk) {
        sdk.registerTool('good', {}, () => 'fine');
        sdk.registerTool('not ok', {}, () => 1);
        sdk.registerTool('stringy', { parameters: { type: 'string' } }, () => 1);
        sdk.registerTool('broken', { parameters: { type: 'object', properties: { x: { type: 'strin' } } } }, () => 1);
      },
    };
    const e = await rejectsWith(load(bad), 'REJECTED');
    assert.deepEqual(e.rejected, [
      { kind: 'tool', name: 'not ok', reason: "tool name contains ' '; use letters, digits, `_` and `-`" },
      { kind: 'tool', name: 'stringy', reason: 'parameters must describe an object ("type": "object"), not "string"' },
      { kind: 'tool', name: 'broken', reason: 'parameters is not a valid JSON Schema at /properties/x/type: "strin" is not valid under any of the schemas listed in the \'anyOf\' keyword' },
    ]);
    const t = await load(bad, { allowRejected: true });
    try {
      assert.deepEqual(t.tools.map((x) => x.name), ['good']);
      assert.equal(t.rejected.length, 3);
      assert.equal((await t.call('good')).content, 'fine');
    } finally {
      await t.close();
    }
  });

  it('rejects bad triggers and an inject spec without format', async () => {
    class T extends Plugin {
      static metadata = { name: 'trig', triggers: [{ type: 2, pattern: '(' }, { type: 4, pattern: 'tick' }, { type: 0, pattern: ' ' }], ai: { inject: { usage: 'u', format: '' } } };
    }
    const e = await rejectsWith(load(T), 'REJECTED');
    assert.deepEqual(e.rejected.map((r) => [r.kind, r.name]), [['trigger', '('], ['trigger', 'tick'], ['trigger', ' '], ['inject', 'u']]);
    assert.match(e.rejected[1].reason, /^unknown event `tick`; events are message, reply or `\*`$/);
  });

  it('start() throwing, a missing file, nothing exported, a missing module', async () => {
    const e = await rejectsWith(load({ name: () => 'boom', start() { throw new Error('no config'); } }), 'SESSION_ENDED', /^plugin boom ended its session \(exit code 1\) before it registered; last log lines:\n {2}hearth-plugin: plugin boom: start failed: Error: no config$/);
    assert.equal(e.exitCode, 1);
    await rejectsWith(load('/nonexistent/index.js'), 'LOAD_FAILED', /^cannot load \/nonexistent\/index\.js: no such file$/);
    await rejectsWith(load(fixture('empty')), 'LOAD_FAILED', /exports no plugin/);
    await rejectsWith(load(class NoMeta {}), 'LOAD_FAILED', /^\(testing\): class NoMeta is not a plugin: a LinkZone plugin needs static metadata/);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-testing-'));
    try {
      const entry = path.join(dir, 'index.js');
      fs.writeFileSync(entry, "require('left-pad-not-installed');\n");
      await rejectsWith(load(entry), 'LOAD_FAILED', new RegExp(`^cannot load ${entry}: module 'left-pad-not-installed' not found \\(required from ${entry}\\); run \`npm install left-pad-not-installed\` in ${dir}$`));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a plugin that never registers times out, and one refused for its protocol version', async () => {
    await rejectsWith(load({ name: () => 'slow', start: () => new Promise(() => {}) }, { startupTimeoutMs: 50 }), 'STARTUP_TIMEOUT', /^plugin slow did not register within 50 ms/);
    class Future extends Plugin {
      static metadata = { name: 'future' };
      static hearthProtocolVersion = '2.0.0';
    }
    await rejectsWith(load(Future), 'REJECTED', /^plugin future: protocol version `2\.0\.0` is not supported; this broker speaks 1\.0\.0$/);
  });
});

describe('testing: stage hooks and the permission matrix', () => {
  const STAGES = ['on_input', 'pre_action', 'post_action', 'before_toolcall', 'after_toolcall', 'before_output', 'after_output'];
  // A hook that writes every field (permissions.rs `write_all`).
  const writeAll = (ctx) => {
    if (!ctx.toolCalls.length) ctx.toolCalls.push({});
    ctx.rawMessage = 'changed';
    ctx.userId = 'mallory';
    ctx.groupId = 'g';
    ctx.contextMsgs = [{ role: 'system', content: 'x' }];
    ctx.llmText = 'changed';
    ctx.reasoningContent = 'changed';
    ctx.tokenUsage.total = 9;
    ctx.toolCalls[0].arguments = { a: 1 };
    ctx.toolCalls[0].deny = true;
    ctx.toolResults.push({});
    ctx.finalText = 'changed';
    ctx.response = 'stop';
    ctx.memory.push({ role: '', content: '', score: 0 });
    ctx.noMemory = true;
    ctx.extra = { k: 1 };
  };
  const base = { rawMessage: 'hi', userId: 'u', contextMsgs: [], toolCalls: [{ id: 'c1', name: 't', arguments: {} }], extra: {} };
  const ALLOWED = {
    on_input: ['raw_message', 'response', 'extra'],
    pre_action: ['context_msgs', 'response', 'extra'],
    post_action: ['llm_text', 'tool_calls', 'response', 'extra'],
    before_toolcall: ['tool_calls', 'tool_call.deny', 'response', 'extra'],
    after_toolcall: ['tool_results', 'response', 'extra'],
    before_output: ['final_text', 'response', 'extra'],
    after_output: [],
  };
  // What each stage sends besides the fields every stage sees.
  const SEEN = {
    on_input: ['raw_message'],
    pre_action: ['context_msgs', 'memory'],
    post_action: ['llm_text', 'reasoning_content', 'tool_calls', 'tool_call.deny'],
    before_toolcall: ['tool_calls', 'tool_call.deny'],
    after_toolcall: ['tool_results'],
    before_output: ['final_text'],
    after_output: ['final_text'],
  };
  // `phase` is reset by the broker before the matrix applies, so it is never reported.
  const ALWAYS = ['response', 'extra', 'user_id', 'group_id', 'token_usage', 'no_memory'];

  let t;
  before(async () => {
    t = await load({
      name: () => 'matrix',
      start(sdk) { for (const s of STAGES) sdk.registerStage(s, writeAll); },
    });
  });
  after(() => t.close());

  for (const stage of STAGES) {
    it(`${stage}: keeps the permitted writes and reports the dropped ones`, async () => {
      const run = await t.runStage(stage, base);
      assert.deepEqual(run.ran, [`${stage}#${STAGES.indexOf(stage)}`]);
      assert.deepEqual(run.errors, []);
      const expected = [...SEEN[stage], ...ALWAYS].filter((f) => !ALLOWED[stage].includes(f));
      assert.deepEqual(run.dropped.map((d) => d.field).sort(), expected.sort());
      const c = run.context;
      const kept = {
        raw_message: c.rawMessage === 'changed',
        context_msgs: c.contextMsgs.length > 0,
        llm_text: c.llmText === 'changed',
        tool_calls: JSON.stringify(c.toolCalls[0].arguments) === '{"a":1}',
        'tool_call.deny': c.toolCalls[0].deny,
        tool_results: c.toolResults.length > 0,
        final_text: c.finalText === 'changed',
        response: c.response !== null,
        extra: c.extra.k === 1,
      };
      for (const [field, was] of Object.entries(kept)) assert.equal(was, ALLOWED[stage].includes(field), `${stage}: field ${field}`);
      assert.deepEqual([c.userId, c.noMemory, c.phase], ['u', false, stage]);
      assert.deepEqual(run.shortCircuit, ALLOWED[stage].includes('response') ? { hookId: run.ran[0] } : null);
    });
  }

  it('runs hooks in order, each seeing the previous writes; errors skip a hook; own-tools hooks; contextMsgs: false', async () => {
    const seen = [];
    const u = await load({
      name: () => 'order',
      start(sdk) {
        sdk.registerTool('mine', {}, () => 1);
        sdk.registerStage(Stage.OnInput, (ctx) => { ctx.rawMessage += ' a'; });
        sdk.registerStage(Stage.OnInput, () => { throw new Error('broken hook'); });
        sdk.registerStage(Stage.OnInput, (ctx) => ({ ...ctx, rawMessage: `${ctx.rawMessage} b` }));
        sdk.registerStageOwnTools(Stage.BeforeToolcall, (ctx) => { seen.push(ctx.toolCalls.map((c) => c.name)); });
        sdk.registerStage(Stage.PreAction, (ctx) => { seen.push(ctx.contextMsgs); ctx.contextMsgs = [{ role: 'user', content: 'rewritten' }]; }, { contextMsgs: false });
      },
    });
    try {
      const r = await u.runStage('on_input', { rawMessage: 'x' });
      assert.deepEqual([r.context.rawMessage, r.ran, r.errors, r.dropped], ['x a b', ['on_input#0', 'on_input#1', 'on_input#2'], [{ hookId: 'on_input#1', error: 'Error: broken hook' }], []]);
      assert.deepEqual((await u.runStage('before_toolcall', { toolCalls: [{ id: '1', name: 'theirs', plugin: 'other' }] })).ran, []);
      assert.deepEqual((await u.runStage('before_toolcall', { toolCalls: [{ id: '1', name: 'mine' }] })).ran, ['before_toolcall#3']);
      assert.deepEqual((await u.runStage('before_toolcall', { toolCalls: [{ id: '1', name: 'x' }] }, { toolOwner: 'order' })).ran, ['before_toolcall#3']);
      const pre = await u.runStage('pre_action', { contextMsgs: [{ role: 'user', content: 'secret history' }] });
      assert.deepEqual(pre.context.contextMsgs, [{ role: 'user', content: 'secret history' }], 'not sent, not applied');
      assert.deepEqual(pre.dropped, []);
      assert.deepEqual(seen, [['mine'], ['x'], []]);
      await rejectsWith(u.runStage('on_inptu', {}), 'UNKNOWN_STAGE', /unknown stage "on_inptu"/);
    } finally {
      await u.close();
    }
  });
});

describe('testing: entry files, ES modules, header comments, spawn', () => {
  it('loads an ES module plugin and reads @ai-trigger-* header comments', async () => {
    const t = await load(fixture('inject-block', 'index.mjs'));
    try {
      assert.ok(t.inject && t.inject.format, JSON.stringify(t.inject));
    } finally {
      await t.close();
    }
  });

  it('runs the same plugin in a child process through the broker bootstrap (spawn: true)', async () => {
    const t = await load(fixture('calculator'), { spawn: true });
    try {
      assert.equal(t.plugin, null);
      assert.equal((await t.call('calculator', { expression: '2^10' })).content, '2^10 = 1024');
      await assert.rejects(t.call('calculator', { expression: 7 }), { name: 'InvalidArgumentsError', message: 'plugin calculator: tool calculator: argument `expression`: 7 is not of type "string"' });
    } finally {
      await t.close();
    }
    assert.equal(t.exitCode, 0);
  });

  it('the ES module entry exports the same objects', async () => {
    const esm = await import('hearth-plugin/testing');
    assert.equal(esm.load, load);
    assert.equal(esm.FakeBroker, testing.FakeBroker);
    assert.equal(esm.default, testing);
  });

  it('the fake MCP servers answer canned resources and prompts, with the broker\'s errors', async () => {
    const host = new FakeHost();
    host.mcp.addResource('files', 'test://doc/1', 'hello resource', { name: 'doc1' });
    host.mcp.addPrompt('files', 'greet', (a) => `Hello, ${a.name}!`, { description: 'Greet someone.', arguments: ['name'] });
    host.mcp.setResult('files', 'resources/templates/list', { resourceTemplates: [{ uriTemplate: 'test://doc/{id}', name: 'doc' }] });
    host.mcp.setConnected('down', false);
    const reader = {
      name: () => 'reader',
      start(sdk) {
        sdk.registerTool('read', {}, async (args) => (await sdk.mcp().readResource('files', args.uri))[0].text);
        sdk.registerTool('greet', {}, async (args) => sdk.mcp().getPrompt('files', 'greet', { name: args.name }));
        sdk.registerTool('probe', {}, async (args) => {
          try {
            return await sdk.mcp().request(args.server, args.method, args.params);
          } catch (e) {
            return { isError: true, content: `${e.code}: ${e.details}` };
          }
        });
        sdk.registerTool('lists', {}, async () => ({
          resources: await sdk.mcp().resources('files'), templates: await sdk.mcp().resourceTemplates('files'), prompts: await sdk.mcp().prompts('files'),
        }));
      },
    };
    const t = await load(reader, { host, capabilities: ['mcp'] });
    try {
      assert.equal(t.mcp, host.mcp);
      assert.equal((await t.call('read', { uri: 'test://doc/1' })).content, 'hello resource');
      assert.deepEqual((await t.call('greet', { name: 'Ann' })).data, {
        description: 'Greet someone.', messages: [{ role: 'user', content: { type: 'text', text: 'Hello, Ann!' } }],
      });
      assert.deepEqual((await t.call('lists')).data, {
        resources: [{ uri: 'test://doc/1', name: 'doc1', mimeType: 'text/plain' }],
        templates: [{ uriTemplate: 'test://doc/{id}', name: 'doc' }],
        prompts: [{ name: 'greet', description: 'Greet someone.', arguments: [{ name: 'name' }] }],
      });
      const probe = async (server, method, params) => (await t.call('probe', { server, method, params })).error;
      assert.equal(await probe('nope', 'resources/list'), 'NOT_FOUND: no MCP plugin named nope');
      assert.match(await probe('files', 'tools/call'), /^INVALID_ARGUMENT: `tools\/call` is not one of resources\/list/);
      assert.equal(await probe('files', 'resources/read', ['x']), 'INVALID_ARGUMENT: params of resources/read must be a JSON object, got ["x"]');
      assert.equal(await probe('down', 'resources/list'), 'UNAVAILABLE: MCP server down is not connected');
      assert.equal(await probe('files', 'resources/read', { uri: 'test://nope' }), 'FAILED_PRECONDITION: MCP server files: resources/read: Unknown resource: test://nope');
      assert.deepEqual(host.mcp.requests[0], { server: 'files', method: 'resources/read', params: { uri: 'test://doc/1' } });
    } finally {
      await t.close();
    }
    // Without capability `mcp` (the broker's defaults do not grant it either).
    const u = await load(reader, { host });
    try {
      const r = await u.call('read', { uri: 'test://doc/1' });
      assert.ok(!r.success && r.error.includes('Mcp.Request needs capability `mcp`'), r.error);
    } finally {
      await u.close();
    }
  });

  it('a prefilled FakeHost serves the plugin', async () => {
    const host = new FakeHost();
    host.knowledge.add('faq', 'Hearth is a plugin broker');
    const t = await load({ name: () => 'kb', start(sdk) { sdk.registerTool('ask', {}, async () => (await sdk.knowledge().search('broker'))[0].name); } }, { host });
    try {
      assert.equal((await t.call('ask')).content, 'faq');
    } finally {
      await t.close();
    }
  });

  it('a plugin failing a host call gets a HostError with the broker\'s code', async () => {
    let caught;
    const t = await load({ name: () => 'he', start(sdk) { sdk.registerTool('x', {}, async () => { try { await sdk.settings().getCore('k'); } catch (e) { caught = e; } return 'done'; }); } });
    try {
      await t.call('x');
      assert.ok(caught instanceof HostError);
      assert.equal(caught.code, 'PERMISSION_DENIED');
    } finally {
      await t.close();
    }
  });
});
