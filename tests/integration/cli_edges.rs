//! What a new user hit (issue 13, CLI edges), with a real broker and real plugins:
//! - `hearth tools call` applies `ai.tool` policies only with `--policies`, and says so;
//! - a plugin started by hand with the admin token (or any unknown token) is refused
//!   with a clear UNAUTHENTICATED, never grpcio's "INTERNAL: Internal error from Core",
//!   and the broker logs it;
//! - a setting with a def only takes a value of the def's type (CLI and host service);
//! - `hearth plugins unload` says what it unloaded;
//! - `hearth plugins logs` shows when each line was read and where each process
//!   starts, also with `--follow` and `--json`;
//! - `hearth chat` reading stdin exits 1 when a turn failed.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hearth_broker::storage::{ConfigDef, Db, Scope, Settings};
use hearth_proto::v1::settings_client::SettingsClient;
use hearth_proto::v1::{CallToolRequest, KeyRequest, PluginState};
use serde_json::{json, Value};

use crate::harness::{py_echo, python, repo, socket_channel, Broker, PluginDir};

const LONG: Duration = Duration::from_secs(30);

/// `tests/plugins/lz_policy.py` as plugin and tool `name` with `ai.tool` `policy`.
fn lz(name: &str, policy: Value) -> PluginDir {
    PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": "python",
            "entry": repo().join("tests/plugins/lz_policy.py"),
            "env": {"LZ_NAME": name, "LZ_POLICY": policy.to_string()}}),
    }
}

/// The `hearth` CLI in a session of its own (no controlling terminal: a question it
/// would ask on /dev/tty is answered "no" at once); (exit code, stdout, stderr).
fn cli_without_tty(b: &Broker, args: &[&str]) -> (i32, String, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hearth"));
    cmd.arg("--data-dir").arg(b.data_dir()).args(args);
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_applies_ai_tool_policies_only_with_policies() {
    let b = Broker::start(vec![
        lz("cool", json!({"cooldown": 3600})),
        lz("ask", json!({"confirm": true})),
    ])
    .await;

    // The help says what happens without --policies.
    let (code, help, _) = b.cli(&["tools", "call", "--help"]);
    assert_eq!(code, 0);
    assert!(
        help.contains("--policies") && help.contains("policies are NOT applied"),
        "{help}"
    );

    // Without --policies: an operator's call; cooldown and confirm do not stop it.
    for n in 1..=2 {
        let (code, out, err) = cli_without_tty(&b, &["tools", "call", "cool"]);
        assert_eq!(code, 0, "call {n}: {err}");
        assert!(out.contains(&format!("cool ran #{n}")), "{out}");
    }
    let (code, out, err) = cli_without_tty(&b, &["tools", "call", "ask"]);
    assert_eq!((code, out.contains("ask ran #1")), (0, true), "{out}{err}");

    // With --policies: a conversation of its own by user `cli`; the cooldown holds.
    let (code, out, err) = cli_without_tty(&b, &["tools", "call", "cool", "--policies"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cool ran #3 for cli"), "{out}");
    let (code, out, err) = cli_without_tty(&b, &["tools", "call", "cool", "--policies"]);
    assert_eq!(code, 4, "refused: {out}");
    assert!(
        err.contains("cooldown: tool cool may be called again by user `cli` in"),
        "{err}"
    );
    // Per user: another user may, once; and the chat's default user, `user`, reads
    // right ("cooling down for user user" was the old text).
    let as_user = ["tools", "call", "cool", "--policies", "--user", "user"];
    let (code, out, err) = cli_without_tty(&b, &as_user);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cool ran #4 for user"), "{out}");
    let (code, _, err) = cli_without_tty(&b, &as_user);
    assert_eq!(code, 4, "refused");
    assert!(err.contains("by user `user` in"), "{err}");
    assert!(!err.contains("user user"), "{err}");

    // confirm: no terminal to ask is a no (not run, exit 1); --yes approves.
    let (code, out, err) = cli_without_tty(&b, &["tools", "call", "ask", "--policies"]);
    assert_eq!(code, 4, "refused: {out}");
    assert!(err.contains("did not approve"), "{err}");
    let (code, out, err) = cli_without_tty(&b, &["tools", "call", "ask", "--policies", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ask ran #2 for cli"), "{out}");

    // On the wire: a confirm tool asked without `confirmed` says so and starts no
    // cooldown.
    let mut admin = Broker::admin_clone(&b);
    let call = |confirmed: bool| CallToolRequest {
        name: "ask".into(),
        user_id: "wire".into(),
        policies: true,
        confirmed,
        ..Default::default()
    };
    let req = admin.with_token(call(false));
    let r = admin.client().call_tool(req).await.unwrap().into_inner();
    assert!(!r.success && r.needs_confirmation, "{r:?}");
    assert!(r.error.starts_with("confirm: tool ask"), "{r:?}");
    let req = admin.with_token(call(true));
    let r = admin.client().call_tool(req).await.unwrap().into_inner();
    assert!(r.success && r.content.contains("for wire"), "{r:?}");
}

/// Runs `tests/plugins/py_echo.py` by hand with `HEARTH_TOKEN=token`; its stderr.
fn by_hand(b: &Broker, token: &str) -> String {
    let out = Command::new(python())
        .args(["-m", "hearth_plugin", "run"])
        .arg(repo().join("tests/plugins/py_echo.py"))
        .env_remove("HEARTH_TOKEN_FD")
        .env(
            "HEARTH_ADDR",
            format!("unix://{}", b.data_dir().join("hearth.sock").display()),
        )
        .env("HEARTH_PLUGIN", "echo")
        .env("HEARTH_TOKEN", token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_with_the_admin_token_or_a_wrong_one_is_told_and_logged() {
    let mut b = Broker::start(vec![py_echo("py", json!({}))]).await;
    let admin_token = std::fs::read_to_string(b.data_dir().join("admin.token")).unwrap();

    let err = by_hand(&b, admin_token.trim());
    assert!(
        err.contains("UNAUTHENTICATED: this is the admin token")
            && err.contains("hearth plugins attach-token"),
        "{err}"
    );
    b.wait_log("refused: the admin token was sent as a plugin token", LONG)
        .await;

    // A wrong token, many times: the refusal arrives as such every time (grpcio
    // reported "INTERNAL: Internal error from Core" when it raced the handshake).
    for _ in 0..8 {
        let err = by_hand(&b, "not-a-token");
        assert!(
            err.contains("UNAUTHENTICATED: x-hearth-token does not match any plugin")
                && !err.contains("INTERNAL"),
            "{err}"
        );
    }
    b.wait_log("refused: unknown token", LONG).await;

    // Host services say the same about the admin token.
    let mut settings = SettingsClient::new(socket_channel(&b.data_dir()).await);
    let mut req = tonic::Request::new(KeyRequest {
        key: "k".into(),
        ..Default::default()
    });
    req.metadata_mut().insert(
        hearth_proto::TOKEN_METADATA,
        admin_token.trim().parse().unwrap(),
    );
    let e = settings.get(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    assert!(e.message().starts_with("this is the admin token"), "{e:?}");
    // The plugin the broker started is untouched.
    assert!(b.call("py_echo", json!({})).await.unwrap().success);
}

/// Registers `defs` (key, type) for `scope` in the data dir's hearth.db.
async fn define(data_dir: &Path, scope: Scope, defs: &[(&str, &str)]) {
    let settings = Settings::new(Db::open(data_dir).await.unwrap());
    for (key, ty) in defs {
        settings
            .register_def(
                &scope,
                ConfigDef {
                    key: key.to_string(),
                    r#type: ty.to_string(),
                    ..ConfigDef::default()
                },
            )
            .await
            .unwrap();
    }
}

fn hearth(data_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_set_refuses_a_value_of_the_wrong_type() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let defs = [("days", "number"), ("name", "string"), ("on", "boolean")];
    define(&data, Scope::Core, &defs).await;
    define(&data, Scope::Plugin("weather".into()), &defs).await;
    for plugin in [None, Some("weather")] {
        let with = |args: &[&'static str]| {
            let mut v = args.to_vec();
            if let Some(p) = plugin {
                v.extend(["--plugin", p]);
            }
            v
        };
        let (code, _, err) = hearth(&data, &with(&["settings", "set", "days", "abc"]));
        assert_eq!(code, 1, "{plugin:?}");
        let scope = plugin.map_or("core".to_string(), |p| format!("plugin {p}"));
        assert!(
            err.contains(&format!(
                "setting `days` of {scope}: expected a number (its def's type is `number`), got \"abc\" (a string)"
            )),
            "{err}"
        );
        let (code, _, err) = hearth(&data, &with(&["settings", "set", "on", "3"]));
        assert_eq!(code, 1);
        assert!(err.contains("expected a boolean"), "{err}");
        // Nothing was written; right types are.
        let (code, _, _) = hearth(&data, &with(&["settings", "get", "days"]));
        assert_eq!(code, 3, "not found");
        for (key, value, stored) in [
            ("days", "3", "3"),
            ("on", "true", "true"),
            // A string key takes the text as it is, even when it reads as JSON.
            ("name", "123", "\"123\""),
            ("name", "\"quoted\"", "\"quoted\""),
        ] {
            let (code, _, err) = hearth(&data, &with(&["settings", "set", key, value]));
            assert_eq!(code, 0, "{key}={value}: {err}");
            let (_, out, _) = hearth(&data, &with(&["settings", "get", key]));
            assert_eq!(out.trim(), stored, "{key}={value}");
        }
    }
}

/// Plugin `hp` (`tests/plugins/host_probe.py`) makes host call `call(args…)`; its
/// answer, `{"ok": value}` or `{"error": code, "message": text}`.
async fn host(b: &mut Broker, call: &str, args: Value) -> Value {
    let r = b
        .call("hp_host", json!({"call": call, "args": args}))
        .await
        .unwrap();
    assert!(r.success, "{r:?}");
    let text = if r.data_json.is_empty() {
        &r.content
    } else {
        &r.data_json
    };
    serde_json::from_str(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_setting_its_own_key_gets_the_same_type_check() {
    let mut b = Broker::start(vec![PluginDir {
        dir: "hp".into(),
        manifest: json!({"name": "hp", "runtime": "python",
            "entry": repo().join("tests/plugins/host_probe.py")}),
    }])
    .await;
    let got = host(
        &mut b,
        "settings.register_def",
        json!([{"key": "days", "type": "number"}]),
    )
    .await;
    assert_eq!(got, json!({"ok": null}));
    let got = host(&mut b, "settings.set", json!(["days", "abc"])).await;
    assert_eq!(got["error"], "INVALID_ARGUMENT", "{got}");
    let message = got["message"].as_str().unwrap();
    assert!(
        message.contains("setting `days` of plugin hp: expected a number")
            && message.contains("got \"abc\""),
        "{message}"
    );
    assert_eq!(
        host(&mut b, "settings.set", json!(["days", 4])).await,
        json!({"ok": null})
    );
    // The CLI checks against the def the plugin registered.
    let (code, _, err) = b.cli(&["settings", "set", "days", "x", "--plugin", "hp"]);
    assert_eq!(code, 1);
    assert!(err.contains("expected a number"), "{err}");
    assert_eq!(b.plugin("hp").await.state, PluginState::Ready as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_unload_says_what_it_unloaded() {
    let mut b = Broker::start(vec![py_echo("py", json!({}))]).await;
    let before = b.plugin("py").await;
    let (code, out, err) = b.cli(&["plugins", "unload", "py"]);
    assert_eq!(code, 0, "{err}");
    let tools = before.tools.join(", ");
    assert_eq!(
        out.trim(),
        format!(
            "unloaded py (was pid {}, ready, {} tools: {tools})",
            before.pid,
            before.tools.len()
        )
    );
    let (code, _, err) = b.cli(&["plugins", "unload", "py"]);
    assert_eq!(code, 3, "not found");
    assert!(err.contains("unknown plugin `py`"), "{err}");
}

/// An RFC 3339 time with milliseconds (`2026-12-01T12:00:01.123+01:00`) starts `line`.
fn starts_with_time(line: &str) -> bool {
    let stamp = line.split(' ').next().unwrap_or("");
    stamp.len() >= 24 && stamp.as_bytes()[19] == b'.' && stamp.parse::<jiff::Timestamp>().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_logs_have_times_and_mark_each_process() {
    let mut b = Broker::start(vec![py_echo("py", json!({}))]).await;
    let first = b.plugin("py").await.pid;
    // A follower from the start: it sees the next process start.
    let mut follower = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(b.data_dir())
        .args(["plugins", "logs", "py", "-f", "-n", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // (With `-n 0` it prints every kept line first: whenever it subscribed, the new
    // process's marker is in what it prints.)
    let (code, _, err) = b.cli(&["plugins", "restart", "py"]);
    assert_eq!(code, 0, "{err}");
    let second = b.wait_ready("py").await.pid;
    assert_ne!(first, second);

    let (code, out, err) = b.cli(&["plugins", "logs", "py", "-n", "0"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.iter().all(|l| starts_with_time(l)), "{out}");
    let marker = |pid: u32| {
        lines
            .iter()
            .position(|l| l.contains(&format!("── pid {pid} started")) && l.ends_with(" ──"))
    };
    let (Some(m1), Some(m2)) = (marker(first), marker(second)) else {
        panic!("no marker per process:\n{out}");
    };
    assert!(m1 < m2, "{out}");
    assert!(lines[m2].contains("(restart 1; last exit: "), "{out}");

    // --json: one object per line with the new fields.
    let (code, out, err) = b.cli(&["plugins", "logs", "py", "-n", "0", "--json"]);
    assert_eq!(code, 0, "{err}");
    let records: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(records.iter().all(|r| r["plugin"] == "py"
        && r["unix_ms"].as_u64().unwrap() > 0
        && r["time"].as_str().is_some_and(|t| t.len() >= 24)));
    let markers: Vec<&Value> = records.iter().filter(|r| r["stream"] == "broker").collect();
    assert_eq!(markers.len(), 2, "{out}");
    assert_eq!(markers[1]["pid"], json!(second));
    assert!(records
        .iter()
        .filter(|r| r["stream"] != "broker")
        .all(|r| r["pid"] == json!(first) || r["pid"] == json!(second)));

    // The follower printed the new process's marker as it came.
    let started = Instant::now();
    loop {
        let line = rx
            .recv_timeout(LONG.saturating_sub(started.elapsed()))
            .unwrap_or_else(|_| panic!("the follower never showed pid {second} starting"));
        if line.contains(&format!("── pid {second} started")) {
            break;
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_chat_exits_1_when_a_turn_failed() {
    // No LLM source: every turn fails.
    let b = Broker::start(vec![]).await;
    let mut chat = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(b.data_dir())
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    chat.stdin
        .take()
        .unwrap()
        .write_all(b"hi\n\nagain\n")
        .unwrap();
    let out = chat.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no LLM source"), "{err}");
    assert!(err.contains("error: 2 of 2 turns failed"), "{err}");
}
