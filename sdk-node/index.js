'use strict';

/**
 * hearth-plugin: write Hearth plugins in Node, in LinkZone style (class + static metadata +
 * executeTool) or HomeAgent style (name()/start(sdk)/stop() + sdk.registerTool).
 *
 * Requiring this module loads only the Plugin base class; gRPC and the generated
 * stubs load when a plugin is served.
 */

const { Plugin } = require('./lib/plugin');
const { Stage } = require('./lib/stages');
const { HostError } = require('./lib/hosterror');

/**
 * Serves a plugin (a class or an instance, either style) over the Hearth session
 * described by HEARTH_ADDR / HEARTH_PLUGIN and the spawn token (read from the pipe fd
 * HEARTH_TOKEN_FD, else HEARTH_TOKEN; lib/token.js), until the broker shuts it
 * down or goes away. By default exits the process with the session's exit code
 * (0 ok, 1 stream/start failure, 2 bad configuration, 3 rejected by the broker).
 * @param {any} plugin
 * @param {import('./index').ServeOptions} [opts]
 * @returns {Promise<number>} exit code (when `opts.exit === false`)
 */
async function serve(plugin, opts = {}) {
  if (opts.token == null && opts.env == null) {
    // Read the token before building the plugin; an error is reported by the session (exit 2).
    try { require('./lib/token').spawnToken(); } catch (_) { /* cached, thrown again there */ }
  }
  const { pluginFromExports } = require('./lib/load');
  const { serveInstance } = require('./lib/session');
  const instance = await pluginFromExports(plugin, opts.file || '(serve argument)', { pluginName: process.env.HEARTH_PLUGIN });
  const code = await serveInstance(instance, opts);
  if (opts.exit !== false) process.exit(code);
  return code;
}

module.exports = { Plugin, Stage, HostError, serve };
