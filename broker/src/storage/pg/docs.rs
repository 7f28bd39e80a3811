//! DocMemory on PostgreSQL: the same rows, results and scores as `storage::docs` on
//! SQLite (whose module docs describe the API); the index is `pg::search`'s.

use serde_json::{json, Value};

use super::search::{IndexRows, PgIndex};
use super::PgDb;
use crate::storage::docs::Doc;
use crate::storage::StorageError;

/// Stores the document (`id`, `title`, `content`) with its index rows in one
/// transaction, replacing a document with the same id (its creation time kept).
pub(in crate::storage) async fn insert(
    pg: &PgDb,
    id: &str,
    title: &str,
    content: &str,
    rows: &IndexRows,
    now: i64,
) -> Result<(), StorageError> {
    let op = format!("insert doc {id}");
    let err = || pg.error(op.clone());
    let mut client = pg.client(&op).await?;
    let tx = client.transaction().await.map_err(err())?;
    let seq: i64 = tx
        .query_one(
            "INSERT INTO doc_memory (id, title, content, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $4)
             ON CONFLICT (id) DO UPDATE SET title = excluded.title,
                 content = excluded.content, updated_at = excluded.updated_at
             RETURNING seq",
            &[&id, &title, &content, &now],
        )
        .await
        .map_err(err())?
        .get(0);
    PgIndex::DOCS.put(&tx, seq, rows).await.map_err(err())?;
    tx.commit().await.map_err(err())
}

/// Deletes the document `id` and (by cascade) its index rows; false if there was none.
pub(in crate::storage) async fn remove(pg: &PgDb, id: &str) -> Result<bool, StorageError> {
    let op = format!("remove doc {id}");
    let client = pg.client(&op).await?;
    let deleted = client
        .execute("DELETE FROM doc_memory WHERE id = $1", &[&id])
        .await
        .map_err(pg.error(op))?;
    Ok(deleted > 0)
}

/// The best `limit` documents for `text`, best first, with their scores.
pub(in crate::storage) async fn query(
    pg: &PgDb,
    text: &str,
    limit: usize,
) -> Result<Vec<Doc>, StorageError> {
    let op = "query doc memory";
    let client = pg.client(op).await?;
    let hits = PgIndex::DOCS
        .search_rows(
            &client,
            text,
            limit,
            "SELECT seq, id, title, content FROM doc_memory WHERE seq = ANY($1)",
        )
        .await
        .map_err(pg.error(op))?;
    Ok(hits
        .into_iter()
        .map(|(r, score)| Doc {
            id: r.get(1),
            title: r.get(2),
            content: r.get(3),
            score,
        })
        .collect())
}

/// The stats object of `DocMemory::stats`; `index_bytes` is the stored size of the
/// index's tsvectors.
pub(in crate::storage) async fn stats(pg: &PgDb) -> Result<Value, StorageError> {
    let op = "doc memory stats";
    let client = pg.client(op).await?;
    let row = client
        .query_one(
            &format!(
                "SELECT count(*),
                        coalesce(sum(octet_length(title) + octet_length(content)), 0)::bigint,
                        min(updated_at), max(updated_at),
                        (SELECT coalesce(sum(pg_column_size(words) + pg_column_size(chars)), 0)::bigint
                           FROM {})
                   FROM doc_memory",
                PgIndex::DOCS.table()
            ),
            &[],
        )
        .await
        .map_err(pg.error(op))?;
    let (docs, text_bytes, oldest, newest, index_bytes): (i64, i64, Option<i64>, Option<i64>, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    Ok(json!({
        "docs": docs,
        "text_bytes": text_bytes,
        "index_bytes": index_bytes,
        "oldest": oldest,
        "newest": newest,
    }))
}

/// Copies one DocMemory document as it was (its `seq` and times kept) and indexes it,
/// in `tx` (`hearth storage migrate`; the caller sets the `seq` sequence afterwards).
///
/// # Errors
/// The database's.
pub(crate) async fn import(
    tx: &tokio_postgres::Transaction<'_>,
    doc: (i64, &str, &str, &str, i64, i64),
) -> Result<(), tokio_postgres::Error> {
    let (seq, id, title, content, created_at, updated_at) = doc;
    tx.execute(
        "INSERT INTO doc_memory (seq, id, title, content, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[&seq, &id, &title, &content, &created_at, &updated_at],
    )
    .await?;
    // Indexed as `DocMemory::insert` indexes it: title and content together.
    let rows = super::search::index_rows(&crate::storage::search::segment(&format!(
        "{title}\n{content}"
    )));
    PgIndex::DOCS.put(tx, seq, &rows).await
}
