//! The broker's side of NATS: the directory of plugin hosts and their plugins (from
//! their announcements and heartbeats, into the [`Registry`]), and remote calls with the
//! same results and errors as a local [`crate::supervisor::session::Session`]'s.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use hearth_proto::v1::{
    failed, host_message::Msg, node_reply, plugin_message::Msg as PluginMsg, EventDone,
    HandleEvent, HostMessage, NodeAnnounce, NodeCall, NodeCancel, NodeDiscover, NodeHeartbeat,
    NodePong, NodeReply, RemotePlugin, Sender, Stage, StageContext, StageResult, ToolProgress,
    ToolResult,
};
use tokio::sync::{mpsc, watch};

use super::{decode, encode, Subjects, ACK_TIMEOUT, NODE_SILENT, PROBE_EVERY, PROBE_TIMEOUT};
use crate::error::{CallError, Target};
use crate::nats::{NatsConfig, NatsError, NodePolicy};
use crate::registry::Registry;
use crate::supervisor::session::{self, InvokeError, ProgressSink, Reply};
use crate::supervisor::Supervisor;

/// What reaches a waiting remote call.
#[derive(Debug)]
enum Event {
    Reply(Box<NodeReply>),
    /// The server had no subscriber for the call's subject (503).
    NoResponders,
    /// The node that took the call is gone, or sent what cannot be read: which node,
    /// and what happened ("was lost (no answer to probes for 1000 ms)").
    Lost {
        node: String,
        why: String,
    },
}

/// One remote call in flight.
struct Slot {
    tx: mpsc::UnboundedSender<Event>,
    /// (node, boot) once the node that took it said anything.
    node: Option<(String, String)>,
    /// Chunks of a large reply so far.
    buf: Vec<u8>,
}

/// One node as the directory knows it.
#[derive(Debug, Clone)]
struct NodeEntry {
    boot: String,
    seq: u64,
    last_seen: Instant,
    /// When its current plugin list was announced (the newest registration of a plugin
    /// served by several nodes is the one offered).
    announced: Instant,
    /// Its ready plugins (taking calls).
    plugins: Vec<RemotePlugin>,
    /// Every plugin it runs, ready or not (host calls from a starting plugin's start()),
    /// each with its last registration while it restarts (its tools stay offered and
    /// calls wait for it, as for a restarting local plugin).
    loaded: Vec<RemotePlugin>,
}

impl NodeEntry {
    /// Its plugins brokers offer: ready ones, and restarting ones with their last
    /// registration.
    fn offered(&self) -> impl Iterator<Item = &RemotePlugin> {
        self.loaded.iter().filter(|p| p.register.is_some())
    }
}

/// One node serving a plugin, as `plugins list` shows it.
#[derive(Debug, Clone)]
pub struct Instance {
    /// The node's name.
    pub node: String,
    /// The plugin as the node announced it.
    pub plugin: RemotePlugin,
    /// Time since the broker last heard from the node.
    pub last_seen: Duration,
}

#[derive(Default)]
struct Directory {
    nodes: HashMap<String, NodeEntry>,
    /// Per remote-only plugin: the encoded registration applied to the registry.
    applied: HashMap<String, Vec<u8>>,
    /// Probes a node missed in a row.
    strikes: HashMap<String, u32>,
    /// When a re-announcement was last asked for (at most one a second).
    asked: Option<Instant>,
    /// Per remote-only plugin: items of the applied registration the registry rejected.
    rejected: HashMap<String, Vec<hearth_proto::v1::RejectedItem>>,
    /// Per node: the boot its current boot replaced. If that boot speaks again, two
    /// processes run under one node name.
    displaced: HashMap<String, Displaced>,
}

/// A node's boot replaced by a newer one (see [`Directory::displaced`]).
struct Displaced {
    boot: String,
    /// When it was replaced or last heard from.
    seen: Instant,
    /// When the duplicate name was last logged (every 10 s at most).
    warned: Option<Instant>,
}

impl Directory {
    /// Whether `boot` of `node` is a boot the current one replaced that is still
    /// speaking: a second process with the same node name. Logs it (every 10 s at
    /// most); the current boot is kept, so the node does not flip between the two.
    fn is_duplicate(&mut self, node: &str, boot: &str) -> bool {
        let current = self.nodes.get(node).map(|e| e.boot.clone());
        let Some(d) = self.displaced.get_mut(node) else {
            return false;
        };
        if d.boot != boot || d.seen.elapsed() > NODE_SILENT || current.is_none() {
            return false;
        }
        d.seen = Instant::now();
        if d.warned
            .is_none_or(|t| t.elapsed() > Duration::from_secs(10))
        {
            d.warned = Some(Instant::now());
            tracing::error!(
                node,
                "NATS: two plugin hosts run as node {node} (boots {} and {boot}); brokers cannot tell their calls and probes apart: give each its own --node-name. Keeping the newer one",
                current.unwrap_or_default()
            );
        }
        true
    }
}

/// The broker's NATS link to plugin hosts (see the module docs). One per broker.
pub struct Hub {
    client: async_nats::Client,
    subjects: Subjects,
    /// This broker's id on the bus (`[nats] name`).
    id: String,
    supervisor: Arc<Supervisor>,
    policies: BTreeMap<String, NodePolicy>,
    calls: Mutex<HashMap<u64, Slot>>,
    next_call_id: AtomicU64,
    directory: Mutex<Directory>,
    /// Grows with each change of the directory's plugin lists.
    changed: watch::Sender<u64>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("id", &self.id).finish()
    }
}

/// Cancels a remote call whose caller stopped waiting (timeout, dropped future).
struct CallGuard<'a> {
    hub: &'a Hub,
    call_id: u64,
    done: bool,
    reason: &'static str,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.hub.calls.lock().unwrap().remove(&self.call_id);
        if self.done {
            return;
        }
        let cancel = encode(&NodeCancel {
            broker: self.hub.id.clone(),
            call_id: self.call_id,
            reason: self.reason.into(),
        });
        let (client, subject) = (self.hub.client.clone(), self.hub.subjects.cancel());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = client.publish(subject, cancel).await;
            });
        }
    }
}

impl Hub {
    /// Connects to NATS with `config`, subscribes to replies, announcements and
    /// heartbeats, asks running nodes to announce themselves, and starts the probe and
    /// expiry tasks. Errors: [`NatsError`] naming what failed (config, login, TLS,
    /// server).
    pub async fn start(
        config: &NatsConfig,
        supervisor: Arc<Supervisor>,
    ) -> Result<Arc<Hub>, NatsError> {
        let client = crate::nats::connect(config).await?;
        Hub::start_with(client, config, supervisor).await
    }

    /// [`Hub::start`] on a connected `client`.
    pub async fn start_with(
        client: async_nats::Client,
        config: &NatsConfig,
        supervisor: Arc<Supervisor>,
    ) -> Result<Arc<Hub>, NatsError> {
        let id = config
            .name
            .clone()
            .unwrap_or_else(crate::nats::default_name);
        let subjects = Subjects::new(&config.subject_prefix);
        let sub_err = |what: &str, e: async_nats::SubscribeError| NatsError::Connect {
            url: config.servers().join(", "),
            detail: format!("subscribing to {what}: {e}"),
        };
        let replies = client
            .subscribe(subjects.replies(&id))
            .await
            .map_err(|e| sub_err("replies", e))?;
        let announces = client
            .subscribe(subjects.announce("*"))
            .await
            .map_err(|e| sub_err("announcements", e))?;
        let heartbeats = client
            .subscribe(subjects.heartbeat("*"))
            .await
            .map_err(|e| sub_err("heartbeats", e))?;
        let hub = Arc::new(Hub {
            client,
            subjects,
            id,
            supervisor,
            policies: config.nodes.clone(),
            calls: Mutex::new(HashMap::new()),
            next_call_id: AtomicU64::new(1),
            directory: Mutex::new(Directory::default()),
            changed: watch::Sender::new(0),
        });
        tokio::spawn(hub.clone().demux(replies));
        tokio::spawn(hub.clone().listen(announces, heartbeats));
        tokio::spawn(hub.clone().probe_loop());
        tokio::spawn(hub.clone().expiry_loop());
        hub.ask_for_announcements().await;
        tracing::info!(broker = %hub.id, "NATS: connected; asking plugin hosts to announce themselves");
        Ok(hub)
    }

    /// The NATS client (host-call relay, tests).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The deployment's subjects.
    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }

    /// This broker's id on the bus.
    pub fn id(&self) -> &str {
        &self.id
    }

    async fn ask_for_announcements(&self) {
        self.directory.lock().unwrap().asked = Some(Instant::now());
        let msg = encode(&NodeDiscover {
            broker: self.id.clone(),
        });
        if let Err(e) = self.client.publish(self.subjects.discover(), msg).await {
            tracing::warn!("NATS: asking nodes to announce themselves failed: {e}");
        }
    }

    /// How many plugin hosts this broker hears from.
    pub fn node_count(&self) -> usize {
        self.directory.lock().unwrap().nodes.len()
    }

    /// Whether any node serves `plugin` now.
    pub fn serves(&self, plugin: &str) -> bool {
        self.directory
            .lock()
            .unwrap()
            .nodes
            .values()
            .any(|n| n.plugins.iter().any(|p| p.name == plugin))
    }

    /// The nodes serving `plugin`, by node name.
    pub fn instances(&self, plugin: &str) -> Vec<Instance> {
        let dir = self.directory.lock().unwrap();
        let mut out: Vec<Instance> = dir
            .nodes
            .iter()
            .filter_map(|(node, e)| {
                let p = e.plugins.iter().find(|p| p.name == plugin)?;
                Some(Instance {
                    node: node.clone(),
                    plugin: p.clone(),
                    last_seen: e.last_seen.elapsed(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.node.cmp(&b.node));
        out
    }

    /// Every plugin some node runs (serving, restarting, or failed there), sorted.
    pub fn plugin_names(&self) -> Vec<String> {
        let dir = self.directory.lock().unwrap();
        let mut names: Vec<String> = dir
            .nodes
            .values()
            .flat_map(|e| e.loaded.iter().map(|p| p.name.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The nodes that run `plugin` but where it is not ready now (restarting).
    pub fn restarting_on(&self, plugin: &str) -> Vec<String> {
        let dir = self.directory.lock().unwrap();
        let mut nodes: Vec<String> = dir
            .nodes
            .iter()
            .filter(|(_, e)| e.offered().any(|p| p.name == plugin && !p.ready))
            .map(|(n, _)| n.clone())
            .collect();
        nodes.sort();
        nodes
    }

    /// The nodes where `plugin` is loaded but offers nothing (it failed, stopped, or
    /// never registered there): `(node, state as the node says, reason)`, by node.
    pub fn down_on(&self, plugin: &str) -> Vec<(String, hearth_proto::v1::PluginState, String)> {
        let dir = self.directory.lock().unwrap();
        let mut out: Vec<_> = dir
            .nodes
            .iter()
            .filter_map(|(node, e)| {
                let p = e
                    .loaded
                    .iter()
                    .find(|p| p.name == plugin && p.register.is_none())?;
                let state = hearth_proto::v1::PluginState::try_from(p.state)
                    .unwrap_or(hearth_proto::v1::PluginState::Failed);
                Some((node.clone(), state, p.reason.clone()))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Items of `plugin`'s registration (as offered from its newest node) this broker
    /// rejected, e.g. a tool name a local plugin registered first.
    pub fn rejected(&self, plugin: &str) -> Vec<hearth_proto::v1::RejectedItem> {
        let dir = self.directory.lock().unwrap();
        dir.rejected.get(plugin).cloned().unwrap_or_default()
    }

    /// `(call_timeout_s, max_total_s)` of `plugin` as its newest announcement says.
    pub fn timeouts(&self, plugin: &str) -> Option<(f64, f64)> {
        let dir = self.directory.lock().unwrap();
        newest(&dir.nodes, plugin).map(|(_, _, p)| (p.call_timeout_s, p.max_total_s))
    }

    /// The capabilities plugin `plugin` of node `node` holds here: what its manifest
    /// asks for, cut by `[nats.nodes.<node>] capabilities`; `None` when the node does
    /// not (or may not) serve it.
    pub fn capabilities(&self, node: &str, plugin: &str) -> Option<Vec<String>> {
        let dir = self.directory.lock().unwrap();
        let p = dir
            .nodes
            .get(node)?
            .loaded
            .iter()
            .find(|p| p.name == plugin)?;
        Some(self.policy(node).grant(&p.capabilities))
    }

    /// `[nats.nodes.<node>]`, else `[nats.nodes."*"]`, else no restriction.
    fn policy(&self, node: &str) -> NodePolicy {
        self.policies
            .get(node)
            .or_else(|| self.policies.get("*"))
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until some node serves `plugin`, at most until `until`; true if one does.
    pub async fn wait_for_instance(&self, plugin: &str, until: tokio::time::Instant) -> bool {
        let mut rx = self.changed.subscribe();
        loop {
            if self.serves(plugin) {
                return true;
            }
            if tokio::time::timeout_at(until, rx.changed()).await.is_err() {
                return self.serves(plugin);
            }
        }
    }

    /// Calls `tool` of `plugin` on one of its nodes. Same contract as
    /// [`Session::invoke`](crate::supervisor::session::Session::invoke): the result, or
    /// [`InvokeError::NotSent`] (no node subscribed: no-responders; or the node that got
    /// it is not ready) or [`InvokeError::Refused`] (a node cannot run it: a tool its
    /// version lacks) — both safe to send again — or [`InvokeError::Failed`] (the call reached a node and failed there,
    /// timed out, or its node was lost; errors name the node).
    #[allow(clippy::too_many_arguments)]
    pub async fn invoke(
        &self,
        plugin: &str,
        tool: &str,
        args_json: String,
        sender: Option<Sender>,
        timeout: Duration,
        max_total: Duration,
        progress: Option<ProgressSink>,
        attempt: u32,
    ) -> Result<ToolResult, InvokeError> {
        let build = session::invoke_tool(tool, args_json, sender, timeout);
        let what = Target::Tool(tool.into());
        let subject = self.subjects.tool_call(plugin, tool);
        let call = Call {
            plugin,
            what: what.clone(),
            subject,
            texts: None,
            progress,
            timeout,
            max_total,
            attempt,
        };
        match self.request(call, build).await? {
            Reply::Tool(r) => Ok(r),
            _ => Err(InvokeError::Failed(CallError::PluginGone {
                plugin: plugin.into(),
                target: what,
                reason: "answered a tool call with another kind of result".into(),
            })),
        }
    }

    /// Runs stage hook `hook_id` of `plugin` on one of its nodes; see [`Hub::invoke`].
    pub async fn run_stage(
        &self,
        plugin: &str,
        stage: Stage,
        hook_id: &str,
        context: StageContext,
        timeout: Duration,
        attempt: u32,
    ) -> Result<StageResult, InvokeError> {
        let what = Target::Hook {
            stage,
            hook_id: hook_id.into(),
        };
        let build = session::run_stage(stage, hook_id, context, timeout);
        let call = Call {
            plugin,
            what: what.clone(),
            subject: self.subjects.stage_call(plugin),
            texts: None,
            progress: None,
            timeout,
            max_total: timeout,
            attempt,
        };
        match self.request(call, build).await? {
            Reply::Stage(r) => Ok(*r),
            _ => Err(InvokeError::Failed(CallError::PluginGone {
                plugin: plugin.into(),
                target: what,
                reason: "answered a stage hook with another kind of result".into(),
            })),
        }
    }

    /// Delivers `event` to `plugin` on one of its nodes; each `Reply` text goes to
    /// `texts` as it arrives. See [`Hub::invoke`].
    pub async fn handle_event(
        &self,
        plugin: &str,
        event: HandleEvent,
        texts: mpsc::UnboundedSender<String>,
        timeout: Duration,
        max_total: Duration,
        attempt: u32,
    ) -> Result<EventDone, InvokeError> {
        let (what, build) = session::handle_event(event, timeout);
        let call = Call {
            plugin,
            what: what.clone(),
            subject: self.subjects.event_call(plugin),
            texts: Some(texts),
            progress: None,
            timeout,
            max_total,
            attempt,
        };
        match self.request(call, build).await? {
            Reply::Event(r) => Ok(r),
            _ => Err(InvokeError::Failed(CallError::PluginGone {
                plugin: plugin.into(),
                target: what,
                reason: "answered an event with another kind of result".into(),
            })),
        }
    }

    /// Publishes one call and waits for its outcome (see [`Hub::invoke`]).
    async fn request(
        &self,
        call: Call<'_>,
        build: impl FnOnce(u64) -> Msg,
    ) -> Result<Reply, InvokeError> {
        let Call {
            plugin,
            what,
            subject,
            texts,
            progress,
            timeout,
            max_total,
            attempt,
        } = call;
        if !self.connected() {
            return Err(InvokeError::NotSent(
                "this broker is not connected to NATS right now".into(),
            ));
        }
        let call_id = self.next_call_id.fetch_add(1, Ordering::Relaxed);
        tracing::Span::current().record("call_id", call_id);
        let payload = encode(&NodeCall {
            broker: self.id.clone(),
            attempt,
            msg: Some(HostMessage {
                msg: Some(build(call_id)),
            }),
        });
        let max = self.client.max_payload();
        if payload.len() > max {
            return Err(InvokeError::Failed(CallError::TooLarge {
                plugin: plugin.into(),
                target: what,
                bytes: payload.len(),
                max,
            }));
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.calls.lock().unwrap().insert(
            call_id,
            Slot {
                tx,
                node: None,
                buf: Vec::new(),
            },
        );
        let mut guard = CallGuard {
            hub: self,
            call_id,
            done: false,
            reason: "caller went away",
        };
        if let Err(e) = self
            .client
            .publish_with_reply(subject, self.subjects.reply(&self.id, call_id), payload)
            .await
        {
            guard.done = true;
            return Err(InvokeError::NotSent(format!(
                "publishing to NATS failed: {e}"
            )));
        }
        let started = tokio::time::Instant::now();
        let hard_stop = started + max_total.max(timeout);
        let mut deadline = started + timeout;
        let ack_deadline = started + ACK_TIMEOUT;
        let mut node: Option<String> = None;
        let on = |node: &Option<String>| match node {
            Some(n) => format!("{plugin} on node {n}"),
            None => plugin.to_string(),
        };
        loop {
            let wake = if node.is_none() {
                deadline.min(ack_deadline)
            } else {
                deadline
            };
            let event = match tokio::time::timeout_at(wake, rx.recv()).await {
                Ok(Some(event)) => event,
                Ok(None) => {
                    return Err(InvokeError::Failed(CallError::PluginGone {
                        plugin: on(&node),
                        target: what,
                        reason: "lost its reply channel".into(),
                    }))
                }
                Err(_)
                    if node.is_none()
                        && tokio::time::Instant::now() >= ack_deadline
                        && ack_deadline < deadline =>
                {
                    guard.reason = "no answer";
                    return Err(InvokeError::Failed(CallError::PluginGone {
                        plugin: plugin.into(),
                        target: what,
                        reason: format!(
                            "got no answer from any node within {} ms (not sent again: a node may have taken it)",
                            ACK_TIMEOUT.as_millis()
                        ),
                    }));
                }
                Err(_) => {
                    guard.reason = "timeout";
                    return Err(InvokeError::Failed(CallError::Timeout {
                        plugin: on(&node),
                        target: what,
                        after_ms: (deadline - started).as_millis() as u64,
                    }));
                }
            };
            let reply = match event {
                Event::NoResponders => {
                    guard.done = true;
                    return Err(InvokeError::NotSent(format!(
                        "no plugin host serves plugin {plugin} right now"
                    )));
                }
                Event::Lost { node, why } => {
                    guard.done = true;
                    return Err(InvokeError::Failed(CallError::PluginGone {
                        plugin: format!("{plugin} on node {node}"),
                        target: what,
                        reason: why,
                    }));
                }
                Event::Reply(r) => *r,
            };
            if node.is_none() && !reply.node.is_empty() {
                node = Some(reply.node.clone());
            }
            match reply.msg {
                None | Some(node_reply::Msg::Accepted(_)) | Some(node_reply::Msg::Chunk(_)) => {}
                Some(node_reply::Msg::NotRun(n)) => {
                    guard.done = true;
                    let reason = format!("node {} did not run it: {}", reply.node, n.reason);
                    return Err(if n.not_ready {
                        InvokeError::NotSent(reason)
                    } else {
                        InvokeError::Refused(reason)
                    });
                }
                Some(node_reply::Msg::Failed(f)) => {
                    guard.done = true;
                    let plugin = on(&node);
                    return Err(InvokeError::Failed(match f.kind() {
                        failed::Kind::Timeout => CallError::Timeout {
                            plugin,
                            target: what,
                            after_ms: f.after_ms,
                        },
                        _ => CallError::PluginGone {
                            plugin,
                            target: what,
                            reason: f.reason,
                        },
                    }));
                }
                Some(node_reply::Msg::Plugin(m)) => match m.msg {
                    Some(PluginMsg::Progress(p)) => {
                        deadline = (tokio::time::Instant::now() + timeout)
                            .min(hard_stop)
                            .max(deadline);
                        if let Some(sink) = &progress {
                            let (progress, total) = if p.progress > 0.0 || p.total > 0.0 {
                                (p.progress.max(0.0), p.total.max(0.0))
                            } else if p.fraction >= 0.0 {
                                (p.fraction, 1.0)
                            } else {
                                (0.0, 0.0)
                            };
                            let _ = sink.send(ToolProgress {
                                message: p.message,
                                progress,
                                total,
                            });
                        }
                    }
                    Some(PluginMsg::Reply(r)) => {
                        deadline = (tokio::time::Instant::now() + timeout)
                            .min(hard_stop)
                            .max(deadline);
                        if let Some(texts) = &texts {
                            let _ = texts.send(r.text);
                        }
                    }
                    Some(PluginMsg::ToolResult(r)) => {
                        guard.done = true;
                        return Ok(Reply::Tool(r));
                    }
                    Some(PluginMsg::StageResult(r)) => {
                        guard.done = true;
                        return Ok(Reply::Stage(Box::new(r)));
                    }
                    Some(PluginMsg::EventDone(r)) => {
                        guard.done = true;
                        return Ok(Reply::Event(r));
                    }
                    Some(_) | None => {}
                },
            }
        }
    }

    /// Routes every message on this broker's reply subjects to its call.
    async fn demux(self: Arc<Self>, mut sub: async_nats::Subscriber) {
        while let Some(msg) = sub.next().await {
            let Some(call_id) = Subjects::reply_call_id(&msg.subject) else {
                continue;
            };
            if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                self.deliver(call_id, Event::NoResponders);
                continue;
            }
            match decode::<NodeReply>("node reply", &msg.payload) {
                Ok(reply) => self.on_reply(call_id, reply),
                Err(e) => tracing::warn!(call_id, "NATS: {e}; dropped"),
            }
        }
        tracing::error!("NATS: the reply subscription ended; remote calls cannot be answered");
    }

    fn on_reply(&self, call_id: u64, reply: NodeReply) {
        let whole = {
            let mut calls = self.calls.lock().unwrap();
            let Some(slot) = calls.get_mut(&call_id) else {
                return; // timed out or cancelled meanwhile
            };
            if slot.node.is_none() && !reply.node.is_empty() {
                slot.node = Some((reply.node.clone(), reply.boot.clone()));
            }
            let Some(node_reply::Msg::Chunk(chunk)) = &reply.msg else {
                let _ = slot.tx.send(Event::Reply(Box::new(reply)));
                return;
            };
            if slot.buf.len() + chunk.data.len() > hearth_proto::MAX_MESSAGE_BYTES + 64 * 1024 {
                let _ = slot.tx.send(Event::Lost {
                    node: reply.node.clone(),
                    why: format!(
                        "sent a reply larger than {} MiB",
                        hearth_proto::MAX_MESSAGE_BYTES >> 20
                    ),
                });
                return;
            }
            if slot.buf.is_empty() {
                // The node has the call: its first piece counts as `Accepted` (a large
                // result may take longer than the ack timeout to arrive whole).
                let _ = slot.tx.send(Event::Reply(Box::new(NodeReply {
                    node: reply.node.clone(),
                    boot: reply.boot.clone(),
                    msg: Some(node_reply::Msg::Accepted(Default::default())),
                })));
            }
            slot.buf.extend_from_slice(&chunk.data);
            if !chunk.last {
                return;
            }
            std::mem::take(&mut slot.buf)
        };
        match decode::<NodeReply>("chunked node reply", &whole) {
            Ok(r) => self.deliver(call_id, Event::Reply(Box::new(r))),
            Err(e) => self.deliver(
                call_id,
                Event::Lost {
                    node: reply.node,
                    why: format!("sent an {e}"),
                },
            ),
        }
    }

    fn deliver(&self, call_id: u64, event: Event) {
        if let Some(slot) = self.calls.lock().unwrap().get(&call_id) {
            let _ = slot.tx.send(event);
        }
    }

    /// Fails every call in flight on `node` (of boot `boot`, or any boot) with `why`.
    fn fail_node_calls(&self, node: &str, boot: Option<&str>, why: &str) -> usize {
        let calls = self.calls.lock().unwrap();
        let mut n = 0;
        for slot in calls.values() {
            if let Some((slot_node, slot_boot)) = &slot.node {
                if slot_node == node && boot.is_none_or(|b| b == slot_boot) {
                    let _ = slot.tx.send(Event::Lost {
                        node: node.to_string(),
                        why: format!("was lost ({why})"),
                    });
                    n += 1;
                }
            }
        }
        n
    }

    /// Takes announcements and heartbeats into the directory.
    async fn listen(
        self: Arc<Self>,
        mut announces: async_nats::Subscriber,
        mut heartbeats: async_nats::Subscriber,
    ) {
        loop {
            tokio::select! {
                Some(msg) = announces.next() => match decode::<NodeAnnounce>("announcement", &msg.payload) {
                    Ok(a) => self.on_announce(a),
                    Err(e) => tracing::warn!(subject = %msg.subject, "NATS: {e}; ignored"),
                },
                Some(msg) = heartbeats.next() => match decode::<NodeHeartbeat>("heartbeat", &msg.payload) {
                    Ok(h) => self.on_heartbeat(h).await,
                    Err(e) => tracing::warn!(subject = %msg.subject, "NATS: {e}; ignored"),
                },
                else => break,
            }
        }
        tracing::error!(
            "NATS: the announcement subscriptions ended; the plugin host directory is frozen"
        );
    }

    fn on_announce(&self, a: NodeAnnounce) {
        let ours = hearth_proto::PROTOCOL_VERSION.split('.').next();
        if a.protocol_version.split('.').next() != ours {
            tracing::error!(node = %a.node, "NATS: node speaks protocol {} and this broker {}; its plugins are ignored", a.protocol_version, hearth_proto::PROTOCOL_VERSION);
            return;
        }
        let policy = self.policy(&a.node);
        let mut restarted = None;
        {
            let mut dir = self.directory.lock().unwrap();
            if a.leaving {
                if dir.nodes.get(&a.node).is_some_and(|e| e.boot == a.boot) {
                    dir.nodes.remove(&a.node);
                    tracing::info!(node = %a.node, "NATS: node left");
                } else if dir.displaced.get(&a.node).is_some_and(|d| d.boot == a.boot) {
                    dir.displaced.remove(&a.node);
                }
            } else {
                if dir.is_duplicate(&a.node, &a.boot) {
                    return;
                }
                let old = dir.nodes.get(&a.node);
                if old.is_some_and(|o| o.boot == a.boot && o.seq > a.seq) {
                    return; // an older announcement overtaken by a newer one
                }
                if let Some(o) = old.filter(|o| o.boot != a.boot) {
                    restarted = Some(o.boot.clone());
                }
                if let Some(old_boot) = &restarted {
                    dir.displaced.insert(
                        a.node.clone(),
                        Displaced {
                            boot: old_boot.clone(),
                            seen: Instant::now(),
                            warned: None,
                        },
                    );
                }
                let old = dir.nodes.get(&a.node);
                if old.is_none() {
                    tracing::info!(node = %a.node, version = %a.version, plugins = a.plugins.len(), "NATS: node joined");
                }
                let previous: Vec<RemotePlugin> = old.map(|o| o.loaded.clone()).unwrap_or_default();
                let loaded: Vec<RemotePlugin> = a
                    .plugins
                    .into_iter()
                    .filter(|p| {
                        let ok = policy.allows_plugin(&p.name) && crate::manifest::check_name(&p.name).is_ok();
                        if !ok {
                            tracing::warn!(node = %a.node, plugin = %p.name, "NATS: the node may not serve this plugin ([nats.nodes.{}] plugins); ignored", a.node);
                        }
                        ok
                    })
                    .collect();
                // A plugin restarting on the node keeps its last registration.
                let loaded: Vec<RemotePlugin> = loaded
                    .into_iter()
                    .map(|mut p| {
                        let restarting = matches!(
                            hearth_proto::v1::PluginState::try_from(p.state),
                            Ok(hearth_proto::v1::PluginState::Starting
                                | hearth_proto::v1::PluginState::Crashed
                                | hearth_proto::v1::PluginState::Backoff
                                | hearth_proto::v1::PluginState::Building)
                        );
                        if p.register.is_none() && restarting {
                            p.register = previous
                                .iter()
                                .find(|q| q.name == p.name)
                                .and_then(|q| q.register.clone());
                        }
                        p
                    })
                    .collect();
                let plugins = loaded.iter().filter(|p| p.ready).cloned().collect();
                dir.nodes.insert(
                    a.node.clone(),
                    NodeEntry {
                        boot: a.boot.clone(),
                        seq: a.seq,
                        last_seen: Instant::now(),
                        announced: Instant::now(),
                        plugins,
                        loaded,
                    },
                );
                dir.strikes.remove(&a.node);
            }
        }
        if let Some(old_boot) = restarted {
            let n = self.fail_node_calls(&a.node, Some(&old_boot), "the node restarted");
            tracing::warn!(node = %a.node, calls = n, "NATS: node restarted");
        }
        // A node that leaves lets its calls in flight finish; if it exits first, the
        // probes fail them.
        self.sync_registry();
    }

    async fn on_heartbeat(&self, h: NodeHeartbeat) {
        let ask = {
            let mut dir = self.directory.lock().unwrap();
            let stale = match dir.nodes.get_mut(&h.node) {
                Some(e) if e.boot == h.boot => {
                    e.last_seen = Instant::now();
                    e.seq < h.seq
                }
                _ => !dir.is_duplicate(&h.node, &h.boot),
            };
            let recently = dir
                .asked
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1));
            stale && !recently
        };
        if ask {
            tracing::debug!(node = %h.node, "NATS: heartbeat of an announcement not seen; asking again");
            self.ask_for_announcements().await;
        }
    }

    /// Probes the nodes with calls in flight; fails the calls of lost ones.
    async fn probe_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let busy: HashSet<(String, String)> = self
                .calls
                .lock()
                .unwrap()
                .values()
                .filter_map(|s| s.node.clone())
                .collect();
            let probes = busy.into_iter().map(|(node, boot)| {
                let hub = self.clone();
                async move { hub.probe(&node, &boot).await }
            });
            futures_util::future::join_all(probes).await;
        }
    }

    async fn probe(&self, node: &str, boot: &str) {
        if !self.connected() {
            // Our own connection is down: the node may be fine, but its answers to
            // calls in flight are lost (core NATS keeps nothing for a disconnected
            // client). Two rounds like that fail them, blaming the right side.
            let lost = {
                let mut dir = self.directory.lock().unwrap();
                let strikes = dir.strikes.entry(node.to_string()).or_default();
                *strikes += 1;
                *strikes >= 2
            };
            if lost {
                let why =
                    "this broker lost its NATS connection, so the node's answer cannot reach it";
                let n = self.fail_node_calls(node, Some(boot), why);
                tracing::warn!(node, calls = n, "NATS: {why}");
                self.directory.lock().unwrap().strikes.remove(node);
            }
            return;
        }
        let request = async_nats::Request::new()
            .payload(bytes::Bytes::new())
            .timeout(Some(PROBE_TIMEOUT));
        let outcome = self
            .client
            .send_request(self.subjects.ping(node), request)
            .await;
        let why = match outcome {
            Ok(msg) => match decode::<NodePong>("pong", &msg.payload) {
                Ok(p) if p.boot != boot => Some("the node restarted".to_string()),
                _ => {
                    self.directory.lock().unwrap().strikes.remove(node);
                    None
                }
            },
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                Some("its NATS connection is gone".to_string())
            }
            Err(e) if e.kind() == async_nats::RequestErrorKind::TimedOut => {
                let mut dir = self.directory.lock().unwrap();
                let strikes = dir.strikes.entry(node.to_string()).or_default();
                *strikes += 1;
                (*strikes >= 2).then(|| {
                    format!(
                        "no answer to probes for {} ms",
                        2 * PROBE_TIMEOUT.as_millis()
                    )
                })
            }
            Err(e) => {
                tracing::debug!(node, "NATS: probe failed: {e}");
                None
            }
        };
        if let Some(why) = why {
            let n = self.fail_node_calls(node, Some(boot), &why);
            tracing::warn!(node, calls = n, "NATS: node lost: {why}");
            let removed = {
                let mut dir = self.directory.lock().unwrap();
                dir.strikes.remove(node);
                match dir.nodes.get(node) {
                    Some(e) if e.boot == boot => dir.nodes.remove(node).is_some(),
                    _ => false,
                }
            };
            if removed {
                self.sync_registry();
            }
        }
    }

    /// Whether this broker's NATS connection is up.
    fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Drops nodes not heard from for [`NODE_SILENT`]. While this broker's own
    /// connection is down nothing is dropped (silence is ours, not the nodes'); once
    /// it is back, each node has [`NODE_SILENT`] to be heard again.
    async fn expiry_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut was_connected = true;
        loop {
            tick.tick().await;
            let connected = self.connected();
            if !connected {
                was_connected = false;
                continue;
            }
            if !was_connected {
                was_connected = true;
                for e in self.directory.lock().unwrap().nodes.values_mut() {
                    e.last_seen = Instant::now();
                }
                self.ask_for_announcements().await;
            }
            let gone: Vec<(String, String)> = {
                let mut dir = self.directory.lock().unwrap();
                let gone: Vec<_> = dir
                    .nodes
                    .iter()
                    .filter(|(_, e)| e.last_seen.elapsed() > NODE_SILENT)
                    .map(|(n, e)| (n.clone(), e.boot.clone()))
                    .collect();
                for (n, _) in &gone {
                    dir.nodes.remove(n);
                }
                gone
            };
            for (node, boot) in &gone {
                let n = self.fail_node_calls(node, Some(boot), "no heartbeat for 3 s");
                tracing::warn!(node = %node, calls = n, "NATS: node silent for {} s; dropped", NODE_SILENT.as_secs());
            }
            // Also re-applies remote registrations a local plugin of the same name
            // shadowed, once that plugin is unloaded.
            self.sync_registry();
        }
    }

    /// Offers each remote-only plugin's newest registration in the registry, and
    /// removes the plugins no node serves any more.
    fn sync_registry(&self) {
        let registry: &Arc<Registry> = self.supervisor.registry();
        let mut defs = Vec::new();
        {
            let mut dir = self.directory.lock().unwrap();
            let names: HashSet<String> = dir
                .nodes
                .values()
                .flat_map(|e| e.offered().map(|p| p.name.clone()))
                .collect();
            let mut remote_only = Vec::new();
            for name in &names {
                if self.supervisor.plugin(name).is_some() {
                    dir.applied.remove(name);
                    dir.rejected.remove(name);
                    continue;
                }
                remote_only.push(name.clone());
                let Some((node, _, p)) = newest(&dir.nodes, name) else {
                    continue;
                };
                let register = p.register.clone().unwrap_or_default();
                let encoded = prost::Message::encode_to_vec(&register);
                if dir.applied.get(name) == Some(&encoded) {
                    continue;
                }
                let mut rejected = registry
                    .replace_plugin_tools(name, &register.tools, false)
                    .rejected;
                rejected.extend(registry.replace_plugin_hooks(name, &register.stages));
                rejected.extend(registry.replace_plugin_triggers(
                    name,
                    &register.triggers,
                    register.inject.clone(),
                ));
                for item in &rejected {
                    tracing::error!(plugin = %name, node = %node, item = %item.name, "remote {} rejected: {}", item.kind, item.reason);
                }
                tracing::info!(plugin = %name, node = %node, tools = register.tools.len(), "NATS: remote plugin registered");
                dir.rejected.insert(name.clone(), rejected);
                defs.push((name.clone(), register.config_defs.clone()));
                dir.applied.insert(name.clone(), encoded);
            }
            let stale: Vec<String> = dir
                .applied
                .keys()
                .filter(|n| !names.contains(*n))
                .cloned()
                .collect();
            for name in stale {
                dir.applied.remove(&name);
                dir.rejected.remove(&name);
                if self.supervisor.plugin(&name).is_none() {
                    registry.remove_plugin(&name);
                    tracing::info!(plugin = %name, "NATS: no plugin host serves this plugin any more");
                }
            }
            registry.set_remote_plugins(remote_only);
        }
        if let Some(settings) = self.supervisor.settings_store().cloned() {
            for (plugin, defs) in defs.into_iter().filter(|(_, d)| !d.is_empty()) {
                let settings = settings.clone();
                tokio::spawn(async move {
                    for def in defs {
                        let key = def.key.clone();
                        let outcome = match crate::storage::ConfigDef::from_wire(def) {
                            Ok(d) => settings
                                .register_def(&crate::storage::Scope::Plugin(plugin.clone()), d)
                                .await
                                .map_err(|e| e.to_string()),
                            Err(e) => Err(e),
                        };
                        if let Err(e) = outcome {
                            tracing::error!(plugin = %plugin, key = %key, "remote config_def rejected: {e}");
                        }
                    }
                });
            }
        }
        // Instances may have changed even when registrations did not (a node joined).
        self.changed.send_modify(|r| *r += 1);
    }
}

/// The node whose announcement of `plugin` is the newest: `(node, entry, plugin)`.
fn newest<'a>(
    nodes: &'a HashMap<String, NodeEntry>,
    plugin: &str,
) -> Option<(&'a str, &'a NodeEntry, &'a RemotePlugin)> {
    nodes
        .iter()
        .filter_map(|(n, e)| Some((n.as_str(), e, e.offered().find(|p| p.name == plugin)?)))
        .max_by(|a, b| a.1.announced.cmp(&b.1.announced).then_with(|| b.0.cmp(a.0)))
}

/// One remote call's parameters (see [`Hub::request`]).
struct Call<'a> {
    plugin: &'a str,
    what: Target,
    subject: String,
    texts: Option<mpsc::UnboundedSender<String>>,
    progress: Option<ProgressSink>,
    timeout: Duration,
    max_total: Duration,
    attempt: u32,
}
