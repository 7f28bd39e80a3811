//! Hearth as an MCP server: every registered tool — Python, Node, Rust, MCP-imported —
//! served to MCP clients, with its schema, title, description and annotations
//! (`ai.tool` `confirm` → `destructiveHint`), through `rmcp`'s server.
//!
//! Two front doors, one handler ([`HearthMcp`]):
//! - `hearth mcp serve`: stdio, for an MCP client's config file; it talks to the
//!   running broker over its Admin service ([`Backend::Remote`]);
//! - `hearth run --mcp-listen ADDR`: Streamable HTTP at `/mcp` with a bearer token
//!   (`<data_dir>/mcp.token`, 0600), in the broker ([`Backend::Local`]).
//!
//! Calls go through the broker's routing, validation, timeouts and `ai.tool`
//! policies: `max_calls` and `cooldown` count per MCP session (HTTP `Mcp-Session-Id`,
//! else the bearer; stdio: the `hearth mcp serve` process), and `confirm` becomes an
//! elicitation when the client declared that capability (2025 revisions), else a clear
//! refusal. A client's progress token receives the plugin's progress; a client's
//! cancellation (or a dropped HTTP request) cancels the call in the plugin. Tool list
//! changes (plugins loaded, crashed into `failed`, reloaded, unloaded, an MCP server's
//! list) reach clients as `notifications/tools/list_changed`, or on their
//! `subscriptions/listen` stream (2026-07-28).

use std::sync::{Arc, Mutex};

use futures_util::stream::{BoxStream, StreamExt};
use hearth_proto::v1::admin_server::Admin;
use hearth_proto::v1::{
    call_tool_event, CallToolRequest as HearthCall, CallToolResponse as HearthResult, ToolInfo,
    ToolsChanged,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleServer, SubscriptionContext};
use rmcp::ServerHandler;
use serde_json::{json, Value};
use tokio::sync::watch;
use tonic::Status;

use crate::cli::AdminConn;
use crate::grpc::AdminService;

/// Where the served tools come from.
#[derive(Clone)]
pub enum Backend {
    /// The running broker, over its Admin service (`hearth mcp serve`).
    Remote(Box<AdminConn>),
    /// This broker's Admin service in process (`--mcp-listen`), with its token.
    Local(AdminService, Arc<str>),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Remote(_) => "Backend::Remote",
            Backend::Local(..) => "Backend::Local",
        })
    }
}

type Events<T> = BoxStream<'static, Result<T, Status>>;

impl Backend {
    fn local_request<T>(token: &str, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Ok(v) = token.parse() {
            r.metadata_mut()
                .insert(hearth_proto::ADMIN_TOKEN_METADATA, v);
        }
        r
    }

    async fn tools(&self) -> Result<Vec<ToolInfo>, Status> {
        let req = hearth_proto::v1::ListToolsRequest {};
        Ok(match self {
            Backend::Remote(conn) => {
                let mut conn = (**conn).clone();
                let r = conn.with_token(req);
                conn.client().list_tools(r).await?.into_inner().tools
            }
            Backend::Local(svc, token) => {
                svc.list_tools(Self::local_request(token, req))
                    .await?
                    .into_inner()
                    .tools
            }
        })
    }

    /// Calls a tool; `trace` is the MCP client's W3C trace context (`_meta.traceparent`,
    /// `_meta.tracestate`, SEP-414), passed on as gRPC metadata so the broker's
    /// `execute_tool` span is its child.
    async fn call(
        &self,
        req: HearthCall,
        trace: &[(&'static str, String)],
    ) -> Result<Events<hearth_proto::v1::CallToolEvent>, Status> {
        let with_trace = |mut r: tonic::Request<HearthCall>| {
            for (k, v) in trace {
                if let Ok(v) = v.parse() {
                    r.metadata_mut().insert(*k, v);
                }
            }
            r
        };
        Ok(match self {
            Backend::Remote(conn) => {
                let mut conn = (**conn).clone();
                let r = with_trace(conn.with_token(req));
                conn.client()
                    .call_tool_stream(r)
                    .await?
                    .into_inner()
                    .boxed()
            }
            Backend::Local(svc, token) => svc
                .call_tool_stream(with_trace(Self::local_request(token, req)))
                .await?
                .into_inner()
                .boxed(),
        })
    }

    async fn watch(&self) -> Result<Events<ToolsChanged>, Status> {
        let req = hearth_proto::v1::WatchToolsRequest {};
        Ok(match self {
            Backend::Remote(conn) => {
                let mut conn = (**conn).clone();
                let r = conn.with_token(req);
                conn.client().watch_tools(r).await?.into_inner().boxed()
            }
            Backend::Local(svc, token) => svc
                .watch_tools(Self::local_request(token, req))
                .await?
                .into_inner()
                .boxed(),
        })
    }
}

/// State shared by every MCP session of one front door.
#[derive(Debug)]
struct Shared {
    backend: Backend,
    /// The tool list's revision (from `WatchTools`).
    revision: watch::Sender<u64>,
    /// Sessions on the `initialize` handshake, told of list changes by notification.
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Conversation key of a stdio front door (one client per process).
    stdio_key: Option<String>,
}

/// The MCP server handler over a [`Backend`]; one clone per MCP session.
#[derive(Clone, Debug)]
pub struct HearthMcp {
    shared: Arc<Shared>,
}

impl HearthMcp {
    /// A handler over `backend`; `stdio`: the one client of `hearth mcp serve`. Starts
    /// the task that forwards tool list changes to clients.
    pub async fn new(backend: Backend, stdio: bool) -> Result<HearthMcp, Status> {
        let mut changes = backend.watch().await?;
        let stdio_key = stdio.then(|| format!("mcp:stdio:{}", std::process::id()));
        let shared = Arc::new(Shared {
            backend,
            revision: watch::Sender::new(0),
            peers: Mutex::new(Vec::new()),
            stdio_key,
        });
        let weak = Arc::downgrade(&shared);
        tokio::spawn(async move {
            let mut first = true;
            while let Some(Ok(change)) = changes.next().await {
                let Some(shared) = weak.upgrade() else { return };
                shared.revision.send_replace(change.revision);
                if std::mem::take(&mut first) {
                    continue;
                }
                let peers: Vec<_> = {
                    let mut peers = shared.peers.lock().unwrap();
                    peers.retain(|p| !p.is_transport_closed());
                    peers.clone()
                };
                for peer in peers {
                    let _ = peer.notify_tool_list_changed().await;
                }
            }
        });
        Ok(HearthMcp { shared })
    }

    /// The conversation a request belongs to, for `max_calls`/`cooldown`: the HTTP
    /// session, else the bearer, else the stdio process.
    fn conversation(&self, ctx: &RequestContext<RoleServer>) -> String {
        if let Some(key) = &self.shared.stdio_key {
            return key.clone();
        }
        let parts = ctx.extensions.get::<http::request::Parts>();
        let header = |name: &str| {
            parts
                .and_then(|p| p.headers.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        if let Some(session) = header("mcp-session-id") {
            return format!("mcp:session:{session}");
        }
        if let Some(auth) = header("authorization") {
            return format!("mcp:bearer:{:016x}", fnv(auth.as_bytes()));
        }
        "mcp:http".into()
    }

    /// How to ask the user to approve a `confirm` tool: by an elicitation request
    /// (2025 revisions), by an input request in the result (2026-07-28), or not at
    /// all (the client declared no elicitation capability: the refusal text).
    fn confirm_route(&self, tool: &str, ctx: &RequestContext<RoleServer>) -> Result<bool, String> {
        let can_ask = ctx
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        if !can_ask {
            return Err(format!(
                "confirm: tool {tool} runs only once the user approved it, and this MCP client cannot ask (it did not declare the elicitation capability); this call was not run"
            ));
        }
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v.as_str() >= "2026-07-28");
        Ok(modern)
    }

    /// Asks the client to approve a `confirm` tool with an elicitation request
    /// (2025 revisions); `Err` is the refusal text when asking failed or the user did
    /// not approve.
    async fn elicit(&self, tool: &str, ctx: &RequestContext<RoleServer>) -> Result<(), String> {
        let answer = ctx
            .peer
            .create_elicitation(confirm_question(tool)?)
            .await
            .map_err(|e| {
                format!("confirm: asking the user failed ({e}); tool {tool} was not run")
            })?;
        approved(tool, &serde_json::to_value(&answer).unwrap_or_default())
    }
}

/// The elicitation asking whether to run `tool`.
fn confirm_question(tool: &str) -> Result<rmcp::model::ElicitRequestParams, String> {
    serde_json::from_value(json!({
        "mode": "form",
        "message": format!("Run tool {tool}? It may change something (its `confirm` policy asks first)."),
        "requestedSchema": {
            "type": "object",
            "properties": {"confirm": {"type": "boolean", "title": format!("Run {tool}")}},
            "required": ["confirm"],
        },
    }))
    .map_err(|e| format!("confirm: cannot build the question: {e}"))
}

/// Whether an elicitation answer (`ElicitResult` as JSON) approves running `tool`.
fn approved(tool: &str, answer: &Value) -> Result<(), String> {
    let accepted = answer.get("action").and_then(Value::as_str) == Some("accept")
        && answer
            .pointer("/content/confirm")
            .and_then(Value::as_bool)
            .unwrap_or(true);
    if accepted {
        Ok(())
    } else {
        Err(format!(
            "confirm: the user did not approve tool {tool}; it was not run"
        ))
    }
}

/// The key of Hearth's confirmation in an input request (2026-07-28).
const CONFIRM_KEY: &str = "hearth_confirm";

/// FNV-1a: a stable, non-secret key for a bearer (never logged or stored in clear).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A Hearth tool as an MCP tool (JSON in, rmcp's type out).
pub fn mcp_tool(t: &ToolInfo) -> Option<Tool> {
    let mut tool = json!({
        "name": t.name,
        "description": t.description,
        "inputSchema": serde_json::from_str::<Value>(&t.parameters_json).ok()?,
    });
    if !t.title.is_empty() {
        tool["title"] = json!(t.title);
    }
    if let Ok(schema @ Value::Object(_)) = serde_json::from_str::<Value>(&t.output_schema_json) {
        tool["outputSchema"] = schema;
    }
    if let Some(a) = &t.annotations {
        let mut hints = serde_json::Map::new();
        for (key, value) in [
            ("readOnlyHint", a.read_only_hint),
            ("destructiveHint", a.destructive_hint),
            ("idempotentHint", a.idempotent_hint),
            ("openWorldHint", a.open_world_hint),
        ] {
            if let Some(v) = value {
                hints.insert(key.into(), json!(v));
            }
        }
        if !hints.is_empty() {
            tool["annotations"] = Value::Object(hints);
        }
    }
    serde_json::from_value(tool).ok()
}

fn internal(e: Status) -> ErrorData {
    ErrorData::internal_error(e.message().to_string(), None)
}

fn error_result(text: String) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::error(vec![
        rmcp::model::ContentBlock::text(text),
    ]))
}

impl ServerHandler for HearthMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("hearth", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Tools of the Hearth plugin broker: its plugins' tools (Python, Node, Rust and MCP servers), with their policies.",
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.shared.peers.lock().unwrap().push(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        requested
            .tools_list_changed
            .unwrap_or(false)
            .then(|| SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut revisions = self.shared.revision.subscribe();
        revisions.mark_unchanged();
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                changed = revisions.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    if context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.shared.backend.tools().await.map_err(internal)?;
        Ok(ListToolsResult::with_all_items(
            tools.iter().filter_map(mcp_tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args_json = request
            .arguments
            .clone()
            .map(|a| Value::Object(a).to_string())
            .unwrap_or_default();
        let conversation = self.conversation(&context);
        let mut call = HearthCall {
            name: name.clone(),
            args_json,
            policies: true,
            user_id: conversation.clone(),
            conversation,
            channel: "mcp".into(),
            ..Default::default()
        };
        let token = context.meta.get_progress_token();
        let trace: Vec<(&'static str, String)> = [
            ("traceparent", context.meta.get_traceparent()),
            ("tracestate", context.meta.get_tracestate()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| (k, v.to_string())))
        .collect();
        // The retry of a 2026-07-28 call that asked for confirmation carries the answer.
        let answered = request
            .input_responses
            .as_ref()
            .and_then(|r| r.get(CONFIRM_KEY))
            .cloned();
        for attempt in 0..2 {
            let mut events = match self.shared.backend.call(call.clone(), &trace).await {
                Ok(events) => events,
                Err(s) if s.code() == tonic::Code::NotFound => {
                    return Err(ErrorData::invalid_params(
                        format!("unknown tool `{name}`"),
                        None,
                    ))
                }
                Err(s) => return Ok(error_result(s.message().to_string())),
            };
            let result: HearthResult = loop {
                let event = tokio::select! {
                    // The client cancelled (or went away): dropping the stream cancels
                    // the call in the plugin.
                    _ = context.ct.cancelled() => {
                        return Err(ErrorData::internal_error("cancelled by the client", None));
                    }
                    event = events.next() => event,
                };
                match event {
                    Some(Ok(e)) => match e.event {
                        Some(call_tool_event::Event::Progress(p)) => {
                            if let Some(token) = &token {
                                let mut note =
                                    ProgressNotificationParam::new(token.clone(), p.progress);
                                if p.total > 0.0 {
                                    note = note.with_total(p.total);
                                }
                                if !p.message.is_empty() {
                                    note = note.with_message(p.message);
                                }
                                let _ = context.peer.notify_progress(note).await;
                            }
                        }
                        Some(call_tool_event::Event::Result(r)) => {
                            // Read the stream to its end (its trailers): a stream dropped
                            // early is reset, and enough resets make the HTTP/2
                            // connection to the broker go away with every call on it.
                            while let Some(Ok(_)) = events.next().await {}
                            break r;
                        }
                        None => {}
                    },
                    Some(Err(s)) => return Ok(error_result(s.message().to_string())),
                    None => {
                        return Ok(error_result(format!(
                            "tool {name}: the broker closed the call without a result"
                        )))
                    }
                }
            };
            if result.needs_confirmation && attempt == 0 {
                let asked = match (&answered, self.confirm_route(&name, &context)) {
                    (Some(answer), _) => approved(&name, answer),
                    (None, Err(refusal)) => Err(refusal),
                    (None, Ok(true)) => {
                        // 2026-07-28: ask through an input request; the client retries
                        // the call with the answer in `inputResponses`.
                        let question = match confirm_question(&name) {
                            Ok(q) => q,
                            Err(e) => return Ok(error_result(e)),
                        };
                        let mut requests = rmcp::model::InputRequests::new();
                        requests.insert(
                            CONFIRM_KEY.to_string(),
                            rmcp::model::InputRequest::Elicitation(
                                rmcp::model::ElicitRequest::new(question),
                            ),
                        );
                        return Ok(CallToolResponse::InputRequired(
                            rmcp::model::InputRequiredResult::from_input_requests(requests),
                        ));
                    }
                    (None, Ok(false)) => self.elicit(&name, &context).await,
                };
                if let Err(refusal) = asked {
                    return Ok(error_result(refusal));
                }
                call.confirmed = true;
                continue;
            }
            let value = super::convert::call_result(
                result.success,
                &result.content,
                &result.data_json,
                &result.error,
                &result.content_blocks_json,
            );
            return serde_json::from_value::<CallToolResult>(value)
                .map(|mut r| {
                    // 2026-07-28 results carry `resultType`; rmcp strips it for older peers.
                    r.result_type = Some(rmcp::model::ResultType::COMPLETE);
                    CallToolResponse::Complete(r)
                })
                .map_err(|e| ErrorData::internal_error(format!("result of {name}: {e}"), None));
        }
        Ok(error_result(format!("tool {name} was not run")))
    }
}

/// `hearth mcp serve`: serves the running broker of `data_dir` on stdin/stdout until
/// the client closes stdin. Errors: no broker running (named), a broken connection.
pub async fn serve_stdio(data_dir: &std::path::Path) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let conn = AdminConn::connect(data_dir).await?;
    let handler = HearthMcp::new(Backend::Remote(Box::new(conn)), true)
        .await
        .map_err(|s| anyhow::anyhow!("watching the broker's tools: {}", s.message()))?;
    let service = handler
        // Non-blocking pipes on the reactor (MCP clients start us with FIFOs), not
        // the blocking pool's hand-off per read and write.
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| anyhow::anyhow!("MCP session: {e}"))?;
    service.waiting().await?;
    Ok(())
}

/// The `/mcp` router of `--mcp-listen`: Streamable HTTP over `admin` (this broker),
/// each request checked against the bearer `token` (401 otherwise, with
/// `WWW-Authenticate: Bearer`); DNS-rebinding protection keeps to loopback host
/// names unless `allowed_hosts` widens it.
pub async fn http_router(
    admin: AdminService,
    admin_token: Arc<str>,
    token: Arc<str>,
) -> Result<axum::Router, Status> {
    use rmcp::transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    };
    let handler = HearthMcp::new(Backend::Local(admin, admin_token), false).await?;
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let check = move |req: axum::extract::Request, next: axum::middleware::Next| {
        let token = token.clone();
        async move {
            let ok = req
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|t| crate::supervisor::same_secret(t.trim(), &token));
            if ok {
                next.run(req).await
            } else {
                axum::response::Response::builder()
                    .status(http::StatusCode::UNAUTHORIZED)
                    .header(http::header::WWW_AUTHENTICATE, "Bearer")
                    .body(axum::body::Body::from(
                        "missing or wrong bearer token (see <data_dir>/mcp.token)\n",
                    ))
                    .unwrap()
            }
        }
    };
    Ok(axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(check)))
}
