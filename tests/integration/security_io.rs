//! What crosses the broker's edges from untrusted code (issue 11, items 8–10), with a
//! real broker and a real plugin (`tests/plugins/hostile.py`):
//! - knowledge symlinks that leave `<data_dir>/knowledge/` are never served;
//! - control and bidi characters from plugins never reach the broker log raw, and the
//!   CLI escapes them on a terminal (run under a pseudo-terminal) but not on a pipe or
//!   with `--raw`;
//! - tokens are checked before a request body is read: big unauthenticated calls are
//!   refused at once, without the broker's memory growing by their size.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use hearth_proto::v1::admin_client::AdminClient;
use hearth_proto::v1::knowledge_client::KnowledgeClient;
use hearth_proto::v1::{CallToolRequest, KnowledgeEntry, ListToolsRequest};
use serde_json::{json, Value};

use crate::harness::{python, repo, Broker, PluginDir};

/// `tests/plugins/hostile.py` named `name`, with `capabilities`.
fn hostile(name: &str, capabilities: &[&str]) -> PluginDir {
    PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": "python",
            "entry": repo().join("tests/plugins/hostile.py"), "capabilities": capabilities}),
    }
}

/// Peak resident memory (VmHWM) of `pid` in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The result of `tool` as JSON (the SDK sends a dict as `data_json`).
async fn call_json(b: &mut Broker, tool: &str, args: Value) -> Value {
    let r = b.call(tool, args).await.unwrap();
    assert!(r.success, "{tool}: {r:?}\n{}", b.log());
    serde_json::from_str(&r.data_json).unwrap_or_else(|e| panic!("{e}: {r:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_symlinks_leaving_the_folder_are_never_served() {
    let secret_marker = "zebra outside-the-folder marker";
    let mut b = Broker::spawn_with_files(
        vec![hostile("kn", &["knowledge"])],
        &[],
        &[("knowledge/real.md", "zebra real entry")],
    )
    .await;
    b.wait_ready("kn").await;
    let data = b.data_dir();
    let token = std::fs::read_to_string(data.join("admin.token")).unwrap();
    let token = token.trim().to_string();
    let outside = b.root.path().join("outside.md");
    std::fs::write(&outside, secret_marker).unwrap();
    let kdir = data.join("knowledge");
    std::os::unix::fs::symlink("../admin.token", kdir.join("token.md")).unwrap();
    std::os::unix::fs::symlink(&outside, kdir.join("outside.md")).unwrap();
    std::os::unix::fs::symlink("real.md", kdir.join("alias.md")).unwrap();

    for query in ["zebra", token.as_str(), "marker", "outside"] {
        let got = call_json(&mut b, "kn_knowledge", json!({ "query": query })).await;
        let text = got.to_string();
        assert!(
            !text.contains(&token) && !text.contains("marker"),
            "a link target was served for {query:?}: {text}"
        );
        assert_eq!(got["list"], json!(["alias", "real"]), "{text}");
    }
    let got = call_json(&mut b, "kn_knowledge", json!({"query": "zebra"})).await;
    let mut found: Vec<&str> = got["found"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    found.sort();
    assert_eq!(found, ["alias", "real"], "{got}");

    // Each skipped link is named once in the log, however often the folder is synced.
    let log = b.log();
    for link in ["token.md", "outside.md"] {
        let warnings = log
            .lines()
            .filter(|l| {
                l.contains("symlink leads outside the knowledge folder") && l.contains(link)
            })
            .count();
        assert_eq!(warnings, 1, "{link}:\n{log}");
    }
    assert!(
        !log.contains(&token),
        "the admin token is in the log:\n{log}"
    );
}

/// Runs `hearth --data-dir D args…` with its stdout and stderr on a pseudo-terminal;
/// returns what it printed there (`\r\n` turned back into `\n`).
fn cli_on_terminal(b: &Broker, args: &[&str]) -> String {
    let mut argv: Vec<String> = vec![
        env!("CARGO_BIN_EXE_hearth").into(),
        "--data-dir".into(),
        b.data_dir().display().to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    let has_script = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let out = if has_script {
        // util-linux `script`: the command runs on a new pty; -q no banner, -e its
        // exit status, -c the command (a shell line: quote every argument).
        let line = argv
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ");
        Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .output()
            .unwrap()
    } else {
        // Python's pty module: the child's terminal output is copied to our stdout.
        Command::new(python())
            .args(["-c", "import pty, sys; pty.spawn(sys.argv[1:])"])
            .args(&argv)
            .output()
            .unwrap()
    };
    String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
}

/// True when `s` holds a character that must not reach a terminal raw (the newline and
/// tab aside).
fn has_raw_control(s: &str) -> bool {
    s.chars().any(|c| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_are_escaped_in_the_log_and_on_a_terminal() {
    let mut b = Broker::start(vec![hostile("hx", &[])]).await;
    let log = b.wait_log("stdout says", Duration::from_secs(10)).await;
    let log = if log.contains("rejected") {
        log
    } else {
        b.wait_log("rejected", Duration::from_secs(10)).await
    };
    // The tool named with ESC was refused, naming it escaped; the others registered.
    let tools = b.tools().await;
    assert!(!tools.iter().any(|t| t.contains('\x1b')), "{tools:?}");
    assert!(tools.contains(&"hx_text".to_string()), "{tools:?}");
    assert!(log.contains("t\\x1bred"), "{log}");
    // The plugin's output lines are in the log, escaped.
    assert!(
        log.contains("stdout says \\x1b[31mred\\x1b[0m and \\u{202e}evil"),
        "{log}"
    );
    assert!(log.contains("stderr says \\x1b[2J"), "{log}");

    // A call's result and error reach the log only escaped too (the broker logs the
    // failed call with the plugin's error text).
    let r = b.call("hx_fail", json!({})).await.unwrap();
    assert!(!r.success && r.error.contains("boom\x1b[2J"), "{r:?}");
    let r = b.call("hx_text", json!({})).await.unwrap();
    assert!(r.success && r.content.contains("\x1b[2J"), "{r:?}");
    let log = b.log();
    assert!(
        !has_raw_control(&log),
        "raw control or bidi character in the log:\n{log:?}"
    );

    // On a terminal the CLI escapes, newlines and tabs kept…
    let tty = cli_on_terminal(&b, &["tools", "call", "hx_text"]);
    assert!(!has_raw_control(&tty), "{tty:?}");
    assert!(
        tty.contains("clear\\x1b[2J title\\x1b]0;pwned\\x07 csi\\u{9b}31m rtl\\u{202e}evil\tend\nsecond line"),
        "{tty:?}"
    );
    let tty = cli_on_terminal(&b, &["tools", "call", "hx_fail"]);
    assert!(!has_raw_control(&tty), "{tty:?}");
    assert!(tty.contains("boom\\x1b[2J\\u{202e}"), "{tty:?}");
    let tty = cli_on_terminal(&b, &["tools", "list"]);
    assert!(!has_raw_control(&tty), "{tty:?}");
    assert!(
        tty.contains("Returns hostile \\x1b[31mtext\\u{202e}."),
        "{tty:?}"
    );
    let tty = cli_on_terminal(&b, &["plugins", "logs", "hx"]);
    assert!(!has_raw_control(&tty), "{tty:?}");
    assert!(tty.contains("stdout says \\x1b[31mred"), "{tty:?}");

    // …with --raw it prints the bytes…
    let raw = cli_on_terminal(&b, &["tools", "call", "hx_text", "--raw"]);
    assert!(
        raw.contains("clear\x1b[2J") && raw.contains('\u{202e}'),
        "{raw:?}"
    );
    let raw = cli_on_terminal(&b, &["--raw", "plugins", "logs", "hx"]);
    assert!(raw.contains("stdout says \x1b[31mred"), "{raw:?}");

    // …and so it does on a pipe, as before.
    let (code, out, err) = b.cli(&["tools", "call", "hx_text"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "clear\x1b[2J title\x1b]0;pwned\x07 csi\u{9b}31m rtl\u{202e}evil\tend\nsecond line"
        ),
        "{out:?}"
    );
    let (_, out, _) = b.cli(&["plugins", "logs", "hx"]);
    assert!(out.contains("\u{202e}evil"), "{out:?}");
    let (code, _, err) = b.cli(&["tools", "call", "hx_fail"]);
    assert_eq!(code, 5, "the tool's error");
    assert!(err.contains("boom\x1b[2J"), "{err:?}");
}

/// Sends `n` concurrent calls built by `call` and returns their outcomes and the time
/// the slowest took.
async fn concurrently<F, Fut>(n: usize, call: F) -> (Vec<tonic::Status>, Duration)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = tonic::Status> + Send + 'static,
{
    let started = Instant::now();
    let calls: Vec<_> = (0..n).map(|_| tokio::spawn(call())).collect();
    let mut out = Vec::new();
    for c in calls {
        out.push(c.await.unwrap());
    }
    (out, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_unauthenticated_calls_are_refused_before_their_body_is_read() {
    const BODY: usize = 50 * 1024 * 1024;
    const CALLS: usize = 4;
    let mut b = Broker::start(vec![hostile("ax", &["knowledge"])]).await;
    let pid = b.pid();
    let data: PathBuf = b.data_dir();
    let ch = crate::harness::socket_channel(&data).await;
    // Warm up: a real call, so the baseline includes what any call allocates.
    assert!(b.call("ax_text", json!({})).await.unwrap().success);
    let before = peak_rss_kib(pid);
    let body = std::sync::Arc::new("x".repeat(BODY));

    // Admin.CallTool without a token, and with a wrong one.
    for token in [None, Some("0123456789abcdef")] {
        let (ch, body) = (ch.clone(), body.clone());
        let (errors, took) = concurrently(CALLS, move || {
            let mut client = AdminClient::new(ch.clone())
                .max_encoding_message_size(hearth_proto::MAX_MESSAGE_BYTES);
            let mut req = tonic::Request::new(CallToolRequest {
                name: "ax_text".into(),
                args_json: format!("{{\"pad\": \"{body}\"}}"),
                ..Default::default()
            });
            if let Some(t) = token {
                req.metadata_mut()
                    .insert(hearth_proto::ADMIN_TOKEN_METADATA, t.parse().unwrap());
            }
            async move { client.call_tool(req).await.unwrap_err() }
        })
        .await;
        for e in &errors {
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
            let want = if token.is_some() {
                "admin token does not match <data_dir>/admin.token of the running broker"
            } else {
                "missing metadata `x-hearth-admin-token`"
            };
            assert_eq!(e.message(), want);
        }
        assert!(took < Duration::from_secs(10), "refusals took {took:?}");
    }

    // A host service (Knowledge.Add accepts 64 MiB) with a token no plugin has.
    let (ch2, body2) = (ch.clone(), body.clone());
    let (errors, took) = concurrently(CALLS, move || {
        let mut client = KnowledgeClient::new(ch2.clone())
            .max_encoding_message_size(hearth_proto::MAX_MESSAGE_BYTES);
        let mut req = tonic::Request::new(KnowledgeEntry {
            name: "big".into(),
            content: body2.to_string(),
            score: 0.0,
        });
        req.metadata_mut().insert(
            hearth_proto::TOKEN_METADATA,
            "0123456789abcdef".parse().unwrap(),
        );
        async move { client.add(req).await.unwrap_err() }
    })
    .await;
    for e in &errors {
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        assert!(
            e.message()
                .starts_with("x-hearth-token does not match any running plugin;"),
            "{e:?}"
        );
    }
    assert!(took < Duration::from_secs(10), "refusals took {took:?}");
    assert!(!data.join("knowledge/big.md").exists());

    // 12 refused calls of 50 MB each: the broker's peak memory grew by less than one
    // body (decoding even one would add 50 MB, plus the copy of its text).
    let grown = peak_rss_kib(pid).saturating_sub(before);
    assert!(
        grown < (BODY / 1024) as u64 / 2,
        "broker peak RSS grew by {grown} KiB for refused calls (before {before} KiB)"
    );

    // The connection still serves authenticated calls.
    let req = b.admin.with_token(ListToolsRequest {});
    let tools = AdminClient::new(ch)
        .list_tools(req)
        .await
        .unwrap()
        .into_inner()
        .tools;
    assert!(tools.iter().any(|t| t.name == "ax_text"), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_text_is_escaped_on_a_terminal_with_its_newlines() {
    let llm = hearth_scripted::ScriptedLlm::start(
        hearth_scripted::Script::from_value(json!({"steps": [
            {"after_tool": false, "tool_calls": [{"name": "hc_text", "arguments": {}}]},
            {"after_tool": true, "chunk_chars": 3,
             "content": "LLM \x1b]0;title\x07 says\n\u{202e}reversed\tdone"}
        ]}))
        .unwrap(),
    );
    let b = Broker::with_llm(vec![hostile("hc", &[])], &llm, &[]).await;
    let tty = cli_on_terminal(&b, &["chat", "go"]);
    assert!(!has_raw_control(&tty), "{tty:?}");
    assert!(tty.contains("hc_text: clear\\x1b[2J title"), "{tty:?}");
    assert!(
        tty.contains("LLM \\x1b]0;title\\x07 says\n\\u{202e}reversed\tdone"),
        "{tty:?}"
    );
    let raw = cli_on_terminal(&b, &["chat", "--raw", "go"]);
    assert!(
        raw.contains("LLM \x1b]0;title\x07 says\n\u{202e}reversed\tdone"),
        "{raw:?}"
    );
    let (code, out, err) = b.cli(&["chat", "go"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("says\n\u{202e}reversed"), "{out:?}");
}
