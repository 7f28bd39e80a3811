//! Conversation leases: which broker runs a turn of a conversation, when several
//! brokers share one database (docs/design/postgres-research.md §4).
//!
//! A conversation's turns run one at a time and in order on one broker because its
//! scheduler marks the conversation running; across brokers that mark is a row of
//! `conversation_leases`: `holder` (the broker's id), `expires` (the server's clock)
//! and `epoch`, which grows at every change of holder.
//!
//! - **Taking** ([`Leases::acquire`]): a broker takes a free, expired or its own lease.
//!   A lease held by another broker is taken at once when that broker's liveness lock
//!   is free (its listening connection is gone: the process died or the server cut
//!   it off); otherwise the broker waits for the release notification
//!   ([`super::listener::LEASES_CHANNEL`]) or polls every [`POLL`].
//! - **Holding**: the lease is renewed every third of its time to live while the turn
//!   runs, so a turn may take minutes. A broker that stops renewing (frozen, cut off
//!   without the server noticing) loses it after the time to live (`[storage]
//!   lease_ttl_s`, 15 s by default).
//! - **Fencing**: every history write of a turn checks, in its transaction, that the
//!   lease is still this broker's with the same epoch ([`TurnLease`], read by
//!   `storage::pg::conversations`): a broker that lost its lease and wakes up cannot
//!   write into a conversation another broker now runs.
//! - **Releasing** ([`Lease::release`], or dropping the [`Lease`]): the lease expires
//!   now and the other brokers are notified.
//! - **Cost**: taking and releasing commit without waiting for the WAL flush
//!   (`synchronous_commit = off` for those transactions only): a lease change lost in
//!   a server crash is harmless, because the fencing check of each history write is
//!   durable. A turn pays their round trips, not two more fsyncs.
//!
//! Order across brokers: inputs that arrive at two brokers at once for one
//! conversation run one after the other, each seeing the other's history, but which
//! goes first is not the order they arrived in (within one broker it is).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::listener::{liveness_key, Listener, Notice, LEASES_CHANNEL};
use super::PgDb;
use crate::storage::{ConversationKey, StorageError};

/// How often a broker waiting for a lease looks again when no notification came.
pub const POLL: Duration = Duration::from_millis(250);

/// The default time to live of a lease (`[storage] lease_ttl_s`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// The lease a turn holds, as its history writes check it (task-local: the agent runs
/// each turn inside [`TurnLease::scope`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnLease {
    /// `conversations.id`.
    pub conversation: i64,
    /// The broker's id.
    pub holder: String,
    /// The epoch it was taken with.
    pub epoch: i64,
}

tokio::task_local! {
    static TURN_LEASE: TurnLease;
}

impl TurnLease {
    /// Runs `f` with this lease as the current turn's.
    pub async fn scope<F: std::future::Future>(self, f: F) -> F::Output {
        TURN_LEASE.scope(self, f).await
    }

    /// The current turn's lease, if the caller runs inside [`TurnLease::scope`].
    pub fn current() -> Option<TurnLease> {
        TURN_LEASE.try_with(Clone::clone).ok()
    }
}

/// One broker's leases. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leases {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pg: PgDb,
    holder: String,
    ttl: Duration,
    listener: Listener,
}

impl Leases {
    /// Leases of broker `holder` (its id: unique among the brokers of the database),
    /// each living `ttl` unless renewed. Opens the broker's listening connection (its
    /// liveness lock).
    ///
    /// # Errors
    /// [`StorageError::Postgres`] when the listening connection cannot be opened.
    pub async fn start(pg: PgDb, holder: String, ttl: Duration) -> Result<Leases, StorageError> {
        let listener = pg.listen(&holder).await?;
        Ok(Leases {
            inner: Arc::new(Inner {
                pg,
                holder,
                ttl,
                listener,
            }),
        })
    }

    /// This broker's id.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// The broker's listening connection (settings notifications, resyncs).
    pub fn listener(&self) -> &Listener {
        &self.inner.listener
    }

    /// The database.
    pub fn pg(&self) -> &PgDb {
        &self.inner.pg
    }

    /// Takes the lease of `key`'s conversation (creating the conversation's row),
    /// waiting while another live broker holds it. Cancel by dropping the future.
    ///
    /// # Errors
    /// [`StorageError::Postgres`] when the database fails.
    pub async fn acquire(&self, key: &ConversationKey) -> Result<Lease, StorageError> {
        self.acquire_noting(key, |_| {}).await
    }

    /// [`Leases::acquire`], calling `waiting(holder)` once, with the holding broker's
    /// id, when the lease is held by another broker and this call starts waiting.
    ///
    /// # Errors
    /// As [`Leases::acquire`].
    pub async fn acquire_noting(
        &self,
        key: &ConversationKey,
        waiting: impl FnOnce(&str),
    ) -> Result<Lease, StorageError> {
        let mut waiting = Some(waiting);
        let i = &self.inner;
        let conversation = conversation_id(&i.pg, key).await?;
        let mut notices = i.listener.subscribe();
        let mut waiting_since = None;
        loop {
            match self.try_take(key, conversation).await? {
                Taken::Yes(epoch) => {
                    if let Some(since) = waiting_since {
                        let since: tokio::time::Instant = since;
                        tracing::debug!(conversation = %key, "lease taken after waiting {} ms", since.elapsed().as_millis());
                    }
                    return Ok(Lease::new(self, conversation, epoch));
                }
                Taken::HeldBy(other) => {
                    if waiting_since.is_none() {
                        waiting_since = Some(tokio::time::Instant::now());
                        tracing::debug!(conversation = %key, holder = %other, "waiting for the conversation's lease");
                    }
                    if let Some(note) = waiting.take() {
                        note(&other);
                    }
                }
            }
            let released = async {
                loop {
                    match notices.recv().await {
                        Ok(Notice::LeaseReleased(id)) if id == conversation => return,
                        Ok(Notice::Resync) | Err(RecvError::Lagged(_)) => return,
                        Ok(_) => {}
                        Err(RecvError::Closed) => std::future::pending::<()>().await,
                    }
                }
            };
            tokio::select! {
                () = released => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    async fn try_take(
        &self,
        key: &ConversationKey,
        conversation: i64,
    ) -> Result<Taken, StorageError> {
        let i = &self.inner;
        let op = format!("take the lease of conversation {key}");
        let err = || i.pg.error(op.clone());
        let ttl = i.ttl.as_secs_f64();
        let mut client = i.pg.client(&op).await?;
        let tx = client.transaction().await.map_err(err())?;
        // A lease change need not wait for its WAL flush: a server crash that loses it
        // gives the lease back to its previous holder or epoch, and every history
        // write checks the epoch in its own (durable) transaction.
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .await
            .map_err(err())?;
        let current = tx
            .query_opt(
                &tx.prepare_cached(
                    "SELECT holder, expires > now() FROM conversation_leases
                 WHERE conversation = $1 FOR UPDATE",
                )
                .await
                .map_err(err())?,
                &[&conversation],
            )
            .await
            .map_err(err())?;
        let epoch: i64 = match current {
            None => {
                let inserted = tx
                    .query_opt(
                        &tx.prepare_cached(
                            "INSERT INTO conversation_leases (conversation, holder, expires)
                         VALUES ($1, $2, now() + make_interval(secs => $3))
                         ON CONFLICT (conversation) DO NOTHING RETURNING epoch",
                        )
                        .await
                        .map_err(err())?,
                        &[&conversation, &i.holder, &ttl],
                    )
                    .await
                    .map_err(err())?;
                match inserted {
                    Some(row) => row.get(0),
                    // Another broker inserted it at this moment: look again.
                    None => return Ok(Taken::HeldBy(String::new())),
                }
            }
            Some(row) => {
                let holder: String = row.get(0);
                let live: bool = row.get(1);
                if holder != i.holder && live {
                    // Held: unless the holder's session is gone (its liveness lock free).
                    let gone: bool = tx
                        .query_one(
                            &tx.prepare_cached("SELECT pg_try_advisory_xact_lock($1)")
                                .await
                                .map_err(err())?,
                            &[&liveness_key(&holder)],
                        )
                        .await
                        .map_err(err())?
                        .get(0);
                    if !gone {
                        return Ok(Taken::HeldBy(holder));
                    }
                    tracing::info!(conversation = %key, from = %holder, "taking over the conversation's lease: its broker is gone");
                }
                tx.query_one(
                    &tx.prepare_cached(
                        "UPDATE conversation_leases
                        SET expires = now() + make_interval(secs => $3),
                            epoch = CASE WHEN holder = $2 THEN epoch ELSE epoch + 1 END,
                            holder = $2
                      WHERE conversation = $1 RETURNING epoch",
                    )
                    .await
                    .map_err(err())?,
                    &[&conversation, &i.holder, &ttl],
                )
                .await
                .map_err(err())?
                .get(0)
            }
        };
        tx.commit().await.map_err(err())?;
        Ok(Taken::Yes(epoch))
    }
}

enum Taken {
    Yes(i64),
    HeldBy(String),
}

/// The id of `key`'s conversation, its row created if needed.
pub(super) async fn conversation_id(pg: &PgDb, key: &ConversationKey) -> Result<i64, StorageError> {
    let op = format!("find conversation {key}");
    let client = pg.client(&op).await?;
    let (scope, subject) = key.scope();
    let row = client
        .query_one(
            &client
                .prepare_cached(
                    "WITH made AS (
                 INSERT INTO conversations (scope, channel, subject) VALUES ($1, $2, $3)
                 ON CONFLICT (scope, channel, subject) DO NOTHING RETURNING id)
             SELECT id FROM made
             UNION ALL
             SELECT id FROM conversations WHERE scope = $1 AND channel = $2 AND subject = $3
             LIMIT 1",
                )
                .await
                .map_err(pg.error(op.clone()))?,
            &[&scope, &key.channel, &subject],
        )
        .await
        .map_err(pg.error(op))?;
    Ok(row.get(0))
}

/// A held lease, renewed in the background until [`Lease::release`] or drop (which
/// releases it in the background). It does not keep its broker's [`Leases`] alive:
/// once those are gone (the broker stops), renewing stops too.
#[derive(Debug)]
pub struct Lease {
    leases: std::sync::Weak<Inner>,
    turn: TurnLease,
    renewing: CancellationToken,
    released: bool,
}

impl Lease {
    fn new(leases: &Leases, conversation: i64, epoch: i64) -> Lease {
        let turn = TurnLease {
            conversation,
            holder: leases.inner.holder.clone(),
            epoch,
        };
        let renewing = CancellationToken::new();
        let weak = Arc::downgrade(&leases.inner);
        tokio::spawn(renew(weak.clone(), turn.clone(), renewing.clone()));
        Lease {
            leases: weak,
            turn,
            renewing,
            released: false,
        }
    }

    /// What history writes check ([`TurnLease::scope`]).
    pub fn turn_lease(&self) -> TurnLease {
        self.turn.clone()
    }

    /// Gives the lease back now and tells waiting brokers. Errors are logged (the
    /// lease then expires by itself).
    pub async fn release(mut self) {
        self.released = true;
        self.renewing.cancel();
        if let Some(inner) = self.leases.upgrade() {
            release(&inner, &self.turn).await;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewing.cancel();
        if !self.released {
            let (Some(inner), turn) = (self.leases.upgrade(), self.turn.clone()) else {
                return;
            };
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { release(&inner, &turn).await });
            }
        }
    }
}

async fn renew(leases: std::sync::Weak<Inner>, turn: TurnLease, stop: CancellationToken) {
    let Some(every) = leases.upgrade().map(|i| i.ttl / 3) else {
        return;
    };
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        let Some(i) = leases.upgrade() else {
            return; // the broker's leases are gone: so is its liveness lock
        };
        let i = &*i;
        let ttl = i.ttl.as_secs_f64();
        let op = "renew a conversation lease";
        let renewed = async {
            let client = i.pg.client(op).await?;
            client
                .execute(
                    &client.prepare_cached("UPDATE conversation_leases SET expires = now() + make_interval(secs => $4)
                     WHERE conversation = $1 AND holder = $2 AND epoch = $3").await.map_err(i.pg.error(op))?,
                    &[&turn.conversation, &turn.holder, &turn.epoch, &ttl],
                )
                .await
                .map_err(i.pg.error(op))
        };
        match renewed.await {
            Ok(1) => {}
            Ok(_) => {
                tracing::warn!(conversation = turn.conversation, "the conversation's lease was taken by another broker; this turn's history will not be stored");
                return;
            }
            Err(e) => tracing::warn!(conversation = turn.conversation, "{e}; trying again"),
        }
    }
}

async fn release(leases: &Inner, turn: &TurnLease) {
    let pg = &leases.pg;
    let op = "release a conversation lease";
    let done = async {
        let mut client = pg.client(op).await?;
        let tx = client.transaction().await.map_err(pg.error(op))?;
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .await
            .map_err(pg.error(op))?;
        let n = tx
            .execute(
                &tx.prepare_cached(
                    "UPDATE conversation_leases SET expires = now()
                 WHERE conversation = $1 AND holder = $2 AND epoch = $3",
                )
                .await
                .map_err(pg.error(op))?,
                &[&turn.conversation, &turn.holder, &turn.epoch],
            )
            .await
            .map_err(pg.error(op))?;
        if n > 0 {
            tx.execute(
                &tx.prepare_cached("SELECT pg_notify($1, $2)")
                    .await
                    .map_err(pg.error(op))?,
                &[&LEASES_CHANNEL, &turn.conversation.to_string()],
            )
            .await
            .map_err(pg.error(op))?;
        }
        tx.commit().await.map_err(pg.error(op))
    };
    if let Err(e) = done.await {
        tracing::warn!(
            conversation = turn.conversation,
            "{e}; the lease expires by itself"
        );
    }
}

/// Checks, inside a history write's transaction, that `lease` is still held as taken.
pub(super) async fn check_fence(
    tx: &deadpool_postgres::Transaction<'_>,
    lease: &TurnLease,
) -> Result<bool, tokio_postgres::Error> {
    Ok(tx
        .query_opt(
            &tx.prepare_cached(
                "SELECT 1 FROM conversation_leases
             WHERE conversation = $1 AND holder = $2 AND epoch = $3 FOR SHARE",
            )
            .await?,
            &[&lease.conversation, &lease.holder, &lease.epoch],
        )
        .await?
        .is_some())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::storage::{Conversations, Db, HistoryBudget};

    async fn db() -> Option<(String, Db)> {
        let cluster = crate::testing::postgres::PgCluster::shared()?;
        let url = cluster.database();
        let db = Db::postgres(&url).await.unwrap();
        Some((url, db))
    }

    fn key(user: &str) -> ConversationKey {
        ConversationKey {
            user_id: user.into(),
            group_id: None,
            channel: "test".into(),
        }
    }

    #[tokio::test]
    async fn one_broker_id_is_one_broker() {
        let Some((_, db)) = db().await else { return };
        let pg = db.pg().unwrap().clone();
        let _a = Leases::start(pg.clone(), "b1".into(), DEFAULT_TTL)
            .await
            .unwrap();
        let err = Leases::start(pg, "b1".into(), DEFAULT_TTL)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("another broker with the id \"b1\""),
            "{err}"
        );
    }

    /// A lease held by a live broker is waited for and handed over at its release (by
    /// notification, well before the poll), with a new epoch.
    #[tokio::test]
    async fn a_held_lease_is_waited_for_and_handed_over_at_release() {
        let Some((_, db)) = db().await else { return };
        let pg = db.pg().unwrap().clone();
        let a = Leases::start(pg.clone(), "a".into(), DEFAULT_TTL)
            .await
            .unwrap();
        let b = Leases::start(pg, "b".into(), DEFAULT_TTL).await.unwrap();
        let held = a.acquire(&key("ann")).await.unwrap();
        let first = held.turn_lease();
        let waiting = tokio::spawn(async move { b.acquire(&key("ann")).await.unwrap() });
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!waiting.is_finished(), "b took a lease a holds");
        let released = Instant::now();
        held.release().await;
        let taken = waiting.await.unwrap();
        assert!(released.elapsed() < Duration::from_secs(2));
        assert_eq!(taken.turn_lease().conversation, first.conversation);
        assert_eq!(taken.turn_lease().epoch, first.epoch + 1);
        // Other conversations are not held up.
        a.acquire(&key("bob")).await.unwrap();
    }

    /// A broker whose session is gone (its listening connection closed: a killed
    /// process) loses its leases at once, and its late writes are fenced.
    #[tokio::test]
    async fn a_gone_brokers_lease_is_taken_at_once_and_its_late_writes_are_refused() {
        let Some((url, db)) = db().await else { return };
        let a_db = Db::postgres(&url).await.unwrap();
        let a = Leases::start(a_db.pg().unwrap().clone(), "a".into(), DEFAULT_TTL)
            .await
            .unwrap();
        let b = Leases::start(db.pg().unwrap().clone(), "b".into(), DEFAULT_TTL)
            .await
            .unwrap();
        let held = a.acquire(&key("ann")).await.unwrap();
        let stale = held.turn_lease();
        // a's lease is not released (a "crash"), and its listening connection goes.
        std::mem::forget(held);
        drop(a);
        let t0 = Instant::now();
        let taken = b.acquire(&key("ann")).await.unwrap();
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert_eq!(taken.turn_lease().epoch, stale.epoch + 1);
        // a's turn, waking up, may not write into the conversation; b's may.
        let history = Conversations::new(a_db, HistoryBudget::default());
        let err = stale
            .clone()
            .scope(history.append(&key("ann"), &[json!({"role": "user", "content": "late"})]))
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::LeaseLost { .. }), "{err}");
        let history = Conversations::new(db, HistoryBudget::default());
        taken
            .turn_lease()
            .scope(history.append(&key("ann"), &[json!({"role": "user", "content": "ok"})]))
            .await
            .unwrap();
        let kept: Vec<serde_json::Value> = history.history(&key("ann")).await.unwrap();
        assert_eq!(kept, [json!({"role": "user", "content": "ok"})]);
    }
}
