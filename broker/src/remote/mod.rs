//! Plugins on other machines: brokers and plugin hosts (`hearth node`) over NATS.
//!
//! A node supervises its plugins as `hearth run` does and serves their tools, stage
//! hooks and triggers to brokers over NATS ([`node`]); a broker started with `--nats` (or
//! `[nats]` in hearth.toml) learns them from the nodes' announcements and heartbeats and
//! routes calls to them ([`hub`]). The messages are `proto/hearth/v1/node.proto`'s
//! envelope around plugin.proto's (prost); the subjects are [`Subjects`]'s.
//!
//! - **Routing**: each plugin is a NATS queue group (its name): the server hands each
//!   call to one subscribed node, so N nodes serving a plugin share its calls; a node is
//!   subscribed only while the plugin is ready there.
//! - **At most once**: a call is sent again only when it never reached a plugin: the
//!   server said no one is subscribed (no-responders, 503) or the node answered
//!   `NotRun`. A call that reached a node is never sent twice.
//! - **Loss**: a broker probes every node it has calls on every [`PROBE_EVERY`]; a node
//!   that is gone (no-responders), restarted (new boot id) or silent for two probes in a
//!   row fails its calls at once. A call with no answer at all within [`ACK_TIMEOUT`]
//!   fails too (the node that took it may be frozen: it is not sent again).
//!
//! Design and measurements: `docs/design/nats-research.md`.

pub mod hub;
pub mod node;
pub mod relay;

use std::time::Duration;

/// A node sends `Accepted` for a call still running after this long (a faster call's
/// result is its own acknowledgement).
pub const ACCEPT_AFTER: Duration = Duration::from_millis(1);

/// A call with no message at all from a node (accepted, result, not-run) within this
/// long fails: no node is known to run it.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(1);

/// How often a broker probes the nodes it has calls in flight on.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// How long one probe waits for the node's answer; two missed in a row = node lost.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// How often a node sends its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// A node not heard from for this long is dropped from a broker's directory.
pub const NODE_SILENT: Duration = Duration::from_secs(3);

/// Encoded replies above this size go as [`hearth_proto::v1::Chunk`]s of at most this
/// many bytes (the server's default `max_payload` is 1 MiB).
pub const CHUNK_BYTES: usize = 512 * 1024;

/// The subjects of one deployment (`[nats] subject_prefix`). Plugin names may hold `.`,
/// a NATS token separator: in subjects it is written `~` ([`Subjects::token`]).
#[derive(Debug, Clone)]
pub struct Subjects {
    prefix: String,
}

impl Subjects {
    /// Subjects under `prefix` (e.g. `hearth`).
    pub fn new(prefix: &str) -> Subjects {
        Subjects {
            prefix: prefix.trim_end_matches('.').to_string(),
        }
    }

    /// A plugin (or node) name as one subject token: `.` → `~`.
    pub fn token(name: &str) -> String {
        name.replace('.', "~")
    }

    /// The plugin name a [`Subjects::token`] came from.
    pub fn untoken(token: &str) -> String {
        token.replace('~', ".")
    }

    /// `<pfx>.call.<plugin>.tool.<tool>`: a tool call for `plugin`'s queue group.
    pub fn tool_call(&self, plugin: &str, tool: &str) -> String {
        format!("{}.call.{}.tool.{tool}", self.prefix, Self::token(plugin))
    }

    /// `<pfx>.call.<plugin>.stage`: a stage hook call.
    pub fn stage_call(&self, plugin: &str) -> String {
        format!("{}.call.{}.stage", self.prefix, Self::token(plugin))
    }

    /// `<pfx>.call.<plugin>.event`: a trigger's event.
    pub fn event_call(&self, plugin: &str) -> String {
        format!("{}.call.{}.event", self.prefix, Self::token(plugin))
    }

    /// `<pfx>.call.<plugin>.>`: what a node serving `plugin` subscribes to.
    pub fn plugin_calls(&self, plugin: &str) -> String {
        format!("{}.call.{}.>", self.prefix, Self::token(plugin))
    }

    /// `<pfx>.r.<broker>.<call_id>`: where the node answers a call.
    pub fn reply(&self, broker: &str, call_id: u64) -> String {
        format!("{}.r.{broker}.{call_id}", self.prefix)
    }

    /// `<pfx>.r.<broker>.>`: every reply to `broker`.
    pub fn replies(&self, broker: &str) -> String {
        format!("{}.r.{broker}.>", self.prefix)
    }

    /// `<pfx>.cancel`.
    pub fn cancel(&self) -> String {
        format!("{}.cancel", self.prefix)
    }

    /// `<pfx>.node.<node>.ping`.
    pub fn ping(&self, node: &str) -> String {
        format!("{}.node.{node}.ping", self.prefix)
    }

    /// `<pfx>.reg.<node>`, or `<pfx>.reg.*` for `"*"`.
    pub fn announce(&self, node: &str) -> String {
        format!("{}.reg.{node}", self.prefix)
    }

    /// `<pfx>.hb.<node>`, or `<pfx>.hb.*` for `"*"`.
    pub fn heartbeat(&self, node: &str) -> String {
        format!("{}.hb.{node}", self.prefix)
    }

    /// `<pfx>.discover`.
    pub fn discover(&self) -> String {
        format!("{}.discover", self.prefix)
    }

    /// `<pfx>.host.<node>.<Service>.<Method>` for gRPC path `/hearth.v1.<Service>/<Method>`;
    /// `None` for another path.
    pub fn host_call(&self, node: &str, path: &str) -> Option<String> {
        let (service, method) = path.strip_prefix("/hearth.v1.")?.split_once('/')?;
        let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric());
        (ok(service) && ok(method))
            .then(|| format!("{}.host.{node}.{service}.{method}", self.prefix))
    }

    /// `<pfx>.host.>`: every relayed host call (brokers, queue group `brokers`).
    pub fn host_calls(&self) -> String {
        format!("{}.host.>", self.prefix)
    }

    /// `(node, "/hearth.v1.<Service>/<Method>")` of a [`Subjects::host_call`] subject.
    pub fn parse_host_call(&self, subject: &str) -> Option<(String, String)> {
        let rest = subject.strip_prefix(&self.prefix)?.strip_prefix(".host.")?;
        let mut parts = rest.split('.');
        let (node, service, method) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        Some((node.to_string(), format!("/hearth.v1.{service}/{method}")))
    }

    /// The call id at the end of a [`Subjects::reply`] subject.
    pub fn reply_call_id(subject: &str) -> Option<u64> {
        subject.rsplit('.').next()?.parse().ok()
    }
}

/// Encodes `msg` (a node.proto message).
pub fn encode(msg: &impl prost::Message) -> bytes::Bytes {
    msg.encode_to_vec().into()
}

/// Decodes a node.proto message, naming what it should have been on failure.
pub fn decode<M: prost::Message + Default>(what: &str, data: &[u8]) -> Result<M, String> {
    M::decode(data).map_err(|e| format!("undecodable {what} ({} bytes): {e}", data.len()))
}

/// Splits an encoded [`hearth_proto::v1::NodeReply`] larger than `max` into chunk replies
/// (each itself a NodeReply of `node`/`boot`), or returns it whole.
pub fn chunked(node: &str, boot: &str, encoded: bytes::Bytes, max: usize) -> Vec<bytes::Bytes> {
    if encoded.len() <= max {
        return vec![encoded];
    }
    let pieces: Vec<_> = encoded.chunks(max).collect();
    let n = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, data)| {
            encode(&hearth_proto::v1::NodeReply {
                node: node.into(),
                boot: boot.into(),
                msg: Some(hearth_proto::v1::node_reply::Msg::Chunk(
                    hearth_proto::v1::Chunk {
                        data: data.to_vec(),
                        last: i + 1 == n,
                    },
                )),
            })
        })
        .collect()
}

/// The chunk size for a server announcing `max_payload`: [`CHUNK_BYTES`], less when
/// the server takes less (room left for the envelope).
pub fn chunk_size(max_payload: usize) -> usize {
    CHUNK_BYTES.min(max_payload.saturating_sub(1024).max(1024))
}

/// A random boot id (a node's per-start identity).
pub fn boot_id() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_with_dots_are_one_token_and_come_back() {
        let s = Subjects::new("hearth.prod");
        assert_eq!(
            s.tool_call("acme.calc", "add"),
            "hearth.prod.call.acme~calc.tool.add"
        );
        assert_eq!(Subjects::untoken("acme~calc"), "acme.calc");
        assert_eq!(s.reply("b1", 42), "hearth.prod.r.b1.42");
        assert_eq!(Subjects::reply_call_id("hearth.prod.r.b1.42"), Some(42));
    }

    #[test]
    fn host_call_subjects_name_the_node_and_method() {
        let s = Subjects::new("hearth");
        let subject = s
            .host_call("gpu-1", "/hearth.v1.Settings/GetPlugin")
            .unwrap();
        assert_eq!(subject, "hearth.host.gpu-1.Settings.GetPlugin");
        assert_eq!(
            s.parse_host_call(&subject),
            Some(("gpu-1".into(), "/hearth.v1.Settings/GetPlugin".into()))
        );
        assert_eq!(s.host_call("n", "/grpc.health.v1.Health/Check"), None);
        assert_eq!(s.host_call("n", "/hearth.v1.Settings/Get.x"), None);
        assert_eq!(s.parse_host_call("hearth.host.n.A.B.C"), None);
    }

    #[test]
    fn big_replies_are_chunked_and_small_ones_are_not() {
        let small = bytes::Bytes::from(vec![1u8; 10]);
        assert_eq!(chunked("n", "b", small.clone(), 100), vec![small]);
        let big = bytes::Bytes::from((0..250u32).map(|i| i as u8).collect::<Vec<_>>());
        let parts = chunked("n", "b", big.clone(), 100);
        assert_eq!(parts.len(), 3);
        let mut joined = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let r: hearth_proto::v1::NodeReply = decode("reply", p).unwrap();
            let Some(hearth_proto::v1::node_reply::Msg::Chunk(c)) = r.msg else {
                panic!("not a chunk")
            };
            assert_eq!(c.last, i == 2);
            joined.extend_from_slice(&c.data);
        }
        assert_eq!(joined, big.to_vec());
        assert_eq!(chunk_size(1 << 20), CHUNK_BYTES);
        assert_eq!(chunk_size(64 * 1024), 63 * 1024);
    }
}
