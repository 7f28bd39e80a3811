use std::sync::Arc;

use hearth_proto::v1::agent_server::Agent as AgentRpc;
use hearth_proto::v1::input_server::Input;
use hearth_proto::v1::{
    AgentInjectRequest, ChatEvent, ChatRequest, ConfirmAck, ConfirmResponse, Empty, InjectAck,
    InjectRequest, Priority,
};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use crate::agent::{Agent, TurnInput};
use crate::supervisor::Supervisor;

/// `Agent`: chat turns and injected input for clients (admin token).
#[derive(Debug, Clone)]
pub struct AgentService {
    agent: Agent,
    token: Arc<str>,
}

impl AgentService {
    /// Serves `agent` to clients presenting `token`.
    pub fn new(agent: Agent, token: String) -> Self {
        AgentService {
            agent,
            token: token.into(),
        }
    }
}

fn or_default(s: String, default: &str) -> String {
    if s.is_empty() {
        default.to_string()
    } else {
        s
    }
}

/// The priority a request asked for, else `default`. Errors: INVALID_ARGUMENT for a
/// number that is not a level.
fn priority(value: i32, default: Priority) -> Result<Priority, Status> {
    match Priority::try_from(value) {
        Ok(Priority::Unspecified) => Ok(default),
        Ok(p) => Ok(p),
        Err(_) => Err(Status::invalid_argument(format!(
            "priority {value} is not a level: 1 background, 2 message, 3 interactive, 4 critical"
        ))),
    }
}

#[tonic::async_trait]
impl AgentRpc for AgentService {
    type ChatStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<ChatEvent, Status>> + Send>>;

    async fn chat(
        &self,
        request: Request<ChatRequest>,
    ) -> Result<Response<Self::ChatStream>, Status> {
        super::authorize_admin(&request, &self.token)?;
        let trace_parent = crate::observe::trace::from_metadata(request.metadata());
        let req = request.into_inner();
        if req.message.trim().is_empty() {
            return Err(Status::invalid_argument("message is empty"));
        }
        let (_, events) = self.agent.submit(TurnInput {
            text: req.message,
            user_id: or_default(req.user_id, "user"),
            group_id: req.group_id,
            channel: or_default(req.channel, "cli"),
            no_memory: req.no_memory,
            can_confirm: true,
            priority: priority(req.priority, Priority::Interactive)?,
            injected_by: None,
            trace_parent,
        })?;
        Ok(Response::new(Box::pin(
            UnboundedReceiverStream::new(events).map(Ok),
        )))
    }

    async fn confirm(
        &self,
        request: Request<ConfirmResponse>,
    ) -> Result<Response<ConfirmAck>, Status> {
        super::authorize_admin(&request, &self.token)?;
        let answer = request.into_inner();
        if self
            .agent
            .confirm(&answer.confirm_id, answer.approved)
            .await
        {
            Ok(Response::new(ConfirmAck {}))
        } else {
            Err(Status::failed_precondition(format!(
                "no confirmation `{}` is pending (answered already, timed out, or unknown)",
                answer.confirm_id
            )))
        }
    }

    async fn inject(
        &self,
        request: Request<AgentInjectRequest>,
    ) -> Result<Response<InjectAck>, Status> {
        super::authorize_admin(&request, &self.token)?;
        let trace_parent = crate::observe::trace::from_metadata(request.metadata());
        let req = request.into_inner();
        if req.text.trim().is_empty() {
            return Err(Status::invalid_argument("text is empty"));
        }
        let source = or_default(req.source, "cli");
        let input = TurnInput {
            text: req.text,
            user_id: or_default(req.user_id, &source),
            group_id: req.group_id,
            channel: or_default(req.channel, "cli"),
            no_memory: req.no_memory,
            can_confirm: false,
            priority: priority(req.priority, Priority::Background)?,
            injected_by: None,
            trace_parent,
        };
        let accepted = self.agent.inject(&source, input, req.interrupt)?;
        Ok(Response::new(InjectAck {
            ahead: accepted.ahead as u32,
            conversation: accepted.conversation,
            interrupted: accepted.interrupted,
        }))
    }
}

/// `Input`: the HomeAgent input-injection host service for plugins (plugin token,
/// capability `input`).
///
/// Injected text is attributed to the calling plugin: it speaks as `plugin:<name>`
/// (`plugin_identity`). `source` and `user_id` left empty, or naming the plugin
/// itself (`<name>` — what the SDKs send as `source` — or `plugin:<name>`), mean that
/// identity. Naming anyone else, i.e. speaking as a user (into their private
/// conversation, or as them in a group, charged their `ai.tool` cooldowns), needs
/// capability `input_as_user`; without it the call is PERMISSION_DENIED naming the
/// field and the capability. Either way the stored history message records the
/// plugin that injected it (`TurnInput::injected_by`).
#[derive(Debug, Clone)]
pub struct InputService {
    agent: Agent,
    supervisor: Arc<Supervisor>,
}

impl InputService {
    /// Serves `agent` to `supervisor`'s plugins.
    pub fn new(agent: Agent, supervisor: Arc<Supervisor>) -> Self {
        InputService { agent, supervisor }
    }

    fn inject(
        &self,
        request: Request<InjectRequest>,
        no_memory: bool,
        interrupt: bool,
    ) -> Result<Response<Empty>, Status> {
        let method = match (no_memory, interrupt) {
            (_, true) => "Input.InjectInterruptText",
            (true, _) => "Input.InjectTextNoMemory",
            _ => "Input.InjectText",
        };
        let plugin = super::plugin_caller(&self.supervisor, &request, method, Some("input"))?;
        let trace_parent = crate::observe::trace::from_metadata(request.metadata());
        let req = request.into_inner();
        if req.text.trim().is_empty() {
            return Err(Status::invalid_argument(format!(
                "plugin {plugin}: inject: text is empty"
            )));
        }
        let as_user = super::holds(&self.supervisor, &plugin, INPUT_AS_USER);
        let (source, user_id) = speaker(&plugin, method, req.source, req.user_id, as_user)?;
        let input = TurnInput {
            text: req.text,
            user_id,
            group_id: req.group_id,
            channel: or_default(req.channel, &plugin),
            no_memory,
            can_confirm: false,
            priority: priority(req.priority, Priority::Background)?,
            injected_by: Some(plugin.clone()),
            trace_parent,
        };
        self.agent.inject(&source, input, interrupt).map_err(|e| {
            let s = Status::from(e);
            Status::new(
                s.code(),
                format!("plugin {plugin}: inject: {}", s.message()),
            )
        })?;
        Ok(Response::new(Empty {}))
    }
}

/// The capability to inject input as someone other than the plugin itself.
const INPUT_AS_USER: &str = "input_as_user";

/// Who injected input of `plugin` speaks as when it names nobody else: `plugin:<name>`,
/// never a bare name a user could have.
fn plugin_identity(plugin: &str) -> String {
    format!("plugin:{plugin}")
}

/// `(source, user_id)` of input `plugin` injects with these request fields (see
/// [`InputService`]): empty or the plugin's own name is [`plugin_identity`]; an empty
/// `user_id` is the source, as in HomeAgent's `InjectText(source, …)`. Errors:
/// PERMISSION_DENIED when a field names someone else and `as_user` (capability
/// `input_as_user`) is not held.
fn speaker(
    plugin: &str,
    method: &str,
    source: String,
    user_id: String,
    as_user: bool,
) -> Result<(String, String), Status> {
    let identity = plugin_identity(plugin);
    let own = |s: &str| s.is_empty() || s == plugin || s == identity;
    for (field, value) in [("source", &source), ("user_id", &user_id)] {
        if !as_user && !own(value) {
            tracing::warn!(plugin = %plugin, "{method} refused: `{field}` names someone else, capability `{INPUT_AS_USER}` not granted");
            return Err(Status::permission_denied(format!(
                "plugin {plugin}: {method}: `{field}` {value:?} is not this plugin ({identity}); injecting as another user or source needs capability `{INPUT_AS_USER}`; add it to `capabilities` in its plugin.json, or leave `{field}` empty"
            )));
        }
    }
    let source = if own(&source) {
        identity.clone()
    } else {
        source
    };
    let user_id = match user_id {
        u if u.is_empty() => source.clone(),
        u if own(&u) => identity,
        u => u,
    };
    Ok((source, user_id))
}

#[tonic::async_trait]
impl Input for InputService {
    async fn inject_text(
        &self,
        request: Request<InjectRequest>,
    ) -> Result<Response<Empty>, Status> {
        self.inject(request, false, false)
    }

    async fn inject_text_no_memory(
        &self,
        request: Request<InjectRequest>,
    ) -> Result<Response<Empty>, Status> {
        self.inject(request, true, false)
    }

    async fn inject_interrupt_text(
        &self,
        request: Request<InjectRequest>,
    ) -> Result<Response<Empty>, Status> {
        self.inject(request, false, true)
    }
}

/// `Llm`: the HomeAgent LLM-management host service for plugins (plugin token).
#[derive(Debug, Clone)]
pub struct LlmService {
    sources: Arc<crate::llm::SourcePool>,
    supervisor: Arc<Supervisor>,
}

impl LlmService {
    /// Serves `sources` to `supervisor`'s plugins.
    pub fn new(sources: Arc<crate::llm::SourcePool>, supervisor: Arc<Supervisor>) -> Self {
        LlmService {
            sources,
            supervisor,
        }
    }

    fn plugin<T>(&self, request: &Request<T>, method: &str) -> Result<String, Status> {
        super::plugin_caller(&self.supervisor, request, method, Some("llm"))
    }
}

#[tonic::async_trait]
impl hearth_proto::v1::llm_server::Llm for LlmService {
    async fn list_sources(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<hearth_proto::v1::KeysResponse>, Status> {
        self.plugin(&request, "Llm.ListSources")?;
        Ok(Response::new(hearth_proto::v1::KeysResponse {
            keys: self.sources.names(),
        }))
    }

    async fn set_source(
        &self,
        request: Request<hearth_proto::v1::SourceRequest>,
    ) -> Result<Response<Empty>, Status> {
        let plugin = self.plugin(&request, "Llm.SetSource")?;
        let name = &request.get_ref().name;
        self.sources
            .set_current(name)
            .map_err(|e| Status::not_found(format!("plugin {plugin}: set_source: {e}")))?;
        tracing::info!(plugin = %plugin, "LLM source set to {name}");
        Ok(Response::new(Empty {}))
    }

    async fn current_source(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<hearth_proto::v1::SourceRequest>, Status> {
        self.plugin(&request, "Llm.CurrentSource")?;
        Ok(Response::new(hearth_proto::v1::SourceRequest {
            name: self.sources.current(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speak(source: &str, user: &str, as_user: bool) -> Result<(String, String), Status> {
        speaker(
            "cron",
            "Input.InjectText",
            source.into(),
            user.into(),
            as_user,
        )
    }

    #[test]
    fn injected_input_speaks_as_the_plugin_unless_it_may_speak_as_a_user() {
        let me = ("plugin:cron".to_string(), "plugin:cron".to_string());
        for as_user in [false, true] {
            // Nothing named, or the plugin itself in either spelling: the plugin.
            assert_eq!(speak("", "", as_user).unwrap(), me);
            assert_eq!(speak("cron", "", as_user).unwrap(), me);
            assert_eq!(speak("plugin:cron", "cron", as_user).unwrap(), me);
        }
        for (source, user) in [
            ("alice", ""),
            ("", "alice"),
            ("cron", "alice"),
            ("plugin:other", ""),
        ] {
            let e = speak(source, user, false).unwrap_err();
            assert_eq!(
                e.code(),
                tonic::Code::PermissionDenied,
                "{source:?} {user:?}"
            );
            assert!(e.message().contains("`input_as_user`"), "{}", e.message());
            assert!(
                e.message().contains("plugin cron: Input.InjectText"),
                "{}",
                e.message()
            );
        }
        // With input_as_user: a source is also the user by default (HomeAgent).
        assert_eq!(
            speak("alice", "", true).unwrap(),
            ("alice".to_string(), "alice".to_string())
        );
        assert_eq!(
            speak("", "alice", true).unwrap(),
            ("plugin:cron".to_string(), "alice".to_string())
        );
    }
}
