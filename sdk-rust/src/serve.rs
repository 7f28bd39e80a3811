//! Serving a plugin: the session with the broker (proto/README.md, "The plugin
//! session, step by step").
//!
//! One I/O loop owns the session: it reads the broker's messages, answers `Ping` at
//! once, spawns each `InvokeTool` as its own task (tracked in a `JoinSet`, with a
//! cancellation token), and sends each finished task's result. Everything the plugin
//! sends goes through one unbounded mpsc that feeds the request stream.

use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hearth_proto::v1::plugin_host_client::PluginHostClient;
use hearth_proto::v1::{self as pb, host_message::Msg as In, plugin_message::Msg as Out};
use hearth_proto::{
    ENV_ADDR, ENV_PLUGIN, ENV_TOKEN, ENV_TOKEN_FD, MAX_MESSAGE_BYTES, PROTOCOL_VERSION,
    TOKEN_METADATA,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataValue;

use crate::event::Event;
use crate::linkzone::Trigger;
use crate::plugin::{EventHandler, Plugin, PluginConfig, Registrar, StageEntry, StageHandler};
use crate::tool::{Args, CallContext, Tool};
use crate::trace::{self, Trace};
use crate::{transport, Error, Host};

/// SDK name sent in `Hello.sdk`.
pub const SDK_NAME: &str = "hearth-plugin-rust";

/// Optional protocol behaviours this SDK supports, sent in `Hello.features`.
pub const FEATURES: &[&str] = &["cancel", "progress", "trace"];

/// How long `stop()` may take when the broker gave no grace period or went away.
const DEFAULT_STOP_BUDGET: Duration = Duration::from_secs(2);

/// Time the transport gets to write `Hello` to the socket before an
/// [`after_hello`](ServeConfig::after_hello) hook runs.
const HELLO_FLUSH: Duration = Duration::from_millis(50);

/// An [`after_hello`](ServeConfig::after_hello) hook.
type AfterHello = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Where and as whom to serve: the values the broker passes in `HEARTH_ADDR`,
/// `HEARTH_PLUGIN` and the spawn token's pipe (`HEARTH_TOKEN_FD`, see
/// [`from_env`](Self::from_env)).
///
/// Two test knobs make protocol faults reproducible (the `stress` example uses them;
/// real plugins leave them alone): [`with_protocol_version`](Self::with_protocol_version)
/// and [`after_hello`](Self::after_hello).
#[derive(Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// Broker address: `unix:///abs/path/hearth.sock` or `http://127.0.0.1:PORT`.
    pub addr: String,
    /// Spawn token, sent as `x-hearth-token`.
    pub token: String,
    /// Name the broker knows this plugin by.
    pub plugin: String,
    /// `Hello.protocol_version`; [`PROTOCOL_VERSION`] unless changed for a test.
    pub protocol_version: String,
    after_hello: Option<AfterHello>,
}

impl PartialEq for ServeConfig {
    fn eq(&self, other: &Self) -> bool {
        self.addr == other.addr
            && self.token == other.token
            && self.plugin == other.plugin
            && self.protocol_version == other.protocol_version
            && match (&self.after_hello, &other.after_hello) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for ServeConfig {}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("addr", &self.addr)
            .field("token", &"<redacted>")
            .field("plugin", &self.plugin)
            .field("protocol_version", &self.protocol_version)
            .field("after_hello", &self.after_hello.as_ref().map(|_| "<hook>"))
            .finish()
    }
}

impl ServeConfig {
    /// A config from explicit values (tests, embedding).
    pub fn new(
        addr: impl Into<String>,
        token: impl Into<String>,
        plugin: impl Into<String>,
    ) -> Self {
        ServeConfig {
            addr: addr.into(),
            token: token.into(),
            plugin: plugin.into(),
            protocol_version: PROTOCOL_VERSION.into(),
            after_hello: None,
        }
    }

    /// The config the broker passed: `HEARTH_ADDR`, `HEARTH_PLUGIN` and the spawn token.
    ///
    /// The token never sits in the environment: the broker writes it into a pipe and
    /// names the inherited read end in `HEARTH_TOKEN_FD`. The first call reads that fd to
    /// EOF (trailing whitespace trimmed), closes it and removes `HEARTH_TOKEN_FD` from
    /// the process environment, so child processes do not read a closed or reused fd
    /// number; the token (or the error) is kept for the process's lifetime. Without
    /// `HEARTH_TOKEN_FD` the token is `HEARTH_TOKEN` (manual runs).
    ///
    /// [`serve`] and [`serve_configured`] call this first, before they start the runtime.
    /// A plugin whose `main` starts threads or opens files before serving should call it
    /// first itself (removing a variable is not thread-safe for C code reading the
    /// environment at the same time).
    pub fn from_env() -> Result<Self, Error> {
        let token = spawn_token();
        let var = |var: &'static str| std::env::var(var).map_err(|_| Error::MissingEnv { var });
        Ok(ServeConfig::new(var(ENV_ADDR)?, token?, var(ENV_PLUGIN)?))
    }

    /// Test knob: send `version` as `Hello.protocol_version` instead of
    /// [`PROTOCOL_VERSION`]. A broker with another major version answers `Rejected`,
    /// so serving fails with [`Error::Rejected`] (exit code 3 under [`serve`]).
    pub fn with_protocol_version(mut self, version: impl Into<String>) -> Self {
        self.protocol_version = version.into();
        self
    }

    /// Test knob: run `hook` after `Hello` and before `Register`.
    ///
    /// With a hook, `Register` is held back until the hook's future completes: the
    /// session opens with `Hello` alone, the hook runs once the transport has taken
    /// `Hello` (plus a moment for it to reach the socket), and only then is
    /// `Register` sent. Meanwhile nothing reads the broker's messages, so a `Ping`
    /// goes unanswered. A hook that calls [`std::process::exit`] is a plugin that dies
    /// after `Hello`; one that never completes (`std::future::pending`) is a plugin
    /// that never registers. Without a hook (the default) `Hello` and `Register`
    /// leave together.
    pub fn after_hello<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.after_hello = Some(Arc::new(move || Box::pin(hook())));
        self
    }
}

/// Serves `plugin` to the broker that spawned this process, then exits the process.
///
/// Reads the config ([`ServeConfig::from_env`]), builds a current-thread tokio runtime
/// and runs [`serve_with`]. Exits 0 after a `Shutdown` or when the broker closes the
/// session; on an error prints it to stderr and exits with [`Error::exit_code`] (3 when
/// the registration was rejected).
pub fn serve<P: Plugin>(plugin: P) -> ! {
    serve_configured(plugin, |config| config)
}

/// Like [`serve`], but `configure` may adjust the config read from the environment
/// first (the [`ServeConfig`] test knobs). A missing variable still exits 2.
pub fn serve_configured<P: Plugin>(
    plugin: P,
    configure: impl FnOnce(ServeConfig) -> ServeConfig,
) -> ! {
    // Before the runtime exists: the token's fd is read while this is the only thread.
    let config = ServeConfig::from_env();
    run_to_exit(async move { serve_with(plugin, configure(config?)).await })
}

/// The spawn token of this process ([`ServeConfig::from_env`]): read from the pipe fd
/// `HEARTH_TOKEN_FD` on the first call, else `HEARTH_TOKEN`; the same outcome every call.
fn spawn_token() -> Result<String, Error> {
    /// `Err((value, detail))`: `HEARTH_TOKEN_FD=value` failed; `Ok(None)`: no token given.
    type Outcome = Result<Option<String>, (String, String)>;
    static TOKEN: OnceLock<Outcome> = OnceLock::new();
    let outcome = TOKEN.get_or_init(|| match std::env::var_os(ENV_TOKEN_FD) {
        Some(value) => {
            std::env::remove_var(ENV_TOKEN_FD);
            let value = value.to_string_lossy().into_owned();
            read_token_fd(&value)
                .map(Some)
                .map_err(|detail| (value, detail))
        }
        None => Ok(std::env::var(ENV_TOKEN).ok()),
    });
    match outcome {
        Ok(Some(token)) => Ok(token.clone()),
        Ok(None) => Err(Error::MissingToken),
        Err((value, detail)) => Err(Error::TokenFd {
            value: value.clone(),
            detail: detail.clone(),
        }),
    }
}

/// Reads the token pipe named by `HEARTH_TOKEN_FD=value` to EOF and closes it; the
/// error says what went wrong.
fn read_token_fd(value: &str) -> Result<String, String> {
    /// More than any token: a pipe that keeps giving is not a token pipe.
    const MAX_TOKEN_BYTES: u64 = 64 * 1024;
    /// How long a non-blocking pipe may stay empty while its writer is open.
    const WAIT: Duration = Duration::from_secs(10);
    let fd: RawFd = match value.parse() {
        Ok(fd) if value.len() <= 9 && value.bytes().all(|b| b.is_ascii_digit()) => fd,
        _ => return Err("not a file descriptor number".into()),
    };
    let cannot = |why: String| format!("cannot read the token: {why}");
    if fd <= 2 {
        return Err(cannot(format!("fd {fd} is stdin, stdout or stderr")));
    }
    // Whether the fd is open, and a pipe, without taking it over yet.
    let dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    let kind = match std::fs::metadata(format!("{dir}/{fd}")) {
        Ok(meta) => meta.file_type(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(cannot(format!("fd {fd} is not open")))
        }
        Err(e) => return Err(cannot(e.to_string())),
    };
    if !kind.is_fifo() && !kind.is_socket() {
        // Not ours to close: some other file has the number.
        return Err(cannot(format!("fd {fd} is not a pipe")));
    }
    // SAFETY: `fd` is open (checked just above) and is the pipe the broker passed for the
    // SDK to consume: nothing else in this process owns it, and this runs once (the
    // `OnceLock` in `spawn_token`). The `File` closes it when dropped.
    let mut pipe = unsafe { File::from_raw_fd(fd) };
    let mut data = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let room = (MAX_TOKEN_BYTES + 1).saturating_sub(data.len() as u64);
        match (&mut pipe).take(room).read_to_end(&mut data) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A non-blocking pipe whose writer has not finished yet.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(cannot(format!(
                    "no end of file within {} s (the writer keeps the pipe open)",
                    WAIT.as_secs()
                )))
            }
            Err(e) => return Err(cannot(e.to_string())),
        }
    }
    drop(pipe);
    if data.len() as u64 > MAX_TOKEN_BYTES {
        return Err(cannot(format!("more than {MAX_TOKEN_BYTES} bytes")));
    }
    if !data.is_ascii() {
        return Err(cannot("it is not ASCII text".into()));
    }
    let token = String::from_utf8_lossy(&data).trim_end().to_owned();
    if token.is_empty() {
        return Err(cannot("the pipe held no token".into()));
    }
    Ok(token)
}

/// Runs `serving` on a current-thread runtime, then exits the process with its outcome.
fn run_to_exit(serving: impl Future<Output = Result<(), Error>>) -> ! {
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)
        .and_then(|rt| rt.block_on(serving));
    let _ = std::io::stdout().flush();
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("hearth-plugin: {e}");
            std::process::exit(e.exit_code())
        }
    }
}

/// Serves `plugin` with the config from the environment ([`ServeConfig::from_env`]).
/// Returns `Ok` after a `Shutdown` or when the broker closes the session.
pub async fn serve_async<P: Plugin>(plugin: P) -> Result<(), Error> {
    serve_with(plugin, ServeConfig::from_env()?).await
}

/// Serves `plugin` with an explicit config. Returns `Ok` after a `Shutdown` (once
/// `stop()` has run) or when the broker closes the session.
pub async fn serve_with<P: Plugin>(mut plugin: P, config: ServeConfig) -> Result<(), Error> {
    let name = config.plugin.clone();
    let token = MetadataValue::try_from(config.token.as_str()).map_err(|_| Error::BadToken {
        plugin: name.clone(),
    })?;
    let channel = transport::connect(&config.addr).await?;
    let host = Host::new(channel.clone(), token.clone(), name.clone());
    let mut client = PluginHostClient::new(channel)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
        .max_decoding_message_size(MAX_MESSAGE_BYTES);

    plugin
        .init(&PluginConfig::new(name.clone()))
        .await
        .map_err(|source| Error::Init {
            plugin: name.clone(),
            source,
        })?;
    let mut registrar = Registrar::new(name.clone()).with_host(host.clone());
    plugin
        .start(&mut registrar)
        .await
        .map_err(|source| Error::Start {
            plugin: name.clone(),
            source,
        })?;
    let parts = registrar.into_parts();
    let (tools, specs) = tool_table(&name, plugin.tools().into_iter().chain(parts.tools))?;
    let stage_hooks: Vec<pb::StageHook> = parts.stages.iter().map(|e| e.hook.clone()).collect();
    let stages: HashMap<String, Arc<StageHandler>> = parts
        .stages
        .into_iter()
        .map(|StageEntry { hook, handler }| (hook.hook_id, handler))
        .collect();
    let triggers: Vec<pb::Trigger> = parts.triggers.iter().map(|(t, _)| t.to_wire()).collect();
    let events: HashMap<Trigger, Arc<EventHandler>> = parts.triggers.into_iter().collect();

    let mut meta = plugin.metadata();
    if meta.name.is_empty() {
        meta.name = name.clone();
    }
    let (out, out_rx) = mpsc::unbounded_channel();
    let send = |msg| {
        let _ = out.send(pb::PluginMessage { msg: Some(msg) });
    };
    send(Out::Hello(pb::Hello {
        protocol_version: config.protocol_version.clone(),
        sdk: SDK_NAME.into(),
        sdk_version: env!("CARGO_PKG_VERSION").into(),
        features: FEATURES.iter().map(|f| f.to_string()).collect(),
        pid: std::process::id(),
    }));
    let register = Out::Register(pb::Register {
        plugin: Some(pb::PluginInfo {
            name: meta.name,
            version: meta.version,
            author: meta.author,
            description: meta.description,
        }),
        tools: specs,
        stages: stage_hooks,
        inject: parts.inject.as_ref().map(|i| i.to_wire()),
        triggers,
        ..Default::default()
    });
    // Test knob (`after_hello`): Register waits until the hook has run, and the
    // hook waits until the transport has taken Hello.
    let (hello_taken, hello_taken_rx) = oneshot::channel();
    let mut hello_taken = config.after_hello.is_some().then_some(hello_taken);
    let register = match config.after_hello {
        None => {
            send(register);
            None
        }
        Some(_) => Some(register),
    };
    let outbound = UnboundedReceiverStream::new(out_rx).map(move |msg| {
        if let Some(taken) = hello_taken.take() {
            let _ = taken.send(());
        }
        msg
    });

    let mut request = tonic::Request::new(outbound);
    request.metadata_mut().insert(TOKEN_METADATA, token);
    let inbound = client
        .attach(request)
        .await
        .map_err(|status| Error::Attach {
            plugin: name.clone(),
            addr: config.addr.clone(),
            status: Box::new(status),
        })?
        .into_inner();
    if let (Some(hook), Some(register)) = (&config.after_hello, register) {
        let _ = hello_taken_rx.await;
        tokio::time::sleep(HELLO_FLUSH).await;
        hook().await;
        send(register);
    }

    Session {
        plugin: name,
        tools,
        stages,
        events,
        host,
        out,
        inbound,
        tasks: JoinSet::new(),
        in_flight: HashMap::new(),
        by_task: HashMap::new(),
        all_calls: CancellationToken::new(),
    }
    .run(&mut plugin)
    .await
}

/// Tools by name.
type ToolTable = HashMap<String, Arc<dyn Tool>>;

/// The tools by name, and their wire specs in registration order.
fn tool_table(
    plugin: &str,
    tools: impl Iterator<Item = Arc<dyn Tool>>,
) -> Result<(ToolTable, Vec<pb::ToolSpec>), Error> {
    let mut table = HashMap::new();
    let mut specs = Vec::new();
    for tool in tools {
        let def = tool.definition();
        if table.contains_key(&def.name) {
            return Err(Error::DuplicateTool {
                plugin: plugin.into(),
                tool: def.name,
            });
        }
        specs.push(pb::ToolSpec {
            name: def.name.clone(),
            description: def.description,
            // No schema (`Value::Null`, e.g. `ToolDef::default()`): the broker reads an
            // empty text as "no parameters"; "null" would be an invalid schema.
            parameters_json: if def.parameters.is_null() {
                String::new()
            } else {
                def.parameters.to_string()
            },
            ai_tool: tool.ai_tool().map(|ai| ai.to_wire()),
            ..Default::default()
        });
        table.insert(def.name, tool);
    }
    Ok((table, specs))
}

/// What a handler task runs.
enum Work {
    /// A tool call, with the tool's name.
    Tool(String),
    /// A stage hook run, with the hook id.
    Stage(String),
    /// An event handler run, with its trigger.
    Event(Trigger),
}

/// A call whose handler task is running.
struct InFlight {
    work: Work,
    cancel: CancellationToken,
    abort: AbortHandle,
}

struct Session {
    plugin: String,
    tools: ToolTable,
    /// Stage handlers by hook id.
    stages: HashMap<String, Arc<StageHandler>>,
    /// Event handlers by trigger.
    events: HashMap<Trigger, Arc<EventHandler>>,
    /// Host-service handle given to every call.
    host: Host,
    out: mpsc::UnboundedSender<pb::PluginMessage>,
    inbound: tonic::Streaming<pb::HostMessage>,
    /// Handler tasks; each yields the message that answers its call.
    tasks: JoinSet<Out>,
    /// Calls not yet answered nor cancelled, by call id.
    in_flight: HashMap<u64, InFlight>,
    /// Call id of each handler task (also of cancelled ones until they are reaped).
    by_task: HashMap<tokio::task::Id, u64>,
    /// Parent of every call's token; cancelled on shutdown.
    all_calls: CancellationToken,
}

/// How the main loop ended.
enum End {
    Shutdown(Duration),
    Closed,
    Failed(tonic::Status),
}

impl Session {
    async fn run<P: Plugin>(mut self, plugin: &mut P) -> Result<(), Error> {
        if let Some(end) = self.await_registered().await? {
            return self.finish(plugin, end).await;
        }
        let end = loop {
            tokio::select! {
                biased;
                msg = self.inbound.message() => match msg {
                    Ok(Some(msg)) => {
                        if let Some(end) = self.on_message(msg)? {
                            break end;
                        }
                    }
                    Ok(None) => break End::Closed,
                    Err(status) => break End::Failed(status),
                },
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.on_task_done(joined);
                }
            }
        };
        self.finish(plugin, end).await
    }

    /// Waits for `Registered` / `Rejected`; `Some` when the session ended meanwhile.
    async fn await_registered(&mut self) -> Result<Option<End>, Error> {
        loop {
            let msg = match self.inbound.message().await {
                Ok(Some(msg)) => msg,
                Ok(None) => {
                    return Err(Error::ClosedBeforeRegistered {
                        plugin: self.plugin.clone(),
                    });
                }
                Err(status) => {
                    return Err(Error::Stream {
                        plugin: self.plugin.clone(),
                        status: Box::new(status),
                    });
                }
            };
            match msg.msg {
                Some(In::Registered(r)) => {
                    for item in &r.rejected {
                        eprintln!(
                            "hearth-plugin: plugin {}: broker rejected {} {}: {}",
                            self.plugin, item.kind, item.name, item.reason
                        );
                    }
                    return Ok(None);
                }
                Some(In::Rejected(r)) => {
                    return Err(Error::Rejected {
                        plugin: self.plugin.clone(),
                        reason: r.reason,
                        items: r.items,
                    });
                }
                Some(In::Ping(p)) => self.send(Out::Pong(pb::Pong { nonce: p.nonce })),
                Some(In::Shutdown(s)) => return Ok(Some(End::Shutdown(grace(s.grace_ms)))),
                other => {
                    return Err(Error::Protocol {
                        plugin: self.plugin.clone(),
                        detail: format!("expected Registered or Rejected, got {other:?}"),
                    });
                }
            }
        }
    }

    /// Handles one broker message; `Some` ends the session.
    fn on_message(&mut self, msg: pb::HostMessage) -> Result<Option<End>, Error> {
        match msg.msg {
            Some(In::Ping(p)) => self.send(Out::Pong(pb::Pong { nonce: p.nonce })),
            Some(In::InvokeTool(call)) => self.invoke(call),
            Some(In::Cancel(c)) => {
                if let Some(call) = self.in_flight.remove(&c.call_id) {
                    call.cancel.cancel();
                    call.abort.abort();
                }
            }
            Some(In::RunStage(run)) => self.run_stage(run),
            Some(In::HandleEvent(ev)) => self.handle_event(ev),
            Some(In::ToolRegistration(tr)) if !tr.ok => eprintln!(
                "hearth-plugin: plugin {}: tool {}: registration refused: {}",
                self.plugin, tr.name, tr.error
            ),
            Some(In::Shutdown(s)) => return Ok(Some(End::Shutdown(grace(s.grace_ms)))),
            Some(In::Rejected(r)) => {
                return Err(Error::Rejected {
                    plugin: self.plugin.clone(),
                    reason: r.reason,
                    items: r.items,
                });
            }
            Some(other) => eprintln!(
                "hearth-plugin: plugin {}: ignoring unsupported broker message {other:?}",
                self.plugin
            ),
            None => {}
        }
        Ok(None)
    }

    fn invoke(&mut self, call: pb::InvokeTool) {
        let call_id = call.call_id;
        let Some(tool) = self.tools.get(&call.tool).cloned() else {
            self.send(Out::ToolResult(pb::ToolResult {
                call_id,
                success: false,
                error: format!("plugin {} has no tool named {:?}", self.plugin, call.tool),
                ..Default::default()
            }));
            return;
        };
        if self.in_flight.contains_key(&call_id) {
            eprintln!(
                "hearth-plugin: plugin {}: ignoring InvokeTool with call id {call_id}, already in flight",
                self.plugin
            );
            return;
        }
        let cancel = self.all_calls.child_token();
        let trace = Trace::new(call.traceparent, call.tracestate);
        let ctx = CallContext::new(
            call_id,
            call.tool.clone(),
            self.plugin.clone(),
            call.sender.map(Into::into).unwrap_or_default(),
            (call.timeout_ms > 0).then(|| Duration::from_millis(call.timeout_ms.into())),
            cancel.clone(),
            self.out.clone(),
            self.host.clone(),
            trace.clone(),
        );
        let abort = self.tasks.spawn(trace::scope(trace, async move {
            Out::ToolResult(run_call(tool, ctx, call.args_json).await)
        }));
        self.track(call_id, Work::Tool(call.tool), cancel, abort);
    }

    fn run_stage(&mut self, run: pb::RunStage) {
        let call_id = run.call_id;
        let Some(handler) = self.stages.get(&run.hook_id).cloned() else {
            self.send(Out::StageResult(pb::StageResult {
                call_id,
                context: run.context,
                error: format!("plugin {} has no stage hook {:?}", self.plugin, run.hook_id),
            }));
            return;
        };
        if self.in_flight.contains_key(&call_id) {
            eprintln!(
                "hearth-plugin: plugin {}: ignoring RunStage with call id {call_id}, already in flight",
                self.plugin
            );
            return;
        }
        let cancel = self.all_calls.child_token();
        let hook = run.hook_id.clone();
        let context = run.context.unwrap_or_default();
        let trace = Trace::new(run.traceparent, run.tracestate);
        let abort = self.tasks.spawn(trace::scope(trace, async move {
            let (context, error) = match handler(context).await {
                Ok(context) => (Some(context), String::new()),
                Err(e) => (None, format!("stage hook {hook}: {e}")),
            };
            Out::StageResult(pb::StageResult {
                call_id,
                context,
                error,
            })
        }));
        self.track(call_id, Work::Stage(run.hook_id), cancel, abort);
    }

    fn handle_event(&mut self, ev: pb::HandleEvent) {
        let call_id = ev.call_id;
        let trigger = ev.trigger.as_ref().and_then(Trigger::from_wire);
        let handler = trigger.as_ref().and_then(|t| self.events.get(t).cloned());
        let (Some(trigger), Some(handler)) = (trigger, handler) else {
            self.send(Out::EventDone(pb::EventDone {
                call_id,
                error: format!(
                    "plugin {} has no event handler for trigger {}",
                    self.plugin,
                    match &ev.trigger {
                        Some(t) => format!("type {} {:?}", t.r#type, t.pattern),
                        None => "(none given)".into(),
                    }
                ),
            }));
            return;
        };
        if self.in_flight.contains_key(&call_id) {
            eprintln!(
                "hearth-plugin: plugin {}: ignoring HandleEvent with call id {call_id}, already in flight",
                self.plugin
            );
            return;
        }
        let cancel = self.all_calls.child_token();
        let trace = Trace::new(ev.traceparent.clone(), ev.tracestate.clone());
        let event = Event::from_wire(
            ev,
            trigger.clone(),
            self.plugin.clone(),
            cancel.clone(),
            self.out.clone(),
            self.host.clone(),
        );
        let label = trigger.clone();
        let abort = self.tasks.spawn(trace::scope(trace, async move {
            let error = match handler(event).await {
                Ok(()) => String::new(),
                Err(e) => format!("event handler of trigger {label}: {e}"),
            };
            Out::EventDone(pb::EventDone { call_id, error })
        }));
        self.track(call_id, Work::Event(trigger), cancel, abort);
    }

    fn track(&mut self, call_id: u64, work: Work, cancel: CancellationToken, abort: AbortHandle) {
        self.by_task.insert(abort.id(), call_id);
        self.in_flight.insert(
            call_id,
            InFlight {
                work,
                cancel,
                abort,
            },
        );
    }

    fn on_task_done(&mut self, joined: Result<(tokio::task::Id, Out), tokio::task::JoinError>) {
        let id = match &joined {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        let Some(call_id) = self.by_task.remove(&id) else {
            return;
        };
        // Cancelled calls are no longer in flight: their outcome is not sent.
        let Some(call) = self.in_flight.remove(&call_id) else {
            return;
        };
        let failure = match joined {
            Ok((_, answer)) => return self.send(within_limit(&self.plugin, answer, &call.work)),
            Err(e) if e.is_panic() => format!("panicked: {}", panic_text(e.into_panic())),
            Err(_) => "was aborted".to_string(),
        };
        let answer = match call.work {
            Work::Tool(tool) => {
                let error = format!("tool {tool} {failure}");
                eprintln!("hearth-plugin: plugin {}: {error}", self.plugin);
                Out::ToolResult(pb::ToolResult {
                    call_id,
                    success: false,
                    error,
                    ..Default::default()
                })
            }
            Work::Stage(hook) => {
                let error = format!("stage hook {hook} {failure}");
                eprintln!("hearth-plugin: plugin {}: {error}", self.plugin);
                Out::StageResult(pb::StageResult {
                    call_id,
                    context: None,
                    error,
                })
            }
            Work::Event(trigger) => {
                let error = format!("event handler of trigger {trigger} {failure}");
                eprintln!("hearth-plugin: plugin {}: {error}", self.plugin);
                Out::EventDone(pb::EventDone { call_id, error })
            }
        };
        self.send(answer);
    }

    /// Stops calls, runs `stop()` within the budget, closes the stream.
    async fn finish<P: Plugin>(mut self, plugin: &mut P, end: End) -> Result<(), Error> {
        self.all_calls.cancel();
        self.tasks.abort_all();
        let budget = match &end {
            End::Shutdown(grace) => *grace,
            _ => DEFAULT_STOP_BUDGET,
        };
        match tokio::time::timeout(budget, plugin.stop()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("hearth-plugin: plugin {}: stop failed: {e}", self.plugin),
            Err(_) => eprintln!(
                "hearth-plugin: plugin {}: stop did not finish within {} ms",
                self.plugin,
                budget.as_millis()
            ),
        }
        // Dropping the session drops the sender: the request stream ends.
        match end {
            End::Shutdown(_) | End::Closed => Ok(()),
            End::Failed(status) => Err(Error::Stream {
                plugin: self.plugin.clone(),
                status: Box::new(status),
            }),
        }
    }

    fn send(&self, msg: Out) {
        // Fails only when the request stream is gone; the inbound side then ends too.
        let _ = self.out.send(pb::PluginMessage { msg: Some(msg) });
    }
}

/// `answer`, or an error answer in its place when it would not fit in one gRPC message
/// ([`MAX_MESSAGE_BYTES`]): the transport would fail the whole session on it.
fn within_limit(plugin: &str, answer: Out, work: &Work) -> Out {
    // A PluginMessage is just its oneof field, so this is the encoded message size.
    let len = answer.encoded_len();
    if len <= MAX_MESSAGE_BYTES {
        return answer;
    }
    let over = format!(
        "result is {len} bytes, over the {} MiB message limit",
        MAX_MESSAGE_BYTES / (1024 * 1024)
    );
    match (answer, work) {
        (Out::ToolResult(r), Work::Tool(tool)) => {
            let error = format!("tool {tool}: {over}");
            eprintln!("hearth-plugin: plugin {plugin}: {error}");
            Out::ToolResult(pb::ToolResult {
                call_id: r.call_id,
                success: false,
                error,
                ..Default::default()
            })
        }
        (Out::StageResult(r), Work::Stage(hook)) => {
            let error = format!("stage hook {hook}: {over}");
            eprintln!("hearth-plugin: plugin {plugin}: {error}");
            Out::StageResult(pb::StageResult {
                call_id: r.call_id,
                context: None,
                error,
            })
        }
        (answer, _) => answer,
    }
}

/// Time `stop()` gets after `Shutdown{grace_ms}`: three quarters of the grace, so the
/// process can exit inside it.
fn grace(grace_ms: u32) -> Duration {
    if grace_ms == 0 {
        DEFAULT_STOP_BUDGET
    } else {
        Duration::from_millis(u64::from(grace_ms) * 3 / 4)
    }
}

/// One call: parse, validate, execute. Runs as its own task.
async fn run_call(tool: Arc<dyn Tool>, ctx: CallContext, args_json: String) -> pb::ToolResult {
    let call_id = ctx.call_id();
    let name = ctx.tool().to_string();
    let failed = |error: String| pb::ToolResult {
        call_id,
        success: false,
        error,
        ..Default::default()
    };
    let args: Args = if args_json.trim().is_empty() {
        Args::new()
    } else {
        match serde_json::from_str(&args_json) {
            Ok(args) => args,
            Err(e) => return failed(format!("tool {name}: arguments are not a JSON object: {e}")),
        }
    };
    if let Err(e) = tool.validate(&args) {
        return failed(format!("invalid arguments for tool {name}: {e}"));
    }
    match tool.execute(&ctx, args).await {
        Ok(result) => result.into_wire(call_id, &name),
        Err(e) => failed(e.to_string()),
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
