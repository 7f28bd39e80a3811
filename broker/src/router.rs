//! The tool router: every call the broker makes to a plugin — a tool, a stage hook, a
//! LinkZone event handler — goes through here, between the agent (or the Admin
//! service) and the supervisor, which only runs processes.
//!
//! For each call the router
//! - looks the tool up and checks its arguments against the tool's schema once
//!   ([`ToolRouter::prepare`]); a violation is an error naming the argument, and the
//!   plugin is not called;
//! - applies the timeout policy: the caller's timeout, else the tool's `ai.tool`
//!   `timeout`, else the plugin's `call_timeout_s`;
//! - respects the plugin's `max_concurrency` (manifest): beyond it a call waits for a
//!   free slot, at most its timeout ([`CallError::Saturated`]);
//! - waits up to `restart_wait` (hooks: their timeout, if shorter) for a restarting
//!   plugin, and sends a call that never reached the old process to the next one — a
//!   call that reached a process is never sent twice.
//!
//! Errors name the plugin and what was called ([`crate::error::Target`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_proto::v1::{EventDone, HandleEvent, Sender, StageContext, StageResult, ToolResult};
use serde_json::Value;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::{CallError, Target};
use crate::observe::metrics::{CallRecord, Outcome};
use crate::registry::{Hook, Registry, Tool};
use crate::remote::hub::Hub;
use crate::supervisor::plugin::Plugin;
use crate::supervisor::session::{InvokeError, ProgressSink, Session};
use crate::supervisor::Supervisor;

/// A plugin's `max_concurrency` slots (absent when it has no cap).
#[derive(Debug)]
struct Slots {
    max: u32,
    semaphore: Arc<Semaphore>,
}

/// Routes calls to plugins (see the module docs). Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct ToolRouter {
    supervisor: Arc<Supervisor>,
    /// Per plugin, by name; rebuilt when its `max_concurrency` changes (a reload).
    slots: Mutex<HashMap<String, Arc<Slots>>>,
    /// Plugin hosts over NATS (`--nats`), once connected.
    remote: std::sync::OnceLock<Arc<Hub>>,
}

impl ToolRouter {
    /// A router for `supervisor`'s plugins.
    pub fn new(supervisor: Arc<Supervisor>) -> ToolRouter {
        ToolRouter {
            supervisor,
            slots: Mutex::new(HashMap::new()),
            remote: std::sync::OnceLock::new(),
        }
    }

    /// Routes calls of plugins served by plugin hosts over NATS through `hub` from now
    /// on (set once; later calls are ignored).
    pub fn set_remote(&self, hub: Arc<Hub>) {
        let _ = self.remote.set(hub);
    }

    /// The NATS hub, when the broker has one.
    pub fn remote(&self) -> Option<&Arc<Hub>> {
        self.remote.get()
    }

    /// The hub to send a call of `plugin` through, when it goes remote: the plugin is
    /// not loaded here, or it is loaded but not ready while a node serves it (a ready
    /// local process is always preferred: no hop).
    fn remote_route(&self, plugin: &str) -> Option<&Arc<Hub>> {
        let hub = self.remote.get()?;
        match self.supervisor.plugin(plugin) {
            None => Some(hub),
            Some(p) if p.serving_session().is_none() && hub.serves(plugin) => Some(hub),
            Some(_) => None,
        }
    }

    /// The supervisor whose plugins are called.
    pub fn supervisor(&self) -> &Arc<Supervisor> {
        &self.supervisor
    }

    /// The registry of tools, hooks and triggers.
    pub fn registry(&self) -> &Arc<Registry> {
        self.supervisor.registry()
    }

    /// Looks `name` up and checks `args` (must be a JSON object) against its schema.
    /// Errors: [`CallError::UnknownTool`], [`CallError::InvalidArguments`] naming the
    /// argument.
    pub fn prepare(&self, name: &str, args: &Value) -> Result<Arc<Tool>, CallError> {
        let tool = self
            .registry()
            .get(name)
            .ok_or_else(|| CallError::UnknownTool { tool: name.into() })?;
        if !args.is_object() {
            return Err(CallError::InvalidArguments {
                tool: name.into(),
                message: format!("arguments must be a JSON object, got {args}"),
            });
        }
        tool.schema
            .validate(args)
            .map_err(|message| CallError::InvalidArguments {
                tool: name.into(),
                message,
            })?;
        Ok(tool)
    }

    /// Parses `args_json` (empty = `{}`), [`ToolRouter::prepare`]s and
    /// [`ToolRouter::call`]s tool `name`: the Admin service's path. Returns the
    /// owning plugin's name with the result.
    pub async fn call_json(
        &self,
        name: &str,
        args_json: &str,
        timeout: Option<Duration>,
        sender: Option<Sender>,
        progress: Option<ProgressSink>,
    ) -> Result<(String, ToolResult), CallError> {
        let text = if args_json.trim().is_empty() {
            "{}"
        } else {
            args_json
        };
        let prepared = serde_json::from_str(text)
            .map_err(|e| CallError::InvalidArguments {
                tool: name.into(),
                message: format!("arguments are not valid JSON: {e}"),
            })
            .and_then(|args: Value| self.prepare(name, &args));
        let tool = match prepared {
            Ok(tool) => tool,
            Err(e) => {
                let label = crate::observe::metrics::tool_label(self.registry(), name);
                if let Some(mut r) = CallRecord::start(label) {
                    r.finish(Outcome::InvalidArgs);
                }
                return Err(e);
            }
        };
        let result = self
            .call_with_progress(&tool, text.to_string(), timeout, sender, progress)
            .await?;
        Ok((tool.plugin.clone(), result))
    }

    /// Calls a prepared `tool` with `args_json` (its checked arguments as JSON
    /// text). `timeout`: else the tool's `ai.tool` `timeout`, else the plugin's
    /// `call_timeout_s`; `Progress` extends it up to the plugin's `max_total_s`.
    pub async fn call(
        &self,
        tool: &Tool,
        args_json: String,
        timeout: Option<Duration>,
        sender: Option<Sender>,
    ) -> Result<ToolResult, CallError> {
        self.call_with_progress(tool, args_json, timeout, sender, None)
            .await
    }

    /// [`ToolRouter::call`], with the plugin's progress reports sent to `progress`.
    /// Records the call's metrics (`hearth_tool_calls_total` …) when they are on.
    pub async fn call_with_progress(
        &self,
        tool: &Tool,
        args_json: String,
        timeout: Option<Duration>,
        sender: Option<Sender>,
        progress: Option<ProgressSink>,
    ) -> Result<ToolResult, CallError> {
        use tracing::Instrument as _;
        let mut record = CallRecord::start(&tool.name);
        // Log lines written during the call name it (`--log-format json`: under "span").
        let span = tracing::info_span!(
            "tool_call",
            plugin = %tool.plugin,
            tool = %tool.name,
            call_id = tracing::field::Empty,
            conversation = sender.as_ref().map_or("", |s| s.session_id.as_str()),
            trace_id = crate::observe::trace::current_trace_id().unwrap_or_default(),
        );
        let result = self
            .call_inner(tool, args_json, timeout, sender, progress)
            .instrument(span.clone())
            .await;
        let outcome = Outcome::of(&result);
        span.in_scope(|| tracing::debug!(outcome = outcome.as_str(), "tool call answered"));
        if let Some(r) = record.as_mut() {
            r.finish(outcome);
        }
        result
    }

    async fn call_inner(
        &self,
        tool: &Tool,
        args_json: String,
        timeout: Option<Duration>,
        sender: Option<Sender>,
        progress: Option<ProgressSink>,
    ) -> Result<ToolResult, CallError> {
        let target = Target::Tool(tool.name.clone());
        let policy = tool
            .ai_tool
            .as_ref()
            .map(|a| a.timeout_s)
            .filter(|t| *t > 0.0 && t.is_finite());
        let wait = self.supervisor.restart_wait();
        let name = tool.name.as_str();
        if let Some(hub) = self.remote_route(&tool.plugin) {
            let (call_timeout_s, max_total_s) = remote_timeouts(hub, &tool.plugin);
            let timeout = timeout
                .unwrap_or_else(|| Duration::from_secs_f64(policy.unwrap_or(call_timeout_s)));
            let max_total = Duration::from_secs_f64(max_total_s);
            let plugin = tool.plugin.as_str();
            return dispatch_remote(hub, plugin, &target, wait, |attempt| {
                hub.invoke(
                    plugin,
                    name,
                    args_json.clone(),
                    sender.clone(),
                    timeout,
                    max_total,
                    progress.clone(),
                    attempt,
                )
            })
            .await;
        }
        let plugin = self.plugin(&tool.plugin, &target)?;
        let spec = plugin.spec();
        let timeout = timeout
            .unwrap_or_else(|| Duration::from_secs_f64(policy.unwrap_or(spec.call_timeout_s)));
        let max_total = Duration::from_secs_f64(spec.max_total_s);
        self.dispatch(&plugin, &target, timeout, wait, |session| {
            let args_json = args_json.clone();
            let sender = sender.clone();
            let progress = progress.clone();
            async move {
                session
                    .invoke(name, args_json, sender, timeout, max_total, progress)
                    .await
            }
        })
        .await
    }

    /// Runs stage hook `hook` on `context` within `timeout` (which also bounds the
    /// wait for a restarting plugin and for a `max_concurrency` slot).
    pub async fn run_stage(
        &self,
        hook: &Hook,
        context: StageContext,
        timeout: Duration,
    ) -> Result<StageResult, CallError> {
        let target = Target::Hook {
            stage: hook.stage,
            hook_id: hook.hook_id.clone(),
        };
        let wait = self.supervisor.restart_wait().min(timeout);
        if let Some(hub) = self.remote_route(&hook.plugin) {
            let plugin = hook.plugin.as_str();
            return dispatch_remote(hub, plugin, &target, wait, |attempt| {
                hub.run_stage(
                    plugin,
                    hook.stage,
                    &hook.hook_id,
                    context.clone(),
                    timeout,
                    attempt,
                )
            })
            .await;
        }
        let plugin = self.plugin(&hook.plugin, &target)?;
        self.dispatch(&plugin, &target, timeout, wait, |session| {
            let context = context.clone();
            async move {
                session
                    .run_stage(hook.stage, &hook.hook_id, context, timeout)
                    .await
            }
        })
        .await
    }

    /// Delivers a matched trigger to `plugin` as `HandleEvent` (LinkZone
    /// `handleEvent`), forwarding each `sender.reply` text to `texts` as it arrives;
    /// returns the plugin's `EventDone` (whose `error` is the handler's failure, if
    /// any). The timeout is the plugin's `call_timeout_s`, extended by each reply or
    /// `Progress` up to `max_total_s`.
    pub async fn handle_event(
        &self,
        plugin: &str,
        event: HandleEvent,
        texts: mpsc::UnboundedSender<String>,
    ) -> Result<EventDone, CallError> {
        let target = Target::Event {
            trigger: event
                .trigger
                .as_ref()
                .map(|t| t.pattern.clone())
                .unwrap_or_default(),
        };
        let wait = self.supervisor.restart_wait();
        if let Some(hub) = self.remote_route(plugin) {
            let (call_timeout_s, max_total_s) = remote_timeouts(hub, plugin);
            let timeout = Duration::from_secs_f64(call_timeout_s);
            let max_total = Duration::from_secs_f64(max_total_s);
            return dispatch_remote(hub, plugin, &target, wait, |attempt| {
                hub.handle_event(
                    plugin,
                    event.clone(),
                    texts.clone(),
                    timeout,
                    max_total,
                    attempt,
                )
            })
            .await;
        }
        let p = self.plugin(plugin, &target)?;
        let spec = p.spec();
        let timeout = Duration::from_secs_f64(spec.call_timeout_s);
        let max_total = Duration::from_secs_f64(spec.max_total_s);
        self.dispatch(&p, &target, timeout, wait, |session| {
            let event = event.clone();
            let texts = texts.clone();
            async move { session.handle_event(event, texts, timeout, max_total).await }
        })
        .await
    }

    fn plugin(&self, name: &str, target: &Target) -> Result<Arc<Plugin>, CallError> {
        self.supervisor
            .plugin(name)
            .ok_or_else(|| CallError::NotReady {
                plugin: name.into(),
                target: target.clone(),
                reason: "it is not loaded".into(),
            })
    }

    /// A `max_concurrency` slot of `plugin`, waiting at most `timeout`; `None` when
    /// the plugin has no cap.
    async fn slot(
        &self,
        plugin: &Plugin,
        target: &Target,
        timeout: Duration,
    ) -> Result<Option<OwnedSemaphorePermit>, CallError> {
        let max = plugin.spec().max_concurrency;
        if max == 0 {
            return Ok(None);
        }
        let slots = {
            let mut map = self.slots.lock().unwrap();
            let entry = map.entry(plugin.name().to_string()).or_insert_with(|| {
                Arc::new(Slots {
                    max,
                    semaphore: Arc::new(Semaphore::new(max as usize)),
                })
            });
            if entry.max != max {
                *entry = Arc::new(Slots {
                    max,
                    semaphore: Arc::new(Semaphore::new(max as usize)),
                });
            }
            entry.clone()
        };
        if let Ok(permit) = slots.semaphore.clone().try_acquire_owned() {
            return Ok(Some(permit));
        }
        let started = Instant::now();
        match tokio::time::timeout(timeout, slots.semaphore.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            // The semaphore is never closed; treat it like a timeout all the same.
            Ok(Err(_)) | Err(_) => Err(CallError::Saturated {
                plugin: plugin.name().into(),
                target: target.clone(),
                max_concurrency: max,
                waited_ms: started.elapsed().as_millis() as u64,
            }),
        }
    }

    /// Takes a slot, then runs `send` on the plugin's ready session; a call that was
    /// never sent (the session had just ended) is sent again on the next process, as
    /// long as one is ready within `wait`.
    async fn dispatch<T, F, Fut>(
        &self,
        plugin: &Plugin,
        target: &Target,
        timeout: Duration,
        wait: Duration,
        send: F,
    ) -> Result<T, CallError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T, InvokeError>>,
    {
        let _slot = self.slot(plugin, target, timeout).await?;
        let wait_until = Instant::now() + wait;
        loop {
            let left = wait_until.saturating_duration_since(Instant::now());
            let session = plugin.ready_session(target, left).await?;
            match send(session.clone()).await {
                Ok(reply) => return Ok(reply),
                Err(InvokeError::Failed(e)) => return Err(e),
                Err(InvokeError::NotSent(reason) | InvokeError::Refused(reason)) => {
                    tracing::debug!(plugin = %plugin.name(), %target, "not sent ({reason}); waiting for the next process");
                    plugin
                        .session_replaced(session.generation(), wait_until)
                        .await;
                    if Instant::now() >= wait_until {
                        return Err(CallError::NotReady {
                            plugin: plugin.name().into(),
                            target: target.clone(),
                            reason: format!(
                                "{reason}, and no new process was ready within {} ms",
                                wait.as_millis()
                            ),
                        });
                    }
                }
            }
        }
    }
}

/// `(call_timeout_s, max_total_s)` of a remote plugin, as its node announced them (the
/// manifest defaults, 30 s and 600 s, before any announcement is known).
fn remote_timeouts(hub: &Hub, plugin: &str) -> (f64, f64) {
    let valid = |t: f64| t.is_finite() && t > 0.0;
    match hub.timeouts(plugin) {
        Some((call, total)) if valid(call) && valid(total) => (call, total),
        _ => (30.0, 600.0),
    }
}

/// Sends a call of `plugin` through the NATS hub: waits up to `wait` for a node to
/// serve it, and sends it again (attempt 2, 3 …) while it never reached a plugin
/// (no-responders, `NotRun`), until a node takes it or `wait` is over. A call that
/// reached a node is never sent twice.
async fn dispatch_remote<T, F, Fut>(
    hub: &Hub,
    plugin: &str,
    target: &Target,
    wait: Duration,
    send: F,
) -> Result<T, CallError>
where
    F: Fn(u32) -> Fut,
    Fut: Future<Output = Result<T, InvokeError>>,
{
    let wait_until = Instant::now() + wait;
    let mut attempt = 1u32;
    let mut refused = 0usize;
    let mut last: Option<String> = None;
    loop {
        if !hub.wait_for_instance(plugin, wait_until).await {
            return Err(CallError::NotReady {
                plugin: plugin.into(),
                target: target.clone(),
                reason: match last {
                    Some(last) => format!(
                        "{last}, and no plugin host took it within {} ms",
                        wait.as_millis()
                    ),
                    None => format!(
                        "it is not loaded here and no plugin host served it within {} ms",
                        wait.as_millis()
                    ),
                },
            });
        }
        let outcome = send(attempt).await;
        if let Err(InvokeError::Refused(reason)) = &outcome {
            // The server picks a random member of the queue group each time, so a call
            // only one of N nodes can run is refused N-1 times in N on average; when
            // every instance refuses (no node has the tool), stop after enough tries
            // that an instance which could run it would have been picked.
            refused += 1;
            if refused > 16 * hub.instances(plugin).len().max(1) {
                return Err(CallError::NotReady {
                    plugin: plugin.into(),
                    target: target.clone(),
                    reason: format!(
                        "{reason} ({} by plugin hosts; not sent again)",
                        crate::term::count(refused, "refusal", "refusals")
                    ),
                });
            }
        }
        let back_off = matches!(outcome, Err(InvokeError::NotSent(_)));
        match outcome {
            Ok(reply) => return Ok(reply),
            Err(InvokeError::Failed(e)) => return Err(e),
            Err(InvokeError::NotSent(reason) | InvokeError::Refused(reason)) => {
                tracing::debug!(plugin, %target, attempt, "not run remotely ({reason}); trying again");
                if Instant::now() >= wait_until {
                    return Err(CallError::NotReady {
                        plugin: plugin.into(),
                        target: target.clone(),
                        reason: format!(
                            "{reason}, and no plugin host took it within {} ms",
                            wait.as_millis()
                        ),
                    });
                }
                last = Some(reason);
                // No node subscribed, or the one that got it is not ready (leaving the
                // queue group, restarting): back off a little. A refusal is sent again
                // at once: the server picks another member.
                if back_off {
                    let pause = Duration::from_millis((5 * u64::from(attempt)).min(100));
                    tokio::time::sleep_until((Instant::now() + pause).min(wait_until)).await;
                }
                attempt += 1;
            }
        }
    }
}
