'use strict';

/**
 * In-memory settings with the broker's semantics (broker/src/storage/settings.rs):
 * core keys in `config`, each plugin's keys in its own `config_<name>` table (created
 * on its first write, a set or a registered def), values that keep their JSON type
 * (`null` is a stored value, not a missing key), NOT_FOUND naming key and table
 * ("no `city` in config_weather"), ConfigDefs whose default is written only when the
 * key is unset, and secrets: a key is secret when its def says so, or when it is a
 * core key named like a credential (`…api_key`, `…token`, …); a secret reads as
 * "••••••" in `dump()` and in masked reads.
 *
 * A key whose def has type `string`, `number`, `integer` or `boolean` only takes values
 * of that JSON type, or null (the broker's `ConfigDef::check`, the golden file
 * tests/golden/setting-types.json); another value is INVALID_ARGUMENT with the broker's
 * message ("setting `days` of plugin weather: expected a number (its def's type is
 * `number`), got \"abc\" (a string)"), whoever writes it: the plugin or the test. As in
 * the broker, `options`, `min` and `max` are not checked, nor is a def's default.
 * Values are kept as the broker's serde_json keeps them (./json.js: `2.0` stays an f64).
 *
 * A scope is `null` for the core settings, else a plugin's name.
 */

const { HarnessError } = require('../errors');
const json = require('./json');

const SECRET_MASK = '••••••';
const SECRET_KEY_SUFFIXES = ['api_key', 'apikey', 'token', 'secret', 'password'];
const MAX_NAME_CHARS = 48;
const CORE_TABLE = 'config';

/**
 * Whether a core key is secret by its name alone.
 * @param {string} key
 */
function secretByName(key) {
  const k = key.toLowerCase().replace(/-/g, '_');
  return SECRET_KEY_SUFFIXES.some((end) => k.endsWith(end));
}

/**
 * `config_` + the sanitized plugin name (before any collision suffix).
 * @param {string} plugin
 */
function baseTableName(plugin) {
  return `config_${[...plugin].slice(0, MAX_NAME_CHARS).map((c) => (/[A-Za-z0-9]/.test(c) ? c.toLowerCase() : '_')).join('')}`;
}

/** @param {string} what @param {string} reason */
const invalid = (what, reason) => new HarnessError('INVALID_ARGUMENT', `${what}: ${reason}`);

/**
 * @typedef {import('../../index').JsonValue} JsonValue
 * @typedef {{key: string, default?: JsonValue, type: string, display_name: string, description?: string, category?: string, options?: string[], min?: number, max?: number, step?: number, required?: boolean, secret?: boolean}} ConfigDefJson
 */

/** One table: values as JSON text, by key. */
class Table {
  /** @param {string} name */
  constructor(name) {
    this.name = name;
    /** @type {Map<string, string>} */
    this.values = new Map();
    /** @type {Map<string, ConfigDefJson>} */
    this.defs = new Map();
  }
}

class SettingsStore {
  constructor() {
    this.core = new Table(CORE_TABLE);
    /** @type {Map<string, Table>} plugin name → its table */
    this.tables = new Map();
  }

  /** @param {string | null} scope */
  check(scope) {
    if (scope !== null && !scope) throw invalid('settings', 'empty plugin name');
  }

  /** @param {string} key */
  checkKey(key) {
    if (!key) throw invalid('settings', 'empty key');
  }

  /** @param {string | null} scope @returns {Table | undefined} */
  tableOf(scope) {
    return scope === null ? this.core : this.tables.get(scope);
  }

  /** @param {string | null} scope @returns {Table} */
  tableForWrite(scope) {
    const existing = this.tableOf(scope);
    if (existing) return existing;
    const plugin = /** @type {string} */ (scope);
    const taken = new Set([CORE_TABLE, ...[...this.tables.values()].map((t) => t.name)]);
    const base = baseTableName(plugin);
    let name = base;
    for (let n = 2; taken.has(name); n++) name = `${base}_${n}`;
    const t = new Table(name);
    this.tables.set(plugin, t);
    return t;
  }

  /** @param {string | null} scope @param {string} key */
  notFound(scope, key) {
    const t = this.tableOf(scope);
    const table = t ? t.name : baseTableName(/** @type {string} */ (scope));
    return new HarnessError('NOT_FOUND', `no \`${key}\` in ${table}`, { key, table });
  }

  /**
   * The value of `key` in `scope`, with its JSON type. Throws NOT_FOUND when unset.
   * @param {string | null} scope
   * @param {string} key
   * @returns {JsonValue}
   */
  get(scope, key) {
    return this.read(scope, key, false);
  }

  /**
   * Like get, but with `masked` a secret key reads as "••••••".
   * @param {string | null} scope
   * @param {string} key
   * @param {boolean} masked
   * @returns {JsonValue}
   */
  read(scope, key, masked) {
    this.check(scope);
    this.checkKey(key);
    const t = this.tableOf(scope);
    if (!t || !t.values.has(key)) throw this.notFound(scope, key);
    if (masked && this.secretIn(t, key)) return SECRET_MASK;
    return JSON.parse(/** @type {string} */ (t.values.get(key)));
  }

  /** @param {Table} t @param {string} key */
  secretIn(t, key) {
    const def = t.defs.get(key);
    return (def && def.secret === true) || (t === this.core && secretByName(key));
  }

  /**
   * Whether `key` of `scope` is secret, set or not.
   * @param {string | null} scope
   * @param {string} key
   */
  isSecret(scope, key) {
    this.check(scope);
    this.checkKey(key);
    if (scope === null && secretByName(key)) return true;
    const t = this.tableOf(scope);
    return !!t && this.secretIn(t, key);
  }

  /**
   * Sets `key` to any JSON value (null included), creating the plugin's table. Throws
   * INVALID_ARGUMENT when the key has a def whose type the value does not fit
   * ({@link checkSetting}); nothing is written then.
   * @param {string | null} scope
   * @param {string} key
   * @param {JsonValue} value
   * @param {string} [text] the value's JSON text as sent (`value_json`): kept as the broker keeps it (`2.0` an f64)
   */
  set(scope, key, value, text) {
    this.check(scope);
    this.checkKey(key);
    const source = text === undefined ? JSON.stringify(value) : text;
    if (source === undefined) throw invalid('settings', `value of \`${key}\` is not JSON`);
    const node = json.parse(source);
    const t = this.tableOf(scope);
    const def = t && t.defs.get(key);
    const why = def ? checkNode(def, node) : null;
    if (why) throw invalid(`setting \`${key}\` of ${scope === null ? 'core' : `plugin ${scope}`}`, why);
    this.tableForWrite(scope).values.set(key, json.render(node));
  }

  /**
   * The value of `key` as JSON text, as the broker answers `Settings.Get` (a secret
   * masked with `masked`). Throws as `read`.
   * @param {string | null} scope
   * @param {string} key
   * @param {boolean} masked
   * @returns {string}
   */
  readText(scope, key, masked) {
    this.read(scope, key, masked);
    const t = /** @type {Table} */ (this.tableOf(scope));
    return masked && this.secretIn(t, key) ? JSON.stringify(SECRET_MASK) : /** @type {string} */ (t.values.get(key));
  }

  /**
   * Keys of `scope` starting with `prefix`, sorted.
   * @param {string | null} scope
   * @param {string} [prefix]
   */
  list(scope, prefix = '') {
    this.check(scope);
    const t = this.tableOf(scope);
    return t ? [...t.values.keys()].filter((k) => k.startsWith(prefix)).sort() : [];
  }

  /**
   * Records a def (replacing one of the same key) and writes its default when the key
   * is unset.
   * @param {string | null} scope
   * @param {ConfigDefJson} def
   */
  registerDef(scope, def) {
    this.check(scope);
    this.checkKey(def.key);
    const t = this.tableForWrite(scope);
    t.defs.set(def.key, def);
    if (def.default !== undefined && !t.values.has(def.key)) {
      const text = DEFAULT_TEXT.get(def);
      t.values.set(def.key, json.canonical(text === undefined ? JSON.stringify(def.default) : text));
    }
  }

  /**
   * Defs of `scope` whose key starts with `prefix`, sorted by key.
   * @param {string | null} scope
   * @param {string} [prefix]
   * @returns {ConfigDefJson[]}
   */
  defs(scope, prefix = '') {
    this.check(scope);
    const t = this.tableOf(scope);
    if (!t) return [];
    return [...t.defs.values()].filter((d) => d.key.startsWith(prefix)).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)).map((d) => {
      const copy = { ...d };
      const text = DEFAULT_TEXT.get(d);
      if (text !== undefined) DEFAULT_TEXT.set(copy, text);
      return copy;
    });
  }

  /** @param {Table} t */
  dumpTable(t) {
    /** @type {Record<string, JsonValue>} */
    const out = {};
    for (const k of [...t.values.keys()].sort()) out[k] = this.secretIn(t, k) ? SECRET_MASK : JSON.parse(/** @type {string} */ (t.values.get(k)));
    return out;
  }

  /**
   * `dump()` as JSON text, as the broker answers `Settings.Dump`.
   * @returns {string}
   */
  dumpText() {
    const table = (/** @type {Table} */ t) => `{${[...t.values.keys()].sort(json.byCodePoint)
      .map((k) => `${JSON.stringify(k)}:${this.secretIn(t, k) ? JSON.stringify(SECRET_MASK) : t.values.get(k)}`).join(',')}}`;
    const plugins = [...this.tables.keys()].sort(json.byCodePoint)
      .map((p) => `${JSON.stringify(p)}:${table(/** @type {Table} */ (this.tables.get(p)))}`).join(',');
    return `{"core":${table(this.core)},"plugins":{${plugins}}}`;
  }

  /**
   * Every setting, secrets masked: `{core: {...}, plugins: {name: {...}}}`.
   * @returns {{core: Record<string, JsonValue>, plugins: Record<string, Record<string, JsonValue>>}}
   */
  dump() {
    /** @type {Record<string, Record<string, JsonValue>>} */
    const plugins = {};
    for (const p of this.plugins()) plugins[p] = this.dumpTable(/** @type {Table} */ (this.tables.get(p)));
    return { core: this.dumpTable(this.core), plugins };
  }

  /** Names of the plugins that have a settings table, sorted. */
  plugins() {
    return [...this.tables.keys()].sort();
  }

  /**
   * The table holding `scope`'s keys (`config`, `config_weather`), or null before the
   * plugin's first write.
   * @param {string | null} scope
   */
  tableName(scope) {
    const t = this.tableOf(scope);
    return t ? t.name : null;
  }
}

/**
 * The `default_json` text a def came with from the wire, so its default is stored as
 * the broker stores it.
 * @type {WeakMap<object, string>}
 */
const DEFAULT_TEXT = new WeakMap();

/**
 * A wire ConfigDef → the seed's JSON (settings.rs `ConfigDef::from_wire` + serde).
 * Throws INVALID_ARGUMENT for a default that is not JSON.
 * @param {any} w
 * @param {string} method e.g. 'Settings.RegisterDef'
 * @returns {ConfigDefJson}
 */
function defFromWire(w, method) {
  /** @type {ConfigDefJson} */
  const d = { key: w.key || '', type: w.type || '', display_name: w.displayName || '' };
  const text = (w.defaultJson || '').trim();
  if (text) {
    try {
      d.default = JSON.parse(text);
    } catch (e) {
      throw invalid(method, `def \`${w.key}\`: default_json is not JSON: ${/** @type {Error} */ (e).message}`);
    }
  }
  if (w.description) d.description = w.description;
  if (w.category) d.category = w.category;
  if (w.options && w.options.length) d.options = [...w.options];
  for (const k of /** @type {const} */ (['min', 'max', 'step'])) if (w[k] != null) d[k] = w[k];
  if (w.required) d.required = true;
  if (w.secret) d.secret = true;
  // Key order as the broker serializes it.
  const { key, default: def, type, display_name: displayName, ...rest } = d;
  const out = def === undefined ? { key, type, display_name: displayName, ...rest } : { key, default: def, type, display_name: displayName, ...rest };
  if (text) DEFAULT_TEXT.set(out, text);
  return out;
}

/**
 * A stored def → the wire ConfigDef (`ConfigDef::into_wire`).
 * @param {ConfigDefJson} d
 */
function defToWire(d) {
  return {
    key: d.key,
    defaultJson: d.default === undefined ? '' : json.canonical(DEFAULT_TEXT.get(d) ?? JSON.stringify(d.default)),
    type: d.type,
    displayName: d.display_name,
    description: d.description || '',
    category: d.category || '',
    options: d.options || [],
    min: d.min,
    max: d.max,
    step: d.step,
    required: d.required === true,
    secret: d.secret === true,
  };
}

const EXPECTED = { string: 'a string', number: 'a number', integer: 'an integer', boolean: 'a boolean (true or false)' };

/**
 * Why the value `node` does not fit `def`'s type, in the broker's words, or null.
 * @param {ConfigDefJson} def
 * @param {import('./json').Node} node
 * @returns {string | null}
 */
function checkNode(def, node) {
  const type = def.type || '';
  let fits;
  switch (type) {
    case 'string': fits = node.t === 'str'; break;
    case 'number': fits = node.t === 'int' || node.t === 'f64'; break;
    case 'integer': fits = node.t === 'int' || (node.t === 'f64' && Number.isInteger(node.v)); break;
    case 'boolean': fits = node.t === 'bool'; break;
    default: return null;
  }
  if (fits || node.t === 'null') return null;
  const expected = `expected ${EXPECTED[/** @type {keyof typeof EXPECTED} */ (type)]} (its def's type is \`${type}\`)`;
  if (def.secret === true) return `${expected}, got ${json.kind(node)} (a secret: value not shown)`;
  let shown = json.render(node);
  const chars = [...shown];
  if (chars.length > 60) shown = `${chars.slice(0, 60).join('')}…`;
  return `${expected}, got ${shown} (${json.kind(node)})`;
}

/**
 * Why a value does not fit `def`'s type (the broker's `ConfigDef::check`: only
 * `string`, `number`, `integer` and `boolean` are checked, null always fits, a secret
 * def's value is not quoted), or null when it fits.
 * @param {ConfigDefJson} def
 * @param {string} valueJson the value as JSON text
 * @returns {string | null}
 */
function checkSetting(def, valueJson) {
  return checkNode(def, json.parse(valueJson));
}

module.exports = { SettingsStore, defFromWire, defToWire, checkSetting, secretByName, baseTableName, SECRET_MASK };
