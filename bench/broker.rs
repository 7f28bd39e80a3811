//! Broker benchmark: a real `hearth run` (the integration-test harness) with the echo
//! test plugins in Rust, Python, Node and Go (the Go stress plugin, built by the bench
//! with `go build`), driven through the Admin service over the
//! broker's Unix socket. Prints Markdown tables; see BENCHMARKS.md.
//!
//! Run (release; the Rust plugin must be built first, next to the bench's `hearth`):
//!
//! ```text
//! cargo build --release -p hearth-plugin --example stress
//! cargo bench -p hearth-broker --bench broker
//! ```
//!
//! Knobs (environment):
//! - `HEARTH_BENCH_CALLS` sequential calls per plugin for latency (default 10000)
//! - `HEARTH_BENCH_WARMUP` warm-up calls per plugin (default 1000)
//! - `HEARTH_BENCH_SECS` seconds per throughput run (default 3)
//! - `HEARTH_BENCH_INFLIGHT` concurrency of the second throughput run (default 16)
//! - `HEARTH_BENCH_RESTARTS` restarts per plugin for cold start (default 10)
//! - `HEARTH_BENCH_ONLY` comma-separated subset of `rs,py,nd,go` (default all)
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/harness.rs"]
mod harness;
#[path = "raw.rs"]
mod raw;

use common::{context_switches, cpu_us, env_num, machine, summarize, threads_cpu_us};

use std::time::{Duration, Instant};

use harness::{node_echo, py_echo, python, repo, rss_kib, stress, wait_gone, Broker, PluginDir};
use hearth_broker::cli::AdminConn;
use hearth_proto::v1::admin_client::AdminClient;
use hearth_proto::v1::{CallToolRequest, PluginState, RestartPluginRequest};
use serde_json::json;
use tonic::transport::Channel;

/// Arguments of every echo call (a small JSON object).
const ARGS: &str = r#"{"msg":"hello","n":42}"#;

/// One plugin under test: its language label, plugin name and echo tool.
struct Target {
    lang: &'static str,
    plugin: &'static str,
    tool: &'static str,
}

const TARGETS: [Target; 4] = [
    Target {
        lang: "Rust",
        plugin: "rs",
        tool: "rs_echo",
    },
    Target {
        lang: "Python",
        plugin: "py",
        tool: "py_echo",
    },
    Target {
        lang: "Node",
        plugin: "nd",
        tool: "nd_echo",
    },
    Target {
        lang: "Go",
        plugin: "go",
        tool: "go_echo",
    },
];

/// Arguments the broker itself rejects (not an object): the call is answered by the
/// broker without reaching the plugin, which isolates the Admin path.
const BROKER_ONLY_ARGS: &str = "[1]";

/// One echo call; returns (client wall time, broker-side `elapsed_us`).
async fn call(admin: &mut AdminConn, tool: &str) -> (Duration, u64) {
    call_with(admin, tool, ARGS, true).await
}

/// One call with `args`, expecting `success == ok`.
async fn call_with(admin: &mut AdminConn, tool: &str, args: &str, ok: bool) -> (Duration, u64) {
    let req = admin.with_token(CallToolRequest {
        name: tool.into(),
        args_json: args.into(),
        ..Default::default()
    });
    let started = Instant::now();
    let r = admin
        .client()
        .call_tool(req)
        .await
        .expect("CallTool")
        .into_inner();
    let wall = started.elapsed();
    assert_eq!(r.success, ok, "{tool}: {r:?}");
    (wall, r.elapsed_us)
}

/// The plugin the broker runs for `t`.
fn plugin_of(t: &Target) -> PluginDir {
    match t.plugin {
        "rs" => stress("rs", "rs", "", json!({})),
        "py" => py_echo("py", json!({})),
        "go" => stress("go", "go", "", json!({})),
        _ => node_echo("nd"),
    }
}

/// The same plugin as a peer of the raw host (bench/raw.rs), for the raw relay.
fn peer_of(t: &Target) -> raw::Peer<'static> {
    let manifest = plugin_of(t).manifest;
    let runtime = match manifest["runtime"].as_str() {
        Some("python") => "python",
        Some("node") => "node",
        _ => "exec",
    };
    raw::Peer::Sdk {
        runtime,
        entry: manifest["entry"].as_str().expect("entry").into(),
        env: vec![],
    }
}

/// One language's floors (section 3c): the raw host's round trips, and the raw relay.
struct RawRow {
    trips: common::Summary,
    /// Context switches of the raw host's threads per round trip.
    trip_switches: f64,
    /// The relay's own `elapsed_us` (InvokeTool sent → ToolResult back).
    relay_hop: common::Summary,
    /// This client's wall time of a relayed `Admin.CallTool`.
    relay_wall: common::Summary,
    relay_switches: f64,
    /// The relay host's CPU µs per sequential call.
    relay_seq_cpu: f64,
    /// Calls/s through the relay with `inflight` calls in flight.
    relay_rate: f64,
    /// The relay host's CPU µs per call in that run.
    relay_cpu: f64,
}

/// Own CPU time (utime + stime) of this bench process, in microseconds.
fn self_cpu_us() -> u64 {
    cpu_us(std::process::id())
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB ({kib} KiB)", kib as f64 / 1024.0)
}

async fn plugin_pid(b: &mut Broker, name: &str) -> u32 {
    b.plugin(name).await.pid
}

/// CPU consumed per call by the broker, the plugin and this client, in µs.
struct CpuPerCall {
    broker: f64,
    plugin: f64,
    client: f64,
}

fn cpu_per_call(before: (u64, u64, u64), after: (u64, u64, u64), calls: usize) -> CpuPerCall {
    let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / calls as f64;
    CpuPerCall {
        broker: per(before.0, after.0),
        plugin: per(before.1, after.1),
        client: per(before.2, after.2),
    }
}

/// Throughput run: `inflight` tasks, each on a clone of the admin connection (one
/// HTTP/2 connection), calling back to back for `secs`. Returns (calls, elapsed,
/// latencies µs).
async fn throughput(
    b: &Broker,
    tool: &'static str,
    inflight: usize,
    secs: u64,
) -> (usize, Duration, Vec<f64>) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..inflight {
        let mut admin = Broker::admin_clone(b);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(65_536);
            while Instant::now() < deadline {
                let (wall, _) = call(&mut admin, tool).await;
                lat.push(wall.as_secs_f64() * 1e6);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("throughput task"));
    }
    (all.len(), started.elapsed(), all)
}

fn main() {
    harness::quiet_brokers();
    // The raw Rust plugin of section 3c is this binary run again.
    if std::env::var_os(raw::RAW_PLUGIN_ENV).is_some() {
        raw::raw_plugin_main();
        return;
    }
    // `cargo bench` passes `--bench` (and maybe a filter); nothing to parse.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The measuring loop runs as a task on a worker, beside the runtime's I/O driver,
    // not on this thread: a call then costs the client one wake-up, not a hand-off
    // between this thread and a worker each way.
    rt.block_on(async { tokio::spawn(run()).await.expect("the bench panicked") });
}

async fn run() {
    let calls = env_num("HEARTH_BENCH_CALLS", 10_000) as usize;
    let warmup = env_num("HEARTH_BENCH_WARMUP", 1_000) as usize;
    let secs = env_num("HEARTH_BENCH_SECS", 3);
    let inflight = env_num("HEARTH_BENCH_INFLIGHT", 16) as usize;
    let restarts = env_num("HEARTH_BENCH_RESTARTS", 10) as usize;
    let only = std::env::var("HEARTH_BENCH_ONLY").unwrap_or_else(|_| "rs,py,nd,go".into());
    let targets: Vec<&Target> = TARGETS
        .iter()
        .filter(|t| only.split(',').any(|o| o.trim() == t.plugin))
        .collect();
    assert!(
        !targets.is_empty(),
        "HEARTH_BENCH_ONLY={only:?} selects no plugin (use rs,py,nd,go)"
    );

    let hearth = env!("CARGO_BIN_EXE_hearth");
    let stress_bin = std::path::Path::new(hearth)
        .parent()
        .unwrap()
        .join("examples/stress");
    if targets.iter().any(|t| t.plugin == "rs") && !stress_bin.exists() {
        eprintln!(
            "error: {} is missing; build the Rust echo plugin with the same profile first:\n  \
             cargo build --release -p hearth-plugin --example stress",
            stress_bin.display()
        );
        std::process::exit(2);
    }

    println!("# Hearth broker benchmark\n");
    println!("{}", machine());
    println!("broker: {hearth}");
    println!(
        "calls={calls} warmup={warmup} secs={secs} inflight=1,{inflight} restarts={restarts} args={ARGS}\n"
    );

    // 1. Idle broker, no plugins.
    let idle_rss = {
        let b = Broker::start(vec![]).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss = rss_kib(b.pid());
        drop(b);
        rss
    };

    // 2. Broker with the three plugins.
    let mut b = Broker::start(targets.iter().map(|t| plugin_of(t)).collect()).await;
    let bpid = b.pid();
    let mut all_pids = vec![];
    for t in &targets {
        all_pids.push(plugin_pid(&mut b, t.plugin).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_ready = rss_kib(bpid);
    let mut plugin_rss_ready = Vec::new();
    for t in &targets {
        let pid = plugin_pid(&mut b, t.plugin).await;
        plugin_rss_ready.push(rss_kib(pid));
    }

    // 3. Sequential latency.
    let mut latency_rows = Vec::new();
    let mut broker_rows = Vec::new();
    let mut cpu_rows = Vec::new();
    let mut switch_rows = Vec::new();
    for t in &targets {
        let ppid = plugin_pid(&mut b, t.plugin).await;
        let mut admin = Broker::admin_clone(&b);
        for _ in 0..warmup {
            call(&mut admin, t.tool).await;
        }
        let mut wall = Vec::with_capacity(calls);
        let mut inside = Vec::with_capacity(calls);
        let before = (cpu_us(bpid), cpu_us(ppid), self_cpu_us());
        let switches = context_switches(bpid, "");
        let started = Instant::now();
        for _ in 0..calls {
            let (w, e) = call(&mut admin, t.tool).await;
            wall.push(w.as_secs_f64() * 1e6);
            inside.push(e as f64);
        }
        let total = started.elapsed();
        let after = (cpu_us(bpid), cpu_us(ppid), self_cpu_us());
        let switches = (context_switches(bpid, "") - switches) as f64 / calls as f64;
        switch_rows.push(switches);
        cpu_rows.push((t.lang, cpu_per_call(before, after, calls)));
        latency_rows.push((t.lang, summarize(wall), calls as f64 / total.as_secs_f64()));
        broker_rows.push((t.lang, summarize(inside)));
    }

    // 3b. The Admin path alone: the broker answers (arguments not an object) without
    // calling the plugin.
    let broker_only = {
        let tool = targets[0].tool;
        let mut admin = Broker::admin_clone(&b);
        for _ in 0..warmup {
            call_with(&mut admin, tool, BROKER_ONLY_ARGS, false).await;
        }
        let mut wall = Vec::with_capacity(calls);
        let mut inside = Vec::with_capacity(calls);
        let before = (cpu_us(bpid), 0, self_cpu_us());
        let started = Instant::now();
        for _ in 0..calls {
            let (w, e) = call_with(&mut admin, tool, BROKER_ONLY_ARGS, false).await;
            wall.push(w.as_secs_f64() * 1e6);
            inside.push(e as f64);
        }
        let total = started.elapsed();
        let after = (cpu_us(bpid), 0, self_cpu_us());
        (
            summarize(wall),
            summarize(inside),
            calls as f64 / total.as_secs_f64(),
            cpu_per_call(before, after, calls),
        )
    };

    // 3c. The raw floor of each language, in the same run: a minimal plugin of that
    // language (generated stubs only) on a minimal tonic host (bench/raw.rs) over a
    // Unix socket, the same arguments, one call at a time. The hop's ratio to it is
    // the figure the issue's goal names (broker p50 ≤ 1.3× raw p50).
    // The raw relay on the same kind of host (bench/raw.rs): this client's
    // `Admin.CallTool` relayed as `InvokeTool` to the plugin the broker runs — the
    // least a broker must do, so the floor of the broker's whole Admin path (two
    // streams, a reader per session).
    let mut raw_rows = Vec::new();
    for t in &targets {
        let raw = raw::RawPlugin::start(t.lang, &python(), &repo()).await;
        raw.tool_trips(warmup, ARGS).await;
        let me = std::process::id();
        let switches = context_switches(me, raw::HOST_THREADS);
        let trips = summarize(raw.tool_trips(calls, ARGS).await);
        let trip_switches =
            (context_switches(me, raw::HOST_THREADS) - switches) as f64 / calls as f64;
        drop(raw);
        // The relay drives the broker's own plugin (the same SDK and program), so that
        // broker / relay is the broker's share alone.
        let raw = raw::RawPlugin::start_peer(peer_of(t), &python(), &repo()).await;
        let (mut client, _reading) = raw.relay().await;
        let relay_call = |client: &mut AdminClient<Channel>| {
            let req = CallToolRequest {
                name: "raw_echo".into(),
                args_json: ARGS.into(),
                ..Default::default()
            };
            let mut client = client.clone();
            async move {
                let started = Instant::now();
                let r = client.call_tool(req).await.expect("relay").into_inner();
                assert!(r.success, "raw relay: {r:?}");
                (started.elapsed().as_secs_f64() * 1e6, r.elapsed_us as f64)
            }
        };
        for _ in 0..warmup {
            relay_call(&mut client).await;
        }
        let switches = context_switches(me, raw::HOST_THREADS);
        let cpu = threads_cpu_us(me, raw::HOST_THREADS);
        let (mut wall, mut inside) = (Vec::new(), Vec::new());
        for _ in 0..calls {
            let (w, e) = relay_call(&mut client).await;
            wall.push(w);
            inside.push(e);
        }
        let relay_switches =
            (context_switches(me, raw::HOST_THREADS) - switches) as f64 / calls as f64;
        let relay_seq_cpu = (threads_cpu_us(me, raw::HOST_THREADS) - cpu) as f64 / calls as f64;
        // The relay with `inflight` calls in flight: its calls/s and CPU per call, the
        // floor of the broker's figures in section 2.
        let cpu = threads_cpu_us(me, raw::HOST_THREADS);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for _ in 0..inflight {
            let mut client = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0usize;
                while Instant::now() < deadline {
                    relay_call(&mut client).await;
                    done += 1;
                }
                done
            }));
        }
        let mut done = 0;
        for t in tasks {
            done += t.await.expect("relay throughput task");
        }
        let elapsed = started.elapsed();
        let relay_cpu = (threads_cpu_us(me, raw::HOST_THREADS) - cpu) as f64 / done as f64;
        raw_rows.push(RawRow {
            trips,
            trip_switches,
            relay_hop: summarize(inside),
            relay_wall: summarize(wall),
            relay_switches,
            relay_seq_cpu,
            relay_rate: done as f64 / elapsed.as_secs_f64(),
            relay_cpu,
        });
    }

    // 4. Throughput with 1 and `inflight` calls in flight.
    let mut tput_rows = Vec::new();
    for t in &targets {
        let ppid = plugin_pid(&mut b, t.plugin).await;
        for n in [1, inflight] {
            let before = (cpu_us(bpid), cpu_us(ppid), self_cpu_us());
            let (done, elapsed, lat) = throughput(&b, t.tool, n, secs).await;
            let after = (cpu_us(bpid), cpu_us(ppid), self_cpu_us());
            let cpu = cpu_per_call(before, after, done);
            tput_rows.push((t.lang, n, done, elapsed, summarize(lat), cpu));
        }
    }

    // 5. RSS after the load.
    let rss_loaded = rss_kib(bpid);
    let mut plugin_rss_loaded = Vec::new();
    for t in &targets {
        let pid = plugin_pid(&mut b, t.plugin).await;
        plugin_rss_loaded.push(rss_kib(pid));
    }

    // 6. Cold start: RestartPlugin waits until the new process registered.
    let mut cold_rows = Vec::new();
    for t in &targets {
        let mut startup = Vec::new();
        let mut restart_wall = Vec::new();
        let mut not_ready_in_answer = 0;
        let mut never_set = 0;
        for _ in 0..restarts {
            let old = plugin_pid(&mut b, t.plugin).await;
            all_pids.push(old);
            let req = b.admin.with_token(RestartPluginRequest {
                name: t.plugin.into(),
            });
            let started = Instant::now();
            let r = b
                .admin
                .client()
                .restart_plugin(req)
                .await
                .expect("RestartPlugin")
                .into_inner();
            restart_wall.push(started.elapsed().as_secs_f64() * 1e3);
            let p = r.plugin.expect("plugin status");
            assert_ne!(p.pid, old, "{}: same pid after restart", t.plugin);
            all_pids.push(p.pid);
            // The RestartPlugin answer can precede the supervisor marking the plugin
            // ready (startup_ms 0, state STARTING): count those, then read the
            // figure from ListPlugins once it is set.
            if p.startup_ms == 0 || p.state != PluginState::Ready as i32 {
                not_ready_in_answer += 1;
            }
            // A plugin READY for 2 s whose startup_ms is still 0 never got the figure
            // (counted, not a sample).
            let polled = Instant::now();
            loop {
                let s = b.plugin(t.plugin).await;
                assert_eq!(s.pid, p.pid, "{}: restarted again: {s:?}", t.plugin);
                if s.startup_ms > 0 && s.state == PluginState::Ready as i32 {
                    startup.push(s.startup_ms as f64);
                    break;
                }
                if polled.elapsed() > Duration::from_secs(2) {
                    assert_eq!(
                        s.state,
                        PluginState::Ready as i32,
                        "{}: not ready: {s:?}",
                        t.plugin
                    );
                    never_set += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // A call right after the restart is answered by the new process.
            call(&mut Broker::admin_clone(&b), t.tool).await;
        }
        let startup = (!startup.is_empty()).then(|| summarize(startup));
        cold_rows.push((
            t.lang,
            startup,
            summarize(restart_wall),
            not_ready_in_answer,
            never_set,
        ));
    }

    // Stop the broker; every plugin process it started must be gone.
    let log = b.log();
    drop(b);
    all_pids.sort_unstable();
    all_pids.dedup();
    let left = wait_gone(&all_pids, Duration::from_secs(10));
    let broker_left = wait_gone(&[bpid], Duration::from_secs(5));

    // Report.
    println!("## 1. Sequential round-trip latency (1 call in flight, {calls} calls after {warmup} warm-up)\n");
    println!("Client wall time of Admin.CallTool over the Unix socket, in µs.\n");
    println!("| plugin | calls | mean | min | p50 | p90 | p99 | p99.9 | max | calls/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (lang, s, rate) in &latency_rows {
        println!(
            "| {lang} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
            s.n, s.mean, s.min, s.p50, s.p90, s.p99, s.p999, s.max, rate
        );
    }
    {
        let (s, _, rate, _) = &broker_only;
        println!(
            "| no plugin (broker rejects args `{BROKER_ONLY_ARGS}`) | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
            s.n, s.mean, s.min, s.p50, s.p90, s.p99, s.p999, s.max, rate
        );
    }
    println!("\nThe broker↔plugin hop beside the raw floor of its language, measured in this run, in µs: the broker's `elapsed_us` p50; a raw tonic host's `InvokeTool` round trip p50 to a minimal plugin of the same language (bench/raw.rs); and the same host as a raw relay, `Admin.CallTool` from this client relayed to the plugin the broker runs (same SDK and program; the relay's `elapsed_us`, and the client's wall time beside the broker's). Context switches per call: the broker process, the relay's host threads, the raw host's threads.\n");
    println!("| plugin | broker hop p50 | raw round trip p50 | broker / raw | raw relay hop p50 | broker / relay | client p50 broker / relay | switches per call broker / relay / raw trip |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (((lang, hop), raw), ((_, wall, _), switches)) in broker_rows
        .iter()
        .zip(&raw_rows)
        .zip(latency_rows.iter().zip(&switch_rows))
    {
        println!(
            "| {lang} | {:.1} | {:.1} | {:.2}× | {:.1} | {:.2}× | {:.1} / {:.1} | {:.2} / {:.2} / {:.2} |",
            hop.p50,
            raw.trips.p50,
            hop.p50 / raw.trips.p50,
            raw.relay_hop.p50,
            hop.p50 / raw.relay_hop.p50,
            wall.p50,
            raw.relay_wall.p50,
            switches,
            raw.relay_switches,
            raw.trip_switches,
        );
    }
    println!("\nBroker-side wall time of the same calls (`elapsed_us` of CallToolResponse: route, validate, plugin round trip), in µs.\n");
    println!("| plugin | mean | p50 | p90 | p99 | p99.9 | max | client p50 − broker p50 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for ((lang, s), (_, w, _)) in broker_rows.iter().zip(&latency_rows) {
        println!(
            "| {lang} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            s.mean,
            s.p50,
            s.p90,
            s.p99,
            s.p999,
            s.max,
            w.p50 - s.p50
        );
    }
    {
        let (w, s, _, _) = &broker_only;
        println!(
            "| no plugin (broker rejects args `{BROKER_ONLY_ARGS}`) | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            s.mean, s.p50, s.p90, s.p99, s.p999, s.max, w.p50 - s.p50
        );
    }
    println!(
        "\nCPU time per call during the sequential run (utime+stime from /proc, µs per call).\n"
    );
    println!("| plugin | broker | plugin process | bench client | raw relay host (section 1) |");
    println!("|---|---:|---:|---:|---:|");
    for ((lang, c), raw) in cpu_rows.iter().zip(&raw_rows) {
        println!(
            "| {lang} | {:.1} | {:.1} | {:.1} | {:.1} |",
            c.broker, c.plugin, c.client, raw.relay_seq_cpu
        );
    }
    let c = &broker_only.3;
    println!(
        "| no plugin (broker rejects args) | {:.1} | – | {:.1} | – |",
        c.broker, c.client
    );

    println!(
        "\n## 2. Throughput ({secs} s per run; N tasks sharing one admin HTTP/2 connection)\n"
    );
    println!("| plugin | in flight | calls | calls/s | p50 µs | p99 µs | max µs | broker CPU µs/call | plugin CPU µs/call | client CPU µs/call |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (lang, n, done, elapsed, s, c) in &tput_rows {
        println!(
            "| {lang} | {n} | {done} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            *done as f64 / elapsed.as_secs_f64(),
            s.p50,
            s.p99,
            s.max,
            c.broker,
            c.plugin,
            c.client
        );
    }

    println!("\nThe raw relay (section 1's floor) with {inflight} calls in flight, the same client: calls/s and the relay host's CPU per call (its threads only), beside the broker's row above.\n");
    println!("| plugin | relay calls/s | relay host CPU µs/call | broker calls/s | broker CPU µs/call | broker / relay CPU |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (t, raw) in targets.iter().zip(&raw_rows) {
        let Some((_, _, done, elapsed, _, c)) = tput_rows
            .iter()
            .find(|(lang, n, ..)| *lang == t.lang && *n == inflight)
        else {
            continue;
        };
        println!(
            "| {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.2}× |",
            t.lang,
            raw.relay_rate,
            raw.relay_cpu,
            *done as f64 / elapsed.as_secs_f64(),
            c.broker,
            c.broker / raw.relay_cpu
        );
    }

    println!("\n## 3. Cold start ({restarts} × Admin.RestartPlugin per plugin)\n");
    println!("`startup_ms` = spawn → registered of the new process (PluginStatus, read from ListPlugins once set); RestartPlugin wall = stop old + start new, seen by the client; \"answers not yet READY\" = RestartPlugin answers whose status still said startup_ms 0 / not READY; \"never set\" = restarts after which the plugin was READY but startup_ms stayed 0 for 2 s (not in the startup_ms figures).\n");
    println!("| plugin | startup_ms median | min | max | mean | RestartPlugin wall ms median | max | answers not yet READY | never set |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (lang, s, w, early, never) in &cold_rows {
        let startup = match s {
            Some(s) => format!("{:.0} | {:.0} | {:.0} | {:.1}", s.p50, s.min, s.max, s.mean),
            None => "– | – | – | –".into(),
        };
        println!(
            "| {lang} | {startup} | {:.1} | {:.1} | {early} of {restarts} | {never} of {restarts} |",
            w.p50, w.max
        );
    }

    println!("\n## 4. Memory (VmRSS)\n");
    println!("| process | idle (no plugins) | plugins ready | after the load above |");
    println!("|---|---:|---:|---:|");
    println!(
        "| broker | {} | {} | {} |",
        mib(idle_rss),
        mib(rss_ready),
        mib(rss_loaded)
    );
    for (i, t) in targets.iter().enumerate() {
        println!(
            "| {} plugin | – | {} | {} |",
            t.lang,
            mib(plugin_rss_ready[i]),
            mib(plugin_rss_loaded[i])
        );
    }

    println!();
    if left.is_empty() && broker_left.is_empty() {
        println!(
            "cleanup: broker and all {} plugin processes it started are gone.",
            all_pids.len()
        );
    } else {
        println!("cleanup: STILL RUNNING after stop: broker {broker_left:?}, plugins {left:?}");
        let warn = log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .count();
        println!("broker log had {warn} warning/error lines");
        std::process::exit(1);
    }
}
