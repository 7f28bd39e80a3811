//! Integration tests: a real broker with real plugin processes in Python, Node and
//! Rust. Build the Rust test plugins first: `cargo build --workspace --examples`.
#![allow(unreachable_pub, missing_docs)]

mod agent;
mod author;
mod build_step;
mod cli_edges;
mod cli_scripts;
mod concurrency;
mod dev;
mod families;
mod go_sdk;
mod harness;
mod host;
mod inject;
mod mcp;
mod mcp_host_service;
mod mcp_import;
mod mcp_serve;
mod memory;
mod nats;
mod observe;
mod otlp;
mod remote;
mod security;
mod security_io;
mod security_secrets;
mod shared_storage;
mod supervision;
mod wire_adapters;
mod wire_server;
mod wire_streams;
mod wire_toolcalls;

use std::collections::HashSet;
use std::time::Duration;

use harness::{example, node_echo, py_echo, stress, wait_gone, Broker};
use hearth_proto::v1::plugin_host_client::PluginHostClient;
use hearth_proto::v1::{plugin_message, Hello, PluginMessage, PluginState};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_in_three_languages_register_and_answer() {
    let mut b = Broker::start(vec![
        example("calculator"),
        example("clock"),
        example("weather"),
        example("hello"),
    ])
    .await;
    let tools = b.tools().await;
    for t in ["calculator", "clock_now", "weather", "hello"] {
        assert!(tools.contains(&t.to_string()), "{t} missing from {tools:?}");
    }

    let r = b
        .call("calculator", json!({"expression": "(2+3)*4"}))
        .await
        .unwrap();
    assert!(r.success && r.content.contains("20"), "{r:?}");
    assert_eq!(r.plugin, "calculator");
    let r = b
        .call("calculator", json!({"expression": "1/0"}))
        .await
        .unwrap();
    assert!(!r.success && !r.error.is_empty(), "{r:?}");
    let r = b.call("hello", json!({"name": "Ann"})).await.unwrap();
    assert_eq!(
        (r.success, r.content.as_str()),
        (true, "Ann，昔涟向你问好♪")
    );
    let r = b
        .call("weather", json!({"city": "北京", "days": 2}))
        .await
        .unwrap();
    assert!(r.success && r.content.contains("北京"), "{r:?}");

    // The LinkZone ai.tool parameters list became a JSON Schema in the broker.
    let (code, out, _) = b.cli(&["tools", "list", "--json"]);
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let weather = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "weather")
        .unwrap();
    assert_eq!(weather["parameters"]["required"], json!(["city"]));
    assert_eq!(
        weather["parameters"]["properties"]["days"]["default"],
        json!(1)
    );
    assert!(weather["description"]
        .as_str()
        .unwrap()
        .contains("When to use"));

    // The CLI as a user runs it.
    let (code, out, err) = b.cli(&["tools", "call", "calculator", r#"{"expression":"(2+3)*4"}"#]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("20"), "{out}");
    let (code, out, err) = b.cli(&["tools", "call", "calculator", r#"{"expression":"2+"}"#]);
    assert_eq!(code, 5, "the tool's error");
    assert!(
        out.is_empty() && err.starts_with("error: tool calculator (plugin calculator): "),
        "{err}"
    );
    let (code, _, err) = b.cli(&["tools", "call", "nope", "{}"]);
    assert_eq!(code, 3, "not found");
    assert!(err.contains("unknown tool `nope`"), "{err}");
    let (code, out, _) = b.cli(&["plugins", "list", "--json"]);
    assert_eq!(code, 0);
    let plugins: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(plugins.as_array().unwrap().len(), 4);
    assert!(
        plugins
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["state"] == "ready"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_calls_across_plugins_each_matched() {
    let mut b = Broker::start(vec![
        py_echo("py", json!({})),
        node_echo("nd"),
        stress("rs", "rs", "", json!({})),
    ])
    .await;
    let tools = ["py_echo", "nd_echo", "rs_echo"];
    let mut calls = Vec::new();
    for i in 0..100 {
        let tool = tools[i % 3];
        let mut admin = harness::Broker::admin_clone(&b);
        calls.push(tokio::spawn(async move {
            let args = json!({"i": i, "tag": format!("call-{i}"), "tool": tool});
            let req = admin.with_token(hearth_proto::v1::CallToolRequest {
                name: tool.into(),
                args_json: args.to_string(),
                ..Default::default()
            });
            let r = admin.client().call_tool(req).await.unwrap().into_inner();
            (i, tool, r)
        }));
    }
    let mut seen = HashSet::new();
    for c in calls {
        let (i, tool, r) = c.await.unwrap();
        assert!(r.success, "{tool} call {i}: {r:?}");
        let echoed: serde_json::Value = serde_json::from_str(&r.data_json).unwrap();
        assert_eq!(echoed["i"], json!(i), "{tool}: reply of another call");
        assert_eq!(echoed["tag"], json!(format!("call-{i}")));
        assert_eq!(r.tool, tool);
        seen.insert(i);
    }
    assert_eq!(seen.len(), 100);
    let _ = b.plugins().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_schema_and_arguments_are_rejected_by_the_broker() {
    let mut b = Broker::start(vec![stress("rs", "rs", "bad_schema", json!({}))]).await;
    let tools = b.tools().await;
    assert!(tools.contains(&"rs_echo".to_string()), "{tools:?}");
    assert!(!tools.iter().any(|t| t.contains("bad_schema")), "{tools:?}");
    assert!(
        b.log().contains("rs_bad_schema"),
        "rejection not logged:\n{}",
        b.log()
    );
    assert_eq!(b.plugin("rs").await.state, PluginState::Ready as i32);

    // The broker's schema check answers, naming the argument; the plugin's own
    // validate() (which says "`ms` must be a non-negative integer") never runs.
    let r = b.call("rs_sleep", json!({"ms": "soon"})).await.unwrap();
    assert!(!r.success);
    assert!(r.error.starts_with("argument `ms`"), "{}", r.error);
    let r = b.call("rs_sleep", json!({})).await.unwrap();
    assert!(
        r.error.contains("\"ms\" is a required property"),
        "{}",
        r.error
    );
    let e = b.call("rs_sleep", json!([1])).await.unwrap();
    assert!(e.error.contains("must be a JSON object"), "{}", e.error);
    // A tool that panics answers an error result and the plugin keeps serving.
    let r = b.call("rs_fail", json!({})).await.unwrap();
    assert!(!r.success && r.error.contains("panick"), "{r:?}");
    assert!(b.call("rs_echo", json!({"a": 1})).await.unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_tool_names_are_rejected_naming_both_plugins() {
    let mut b = Broker::start(vec![
        py_echo("one", json!({"HEARTH_TOOL_PREFIX": "dup"})),
        py_echo("two", json!({"HEARTH_TOOL_PREFIX": "dup"})),
    ])
    .await;
    let owners: Vec<_> = b
        .plugins()
        .await
        .into_iter()
        .filter(|p| p.tools.contains(&"dup_echo".to_string()))
        .map(|p| p.name)
        .collect();
    assert_eq!(owners.len(), 1, "{owners:?}");
    let loser = if owners[0] == "one" { "two" } else { "one" };
    let log = b.log();
    let line = log
        .lines()
        .find(|l| l.contains("already registered by plugin"))
        .unwrap_or_else(|| panic!("no duplicate rejection in log:\n{log}"));
    assert!(
        line.contains(&format!("plugin {}", owners[0]))
            && line.contains(&format!("plugin {loser}")),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_refused() {
    let b = Broker::start(vec![]).await;
    let channel = harness::socket_channel(&b.data_dir()).await;
    let mut client = PluginHostClient::new(channel);
    let hello = PluginMessage {
        msg: Some(plugin_message::Msg::Hello(Hello {
            protocol_version: "1.0.0".into(),
            sdk: "test".into(),
            ..Default::default()
        })),
    };
    let mut req = tonic::Request::new(tokio_stream::iter(vec![hello]));
    req.metadata_mut().insert(
        hearth_proto::TOKEN_METADATA,
        "0123456789abcdef".parse().unwrap(),
    );
    let err = client.attach(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("token"), "{}", err.message());

    std::fs::write(b.data_dir().join("admin.token"), "wrong").unwrap();
    let (code, _, err) = b.cli(&["plugins", "list"]);
    assert_eq!(code, 7, "unreachable: bad token");
    assert!(err.contains("admin token"), "{err}");
    let _ = b.log();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_printing_junk_on_stdout_still_work() {
    let mut b = Broker::start(vec![
        stress("rs", "rs", "junk_stdout", json!({})),
        py_echo("py", json!({"HEARTH_FAULT": "junk_stdout"})),
    ])
    .await;
    for tool in ["rs_echo", "py_echo"] {
        let r = b.call(tool, json!({"x": "y"})).await.unwrap();
        assert!(r.success, "{tool}: {r:?}");
    }
    let log = b.log();
    assert!(log.contains("banner"), "stdout not captured:\n{log}");
    assert!(
        log.contains('\u{FFFD}'),
        "invalid UTF-8 not replaced:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_killed_mid_call_fails_the_call_and_comes_back() {
    let mut b = Broker::start(vec![
        stress("rs", "rs", "", json!({})),
        node_echo("nd"),
        py_echo("py", json!({})),
    ])
    .await;
    for (plugin, tool) in [("rs", "rs_sleep"), ("nd", "nd_sleep"), ("py", "py_sleep")] {
        let before = b.plugin(plugin).await;
        let mut admin = Broker::admin_clone(&b);
        let call = tokio::spawn(async move {
            let req = admin.with_token(hearth_proto::v1::CallToolRequest {
                name: tool.into(),
                args_json: r#"{"ms": 60000}"#.into(),
                timeout_ms: 120_000,
                ..Default::default()
            });
            admin.client().call_tool(req).await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        unsafe {
            libc::kill(before.pid as i32, libc::SIGKILL);
        }
        let err = call.await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
        let msg = err.message();
        assert!(
            msg.contains(&format!("plugin {plugin}"))
                && msg.contains(tool)
                && msg.contains("SIGKILL"),
            "{msg}"
        );
        let after = b.wait_ready(plugin).await;
        assert_ne!(after.pid, before.pid);
        assert_eq!(after.restarts, before.restarts + 1);
        assert!(after.last_exit.contains("SIGKILL"), "{after:?}");
        let r = b.call(tool, json!({"ms": 1})).await.unwrap();
        assert!(r.success, "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_restart_on_request() {
    let mut b = Broker::start(vec![py_echo("py", json!({}))]).await;
    let before = b.plugin("py").await;
    let (code, out, err) = b.cli(&["plugins", "restart", "py"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ready"), "{out}");
    let after = b.plugin("py").await;
    assert_ne!(after.pid, before.pid);
    assert!(b.call("py_echo", json!({})).await.unwrap().success);
    let (code, _, err) = b.cli(&["plugins", "restart", "nope"]);
    assert_eq!(code, 3, "not found");
    assert!(err.contains("unknown plugin `nope`"), "{err}");
}

async fn all_three(b: &mut Broker) -> Vec<u32> {
    b.plugins()
        .await
        .iter()
        .map(|p| p.pid)
        .filter(|p| *p > 0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_plugin_outlives_a_stopped_broker() {
    let mut b = Broker::start(vec![
        py_echo("py", json!({})),
        node_echo("nd"),
        stress("rs", "rs", "", json!({})),
    ])
    .await;
    let pids = all_three(&mut b).await;
    assert_eq!(pids.len(), 3);
    b.stop_with(libc::SIGTERM);
    let left = wait_gone(&pids, Duration::from_secs(5));
    assert!(left.is_empty(), "plugins left after SIGTERM: {left:?}");
    assert!(b.log().contains("stopped"), "{}", b.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_plugin_outlives_a_sigkilled_broker() {
    let mut b = Broker::start(vec![
        py_echo("py", json!({})),
        node_echo("nd"),
        stress("rs", "rs", "", json!({})),
    ])
    .await;
    let pids = all_three(&mut b).await;
    assert_eq!(pids.len(), 3);
    b.stop_with(libc::SIGKILL);
    let left = wait_gone(&pids, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "plugins left 5 s after SIGKILL of the broker: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_socket_is_replaced_and_a_long_path_is_a_clear_error() {
    // A broker killed with SIGKILL leaves its socket file behind.
    let mut b = Broker::start(vec![]).await;
    let data = b.data_dir();
    b.stop_with(libc::SIGKILL);
    assert!(data.join("hearth.sock").exists());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(&data)
        .args(["plugins", "list"])
        .output()
        .unwrap();
    // Exit 7: the broker is unreachable.
    assert_eq!(out.status.code(), Some(7));
    let err = hearth_broker::server::prepare_socket(&data.join("hearth.sock"));
    assert!(err.is_ok(), "{err:?}");
    assert!(!data.join("hearth.sock").exists());

    let long = b.root.path().join("x".repeat(120));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(&long)
        .arg("run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("longer than the OS limit"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_fails_and_the_plugin_gets_cancel() {
    let mut b = Broker::start(vec![py_echo("py", json!({}))]).await;
    let req = b.admin.with_token(hearth_proto::v1::CallToolRequest {
        name: "py_sleep".into(),
        args_json: r#"{"ms": 30000}"#.into(),
        timeout_ms: 300,
        ..Default::default()
    });
    let err = b.admin.client().call_tool(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message()
            .contains("plugin py: tool py_sleep timed out after 300 ms"),
        "{}",
        err.message()
    );
    // The plugin received Cancel: its handler saw the cancellation.
    let started = std::time::Instant::now();
    while !b.log().contains("py_sleep: cancelled after Cancel") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no cancellation in log:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // And it keeps serving.
    assert!(b.call("py_sleep", json!({"ms": 1})).await.unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_also_serves_on_tcp_loopback_when_asked() {
    let b = Broker::start_with(vec![py_echo("py", json!({}))], &["--listen", "127.0.0.1:0"]).await;
    let log = b.log();
    let addr = log
        .lines()
        .find_map(|l| l.split("listening on http://").nth(1))
        .unwrap_or_else(|| panic!("no TCP listen line:\n{log}"))
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let token = std::fs::read_to_string(b.data_dir().join("admin.token")).unwrap();
    let mut admin = hearth_proto::v1::admin_client::AdminClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut req = tonic::Request::new(hearth_proto::v1::CallToolRequest {
        name: "py_echo".into(),
        args_json: r#"{"over": "tcp"}"#.into(),
        ..Default::default()
    });
    req.metadata_mut().insert(
        hearth_proto::ADMIN_TOKEN_METADATA,
        token.trim().parse().unwrap(),
    );
    let r = admin.call_tool(req).await.unwrap().into_inner();
    assert!(r.success && r.content.contains("tcp"), "{r:?}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["--data-dir", "/tmp/x", "run", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only loopback"));
}
