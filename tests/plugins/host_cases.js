// Runs the shared host-service cases (tests/host_cases.json) through the Node SDK's
// typed API (HomeAgent style: `sdk.settings().getCore(...)`, `sdk.memory().mergeEntities(...)` …),
// mapping the file's snake_case names to camelCase.
//
// HOST_CASES_ROLE picks what the plugin does (its name is HEARTH_PLUGIN):
// - `runner` (default): tool `<name>_run` runs the file's `cases` and answers the report
//   {lang, section, total, passed, failed: [...]};
// - `nocap`: the same tool runs `refusals` (manifest `"capabilities": []`);
// - `other`: declares the setting `greeting` (default "hello") in start(), the target of
//   the cases' cross-plugin settings calls; tool `<name>_ping`.
// HOST_CASES_OTHER names that other plugin (`${other}` in the cases).
const fs = require('node:fs');
const path = require('node:path');
const { HostError } = require('hearth-plugin');

const NAME = process.env.HEARTH_PLUGIN || 'host_cases_node';
const ROLE = process.env.HOST_CASES_ROLE || 'runner';
const CASES = process.env.HOST_CASES_FILE || path.join(__dirname, '..', 'host_cases.json');
const LANG = 'node';

// ---------------------------------------------------------------- variables and matching

const VAR = /\$\{(\w+)\}/g;

function lookup(env, name) {
  if (!(name in env)) throw new Error(`unknown variable \${${name}}`);
  return env[name];
}

/** `${name}` substitution (see the `about` of tests/host_cases.json). */
function subst(value, env) {
  if (typeof value === 'string') {
    const whole = /^\$\{(\w+)\}$/.exec(value);
    if (whole) return lookup(env, whole[1]);
    return value.replace(VAR, (_, n) => { const v = lookup(env, n); return typeof v === 'string' ? v : JSON.stringify(v); });
  }
  if (Array.isArray(value)) return value.map((v) => subst(v, env));
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [subst(k, env), subst(v, env)]));
  return value;
}

const show = (v) => JSON.stringify(v === undefined ? null : v);
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const TYPES = {
  string: (v) => typeof v === 'string',
  number: (v) => typeof v === 'number',
  integer: (v) => Number.isInteger(v),
  boolean: (v) => typeof v === 'boolean',
  object: isObj,
  array: Array.isArray,
  null: (v) => v === null,
};

/** null when `got` satisfies `exp`, else why not. */
function match(exp, got, p = '$') {
  if (isObj(exp) && Object.keys(exp).length === 1 && Object.keys(exp)[0].startsWith('$')) {
    const [op, arg] = Object.entries(exp)[0];
    switch (op) {
      case '$any': return null;
      case '$type': return TYPES[arg](got) ? null : `${p}: expected a ${arg}, got ${show(got)}`;
      case '$gt': return typeof got === 'number' && got > arg ? null : `${p}: expected a number > ${arg}, got ${show(got)}`;
      case '$contains': return typeof got === 'string' && got.includes(arg) ? null : `${p}: expected a string containing ${show(arg)}, got ${show(got)}`;
      case '$no_text': return show(got).includes(arg) ? `${p}: ${show(arg)} must not appear in ${show(got)}` : null;
      case '$len': return (Array.isArray(got) || typeof got === 'string' ? got.length : isObj(got) ? Object.keys(got).length : -1) === arg ? null : `${p}: expected length ${arg}, got ${show(got)}`;
      case '$subset': {
        if (!isObj(got)) return `${p}: expected an object, got ${show(got)}`;
        for (const [k, e] of Object.entries(arg)) {
          if (!(k in got)) return `${p}: missing key ${show(k)} in ${show(got)}`;
          const why = match(e, got[k], `${p}.${k}`);
          if (why) return why;
        }
        return null;
      }
      case '$includes': {
        if (!Array.isArray(got)) return `${p}: expected an array, got ${show(got)}`;
        for (const e of arg) if (!got.some((g) => match(e, g) === null)) return `${p}: no element matches ${show(e)} in ${show(got)}`;
        return null;
      }
      case '$unordered': {
        if (!Array.isArray(got) || got.length !== arg.length) return `${p}: expected ${arg.length} elements in any order, got ${show(got)}`;
        const left = [...got];
        for (const e of arg) {
          const i = left.findIndex((g) => match(e, g) === null);
          if (i < 0) return `${p}: no element matches ${show(e)} in ${show(got)}`;
          left.splice(i, 1);
        }
        return null;
      }
      case '$each': {
        if (!Array.isArray(got)) return `${p}: expected an array, got ${show(got)}`;
        for (let i = 0; i < got.length; i++) {
          const why = match(arg, got[i], `${p}[${i}]`);
          if (why) return why;
        }
        return null;
      }
      case '$desc_by': {
        if (!Array.isArray(got) || got.some((g) => !isObj(g) || typeof g[arg] !== 'number')) return `${p}: expected objects with a numeric ${arg}, got ${show(got)}`;
        const vals = got.map((g) => g[arg]);
        return vals.every((v, i) => i === 0 || vals[i - 1] >= v) ? null : `${p}: not sorted by ${arg}, highest first: ${show(vals)}`;
      }
      case '$all': {
        for (const e of arg) {
          const why = match(e, got, p);
          if (why) return why;
        }
        return null;
      }
      default: return `${p}: unknown matcher ${op}`;
    }
  }
  if (isObj(exp)) {
    if (!isObj(got)) return `${p}: expected an object, got ${show(got)}`;
    const a = Object.keys(exp).sort();
    const b = Object.keys(got).sort();
    if (show(a) !== show(b)) return `${p}: keys ${show(b)} instead of ${show(a)}`;
    for (const k of a) {
      const why = match(exp[k], got[k], `${p}.${k}`);
      if (why) return why;
    }
    return null;
  }
  if (Array.isArray(exp)) {
    if (!Array.isArray(got) || got.length !== exp.length) return `${p}: expected ${show(exp)}, got ${show(got)}`;
    for (let i = 0; i < exp.length; i++) {
      const why = match(exp[i], got[i], `${p}[${i}]`);
      if (why) return why;
    }
    return null;
  }
  // JavaScript numbers do not tell 42 from 42.0; the Python and Rust runners do.
  return exp === got ? null : `${p}: expected ${show(exp)}, got ${show(got)}`;
}

// ---------------------------------------------------------------- calls

const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

/** `service.method` → the SDK's typed method. */
function methodOf(sdk, call) {
  const [service, method] = call.split('.');
  if (service === 'input') {
    const inject = sdk[camel(method)];
    return (channel, text) => inject(channel, text);
  }
  const api = sdk[camel(service)]();
  const fn = api[camel(method)];
  if (typeof fn !== 'function') throw new TypeError(`no ${camel(service)}().${camel(method)}`);
  return fn.bind(api);
}

const errorOf = (e) => (e instanceof HostError ? { error: e.code, message: e.details } : { exception: `${e && e.name}: ${e && e.message}` });

function check(step, c, env, ok, value) {
  const args = subst(c.args || [], env);
  const rec = (expected, got) => ({ step, note: c.note || '', call: c.call, args, expected, got: got === undefined ? null : got });
  if (c.error) {
    const want = subst(c.error, env);
    if (ok) return rec({ error: want }, value);
    if (!(value instanceof HostError)) return rec({ error: want }, errorOf(value));
    if (value.code !== want.code || (want.contains || []).some((s) => !value.details.includes(s))) return rec({ error: want }, errorOf(value));
    return null;
  }
  const expected = subst(c.expect, env);
  if (!ok) return rec(expected, errorOf(value));
  const got = value === undefined ? null : value;
  const why = match(expected, got);
  if (why) return { ...rec(expected, got), why };
  if (c.save) env[c.save] = got;
  return null;
}

async function runSection(sdk, section) {
  const cases = JSON.parse(fs.readFileSync(CASES, 'utf8'))[section];
  const env = { self: NAME, other: process.env.HOST_CASES_OTHER || '', lang: LANG };
  const failed = [];
  for (let i = 0; i < cases.length; i++) {
    const c = cases[i];
    let ok = true;
    let value;
    try {
      value = await methodOf(sdk, c.call)(...subst(c.args || [], env));
    } catch (e) {
      ok = false;
      value = e;
    }
    const f = check(i + 1, c, env, ok, value);
    if (f) failed.push(f);
  }
  return { lang: LANG, section, total: cases.length, passed: cases.length - failed.length, failed };
}

class HostCases {
  name() { return NAME; }

  async start(sdk) {
    if (ROLE === 'other') {
      await sdk.settings().registerDef({ key: 'greeting', type: 'string', display_name: 'Greeting', default: 'hello' });
      sdk.registerTool(`${NAME}_ping`, { description: 'Answers pong.' }, () => 'pong');
      return;
    }
    const section = ROLE === 'nocap' ? 'refusals' : 'cases';
    sdk.registerTool(`${NAME}_run`, { description: `Runs the host-service ${section}.` }, () => runSection(sdk, section));
  }
}

module.exports = HostCases;
