//! The raw floor of a broker↔plugin round trip, for the benchmarks: a minimal tonic
//! host (this process) serving `PluginHost.Attach` on a Unix socket, and minimal
//! plugins that speak the stream with the generated stubs only — Python (grpc.aio,
//! `bench/raw/raw_plugin.py`), Node (grpc-js, `bench/raw/raw_plugin.js`), Rust
//! (tonic; this bench binary run again with `HEARTH_BENCH_RAW_PLUGIN=1`) and Go
//! (grpc-go, `bench/raw/go`, built with `go build` on first use). A plugin
//! answers `RunStage` with the context it got and `InvokeTool` with its arguments.
//! Everything a real broker and SDK add on top of this is overhead.
//!
//! The same host also serves a raw relay ([`RawPlugin::relay`]): `Admin.CallTool` on the
//! same socket, answered by sending `InvokeTool` on the plugin's stream and waiting for
//! the `ToolResult` that the host's stream reader hands back. That is the least any
//! broker does for a client's tool call (two gRPC streams, a task per request, a reader
//! per session), and so the floor of the broker's Admin path.
// Each harness compiles this file on its own and uses only part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hearth_proto::v1::admin_client::AdminClient;
use hearth_proto::v1::plugin_host_client::PluginHostClient;
use hearth_proto::v1::plugin_host_server::{PluginHost, PluginHostServer};
use hearth_proto::v1::{
    host_message::Msg as HostMsg, plugin_message::Msg as PluginMsg, CallToolRequest,
    CallToolResponse, HostMessage, InvokeTool, PluginMessage, Pong, RunStage, Stage, StageContext,
    StageResult, ToolResult,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

/// Name of the raw host's threads (its runtime's workers and the thread that runs it),
/// so a bench can count their context switches apart from its own.
pub const HOST_THREADS: &str = "raw-host";

/// Environment variable that makes the bench binary run as the raw Rust plugin.
pub const RAW_PLUGIN_ENV: &str = "HEARTH_BENCH_RAW_PLUGIN";

type Session = (
    Streaming<PluginMessage>,
    mpsc::Sender<Result<HostMessage, Status>>,
);

struct Host {
    sessions: mpsc::UnboundedSender<Session>,
}

#[tonic::async_trait]
impl PluginHost for Host {
    type AttachStream = Pin<Box<dyn Stream<Item = Result<HostMessage, Status>> + Send + 'static>>;

    async fn attach(
        &self,
        request: Request<Streaming<PluginMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let (tx, rx) = mpsc::channel(1024);
        let _ = self.sessions.send((request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// A raw plugin (or an SDK plugin) on the raw host. The host has a runtime of its own
/// (multi-thread, a worker per core, as `hearth run` has), so the bench's other work
/// does not share its threads.
pub struct RawPlugin {
    jobs: mpsc::UnboundedSender<Job>,
    pid: u32,
    /// The host's socket (`PluginHost` and the relay's `Admin.CallTool`).
    socket: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

enum Job {
    Stage(
        usize,
        Box<StageContext>,
        tokio::sync::oneshot::Sender<Vec<f64>>,
    ),
    Tool(usize, String, tokio::sync::oneshot::Sender<Vec<f64>>),
    /// Read the plugin's stream for the relay until the sender is dropped.
    Relay(tokio::sync::oneshot::Receiver<()>),
}

/// The host's side of one attached plugin (lives on the host thread).
struct Attached {
    inbound: Streaming<PluginMessage>,
    out: mpsc::Sender<Result<HostMessage, Status>>,
    child: Child,
    _dir: tempfile::TempDir,
    next: u64,
    /// The hook id a `RunStage` names (an SDK plugin's pre_action hook).
    hook_id: String,
    /// The tool an `InvokeTool` names (an SDK plugin's echo tool).
    tool: String,
    /// What the relay's handlers share with the stream reader.
    relay: Arc<Relay>,
}

/// The raw relay's state: where its handlers send `InvokeTool`, and the calls waiting
/// for their `ToolResult`.
#[derive(Default)]
struct Relay {
    out: OnceLock<mpsc::Sender<Result<HostMessage, Status>>>,
    tool: OnceLock<String>,
    /// Call ids of relayed calls start at 2^32, above the host's own.
    next: AtomicU64,
    pending: Mutex<HashMap<u64, tokio::sync::oneshot::Sender<ToolResult>>>,
}

impl Relay {
    /// One relayed call: `InvokeTool` out, the `ToolResult` back; `elapsed_us` is the
    /// time between the two, as the broker's `CallToolResponse.elapsed_us` is.
    async fn call(&self, req: CallToolRequest) -> Result<CallToolResponse, Status> {
        let started = Instant::now();
        let call_id = (1 << 32) + self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pending.lock().unwrap().insert(call_id, tx);
        let out = self
            .out
            .get()
            .ok_or_else(|| Status::unavailable("no plugin"))?;
        let msg = HostMsg::InvokeTool(InvokeTool {
            call_id,
            tool: self.tool.get().cloned().unwrap_or_default(),
            args_json: req.args_json,
            timeout_ms: 5000,
            ..Default::default()
        });
        out.send(Ok(HostMessage { msg: Some(msg) }))
            .await
            .map_err(|_| Status::unavailable("raw plugin gone"))?;
        let r = rx
            .await
            .map_err(|_| Status::unavailable("raw plugin gone"))?;
        Ok(CallToolResponse {
            tool: req.name,
            success: r.success,
            content: r.content,
            error: r.error,
            elapsed_us: started.elapsed().as_micros() as u64,
            ..Default::default()
        })
    }
}

/// `hearth.v1.Admin` with one route, `CallTool` (the generated server would need every
/// Admin method): the raw relay's front.
#[derive(Clone)]
struct RelayService(Arc<Relay>);

impl tonic::server::NamedService for RelayService {
    const NAME: &'static str = "hearth.v1.Admin";
}

impl tonic::server::UnaryService<CallToolRequest> for RelayService {
    type Response = CallToolResponse;
    type Future = Pin<
        Box<dyn std::future::Future<Output = Result<Response<CallToolResponse>, Status>> + Send>,
    >;

    fn call(&mut self, request: Request<CallToolRequest>) -> Self::Future {
        let relay = self.0.clone();
        Box::pin(async move { relay.call(request.into_inner()).await.map(Response::new) })
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for RelayService {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let svc = self.clone();
        Box::pin(async move {
            if req.uri().path() != "/hearth.v1.Admin/CallTool" {
                return Ok(Status::unimplemented("the raw relay serves CallTool only").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(svc, req).await)
        })
    }
}

/// Which plugin to start on the raw host.
pub enum Peer<'a> {
    /// The minimal plugin of a language (`Python`, `Node`, `Rust`, `Go`).
    Raw(&'a str),
    /// A plugin of an SDK: `runtime` `python` / `node` / `exec` and its entry, with its
    /// environment. It registers; `RunStage` goes to its first pre_action hook and
    /// `InvokeTool` to its first tool whose name ends in `_echo`.
    Sdk {
        /// `python`, `node` or `exec`.
        runtime: &'a str,
        /// Entry file or binary.
        entry: PathBuf,
        /// Extra environment.
        env: Vec<(&'a str, &'a str)>,
    },
}

/// The raw plugin languages: label and how to start one.
pub const RAW_LANGS: [&str; 3] = ["Python", "Node", "Rust"];

impl RawPlugin {
    /// Starts the raw host on a fresh socket and the raw plugin of `lang` (`Python`,
    /// `Node`, `Rust`), and waits until it attached.
    pub async fn start(lang: &str, python: &str, repo: &std::path::Path) -> RawPlugin {
        Self::start_peer(Peer::Raw(lang), python, repo).await
    }

    /// Starts the raw host (on its own thread) and `peer`, and waits until it attached
    /// (and registered, for an SDK plugin).
    pub async fn start_peer(peer: Peer<'_>, python: &str, repo: &std::path::Path) -> RawPlugin {
        let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
        let (ready, started) = tokio::sync::oneshot::channel::<(u32, PathBuf)>();
        let peer = peer.owned();
        let (python, repo) = (python.to_string(), repo.to_path_buf());
        let thread = std::thread::Builder::new()
            .name(HOST_THREADS.into())
            .spawn(move || {
                // The runtime the broker runs on (multi-thread, a worker per core), with
                // the measuring loop as one of its tasks, like a broker's turn.
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .thread_name(HOST_THREADS)
                    .enable_all()
                    .build()
                    .unwrap();
                let host = rt.spawn(async move {
                    let mut a = Attached::start(peer.borrowed(), &python, &repo).await;
                    let _ = ready.send((a.child.id(), a.socket()));
                    while let Some(job) = queue.recv().await {
                        match job {
                            Job::Stage(n, ctx, reply) => {
                                let mut out = Vec::with_capacity(n);
                                for _ in 0..n {
                                    out.push(a.stage_trip(&ctx).await);
                                }
                                let _ = reply.send(out);
                            }
                            Job::Tool(n, args, reply) => {
                                let mut out = Vec::with_capacity(n);
                                for _ in 0..n {
                                    out.push(a.tool_trip(&args).await);
                                }
                                let _ = reply.send(out);
                            }
                            Job::Relay(stop) => a.read_for_relay(stop).await,
                        }
                    }
                });
                let _ = rt.block_on(host);
            })
            .expect("starting the raw host thread");
        let (pid, socket) = started.await.expect("the raw host thread failed");
        RawPlugin {
            jobs,
            pid,
            socket,
            thread: Some(thread),
        }
    }

    /// The plugin process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `n` `RunStage` round trips of `context`, one after another; µs each.
    pub async fn stage_trips(&self, n: usize, context: &StageContext) -> Vec<f64> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self.jobs.send(Job::Stage(n, Box::new(context.clone()), tx));
        rx.await.expect("raw host")
    }

    /// `n` `InvokeTool` round trips with `args_json`; µs each.
    pub async fn tool_trips(&self, n: usize, args_json: &str) -> Vec<f64> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self.jobs.send(Job::Tool(n, args_json.into(), tx));
        rx.await.expect("raw host")
    }

    /// One `RunStage` round trip; µs.
    pub async fn stage_trip(&self, context: &StageContext) -> f64 {
        self.stage_trips(1, context).await[0]
    }

    /// A client of the raw relay, and a guard that keeps the host's stream reader
    /// serving it: while the guard lives, the host runs no other job.
    pub async fn relay(&self) -> (AdminClient<tonic::transport::Channel>, RelayGuard) {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let _ = self.jobs.send(Job::Relay(stopped));
        (
            AdminClient::new(crate::harness::unix_channel(self.socket.clone()).await),
            RelayGuard(stop),
        )
    }
}

/// Keeps the raw host reading for the relay (see [`RawPlugin::relay`]).
pub struct RelayGuard(tokio::sync::oneshot::Sender<()>);

impl Drop for RawPlugin {
    fn drop(&mut self) {
        let (jobs, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.jobs, jobs));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// [`Peer`] with owned data, to move to the host thread.
enum OwnedPeer {
    Raw(String),
    Sdk {
        runtime: String,
        entry: PathBuf,
        env: Vec<(String, String)>,
    },
}

impl Peer<'_> {
    fn owned(&self) -> OwnedPeer {
        match self {
            Peer::Raw(l) => OwnedPeer::Raw(l.to_string()),
            Peer::Sdk {
                runtime,
                entry,
                env,
            } => OwnedPeer::Sdk {
                runtime: runtime.to_string(),
                entry: entry.clone(),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
        }
    }
}

impl OwnedPeer {
    fn borrowed(&self) -> Peer<'_> {
        match self {
            OwnedPeer::Raw(l) => Peer::Raw(l),
            OwnedPeer::Sdk {
                runtime,
                entry,
                env,
            } => Peer::Sdk {
                runtime,
                entry: entry.clone(),
                env: env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            },
        }
    }
}

impl Attached {
    async fn start(peer: Peer<'_>, python: &str, repo: &std::path::Path) -> Attached {
        let dir = tempfile::Builder::new()
            .prefix("hearth-raw")
            .tempdir_in("/tmp")
            .unwrap();
        let socket = dir.path().join("raw.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (sessions, mut attached) = mpsc::unbounded_channel();
        let relay = Arc::new(Relay::default());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(
                    PluginHostServer::new(Host { sessions })
                        .max_decoding_message_size(64 << 20)
                        .max_encoding_message_size(64 << 20),
                )
                .add_service(RelayService(relay.clone()))
                .serve_with_incoming(UnixListenerStream::new(listener)),
        );
        let addr = format!("unix://{}", socket.display());
        let (lang, mut cmd) = match &peer {
            Peer::Raw(lang) => (*lang, raw_command(lang, python, repo)),
            Peer::Sdk {
                runtime,
                entry,
                env,
            } => {
                let mut c = match *runtime {
                    "python" => {
                        let mut c = Command::new(python);
                        c.args(["-m", "hearth_plugin", "run"]).arg(entry);
                        c
                    }
                    "node" => {
                        let mut c =
                            Command::new(std::env::var("HEARTH_NODE").unwrap_or("node".into()));
                        c.args(["-e", "require(process.argv[1]).main(process.argv[2])"])
                            .arg(repo.join("sdk-node/runner.js"))
                            .arg(entry)
                            .env("NODE_PATH", repo.join("node_modules"));
                        c
                    }
                    _ => Command::new(entry),
                };
                c.env("HEARTH_PLUGIN", "sdk");
                for (k, v) in env {
                    c.env(k, v);
                }
                ("SDK", c)
            }
        };
        let child = cmd
            .env("HEARTH_ADDR", &addr)
            .env("HEARTH_TOKEN", "raw")
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting the raw {lang} plugin: {e}"));
        let (mut inbound, out) = tokio::time::timeout(Duration::from_secs(30), attached.recv())
            .await
            .unwrap_or_else(|_| panic!("the raw {lang} plugin did not attach"))
            .unwrap();
        let mut hook_id = "raw".to_string();
        let mut tool = "raw_echo".to_string();
        if let Peer::Sdk { .. } = peer {
            // Hello, then Register: answer Registered and remember the pre_action hook
            // and the echo tool (a plugin may have either).
            loop {
                let m = inbound.message().await.unwrap().expect("SDK plugin ended");
                if let Some(PluginMsg::Register(r)) = m.msg {
                    if let Some(h) = r.stages.iter().find(|h| h.stage == Stage::PreAction as i32) {
                        hook_id = h.hook_id.clone();
                    }
                    if let Some(t) = r.tools.iter().find(|t| t.name.ends_with("_echo")) {
                        tool = t.name.clone();
                    }
                    let registered = hearth_proto::v1::Registered {
                        plugin: "sdk".into(),
                        tools: r.tools.iter().map(|t| t.name.clone()).collect(),
                        protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
                        ..Default::default()
                    };
                    out.send(Ok(HostMessage {
                        msg: Some(HostMsg::Registered(registered)),
                    }))
                    .await
                    .unwrap();
                    break;
                }
            }
        }
        let _ = relay.out.set(out.clone());
        let _ = relay.tool.set(tool.clone());
        Attached {
            inbound,
            out,
            child,
            _dir: dir,
            next: 1,
            hook_id,
            tool,
            relay,
        }
    }

    fn socket(&self) -> PathBuf {
        self._dir.path().join("raw.sock")
    }

    /// The relay's session reader: hands each `ToolResult` to the call waiting for it,
    /// until `stop` fires (or its sender is dropped).
    async fn read_for_relay(&mut self, mut stop: tokio::sync::oneshot::Receiver<()>) {
        loop {
            let m = tokio::select! {
                _ = &mut stop => return,
                m = self.inbound.message() => m,
            };
            let Ok(Some(m)) = m else { return };
            if let Some(PluginMsg::ToolResult(r)) = m.msg {
                if let Some(tx) = self.relay.pending.lock().unwrap().remove(&r.call_id) {
                    let _ = tx.send(r);
                }
            }
        }
    }
}

/// The command of the minimal plugin of `lang`.
fn raw_command(lang: &str, python: &str, repo: &std::path::Path) -> Command {
    match lang {
        "Python" => {
            let mut c = Command::new(python);
            c.arg(repo.join("bench/raw/raw_plugin.py"));
            c
        }
        "Node" => {
            let mut c = Command::new(std::env::var("HEARTH_NODE").unwrap_or("node".into()));
            c.arg(repo.join("bench/raw/raw_plugin.js"))
                .env("NODE_PATH", repo.join("node_modules"));
            c
        }
        "Rust" => {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.env(RAW_PLUGIN_ENV, "1");
            c
        }
        "Go" => Command::new(go_build(repo, "bench/raw/go", "raw-go")),
        other => panic!("unknown raw plugin language {other}"),
    }
}

/// Builds the Go main package in `repo/dir` with `go build` into
/// `target/<profile>/go-bench/<name>` (beside this bench binary's `deps/`) and returns
/// the binary. Go's build cache makes a rebuild with nothing changed ~0.1 s. Panics
/// with the compiler's output when `go` is missing or the package does not build.
pub fn go_build(repo: &std::path::Path, dir: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let out = profile_dir.join("go-bench").join(name);
    let result = Command::new("go")
        .args(["build", "-buildvcs=false", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(repo.join(dir))
        .output()
        .unwrap_or_else(|e| panic!("go build in {dir}: {e} (Go 1.26 or newer must be on PATH)"));
    assert!(
        result.status.success(),
        "go build in {dir} failed:\n{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

impl Attached {
    async fn round_trip(&mut self, msg: HostMsg) -> PluginMsg {
        self.out
            .send(Ok(HostMessage { msg: Some(msg) }))
            .await
            .expect("raw plugin gone");
        loop {
            let m = self
                .inbound
                .message()
                .await
                .expect("raw plugin stream")
                .expect("raw plugin ended its stream");
            match m.msg {
                Some(PluginMsg::Pong(_)) | None => continue,
                Some(other) => return other,
            }
        }
    }

    /// One `RunStage` of `context` answered; µs.
    pub async fn stage_trip(&mut self, context: &StageContext) -> f64 {
        let call_id = self.next;
        self.next += 1;
        let msg = HostMsg::RunStage(RunStage {
            call_id,
            stage: Stage::PreAction as i32,
            hook_id: self.hook_id.clone(),
            context: Some(context.clone()),
            timeout_ms: 5000,
            ..Default::default()
        });
        let started = Instant::now();
        match self.round_trip(msg).await {
            PluginMsg::StageResult(r) => assert_eq!(r.call_id, call_id),
            other => panic!("raw plugin answered {other:?}"),
        }
        started.elapsed().as_secs_f64() * 1e6
    }

    /// One `InvokeTool` with `args_json` answered; µs.
    pub async fn tool_trip(&mut self, args_json: &str) -> f64 {
        let call_id = self.next;
        self.next += 1;
        let msg = HostMsg::InvokeTool(InvokeTool {
            call_id,
            tool: self.tool.clone(),
            args_json: args_json.into(),
            sender: None,
            timeout_ms: 5000,
            ..Default::default()
        });
        let started = Instant::now();
        match self.round_trip(msg).await {
            PluginMsg::ToolResult(r) => {
                assert_eq!(r.call_id, call_id);
                assert!(r.success, "{}: {}", self.tool, r.error);
            }
            other => panic!("raw plugin answered {other:?}"),
        }
        started.elapsed().as_secs_f64() * 1e6
    }
}

impl Drop for Attached {
    /// `Shutdown`, a moment to exit (so profilers of the plugin write their output),
    /// then SIGKILL.
    fn drop(&mut self) {
        let _ = self.out.try_send(Ok(HostMessage {
            msg: Some(HostMsg::Shutdown(hearth_proto::v1::Shutdown {
                grace_ms: 500,
                reason: "bench done".into(),
            })),
        }));
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The raw Rust plugin (this binary with [`RAW_PLUGIN_ENV`] set): a current-thread
/// runtime, like the Rust SDK's.
pub fn raw_plugin_main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let addr = std::env::var("HEARTH_ADDR").unwrap();
        let channel =
            crate::harness::unix_channel(PathBuf::from(addr.trim_start_matches("unix://"))).await;
        let mut client = PluginHostClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let (tx, rx) = mpsc::channel::<PluginMessage>(1024);
        let mut req = Request::new(ReceiverStream::new(rx));
        req.metadata_mut()
            .insert("x-hearth-token", "raw".parse().unwrap());
        let mut inbound = client.attach(req).await.unwrap().into_inner();
        while let Some(Ok(m)) = inbound.next().await {
            let reply = match m.msg {
                Some(HostMsg::RunStage(rs)) => PluginMsg::StageResult(StageResult {
                    call_id: rs.call_id,
                    context: rs.context,
                    error: String::new(),
                }),
                Some(HostMsg::InvokeTool(it)) => PluginMsg::ToolResult(ToolResult {
                    call_id: it.call_id,
                    success: true,
                    content: it.args_json,
                    ..Default::default()
                }),
                Some(HostMsg::Ping(p)) => PluginMsg::Pong(Pong { nonce: p.nonce }),
                Some(HostMsg::Shutdown(_)) => return,
                _ => continue,
            };
            if tx.send(PluginMessage { msg: Some(reply) }).await.is_err() {
                return;
            }
        }
    });
}
