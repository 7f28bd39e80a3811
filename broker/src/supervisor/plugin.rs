//! One supervised plugin: its state, and the task that owns its process — spawn,
//! watch, restart with backoff inside a crash budget, hung detection, drain and
//! reload, polite-then-firm stop.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use hearth_proto::v1::{host_message::Msg as HostMsg, PluginState, Shutdown};
use tokio::sync::{mpsc, watch};

use super::process::{self, LogRing};
use super::sandbox::SandboxState;
use super::session::Session;
use super::SupervisorConfig;
use crate::error::{CallError, Target};
use crate::manifest::{PluginSpec, RestartPolicy};
use crate::registry::Registry;

/// A run this long resets the backoff: the next crash restarts after the initial delay.
pub const HEALTHY_UPTIME: Duration = Duration::from_secs(30);
/// How long a process may live on after its session ended before it is killed.
const SESSION_LOSS_KILL_AFTER: Duration = Duration::from_secs(2);
/// Wait after SIGTERM before SIGKILL.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(2);
/// Output lines quoted in a `failed` plugin's reason.
const REASON_LINES: usize = 5;

/// Messages to a plugin's supervision task.
#[derive(Debug)]
pub(crate) enum Control {
    /// The session of this generation registered.
    Ready(u64),
    /// The session of this generation ended.
    SessionEnded(u64),
    /// The session of this generation answered no ping for `silent`.
    Hung { generation: u64, silent: Duration },
    /// Stop the process (draining calls in flight) and start it again; revives a
    /// failed plugin.
    Restart,
    /// Drain, stop, and start the new spec (new code, same name).
    Reload(Arc<PluginSpec>),
    /// Drain and stop for good.
    Stop,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) state: PluginState,
    pub(crate) pid: u32,
    pub(crate) restarts: u32,
    pub(crate) token: String,
    pub(crate) generation: u64,
    pub(crate) attached: bool,
    pub(crate) ready_at: Option<Instant>,
    pub(crate) spawned_at: Option<Instant>,
    pub(crate) startup: Option<Duration>,
    pub(crate) last_exit: String,
    pub(crate) reason: String,
    pub(crate) sdk: String,
    /// How the current (or last) process is confined.
    pub(crate) sandbox: SandboxState,
    /// Session of the current process, registered or not yet published.
    pub(crate) live: Option<Arc<Session>>,
}

/// One supervised plugin.
pub struct Plugin {
    name: String,
    spec: RwLock<Arc<PluginSpec>>,
    pub(crate) status: Mutex<Inner>,
    /// The registered session, published for callers; only the supervisor writes it,
    /// and callers reach it through [`Plugin::ready_session`].
    pub(super) session: watch::Sender<Option<Arc<Session>>>,
    pub(crate) control: mpsc::UnboundedSender<Control>,
    logs: Arc<LogRing>,
    registry: Arc<Registry>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
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
    /// How its process is confined.
    pub sandbox: SandboxState,
}

fn random_token() -> String {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The restart delays of `policy`: exponential with jitter, capped at its maximum.
fn backoff(policy: &RestartPolicy) -> impl Iterator<Item = Duration> {
    let max = policy.backoff_max;
    backon::ExponentialBuilder::default()
        .with_min_delay(policy.backoff_initial)
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
        .build()
        .map(move |d| d.min(max))
}

/// How one process of the plugin ended.
struct ProcessEnd {
    exit: String,
    /// What the supervisor was asked to do, if the stop was requested.
    requested: Option<Control>,
    /// Why the supervisor killed it, if it did on its own.
    killed_because: Option<String>,
    uptime: Option<Duration>,
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
    pub(crate) fn new(
        spec: PluginSpec,
        registry: Arc<Registry>,
    ) -> (Arc<Plugin>, mpsc::UnboundedReceiver<Control>) {
        let (control, rx) = mpsc::unbounded_channel();
        let plugin = Arc::new(Plugin {
            name: spec.name.clone(),
            spec: RwLock::new(Arc::new(spec)),
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
                sandbox: SandboxState::Pending,
                live: None,
            }),
            session: watch::Sender::new(None),
            control,
            logs: Arc::new(LogRing::default()),
            registry,
            task: Mutex::new(None),
        });
        (plugin, rx)
    }

    /// Starts the supervision task.
    pub(crate) fn start(
        self: &Arc<Self>,
        config: Arc<SupervisorConfig>,
        control: mpsc::UnboundedReceiver<Control>,
    ) {
        let task = tokio::spawn(self.clone().run(config, control));
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

    /// Its output log.
    pub fn logs(&self) -> &Arc<LogRing> {
        &self.logs
    }

    pub(crate) fn snapshot(&self) -> PluginSnapshot {
        let spec = self.spec();
        let s = self.status.lock().unwrap();
        PluginSnapshot {
            name: self.name.clone(),
            runtime: spec.runtime.as_str().into(),
            pid: s.pid,
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

    /// The supervision loop: spawn, watch, restart within the crash budget, until
    /// told to stop.
    async fn run(
        self: Arc<Self>,
        config: Arc<SupervisorConfig>,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) {
        let name = self.name.clone();
        let mut crashes: VecDeque<Instant> = VecDeque::new();
        let mut delays = backoff(&self.spec().restart);
        loop {
            let spec = self.spec();
            let end = self.run_once(&spec, &config, &mut control).await;
            self.session.send_replace(None);
            let live = {
                let mut s = self.status.lock().unwrap();
                s.pid = 0;
                s.last_exit = match &end.killed_because {
                    Some(why) => format!("{why} ({})", end.exit),
                    None => end.exit.clone(),
                };
                s.token = String::new();
                s.ready_at = None;
                s.live.take()
            };
            let reason = match (&end.requested, &end.killed_because) {
                (Some(Control::Stop), _) => "was stopped".to_string(),
                (Some(Control::Reload(_)), _) => "is reloading".to_string(),
                (Some(_), _) => "is restarting on request".to_string(),
                (None, Some(why)) => format!("{why} ({})", end.exit),
                (None, None) => format!("exited with {}", end.exit),
            };
            if let Some(session) = live {
                session.close(&reason);
            }
            let next = match end.requested {
                Some(Control::Stop) => {
                    tracing::info!(plugin = %name, "stopped ({})", end.exit);
                    self.set_state(PluginState::Stopped, "");
                    return;
                }
                Some(request) => Some(request),
                None => {
                    // A crash: count it against the budget.
                    let policy = spec.restart.clone();
                    let now = Instant::now();
                    crashes.push_back(now);
                    while crashes
                        .front()
                        .is_some_and(|t| now.duration_since(*t) > policy.window)
                    {
                        crashes.pop_front();
                    }
                    if end.uptime.is_some_and(|u| u >= HEALTHY_UPTIME) {
                        delays = backoff(&policy);
                    }
                    self.status.lock().unwrap().restarts += 1;
                    if crashes.len() as u32 >= policy.max_restarts {
                        let tail = self.logs.tail(REASON_LINES).join(" | ");
                        let why = format!(
                            "{reason}; {} crash(es) within {} s spent the budget of {}; last output: {}",
                            crashes.len(),
                            policy.window.as_secs(),
                            policy.max_restarts,
                            if tail.is_empty() { "(none)" } else { &tail }
                        );
                        tracing::error!(plugin = %name, "failed: {why}");
                        self.set_state(PluginState::Failed, why);
                        self.registry.remove_plugin(&name);
                        wait_for_revival(&mut control).await
                    } else {
                        let delay = delays.next().unwrap_or(policy.backoff_max);
                        tracing::warn!(plugin = %name, "plugin {reason}; restarting in {} ms", delay.as_millis());
                        self.set_state(
                            PluginState::Backoff,
                            format!("{reason}; restarting in {} ms", delay.as_millis()),
                        );
                        wait_backoff(&mut control, delay).await
                    }
                }
            };
            match next {
                None => {}
                Some(Control::Stop) => {
                    self.set_state(PluginState::Stopped, "");
                    return;
                }
                Some(Control::Reload(new_spec)) => {
                    tracing::info!(plugin = %name, "reloading from {}", new_spec.dir.display());
                    *self.spec.write().unwrap() = new_spec;
                    crashes.clear();
                    delays = backoff(&self.spec().restart);
                    self.status.lock().unwrap().restarts += 1;
                }
                Some(_) => {
                    tracing::info!(plugin = %name, "restarting on request");
                    crashes.clear();
                    delays = backoff(&spec.restart);
                    self.status.lock().unwrap().restarts += 1;
                }
            }
        }
    }

    /// Spawns one process and watches it until it ends.
    async fn run_once(
        &self,
        spec: &PluginSpec,
        config: &SupervisorConfig,
        control: &mut mpsc::UnboundedReceiver<Control>,
    ) -> ProcessEnd {
        let name = &self.name;
        let token = random_token();
        let generation = {
            let mut s = self.status.lock().unwrap();
            s.generation += 1;
            s.token = token.clone();
            s.attached = false;
            s.state = PluginState::Starting;
            s.reason = String::new();
            // Before the spawn: a fast plugin may register before spawn() returns.
            s.spawned_at = Some(Instant::now());
            s.startup = None;
            s.generation
        };
        let protected = config.protected.read().unwrap().clone();
        let launch = process::Launch {
            addr: &config.addr,
            token: &token,
            data: config.plugin_data_dir(name),
            tmp: config.plugin_tmp_dir(name),
            protected: &protected,
        };
        let mut child = match process::spawn(spec, &config.interpreters, &launch).await {
            Ok(spawned) => {
                match &spawned.sandbox {
                    SandboxState::OptedOut => {
                        tracing::warn!(plugin = %name, "runs without its sandbox: plugin.json says \"sandbox\": false")
                    }
                    state => {
                        tracing::debug!(plugin = %name, sandbox = %state, prepared_us = spawned.prepared_in.as_micros() as u64, "sandbox")
                    }
                }
                self.status.lock().unwrap().sandbox = spawned.sandbox;
                spawned.child
            }
            Err(e) => {
                tracing::error!(plugin = %name, "{e}");
                return ProcessEnd {
                    exit: format!("spawn failed: {e}"),
                    requested: None,
                    killed_because: None,
                    uptime: None,
                };
            }
        };
        let pid = child.id().unwrap_or(0);
        config.reaper.track(pid);
        {
            let mut s = self.status.lock().unwrap();
            s.pid = pid;
        }
        tracing::info!(plugin = %name, pid, runtime = spec.runtime.as_str(), "spawned");
        if let Some(out) = child.stdout.take() {
            tokio::spawn(process::capture(
                out,
                name.clone(),
                "stdout",
                self.logs.clone(),
            ));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(process::capture(
                err,
                name.clone(),
                "stderr",
                self.logs.clone(),
            ));
        }

        let startup_deadline =
            tokio::time::Instant::now() + Duration::from_secs_f64(spec.startup_timeout_s);
        let mut registered = false;
        let mut startup_expired = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let mut requested: Option<Control> = None;
        let mut killed_because: Option<String> = None;
        let kill = |why: String, killed_because: &mut Option<String>| {
            tracing::error!(plugin = %name, pid, "{why}; killing it");
            *killed_because = Some(why);
            process::signal_group(pid, libc::SIGKILL);
        };
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                _ = tokio::time::sleep_until(startup_deadline), if !registered && !startup_expired => {
                    startup_expired = true;
                    kill(format!("did not register within {} s", spec.startup_timeout_s), &mut killed_because);
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or(startup_deadline)), if kill_at.is_some() => {
                    kill_at = None;
                    kill("outlived its session".into(), &mut killed_because);
                }
                ctl = control.recv() => match ctl {
                    Some(Control::Ready(g)) if g == generation => registered = true,
                    Some(Control::SessionEnded(g)) if g == generation => {
                        kill_at = Some(tokio::time::Instant::now() + SESSION_LOSS_KILL_AFTER);
                    }
                    Some(Control::Hung { generation: g, silent }) if g == generation => {
                        kill(format!("answered no ping for {} ms (hung)", silent.as_millis()), &mut killed_because);
                    }
                    Some(Control::Ready(_) | Control::SessionEnded(_) | Control::Hung { .. }) => {}
                    Some(c) => {
                        requested = Some(c);
                        break self.drain_and_stop(&mut child, pid, config).await;
                    }
                    None => {
                        requested = Some(Control::Stop);
                        break self.drain_and_stop(&mut child, pid, config).await;
                    }
                },
            }
        };
        // Whatever the plugin left in its group (grandchildren) goes too.
        process::signal_group(pid, libc::SIGKILL);
        config.reaper.untrack(pid);
        let uptime = self.status.lock().unwrap().ready_at.map(|t| t.elapsed());
        ProcessEnd {
            exit: match status {
                Ok(status) => process::describe_exit(status),
                Err(e) => format!("wait failed: {e}"),
            },
            requested,
            killed_because,
            uptime,
        }
    }

    /// Stops taking new calls, lets calls in flight finish (up to
    /// `config.drain_timeout`), then [`Plugin::stop_child`].
    async fn drain_and_stop(
        &self,
        child: &mut tokio::process::Child,
        pid: u32,
        config: &SupervisorConfig,
    ) -> std::io::Result<std::process::ExitStatus> {
        self.set_state(PluginState::Stopping, "");
        self.session.send_replace(None);
        let live = self.status.lock().unwrap().live.clone();
        if let Some(session) = &live {
            let deadline = tokio::time::Instant::now() + config.drain_timeout;
            while session.in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::select! {
                    status = child.wait() => return status,
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                }
            }
            if session.in_flight() > 0 {
                tracing::warn!(
                    plugin = %self.name,
                    "{} call(s) still in flight after draining {} ms; stopping anyway",
                    session.in_flight(),
                    config.drain_timeout.as_millis()
                );
            }
        }
        self.stop_child(child, pid, config.shutdown_grace).await
    }

    /// `Shutdown` on the stream, then SIGTERM to the group after `grace`, then
    /// SIGKILL after [`TERM_GRACE`].
    async fn stop_child(
        &self,
        child: &mut tokio::process::Child,
        pid: u32,
        grace: Duration,
    ) -> std::io::Result<std::process::ExitStatus> {
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
        tracing::warn!(plugin = %self.name, pid, "did not exit within {} ms of Shutdown; SIGTERM", grace.as_millis());
        process::signal_group(pid, libc::SIGTERM);
        if let Ok(status) = tokio::time::timeout(TERM_GRACE, child.wait()).await {
            return status;
        }
        tracing::warn!(plugin = %self.name, pid, "did not exit after SIGTERM; SIGKILL");
        process::signal_group(pid, libc::SIGKILL);
        child.wait().await
    }
}

/// Sleeps `delay` unless a request (Stop, Restart, Reload) arrives first, which is
/// returned. `None` = the delay passed.
async fn wait_backoff(
    control: &mut mpsc::UnboundedReceiver<Control>,
    delay: Duration,
) -> Option<Control> {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return None,
            ctl = control.recv() => match ctl {
                Some(c @ (Control::Stop | Control::Restart | Control::Reload(_))) => return Some(c),
                Some(_) => {}
                None => return Some(Control::Stop),
            }
        }
    }
}

/// A failed plugin waits for `Restart`, `Reload` or `Stop`.
async fn wait_for_revival(control: &mut mpsc::UnboundedReceiver<Control>) -> Option<Control> {
    loop {
        match control.recv().await {
            Some(c @ (Control::Stop | Control::Restart | Control::Reload(_))) => return Some(c),
            Some(_) => {}
            None => return Some(Control::Stop),
        }
    }
}
