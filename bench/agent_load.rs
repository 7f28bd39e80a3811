//! Parts 2–5 of the agent benchmark (`bench/agent.rs`): what a hook costs beside the
//! raw round trip of the same kind of plugin, many conversations at once, fairness
//! under a flood, and memory per waiting conversation.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_broker::cli::AdminConn;
use hearth_proto::v1::chat_event::Event;
use hearth_proto::v1::{ChatRequest, StageContext};
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::json;

use crate::common::{cpu_us, loadavg, summarize};
use crate::harness::{python, repo, rss_kib, wait_gone, Broker, PluginDir};
use crate::raw::{Peer, RawPlugin, RAW_LANGS};

/// One chat to its Final event; µs, or the error.
pub async fn chat_once(admin: &mut AdminConn, user: &str, message: &str) -> Result<f64, String> {
    let req = admin.with_token(ChatRequest {
        message: message.into(),
        user_id: user.into(),
        channel: "bench".into(),
        ..Default::default()
    });
    let started = Instant::now();
    let mut stream = admin
        .agent()
        .chat(req)
        .await
        .map_err(|s| s.message().to_string())?
        .into_inner();
    while let Some(ev) = stream.message().await.map_err(|s| s.to_string())? {
        if let Some(Event::Final(f)) = ev.event {
            if !f.error.is_empty() {
                return Err(f.error);
            }
            return Ok(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    Err("stream ended without a Final event".into())
}

/// The stage-hook test plugin in `lang` named `name` with `HOOKS=directives`.
pub fn hooks_plugin(
    lang: &str,
    name: &str,
    directives: &str,
    rust_hooks: &std::path::Path,
) -> PluginDir {
    let mut manifest = match lang {
        "Python" => json!({"runtime": "python", "entry": repo().join("tests/plugins/hooks.py")}),
        "Node" => json!({"runtime": "node", "entry": repo().join("tests/plugins/hooks.js")}),
        _ => json!({"runtime": "exec", "entry": rust_hooks}),
    };
    manifest["name"] = json!(name);
    manifest["env"] = json!({"HOOKS": directives});
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

async fn start(plugins: Vec<PluginDir>, llm: &ScriptedLlm, toml: &str) -> Broker {
    let names: Vec<String> = plugins
        .iter()
        .map(|p| p.manifest["name"].as_str().unwrap().to_string())
        .collect();
    let mut b = Broker::spawn_with_files(
        plugins,
        &["--llm-url", &llm.base_url()],
        &[("hearth.toml", toml)],
    )
    .await;
    for n in names {
        b.wait_ready(&n).await;
    }
    b
}

fn plugin_pids(b: &Broker) -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-P", &b.pid().to_string()])
        .output();
    out.map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    })
    .unwrap_or_default()
}

/// The SDK hook plugins (no-op hooks) on raw hosts of their own, labelled by language
/// and handler kind.
async fn start_sdk_peers(rust_hooks: &std::path::Path) -> Vec<(&'static str, RawPlugin)> {
    let hooks_py = repo().join("tests/plugins/hooks.py");
    let peers: [(&str, &str, std::path::PathBuf, &str); 4] = [
        ("Python, plain `def`", "python", hooks_py.clone(), "noop"),
        ("Python, `async def`", "python", hooks_py, "noop_async"),
        (
            "Node",
            "node",
            repo().join("tests/plugins/hooks.js"),
            "noop",
        ),
        ("Rust", "exec", rust_hooks.to_path_buf(), "noop"),
    ];
    let mut out = Vec::new();
    for (label, runtime, entry, hooks) in peers {
        let peer = Peer::Sdk {
            runtime,
            entry,
            env: vec![("HOOKS", hooks)],
        };
        out.push((label, RawPlugin::start_peer(peer, &python(), &repo()).await));
    }
    out
}

// ---------------------------------------------------------------------------------
// 2. Hook cost per language beside the raw round trip
// ---------------------------------------------------------------------------------

/// A StageContext like a pre_action hook's in a fresh conversation (system prompt and
/// one user message), for the raw round trips.
fn typical_context() -> StageContext {
    StageContext {
        user_id: "bench-user-17".into(),
        context_msgs_json: json!([
            {"role": "system", "content": "You are Hearth, a helpful assistant. Use the tools you are given when they help."},
            {"role": "user", "content": "plain 17"}
        ])
        .to_string(),
        phase: 2,
        extra_json: "{}".into(),
        ..Default::default()
    }
}

pub async fn hook_cost(messages: usize, warmup: usize, rust_hooks: &std::path::Path) {
    println!("## 2. What a stage hook costs beside a raw round trip\n");
    let llm =
        ScriptedLlm::start(Script::from_value(json!({"default": {"content": "Done."}})).unwrap());
    // Brokers: a hook-less baseline, then one plugin per language hooking all seven
    // stages with a hook that changes nothing (5 invocations per plain message).
    // HEARTH_BENCH_HOOK=trace: the hooks of part 1 instead of no-op ones.
    let trace = std::env::var("HEARTH_BENCH_HOOK").as_deref() == Ok("trace");
    let (noop, noop_async) = if trace {
        ("trace", "trace")
    } else {
        ("noop", "noop_async")
    };
    let kinds: [(&str, &str, &str); 5] = [
        ("baseline (no hooks)", "", ""),
        ("Python, plain `def`", "Python", noop),
        ("Python, `async def`", "Python", noop_async),
        ("Node", "Node", noop),
        ("Rust", "Rust", noop),
    ];
    let mut brokers = Vec::new();
    for (label, lang, directives) in kinds {
        let plugins = if lang.is_empty() {
            vec![]
        } else {
            vec![hooks_plugin(lang, "hk", directives, rust_hooks)]
        };
        brokers.push((label, lang, start(plugins, &llm, "").await));
    }
    let mut raws = Vec::new();
    for lang in RAW_LANGS {
        raws.push((lang, RawPlugin::start(lang, &python(), &repo()).await));
    }
    // The same SDK plugins as above, driven by the raw host directly: what the SDK
    // adds to the raw trip, without the broker.
    let sdks = start_sdk_peers(rust_hooks).await;
    let mut sdk_samples: Vec<Vec<f64>> = vec![Vec::new(); sdks.len()];
    let ctx = typical_context();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); brokers.len()];
    let mut raw_samples: Vec<Vec<f64>> = vec![Vec::new(); raws.len()];
    let load_before = loadavg();
    // Interleaved: a message on every broker, then 5 raw trips (one message's worth of
    // hook invocations) on every raw plugin.
    for i in 0..warmup + messages {
        for (k, (_, _, b)) in brokers.iter_mut().enumerate() {
            let t = chat_once(&mut b.admin, &format!("u{i}"), &format!("plain {i}"))
                .await
                .expect("chat");
            if i >= warmup {
                samples[k].push(t);
            }
        }
        for (k, (_, r)) in raws.iter().enumerate() {
            let t = r.stage_trips(5, &ctx).await;
            if i >= warmup {
                raw_samples[k].extend(t);
            }
        }
        for (k, (_, r)) in sdks.iter().enumerate() {
            let t = r.stage_trips(5, &ctx).await;
            if i >= warmup {
                sdk_samples[k].extend(t);
            }
        }
    }
    println!(
        "{messages} plain messages per broker after {warmup} warm-up (every message a new conversation), interleaved with {} raw `RunStage` round trips per language; loadavg before {load_before}, after {}.\n",
        messages * 5,
        loadavg()
    );
    println!("Raw round trip: a minimal tonic host in the bench process sends `RunStage` (a pre_action-sized context: system prompt and one user message) over a Unix socket to a plugin that answers with the context unchanged, written with the generated stubs only (`bench/raw/`: grpc.aio, grpc-js, tonic). Hook Δ: (p50 of a plain message on the broker with that plugin's no-op hooks − p50 on the baseline) / 5 invocations.\n");
    println!("| plugin | message p50 µs | Δ p50 | Δ per hook invocation | SDK plugin on the raw host p50 | raw round trip p50 | ratio Δ / raw |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let base = summarize(samples[0].clone()).p50;
    println!("| baseline (no hooks) | {base:.0} | – | – | – | – | – |");
    for (k, (label, lang, _)) in brokers.iter().enumerate().skip(1) {
        let p50 = summarize(samples[k].clone()).p50;
        let per = (p50 - base) / 5.0;
        let raw = raws
            .iter()
            .position(|(l, _)| l == lang)
            .map(|i| summarize(raw_samples[i].clone()).p50)
            .unwrap();
        let sdk = summarize(sdk_samples[k - 1].clone()).p50;
        println!(
            "| {label} | {p50:.0} | {:.0} | {per:.0} | {sdk:.0} | {raw:.0} | {:.2}× |",
            p50 - base,
            per / raw
        );
    }
    println!();
    let pids: Vec<u32> = brokers
        .iter()
        .flat_map(|(_, _, b)| {
            let mut p = plugin_pids(b);
            p.push(b.pid());
            p
        })
        .collect();
    drop(brokers);
    drop(raws);
    drop(sdks);
    let left = wait_gone(&pids, Duration::from_secs(10));
    assert!(left.is_empty(), "processes left: {left:?}");
}

// ---------------------------------------------------------------------------------
// 3. Many conversations at once
// ---------------------------------------------------------------------------------

/// Closed loop: `conversations` users each send their next message as soon as the
/// previous reply arrived, for `warm` then `measure`. Returns (turns in the window,
/// latencies µs, errors).
pub async fn closed_loop(
    conns: &[AdminConn],
    conversations: usize,
    warm: Duration,
    measure: Duration,
) -> (usize, Vec<f64>, usize) {
    let started = Instant::now();
    let window_start = started + warm;
    let window_end = window_start + measure;
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..conversations {
        let mut admin = conns[c % conns.len()].clone();
        let (latencies, errors, done) = (latencies.clone(), errors.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            loop {
                if Instant::now() >= window_end {
                    return;
                }
                n += 1;
                let r = chat_once(&mut admin, &format!("c{c}"), &format!("turn {n}")).await;
                let at = Instant::now();
                match r {
                    // Replies that arrive within the window count, whenever sent.
                    Ok(t) if at >= window_start && at <= window_end => {
                        latencies.lock().unwrap().push(t);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("chat error: {e}");
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let l = latencies.lock().unwrap().clone();
    (
        done.load(Ordering::Relaxed),
        l,
        errors.load(Ordering::Relaxed),
    )
}

pub async fn concurrency(rust_hooks: &std::path::Path, sizes: &[usize], measure: Duration) {
    println!("## 3. Many conversations at once\n");
    let delay_ms = 1000;
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"default": {"content": "Done.", "delay_ms": delay_ms}})).unwrap(),
    );
    println!("Closed loop: C conversations (users), each sending its next message as soon as the previous reply arrived; the scripted model answers every request after {delay_ms} ms (streamed). 3 s warm-up, then {} s measured: turns/s = replies that arrived in the window / window; latency (of those replies) from sending to the Final event; broker CPU from /proc over the window; RSS at its end. The bench process (clients and the scripted server) shares the machine. Hooks: one Python (plain `def`), one Node and one Rust plugin, each with a no-op hook at all seven stages (15 invocations per message).\n", measure.as_secs());
    println!("| hooks | C | max_concurrent_turns | turns/s | p50 ms | p99 ms | max ms | broker CPU µs/turn | broker RSS MiB | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // HEARTH_BENCH_HOOKS: which languages' hook plugins the hooked rows use.
    let hook_langs: Vec<String> = std::env::var("HEARTH_BENCH_HOOKS")
        .unwrap_or_else(|_| "Python,Node,Rust".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let only_hooked = std::env::var("HEARTH_BENCH_ONLY_HOOKED").is_ok();
    let mut rows: Vec<(bool, usize, usize)> = Vec::new();
    for &c in sizes {
        rows.push((false, c, 1000));
    }
    rows.push((false, 100, 64));
    for &c in sizes.iter().filter(|c| **c <= 1000) {
        rows.push((true, c, 1000));
    }
    if only_hooked {
        rows.retain(|r| r.0);
    }
    for (hooked, c, slots) in rows {
        let plugins = if hooked {
            hook_langs
                .iter()
                .map(|l| hooks_plugin(l, &format!("hk_{l}"), "noop", rust_hooks))
                .collect()
        } else {
            vec![]
        };
        let toml =
            format!("[agent]\nmax_concurrent_turns = {slots}\nqueue_per_conversation = 32\n");
        let b = start(plugins, &llm, &toml).await;
        let mut conns = vec![b.admin.clone()];
        for _ in 1..8 {
            conns.push(AdminConn::connect(&b.data_dir()).await.unwrap());
        }
        let broker = b.pid();
        // CPU is read at the window's edges by a side task.
        let cpu = Arc::new(Mutex::new((0u64, 0u64, 0u64)));
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (cpu, stop) = (cpu.clone(), stop.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                let before = cpu_us(broker);
                tokio::time::sleep(measure).await;
                let after = cpu_us(broker);
                *cpu.lock().unwrap() = (before, after, rss_kib(broker));
                stop.store(true, Ordering::Relaxed);
            })
        };
        let (turns, lat, errors) = closed_loop(&conns, c, Duration::from_secs(3), measure).await;
        let _ = watcher.await;
        let (before, after, rss) = *cpu.lock().unwrap();
        let s = if lat.is_empty() {
            None
        } else {
            Some(summarize(lat))
        };
        println!(
            "| {} | {c} | {slots} | {:.1} | {} | {} | {} | {:.0} | {:.1} | {errors} |",
            if hooked {
                hook_langs.join(" + ")
            } else {
                "none".into()
            },
            turns as f64 / measure.as_secs_f64(),
            s.map_or("–".into(), |s| format!("{:.0}", s.p50 / 1e3)),
            s.map_or("–".into(), |s| format!("{:.0}", s.p99 / 1e3)),
            s.map_or("–".into(), |s| format!("{:.0}", s.max / 1e3)),
            (after - before) as f64 / turns.max(1) as f64,
            rss as f64 / 1024.0,
        );
        let mut pids = plugin_pids(&b);
        pids.push(b.pid());
        drop(conns);
        drop(b);
        assert!(wait_gone(&pids, Duration::from_secs(15)).is_empty());
    }
    println!();
}

// ---------------------------------------------------------------------------------
// 4. Fairness
// ---------------------------------------------------------------------------------

pub async fn fairness(flood: usize) {
    println!("## 4. Fairness: one user floods, another sends one message\n");
    let delay_ms = 1000;
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"default": {"content": "Done.", "delay_ms": delay_ms}})).unwrap(),
    );
    println!("The flooding user sends {flood} messages at once (`queue_per_conversation` = {flood}); once all are accepted, a second user sends one. Model: {delay_ms} ms per request. Delay = the quiet user's reply time − one model latency.\n");
    println!("| max_concurrent_turns | quiet user's reply ms | its delay beyond one model latency ms | flood turns answered before it |");
    println!("|---:|---:|---:|---:|");
    for slots in [1usize, 4, 64] {
        let toml =
            format!("[agent]\nmax_concurrent_turns = {slots}\nqueue_per_conversation = {flood}\n");
        let b = start(vec![], &llm, &toml).await;
        let answered = Arc::new(AtomicUsize::new(0));
        let mut streams = Vec::new();
        for i in 0..flood {
            let mut admin = b.admin.clone();
            let req = admin.with_token(ChatRequest {
                message: format!("flood {i}"),
                user_id: "flood".into(),
                channel: "bench".into(),
                ..Default::default()
            });
            let mut s = admin.agent().chat(req).await.expect("flood").into_inner();
            let answered = answered.clone();
            streams.push(tokio::spawn(async move {
                while let Ok(Some(ev)) = s.message().await {
                    if matches!(ev.event, Some(Event::Final(_))) {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        let mut admin = b.admin.clone();
        let t = chat_once(&mut admin, "quiet", "hello")
            .await
            .expect("quiet");
        let before = answered.load(Ordering::Relaxed);
        println!(
            "| {slots} | {:.0} | {:.0} | {before} |",
            t / 1e3,
            t / 1e3 - delay_ms as f64
        );
        let pid = b.pid();
        drop(b);
        for s in streams {
            s.abort();
        }
        assert!(wait_gone(&[pid], Duration::from_secs(15)).is_empty());
    }
    println!();
}

// ---------------------------------------------------------------------------------
// 5. Memory per waiting conversation
// ---------------------------------------------------------------------------------

pub async fn memory(waiting: usize) {
    println!("## 5. Broker memory per waiting conversation\n");
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"default": {"content": "Done.", "delay_ms": 600_000}})).unwrap(),
    );
    let b = start(vec![], &llm, "[agent]\nmax_concurrent_turns = 1\n").await;
    let mut conns = vec![b.admin.clone()];
    for _ in 1..8 {
        conns.push(AdminConn::connect(&b.data_dir()).await.unwrap());
    }
    // One turn runs (and holds the only slot) so every other conversation waits.
    let mut streams = Vec::new();
    let open = |admin: &AdminConn, user: String| {
        let mut admin = admin.clone();
        async move {
            let req = admin.with_token(ChatRequest {
                message: "hi".into(),
                user_id: user,
                channel: "bench".into(),
                ..Default::default()
            });
            admin.agent().chat(req).await.expect("chat").into_inner()
        }
    };
    streams.push(open(&conns[0], "running".into()).await);
    // A warm-up batch, so the allocator and connections are in their steady state.
    for i in 0..100 {
        streams.push(open(&conns[i % conns.len()], format!("warm{i}")).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(b.pid());
    for i in 0..waiting {
        streams.push(open(&conns[i % conns.len()], format!("w{i}")).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(b.pid());
    println!("One turn holds the only slot (`max_concurrent_turns` = 1, the model answers after 10 minutes); 100 conversations wait as warm-up; then {waiting} more conversations each send one message over 8 client connections and wait. Broker RSS before: {:.1} MiB, after: {:.1} MiB.\n", before as f64 / 1024.0, after as f64 / 1024.0);
    println!("| waiting conversations | RSS growth KiB | per waiting conversation KiB |");
    println!("|---:|---:|---:|");
    println!(
        "| {waiting} | {} | {:.1} |\n",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / waiting as f64
    );
    let pid = b.pid();
    drop(streams);
    drop(conns);
    drop(b);
    assert!(wait_gone(&[pid], Duration::from_secs(15)).is_empty());
}

// ---------------------------------------------------------------------------------
// The SDKs alone: stage round trips of the SDK plugins on the raw host
// ---------------------------------------------------------------------------------

/// `RunStage` round trips, raw plugin vs SDK plugin of each language on the raw host,
/// interleaved (no broker): what each SDK adds to a hook.
pub async fn sdk_trips(trips: usize, rust_hooks: &std::path::Path) {
    println!("## SDK stage round trips on the raw host (no broker)\n");
    let mut peers: Vec<(String, RawPlugin)> = Vec::new();
    for lang in RAW_LANGS {
        peers.push((
            format!("raw {lang}"),
            RawPlugin::start(lang, &python(), &repo()).await,
        ));
    }
    for (label, p) in start_sdk_peers(rust_hooks).await {
        peers.push((format!("SDK {label}"), p));
    }
    let ctx = typical_context();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    let cpu_before: Vec<u64> = peers.iter().map(|(_, p)| cpu_us(p.pid())).collect();
    let warm = trips / 10;
    // Batches of 10, interleaved.
    for i in 0..(trips + warm) / 10 {
        for (k, (_, p)) in peers.iter().enumerate() {
            let t = p.stage_trips(10, &ctx).await;
            if i * 10 >= warm {
                samples[k].extend(t);
            }
        }
    }
    println!("{trips} round trips each after {warm} warm-up, interleaved, in batches of 10; µs. Plugin CPU: utime+stime of the plugin process over all trips (warm-up included) / trips.\n");
    println!("| peer | p50 | p90 | p99 | plugin CPU µs/trip |");
    println!("|---|---:|---:|---:|---:|");
    for (k, (label, p)) in peers.iter().enumerate() {
        let s = summarize(samples[k].clone());
        let cpu = (cpu_us(p.pid()) - cpu_before[k]) as f64 / (trips + warm) as f64;
        println!(
            "| {label} | {:.0} | {:.0} | {:.0} | {cpu:.0} |",
            s.p50, s.p90, s.p99
        );
    }
    println!();
}
