'use strict';

/**
 * The plugin's spawn token, read once per process.
 *
 * The broker keeps the token out of the plugin's environment (`/proc/<pid>/environ` is
 * readable by every process of the user): it writes the token into a pipe and passes the
 * read end as an inherited file descriptor named by `HEARTH_TOKEN_FD`. `spawnToken()`
 * reads that fd to EOF, closes it and deletes `HEARTH_TOKEN_FD` from `process.env`, so
 * child processes the plugin starts do not read a closed or reused fd number. The
 * runner calls it before loading the plugin's code (and `serve()` before building the
 * plugin), so nothing of the plugin's can have opened a file under that number. Without
 * `HEARTH_TOKEN_FD` the token is `HEARTH_TOKEN` (manual runs, tests with a fake broker).
 */

const fs = require('node:fs');
const util = require('node:util');

const ENV_TOKEN = 'HEARTH_TOKEN';
const ENV_TOKEN_FD = 'HEARTH_TOKEN_FD';
/** More than any token: a pipe that keeps giving is not a token pipe. */
const MAX_TOKEN_BYTES = 64 * 1024;
/** How long a non-blocking pipe may stay empty with its writer open. */
const WAIT_MS = 10000;

/** `HEARTH_TOKEN_FD` is not a number, or its fd cannot be read. */
class TokenError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'TokenError';
  }
}

/** @type {{token: string} | {error: TokenError} | null} */
let cached = null;

/**
 * The spawn token of this process: read from `HEARTH_TOKEN_FD` on the first call, else
 * `HEARTH_TOKEN` (empty when neither is set); the same value (or the same error) on
 * every call.
 * @returns {string}
 * @throws {TokenError}
 */
function spawnToken() {
  if (cached == null) {
    const fdText = process.env[ENV_TOKEN_FD];
    delete process.env[ENV_TOKEN_FD];
    try {
      cached = { token: fdText === undefined ? (process.env[ENV_TOKEN] || '') : readTokenFd(fdText) };
    } catch (e) {
      if (!(e instanceof TokenError)) throw e;
      cached = { error: e };
    }
  }
  if ('error' in cached) throw cached.error;
  return cached.token;
}

/**
 * The token a session uses: `opts.token` when given; else from `env` when it is not
 * `process.env` (its `HEARTH_TOKEN_FD`, read now, or its `HEARTH_TOKEN`); else
 * {@link spawnToken}.
 * @param {{token?: string}} opts
 * @param {Record<string, string | undefined>} env
 * @returns {string}
 * @throws {TokenError}
 */
function resolveToken(opts, env) {
  if (opts.token != null) return opts.token;
  if (env === process.env) return spawnToken();
  const fdText = env[ENV_TOKEN_FD];
  return fdText === undefined ? (env[ENV_TOKEN] || '') : readTokenFd(fdText);
}

/**
 * `Bad file descriptor` for an fs error (the C library's wording), else its message.
 * @param {any} e
 */
function errnoText(e) {
  const known = typeof e.errno === 'number' ? util.getSystemErrorMap().get(e.errno) : undefined;
  return known ? known[1].charAt(0).toUpperCase() + known[1].slice(1) : String(e.message || e);
}

/** @param {number} ms */
function sleepSync(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Reads the token pipe `fdText` to EOF and closes it.
 * @param {string} fdText
 * @returns {string} the token, trailing whitespace trimmed
 * @throws {TokenError} naming HEARTH_TOKEN_FD and what went wrong
 */
function readTokenFd(fdText) {
  const where = `${ENV_TOKEN_FD}=${fdText}`;
  const fail = (/** @type {string} */ why) => new TokenError(`${where}: cannot read the token: ${why}`);
  if (!/^[0-9]{1,9}$/.test(fdText)) throw new TokenError(`${where}: not a file descriptor number`);
  const fd = Number(fdText);
  if (fd <= 2) throw fail(`fd ${fd} is stdin, stdout or stderr`);
  let st;
  try {
    // bigint: a plain fs.fstatSync() here made Node 20's module loader skip realpath
    // afterwards (require('hearth-plugin') through a node_modules symlink then loaded a
    // second copy of the SDK, and `instanceof HostError` failed); the bigint form
    // does not touch the loader's shared stat buffer.
    st = fs.fstatSync(fd, { bigint: true });
  } catch (e) {
    throw fail(errnoText(e));
  }
  // Not ours to close: some other file (Node's own, say) has the number.
  if (!st.isFIFO() && !st.isSocket()) throw fail(`fd ${fd} is not a pipe`);
  const chunks = [];
  let total = 0;
  try {
    const buf = Buffer.alloc(4096);
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      let n;
      try {
        n = fs.readSync(fd, buf, 0, buf.length, null);
      } catch (e) {
        const err = /** @type {any} */ (e);
        if (err.code !== 'EAGAIN') throw fail(errnoText(err));
        // A non-blocking pipe whose writer has not finished yet.
        if (Date.now() > deadline) throw fail(`no end of file within ${WAIT_MS / 1000} s (the writer keeps the pipe open)`);
        sleepSync(5);
        continue;
      }
      if (n === 0) break;
      chunks.push(Buffer.from(buf.subarray(0, n)));
      total += n;
      if (total > MAX_TOKEN_BYTES) throw fail(`more than ${MAX_TOKEN_BYTES} bytes`);
    }
  } finally {
    try { fs.closeSync(fd); } catch (_) { /* closed is the goal */ }
  }
  const data = Buffer.concat(chunks);
  if (data.some((b) => b > 0x7f)) throw fail('it is not ASCII text');
  const token = data.toString('ascii').trimEnd();
  if (!token) throw fail('the pipe held no token');
  return token;
}

module.exports = { spawnToken, resolveToken, TokenError, ENV_TOKEN, ENV_TOKEN_FD };
