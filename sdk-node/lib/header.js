'use strict';

/**
 * LinkZone header comments: `ai.inject` declared at the top of a plugin file.
 *
 *   // @ai-triggerable true
 *   // @ai-trigger-usage 查询天气信息
 *   // @ai-trigger-format /weather {city}
 *   // @ai-trigger-args {"city":"城市名称"}
 *
 * The header is what comes before the first statement: a shebang line, blank lines,
 * `//` comments, `/* … *\/` and `/** … *\/` blocks, and `'use strict'` directives. In it,
 * a line whose text (after `//`, or after the leading `*` of a block line) starts with
 * one of the four tags declares that field; other lines and other `@` tags are prose.
 * `@ai-triggerable true` (or the bare tag) turns the block into an inject spec; `false`
 * or no tag means none, whatever the other tags say. The comment syntax is inject-only:
 * `ai.tool` needs metadata. An explicit `metadata.ai.inject` wins over the header.
 * The loader (lib/load.js `pluginFromExports`) reads the entry file's header and
 * `remember`s it for the instance; the session registers `injectOf(instance)` when
 * metadata has no `ai.inject`.
 *
 * Mistakes are `HeaderError`s naming the file and line: `@ai-trigger-args` that is not
 * a JSON object of strings, a triggerable value other than true/false, a tag given
 * twice, and a triggerable header without usage or format. Same rules and messages as
 * the Python SDK's `hearth/_header.py`.
 */

const fs = require('node:fs');

const TAG = /@(ai-trigger(?:able|-usage|-format|-args))(?=\s|$)\s*(.*)$/;

/** A malformed header comment; the message names the file and the line. */
class HeaderError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'HeaderError';
  }
}

/**
 * [1-based line number, comment text] of each header line.
 * @param {string} text
 * @returns {Array<[number, string]>}
 */
function headerLines(text) {
  /** @type {Array<[number, string]>} */
  const out = [];
  let pos = 0;
  let line = 1;
  if (text.charCodeAt(0) === 0xfeff) pos = 1;
  if (text.startsWith('#!', pos)) {
    const nl = text.indexOf('\n', pos);
    if (nl < 0) return out;
    pos = nl + 1;
    line = 2;
  }
  for (;;) {
    while (pos < text.length && /\s/.test(text[pos])) {
      if (text[pos] === '\n') line++;
      pos++;
    }
    if (text.startsWith('//', pos)) {
      let end = text.indexOf('\n', pos);
      if (end < 0) end = text.length;
      out.push([line, text.slice(pos + 2, end).replace(/\r$/, '')]);
      pos = end;
    } else if (text.startsWith('/*', pos)) {
      const end = text.indexOf('*/', pos + 2);
      if (end < 0) return out; // unterminated: the syntax error is the loader's to report
      text.slice(pos + 2, end).split('\n').forEach((l, k) => out.push([line + k, l.replace(/\r$/, '')]));
      line += text.slice(pos, end).split('\n').length - 1;
      pos = end + 2;
    } else {
      const m = /^(['"])use strict\1;?/.exec(text.slice(pos, pos + 16));
      if (!m) return out;
      pos += m[0].length;
    }
  }
}

/**
 * The JSON type name of a parsed value.
 * @param {unknown} v
 */
function jsonType(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

/**
 * `@ai-trigger-args` text → {name: description}; HeaderError unless a JSON object of strings.
 * @param {string} raw
 * @param {string} where
 * @returns {Record<string, string>}
 */
function parseArgs(raw, where) {
  if (!raw) throw new HeaderError(`${where}: expected a JSON object of strings, e.g. {"city":"城市名称"}, got nothing`);
  let value;
  try {
    value = JSON.parse(raw);
  } catch (e) {
    throw new HeaderError(`${where}: not valid JSON (${/** @type {Error} */ (e).message}): ${raw}`);
  }
  if (jsonType(value) !== 'object') throw new HeaderError(`${where}: expected a JSON object of strings, got ${jsonType(value)}: ${raw}`);
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== 'string') throw new HeaderError(`${where}: argument '${k}': the description must be a string, got ${JSON.stringify(v)}`);
  }
  return value;
}

/**
 * The inject spec (`{usage, format, args}`) the header of `text` declares, or undefined.
 * @param {string} text file contents
 * @param {string} where names the file in errors ("plugin file /abs/index.js")
 * @returns {{usage: string, format: string, args: Record<string, string>} | undefined}
 */
function parseHeader(text, where) {
  /** @type {Map<string, [number, string]>} */
  const found = new Map();
  for (const [lineno, l] of headerLines(text)) {
    const m = TAG.exec(l);
    if (!m || l.slice(0, m.index).replace(/[ \t*/]/g, '') !== '') continue;
    const tag = m[1];
    const value = m[2].trim();
    const first = found.get(tag);
    if (first) throw new HeaderError(`${where}: line ${lineno}: @${tag} given twice (first on line ${first[0]})`);
    found.set(tag, [lineno, value]);
  }
  let args = {};
  const rawArgs = found.get('ai-trigger-args');
  if (rawArgs) args = parseArgs(rawArgs[1], `${where}: line ${rawArgs[0]}: @ai-trigger-args`);
  const flag = found.get('ai-triggerable');
  if (!flag) return undefined;
  const v = flag[1].toLowerCase();
  if (v === 'false') return undefined;
  if (v !== '' && v !== 'true') throw new HeaderError(`${where}: line ${flag[0]}: @ai-triggerable must be true or false, got '${flag[1]}'`);
  const missing = ['ai-trigger-usage', 'ai-trigger-format'].filter((t) => !(found.get(t) || [0, ''])[1]);
  if (missing.length) throw new HeaderError(`${where}: line ${flag[0]}: @ai-triggerable true needs ${missing.map((t) => `@${t}`).join(' and ')}`);
  return {
    usage: /** @type {[number, string]} */ (found.get('ai-trigger-usage'))[1],
    format: /** @type {[number, string]} */ (found.get('ai-trigger-format'))[1],
    args,
  };
}

/**
 * The inject spec of the header of the file at `file` (undefined when it has none or
 * cannot be read); throws HeaderError for a malformed header.
 * @param {string} file absolute path
 */
function readHeader(file) {
  let text;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (_) {
    return undefined;
  }
  if (!text.includes('@ai-trigger')) return undefined;
  return parseHeader(text, `plugin file ${file}`);
}

/** @type {WeakMap<object, {usage: string, format: string, args: Record<string, string>}>} */
const declared = new WeakMap();

/**
 * Records the header inject spec of a loaded plugin instance (nothing when undefined).
 * @param {any} instance
 * @param {{usage: string, format: string, args: Record<string, string>} | undefined} inject
 */
function remember(instance, inject) {
  if (inject && instance && (typeof instance === 'object' || typeof instance === 'function')) declared.set(instance, inject);
}

/**
 * The header inject spec recorded for a plugin instance by the loader, or undefined.
 * @param {any} instance
 */
function injectOf(instance) {
  return instance && (typeof instance === 'object' || typeof instance === 'function') ? declared.get(instance) : undefined;
}

module.exports = { HeaderError, parseHeader, readHeader, remember, injectOf };
