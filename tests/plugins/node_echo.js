// Node test plugin for the broker's integration tests and benchmarks.
// Tools are prefixed with the plugin name (HEARTH_PLUGIN): `<name>_echo` returns its
// arguments, `<name>_sleep` sleeps `ms` milliseconds (aborted on Cancel).
const { Plugin } = require('hearth-plugin');

const NAME = process.env.HEARTH_PLUGIN || 'node';

class EchoPlugin extends Plugin {
  name() {
    return NAME;
  }

  start(sdk) {
    sdk.registerTool(`${NAME}_echo`, {
      description: 'Returns its arguments.',
      parameters: { type: 'object' },
    }, async (args) => args);
    sdk.registerTool(`${NAME}_sleep`, {
      description: 'Sleeps `ms` milliseconds.',
      parameters: {
        type: 'object',
        properties: { ms: { type: 'integer', minimum: 0 } },
        required: ['ms'],
      },
    }, (args, { signal } = {}) => new Promise((resolve, reject) => {
      const t = setTimeout(() => resolve(`slept ${args.ms} ms`), args.ms);
      if (signal) signal.addEventListener('abort', () => { clearTimeout(t); reject(new Error('cancelled')); });
    }));
  }
}

module.exports = EchoPlugin;
