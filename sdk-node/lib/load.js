'use strict';

/**
 * Finding the plugin a file exports: a LinkZone class (static metadata), a HomeAgent
 * class or object (`name()`, `start(sdk)`, `stop()`), an instance of either, a
 * `default` export of any of these, or a HomeAgent-style factory `NewPlugin(name, config)`;
 * and the inject spec of the file's `@ai-trigger-*` header comments (lib/header.js).
 */

const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL, fileURLToPath } = require('node:url');
const { Plugin } = require('./plugin');
const header = require('./header');

/** The entry file exports nothing usable, or failed to load. */
class LoadError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'LoadError';
  }
}

/** @param {unknown} f */
function isClass(f) {
  return typeof f === 'function' && /^class[\s{]/.test(Function.prototype.toString.call(f));
}

/**
 * Whether an object is a plugin instance: LinkZone metadata, or a start(sdk) of its own.
 * @param {any} o
 */
function isPluginInstance(o) {
  if (!o || typeof o !== 'object') return false;
  const md = (o.constructor && o.constructor.metadata) || o.metadata;
  if (md && typeof md === 'object') return true;
  return typeof o.start === 'function' && o.start !== Plugin.prototype.start;
}

/**
 * A constructor that builds a plugin: a class with static metadata, or one whose
 * prototype has its own start(sdk) (plain ES5 constructor functions included). A class
 * with executeTool but no metadata is not one (its tool would have no name).
 * @param {any} f
 */
function isPluginClass(f) {
  if (typeof f !== 'function' || !f.prototype) return false;
  if (f.metadata && typeof f.metadata === 'object') return true;
  const proto = f.prototype;
  return typeof proto.start === 'function' && proto.start !== Plugin.prototype.start;
}

/** @param {any} v */
function describe(v) {
  if (v === undefined) return 'nothing (module.exports is undefined)';
  if (v === null) return 'null';
  if (typeof v === 'function') return `function ${v.name || '(anonymous)'}`;
  if (typeof v === 'object') {
    const keys = Object.keys(v);
    return keys.length ? `an object with keys [${keys.join(', ')}]` : 'an empty object';
  }
  return `a ${typeof v}`;
}

/**
 * Turns a module's exports into a plugin instance, and reads the header comments of
 * `file` (a malformed header is a LoadError naming the file and line).
 * @param {any} exported module.exports or an ES module namespace
 * @param {string} file the entry path (its header comments are read when it exists)
 * @param {{pluginName?: string}} [opts]
 * @returns {Promise<any>}
 */
async function pluginFromExports(exported, file, opts = {}) {
  const instance = await findPlugin(exported, file, opts);
  // The `@ai-trigger-*` header comments of the main file (lib/header.js): remembered for
  // the session, which registers them when metadata has no explicit ai.inject.
  try {
    header.remember(instance, header.readHeader(file));
  } catch (e) {
    throw new LoadError(/** @type {Error} */ (e).message);
  }
  return instance;
}

/**
 * The plugin instance a module's exports define (see pluginFromExports).
 * @param {any} exported
 * @param {string} file
 * @param {{pluginName?: string}} opts
 * @returns {Promise<any>}
 */
async function findPlugin(exported, file, opts) {
  const candidates = [];
  if (exported && (typeof exported === 'object' || typeof exported === 'function') && exported.default !== undefined) candidates.push(exported.default);
  candidates.push(exported);
  for (const c of candidates) {
    if (isPluginClass(c)) {
      try {
        return new c();
      } catch (e) {
        throw new LoadError(`${file}: constructing plugin class ${c.name || '(anonymous)'} failed: ${/** @type {Error} */ (e).message}`);
      }
    }
    if (isPluginInstance(c)) return c;
  }
  const factory = exported && (exported.NewPlugin || exported.newPlugin);
  if (typeof factory === 'function') {
    const inst = await factory(opts.pluginName || path.basename(path.dirname(file)), {});
    if (isPluginInstance(inst)) return inst;
    throw new LoadError(`${file}: NewPlugin() returned ${describe(inst)}, not a plugin (expected name(), start(sdk), stop())`);
  }
  const cls = candidates.find((c) => typeof c === 'function' && isClass(c));
  if (cls) {
    throw new LoadError(`${file}: class ${cls.name} is not a plugin: a LinkZone plugin needs static metadata = {name, ai: {tool|inject}} (and executeTool/handleEvent); a HomeAgent plugin needs start(sdk)`);
  }
  throw new LoadError(`${file} exports no plugin: expected a LinkZone class (static metadata + executeTool), a HomeAgent plugin (name(), start(sdk), stop()) or an instance of either, as module.exports or the default export; got ${describe(exported)}`);
}

/**
 * Loads a plugin entry file: CommonJS via require, ES modules (.mjs, "type": "module")
 * via dynamic import.
 * @param {string} file absolute path
 * @returns {Promise<any>} the module's exports / namespace
 */
async function loadModule(file) {
  if (file.endsWith('.mjs')) return import(pathToFileURL(file).href);
  try {
    return require(file);
  } catch (e) {
    const err = /** @type {any} */ (e);
    if (err && err.code === 'ERR_REQUIRE_ESM') return import(pathToFileURL(file).href);
    throw err;
  }
}

/**
 * The folder to run `npm install` in for `file`: the nearest one holding a package.json,
 * else the file's own folder.
 * @param {string} file
 */
function projectDir(file) {
  const start = path.dirname(file);
  for (let dir = start; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'package.json'))) return dir;
    if (path.dirname(dir) === dir) return start;
  }
}

/**
 * One line saying what is missing and how to install it, when loading the plugin entry
 * `file` failed because a module could not be found (CommonJS `MODULE_NOT_FOUND`, ESM
 * `ERR_MODULE_NOT_FOUND`); null for any other error. E.g. `cannot load /p/index.js:
 * module 'left-pad' not found (required from /p/index.js); run \`npm install left-pad\`
 * in /p`. A module missing inside an installed package asks for `npm install`; a
 * missing relative file names the file.
 * @param {unknown} e
 * @param {string} file absolute path of the entry
 * @returns {string | null}
 */
function moduleNotFound(e, file) {
  const err = /** @type {any} */ (e);
  if (!err || (err.code !== 'MODULE_NOT_FOUND' && err.code !== 'ERR_MODULE_NOT_FOUND')) return null;
  const first = String(err.message || '').split('\n')[0];
  const m = /^Cannot find (?:package|module) '([^']+)'(?: imported from (.+))?/.exec(first);
  if (!m) return null;
  let spec = m[1];
  const from = m[2] ? m[2].trim() : (Array.isArray(err.requireStack) && err.requireStack[0]) || file;
  const where = `cannot load ${file}`;
  if (spec.startsWith('file://')) spec = fileURLToPath(spec);
  if (path.isAbsolute(spec) && path.resolve(spec) === file) return `${where}: the file does not exist`;
  // A relative path (CommonJS) or the absolute one it resolved to (ESM): a file of the plugin.
  if (spec.startsWith('.') || path.isAbsolute(spec)) return `${where}: file '${spec}' not found (required from ${from})`;
  if (spec.startsWith('node:')) return `${where}: module '${spec}' is not built into Node ${process.version} (required from ${from})`;
  const parts = spec.split('/');
  const pkg = spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
  const dir = projectDir(file);
  if (from.split(path.sep).includes('node_modules')) {
    return `${where}: module '${spec}' not found (required from ${from}); an installed package is incomplete: run \`npm install\` in ${dir}`;
  }
  return `${where}: module '${spec}' not found (required from ${from}); run \`npm install ${pkg}\` in ${dir}`;
}

module.exports = { LoadError, pluginFromExports, loadModule, moduleNotFound, isPluginInstance, isPluginClass };
