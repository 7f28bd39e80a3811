//! Host services the broker offers plugins (settings, memory, knowledge, LLM, input, MCP
//! servers' resources and prompts), as gRPC clients that share the plugin's connection
//! and carry its token.

use hearth_proto::v1 as pb;
use hearth_proto::v1::{
    doc_memory_client::DocMemoryClient, input_client::InputClient,
    knowledge_client::KnowledgeClient, llm_client::LlmClient, mcp_client::McpClient,
    memory_client::MemoryClient, settings_client::SettingsClient,
    text_memory_client::TextMemoryClient,
};
use hearth_proto::{MAX_MESSAGE_BYTES, TOKEN_METADATA};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;

use crate::apis::{DocMemory, HostError, Knowledge, Llm, Mcp, Memory, Settings, TextMemory};

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
/// [`CallContext::host`](crate::CallContext::host) in a handler. [`settings`](Self::settings),
/// [`memory`](Self::memory), [`text_memory`](Self::text_memory),
/// [`doc_memory`](Self::doc_memory), [`knowledge`](Self::knowledge) and [`llm`](Self::llm)
/// are the typed APIs with the seed's method names, [`mcp`](Self::mcp) reads MCP
/// servers' resources and prompts; `*_client` (and `input`) are the generated tonic
/// clients of `hearth.v1`. Every call carries the plugin's token.
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
        /// Generated client of `Settings` (wire messages); [`settings`](Self::settings)
        /// is the typed API.
        settings_client, SettingsClient
    );
    client!(
        /// Generated client of `Memory`; [`memory`](Self::memory) is the typed API.
        memory_client, MemoryClient
    );
    client!(
        /// Generated client of `TextMemory`; [`text_memory`](Self::text_memory) is the
        /// typed API.
        text_memory_client, TextMemoryClient
    );
    client!(
        /// Generated client of `DocMemory`; [`doc_memory`](Self::doc_memory) is the
        /// typed API.
        doc_memory_client, DocMemoryClient
    );
    client!(
        /// Generated client of `Knowledge`; [`knowledge`](Self::knowledge) is the typed
        /// API.
        knowledge_client, KnowledgeClient
    );
    client!(
        /// Generated client of `Llm`; [`llm`](Self::llm) is the typed API.
        llm_client, LlmClient
    );
    client!(
        /// Generated client of `Mcp`; [`mcp`](Self::mcp) is the typed API.
        mcp_client, McpClient
    );
    client!(
        /// Generated client of `Input`: inject messages into the agent's input queue
        /// (see also [`inject_text`](Self::inject_text)).
        input, InputClient
    );

    /// HomeAgent `Settings()`: this plugin's settings, core and other plugins' settings,
    /// definitions.
    pub fn settings(&self) -> Settings {
        Settings { host: self.clone() }
    }

    /// HomeAgent `Memory()`: graph memory.
    pub fn memory(&self) -> Memory {
        Memory { host: self.clone() }
    }

    /// HomeAgent `TextMemory()`: the append-only text log.
    pub fn text_memory(&self) -> TextMemory {
        TextMemory { host: self.clone() }
    }

    /// HomeAgent `DocMemory()`: document memory.
    pub fn doc_memory(&self) -> DocMemory {
        DocMemory { host: self.clone() }
    }

    /// HomeAgent `Knowledge()`: the knowledge base.
    pub fn knowledge(&self) -> Knowledge {
        Knowledge { host: self.clone() }
    }

    /// HomeAgent `LLM()`: LLM sources.
    pub fn llm(&self) -> Llm {
        Llm { host: self.clone() }
    }

    /// Resources and prompts of the MCP servers the broker runs as plugins (`"runtime":
    /// "mcp"`; capability `mcp`).
    pub fn mcp(&self) -> Mcp {
        Mcp { host: self.clone() }
    }

    /// Queues `text` as input on `channel`, with this plugin as the source (HomeAgent
    /// `InjectText`).
    pub async fn inject_text(&self, channel: &str, text: &str) -> Result<(), HostError> {
        self.input()
            .inject_text(self.inject_request(channel, text))
            .await
            .map(drop)
            .map_err(|s| HostError::new(&self.plugin, "input.inject_text", s.code(), s.message()))
    }

    /// Like [`inject_text`](Self::inject_text), without recording it in memory.
    pub async fn inject_text_no_memory(&self, channel: &str, text: &str) -> Result<(), HostError> {
        self.input()
            .inject_text_no_memory(self.inject_request(channel, text))
            .await
            .map(drop)
            .map_err(|s| {
                HostError::new(
                    &self.plugin,
                    "input.inject_text_no_memory",
                    s.code(),
                    s.message(),
                )
            })
    }

    /// Puts `text` ahead of the queue and interrupts the LLM request in flight.
    pub async fn inject_interrupt_text(&self, channel: &str, text: &str) -> Result<(), HostError> {
        self.input()
            .inject_interrupt_text(self.inject_request(channel, text))
            .await
            .map(drop)
            .map_err(|s| {
                HostError::new(
                    &self.plugin,
                    "input.inject_interrupt_text",
                    s.code(),
                    s.message(),
                )
            })
    }

    fn inject_request(&self, channel: &str, text: &str) -> pb::InjectRequest {
        pb::InjectRequest {
            source: self.plugin.clone(),
            channel: channel.into(),
            text: text.into(),
            ..Default::default()
        }
    }

    /// Queues `input` in its conversation (the group `group_id` on `channel`, else the
    /// private chat of `user_id`, default this plugin, on `channel`): HomeAgent
    /// `InjectText`, `InjectTextNoMemory` (`no_memory`) or `InjectInterruptText`
    /// (`interrupt`: cuts into the running turn of that conversation, or goes to the
    /// front of its queue). Errors: `RESOURCE_EXHAUSTED` when the conversation already
    /// has `[agent] queue_per_conversation` inputs waiting.
    pub async fn inject(&self, input: Inject<'_>) -> Result<(), HostError> {
        let req = pb::InjectRequest {
            source: self.plugin.clone(),
            channel: input.channel.into(),
            text: input.text.into(),
            user_id: input.user_id.into(),
            group_id: input.group_id.into(),
            priority: input.priority as i32,
        };
        let mut client = self.input();
        let (method, outcome) = if input.interrupt {
            (
                "input.inject_interrupt_text",
                client.inject_interrupt_text(req).await,
            )
        } else if input.no_memory {
            (
                "input.inject_text_no_memory",
                client.inject_text_no_memory(req).await,
            )
        } else {
            ("input.inject_text", client.inject_text(req).await)
        };
        outcome
            .map(drop)
            .map_err(|s| HostError::new(&self.plugin, method, s.code(), s.message()))
    }
}

/// Input for [`Host::inject`]: the text, its conversation and how urgent it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inject<'a> {
    /// Channel (with `user_id` or `group_id`, the conversation).
    pub channel: &'a str,
    /// The message.
    pub text: &'a str,
    /// The user whose private chat gets it (empty: this plugin, which speaks as
    /// `plugin:<name>`; naming a user needs capability `input_as_user`).
    pub user_id: &'a str,
    /// The group whose conversation gets it (empty: a private chat).
    pub group_id: &'a str,
    /// Scheduling priority when turns wait for a slot; `Unspecified` = background.
    pub priority: pb::Priority,
    /// Leave it out of memory (`InjectTextNoMemory`).
    pub no_memory: bool,
    /// Cut into the running turn (`InjectInterruptText`).
    pub interrupt: bool,
}
