//! The supervisor: spawns each plugin, runs its session handshake, watches the
//! process, fails in-flight calls when it dies, restarts it within its crash budget,
//! and stops it politely then firmly. Hot operations (load, unload, reload) happen
//! while other plugins keep serving.
//!
//! Each plugin has one task ([`plugin`]) that decides about its processes (each
//! watched by a task of its own); everything else talks to it through a control
//! channel. Plugin state sits behind one lock per plugin; the live session is published
//! on a `watch` channel that callers wait on while a plugin restarts. A reload starts
//! the new version beside the serving one and switches only once it registered; a
//! process started by hand may attach with a one-time token and serve a plugin in
//! place of its own process ([`Supervisor::attach_token`]).
//!
//! The supervisor only runs processes. Calls to plugins — tools, stage hooks, event
//! handlers — are routed by [`crate::router::ToolRouter`], which reaches a plugin's
//! session through `Plugin::ready_session`.

pub mod batch;
pub mod build;
mod handshake;
pub mod homes;
pub mod plugin;
pub mod process;
pub mod reaper;
pub mod sandbox;
pub mod session;
pub mod trace;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hearth_proto::v1::PluginState;

use crate::error::PluginError;
use crate::manifest::PluginSpec;
use crate::registry::Registry;
pub use handshake::same_secret;
use plugin::{random_token, state_reason, Control, NotServing, Outcome, TERM_GRACE};
pub use plugin::{Plugin, PluginSnapshot};
use process::Interpreters;
use reaper::Reaper;
use sandbox::Protected;

/// Broker-wide supervisor settings.
#[derive(Debug)]
pub struct SupervisorConfig {
    /// Address plugins dial (`HEARTH_ADDR`).
    pub addr: String,
    /// Python and Node used when manifests name none.
    pub interpreters: Interpreters,
    /// How long a call waits for a restarting plugin to be ready again.
    pub restart_wait: Duration,
    /// Grace period between `Shutdown` and SIGTERM when stopping a plugin.
    pub shutdown_grace: Duration,
    /// How long a reload, restart or unload lets calls in flight finish.
    pub drain_timeout: Duration,
    /// Kills plugin process groups if the broker dies.
    pub reaper: Reaper,
    /// The broker's data dir: plugins' own data (`plugin-data/<name>`) and temp
    /// (`tmp/<name>`) folders live in it.
    pub data_dir: PathBuf,
    /// What plugin sandboxes keep out: the data dir and every plugin root; the
    /// supervisor adds each loaded plugin's folder.
    pub protected: RwLock<Protected>,
    /// The settings store, once opened: MCP manifests' `${setting:KEY}` references.
    pub settings: std::sync::OnceLock<crate::storage::Settings>,
    /// Set when the broker stops: calls in flight drain until then at the latest, so
    /// the turns' drain and the plugins' drain share one `drain_timeout`.
    pub stop_deadline: std::sync::OnceLock<tokio::time::Instant>,
}

impl SupervisorConfig {
    /// `<data_dir>/plugin-data/<name>`: the plugin's own persistent folder
    /// (`HEARTH_PLUGIN_DATA`).
    pub fn plugin_data_dir(&self, plugin: &str) -> PathBuf {
        self.data_dir.join("plugin-data").join(plugin)
    }

    /// `<data_dir>/tmp/<name>`: the plugin's `TMPDIR`, emptied at each spawn.
    pub fn plugin_tmp_dir(&self, plugin: &str) -> PathBuf {
        self.data_dir.join("tmp").join(plugin)
    }
}

/// A plugin directory that could not be loaded, shown as `failed` in listings.
#[derive(Debug, Clone)]
struct LoadError {
    name: String,
    dir: String,
    reason: String,
}

impl LoadError {
    fn snapshot(&self) -> PluginSnapshot {
        PluginSnapshot {
            name: self.name.clone(),
            runtime: String::new(),
            pid: 0,
            state: PluginState::Failed,
            restarts: 0,
            tools: vec![],
            dir: self.dir.clone(),
            uptime: None,
            last_exit: String::new(),
            reason: self.reason.clone(),
            version: String::new(),
            sdk: String::new(),
            startup: None,
            sandbox: sandbox::SandboxState::Pending,
            attached: false,
            rejected: Vec::new(),
        }
    }
}

/// How long an attach token stays valid unused, unless asked otherwise.
pub const ATTACH_TOKEN_TTL: Duration = Duration::from_secs(600);
/// The longest lifetime an attach token may be given.
pub const ATTACH_TOKEN_MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// A one-time attach token the broker issued.
#[derive(Debug)]
struct AttachTicket {
    token: String,
    name: String,
    issued: Instant,
    ttl: Duration,
    used: bool,
}

/// What a process started by hand needs to attach as a plugin
/// ([`Supervisor::attach_token`]).
#[derive(Debug, Clone)]
pub struct AttachGrant {
    /// Plugin name (`HEARTH_PLUGIN`).
    pub name: String,
    /// Address to dial (`HEARTH_ADDR`).
    pub addr: String,
    /// The one-time token (`HEARTH_TOKEN`).
    pub token: String,
    /// How long the token stays valid unused.
    pub expires_in: Duration,
    /// Whether `name` is a loaded plugin (its own process makes room for the attached
    /// one) rather than an ad-hoc plugin that exists while the process stays.
    pub loaded: bool,
}

/// All plugins of the broker.
pub struct Supervisor {
    config: Arc<SupervisorConfig>,
    registry: Arc<Registry>,
    /// Where `Register.config_defs` are stored (set once storage is open).
    settings: std::sync::OnceLock<crate::storage::Settings>,
    plugins: RwLock<Vec<Arc<Plugin>>>,
    load_errors: Mutex<Vec<LoadError>>,
    attach_tickets: Mutex<Vec<AttachTicket>>,
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
            settings: std::sync::OnceLock::new(),
            plugins: RwLock::new(Vec::new()),
            load_errors: Mutex::new(Vec::new()),
            attach_tickets: Mutex::new(Vec::new()),
        }
    }

    /// The tool registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Gives the supervisor the settings store, where the `config_defs` of each
    /// `Register` are written (defaults only where unset). Call it before loading
    /// plugins; later calls are ignored.
    pub fn set_settings(&self, settings: crate::storage::Settings) {
        let _ = self.config.settings.set(settings.clone());
        let _ = self.settings.set(settings);
    }

    /// The settings store given by [`Supervisor::set_settings`], if any.
    pub fn settings_store(&self) -> Option<&crate::storage::Settings> {
        self.settings.get()
    }

    /// Loads the plugin in `dir` and starts supervising it. A directory that cannot
    /// be loaded (bad manifest, name in use, folder writable by group or others, name
    /// owned by another folder — see [`homes`]) is logged and listed as failed; it
    /// never stops the broker. The error says why.
    pub fn load(&self, dir: &Path) -> Result<Arc<Plugin>, PluginError> {
        self.load_with(dir, true, None)
    }

    /// [`Supervisor::load`] (as discovery at start does), and a future that ends once
    /// the plugin's first process registered or failed to (exit, refusal, startup
    /// timeout); `None` when the folder did not load. Readiness waits on these.
    pub fn load_reporting(
        &self,
        dir: &Path,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let (first, outcome) = tokio::sync::oneshot::channel();
        self.load_with(dir, true, Some(first)).ok()?;
        Some(async move {
            let _ = outcome.await;
        })
    }

    /// [`Supervisor::load`]; `list_failure`: a directory that cannot be loaded stays
    /// listed as failed (discovery), else nothing is left of it (an operator's load,
    /// answered with the error). `first` hears whether the first process registered.
    fn load_with(
        &self,
        dir: &Path,
        list_failure: bool,
        first: Option<Outcome>,
    ) -> Result<Arc<Plugin>, PluginError> {
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let remember = |name: String, reason: String| {
            tracing::error!(plugin = %name, "not loaded: {reason}");
            if list_failure {
                let mut errors = self.load_errors.lock().unwrap();
                errors.retain(|e| e.dir != dir.display().to_string());
                errors.push(LoadError {
                    name: name.clone(),
                    dir: dir.display().to_string(),
                    reason: reason.clone(),
                });
            }
            PluginError::Load {
                plugin: name,
                reason,
            }
        };
        let spec = PluginSpec::load(dir).map_err(|e| remember(dir_name.clone(), e.to_string()))?;
        let mut plugins = self.plugins.write().unwrap();
        if let Some(other) = plugins.iter().find(|p| p.name() == spec.name) {
            let by = if other.is_adhoc() {
                "a process attached by hand".to_string()
            } else {
                other.spec().dir.display().to_string()
            };
            let same_dir = !other.is_adhoc()
                && std::fs::canonicalize(&other.spec().dir).ok()
                    == std::fs::canonicalize(&spec.dir).ok();
            let reason = if same_dir {
                format!(
                    "plugin name `{}` is already used by {by}; to run its new code, `hearth plugins reload {}`",
                    spec.name, spec.name
                )
            } else {
                format!(
                    "plugin name `{}` is already used by {by}; to serve the name from {} instead, `hearth plugins unload {}`, then `hearth plugins adopt {} {}` (its settings and data follow the name)",
                    spec.name,
                    spec.dir.display(),
                    spec.name,
                    spec.name,
                    spec.dir.display()
                )
            };
            drop(plugins);
            return Err(remember(spec.name, reason));
        }
        let trusted = crate::server::refuse_shared_writable(&spec.dir)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                homes::Homes::new(&self.config.data_dir)
                    .claim(&spec.name, &spec.dir, || self.has_state(&spec.name))
            });
        if let Err(reason) = trusted {
            drop(plugins);
            return Err(remember(spec.name, reason));
        }
        self.load_errors
            .lock()
            .unwrap()
            .retain(|e| e.dir != spec.dir.display().to_string());
        {
            let mut protected = self.config.protected.write().unwrap();
            if !protected.paths.contains(&spec.dir) {
                protected.paths.push(spec.dir.clone());
            }
        }
        let (plugin, control) = Plugin::new(spec, self.registry.clone(), false);
        plugins.push(plugin.clone());
        self.registry
            .set_plugin_order(plugins.iter().map(|p| p.name().to_string()).collect());
        plugin.start(self.config.clone(), control, first);
        Ok(plugin)
    }

    /// Whether settings (a settings table in `hearth.db`) or files in
    /// `plugin-data/<name>` exist for the plugin `name`: what a folder claiming the
    /// name would inherit. A database that cannot be read counts as state.
    fn has_state(&self, name: &str) -> bool {
        let data = self.config.plugin_data_dir(name);
        if std::fs::read_dir(&data).is_ok_and(|mut d| d.next().is_some()) {
            return true;
        }
        if let Some(settings) = self.settings.get().filter(|s| s.is_shared()) {
            // Settings in a database shared with other brokers: ask it (a load runs on
            // the multi-thread runtime of `hearth run`; elsewhere count it as state).
            let scope = crate::storage::Scope::Plugin(name.to_string());
            return match tokio::runtime::Handle::try_current() {
                Ok(handle)
                    if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread =>
                {
                    tokio::task::block_in_place(|| handle.block_on(settings.table_name(&scope)))
                        .map_or(true, |table| table.is_some())
                }
                _ => true,
            };
        }
        let db = self.config.data_dir.join(crate::storage::DB_FILE);
        if !db.exists() {
            return false;
        }
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        rusqlite::Connection::open_with_flags(&db, flags)
            .and_then(|c| {
                c.query_row(
                    "SELECT EXISTS (SELECT 1 FROM settings_tables WHERE plugin = ?1)",
                    [name],
                    |row| row.get::<_, bool>(0),
                )
            })
            .unwrap_or(true)
    }

    /// How long a call waits for a restarting plugin to be ready again.
    pub fn restart_wait(&self) -> Duration {
        self.config.restart_wait
    }

    /// The plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins
            .read()
            .unwrap()
            .iter()
            .find(|p| p.name() == name)
            .cloned()
    }

    /// The plugin one of whose processes has the session token `token` (host-service
    /// calls): a spawn token, or a redeemed attach token.
    pub fn plugin_for_token(&self, token: &str) -> Option<String> {
        let found = self.plugins.read().unwrap().iter().find_map(|p| {
            let s = p.status.lock().unwrap();
            s.by_token(token).map(|_| p.name().to_string())
        });
        found.or_else(|| self.attaching_plugin(token))
    }

    /// The loaded plugin an attach token not yet spent (and not expired) was issued for:
    /// a process started by hand makes host calls in its `start()` before it opens its
    /// session (the SDKs register what `start()` declared), as a spawned one does with
    /// its spawn token.
    fn attaching_plugin(&self, token: &str) -> Option<String> {
        let tickets = self.attach_tickets.lock().unwrap();
        let t = tickets
            .iter()
            .find(|t| !t.used && t.issued.elapsed() < t.ttl && same_secret(&t.token, token))?;
        self.plugin(&t.name).map(|_| t.name.clone())
    }

    /// Every loaded plugin, in load order.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        self.plugins.read().unwrap().clone()
    }

    fn existing(&self, name: &str) -> Result<Arc<Plugin>, PluginError> {
        self.plugin(name)
            .ok_or_else(|| PluginError::Unknown(name.into()))
    }

    /// Every plugin (including directories that failed to load), in load order.
    pub fn snapshots(&self) -> Vec<PluginSnapshot> {
        let mut out: Vec<_> = self
            .plugins
            .read()
            .unwrap()
            .iter()
            .map(|p| p.snapshot())
            .collect();
        out.extend(
            self.load_errors
                .lock()
                .unwrap()
                .iter()
                .map(|e| e.snapshot()),
        );
        out
    }

    /// Waits until `plugin` has a session newer than `generation`, or `wait` passes.
    async fn wait_fresh(
        &self,
        plugin: &Plugin,
        generation: u64,
        wait: Duration,
        what: &str,
    ) -> Result<PluginSnapshot, PluginError> {
        let mut rx = plugin.session.subscribe();
        let fresh = rx.wait_for(|s| s.as_ref().is_some_and(|s| s.generation() > generation));
        tokio::pin!(fresh);
        // A process started since that failed for good (a failed build, the crash
        // budget spent) ends the wait at once.
        let failed_since = || {
            let s = plugin.status.lock().unwrap();
            s.state == PluginState::Failed && s.generation > generation
        };
        let ready = tokio::time::timeout(wait, async {
            loop {
                tokio::select! {
                    r = &mut fresh => return r.is_ok(),
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {
                        if failed_since() {
                            return false;
                        }
                    }
                }
            }
        })
        .await
        .unwrap_or(false);
        if ready {
            // The new pid is in it: the spawner thread records it as soon as the exec
            // succeeded (process::spawn), and the process still has to start, dial and
            // handshake (3 ms for the quickest plugin) before it is fresh.
            return Ok(plugin.snapshot());
        }
        let s = plugin.status.lock().unwrap();
        if s.state == PluginState::Failed && s.generation > generation {
            return Err(PluginError::Failed {
                plugin: plugin.name().into(),
                what: format!("not ready after {what} ({})", state_reason(&s)),
            });
        }
        Err(PluginError::Failed {
            plugin: plugin.name().into(),
            what: format!(
                "not ready {} ms after {what} ({})",
                wait.as_millis(),
                state_reason(&s)
            ),
        })
    }

    fn op_wait(&self, spec: &PluginSpec) -> Duration {
        // A build step runs before the startup timeout starts (up to its own timeout).
        let build = if spec.build.is_some() {
            Duration::from_secs_f64(spec.build_timeout_s) + Duration::from_secs(5)
        } else {
            Duration::ZERO
        };
        Duration::from_secs_f64(spec.startup_timeout_s)
            + build
            + self.config.drain_timeout
            + self.config.shutdown_grace
            + TERM_GRACE
    }

    fn send(&self, plugin: &Plugin, control: Control) -> Result<(), PluginError> {
        plugin
            .control
            .send(control)
            .map_err(|_| PluginError::Failed {
                plugin: plugin.name().into(),
                what: "its supervisor has stopped".into(),
            })
    }

    /// The error for an operation on a plugin that a process attached by hand serves.
    fn refuse_attached(plugin: &Plugin, what: &str) -> Result<(), PluginError> {
        match plugin.attached_pid() {
            None => Ok(()),
            Some(pid) => Err(PluginError::Failed {
                plugin: plugin.name().into(),
                what: format!(
                    "a process attached by hand (pid {}) serves it: {what} that process yourself; once it disconnects the broker starts its own again",
                    if pid == 0 { "unknown".to_string() } else { pid.to_string() }
                ),
            }),
        }
    }

    /// Restarts `name` (also a failed one; calls in flight drain first) and waits
    /// until it registered again.
    pub async fn restart(&self, name: &str) -> Result<PluginSnapshot, PluginError> {
        let plugin = self.existing(name)?;
        Self::refuse_attached(&plugin, "restart")?;
        let generation = plugin.status.lock().unwrap().generation;
        self.send(&plugin, Control::Restart)?;
        self.wait_fresh(&plugin, generation, self.op_wait(&plugin.spec()), "restart")
            .await
    }

    /// Re-reads `name`'s directory and starts the new code and manifest (same name)
    /// beside the serving process. Once the new process registered, new calls go to
    /// it and the old one drains (bounded) and stops. If it ends or its session is
    /// refused first, the answer says why at once (exit status and the stderr line
    /// that explains it) and the old process keeps serving with its tools. A newer
    /// reload of the same plugin supersedes one in progress
    /// ([`PluginError::Superseded`]); reloads of different plugins are independent.
    ///
    /// An explicit reload (the operator asked for new code) always runs the manifest's
    /// `build` step, if it has one: the build tool's own up-to-date check decides, and
    /// edits outside the folder (an SDK checkout) are picked up.
    pub async fn reload(&self, name: &str) -> Result<PluginSnapshot, PluginError> {
        self.reload_with(name, true).await
    }

    /// [`Supervisor::reload`] after files in the plugin's folder changed (`--watch`):
    /// its `build` step runs only when the mtime rule says so (see [`build`]).
    pub async fn reload_on_change(&self, name: &str) -> Result<PluginSnapshot, PluginError> {
        self.reload_with(name, false).await
    }

    async fn reload_with(&self, name: &str, rebuild: bool) -> Result<PluginSnapshot, PluginError> {
        let plugin = self.existing(name)?;
        if plugin.is_adhoc() {
            return Err(PluginError::Failed {
                plugin: name.into(),
                what: "it is a process attached by hand, with no folder to reload from".into(),
            });
        }
        Self::refuse_attached(&plugin, "reload")?;
        let dir = plugin.spec().dir.clone();
        let spec = PluginSpec::load(&dir).map_err(|e| PluginError::Load {
            plugin: name.into(),
            reason: e.to_string(),
        })?;
        if spec.name != name {
            return Err(PluginError::Load {
                plugin: name.into(),
                reason: format!(
                    "its manifest now names it `{}`; unload it and load the directory instead",
                    spec.name
                ),
            });
        }
        let wait = self.op_wait(&spec);
        let (done, outcome) = tokio::sync::oneshot::channel();
        self.send(
            &plugin,
            Control::Reload {
                spec: Arc::new(spec),
                done: Some(done),
                rebuild,
            },
        )?;
        self.outcome(&plugin, outcome, wait, "reload").await?;
        Ok(plugin.snapshot())
    }

    /// Waits up to `wait` for the process an operation started to register.
    async fn outcome(
        &self,
        plugin: &Plugin,
        outcome: tokio::sync::oneshot::Receiver<Result<(), NotServing>>,
        wait: Duration,
        what: &str,
    ) -> Result<(), PluginError> {
        let failed = |what: String| PluginError::Failed {
            plugin: plugin.name().into(),
            what,
        };
        match tokio::time::timeout(wait, outcome).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(NotServing::Failed(why)))) => Err(failed(why)),
            Ok(Ok(Err(NotServing::Superseded(why)))) => Err(PluginError::Superseded {
                plugin: plugin.name().into(),
                why,
            }),
            Ok(Err(_)) => Err(failed("its supervisor has stopped".into())),
            Err(_) => {
                let s = plugin.status.lock().unwrap();
                Err(failed(format!(
                    "not ready {} ms after {what} ({})",
                    wait.as_millis(),
                    state_reason(&s)
                )))
            }
        }
    }

    /// Loads the plugin in `dir` and waits until it registered. A directory that is
    /// refused, or whose first process ends before it registered, leaves nothing
    /// behind: the error says why (for a process, its exit status and the stderr line
    /// that explains it).
    pub async fn load_and_wait(&self, dir: &Path) -> Result<PluginSnapshot, PluginError> {
        let (first, outcome) = tokio::sync::oneshot::channel();
        let plugin = self.load_with(dir, false, Some(first))?;
        let wait = self.op_wait(&plugin.spec());
        if let Err(e) = self.outcome(&plugin, outcome, wait, "load").await {
            tracing::error!(plugin = %plugin.name(), "not loaded: {e}");
            self.stop_and_forget(&plugin).await;
            return Err(match e {
                PluginError::Failed { plugin, what } => PluginError::Failed {
                    plugin,
                    what: format!("not loaded: {what}"),
                },
                other => other,
            });
        }
        Ok(plugin.snapshot())
    }

    /// Stops `name` (calls in flight drain first, bounded), removes its tools and
    /// forgets it. A name that is only listed as a directory that failed to load is
    /// taken off the list.
    pub async fn unload(&self, name: &str) -> Result<PluginSnapshot, PluginError> {
        let Some(plugin) = self.plugin(name) else {
            let mut errors = self.load_errors.lock().unwrap();
            return match errors.iter().position(|e| e.name == name) {
                Some(at) => Ok(errors.remove(at).snapshot()),
                None => Err(PluginError::Unknown(name.into())),
            };
        };
        self.stop_and_forget(&plugin).await;
        Ok(plugin.snapshot())
    }

    async fn stop_and_forget(&self, plugin: &Arc<Plugin>) {
        let _ = self.send(plugin, Control::Stop);
        plugin.join().await;
        self.forget(plugin);
    }

    /// Takes `plugin` off the list, with its tools, hooks and triggers.
    fn forget(&self, plugin: &Arc<Plugin>) {
        let order = {
            let mut plugins = self.plugins.write().unwrap();
            let before = plugins.len();
            plugins.retain(|p| !Arc::ptr_eq(p, plugin));
            if plugins.len() == before {
                return; // forgotten already
            }
            plugins.iter().map(|p| p.name().to_string()).collect()
        };
        self.registry.set_plugin_order(order);
        self.registry.remove_plugin(plugin.name());
    }

    /// Issues a one-time token with which a process started by hand (a debugger, an
    /// IDE) attaches as plugin `name`, like go-plugin's reattach: it dials `addr` with
    /// `HEARTH_TOKEN=token` (and `HEARTH_PLUGIN=name`). If `name` is loaded, its own
    /// process drains and stops once the attached one registered, the attached one
    /// serves with the manifest's capabilities and settings, and the broker starts its
    /// own again when it disconnects; else the attached process is an ad-hoc plugin
    /// with default capabilities, gone when it disconnects. The token serves one
    /// session and expires unused after `ttl` (default [`ATTACH_TOKEN_TTL`]).
    pub fn attach_token(
        &self,
        name: &str,
        ttl: Option<Duration>,
    ) -> Result<AttachGrant, PluginError> {
        crate::manifest::check_name(name).map_err(|reason| PluginError::Load {
            plugin: name.into(),
            reason,
        })?;
        let ttl = ttl
            .filter(|t| !t.is_zero())
            .unwrap_or(ATTACH_TOKEN_TTL)
            .min(ATTACH_TOKEN_MAX_TTL);
        let token = random_token();
        {
            let mut tickets = self.attach_tickets.lock().unwrap();
            // Used and expired tokens are kept a while to say so; then forgotten.
            tickets.retain(|t| t.issued.elapsed() < t.ttl + ATTACH_TOKEN_TTL);
            tickets.push(AttachTicket {
                token: token.clone(),
                name: name.into(),
                issued: Instant::now(),
                ttl,
                used: false,
            });
        }
        tracing::info!(plugin = %name, "attach token issued (one use, expires in {} s)", ttl.as_secs());
        Ok(AttachGrant {
            name: name.into(),
            addr: self.config.addr.clone(),
            token,
            expires_in: ttl,
            loaded: self.plugin(name).is_some_and(|p| !p.is_adhoc()),
        })
    }

    /// Whether `token` is an attach token this broker issued (valid, used or expired):
    /// the session interceptor lets it through so that [`Supervisor::attach`] can say
    /// what is wrong with it.
    pub fn is_attach_token(&self, token: &str) -> bool {
        self.attach_tickets
            .lock()
            .unwrap()
            .iter()
            .any(|t| same_secret(&t.token, token))
    }

    /// Spends the attach token `token`; returns its plugin name. UNAUTHENTICATED for an
    /// unknown, used or expired one.
    fn redeem_attach_token(&self, token: &str) -> Result<String, tonic::Status> {
        let mut tickets = self.attach_tickets.lock().unwrap();
        let Some(t) = tickets.iter_mut().find(|t| same_secret(&t.token, token)) else {
            return Err(tonic::Status::unauthenticated(
                "x-hearth-token does not match any plugin the broker started (wrong or stale token)",
            ));
        };
        if t.used {
            return Err(tonic::Status::unauthenticated(format!(
                "this attach token for plugin {} was used already: a token attaches one process once; get a new one with `hearth plugins attach-token {}`",
                t.name, t.name
            )));
        }
        if t.issued.elapsed() >= t.ttl {
            return Err(tonic::Status::unauthenticated(format!(
                "this attach token for plugin {} expired: it was not used within {} s; get a new one with `hearth plugins attach-token {}`",
                t.name,
                t.ttl.as_secs(),
                t.name
            )));
        }
        t.used = true;
        Ok(t.name.clone())
    }

    /// The plugin `name` with a new instance for an attached process (creating an
    /// ad-hoc plugin when none is loaded), and that instance's generation.
    fn admit_attached(&self, name: &str, token: &str, pid: Option<u32>) -> (Arc<Plugin>, u64) {
        let mut plugins = self.plugins.write().unwrap();
        if let Some(p) = plugins.iter().find(|p| p.name() == name) {
            let generation = p.admit_attached(token, pid);
            return (p.clone(), generation);
        }
        let (plugin, control) =
            Plugin::new(PluginSpec::attached(name), self.registry.clone(), true);
        let generation = plugin.admit_attached(token, pid);
        plugins.push(plugin.clone());
        self.registry
            .set_plugin_order(plugins.iter().map(|p| p.name().to_string()).collect());
        plugin.start(self.config.clone(), control, None);
        (plugin, generation)
    }

    /// Stops every plugin (Shutdown, grace, SIGTERM, SIGKILL of each group) and
    /// waits for their supervision tasks.
    pub async fn shutdown(&self) {
        self.shutdown_by(tokio::time::Instant::now() + self.config.drain_timeout)
            .await
    }

    /// [`Supervisor::shutdown`] with calls in flight drained until `deadline` at the
    /// latest (the broker's stop: the time turns already drained counts).
    pub async fn shutdown_by(&self, deadline: tokio::time::Instant) {
        let _ = self.config.stop_deadline.set(deadline);
        let plugins: Vec<_> = self.plugins.read().unwrap().clone();
        for p in &plugins {
            let _ = p.control.send(Control::Stop);
        }
        for p in &plugins {
            p.join().await;
        }
    }
}
