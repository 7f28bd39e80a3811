//! Hearth as an MCP server, driven by real MCP clients: the official Python SDK (`mcp`
//! 2.3, tests/plugins/mcp/py_client.py) in `legacy` mode (2025-11-25) and `auto` mode
//! (2026-07-28), and the official TypeScript SDK (`@modelcontextprotocol/sdk` 1.32,
//! ts_client.mjs, 2025-11-25), each over stdio (`hearth mcp serve`) and over Streamable
//! HTTP (`hearth run --mcp-listen`, bearer from `<data_dir>/mcp.token`). Tools of Python,
//! Node and MCP-imported plugins with their schemas and annotations, calls, progress,
//! cancellation reaching the plugin, tool list changes, the bearer check, the `ai.tool`
//! policies per MCP session (max_calls, cooldown, confirm → elicitation), and a chat turn
//! whose LLM calls an MCP server's tool through Hearth.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hearth_proto::v1::chat_event::Event;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};

use crate::harness::{
    final_of, mcp_fixture as mcp_file, node_echo, py_echo, python, repo, stress, Broker, PluginDir,
};

/// Generous guard for a client run (each takes a few seconds when all is well).
const LONG: Duration = Duration::from_secs(90);

const LEGACY: &str = "2025-11-25";
const LATEST: &str = "2026-07-28";

// ---------------------------------------------------------------------------------
// Fixtures

/// The third-party MCP server tests/plugins/mcp/py_server.py as plugin `pymcp`
/// (tools `py_add`, `py_slow`, `py_wait`, …).
fn pymcp() -> PluginDir {
    PluginDir {
        dir: "pymcp".into(),
        manifest: json!({"name": "pymcp", "runtime": "mcp",
            "command": [python(), mcp_file("py_server.py")], "tool_prefix": "py_"}),
    }
}

/// tests/plugins/mcp/py_plain.py (typed `@tool` functions): `plain_list`, `plain_map`, ….
fn plain() -> PluginDir {
    PluginDir {
        dir: "plain".into(),
        manifest: json!({"name": "plain", "runtime": "python", "entry": mcp_file("py_plain.py")}),
    }
}

/// tests/plugins/lz_policy.{py,js} as plugin and tool `name` with `ai.tool` `policy`.
fn policy(lang: &str, name: &str, policy: Value) -> PluginDir {
    let (runtime, entry) = match lang {
        "py" => ("python", "tests/plugins/lz_policy.py"),
        _ => ("node", "tests/plugins/lz_policy.js"),
    };
    PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": runtime, "entry": repo().join(entry),
            "env": {"LZ_NAME": name, "LZ_POLICY": policy.to_string()}}),
    }
}

/// Where clients reach a broker: its data dir (stdio) and its `/mcp` URL and token.
struct Endpoint {
    data: PathBuf,
    url: String,
    token: String,
    /// Client stderr files go here.
    logs: PathBuf,
}

/// Starts a broker with `plugins` and `--mcp-listen 127.0.0.1:0`.
async fn serving(plugins: Vec<PluginDir>) -> (Broker, Endpoint) {
    let b = Broker::start_with(plugins, &["--mcp-listen", "127.0.0.1:0"]).await;
    let log = b
        .wait_log("MCP server listening on ", Duration::from_secs(30))
        .await;
    let url = log
        .split("MCP server listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let token = std::fs::read_to_string(b.data_dir().join("mcp.token"))
        .unwrap()
        .trim()
        .to_string();
    assert!(token.len() >= 32, "short MCP token {token:?}");
    let ep = Endpoint {
        data: b.data_dir(),
        url,
        token,
        logs: b.root.path().to_path_buf(),
    };
    (b, ep)
}

// ---------------------------------------------------------------------------------
// Clients

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sdk {
    /// Python `mcp` 2.3 `Client(mode="legacy")`: 2025-11-25.
    PyLegacy,
    /// Python `mcp` 2.3 `Client(mode="auto")`: 2026-07-28.
    PyAuto,
    /// TypeScript SDK 1.32 `Client`: 2025-11-25.
    Ts,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    /// `hearth mcp serve --data-dir D` as the client's stdio server.
    Stdio,
    /// Streamable HTTP at the broker's `--mcp-listen` address.
    Http,
}

#[derive(Clone, Copy, Debug)]
struct Client {
    sdk: Sdk,
    via: Via,
}

/// Every client: three SDK modes, two transports.
const CLIENTS: [Client; 6] = [
    Client {
        sdk: Sdk::PyLegacy,
        via: Via::Http,
    },
    Client {
        sdk: Sdk::PyAuto,
        via: Via::Http,
    },
    Client {
        sdk: Sdk::Ts,
        via: Via::Http,
    },
    Client {
        sdk: Sdk::PyLegacy,
        via: Via::Stdio,
    },
    Client {
        sdk: Sdk::PyAuto,
        via: Via::Stdio,
    },
    Client {
        sdk: Sdk::Ts,
        via: Via::Stdio,
    },
];

static RUNS: AtomicUsize = AtomicUsize::new(0);

impl Client {
    fn label(&self) -> String {
        format!("{:?}/{:?}", self.sdk, self.via)
    }

    /// The protocol version this client negotiates with Hearth.
    fn protocol(&self) -> &'static str {
        if self.sdk == Sdk::PyAuto {
            LATEST
        } else {
            LEGACY
        }
    }

    /// Whether Hearth asks this client for `confirm` (elicitation: 2025 revisions).
    fn elicits(&self) -> bool {
        // 2025 revisions: an elicitation request; 2026-07-28: an input request in the
        // result, answered on the client's retry. Every client here can be asked.
        true
    }

    /// The key Hearth counts this client's policies under (as `lz_policy` echoes it).
    fn conversation_prefix(&self) -> &'static str {
        match (self.via, self.sdk) {
            (Via::Stdio, _) => "mcp:stdio:",
            // 2026-07-28 Streamable HTTP has no session: the bearer is the key.
            (Via::Http, Sdk::PyAuto) => "mcp:bearer:",
            (Via::Http, _) => "mcp:session:",
        }
    }

    /// Starts this client on `ep` running `steps`, with `env`.
    fn start(&self, ep: &Endpoint, steps: &Value, env: &[(&str, &str)]) -> Run {
        self.start_with_token(ep, Some(&ep.token), steps, env)
    }

    /// Like [`Client::start`] with `token` as the bearer (HTTP; `None`: no header).
    fn start_with_token(
        &self,
        ep: &Endpoint,
        token: Option<&str>,
        steps: &Value,
        env: &[(&str, &str)],
    ) -> Run {
        let mut cmd = match self.sdk {
            Sdk::PyLegacy | Sdk::PyAuto => {
                let mut c = Command::new(python());
                c.arg(mcp_file("py_client.py"));
                c
            }
            Sdk::Ts => {
                let mut c = Command::new("node");
                c.arg(mcp_file("ts_client.mjs"));
                c
            }
        };
        match self.via {
            Via::Http => {
                cmd.args(["--url", &ep.url]);
                if let Some(t) = token {
                    cmd.args(["--token", t]);
                }
            }
            Via::Stdio => {
                cmd.args([
                    "--stdio",
                    env!("CARGO_BIN_EXE_hearth"),
                    "mcp",
                    "serve",
                    "--data-dir",
                ])
                .arg(&ep.data);
            }
        }
        match self.sdk {
            Sdk::PyLegacy => cmd.args(["--mode", "legacy"]),
            Sdk::PyAuto => cmd.args(["--mode", "auto"]),
            Sdk::Ts => &mut cmd,
        };
        cmd.arg(steps.to_string());
        // The test's own environment must not choose for the client.
        cmd.env_remove("MCP_TEST_ELICIT").envs(env.iter().copied());
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let label = format!("{} #{n}", self.label());
        let stderr = ep.logs.join(format!("client-{n}.stderr"));
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: cannot start: {e}"));
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Run {
            label,
            child,
            rx,
            stderr,
            started: Instant::now(),
            seen: Vec::new(),
        }
    }
}

/// A running client; killed on drop.
struct Run {
    label: String,
    child: Child,
    rx: mpsc::Receiver<Value>,
    stderr: PathBuf,
    started: Instant,
    /// Every line so far.
    seen: Vec<Value>,
}

/// A finished client run: one result per step (in order), the elicitations it answered.
#[derive(Debug)]
struct Out {
    label: String,
    steps: Vec<Value>,
    elicitations: Vec<Value>,
}

impl Out {
    /// The result of step `i`, checked to be of `op` and without `error`.
    fn ok(&self, i: usize, op: &str) -> &Value {
        let s = self.any(i, op);
        assert!(
            s.get("error").is_none(),
            "{}: step {i} failed: {s}",
            self.label
        );
        s
    }

    /// The result of step `i`, checked to be of `op`.
    fn any(&self, i: usize, op: &str) -> &Value {
        let s = self
            .steps
            .get(i)
            .unwrap_or_else(|| panic!("{}: no step {i}: {:#?}", self.label, self.steps));
        assert_eq!(s["op"], op, "{}: step {i}: {s}", self.label);
        s
    }

    /// The text of a call result's first content block.
    fn text(&self, i: usize) -> &str {
        self.any(i, "call")["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: step {i} has no text: {}", self.label, self.steps[i]))
    }

    /// The text of step `i`, a call that succeeded.
    fn success(&self, i: usize) -> &str {
        let s = self.ok(i, "call");
        assert_eq!(s["isError"], false, "{}: step {i}: {s}", self.label);
        self.text(i)
    }

    /// The text of step `i`, a call that answered a tool error.
    fn refused(&self, i: usize) -> &str {
        let s = self.ok(i, "call");
        assert_eq!(s["isError"], true, "{}: step {i}: {s}", self.label);
        self.text(i)
    }
}

impl Run {
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "{}: {what}\nlines: {:#?}\nstderr:\n{}",
            self.label,
            self.seen,
            self.stderr()
        )
    }

    /// The next line (up to [`LONG`] after the start); `None` at the end of output.
    fn next(&mut self) -> Option<Value> {
        let left = LONG.saturating_sub(self.started.elapsed());
        match self.rx.recv_timeout(left) {
            Ok(v) => {
                self.seen.push(v.clone());
                Some(v)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                self.fail(&format!("no end within {LONG:?}"))
            }
        }
    }

    /// Waits for the next line of `op`; returns it.
    fn until(&mut self, op: &str) -> Value {
        loop {
            match self.next() {
                Some(v) if v["op"] == op => return v,
                Some(v) if v["op"] == "connect" => self.fail(&format!("could not connect: {v}")),
                Some(_) => {}
                None => self.fail(&format!("ended before a `{op}` line")),
            }
        }
    }

    /// Reads to the end; checks the client ran all `n` steps and exited 0.
    fn finish(mut self, n: usize) -> Out {
        while self.next().is_some() {}
        let status = self.child.wait().unwrap();
        let (elicitations, steps): (Vec<Value>, Vec<Value>) = self
            .seen
            .iter()
            .cloned()
            .partition(|v| v["op"] == "elicitation");
        if !status.success() || steps.len() != n {
            self.fail(&format!("{status}, {} of {n} step results", steps.len()));
        }
        Out {
            label: self.label.clone(),
            steps,
            elicitations,
        }
    }

    /// Reads until the client's `connect` failure (it may linger after it; it is
    /// killed); returns that line.
    fn connect_error(mut self) -> Value {
        let v = self.until("connect");
        assert!(v["error"].is_string(), "{}: {v}", self.label);
        v
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs every client of `clients` at once on `ep` (`steps` each, `env` each); their
/// results in the same order.
fn run_all(clients: &[Client], ep: &Endpoint, steps: &Value, env: &[(&str, &str)]) -> Vec<Out> {
    let n = steps.as_array().unwrap().len();
    let runs: Vec<Run> = clients.iter().map(|c| c.start(ep, steps, env)).collect();
    runs.into_iter().map(|r| r.finish(n)).collect()
}

/// How often `needle` occurs in the broker log.
fn count(b: &Broker, needle: &str) -> usize {
    b.log().matches(needle).count()
}

/// Waits (up to [`LONG`]) until `needle` occurs `n` times in the broker log.
async fn wait_count(b: &Broker, needle: &str, n: usize) {
    let started = Instant::now();
    while count(b, needle) < n {
        assert!(
            started.elapsed() < LONG,
            "`{needle}` {} times in the broker log, not {n}:\n{}",
            count(b, needle),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        count(b, needle),
        n,
        "`{needle}` in the broker log:\n{}",
        b.log()
    );
}

/// A raw POST to `url` with `Authorization: Bearer <auth>` (`None`: none); the status
/// line and headers.
fn raw_post(url: &str, auth: Option<&str>) -> String {
    let addr = url.trim_start_matches("http://").split('/').next().unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

fn tool<'a>(out: &'a Out, list_step: usize, name: &str) -> &'a Value {
    let tools = out.ok(list_step, "list")["tools"].as_array().unwrap();
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| {
        let names: Vec<_> = tools.iter().map(|t| &t["name"]).collect();
        panic!("{}: no tool {name} in {names:?}", out.label)
    })
}

fn tool_names(out: &Out, list_step: usize) -> Vec<String> {
    out.ok(list_step, "list")["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// Progress reports of a call result: at least one, each within its total, rising.
fn check_progress(out: &Out, i: usize) -> Vec<Value> {
    let progress = out.ok(i, "call")["progress"].as_array().unwrap().clone();
    assert!(
        !progress.is_empty(),
        "{}: no progress in step {i}: {}",
        out.label,
        out.steps[i]
    );
    let mut last = f64::MIN;
    for p in &progress {
        let v = p["progress"].as_f64().unwrap();
        assert!(v > last, "{}: progress not rising: {progress:?}", out.label);
        if let Some(total) = p["total"].as_f64() {
            assert!(v <= total, "{}: {p}", out.label);
        }
        last = v;
    }
    progress
}

// ---------------------------------------------------------------------------------
// Tests

/// Lists, calls, progress and cancellation of Python, Node and MCP-imported tools from
/// every client over both transports; the bearer check of the HTTP door.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_lists_calls_streams_progress_and_cancels_through_hearth() {
    let (b, ep) = serving(vec![
        stress("py", "ps", "", json!({})),
        stress("nd", "ns", "", json!({})),
        plain(),
        pymcp(),
    ])
    .await;

    let steps = json!([
        {"op": "info"},
        {"op": "list"},
        {"op": "call", "name": "ps_sleep", "args": {"ms": 300, "progress_ms": 50}, "progress": true, "timeout_ms": 60000},
        {"op": "call", "name": "ns_sleep", "args": {"ms": 300, "progress_ms": 50}, "progress": true, "timeout_ms": 60000},
        {"op": "call", "name": "py_slow", "args": {"steps": 3, "delay_ms": 100}, "progress": true, "timeout_ms": 60000},
        {"op": "call", "name": "py_add", "args": {"a": 2, "b": 3}, "timeout_ms": 60000},
        {"op": "call", "name": "ns_echo", "args": {"text": "héllo ♪"}, "timeout_ms": 60000},
        {"op": "call", "name": "plain_list", "timeout_ms": 60000},
        {"op": "call", "name": "plain_map", "timeout_ms": 60000},
        {"op": "call", "name": "ps_sleep", "args": {"ms": "soon"}, "timeout_ms": 60000},
        {"op": "call", "name": "nope", "timeout_ms": 60000},
        {"op": "cancel", "name": "ps_sleep", "args": {"ms": 120000}, "after_ms": 1500},
        {"op": "cancel", "name": "ns_sleep", "args": {"ms": 120000}, "after_ms": 1500},
        {"op": "cancel", "name": "py_wait", "args": {"ms": 120000}, "after_ms": 1500}
    ]);
    let outs = run_all(&CLIENTS, &ep, &steps, &[]);
    for (c, out) in CLIENTS.iter().zip(&outs) {
        let l = &out.label;
        let info = out.ok(0, "info");
        assert_eq!(info["protocol"], c.protocol(), "{l}: {info}");
        assert_eq!(info["server"]["name"], "hearth", "{l}: {info}");
        assert_eq!(
            info["capabilities"]["tools"]["listChanged"], true,
            "{l}: {info}"
        );

        // Tools of a Python, a Node and an MCP-imported plugin, with their schemas.
        let names = tool_names(out, 1);
        for t in [
            "ps_sleep",
            "ns_sleep",
            "ps_echo",
            "ns_echo",
            "plain_list",
            "plain_map",
            "py_add",
            "py_wait",
        ] {
            assert!(
                names.contains(&t.to_string()),
                "{l}: {t} missing from {names:?}"
            );
        }
        for t in ["ps_sleep", "ns_sleep"] {
            let s = tool(out, 1, t);
            assert_eq!(s["inputSchema"]["required"], json!(["ms"]), "{l}: {s}");
            assert_eq!(
                s["inputSchema"]["properties"]["progress_ms"]["type"], "integer",
                "{l}: {s}"
            );
            assert!(
                s["description"].as_str().unwrap().contains("Sleeps"),
                "{l}: {s}"
            );
        }
        let s = tool(out, 1, "plain_list");
        assert_eq!(s["description"], "Two letters.", "{l}: {s}");
        assert_eq!(s["inputSchema"]["type"], "object", "{l}: {s}");
        let add = tool(out, 1, "py_add");
        assert_eq!(add["title"], "Add", "{l}: {add}");
        assert_eq!(
            add["inputSchema"]["properties"]["a"]["type"], "integer",
            "{l}: {add}"
        );
        assert_eq!(
            add["outputSchema"]["properties"]["total"]["type"], "integer",
            "{l}: {add}"
        );
        assert_eq!(add["annotations"]["readOnlyHint"], true, "{l}: {add}");
        assert_eq!(add["annotations"]["idempotentHint"], true, "{l}: {add}");

        // Calls with progress: Python and Node SDK plugins, an MCP server.
        assert_eq!(out.success(2), "slept 300 ms", "{l}");
        assert_eq!(out.success(3), "slept 300 ms", "{l}");
        for i in [2, 3] {
            for p in check_progress(out, i) {
                assert!(
                    p["message"].as_str().unwrap().starts_with("slept "),
                    "{l}: {p}"
                );
            }
        }
        // (Steps 100 ms apart: the broker's MCP host may reorder reports that come
        // closer together, and may drop the last one, which races the result.)
        assert_eq!(out.success(4), "done", "{l}");
        for p in check_progress(out, 4) {
            let step = p["message"].as_str().unwrap().strip_prefix("step ");
            assert!(
                step.is_some_and(|n| ["1", "2", "3"].contains(&n)),
                "{l}: {p}"
            );
            assert_eq!(p["total"], 3.0, "{l}: {p}");
        }

        out.success(5);
        assert_eq!(
            out.steps[5]["structuredContent"],
            json!({"total": 5}),
            "{l}"
        );
        let echo = out.success(6);
        assert_eq!(
            serde_json::from_str::<Value>(echo).unwrap(),
            json!({"text": "héllo ♪"}),
            "{l}"
        );
        assert_eq!(
            out.steps[6]["structuredContent"],
            json!({"text": "héllo ♪"}),
            "{l}"
        );
        // A result that is not an object is structured only for 2026-07-28 clients (rmcp
        // drops it for older ones, whose spec wants an object there).
        assert_eq!(
            serde_json::from_str::<Value>(out.success(7)).unwrap(),
            json!(["a", "b"]),
            "{l}"
        );
        let structured = &out.steps[7]["structuredContent"];
        if c.protocol() == LATEST {
            assert_eq!(structured, &json!(["a", "b"]), "{l}");
        } else {
            assert!(structured.is_null(), "{l}: {}", out.steps[7]);
        }
        out.success(8);
        assert_eq!(out.steps[8]["structuredContent"], json!({"k": 1}), "{l}");

        // The broker's schema check answers a tool error; an unknown tool an MCP error.
        assert!(
            out.refused(9).starts_with("argument `ms`"),
            "{l}: {}",
            out.steps[9]
        );
        let nope = out.any(10, "call");
        let err = nope["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{l}: {nope}"));
        assert!(err.contains("unknown tool `nope`"), "{l}: {nope}");

        for i in 11..14 {
            assert_eq!(
                out.ok(i, "cancel")["cancelled"],
                true,
                "{l}: {}",
                out.steps[i]
            );
        }
    }
    // Every client's cancellation reached the plugin: the stress plugins print
    // `P_sleep: cancelled` on Cancel, py_server logs `cancelled wait`.
    let n = CLIENTS.len();
    wait_count(&b, "ps_sleep: cancelled", n).await;
    wait_count(&b, "ns_sleep: cancelled", n).await;
    wait_count(&b, "cancelled wait", n).await;
    let (code, logs, err) = b.cli(&["plugins", "logs", "ns", "-n", "0"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(logs.matches("ns_sleep: cancelled").count(), n, "{logs}");

    // The HTTP door: a wrong or missing bearer is a 401 and no client gets in.
    for auth in [Some("wrong"), None] {
        let head = raw_post(&ep.url, auth);
        assert!(head.starts_with("HTTP/1.1 401"), "{auth:?}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{head}"
        );
    }
    let refused: Vec<_> = [
        (Sdk::PyLegacy, Some("wrong")),
        (Sdk::PyAuto, None),
        (Sdk::Ts, Some("wrong")),
        (Sdk::Ts, None),
    ]
    .into_iter()
    .map(|(sdk, auth)| {
        let c = Client {
            sdk,
            via: Via::Http,
        };
        (
            sdk,
            c.start_with_token(&ep, auth, &json!([{"op": "info"}]), &[]),
        )
    })
    .collect();
    for (sdk, run) in refused {
        let e = run.connect_error();
        assert_eq!(e["http_status"], 401, "{sdk:?}: {e}");
        if sdk == Sdk::Ts {
            let text = e["error"].as_str().unwrap();
            assert!(text.contains("missing or wrong bearer token"), "{e}");
        }
    }
    let head = raw_post(&ep.url, Some(&ep.token));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// `hearth plugins unload` and `load` reach every client as a tool list change
/// (`notifications/tools/list_changed`, or the `subscriptions/listen` stream of
/// 2026-07-28), and the next list shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_hears_of_plugins_unloaded_and_loaded() {
    let (b, ep) = serving(vec![py_echo("keep", json!({})), node_echo("gone")]).await;
    let wait = json!({"op": "wait_list_changed", "timeout_ms": 60000});
    let steps = json!([{"op": "info"}, {"op": "sleep", "ms": 300}, wait, {"op": "list"}, wait, {"op": "list"}]);
    let mut runs: Vec<Run> = CLIENTS.iter().map(|c| c.start(&ep, &steps, &[])).collect();
    // Every client is connected (and listening) before the change.
    for r in &mut runs {
        r.until("sleep");
    }
    let (code, out, err) = b.cli(&["plugins", "unload", "gone"]);
    assert_eq!(code, 0, "{out}{err}");
    for r in &mut runs {
        r.until("wait_list_changed");
    }
    let dir = b.root.path().join("plugins/gone");
    let (code, out, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let n = steps.as_array().unwrap().len();
    for (c, r) in CLIENTS.iter().zip(runs) {
        let out = r.finish(n);
        let l = &out.label;
        assert_eq!(out.ok(0, "info")["protocol"], c.protocol(), "{l}");
        for i in [2, 4] {
            let s = out.ok(i, "wait_list_changed");
            assert_eq!(
                s["notification"]["method"], "notifications/tools/list_changed",
                "{l}: {s}"
            );
        }
        let after_unload = tool_names(&out, 3);
        assert!(
            after_unload.contains(&"keep_echo".to_string()),
            "{l}: {after_unload:?}"
        );
        assert!(
            !after_unload.contains(&"gone_echo".to_string()),
            "{l}: {after_unload:?}"
        );
        let after_load = tool_names(&out, 5);
        assert!(
            after_load.contains(&"gone_echo".to_string()),
            "{l}: {after_load:?}"
        );
    }
}

/// `ai.tool` policies per MCP session: `max_calls` and `cooldown` count per session (a
/// second session starts afresh; 2026-07-28 over HTTP has no session, the bearer is the
/// key), `confirm` asks the client (an elicitation request on 2025 revisions, an input
/// request answered on the retry on 2026-07-28): accepted runs, declined or cancelled
/// does not; a client that cannot ask gets the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_count_per_session_and_confirm_asks_the_client() {
    let (_b, ep) = serving(vec![
        policy("py", "lim", json!({"max_calls": 2})),
        policy("nd", "cool", json!({"cooldown": 3600})),
        policy("nd", "conf", json!({"confirm": true})),
    ])
    .await;
    let call = |name: &str| json!({"op": "call", "name": name, "args": {"what": "x"}, "timeout_ms": 60000});

    // First sessions, no elicitation capability.
    let steps = json!([{"op": "list"}, call("lim"), call("lim"), call("lim"), call("cool"), call("cool"), call("conf")]);
    let outs = run_all(&CLIENTS, &ep, &steps, &[]);
    for (c, out) in CLIENTS.iter().zip(&outs) {
        let l = &out.label;
        let conf = tool(out, 0, "conf");
        assert_eq!(conf["annotations"]["destructiveHint"], true, "{l}: {conf}");
        let lim = tool(out, 0, "lim");
        assert!(lim["annotations"]["destructiveHint"] != true, "{l}: {lim}");
        for i in [1, 2] {
            let text = out.success(i);
            assert!(text.starts_with("lim ran #"), "{l}: {text}");
            assert!(
                text.contains(&format!("for {}", c.conversation_prefix())),
                "{l}: {text}"
            );
        }
        assert!(
            out.refused(3)
                .starts_with("max_calls: tool lim may be called at most twice per conversation"),
            "{l}: {}",
            out.steps[3]
        );
        assert!(out.success(4).starts_with("cool ran #"), "{l}");
        assert!(
            out.refused(5)
                .starts_with("cooldown: tool cool may be called again by user `mcp:"),
            "{l}: {}",
            out.steps[5]
        );
        assert!(
            out.refused(6).starts_with(
                "confirm: tool conf runs only once the user approved it, and this MCP client cannot ask"
            ),
            "{l}: {}",
            out.steps[6]
        );
        assert!(out.elicitations.is_empty(), "{l}");
    }

    // Clients that decline (or cancel) the elicitation: the tool does not run.
    let steps = json!([call("conf")]);
    let runs: Vec<(Run, &str)> = CLIENTS
        .iter()
        .filter(|c| c.elicits())
        .zip(["decline", "cancel"].into_iter().cycle())
        .map(|(c, answer)| (c.start(&ep, &steps, &[("MCP_TEST_ELICIT", answer)]), answer))
        .collect();
    assert_eq!(runs.len(), CLIENTS.len());
    for (run, answer) in runs {
        let out = run.finish(1);
        let l = &out.label;
        assert_eq!(out.elicitations.len(), 1, "{l}: {out:?}");
        let e = &out.elicitations[0];
        assert_eq!(e["answer"]["action"], answer, "{l}: {e}");
        assert!(
            e["request"]["message"]
                .as_str()
                .unwrap()
                .contains("Run tool conf?"),
            "{l}: {e}"
        );
        assert_eq!(
            e["request"]["requestedSchema"]["properties"]["confirm"]["type"], "boolean",
            "{l}: {e}"
        );
        assert_eq!(
            out.refused(0),
            "confirm: the user did not approve tool conf; it was not run",
            "{l}"
        );
    }

    // Second sessions, accepting: fresh max_calls and cooldown per session (except the
    // sessionless 2026-07-28 HTTP client: same bearer, same count); confirm runs the
    // tool for clients that can be asked.
    let steps = json!([call("lim"), call("cool"), call("conf")]);
    let outs = run_all(&CLIENTS, &ep, &steps, &[("MCP_TEST_ELICIT", "accept")]);
    let mut confirmed_runs = Vec::new();
    for (c, out) in CLIENTS.iter().zip(&outs) {
        let l = &out.label;
        if c.conversation_prefix() == "mcp:bearer:" {
            assert!(
                out.refused(0).starts_with("max_calls: "),
                "{l}: {}",
                out.steps[0]
            );
            assert!(
                out.refused(1).starts_with("cooldown: "),
                "{l}: {}",
                out.steps[1]
            );
        } else {
            assert!(out.success(0).starts_with("lim ran #"), "{l}");
            assert!(out.success(1).starts_with("cool ran #"), "{l}");
        }
        assert!(c.elicits());
        assert_eq!(out.elicitations.len(), 1, "{l}: {out:?}");
        assert_eq!(
            out.elicitations[0]["answer"]["content"]["confirm"], true,
            "{l}"
        );
        let text = out.success(2);
        let n: u32 = text
            .strip_prefix("conf ran #")
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{l}: {text}"));
        confirmed_runs.push(n);
    }
    // Only the accepted calls ever reached the plugin (it numbers its runs).
    confirmed_runs.sort_unstable();
    assert_eq!(
        confirmed_runs,
        (1..=CLIENTS.len() as u32).collect::<Vec<_>>()
    );
}

/// A chat turn in which the LLM calls an MCP server's tool (`runtime: mcp`) through
/// Hearth and answers from its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_calls_an_mcp_servers_tool() {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"steps": [
            {"after_tool": false, "tool_calls": [{"name": "py_add", "arguments": {"a": 2, "b": 3}}]},
            {"after_tool": true, "content": "py_add said: {tool_results}"}
        ]}))
        .unwrap(),
    );
    let mut b = Broker::with_llm(vec![pymcp()], &llm, &[]).await;
    let events = b.chat("what is 2 + 3?", "ann").await;
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallStarted(t) => Some((t.tool.clone(), t.plugin.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        [("py_add".to_string(), "pymcp".to_string())],
        "{events:?}"
    );
    let finished = events
        .iter()
        .find_map(|e| match e {
            Event::ToolCallFinished(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert!(finished.success, "{finished:?}");
    let total: Value =
        serde_json::from_str(&finished.content).unwrap_or_else(|e| panic!("{finished:?}: {e}"));
    assert_eq!(total, json!({"total": 5}), "{finished:?}");
    let f = final_of(&events);
    assert!(f.error.is_empty(), "{f:?}");
    assert!(f.text.starts_with("py_add said: "), "{}", f.text);
    let said: Value = serde_json::from_str(f.text.trim_start_matches("py_add said: ")).unwrap();
    assert_eq!(said, json!({"total": 5}), "{}", f.text);
    assert_eq!(f.iterations, 2, "{f:?}");
    // The LLM was offered the MCP tool with the server's schema and got its result.
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let offered = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "py_add")
        .unwrap_or_else(|| panic!("py_add not offered: {}", reqs[0]["tools"]));
    assert_eq!(
        offered["function"]["parameters"]["required"],
        json!(["a", "b"]),
        "{offered}"
    );
    let tool_msg = reqs[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool message: {}", reqs[1]));
    assert!(
        tool_msg["content"]
            .as_str()
            .unwrap()
            .contains("\"total\": 5"),
        "{tool_msg}"
    );
}
