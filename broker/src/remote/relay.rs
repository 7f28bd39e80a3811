//! Host services for plugins on plugin hosts: the plugin calls `Settings`, `Memory`, …
//! on its node's socket with its token, as it would on a broker's; the node checks the
//! token and relays the call, still encoded, to the brokers over NATS
//! (`<pfx>.host.<node>.<Service>.<Method>`, queue group `brokers`); a broker runs it
//! through its own host services, as that plugin with the capabilities its node may
//! grant ([`crate::grpc::RemoteCaller`]), and sends the answer back.
//!
//! No method is written twice: the relay moves gRPC message bytes ([`RawCodec`]). Unary
//! methods only, which every host method is. A call or answer larger than the NATS
//! server's `max_payload` is refused with RESOURCE_EXHAUSTED naming the sizes.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes};
use futures_util::StreamExt as _;
use hearth_proto::v1::{HostCall, HostCallReply};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

use super::{decode, encode, Subjects};
use crate::supervisor::Supervisor;

/// The gRPC services of package `hearth.v1` a plugin may call on its broker (and so on
/// its node, which relays them).
pub const HOST_SERVICES: &[&str] = &[
    "Settings",
    "Memory",
    "TextMemory",
    "DocMemory",
    "Knowledge",
    "Input",
    "Llm",
    "Mcp",
];

/// How long a node waits for a broker to answer a relayed host call (LLM calls included).
pub const HOST_CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The NATS queue group of brokers answering host calls.
pub const BROKERS_QUEUE: &str = "brokers";

/// A gRPC codec that moves encoded messages as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

/// [`RawCodec`]'s encoder.
#[derive(Debug)]
pub struct RawEncoder;

/// [`RawCodec`]'s decoder.
#[derive(Debug)]
pub struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// The node's side: relays its plugins' host calls to the brokers.
#[derive(Debug, Clone)]
pub struct NodeRelay {
    client: async_nats::Client,
    subjects: Subjects,
    node: String,
    supervisor: Arc<Supervisor>,
}

impl NodeRelay {
    /// A relay for `node`'s plugins (tokens checked with `supervisor`).
    pub fn new(
        client: async_nats::Client,
        subjects: Subjects,
        node: String,
        supervisor: Arc<Supervisor>,
    ) -> NodeRelay {
        NodeRelay {
            client,
            subjects,
            node,
            supervisor,
        }
    }

    /// The axum routes `/hearth.v1.<Service>/{method}` of every [`HOST_SERVICES`] entry.
    pub fn routes(self) -> axum::Router {
        let relay = Arc::new(self);
        let mut router = axum::Router::new();
        for service in HOST_SERVICES {
            let relay = relay.clone();
            router = router.route(
                &format!("/hearth.v1.{service}/{{method}}"),
                axum::routing::post(move |req: http::Request<axum::body::Body>| {
                    let relay = relay.clone();
                    async move { relay.serve(req).await }
                }),
            );
        }
        router
    }

    async fn serve(
        self: Arc<Self>,
        req: http::Request<axum::body::Body>,
    ) -> axum::response::Response {
        let path = req.uri().path().to_string();
        let plugin = req
            .headers()
            .get(hearth_proto::TOKEN_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(|t| self.supervisor.plugin_for_token(t));
        let call = RelayCall {
            relay: self.clone(),
            path,
            plugin,
        };
        let max = hearth_proto::MAX_MESSAGE_BYTES;
        tonic::server::Grpc::new(RawCodec)
            .apply_max_message_size_config(Some(max), Some(max))
            .unary(call, req)
            .await
            .map(axum::body::Body::new)
    }

    async fn relay(
        &self,
        plugin: Option<String>,
        path: String,
        body: Bytes,
    ) -> Result<Bytes, Status> {
        let Some(plugin) = plugin else {
            return Err(Status::unauthenticated(
                "x-hearth-token does not match any running plugin of this node",
            ));
        };
        let Some(subject) = self.subjects.host_call(&self.node, &path) else {
            return Err(Status::unimplemented(format!(
                "{path} is not a host service"
            )));
        };
        let payload = encode(&HostCall {
            plugin: plugin.clone(),
            path: path.clone(),
            body: body.to_vec(),
        });
        let max = self.client.max_payload();
        if payload.len() > max {
            return Err(Status::resource_exhausted(format!(
                "plugin {plugin}: {path}: the request is {} bytes, more than the NATS server takes in one message (max_payload {max} bytes)",
                payload.len()
            )));
        }
        let request = async_nats::Request::new()
            .payload(payload)
            .timeout(Some(HOST_CALL_TIMEOUT));
        let answer = self
            .client
            .send_request(subject, request)
            .await
            .map_err(|e| match e.kind() {
                async_nats::RequestErrorKind::NoResponders => Status::unavailable(format!(
                    "plugin {plugin}: {path}: no broker answers host calls on NATS right now"
                )),
                async_nats::RequestErrorKind::TimedOut => Status::deadline_exceeded(format!(
                    "plugin {plugin}: {path}: no broker answered within {} s",
                    HOST_CALL_TIMEOUT.as_secs()
                )),
                _ => Status::unavailable(format!("plugin {plugin}: {path}: NATS: {e}")),
            })?;
        let reply: HostCallReply =
            decode("host-call reply", &answer.payload).map_err(Status::internal)?;
        if reply.code == 0 {
            Ok(Bytes::from(reply.body))
        } else {
            Err(Status::new(Code::from(reply.code), reply.message))
        }
    }
}

/// One relayed call as tonic's unary service.
struct RelayCall {
    relay: Arc<NodeRelay>,
    path: String,
    plugin: Option<String>,
}

impl tonic::server::UnaryService<Bytes> for RelayCall {
    type Response = Bytes;
    type Future = Pin<Box<dyn Future<Output = Result<tonic::Response<Bytes>, Status>> + Send>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let (relay, path, plugin) = (self.relay.clone(), self.path.clone(), self.plugin.take());
        Box::pin(async move {
            relay
                .relay(plugin, path, request.into_inner())
                .await
                .map(tonic::Response::new)
        })
    }
}

/// The broker's side: answers host calls relayed by nodes with `routes` (the broker's
/// host services), as the calling plugin with the capabilities its node may grant.
/// Subscribes (queue group `brokers`) before it returns, then serves in a task.
///
/// # Errors
/// The subscription failed (the connection is closed).
pub async fn serve_host_calls(
    hub: Arc<super::hub::Hub>,
    routes: tonic::service::Routes,
) -> Result<(), async_nats::SubscribeError> {
    let subject = hub.subjects().host_calls();
    let sub = hub
        .client()
        .queue_subscribe(subject, BROKERS_QUEUE.into())
        .await?;
    tokio::spawn(answer_host_calls(hub, routes, sub));
    Ok(())
}

async fn answer_host_calls(
    hub: Arc<super::hub::Hub>,
    routes: tonic::service::Routes,
    mut sub: async_nats::Subscriber,
) {
    while let Some(msg) = sub.next().await {
        let (hub, routes) = (hub.clone(), routes.clone());
        tokio::spawn(async move {
            let Some(reply_to) = msg.reply.clone() else {
                return;
            };
            let answer = answer_host_call(&hub, routes, &msg).await;
            let mut payload = encode(&answer);
            let max = hub.client().max_payload();
            if payload.len() > max {
                payload = encode(&HostCallReply {
                    code: Code::ResourceExhausted as i32,
                    message: format!(
                        "the answer is {} bytes, more than the NATS server takes in one message (max_payload {max} bytes)",
                        payload.len()
                    ),
                    body: Vec::new(),
                });
            }
            if let Err(e) = hub.client().publish(reply_to, payload).await {
                tracing::warn!("NATS: answering a host call failed: {e}");
            }
        });
    }
}

async fn answer_host_call(
    hub: &super::hub::Hub,
    routes: tonic::service::Routes,
    msg: &async_nats::Message,
) -> HostCallReply {
    let refuse = |code: Code, message: String| HostCallReply {
        code: code as i32,
        message,
        body: Vec::new(),
    };
    let Some((node, path)) = hub.subjects().parse_host_call(&msg.subject) else {
        return refuse(
            Code::InvalidArgument,
            format!("{} is not a host-call subject", msg.subject),
        );
    };
    let call: HostCall = match decode("host call", &msg.payload) {
        Ok(c) => c,
        Err(e) => return refuse(Code::InvalidArgument, e),
    };
    // The node is named by the subject (where NATS permissions check it), not the body.
    if call.path != path {
        return refuse(
            Code::InvalidArgument,
            format!("host call for {} sent on the subject of {path}", call.path),
        );
    }
    let Some(capabilities) = hub.capabilities(&node, &call.plugin) else {
        tracing::warn!(node = %node, plugin = %call.plugin, "host call refused: the node does not serve this plugin here");
        return refuse(
            Code::PermissionDenied,
            format!("plugin {}: node {node} has not announced this plugin to this broker (or may not serve it)", call.plugin),
        );
    };
    let caller = crate::grpc::RemoteCaller {
        plugin: call.plugin.clone(),
        node,
        capabilities: capabilities.into(),
    };
    let Ok(path) = http::uri::PathAndQuery::from_str(&path) else {
        return refuse(Code::InvalidArgument, format!("{path} is not a gRPC path"));
    };
    let max = hearth_proto::MAX_MESSAGE_BYTES;
    let mut grpc = tonic::client::Grpc::new(routes)
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let outcome = crate::grpc::as_remote_caller(caller, async move {
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("host services: {e}")))?;
        grpc.unary(tonic::Request::new(Bytes::from(call.body)), path, RawCodec)
            .await
    })
    .await;
    match outcome {
        Ok(resp) => HostCallReply {
            code: 0,
            message: String::new(),
            body: resp.into_inner().to_vec(),
        },
        Err(status) => refuse(status.code(), status.message().to_string()),
    }
}
