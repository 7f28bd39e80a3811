#!/usr/bin/env node
'use strict';
// hearth-node run <plugin.js>: serve one plugin by hand (HEARTH_ADDR, HEARTH_PLUGIN and
// HEARTH_TOKEN must be set; the broker passes the token in a pipe, HEARTH_TOKEN_FD).
const [cmd, file] = process.argv.slice(2);
if (cmd === '--version' || cmd === '-v') {
  process.stdout.write(`${require('../package.json').version}\n`);
} else if (cmd === 'run' && file) {
  require('../runner').main(file);
} else {
  process.stderr.write('usage: hearth-node run <plugin.js>   (env: HEARTH_ADDR, HEARTH_PLUGIN, HEARTH_TOKEN or HEARTH_TOKEN_FD)\n');
  process.exit(2);
}
