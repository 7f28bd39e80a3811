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
 * A scope is `null` for the core settings, else a plugin's name.
 */

const { HarnessError } = require('../errors');

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
   * Sets `key` to any JSON value (null included), creating the plugin's table.
   * @param {string | null} scope
   * @param {string} key
   * @param {JsonValue} value
   */
  set(scope, key, value) {
    this.check(scope);
    this.checkKey(key);
    const json = JSON.stringify(value);
    if (json === undefined) throw invalid('settings', `value of \`${key}\` is not JSON`);
    this.tableForWrite(scope).values.set(key, json);
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
    if (def.default !== undefined && !t.values.has(def.key)) t.values.set(def.key, JSON.stringify(def.default));
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
    return [...t.defs.values()].filter((d) => d.key.startsWith(prefix)).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)).map((d) => ({ ...d }));
  }

  /** @param {Table} t */
  dumpTable(t) {
    /** @type {Record<string, JsonValue>} */
    const out = {};
    for (const k of [...t.values.keys()].sort()) out[k] = this.secretIn(t, k) ? SECRET_MASK : JSON.parse(/** @type {string} */ (t.values.get(k)));
    return out;
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
  return def === undefined ? { key, type, display_name: displayName, ...rest } : { key, default: def, type, display_name: displayName, ...rest };
}

/**
 * A stored def → the wire ConfigDef (`ConfigDef::into_wire`).
 * @param {ConfigDefJson} d
 */
function defToWire(d) {
  return {
    key: d.key,
    defaultJson: d.default === undefined ? '' : JSON.stringify(d.default),
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

/**
 * Why `value` does not fit `def` (type string/number/boolean, `options`, `min`/`max`),
 * or null. The broker stores any JSON value; the harness checks the values a test seeds.
 * @param {ConfigDefJson} def
 * @param {unknown} value
 * @returns {string | null}
 */
function defMismatch(def, value) {
  const shown = JSON.stringify(value);
  if (['string', 'number', 'boolean'].includes(def.type)) {
    const ok = def.type === 'number' ? typeof value === 'number' && Number.isFinite(value) : typeof value === def.type;
    if (!ok) return `the def says type ${def.type}, got ${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value} ${shown}`;
  }
  if (def.options && def.options.length && (typeof value === 'string' || typeof value === 'number') && !def.options.includes(String(value))) {
    return `${shown} is not one of the def's options [${def.options.join(', ')}]`;
  }
  if (typeof value === 'number') {
    if (def.min != null && value < def.min) return `${shown} is less than the def's min ${def.min}`;
    if (def.max != null && value > def.max) return `${shown} is greater than the def's max ${def.max}`;
  }
  return null;
}

module.exports = { SettingsStore, defFromWire, defToWire, defMismatch, secretByName, baseTableName, SECRET_MASK };
