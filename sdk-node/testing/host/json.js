'use strict';

/**
 * JSON values as the broker's serde_json holds them, for the settings fake: JavaScript's
 * numbers lose what the broker keeps (`2.0` is an f64 there, `2` an integer), so values
 * are read from their JSON text into a small tree and written back as serde_json writes
 * them. A number written with a fraction or an exponent, an integer outside i64/u64,
 * and `-0` are f64 ("a number with a fraction"); objects keep the last of duplicate keys
 * and list their keys sorted (by code point); f64 text is the shortest digits laid out
 * as serde_json does (`3.0`, `0.00001`, `1e-6`, `1.5e+16`).
 */

/**
 * @typedef {{t: 'null'} | {t: 'bool', v: boolean} | {t: 'int', v: string} | {t: 'f64', v: number}
 *   | {t: 'str', v: string} | {t: 'arr', v: Node[]} | {t: 'obj', v: Map<string, Node>}} Node
 */

const I64_MIN = -(2n ** 63n);
const U64_MAX = 2n ** 64n - 1n;

/**
 * Parses JSON `text` (already known to be JSON: `JSON.parse` accepted it) into a tree.
 * Throws for a number serde_json refuses (out of f64 range).
 * @param {string} text
 * @returns {Node}
 */
function parse(text) {
  let i = 0;
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i])) i++;
  };
  /** @returns {Node} */
  const value = () => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      /** @type {Map<string, Node>} */
      const m = new Map();
      ws();
      if (text[i] === '}') { i++; return { t: 'obj', v: m }; }
      for (;;) {
        ws();
        const k = /** @type {{t: 'str', v: string}} */ (value()).v;
        ws();
        i++; // ':'
        const v = value();
        m.delete(k);
        m.set(k, v);
        ws();
        if (text[i++] === '}') return { t: 'obj', v: m };
      }
    }
    if (c === '[') {
      i++;
      /** @type {Node[]} */
      const a = [];
      ws();
      if (text[i] === ']') { i++; return { t: 'arr', v: a }; }
      for (;;) {
        a.push(value());
        ws();
        if (text[i++] === ']') return { t: 'arr', v: a };
      }
    }
    if (c === '"') {
      const start = i;
      i++;
      while (text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
      i++;
      return { t: 'str', v: JSON.parse(text.slice(start, i)) };
    }
    if (text.startsWith('true', i)) { i += 4; return { t: 'bool', v: true }; }
    if (text.startsWith('false', i)) { i += 5; return { t: 'bool', v: false }; }
    if (text.startsWith('null', i)) { i += 4; return { t: 'null' }; }
    const m = /^-?\d+(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
    if (!m) throw new SyntaxError(`not JSON at ${i}`);
    i += m[0].length;
    return number(m[0], m[1] !== undefined || m[2] !== undefined);
  };
  const v = value();
  return v;
}

/**
 * @param {string} lexeme
 * @param {boolean} float written with a fraction or an exponent
 * @returns {Node}
 */
function number(lexeme, float) {
  if (!float) {
    const n = BigInt(lexeme);
    if (n === 0n && lexeme.startsWith('-')) return { t: 'f64', v: -0 };
    if (n >= I64_MIN && n <= U64_MAX) return { t: 'int', v: n.toString() };
  }
  const f = Number(lexeme);
  if (!Number.isFinite(f)) throw new RangeError(`number out of range: ${lexeme}`);
  return { t: 'f64', v: f };
}

/**
 * serde_json's text of an f64.
 * @param {number} x
 */
function f64Text(x) {
  if (!Number.isFinite(x)) return 'null';
  const sign = x < 0 || Object.is(x, -0) ? '-' : '';
  x = Math.abs(x);
  if (x === 0) return `${sign}0.0`;
  const m = /** @type {RegExpExecArray} */ (/^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(x)));
  const all = m[1] + (m[2] || '');
  let point = m[1].length + (m[3] ? Number(m[3]) : 0);
  const stripped = all.replace(/^0+/, '');
  point -= all.length - stripped.length;
  const digits = stripped.replace(/0+$/, '');
  const n = digits.length;
  let text;
  if (n <= point && point <= 16) text = `${digits}${'0'.repeat(point - n)}.0`;
  else if (point > 0 && point <= 16) text = `${digits.slice(0, point)}.${digits.slice(point)}`;
  else if (point > -5 && point <= 0) text = `0.${'0'.repeat(-point)}${digits}`;
  else {
    const e = point - 1;
    text = `${n === 1 ? digits : `${digits[0]}.${digits.slice(1)}`}e${e > 0 ? '+' : ''}${e}`;
  }
  return sign + text;
}

/** Code point order (Rust's `String` order), not UTF-16 code units. @param {string} a @param {string} b */
function byCodePoint(a, b) {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = /** @type {number} */ (x[i].codePointAt(0)) - /** @type {number} */ (y[i].codePointAt(0));
    if (d) return d;
  }
  return x.length - y.length;
}

/**
 * The tree as serde_json writes it (compact).
 * @param {Node} node
 * @returns {string}
 */
function render(node) {
  switch (node.t) {
    case 'null': return 'null';
    case 'bool': return String(node.v);
    case 'int': return node.v;
    case 'f64': return f64Text(node.v);
    case 'str': return JSON.stringify(node.v);
    case 'arr': return `[${node.v.map(render).join(',')}]`;
    default: return `{${[...node.v.keys()].sort(byCodePoint).map((k) => `${JSON.stringify(k)}:${render(/** @type {Node} */ (node.v.get(k)))}`).join(',')}}`;
  }
}

/** How the broker names the value's JSON type in messages. @param {Node} node */
function kind(node) {
  return {
    null: 'null', bool: 'a boolean', int: 'a number', f64: 'a number with a fraction', str: 'a string', arr: 'an array', obj: 'an object',
  }[node.t];
}

/**
 * The canonical (serde_json) text of JSON `text`.
 * @param {string} text
 */
function canonical(text) {
  return render(parse(text));
}

module.exports = { parse, render, kind, canonical, f64Text, byCodePoint };
