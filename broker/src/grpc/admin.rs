use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_proto::v1::admin_server::Admin;
use hearth_proto::v1::{AttachTokenRequest, AttachTokenResponse};
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
use crate::pipeline::policy::{Admission, Policies, Refusal};
use crate::router::ToolRouter;
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
    fn admit(
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
            .admit_alone(&req.name, ai, &req.user_id, req.confirmed)
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
    }
}

fn log_line(plugin: &str, l: crate::supervisor::process::LogLine) -> LogLine {
    LogLine {
        plugin: plugin.to_string(),
        stream: l.stream.into(),
        text: l.text,
        unix_ms: unix_ms(l.at),
        pid: l.pid,
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
            plugin: Some(to_wire(snapshot)),
        }))
    }

    async fn unload_plugin(
        &self,
        request: Request<UnloadPluginRequest>,
    ) -> Result<Response<UnloadPluginResponse>, Status> {
        self.authorize(&request)?;
        let snapshot = self.supervisor.unload(&request.get_ref().name).await?;
        Ok(Response::new(UnloadPluginResponse {
            plugin: Some(to_wire(snapshot)),
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
        let snapshot = self.supervisor.reload(&request.get_ref().name).await?;
        Ok(Response::new(ReloadPluginResponse {
            plugin: Some(to_wire(snapshot)),
        }))
    }

    async fn plugin_logs(
        &self,
        request: Request<PluginLogsRequest>,
    ) -> Result<Response<Self::PluginLogsStream>, Status> {
        self.authorize(&request)?;
        let req = request.into_inner();
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
        let plugins = self
            .supervisor
            .snapshots()
            .into_iter()
            .map(to_wire)
            .collect();
        Ok(Response::new(ListPluginsResponse { plugins }))
    }

    async fn restart_plugin(
        &self,
        request: Request<RestartPluginRequest>,
    ) -> Result<Response<RestartPluginResponse>, Status> {
        self.authorize(&request)?;
        let snapshot = self.supervisor.restart(&request.get_ref().name).await?;
        Ok(Response::new(RestartPluginResponse {
            plugin: Some(to_wire(snapshot)),
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
            })
            .collect();
        Ok(Response::new(ListToolsResponse { tools }))
    }

    async fn call_tool(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<CallToolResponse>, Status> {
        self.authorize(&request)?;
        let req = request.into_inner();
        let started = Instant::now();
        let timeout = (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms.into()));
        let admission = match self.admit(&req, started) {
            Ok(admission) => admission,
            Err(refused) => return Ok(Response::new(*refused)),
        };
        let sender = Sender {
            user_id: req.user_id,
            group_id: req.group_id,
            channel: "admin".into(),
            session_id: String::new(),
        };
        let outcome = self
            .router
            .call_json(&req.name, &req.args_json, timeout, Some(sender))
            .await;
        let elapsed_us = started.elapsed().as_micros() as u64;
        // A call that never reached the plugin starts no cooldown.
        if let (Some(admission), Err(e)) = (admission, &outcome) {
            if e.not_sent() {
                self.policies.release(admission);
            }
        }
        match outcome {
            Ok((plugin, r)) => Ok(Response::new(CallToolResponse {
                tool: req.name,
                plugin,
                success: r.success,
                content: r.content,
                data_json: r.data_json,
                error: r.error,
                elapsed_us,
                needs_confirmation: false,
            })),
            // A schema violation is the tool's error result: the plugin was not called.
            Err(CallError::InvalidArguments { message, .. }) => {
                Ok(Response::new(CallToolResponse {
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
                }))
            }
            Err(e) => Err(e.into()),
        }
    }
}
