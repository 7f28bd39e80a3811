//! Chaos benchmark: a real `hearth run` (the integration-test harness) with stress
//! plugins in Python, Node and Rust (`tests/plugins/STRESS.md`) under a steady,
//! open-loop stream of tool calls while a killer SIGKILLs a random plugin process
//! every few hundred milliseconds and now and then SIGSTOPs one (hung detection).
//! Prints Markdown tables (not a timed test); see RELIABILITY.md.
//!
//! Run (release; the Rust stress plugin must be built first, next to the bench's
//! `hearth`):
//!
//! ```text
//! cargo build --release -p hearth-plugin --example stress
//! cargo bench -p hearth-broker --bench chaos
//! ```
//!
//! Exit status: 0 if no call hung, the broker never died and no process was left
//! behind; 1 otherwise; 2 if the Rust stress plugin is missing.
//!
//! Knobs (environment):
//! - `HEARTH_CHAOS_SECS` seconds of calls and kills (default 60)
//! - `HEARTH_CHAOS_RATE` calls per second per plugin, open loop (default 50)
//! - `HEARTH_CHAOS_PER_LANG` stress plugins per language (default 2)
//! - `HEARTH_CHAOS_ONLY` comma-separated subset of `py,nd,rs` (default all)
//! - `HEARTH_CHAOS_KILL_MS` milliseconds between kills (default 700)
//! - `HEARTH_CHAOS_STOP_EVERY` every Nth kill is a SIGSTOP instead; 0 = never (default 5)
//! - `HEARTH_CHAOS_SLEEP_MS` duration of the `P_sleep` calls (default 100)
//! - `HEARTH_CHAOS_CALL_TIMEOUT_MS` broker-side call timeout sent with each call (default 10000)
//! - `HEARTH_CHAOS_DEADLINE_S` client-side deadline; no answer by then = hung (default 30)
//! - `HEARTH_CHAOS_RESTART_WAIT_MS` the broker's `--restart-wait-ms` (default 5000)
//! - `HEARTH_CHAOS_BACKOFF_MAX_MS` the plugins' `restart.backoff_max_ms` (default 1000;
//!   `backoff_initial_ms` is 50 or this if smaller)
//! - `HEARTH_CHAOS_SEED` seed of the killer's choices (default: from the clock)
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/harness.rs"]
mod harness;

use common::{env_num, loadavg, machine};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::{alive, rss_kib, stress, Broker};
use hearth_broker::cli::AdminConn;
use hearth_proto::v1::{CallToolRequest, ListPluginsRequest, PluginState, PluginStatus};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;

fn lang_label(lang: &str) -> &'static str {
    match lang {
        "py" => "Python",
        "nd" => "Node",
        _ => "Rust",
    }
}

/// Configuration from the environment.
#[derive(Clone)]
struct Cfg {
    secs: u64,
    rate: u64,
    per_lang: u64,
    langs: Vec<&'static str>,
    kill_ms: u64,
    stop_every: u64,
    sleep_ms: u64,
    call_timeout_ms: u64,
    deadline: Duration,
    restart_wait_ms: u64,
    backoff_max_ms: u64,
    seed: u64,
}

impl Cfg {
    fn from_env() -> Cfg {
        let only = std::env::var("HEARTH_CHAOS_ONLY").unwrap_or_else(|_| "py,nd,rs".into());
        let langs: Vec<&'static str> = ["py", "nd", "rs"]
            .into_iter()
            .filter(|l| only.split(',').any(|o| o.trim() == *l))
            .collect();
        assert!(
            !langs.is_empty(),
            "HEARTH_CHAOS_ONLY={only:?} selects no language (use py,nd,rs)"
        );
        let clock_seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Cfg {
            secs: env_num("HEARTH_CHAOS_SECS", 60),
            rate: env_num("HEARTH_CHAOS_RATE", 50).max(1),
            per_lang: env_num("HEARTH_CHAOS_PER_LANG", 2).max(1),
            langs,
            kill_ms: env_num("HEARTH_CHAOS_KILL_MS", 700).max(1),
            stop_every: env_num("HEARTH_CHAOS_STOP_EVERY", 5),
            sleep_ms: env_num("HEARTH_CHAOS_SLEEP_MS", 100),
            call_timeout_ms: env_num("HEARTH_CHAOS_CALL_TIMEOUT_MS", 10_000),
            deadline: Duration::from_secs(env_num("HEARTH_CHAOS_DEADLINE_S", 30)),
            restart_wait_ms: env_num("HEARTH_CHAOS_RESTART_WAIT_MS", 5000),
            backoff_max_ms: env_num("HEARTH_CHAOS_BACKOFF_MAX_MS", 1000),
            seed: env_num("HEARTH_CHAOS_SEED", clock_seed).max(1),
        }
    }
}

/// One stress plugin under chaos.
#[derive(Clone)]
struct Target {
    lang: &'static str,
    name: String,
}

/// How a call ended.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
enum Class {
    Ok,
    /// Unavailable, "plugin P <reason> during T": the process died (or was killed as
    /// hung) with the call in flight.
    Gone,
    /// Unavailable, "plugin P is not ready for tool T: …": no process within restart_wait.
    NotReady,
    /// DeadlineExceeded from the broker: the call's timeout passed.
    Timeout,
    /// Anything else (another code, success = false, a wrong echo).
    Other,
    /// No answer by the client-side deadline.
    Hung,
}

const CLASSES: [Class; 6] = [
    Class::Ok,
    Class::Gone,
    Class::NotReady,
    Class::Timeout,
    Class::Other,
    Class::Hung,
];

impl Class {
    fn label(self) -> &'static str {
        match self {
            Class::Ok => "succeeded",
            Class::Gone => "plugin exited during the call",
            Class::NotReady => "not ready within restart wait",
            Class::Timeout => "timeout (broker)",
            Class::Other => "other",
            Class::Hung => "hung (no answer by the client deadline)",
        }
    }
}

/// The outcome of one call.
struct Outcome {
    lang: &'static str,
    plugin: String,
    class: Class,
    /// Error messages that do not name both the plugin and the tool.
    unclear: bool,
    wall: Duration,
    /// When the answer (or the client deadline) came.
    end: Instant,
    message: String,
}

/// Sends one call and classifies its outcome.
async fn one_call(mut admin: AdminConn, target: Target, seq: u64, cfg: Arc<Cfg>) -> Outcome {
    let echo = seq.is_multiple_of(2);
    let (tool, args) = if echo {
        (
            format!("{}_echo", target.name),
            json!({"plugin": target.name, "seq": seq}),
        )
    } else {
        (
            format!("{}_sleep", target.name),
            json!({"ms": cfg.sleep_ms}),
        )
    };
    let req = admin.with_token(CallToolRequest {
        name: tool.clone(),
        args_json: args.to_string(),
        timeout_ms: cfg.call_timeout_ms as u32,
        ..Default::default()
    });
    let started = Instant::now();
    let r = tokio::time::timeout(cfg.deadline, admin.client().call_tool(req)).await;
    let wall = started.elapsed();
    let (class, message) = match r {
        Err(_) => (
            Class::Hung,
            format!("{tool}: no answer within {:?}", cfg.deadline),
        ),
        Ok(Ok(resp)) => {
            let resp = resp.into_inner();
            if !resp.success {
                (Class::Other, format!("success=false: {}", resp.error))
            } else if echo
                && serde_json::from_str::<Value>(&resp.data_json).ok().as_ref() != Some(&args)
            {
                (
                    Class::Other,
                    format!(
                        "{tool}: wrong echo: data_json {:?} for args {args}",
                        resp.data_json
                    ),
                )
            } else {
                (Class::Ok, String::new())
            }
        }
        Ok(Err(status)) => {
            let msg = status.message().to_string();
            let class = match status.code() {
                tonic::Code::Unavailable if msg.contains("is not ready for tool") => {
                    Class::NotReady
                }
                tonic::Code::Unavailable if msg.contains(" during ") => Class::Gone,
                tonic::Code::DeadlineExceeded => Class::Timeout,
                _ => Class::Other,
            };
            (class, format!("{:?}: {msg}", status.code()))
        }
    };
    // A failure's message must name the plugin and the tool.
    let names_both =
        message.contains(&format!("plugin {}", target.name)) && message.contains(&tool);
    let unclear = !(matches!(class, Class::Ok | Class::Hung) || names_both);
    Outcome {
        lang: target.lang,
        plugin: target.name,
        class,
        unclear,
        wall,
        end: Instant::now(),
        message,
    }
}

/// Open-loop call generator for one plugin: one call task every 1/rate s for `secs`,
/// each with its own client deadline; returns every outcome once all have ended.
async fn generator(admin: AdminConn, target: Target, cfg: Arc<Cfg>) -> (u64, Vec<Outcome>) {
    let period = Duration::from_secs_f64(1.0 / cfg.rate as f64);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + Duration::from_secs(cfg.secs);
    let mut calls = JoinSet::new();
    let mut out = Vec::new();
    let mut seq = 0;
    loop {
        tick.tick().await;
        if Instant::now() >= end {
            break;
        }
        calls.spawn(one_call(admin.clone(), target.clone(), seq, cfg.clone()));
        seq += 1;
        while let Some(r) = calls.try_join_next() {
            out.push(r.expect("call task"));
        }
    }
    while let Some(r) = calls.join_next().await {
        out.push(r.expect("call task"));
    }
    (seq, out)
}

/// A ListPlugins poll: when it completed and what it said.
#[derive(Clone)]
struct Snapshot {
    at: Instant,
    plugins: Vec<PluginStatus>,
}

/// A process seen during the run: pid, start time (clock ticks since boot, to tell a
/// reused pid apart) and what it was.
#[derive(Clone, Debug)]
struct Seen {
    start: u64,
    what: String,
}

/// Fields of /proc/<pid>/stat: (ppid, pgrp, starttime).
fn proc_stat(pid: u32) -> Option<(u32, u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    // rest[0] is field 3 (state); ppid 4, pgrp 5, starttime 22.
    Some((
        rest.get(1)?.parse().ok()?,
        rest.get(2)?.parse().ok()?,
        rest.get(19)?.parse().ok()?,
    ))
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// Alive (not a zombie) and still the same process (same start time).
fn still_there(pid: u32, seen: &Seen) -> bool {
    alive(pid) && proc_stat(pid).is_some_and(|(_, _, start)| start == seen.start)
}

/// Every descendant of `root` and every member of the process groups `groups`.
fn scan_descendants(root: u32, groups: &HashSet<u32>) -> Vec<(u32, u64)> {
    let mut procs = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some((ppid, pgrp, start)) = proc_stat(pid) {
                    procs.push((pid, ppid, pgrp, start));
                }
            }
        }
    }
    let mut found: HashSet<u32> = HashSet::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid, _, _) in &procs {
            if ppid == p && found.insert(pid) {
                frontier.push(pid);
            }
        }
    }
    procs
        .iter()
        .filter(|(pid, _, pgrp, _)| *pid != root && (found.contains(pid) || groups.contains(pgrp)))
        .map(|&(pid, _, _, start)| (pid, start))
        .collect()
}

/// Polls ListPlugins every 10 ms (publishing each answer), records every plugin pid
/// it sees, and every 100 ms every other descendant of the broker (reaper,
/// interpreters' children, grandchildren). Returns the number of ListPlugins errors
/// and the first error message.
async fn monitor(
    mut admin: AdminConn,
    broker: u32,
    tx: watch::Sender<Snapshot>,
    seen: Arc<Mutex<HashMap<u32, Seen>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (u64, String) {
    let mut errors = 0;
    let mut first_error = String::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u64 = 0;
    let mut groups = HashSet::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        tick.tick().await;
        let req = admin.with_token(ListPluginsRequest {});
        match tokio::time::timeout(Duration::from_secs(5), admin.client().list_plugins(req)).await {
            Ok(Ok(r)) => {
                let plugins = r.into_inner().plugins;
                {
                    let mut seen = seen.lock().unwrap();
                    for p in &plugins {
                        let known = seen
                            .get(&p.pid)
                            .is_some_and(|s| s.what.starts_with("plugin "));
                        if p.pid != 0 && !known {
                            if let Some((_, _, start)) = proc_stat(p.pid) {
                                seen.insert(
                                    p.pid,
                                    Seen {
                                        start,
                                        what: format!("plugin {}", p.name),
                                    },
                                );
                            }
                        }
                    }
                }
                groups = plugins
                    .iter()
                    .filter(|p| p.pid != 0)
                    .map(|p| p.pid)
                    .collect();
                let _ = tx.send(Snapshot {
                    at: Instant::now(),
                    plugins,
                });
            }
            Ok(Err(e)) => {
                errors += 1;
                if first_error.is_empty() {
                    first_error = format!("{:?}: {}", e.code(), e.message());
                }
            }
            Err(_) => {
                errors += 1;
                if first_error.is_empty() {
                    first_error = "ListPlugins: no answer within 5 s".into();
                }
            }
        }
        if n.is_multiple_of(10) {
            record_descendants(broker, &groups, &seen);
        }
        n += 1;
    }
    record_descendants(broker, &groups, &seen);
    (errors, first_error)
}

fn record_descendants(broker: u32, groups: &HashSet<u32>, seen: &Mutex<HashMap<u32, Seen>>) {
    let found = scan_descendants(broker, groups);
    let mut seen = seen.lock().unwrap();
    for (pid, start) in found {
        seen.entry(pid).or_insert_with(|| Seen {
            start,
            what: format!("descendant `{}`", cmdline(pid)),
        });
    }
}

/// One kill by the killer and how long until the plugin was ready again.
struct Kill {
    lang: &'static str,
    plugin: String,
    signal: i32,
    /// When the signal was sent.
    at: Instant,
    /// Kill → a new pid in READY in ListPlugins; None if not within 60 s.
    to_ready: Option<Duration>,
}

/// Every `kill_ms`, SIGKILLs (every `stop_every`th time SIGSTOPs) a random plugin
/// that is READY and not already recovering from a kill, then watches ListPlugins for
/// its new process. Returns the kills and the ticks skipped (nothing READY).
async fn killer(
    targets: Vec<Target>,
    mut rx: watch::Receiver<Snapshot>,
    cfg: Arc<Cfg>,
) -> (Vec<Kill>, u64) {
    // The killer's choices, reproducible from the seed.
    let mut rng = hearth_broker::testing::Rng(cfg.seed);
    let recovering: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut watchers = JoinSet::new();
    let end = Instant::now() + Duration::from_secs(cfg.secs);
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.kill_ms));
    tick.tick().await; // the first tick is immediate
    let mut kills = Vec::new();
    let mut skipped = 0;
    let mut n: u64 = 0;
    loop {
        tick.tick().await;
        if Instant::now() >= end {
            break;
        }
        while let Some(r) = watchers.try_join_next() {
            kills.push(r.expect("watcher"));
        }
        let snap = rx.borrow_and_update().clone();
        let candidates: Vec<(Target, u32)> = {
            let busy = recovering.lock().unwrap();
            targets
                .iter()
                .filter(|t| !busy.contains(&t.name))
                .filter_map(|t| {
                    snap.plugins
                        .iter()
                        .find(|p| {
                            p.name == t.name && p.pid != 0 && p.state == PluginState::Ready as i32
                        })
                        .map(|p| (t.clone(), p.pid))
                })
                .collect()
        };
        if candidates.is_empty() {
            skipped += 1;
            continue;
        }
        let (t, pid) = candidates[rng.below(candidates.len())].clone();
        let signal = if cfg.stop_every > 0 && n % cfg.stop_every == cfg.stop_every - 1 {
            libc::SIGSTOP
        } else {
            libc::SIGKILL
        };
        n += 1;
        let at = Instant::now();
        unsafe {
            libc::kill(pid as i32, signal);
        }
        recovering.lock().unwrap().insert(t.name.clone());
        let mut rx = rx.clone();
        let recovering = recovering.clone();
        watchers.spawn(async move {
            let ready = tokio::time::timeout(
                Duration::from_secs(60),
                rx.wait_for(|s| {
                    s.plugins.iter().any(|p| {
                        p.name == t.name
                            && p.pid != 0
                            && p.pid != pid
                            && p.state == PluginState::Ready as i32
                    })
                }),
            )
            .await;
            let to_ready = match ready {
                Ok(Ok(s)) => Some(s.at.saturating_duration_since(at)),
                _ => None,
            };
            recovering.lock().unwrap().remove(&t.name);
            Kill {
                lang: t.lang,
                plugin: t.name,
                signal,
                at,
                to_ready,
            }
        });
    }
    while let Some(r) = watchers.join_next().await {
        kills.push(r.expect("watcher"));
    }
    (kills, skipped)
}

/// An error from the broker's hung detection (no Pong within `hung_timeout_ms`).
fn is_hung_msg(m: &str) -> bool {
    m.contains("(hung)") || m.contains("answered no ping")
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let n = sorted.len();
    sorted[((p * n as f64).ceil() as usize).clamp(1, n) - 1]
}

fn sorted_ms(v: impl Iterator<Item = Duration>) -> Vec<f64> {
    let mut v: Vec<f64> = v.map(|d| d.as_secs_f64() * 1e3).collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    harness::quiet_brokers();
    // `cargo bench` passes `--bench` (and maybe a filter); nothing to parse.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(run());
    // Do not wait for call tasks that are still stuck (hung calls).
    rt.shutdown_timeout(Duration::from_secs(1));
    std::process::exit(code);
}

async fn run() -> i32 {
    let cfg = Arc::new(Cfg::from_env());
    let hearth = env!("CARGO_BIN_EXE_hearth");
    let stress_bin = std::path::Path::new(hearth)
        .parent()
        .unwrap()
        .join("examples/stress");
    if cfg.langs.contains(&"rs") && !stress_bin.exists() {
        eprintln!(
            "error: {} is missing; build the Rust stress plugin with the same profile first:\n  \
             cargo build --release -p hearth-plugin --example stress",
            stress_bin.display()
        );
        return 2;
    }

    println!("# Hearth chaos benchmark\n");
    println!("{}", machine());
    println!("broker: {hearth}");
    println!(
        "secs={} rate={}/s per plugin (open loop; even calls P_echo, odd calls P_sleep {} ms) \
         plugins={} per language ({}) kill every {} ms (every {}th a SIGSTOP) \
         call timeout={} ms client deadline={} s restart_wait={} ms backoff 50..{} ms seed={}\n",
        cfg.secs,
        cfg.rate,
        cfg.sleep_ms,
        cfg.per_lang,
        cfg.langs.join(","),
        cfg.kill_ms,
        cfg.stop_every,
        cfg.call_timeout_ms,
        cfg.deadline.as_secs(),
        cfg.restart_wait_ms,
        cfg.backoff_max_ms,
        cfg.seed
    );

    // Plugins: <lang><i>, tools <lang><i>_echo and <lang><i>_sleep.
    let policy = json!({
        "ping_interval_ms": 200,
        "hung_timeout_ms": 1500,
        "restart": {"max_restarts": 1000, "window_s": 60,
            "backoff_initial_ms": cfg.backoff_max_ms.min(50), "backoff_max_ms": cfg.backoff_max_ms},
    });
    let mut targets = Vec::new();
    let mut dirs = Vec::new();
    for lang in &cfg.langs {
        for i in 1..=cfg.per_lang {
            let name = format!("{lang}{i}");
            dirs.push(stress(lang, &name, "", policy.clone()));
            targets.push(Target { lang, name });
        }
    }
    let restart_wait = format!("--restart-wait-ms={}", cfg.restart_wait_ms);
    let mut b = Broker::start_with(dirs, &[&restart_wait]).await;
    let bpid = b.pid();
    let bstart = proc_stat(bpid).map(|s| s.2).unwrap_or(0);
    let rss_before = rss_kib(bpid);
    let fds_before = fd_count(bpid);
    let threads_before = threads(bpid);

    // Monitor: ListPlugins every 10 ms on its own connection.
    let seen: Arc<Mutex<HashMap<u32, Seen>>> = Arc::default();
    let first = Snapshot {
        at: Instant::now(),
        plugins: b.plugins().await,
    };
    let (tx, rx) = watch::channel(first);
    let stop_monitor = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let monitor_task = tokio::spawn(monitor(
        AdminConn::connect(&b.data_dir()).await.expect("admin"),
        bpid,
        tx,
        seen.clone(),
        stop_monitor.clone(),
    ));

    // Calls: one admin connection (HTTP/2) per plugin, one generator each.
    let started = Instant::now();
    let mut gens = Vec::new();
    for t in &targets {
        let admin = AdminConn::connect(&b.data_dir()).await.expect("admin");
        gens.push(tokio::spawn(generator(admin, t.clone(), cfg.clone())));
    }
    let killer_task = tokio::spawn(killer(targets.clone(), rx.clone(), cfg.clone()));

    let mut sent = 0;
    let mut outcomes = Vec::new();
    for g in gens {
        let (n, out) = g.await.expect("generator");
        sent += n;
        outcomes.extend(out);
    }
    let calls_done = started.elapsed();
    let (kills, skipped) = killer_task.await.expect("killer");

    // After the chaos: every plugin ready again, and answering.
    let mut final_rows = Vec::new();
    let settle = Instant::now();
    for t in &targets {
        let s = loop {
            let s = b.plugin(&t.name).await;
            if s.state == PluginState::Ready as i32 || settle.elapsed() > Duration::from_secs(30) {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        let echo = b
            .call(&format!("{}_echo", t.name), json!({"after": "chaos"}))
            .await
            .map(|r| r.success)
            .unwrap_or(false);
        final_rows.push((t.clone(), s, echo));
    }

    // The broker: same process, alive, and its resources.
    let broker_exited = b
        .child
        .as_mut()
        .map(|c| c.try_wait().ok().flatten().is_some())
        .unwrap_or(true);
    let broker_same = !broker_exited && alive(bpid) && proc_stat(bpid).map(|s| s.2) == Some(bstart);
    let broker_restarts = u64::from(!broker_same);
    let rss_after = rss_kib(bpid);
    let fds_after = fd_count(bpid);
    let threads_after = threads(bpid);

    stop_monitor.store(true, std::sync::atomic::Ordering::Relaxed);
    let (admin_errors, admin_first_error) = monitor_task.await.expect("monitor");

    // Stop the broker (SIGTERM) and check that every process seen is gone.
    let log = b.log();
    let stop_started = Instant::now();
    let mut child = b.child.take().expect("broker child");
    unsafe {
        libc::kill(bpid as i32, libc::SIGTERM);
    }
    let exit = loop {
        if let Some(st) = child.try_wait().ok().flatten() {
            break Some(st);
        }
        if stop_started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let stop_ms = stop_started.elapsed().as_secs_f64() * 1e3;
    let seen = seen.lock().unwrap().clone();
    let gone_deadline = Instant::now() + Duration::from_secs(10);
    let leaked: Vec<(u32, Seen)> = loop {
        let left: Vec<(u32, Seen)> = seen
            .iter()
            .filter(|(pid, s)| still_there(**pid, s))
            .map(|(p, s)| (*p, s.clone()))
            .collect();
        if left.is_empty() || Instant::now() > gone_deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let plugin_pids = seen
        .values()
        .filter(|s| s.what.starts_with("plugin "))
        .count();
    let load_end = loadavg();
    drop(b);

    // Report.
    let hung = outcomes.iter().filter(|o| o.class == Class::Hung).count();
    let unclear = outcomes.iter().filter(|o| o.unclear).count();
    println!(
        "calls ran {:.1} s; kills {} (SIGKILL {}, SIGSTOP {}), killer ticks skipped (no plugin READY and idle) {}; loadavg at end: {load_end}\n",
        calls_done.as_secs_f64(),
        kills.len(),
        kills.iter().filter(|k| k.signal == libc::SIGKILL).count(),
        kills.iter().filter(|k| k.signal == libc::SIGSTOP).count(),
        skipped
    );

    println!("## Calls\n");
    print!("| runtime | sent |");
    for c in CLASSES {
        print!(" {} |", c.label());
    }
    println!(" unclear errors |");
    print!("|---|---:|");
    for _ in CLASSES {
        print!("---:|");
    }
    println!("---:|");
    let mut rows: Vec<&str> = cfg.langs.iter().map(|l| lang_label(l)).collect();
    rows.push("all");
    for row in &rows {
        let mine: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| *row == "all" || lang_label(o.lang) == *row)
            .collect();
        print!("| {row} | {} |", mine.len());
        for c in CLASSES {
            print!(" {} |", mine.iter().filter(|o| o.class == c).count());
        }
        println!(" {} |", mine.iter().filter(|o| o.unclear).count());
    }
    println!("\n(sent by the generators: {sent}; every sent call has an outcome above.)\n");

    println!("Client wall time per outcome (ms; a hung-detected death is a SIGSTOPped process the broker killed after `hung_timeout_ms`):\n");
    println!("| outcome | n | p50 | p99 | max |");
    println!("|---|---:|---:|---:|---:|");
    for c in CLASSES {
        let kinds: &[(&str, Option<bool>)] = if c == Class::Gone {
            &[
                (", process exited (SIGKILL)", Some(false)),
                (", killed as hung (SIGSTOP)", Some(true)),
            ]
        } else {
            &[("", None)]
        };
        for (suffix, hung_kind) in kinds {
            let v = sorted_ms(
                outcomes
                    .iter()
                    .filter(|o| o.class == c)
                    .filter(|o| hung_kind.is_none_or(|h| is_hung_msg(&o.message) == h))
                    .map(|o| o.wall),
            );
            if v.is_empty() {
                continue;
            }
            println!(
                "| {}{suffix} | {} | {:.1} | {:.1} | {:.1} |",
                c.label(),
                v.len(),
                pct(&v, 0.5),
                pct(&v, 0.99),
                v[v.len() - 1]
            );
        }
    }

    // Kill → error: for each call that failed because its process died, the time
    // from the latest signal sent to that plugin before the error to the error.
    println!("\nSignal → error of the calls that failed because their process died (ms; from the latest kill/stop of that plugin before the error; calls in flight at a SIGKILL should fail at once):\n");
    println!("| death | n | p50 | p99 | max |");
    println!("|---|---:|---:|---:|---:|");
    for (label, hung_kind) in [
        ("process exited (SIGKILL)", false),
        ("killed as hung (SIGSTOP)", true),
    ] {
        let v = sorted_ms(
            outcomes
                .iter()
                .filter(|o| o.class == Class::Gone && is_hung_msg(&o.message) == hung_kind)
                .filter_map(|o| {
                    kills
                        .iter()
                        .filter(|k| k.plugin == o.plugin && k.at <= o.end)
                        .map(|k| k.at)
                        .max()
                        .map(|at| o.end - at)
                }),
        );
        if v.is_empty() {
            continue;
        }
        println!(
            "| {label} | {} | {:.1} | {:.1} | {:.1} |",
            v.len(),
            pct(&v, 0.5),
            pct(&v, 0.99),
            v[v.len() - 1]
        );
    }

    println!("\nSample messages (first of each kind):\n");
    let mut samples: BTreeMap<(Class, &str), &Outcome> = BTreeMap::new();
    for o in &outcomes {
        if o.class == Class::Ok {
            continue;
        }
        let kind = if is_hung_msg(&o.message) {
            "hung"
        } else if o.unclear {
            "unclear"
        } else {
            ""
        };
        samples.entry((o.class, kind)).or_insert(o);
    }
    for ((c, kind), o) in &samples {
        let kind = if kind.is_empty() {
            String::new()
        } else {
            format!(", {kind}")
        };
        println!("- {}{kind} ({}): `{}`", c.label(), o.plugin, o.message);
    }

    println!("\n## Kill → ready again (new pid READY in ListPlugins, polled every 10 ms; ms)\n");
    println!("| runtime | signal | n | p50 | p99 | max | not ready within 60 s |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for lang in &cfg.langs {
        for (sig, label) in [(libc::SIGKILL, "SIGKILL"), (libc::SIGSTOP, "SIGSTOP")] {
            let mine: Vec<&Kill> = kills
                .iter()
                .filter(|k| k.lang == *lang && k.signal == sig)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let v = sorted_ms(mine.iter().filter_map(|k| k.to_ready));
            let never = mine.iter().filter(|k| k.to_ready.is_none()).count();
            let (p50, p99, max) = if v.is_empty() {
                ("–".into(), "–".into(), "–".into())
            } else {
                (
                    format!("{:.0}", pct(&v, 0.5)),
                    format!("{:.0}", pct(&v, 0.99)),
                    format!("{:.0}", v[v.len() - 1]),
                )
            };
            println!(
                "| {} | {label} | {} | {p50} | {p99} | {max} | {never} |",
                lang_label(lang),
                v.len()
            );
        }
    }

    println!("\n## Plugins after the run\n");
    println!("| plugin | kills | stops | restarts (broker) | state | echo after | last exit |");
    println!("|---|---:|---:|---:|---|---|---|");
    let mut not_ready_at_end = 0;
    for (t, s, echo) in &final_rows {
        let k = kills
            .iter()
            .filter(|k| k.plugin == t.name && k.signal == libc::SIGKILL)
            .count();
        let st = kills
            .iter()
            .filter(|k| k.plugin == t.name && k.signal == libc::SIGSTOP)
            .count();
        let state = PluginState::try_from(s.state)
            .map(|x| format!("{x:?}"))
            .unwrap_or_default();
        if s.state != PluginState::Ready as i32 || !echo {
            not_ready_at_end += 1;
        }
        println!(
            "| {} | {k} | {st} | {} | {state} | {} | {} |",
            t.name,
            s.restarts,
            if *echo { "ok" } else { "FAILED" },
            s.last_exit
        );
    }

    println!("\n## Broker and processes\n");
    let warn = log.lines().filter(|l| l.contains(" WARN ")).count();
    let error = log.lines().filter(|l| l.contains(" ERROR ")).count();
    let panics = log.lines().filter(|l| l.contains("panicked")).count();
    println!("| what | value |");
    println!("|---|---|");
    println!(
        "| broker restarts (pid {bpid} not the same process or not alive at the end) | {broker_restarts} |"
    );
    println!(
        "| ListPlugins errors during the run | {admin_errors}{} |",
        if admin_first_error.is_empty() {
            String::new()
        } else {
            format!(" (first: `{admin_first_error}`)")
        }
    );
    println!("| broker RSS before → after | {rss_before} KiB → {rss_after} KiB |");
    println!("| broker open fds before → after | {fds_before} → {fds_after} |");
    println!("| broker threads before → after | {threads_before} → {threads_after} |");
    println!("| broker log lines WARN / ERROR / panicked | {warn} / {error} / {panics} |");
    println!(
        "| broker stop (SIGTERM → exit) | {:.0} ms, {} |",
        stop_ms,
        exit.map(|e| e.to_string())
            .unwrap_or_else(|| "did not exit within 30 s (SIGKILLed)".into())
    );
    println!(
        "| processes seen | {} ({plugin_pids} plugin pids from ListPlugins, {} other descendants) |",
        seen.len(),
        seen.len() - plugin_pids
    );
    println!(
        "| processes leaked (alive 10 s after the broker exited) | {} |",
        leaked.len()
    );
    println!("| calls hung | {hung} |");
    println!("| errors not naming plugin and tool | {unclear} |");
    println!("| plugins not READY / not answering after the run | {not_ready_at_end} |");
    let others: Vec<String> = seen
        .iter()
        .filter(|(_, s)| !s.what.starts_with("plugin "))
        .map(|(pid, s)| format!("{pid} {}", s.what))
        .collect();
    if !others.is_empty() {
        println!("\nOther descendants seen: {}", others.join("; "));
    }
    let mut errs: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    errs.truncate(5);
    for l in errs {
        println!("\nbroker ERROR line: `{}`", l.trim());
    }
    for (pid, s) in &leaked {
        println!("\nLEAKED: pid {pid} ({}): `{}`", s.what, cmdline(*pid));
    }

    let bad = hung > 0 || broker_restarts > 0 || !leaked.is_empty();
    println!(
        "\nverdict: {} (hung {hung}, broker restarts {broker_restarts}, leaked {})",
        if bad { "FAIL" } else { "ok" },
        leaked.len()
    );
    if bad {
        1
    } else {
        0
    }
}
