//! Knowledge on PostgreSQL: the row `knowledge.content` is the entry (no folder is
//! read; see `storage::knowledge`, "On PostgreSQL"), indexed by `pg::search`.

use std::collections::HashMap;

use super::search::{IndexRows, PgIndex};
use super::PgDb;
use crate::storage::knowledge::KnowledgeEntry;
use crate::storage::StorageError;

/// Writes the entry `name` and its index rows in one transaction, replacing an entry
/// of that name. `size` and `mtime_ns` describe the file it was imported from (the
/// content's length and -1 for an entry added through the API).
pub(in crate::storage) async fn upsert(
    pg: &PgDb,
    name: &str,
    content: &str,
    (size, mtime_ns): (i64, i64),
    rows: &IndexRows,
    now: i64,
) -> Result<(), StorageError> {
    let op = format!("write knowledge entry {name}");
    let err = || pg.error(op.clone());
    let mut client = pg.client(&op).await?;
    let tx = client.transaction().await.map_err(err())?;
    let seq: i64 = tx
        .query_one(
            "INSERT INTO knowledge (name, content, size, mtime_ns, indexed_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (name) DO UPDATE SET content = excluded.content,
                 size = excluded.size, mtime_ns = excluded.mtime_ns,
                 indexed_at = excluded.indexed_at
             RETURNING seq",
            &[&name, &content, &size, &mtime_ns, &now],
        )
        .await
        .map_err(err())?
        .get(0);
    PgIndex::KNOWLEDGE
        .put(&tx, seq, rows)
        .await
        .map_err(err())?;
    tx.commit().await.map_err(err())
}

/// Deletes the entry `name` and (by cascade) its index rows; false if there was none.
pub(in crate::storage) async fn remove(pg: &PgDb, name: &str) -> Result<bool, StorageError> {
    let op = format!("remove knowledge entry {name}");
    let client = pg.client(&op).await?;
    let deleted = client
        .execute("DELETE FROM knowledge WHERE name = $1", &[&name])
        .await
        .map_err(pg.error(op))?;
    Ok(deleted > 0)
}

/// Every entry's name, sorted byte-wise (as SQLite sorts).
pub(in crate::storage) async fn list(pg: &PgDb) -> Result<Vec<String>, StorageError> {
    let op = "list knowledge";
    let client = pg.client(op).await?;
    let rows = client
        .query(
            "SELECT name FROM knowledge ORDER BY name COLLATE \"C\"",
            &[],
        )
        .await
        .map_err(pg.error(op))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The content of each of `names` that is an entry.
pub(in crate::storage) async fn contents(
    pg: &PgDb,
    names: &[String],
) -> Result<HashMap<String, String>, StorageError> {
    let op = "read knowledge entries";
    let client = pg.client(op).await?;
    let rows = client
        .query(
            "SELECT name, content FROM knowledge WHERE name = ANY($1)",
            &[&names],
        )
        .await
        .map_err(pg.error(op))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The best `limit` entries for `query`, best first, with their scores.
pub(in crate::storage) async fn search(
    pg: &PgDb,
    query: &str,
    limit: usize,
) -> Result<Vec<KnowledgeEntry>, StorageError> {
    let op = "search knowledge";
    let client = pg.client(op).await?;
    let hits = PgIndex::KNOWLEDGE
        .search_rows(
            &client,
            query,
            limit,
            "SELECT seq, name, content FROM knowledge WHERE seq = ANY($1)",
        )
        .await
        .map_err(pg.error(op))?;
    Ok(hits
        .into_iter()
        .map(|(r, score)| KnowledgeEntry {
            name: r.get(1),
            content: r.get(2),
            score,
        })
        .collect())
}
