//! Broker at idle and the first memory search: what jieba's dictionary costs.
//! Prints Markdown; see BENCHMARKS.md ("Broker at idle and the first memory search").
//!
//! 1. **Broker at idle.** A real `hearth run` (the integration-test harness) with no
//!    plugins; VmRSS 0.5 s after it is ready. Median of `HEARTH_BENCH_RUNS` brokers.
//! 2. **The first search after start**, each run in a fresh process (this bench
//!    re-executed), so nothing is loaded before it:
//!    - *DocMemory query*: open a SQLite data dir holding 1,000 documents (Chinese and
//!      English), then time the first `DocMemory::query` and the first
//!      `storage::keywords` (graph-memory recall's segmentation); VmRSS before and after.
//!    - *jieba-rs with its dictionary*, the floor of the way the broker worked before:
//!      `Jieba::new()` and its first `cut_for_search`.
//! 3. **Segmentation throughput**: `storage::cut_for_search` (the broker's segmenter)
//!    against `Jieba::cut_for_search` on the same 1 MB of mixed text, in this process,
//!    median of 5.
//!
//! Run (release): `cargo bench -p hearth-broker --bench segmenter`
//! Knobs: `HEARTH_BENCH_RUNS` fresh processes per figure (default 7).

#![allow(dead_code, unreachable_pub)]

#[path = "common.rs"]
mod common;
#[path = "../tests/integration/harness.rs"]
mod harness;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{env_num, machine};
use harness::{rss_kib, Broker};
use hearth_broker::storage::{cut_for_search, keywords, Db, Doc, DocMemory};

/// Mixed text from a fixed seed: Chinese sentences, English words, numbers.
fn text(bytes: usize, seed: u64) -> String {
    const ZH: &[&str] = &[
        "今天天气很好",
        "明天气温下降",
        "我们在北京清华大学",
        "中华人民共和国",
        "南京市长江大桥",
        "小明硕士毕业于中国科学院计算所",
        "后在日本京都大学深造",
        "插件进程由代理监督",
        "对话记忆和文档检索",
        "工具调用失败时重试",
        "，",
        "。",
        "的",
        "了",
        "在",
    ];
    const EN: &[&str] = &[
        "broker",
        "plugin",
        "restart",
        "memory",
        "search",
        "v2.0",
        "42",
        "WES-5.4.5",
    ];
    let mut s = String::with_capacity(bytes + 64);
    let mut x = seed;
    while s.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(5) {
            s.push(' ');
            s.push_str(EN[(x >> 8) as usize % EN.len()]);
            s.push(' ');
        } else {
            s.push_str(ZH[(x >> 8) as usize % ZH.len()]);
        }
    }
    s
}

fn self_rss_kib() -> u64 {
    rss_kib(std::process::id())
}

const QUERY: &str = "北京的天气 broker restart";

/// Child mode: one first search, printed as `first_us keywords_us rss_before rss_after`.
fn child(mode: &str, dir: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match mode {
        "docs" => rt.block_on(async {
            let db = Db::open(dir).await.expect("open the data dir");
            let docs = DocMemory::new(db);
            let before = self_rss_kib();
            let t = Instant::now();
            let hits = docs.query(QUERY, 5).await.expect("query");
            let first = t.elapsed();
            assert!(!hits.is_empty(), "the first query found nothing");
            let t = Instant::now();
            let words = keywords("我们明天在北京讨论插件的重启策略", 8);
            let kw = t.elapsed();
            assert!(words.len() >= 3, "{words:?}");
            println!(
                "{} {} {before} {}",
                first.as_micros(),
                kw.as_micros(),
                self_rss_kib()
            );
        }),
        "jieba" => {
            let before = self_rss_kib();
            let t = Instant::now();
            let jieba = jieba_rs::Jieba::new();
            let n = jieba.cut_for_search(QUERY, true).len();
            let first = t.elapsed();
            assert!(n > 3);
            println!("{} 0 {before} {}", first.as_micros(), self_rss_kib());
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    harness::quiet_brokers();
    if let (Ok(mode), Ok(dir)) = (
        std::env::var("HEARTH_BENCH_CHILD"),
        std::env::var("HEARTH_BENCH_DIR"),
    ) {
        child(&mode, Path::new(&dir));
        return;
    }
    let runs = env_num("HEARTH_BENCH_RUNS", 7) as usize;
    println!("# Broker at idle and the first memory search\n");
    println!("{}", machine());
    println!("runs={runs}\n");

    let rt = tokio::runtime::Runtime::new().unwrap();

    // 1. Idle brokers.
    let idle: Vec<f64> = (0..runs)
        .map(|_| {
            rt.block_on(async {
                let b = Broker::start(vec![]).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                rss_kib(b.pid()) as f64
            })
        })
        .collect();
    println!("## 1. Broker at idle (no plugins)\n");
    println!(
        "VmRSS median {:.1} MiB (min {:.1}, max {:.1})\n",
        median(idle.clone()) / 1024.0,
        idle.iter().cloned().fold(f64::MAX, f64::min) / 1024.0,
        idle.iter().cloned().fold(0.0, f64::max) / 1024.0
    );

    // 2. First search in fresh processes.
    let data = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let docs = DocMemory::new(Db::open(data.path()).await.unwrap());
        for i in 0..1000u64 {
            let doc = Doc {
                id: String::new(),
                title: format!("doc {i}"),
                content: text(400, i + 1),
                score: 0.0,
            };
            docs.insert(doc).await.unwrap();
        }
    });
    let exe = std::env::current_exe().unwrap();
    let mut rows = Vec::new();
    for mode in ["docs", "jieba"] {
        let mut cols: [Vec<f64>; 4] = Default::default();
        for _ in 0..runs {
            let out = Command::new(&exe)
                .env("HEARTH_BENCH_CHILD", mode)
                .env("HEARTH_BENCH_DIR", data.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = String::from_utf8(out.stdout).unwrap();
            for (col, v) in cols.iter_mut().zip(line.split_whitespace()) {
                col.push(v.parse().unwrap());
            }
        }
        rows.push((mode, cols.map(median)));
    }
    println!("## 2. The first search after start (fresh process, median of {runs})\n");
    println!(
        "| what | first search ms | first `keywords` µs | VmRSS before MiB | VmRSS after MiB |"
    );
    println!("|---|---|---|---|---|");
    for (mode, [first, kw, before, after]) in rows {
        let what = match mode {
            "docs" => "DocMemory query, 1,000 documents (the broker's segmenter)",
            _ => "jieba-rs: `Jieba::new()` + first `cut_for_search` (floor of before)",
        };
        let kw = if mode == "docs" {
            format!("{kw:.0}")
        } else {
            "—".into()
        };
        println!(
            "| {what} | {:.2} | {kw} | {:.1} | {:.1} |",
            first / 1000.0,
            before / 1024.0,
            after / 1024.0
        );
    }

    // 3. Throughput.
    let big = text(1 << 20, 7);
    let jieba = jieba_rs::Jieba::new();
    let mb = big.len() as f64 / 1e6;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let n = cut_for_search(&big).len();
        ours.push(mb / t.elapsed().as_secs_f64());
        assert!(n > 10);
        let t = Instant::now();
        let n = jieba.cut_for_search(&big, true).len();
        theirs.push(mb / t.elapsed().as_secs_f64());
        assert!(n > 10);
    }
    println!("\n## 3. Segmentation throughput ({mb:.2} MB of mixed text, median of 5)\n");
    println!("| segmenter | MB/s |");
    println!("|---|---|");
    println!(
        "| broker `storage::cut_for_search` (fst dictionary) | {:.1} |",
        median(ours)
    );
    println!(
        "| jieba-rs `cut_for_search` (dictionary in memory) | {:.1} |",
        median(theirs)
    );
}
