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
}

impl Node {
    /// Starts `hearth node --nats URL --node-name NAME` with `plugins`, its NATS client
    /// bound to `local` (e.g. `127.0.0.2`).
    pub fn spawn(url: &str, name: &str, local: &str, plugins: &[PluginDir]) -> Node {
        let root = tempfile::Builder::new()
            .prefix("hearth-node")
            .tempdir_in("/tmp")
            .unwrap();
        let node = Node {
            root,
            child: None,
            name: name.into(),
        };
        node.write_plugins(plugins);
        let data = node.data_dir();
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(
            data.join("hearth.toml"),
            format!("[nats]\nlocal_address = \"{local}\"\n"),
        )
        .unwrap();
        node.start(url)
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

    fn start(mut self, url: &str) -> Node {
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

    /// Waits for the node process to exit (panics after `within`).
    pub fn wait_exit(&mut self, within: Duration) {
        if let Some(mut child) = self.child.take() {
            let started = Instant::now();
            while child.try_wait().unwrap().is_none() {
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
        if let Some(mut child) = self.child.take() {
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let started = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A broker with no plugins of its own, on `nats` (its client from 127.0.0.1), with
/// `args` and `files` as [`Broker::spawn_with_files`].
async fn broker(nats: &NatsServer, args: &[&str], files: &[(&str, &str)]) -> Broker {
    let mut all = vec!["--nats", nats.url()];
    all.extend_from_slice(args);
    // `sources.toml` in `files` goes into hearth.toml, before `[nats]`.
    let sources = files
        .iter()
        .find(|(name, _)| *name == "sources.toml")
        .map_or("", |(_, text)| *text);
    let toml = format!("{sources}\n[nats]\nname = \"b1\"\nlocal_address = \"127.0.0.1\"\n");
    let mut files: Vec<(&str, &str)> = files
        .iter()
        .filter(|(name, _)| *name != "sources.toml")
        .copied()
        .collect();
    files.push(("hearth.toml", &toml));
    Broker::spawn_with_files(vec![], &all, &files).await
}

/// Waits until `plugin` is served by exactly `nodes` (sorted names) as the broker sees it.
async fn wait_nodes(b: &mut Broker, plugin: &str, nodes: &[&str]) -> PluginStatus {
    let want: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
    b.wait_for(
        plugin,
        Duration::from_secs(60),
        &format!("served by {want:?}"),
        |p| p.remote.iter().map(|r| r.node.clone()).collect::<Vec<_>>() == want,
    )
    .await
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
    let mut b = broker(&nats, &[], &[]).await;
    let status = wait_nodes(&mut b, "st", &["a", "b"]).await;
    assert_eq!(status.runtime, "remote");
    assert_eq!(status.state, PluginState::Ready as i32);
    assert!(status.tools.contains(&"st_echo".to_string()), "{status:?}");

    // One tool with two instances, and where they run.
    let req = b.admin.with_token(ListToolsRequest {});
    let tools = b
        .admin
        .client()
        .list_tools(req)
        .await
        .unwrap()
        .into_inner()
        .tools;
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
    let mut b = broker(&nats, &[], &[]).await;
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
        assert!(
            e.contains("st") && e.contains("node a"),
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
    let mut b = broker(&nats, &[], &[]).await;
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
    // Restarted on its node, as locally: the next call is answered.
    b.wait_for("st", Duration::from_secs(30), "restarted once", |p| {
        p.remote.first().is_some_and(|r| r.restarts >= 1)
    })
    .await;
    let got = call(&mut b.admin, "st_echo", json!({"x": 1}), 10_000).await;
    assert_eq!(as_json(got), json!({"x": 1}), "{}", a.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_cancel_and_progress_cross_the_hop() {
    let nats = NatsServer::plain();
    let a = Node::spawn(nats.url(), "a", "127.0.0.2", &[st("")]);
    let mut b = broker(&nats, &[], &[]).await;
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
    let mut b = broker(&nats, &["--llm-url", &url], &[]).await;
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
    let mut b = broker(&nats, &[], &[("sources.toml", SOURCES)]).await;
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
    let mut b = broker(&nats, &[], &[]).await;
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
