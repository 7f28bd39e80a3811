'use strict';

// The package as `npm pack` builds it: every file package.json points at (main, types,
// each `exports` target, bin) is in the tarball, with README and LICENSE, and nothing
// of the tests or the generator script. (Installing the tarball into a fresh folder
// is checked by hand; see the README, "Developing this package".)

const { it } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const SDK = path.join(__dirname, '..');
const pkg = require('../package.json');

it('npm pack ships every file package.json points at, and no tests', (t) => {
  const npm = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: SDK, encoding: 'utf8' });
  if (npm.error) return t.skip(`npm not available: ${npm.error.message}`);
  assert.equal(npm.status, 0, npm.stderr);
  const [info] = JSON.parse(npm.stdout);
  assert.deepEqual([info.name, info.version], ['hearth-plugin', pkg.version]);
  const files = new Set(info.files.map((f) => f.path));
  const targets = [pkg.main, pkg.types, ...Object.values(pkg.bin)];
  const walk = (v) => (typeof v === 'string' ? targets.push(v) : Object.values(v).forEach(walk));
  walk(pkg.exports);
  for (const target of targets) assert.ok(files.has(path.posix.normalize(target)), `${target} is not in the tarball`);
  for (const f of ['README.md', 'LICENSE', 'package.json', 'testing/index.js', 'testing/host/settings.js']) assert.ok(files.has(f), f);
  const stray = [...files].filter((f) => /^(test|scripts|node_modules)\//.test(f));
  assert.deepEqual(stray, []);
  assert.deepEqual([pkg.license, pkg.engines.node, pkg.repository.directory], ['MIT', '>=20', 'sdk-node']);
  assert.ok(pkg.exports['./testing'].require.types && pkg.exports['./testing'].import.types);
  return undefined;
});
