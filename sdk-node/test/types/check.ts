// Compiled by test/unit.test.js with tsc --noEmit: the public types accept both styles.
import { Plugin, Stage, HostError, serve, type Sender, type CallContext, type HomeAgentSdk, type LinkZoneResult, type ConfigDefInfo, type JsonValue, type Entity, type Doc, type KnowledgeEntry, type McpResourceContents, type McpPromptResult } from 'hearth-plugin';
import { main } from 'hearth-plugin/runner';
import { hearth } from 'hearth-plugin/gen/hearth';
import { PluginHostService } from 'hearth-plugin/gen/services';

class Calc extends Plugin {
  static hearthAfterHello = () => undefined;
  static metadata = {
    name: 'calc',
    triggers: [{ type: 0 as const, pattern: '/calc' }],
    ai: { tool: { parameters: [{ name: 'e', type: 'string', description: 'expr', required: true }], usage: 'u', when_to_use: 'w' } },
  };
  async executeTool(sender: Sender, args: { e: string }, ctx: CallContext): Promise<LinkZoneResult> {
    ctx.signal.throwIfAborted();
    const v = await ctx.host.settings.get({ key: 'k' }, { timeoutMs: 1000 });
    const json: string = v.valueJson;
    void json;
    return { success: true, content: `${sender.userId}: ${args.e}`, data: { n: 1 } };
  }
}

const homeAgent = {
  name: () => 'ha',
  start(sdk: HomeAgentSdk) {
    void sdk.injectText('timer', 'hi');
    void sdk.registerDef({ key: 'api_key', type: 'string', display_name: 'API Key', secret: true });
    sdk.registerStage(Stage.OnInput, (ctx) => { if (ctx.userId === 'x') ctx.response = 'no'; });
    sdk.registerStageOwnTools('before_toolcall', async (ctx, { hookId }) => { ctx.toolCalls[0].denyReason = hookId; return ctx; });
    void sdk.registerTool('ha_tool', { description: 'd', parameters: { type: 'object' } }, async (args, { signal }) => ({ ok: !signal.aborted, args }));
  },
  stop() {},
  hearthProtocolVersion: '99.0.0',
  hearthAfterHello: async () => 1,
};

const msg: hearth.v1.IPluginMessage = { toolResult: { callId: 1, success: true, content: 'x' } };
const path: string = PluginHostService.attach.path;
void msg; void path; void main; void homeAgent;
void serve(Calc, { exit: false }).then((code: number) => code);

// The typed host-service APIs (HomeAgent names in camelCase).
async function typed(sdk: HomeAgentSdk): Promise<void> {
  const n: any = await sdk.settings().get('count');
  await sdk.settings().set('count', (n as number) + 1, { timeoutMs: 500 });
  const keys: string[] = await sdk.settings().listPlugin('qq', 'napcat');
  const defs: ConfigDefInfo[] = await sdk.settings().defs();
  const secret: boolean | undefined = defs[0].secret;
  const dump = await sdk.settings().dump();
  const core: JsonValue = dump.core['core.daemon.data_dir'];
  const { entities, relations } = await sdk.memory().recall(['Alice'], 2);
  const e: Entity = entities[0];
  const mentions: number = e.mention_count + relations.length;
  const added: number = await sdk.memory().commit([{ subject: 'a', relation: 'r', object: 'b', session_id: 's' }, ['c', 'r', 'd']]);
  const moved: number = await sdk.memory().mergeEntities('x', 'y') + await sdk.memory().purge({ relation_type: 'r' }, 'hard');
  await sdk.textMemory().append({ role: 'user', content: 'hi' });
  const docs: Doc[] = await sdk.docMemory().query('天气', 3);
  const k: KnowledgeEntry[] = await sdk.knowledge().search('q');
  const src: string = await sdk.llm().currentSource();
  const contents: McpResourceContents[] = await sdk.mcp().readResource('files', 'test://doc/1', { timeoutMs: 500 });
  const text: string | undefined = contents[0].text;
  const uris: string[] = (await sdk.mcp().resources('files')).map((r) => r.uri);
  const templates: string[] = (await sdk.mcp().resourceTemplates('files')).map((r) => r.uriTemplate);
  const prompt: McpPromptResult = await sdk.mcp().getPrompt('files', (await sdk.mcp().prompts('files'))[0].name, { name: 'Ann' });
  const raw: Record<string, any> = await sdk.mcp().request('files', 'resources/list', { cursor: 'c' });
  void text; void uris; void templates; void prompt.messages[0].content.text; void raw;
  try {
    await sdk.llm().setSource('nope');
  } catch (err) {
    if (err instanceof HostError && err.code === 'NOT_FOUND') void err.details;
  }
  void keys; void secret; void core; void mentions; void added; void moved; void docs; void k; void src;
}
void typed;
