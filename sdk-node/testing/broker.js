'use strict';

/**
 * A fake Hearth broker for tests: a real grpc-js server on a temp Unix socket that
 * serves `PluginHost.Attach` (checking each plugin's token) and the host services
 * (answered by a {@link FakeHost}: in-memory stores with the broker's semantics), and
 * starts plugin processes the way the broker does (`node -e NODE_BOOTSTRAP entry`,
 * cwd = the plugin's folder, `HEARTH_ADDR`, `HEARTH_PLUGIN`, the token in
 * `HEARTH_TOKEN` or, like the broker, in an inherited pipe named by `HEARTH_TOKEN_FD`).
 *
 * This is the wire-level layer: a test drives each attached session message by message
 * (`BrokerSession`). `load()` (./harness.js) builds the plugin-level harness on it.
 */

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const crypto = require('node:crypto');
const { spawn, execFileSync } = require('node:child_process');
const grpc = require('@grpc/grpc-js');
const services = require('../gen/services');
const { FakeHost } = require('./host');
const { HarnessError } = require('./errors');

const { PluginHostService } = services;

/**
 * The Node bootstrap the broker runs for a `runtime: "node"` plugin
 * (broker/src/supervisor/process.rs `NODE_BOOTSTRAP`): `node -e NODE_BOOTSTRAP /abs/entry`.
 */
const NODE_BOOTSTRAP = "const p=require('path');const e=p.resolve(process.argv[1]);"
  + "let r;try{r=require.resolve('hearth-plugin/runner',{paths:[p.dirname(e)]})}catch(_){r='hearth-plugin/runner'}"
  + 'require(r).main(e)';
const MAX = 64 * 1024 * 1024;

/** Host-service property → generated service definition. */
const HOST_SERVICES = {
  settings: 'SettingsService',
  memory: 'MemoryService',
  textMemory: 'TextMemoryService',
  docMemory: 'DocMemoryService',
  knowledge: 'KnowledgeService',
  llm: 'LlmService',
  input: 'InputService',
  mcp: 'McpService',
};

/** One attached plugin session, seen from the broker. */
class BrokerSession {
  /** @param {any} call the server side of `PluginHost.Attach` */
  constructor(call) {
    this.call = call;
    /** @type {any[]} messages received and not yet taken (when no handler is set) */
    this.messages = [];
    /** @type {Array<() => boolean>} */
    this.waiters = [];
    this.ended = false;
    /** @type {Array<() => void>} */
    this.endWaiters = [];
    /** @type {((m: any) => void) | null} */
    this.handler = null;
    /** The plugin its token names, and the token (set by FakeBroker). */
    this.plugin = '';
    this.token = '';
    /** PluginBatch messages received; their messages arrive one by one, in order. */
    this.batches = 0;
    const take = (/** @type {any} */ m) => {
      if (this.handler) this.handler(m);
      else {
        this.messages.push(m);
        this.wake();
      }
    };
    call.on('data', (/** @type {any} */ m) => {
      if (m.msg !== 'batch') return take(m);
      this.batches += 1;
      for (const inner of m.batch.msgs) take(inner);
      return undefined;
    });
    const ended = () => {
      this.ended = true;
      this.wake();
      for (const w of this.endWaiters.splice(0)) w();
    };
    call.on('end', ended);
    call.on('error', ended);
    call.on('cancelled', ended);
  }

  wake() {
    for (const w of this.waiters.slice()) w();
  }

  /**
   * From now on every received message goes to `fn` (buffered ones first), not to the
   * queue `next()` reads.
   * @param {(m: any) => void} fn
   */
  onMessage(fn) {
    this.handler = fn;
    for (const m of this.messages.splice(0)) fn(m);
  }

  /**
   * Takes the first message matching `pred`, waiting up to `ms`.
   * @param {(m: any) => boolean} pred
   * @param {number} [ms]
   * @param {string} [what] named in the error
   * @returns {Promise<any>}
   */
  next(pred, ms = 5000, what = 'message') {
    return new Promise((resolve, reject) => {
      const check = () => {
        const i = this.messages.findIndex(pred);
        if (i >= 0) {
          done();
          resolve(this.messages.splice(i, 1)[0]);
          return true;
        }
        if (this.ended) {
          done();
          reject(new Error(`stream ended while waiting for ${what}`));
          return true;
        }
        return false;
      };
      const timer = setTimeout(() => { done(); reject(new Error(`timed out after ${ms} ms waiting for ${what}`)); }, ms);
      const done = () => { clearTimeout(timer); this.waiters = this.waiters.filter((w) => w !== check); };
      if (!check()) this.waiters.push(check);
    });
  }

  /**
   * The next message of one kind (`'register'`, `'toolResult'`, …), unwrapped.
   * @param {string} kind oneof case of PluginMessage
   * @param {number} [ms]
   */
  nextOf(kind, ms) {
    return this.next((m) => m.msg === kind, ms, kind).then((m) => m[kind]);
  }

  /**
   * The ToolResult of call `callId`.
   * @param {number | string | import('long')} callId
   * @param {number} [ms]
   */
  result(callId, ms = 5000) {
    return this.next((m) => m.msg === 'toolResult' && String(m.toolResult.callId) === String(callId), ms, `ToolResult ${callId}`).then((m) => m.toolResult);
  }

  /** Resolves when the plugin half-closes or the stream fails. @param {number} [ms] */
  waitEnd(ms = 5000) {
    if (this.ended) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('plugin did not end the stream')), ms);
      this.endWaiters.push(() => { clearTimeout(t); resolve(undefined); });
    });
  }

  /** Resolves when the stream has ended (no time bound). */
  whenEnded() {
    if (this.ended) return Promise.resolve();
    return new Promise((resolve) => { this.endWaiters.push(() => resolve(undefined)); });
  }

  /**
   * Writes a HostMessage (`{invokeTool: {...}}`, `{shutdown: {graceMs}}`, …).
   * @param {object} msg
   */
  send(msg) {
    if (this.ended) return false;
    return this.call.write(msg);
  }

  /**
   * Sends InvokeTool.
   * @param {number | import('long')} callId
   * @param {string} tool
   * @param {unknown} args
   * @param {object} [sender]
   */
  invoke(callId, tool, args, sender) {
    this.send({ invokeTool: { callId, tool, argsJson: JSON.stringify(args), sender: sender || { userId: 'u1', groupId: 'g1', channel: 'cli', sessionId: 's1' }, timeoutMs: 5000 } });
  }

  /**
   * Runs one call and returns its ToolResult.
   * @param {number | import('long')} callId
   * @param {string} tool
   * @param {unknown} args
   * @param {object} [sender]
   */
  async call1(callId, tool, args, sender) {
    this.invoke(callId, tool, args, sender);
    return this.result(callId);
  }

  /** Ends the broker's side of the stream (the plugin sees a clean close). */
  end() {
    this.call.end();
  }
}

/** A spawned plugin process with its captured output. */
class PluginProcess {
  /** @param {import('node:child_process').ChildProcess} proc */
  constructor(proc) {
    this.proc = proc;
    this.stdout = '';
    this.stderr = '';
    /** @type {{dev: number, ino: number} | null} the token pipe, when the token went through one */
    this.tokenPipe = null;
    /** @type {Array<(line: string) => void>} */
    this.lineListeners = [];
    let partial = '';
    /** @type {any} */ (proc.stdout).on('data', (/** @type {Buffer} */ d) => { this.stdout += d; });
    /** @type {any} */ (proc.stderr).on('data', (/** @type {Buffer} */ d) => {
      this.stderr += d;
      partial += d;
      const lines = partial.split('\n');
      partial = /** @type {string} */ (lines.pop());
      for (const l of lines) for (const f of this.lineListeners) f(l);
    });
    /** @type {Promise<{code: number | null, signal: NodeJS.Signals | null, error?: Error}>} */
    this.exited = new Promise((resolve) => {
      // 'close' comes after 'exit' and after stdout/stderr are fully read.
      proc.on('close', (code, signal) => {
        if (partial) for (const f of this.lineListeners) f(partial);
        resolve({ code, signal });
      });
      // Spawn failures (e.g. ENOENT) emit 'error' and no 'exit'.
      proc.on('error', (err) => { this.stderr += `spawn failed: ${err.message}\n`; resolve({ code: null, signal: null, error: err }); });
    });
    this.running = true;
    this.exited.then(() => { this.running = false; });
  }

  /** Calls `fn` with each complete stderr line. @param {(line: string) => void} fn */
  onStderrLine(fn) {
    this.lineListeners.push(fn);
  }

  /**
   * The exit result; rejects if the process still runs after `ms`.
   * @param {number} [ms]
   */
  async exit(ms = 5000) {
    let t;
    const timeout = new Promise((_, reject) => { t = setTimeout(() => reject(new Error(`plugin still running after ${ms} ms; stderr:\n${this.stderr}`)), ms); });
    try {
      return await Promise.race([this.exited, timeout]);
    } finally {
      clearTimeout(t);
    }
  }
}

/**
 * A decoded message as a plain object: defaults included, int64 as numbers.
 * @param {any} m
 * @returns {any}
 */
function plain(m) {
  if (Array.isArray(m)) return m.map(plain);
  if (m && typeof m === 'object' && typeof m.toNumber === 'function') return m.toNumber();
  if (!m || typeof m !== 'object') return m;
  /** @type {Record<string, unknown>} */
  const o = {};
  for (const k in m) if (typeof m[k] !== 'function') o[k] = plain(m[k]);
  return o;
}

/** HarnessError codes that are gRPC status names → their numbers. @param {any} e */
function toStatus(e) {
  if (e instanceof HarnessError && typeof (/** @type {any} */ (grpc.status))[e.code] === 'number') {
    return { code: /** @type {any} */ (grpc.status)[e.code], details: e.message };
  }
  return { code: grpc.status.INTERNAL, details: `fake host: ${(e && e.stack) || e}` };
}

/**
 * @typedef {{method: string, plugin: string, token: string, request: any, error?: string}} HostCall
 */

class FakeBroker {
  /**
   * Use {@link FakeBroker.start}.
   * @param {{host?: FakeHost, dir?: string}} [opts]
   */
  constructor(opts = {}) {
    /** The spawn token `spawn()` gives plugins by default; it names the plugin spawned last. */
    this.token = crypto.randomBytes(16).toString('hex');
    /** A temp dir of its own (removed by close()); the socket is in it. */
    this.dir = opts.dir || fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-test-'));
    this.sock = path.join(this.dir, 'hearth.sock');
    /** HEARTH_ADDR of this broker. */
    this.addr = `unix://${this.sock}`;
    /** @type {BrokerSession[]} sessions attached and not yet taken by nextSession() */
    this.sessions = [];
    /** @type {Array<(s: BrokerSession) => void>} */
    this.sessionWaiters = [];
    /** Attach calls refused for a wrong token. */
    this.unauthenticated = 0;
    /** @type {PluginProcess[]} */
    this.procs = [];
    /** The host services' state. */
    this.host = opts.host || new FakeHost();
    /** @type {Map<string, string>} token → plugin name */
    this.tokens = new Map([[this.token, 'plugin']]);
    /**
     * Canned answers by method (`'settings.getCore'`): a response object, a function of
     * the request, or `{code, details}` (a gRPC status) to fail with. They take
     * precedence over the fake host.
     * @type {Record<string, any>}
     */
    this.hostReplies = {};
    /** @type {HostCall[]} every host-service call, in order */
    this.hostCalls = [];
    this.server = new grpc.Server({ 'grpc.max_receive_message_length': MAX, 'grpc.max_send_message_length': MAX });
    this.server.addService(PluginHostService, { attach: (/** @type {any} */ call) => this.onAttach(call) });
    for (const [prop, svc] of Object.entries(HOST_SERVICES)) {
      const def = /** @type {any} */ (services)[svc];
      /** @type {Record<string, Function>} */
      const impl = {};
      for (const method of Object.keys(def)) impl[method] = (/** @type {any} */ call, /** @type {Function} */ cb) => this.onHostCall(`${prop}.${method}`, call, cb);
      this.server.addService(def, /** @type {any} */ (impl));
    }
  }

  /**
   * Starts a fake broker listening on a fresh temp socket.
   * @param {{host?: FakeHost}} [opts] `host`: the stores to serve (default a new FakeHost)
   * @returns {Promise<FakeBroker>}
   */
  static async start(opts) {
    const b = new FakeBroker(opts);
    await new Promise((resolve, reject) => b.server.bindAsync(b.addr, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve(undefined))));
    return b;
  }

  /**
   * A fresh token for `plugin` (how the broker names the caller of each host call).
   * @param {string} plugin
   */
  tokenFor(plugin) {
    const token = crypto.randomBytes(16).toString('hex');
    this.tokens.set(token, plugin);
    return token;
  }

  /**
   * @param {string} method
   * @param {any} call
   * @param {Function} cb
   */
  onHostCall(method, call, cb) {
    const token = call.metadata.get('x-hearth-token')[0];
    const plugin = this.tokens.get(token);
    if (plugin === undefined) return cb({ code: grpc.status.UNAUTHENTICATED, details: 'x-hearth-token does not match any running plugin' });
    /** @type {HostCall} */
    const record = { method, plugin, token, request: call.request };
    this.hostCalls.push(record);
    try {
      const canned = this.hostReplies[method];
      if (canned !== undefined) {
        const res = typeof canned === 'function' ? canned(call.request) : canned;
        if (res && typeof res.code === 'number') {
          record.error = res.details;
          return cb(res);
        }
        return cb(null, res);
      }
      return cb(null, this.host.answer(method, plugin, call.request));
    } catch (e) {
      const st = toStatus(e);
      record.error = st.details;
      return cb(st);
    }
  }

  /**
   * The request of the last host call of `method` (`'settings.get'`) as a plain object
   * with every default; throws if there was none, or if it lacked the token.
   * @param {string} method
   */
  lastCall(method) {
    const c = this.hostCalls.filter((x) => x.method === method).at(-1);
    if (!c) throw new Error(`no ${method} call among ${this.hostCalls.map((x) => x.method).join(', ')}`);
    return plain(c.request);
  }

  /** @param {any} call */
  onAttach(call) {
    const got = call.metadata.get('x-hearth-token')[0];
    if (!this.tokens.has(got)) {
      this.unauthenticated++;
      call.emit('error', { code: grpc.status.UNAUTHENTICATED, details: 'invalid or stale x-hearth-token' });
      return;
    }
    const s = new BrokerSession(call);
    /** The plugin the session's token names. */
    s.plugin = this.tokens.get(got);
    s.token = got;
    const w = this.sessionWaiters.shift();
    if (w) w(s);
    else this.sessions.push(s);
  }

  /**
   * The next session to attach (or one attached already), waiting up to `ms`
   * (`Infinity`: no bound).
   * @param {number} [ms]
   * @returns {Promise<BrokerSession>}
   */
  nextSession(ms = 8000) {
    const s = this.sessions.shift();
    if (s) return Promise.resolve(s);
    return new Promise((resolve, reject) => {
      /** @type {NodeJS.Timeout | undefined} */
      let t;
      const waiter = (/** @type {BrokerSession} */ x) => { clearTimeout(t); resolve(x); };
      if (Number.isFinite(ms)) {
        t = setTimeout(() => {
          this.sessionWaiters = this.sessionWaiters.filter((w) => w !== waiter);
          reject(new Error('no plugin attached'));
        }, ms);
      }
      this.sessionWaiters.push(waiter);
    });
  }

  /**
   * Spawns `node -e NODE_BOOTSTRAP entry` in the entry's folder, as the broker does (with
   * `script`, `node entry`: a plugin that calls serve() itself). The token goes in
   * HEARTH_TOKEN, or with `tokenPipe` as the broker passes it: written into a pipe whose
   * read end the plugin inherits as fd 3 (HEARTH_TOKEN_FD=3, no HEARTH_TOKEN).
   * @param {string} entry absolute path
   * @param {{env?: Record<string, string | undefined>, token?: string, name?: string, tokenPipe?: boolean, script?: boolean, bootstrap?: string}} [opts]
   *   `name`: HEARTH_PLUGIN (default the entry's folder name); `token`: default
   *   `broker.token` (which then names this plugin); `bootstrap`: another `-e` program
   * @returns {PluginProcess}
   */
  spawn(entry, opts = {}) {
    const name = opts.name || path.basename(path.dirname(entry));
    const token = opts.token == null ? this.token : opts.token;
    if (opts.token == null) this.tokens.set(token, name);
    /** @type {Record<string, string | undefined>} */
    const env = { ...process.env, HEARTH_ADDR: this.addr, HEARTH_PLUGIN: name, HEARTH_TOKEN: token };
    delete env.HEARTH_TOKEN_FD;
    /** @type {any[]} */
    const stdio = ['ignore', 'pipe', 'pipe'];
    let pipe = null;
    if (opts.tokenPipe) {
      pipe = this.tokenPipe(token);
      delete env.HEARTH_TOKEN;
      env.HEARTH_TOKEN_FD = '3';
      stdio.push(pipe.fd);
    }
    let proc;
    try {
      const args = opts.script ? [entry] : ['-e', opts.bootstrap || NODE_BOOTSTRAP, entry];
      proc = spawn(process.execPath, args, { cwd: path.dirname(entry), env: /** @type {any} */ ({ ...env, ...(opts.env || {}) }), stdio });
    } finally {
      if (pipe) fs.closeSync(pipe.fd);
    }
    const p = new PluginProcess(proc);
    p.tokenPipe = pipe && { dev: pipe.dev, ino: pipe.ino };
    this.procs.push(p);
    return p;
  }

  /**
   * A pipe holding `token` and a newline, its write end closed: the read end's fd and
   * the pipe's dev/ino (a FIFO made with mkfifo and unlinked; Node has no pipe(2)).
   * @param {string} token
   */
  tokenPipe(token) {
    const fifo = path.join(this.dir, `token-${this.procs.length}.fifo`);
    execFileSync('mkfifo', ['-m', '600', fifo]);
    // Non-blocking so opening the read end does not wait for a writer.
    const fd = fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    const w = fs.openSync(fifo, fs.constants.O_WRONLY);
    fs.unlinkSync(fifo);
    fs.writeSync(w, `${token}\n`);
    fs.closeSync(w);
    const st = fs.fstatSync(fd);
    return { fd, dev: st.dev, ino: st.ino };
  }

  /**
   * Spawns a plugin, takes Hello and Register and answers Registered (every tool
   * accepted, or `opts.rejected` items reported; `opts.features` offered, default
   * cancel and progress: with "batch" the plugin may send PluginBatch).
   * @param {string} entry
   * @param {Parameters<FakeBroker['spawn']>[1] & {rejected?: Array<{kind: string, name: string, reason: string}>, features?: string[]}} [opts]
   * @returns {Promise<{proc: PluginProcess, session: BrokerSession, hello: any, register: any}>}
   */
  async attach(entry, opts = {}) {
    const proc = this.spawn(entry, opts);
    let session;
    try {
      session = await this.nextSession();
    } catch (e) {
      throw new Error(`${/** @type {Error} */ (e).message}; plugin stderr:\n${proc.stderr}`);
    }
    const hello = await session.nextOf('hello');
    const register = await session.nextOf('register');
    session.send({ registered: { plugin: register.plugin.name, tools: register.tools.map((/** @type {any} */ t) => t.name), protocolVersion: '1.0.0', features: opts.features || ['cancel', 'progress'], rejected: opts.rejected || [] } });
    return { proc, session, hello, register };
  }

  /** Kills the plugins it spawned, stops the server and removes its temp dir. */
  async close() {
    for (const p of this.procs) if (p.running) p.proc.kill('SIGKILL');
    await Promise.all(this.procs.map((p) => p.exited));
    this.server.forceShutdown();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

module.exports = { FakeBroker, BrokerSession, PluginProcess, NODE_BOOTSTRAP, HOST_SERVICES, plain };
