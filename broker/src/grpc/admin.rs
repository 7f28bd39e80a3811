use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_proto::v1::admin_server::Admin;
use hearth_proto::v1::{
    call_tool_event, CallToolEvent, ListMcpServersRequest, ListMcpServersResponse,
    McpRequestMessage, McpResponseMessage, McpServerInfo, ToolsChanged, WatchToolsRequest,
};
use hearth_proto::v1::{AttachTokenRequest, AttachTokenResponse, PluginState, RemoteInstance};
use hearth_proto::v1::{
    CallToolRequest, CallToolResponse, ListPluginsRequest, ListPluginsResponse, ListToolsRequest,
    ListToolsResponse, LoadPluginRequest, LoadPluginResponse, LogLine, PluginLogsRequest,
    PluginStatus, ReloadPluginRequest, ReloadPluginResponse, RestartPluginRequest,
    RestartPluginResponse, Sender, ToolInfo, UnloadPluginRequest, UnloadPluginResponse,
};
use hearth_proto::v1::{ListSourcesRequest, ListSourcesResponse, SourceInfo, UseSourceRequest};
use tokio_stream::wrappers::ReceiverStream;

use crate::llm::SourcePool;
use tonic::{Request, Response, Status};

use crate::error::CallError;
use crate::manifest::McpTransport;
use crate::pipeline::policy::{Admission, Policies, Refusal};
use crate::router::ToolRouter;
use crate::supervisor::session::ProgressSink;
use crate::supervisor::{PluginSnapshot, Supervisor};

/// `Admin`: what the CLI uses. Every call must carry the admin token.
#[derive(Debug, Clone)]
pub struct AdminService {
    router: Arc<ToolRouter>,
    supervisor: Arc<Supervisor>,
    sources: Arc<SourcePool>,
    token: Arc<str>,
    /// `ai.tool` policy state for `CallTool` with `policies` (the agent's, so
    /// cooldowns are shared with chats).
    policies: Arc<Policies>,
}

impl AdminService {
    /// Serves the router's plugins and the LLM `sources`, accepting calls that carry
    /// `token`.
    pub fn new(router: Arc<ToolRouter>, sources: Arc<SourcePool>, token: String) -> Self {
        AdminService {
            supervisor: router.supervisor().clone(),
            router,
            sources,
            token: token.into(),
            policies: Arc::default(),
        }
    }

    /// Applies `policies` (the agent's) to `CallTool` with `policies` set.
    pub fn with_policies(self, policies: Arc<Policies>) -> Self {
        AdminService { policies, ..self }
    }

    fn sources_response(&self) -> ListSourcesResponse {
        let sources = self
            .sources
            .statuses()
            .into_iter()
            .map(|s| SourceInfo {
                name: s.source.name,
                base_url: s.source.base_url,
                model: s.source.model,
                adapter: s.source.adapter,
                priority: s.source.priority,
                current: s.current,
                state: s.state.into(),
                cooldown_ms: s.cooldown.map(|d| d.as_millis() as u64).unwrap_or(0),
                failures: s.failures,
                last_error: s.last_error,
                max_concurrent: s.source.max_concurrent,
                in_flight: s.in_flight,
                waiting: s.waiting,
            })
            .collect();
        ListSourcesResponse {
            sources,
            current: self.sources.current(),
        }
    }

    /// With `policies`: admits `req` under its tool's `ai.tool` policies, as a
    /// conversation of its own ([`Policies::admit_alone`]). Err is the answer when
    /// they refuse it (not run).
    async fn admit(
        &self,
        req: &CallToolRequest,
        started: Instant,
    ) -> Result<Option<Admission>, Box<CallToolResponse>> {
        let tool = req
            .policies
            .then(|| self.supervisor.registry().get(&req.name))
            .flatten();
        let Some((tool, ai)) = tool.as_ref().and_then(|t| Some((t, t.ai_tool.as_ref()?))) else {
            return Ok(None);
        };
        self.policies
            .admit_outside(
                &req.name,
                ai,
                &req.user_id,
                &req.conversation,
                req.confirmed,
            )
            .await
            .map(Some)
            .map_err(|refusal| {
                Box::new(CallToolResponse {
                    tool: req.name.clone(),
                    plugin: tool.plugin.clone(),
                    success: false,
                    error: refusal.message().to_string(),
                    elapsed_us: started.elapsed().as_micros() as u64,
                    needs_confirmation: matches!(refusal, Refusal::NeedsConfirmation(_)),
                    ..Default::default()
                })
            })
    }

    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        super::authorize_admin(request, &self.token)
    }

    /// FAILED_PRECONDITION for `what` (restart, reload, unload, logs) of a plugin that
    /// is not loaded here but runs on plugin hosts: it is operated on its nodes.
    fn only_remote(&self, name: &str, what: &str) -> Result<(), Status> {
        let Some(hub) = self.router.remote() else {
            return Ok(());
        };
        if self.supervisor.plugin(name).is_some() {
            return Ok(());
        }
        let nodes: Vec<String> = hub.instances(name).into_iter().map(|i| i.node).collect();
        if nodes.is_empty() {
            return Ok(());
        }
        let verb = match what {
            "logs" => "read its logs".to_string(),
            _ => format!("{what} it"),
        };
        Err(Status::failed_precondition(format!(
            "plugin {name} runs on plugin hosts ({}), not on this broker; {verb} there: hearth --data-dir <the node's data dir> plugins {what} {name}",
            nodes.join(", ")
        )))
    }

    /// A local plugin's status with the plugin hosts that also serve it.
    fn to_wire(&self, s: PluginSnapshot) -> PluginStatus {
        let mut status = to_wire(s);
        if let Some(hub) = self.router.remote() {
            status.remote = remote_instances(hub, &status.name);
        }
        status
    }

    /// Where tool `t` can run: "local", then node names.
    fn hosts(&self, t: &crate::registry::Tool) -> Vec<String> {
        let mut hosts = Vec::new();
        if self.supervisor.plugin(&t.plugin).is_some() {
            hosts.push("local".to_string());
        }
        if let Some(hub) = self.router.remote() {
            hosts.extend(hub.instances(&t.plugin).into_iter().map(|i| i.node));
        }
        hosts
    }
}

fn to_wire(s: PluginSnapshot) -> PluginStatus {
    PluginStatus {
        name: s.name,
        runtime: s.runtime,
        pid: s.pid,
        state: s.state as i32,
        restarts: s.restarts,
        tools: s.tools,
        dir: s.dir,
        uptime_ms: s.uptime.map(|d| d.as_millis() as u64).unwrap_or(0),
        last_exit: s.last_exit,
        reason: s.reason,
        version: s.version,
        sdk: s.sdk,
        startup_ms: s.startup.map(|d| d.as_millis() as u32).unwrap_or(0),
        sandbox: s.sandbox.to_string(),
        attached: s.attached,
        remote: Vec::new(),
        rejected: s.rejected,
    }
}

/// `hub`'s nodes serving `plugin`, as `PluginStatus.remote`.
fn remote_instances(hub: &crate::remote::hub::Hub, plugin: &str) -> Vec<RemoteInstance> {
    hub.instances(plugin)
        .into_iter()
        .map(|i| RemoteInstance {
            node: i.node,
            version: i.plugin.version,
            pid: i.plugin.pid,
            restarts: i.plugin.restarts,
            sdk: i.plugin.sdk,
            last_seen_ms: i.last_seen.as_millis() as u64,
        })
        .collect()
}

/// The `PluginStatus` of a plugin served only by plugin hosts over NATS.
fn remote_status(
    hub: &crate::remote::hub::Hub,
    registry: &crate::registry::Registry,
    name: &str,
) -> PluginStatus {
    let remote = remote_instances(hub, name);
    let first = remote.first().cloned().unwrap_or_default();
    let restarting = hub.restarting_on(name);
    let down = hub.down_on(name);
    let (state, reason) = if !remote.is_empty() {
        (PluginState::Ready, String::new())
    } else if !restarting.is_empty() {
        (
            PluginState::Starting,
            format!("restarting on {}", restarting.join(", ")),
        )
    } else if let Some((_, state, _)) = down.first() {
        // Not served anywhere: say why, node by node.
        let why: Vec<String> = down
            .iter()
            .map(|(node, state, reason)| match reason.as_str() {
                "" => format!(
                    "{} on {node}",
                    state
                        .as_str_name()
                        .trim_start_matches("PLUGIN_STATE_")
                        .to_lowercase()
                ),
                reason => format!("on {node}: {reason}"),
            })
            .collect();
        (*state, why.join("; "))
    } else {
        (PluginState::Stopped, "no plugin host serves it".into())
    };
    PluginStatus {
        name: name.to_string(),
        runtime: "remote".into(),
        state: state as i32,
        tools: registry.plugin_tools(name),
        version: first.version,
        sdk: first.sdk,
        restarts: remote.iter().map(|r| r.restarts).sum(),
        reason,
        sandbox: "on its node".into(),
        remote,
        rejected: hub.rejected(name),
        ..Default::default()
    }
}

fn log_line(plugin: &str, l: crate::supervisor::process::LogLine) -> LogLine {
    LogLine {
        plugin: plugin.to_string(),
        stream: l.stream.into(),
        text: l.text,
        unix_ms: unix_ms(l.at),
        pid: l.pid,
        generation: l.generation,
    }
}

fn unix_ms(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[tonic::async_trait]
impl Admin for AdminService {
    type PluginLogsStream = ReceiverStream<Result<LogLine, Status>>;

    async fn list_sources(
        &self,
        request: Request<ListSourcesRequest>,
    ) -> Result<Response<ListSourcesResponse>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.sources_response()))
    }

    async fn use_source(
        &self,
        request: Request<UseSourceRequest>,
    ) -> Result<Response<ListSourcesResponse>, Status> {
        self.authorize(&request)?;
        self.sources
            .set_current(&request.get_ref().name)
            .map_err(Status::not_found)?;
        Ok(Response::new(self.sources_response()))
    }

    async fn load_plugin(
        &self,
        request: Request<LoadPluginRequest>,
    ) -> Result<Response<LoadPluginResponse>, Status> {
        self.authorize(&request)?;
        let path = std::path::PathBuf::from(&request.get_ref().path);
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Status::failed_precondition(format!(
                    "{}: the directory does not exist",
                    path.display()
                )))
            }
            Err(e) => {
                return Err(Status::failed_precondition(format!(
                    "{}: {e}",
                    path.display()
                )))
            }
            Ok(m) if !m.is_dir() => {
                return Err(Status::failed_precondition(format!(
                    "not a plugin directory: {} is a file (a plugin is a folder with plugin.json or an entry file)",
                    path.display()
                )))
            }
            Ok(_) => {}
        }
        let snapshot = self.supervisor.load_and_wait(&path).await?;
        Ok(Response::new(LoadPluginResponse {
            plugin: Some(self.to_wire(snapshot)),
        }))
    }

    async fn unload_plugin(
        &self,
        request: Request<UnloadPluginRequest>,
    ) -> Result<Response<UnloadPluginResponse>, Status> {
        self.authorize(&request)?;
        self.only_remote(&request.get_ref().name, "unload")?;
        let snapshot = self.supervisor.unload(&request.get_ref().name).await?;
        Ok(Response::new(UnloadPluginResponse {
            plugin: Some(self.to_wire(snapshot)),
        }))
    }

    async fn attach_token(
        &self,
        request: Request<AttachTokenRequest>,
    ) -> Result<Response<AttachTokenResponse>, Status> {
        self.authorize(&request)?;
        let req = request.into_inner();
        let ttl = (req.ttl_s > 0).then(|| Duration::from_secs(req.ttl_s.into()));
        let grant = self.supervisor.attach_token(&req.name, ttl)?;
        Ok(Response::new(AttachTokenResponse {
            name: grant.name,
            addr: grant.addr,
            token: grant.token,
            expires_in_ms: grant.expires_in.as_millis() as u64,
            loaded: grant.loaded,
        }))
    }

    async fn reload_plugin(
        &self,
        request: Request<ReloadPluginRequest>,
    ) -> Result<Response<ReloadPluginResponse>, Status> {
        self.authorize(&request)?;
        self.only_remote(&request.get_ref().name, "reload")?;
        let snapshot = self.supervisor.reload(&request.get_ref().name).await?;
        Ok(Response::new(ReloadPluginResponse {
            plugin: Some(self.to_wire(snapshot)),
        }))
    }

    async fn plugin_logs(
        &self,
        request: Request<PluginLogsRequest>,
    ) -> Result<Response<Self::PluginLogsStream>, Status> {
        self.authorize(&request)?;
        let req = request.into_inner();
        self.only_remote(&req.name, "logs")?;
        let plugin = self
            .supervisor
            .plugin(&req.name)
            .ok_or_else(|| crate::error::PluginError::Unknown(req.name.clone()))?;
        let n = if req.tail == 0 {
            usize::MAX
        } else {
            req.tail as usize
        };
        let (tail, mut feed) = plugin.logs().follow(n);
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let name = req.name;
        tokio::spawn(async move {
            for l in tail {
                if tx.send(Ok(log_line(&name, l))).await.is_err() {
                    return;
                }
            }
            if !req.follow {
                return;
            }
            drop(plugin);
            loop {
                let next = tokio::select! {
                    next = feed.recv() => next,
                    _ = tx.closed() => return,
                };
                let line = match next {
                    Ok(l) => log_line(&name, l),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => LogLine {
                        plugin: name.clone(),
                        stream: "broker".into(),
                        text: format!(
                            "…[{} skipped: the reader fell behind]",
                            crate::term::count(n as usize, "line", "lines")
                        ),
                        unix_ms: unix_ms(std::time::SystemTime::now()),
                        pid: 0,
                        generation: 0,
                    },
                    // The plugin was unloaded.
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                if tx.send(Ok(line)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn list_plugins(
        &self,
        request: Request<ListPluginsRequest>,
    ) -> Result<Response<ListPluginsResponse>, Status> {
        self.authorize(&request)?;
        let mut plugins: Vec<PluginStatus> = self
            .supervisor
            .snapshots()
            .into_iter()
            .map(|s| self.to_wire(s))
            .collect();
        if let Some(hub) = self.router.remote() {
            for name in hub.plugin_names() {
                if !plugins.iter().any(|p| p.name == name) {
                    plugins.push(remote_status(hub, self.supervisor.registry(), &name));
                }
            }
        }
        Ok(Response::new(ListPluginsResponse { plugins }))
    }

    async fn restart_plugin(
        &self,
        request: Request<RestartPluginRequest>,
    ) -> Result<Response<RestartPluginResponse>, Status> {
        self.authorize(&request)?;
        self.only_remote(&request.get_ref().name, "restart")?;
        let snapshot = self.supervisor.restart(&request.get_ref().name).await?;
        Ok(Response::new(RestartPluginResponse {
            plugin: Some(self.to_wire(snapshot)),
        }))
    }

    async fn list_tools(
        &self,
        request: Request<ListToolsRequest>,
    ) -> Result<Response<ListToolsResponse>, Status> {
        self.authorize(&request)?;
        let tools = self
            .supervisor
            .registry()
            .list()
            .into_iter()
            .map(|t| ToolInfo {
                name: t.name.clone(),
                plugin: t.plugin.clone(),
                description: t.description.clone(),
                parameters_json: t.schema.schema().to_string(),
                title: t.title.clone(),
                output_schema_json: t
                    .output_schema
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
                annotations: t.effective_annotations(),
                ai_tool: t.ai_tool.clone(),
                hosts: self.hosts(&t),
            })
            .collect();
        Ok(Response::new(ListToolsResponse { tools }))
    }

    async fn call_tool(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<CallToolResponse>, Status> {
        self.authorize(&request)?;
        let parent = crate::observe::trace::from_metadata(request.metadata());
        self.run_call(request.into_inner(), None, parent)
            .await
            .map(Response::new)
    }

    type CallToolStreamStream = ReceiverStream<Result<CallToolEvent, Status>>;

    async fn call_tool_stream(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<Self::CallToolStreamStream>, Status> {
        self.authorize(&request)?;
        let parent = crate::observe::trace::from_metadata(request.metadata());
        let req = request.into_inner();
        // Fail fast on an unknown tool, as CallTool does (NOT_FOUND, not a stream).
        if self.supervisor.registry().get(&req.name).is_none() {
            return Err(CallError::UnknownTool { tool: req.name }.into());
        }
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel();
        let this = self.clone();
        tokio::spawn(async move {
            let call = this.run_call(req, Some(progress_tx), parent);
            tokio::pin!(call);
            let outcome = loop {
                tokio::select! {
                    outcome = &mut call => break outcome,
                    Some(p) = progress_rx.recv() => {
                        let event = CallToolEvent { event: Some(call_tool_event::Event::Progress(p)) };
                        if tx.send(Ok(event)).await.is_err() {
                            // The client went away: dropping the call cancels it.
                            return;
                        }
                    }
                    _ = tx.closed() => return,
                }
            };
            // Progress reported before the result may still be queued (select! picks
            // the finished call at random): send it first.
            while let Ok(p) = progress_rx.try_recv() {
                let event = CallToolEvent {
                    event: Some(call_tool_event::Event::Progress(p)),
                };
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
            let _ = tx
                .send(outcome.map(|r| CallToolEvent {
                    event: Some(call_tool_event::Event::Result(r)),
                }))
                .await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    type WatchToolsStream = ReceiverStream<Result<ToolsChanged, Status>>;

    async fn watch_tools(
        &self,
        request: Request<WatchToolsRequest>,
    ) -> Result<Response<Self::WatchToolsStream>, Status> {
        self.authorize(&request)?;
        let mut revisions = self.supervisor.registry().watch_tools();
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tokio::spawn(async move {
            loop {
                let revision = *revisions.borrow_and_update();
                if tx.send(Ok(ToolsChanged { revision })).await.is_err() {
                    return;
                }
                tokio::select! {
                    changed = revisions.changed() => if changed.is_err() { return },
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn list_mcp_servers(
        &self,
        request: Request<ListMcpServersRequest>,
    ) -> Result<Response<ListMcpServersResponse>, Status> {
        self.authorize(&request)?;
        let servers = self
            .supervisor
            .plugins()
            .into_iter()
            .filter_map(|p| {
                let spec = p.spec();
                let mcp = spec.mcp.as_ref()?;
                let (transport, target) = match &mcp.transport {
                    McpTransport::Stdio { program, args, .. } => (
                        "stdio",
                        std::iter::once(program.as_str())
                            .chain(args.iter().map(String::as_str))
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    McpTransport::Http { url, .. } => ("http", url.clone()),
                };
                let info = p.mcp().info();
                let snap = p.snapshot();
                Some(McpServerInfo {
                    plugin: p.name().to_string(),
                    transport: transport.into(),
                    target,
                    protocol_version: info.protocol_version,
                    server_name: info.server_name,
                    server_version: info.server_version,
                    state: snap.state.into(),
                    tools: snap.tools,
                    resources: info.resources,
                    prompts: info.prompts,
                })
            })
            .collect();
        Ok(Response::new(ListMcpServersResponse { servers }))
    }

    async fn mcp_request(
        &self,
        request: Request<McpRequestMessage>,
    ) -> Result<Response<McpResponseMessage>, Status> {
        self.authorize(&request)?;
        let req = request.into_inner();
        let result =
            crate::mcp::host::request(&self.supervisor, &req.plugin, &req.method, &req.params_json)
                .await?;
        Ok(Response::new(McpResponseMessage {
            result_json: result.to_string(),
        }))
    }
}

impl AdminService {
    /// One tool call for CallTool / CallToolStream: policies, routing, the answer; an
    /// `execute_tool` span (child of the caller's `traceparent`) when tracing is on.
    async fn run_call(
        &self,
        req: CallToolRequest,
        progress: Option<ProgressSink>,
        parent: Option<opentelemetry::Context>,
    ) -> Result<CallToolResponse, Status> {
        use opentelemetry::context::FutureExt as _;
        if !crate::observe::trace::enabled() {
            return self.run_call_inner(req, progress).await;
        }
        let plugin = self
            .supervisor
            .registry()
            .get(&req.name)
            .map(|t| t.plugin.clone());
        let Some(span) = crate::observe::trace::tool_span(
            &req.name,
            "",
            plugin.as_deref().unwrap_or_default(),
            parent.as_ref(),
        ) else {
            return self.run_call_inner(req, progress).await;
        };
        let cx = span.context().clone();
        let result = self.run_call_inner(req, progress).with_context(cx).await;
        match &result {
            Ok(r) if !r.success && !r.needs_confirmation => {
                span.fail("tool_error", r.error.clone())
            }
            Ok(_) => {}
            Err(s) => span.fail(
                crate::observe::trace::status_error_type(s),
                s.message().to_string(),
            ),
        }
        result
    }

    async fn run_call_inner(
        &self,
        req: CallToolRequest,
        progress: Option<ProgressSink>,
    ) -> Result<CallToolResponse, Status> {
        let started = Instant::now();
        let timeout = (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms.into()));
        let admission = match self.admit(&req, started).await {
            Ok(admission) => admission,
            Err(refused) => {
                // A `confirm` question is not a refusal: the caller asks again.
                if !refused.needs_confirmation {
                    let registry = self.supervisor.registry();
                    let label = crate::observe::metrics::tool_label(registry, &req.name);
                    if let Some(mut r) = crate::observe::metrics::CallRecord::start(label) {
                        r.finish(crate::observe::metrics::Outcome::Denied);
                    }
                }
                return Ok(*refused);
            }
        };
        let sender = Sender {
            user_id: req.user_id,
            group_id: req.group_id,
            channel: if req.channel.is_empty() {
                "admin".into()
            } else {
                req.channel
            },
            session_id: req.conversation,
        };
        let outcome = self
            .router
            .call_json(&req.name, &req.args_json, timeout, Some(sender), progress)
            .await;
        let elapsed_us = started.elapsed().as_micros() as u64;
        // A call that never reached the plugin starts no cooldown.
        if let (Some(admission), Err(e)) = (admission, &outcome) {
            if e.not_sent() {
                self.policies.release(admission);
            }
        }
        match outcome {
            Ok((plugin, r)) => Ok(CallToolResponse {
                tool: req.name,
                plugin,
                success: r.success,
                content: r.content,
                data_json: r.data_json,
                error: r.error,
                elapsed_us,
                needs_confirmation: false,
                content_blocks_json: r.content_blocks_json,
            }),
            // A schema violation is the tool's error result: the plugin was not called.
            Err(CallError::InvalidArguments { message, .. }) => Ok(CallToolResponse {
                plugin: self
                    .supervisor
                    .registry()
                    .get(&req.name)
                    .map(|t| t.plugin.clone())
                    .unwrap_or_default(),
                tool: req.name,
                success: false,
                error: message,
                elapsed_us,
                ..Default::default()
            }),
            Err(e) => Err(e.into()),
        }
    }
}
