use std::pin::Pin;
use std::sync::Arc;

use hearth_proto::v1::plugin_host_server::PluginHost;
use hearth_proto::v1::{HostMessage, PluginMessage};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::supervisor::Supervisor;

/// `PluginHost`: the plugin session endpoint.
#[derive(Debug, Clone)]
pub struct PluginHostService {
    supervisor: Arc<Supervisor>,
}

impl PluginHostService {
    /// Serves sessions for `supervisor`'s plugins.
    pub fn new(supervisor: Arc<Supervisor>) -> Self {
        PluginHostService { supervisor }
    }
}

#[tonic::async_trait]
impl PluginHost for PluginHostService {
    type AttachStream = Pin<Box<dyn Stream<Item = Result<HostMessage, Status>> + Send + 'static>>;

    async fn attach(
        &self,
        request: Request<Streaming<PluginMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let token = super::metadata(&request, hearth_proto::TOKEN_METADATA)?.to_string();
        // The dialing process, from the Unix socket's peer credentials (SO_PEERCRED):
        // what `plugins list` shows for a process attached by hand.
        let peer_pid = request
            .extensions()
            .get::<tonic::transport::server::UdsConnectInfo>()
            .and_then(|c| c.peer_cred)
            .and_then(|c| c.pid())
            .and_then(|pid| u32::try_from(pid).ok());
        let rx = self
            .supervisor
            .attach(&token, request.into_inner(), peer_pid)?;
        Ok(Response::new(Box::pin(rx)))
    }
}
