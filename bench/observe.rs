//! Observability benchmark: what metrics and tracing cost the broker's tool-call path.
//! One run, one machine, three legs per round, each a fresh `hearth run` with the Rust
//! and Python echo plugins:
//!
//! - **off**: no `--http-listen`, no `OTEL_*`: the floor;
//! - **metrics**: `--http-listen 127.0.0.1:0` (metrics recorded; scraped once per
//!   second during the run, as Prometheus would);
//! - **metrics + OTLP**: as metrics, plus `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at an
//!   in-process fake collector (OTLP/HTTP protobuf): every call makes an `execute_tool`
//!   span that is exported. The collector decodes the spans in this process, on the
//!   same 2 cores.
//!
//! Per leg: sequential latency (`elapsed_us` as the broker measured it, and client wall
//! time), throughput with `HEARTH_BENCH_INFLIGHT` calls in flight for
//! `HEARTH_BENCH_SECS`, and the broker's CPU per call during it. Rounds alternate the
//! legs (`HEARTH_BENCH_ROUNDS`, default 2) so drift hits all of them. Prints Markdown
//! tables; see BENCHMARKS.md.
//!
//! ```text
//! cargo build --release -p hearth-plugin --example stress
//! cargo bench -p hearth-broker --bench observe
//! ```
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../tests/integration/otlp.rs"]
mod otlp;

use std::time::{Duration, Instant};

use common::{cpu_us, env_num, machine, summarize};
use harness::{py_echo, stress, Broker};
use hearth_broker::cli::AdminConn;
use hearth_proto::v1::CallToolRequest;
use serde_json::json;

const ARGS: &str = r#"{"msg":"hello","n":42}"#;

#[derive(Clone, Copy, PartialEq)]
enum Leg {
    Off,
    Metrics,
    Otlp,
}

impl Leg {
    fn label(self) -> &'static str {
        match self {
            Leg::Off => "off",
            Leg::Metrics => "metrics",
            Leg::Otlp => "metrics + OTLP",
        }
    }
}

async fn call(admin: &mut AdminConn, tool: &str) -> (Duration, u64) {
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
    assert!(r.success, "{tool}: {r:?}");
    (started.elapsed(), r.elapsed_us)
}

struct Row {
    leg: Leg,
    round: usize,
    tool: &'static str,
    p50_inside: f64,
    p50_wall: f64,
    rate: f64,
    broker_cpu_us: f64,
    spans: usize,
}

async fn run_leg(leg: Leg, round: usize, calls: usize, secs: u64, inflight: usize) -> Vec<Row> {
    let collector = otlp::Collector::start().await;
    let endpoint = format!("http://{}", collector.http);
    let mut args: Vec<&str> = Vec::new();
    if leg != Leg::Off {
        args.extend(["--http-listen", "127.0.0.1:0"]);
    }
    let env: Vec<(&str, &str)> = match leg {
        Leg::Otlp => vec![("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
        _ => vec![],
    };
    let plugins = vec![stress("rs", "rs", "", json!({})), py_echo("py", json!({}))];
    let mut b = Broker::spawn_with_env(plugins, &args, &[], &env).await;
    b.wait_ready("rs").await;
    b.wait_ready("py").await;
    let metrics_addr = if leg == Leg::Off {
        None
    } else {
        let log = b
            .wait_log("HTTP listening on http://", Duration::from_secs(20))
            .await;
        let rest = &log[log.find("HTTP listening on http://").unwrap() + 25..];
        Some(
            rest.split(|c: char| c.is_whitespace())
                .next()
                .unwrap()
                .trim_end_matches(':')
                .to_string(),
        )
    };
    // A scraper, once a second, as Prometheus would.
    let scraper = metrics_addr.map(|addr| {
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let _ = client.get(format!("http://{addr}/metrics")).send().await;
            }
        })
    });
    let bpid = b.pid();
    let mut rows = Vec::new();
    for tool in ["rs_echo", "py_echo"] {
        let mut admin = Broker::admin_clone(&b);
        for _ in 0..calls / 10 {
            call(&mut admin, tool).await;
        }
        let mut wall = Vec::with_capacity(calls);
        let mut inside = Vec::with_capacity(calls);
        for _ in 0..calls {
            let (w, e) = call(&mut admin, tool).await;
            wall.push(w.as_secs_f64() * 1e6);
            inside.push(e as f64);
        }
        let spans_before = collector.spans().len();
        let cpu_before = cpu_us(bpid);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for _ in 0..inflight {
            let mut admin = Broker::admin_clone(&b);
            tasks.push(tokio::spawn(async move {
                let mut n = 0usize;
                while Instant::now() < deadline {
                    call(&mut admin, tool).await;
                    n += 1;
                }
                n
            }));
        }
        let mut n = 0;
        for t in tasks {
            n += t.await.unwrap();
        }
        let elapsed = started.elapsed();
        let cpu = cpu_us(bpid).saturating_sub(cpu_before);
        rows.push(Row {
            leg,
            round,
            tool,
            p50_inside: summarize(inside).p50,
            p50_wall: summarize(wall).p50,
            rate: n as f64 / elapsed.as_secs_f64(),
            broker_cpu_us: cpu as f64 / n as f64,
            spans: collector.spans().len() - spans_before,
        });
    }
    if let Some(s) = scraper {
        s.abort();
    }
    drop(b);
    rows
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    harness::quiet_brokers();
    let calls = env_num("HEARTH_BENCH_CALLS", 3000) as usize;
    let secs = env_num("HEARTH_BENCH_SECS", 3);
    let inflight = env_num("HEARTH_BENCH_INFLIGHT", 16) as usize;
    let rounds = env_num("HEARTH_BENCH_ROUNDS", 2) as usize;
    let hearth = env!("CARGO_BIN_EXE_hearth");
    let stress_bin = std::path::Path::new(hearth)
        .parent()
        .unwrap()
        .join("examples/stress");
    if !stress_bin.exists() {
        eprintln!(
            "error: {} is missing; build it first:\n  cargo build --release -p hearth-plugin --example stress",
            stress_bin.display()
        );
        std::process::exit(2);
    }
    println!("# Observability overhead\n\n{}\n", machine());
    println!(
        "calls={calls} sequential (after {} warm-up), throughput {secs} s with {inflight} in flight, {rounds} rounds; legs alternate.\n",
        calls / 10
    );
    let mut rows = Vec::new();
    for round in 1..=rounds {
        for leg in [Leg::Off, Leg::Metrics, Leg::Otlp] {
            rows.extend(run_leg(leg, round, calls, secs, inflight).await);
        }
    }
    println!("| round | leg | tool | p50 `elapsed_us` | p50 wall µs | calls/s ({inflight} in flight) | broker CPU µs/call | spans exported during throughput |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {} |",
            r.round,
            r.leg.label(),
            r.tool,
            r.p50_inside,
            r.p50_wall,
            r.rate,
            r.broker_cpu_us,
            r.spans
        );
    }
    println!("\nMean over rounds, relative to `off` (throughput: higher is better; goal: metrics ≥ 0.97×, OTLP ≥ 0.90×):\n");
    println!("| leg | tool | calls/s | × off | p50 `elapsed_us` | broker CPU µs/call |");
    println!("|---|---|---|---|---|---|");
    for tool in ["rs_echo", "py_echo"] {
        let mean = |leg: Leg, f: &dyn Fn(&Row) -> f64| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| r.leg == leg && r.tool == tool)
                .map(f)
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        let base = mean(Leg::Off, &|r| r.rate);
        for leg in [Leg::Off, Leg::Metrics, Leg::Otlp] {
            let rate = mean(leg, &|r| r.rate);
            println!(
                "| {} | {tool} | {rate:.0} | {:.3} | {:.0} | {:.1} |",
                leg.label(),
                rate / base,
                mean(leg, &|r| r.p50_inside),
                mean(leg, &|r| r.broker_cpu_us),
            );
        }
    }
}
