//! One supervised plugin: its state, and the task that owns its processes — spawn,
//! watch, restart with backoff inside a crash budget, hung detection, drain,
//! side-by-side reload, processes attached by hand, polite-then-firm stop.
//!
//! The plugin task (`Plugin::run`) decides; each spawned process has a watcher task
//! that owns the child (startup deadline, hung and session-loss kills, drain and stop
//! on request) and reports its end as `Control::Exited`. So a plugin may have several
//! processes at once: the current one, a reload's new version started beside it, old
//! ones draining — and, instead of its own, a process started by hand that attached
//! with a one-time token (`hearth plugins attach-token`).
//!
//! Every process or attached connection is an `Instance` with its own generation and
//! session token. Calls go to the one published session (`Plugin::ready_session`); a
//! reload publishes the new version's session only once it registered, so until then
//! (and for good if it fails) the old version serves.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use hearth_proto::v1::{host_message::Msg as HostMsg, PluginState, Shutdown};
use tokio::sync::{mpsc, oneshot, watch};

use super::process::{self, LogRing, ProcessTail};
use super::sandbox::SandboxState;
use super::session::Session;
use super::SupervisorConfig;
use crate::error::{CallError, Target};
use crate::manifest::{McpTransport, PluginSpec, RestartPolicy, Runtime};
use crate::mcp::host::{Hooks, Io, McpLink};
use crate::registry::Registry;

/// A run this long resets the backoff: the next crash restarts after the initial delay.
pub const HEALTHY_UPTIME: Duration = Duration::from_secs(30);
/// How long a process may live on after its session ended before it is killed.
const SESSION_LOSS_KILL_AFTER: Duration = Duration::from_secs(2);
/// Wait after SIGTERM before SIGKILL.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(2);
/// Output lines quoted in a `failed` plugin's reason.
const REASON_LINES: usize = 5;
/// How long the stderr of an ended process may still be read for its reason line.
const STDERR_FLUSH: Duration = Duration::from_millis(500);

/// Why the process an operation waits for (a load's first, a reload's new version)
/// does not serve.
#[derive(Debug, Clone)]
pub(crate) enum NotServing {
    /// It ended or its session was refused before it registered; the text names the
    /// exit status and the line of its stderr that says why.
    Failed(String),
    /// A newer operation (reload, restart, attach, unload) replaced it.
    Superseded(String),
}

/// Answers an operation waiting for one process: `Ok` once it registered.
pub(crate) type Outcome = oneshot::Sender<Result<(), NotServing>>;

/// Messages to a plugin's supervision task.
#[derive(Debug)]
pub(crate) enum Control {
    /// The session of this generation registered (and is published).
    Ready(u64),
    /// The session of this generation ended.
    SessionEnded(u64),
    /// The session of this generation was refused before it registered.
    Refused { generation: u64, why: String },
    /// The session of this generation answered no ping for `silent`.
    Hung { generation: u64, silent: Duration },
    /// The process of this generation ended.
    Exited { generation: u64, end: ProcessEnd },
    /// Stop the process (draining calls in flight) and start it again; revives a
    /// failed plugin.
    Restart,
    /// Start the new spec (new code, same name) beside the serving process and switch
    /// to it once it registered; `done` hears how it went. `rebuild`: run the manifest's
    /// build step whatever the mtime rule says (an explicit reload).
    Reload {
        spec: Arc<PluginSpec>,
        done: Option<Outcome>,
        rebuild: bool,
    },
    /// Drain and stop for good.
    Stop,
}

/// Where an instance's process comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The supervisor spawned it.
    Spawned,
    /// Started by hand, attached with a one-time token: never restarted by us.
    Attached,
}

/// One process (or attached connection) of a plugin that may hold a session.
#[derive(Debug)]
pub(crate) struct Instance {
    pub(crate) generation: u64,
    pub(crate) origin: Origin,
    /// Its session token: the spawn token, or the redeemed attach token.
    pub(crate) token: String,
    /// The token has a session already (a token serves one session).
    pub(crate) connected: bool,
    /// Being stopped or replaced: its session is never published.
    pub(crate) retiring: bool,
    /// Its pid (an attached one's from the socket's peer credentials); 0 if unknown.
    pub(crate) pid: u32,
    pub(crate) started: Instant,
    pub(crate) sandbox: SandboxState,
    pub(crate) sdk: String,
    /// Its session once it registered.
    pub(crate) live: Option<Arc<Session>>,
    /// Items of its registration the broker rejected.
    pub(crate) rejected: Vec<hearth_proto::v1::RejectedItem>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) state: PluginState,
    pub(crate) restarts: u32,
    /// The last generation handed out.
    pub(crate) generation: u64,
    /// Generation of the supervised process in charge (0: none).
    pub(crate) current: u64,
    /// Generation whose session is published (0: none).
    pub(crate) serving: u64,
    pub(crate) ready_at: Option<Instant>,
    pub(crate) startup: Option<Duration>,
    pub(crate) last_exit: String,
    pub(crate) reason: String,
    pub(crate) sdk: String,
    /// Items of the serving process's registration the broker rejected.
    pub(crate) rejected: Vec<hearth_proto::v1::RejectedItem>,
    /// How the current (or last) process is confined.
    pub(crate) sandbox: SandboxState,
    pub(crate) instances: Vec<Instance>,
}

impl Inner {
    pub(crate) fn instance(&self, generation: u64) -> Option<&Instance> {
        self.instances
            .iter()
            .find(|i| i.generation == generation && generation != 0)
    }

    pub(crate) fn instance_mut(&mut self, generation: u64) -> Option<&mut Instance> {
        self.instances
            .iter_mut()
            .find(|i| i.generation == generation && generation != 0)
    }

    /// The instance whose session token is `token`.
    pub(crate) fn by_token(&self, token: &str) -> Option<&Instance> {
        self.instances
            .iter()
            .find(|i| !i.token.is_empty() && super::same_secret(&i.token, token))
    }

    /// The instance `plugins list` shows: the serving one, else the current one.
    fn shown(&self) -> Option<&Instance> {
        self.instance(self.serving)
            .or_else(|| self.instance(self.current))
    }

    /// True while a process attached by hand serves the plugin.
    pub(crate) fn attached(&self) -> bool {
        self.instance(self.serving)
            .is_some_and(|i| i.origin == Origin::Attached)
    }

    fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }
}

/// One supervised plugin.
pub struct Plugin {
    name: String,
    spec: RwLock<Arc<PluginSpec>>,
    /// Ad hoc: no folder of this name is loaded; the plugin exists for a process that
    /// attached by hand and goes when it disconnects.
    adhoc: bool,
    pub(crate) status: Mutex<Inner>,
    /// The registered session, published for callers; only the supervisor writes it,
    /// and callers reach it through [`Plugin::ready_session`].
    pub(super) session: watch::Sender<Option<Arc<Session>>>,
    pub(crate) control: mpsc::UnboundedSender<Control>,
    logs: Arc<LogRing>,
    registry: Arc<Registry>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// What is known of its MCP server (`"runtime": "mcp"`); empty for others.
    mcp: Arc<McpLink>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin").field("name", &self.name).finish()
    }
}

/// A plugin's status as `plugins list` shows it.
#[derive(Debug, Clone)]
pub struct PluginSnapshot {
    /// Plugin name.
    pub name: String,
    /// `python`, `node`, `exec`, `-` for an ad-hoc attached plugin, or empty when
    /// the manifest did not load.
    pub runtime: String,
    /// Current pid, 0 when none (or unknown for an attached process).
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
    /// Why the plugin is not ready, when it is not; why its last reload failed while
    /// the previous version serves.
    pub reason: String,
    /// Manifest version.
    pub version: String,
    /// SDK the plugin reported in `Hello`.
    pub sdk: String,
    /// Spawn to registered of the current process.
    pub startup: Option<Duration>,
    /// How its process is confined.
    pub sandbox: SandboxState,
    /// Served by a process started by hand (`hearth plugins attach-token`).
    pub attached: bool,
    /// Items of its current registration the broker rejected (e.g. a tool name another
    /// plugin registered first), each naming why.
    pub rejected: Vec<hearth_proto::v1::RejectedItem>,
}

/// A fresh random secret (session and attach tokens): 24 bytes, hex.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The restart delays of `policy`: exponential with jitter, capped at its maximum.
fn backoff(policy: &RestartPolicy) -> Box<dyn Iterator<Item = Duration> + Send> {
    let max = policy.backoff_max;
    Box::new(
        backon::ExponentialBuilder::default()
            .with_min_delay(policy.backoff_initial)
            .with_max_delay(max)
            .with_jitter()
            .without_max_times()
            .build()
            .map(move |d| d.min(max)),
    )
}

/// How one process of the plugin ended.
#[derive(Debug)]
pub(crate) struct ProcessEnd {
    exit: String,
    /// Why the watcher killed it, if it did on its own.
    killed_because: Option<String>,
    /// Time from its registration to its end; `None` if it never registered.
    uptime: Option<Duration>,
    /// The line of its stderr that says why it ended.
    why: Option<String>,
    /// Its build step failed (it never started): the plugin fails at once, with no
    /// restart loop (see [`super::build`]).
    build_failed: bool,
}

impl ProcessEnd {
    /// The end of a process that could not be started (`exit` says why).
    fn never_started(exit: String) -> ProcessEnd {
        ProcessEnd {
            exit,
            killed_because: None,
            uptime: None,
            why: None,
            build_failed: false,
        }
    }

    /// The end of a process whose build step failed: `exit` says how ("build failed
    /// (exit status 1)"), `why` is the build's error line.
    fn build_failed(exit: String, why: Option<String>) -> ProcessEnd {
        ProcessEnd {
            exit,
            killed_because: None,
            uptime: None,
            why,
            build_failed: true,
        }
    }

    /// "exited with exit status 1", "did not register within 2 s (signal 9 (SIGKILL))".
    fn reason(&self) -> String {
        match &self.killed_because {
            Some(why) => format!("{why} ({})", self.exit),
            // "ended with exit status 1", "ended with signal 9 (SIGKILL)".
            None => format!("ended with {}", self.exit),
        }
    }

    /// [`ProcessEnd::reason`], whether it had registered, and its stderr's why.
    fn detail(&self) -> String {
        if self.build_failed {
            return match &self.why {
                Some(why) => format!("{}: {why}", self.exit),
                None => self.exit.clone(),
            };
        }
        let mut text = self.reason();
        if self.uptime.is_none() && self.killed_because.is_none() {
            text.push_str(" before it registered");
        }
        if let Some(why) = &self.why {
            text.push_str(": ");
            text.push_str(why);
        }
        text
    }
}

pub(crate) fn state_reason(s: &Inner) -> String {
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

impl Plugin {
    /// A plugin for `spec`, not yet started; the receiver goes to [`Plugin::start`].
    /// `adhoc`: it has no folder and exists for a process attached by hand.
    pub(crate) fn new(
        spec: PluginSpec,
        registry: Arc<Registry>,
        adhoc: bool,
    ) -> (Arc<Plugin>, mpsc::UnboundedReceiver<Control>) {
        let (control, rx) = mpsc::unbounded_channel();
        let plugin = Arc::new(Plugin {
            name: spec.name.clone(),
            spec: RwLock::new(Arc::new(spec)),
            adhoc,
            status: Mutex::new(Inner {
                state: PluginState::Starting,
                restarts: 0,
                generation: 0,
                current: 0,
                serving: 0,
                ready_at: None,
                startup: None,
                last_exit: String::new(),
                reason: String::new(),
                sdk: String::new(),
                sandbox: SandboxState::Pending,
                instances: Vec::new(),
                rejected: Vec::new(),
            }),
            session: watch::Sender::new(None),
            control,
            logs: Arc::new(LogRing::default()),
            registry,
            task: Mutex::new(None),
            mcp: Arc::default(),
        });
        (plugin, rx)
    }

    /// Starts the supervision task; `first` hears whether the first process registered.
    pub(crate) fn start(
        self: &Arc<Self>,
        config: Arc<SupervisorConfig>,
        control: mpsc::UnboundedReceiver<Control>,
        first: Option<Outcome>,
    ) {
        let task = tokio::spawn(self.clone().run(config, control, first));
        *self.task.lock().unwrap() = Some(task);
    }

    /// Waits for the supervision task to end (after a `Stop`).
    pub(crate) async fn join(&self) {
        let task = self.task.lock().unwrap().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// The plugin's name (fixed for its lifetime, also across reloads).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its current spec from disk.
    pub fn spec(&self) -> Arc<PluginSpec> {
        self.spec.read().unwrap().clone()
    }

    /// True for a plugin that exists only for a process attached by hand.
    pub fn is_adhoc(&self) -> bool {
        self.adhoc
    }

    /// The pid of the process attached by hand that serves the plugin (0 if unknown),
    /// or `None` when none does.
    pub fn attached_pid(&self) -> Option<u32> {
        let s = self.status.lock().unwrap();
        s.attached()
            .then(|| s.instance(s.serving).map(|i| i.pid).unwrap_or(0))
    }

    /// Its output log.
    pub fn logs(&self) -> &Arc<LogRing> {
        &self.logs
    }

    /// Its MCP server's state and live connection (`"runtime": "mcp"` plugins).
    pub fn mcp(&self) -> &Arc<McpLink> {
        &self.mcp
    }

    /// Its supervisor state now.
    pub fn state(&self) -> PluginState {
        self.status.lock().unwrap().state
    }

    pub(crate) fn snapshot(&self) -> PluginSnapshot {
        let spec = self.spec();
        let s = self.status.lock().unwrap();
        let shown = s.shown();
        PluginSnapshot {
            name: self.name.clone(),
            runtime: if self.adhoc {
                "-".into()
            } else {
                spec.runtime.as_str().into()
            },
            pid: shown.map(|i| i.pid).unwrap_or(0),
            state: s.state,
            restarts: s.restarts,
            tools: self.registry.plugin_tools(&self.name),
            dir: spec.dir.display().to_string(),
            uptime: s.ready_at.map(|t| t.elapsed()),
            last_exit: s.last_exit.clone(),
            reason: s.reason.clone(),
            version: spec.version.clone(),
            sdk: s.sdk.clone(),
            startup: s.startup.filter(|_| s.state == PluginState::Ready),
            sandbox: s.sandbox.clone(),
            attached: s.attached(),
            rejected: s.rejected.clone(),
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

    /// Whether the instance `generation` may still serve (not retired, not gone).
    pub(crate) fn wants(&self, generation: u64) -> bool {
        self.status
            .lock()
            .unwrap()
            .instance(generation)
            .is_some_and(|i| !i.retiring)
    }

    /// Publishes the registered session of `generation`: calls go to it from now on.
    /// False when the plugin no longer wants that instance.
    pub(crate) fn publish(&self, generation: u64, session: &Arc<Session>) -> bool {
        let mut s = self.status.lock().unwrap();
        let Some(i) = s.instance(generation).filter(|i| !i.retiring) else {
            return false;
        };
        let (startup, sdk, sandbox) = (i.started.elapsed(), i.sdk.clone(), i.sandbox.clone());
        s.rejected = i.rejected.clone();
        s.state = PluginState::Ready;
        s.reason = String::new();
        s.serving = generation;
        s.ready_at = Some(Instant::now());
        s.startup = Some(startup);
        s.sdk = sdk;
        s.sandbox = sandbox;
        self.session.send_replace(Some(session.clone()));
        true
    }

    /// Takes the session of `generation` off the published slot, if it is there.
    pub(crate) fn unpublish(&self, generation: u64) {
        let mut s = self.status.lock().unwrap();
        if s.serving == generation {
            s.serving = 0;
            s.ready_at = None;
        }
        self.session.send_if_modified(|cur| match cur {
            Some(c) if c.generation() == generation => {
                *cur = None;
                true
            }
            _ => false,
        });
    }

    /// Adds an instance for a process started by hand that presented a redeemed attach
    /// token (`token`, peer `pid`); returns its generation.
    pub(crate) fn admit_attached(&self, token: &str, pid: Option<u32>) -> u64 {
        let mut s = self.status.lock().unwrap();
        let generation = s.next_generation();
        // A plugin whose supervision ended (unloaded) takes no one: its handshake is
        // refused.
        let stopped = s.state == PluginState::Stopped;
        s.instances.push(Instance {
            generation,
            origin: Origin::Attached,
            token: token.to_string(),
            connected: true,
            retiring: stopped,
            pid: pid.unwrap_or(0),
            started: Instant::now(),
            sandbox: SandboxState::Attached,
            sdk: String::new(),
            live: None,
            rejected: Vec::new(),
        });
        generation
    }

    /// The session calls go to now, if the plugin is ready.
    pub fn serving_session(&self) -> Option<Arc<Session>> {
        self.session.borrow().clone()
    }

    /// Watches the published session: `Some` while the plugin is ready (a new value at
    /// each registration of a new process), `None` while it is not.
    pub fn watch_session(&self) -> watch::Receiver<Option<Arc<Session>>> {
        self.session.subscribe()
    }

    /// Waits up to `wait` for a registered session to call `target` on. Failed and
    /// stopped plugins are refused at once.
    pub(crate) async fn ready_session(
        &self,
        target: &Target,
        wait: Duration,
    ) -> Result<Arc<Session>, CallError> {
        let mut rx = self.session.subscribe();
        if let Some(s) = rx.borrow().clone() {
            return Ok(s);
        }
        let not_ready = |reason: String| CallError::NotReady {
            plugin: self.name.clone(),
            target: target.clone(),
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

    /// Waits until the published session is no longer generation `stale` (the old
    /// one closed: cleared, or replaced by the next process), at most until `until`.
    pub(crate) async fn session_replaced(&self, stale: u64, until: tokio::time::Instant) {
        let mut rx = self.session.subscribe();
        let _ = tokio::time::timeout_at(
            until,
            rx.wait_for(|s| s.as_ref().is_none_or(|s| s.generation() != stale)),
        )
        .await;
    }

    /// The supervision loop: spawn, watch, restart within the crash budget, reload
    /// beside the serving process, make room for attached ones, until told to stop.
    async fn run(
        self: Arc<Self>,
        config: Arc<SupervisorConfig>,
        mut control: mpsc::UnboundedReceiver<Control>,
        first: Option<Outcome>,
    ) {
        let mut task = Task::new(self.clone(), config);
        if self.adhoc {
            self.set_state(
                PluginState::Starting,
                "waiting for the attached process to register",
            );
        } else {
            let generation = task.spawn_current(self.spec());
            if let Some(first) = first {
                task.waiters.push((generation, first));
            }
        }
        loop {
            let far = tokio::time::Instant::now() + Duration::from_secs(86_400);
            let ctl = tokio::select! {
                ctl = control.recv() => ctl.unwrap_or(Control::Stop),
                _ = tokio::time::sleep_until(task.backoff_until.unwrap_or(far)), if task.backoff_until.is_some() => {
                    task.backoff_until = None;
                    task.spawn_current(self.spec());
                    continue;
                }
            };
            task.handle(ctl);
            if task.finished() {
                return;
            }
        }
    }

    /// Spawns one process of `spec` (instance `generation`, session token `token`)
    /// and watches it until it ends; reports the end as [`Control::Exited`].
    async fn watch_process(
        self: Arc<Self>,
        config: Arc<SupervisorConfig>,
        spec: Arc<PluginSpec>,
        generation: u64,
        token: String,
        always_build: bool,
        mut cmds: mpsc::UnboundedReceiver<ProcCmd>,
    ) {
        let end = self
            .run_process(&spec, &config, generation, &token, always_build, &mut cmds)
            .await;
        let _ = self.control.send(Control::Exited { generation, end });
    }

    /// Why process `generation` starts, for the marker in its output log: `started`,
    /// `started (restart 2; last exit: exit status 1)`, or a reload's new version.
    fn start_cause(&self, generation: u64) -> String {
        let s = self.status.lock().unwrap();
        if s.current != generation {
            return "started (reload: the new version, beside the serving one)".into();
        }
        match (s.restarts, s.last_exit.as_str()) {
            (0, "") => "started".into(),
            (n, "") => format!("started (restart {n})"),
            (0, last) => format!("started (last exit: {last})"),
            (n, last) => format!("started (restart {n}; last exit: {last})"),
        }
    }

    async fn run_process(
        self: &Arc<Self>,
        spec: &PluginSpec,
        config: &SupervisorConfig,
        generation: u64,
        token: &str,
        always_build: bool,
        cmds: &mut mpsc::UnboundedReceiver<ProcCmd>,
    ) -> ProcessEnd {
        let name = &self.name;
        if spec.build.is_some() {
            // Only a stop can come before the process exists.
            let stop = async {
                while let Some(cmd) = cmds.recv().await {
                    if matches!(cmd, ProcCmd::Stop { .. }) {
                        return;
                    }
                }
            };
            let built =
                super::build::before_start(self, spec, config, generation, always_build, stop)
                    .await;
            match built {
                Ok(()) => {}
                Err(super::build::Failure::Stopped) => {
                    return ProcessEnd::never_started("stopped during its build".into())
                }
                Err(super::build::Failure::Failed { exit, why }) => {
                    return ProcessEnd::build_failed(exit, why)
                }
            }
        }
        let resolved;
        let spec = if spec.runtime == Runtime::Mcp {
            match self.resolve_mcp(spec, config).await {
                Ok(r) => {
                    resolved = r;
                    &resolved
                }
                Err(e) => {
                    tracing::error!(plugin = %name, "{e}");
                    return ProcessEnd::never_started(format!("cannot start: {e}"));
                }
            }
        } else {
            spec
        };
        if let Some(McpTransport::Http { url, .. }) = spec.mcp.as_ref().map(|m| &m.transport) {
            return self.run_remote(spec, url, generation, cmds).await;
        }
        let protected = config.protected.read().unwrap().clone();
        let launch = process::Launch {
            addr: &config.addr,
            token,
            data: config.plugin_data_dir(name),
            tmp: config.plugin_tmp_dir(name),
            protected: &protected,
        };
        // The pid is recorded on the spawner thread, before this task wakes: a plugin
        // can register (and Admin.RestartPlugin answer) before then.
        let record_pid = {
            let plugin = self.clone();
            move |pid| {
                if let Some(i) = plugin.status.lock().unwrap().instance_mut(generation) {
                    i.pid = pid;
                }
            }
        };
        let mut child = match process::spawn(spec, &config.interpreters, &launch, record_pid).await
        {
            Ok(spawned) => {
                match &spawned.sandbox {
                    SandboxState::OptedOut => {
                        tracing::warn!(plugin = %name, "runs without its sandbox: plugin.json says \"sandbox\": false")
                    }
                    state => {
                        tracing::debug!(plugin = %name, sandbox = %state, prepared_us = spawned.prepared_in.as_micros() as u64, "sandbox")
                    }
                }
                let mut s = self.status.lock().unwrap();
                if s.current == generation && s.serving == 0 {
                    s.sandbox = spawned.sandbox.clone();
                }
                if let Some(i) = s.instance_mut(generation) {
                    i.sandbox = spawned.sandbox;
                }
                spawned.child
            }
            Err(e) => {
                tracing::error!(plugin = %name, "{e}");
                return ProcessEnd::never_started(format!("spawn failed: {e}"));
            }
        };
        let pid = child.id().unwrap_or(0);
        config.reaper.track(pid);
        tracing::info!(plugin = %name, pid, generation, runtime = spec.runtime.as_str(), "spawned");
        self.logs
            .started(pid, generation, &self.start_cause(generation));
        let tail = Arc::new(ProcessTail::default());
        // An MCP server's stdout is its protocol channel; anything else's is its log.
        let mut _mcp_stop = None;
        if spec.runtime == Runtime::Mcp {
            if let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) {
                let (stop, stopped) = oneshot::channel();
                _mcp_stop = Some(stop);
                // Its end shows as the process's end (exit status, stderr).
                drop(self.start_mcp_session(spec, generation, Io::Stdio(stdout, stdin), stopped));
            }
        }
        if let Some(out) = child.stdout.take() {
            tokio::spawn(process::capture(
                out,
                name.clone(),
                "stdout",
                self.logs.clone(),
                None,
                pid,
                generation,
            ));
        }
        let stderr = child.stderr.take().map(|err| {
            tokio::spawn(process::capture(
                err,
                name.clone(),
                "stderr",
                self.logs.clone(),
                Some(tail.clone()),
                pid,
                generation,
            ))
        });

        let startup_deadline =
            tokio::time::Instant::now() + Duration::from_secs_f64(spec.startup_timeout_s);
        let mut registered_at: Option<Instant> = None;
        let mut startup_expired = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let mut killed_because: Option<String> = None;
        let kill = |why: String, killed_because: &mut Option<String>| {
            tracing::error!(plugin = %name, pid, "{why}; killing it");
            *killed_because = Some(why);
            process::signal_group(pid, libc::SIGKILL);
        };
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                _ = tokio::time::sleep_until(startup_deadline), if registered_at.is_none() && !startup_expired => {
                    startup_expired = true;
                    kill(format!("did not register within {} s", spec.startup_timeout_s), &mut killed_because);
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or(startup_deadline)), if kill_at.is_some() => {
                    kill_at = None;
                    kill("outlived its session".into(), &mut killed_because);
                }
                cmd = cmds.recv() => match cmd {
                    Some(ProcCmd::Registered) => registered_at = Some(Instant::now()),
                    Some(ProcCmd::SessionEnded) => {
                        kill_at = Some(tokio::time::Instant::now() + SESSION_LOSS_KILL_AFTER);
                    }
                    Some(ProcCmd::Hung(silent)) => {
                        kill(format!("answered no ping for {} ms (hung)", silent.as_millis()), &mut killed_because);
                    }
                    Some(ProcCmd::Stop { drain }) => {
                        break self.stop_process(&mut child, pid, generation, drain, config).await;
                    }
                    None => break self.stop_process(&mut child, pid, generation, true, config).await,
                },
            }
        };
        // Whatever the plugin left in its group (grandchildren) goes too.
        process::signal_group(pid, libc::SIGKILL);
        config.reaper.untrack(pid);
        // The last lines it wrote may still be in the pipe: they say why it ended.
        if let Some(stderr) = stderr {
            let _ = tokio::time::timeout(STDERR_FLUSH, stderr).await;
        }
        ProcessEnd {
            exit: match status {
                Ok(status) => process::describe_exit(status),
                Err(e) => format!("wait failed: {e}"),
            },
            killed_because,
            uptime: registered_at.map(|t| t.elapsed()),
            why: tail.why(),
            build_failed: false,
        }
    }

    /// `spec` with the references in its MCP `env` and `headers` resolved (see
    /// [`crate::mcp::resolve`]). Errors name the field and the reference.
    async fn resolve_mcp(
        &self,
        spec: &PluginSpec,
        config: &SupervisorConfig,
    ) -> Result<PluginSpec, String> {
        let mut spec = spec.clone();
        let headers = match spec.mcp.as_ref().map(|m| &m.transport) {
            Some(McpTransport::Http { headers, .. }) => headers.clone(),
            _ => Default::default(),
        };
        let keys = crate::mcp::setting_refs(spec.env.values().chain(headers.values()));
        let mut settings = std::collections::BTreeMap::new();
        if !keys.is_empty() {
            let store = config.settings.get().ok_or(
                "`${setting:…}` needs the settings store, which this broker has not opened",
            )?;
            let scope = crate::storage::Scope::Plugin(self.name.clone());
            for key in keys {
                match store.get(&scope, &key).await {
                    Ok(serde_json::Value::String(v)) => settings.insert(key, v),
                    Ok(serde_json::Value::Null) => None,
                    Ok(other) => settings.insert(key, other.to_string()),
                    Err(e) => return Err(format!("reading setting `{key}`: {e}")),
                };
            }
        }
        let env = |name: &str| std::env::var(name).ok();
        for (key, value) in spec.env.iter_mut() {
            *value = crate::mcp::resolve(value, &env, &settings)
                .map_err(|e| format!("plugin.json env {key}: {e}"))?;
        }
        if let Some(McpTransport::Http { headers, .. }) =
            spec.mcp.as_mut().map(|m| &mut m.transport)
        {
            for (key, value) in headers.iter_mut() {
                *value = crate::mcp::resolve(value, &env, &settings)
                    .map_err(|e| format!("plugin.json header {key}: {e}"))?;
            }
        }
        Ok(spec)
    }

    /// Starts the MCP session of instance `generation` over `io` (see
    /// [`crate::mcp::host`]): it registers like a gRPC session's handshake would, and
    /// reports to the plugin task the same way.
    fn start_mcp_session(
        self: &Arc<Self>,
        spec: &PluginSpec,
        generation: u64,
        io: Io,
        stop: oneshot::Receiver<()>,
    ) -> oneshot::Receiver<Option<String>> {
        let plugin = self.clone();
        let (p1, p2, p3) = (plugin.clone(), plugin.clone(), plugin.clone());
        let hooks = Hooks {
            publish: Box::new(move |session, sdk| {
                {
                    let mut s = p1.status.lock().unwrap();
                    let Some(i) = s.instance_mut(generation).filter(|i| !i.retiring) else {
                        return false;
                    };
                    i.connected = true;
                    i.sdk = sdk.to_string();
                    i.live = Some(session.clone());
                }
                if !p1.publish(generation, session) {
                    return false;
                }
                let _ = p1.control.send(Control::Ready(generation));
                let spec = p1.spec();
                tokio::spawn(super::handshake::heartbeat(
                    session.clone(),
                    p1.control.clone(),
                    generation,
                    spec.ping_interval,
                    spec.hung_timeout,
                ));
                true
            }),
            wants: Box::new(move || p2.wants(generation)),
            ended: Box::new(move || {
                p3.unpublish(generation);
                let _ = p3.control.send(Control::SessionEnded(generation));
            }),
        };
        let task = crate::mcp::host::run_session(
            Arc::new(spec.clone()),
            generation,
            io,
            self.mcp.clone(),
            self.registry.clone(),
            self.logs.clone(),
            hooks,
            stop,
        );
        let (done, outcome) = oneshot::channel();
        tokio::spawn(async move {
            let refused = task.await;
            if let Some(why) = &refused {
                tracing::error!(plugin = %plugin.name, "MCP session refused: {why}");
                let _ = plugin.control.send(Control::Refused {
                    generation,
                    why: why.clone(),
                });
            }
            let _ = done.send(refused);
        });
        outcome
    }

    /// Supervises a Streamable HTTP MCP server (no process): the connection is the
    /// "process". It ends when the connection ends, a startup or hung timeout stops
    /// it, or the plugin task stops it (after draining calls in flight).
    async fn run_remote(
        self: &Arc<Self>,
        spec: &PluginSpec,
        url: &str,
        generation: u64,
        cmds: &mut mpsc::UnboundedReceiver<ProcCmd>,
    ) -> ProcessEnd {
        let name = &self.name;
        let headers = match spec.mcp.as_ref().map(|m| &m.transport) {
            Some(McpTransport::Http { headers, .. }) => headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            _ => Vec::new(),
        };
        tracing::info!(plugin = %name, generation, url, "connecting to MCP server");
        self.logs.started(
            0,
            generation,
            &format!("{} ({url})", self.start_cause(generation)),
        );
        let (stop, stopped) = oneshot::channel();
        let io = Io::Http {
            url: url.to_string(),
            headers,
        };
        // Ends with the session: Some(why) when it was refused before it registered.
        let mut outcome = self.start_mcp_session(spec, generation, io, stopped);
        let mut stop = Some(stop);
        let startup_deadline =
            tokio::time::Instant::now() + Duration::from_secs_f64(spec.startup_timeout_s);
        let mut registered_at: Option<Instant> = None;
        let mut killed_because: Option<String> = None;
        let mut halt = |why: Option<String>, stop: &mut Option<oneshot::Sender<()>>| {
            if let Some(why) = why {
                tracing::error!(plugin = %name, "{why}; disconnecting");
                killed_because.get_or_insert(why);
            }
            if let Some(s) = stop.take() {
                let _ = s.send(());
            }
        };
        let why = loop {
            tokio::select! {
                refused = &mut outcome => break refused.ok().flatten(),
                _ = tokio::time::sleep_until(startup_deadline), if registered_at.is_none() && stop.is_some() => {
                    halt(Some(format!("did not register within {} s", spec.startup_timeout_s)), &mut stop);
                }
                cmd = cmds.recv() => match cmd {
                    Some(ProcCmd::Registered) => registered_at = Some(Instant::now()),
                    // The session task ends on its own; `outcome` follows.
                    Some(ProcCmd::SessionEnded) => {}
                    Some(ProcCmd::Hung(silent)) => {
                        halt(Some(format!("answered no ping for {} ms (hung)", silent.as_millis())), &mut stop);
                    }
                    Some(ProcCmd::Stop { drain }) => {
                        if drain {
                            self.drain(generation).await;
                        }
                        halt(None, &mut stop);
                    }
                    None => halt(None, &mut stop),
                },
            }
        };
        ProcessEnd {
            exit: match (why, stop.is_none()) {
                // e.g. "MCP connect failed: … error sending request for url (…)"
                (Some(why), _) => why,
                (None, true) => "disconnected".into(),
                (None, false) => "connection closed".into(),
            },
            killed_because,
            uptime: registered_at.map(|t| t.elapsed()),
            why: None,
            build_failed: false,
        }
    }

    /// Waits (up to the drain timeout) for the calls in flight of `generation`.
    async fn drain(&self, generation: u64) {
        let live = self
            .status
            .lock()
            .unwrap()
            .instance(generation)
            .and_then(|i| i.live.clone());
        if let Some(session) = live {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while session.in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// Stops a process the plugin task asked to stop. With `drain`, calls in flight on
    /// its session finish first (up to `config.drain_timeout`); then `Shutdown` on the
    /// stream, the grace period, SIGTERM and SIGKILL of its group. Without `drain` (a
    /// process that serves nothing: a superseded new version), SIGTERM at once.
    async fn stop_process(
        &self,
        child: &mut tokio::process::Child,
        pid: u32,
        generation: u64,
        drain: bool,
        config: &SupervisorConfig,
    ) -> std::io::Result<std::process::ExitStatus> {
        let live = self
            .status
            .lock()
            .unwrap()
            .instance(generation)
            .and_then(|i| i.live.clone());
        let Some(session) = live.filter(|_| drain) else {
            return terminate(child, pid, &self.name).await;
        };
        let mut deadline = tokio::time::Instant::now() + config.drain_timeout;
        if let Some(stop) = config.stop_deadline.get() {
            deadline = deadline.min(*stop);
        }
        while session.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::select! {
                status = child.wait() => return status,
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        if session.in_flight() > 0 {
            tracing::warn!(
                plugin = %self.name,
                "{} still in flight after draining; stopping anyway",
                crate::term::count(session.in_flight(), "call", "calls"),
            );
        }
        let grace = config.shutdown_grace;
        session.try_send(HostMsg::Shutdown(Shutdown {
            grace_ms: grace.as_millis() as u32,
            reason: "broker stopping the plugin".into(),
        }));
        if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
            return status;
        }
        tracing::warn!(plugin = %self.name, pid, "did not exit within {} ms of Shutdown; SIGTERM", grace.as_millis());
        terminate(child, pid, &self.name).await
    }
}

/// SIGTERM to the group, then SIGKILL after [`TERM_GRACE`].
async fn terminate(
    child: &mut tokio::process::Child,
    pid: u32,
    plugin: &str,
) -> std::io::Result<std::process::ExitStatus> {
    process::signal_group(pid, libc::SIGTERM);
    if let Ok(status) = tokio::time::timeout(TERM_GRACE, child.wait()).await {
        return status;
    }
    tracing::warn!(plugin = %plugin, pid, "did not exit after SIGTERM; SIGKILL");
    process::signal_group(pid, libc::SIGKILL);
    child.wait().await
}

/// Messages from the plugin task to one process's watcher.
#[derive(Debug)]
enum ProcCmd {
    /// Its session registered: the startup deadline no longer applies.
    Registered,
    /// Its session ended: kill it if it lives on.
    SessionEnded,
    /// It answered no ping for this long: kill it.
    Hung(Duration),
    /// Stop it; `drain`: let calls in flight finish first.
    Stop { drain: bool },
}

/// A spawned process as the plugin task holds it.
struct Proc {
    generation: u64,
    spec: Arc<PluginSpec>,
    cmds: mpsc::UnboundedSender<ProcCmd>,
    /// Why it is being stopped, once it is (the reason its calls fail with).
    retired_because: Option<&'static str>,
}

/// Why a process was stopped, when it was not current any more.
const SUPERSEDED: &str = "was superseded before it registered";

/// What the plugin task keeps between messages.
struct Task {
    plugin: Arc<Plugin>,
    config: Arc<SupervisorConfig>,
    /// The supervised process in charge (starting or serving).
    current: Option<Proc>,
    /// A reload's new version, started beside `current`.
    candidate: Option<Proc>,
    /// Processes being stopped.
    retiring: Vec<Proc>,
    /// The instance of a process attached by hand that serves the plugin.
    attached: Option<u64>,
    /// Spawn `current` again once this retiring generation ended (a restart).
    respawn_after: Option<u64>,
    backoff_until: Option<tokio::time::Instant>,
    stopping: bool,
    crashes: VecDeque<Instant>,
    delays: Box<dyn Iterator<Item = Duration> + Send>,
    /// Operations waiting for a generation to register.
    waiters: Vec<(u64, Outcome)>,
}

impl Task {
    fn new(plugin: Arc<Plugin>, config: Arc<SupervisorConfig>) -> Task {
        let delays = backoff(&plugin.spec().restart);
        Task {
            plugin,
            config,
            current: None,
            candidate: None,
            retiring: Vec::new(),
            attached: None,
            respawn_after: None,
            backoff_until: None,
            stopping: false,
            crashes: VecDeque::new(),
            delays,
            waiters: Vec::new(),
        }
    }

    fn name(&self) -> &str {
        &self.plugin.name
    }

    fn handle(&mut self, ctl: Control) {
        match ctl {
            Control::Ready(g) => self.on_ready(g),
            Control::SessionEnded(g) => self.on_session_ended(g),
            Control::Refused { generation, why } => self.on_refused(generation, why),
            Control::Hung { generation, silent } => self.tell(generation, ProcCmd::Hung(silent)),
            Control::Exited { generation, end } => self.on_exit(generation, end),
            Control::Restart => self.on_restart(),
            Control::Reload {
                spec,
                done,
                rebuild,
            } => self.on_reload(spec, done, rebuild),
            Control::Stop => self.on_stop(),
        }
    }

    /// True (and the plugin marked stopped) once there is nothing left to supervise:
    /// after a stop, every process ended; for an ad-hoc plugin, its attached process left.
    fn finished(&mut self) -> bool {
        let no_process =
            self.current.is_none() && self.candidate.is_none() && self.retiring.is_empty();
        let done = if self.stopping {
            no_process
        } else {
            self.plugin.adhoc
                && no_process
                && self.attached.is_none()
                && !self
                    .plugin
                    .status
                    .lock()
                    .unwrap()
                    .instances
                    .iter()
                    .any(|i| i.origin == Origin::Attached)
        };
        if done {
            self.plugin.set_state(PluginState::Stopped, "");
            for (_, w) in self.waiters.drain(..) {
                let _ = w.send(Err(NotServing::Superseded("the plugin was stopped".into())));
            }
            tracing::info!(plugin = %self.plugin.name, "stopped");
        }
        done
    }

    fn reset_budget(&mut self) {
        self.crashes.clear();
        self.delays = backoff(&self.plugin.spec().restart);
    }

    /// Answers the operations waiting for `generation`.
    fn answer(&mut self, generation: u64, outcome: Result<(), NotServing>) {
        let mut i = 0;
        while i < self.waiters.len() {
            if self.waiters[i].0 == generation {
                let (_, w) = self.waiters.swap_remove(i);
                let _ = w.send(outcome.clone());
            } else {
                i += 1;
            }
        }
    }

    fn proc(&self, generation: u64) -> Option<&Proc> {
        self.current
            .iter()
            .chain(self.candidate.iter())
            .chain(self.retiring.iter())
            .find(|p| p.generation == generation)
    }

    /// Passes `cmd` to the watcher of `generation`'s process, if it has one.
    fn tell(&self, generation: u64, cmd: ProcCmd) {
        if let Some(p) = self.proc(generation) {
            let _ = p.cmds.send(cmd);
        }
    }

    /// Spawns a process of `spec`; as the current one when `current`. `always_build`:
    /// run its build step whatever the mtime rule says.
    fn spawn(&mut self, spec: Arc<PluginSpec>, current: bool, always_build: bool) -> Proc {
        let token = random_token();
        let generation = {
            let mut s = self.plugin.status.lock().unwrap();
            let generation = s.next_generation();
            s.instances.push(Instance {
                generation,
                origin: Origin::Spawned,
                token: token.clone(),
                connected: false,
                retiring: false,
                pid: 0,
                started: Instant::now(),
                sandbox: SandboxState::Pending,
                sdk: String::new(),
                live: None,
                rejected: Vec::new(),
            });
            if current {
                s.current = generation;
                if s.serving == 0 {
                    s.state = PluginState::Starting;
                    s.reason = String::new();
                }
            }
            generation
        };
        let (cmds, rx) = mpsc::unbounded_channel();
        tokio::spawn(self.plugin.clone().watch_process(
            self.config.clone(),
            spec.clone(),
            generation,
            token,
            always_build,
            rx,
        ));
        Proc {
            generation,
            spec,
            cmds,
            retired_because: None,
        }
    }

    /// Starts `spec` as the current process (one that is starting is replaced).
    fn spawn_current(&mut self, spec: Arc<PluginSpec>) -> u64 {
        self.spawn_current_with(spec, false)
    }

    /// [`Task::spawn_current`]; `always_build`: run its build step whatever the mtime
    /// rule says.
    fn spawn_current_with(&mut self, spec: Arc<PluginSpec>, always_build: bool) -> u64 {
        self.respawn_after = None;
        self.backoff_until = None;
        if let Some(old) = self.current.take() {
            self.plugin.unpublish(old.generation);
            self.retire(old, false, SUPERSEDED);
        }
        let p = self.spawn(spec, true, always_build);
        let generation = p.generation;
        self.current = Some(p);
        generation
    }

    /// Stops `proc` (its session is never published again); it is forgotten once it
    /// exited.
    fn retire(&mut self, mut proc: Proc, drain: bool, why: &'static str) {
        {
            let mut s = self.plugin.status.lock().unwrap();
            if s.current == proc.generation {
                s.current = 0;
            }
            if let Some(i) = s.instance_mut(proc.generation) {
                i.retiring = true;
            }
        }
        let _ = proc.cmds.send(ProcCmd::Stop { drain });
        proc.retired_because = Some(why);
        self.retiring.push(proc);
    }

    /// Stops a reload's new version that no longer should serve.
    fn drop_candidate(&mut self, outcome: NotServing) {
        if let Some(c) = self.candidate.take() {
            self.answer(c.generation, Err(outcome));
            self.retire(c, false, SUPERSEDED);
        }
    }

    /// Sends an attached process away: `Shutdown`, end of its stream, its calls failed.
    fn dismiss_attached(&mut self, generation: u64, why: &str) {
        let live = {
            let mut s = self.plugin.status.lock().unwrap();
            let at = s.instances.iter().position(|i| i.generation == generation);
            at.and_then(|at| s.instances.remove(at).live)
        };
        self.plugin.unpublish(generation);
        if let Some(session) = live {
            session.try_send(HostMsg::Shutdown(Shutdown {
                grace_ms: self.config.shutdown_grace.as_millis() as u32,
                reason: format!("broker: {why}"),
            }));
            session.end_stream();
            session.close(why);
        }
    }

    fn on_ready(&mut self, generation: u64) {
        self.tell(generation, ProcCmd::Registered);
        if self
            .candidate
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            self.switch();
        } else if self
            .current
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            self.answer(generation, Ok(()));
        } else {
            let attached = {
                let s = self.plugin.status.lock().unwrap();
                s.instance(generation)
                    .filter(|i| i.origin == Origin::Attached)
                    .map(|i| i.pid)
            };
            if let Some(pid) = attached {
                self.take_over(generation, pid);
            }
        }
    }

    /// A reload's new version registered (its session is published): it becomes the
    /// current process; the old one drains and stops.
    fn switch(&mut self) {
        let Some(new) = self.candidate.take() else {
            return;
        };
        if let Some(old) = self.current.take() {
            self.retire(old, true, "was replaced by its reloaded version");
        }
        *self.plugin.spec.write().unwrap() = new.spec.clone();
        {
            let mut s = self.plugin.status.lock().unwrap();
            s.current = new.generation;
            s.restarts += 1;
        }
        self.reset_budget();
        self.backoff_until = None;
        self.respawn_after = None;
        self.answer(new.generation, Ok(()));
        tracing::info!(plugin = %self.name(), "reloaded: the new version serves; the old one drains");
        self.current = Some(new);
    }

    /// A process attached by hand registered: it serves the plugin from now on; the
    /// supervised process drains and stops, and is not restarted while it stays.
    fn take_over(&mut self, generation: u64, pid: u32) {
        if self.stopping {
            // It registered while the plugin was being unloaded.
            self.dismiss_attached(generation, "the plugin was stopped");
            return;
        }
        if let Some(previous) = self.attached.replace(generation) {
            if previous != generation {
                self.dismiss_attached(previous, "another attached process took over");
            }
        }
        self.drop_candidate(NotServing::Superseded(
            "a process attached by hand took over the plugin".into(),
        ));
        if let Some(own) = self.current.take() {
            self.retire(own, true, "made room for a process attached by hand");
        }
        self.backoff_until = None;
        self.respawn_after = None;
        self.reset_budget();
        let pid = if pid == 0 {
            "-".to_string()
        } else {
            pid.to_string()
        };
        tracing::info!(plugin = %self.name(), pid = %pid, "a process attached by hand serves the plugin");
    }

    fn on_session_ended(&mut self, generation: u64) {
        self.tell(generation, ProcCmd::SessionEnded);
        let attached = {
            let s = self.plugin.status.lock().unwrap();
            s.instance(generation)
                .is_some_and(|i| i.origin == Origin::Attached)
        };
        if !attached {
            return;
        }
        if self.attached == Some(generation) && !self.stopping && !self.plugin.adhoc {
            // Not `ready` while nothing serves: the status would otherwise show the
            // attached process's predecessor as ready until the own process starts.
            self.plugin.set_state(
                PluginState::Starting,
                "the attached process disconnected; starting the plugin's own process",
            );
        }
        self.dismiss_attached(generation, "the attached process disconnected");
        if self.attached != Some(generation) {
            return;
        }
        self.attached = None;
        tracing::info!(plugin = %self.name(), "the attached process disconnected");
        self.plugin.status.lock().unwrap().last_exit = "attached process disconnected".into();
        if !self.stopping && !self.plugin.adhoc {
            self.reset_budget();
            self.spawn_current(self.plugin.spec());
        }
    }

    fn on_refused(&mut self, generation: u64, why: String) {
        if self
            .candidate
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            let message = format!(
                "reload failed: the new version's session was refused: {why}; the previous version still serves"
            );
            tracing::error!(plugin = %self.name(), "{message}");
            self.plugin.status.lock().unwrap().reason = message.clone();
            self.drop_candidate(NotServing::Failed(message));
            return;
        }
        self.answer(
            generation,
            Err(NotServing::Failed(format!(
                "its session was refused: {why}"
            ))),
        );
        let attached = {
            let s = self.plugin.status.lock().unwrap();
            s.instance(generation)
                .is_some_and(|i| i.origin == Origin::Attached)
        };
        if attached {
            self.on_session_ended(generation);
        } else {
            // A process that lives on without a session is killed (then restarted).
            self.tell(generation, ProcCmd::SessionEnded);
        }
    }

    fn on_exit(&mut self, generation: u64, end: ProcessEnd) {
        let live = {
            let mut s = self.plugin.status.lock().unwrap();
            let at = s.instances.iter().position(|i| i.generation == generation);
            at.and_then(|at| s.instances.remove(at).live)
        };
        self.plugin.unpublish(generation);
        let reason = end.reason();
        let detail = end.detail();
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            self.current = None;
            {
                let mut s = self.plugin.status.lock().unwrap();
                s.current = 0;
                s.last_exit = match &end.killed_because {
                    Some(why) => format!("{why} ({})", end.exit),
                    None => end.exit.clone(),
                };
            }
            if let Some(session) = live {
                session.close(&reason);
            }
            self.answer(generation, Err(NotServing::Failed(detail.clone())));
            if !self.stopping {
                if end.build_failed {
                    self.build_failed(detail);
                } else {
                    self.crashed(&end, reason);
                }
            }
        } else if self
            .candidate
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            self.candidate = None;
            if let Some(session) = live {
                session.close(&reason);
            }
            let message = if end.build_failed {
                format!("reload failed: {detail}; the previous version still serves")
            } else {
                format!(
                    "reload failed: the new version {detail}; the previous version still serves"
                )
            };
            tracing::error!(plugin = %self.name(), "{message}");
            {
                let mut s = self.plugin.status.lock().unwrap();
                if s.serving != 0 {
                    s.reason = message.clone();
                }
            }
            self.answer(generation, Err(NotServing::Failed(message)));
        } else if let Some(at) = self
            .retiring
            .iter()
            .position(|p| p.generation == generation)
        {
            let proc = self.retiring.swap_remove(at);
            let why = proc.retired_because.unwrap_or("was stopped");
            if let Some(session) = live {
                session.close(why);
            }
            if why != SUPERSEDED {
                self.plugin.status.lock().unwrap().last_exit = end.exit.clone();
            }
            tracing::info!(plugin = %self.name(), generation, "{why} ({})", end.exit);
            self.answer(generation, Err(NotServing::Superseded(why.into())));
            if self.respawn_after == Some(generation) && !self.stopping {
                self.spawn_current(self.plugin.spec());
            }
        }
    }

    /// The current process ended on its own: count it against the crash budget, then
    /// restart it after a backoff, or mark the plugin failed.
    fn crashed(&mut self, end: &ProcessEnd, reason: String) {
        let name = self.plugin.name.clone();
        let policy = self.plugin.spec().restart.clone();
        let now = Instant::now();
        self.crashes.push_back(now);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > policy.window)
        {
            self.crashes.pop_front();
        }
        if end.uptime.is_some_and(|u| u >= HEALTHY_UPTIME) {
            self.delays = backoff(&policy);
        }
        self.plugin.status.lock().unwrap().restarts += 1;
        if self.crashes.len() as u32 >= policy.max_restarts {
            let tail = self.plugin.logs.tail(REASON_LINES).join(" | ");
            let why = format!(
                "{reason}; {} within {} s spent the budget of {}; last output: {}",
                crate::term::count(self.crashes.len(), "crash", "crashes"),
                policy.window.as_secs(),
                policy.max_restarts,
                if tail.is_empty() { "(none)" } else { &tail }
            );
            tracing::error!(plugin = %name, "failed: {why}");
            self.plugin.set_state(PluginState::Failed, why);
            if self.candidate.is_none() {
                self.plugin.registry.remove_plugin(&name);
            }
        } else {
            let delay = self.delays.next().unwrap_or(policy.backoff_max);
            tracing::warn!(plugin = %name, "plugin {reason}; restarting in {} ms", delay.as_millis());
            self.plugin.set_state(
                PluginState::Backoff,
                format!("{reason}; restarting in {} ms", delay.as_millis()),
            );
            self.backoff_until = Some(tokio::time::Instant::now() + delay);
        }
    }

    /// The current process's build step failed: the plugin is failed at once (a compile
    /// error does not fix itself; no crash budget, no backoff) until a reload, a restart
    /// or a `--watch` change tries again.
    fn build_failed(&mut self, detail: String) {
        let name = self.plugin.name.clone();
        tracing::error!(plugin = %name, "failed: {detail}");
        self.plugin.set_state(PluginState::Failed, detail);
        if self.candidate.is_none() {
            self.plugin.registry.remove_plugin(&name);
        }
    }

    fn on_restart(&mut self) {
        if self.attached.is_some() || self.stopping {
            return;
        }
        tracing::info!(plugin = %self.name(), "restarting on request");
        self.drop_candidate(NotServing::Superseded(
            "a restart superseded the reload".into(),
        ));
        self.reset_budget();
        self.backoff_until = None;
        self.plugin.status.lock().unwrap().restarts += 1;
        match self.current.take() {
            Some(old) => {
                let generation = old.generation;
                self.plugin.unpublish(generation);
                self.plugin.set_state(PluginState::Stopping, "");
                self.retire(old, true, "is restarting on request");
                self.respawn_after = Some(generation);
            }
            None => {
                self.spawn_current(self.plugin.spec());
            }
        }
    }

    fn on_reload(&mut self, spec: Arc<PluginSpec>, done: Option<Outcome>, rebuild: bool) {
        if self.stopping {
            if let Some(done) = done {
                let _ = done.send(Err(NotServing::Superseded("the plugin is stopping".into())));
            }
            return;
        }
        if self.attached.is_some() {
            if let Some(done) = done {
                let _ = done.send(Err(NotServing::Failed(
                    "a process attached by hand serves it; stop that process first".into(),
                )));
            }
            return;
        }
        self.drop_candidate(NotServing::Superseded(
            "a newer reload superseded this one".into(),
        ));
        let serving = {
            let s = self.plugin.status.lock().unwrap();
            self.current
                .as_ref()
                .is_some_and(|c| s.serving == c.generation)
        };
        let generation = if serving {
            tracing::info!(plugin = %self.name(), "reloading from {}: the new version starts beside the serving one", spec.dir.display());
            let candidate = self.spawn(spec, false, rebuild);
            let generation = candidate.generation;
            self.candidate = Some(candidate);
            generation
        } else {
            // Nothing serves (starting, backing off, failed): the new version replaces
            // whatever is there at once.
            tracing::info!(plugin = %self.name(), "reloading from {}", spec.dir.display());
            *self.plugin.spec.write().unwrap() = spec.clone();
            self.reset_budget();
            self.plugin.status.lock().unwrap().restarts += 1;
            self.spawn_current_with(spec, rebuild)
        };
        if let Some(done) = done {
            self.waiters.push((generation, done));
        }
    }

    fn on_stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.backoff_until = None;
        self.respawn_after = None;
        self.plugin.set_state(PluginState::Stopping, "");
        self.drop_candidate(NotServing::Superseded("the plugin is stopping".into()));
        if let Some(own) = self.current.take() {
            self.plugin.unpublish(own.generation);
            self.retire(own, true, "was stopped");
        }
        if let Some(attached) = self.attached.take() {
            self.dismiss_attached(attached, "the plugin was stopped");
        }
        // Attached processes still in their handshake are refused from now on.
        for i in &mut self.plugin.status.lock().unwrap().instances {
            i.retiring = true;
        }
        for (_, w) in self.waiters.drain(..) {
            let _ = w.send(Err(NotServing::Superseded("the plugin is stopping".into())));
        }
    }
}
