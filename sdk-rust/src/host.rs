//! Host services the broker offers plugins (settings, memory, knowledge, LLM, input),
//! as gRPC clients that share the plugin's connection and carry its token.

use hearth_proto::v1 as pb;
use hearth_proto::v1::{
    doc_memory_client::DocMemoryClient, input_client::InputClient,
    knowledge_client::KnowledgeClient, llm_client::LlmClient, memory_client::MemoryClient,
    settings_client::SettingsClient, text_memory_client::TextMemoryClient,
};
use hearth_proto::{MAX_MESSAGE_BYTES, TOKEN_METADATA};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;

/// Adds the plugin's `x-hearth-token` to every host-service request.
#[derive(Clone, Debug)]
pub struct TokenInterceptor {
    token: MetadataValue<Ascii>,
}

impl Interceptor for TokenInterceptor {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut()
            .insert(TOKEN_METADATA, self.token.clone());
        Ok(req)
    }
}

/// The transport of every host-service client: the plugin's channel plus its token.
pub type HostChannel = InterceptedService<Channel, TokenInterceptor>;

/// Handle to the broker's host services (HomeAgent `PluginSDK` APIs). Cheap to clone.
///
/// Get it from [`Registrar::host`](crate::Registrar::host) in `start`, or from
/// [`CallContext::host`](crate::CallContext::host) in a handler. Each method returns a
/// generated tonic client of `hearth.v1` whose calls carry the plugin's token.
#[derive(Clone, Debug)]
pub struct Host {
    channel: Channel,
    token: MetadataValue<Ascii>,
    plugin: String,
}

macro_rules! client {
    ($(#[$doc:meta])* $name:ident, $client:ident) => {
        $(#[$doc])*
        pub fn $name(&self) -> $client<HostChannel> {
            $client::new(self.intercepted())
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
        }
    };
}

impl Host {
    pub(crate) fn new(channel: Channel, token: MetadataValue<Ascii>, plugin: String) -> Self {
        Host {
            channel,
            token,
            plugin,
        }
    }

    fn intercepted(&self) -> HostChannel {
        InterceptedService::new(
            self.channel.clone(),
            TokenInterceptor {
                token: self.token.clone(),
            },
        )
    }

    /// Name the broker knows this plugin by.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    client!(
        /// `Settings`: this plugin's config table, core config, other plugins' config, defs.
        settings, SettingsClient
    );
    client!(
        /// `Memory`: graph memory (recall, commit, …).
        memory, MemoryClient
    );
    client!(
        /// `TextMemory`: append-only text events.
        text_memory, TextMemoryClient
    );
    client!(
        /// `DocMemory`: document memory.
        doc_memory, DocMemoryClient
    );
    client!(
        /// `Knowledge`: the knowledge base.
        knowledge, KnowledgeClient
    );
    client!(
        /// `Llm`: LLM sources.
        llm, LlmClient
    );
    client!(
        /// `Input`: inject messages into the agent's input queue.
        input, InputClient
    );

    /// Queues `text` as input on `channel`, with this plugin as the source (HomeAgent
    /// `InjectText`).
    pub async fn inject_text(&self, channel: &str, text: &str) -> Result<(), tonic::Status> {
        self.input()
            .inject_text(self.inject(channel, text))
            .await
            .map(|_| ())
    }

    /// Like [`inject_text`](Self::inject_text), without recording it in memory.
    pub async fn inject_text_no_memory(
        &self,
        channel: &str,
        text: &str,
    ) -> Result<(), tonic::Status> {
        self.input()
            .inject_text_no_memory(self.inject(channel, text))
            .await
            .map(|_| ())
    }

    /// Puts `text` ahead of the queue and interrupts the LLM request in flight.
    pub async fn inject_interrupt_text(
        &self,
        channel: &str,
        text: &str,
    ) -> Result<(), tonic::Status> {
        self.input()
            .inject_interrupt_text(self.inject(channel, text))
            .await
            .map(|_| ())
    }

    fn inject(&self, channel: &str, text: &str) -> pb::InjectRequest {
        pb::InjectRequest {
            source: self.plugin.clone(),
            channel: channel.into(),
            text: text.into(),
        }
    }
}
