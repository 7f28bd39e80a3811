'use strict';

/**
 * `load()`: runs one plugin against an in-process fake broker and drives it the way the
 * broker does. The plugin's real session code runs — it dials a real gRPC server on a
 * temp Unix socket, sends Hello and Register, answers InvokeTool, RunStage and
 * HandleEvent, and calls the host services — so what passes here passes under the
 * broker. Around the session the harness does the broker's part: it checks the
 * registration (tool names, JSON Schemas, hooks, triggers, config defs) as the
 * registry does, validates call arguments against each tool's schema before calling,
 * runs stage hooks through the permission matrix (./permissions.js), matches messages
 * against triggers (./triggers.js), and serves settings, memory, documents, knowledge,
 * LLM sources, MCP servers and input from a {@link FakeHost}.
 *
 * By default the plugin runs in the test's own process (fast; `console.log` output and
 * module state are the test process's). `spawn: true` runs it as a child process through
 * the broker's own Node bootstrap and `hearth-plugin/runner` instead.
 */

const fs = require('node:fs');
const path = require('node:path');
const { FakeBroker } = require('./broker');
const { FakeHost, DEFAULT_CAPABILITIES } = require('./host');
const { defFromWire } = require('./host/settings');
const schema = require('./schema');
const permissions = require('./permissions');
const triggers = require('./triggers');
const { HarnessError, InvalidArgumentsError } = require('./errors');
const stages = require('../lib/stages');
const { pluginLabel } = require('../lib/plugin');

const PROTOCOL_VERSION = '1.0.0';
const FEATURES = ['cancel', 'progress', 'batch'];
/** The broker's default `call_timeout_s` and `startup_timeout_s`, and hook timeout. */
const CALL_TIMEOUT_MS = 60000;
const STARTUP_TIMEOUT_MS = 10000;
const HOOK_TIMEOUT_MS = 5000;
const SHUTDOWN_GRACE_MS = 2000;
const DEFAULT_SENDER = Object.freeze({ userId: 'tester', groupId: '', channel: 'test', sessionId: '' });

/** @param {unknown} x an int64 as decoded (Long or number) */
const num = (x) => (typeof x === 'number' ? x : x && typeof (/** @type {any} */ (x)).toNumber === 'function' ? /** @type {any} */ (x).toNumber() : Number(x || 0));
/** @param {string} text @param {unknown} empty */
const parse = (text, empty) => {
  if (!text) return empty;
  try { return JSON.parse(text); } catch (_) { return text; }
};

/**
 * The trace fields a call's options ask for (`{traceparent, tracestate}`, as a tracing
 * broker sends them), or none.
 * @param {{traceparent?: string, tracestate?: string}} opts
 */
const traceOf = (opts) => ({ traceparent: opts.traceparent || '', tracestate: opts.tracestate || '' });

/**
 * A decoded wire StageContext (or the SDK's encoding of a handler object) → the plain
 * wire shape permissions.js works on.
 * @param {any} c
 * @param {number} stage
 */
function wireContext(c, stage) {
  return {
    rawMessage: c.rawMessage || '',
    userId: c.userId || '',
    groupId: c.groupId || '',
    contextMsgsJson: c.contextMsgsJson || '',
    llmText: c.llmText || '',
    reasoningContent: c.reasoningContent || '',
    tokenUsage: Object.fromEntries(Object.entries(c.tokenUsage || {}).map(([k, v]) => [k, num(v)])),
    toolCalls: (c.toolCalls || []).map((/** @type {any} */ t) => ({ id: t.id || '', name: t.name || '', plugin: t.plugin || '', argumentsJson: t.argumentsJson || '', deny: t.deny === true, denyReason: t.denyReason || '' })),
    toolResults: (c.toolResults || []).map((/** @type {any} */ r) => ({ callId: r.callId || '', name: r.name || '', plugin: r.plugin || '', success: r.success === true, resultJson: r.resultJson || '' })),
    finalText: c.finalText || '',
    response: c.response == null ? null : String(c.response),
    phase: stage,
    memory: (c.memory || []).map((/** @type {any} */ m) => ({ role: m.role || '', content: m.content || '', score: Number(m.score) || 0 })),
    noMemory: c.noMemory === true,
    extraJson: c.extraJson || '',
  };
}

/**
 * The plain wire shape → the StageContext object handlers see (JSON fields parsed).
 * @param {any} w
 * @returns {import('./index').StageContextResult}
 */
function handlerContext(w) {
  return {
    rawMessage: w.rawMessage,
    userId: w.userId,
    groupId: w.groupId,
    contextMsgs: /** @type {any} */ (parse(w.contextMsgsJson, [])),
    llmText: w.llmText,
    reasoningContent: w.reasoningContent,
    tokenUsage: { ...w.tokenUsage },
    toolCalls: w.toolCalls.map((/** @type {any} */ t) => ({ id: t.id, name: t.name, plugin: t.plugin, arguments: parse(t.argumentsJson, {}), deny: t.deny, denyReason: t.denyReason })),
    toolResults: w.toolResults.map((/** @type {any} */ r) => ({ callId: r.callId, name: r.name, plugin: r.plugin, success: r.success, result: parse(r.resultJson, null) })),
    finalText: w.finalText,
    response: w.response,
    phase: stages.STAGES[w.phase - 1] || '',
    memory: w.memory.map((/** @type {any} */ m) => ({ ...m })),
    noMemory: w.noMemory,
    extra: /** @type {any} */ (parse(w.extraJson, {})),
  };
}

/**
 * A wire AiTool → the LinkZone `ai.tool` names it was declared with.
 * @param {any} a
 */
function aiToolInfo(a) {
  return {
    parameters: (a.parameters || []).map((/** @type {any} */ p) => {
      /** @type {Record<string, unknown>} */
      const out = { name: p.name, type: p.type || 'string', description: p.description || '', required: p.required === true };
      if (p.defaultJson) out.default = JSON.parse(p.defaultJson);
      if (p.enumJson) out.enum = JSON.parse(p.enumJson);
      if (p.example) out.example = p.example;
      return out;
    }),
    usage: a.usage || '',
    when_to_use: a.whenToUse || '',
    continue: a.continueConversation === true,
    chainable: a.chainable == null ? true : a.chainable === true,
    max_calls: a.maxCalls || 0,
    confirm: a.confirm === true,
    cooldown: a.cooldownS || 0,
    timeout: a.timeoutS || 0,
  };
}

/**
 * Builds one tool from its wire spec as the broker's registry does (registry.rs
 * `build`); throws an Error whose message is the rejection reason.
 * @param {string} plugin
 * @param {any} spec wire ToolSpec
 */
function buildTool(plugin, spec) {
  const bad = schema.toolNameProblem(spec.name || '');
  if (bad) throw new Error(bad);
  let parameters;
  let description = spec.description || '';
  const json = (spec.parametersJson || '').trim();
  if (spec.aiTool && !json) {
    parameters = schema.linkZoneSchema(spec.aiTool.parameters || []);
    if (!description) description = schema.linkZoneDescription(spec.aiTool.usage || '', spec.aiTool.whenToUse || '');
  } else if (!json) {
    parameters = { type: 'object', properties: {} };
  } else {
    try {
      parameters = JSON.parse(json);
    } catch (e) {
      throw new Error(`parameters is not valid JSON: ${/** @type {Error} */ (e).message}`);
    }
  }
  const problem = schema.checkToolSchema(parameters);
  if (problem) throw new Error(problem);
  return {
    name: spec.name,
    plugin,
    description,
    parameters,
    serial: spec.serial === true,
    aiTool: spec.aiTool ? aiToolInfo(spec.aiTool) : null,
  };
}

/**
 * Reads `plugin.json` beside an entry file, if there is one.
 * @param {string} file
 * @returns {any}
 */
function readManifest(file) {
  const p = path.join(path.dirname(file), 'plugin.json');
  let text;
  try {
    text = fs.readFileSync(p, 'utf8');
  } catch (_) {
    return null;
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new HarnessError('LOAD_FAILED', `${p}: not valid JSON: ${/** @type {Error} */ (e).message}`);
  }
}

/** One pending call, hook run or event on the session, by call id. */
class Pending {
  /**
   * @param {string} what named in errors ("tool weather", "stage hook on_input#0")
   * @param {(m: any) => void} onMessage
   * @param {(e: Error) => void} fail
   */
  constructor(what, onMessage, fail) {
    this.what = what;
    this.onMessage = onMessage;
    this.fail = fail;
  }
}

/**
 * The settings of a loaded plugin as the test sees them: this plugin's table (secrets in
 * clear), core and other plugins' tables. Reads and writes go straight to the fake
 * store (no capability checks: the test is the operator). As under the broker, a value
 * must fit the type of its key's def, if it has one (INVALID_ARGUMENT otherwise, with
 * the broker's message); options and min/max are not checked.
 */
class SettingsView {
  /** @param {PluginHarness} h */
  constructor(h) {
    this.h = h;
  }

  /** @returns {import('./host/settings').SettingsStore} */
  get store() { return this.h.host.settings; }

  /** The value of `key` in this plugin's table; throws HarnessError NOT_FOUND when unset. @param {string} key */
  get(key) { return this.store.get(this.h.name, key); }

  /** Whether `key` is set in this plugin's table. @param {string} key */
  has(key) { return this.store.list(this.h.name).includes(key); }

  /**
   * Sets `key` in this plugin's table; throws HarnessError INVALID_ARGUMENT (the
   * broker's message) when the value does not fit the type of the key's def.
   * @param {string} key
   * @param {import('../index').JsonValue} value
   */
  set(key, value) {
    this.store.set(this.h.name, key, value);
  }

  /** Keys of this plugin's table starting with `prefix`, sorted. @param {string} [prefix] */
  list(prefix = '') { return this.store.list(this.h.name, prefix); }

  /** This plugin's table as an object (secrets in clear). */
  all() {
    /** @type {Record<string, unknown>} */
    const out = {};
    for (const k of this.list()) out[k] = this.get(k);
    return out;
  }

  /** The defs this plugin registered (seed JSON names), sorted by key. @param {string} [prefix] */
  defs(prefix = '') { return this.store.defs(this.h.name, prefix); }

  /** Every setting, secrets masked: `{core, plugins}` (what Settings.Dump answers). */
  dump() { return this.store.dump(); }

  /** A core setting (in clear). @param {string} key */
  getCore(key) { return this.store.get(null, key); }

  /** @param {string} key @param {import('../index').JsonValue} value */
  setCore(key, value) { this.store.set(null, key, value); }

  /** Another plugin's setting (in clear). @param {string} plugin @param {string} key */
  getPlugin(plugin, key) { return this.store.get(plugin, key); }

  /** @param {string} plugin @param {string} key @param {import('../index').JsonValue} value */
  setPlugin(plugin, key, value) { this.store.set(plugin, key, value); }
}

class PluginHarness {
  /**
   * Use {@link load}.
   * @param {import('./index').LoadOptions} options
   */
  constructor(options) {
    this.options = options;
    /** The name the broker knows the plugin by. */
    this.name = '';
    /** @type {FakeHost} */
    this.host = options.host || new FakeHost({ llmSources: options.llmSources });
    /** @type {FakeBroker | null} */
    this.broker = null;
    /** The plugin object (in-process runs; null with `spawn`). @type {any} */
    this.plugin = null;
    /** Lines the plugin logged (SDK log lines; with `spawn`, all of its stderr). @type {string[]} */
    this.logs = [];
    /** @type {import('./index').RejectedItem[]} */
    this.rejected = [];
    /** @type {{name: string, version: string, author: string, description: string}} */
    this.info = { name: '', version: '', author: '', description: '' };
    /** The session's exit code once it ended, else null. @type {number | null} */
    this.exitCode = null;
    this.settings = new SettingsView(this);
    /** @type {Map<string, any>} */
    this.registry = new Map();
    /** @type {any[]} */
    this.hookList = [];
    /** @type {ReturnType<typeof triggers.compile>} */
    this.triggerSet = { triggers: [], inject: null, rejected: [] };
    /** @type {Map<string, Pending>} */
    this.pending = new Map();
    this.nextCall = 1;
    this.closed = false;
    this.registeredOnce = false;
    /** @type {import('./broker').PluginProcess | null} the plugin process (with `spawn`) */
    this.proc = null;
    /** @type {any} */
    this.session = null;
    /** @type {Promise<number>} */
    this.done = new Promise(() => {});
    this.sender = { ...DEFAULT_SENDER, ...(options.sender || {}) };
    this.callTimeoutMs = options.callTimeoutMs || CALL_TIMEOUT_MS;
  }

  /** The plugin's tools, sorted by name. @returns {import('./index').ToolInfo[]} */
  get tools() {
    return [...this.registry.values()].sort((a, b) => (a.name < b.name ? -1 : 1)).map((t) => ({ ...t }));
  }

  /** One tool, or undefined. @param {string} name */
  tool(name) {
    const t = this.registry.get(name);
    return t ? { ...t } : undefined;
  }

  /** The plugin's stage hooks, in registration order. @returns {import('./index').HookInfo[]} */
  get hooks() {
    return this.hookList.map((h) => ({ ...h }));
  }

  /** The plugin's triggers, in registration order. @returns {import('./index').TriggerInfo[]} */
  get triggers() {
    return this.triggerSet.triggers.map((t) => ({ type: t.trigger.type, pattern: t.trigger.pattern }));
  }

  /** The plugin's `ai.inject`, or null. @returns {import('./index').InjectInfo | null} */
  get inject() {
    const i = this.triggerSet.inject;
    return i ? { usage: i.usage, format: i.format, args: { ...i.args } } : null;
  }

  /** Graph memory of the fake host. */
  get memory() { return this.host.memory; }

  /** Text memory of the fake host (`.events`). */
  get textMemory() { return this.host.textMemory; }

  /** Documents of the fake host. */
  get docMemory() { return this.host.docMemory; }

  /** Knowledge of the fake host. */
  get knowledge() { return this.host.knowledge; }

  /** LLM sources of the fake host. */
  get llm() { return this.host.llm; }

  /** MCP servers of the fake host (canned resources and prompts). */
  get mcp() { return this.host.mcp; }

  /** Input the plugin injected, oldest first. */
  get injected() { return this.host.injected; }

  /** Every host-service call the plugin made, in order. */
  get hostCalls() { return /** @type {FakeBroker} */ (this.broker).hostCalls; }

  /**
   * Makes host-service `method` (`'settings.get'`, `'input.injectText'`, …) answer
   * `reply` from now on: a response object, a function of the request, or
   * `{code, details}` to fail with that gRPC status (`code` a number or a status name);
   * `undefined` restores the fake host's answer.
   * @param {string} method
   * @param {any} reply
   */
  override(method, reply) {
    const b = /** @type {FakeBroker} */ (this.broker);
    if (reply === undefined) {
      delete b.hostReplies[method];
      return;
    }
    const grpcStatus = require('@grpc/grpc-js').status;
    const fix = (/** @type {any} */ r) => (r && typeof r.code === 'string' && typeof (/** @type {any} */ (grpcStatus))[r.code] === 'number' ? { ...r, code: /** @type {any} */ (grpcStatus)[r.code] } : r);
    b.hostReplies[method] = typeof reply === 'function' ? (/** @type {any} */ req) => fix(reply(req)) : fix(reply);
  }

  /** The last lines of the plugin's log, for error messages. */
  logTail() {
    const tail = this.logs.slice(-5);
    return tail.length ? `; last log lines:\n  ${tail.join('\n  ')}` : '';
  }

  /**
   * Loads `target` and runs its session until it registered.
   * @param {string | object | Function} target
   */
  async start(target) {
    const o = this.options;
    let file = null;
    let manifest = null;
    if (typeof target === 'string') {
      file = path.resolve(target);
      if (!fs.existsSync(file)) throw new HarnessError('LOAD_FAILED', `cannot load ${file}: no such file`);
      manifest = readManifest(file);
    } else if (target == null || (typeof target !== 'object' && typeof target !== 'function')) {
      throw new HarnessError('LOAD_FAILED', `load() takes a plugin entry file, a plugin class or a plugin object; got ${target === null ? 'null' : typeof target}`);
    }
    const folderName = file ? path.basename(path.dirname(file)) : undefined;
    const brokerName = o.name || (manifest && typeof manifest.name === 'string' && manifest.name) || folderName;
    if (o.spawn && !file) throw new HarnessError('LOAD_FAILED', 'spawn: true needs a plugin entry file, not a class or object');

    if (!o.spawn) {
      const { loadModule, pluginFromExports, moduleNotFound } = require('../lib/load');
      let exported = target;
      if (file) {
        try {
          exported = await loadModule(file);
        } catch (e) {
          const missing = moduleNotFound(e, file);
          if (missing) throw new HarnessError('LOAD_FAILED', missing);
          throw e;
        }
      }
      try {
        this.plugin = await pluginFromExports(exported, file || o.file || '(testing)', { pluginName: brokerName });
      } catch (e) {
        throw new HarnessError('LOAD_FAILED', /** @type {Error} */ (e).message);
      }
    }
    this.name = brokerName || pluginLabel(this.plugin);

    const caps = o.capabilities || (manifest && Array.isArray(manifest.capabilities) ? manifest.capabilities : DEFAULT_CAPABILITIES);
    this.host.grant(this.name, caps);
    for (const [k, v] of Object.entries(o.settings || {})) this.host.settings.set(this.name, k, /** @type {any} */ (v));
    for (const [k, v] of Object.entries(o.coreSettings || {})) this.host.settings.set(null, k, /** @type {any} */ (v));
    for (const [p, table] of Object.entries(o.pluginSettings || {})) for (const [k, v] of Object.entries(table)) this.host.settings.set(p, k, /** @type {any} */ (v));
    if (!o.callTimeoutMs && manifest && manifest.call_timeout_s > 0) this.callTimeoutMs = manifest.call_timeout_s * 1000;
    const startupMs = o.startupTimeoutMs || (manifest && manifest.startup_timeout_s > 0 ? manifest.startup_timeout_s * 1000 : STARTUP_TIMEOUT_MS);

    this.broker = await FakeBroker.start({ host: this.host });
    const token = this.broker.tokenFor(this.name);
    const log = (/** @type {string} */ line) => {
      this.logs.push(line);
      if (o.echoLogs) process.stderr.write(`${line}\n`);
    };
    if (o.spawn) {
      const proc = this.broker.spawn(/** @type {string} */ (file), { name: this.name, token, env: o.env });
      proc.onStderrLine(log);
      this.proc = proc;
      this.done = proc.exited.then((r) => (r.code == null ? -1 : r.code));
    } else {
      const { serveInstance } = require('../lib/session');
      this.done = serveInstance(this.plugin, { addr: this.broker.addr, token, env: { ...(o.env || {}), HEARTH_PLUGIN: this.name }, exit: false, log });
    }
    this.done.then((code) => this.ended(code));

    /** @type {NodeJS.Timeout | undefined} */
    let timer;
    const startup = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new HarnessError('STARTUP_TIMEOUT', `plugin ${this.name} did not register within ${startupMs} ms (the broker would kill it)${this.logTail()}`)), startupMs);
    });
    const endedEarly = this.done.then((code) => {
      throw new HarnessError('SESSION_ENDED', `plugin ${this.name} ended its session (exit code ${code}) before it registered${this.logTail()}`, { exitCode: code });
    });
    try {
      await Promise.race([this.attach(), startup, endedEarly]);
    } finally {
      clearTimeout(timer);
      endedEarly.catch(() => {});
      startup.catch(() => {});
    }
    if (this.rejected.length && !o.allowRejected) {
      const items = this.rejected.map((r) => `${r.kind} ${r.name}: ${r.reason}`).join('; ');
      throw new HarnessError('REJECTED', `plugin ${this.name}: the broker would reject ${items}`, { rejected: this.rejected });
    }
  }

  /** Waits for the session, takes Hello and Register, answers as the broker. */
  async attach() {
    const b = /** @type {FakeBroker} */ (this.broker);
    this.session = await b.nextSession(Infinity);
    // When the plugin half-closes (after Shutdown), close the broker's side too: the
    // plugin's session then ends at once instead of waiting for the stream's status.
    this.session.whenEnded().then(() => { try { this.session.end(); } catch (_) { /* already closed */ } });
    /** @type {(v?: unknown) => void} */
    let registered = () => {};
    /** @type {(e: Error) => void} */
    let refused = () => {};
    const outcome = new Promise((resolve, reject) => { registered = resolve; refused = reject; });
    let hello = null;
    this.session.onMessage((/** @type {any} */ m) => {
      if (!hello) {
        if (m.msg !== 'hello') return refused(new HarnessError('PROTOCOL', `plugin ${this.name}: the first message must be Hello, got ${m.msg}`));
        hello = m.hello;
        const major = String(hello.protocolVersion).split('.')[0];
        if (major !== PROTOCOL_VERSION.split('.')[0]) {
          const reason = `protocol version \`${hello.protocolVersion}\` is not supported; this broker speaks ${PROTOCOL_VERSION}`;
          this.session.send({ rejected: { reason, items: [] } });
          this.session.end();
          return refused(new HarnessError('REJECTED', `plugin ${this.name}: ${reason}`, { rejected: [] }));
        }
        return undefined;
      }
      if (m.msg === 'register' && !this.registeredOnce) {
        this.registeredOnce = true;
        try {
          this.register(m.register, hello);
          registered();
        } catch (e) {
          refused(/** @type {Error} */ (e));
        }
        return undefined;
      }
      return this.onMessage(m);
    });
    await outcome;
  }

  /**
   * Takes a Register as the broker's registry does and answers Registered (or Rejected
   * for an all-or-nothing registration with rejected items).
   * @param {any} reg
   * @param {any} hello
   */
  register(reg, hello) {
    const plugin = reg.plugin || {};
    this.info = { name: plugin.name || '', version: plugin.version || '', author: plugin.author || '', description: plugin.description || '' };
    /** @type {import('./index').RejectedItem[]} */
    const rejected = [];
    for (const spec of reg.tools || []) {
      let tool;
      try {
        tool = buildTool(this.name, spec);
      } catch (e) {
        rejected.push({ kind: 'tool', name: spec.name, reason: /** @type {Error} */ (e).message });
        continue;
      }
      if (this.registry.has(tool.name)) {
        rejected.push({ kind: 'tool', name: tool.name, reason: `plugin ${this.name} registers tool \`${tool.name}\` twice` });
        continue;
      }
      this.registry.set(tool.name, tool);
    }
    for (const h of reg.stages || []) {
      const reject = (/** @type {string} */ reason) => rejected.push({ kind: 'stage', name: h.hookId, reason });
      if (!(h.stage >= 1 && h.stage <= 7)) { reject(`hook \`${h.hookId}\`: unknown stage ${h.stage}`); continue; }
      if (!h.hookId) { reject(`a ${stages.STAGES[h.stage - 1]} hook has an empty hook_id`); continue; }
      if (this.hookList.some((x) => x.hookId === h.hookId)) { reject(`hook_id \`${h.hookId}\` is used twice`); continue; }
      this.hookList.push({ stage: stages.STAGES[h.stage - 1], hookId: h.hookId, ownToolsOnly: h.ownToolsOnly === true, contextMsgs: h.noContextMsgs !== true });
    }
    const inject = reg.inject ? { usage: reg.inject.usage || '', format: reg.inject.format || '', args: { ...(reg.inject.args || {}) } } : null;
    this.triggerSet = triggers.compile((reg.triggers || []).map((/** @type {any} */ t) => ({ type: t.type, pattern: t.pattern })), inject);
    rejected.push(...this.triggerSet.rejected);
    for (const d of reg.configDefs || []) {
      try {
        this.host.settings.registerDef(this.name, defFromWire(d, 'Register'));
      } catch (e) {
        rejected.push({ kind: 'config_def', name: d.key, reason: /** @type {Error} */ (e).message });
      }
    }
    this.rejected = rejected;
    if (reg.allOrNothing && rejected.length) {
      const reason = `${rejected.length} ${rejected.length === 1 ? 'item' : 'items'} rejected and the plugin asked for all-or-nothing`;
      this.session.send({ rejected: { reason, items: rejected } });
      this.session.end();
      throw new HarnessError('REJECTED', `plugin ${this.name}: ${reason}: ${rejected.map((r) => `${r.kind} ${r.name}: ${r.reason}`).join('; ')}`, { rejected });
    }
    const features = FEATURES.filter((f) => (hello.features || []).includes(f));
    this.session.send({ registered: { plugin: this.name, tools: [...this.registry.keys()], rejected, protocolVersion: PROTOCOL_VERSION, features } });
  }

  /** Routes a message of the established session. @param {any} m */
  onMessage(m) {
    const kind = m.msg;
    const body = m[kind];
    switch (kind) {
      case 'toolResult': case 'progress': case 'reply': case 'eventDone': case 'stageResult': {
        const p = this.pending.get(String(body.callId));
        if (p) p.onMessage(m);
        return;
      }
      case 'registerTool': {
        const spec = body.tool;
        const name = spec ? spec.name : '';
        let error = '';
        try {
          if (!spec) throw new Error('RegisterTool without a tool');
          const tool = buildTool(this.name, spec);
          if (this.registry.has(tool.name)) throw new Error(`tool \`${tool.name}\` is already registered by plugin ${this.name}`);
          this.registry.set(tool.name, tool);
        } catch (e) {
          error = /** @type {Error} */ (e).message;
        }
        this.session.send({ toolRegistration: { requestId: body.requestId, name, ok: !error, error } });
        return;
      }
      case 'unregisterTool': {
        const ok = this.registry.delete(body.name);
        this.session.send({ toolRegistration: { requestId: body.requestId, name: body.name, ok, error: ok ? '' : `tool \`${body.name}\` is not registered` } });
        return;
      }
      default:
    }
  }

  /** The session ended (exit code): fails whatever is pending. @param {number} code */
  ended(code) {
    this.exitCode = code;
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      p.fail(new HarnessError('SESSION_ENDED', `plugin ${this.name} ended its session (exit code ${code}) during ${p.what}${this.logTail()}`, { exitCode: code }));
    }
  }

  /**
   * Sends one call-like message and settles with what `onMessage` resolves to; a timer
   * cancels it after `timeoutMs` (reset by `touch()`), `signal` cancels it at once.
   * @template T
   * @param {string} what
   * @param {(callId: number) => object} message
   * @param {number} timeoutMs
   * @param {AbortSignal | undefined} signal
   * @param {(m: any, settle: (v: T) => void, touch: () => void) => void} onMessage
   * @param {() => T} [onTimeout] settle with this instead of failing (stage hooks)
   * @returns {Promise<T>}
   */
  exchange(what, message, timeoutMs, signal, onMessage, onTimeout) {
    if (this.closed) return Promise.reject(new HarnessError('CLOSED', `plugin ${this.name}: the harness is closed`));
    if (this.exitCode !== null) return Promise.reject(new HarnessError('SESSION_ENDED', `plugin ${this.name} ended its session (exit code ${this.exitCode}) before ${what}${this.logTail()}`, { exitCode: this.exitCode }));
    const callId = this.nextCall++;
    const key = String(callId);
    return new Promise((resolve, reject) => {
      /** @type {NodeJS.Timeout | undefined} */
      let timer;
      const finish = () => {
        clearTimeout(timer);
        this.pending.delete(key);
        if (signal) signal.removeEventListener('abort', onAbort);
      };
      const cancel = (/** @type {string} */ reason) => this.session.send({ cancel: { callId, reason } });
      const touch = () => {
        clearTimeout(timer);
        timer = setTimeout(() => {
          finish();
          cancel(`timed out after ${timeoutMs} ms`);
          if (onTimeout) resolve(onTimeout());
          else reject(new HarnessError('TIMEOUT', `plugin ${this.name}: ${what} (call ${callId}) timed out after ${timeoutMs} ms`, { timeoutMs }));
        }, timeoutMs);
      };
      const onAbort = () => {
        finish();
        cancel('the caller went away');
        reject(signal && signal.reason !== undefined ? signal.reason : new HarnessError('ABORTED', `plugin ${this.name}: ${what} aborted`));
      };
      if (signal && signal.aborted) return onAbort();
      if (signal) signal.addEventListener('abort', onAbort, { once: true });
      this.pending.set(key, new Pending(what, (m) => onMessage(m, (v) => { finish(); resolve(v); }, touch), (e) => { finish(); reject(e); }));
      touch();
      this.session.send(message(callId));
      return undefined;
    });
  }

  /**
   * Calls tool `name` as the broker does: arguments checked against its JSON Schema
   * first (a violation throws InvalidArgumentsError and the plugin is not called).
   * @param {string} name
   * @param {unknown} [args]
   * @param {import('./index').CallOptions} [opts]
   * @returns {Promise<import('./index').ToolCallResult>}
   */
  async call(name, args = {}, opts = {}) {
    const tool = this.registry.get(name);
    if (!tool) {
      const known = [...this.registry.keys()].sort();
      throw new HarnessError('UNKNOWN_TOOL', `plugin ${this.name}: unknown tool \`${name}\` (its tools: ${known.length ? known.join(', ') : 'none'})`, { tool: name });
    }
    const text = JSON.stringify(args);
    const value = text === undefined ? undefined : JSON.parse(text);
    if (!schema.isObject(value)) throw new InvalidArgumentsError(this.name, name, '', `arguments must be a JSON object, got ${text}`);
    const violation = schema.firstViolation(tool.parameters, value);
    if (violation) throw new InvalidArgumentsError(this.name, name, violation.path.join('.'), schema.violationText(violation));
    const timeoutMs = opts.timeoutMs || (tool.aiTool && tool.aiTool.timeout > 0 ? tool.aiTool.timeout * 1000 : this.callTimeoutMs);
    const sender = { ...this.sender, ...(opts.sender || {}) };
    /** @type {Array<{message: string, fraction: number | null, progress: number, total: number}>} */
    const progress = [];
    const traced = traceOf(opts);
    return this.exchange(`tool ${name}`, (callId) => ({ invokeTool: { callId, tool: name, argsJson: text, sender, timeoutMs, ...traced } }), timeoutMs, opts.signal, (m, settle, touch) => {
      if (m.msg === 'progress') {
        const p = m.progress;
        progress.push({ message: p.message, fraction: p.fraction < 0 ? null : p.fraction, progress: p.progress || 0, total: p.total || 0 });
        touch();
      } else if (m.msg === 'toolResult') {
        const r = m.toolResult;
        settle({ success: r.success === true, content: r.content || '', data: r.dataJson ? parse(r.dataJson, null) : null, error: r.error || '', progress });
      }
    });
  }

  /**
   * Delivers a message to the plugin's `handleEvent` as the broker does after a trigger
   * matched it, and collects its `sender.reply` texts.
   * @param {string} message
   * @param {import('./index').EventOptions} [opts]
   * @returns {Promise<import('./index').EventResult>}
   */
  async event(message, opts = {}) {
    const compiled = this.triggerSet.triggers;
    let match;
    if (opts.params) {
      match = { trigger: opts.trigger || (compiled[0] ? compiled[0].trigger : { type: 0, pattern: '' }), params: opts.params.map(String) };
    } else if (opts.event) {
      match = triggers.matchEvent(compiled, opts.event, message);
      if (!match) throw new HarnessError('NO_TRIGGER', `plugin ${this.name}: no event trigger for \`${opts.event}\` (triggers: ${compiled.map((t) => triggers.describeTrigger(t.trigger)).join(', ') || 'none'})`);
    } else {
      match = triggers.matchMessage(compiled, message);
      if (!match) throw new HarnessError('NO_TRIGGER', `plugin ${this.name}: no trigger matches ${JSON.stringify(message)} (triggers: ${compiled.map((t) => triggers.describeTrigger(t.trigger)).join(', ') || 'none'})`);
    }
    const m = match;
    const sender = { ...this.sender, ...(opts.sender || {}) };
    const timeoutMs = opts.timeoutMs || this.callTimeoutMs;
    /** @type {string[]} */
    const replies = [];
    return this.exchange(`event handler of \`${m.trigger.pattern}\``, (callId) => ({ handleEvent: { callId, message, params: m.params, sender, trigger: m.trigger, timeoutMs, ...traceOf(opts) } }), timeoutMs, opts.signal, (msg, settle) => {
      if (msg.msg === 'reply') replies.push(msg.reply.text);
      else if (msg.msg === 'eventDone') settle({ replies, error: msg.eventDone.error || '', params: [...m.params], trigger: { type: m.trigger.type, pattern: m.trigger.pattern } });
    });
  }

  /**
   * Runs the plugin's hooks of `stage` on `context` as the broker's pipeline does: in
   * registration order, each receiving what its stage may see and each one's writes
   * kept or dropped by the permission matrix; stops at a hook that sets `response`
   * (before_toolcall: or denies a call). after_output hooks run concurrently and
   * change nothing.
   * @param {string | number} stage
   * @param {import('./index').StageContextInput} [context]
   * @param {import('./index').StageOptions} [opts]
   * @returns {Promise<import('./index').StageRun>}
   */
  async runStage(stage, context = {}, opts = {}) {
    let n;
    try {
      n = stages.stageNumber(stage, this.name);
    } catch (e) {
      throw new HarnessError('UNKNOWN_STAGE', /** @type {Error} */ (e).message);
    }
    const name = stages.STAGES[n - 1];
    const current = wireContext(stages.toWire({ ...context, phase: name }), n);
    const toolcall = n === permissions.BEFORE_TOOLCALL || n === permissions.AFTER_TOOLCALL;
    const owner = opts.toolOwner !== undefined ? opts.toolOwner : this.toolOwner(current, n);
    const hooks = this.hookList.filter((h) => h.stage === name && !(toolcall && h.ownToolsOnly && owner !== this.name));
    const timeoutMs = opts.timeoutMs || HOOK_TIMEOUT_MS;
    /** @type {import('./index').StageRun} */
    const run = { stage: name, context: handlerContext(current), ran: [], dropped: [], errors: [], shortCircuit: null };
    const callHook = (/** @type {any} */ h, /** @type {any} */ sent) => this.exchange(`stage hook ${h.hookId}`, (callId) => ({ runStage: { callId, stage: n, hookId: h.hookId, context: sent, timeoutMs, ...traceOf(opts) } }), timeoutMs, opts.signal,
      (/** @type {any} */ m, /** @type {(v: any) => void} */ settle) => { if (m.msg === 'stageResult') settle(m.stageResult); },
      () => ({ error: `timed out after ${timeoutMs} ms`, context: null }));
    /** @param {any} h @param {any} r @param {any} seen */
    const take = (h, r, seen) => {
      run.ran.push(h.hookId);
      if (r.error) {
        run.errors.push({ hookId: h.hookId, error: r.error });
        return false;
      }
      if (!r.context) {
        run.errors.push({ hookId: h.hookId, error: 'hook answered no context' });
        return false;
      }
      const answer = wireContext(r.context, n);
      const visible = permissions.visibleOf(n, h.contextMsgs);
      for (const field of permissions.apply(n, visible, seen, answer)) run.dropped.push({ hookId: h.hookId, field });
      return true;
    };
    if (n === permissions.AFTER_OUTPUT) {
      const sent = permissions.view(n, current, permissions.visibleOf(n, true));
      const results = await Promise.all(hooks.map((h) => callHook(h, sent)));
      hooks.forEach((h, i) => take(h, results[i], permissions.view(n, current, permissions.visibleOf(n, true))));
      return run;
    }
    for (const h of hooks) {
      const visible = permissions.visibleOf(n, h.contextMsgs);
      const r = await callHook(h, permissions.view(n, current, visible));
      if (!take(h, r, current)) continue;
      if (current.response !== null || (n === permissions.BEFORE_TOOLCALL && current.toolCalls.some((/** @type {any} */ c) => c.deny))) {
        run.shortCircuit = { hookId: h.hookId };
        break;
      }
    }
    run.context = handlerContext(current);
    return run;
  }

  /**
   * The plugin owning the tool of a tool-call stage: the call's `plugin`, else this
   * plugin when it has a tool of that name.
   * @param {any} ctx
   * @param {number} n
   */
  toolOwner(ctx, n) {
    const item = n === permissions.BEFORE_TOOLCALL ? ctx.toolCalls[0] : n === permissions.AFTER_TOOLCALL ? ctx.toolResults[0] : null;
    if (!item) return null;
    if (item.plugin) return item.plugin;
    return this.registry.has(item.name) ? this.name : null;
  }

  /**
   * Stops the plugin as the broker does (Shutdown, then its grace period; a spawned
   * process is killed after it), then the fake broker. Safe to call twice.
   * @returns {Promise<void>}
   */
  async close() {
    if (this.closed) return;
    this.closed = true;
    if (this.session && this.exitCode === null) {
      this.session.send({ shutdown: { graceMs: SHUTDOWN_GRACE_MS, reason: 'test finished' } });
      if (this.proc) {
        const kill = setTimeout(() => this.proc.proc.kill('SIGKILL'), SHUTDOWN_GRACE_MS + 1000);
        await this.done;
        clearTimeout(kill);
      } else {
        await this.done;
      }
    } else if (!this.session && this.exitCode === null && !this.proc && this.broker) {
      // Never attached (load failed): the in-process session ends when its stream fails.
      this.broker.server.forceShutdown();
      await this.done;
    }
    if (this.broker) await this.broker.close();
  }
}

if (typeof Symbol.asyncDispose === 'symbol') {
  /** `await using t = await load(...)` closes it at the end of the block. */
  /** @type {any} */ (PluginHarness.prototype)[Symbol.asyncDispose] = function dispose() { return this.close(); };
}

/**
 * Loads a plugin and runs its session against an in-process fake broker until it has
 * registered. See README "Testing".
 * @param {string | object | Function} target a plugin entry file, or a plugin class or object of either style
 * @param {import('./index').LoadOptions} [options]
 * @returns {Promise<PluginHarness>}
 */
async function load(target, options = {}) {
  const h = new PluginHarness(options);
  try {
    await h.start(target);
  } catch (e) {
    await h.close().catch(() => {});
    throw e;
  }
  return h;
}

module.exports = { load, PluginHarness, SettingsView, buildTool, wireContext, handlerContext, DEFAULT_SENDER };
