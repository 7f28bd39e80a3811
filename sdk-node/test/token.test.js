'use strict';

// The spawn token reaches the plugin through an inherited pipe (HEARTH_TOKEN_FD), never
// through its environment; a bad HEARTH_TOKEN_FD is a clear error at start.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { FakeBroker, BOOTSTRAP, fixture } = require('./helpers/broker');

const PROBE = fixture('token-probe');
const PROBE_SCRIPT = fixture('token-probe', 'serve.js');

/** The fds of process `pid` that refer to the file {dev, ino}. */
function fdsOf(pid, file) {
  const found = [];
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      const st = fs.statSync(`/proc/${pid}/fd/${fd}`);
      if (st.dev === file.dev && st.ino === file.ino) found.push(fd);
    } catch (_) { /* closed meanwhile */ }
  }
  return found;
}

describe('spawn token through an inherited pipe (HEARTH_TOKEN_FD)', () => {
  for (const [how, entry, script] of [['the runner', PROBE, false], ['serve() in the plugin script', PROBE_SCRIPT, true]]) {
    it(`authenticates with the token from the pipe alone, leaving it nowhere (${how})`, async () => {
      const broker = await FakeBroker.start();
      try {
        // The fake broker refuses Attach with a wrong token (UNAUTHENTICATED).
        const p = await broker.attach(entry, { tokenPipe: true, script, name: 'token_probe' });
        assert.equal(p.register.plugin.name, 'token_probe');
        assert.equal(broker.unauthenticated, 0);
        const pid = p.proc.proc.pid;
        // /proc/<pid>/environ is the environment the process started with: the token was
        // never in it (HEARTH_TOKEN_FD=3 is, as a number only; deleting a variable later
        // does not rewrite this initial block).
        const environ = fs.readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0');
        assert.ok(!environ.some((v) => v.includes(broker.token)), 'token in /proc/<pid>/environ');
        assert.ok(!environ.some((v) => v.startsWith('HEARTH_TOKEN=')), 'HEARTH_TOKEN in /proc/<pid>/environ');
        // The pipe is closed: no fd of the plugin refers to it any more.
        assert.deepEqual(fdsOf(pid, p.proc.tokenPipe), []);
        // Inside the plugin HEARTH_TOKEN_FD is gone, and its child processes never see it.
        const r = await p.session.call1(1, 'token_probe', {});
        assert.equal(r.success, true, r.error);
        assert.deepEqual(JSON.parse(r.content), { fdEnv: null, tokenEnv: null, childFdEnv: 'undefined' });
      } finally {
        await broker.close();
      }
    });
  }

  for (const [value, error] of [
    ['987', 'HEARTH_TOKEN_FD=987: cannot read the token: Bad file descriptor'],
    ['three', 'HEARTH_TOKEN_FD=three: not a file descriptor number'],
    ['1', 'HEARTH_TOKEN_FD=1: cannot read the token: fd 1 is stdin, stdout or stderr'],
  ]) {
    it(`HEARTH_TOKEN_FD=${value} exits 2 naming it, without attaching`, async () => {
      const broker = await FakeBroker.start();
      try {
        // HEARTH_TOKEN is set as well: a bad HEARTH_TOKEN_FD does not fall back to it.
        const proc = broker.spawn(PROBE, { env: { HEARTH_TOKEN_FD: value } });
        const { code } = await proc.exit();
        assert.equal(code, 2, proc.stderr);
        assert.ok(proc.stderr.includes(`hearth-plugin: plugin token-probe: ${error}\n`), proc.stderr);
        assert.equal(broker.sessions.length + broker.unauthenticated, 0);
      } finally {
        await broker.close();
      }
    });
  }

  it('an fd that is not a pipe is refused, not read', async () => {
    const broker = await FakeBroker.start();
    try {
      // A regular file holding the token, inherited as fd 3: not the pipe the contract names.
      const file = path.join(broker.dir, 'token.txt');
      fs.writeFileSync(file, `${broker.token}\n`);
      const fd = fs.openSync(file, 'r');
      const proc = spawn(process.execPath, ['-e', BOOTSTRAP, PROBE], {
        cwd: path.dirname(PROBE),
        env: { ...process.env, HEARTH_ADDR: broker.addr, HEARTH_PLUGIN: 'token_probe', HEARTH_TOKEN_FD: '3', HEARTH_TOKEN: undefined },
        stdio: ['ignore', 'pipe', 'pipe', fd],
      });
      fs.closeSync(fd);
      let stderr = '';
      proc.stderr.on('data', (d) => { stderr += d; });
      const code = await new Promise((resolve) => proc.on('close', resolve));
      assert.equal(code, 2, stderr);
      assert.ok(stderr.includes('hearth-plugin: plugin token_probe: HEARTH_TOKEN_FD=3: cannot read the token: fd 3 is not a pipe\n'), stderr);
      assert.equal(broker.sessions.length + broker.unauthenticated, 0);
    } finally {
      await broker.close();
    }
  });

  it('serve() reports a bad HEARTH_TOKEN_FD from the session (exit 2)', async () => {
    const broker = await FakeBroker.start();
    try {
      const proc = broker.spawn(PROBE_SCRIPT, { script: true, env: { HEARTH_TOKEN_FD: '987' } });
      const { code } = await proc.exit();
      assert.equal(code, 2, proc.stderr);
      assert.ok(proc.stderr.includes('HEARTH_TOKEN_FD=987: cannot read the token: Bad file descriptor\n'), proc.stderr);
      assert.equal(broker.sessions.length + broker.unauthenticated, 0);
    } finally {
      await broker.close();
    }
  });
});
