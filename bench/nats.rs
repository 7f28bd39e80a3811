//! NATS benchmark (issue 17): plugins on plugin hosts (`hearth node`) against the same
//! plugin served by the broker itself, with real processes — a `nats-server` on
//! 127.0.0.1, brokers, nodes whose NATS connections come from 127.0.0.2–.4, and the
//! Rust stress plugin (`tests/plugins/STRESS.md`). Reuses the integration-test harness
//! (`tests/integration/harness.rs`, `nats.rs`, `remote.rs`). Prints Markdown tables (not a
//! timed test); see BENCHMARKS.md and RELIABILITY.md.
//!
//! Part A, latency and throughput, interleaved in rounds (docs/design/nats-research.md
//! §1.4: a single run on a 2-vCPU VM lands in one of two modes):
//! - the raw NATS floor: request/reply of 120 B between two async-nats clients on their
//!   own threads, on the same nats-server (responder current-thread; requester
//!   current-thread, and multi-thread like the broker's runtime);
//! - local: `hearth run` with the Rust stress plugin `lc` → `lc_echo {}`;
//! - remote: a broker with no plugins of its own, `--nats`, and the same plugin (`r1`)
//!   on one `hearth node` → `r1_echo {}`; and `r2`, served by two nodes, for throughput.
//!
//! Part B, chaos: one broker, three nodes each serving the stress plugin `ch`, an
//! open-loop stream of `ch_sleep {ms}` calls, and a killer that SIGKILLs a random node
//! (and starts it again, same name and data dir) or SIGSTOPs one for 2 s.
//!
//! Run (release; the Rust stress plugin must be built first, next to the bench's
//! `hearth`):
//!
//! ```text
//! cargo build --release -p hearth-plugin --example stress
//! cargo bench -p hearth-broker --bench nats
//! taskset -c 0 cargo bench -p hearth-broker --bench nats   # everything on one vCPU
//! ```
//!
//! Exit status: 0 unless the chaos part saw a hung call or a call that was ok on a node
//! but not at the client with no error, or a process was left behind (1); 2 if the Rust
//! stress plugin is missing.
//!
//! Knobs (environment):
//! - `HEARTH_NATS_BENCH_PARTS` `a`, `b` or `ab` (default `ab`)
//! - `HEARTH_NATS_BENCH_ROUNDS` latency rounds (default 5)
//! - `HEARTH_NATS_BENCH_CALLS` sequential calls per path per round (default 2000)
//! - `HEARTH_NATS_BENCH_WARMUP` warm-up calls per path per round (default 200)
//! - `HEARTH_NATS_BENCH_TPUT_ROUNDS` throughput rounds (default 2)
//! - `HEARTH_NATS_BENCH_SECS` seconds per throughput run (default 2)
//! - `HEARTH_NATS_BENCH_INFLIGHT` concurrency of the second throughput run (default 16)
//! - `HEARTH_NATS_CHAOS_SECS` seconds of chaos (default 30; 0 = no Part B)
//! - `HEARTH_NATS_CHAOS_LANG` stress plugin on the nodes, `rs` or `py` (default `rs`)
//! - `HEARTH_NATS_CHAOS_RATE` calls per second, open loop (default 100)
//! - `HEARTH_NATS_CHAOS_SLEEP_MS` duration of each `ch_sleep` call (default 100)
//! - `HEARTH_NATS_CHAOS_KILL_MS` milliseconds between killer actions (default 3000)
//! - `HEARTH_NATS_CHAOS_STOP_EVERY` every Nth action is a 2 s SIGSTOP; 0 = never (default 3)
//! - `HEARTH_NATS_CHAOS_RESTART_MS` delay before a killed node is started again (default 500)
//! - `HEARTH_NATS_CHAOS_CALL_TIMEOUT_MS` broker-side timeout of each call (default 10000)
//! - `HEARTH_NATS_CHAOS_DEADLINE_S` client deadline; no answer by then = hung (default 30)
//! - `HEARTH_NATS_CHAOS_SEED` seed of the killer (default: from the clock)
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;
#[allow(dead_code, unused_imports)]
#[path = "../tests/integration/harness.rs"]
mod harness;
#[allow(dead_code, unused_imports)]
#[path = "../tests/integration/nats.rs"]
mod nats;
#[allow(dead_code, unused_imports)]
#[path = "../tests/integration/remote.rs"]
mod remote;

use common::{cpu_us, env_num, loadavg, machine, summarize, utc_now, SplitMix, Summary};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness::{alive, stress, Broker};
use hearth_broker::cli::AdminConn;
use hearth_proto::v1::CallToolRequest;
use nats::NatsServer;
use remote::{wait_nodes, Node};
use serde_json::json;

/// Arguments of every echo call.
const ARGS: &str = "{}";

/// Subject of the raw floor's responder.
const FLOOR_SUBJECT: &str = "bench.floor";

/// Bytes of the raw floor's request (an `InvokeTool` with small arguments is ~120 B).
const FLOOR_BYTES: usize = 120;

// ---------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------

/// A broker with no plugins of its own on `nats` (its NATS client from 127.0.0.1), as
/// `tests/integration/remote.rs` starts it.
async fn remote_broker(nats: &NatsServer) -> Broker {
    let toml = "[nats]\nname = \"b1\"\nlocal_address = \"127.0.0.1\"\n";
    Broker::spawn_with_files(vec![], &["--nats", nats.url()], &[("hearth.toml", toml)]).await
}

/// The pid of `plugin` as the broker lists it: its own process, or on `node`.
async fn plugin_pid(b: &mut Broker, plugin: &str, node: Option<&str>) -> u32 {
    let p = b.plugin(plugin).await;
    match node {
        None => p.pid,
        Some(n) => p.remote.iter().find(|r| r.node == n).map_or(0, |r| r.pid),
    }
}

fn node_pid(n: &Node) -> u32 {
    n.child.as_ref().map_or(0, |c| c.id())
}

/// One echo call; (client wall µs, broker `elapsed_us`).
async fn echo(admin: &mut AdminConn, tool: &str) -> (f64, f64) {
    let req = admin.with_token(CallToolRequest {
        name: tool.into(),
        args_json: ARGS.into(),
        ..Default::default()
    });
    let started = Instant::now();
    let r = admin
        .client()
        .call_tool(req)
        .await
        .expect("CallTool")
        .into_inner();
    let wall = started.elapsed().as_secs_f64() * 1e6;
    assert!(r.success, "{tool}: {r:?}");
    (wall, r.elapsed_us as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// This process's CPU affinity (`Cpus_allowed_list`), e.g. `0-1` or `0` under taskset.
fn affinity() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| "?".into())
}

// ---------------------------------------------------------------------------------------
// The raw NATS floor
// ---------------------------------------------------------------------------------------

/// Starts the floor's responder on its own thread (current-thread runtime): answers each
/// request on `FLOOR_SUBJECT` with its payload. Ends when the server goes away.
fn start_responder(url: &str) {
    let url = url.to_string();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = async_nats::connect(&url)
                .await
                .expect("floor responder connect");
            let mut sub = client.subscribe(FLOOR_SUBJECT).await.unwrap();
            client.flush().await.unwrap();
            ready_tx.send(()).unwrap();
            while let Some(msg) = sub.next().await {
                if let Some(reply) = msg.reply {
                    if client.publish(reply, msg.payload).await.is_err() {
                        return;
                    }
                }
            }
        });
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("floor responder did not subscribe");
}

/// How the floor's requester runs.
#[derive(Clone, Copy)]
enum Flavour {
    /// Current-thread runtime (as `hearth node`).
    Ct,
    /// Multi-thread runtime with 2 workers (as the broker on this machine).
    Mt,
}

/// What the floor's requester measures.
#[derive(Clone, Copy)]
enum FloorRun {
    /// `warmup` then `calls` sequential requests: latencies µs.
    Seq { warmup: usize, calls: usize },
    /// `inflight` tasks requesting back to back for `secs`: (calls, elapsed, latencies).
    Tput { inflight: usize, secs: u64 },
}

/// Runs the floor's requester on a new thread with its own runtime and connection;
/// returns (calls, elapsed, latencies µs).
fn floor(url: &str, flavour: Flavour, run: FloorRun) -> (usize, Duration, Vec<f64>) {
    let url = url.to_string();
    std::thread::spawn(move || {
        let rt = match flavour {
            Flavour::Ct => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            Flavour::Mt => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build(),
        }
        .unwrap();
        rt.block_on(async move {
            let client = async_nats::connect(&url)
                .await
                .expect("floor client connect");
            let payload = bytes::Bytes::from(vec![b'x'; FLOOR_BYTES]);
            match run {
                FloorRun::Seq { warmup, calls } => {
                    for _ in 0..warmup {
                        client
                            .request(FLOOR_SUBJECT, payload.clone())
                            .await
                            .unwrap();
                    }
                    let mut lat = Vec::with_capacity(calls);
                    let started = Instant::now();
                    for _ in 0..calls {
                        let t = Instant::now();
                        client
                            .request(FLOOR_SUBJECT, payload.clone())
                            .await
                            .unwrap();
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                    (calls, started.elapsed(), lat)
                }
                FloorRun::Tput { inflight, secs } => {
                    for _ in 0..200 {
                        client
                            .request(FLOOR_SUBJECT, payload.clone())
                            .await
                            .unwrap();
                    }
                    let started = Instant::now();
                    let deadline = started + Duration::from_secs(secs);
                    let mut tasks = Vec::new();
                    for _ in 0..inflight {
                        let client = client.clone();
                        let payload = payload.clone();
                        tasks.push(tokio::spawn(async move {
                            let mut lat = Vec::with_capacity(65_536);
                            while Instant::now() < deadline {
                                let t = Instant::now();
                                client
                                    .request(FLOOR_SUBJECT, payload.clone())
                                    .await
                                    .unwrap();
                                lat.push(t.elapsed().as_secs_f64() * 1e6);
                            }
                            lat
                        }));
                    }
                    let mut all = Vec::new();
                    for t in tasks {
                        all.extend(t.await.unwrap());
                    }
                    (all.len(), started.elapsed(), all)
                }
            }
        })
    })
    .join()
    .expect("floor thread")
}

// ---------------------------------------------------------------------------------------
// Part A
// ---------------------------------------------------------------------------------------

/// One path of Part A.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Path {
    FloorCt,
    FloorMt,
    Local,
    Remote,
    Remote2,
}

impl Path {
    fn label(self) -> &'static str {
        match self {
            Path::FloorCt => "raw NATS floor (requester current-thread)",
            Path::FloorMt => "raw NATS floor (requester multi-thread, 2 workers)",
            Path::Local => "local: broker → plugin (`lc_echo`)",
            Path::Remote => "remote: broker → NATS → node a → plugin (`r1_echo`)",
            Path::Remote2 => "remote, two nodes a + b (`r2_echo`)",
        }
    }
}

/// Everything Part A needs running.
struct Setup {
    nats: NatsServer,
    local: Broker,
    remote: Broker,
    node_a: Node,
    node_b: Node,
}

impl Setup {
    fn tool(&self, p: Path) -> &'static str {
        match p {
            Path::Local => "lc_echo",
            Path::Remote => "r1_echo",
            Path::Remote2 => "r2_echo",
            _ => unreachable!(),
        }
    }

    fn broker(&self, p: Path) -> &Broker {
        match p {
            Path::Local => &self.local,
            _ => &self.remote,
        }
    }
}

/// Per-path CPU counters (µs) of the processes on the path.
#[derive(Default, Clone, Copy)]
struct Cpu {
    broker: u64,
    node: u64,
    nats: u64,
    plugin: u64,
    client: u64,
}

fn cpu_now(pids: &[u32; 4]) -> Cpu {
    let get = |p: u32| if p == 0 { 0 } else { cpu_us(p) };
    Cpu {
        broker: get(pids[0]),
        node: get(pids[1]),
        nats: get(pids[2]),
        plugin: get(pids[3]),
        client: cpu_us(std::process::id()),
    }
}

fn cpu_add(acc: &mut Cpu, before: Cpu, after: Cpu) {
    acc.broker += after.broker.saturating_sub(before.broker);
    acc.node += after.node.saturating_sub(before.node);
    acc.nats += after.nats.saturating_sub(before.nats);
    acc.plugin += after.plugin.saturating_sub(before.plugin);
    acc.client += after.client.saturating_sub(before.client);
}

/// Sequential latency of one round of one path: (client, broker elapsed) summaries.
async fn seq_round(s: &Setup, p: Path, warmup: usize, calls: usize) -> (Summary, Option<Summary>) {
    match p {
        Path::FloorCt | Path::FloorMt => {
            let flavour = if p == Path::FloorCt {
                Flavour::Ct
            } else {
                Flavour::Mt
            };
            let url = s.nats.url().to_string();
            let (_, _, lat) = tokio::task::spawn_blocking(move || {
                floor(&url, flavour, FloorRun::Seq { warmup, calls })
            })
            .await
            .unwrap();
            (summarize(lat), None)
        }
        _ => {
            let tool = s.tool(p);
            let mut admin = Broker::admin_clone(s.broker(p));
            for _ in 0..warmup {
                echo(&mut admin, tool).await;
            }
            let mut wall = Vec::with_capacity(calls);
            let mut inside = Vec::with_capacity(calls);
            for _ in 0..calls {
                let (w, e) = echo(&mut admin, tool).await;
                wall.push(w);
                inside.push(e);
            }
            (summarize(wall), Some(summarize(inside)))
        }
    }
}

/// One throughput run: (calls/s, latency summary).
async fn tput_run(s: &Setup, p: Path, inflight: usize, secs: u64) -> (f64, Summary) {
    match p {
        Path::FloorCt | Path::FloorMt => {
            let flavour = if p == Path::FloorCt {
                Flavour::Ct
            } else {
                Flavour::Mt
            };
            let url = s.nats.url().to_string();
            let (n, el, lat) = tokio::task::spawn_blocking(move || {
                floor(&url, flavour, FloorRun::Tput { inflight, secs })
            })
            .await
            .unwrap();
            (n as f64 / el.as_secs_f64(), summarize(lat))
        }
        _ => {
            let tool = s.tool(p);
            // Warm the path (and with two nodes, both of them).
            let mut admin = Broker::admin_clone(s.broker(p));
            for _ in 0..100 {
                echo(&mut admin, tool).await;
            }
            let started = Instant::now();
            let deadline = started + Duration::from_secs(secs);
            let mut tasks = Vec::new();
            for _ in 0..inflight {
                let mut admin = Broker::admin_clone(s.broker(p));
                tasks.push(tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(65_536);
                    while Instant::now() < deadline {
                        lat.push(echo(&mut admin, tool).await.0);
                    }
                    lat
                }));
            }
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.expect("throughput task"));
            }
            (
                all.len() as f64 / started.elapsed().as_secs_f64(),
                summarize(all),
            )
        }
    }
}

fn fmt_pp(s: &Summary) -> String {
    format!("{:.0} / {:.0}", s.p50, s.p99)
}

async fn part_a(pids_seen: &mut Vec<u32>, roots: &mut Vec<PathBuf>) {
    let rounds = env_num("HEARTH_NATS_BENCH_ROUNDS", 5).max(1) as usize;
    let calls = env_num("HEARTH_NATS_BENCH_CALLS", 2000).max(10) as usize;
    let warmup = env_num("HEARTH_NATS_BENCH_WARMUP", 200) as usize;
    let tput_rounds = env_num("HEARTH_NATS_BENCH_TPUT_ROUNDS", 2).max(1) as usize;
    let secs = env_num("HEARTH_NATS_BENCH_SECS", 2).max(1);
    let inflight = env_num("HEARTH_NATS_BENCH_INFLIGHT", 16).max(1) as usize;

    let nats = NatsServer::plain();
    start_responder(nats.url());
    let rs = |name: &str| stress("rs", name, "", json!({}));
    let node_a = Node::spawn(nats.url(), "a", "127.0.0.2", &[rs("r1"), rs("r2")]);
    let node_b = Node::spawn(nats.url(), "b", "127.0.0.3", &[rs("r2")]);
    let mut remote = remote_broker(&nats).await;
    let local = Broker::start(vec![rs("lc")]).await;
    wait_nodes(&mut remote, "r1", &["a"]).await;
    wait_nodes(&mut remote, "r2", &["a", "b"]).await;
    let mut s = Setup {
        nats,
        local,
        remote,
        node_a,
        node_b,
    };
    let lc_pid = plugin_pid(&mut s.local, "lc", None).await;
    let r1_pid = plugin_pid(&mut s.remote, "r1", Some("a")).await;
    let r2a = plugin_pid(&mut s.remote, "r2", Some("a")).await;
    let r2b = plugin_pid(&mut s.remote, "r2", Some("b")).await;
    pids_seen.extend([
        s.nats.pid(),
        s.local.pid(),
        s.remote.pid(),
        node_pid(&s.node_a),
        node_pid(&s.node_b),
        lc_pid,
        r1_pid,
        r2a,
        r2b,
    ]);
    roots.extend([
        s.local.root.path().to_path_buf(),
        s.remote.root.path().to_path_buf(),
        s.node_a.root.path().to_path_buf(),
        s.node_b.root.path().to_path_buf(),
        s.nats.dir().to_path_buf(),
    ]);

    println!("## A. Latency and throughput: local vs one hop over NATS\n");
    println!(
        "nats-server {} (pid {}); local broker pid {}, plugin lc pid {lc_pid}; remote broker pid {}, node a pid {} (r1 pid {r1_pid}, r2 pid {r2a}), node b pid {} (r2 pid {r2b}).",
        s.nats.url(),
        s.nats.pid(),
        s.local.pid(),
        s.remote.pid(),
        node_pid(&s.node_a),
        node_pid(&s.node_b)
    );
    println!(
        "rounds={rounds} calls={calls} warmup={warmup} (per path per round); throughput rounds={tput_rounds} × {secs} s; in flight 1 and {inflight}; args `{ARGS}`; floor payload {FLOOR_BYTES} B\n"
    );

    // Sequential latency, interleaved: each round runs every path once, the order
    // rotated by one per round.
    let seq_paths = [Path::FloorCt, Path::FloorMt, Path::Local, Path::Remote];
    let mut seq: BTreeMap<Path, Vec<(Summary, Option<Summary>)>> = BTreeMap::new();
    let mut cpu: BTreeMap<Path, (Cpu, usize)> = BTreeMap::new();
    let nats_pid = s.nats.pid();
    for round in 0..rounds {
        for k in 0..seq_paths.len() {
            let p = seq_paths[(round + k) % seq_paths.len()];
            let pids = match p {
                Path::Local => [s.local.pid(), 0, 0, lc_pid],
                Path::Remote => [s.remote.pid(), node_pid(&s.node_a), nats_pid, r1_pid],
                _ => [0, 0, nats_pid, 0],
            };
            let before = cpu_now(&pids);
            let r = seq_round(&s, p, warmup, calls).await;
            let after = cpu_now(&pids);
            let e = cpu.entry(p).or_default();
            // The warm-up calls ran inside the window too.
            cpu_add(&mut e.0, before, after);
            e.1 += calls + warmup;
            seq.entry(p).or_default().push(r);
        }
        eprintln!(
            "round {} of {rounds} done (loadavg {})",
            round + 1,
            loadavg()
        );
    }

    // Throughput, interleaved the same way.
    let tput_paths: Vec<(Path, usize)> = vec![
        (Path::FloorCt, 1),
        (Path::FloorCt, inflight),
        (Path::Local, 1),
        (Path::Local, inflight),
        (Path::Remote, 1),
        (Path::Remote, inflight),
        (Path::Remote2, inflight),
    ];
    let mut tput: BTreeMap<(Path, usize), Vec<(f64, Summary)>> = BTreeMap::new();
    let (calls_a0, calls_b0) = (s.node_a.calls_answered(), s.node_b.calls_answered());
    let mut r2_split = Vec::new();
    for round in 0..tput_rounds {
        for k in 0..tput_paths.len() {
            let (p, n) = tput_paths[(round + k) % tput_paths.len()];
            let (a0, b0) = (s.node_a.calls_answered(), s.node_b.calls_answered());
            let r = tput_run(&s, p, n, secs).await;
            if p == Path::Remote2 {
                r2_split.push((
                    s.node_a.calls_answered() - a0,
                    s.node_b.calls_answered() - b0,
                ));
            }
            tput.entry((p, n)).or_default().push(r);
        }
        eprintln!(
            "throughput round {} of {tput_rounds} done (loadavg {})",
            round + 1,
            loadavg()
        );
    }
    let _ = (calls_a0, calls_b0);

    // Report.
    println!("### A.1 Sequential latency, 1 call in flight (µs, p50 / p99 per round)\n");
    println!("Client = wall time of `Admin.CallTool` over the broker's Unix socket (for the floor: of `client.request()`); `elapsed_us` = the broker's own measure of the call (route, validate, the plugin round trip — for remote, the NATS hop, the node and its plugin).\n");
    let mut head = "| path | measure |".to_string();
    let mut rule = "|---|---|".to_string();
    for r in 0..rounds {
        head.push_str(&format!(" round {} |", r + 1));
        rule.push_str("---:|");
    }
    head.push_str(" median of rounds |");
    rule.push_str("---:|");
    println!("{head}\n{rule}");
    let row = |label: &str, measure: &str, v: Vec<Summary>| {
        let mut line = format!("| {label} | {measure} |");
        for s in &v {
            line.push_str(&format!(" {} |", fmt_pp(s)));
        }
        let p50 = median(v.iter().map(|s| s.p50).collect());
        let p99 = median(v.iter().map(|s| s.p99).collect());
        line.push_str(&format!(" **{p50:.0}** / {p99:.0} |"));
        println!("{line}");
        (p50, p99)
    };
    let mut medians: BTreeMap<(Path, bool), (f64, f64)> = BTreeMap::new();
    for p in seq_paths {
        let v = &seq[&p];
        medians.insert(
            (p, false),
            row(p.label(), "client", v.iter().map(|r| r.0).collect()),
        );
        if v[0].1.is_some() {
            medians.insert(
                (p, true),
                row(
                    p.label(),
                    "`elapsed_us`",
                    v.iter().map(|r| r.1.unwrap()).collect(),
                ),
            );
        }
    }
    // The hop's extra cost per round.
    let mut hop_line = "| **hop = remote − local** | `elapsed_us` p50 |".to_string();
    let mut hop_client = "| **hop = remote − local** | client p50 |".to_string();
    let (mut hops, mut hops_c) = (Vec::new(), Vec::new());
    for (remote, local) in seq[&Path::Remote]
        .iter()
        .zip(&seq[&Path::Local])
        .take(rounds)
    {
        let h = remote.1.unwrap().p50 - local.1.unwrap().p50;
        let hc = remote.0.p50 - local.0.p50;
        hop_line.push_str(&format!(" {h:.0} |"));
        hop_client.push_str(&format!(" {hc:.0} |"));
        hops.push(h);
        hops_c.push(hc);
    }
    let hop = median(hops);
    let hop_c = median(hops_c);
    hop_line.push_str(&format!(" **{hop:.0}** |"));
    hop_client.push_str(&format!(" **{hop_c:.0}** |"));
    println!("{hop_line}\n{hop_client}");
    println!(
        "\nHop's extra cost (median over rounds of remote p50 − local p50, `elapsed_us`): **{hop:.0} µs** — goal ≤ 150 µs p50 on loopback: **{}**. Raw NATS floor p50 (median of rounds): {:.0} µs current-thread, {:.0} µs multi-thread requester.\n",
        if hop <= 150.0 { "met" } else { "missed" },
        medians[&(Path::FloorCt, false)].0,
        medians[&(Path::FloorMt, false)].0,
    );

    println!("CPU time per call over all sequential rounds (utime+stime from /proc, µs per call, warm-up included):\n");
    println!("| path | broker | node | nats-server | plugin | bench client |");
    println!("|---|---:|---:|---:|---:|---:|");
    for p in seq_paths {
        let (c, n) = cpu[&p];
        let per = |v: u64, used: bool| {
            if used {
                format!("{:.1}", v as f64 / n as f64)
            } else {
                "–".into()
            }
        };
        let (b, nd, ns, pl) = match p {
            Path::Local => (true, false, false, true),
            Path::Remote => (true, true, true, true),
            _ => (false, false, true, false),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            p.label(),
            per(c.broker, b),
            per(c.node, nd),
            per(c.nats, ns),
            per(c.plugin, pl),
            per(c.client, true)
        );
    }

    println!(
        "\n### A.2 Throughput (calls/s; p50 / p99 µs of the calls in brackets; {secs} s per run)\n"
    );
    let mut head = "| path | in flight |".to_string();
    let mut rule = "|---|---:|".to_string();
    for r in 0..tput_rounds {
        head.push_str(&format!(" round {} |", r + 1));
        rule.push_str("---:|");
    }
    head.push_str(" median calls/s |");
    rule.push_str("---:|");
    println!("{head}\n{rule}");
    for (p, n) in &tput_paths {
        let v = &tput[&(*p, *n)];
        let mut line = format!("| {} | {n} |", p.label());
        for (rate, s) in v {
            line.push_str(&format!(" {rate:.0} ({}) |", fmt_pp(s)));
        }
        line.push_str(&format!(
            " **{:.0}** |",
            median(v.iter().map(|r| r.0).collect())
        ));
        println!("{line}");
    }
    let split: Vec<String> = r2_split
        .iter()
        .map(|(a, b)| format!("a {a} / b {b}"))
        .collect();
    println!(
        "\nCalls answered per node in the two-node runs (their debug logs): {}.\n",
        split.join("; ")
    );

    // Stop everything of Part A.
    drop(s);
}

// ---------------------------------------------------------------------------------------
// Part B
// ---------------------------------------------------------------------------------------

/// How a chaos call ended.
#[derive(Clone)]
enum End {
    Ok,
    Err(String),
    Hung,
}

/// One chaos call: start and end since the start of the run, outcome.
#[derive(Clone)]
struct Rec {
    start: Duration,
    end: Duration,
    end_kind: End,
}

/// What the killer did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Act {
    Kill,
    Stop,
}

#[derive(Clone)]
struct Event {
    at: Duration,
    act: Act,
    node: usize,
    /// When the killed node was running again (process started) / SIGCONT sent.
    back: Option<Duration>,
}

/// Error kind of a failed call, from its text.
fn kind_of(e: &str) -> &'static str {
    if e.contains("got no answer from any node") {
        "no answer (no message from a node within the 1 s ack timeout)"
    } else if e.contains("no plugin host serves") || e.contains("not ready") {
        "not ready (no node serves the plugin now)"
    } else if e.contains("timed out") {
        "timeout"
    } else if e.contains("node") {
        "lost (the node that had the call is gone)"
    } else {
        "other"
    }
}

/// An error text with digits replaced (to group texts differing by ms or ids).
fn shape(e: &str) -> String {
    let mut out = String::new();
    let mut last_digit = false;
    for c in e.chars() {
        if c.is_ascii_digit() {
            if !last_digit {
                out.push('N');
            }
            last_digit = true;
        } else {
            out.push(c);
            last_digit = false;
        }
    }
    out.chars().take(200).collect()
}

/// Lines of a node log saying a call was answered `ok` by the node's router.
fn ok_answers(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            l.contains("tool call answered")
                && (l.contains("outcome=\"ok\"") || l.contains("outcome=ok"))
        })
        .count()
}

async fn part_b(pids_seen: &mut Vec<u32>, roots: &mut Vec<PathBuf>) -> bool {
    let secs = env_num("HEARTH_NATS_CHAOS_SECS", 30);
    let lang = std::env::var("HEARTH_NATS_CHAOS_LANG").unwrap_or_else(|_| "rs".into());
    assert!(
        lang == "rs" || lang == "py",
        "HEARTH_NATS_CHAOS_LANG={lang:?}: use rs or py"
    );
    let rate = env_num("HEARTH_NATS_CHAOS_RATE", 100).max(1);
    let sleep_ms = env_num("HEARTH_NATS_CHAOS_SLEEP_MS", 100);
    let kill_ms = env_num("HEARTH_NATS_CHAOS_KILL_MS", 3000).max(100);
    let stop_every = env_num("HEARTH_NATS_CHAOS_STOP_EVERY", 3);
    let restart_ms = env_num("HEARTH_NATS_CHAOS_RESTART_MS", 500);
    let call_timeout_ms = env_num("HEARTH_NATS_CHAOS_CALL_TIMEOUT_MS", 10_000) as u32;
    let deadline = Duration::from_secs(env_num("HEARTH_NATS_CHAOS_DEADLINE_S", 30));
    let clock_seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let seed = env_num("HEARTH_NATS_CHAOS_SEED", clock_seed);

    let nats = NatsServer::plain();
    let plugin = stress(&lang, "ch", "", json!({}));
    let names = ["c1", "c2", "c3"];
    let locals = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let nodes: Vec<Option<Node>> = names
        .iter()
        .zip(locals)
        .map(|(n, l)| Some(Node::spawn(nats.url(), n, l, std::slice::from_ref(&plugin))))
        .collect();
    let mut broker = remote_broker(&nats).await;
    wait_nodes(&mut broker, "ch", &names).await;
    pids_seen.extend([nats.pid(), broker.pid()]);
    roots.extend([broker.root.path().to_path_buf(), nats.dir().to_path_buf()]);
    for n in nodes.iter().flatten() {
        pids_seen.push(node_pid(n));
        roots.push(n.root.path().to_path_buf());
    }
    for n in names {
        pids_seen.push(plugin_pid(&mut broker, "ch", Some(n)).await);
    }
    let nodes = Arc::new(Mutex::new(nodes));

    println!("## B. Chaos: plugin hosts killed and frozen under an open-loop call stream\n");
    println!(
        "plugin `ch` ({}) on nodes c1 c2 c3 (127.0.0.2–.4); {secs} s; {rate} calls/s of `ch_sleep {{\"ms\": {sleep_ms}}}` (timeout_ms {call_timeout_ms}), client deadline {} s; every {kill_ms} ms the killer SIGKILLs a random node and starts it again {restart_ms} ms later (same name and data dir){}; seed {seed}\n",
        if lang == "rs" { "Rust stress" } else { "Python stress" },
        deadline.as_secs(),
        if stop_every > 0 {
            format!(", every Nth action (N = {stop_every}) is a 2 s SIGSTOP instead")
        } else {
            String::new()
        },
    );

    let t0 = Instant::now();
    let run_for = Duration::from_secs(secs);
    let events: Arc<Mutex<Vec<Event>>> = Arc::new(Mutex::new(Vec::new()));
    let node_pids: Arc<Mutex<Vec<u32>>> = Arc::new(Mutex::new(Vec::new()));

    // The killer.
    let killer = {
        let nodes = nodes.clone();
        let events = events.clone();
        let node_pids = node_pids.clone();
        let url = nats.url().to_string();
        let lang = lang.clone();
        tokio::spawn(async move {
            let mut rng = SplitMix(seed);
            let mut tick = 0u64;
            loop {
                tick += 1;
                let next = Duration::from_millis(kill_ms * tick);
                if next + Duration::from_secs(3) > run_for {
                    break;
                }
                tokio::time::sleep_until((t0 + next).into()).await;
                let i = rng.below(3);
                let stop = stop_every > 0 && tick.is_multiple_of(stop_every);
                if stop {
                    let at = t0.elapsed();
                    if let Some(n) = &nodes.lock().unwrap()[i] {
                        n.signal(libc::SIGSTOP);
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    if let Some(n) = &nodes.lock().unwrap()[i] {
                        n.signal(libc::SIGCONT);
                    }
                    events.lock().unwrap().push(Event {
                        at,
                        act: Act::Stop,
                        node: i,
                        back: Some(t0.elapsed()),
                    });
                } else {
                    let at = t0.elapsed();
                    if let Some(n) = &nodes.lock().unwrap()[i] {
                        n.signal(libc::SIGKILL);
                    }
                    tokio::time::sleep(Duration::from_millis(restart_ms)).await;
                    let old = nodes.lock().unwrap()[i].take();
                    let url = url.clone();
                    let lang = lang.clone();
                    // restart_with: SIGTERM (to the dead process: a no-op), reap, start.
                    let new = tokio::task::spawn_blocking(move || {
                        old.map(|n| n.restart_with(&url, &[stress(&lang, "ch", "", json!({}))]))
                    })
                    .await
                    .unwrap();
                    if let Some(n) = &new {
                        node_pids.lock().unwrap().push(node_pid(n));
                    }
                    nodes.lock().unwrap()[i] = new;
                    events.lock().unwrap().push(Event {
                        at,
                        act: Act::Kill,
                        node: i,
                        back: Some(t0.elapsed()),
                    });
                }
            }
        })
    };

    // Plugin pids on the nodes, sampled through the broker (for the leak check).
    let sampler = {
        let mut admin = Broker::admin_clone(&broker);
        let node_pids = node_pids.clone();
        tokio::spawn(async move {
            while t0.elapsed() < run_for + Duration::from_secs(5) {
                let req = admin.with_token(hearth_proto::v1::ListPluginsRequest {});
                if let Ok(r) = admin.client().list_plugins(req).await {
                    for p in r.into_inner().plugins {
                        for r in p.remote {
                            node_pids.lock().unwrap().push(r.pid);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    // The open-loop call stream.
    let mut calls = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    let args = json!({"ms": sleep_ms}).to_string();
    while t0.elapsed() < run_for {
        tick.tick().await;
        let mut admin = Broker::admin_clone(&broker);
        let args = args.clone();
        calls.spawn(async move {
            let start = t0.elapsed();
            let req = admin.with_token(CallToolRequest {
                name: "ch_sleep".into(),
                args_json: args,
                timeout_ms: call_timeout_ms,
                ..Default::default()
            });
            let got = tokio::time::timeout(deadline, admin.client().call_tool(req)).await;
            let end_kind = match got {
                Err(_) => End::Hung,
                Ok(Err(status)) => End::Err(format!("{:?}: {}", status.code(), status.message())),
                Ok(Ok(r)) => {
                    let r = r.into_inner();
                    if r.success {
                        End::Ok
                    } else {
                        End::Err(r.error)
                    }
                }
            };
            Rec {
                start,
                end: t0.elapsed(),
                end_kind,
            }
        });
    }
    let mut recs = Vec::new();
    while let Some(r) = calls.join_next().await {
        recs.push(r.expect("call task"));
    }
    killer.await.expect("killer");
    sampler.abort();
    let elapsed = t0.elapsed();
    recs.sort_by_key(|r| r.start);
    let events = events.lock().unwrap().clone();

    // Node-side ok answers (all generations of each node append to one log).
    let (logs_ok, node_lines) = {
        let nodes = nodes.lock().unwrap();
        let mut ok = 0;
        let mut lines = Vec::new();
        for n in nodes.iter().flatten() {
            let log = n.log();
            let k = ok_answers(&log);
            ok += k;
            lines.push(format!("{} {k}", n.name));
        }
        (ok, lines)
    };
    let broker_log = broker.log();
    pids_seen.extend(node_pids.lock().unwrap().iter().copied());

    // Figures.
    let total = recs.len();
    let ok = recs
        .iter()
        .filter(|r| matches!(r.end_kind, End::Ok))
        .count();
    let hung = recs
        .iter()
        .filter(|r| matches!(r.end_kind, End::Hung))
        .count();
    let failed: Vec<&Rec> = recs
        .iter()
        .filter(|r| matches!(r.end_kind, End::Err(_)))
        .collect();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut texts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &failed {
        if let End::Err(e) = &r.end_kind {
            *kinds.entry(kind_of(e)).or_default() += 1;
            *texts.entry(shape(e)).or_default() += 1;
        }
    }
    let empty_errors = failed
        .iter()
        .filter(|r| matches!(&r.end_kind, End::Err(e) if e.trim().is_empty()))
        .count();

    println!("### B.1 Calls\n");
    println!("| calls | ok | failed | hung (no answer in {} s) | failed with an empty error | ok answers in the nodes' logs | ok at the client | node ok − client ok |", deadline.as_secs());
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {total} | {ok} | {} | **{hung}** | {empty_errors} | {logs_ok} | {ok} | {} |",
        failed.len(),
        logs_ok as i64 - ok as i64
    );
    println!(
        "\nok answers per node log: {}; run took {:.1} s; loadavg at end: {}\n",
        node_lines.join(", "),
        elapsed.as_secs_f64(),
        loadavg()
    );
    println!("Failed calls by kind:\n");
    println!("| kind | calls |");
    println!("|---|---:|");
    for (k, n) in &kinds {
        println!("| {k} | {n} |");
    }
    println!("\nDistinct error texts (digits as N):\n");
    println!("| calls | error |");
    println!("|---:|---|");
    let mut texts: Vec<(String, usize)> = texts.into_iter().collect();
    texts.sort_by_key(|t| std::cmp::Reverse(t.1));
    for (t, n) in texts.iter().take(12) {
        println!("| {n} | {} |", t.replace('|', "\\|"));
    }

    // Per killer action: failures attributed to the latest action before them.
    println!("\n### B.2 The killer's actions\n");
    println!("| # | at s | action | node | back at s | calls failed until the next action | first ok after it (ms) | first ok of a call started after it (ms) |");
    println!("|---:|---:|---|---|---:|---:|---:|---:|");
    let mut ttf_kill = Vec::new();
    let mut ttf_stop = Vec::new();
    let mut first_ok_kill = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        let next = events.get(i + 1).map_or(Duration::MAX, |e| e.at);
        let in_window: Vec<&&Rec> = failed
            .iter()
            .filter(|r| r.end >= ev.at && r.end < next)
            .collect();
        for r in &in_window {
            let ms = (r.end - ev.at).as_secs_f64() * 1e3;
            match ev.act {
                Act::Kill => ttf_kill.push(ms),
                Act::Stop => ttf_stop.push(ms),
            }
        }
        let first_ok = recs
            .iter()
            .filter(|r| matches!(r.end_kind, End::Ok) && r.end >= ev.at)
            .map(|r| r.end)
            .min()
            .map(|t| (t - ev.at).as_secs_f64() * 1e3);
        let first_ok_started = recs
            .iter()
            .filter(|r| matches!(r.end_kind, End::Ok) && r.start >= ev.at)
            .map(|r| r.end)
            .min()
            .map(|t| (t - ev.at).as_secs_f64() * 1e3);
        if ev.act == Act::Kill {
            if let Some(ms) = first_ok_started {
                first_ok_kill.push(ms);
            }
        }
        let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
        println!(
            "| {} | {:.2} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            ev.at.as_secs_f64(),
            match ev.act {
                Act::Kill => "SIGKILL + restart",
                Act::Stop => "SIGSTOP 2 s",
            },
            names[ev.node],
            ev.back
                .map_or("–".into(), |b| format!("{:.2}", b.as_secs_f64())),
            in_window.len(),
            f(first_ok),
            f(first_ok_started),
        );
    }
    let pct = |v: &Vec<f64>| {
        if v.is_empty() {
            "– (none)".to_string()
        } else {
            let s = summarize(v.clone());
            format!(
                "n {} · p50 {:.0} · p99 {:.0} · max {:.0}",
                s.n, s.p50, s.p99, s.max
            )
        }
    };
    println!("\nTime from the action to a failed call's error (ms), failures between one action and the next:\n");
    println!("| action | failed calls: time to fail after the action (ms) |");
    println!("|---|---|");
    println!("| SIGKILL | {} |", pct(&ttf_kill));
    println!("| SIGSTOP 2 s | {} |", pct(&ttf_stop));
    println!(
        "\nFirst successful call started after a SIGKILL, completion − kill (ms): {}",
        pct(&first_ok_kill)
    );
    let failures_outside = failed
        .iter()
        .filter(|r| events.first().is_none_or(|e| r.end < e.at))
        .count();
    println!("Failed calls before the first action: {failures_outside}\n");

    let warn = broker_log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .count();
    println!("Broker log: {warn} WARN/ERROR lines.\n");

    drop(broker);
    let nodes: Vec<Node> = nodes.lock().unwrap().drain(..).flatten().collect();
    drop(nodes);
    drop(nats);

    hung == 0 && empty_errors == 0
}

// ---------------------------------------------------------------------------------------
// Leftovers
// ---------------------------------------------------------------------------------------

/// Live (non-zombie) processes whose command line contains `needle` (`pgrep -f`).
fn pgrep_f(needle: &str) -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", needle])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p: &u32| *p != std::process::id() && alive(*p))
        .collect()
}

/// Live children of this process (`pgrep -P`); as a subreaper, orphans of everything
/// it started land here.
fn children() -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-P", &std::process::id().to_string()])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p: &u32| alive(*p))
        .collect()
}

fn describe(pid: u32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default();
    format!("{pid} {}", cmd.trim())
}

// ---------------------------------------------------------------------------------------

fn main() {
    harness::quiet_brokers();
    // Orphans of the nodes' plugins (if any) become our children, so the leak check
    // sees them.
    // SAFETY: plain prctl on this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ok = rt.block_on(run());
    drop(rt);
    std::process::exit(if ok { 0 } else { 1 });
}

async fn run() -> bool {
    let parts = std::env::var("HEARTH_NATS_BENCH_PARTS").unwrap_or_else(|_| "ab".into());
    let hearth = env!("CARGO_BIN_EXE_hearth");
    let stress_bin = std::path::Path::new(hearth)
        .parent()
        .unwrap()
        .join("examples/stress");
    if !stress_bin.exists() {
        eprintln!(
            "error: {} is missing; build the Rust stress plugin with the same profile first:\n  \
             cargo build --release -p hearth-plugin --example stress",
            stress_bin.display()
        );
        std::process::exit(2);
    }
    println!("# Hearth NATS benchmark (plugins on plugin hosts, issue 17)\n");
    println!("{} · {}", utc_now(), machine());
    println!(
        "CPU affinity of the bench (inherited by every process it starts): {}",
        affinity()
    );
    println!(
        "broker/node: {hearth}; nats-server: {}\n",
        nats::nats_server_binary().display()
    );

    let mut pids = Vec::new();
    let mut roots = Vec::new();
    let mut ok = true;
    if parts.contains('a') {
        part_a(&mut pids, &mut roots).await;
    }
    if parts.contains('b') && env_num("HEARTH_NATS_CHAOS_SECS", 30) > 0 {
        ok &= part_b(&mut pids, &mut roots).await;
    }

    // Every process started is gone?
    tokio::time::sleep(Duration::from_millis(500)).await;
    pids.retain(|p| *p != 0);
    pids.sort_unstable();
    pids.dedup();
    let left = harness::wait_gone(&pids, Duration::from_secs(10));
    let mut by_path: Vec<u32> = roots
        .iter()
        .flat_map(|r| pgrep_f(&r.display().to_string()))
        .collect();
    by_path.sort_unstable();
    by_path.dedup();
    let kids = children();
    println!("## Cleanup\n");
    if left.is_empty() && by_path.is_empty() && kids.is_empty() {
        println!(
            "cleanup: all {} processes seen (nats-servers, brokers, nodes, plugins) are gone; `pgrep -f` finds none of their temp dirs; no child or orphan left (the bench is a subreaper, so orphaned plugins would be its children).",
            pids.len()
        );
    } else {
        ok = false;
        println!("cleanup: LEFT BEHIND:");
        for p in left.iter().chain(&by_path).chain(&kids) {
            println!("- {}", describe(*p));
        }
    }
    // Information only: the stress binary may also run for someone else's bench or tests.
    let stress_running = pgrep_f(&stress_bin.display().to_string());
    if !stress_running.is_empty() {
        println!(
            "(`pgrep -f {}` finds {} process(es) not started by this bench: {:?})",
            stress_bin.display(),
            stress_running.len(),
            stress_running
        );
    }
    // Reap orphaned zombies handed to us as a subreaper.
    // SAFETY: waitpid on any child without blocking; our own `Child`s are all reaped.
    unsafe { while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {} }
    ok
}
