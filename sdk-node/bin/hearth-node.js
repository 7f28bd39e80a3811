#!/usr/bin/env node
'use strict';
// hearth-node run <plugin.js>: serve one plugin by hand (HEARTH_ADDR, HEARTH_PLUGIN and
// HEARTH_TOKEN must be set, as the broker sets them).
const [cmd, file] = process.argv.slice(2);
if (cmd === '--version' || cmd === '-v') {
  process.stdout.write(`${require('../package.json').version}\n`);
} else if (cmd === 'run' && file) {
  require('../runner').main(file);
} else {
  process.stderr.write('usage: hearth-node run <plugin.js>   (env: HEARTH_ADDR, HEARTH_PLUGIN, HEARTH_TOKEN)\n');
  process.exit(2);
}
