//! SDK benchmark: each SDK's tool-call round trip beside the raw floor of its language,
//! in one run. A raw host (`bench/raw.rs`: a minimal tonic `PluginHost` on a Unix
//! socket, no broker) sends `InvokeTool` and waits for the `ToolResult`, one call at a
//! time, to
//!
//! - the **raw plugin** of each language: the Attach stream with the generated stubs
//!   only (Python grpc.aio, Node grpc-js, Rust tonic, Go grpc-go — `bench/raw/`), which
//!   answers with the arguments as content;
//! - the **SDK stress plugin** of each language (`tests/plugins/STRESS.md`: Python
//!   `stress.py`, Node `stress.js`, Rust `examples/stress`, Go
//!   `tests/plugins/go/cmd/stress`), whose `P_echo` decodes the arguments into the
//!   language's values and encodes them back (HomeAgent mapping: content and data).
//!
//! What the SDK adds to a round trip is the difference; the ratio SDK p50 / raw p50 is
//! the figure the SDK goals name ("within 1.3× of the raw round trip"). Calls are
//! interleaved in batches of 10 between all eight plugins so machine drift hits every
//! row alike. Plugin CPU per call comes from `/proc/<pid>/stat`.
//!
//! Run (release; the Rust stress plugin must be built first; the Go plugins are built
//! by the bench with `go build`):
//!
//! ```text
//! cargo build --release -p hearth-plugin --example stress
//! cargo bench -p hearth-broker --bench sdks
//! ```
//!
//! Knobs (environment):
//! - `HEARTH_BENCH_CALLS` measured calls per plugin (default 5000)
//! - `HEARTH_BENCH_WARMUP` warm-up calls per plugin (default 500)
//! - `HEARTH_BENCH_ONLY` comma-separated subset of `Python,Node,Rust,Go` (default all)
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/harness.rs"]
mod harness;
#[path = "raw.rs"]
mod raw;

use common::{cpu_us, env_num, loadavg, machine, summarize, utc_now};
use harness::{go_binary, python, repo, rust_binary};
use raw::{Peer, RawPlugin};

/// Arguments of every call (a small JSON object, as in `bench/broker.rs`).
const ARGS: &str = r#"{"msg":"hello","n":42}"#;

const LANGS: [&str; 4] = ["Python", "Node", "Rust", "Go"];

/// The SDK stress plugin of `lang` as a raw-host peer.
fn sdk_peer(lang: &str) -> Peer<'static> {
    let (runtime, entry) = match lang {
        "Python" => ("python", repo().join("tests/plugins/stress.py")),
        "Node" => ("node", repo().join("tests/plugins/stress.js")),
        "Rust" => ("exec", rust_binary("examples/stress")),
        "Go" => ("exec", go_binary("stress")),
        other => panic!("unknown language {other}"),
    };
    Peer::Sdk {
        runtime,
        entry,
        env: vec![],
    }
}

struct Row {
    label: String,
    plugin: RawPlugin,
    samples: Vec<f64>,
    cpu_before: u64,
}

async fn run(calls: usize, warmup: usize, langs: &[&str]) {
    let mut rows = Vec::new();
    for lang in langs {
        let raw = RawPlugin::start(lang, &python(), &repo()).await;
        rows.push(Row {
            label: format!("{lang} raw"),
            plugin: raw,
            samples: Vec::with_capacity(calls),
            cpu_before: 0,
        });
        let sdk = RawPlugin::start_peer(sdk_peer(lang), &python(), &repo()).await;
        rows.push(Row {
            label: format!("{lang} SDK"),
            plugin: sdk,
            samples: Vec::with_capacity(calls),
            cpu_before: 0,
        });
    }
    let batch = 10;
    for _ in 0..warmup.div_ceil(batch) {
        for r in &rows {
            r.plugin.tool_trips(batch, ARGS).await;
        }
    }
    for r in &mut rows {
        r.cpu_before = cpu_us(r.plugin.pid());
    }
    let load_before = loadavg();
    let started = std::time::Instant::now();
    while rows[0].samples.len() < calls {
        for r in &mut rows {
            let t = r.plugin.tool_trips(batch, ARGS).await;
            r.samples.extend(t);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{calls} sequential `InvokeTool` round trips per plugin ({ARGS}), interleaved in batches of {batch} after {warmup} warm-up calls; {secs:.1} s; load {load_before} → {}\n",
        loadavg()
    );
    println!(
        "| plugin | p50 µs | p90 µs | p99 µs | mean µs | plugin CPU µs/call | SDK p50 / raw p50 |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut raw_p50 = 0.0;
    for r in rows {
        let n = r.samples.len();
        let cpu = cpu_us(r.plugin.pid()).saturating_sub(r.cpu_before) as f64 / n as f64;
        let s = summarize(r.samples);
        let ratio = if r.label.ends_with("raw") {
            raw_p50 = s.p50;
            "1 (floor)".to_string()
        } else {
            format!("**{:.2}×**", s.p50 / raw_p50)
        };
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {cpu:.0} | {ratio} |",
            r.label, s.p50, s.p90, s.p99, s.mean
        );
    }
}

fn main() {
    if std::env::var_os(raw::RAW_PLUGIN_ENV).is_some() {
        raw::raw_plugin_main();
        return;
    }
    let calls = env_num("HEARTH_BENCH_CALLS", 5000) as usize;
    let warmup = env_num("HEARTH_BENCH_WARMUP", 500) as usize;
    let only = std::env::var("HEARTH_BENCH_ONLY").unwrap_or_default();
    let langs: Vec<&str> = LANGS
        .into_iter()
        .filter(|l| only.is_empty() || only.split(',').any(|o| o.trim() == *l))
        .collect();
    println!("# SDK round trips beside their raw floors\n");
    println!("{} — {}\n", machine(), utc_now());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(calls, warmup, &langs));
}
