'use strict';

/**
 * hearth-plugin/runner: what the broker runs for a `runtime: "node"` plugin. Its
 * bootstrap (`node -e NODE_BOOTSTRAP /abs/plugin/index.js`, broker/src/supervisor/
 * process.rs) resolves this module from the plugin's folder and calls `main(entry)`;
 * `hearth-node run <entry>` does the same by hand.
 *
 * Loads the entry (CommonJS, or ESM by dynamic import), finds the plugin it exports and
 * serves it; exits 0 after Shutdown or a clean end of the stream, 1 on a stream failure
 * or when start() throws, 2 when the entry cannot be loaded or exports no plugin (or a
 * module it needs is missing, or its metadata is invalid, or HEARTH_ADDR is unset, or
 * the token cannot be read from HEARTH_TOKEN_FD), 3 when the broker rejects it. A
 * missing module is reported as one stderr line naming it and the `npm install` that
 * fixes it (the broker quotes a failed plugin's last stderr lines as the reason).
 */

const path = require('node:path');

/**
 * Loads and serves the plugin in `entryPath`; never returns (exits the process).
 * @param {string} entryPath plugin entry file (relative paths resolve against the cwd)
 * @returns {Promise<never>}
 */
async function main(entryPath) {
  // The token first, before the plugin's code can open a file under HEARTH_TOKEN_FD's number.
  const { spawnToken } = require('./lib/token');
  try {
    spawnToken();
  } catch (e) {
    const plugin = process.env.HEARTH_PLUGIN;
    process.stderr.write(`hearth-plugin: ${plugin ? `plugin ${plugin}: ` : ''}${/** @type {Error} */ (e).message}\n`);
    process.exit(2);
  }
  if (!entryPath) {
    process.stderr.write('hearth-plugin: runner: no plugin entry file given\n');
    process.exit(2);
  }
  const file = path.resolve(entryPath);
  const { loadModule, pluginFromExports, moduleNotFound } = require('./lib/load');
  let instance;
  try {
    const exported = await loadModule(file);
    instance = await pluginFromExports(exported, file, { pluginName: process.env.HEARTH_PLUGIN });
  } catch (e) {
    const err = /** @type {any} */ (e);
    // A missing dependency is one line (the broker shows a failed plugin's last stderr
    // lines as the reason): what is missing and how to install it.
    const missing = moduleNotFound(err, file);
    const msg = missing || (err && err.name === 'LoadError' ? err.message : loadFailure(err, file));
    process.stderr.write(`hearth-plugin: ${msg}\n`);
    process.exit(2);
  }
  const { serveInstance } = require('./lib/session');
  const code = await serveInstance(instance, {});
  process.exit(code);
}

/**
 * The one-line reason of a failed load. A syntax error names its file and line, which
 * Node puts in the first line of the stack rather than in the message:
 * `loading /p/index.js failed: SyntaxError: Unexpected token ';' (at /p/index.js:5)`.
 * Any other error keeps its whole stack.
 * @param {any} err
 * @param {string} file
 * @returns {string}
 */
function loadFailure(err, file) {
  if (err && err.name === 'SyntaxError' && typeof err.stack === 'string') {
    const first = err.stack.split('\n', 1)[0];
    const at = /^(\S.*):(\d+)$/.test(first) ? ` (at ${first.replace(/^file:\/\//, '')})` : '';
    return `loading ${file} failed: SyntaxError: ${err.message}${at}`;
  }
  return `loading ${file} failed: ${(err && err.stack) || err}`;
}

module.exports = { main, loadFailure };
