'use strict';

/**
 * Stress / fault-injection plugin of the Node SDK (spec: tests/plugins/STRESS.md), the
 * Node member of tests/plugins/stress.py and sdk-rust/examples/stress.rs.
 *
 * Served as the broker serves any Node plugin (`runtime: "node"`, entry this file):
 * `node -e <bootstrap> /abs/tests/plugins/stress.js`; it exports the plugin.
 * Tool prefix P = $HEARTH_TOOL_PREFIX if set and non-empty, else $HEARTH_PLUGIN.
 *
 * Tools: P_echo, P_sleep {"ms", "progress_ms"?}, P_fail, P_big {"bytes"}, P_hang; with
 * fault many_tools also P_t0 … P_t1999; with bad_schema also P_bad_schema.
 *
 * HEARTH_FAULT (comma-separated): exit_before_hello, hang_before_hello, exit_after_hello,
 * never_register, wrong_version, crash_mid_call, flood, junk_stdout, grandchild,
 * many_tools, bad_schema. Unknown names are reported on stderr and ignored.
 *
 * What each fault looks like from outside (Node specifics):
 * - exit_before_hello: `stress: exit_before_hello` on stderr, exit status 1, never dials.
 * - hang_before_hello: never dials; the main thread blocks in Atomics.wait until killed.
 * - exit_after_hello: Hello is written, then the stream is cancelled without Register;
 *   stderr says `hearthAfterHello ended the session before Register (exit code 1)`; exit 1.
 * - never_register: Hello is written, then nothing (no Register, no Pong: broker messages
 *   are not read); sleeps until killed, even if the broker ends the stream.
 * - wrong_version: Hello carries protocol_version "99.0.0"; after the broker's Rejected,
 *   stderr has `broker rejected the registration: <reason>` and the exit status is 3.
 * - crash_mid_call: P_sleep exits the process with status 1 after ms/2
 *   (`P_sleep: crashing mid-call (crash_mid_call)` on stderr first).
 * - flood: writes one 10 MiB line of `x` to stdout, a line of invalid UTF-8, then ~1 MB/s
 *   of 1 KiB `flood ...` lines to stdout and to stderr each until killed. The writes go
 *   through libuv's thread pool one at a time (fs.write on fds 1 and 2, the next only
 *   after the previous finished), so a slow reader never blocks the event loop and
 *   pings are still answered.
 * - junk_stdout: a banner line and a line of invalid UTF-8 bytes on stdout at start and at
 *   the start of every call.
 * - grandchild: spawns `sleep 3600` (same process group, stdin ignored, stdout/stderr
 *   inherited) and prints `GRANDCHILD_PID=<pid>` to stdout.
 *
 * P_echo maps its arguments like any HomeAgent value: content = their JSON text, data_json
 * = the same JSON. P_fail's error is `Error: P_fail: failing on purpose`. P_big over the
 * 64 MiB message limit gets the SDK's error result `tool P_big: result is N bytes, over the
 * 64 MiB message limit`. P_hang prints `P_hang: freezing the event loop thread` on stderr
 * and blocks the only JS thread in Atomics.wait. A cancelled P_sleep prints
 * `P_sleep: cancelled` on stdout (and the SDK sends no result for it).
 */

const fs = require('node:fs');
const { spawn } = require('node:child_process');
const { Plugin } = require('hearth-plugin');

const NAME = process.env.HEARTH_PLUGIN || 'stress';
const P = process.env.HEARTH_TOOL_PREFIX || NAME;
const FAULTS = new Set((process.env.HEARTH_FAULT || '').split(',').map((f) => f.trim()).filter(Boolean));
const KNOWN = new Set(['exit_before_hello', 'hang_before_hello', 'exit_after_hello', 'never_register',
  'wrong_version', 'crash_mid_call', 'flood', 'junk_stdout', 'grandchild', 'many_tools', 'bad_schema']);
const MANY_TOOLS = 2000;
const INVALID_UTF8 = Buffer.from([0xff, 0xfe, 0xc3, 0x28]);

const err = (msg) => process.stderr.write(`stress: ${msg}\n`);

/** Blocks the only JS thread for good: no timers, no I/O callbacks, no pongs. */
function freeze() {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  for (;;) Atomics.wait(cell, 0, 0);
}

function junk(what) {
  process.stdout.write(Buffer.concat([
    Buffer.from(`*** stress plugin ${NAME} banner: ${what} ***\n`),
    INVALID_UTF8, Buffer.from(' invalid utf-8 '), Buffer.from([0x80, 0x80, 0x0a]),
  ]));
}

/**
 * Writes all of `buf` to `fd` off the main thread (fs.write runs in the thread pool),
 * then calls `done`; EAGAIN (a non-blocking pipe that is full) is retried a bit later.
 */
function writeAll(fd, buf, done) {
  fs.write(fd, buf, 0, buf.length, null, (e, n) => {
    if (e && e.code === 'EAGAIN') return setTimeout(() => writeAll(fd, buf, done), 10);
    if (e) return; // the reader is gone (EPIPE): stop flooding this stream
    if (n < buf.length) return writeAll(fd, buf.subarray(n), done);
    done();
  });
}

/** 10 MiB line, an invalid UTF-8 line, then ~1 MB/s of 1 KiB lines on stdout and stderr. */
function flood() {
  const line = Buffer.from(`flood ${'.'.repeat(1017)}\n`); // 1 KiB
  const block = Buffer.concat(Array(32).fill(line)); // 32 KiB every 32 ms on each stream
  const period = 32;
  const steady = (fd) => {
    let next = Date.now();
    const tick = () => writeAll(fd, block, () => {
      next += period;
      setTimeout(tick, Math.max(0, next - Date.now()));
    });
    tick();
  };
  const first = Buffer.concat([
    Buffer.alloc(10 * 1024 * 1024, 'x'), Buffer.from('\n'),
    INVALID_UTF8, Buffer.from([0x80]), Buffer.from(' flood: invalid utf-8 line '), Buffer.from([0xed, 0xa0, 0x80, 0x0a]),
  ]);
  writeAll(1, first, () => steady(1));
  steady(2);
}

for (const f of [...FAULTS].filter((x) => !KNOWN.has(x)).sort()) err(`unknown fault '${f}' ignored`);

// ---- before the SDK dials the broker (the runner loads this file before the session starts)

if (FAULTS.has('exit_before_hello')) {
  err('exit_before_hello');
  process.exit(1);
}
if (FAULTS.has('hang_before_hello')) {
  err('hang_before_hello: sleeping until killed');
  freeze();
}
if (FAULTS.has('grandchild')) {
  const child = spawn('sleep', ['3600'], { stdio: ['ignore', 'inherit', 'inherit'] });
  child.on('error', (e) => err(`grandchild: cannot spawn \`sleep 3600\`: ${e.message}`));
  child.unref();
  if (child.pid) process.stdout.write(`GRANDCHILD_PID=${child.pid}\n`);
}
if (FAULTS.has('junk_stdout')) junk('start');
if (FAULTS.has('flood')) flood();

function callStart() {
  if (FAULTS.has('junk_stdout')) junk('call');
}

const echo = (args) => {
  callStart();
  return args;
};

const sleep = (args, { signal, progress }) => new Promise((resolve, reject) => {
  callStart();
  const ms = Number(args.ms) || 0;
  const start = Date.now();
  const timers = [];
  const clear = () => { for (const t of timers) clearTimeout(t); };
  timers.push(setTimeout(() => { clear(); resolve(`slept ${ms} ms`); }, ms));
  if (Number(args.progress_ms) > 0) {
    timers.push(setInterval(() => {
      const done = Date.now() - start;
      progress(`slept ${done} of ${ms} ms`, ms ? Math.min(done / ms, 1) : 1);
    }, Number(args.progress_ms)));
  }
  if (FAULTS.has('crash_mid_call')) {
    timers.push(setTimeout(() => {
      err(`${P}_sleep: crashing mid-call (crash_mid_call)`);
      process.exit(1);
    }, ms / 2));
  }
  signal.addEventListener('abort', () => {
    clear();
    process.stdout.write(`${P}_sleep: cancelled\n`);
    reject(signal.reason);
  }, { once: true });
});

const fail = async () => {
  callStart();
  throw new Error(`${P}_fail: failing on purpose`);
};

const big = (args) => {
  callStart();
  return 'x'.repeat(Number(args.bytes) || 0);
};

const hang = () => {
  callStart();
  process.stderr.write(`${P}_hang: freezing the event loop thread\n`);
  freeze();
};

const ANY = { type: 'object' };
const NO_ARGS = { type: 'object', properties: {} };

class Stress extends Plugin {
  constructor() {
    super();
    // SDK test hooks (sdk-node/README.md "Test hooks").
    if (FAULTS.has('wrong_version')) this.hearthProtocolVersion = '99.0.0';
    if (FAULTS.has('exit_after_hello')) {
      this.hearthAfterHello = () => {
        err('exit_after_hello: Hello sent; exiting with status 1 without Register');
        return 1;
      };
    } else if (FAULTS.has('never_register')) {
      this.hearthAfterHello = () => {
        err('never_register: Hello sent; never registering, sleeping until killed');
        return new Promise(() => { setInterval(() => {}, 1 << 30); });
      };
    }
  }

  name() {
    return NAME;
  }

  start(sdk) {
    const reg = (tool, description, parameters, handler) => sdk.registerTool(`${P}_${tool}`, { description, parameters }, handler);
    reg('echo', 'Returns its arguments (content = their JSON, data = the same).', ANY, echo);
    reg('sleep', 'Sleeps `ms` milliseconds, sending Progress every `progress_ms`.', {
      type: 'object',
      properties: { ms: { type: 'integer', minimum: 0 }, progress_ms: { type: 'integer', minimum: 1 } },
      required: ['ms'],
    }, sleep);
    reg('fail', 'Fails on purpose.', NO_ARGS, fail);
    reg('big', 'Returns `bytes` bytes of x.', {
      type: 'object', properties: { bytes: { type: 'integer', minimum: 0 } }, required: ['bytes'],
    }, big);
    reg('hang', 'Freezes the whole plugin process.', NO_ARGS, hang);
    if (FAULTS.has('many_tools')) {
      for (let i = 0; i < MANY_TOOLS; i++) {
        const name = `${P}_t${i}`;
        reg(`t${i}`, 'Answers its own name.', NO_ARGS, () => name);
      }
    }
    if (FAULTS.has('bad_schema')) reg('bad_schema', 'Registered with an invalid schema.', { type: 12 }, echo);
  }
}

module.exports = Stress;
