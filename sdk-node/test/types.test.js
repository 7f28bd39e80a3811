'use strict';

// The hand-written public types and the generated ones compile against a plugin in each
// style, from CommonJS-style TS and from an .mts ES module (tsc --noEmit, strict).

const { it } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

it('public and generated TypeScript types compile (tsc --strict --noEmit)', () => {
  const tsc = require.resolve('typescript/bin/tsc', { paths: [path.join(__dirname, '..')] });
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'types', 'tsconfig.json')], { encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});
