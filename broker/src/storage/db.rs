//! `<data_dir>/hearth.db`: one SQLite connection, owned by one thread.
//!
//! # Why a thread, not `Mutex<Connection>` + `spawn_blocking`
//! Operations are small (a few rows) but blocking, and SQLite serializes writers
//! anyway. A dedicated thread that owns the connection and runs jobs sent over a
//! channel gives one owner for the state (no lock held across awaits, no lock-order
//! question), FIFO order of operations, no pile-up of blocking-pool threads waiting on
//! one mutex, and works the same on a current-thread runtime. A job is a closure run
//! against `&mut Connection`; its result comes back on a oneshot channel. The thread
//! ends, closing the connection, when the last [`Db`] clone is dropped.
//!
//! # Durability
//! WAL mode with `synchronous=FULL`: every commit fsyncs the WAL before the call
//! returns, so a write the broker acknowledged survives power loss, not only a crash
//! of the process. (`NORMAL` in WAL mode may lose the last commits on power loss.) The
//! price is one fsync per transaction; it matches TextMemory, which fsyncs every
//! append.
//!
//! # Group commit ([`Db::write`])
//! Writes that queue up while the thread is busy (many turns ending at once, each
//! appending its history) are run together in one transaction and one commit — one
//! fsync for all of them — each inside a savepoint of its own, so a write that fails
//! rolls back alone and the others still commit. Every caller is answered only after
//! the commit that made its write durable.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::migrations::{self, MIGRATIONS};
use super::StorageError;

/// How long a statement waits for another connection's lock (e.g. a CLI reading the
/// same file) before failing with `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most writes committed together.
const MAX_WRITE_BATCH: usize = 256;

/// Answers a write's caller once its batch committed (`None`) or failed to.
type Completion = Box<dyn FnOnce(Option<&rusqlite::Error>) + Send>;

/// A write: runs inside the batch's transaction; true = it succeeded (else its
/// savepoint is rolled back).
type WriteFn = Box<dyn FnOnce(&Connection) -> (bool, Completion) + Send>;

enum Job {
    /// Runs on its own (it may open its own transaction).
    Call(Box<dyn FnOnce(&mut Connection) + Send>),
    /// Runs inside the batch's transaction; true = it succeeded (else its savepoint is
    /// rolled back).
    Write(WriteFn),
}

/// File name of the database inside the data dir.
pub const DB_FILE: &str = "hearth.db";

/// The file in a data dir that names the PostgreSQL database its broker runs on
/// (`postgres://user@host:port/db`, no password), so that `hearth settings` on that data
/// dir does not quietly use a `hearth.db` instead. Written by `hearth run`, removed
/// when it runs on SQLite.
pub const STORAGE_MARK: &str = "storage-url";

/// Handle to the broker's database: `<data_dir>/hearth.db` (SQLite, the default), or a
/// PostgreSQL database shared by several brokers ([`Db::postgres`]). Cheap to clone;
/// every clone talks to the same connection thread or pool.
#[derive(Clone, Debug)]
pub struct Db {
    path: Arc<Path>,
    backend: Backend,
}

#[derive(Clone, Debug)]
enum Backend {
    Sqlite(mpsc::Sender<Job>),
    Postgres(super::pg::PgDb),
}

impl Db {
    /// Opens (creating if needed) `<data_dir>/hearth.db` and `data_dir` itself: WAL
    /// mode, `synchronous=FULL`, foreign keys on, a busy timeout, and the schema
    /// migrated to [`migrations::latest`].
    pub async fn open(data_dir: &Path) -> Result<Db, StorageError> {
        let path: Arc<Path> = data_dir.join(DB_FILE).into();
        let data_dir = data_dir.to_path_buf();
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, opened) = oneshot::channel();
        let thread_path = path.clone();
        std::thread::Builder::new()
            .name("hearth-db".into())
            .spawn(move || match open_connection(&data_dir, &thread_path) {
                Ok(conn) => {
                    let _ = ready.send(Ok(()));
                    serve(conn, queue, &thread_path);
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                }
            })
            .map_err(|source| StorageError::Io {
                path: path.to_path_buf(),
                op: "start the database thread",
                source,
            })?;
        opened.await.map_err(|_| StorageError::Closed {
            path: path.to_path_buf(),
        })??;
        Ok(Db {
            path,
            backend: Backend::Sqlite(jobs),
        })
    }

    /// The database of `data_dir`'s broker: PostgreSQL when `url` (a flag) is given, or
    /// `HEARTH_STORAGE_URL` is set, or `[storage] url` is in its `hearth.toml` (in that
    /// order; `[storage] password_file` applies); else `<data_dir>/hearth.db`.
    ///
    /// # Errors
    /// A `hearth.toml` that does not load, a password file that cannot be read, or the
    /// database's own errors.
    pub async fn open_configured(data_dir: &Path, url: Option<String>) -> anyhow::Result<Db> {
        let storage = Db::configured(data_dir, url)?;
        match storage.connection_url().map_err(|e| anyhow::anyhow!(e))? {
            Some(url) => Ok(Db::postgres_with(&url, storage.ca.as_deref()).await?),
            None => Ok(Db::open(data_dir).await?),
        }
    }

    /// The `[storage]` of `data_dir`'s `hearth.toml` with `url` (or
    /// `HEARTH_STORAGE_URL`) over its `url`.
    ///
    /// Client commands (`hearth settings`, `hearth storage`) use this. When it names no
    /// database but the data dir's broker last ran on PostgreSQL (its
    /// [`STORAGE_MARK`], e.g. from `hearth run --storage-url`), the error says so and
    /// names the database, instead of reading or creating a `hearth.db` nobody uses.
    ///
    /// # Errors
    /// A `hearth.toml` that does not load; the case above.
    pub fn configured(
        data_dir: &Path,
        url: Option<String>,
    ) -> anyhow::Result<super::StorageConfig> {
        let config = crate::llm::config::Config::load(data_dir, &Default::default())
            .map_err(|e| anyhow::anyhow!(e))?;
        let mut storage = config.storage;
        if let Some(url) = url.or_else(|| std::env::var("HEARTH_STORAGE_URL").ok()) {
            storage.url = Some(url).filter(|u| !u.is_empty());
        }
        if storage.url.is_none() {
            if let Ok(target) = std::fs::read_to_string(data_dir.join(STORAGE_MARK)) {
                anyhow::bail!(
                    "the broker of {} keeps its state in PostgreSQL ({}), not in {}/hearth.db: pass the same --storage-url here, or set HEARTH_STORAGE_URL or [storage] url in its hearth.toml",
                    data_dir.display(),
                    target.trim(),
                    data_dir.display()
                );
            }
        }
        Ok(storage)
    }

    /// Records in `data_dir` which database its broker runs on ([`STORAGE_MARK`]:
    /// PostgreSQL's target without password), or removes the mark for SQLite. A
    /// failure to write is logged, never fatal.
    pub fn mark_data_dir(&self, data_dir: &Path) {
        let mark = data_dir.join(STORAGE_MARK);
        let outcome = match self.pg() {
            Some(pg) => std::fs::write(&mark, format!("{}\n", pg.target())),
            None => match std::fs::remove_file(&mark) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
        };
        if let Err(e) = outcome {
            tracing::warn!(file = %mark.display(), "cannot record the broker's database for client commands: {e}");
        }
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://user:pass@host:port/db`
    /// or the key=value form) and migrates its schema ([`super::pg::PgDb::connect`]).
    pub async fn postgres(url: &str) -> Result<Db, StorageError> {
        Db::postgres_with(url, None).await
    }

    /// [`Db::postgres`], also trusting the CA certificates of the PEM file `ca`
    /// (`[storage] ca`).
    pub async fn postgres_with(url: &str, ca: Option<&Path>) -> Result<Db, StorageError> {
        let pg = super::pg::PgDb::connect_with(url, ca).await?;
        Ok(Db {
            path: Path::new(pg.target()).into(),
            backend: Backend::Postgres(pg),
        })
    }

    /// The database file; for PostgreSQL, the server and database as a URL without its
    /// password (what errors name).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The PostgreSQL database, when this is one.
    pub fn pg(&self) -> Option<&super::pg::PgDb> {
        match &self.backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Sqlite(_) => None,
        }
    }

    /// `postgresql` or `sqlite`.
    pub fn backend_name(&self) -> &'static str {
        match &self.backend {
            Backend::Postgres(_) => "postgresql",
            Backend::Sqlite(_) => "sqlite",
        }
    }

    /// Runs `f` on the connection thread and returns its result. `op` names the
    /// operation in a SQLite error, e.g. "append to conversation user:cli/alice".
    /// Keep `f` short: every other caller waits behind it.
    pub(crate) async fn call<T, F>(&self, op: impl Into<String>, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let job = Job::Call(Box::new(move |conn| {
            let _ = reply.send(f(conn));
        }));
        self.send(op, job, result).await
    }

    /// Runs `f` inside a transaction shared with the writes queued beside it (group
    /// commit, see the module docs) and returns its result once that transaction
    /// committed. `f` must not begin or end transactions itself. A failing `f` rolls
    /// back only its own changes.
    pub(crate) async fn write<T, F>(&self, op: impl Into<String>, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let job = Job::Write(Box::new(move |conn| {
            let outcome = f(conn);
            let ok = outcome.is_ok();
            let done: Completion = Box::new(move |commit: Option<&rusqlite::Error>| {
                let answer = match (outcome, commit) {
                    (Ok(t), None) => Ok(t),
                    (Err(e), _) => Err(e),
                    (Ok(_), Some(e)) => Err(copy_sqlite_error(e)),
                };
                let _ = reply.send(answer);
            });
            (ok, done)
        }));
        self.send(op, job, result).await
    }

    async fn send<T>(
        &self,
        op: impl Into<String>,
        job: Job,
        result: oneshot::Receiver<rusqlite::Result<T>>,
    ) -> Result<T, StorageError> {
        let closed = || StorageError::Closed {
            path: self.path.to_path_buf(),
        };
        let jobs = match &self.backend {
            Backend::Sqlite(jobs) => jobs,
            Backend::Postgres(_) => {
                return Err(StorageError::Invalid {
                    what: op.into(),
                    reason: "not available on PostgreSQL storage".into(),
                })
            }
        };
        jobs.send(job).map_err(|_| closed())?;
        result
            .await
            .map_err(|_| closed())?
            .map_err(|source| StorageError::Sqlite {
                path: self.path.to_path_buf(),
                op: op.into(),
                source,
            })
    }
}

/// A copy of `e` for each caller of a failed commit (rusqlite errors are not Clone).
fn copy_sqlite_error(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, msg) => {
            rusqlite::Error::SqliteFailure(*code, msg.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

/// Runs jobs until every [`Db`] is dropped. A job that panics is logged and its caller
/// gets [`StorageError::Closed`]; an open transaction rolls back as it unwinds, and the
/// thread goes on serving the others. Writes waiting together are committed together.
fn serve(mut conn: Connection, queue: mpsc::Receiver<Job>, path: &Path) {
    let mut next = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match queue.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        match job {
            Job::Call(f) => {
                if catch_unwind(AssertUnwindSafe(|| f(&mut conn))).is_err() {
                    tracing::error!(db = %path.display(), "storage operation panicked; rolled back");
                }
            }
            Job::Write(first) => {
                let mut batch = vec![first];
                while batch.len() < MAX_WRITE_BATCH {
                    match queue.try_recv() {
                        Ok(Job::Write(w)) => batch.push(w),
                        Ok(call) => {
                            next = Some(call);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                write_batch(&mut conn, batch, path);
            }
        }
    }
}

/// Runs `sql` (a transaction control statement) through the statement cache: these
/// run for every write, and parsing them each time was measured at ~6% of the
/// broker's CPU under load.
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Runs `batch` in one IMMEDIATE transaction, each write in a savepoint when there
/// are several, commits once and answers every caller.
fn write_batch(conn: &mut Connection, batch: Vec<WriteFn>, path: &Path) {
    if let Err(e) = control(conn, "BEGIN IMMEDIATE") {
        tracing::error!(db = %path.display(), "begin a write batch: {e}");
        // Each write runs and is undone at once; its caller gets the error.
        for w in batch {
            let _ = control(conn, "SAVEPOINT w");
            let (_, done) = w(conn);
            let _ = control(conn, "ROLLBACK TO w");
            let _ = control(conn, "RELEASE w");
            done(Some(&e));
        }
        return;
    }
    let alone = batch.len() == 1;
    let mut done = Vec::with_capacity(batch.len());
    let mut failed_alone = false;
    for w in batch {
        if !alone {
            if let Err(e) = control(conn, "SAVEPOINT w") {
                tracing::error!(db = %path.display(), "savepoint: {e}");
            }
        }
        match catch_unwind(AssertUnwindSafe(|| w(conn))) {
            Ok((ok, d)) => {
                if !alone {
                    if !ok {
                        let _ = control(conn, "ROLLBACK TO w");
                    }
                    let _ = control(conn, "RELEASE w");
                }
                failed_alone = alone && !ok;
                done.push(d);
            }
            Err(_) => {
                tracing::error!(db = %path.display(), "storage write panicked; its changes rolled back");
                if alone {
                    failed_alone = true;
                } else {
                    let _ = control(conn, "ROLLBACK TO w");
                    let _ = control(conn, "RELEASE w");
                }
            }
        }
    }
    if failed_alone {
        // The only write failed: nothing to keep (its caller has its own error).
        let _ = control(conn, "ROLLBACK");
        done.into_iter().for_each(|d| d(None));
        return;
    }
    match control(conn, "COMMIT") {
        Ok(()) => done.into_iter().for_each(|d| d(None)),
        Err(e) => {
            tracing::error!(db = %path.display(), "commit of {} failed: {e}", crate::term::count(done.len(), "write", "writes"));
            let _ = control(conn, "ROLLBACK");
            done.into_iter().for_each(|d| d(Some(&e)));
        }
    }
}

fn open_connection(data_dir: &Path, path: &Path) -> Result<Connection, StorageError> {
    std::fs::create_dir_all(data_dir).map_err(|source| StorageError::Io {
        path: data_dir.to_path_buf(),
        op: "create the data dir",
        source,
    })?;
    let sqlite = |op: &str| {
        let path = path.to_path_buf();
        let op = op.to_string();
        move |source| StorageError::Sqlite { path, op, source }
    };
    let mut conn = Connection::open(path).map_err(sqlite("open"))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite("set busy_timeout"))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(sqlite("set journal_mode=WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(sqlite("set journal_mode=WAL")(
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                Some(format!("SQLite kept journal_mode={mode}")),
            ),
        ));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sqlite("set synchronous=FULL"))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(sqlite("set foreign_keys=ON"))?;
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Applies the missing [`MIGRATIONS`] and sets `user_version`, all in one transaction:
/// a failed step leaves the file at its old version.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StorageError> {
    let known = migrations::latest();
    let sqlite = |op: String| {
        let path = path.to_path_buf();
        move |source| StorageError::Sqlite { path, op, source }
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite("begin migration".into()))?;
    let found: u32 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(sqlite("read user_version".into()))?;
    if found > known {
        return Err(StorageError::SchemaTooNew {
            path: path.to_path_buf(),
            found,
            known,
        });
    }
    if found == known {
        return Ok(());
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i + 1;
        tx.execute_batch(step.sql).map_err(sqlite(format!(
            "migrate to schema {version} ({})",
            step.name
        )))?;
    }
    tx.pragma_update(None, "user_version", known)
        .map_err(sqlite(format!("set user_version={known}")))?;
    tx.commit()
        .map_err(sqlite(format!("commit migration to schema {known}")))?;
    tracing::info!(db = %path.display(), from = found, to = known, "database schema migrated");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn opens_in_wal_mode_with_full_sync_and_latest_schema() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("nested/data");
        let db = Db::open(&data_dir).await.unwrap();
        assert_eq!(db.path(), data_dir.join("hearth.db"));
        let (mode, sync, version, fk) = db
            .call("read pragmas", |conn| {
                let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
                let sync: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0))?;
                let version: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
                let fk: i64 = conn.pragma_query_value(None, "foreign_keys", |r| r.get(0))?;
                Ok((mode, sync, version, fk))
            })
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(sync, 2, "synchronous=FULL");
        assert_eq!(version, migrations::latest());
        assert_eq!(fk, 1);
    }

    #[tokio::test]
    async fn reopening_keeps_the_schema_and_data() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).await.unwrap();
        db.call("insert", |conn| {
            conn.execute(
                "INSERT INTO conversations (scope, channel, subject) VALUES ('user', 'cli', 'a')",
                [],
            )
        })
        .await
        .unwrap();
        drop(db);
        let db = Db::open(dir.path()).await.unwrap();
        let n: i64 = db
            .call("count", |conn| {
                conn.query_row("SELECT count(*) FROM conversations", [], |r| r.get(0))
            })
            .await
            .unwrap();
        assert_eq!(n, 1);
    }

    #[tokio::test]
    async fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hearth.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", migrations::latest() + 1)
            .unwrap();
        drop(conn);
        let err = Db::open(dir.path()).await.unwrap_err();
        assert!(
            matches!(err, StorageError::SchemaTooNew { found, .. } if found == migrations::latest() + 1),
            "{err}"
        );
        assert!(err.to_string().contains("hearth.db"), "{err}");
    }

    #[tokio::test]
    async fn a_failed_statement_names_the_file_and_operation() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).await.unwrap();
        let err = db
            .call("read nothing", |conn| {
                conn.execute("SELECT * FROM missing", [])
            })
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("hearth.db: read nothing: "), "{text}");
    }

    #[tokio::test]
    async fn a_panicking_job_rolls_back_and_the_thread_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).await.unwrap();
        let err = db
            .call("panic", |conn| -> rusqlite::Result<()> {
                let tx = conn.transaction()?;
                tx.execute(
                    "INSERT INTO conversations (scope, channel, subject) VALUES ('user', 'c', 'x')",
                    [],
                )?;
                panic!("boom");
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::Closed { .. }), "{err}");
        let n: i64 = db
            .call("count", |conn| {
                conn.query_row("SELECT count(*) FROM conversations", [], |r| r.get(0))
            })
            .await
            .unwrap();
        assert_eq!(n, 0);
    }

    #[tokio::test]
    async fn concurrent_writes_commit_together_and_a_failing_one_alone_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).await.unwrap();
        // Hold the thread so the writes queue up and form one batch.
        let (gate, wait) = std::sync::mpsc::channel::<()>();
        let blocker = db.call("hold", move |_| {
            let _ = wait.recv();
            Ok(())
        });
        let insert = |subject: &'static str, fail: bool| {
            db.write(format!("insert {subject}"), move |conn| {
                conn.execute(
                    "INSERT INTO conversations (scope, channel, subject) VALUES ('user', 'c', ?1)",
                    [subject],
                )?;
                if fail {
                    conn.execute("INSERT INTO missing VALUES (1)", [])?;
                }
                Ok(subject)
            })
        };
        let writes = futures_util::future::join_all([
            insert("a", false),
            insert("b", true),
            insert("c", false),
        ]);
        let release = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            gate.send(()).unwrap();
        };
        let (held, results, ()) = tokio::join!(blocker, writes, release);
        held.unwrap();
        assert_eq!(results[0].as_ref().unwrap(), &"a");
        assert!(results[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("insert b"));
        assert_eq!(results[2].as_ref().unwrap(), &"c");
        let subjects: Vec<String> = db
            .call("read", |conn| {
                let mut stmt =
                    conn.prepare("SELECT subject FROM conversations ORDER BY subject")?;
                let rows = stmt.query_map([], |r| r.get(0))?;
                rows.collect()
            })
            .await
            .unwrap();
        assert_eq!(subjects, ["a", "c"]);
    }

    /// Later issues index memory and knowledge with FTS5; the bundled SQLite has it.
    #[tokio::test]
    async fn bundled_sqlite_has_fts5() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).await.unwrap();
        let hits: i64 = db
            .call("fts5", |conn| {
                conn.execute_batch(
                    "CREATE VIRTUAL TABLE temp.t USING fts5(body);
                     INSERT INTO temp.t (body) VALUES ('hello world'), ('other');",
                )?;
                conn.query_row(
                    "SELECT count(*) FROM temp.t WHERE t MATCH 'hello' ORDER BY bm25(t)",
                    [],
                    |r| r.get(0),
                )
            })
            .await
            .unwrap();
        assert_eq!(hits, 1);
    }
}
