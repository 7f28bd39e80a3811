//! MCP servers as plugins (`"runtime": "mcp"`): third-party servers written with the
//! official Python (`mcp` 2.3, tests/plugins/mcp/py_server.py) and TypeScript
//! (`@modelcontextprotocol/sdk` 1.32, ts_server.mjs) SDKs, over stdio and Streamable
//! HTTP. Registration (prefix, title, outputSchema, annotations, confirm_destructive,
//! negotiated protocol), results (structured, content blocks, tool errors, the broker's
//! own argument check), progress, cancellation, list changes, resources and prompts,
//! crash and hang recovery, and bearer headers from the broker's environment.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hearth_proto::v1::{
    call_tool_event, CallToolRequest, CallToolResponse, McpRequestMessage, McpServerInfo,
    PluginState, ToolInfo, ToolProgress, WatchToolsRequest,
};
use serde_json::{json, Value};

use crate::harness::{alive, mcp_fixture as server, python, Broker, PluginDir};

/// Generous guard for things that take well under a second when all is well.
const LONG: Duration = Duration::from_secs(30);

/// The stdio command of the Python (`py`) or TypeScript (`ts`) test server.
fn command(lang: &str) -> Vec<String> {
    match lang {
        "py" => vec![python(), server("py_server.py")],
        "ts" => vec!["node".into(), server("ts_server.mjs")],
        other => panic!("unknown server language {other}"),
    }
}

/// A stdio MCP plugin `name` running the `lang` server; `extra` merged into its manifest.
fn stdio(lang: &str, name: &str, extra: Value) -> PluginDir {
    let mut manifest = json!({"name": name, "runtime": "mcp", "command": command(lang)});
    merge(&mut manifest, extra);
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

/// A Streamable HTTP MCP plugin `name` at `url`; `extra` merged into its manifest.
fn remote(name: &str, url: &str, extra: Value) -> PluginDir {
    let mut manifest = json!({"name": name, "runtime": "mcp", "url": url});
    merge(&mut manifest, extra);
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(m), Value::Object(extra)) = (into.as_object_mut(), extra) {
        m.extend(extra);
    }
}

/// A test server started by the test with `http 0`; killed on drop.
struct HttpServer {
    child: Child,
    url: String,
    events: PathBuf,
    dir: tempfile::TempDir,
}

impl HttpServer {
    /// Starts the `lang` server on a free port with `MCP_TEST_TOKEN=token`; waits for its
    /// `listening http://127.0.0.1:PORT/mcp` line.
    fn start(lang: &str, token: &str) -> HttpServer {
        let dir = tempfile::Builder::new()
            .prefix("hearth-mcp-http")
            .tempdir_in("/tmp")
            .unwrap();
        let events = dir.path().join("events");
        let cmd = command(lang);
        let mut child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .args(["http", "0"])
            .env("MCP_TEST_TOKEN", token)
            .env("MCP_TEST_EVENTS", &events)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .expect("start the HTTP test server");
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(url) = line.strip_prefix("listening ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let mut server = HttpServer {
            child,
            url: String::new(),
            events,
            dir,
        };
        match rx.recv_timeout(LONG) {
            Ok(url) => server.url = url,
            Err(_) => panic!(
                "the {lang} HTTP server printed no `listening` line; stderr:\n{}",
                server.stderr()
            ),
        }
        server
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    fn events(&self) -> String {
        std::fs::read_to_string(&self.events).unwrap_or_default()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 25 ms until it returns `Some` (up to [`LONG`]); panics with `what`.
async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(started.elapsed() < LONG, "{what}: not within {LONG:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn tool_infos(b: &mut Broker) -> Vec<ToolInfo> {
    let req = b.admin.with_token(hearth_proto::v1::ListToolsRequest {});
    b.admin
        .client()
        .list_tools(req)
        .await
        .unwrap()
        .into_inner()
        .tools
}

async fn tool_info(b: &mut Broker, name: &str) -> ToolInfo {
    let tools = tool_infos(b).await;
    let names: Vec<_> = tools.iter().map(|t| t.name.clone()).collect();
    tools
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool {name} in {names:?}"))
}

async fn mcp_server(b: &mut Broker, plugin: &str) -> McpServerInfo {
    b.mcp_servers()
        .await
        .into_iter()
        .find(|s| s.plugin == plugin)
        .unwrap_or_else(|| panic!("no MCP plugin {plugin}"))
}

async fn mcp_request(
    b: &mut Broker,
    plugin: &str,
    method: &str,
    params: Value,
) -> Result<Value, tonic::Status> {
    let req = b.admin.with_token(McpRequestMessage {
        plugin: plugin.into(),
        method: method.into(),
        params_json: params.to_string(),
    });
    let r = b.admin.client().mcp_request(req).await?.into_inner();
    Ok(serde_json::from_str(&r.result_json).unwrap())
}

async fn ok(b: &mut Broker, tool: &str, args: Value) -> CallToolResponse {
    let r = b
        .call(tool, args)
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e:?}\nbroker log:\n{}", b.log()));
    assert!(r.success, "{tool}: {r:?}");
    r
}

/// CallToolStream: every progress event, then the result (or the error status).
async fn call_streamed(
    b: &mut Broker,
    tool: &str,
    args: Value,
    timeout_ms: u32,
) -> (Vec<ToolProgress>, Result<CallToolResponse, tonic::Status>) {
    let req = b.admin.with_token(CallToolRequest {
        name: tool.into(),
        args_json: args.to_string(),
        timeout_ms,
        ..Default::default()
    });
    let mut stream = match b.admin.client().call_tool_stream(req).await {
        Ok(s) => s.into_inner(),
        Err(e) => return (Vec::new(), Err(e)),
    };
    let mut progress = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(ev)) => match ev.event {
                Some(call_tool_event::Event::Progress(p)) => progress.push(p),
                Some(call_tool_event::Event::Result(r)) => return (progress, Ok(r)),
                None => {}
            },
            Ok(None) => panic!("{tool}: stream ended without a result after {progress:?}"),
            Err(e) => return (progress, Err(e)),
        }
    }
}

/// Plugin `plugin`'s captured output (`hearth plugins logs`).
fn plugin_logs(b: &Broker, plugin: &str) -> String {
    let (code, out, err) = b.cli(&["plugins", "logs", plugin, "-n", "0"]);
    assert_eq!(code, 0, "{err}");
    out
}

/// Processes (not zombies) whose process group is `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After "(comm)": state ppid pgrp ...
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.len() > 2 && fields[2] == pgid.to_string() && !matches!(fields[0], "Z" | "X") {
            out.push(pid);
        }
    }
    out
}

// ---------------------------------------------------------------------------------

/// Registration: prefixed names with title, outputSchema and annotations; the MCP
/// server's negotiated protocol; `confirm_destructive`.
async fn check_registration(
    b: &mut Broker,
    p: &str,
    plugin: &str,
    protocol: &str,
    server_name: &str,
) {
    let add = tool_info(b, &format!("{p}add")).await;
    assert_eq!(add.plugin, plugin);
    assert_eq!(add.title, "Add", "{add:?}");
    assert!(add.description.contains("Add two integers"), "{add:?}");
    let params: Value = serde_json::from_str(&add.parameters_json).unwrap();
    assert_eq!(params["properties"]["a"]["type"], "integer", "{params}");
    let output: Value = serde_json::from_str(&add.output_schema_json)
        .unwrap_or_else(|e| panic!("{p}add output schema {:?}: {e}", add.output_schema_json));
    assert_eq!(output["properties"]["total"]["type"], "integer", "{output}");
    let a = add
        .annotations
        .unwrap_or_else(|| panic!("{p}add has no annotations"));
    assert_eq!(
        (a.read_only_hint, a.idempotent_hint),
        (Some(true), Some(true)),
        "{a:?}"
    );
    assert!(add.ai_tool.as_ref().is_none_or(|t| !t.confirm), "{add:?}");

    let rm = tool_info(b, &format!("{p}remove_everything")).await;
    assert_eq!(
        rm.annotations.and_then(|a| a.destructive_hint),
        Some(true),
        "{rm:?}"
    );
    assert!(
        rm.ai_tool.as_ref().is_some_and(|t| t.confirm),
        "confirm_destructive: {rm:?}"
    );
    // The confirm policy applies to policy-checked calls: the server is not reached.
    let req = b.admin.with_token(CallToolRequest {
        name: format!("{p}remove_everything"),
        args_json: r#"{"confirm": true}"#.into(),
        policies: true,
        ..Default::default()
    });
    let r = b.admin.client().call_tool(req).await.unwrap().into_inner();
    assert!(r.needs_confirmation && !r.success, "{r:?}");

    let names = tool_infos(b).await;
    let mine: Vec<_> = names
        .iter()
        .filter(|t| t.plugin == plugin)
        .map(|t| t.name.as_str())
        .collect();
    for t in [
        "add", "echo", "slow", "wait", "grow", "shrink", "fail", "crash", "hang", "image", "link",
    ] {
        assert!(
            mine.contains(&format!("{p}{t}").as_str()),
            "{p}{t} missing: {mine:?}"
        );
    }
    assert!(mine.iter().all(|n| n.starts_with(p)), "{mine:?}");

    let s = mcp_server(b, plugin).await;
    assert_eq!(s.transport, "stdio", "{s:?}");
    assert!(
        s.target.ends_with(if p.starts_with("ts") {
            "ts_server.mjs"
        } else {
            "py_server.py"
        }),
        "{s:?}"
    );
    assert_eq!(s.protocol_version, protocol, "{s:?}");
    assert_eq!(s.server_name, server_name, "{s:?}");
    assert_eq!(s.state, PluginState::Ready as i32, "{s:?}");
    assert!(s.resources && s.prompts, "{s:?}");
    assert!(s.tools.contains(&format!("{p}add")), "{s:?}");
}

/// Results: structured data, content blocks, tool errors, the broker's argument check.
async fn check_calls(b: &mut Broker, p: &str, plugin: &str) {
    let r = ok(b, &format!("{p}add"), json!({"a": 2, "b": 40})).await;
    assert_eq!(r.plugin, plugin);
    let data: Value = serde_json::from_str(&r.data_json).unwrap_or_else(|e| panic!("{r:?}: {e}"));
    assert_eq!(data, json!({"total": 42}), "{r:?}");
    assert!(r.content.contains("42"), "{r:?}");
    assert!(r.content_blocks_json.is_empty(), "text only: {r:?}");

    let r = ok(b, &format!("{p}echo"), json!({"text": "héllo ♪"})).await;
    assert_eq!(r.content, "héllo ♪");

    let r = ok(b, &format!("{p}image"), json!({})).await;
    let blocks: Value =
        serde_json::from_str(&r.content_blocks_json).unwrap_or_else(|e| panic!("{r:?}: {e}"));
    assert_eq!(blocks[0]["type"], "image", "{blocks}");
    assert_eq!(blocks[0]["mimeType"], "image/png", "{blocks}");
    assert!(
        blocks[0]["data"]
            .as_str()
            .unwrap()
            .starts_with("iVBORw0KGgo"),
        "{blocks}"
    );
    assert_eq!(
        blocks[1],
        json!({"type": "text", "text": "a 1x1 red PNG"}),
        "{blocks}"
    );
    let lines: Vec<&str> = r.content.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].starts_with("[image image/png, "),
        "{r:?}"
    );
    assert_eq!(lines[1], "a 1x1 red PNG");

    let r = ok(b, &format!("{p}link"), json!({})).await;
    assert_eq!(r.content, "[resource link test://doc/1 (doc1)]", "{r:?}");
    let blocks: Value = serde_json::from_str(&r.content_blocks_json).unwrap();
    assert_eq!(blocks[0]["type"], "resource_link", "{blocks}");
    assert_eq!(blocks[0]["uri"], "test://doc/1", "{blocks}");

    let r = b.call(&format!("{p}fail"), json!({})).await.unwrap();
    assert!(!r.success, "{r:?}");
    assert_eq!(r.error, "it failed on purpose", "{r:?}");

    // "2" for an integer: the Python server (pydantic) would coerce it and answer 5; the
    // broker's schema check refuses it before the server sees it.
    let r = b
        .call(&format!("{p}add"), json!({"a": "2", "b": 3}))
        .await
        .unwrap();
    assert!(!r.success, "{r:?}");
    assert!(r.error.starts_with("argument `a`"), "{r:?}");
    assert!(r.data_json.is_empty(), "{r:?}");
    let r = b.call(&format!("{p}add"), json!({"a": 1})).await.unwrap();
    assert!(
        !r.success && r.error.contains("\"b\" is a required property"),
        "{r:?}"
    );
}

/// The outcome of `slow` with `steps`: "done", after one progress event per step, in
/// order, none missing — the last one too, which the server sends right before its
/// result (the broker reads progress in the order the server sent it).
fn check_slow(
    p: &str,
    steps: usize,
    progress: &[ToolProgress],
    r: Result<CallToolResponse, tonic::Status>,
) {
    let r = r.unwrap_or_else(|e| panic!("{p}slow: {e:?} after {progress:?}"));
    assert!(r.success && r.content == "done", "{p}slow: {r:?}");
    assert_eq!(
        progress.len(),
        steps,
        "{p}slow: {} progress events for {steps} steps: {progress:?}",
        progress.len()
    );
    for (i, ev) in progress.iter().enumerate() {
        assert_eq!(ev.progress, (i + 1) as f64, "{progress:?}");
        assert_eq!(ev.total, steps as f64, "{progress:?}");
        assert_eq!(ev.message, format!("step {}", i + 1), "{progress:?}");
    }
}

/// Progress keeps a call alive past its timeout and streams; a timeout cancels the call
/// at the server.
async fn check_progress_and_cancel(b: &mut Broker, p: &str, plugin: &str) {
    // 6 steps of 300 ms (1.8 s) with a 1 s timeout: each step's progress extends it.
    let (progress, r) = call_streamed(
        b,
        &format!("{p}slow"),
        json!({"steps": 6, "delay_ms": 300}),
        1000,
    )
    .await;
    check_slow(p, 6, &progress, r);

    let before = plugin_logs(b, plugin).matches("cancelled wait").count();
    let err = b
        .call_timeout(&format!("{p}wait"), json!({"ms": 60_000}), 500)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message().contains(&format!(
            "plugin {plugin}: tool {p}wait timed out after 500 ms"
        )),
        "{}",
        err.message()
    );
    // notifications/cancelled reached the server: its handler was cancelled.
    eventually("`cancelled wait` in the plugin's log", || {
        (plugin_logs(b, plugin).matches("cancelled wait").count() > before).then_some(())
    })
    .await;
    // The CLI's --timeout-ms does the same.
    let (code, out, err) = b.cli(&[
        "tools",
        "call",
        &format!("{p}wait"),
        r#"{"ms": 60000}"#,
        "--timeout-ms",
        "300",
    ]);
    assert_eq!(code, 6, "timeout: {out}");
    assert!(err.contains("timed out after 300 ms"), "{err}");
    let (code, out, err) = b.cli(&["tools", "call", &format!("{p}wait"), r#"{"ms": 1}"#]);
    assert_eq!((code, out.trim()), (0, "waited"), "{err}");
}

/// tools/list_changed: `grow` adds late_tool, `shrink` removes it; WatchTools sees it.
async fn check_list_changes(b: &mut Broker, p: &str) {
    let req = b.admin.with_token(WatchToolsRequest {});
    let mut watch = b
        .admin
        .client()
        .watch_tools(req)
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap().revision;
    let late = format!("{p}late_tool");
    assert!(!b.tools().await.contains(&late));

    assert_eq!(ok(b, &format!("{p}grow"), json!({})).await.content, "grown");
    let revision = tokio::time::timeout(LONG, watch.message())
        .await
        .unwrap_or_else(|_| panic!("{p}grow: WatchTools saw no change"))
        .unwrap()
        .unwrap()
        .revision;
    assert!(revision > first, "{revision} after {first}");
    let mut tools = Vec::new();
    for _ in 0..1200 {
        tools = b.tools().await;
        if tools.contains(&late) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        tools.contains(&late),
        "{late} not registered: {tools:?}\n{}",
        b.log()
    );
    assert_eq!(ok(b, &late, json!({})).await.content, "late");
    // The other tools stayed.
    assert!(tools.contains(&format!("{p}add")), "{tools:?}");

    assert_eq!(
        ok(b, &format!("{p}shrink"), json!({})).await.content,
        "shrunk"
    );
    for _ in 0..1200 {
        tools = b.tools().await;
        if !tools.contains(&late) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(!tools.contains(&late), "{late} still registered: {tools:?}");
    assert!(tools.contains(&format!("{p}add")), "{tools:?}");
    let err = b.call(&late, json!({})).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
}

/// Resources and prompts through Admin McpRequest.
async fn check_resources_and_prompts(b: &mut Broker, plugin: &str) {
    let list = mcp_request(b, plugin, "resources/list", json!({}))
        .await
        .unwrap();
    let resources = list["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        resources
            .iter()
            .any(|r| r["uri"] == "test://doc/1" && r["name"] == "doc1"),
        "{list}"
    );
    let read = mcp_request(b, plugin, "resources/read", json!({"uri": "test://doc/1"}))
        .await
        .unwrap();
    assert_eq!(read["contents"][0]["text"], "hello resource", "{read}");
    assert_eq!(read["contents"][0]["uri"], "test://doc/1", "{read}");
    let prompts = mcp_request(b, plugin, "prompts/list", json!({}))
        .await
        .unwrap();
    assert!(
        prompts["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "greet"),
        "{prompts}"
    );
    let got = mcp_request(
        b,
        plugin,
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": "Ann"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        got["messages"][0]["content"]["text"], "Hello, Ann!",
        "{got}"
    );
    // An unknown resource is the server's error, passed on.
    let err = mcp_request(b, plugin, "resources/read", json!({"uri": "test://nope"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    // Only read-only methods pass.
    let err = mcp_request(b, plugin, "tools/call", json!({"name": "crash"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_register_answer_stream_and_change_their_tools() {
    let mut b = Broker::start(vec![
        stdio(
            "py",
            "pymcp",
            json!({"tool_prefix": "py_", "confirm_destructive": true}),
        ),
        stdio(
            "ts",
            "tsmcp",
            json!({"tool_prefix": "ts_", "confirm_destructive": true}),
        ),
        stdio(
            "py",
            "pylegacy",
            json!({"tool_prefix": "pl_", "protocol": "legacy"}),
        ),
    ])
    .await;
    check_registration(&mut b, "py_", "pymcp", "2026-07-28", "py-test-server").await;
    check_registration(&mut b, "ts_", "tsmcp", "2025-11-25", "ts-test-server").await;
    // `"protocol": "legacy"`: initialize, even with a server that knows 2026-07-28.
    let s = mcp_server(&mut b, "pylegacy").await;
    assert_eq!(s.protocol_version, "2025-11-25", "{s:?}");
    // Without confirm_destructive the annotation stays a hint.
    let rm = tool_info(&mut b, "pl_remove_everything").await;
    assert_eq!(
        rm.annotations.and_then(|a| a.destructive_hint),
        Some(true),
        "{rm:?}"
    );
    assert!(rm.ai_tool.as_ref().is_none_or(|t| !t.confirm), "{rm:?}");
    let (code, out, _) = b.cli(&["plugins", "list", "--json"]);
    assert_eq!(code, 0);
    let plugins: Value = serde_json::from_str(&out).unwrap();
    for p in plugins.as_array().unwrap() {
        assert_eq!(
            (&p["runtime"], &p["state"]),
            (&json!("mcp"), &json!("ready")),
            "{p}"
        );
    }

    for (p, plugin) in [("py_", "pymcp"), ("ts_", "tsmcp")] {
        check_calls(&mut b, p, plugin).await;
        check_progress_and_cancel(&mut b, p, plugin).await;
        check_resources_and_prompts(&mut b, plugin).await;
    }
    // List changes: 2026 subscriptions (pymcp), legacy notifications (tsmcp, pylegacy).
    for p in ["py_", "ts_", "pl_"] {
        check_list_changes(&mut b, p).await;
    }
    // The CLI prints the structured result.
    let (code, out, err) = b.cli(&["tools", "call", "ts_add", r#"{"a": 1, "b": 2}"#]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains('3'), "{out}");
    // Nothing restarted along the way.
    for p in b.plugins().await {
        assert_eq!(p.restarts, 0, "{p:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_or_hung_stdio_server_fails_its_call_and_comes_back() {
    let extra = json!({"ping_interval_ms": 200, "hung_timeout_ms": 1500,
        "restart": {"max_restarts": 5, "backoff_initial_ms": 50}});
    let mut extra_py = extra.clone();
    merge(&mut extra_py, json!({"tool_prefix": "py_"}));
    let mut extra_ts = extra;
    merge(&mut extra_ts, json!({"tool_prefix": "ts_"}));
    let mut b = Broker::start(vec![
        stdio("py", "pymcp", extra_py),
        stdio("ts", "tsmcp", extra_ts),
    ])
    .await;
    for (p, plugin) in [("py_", "pymcp"), ("ts_", "tsmcp")] {
        // Crash: the call fails at once (well before its 30 s timeout) naming the exit.
        let before = b.plugin(plugin).await;
        let started = Instant::now();
        let err = b
            .call_timeout(&format!("{p}crash"), json!({}), 30_000)
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}\n{}", b.log());
        assert!(
            err.message().contains(&format!(
                "plugin {plugin} ended with exit status 3 during tool {p}crash"
            )),
            "{}\nbroker log:\n{}",
            err.message(),
            b.log()
        );
        let after = b.wait_ready(plugin).await;
        assert_ne!(after.pid, before.pid);
        assert_eq!(after.restarts, before.restarts + 1, "{after:?}");
        assert!(after.last_exit.contains("exit status 3"), "{after:?}");
        assert!(plugin_logs(&b, plugin).contains("crashing on purpose"));
        let r = ok(&mut b, &format!("{p}add"), json!({"a": 1, "b": 1})).await;
        assert_eq!(r.data_json, r#"{"total":2}"#);

        // Hang: the process stops answering pings; it is killed (its whole group) and
        // restarted, and the call in flight fails naming it.
        let before = after;
        assert!(group_members(before.pid).contains(&before.pid));
        let started = Instant::now();
        let err = b
            .call_timeout(&format!("{p}hang"), json!({}), 60_000)
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
        assert!(
            err.message()
                .contains(&format!("plugin {plugin} answered no ping"))
                && err
                    .message()
                    .contains(&format!("(hung) (signal 9 (SIGKILL)) during tool {p}hang")),
            "{}",
            err.message()
        );
        let after = b.wait_ready(plugin).await;
        assert_ne!(after.pid, before.pid);
        assert!(after.last_exit.contains("answered no ping"), "{after:?}");
        assert!(
            !alive(before.pid),
            "the hung server {} still runs",
            before.pid
        );
        assert!(
            group_members(before.pid).is_empty(),
            "{:?}",
            group_members(before.pid)
        );
        let r = ok(&mut b, &format!("{p}add"), json!({"a": 2, "b": 2})).await;
        assert_eq!(r.data_json, r#"{"total":4}"#);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_slow_to_start_is_not_taken_for_hung() {
    // The handshake comes 1.5 s after the spawn, twice the hung timeout: the time
    // before registration is the startup timeout's, not the heartbeat's.
    let script = "import runpy, sys, time; time.sleep(1.5); sys.argv = sys.argv[1:]; \
                  runpy.run_path(sys.argv[0], run_name='__main__')";
    let mut b = Broker::spawn(
        vec![PluginDir {
            dir: "late".into(),
            manifest: json!({"name": "late", "runtime": "mcp",
                "command": [python(), "-c", script, server("py_server.py")],
                "ping_interval_ms": 100, "hung_timeout_ms": 700, "startup_timeout_s": 20,
                "restart": {"max_restarts": 1}}),
        }],
        &[],
    )
    .await;
    // One spurious kill spends the budget: the plugin ends `failed` instead of ready.
    let p = b
        .wait_for("late", LONG, "ready or failed", |p| {
            p.state == PluginState::Ready as i32 || p.state == PluginState::Failed as i32
        })
        .await;
    assert_eq!(p.state, PluginState::Ready as i32, "{p:?}");
    let r = b.call("add", json!({"a": 1, "b": 2})).await;
    let p = b.plugin("late").await;
    assert_eq!(
        (p.restarts, p.last_exit.as_str()),
        (0, ""),
        "{p:?}\nthe call: {r:?}\nbroker log:\n{}",
        b.log()
    );
    let r = r.unwrap();
    assert!(r.success && r.data_json == r#"{"total":3}"#, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_servers_with_a_bearer_from_the_broker_environment() {
    let token = "t0ken-from-env";
    let py = HttpServer::start("py", token);
    let ts = HttpServer::start("ts", token);
    let bearer = json!({"Authorization": "Bearer ${env:MCP_TEST_TOKEN}"});
    let mut b = Broker::spawn_with_env(
        vec![
            remote(
                "pyhttp",
                &py.url,
                json!({"tool_prefix": "ph_", "headers": bearer}),
            ),
            remote(
                "tshttp",
                &ts.url,
                json!({"tool_prefix": "th_", "headers": bearer,
                "protocol": "auto", "confirm_destructive": true}),
            ),
        ],
        &[],
        &[],
        &[("MCP_TEST_TOKEN", token)],
    )
    .await;
    b.wait_ready("pyhttp").await;
    b.wait_ready("tshttp").await;

    for (p, plugin, server, protocol) in [
        ("ph_", "pyhttp", &py, "2026-07-28"),
        ("th_", "tshttp", &ts, "2025-11-25"),
    ] {
        let s = mcp_server(&mut b, plugin).await;
        assert_eq!(
            (s.transport.as_str(), &s.target),
            ("http", &server.url),
            "{s:?}"
        );
        assert_eq!(s.protocol_version, protocol, "{s:?}");
        assert_eq!(s.state, PluginState::Ready as i32, "{s:?}");
        let add = tool_info(&mut b, &format!("{p}add")).await;
        assert_eq!(add.title, "Add");
        assert!(add.output_schema_json.contains("total"), "{add:?}");
        let r = ok(&mut b, &format!("{p}add"), json!({"a": 20, "b": 22})).await;
        assert_eq!(
            serde_json::from_str::<Value>(&r.data_json).unwrap(),
            json!({"total": 42})
        );
        let r = ok(&mut b, &format!("{p}image"), json!({})).await;
        assert!(r.content_blocks_json.contains("image/png"), "{r:?}");
        let r = b.call(&format!("{p}fail"), json!({})).await.unwrap();
        assert_eq!(
            (r.success, r.error.as_str()),
            (false, "it failed on purpose")
        );
        // 4 steps of 300 ms with a 1 s timeout.
        let (progress, r) = call_streamed(
            &mut b,
            &format!("{p}slow"),
            json!({"steps": 4, "delay_ms": 300}),
            1000,
        )
        .await;
        check_slow(p, 4, &progress, r);
        // A timeout cancels the call at the server.
        let err = b
            .call_timeout(&format!("{p}wait"), json!({"ms": 60_000}), 500)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
        eventually(
            &format!("{p}: `cancelled wait` in the server's events"),
            || server.events().contains("cancelled wait").then_some(()),
        )
        .await;
        check_resources_and_prompts(&mut b, plugin).await;
        check_list_changes(&mut b, p).await;
    }
    let rm = tool_info(&mut b, "th_remove_everything").await;
    assert!(rm.ai_tool.as_ref().is_some_and(|t| t.confirm), "{rm:?}");
    for p in b.plugins().await {
        assert_eq!(
            (p.state, p.restarts),
            (PluginState::Ready as i32, 0),
            "{p:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_bearer_token_keeps_an_http_server_out_and_says_why() {
    let py = HttpServer::start("py", "the-right-token");
    let once = json!({"max_restarts": 1, "backoff_initial_ms": 50});
    let mut b = Broker::spawn_with_env(
        vec![
            // The broker has the variable, but not the server's token.
            remote(
                "wrongtoken",
                &py.url,
                json!({"tool_prefix": "wt_", "restart": once,
                "headers": {"Authorization": "Bearer ${env:MCP_TEST_TOKEN}"}}),
            ),
            // A default for an unset variable: resolved, and wrong too.
            remote(
                "deftoken",
                &py.url,
                json!({"tool_prefix": "dt_", "restart": once,
                "headers": {"Authorization": "Bearer ${env:HEARTH_TEST_UNSET_TOKEN:-not-it}"}}),
            ),
            // An unset variable without a default: not even tried.
            remote(
                "unsettoken",
                &py.url,
                json!({"tool_prefix": "ut_", "restart": once,
                "headers": {"Authorization": "Bearer ${env:HEARTH_TEST_UNSET_TOKEN}"}}),
            ),
        ],
        &[],
        &[],
        &[("MCP_TEST_TOKEN", "a-wrong-token")],
    )
    .await;
    for plugin in ["wrongtoken", "deftoken"] {
        let p = b
            .wait_for(plugin, LONG, "failed", |p| {
                p.state == PluginState::Failed as i32
            })
            .await;
        assert!(p.tools.is_empty(), "{p:?}");
        // The status says the server refused the credentials (HTTP 401).
        let why = format!("{} | {}", p.reason, p.last_exit).to_lowercase();
        assert!(
            why.contains("401") || why.contains("unauthorized") || why.contains("auth required"),
            "{plugin}: the status does not say the server refused the token: {p:?}"
        );
    }
    let p = b
        .wait_for("unsettoken", LONG, "failed", |p| {
            p.state == PluginState::Failed as i32
        })
        .await;
    assert!(
        p.reason
            .contains("environment variable HEARTH_TEST_UNSET_TOKEN is not set"),
        "{p:?}"
    );
    let tools = b.tools().await;
    assert!(tools.is_empty(), "{tools:?}");
}
