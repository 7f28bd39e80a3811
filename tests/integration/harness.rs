//! Test harness: a real `hearth run` process in a temp data dir, plugin directories
//! written per test, and an admin client.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hearth_broker::cli::AdminConn;
use hearth_proto::v1::{
    CallToolRequest, CallToolResponse, ListPluginsRequest, ListToolsRequest, PluginState,
    PluginStatus,
};
use serde_json::{json, Value};

/// Repository root.
/// `tests/plugins/mcp/<file>` as an absolute path (the MCP fixtures written with the
/// official SDKs).
pub fn mcp_fixture(file: &str) -> String {
    repo()
        .join("tests/plugins/mcp")
        .join(file)
        .display()
        .to_string()
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Cargo's output dir of this build (`target/debug`).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_hearth"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A Rust binary built by `cargo build --workspace --examples`, e.g. `examples/stress`.
pub fn rust_binary(rel: &str) -> PathBuf {
    let p = target_dir().join(rel);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --examples` before the integration tests",
        p.display()
    );
    p
}

/// `HEARTH_LOG` of the brokers this process starts: the broker's own modules at debug
/// in tests (their log explains a failure), the broker's default (`info`) once
/// [`quiet_brokers`] was called.
static BROKER_LOG: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Brokers started from now on log at the default level, as operators run them. Every
/// benchmark calls it first: at debug a broker writes a log line per tool call, which
/// measured as much as the call itself.
#[allow(dead_code)] // the benches' only
pub fn quiet_brokers() {
    let _ = BROKER_LOG.set("info");
}

/// The Go test plugin `tests/plugins/go/cmd/<name>`, built with `go build` once per test
/// process into `target/<profile>/go-plugins/<name>` (Go's own cache makes a rebuild with
/// nothing changed take ~0.1 s). Panics with the compiler's output when it does not build.
pub fn go_binary(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let out = target_dir().join("go-plugins").join(name);
    let mut built = BUILT.lock().unwrap();
    if built.iter().any(|n| n == name) {
        return out;
    }
    let result = Command::new("go")
        .args(["build", "-buildvcs=false", "-o"])
        .arg(&out)
        .arg(format!("./cmd/{name}"))
        .current_dir(repo().join("tests/plugins/go"))
        .output()
        .expect("`go` is on PATH (Go 1.26 or newer; the Go SDK's tests need it)");
    assert!(
        result.status.success(),
        "go build tests/plugins/go/cmd/{name} failed:\n{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    built.push(name.to_owned());
    out
}

/// Python with the SDK installed: `$HEARTH_PYTHON`, else the repo's `.venv`.
pub fn python() -> String {
    std::env::var("HEARTH_PYTHON")
        .unwrap_or_else(|_| repo().join(".venv/bin/python").display().to_string())
}

/// A plugin directory to create: `plugins/<dir>/plugin.json` = `manifest`.
pub struct PluginDir {
    /// Directory name.
    pub dir: String,
    /// plugin.json content.
    pub manifest: Value,
}

/// Python test plugin `tests/plugins/py_echo.py` named `name`.
pub fn py_echo(name: &str, env: Value) -> PluginDir {
    PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": "python",
            "entry": repo().join("tests/plugins/py_echo.py"), "env": env}),
    }
}

/// Node test plugin `tests/plugins/node_echo.js` named `name`.
pub fn node_echo(name: &str) -> PluginDir {
    PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": "node",
            "entry": repo().join("tests/plugins/node_echo.js")}),
    }
}

/// A stress plugin (see `tests/plugins/STRESS.md`) in `lang` (`py`, `nd`, `rs`, `go`) named
/// `name` (its tools are `<name>_echo`, `<name>_sleep`, …) with `HEARTH_FAULT=faults`;
/// `extra` is merged into its manifest.
pub fn stress(lang: &str, name: &str, faults: &str, extra: Value) -> PluginDir {
    let mut manifest = match lang {
        "py" => json!({"runtime": "python", "entry": repo().join("tests/plugins/stress.py")}),
        "nd" => json!({"runtime": "node", "entry": repo().join("tests/plugins/stress.js")}),
        "rs" => json!({"runtime": "exec", "entry": rust_binary("examples/stress")}),
        "go" => json!({"runtime": "exec", "entry": go_binary("stress")}),
        other => panic!("unknown language {other}"),
    };
    manifest["name"] = json!(name);
    manifest["env"] = json!({"HEARTH_FAULT": faults});
    if let (Some(m), Some(extra)) = (manifest.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

/// The stress plugin languages: Python, Node, Rust and Go SDKs.
pub const LANGS: [&str; 4] = ["py", "nd", "rs", "go"];

/// An example plugin of `examples/plugins/<name>` (the Rust `hello` uses the built
/// binary).
pub fn example(name: &str) -> PluginDir {
    let src = repo().join("examples/plugins").join(name);
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(src.join("plugin.json")).unwrap()).unwrap();
    let entry = if name == "hello" {
        rust_binary("hello")
    } else {
        src.join(manifest["entry"].as_str().unwrap())
    };
    manifest["entry"] = json!(entry);
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

/// A running broker; stopped (SIGTERM, then SIGKILL) on drop.
pub struct Broker {
    /// Temp root (data dir, plugins, log).
    pub root: tempfile::TempDir,
    /// The broker process.
    pub child: Option<Child>,
    /// Admin client.
    pub admin: AdminConn,
}

impl Broker {
    /// Data dir of this broker.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// Starts `hearth run` with `plugins` and waits until every one of them is ready.
    pub async fn start(plugins: Vec<PluginDir>) -> Broker {
        Self::start_with(plugins, &[]).await
    }

    /// Like [`Broker::start`] with extra `hearth run` arguments.
    pub async fn start_with(plugins: Vec<PluginDir>, args: &[&str]) -> Broker {
        let names: Vec<String> = plugins
            .iter()
            .map(|p| p.manifest["name"].as_str().unwrap_or(&p.dir).to_string())
            .collect();
        let mut broker = Self::spawn(plugins, args).await;
        for name in names {
            broker.wait_ready(&name).await;
        }
        broker
    }

    /// Starts `hearth run --llm-url LLM` with `plugins`, after writing `files` (see
    /// [`Broker::spawn_with_files`]), and waits until every plugin is ready.
    pub async fn with_llm(
        plugins: Vec<PluginDir>,
        llm: &hearth_scripted::ScriptedLlm,
        files: &[(&str, &str)],
    ) -> Broker {
        let url = llm.base_url();
        let names: Vec<String> = plugins
            .iter()
            .map(|p| p.manifest["name"].as_str().unwrap_or(&p.dir).to_string())
            .collect();
        let mut broker = Self::spawn_with_files(plugins, &["--llm-url", &url], files).await;
        for name in names {
            broker.wait_ready(&name).await;
        }
        broker
    }

    /// Starts `hearth run` with `plugins` without waiting for them.
    pub async fn spawn(plugins: Vec<PluginDir>, args: &[&str]) -> Broker {
        Self::spawn_with_files(plugins, args, &[]).await
    }

    /// Like [`Broker::spawn`], first writing `files` (path relative to the data dir,
    /// content), e.g. `hearth.toml` or `adapters/openai.lua`.
    pub async fn spawn_with_files(
        plugins: Vec<PluginDir>,
        args: &[&str],
        files: &[(&str, &str)],
    ) -> Broker {
        Self::spawn_with_env(plugins, args, files, &[]).await
    }

    /// Like [`Broker::spawn_with_files`], with `env` added to the broker's environment.
    pub async fn spawn_with_env(
        plugins: Vec<PluginDir>,
        args: &[&str],
        files: &[(&str, &str)],
        env: &[(&str, &str)],
    ) -> Broker {
        let root = tempfile::Builder::new()
            .prefix("hearth-it")
            .tempdir_in("/tmp")
            .unwrap();
        let plugin_root = root.path().join("plugins");
        for p in &plugins {
            let dir = plugin_root.join(&p.dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("plugin.json"), p.manifest.to_string()).unwrap();
        }
        std::fs::create_dir_all(&plugin_root).unwrap();
        // The broker refuses plugin folders others may write (whatever this process's
        // umask made them, e.g. 002).
        for dir in std::iter::once(plugin_root.clone())
            .chain(plugins.iter().map(|p| plugin_root.join(&p.dir)))
        {
            not_shared(&dir);
        }
        let data = root.path().join("data");
        for (rel, content) in files {
            let path = data.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        let log = std::fs::File::create(root.path().join("broker.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .arg("--data-dir")
            .arg(&data)
            .arg("run")
            .arg("--plugins")
            .arg(&plugin_root)
            .args(args)
            .env("HEARTH_PYTHON", python())
            .env("NODE_PATH", repo().join("node_modules"))
            .env(
                "HEARTH_LOG",
                BROKER_LOG
                    .get()
                    .copied()
                    .unwrap_or("info,hearth_broker=debug"),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn hearth run");
        let started = Instant::now();
        let admin = loop {
            if data.join("admin.token").exists() {
                if let Ok(c) = AdminConn::connect(&data).await {
                    break c;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "broker did not come up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Broker {
            root,
            child: Some(child),
            admin,
        }
    }

    /// Writes a plugin directory under this broker's temp root (not loaded).
    pub fn write_plugin(&self, p: &PluginDir) -> PathBuf {
        let dir = self.root.path().join("extra").join(&p.dir);
        std::fs::create_dir_all(&dir).unwrap();
        not_shared(&dir);
        std::fs::write(dir.join("plugin.json"), p.manifest.to_string()).unwrap();
        dir
    }

    /// Every TextMemory log line the broker wrote (`memory/text/*.jsonl`), in one text.
    pub fn text_memory(&self) -> String {
        let dir = self.data_dir().join("memory/text");
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect()
    }

    /// The broker's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Polls `plugins list` until `check` holds for `name` (up to `within`); panics
    /// with the broker log otherwise.
    pub async fn wait_for(
        &mut self,
        name: &str,
        within: Duration,
        what: &str,
        check: impl Fn(&PluginStatus) -> bool,
    ) -> PluginStatus {
        let started = Instant::now();
        loop {
            if let Some(p) = self.plugins().await.into_iter().find(|p| p.name == name) {
                if check(&p) {
                    return p;
                }
                if started.elapsed() > within {
                    panic!("plugin {name}: {what} not reached within {within:?}: {p:?}\nbroker log:\n{}", self.log());
                }
            } else if started.elapsed() > within {
                panic!("plugin {name} not listed; broker log:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits until `name` is in `state`.
    pub async fn wait_state(
        &mut self,
        name: &str,
        state: PluginState,
        within: Duration,
    ) -> PluginStatus {
        self.wait_for(name, within, &format!("state {state:?}"), |p| {
            p.state == state as i32
        })
        .await
    }

    /// Waits until the log contains `needle`; returns the log.
    pub async fn wait_log(&self, needle: &str, within: Duration) -> String {
        let started = Instant::now();
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            if started.elapsed() > within {
                panic!("`{needle}` not in the broker log within {within:?}:\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// A second admin client on the same connection (for concurrent calls).
    pub fn admin_clone(b: &Broker) -> AdminConn {
        b.admin.clone()
    }

    /// The broker's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("broker.log")).unwrap_or_default()
    }

    /// Every plugin's status.
    pub async fn plugins(&mut self) -> Vec<PluginStatus> {
        let req = self.admin.with_token(ListPluginsRequest {});
        self.admin
            .client()
            .list_plugins(req)
            .await
            .unwrap()
            .into_inner()
            .plugins
    }

    /// The status of `name`.
    /// The broker's MCP plugins (`Admin.ListMcpServers`).
    pub async fn mcp_servers(&mut self) -> Vec<hearth_proto::v1::McpServerInfo> {
        let req = self
            .admin
            .with_token(hearth_proto::v1::ListMcpServersRequest {});
        self.admin
            .client()
            .list_mcp_servers(req)
            .await
            .unwrap()
            .into_inner()
            .servers
    }

    pub async fn plugin(&mut self, name: &str) -> PluginStatus {
        self.plugins()
            .await
            .into_iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no plugin {name}"))
    }

    /// Waits (up to 60 s: CI machines are small and shared) until `name` is ready;
    /// panics with its status and the broker log if not.
    pub async fn wait_ready(&mut self, name: &str) -> PluginStatus {
        let started = Instant::now();
        loop {
            let p = self.plugins().await.into_iter().find(|p| p.name == name);
            if let Some(p) = p.as_ref().filter(|p| p.state == PluginState::Ready as i32) {
                return p.clone();
            }
            if started.elapsed() > Duration::from_secs(60) {
                panic!(
                    "plugin {name} not ready after 60 s: {p:?}; broker log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Names of all registered tools.
    pub async fn tools(&mut self) -> Vec<String> {
        let req = self.admin.with_token(ListToolsRequest {});
        let tools = self
            .admin
            .client()
            .list_tools(req)
            .await
            .unwrap()
            .into_inner()
            .tools;
        tools.into_iter().map(|t| t.name).collect()
    }

    /// Runs one chat exchange; returns every event (the last is `Final`).
    pub async fn chat(
        &mut self,
        message: &str,
        user: &str,
    ) -> Vec<hearth_proto::v1::chat_event::Event> {
        let req = self.admin.with_token(hearth_proto::v1::ChatRequest {
            message: message.into(),
            user_id: user.into(),
            channel: "test".into(),
            ..Default::default()
        });
        let mut stream = self.admin.agent().chat(req).await.unwrap().into_inner();
        let mut events = Vec::new();
        while let Some(ev) = stream.message().await.unwrap() {
            events.extend(ev.event);
        }
        events
    }

    /// Calls `tool` with a timeout through the Admin service.
    pub async fn call_timeout(
        &mut self,
        tool: &str,
        args: Value,
        timeout_ms: u32,
    ) -> Result<CallToolResponse, tonic::Status> {
        let req = self.admin.with_token(CallToolRequest {
            name: tool.into(),
            args_json: args.to_string(),
            timeout_ms,
            ..Default::default()
        });
        self.admin
            .client()
            .call_tool(req)
            .await
            .map(|r| r.into_inner())
    }

    /// Calls `tool` through the Admin service.
    pub async fn call(
        &mut self,
        tool: &str,
        args: Value,
    ) -> Result<CallToolResponse, tonic::Status> {
        let req = self.admin.with_token(CallToolRequest {
            name: tool.into(),
            args_json: args.to_string(),
            ..Default::default()
        });
        self.admin
            .client()
            .call_tool(req)
            .await
            .map(|r| r.into_inner())
    }

    /// Runs the `hearth` CLI against this broker; returns (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Sends `signal` to the broker and waits (up to 15 s) for it to exit.
    pub fn stop_with(&mut self, signal: i32) {
        if let Some(mut child) = self.child.take() {
            unsafe {
                libc::kill(child.id() as i32, signal);
            }
            let started = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if started.elapsed() > Duration::from_secs(15) {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("broker did not exit within 15 s of signal {signal}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate(child);
        }
    }
}

/// Stops a `hearth` process as an operator would: SIGTERM, then SIGKILL after 10 s.
pub fn terminate(mut child: Child) {
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let started = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True while a process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // state is the field after the parenthesised command name
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next();
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

/// Waits up to `within` for every pid in `pids` to be gone; returns the survivors.
pub fn wait_gone(pids: &[u32], within: Duration) -> Vec<u32> {
    let started = Instant::now();
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || started.elapsed() > within {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// VmRSS of `pid` in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The `Final` event that ends a chat's `events`; panics naming what came last instead.
pub fn final_of(events: &[hearth_proto::v1::chat_event::Event]) -> hearth_proto::v1::Final {
    match events.last() {
        Some(hearth_proto::v1::chat_event::Event::Final(f)) => f.clone(),
        other => panic!("last event is not Final: {other:?}"),
    }
}

/// A raw gRPC channel to the broker's Unix socket in `data_dir` (no token attached).
pub async fn socket_channel(data_dir: &Path) -> tonic::transport::Channel {
    unix_channel(data_dir.join("hearth.sock")).await
}

/// A gRPC channel over the Unix socket at `path`; panics when it cannot connect.
pub async fn unix_channel(path: PathBuf) -> tonic::transport::Channel {
    tonic::transport::Endpoint::try_from("http://localhost")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .unwrap()
}

/// Mode 0755 on `dir`: the broker refuses plugin folders writable by group or others.
pub fn not_shared(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}
