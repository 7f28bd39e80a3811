'use strict';

/**
 * A fake Hearth broker for tests: a real grpc-js PluginHost server on a temp Unix
 * socket that checks the spawn token, and real plugin processes spawned through the
 * same bootstrap the broker uses.
 */

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const crypto = require('node:crypto');
const { spawn, execFileSync } = require('node:child_process');
const grpc = require('@grpc/grpc-js');
const services = require('../../gen/services');

const { PluginHostService, InputService } = services;

/** The command line the broker uses: `node -e BOOTSTRAP /abs/entry`, cwd = plugin dir. */
const BOOTSTRAP = "require(require.resolve('hearth-plugin/runner', {paths: [require('path').dirname(process.argv[1])]})).main(process.argv[1])";
const MAX = 64 * 1024 * 1024;

/** One attached plugin session, seen from the broker. */
class BrokerSession {
  constructor(call) {
    this.call = call;
    this.messages = [];
    this.waiters = [];
    this.ended = false;
    this.endWaiters = [];
    call.on('data', (m) => { this.messages.push(m); this.wake(); });
    call.on('end', () => { this.ended = true; this.wake(); for (const w of this.endWaiters) w(); });
    call.on('error', () => { this.ended = true; this.wake(); for (const w of this.endWaiters) w(); });
  }

  wake() {
    for (const w of this.waiters.slice()) w();
  }

  /**
   * Takes the first message matching `pred` (waiting up to `ms`).
   * @param {(m: any) => boolean} pred
   * @param {number} [ms]
   * @param {string} [what]
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

  /** @param {string} kind oneof name */
  nextOf(kind, ms) {
    return this.next((m) => m.msg === kind, ms, kind).then((m) => m[kind]);
  }

  /** Waits for a ToolResult with this call id. */
  result(callId, ms = 5000) {
    return this.next((m) => m.msg === 'toolResult' && String(m.toolResult.callId) === String(callId), ms, `ToolResult ${callId}`).then((m) => m.toolResult);
  }

  /** Resolves when the plugin half-closes or the stream fails. */
  waitEnd(ms = 5000) {
    if (this.ended) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('plugin did not end the stream')), ms);
      this.endWaiters.push(() => { clearTimeout(t); resolve(); });
    });
  }

  send(msg) {
    return this.call.write(msg);
  }

  invoke(callId, tool, args, sender) {
    this.send({ invokeTool: { callId, tool, argsJson: JSON.stringify(args), sender: sender || { userId: 'u1', groupId: 'g1', channel: 'cli', sessionId: 's1' }, timeoutMs: 5000 } });
  }

  /** Runs one call and returns its ToolResult. */
  async call1(callId, tool, args, sender) {
    this.invoke(callId, tool, args, sender);
    return this.result(callId);
  }

  end() {
    this.call.end();
  }
}

/** A spawned plugin process with its captured output. */
class PluginProcess {
  constructor(proc) {
    this.proc = proc;
    this.stdout = '';
    this.stderr = '';
    proc.stdout.on('data', (d) => { this.stdout += d; });
    proc.stderr.on('data', (d) => { this.stderr += d; });
    this.exited = new Promise((resolve) => {
      // 'close' comes after 'exit' and after stdout/stderr are fully read.
      proc.on('close', (code, signal) => resolve({ code, signal }));
      // Spawn failures (e.g. ENOENT) emit 'error' and no 'exit'.
      proc.on('error', (err) => { this.stderr += `spawn failed: ${err.message}\n`; resolve({ code: null, signal: null, error: err }); });
    });
    this.running = true;
    this.exited.then(() => { this.running = false; });
  }

  /** Exit result, or rejects if the process is still alive after `ms`. */
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

/** A decoded message as a plain object: defaults included, int64 as numbers, unset optionals null. */
function plain(m) {
  if (Array.isArray(m)) return m.map(plain);
  if (m && typeof m === 'object' && typeof m.toNumber === 'function') return m.toNumber();
  if (!m || typeof m !== 'object') return m;
  const o = {};
  for (const k in m) if (typeof m[k] !== 'function') o[k] = plain(m[k]);
  return o;
}

class FakeBroker {
  constructor() {
    this.token = crypto.randomBytes(16).toString('hex');
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-node-test-'));
    this.sock = path.join(this.dir, 'hearth.sock');
    this.addr = `unix://${this.sock}`;
    this.sessions = [];
    this.sessionWaiters = [];
    this.unauthenticated = 0;
    this.procs = [];
    /** @type {(call: any) => boolean} hook to answer a session yourself */
    this.server = new grpc.Server({ 'grpc.max_receive_message_length': MAX, 'grpc.max_send_message_length': MAX });
    this.server.addService(PluginHostService, { attach: (call) => this.onAttach(call) });
    // Host services: Settings get/set over a Map and Input recording injections, enough
    // to check that plugins reach them with their token. Any method answers from
    // `hostReplies['settings.getCore']` when set there (a response object, a function
    // of the request, or `{code, details}` to fail with), and every call is recorded in
    // `hostCalls` as {method: 'memory.recall', request}; the rest are UNIMPLEMENTED.
    this.settings = new Map();
    this.injected = [];
    /** @type {Record<string, any>} */
    this.hostReplies = {};
    /** @type {{method: string, token: string, request: any}[]} */
    this.hostCalls = [];
    const authed = (fn) => (call, cb) => {
      if (call.metadata.get('x-hearth-token')[0] !== this.token) return cb({ code: grpc.status.UNAUTHENTICATED, details: 'invalid or stale x-hearth-token' });
      return fn(call, cb);
    };
    const notFound = (key) => ({ code: grpc.status.NOT_FOUND, details: `no setting ${key}` });
    const builtIn = {
      settings: {
        get: (call, cb) => (this.settings.has(call.request.key) ? cb(null, { valueJson: this.settings.get(call.request.key) }) : cb(notFound(call.request.key))),
        set: (call, cb) => { this.settings.set(call.request.key, call.request.valueJson); cb(null, {}); },
      },
    };
    const faked = { settings: 'SettingsService', memory: 'MemoryService', textMemory: 'TextMemoryService', docMemory: 'DocMemoryService', knowledge: 'KnowledgeService', llm: 'LlmService' };
    for (const [prop, svc] of Object.entries(faked)) {
      const impl = {};
      for (const method of Object.keys(services[svc])) {
        const name = `${prop}.${method}`;
        impl[method] = authed((call, cb) => {
          this.hostCalls.push({ method: name, token: call.metadata.get('x-hearth-token')[0], request: call.request });
          const reply = this.hostReplies[name];
          if (reply === undefined) {
            const own = builtIn[prop] && builtIn[prop][method];
            return own ? own(call, cb) : cb({ code: grpc.status.UNIMPLEMENTED, details: `${name} not faked` });
          }
          const res = typeof reply === 'function' ? reply(call.request) : reply;
          if (res && typeof res.code === 'number') return cb(res);
          return cb(null, res);
        });
      }
      this.server.addService(services[svc], impl);
    }
    this.server.addService(InputService, {
      injectText: authed((call, cb) => { this.injected.push({ ...call.request }); cb(null, {}); }),
    });
  }

  /** The request of the last host call of `method` ('settings.get') as a plain object
   * with every default; throws if none. */
  lastCall(method) {
    const c = this.hostCalls.filter((x) => x.method === method).at(-1);
    if (!c) throw new Error(`no ${method} call among ${this.hostCalls.map((x) => x.method).join(', ')}`);
    if (c.token !== this.token) throw new Error(`${method} without the plugin token`);
    return plain(c.request);
  }

  static async start() {
    const b = new FakeBroker();
    await new Promise((resolve, reject) => b.server.bindAsync(b.addr, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
    return b;
  }

  onAttach(call) {
    const got = call.metadata.get('x-hearth-token')[0];
    if (got !== this.token) {
      this.unauthenticated++;
      call.emit('error', { code: grpc.status.UNAUTHENTICATED, details: 'invalid or stale x-hearth-token' });
      return;
    }
    const s = new BrokerSession(call);
    const w = this.sessionWaiters.shift();
    if (w) w(s);
    else this.sessions.push(s);
  }

  nextSession(ms = 8000) {
    const s = this.sessions.shift();
    if (s) return Promise.resolve(s);
    return new Promise((resolve, reject) => {
      const waiter = (x) => { clearTimeout(t); resolve(x); };
      const t = setTimeout(() => {
        this.sessionWaiters = this.sessionWaiters.filter((w) => w !== waiter);
        reject(new Error('no plugin attached'));
      }, ms);
      this.sessionWaiters.push(waiter);
    });
  }

  /**
   * Spawns `node -e BOOTSTRAP entry` in the entry's directory, like the broker does (with
   * `script`, `node entry`: a plugin that calls serve() itself). The token goes in
   * HEARTH_TOKEN, or with `tokenPipe` as the broker passes it: written into a pipe whose
   * read end the plugin inherits as fd 3 (HEARTH_TOKEN_FD=3, no HEARTH_TOKEN); the
   * process's `tokenPipe` is then that pipe's {dev, ino}.
   * @param {string} entry absolute path
   * @param {{env?: Record<string,string>, token?: string, name?: string, tokenPipe?: boolean, script?: boolean}} [opts]
   */
  spawn(entry, opts = {}) {
    const token = opts.token == null ? this.token : opts.token;
    const env = { ...process.env, HEARTH_ADDR: this.addr, HEARTH_PLUGIN: opts.name || path.basename(path.dirname(entry)), HEARTH_TOKEN: token };
    delete env.HEARTH_TOKEN_FD;
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
      proc = spawn(process.execPath, opts.script ? [entry] : ['-e', BOOTSTRAP, entry], { cwd: path.dirname(entry), env: { ...env, ...(opts.env || {}) }, stdio });
    } finally {
      if (pipe) fs.closeSync(pipe.fd);
    }
    const p = new PluginProcess(proc);
    p.tokenPipe = pipe && { dev: pipe.dev, ino: pipe.ino };
    this.procs.push(p);
    return p;
  }

  /**
   * A pipe holding `token` and a newline, its write end closed: the read end's fd and the
   * pipe's dev/ino. Node has no pipe(2), so it is a FIFO made with mkfifo and unlinked.
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
   * Spawns a plugin, takes Hello and Register and answers Registered (all tools).
   * @returns {Promise<{proc: PluginProcess, session: BrokerSession, hello: any, register: any}>}
   */
  async attach(entry, opts = {}) {
    const proc = this.spawn(entry, opts);
    let session;
    try {
      session = await this.nextSession();
    } catch (e) {
      throw new Error(`${e.message}; plugin stderr:\n${proc.stderr}`);
    }
    const hello = await session.nextOf('hello');
    const register = await session.nextOf('register');
    session.send({ registered: { plugin: register.plugin.name, tools: register.tools.map((t) => t.name), protocolVersion: '1.0.0', features: ['cancel', 'progress'], rejected: opts.rejected || [] } });
    return { proc, session, hello, register };
  }

  async close() {
    for (const p of this.procs) if (p.running) p.proc.kill('SIGKILL');
    await Promise.all(this.procs.map((p) => p.exited));
    this.server.forceShutdown();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

const fixture = (name, file = 'index.js') => path.join(__dirname, '..', 'fixtures', name, file);

/** The canonical Node stress plugin (tests/plugins/stress.js, spec tests/plugins/STRESS.md). */
const STRESS_PLUGIN = path.join(__dirname, '..', '..', '..', 'tests', 'plugins', 'stress.js');

/**
 * Polls `read()` until it matches `re` (output of another process arrives on its own
 * schedule), then returns it; returns the last value after `ms` so the caller's
 * assertion reports what was there.
 */
async function eventually(read, re, ms = 3000) {
  const end = Date.now() + ms;
  while (!re.test(read()) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return read();
}

module.exports = { FakeBroker, BOOTSTRAP, fixture, eventually, STRESS_PLUGIN };
