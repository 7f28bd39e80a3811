//! `hearth node`: a plugin host. It supervises its plugins exactly as `hearth run` does
//! (same manifests, restart policy, sandbox, logs, `hearth plugins …` and `hearth tools
//! …` against its data dir) but runs no agent, LLM or storage; it serves its plugins'
//! tools, stage hooks and triggers to brokers over NATS, and relays their host-service
//! calls to the brokers ([`super::relay`]).
//!
//! On the bus a node
//! - is in plugin P's queue group (`<pfx>.call.<P>.>`) while P is ready here, so brokers'
//!   calls of P spread over the nodes serving it; a call that arrives when P is not
//!   ready (or for a tool it does not have) is answered `NotRun`, never run;
//! - announces its ready plugins (`<pfx>.reg.<node>`) at start, on every change and when
//!   a broker asks (`<pfx>.discover`), and sends a heartbeat every second;
//! - answers probes (`<pfx>.node.<node>.ping`) with its boot id, and cancels a call on
//!   `<pfx>.cancel`;
//! - runs each call through its own router (argument check, timeout, `Progress`), and
//!   sends `Accepted` when a call runs longer than [`ACCEPT_AFTER`].
//!
//! On SIGTERM/SIGINT it leaves every queue group (calls that were on their way are
//! answered `NotRun`), announces it is leaving, lets calls in flight finish within
//! `--drain-timeout-ms`, then stops its plugins.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use hearth_proto::v1::{
    failed, host_message::Msg, node_reply, plugin_message::Msg as PluginMsg, Failed, NodeAnnounce,
    NodeCall, NodeCancel, NodeHeartbeat, NodePong, NodeReply, NotRun, PluginMessage, Progress,
    RemotePlugin, Reply as EventText, Stage,
};
use tokio_util::sync::CancellationToken;

use super::{chunk_size, chunked, decode, encode, Subjects, ACCEPT_AFTER, HEARTBEAT_EVERY};
use crate::error::CallError;
use crate::router::ToolRouter;
use crate::supervisor::Supervisor;

/// `hearth node`'s flags (the data dir is the global `--data-dir`).
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// The NATS server, e.g. tls://nats.example.com:4222 (over `[nats] url` of
    /// `<data_dir>/hearth.toml`, where credentials and TLS are set).
    #[arg(long, env = "HEARTH_NATS_URL", value_name = "URL")]
    pub nats: Option<String>,
    /// Directory whose subdirectories are plugins (repeatable; `<data_dir>/plugins` too).
    #[arg(long = "plugins", value_name = "DIR")]
    pub plugins: Vec<PathBuf>,
    /// This node's name on the bus: 1 to 64 of ASCII letters, digits, `_` and `-`
    /// (over `[nats] name`; default: the host name).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// Serve /metrics, /healthz and /readyz on this loopback address, e.g. 127.0.0.1:9091.
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Option<std::net::SocketAddr>,
    /// Milliseconds a plugin gets after `Shutdown` before SIGTERM.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub shutdown_grace_ms: u64,
    /// Milliseconds a call waits for a restarting plugin (calls already taken by this node).
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    pub restart_wait_ms: u64,
    /// Milliseconds calls in flight may finish when the node stops or a plugin reloads.
    #[arg(long, default_value_t = 10000, value_name = "MS")]
    pub drain_timeout_ms: u64,
    /// Reload a plugin when files in its directory change.
    #[arg(long)]
    pub watch: bool,
}

/// Runs `hearth node` on a current-thread runtime (it routes, it does not compute: one
/// thread keeps the hop's wake-ups on one CPU; docs/design/nats-research.md §1.4).
pub fn node_command(data_dir: PathBuf, args: NodeArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(data_dir, args))?;
    Ok(ExitCode::SUCCESS)
}

async fn run(data_dir: PathBuf, args: NodeArgs) -> anyhow::Result<()> {
    if let Some(addr) = args.http_listen {
        if !addr.ip().is_loopback() {
            anyhow::bail!("--http-listen {addr}: only loopback addresses are served (put a TLS proxy in front for others)");
        }
    }
    let data_dir = std::path::absolute(&data_dir)?;
    // `[nats]` of hearth.toml (if any), with the flags over it; checked before anything
    // is created.
    let config = crate::llm::config::Config::load(&data_dir, &Default::default())
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut nats = config.nats.unwrap_or_default();
    if let Some(url) = args.nats {
        nats.url = Some(url);
        nats.urls.clear();
    }
    if let Some(name) = args.node_name {
        nats.name = Some(name);
    }
    let node = nats.name.clone().unwrap_or_else(crate::nats::host_name);
    nats.name = Some(node.clone());
    nats.validate()
        .map_err(|e| anyhow::anyhow!("hearth node: {e}"))?;

    // A node exists to serve plugins: a folder that is not there is a typo, not a
    // node with fewer plugins.
    for root in &args.plugins {
        if !root.is_dir() {
            anyhow::bail!("--plugins {}: not a directory", root.display());
        }
    }

    crate::server::harden_process();
    let stopped = crate::server::stop_signal();
    crate::server::prepare_data_dir(&data_dir, &args.plugins)?;
    // Waits for an unreachable server (it may start after the node); a wrong config,
    // login or certificate stops the node.
    let mut stopped = std::pin::pin!(stopped);
    let violations = crate::nats::Violations::default();
    let client = tokio::select! {
        client = crate::nats::connect_retrying(&nats, Some(format!("_INBOX_{node}")), &violations) => {
            client.map_err(|e| anyhow::anyhow!("hearth node: {e}"))?
        }
        () = &mut stopped => return Ok(()),
    };
    let subjects = Subjects::new(&nats.subject_prefix);

    let socket = data_dir.join(crate::server::SOCKET_FILE);
    crate::server::prepare_socket(&socket)?;
    let listener = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("binding {}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
    let admin_token =
        crate::server::write_admin_token(&data_dir.join(crate::server::ADMIN_TOKEN_FILE))?;
    let drain_timeout = Duration::from_millis(args.drain_timeout_ms);
    let supervisor = crate::server::new_supervisor(
        &data_dir,
        &socket,
        &args.plugins,
        &[],
        (
            Duration::from_millis(args.restart_wait_ms),
            Duration::from_millis(args.shutdown_grace_ms),
            drain_timeout,
        ),
    );
    let router = Arc::new(ToolRouter::new(supervisor.clone()));
    if args.http_listen.is_some() {
        crate::observe::metrics::enable(supervisor.clone(), None);
        crate::observe::metrics::watch_nats(client.clone(), None);
    }

    let link = NodeLink::new(
        client.clone(),
        subjects.clone(),
        node.clone(),
        router.clone(),
    );
    let stop = CancellationToken::new();
    let server = {
        use crate::grpc::{AdminAuth, AdminService, PluginAuth, PluginHostService, SessionGate};
        use hearth_proto::v1::admin_server::AdminServer;
        use hearth_proto::v1::plugin_host_server::PluginHostServer;
        use tonic::service::interceptor::InterceptedService;
        let max = hearth_proto::MAX_MESSAGE_BYTES;
        let (_, health) = tonic_health::server::health_reporter();
        let sources = Arc::new(crate::llm::SourcePool::new(Vec::new()));
        let routes = tonic::service::Routes::new(health)
            .add_service(SessionGate::new(InterceptedService::new(
                PluginHostServer::new(PluginHostService::new(supervisor.clone()))
                    .max_decoding_message_size(max)
                    .max_encoding_message_size(max),
                PluginAuth::session(supervisor.clone()).admin_token(&admin_token),
            )))
            .add_service(InterceptedService::new(
                AdminServer::new(AdminService::new(
                    router.clone(),
                    sources,
                    admin_token.clone(),
                ))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
                AdminAuth::new(&admin_token),
            ));
        let relay = super::relay::NodeRelay::new(
            client.clone(),
            subjects.clone(),
            node.clone(),
            supervisor.clone(),
        );
        let routes = tonic::service::Routes::from(routes.into_axum_router().merge(relay.routes()));
        let stop = stop.clone();
        tokio::spawn(
            tonic::transport::Server::builder()
                .max_concurrent_streams(Some(crate::server::MAX_STREAMS_PER_CONNECTION))
                .add_routes(routes)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    stop.cancelled_owned(),
                ),
        )
    };
    let http = match args.http_listen {
        None => None,
        Some(addr) => {
            let tcp = crate::observe::http::bind(addr).await?;
            tracing::info!(
                "HTTP listening on http://{}: /metrics, /healthz, /readyz",
                tcp.local_addr()?
            );
            let ready = {
                let link = link.clone();
                Arc::new(move || link.is_ready())
            };
            let app = crate::observe::http::node_router(ready);
            let stop = stop.clone();
            Some(tokio::spawn(async move {
                axum::serve(tcp, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
            }))
        }
    };

    // Another process running as this node (its probes would answer for ours, and
    // its calls' replies mix with ours): refuse, or wait for one that is leaving.
    tokio::select! {
        unique = link.wait_until_name_free(drain_timeout + Duration::from_secs(2)) => unique?,
        () = &mut stopped => return Ok(()),
    }
    link.clone().start().await?;
    // A NATS user whose permissions do not cover this node's name would leave it
    // running but unheard (announcements refused) or deaf (no calls): stop instead.
    violations
        .check(&client, &nats, || {
            format!("the node's NATS user must be allowed to speak as node {node:?} (--node-name, or [nats] name); see deploy/nats/nats-server.conf")
        })
        .await
        .map_err(|e| anyhow::anyhow!("hearth node: {e}"))?;
    let mut roots = vec![data_dir.join("plugins")];
    roots.extend(args.plugins.iter().cloned());
    let dirs = crate::manifest::discover(&roots);
    for dir in &dirs {
        let _ = supervisor.load_reporting(dir);
    }
    tracing::info!(
        node = %node,
        "plugin host ready on NATS: {} found",
        crate::term::count(dirs.len(), "plugin dir", "plugin dirs")
    );
    let _watcher = if args.watch {
        Some(crate::watch::spawn(supervisor.clone(), &roots).context("--watch")?)
    } else {
        None
    };

    stopped.await;
    let drained_by = tokio::time::Instant::now() + drain_timeout;
    link.leave(drained_by).await;
    supervisor.shutdown_by(drained_by).await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(3), server).await;
    if let Some(http) = http {
        let _ = tokio::time::timeout(Duration::from_secs(1), http).await;
    }
    // Not forever: with the server gone, a flush waits for a reconnect that may not come.
    let _ = tokio::time::timeout(Duration::from_secs(1), client.flush()).await;
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(data_dir.join(crate::server::ADMIN_TOKEN_FILE));
    tracing::info!("stopped");
    Ok(())
}

/// One queue subscription of a ready plugin: stopping it drains the subscription.
struct Serving {
    stop: CancellationToken,
}

/// The node's NATS side (see the module docs).
#[derive(Clone)]
pub struct NodeLink {
    inner: Arc<Inner>,
}

struct Inner {
    client: async_nats::Client,
    subjects: Subjects,
    node: String,
    boot: String,
    router: Arc<ToolRouter>,
    seq: AtomicU64,
    /// Calls running here, by (broker, broker's call id).
    calls: Mutex<HashMap<(String, u64), tokio::task::AbortHandle>>,
    /// Plugins whose queue group this node is in.
    serving: Mutex<HashMap<String, Serving>>,
    /// Set when a broker asks for announcements: the next tick announces.
    asked: AtomicBool,
    leaving: AtomicBool,
}

impl NodeLink {
    /// A link for `node` (not yet subscribed: [`NodeLink::start`]).
    pub fn new(
        client: async_nats::Client,
        subjects: Subjects,
        node: String,
        router: Arc<ToolRouter>,
    ) -> NodeLink {
        NodeLink {
            inner: Arc::new(Inner {
                client,
                subjects,
                node,
                boot: super::boot_id(),
                router,
                seq: AtomicU64::new(0),
                calls: Mutex::new(HashMap::new()),
                serving: Mutex::new(HashMap::new()),
                asked: AtomicBool::new(true),
                leaving: AtomicBool::new(false),
            }),
        }
    }

    /// Ready while connected to NATS and not leaving.
    pub fn is_ready(&self) -> bool {
        !self.inner.leaving.load(Ordering::Relaxed)
            && self.inner.client.connection_state() == async_nats::connection::State::Connected
    }

    fn supervisor(&self) -> &Arc<Supervisor> {
        self.inner.router.supervisor()
    }

    /// Subscribes to pings, cancels and discovery, and starts announcing.
    pub async fn start(self) -> anyhow::Result<()> {
        let i = &self.inner;
        let sub = |what: &'static str| {
            move |e: async_nats::SubscribeError| anyhow::anyhow!("NATS: subscribing to {what}: {e}")
        };
        let pings = i
            .client
            .subscribe(i.subjects.ping(&i.node))
            .await
            .map_err(sub("pings"))?;
        let cancels = i
            .client
            .subscribe(i.subjects.cancel())
            .await
            .map_err(sub("cancels"))?;
        let discover = i
            .client
            .subscribe(i.subjects.discover())
            .await
            .map_err(sub("discovery"))?;
        // The first announcement and heartbeat go out before this returns, so a
        // permission check after it covers every subject the node speaks on.
        self.announce(self.announced_plugins(), false).await;
        self.heartbeat().await;
        tokio::spawn(self.clone().answer_pings(pings));
        tokio::spawn(self.clone().take_cancels(cancels));
        tokio::spawn(self.clone().take_discover(discover));
        tokio::spawn(self.announce_loop());
        Ok(())
    }

    async fn answer_pings(self, mut pings: async_nats::Subscriber) {
        while let Some(msg) = pings.next().await {
            if let Some(reply) = msg.reply {
                let pong = encode(&NodePong {
                    node: self.inner.node.clone(),
                    boot: self.inner.boot.clone(),
                    leaving: self.inner.leaving.load(Ordering::Relaxed),
                });
                let _ = self.inner.client.publish(reply, pong).await;
            }
        }
    }

    /// Probes this node's own name before taking it: an answer means another process
    /// runs as this node. One that is leaving is waited for (up to `wait`); one that is
    /// not is an error naming the name. No answer (no responders, or a timeout, e.g. a
    /// probe the NATS user may not send, which the permission check reports) is a free
    /// name.
    ///
    /// # Errors
    /// Another node serves the name, or a leaving one is still there after `wait`.
    pub async fn wait_until_name_free(&self, wait: Duration) -> anyhow::Result<()> {
        let i = &self.inner;
        let until = tokio::time::Instant::now() + wait;
        let mut told = false;
        loop {
            let request = async_nats::Request::new()
                .payload(bytes::Bytes::new())
                .timeout(Some(super::PROBE_TIMEOUT));
            let Ok(msg) = i
                .client
                .send_request(i.subjects.ping(&i.node), request)
                .await
            else {
                return Ok(());
            };
            let other = decode::<NodePong>("pong", &msg.payload).unwrap_or_default();
            if !other.leaving {
                anyhow::bail!(
                    "hearth node: another plugin host already runs as node {:?} on this NATS server (boot {}); give each node its own --node-name (or [nats] name)",
                    i.node,
                    other.boot
                );
            }
            if tokio::time::Instant::now() >= until {
                anyhow::bail!(
                    "hearth node: the previous node {:?} (boot {}) is still leaving after {} ms; start this one when it has stopped",
                    i.node,
                    other.boot,
                    wait.as_millis()
                );
            }
            if !told {
                told = true;
                tracing::info!(node = %i.node, "waiting for the previous process of this node to finish its calls and leave");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn take_cancels(self, mut cancels: async_nats::Subscriber) {
        while let Some(msg) = cancels.next().await {
            let Ok(c) = decode::<NodeCancel>("cancel", &msg.payload) else {
                continue;
            };
            let call = self
                .inner
                .calls
                .lock()
                .unwrap()
                .remove(&(c.broker, c.call_id));
            if let Some(call) = call {
                tracing::debug!(call_id = c.call_id, reason = %c.reason, "call cancelled by its broker");
                // Dropping the router's future sends the plugin `Cancel`.
                call.abort();
            }
        }
    }

    async fn take_discover(self, mut discover: async_nats::Subscriber) {
        while discover.next().await.is_some() {
            self.inner.asked.store(true, Ordering::Relaxed);
        }
    }

    /// Every loaded plugin, the ready ones with their registration.
    fn announced_plugins(&self) -> Vec<RemotePlugin> {
        let registry = self.inner.router.registry();
        let mut out = Vec::new();
        for p in self.supervisor().plugins() {
            let spec = p.spec();
            let snapshot = p.snapshot();
            let session = p.serving_session();
            let register = session.as_ref().map(|session| {
                let mut register = session
                    .registration()
                    .map(|r| (*r).clone())
                    .unwrap_or_default();
                // Tools as registered now (runtime RegisterTool/UnregisterTool included).
                register.tools = registry
                    .list()
                    .iter()
                    .filter(|t| t.plugin == p.name())
                    .map(|t| t.to_spec())
                    .collect();
                register
            });
            out.push(RemotePlugin {
                name: p.name().to_string(),
                version: spec.version.clone(),
                generation: session.as_ref().map_or(0, |s| s.generation()),
                ready: register.is_some(),
                state: snapshot.state as i32,
                register,
                capabilities: spec.capabilities.clone(),
                call_timeout_s: spec.call_timeout_s,
                max_total_s: spec.max_total_s,
                pid: snapshot.pid,
                sdk: snapshot.sdk,
                restarts: snapshot.restarts,
                reason: snapshot.reason,
            });
        }
        out
    }

    /// A cheap fingerprint of what [`NodeLink::announced_plugins`] would say: the tool
    /// set's revision, and each loaded plugin's serving generation (0: not ready) and
    /// state (so brokers see a plugin fail, not only come and go).
    fn fingerprint(&self) -> (u64, Vec<(String, u64, i32)>) {
        let revision = *self.inner.router.registry().watch_tools().borrow();
        let plugins = self
            .supervisor()
            .plugins()
            .iter()
            .map(|p| {
                let generation = p.serving_session().map_or(0, |s| s.generation());
                (p.name().to_string(), generation, p.state() as i32)
            })
            .collect();
        (revision, plugins)
    }

    /// Keeps the queue subscriptions and the brokers' view in step with the plugins'
    /// states, and sends heartbeats.
    async fn announce_loop(self) {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = None;
        let mut next_heartbeat = tokio::time::Instant::now();
        let mut was_connected = true;
        loop {
            tick.tick().await;
            if self.inner.leaving.load(Ordering::Relaxed) {
                return;
            }
            let connected =
                self.inner.client.connection_state() == async_nats::connection::State::Connected;
            if connected && !was_connected {
                // Back after an outage: brokers may have dropped this node meanwhile.
                self.inner.asked.store(true, Ordering::Relaxed);
            }
            was_connected = connected;
            let fingerprint = self.fingerprint();
            let asked = self.inner.asked.swap(false, Ordering::Relaxed);
            if asked || last.as_ref() != Some(&fingerprint) {
                let plugins = self.announced_plugins();
                self.sync_subscriptions(&plugins).await;
                self.announce(plugins, false).await;
                last = Some(fingerprint);
            }
            if tokio::time::Instant::now() >= next_heartbeat {
                next_heartbeat += HEARTBEAT_EVERY;
                self.heartbeat().await;
            }
        }
    }

    async fn heartbeat(&self) {
        let hb = encode(&NodeHeartbeat {
            node: self.inner.node.clone(),
            boot: self.inner.boot.clone(),
            seq: self.inner.seq.load(Ordering::Relaxed),
            in_flight: self.inner.calls.lock().unwrap().len() as u32,
        });
        let _ = self
            .inner
            .client
            .publish(self.inner.subjects.heartbeat(&self.inner.node), hb)
            .await;
    }

    async fn announce(&self, plugins: Vec<RemotePlugin>, leaving: bool) {
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let n = plugins.len();
        let msg = encode(&NodeAnnounce {
            node: self.inner.node.clone(),
            boot: self.inner.boot.clone(),
            seq,
            protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
            leaving,
            plugins,
            version: env!("CARGO_PKG_VERSION").into(),
        });
        let max = self.inner.client.max_payload();
        if msg.len() > max {
            tracing::error!("NATS: the announcement of {n} plugins is {} bytes, more than the server's max_payload ({max}); brokers will not see this node's plugins", msg.len());
            return;
        }
        match self
            .inner
            .client
            .publish(self.inner.subjects.announce(&self.inner.node), msg)
            .await
        {
            Ok(()) => tracing::debug!(seq, plugins = n, leaving, "NATS: announced"),
            Err(e) => tracing::warn!("NATS: announcing failed: {e}"),
        }
    }

    /// Joins the queue group of each ready plugin and leaves the others'. A plugin's
    /// subscription is made before the announcement that offers it goes out, so a
    /// broker that reacts to the announcement finds it (one connection keeps order).
    async fn sync_subscriptions(&self, announced: &[RemotePlugin]) {
        let stale: Vec<(String, Serving)> = {
            let mut serving = self.inner.serving.lock().unwrap();
            let gone: Vec<String> = serving
                .keys()
                .filter(|name| !announced.iter().any(|p| p.ready && &p.name == *name))
                .cloned()
                .collect();
            gone.into_iter()
                .filter_map(|n| serving.remove(&n).map(|s| (n, s)))
                .collect()
        };
        for (name, s) in stale {
            tracing::info!(plugin = %name, "NATS: leaving the plugin's queue group (not ready here)");
            s.stop.cancel();
        }
        for p in announced.iter().filter(|p| p.ready) {
            if self.inner.serving.lock().unwrap().contains_key(&p.name) {
                continue;
            }
            let subject = self.inner.subjects.plugin_calls(&p.name);
            match self
                .inner
                .client
                .queue_subscribe(subject, Subjects::token(&p.name))
                .await
            {
                Ok(sub) => {
                    let stop = CancellationToken::new();
                    self.inner
                        .serving
                        .lock()
                        .unwrap()
                        .insert(p.name.clone(), Serving { stop: stop.clone() });
                    tokio::spawn(self.clone().serve_plugin(p.name.clone(), sub, stop));
                    tracing::info!(plugin = %p.name, "NATS: serving the plugin's calls");
                }
                Err(e) => {
                    tracing::error!(plugin = %p.name, "NATS: subscribing to its calls failed: {e}")
                }
            }
        }
    }

    /// Takes `plugin`'s calls until `stop`; then drains the subscription, answering
    /// what was already on its way `NotRun`.
    async fn serve_plugin(
        self,
        plugin: String,
        mut sub: async_nats::Subscriber,
        stop: CancellationToken,
    ) {
        loop {
            tokio::select! {
                msg = sub.next() => match msg {
                    Some(msg) => self.take_call(&plugin, msg),
                    None => return,
                },
                _ = stop.cancelled() => break,
            }
        }
        let _ = sub.drain().await;
        let reason = format!("plugin {plugin} is not ready on node {}", self.inner.node);
        while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(2), sub.next()).await {
            if let Some(reply) = msg.reply {
                self.send(
                    &reply,
                    node_reply::Msg::NotRun(NotRun {
                        reason: reason.clone(),
                        not_ready: true,
                    }),
                )
                .await;
            }
        }
    }

    fn take_call(&self, plugin: &str, msg: async_nats::Message) {
        let Some(reply) = msg.reply.clone() else {
            tracing::warn!(subject = %msg.subject, "NATS: a call without a reply subject; ignored");
            return;
        };
        let link = self.clone();
        let plugin = plugin.to_string();
        let calls = self.inner.clone();
        let call = match decode::<NodeCall>("call", &msg.payload) {
            Ok(c) => c,
            Err(e) => {
                tokio::spawn(async move {
                    link.send(
                        &reply,
                        node_reply::Msg::NotRun(NotRun {
                            reason: e,
                            not_ready: false,
                        }),
                    )
                    .await;
                });
                return;
            }
        };
        let Some(inner_msg) = call.msg.and_then(|m| m.msg) else {
            tokio::spawn(async move {
                link.send(
                    &reply,
                    node_reply::Msg::NotRun(NotRun {
                        reason: "the call holds no message".into(),
                        not_ready: false,
                    }),
                )
                .await;
            });
            return;
        };
        let call_id = match &inner_msg {
            Msg::InvokeTool(t) => t.call_id,
            Msg::RunStage(r) => r.call_id,
            Msg::HandleEvent(e) => e.call_id,
            _ => 0,
        };
        let key = (call.broker, call_id);
        let done = key.clone();
        // Inserted under the lock the task's own removal takes: a call that ends at once
        // leaves no entry behind.
        let mut table = calls.calls.lock().unwrap();
        let task = tokio::spawn(async move {
            link.run_call(&plugin, call_id, inner_msg, &reply).await;
            link.inner.calls.lock().unwrap().remove(&done);
        });
        table.insert(key, task.abort_handle());
    }

    /// Publishes one reply of a call on `reply` (chunked when large).
    async fn send(&self, reply: &async_nats::Subject, msg: node_reply::Msg) {
        let encoded = encode(&NodeReply {
            node: self.inner.node.clone(),
            boot: self.inner.boot.clone(),
            msg: Some(msg),
        });
        let size = chunk_size(self.inner.client.max_payload());
        for part in chunked(&self.inner.node, &self.inner.boot, encoded, size) {
            if let Err(e) = self.inner.client.publish(reply.clone(), part).await {
                tracing::warn!("NATS: answering a call failed: {e}");
                return;
            }
        }
    }

    async fn plugin_msg(&self, reply: &async_nats::Subject, msg: PluginMsg) {
        self.send(
            reply,
            node_reply::Msg::Plugin(PluginMessage { msg: Some(msg) }),
        )
        .await
    }

    /// Runs one call through the node's router and answers it.
    async fn run_call(&self, plugin: &str, call_id: u64, msg: Msg, reply: &async_nats::Subject) {
        let not_ready = |reason: String| {
            node_reply::Msg::NotRun(NotRun {
                reason,
                not_ready: true,
            })
        };
        let ready = self
            .supervisor()
            .plugin(plugin)
            .is_some_and(|p| p.serving_session().is_some());
        if !ready || self.inner.leaving.load(Ordering::Relaxed) {
            let why = format!("plugin {plugin} is not ready on node {}", self.inner.node);
            return self.send(reply, not_ready(why)).await;
        }
        let (traceparent, tracestate) = match &msg {
            Msg::InvokeTool(t) => (t.traceparent.clone(), t.tracestate.clone()),
            Msg::RunStage(r) => (r.traceparent.clone(), r.tracestate.clone()),
            Msg::HandleEvent(e) => (e.traceparent.clone(), e.tracestate.clone()),
            _ => Default::default(),
        };
        crate::observe::trace::with_forwarded(
            traceparent,
            tracestate,
            self.run_ready_call(plugin, call_id, msg, reply),
        )
        .await
    }

    /// [`NodeLink::run_call`] once the plugin is known to be ready.
    async fn run_ready_call(
        &self,
        plugin: &str,
        call_id: u64,
        msg: Msg,
        reply: &async_nats::Subject,
    ) {
        // This node cannot run it (another version): the broker tries another instance.
        let not_run = |reason: String| {
            node_reply::Msg::NotRun(NotRun {
                reason,
                not_ready: false,
            })
        };
        let router = &self.inner.router;
        let timeout_of = |ms: u32| (ms > 0).then(|| Duration::from_millis(u64::from(ms)));
        let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel();
        let (texts_tx, mut texts_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let work: std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<PluginMsg, CallError>> + Send + '_>,
        > = match msg {
            Msg::InvokeTool(t) => {
                let tool = match router
                    .registry()
                    .get(&t.tool)
                    .filter(|tool| tool.plugin == plugin)
                {
                    Some(tool) => tool,
                    None => {
                        let why = format!(
                            "plugin {plugin} on node {} has no tool `{}`",
                            self.inner.node, t.tool
                        );
                        return self.send(reply, not_run(why)).await;
                    }
                };
                let args = serde_json::from_str(if t.args_json.trim().is_empty() {
                    "{}"
                } else {
                    &t.args_json
                })
                .map_err(|e| CallError::InvalidArguments {
                    tool: t.tool.clone(),
                    message: format!("arguments are not valid JSON: {e}"),
                })
                .and_then(|args| router.prepare(&t.tool, &args));
                if let Err(e) = args {
                    return self.send(reply, not_run(e.to_string())).await;
                }
                let timeout = timeout_of(t.timeout_ms);
                Box::pin(async move {
                    let mut r = router
                        .call_with_progress(
                            &tool,
                            t.args_json,
                            timeout,
                            t.sender,
                            Some(progress_tx),
                        )
                        .await?;
                    r.call_id = call_id;
                    Ok(PluginMsg::ToolResult(r))
                })
            }
            Msg::RunStage(r) => {
                let stage = Stage::try_from(r.stage).unwrap_or(Stage::Unspecified);
                let hook = router
                    .registry()
                    .stage_hooks(stage)
                    .iter()
                    .find(|h| h.plugin == plugin && h.hook_id == r.hook_id)
                    .cloned();
                let Some(hook) = hook else {
                    let why = format!(
                        "plugin {plugin} on node {} has no {} hook `{}`",
                        self.inner.node,
                        hearth_proto::stage_name(stage),
                        r.hook_id
                    );
                    return self.send(reply, not_run(why)).await;
                };
                let timeout = timeout_of(r.timeout_ms).unwrap_or(Duration::from_secs(30));
                let context = r.context.unwrap_or_default();
                Box::pin(async move {
                    let mut result = router.run_stage(&hook, context, timeout).await?;
                    result.call_id = call_id;
                    Ok(PluginMsg::StageResult(result))
                })
            }
            Msg::HandleEvent(e) => Box::pin(async move {
                let mut done = router.handle_event(plugin, e, texts_tx).await?;
                done.call_id = call_id;
                Ok(PluginMsg::EventDone(done))
            }),
            _ => return self.send(reply, not_run("not a call".into())).await,
        };
        let mut work = work;
        let accept = tokio::time::sleep(ACCEPT_AFTER);
        tokio::pin!(accept);
        let mut accepted = false;
        let outcome = loop {
            tokio::select! {
                biased;
                Some(p) = progress_rx.recv() => {
                    self.plugin_msg(reply, PluginMsg::Progress(Progress {
                        call_id,
                        message: p.message,
                        fraction: -1.0,
                        progress: p.progress,
                        total: p.total,
                    })).await;
                }
                Some(text) = texts_rx.recv() => {
                    self.plugin_msg(reply, PluginMsg::Reply(EventText { call_id, text })).await;
                }
                outcome = &mut work => break outcome,
                _ = &mut accept, if !accepted => {
                    accepted = true;
                    self.send(reply, node_reply::Msg::Accepted(Default::default())).await;
                }
            }
        };
        // What came in just before the end goes out before it.
        while let Ok(text) = texts_rx.try_recv() {
            self.plugin_msg(reply, PluginMsg::Reply(EventText { call_id, text }))
                .await;
        }
        let answer = match outcome {
            Ok(msg) => node_reply::Msg::Plugin(PluginMessage { msg: Some(msg) }),
            // Waited for a restarting plugin, or a free slot, and got neither.
            Err(e @ (CallError::NotReady { .. } | CallError::Saturated { .. })) => {
                node_reply::Msg::NotRun(NotRun {
                    reason: e.to_string(),
                    not_ready: true,
                })
            }
            Err(e) if e.not_sent() => not_run(e.to_string()),
            Err(CallError::Timeout { after_ms, .. }) => node_reply::Msg::Failed(Failed {
                kind: failed::Kind::Timeout as i32,
                reason: format!("timed out on node {}", self.inner.node),
                after_ms,
            }),
            Err(CallError::PluginGone { reason, .. }) => node_reply::Msg::Failed(Failed {
                kind: failed::Kind::PluginGone as i32,
                reason,
                after_ms: 0,
            }),
            Err(other) => node_reply::Msg::Failed(Failed {
                kind: failed::Kind::Other as i32,
                reason: other.to_string(),
                after_ms: 0,
            }),
        };
        self.send(reply, answer).await;
    }

    /// Leaves every queue group (calls on their way are answered `NotRun`), tells the
    /// brokers, and waits for calls in flight until `deadline`.
    pub async fn leave(&self, deadline: tokio::time::Instant) {
        self.inner.leaving.store(true, Ordering::Relaxed);
        let serving: Vec<Serving> = self
            .inner
            .serving
            .lock()
            .unwrap()
            .drain()
            .map(|(_, s)| s)
            .collect();
        for s in serving {
            s.stop.cancel();
        }
        // Bounded: with the server unreachable, publishing and flushing wait for a
        // reconnect that may not come; the node stops all the same.
        let bye = async {
            self.announce(Vec::new(), true).await;
            let _ = self.inner.client.flush().await;
        };
        if tokio::time::timeout(Duration::from_secs(1), bye)
            .await
            .is_err()
        {
            tracing::warn!("NATS: could not announce leaving (server unreachable); brokers will drop this node when its heartbeats stop");
        }
        while !self.inner.calls.lock().unwrap().is_empty() && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = self.inner.calls.lock().unwrap().len();
        if left > 0 {
            tracing::warn!(
                calls = left,
                "stopping with calls in flight; their plugins are stopped now"
            );
        }
    }
}
