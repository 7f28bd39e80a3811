//! The broker's own connection to PostgreSQL, outside the pool: it holds the broker's
//! liveness lock and listens for the other brokers' notifications.
//!
//! - **Liveness lock**: a session advisory lock keyed by the broker's id
//!   ([`liveness_key`]), held for as long as this connection lives. Another broker
//!   that finds a conversation lease of this broker and can take that lock knows this
//!   broker's session is gone (killed, crashed, cut off and noticed by the server) and
//!   takes the lease without waiting for it to expire (`storage::pg::leases`).
//! - **Notifications**: `LISTEN` on [`super::settings::SETTINGS_CHANNEL`],
//!   [`LEASES_CHANNEL`] and [`CONFIRMS_CHANNEL`]; each one is broadcast to the
//!   broker's subscribers ([`Listener::subscribe`]).
//! - **Reconnects**: a lost connection is opened again with backoff (0.2 s doubling to
//!   5 s); after each reconnect subscribers get [`Notice::Resync`], because
//!   notifications sent meanwhile are lost (PostgreSQL keeps none for an absent
//!   listener).
//!
//! Notifications are read with `Connection::poll_message`: a pooled connection's task
//! drops them (docs/design/postgres-research.md §5).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::sync::broadcast;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::settings::SETTINGS_CHANNEL;

/// The NOTIFY channel of conversation leases; the payload is the conversation's id,
/// sent when its lease is released.
pub(crate) const LEASES_CHANNEL: &str = "hearth_leases";

/// The NOTIFY channel of `ai.tool` confirmations answered at another broker than the
/// one whose turn asked: `answer <id> <0|1>`, and `done <id>` from the broker that had
/// it (see `Agent::confirm`).
pub(crate) const CONFIRMS_CHANNEL: &str = "hearth_confirms";

/// What the listener tells subscribers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Another broker (or this one) changed settings of this table (`config` or a
    /// plugin's `config_<name>`).
    Settings(String),
    /// The lease of this conversation id was released.
    LeaseReleased(i64),
    /// A client answered confirmation `id` at another broker.
    ConfirmAnswer {
        /// The confirmation's id.
        id: String,
        /// Whether the user approved.
        approved: bool,
    },
    /// The broker whose turn waited for confirmation `id` got its answer.
    ConfirmDone(String),
    /// The connection was lost and is back: notifications may have been missed; re-read
    /// what you cache.
    Resync,
}

/// The advisory lock key of broker `id`'s liveness (FNV-1a of `hearth-broker:<id>`).
pub(crate) fn liveness_key(id: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "hearth-broker:".bytes().chain(id.bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

/// Handle to the listener task; it stops when the last handle is dropped.
#[derive(Clone)]
pub struct Listener {
    inner: Arc<Inner>,
}

struct Inner {
    notices: broadcast::Sender<Notice>,
    /// True while the connection is up and the liveness lock held.
    up: AtomicBool,
    stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("up", &self.is_up())
            .finish()
    }
}

impl Listener {
    /// Starts the listener of broker `id` on `config`'s database; returns once the first
    /// connection holds the liveness lock and listens, or with the first connection's
    /// error (later losses are retried in the background).
    pub(crate) async fn start(
        config: tokio_postgres::Config,
        tls: tokio_postgres_rustls::MakeRustlsConnect,
        id: &str,
        target: &str,
    ) -> Result<Listener, String> {
        let (notices, _) = broadcast::channel(1024);
        let inner = Arc::new(Inner {
            notices,
            up: AtomicBool::new(false),
            stop: CancellationToken::new(),
        });
        let first = connect(&config, &tls, id, &inner).await?;
        let task = Task {
            config,
            tls,
            id: id.to_string(),
            target: target.to_string(),
            inner: Arc::downgrade(&inner),
            notices: inner.notices.clone(),
            stop: inner.stop.clone(),
        };
        tokio::spawn(task.run(first));
        Ok(Listener { inner })
    }

    /// Notices from now on. A subscriber that falls 1024 behind gets `Lagged` and
    /// should resync.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.inner.notices.subscribe()
    }

    /// Whether the connection is up (liveness lock held, listening).
    pub fn is_up(&self) -> bool {
        self.inner.up.load(Ordering::Relaxed)
    }
}

/// An open listening connection: its client (kept so the session lives) and the task
/// reading its messages, which ends when the connection does.
struct Open {
    _client: tokio_postgres::Client,
    ended: tokio::task::JoinHandle<String>,
}

async fn connect(
    config: &tokio_postgres::Config,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
    id: &str,
    inner: &Inner,
) -> Result<Open, String> {
    let key = liveness_key(id);
    let (client, mut connection) = config
        .connect(tls.clone())
        .await
        .map_err(|e| super::db_error(&e))?;
    let notices = inner.notices.clone();
    let ended = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let notice = match n.channel() {
                        SETTINGS_CHANNEL => Notice::Settings(n.payload().to_string()),
                        LEASES_CHANNEL => match n.payload().parse() {
                            Ok(id) => Notice::LeaseReleased(id),
                            Err(_) => continue,
                        },
                        CONFIRMS_CHANNEL => {
                            let mut words = n.payload().split(' ');
                            match (words.next(), words.next(), words.next()) {
                                (Some("answer"), Some(id), Some(a)) => Notice::ConfirmAnswer {
                                    id: id.to_string(),
                                    approved: a == "1",
                                },
                                (Some("done"), Some(id), None) => {
                                    Notice::ConfirmDone(id.to_string())
                                }
                                _ => continue,
                            }
                        }
                        _ => continue,
                    };
                    let _ = notices.send(notice);
                }
                Ok(_) => {}
                Err(e) => return super::db_error(&e),
            }
        }
        "the server closed the connection".to_string()
    });
    let setup = async {
        let locked: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await?
            .get(0);
        client
            .batch_execute(&format!(
                "LISTEN {SETTINGS_CHANNEL}; LISTEN {LEASES_CHANNEL}; LISTEN {CONFIRMS_CHANNEL}"
            ))
            .await?;
        Ok::<_, tokio_postgres::Error>(locked)
    };
    match setup.await {
        Ok(true) => {}
        Ok(false) => {
            ended.abort();
            // Another session holds this id's lock: a broker with the same id, or this
            // broker's previous connection the server has not noticed is gone yet.
            return Err(format!(
                "another broker with the id {id:?} is connected to this database (or this broker's previous connection is not closed yet); give each broker its own [storage] broker_id"
            ));
        }
        Err(e) => {
            ended.abort();
            return Err(super::db_error(&e));
        }
    }
    inner.up.store(true, Ordering::Relaxed);
    Ok(Open {
        _client: client,
        ended,
    })
}

struct Task {
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    id: String,
    target: String,
    inner: std::sync::Weak<Inner>,
    notices: broadcast::Sender<Notice>,
    stop: CancellationToken,
}

impl Task {
    async fn run(self, mut open: Open) {
        loop {
            let why = tokio::select! {
                why = &mut open.ended => why.unwrap_or_else(|e| e.to_string()),
                () = self.stop.cancelled() => return,
            };
            let Some(inner) = self.inner.upgrade() else {
                return;
            };
            inner.up.store(false, Ordering::Relaxed);
            tracing::warn!(db = %self.target, "PostgreSQL: the broker's listening connection was lost ({why}); reconnecting");
            let mut delay = Duration::from_millis(200);
            open = loop {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = self.stop.cancelled() => return,
                }
                match connect(&self.config, &self.tls, &self.id, &inner).await {
                    Ok(open) => break open,
                    Err(e) => {
                        tracing::debug!(db = %self.target, "PostgreSQL: reconnecting the listener: {e}");
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            };
            drop(inner);
            tracing::info!(db = %self.target, "PostgreSQL: listening again; resyncing");
            let _ = self.notices.send(Notice::Resync);
        }
    }
}
