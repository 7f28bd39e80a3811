//! The `stress` example (`tests/plugins/STRESS.md`) as a real process against the fake
//! broker: sizes, the freeze of `P_hang`, and the protocol faults.

use std::time::Duration;

use hearth_plugin::proto::v1::{self as pb, host_message::Msg as In, plugin_message::Msg as Out};
use hearth_plugin::proto::{MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::broker::{Broker, Session};
use crate::process::{exit_code, read_all, spawn_example};

fn spawn(broker: &Broker, plugin: &str, envs: &[(&str, &str)]) -> Child {
    spawn_example("stress", broker, plugin, envs)
}

/// Hello, as the first message of the session.
async fn hello(s: &mut Session) -> pb::Hello {
    match s.recv().await {
        Out::Hello(h) => h,
        other => panic!("first message is not Hello: {other:?}"),
    }
}

#[tokio::test]
async fn stress_registers_2000_tools_sends_6_mib_and_refuses_oversized_results() {
    let mut broker = Broker::unix();
    let mut child = spawn(&broker, "s1", &[("HEARTH_FAULT", "many_tools,bad_schema")]);
    let stdout = tokio::spawn(read_all(child.stdout.take()));
    let mut s = broker.session().await;
    let (hello, register) = s.handshake().await;
    assert_eq!(hello.protocol_version, PROTOCOL_VERSION);
    let names: Vec<_> = register.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 2006);
    assert_eq!(
        names[..7],
        [
            "s1_echo",
            "s1_sleep",
            "s1_fail",
            "s1_big",
            "s1_hang",
            "s1_bad_schema",
            "s1_t0"
        ]
    );
    assert_eq!(names[2005], "s1_t1999");

    let args = json!({"n": 1, "s": "ü"});
    let r = s.call(1, "s1_echo", args.clone()).await;
    assert!(r.success);
    assert_eq!(serde_json::from_str::<Value>(&r.content).unwrap(), args);
    assert_eq!(serde_json::from_str::<Value>(&r.data_json).unwrap(), args);
    let r = s.call(2, "s1_t1999", json!({})).await;
    assert_eq!((r.success, r.content.as_str()), (true, "s1_t1999"));
    let r = s.call(3, "s1_fail", json!({})).await;
    assert_eq!(
        r.error,
        "tool s1_fail panicked: s1_fail: failing on purpose"
    );

    let six_mib = 6 * 1024 * 1024;
    let r = s.call(4, "s1_big", json!({"bytes": six_mib})).await;
    assert!(r.success, "{}", r.error);
    assert_eq!(r.content.len(), six_mib);
    assert!(r.content.bytes().all(|b| b == b'x'));

    // Exactly the limit in content is over it once framed: an error, not a crash.
    let r = s
        .call(5, "s1_big", json!({"bytes": MAX_MESSAGE_BYTES}))
        .await;
    assert!(!r.success);
    assert!(r.content.is_empty());
    let n: usize = r
        .error
        .strip_prefix("tool s1_big: result is ")
        .and_then(|e| e.strip_suffix(" bytes, over the 64 MiB message limit"))
        .unwrap_or_else(|| panic!("unexpected error text: {}", r.error))
        .parse()
        .unwrap();
    assert!(n > MAX_MESSAGE_BYTES && n < MAX_MESSAGE_BYTES + 64, "{n}");
    let r = s.call(6, "s1_echo", json!({"still": "serving"})).await;
    assert!(r.success);

    // Progress, then a cancelled sleep: nothing sent, a notice on stdout.
    s.invoke(7, "s1_sleep", json!({"ms": 60_000, "progress_ms": 20}));
    assert!(matches!(s.recv().await, Out::Progress(p) if p.call_id == 7));
    s.send(In::Cancel(pb::Cancel {
        call_id: 7,
        reason: "test".into(),
    }));
    s.send(In::Ping(pb::Ping { nonce: 7 }));
    loop {
        match s.recv().await {
            Out::Progress(_) => continue,
            Out::Pong(p) => break assert_eq!(p.nonce, 7),
            other => panic!("expected Pong, got {other:?}"),
        }
    }
    s.send(In::Shutdown(pb::Shutdown {
        grace_ms: 2000,
        reason: "done".into(),
    }));
    assert_eq!(exit_code(&mut child).await, 0);
    let out = String::from_utf8(stdout.await.unwrap()).unwrap();
    assert!(out.contains("s1_sleep: cancelled\n"), "{out:?}");
}

#[tokio::test]
async fn stress_hang_freezes_the_process_so_pings_go_unanswered() {
    let mut broker = Broker::unix();
    let mut child = spawn(&broker, "s2", &[("HEARTH_TOOL_PREFIX", "px")]);
    let mut s = broker.session().await;
    let (_, register) = s.handshake().await;
    assert_eq!(register.tools[4].name, "px_hang");
    s.send(In::Ping(pb::Ping { nonce: 1 }));
    assert!(matches!(s.recv().await, Out::Pong(pb::Pong { nonce: 1 })));

    s.invoke(1, "px_hang", json!({}));
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.send(In::Ping(pb::Ping { nonce: 2 }));
    let got = s.recv_within(Duration::from_millis(1500)).await;
    assert!(got.is_none(), "a frozen plugin answered: {got:?}");
    assert!(child.try_wait().unwrap().is_none(), "the plugin exited");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn stress_wrong_version_is_rejected_and_exits_3() {
    let mut broker = Broker::unix();
    let mut child = spawn(&broker, "s3", &[("HEARTH_FAULT", "wrong_version")]);
    let stderr = child.stderr.take();
    let mut s = broker.session().await;
    assert_eq!(hello(&mut s).await.protocol_version, "99.0.0");
    // What the broker answers (broker/src/supervisor/handshake.rs).
    s.send(In::Rejected(pb::Rejected {
        reason: "protocol version `99.0.0` is not supported; this broker speaks 1.0.0".into(),
        items: vec![],
    }));
    s.close();
    assert_eq!(exit_code(&mut child).await, 3);
    let err = String::from_utf8(read_all(stderr).await).unwrap();
    assert!(
        err.contains("plugin s3: registration rejected: protocol version `99.0.0`"),
        "{err}"
    );
}

#[tokio::test]
async fn stress_exit_after_hello_sends_hello_alone_and_exits_1() {
    let mut broker = Broker::unix();
    let mut child = spawn(&broker, "s4", &[("HEARTH_FAULT", "exit_after_hello")]);
    let mut s = broker.session().await;
    hello(&mut s).await;
    assert_eq!(exit_code(&mut child).await, 1);
    let next = s.recv_within(Duration::from_secs(2)).await;
    assert!(next.is_none(), "sent after Hello: {next:?}");
}

#[tokio::test]
async fn stress_never_register_stalls_after_hello_and_grandchild_shares_the_group() {
    let mut broker = Broker::unix();
    let mut child = spawn(
        &broker,
        "s5",
        &[("HEARTH_FAULT", "never_register,grandchild")],
    );
    let pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(crate::broker::STEP, lines.next_line())
        .await
        .expect("no GRANDCHILD_PID line in time")
        .unwrap()
        .unwrap();
    let grandchild: u32 = line
        .strip_prefix("GRANDCHILD_PID=")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .parse()
        .unwrap();
    // /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."
    let stat = |pid: u32| -> Vec<String> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        s.rsplit_once(") ")
            .unwrap()
            .1
            .split(' ')
            .map(String::from)
            .collect()
    };
    let (g, p) = (stat(grandchild), stat(pid));
    assert_eq!(g[1], pid.to_string(), "grandchild's parent");
    assert_eq!(g[2], p[2], "grandchild's process group");

    let mut s = broker.session().await;
    hello(&mut s).await;
    s.send(In::Ping(pb::Ping { nonce: 1 }));
    let got = s.recv_within(Duration::from_millis(500)).await;
    assert!(got.is_none(), "sent after Hello: {got:?}");
    assert!(child.try_wait().unwrap().is_none(), "the plugin exited");

    child.kill().await.unwrap();
    let killed = std::process::Command::new("kill")
        .arg(grandchild.to_string())
        .status()
        .unwrap();
    assert!(killed.success());
}

#[tokio::test]
async fn stress_crash_mid_call_exits_1_halfway_through_the_sleep() {
    let mut broker = Broker::unix();
    let mut child = spawn(&broker, "s6", &[("HEARTH_FAULT", "crash_mid_call")]);
    let mut s = broker.session().await;
    s.handshake().await;
    s.invoke(1, "s6_sleep", json!({"ms": 200}));
    assert!(
        s.ended_within(crate::broker::STEP).await,
        "stream still open"
    );
    assert_eq!(exit_code(&mut child).await, 1);
}
