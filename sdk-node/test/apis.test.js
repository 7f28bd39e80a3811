'use strict';

// The typed host-service APIs (sdk.settings(), sdk.memory(), …): the request each method
// sends and what it makes of the response, against the fake broker's host services.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const Long = require('long');
const { FakeBroker } = require('./helpers/broker');
const { createHost, HostError } = require('../lib/host');
const { createApis } = require('../lib/apis');
const sdkIndex = require('..');

describe('typed host APIs', () => {
  let broker;
  let base;
  let api;
  before(async () => {
    broker = await FakeBroker.start();
    base = new grpc.Client(broker.addr, grpc.credentials.createInsecure());
    const host = createHost(base, broker.token, 'typed');
    api = createApis(() => host);
  });
  after(async () => { base.close(); await broker.close(); });
  const reply = (method, r) => { broker.hostReplies[method] = r; };

  it('settings: values keep their JSON type; keys, defs, dump, plugins', async () => {
    const s = api.settings();
    assert.equal(api.settings(), s, 'one object per service');
    const values = { n: '42', f: '2.5', b: 'true', o: '{"a":[1,null]}', z: 'null' };
    reply('settings.get', (req) => ({ valueJson: values[req.key] }));
    assert.deepEqual([await s.get('n'), await s.get('f'), await s.get('b'), await s.get('o'), await s.get('z')], [42, 2.5, true, { a: [1, null] }, null]);
    assert.deepEqual(broker.lastCall('settings.get'), { key: 'z', plugin: '' });

    reply('settings.set', {});
    assert.equal(await s.set('k', { 城市: '北京', x: null }), undefined);
    assert.deepEqual(broker.lastCall('settings.set'), { key: 'k', valueJson: '{"城市":"北京","x":null}', plugin: '' });
    await assert.rejects(s.set('k', undefined), /settings.set: value is not JSON/);
    await assert.rejects(s.set('k', 10n), (e) => e instanceof TypeError && /value is not JSON/.test(e.message));

    reply('settings.list', { keys: ['a', 'b'] });
    assert.deepEqual(await s.list('p'), ['a', 'b']);
    assert.deepEqual(broker.lastCall('settings.list'), { prefix: 'p', plugin: '' });
    await s.list();
    assert.equal(broker.lastCall('settings.list').prefix, '');

    reply('settings.getCore', { valueJson: '"/data"' });
    assert.equal(await s.getCore('core.daemon.data_dir'), '/data');
    reply('settings.setCore', {});
    await s.setCore('core.x', 7);
    assert.deepEqual(broker.lastCall('settings.setCore'), { key: 'core.x', valueJson: '7', plugin: '' });
    reply('settings.listCore', { keys: ['core.x'] });
    assert.deepEqual(await s.listCore('core.'), ['core.x']);

    reply('settings.getPlugin', { valueJson: '"http://napcat"' });
    assert.equal(await s.getPlugin('qq', 'napcat_url'), 'http://napcat');
    assert.deepEqual(broker.lastCall('settings.getPlugin'), { key: 'napcat_url', plugin: 'qq' });
    reply('settings.setPlugin', {});
    await s.setPlugin('qq', 'k', [1, 2]);
    assert.deepEqual(broker.lastCall('settings.setPlugin'), { key: 'k', valueJson: '[1,2]', plugin: 'qq' });
    reply('settings.listPlugin', { keys: ['k'] });
    assert.deepEqual(await s.listPlugin('qq', 'k'), ['k']);
    assert.deepEqual(broker.lastCall('settings.listPlugin'), { prefix: 'k', plugin: 'qq' });

    reply('settings.registerDef', {});
    await s.registerDef({ key: 'days', type: 'number', displayName: 'Days', default: 3, min: 0, max: 7, options: ['1', '3'], secret: true });
    const w = broker.lastCall('settings.registerDef');
    assert.deepEqual([w.key, w.type, w.displayName, w.defaultJson, w.min, w.max, w.step, w.options, w.secret], ['days', 'number', 'Days', '3', 0, 7, null, ['1', '3'], true]);
    await assert.rejects(s.registerDef({ type: 'string' }), /missing key/);

    reply('settings.defs', { defs: [
      { key: 'days', defaultJson: '3', type: 'number', displayName: 'Days', min: 0, step: 1 },
      { key: 'api_key', type: 'string', displayName: 'API Key', description: '密钥', secret: true, required: true },
    ] });
    assert.deepEqual(await s.defs(), [
      { key: 'days', default: 3, type: 'number', display_name: 'Days', min: 0, step: 1 },
      { key: 'api_key', type: 'string', display_name: 'API Key', description: '密钥', required: true, secret: true },
    ]);
    reply('settings.dump', { dumpJson: '{"core":{},"plugins":{"typed":{"api_key":"••••••"}}}' });
    assert.deepEqual(await s.dump(), { core: {}, plugins: { typed: { api_key: '••••••' } } });
    reply('settings.plugins', { keys: ['qq', 'typed'] });
    assert.deepEqual(await s.plugins(), ['qq', 'typed']);
  });

  it('memory, text memory, doc memory, knowledge and LLM map requests and responses', async () => {
    const m = api.memory();
    reply('memory.recall', { entities: [{ name: 'Alice', type: 'Person', mentionCount: Long.fromNumber(3) }], relations: [{ sourceName: 'Alice', targetName: 'tea', relationType: 'likes' }] });
    assert.deepEqual(await m.recall(['alice', '茶'], 2), { entities: [{ name: 'Alice', type: 'Person', mention_count: 3 }], relations: [{ source_name: 'Alice', target_name: 'tea', relation_type: 'likes' }] });
    assert.deepEqual(broker.lastCall('memory.recall'), { keywords: ['alice', '茶'], depth: 2 });
    await m.recall('solo', 0);
    assert.deepEqual(broker.lastCall('memory.recall'), { keywords: ['solo'], depth: 0 });

    reply('memory.commit', { committed: 2 });
    assert.equal(await m.commit([['Alice', 'likes', 'tea'], { subject: 'Bob', relation: 'knows', object: 'Alice', session_id: 's' }, { subject: 'Acme', relation: 'in', object: 'Paris', objectType: 'Location' }]), 2);
    const t = (subject, relation, object, o = {}) => ({ subject, relation, object, subjectType: '', objectType: '', sessionId: '', ...o });
    assert.deepEqual(broker.lastCall('memory.commit').triples, [t('Alice', 'likes', 'tea'), t('Bob', 'knows', 'Alice', { sessionId: 's' }), t('Acme', 'in', 'Paris', { objectType: 'Location' })]);
    await assert.rejects(m.commit([['a', 'b']]), /memory.commit: triple 0: a triple array has 3 to 6 items/);

    reply('memory.introspect', { statsJson: '{"entities":2}' });
    assert.deepEqual(await m.introspect(), { entities: 2 });
    reply('memory.mergeEntities', { count: Long.fromNumber(4) });
    assert.equal(await m.mergeEntities('Bobby', 'Bob'), 4);
    assert.deepEqual(broker.lastCall('memory.mergeEntities'), { source: 'Bobby', target: 'Bob' });
    reply('memory.purge', { count: 1 });
    assert.equal(await m.purge({ relation_type: 'likes' }, 'hard'), 1);
    assert.deepEqual(broker.lastCall('memory.purge'), { criteria: { relation_type: 'likes' }, mode: 'hard' });

    reply('textMemory.append', {});
    assert.equal(await api.textMemory().append({ role: 'user', content: '你好', timestamp: 17 }), undefined);
    assert.deepEqual(broker.lastCall('textMemory.append'), { role: 'user', content: '你好', timestamp: 17, channel: '' });

    const d = api.docMemory();
    reply('docMemory.query', { docs: [{ id: 'd1', title: 't', content: 'c', score: 1.5 }] });
    assert.deepEqual(await d.query('天气', 3), [{ id: 'd1', title: 't', content: 'c', score: 1.5 }]);
    assert.deepEqual(broker.lastCall('docMemory.query'), { text: '天气', topK: 3 });
    reply('docMemory.insert', {});
    await d.insert({ id: 'd2', title: 'T', content: 'C' });
    assert.deepEqual(broker.lastCall('docMemory.insert'), { id: 'd2', title: 'T', content: 'C', score: 0 });
    reply('docMemory.remove', {});
    await d.remove('d2');
    assert.deepEqual(broker.lastCall('docMemory.remove'), { id: 'd2' });
    reply('docMemory.stats', { statsJson: '{"docs":1}' });
    assert.deepEqual(await d.stats(), { docs: 1 });

    const k = api.knowledge();
    reply('knowledge.search', { entries: [{ name: 'n', content: 'c', score: 0.25 }] });
    assert.deepEqual(await k.search('q', 2), [{ name: 'n', content: 'c', score: 0.25 }]);
    assert.deepEqual(broker.lastCall('knowledge.search'), { query: 'q', topK: 2 });
    reply('knowledge.add', {});
    await k.add('n', '内容');
    assert.deepEqual(broker.lastCall('knowledge.add'), { name: 'n', content: '内容', score: 0 });
    reply('knowledge.list', { keys: ['n'] });
    assert.deepEqual(await k.list(), ['n']);

    const llm = api.llm();
    reply('llm.listSources', { keys: ['a', 'b'] });
    assert.deepEqual(await llm.listSources(), ['a', 'b']);
    reply('llm.setSource', {});
    await llm.setSource('b');
    assert.deepEqual(broker.lastCall('llm.setSource'), { name: 'b' });
    reply('llm.currentSource', { name: 'b' });
    assert.equal(await llm.currentSource(), 'b');
  });

  it('mcp: request and the helpers send MCP methods and map results; list helpers follow pages', async () => {
    const m = api.mcp();
    assert.equal(api.mcp(), m, 'one object per service');
    reply('mcp.request', { resultJson: '{"resources":[{"uri":"a://1"}]}' });
    assert.deepEqual(await m.request('files', 'resources/list'), { resources: [{ uri: 'a://1' }] });
    assert.deepEqual(broker.lastCall('mcp.request'), { server: 'files', method: 'resources/list', paramsJson: '' });
    await m.request('files', 'prompts/list', { cursor: 'c' }, { timeoutMs: 5000 });
    assert.deepEqual(broker.lastCall('mcp.request'), { server: 'files', method: 'prompts/list', paramsJson: '{"cursor":"c"}' });

    const pages = { '': { resources: [{ uri: 'a://1' }], nextCursor: 'p2' }, p2: { resources: [{ uri: 'a://2' }] } };
    reply('mcp.request', (req) => ({ resultJson: JSON.stringify(pages[req.paramsJson ? JSON.parse(req.paramsJson).cursor : '']) }));
    assert.deepEqual(await m.resources('files'), [{ uri: 'a://1' }, { uri: 'a://2' }]);
    reply('mcp.request', { resultJson: '{"resourceTemplates":[{"uriTemplate":"a://{id}","name":"t"}]}' });
    assert.deepEqual(await m.resourceTemplates('files'), [{ uriTemplate: 'a://{id}', name: 't' }]);
    assert.equal(broker.lastCall('mcp.request').method, 'resources/templates/list');
    reply('mcp.request', { resultJson: '{"prompts":[{"name":"greet"}]}' });
    assert.deepEqual(await m.prompts('files'), [{ name: 'greet' }]);
    reply('mcp.request', { resultJson: '{"contents":[{"uri":"a://1","mimeType":"text/plain","text":"你好"}]}' });
    assert.deepEqual(await m.readResource('files', 'a://1'), [{ uri: 'a://1', mimeType: 'text/plain', text: '你好' }]);
    assert.deepEqual(broker.lastCall('mcp.request'), { server: 'files', method: 'resources/read', paramsJson: '{"uri":"a://1"}' });
    const got = { description: 'Greet', messages: [{ role: 'user', content: { type: 'text', text: 'Hi, Ann' } }] };
    reply('mcp.request', { resultJson: JSON.stringify(got) });
    assert.deepEqual(await m.getPrompt('files', 'greet', { name: 'Ann' }), got);
    assert.deepEqual(JSON.parse(broker.lastCall('mcp.request').paramsJson), { name: 'greet', arguments: { name: 'Ann' } });
    await m.getPrompt('files', 'greet');
    assert.deepEqual(JSON.parse(broker.lastCall('mcp.request').paramsJson), { name: 'greet', arguments: {} });

    reply('mcp.request', { code: grpc.status.FAILED_PRECONDITION, details: 'MCP server files: resources/read: Unknown resource' });
    const e = await m.readResource('files', 'a://nope').catch((x) => x);
    assert.ok(e instanceof HostError, String(e));
    assert.deepEqual([e.code, e.method], ['FAILED_PRECONDITION', 'mcp.request']);
    assert.equal(e.message, 'plugin typed: mcp.request: FAILED_PRECONDITION: MCP server files: resources/read: Unknown resource');
    await assert.rejects(m.request('files', 'resources/list', { n: 10n }), /mcp.request: value is not JSON/);
  });

  it('rejects with HostError: status name, number, the broker message', async () => {
    assert.equal(sdkIndex.HostError, HostError);
    reply('settings.get', { code: grpc.status.NOT_FOUND, details: 'no `k` in config_typed' });
    const e = await api.settings().get('k').catch((x) => x);
    assert.ok(e instanceof HostError);
    assert.deepEqual([e.name, e.code, e.grpcCode, e.details, e.method], ['HostError', 'NOT_FOUND', grpc.status.NOT_FOUND, 'no `k` in config_typed', 'settings.get']);
    assert.equal(e.message, 'plugin typed: settings.get: NOT_FOUND: no `k` in config_typed');
    // Without a canned reply the fake host answers, checking capabilities as the broker does.
    delete broker.hostReplies['settings.getCore'];
    const u = await api.settings().getCore('core.x').catch((x) => x);
    assert.ok(u instanceof HostError, String(u));
    assert.deepEqual([u.code, u.details], ['PERMISSION_DENIED', 'plugin plugin: Settings.GetCore needs capability `settings_core`; add it to `capabilities` in its plugin.json']);
    reply('settings.get', { valueJson: '{broken' });
    const j = await api.settings().get('k').catch((x) => x);
    assert.ok(j instanceof HostError && j.code === 'INTERNAL' && /invalid JSON/.test(j.message), j.message);
  });
});
