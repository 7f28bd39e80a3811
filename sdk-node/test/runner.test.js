'use strict';

// The runner's answer to a plugin whose dependencies are missing: exit 2 and, as the
// last stderr line (the broker shows a failed plugin's last lines as the reason), one
// line saying what is missing and how to install it. Plugins live outside the repo (a
// temp dir) with hearth-plugin linked into their node_modules, and start through the
// broker's own bootstrap.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { NODE_BOOTSTRAP } = require('hearth-plugin/testing');

const SDK = path.join(__dirname, '..');
const PROCESS_RS = path.join(SDK, '..', 'broker', 'src', 'supervisor', 'process.rs');

/** The broker's NODE_BOOTSTRAP from process.rs (when the source is here), else the testing copy. */
function brokerBootstrap() {
  if (!fs.existsSync(PROCESS_RS)) return NODE_BOOTSTRAP;
  const m = /const NODE_BOOTSTRAP: &str = "((?:[^"\\]|\\[\s\S])*)";/.exec(fs.readFileSync(PROCESS_RS, 'utf8'));
  assert.ok(m, 'NODE_BOOTSTRAP not found in process.rs');
  return m[1].replace(/\\\n\s*/g, '').replace(/\\(["\\'])/g, '$1');
}

/**
 * What the bootstrap could do when hearth-plugin itself cannot be resolved (proposed for
 * process.rs): print one line like the runner's and exit 2, instead of Node's stack.
 */
const PROPOSED_BOOTSTRAP = "const p=require('path');const e=p.resolve(process.argv[1]);let r;"
  + "try{r=require.resolve('hearth-plugin/runner',{paths:[p.dirname(e)]})}catch(_){"
  + "try{r=require.resolve('hearth-plugin/runner')}catch(_){"
  + "process.stderr.write('hearth-plugin: cannot load '+e+\": module 'hearth-plugin' not found (the broker resolves hearth-plugin/runner from \"+p.dirname(e)+'); run `npm install hearth-plugin` in '+p.dirname(e)+'\\n');"
  + 'process.exit(2)}}require(r).main(e)';

/** Runs `node -e bootstrap entry` in the entry's folder; resolves {code, stderr, last}. */
function run(bootstrap, entry) {
  return new Promise((resolve) => {
    const env = { ...process.env, HEARTH_ADDR: 'unix:///nonexistent/hearth.sock', HEARTH_PLUGIN: 'p', HEARTH_TOKEN: 't' };
    delete env.NODE_PATH;
    const proc = spawn(process.execPath, ['-e', bootstrap, entry], { cwd: path.dirname(entry), env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    proc.stderr.on('data', (d) => { stderr += d; });
    proc.on('close', (code) => resolve({ code, stderr, last: stderr.trimEnd().split('\n').at(-1) }));
  });
}

describe('runner: missing modules', () => {
  let root;
  /** A plugin folder under the temp root with `files`; `link` puts hearth-plugin in its node_modules. */
  const plugin = (name, files, link = true) => {
    const dir = path.join(root, name);
    fs.mkdirSync(dir, { recursive: true });
    for (const [f, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(dir, f)), { recursive: true });
      fs.writeFileSync(path.join(dir, f), text);
    }
    if (link) {
      fs.mkdirSync(path.join(dir, 'node_modules'), { recursive: true });
      fs.symlinkSync(SDK, path.join(dir, 'node_modules', 'hearth-plugin'));
    }
    return dir;
  };
  before(() => { root = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-runner-')); });
  after(() => fs.rmSync(root, { recursive: true, force: true }));

  const bootstrap = brokerBootstrap();
  const cases = [
    ['a missing package (CommonJS)', 'cjs', { 'package.json': '{"name":"cjs"}', 'index.js': "const { Plugin } = require('hearth-plugin');\nrequire('left-pad');\n" }, 'index.js',
      (dir) => `hearth-plugin: cannot load ${dir}/index.js: module 'left-pad' not found (required from ${dir}/index.js); run \`npm install left-pad\` in ${dir}`],
    ['a missing scoped package imported by an ES module', 'esm', { 'index.mjs': "import { Plugin } from 'hearth-plugin';\nimport pad from '@acme/pad/sub.js';\nexport default class P extends Plugin {}\n" }, 'index.mjs',
      (dir) => `hearth-plugin: cannot load ${dir}/index.mjs: module '@acme/pad' not found (required from ${dir}/index.mjs); run \`npm install @acme/pad\` in ${dir}`],
    ['a missing package required from a helper file', 'nested', { 'index.js': "require('./lib/util');\n", 'lib/util.js': "require('lodash/fp');\n" }, 'index.js',
      (dir) => `hearth-plugin: cannot load ${dir}/index.js: module 'lodash/fp' not found (required from ${dir}/lib/util.js); run \`npm install lodash\` in ${dir}`],
    ['a missing relative file', 'relative', { 'index.js': "require('./lib/nothere');\n" }, 'index.js',
      (dir) => `hearth-plugin: cannot load ${dir}/index.js: file './lib/nothere' not found (required from ${dir}/index.js)`],
    ['a dependency of an installed package', 'broken', { 'index.js': "require('foo');\n", 'node_modules/foo/index.js': "require('bar');\n" }, 'index.js',
      (dir) => `hearth-plugin: cannot load ${dir}/index.js: module 'bar' not found (required from ${dir}/node_modules/foo/index.js); an installed package is incomplete: run \`npm install\` in ${dir}`],
  ];
  for (const [what, name, files, entry, expected] of cases) {
    it(`names ${what} and how to install it, as the last stderr line, exit 2`, async () => {
      const dir = plugin(name, files);
      const r = await run(bootstrap, path.join(dir, entry));
      assert.equal(r.code, 2, r.stderr);
      assert.equal(r.last, expected(dir));
    });
  }

  it('names hearth-plugin when the plugin cannot resolve it (the runner found elsewhere)', async () => {
    const dir = plugin('nosdk', { 'index.js': "const { Plugin } = require('hearth-plugin');\nmodule.exports = class extends Plugin {};\n" }, false);
    const runner = `require(${JSON.stringify(path.join(SDK, 'runner.js'))}).main(process.argv[1])`;
    const r = await run(runner, path.join(dir, 'index.js'));
    assert.equal(r.code, 2, r.stderr);
    assert.equal(r.last, `hearth-plugin: cannot load ${dir}/index.js: module 'hearth-plugin' not found (required from ${dir}/index.js); run \`npm install hearth-plugin\` in ${dir}`);
  });

  it('a syntax error is one line naming the file and line', async () => {
    const dir = plugin('syntax', { 'index.js': "const { Plugin } = require('hearth-plugin');\nconst x = ;\n" });
    const r = await run(bootstrap, path.join(dir, 'index.js'));
    assert.equal(r.code, 2, r.stderr);
    assert.equal(r.last, `hearth-plugin: loading ${dir}/index.js failed: SyntaxError: Unexpected token ';' (at ${dir}/index.js:2)`);
    assert.equal(r.stderr.trimEnd().split('\n').length, 1, r.stderr);
  });

  it('a missing entry file says so', async () => {
    const dir = plugin('noentry', {});
    const r = await run(bootstrap, path.join(dir, 'index.js'));
    assert.equal(r.code, 2, r.stderr);
    assert.equal(r.last, `hearth-plugin: cannot load ${dir}/index.js: the file does not exist`);
  });

  it('the proposed bootstrap names a missing hearth-plugin in one line (exit 2)', async () => {
    const dir = plugin('bare', { 'index.js': 'module.exports = {};\n' }, false);
    const r = await run(PROPOSED_BOOTSTRAP, path.join(dir, 'index.js'));
    assert.equal(r.code, 2, r.stderr);
    assert.equal(r.stderr, `hearth-plugin: cannot load ${dir}/index.js: module 'hearth-plugin' not found (the broker resolves hearth-plugin/runner from ${dir}); run \`npm install hearth-plugin\` in ${dir}\n`);
    // With hearth-plugin installed, it serves as the current one does.
    const ok = plugin('linked', { 'index.js': "require('left-pad');\n" });
    assert.match((await run(PROPOSED_BOOTSTRAP, path.join(ok, 'index.js'))).last, /module 'left-pad' not found/);
  });

  it("the broker's bootstrap names a missing hearth-plugin in one line", async (t) => {
    if (!/npm install/.test(bootstrap)) return t.skip('process.rs NODE_BOOTSTRAP does not report a missing hearth-plugin yet (see PROPOSED_BOOTSTRAP)');
    const dir = plugin('bare2', { 'index.js': 'module.exports = {};\n' }, false);
    const r = await run(bootstrap, path.join(dir, 'index.js'));
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.last, /^hearth-plugin: cannot load .*: module 'hearth-plugin' not found .*run `npm install hearth-plugin` in /);
    return undefined;
  });
});
