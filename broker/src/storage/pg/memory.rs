//! Graph memory on PostgreSQL: the rows, rules, results and errors of
//! `storage::memory` on SQLite (whose module docs describe them), for a graph several
//! brokers write at once.
//!
//! # Writers together
//! - A commit upserts each entity it names once (`INSERT … ON CONFLICT (folded) DO
//!   UPDATE … RETURNING id`, its mentions added up, the last type it gives), all in one
//!   statement in byte order of the folded names. The upsert locks each entity row until
//!   COMMIT, and every commit takes its locks in that one order, so two commits naming
//!   the same entities wait for each other and never deadlock; the mention counts add
//!   up whatever the interleaving.
//! - Relations are inserted with `ON CONFLICT … WHERE active DO NOTHING` on the partial
//!   unique index `relations_active_triple`: of two commits of one triple, one inserts
//!   it and the other counts it as a duplicate (the second waits for the first's COMMIT
//!   through the entity locks above, so it sees the row).
//! - Merges and purges change relations and delete entities that commits may be about
//!   to use; they take [`GRAPH_LOCK`] (a transaction-scoped advisory lock) exclusively,
//!   commits take it shared: commits run side by side, a merge or purge runs alone, as
//!   every write does on SQLite. The lock is released by COMMIT or ROLLBACK, so no
//!   pooled connection keeps it.
//!
//! # Readers
//! Recall and introspection run in one `REPEATABLE READ READ ONLY` transaction: every
//! query sees the same snapshot, as SQLite's read transaction does, and takes no lock.
//!
//! # Keywords
//! 3+ characters: `folded LIKE '%…%'` with `%`, `_` and `\` escaped, which the
//! `pg_trgm` GIN index `entities_folded_trgm` serves when the extension exists (a scan
//! otherwise, same result); shorter: `strpos(folded, …) > 0`. Text is sorted byte-wise
//! (`COLLATE "C"`), as SQLite does, whatever the database's collation.

use std::collections::{BTreeMap, HashMap, HashSet};

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::IsolationLevel;

use super::PgDb;
use crate::storage::memory::{entity_not_found, fold, Walk, TOP_ENTITIES, TRIGRAM_MIN_CHARS};
use crate::storage::{
    Entity, MemoryStats, PurgeCriteria, PurgeMode, StorageError, Subgraph, Triple,
};

/// The advisory lock graph writes take: shared by commits, exclusive for merges and
/// purges (`hearth-graph` as 8 bytes).
const GRAPH_LOCK: i64 = 0x6865_6172_7468_6772;

/// One entity a commit names: its first spelling in the commit, how many times the
/// commit names it, and the last type the commit gives it (`""` = none).
struct Mentioned {
    name: String,
    kind: String,
    count: i64,
}

/// The entities of `triples` by folded name, in byte order (the order their rows are
/// locked in).
fn mentioned(triples: &[Triple]) -> BTreeMap<String, Mentioned> {
    let mut entities: BTreeMap<String, Mentioned> = BTreeMap::new();
    for t in triples {
        for (name, kind) in [(&t.subject, &t.subject_type), (&t.object, &t.object_type)] {
            let entity = entities.entry(fold(name)).or_insert_with(|| Mentioned {
                name: name.clone(),
                kind: String::new(),
                count: 0,
            });
            entity.count += 1;
            if !kind.is_empty() {
                entity.kind = kind.clone();
            }
        }
    }
    entities
}

/// [`crate::storage::GraphMemory::commit`] of `triples` (already trimmed and checked,
/// not empty) at Unix time `now`.
pub(in crate::storage) async fn commit(
    pg: &PgDb,
    triples: &[Triple],
    now: i64,
) -> Result<u64, StorageError> {
    let op = format!("commit {} triples to graph memory", triples.len());
    let err = || pg.error(op.clone());
    let mut client = pg.client(&op).await?;
    let tx = client.transaction().await.map_err(err())?;
    tx.execute("SELECT pg_advisory_xact_lock_shared($1)", &[&GRAPH_LOCK])
        .await
        .map_err(err())?;

    let entities = mentioned(triples);
    let folded: Vec<&str> = entities.keys().map(String::as_str).collect();
    let names: Vec<&str> = entities.values().map(|e| e.name.as_str()).collect();
    let kinds: Vec<&str> = entities.values().map(|e| e.kind.as_str()).collect();
    let counts: Vec<i64> = entities.values().map(|e| e.count).collect();
    let upsert = tx
        .prepare_cached(
            "INSERT INTO entities (name, folded, type, mention_count, created_at, updated_at)
             SELECT name, folded, type, n, $5, $5
               FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
                    WITH ORDINALITY AS e (name, folded, type, n, i)
              ORDER BY i
             ON CONFLICT (folded) DO UPDATE SET
                 mention_count = entities.mention_count + excluded.mention_count,
                 type = CASE WHEN excluded.type <> '' THEN excluded.type ELSE entities.type END,
                 updated_at = excluded.updated_at
             RETURNING folded, id",
        )
        .await
        .map_err(err())?;
    let ids: HashMap<String, i64> = tx
        .query(&upsert, &[&names, &folded, &kinds, &counts, &now])
        .await
        .map_err(err())?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();

    let id = |name: &str| ids[&fold(name)];
    let sources: Vec<i64> = triples.iter().map(|t| id(&t.subject)).collect();
    let targets: Vec<i64> = triples.iter().map(|t| id(&t.object)).collect();
    let types: Vec<&str> = triples.iter().map(|t| t.relation.as_str()).collect();
    let sessions: Vec<&str> = triples.iter().map(|t| t.session_id.as_str()).collect();
    // Ids in the triples' order (recall lists a level's relations oldest first); a
    // triple repeated within the commit is a conflict with its first row.
    let insert = tx
        .prepare_cached(
            "INSERT INTO relations (source_id, target_id, relation_type, session_id, created_at)
             SELECT s, t, r, session, $5
               FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[])
                    WITH ORDINALITY AS x (s, t, r, session, i)
              ORDER BY i
             ON CONFLICT (source_id, target_id, relation_type) WHERE active DO NOTHING",
        )
        .await
        .map_err(err())?;
    let added = tx
        .execute(&insert, &[&sources, &targets, &types, &sessions, &now])
        .await
        .map_err(err())?;
    tx.commit().await.map_err(err())?;
    Ok(added)
}

/// `pattern` for `LIKE … ESCAPE '\'` matching `keyword` anywhere, literally.
fn contains_pattern(keyword: &str) -> String {
    let mut pattern = String::with_capacity(keyword.len() + 2);
    pattern.push('%');
    for c in keyword.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// Ids of the entities whose folded name contains `keyword` (already folded).
async fn matching_entities(
    client: &impl GenericClient,
    keyword: &str,
) -> Result<Vec<i64>, tokio_postgres::Error> {
    let rows = if keyword.chars().count() >= TRIGRAM_MIN_CHARS {
        // E'\\' is one backslash whatever `standard_conforming_strings` says.
        let stmt = client
            .prepare_cached("SELECT id FROM entities WHERE folded LIKE $1 ESCAPE E'\\\\'")
            .await?;
        client.query(&stmt, &[&contains_pattern(keyword)]).await?
    } else {
        let stmt = client
            .prepare_cached("SELECT id FROM entities WHERE strpos(folded, $1) > 0")
            .await?;
        client.query(&stmt, &[&keyword]).await?
    };
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// One breadth-first level: the active relations touching any entity of the frontier
/// (`$1`), in either direction, by id; the two halves search `relations_active_triple`
/// or `relations_by_source`, and `relations_by_target`.
const LEVEL_SQL: &str = "
    SELECT id, source_id, target_id, relation_type FROM relations
    WHERE active AND source_id = ANY($1)
    UNION ALL
    SELECT id, source_id, target_id, relation_type FROM relations
    WHERE active AND target_id = ANY($1)
    ORDER BY id";

/// [`crate::storage::GraphMemory::recall`] of `keywords` (folded, deduplicated, not
/// empty).
pub(in crate::storage) async fn recall(
    pg: &PgDb,
    keywords: &[String],
    depth: u32,
) -> Result<Subgraph, StorageError> {
    let op = format!("recall {keywords:?} at depth {depth}");
    let err = || pg.error(op.clone());
    let mut client = pg.client(&op).await?;
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(err())?;
    let mut seeds = Vec::new();
    for keyword in keywords {
        seeds.extend(matching_entities(&tx, keyword).await.map_err(err())?);
    }
    let mut walk = Walk::new(seeds);
    let level = tx.prepare_cached(LEVEL_SQL).await.map_err(err())?;
    for _ in 0..depth {
        let Some(frontier) = walk.frontier() else {
            break;
        };
        let rows = tx.query(&level, &[&frontier]).await.map_err(err())?;
        walk.add_level(
            rows.iter()
                .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3))),
        );
    }
    let all = walk.entity_ids();
    if all.is_empty() {
        return Ok(Subgraph::default());
    }
    let rows = tx
        .query(
            "SELECT name, type, mention_count, id FROM entities WHERE id = ANY($1)",
            &[&all],
        )
        .await
        .map_err(err())?;
    tx.commit().await.map_err(err())?;
    let by_id: HashMap<i64, Entity> = rows.iter().map(|row| (row.get(3), entity(row))).collect();
    Ok(walk.finish(&by_id))
}

fn entity(row: &tokio_postgres::Row) -> Entity {
    Entity {
        name: row.get(0),
        r#type: row.get(1),
        mention_count: row.get(2),
    }
}

/// [`crate::storage::GraphMemory::introspect`], from one snapshot.
pub(in crate::storage) async fn introspect(pg: &PgDb) -> Result<MemoryStats, StorageError> {
    let op = "introspect graph memory";
    let err = || pg.error(op);
    let mut client = pg.client(op).await?;
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(err())?;
    let count = |sql: &'static str| {
        let tx = &tx;
        async move {
            tx.query_one(sql, &[])
                .await
                .map(|row| row.get::<_, i64>(0) as u64)
        }
    };
    let grouped = |sql: &'static str| {
        let tx = &tx;
        async move {
            tx.query(sql, &[]).await.map(|rows| {
                rows.iter()
                    .map(|row| (row.get(0), row.get::<_, i64>(1) as u64))
                    .collect::<BTreeMap<String, u64>>()
            })
        }
    };
    let top_entities = tx
        .query(
            "SELECT name, type, mention_count FROM entities
             ORDER BY mention_count DESC, name COLLATE \"C\" LIMIT $1",
            &[&TOP_ENTITIES],
        )
        .await
        .map_err(err())?
        .iter()
        .map(entity)
        .collect();
    let stats = MemoryStats {
        entities: count("SELECT count(*) FROM entities")
            .await
            .map_err(err())?,
        relations: count("SELECT count(*) FROM relations WHERE active")
            .await
            .map_err(err())?,
        inactive_relations: count("SELECT count(*) FROM relations WHERE NOT active")
            .await
            .map_err(err())?,
        entity_types: grouped("SELECT type, count(*) FROM entities GROUP BY type")
            .await
            .map_err(err())?,
        relation_types: grouped(
            "SELECT relation_type, count(*) FROM relations
             WHERE active GROUP BY relation_type",
        )
        .await
        .map_err(err())?,
        sessions: count(
            "SELECT count(DISTINCT session_id) FROM relations
             WHERE active AND session_id <> ''",
        )
        .await
        .map_err(err())?,
        top_entities,
    };
    tx.commit().await.map_err(err())?;
    Ok(stats)
}

/// [`crate::storage::GraphMemory::merge_entities`] of `source` into `target` (trimmed,
/// not the same entity) at Unix time `now`.
pub(in crate::storage) async fn merge_entities(
    pg: &PgDb,
    source: &str,
    target: &str,
    now: i64,
) -> Result<u64, StorageError> {
    let op = format!("merge entity `{source}` into `{target}`");
    let err = || pg.error(op.clone());
    let mut client = pg.client(&op).await?;
    let tx = client.transaction().await.map_err(err())?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&GRAPH_LOCK])
        .await
        .map_err(err())?;
    let find = tx
        .prepare_cached("SELECT id, mention_count, type FROM entities WHERE folded = $1")
        .await
        .map_err(err())?;
    let Some(s) = tx.query_opt(&find, &[&fold(source)]).await.map_err(err())? else {
        return Err(entity_not_found(source.to_string()));
    };
    let (s, s_mentions, s_type): (i64, i64, String) = (s.get(0), s.get(1), s.get(2));
    let Some(t) = tx.query_opt(&find, &[&fold(target)]).await.map_err(err())? else {
        return Err(entity_not_found(target.to_string()));
    };
    let t: i64 = t.get(0);
    // Would-be self-loops.
    tx.execute(
        "DELETE FROM relations
         WHERE (source_id = $1 AND target_id IN ($1, $2))
            OR (target_id = $1 AND source_id = $2)",
        &[&s, &t],
    )
    .await
    .map_err(err())?;
    // Would-be duplicates of target's active relations.
    tx.execute(
        "DELETE FROM relations AS r
         WHERE r.active AND r.source_id = $1 AND EXISTS (
             SELECT 1 FROM relations d
             WHERE d.active AND d.source_id = $2
               AND d.target_id = r.target_id AND d.relation_type = r.relation_type)",
        &[&s, &t],
    )
    .await
    .map_err(err())?;
    tx.execute(
        "DELETE FROM relations AS r
         WHERE r.active AND r.target_id = $1 AND EXISTS (
             SELECT 1 FROM relations d
             WHERE d.active AND d.target_id = $2
               AND d.source_id = r.source_id AND d.relation_type = r.relation_type)",
        &[&s, &t],
    )
    .await
    .map_err(err())?;
    // No row has both ends at `source` any more: the two updates touch distinct rows.
    let moved = tx
        .execute(
            "UPDATE relations SET source_id = $2 WHERE source_id = $1",
            &[&s, &t],
        )
        .await
        .map_err(err())?
        + tx.execute(
            "UPDATE relations SET target_id = $2 WHERE target_id = $1",
            &[&s, &t],
        )
        .await
        .map_err(err())?;
    tx.execute(
        "UPDATE entities SET
             mention_count = mention_count + $2,
             type = CASE WHEN type = '' THEN $3 ELSE type END,
             updated_at = $4
         WHERE id = $1",
        &[&t, &s_mentions, &s_type, &now],
    )
    .await
    .map_err(err())?;
    tx.execute("DELETE FROM entities WHERE id = $1", &[&s])
        .await
        .map_err(err())?;
    tx.commit().await.map_err(err())?;
    Ok(moved)
}

/// [`crate::storage::GraphMemory::purge`] by `criteria` (at least one given) at Unix
/// time `now`.
pub(in crate::storage) async fn purge(
    pg: &PgDb,
    criteria: &PurgeCriteria,
    mode: PurgeMode,
    now: i64,
) -> Result<u64, StorageError> {
    let op = format!("{} purge of graph memory ({criteria:?})", mode.as_str());
    let err = || pg.error(op.clone());
    // A soft purge binds the time as $1.
    let first = match mode {
        PurgeMode::Soft => 2,
        PurgeMode::Hard => 1,
    };
    let terms = criteria.terms();
    let filter = terms
        .iter()
        .enumerate()
        .map(|(i, (column, _, contains))| {
            let n = first + i;
            if *contains {
                format!("{column} IN (SELECT id FROM entities WHERE strpos(folded, ${n}) > 0)")
            } else {
                format!("{column} = ${n}")
            }
        })
        .collect::<Vec<_>>()
        .join(" AND ");
    let values: Vec<&String> = terms.iter().map(|(_, value, _)| value).collect();
    let mut client = pg.client(&op).await?;
    let tx = client.transaction().await.map_err(err())?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&GRAPH_LOCK])
        .await
        .map_err(err())?;
    let n = match mode {
        PurgeMode::Soft => {
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&now];
            params.extend(values.iter().map(|v| *v as &(dyn ToSql + Sync)));
            tx.execute(
                &format!(
                    "UPDATE relations SET active = false, purged_at = $1
                     WHERE active AND {filter}"
                ),
                &params,
            )
            .await
            .map_err(err())?
        }
        PurgeMode::Hard => {
            let params: Vec<&(dyn ToSql + Sync)> =
                values.iter().map(|v| *v as &(dyn ToSql + Sync)).collect();
            let gone = tx
                .query(
                    &format!("DELETE FROM relations WHERE {filter} RETURNING source_id, target_id"),
                    &params,
                )
                .await
                .map_err(err())?;
            let touched: Vec<i64> = gone
                .iter()
                .flat_map(|row| [row.get::<_, i64>(0), row.get(1)])
                .collect::<HashSet<i64>>()
                .into_iter()
                .collect();
            let orphans = tx
                .execute(
                    "DELETE FROM entities
                     WHERE id = ANY($1)
                       AND NOT EXISTS (SELECT 1 FROM relations WHERE source_id = entities.id)
                       AND NOT EXISTS (SELECT 1 FROM relations WHERE target_id = entities.id)",
                    &[&touched],
                )
                .await
                .map_err(err())?;
            tracing::debug!(relations = gone.len(), orphans, "graph memory hard purge");
            gone.len() as u64
        }
    };
    tx.commit().await.map_err(err())?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_db::TestDb;
    use crate::storage::GraphMemory;

    /// The plan of `sql` with sequential scans discouraged (so a tiny table still
    /// shows whether an index *can* serve the query).
    async fn plan(pg: &PgDb, sql: &str, params: &[&(dyn ToSql + Sync)]) -> String {
        let mut client = pg.client("explain").await.unwrap();
        let tx = client.transaction().await.unwrap();
        // SET LOCAL ends with the transaction: the pooled connection keeps nothing.
        tx.batch_execute("SET LOCAL enable_seqscan = off")
            .await
            .unwrap();
        let rows = tx.query(&format!("EXPLAIN {sql}"), params).await.unwrap();
        rows.iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Keywords of 3+ characters go through the `pg_trgm` index (the test cluster has
    /// the extension), and each level's halves through the relation indexes.
    #[tokio::test]
    async fn recall_queries_can_use_indexes() {
        let Some(t) = TestDb::postgres() else {
            return;
        };
        let db = t.open().await;
        let memory = GraphMemory::new(db.clone());
        memory
            .commit(vec![
                Triple::new("Alice", "likes", "Coffee"),
                Triple::new("咖啡店", "sells", "Coffee"),
            ])
            .await
            .unwrap();
        let pg = db.pg().unwrap();
        let keyword = plan(
            pg,
            "SELECT id FROM entities WHERE folded LIKE $1 ESCAPE E'\\\\'",
            &[&contains_pattern("咖啡店")],
        )
        .await;
        assert!(keyword.contains("entities_folded_trgm"), "{keyword}");
        let level = plan(pg, LEVEL_SQL, &[&vec![1i64, 2]]).await;
        assert!(level.contains("relations_by_target"), "{level}");
        assert!(!level.contains("Seq Scan"), "{level}");
    }

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(contains_pattern("a%b_c\\d"), "%a\\%b\\_c\\\\d%");
        assert_eq!(contains_pattern("咖啡"), "%咖啡%");
    }
}
