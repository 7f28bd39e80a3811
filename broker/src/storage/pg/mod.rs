//! PostgreSQL: the database several brokers share (issue 18). Design, measurements and
//! the choices below: `docs/design/postgres-research.md`.
//!
//! - Client: tokio-postgres with a deadpool pool of [`POOL_SIZE`] connections, `Fast`
//!   recycling (a returned connection is reused as it is, so nothing may leave session
//!   state on it: no `SET`, no session advisory locks, no `LISTEN` on pooled
//!   connections).
//! - TLS: rustls on the ring provider, certificates checked against the system's CAs.
//!   `sslmode=disable|prefer|require` in the URL as libpq reads it (`prefer`, the
//!   default, uses TLS when the server offers it).
//! - Schema: [`super::migrations::MIGRATIONS_PG`], the same steps as SQLite's under
//!   the same names; the version is the one row of `hearth_schema`, and a migration runs
//!   under a transaction-scoped advisory lock, so brokers starting together migrate
//!   once.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

pub(super) mod conversations;
pub(crate) mod docs;
pub(super) mod knowledge;
pub mod leases;
pub mod listener;
pub(super) mod memory;
mod password;
pub(crate) mod policies;
pub(super) mod search;
pub(super) mod settings;
pub(super) mod text_memory;

use super::migrations::{Migration, MIGRATIONS_PG};
use super::StorageError;

/// Connections per broker in its pool.
pub const POOL_SIZE: usize = 16;

/// How long a storage operation waits for a free pooled connection.
const POOL_WAIT: Duration = Duration::from_secs(30);

/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The advisory lock key migrations run under (`hearth-migrate` as 8 bytes).
const MIGRATION_LOCK: i64 = 0x6865_6172_7468_6d67;

/// A PostgreSQL database: its pool and how errors name it. Cheap to clone.
#[derive(Clone)]
pub struct PgDb {
    pool: Pool,
    target: Arc<str>,
    /// How to open a connection outside the pool ([`PgDb::listen`]).
    config: Arc<tokio_postgres::Config>,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
}

impl fmt::Debug for PgDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgDb")
            .field("target", &self.target)
            .finish()
    }
}

impl PgDb {
    /// Connects to `url` (`postgres://user:password@host:port/dbname?sslmode=…`, or
    /// libpq's `key=value` form), checks the server answers, and migrates the schema.
    /// A URL without a password takes it from `PGPASSWORD` or `~/.pgpass` as libpq
    /// would (see `password.rs`).
    ///
    /// # Errors
    /// [`StorageError::Invalid`] for a URL that does not parse (naming the part);
    /// [`StorageError::Postgres`] naming the server for a refused connection, login or
    /// migration; [`StorageError::SchemaTooNew`] for a database migrated by a newer
    /// Hearth.
    pub async fn connect(url: &str) -> Result<PgDb, StorageError> {
        PgDb::connect_with(url, None).await
    }

    /// [`PgDb::connect`], also trusting the CA certificates of the PEM file `ca` for
    /// the server's TLS certificate.
    ///
    /// # Errors
    /// As [`PgDb::connect`]; [`StorageError::Invalid`] for a `ca` file that cannot be
    /// read or holds no certificate.
    pub async fn connect_with(
        url: &str,
        ca: Option<&std::path::Path>,
    ) -> Result<PgDb, StorageError> {
        let db = PgDb::open(url, ca)?;
        db.migrate().await?;
        Ok(db)
    }

    /// The database at `url` without connecting yet and without migrating it: for
    /// `hearth storage check`, which changes nothing. Errors as
    /// [`PgDb::connect_with`]'s for the URL and `ca`; connection errors come with the
    /// first use.
    pub fn open(url: &str, ca: Option<&std::path::Path>) -> Result<PgDb, StorageError> {
        let invalid = |reason: String| StorageError::Invalid {
            what: "storage url".into(),
            reason: format!("{reason} (expected postgres://user:password@host:port/database)"),
        };
        check_url(url).map_err(invalid)?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| invalid(db_error(&e)))?;
        password::fill(&mut config);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("hearth");
        }
        // A half-open connection (a machine gone) is noticed by TCP keepalives.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        let target: Arc<str> = describe(&config).into();
        let tls = tls(ca)?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StorageError::Postgres {
                target: target.to_string(),
                op: "create the connection pool".into(),
                detail: e.to_string(),
            })?;
        Ok(PgDb {
            pool,
            target,
            config: Arc::new(config),
            tls,
        })
    }

    /// Starts broker `id`'s listening connection ([`listener::Listener`]): its
    /// liveness lock and the other brokers' notifications.
    ///
    /// # Errors
    /// [`StorageError::Postgres`] when the first connection fails.
    pub async fn listen(&self, id: &str) -> Result<listener::Listener, StorageError> {
        listener::Listener::start((*self.config).clone(), self.tls.clone(), id, &self.target)
            .await
            .map_err(|detail| StorageError::Postgres {
                target: self.target.to_string(),
                op: "open the broker's listening connection".into(),
                detail,
            })
    }

    /// The server and database, as errors name them: `postgres://user@host:port/db`
    /// (never the password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// A pooled connection; `op` names the operation in the error.
    pub(crate) async fn client(&self, op: &str) -> Result<deadpool_postgres::Object, StorageError> {
        self.pool.get().await.map_err(|e| StorageError::Postgres {
            target: self.target.to_string(),
            op: op.to_string(),
            detail: pool_error(e),
        })
    }

    /// Sends `payload` on the NOTIFY channel `channel` (every listening broker gets it,
    /// this one too).
    ///
    /// # Errors
    /// [`StorageError::Postgres`].
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), StorageError> {
        let op = format!("notify {channel}");
        let client = self.client(&op).await?;
        client
            .execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
            .await
            .map_err(self.error(op))?;
        Ok(())
    }

    /// Maps a tokio-postgres error of `op` to [`StorageError::Postgres`].
    pub(crate) fn error(
        &self,
        op: impl Into<String>,
    ) -> impl FnOnce(tokio_postgres::Error) -> StorageError {
        let target = self.target.to_string();
        let op = op.into();
        move |e| StorageError::Postgres {
            target,
            op,
            detail: db_error(&e),
        }
    }

    /// Applies the missing [`MIGRATIONS_PG`] in one transaction under
    /// [`MIGRATION_LOCK`], creating `hearth_schema` on first use.
    async fn migrate(&self) -> Result<(), StorageError> {
        let known = MIGRATIONS_PG.len() as i32;
        let mut client = self.client("connect").await?;
        let tx = client
            .transaction()
            .await
            .map_err(self.error("migrate the schema: begin"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(self.error("migrate the schema: take the migration lock"))?;
        let fresh: bool = tx
            .query_one("SELECT to_regclass('hearth_schema') IS NULL", &[])
            .await
            .map_err(self.error("migrate the schema: look for hearth_schema"))?
            .get(0);
        if fresh {
            tx.batch_execute("CREATE TABLE hearth_schema (version INTEGER NOT NULL)")
                .await
                .map_err(self.error("migrate the schema: create hearth_schema"))?;
        }
        let found: Option<i32> = tx
            .query_opt("SELECT version FROM hearth_schema", &[])
            .await
            .map_err(self.error("migrate the schema: read the version"))?
            .map(|row| row.get(0));
        let found = match found {
            Some(v) => v,
            None => {
                tx.execute("INSERT INTO hearth_schema (version) VALUES (0)", &[])
                    .await
                    .map_err(self.error("migrate the schema: record version 0"))?;
                0
            }
        };
        if found > known {
            return Err(StorageError::SchemaTooNew {
                path: PathBuf::from(self.target.as_ref()),
                found: found as u32,
                known: known as u32,
            });
        }
        for (i, Migration { name, sql }) in MIGRATIONS_PG.iter().enumerate().skip(found as usize) {
            tx.batch_execute(sql)
                .await
                .map_err(self.error(format!("migration {} ({name})", i + 1)))?;
        }
        if found < known {
            tx.execute("UPDATE hearth_schema SET version = $1", &[&known])
                .await
                .map_err(self.error("migrate the schema: record the version"))?;
        }
        tx.commit()
            .await
            .map_err(self.error("migrate the schema: commit"))?;
        if found < known {
            tracing::info!(db = %self.target, from = found, to = known, "PostgreSQL schema migrated");
        }
        Ok(())
    }
}

/// `postgres://user@host:port/dbname` of `config` (no password).
fn describe(config: &tokio_postgres::Config) -> String {
    let user = config.get_user().unwrap_or("");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or(user);
    let at = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    format!("postgres://{at}{host}:{port}/{db}")
}

/// The TLS connector: rustls with the ring provider, trusting the system's CAs and
/// those of `ca`.
fn tls(
    ca: Option<&std::path::Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StorageError> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(file) = ca {
        let invalid = |reason: String| StorageError::Invalid {
            what: format!("[storage] ca {}", file.display()),
            reason,
        };
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(file)
            .map_err(|e| invalid(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        if certs.is_empty() {
            return Err(invalid(
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
            ));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| invalid(format!("not a CA certificate rustls takes: {e}")))?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| StorageError::Invalid {
        what: "storage TLS".into(),
        reason: e.to_string(),
    })?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// A tokio-postgres error with the server's message, detail and hint when it has them
/// (its `Display` alone says only "db error").
pub(crate) fn db_error(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            text.push_str(&format!(" ({detail})"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

fn pool_error(e: deadpool_postgres::PoolError) -> String {
    use deadpool_postgres::{PoolError, TimeoutType};
    match e {
        PoolError::Backend(e) => db_error(&e),
        PoolError::Timeout(TimeoutType::Wait) => format!(
            "all {POOL_SIZE} pooled connections stayed busy for {} s",
            POOL_WAIT.as_secs()
        ),
        PoolError::Timeout(TimeoutType::Create) => format!(
            "the server did not complete a connection within {} s (it accepted the TCP connection but never answered: is this a PostgreSQL port?)",
            CONNECT_TIMEOUT.as_secs()
        ),
        PoolError::Timeout(TimeoutType::Recycle) => format!(
            "a pooled connection did not answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        ),
        other => other.to_string(),
    }
}

/// Names what is wrong with a storage URL that tokio-postgres would reject with only
/// "invalid connection string": the scheme, a port that is not a number, an `sslmode`
/// it does not take. Other mistakes are left to its parser.
fn check_url(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        if url.contains('=') {
            return Ok(()); // libpq's key=value form
        }
        // Not echoed: a malformed URL may still hold a password.
        return Err("it is neither a postgres:// URL nor libpq key=value pairs".into());
    };
    if scheme != "postgres" && scheme != "postgresql" {
        return Err(format!(
            "the scheme `{scheme}://` is not PostgreSQL's (postgres:// or postgresql://)"
        ));
    }
    let (before_query, query) = match rest.split_once('?') {
        Some((a, q)) => (a, q),
        None => (rest, ""),
    };
    // After the last `@` (a password may hold `/`), up to the database's `/`.
    let hosts = before_query
        .rsplit_once('@')
        .map_or(before_query, |(_, h)| h);
    let hosts = hosts.split('/').next().unwrap_or("");
    for host in hosts.split(',') {
        let port = match host.strip_prefix('[') {
            Some(v6) => v6.split_once("]:").map(|(_, p)| p),
            None => host.split_once(':').map(|(_, p)| p),
        };
        if let Some(port) = port.filter(|p| p.parse::<u16>().is_err()) {
            return Err(format!("the port `{port}` is not a number from 0 to 65535"));
        }
    }
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        if let Some(mode) = pair.strip_prefix("sslmode=") {
            if !matches!(mode, "disable" | "prefer" | "require") {
                return Err(format!(
                    "sslmode `{mode}` is not one of disable, prefer, require (verify-full is what require does here: the certificate is always checked)"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn a_bad_storage_url_names_its_bad_part() {
        for ok in [
            "postgres://hearth:pw@127.0.0.1:5432/hearth?sslmode=require",
            "postgresql://h@[::1]:6543,db2:5433/x",
            "postgres://h:p/w@db:5432/x",
            "host=/run/postgresql user=hearth",
        ] {
            assert_eq!(check_url(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("postgres//h:se/cret@db/x", "neither a postgres:// URL"),
            ("/tmp/foo.db", "neither a postgres:// URL"),
            ("mysql://h@db/x", "scheme `mysql://`"),
            ("postgres://h@db:notaport/x", "port `notaport`"),
            ("postgres://h:se/cret@db:x1/x", "port `x1`"),
            ("postgres://h@db:5432/x?sslmode=bogus", "sslmode `bogus`"),
        ] {
            let err = check_url(bad).unwrap_err();
            assert!(err.contains(says) && !err.contains("cret"), "{bad}: {err}");
        }
    }
}
