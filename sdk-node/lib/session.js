'use strict';

/**
 * The plugin session (proto/README.md): dial HEARTH_ADDR, open PluginHost/Attach with
 * `x-hearth-token`, send Hello then Register, then serve InvokeTool / HandleEvent /
 * Cancel / Ping / Shutdown concurrently until the stream ends.
 *
 * Exit codes (what `serve()` resolves with and the runner exits with):
 * 0 = Shutdown handled or the broker closed the stream cleanly; 1 = connection/stream
 * failure or the plugin's start() threw; 2 = bad configuration or declaration
 * (HEARTH_ADDR missing, HEARTH_TOKEN_FD unreadable, invalid metadata); 3 = the broker
 * sent Rejected.
 */

const grpc = require('@grpc/grpc-js');
const { hearth } = require('../gen/hearth');
const { Plugin, pluginLabel } = require('./plugin');
const spec = require('./spec');
const results = require('./results');
const stages = require('./stages');
const trace = require('./trace');
const { resolveToken } = require('./token');
const { version: SDK_VERSION } = require('../package.json');

const v1 = hearth.v1;
const PROTOCOL_VERSION = '1.0.0';
const SDK_NAME = 'hearth-plugin-node';
const FEATURES = ['cancel', 'progress', 'trace', 'batch'];
const MAX_MESSAGE = 64 * 1024 * 1024;
// A PluginBatch holds at most this many messages and bytes (the broker's HostBatch
// limits); a larger message goes alone.
const BATCH_MSGS = 64;
const BATCH_BYTES = 256 * 1024;
const ATTACH_PATH = '/hearth.v1.PluginHost/Attach';
const EXIT = Object.freeze({ OK: 0, FAILED: 1, CONFIG: 2, REJECTED: 3 });

/**
 * The Progress fields of `ctx.progress(message, how)`: `how` is a fraction (0..1;
 * negative or absent when unknown) or `{progress, total, fraction}` counts ("3 of 10":
 * `{progress: 3, total: 10}`; the fraction is derived from them unless given).
 * @param {number | {fraction?: number, progress?: number, total?: number} | null | undefined} how
 * @returns {{fraction: number, progress: number, total: number}}
 */
function progressFields(how) {
  if (how == null) return { fraction: -1, progress: 0, total: 0 };
  if (typeof how !== 'object') return { fraction: Number(how), progress: 0, total: 0 };
  const count = (/** @type {unknown} */ v, /** @type {string} */ name) => {
    if (v == null) return 0;
    const n = Number(v);
    if (!Number.isFinite(n)) throw new TypeError(`ctx.progress(): ${name} must be a finite number, got ${String(v)}`);
    return n;
  };
  const progress = count(how.progress, 'progress');
  const total = count(how.total, 'total');
  let fraction = -1;
  if (how.fraction != null) fraction = Number(how.fraction);
  else if (total > 0 && how.progress != null) fraction = Math.min(Math.max(progress / total, 0), 1);
  return { fraction, progress, total };
}

/**
 * A PluginMessage's bytes, without a copy.
 * @param {object} m PluginMessage fields
 * @returns {Buffer}
 */
function encodeMessage(m) {
  const u = v1.PluginMessage.encode(m).finish();
  return Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength);
}

/** @param {number} n @returns {number} bytes of `n` as a protobuf varint */
function varintLength(n) {
  let len = 1;
  while (n >= 0x80) { n = Math.floor(n / 128); len += 1; }
  return len;
}

/** @param {Buffer} out @param {number} at @param {number} n @returns {number} the offset after it */
function writeVarint(out, at, n) {
  while (n >= 0x80) { out[at++] = (n % 128) | 0x80; n = Math.floor(n / 128); }
  out[at++] = n;
  return at;
}

/**
 * `PluginMessage{batch: PluginBatch{msgs}}` from already encoded PluginMessages, framed
 * by hand (field 11 and field 1, both length-delimited) so nothing is encoded twice.
 * @param {Buffer[]} msgs
 * @returns {Buffer}
 */
function batchMessage(msgs) {
  let inner = 0;
  for (const b of msgs) inner += 1 + varintLength(b.length) + b.length;
  const out = Buffer.allocUnsafe(1 + varintLength(inner) + inner);
  out[0] = (11 << 3) | 2;
  let at = writeVarint(out, 1, inner);
  for (const b of msgs) {
    out[at++] = (1 << 3) | 2;
    at = writeVarint(out, at, b.length);
    at += b.copy(out, at);
  }
  return out;
}

/**
 * HEARTH_ADDR → a grpc-js target: `unix:///abs` and `unix:/abs` as is,
 * `http://host:port` → `host:port`, a bare `host:port` as is.
 * @param {string} addr
 * @returns {string}
 */
function grpcTarget(addr) {
  if (addr.startsWith('unix:')) return addr;
  const m = /^http:\/\/([^/]+)\/?$/.exec(addr);
  if (m) return m[1];
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(addr)) throw new spec.DeclarationError(`HEARTH_ADDR ${addr}: unsupported scheme (expected unix:///path or http://127.0.0.1:PORT)`);
  return addr;
}

/**
 * Wire `Sender` → the object handlers receive.
 * @param {any} s
 * @returns {import('../index').Sender}
 */
function toSender(s) {
  return {
    userId: (s && s.userId) || '',
    groupId: (s && s.groupId) || '',
    channel: (s && s.channel) || '',
    sessionId: (s && s.sessionId) || '',
  };
}

/**
 * A test hook of the plugin (`hearthProtocolVersion`, `hearthAfterHello`): an instance
 * property, else a static property of its class; undefined on real plugins.
 * @param {any} inst
 * @param {string} key
 */
function testHook(inst, key) {
  if (inst[key] != null) return inst[key];
  const cls = inst.constructor;
  return cls && cls !== Object && cls[key] != null ? cls[key] : undefined;
}

const kSession = Symbol('session');
const kState = Symbol('state');

/**
 * Whether a call, event or stage hook was aborted (Cancel, shutdown), and its
 * AbortSignal — made on first use: an AbortController is most of what starting a
 * call costs (measured: a quarter of the SDK's CPU per call), and most handlers never
 * look at the signal.
 */
class CallState {
  constructor() {
    /** @type {AbortController | null} */
    this.controller = null;
    this.aborted = false;
    /** @type {unknown} */
    this.reason = undefined;
  }

  /** @returns {AbortSignal} aborted already when the call was */
  get signal() {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /** @param {unknown} reason */
  abort(reason) {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    if (this.controller) this.controller.abort(reason);
  }
}

/**
 * The `ctx` a tool handler gets (index.d.ts `CallContext`). `host` and `signal` are
 * getters on the prototype, not on each object: an object literal with a getter costs
 * V8 an accessor pair in old space per call, and with thousands of calls a second that
 * kept V8 in incremental marking (measured: one GC task wake-up every 7 calls).
 */
class CallContext {
  /**
   * @param {Session} session
   * @param {CallState} state
   * @param {string} callId
   * @param {any} inv InvokeTool
   * @param {import('../index').Sender} sender
   * @param {(message: string, how?: any) => void} progress
   */
  constructor(session, state, callId, inv, sender, progress) {
    const t = trace.traceFields(inv);
    this.callId = callId;
    this.tool = inv.tool;
    this.sender = sender;
    this.timeoutMs = inv.timeoutMs;
    this.traceparent = t.traceparent;
    this.tracestate = t.tracestate;
    this.otelContext = t.otelContext;
    this.progress = progress;
    this[kSession] = session;
    this[kState] = state;
  }

  /** Aborted when the broker cancels the call (timeout, caller gone) or shuts down. */
  get signal() { return this[kState].signal; }

  /** Host-service clients, created on first use. */
  get host() { return this[kSession].host; }
}

/** A registered tool: its wire spec and how to run and map one call. */
class ToolEntry {
  /**
   * @param {object} wire ToolSpec fields
   * @param {(args: any, sender: any, ctx: any) => any} invoke
   * @param {(v: unknown) => any} map result mapping of the style
   */
  constructor(wire, invoke, map) {
    this.wire = wire;
    this.invoke = invoke;
    this.map = map;
  }
}

class Session {
  /**
   * @param {any} instance the plugin object
   * @param {import('../index').ServeOptions} opts
   */
  constructor(instance, opts) {
    this.instance = instance;
    this.opts = opts;
    this.env = opts.env || process.env;
    this.debug = !!this.env.HEARTH_SDK_DEBUG;
    // The plugin's own name (metadata.name, name()), else HEARTH_PLUGIN, else its class.
    this.name = pluginLabel(instance, this.env.HEARTH_PLUGIN);
    /** @type {Map<string, ToolEntry>} */
    this.tools = new Map();
    /** @type {object[]} ConfigDefs declared in start() */
    this.configDefs = [];
    /** @type {Map<string, {wire: object, handler: Function}>} stage hooks by hook id */
    this.stageHooks = new Map();
    /** @type {Map<string, CallState>} in-flight calls, events and stage hooks by call id text */
    this.inflight = new Map();
    /** @type {Map<string, {resolve: Function, reject: Function, name: string, kind: string}>} */
    this.pendingRegs = new Map();
    /** @type {Array<{name: string, resolve: Function, reject: Function}>} registrations waiting for Registered */
    this.initialRegs = [];
    this.registered = false;
    this.registerSent = false;
    this.shuttingDown = false;
    this.stopped = false;
    this.finished = false;
    this.queue = [];
    this.blocked = false;
    // Both sides agreed on "batch" (Registered.features): calls' results that finish
    // while others still run wait in `finals` until the end of this turn of the event
    // loop and go out together in one PluginBatch.
    this.batching = false;
    /** @type {Buffer[]} */
    this.finals = [];
    this.finalBytes = 0;
    this.finalsScheduled = false;
    this.endWhenFlushed = false;
    this.nextRequest = 1;
    /** @type {Array<() => void> | null} broker events held while hearthAfterHello runs */
    this.held = null;
    /** @type {(code: number) => void} */
    this.resolveRun = () => {};
  }

  /** @param {...unknown} args */
  log(...args) {
    const line = `hearth-plugin: plugin ${this.name}: ${args.map(String).join(' ')}`;
    if (this.opts.log) this.opts.log(line);
    else process.stderr.write(`${line}\n`);
  }

  /**
   * Runs the session to its end.
   * @returns {Promise<number>} exit code
   */
  run() {
    const done = new Promise((resolve) => { this.resolveRun = resolve; });
    const addr = this.opts.addr || this.env.HEARTH_ADDR;
    if (!addr) {
      this.log('HEARTH_ADDR is not set (the broker sets HEARTH_ADDR and HEARTH_PLUGIN and passes the token in HEARTH_TOKEN_FD; for a manual run set HEARTH_ADDR, HEARTH_PLUGIN and HEARTH_TOKEN yourself)');
      return Promise.resolve(EXIT.CONFIG);
    }
    let target;
    try {
      target = grpcTarget(addr);
    } catch (e) {
      this.log(/** @type {Error} */ (e).message);
      return Promise.resolve(EXIT.CONFIG);
    }
    let token;
    try {
      token = resolveToken(this.opts, this.env);
    } catch (e) {
      this.log(/** @type {Error} */ (e).message);
      return Promise.resolve(EXIT.CONFIG);
    }
    this.client = new grpc.Client(target, grpc.credentials.createInsecure(), {
      'grpc.max_send_message_length': MAX_MESSAGE,
      'grpc.max_receive_message_length': MAX_MESSAGE,
    });
    this.token = token;
    const md = new grpc.Metadata();
    md.set('x-hearth-token', token);
    this.call = this.client.makeBidiStreamRequest(
      ATTACH_PATH,
      (m) => (Buffer.isBuffer(m) ? m : encodeMessage(m)),
      (b) => v1.HostMessage.decode(b),
      md,
    );
    // While a hearthAfterHello test hook runs, broker messages and the end of the stream
    // wait in `held` (nothing is read, so pings go unanswered); normally `held` is null.
    this.call.on('data', (m) => (this.held ? this.held.push(() => this.onMessage(m)) : this.onMessage(m)));
    this.call.on('error', (err) => {
      // 'status' follows with the same information; keep 'error' from being unhandled.
      if (!this.shuttingDown) this.log(`session stream failed: ${grpc.status[err.code] || err.code}: ${err.details || err.message}`);
    });
    const onStatus = (/** @type {grpc.StatusObject} */ st) => {
      const ok = st.code === grpc.status.OK || this.shuttingDown;
      if (st.code === grpc.status.OK && !this.shuttingDown && !this.finished) this.log('broker closed the session; exiting');
      this.finish(ok ? EXIT.OK : EXIT.FAILED);
    };
    this.call.on('status', (st) => (this.held ? this.held.push(() => onStatus(st)) : onStatus(st)));
    this.call.on('drain', () => this.flush());

    // Test hooks (README "Test hooks"); unset on real plugins, which take the normal path.
    const protocolVersion = testHook(this.instance, 'hearthProtocolVersion') || PROTOCOL_VERSION;
    const afterHello = testHook(this.instance, 'hearthAfterHello');
    const hello = { hello: { protocolVersion, sdk: SDK_NAME, sdkVersion: SDK_VERSION, features: FEATURES, pid: process.pid } };
    if (afterHello == null) {
      this.send(hello);
      this.startRegister();
    } else {
      this.held = [];
      this.runAfterHello(hello, afterHello);
    }
    return done;
  }

  /** Collects the tools and sends Register; a failure ends the session (exit 2 or 1). */
  startRegister() {
    this.register().catch((e) => {
      const code = e instanceof spec.DeclarationError ? EXIT.CONFIG : EXIT.FAILED;
      this.log(e instanceof spec.DeclarationError ? e.message : `start failed: ${results.errorText(e)}`);
      this.finish(code);
    });
  }

  /**
   * The `hearthAfterHello` test hook: writes Hello, waits until it is on the wire, runs the
   * hook, then registers (hook returned nothing) or ends the session with the exit code it
   * returned, without Register. Broker messages are held until then.
   * @param {object} hello
   * @param {Function} hook
   */
  async runAfterHello(hello, hook) {
    await new Promise((resolve) => {
      const timer = setTimeout(() => { this.log('Hello not written within 10 s; running hearthAfterHello anyway'); resolve(undefined); }, 10000);
      if (!this.call.write(hello, () => { clearTimeout(timer); resolve(undefined); })) this.blocked = true;
    });
    let code;
    try {
      code = await hook.call(this.instance);
    } catch (e) {
      this.log(`hearthAfterHello failed: ${results.errorText(e)}`);
      code = EXIT.FAILED;
    }
    if (code != null && !Number.isInteger(code)) {
      this.log(`hearthAfterHello returned ${String(code)}; expected undefined or an exit code`);
      code = EXIT.FAILED;
    }
    if (code != null) {
      this.log(`hearthAfterHello ended the session before Register (exit code ${code})`);
      // Half-close, and give Hello and the end of the stream 200 ms to reach the broker.
      this.endStream();
      await new Promise((resolve) => { this.call.once('status', resolve); setTimeout(resolve, 200); });
      this.finish(code);
      return;
    }
    const held = this.held || [];
    this.held = null;
    this.startRegister();
    for (const f of held) f();
  }

  /** Collects tools (LinkZone metadata, then HomeAgent start(sdk)) and sends Register. */
  async register() {
    const inst = this.instance;
    const md = spec.linkZoneMetadata(inst);
    /** @type {any} */
    const reg = { plugin: { name: this.name }, tools: [], triggers: [] };
    if (md) {
      for (const k of ['version', 'author', 'description']) if (typeof md[k] === 'string') reg.plugin[k] = md[k];
      const ai = md.ai || {};
      if (ai.tool) {
        const wire = { name: this.name, description: '', parametersJson: '', aiTool: spec.aiTool(ai.tool, this.name) };
        this.tools.set(this.name, new ToolEntry(wire, (args, sender, ctx) => inst.executeTool(sender, args, ctx), results.fromLinkZone));
      }
      if (ai.inject) reg.inject = spec.injectSpec(ai.inject, this.name);
      reg.triggers = spec.triggerSpecs(md.triggers, this.name);
    }
    // The main file's `@ai-trigger-*` header comments (read by lib/load.js), unless
    // metadata has ai.inject.
    const headerInject = require('./header').injectOf(inst);
    if (!reg.inject && headerInject) reg.inject = spec.injectSpec(headerInject, this.name);
    if (typeof inst.start === 'function' && inst.start !== Plugin.prototype.start) {
      await inst.start(this.sdk());
    }
    reg.tools = [...this.tools.values()].map((t) => t.wire);
    reg.stages = [...this.stageHooks.values()].map((h) => h.wire);
    reg.configDefs = this.configDefs;
    this.registerSent = true;
    this.send({ register: reg });
  }

  /** Host-service clients, created on first use. */
  get host() {
    if (!this.hostApi) this.hostApi = require('./host').createHost(this.client, this.token, this.name);
    return this.hostApi;
  }

  /**
   * The HomeAgent-style SDK object given to `start(sdk)`.
   * @returns {import('../index').HomeAgentSdk}
   */
  sdk() {
    const session = this;
    const inject = (/** @type {string} */ method) => (
      /** @type {string} */ channel,
      /** @type {string} */ text,
      /** @type {{userId?: string, groupId?: string, priority?: string | number}} */ opts = {},
    ) => {
      const o = opts || {};
      const priority = method === 'injectInterruptText' ? 0 : stages.priorityNumber(o.priority, session.name);
      return session.host.input[method]({
        source: session.name, channel, text, userId: String(o.userId || ''), groupId: String(o.groupId || ''), priority,
      }).then(() => undefined);
    };
    const apis = require('./apis').createApis(() => session.host, session);
    return {
      pluginName: this.name,
      get host() { return session.host; },
      ...apis,
      injectText: inject('injectText'),
      injectTextNoMemory: inject('injectTextNoMemory'),
      injectInterruptText: inject('injectInterruptText'),
      registerTool: (name, def, handler) => this.registerTool(name, def, handler),
      unregisterTool: (name) => this.unregisterTool(name),
      registerDef: (def) => this.registerDef(def),
      registerStage: (stage, handler, opts) => this.registerStage(stage, handler, false, opts),
      registerStageOwnTools: (stage, handler, opts) => this.registerStage(stage, handler, true, opts),
      log: (...args) => this.log(...args),
    };
  }

  /**
   * @param {string} name
   * @param {any} def
   * @param {Function} handler
   * @returns {Promise<void>}
   */
  registerTool(name, def, handler) {
    if (typeof name !== 'string' || !name) throw new spec.DeclarationError(`plugin ${this.name}: registerTool: name must be a non-empty string`);
    if (typeof handler !== 'function') throw new spec.DeclarationError(`plugin ${this.name}: tool ${name}: handler must be a function`);
    if (this.tools.has(name)) throw new spec.DeclarationError(`plugin ${this.name}: tool ${name} is registered twice`);
    const wire = spec.homeAgentTool(name, def, this.name);
    this.tools.set(name, new ToolEntry(wire, (args, _sender, ctx) => handler(args, ctx), results.fromValue));
    /** @type {Promise<void>} */
    const p = new Promise((resolve, reject) => {
      if (!this.registerSent) {
        this.initialRegs.push({ name, resolve, reject });
      } else {
        const requestId = String(this.nextRequest++);
        this.pendingRegs.set(requestId, { resolve, reject, name, kind: 'register' });
        this.send({ registerTool: { requestId, tool: wire } });
      }
    });
    p.catch((e) => this.log(e.message)); // awaited or not: never an unhandled rejection
    return p;
  }

  /**
   * Declares a setting (HomeAgent `Settings().RegisterDef`): in start() it goes out with
   * Register; later through the Settings host service.
   * @param {any} def
   * @returns {Promise<void>}
   */
  registerDef(def) {
    const wire = spec.configDef(def, this.name);
    if (!this.registerSent) {
      this.configDefs.push(wire);
      return Promise.resolve();
    }
    const p = this.host.settings.registerDef(wire).then(() => undefined);
    p.catch((e) => this.log(e.message));
    return p;
  }

  /**
   * Adds a stage hook; only during start() (hooks travel in Register).
   * @param {string | number} stage
   * @param {Function} handler
   * @param {boolean} ownToolsOnly
   * @param {{contextMsgs?: boolean}} [opts] `contextMsgs: false`: the hook does not read the conversation
   */
  registerStage(stage, handler, ownToolsOnly, opts) {
    const num = stages.stageNumber(stage, this.name);
    const what = `plugin ${this.name}: stage hook ${stages.STAGES[num - 1]}`;
    if (typeof handler !== 'function') throw new spec.DeclarationError(`${what}: handler must be a function`);
    if (this.registerSent) throw new spec.DeclarationError(`${what}: stage hooks can only be registered in start()`);
    const hookId = `${stages.STAGES[num - 1]}#${this.stageHooks.size}`;
    const noContextMsgs = opts != null && opts.contextMsgs === false;
    this.stageHooks.set(hookId, { wire: { stage: num, ownToolsOnly, hookId, noContextMsgs }, handler });
  }

  /**
   * @param {string} name
   * @returns {Promise<void>}
   */
  unregisterTool(name) {
    const p = new Promise((resolve, reject) => {
      if (!this.tools.has(name)) return reject(new Error(`plugin ${this.name}: unregisterTool: no tool ${name}`));
      const requestId = String(this.nextRequest++);
      this.pendingRegs.set(requestId, { resolve, reject, name, kind: 'unregister' });
      this.send({ unregisterTool: { requestId, name } });
    });
    p.catch((e) => this.log(e.message));
    return /** @type {Promise<void>} */ (p);
  }

  /**
   * Queues or writes one message, respecting backpressure (write() false → wait for 'drain').
   * @param {object | Buffer} msg
   */
  send(msg) {
    if (this.finished || this.ended) return;
    if (this.blocked || this.queue.length) {
      this.queue.push(msg);
      return;
    }
    if (!this.call.write(msg)) {
      this.blocked = true;
      if (this.debug) this.log('backpressure: write() returned false; queueing until drain');
    }
  }

  /** Writes queued messages after 'drain'. */
  flush() {
    this.blocked = false;
    if (this.debug && this.queue.length) this.log(`drain: flushing ${this.queue.length} queued message(s)`);
    while (this.queue.length && !this.finished) {
      if (!this.call.write(this.queue.shift())) {
        this.blocked = true;
        return;
      }
    }
    if (this.endWhenFlushed) this.endStream();
  }

  /**
   * Sends the final message of a call (ToolResult, StageResult, EventDone), encoded.
   * Without batching, or when no other call is running, it goes at once (with any
   * that wait); otherwise it waits for the end of this turn of the event loop, so the
   * results of calls that finish together share one PluginBatch.
   * @param {Buffer} buf
   */
  sendFinal(buf) {
    if (!this.batching || buf.length > BATCH_BYTES) {
      this.flushFinals();
      this.send(buf);
      return;
    }
    this.finals.push(buf);
    this.finalBytes += buf.length;
    if (this.inflight.size === 0 || this.finals.length >= BATCH_MSGS || this.finalBytes >= BATCH_BYTES) {
      this.flushFinals();
    } else if (!this.finalsScheduled) {
      this.finalsScheduled = true;
      setImmediate(() => { this.finalsScheduled = false; this.flushFinals(); });
    }
  }

  /** Sends the results waiting in `finals`: one alone, several in one PluginBatch. */
  flushFinals() {
    const msgs = this.finals;
    if (!msgs.length) return;
    this.finals = [];
    this.finalBytes = 0;
    this.send(msgs.length === 1 ? msgs[0] : batchMessage(msgs));
  }

  /** Half-closes the stream once everything queued is written. */
  endStream() {
    this.flushFinals();
    if (this.blocked || this.queue.length) {
      this.endWhenFlushed = true;
      return;
    }
    if (!this.ended) {
      this.ended = true;
      this.call.end();
    }
  }

  /** @param {any} m a decoded HostMessage */
  onMessage(m) {
    switch (m.msg) {
      case 'ping':
        // Answered at once from the I/O callback, ahead of anything we queued.
        if (!this.finished && !this.ended) this.call.write({ pong: { nonce: m.ping.nonce } });
        break;
      case 'invokeTool': this.startCall(m.invokeTool); break;
      case 'handleEvent': this.startEvent(m.handleEvent); break;
      case 'runStage': this.startStage(m.runStage); break;
      case 'cancel': this.cancel(m.cancel); break;
      case 'shutdown': this.shutdown(m.shutdown); break;
      case 'registered': this.onRegistered(m.registered); break;
      case 'rejected': this.onRejected(m.rejected); break;
      case 'toolRegistration': this.onToolRegistration(m.toolRegistration); break;
      case 'batch':
        for (const inner of m.batch.msgs) {
          if (inner.msg === 'batch') this.log('ignoring a batch nested in a batch');
          else this.onMessage(inner);
        }
        break;
      default:
        this.log(`ignoring unsupported broker message ${m.msg || '(empty)'}`);
    }
  }

  /** @param {any} r Registered */
  onRegistered(r) {
    this.registered = true;
    this.batching = (r.features || []).includes('batch');
    const ok = new Set(r.tools);
    for (const item of r.rejected) {
      this.log(`broker rejected ${item.kind} ${item.name}: ${item.reason}`);
      if (item.kind === 'tool') this.tools.delete(item.name);
    }
    for (const w of this.initialRegs) {
      if (ok.has(w.name)) w.resolve();
      else {
        const item = r.rejected.find((/** @type {any} */ i) => i.kind === 'tool' && i.name === w.name);
        w.reject(new Error(`plugin ${this.name}: tool ${w.name} not registered: ${item ? item.reason : 'missing from Registered.tools'}`));
      }
    }
    this.initialRegs = [];
    if (this.debug) this.log(`registered tools [${r.tools.join(', ')}]`);
  }

  /** @param {any} r Rejected */
  onRejected(r) {
    this.log(`broker rejected the registration: ${r.reason}`);
    for (const item of r.items) this.log(`  rejected ${item.kind} ${item.name}: ${item.reason}`);
    for (const w of this.initialRegs) w.reject(new Error(`plugin ${this.name}: tool ${w.name} not registered: ${r.reason}`));
    this.initialRegs = [];
    this.finish(EXIT.REJECTED);
  }

  /** @param {any} t ToolRegistration */
  onToolRegistration(t) {
    const p = this.pendingRegs.get(t.requestId);
    if (!p) return;
    this.pendingRegs.delete(t.requestId);
    if (t.ok) {
      if (p.kind === 'unregister') this.tools.delete(p.name);
      p.resolve();
    } else {
      if (p.kind === 'register') this.tools.delete(p.name);
      p.reject(new Error(`plugin ${this.name}: ${p.kind} tool ${p.name} failed: ${t.error}`));
    }
  }

  /** @param {any} inv InvokeTool */
  startCall(inv) {
    const key = String(inv.callId);
    const tool = this.tools.get(inv.tool);
    const sender = toSender(inv.sender);
    const st = new CallState();
    this.inflight.set(key, st);
    /** @param {string} message @param {number | {fraction?: number, progress?: number, total?: number} | null} [how] */
    const progress = (message, how) => {
      if (!st.aborted) this.send({ progress: { callId: inv.callId, message: String(message == null ? '' : message), ...progressFields(how) } });
    };
    const ctx = new CallContext(this, st, key, inv, sender, progress);
    Promise.resolve()
      .then(() => {
        if (!tool) throw new Error(`plugin ${this.name} has no tool ${inv.tool}`);
        let args;
        try {
          args = inv.argsJson ? JSON.parse(inv.argsJson) : {};
        } catch (e) {
          throw new SyntaxError(`tool ${inv.tool}: args_json is not valid JSON: ${/** @type {Error} */ (e).message}`);
        }
        return trace.runIn(ctx.otelContext, () => tool.invoke(args, sender, ctx));
      })
      .then((v) => /** @type {ToolEntry} */ (tool).map(v))
      .catch((e) => {
        if (!st.aborted) this.log(`tool ${inv.tool} (call ${key}) failed: ${results.errorText(e)}`);
        return { success: false, content: '', dataJson: '', error: results.errorText(e) };
      })
      .then((res) => {
        if (this.inflight.get(key) !== st || st.aborted) return; // cancelled: no result
        this.inflight.delete(key);
        this.sendResult(inv, res);
      });
  }

  /**
   * Encodes a ToolResult; a result over the message limit becomes an error result.
   * @param {any} inv
   * @param {{success: boolean, content: string, dataJson: string, error: string}} res
   */
  sendResult(inv, res) {
    let buf = encodeMessage({ toolResult: { callId: inv.callId, ...res } });
    if (buf.length > MAX_MESSAGE - 1024) {
      const error = `tool ${inv.tool}: result is ${buf.length} bytes, over the ${MAX_MESSAGE / 1048576} MiB message limit`;
      this.log(error);
      buf = encodeMessage({ toolResult: { callId: inv.callId, success: false, error } });
    }
    this.sendFinal(buf);
  }

  /** @param {any} ev HandleEvent */
  startEvent(ev) {
    const key = String(ev.callId);
    const st = new CallState();
    this.inflight.set(key, st);
    const params = ev.params.slice();
    const sender = Object.assign(toSender(ev.sender), {
      message: ev.message,
      params,
      signal: st.signal,
      /** @param {number} i @returns {string | null} params[i], null when absent (Python None) */
      param: (i) => (Number.isInteger(i) && i >= 0 && i < params.length ? params[i] : null),
      /** @param {unknown} text */
      reply: async (text) => {
        if (!st.aborted) this.send({ reply: { callId: ev.callId, text: typeof text === 'string' ? text : results.jsonText(text) } });
      },
    });
    Promise.resolve()
      .then(() => {
        if (typeof this.instance.handleEvent !== 'function') throw new Error(`plugin ${this.name} has no handleEvent`);
        const info = { signal: st.signal, callId: key, ...trace.traceFields(ev) };
        return trace.runIn(info.otelContext, () => this.instance.handleEvent(sender, info));
      })
      .then(() => '', (e) => {
        if (!st.aborted) this.log(`handleEvent (call ${key}) failed: ${results.errorText(e)}`);
        return results.errorText(e);
      })
      .then((error) => {
        if (this.inflight.get(key) !== st || st.aborted) return;
        this.inflight.delete(key);
        this.sendFinal(encodeMessage({ eventDone: { callId: ev.callId, error } }));
      });
  }

  /** @param {any} rs RunStage */
  startStage(rs) {
    const key = String(rs.callId);
    const st = new CallState();
    this.inflight.set(key, st);
    const hook = this.stageHooks.get(rs.hookId);
    const wireCtx = rs.context || {};
    Promise.resolve()
      .then(() => {
        if (!hook) throw new Error(`plugin ${this.name} has no stage hook ${rs.hookId}`);
        const ctx = stages.fromWire(wireCtx);
        const info = { signal: st.signal, callId: key, stage: stages.STAGES[rs.stage - 1], hookId: rs.hookId, ...trace.traceFields(rs) };
        return Promise.resolve(trace.runIn(info.otelContext, () => hook.handler(ctx, info)))
          .then((ret) => stages.toWire(ret && typeof ret === 'object' ? ret : ctx));
      })
      .then((context) => ({ context, error: '' }), (e) => {
        if (!st.aborted) this.log(`stage hook ${rs.hookId} (call ${key}) failed: ${results.errorText(e)}`);
        return { context: wireCtx, error: results.errorText(e) };
      })
      .then((res) => {
        if (this.inflight.get(key) !== st || st.aborted) return;
        this.inflight.delete(key);
        this.sendFinal(encodeMessage({ stageResult: { callId: rs.callId, ...res } }));
      });
  }

  /** @param {any} c Cancel */
  cancel(c) {
    const key = String(c.callId);
    const st = this.inflight.get(key);
    if (!st) return;
    this.inflight.delete(key);
    st.abort(Object.assign(new Error(`call ${key} cancelled by the broker${c.reason ? `: ${c.reason}` : ''}`), { name: 'AbortError' }));
  }

  /** @param {string} reason */
  abortAll(reason) {
    for (const [key, st] of this.inflight) st.abort(Object.assign(new Error(`call ${key} aborted: ${reason}`), { name: 'AbortError' }));
    this.inflight.clear();
  }

  /**
   * Calls the plugin's stop() once, bounded by `ms`.
   * @param {number} ms
   */
  async callStop(ms) {
    if (this.stopped) return;
    this.stopped = true;
    if (typeof this.instance.stop !== 'function') return;
    let timer;
    try {
      await Promise.race([
        Promise.resolve().then(() => this.instance.stop()),
        new Promise((resolve) => { timer = setTimeout(() => { this.log(`stop() still running after ${ms} ms; exiting anyway`); resolve(undefined); }, ms); }),
      ]);
    } catch (e) {
      this.log(`stop() failed: ${results.errorText(e)}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** @param {any} s Shutdown */
  async shutdown(s) {
    if (this.shuttingDown) return;
    this.shuttingDown = true;
    const grace = s.graceMs > 0 ? s.graceMs : 2000;
    const started = Date.now();
    this.graceTimer = setTimeout(() => this.finish(EXIT.OK), Math.max(grace - 50, 10));
    await this.callStop(Math.max(grace - 150, 10));
    this.abortAll('shutdown');
    this.endStream();
    // Give the END_STREAM a moment to reach the broker; 'status' normally comes first.
    const left = grace - (Date.now() - started) - 50;
    setTimeout(() => this.finish(EXIT.OK), Math.max(Math.min(left, 500), 0));
  }

  /**
   * Ends the session once: aborts handlers, calls stop() (best effort), closes the channel.
   * @param {number} code
   */
  async finish(code) {
    if (this.finished) return;
    this.finished = true;
    clearTimeout(this.graceTimer);
    this.abortAll('session ended');
    for (const w of this.initialRegs) w.reject(new Error(`plugin ${this.name}: session ended before registration`));
    for (const p of this.pendingRegs.values()) p.reject(new Error(`plugin ${this.name}: session ended before ${p.kind} tool ${p.name} was answered`));
    if (!this.shuttingDown) await this.callStop(1000);
    try { this.call.cancel(); } catch (_) { /* already closed */ }
    try { this.client.close(); } catch (_) { /* already closed */ }
    this.resolveRun(code);
  }
}

/**
 * Serves one plugin object over the Hearth session until it ends.
 * @param {any} instance plugin object (LinkZone or HomeAgent style)
 * @param {import('../index').ServeOptions} [opts]
 * @returns {Promise<number>} exit code
 */
function serveInstance(instance, opts = {}) {
  return new Session(instance, opts).run();
}

module.exports = { serveInstance, grpcTarget, batchMessage, CallState, EXIT, PROTOCOL_VERSION, SDK_NAME, FEATURES, MAX_MESSAGE };
