//! Graph memory in the broker's [`Db`] (seed `homeagent-plugin-sdk-api.md`, "MemoryAPI（图记忆）"):
//! entities and the relations between them, written as (subject, relation, object)
//! [`Triple`]s and recalled by keyword with a breadth-first walk. One method per rpc
//! of `hearth.v1.Memory`.
//!
//! # Identity and matching
//! An entity is its name, trimmed and compared case-insensitively (Unicode lower
//! case): "Alice" and "alice " are one entity, shown with the first spelling seen.
//! Relation types and session ids are kept as given (trimmed) and compared exactly.
//! Recall keywords and the `*_contains` purge criteria match any entity whose name
//! *contains* them, case-insensitively.
//!
//! # Soft and hard purge
//! A soft purge marks relations inactive: recall, introspection counts of relations
//! and duplicate checks ignore them, but the rows stay. A hard purge deletes the
//! matching relations (active or not), then every entity they touched that no
//! relation refers to any more.
//!
//! # Cost
//! Keyword matching uses a trigram index for keywords of 3+ characters (shorter ones
//! scan the entity names): FTS5's `trigram` tokenizer on SQLite, `pg_trgm` serving
//! `LIKE` on PostgreSQL. Recall runs one indexed query per breadth-first level, for
//! the whole frontier at once, whatever its size: depth 2 is two relation queries
//! plus one entity query, not one query per node.
//!
//! # Durability
//! Every write is one transaction, committed (WAL fsynced, see [`Db`]) before the call
//! returns.
//!
//! # Backends
//! SQLite is this file; PostgreSQL is `storage::pg::memory`, with the same rows,
//! results, order and errors. The breadth-first walk ([`Walk`]) and the purge
//! criteria ([`PurgeCriteria::terms`]) are shared; each backend only runs the queries.
//! Several brokers may write one PostgreSQL graph at once: see that module for how
//! commits, merges and purges stay correct together.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use super::{Db, StorageError};

/// Keywords at least this many characters long are matched through the trigram
/// index; shorter ones scan the entity names (a trigram index cannot serve them).
pub(super) const TRIGRAM_MIN_CHARS: usize = 3;

/// How many entities [`MemoryStats::top_entities`] lists.
pub(super) const TOP_ENTITIES: i64 = 10;

/// One fact to remember: `subject` —`relation`→ `object` (seed "Triple", with the
/// optional types and session of `hearth.v1.Triple`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Triple {
    /// Subject entity name, e.g. "Alice". Required.
    pub subject: String,
    /// Relation type, e.g. "likes", "works_at". Required.
    pub relation: String,
    /// Object entity name, e.g. "coffee". Required.
    pub object: String,
    /// Subject's entity type, e.g. "Person"; empty = leave the type as it is.
    pub subject_type: String,
    /// Object's entity type; empty = leave the type as it is.
    pub object_type: String,
    /// Conversation or session the fact came from (for purging by session); may be
    /// empty.
    pub session_id: String,
}

impl Triple {
    /// A triple with no types and no session.
    pub fn new(
        subject: impl Into<String>,
        relation: impl Into<String>,
        object: impl Into<String>,
    ) -> Triple {
        Triple {
            subject: subject.into(),
            relation: relation.into(),
            object: object.into(),
            ..Triple::default()
        }
    }
}

/// A node of the graph (seed "Entity").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entity {
    /// Name, as first written.
    pub name: String,
    /// Type, e.g. Person / Location / Concept; empty if no triple gave one.
    pub r#type: String,
    /// How many times a committed triple named it, as subject or object (merges
    /// add up).
    pub mention_count: i64,
}

/// An edge of the graph (seed "Relation"): `source_name` —`relation_type`→
/// `target_name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Relation {
    /// Subject entity's name.
    pub source_name: String,
    /// Object entity's name.
    pub target_name: String,
    /// Relation type, e.g. "likes".
    pub relation_type: String,
}

/// What [`GraphMemory::recall`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subgraph {
    /// Matched entities first, then those reached at each further level; within a
    /// level, most mentioned first, then by name.
    pub entities: Vec<Entity>,
    /// Each active relation walked, once, level by level, oldest first within a
    /// level.
    pub relations: Vec<Relation>,
}

/// [`GraphMemory::introspect`]: sizes of the graph (`IntrospectResponse.stats_json`
/// is this, serialized).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// Number of entities.
    pub entities: u64,
    /// Number of active relations.
    pub relations: u64,
    /// Soft-purged relations, kept until a hard purge removes them.
    pub inactive_relations: u64,
    /// Entities per type (`""` = untyped).
    pub entity_types: BTreeMap<String, u64>,
    /// Active relations per relation type.
    pub relation_types: BTreeMap<String, u64>,
    /// Distinct non-empty session ids among active relations.
    pub sessions: u64,
    /// The most mentioned entities (up to 10), most first, then by name.
    pub top_entities: Vec<Entity>,
}

/// How [`GraphMemory::purge`] removes relations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeMode {
    /// Mark them inactive; the rows stay.
    Soft,
    /// Delete them, and the entities left with no relation.
    Hard,
}

impl PurgeMode {
    /// `"soft"` or `"hard"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PurgeMode::Soft => "soft",
            PurgeMode::Hard => "hard",
        }
    }
}

/// `"soft"` or `"hard"` (the seed's strings); anything else is
/// [`StorageError::Invalid`].
impl FromStr for PurgeMode {
    type Err = StorageError;

    fn from_str(mode: &str) -> Result<PurgeMode, StorageError> {
        match mode {
            "soft" => Ok(PurgeMode::Soft),
            "hard" => Ok(PurgeMode::Hard),
            other => Err(StorageError::Invalid {
                what: "purge".into(),
                reason: format!("mode {other:?}: expected \"soft\" or \"hard\""),
            }),
        }
    }
}

/// Which relations [`GraphMemory::purge`] removes: those matching *every* criterion
/// given. `None` (or an empty string via [`PurgeCriteria::from_map`]) = not a
/// criterion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeCriteria {
    /// The subject's name contains this, case-insensitively.
    pub subject_contains: Option<String>,
    /// The object's name contains this, case-insensitively.
    pub target_contains: Option<String>,
    /// The relation type is exactly this.
    pub relation_type: Option<String>,
    /// The relation was committed with exactly this session id.
    pub session_id: Option<String>,
}

impl PurgeCriteria {
    /// The names `hearth.v1.PurgeRequest.criteria` uses.
    pub const KEYS: [&'static str; 4] = [
        "subject_contains",
        "target_contains",
        "relation_type",
        "session_id",
    ];

    /// From the seed's `map[string]string`. Empty values are skipped.
    ///
    /// Errors: [`StorageError::Invalid`] for a key not in [`PurgeCriteria::KEYS`].
    pub fn from_map<K, V>(map: impl IntoIterator<Item = (K, V)>) -> Result<Self, StorageError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut criteria = PurgeCriteria::default();
        for (key, value) in map {
            let (key, value) = (key.as_ref(), value.as_ref());
            let slot = match key {
                "subject_contains" => &mut criteria.subject_contains,
                "target_contains" => &mut criteria.target_contains,
                "relation_type" => &mut criteria.relation_type,
                "session_id" => &mut criteria.session_id,
                other => {
                    return Err(StorageError::Invalid {
                        what: "purge".into(),
                        reason: format!(
                            "unknown criterion `{other}` (expected one of {})",
                            PurgeCriteria::KEYS.join(", ")
                        ),
                    })
                }
            };
            if !value.is_empty() {
                *slot = Some(value.to_string());
            }
        }
        Ok(criteria)
    }

    /// The criteria given, trimmed, blank ones left out: `(column of relations, value,
    /// contains)`. `contains` = the column is an entity id (`source_id`, `target_id`)
    /// whose folded name must contain `value` (folded); otherwise the column must equal
    /// `value`. Empty when no criterion is given.
    pub(super) fn terms(&self) -> Vec<(&'static str, String, bool)> {
        let mut terms = Vec::new();
        for (value, contains, column) in [
            (&self.subject_contains, true, "source_id"),
            (&self.target_contains, true, "target_id"),
            (&self.relation_type, false, "relation_type"),
            (&self.session_id, false, "session_id"),
        ] {
            let Some(value) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) else {
                continue;
            };
            let value = if contains {
                fold(value)
            } else {
                value.to_string()
            };
            terms.push((column, value, contains));
        }
        terms
    }

    /// The `WHERE` condition over `relations` (terms ANDed) with its parameters,
    /// numbered from `?{first}`; `None` when no criterion is given.
    fn sql(&self, first: usize) -> Option<(String, Vec<SqlValue>)> {
        let mut conditions = Vec::new();
        let mut args = Vec::new();
        for (column, value, contains) in self.terms() {
            let n = first + args.len();
            conditions.push(if contains {
                format!("{column} IN (SELECT id FROM entities WHERE instr(folded, ?{n}) > 0)")
            } else {
                format!("{column} = ?{n}")
            });
            args.push(SqlValue::Text(value));
        }
        (!conditions.is_empty()).then(|| (conditions.join(" AND "), args))
    }
}

/// The graph memory in a [`Db`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GraphMemory {
    db: Db,
}

impl GraphMemory {
    /// The graph stored in `db`.
    pub fn new(db: Db) -> GraphMemory {
        GraphMemory { db }
    }

    /// Stores `triples` in one transaction: each subject and object entity is created
    /// or has its `mention_count` raised by one (and its type set, if the triple gives
    /// one), and the relation is added unless an identical active one (same subject,
    /// object and type) exists. Returns how many relations were added (duplicates not
    /// counted).
    ///
    /// Errors: [`StorageError::Invalid`] naming the triple's index if a subject,
    /// relation or object is empty (after trimming), or a field holds a NUL character
    /// (PostgreSQL text cannot); then nothing is stored.
    pub async fn commit(&self, triples: Vec<Triple>) -> Result<u64, StorageError> {
        let triples = triples
            .into_iter()
            .enumerate()
            .map(|(index, triple)| clean(index, triple))
            .collect::<Result<Vec<_>, _>>()?;
        if triples.is_empty() {
            return Ok(0);
        }
        if let Some(pg) = self.db.pg() {
            return super::pg::memory::commit(pg, &triples, now()).await;
        }
        let op = format!("commit {} triples to graph memory", triples.len());
        self.db
            .call(op, move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let now = now();
                let mut added = 0;
                for t in &triples {
                    let source = upsert_entity(&tx, &t.subject, &t.subject_type, now)?;
                    let target = upsert_entity(&tx, &t.object, &t.object_type, now)?;
                    added += tx
                        .prepare_cached(
                            "INSERT INTO relations
                                 (source_id, target_id, relation_type, session_id, created_at)
                             VALUES (?1, ?2, ?3, ?4, ?5)
                             ON CONFLICT (source_id, target_id, relation_type) WHERE active = 1
                             DO NOTHING",
                        )?
                        .execute(params![source, target, t.relation, t.session_id, now])?
                        as u64;
                }
                tx.commit()?;
                Ok(added)
            })
            .await
    }

    /// The entities whose names contain any of `keywords` (case-insensitively; blank
    /// keywords ignored), and what lies within `depth` relations of them, following
    /// active relations in both directions, breadth first. Depth 0 = the matched
    /// entities alone; 1 = with their relations and neighbours; and so on. Each
    /// relation and entity appears once. No keyword or no match = an empty subgraph.
    pub async fn recall<S: AsRef<str>>(
        &self,
        keywords: impl IntoIterator<Item = S>,
        depth: u32,
    ) -> Result<Subgraph, StorageError> {
        let mut folded: Vec<String> = keywords
            .into_iter()
            .map(|k| fold(k.as_ref()))
            // No stored name holds a NUL (commit refuses them, PostgreSQL text cannot).
            .filter(|k| !k.is_empty() && !k.contains('\0'))
            .collect();
        folded.sort();
        folded.dedup();
        if folded.is_empty() {
            return Ok(Subgraph::default());
        }
        if let Some(pg) = self.db.pg() {
            return super::pg::memory::recall(pg, &folded, depth).await;
        }
        let op = format!("recall {folded:?} at depth {depth}");
        self.db
            .call(op, move |conn| {
                // One read transaction: every level sees the same snapshot.
                let tx = conn.transaction()?;
                let graph = recall(&tx, &folded, depth)?;
                tx.commit()?;
                Ok(graph)
            })
            .await
    }

    /// Counts of the graph: entities, relations (active and soft-purged), entities per
    /// type, relations per type, sessions, and the most mentioned entities.
    pub async fn introspect(&self) -> Result<MemoryStats, StorageError> {
        if let Some(pg) = self.db.pg() {
            return super::pg::memory::introspect(pg).await;
        }
        self.db
            .call("introspect graph memory", |conn| {
                let count = |sql: &str| -> rusqlite::Result<u64> {
                    conn.query_row(sql, [], |row| row.get::<_, i64>(0))
                        .map(|n| n as u64)
                };
                let grouped = |sql: &str| -> rusqlite::Result<BTreeMap<String, u64>> {
                    let mut stmt = conn.prepare(sql)?;
                    let rows =
                        stmt.query_map([], |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)))?;
                    rows.collect()
                };
                let mut stmt = conn.prepare(
                    "SELECT name, type, mention_count FROM entities
                     ORDER BY mention_count DESC, name LIMIT ?1",
                )?;
                let top_entities = stmt
                    .query_map([TOP_ENTITIES], entity_row)?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(MemoryStats {
                    entities: count("SELECT count(*) FROM entities")?,
                    relations: count("SELECT count(*) FROM relations WHERE active = 1")?,
                    inactive_relations: count("SELECT count(*) FROM relations WHERE active = 0")?,
                    entity_types: grouped("SELECT type, count(*) FROM entities GROUP BY type")?,
                    relation_types: grouped(
                        "SELECT relation_type, count(*) FROM relations
                         WHERE active = 1 GROUP BY relation_type",
                    )?,
                    sessions: count(
                        "SELECT count(DISTINCT session_id) FROM relations
                         WHERE active = 1 AND session_id <> ''",
                    )?,
                    top_entities,
                })
            })
            .await
    }

    /// Merges entity `source` into `target` (names matched case-insensitively, as
    /// everywhere): every relation of `source` (active or not) is redirected to
    /// `target`; relations that would become self-loops (between the two, or
    /// `source` to itself) are dropped, and so are active ones that would duplicate an
    /// active relation `target` already has. `target`'s mention count becomes the sum,
    /// it takes `source`'s type if it has none, and `source` is deleted. One
    /// transaction. Returns how many relations were redirected (dropped ones not
    /// counted).
    ///
    /// Errors: [`StorageError::NotFound`] (`entities`, name) if either entity does not
    /// exist; [`StorageError::Invalid`] if both names are the same entity.
    pub async fn merge_entities(&self, source: &str, target: &str) -> Result<u64, StorageError> {
        let (source, target) = (source.trim().to_string(), target.trim().to_string());
        if fold(&source) == fold(&target) {
            return Err(StorageError::Invalid {
                what: "merge entities".into(),
                reason: format!("`{source}` and `{target}` are the same entity"),
            });
        }
        // No stored name holds a NUL (commit refuses them, PostgreSQL text cannot).
        for name in [&source, &target] {
            if name.contains('\0') {
                return Err(entity_not_found(name.clone()));
            }
        }
        if let Some(pg) = self.db.pg() {
            return super::pg::memory::merge_entities(pg, &source, &target, now()).await;
        }
        let op = format!("merge entity `{source}` into `{target}`");
        self.db
            .call(op, move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let find = |name: &str| {
                    tx.prepare_cached(
                        "SELECT id, mention_count, type FROM entities WHERE folded = ?1",
                    )?
                    .query_row([fold(name)], |row| {
                        Ok((
                            row.get::<_, i64>(0)?,
                            row.get::<_, i64>(1)?,
                            row.get::<_, String>(2)?,
                        ))
                    })
                    .optional()
                };
                let Some((s, s_mentions, s_type)) = find(&source)? else {
                    return Ok(Err(entity_not_found(source)));
                };
                let Some((t, _, _)) = find(&target)? else {
                    return Ok(Err(entity_not_found(target)));
                };
                // Would-be self-loops.
                tx.execute(
                    "DELETE FROM relations
                     WHERE (source_id = ?1 AND target_id IN (?1, ?2))
                        OR (target_id = ?1 AND source_id = ?2)",
                    [s, t],
                )?;
                // Would-be duplicates of target's active relations.
                tx.execute(
                    "DELETE FROM relations AS r
                     WHERE r.active = 1 AND r.source_id = ?1 AND EXISTS (
                         SELECT 1 FROM relations d
                         WHERE d.active = 1 AND d.source_id = ?2
                           AND d.target_id = r.target_id AND d.relation_type = r.relation_type)",
                    [s, t],
                )?;
                tx.execute(
                    "DELETE FROM relations AS r
                     WHERE r.active = 1 AND r.target_id = ?1 AND EXISTS (
                         SELECT 1 FROM relations d
                         WHERE d.active = 1 AND d.target_id = ?2
                           AND d.source_id = r.source_id AND d.relation_type = r.relation_type)",
                    [s, t],
                )?;
                // No row has both ends at `source` any more: the two updates touch
                // distinct rows.
                let moved = tx.execute(
                    "UPDATE relations SET source_id = ?2 WHERE source_id = ?1",
                    [s, t],
                )? + tx.execute(
                    "UPDATE relations SET target_id = ?2 WHERE target_id = ?1",
                    [s, t],
                )?;
                tx.execute(
                    "UPDATE entities SET
                         mention_count = mention_count + ?2,
                         type = CASE WHEN type = '' THEN ?3 ELSE type END,
                         updated_at = ?4
                     WHERE id = ?1",
                    params![t, s_mentions, s_type, now()],
                )?;
                tx.execute("DELETE FROM entities WHERE id = ?1", [s])?;
                tx.commit()?;
                Ok(Ok(moved as u64))
            })
            .await?
    }

    /// Removes the relations matching `criteria` (see [`PurgeMode`]): soft marks active
    /// ones inactive; hard deletes matching ones whether active or not, then the
    /// entities they touched that no relation refers to any more. One transaction.
    /// Returns how many relations were marked or deleted.
    ///
    /// Errors: [`StorageError::Invalid`] if no criterion is given (purging everything
    /// by accident is not an option).
    pub async fn purge(
        &self,
        criteria: &PurgeCriteria,
        mode: PurgeMode,
    ) -> Result<u64, StorageError> {
        // A soft purge binds the time as ?1.
        let first = match mode {
            PurgeMode::Soft => 2,
            PurgeMode::Hard => 1,
        };
        let Some((filter, args)) = criteria.sql(first) else {
            return Err(StorageError::Invalid {
                what: "purge".into(),
                reason: format!(
                    "no criteria (give at least one of {})",
                    PurgeCriteria::KEYS.join(", ")
                ),
            });
        };
        // No stored name, type or session holds a NUL (commit refuses them): nothing
        // matches.
        if criteria
            .terms()
            .iter()
            .any(|(_, value, _)| value.contains('\0'))
        {
            return Ok(0);
        }
        if let Some(pg) = self.db.pg() {
            return super::pg::memory::purge(pg, criteria, mode, now()).await;
        }
        let op = format!("{} purge of graph memory ({criteria:?})", mode.as_str());
        self.db
            .call(op, move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let n = match mode {
                    PurgeMode::Soft => {
                        let params = std::iter::once(SqlValue::Integer(now())).chain(args);
                        tx.execute(
                            &format!(
                                "UPDATE relations SET active = 0, purged_at = ?1
                                 WHERE active = 1 AND {filter}"
                            ),
                            params_from_iter(params),
                        )?
                    }
                    PurgeMode::Hard => {
                        let mut touched = HashSet::new();
                        {
                            let mut stmt = tx.prepare(&format!(
                                "SELECT source_id, target_id FROM relations
                                 WHERE {filter}"
                            ))?;
                            let mut rows = stmt.query(params_from_iter(&args))?;
                            while let Some(row) = rows.next()? {
                                touched.insert(row.get::<_, i64>(0)?);
                                touched.insert(row.get::<_, i64>(1)?);
                            }
                        }
                        let n = tx.execute(
                            &format!("DELETE FROM relations WHERE {filter}"),
                            params_from_iter(&args),
                        )?;
                        let touched: Vec<i64> = touched.into_iter().collect();
                        let orphans = tx.execute(
                            "DELETE FROM entities
                             WHERE id IN (SELECT value FROM json_each(?1))
                               AND NOT EXISTS (SELECT 1 FROM relations WHERE source_id = entities.id)
                               AND NOT EXISTS (SELECT 1 FROM relations WHERE target_id = entities.id)",
                            [ids_json(&touched)],
                        )?;
                        tracing::debug!(relations = n, orphans, "graph memory hard purge");
                        n
                    }
                };
                tx.commit()?;
                Ok(n as u64)
            })
            .await
    }
}

/// A triple trimmed and checked.
fn clean(index: usize, t: Triple) -> Result<Triple, StorageError> {
    let t = Triple {
        subject: t.subject.trim().to_string(),
        relation: t.relation.trim().to_string(),
        object: t.object.trim().to_string(),
        subject_type: t.subject_type.trim().to_string(),
        object_type: t.object_type.trim().to_string(),
        session_id: t.session_id.trim().to_string(),
    };
    for (field, value) in [
        ("subject", &t.subject),
        ("relation", &t.relation),
        ("object", &t.object),
    ] {
        if value.is_empty() {
            return Err(StorageError::Invalid {
                what: format!("commit: triple {index}"),
                reason: format!("empty `{field}`"),
            });
        }
    }
    for (field, value) in [
        ("subject", &t.subject),
        ("relation", &t.relation),
        ("object", &t.object),
        ("subject_type", &t.subject_type),
        ("object_type", &t.object_type),
        ("session_id", &t.session_id),
    ] {
        if value.contains('\0') {
            return Err(StorageError::Invalid {
                what: format!("commit: triple {index}"),
                reason: format!("`{field}` contains a NUL character"),
            });
        }
    }
    Ok(t)
}

/// The identity of an entity name: trimmed, Unicode lower case.
pub(super) fn fold(name: &str) -> String {
    name.trim().to_lowercase()
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub(super) fn entity_not_found(name: String) -> StorageError {
    StorageError::NotFound {
        table: "entities".into(),
        key: name,
    }
}

fn ids_json(ids: &[i64]) -> String {
    serde_json::to_string(ids).expect("integers serialize")
}

fn entity_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Entity> {
    Ok(Entity {
        name: row.get(0)?,
        r#type: row.get(1)?,
        mention_count: row.get(2)?,
    })
}

/// Creates the entity or counts one more mention; returns its id.
fn upsert_entity(
    tx: &rusqlite::Transaction<'_>,
    name: &str,
    kind: &str,
    now: i64,
) -> rusqlite::Result<i64> {
    tx.prepare_cached(
        "INSERT INTO entities (name, folded, type, mention_count, created_at, updated_at)
         VALUES (?1, ?2, ?3, 1, ?4, ?4)
         ON CONFLICT (folded) DO UPDATE SET
             mention_count = mention_count + 1,
             type = CASE WHEN excluded.type <> '' THEN excluded.type ELSE entities.type END,
             updated_at = excluded.updated_at
         RETURNING id",
    )?
    .query_row(params![name, fold(name), kind, now], |row| row.get(0))
}

/// Entities whose folded name contains `?2` (3+ characters), through the trigram
/// index: the FTS5 phrase `?1` finds candidates, `instr` keeps the exact substrings.
/// (The trigram tokenizer folds case once more, its own way — the final sigma `ς`
/// matches `σ` there — so the index alone would match more than a plain substring
/// search, which shorter keywords and PostgreSQL do.)
const KEYWORD_SQL: &str = "
    SELECT e.id FROM entities_fts f JOIN entities e ON e.id = f.rowid
    WHERE entities_fts MATCH ?1 AND instr(e.folded, ?2) > 0";

/// Ids of the entities whose folded name contains `keyword` (already folded).
fn matching_entities(conn: &Connection, keyword: &str) -> rusqlite::Result<Vec<i64>> {
    let rows = if keyword.chars().count() >= TRIGRAM_MIN_CHARS {
        // A quoted FTS5 string is a phrase: with the trigram tokenizer, its trigrams in
        // a row, i.e. the keyword as a substring.
        let phrase = format!("\"{}\"", keyword.replace('"', "\"\""));
        let mut stmt = conn.prepare_cached(KEYWORD_SQL)?;
        let rows = stmt.query_map([phrase.as_str(), keyword], |row| row.get(0))?;
        rows.collect::<rusqlite::Result<Vec<i64>>>()?
    } else {
        let mut stmt =
            conn.prepare_cached("SELECT id FROM entities WHERE instr(folded, ?1) > 0")?;
        let rows = stmt.query_map([keyword], |row| row.get(0))?;
        rows.collect::<rusqlite::Result<Vec<i64>>>()?
    };
    Ok(rows)
}

/// One breadth-first level: the active relations touching any entity of the frontier
/// (a JSON array of ids), in either direction. Both halves are index searches (by
/// source through `relations_active_triple`, by target through
/// `relations_by_target`), one per frontier entity; a relation with both ends in the
/// frontier comes twice and is deduplicated by the caller.
const LEVEL_SQL: &str = "
    SELECT id, source_id, target_id, relation_type FROM relations
    WHERE active = 1 AND source_id IN (SELECT value FROM json_each(?1))
    UNION ALL
    SELECT id, source_id, target_id, relation_type FROM relations
    WHERE active = 1 AND target_id IN (SELECT value FROM json_each(?1))
    ORDER BY id";

fn recall(conn: &Connection, keywords: &[String], depth: u32) -> rusqlite::Result<Subgraph> {
    let mut seeds = Vec::new();
    for keyword in keywords {
        seeds.extend(matching_entities(conn, keyword)?);
    }
    let mut walk = Walk::new(seeds);
    let mut level_stmt = conn.prepare_cached(LEVEL_SQL)?;
    for _ in 0..depth {
        let Some(frontier) = walk.frontier() else {
            break;
        };
        let rows = level_stmt
            .query_map([ids_json(frontier)], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        walk.add_level(rows);
    }
    let all = walk.entity_ids();
    if all.is_empty() {
        return Ok(Subgraph::default());
    }
    let mut by_id: HashMap<i64, Entity> = HashMap::with_capacity(all.len());
    {
        let mut stmt = conn.prepare_cached(
            "SELECT name, type, mention_count, id FROM entities
             WHERE id IN (SELECT value FROM json_each(?1))",
        )?;
        let mut rows = stmt.query([ids_json(&all)])?;
        while let Some(row) = rows.next()? {
            by_id.insert(row.get(3)?, entity_row(row)?);
        }
    }
    Ok(walk.finish(&by_id))
}

/// The breadth-first walk of [`GraphMemory::recall`], whatever the backend: the backend
/// finds the seeds and each level's relations and looks up the entities; this keeps
/// what was visited and walked and puts the result in its documented order.
pub(super) struct Walk {
    /// Every entity reached so far.
    visited: HashSet<i64>,
    /// The seeds, then the entities first reached at each level.
    levels: Vec<Vec<i64>>,
    /// Ids of the relations walked.
    walked: HashSet<i64>,
    /// (source, target, type) of each relation walked, in walk order.
    edges: Vec<(i64, i64, String)>,
}

impl Walk {
    /// A walk from the entities the keywords matched (in any order, repeats allowed).
    pub(super) fn new(seeds: impl IntoIterator<Item = i64>) -> Walk {
        let mut visited = HashSet::new();
        let seeds: Vec<i64> = seeds.into_iter().filter(|&id| visited.insert(id)).collect();
        Walk {
            visited,
            levels: vec![seeds],
            walked: HashSet::new(),
            edges: Vec::new(),
        }
    }

    /// The entities the next level starts from; `None` when the last level reached
    /// nothing new (or nothing matched).
    pub(super) fn frontier(&self) -> Option<&[i64]> {
        self.levels
            .last()
            .map(Vec::as_slice)
            .filter(|level| !level.is_empty())
    }

    /// Adds one level: the active relations touching the frontier as `(id, source,
    /// target, type)`, ordered by id. A relation may come twice (both ends in the
    /// frontier) or again from an earlier level; it is walked once.
    pub(super) fn add_level(&mut self, rows: impl IntoIterator<Item = (i64, i64, i64, String)>) {
        let mut next = Vec::new();
        for (id, source, target, relation_type) in rows {
            if !self.walked.insert(id) {
                continue;
            }
            self.edges.push((source, target, relation_type));
            for end in [source, target] {
                if self.visited.insert(end) {
                    next.push(end);
                }
            }
        }
        self.levels.push(next);
    }

    /// Every entity reached, seeds first.
    pub(super) fn entity_ids(&self) -> Vec<i64> {
        self.levels.iter().flatten().copied().collect()
    }

    /// The subgraph, given every entity of [`Walk::entity_ids`] by id: entities level
    /// by level, most mentioned first, then by name (byte-wise); relations in walk
    /// order.
    pub(super) fn finish(self, by_id: &HashMap<i64, Entity>) -> Subgraph {
        let relations = self
            .edges
            .into_iter()
            .map(|(source, target, relation_type)| Relation {
                source_name: by_id[&source].name.clone(),
                target_name: by_id[&target].name.clone(),
                relation_type,
            })
            .collect();
        let mut entities = Vec::with_capacity(by_id.len());
        for level in self.levels {
            let mut level: Vec<Entity> = level.iter().map(|id| by_id[id].clone()).collect();
            level.sort_by(|a, b| {
                b.mention_count
                    .cmp(&a.mention_count)
                    .then_with(|| a.name.cmp(&b.name))
            });
            entities.extend(level);
        }
        Subgraph {
            entities,
            relations,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::storage::test_db::{on_both_backends, TestDb};

    on_both_backends!(
        commit_counts_mentions_and_never_duplicates_an_active_triple,
        a_bad_triple_rejects_the_whole_commit,
        recall_walks_both_directions_level_by_level_each_relation_once,
        recall_matches_keywords_as_case_insensitive_substrings,
        keywords_match_literally_never_as_patterns,
        merge_redirects_relations_drops_self_loops_and_sums_mentions,
        soft_purge_hides_relations_hard_purge_deletes_them_and_orphans,
        purge_needs_criteria_and_a_known_mode,
        brokers_committing_the_same_facts_at_once_agree,
        merges_and_purges_beside_commits_keep_the_graph_whole,
    );

    async fn open(t: &TestDb) -> GraphMemory {
        GraphMemory::new(t.open().await)
    }

    async fn open_sqlite(dir: &std::path::Path) -> GraphMemory {
        GraphMemory::new(Db::open(dir).await.unwrap())
    }

    fn typed(s: &str, r: &str, o: &str, st: &str, ot: &str) -> Triple {
        Triple {
            subject_type: st.into(),
            object_type: ot.into(),
            ..Triple::new(s, r, o)
        }
    }

    fn in_session(s: &str, r: &str, o: &str, session: &str) -> Triple {
        Triple {
            session_id: session.into(),
            ..Triple::new(s, r, o)
        }
    }

    fn rel(s: &str, r: &str, o: &str) -> Relation {
        Relation {
            source_name: s.into(),
            target_name: o.into(),
            relation_type: r.into(),
        }
    }

    fn names(graph: &Subgraph) -> Vec<&str> {
        graph.entities.iter().map(|e| e.name.as_str()).collect()
    }

    fn sorted(mut relations: Vec<Relation>) -> Vec<Relation> {
        relations.sort_by(|a, b| {
            (&a.source_name, &a.relation_type, &a.target_name).cmp(&(
                &b.source_name,
                &b.relation_type,
                &b.target_name,
            ))
        });
        relations
    }

    fn mentions(stats: &MemoryStats) -> HashMap<String, i64> {
        stats
            .top_entities
            .iter()
            .map(|e| (e.name.clone(), e.mention_count))
            .collect()
    }

    async fn commit_counts_mentions_and_never_duplicates_an_active_triple(t: TestDb) {
        let memory = open(&t).await;
        let added = memory
            .commit(vec![
                typed("Alice", "likes", "coffee", "Person", ""),
                // Same triple: names compare case-insensitively and trimmed.
                Triple::new(" alice", "likes", "Coffee "),
                typed("Alice", "works_at", "Acme", "", "Organization"),
            ])
            .await
            .unwrap();
        assert_eq!(added, 2);
        // Committed again later: counted as mentions, not stored twice.
        let added = memory
            .commit(vec![typed("ALICE", "likes", "coffee", "", "Drink")])
            .await
            .unwrap();
        assert_eq!(added, 0);
        // A different relation type between the same pair is another relation.
        let added = memory
            .commit(vec![Triple::new("Alice", "brews", "coffee")])
            .await
            .unwrap();
        assert_eq!(added, 1);

        let stats = memory.introspect().await.unwrap();
        assert_eq!(stats.entities, 3);
        assert_eq!(stats.relations, 3);
        assert_eq!(stats.inactive_relations, 0);
        assert_eq!(
            mentions(&stats),
            HashMap::from([
                ("Alice".to_string(), 5),
                ("coffee".to_string(), 4),
                ("Acme".to_string(), 1),
            ])
        );
        // The first spelling is kept; a triple that names a type sets it.
        assert_eq!(
            stats.top_entities,
            [
                Entity {
                    name: "Alice".into(),
                    r#type: "Person".into(),
                    mention_count: 5
                },
                Entity {
                    name: "coffee".into(),
                    r#type: "Drink".into(),
                    mention_count: 4
                },
                Entity {
                    name: "Acme".into(),
                    r#type: "Organization".into(),
                    mention_count: 1
                },
            ]
        );
        assert_eq!(
            serde_json::to_value(&stats).unwrap(),
            json!({
                "entities": 3,
                "relations": 3,
                "inactive_relations": 0,
                "entity_types": {"Drink": 1, "Organization": 1, "Person": 1},
                "relation_types": {"brews": 1, "likes": 1, "works_at": 1},
                "sessions": 0,
                "top_entities": [
                    {"name": "Alice", "type": "Person", "mention_count": 5},
                    {"name": "coffee", "type": "Drink", "mention_count": 4},
                    {"name": "Acme", "type": "Organization", "mention_count": 1},
                ],
            })
        );

        // Acknowledged commits are there for any other handle (another broker).
        let other = open(&t).await;
        assert_eq!(other.introspect().await.unwrap(), stats);
    }

    async fn a_bad_triple_rejects_the_whole_commit(t: TestDb) {
        let memory = open(&t).await;
        let err = memory
            .commit(vec![
                Triple::new("a", "r", "b"),
                Triple::new("  ", "r", "b"),
            ])
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::Invalid { .. }), "{err:?}");
        assert_eq!(err.to_string(), "commit: triple 1: empty `subject`");
        let err = memory
            .commit(vec![Triple::new("a", "", "b")])
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "commit: triple 0: empty `relation`");
        let err = memory
            .commit(vec![in_session("a", "r", "b", "s\0")])
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "commit: triple 0: `session_id` contains a NUL character"
        );
        // A NUL matches nothing anywhere, and is no error.
        assert_eq!(
            memory.recall(["a\0"], 1).await.unwrap(),
            Subgraph::default()
        );
        let err = memory.merge_entities("a\0", "b").await.unwrap_err();
        assert_eq!(err.to_string(), "no `a\0` in entities");
        let criteria = PurgeCriteria::from_map([("subject_contains", "\0")]).unwrap();
        assert_eq!(memory.purge(&criteria, PurgeMode::Hard).await.unwrap(), 0);
        assert_eq!(memory.introspect().await.unwrap(), MemoryStats::default());
        assert_eq!(memory.commit(Vec::new()).await.unwrap(), 0);
    }

    /// Alice -likes-> Coffee <-likes- Bob, Alice -knows-> Bob,
    /// Coffee -grown_in-> Brazil -in-> South America, 咖啡店 -sells-> Coffee.
    async fn coffee_graph(memory: &GraphMemory) {
        memory
            .commit(vec![
                Triple::new("Alice", "likes", "Coffee"),
                Triple::new("Bob", "likes", "Coffee"),
                Triple::new("Alice", "knows", "Bob"),
                Triple::new("Coffee", "grown_in", "Brazil"),
                Triple::new("Brazil", "in", "South America"),
                Triple::new("咖啡店", "sells", "Coffee"),
            ])
            .await
            .unwrap();
    }

    async fn recall_walks_both_directions_level_by_level_each_relation_once(t: TestDb) {
        let memory = open(&t).await;
        coffee_graph(&memory).await;

        // Depth 0: the matched entities alone.
        let graph = memory.recall(["coffee"], 0).await.unwrap();
        assert_eq!(names(&graph), ["Coffee"]);
        assert!(graph.relations.is_empty());

        // Depth 1: incoming (likes, sells) and outgoing (grown_in) relations.
        let graph = memory.recall(["COFFEE"], 1).await.unwrap();
        assert_eq!(
            graph.relations,
            [
                rel("Alice", "likes", "Coffee"),
                rel("Bob", "likes", "Coffee"),
                rel("Coffee", "grown_in", "Brazil"),
                rel("咖啡店", "sells", "Coffee"),
            ]
        );
        assert_eq!(names(&graph)[0], "Coffee");
        let mut level1 = names(&graph)[1..].to_vec();
        level1.sort();
        assert_eq!(level1, ["Alice", "Bob", "Brazil", "咖啡店"]);

        // Depth 2: Alice and Bob are both on the frontier; `knows` between them comes
        // once. South America is reached from Brazil.
        let graph = memory.recall(["Coffee"], 2).await.unwrap();
        assert_eq!(graph.relations.len(), 6);
        assert_eq!(
            &graph.relations[4..],
            [
                rel("Alice", "knows", "Bob"),
                rel("Brazil", "in", "South America"),
            ]
        );
        assert_eq!(names(&graph).len(), 6);
        assert_eq!(names(&graph).last(), Some(&"South America"));
        let unique: HashSet<_> = graph.relations.iter().collect();
        assert_eq!(unique.len(), graph.relations.len());

        // Incoming only: from South America, up the chain.
        let graph = memory.recall(["south america"], 2).await.unwrap();
        assert_eq!(
            graph.relations,
            [
                rel("Brazil", "in", "South America"),
                rel("Coffee", "grown_in", "Brazil"),
            ]
        );
        assert_eq!(names(&graph), ["South America", "Brazil", "Coffee"]);

        // Depth larger than the graph: everything, once, and it stops.
        let graph = memory.recall(["brazil"], 100).await.unwrap();
        assert_eq!(graph.relations.len(), 6);
        assert_eq!(graph.entities.len(), 6);
    }

    async fn recall_matches_keywords_as_case_insensitive_substrings(t: TestDb) {
        let memory = open(&t).await;
        coffee_graph(&memory).await;
        // Trigram index path (3+ characters) and scan path (fewer), ASCII and CJK.
        for keywords in [
            vec!["OFFE"],
            vec!["ee"],
            vec!["E"],
            vec!["coffee", "Coffee", "  "],
        ] {
            let graph = memory.recall(&keywords, 0).await.unwrap();
            assert!(names(&graph).contains(&"Coffee"), "{keywords:?}");
        }
        assert_eq!(
            names(&memory.recall(["咖啡"], 0).await.unwrap()),
            ["咖啡店"]
        );
        assert_eq!(
            names(&memory.recall(["咖啡店"], 0).await.unwrap()),
            ["咖啡店"]
        );
        assert_eq!(
            names(&memory.recall(["啡店"], 0).await.unwrap()),
            ["咖啡店"]
        );
        assert_eq!(
            names(&memory.recall(["SOUTH AM"], 0).await.unwrap()),
            ["South America"]
        );
        // A quote in a keyword is not FTS syntax.
        assert!(memory
            .recall(["\"cof"], 1)
            .await
            .unwrap()
            .entities
            .is_empty());
        // Several keywords: union of matches, still each relation once.
        let graph = memory.recall(["alice", "bob"], 1).await.unwrap();
        assert_eq!(
            sorted(graph.relations.clone()),
            [
                rel("Alice", "knows", "Bob"),
                rel("Alice", "likes", "Coffee"),
                rel("Bob", "likes", "Coffee"),
            ]
        );
        assert_eq!(names(&graph)[2], "Coffee");
        // Nothing to match.
        assert_eq!(
            memory.recall(["tea"], 2).await.unwrap(),
            Subgraph::default()
        );
        assert_eq!(
            memory.recall(Vec::<String>::new(), 2).await.unwrap(),
            Subgraph::default()
        );
        assert_eq!(memory.recall([" "], 2).await.unwrap(), Subgraph::default());
    }

    async fn merge_redirects_relations_drops_self_loops_and_sums_mentions(t: TestDb) {
        let memory = open(&t).await;
        memory
            .commit(vec![
                typed("Alice", "lives_in", "NYC", "Person", "City"),
                Triple::new("Bob", "visited", "NYC"),
                Triple::new("NYC", "part_of", "USA"),
                Triple::new("New York", "part_of", "USA"),
                Triple::new("NYC", "alias_of", "New York"),
                Triple::new("New York", "short_for", "NYC"),
                Triple::new("NYC", "nickname", "NYC"),
            ])
            .await
            .unwrap();
        let before = mentions(&memory.introspect().await.unwrap());
        assert_eq!(before["NYC"], 7);
        assert_eq!(before["New York"], 3);

        // Moved: lives_in and visited. Dropped: part_of (New York has it already) and
        // the three that would be self-loops.
        let moved = memory.merge_entities("nyc", "new york").await.unwrap();
        assert_eq!(moved, 2);
        let stats = memory.introspect().await.unwrap();
        assert_eq!(stats.entities, 4);
        assert_eq!(stats.relations, 3);
        let ny = stats
            .top_entities
            .iter()
            .find(|e| e.name == "New York")
            .unwrap();
        assert_eq!(ny.mention_count, 10);
        assert_eq!(
            ny.r#type, "City",
            "takes the source's type when it has none"
        );
        assert!(memory.recall(["nyc"], 1).await.unwrap().entities.is_empty());
        assert_eq!(
            sorted(memory.recall(["new york"], 1).await.unwrap().relations),
            [
                rel("Alice", "lives_in", "New York"),
                rel("Bob", "visited", "New York"),
                rel("New York", "part_of", "USA"),
            ]
        );

        let err = memory.merge_entities("nyc", "New York").await.unwrap_err();
        assert!(
            matches!(&err, StorageError::NotFound { table, key } if table == "entities" && key == "nyc"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "no `nyc` in entities");
        let err = memory.merge_entities("Alice", "Carol").await.unwrap_err();
        assert_eq!(err.to_string(), "no `Carol` in entities");
        let err = memory.merge_entities("Alice", " ALICE").await.unwrap_err();
        assert!(matches!(err, StorageError::Invalid { .. }), "{err:?}");
        // A failed merge changed nothing.
        assert_eq!(memory.introspect().await.unwrap(), stats);
    }

    async fn soft_purge_hides_relations_hard_purge_deletes_them_and_orphans(t: TestDb) {
        let memory = open(&t).await;
        memory
            .commit(vec![
                in_session("Alice", "likes", "tea", "s1"),
                in_session("Alice", "likes", "green tea", "s1"),
                in_session("Alice", "knows", "Bob", "s2"),
                in_session("Bob", "likes", "tea", "s2"),
                in_session("Carol", "drinks", "Matcha", "s2"),
            ])
            .await
            .unwrap();

        // Soft, several criteria ANDed.
        let criteria = PurgeCriteria::from_map([
            ("relation_type", "likes"),
            ("target_contains", "TEA"),
            ("session_id", "s1"),
        ])
        .unwrap();
        assert_eq!(memory.purge(&criteria, PurgeMode::Soft).await.unwrap(), 2);
        // Already inactive: a second soft purge finds nothing.
        assert_eq!(memory.purge(&criteria, PurgeMode::Soft).await.unwrap(), 0);
        let graph = memory.recall(["alice"], 1).await.unwrap();
        assert_eq!(graph.relations, [rel("Alice", "knows", "Bob")]);
        assert!(!names(&graph).contains(&"green tea"));
        let stats = memory.introspect().await.unwrap();
        assert_eq!((stats.relations, stats.inactive_relations), (3, 2));
        assert_eq!(stats.entities, 6, "a soft purge deletes no entity");
        assert_eq!(stats.sessions, 1);
        // The same fact told again is a new active relation.
        let added = memory
            .commit(vec![Triple::new("Alice", "likes", "tea")])
            .await
            .unwrap();
        assert_eq!(added, 1);

        // Hard: every relation whose subject contains "ali", active or not (4). Alice
        // and green tea are left with none and go; tea and Bob stay (Bob likes tea).
        let criteria = PurgeCriteria {
            subject_contains: Some("ALI".into()),
            ..PurgeCriteria::default()
        };
        assert_eq!(memory.purge(&criteria, PurgeMode::Hard).await.unwrap(), 4);
        let stats = memory.introspect().await.unwrap();
        assert_eq!((stats.relations, stats.inactive_relations), (2, 0));
        let left: HashSet<String> = stats.top_entities.into_iter().map(|e| e.name).collect();
        assert_eq!(
            left,
            HashSet::from(["Bob", "tea", "Carol", "Matcha"].map(String::from))
        );
        assert_eq!(
            sorted(memory.recall(["a"], 1).await.unwrap().relations),
            [rel("Bob", "likes", "tea"), rel("Carol", "drinks", "Matcha")]
        );
        // Nothing matches: nothing happens.
        let criteria = PurgeCriteria::from_map([("session_id", "nope")]).unwrap();
        assert_eq!(memory.purge(&criteria, PurgeMode::Hard).await.unwrap(), 0);
    }

    async fn purge_needs_criteria_and_a_known_mode(t: TestDb) {
        let memory = open(&t).await;
        memory
            .commit(vec![Triple::new("a", "r", "b")])
            .await
            .unwrap();
        for criteria in [
            PurgeCriteria::default(),
            PurgeCriteria::from_map(HashMap::<String, String>::new()).unwrap(),
            // Empty values are no criteria.
            PurgeCriteria::from_map([("subject_contains", ""), ("session_id", "")]).unwrap(),
            PurgeCriteria {
                relation_type: Some("  ".into()),
                ..PurgeCriteria::default()
            },
        ] {
            for mode in [PurgeMode::Soft, PurgeMode::Hard] {
                let err = memory.purge(&criteria, mode).await.unwrap_err();
                assert!(matches!(err, StorageError::Invalid { .. }), "{err:?}");
                assert!(err.to_string().starts_with("purge: no criteria"), "{err}");
            }
        }
        let err = PurgeCriteria::from_map([("subject", "a")]).unwrap_err();
        assert!(
            err.to_string().contains("unknown criterion `subject`"),
            "{err}"
        );
        assert_eq!("soft".parse::<PurgeMode>().unwrap(), PurgeMode::Soft);
        assert_eq!("hard".parse::<PurgeMode>().unwrap(), PurgeMode::Hard);
        for bad in ["", "Soft", "medium"] {
            let err = bad.parse::<PurgeMode>().unwrap_err();
            assert!(matches!(err, StorageError::Invalid { .. }), "{err:?}");
        }
        assert_eq!(memory.introspect().await.unwrap().relations, 1);
    }

    async fn keywords_match_literally_never_as_patterns(t: TestDb) {
        let memory = open(&t).await;
        memory
            .commit(vec![
                Triple::new("50% off", "is", "a_deal"),
                Triple::new("500 off", "is", "abdeal"),
                Triple::new("back\\slash", "is", "odd"),
                Triple::new("Οδυσσευς", "is", "hero"),
            ])
            .await
            .unwrap();
        // `%`, `_` and `\` are characters like any other, on the index path (3+
        // characters) and the scan path alike.
        for (keyword, expected) in [
            ("%", vec!["50% off"]),
            ("0%", vec!["50% off"]),
            ("% o", vec!["50% off"]),
            ("0 o", vec!["500 off"]),
            ("_", vec!["a_deal"]),
            ("a_d", vec!["a_deal"]),
            ("A_DEAL", vec!["a_deal"]),
            ("\\", vec!["back\\slash"]),
            ("k\\s", vec!["back\\slash"]),
            ("\\%", vec![]),
            ("%%%", vec![]),
            ("___", vec![]),
            // A substring, not the trigram tokenizer's own folding (ς is not σ there).
            ("ευς", vec!["Οδυσσευς"]),
            ("σευσ", vec![]),
            ("ΣΕΥΣ", vec!["Οδυσσευς"]),
        ] {
            let graph = memory.recall([keyword], 0).await.unwrap();
            assert_eq!(names(&graph), expected, "{keyword:?}");
        }
    }

    /// Two brokers (two handles: two pools on PostgreSQL, two connections on SQLite),
    /// each with two tasks, commit the same facts at the same time in opposite orders:
    /// no commit fails (no deadlock), every mention counts, and each fact is one active
    /// relation.
    async fn brokers_committing_the_same_facts_at_once_agree(t: TestDb) {
        const ROUNDS: i64 = 20;
        let brokers = [open(&t).await, open(&t).await];
        let worker = |memory: GraphMemory, name: String, reverse: bool| async move {
            let mut added = 0;
            for round in 0..ROUNDS {
                let mut triples = vec![
                    Triple::new("Alice", "likes", " Coffee"),
                    Triple::new("Bob ", "likes", "Coffee"),
                    Triple::new("Alice", "knows", "Bob"),
                    in_session("Alice", "said", &format!("{name} {round}"), &name),
                ];
                if reverse {
                    triples.reverse();
                }
                added += memory.commit(triples).await.unwrap();
            }
            added
        };
        let (a1, a2, b1, b2) = tokio::join!(
            worker(brokers[0].clone(), "a1".into(), false),
            worker(brokers[0].clone(), "a2".into(), true),
            worker(brokers[1].clone(), "b1".into(), true),
            worker(brokers[1].clone(), "b2".into(), false),
        );
        assert_eq!(a1 + a2 + b1 + b2, 3 + 4 * ROUNDS as u64);

        for memory in &brokers {
            let stats = memory.introspect().await.unwrap();
            assert_eq!(stats.entities, 3 + 4 * ROUNDS as u64);
            assert_eq!(
                (stats.relations, stats.inactive_relations),
                (3 + 4 * ROUNDS as u64, 0)
            );
            assert_eq!(
                stats.relation_types,
                BTreeMap::from([
                    ("knows".to_string(), 1),
                    ("likes".to_string(), 2),
                    ("said".to_string(), 4 * ROUNDS as u64),
                ])
            );
            assert_eq!(stats.sessions, 4);
            let entity = |name: &str, mention_count| Entity {
                name: name.into(),
                r#type: String::new(),
                mention_count,
            };
            assert_eq!(
                stats.top_entities[..3],
                [
                    entity("Alice", 3 * 4 * ROUNDS),
                    entity("Bob", 2 * 4 * ROUNDS),
                    entity("Coffee", 2 * 4 * ROUNDS),
                ]
            );
            assert!(stats.top_entities[3..].iter().all(|e| e.mention_count == 1));
            assert_eq!(
                sorted(memory.recall(["coffee"], 1).await.unwrap().relations),
                [
                    rel("Alice", "likes", "Coffee"),
                    rel("Bob", "likes", "Coffee")
                ]
            );
        }
    }

    /// One broker commits while another commits, merges and hard-purges in a loop: the
    /// end state is the same whatever the interleaving, and nothing fails.
    async fn merges_and_purges_beside_commits_keep_the_graph_whole(t: TestDb) {
        const ROUNDS: i64 = 15;
        let (a, b) = (open(&t).await, open(&t).await);
        a.commit(vec![
            Triple::new("Alice", "likes", "Coffee"),
            in_session("Brazil", "in", "South America", "keep"),
        ])
        .await
        .unwrap();
        let committer = async {
            for round in 0..ROUNDS {
                a.commit(vec![
                    Triple::new("Alice", "likes", "Coffee"),
                    in_session("Alice", "said", &format!("a{round}"), "keep"),
                ])
                .await
                .unwrap();
            }
        };
        let gardener = async {
            let tmp = PurgeCriteria::from_map([("session_id", "tmp")]).unwrap();
            for round in 0..ROUNDS {
                let city = format!("city{round}");
                b.commit(vec![
                    in_session(&city, "in", "USA", "tmp"),
                    in_session("Coffee", "from", &city, "tmp"),
                ])
                .await
                .unwrap();
                assert_eq!(b.merge_entities(&city, "Brazil").await.unwrap(), 2);
                // Brazil in USA and Coffee from Brazil; USA is left with nothing.
                assert_eq!(b.purge(&tmp, PurgeMode::Hard).await.unwrap(), 2);
            }
        };
        tokio::join!(committer, gardener);

        let stats = b.introspect().await.unwrap();
        assert_eq!(stats.entities, 4 + ROUNDS as u64);
        assert_eq!(
            (stats.relations, stats.inactive_relations),
            (2 + ROUNDS as u64, 0)
        );
        let m = mentions(&stats);
        assert_eq!(m["Alice"], 1 + 2 * ROUNDS);
        assert_eq!(m["Coffee"], 1 + 2 * ROUNDS);
        assert_eq!(m["Brazil"], 1 + 2 * ROUNDS);
        assert!(a.recall(["usa"], 1).await.unwrap().entities.is_empty());
        assert_eq!(
            sorted(a.recall(["brazil", "coffee"], 1).await.unwrap().relations),
            [
                rel("Alice", "likes", "Coffee"),
                rel("Brazil", "in", "South America"),
            ]
        );
    }

    /// Recall must stay index lookups as the graph grows: each level's two halves
    /// search `relations` by index (no full scan), and 3+ character keywords go
    /// through the trigram index.
    #[tokio::test]
    async fn recall_queries_use_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open_sqlite(dir.path()).await;
        coffee_graph(&memory).await;
        let plans = memory
            .db
            .call("explain", |conn| {
                let plan = |sql: &str, arg: &str| -> rusqlite::Result<String> {
                    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                    let rows = stmt.query_map([arg], |row| row.get::<_, String>(3))?;
                    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?.join("\n"))
                };
                Ok([
                    plan(LEVEL_SQL, "[1,2]")?,
                    plan(&KEYWORD_SQL.replace("?2", "'cof'"), "\"cof\"")?,
                ])
            })
            .await
            .unwrap();
        let [level, keyword] = plans;
        // Sources through `relations_active_triple` (partial, covering) or
        // `relations_by_source`, targets through `relations_by_target`.
        assert_eq!(
            level.matches("SEARCH relations USING").count(),
            2,
            "{level}"
        );
        assert!(level.contains("relations_by_target"), "{level}");
        assert!(!level.contains("SCAN relations"), "{level}");
        assert!(keyword.contains("VIRTUAL TABLE INDEX"), "{keyword}");
    }

    /// Recall time at scale (ignored by default; a sanity check, not a benchmark):
    /// `cargo test -p hearth-broker --lib --release recall_at_scale -- --ignored --nocapture`.
    #[tokio::test]
    #[ignore]
    async fn recall_at_scale() {
        for relations in [10_000u64, 100_000] {
            let dir = tempfile::tempdir().unwrap();
            let memory = open_sqlite(dir.path()).await;
            let entities = relations / 2;
            // A deterministic pseudo-random graph, ~4 relations per entity.
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let started = Instant::now();
            let mut batch = Vec::new();
            for _ in 0..relations {
                let (s, o, r) = (next() % entities, next() % entities, next() % 20);
                batch.push(Triple::new(
                    format!("e{s}x"),
                    format!("rel{r}"),
                    format!("e{o}x"),
                ));
                if batch.len() == 5_000 {
                    memory.commit(std::mem::take(&mut batch)).await.unwrap();
                }
            }
            memory.commit(batch).await.unwrap();
            let load = started.elapsed();
            for (keywords, depth) in [
                (vec!["e4242x"], 1),
                (vec!["e4242x"], 2),
                (vec!["E17X", "e99x"], 2),
                // A substring of many names: `e12x`, `e112x`, `e212x` …
                (vec!["12x"], 1),
            ] {
                let started = Instant::now();
                let graph = memory.recall(&keywords, depth).await.unwrap();
                println!(
                    "{relations} relations (loaded in {load:?}): recall {keywords:?} depth {depth}: \
                     {} entities, {} relations in {:?}",
                    graph.entities.len(),
                    graph.relations.len(),
                    started.elapsed()
                );
            }
        }
    }
}
