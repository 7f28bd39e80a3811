//! The `stress` example (`cargo test` builds it) as a real process against the fake
//! broker: what the broker's integration tests rely on. Shared process helpers for
//! `stress_process.rs` live here too.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use hearth_plugin::proto::v1::{self as pb, host_message::Msg as In, plugin_message::Msg as Out};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::broker::{Broker, STEP};

/// `target/<profile>/examples/stress`.
fn stress_bin() -> PathBuf {
    example_bin("stress")
}

/// `target/<profile>/examples/<name>`, next to this test binary's `deps/` folder.
pub(crate) fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        bin.exists(),
        "{} not built (cargo test builds examples)",
        bin.display()
    );
    bin
}

fn spawn(broker: &Broker, plugin: &str, envs: &[(&str, &str)]) -> Child {
    spawn_example("stress", broker, plugin, envs)
}

/// Runs example `name` as the plugin `plugin` of `broker`, stdout and stderr piped.
pub(crate) fn spawn_example(
    name: &str,
    broker: &Broker,
    plugin: &str,
    envs: &[(&str, &str)],
) -> Child {
    let mut cmd = Command::new(example_bin(name));
    cmd.env_remove("HEARTH_FAULT")
        .env_remove("HEARTH_TOOL_PREFIX")
        .env("HEARTH_ADDR", &broker.addr)
        .env("HEARTH_TOKEN", &broker.token)
        .env("HEARTH_PLUGIN", plugin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

pub(crate) async fn exit_code(child: &mut Child) -> i32 {
    let status = tokio::time::timeout(STEP, child.wait())
        .await
        .expect("plugin did not exit")
        .unwrap();
    status.code().expect("killed by a signal")
}

pub(crate) async fn read_all(r: Option<impl AsyncReadExt + Unpin>) -> Vec<u8> {
    let mut buf = Vec::new();
    r.unwrap().read_to_end(&mut buf).await.unwrap();
    buf
}

#[tokio::test]
async fn stress_plugin_serves_prefixed_tools_with_junk_stdout_and_bad_schema() {
    let mut broker = Broker::unix();
    let mut child = spawn(
        &broker,
        "f1",
        &[
            ("HEARTH_TOOL_PREFIX", "f1"),
            ("HEARTH_FAULT", "junk_stdout,bad_schema"),
        ],
    );
    let stdout = child.stdout.take();
    let stdout = tokio::spawn(read_all(stdout));
    let mut s = broker.session().await;
    let (hello, register) = s.handshake().await;
    assert_eq!(hello.pid, child.id().unwrap());
    assert_eq!(register.plugin.unwrap().name, "f1");
    let names: Vec<_> = register.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "f1_echo",
            "f1_sleep",
            "f1_fail",
            "f1_big",
            "f1_hang",
            "f1_bad_schema"
        ]
    );
    assert_eq!(
        serde_json::from_str::<Value>(&register.tools[5].parameters_json).unwrap(),
        json!({"type": 12})
    );

    let args = json!({"n": 1, "s": "ü", "list": [1.5, null]});
    let r = s.call(1, "f1_echo", args.clone()).await;
    assert!(r.success);
    assert_eq!(serde_json::from_str::<Value>(&r.content).unwrap(), args);

    let r = s.call(2, "f1_fail", json!({})).await;
    assert_eq!(
        (r.success, r.error.as_str()),
        (false, "tool f1_fail panicked: f1_fail: failing on purpose")
    );

    let r = s.call(3, "f1_sleep", json!({"ms": "soon"})).await;
    assert_eq!(
        r.error,
        "invalid arguments for tool f1_sleep: `ms` must be a non-negative integer"
    );

    s.invoke(4, "f1_sleep", json!({"ms": 120, "progress_ms": 50}));
    match s.recv().await {
        Out::Progress(p) => assert_eq!(p.call_id, 4),
        other => panic!("expected Progress, got {other:?}"),
    }
    let r = s.result().await;
    assert_eq!(
        (r.call_id, r.success, r.content.as_str()),
        (4, true, "slept 120 ms")
    );

    // A cancelled sleep sends nothing back.
    s.invoke(5, "f1_sleep", json!({"ms": 60_000}));
    s.send(In::Cancel(pb::Cancel {
        call_id: 5,
        reason: "test".into(),
    }));
    s.send(In::Ping(pb::Ping { nonce: 5 }));
    assert!(matches!(s.recv().await, Out::Pong(pb::Pong { nonce: 5 })));
    assert!(s.recv_within(Duration::from_millis(200)).await.is_none());

    s.send(In::Shutdown(pb::Shutdown {
        grace_ms: 2000,
        reason: "done".into(),
    }));
    assert_eq!(exit_code(&mut child).await, 0);
    let out = stdout.await.unwrap();
    assert!(
        out.windows(2).any(|w| w == b"\xff\xfe"),
        "no invalid UTF-8 on stdout"
    );
    assert!(
        String::from_utf8_lossy(&out).contains("call 4 of f1_sleep"),
        "no junk during serving"
    );
}

/// A plugin started by hand (a debugger, an IDE) after `eval "$(hearth plugins
/// attach-token NAME)"`: no token pipe, the token in `HEARTH_TOKEN`.
#[tokio::test]
async fn a_hand_started_plugin_attaches_with_hearth_token_from_the_environment() {
    let mut broker = Broker::unix();
    let mut cmd = Command::new(example_bin("stress"));
    cmd.env_remove("HEARTH_FAULT")
        .env_remove("HEARTH_TOOL_PREFIX")
        .env_remove("HEARTH_TOKEN_FD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    for (key, value) in broker.env() {
        cmd.env(key, value);
    }
    let mut child = cmd.spawn().unwrap();
    let mut s = broker.session().await;
    let (_, register) = s.handshake().await;
    assert_eq!(register.plugin.unwrap().name, "testplug");
    let r = s.call(1, "testplug_echo", json!({"hi": 1})).await;
    assert!(r.success, "{r:?}");
    s.send(In::Shutdown(pb::Shutdown {
        grace_ms: 2000,
        reason: "done".into(),
    }));
    assert_eq!(exit_code(&mut child).await, 0);
}

#[tokio::test]
async fn exit_before_hello_never_attaches() {
    let mut broker = Broker::unix();
    let mut child = spawn(&broker, "f2", &[("HEARTH_FAULT", "exit_before_hello")]);
    assert_eq!(exit_code(&mut child).await, 1);
    let none = tokio::time::timeout(Duration::from_millis(200), broker.session()).await;
    assert!(none.is_err(), "the plugin attached anyway");
}

#[tokio::test]
async fn rejected_registration_exits_3_and_says_why() {
    let mut broker = Broker::unix();
    let mut child = spawn(&broker, "f4", &[]);
    let stderr = child.stderr.take();
    let mut s = broker.session().await;
    s.recv().await;
    s.recv().await;
    s.send(In::Rejected(pb::Rejected {
        reason: "duplicate tool f4_echo".into(),
        items: vec![],
    }));
    s.close();
    assert_eq!(exit_code(&mut child).await, 3);
    let err = String::from_utf8(read_all(stderr).await).unwrap();
    assert!(
        err.contains("plugin f4: registration rejected: duplicate tool f4_echo"),
        "{err}"
    );
}

#[tokio::test]
async fn missing_environment_exits_2_naming_the_variable() {
    let mut child = Command::new(stress_bin())
        .env_remove("HEARTH_ADDR")
        .env_remove("HEARTH_FAULT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stderr = child.stderr.take();
    assert_eq!(exit_code(&mut child).await, 2);
    let err = String::from_utf8(read_all(stderr).await).unwrap();
    assert!(
        err.contains("environment variable HEARTH_ADDR is not set"),
        "{err}"
    );
}
