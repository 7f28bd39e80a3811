//! The fake broker of these tests: `hearth_plugin::testing::FakeBroker` (a real tonic
//! `PluginHost` server with the fake host services), with helpers that panic with the
//! harness's error instead of returning it, which keeps the protocol tests short.

use std::time::Duration;

use hearth_plugin::proto::v1::{self as pb, host_message::Msg as In, plugin_message::Msg as Out};
use hearth_plugin::testing::{BrokerSession, FakeBroker, FakeHost};

/// How long a test waits for any one message before failing.
pub(crate) const STEP: Duration = Duration::from_secs(10);

/// A running fake broker; stops when dropped.
pub(crate) struct Broker {
    /// Address to give the plugin (tests may change it, e.g. to `unix:/path`).
    pub(crate) addr: String,
    /// Token the broker accepts.
    pub(crate) token: String,
    inner: FakeBroker,
}

impl Broker {
    fn wrap(inner: FakeBroker) -> Broker {
        Broker {
            addr: inner.addr().to_string(),
            token: inner.token().to_string(),
            inner,
        }
    }

    /// A broker on a Unix socket in a fresh temp dir, for plugin `testplug`.
    pub(crate) fn unix() -> Broker {
        Broker::unix_for("testplug")
    }

    /// A broker on a Unix socket whose host services serve plugin `plugin`.
    pub(crate) fn unix_for(plugin: &str) -> Broker {
        Broker::wrap(FakeBroker::unix(FakeHost::new(plugin)).expect("fake broker"))
    }

    /// A broker on TCP loopback, port chosen by the OS.
    pub(crate) async fn tcp() -> Broker {
        Broker::wrap(
            FakeBroker::tcp(FakeHost::new("testplug"))
                .await
                .expect("fake broker"),
        )
    }

    /// The fake host services.
    pub(crate) fn host(&self) -> &FakeHost {
        self.inner.host()
    }

    /// `HEARTH_ADDR`, `HEARTH_TOKEN`, `HEARTH_PLUGIN`: what `eval "$(hearth plugins
    /// attach-token NAME)"` exports for a plugin started by hand.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        self.inner.env()
    }

    /// The next session a plugin opened.
    pub(crate) async fn session(&mut self) -> Session {
        let mut s = self
            .inner
            .session_within(STEP)
            .await
            .expect("no plugin attached in time");
        s.set_wait(STEP);
        Session(s)
    }
}

/// The broker's end of one plugin session; every helper panics on failure.
pub(crate) struct Session(BrokerSession);

impl Session {
    /// Next message from the plugin; panics on timeout or end of stream.
    pub(crate) async fn recv(&mut self) -> Out {
        self.0.recv().await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Next message within `wait`, `None` if nothing came.
    pub(crate) async fn recv_within(&mut self, wait: Duration) -> Option<Out> {
        self.0.recv_within(wait).await
    }

    /// Whether the plugin's stream has ended (cleanly or not) within `wait`.
    pub(crate) async fn ended_within(&mut self, wait: Duration) -> bool {
        self.0.ended_within(wait).await
    }

    /// Sends a message to the plugin.
    pub(crate) fn send(&self, msg: In) {
        self.0.send(msg).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Ends the broker's side of the stream.
    pub(crate) fn close(&mut self) {
        self.0.close()
    }

    /// Reads Hello and Register and answers Registered with every tool.
    pub(crate) async fn handshake(&mut self) -> (pb::Hello, pb::Register) {
        self.0.handshake().await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Sends InvokeTool.
    pub(crate) fn invoke(&self, call_id: u64, tool: &str, args: serde_json::Value) {
        self.0
            .invoke(call_id, tool, args)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Next ToolResult, skipping Progress messages.
    pub(crate) async fn result(&mut self) -> pb::ToolResult {
        self.0.result().await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Invokes a tool and returns its result (no other call may be in flight).
    pub(crate) async fn call(
        &mut self,
        call_id: u64,
        tool: &str,
        args: serde_json::Value,
    ) -> pb::ToolResult {
        self.0
            .call(call_id, tool, args)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}
