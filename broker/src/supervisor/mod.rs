//! The supervisor: spawns each plugin, runs its session handshake, watches the
//! process, fails in-flight calls when it dies, restarts it, and stops it politely
//! then firmly.
//!
//! Each plugin has one task ([`Plugin::run`]) that owns its child process; other
//! parts talk to it through a control channel. Plugin state sits behind one lock per
//! plugin; the live session is published on a `watch` channel that callers wait on
//! while a plugin restarts.

pub mod process;
pub mod session;

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hearth_proto::v1::{
    host_message::Msg as HostMsg, plugin_message::Msg as PluginMsg, HostMessage, PluginMessage,
    PluginState, Registered, Rejected, Sender, Shutdown, ToolRegistration, ToolResult,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::{Status, Streaming};

use crate::error::{CallError, PluginError};
use crate::manifest::PluginSpec;
use crate::registry::Registry;
use process::{Interpreters, LogRing};
use session::{Outbound, Session};

/// First restart delay after a crash; doubles per crash up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// Longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Uptime after which a crash counts as a fresh start (backoff resets).
const HEALTHY_UPTIME: Duration = Duration::from_secs(30);
/// How long a process may live on after its session ended before it is killed.
const SESSION_LOSS_KILL_AFTER: Duration = Duration::from_secs(2);
/// Wait after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// Broker-wide supervisor settings.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// Address plugins dial (`HEARTH_ADDR`).
    pub addr: String,
    /// Python and Node used when manifests name none.
    pub interpreters: Interpreters,
    /// How long a call waits for a restarting plugin to be ready again.
    pub restart_wait: Duration,
    /// Grace period between `Shutdown` and SIGTERM when stopping a plugin.
    pub shutdown_grace: Duration,
}

enum Control {
    /// The session of this generation registered.
    Ready(u64),
    /// The session of this generation ended.
    SessionEnded(u64),
    /// Stop and restart now.
    Restart,
    /// Stop for good.
    Stop,
}

#[derive(Debug)]
struct Inner {
    state: PluginState,
    pid: u32,
    restarts: u32,
    token: String,
    generation: u64,
    attached: bool,
    ready_at: Option<Instant>,
    spawned_at: Option<Instant>,
    startup: Option<Duration>,
    last_exit: String,
    reason: String,
    sdk: String,
    /// Session of the current process, registered or not yet published.
    live: Option<Arc<Session>>,
}

/// One supervised plugin.
pub struct Plugin {
    spec: PluginSpec,
    status: Mutex<Inner>,
    session: watch::Sender<Option<Arc<Session>>>,
    control: mpsc::UnboundedSender<Control>,
    logs: Arc<LogRing>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.spec.name)
            .finish()
    }
}

/// A plugin's status as `plugins list` shows it.
#[derive(Debug, Clone)]
pub struct PluginSnapshot {
    /// Plugin name.
    pub name: String,
    /// `python`, `node`, `exec`, or empty when the manifest did not load.
    pub runtime: String,
    /// Current pid, 0 when none.
    pub pid: u32,
    /// Supervisor state.
    pub state: PluginState,
    /// Restarts since the broker started.
    pub restarts: u32,
    /// Registered tool names.
    pub tools: Vec<String>,
    /// Plugin directory.
    pub dir: String,
    /// Time since the current process registered.
    pub uptime: Option<Duration>,
    /// How the last process ended.
    pub last_exit: String,
    /// Why the plugin is not ready, when it is not.
    pub reason: String,
    /// Manifest version.
    pub version: String,
    /// SDK the plugin reported in `Hello`.
    pub sdk: String,
    /// Spawn to registered of the current process.
    pub startup: Option<Duration>,
}

fn random_token() -> String {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares secrets without an early exit.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Plugin {
    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its spec from disk.
    pub fn spec(&self) -> &PluginSpec {
        &self.spec
    }

    /// The last `n` lines it wrote to stdout/stderr.
    pub fn log_tail(&self, n: usize) -> Vec<String> {
        self.logs.tail(n)
    }

    fn snapshot(&self, registry: &Registry) -> PluginSnapshot {
        let s = self.status.lock().unwrap();
        PluginSnapshot {
            name: self.spec.name.clone(),
            runtime: self.spec.runtime.as_str().into(),
            pid: s.pid,
            state: s.state,
            restarts: s.restarts,
            tools: registry.plugin_tools(&self.spec.name),
            dir: self.spec.dir.display().to_string(),
            uptime: s.ready_at.map(|t| t.elapsed()),
            last_exit: s.last_exit.clone(),
            reason: s.reason.clone(),
            version: self.spec.version.clone(),
            sdk: s.sdk.clone(),
            startup: s.startup.filter(|_| s.state == PluginState::Ready),
        }
    }

    fn set_state(&self, state: PluginState, reason: impl Into<String>) {
        let mut s = self.status.lock().unwrap();
        s.state = state;
        s.reason = reason.into();
        if state != PluginState::Ready {
            s.ready_at = None;
        }
    }

    /// Waits up to `wait` for a registered session. Failed or stopped plugins are
    /// refused at once.
    async fn ready_session(&self, tool: &str, wait: Duration) -> Result<Arc<Session>, CallError> {
        let mut rx = self.session.subscribe();
        if let Some(s) = rx.borrow().clone() {
            return Ok(s);
        }
        let not_ready = |reason: String| CallError::NotReady {
            plugin: self.spec.name.clone(),
            tool: tool.into(),
            reason,
        };
        {
            let s = self.status.lock().unwrap();
            if matches!(s.state, PluginState::Failed | PluginState::Stopped) {
                return Err(not_ready(state_reason(&s)));
            }
        }
        let ready = tokio::time::timeout(wait, rx.wait_for(|s| s.is_some()))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|s| s.clone()));
        match ready {
            Some(s) => Ok(s),
            None => {
                let s = self.status.lock().unwrap();
                Err(not_ready(format!(
                    "still not ready after {} ms ({})",
                    wait.as_millis(),
                    state_reason(&s)
                )))
            }
        }
    }

    /// The supervision loop: spawn, watch, restart, until told to stop.
    async fn run(
        self: Arc<Self>,
        config: Arc<SupervisorConfig>,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) {
        let name = self.spec.name.clone();
        let mut backoff = INITIAL_BACKOFF;
        loop {
            let token = random_token();
            let generation = {
                let mut s = self.status.lock().unwrap();
                s.generation += 1;
                s.token = token.clone();
                s.attached = false;
                s.state = PluginState::Starting;
                s.reason = String::new();
                s.generation
            };
            let spawned = process::spawn(&self.spec, &config.interpreters, &config.addr, &token);
            let mut child = match spawned {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(plugin = %name, "{e}");
                    self.status.lock().unwrap().last_exit = e.to_string();
                    self.set_state(PluginState::Backoff, format!("spawn failed: {e}"));
                    match wait_backoff(&mut control, backoff).await {
                        Some(Control::Stop) | None => break,
                        _ => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            let pid = child.id().unwrap_or(0);
            {
                let mut s = self.status.lock().unwrap();
                s.pid = pid;
                s.spawned_at = Some(Instant::now());
                s.startup = None;
            }
            tracing::info!(plugin = %name, pid, runtime = self.spec.runtime.as_str(), "spawned");
            for (stream, reader) in [
                (
                    "stdout",
                    child
                        .stdout
                        .take()
                        .map(|r| Box::new(r) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
                ),
                (
                    "stderr",
                    child
                        .stderr
                        .take()
                        .map(|r| Box::new(r) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
                ),
            ] {
                if let Some(reader) = reader {
                    tokio::spawn(process::capture(
                        reader,
                        name.clone(),
                        stream,
                        self.logs.clone(),
                    ));
                }
            }

            let startup_deadline =
                tokio::time::Instant::now() + Duration::from_secs_f64(self.spec.startup_timeout_s);
            let mut registered = false;
            let mut startup_expired = false;
            let mut kill_at: Option<tokio::time::Instant> = None;
            let mut requested: Option<Control> = None;
            let mut killed_because: Option<String> = None;
            let exit = loop {
                tokio::select! {
                    status = child.wait() => break status,
                    _ = tokio::time::sleep_until(startup_deadline), if !registered && !startup_expired => {
                        startup_expired = true;
                        let why = format!("did not register within {} s", self.spec.startup_timeout_s);
                        tracing::error!(plugin = %name, pid, "{why}; killing it");
                        killed_because = Some(why);
                        process::signal_group(pid, libc::SIGKILL);
                    }
                    _ = tokio::time::sleep_until(kill_at.unwrap_or(startup_deadline)), if kill_at.is_some() => {
                        kill_at = None;
                        tracing::warn!(plugin = %name, pid, "process outlived its session; killing it");
                        killed_because = Some("closed its session".into());
                        process::signal_group(pid, libc::SIGKILL);
                    }
                    ctl = control.recv() => match ctl {
                        Some(Control::Ready(g)) if g == generation => {
                            registered = true;
                            if kill_at.is_none() {
                                let mut s = self.status.lock().unwrap();
                                s.state = PluginState::Ready;
                                s.ready_at = Some(Instant::now());
                                s.startup = s.spawned_at.map(|t| t.elapsed());
                            }
                        }
                        Some(Control::SessionEnded(g)) if g == generation => {
                            kill_at = Some(tokio::time::Instant::now() + SESSION_LOSS_KILL_AFTER);
                        }
                        Some(Control::Ready(_)) | Some(Control::SessionEnded(_)) => {}
                        Some(c @ (Control::Restart | Control::Stop)) => {
                            requested = Some(c);
                            break self.stop_child(&mut child, pid, config.shutdown_grace).await;
                        }
                        None => {
                            requested = Some(Control::Stop);
                            break self.stop_child(&mut child, pid, config.shutdown_grace).await;
                        }
                    },
                }
            };
            // Whatever the plugin left in its group (grandchildren) goes too.
            process::signal_group(pid, libc::SIGKILL);
            let exit = match exit {
                Ok(status) => process::describe_exit(status),
                Err(e) => format!("wait failed: {e}"),
            };
            let uptime = self.status.lock().unwrap().ready_at.map(|t| t.elapsed());
            let reason = match (&requested, killed_because) {
                (Some(Control::Stop), _) => "was stopped".to_string(),
                (Some(_), _) => "is restarting on request".to_string(),
                (None, Some(why)) => format!("{why} ({exit}); restarting"),
                (None, None) => format!("exited with {exit}; restarting"),
            };
            self.session.send_replace(None);
            let live = {
                let mut s = self.status.lock().unwrap();
                s.pid = 0;
                s.last_exit = exit.clone();
                s.token = String::new();
                s.live.take()
            };
            if let Some(session) = live {
                session.close(&reason);
            }
            match requested {
                Some(Control::Stop) => {
                    tracing::info!(plugin = %name, "stopped ({exit})");
                    self.set_state(PluginState::Stopped, "");
                    break;
                }
                Some(_) => {
                    tracing::info!(plugin = %name, "restarting on request ({exit})");
                    self.status.lock().unwrap().restarts += 1;
                    backoff = INITIAL_BACKOFF;
                    continue;
                }
                None => {}
            }
            tracing::warn!(plugin = %name, "plugin {reason}");
            if uptime.is_some_and(|u| u >= HEALTHY_UPTIME) {
                backoff = INITIAL_BACKOFF;
            }
            {
                let mut s = self.status.lock().unwrap();
                s.restarts += 1;
                s.state = PluginState::Backoff;
                s.reason = format!("{exit}; restarting in {} ms", backoff.as_millis());
                s.ready_at = None;
            }
            match wait_backoff(&mut control, backoff).await {
                Some(Control::Stop) | None => {
                    self.set_state(PluginState::Stopped, "");
                    break;
                }
                Some(Control::Restart) => backoff = INITIAL_BACKOFF,
                _ => backoff = (backoff * 2).min(MAX_BACKOFF),
            }
        }
    }

    /// `Shutdown` on the stream, then SIGTERM to the group after `grace`, then
    /// SIGKILL after [`TERM_GRACE`].
    async fn stop_child(
        &self,
        child: &mut tokio::process::Child,
        pid: u32,
        grace: Duration,
    ) -> std::io::Result<std::process::ExitStatus> {
        self.set_state(PluginState::Stopping, "");
        self.session.send_replace(None);
        let live = self.status.lock().unwrap().live.clone();
        if let Some(session) = live {
            session.try_send(HostMsg::Shutdown(Shutdown {
                grace_ms: grace.as_millis() as u32,
                reason: "broker stopping the plugin".into(),
            }));
        }
        if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
            return status;
        }
        tracing::warn!(plugin = %self.spec.name, pid, "did not exit within {} ms of Shutdown; SIGTERM", grace.as_millis());
        process::signal_group(pid, libc::SIGTERM);
        if let Ok(status) = tokio::time::timeout(TERM_GRACE, child.wait()).await {
            return status;
        }
        tracing::warn!(plugin = %self.spec.name, pid, "did not exit after SIGTERM; SIGKILL");
        process::signal_group(pid, libc::SIGKILL);
        child.wait().await
    }
}

fn state_reason(s: &Inner) -> String {
    let state = s
        .state
        .as_str_name()
        .trim_start_matches("PLUGIN_STATE_")
        .to_lowercase();
    match (s.reason.is_empty(), s.last_exit.is_empty()) {
        (false, _) => format!("{state}: {}", s.reason),
        (true, false) => format!("{state}, last exit: {}", s.last_exit),
        (true, true) => state,
    }
}

/// Sleeps `delay` unless a Stop or Restart arrives first (returned).
async fn wait_backoff(
    control: &mut mpsc::UnboundedReceiver<Control>,
    delay: Duration,
) -> Option<Control> {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return Some(Control::Ready(0)),
            ctl = control.recv() => match ctl {
                Some(c @ (Control::Stop | Control::Restart)) => return Some(c),
                Some(_) => {}
                None => return None,
            }
        }
    }
}

/// A plugin directory that could not be loaded, shown as `failed` in listings.
#[derive(Debug, Clone)]
struct LoadError {
    name: String,
    dir: String,
    reason: String,
}

/// All plugins of the broker.
pub struct Supervisor {
    config: Arc<SupervisorConfig>,
    registry: Arc<Registry>,
    plugins: RwLock<Vec<Arc<Plugin>>>,
    load_errors: Mutex<Vec<LoadError>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor with no plugins yet.
    pub fn new(config: SupervisorConfig, registry: Arc<Registry>) -> Supervisor {
        Supervisor {
            config: Arc::new(config),
            registry,
            plugins: RwLock::new(Vec::new()),
            load_errors: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// The tool registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Loads the plugin in `dir` and starts supervising it. A directory that cannot
    /// be loaded (bad manifest, duplicate name) is logged and listed as failed; it
    /// never stops the broker.
    pub fn load(&self, dir: &std::path::Path) -> Result<Arc<Plugin>, String> {
        let fail = |name: String, reason: String| {
            tracing::error!(plugin = %name, "not loaded: {reason}");
            self.load_errors.lock().unwrap().push(LoadError {
                name,
                dir: dir.display().to_string(),
                reason: reason.clone(),
            });
            Err(reason)
        };
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let spec = match PluginSpec::load(dir) {
            Ok(s) => s,
            Err(e) => return fail(dir_name, e.to_string()),
        };
        let mut plugins = self.plugins.write().unwrap();
        if let Some(other) = plugins.iter().find(|p| p.spec.name == spec.name) {
            let reason = format!(
                "plugin name `{}` is already used by {}",
                spec.name,
                other.spec.dir.display()
            );
            drop(plugins);
            return fail(spec.name, reason);
        }
        let (control, control_rx) = mpsc::unbounded_channel();
        let plugin = Arc::new(Plugin {
            spec,
            status: Mutex::new(Inner {
                state: PluginState::Starting,
                pid: 0,
                restarts: 0,
                token: String::new(),
                generation: 0,
                attached: false,
                ready_at: None,
                spawned_at: None,
                startup: None,
                last_exit: String::new(),
                reason: String::new(),
                sdk: String::new(),
                live: None,
            }),
            session: watch::Sender::new(None),
            control,
            logs: Arc::new(LogRing::default()),
        });
        plugins.push(plugin.clone());
        let task = tokio::spawn(plugin.clone().run(self.config.clone(), control_rx));
        self.tasks.lock().unwrap().push(task);
        Ok(plugin)
    }

    /// The plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins
            .read()
            .unwrap()
            .iter()
            .find(|p| p.spec.name == name)
            .cloned()
    }

    /// Every plugin (including directories that failed to load), in load order.
    pub fn snapshots(&self) -> Vec<PluginSnapshot> {
        let mut out: Vec<_> = self
            .plugins
            .read()
            .unwrap()
            .iter()
            .map(|p| p.snapshot(&self.registry))
            .collect();
        out.extend(
            self.load_errors
                .lock()
                .unwrap()
                .iter()
                .map(|e| PluginSnapshot {
                    name: e.name.clone(),
                    runtime: String::new(),
                    pid: 0,
                    state: PluginState::Failed,
                    restarts: 0,
                    tools: vec![],
                    dir: e.dir.clone(),
                    uptime: None,
                    last_exit: String::new(),
                    reason: e.reason.clone(),
                    version: String::new(),
                    sdk: String::new(),
                    startup: None,
                }),
        );
        out
    }

    /// Routes one tool call: looks the tool up, validates `args_json` against its
    /// schema (without calling the plugin on a violation), waits for a restarting
    /// plugin up to `restart_wait`, and calls it with the timeout `timeout` (else the
    /// tool's `ai.tool` timeout, else the plugin's `call_timeout_s`).
    pub async fn call_tool(
        &self,
        name: &str,
        args_json: &str,
        timeout: Option<Duration>,
        sender: Option<Sender>,
    ) -> Result<(String, ToolResult), CallError> {
        let tool = self
            .registry
            .get(name)
            .ok_or_else(|| CallError::UnknownTool { tool: name.into() })?;
        let invalid = |message: String| CallError::InvalidArguments {
            tool: name.into(),
            message,
        };
        let args_text = if args_json.trim().is_empty() {
            "{}"
        } else {
            args_json
        };
        let args: serde_json::Value = serde_json::from_str(args_text)
            .map_err(|e| invalid(format!("arguments are not valid JSON: {e}")))?;
        if !args.is_object() {
            return Err(invalid(format!(
                "arguments must be a JSON object, got {args}"
            )));
        }
        tool.schema.validate(&args).map_err(invalid)?;
        let plugin = self
            .plugin(&tool.plugin)
            .ok_or_else(|| CallError::UnknownTool { tool: name.into() })?;
        let session = plugin.ready_session(name, self.config.restart_wait).await?;
        let timeout = timeout.unwrap_or_else(|| {
            let policy = tool
                .ai_tool
                .as_ref()
                .map(|a| a.timeout_s)
                .filter(|t| *t > 0.0);
            Duration::from_secs_f64(policy.unwrap_or(plugin.spec.call_timeout_s))
        });
        let result = session
            .invoke(name, args_text.to_string(), sender, timeout)
            .await?;
        Ok((tool.plugin.clone(), result))
    }

    /// Restarts `name` (also a failed one) and waits until it registered again or
    /// its startup timeout passed.
    pub async fn restart(&self, name: &str) -> Result<PluginSnapshot, PluginError> {
        let plugin = self
            .plugin(name)
            .ok_or_else(|| PluginError::Unknown(name.into()))?;
        let generation = plugin.status.lock().unwrap().generation;
        let mut rx = plugin.session.subscribe();
        plugin
            .control
            .send(Control::Restart)
            .map_err(|_| PluginError::Failed {
                plugin: name.into(),
                what: "its supervisor has stopped".into(),
            })?;
        let wait = Duration::from_secs_f64(plugin.spec.startup_timeout_s)
            + self.config.shutdown_grace
            + TERM_GRACE;
        let fresh = rx.wait_for(|s| s.as_ref().is_some_and(|s| s.generation() > generation));
        let ready = tokio::time::timeout(wait, fresh)
            .await
            .map(|r| r.is_ok())
            .unwrap_or(false);
        match ready {
            true => Ok(plugin.snapshot(&self.registry)),
            false => {
                let s = plugin.status.lock().unwrap();
                Err(PluginError::Failed {
                    plugin: name.into(),
                    what: format!(
                        "not ready {} ms after restart ({})",
                        wait.as_millis(),
                        state_reason(&s)
                    ),
                })
            }
        }
    }

    /// Stops every plugin (Shutdown, grace, SIGTERM, SIGKILL of each group) and
    /// waits for their supervision tasks.
    pub async fn shutdown(&self) {
        for p in self.plugins.read().unwrap().iter() {
            let _ = p.control.send(Control::Stop);
        }
        let tasks: Vec<_> = self.tasks.lock().unwrap().drain(..).collect();
        for t in tasks {
            let _ = t.await;
        }
    }

    /// Accepts a plugin's `Attach`: checks `token` against the plugins' current spawn
    /// tokens and starts the session task. Errors: UNAUTHENTICATED for a missing,
    /// wrong, stale or already used token.
    pub fn attach(
        self: &Arc<Self>,
        token: &str,
        inbound: Streaming<PluginMessage>,
    ) -> Result<mpsc::Receiver<Result<HostMessage, Status>>, Status> {
        let found = self.plugins.read().unwrap().iter().find_map(|p| {
            let mut s = p.status.lock().unwrap();
            if s.token.is_empty() || !same_secret(&s.token, token) {
                return None;
            }
            if s.attached {
                return Some(Err(Status::unauthenticated(format!(
                    "plugin {}: this spawn token already has a session",
                    p.spec.name
                ))));
            }
            s.attached = true;
            Some(Ok((p.clone(), s.generation)))
        });
        let (plugin, generation) = match found {
            Some(r) => r?,
            None => {
                return Err(Status::unauthenticated(
                    "x-hearth-token does not match any plugin the broker started (wrong or stale token)",
                ))
            }
        };
        let (tx, rx) = mpsc::channel(1024);
        let sup = self.clone();
        tokio::spawn(async move { sup.session_task(plugin, generation, inbound, tx).await });
        Ok(rx)
    }

    async fn session_task(
        self: Arc<Self>,
        plugin: Arc<Plugin>,
        generation: u64,
        mut inbound: Streaming<PluginMessage>,
        out: Outbound,
    ) {
        let name = plugin.spec.name.clone();
        let handshake_wait = Duration::from_secs_f64(plugin.spec.startup_timeout_s);
        let refuse = |status: Status| {
            tracing::error!(plugin = %name, "session refused: {}", status.message());
            let out = out.clone();
            async move {
                let _ = out.send(Err(status)).await;
            }
        };
        let hello = match next_message(&mut inbound, handshake_wait).await {
            Ok(PluginMsg::Hello(h)) => h,
            Ok(_) => {
                return refuse(Status::failed_precondition(
                    "the first message must be Hello",
                ))
                .await
            }
            Err(e) => {
                return refuse(Status::failed_precondition(format!(
                    "expected Hello, got {e}"
                )))
                .await
            }
        };
        let major = hello.protocol_version.split('.').next().unwrap_or("");
        let ours = hearth_proto::PROTOCOL_VERSION
            .split('.')
            .next()
            .unwrap_or("");
        if major != ours {
            let reason = format!(
                "protocol version `{}` is not supported; this broker speaks {}",
                hello.protocol_version,
                hearth_proto::PROTOCOL_VERSION
            );
            tracing::error!(plugin = %name, sdk = %hello.sdk, "{reason}");
            let _ = out
                .send(Ok(HostMessage {
                    msg: Some(HostMsg::Rejected(Rejected {
                        reason,
                        items: vec![],
                    })),
                }))
                .await;
            return;
        }
        let register = match next_message(&mut inbound, handshake_wait).await {
            Ok(PluginMsg::Register(r)) => r,
            Ok(_) => {
                return refuse(Status::failed_precondition(
                    "the second message must be Register",
                ))
                .await
            }
            Err(e) => {
                return refuse(Status::failed_precondition(format!(
                    "expected Register, got {e}"
                )))
                .await
            }
        };
        if let Some(info) = register
            .plugin
            .as_ref()
            .filter(|i| !i.name.is_empty() && i.name != name)
        {
            tracing::debug!(plugin = %name, "plugin calls itself `{}`; known as `{name}`", info.name);
        }
        let reg =
            self.registry
                .replace_plugin_tools(&name, &register.tools, register.all_or_nothing);
        for item in &reg.rejected {
            tracing::error!(plugin = %name, tool = %item.name, "tool rejected: {}", item.reason);
        }
        if register.all_or_nothing && !reg.rejected.is_empty() {
            let reason = format!(
                "{} item(s) rejected and the plugin asked for all-or-nothing",
                reg.rejected.len()
            );
            let _ = out
                .send(Ok(HostMessage {
                    msg: Some(HostMsg::Rejected(Rejected {
                        reason,
                        items: reg.rejected,
                    })),
                }))
                .await;
            return;
        }
        let session = Arc::new(Session::new(name.clone(), generation, out.clone()));
        {
            let mut s = plugin.status.lock().unwrap();
            if s.generation != generation {
                return; // a newer spawn replaced this one
            }
            s.sdk = format!("{} {}", hello.sdk, hello.sdk_version)
                .trim()
                .to_string();
            s.live = Some(session.clone());
        }
        let features: Vec<String> = hello
            .features
            .iter()
            .filter(|f| ["cancel", "progress"].contains(&f.as_str()))
            .cloned()
            .collect();
        let registered = HostMsg::Registered(Registered {
            plugin: name.clone(),
            tools: reg.accepted.clone(),
            rejected: reg.rejected,
            protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
            features,
        });
        if !session.send(registered).await {
            return;
        }
        plugin.session.send_replace(Some(session.clone()));
        let _ = plugin.control.send(Control::Ready(generation));
        tracing::info!(plugin = %name, sdk = %hello.sdk, tools = ?reg.accepted, "registered");

        let ended = loop {
            match inbound.message().await {
                Ok(Some(PluginMessage { msg: Some(m) })) => self.on_message(&plugin, &session, m),
                Ok(Some(_)) => {}
                Ok(None) => break "closed its session".to_string(),
                Err(s) => break format!("session failed: {}", s.message()),
            }
        };
        tracing::debug!(plugin = %name, generation, "session ended: {ended}");
        plugin.session.send_if_modified(|s| match s {
            Some(cur) if cur.generation() == generation => {
                *s = None;
                true
            }
            _ => false,
        });
        let _ = plugin.control.send(Control::SessionEnded(generation));
        // The process watcher fails the calls with the exit status if the process
        // exits meanwhile; a process that lives on loses them with this reason.
        tokio::time::sleep(Duration::from_secs(1)).await;
        session.close(&ended);
    }

    fn on_message(&self, plugin: &Plugin, session: &Session, msg: PluginMsg) {
        match msg {
            PluginMsg::ToolResult(r) => session.complete(r),
            PluginMsg::Pong(_) => {}
            PluginMsg::Progress(p) => {
                tracing::debug!(plugin = %plugin.spec.name, call_id = p.call_id, "progress: {}", p.message)
            }
            PluginMsg::RegisterTool(r) => {
                let name = r.tool.as_ref().map(|t| t.name.clone()).unwrap_or_default();
                let outcome = match &r.tool {
                    Some(t) => self.registry.add_tool(&plugin.spec.name, t),
                    None => Err("RegisterTool without a tool".into()),
                };
                answer_registration(plugin, session, r.request_id, name, outcome);
            }
            PluginMsg::UnregisterTool(u) => {
                let outcome = self.registry.remove_tool(&plugin.spec.name, &u.name);
                answer_registration(plugin, session, u.request_id, u.name, outcome);
            }
            other => tracing::warn!(
                plugin = %plugin.spec.name,
                "unexpected message on an established session: {:?}",
                std::mem::discriminant(&other)
            ),
        }
    }
}

/// The next handshake message, within `wait`.
async fn next_message(
    inbound: &mut Streaming<PluginMessage>,
    wait: Duration,
) -> Result<PluginMsg, String> {
    match tokio::time::timeout(wait, inbound.message()).await {
        Ok(Ok(Some(PluginMessage { msg: Some(m) }))) => Ok(m),
        Ok(Ok(Some(_))) => Err("an empty message".to_string()),
        Ok(Ok(None)) => Err("end of stream".to_string()),
        Ok(Err(s)) => Err(format!("stream error: {}", s.message())),
        Err(_) => Err(format!("nothing within {} s", wait.as_secs_f64())),
    }
}

fn answer_registration(
    plugin: &Plugin,
    session: &Session,
    request_id: String,
    name: String,
    outcome: Result<(), String>,
) {
    if let Err(e) = &outcome {
        tracing::error!(plugin = %plugin.spec.name, tool = %name, "run-time registration refused: {e}");
    }
    session.try_send(HostMsg::ToolRegistration(ToolRegistration {
        request_id,
        name,
        ok: outcome.is_ok(),
        error: outcome.err().unwrap_or_default(),
    }));
}
