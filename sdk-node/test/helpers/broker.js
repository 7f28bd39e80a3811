'use strict';

/**
 * Helpers of the repo's own tests, on top of the public fake broker
 * (`hearth-plugin/testing`: FakeBroker, BrokerSession, PluginProcess): the fixture
 * paths, the stress plugin, and polling another process's output.
 */

const path = require('node:path');
const { FakeBroker, NODE_BOOTSTRAP } = require('hearth-plugin/testing');

/** The command line the broker uses: `node -e BOOTSTRAP /abs/entry`, cwd = plugin dir. */
const BOOTSTRAP = NODE_BOOTSTRAP;

/** @param {string} name @param {string} [file] */
const fixture = (name, file = 'index.js') => path.join(__dirname, '..', 'fixtures', name, file);

/** The canonical Node stress plugin (tests/plugins/stress.js, spec tests/plugins/STRESS.md). */
const STRESS_PLUGIN = path.join(__dirname, '..', '..', '..', 'tests', 'plugins', 'stress.js');

/**
 * Polls `read()` until it matches `re` (output of another process arrives on its own
 * schedule), then returns it; returns the last value after `ms` so the caller's
 * assertion reports what was there.
 * @param {() => string} read
 * @param {RegExp} re
 * @param {number} [ms]
 */
async function eventually(read, re, ms = 3000) {
  const end = Date.now() + ms;
  while (!re.test(read()) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return read();
}

module.exports = { FakeBroker, BOOTSTRAP, fixture, eventually, STRESS_PLUGIN };
