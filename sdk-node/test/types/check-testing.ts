// Compiled by test/types.test.js with tsc --noEmit: the public types of
// hearth-plugin/testing accept how tests use it (CommonJS-style TS).
import { load, FakeBroker, FakeHost, HarnessError, InvalidArgumentsError, validateArguments, SECRET_MASK, type ToolCallResult, type StageRun, type EventResult, type PluginHarness } from 'hearth-plugin/testing';
import { Plugin, type Sender } from 'hearth-plugin';

class Echo extends Plugin {
  static metadata = { name: 'echo', ai: { tool: { parameters: [{ name: 'text', type: 'string', description: 't', required: true }], usage: 'u', when_to_use: 'w' } } };
  async executeTool(sender: Sender, args: { text: string }) { return { success: true, content: `${sender.userId}: ${args.text}` }; }
}

async function run(): Promise<void> {
  const host = new FakeHost({ llmSources: ['a', 'b'] });
  host.knowledge.add('faq', 'text');
  host.mcp.addResource('files', 'test://doc/1', 'hello', { name: 'doc1' });
  host.mcp.addPrompt('files', 'greet', (a) => `Hello, ${a.name}!`, { description: 'Greet', arguments: ['name'] });
  host.mcp.setResult('files', 'resources/templates/list', { resourceTemplates: [] });
  host.mcp.setConnected('files', true);
  const sent: string[] = host.mcp.requests.map((c) => `${c.server} ${c.method}`);
  void sent;
  const t: PluginHarness = await load(Echo, { host, settings: { days: 3 }, capabilities: ['memory', 'settings_core'], sender: { userId: 'ann' } });
  const r: ToolCallResult = await t.call('echo', { text: 'hi' }, { timeoutMs: 1000 });
  const ok: boolean = r.success && r.error === '' && r.progress.length === 0;
  try {
    await t.call('echo', { text: 1 });
  } catch (e) {
    if (e instanceof InvalidArgumentsError) void [e.argument, e.reason, e.tool, e.code];
    else if (e instanceof HarnessError) void e.code;
  }
  const s: StageRun = await t.runStage('on_input', { rawMessage: 'x', extra: { k: 1 } });
  const dropped: string[] = s.dropped.map((d) => `${d.hookId} ${d.field}`);
  const ev: EventResult = await t.event('/echo a', { sender: { groupId: 'g' } });
  const first: string | undefined = ev.replies[0];
  t.settings.set('days', 4);
  const days = t.settings.get('days');
  const masked: boolean = t.settings.dump().core.x === SECRET_MASK;
  const n: number = t.memory.commit([{ subject: 'a', relation: 'r', object: 'b' }]);
  const docs = t.docMemory.query('天气', 3).map((d) => d.score);
  t.override('settings.get', { code: 'UNAVAILABLE', details: 'down' });
  const names: string[] = t.tools.map((x) => x.name).concat(t.hooks.map((h) => h.hookId));
  const fmt: string | undefined = t.inject?.format;
  const bad = validateArguments({ type: 'object' }, { a: 1 });
  await t.close();
  {
    await using u = await load(require.resolve('./fixture.js'), { spawn: true });
    void u.injected.map((i) => i.priority);
  }
  const b = await FakeBroker.start();
  const p = await b.attach('/abs/index.js', { tokenPipe: true, name: 'x' });
  const res = await p.session.call1(1, 'tool', {});
  void res.success;
  await b.close();
  void [ok, dropped, first, days, masked, n, docs, names, fmt, bad];
}
void run;
