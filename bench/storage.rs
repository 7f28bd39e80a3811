//! Storage benchmark (issue 18): SQLite vs PostgreSQL. Prints Markdown tables; see
//! BENCHMARKS.md ("Storage: SQLite vs PostgreSQL, one broker vs two").
//!
//! 1. **Per-turn storage cost.** What one turn does to storage, in this process through
//!    the broker's own storage types: read the conversation's history, append the
//!    turn's two messages (user, assistant) and its two TextMemory lines; on
//!    PostgreSQL also take and give back the conversation's lease, as a broker sharing
//!    the database does. Sequential turns over 20 conversations, p50/p99 µs. Floors in
//!    the same run: one PostgreSQL round trip through the pool (`SELECT 1`) and one
//!    empty SQLite write transaction. PostgreSQL is a durable cluster (fsync on,
//!    `synchronous_commit` on) started by the test harness on loopback; SQLite is
//!    `hearth.db` in WAL mode with `synchronous=FULL`, in /tmp.
//! 2. **Turns/s at 100 conversations**: real `hearth run` brokers with the scripted
//!    LLM answering at once, 100 conversations in a closed loop (each sends its next
//!    message when the previous reply arrived), 3 s warm-up then `HEARTH_BENCH_SECS`
//!    (default 10) measured: one broker on SQLite, one on PostgreSQL, two on one
//!    PostgreSQL database (conversations spread over both, each taking its lease every
//!    turn). CPU from /proc over the window: brokers and the PostgreSQL server.
//!
//! Run (release):
//!
//! ```text
//! cargo bench -p hearth-broker --bench storage
//! ```
//!
//! `HEARTH_BENCH_PART` = `turn`, `load` or both (default).

#![allow(dead_code, unreachable_pub)]

#[path = "agent_load.rs"]
mod agent_load;
#[path = "common.rs"]
mod common;
#[path = "../tests/integration/harness.rs"]
mod harness;
#[path = "raw.rs"]
mod raw;

use std::time::{Duration, Instant};

use hearth_broker::cli::AdminConn;
use hearth_broker::storage::pg::leases::Leases;
use hearth_broker::storage::{
    ConversationKey, Conversations, Db, HistoryBudget, TextEvent, TextMemory, TextMemoryOptions,
};
use hearth_broker::testing::postgres::PgCluster;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::json;

use common::{cpu_us, env_num, loadavg, machine, summarize, utc_now};
use harness::Broker;

/// CPU µs of the PostgreSQL server: the postmaster `pid` and its children (each
/// backend is a session of its own, so not in the postmaster's process group).
fn group_cpu_us(pid: u32) -> u64 {
    let postmaster = pid;
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command (which may hold spaces) start after the last ')'.
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let ppid = fields.get(1).and_then(|f| f.parse::<u32>().ok());
        if pid == postmaster || ppid == Some(postmaster) {
            total += cpu_us(pid);
        }
    }
    total
}

fn key(n: usize) -> ConversationKey {
    ConversationKey {
        user_id: format!("u{n}"),
        group_id: None,
        channel: "bench".into(),
    }
}

fn turn_messages(n: usize) -> [serde_json::Value; 2] {
    [
        json!({"role": "user", "content": format!("今天北京天气怎么样？ message {n}")}),
        json!({"role": "assistant", "content": "北京今天小雨，12°C，出门记得带伞。"}),
    ]
}

fn events(n: usize) -> Vec<TextEvent> {
    turn_messages(n)
        .iter()
        .map(|m| TextEvent {
            role: m["role"].as_str().unwrap().into(),
            content: m["content"].as_str().unwrap().into(),
            timestamp: 0,
            channel: "bench".into(),
            injected_by: String::new(),
        })
        .collect()
}

/// One turn's storage work; µs.
async fn one_turn(
    n: usize,
    conversations: &Conversations,
    text: &TextMemory,
    leases: Option<&Leases>,
) -> f64 {
    let k = key(n % 20);
    let started = Instant::now();
    let lease = match leases {
        Some(l) => Some(l.acquire(&k).await.unwrap()),
        None => None,
    };
    let (messages, lines) = (turn_messages(n), events(n));
    let work = async {
        let _: Vec<serde_json::Value> = conversations.history(&k).await.unwrap();
        let (a, b) = tokio::join!(conversations.append(&k, &messages), text.append_all(&lines));
        a.unwrap();
        b.unwrap();
    };
    match &lease {
        Some(l) => l.turn_lease().scope(work).await,
        None => work.await,
    }
    if let Some(l) = lease {
        l.release().await;
    }
    started.elapsed().as_secs_f64() * 1e6
}

async fn per_turn(turns: usize, pg: &PgCluster) {
    println!("## 1. Per-turn storage cost\n");
    println!("{turns} sequential turns per row after 200 warm-up turns, over 20 conversations (history kept to 100 messages); each turn: read history, append 2 messages and 2 TextMemory lines (concurrently), and on shared PostgreSQL take and release the lease. Durable on both (SQLite WAL + synchronous=FULL; PostgreSQL fsync on, synchronous_commit on).\n");
    println!("| storage | p50 µs | p99 µs | mean µs | floor | floor p50 µs |");
    println!("|---|---:|---:|---:|---|---:|");
    let budget = HistoryBudget::default();
    let opts = TextMemoryOptions::default();

    let dir = tempfile::Builder::new()
        .prefix("hearth-bench-sqlite")
        .tempdir_in("/tmp")
        .unwrap();
    let db = Db::open(dir.path()).await.unwrap();
    let conversations = Conversations::new(db.clone(), budget);
    let text = TextMemory::for_db(&db, dir.path(), opts.clone())
        .await
        .unwrap();
    let floor = sqlite_floor(dir.path(), turns).await;
    let row = measure(turns, &conversations, &text, None).await;
    print_row("SQLite (hearth.db)", row, "empty write transaction", floor);

    let url = pg.database();
    let db = Db::postgres(&url).await.unwrap();
    let conversations = Conversations::new(db.clone(), budget);
    let text = TextMemory::for_db(&db, dir.path(), opts).await.unwrap();
    let floor = pg_floor(&url, turns).await;
    let row = measure(turns, &conversations, &text, None).await;
    print_row(
        "PostgreSQL, no lease",
        row,
        "prepared `SELECT 1`, one connection",
        floor,
    );
    let leases = Leases::start(
        db.pg().unwrap().clone(),
        "bench".into(),
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    let row = measure(turns, &conversations, &text, Some(&leases)).await;
    print_row(
        "PostgreSQL, shared (lease per turn)",
        row,
        "prepared `SELECT 1`, one connection",
        floor,
    );
    println!();
}

fn print_row(name: &str, s: common::Summary, floor_name: &str, floor: f64) {
    println!(
        "| {name} | {:.0} | {:.0} | {:.0} | {floor_name} | {floor:.0} |",
        s.p50, s.p99, s.mean
    );
}

async fn measure(
    turns: usize,
    conversations: &Conversations,
    text: &TextMemory,
    leases: Option<&Leases>,
) -> common::Summary {
    for n in 0..200 {
        one_turn(n, conversations, text, leases).await;
    }
    let mut us = Vec::with_capacity(turns);
    for n in 0..turns {
        us.push(one_turn(n, conversations, text, leases).await);
    }
    summarize(us)
}

async fn pg_floor(url: &str, n: usize) -> f64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let stmt = client.prepare("SELECT 1").await.unwrap();
    let mut us = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        client.query_one(&stmt, &[]).await.unwrap();
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    summarize(us).p50
}

async fn sqlite_floor(dir: &std::path::Path, n: usize) -> f64 {
    let conn = rusqlite::Connection::open(dir.join("floor.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        .unwrap();
    let mut us = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; INSERT INTO t VALUES ({i}); COMMIT"
        ))
        .unwrap();
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    summarize(us).p50
}

async fn start_broker(llm: &ScriptedLlm, storage: Option<&str>) -> Broker {
    let toml = match storage {
        Some(url) => format!(
            "[agent]\nmax_concurrent_turns = 1000\nqueue_per_conversation = 32\n[storage]\nurl = \"{url}\"\n"
        ),
        None => "[agent]\nmax_concurrent_turns = 1000\nqueue_per_conversation = 32\n".into(),
    };
    Broker::spawn_with_files(
        vec![],
        &["--llm-url", &llm.base_url()],
        &[("hearth.toml", &toml)],
    )
    .await
}

async fn load(measure: Duration, pg: &PgCluster) {
    println!("## 2. Turns/s at 100 conversations\n");
    println!("Closed loop: 100 conversations, each sending its next message when the previous reply arrived; the scripted model answers at once (streamed). 3 s warm-up, then {} s measured. With two brokers, conversation c always goes to broker c mod 2 (a sticky balancer); each turn still takes its lease. CPU over the window from /proc: broker(s), and the PostgreSQL server's processes. The bench process (clients, scripted model) shares the 2 vCPUs.\n", measure.as_secs());
    println!("| setup | turns/s | p50 ms | p99 ms | broker CPU µs/turn | PostgreSQL CPU µs/turn | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"default": {"content": "北京今天小雨，12°C。"}})).unwrap(),
    );
    for setup in [
        "one broker, SQLite",
        "one broker, PostgreSQL",
        "two brokers, one PostgreSQL",
    ] {
        let url = pg.database();
        let storage = (!setup.ends_with("SQLite")).then_some(url.as_str());
        let mut brokers = vec![start_broker(&llm, storage).await];
        if setup.starts_with("two") {
            brokers.push(start_broker(&llm, storage).await);
        }
        let mut conns: Vec<AdminConn> = Vec::new();
        for _ in 0..4 {
            for b in &brokers {
                conns.push(AdminConn::connect(&b.data_dir()).await.unwrap());
            }
        }
        // conversation c → conns[c % len]: with two brokers, c mod 2 picks the broker.
        let pids: Vec<u32> = brokers.iter().map(Broker::pid).collect();
        let watcher = {
            let pids = pids.clone();
            let pg_pid = pg.pid();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                let before: u64 = pids.iter().map(|p| cpu_us(*p)).sum();
                let pg_before = group_cpu_us(pg_pid);
                tokio::time::sleep(measure).await;
                let after: u64 = pids.iter().map(|p| cpu_us(*p)).sum();
                (after - before, group_cpu_us(pg_pid) - pg_before)
            })
        };
        let (turns, lat, errors) =
            agent_load::closed_loop(&conns, 100, Duration::from_secs(3), measure).await;
        let (broker_cpu, pg_cpu) = watcher.await.unwrap();
        let s = summarize(lat);
        println!(
            "| {setup} | {:.0} | {:.1} | {:.1} | {:.0} | {} | {errors} |",
            turns as f64 / measure.as_secs_f64(),
            s.p50 / 1e3,
            s.p99 / 1e3,
            broker_cpu as f64 / turns.max(1) as f64,
            if storage.is_some() {
                format!("{:.0}", pg_cpu as f64 / turns.max(1) as f64)
            } else {
                "–".into()
            },
        );
        drop(conns);
        drop(brokers);
    }
    println!();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    harness::quiet_brokers();
    let parts = std::env::var("HEARTH_BENCH_PART").unwrap_or_else(|_| "turn,load".into());
    let Some(pg) = PgCluster::shared_durable() else {
        eprintln!("no PostgreSQL (scripts/setup installs it)");
        return;
    };
    println!("# Storage: SQLite vs PostgreSQL — {}\n", utc_now());
    println!("{}; {}; load {}\n", machine(), pg.version(), loadavg());
    if parts.contains("turn") {
        per_turn(env_num("HEARTH_BENCH_TURNS", 2000) as usize, pg).await;
    }
    if parts.contains("load") {
        load(Duration::from_secs(env_num("HEARTH_BENCH_SECS", 10)), pg).await;
    }
}
