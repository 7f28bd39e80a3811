// Stage-hook test plugin (Node) for the broker's pipeline tests; the Rust twin is
// sdk-rust/examples/hooks.rs and behaves the same. P = $HEARTH_PLUGIN.
//
// - Tool `P_ping` (no parameters) answers "pong from P".
// - $HOOKS, comma-separated directives, registered in the order given:
//   - `noop`: a hook at every stage that changes nothing (the benchmarks' hook cost).
//   - `trace`: a plain hook at every stage. on_input … before_output append "P:<stage>"
//     to `extra.trace` (extra becomes an object and trace an array if they are not);
//     after_output (read-only) prints `TRACE P after_output final=<final_text>`.
//   - `deny=<tool>`: before_toolcall; every tool call named <tool> gets deny = true,
//     deny_reason = "not allowed by P".
//   - `own`: before_toolcall with own-tools scope; prints `OWN P <tool name>` for each
//     tool call in the context.
// Lines go to stdout (synchronous for pipes and files on Linux, so nothing is lost).
const NAME = process.env.HEARTH_PLUGIN || 'hooks';
const STAGES = ['on_input', 'pre_action', 'post_action', 'before_toolcall', 'after_toolcall', 'before_output', 'after_output'];

const directives = (process.env.HOOKS || '').split(',').map((d) => d.trim()).filter(Boolean);

const say = (line) => process.stdout.write(`${line}\n`);

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

class HooksPlugin {
  name() {
    return NAME;
  }

  start(sdk) {
    sdk.registerTool(`${NAME}_ping`, {
      description: 'Answers pong.',
      parameters: { type: 'object', properties: {} },
    }, async () => `pong from ${NAME}`);

    for (const d of directives) {
      if (d === 'noop') {
        for (const stage of STAGES) sdk.registerStage(stage, () => {});
      } else if (d === 'trace') {
        for (const stage of STAGES) {
          if (stage === 'after_output') {
            sdk.registerStage(stage, (ctx) => { say(`TRACE ${NAME} after_output final=${ctx.finalText}`); });
          } else {
            sdk.registerStage(stage, (ctx) => {
              if (!isObject(ctx.extra)) ctx.extra = {};
              if (!Array.isArray(ctx.extra.trace)) ctx.extra.trace = [];
              ctx.extra.trace.push(`${NAME}:${stage}`);
            });
          }
        }
      } else if (d.startsWith('deny=')) {
        const tool = d.slice('deny='.length);
        sdk.registerStage('before_toolcall', (ctx) => {
          for (const t of ctx.toolCalls) {
            if (t.name === tool) {
              t.deny = true;
              t.denyReason = `not allowed by ${NAME}`;
            }
          }
        });
      } else if (d === 'own') {
        sdk.registerStageOwnTools('before_toolcall', (ctx) => {
          for (const t of ctx.toolCalls) say(`OWN ${NAME} ${t.name}`);
        });
      } else {
        throw new Error(`hooks: unknown HOOKS directive ${JSON.stringify(d)}`);
      }
    }
  }

  stop() {}
}

module.exports = HooksPlugin;
