// Compiled by test/unit.test.js with tsc --noEmit: the public types accept both styles.
import { Plugin, Stage, serve, type Sender, type CallContext, type HomeAgentSdk, type LinkZoneResult } from 'hearth-sdk';
import { main } from 'hearth-sdk/runner';
import { hearth } from 'hearth-sdk/gen/hearth';
import { PluginHostService } from 'hearth-sdk/gen/services';

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
