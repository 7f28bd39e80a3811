//! A fake broker: a real tonic `PluginHost` server that checks the token and hands each
//! session to the test.

use std::path::PathBuf;
use std::time::Duration;

use hearth_plugin::proto::v1::input_server::{Input, InputServer};
use hearth_plugin::proto::v1::plugin_host_server::{PluginHost, PluginHostServer};
use hearth_plugin::proto::v1::{self as pb, host_message::Msg as In, plugin_message::Msg as Out};
use hearth_plugin::proto::{MAX_MESSAGE_BYTES, TOKEN_METADATA};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status, Streaming};

/// How long a test waits for any one message before failing.
pub(crate) const STEP: Duration = Duration::from_secs(10);

struct Fake {
    token: String,
    sessions: mpsc::UnboundedSender<Session>,
}

#[hearth_plugin::async_trait]
impl PluginHost for Fake {
    type AttachStream = UnboundedReceiverStream<Result<pb::HostMessage, Status>>;

    async fn attach(
        &self,
        request: Request<Streaming<pb::PluginMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let token = request
            .metadata()
            .get(TOKEN_METADATA)
            .and_then(|v| v.to_str().ok());
        if token != Some(self.token.as_str()) {
            return Err(Status::unauthenticated("missing or wrong x-hearth-token"));
        }
        let (to_plugin, rx) = mpsc::unbounded_channel();
        let _ = self.sessions.send(Session {
            from_plugin: request.into_inner(),
            to_plugin: Some(to_plugin),
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }
}

/// Fake `Input` host service: records (token, kind, request) of each injection.
#[derive(Clone)]
struct FakeInput(mpsc::UnboundedSender<Injected>);

/// One recorded `Input` call.
pub(crate) type Injected = (String, &'static str, pb::InjectRequest);

impl FakeInput {
    fn record(
        &self,
        kind: &'static str,
        req: Request<pb::InjectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let token = req
            .metadata()
            .get(TOKEN_METADATA)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let _ = self.0.send((token, kind, req.into_inner()));
        Ok(Response::new(pb::Empty {}))
    }
}

#[hearth_plugin::async_trait]
impl Input for FakeInput {
    async fn inject_text(
        &self,
        req: Request<pb::InjectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.record("text", req)
    }
    async fn inject_text_no_memory(
        &self,
        req: Request<pb::InjectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.record("no_memory", req)
    }
    async fn inject_interrupt_text(
        &self,
        req: Request<pb::InjectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.record("interrupt", req)
    }
}

/// A running fake broker; stops when dropped.
pub(crate) struct Broker {
    /// Address to give the plugin.
    pub(crate) addr: String,
    /// Token the broker accepts.
    pub(crate) token: String,
    sessions: mpsc::UnboundedReceiver<Session>,
    /// Calls of the `Input` host service.
    pub(crate) injected: mpsc::UnboundedReceiver<Injected>,
    server: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The broker's services: `PluginHost` and `Input`.
fn router(
    token: &str,
) -> (
    tonic::transport::server::Router,
    mpsc::UnboundedReceiver<Session>,
    mpsc::UnboundedReceiver<Injected>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let svc = PluginHostServer::new(Fake {
        token: token.into(),
        sessions: tx,
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let (itx, irx) = mpsc::unbounded_channel();
    let router = tonic::transport::Server::builder()
        .add_service(svc)
        .add_service(InputServer::new(FakeInput(itx)));
    (router, rx, irx)
}

impl Broker {
    /// A broker on a Unix socket in a fresh temp dir.
    pub(crate) fn unix() -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let path: PathBuf = dir.path().join("hearth.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let token = format!("tok-{}", std::process::id());
        let (router, sessions, injected) = router(&token);
        let server = tokio::spawn(async move {
            router
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await
                .unwrap();
        });
        Broker {
            addr: format!("unix://{}", path.display()),
            token,
            sessions,
            injected,
            server,
            _dir: Some(dir),
        }
    }

    /// A broker on TCP loopback, port chosen by the OS.
    pub(crate) async fn tcp() -> Broker {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let token = "tcp-token".to_string();
        let (router, sessions, injected) = router(&token);
        let server = tokio::spawn(async move {
            router
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        Broker {
            addr,
            token,
            sessions,
            injected,
            server,
            _dir: None,
        }
    }

    /// The next session a plugin opened.
    pub(crate) async fn session(&mut self) -> Session {
        tokio::time::timeout(STEP, self.sessions.recv())
            .await
            .expect("no plugin attached in time")
            .expect("broker stopped")
    }
}

/// The broker's end of one plugin session.
pub(crate) struct Session {
    from_plugin: Streaming<pb::PluginMessage>,
    to_plugin: Option<mpsc::UnboundedSender<Result<pb::HostMessage, Status>>>,
}

impl Session {
    /// Next message from the plugin; panics on timeout or end of stream.
    pub(crate) async fn recv(&mut self) -> Out {
        match tokio::time::timeout(STEP, self.from_plugin.message()).await {
            Ok(Ok(Some(m))) => m.msg.expect("empty PluginMessage"),
            Ok(Ok(None)) => panic!("plugin closed the stream"),
            Ok(Err(s)) => panic!("plugin stream failed: {s}"),
            Err(_) => panic!("no message from the plugin in time"),
        }
    }

    /// Next message within `wait`, `None` if nothing came.
    pub(crate) async fn recv_within(&mut self, wait: Duration) -> Option<Out> {
        match tokio::time::timeout(wait, self.from_plugin.message()).await {
            Ok(Ok(Some(m))) => m.msg,
            Ok(_) => None,
            Err(_) => None,
        }
    }

    /// Whether the plugin's stream has ended (cleanly or not) within `wait`.
    pub(crate) async fn ended_within(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.from_plugin.message()).await {
                Err(_) => return false,
                Ok(Ok(Some(_))) => continue,
                Ok(_) => return true,
            }
        }
    }

    /// Sends a message to the plugin.
    pub(crate) fn send(&self, msg: In) {
        self.to_plugin
            .as_ref()
            .expect("session closed")
            .send(Ok(pb::HostMessage { msg: Some(msg) }))
            .expect("plugin side gone");
    }

    /// Ends the broker's side of the stream.
    pub(crate) fn close(&mut self) {
        self.to_plugin = None;
    }

    /// Reads Hello and Register and answers Registered with every tool.
    pub(crate) async fn handshake(&mut self) -> (pb::Hello, pb::Register) {
        let Out::Hello(hello) = self.recv().await else {
            panic!("first message is not Hello")
        };
        let Out::Register(register) = self.recv().await else {
            panic!("second message is not Register")
        };
        self.send(In::Registered(pb::Registered {
            plugin: register.plugin.clone().unwrap_or_default().name,
            tools: register.tools.iter().map(|t| t.name.clone()).collect(),
            protocol_version: hearth_plugin::proto::PROTOCOL_VERSION.into(),
            ..Default::default()
        }));
        (hello, register)
    }

    /// Sends InvokeTool.
    pub(crate) fn invoke(&self, call_id: u64, tool: &str, args: serde_json::Value) {
        self.send(In::InvokeTool(pb::InvokeTool {
            call_id,
            tool: tool.into(),
            args_json: args.to_string(),
            timeout_ms: 30_000,
            ..Default::default()
        }));
    }

    /// Next ToolResult, skipping Progress messages.
    pub(crate) async fn result(&mut self) -> pb::ToolResult {
        loop {
            match self.recv().await {
                Out::ToolResult(r) => return r,
                Out::Progress(_) => continue,
                other => panic!("expected ToolResult, got {other:?}"),
            }
        }
    }

    /// Invokes a tool and returns its result (no other call may be in flight).
    pub(crate) async fn call(
        &mut self,
        call_id: u64,
        tool: &str,
        args: serde_json::Value,
    ) -> pb::ToolResult {
        self.invoke(call_id, tool, args);
        let r = self.result().await;
        assert_eq!(r.call_id, call_id, "result for another call");
        r
    }
}
