//! One live `Attach` session: the outbound half of the stream and the calls in
//! flight on it, matched by `call_id`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_proto::v1::{
    host_message::Msg, Cancel, EventDone, HandleEvent, HostMessage, InvokeTool, RunStage, Sender,
    Stage, StageContext, StageResult, ToolProgress, ToolResult,
};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use crate::error::{CallError, Target};

/// Outbound messages to the plugin (the server side of the response stream).
pub type Outbound = mpsc::Sender<Result<HostMessage, Status>>;

/// Where a tool call's progress reports go while it runs (`Admin.CallToolStream`, an
/// MCP client's progress token).
pub type ProgressSink = mpsc::UnboundedSender<ToolProgress>;

/// A plugin's answer to a request: a tool's result, a stage hook's result or the end
/// of an event handler.
#[derive(Debug)]
pub enum Reply {
    /// Answer to `InvokeTool`.
    Tool(ToolResult),
    /// Answer to `RunStage` (boxed: a whole StageContext).
    Stage(Box<StageResult>),
    /// End of a `HandleEvent` (its `Reply` texts came before).
    Event(EventDone),
}

impl Reply {
    fn call_id(&self) -> u64 {
        match self {
            Reply::Tool(r) => r.call_id,
            Reply::Stage(r) => r.call_id,
            Reply::Event(r) => r.call_id,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Reply::Tool(_) => "a ToolResult",
            Reply::Stage(_) => "a StageResult",
            Reply::Event(_) => "an EventDone",
        }
    }
}

struct Pending {
    /// What the call is, for errors and logs.
    what: Target,
    reply: oneshot::Sender<Result<Reply, String>>,
    /// Where `sender.reply` texts of an event go.
    texts: Option<mpsc::UnboundedSender<String>>,
    /// When the plugin last sent `Progress` for this call.
    progress_at: Option<Instant>,
    /// Where its progress reports go, if anyone listens.
    progress: Option<ProgressSink>,
}

/// Why [`Session::invoke`] produced no result.
#[derive(Debug)]
pub enum InvokeError {
    /// The call never reached the plugin (the session had ended); safe to retry on
    /// the next process.
    NotSent(String),
    /// The call was sent and then lost; never retried.
    Failed(CallError),
    /// A plugin host received the call and answered that it did not run it (`NotRun`:
    /// the plugin is not ready there, or lacks the tool). Safe to send to another
    /// instance, a bounded number of times (only remote calls give it).
    Refused(String),
}

struct Calls {
    map: HashMap<u64, Pending>,
    /// Set once the session is over; new calls are refused with this reason.
    closed: Option<String>,
}

/// A registered plugin's session.
pub struct Session {
    plugin: String,
    generation: u64,
    /// `None` once the stream was ended ([`Session::end_stream`]).
    out: Mutex<Option<Outbound>>,
    calls: Mutex<Calls>,
    next_call_id: AtomicU64,
    last_pong: Mutex<Instant>,
    /// What the plugin registered at its handshake (set once, before calls come).
    registration: std::sync::OnceLock<Arc<hearth_proto::v1::Register>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("plugin", &self.plugin)
            .field("generation", &self.generation)
            .finish()
    }
}

/// Removes a call from the pending map when its caller stops waiting (timeout or
/// dropped future) and tells the plugin to cancel it.
struct CallGuard<'a> {
    session: &'a Session,
    call_id: u64,
    done: bool,
    reason: &'static str,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let was_pending = self
            .session
            .calls
            .lock()
            .unwrap()
            .map
            .remove(&self.call_id)
            .is_some();
        if was_pending {
            self.session.try_send(Msg::Cancel(Cancel {
                call_id: self.call_id,
                reason: self.reason.into(),
            }));
        }
    }
}

/// The `InvokeTool` of a call of `tool`, once its id is known; the trace context is
/// the current one, taken now. Shared by local sessions and remote calls.
pub(crate) fn invoke_tool(
    tool: &str,
    args_json: String,
    sender: Option<Sender>,
    timeout: Duration,
) -> impl FnOnce(u64) -> Msg {
    let timeout_ms = timeout.as_millis().min(u32::MAX as u128) as u32;
    let (traceparent, tracestate) = crate::observe::trace::current_w3c();
    let tool = tool.to_string();
    move |call_id| {
        Msg::InvokeTool(InvokeTool {
            call_id,
            tool,
            args_json,
            sender,
            timeout_ms,
            traceparent,
            tracestate,
        })
    }
}

/// The `RunStage` of stage hook `hook_id` on `context`, once its id is known (see
/// [`invoke_tool`]).
pub(crate) fn run_stage(
    stage: Stage,
    hook_id: &str,
    context: StageContext,
    timeout: Duration,
) -> impl FnOnce(u64) -> Msg {
    let timeout_ms = timeout.as_millis().min(u32::MAX as u128) as u32;
    let (traceparent, tracestate) = crate::observe::trace::current_w3c();
    let hook_id = hook_id.to_string();
    move |call_id| {
        Msg::RunStage(RunStage {
            call_id,
            stage: stage as i32,
            hook_id,
            context: Some(context),
            timeout_ms,
            traceparent,
            tracestate,
        })
    }
}

/// What a `HandleEvent` is called in errors (its trigger's pattern), and the message
/// once its id is known (see [`invoke_tool`]).
pub(crate) fn handle_event(
    mut event: HandleEvent,
    timeout: Duration,
) -> (Target, impl FnOnce(u64) -> Msg) {
    let what = Target::Event {
        trigger: event
            .trigger
            .as_ref()
            .map(|t| t.pattern.clone())
            .unwrap_or_default(),
    };
    event.timeout_ms = timeout.as_millis().min(u32::MAX as u128) as u32;
    (event.traceparent, event.tracestate) = crate::observe::trace::current_w3c();
    let build = move |call_id| {
        event.call_id = call_id;
        Msg::HandleEvent(event)
    };
    (what, build)
}

impl Session {
    /// A session of generation `generation` of `plugin`, writing to `out`.
    pub fn new(plugin: String, generation: u64, out: Outbound) -> Session {
        Session {
            plugin,
            generation,
            out: Mutex::new(Some(out)),
            calls: Mutex::new(Calls {
                map: HashMap::new(),
                closed: None,
            }),
            next_call_id: AtomicU64::new(1),
            last_pong: Mutex::new(Instant::now()),
            registration: std::sync::OnceLock::new(),
        }
    }

    /// Records the `Register` message of the handshake (the first call wins).
    pub fn set_registration(&self, register: hearth_proto::v1::Register) {
        let _ = self.registration.set(Arc::new(register));
    }

    /// What the plugin registered at its handshake: stage hooks, triggers, inject spec,
    /// config defs and its first tools (runtime `RegisterTool`s are in the registry).
    pub fn registration(&self) -> Option<Arc<hearth_proto::v1::Register>> {
        self.registration.get().cloned()
    }

    /// The plugin this session belongs to.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Records a `Pong`.
    pub fn pong(&self) {
        *self.last_pong.lock().unwrap() = Instant::now();
    }

    /// Time since the last `Pong` (or since the session began).
    pub fn since_last_pong(&self) -> Duration {
        self.last_pong.lock().unwrap().elapsed()
    }

    /// True once [`Session::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.calls.lock().unwrap().closed.is_some()
    }

    /// Records `Progress` for a call: its timeout restarts from now (bounded by the
    /// call's `max_total`), and `report` goes to the call's progress sink, if any.
    pub fn progress(&self, call_id: u64, report: ToolProgress) {
        if let Some(p) = self.calls.lock().unwrap().map.get_mut(&call_id) {
            p.progress_at = Some(Instant::now());
            if let Some(sink) = &p.progress {
                let _ = sink.send(report);
            }
        }
    }

    /// Which spawn of the plugin this session belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn sender(&self) -> Option<Outbound> {
        self.out.lock().unwrap().clone()
    }

    /// Sends a message to the plugin; false when the session is gone.
    pub async fn send(&self, msg: Msg) -> bool {
        match self.sender() {
            Some(out) => out.send(Ok(HostMessage { msg: Some(msg) })).await.is_ok(),
            None => false,
        }
    }

    /// Sends without waiting; false when the session is gone or its queue is full.
    pub fn try_send(&self, msg: Msg) -> bool {
        match self.sender() {
            Some(out) => out.try_send(Ok(HostMessage { msg: Some(msg) })).is_ok(),
            None => false,
        }
    }

    /// Ends the broker's half of the stream (the plugin sees a clean end), once the
    /// plugin ended its half. Later sends fail; calls in flight stay pending until
    /// [`Session::close`].
    pub fn end_stream(&self) {
        self.out.lock().unwrap().take();
    }

    /// Calls `tool` with `args_json` and waits up to `timeout` for its result; each
    /// `Progress` from the plugin restarts the timeout, up to `max_total` in all.
    ///
    /// Errors: [`InvokeError::NotSent`] when the session had already ended (the call
    /// never reached the plugin); otherwise [`InvokeError::Failed`] with
    /// [`CallError::Timeout`] (the plugin is sent `Cancel`) or
    /// [`CallError::PluginGone`] (the session ended with the call in flight).
    /// `progress` receives the plugin's progress reports while the call runs.
    pub async fn invoke(
        &self,
        tool: &str,
        args_json: String,
        sender: Option<Sender>,
        timeout: Duration,
        max_total: Duration,
        progress: Option<ProgressSink>,
    ) -> Result<ToolResult, InvokeError> {
        let build = invoke_tool(tool, args_json, sender, timeout);
        let what = Target::Tool(tool.into());
        match self
            .request(what.clone(), build, None, progress, timeout, max_total)
            .await?
        {
            Reply::Tool(r) => Ok(r),
            other => Err(InvokeError::Failed(
                self.gone(what, format!("answered a tool call with {}", other.kind())),
            )),
        }
    }

    /// Runs stage hook `hook_id` on `context` and waits up to `timeout` for the
    /// plugin's `StageResult`. Errors as [`Session::invoke`], naming the stage and hook.
    pub async fn run_stage(
        &self,
        stage: Stage,
        hook_id: &str,
        context: StageContext,
        timeout: Duration,
    ) -> Result<StageResult, InvokeError> {
        let what = Target::Hook {
            stage,
            hook_id: hook_id.into(),
        };
        let build = run_stage(stage, hook_id, context, timeout);
        match self
            .request(what.clone(), build, None, None, timeout, timeout)
            .await?
        {
            Reply::Stage(r) => Ok(*r),
            other => Err(InvokeError::Failed(
                self.gone(what, format!("answered a stage hook with {}", other.kind())),
            )),
        }
    }

    /// Delivers `event` (its `call_id` is set here) and waits for the plugin's
    /// `EventDone`; each `Reply` text goes to `texts` as it arrives and, like
    /// `Progress`, restarts the timeout (up to `max_total`). Errors as
    /// [`Session::invoke`], naming the trigger.
    pub async fn handle_event(
        &self,
        event: HandleEvent,
        texts: mpsc::UnboundedSender<String>,
        timeout: Duration,
        max_total: Duration,
    ) -> Result<EventDone, InvokeError> {
        let (what, build) = handle_event(event, timeout);
        match self
            .request(what.clone(), build, Some(texts), None, timeout, max_total)
            .await?
        {
            Reply::Event(r) => Ok(r),
            other => Err(InvokeError::Failed(
                self.gone(what, format!("answered an event with {}", other.kind())),
            )),
        }
    }

    /// Forwards a `Reply` text of event `call_id` to its caller (and counts as
    /// progress). One for an unknown call is dropped.
    pub fn event_text(&self, call_id: u64, text: String) {
        let mut calls = self.calls.lock().unwrap();
        match calls.map.get_mut(&call_id) {
            Some(p) => {
                p.progress_at = Some(Instant::now());
                match &p.texts {
                    Some(tx) => {
                        let _ = tx.send(text);
                    }
                    None => {
                        tracing::warn!(plugin = %self.plugin, call = %p.what, "Reply to a call that is not an event; dropped")
                    }
                }
            }
            None => {
                tracing::debug!(plugin = %self.plugin, call_id, "Reply to an event nobody waits for; dropped")
            }
        }
    }

    /// Sends the message `build(call_id)` and waits for the plugin's reply to it.
    async fn request(
        &self,
        what: Target,
        build: impl FnOnce(u64) -> Msg,
        texts: Option<mpsc::UnboundedSender<String>>,
        progress: Option<ProgressSink>,
        timeout: Duration,
        max_total: Duration,
    ) -> Result<Reply, InvokeError> {
        let call_id = self.next_call_id.fetch_add(1, Ordering::Relaxed);
        // Log lines of this call carry its id (the `tool_call` span's empty field).
        tracing::Span::current().record("call_id", call_id);
        let (tx, mut rx) = oneshot::channel();
        {
            let mut calls = self.calls.lock().unwrap();
            if let Some(reason) = &calls.closed {
                return Err(InvokeError::NotSent(reason.clone()));
            }
            calls.map.insert(
                call_id,
                Pending {
                    what: what.clone(),
                    reply: tx,
                    texts,
                    progress_at: None,
                    progress,
                },
            );
        }
        let mut guard = CallGuard {
            session: self,
            call_id,
            done: false,
            reason: "caller went away",
        };
        if !self.send(build(call_id)).await {
            guard.done = true;
            self.calls.lock().unwrap().map.remove(&call_id);
            return Err(InvokeError::NotSent("its session closed".into()));
        }
        let started = tokio::time::Instant::now();
        let hard_stop = started + max_total.max(timeout);
        let mut deadline = started + timeout;
        let outcome = loop {
            match tokio::time::timeout_at(deadline, &mut rx).await {
                Ok(outcome) => break outcome,
                Err(_) => {
                    let progress_at = self
                        .calls
                        .lock()
                        .unwrap()
                        .map
                        .get(&call_id)
                        .and_then(|p| p.progress_at);
                    let extended = progress_at
                        .map(|t| (tokio::time::Instant::from_std(t) + timeout).min(hard_stop));
                    match extended {
                        Some(d) if d > deadline => deadline = d,
                        _ => {
                            guard.reason = "timeout";
                            return Err(InvokeError::Failed(CallError::Timeout {
                                plugin: self.plugin.clone(),
                                target: what,
                                after_ms: (deadline - started).as_millis() as u64,
                            }));
                        }
                    }
                }
            }
        };
        guard.done = true;
        match outcome {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(reason)) => Err(InvokeError::Failed(self.gone(what, reason))),
            Err(_) => Err(InvokeError::Failed(
                self.gone(what, "closed its session".into()),
            )),
        }
    }

    fn gone(&self, target: Target, reason: String) -> CallError {
        CallError::PluginGone {
            plugin: self.plugin.clone(),
            target,
            reason,
        }
    }

    /// Delivers a reply; one for an unknown (timed out, cancelled) call is dropped.
    pub fn complete(&self, reply: Reply) {
        let call_id = reply.call_id();
        let pending = self.calls.lock().unwrap().map.remove(&call_id);
        match pending {
            Some(p) => {
                let _ = p.reply.send(Ok(reply));
            }
            None => tracing::debug!(
                plugin = %self.plugin,
                call_id,
                "reply to a call nobody waits for (timed out or cancelled); dropped"
            ),
        }
    }

    /// Ends the session: refuses new calls and fails every call in flight at once
    /// with `reason` (e.g. "exit status 1"). Idempotent: the first reason wins.
    pub fn close(&self, reason: &str) {
        let drained: Vec<Pending> = {
            let mut calls = self.calls.lock().unwrap();
            if calls.closed.is_none() {
                calls.closed = Some(reason.to_string());
            }
            calls.map.drain().map(|(_, p)| p).collect()
        };
        for p in drained {
            tracing::warn!(plugin = %self.plugin, call = %p.what, "call failed: plugin {reason}");
            let _ = p.reply.send(Err(reason.to_string()));
        }
    }

    /// Number of calls in flight.
    pub fn in_flight(&self) -> usize {
        self.calls.lock().unwrap().map.len()
    }
}
