//! `ai.tool` cooldowns shared by the brokers of one database (`pipeline::policy`):
//! one row per (user, tool) whose cooldown runs, with the server's clock.

use super::PgDb;
use crate::storage::StorageError;

/// Starts `user`'s cooldown of `tool` for `seconds` unless one runs: `Ok(until)` (the
/// cooldown's end in Unix microseconds, which [`give_back`] needs) or `Err(left)`, the
/// seconds left of the running one.
///
/// # Errors
/// [`StorageError::Postgres`] when the database fails.
pub(crate) async fn take_cooldown(
    pg: &PgDb,
    user: &str,
    tool: &str,
    seconds: f64,
) -> Result<Result<i64, f64>, StorageError> {
    let op = format!("start the cooldown of tool {tool}");
    let client = pg.client(&op).await?;
    let taken = client
        .query_opt(
            "INSERT INTO tool_cooldowns AS c (user_id, tool, until)
             VALUES ($1, $2, now() + make_interval(secs => $3))
             ON CONFLICT (user_id, tool) DO UPDATE SET until = excluded.until
             WHERE c.until <= now()
             RETURNING (extract(epoch FROM until) * 1000000)::bigint",
            &[&user, &tool, &seconds],
        )
        .await
        .map_err(pg.error(op.clone()))?;
    if let Some(row) = taken {
        return Ok(Ok(row.get(0)));
    }
    let left: f64 = client
        .query_opt(
            "SELECT greatest(extract(epoch FROM until - now()), 0)::float8
             FROM tool_cooldowns WHERE user_id = $1 AND tool = $2",
            &[&user, &tool],
        )
        .await
        .map_err(pg.error(op))?
        .map_or(0.0, |row| row.get(0));
    Ok(Err(left))
}

/// Ends the cooldown started with `until` at once (the call did not run), unless
/// another has replaced it since.
pub(crate) async fn give_back(
    pg: &PgDb,
    user: &str,
    tool: &str,
    until: i64,
) -> Result<(), StorageError> {
    let op = format!("take back the cooldown of tool {tool}");
    let client = pg.client(&op).await?;
    client
        .execute(
            "UPDATE tool_cooldowns SET until = now()
             WHERE user_id = $1 AND tool = $2
               AND (extract(epoch FROM until) * 1000000)::bigint = $3",
            &[&user, &tool, &until],
        )
        .await
        .map_err(pg.error(op))?;
    Ok(())
}
