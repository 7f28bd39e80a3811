use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_proto::v1::admin_server::Admin;
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
use crate::router::ToolRouter;
use crate::supervisor::{PluginSnapshot, Supervisor};

/// `Admin`: what the CLI uses. Every call must carry the admin token.
#[derive(Debug, Clone)]
pub struct AdminService {
    router: Arc<ToolRouter>,
    supervisor: Arc<Supervisor>,
    sources: Arc<SourcePool>,
    token: Arc<str>,
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
        }
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
    }
}

fn log_line(plugin: &str, l: crate::supervisor::process::LogLine) -> LogLine {
    LogLine {
        plugin: plugin.to_string(),
        stream: l.stream.into(),
        text: l.text,
        unix_ms: l
            .at
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    }
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
        if !path.is_dir() {
            return Err(Status::failed_precondition(format!(
                "{}: not a plugin directory",
                path.display()
            )));
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
                        text: format!("…[{n} lines skipped: the reader fell behind]"),
                        unix_ms: 0,
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
        match outcome {
            Ok((plugin, r)) => Ok(Response::new(CallToolResponse {
                tool: req.name,
                plugin,
                success: r.success,
                content: r.content,
                data_json: r.data_json,
                error: r.error,
                elapsed_us,
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
