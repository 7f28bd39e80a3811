//! The supervisor: spawns each plugin, runs its session handshake, watches the
//! process, fails in-flight calls when it dies, restarts it within its crash budget,
//! and stops it politely then firmly. Hot operations (load, unload, reload) happen
//! while other plugins keep serving.
//!
//! Each plugin has one task ([`plugin`]) that owns its child process; everything else
//! talks to it through a control channel. Plugin state sits behind one lock per
//! plugin; the live session is published on a `watch` channel that callers wait on
//! while a plugin restarts.
//!
//! The supervisor only runs processes. Calls to plugins — tools, stage hooks, event
//! handlers — are routed by [`crate::router::ToolRouter`], which reaches a plugin's
//! session through [`Plugin::ready_session`].

mod handshake;
pub mod homes;
pub mod plugin;
pub mod process;
pub mod reaper;
pub mod sandbox;
pub mod session;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use hearth_proto::v1::PluginState;

use crate::error::PluginError;
use crate::manifest::PluginSpec;
use crate::registry::Registry;
pub use handshake::same_secret;
use plugin::{state_reason, Control, TERM_GRACE};
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

/// All plugins of the broker.
pub struct Supervisor {
    config: Arc<SupervisorConfig>,
    registry: Arc<Registry>,
    /// Where `Register.config_defs` are stored (set once storage is open).
    settings: std::sync::OnceLock<crate::storage::Settings>,
    plugins: RwLock<Vec<Arc<Plugin>>>,
    load_errors: Mutex<Vec<LoadError>>,
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
        let _ = self.settings.set(settings);
    }

    /// Loads the plugin in `dir` and starts supervising it. A directory that cannot
    /// be loaded (bad manifest, name in use, folder writable by group or others, name
    /// owned by another folder — see [`homes`]) is logged and listed as failed; it
    /// never stops the broker. The error says why.
    pub fn load(&self, dir: &Path) -> Result<Arc<Plugin>, PluginError> {
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let remember = |name: String, reason: String| {
            tracing::error!(plugin = %name, "not loaded: {reason}");
            let mut errors = self.load_errors.lock().unwrap();
            errors.retain(|e| e.dir != dir.display().to_string());
            errors.push(LoadError {
                name: name.clone(),
                dir: dir.display().to_string(),
                reason: reason.clone(),
            });
            PluginError::Load {
                plugin: name,
                reason,
            }
        };
        let spec = PluginSpec::load(dir).map_err(|e| remember(dir_name.clone(), e.to_string()))?;
        let mut plugins = self.plugins.write().unwrap();
        if let Some(other) = plugins.iter().find(|p| p.name() == spec.name) {
            let reason = format!(
                "plugin name `{}` is already used by {}",
                spec.name,
                other.spec().dir.display()
            );
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
        let (plugin, control) = Plugin::new(spec, self.registry.clone());
        plugins.push(plugin.clone());
        self.registry
            .set_plugin_order(plugins.iter().map(|p| p.name().to_string()).collect());
        plugin.start(self.config.clone(), control);
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

    /// The plugin whose current spawn token is `token` (host-service calls).
    pub fn plugin_for_token(&self, token: &str) -> Option<String> {
        self.plugins.read().unwrap().iter().find_map(|p| {
            let s = p.status.lock().unwrap();
            (!s.token.is_empty() && same_secret(&s.token, token)).then(|| p.name().to_string())
        })
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
                    sandbox: sandbox::SandboxState::Pending,
                }),
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
        let ready = tokio::time::timeout(wait, fresh)
            .await
            .map(|r| r.is_ok())
            .unwrap_or(false);
        if ready {
            return Ok(plugin.snapshot());
        }
        let s = plugin.status.lock().unwrap();
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
        Duration::from_secs_f64(spec.startup_timeout_s)
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

    /// Restarts `name` (also a failed one; calls in flight drain first) and waits
    /// until it registered again.
    pub async fn restart(&self, name: &str) -> Result<PluginSnapshot, PluginError> {
        let plugin = self.existing(name)?;
        let generation = plugin.status.lock().unwrap().generation;
        self.send(&plugin, Control::Restart)?;
        self.wait_fresh(&plugin, generation, self.op_wait(&plugin.spec()), "restart")
            .await
    }

    /// Re-reads `name`'s directory and restarts it with the new code and manifest
    /// (same name); calls in flight finish on the old process first (bounded).
    pub async fn reload(&self, name: &str) -> Result<PluginSnapshot, PluginError> {
        let plugin = self.existing(name)?;
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
        let generation = plugin.status.lock().unwrap().generation;
        let wait = self.op_wait(&spec);
        self.send(&plugin, Control::Reload(Arc::new(spec)))?;
        self.wait_fresh(&plugin, generation, wait, "reload").await
    }

    /// Loads the plugin in `dir` and waits until it registered.
    pub async fn load_and_wait(&self, dir: &Path) -> Result<PluginSnapshot, PluginError> {
        let plugin = self.load(dir)?;
        let wait = self.op_wait(&plugin.spec());
        self.wait_fresh(&plugin, 0, wait, "load").await
    }

    /// Stops `name` (calls in flight drain first, bounded), removes its tools and
    /// forgets it.
    pub async fn unload(&self, name: &str) -> Result<PluginSnapshot, PluginError> {
        let plugin = self.existing(name)?;
        self.send(&plugin, Control::Stop)?;
        plugin.join().await;
        let order = {
            let mut plugins = self.plugins.write().unwrap();
            plugins.retain(|p| !Arc::ptr_eq(p, &plugin));
            plugins.iter().map(|p| p.name().to_string()).collect()
        };
        self.registry.set_plugin_order(order);
        self.registry.remove_plugin(name);
        Ok(plugin.snapshot())
    }

    /// Stops every plugin (Shutdown, grace, SIGTERM, SIGKILL of each group) and
    /// waits for their supervision tasks.
    pub async fn shutdown(&self) {
        let plugins: Vec<_> = self.plugins.read().unwrap().clone();
        for p in &plugins {
            let _ = p.control.send(Control::Stop);
        }
        for p in &plugins {
            p.join().await;
        }
    }
}
