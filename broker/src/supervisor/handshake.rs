//! The `Attach` session from the broker's side: token check, `Hello` and `Register`
//! within the startup timeout, registration into the registry, the heartbeat, and
//! the message loop until the stream ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_proto::v1::{
    host_message::Msg as HostMsg, plugin_message::Msg as PluginMsg, HostMessage, Ping,
    PluginMessage, Registered, Rejected, ToolRegistration,
};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use super::batch;
use super::plugin::{Control, Origin, Plugin};
use super::session::{Outbound, Reply, Session};
use super::Supervisor;

/// Compares secrets (tokens) without an early exit.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Features this broker implements, announced in `Registered.features` when the
/// plugin's `Hello` lists them too.
const FEATURES: &[&str] = &["cancel", "progress", "register_tool", "batch"];

impl Supervisor {
    /// Accepts a plugin's `Attach`: checks `token` against the one-time attach tokens
    /// (`hearth plugins attach-token`; `peer_pid` is the attaching process's, from the
    /// socket's peer credentials), else against the spawn tokens of the plugins'
    /// processes, and starts the session task. Errors: UNAUTHENTICATED for a
    /// missing, wrong, stale, expired or already used token.
    pub fn attach(
        self: &Arc<Self>,
        token: &str,
        inbound: Streaming<PluginMessage>,
        peer_pid: Option<u32>,
    ) -> Result<batch::Outbound, Status> {
        if self.is_attach_token(token) {
            let name = self.redeem_attach_token(token)?;
            let (plugin, generation) = self.admit_attached(&name, token, peer_pid);
            tracing::info!(plugin = %name, pid = peer_pid.unwrap_or(0), generation, "a process started by hand attaches");
            return Ok(self.start_session(plugin, generation, Origin::Attached, inbound));
        }
        let found = self.plugins.read().unwrap().iter().find_map(|p| {
            let mut s = p.status.lock().unwrap();
            let i = s
                .instances
                .iter_mut()
                .find(|i| !i.token.is_empty() && same_secret(&i.token, token))?;
            if i.connected {
                return Some(Err(Status::unauthenticated(format!(
                    "plugin {}: this session token already has a session",
                    p.name()
                ))));
            }
            i.connected = true;
            Some(Ok((p.clone(), i.generation)))
        });
        let (plugin, generation) = match found {
            Some(r) => r?,
            None => {
                return Err(Status::unauthenticated(
                    "x-hearth-token does not match any plugin the broker started (wrong or stale token)",
                ))
            }
        };
        Ok(self.start_session(plugin, generation, Origin::Spawned, inbound))
    }

    /// Starts the session task of instance `generation` of `plugin`; returns the
    /// stream of messages to the plugin.
    fn start_session(
        self: &Arc<Self>,
        plugin: Arc<Plugin>,
        generation: u64,
        origin: Origin,
        inbound: Streaming<PluginMessage>,
    ) -> batch::Outbound {
        let (tx, rx) = mpsc::channel(1024);
        let rx = super::trace::outbound(plugin.name(), rx);
        let batching = batch::Batching::default();
        let outbound = batch::Outbound::new(rx, batching.clone());
        let sup = self.clone();
        tokio::spawn(async move {
            let refused = sup
                .clone()
                .session_task(plugin.clone(), generation, origin, inbound, tx, batching)
                .await;
            if let Some(why) = refused {
                let _ = plugin.control.send(Control::Refused { generation, why });
            }
            if origin == Origin::Attached {
                let _ = plugin.control.send(Control::SessionEnded(generation));
                if plugin.is_adhoc() {
                    // Its task ends once no attached process is left; then it goes.
                    plugin.join().await;
                    sup.forget(&plugin);
                }
            }
        });
        outbound
    }

    /// Runs one session: handshake, registration, the message loop. Returns why the
    /// session was refused before it registered, if it was.
    async fn session_task(
        self: Arc<Self>,
        plugin: Arc<Plugin>,
        generation: u64,
        origin: Origin,
        mut inbound: Streaming<PluginMessage>,
        out: Outbound,
        batching: batch::Batching,
    ) -> Option<String> {
        let name = plugin.name().to_string();
        let spec = plugin.spec();
        let handshake_wait = Duration::from_secs_f64(spec.startup_timeout_s);
        let refuse = |status: Status| {
            tracing::error!(plugin = %name, "session refused: {}", status.message());
            let out = out.clone();
            async move {
                let why = status.message().to_string();
                let _ = out.send(Err(status)).await;
                Some(why)
            }
        };
        let hello = match next_message(&name, &mut inbound, handshake_wait).await {
            Ok(PluginMsg::Hello(h)) => h,
            Ok(_) => {
                return refuse(Status::failed_precondition(
                    "the first message must be Hello",
                ))
                .await
            }
            Err(e) => {
                return refuse(Status::failed_precondition(format!(
                    "expected Hello, got {e}"
                )))
                .await
            }
        };
        let major = hello.protocol_version.split('.').next().unwrap_or("");
        let ours = hearth_proto::PROTOCOL_VERSION
            .split('.')
            .next()
            .unwrap_or("");
        if major != ours {
            let reason = format!(
                "protocol version `{}` is not supported; this broker speaks {}",
                hello.protocol_version,
                hearth_proto::PROTOCOL_VERSION
            );
            tracing::error!(plugin = %name, sdk = %hello.sdk, "{reason}");
            let rejected = Rejected {
                reason: reason.clone(),
                items: vec![],
            };
            let _ = out
                .send(Ok(HostMessage {
                    msg: Some(HostMsg::Rejected(rejected)),
                }))
                .await;
            return Some(reason);
        }
        let register = match next_message(&name, &mut inbound, handshake_wait).await {
            Ok(PluginMsg::Register(r)) => r,
            Ok(_) => {
                return refuse(Status::failed_precondition(
                    "the second message must be Register",
                ))
                .await
            }
            Err(e) => {
                return refuse(Status::failed_precondition(format!(
                    "expected Register, got {e}"
                )))
                .await
            }
        };
        if let Some(info) = register
            .plugin
            .as_ref()
            .filter(|i| !i.name.is_empty() && i.name != name)
        {
            tracing::debug!(plugin = %name, "plugin calls itself `{}`; known as `{name}`", info.name);
        }
        // A process replaced while it started (a newer reload, an unload) registers
        // nothing: its tools must not replace the serving ones.
        if !plugin.wants(generation) {
            return refuse(Status::failed_precondition(format!(
                "plugin {name}: this process was replaced before it registered"
            )))
            .await;
        }
        let mut reg =
            self.registry
                .replace_plugin_tools(&name, &register.tools, register.all_or_nothing);
        reg.rejected
            .extend(self.registry.replace_plugin_hooks(&name, &register.stages));
        reg.rejected.extend(self.registry.replace_plugin_triggers(
            &name,
            &register.triggers,
            register.inject.clone(),
        ));
        // HomeAgent `RegisterDef`s declared up front: stored before `Registered`, so
        // the plugin (and others) can read their defaults from then on.
        for def in &register.config_defs {
            let outcome = match (
                self.settings.get(),
                crate::storage::ConfigDef::from_wire(def.clone()),
            ) {
                (_, Err(e)) => Err(e),
                (None, Ok(_)) => Err("this broker has no settings store".to_string()),
                (Some(settings), Ok(d)) => settings
                    .register_def(&crate::storage::Scope::Plugin(name.clone()), d)
                    .await
                    .map_err(|e| e.to_string()),
            };
            if let Err(reason) = outcome {
                reg.rejected.push(hearth_proto::v1::RejectedItem {
                    kind: "config_def".into(),
                    name: def.key.clone(),
                    reason,
                });
            }
        }
        for item in &reg.rejected {
            tracing::error!(plugin = %name, item = %item.name, "{} rejected: {}", item.kind, item.reason);
        }
        if register.all_or_nothing && !reg.rejected.is_empty() {
            let reason = format!(
                "{} rejected and the plugin asked for all-or-nothing",
                crate::term::count(reg.rejected.len(), "item", "items")
            );
            let rejected = Rejected {
                reason: reason.clone(),
                items: reg.rejected,
            };
            let _ = out
                .send(Ok(HostMessage {
                    msg: Some(HostMsg::Rejected(rejected)),
                }))
                .await;
            return Some(reason);
        }
        let session = Arc::new(Session::new(name.clone(), generation, out));
        session.set_registration(register.clone());
        {
            let mut s = plugin.status.lock().unwrap();
            let Some(i) = s.instance_mut(generation).filter(|i| !i.retiring) else {
                return None; // replaced meanwhile
            };
            i.rejected = reg.rejected.clone();
            i.sdk = format!("{} {}", hello.sdk, hello.sdk_version)
                .trim()
                .to_string();
            i.live = Some(session.clone());
        }
        let features: Vec<String> = hello
            .features
            .iter()
            .filter(|f| FEATURES.contains(&f.as_str()))
            .cloned()
            .collect();
        if features.iter().any(|f| f == "batch") {
            batching.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let registered = HostMsg::Registered(Registered {
            plugin: name.clone(),
            tools: reg.accepted.clone(),
            rejected: reg.rejected,
            protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
            features,
        });
        if !session.send(registered).await {
            return None;
        }
        // From here on calls go to this session (a reload's new version: instead of
        // the old one's).
        if !plugin.publish(generation, &session) {
            return None;
        }
        let _ = plugin.control.send(Control::Ready(generation));
        tracing::info!(plugin = %name, generation, sdk = %hello.sdk, tools = reg.accepted.len(), "registered");
        // An attached process may sit at a debugger's breakpoint: no hung detection.
        if origin == Origin::Spawned {
            tokio::spawn(heartbeat(
                session.clone(),
                plugin.control.clone(),
                generation,
                spec.ping_interval,
                spec.hung_timeout,
            ));
        }

        let ended = loop {
            match inbound.message().await {
                Ok(Some(PluginMessage {
                    msg: Some(PluginMsg::Batch(b)),
                })) => {
                    for m in b.msgs.into_iter().filter_map(|m| m.msg) {
                        super::trace::inbound(&name, &m);
                        self.on_message(&plugin, &session, m)
                    }
                }
                Ok(Some(PluginMessage { msg: Some(m) })) => {
                    super::trace::inbound(&name, &m);
                    self.on_message(&plugin, &session, m)
                }
                Ok(Some(_)) => {}
                Ok(None) => break "closed its session".to_string(),
                Err(s) => break format!("lost its session ({})", s.message()),
            }
        };
        tracing::debug!(plugin = %name, generation, "session ended: {ended}");
        plugin.unpublish(generation);
        session.end_stream();
        let _ = plugin.control.send(Control::SessionEnded(generation));
        if origin == Origin::Spawned {
            // The process watcher fails the calls with the exit status if the process
            // exits meanwhile; a process that lives on loses them with this reason.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        session.close(&ended);
        None
    }

    fn on_message(&self, plugin: &Plugin, session: &Session, msg: PluginMsg) {
        match msg {
            PluginMsg::ToolResult(r) => session.complete(Reply::Tool(r)),
            PluginMsg::StageResult(r) => session.complete(Reply::Stage(Box::new(r))),
            PluginMsg::Reply(r) => session.event_text(r.call_id, r.text),
            PluginMsg::EventDone(r) => session.complete(Reply::Event(r)),
            PluginMsg::Pong(_) => session.pong(),
            PluginMsg::Progress(p) => {
                // A count ("3 of 10") when the plugin sent one, else its fraction of 1.
                let (progress, total) = if p.progress > 0.0 || p.total > 0.0 {
                    (p.progress.max(0.0), p.total.max(0.0))
                } else if p.fraction >= 0.0 {
                    (p.fraction, 1.0)
                } else {
                    (0.0, 0.0)
                };
                session.progress(
                    p.call_id,
                    hearth_proto::v1::ToolProgress {
                        message: p.message,
                        progress,
                        total,
                    },
                )
            }
            PluginMsg::RegisterTool(r) => {
                let name = r.tool.as_ref().map(|t| t.name.clone()).unwrap_or_default();
                let outcome = match &r.tool {
                    Some(t) => self.registry.add_tool(plugin.name(), t),
                    None => Err("RegisterTool without a tool".into()),
                };
                answer_registration(plugin, session, r.request_id, name, outcome);
            }
            PluginMsg::UnregisterTool(u) => {
                let outcome = self.registry.remove_tool(plugin.name(), &u.name);
                answer_registration(plugin, session, u.request_id, u.name, outcome);
            }
            other => tracing::warn!(
                plugin = %plugin.name(),
                "unexpected message on an established session: {:?}",
                std::mem::discriminant(&other)
            ),
        }
    }
}

/// Pings the plugin every `interval`; reports it hung after `hung_after` without a
/// `Pong`. SDKs answer pings from their I/O task, so a long tool call is not a hang;
/// a frozen event loop or a stopped process is.
///
/// A tick that comes far later than `interval` means the broker itself did not run
/// (stopped with SIGSTOP, a suspended VM, a starved machine): the plugin could not
/// have been answered meanwhile, so it gets a fresh `hung_after` instead of being
/// killed for the broker's own pause.
pub(super) async fn heartbeat(
    session: Arc<Session>,
    control: mpsc::UnboundedSender<Control>,
    generation: u64,
    interval: Duration,
    hung_after: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut nonce = 0u64;
    let mut last_tick = Instant::now();
    loop {
        tick.tick().await;
        if session.is_closed() {
            return;
        }
        let gap = last_tick.elapsed();
        last_tick = Instant::now();
        if gap > interval * 2 + Duration::from_secs(1) {
            tracing::warn!(
                plugin = %session.plugin(),
                paused_ms = gap.as_millis() as u64,
                "the broker did not run for {} ms (stopped or starved); the plugin's ping timeout starts again",
                gap.as_millis()
            );
            session.pong();
        }
        let silent = session.since_last_pong();
        if silent > hung_after {
            let _ = control.send(Control::Hung { generation, silent });
            return;
        }
        nonce += 1;
        session.try_send(HostMsg::Ping(Ping { nonce }));
    }
}

/// The next handshake message, within `wait`.
async fn next_message(
    plugin: &str,
    inbound: &mut Streaming<PluginMessage>,
    wait: Duration,
) -> Result<PluginMsg, String> {
    match tokio::time::timeout(wait, inbound.message()).await {
        Ok(Ok(Some(PluginMessage { msg: Some(m) }))) => {
            super::trace::inbound(plugin, &m);
            Ok(m)
        }
        Ok(Ok(Some(_))) => Err("an empty message".to_string()),
        Ok(Ok(None)) => Err("end of stream".to_string()),
        Ok(Err(s)) => Err(format!("stream error: {}", s.message())),
        Err(_) => Err(format!("nothing within {} s", wait.as_secs_f64())),
    }
}

fn answer_registration(
    plugin: &Plugin,
    session: &Session,
    request_id: String,
    name: String,
    outcome: Result<(), String>,
) {
    if let Err(e) = &outcome {
        tracing::error!(plugin = %plugin.name(), tool = %name, "run-time registration refused: {e}");
    }
    session.try_send(HostMsg::ToolRegistration(ToolRegistration {
        request_id,
        name,
        ok: outcome.is_ok(),
        error: outcome.err().unwrap_or_default(),
    }));
}
