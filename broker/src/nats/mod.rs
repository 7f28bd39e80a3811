//! NATS: the bus between brokers and plugin hosts on other machines (issue 17).
//!
//! [`NatsConfig`] (the `[nats]` table of `hearth.toml`) and [`connect`], which turns it
//! into an `async_nats::Client` or an error that says what failed. Brokers and plugin
//! hosts use it through [`crate::remote`]. Design and measurements:
//! `docs/design/nats-research.md`.
//!
//! The client is `async-nats` with rustls on the ring provider (no aws-lc, no OpenSSL),
//! core NATS only, and NKey / `.creds` support.

mod config;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use config::{AuthKind, NatsConfig, NodePolicy, DEFAULT_SUBJECT_PREFIX};

/// How often the client PINGs the server; after 2 unanswered PINGs (~3 intervals) it
/// drops the connection and reconnects. async-nats' default is 60 s; the research
/// (§1.2) recommends 1–2 s for brokers and nodes so a dead server is noticed quickly.
pub const CLIENT_PING_INTERVAL: Duration = Duration::from_secs(2);

/// How long one connection attempt (TCP, TLS, CONNECT) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What went wrong configuring or connecting to NATS. Every message names the field,
/// file, variable or server it is about.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// A `[nats]` field is missing, malformed or conflicts with another.
    #[error("[nats] {field}: {problem}")]
    Config {
        /// The field, as written in hearth.toml.
        field: &'static str,
        /// What is wrong, in a sentence.
        problem: String,
    },
    /// A file the config names could not be read, or does not hold what it should.
    #[error("[nats] {field}: cannot use {}: {problem}", path.display())]
    File {
        /// The field that names the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error or what the content lacks.
        problem: String,
    },
    /// An environment variable the config names is not set, is empty or not UTF-8.
    #[error("[nats] {field}: environment variable {var} is not set (or empty, or not UTF-8)")]
    Env {
        /// `password_env` or `token_env`.
        field: &'static str,
        /// The variable's name.
        var: String,
    },
    /// No server could be reached (refused, timed out, unknown host).
    #[error("NATS server unreachable at {url}: {detail}")]
    Unreachable {
        /// The configured server URL(s), comma-separated.
        url: String,
        /// The OS or DNS error.
        detail: String,
    },
    /// The server refused the credentials (or wanted some and got none).
    #[error("NATS server {url} refused the login ({auth}): {detail}")]
    AuthRefused {
        /// The configured server URL(s), comma-separated.
        url: String,
        /// The way we logged in, e.g. `token from token_file /etc/…`; never the secret.
        auth: String,
        /// The server's or client's words and a hint.
        detail: String,
    },
    /// The TLS handshake failed, e.g. the server's certificate is not signed by a CA we
    /// trust, or is for another host.
    #[error("TLS with NATS server {url} failed: {detail}")]
    Tls {
        /// The configured server URL(s), comma-separated.
        url: String,
        /// What rustls said, and a hint.
        detail: String,
    },
    /// The server refused a subscription or publish this process needs: its NATS
    /// user's permissions do not cover its name's subjects.
    #[error("NATS server {url} refused {refused}; {hint}")]
    Permission {
        /// The configured server URL(s), comma-separated.
        url: String,
        /// The server's words (`Permissions Violation for Publish to "hearth.reg.a"`),
        /// joined with "; ".
        refused: String,
        /// Which name must match the user's permissions.
        hint: String,
    },
    /// Any other connect failure.
    #[error("connecting to NATS server {url} failed: {detail}")]
    Connect {
        /// The configured server URL(s), comma-separated.
        url: String,
        /// async-nats' error.
        detail: String,
    },
}

impl NatsError {
    pub(crate) fn config(field: &'static str, problem: impl Into<String>) -> Self {
        NatsError::Config {
            field,
            problem: problem.into(),
        }
    }
}

/// Connects to the server(s) of `config` and returns the client.
///
/// Validates the config, reads the secrets it names (files, environment), binds to
/// `local_address` if set, and makes one connection attempt per server (5 s each). Once
/// connected, the client reconnects by itself forever (delays up to 4 s) and PINGs every
/// [`CLIENT_PING_INTERVAL`]. TLS is used when the URL says `tls://`, `ca` is set, or the
/// server requires it; the process's rustls provider is ring.
///
/// # Errors
/// [`NatsError::Config`] / [`NatsError::File`] / [`NatsError::Env`] before any network
/// traffic; then [`NatsError::Unreachable`], [`NatsError::AuthRefused`],
/// [`NatsError::Tls`] or [`NatsError::Connect`] naming the server URL.
pub async fn connect(config: &NatsConfig) -> Result<async_nats::Client, NatsError> {
    connect_with_inbox(config, None, &Violations::default()).await
}

/// Permission violations the server reported on one connection (its
/// `-ERR 'Permissions Violation for …'` lines), oldest first. They are also logged as
/// errors; a process checks them after its first subscriptions and publishes
/// ([`Violations::settle`]) to stop with a clear error instead of serving half-deaf.
#[derive(Clone, Debug, Default)]
pub struct Violations(Arc<Mutex<Vec<String>>>);

impl Violations {
    fn push(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }

    /// The violations reported so far, removed.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    /// Waits until the server has answered everything `client` sent so far (a flush is
    /// a PING round trip, and the server reports a refused publish or subscription
    /// before that PONG), lets the client's event task deliver the reports, and takes
    /// them. Bounded: 2 s with the server unreachable.
    pub async fn settle(&self, client: &async_nats::Client) -> Vec<String> {
        let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.take()
    }

    /// [`Violations::settle`] as an error naming the refused subjects and `hint`.
    pub async fn check(
        &self,
        client: &async_nats::Client,
        config: &NatsConfig,
        hint: impl FnOnce() -> String,
    ) -> Result<(), NatsError> {
        let refused = self.settle(client).await;
        if refused.is_empty() {
            return Ok(());
        }
        Err(NatsError::Permission {
            url: config.servers().join(", "),
            refused: refused.join("; "),
            hint: hint(),
        })
    }
}

/// [`connect`], with request inboxes under `inbox_prefix` instead of `_INBOX` (a node
/// uses `_INBOX_<node>`, so its NATS user needs subscribe permission on its own inboxes
/// only); `[nats] inbox_prefix` wins over it. Permission violations the server reports
/// on the connection are collected in `violations`.
pub async fn connect_with_inbox(
    config: &NatsConfig,
    inbox_prefix: Option<String>,
    violations: &Violations,
) -> Result<async_nats::Client, NatsError> {
    config.validate()?;
    let servers: Vec<async_nats::ServerAddr> = config
        .servers()
        .into_iter()
        .map(|u| u.parse().expect("validated"))
        .collect();
    let url = config.servers().join(", ");

    let (options, auth) = login_options(config).await?;
    let mut options = options
        .name(config.name.clone().unwrap_or_else(default_name))
        .ping_interval(CLIENT_PING_INTERVAL)
        .connection_timeout(CONNECT_TIMEOUT)
        .event_callback({
            let violations = violations.clone();
            move |event| {
                let violations = violations.clone();
                async move { log_event(event, &violations) }
            }
        });
    if let Some(ca) = &config.ca {
        check_pem(
            "ca",
            ca,
            "CERTIFICATE",
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        )?;
        options = options.require_tls(true).add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&config.client_cert, &config.client_key) {
        check_pem(
            "client_cert",
            cert,
            "CERTIFICATE",
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        )?;
        check_pem(
            "client_key",
            key,
            "PRIVATE KEY",
            "holds no PEM private key (-----BEGIN … PRIVATE KEY-----)",
        )?;
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    if let Some(prefix) = config.inbox_prefix.clone().or(inbox_prefix) {
        options = options.custom_inbox_prefix(prefix);
    }
    let local = config.local_socket_addr()?;
    if let Some(local) = local {
        options = options.local_address(local);
    }
    crate::mcp::install_crypto_provider();

    options
        .connect(servers)
        .await
        .map_err(|e| classify(e, &url, &auth, config, local))
}

/// How often [`connect_retrying`] tries again while the server is unreachable.
pub const RETRY_EVERY: Duration = Duration::from_secs(2);

/// [`connect_with_inbox`], trying again every [`RETRY_EVERY`] while the server is
/// unreachable (it may start after us, or be restarting): a warning is logged at the
/// first failure and every minute after. Other errors (config, login, TLS) are returned
/// at once: trying again would not help.
pub async fn connect_retrying(
    config: &NatsConfig,
    inbox_prefix: Option<String>,
    violations: &Violations,
) -> Result<async_nats::Client, NatsError> {
    let mut failures = 0u32;
    loop {
        match connect_with_inbox(config, inbox_prefix.clone(), violations).await {
            Err(e @ NatsError::Unreachable { .. }) => {
                if failures.is_multiple_of(30) {
                    tracing::warn!("{e}; trying again every {} s", RETRY_EVERY.as_secs());
                }
                failures += 1;
                tokio::time::sleep(RETRY_EVERY).await;
            }
            other => {
                if failures > 0 && other.is_ok() {
                    tracing::info!("NATS server reachable again after {failures} attempts");
                }
                return other;
            }
        }
    }
}

/// The connection name when `[nats] name` is unset: `<host>-<pid>` ([`host_name`]).
pub(crate) fn default_name() -> String {
    format!("{}-{}", host_name(), std::process::id())
}

/// This machine's host name cut to a valid `[nats] name`: ASCII letters, digits, `_`
/// and `-` (others become `-`), at most 48 characters; `hearth` when there is none.
pub(crate) fn host_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(48)
        .collect();
    if host.is_empty() {
        "hearth".into()
    } else {
        host
    }
}

/// The login part of the options, and how it is described in errors (never the secret).
async fn login_options(
    config: &NatsConfig,
) -> Result<(async_nats::ConnectOptions, String), NatsError> {
    Ok(match config.auth_kind() {
        AuthKind::None => (async_nats::ConnectOptions::new(), "no credentials".into()),
        AuthKind::Creds => {
            let path = config.creds.as_deref().expect("creds");
            let mut text = read_file("creds", path)?;
            // async-nats' parser wants a newline after the seed's closing line.
            if !text.ends_with('\n') {
                text.push('\n');
            }
            let options = async_nats::ConnectOptions::with_credentials(&text).map_err(|e| {
                NatsError::File {
                    field: "creds",
                    path: path.to_owned(),
                    problem: format!("not a NATS credentials file (user JWT + NKey seed): {e}"),
                }
            })?;
            (options, format!("credentials file {}", path.display()))
        }
        AuthKind::Nkey => {
            let path = config.nkey_seed_file.as_deref().expect("nkey");
            let seed = read_secret("nkey_seed_file", path)?;
            if !seed.starts_with("SU") {
                return Err(NatsError::File {
                    field: "nkey_seed_file",
                    path: path.to_owned(),
                    problem: "does not hold an NKey user seed (a line starting with SU)".into(),
                });
            }
            (
                async_nats::ConnectOptions::with_nkey(seed),
                format!("NKey seed from {}", path.display()),
            )
        }
        AuthKind::UserPassword => {
            let user = config.user.clone().expect("user");
            let (password, from) = secret(
                ("password", &config.password),
                ("password_file", &config.password_file),
                ("password_env", &config.password_env),
            )?;
            (
                async_nats::ConnectOptions::with_user_and_password(user.clone(), password),
                format!("user `{user}` with the password from {from}"),
            )
        }
        AuthKind::Token => {
            let (token, from) = secret(
                ("token", &config.token),
                ("token_file", &config.token_file),
                ("token_env", &config.token_env),
            )?;
            (
                async_nats::ConnectOptions::with_token(token),
                format!("token from {from}"),
            )
        }
    })
}

/// A password or token from its one configured source: (value, where it came from).
fn secret(
    inline: (&'static str, &Option<String>),
    file: (&'static str, &Option<PathBuf>),
    env: (&'static str, &Option<String>),
) -> Result<(String, String), NatsError> {
    if let Some(v) = inline.1 {
        return Ok((v.clone(), format!("`{}` in hearth.toml", inline.0)));
    }
    if let Some(path) = file.1 {
        let v = read_secret(file.0, path)?;
        return Ok((v, format!("{} {}", file.0, path.display())));
    }
    let var = env.1.as_deref().expect("validated: one source");
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok((v, format!("{} {var}", env.0))),
        _ => Err(NatsError::Env {
            field: env.0,
            var: var.to_owned(),
        }),
    }
}

/// A secret file's content without its trailing newline; empty = an error.
fn read_secret(field: &'static str, path: &Path) -> Result<String, NatsError> {
    let text = read_file(field, path)?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// A secret file's content as it is (a `.creds` file's parser wants the final newline);
/// empty or only whitespace = an error.
fn read_file(field: &'static str, path: &Path) -> Result<String, NatsError> {
    let text = std::fs::read_to_string(path).map_err(|e| NatsError::File {
        field,
        path: path.to_owned(),
        problem: e.to_string(),
    })?;
    if text.trim().is_empty() {
        return Err(NatsError::File {
            field,
            path: path.to_owned(),
            problem: "the file is empty".into(),
        });
    }
    Ok(text)
}

/// A PEM file exists, is readable and holds a `-----BEGIN … {label}-----` block.
fn check_pem(field: &'static str, path: &Path, label: &str, lacks: &str) -> Result<(), NatsError> {
    let text = std::fs::read_to_string(path).map_err(|e| NatsError::File {
        field,
        path: path.to_owned(),
        problem: e.to_string(),
    })?;
    let has = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.ends_with(&format!("{label}-----")));
    if has {
        Ok(())
    } else {
        Err(NatsError::File {
            field,
            path: path.to_owned(),
            problem: lacks.into(),
        })
    }
}

/// Turns async-nats' connect error into one that says what failed.
fn classify(
    err: async_nats::ConnectError,
    url: &str,
    auth: &str,
    config: &NatsConfig,
    local: Option<std::net::SocketAddr>,
) -> NatsError {
    use async_nats::ConnectErrorKind as K;
    let url = url.to_owned();
    let auth = auth.to_owned();
    if let Some(tls) = find_rustls_error(&err) {
        return NatsError::Tls {
            url,
            detail: tls_hint(tls, config),
        };
    }
    match err.kind() {
        K::AuthorizationViolation => {
            let hint = if config.auth_kind() == AuthKind::None {
                "the server wants credentials: set `creds`, `nkey_seed_file`, `user` + a password, or a token in [nats]"
            } else {
                "check the credentials and the server's authorization block"
            };
            NatsError::AuthRefused {
                url,
                auth,
                detail: format!("authorization violation; {hint}"),
            }
        }
        K::Authentication => NatsError::AuthRefused {
            url,
            auth,
            detail: format!("could not sign the server's nonce with the configured key: {err}"),
        },
        K::Tls => NatsError::Tls {
            url,
            detail: err.to_string(),
        },
        K::Dns | K::TimedOut => NatsError::Unreachable {
            url,
            detail: err.to_string(),
        },
        K::Io => {
            let io = find_io_error(&err);
            // The OS's words ("Connection refused (os error 111)") say it best.
            let detail = io.map_or_else(|| err.to_string(), |e| e.to_string());
            match (io.map(std::io::Error::kind), local) {
                (
                    Some(std::io::ErrorKind::AddrNotAvailable | std::io::ErrorKind::AddrInUse),
                    Some(local),
                ) => NatsError::Config {
                    field: "local_address",
                    problem: format!("cannot bind the client side to {local}: {detail}"),
                },
                (
                    Some(
                        std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::HostUnreachable
                        | std::io::ErrorKind::NetworkUnreachable
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::NotFound,
                    ),
                    _,
                ) => NatsError::Unreachable { url, detail },
                _ => NatsError::Connect { url, detail },
            }
        }
        _ => NatsError::Connect {
            url,
            detail: err.to_string(),
        },
    }
}

/// The first `rustls::Error` in the chain (tokio-rustls wraps it in an `io::Error`,
/// whose `source()` skips it, hence the `get_ref`).
fn find_rustls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if let Some(r) = find_rustls_error(inner) {
                    return Some(r);
                }
            }
        }
        cur = e.source();
    }
    None
}

/// The first `io::Error` in the chain.
fn find_io_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cur = e.source();
    }
    None
}

fn tls_hint(err: &rustls::Error, config: &NatsConfig) -> String {
    use rustls::CertificateError as C;
    let trusted = match &config.ca {
        Some(ca) => format!("the CA in [nats] ca = {}", ca.display()),
        None => "a CA of the system's store (set [nats] ca to the CA that signed it)".to_owned(),
    };
    match err {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => format!(
            "the server's certificate is not trusted: it is not signed by {trusted} ({err})"
        ),
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => format!("the server's certificate is not valid for the host in the URL ({err})"),
        rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            format!("the server's certificate has expired ({err})")
        }
        rustls::Error::AlertReceived(_) => format!(
            "the server refused the handshake (a client certificate it does not accept, or none when it requires one?): {err}"
        ),
        _ => err.to_string(),
    }
}

/// Logs the client's connection events (reconnects, server errors such as permission
/// violations, slow consumers); collects permission violations in `violations`.
fn log_event(event: async_nats::Event, violations: &Violations) {
    use async_nats::Event as E;
    match event {
        E::ServerError(async_nats::ServerError::Other(e))
            if e.to_ascii_lowercase().contains("permissions violation") =>
        {
            tracing::error!("nats: the server refused: {e}");
            violations.push(e);
        }
        E::Connected => tracing::info!("nats: connected"),
        E::Disconnected => tracing::warn!("nats: disconnected; reconnecting"),
        E::LameDuckMode => tracing::warn!("nats: the server is entering lame duck mode"),
        E::SlowConsumer(sid) => {
            tracing::warn!(sid, "nats: slow consumer, messages were dropped")
        }
        E::ServerError(e) => tracing::warn!("nats: server error: {e}"),
        E::ClientError(e) => tracing::warn!("nats: client error: {e}"),
        other => tracing::debug!("nats: {other}"),
    }
}
