//! Supervision under faults: every fault of the stress plugins (tests/plugins/STRESS.md)
//! in each SDK language, restart policy, hung detection, limits and floods, process
//! hygiene and hot operations.

use std::time::{Duration, Instant};

use hearth_proto::v1::PluginState;
use serde_json::{json, Value};

use crate::harness::{alive, py_echo, rss_kib, stress, wait_gone, Broker, PluginDir, LANGS};

/// A quick policy so budgets are spent in well under a second.
fn fast(extra: Value) -> Value {
    let mut v = json!({
        "restart": {"max_restarts": 2, "window_s": 60, "backoff_initial_ms": 20, "backoff_max_ms": 100},
        "startup_timeout_s": 2,
    });
    for (k, val) in extra.as_object().unwrap() {
        v[k] = val.clone();
    }
    v
}

/// One plugin per language with `faults`, named `<lang>x`.
fn each_lang(faults: &str, extra: Value) -> Vec<PluginDir> {
    LANGS
        .iter()
        .map(|l| stress(l, &format!("{l}x"), faults, fast(extra.clone())))
        .collect()
}

const LONG: Duration = Duration::from_secs(30);

/// Faults that keep a plugin from ever registering: each spends its crash budget and
/// ends `failed` with the reason, while a healthy plugin keeps answering.
async fn never_ready(faults: &str, extra: Value, expect_in_reason: &str) -> Broker {
    let mut plugins = each_lang(faults, extra);
    plugins.push(stress("py", "ok", "", json!({})));
    let mut b = Broker::spawn(plugins, &[]).await;
    b.wait_ready("ok").await;
    for l in LANGS {
        let name = format!("{l}x");
        let p = b.wait_state(&name, PluginState::Failed, LONG).await;
        assert!(p.reason.contains(expect_in_reason), "{name}: {}", p.reason);
        assert!(p.reason.contains("budget of 2"), "{name}: {}", p.reason);
        assert!(p.tools.is_empty());
        assert_eq!(p.pid, 0);
        assert!(b.call("ok_echo", json!({"n": l})).await.unwrap().success);
    }
    let (code, out, _) = b.cli(&["plugins", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("failed"), "{out}");
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_before_hello_spends_the_crash_budget() {
    never_ready("exit_before_hello", json!({}), "exit status 1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_after_hello_spends_the_crash_budget() {
    never_ready("exit_after_hello", json!({}), "exit status 1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_protocol_version_is_rejected() {
    let b = never_ready("wrong_version", json!({}), "exit status 3").await;
    let log = b
        .wait_log("protocol version `99.0.0` is not supported", LONG)
        .await;
    for l in LANGS {
        assert!(log.contains(&format!("{l}x")), "{l}: no rejection logged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_register_and_never_connect_are_killed_at_the_startup_timeout() {
    let mut plugins = each_lang("never_register", json!({"startup_timeout_s": 0.5}));
    plugins.push(stress(
        "rs",
        "silent",
        "hang_before_hello",
        fast(json!({"startup_timeout_s": 0.5})),
    ));
    plugins.push(stress("py", "ok", "", json!({})));
    let mut b = Broker::spawn(plugins, &[]).await;
    b.wait_ready("ok").await;
    let names = LANGS
        .iter()
        .map(|l| format!("{l}x"))
        .chain(["silent".to_string()]);
    for name in names {
        let name = name.as_str();
        let p = b.wait_state(name, PluginState::Failed, LONG).await;
        assert!(
            p.reason.contains("did not register within 0.5 s"),
            "{name}: {}",
            p.reason
        );
        assert!(p.last_exit.contains("SIGKILL"), "{name}: {}", p.last_exit);
    }
    assert!(b.call("ok_echo", json!({})).await.unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_fails_that_call_at_once_and_the_plugin_returns() {
    let mut b = Broker::start(each_lang(
        "crash_mid_call",
        json!({"restart": {"max_restarts": 5}}),
    ))
    .await;
    for l in LANGS {
        let name = format!("{l}x");
        let before = b.plugin(&name).await;
        let tool = format!("{name}_sleep");
        let err = b
            .call_timeout(&tool, json!({"ms": 400}), 60_000)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
        let msg = err.message();
        assert!(
            msg.contains(&format!("plugin {name}"))
                && msg.contains(&tool)
                && msg.contains("exit status 1"),
            "{msg}"
        );
        let after = b.wait_ready(&name).await;
        assert_eq!(after.restarts, before.restarts + 1);
        assert!(
            b.call(&format!("{name}_echo"), json!({}))
                .await
                .unwrap()
                .success
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_plugin_is_detected_as_hung_and_restarted_but_a_busy_one_is_not() {
    let hb =
        json!({"ping_interval_ms": 100, "hung_timeout_ms": 800, "restart": {"max_restarts": 5}});
    let mut b = Broker::start(each_lang("", hb)).await;
    for l in LANGS {
        let name = format!("{l}x");
        // Busy: a 2 s call is three hung-timeouts long, and pings are still answered.
        let r = b
            .call(&format!("{name}_sleep"), json!({"ms": 2000}))
            .await
            .unwrap();
        assert!(r.success, "{name}: {r:?}");
        // Frozen: the whole process stops answering.
        let before = b.plugin(&name).await;
        let err = b
            .call_timeout(&format!("{name}_hang"), json!({}), 60_000)
            .await
            .unwrap_err();
        assert!(err.message().contains("hung"), "{name}: {}", err.message());
        let after = b.wait_ready(&name).await;
        assert_ne!(after.pid, before.pid);
        assert!(
            after.last_exit.contains("answered no ping"),
            "{name}: {}",
            after.last_exit
        );
    }
    // SIGSTOP is a hang too.
    let before = b.plugin("pyx").await;
    unsafe {
        libc::kill(before.pid as i32, libc::SIGSTOP);
    }
    let after = b
        .wait_for("pyx", LONG, "a new process", |p| {
            p.pid != before.pid && p.state == PluginState::Ready as i32
        })
        .await;
    assert!(after.last_exit.contains("hung"), "{}", after.last_exit);
    assert!(!alive(before.pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_stopped_for_longer_than_the_hung_timeout_keeps_its_plugins() {
    let hb = json!({"ping_interval_ms": 100, "hung_timeout_ms": 800});
    let mut b = Broker::start(vec![stress("py", "pyx", "", hb)]).await;
    let before = b.wait_ready("pyx").await;
    // The broker, not the plugin, is stopped: three hung timeouts long.
    unsafe { libc::kill(b.pid() as i32, libc::SIGSTOP) };
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    unsafe { libc::kill(b.pid() as i32, libc::SIGCONT) };
    b.wait_log("did not run for", LONG).await;
    // A hung verdict would have come within a ping interval of waking up.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let after = b.plugin("pyx").await;
    assert_eq!(after.pid, before.pid, "{}", after.last_exit);
    assert!(alive(before.pid));
    assert!(b.call("pyx_echo", json!({"x": 1})).await.unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crash_budget_marks_a_plugin_failed_and_restart_revives_it() {
    let mut b = Broker::start(vec![stress("py", "pyx", "", fast(json!({})))]).await;
    for round in 0..2 {
        let p = b.wait_ready("pyx").await;
        unsafe {
            libc::kill(p.pid as i32, libc::SIGKILL);
        }
        if round == 0 {
            b.wait_for("pyx", LONG, "a restart", |s| {
                s.restarts == 1 && s.pid != p.pid
            })
            .await;
        }
    }
    let failed = b.wait_state("pyx", PluginState::Failed, LONG).await;
    assert!(
        failed.reason.contains("SIGKILL") && failed.reason.contains("budget of 2"),
        "{}",
        failed.reason
    );
    // Tools of a failed plugin are not offered, and calls fail at once.
    assert!(!b.tools().await.contains(&"pyx_echo".to_string()));
    let err = b.call("pyx_echo", json!({})).await.unwrap_err();
    assert!(err.message().contains("unknown tool"), "{}", err.message());
    let (code, out, err) = b.cli(&["plugins", "restart", "pyx"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ready"), "{out}");
    assert!(b.call("pyx_echo", json!({})).await.unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_during_a_restart_wait_for_the_new_process() {
    let mut b = Broker::start(vec![stress(
        "rs",
        "rsx",
        "",
        fast(json!({"restart": {"max_restarts": 5}})),
    )])
    .await;
    let p = b.plugin("rsx").await;
    unsafe {
        libc::kill(p.pid as i32, libc::SIGKILL);
    }
    b.wait_for("rsx", LONG, "not ready", |s| {
        s.state != PluginState::Ready as i32
    })
    .await;
    // Arrives while the plugin is down: waits (restart_wait) instead of failing.
    let r = b
        .call("rsx_echo", json!({"during": "restart"}))
        .await
        .unwrap();
    assert!(r.success, "{r:?}");
    assert_ne!(b.plugin("rsx").await.pid, p.pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_extends_a_call_up_to_max_total() {
    let mut b = Broker::start(each_lang("", json!({"max_total_s": 1.5}))).await;
    for l in LANGS {
        let tool = format!("{l}x_sleep");
        // 1.2 s of work with a 400 ms timeout: progress every 100 ms keeps it alive.
        let r = b
            .call_timeout(&tool, json!({"ms": 1200, "progress_ms": 100}), 400)
            .await
            .unwrap();
        assert!(r.success, "{tool}: {r:?}");
        // Without progress the timeout holds.
        let err = b
            .call_timeout(&tool, json!({"ms": 1200}), 400)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{tool}");
        // Progress cannot extend past max_total (1.5 s).
        let err = b
            .call_timeout(&tool, json!({"ms": 5000, "progress_ms": 100}), 400)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{tool}");
        assert!(
            err.message().contains("timed out after 1500 ms"),
            "{}",
            err.message()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_results_and_many_tools_work_in_every_language() {
    // 2000 tools to register: allow a busy CI machine the time (this is not a startup
    // test).
    let mut b = Broker::start(each_lang("many_tools", json!({"startup_timeout_s": 30}))).await;
    let tools = b.tools().await;
    for l in LANGS {
        let name = format!("{l}x");
        assert!(
            tools.contains(&format!("{name}_t1999")),
            "{name}: {} tools",
            tools.len()
        );
        let six = 6 * 1024 * 1024;
        let r = b
            .call(&format!("{name}_big"), json!({"bytes": six}))
            .await
            .unwrap();
        assert!(r.success, "{name}");
        assert_eq!(r.content.len(), six, "{name}");
        let r = b
            .call(&format!("{name}_big"), json!({"bytes": 70 * 1024 * 1024}))
            .await
            .unwrap();
        assert!(
            !r.success && r.error.contains("limit"),
            "{name}: {}",
            r.error
        );
        assert_eq!(
            b.call(&format!("{name}_t7"), json!({}))
                .await
                .unwrap()
                .content,
            format!("{name}_t7")
        );
    }
    assert!(tools.len() >= LANGS.len() * 2000, "{}", tools.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_plugin_cannot_exhaust_the_broker() {
    let mut b = Broker::start(each_lang("flood", json!({}))).await;
    // Let every plugin write its 10 MB line and flood for a while.
    for l in LANGS {
        let started = Instant::now();
        while !b
            .cli(&["plugins", "logs", &format!("{l}x"), "-n", "3"])
            .1
            .contains("flood")
        {
            assert!(started.elapsed() < LONG, "{l}x never flooded");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for l in LANGS {
        assert!(
            b.call(&format!("{l}x_echo"), json!({}))
                .await
                .unwrap()
                .success
        );
    }
    let rss_mib = rss_kib(b.pid()) / 1024;
    assert!(
        rss_mib < 200,
        "broker RSS {rss_mib} MiB while plugins flood"
    );
    for l in LANGS {
        let (code, out, err) = b.cli(&["plugins", "logs", &format!("{l}x"), "-n", "0"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.lines().count() <= 500,
            "{l}x: more lines kept than the cap"
        );
        assert!(
            out.lines().all(|l| l.len() < 20 * 1024),
            "{l}x: a log line over the cap"
        );
    }
    // The 10 MB lines were logged capped and marked, and invalid UTF-8 replaced.
    let log = b.log();
    assert!(
        log.matches("…[cut ").count() >= LANGS.len(),
        "no capped line in the log"
    );
    assert!(log.contains('\u{FFFD}'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_new_lines() {
    let mut b = Broker::start(vec![stress("py", "pyx", "junk_stdout", json!({}))]).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(b.data_dir())
        .args(["plugins", "logs", "pyx", "--follow", "-n", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    b.call("pyx_echo", json!({})).await.unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let done = line.contains("banner: call");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    });
    let started = Instant::now();
    while !reader.is_finished() {
        assert!(
            started.elapsed() < LONG,
            "follow never showed the call's banner"
        );
        b.call("pyx_echo", json!({})).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(reader
        .join()
        .unwrap()
        .iter()
        .any(|l| l.contains("banner: call")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grandchildren_and_wrapped_plugins_leave_nothing_behind() {
    // A plugin started through `sh -c` (not exec'd) that also starts a grandchild.
    let wrapper = |b: &Broker| {
        let dir = b.root.path().join("wrapped");
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("run.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n{} -m hearth_plugin run {} \"$@\"\necho wrapper done\n",
                crate::harness::python(),
                crate::harness::repo()
                    .join("tests/plugins/stress.py")
                    .display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        script
    };
    for (round, signal) in [libc::SIGTERM, libc::SIGKILL].into_iter().enumerate() {
        let mut b = Broker::spawn(
            LANGS
                .iter()
                .map(|l| stress(l, &format!("{l}x"), "grandchild", json!({})))
                .collect(),
            &[],
        )
        .await;
        let script = wrapper(&b);
        let wrapped = PluginDir {
            dir: "wrapped".into(),
            // The wrapper starts the venv's Python, which an `exec` plugin's sandbox does
            // not grant (it knows no interpreter); this test is about process groups.
            manifest: json!({"name": "wrapped", "runtime": "exec", "entry": script,
                "env": {"HEARTH_FAULT": "grandchild"}, "sandbox": false}),
        };
        let dir = b.write_plugin(&wrapped);
        let (code, _, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        let mut pids = Vec::new();
        let names = LANGS
            .iter()
            .map(|l| format!("{l}x"))
            .chain(["wrapped".to_string()]);
        for name in names {
            pids.push(b.wait_ready(&name).await.pid);
        }
        let log = b.wait_log("GRANDCHILD_PID=", LONG).await;
        let started = Instant::now();
        let grandchildren = loop {
            let log = b.log();
            let found: Vec<u32> = log
                .match_indices("GRANDCHILD_PID=")
                .filter_map(|(i, _)| {
                    log[i + 15..]
                        .split(|c: char| !c.is_ascii_digit())
                        .next()?
                        .parse()
                        .ok()
                })
                .collect();
            if found.len() > LANGS.len() || started.elapsed() > LONG {
                break found;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        assert_eq!(grandchildren.len(), LANGS.len() + 1, "round {round}: {log}");
        // The wrapped plugin's interpreter is a grandchild of the broker too.
        let all: Vec<u32> = pids.iter().chain(grandchildren.iter()).copied().collect();
        assert!(all.iter().all(|p| alive(*p)));
        b.stop_with(signal);
        let left = wait_gone(&all, Duration::from_secs(5));
        assert!(left.is_empty(), "signal {signal}: processes left: {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_replaces_the_tools_atomically() {
    let mut b = Broker::start(vec![stress("py", "pyx", "many_tools", json!({}))]).await;
    assert!(b.call("pyx_t5", json!({})).await.unwrap().success);
    // New code: the same plugin without `many_tools`.
    let dir = std::path::PathBuf::from(b.plugin("pyx").await.dir);
    let manifest = stress("py", "pyx", "", json!({})).manifest;
    std::fs::write(dir.join("plugin.json"), manifest.to_string()).unwrap();
    let (code, _, err) = b.cli(&["plugins", "reload", "pyx"]);
    assert_eq!(code, 0, "{err}");
    let err = b.call("pyx_t5", json!({})).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().contains("unknown tool `pyx_t5`"));
    assert!(b.call("pyx_echo", json!({})).await.unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_register_and_unregister_tools_at_run_time() {
    let mut b = Broker::start(vec![
        py_echo("py", json!({})),
        PluginDir {
            dir: "rt".into(),
            manifest: json!({"name": "rt", "runtime": "python",
            "entry": crate::harness::repo().join("tests/plugins/runtime_tools.py")}),
        },
    ])
    .await;
    assert!(
        b.call("rt_add", json!({"name": "rt_extra"}))
            .await
            .unwrap()
            .success
    );
    let r = b.call("rt_extra", json!({"x": 1})).await.unwrap();
    assert!(r.success && r.content.contains("rt_extra"), "{r:?}");
    assert!(
        b.call("rt_remove", json!({"name": "rt_extra"}))
            .await
            .unwrap()
            .success
    );
    let err = b.call("rt_extra", json!({})).await.unwrap_err();
    assert!(err.message().contains("unknown tool"), "{}", err.message());
    // A name another plugin owns is refused by the broker, naming that plugin.
    assert!(
        b.call("rt_add", json!({"name": "py_echo"}))
            .await
            .unwrap()
            .success
    );
    let log = b.wait_log("run-time registration refused", LONG).await;
    assert!(log.contains("already registered by plugin py"), "{log}");
    assert_eq!(b.call("py_echo", json!({})).await.unwrap().plugin, "py");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_reload_unload_while_another_plugin_serves() {
    let mut b = Broker::start(vec![stress("rs", "steady", "", json!({}))]).await;
    // A steady stream of calls to the other plugin for the whole test.
    let mut admin = Broker::admin_clone(&b);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let steady = tokio::spawn(async move {
        let (mut ok, mut failed) = (0u32, Vec::new());
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let req = admin.with_token(hearth_proto::v1::CallToolRequest {
                name: "steady_echo".into(),
                args_json: "{}".into(),
                ..Default::default()
            });
            match admin.client().call_tool(req).await {
                Ok(r) if r.get_ref().success => ok += 1,
                other => failed.push(format!("{other:?}")),
            }
        }
        (ok, failed)
    });
    for l in LANGS {
        let name = format!("{l}hot");
        let dir = b.write_plugin(&stress(l, &name, "", json!({})));
        let (code, out, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(out.contains("ready"), "{out}");
        let before = b.plugin(&name).await;
        // A call in flight during the reload finishes on the old process.
        let mut admin = Broker::admin_clone(&b);
        let tool = format!("{name}_sleep");
        let in_flight = tokio::spawn(async move {
            let req = admin.with_token(hearth_proto::v1::CallToolRequest {
                name: tool,
                args_json: r#"{"ms": 700}"#.into(),
                ..Default::default()
            });
            admin.client().call_tool(req).await.map(|r| r.into_inner())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (code, _, err) = b.cli(&["plugins", "reload", &name]);
        assert_eq!(code, 0, "{name}: {err}");
        let r = in_flight.await.unwrap().unwrap();
        assert!(r.success, "{name}: in-flight call lost in reload: {r:?}");
        let after = b.plugin(&name).await;
        assert_ne!(after.pid, before.pid);
        // The reload answers once the new process serves; the old one stops after
        // its calls drained.
        assert!(wait_gone(&[before.pid], LONG).is_empty());
        assert!(
            b.call(&format!("{name}_echo"), json!({}))
                .await
                .unwrap()
                .success
        );
        let (code, _, err) = b.cli(&["plugins", "unload", &name]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(!alive(after.pid));
        assert!(b.plugins().await.iter().all(|p| p.name != name));
        let err = b
            .call(&format!("{name}_echo"), json!({}))
            .await
            .unwrap_err();
        assert!(err.message().contains("unknown tool"));
    }
    let (code, _, err) = b.cli(&["plugins", "load", "/nonexistent/plugin"]);
    assert_eq!(code, 1);
    assert!(err.contains("the directory does not exist"), "{err}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = steady.await.unwrap();
    assert!(
        failed.is_empty(),
        "calls to the other plugin failed: {failed:?}"
    );
    assert!(ok > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reloads_a_plugin_when_its_files_change() {
    let mut b = Broker::start_with(vec![py_echo("py", json!({}))], &["--watch"]).await;
    let before = b.plugin("py").await;
    let dir = std::path::PathBuf::from(&before.dir);
    std::fs::write(dir.join("notes.txt"), "changed").unwrap();
    let after = b
        .wait_for("py", LONG, "a reload", |p| {
            p.pid != before.pid && p.state == PluginState::Ready as i32
        })
        .await;
    assert_eq!(after.restarts, before.restarts + 1);
    b.wait_log("--watch: reloaded", LONG).await;
    assert!(b.call("py_echo", json!({})).await.unwrap().success);
}
