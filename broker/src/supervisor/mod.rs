//! The supervisor: spawns each plugin, runs its session handshake, watches the
//! process, fails in-flight calls when it dies, restarts it within its crash budget,
//! and stops it politely then firmly. Hot operations (load, unload, reload) happen
//! while other plugins keep serving.
//!
//! Each plugin has one task ([`plugin`]) that owns its child process; everything else
//! talks to it through a control channel. Plugin state sits behind one lock per
//! plugin; the live session is published on a `watch` channel that callers wait on
//! while a plugin restarts.

mod handshake;
pub mod plugin;
pub mod process;
pub mod reaper;
pub mod session;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use hearth_proto::v1::{EventDone, HandleEvent, PluginState, Sender, ToolResult};

use crate::error::{CallError, PluginError};
use crate::manifest::PluginSpec;
use crate::registry::Registry;
pub use handshake::same_secret;
use plugin::{state_reason, Control, TERM_GRACE};
pub use plugin::{Plugin, PluginSnapshot};
use process::Interpreters;
use reaper::Reaper;
use session::InvokeError;

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
    /// be loaded (bad manifest, name in use) is logged and listed as failed; it never
    /// stops the broker. The error says why.
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
        self.load_errors
            .lock()
            .unwrap()
            .retain(|e| e.dir != spec.dir.display().to_string());
        let (plugin, control) = Plugin::new(spec, self.registry.clone());
        plugins.push(plugin.clone());
        plugin.start(self.config.clone(), control);
        Ok(plugin)
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
                }),
        );
        out
    }

    /// Routes one tool call: looks the tool up, validates `args_json` against its
    /// schema (without calling the plugin on a violation), waits up to
    /// `restart_wait` for a restarting plugin, and calls it with the timeout
    /// `timeout` (else the tool's `ai.tool` timeout, else the plugin's
    /// `call_timeout_s`). A call that never reached a plugin process is retried on
    /// its next process; a call that reached one is never sent twice.
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
        let spec = plugin.spec();
        let timeout = timeout.unwrap_or_else(|| {
            let policy = tool
                .ai_tool
                .as_ref()
                .map(|a| a.timeout_s)
                .filter(|t| *t > 0.0);
            Duration::from_secs_f64(policy.unwrap_or(spec.call_timeout_s))
        });
        let max_total = Duration::from_secs_f64(spec.max_total_s);
        let wait_until = tokio::time::Instant::now() + self.config.restart_wait;
        loop {
            let wait = wait_until.saturating_duration_since(tokio::time::Instant::now());
            let session = plugin.ready_session(name, wait).await?;
            match session
                .invoke(
                    name,
                    args_text.to_string(),
                    sender.clone(),
                    timeout,
                    max_total,
                )
                .await
            {
                Ok(result) => return Ok((tool.plugin.clone(), result)),
                Err(InvokeError::Failed(e)) => return Err(e),
                Err(InvokeError::NotSent(reason)) => {
                    tracing::debug!(plugin = %tool.plugin, tool = name, "not sent ({reason}); waiting for the next process");
                    // The published session is cleared as the old one closes; wait
                    // for its replacement (bounded by restart_wait).
                    let mut rx = plugin.session.subscribe();
                    let stale = session.generation();
                    let _ = tokio::time::timeout(
                        wait_until.saturating_duration_since(tokio::time::Instant::now()),
                        rx.wait_for(|s| s.as_ref().is_none_or(|s| s.generation() != stale)),
                    )
                    .await;
                    if tokio::time::Instant::now() >= wait_until {
                        return Err(CallError::NotReady {
                            plugin: tool.plugin.clone(),
                            tool: name.into(),
                            reason: format!(
                                "{reason}, and no new process was ready within {} ms",
                                self.config.restart_wait.as_millis()
                            ),
                        });
                    }
                }
            }
        }
    }

    /// Delivers a matched trigger to `plugin` as `HandleEvent` (LinkZone
    /// `handleEvent`): waits up to `restart_wait` for a restarting plugin, forwards
    /// each `sender.reply` text to `texts` as it arrives, and returns the plugin's
    /// `EventDone` (whose `error` is the handler's failure, if any). The timeout is the
    /// plugin's `call_timeout_s`, extended by each reply or `Progress` up to
    /// `max_total_s`. Errors: unknown plugin, not ready, timeout, plugin gone.
    pub async fn handle_event(
        &self,
        plugin: &str,
        event: HandleEvent,
        texts: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> Result<EventDone, CallError> {
        // Errors read "plugin P is not ready for tool event handler of `/weather`: …".
        let what = format!(
            "event handler of `{}`",
            event.trigger.as_ref().map_or("", |t| t.pattern.as_str())
        );
        let what = what.as_str();
        let p = self.plugin(plugin).ok_or_else(|| CallError::NotReady {
            plugin: plugin.into(),
            tool: what.into(),
            reason: "it is not loaded".into(),
        })?;
        let spec = p.spec();
        let session = p.ready_session(what, self.config.restart_wait).await?;
        session
            .handle_event(
                event,
                texts,
                Duration::from_secs_f64(spec.call_timeout_s),
                Duration::from_secs_f64(spec.max_total_s),
            )
            .await
            .map_err(|e| match e {
                InvokeError::Failed(e) => e,
                InvokeError::NotSent(reason) => CallError::NotReady {
                    plugin: plugin.into(),
                    tool: what.into(),
                    reason,
                },
            })
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
        self.plugins
            .write()
            .unwrap()
            .retain(|p| !Arc::ptr_eq(p, &plugin));
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
