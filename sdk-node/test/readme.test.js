'use strict';

// The README's examples run as written. Every ```js (or ```json) block carries
// `example=NAME file=FILE`: the blocks of one example are written to a folder NAME (in a
// temp dir, with hearth-plugin linked into its node_modules, as an npm user has it);
// its *.test.js / *.test.mjs files run with `node --test`, and an example without
// tests must at least load and register.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { load } = require('hearth-plugin/testing');

const SDK = path.join(__dirname, '..');
const README = fs.readFileSync(path.join(SDK, 'README.md'), 'utf8');

/** The fenced blocks of the README: {lang, attrs, code, line}. */
function blocks(text) {
  const out = [];
  const re = /^```(\S*)([^\n]*)\n([\s\S]*?)^```$/gm;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const attrs = Object.fromEntries([...m[2].matchAll(/(\w+)=(\S+)/g)].map((a) => [a[1], a[2]]));
    out.push({ lang: m[1], attrs, code: m[3], line: text.slice(0, m.index).split('\n').length });
  }
  return out;
}

const all = blocks(README);
/** @type {Map<string, Array<{file: string, code: string}>>} */
const examples = new Map();
for (const b of all.filter((x) => x.attrs.example)) {
  if (!examples.has(b.attrs.example)) examples.set(b.attrs.example, []);
  examples.get(b.attrs.example).push({ file: b.attrs.file, code: b.code });
}

describe('README examples', () => {
  let root;
  before(() => { root = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-readme-')); });
  after(() => fs.rmSync(root, { recursive: true, force: true }));

  it('marks every js and json block with example= and file=', () => {
    const unmarked = all.filter((b) => (b.lang === 'js' || b.lang === 'json') && !(b.attrs.example && b.attrs.file));
    assert.deepEqual(unmarked.map((b) => `README.md:${b.line}`), []);
    assert.ok(examples.size >= 4, `examples: ${[...examples.keys()]}`);
  });

  for (const [name, files] of examples) {
    it(`example ${name} (${files.map((f) => f.file).join(', ')}) runs`, async () => {
      const dir = path.join(root, name);
      fs.mkdirSync(path.join(dir, 'node_modules'), { recursive: true });
      fs.symlinkSync(SDK, path.join(dir, 'node_modules', 'hearth-plugin'));
      for (const f of files) fs.writeFileSync(path.join(dir, f.file), f.code);
      const tests = files.map((f) => f.file).filter((f) => /\.test\.m?js$/.test(f));
      if (tests.length) {
        // A test run of its own, as `node --test` from a shell (not a child of this one).
        const env = { ...process.env };
        delete env.NODE_TEST_CONTEXT;
        const r = spawnSync(process.execPath, ['--test', '--test-reporter=tap', ...tests], { cwd: dir, encoding: 'utf8', env });
        assert.equal(r.status, 0, `node --test ${tests.join(' ')} failed:\n${r.stdout}${r.stderr}`);
        assert.match(r.stdout, /# pass [1-9]/);
        assert.match(r.stdout, /# fail 0/);
      } else {
        const entry = files.find((f) => /\.m?js$/.test(f.file));
        const t = await load(path.join(dir, entry.file));
        try {
          assert.ok(t.tools.length + t.triggers.length + t.hooks.length > 0 || t.inject, 'registers something');
        } finally {
          await t.close();
        }
      }
    });
  }
});
