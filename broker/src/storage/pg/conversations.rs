//! Conversation history on PostgreSQL: the same rows and trimming rule as
//! `storage::conversations` on SQLite (whose module docs describe them).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;

use super::leases::{check_fence, TurnLease};
use super::PgDb;
use crate::storage::conversations::{units, units_to_drop, Row};
use crate::storage::{ConversationKey, HistoryBudget, StorageError};

pub(in crate::storage) async fn history<M: DeserializeOwned>(
    pg: &PgDb,
    key: &ConversationKey,
    scope: &str,
    channel: &str,
    subject: &str,
) -> Result<Vec<(M, Option<String>)>, StorageError> {
    let op = format!("read conversation {key}");
    let client = pg.client(&op).await?;
    let stmt = client
        .prepare_cached(
            "SELECT m.message, m.injected_by FROM conversation_messages m
             JOIN conversations c ON c.id = m.conversation
             WHERE c.scope = $1 AND c.channel = $2 AND c.subject = $3
             ORDER BY m.id",
        )
        .await
        .map_err(pg.error(op.clone()))?;
    let rows = client
        .query(&stmt, &[&scope, &channel, &subject])
        .await
        .map_err(pg.error(op.clone()))?;
    rows.iter()
        .map(|row| {
            let text: &str = row.get(0);
            let message = serde_json::from_str(text).map_err(|e| StorageError::Postgres {
                target: pg.target().to_string(),
                op: op.clone(),
                detail: format!("a stored message is not the expected JSON: {e}"),
            })?;
            Ok((message, row.get(1)))
        })
        .collect()
}

/// Appends `rows` and trims to `budget` in one transaction; returns how many messages
/// the trim deleted.
pub(in crate::storage) async fn append(
    pg: &PgDb,
    key: &ConversationKey,
    (scope, channel, subject): (&str, &str, &str),
    rows: &[Row],
    budget: HistoryBudget,
) -> Result<usize, StorageError> {
    let op = format!("append to conversation {key}");
    let err = || pg.error(op.clone());
    let mut client = pg.client(&op).await?;
    let tx = client.transaction().await.map_err(err())?;
    let found = tx
        .query_opt(
            &tx.prepare_cached(
                "SELECT id FROM conversations WHERE scope = $1 AND channel = $2 AND subject = $3",
            )
            .await
            .map_err(err())?,
            &[&scope, &channel, &subject],
        )
        .await
        .map_err(err())?;
    let id: i64 = match found {
        Some(row) => row.get(0),
        None => {
            // Another broker may create it at the same moment: the unique key decides,
            // and both then use the one row.
            tx.execute(
                &tx.prepare_cached(
                    "INSERT INTO conversations (scope, channel, subject) VALUES ($1, $2, $3)
                 ON CONFLICT (scope, channel, subject) DO NOTHING",
                )
                .await
                .map_err(err())?,
                &[&scope, &channel, &subject],
            )
            .await
            .map_err(err())?;
            tx.query_one(
                &tx.prepare_cached("SELECT id FROM conversations WHERE scope = $1 AND channel = $2 AND subject = $3").await.map_err(err())?,
                &[&scope, &channel, &subject],
            )
            .await
            .map_err(err())?
            .get(0)
        }
    };
    // A turn's writes are fenced by its lease: a broker that lost it (frozen past its
    // time to live, another broker took over) must not write into the conversation.
    if let Some(lease) = TurnLease::current().filter(|l| l.conversation == id) {
        if !check_fence(&tx, &lease).await.map_err(err())? {
            return Err(StorageError::LeaseLost {
                conversation: key.to_string(),
                holder: lease.holder,
            });
        }
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let roles: Vec<&str> = rows.iter().map(|r| r.role.as_str()).collect();
    let texts: Vec<&str> = rows.iter().map(|r| r.json.as_str()).collect();
    let chars: Vec<i64> = rows.iter().map(|r| r.chars as i64).collect();
    let injected: Vec<Option<&str>> = rows.iter().map(|r| r.injected_by.as_deref()).collect();
    // One round trip for the whole turn; ids in the slice's order.
    tx.execute(
        &tx.prepare_cached(
            "INSERT INTO conversation_messages
             (conversation, role, message, chars, created_at, injected_by)
         SELECT $1, role, message, chars, $2, injected_by
           FROM unnest($3::text[], $4::text[], $5::bigint[], $6::text[])
                WITH ORDINALITY AS m (role, message, chars, injected_by, n)
          ORDER BY n",
        )
        .await
        .map_err(err())?,
        &[&id, &now, &roles, &texts, &chars, &injected],
    )
    .await
    .map_err(err())?;
    let kept = tx
        .query(
            &tx.prepare_cached(
                "SELECT id, role = 'tool', chars FROM conversation_messages
             WHERE conversation = $1 ORDER BY id",
            )
            .await
            .map_err(err())?,
            &[&id],
        )
        .await
        .map_err(err())?;
    let units = units(kept.iter().map(|r| {
        (
            r.get::<_, i64>(0),
            r.get::<_, bool>(1),
            r.get::<_, i64>(2) as usize,
        )
    }));
    let drop = units_to_drop(&units, budget);
    let dropped = if drop > 0 {
        tx.execute(
            &tx.prepare_cached(
                "DELETE FROM conversation_messages WHERE conversation = $1 AND id <= $2",
            )
            .await
            .map_err(err())?,
            &[&id, &units[drop - 1].last_id],
        )
        .await
        .map_err(err())? as usize
    } else {
        0
    };
    tx.commit().await.map_err(err())?;
    Ok(dropped)
}
