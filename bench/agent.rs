//! Agent benchmark: what the pipeline costs per message. Prints Markdown tables; see
//! BENCHMARKS.md ("Agent: pipeline overhead and adapter cost"). The adapters' own cost
//! (every built-in, per request and per streamed chunk) is `bench/adapters.rs`.
//!
//! 1. **Pipeline overhead.** Real `hearth run` brokers (the integration-test harness) on
//!    one scripted OpenAI-compatible server on loopback (`hearth_scripted::ScriptedLlm`,
//!    answers at once). Client wall time of `Agent.Chat` up to the `Final` event, messages
//!    interleaved between
//!    - **none**: a broker with no plugins (plain messages only),
//!    - **baseline**: a broker with one hook-less plugin `tool` (the Rust hooks example with
//!      `HOOKS=` empty) that owns the tool `tool_ping`,
//!    - **hooked**: the same `tool` plugin plus three plugins hooking all seven stages with
//!      `HOOKS=trace`: `tests/plugins/hooks.py`, `tests/plugins/hooks.js` and the Rust
//!      `sdk-rust/examples/hooks.rs`,
//!
//!    for a message the LLM answers with text at once (`plain`) and one whose first answer
//!    is one call of `tool_ping`, then text (`tool`: before/after_toolcall run). hooked −
//!    baseline (difference of medians) is the hooks' cost. Also the scripted server's own
//!    answer time (direct HTTP requests from this process).
//!
//! *sdk*. **The SDKs alone**: `RunStage` round trips from a raw host (`bench/raw.rs`) to
//!    the minimal plugin of each language and to the SDK hook plugins (no broker), with
//!    the plugin's CPU per trip.
//! 2. **Hook cost beside the raw round trip** (`bench/agent_load.rs`): per plugin
//!    language, the cost of one no-op stage hook (Δ of a plain message's p50 over a
//!    hook-less broker, per invocation) beside the raw `RunStage` round trip of a
//!    minimal plugin of that language (`bench/raw.rs`), measured interleaved.
//! 3. **Many conversations at once**: C = 1, 10, 100, 1000 conversations in a closed
//!    loop against a 1 s model, without and with hooks in three plugins: turns/s,
//!    latency, broker CPU per turn, RSS.
//! 4. **Fairness**: one user floods 500 messages, another sends one.
//! 5. **Memory per waiting conversation**.
//!
//! Run (release; the Rust hooks plugin must be built first, next to the bench's `hearth`):
//!
//! ```text
//! cargo build --release -p hearth-plugin --example hooks
//! cargo bench -p hearth-broker --bench agent
//! ```
//!
//! Knobs (environment):
//! - `HEARTH_BENCH_MESSAGES` measured messages per broker and kind (default 500)
//! - `HEARTH_BENCH_WARMUP` warm-up messages per broker and kind (default 50)
//! - `HEARTH_BENCH_HISTORY` `fresh` (default: every message a new conversation, so every
//!   message is the same size) or `keep` (one conversation per broker and kind; history
//!   grows to the budget of 100 messages)
//! - `HEARTH_BENCH_LLM` `nodelay` (default: the scripted server on a listener with
//!   TCP_NODELAY) or `stock` (`ScriptedLlm` as is)
//! - `HEARTH_BENCH_PART` comma-separated subset of `pipeline,sdk,hooks,concurrency,fairness,memory`
//!   (default all)
//! - `HEARTH_BENCH_CONVERSATIONS` sizes of part 3 (default `1,10,100,1000`),
//!   `HEARTH_BENCH_SECS` its measured seconds per row (default 10),
//!   `HEARTH_BENCH_FLOOD` part 4's flood (default 500), `HEARTH_BENCH_WAITING` part 5's
//!   waiting conversations (default 1000)
#![allow(unreachable_pub, missing_docs)]

#[path = "agent_load.rs"]
mod agent_load;
#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/harness.rs"]
mod harness;
#[path = "raw.rs"]
mod raw;

use common::{cpu_us, env_num, loadavg, machine, summarize, Summary};

use std::time::{Duration, Instant};

use harness::{python, wait_gone, Broker, PluginDir};
use hearth_proto::v1::chat_event::Event;
use hearth_proto::v1::ChatRequest;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------
// 1. Pipeline overhead
// ---------------------------------------------------------------------------------

/// The stage-hook test plugin in `lang` (`py`, `nd`, `rs`) named `name` with
/// `HOOKS=directives`.
fn hooks(lang: &str, name: &str, directives: &str, rust_hooks: &std::path::Path) -> PluginDir {
    let lang = match lang {
        "py" => "Python",
        "nd" => "Node",
        _ => "Rust",
    };
    agent_load::hooks_plugin(lang, name, directives, rust_hooks)
}

/// One chat's timings (µs from sending Agent.Chat).
struct ChatTimes {
    /// To the Final event.
    total: f64,
    /// To the first TextDelta of the final answer (the last LLM round).
    last_delta: f64,
    /// `elapsed_us` of ToolCallFinished (before_toolcall + the call + after_toolcall).
    tool_us: Option<f64>,
}

async fn chat(b: &mut Broker, message: &str, user: &str) -> ChatTimes {
    let req = b.admin.with_token(ChatRequest {
        message: message.into(),
        user_id: user.into(),
        channel: "bench".into(),
        ..Default::default()
    });
    let started = Instant::now();
    let mut stream = b
        .admin
        .agent()
        .chat(req)
        .await
        .expect("Agent.Chat")
        .into_inner();
    let mut first_delta_after_tool = None;
    let mut first_delta = None;
    let mut tool_us = None;
    let mut total = None;
    let mut final_ev = None;
    while let Some(ev) = stream.message().await.expect("chat stream") {
        let at = started.elapsed().as_secs_f64() * 1e6;
        match ev.event {
            Some(Event::TextDelta(_)) => {
                if tool_us.is_some() {
                    first_delta_after_tool.get_or_insert(at);
                } else {
                    first_delta.get_or_insert(at);
                }
            }
            Some(Event::ToolCallFinished(t)) => {
                assert!(t.success, "{t:?}");
                tool_us = Some(t.elapsed_us as f64);
            }
            Some(Event::Final(f)) => {
                total = Some(at);
                final_ev = Some(f);
            }
            _ => {}
        }
    }
    let f = final_ev.expect("no Final event");
    assert!(
        f.error.is_empty() && f.text.starts_with("Done"),
        "unexpected Final: {f:?}\nbroker log:\n{}",
        b.log()
    );
    ChatTimes {
        total: total.unwrap(),
        last_delta: first_delta_after_tool.or(first_delta).unwrap_or(f64::NAN),
        tool_us,
    }
}

/// A broker under test and what was measured on it.
struct Setup {
    label: &'static str,
    broker: Broker,
    pids: Vec<(String, u32)>,
    kinds: Vec<&'static str>,
}

/// One broker × message kind: the kind, the samples, CPU µs/message per process.
type KindResult = (&'static str, Samples, Vec<(String, f64)>);

#[derive(Default)]
struct Samples {
    total: Vec<f64>,
    last_delta: Vec<f64>,
    tool_us: Vec<f64>,
}

async fn start_broker(plugins: Vec<PluginDir>, url: &str) -> (Broker, Vec<(String, u32)>) {
    let names: Vec<String> = plugins
        .iter()
        .map(|p| p.manifest["name"].as_str().unwrap().to_string())
        .collect();
    let mut b = Broker::spawn_with_files(plugins, &["--llm-url", url], &[]).await;
    let mut pids = vec![("broker".to_string(), b.pid())];
    for n in names {
        let p = b.wait_ready(&n).await;
        pids.push((n, p.pid));
    }
    (b, pids)
}

/// The scripted server on a loopback listener with `TCP_NODELAY` set (Linux: accepted
/// sockets inherit it), through `hearth_scripted::serve`. `ScriptedLlm` leaves Nagle on,
/// so its SSE events after the first wait for the client's delayed ACK (~40 ms).
struct NodelayLlm {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl NodelayLlm {
    fn start(script: Script) -> NodelayLlm {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let one: libc::c_int = 1;
        let rc = unsafe {
            libc::setsockopt(
                l.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "setsockopt TCP_NODELAY");
        l.set_nonblocking(true).unwrap();
        let url = format!("http://{}/v1", l.local_addr().unwrap());
        let listener = tokio::net::TcpListener::from_std(l).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = hearth_scripted::serve(script, listener, async move {
                let _ = stopped.await;
            })
            .await;
        });
        NodelayLlm {
            url,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// Times direct requests to a scripted server at `base_url` (the LLM's own time in the
/// chats).
async fn scripted_server_time(base_url: &str, n: usize, with_tool: bool) -> Summary {
    let client = reqwest::Client::new();
    let url = format!("{base_url}/chat/completions");
    let tools: Vec<Value> = ["tool_ping", "hk_py_ping", "hk_nd_ping", "hk_rs_ping"]
        .iter()
        .map(|t| json!({"type": "function", "function": {"name": t, "description": "Answers pong.", "parameters": {"type": "object", "properties": {}}}}))
        .collect();
    let mut messages = vec![
        json!({"role": "system", "content": "You are a helpful assistant."}),
        json!({"role": "user", "content": if with_tool { "tool 1" } else { "plain 1" }}),
    ];
    if with_tool {
        messages.push(json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "tool_ping", "arguments": "{}"}}]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": "call_1", "content": "pong from tool"}));
    }
    let body = json!({"model": "bench", "messages": messages, "stream": true,
        "stream_options": {"include_usage": true}, "tools": tools, "tool_choice": "auto"});
    let mut us = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let started = Instant::now();
        let text = client
            .post(&url)
            .json(&body)
            .send()
            .await
            .expect("scripted server")
            .text()
            .await
            .expect("scripted server body");
        let t = started.elapsed().as_secs_f64() * 1e6;
        assert!(text.contains("[DONE]"), "{text}");
        if i >= n / 10 {
            us.push(t);
        }
    }
    summarize(us)
}

async fn pipeline(messages: usize, warmup: usize, keep_history: bool, stock_llm: bool) -> bool {
    let hearth = env!("CARGO_BIN_EXE_hearth");
    let rust_hooks = std::path::Path::new(hearth)
        .parent()
        .unwrap()
        .join("examples/hooks");
    if !rust_hooks.exists() {
        eprintln!(
            "error: {} is missing; build the Rust hooks plugin with the same profile first:\n  \
             cargo build --release -p hearth-plugin --example hooks",
            rust_hooks.display()
        );
        std::process::exit(2);
    }
    let script = Script::from_value(json!({"steps": [
        {"match": "plain", "content": "Done."},
        {"match": "tool", "after_tool": false, "tool_calls": [{"name": "tool_ping", "arguments": {}}]},
        {"match": "tool", "after_tool": true, "content": "Done: {tool_results}"}
    ]}))
    .unwrap();
    let stock = ScriptedLlm::start(script.clone());
    let nodelay = NodelayLlm::start(script);
    let url = if stock_llm {
        stock.base_url()
    } else {
        nodelay.url.clone()
    };
    println!("## 1. Pipeline overhead per message\n");
    println!(
        "Client wall time of Agent.Chat to the Final event, µs; {messages} messages per row after {warmup} warm-up, \
         the brokers' messages interleaved; history: {}. Python {}.\n",
        if keep_history { "kept (one conversation per row)" } else { "fresh (a new conversation per message)" },
        python()
    );
    println!(
        "LLM: {} at {url}.\n",
        if stock_llm {
            "`ScriptedLlm` as is (Nagle on: SSE events after the first wait for a delayed ACK)"
        } else {
            "`hearth_scripted::serve` on a listener with TCP_NODELAY"
        }
    );

    let tool_plugin = || hooks("rs", "tool", "", &rust_hooks);
    let (none, none_pids) = start_broker(vec![], &url).await;
    let (base, base_pids) = start_broker(vec![tool_plugin()], &url).await;
    let (hooked, hooked_pids) = start_broker(
        vec![
            tool_plugin(),
            hooks("py", "hk_py", "trace", &rust_hooks),
            hooks("nd", "hk_nd", "trace", &rust_hooks),
            hooks("rs", "hk_rs", "trace", &rust_hooks),
        ],
        &url,
    )
    .await;
    let mut setups = vec![
        Setup {
            label: "none (no plugins)",
            broker: none,
            pids: none_pids,
            kinds: vec!["plain"],
        },
        Setup {
            label: "baseline (hook-less tool plugin)",
            broker: base,
            pids: base_pids,
            kinds: vec!["plain", "tool"],
        },
        Setup {
            label: "hooked (+ py, js, rs hooks, 7 stages each)",
            broker: hooked,
            pids: hooked_pids,
            kinds: vec!["plain", "tool"],
        },
    ];
    let mut all_pids: Vec<u32> = setups
        .iter()
        .flat_map(|s| s.pids.iter().map(|(_, p)| *p))
        .collect();

    // results[setup][kind]
    let mut results: Vec<Vec<KindResult>> = Vec::new();
    for s in &setups {
        results.push(
            s.kinds
                .iter()
                .map(|k| (*k, Samples::default(), vec![]))
                .collect(),
        );
    }
    let load_before = loadavg();
    let started_all = Instant::now();
    for kind in ["plain", "tool"] {
        let mut seq = 0usize;
        let mut user = |i: usize, label: &str| {
            seq += 1;
            if keep_history {
                format!("{label}-{kind}")
            } else {
                format!("{label}-{kind}-{i}-{seq}")
            }
        };
        for i in 0..warmup {
            for s in setups.iter_mut().filter(|s| s.kinds.contains(&kind)) {
                let u = user(i, s.label.split(' ').next().unwrap());
                chat(&mut s.broker, &format!("{kind} {i}"), &u).await;
            }
        }
        let cpu_before: Vec<Vec<u64>> = setups
            .iter()
            .map(|s| s.pids.iter().map(|(_, p)| cpu_us(*p)).collect())
            .collect();
        for i in 0..messages {
            for (si, s) in setups.iter_mut().enumerate() {
                let Some(ki) = s.kinds.iter().position(|k| *k == kind) else {
                    continue;
                };
                let u = user(warmup + i, s.label.split(' ').next().unwrap());
                let t = chat(&mut s.broker, &format!("{kind} {i}"), &u).await;
                let r = &mut results[si][ki].1;
                r.total.push(t.total);
                r.last_delta.push(t.last_delta);
                if let Some(x) = t.tool_us {
                    r.tool_us.push(x);
                }
            }
        }
        for (si, s) in setups.iter().enumerate() {
            let Some(ki) = s.kinds.iter().position(|k| *k == kind) else {
                continue;
            };
            results[si][ki].2 = s
                .pids
                .iter()
                .zip(&cpu_before[si])
                .map(|((n, p), b)| (n.clone(), (cpu_us(*p) - b) as f64 / messages as f64))
                .collect();
        }
    }
    let took = started_all.elapsed();
    let load_after = loadavg();

    println!("| kind | broker | messages | mean | min | p50 | p90 | p99 | max |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut medians = std::collections::BTreeMap::new();
    for kind in ["plain", "tool"] {
        for (si, s) in setups.iter().enumerate() {
            let Some(ki) = s.kinds.iter().position(|k| *k == kind) else {
                continue;
            };
            let t = summarize(results[si][ki].1.total.clone());
            medians.insert((kind, si), t);
            println!(
                "| {kind} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                s.label, t.n, t.mean, t.min, t.p50, t.p90, t.p99, t.max
            );
        }
    }
    println!("\nHooks' cost = hooked − baseline (difference of medians; p99 difference for reference). Hook invocations per message: plain 5 stages × 3 plugins = 15, tool 8 stage runs (post_action twice, before/after_toolcall once) × 3 = 24; after_output's 3 run concurrently.\n");
    println!("| kind | baseline p50 | hooked p50 | Δ p50 | Δ p50 per hook invocation | baseline p99 | hooked p99 | Δ p99 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (kind, invocations) in [("plain", 15.0), ("tool", 24.0)] {
        let b = medians[&(kind, 1)];
        let h = medians[&(kind, 2)];
        println!(
            "| {kind} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            b.p50,
            h.p50,
            h.p50 - b.p50,
            (h.p50 - b.p50) / invocations,
            b.p99,
            h.p99,
            h.p99 - b.p99
        );
    }
    let n0 = medians[&("plain", 0)];
    let n1 = medians[&("plain", 1)];
    println!(
        "\nplain, none vs baseline (a registered tool that is not called): p50 {:.0} vs {:.0} µs.\n",
        n0.p50, n1.p50
    );

    println!("Where the time goes (p50, µs): to the first text delta of the final answer (everything before the last LLM round's stream, plus that round's first chunk), Final − that delta (end of stream, before_output, after_output, history write), and the broker's `elapsed_us` of the tool call (before_toolcall + plugin call + after_toolcall).\n");
    println!("| kind | broker | first delta of the answer | Final − first delta | tool call elapsed_us |");
    println!("|---|---|---:|---:|---:|");
    for kind in ["plain", "tool"] {
        for (si, s) in setups.iter().enumerate() {
            let Some(ki) = s.kinds.iter().position(|k| *k == kind) else {
                continue;
            };
            let r = &results[si][ki].1;
            let d = summarize(r.last_delta.clone());
            let rest = summarize(
                r.total
                    .iter()
                    .zip(&r.last_delta)
                    .map(|(t, d)| t - d)
                    .collect(),
            );
            let tool = if r.tool_us.is_empty() {
                "–".to_string()
            } else {
                format!("{:.0}", summarize(r.tool_us.clone()).p50)
            };
            println!(
                "| {kind} | {} | {:.0} | {:.0} | {tool} |",
                s.label, d.p50, rest.p50
            );
        }
    }

    println!("\nCPU per message (utime+stime from /proc over the measured messages, µs/message; 10 ms tick, so ±{:.0} µs at {messages} messages).\n", 10_000.0 / messages as f64);
    println!("| kind | broker | process | CPU µs/message |");
    println!("|---|---|---|---:|");
    for kind in ["plain", "tool"] {
        for (si, s) in setups.iter().enumerate() {
            let Some(ki) = s.kinds.iter().position(|k| *k == kind) else {
                continue;
            };
            for (name, c) in &results[si][ki].2 {
                println!("| {kind} | {} | {name} | {c:.0} |", s.label);
            }
        }
    }

    println!("\nThe scripted server's own answer time: direct streamed POSTs from this process (reqwest, keep-alive), {messages} requests after {} warm-up, whole body read, µs.\n", messages / 10);
    println!("| server | request | mean | p50 | p90 | p99 | max |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (server, base) in [
        ("TCP_NODELAY listener", nodelay.url.clone()),
        ("`ScriptedLlm` as is", stock.base_url()),
    ] {
        for (what, with_tool) in [
            ("plain answer (role, 1 content chunk, finish, usage)", false),
            ("answer after a tool result (3 content chunks)", true),
        ] {
            let s = scripted_server_time(&base, messages, with_tool).await;
            println!(
                "| {server} | {what} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                s.mean, s.p50, s.p90, s.p99, s.max
            );
        }
    }
    println!(
        "\nPipeline part: {:.1} s; loadavg before {load_before}, after {load_after}.\n",
        took.as_secs_f64()
    );

    // Stop the brokers; every process they started must be gone.
    let mut bpids = Vec::new();
    for s in setups.drain(..) {
        bpids.push(s.broker.pid());
        drop(s.broker);
    }
    drop(stock);
    nodelay.stop().await;
    all_pids.sort_unstable();
    all_pids.dedup();
    let left = wait_gone(&all_pids, Duration::from_secs(10));
    if left.is_empty() {
        println!(
            "cleanup: the 3 brokers and the {} plugin processes are gone.\n",
            all_pids.len() - bpids.len()
        );
        true
    } else {
        println!("cleanup: STILL RUNNING after stop: {left:?}\n");
        false
    }
}

fn main() {
    harness::quiet_brokers();
    if std::env::var_os(raw::RAW_PLUGIN_ENV).is_some() {
        raw::raw_plugin_main();
        return;
    }
    let messages = env_num("HEARTH_BENCH_MESSAGES", 500) as usize;
    let warmup = env_num("HEARTH_BENCH_WARMUP", 50) as usize;
    let keep_history = match std::env::var("HEARTH_BENCH_HISTORY").as_deref() {
        Ok("keep") => true,
        Ok("fresh") | Err(_) => false,
        Ok(other) => panic!("HEARTH_BENCH_HISTORY={other:?}: use fresh or keep"),
    };
    let stock_llm = match std::env::var("HEARTH_BENCH_LLM").as_deref() {
        Ok("stock") => true,
        Ok("nodelay") | Err(_) => false,
        Ok(other) => panic!("HEARTH_BENCH_LLM={other:?}: use nodelay or stock"),
    };
    let parts = std::env::var("HEARTH_BENCH_PART")
        .unwrap_or_else(|_| "pipeline,sdk,hooks,concurrency,fairness,memory".into());
    if parts == "adapter" {
        eprintln!(
            "the adapter part moved to its own bench: cargo bench -p hearth-broker --bench adapters"
        );
        std::process::exit(2);
    }
    let part = |p: &str| parts.split(',').any(|x| x.trim() == p);
    let sizes: Vec<usize> = std::env::var("HEARTH_BENCH_CONVERSATIONS")
        .unwrap_or_else(|_| "1,10,100,1000".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("HEARTH_BENCH_CONVERSATIONS: numbers")
        })
        .collect();
    let secs = env_num("HEARTH_BENCH_SECS", 10);
    let flood = env_num("HEARTH_BENCH_FLOOD", 500) as usize;
    let waiting = env_num("HEARTH_BENCH_WAITING", 1000) as usize;
    assert!(messages > 0, "HEARTH_BENCH_MESSAGES must be > 0");

    println!("# Hearth agent benchmark\n");
    println!("{}", machine());
    println!("broker: {}", env!("CARGO_BIN_EXE_hearth"));
    println!(
        "messages={messages} warmup={warmup} history={} llm={}\n",
        if keep_history { "keep" } else { "fresh" },
        if stock_llm { "stock" } else { "nodelay" },
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let rust_hooks = std::path::Path::new(env!("CARGO_BIN_EXE_hearth"))
        .parent()
        .unwrap()
        .join("examples/hooks");
    let clean = rt.block_on(async {
        let mut clean = true;
        if part("pipeline") {
            clean &= pipeline(messages, warmup, keep_history, stock_llm).await;
        }
        if part("sdk") {
            agent_load::sdk_trips(messages * 5, &rust_hooks).await;
        }
        if part("hooks") {
            agent_load::hook_cost(messages, warmup, &rust_hooks).await;
        }
        if part("concurrency") {
            agent_load::concurrency(&rust_hooks, &sizes, Duration::from_secs(secs)).await;
        }
        if part("fairness") {
            agent_load::fairness(flood).await;
        }
        if part("memory") {
            agent_load::memory(waiting).await;
        }
        clean
    });
    drop(rt);
    if !clean {
        std::process::exit(1);
    }
}
