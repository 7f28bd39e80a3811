//! [`Harness`]: one plugin served in process to a [`FakeBroker`], driven as the broker
//! drives it: tool calls with the broker's argument check, stage hooks through the
//! permission matrix, trigger events with their replies.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_proto::v1::{
    self as pb, host_message::Msg as In, plugin_message::Msg as Out, Stage, StageContext,
};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tonic::{Status, Streaming};

use super::broker::{FakeBroker, DEFAULT_WAIT};
use super::host::FakeHost;
use super::registration::{self, HookInfo, ToolInfo};
use super::schema::ArgsSchema;
use super::triggers::{Match, TriggerSet};
use super::HarnessError;
use crate::linkzone::{AiInject, Trigger};
use crate::tool::Caller;
use crate::{serve_with, Error, Plugin, PluginMetadata};
use hearth_proto::permissions::{self, Visible};

/// How long `shutdown` gives the plugin (`Shutdown.grace_ms`).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What a tool call returned (the wire `ToolResult`, every SDK style mapped onto it).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolOutcome {
    /// Whether the tool succeeded.
    pub success: bool,
    /// The text for the LLM (Cyrene `output`, LinkZone `content`, a HomeAgent
    /// handler's value as text).
    pub content: String,
    /// Structured result, if any (Cyrene `data`, a HomeAgent handler's value).
    pub data: Option<Value>,
    /// The error text when `success` is false.
    pub error: String,
    /// `Progress` messages the call sent, in order.
    pub progress: Vec<String>,
    /// The same `Progress` messages with their numbers (fraction and counts).
    pub progress_reports: Vec<ProgressReport>,
}

/// One `Progress` a tool call sent ([`CallContext::progress`],
/// [`CallContext::progress_count`]).
///
/// [`CallContext::progress`]: crate::CallContext::progress
/// [`CallContext::progress_count`]: crate::CallContext::progress_count
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProgressReport {
    /// The message.
    pub message: String,
    /// 0..=1 when known, else `None` (negative on the wire).
    pub fraction: Option<f64>,
    /// Work done as a count, 0 when not given.
    pub progress: f64,
    /// The total count, 0 when unknown.
    pub total: f64,
}

impl From<pb::Progress> for ProgressReport {
    fn from(p: pb::Progress) -> Self {
        ProgressReport {
            message: p.message,
            fraction: (p.fraction >= 0.0).then_some(p.fraction),
            progress: p.progress,
            total: p.total,
        }
    }
}

/// A write a hook made that its stage may not make: dropped, as the broker drops it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedWrite {
    /// The hook that wrote it.
    pub hook_id: String,
    /// The field: `raw_message`, `context_msgs`, `llm_text`, `tool_calls`,
    /// `tool_call.deny`, `tool_results`, `final_text`, `response`, `extra`, or a
    /// read-only one (`user_id`, `group_id`, `reasoning_content`, `token_usage`,
    /// `phase`, `memory`, `no_memory`).
    pub field: String,
}

/// A hook whose writes were skipped: it answered an error (or panicked), or answered
/// no context, or did not answer in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// The hook.
    pub hook_id: String,
    /// Why, e.g. `stage hook on_input#0: backend down`.
    pub error: String,
}

/// What running one stage's hooks did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StageOutcome {
    /// The context after every hook's permitted writes (for `after_output`, the
    /// context as given: those hooks only observe).
    pub context: StageContext,
    /// The hooks that ran, in order.
    pub ran: Vec<String>,
    /// Writes the permission matrix dropped.
    pub dropped: Vec<DroppedWrite>,
    /// Hooks whose writes were skipped.
    pub failures: Vec<HookFailure>,
    /// The hook that set `response` (or, in `before_toolcall`, denied the call); the
    /// stage's later hooks did not run.
    pub short_circuit: Option<String>,
}

impl StageOutcome {
    /// The fields of [`dropped`](Self::dropped), in order.
    pub fn dropped_fields(&self) -> Vec<&str> {
        self.dropped.iter().map(|d| d.field.as_str()).collect()
    }
}

/// What delivering a message or event to the plugin's event handler did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventOutcome {
    /// The trigger that matched.
    pub trigger: Trigger,
    /// The parameters parsed from the message (`sender.param(i)`).
    pub params: Vec<String>,
    /// The handler's `sender.reply` texts, in order.
    pub replies: Vec<String>,
    /// The handler's error, if it failed.
    pub error: Option<String>,
}

/// A call waiting for its answer.
enum Pending {
    Tool {
        progress: Vec<pb::Progress>,
        done: oneshot::Sender<(pb::ToolResult, Vec<pb::Progress>)>,
    },
    Stage(oneshot::Sender<pb::StageResult>),
    Event {
        replies: Vec<String>,
        done: oneshot::Sender<(pb::EventDone, Vec<String>)>,
    },
}

/// The harness's side of the session: the sender to the plugin, the calls waiting.
struct Link {
    plugin: String,
    to_plugin: mpsc::UnboundedSender<Result<pb::HostMessage, Status>>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    /// Why the session ended, once it has.
    ended: Mutex<Option<String>>,
}

impl Link {
    fn send(&self, msg: In) {
        // Fails only once the session is over; the waiter then learns why.
        let _ = self.to_plugin.send(Ok(pb::HostMessage { msg: Some(msg) }));
    }

    fn ended(&self, what: &str) -> HarnessError {
        HarnessError::SessionEnded {
            plugin: self.plugin.clone(),
            what: what.into(),
            reason: self
                .ended
                .lock()
                .unwrap()
                .clone()
                .unwrap_or_else(|| "the session is over".into()),
        }
    }

    /// Routes one plugin message to the call waiting for it.
    fn dispatch(&self, msg: Out) {
        if let Out::Batch(b) = msg {
            for m in b.msgs.into_iter().filter_map(|m| m.msg) {
                self.dispatch(m);
            }
            return;
        }
        let mut pending = self.pending.lock().unwrap();
        match msg {
            Out::ToolResult(r) => {
                if let Some(Pending::Tool { progress, done }) = pending.remove(&r.call_id) {
                    let _ = done.send((r, progress));
                }
            }
            Out::StageResult(r) => {
                if let Some(Pending::Stage(done)) = pending.remove(&r.call_id) {
                    let _ = done.send(r);
                }
            }
            Out::Reply(r) => {
                if let Some(Pending::Event { replies, .. }) = pending.get_mut(&r.call_id) {
                    replies.push(r.text);
                }
            }
            Out::EventDone(d) => {
                if let Some(Pending::Event { replies, done }) = pending.remove(&d.call_id) {
                    let _ = done.send((d, replies));
                }
            }
            Out::Progress(p) => {
                if let Some(Pending::Tool { progress, .. }) = pending.get_mut(&p.call_id) {
                    progress.push(p);
                }
            }
            Out::RegisterTool(r) => self.send(In::ToolRegistration(pb::ToolRegistration {
                request_id: r.request_id,
                name: r.tool.map(|t| t.name).unwrap_or_default(),
                ok: false,
                error: "the test harness does not support run-time registration".into(),
            })),
            Out::UnregisterTool(r) => self.send(In::ToolRegistration(pb::ToolRegistration {
                request_id: r.request_id,
                name: r.name,
                ok: false,
                error: "the test harness does not support run-time registration".into(),
            })),
            Out::Pong(_) | Out::Hello(_) | Out::Register(_) | Out::Batch(_) => {}
        }
    }

    /// Reads the plugin's messages until the stream ends, then fails every waiter.
    async fn drive(self: Arc<Self>, mut from_plugin: Streaming<pb::PluginMessage>) {
        let reason = loop {
            match from_plugin.message().await {
                Ok(Some(pb::PluginMessage { msg: Some(m) })) => self.dispatch(m),
                Ok(Some(_)) => {}
                Ok(None) => break "the plugin closed the session".to_string(),
                Err(s) => break format!("session stream failed: {}", s.message()),
            }
        };
        *self.ended.lock().unwrap() = Some(reason);
        // Dropping the senders wakes every waiter.
        self.pending.lock().unwrap().clear();
    }
}

/// A seed the builder writes into the fake host before the plugin starts.
enum Seed {
    Own(String, Result<Value, String>),
    Core(String, Result<Value, String>),
    Plugin(String, String, Result<Value, String>),
}

/// Configures a [`Harness`] before the plugin starts: its name and capabilities, what
/// the fake host already holds, the caller and the timeout. From
/// [`Harness::builder`].
pub struct HarnessBuilder<P> {
    plugin: P,
    name: Option<String>,
    capabilities: Option<Vec<String>>,
    manifest: Option<PathBuf>,
    seeds: Vec<Seed>,
    llm_sources: Option<Vec<String>>,
    caller: Caller,
    timeout: Duration,
    allow_rejected: bool,
}

impl<P> std::fmt::Debug for HarnessBuilder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("name", &self.name)
            .field("capabilities", &self.capabilities)
            .field("manifest", &self.manifest)
            .field("caller", &self.caller)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn to_value(value: impl Serialize) -> Result<Value, String> {
    serde_json::to_value(value).map_err(|e| e.to_string())
}

impl<P: Plugin> HarnessBuilder<P> {
    /// The name the broker knows the plugin by (`HEARTH_PLUGIN`); default: the name
    /// in `plugin.json` ([`manifest`](Self::manifest)), else the plugin's
    /// `metadata().name`, else `plugin`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The plugin's capabilities (`plugin.json` `capabilities`), which decide which
    /// host services it may call; without this (or a manifest that lists them) the
    /// broker's defaults: `memory`, `knowledge`, `llm`, `input`.
    pub fn capabilities<C: Into<String>>(
        mut self,
        capabilities: impl IntoIterator<Item = C>,
    ) -> Self {
        self.capabilities = Some(capabilities.into_iter().map(Into::into).collect());
        self
    }

    /// Reads `name` and `capabilities` from the plugin's `plugin.json` at `path` (read
    /// at [`start`](Self::start); explicit [`name`](Self::name) and
    /// [`capabilities`](Self::capabilities) win).
    pub fn manifest(mut self, path: impl Into<PathBuf>) -> Self {
        self.manifest = Some(path.into());
        self
    }

    /// A value of the plugin's own setting `key`, set before the plugin starts (its
    /// `start` can read it).
    pub fn setting(mut self, key: impl Into<String>, value: impl Serialize) -> Self {
        self.seeds.push(Seed::Own(key.into(), to_value(value)));
        self
    }

    /// A core setting, set before the plugin starts.
    pub fn core_setting(mut self, key: impl Into<String>, value: impl Serialize) -> Self {
        self.seeds.push(Seed::Core(key.into(), to_value(value)));
        self
    }

    /// A setting of another plugin, set before the plugin starts.
    pub fn plugin_setting(
        mut self,
        plugin: impl Into<String>,
        key: impl Into<String>,
        value: impl Serialize,
    ) -> Self {
        self.seeds
            .push(Seed::Plugin(plugin.into(), key.into(), to_value(value)));
        self
    }

    /// The LLM sources the `Llm` service lists, in priority order (none by default).
    pub fn llm_sources<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.llm_sources = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Who calls and sends messages ([`Harness::call`], [`Harness::message`], …);
    /// default: all fields empty.
    pub fn caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }

    /// How long the harness waits for any one answer (default 30 s); past it a call is
    /// cancelled and fails with [`HarnessError::Timeout`]. A safety net against a
    /// hung plugin, not something to assert on.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Starts even when the broker's rules reject some tools, hooks or triggers: they
    /// are left out and listed by [`Harness::rejected`] (by default
    /// [`start`](Self::start) fails with [`HarnessError::Rejected`]).
    pub fn allow_rejected(mut self) -> Self {
        self.allow_rejected = true;
        self
    }

    /// Serves the plugin in process to a fresh [`FakeBroker`] and waits until it is
    /// registered: `init` and `start` have run, `Hello` and `Register` were checked by
    /// the broker's rules and answered.
    ///
    /// Errors: [`HarnessError::Serve`] when serving failed (e.g. `start` returned an
    /// error); [`HarnessError::Rejected`] naming each item the broker's rules refuse;
    /// [`HarnessError::Host`] for a seeded setting the fake host refuses;
    /// [`HarnessError::Manifest`]; [`HarnessError::Io`] when the socket cannot be set
    /// up; [`HarnessError::Timeout`] when the plugin does not register in time.
    pub async fn start(self) -> Result<Harness, HarnessError> {
        let (manifest_name, manifest_caps) = match &self.manifest {
            Some(path) => read_manifest(path)?,
            None => (None, None),
        };
        let meta = self.plugin.metadata();
        let name = self
            .name
            .or(manifest_name)
            .or_else(|| (!meta.name.is_empty()).then(|| meta.name.clone()))
            .unwrap_or_else(|| "plugin".into());
        let host = FakeHost::new(name.clone());
        if let Some(caps) = self.capabilities.or(manifest_caps) {
            host.set_capabilities(caps);
        }
        if let Some(sources) = self.llm_sources {
            host.set_llm_sources(sources);
        }
        for seed in self.seeds {
            let bad = |key: &str, e: String| HarnessError::Host {
                detail: format!("setting `{key}`: value is not JSON: {e}"),
            };
            match seed {
                Seed::Own(k, v) => host.set_setting(&k, v.map_err(|e| bad(&k, e))?)?,
                Seed::Core(k, v) => host.set_core_setting(&k, v.map_err(|e| bad(&k, e))?)?,
                Seed::Plugin(p, k, v) => {
                    host.set_plugin_setting(&p, &k, v.map_err(|e| bad(&k, e))?)?
                }
            }
        }
        let mut broker = FakeBroker::unix(host.clone())?;
        let mut serve = tokio::spawn(serve_with(self.plugin, broker.serve_config(&name)));

        let opened = async {
            let mut session = broker.session().await?;
            session.set_wait(self.timeout);
            let (hello, register) = session.hello_and_register().await?;
            Ok::<_, HarnessError>((session, hello, register))
        };
        let outcome = tokio::select! {
            opened = tokio::time::timeout(self.timeout, opened) => opened,
            served = &mut serve => {
                return Err(match served {
                    Ok(Err(e)) => HarnessError::Serve(e),
                    Ok(Ok(())) => HarnessError::SessionEnded {
                        plugin: name,
                        what: "registration".into(),
                        reason: "serve returned without registering".into(),
                    },
                    Err(e) => HarnessError::SessionEnded {
                        plugin: name,
                        what: "registration".into(),
                        reason: format!("serve {e}"),
                    },
                });
            }
        };
        let (session, hello, register) = match outcome {
            Ok(opened) => opened?,
            Err(_) => {
                serve.abort();
                return Err(HarnessError::Timeout {
                    plugin: name,
                    what: "registration".into(),
                    after_ms: self.timeout.as_millis() as u64,
                });
            }
        };
        let (from_plugin, to_plugin) = session.into_parts();
        let to_plugin = to_plugin.expect("a new session is open");
        let send = |msg: In| {
            let _ = to_plugin.send(Ok(pb::HostMessage { msg: Some(msg) }));
        };
        let accepted = match registration::check(&name, &hello, &register, &host) {
            Ok(accepted) => accepted,
            Err(refused) => {
                send(In::Rejected(pb::Rejected {
                    reason: refused.reason.clone(),
                    items: refused.items.clone(),
                }));
                drop(to_plugin);
                serve.abort();
                return Err(HarnessError::Rejected {
                    plugin: name,
                    reason: refused.reason,
                    items: refused.items,
                });
            }
        };
        send(In::Registered(registration::registered(
            &name, &hello, &accepted,
        )));
        if !accepted.rejected.is_empty() && !self.allow_rejected {
            send(In::Shutdown(pb::Shutdown {
                grace_ms: SHUTDOWN_GRACE.as_millis() as u32,
                reason: "registration rejected".into(),
            }));
            serve.abort();
            return Err(HarnessError::Rejected {
                plugin: name,
                reason: format!(
                    "{} rejected",
                    super::registration::items(accepted.rejected.len())
                ),
                items: accepted.rejected,
            });
        }
        let link = Arc::new(Link {
            plugin: name.clone(),
            to_plugin,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            ended: Mutex::new(None),
        });
        let driver = tokio::spawn(link.clone().drive(from_plugin));
        let info = register.plugin.unwrap_or_default();
        Ok(Harness {
            name,
            metadata: PluginMetadata {
                name: info.name,
                version: info.version,
                author: info.author,
                description: info.description,
            },
            features: hello.features,
            tools: accepted.tools,
            schemas: accepted.schemas,
            hooks: accepted.hooks,
            triggers: accepted.triggers,
            trigger_set: accepted.trigger_set,
            inject: accepted.inject,
            rejected: accepted.rejected,
            link,
            caller: self.caller,
            timeout: self.timeout,
            trace: Mutex::new((String::new(), String::new())),
            serve: Some(serve),
            driver,
            broker,
        })
    }
}

/// `(name, capabilities)` of a `plugin.json`.
fn read_manifest(path: &PathBuf) -> Result<(Option<String>, Option<Vec<String>>), HarnessError> {
    let err = |detail: String| HarnessError::Manifest {
        path: path.display().to_string(),
        detail,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let json: Value =
        serde_json::from_str(&text).map_err(|e| err(format!("invalid plugin.json: {e}")))?;
    let name = json["name"].as_str().map(str::to_string);
    let caps = match &json["capabilities"] {
        Value::Null => None,
        Value::Array(items) => Some(
            items
                .iter()
                .map(|c| {
                    c.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| err(format!("capabilities: {c} is not a string")))
                })
                .collect::<Result<_, _>>()?,
        ),
        other => return Err(err(format!("capabilities must be an array, got {other}"))),
    };
    Ok((name, caps))
}

/// A plugin running in process against a fake broker, driven as the broker drives
/// it. See the [module docs](super) for an example.
///
/// Every method that talks to the plugin takes `&self`, so calls may run
/// concurrently (e.g. with `tokio::join!`). Dropping the harness stops the plugin's
/// task without calling `stop`; [`shutdown`](Self::shutdown) stops it politely.
pub struct Harness {
    name: String,
    metadata: PluginMetadata,
    features: Vec<String>,
    tools: Vec<ToolInfo>,
    schemas: HashMap<String, ArgsSchema>,
    hooks: Vec<HookInfo>,
    triggers: Vec<Trigger>,
    trigger_set: TriggerSet,
    inject: Option<AiInject>,
    rejected: Vec<pb::RejectedItem>,
    link: Arc<Link>,
    caller: Caller,
    timeout: Duration,
    /// (traceparent, tracestate) sent with every call; empty: none.
    trace: Mutex<(String, String)>,
    serve: Option<JoinHandle<Result<(), Error>>>,
    driver: JoinHandle<()>,
    broker: FakeBroker,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("plugin", &self.name)
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .field(
                "hooks",
                &self.hooks.iter().map(|h| &h.hook_id).collect::<Vec<_>>(),
            )
            .field("triggers", &self.triggers)
            .finish_non_exhaustive()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(serve) = &self.serve {
            serve.abort();
        }
        self.driver.abort();
    }
}

impl Harness {
    /// Starts `plugin` with the defaults: see [`HarnessBuilder::start`] (and its
    /// errors). Shorthand for `Harness::builder(plugin).start()`.
    pub async fn start<P: Plugin>(plugin: P) -> Result<Harness, HarnessError> {
        Harness::builder(plugin).start().await
    }

    /// A [`HarnessBuilder`] for `plugin`, to seed settings, set capabilities, … first.
    pub fn builder<P: Plugin>(plugin: P) -> HarnessBuilder<P> {
        HarnessBuilder {
            plugin,
            name: None,
            capabilities: None,
            manifest: None,
            seeds: Vec::new(),
            llm_sources: None,
            caller: Caller::default(),
            timeout: DEFAULT_WAIT,
            allow_rejected: false,
        }
    }

    /// The name the broker knows the plugin by.
    pub fn plugin(&self) -> &str {
        &self.name
    }

    /// The metadata the plugin registered (name, version, author, description).
    pub fn metadata(&self) -> &PluginMetadata {
        &self.metadata
    }

    /// The optional protocol behaviours the SDK announced in `Hello.features`.
    pub fn features(&self) -> &[String] {
        &self.features
    }

    /// The registered tools, in registration order (Cyrene `tools()` first, then
    /// those registered in `start`).
    pub fn tools(&self) -> &[ToolInfo] {
        &self.tools
    }

    /// The registered tool `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The registered stage hooks, in registration order.
    pub fn hooks(&self) -> &[HookInfo] {
        &self.hooks
    }

    /// The registered LinkZone triggers, in registration order.
    pub fn triggers(&self) -> &[Trigger] {
        &self.triggers
    }

    /// The LinkZone `ai.inject` spec, if the plugin set one.
    pub fn inject(&self) -> Option<&AiInject> {
        self.inject.as_ref()
    }

    /// Items the broker's rules rejected (only with
    /// [`HarnessBuilder::allow_rejected`]; otherwise `start` failed on them).
    pub fn rejected(&self) -> &[pb::RejectedItem] {
        &self.rejected
    }

    /// The fake host services: what the plugin stored, and what it will read.
    pub fn host(&self) -> &FakeHost {
        self.broker.host()
    }

    /// The fake broker the plugin is attached to.
    pub fn broker(&self) -> &FakeBroker {
        &self.broker
    }

    fn sender(caller: &Caller) -> pb::Sender {
        pb::Sender {
            user_id: caller.user_id.clone(),
            group_id: caller.group_id.clone(),
            channel: caller.channel.clone(),
            session_id: caller.session_id.clone(),
        }
    }

    /// Registers a waiter and sends what it waits for; waits for the answer.
    async fn ask<T>(
        &self,
        what: &str,
        pending: impl FnOnce(oneshot::Sender<T>) -> Pending,
        msg: impl FnOnce(u64) -> In,
    ) -> Result<T, HarnessError> {
        let call_id = self.link.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = self.link.pending.lock().unwrap();
            if self.link.ended.lock().unwrap().is_some() {
                return Err(self.link.ended(what));
            }
            waiting.insert(call_id, pending(tx));
        }
        self.link.send(msg(call_id));
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(self.link.ended(what)),
            Err(_) => {
                self.link.pending.lock().unwrap().remove(&call_id);
                self.link.send(In::Cancel(pb::Cancel {
                    call_id,
                    reason: "timeout".into(),
                }));
                Err(HarnessError::Timeout {
                    plugin: self.name.clone(),
                    what: what.into(),
                    after_ms: self.timeout.as_millis() as u64,
                })
            }
        }
    }

    /// Sends the W3C trace context `traceparent` / `tracestate` with every following
    /// tool call, stage hook run and event, as a tracing broker does (empty strings:
    /// none, the default).
    pub fn set_trace_context(&self, traceparent: impl Into<String>, tracestate: impl Into<String>) {
        *self.trace.lock().unwrap() = (traceparent.into(), tracestate.into());
    }

    fn trace(&self) -> (String, String) {
        self.trace.lock().unwrap().clone()
    }

    fn timeout_ms(&self) -> u32 {
        self.timeout.as_millis().min(u128::from(u32::MAX)) as u32
    }

    /// Calls tool `tool` with `args` as the broker does: the arguments must be a JSON
    /// object valid for the tool's JSON Schema, then the plugin runs the call
    /// (`validate`, then `execute`) and answers.
    ///
    /// Errors: [`HarnessError::UnknownTool`]; [`HarnessError::InvalidArguments`]
    /// naming the argument (the plugin is not called); [`HarnessError::Timeout`];
    /// [`HarnessError::SessionEnded`]. A tool that fails is `Ok` with
    /// `success == false` and its `error`.
    pub async fn call(&self, tool: &str, args: Value) -> Result<ToolOutcome, HarnessError> {
        self.call_as(&self.caller.clone(), tool, args).await
    }

    /// [`call`](Self::call) on behalf of `caller` (the call's `sender`).
    pub async fn call_as(
        &self,
        caller: &Caller,
        tool: &str,
        args: Value,
    ) -> Result<ToolOutcome, HarnessError> {
        let schema = self
            .schemas
            .get(tool)
            .ok_or_else(|| HarnessError::UnknownTool { tool: tool.into() })?;
        if !args.is_object() {
            return Err(HarnessError::InvalidArguments {
                tool: tool.into(),
                message: format!("arguments must be a JSON object, got {args}"),
            });
        }
        schema
            .validate(&args)
            .map_err(|message| HarnessError::InvalidArguments {
                tool: tool.into(),
                message,
            })?;
        let sender = Self::sender(caller);
        let timeout_ms = self.timeout_ms();
        let (traceparent, tracestate) = self.trace();
        let (r, progress) = self
            .ask(
                &format!("tool {tool}"),
                |done| Pending::Tool {
                    progress: Vec::new(),
                    done,
                },
                |call_id| {
                    In::InvokeTool(pb::InvokeTool {
                        call_id,
                        tool: tool.into(),
                        args_json: args.to_string(),
                        sender: Some(sender),
                        timeout_ms,
                        traceparent,
                        tracestate,
                    })
                },
            )
            .await?;
        let data = match r.data_json.trim() {
            "" => None,
            json => Some(
                serde_json::from_str(json).map_err(|e| HarnessError::Protocol {
                    plugin: self.name.clone(),
                    detail: format!("tool {tool}: data_json is not JSON: {e}"),
                })?,
            ),
        };
        Ok(ToolOutcome {
            success: r.success,
            content: r.content,
            data,
            error: r.error,
            progress: progress.iter().map(|p| p.message.clone()).collect(),
            progress_reports: progress.into_iter().map(Into::into).collect(),
        })
    }

    /// Sends one hook `ctx`; its answered context, or why it was skipped.
    async fn run_hook(
        &self,
        hook: &HookInfo,
        stage: Stage,
        ctx: StageContext,
    ) -> Result<Result<StageContext, String>, HarnessError> {
        let timeout_ms = self.timeout_ms();
        let (traceparent, tracestate) = self.trace();
        let what = format!("stage hook {}", hook.hook_id);
        let asked = self
            .ask(&what, Pending::Stage, |call_id| {
                In::RunStage(pb::RunStage {
                    call_id,
                    stage: stage as i32,
                    hook_id: hook.hook_id.clone(),
                    context: Some(ctx),
                    timeout_ms,
                    traceparent,
                    tracestate,
                })
            })
            .await;
        let r = match asked {
            Ok(r) => r,
            Err(HarnessError::Timeout { after_ms, .. }) => {
                return Ok(Err(format!("timed out after {after_ms} ms")))
            }
            Err(e) => return Err(e),
        };
        if !r.error.is_empty() {
            return Ok(Err(r.error));
        }
        Ok(match r.context {
            Some(mut c) => {
                c.phase = stage as i32;
                Ok(c)
            }
            None => Err("answered no context".into()),
        })
    }

    /// Runs the plugin's hooks of `stage` on `context` as the broker's pipeline does
    /// (`broker/src/pipeline/mod.rs`): in registration order, each hook receiving what
    /// its stage may see and each one's permitted writes applied before the next
    /// runs; writes outside the permission matrix are dropped and listed; a failed
    /// hook's writes are skipped; the first hook that sets `response` (or denies the
    /// call in `before_toolcall`) ends the stage. `after_output` hooks run
    /// concurrently and change nothing.
    ///
    /// Own-tools hooks run at `before_toolcall` / `after_toolcall` only when the call
    /// belongs to this plugin: the first tool call's (or result's) `plugin` field names
    /// it, or, when that is empty, its `name` is one of this plugin's tools.
    ///
    /// Errors: [`HarnessError::SessionEnded`]. A stage without hooks is `Ok` with
    /// nothing run.
    pub async fn run_stage(
        &self,
        stage: Stage,
        context: StageContext,
    ) -> Result<StageOutcome, HarnessError> {
        let mut ctx = context;
        ctx.phase = stage as i32;
        let mut out = StageOutcome {
            context: StageContext::default(),
            ran: Vec::new(),
            dropped: Vec::new(),
            failures: Vec::new(),
            short_circuit: None,
        };
        let owner = self.tool_owner(stage, &ctx);
        let hooks: Vec<&HookInfo> = self
            .hooks
            .iter()
            .filter(|h| h.stage == stage)
            .filter(|h| {
                let toolcall = matches!(stage, Stage::BeforeToolcall | Stage::AfterToolcall);
                !(toolcall && h.own_tools_only && owner.as_deref() != Some(self.name.as_str()))
            })
            .collect();
        fn record(out: &mut StageOutcome, hook: &HookInfo, dropped: Vec<&str>) {
            out.dropped
                .extend(dropped.into_iter().map(|f| DroppedWrite {
                    hook_id: hook.hook_id.clone(),
                    field: f.to_string(),
                }));
        }
        if stage == Stage::AfterOutput {
            let visible = Visible::of(stage, true);
            let sent = permissions::view(stage, &ctx, visible);
            let runs = hooks.iter().map(|h| {
                let sent = sent.clone();
                async move { (*h, self.run_hook(h, stage, sent).await) }
            });
            for (hook, answer) in join_all(runs).await {
                out.ran.push(hook.hook_id.clone());
                match answer? {
                    Ok(answer) => {
                        let mut seen = sent.clone();
                        let dropped = permissions::apply(stage, visible, &mut seen, answer);
                        record(&mut out, hook, dropped);
                    }
                    Err(error) => out.failures.push(HookFailure {
                        hook_id: hook.hook_id.clone(),
                        error,
                    }),
                }
            }
            out.context = ctx;
            return Ok(out);
        }
        for hook in hooks {
            let visible = Visible::of(stage, hook.context_msgs);
            let sent = permissions::view(stage, &ctx, visible);
            out.ran.push(hook.hook_id.clone());
            let answer = match self.run_hook(hook, stage, sent).await? {
                Ok(answer) => answer,
                Err(error) => {
                    out.failures.push(HookFailure {
                        hook_id: hook.hook_id.clone(),
                        error,
                    });
                    continue;
                }
            };
            let dropped = permissions::apply(stage, visible, &mut ctx, answer);
            record(&mut out, hook, dropped);
            let denied = stage == Stage::BeforeToolcall && ctx.tool_calls.iter().any(|c| c.deny);
            if ctx.response.is_some() || denied {
                out.short_circuit = Some(hook.hook_id.clone());
                break;
            }
        }
        out.context = ctx;
        Ok(out)
    }

    /// The plugin owning the tool call of a tool-call stage (see [`run_stage`]).
    ///
    /// [`run_stage`]: Self::run_stage
    fn tool_owner(&self, stage: Stage, ctx: &StageContext) -> Option<String> {
        let (plugin, name) = match stage {
            Stage::BeforeToolcall => ctx.tool_calls.first().map(|c| (&c.plugin, &c.name))?,
            Stage::AfterToolcall => ctx.tool_results.first().map(|r| (&r.plugin, &r.name))?,
            _ => return None,
        };
        if !plugin.is_empty() {
            return Some(plugin.clone());
        }
        self.schemas.contains_key(name).then(|| self.name.clone())
    }

    /// Sends `text` as a message to the agent: the first of the plugin's message
    /// triggers (command, keyword, regex, segment) it matches, as the broker matches
    /// them, gets it as an event, and the handler's replies are collected. `None`
    /// when no trigger matches.
    ///
    /// Errors: [`HarnessError::Timeout`], [`HarnessError::SessionEnded`]; a handler
    /// that fails is `Ok` with its [`error`](EventOutcome::error).
    pub async fn message(&self, text: &str) -> Result<Option<EventOutcome>, HarnessError> {
        self.message_as(&self.caller.clone(), text).await
    }

    /// [`message`](Self::message) from `caller`.
    pub async fn message_as(
        &self,
        caller: &Caller,
        text: &str,
    ) -> Result<Option<EventOutcome>, HarnessError> {
        match self.trigger_set.match_message(text) {
            Some(m) => self.deliver_match(caller, text, m).await.map(Some),
            None => Ok(None),
        }
    }

    /// Emits broker event `event` (`message` or `reply`) with `text`: the plugin's
    /// event trigger for it (or `*`) gets `text` as its one parameter. `None` when the
    /// plugin has no such trigger. Errors as [`message`](Self::message).
    pub async fn emit(
        &self,
        event: &str,
        text: &str,
    ) -> Result<Option<EventOutcome>, HarnessError> {
        match self.trigger_set.match_event(event, text) {
            Some(m) => self
                .deliver_match(&self.caller.clone(), text, m)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// Treats `line` as a line of the LLM's reply: when it starts with the command of
    /// the plugin's `ai.inject` format and matches a trigger, it is delivered as that
    /// trigger's event. `None` otherwise. Errors as [`message`](Self::message).
    pub async fn llm_line(&self, line: &str) -> Result<Option<EventOutcome>, HarnessError> {
        match self.trigger_set.match_llm_line(line) {
            Some(m) => self
                .deliver_match(&self.caller.clone(), line, m)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    async fn deliver_match(
        &self,
        caller: &Caller,
        message: &str,
        m: Match,
    ) -> Result<EventOutcome, HarnessError> {
        let trigger = Trigger::from_wire(&m.trigger).ok_or_else(|| HarnessError::Protocol {
            plugin: self.name.clone(),
            detail: format!("trigger type {} is unknown", m.trigger.r#type),
        })?;
        self.deliver_as(caller, &trigger, message, m.params).await
    }

    /// Delivers an event for `trigger` directly (no matching): `message` and `params`
    /// as given.
    ///
    /// Errors as [`message`](Self::message); a trigger the plugin did not register is
    /// `Ok` with the SDK's "no event handler" error, as with the broker.
    pub async fn deliver(
        &self,
        trigger: &Trigger,
        message: &str,
        params: Vec<String>,
    ) -> Result<EventOutcome, HarnessError> {
        self.deliver_as(&self.caller.clone(), trigger, message, params)
            .await
    }

    async fn deliver_as(
        &self,
        caller: &Caller,
        trigger: &Trigger,
        message: &str,
        params: Vec<String>,
    ) -> Result<EventOutcome, HarnessError> {
        let sender = Self::sender(caller);
        let timeout_ms = self.timeout_ms();
        let wire = trigger.to_wire();
        let sent_params = params.clone();
        let (traceparent, tracestate) = self.trace();
        let (done, replies) = self
            .ask(
                &format!("event handler of trigger {trigger}"),
                |done| Pending::Event {
                    replies: Vec::new(),
                    done,
                },
                |call_id| {
                    In::HandleEvent(pb::HandleEvent {
                        call_id,
                        message: message.into(),
                        params: sent_params,
                        sender: Some(sender),
                        trigger: Some(wire),
                        timeout_ms,
                        traceparent,
                        tracestate,
                    })
                },
            )
            .await?;
        Ok(EventOutcome {
            trigger: trigger.clone(),
            params,
            replies,
            error: (!done.error.is_empty()).then_some(done.error),
        })
    }

    /// Stops the plugin as the broker does: `Shutdown`, then waits for `serve` to
    /// return (the plugin's `stop` has run).
    ///
    /// Errors: [`HarnessError::Serve`] when `serve` ended with an error;
    /// [`HarnessError::Timeout`] when it did not return within the grace period and
    /// the timeout.
    pub async fn shutdown(mut self) -> Result<(), HarnessError> {
        self.link.send(In::Shutdown(pb::Shutdown {
            grace_ms: SHUTDOWN_GRACE.as_millis() as u32,
            reason: "test harness shutdown".into(),
        }));
        let Some(serve) = self.serve.take() else {
            return Ok(());
        };
        match tokio::time::timeout(SHUTDOWN_GRACE + self.timeout, serve).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(HarnessError::Serve(e)),
            Ok(Err(e)) => Err(HarnessError::SessionEnded {
                plugin: self.name.clone(),
                what: "shutdown".into(),
                reason: format!("serve {e}"),
            }),
            Err(_) => Err(HarnessError::Timeout {
                plugin: self.name.clone(),
                what: "shutdown".into(),
                after_ms: (SHUTDOWN_GRACE + self.timeout).as_millis() as u64,
            }),
        }
    }
}

/// Runs `futures` concurrently on this task; their outputs in order.
async fn join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if outputs[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => outputs[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}
