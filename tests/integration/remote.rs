//! Issue 17: plugins on plugin hosts (`hearth node`) over NATS, with real processes — a
//! `nats-server` on 127.0.0.1, a broker, and nodes whose NATS connections come from
//! 127.0.0.2 and 127.0.0.3 (`[nats] local_address`), each with its own data dir and real
//! plugin processes.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hearth_broker::cli::AdminConn;
use hearth_proto::v1::{
    call_tool_event, CallToolRequest, ListToolsRequest, PluginState, PluginStatus,
};
use serde_json::{json, Value};

use crate::harness::{final_of, python, repo, stress, Broker, PluginDir};
use crate::nats::NatsServer;

/// A running `hearth node`; SIGKILLed on drop if still running.
pub struct Node {
    pub root: tempfile::TempDir,
    pub child: Option<Child>,
    pub name: String,
    /// Extra `hearth node` arguments (e.g. `--http-listen`).
    pub args: Vec<String>,
}

impl Node {
    /// Starts `hearth node --nats URL --node-name NAME` with `plugins`, its NATS client
    /// bound to `local` (e.g. `127.0.0.2`).
    pub fn spawn(url: &str, name: &str, local: &str, plugins: &[PluginDir]) -> Node {
        Node::spawn_as(url, name, local, "", plugins)
    }

    /// [`Node::spawn`] with `nats_keys` (e.g. its login) in its `[nats]` table.
    pub fn spawn_as(
        url: &str,
        name: &str,
        local: &str,
        nats_keys: &str,
        plugins: &[PluginDir],
    ) -> Node {
        Node::prepare(name, local, nats_keys, plugins).start(url)
    }

    /// A node's data dir, hearth.toml and plugins, not started yet ([`Node::start`]).
    pub fn prepare(name: &str, local: &str, nats_keys: &str, plugins: &[PluginDir]) -> Node {
        let root = tempfile::Builder::new()
            .prefix("hearth-node")
            .tempdir_in("/tmp")
            .unwrap();
        let node = Node {
            root,
            child: None,
            name: name.into(),
            args: Vec::new(),
        };
        node.write_plugins(plugins);
        let data = node.data_dir();
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(
            data.join("hearth.toml"),
            format!("[nats]\nlocal_address = \"{local}\"\n{nats_keys}\n"),
        )
        .unwrap();
        node
    }

    fn write_plugins(&self, plugins: &[PluginDir]) {
        let plugin_root = self.root.path().join("plugins");
        let _ = std::fs::remove_dir_all(&plugin_root);
        for p in plugins {
            let dir = plugin_root.join(&p.dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("plugin.json"), p.manifest.to_string()).unwrap();
            crate::harness::not_shared(&dir);
        }
        std::fs::create_dir_all(&plugin_root).unwrap();
        crate::harness::not_shared(&plugin_root);
    }

    /// Starts `hearth node` (again) on `url`.
    pub fn start(mut self, url: &str) -> Node {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.path().join("node.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .arg("--data-dir")
            .arg(self.data_dir())
            .args([
                "node",
                "--nats",
                url,
                "--node-name",
                &self.name,
                "--plugins",
            ])
            .arg(self.root.path().join("plugins"))
            .args(&self.args)
            .env("HEARTH_PYTHON", python())
            .env("NODE_PATH", repo().join("node_modules"))
            .env("HEARTH_LOG", "info,hearth_broker=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn hearth node");
        self.child = Some(child);
        self
    }

    /// Stops the node (SIGTERM) and starts it again with `plugins` instead.
    pub fn restart_with(mut self, url: &str, plugins: &[PluginDir]) -> Node {
        self.signal(libc::SIGTERM);
        self.wait_exit(Duration::from_secs(20));
        self.write_plugins(plugins);
        self.start(url)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("node.log")).unwrap_or_default()
    }

    pub fn signal(&self, signal: i32) {
        if let Some(c) = &self.child {
            unsafe {
                libc::kill(c.id() as i32, signal);
            }
        }
    }

    /// Waits for the node process to exit (panics after `within`): its exit status,
    /// `None` if it was not running.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            if started.elapsed() > within {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "node {} did not exit within {within:?}\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An admin client of the node's own socket.
    pub async fn admin(&self) -> AdminConn {
        let started = Instant::now();
        loop {
            if self.data_dir().join("admin.token").exists() {
                if let Ok(c) = AdminConn::connect(&self.data_dir()).await {
                    return c;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "node {} did not come up:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many tool calls this node's router answered (its debug log).
    pub fn calls_answered(&self) -> usize {
        self.log().matches("tool call answered").count()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            crate::harness::terminate(child);
        }
    }
}

/// A broker named `b1` with no plugins of its own, on `nats` (its client from
/// 127.0.0.1), with `args`; `toml` goes into its hearth.toml before `[nats]`.
async fn broker(nats: &NatsServer, args: &[&str], toml: &str) -> Broker {
    broker_as(nats, args, toml, "name = \"b1\"").await
}

/// [`broker`] with `nats_keys` (e.g. its name and login) in its `[nats]` table.
async fn broker_as(nats: &NatsServer, args: &[&str], toml: &str, nats_keys: &str) -> Broker {
    let mut all = vec!["--nats", nats.url()];
    all.extend_from_slice(args);
    let toml = format!("{toml}\n[nats]\nlocal_address = \"127.0.0.1\"\n{nats_keys}\n");
    Broker::spawn_with_files(vec![], &all, &[("hearth.toml", &toml)]).await
}

/// Waits until `plugin` is served by exactly `nodes` (sorted names) as the broker sees it.
pub async fn wait_nodes(b: &mut Broker, plugin: &str, nodes: &[&str]) -> PluginStatus {
    let want: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
    b.wait_for(
        plugin,
        Duration::from_secs(60),
        &format!("served by {want:?}"),
        |p| p.remote.iter().map(|r| r.node.clone()).collect::<Vec<_>>() == want,
    )
    .await
}

/// The broker's `tools list`.
async fn tool_infos(b: &mut Broker) -> Vec<hearth_proto::v1::ToolInfo> {
    let req = b.admin.with_token(ListToolsRequest {});
    let tools = b.admin.client().list_tools(req).await.unwrap();
    tools.into_inner().tools
}

/// One tool call's outcome: Ok(content) or Err(error text).
async fn call(
    admin: &mut AdminConn,
    tool: &str,
    args: Value,
    timeout_ms: u32,
) -> Result<String, String> {
    let req = admin.with_token(CallToolRequest {
        name: tool.into(),
        args_json: args.to_string(),
        timeout_ms,
        ..Default::default()
    });
    match admin.client().call_tool(req).await {
        Ok(r) => {
            let r = r.into_inner();
            if r.success {
                Ok(r.content)
            } else {
                Err(r.error)
            }
        }
        Err(status) => Err(status.message().to_string()),
    }
}

/// A successful call's content as JSON (panics on an error).
fn as_json(got: Result<String, String>) -> Value {
    let text = got.unwrap_or_else(|e| panic!("call failed: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn st(faults: &str) -> PluginDir {
    stress("py", "st", faults, json!({}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_served_by_two_nodes_gets_calls_on_both() {
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let bn = Node::spawn(nats.url(), "b", "127.0.0.3", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    let status = wait_nodes(&mut b, "st", &["a", "b"]).await;
    assert_eq!(status.runtime, "remote");
    assert_eq!(status.state, PluginState::Ready as i32);
    assert!(status.tools.contains(&"st_echo".to_string()), "{status:?}");

    // One tool with two instances, and where they run.
    let tools = tool_infos(&mut b).await;
    let echo = tools.iter().find(|t| t.name == "st_echo").unwrap();
    assert_eq!(echo.hosts, vec!["a", "b"]);
    let (code, out, _) = b.cli(&["plugins", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("on 2 plugin hosts: a (pid"), "{out}");
    // `hearth plugins` works against a node as against a broker.
    let mut na = a.admin().await;
    let req = na.with_token(hearth_proto::v1::ListPluginsRequest {});
    let on_a = na
        .client()
        .list_plugins(req)
        .await
        .unwrap()
        .into_inner()
        .plugins;
    assert_eq!(on_a.len(), 1);
    assert_eq!(
        (on_a[0].name.as_str(), on_a[0].runtime.as_str()),
        ("st", "python")
    );
    assert_eq!(on_a[0].state, PluginState::Ready as i32);

    // 64 calls, 8 at a time: all answered, by both nodes.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut admin = Broker::admin_clone(&b);
        tasks.push(tokio::spawn(async move {
            for j in 0..8 {
                let got = call(&mut admin, "st_echo", json!({"i": i, "j": j}), 10_000).await;
                assert_eq!(as_json(got), json!({"i": i, "j": j}));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (on_a, on_b) = (a.calls_answered(), bn.calls_answered());
    assert_eq!(on_a + on_b, 64, "a {on_a}, b {on_b}");
    assert!(
        on_a > 0 && on_b > 0,
        "both nodes take calls: a {on_a}, b {on_b}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_fails_its_calls_fast_and_the_other_node_takes_new_ones() {
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let bn = Node::spawn(nats.url(), "b", "127.0.0.3", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a", "b"]).await;

    // 12 callers, each a loop of 300 ms calls, for 4 s; node a is SIGKILLed at 1.5 s.
    let started = Instant::now();
    let kill_at = Duration::from_millis(1500);
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let mut admin = Broker::admin_clone(&b);
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            while started.elapsed() < Duration::from_secs(4) {
                let t0 = started.elapsed();
                let r = call(&mut admin, "st_sleep", json!({"ms": 300}), 20_000).await;
                outcomes.push((t0, started.elapsed(), r));
            }
            outcomes
        }));
    }
    tokio::time::sleep(kill_at).await;
    a.signal(libc::SIGKILL);
    let killed = started.elapsed();
    let mut all = Vec::new();
    for t in tasks {
        // No call hangs: every caller finishes its loop.
        all.extend(
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("a call hung")
                .unwrap(),
        );
    }
    let failed: Vec<_> = all.iter().filter(|(_, _, r)| r.is_err()).collect();
    for (t0, t1, r) in &failed {
        let e = r.as_ref().unwrap_err();
        assert!(
            *t0 < killed,
            "only calls in flight at the kill fail: {e} (started {t0:?}, kill {killed:?})"
        );
        // A call the node had for less than 1 ms (no `Accepted` yet) when it died
        // fails after the ack timeout, saying no node answered; the others name it.
        assert!(
            e.contains("plugin st on node a was lost")
                || e.contains("plugin st got no answer from any node within 1000 ms"),
            "the error names plugin and node: {e}"
        );
        assert!(
            *t1 < killed + Duration::from_secs(2),
            "failed within 2 s of the kill: {e} at {t1:?} (kill {killed:?})"
        );
    }
    // Every call started 1 s after the kill succeeded (on node b).
    let late: Vec<_> = all
        .iter()
        .filter(|(t0, _, _)| *t0 > killed + Duration::from_secs(1))
        .collect();
    assert!(!late.is_empty());
    for (t0, _, r) in late {
        assert!(
            r.is_ok(),
            "a call started at {t0:?} (kill {killed:?}) failed: {r:?}\nbroker:\n{}",
            b.log()
        );
    }
    assert!(all.iter().filter(|(_, _, r)| r.is_ok()).count() > 50);
    // The broker forgets the node.
    wait_nodes(&mut b, "st", &["b"]).await;
    drop(bn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_crash_on_a_node_fails_its_call_at_once_and_the_plugin_restarts() {
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("crash_mid_call")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    let t0 = Instant::now();
    let err = call(&mut b.admin, "st_sleep", json!({"ms": 1000}), 20_000)
        .await
        .expect_err("the plugin crashes mid-call");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        err.contains("plugin st on node a") && err.contains("exit status 1"),
        "names plugin, node and exit: {err}"
    );
    // Restarted on its node, as locally: its tools stay offered meanwhile, and a call
    // made at once waits for the new process.
    let got = call(&mut b.admin, "st_echo", json!({"x": 1}), 10_000).await;
    assert_eq!(as_json(got), json!({"x": 1}), "{}", a.log());
    let p = b
        .wait_for("st", Duration::from_secs(30), "restarted once", |p| {
            p.remote.first().is_some_and(|r| r.restarts >= 1)
        })
        .await;
    assert_eq!(p.state, PluginState::Ready as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_cancel_and_progress_cross_the_hop() {
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;

    // Progress every 100 ms keeps a 400 ms timeout alive for a 1.5 s call, and reaches
    // the caller.
    let req = b.admin.with_token(CallToolRequest {
        name: "st_sleep".into(),
        args_json: json!({"ms": 1500, "progress_ms": 100}).to_string(),
        timeout_ms: 400,
        ..Default::default()
    });
    let mut stream = b
        .admin
        .client()
        .call_tool_stream(req)
        .await
        .unwrap()
        .into_inner();
    let (mut progress, mut result) = (0, None);
    while let Some(ev) = stream.message().await.unwrap() {
        match ev.event {
            Some(call_tool_event::Event::Progress(_)) => progress += 1,
            Some(call_tool_event::Event::Result(r)) => result = Some(r),
            None => {}
        }
    }
    let result = result.unwrap();
    assert!(result.success, "{}\n{}", result.error, b.log());
    assert!(progress >= 5, "{progress} progress events");

    // Without progress the timeout fires, names the node, and the plugin is cancelled.
    let t0 = Instant::now();
    let err = call(&mut b.admin, "st_sleep", json!({"ms": 5000}), 300)
        .await
        .expect_err("times out");
    assert!(
        t0.elapsed() < Duration::from_millis(2000),
        "{:?}",
        t0.elapsed()
    );
    assert!(
        err.contains("timed out after 300 ms") && err.contains("node a"),
        "{err}"
    );
    let started = Instant::now();
    while !a.log().contains("st_sleep: cancelled") {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the plugin was not cancelled:\n{}",
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_hooks_and_tools_of_a_remote_plugin_run_in_the_agent() {
    let nats = NatsServer::plain();
    let hooks = PluginDir {
        dir: "guard".into(),
        manifest: json!({"name": "guard", "runtime": "python",
            "entry": repo().join("tests/plugins/hooks.py"),
            "env": {"HOOKS": "block=mallory,rewrite_output"}}),
    };
    let _a = Node::spawn(nats.url(), "a", "127.0.0.2", &[hooks]);
    let llm = hearth_scripted::ScriptedLlm::start(
        hearth_scripted::Script::from_value(json!({"steps": [
            {"after_tool": false, "tool_calls": [{"name": "guard_ping", "arguments": {}}]},
            {"after_tool": true, "content": "done: {tool_results}"}
        ]}))
        .unwrap(),
    );
    let url = llm.base_url();
    let mut b = broker(&nats, &["--llm-url", &url], "").await;
    wait_nodes(&mut b, "guard", &["a"]).await;

    let f = final_of(&b.chat("hello", "mallory").await);
    assert!(
        f.text.contains("blocked by guard"),
        "on_input on the node: {}",
        f.text
    );
    let f = final_of(&b.chat("hello", "bob").await);
    assert!(
        f.text.contains("pong from guard"),
        "the remote tool ran: {}",
        f.text
    );
    assert!(
        f.text.ends_with("(checked by guard)"),
        "before_output on the node: {}",
        f.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_services_of_remote_plugins_pass_the_shared_cases_through_the_broker() {
    use crate::host::{assert_clean, case_plugin, cases_file, report, ALL_CAPABILITIES, SOURCES};
    // The cases of tests/host_cases.json, run by plugins on a node: every host service
    // (settings, memory, TextMemory, DocMemory, knowledge, LLM sources, input, MCP) and
    // every capability refusal, stored and decided by the broker.
    let nats = NatsServer::plain();
    let file = cases_file();
    let (cases, refusals) = (
        file["cases"].as_array().unwrap().len(),
        file["refusals"].as_array().unwrap().len(),
    );
    let plugins = [
        case_plugin("py", "hc_peer", "other", "", None),
        case_plugin("py", "hc", "runner", "hc_peer", Some(&ALL_CAPABILITIES)),
        case_plugin("py", "hc_nocap", "nocap", "hc_peer", Some(&[])),
    ];
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &plugins);
    let mut b = broker(&nats, &[], SOURCES).await;
    for name in ["hc_peer", "hc", "hc_nocap"] {
        wait_nodes(&mut b, name, &["a"]).await;
    }
    let ran = report(&mut b, "hc").await;
    let refused = report(&mut b, "hc_nocap").await;
    assert_clean(&[
        (&ran, "py on node a", "cases", cases),
        (&refused, "py on node a", "refusals", refusals),
    ]);
    // The broker wrote the runner's TextMemory appends; refusals name the capability.
    assert!(b.text_memory().contains("(hc)"), "{}", b.text_memory());
    assert!(
        b.log().contains("capability `settings_core` not granted"),
        "{}",
        b.log()
    );
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_with_a_changed_plugin_changes_the_brokers_tools() {
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    assert!(b.tools().await.contains(&"st_echo".to_string()));

    // The same plugin name, now with other tools (another tool prefix).
    let changed = stress("py", "st", "", json!({"env": {"HEARTH_TOOL_PREFIX": "v2"}}));
    let _a = a.restart_with(nats.url(), &[changed]);
    let started = Instant::now();
    loop {
        let tools = b.tools().await;
        if tools.contains(&"v2_echo".to_string()) && !tools.contains(&"st_echo".to_string()) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "tools did not follow: {tools:?}\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = call(&mut b.admin, "v2_echo", json!({"v": 2}), 10_000).await;
    assert_eq!(as_json(got), json!({"v": 2}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linkzone_triggers_inject_and_tools_of_remote_plugins_answer_as_local_ones() {
    use crate::inject::{lz_llm, lz_plugins, lz_round_trip};
    let nats = NatsServer::plain();
    let _a = Node::spawn(nats.url(), "a", "127.0.0.2", &lz_plugins("py"));
    let llm = lz_llm();
    let url = llm.base_url();
    let mut b = broker(&nats, &["--llm-url", &url], "").await;
    wait_nodes(&mut b, "translate", &["a"]).await;
    wait_nodes(&mut b, "weather", &["a"]).await;
    let remote = lz_round_trip(&mut b, &llm, "py on node a").await;
    let llm = lz_llm();
    let mut local = Broker::with_llm(lz_plugins("py"), &llm, &[]).await;
    let here = lz_round_trip(&mut local, &llm, "py").await;
    assert_eq!(remote, here, "remote and local plugins answer alike");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_results_cross_in_pieces_and_oversized_arguments_are_refused_by_name() {
    let nats = NatsServer::plain();
    let _a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    // 3 MB: six pieces on a server whose max_payload is 1 MiB.
    let got = call(&mut b.admin, "st_big", json!({"bytes": 3_000_000}), 30_000).await;
    let text = got.unwrap_or_else(|e| panic!("{e}\n{}", b.log()));
    assert_eq!(text.len(), 3_000_000);
    assert!(text.bytes().all(|c| c == b'x'));
    // 2 MB of arguments cannot be sent: the error says why, and nothing hangs.
    let big = "y".repeat(2_000_000);
    let err = call(&mut b.admin, "st_echo", json!({"s": big}), 10_000)
        .await
        .expect_err("refused");
    assert!(
        err.contains("max_payload") && err.contains("not sent"),
        "{err}"
    );
    // The plugin still serves.
    assert_eq!(
        as_json(call(&mut b.admin, "st_echo", json!({"ok": 1}), 10_000).await),
        json!({"ok": 1})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_fails_its_calls_in_flight_and_rejoins_when_it_resumes() {
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let _bn = Node::spawn(nats.url(), "b", "127.0.0.3", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a", "b"]).await;
    // Six 4 s calls spread over both nodes; then node a freezes (as if cut off).
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let mut admin = Broker::admin_clone(&b);
        tasks.push(tokio::spawn(async move {
            let r = call(&mut admin, "st_sleep", json!({"ms": 4000}), 20_000).await;
            (started.elapsed(), r)
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    a.signal(libc::SIGSTOP);
    let stopped = started.elapsed();
    let mut failed = 0;
    for t in tasks {
        let (at, r) = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a call hung")
            .unwrap();
        match r {
            Ok(_) => assert!(at > Duration::from_secs(4), "{at:?}"),
            Err(e) => {
                failed += 1;
                assert!(e.contains("node a") && e.contains("probes"), "{e}");
                assert!(
                    at < stopped + Duration::from_millis(2500),
                    "failed {at:?}, frozen at {stopped:?}"
                );
            }
        }
    }
    assert!(failed > 0, "some calls were on node a");
    // Once the server dropped the frozen node, calls go to b.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for i in 0..6 {
        let got = call(&mut b.admin, "st_echo", json!({"i": i}), 10_000).await;
        assert_eq!(as_json(got), json!({"i": i}), "{}", b.log());
    }
    // Resumed, it reconnects and is offered again.
    a.signal(libc::SIGCONT);
    wait_nodes(&mut b, "st", &["a", "b"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_nats_permissions_serve_calls_and_refuse_a_nodes_forged_call() {
    // The accounts block of deploy/nats/nats-server.conf, as written (passwords set).
    let conf = std::fs::read_to_string(repo().join("deploy/nats/nats-server.conf")).unwrap();
    let accounts = &conf[conf.find("\naccounts {").expect("an accounts block")..];
    let accounts = accounts
        .replace("$HEARTH_NATS_BROKER_1_PASSWORD", "\"b-secret\"")
        .replace("$HEARTH_NATS_NODE_GPU_1_PASSWORD", "\"n-secret\"");
    let nats = NatsServer::start(crate::nats::NatsServerConfig {
        extra: accounts,
        ..Default::default()
    });
    let probe = PluginDir {
        dir: "probe".into(),
        manifest: json!({"name": "probe", "runtime": "python",
            "entry": repo().join("tests/plugins/host_probe.py")}),
    };
    let node_login = "user = \"node-gpu-1\"\npassword = \"n-secret\"";
    let a = Node::spawn_as(
        nats.url(),
        "gpu-1",
        "127.0.0.2",
        node_login,
        &[st(""), probe],
    );
    let mut b = broker_as(
        &nats,
        &[],
        "",
        "name = \"broker-1\"\nuser = \"broker-1\"\npassword = \"b-secret\"",
    )
    .await;
    wait_nodes(&mut b, "st", &["gpu-1"]).await;
    wait_nodes(&mut b, "probe", &["gpu-1"]).await;

    // Calls, progress, a host call and its answer all pass the permissions.
    assert_eq!(
        as_json(call(&mut b.admin, "st_echo", json!({"x": 1}), 10_000).await),
        json!({"x": 1})
    );
    let set = json!({"call": "settings.set", "args": ["k", "v"], "kwargs": {}});
    assert_eq!(
        as_json(call(&mut b.admin, "probe_host", set, 20_000).await),
        json!({"ok": null})
    );
    let get = json!({"call": "settings.get", "args": ["k"], "kwargs": {}});
    assert_eq!(
        as_json(call(&mut b.admin, "probe_host", get, 20_000).await),
        json!({"ok": "v"})
    );
    let answered = a.calls_answered();

    // A client with the node's credentials forges a call: the server refuses it and
    // the node never runs it.
    let cfg = hearth_broker::nats::NatsConfig {
        url: Some(nats.url().into()),
        user: Some("node-gpu-1".into()),
        password: Some("n-secret".into()),
        ..Default::default()
    };
    let rogue = hearth_broker::nats::connect(&cfg).await.unwrap();
    let forged = hearth_broker::remote::encode(&hearth_proto::v1::NodeCall {
        broker: "broker-1".into(),
        attempt: 1,
        msg: Some(hearth_proto::v1::HostMessage {
            msg: Some(hearth_proto::v1::host_message::Msg::InvokeTool(
                hearth_proto::v1::InvokeTool {
                    call_id: 4242,
                    tool: "st_echo".into(),
                    args_json: "{}".into(),
                    ..Default::default()
                },
            )),
        }),
    });
    rogue
        .publish_with_reply(
            "hearth.call.st.tool.st_echo",
            "hearth.r.broker-1.4242",
            forged,
        )
        .await
        .unwrap();
    rogue.flush().await.unwrap();
    let started = Instant::now();
    let violation = |log: &str| {
        log.lines()
            .any(|l| l.contains("Violation") && l.contains("hearth.call.st.tool.st_echo"))
    };
    while !violation(&nats.log()) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no violation logged:\n{}",
            nats.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        a.calls_answered(),
        answered,
        "the node ran a forged call:\n{}",
        a.log()
    );

    // A node whose name its NATS user may not speak as stops at start, naming the
    // refused subjects and the flag, instead of running unheard.
    let mut misnamed = Node::spawn_as(nats.url(), "gpu-2", "127.0.0.3", node_login, &[st("")]);
    let status = misnamed.wait_exit(Duration::from_secs(20)).unwrap();
    let log = misnamed.log();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("Permissions Violation") && log.contains("hearth.node.gpu-2.ping"),
        "{log}"
    );
    assert!(log.contains("--node-name"), "{log}");
    // So does a broker whose name its user may not read replies for.
    let (status, log) = run_to_exit(
        &[
            "run",
            "--nats",
            nats.url(),
            "--plugins",
            misnamed.root.path().join("plugins").to_str().unwrap(),
        ],
        "[nats]\nname = \"broker-2\"\nuser = \"broker-1\"\npassword = \"b-secret\"\n",
    );
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("Permissions Violation") && log.contains("hearth.r.broker-2.>"),
        "{log}"
    );
    assert!(log.contains("[nats] name"), "{log}");
    // The right node and broker were not disturbed.
    assert_eq!(
        as_json(call(&mut b.admin, "st_echo", json!({"x": 2}), 10_000).await),
        json!({"x": 2})
    );
}

/// Runs `hearth --data-dir TMP ARGS` with `toml` as its hearth.toml until it exits
/// (killed after 20 s): its status and stderr.
fn run_to_exit(args: &[&str], toml: &str) -> (std::process::ExitStatus, String) {
    let dir = tempfile::Builder::new()
        .prefix("hearth-exit")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::write(dir.path().join("hearth.toml"), toml).unwrap();
    let log = dir.path().join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(args)
        .env("HEARTH_PYTHON", python())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "hearth {args:?} did not exit within 20 s:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_name_is_one_process_and_a_replacement_waits_for_a_leaving_node() {
    let nats = NatsServer::plain();
    let mut a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;

    // A second process as node a stops at once naming the name; a keeps serving.
    let mut twin = Node::spawn(nats.url(), "a", "127.0.0.3", &[st("")]);
    let status = twin.wait_exit(Duration::from_secs(20)).unwrap();
    assert_eq!(status.code(), Some(1), "{}", twin.log());
    assert!(
        twin.log()
            .contains("another plugin host already runs as node \"a\""),
        "{}",
        twin.log()
    );
    assert_eq!(
        as_json(call(&mut b.admin, "st_echo", json!({"x": 1}), 10_000).await),
        json!({"x": 1})
    );

    // A replacement started while node a is leaving (its call still running) waits
    // for it, then serves.
    let mut admin = Broker::admin_clone(&b);
    let running =
        tokio::spawn(
            async move { call(&mut admin, "st_sleep", json!({"ms": 1500}), 20_000).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.signal(libc::SIGTERM);
    let t0 = Instant::now();
    while b.plugins().await.iter().any(|p| p.name == "st") {
        assert!(t0.elapsed() < Duration::from_secs(5), "{}", b.log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let next = Node::spawn(nats.url(), "a", "127.0.0.3", &[st("")]);
    let got = running.await.unwrap();
    assert!(got.is_ok(), "{got:?}\n{}", a.log());
    a.wait_exit(Duration::from_secs(20));
    wait_nodes(&mut b, "st", &["a"]).await;
    assert!(
        next.log().contains("waiting for the previous process"),
        "{}",
        next.log()
    );
    assert_eq!(
        as_json(call(&mut b.admin, "st_echo", json!({"x": 2}), 10_000).await),
        json!({"x": 2})
    );

    // Two processes announcing one name anyway (e.g. a user that may not probe its
    // own name): the broker says so and keeps one instead of flipping between them.
    let raw = hearth_broker::nats::connect(&crate::nats::nats_config(nats.url()))
        .await
        .unwrap();
    let announce = |boot: &str, seq: u64| {
        hearth_broker::remote::encode(&hearth_proto::v1::NodeAnnounce {
            node: "dup".into(),
            boot: boot.into(),
            seq,
            protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
            ..Default::default()
        })
    };
    for (boot, seq) in [("boot-1", 1), ("boot-2", 1), ("boot-1", 2), ("boot-2", 2)] {
        raw.publish("hearth.reg.dup", announce(boot, seq))
            .await
            .unwrap();
        raw.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t0 = Instant::now();
    while !b.log().contains("two plugin hosts run as node dup") {
        assert!(t0.elapsed() < Duration::from_secs(5), "{}", b.log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        b.log()
            .lines()
            .filter(|l| l.contains("NATS: node restarted") && l.contains("dup"))
            .count(),
        1,
        "the broker flipped between the two:\n{}",
        b.log()
    );

    // A node's --plugins that is not a directory is a typo: it stops.
    let (status, log) = run_to_exit(
        &[
            "node",
            "--nats",
            nats.url(),
            "--node-name",
            "typo",
            "--plugins",
            "/nonexistent/plugins",
        ],
        "",
    );
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("--plugins /nonexistent/plugins: not a directory"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operating_a_remote_only_plugin_on_the_broker_says_where_it_runs() {
    let nats = NatsServer::plain();
    // `bad` never starts on node a: it spends its crash budget there.
    let bad = stress(
        "py",
        "bad",
        "exit_before_hello",
        json!({"restart": {"max_restarts": 1, "window_s": 60, "backoff_initial_ms": 20, "backoff_max_ms": 50}}),
    );
    let _a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st(""), bad]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    for what in ["restart", "reload", "unload", "logs"] {
        let (code, _, err) = b.cli(&["plugins", what, "st"]);
        assert_ne!(code, 0, "{what}");
        assert!(
            err.contains("runs on plugin hosts (a)") && err.contains(&format!("plugins {what} st")),
            "{what}: {err}"
        );
    }
    let (_, _, err) = b.cli(&["plugins", "logs", "st"]);
    assert!(err.contains("read its logs there"), "{err}");

    // A plugin that failed on its node is listed on the broker, with the node's reason.
    let failed = b
        .wait_for("bad", Duration::from_secs(30), "failed", |p| {
            p.state == PluginState::Failed as i32
        })
        .await;
    assert_eq!(failed.runtime, "remote");
    assert!(
        failed.reason.contains("on a:") && failed.reason.contains("exit status 1"),
        "{failed:?}"
    );
    assert!(failed.tools.is_empty(), "{failed:?}");

    // A local plugin whose tools a remote plugin registered first: `plugins load`
    // says which tools were rejected and why.
    let clash = b.write_plugin(&stress(
        "py",
        "clash",
        "",
        json!({"env": {"HEARTH_FAULT": "", "HEARTH_TOOL_PREFIX": "st"}}),
    ));
    let (code, out, err) = b.cli(&["plugins", "load", clash.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("tool `st_echo` rejected") && out.contains("already registered by plugin st"),
        "{out}"
    );
    let (_, out, _) = b.cli(&["plugins", "list"]);
    assert!(out.contains("tool `st_echo` rejected"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_plugin_joins_the_brokers_trace() {
    let nats = NatsServer::plain();
    // Nothing listens on port 9: spans are made and their export fails quietly.
    let otel = PluginDir {
        dir: "otel_py".into(),
        manifest: json!({"name": "otel_py", "runtime": "python",
            "entry": repo().join("tests/plugins/otel/otel_py.py"),
            "env": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}}),
    };
    let _a = Node::spawn(nats.url(), "a", "127.0.0.2", &[otel]);
    let toml = "[nats]\nname = \"b1\"\nlocal_address = \"127.0.0.1\"\n";
    let mut b = Broker::spawn_with_env(
        vec![],
        &["--nats", nats.url()],
        &[("hearth.toml", toml)],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")],
    )
    .await;
    wait_nodes(&mut b, "otel_py", &["a"]).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut req = b.admin.with_token(CallToolRequest {
        name: "traced".into(),
        args_json: json!({"text": "hi"}).to_string(),
        timeout_ms: 30_000,
        ..Default::default()
    });
    req.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-00f067aa0ba902b7-01")
            .parse()
            .unwrap(),
    );
    let r = b.admin.client().call_tool(req).await.unwrap().into_inner();
    assert!(r.success, "{}\n{}", r.error, b.log());
    let got: Value = serde_json::from_str(&r.content).unwrap();
    let seen = got["traceparent"].as_str().unwrap();
    assert!(
        seen.starts_with(&format!("00-{trace_id}-")),
        "the plugin on the node saw {seen}"
    );
    assert!(
        !seen.contains("00f067aa0ba902b7"),
        "its parent is the broker's execute_tool span: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_share_a_node_and_each_gets_its_own_answers() {
    let nats = NatsServer::plain();
    let _a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b1 = broker_as(&nats, &[], "", "name = \"b1\"").await;
    let mut b2 = broker_as(&nats, &[], "", "name = \"b2\"").await;
    wait_nodes(&mut b1, "st", &["a"]).await;
    wait_nodes(&mut b2, "st", &["a"]).await;
    let mut tasks = Vec::new();
    for (who, b) in [("b1", &b1), ("b2", &b2)] {
        for i in 0..4 {
            let mut admin = Broker::admin_clone(b);
            tasks.push(tokio::spawn(async move {
                for j in 0..10 {
                    let args = json!({"broker": who, "i": i, "j": j});
                    let got = call(&mut admin, "st_echo", args.clone(), 10_000).await;
                    assert_eq!(as_json(got), args);
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_learns_nodes_that_start_after_it_and_a_restarted_broker_learns_them_again() {
    let nats = NatsServer::plain();
    let mut b = broker(&nats, &[], "").await;
    let _a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    wait_nodes(&mut b, "st", &["a"]).await;
    b.stop_with(libc::SIGTERM);
    // A new broker (another data dir, same NATS) asks the running node to announce.
    let t0 = Instant::now();
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(
        as_json(call(&mut b.admin, "st_echo", json!({"n": 1}), 10_000).await),
        json!({"n": 1})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopping_lets_its_calls_in_flight_finish_and_leaves_at_once() {
    let nats = NatsServer::plain();
    let mut a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    let mut admin = Broker::admin_clone(&b);
    let running =
        tokio::spawn(
            async move { call(&mut admin, "st_sleep", json!({"ms": 1500}), 20_000).await },
        );
    tokio::time::sleep(Duration::from_millis(400)).await;
    a.signal(libc::SIGTERM);
    // The node announced it is leaving: the broker has no instance any more …
    let t0 = Instant::now();
    while b.plugins().await.iter().any(|p| p.name == "st") {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the broker still lists st:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // … and the call it had finishes.
    let got = running.await.unwrap();
    assert!(got.is_ok(), "{got:?}\n{}", a.log());
    a.wait_exit(Duration::from_secs(20));
    // With no node left, its tools are gone, as after an unload.
    let err = call(&mut b.admin, "st_echo", json!({}), 10_000)
        .await
        .expect_err("no node serves st");
    assert!(err.contains("unknown tool `st_echo`"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_work_again_after_the_nats_server_restarts() {
    let mut nats = NatsServer::plain();
    let _a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    // A call in flight when the server goes away fails soon, blaming this broker's
    // connection rather than the node (which is fine).
    let mut admin = Broker::admin_clone(&b);
    let running =
        tokio::spawn(
            async move { call(&mut admin, "st_sleep", json!({"ms": 5000}), 20_000).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    nats.kill();
    let t0 = Instant::now();
    let err = running
        .await
        .unwrap()
        .expect_err("the answer cannot arrive");
    assert!(
        err.contains("this broker lost its NATS connection"),
        "{err}\n{}",
        b.log()
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    nats.start_again();
    // Both reconnect by themselves; the node announces itself again.
    let started = Instant::now();
    loop {
        match call(&mut b.admin, "st_echo", json!({"back": true}), 10_000).await {
            Ok(text) => {
                assert_eq!(
                    serde_json::from_str::<Value>(&text).unwrap(),
                    json!({"back": true})
                );
                break;
            }
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "still failing: {e}\n{}",
                    b.log()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    wait_nodes(&mut b, "st", &["a"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_and_a_node_started_while_nats_is_down_join_when_it_comes_up() {
    let mut nats = NatsServer::plain();
    nats.kill();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    // The broker serves (its socket answers) although NATS is down.
    let mut b = broker(&nats, &[], "").await;
    assert!(b.plugins().await.is_empty());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        b.log()
            .contains("serving local plugins, and joining NATS when it answers"),
        "{}",
        b.log()
    );
    nats.start_again();
    wait_nodes(&mut b, "st", &["a"]).await;
    assert_eq!(
        as_json(call(&mut b.admin, "st_echo", json!({"up": 1}), 10_000).await),
        json!({"up": 1})
    );
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_served_here_and_on_a_node_is_one_tool_with_two_instances() {
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let toml = "[nats]\nname = \"b1\"\nlocal_address = \"127.0.0.1\"\n";
    let mut b = Broker::spawn_with_files(
        vec![st("")],
        &["--nats", nats.url()],
        &[("hearth.toml", toml)],
    )
    .await;
    b.wait_ready("st").await;
    let status = wait_nodes(&mut b, "st", &["a"]).await;
    assert_eq!(
        status.runtime, "python",
        "the local plugin's row, with its remote instance"
    );
    let tools = tool_infos(&mut b).await;
    let echo = tools.iter().find(|t| t.name == "st_echo").unwrap();
    assert_eq!(echo.hosts, vec!["local", "a"]);
    assert_eq!(tools.iter().filter(|t| t.name == "st_echo").count(), 1);
    // A ready local process takes the calls: no hop.
    for i in 0..5 {
        assert_eq!(
            as_json(call(&mut b.admin, "st_echo", json!({"i": i}), 10_000).await),
            json!({"i": i})
        );
    }
    assert_eq!(a.calls_answered(), 0);
    // Without it, the node's instance does.
    let (code, _, err) = b.cli(&["plugins", "unload", "st"]);
    assert_eq!(code, 0, "{err}");
    let started = Instant::now();
    loop {
        match call(&mut b.admin, "st_echo", json!({"remote": true}), 10_000).await {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "{e}\n{}",
                    b.log()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(a.calls_answered(), 1);
    let status = b.plugin("st").await;
    assert_eq!(status.runtime, "remote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_and_nodes_speak_tls_with_mutual_certificates() {
    use crate::nats::{NatsServerConfig, ServerTls, TestCa};
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "hearth-test-ca");
    let (cert, key) = ca.issue("server", &["IP:127.0.0.1", "DNS:localhost"]);
    let nats = NatsServer::start(NatsServerConfig {
        tls: Some(ServerTls {
            cert,
            key,
            client_ca: Some(ca.cert()),
        }),
        ..NatsServerConfig::default()
    });
    assert!(nats.url().starts_with("tls://"), "{}", nats.url());
    let tls = |who: &str| {
        let (cert, key) = ca.issue(who, &["DNS:localhost"]);
        format!(
            "ca = {:?}\nclient_cert = {:?}\nclient_key = {:?}",
            ca.cert().display().to_string(),
            cert.display().to_string(),
            key.display().to_string()
        )
    };
    let a = Node::spawn_as(nats.url(), "a", "127.0.0.2", &tls("node-a"), &[st("")]);
    let mut b = broker_as(&nats, &[], "", &format!("name = \"b1\"\n{}", tls("broker"))).await;
    wait_nodes(&mut b, "st", &["a"]).await;
    assert_eq!(
        as_json(call(&mut b.admin, "st_echo", json!({"tls": true}), 10_000).await),
        json!({"tls": true}),
        "{}",
        a.log()
    );
    // A node without a client certificate is refused by the server and says why.
    let mut rogue = Node::spawn_as(
        nats.url(),
        "rogue",
        "127.0.0.3",
        &format!("ca = {:?}", ca.cert().display().to_string()),
        &[st("")],
    );
    rogue.wait_exit(Duration::from_secs(20));
    assert!(rogue.log().contains("hearth node:"), "{}", rogue.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stops_on_sigterm_while_its_nats_server_is_gone() {
    let mut nats = NatsServer::plain();
    let mut a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    nats.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.signal(libc::SIGTERM);
    a.wait_exit(Duration::from_secs(15));
    assert!(a.log().contains("stopped"), "{}", a.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_version_refuses_tools_it_lacks_and_the_call_goes_to_one_that_has_them()
{
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    // Node b runs a newer `st` whose tools are v2_*: the broker offers the newest.
    let newer = stress("py", "st", "", json!({"env": {"HEARTH_TOOL_PREFIX": "v2"}}));
    let _bn = Node::spawn(nats.url(), "b", "127.0.0.3", &[newer]);
    wait_nodes(&mut b, "st", &["a", "b"]).await;
    let started = Instant::now();
    while !b.tools().await.contains(&"v2_echo".to_string()) {
        assert!(started.elapsed() < Duration::from_secs(10), "{}", b.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // About half the calls first reach node a, which has no v2_echo: it refuses them
    // (not run) and they go on to node b.
    for i in 0..20 {
        let got = call(&mut b.admin, "v2_echo", json!({"i": i}), 10_000).await;
        assert_eq!(as_json(got), json!({"i": i}), "{}", b.log());
    }
    assert_eq!(a.calls_answered(), 0, "node a ran none of them");
    assert!(
        b.log()
            .contains("plugin st on node a has no tool `v2_echo`"),
        "some calls were refused by node a first:\n{}",
        b.log()
    );
}

/// The address a process logged after `HTTP listening on http://` in `log`.
async fn listening_addr(log: impl Fn() -> String) -> String {
    let prefix = "HTTP listening on http://";
    let started = Instant::now();
    loop {
        let text = log();
        if let Some(at) = text.find(prefix) {
            let rest = &text[at + prefix.len()..];
            return rest
                .split(|c: char| c.is_whitespace() || c == '/')
                .next()
                .unwrap()
                .trim_end_matches(':')
                .to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{text}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The value of the sample `line_start` (name and labels) in a 0.0.4 exposition.
fn sample(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(line_start) && l[line_start.len()..].starts_with(' '))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_brokers_report_their_nats_link_in_metrics() {
    let nats = NatsServer::plain();
    let mut a = Node::prepare("a", "127.0.0.2", "", &[st("")]);
    a.args = vec!["--http-listen".into(), "127.0.0.1:0".into()];
    let a = a.start(nats.url());
    let mut b = broker(&nats, &["--http-listen", "127.0.0.1:0"], "").await;
    wait_nodes(&mut b, "st", &["a"]).await;
    as_json(call(&mut b.admin, "st_echo", json!({"m": 1}), 10_000).await);
    let node_addr = listening_addr(|| a.log()).await;
    let broker_addr = listening_addr(|| b.log()).await;
    let metrics = |addr: String| async move {
        reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let node = metrics(node_addr).await;
    assert_eq!(sample(&node, "hearth_nats_connected"), Some(1.0), "{node}");
    assert!(
        sample(&node, "hearth_nats_connects_total") >= Some(1.0),
        "{node}"
    );
    // At least the call, its announcement and heartbeats went out.
    assert!(
        sample(&node, "hearth_nats_messages_total{direction=\"out\"}") >= Some(3.0),
        "{node}"
    );
    assert!(
        sample(&node, "hearth_nats_messages_total{direction=\"in\"}") >= Some(1.0),
        "{node}"
    );
    assert_eq!(sample(&node, "hearth_nats_nodes"), None, "{node}");
    let broker = metrics(broker_addr).await;
    assert_eq!(
        sample(&broker, "hearth_nats_connected"),
        Some(1.0),
        "{broker}"
    );
    assert_eq!(sample(&broker, "hearth_nats_nodes"), Some(1.0), "{broker}");
    assert!(
        sample(&broker, "hearth_nats_bytes_total{direction=\"in\"}") > Some(0.0),
        "{broker}"
    );
}
