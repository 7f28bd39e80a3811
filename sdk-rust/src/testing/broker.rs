//! [`FakeBroker`]: a real tonic server on a temp Unix socket (or TCP loopback) that
//! serves `PluginHost.Attach` and the host services of a [`FakeHost`], and hands each
//! plugin session to the test as a [`BrokerSession`] to drive message by message.

use std::path::PathBuf;
use std::time::Duration;

use hearth_proto::v1::plugin_host_server::{PluginHost, PluginHostServer};
use hearth_proto::v1::{self as pb, host_message::Msg as In, plugin_message::Msg as Out};
use hearth_proto::{ENV_ADDR, ENV_PLUGIN, ENV_TOKEN, MAX_MESSAGE_BYTES, TOKEN_METADATA};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status, Streaming};

use super::host::add_services;
use super::{FakeHost, HarnessError};
use crate::ServeConfig;

/// How long [`BrokerSession::recv`] and [`FakeBroker::session`] wait by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Unix socket paths longer than this go to `/tmp` instead of `$TMPDIR`.
const MAX_SOCKET_PATH: usize = 100;

/// The `PluginHost` service: checks the token, hands each session to the test.
struct Attach {
    token: String,
    sessions: mpsc::UnboundedSender<BrokerSession>,
    plugin: String,
}

#[tonic::async_trait]
impl PluginHost for Attach {
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
        let _ = self.sessions.send(BrokerSession {
            plugin: self.plugin.clone(),
            from_plugin: request.into_inner(),
            to_plugin: Some(to_plugin),
            wait: DEFAULT_WAIT,
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }
}

/// A fake Hearth broker for tests: a real tonic server on a Unix socket in a fresh temp
/// dir ([`unix`](Self::unix)) or on TCP loopback port 0 ([`tcp`](Self::tcp)).
///
/// It serves `PluginHost.Attach` (admitting only its [`token`](Self::token)) and every
/// host service of its [`FakeHost`]. Each session a plugin opens arrives as a
/// [`BrokerSession`] from [`session`](Self::session), to be driven by hand: this is
/// the wire-level tool, for protocol tests and for running a plugin *binary* as a
/// process (give it [`env`](Self::env)). To test a plugin's behaviour, use
/// [`Harness`](super::Harness), which is built on it. Stops when dropped.
#[derive(Debug)]
pub struct FakeBroker {
    addr: String,
    token: String,
    host: FakeHost,
    sessions: mpsc::UnboundedReceiver<BrokerSession>,
    server: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A fresh random-enough token for one broker.
fn new_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "test-{}-{}-{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl FakeBroker {
    /// A broker on a Unix socket `hearth.sock` in a fresh temp dir, serving `host`.
    ///
    /// Errors: the temp dir or the socket cannot be created. Panics outside a tokio
    /// runtime (it spawns the server task).
    pub fn unix(host: FakeHost) -> Result<FakeBroker, HarnessError> {
        let mut dir = tempfile::Builder::new().prefix("hearth-test").tempdir()?;
        if dir.path().join("hearth.sock").as_os_str().len() > MAX_SOCKET_PATH {
            dir = tempfile::Builder::new()
                .prefix("hearth-test")
                .tempdir_in("/tmp")?;
        }
        let path: PathBuf = dir.path().join("hearth.sock");
        let listener = tokio::net::UnixListener::bind(&path)?;
        let token = new_token();
        let (router, sessions) = router(&token, &host);
        let server = tokio::spawn(async move {
            let _ = router
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await;
        });
        Ok(FakeBroker {
            addr: format!("unix://{}", path.display()),
            token,
            host,
            sessions,
            server,
            _dir: Some(dir),
        })
    }

    /// A broker on TCP loopback, port chosen by the OS, serving `host`.
    ///
    /// Errors: the port cannot be bound.
    pub async fn tcp(host: FakeHost) -> Result<FakeBroker, HarnessError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = format!("http://{}", listener.local_addr()?);
        let token = new_token();
        let (router, sessions) = router(&token, &host);
        let server = tokio::spawn(async move {
            let _ = router
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        Ok(FakeBroker {
            addr,
            token,
            host,
            sessions,
            server,
            _dir: None,
        })
    }

    /// The address a plugin dials (`HEARTH_ADDR`): `unix:///…/hearth.sock` or
    /// `http://127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Replaces the address plugins are told (e.g. the short `unix:/path` form); the
    /// server keeps listening where it does.
    pub fn set_addr(&mut self, addr: impl Into<String>) {
        self.addr = addr.into();
    }

    /// The spawn token the broker admits (`HEARTH_TOKEN`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fake host services.
    pub fn host(&self) -> &FakeHost {
        &self.host
    }

    /// A [`ServeConfig`] for serving a plugin in process as `plugin` with
    /// [`serve_with`](crate::serve_with).
    pub fn serve_config(&self, plugin: &str) -> ServeConfig {
        ServeConfig::new(self.addr.clone(), self.token.clone(), plugin)
    }

    /// The environment of a plugin process started by hand: `HEARTH_ADDR`,
    /// `HEARTH_TOKEN` and `HEARTH_PLUGIN` (the host's plugin name).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (ENV_ADDR, self.addr.clone()),
            (ENV_TOKEN, self.token.clone()),
            (ENV_PLUGIN, self.host.plugin()),
        ]
    }

    /// The next session a plugin opened, waiting up to [`DEFAULT_WAIT`].
    ///
    /// Errors: [`HarnessError::Timeout`] when no plugin attached in time.
    pub async fn session(&mut self) -> Result<BrokerSession, HarnessError> {
        self.session_within(DEFAULT_WAIT)
            .await
            .ok_or_else(|| HarnessError::Timeout {
                plugin: self.host.plugin(),
                what: "attach".into(),
                after_ms: DEFAULT_WAIT.as_millis() as u64,
            })
    }

    /// The next session a plugin opened within `wait`, `None` if none did.
    pub async fn session_within(&mut self, wait: Duration) -> Option<BrokerSession> {
        tokio::time::timeout(wait, self.sessions.recv())
            .await
            .ok()
            .flatten()
    }
}

/// The server: `PluginHost` and the host services.
fn router(
    token: &str,
    host: &FakeHost,
) -> (
    tonic::transport::server::Router,
    mpsc::UnboundedReceiver<BrokerSession>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let attach = PluginHostServer::new(Attach {
        token: token.into(),
        sessions: tx,
        plugin: host.plugin(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let router = tonic::transport::Server::builder().add_service(attach);
    (add_services(router, host.clone(), token), rx)
}

/// The broker's end of one plugin session: read what the plugin sends, send it what
/// the broker would.
///
/// Waits are bounded ([`DEFAULT_WAIT`] unless [`set_wait`](Self::set_wait) changes it)
/// so a plugin that never answers fails the test instead of hanging it.
#[derive(Debug)]
pub struct BrokerSession {
    plugin: String,
    from_plugin: Streaming<pb::PluginMessage>,
    to_plugin: Option<mpsc::UnboundedSender<Result<pb::HostMessage, Status>>>,
    wait: Duration,
}

impl BrokerSession {
    /// Changes how long [`recv`](Self::recv) waits.
    pub fn set_wait(&mut self, wait: Duration) {
        self.wait = wait;
    }

    pub(crate) fn into_parts(
        self,
    ) -> (
        Streaming<pb::PluginMessage>,
        Option<mpsc::UnboundedSender<Result<pb::HostMessage, Status>>>,
    ) {
        (self.from_plugin, self.to_plugin)
    }

    /// The next message from the plugin.
    ///
    /// Errors: [`HarnessError::SessionEnded`] when the plugin closed the stream or it
    /// failed; [`HarnessError::Timeout`] when nothing came within the wait.
    pub async fn recv(&mut self) -> Result<Out, HarnessError> {
        let ended = |reason: String| HarnessError::SessionEnded {
            plugin: self.plugin.clone(),
            what: "recv".into(),
            reason,
        };
        match tokio::time::timeout(self.wait, self.from_plugin.message()).await {
            Ok(Ok(Some(pb::PluginMessage { msg: Some(m) }))) => Ok(m),
            Ok(Ok(Some(pb::PluginMessage { msg: None }))) => Err(HarnessError::Protocol {
                plugin: self.plugin.clone(),
                detail: "empty PluginMessage".into(),
            }),
            Ok(Ok(None)) => Err(ended("the plugin closed the stream".into())),
            Ok(Err(s)) => Err(ended(format!("stream failed: {}", s.message()))),
            Err(_) => Err(HarnessError::Timeout {
                plugin: self.plugin.clone(),
                what: "a message".into(),
                after_ms: self.wait.as_millis() as u64,
            }),
        }
    }

    /// The next message within `wait`; `None` if nothing came or the stream ended.
    pub async fn recv_within(&mut self, wait: Duration) -> Option<Out> {
        match tokio::time::timeout(wait, self.from_plugin.message()).await {
            Ok(Ok(Some(m))) => m.msg,
            _ => None,
        }
    }

    /// Whether the plugin's stream ended (cleanly or not) within `wait`; messages that
    /// come meanwhile are skipped.
    pub async fn ended_within(&mut self, wait: Duration) -> bool {
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
    ///
    /// Errors: [`HarnessError::SessionEnded`] after [`close`](Self::close) or when the
    /// plugin's side is gone.
    pub fn send(&self, msg: In) -> Result<(), HarnessError> {
        let ended = |reason: &str| HarnessError::SessionEnded {
            plugin: self.plugin.clone(),
            what: "send".into(),
            reason: reason.into(),
        };
        self.to_plugin
            .as_ref()
            .ok_or_else(|| ended("the broker's side is closed"))?
            .send(Ok(pb::HostMessage { msg: Some(msg) }))
            .map_err(|_| ended("the plugin's side is gone"))
    }

    /// Ends the broker's side of the stream (the plugin then ends its session).
    pub fn close(&mut self) {
        self.to_plugin = None;
    }

    /// Reads `Hello` and `Register` and answers `Registered` with every tool, as a
    /// broker that accepts everything would.
    ///
    /// Errors: as [`recv`](Self::recv), and [`HarnessError::Protocol`] when the first
    /// two messages are not `Hello` and `Register`.
    pub async fn handshake(&mut self) -> Result<(pb::Hello, pb::Register), HarnessError> {
        let (hello, register) = self.hello_and_register().await?;
        self.send(In::Registered(pb::Registered {
            plugin: register.plugin.clone().unwrap_or_default().name,
            tools: register.tools.iter().map(|t| t.name.clone()).collect(),
            protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
            ..Default::default()
        }))?;
        Ok((hello, register))
    }

    /// Reads `Hello` and `Register` without answering.
    ///
    /// Errors: as [`handshake`](Self::handshake).
    pub async fn hello_and_register(&mut self) -> Result<(pb::Hello, pb::Register), HarnessError> {
        let plugin = self.plugin.clone();
        let protocol = |detail: String| HarnessError::Protocol {
            plugin: plugin.clone(),
            detail,
        };
        let hello = match self.recv().await? {
            Out::Hello(h) => h,
            other => return Err(protocol(format!("first message is not Hello: {other:?}"))),
        };
        let register = match self.recv().await? {
            Out::Register(r) => r,
            other => {
                return Err(protocol(format!(
                    "second message is not Register: {other:?}"
                )))
            }
        };
        Ok((hello, register))
    }

    /// Sends `InvokeTool` for `tool` with `args` (no schema check) and a 30 s timeout.
    ///
    /// Errors: as [`send`](Self::send).
    pub fn invoke(
        &self,
        call_id: u64,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<(), HarnessError> {
        self.send(In::InvokeTool(pb::InvokeTool {
            call_id,
            tool: tool.into(),
            args_json: args.to_string(),
            timeout_ms: 30_000,
            ..Default::default()
        }))
    }

    /// The next `ToolResult`, skipping `Progress` messages.
    ///
    /// Errors: as [`recv`](Self::recv), and [`HarnessError::Protocol`] for any other
    /// message.
    pub async fn result(&mut self) -> Result<pb::ToolResult, HarnessError> {
        loop {
            match self.recv().await? {
                Out::ToolResult(r) => return Ok(r),
                Out::Progress(_) => continue,
                other => {
                    return Err(HarnessError::Protocol {
                        plugin: self.plugin.clone(),
                        detail: format!("expected ToolResult, got {other:?}"),
                    })
                }
            }
        }
    }

    /// [`invoke`](Self::invoke) and wait for its [`result`](Self::result) (no other
    /// call may be in flight).
    ///
    /// Errors: as [`result`](Self::result), and [`HarnessError::Protocol`] when the
    /// result carries another call id.
    pub async fn call(
        &mut self,
        call_id: u64,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<pb::ToolResult, HarnessError> {
        self.invoke(call_id, tool, args)?;
        let r = self.result().await?;
        if r.call_id != call_id {
            return Err(HarnessError::Protocol {
                plugin: self.plugin.clone(),
                detail: format!("result for call {} while {call_id} was expected", r.call_id),
            });
        }
        Ok(r)
    }
}
