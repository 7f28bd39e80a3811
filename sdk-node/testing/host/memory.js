'use strict';

/**
 * In-memory graph memory with the broker's semantics (broker/src/storage/memory.rs):
 * entities identified by their trimmed, lower-cased name (shown with the first
 * spelling), relations added unless an identical active one exists, recall by
 * keyword (name contains it, case-insensitively) and breadth-first walk over active
 * relations, merge, and soft (mark inactive) or hard (delete, then orphans) purge.
 */

const { HarnessError } = require('../errors');

const PURGE_KEYS = ['subject_contains', 'target_contains', 'relation_type', 'session_id'];
const TOP_ENTITIES = 10;

/** @param {string} name */
const fold = (name) => name.trim().toLowerCase();
/** @param {string} what @param {string} reason */
const invalid = (what, reason) => new HarnessError('INVALID_ARGUMENT', `${what}: ${reason}`);

/**
 * @typedef {{subject: string, relation: string, object: string, subject_type?: string, object_type?: string, session_id?: string}} TripleJson
 * @typedef {{id: number, name: string, type: string, mention_count: number}} EntityRow
 * @typedef {{id: number, source: number, target: number, relation_type: string, session_id: string, active: boolean}} RelationRow
 */

/** @param {number} a @param {number} b */
const byNumber = (a, b) => a - b;

class GraphMemoryStore {
  constructor() {
    /** @type {Map<number, EntityRow>} */
    this.entities = new Map();
    /** @type {RelationRow[]} in id order */
    this.relations = [];
    this.nextEntity = 1;
    this.nextRelation = 1;
  }

  /** @param {string} name @returns {EntityRow | undefined} */
  find(name) {
    const f = fold(name);
    for (const e of this.entities.values()) if (fold(e.name) === f) return e;
    return undefined;
  }

  /** @param {string} name @param {string} type */
  upsert(name, type) {
    const e = this.find(name);
    if (e) {
      e.mention_count += 1;
      if (type) e.type = type;
      return e.id;
    }
    const id = this.nextEntity++;
    this.entities.set(id, { id, name, type, mention_count: 1 });
    return id;
  }

  /**
   * Stores triples (all or none); returns how many relations were added.
   * @param {TripleJson[]} triples
   * @returns {number}
   */
  commit(triples) {
    const clean = triples.map((t, i) => {
      const c = {
        subject: (t.subject || '').trim(),
        relation: (t.relation || '').trim(),
        object: (t.object || '').trim(),
        subject_type: (t.subject_type || '').trim(),
        object_type: (t.object_type || '').trim(),
        session_id: (t.session_id || '').trim(),
      };
      for (const f of /** @type {const} */ (['subject', 'relation', 'object'])) if (!c[f]) throw invalid(`commit: triple ${i}`, `empty \`${f}\``);
      return c;
    });
    let added = 0;
    for (const t of clean) {
      const source = this.upsert(t.subject, t.subject_type);
      const target = this.upsert(t.object, t.object_type);
      const dup = this.relations.some((r) => r.active && r.source === source && r.target === target && r.relation_type === t.relation);
      if (!dup) {
        this.relations.push({ id: this.nextRelation++, source, target, relation_type: t.relation, session_id: t.session_id, active: true });
        added++;
      }
    }
    return added;
  }

  /** @param {EntityRow} e */
  static entity(e) {
    return { name: e.name, type: e.type, mention_count: e.mention_count };
  }

  /**
   * Entities matching any keyword and what lies within `depth` active relations.
   * @param {string[]} keywords
   * @param {number} depth
   * @returns {{entities: Array<{name: string, type: string, mention_count: number}>, relations: Array<{source_name: string, target_name: string, relation_type: string}>}}
   */
  recall(keywords, depth) {
    const folded = [...new Set(keywords.map(fold).filter(Boolean))].sort();
    if (!folded.length) return { entities: [], relations: [] };
    const visited = new Set();
    /** @type {number[][]} */
    const levels = [];
    const seeds = [];
    for (const k of folded) {
      for (const id of [...this.entities.keys()].sort(byNumber)) {
        if (fold(/** @type {EntityRow} */ (this.entities.get(id)).name).includes(k) && !visited.has(id)) {
          visited.add(id);
          seeds.push(id);
        }
      }
    }
    if (!seeds.length) return { entities: [], relations: [] };
    levels.push(seeds);
    const walked = new Set();
    /** @type {RelationRow[]} */
    const edges = [];
    for (let d = 0; d < depth; d++) {
      const frontier = new Set(levels[levels.length - 1]);
      if (!frontier.size) break;
      const next = [];
      for (const r of this.relations) {
        if (!r.active || !(frontier.has(r.source) || frontier.has(r.target)) || walked.has(r.id)) continue;
        walked.add(r.id);
        edges.push(r);
        for (const end of [r.source, r.target]) {
          if (!visited.has(end)) {
            visited.add(end);
            next.push(end);
          }
        }
      }
      levels.push(next);
    }
    const name = (/** @type {number} */ id) => /** @type {EntityRow} */ (this.entities.get(id)).name;
    const entities = levels.flatMap((level) => level
      .map((id) => /** @type {EntityRow} */ (this.entities.get(id)))
      .sort((a, b) => b.mention_count - a.mention_count || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map(GraphMemoryStore.entity));
    return { entities, relations: edges.map((r) => ({ source_name: name(r.source), target_name: name(r.target), relation_type: r.relation_type })) };
  }

  /** Counts of the graph (memory.rs `MemoryStats`). */
  introspect() {
    const active = this.relations.filter((r) => r.active);
    /** @param {string[]} keys */
    const grouped = (keys) => {
      /** @type {Record<string, number>} */
      const out = {};
      for (const k of keys.slice().sort()) out[k] = (out[k] || 0) + 1;
      return out;
    };
    const ents = [...this.entities.values()];
    return {
      entities: ents.length,
      relations: active.length,
      inactive_relations: this.relations.length - active.length,
      entity_types: grouped(ents.map((e) => e.type)),
      relation_types: grouped(active.map((r) => r.relation_type)),
      sessions: new Set(active.map((r) => r.session_id).filter(Boolean)).size,
      top_entities: ents.sort((a, b) => b.mention_count - a.mention_count || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)).slice(0, TOP_ENTITIES).map(GraphMemoryStore.entity),
    };
  }

  /**
   * Merges entity `source` into `target`; returns how many relations were redirected.
   * @param {string} sourceName
   * @param {string} targetName
   */
  mergeEntities(sourceName, targetName) {
    const [sn, tn] = [sourceName.trim(), targetName.trim()];
    if (fold(sn) === fold(tn)) throw invalid('merge entities', `\`${sn}\` and \`${tn}\` are the same entity`);
    const s = this.find(sn);
    if (!s) throw new HarnessError('NOT_FOUND', `no \`${sn}\` in entities`);
    const t = this.find(tn);
    if (!t) throw new HarnessError('NOT_FOUND', `no \`${tn}\` in entities`);
    const dupOf = (/** @type {RelationRow} */ r, /** @type {'source' | 'target'} */ end) => this.relations.some((d) => d.active && d[end] === t.id
      && (end === 'source' ? d.target === r.target : d.source === r.source) && d.relation_type === r.relation_type);
    this.relations = this.relations.filter((r) => {
      if ((r.source === s.id && (r.target === s.id || r.target === t.id)) || (r.target === s.id && r.source === t.id)) return false;
      if (r.active && r.source === s.id && dupOf(r, 'source')) return false;
      if (r.active && r.target === s.id && dupOf(r, 'target')) return false;
      return true;
    });
    let moved = 0;
    for (const r of this.relations) {
      if (r.source === s.id) { r.source = t.id; moved++; }
      if (r.target === s.id) { r.target = t.id; moved++; }
    }
    t.mention_count += s.mention_count;
    if (!t.type) t.type = s.type;
    this.entities.delete(s.id);
    return moved;
  }

  /**
   * Removes relations matching every criterion; returns how many.
   * @param {Record<string, string>} criteria subject_contains, target_contains, relation_type, session_id
   * @param {string} mode 'soft' or 'hard'
   */
  purge(criteria, mode) {
    /** @type {Record<string, string>} */
    const c = {};
    for (const [k, v] of Object.entries(criteria || {})) {
      if (!PURGE_KEYS.includes(k)) throw invalid('purge', `unknown criterion \`${k}\` (expected one of ${PURGE_KEYS.join(', ')})`);
      if (v && v.trim()) c[k] = v.trim();
    }
    if (mode !== 'soft' && mode !== 'hard') throw invalid('purge', `mode ${JSON.stringify(mode)}: expected "soft" or "hard"`);
    if (!Object.keys(c).length) throw invalid('purge', `no criteria (give at least one of ${PURGE_KEYS.join(', ')})`);
    const name = (/** @type {number} */ id) => fold(/** @type {EntityRow} */ (this.entities.get(id)).name);
    const matches = (/** @type {RelationRow} */ r) => (!c.subject_contains || name(r.source).includes(fold(c.subject_contains)))
      && (!c.target_contains || name(r.target).includes(fold(c.target_contains)))
      && (!c.relation_type || r.relation_type === c.relation_type)
      && (!c.session_id || r.session_id === c.session_id);
    if (mode === 'soft') {
      let n = 0;
      for (const r of this.relations) if (r.active && matches(r)) { r.active = false; n++; }
      return n;
    }
    const gone = this.relations.filter(matches);
    const touched = new Set(gone.flatMap((r) => [r.source, r.target]));
    this.relations = this.relations.filter((r) => !matches(r));
    for (const id of touched) if (!this.relations.some((r) => r.source === id || r.target === id)) this.entities.delete(id);
    return gone.length;
  }
}

module.exports = { GraphMemoryStore, PURGE_KEYS };
