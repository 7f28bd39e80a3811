//! MCP benchmark (issue 14): Hearth as an MCP host and as an MCP server, against the
//! official SDKs, in one run. Prints Markdown tables; see BENCHMARKS.md.
//!
//! 1. Host path: the `echo` tool of the Python test server (`tests/plugins/mcp/py_server.py`,
//!    official `mcp` 2.3) and of the TypeScript one (`ts_server.mjs`, SDK 1.32), each run
//!    as a Hearth plugin (`"runtime": "mcp"`, `"protocol": "legacy"`) and called with
//!    Admin.CallTool, against the official Python client (`mcp.ClientSession` over
//!    `stdio_client`, `bench/mcp_baseline.py`) and an rmcp client in this process (the
//!    MCP SDK the broker uses, without the broker: the floor) on their own copies of the
//!    same servers. Every client negotiates 2025-11-25.
//! 2. `hearth mcp serve`: MCP clients (rmcp here, `mcp.ClientSession`) calling the Rust
//!    echo plugin's `rs_echo` through `hearth mcp serve --data-dir D`, against
//!    Admin.CallTool / Admin.CallToolStream of the same tool; and `mcp.ClientSession`
//!    calling the Python MCP server's echo through `hearth mcp serve` (Hearth as a
//!    gateway), against the same client calling that server directly (part 1).
//!
//! Sequential calls and throughput runs are split into rounds; each round runs every
//! row in turn (reversed every other round), so load that comes and goes on a shared
//! machine hits all rows alike.
//!
//! Run (release; the Rust plugin must be built first, next to the bench's `hearth`):
//!
//! ```text
//! cargo build --release -p hearth-plugin --example stress
//! cargo bench -p hearth-broker --bench mcp
//! ```
//!
//! Needs `.venv` with `mcp` 2.3 (tests/requirements.txt) and `node_modules` with
//! `@modelcontextprotocol/sdk` (scripts/setup). Knobs (environment):
//! - `HEARTH_BENCH_CALLS` measured sequential calls per row (default 2000)
//! - `HEARTH_BENCH_WARMUP` warm-up calls per row and round, not measured (default 100)
//! - `HEARTH_BENCH_SECS` seconds of throughput per row (default 4)
//! - `HEARTH_BENCH_INFLIGHT` calls in flight in the throughput runs (default 16)
//! - `HEARTH_BENCH_ROUNDS` rounds the calls and seconds are split over (default 4)
//! - `HEARTH_BENCH_PART` comma-separated subset of `host,serve` (default both)
//! - `HEARTH_BENCH_SANDBOX` `0`: the MCP plugins run with `"sandbox": false` (default 1:
//!   sandboxed, as installed)
#![allow(unreachable_pub, missing_docs)]

#[path = "common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/harness.rs"]
mod harness;

use common::{cpu_us, env_num, loadavg, machine, summarize, utc_now, Summary};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use harness::{python, repo, stress, wait_gone, Broker, PluginDir};
use hearth_broker::cli::AdminConn;
use hearth_proto::v1::{call_tool_event, CallToolRequest, ListMcpServersRequest};
use rmcp::model::{CallToolRequestParams, ClientRequest, JsonObject, ServerResult};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, RunningService};
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// Arguments of the MCP servers' `echo` (`text: string`).
const MCP_ARGS: &str = r#"{"text":"hello"}"#;
/// Arguments of the Rust echo plugin's `rs_echo` (as in the broker bench).
const RS_ARGS: &str = r#"{"msg":"hello","n":42}"#;

/// How a row's calls are made.
enum Client {
    /// Admin.CallTool (or CallToolStream, as `hearth mcp serve` sends it) over the
    /// broker's Unix socket.
    Admin {
        conn: AdminConn,
        tool: String,
        args: String,
        stream: bool,
    },
    /// An rmcp client in this process on a child's stdio.
    Rmcp {
        running: RunningService<RoleClient, ()>,
        child: Child,
        tool: String,
        args: JsonObject,
    },
    /// `bench/mcp_baseline.py --commands` (mcp.ClientSession).
    Py(PyClient),
}

/// A running `bench/mcp_baseline.py --commands`.
struct PyClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    log: PathBuf,
}

impl PyClient {
    /// Starts the baseline on `server` (its command line) calling `tool` with `args`;
    /// waits for its `ready` line.
    async fn start(tool: &str, args: &str, server: &[String], log: PathBuf) -> (PyClient, Value) {
        let mut child = tokio::process::Command::new(python())
            .arg(repo().join("bench/mcp_baseline.py"))
            .args(["--commands", "--tool", tool, "--args", args, "--"])
            .args(server)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start bench/mcp_baseline.py");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut py = PyClient {
            child,
            stdin,
            lines,
            log,
        };
        let ready = py.read(Duration::from_secs(60)).await;
        assert_eq!(ready["ready"], json!(true), "{ready}");
        (py, ready)
    }

    async fn read(&mut self, within: Duration) -> Value {
        match tokio::time::timeout(within, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => serde_json::from_str(&line).expect("a JSON line"),
            other => panic!(
                "mcp_baseline.py: no answer ({other:?}); its stderr:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            ),
        }
    }

    async fn command(&mut self, cmd: Value, within: Duration) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{cmd}\n").as_bytes())
            .await
            .expect("write to mcp_baseline.py");
        stdin.flush().await.unwrap();
        self.read(within).await
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

/// The `f64` samples of `v[key]`.
fn samples(v: &Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// One Admin call: (client wall µs, broker `elapsed_us`), or why it failed.
async fn admin_call(
    conn: &mut AdminConn,
    tool: &str,
    args: &str,
    stream: bool,
) -> Result<(f64, f64), String> {
    let mut msg = CallToolRequest {
        name: tool.into(),
        args_json: args.into(),
        ..Default::default()
    };
    if stream {
        // What `hearth mcp serve` sends (broker/src/mcp/serve.rs).
        msg.policies = true;
        msg.user_id = "bench".into();
        msg.conversation = "bench".into();
        msg.channel = "mcp".into();
    }
    let req = conn.with_token(msg);
    let started = Instant::now();
    let r = if stream {
        let mut events = conn
            .client()
            .call_tool_stream(req)
            .await
            .map_err(|s| format!("CallToolStream: {s}"))?
            .into_inner();
        let mut result = None;
        // Read to the end of the stream (its trailers), not just to the Result event:
        // a client that drops the stream after the Result leaves HTTP/2 resets behind,
        // and after 1024 of them its connection ends with GOAWAY
        // `too_many_internal_resets` (see BENCHMARKS.md, MCP findings).
        while let Some(e) = events
            .message()
            .await
            .map_err(|s| format!("CallToolStream event: {s}"))?
        {
            if let Some(call_tool_event::Event::Result(r)) = e.event {
                result = Some(r);
            }
        }
        result.ok_or("CallToolStream ended without a result")?
    } else {
        conn.client()
            .call_tool(req)
            .await
            .map_err(|s| format!("CallTool: {s}"))?
            .into_inner()
    };
    let wall = started.elapsed().as_secs_f64() * 1e6;
    if !r.success {
        return Err(format!("{tool} failed: {}", r.error));
    }
    Ok((wall, r.elapsed_us as f64))
}

/// One `tools/call` the way the broker's MCP host sends it
/// (`send_request_with_option` + `await_response`): client wall µs, or why it failed
/// (an MCP error or a result with `isError`).
async fn rmcp_call(peer: &Peer<RoleClient>, tool: &str, args: &JsonObject) -> Result<f64, String> {
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args.clone());
    let req = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
    let started = Instant::now();
    let handle = peer
        .send_request_with_option(req, PeerRequestOptions::no_options())
        .await
        .map_err(|e| format!("tools/call: {e}"))?;
    let r = handle
        .await_response()
        .await
        .map_err(|e| format!("tools/call: {e}"))?;
    let wall = started.elapsed().as_secs_f64() * 1e6;
    match r {
        ServerResult::CallToolResult(r) if r.is_error != Some(true) => Ok(wall),
        ServerResult::CallToolResult(r) => Err(format!(
            "{tool} isError: {}",
            serde_json::to_value(&r.content).unwrap_or_default()
        )),
        other => Err(format!("{tool}: {other:?}")),
    }
}

/// Calls that failed, and the first failure's text.
#[derive(Default)]
struct Failures {
    count: usize,
    first: Option<String>,
}

impl Failures {
    fn add(&mut self, e: String) {
        self.count += 1;
        self.first.get_or_insert(e);
    }

    fn merge(&mut self, other: Failures) {
        self.count += other.count;
        if self.first.is_none() {
            self.first = other.first;
        }
    }

    /// From a baseline answer's `errors` / `first_error`.
    fn of_py(v: &Value) -> Failures {
        Failures {
            count: v["errors"].as_u64().unwrap_or(0) as usize,
            first: v["first_error"].as_str().map(str::to_string),
        }
    }
}

/// Starts `cmd` with piped stdin/stdout (stderr to `log`) and connects an rmcp client
/// (`initialize` handshake: 2025-11-25).
async fn rmcp_start(cmd: &[String], log: &Path) -> (RunningService<RoleClient, ()>, Child) {
    let mut child = tokio::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let io = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    match tokio::time::timeout(Duration::from_secs(60), ().serve(io)).await {
        Ok(Ok(running)) => (running, child),
        other => panic!(
            "rmcp client to {cmd:?}: {:?}; its stderr:\n{}",
            other.map(|r| r.err()),
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
}

impl Client {
    /// `n` sequential calls: (wall µs, broker `elapsed_us` for Admin rows, elapsed s,
    /// failed calls). Failed calls are not in the samples.
    async fn seq(&mut self, n: usize) -> (Vec<f64>, Vec<f64>, f64, Failures) {
        let mut wall = Vec::with_capacity(n);
        let mut inside = Vec::new();
        let mut failed = Failures::default();
        match self {
            Client::Admin {
                conn,
                tool,
                args,
                stream,
            } => {
                let started = Instant::now();
                for _ in 0..n {
                    match admin_call(conn, tool, args, *stream).await {
                        Ok((w, e)) => {
                            wall.push(w);
                            inside.push(e);
                        }
                        Err(e) => failed.add(e),
                    }
                }
                (wall, inside, started.elapsed().as_secs_f64(), failed)
            }
            Client::Rmcp {
                running,
                tool,
                args,
                ..
            } => {
                let peer = running.peer().clone();
                let started = Instant::now();
                for _ in 0..n {
                    match rmcp_call(&peer, tool, args).await {
                        Ok(w) => wall.push(w),
                        Err(e) => failed.add(e),
                    }
                }
                (wall, inside, started.elapsed().as_secs_f64(), failed)
            }
            Client::Py(py) => {
                let within = Duration::from_secs(60 + n as u64 / 10);
                let r = py
                    .command(json!({"op": "seq", "calls": n, "warmup": 0}), within)
                    .await;
                (
                    samples(&r, "samples_us"),
                    inside,
                    r["elapsed_s"].as_f64().unwrap(),
                    Failures::of_py(&r),
                )
            }
        }
    }

    /// `inflight` callers back to back for `secs`: (calls' wall µs, elapsed s, failed
    /// calls).
    async fn tput(&mut self, secs: f64, inflight: usize) -> (Vec<f64>, f64, Failures) {
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(secs);
        let mut tasks = Vec::new();
        match self {
            Client::Admin {
                conn,
                tool,
                args,
                stream,
            } => {
                for _ in 0..inflight {
                    let (mut conn, tool, args, stream) =
                        (conn.clone(), tool.clone(), args.clone(), *stream);
                    tasks.push(tokio::spawn(async move {
                        let mut lat = Vec::with_capacity(16_384);
                        let mut failed = Failures::default();
                        while Instant::now() < deadline {
                            match admin_call(&mut conn, &tool, &args, stream).await {
                                Ok((w, _)) => lat.push(w),
                                Err(e) => failed.add(e),
                            }
                        }
                        (lat, failed)
                    }));
                }
            }
            Client::Rmcp {
                running,
                tool,
                args,
                ..
            } => {
                for _ in 0..inflight {
                    let (peer, tool, args) = (running.peer().clone(), tool.clone(), args.clone());
                    tasks.push(tokio::spawn(async move {
                        let mut lat = Vec::with_capacity(16_384);
                        let mut failed = Failures::default();
                        while Instant::now() < deadline {
                            match rmcp_call(&peer, &tool, &args).await {
                                Ok(w) => lat.push(w),
                                Err(e) => failed.add(e),
                            }
                        }
                        (lat, failed)
                    }));
                }
            }
            Client::Py(py) => {
                let within = Duration::from_secs_f64(secs + 60.0);
                let r = py
                    .command(
                        json!({"op": "tput", "secs": secs, "inflight": inflight}),
                        within,
                    )
                    .await;
                return (
                    samples(&r, "samples_us"),
                    r["elapsed_s"].as_f64().unwrap(),
                    Failures::of_py(&r),
                );
            }
        }
        let mut all = Vec::new();
        let mut failed = Failures::default();
        for t in tasks {
            let (lat, f) = t.await.expect("throughput task");
            all.extend(lat);
            failed.merge(f);
        }
        (all, started.elapsed().as_secs_f64(), failed)
    }

    /// Stops the client's own processes (the rmcp client's server or `hearth mcp serve`,
    /// the Python baseline and its server); returns their pids.
    async fn stop(self) -> Vec<u32> {
        match self {
            Client::Admin { .. } => vec![],
            Client::Rmcp {
                running, mut child, ..
            } => {
                let pid = child.id().unwrap_or(0);
                let _ = running.cancel().await;
                if tokio::time::timeout(Duration::from_secs(5), child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
                vec![pid]
            }
            Client::Py(mut py) => {
                let mut pids = vec![py.pid()];
                pids.extend(children(py.pid()));
                drop(py.stdin.take()); // EOF: the script closes its session and server
                if tokio::time::timeout(Duration::from_secs(10), py.child.wait())
                    .await
                    .is_err()
                {
                    let _ = py.child.kill().await;
                }
                pids
            }
        }
    }
}

/// Child processes of `pid` (from /proc).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // After "(comm)": state ppid ...
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.get(1) == Some(&pid.to_string().as_str()) {
            out.push(p);
        }
    }
    out
}

/// The processes whose CPU a row is charged: the caller, `hearth mcp serve`, the
/// broker, the process running the tool.
#[derive(Clone, Copy)]
struct Pids {
    client: u32,
    bridge: Option<u32>,
    broker: Option<u32>,
    server: u32,
}

impl Pids {
    fn cpu(&self) -> [u64; 4] {
        let opt = |p: Option<u32>| p.map(cpu_us).unwrap_or(0);
        [
            cpu_us(self.client),
            opt(self.bridge),
            opt(self.broker),
            cpu_us(self.server),
        ]
    }
}

/// One measured run kind (sequential or throughput) of a row, summed over rounds.
#[derive(Default)]
struct Acc {
    wall: Vec<f64>,
    inside: Vec<f64>,
    secs: f64,
    cpu: [u64; 4],
    failed: Failures,
}

impl Acc {
    fn add(
        &mut self,
        wall: Vec<f64>,
        inside: Vec<f64>,
        secs: f64,
        failed: Failures,
        before: [u64; 4],
        after: [u64; 4],
    ) {
        self.wall.extend(wall);
        self.inside.extend(inside);
        self.secs += secs;
        self.failed.merge(failed);
        for i in 0..4 {
            self.cpu[i] += after[i].saturating_sub(before[i]);
        }
    }

    /// Calls that succeeded (the samples).
    fn calls(&self) -> usize {
        self.wall.len()
    }

    /// Every call made, failed ones included (for CPU per call).
    fn made(&self) -> usize {
        (self.wall.len() + self.failed.count).max(1)
    }

    fn rate(&self) -> f64 {
        self.calls() as f64 / self.secs
    }

    /// CPU µs per call of process `i` (0 client, 1 bridge, 2 broker, 3 server), or "–".
    fn cpu_cell(&self, pids: &Pids, i: usize) -> String {
        let present = match i {
            1 => pids.bridge.is_some(),
            2 => pids.broker.is_some(),
            _ => true,
        };
        if present {
            format!("{:.0}", self.cpu[i] as f64 / self.made() as f64)
        } else {
            "–".into()
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Part {
    Host,
    Serve,
}

/// A table row: what calls what.
struct Row {
    part: Part,
    /// Host part: the MCP server (`Python`, `TS`); serve part: the tool's plugin.
    server: &'static str,
    /// Short key for the ratio tables.
    key: &'static str,
    label: String,
    client: Client,
    pids: Pids,
    seq: Acc,
    tput: Acc,
}

fn mcp_plugin(name: &str, prefix: &str, command: Vec<String>, sandbox: bool) -> PluginDir {
    let mut manifest = json!({"name": name, "runtime": "mcp", "command": command,
        "protocol": "legacy", "tool_prefix": prefix});
    if !sandbox {
        manifest["sandbox"] = json!(false);
    }
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

fn server_cmd(lang: &str) -> Vec<String> {
    let file = |f: &str| {
        repo()
            .join("tests/plugins/mcp")
            .join(f)
            .display()
            .to_string()
    };
    match lang {
        "py" => vec![python(), file("py_server.py")],
        _ => vec!["node".into(), file("ts_server.mjs")],
    }
}

/// `summarize` of `v`, or NaN figures when it is empty (every call failed).
fn summ(v: &[f64]) -> Summary {
    if v.is_empty() {
        return Summary {
            n: 0,
            mean: f64::NAN,
            min: f64::NAN,
            p50: f64::NAN,
            p90: f64::NAN,
            p99: f64::NAN,
            p999: f64::NAN,
            max: f64::NAN,
        };
    }
    summarize(v.to_vec())
}

fn f1(s: &Summary) -> String {
    format!(
        "{:.0} | {:.0} | {:.0} | {:.0} | {:.0}",
        s.mean, s.p50, s.p90, s.p99, s.max
    )
}

fn main() {
    harness::quiet_brokers();
    // `cargo bench` passes `--bench` (and maybe a filter); nothing to parse.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}

/// Exits 2 naming what the selected parts need and is missing.
fn preflight(hearth: &str, host: bool, serve: bool) {
    let stress_bin = Path::new(hearth).parent().unwrap().join("examples/stress");
    let mut missing = Vec::new();
    if serve && !stress_bin.exists() {
        missing.push(format!(
            "{} is missing; build the Rust echo plugin with the same profile first:\n  \
             cargo build --release -p hearth-plugin --example stress",
            stress_bin.display()
        ));
    }
    let py_ok = std::process::Command::new(python())
        .args(["-c", "import mcp.client.stdio, mcp.server.mcpserver"])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !py_ok {
        missing.push(format!(
            "{} cannot import the MCP SDK; install it with scripts/setup \
             (pip install -r tests/requirements.txt)",
            python()
        ));
    }
    if host
        && !repo()
            .join("node_modules/@modelcontextprotocol/sdk/package.json")
            .exists()
    {
        missing.push(
            "node_modules/@modelcontextprotocol/sdk is missing; run scripts/setup (npm ci)".into(),
        );
    }
    if !missing.is_empty() {
        for m in missing {
            eprintln!("error: {m}");
        }
        std::process::exit(2);
    }
}

async fn run() {
    let calls = env_num("HEARTH_BENCH_CALLS", 2000) as usize;
    let warmup = env_num("HEARTH_BENCH_WARMUP", 100) as usize;
    let secs = env_num("HEARTH_BENCH_SECS", 4) as f64;
    let inflight = env_num("HEARTH_BENCH_INFLIGHT", 16) as usize;
    let rounds = env_num("HEARTH_BENCH_ROUNDS", 4).max(1) as usize;
    let parts = std::env::var("HEARTH_BENCH_PART").unwrap_or_else(|_| "host,serve".into());
    let host = parts.split(',').any(|p| p.trim() == "host");
    let serve = parts.split(',').any(|p| p.trim() == "serve");
    assert!(
        host || serve,
        "HEARTH_BENCH_PART={parts:?} selects nothing (use host,serve)"
    );
    let sandbox = env_num("HEARTH_BENCH_SANDBOX", 1) != 0;
    let per_round = calls.div_ceil(rounds);

    let hearth = env!("CARGO_BIN_EXE_hearth");
    preflight(hearth, host, serve);
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();

    println!("# Hearth MCP benchmark\n");
    println!("{}", machine());
    println!("date: {}", utc_now());
    println!("broker: {hearth}");
    println!("python: {}; node {node}", python());
    println!(
        "calls={calls} per row ({rounds} rounds of {per_round}, each after {warmup} warm-up calls) \
         secs={secs} per row ({rounds} × {:.2} s) inflight={inflight} parts={parts} \
         MCP plugins sandboxed: {sandbox}\n",
        secs / rounds as f64
    );

    // One broker: both MCP servers as plugins, and the Rust echo plugin.
    let mut plugins = Vec::new();
    plugins.push(mcp_plugin("pymcp", "pm_", server_cmd("py"), sandbox));
    if host {
        plugins.push(mcp_plugin("tsmcp", "tm_", server_cmd("ts"), sandbox));
    }
    if serve {
        plugins.push(stress("rs", "rs", "", json!({})));
    }
    let mut b = Broker::start(plugins).await;
    let bpid = b.pid();
    let data = b.data_dir();
    let logs = b.root.path().join("bench");
    std::fs::create_dir_all(&logs).unwrap();
    let me = std::process::id();
    let mut protocols = Vec::new();
    {
        let req = b.admin.with_token(ListMcpServersRequest {});
        let servers = b
            .admin
            .client()
            .list_mcp_servers(req)
            .await
            .expect("ListMcpServers")
            .into_inner()
            .servers;
        for s in servers {
            protocols.push(format!(
                "Hearth plugin {} ({} {}): {}",
                s.plugin, s.server_name, s.server_version, s.protocol_version
            ));
        }
    }
    let mut plugin_pids = Vec::new();
    let mut pid_of = std::collections::HashMap::new();
    for p in b.plugins().await {
        plugin_pids.push(p.pid);
        pid_of.insert(p.name.clone(), p.pid);
    }

    let mut rows: Vec<Row> = Vec::new();
    let mut client_pids = Vec::new();
    let mcp_args: JsonObject = serde_json::from_str(MCP_ARGS).unwrap();
    let rs_args: JsonObject = serde_json::from_str(RS_ARGS).unwrap();
    let admin = |tool: &str, args: &str, stream: bool| Client::Admin {
        conn: Broker::admin_clone(&b),
        tool: tool.into(),
        args: args.into(),
        stream,
    };
    if host {
        for (lang, server, plugin, tool) in [
            ("py", "Python", "pymcp", "pm_echo"),
            ("ts", "TS", "tsmcp", "tm_echo"),
        ] {
            let spid = pid_of[plugin];
            rows.push(Row {
                part: Part::Host,
                server,
                key: "hearth",
                label: format!("Hearth: Admin.CallTool `{tool}` → broker → server"),
                client: admin(tool, MCP_ARGS, false),
                pids: Pids {
                    client: me,
                    bridge: None,
                    broker: Some(bpid),
                    server: spid,
                },
                seq: Acc::default(),
                tput: Acc::default(),
            });
            let (py, ready) = PyClient::start(
                "echo",
                MCP_ARGS,
                &server_cmd(lang),
                logs.join(format!("py-{lang}.log")),
            )
            .await;
            protocols.push(format!(
                "mcp.ClientSession → {} ({}): {}",
                lang,
                ready["server"].as_str().unwrap_or("?"),
                ready["protocol"].as_str().unwrap_or("?")
            ));
            let ppid = py.pid();
            let spid = *children(ppid)
                .first()
                .expect("the baseline's server process");
            client_pids.push(ppid);
            rows.push(Row {
                part: Part::Host,
                server,
                key: "python",
                label: format!(
                    "{} → server (direct)",
                    ready["client"].as_str().unwrap_or("mcp.ClientSession")
                ),
                client: Client::Py(py),
                pids: Pids {
                    client: ppid,
                    bridge: None,
                    broker: None,
                    server: spid,
                },
                seq: Acc::default(),
                tput: Acc::default(),
            });
            let (running, child) =
                rmcp_start(&server_cmd(lang), &logs.join(format!("rmcp-{lang}.log"))).await;
            protocols.push(format!(
                "rmcp → {lang}: {}",
                running
                    .peer()
                    .peer_info()
                    .map(|i| i.protocol_version.to_string())
                    .unwrap_or_default()
            ));
            let spid = child.id().unwrap_or(0);
            rows.push(Row {
                part: Part::Host,
                server,
                key: "rmcp",
                label: "rmcp 3.11 client in the bench → server (direct; the floor)".into(),
                client: Client::Rmcp {
                    running,
                    child,
                    tool: "echo".into(),
                    args: mcp_args.clone(),
                },
                pids: Pids {
                    client: me,
                    bridge: None,
                    broker: None,
                    server: spid,
                },
                seq: Acc::default(),
                tput: Acc::default(),
            });
        }
    }
    if serve {
        let serve_cmd: Vec<String> = vec![
            hearth.into(),
            "mcp".into(),
            "serve".into(),
            "--data-dir".into(),
            data.display().to_string(),
        ];
        let rpid = pid_of["rs"];
        let direct = Pids {
            client: me,
            bridge: None,
            broker: Some(bpid),
            server: rpid,
        };
        rows.push(Row {
            part: Part::Serve,
            server: "Rust",
            key: "admin",
            label: "Admin.CallTool `rs_echo` (direct)".into(),
            client: admin("rs_echo", RS_ARGS, false),
            pids: direct,
            seq: Acc::default(),
            tput: Acc::default(),
        });
        rows.push(Row {
            part: Part::Serve,
            server: "Rust",
            key: "stream",
            label: "Admin.CallToolStream `rs_echo` as `hearth mcp serve` sends it (direct)".into(),
            client: admin("rs_echo", RS_ARGS, true),
            pids: direct,
            seq: Acc::default(),
            tput: Acc::default(),
        });
        let (running, child) = rmcp_start(&serve_cmd, &logs.join("rmcp-serve.log")).await;
        protocols.push(format!(
            "rmcp → hearth mcp serve: {}",
            running
                .peer()
                .peer_info()
                .map(|i| i.protocol_version.to_string())
                .unwrap_or_default()
        ));
        let serve_pid = child.id().unwrap_or(0);
        rows.push(Row {
            part: Part::Serve,
            server: "Rust",
            key: "rmcp_serve",
            label: "rmcp 3.11 client → `hearth mcp serve` → broker → `rs_echo`".into(),
            client: Client::Rmcp {
                running,
                child,
                tool: "rs_echo".into(),
                args: rs_args.clone(),
            },
            pids: Pids {
                client: me,
                bridge: Some(serve_pid),
                broker: Some(bpid),
                server: rpid,
            },
            seq: Acc::default(),
            tput: Acc::default(),
        });
        for (key, server, tool, args, spid) in [
            ("py_serve", "Rust", "rs_echo", RS_ARGS, rpid),
            (
                "py_gateway",
                "Python MCP",
                "pm_echo",
                MCP_ARGS,
                pid_of["pymcp"],
            ),
        ] {
            let (py, ready) = PyClient::start(
                tool,
                args,
                &serve_cmd,
                logs.join(format!("py-serve-{tool}.log")),
            )
            .await;
            protocols.push(format!(
                "mcp.ClientSession → hearth mcp serve ({}): {}",
                ready["server"].as_str().unwrap_or("?"),
                ready["protocol"].as_str().unwrap_or("?")
            ));
            let ppid = py.pid();
            let bridge = *children(ppid)
                .first()
                .expect("the baseline's hearth mcp serve");
            client_pids.push(ppid);
            rows.push(Row {
                part: Part::Serve,
                server,
                key,
                label: format!("mcp.ClientSession → `hearth mcp serve` → broker → `{tool}`"),
                client: Client::Py(py),
                pids: Pids {
                    client: ppid,
                    bridge: Some(bridge),
                    broker: Some(bpid),
                    server: spid,
                },
                seq: Acc::default(),
                tput: Acc::default(),
            });
        }
    }

    println!("Negotiated protocol revisions:\n");
    for p in &protocols {
        println!("- {p}");
    }
    println!();

    // Sequential, in rounds.
    let load_start = loadavg();
    let started = Instant::now();
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..rows.len()).collect()
        } else {
            (0..rows.len()).rev().collect()
        };
        for i in order {
            let row = &mut rows[i];
            row.client.seq(warmup).await;
            let before = row.pids.cpu();
            let (wall, inside, secs, failed) = row.client.seq(per_round).await;
            let after = row.pids.cpu();
            row.seq.add(wall, inside, secs, failed, before, after);
        }
    }
    let seq_took = started.elapsed();
    let load_mid = loadavg();
    // Throughput, in rounds.
    let slice = secs / rounds as f64;
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..rows.len()).collect()
        } else {
            (0..rows.len()).rev().collect()
        };
        for i in order {
            let row = &mut rows[i];
            let before = row.pids.cpu();
            let (wall, secs, failed) = row.client.tput(slice, inflight).await;
            let after = row.pids.cpu();
            row.tput.add(wall, vec![], secs, failed, before, after);
        }
    }
    let load_end = loadavg();
    println!(
        "loadavg: {load_start} at the start, {load_mid} after the sequential runs ({:.0} s), {load_end} after the throughput runs\n",
        seq_took.as_secs_f64()
    );

    let find = |part: Part, server: &str, key: &str| {
        rows.iter()
            .find(|r| r.part == part && r.server == server && r.key == key)
    };
    let failed_note = |part: Part| {
        for r in rows.iter().filter(|r| r.part == part) {
            for (what, acc) in [("sequential", &r.seq), ("throughput", &r.tput)] {
                if let Some(first) = &acc.failed.first {
                    println!(
                        "- FAILED CALLS, {} ({what}): {} of {}; first: {first}",
                        r.label,
                        acc.failed.count,
                        acc.made()
                    );
                }
            }
        }
    };

    if host {
        println!("## 1. Host path: `echo` of a third-party MCP server over stdio (protocol 2025-11-25)\n");
        println!(
            "Sequential calls (1 in flight), client wall time in µs; `elapsed_us` = the broker's own wall time of the same calls (Admin handler: route, validate, MCP round trip). CPU = utime+stime per call of the calling process, the broker and the server process. Failed calls are counted, not timed.\n"
        );
        println!("| server | client | calls | failed | mean | p50 | p90 | p99 | max | calls/s | client CPU µs/call | broker CPU µs/call | server CPU µs/call |");
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in rows.iter().filter(|r| r.part == Part::Host) {
            println!(
                "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} |",
                r.server,
                r.label,
                r.seq.calls(),
                r.seq.failed.count,
                f1(&summ(&r.seq.wall)),
                r.seq.rate(),
                r.seq.cpu_cell(&r.pids, 0),
                r.seq.cpu_cell(&r.pids, 2),
                r.seq.cpu_cell(&r.pids, 3)
            );
            if !r.seq.inside.is_empty() {
                println!(
                    "| {} | the same calls, broker `elapsed_us` | {} | – | {} | – | – | – | – |",
                    r.server,
                    r.seq.calls(),
                    f1(&summ(&r.seq.inside))
                );
            }
        }
        println!("\nHearth against the official Python client on the same server (goal: Hearth ≤ 1.2× its latency), and the rmcp floor:\n");
        println!("| server | Hearth client p50 | Python client p50 | ratio | Hearth `elapsed_us` p50 | ratio | Hearth client p99 | Python client p99 | ratio | Hearth `elapsed_us` p99 | ratio | rmcp floor p50 | Hearth client p50 − floor p50 | Hearth `elapsed_us` p50 − floor p50 |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for server in ["Python", "TS"] {
            let (Some(h), Some(p), Some(f)) = (
                find(Part::Host, server, "hearth"),
                find(Part::Host, server, "python"),
                find(Part::Host, server, "rmcp"),
            ) else {
                continue;
            };
            let (hs, hi, ps, fs) = (
                summ(&h.seq.wall),
                summ(&h.seq.inside),
                summ(&p.seq.wall),
                summ(&f.seq.wall),
            );
            println!(
                "| {server} | {:.0} | {:.0} | {:.2}× | {:.0} | {:.2}× | {:.0} | {:.0} | {:.2}× | {:.0} | {:.2}× | {:.0} | {:.0} | {:.0} |",
                hs.p50,
                ps.p50,
                hs.p50 / ps.p50,
                hi.p50,
                hi.p50 / ps.p50,
                hs.p99,
                ps.p99,
                hs.p99 / ps.p99,
                hi.p99,
                hi.p99 / ps.p99,
                fs.p50,
                hs.p50 - fs.p50,
                hi.p50 - fs.p50
            );
        }
        println!("\nThroughput: {inflight} calls in flight for {secs} s per row (Hearth: {inflight} tasks on one admin HTTP/2 connection; Python: {inflight} anyio tasks on one ClientSession; rmcp: {inflight} tasks on one client).\n");
        println!("| server | client | calls | failed | calls/s | p50 µs | p99 µs | client CPU µs/call | broker CPU µs/call | server CPU µs/call |");
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in rows.iter().filter(|r| r.part == Part::Host) {
            let s = summ(&r.tput.wall);
            println!(
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {} |",
                r.server,
                r.label,
                r.tput.calls(),
                r.tput.failed.count,
                r.tput.rate(),
                s.p50,
                s.p99,
                r.tput.cpu_cell(&r.pids, 0),
                r.tput.cpu_cell(&r.pids, 2),
                r.tput.cpu_cell(&r.pids, 3)
            );
        }
        println!("\n| server | Hearth calls/s | Python client calls/s | Hearth / Python | rmcp floor calls/s |");
        println!("|---|---:|---:|---:|---:|");
        for server in ["Python", "TS"] {
            let (Some(h), Some(p), Some(f)) = (
                find(Part::Host, server, "hearth"),
                find(Part::Host, server, "python"),
                find(Part::Host, server, "rmcp"),
            ) else {
                continue;
            };
            println!(
                "| {server} | {:.0} | {:.0} | {:.2}× | {:.0} |",
                h.tput.rate(),
                p.tput.rate(),
                h.tput.rate() / p.tput.rate(),
                f.tput.rate()
            );
        }
        println!();
        failed_note(Part::Host);
    }

    if serve {
        println!("## 2. `hearth mcp serve`: per-call overhead\n");
        println!("Sequential calls (1 in flight), client wall time in µs. CPU per call of the calling process, `hearth mcp serve`, the broker and the plugin process. Failed calls are counted, not timed.\n");
        println!("| path | calls | failed | mean | p50 | p90 | p99 | max | calls/s | client CPU µs/call | serve CPU µs/call | broker CPU µs/call | plugin CPU µs/call |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in rows.iter().filter(|r| r.part == Part::Serve) {
            println!(
                "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
                r.label,
                r.seq.calls(),
                r.seq.failed.count,
                f1(&summ(&r.seq.wall)),
                r.seq.rate(),
                r.seq.cpu_cell(&r.pids, 0),
                r.seq.cpu_cell(&r.pids, 1),
                r.seq.cpu_cell(&r.pids, 2),
                r.seq.cpu_cell(&r.pids, 3)
            );
            if !r.seq.inside.is_empty() {
                println!(
                    "| the same calls, broker `elapsed_us` | {} | – | {} | – | – | – | – | – |",
                    r.seq.calls(),
                    f1(&summ(&r.seq.inside))
                );
            }
        }
        let p50 =
            |key: &str, server: &str| find(Part::Serve, server, key).map(|r| summ(&r.seq.wall).p50);
        println!("\n| MCP client | p50 through `hearth mcp serve` | direct p50 | difference |");
        println!("|---|---:|---:|---:|");
        if let (Some(a), Some(st)) = (p50("admin", "Rust"), p50("stream", "Rust")) {
            for (key, name) in [
                ("rmcp_serve", "rmcp 3.11 (`rs_echo`)"),
                ("py_serve", "mcp.ClientSession (`rs_echo`)"),
            ] {
                if let Some(v) = p50(key, "Rust") {
                    println!(
                        "| {name} vs Admin.CallTool | {v:.0} | {a:.0} | {:.0} |",
                        v - a
                    );
                    println!(
                        "| {name} vs Admin.CallToolStream | {v:.0} | {st:.0} | {:.0} |",
                        v - st
                    );
                }
            }
        }
        if let (Some(g), Some(d)) = (
            p50("py_gateway", "Python MCP"),
            find(Part::Host, "Python", "python").map(|r| summ(&r.seq.wall).p50),
        ) {
            println!("| mcp.ClientSession, `echo` of the Python MCP server: via `hearth mcp serve` and the broker vs that server directly | {g:.0} | {d:.0} | {:.0} |", g - d);
        }
        println!("\nThroughput: {inflight} calls in flight for {secs} s per row.\n");
        println!("| path | calls | failed | calls/s | p50 µs | p99 µs | client CPU µs/call | serve CPU µs/call | broker CPU µs/call | plugin CPU µs/call |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in rows.iter().filter(|r| r.part == Part::Serve) {
            let s = summ(&r.tput.wall);
            println!(
                "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} |",
                r.label,
                r.tput.calls(),
                r.tput.failed.count,
                r.tput.rate(),
                s.p50,
                s.p99,
                r.tput.cpu_cell(&r.pids, 0),
                r.tput.cpu_cell(&r.pids, 1),
                r.tput.cpu_cell(&r.pids, 2),
                r.tput.cpu_cell(&r.pids, 3)
            );
        }
        println!();
        failed_note(Part::Serve);
    }
    let failed: usize = rows
        .iter()
        .map(|r| r.seq.failed.count + r.tput.failed.count)
        .sum();
    if failed > 0 {
        println!("\n{failed} calls FAILED in all (see the notes above); figures of those rows leave them out.\n");
    }

    // Stop every client, then the broker; every process must be gone.
    let mut pids = plugin_pids;
    for r in rows {
        for p in [r.pids.client, r.pids.server]
            .into_iter()
            .chain(r.pids.bridge)
            .filter(|p| *p != me)
        {
            pids.push(p);
        }
        pids.extend(r.client.stop().await);
    }
    pids.extend(client_pids);
    let log = b.log();
    drop(b);
    pids.sort_unstable();
    pids.dedup();
    pids.retain(|p| *p != 0);
    let left = wait_gone(&pids, Duration::from_secs(10));
    let broker_left = wait_gone(&[bpid], Duration::from_secs(5));
    if left.is_empty() && broker_left.is_empty() {
        println!(
            "cleanup: broker and all {} other processes (plugins, servers, clients, hearth mcp serve) are gone.",
            pids.len()
        );
    } else {
        println!("cleanup: STILL RUNNING after stop: broker {broker_left:?}, others {left:?}");
        let warn = log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .count();
        println!("broker log had {warn} warning/error lines");
        std::process::exit(1);
    }
}
