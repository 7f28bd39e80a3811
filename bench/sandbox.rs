//! Sandbox benchmark: what Landlock costs a plugin. One real `hearth run` with the
//! stress plugins in Rust, Python and Node, each twice: sandboxed (the default) and
//! with `"sandbox": false` (the floor, same run, same machine). Measures cold start
//! (spawn → registered, over `HEARTH_BENCH_RESTARTS` restarts; the sandboxed spawn
//! includes building the ruleset; the interpreter was asked where it imports from at
//! the first start, before these, and the answer is cached) and sequential call
//! latency. Prints Markdown tables; see
//! BENCHMARKS.md.
//!
//! ```text
//! cargo build --release -p hearth-plugin --example stress
//! cargo bench -p hearth-broker --bench sandbox
//! ```
//!
//! Knobs: `HEARTH_BENCH_RESTARTS` (default 10), `HEARTH_BENCH_CALLS` sequential calls
//! per plugin (default 3000, after 300 warm-up).
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/harness.rs"]
mod harness;

use std::time::{Duration, Instant};

use common::{env_num, machine, summarize};
use harness::{stress, Broker};
use hearth_proto::v1::{CallToolRequest, PluginState, RestartPluginRequest};
use serde_json::json;

const LANGS: [(&str, &str); 3] = [("rs", "Rust"), ("py", "Python"), ("nd", "Node")];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    harness::quiet_brokers();
    let restarts = env_num("HEARTH_BENCH_RESTARTS", 10) as usize;
    let calls = env_num("HEARTH_BENCH_CALLS", 3000) as usize;
    if hearth_broker::supervisor::sandbox::landlock_abi().is_none() {
        println!("this kernel has no Landlock: nothing to compare");
        return;
    }
    let mut plugins = Vec::new();
    for (lang, _) in LANGS {
        plugins.push(stress(lang, &format!("{lang}on"), "", json!({})));
        plugins.push(stress(
            lang,
            &format!("{lang}off"),
            "",
            json!({"sandbox": false}),
        ));
    }
    let mut b = Broker::start(plugins).await;

    println!("# Sandbox cost\n\n{}\n", machine());
    println!("Cold start = `startup_ms` (spawn → registered, sandbox preparation included) over {restarts} restarts; latency = {calls} sequential `Admin.CallTool` echo calls after 300 warm-up, `elapsed_us` as the broker measured it.\n");
    println!("| plugin | sandbox | state | cold start ms p50 | min | max | call µs p50 | p99 |");
    println!("|---|---|---|---|---|---|---|---|");
    for (lang, label) in LANGS {
        for mode in ["on", "off"] {
            let name = format!("{lang}{mode}");
            let mut startup = Vec::new();
            for _ in 0..restarts {
                let req = b
                    .admin
                    .with_token(RestartPluginRequest { name: name.clone() });
                b.admin.client().restart_plugin(req).await.expect("restart");
                let polled = Instant::now();
                loop {
                    let s = b.plugin(&name).await;
                    if s.startup_ms > 0 && s.state == PluginState::Ready as i32 {
                        startup.push(s.startup_ms as f64);
                        break;
                    }
                    assert!(polled.elapsed() < Duration::from_secs(10), "{name}: {s:?}");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            let tool = format!("{name}_echo");
            let mut lat = Vec::new();
            for i in 0..calls + 300 {
                let req = b.admin.with_token(CallToolRequest {
                    name: tool.clone(),
                    args_json: r#"{"msg":"hello","n":42}"#.into(),
                    ..Default::default()
                });
                let r = b
                    .admin
                    .client()
                    .call_tool(req)
                    .await
                    .expect("call")
                    .into_inner();
                assert!(r.success, "{tool}: {}", r.error);
                if i >= 300 {
                    lat.push(r.elapsed_us as f64);
                }
            }
            let state = b.plugin(&name).await.sandbox;
            let s = summarize(startup);
            let l = summarize(lat);
            println!(
                "| {label} | {mode} | {state} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                s.p50, s.min, s.max, l.p50, l.p99
            );
        }
    }
}
