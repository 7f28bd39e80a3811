//! MCP client config files as Hearth plugins: `hearth mcp import FILE` (with and
//! without a running broker) and `<data_dir>/mcp.json` loaded at start, with the
//! official Python MCP SDK's server (tests/plugins/mcp/py_server.py) as the server.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use crate::harness::{mcp_fixture, python, Broker};

/// A Cursor-style file: a stdio server whose env comes from the broker's environment,
/// one whose variable the broker does not have, and a legacy SSE server Hearth cannot
/// reach (skipped, the others still import).
fn cursor_file(dir: &std::path::Path) -> std::path::PathBuf {
    let file = dir.join("mcp.json");
    let v = json!({"mcpServers": {
        "Py Tools": {"command": python(), "args": [mcp_fixture("py_server.py")],
                     "env": {"MCP_TEST_EVENTS": "${env:IMPORT_EVENTS}"}},
        "unset": {"command": python(), "args": [mcp_fixture("py_server.py")],
                  "env": {"X": "${HEARTH_TEST_NEVER_SET}"}},
        "old": {"type": "sse", "url": "https://example.invalid/sse"},
    }});
    std::fs::write(&file, v.to_string()).unwrap();
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_writes_private_folders_and_a_running_broker_loads_them() {
    // Without a broker: folders are written (0700, plugin.json 0600) and nothing runs.
    let scratch = tempfile::tempdir().unwrap();
    let file = cursor_file(scratch.path());
    let offline = scratch.path().join("data");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(&offline)
        .args(["mcp", "import"])
        .arg(&file)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // One server was skipped: exit 1, saying which and why.
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("\"old\"") && stderr.contains("sse"),
        "{stderr}"
    );
    assert!(
        stdout.contains("imported Py Tools as plugin py_tools"),
        "{stdout}"
    );
    assert!(stdout.contains("no broker running"), "{stdout}");
    let dir = offline.join("plugins/py_tools");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("plugin.json")), 0o600);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("plugin.json")).unwrap()).unwrap();
    assert_eq!(manifest["runtime"], "mcp");
    assert_eq!(manifest["env"]["MCP_TEST_EVENTS"], "${env:IMPORT_EVENTS}");

    // With a broker: the import loads the plugins at once (one cannot start: its
    // variable is not set in the broker's environment, and it says so); a second
    // import needs --force and then reloads them.
    let mut b = Broker::spawn_with_env(vec![], &[], &[], &[("IMPORT_EVENTS", "/dev/null")]).await;
    // (Past its own scan of the plugins folder: the import is what loads them.)
    b.wait_log("broker ready", std::time::Duration::from_secs(30))
        .await;
    let (code, stdout, stderr) = b.cli(&["mcp", "import", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("loaded py_tools: 12 tools"),
        "{stdout}{stderr}"
    );
    assert!(
        stderr.contains("unset did not start") && stderr.contains("HEARTH_TEST_NEVER_SET"),
        "{stderr}"
    );
    b.wait_ready("py_tools").await;
    let r = b.call("add", json!({"a": 2, "b": 3})).await.unwrap();
    assert!(r.success && r.data_json.contains('5'), "{r:?}");
    let (code, _, stderr) = b.cli(&["mcp", "import", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("--force"), "{stderr}");
    let (code, stdout, stderr) = b.cli(&["mcp", "import", "--force", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("loaded py_tools"), "{stdout}{stderr}");
    // The reloaded server serves; a timeout reaches it as a cancellation.
    b.wait_ready("py_tools").await;
    let (code, _, _) = b.cli(&[
        "tools",
        "call",
        "wait",
        r#"{"ms": 3000}"#,
        "--timeout-ms",
        "300",
    ]);
    assert_eq!(code, 6, "timeout");
    let mut seen = String::new();
    for _ in 0..100 {
        seen = b.cli(&["plugins", "logs", "py_tools"]).1;
        if seen.contains("cancelled wait") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(seen.contains("cancelled wait"), "{seen}");
    let (code, stdout, _) = b.cli(&["mcp", "list", "--json"]);
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let py = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["plugin"] == "py_tools")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(py["transport"], "stdio");
    assert_eq!(py["state"], "ready");
    assert_eq!(py["protocol_version"], "2026-07-28");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_json_in_the_data_dir_is_loaded_at_start() {
    // Claude Desktop's format, as `<data_dir>/mcp.json`.
    let config = json!({"mcpServers": {
        "desk": {"command": python(), "args": [mcp_fixture("py_server.py")]},
        "broken": {"command": "/nonexistent/mcp-server"},
    }})
    .to_string();
    let mut b = Broker::spawn_with_files(vec![], &[], &[("mcp.json", &config)]).await;
    b.wait_ready("desk").await;
    let r = b
        .call("echo", json!({"text": "from mcp.json"}))
        .await
        .unwrap();
    assert!(r.success && r.content == "from mcp.json", "{r:?}");
    let servers = b.mcp_servers().await;
    let names: Vec<_> = servers.iter().map(|s| s.plugin.as_str()).collect();
    assert!(
        names.contains(&"desk") && names.contains(&"broken"),
        "{names:?}"
    );
    // A server that cannot start does not keep the others from serving; it says why.
    let mut broken = b.plugin("broken").await;
    for _ in 0..200 {
        if !broken.last_exit.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        broken = b.plugin("broken").await;
    }
    let (code, stdout, _) = b.cli(&["plugins", "list"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("broken"), "{stdout}");
    assert!(
        broken.last_exit.contains("spawn failed")
            && broken.last_exit.contains("/nonexistent/mcp-server"),
        "{broken:?}"
    );
}
