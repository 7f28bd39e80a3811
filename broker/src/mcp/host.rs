//! Hearth as an MCP host: one MCP session per supervised MCP plugin process (stdio)
//! or connection (Streamable HTTP), through `rmcp`'s client.
//!
//! The supervisor treats an MCP server like any plugin. What a gRPC plugin does on its
//! `Attach` stream, [`run_session`] does in the broker: it connects (`server/discover`
//! or `initialize`), lists the tools and registers them, publishes a [`Session`], and
//! then translates the session's messages — `InvokeTool` → `tools/call` with a
//! progress token, `Cancel` → `notifications/cancelled`, `Ping` → an MCP `ping` (any
//! answer, even "method not found" from a 2026 server, counts as alive),
//! `Shutdown` → closing the connection — and the server's back — results,
//! progress notifications (which extend the call's timeout), `tools/list_changed`
//! (the plugin's tools replaced at once), log messages (into its log). So restart
//! policy, startup timeout, hung detection, timeouts, "never sent twice" and crash →
//! fast failure of the calls in flight are the supervisor's own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_proto::v1::{host_message::Msg as HostMsg, HostMessage, ToolProgress, ToolResult};
#[allow(deprecated)]
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientNotification, ClientRequest, Implementation,
    PingRequest, ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestId,
    ServerNotification, ServerResult, SubscriptionFilter,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, Peer, PeerRequestOptions,
    RoleClient, RunningService,
};
use rmcp::ClientHandler;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, Notify};
use tonic::Status;

use crate::manifest::{McpProtocol, McpSpec, PluginSpec};
use crate::mcp::convert;
use crate::registry::Registry;
use crate::supervisor::process::LogRing;
use crate::supervisor::session::{Reply, Session};

/// What the broker knows of an MCP plugin's server, kept across its restarts (shown
/// by `hearth mcp list`, used by resource and prompt requests).
#[derive(Debug, Default)]
pub struct McpLink {
    state: Mutex<LinkState>,
}

#[derive(Debug, Default, Clone)]
struct LinkState {
    protocol_version: String,
    server_name: String,
    server_version: String,
    resources: bool,
    prompts: bool,
    /// `auto` fell back to `initialize` once: later sessions start with it.
    legacy: bool,
    /// The live session's peer and generation.
    peer: Option<(u64, Peer<RoleClient>)>,
}

/// A snapshot of [`McpLink`] for listings.
#[derive(Debug, Clone, Default)]
pub struct McpInfo {
    /// Negotiated protocol revision, e.g. `2025-11-25`; empty before a session.
    pub protocol_version: String,
    /// `serverInfo.name`.
    pub server_name: String,
    /// `serverInfo.version`.
    pub server_version: String,
    /// The server offers resources.
    pub resources: bool,
    /// The server offers prompts.
    pub prompts: bool,
}

/// Methods [`McpLink::request`] forwards: read-only resource and prompt requests.
pub const READ_METHODS: &[&str] = &[
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
];

/// Why an MCP request from the CLI or a plugin failed.
#[derive(Debug, thiserror::Error)]
pub enum McpRequestError {
    /// A method outside [`READ_METHODS`] or params that are not an object.
    #[error("{0}")]
    Invalid(String),
    /// No live session with the server.
    #[error("{0}")]
    Unavailable(String),
    /// The server answered with a JSON-RPC error (or the request failed).
    #[error("{0}")]
    Server(String),
}

impl From<McpRequestError> for Status {
    fn from(e: McpRequestError) -> Status {
        match e {
            McpRequestError::Invalid(m) => Status::invalid_argument(m),
            McpRequestError::Unavailable(m) => Status::unavailable(m),
            McpRequestError::Server(m) => Status::failed_precondition(m),
        }
    }
}

impl McpLink {
    /// What is known of the server now.
    pub fn info(&self) -> McpInfo {
        let s = self.state.lock().unwrap();
        McpInfo {
            protocol_version: s.protocol_version.clone(),
            server_name: s.server_name.clone(),
            server_version: s.server_version.clone(),
            resources: s.resources,
            prompts: s.prompts,
        }
    }

    /// Sends one read-only request (`method` one of [`READ_METHODS`], `params` a JSON
    /// object) to the live server of plugin `plugin`; returns the result as JSON.
    pub async fn request(
        &self,
        plugin: &str,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, McpRequestError> {
        if !READ_METHODS.contains(&method) {
            return Err(McpRequestError::Invalid(format!(
                "`{method}` is not one of {}",
                READ_METHODS.join(", ")
            )));
        }
        if !params.is_object() {
            return Err(McpRequestError::Invalid(format!(
                "params of {method} must be a JSON object, got {params}"
            )));
        }
        let peer = self
            .state
            .lock()
            .unwrap()
            .peer
            .clone()
            .map(|(_, p)| p)
            .ok_or_else(|| {
                McpRequestError::Unavailable(format!("MCP server {plugin} is not connected"))
            })?;
        let request: ClientRequest = serde_json::from_value(serde_json::json!({
            "method": method,
            "params": params,
        }))
        .map_err(|e| McpRequestError::Invalid(format!("{method}: bad params: {e}")))?;
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await
            .map_err(|e| McpRequestError::Unavailable(format!("MCP server {plugin}: {e}")))?;
        let result = handle
            .await_response()
            .await
            .map_err(|e| McpRequestError::Server(format!("MCP server {plugin}: {method}: {e}")))?;
        serde_json::to_value(&result)
            .map_err(|e| McpRequestError::Server(format!("MCP server {plugin}: {method}: {e}")))
    }
}

/// Sends one read-only MCP request (see [`READ_METHODS`]) to MCP plugin `plugin` of
/// `supervisor`; `params_json` empty = `{}`. Errors: NOT_FOUND (no such MCP plugin),
/// the others of [`McpRequestError`].
pub async fn request(
    supervisor: &crate::supervisor::Supervisor,
    plugin: &str,
    method: &str,
    params_json: &str,
) -> Result<Value, Status> {
    let p = supervisor
        .plugin(plugin)
        .filter(|p| p.spec().mcp.is_some())
        .ok_or_else(|| Status::not_found(format!("no MCP plugin named {plugin}")))?;
    let params = if params_json.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_str(params_json)
            .map_err(|e| Status::invalid_argument(format!("params are not JSON: {e}")))?
    };
    let timeout = Duration::from_secs_f64(p.spec().call_timeout_s);
    Ok(p.mcp().request(plugin, method, params, timeout).await?)
}

/// Calls in flight: progress token → the session call it belongs to and the last
/// progress value forwarded.
type ProgressMap = Arc<Mutex<HashMap<ProgressToken, (u64, f64)>>>;

/// The broker's side of one MCP connection: routes notifications.
#[derive(Clone)]
struct Handler {
    plugin: String,
    session: Arc<Session>,
    progress: ProgressMap,
    relist: Arc<Notify>,
    logs: Arc<LogRing>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("hearth", env!("CARGO_PKG_VERSION")),
        )
    }

    // Progress is not handled here but by [`ProgressTap`], as the transport reads it, in
    // the server's order.

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist.notify_one();
    }

    // Logging is deprecated from 2026-07-28 on; 2025 servers still log this way.
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let text = match &params.data {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let level = serde_json::to_value(params.level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let logger = params
            .logger
            .as_deref()
            .map(|l| format!(" {l}"))
            .unwrap_or_default();
        self.logs
            .note("mcp-log", format!("[{level}{logger}] {text}"), 0);
        tracing::debug!(plugin = %self.plugin, "MCP log: {text}");
    }
}

impl Handler {
    /// Hands one progress notification to its call (see [`ProgressTap`]).
    fn deliver_progress(&self, params: ProgressNotificationParam) {
        // Forward only increasing values (MCP requires progress to increase).
        let mut calls = self.progress.lock().unwrap();
        if let Some((call_id, last)) = calls.get_mut(&params.progress_token) {
            if params.progress > *last {
                *last = params.progress;
                self.session.progress(
                    *call_id,
                    ToolProgress {
                        message: params.message.unwrap_or_default(),
                        progress: params.progress,
                        total: params.total.unwrap_or(0.0),
                    },
                );
            }
        }
    }
}

/// A transport that hands progress notifications to their calls as they are read,
/// before the messages after them: rmcp runs each notification handler in a task of
/// its own, so the result of a call could overtake the progress sent before it (and
/// the progress be dropped, its call being over).
struct ProgressTap<T> {
    inner: T,
    handler: Handler,
}

impl<T: rmcp::transport::Transport<RoleClient>> rmcp::transport::Transport<RoleClient>
    for ProgressTap<T>
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        let msg = self.inner.receive().await?;
        if let rmcp::model::JsonRpcMessage::Notification(n) = &msg {
            if let ServerNotification::ProgressNotification(p) = &n.notification {
                self.handler.deliver_progress(p.params.clone());
            }
        }
        Some(msg)
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The process end or connection a session runs over.
pub(crate) enum Io {
    /// A child's stdout (its messages) and stdin (ours).
    Stdio(tokio::process::ChildStdout, tokio::process::ChildStdin),
    /// A Streamable HTTP endpoint with its resolved headers.
    Http {
        /// The endpoint.
        url: String,
        /// Resolved header name → value.
        headers: Vec<(String, String)>,
    },
}

/// Publishes a registered session (with its `sdk` line); false when the instance was
/// replaced meanwhile.
pub(crate) type PublishHook = Box<dyn Fn(&Arc<Session>, &str) -> bool + Send + Sync>;

/// How the supervisor hears about the session (the same events a gRPC session
/// reports from its handshake task).
pub(crate) struct Hooks {
    /// Publishes the registered session; false when the instance was replaced.
    pub publish: PublishHook,
    /// Whether the instance may still register.
    pub wants: Box<dyn Fn() -> bool + Send + Sync>,
    /// The session ended (after registering): `unpublish` and `SessionEnded`.
    pub ended: Box<dyn Fn() + Send + Sync>,
}

/// Runs one MCP session of plugin `spec` (instance `generation`) over `io` until the
/// connection ends or `stop` fires. Returns why it was refused before it registered,
/// if it was (the connect or the first `tools/list` failed).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_session(
    spec: Arc<PluginSpec>,
    generation: u64,
    io: Io,
    link: Arc<McpLink>,
    registry: Arc<Registry>,
    logs: Arc<LogRing>,
    hooks: Hooks,
    stop: oneshot::Receiver<()>,
) -> Option<String> {
    let name = spec.name.clone();
    let Some(mcp) = spec.mcp.clone() else {
        return Some("not an MCP plugin".into());
    };
    let (out, mut inbox) = mpsc::channel::<Result<HostMessage, Status>>(1024);
    let session = Arc::new(Session::new(name.clone(), generation, out));
    let handler = Handler {
        plugin: name.clone(),
        session: session.clone(),
        progress: ProgressMap::default(),
        relist: Arc::new(Notify::new()),
        logs: logs.clone(),
    };
    let legacy_before = link.state.lock().unwrap().legacy;
    let mode = lifecycle(&mcp.protocol, legacy_before);
    let wait = Duration::from_secs_f64(spec.startup_timeout_s);
    let connect = async {
        match io {
            Io::Stdio(stdout, stdin) => {
                let inner = rmcp::transport::IntoTransport::<
                    RoleClient,
                    std::io::Error,
                    rmcp::transport::async_rw::TransportAdapterAsyncRW,
                >::into_transport((stdout, stdin));
                serve(&handler, inner, mode).await
            }
            Io::Http { url, headers } => {
                let inner = rmcp::transport::StreamableHttpClientTransport::from_config(
                    http_config(&url, &headers)?,
                );
                serve(&handler, inner, mode).await
            }
        }
    };
    let running: RunningService<RoleClient, Handler> =
        match tokio::time::timeout(wait, connect).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Some(format!("MCP connect failed: {}", plain_error(&e))),
            Err(_) => {
                return Some(format!(
                    "MCP server did not answer the handshake within {} s",
                    spec.startup_timeout_s
                ))
            }
        };
    let peer = running.peer().clone();
    let info = peer.peer_info();
    let protocol = info
        .as_ref()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    let (server_name, server_version, resources, prompts, list_changed_cap) = match &info {
        Some(i) => (
            i.server_info
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            i.server_info
                .as_ref()
                .map(|s| s.version.clone())
                .unwrap_or_default(),
            i.capabilities.resources.is_some(),
            i.capabilities.prompts.is_some(),
            i.capabilities
                .tools
                .as_ref()
                .and_then(|t| t.list_changed)
                .unwrap_or(false),
        ),
        None => Default::default(),
    };
    let modern = protocol.as_str() >= "2026-07-28";
    let names: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    // The first tool list, within what is left of the startup time.
    let first = tokio::time::timeout(wait, list_tools(&peer)).await;
    let tools = match first {
        Ok(Ok(tools)) => tools,
        Ok(Err(e)) => return Some(format!("MCP tools/list failed: {e}")),
        Err(_) => {
            return Some(format!(
                "MCP tools/list gave no answer within {} s",
                spec.startup_timeout_s
            ))
        }
    };
    if !(hooks.wants)() {
        return Some(format!(
            "plugin {name}: this process was replaced before it registered"
        ));
    }
    let accepted = register(&name, &mcp, &tools, &registry, &names);
    {
        let mut s = link.state.lock().unwrap();
        s.protocol_version = protocol.clone();
        s.server_name = server_name.clone();
        s.server_version = server_version.clone();
        s.resources = resources;
        s.prompts = prompts;
        // Remembered only from `auto`: a server that needed `initialize` once gets it
        // first from now on (no second probe delay on restarts).
        s.legacy = matches!(mcp.protocol, McpProtocol::Auto) && !modern;
        s.peer = Some((generation, peer.clone()));
    }
    let sdk = format!("mcp {server_name} {server_version} (protocol {protocol})");
    // Registering is a sign of life: the heartbeat counts from here, not from the
    // spawn (the time to start is the startup timeout's business).
    session.pong();
    if !(hooks.publish)(&session, sdk.trim()) {
        link.state.lock().unwrap().peer = None;
        return None;
    }
    tracing::info!(plugin = %name, generation, protocol = %protocol, server = %server_name, tools = accepted, "MCP server registered");

    // 2026-07-28 servers send list changes on a subscription stream.
    if modern {
        let (peer, relist, plugin) = (peer.clone(), handler.relist.clone(), name.clone());
        tokio::spawn(async move {
            let filter = SubscriptionFilter::builder().tools_list_changed().build();
            match peer.listen(filter).await {
                Ok(mut sub) => {
                    while let Ok(Some(n)) = sub.next().await {
                        if matches!(n, ServerNotification::ToolListChangedNotification(_)) {
                            relist.notify_one();
                        }
                    }
                }
                Err(e) => tracing::debug!(plugin = %plugin, "subscriptions/listen refused: {e}"),
            }
        });
    } else if !list_changed_cap {
        tracing::debug!(plugin = %name, "server does not announce tools.listChanged; its notifications are honoured anyway");
    }

    let mut ct = Some(running.cancellation_token());
    let (ended_tx, mut ended_rx) = oneshot::channel::<String>();
    tokio::spawn(async move {
        let why = match running.waiting().await {
            Ok(reason) => format!("its MCP connection ended ({reason:?})"),
            Err(e) => format!("its MCP connection failed ({e})"),
        };
        let _ = ended_tx.send(why);
    });
    let mut cancels: HashMap<u64, oneshot::Sender<String>> = HashMap::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<u64>();
    let mut stop = stop;
    let ended = loop {
        tokio::select! {
            why = &mut ended_rx => break why.unwrap_or_else(|_| "its MCP connection ended".into()),
            _ = &mut stop => {
                if let Some(ct) = ct.take() {
                    ct.cancel();
                }
                break "stopped by the broker".to_string();
            }
            Some(call_id) = done_rx.recv() => { cancels.remove(&call_id); }
            _ = handler.relist.notified() => {
                match list_tools(&peer).await {
                    Ok(tools) => {
                        let n = register(&name, &mcp, &tools, &registry, &names);
                        tracing::info!(plugin = %name, tools = n, "MCP tool list changed; tools replaced");
                    }
                    Err(e) => tracing::warn!(plugin = %name, "tools/list after a list change failed: {e}"),
                }
            }
            msg = inbox.recv() => {
                let Some(Ok(HostMessage { msg: Some(msg) })) = msg else { continue };
                match msg {
                    HostMsg::InvokeTool(call) => {
                        let tool = names.lock().unwrap().get(&call.tool).cloned().unwrap_or(call.tool.clone());
                        let (cancel_tx, cancel_rx) = oneshot::channel();
                        cancels.insert(call.call_id, cancel_tx);
                        tokio::spawn(call_tool(
                            peer.clone(),
                            session.clone(),
                            handler.progress.clone(),
                            call.call_id,
                            tool,
                            call.args_json,
                            (call.traceparent, call.tracestate),
                            cancel_rx,
                            done_tx.clone(),
                        ));
                    }
                    HostMsg::Cancel(c) => {
                        if let Some(tx) = cancels.remove(&c.call_id) {
                            let _ = tx.send(if c.reason.is_empty() { "cancelled".into() } else { c.reason });
                        }
                    }
                    HostMsg::Ping(_) => {
                        let (peer, session) = (peer.clone(), session.clone());
                        tokio::spawn(async move {
                            let ping = ClientRequest::PingRequest(PingRequest::default());
                            // Any answer is a live server: 2026-07-28 dropped `ping`,
                            // and some servers answer it "method not found".
                            match peer.send_request(ping).await {
                                Ok(_) | Err(rmcp::ServiceError::McpError(_)) => session.pong(),
                                Err(_) => {}
                            }
                        });
                    }
                    HostMsg::Shutdown(_) => {
                        // Closing stdin (stdio) or the session (HTTP) is MCP's shutdown.
                        if let Some(ct) = ct.take() {
                            ct.cancel();
                        }
                    }
                    HostMsg::RunStage(r) => session.complete(Reply::Stage(Box::new(hearth_proto::v1::StageResult {
                        call_id: r.call_id,
                        error: "an MCP server has no stage hooks".into(),
                        ..Default::default()
                    }))),
                    HostMsg::HandleEvent(e) => session.complete(Reply::Event(hearth_proto::v1::EventDone {
                        call_id: e.call_id,
                        error: "an MCP server has no event handlers".into(),
                    })),
                    _ => {}
                }
            }
        }
    };
    tracing::debug!(plugin = %name, generation, "MCP session ended: {ended}");
    {
        let mut s = link.state.lock().unwrap();
        if s.peer.as_ref().is_some_and(|(g, _)| *g == generation) {
            s.peer = None;
        }
    }
    (hooks.ended)();
    session.end_stream();
    // A process that exits says why through its watcher (exit status, stderr); give it
    // a moment, then fail what is left with the connection's reason.
    tokio::time::sleep(Duration::from_millis(500)).await;
    session.close(&ended);
    None
}

/// Starts the MCP client session of `handler` over `inner` (with progress read in
/// order, see [`ProgressTap`]).
async fn serve<T>(
    handler: &Handler,
    inner: T,
    mode: ClientLifecycleMode,
) -> Result<RunningService<RoleClient, Handler>, String>
where
    T: rmcp::transport::Transport<RoleClient> + Send + 'static,
{
    let tap = ProgressTap {
        inner,
        handler: handler.clone(),
    };
    handler
        .clone()
        .serve_with_lifecycle(tap, mode)
        .await
        .map_err(|e| e.to_string())
}

/// An rmcp error without the transport's Rust type name (`Transport [rmcp::…<…>]
/// error: `), which says nothing to an operator.
fn plain_error(e: &str) -> String {
    match (e.find("Transport ["), e.find("] error: ")) {
        (Some(start), Some(end)) if start < end => {
            format!("{}{}", &e[..start], &e[end + "] error: ".len()..])
        }
        _ => e.to_string(),
    }
}

/// The lifecycle for `protocol`; `legacy_before`: an earlier `auto` session fell back.
fn lifecycle(protocol: &McpProtocol, legacy_before: bool) -> ClientLifecycleMode {
    match protocol {
        McpProtocol::Auto if legacy_before => ClientLifecycleMode::Initialize,
        McpProtocol::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        },
        McpProtocol::Legacy => ClientLifecycleMode::Initialize,
        McpProtocol::Pinned(v) if v.as_str() >= "2026-07-28" => ClientLifecycleMode::Discover {
            preferred_versions: vec![serde_json::from_value(Value::String(v.clone()))
                .unwrap_or(ProtocolVersion::V_2026_07_28)],
        },
        McpProtocol::Pinned(_) => ClientLifecycleMode::Initialize,
    }
}

/// The Streamable HTTP client settings for `url` with `headers`.
fn http_config(
    url: &str,
    headers: &[(String, String)],
) -> Result<rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    super::install_crypto_provider();
    let mut custom = HashMap::new();
    let mut auth = None;
    for (k, v) in headers {
        if k.eq_ignore_ascii_case("authorization") {
            // rmcp sends `Authorization: Bearer <token>` itself from `auth_header`.
            if let Some(token) = v
                .strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
            {
                auth = Some(token.trim().to_string());
                continue;
            }
        }
        let name =
            http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header `{k}`: {e}"))?;
        let value = http::HeaderValue::from_str(v).map_err(|e| format!("header `{k}`: {e}"))?;
        custom.insert(name, value);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .custom_headers(custom)
        .reinit_on_expired_session(true);
    if let Some(token) = auth {
        config = config.auth_header(token);
    }
    Ok(config)
}

/// Every tool of the server (all pages), as JSON values.
async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Value>, rmcp::ServiceError> {
    let tools = peer.list_all_tools().await?;
    Ok(tools
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect())
}

/// Registers `tools` as plugin `name`'s, replacing its previous ones at once; returns
/// how many registered. Refused ones are logged with the reason.
fn register(
    name: &str,
    mcp: &McpSpec,
    tools: &[Value],
    registry: &Registry,
    names: &Mutex<HashMap<String, String>>,
) -> usize {
    let (specs, map, skipped) = convert::tool_specs(tools, mcp);
    for why in skipped {
        tracing::error!(plugin = %name, "MCP tool skipped: {why}");
    }
    *names.lock().unwrap() = map;
    let reg = registry.replace_plugin_tools(name, &specs, false);
    for item in &reg.rejected {
        tracing::error!(plugin = %name, item = %item.name, "tool rejected: {}", item.reason);
    }
    reg.accepted.len()
}

/// One `tools/call`: sends it with a progress token mapped to `call_id`, waits for the
/// result or `cancel` (then sends `notifications/cancelled`), and completes the call.
#[allow(clippy::too_many_arguments)]
async fn call_tool(
    peer: Peer<RoleClient>,
    session: Arc<Session>,
    progress: ProgressMap,
    call_id: u64,
    tool: String,
    args_json: String,
    (traceparent, tracestate): (String, String),
    cancel: oneshot::Receiver<String>,
    done: mpsc::UnboundedSender<u64>,
) {
    let fail = |error: String| ToolResult {
        call_id,
        success: false,
        error,
        ..Default::default()
    };
    let arguments = match serde_json::from_str::<Value>(&args_json) {
        Ok(Value::Object(map)) => Some(map),
        Ok(_) | Err(_) if args_json.trim().is_empty() => None,
        Ok(other) => {
            session.complete(Reply::Tool(fail(format!(
                "arguments must be an object, got {other}"
            ))));
            let _ = done.send(call_id);
            return;
        }
        Err(e) => {
            session.complete(Reply::Tool(fail(format!("arguments are not JSON: {e}"))));
            let _ = done.send(call_id);
            return;
        }
    };
    let mut params = CallToolRequestParams::new(tool.clone());
    params.arguments = arguments;
    // The broker's trace context, where MCP puts it (SEP-414: `_meta.traceparent`).
    if !traceparent.is_empty() {
        use rmcp::model::RequestParamsMeta as _;
        params.set_traceparent(&traceparent);
        if !tracestate.is_empty() {
            params.set_tracestate(&tracestate);
        }
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = match peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        // The connection is going (the process dying): the session's close reason
        // (its exit status) fails the call.
        Err(rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)) => {
            let _ = done.send(call_id);
            return;
        }
        Err(e) => {
            session.complete(Reply::Tool(fail(format!(
                "MCP tools/call {tool}: {}",
                plain_error(&e.to_string())
            ))));
            let _ = done.send(call_id);
            return;
        }
    };
    let token = handle.progress_token.clone();
    let id: RequestId = handle.id.clone();
    progress
        .lock()
        .unwrap()
        .insert(token.clone(), (call_id, f64::NEG_INFINITY));
    let outcome = tokio::select! {
        r = handle.await_response() => Some(r),
        reason = cancel => {
            let reason = reason.unwrap_or_else(|_| "cancelled".into());
            let note = ClientNotification::CancelledNotification(CancelledNotification::new(
                CancelledNotificationParam::new(Some(id), Some(reason)),
            ));
            let _ = peer.send_notification(note).await;
            None
        }
    };
    progress.lock().unwrap().remove(&token);
    let _ = done.send(call_id);
    let Some(outcome) = outcome else { return };
    let result = match outcome {
        Ok(ServerResult::CallToolResult(r)) => match serde_json::to_value(&r) {
            Ok(v) => convert::tool_result(call_id, &v),
            Err(e) => fail(format!("MCP result of {tool} could not be read: {e}")),
        },
        Ok(ServerResult::EmptyResult(_)) => convert::tool_result(call_id, &serde_json::json!({})),
        Ok(ServerResult::InputRequiredResult(_)) => fail(format!(
            "MCP tool {tool} asked for user input (input_required), which Hearth does not relay to MCP servers yet"
        )),
        Ok(ServerResult::CreateTaskResult(_)) => fail(format!(
            "MCP tool {tool} answered with a task (Tasks extension), which Hearth does not poll yet"
        )),
        Ok(other) => fail(format!("MCP tool {tool} answered with an unexpected result: {other:?}")),
        Err(rmcp::ServiceError::McpError(e)) => fail(format!("MCP error {}: {}", e.code.0, e.message)),
        // The connection is gone: the session's close reason (the exit status) says
        // why; leave the call to it.
        Err(rmcp::ServiceError::TransportClosed) => return,
        Err(e) => fail(format!("MCP tools/call {tool}: {e}")),
    };
    session.complete(Reply::Tool(result));
}
