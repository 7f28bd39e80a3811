//! The `hearth` CLI as scripts use it (issue 15, "CLI for scripts" and "Progress people
//! can see"), against a real broker and real plugins:
//! - `--json` on the commands that lacked it parses;
//! - the exit status says what went wrong: unknown tool 3, a policy's refusal 4, the
//!   tool's error 5, a timeout 6, no broker 7, arguments that are not JSON 2;
//! - tool arguments from stdin (`-`) and a file (`@FILE`);
//! - `hearth completions bash` and `hearth --version` (with the commit);
//! - `tools call --json` prints a tool's progress as JSON lines before the result, and
//!   piped without `--json` only the result; `chat --json` carries the progress too.

use std::io::Write;
use std::process::{Command, Stdio};

use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};

use crate::harness::{stress, Broker, PluginDir};

/// Exit statuses as `hearth --help` lists them (`hearth_broker::cli::exit`).
use hearth_broker::cli::exit;

/// The `hearth` CLI with `--data-dir data_dir`, `stdin` written to its standard input;
/// (exit code, stdout, stderr).
fn hearth_with_stdin(
    data_dir: &std::path::Path,
    args: &[&str],
    stdin: &str,
) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each line of `out` as JSON (panics, naming the line, when one is not).
fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} in\n{out}")))
        .collect()
}

fn code(c: u8) -> i32 {
    i32::from(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_of_plugin_llm_inject_adapter_and_settings_commands_parses() {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"steps": [{"match": "", "content": "ok"}]})).unwrap(),
    );
    let mut b = Broker::with_llm(vec![stress("py", "sj", "", json!({}))], &llm, &[]).await;
    let before = b.plugin("sj").await;

    let (c, out, err) = b.cli(&["plugins", "restart", "sj", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["name"].as_str(), v["state"].as_str()),
        (Some("sj"), Some("ready")),
        "{v}"
    );
    assert_ne!(v["pid"], json!(before.pid), "{v}");
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "sj_echo"),
        "{v}"
    );

    let (c, out, err) = b.cli(&["plugins", "reload", "sj", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["state"], "ready", "{v}");
    let dir = v["dir"].as_str().unwrap().to_string();

    let (c, out, err) = b.cli(&["plugins", "unload", "sj", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["unloaded"].as_str(), v["was"]["name"].as_str()),
        (Some("sj"), Some("sj")),
        "{v}"
    );

    let (c, out, err) = b.cli(&["plugins", "load", &dir, "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["name"].as_str(), v["state"].as_str()),
        (Some("sj"), Some("ready")),
        "{v}"
    );

    // Logs: one object per line, each with the fields scripts read.
    let (c, out, err) = b.cli(&["plugins", "logs", "sj", "--json"]);
    assert_eq!(c, 0, "{err}");
    let lines = json_lines(&out);
    assert!(!lines.is_empty(), "{out}");
    for l in &lines {
        assert_eq!(l["plugin"], "sj", "{l}");
        for key in ["stream", "text", "unix_ms", "pid", "time", "generation"] {
            assert!(l.get(key).is_some(), "{key} missing: {l}");
        }
    }
    assert!(lines.iter().any(|l| l["stream"] == "broker"), "{out}");

    // LLM sources: `use` answers with the list, as `list --json` does.
    let (c, out, err) = b.cli(&["llm", "list", "--json"]);
    assert_eq!(c, 0, "{err}");
    let sources: Value = serde_json::from_str(&out).unwrap();
    let name = sources[0]["name"].as_str().unwrap().to_string();
    let (c, out, err) = b.cli(&["llm", "use", &name, "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == name && s["current"] == true),
        "{v}"
    );

    let (c, out, err) = b.cli(&["inject", "hello from a script", "--user", "ann", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["conversation"].as_str().unwrap().contains("ann"), "{v}");
    assert!(v["ahead"].is_u64() && v["interrupted"] == false, "{v}");

    // Local commands (no broker needed).
    let (c, out, err) = b.cli(&["adapters", "list", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["adapters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "openai"),
        "{v}"
    );
    let (c, out, err) = b.cli(&["adapters", "check", "openai", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["adapter"].as_str(), v["ok"].as_bool()),
        (Some("openai"), Some(true)),
        "{v}"
    );
    assert_eq!(v["steps"][0]["step"], "load", "{v}");
    let (c, out, _) = b.cli(&["adapters", "check", "nope", "--json"]);
    assert_eq!(c, code(exit::NOT_FOUND), "{out}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["ok"], false);

    let (c, out, err) = b.cli(&["settings", "set", "cli.test", "3", "--json"]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["key"].as_str(), v["secret"].as_bool()),
        (Some("cli.test"), Some(false)),
        "{v}"
    );
    let (c, out, err) = b.cli(&["settings", "get", "cli.test", "--json"]);
    assert_eq!(c, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"key": "cli.test", "value": 3})
    );
    let (c, _, err) = b.cli(&["settings", "get", "cli.nope"]);
    assert_eq!(c, code(exit::NOT_FOUND), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_tell_not_found_refused_plugin_error_timeout_and_unreachable_apart() {
    let cool = PluginDir {
        dir: "cool".into(),
        manifest: json!({"name": "cool", "runtime": "python",
            "entry": crate::harness::repo().join("tests/plugins/lz_policy.py"),
            "env": {"LZ_NAME": "cool", "LZ_POLICY": json!({"cooldown": 3600}).to_string()}}),
    };
    let b = Broker::start(vec![stress("py", "se", "", json!({})), cool]).await;

    let (c, _, err) = b.cli(&["tools", "call", "se_echo", r#"{"a": 1}"#]);
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = b.cli(&["tools", "call", "nope"]);
    assert_eq!((c, out.as_str()), (code(exit::NOT_FOUND), ""), "{err}");
    assert!(err.contains("unknown tool `nope`"), "{err}");
    let (c, _, err) = b.cli(&["plugins", "restart", "nope"]);
    assert_eq!(c, code(exit::NOT_FOUND), "{err}");

    let (c, _, err) = b.cli(&["tools", "call", "se_fail"]);
    assert_eq!(c, code(exit::PLUGIN_ERROR), "{err}");
    assert!(err.contains("failing on purpose"), "{err}");

    let (c, _, err) = b.cli(&[
        "tools",
        "call",
        "se_sleep",
        r#"{"ms": 10000}"#,
        "--timeout-ms",
        "300",
    ]);
    assert_eq!(c, code(exit::TIMEOUT), "{err}");
    assert!(err.contains("timed out"), "{err}");

    // The cooldown refuses the second call made with --policies.
    let (c, _, err) = b.cli(&["tools", "call", "cool", "--policies"]);
    assert_eq!(c, 0, "{err}");
    let (c, _, err) = b.cli(&["tools", "call", "cool", "--policies"]);
    assert_eq!(c, code(exit::REFUSED), "{err}");
    assert!(err.contains("cooldown"), "{err}");

    // Not JSON: a usage error, before anything is called.
    let (c, _, err) = b.cli(&["tools", "call", "se_echo", "{oops"]);
    assert_eq!(c, code(exit::USAGE), "{err}");
    assert!(err.contains("not JSON"), "{err}");

    // No broker for the data dir; a token that does not match.
    let empty = tempfile::tempdir().unwrap();
    let (c, _, err) = hearth_with_stdin(empty.path(), &["tools", "list"], "");
    assert_eq!(c, code(exit::UNREACHABLE), "{err}");
    assert!(err.contains("no broker running"), "{err}");
    let token = b.data_dir().join("admin.token");
    let saved = std::fs::read(&token).unwrap();
    std::fs::write(&token, "wrong").unwrap();
    let (c, _, err) = b.cli(&["plugins", "list", "--json"]);
    std::fs::write(&token, saved).unwrap();
    assert_eq!(c, code(exit::UNREACHABLE), "{err}");

    // The codes are documented where people look.
    let (c, help, _) = b.cli(&["--help"]);
    assert_eq!(c, 0);
    assert!(
        help.contains("Exit codes:") && help.contains("7    broker unreachable"),
        "{help}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_arguments_come_from_stdin_or_a_file() {
    let mut b = Broker::start(vec![stress("py", "sa", "", json!({}))]).await;
    let data = |out: &str| serde_json::from_str::<Value>(out).unwrap()["data"].clone();

    let (c, out, err) = hearth_with_stdin(
        &b.data_dir(),
        &["tools", "call", "sa_echo", "-", "--json"],
        r#"{"from": "stdin", "n": [1, 2]}"#,
    );
    assert_eq!(c, 0, "{err}");
    assert_eq!(data(&out), json!({"from": "stdin", "n": [1, 2]}));

    let file = b.root.path().join("args.json");
    std::fs::write(&file, "{\"from\": \"file\"}\n").unwrap();
    let at = format!("@{}", file.display());
    let (c, out, err) = b.cli(&["tools", "call", "sa_echo", &at, "--json"]);
    assert_eq!(c, 0, "{err}");
    assert_eq!(data(&out), json!({"from": "file"}));

    let (c, _, err) = hearth_with_stdin(
        &b.data_dir(),
        &["tools", "call", "sa_echo", "-"],
        "not json",
    );
    assert_eq!(c, code(exit::USAGE), "{err}");
    assert!(err.contains("tool arguments (stdin): not JSON"), "{err}");
    let (c, _, err) = b.cli(&["tools", "call", "sa_echo", "@/no/such/file.json"]);
    assert_eq!(c, code(exit::ERROR), "{err}");
    assert!(err.contains("/no/such/file.json"), "{err}");

    // Arguments bigger than one message: a usage error naming the size, not a broker
    // outage (the stream would be reset).
    let big = b.root.path().join("big.json");
    std::fs::write(&big, format!("{{\"s\": \"{}\"}}", "x".repeat(65 << 20))).unwrap();
    let at = format!("@{}", big.display());
    let (c, _, err) = b.cli(&["tools", "call", "sa_echo", &at]);
    assert_eq!(c, code(exit::USAGE), "{err}");
    assert!(err.contains("over the 64 MiB message limit"), "{err}");
    assert!(
        b.call("sa_echo", json!({"after": "big"}))
            .await
            .unwrap()
            .success
    );
}

#[test]
fn completions_and_version_with_the_commit() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (c, script) = run(&["completions", "bash"]);
    assert_eq!(c, 0);
    assert!(
        script.contains("_hearth()") && script.contains("complete -F"),
        "{script}"
    );
    assert!(
        script.contains("plugins") && script.contains("--data-dir"),
        "{script}"
    );
    for shell in ["zsh", "fish"] {
        let (c, script) = run(&["completions", shell]);
        assert_eq!(c, 0, "{shell}");
        assert!(script.contains("hearth"), "{shell}: {script}");
    }
    let (c, _) = run(&["completions", "tcsh"]);
    assert_eq!(c, code(exit::USAGE));

    let (c, version) = run(&["--version"]);
    assert_eq!(c, 0);
    assert_eq!(
        version.trim(),
        format!(
            "hearth {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            hearth_broker::BUILD_COMMIT
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_json_prints_progress_lines_before_the_result_and_a_pipe_only_the_result() {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"steps": [
            {"match": "slow", "after_tool": false, "tool_calls": [
                {"name": "sp_sleep", "arguments": {"ms": 800, "progress_ms": 150}}]},
            {"match": "slow", "after_tool": true, "content": "done: {tool_results}"}
        ]}))
        .unwrap(),
    );
    let b = Broker::with_llm(vec![stress("py", "sp", "", json!({}))], &llm, &[]).await;
    let args = r#"{"ms": 800, "progress_ms": 150}"#;

    let (c, out, err) = b.cli(&["tools", "call", "sp_sleep", args, "--json"]);
    assert_eq!(c, 0, "{err}");
    let lines = json_lines(&out);
    let (result, progress) = lines.split_last().unwrap();
    assert_eq!(result["type"], "result", "{out}");
    assert_eq!(
        (result["success"].as_bool(), result["content"].as_str()),
        (Some(true), Some("slept 800 ms")),
        "{out}"
    );
    assert!(progress.len() >= 2, "{out}");
    for p in progress {
        assert_eq!(p["type"], "progress", "{p}");
        assert!(p["message"].as_str().unwrap().starts_with("slept "), "{p}");
        assert!(p["progress"].is_number() && p["total"].is_number(), "{p}");
    }
    // Progress only grows.
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] <= w[1]), "{values:?}");

    // Piped without --json: the result alone, as before.
    let (c, out, err) = b.cli(&["tools", "call", "sp_sleep", args]);
    assert_eq!(c, 0, "{err}");
    assert_eq!(out, "slept 800 ms\n");
    assert!(err.is_empty(), "{err:?}");

    // `hearth chat --json` carries the tool's progress between its start and finish;
    // piped without --json nothing of it is printed.
    let (c, out, err) = b.cli(&["chat", "slow please", "--json"]);
    assert_eq!(c, 0, "{err}");
    let events = json_lines(&out);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let started = kinds
        .iter()
        .position(|k| *k == "tool_call_started")
        .expect("started");
    let finished = kinds
        .iter()
        .position(|k| *k == "tool_call_finished")
        .expect("finished");
    let progress: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_progress")
        .collect();
    assert!(!progress.is_empty(), "{out}");
    for (i, e) in events.iter().enumerate() {
        if e["type"] == "tool_call_progress" {
            assert!(started < i && i < finished, "{out}");
            assert_eq!(
                (e["tool"].as_str(), e["plugin"].as_str()),
                (Some("sp_sleep"), Some("sp")),
                "{e}"
            );
            assert_eq!(e["call_id"], events[started]["call_id"], "{e}");
            assert!(
                e.get("progress").is_some() && e.get("total").is_some(),
                "{e}"
            );
        }
    }
    let (c, out, err) = b.cli(&["chat", "slow again"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        !out.contains('\r') && !out.contains("\x1b[") && !out.contains(" of 800 ms"),
        "{out:?}"
    );
    assert!(
        out.contains("⚙ sp_sleep") && out.contains("done: "),
        "{out}"
    );
}

/// Output piped into a reader that stops early (`| head -1`): the command ends without
/// a panic message.
#[test]
fn a_closed_pipe_ends_printing_commands_quietly() {
    for args in [&["completions", "zsh"][..], &["adapters", "list"][..]] {
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .arg("--data-dir")
            .arg(data.path())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end at once: every write fails with EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
