'use strict';

/**
 * In-memory DocMemory and Knowledge (broker/src/storage/docs.rs, knowledge.rs) over a
 * small full-text index that ranks like the broker's (broker/src/storage/search.rs):
 * any query word may match (OR), ranked by BM25 (k1 1.2, b 0.75; IDF floored at
 * 1e-6), score > 0 and higher = better, at most `topK` results (0 = 5, capped at 100).
 *
 * An approximation of the broker's segmentation, which uses jieba and an FTS5 Porter
 * stemmer: words of letters and digits match case- and accent-insensitively (without
 * stemming: "running" does not find "run"); a CJK query word of one character matches
 * that character, a longer one each of its two-character pieces (天气 finds 今天天气很好
 * and 明天气温很低, as the broker's character phrases do). So the fake finds what the
 * broker finds for common queries, but its order among CJK matches can differ (the
 * broker's jieba words add to the score of 今天天气 for 天气, not of 明天气温).
 */

const crypto = require('node:crypto');
const { HarnessError } = require('../errors');

const DEFAULT_TOP_K = 5;
const MAX_TOP_K = 100;
const MAX_QUERY_TERMS = 64;
const MAX_ENTRY_BYTES = 8 * 1024 * 1024;
const MAX_NAME_BYTES = 200;

const CJK = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]/u;
const TOKEN = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+|[\p{L}\p{N}]+/gu;

/** @param {string} w */
const normalize = (w) => w.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();

/**
 * Index tokens of a text: words, and every CJK character and pair of characters.
 * @param {string} text
 */
function indexTokens(text) {
  const out = [];
  for (const m of text.matchAll(TOKEN)) {
    const run = m[0];
    if (!CJK.test(run)) {
      out.push(normalize(run));
      continue;
    }
    const cs = [...run];
    for (let i = 0; i < cs.length; i++) {
      out.push(cs[i]);
      if (i + 1 < cs.length) out.push(cs[i] + cs[i + 1]);
    }
  }
  return out;
}

/**
 * Distinct query terms (at most 64): words, CJK characters, CJK pairs.
 * @param {string} text
 */
function queryTerms(text) {
  const out = new Set();
  for (const m of text.matchAll(TOKEN)) {
    const run = m[0];
    if (!CJK.test(run)) out.add(normalize(run));
    else {
      const cs = [...run];
      if (cs.length === 1) out.add(cs[0]);
      for (let i = 0; i + 1 < cs.length; i++) out.add(cs[i] + cs[i + 1]);
    }
  }
  return [...out].slice(0, MAX_QUERY_TERMS);
}

/** `top_k` as asked (0 = 5), capped at 100. @param {number} topK */
const limit = (topK) => (!topK ? DEFAULT_TOP_K : Math.min(topK, MAX_TOP_K));

/** A BM25 index over entries keyed by a sequence number. */
class Index {
  constructor() {
    /** @type {Map<number, Map<string, number>>} term counts by entry */
    this.entries = new Map();
    /** @type {Map<number, number>} token count by entry */
    this.lengths = new Map();
  }

  /** @param {number} seq @param {string} text */
  put(seq, text) {
    const tokens = indexTokens(text);
    const counts = new Map();
    for (const t of tokens) counts.set(t, (counts.get(t) || 0) + 1);
    this.entries.set(seq, counts);
    this.lengths.set(seq, tokens.length);
  }

  /** @param {number} seq */
  delete(seq) {
    this.entries.delete(seq);
    this.lengths.delete(seq);
  }

  /**
   * `[seq, score]` of the best matches, best first.
   * @param {string} query
   * @param {number} n
   * @returns {Array<[number, number]>}
   */
  search(query, n) {
    const terms = queryTerms(query);
    const N = this.entries.size;
    if (!terms.length || !N) return [];
    let total = 0;
    for (const l of this.lengths.values()) total += l;
    const avg = total / N || 1;
    /** @type {Array<[number, number]>} */
    const hits = [];
    const df = new Map(terms.map((t) => [t, [...this.entries.values()].filter((c) => c.has(t)).length]));
    for (const [seq, counts] of this.entries) {
      let score = 0;
      let matched = false;
      for (const t of terms) {
        const tf = counts.get(t) || 0;
        if (!tf) continue;
        matched = true;
        const nt = /** @type {number} */ (df.get(t));
        const idf = Math.max(Math.log((N - nt + 0.5) / (nt + 0.5)), 1e-6);
        const dl = /** @type {number} */ (this.lengths.get(seq));
        score += idf * ((tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * dl) / avg)));
      }
      if (matched) hits.push([seq, score]);
    }
    hits.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    return hits.slice(0, n);
  }

  /** Bytes of the index's tokens (the broker reports FTS5's data size). */
  bytes() {
    let n = 0;
    for (const counts of this.entries.values()) for (const [t, c] of counts) n += Buffer.byteLength(t) * c;
    return n;
  }
}

/** @typedef {{id: string, title: string, content: string, score?: number}} DocJson */

class DocMemoryStore {
  constructor() {
    /** @type {Map<string, {seq: number, id: string, title: string, content: string, created: number, updated: number}>} */
    this.docs = new Map();
    this.index = new Index();
    this.nextSeq = 1;
  }

  /**
   * Stores a document (same id replaces; empty id → `doc_` + 16 hex digits); returns its id.
   * @param {{id?: string, title?: string, content?: string}} doc
   */
  insert(doc) {
    const id = doc.id || `doc_${crypto.randomBytes(8).toString('hex')}`;
    const title = doc.title || '';
    const content = doc.content || '';
    if (!title.trim() && !content.trim()) throw new HarnessError('INVALID_ARGUMENT', `insert doc ${id}: title and content are both empty`);
    const now = Math.floor(Date.now() / 1000);
    const old = this.docs.get(id);
    const seq = old ? old.seq : this.nextSeq++;
    this.docs.set(id, { seq, id, title, content, created: old ? old.created : now, updated: now });
    this.index.put(seq, `${title}\n${content}`);
    return id;
  }

  /** Deletes document `id`; NOT_FOUND when there is none. @param {string} id */
  remove(id) {
    const d = this.docs.get(id);
    if (!d) throw new HarnessError('NOT_FOUND', `no \`${id}\` in doc_memory`);
    this.docs.delete(id);
    this.index.delete(d.seq);
  }

  /**
   * Best matches for `text`, best first, with `score`.
   * @param {string} text
   * @param {number} [topK]
   * @returns {Array<{id: string, title: string, content: string, score: number}>}
   */
  query(text, topK = 0) {
    const bySeq = new Map([...this.docs.values()].map((d) => [d.seq, d]));
    return this.index.search(text, limit(topK)).map(([seq, score]) => {
      const d = /** @type {any} */ (bySeq.get(seq));
      return { id: d.id, title: d.title, content: d.content, score };
    });
  }

  /** `{docs, text_bytes, index_bytes, oldest, newest}`. */
  stats() {
    const docs = [...this.docs.values()];
    return {
      docs: docs.length,
      text_bytes: docs.reduce((n, d) => n + Buffer.byteLength(d.title) + Buffer.byteLength(d.content), 0),
      index_bytes: this.index.bytes(),
      oldest: docs.length ? Math.min(...docs.map((d) => d.updated)) : null,
      newest: docs.length ? Math.max(...docs.map((d) => d.updated)) : null,
    };
  }

  /** Every document, in insertion order. @returns {DocJson[]} */
  all() {
    return [...this.docs.values()].sort((a, b) => a.seq - b.seq).map((d) => ({ id: d.id, title: d.title, content: d.content }));
  }
}

/**
 * The name `add` stores an entry under (knowledge.rs `sanitize_name`).
 * @param {string} name
 */
function sanitizeName(name) {
  let t = name.trim();
  if (t.endsWith('.md')) t = t.slice(0, -3);
  let out = '';
  for (const c of t) {
    // eslint-disable-next-line no-control-regex
    const ch = /[\u0000-\u001f\u007f-\u009f/\\:*?"<>|]/.test(c) ? '_' : c;
    if (Buffer.byteLength(out) + Buffer.byteLength(ch) > MAX_NAME_BYTES) break;
    out += ch;
  }
  if (out.startsWith('.')) out = `_${out.slice(1)}`;
  out = out.trimEnd();
  if (!out) throw new HarnessError('INVALID_ARGUMENT', `knowledge entry name ${JSON.stringify(name)}: empty once sanitized`);
  return out;
}

class KnowledgeStore {
  constructor() {
    /** @type {Map<string, {seq: number, content: string}>} */
    this.entries = new Map();
    this.index = new Index();
    this.nextSeq = 1;
  }

  /**
   * Writes entry `name` (replacing it); returns the name it is stored under.
   * @param {string} name
   * @param {string} content
   */
  add(name, content) {
    const stored = sanitizeName(name);
    const bytes = Buffer.byteLength(content);
    if (bytes > MAX_ENTRY_BYTES) throw new HarnessError('INVALID_ARGUMENT', `knowledge entry ${stored}: ${bytes} bytes of content, more than the ${MAX_ENTRY_BYTES} allowed`);
    const old = this.entries.get(stored);
    const seq = old ? old.seq : this.nextSeq++;
    this.entries.set(stored, { seq, content });
    this.index.put(seq, `${stored}\n${content}`);
    return stored;
  }

  /** Entry names, sorted. */
  list() {
    return [...this.entries.keys()].sort();
  }

  /** The content of entry `name`, or undefined. @param {string} name */
  get(name) {
    const e = this.entries.get(name);
    return e ? e.content : undefined;
  }

  /** Removes entry `name` (as deleting its file would). @param {string} name */
  remove(name) {
    const e = this.entries.get(name);
    if (!e) return false;
    this.entries.delete(name);
    this.index.delete(e.seq);
    return true;
  }

  /**
   * Best matches for `query`, best first, with `score`.
   * @param {string} query
   * @param {number} [topK]
   * @returns {Array<{name: string, content: string, score: number}>}
   */
  search(query, topK = 0) {
    const bySeq = new Map([...this.entries].map(([name, e]) => [e.seq, { name, content: e.content }]));
    return this.index.search(query, limit(topK)).map(([seq, score]) => ({ .../** @type {any} */ (bySeq.get(seq)), score }));
  }
}

module.exports = { DocMemoryStore, KnowledgeStore, sanitizeName, queryTerms, indexTokens };
