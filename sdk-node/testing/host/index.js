'use strict';

/**
 * The broker's host services, in memory (broker/src/grpc/host.rs, grpc/agent.rs
 * `InputService` and `LlmService`): one `FakeHost` holds the stores (settings, graph
 * memory, text memory, documents, knowledge, LLM sources, MCP servers, injected input)
 * and answers each host-service rpc for a calling plugin as the broker does — the same
 * capability checks (`memory`, `knowledge`, `mcp`, `llm`, `input`, `input_as_user`,
 * `settings_core`, `settings_cross`, `settings_secrets`), the same masking of other scopes' secrets, the
 * same status codes and messages. The gRPC side (which rpc calls `answer`) is in
 * ../broker.js.
 */

const { HarnessError } = require('../errors');
const { SettingsStore, defFromWire, defToWire } = require('./settings');
const { parse: parseJson } = require('./json');
const { GraphMemoryStore } = require('./memory');
const { DocMemoryStore, KnowledgeStore } = require('./search');
const { McpStore } = require('./mcp');

/** Capabilities of a plugin whose manifest names none (manifest.rs DEFAULT_CAPABILITIES). */
const DEFAULT_CAPABILITIES = Object.freeze(['memory', 'knowledge', 'llm', 'input']);
/** Every capability a manifest may grant (manifest.rs CAPABILITIES). */
const CAPABILITIES = Object.freeze(['memory', 'knowledge', 'mcp', 'llm', 'input', 'input_as_user', 'settings_core', 'settings_cross', 'settings_secrets']);
const PRIORITIES = ['background', 'message', 'interactive', 'critical'];

/**
 * A text-memory line as stored (seed `TextEvent`; timestamp 0 becomes the append time).
 * @typedef {{role: string, content: string, timestamp: number, channel: string}} TextEventJson
 */

/**
 * Input a plugin injected, as the broker interprets the request: who it speaks as
 * (`source`, `userId`: `plugin:<name>` unless it may speak as a user), the
 * conversation, the priority level.
 * @typedef {{method: 'injectText' | 'injectTextNoMemory' | 'injectInterruptText', plugin: string, source: string, userId: string, groupId: string, channel: string, text: string, priority: string, noMemory: boolean, interrupt: boolean}} InjectedInput
 */

/** In-memory TextMemory: the appended lines, oldest first. */
class TextMemoryStore {
  constructor() {
    /** @type {TextEventJson[]} */
    this.events = [];
  }

  /**
   * Appends a line; INVALID_ARGUMENT when `role` is empty.
   * @param {{role: string, content?: string, timestamp?: number, channel?: string}} e
   */
  append(e) {
    if (!e.role || !e.role.trim()) throw new HarnessError('INVALID_ARGUMENT', 'TextMemory.Append: `role` is empty (system, user or assistant)');
    this.events.push({ role: e.role, content: e.content || '', timestamp: e.timestamp || Math.floor(Date.now() / 1000), channel: e.channel || '' });
  }
}

/** In-memory LLM sources (Llm service): names in priority order and the chosen one. */
class LlmStore {
  /** @param {string[]} sources */
  constructor(sources) {
    this.sources = [...sources];
    /** @type {string | null} */
    this.chosen = null;
  }

  /** The source requests go to first: the chosen one, else the first; '' when none. */
  current() {
    return this.chosen || this.sources[0] || '';
  }

  /** @param {string} name */
  set(name) {
    if (!this.sources.includes(name)) throw new Error(`unknown LLM source \`${name}\` (known: ${this.sources.join(', ')})`);
    this.chosen = name;
  }
}

/** @param {unknown} x an int64 as decoded (Long or number) */
const num = (x) => (typeof x === 'number' ? x : x && typeof (/** @type {any} */ (x)).toNumber === 'function' ? /** @type {any} */ (x).toNumber() : Number(x || 0));

/**
 * `value_json` → a value; INVALID_ARGUMENT naming the method when empty or not JSON.
 * @param {string} method
 * @param {string} json
 */
function parseValue(method, json) {
  if (!json || !json.trim()) throw new HarnessError('INVALID_ARGUMENT', `${method}: value_json is empty; send JSON text (e.g. "\\"text\\"", 3, true, null)`);
  try {
    const value = JSON.parse(json);
    parseJson(json); // numbers serde_json refuses (out of f64 range)
    return value;
  } catch (e) {
    throw new HarnessError('INVALID_ARGUMENT', `${method}: value_json is not JSON: ${/** @type {Error} */ (e).message}`);
  }
}

/** The other plugin a `*_plugin` method names. @param {string} method @param {string} plugin */
function other(method, plugin) {
  if (!plugin || !plugin.trim()) throw new HarnessError('INVALID_ARGUMENT', `${method}: \`plugin\` is empty`);
  return plugin;
}

class FakeHost {
  /**
   * @param {{llmSources?: string[]}} [opts] `llmSources`: names of the LLM sources the Llm service lists (default none)
   */
  constructor(opts = {}) {
    this.settings = new SettingsStore();
    this.memory = new GraphMemoryStore();
    this.textMemory = new TextMemoryStore();
    this.docMemory = new DocMemoryStore();
    this.knowledge = new KnowledgeStore();
    this.llm = new LlmStore(opts.llmSources || []);
    /** MCP servers' resources and prompts (the Mcp service). */
    this.mcp = new McpStore();
    /** @type {InjectedInput[]} */
    this.injected = [];
    /** @type {Map<string, readonly string[]>} capabilities by plugin name */
    this.capabilities = new Map();
  }

  /**
   * Grants `plugin` these capabilities (replacing earlier ones).
   * @param {string} plugin
   * @param {readonly string[]} capabilities
   */
  grant(plugin, capabilities) {
    const unknown = capabilities.filter((c) => !CAPABILITIES.includes(c));
    if (unknown.length) throw new HarnessError('INVALID_CAPABILITY', `plugin ${plugin}: unknown capabilities ${unknown.join(', ')} (known: ${CAPABILITIES.join(', ')})`);
    this.capabilities.set(plugin, Object.freeze([...capabilities]));
  }

  /** @param {string} plugin @param {string} cap */
  holds(plugin, cap) {
    return (this.capabilities.get(plugin) || DEFAULT_CAPABILITIES).includes(cap);
  }

  /**
   * PERMISSION_DENIED unless `plugin` holds `cap` (grpc/mod.rs `plugin_caller`).
   * @param {string} plugin
   * @param {string} method e.g. 'Settings.GetCore'
   * @param {string | undefined} cap
   */
  admit(plugin, method, cap) {
    if (cap && !this.holds(plugin, cap)) {
      throw new HarnessError('PERMISSION_DENIED', `plugin ${plugin}: ${method} needs capability \`${cap}\`; add it to \`capabilities\` in its plugin.json`);
    }
  }

  /** Secrets of `scope` in clear for `plugin`? @param {string} plugin @param {string | null} scope */
  clear(plugin, scope) {
    return scope === plugin || this.holds(plugin, 'settings_secrets');
  }

  /** @param {string} plugin @param {string} method @param {string | null} scope @param {string} key */
  checkSecretWrite(plugin, method, scope, key) {
    if (this.clear(plugin, scope) || !this.settings.isSecret(scope, key)) return;
    const where = scope === null ? 'core' : `plugin ${scope}`;
    throw new HarnessError('PERMISSION_DENIED', `plugin ${plugin}: ${method}: \`${key}\` of ${where} is secret; overwriting it needs capability \`settings_secrets\`; add it to \`capabilities\` in its plugin.json`);
  }

  /**
   * Answers one host-service rpc of `plugin` as the broker would. `method` is the SDK's
   * name (`settings.get`, `memory.recall`, `input.injectText`, …), `req` the decoded
   * request. Throws a HarnessError whose code is the gRPC status name.
   * @param {string} method
   * @param {string} plugin
   * @param {any} req
   * @returns {object} the response message
   */
  answer(method, plugin, req) {
    const handler = HANDLERS[method];
    if (!handler) throw new HarnessError('UNIMPLEMENTED', `${method} is not served by the fake host`);
    return handler(this, plugin, req);
  }

  /**
   * Input: attributes the text to the plugin (or, with `input_as_user`, to who it
   * names), as grpc/agent.rs `InputService::inject` does.
   * @param {'injectText' | 'injectTextNoMemory' | 'injectInterruptText'} method
   * @param {string} plugin
   * @param {any} req
   */
  inject(method, plugin, req) {
    const name = `Input.${method[0].toUpperCase()}${method.slice(1)}`;
    this.admit(plugin, name, 'input');
    if (!req.text || !req.text.trim()) throw new HarnessError('INVALID_ARGUMENT', `plugin ${plugin}: inject: text is empty`);
    const identity = `plugin:${plugin}`;
    const own = (/** @type {string} */ s) => !s || s === plugin || s === identity;
    const asUser = this.holds(plugin, 'input_as_user');
    for (const [field, value] of [['source', req.source || ''], ['user_id', req.userId || '']]) {
      if (!asUser && !own(value)) {
        throw new HarnessError('PERMISSION_DENIED', `plugin ${plugin}: ${name}: \`${field}\` ${JSON.stringify(value)} is not this plugin (${identity}); injecting as another user or source needs capability \`input_as_user\`; add it to \`capabilities\` in its plugin.json, or leave \`${field}\` empty`);
      }
    }
    const source = own(req.source || '') ? identity : req.source;
    const userId = !req.userId ? source : own(req.userId) ? identity : req.userId;
    const p = req.priority || 0;
    if (p < 0 || p > 4) throw new HarnessError('INVALID_ARGUMENT', `priority ${p} is not a level: 1 background, 2 message, 3 interactive, 4 critical`);
    this.injected.push({
      method, plugin, source, userId, groupId: req.groupId || '', channel: req.channel || plugin, text: req.text,
      priority: PRIORITIES[(p || 1) - 1], noMemory: method === 'injectTextNoMemory', interrupt: method === 'injectInterruptText',
    });
    return {};
  }
}

/** @type {Record<string, (h: FakeHost, plugin: string, req: any) => object>} */
const HANDLERS = {
  'settings.get': (h, me, r) => {
    h.admit(me, 'Settings.Get');
    return { valueJson: h.settings.readText(me, r.key, false) };
  },
  'settings.set': (h, me, r) => {
    h.admit(me, 'Settings.Set');
    h.settings.set(me, r.key, parseValue('Settings.Set', r.valueJson), r.valueJson);
    return {};
  },
  'settings.list': (h, me, r) => ({ keys: h.settings.list(me, r.prefix || '') }),
  'settings.getCore': (h, me, r) => {
    h.admit(me, 'Settings.GetCore', 'settings_core');
    return { valueJson: h.settings.readText(null, r.key, !h.clear(me, null)) };
  },
  'settings.setCore': (h, me, r) => {
    h.admit(me, 'Settings.SetCore', 'settings_core');
    const v = parseValue('Settings.SetCore', r.valueJson);
    h.checkSecretWrite(me, 'Settings.SetCore', null, r.key);
    h.settings.set(null, r.key, v, r.valueJson);
    return {};
  },
  'settings.listCore': (h, me, r) => {
    h.admit(me, 'Settings.ListCore', 'settings_core');
    return { keys: h.settings.list(null, r.prefix || '') };
  },
  'settings.getPlugin': (h, me, r) => {
    h.admit(me, 'Settings.GetPlugin', 'settings_cross');
    const scope = other('Settings.GetPlugin', r.plugin);
    return { valueJson: h.settings.readText(scope, r.key, !h.clear(me, scope)) };
  },
  'settings.setPlugin': (h, me, r) => {
    h.admit(me, 'Settings.SetPlugin', 'settings_cross');
    const scope = other('Settings.SetPlugin', r.plugin);
    const v = parseValue('Settings.SetPlugin', r.valueJson);
    h.checkSecretWrite(me, 'Settings.SetPlugin', scope, r.key);
    h.settings.set(scope, r.key, v, r.valueJson);
    return {};
  },
  'settings.listPlugin': (h, me, r) => {
    h.admit(me, 'Settings.ListPlugin', 'settings_cross');
    return { keys: h.settings.list(other('Settings.ListPlugin', r.plugin), r.prefix || '') };
  },
  'settings.registerDef': (h, me, r) => {
    h.settings.registerDef(me, defFromWire(r, 'Settings.RegisterDef'));
    return {};
  },
  'settings.defs': (h, me, r) => ({ defs: h.settings.defs(me, r.prefix || '').map(defToWire) }),
  'settings.dump': (h, me) => {
    h.admit(me, 'Settings.Dump', 'settings_cross');
    return { dumpJson: h.settings.dumpText() };
  },
  'settings.plugins': (h) => ({ keys: h.settings.plugins() }),

  'memory.recall': (h, me, r) => {
    h.admit(me, 'Memory.Recall', 'memory');
    const g = h.memory.recall(r.keywords || [], r.depth || 0);
    return {
      entities: g.entities.map((e) => ({ name: e.name, type: e.type, mentionCount: e.mention_count })),
      relations: g.relations.map((x) => ({ sourceName: x.source_name, targetName: x.target_name, relationType: x.relation_type })),
    };
  },
  'memory.commit': (h, me, r) => {
    h.admit(me, 'Memory.Commit', 'memory');
    const triples = (r.triples || []).map((/** @type {any} */ t) => ({
      subject: t.subject, relation: t.relation, object: t.object, subject_type: t.subjectType, object_type: t.objectType, session_id: t.sessionId,
    }));
    return { committed: h.memory.commit(triples) };
  },
  'memory.introspect': (h, me) => {
    h.admit(me, 'Memory.Introspect', 'memory');
    return { statsJson: JSON.stringify(h.memory.introspect()) };
  },
  'memory.mergeEntities': (h, me, r) => {
    h.admit(me, 'Memory.MergeEntities', 'memory');
    return { count: h.memory.mergeEntities(r.source || '', r.target || '') };
  },
  'memory.purge': (h, me, r) => {
    h.admit(me, 'Memory.Purge', 'memory');
    return { count: h.memory.purge({ ...(r.criteria || {}) }, r.mode || '') };
  },

  'textMemory.append': (h, me, r) => {
    h.admit(me, 'TextMemory.Append', 'memory');
    h.textMemory.append({ role: r.role, content: r.content, timestamp: num(r.timestamp), channel: r.channel });
    return {};
  },

  'docMemory.query': (h, me, r) => {
    h.admit(me, 'DocMemory.Query', 'memory');
    return { docs: h.docMemory.query(r.text || '', r.topK || 0) };
  },
  'docMemory.insert': (h, me, r) => {
    h.admit(me, 'DocMemory.Insert', 'memory');
    h.docMemory.insert({ id: r.id, title: r.title, content: r.content });
    return {};
  },
  'docMemory.remove': (h, me, r) => {
    h.admit(me, 'DocMemory.Remove', 'memory');
    h.docMemory.remove(r.id || '');
    return {};
  },
  'docMemory.stats': (h, me) => {
    h.admit(me, 'DocMemory.Stats', 'memory');
    return { statsJson: JSON.stringify(h.docMemory.stats()) };
  },

  'knowledge.search': (h, me, r) => {
    h.admit(me, 'Knowledge.Search', 'knowledge');
    return { entries: h.knowledge.search(r.query || '', r.topK || 0) };
  },
  'knowledge.add': (h, me, r) => {
    h.admit(me, 'Knowledge.Add', 'knowledge');
    h.knowledge.add(r.name || '', r.content || '');
    return {};
  },
  'knowledge.list': (h, me) => {
    h.admit(me, 'Knowledge.List', 'knowledge');
    return { keys: h.knowledge.list() };
  },

  'llm.listSources': (h, me) => {
    h.admit(me, 'Llm.ListSources', 'llm');
    return { keys: [...h.llm.sources] };
  },
  'llm.setSource': (h, me, r) => {
    h.admit(me, 'Llm.SetSource', 'llm');
    try {
      h.llm.set(r.name || '');
    } catch (e) {
      throw new HarnessError('NOT_FOUND', `plugin ${me}: set_source: ${/** @type {Error} */ (e).message}`);
    }
    return {};
  },
  'llm.currentSource': (h, me) => {
    h.admit(me, 'Llm.CurrentSource', 'llm');
    return { name: h.llm.current() };
  },

  'mcp.request': (h, me, r) => {
    h.admit(me, 'Mcp.Request', 'mcp');
    return { resultJson: JSON.stringify(h.mcp.request(r.server || '', r.method || '', r.paramsJson || '')) };
  },

  'input.injectText': (h, me, r) => h.inject('injectText', me, r),
  'input.injectTextNoMemory': (h, me, r) => h.inject('injectTextNoMemory', me, r),
  'input.injectInterruptText': (h, me, r) => h.inject('injectInterruptText', me, r),
};

module.exports = { FakeHost, TextMemoryStore, LlmStore, McpStore, DEFAULT_CAPABILITIES, CAPABILITIES, HANDLERS };
