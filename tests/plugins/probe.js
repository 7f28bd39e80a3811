// The Node twin of tests/plugins/probe.py (tests/integration/security.rs): each tool tries
// one thing and answers "ok: …" or "denied: <error>", so one call shows one fact.
const fs = require('fs');
const { Plugin } = require('hearth-plugin');

const NAME = process.env.HEARTH_PLUGIN || 'probe';

const attempt = (fn) => {
  try {
    return `ok: ${fn()}`;
  } catch (e) {
    return `denied: ${e.code || e.name}: ${e.message}`;
  }
};

const ACTIONS = {
  read: (path) => fs.readFileSync(path).subarray(0, 200).toString('utf8'),
  write: (path) => { fs.writeFileSync(path, 'probe'); return path; },
};

class Probe extends Plugin {
  name() {
    return NAME;
  }

  start(sdk) {
    for (const [action, fn] of Object.entries(ACTIONS)) {
      sdk.registerTool(`${NAME}_${action}`, {
        description: `probe: ${action}`,
        parameters: { type: 'object', properties: { arg: { type: 'string' } }, required: ['arg'] },
      }, async (args) => attempt(() => fn(args.arg)));
    }
    sdk.registerTool(`${NAME}_env`, {
      description: 'probe: the environment',
      parameters: { type: 'object' },
    }, async () => ({ keys: Object.keys(process.env).sort(), tmp: process.env.TMPDIR || '', data: process.env.HEARTH_PLUGIN_DATA || '', pid: process.pid }));
  }
}

module.exports = Probe;
