'use strict';

/**
 * LinkZone triggers as the broker compiles and matches them (a mirror of
 * broker/src/triggers/mod.rs): which registered trigger a message matches, and the
 * params the plugin then gets in `HandleEvent` (`sender.param(i)`).
 *
 * | type | name    | matches when                                              | params                                     |
 * |------|---------|-----------------------------------------------------------|--------------------------------------------|
 * | 0    | command | the message is `pattern` or starts with `pattern` + space | the words after the command                |
 * | 1    | keyword | the message contains `pattern` (case-insensitive)         | the words of the message without `pattern` |
 * | 2    | regex   | the regular expression finds a match                      | its capture groups, else the whole match   |
 * | 3    | segment | one segment of the message equals `pattern` (case-insens.)| the other segments, in order               |
 * | 4    | event   | the broker emits the event `pattern` (`*` = every event)  | the event's text, as one parameter         |
 *
 * Whitespace is Rust's (`char::is_whitespace`, Unicode White_Space: unlike `\s` and
 * `trim()`, U+0085 is whitespace and U+FEFF is not), and a keyword is cut out of the
 * message only when lower-casing kept its UTF-8 length, as the broker does. Regular
 * expressions run on JavaScript's engine (`u` flag) instead of Rust's `regex` crate;
 * the common syntax is the same (but `\w`, `\d`, `\b` are ASCII-only here, Unicode
 * there). The golden file tests/golden/triggers.json holds cases the broker and this
 * copy are both checked against.
 */

/** Broker events a type-4 trigger can name. */
const EVENTS = ['message', 'reply'];
const TYPE_NAMES = ['command', 'keyword', 'regex', 'segment', 'event'];

/**
 * @typedef {{type: number, pattern: string}} Trigger
 * @typedef {{trigger: Trigger, kind: string, value: string, re?: RegExp}} Compiled
 * @typedef {{kind: string, name: string, reason: string}} RejectedItem
 */

/**
 * Compiles a plugin's triggers and checks its inject spec (triggers/mod.rs
 * `TriggerSet::compile`): bad items are left out and reported.
 * @param {Trigger[]} triggers
 * @param {{usage: string, format: string} | null} inject
 * @returns {{triggers: Compiled[], inject: any, rejected: RejectedItem[]}}
 */
function compile(triggers, inject) {
  /** @type {Compiled[]} */
  const out = [];
  /** @type {RejectedItem[]} */
  const rejected = [];
  const reject = (/** @type {string} */ name, /** @type {string} */ reason) => rejected.push({ kind: 'trigger', name, reason });
  for (const t of triggers) {
    const pattern = trim(t.pattern);
    if (!pattern) {
      reject(t.pattern, `type ${t.type} trigger with an empty pattern`);
      continue;
    }
    switch (t.type) {
      case 0: out.push({ trigger: t, kind: 'command', value: pattern }); break;
      case 1: out.push({ trigger: t, kind: 'keyword', value: pattern.toLowerCase() }); break;
      case 2: {
        let re;
        try {
          re = new RegExp(t.pattern, 'u');
        } catch (e) {
          reject(t.pattern, `invalid regex: ${/** @type {Error} */ (e).message}`);
          continue;
        }
        out.push({ trigger: t, kind: 'regex', value: t.pattern, re });
        break;
      }
      case 3: out.push({ trigger: t, kind: 'segment', value: pattern.toLowerCase() }); break;
      case 4:
        if (pattern !== '*' && !EVENTS.includes(pattern)) {
          reject(pattern, `unknown event \`${pattern}\`; events are ${EVENTS.join(', ')} or \`*\``);
          continue;
        }
        out.push({ trigger: t, kind: 'event', value: pattern });
        break;
      default:
        reject(t.pattern, `unknown trigger type ${t.type}; types are 0 command, 1 keyword, 2 regex, 3 segment, 4 event`);
    }
  }
  let kept = inject;
  if (inject && !trim(inject.format)) {
    rejected.push({ kind: 'inject', name: inject.usage, reason: 'ai.inject has no format: the LLM would not know what to write' });
    kept = null;
  }
  return { triggers: out, inject: kept, rejected };
}

/** Rust's `char::is_whitespace` (the Unicode White_Space property). */
const WHITESPACE = new Set('\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000');

/** @param {string} c */
const isSpace = (c) => WHITESPACE.has(c);

/** Rust's `str::trim`. @param {string} text */
function trim(text) {
  let start = 0;
  let end = text.length;
  while (start < end && isSpace(text[start])) start++;
  while (end > start && isSpace(text[end - 1])) end--;
  return text.slice(start, end);
}

/**
 * Splits at whitespace; a double-quoted run is one word (`\"` escapes a quote).
 * @param {string} text
 * @returns {string[]}
 */
function words(text) {
  const out = [];
  let cur = '';
  let quoted = false;
  let started = false;
  const cs = [...text];
  for (let i = 0; i < cs.length; i++) {
    const c = cs[i];
    if (c === '\\' && quoted && cs[i + 1] === '"') {
      cur += '"';
      i++;
    } else if (c === '"') {
      quoted = !quoted;
      started = true;
    } else if (isSpace(c) && !quoted) {
      if (started) {
        out.push(cur);
        cur = '';
        started = false;
      }
    } else {
      cur += c;
      started = true;
    }
  }
  if (started) out.push(cur);
  return out;
}

/** @param {string} c */
function isCjkPunct(c) {
  const n = /** @type {number} */ (c.codePointAt(0));
  return (n >= 0x3000 && n <= 0x303f) || (n >= 0xff00 && n <= 0xff0f) || (n >= 0xff1a && n <= 0xff20) || (n >= 0xff3b && n <= 0xff40) || (n >= 0xff5b && n <= 0xff65);
}

/**
 * Splits at whitespace and punctuation (ASCII and CJK), dropping empty pieces.
 * @param {string} text
 */
function segments(text) {
  const out = [];
  let cur = '';
  for (const c of text) {
    const asciiPunct = /[!-/:-@[-`{-~]/.test(c) && c !== "'" && c !== '-';
    if (isSpace(c) || asciiPunct || isCjkPunct(c)) {
      if (cur) out.push(cur);
      cur = '';
    } else {
      cur += c;
    }
  }
  if (cur) out.push(cur);
  return out;
}

/**
 * The words after command `p` when `text` is `p` or starts with `p` + whitespace.
 * @param {string} text
 * @param {string} p
 */
function commandParams(text, p) {
  if (!text.startsWith(p)) return null;
  const rest = text.slice(p.length);
  if (rest && !isSpace(rest[0])) return null;
  return words(rest);
}

/**
 * The first message trigger (types 0–3) `text` matches, in registration order, with
 * its params; null when none does.
 * @param {Compiled[]} compiled
 * @param {string} message
 * @returns {{trigger: Trigger, params: string[]} | null}
 */
function matchMessage(compiled, message) {
  const text = trim(message);
  for (const t of compiled) {
    /** @type {string[] | null} */
    let params = null;
    if (t.kind === 'command') {
      params = commandParams(text, t.value);
    } else if (t.kind === 'keyword') {
      const lower = text.toLowerCase();
      const at = lower.indexOf(t.value);
      if (at >= 0) {
        // Lowercasing can change UTF-8 lengths (e.g. 'İ', the Kelvin sign); like the
        // broker, cut the original at the lower-cased text's byte offsets only when
        // the two are as long in bytes, else drop nothing.
        const raw = Buffer.from(text);
        let rest = text;
        if (Buffer.byteLength(lower) === raw.length) {
          const start = Buffer.byteLength(lower.slice(0, at));
          const end = start + Buffer.byteLength(t.value);
          rest = `${raw.subarray(0, start).toString()} ${raw.subarray(end).toString()}`;
        }
        params = words(rest);
      }
    } else if (t.kind === 'regex') {
      const m = /** @type {RegExp} */ (t.re).exec(text);
      if (m) params = m.length > 1 ? m.slice(1).map((g) => g ?? '') : [m[0]];
    } else if (t.kind === 'segment') {
      const segs = segments(text);
      const at = segs.findIndex((x) => x.toLowerCase() === t.value);
      if (at >= 0) params = segs.filter((_, i) => i !== at);
    }
    if (params) return { trigger: t.trigger, params };
  }
  return null;
}

/**
 * The event trigger (type 4) for broker event `event`, with `[text]` as params.
 * @param {Compiled[]} compiled
 * @param {string} event
 * @param {string} text
 */
function matchEvent(compiled, event, text) {
  const t = compiled.find((x) => x.kind === 'event' && (x.value === '*' || x.value === event));
  return t ? { trigger: t.trigger, params: [text] } : null;
}

/** `command /weather`, `regex ^hi` … for messages. @param {Trigger} t */
const describeTrigger = (t) => `${TYPE_NAMES[t.type] || t.type} ${t.pattern}`;

module.exports = { compile, matchMessage, matchEvent, words, segments, trim, describeTrigger, EVENTS, TYPE_NAMES };
