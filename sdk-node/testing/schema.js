'use strict';

/**
 * Tool argument schemas as the broker handles them (broker/src/schema.rs and
 * broker/src/registry.rs `build`): the JSON Schema a LinkZone `ai.tool` parameter list
 * becomes, the description the LLM reads, the check a schema gets at registration, and
 * the validation of call arguments before dispatch, with the broker's error text
 * ("argument `city`: 12 is not of type \"string\"").
 *
 * The validator covers the keywords tool schemas use (JSON Schema 2020-12): `type`
 * (a name or an array of names, `null` included), `const`, `enum`, `minimum`,
 * `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`, `minLength`,
 * `maxLength`, `minItems`, `maxItems`, `minProperties`, `maxProperties`, `required`,
 * `pattern`, `uniqueItems`, `properties`, `patternProperties`, `additionalProperties`,
 * `items`, `prefixItems`, `contains`, `allOf`, `anyOf`, `oneOf`, `not` and local
 * `$ref`s (`#/$defs/…`). Other keywords (`format`, `description`, …) are annotations,
 * as they are for the broker. Keywords are checked in the broker's validator's order
 * (`type` first, `properties` before `anyOf`) and the first violation is reported, so
 * the message names the same argument the broker would.
 */

/** The broker's order of keyword checks (jsonschema's `keyword_priority`). */
const ORDER = [
  'type', 'const', 'enum', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
  'minLength', 'maxLength', 'minItems', 'maxItems', 'minProperties', 'maxProperties', 'required',
  'pattern', 'uniqueItems', 'properties', 'patternProperties', 'additionalProperties', 'items',
  'prefixItems', 'contains', 'allOf', 'anyOf', 'oneOf', 'not',
];

/** JSON type names in the order the broker lists them. */
const TYPE_NAMES = ['null', 'boolean', 'integer', 'number', 'string', 'array', 'object'];

/** LinkZone parameter types (schema.rs `linkzone_schema`). */
const LINKZONE_TYPES = ['string', 'number', 'integer', 'boolean', 'object', 'array'];

/** A value as the broker prints it in messages (compact JSON). */
const show = (/** @type {unknown} */ v) => JSON.stringify(v);

/** @param {unknown} v */
function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** @param {unknown} v @param {string} t */
function hasType(v, t) {
  switch (t) {
    case 'null': return v === null;
    case 'boolean': return typeof v === 'boolean';
    case 'integer': return typeof v === 'number' && Number.isInteger(v);
    case 'number': return typeof v === 'number';
    case 'string': return typeof v === 'string';
    case 'array': return Array.isArray(v);
    case 'object': return isObject(v);
    default: return false;
  }
}

/**
 * JSON equality (objects by keys, arrays by items, numbers by value).
 * @param {unknown} a
 * @param {unknown} b
 * @returns {boolean}
 */
function jsonEqual(a, b) {
  if (a === b) return true;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(/** @type {object} */ (a));
    const kb = Object.keys(/** @type {object} */ (b));
    return ka.length === kb.length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && jsonEqual(/** @type {any} */ (a)[k], /** @type {any} */ (b)[k]));
  }
  return false;
}

/** @param {string} s the number of Unicode characters (code points), as Rust counts */
const chars = (s) => [...s].length;

/** `'a', 'b'` as the broker quotes property names. */
const quoted = (/** @type {string[]} */ names) => names.map((n) => `'${n}'`).join(', ');

/** @param {unknown} value @param {unknown[]} options */
function enumMessage(value, options) {
  let text = `${show(value)} is not one of `;
  if (options.length <= 3) {
    text += options.map((o, i) => (i === 0 ? show(o) : i === options.length - 1 ? ` or ${show(o)}` : `, ${show(o)}`)).join('');
  } else {
    text += `${options.slice(0, 2).map(show).join(', ')} or ${options.length - 2} other candidates`;
  }
  return text;
}

/**
 * @typedef {{path: Array<string | number>, message: string}} Violation
 */

/** A compiled-on-the-fly check of one instance against a schema (with its root for `$ref`). */
class Checker {
  /** @param {unknown} root */
  constructor(root) {
    this.root = root;
    /** @type {Map<string, RegExp>} */
    this.regexes = new Map();
  }

  /** @param {string} pattern */
  regex(pattern) {
    let re = this.regexes.get(pattern);
    if (!re) {
      re = new RegExp(pattern, 'u');
      this.regexes.set(pattern, re);
    }
    return re;
  }

  /** @param {string} ref */
  resolve(ref) {
    if (!ref.startsWith('#')) throw new Error(`$ref ${ref}: only local references (#/…) are supported`);
    let node = /** @type {any} */ (this.root);
    for (const raw of ref.slice(1).split('/').slice(1)) {
      const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
      if (node == null || typeof node !== 'object' || !(key in node)) throw new Error(`$ref ${ref} does not resolve`);
      node = node[key];
    }
    return node;
  }

  /**
   * The first violation of `schema` by `v`, or null.
   * @param {any} schema
   * @param {any} v
   * @param {Array<string | number>} path
   * @returns {Violation | null}
   */
  check(schema, v, path) {
    if (schema === true) return null;
    if (schema === false) return { path, message: `False schema does not allow ${show(v)}` };
    if (!isObject(schema)) return null;
    if (typeof schema.$ref === 'string') {
      const found = this.check(this.resolve(schema.$ref), v, path);
      if (found) return found;
    }
    // Like the broker's validator, `additionalProperties` (false or a schema) walks the
    // object's members in key order and checks `properties` and `patternProperties` on
    // the way; with `false`, `properties` and a single `required` name it reports that
    // name last.
    const ap = schema.additionalProperties;
    const walk = ap === false || isObject(ap);
    const fusedRequired = ap === false && isObject(schema.properties) && Array.isArray(schema.required) && schema.required.length === 1 && !('patternProperties' in schema);
    for (const kw of ORDER) {
      if (!(kw in schema)) continue;
      if (walk && (kw === 'properties' || kw === 'patternProperties')) continue;
      if (fusedRequired && kw === 'required') continue;
      const found = this.keyword(kw, schema[kw], schema, v, path);
      if (found) return found;
      if (fusedRequired && kw === 'additionalProperties') {
        const missing = this.keyword('required', schema.required, schema, v, path);
        if (missing) return missing;
      }
    }
    return null;
  }

  /**
   * @param {string} kw
   * @param {any} s the keyword's value
   * @param {any} schema
   * @param {any} v
   * @param {Array<string | number>} path
   * @returns {Violation | null}
   */
  keyword(kw, s, schema, v, path) {
    const fail = (/** @type {string} */ message) => ({ path, message });
    const num = typeof v === 'number';
    const str = typeof v === 'string';
    const arr = Array.isArray(v);
    const obj = isObject(v);
    switch (kw) {
      case 'type': {
        const types = Array.isArray(s) ? s : [s];
        if (types.some((t) => hasType(v, t))) return null;
        if (types.length === 1) return fail(`${show(v)} is not of type "${types[0]}"`);
        const listed = TYPE_NAMES.filter((t) => types.includes(t)).map((t) => `"${t}"`).join(', ');
        return fail(`${show(v)} is not of types ${listed}`);
      }
      case 'const': return jsonEqual(v, s) ? null : fail(`${show(s)} was expected`);
      case 'enum': return Array.isArray(s) && !s.some((o) => jsonEqual(o, v)) ? fail(enumMessage(v, s)) : null;
      case 'minimum': return num && v < s ? fail(`${show(v)} is less than the minimum of ${show(s)}`) : null;
      case 'maximum': return num && v > s ? fail(`${show(v)} is greater than the maximum of ${show(s)}`) : null;
      case 'exclusiveMinimum': return num && typeof s === 'number' && v <= s ? fail(`${show(v)} is less than or equal to the minimum of ${show(s)}`) : null;
      case 'exclusiveMaximum': return num && typeof s === 'number' && v >= s ? fail(`${show(v)} is greater than or equal to the maximum of ${show(s)}`) : null;
      case 'multipleOf': {
        if (!num || typeof s !== 'number' || s <= 0) return null;
        const q = v / s;
        return Math.abs(q - Math.round(q)) > 1e-9 ? fail(`${show(v)} is not a multiple of ${show(s)}`) : null;
      }
      case 'minLength': return str && chars(v) < s ? fail(`${show(v)} is shorter than ${s} character${s === 1 ? '' : 's'}`) : null;
      case 'maxLength': return str && chars(v) > s ? fail(`${show(v)} is longer than ${s} character${s === 1 ? '' : 's'}`) : null;
      case 'minItems': return arr && v.length < s ? fail(`${show(v)} has less than ${s} item${s === 1 ? '' : 's'}`) : null;
      case 'maxItems': return arr && v.length > s ? fail(`${show(v)} has more than ${s} item${s === 1 ? '' : 's'}`) : null;
      case 'minProperties': return obj && Object.keys(v).length < s ? fail(`${show(v)} has less than ${s} propert${s === 1 ? 'y' : 'ies'}`) : null;
      case 'maxProperties': return obj && Object.keys(v).length > s ? fail(`${show(v)} has more than ${s} propert${s === 1 ? 'y' : 'ies'}`) : null;
      case 'required': {
        if (!obj || !Array.isArray(s)) return null;
        const missing = s.find((k) => !Object.prototype.hasOwnProperty.call(v, k));
        return missing === undefined ? null : fail(`${show(missing)} is a required property`);
      }
      case 'pattern': return str && !this.regex(s).test(v) ? fail(`${show(v)} does not match "${s}"`) : null;
      case 'uniqueItems': {
        if (!arr || s !== true) return null;
        for (let i = 0; i < v.length; i++) for (let j = i + 1; j < v.length; j++) if (jsonEqual(v[i], v[j])) return fail(`${show(v)} has non-unique elements`);
        return null;
      }
      case 'properties': {
        if (!obj || !isObject(s)) return null;
        for (const k of Object.keys(s).sort()) {
          if (!Object.prototype.hasOwnProperty.call(v, k)) continue;
          const found = this.check(s[k], v[k], [...path, k]);
          if (found) return found;
        }
        return null;
      }
      case 'patternProperties': {
        if (!obj || !isObject(s)) return null;
        for (const [p, sub] of Object.entries(s)) {
          for (const k of Object.keys(v).sort()) {
            if (!this.regex(p).test(k)) continue;
            const found = this.check(sub, v[k], [...path, k]);
            if (found) return found;
          }
        }
        return null;
      }
      case 'additionalProperties': {
        if (!obj) return null;
        const props = isObject(schema.properties) ? schema.properties : {};
        const patterns = isObject(schema.patternProperties) ? Object.entries(schema.patternProperties) : [];
        const extra = [];
        for (const k of Object.keys(v).sort()) {
          let declared = false;
          if (Object.prototype.hasOwnProperty.call(props, k)) {
            declared = true;
            const found = this.check(props[k], v[k], [...path, k]);
            if (found) return found;
          }
          for (const [p, sub] of patterns) {
            if (!this.regex(p).test(k)) continue;
            declared = true;
            const found = this.check(sub, v[k], [...path, k]);
            if (found) return found;
          }
          if (declared) continue;
          if (s === false) extra.push(k);
          else {
            const found = this.check(s, v[k], [...path, k]);
            if (found) return found;
          }
        }
        return extra.length ? fail(`Additional properties are not allowed (${quoted(extra)} ${extra.length === 1 ? 'was' : 'were'} unexpected)`) : null;
      }
      case 'items': {
        if (!arr) return null;
        const start = Array.isArray(schema.prefixItems) ? schema.prefixItems.length : 0;
        for (let i = start; i < v.length; i++) {
          const found = this.check(s, v[i], [...path, i]);
          if (found) return found;
        }
        return null;
      }
      case 'prefixItems': {
        if (!arr || !Array.isArray(s)) return null;
        for (let i = 0; i < Math.min(s.length, v.length); i++) {
          const found = this.check(s[i], v[i], [...path, i]);
          if (found) return found;
        }
        return null;
      }
      case 'contains': return arr && !v.some((x) => this.check(s, x, path) === null) ? fail(`None of ${show(v)} are valid under the given schema`) : null;
      case 'allOf': {
        if (!Array.isArray(s)) return null;
        for (const sub of s) {
          const found = this.check(sub, v, path);
          if (found) return found;
        }
        return null;
      }
      case 'anyOf':
        return Array.isArray(s) && !s.some((sub) => this.check(sub, v, path) === null)
          ? fail(`${show(v)} is not valid under any of the schemas listed in the 'anyOf' keyword`) : null;
      case 'oneOf': {
        if (!Array.isArray(s)) return null;
        const valid = s.filter((sub) => this.check(sub, v, path) === null).length;
        if (valid === 0) return fail(`${show(v)} is not valid under any of the schemas listed in the 'oneOf' keyword`);
        if (valid > 1) return fail(`${show(v)} is valid under more than one of the schemas listed in the 'oneOf' keyword`);
        return null;
      }
      case 'not': return this.check(s, v, path) === null ? fail(`${show(s)} is not allowed for ${show(v)}`) : null;
      default: return null;
    }
  }
}

/**
 * The first violation of `schema` by `value`, with the path of the offending value
 * (`['city']`, `['stops', 2, 'name']`; `[]` = the arguments object itself), or null.
 * @param {unknown} schema a JSON Schema (object or boolean)
 * @param {unknown} value
 * @returns {Violation | null}
 */
function firstViolation(schema, value) {
  return new Checker(schema).check(schema, value, []);
}

/**
 * The broker's text of a violation of call arguments (schema.rs `ArgsSchema::validate`):
 * "argument `city`: 12 is not of type \"string\"", or at the top level
 * "arguments: \"city\" is a required property".
 * @param {Violation} v
 * @returns {string}
 */
function violationText(v) {
  return v.path.length ? `argument \`${v.path.join('.')}\`: ${v.message}` : `arguments: ${v.message}`;
}

// --- schema checks at registration (schema.rs ArgsSchema::from_value) --------------

const SCHEMA_ARRAYS = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];
const SCHEMA_VALUES = ['not', 'items', 'additionalProperties', 'contains', 'propertyNames', 'if', 'then', 'else'];
const SCHEMA_MAPS = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];
const NUMBERS = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'];
const COUNTS = ['minLength', 'maxLength', 'minItems', 'maxItems', 'minProperties', 'maxProperties'];

/**
 * The first way `schema` is not a valid JSON Schema: `{at: '/properties/x/type', message}`,
 * or null. Checks the keywords' shapes (what the broker's meta-schema check catches
 * for tool schemas) and that every `pattern` compiles.
 * @param {unknown} schema
 * @param {string} [at]
 * @returns {{at: string, message: string} | null}
 */
function schemaProblem(schema, at = '') {
  if (typeof schema === 'boolean') return null;
  if (!isObject(schema)) return { at, message: `${show(schema)} is not of types "boolean", "object"` };
  const s = /** @type {Record<string, any>} */ (schema);
  const bad = (/** @type {string} */ kw, /** @type {string} */ message) => ({ at: `${at}/${kw}`, message });
  if ('type' in s) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    if (!types.length || types.some((t) => !TYPE_NAMES.includes(t))) return bad('type', `${show(s.type)} is not valid under any of the schemas listed in the 'anyOf' keyword`);
  }
  if ('required' in s && (!Array.isArray(s.required) || s.required.some((k) => typeof k !== 'string'))) return bad('required', `${show(s.required)} is not of type "array"`);
  if ('enum' in s && !Array.isArray(s.enum)) return bad('enum', `${show(s.enum)} is not of type "array"`);
  for (const kw of NUMBERS) if (kw in s && typeof s[kw] !== 'number') return bad(kw, `${show(s[kw])} is not of type "number"`);
  for (const kw of COUNTS) if (kw in s && !(Number.isInteger(s[kw]) && s[kw] >= 0)) return bad(kw, `${show(s[kw])} is not of type "integer"`);
  if ('multipleOf' in s && !(typeof s.multipleOf === 'number' && s.multipleOf > 0)) return bad('multipleOf', `${show(s.multipleOf)} is less than or equal to the minimum of 0`);
  if ('pattern' in s) {
    if (typeof s.pattern !== 'string') return bad('pattern', `${show(s.pattern)} is not of type "string"`);
    try { new RegExp(s.pattern, 'u'); } catch (e) { return bad('pattern', `${show(s.pattern)} is not a "regex"`); }
  }
  for (const kw of SCHEMA_ARRAYS) {
    if (!(kw in s)) continue;
    if (!Array.isArray(s[kw]) || !s[kw].length) return bad(kw, `${show(s[kw])} is not of type "array"`);
    for (let i = 0; i < s[kw].length; i++) {
      const p = schemaProblem(s[kw][i], `${at}/${kw}/${i}`);
      if (p) return p;
    }
  }
  for (const kw of SCHEMA_VALUES) {
    if (!(kw in s)) continue;
    const p = schemaProblem(s[kw], `${at}/${kw}`);
    if (p) return p;
  }
  for (const kw of SCHEMA_MAPS) {
    if (!(kw in s)) continue;
    if (!isObject(s[kw])) return bad(kw, `${show(s[kw])} is not of type "object"`);
    for (const [k, sub] of Object.entries(s[kw])) {
      if (kw === 'patternProperties') {
        try { new RegExp(k, 'u'); } catch (e) { return bad(kw, `${show(k)} is not a "regex"`); }
      }
      const p = schemaProblem(sub, `${at}/${kw}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`);
      if (p) return p;
    }
  }
  return null;
}

/**
 * Checks a tool's parameter schema as the broker does at registration; returns the
 * rejection reason, or null when it is usable.
 * @param {unknown} schema
 * @returns {string | null}
 */
function checkToolSchema(schema) {
  if (!isObject(schema)) return 'parameters must be a JSON Schema object';
  const p = schemaProblem(schema);
  if (p) return `parameters is not a valid JSON Schema${p.at ? ` at ${p.at}` : ''}: ${p.message}`;
  const t = /** @type {any} */ (schema).type;
  if (t !== undefined && t !== 'object') return `parameters must describe an object ("type": "object"), not ${show(t)}`;
  try {
    firstViolation(schema, {});
  } catch (e) {
    return `parameters is not a usable JSON Schema: ${/** @type {Error} */ (e).message}`;
  }
  return null;
}

/**
 * The JSON Schema of a LinkZone `ai.tool` parameter list, as the broker derives it
 * (schema.rs `linkzone_schema`); `params` are wire `AiToolParameter`s (`defaultJson`,
 * `enumJson`). Throws an Error whose message is the broker's rejection reason.
 * @param {Array<{name: string, type: string, description: string, required: boolean, defaultJson: string, enumJson: string, example: string}>} params
 * @returns {Record<string, unknown>}
 */
function linkZoneSchema(params) {
  /** @type {Record<string, any>} */
  const properties = {};
  const required = [];
  for (const p of params) {
    if (!p.name.trim()) throw new Error('a parameter has an empty name');
    if (Object.prototype.hasOwnProperty.call(properties, p.name)) throw new Error(`parameter \`${p.name}\` is defined twice`);
    const type = p.type || 'string';
    if (!LINKZONE_TYPES.includes(type)) throw new Error(`parameter \`${p.name}\`: type \`${type}\` is not one of string, number, integer, boolean, object, array`);
    /** @type {Record<string, unknown>} */
    const prop = { type };
    if (p.description) prop.description = p.description;
    if (p.defaultJson) {
      try { prop.default = JSON.parse(p.defaultJson); } catch (e) { throw new Error(`parameter \`${p.name}\`: default is not valid JSON: ${/** @type {Error} */ (e).message}`); }
    }
    if (p.enumJson) {
      let e;
      try { e = JSON.parse(p.enumJson); } catch (err) { throw new Error(`parameter \`${p.name}\`: enum is not valid JSON: ${/** @type {Error} */ (err).message}`); }
      if (!Array.isArray(e)) throw new Error(`parameter \`${p.name}\`: enum must be an array`);
      prop.enum = e;
    }
    if (p.example) prop.examples = [p.example];
    if (p.required) required.push(p.name);
    properties[p.name] = prop;
  }
  /** @type {Record<string, unknown>} */
  const schema = { type: 'object', properties };
  if (required.length) schema.required = required;
  return schema;
}

/**
 * The description the LLM reads for a LinkZone tool (schema.rs `linkzone_description`).
 * @param {string} usage
 * @param {string} whenToUse
 */
function linkZoneDescription(usage, whenToUse) {
  const u = usage.trim();
  const w = whenToUse.trim();
  if (!u && !w) return '';
  if (!w) return u;
  if (!u) return `When to use: ${w}`;
  return `${u}\nWhen to use: ${w}`;
}

/**
 * The broker's check of a tool name (registry.rs `check_name`); null when valid.
 * @param {string} name
 */
function toolNameProblem(name) {
  if (!name) return 'tool name is empty';
  const bytes = Buffer.byteLength(name);
  if (bytes > 64) return `tool name is ${bytes} bytes; at most 64`;
  const bad = [...name].find((c) => !/[A-Za-z0-9_-]/.test(c));
  return bad === undefined ? null : `tool name contains '${bad}'; use letters, digits, \`_\` and \`-\``;
}

module.exports = { firstViolation, violationText, checkToolSchema, linkZoneSchema, linkZoneDescription, toolNameProblem, jsonEqual, isObject };
