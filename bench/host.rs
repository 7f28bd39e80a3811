//! Host-services benchmark: what a plugin pays for `settings.get/set` and
//! `memory.recall/commit` through the broker, and what the stores behind them cost at
//! 10k–100k items. Prints Markdown tables; see BENCHMARKS.md ("Host services").
//!
//! 1. **From a Python plugin.** A real `hearth run` (the integration-test harness) with
//!    `tests/plugins/host_bench.py`. The bench calls its tool `host_bench_run` (a plain
//!    handler; host calls block its thread) or `host_bench_run_async` (an async handler;
//!    host calls are awaited) with {op, n}; the plugin makes `n` sequential calls of the
//!    generic client (`sdk.host.settings.get(key=…)` …) and times each with
//!    `time.perf_counter_ns`, so the figures are what a plugin author sees. Recall runs
//!    at depth 2 over a graph the plugin committed first. CPU per call of the broker and
//!    of the plugin process from /proc. The same calls on `hearth_broker::storage` in the bench
//!    process follow each op: the baseline that gives the cost of the gRPC hop and the
//!    SDK.
//! 2. **Storage, in process.** `hearth_broker::storage` on a temp data dir under /tmp (same
//!    disk as the broker's; every write is a transaction fsynced before it returns),
//!    no gRPC: graph recall at depth 1 and 2 over graphs of 10k and 100k relations
//!    (built with `commit` in batches), DocMemory insert and query over 10k documents (English, Chinese and
//!    mixed text from a word list), Knowledge add, bulk indexing and search over 10k
//!    entry files.
//!
//! All data is generated from fixed seeds (see [`Words`], [`graph_triples`]).
//!
//! Run (release):
//!
//! ```text
//! cargo bench -p hearth-broker --bench host
//! ```
//!
//! Knobs (environment):
//! - `HEARTH_BENCH_CALLS` timed calls per op in the plugin (default 2000)
//! - `HEARTH_BENCH_WARMUP` warm-up calls per op in the plugin (default 100)
//! - `HEARTH_BENCH_SEED_RELATIONS` graph the plugin commits before recall (default 1000)
//! - `HEARTH_BENCH_GRAPHS` comma-separated graph sizes in relations (default 10000,100000)
//! - `HEARTH_BENCH_BATCH` triples per commit when building them (default 1000)
//! - `HEARTH_BENCH_RECALLS` timed recalls per graph and depth (default 1000)
//! - `HEARTH_BENCH_DOCS` documents in DocMemory (default 10000)
//! - `HEARTH_BENCH_ENTRIES` knowledge entries (default 10000)
//! - `HEARTH_BENCH_ADDS` of those, added through `Knowledge::add` (default 300; the rest
//!   are files written into the folder and indexed by the next search)
//! - `HEARTH_BENCH_QUERIES` timed queries per query set (default 500)
//! - `HEARTH_BENCH_ONLY` comma-separated subset of `plugin,graph,docs,knowledge`
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/harness.rs"]
mod harness;

use common::{cpu_us, env_num, loadavg, machine, summarize, utc_now, SplitMix, Summary};

use std::path::Path;
use std::time::{Duration, Instant};

use harness::{repo, wait_gone, Broker, PluginDir};
use hearth_broker::storage::{Db, Doc, DocMemory, GraphMemory, Knowledge, Settings, Triple};
use serde_json::{json, Value};

fn main() {
    harness::quiet_brokers();
    // `cargo bench` passes `--bench` (and maybe a filter); nothing to parse.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}

/// Knobs read once.
struct Knobs {
    calls: u64,
    warmup: u64,
    seed_relations: u64,
    graphs: Vec<usize>,
    batch: usize,
    recalls: usize,
    docs: usize,
    entries: usize,
    adds: usize,
    queries: usize,
    only: Vec<String>,
}

impl Knobs {
    fn read() -> Knobs {
        let graphs = std::env::var("HEARTH_BENCH_GRAPHS")
            .unwrap_or_else(|_| "10000,100000".into())
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("HEARTH_BENCH_GRAPHS: {s:?} is not a number"))
            })
            .collect();
        let only = std::env::var("HEARTH_BENCH_ONLY")
            .unwrap_or_else(|_| "plugin,graph,docs,knowledge".into())
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        let entries = env_num("HEARTH_BENCH_ENTRIES", 10_000) as usize;
        Knobs {
            calls: env_num("HEARTH_BENCH_CALLS", 2_000),
            warmup: env_num("HEARTH_BENCH_WARMUP", 100),
            seed_relations: env_num("HEARTH_BENCH_SEED_RELATIONS", 1_000),
            graphs,
            batch: env_num("HEARTH_BENCH_BATCH", 1_000).max(1) as usize,
            recalls: env_num("HEARTH_BENCH_RECALLS", 1_000).max(1) as usize,
            docs: env_num("HEARTH_BENCH_DOCS", 10_000) as usize,
            entries,
            adds: (env_num("HEARTH_BENCH_ADDS", 300) as usize).min(entries),
            queries: env_num("HEARTH_BENCH_QUERIES", 500).max(1) as usize,
            only,
        }
    }

    fn runs(&self, part: &str) -> bool {
        self.only.iter().any(|o| o == part)
    }
}

async fn run() {
    let k = Knobs::read();
    println!("# Hearth host-services benchmark\n");
    println!("{}", machine());
    println!("date: {}", utc_now());
    println!("broker: {}", env!("CARGO_BIN_EXE_hearth"));
    println!(
        "calls={} warmup={} seed_relations={} graphs={:?} batch={} recalls={} docs={} entries={} (adds={}) queries={}\n",
        k.calls, k.warmup, k.seed_relations, k.graphs, k.batch, k.recalls, k.docs, k.entries,
        k.adds, k.queries
    );

    let root = tempfile::Builder::new()
        .prefix("hearth-bench-host")
        .tempdir_in("/tmp")
        .expect("temp dir");
    if k.runs("plugin") {
        plugin_part(&k, &root.path().join("in-process")).await;
    }
    println!(
        "## 2. Storage in process (hearth_broker::storage on a temp dir under /tmp, no gRPC)\n"
    );
    if k.runs("graph") {
        graph_part(&k, root.path()).await;
    }
    if k.runs("docs") {
        docs_part(&k, &root.path().join("docs")).await;
    }
    if k.runs("knowledge") {
        knowledge_part(&k, &root.path().join("knowledge")).await;
    }
    println!("\nloadavg at the end: {}", loadavg());
}

// ------------------------------------------------------------------ 1. from a plugin

/// One row of part 1: op, handler kind (or in process), latencies and CPU per call.
struct PluginRow {
    op: &'static str,
    mode: &'static str,
    s: Summary,
    cpu: Option<(f64, f64)>,
    sizes: Option<f64>,
}

const PLUGIN_OPS: [(&str, &str); 4] = [
    ("settings_get", "settings.get"),
    ("settings_set", "settings.set"),
    ("memory_recall", "memory.recall depth 2"),
    ("memory_commit", "memory.commit 1 triple"),
];

async fn tool(b: &mut Broker, tool: &str, args: Value) -> Value {
    let r = b
        .call_timeout(tool, args.clone(), 1_800_000)
        .await
        .unwrap_or_else(|e| panic!("{tool} {args}: {e}"));
    assert!(r.success, "{tool} {args}: {}", r.error);
    let text = if r.data_json.is_empty() {
        &r.content
    } else {
        &r.data_json
    };
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{tool}: {e}: {text}"))
}

/// The stores the host services call, opened in this process: the baseline of part 1.
struct InProcess {
    settings: hearth_broker::storage::PluginSettings,
    memory: GraphMemory,
    entities: usize,
    commits: usize,
}

impl InProcess {
    /// Settings of plugin `host_bench` and a graph shaped like the plugin's seed graph,
    /// committed in batches of 100 as the plugin does.
    async fn open(dir: &Path, relations: usize) -> InProcess {
        let db = Db::open(dir).await.expect("open db");
        let settings = Settings::new(db.clone()).for_plugin("host_bench");
        let memory = GraphMemory::new(db);
        for chunk in graph_triples(relations, 1).chunks(100) {
            memory.commit(chunk.to_vec()).await.expect("commit");
        }
        InProcess {
            settings,
            memory,
            entities: (relations / 4).max(1),
            commits: 0,
        }
    }

    /// One call of `op`; returns the relations a recall returned.
    async fn call(&mut self, op: &str, i: usize, rng: &mut SplitMix) -> Option<usize> {
        match op {
            "settings_get" => {
                self.settings.get(KEY).await.unwrap();
            }
            "settings_set" => self.settings.set(KEY, json!(i)).await.unwrap(),
            "memory_recall" => {
                let kw = entity(rng.below(self.entities));
                return Some(self.memory.recall([kw], 2).await.unwrap().relations.len());
            }
            "memory_commit" => {
                self.commits += 1;
                let c = self.commits;
                let t = Triple::new(format!("commit s{c}"), "wrote", format!("commit o{c}"));
                self.memory.commit(vec![t]).await.unwrap();
            }
            other => panic!("unknown op {other}"),
        }
        None
    }

    async fn measure(&mut self, op: &'static str, calls: usize, warmup: usize) -> PluginRow {
        self.settings.set(KEY, json!(0)).await.unwrap();
        let mut rng = SplitMix(7);
        for i in 0..warmup {
            self.call(op, i, &mut rng).await;
        }
        let mut us = Vec::with_capacity(calls);
        let mut sizes = Vec::new();
        for i in 0..calls {
            let t = Instant::now();
            let size = self.call(op, i, &mut rng).await;
            us.push(us_since(t));
            sizes.extend(size.map(|s| s as f64));
        }
        PluginRow {
            op,
            mode: "in process",
            s: summarize(us),
            cpu: None,
            sizes: (!sizes.is_empty()).then(|| sizes.iter().sum::<f64>() / sizes.len() as f64),
        }
    }
}

/// The settings key every settings op reads or writes.
const KEY: &str = "bench_key";

async fn plugin_part(k: &Knobs, in_process_dir: &Path) {
    let plugin = PluginDir {
        dir: "host_bench".into(),
        manifest: json!({"name": "host_bench", "runtime": "python",
            "entry": repo().join("tests/plugins/host_bench.py")}),
    };
    let mut b = Broker::start(vec![plugin]).await;
    let bpid = b.pid();
    let ppid = b.plugin("host_bench").await.pid;
    let mut local = InProcess::open(in_process_dir, k.seed_relations as usize).await;
    let load_start = loadavg();

    let seed = tool(
        &mut b,
        "host_bench_run",
        json!({"op": "seed", "n": k.seed_relations}),
    )
    .await;

    // Interleaved: for each op the plain handler, the async handler, then the same calls
    // in process, so load (and fsync speed) that comes and goes hits all three alike.
    let mut rows = Vec::new();
    for (op, _) in PLUGIN_OPS {
        for (mode, name) in [
            ("plain", "host_bench_run"),
            ("async", "host_bench_run_async"),
        ] {
            let before = (cpu_us(bpid), cpu_us(ppid));
            let r = tool(
                &mut b,
                name,
                json!({"op": op, "n": k.calls, "warmup": k.warmup}),
            )
            .await;
            let after = (cpu_us(bpid), cpu_us(ppid));
            let us: Vec<f64> = r["us"]
                .as_array()
                .expect("us")
                .iter()
                .map(|v| v.as_f64().expect("µs"))
                .collect();
            // CPU over warm-up and timed calls (and the one settings.set each op starts with).
            let calls = (k.calls + k.warmup + 1) as f64;
            rows.push(PluginRow {
                op,
                mode,
                s: summarize(us),
                cpu: Some((
                    after.0.saturating_sub(before.0) as f64 / calls,
                    after.1.saturating_sub(before.1) as f64 / calls,
                )),
                sizes: r["sizes"].as_f64(),
            });
        }
        rows.push(local.measure(op, k.calls as usize, k.warmup as usize).await);
    }
    let load_end = loadavg();
    let mut pids = vec![bpid, ppid];
    pids.retain(|p| *p != 0);
    drop(b);
    let left = wait_gone(&pids, Duration::from_secs(10));

    println!(
        "## 1. From a Python plugin (generic client, n sequential calls timed in the plugin)\n"
    );
    println!(
        "Graph for recall: {} relations committed by the plugin in batches of 100 in {:.0} ms \
         ({} new). `plain` = a def handler (host calls block its pool thread), `async` = an \
         async def handler (host calls awaited on the plugin's loop), `in process` = the same \
         calls on hearth_broker::storage in the bench process (own data dir, same disk, a graph of the \
         same shape), right after the plugin's. CPU per call includes the warm-up calls. \
         loadavg {load_start} → {load_end}.\n",
        seed["relations"],
        seed["ms"].as_f64().unwrap_or(0.0),
        seed["committed"]
    );
    println!("| call | handler | n | mean µs | p50 µs | p90 µs | p99 µs | max µs | p50 − in-process p50 | broker CPU µs/call | plugin CPU µs/call | relations returned (mean) |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let label = PLUGIN_OPS.iter().find(|(o, _)| *o == r.op).unwrap().1;
        let base = rows
            .iter()
            .find(|b| b.op == r.op && b.mode == "in process")
            .map(|b| b.s.p50);
        let diff = match (r.cpu, base) {
            (Some(_), Some(b)) => format!("{:.0}", r.s.p50 - b),
            _ => "–".into(),
        };
        let (bcpu, pcpu) = r.cpu.map_or(("–".into(), "–".into()), |(b, p)| {
            (format!("{b:.0}"), format!("{p:.0}"))
        });
        println!(
            "| {label} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {diff} | {bcpu} | {pcpu} | {} |",
            r.mode,
            r.s.n,
            r.s.mean,
            r.s.p50,
            r.s.p90,
            r.s.p99,
            r.s.max,
            r.sizes.map_or("–".into(), |s| format!("{s:.1}"))
        );
    }
    if left.is_empty() {
        println!("\ncleanup: broker and plugin process gone.\n");
    } else {
        println!("\ncleanup: STILL RUNNING after stop: {left:?}\n");
        std::process::exit(1);
    }
}

// ------------------------------------------------------------------ 2. storage

fn us_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn row(label: &str, s: &Summary, extra: &str) {
    println!(
        "| {label} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |{extra}",
        s.n, s.mean, s.p50, s.p90, s.p99, s.max
    );
}

const RELATION_TYPES: [&str; 12] = [
    "knows",
    "likes",
    "works_at",
    "lives_in",
    "visited",
    "owns",
    "mentioned",
    "part_of",
    "related_to",
    "prefers",
    "dislikes",
    "uses",
];

/// Syllables of entity names.
const SYLLABLES: [&str; 16] = [
    "ka", "lo", "mi", "ne", "ta", "ru", "shi", "po", "an", "el", "or", "us", "ven", "dar", "li",
    "mo",
];

/// Entity `i`'s name: two words of three syllables, e.g. "Kalomi Nedarus", from a
/// bijection of `i` (distinct for the first 2^24 ids), so names share few trigrams.
/// `tests/plugins/host_bench.py` computes the same names.
fn entity(i: usize) -> String {
    let mut j = (i as u64)
        .wrapping_mul(0x9E37_79B1)
        .wrapping_add(0x5BD1_E995)
        & 0xFF_FFFF;
    let mut words = Vec::with_capacity(2);
    for _ in 0..2 {
        let mut w = String::new();
        for _ in 0..3 {
            w.push_str(SYLLABLES[(j & 15) as usize]);
            j >>= 4;
        }
        words.push(w[..1].to_uppercase() + &w[1..]);
    }
    words.join(" ")
}

/// `n` relations over `n / 4` entities (names from [`entity`]): subject uniform, object
/// uniform 70% of the time and `entities × u³` 30% of the time (a few hubs, as a
/// user's memory has: the user, home, work). Same shape as the plugin's seed graph.
fn graph_triples(n: usize, seed: u64) -> Vec<Triple> {
    let mut rng = SplitMix(seed);
    let entities = (n / 4).max(1);
    (0..n)
        .map(|_| {
            let s = rng.below(entities);
            let o = if rng.unit() < 0.7 {
                rng.below(entities)
            } else {
                (entities as f64 * rng.unit().powi(3)) as usize
            };
            Triple::new(
                entity(s),
                RELATION_TYPES[rng.below(RELATION_TYPES.len())],
                entity(o),
            )
        })
        .collect()
}

async fn graph_part(k: &Knobs, root: &Path) {
    println!("### Graph memory: recall of one keyword (one entity name) at depth 1 and 2\n");
    println!(
        "Graphs of N relations over N/4 entities (two-word names such as `Kalomi Nedarus`), 12 relation types; subject \
         uniform, object uniform 70% / skewed to a few hubs 30%. Built with `commit` in batches \
         of {}. Keyword: a random entity's full name (one match, via the trigram index), a \
         different one per call; `hub` = entity 0, the most connected. {} timed recalls per \
         row after 50 warm-up ({} for hub rows).\n",
        k.batch,
        k.recalls,
        (k.recalls / 10).max(10)
    );
    let mut builds = Vec::new();
    let mut rows = Vec::new();
    let mut optimize_ms = Vec::new();
    for &size in &k.graphs {
        let db = Db::open(&root.join(format!("graph-{size}")))
            .await
            .expect("open db");
        let memory = GraphMemory::new(db);
        let triples = graph_triples(size, 1);
        let mut batch_ms = Vec::new();
        let started = Instant::now();
        let mut added = 0;
        for chunk in triples.chunks(k.batch) {
            let t = Instant::now();
            added += memory.commit(chunk.to_vec()).await.expect("commit");
            batch_ms.push(us_since(t) / 1e3);
        }
        let build = started.elapsed();
        let stats = memory.introspect().await.expect("introspect");
        let hub_degree = stats.top_entities.first().map_or(0, |e| e.mention_count);
        builds.push((
            size,
            stats.entities,
            added,
            build,
            summarize(batch_ms),
            hub_degree,
            file_mib(&root.join(format!("graph-{size}/hearth.db"))),
        ));
        let entities = (size / 4).max(1);
        for depth in [1u32, 2] {
            for hub in [false, true] {
                let n = if hub {
                    (k.recalls / 10).max(10)
                } else {
                    k.recalls
                };
                let (s, sz) = recalls(&memory, entities, depth, hub, n).await;
                let label = if hub { "hub" } else { "random entity" };
                rows.push((size, depth, label, s, sz));
            }
        }
        // The store's entity index is an FTS5 trigram table fed one row at a time by a
        // trigger, so it is in many segments; merged into one, how fast is recall?
        let conn = rusqlite::Connection::open(root.join(format!("graph-{size}/hearth.db")))
            .expect("second connection");
        let t = Instant::now();
        conn.execute_batch("INSERT INTO entities_fts (entities_fts) VALUES ('optimize')")
            .expect("optimize");
        optimize_ms.push((size, us_since(t) / 1e3));
        drop(conn);
        for depth in [1u32, 2] {
            let (s, sz) = recalls(&memory, entities, depth, false, k.recalls).await;
            rows.push((size, depth, "random entity, after FTS `optimize`", s, sz));
        }
        println!("(graph {size} measured; loadavg {})", loadavg());
    }
    println!("\n| relations | entities | added | build s | relations/s | batch commit p50 ms | p99 ms | hub mentions | hearth.db MiB |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (size, entities, added, build, b, hub, mib) in &builds {
        println!(
            "| {size} | {entities} | {added} | {:.1} | {:.0} | {:.1} | {:.1} | {hub} | {mib:.1} |",
            build.as_secs_f64(),
            *size as f64 / build.as_secs_f64(),
            b.p50,
            b.p99
        );
    }
    println!("\n| relations | keyword | depth | n | mean µs | p50 µs | p90 µs | p99 µs | max µs | relations returned p50 / mean / max |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (size, depth, label, s, sz) in &rows {
        println!(
            "| {size} | {label} | {depth} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} / {:.1} / {:.0} |",
            s.n,
            s.mean,
            s.p50,
            s.p90,
            s.p99,
            s.max,
            sz.p50,
            sz.mean,
            sz.max
        );
    }
    for (size, ms) in &optimize_ms {
        println!("\nFTS `optimize` of the entity index at {size} relations (second connection, not something the store does): {ms:.0} ms.");
    }
    println!();
}

/// `n` recalls at `depth` of a random entity's name (or of the hub's, entity 0), after
/// 50 warm-up; latencies and relations returned.
async fn recalls(
    memory: &GraphMemory,
    entities: usize,
    depth: u32,
    hub: bool,
    n: usize,
) -> (Summary, Summary) {
    let mut rng = SplitMix(7 + depth as u64);
    let mut pick = || {
        if hub {
            entity(0)
        } else {
            entity(rng.below(entities))
        }
    };
    for _ in 0..50 {
        memory.recall([pick()], depth).await.unwrap();
    }
    let mut us = Vec::with_capacity(n);
    let mut sizes = Vec::with_capacity(n);
    for _ in 0..n {
        let kw = pick();
        let t = Instant::now();
        let g = memory.recall([kw], depth).await.unwrap();
        us.push(us_since(t));
        sizes.push(g.relations.len() as f64);
    }
    (summarize(us), summarize(sizes))
}

fn file_mib(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / (1024.0 * 1024.0))
}

// ------------------------------------------------------------------ text

/// English function words, most frequent first (they lead the Zipf ranking).
const EN_FUNCTION: &[&str] = &[
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "on", "with", "as", "was",
    "at", "by", "be", "this", "from", "or",
];

const EN_CONTENT: &[&str] = &[
    "home",
    "kitchen",
    "light",
    "music",
    "coffee",
    "weather",
    "morning",
    "evening",
    "meeting",
    "project",
    "report",
    "email",
    "message",
    "calendar",
    "reminder",
    "alarm",
    "garden",
    "window",
    "door",
    "heater",
    "temperature",
    "rain",
    "sunny",
    "cloudy",
    "wind",
    "city",
    "train",
    "airport",
    "flight",
    "hotel",
    "restaurant",
    "dinner",
    "lunch",
    "breakfast",
    "recipe",
    "grocery",
    "market",
    "price",
    "budget",
    "bank",
    "account",
    "password",
    "phone",
    "laptop",
    "screen",
    "keyboard",
    "printer",
    "network",
    "router",
    "server",
    "database",
    "backup",
    "update",
    "install",
    "version",
    "plugin",
    "agent",
    "memory",
    "search",
    "document",
    "note",
    "book",
    "novel",
    "story",
    "history",
    "science",
    "physics",
    "chemistry",
    "biology",
    "doctor",
    "hospital",
    "medicine",
    "fever",
    "cough",
    "sleep",
    "exercise",
    "running",
    "walking",
    "swimming",
    "football",
    "basketball",
    "tennis",
    "game",
    "movie",
    "series",
    "episode",
    "song",
    "album",
    "concert",
    "guitar",
    "piano",
    "teacher",
    "student",
    "school",
    "exam",
    "homework",
    "lesson",
    "language",
    "english",
    "chinese",
    "french",
    "travel",
    "holiday",
    "weekend",
    "birthday",
    "gift",
    "party",
    "friend",
    "family",
    "mother",
    "father",
    "sister",
    "brother",
    "child",
    "baby",
    "dog",
    "cat",
    "bird",
    "fish",
    "tree",
    "flower",
    "river",
    "mountain",
    "beach",
    "ocean",
    "island",
    "bridge",
    "road",
    "street",
    "car",
    "bicycle",
    "bus",
    "ticket",
    "station",
    "office",
    "company",
    "manager",
    "colleague",
    "customer",
    "order",
    "delivery",
    "package",
    "address",
    "neighbor",
    "apartment",
    "rent",
    "furniture",
    "sofa",
    "table",
    "chair",
    "bed",
    "pillow",
    "blanket",
    "shower",
    "towel",
    "soap",
    "laundry",
    "cleaning",
    "vacuum",
    "robot",
    "sensor",
    "camera",
    "speaker",
    "volume",
    "battery",
    "charger",
    "cable",
    "storage",
    "photo",
    "video",
    "picture",
    "painting",
    "museum",
    "gallery",
    "theater",
    "ballet",
    "opera",
    "festival",
    "winter",
    "spring",
    "summer",
    "autumn",
    "snow",
    "ice",
    "fire",
    "water",
    "energy",
    "solar",
    "electric",
    "bill",
    "invoice",
    "tax",
    "salary",
    "vacation",
    "schedule",
    "deadline",
    "plan",
    "idea",
    "question",
    "answer",
    "problem",
    "solution",
    "reason",
    "result",
    "change",
    "choice",
    "habit",
    "health",
    "diet",
    "fruit",
    "apple",
    "banana",
    "orange",
    "tea",
    "milk",
    "bread",
    "cheese",
    "rice",
    "noodles",
    "soup",
    "salad",
    "chicken",
    "beef",
    "vegetable",
    "tomato",
    "potato",
    "sugar",
    "salt",
    "pepper",
    "quiet",
    "loud",
    "bright",
    "dark",
    "warm",
    "cold",
    "early",
    "late",
    "quick",
    "slow",
    "happy",
    "tired",
    "busy",
    "free",
    "remember",
    "forget",
    "prefer",
    "enjoy",
    "visit",
    "cook",
    "read",
    "write",
    "listen",
    "watch",
    "open",
    "close",
    "start",
    "finish",
    "check",
];

/// Chinese function characters (single-character words), most frequent first.
const ZH_FUNCTION: &[&str] = &["的", "了", "是", "在", "和", "我", "也", "就", "都", "很"];

const ZH_CONTENT: &[&str] = &[
    "天气", "北京", "上海", "咖啡", "音乐", "电影", "朋友", "工作", "公司", "会议", "明天", "今天",
    "周末", "旅行", "医院", "学校", "孩子", "妈妈", "爸爸", "晚饭", "早餐", "超市", "手机", "电脑",
    "程序", "代码", "数据", "服务", "系统", "网络", "问题", "时间", "地方", "城市", "公园", "下雨",
    "温度", "空调", "灯光", "窗户", "厨房", "客厅", "卧室", "洗衣", "冰箱", "电视", "新闻", "体育",
    "足球", "篮球", "跑步", "健身", "睡觉", "休息", "学习", "考试", "老师", "学生", "图书", "小说",
    "历史", "文化", "艺术", "照片", "相机", "汽车", "地铁", "火车", "飞机", "机场", "酒店", "餐厅",
    "米饭", "面条", "水果", "苹果", "香蕉", "牛奶", "茶叶", "生日", "礼物", "节日", "春节", "中秋",
    "假期", "计划", "日程", "提醒", "闹钟", "邮件", "消息", "电话", "视频", "游戏", "宠物", "小猫",
    "小狗", "花园", "植物", "阳台", "银行", "价格", "购物", "快递", "包裹", "地址", "邻居", "同事",
    "老板", "项目", "报告", "文件", "打印", "密码", "账号", "设置", "记忆", "知识", "文档", "搜索",
    "答案", "建议", "喜欢", "讨厌", "需要", "希望", "记得", "忘记", "准备", "开始", "结束", "安排",
    "检查", "打开", "关闭", "调整", "健康", "感冒", "药品", "医生", "咳嗽", "发烧", "血压", "体重",
    "饮食", "运动", "音量", "歌曲", "歌手", "钢琴", "吉他",
];

/// A word list with Zipf (s = 1) frequencies: function words first, then content words.
struct Words {
    words: Vec<&'static str>,
    cdf: Vec<f64>,
    /// Index of the first content word.
    content: usize,
}

impl Words {
    fn new(function: &[&'static str], content: &[&'static str]) -> Words {
        let words: Vec<&'static str> = function.iter().chain(content).copied().collect();
        let mut total = 0.0;
        let mut cdf = Vec::with_capacity(words.len());
        for rank in 0..words.len() {
            total += 1.0 / (rank + 1) as f64;
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Words {
            words,
            cdf,
            content: function.len(),
        }
    }

    /// A word drawn by frequency.
    fn zipf(&self, rng: &mut SplitMix) -> &'static str {
        let u = rng.unit();
        let i = self.cdf.partition_point(|c| *c < u);
        self.words[i.min(self.words.len() - 1)]
    }

    /// A content word from the rarer half, uniformly.
    fn rare(&self, rng: &mut SplitMix) -> &'static str {
        let from = self.content + (self.words.len() - self.content) / 2;
        self.words[from + rng.below(self.words.len() - from)]
    }

    /// A content word, uniformly.
    fn content(&self, rng: &mut SplitMix) -> &'static str {
        self.words[self.content + rng.below(self.words.len() - self.content)]
    }
}

struct Text {
    en: Words,
    zh: Words,
}

impl Text {
    fn new() -> Text {
        Text {
            en: Words::new(EN_FUNCTION, EN_CONTENT),
            zh: Words::new(ZH_FUNCTION, ZH_CONTENT),
        }
    }

    fn sentence_en(&self, rng: &mut SplitMix, out: &mut String) {
        let n = 6 + rng.below(9);
        for i in 0..n {
            let w = self.en.zipf(rng);
            if i == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    out.extend(f.to_uppercase());
                    out.push_str(c.as_str());
                }
            } else {
                out.push(' ');
                out.push_str(w);
            }
        }
        out.push_str(". ");
    }

    fn sentence_zh(&self, rng: &mut SplitMix, out: &mut String) {
        let n = 4 + rng.below(7);
        for i in 0..n {
            out.push_str(self.zh.zipf(rng));
            if i + 1 < n && rng.below(5) == 0 {
                out.push('，');
            }
        }
        out.push('。');
    }

    /// Document `i`: 50% English (250–600 characters), 30% Chinese (120–300
    /// characters), 20% mixed sentences (250–500 characters); a short title.
    fn doc(&self, i: usize, rng: &mut SplitMix) -> (String, String) {
        let kind = i % 10;
        let (target, title) = match kind {
            0..=4 => (
                250 + rng.below(351),
                (0..3 + rng.below(4))
                    .map(|_| self.en.content(rng))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            5..=7 => (
                120 + rng.below(181),
                (0..2 + rng.below(3))
                    .map(|_| self.zh.content(rng))
                    .collect(),
            ),
            _ => (
                250 + rng.below(251),
                format!("{} {}", self.en.content(rng), self.zh.content(rng)),
            ),
        };
        let mut content = String::new();
        let mut turn = 0;
        while content.chars().count() < target {
            match kind {
                0..=4 => self.sentence_en(rng, &mut content),
                5..=7 => self.sentence_zh(rng, &mut content),
                _ => {
                    if turn % 2 == 0 {
                        self.sentence_en(rng, &mut content)
                    } else {
                        self.sentence_zh(rng, &mut content)
                    }
                }
            }
            turn += 1;
        }
        (title, content.trim_end().to_string())
    }

    /// A query of `set`: `en` 5–9 words by frequency (as a user's message: function
    /// words included), `zh` 3–6 words by frequency, `mixed` 3 English + 2 Chinese,
    /// `rare` 2–3 content words from the rarer half (English or Chinese). A set name
    /// ending in `-` gives the same query (same draws) without its function words, as
    /// a stop list in the query would.
    fn query(&self, set: &str, rng: &mut SplitMix) -> String {
        let drop = set.ends_with('-');
        let (mut en, mut zh): (Vec<&str>, Vec<&str>) = match set.trim_end_matches('-') {
            "en" => (
                (0..5 + rng.below(5)).map(|_| self.en.zipf(rng)).collect(),
                vec![],
            ),
            "zh" => (
                vec![],
                (0..3 + rng.below(4)).map(|_| self.zh.zipf(rng)).collect(),
            ),
            "mixed" => (
                (0..3).map(|_| self.en.zipf(rng)).collect(),
                (0..2).map(|_| self.zh.zipf(rng)).collect(),
            ),
            _ => {
                let n = 2 + rng.below(2);
                if rng.below(2) == 0 {
                    ((0..n).map(|_| self.en.rare(rng)).collect(), vec![])
                } else {
                    (vec![], (0..n).map(|_| self.zh.rare(rng)).collect())
                }
            }
        };
        if drop {
            en.retain(|w| !EN_FUNCTION.contains(w));
            zh.retain(|w| !ZH_FUNCTION.contains(w));
        }
        let zh = zh.concat();
        let mut q = en.join(" ");
        if !q.is_empty() && !zh.is_empty() {
            q.push(' ');
        }
        q + &zh
    }
}

const QUERY_SETS: [(&str, &str); 7] = [
    ("en", "English, 5–9 words incl. function words"),
    ("en-", "the same without function words"),
    ("zh", "Chinese, 3–6 words incl. 的/了/是…"),
    ("zh-", "the same without function words"),
    ("mixed", "3 English + 2 Chinese words"),
    ("mixed-", "the same without function words"),
    ("rare", "2–3 rarer content words"),
];

// ------------------------------------------------------------------ DocMemory

async fn docs_part(k: &Knobs, dir: &Path) {
    let db = Db::open(dir).await.expect("open db");
    let t = Instant::now();
    // Loads jieba's dictionary now (DocMemory::new only starts it in the background).
    let _ = hearth_broker::storage::keywords("warm up", 1);
    let jieba_ms = us_since(t) / 1e3;
    let docs = DocMemory::new(db);
    let text = Text::new();
    let mut rng = SplitMix(11);
    let mut insert = Vec::with_capacity(k.docs);
    let (mut chars, mut bytes) = (0usize, 0usize);
    let started = Instant::now();
    for i in 0..k.docs {
        let (title, content) = text.doc(i, &mut rng);
        chars += content.chars().count();
        bytes += content.len();
        let doc = Doc {
            id: format!("doc-{i:05}"),
            title,
            content,
            score: 0.0,
        };
        let t = Instant::now();
        docs.insert(doc).await.expect("insert");
        insert.push(us_since(t) / 1e3);
    }
    let total = started.elapsed();
    let stats = docs.stats().await.expect("stats");
    let insert = summarize(insert);
    let load_insert = loadavg();

    let mut rows = Vec::new();
    for (set, _) in QUERY_SETS {
        let mut rng = SplitMix(23);
        for _ in 0..20 {
            docs.query(&text.query(set, &mut rng), 5).await.unwrap();
        }
        let mut us = Vec::with_capacity(k.queries);
        let mut hits = 0usize;
        for _ in 0..k.queries {
            let q = text.query(set, &mut rng);
            let t = Instant::now();
            let found = docs.query(&q, 5).await.unwrap();
            us.push(us_since(t));
            hits += found.len();
        }
        rows.push((set, summarize(us), hits as f64 / k.queries as f64));
    }
    // The first query of each set (the `-` sets drop words from the same draws).
    let examples: Vec<String> = QUERY_SETS
        .iter()
        .map(|(set, _)| format!("{set}: `{}`", text.query(set, &mut SplitMix(23))))
        .collect();

    println!("### DocMemory: {} documents\n", k.docs);
    println!(
        "50% English, 30% Chinese, 20% mixed; mean {:.0} characters ({:.0} bytes) of content; \
         ids given. jieba dictionary load {jieba_ms:.0} ms (before the inserts). Stats: {}. \
         loadavg after the inserts {load_insert}, after the queries {}.\n",
        chars as f64 / k.docs.max(1) as f64,
        bytes as f64 / k.docs.max(1) as f64,
        stats,
        loadavg()
    );
    println!("| insert (1 doc per call, 1 transaction + fsync) | n | total s | docs/s | mean ms | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| DocMemory::insert | {} | {:.1} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} |",
        insert.n,
        total.as_secs_f64(),
        k.docs as f64 / total.as_secs_f64(),
        insert.mean,
        insert.p50,
        insert.p99,
        insert.max
    );
    println!(
        "\nQueries with top_k 5 (each query different; examples: {}).\n",
        examples.join("; ")
    );
    println!(
        "| DocMemory::query | n | mean µs | p50 µs | p90 µs | p99 µs | max µs | hits (mean) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (set, s, hits) in &rows {
        let label = QUERY_SETS.iter().find(|(q, _)| q == set).unwrap().1;
        row(label, s, &format!(" {hits:.1} |"));
    }
    println!();
}

// ------------------------------------------------------------------ Knowledge

async fn knowledge_part(k: &Knobs, data_dir: &Path) {
    let db = Db::open(data_dir).await.expect("open db");
    let _ = hearth_broker::storage::keywords("warm up", 1);
    let knowledge = Knowledge::open(db, data_dir).await.expect("open knowledge");
    let text = Text::new();
    let mut rng = SplitMix(31);
    let entry = |i: usize, rng: &mut SplitMix| {
        let (title, content) = text.doc(i, rng);
        (format!("kb {i:05} {title}"), content)
    };

    // Through add(): file written atomically (fsync file + dir), then indexed (fsync).
    let mut add = Vec::with_capacity(k.adds);
    let started = Instant::now();
    for i in 0..k.adds {
        let (name, content) = entry(i, &mut rng);
        let t = Instant::now();
        knowledge.add(&name, &content).await.expect("add");
        add.push(us_since(t) / 1e3);
    }
    let add_total = started.elapsed();

    // The rest as files dropped into the folder, indexed by the next search.
    let dropped = k.entries - k.adds;
    let started = Instant::now();
    for i in k.adds..k.entries {
        let (name, content) = entry(i, &mut rng);
        let name = Knowledge::sanitize_name(&name).unwrap();
        std::fs::write(knowledge.dir().join(format!("{name}.md")), content).unwrap();
    }
    let write_files = started.elapsed();
    let t = Instant::now();
    knowledge.search("天气", 5).await.unwrap();
    let first_sync = t.elapsed();
    // Files read within RACY_WINDOW of their mtime are read again at the next sync.
    tokio::time::sleep(Knowledge::RACY_WINDOW + Duration::from_millis(500)).await;
    let t = Instant::now();
    knowledge.search("天气", 5).await.unwrap();
    let second_sync = t.elapsed();
    let listed = knowledge.list().await.unwrap().len();

    // Search = sync with the folder + the FTS query; a query without words isolates the sync.
    let mut rows = Vec::new();
    {
        for _ in 0..10 {
            knowledge.search("?!", 5).await.unwrap();
        }
        let n = (k.queries / 5).max(20);
        let mut us = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            knowledge.search("?!", 5).await.unwrap();
            us.push(us_since(t));
        }
        rows.push(("sync only (query `?!` has no words)", summarize(us), 0.0));
    }
    let n = (k.queries / 5).max(20);
    for (set, label) in QUERY_SETS {
        let mut rng = SplitMix(23);
        for _ in 0..5 {
            knowledge
                .search(&text.query(set, &mut rng), 5)
                .await
                .unwrap();
        }
        let mut us = Vec::with_capacity(n);
        let mut hits = 0usize;
        for _ in 0..n {
            let q = text.query(set, &mut rng);
            let t = Instant::now();
            hits += knowledge.search(&q, 5).await.unwrap().len();
            us.push(us_since(t));
        }
        rows.push((label, summarize(us), hits as f64 / n as f64));
    }

    // Where the sync's time goes: the same folder listing as the store's (read_dir, then
    // a stat per entry), and the query of the indexed sizes and times it compares with
    // (on a second connection to hearth.db).
    let listing = {
        let dir = knowledge.dir().to_path_buf();
        let mut us = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let mut n = 0usize;
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_file()) {
                    n += 1;
                }
            }
            std::hint::black_box(n);
            us.push(us_since(t));
        }
        summarize(us)
    };
    let known = {
        let conn = rusqlite::Connection::open_with_flags(
            data_dir.join("hearth.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let mut us = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let mut stmt = conn
                .prepare_cached("SELECT name, size, mtime_ns FROM knowledge")
                .unwrap();
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        (r.get::<_, i64>(1)?, r.get::<_, i64>(2)?),
                    ))
                })
                .unwrap();
            let map: std::collections::HashMap<String, (i64, i64)> =
                rows.map(Result::unwrap).collect();
            std::hint::black_box(map.len());
            us.push(us_since(t));
        }
        summarize(us)
    };

    println!("### Knowledge: {} entries (files)\n", k.entries);
    println!(
        "Same text generator as DocMemory; names `kb NNNNN <title>`. loadavg {}.\n",
        loadavg()
    );
    println!("| indexing | entries | total s | entries/s | p50 ms | p99 ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    if k.adds > 0 {
        let s = summarize(add);
        println!(
            "| Knowledge::add (write file atomically + index, 3 fsyncs) | {} | {:.1} | {:.0} | {:.2} | {:.2} |",
            k.adds,
            add_total.as_secs_f64(),
            k.adds as f64 / add_total.as_secs_f64(),
            s.p50,
            s.p99
        );
    }
    println!(
        "| files written into the folder (std::fs::write, no fsync) | {dropped} | {:.1} | {:.0} | – | – |",
        write_files.as_secs_f64(),
        dropped as f64 / write_files.as_secs_f64()
    );
    println!(
        "| first search after that (sync: reads and indexes them) | {dropped} | {:.1} | {:.0} | – | – |",
        first_sync.as_secs_f64(),
        dropped as f64 / first_sync.as_secs_f64()
    );
    println!(
        "| next search {:.1} s later (re-reads files whose mtime was within RACY_WINDOW) | – | {:.2} | – | – | – |",
        Knowledge::RACY_WINDOW.as_secs_f64() + 0.5,
        second_sync.as_secs_f64()
    );
    println!("\n{listed} entries listed. Searches with top_k 5, each query different:\n");
    println!(
        "| Knowledge::search | n | mean µs | p50 µs | p90 µs | p99 µs | max µs | hits (mean) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (label, s, hits) in &rows {
        row(label, s, &format!(" {hits:.1} |"));
    }
    println!(
        "\nParts of the sync, measured beside it (20 runs each): listing the folder (read_dir + \
         a stat per file) p50 {:.0} µs, p99 {:.0} µs; reading the indexed (name, size, mtime) \
         of every entry into a map p50 {:.0} µs, p99 {:.0} µs.\n",
        listing.p50, listing.p99, known.p50, known.p99
    );
}
