//! TextMemory on PostgreSQL: the log as rows of `text_events`, one per line, for
//! brokers that share no folder (`storage::text_memory`'s module docs give the rules
//! common to both modes).
//!
//! - `line` is exactly the JSON line the file log would write (without its newline),
//!   `day` the day in the log's time zone it was appended on (the file it would be in).
//!   The log's order within a day is `id`.
//! - An append is one INSERT of all its lines in one transaction, acknowledged after
//!   COMMIT: all of the lines or none, in order. Ids are handed out per row, so the
//!   lines of appends running at the same moment (on any broker) may interleave; each
//!   append's own lines keep their order.
//! - Expiry: rows of days more than `max_age_days` before today are deleted when the
//!   log is opened and then by an append, after its COMMIT, when `check_interval` has
//!   passed since the last deletion or the day has changed (zero interval: at new days
//!   only). No task runs in the background; a broker that appends nothing deletes
//!   nothing, but any broker appending on the database deletes for all. A failed
//!   deletion is logged and never fails the append.

use std::sync::Mutex;
use std::time::Instant;

use jiff::civil::Date;
use jiff::ToSpan;

use super::PgDb;
use crate::storage::{StorageError, TextMemoryOptions};

/// The log in `text_events`. Shared by every clone of one `TextMemory`.
#[derive(Debug)]
pub(in crate::storage) struct PgLog {
    pg: PgDb,
    options: TextMemoryOptions,
    /// When expired rows were last deleted, and the day (in the log's zone) it was.
    last_expiry: Mutex<(Instant, Date)>,
}

/// `make_date` arguments of `day`.
fn ymd(day: Date) -> (i32, i32, i32) {
    (
        i32::from(day.year()),
        i32::from(day.month()),
        i32::from(day.day()),
    )
}

impl PgLog {
    /// The log of `pg`; deletes expired rows first (`today`: the day in the log's zone).
    pub(in crate::storage) async fn open(
        pg: PgDb,
        options: TextMemoryOptions,
        today: Date,
    ) -> PgLog {
        let log = PgLog {
            pg,
            options,
            last_expiry: Mutex::new((Instant::now(), today)),
        };
        log.expire(today).await;
        log
    }

    /// The database, as errors name it.
    pub(in crate::storage) fn target(&self) -> &str {
        self.pg.target()
    }

    /// Appends `lines` (JSON, no newline) as rows of `day` in one transaction, in order;
    /// returns after COMMIT. Then deletes expired rows if it is time to.
    pub(in crate::storage) async fn append(
        &self,
        lines: &[String],
        day: Date,
    ) -> Result<(), StorageError> {
        let op = format!("append {} lines to TextMemory", lines.len());
        let err = || self.pg.error(op.clone());
        let mut client = self.pg.client(&op).await?;
        let tx = client.transaction().await.map_err(err())?;
        let (y, m, d) = ymd(day);
        let insert = tx
            .prepare_cached(
                "INSERT INTO text_events (day, line)
                 SELECT make_date($1, $2, $3), line
                   FROM unnest($4::text[]) WITH ORDINALITY AS l (line, i)
                  ORDER BY i",
            )
            .await
            .map_err(err())?;
        tx.execute(&insert, &[&y, &m, &d, &lines])
            .await
            .map_err(err())?;
        tx.commit().await.map_err(err())?;
        drop(client);
        if self.expiry_due(day) {
            self.expire(day).await;
        }
        Ok(())
    }

    /// True (and the clock restarted) when expired rows should be looked for now: a new
    /// day, or `check_interval` (if not zero) passed since the last time.
    fn expiry_due(&self, today: Date) -> bool {
        let mut last = self.last_expiry.lock().unwrap_or_else(|e| e.into_inner());
        let interval = self.options.check_interval;
        let due = last.1 != today || (!interval.is_zero() && last.0.elapsed() >= interval);
        if due {
            *last = (Instant::now(), today);
        }
        due
    }

    /// Deletes the rows of days more than `max_age_days` before `today`; failures are
    /// logged.
    async fn expire(&self, today: Date) {
        let max_age = i64::from(self.options.max_age_days);
        if max_age == 0 {
            return;
        }
        let Ok(oldest_kept) = today.checked_sub(max_age.days()) else {
            return;
        };
        let op = "delete expired TextMemory rows";
        let result = async {
            let client = self.pg.client(op).await?;
            let (y, m, d) = ymd(oldest_kept);
            client
                .execute(
                    "DELETE FROM text_events WHERE day < make_date($1, $2, $3)",
                    &[&y, &m, &d],
                )
                .await
                .map_err(self.pg.error(op))
        }
        .await;
        match result {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(
                db = %self.pg.target(),
                deleted,
                max_age_days = max_age,
                "TextMemory: deleted expired rows"
            ),
            Err(e) => tracing::warn!("TextMemory: {e}"),
        }
    }

    /// The lines of `day`, in log order.
    pub(in crate::storage) async fn lines_of_day(
        &self,
        day: Date,
    ) -> Result<Vec<(i64, String)>, StorageError> {
        let op = format!("read TextMemory of {day}");
        let client = self.pg.client(&op).await?;
        let (y, m, d) = ymd(day);
        let rows = client
            .query(
                "SELECT id, line FROM text_events WHERE day = make_date($1, $2, $3) ORDER BY id",
                &[&y, &m, &d],
            )
            .await
            .map_err(self.pg.error(op))?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    /// The database (for tests that plant rows).
    #[cfg(test)]
    pub(in crate::storage) fn pg(&self) -> &PgDb {
        &self.pg
    }
}
