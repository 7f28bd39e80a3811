'use strict';

/**
 * Typed host-service APIs with the seed's names in camelCase (HomeAgent `SettingsAPI`,
 * `MemoryAPI`, `TextMemoryAPI`, `DocMemoryAPI`, `KnowledgeAPI`, `LLMAPI`), plus `McpAPI`
 * (MCP servers' resources and prompts), on top of the generic clients of lib/host.js.
 *
 * `sdk.settings().get(key)` resolves to the decoded JSON value, `memory().recall(...)`
 * to `{entities, relations}`, counts to numbers. Records use the seed's JSON field
 * names (`display_name`, `mention_count`, `source_name`, …), as the seed's Go structs
 * serialize; inputs accept camelCase too (`displayName`, `subjectType`). Every method
 * takes an optional last `{timeoutMs}`; failures reject with a `HostError` whose
 * `code` is the status name (`'NOT_FOUND'`) and `details` the broker's message.
 */

const { HostError } = require('./hosterror');

/**
 * Calls a generic method and maps its response.
 * @param {any} service generic client of one host service
 * @param {string} method
 * @param {object} req
 * @param {any} opts
 * @param {(res: any) => any} post
 */
function call(service, method, req, opts, post) {
  return service[method](req, opts || {}).then(post);
}

/** @param {unknown} x an int64 as decoded (Long or number) */
function toNumber(x) {
  if (typeof x === 'number') return x;
  if (x && typeof (/** @type {any} */ (x)).toNumber === 'function') return /** @type {any} */ (x).toNumber();
  return Number(x);
}

/**
 * JSON text of a value for the wire.
 * @param {unknown} value
 * @param {string} where
 */
function toJson(value, where) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    throw new TypeError(`${where}: value is not JSON: ${/** @type {Error} */ (e).message}`);
  }
  if (text === undefined) throw new TypeError(`${where}: value is not JSON: ${typeof value}`);
  return text;
}

/**
 * A value from the broker's JSON text ('' = null).
 * @param {string} text
 * @param {string} where
 */
function fromJson(text, where) {
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new HostError(`${where}: the broker sent invalid JSON: ${/** @type {Error} */ (e).message}`, { code: 'INTERNAL' });
  }
}

/** @param {any} res KeysResponse */
const keys = (res) => [...res.keys];
const none = () => undefined;

/**
 * A wire ConfigDef → the seed's ConfigDef JSON (empty fields left out, like `omitempty`).
 * @param {any} w
 * @param {string} where
 */
function defFromWire(w, where) {
  /** @type {any} */
  const d = { key: w.key };
  if (w.defaultJson) d.default = fromJson(w.defaultJson, where);
  d.type = w.type;
  d.display_name = w.displayName;
  if (w.description) d.description = w.description;
  if (w.category) d.category = w.category;
  if (w.options && w.options.length) d.options = [...w.options];
  for (const k of ['min', 'max', 'step']) if (w[k] != null) d[k] = w[k];
  if (w.required) d.required = true;
  if (w.secret) d.secret = true;
  return d;
}

/**
 * Picks `snake` or its camelCase spelling from `o`.
 * @param {any} o
 * @param {string} snake
 */
function field(o, snake) {
  if (o[snake] != null) return o[snake];
  const camel = snake.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
  return o[camel];
}

/**
 * A triple given as an object or `[subject, relation, object, subjectType?, objectType?, sessionId?]`.
 * @param {any} t
 * @param {string} where
 */
function tripleToWire(t, where) {
  const names = ['subject', 'relation', 'object', 'subject_type', 'object_type', 'session_id'];
  let o = t;
  if (Array.isArray(t)) {
    if (t.length < 3 || t.length > 6) throw new TypeError(`${where}: a triple array has 3 to 6 items (subject, relation, object, …), got ${t.length}`);
    o = Object.fromEntries(t.map((v, i) => [names[i], v]));
  } else if (!t || typeof t !== 'object') {
    throw new TypeError(`${where}: expected a triple object or array, got ${t === null ? 'null' : typeof t}`);
  }
  const str = (/** @type {string} */ k) => { const v = field(o, k); return v == null ? '' : String(v); };
  return { subject: str('subject'), relation: str('relation'), object: str('object'), subjectType: str('subject_type'), objectType: str('object_type'), sessionId: str('session_id') };
}

class SettingsApi {
  /** @param {any} host @param {any} session */
  constructor(host, session) {
    this.host = host;
    this.session = session;
  }

  /** @param {string} m */
  where(m) { return `plugin ${this.host.plugin}: settings.${m}`; }

  /** @param {string} m */
  value(m) { return (/** @type {any} */ r) => fromJson(r.valueJson, this.where(m)); }

  /** The value of `key` in this plugin's table (NOT_FOUND if unset). */
  get(/** @type {string} */ key, /** @type {any} */ opts) { return call(this.host.settings, 'get', { key }, opts, this.value('get')); }

  /** Sets `key` to any JSON value (null included). */
  set(/** @type {string} */ key, /** @type {unknown} */ value, /** @type {any} */ opts) {
    return Promise.resolve().then(() => call(this.host.settings, 'set', { key, valueJson: toJson(value, this.where('set')) }, opts, none));
  }

  list(prefix = '', /** @type {any} */ opts) { return call(this.host.settings, 'list', { prefix }, opts, keys); }

  getCore(/** @type {string} */ key, /** @type {any} */ opts) { return call(this.host.settings, 'getCore', { key }, opts, this.value('getCore')); }

  setCore(/** @type {string} */ key, /** @type {unknown} */ value, /** @type {any} */ opts) {
    return Promise.resolve().then(() => call(this.host.settings, 'setCore', { key, valueJson: toJson(value, this.where('setCore')) }, opts, none));
  }

  listCore(prefix = '', /** @type {any} */ opts) { return call(this.host.settings, 'listCore', { prefix }, opts, keys); }

  getPlugin(/** @type {string} */ plugin, /** @type {string} */ key, /** @type {any} */ opts) {
    return call(this.host.settings, 'getPlugin', { plugin, key }, opts, this.value('getPlugin'));
  }

  setPlugin(/** @type {string} */ plugin, /** @type {string} */ key, /** @type {unknown} */ value, /** @type {any} */ opts) {
    return Promise.resolve().then(() => call(this.host.settings, 'setPlugin', { plugin, key, valueJson: toJson(value, this.where('setPlugin')) }, opts, none));
  }

  listPlugin(/** @type {string} */ plugin, prefix = '', /** @type {any} */ opts) {
    return call(this.host.settings, 'listPlugin', { plugin, prefix }, opts, keys);
  }

  /**
   * Declares a setting; its default is written only when the key is unset. Inside
   * start() it travels with Register, later through the Settings service.
   */
  registerDef(/** @type {any} */ def, /** @type {any} */ opts) {
    try {
      if (this.session) return this.session.registerDef(def);
      return call(this.host.settings, 'registerDef', require('./spec').configDef(def, this.host.plugin), opts, none);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** This plugin's definitions whose key starts with `prefix`. */
  defs(prefix = '', /** @type {any} */ opts) {
    return call(this.host.settings, 'defs', { prefix }, opts, (r) => r.defs.map((/** @type {any} */ w) => defFromWire(w, this.where('defs'))));
  }

  /** Every setting, secrets masked: `{core: {...}, plugins: {name: {...}}}`. */
  dump(/** @type {any} */ opts) { return call(this.host.settings, 'dump', {}, opts, (r) => fromJson(r.dumpJson, this.where('dump')) || {}); }

  /** Names of the plugins that have settings. */
  plugins(/** @type {any} */ opts) { return call(this.host.settings, 'plugins', {}, opts, keys); }
}

class MemoryApi {
  /** @param {any} host */
  constructor(host) { this.host = host; }

  /** Entities matching any keyword and what lies within `depth` relations. */
  recall(/** @type {string | string[]} */ keywords, depth = 1, /** @type {any} */ opts) {
    const kw = typeof keywords === 'string' ? [keywords] : [...keywords].map(String);
    return call(this.host.memory, 'recall', { keywords: kw, depth }, opts, (r) => ({
      entities: r.entities.map((/** @type {any} */ e) => ({ name: e.name, type: e.type, mention_count: toNumber(e.mentionCount) })),
      relations: r.relations.map((/** @type {any} */ x) => ({ source_name: x.sourceName, target_name: x.targetName, relation_type: x.relationType })),
    }));
  }

  /** Stores triples; resolves to how many relations were added. */
  commit(/** @type {any[]} */ triples, /** @type {any} */ opts) {
    return Promise.resolve().then(() => {
      const wire = [...triples].map((t, i) => tripleToWire(t, `plugin ${this.host.plugin}: memory.commit: triple ${i}`));
      return call(this.host.memory, 'commit', { triples: wire }, opts, (r) => r.committed);
    });
  }

  /** Counts of the graph. */
  introspect(/** @type {any} */ opts) {
    return call(this.host.memory, 'introspect', {}, opts, (r) => fromJson(r.statsJson, `plugin ${this.host.plugin}: memory.introspect`) || {});
  }

  /** Merges entity `source` into `target`; resolves to how many relations moved. */
  mergeEntities(/** @type {string} */ source, /** @type {string} */ target, /** @type {any} */ opts) {
    return call(this.host.memory, 'mergeEntities', { source, target }, opts, (r) => toNumber(r.count));
  }

  /** Removes relations matching every criterion; mode 'soft' or 'hard'. */
  purge(/** @type {Record<string, string>} */ criteria, mode = 'soft', /** @type {any} */ opts) {
    const c = Object.fromEntries(Object.entries(criteria || {}).map(([k, v]) => [k, String(v)]));
    return call(this.host.memory, 'purge', { criteria: c, mode }, opts, (r) => toNumber(r.count));
  }
}

class TextMemoryApi {
  /** @param {any} host */
  constructor(host) { this.host = host; }

  /** Appends an event `{role, content, timestamp?, channel?}`. */
  append(/** @type {any} */ event, /** @type {any} */ opts) {
    const e = event || {};
    return call(this.host.textMemory, 'append', { role: String(e.role || ''), content: String(e.content || ''), timestamp: Number(e.timestamp || 0), channel: String(e.channel || '') }, opts, none);
  }
}

class DocMemoryApi {
  /** @param {any} host */
  constructor(host) { this.host = host; }

  /** Best matching documents, best first, with `score`. */
  query(/** @type {string} */ text, topK = 5, /** @type {any} */ opts) {
    return call(this.host.docMemory, 'query', { text, topK }, opts, (r) => r.docs.map((/** @type {any} */ d) => ({ id: d.id, title: d.title, content: d.content, score: d.score })));
  }

  /** Stores `{id, title, content}`; the same id replaces. */
  insert(/** @type {any} */ doc, /** @type {any} */ opts) {
    const d = doc || {};
    return call(this.host.docMemory, 'insert', { id: String(d.id || ''), title: String(d.title || ''), content: String(d.content || '') }, opts, none);
  }

  remove(/** @type {string} */ id, /** @type {any} */ opts) { return call(this.host.docMemory, 'remove', { id }, opts, none); }

  stats(/** @type {any} */ opts) {
    return call(this.host.docMemory, 'stats', {}, opts, (r) => fromJson(r.statsJson, `plugin ${this.host.plugin}: docMemory.stats`) || {});
  }
}

class KnowledgeApi {
  /** @param {any} host */
  constructor(host) { this.host = host; }

  /** Best matching entries, best first, with `score`. */
  search(/** @type {string} */ query, topK = 5, /** @type {any} */ opts) {
    return call(this.host.knowledge, 'search', { query, topK }, opts, (r) => r.entries.map((/** @type {any} */ e) => ({ name: e.name, content: e.content, score: e.score })));
  }

  add(/** @type {string} */ name, /** @type {string} */ content, /** @type {any} */ opts) { return call(this.host.knowledge, 'add', { name, content }, opts, none); }

  list(/** @type {any} */ opts) { return call(this.host.knowledge, 'list', {}, opts, keys); }
}

class LlmApi {
  /** @param {any} host */
  constructor(host) { this.host = host; }

  listSources(/** @type {any} */ opts) { return call(this.host.llm, 'listSources', {}, opts, keys); }

  setSource(/** @type {string} */ name, /** @type {any} */ opts) { return call(this.host.llm, 'setSource', { name }, opts, none); }

  currentSource(/** @type {any} */ opts) { return call(this.host.llm, 'currentSource', {}, opts, (r) => r.name); }
}

/** The MCP methods `mcp().request` may send (the broker refuses others: INVALID_ARGUMENT). */
const MCP_METHODS = Object.freeze(['resources/list', 'resources/templates/list', 'resources/read', 'prompts/list', 'prompts/get']);
/** Most pages a listing helper follows (`nextCursor`). */
const MCP_MAX_PAGES = 1000;

/**
 * Resources and prompts of the MCP servers the broker runs as plugins (`"runtime":
 * "mcp"`), named by plugin name (capability `mcp`). Results are MCP's JSON (MCP's
 * field names: `uri`, `mimeType`, `text`, `messages`, …); the listing helpers follow
 * `nextCursor` over every page. Errors reject with a HostError of method `mcp.request`:
 * NOT_FOUND (no such MCP plugin), INVALID_ARGUMENT, UNAVAILABLE (not connected),
 * FAILED_PRECONDITION (the server's own error), PERMISSION_DENIED.
 */
class McpApi {
  /** @param {any} host */
  constructor(host) { this.host = host; }

  /** @param {string} m */
  where(m) { return `plugin ${this.host.plugin}: mcp.${m}`; }

  /**
   * Sends `method` with `params` (an object; omitted = {}) to MCP server `server`;
   * resolves to its result object.
   * @param {string} server
   * @param {string} method
   * @param {unknown} [params]
   * @param {any} [opts]
   */
  request(server, method, params, opts) {
    return Promise.resolve().then(() => {
      const paramsJson = params == null ? '' : toJson(params, this.where('request'));
      return call(this.host.mcp, 'request', { server, method, paramsJson }, opts, (r) => fromJson(r.resultJson, this.where('request')) || {});
    });
  }

  /**
   * Every item of `key` over the pages of a list method.
   * @param {string} name
   * @param {string} server
   * @param {string} method
   * @param {string} key
   * @param {any} opts
   */
  async items(name, server, method, key, opts) {
    /** @type {any[]} */
    const items = [];
    /** @type {string | undefined} */
    let cursor;
    for (let i = 0; i < MCP_MAX_PAGES; i++) {
      const result = await this.request(server, method, cursor === undefined ? undefined : { cursor }, opts);
      const page = result && typeof result === 'object' ? (result[key] === undefined ? [] : result[key]) : null;
      if (!Array.isArray(page)) throw new HostError(`${this.where(name)}: ${method} of MCP server ${server}: no \`${key}\` list in the result`, { code: 'INTERNAL' });
      items.push(...page);
      const next = result.nextCursor;
      if (!next || next === cursor) break;
      cursor = String(next);
    }
    return items;
  }

  /** The server's resources (`resources/list`). @param {string} server @param {any} [opts] */
  resources(server, opts) { return this.items('resources', server, 'resources/list', 'resources', opts); }

  /** The server's resource templates (`resources/templates/list`). @param {string} server @param {any} [opts] */
  resourceTemplates(server, opts) { return this.items('resourceTemplates', server, 'resources/templates/list', 'resourceTemplates', opts); }

  /**
   * The contents of resource `uri` (`resources/read`): `[{uri, mimeType, text | blob}]`.
   * @param {string} server @param {string} uri @param {any} [opts]
   */
  readResource(server, uri, opts) {
    return this.request(server, 'resources/read', { uri }, opts).then((r) => [...((r && r.contents) || [])]);
  }

  /** The server's prompts (`prompts/list`). @param {string} server @param {any} [opts] */
  prompts(server, opts) { return this.items('prompts', server, 'prompts/list', 'prompts', opts); }

  /**
   * Prompt `name` filled with `args` (`prompts/get`): `{description, messages}`.
   * @param {string} server @param {string} name @param {Record<string, string>} [args] @param {any} [opts]
   */
  getPrompt(server, name, args = {}, opts) {
    return this.request(server, 'prompts/get', { name, arguments: { ...(args || {}) } }, opts);
  }
}

/**
 * The typed APIs over `host` (created on first use); `session` (optional) gives
 * `settings().registerDef` the start()-time path.
 * @param {() => any} hostOf
 * @param {any} [session]
 */
function createApis(hostOf, session) {
  /** @type {Record<string, any>} */
  const made = {};
  /** @param {string} k @param {(h: any) => any} make */
  const once = (k, make) => () => made[k] || (made[k] = make(hostOf()));
  return {
    settings: once('settings', (h) => new SettingsApi(h, session)),
    memory: once('memory', (h) => new MemoryApi(h)),
    textMemory: once('textMemory', (h) => new TextMemoryApi(h)),
    docMemory: once('docMemory', (h) => new DocMemoryApi(h)),
    knowledge: once('knowledge', (h) => new KnowledgeApi(h)),
    llm: once('llm', (h) => new LlmApi(h)),
    mcp: once('mcp', (h) => new McpApi(h)),
  };
}

module.exports = { createApis, SettingsApi, MemoryApi, TextMemoryApi, DocMemoryApi, KnowledgeApi, LlmApi, McpApi, MCP_METHODS, defFromWire, tripleToWire };
