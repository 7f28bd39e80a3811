//! The `hearth.v1` host services over a [`FakeHost`]: decode, check the token and the
//! capability as the broker does (`broker/src/grpc/mod.rs` `plugin_caller`,
//! `grpc/host.rs`, `grpc/agent.rs`), then answer from the in-memory stores.

use std::sync::{Arc, MutexGuard};

use hearth_proto::v1::{
    self as pb, doc_memory_server::DocMemoryServer, input_server::InputServer,
    knowledge_server::KnowledgeServer, llm_server::LlmServer, mcp_server::McpServer,
    memory_server::MemoryServer, settings_server::SettingsServer,
    text_memory_server::TextMemoryServer, Priority,
};
use hearth_proto::{MAX_MESSAGE_BYTES, TOKEN_METADATA};
use serde_json::Value;
use tonic::transport::server::Router;
use tonic::{Request, Response, Status};

use super::settings::{Scope, Secrets};
use super::{unix_now, FakeHost, InjectKind, Injected, State};
use crate::apis::{ConfigDef, Doc, TextEvent, Triple};

/// The capability to read and overwrite secrets of the core and of other plugins.
const SETTINGS_SECRETS: &str = "settings_secrets";
/// The capability to inject input as someone other than the plugin.
const INPUT_AS_USER: &str = "input_as_user";

/// What every host service serves from.
#[derive(Clone)]
pub(crate) struct Services {
    host: FakeHost,
    token: Arc<str>,
}

/// `router` with the eight host services of `host` added, admitting `token`.
pub(crate) fn add_services(router: Router, host: FakeHost, token: &str) -> Router {
    let s = Services {
        host,
        token: token.into(),
    };
    let max = MAX_MESSAGE_BYTES;
    router
        .add_service(SettingsServer::new(s.clone()))
        .add_service(MemoryServer::new(s.clone()))
        .add_service(TextMemoryServer::new(s.clone()))
        .add_service(
            DocMemoryServer::new(s.clone())
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
        .add_service(
            KnowledgeServer::new(s.clone())
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
        .add_service(LlmServer::new(s.clone()))
        .add_service(
            McpServer::new(s.clone())
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
        .add_service(InputServer::new(s))
}

impl Services {
    /// Records the call, checks the token and `cap`; the state to answer from.
    fn admit<T>(
        &self,
        request: &Request<T>,
        method: &str,
        cap: Option<&str>,
    ) -> Result<MutexGuard<'_, State>, Status> {
        let mut state = self.host.lock();
        state.calls.push(method.to_string());
        let token = request
            .metadata()
            .get(TOKEN_METADATA)
            .and_then(|v| v.to_str().ok());
        if token != Some(&*self.token) {
            return Err(Status::unauthenticated(
                "x-hearth-token does not match any running plugin",
            ));
        }
        if let Some(cap) = cap {
            if !state.capabilities.contains(cap) {
                return Err(Status::permission_denied(format!(
                    "plugin {}: {method} needs capability `{cap}`; add it to `capabilities` in its plugin.json",
                    state.plugin
                )));
            }
        }
        Ok(state)
    }
}

/// `value_json` → a value; errors name the method.
fn value(method: &str, json: &str) -> Result<Value, Status> {
    if json.trim().is_empty() {
        return Err(Status::invalid_argument(format!(
            "{method}: value_json is empty; send JSON text (e.g. \"\\\"text\\\"\", 3, true, null)"
        )));
    }
    serde_json::from_str(json)
        .map_err(|e| Status::invalid_argument(format!("{method}: value_json is not JSON: {e}")))
}

fn value_response(v: Value) -> Response<pb::ValueResponse> {
    Response::new(pb::ValueResponse {
        value_json: v.to_string(),
    })
}

fn keys(keys: Vec<String>) -> Response<pb::KeysResponse> {
    Response::new(pb::KeysResponse { keys })
}

fn empty() -> Response<pb::Empty> {
    Response::new(pb::Empty {})
}

/// The other plugin a `*_plugin` method names; empty is INVALID_ARGUMENT.
fn other(method: &str, plugin: &str) -> Result<Scope, Status> {
    if plugin.trim().is_empty() {
        return Err(Status::invalid_argument(format!(
            "{method}: `plugin` is empty"
        )));
    }
    Ok(Scope::Plugin(plugin.to_string()))
}

/// How the caller reads secrets of `scope`.
fn secrets_for(state: &State, scope: &Scope) -> Secrets {
    let own = matches!(scope, Scope::Plugin(p) if *p == state.plugin);
    if own || state.capabilities.contains(SETTINGS_SECRETS) {
        Secrets::Clear
    } else {
        Secrets::Masked
    }
}

/// Refuses a write of a secret key of `scope` the caller may not overwrite.
fn check_secret_write(state: &State, method: &str, scope: &Scope, key: &str) -> Result<(), Status> {
    if secrets_for(state, scope) == Secrets::Clear || !state.settings.is_secret(scope, key) {
        return Ok(());
    }
    Err(Status::permission_denied(format!(
        "plugin {}: {method}: `{key}` of {scope} is secret; overwriting it needs capability `{SETTINGS_SECRETS}`; add it to `capabilities` in its plugin.json",
        state.plugin
    )))
}

#[tonic::async_trait]
impl pb::settings_server::Settings for Services {
    async fn get(&self, r: Request<pb::KeyRequest>) -> Result<Response<pb::ValueResponse>, Status> {
        let state = self.admit(&r, "Settings.Get", None)?;
        let me = Scope::Plugin(state.plugin.clone());
        Ok(value_response(state.settings.get(&me, &r.get_ref().key)?))
    }

    async fn set(&self, r: Request<pb::SetRequest>) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "Settings.Set", None)?;
        let req = r.get_ref();
        let v = value("Settings.Set", &req.value_json)?;
        let me = Scope::Plugin(state.plugin.clone());
        state.settings.set(&me, &req.key, v)?;
        Ok(empty())
    }

    async fn list(
        &self,
        r: Request<pb::PrefixRequest>,
    ) -> Result<Response<pb::KeysResponse>, Status> {
        let state = self.admit(&r, "Settings.List", None)?;
        let me = Scope::Plugin(state.plugin.clone());
        Ok(keys(state.settings.list(&me, &r.get_ref().prefix)?))
    }

    async fn get_core(
        &self,
        r: Request<pb::KeyRequest>,
    ) -> Result<Response<pb::ValueResponse>, Status> {
        let state = self.admit(&r, "Settings.GetCore", Some("settings_core"))?;
        let secrets = secrets_for(&state, &Scope::Core);
        Ok(value_response(state.settings.read(
            &Scope::Core,
            &r.get_ref().key,
            secrets,
        )?))
    }

    async fn set_core(&self, r: Request<pb::SetRequest>) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "Settings.SetCore", Some("settings_core"))?;
        let req = r.get_ref();
        let v = value("Settings.SetCore", &req.value_json)?;
        check_secret_write(&state, "Settings.SetCore", &Scope::Core, &req.key)?;
        state.settings.set(&Scope::Core, &req.key, v)?;
        Ok(empty())
    }

    async fn list_core(
        &self,
        r: Request<pb::PrefixRequest>,
    ) -> Result<Response<pb::KeysResponse>, Status> {
        let state = self.admit(&r, "Settings.ListCore", Some("settings_core"))?;
        Ok(keys(
            state.settings.list(&Scope::Core, &r.get_ref().prefix)?,
        ))
    }

    async fn get_plugin(
        &self,
        r: Request<pb::KeyRequest>,
    ) -> Result<Response<pb::ValueResponse>, Status> {
        let state = self.admit(&r, "Settings.GetPlugin", Some("settings_cross"))?;
        let req = r.get_ref();
        let scope = other("Settings.GetPlugin", &req.plugin)?;
        let secrets = secrets_for(&state, &scope);
        Ok(value_response(
            state.settings.read(&scope, &req.key, secrets)?,
        ))
    }

    async fn set_plugin(&self, r: Request<pb::SetRequest>) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "Settings.SetPlugin", Some("settings_cross"))?;
        let req = r.get_ref();
        let scope = other("Settings.SetPlugin", &req.plugin)?;
        let v = value("Settings.SetPlugin", &req.value_json)?;
        check_secret_write(&state, "Settings.SetPlugin", &scope, &req.key)?;
        state.settings.set(&scope, &req.key, v)?;
        Ok(empty())
    }

    async fn list_plugin(
        &self,
        r: Request<pb::PrefixRequest>,
    ) -> Result<Response<pb::KeysResponse>, Status> {
        let state = self.admit(&r, "Settings.ListPlugin", Some("settings_cross"))?;
        let req = r.get_ref();
        let scope = other("Settings.ListPlugin", &req.plugin)?;
        Ok(keys(state.settings.list(&scope, &req.prefix)?))
    }

    async fn register_def(&self, r: Request<pb::ConfigDef>) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "Settings.RegisterDef", None)?;
        let wire = r.into_inner();
        let key = wire.key.clone();
        let def = ConfigDef::from_wire(wire).map_err(|e| {
            Status::invalid_argument(format!(
                "Settings.RegisterDef: def `{key}`: default_json is not JSON: {e}"
            ))
        })?;
        let me = Scope::Plugin(state.plugin.clone());
        state.settings.register_def(&me, def)?;
        Ok(empty())
    }

    async fn defs(
        &self,
        r: Request<pb::PrefixRequest>,
    ) -> Result<Response<pb::DefsResponse>, Status> {
        let state = self.admit(&r, "Settings.Defs", None)?;
        let me = Scope::Plugin(state.plugin.clone());
        let defs = state.settings.defs(&me, &r.get_ref().prefix)?;
        Ok(Response::new(pb::DefsResponse {
            defs: defs.iter().map(ConfigDef::to_wire).collect(),
        }))
    }

    async fn dump(&self, r: Request<pb::Empty>) -> Result<Response<pb::DumpResponse>, Status> {
        let state = self.admit(&r, "Settings.Dump", Some("settings_cross"))?;
        Ok(Response::new(pb::DumpResponse {
            dump_json: state.settings.dump().to_string(),
        }))
    }

    async fn plugins(&self, r: Request<pb::Empty>) -> Result<Response<pb::KeysResponse>, Status> {
        let state = self.admit(&r, "Settings.Plugins", None)?;
        Ok(keys(state.settings.plugins()))
    }
}

#[tonic::async_trait]
impl pb::memory_server::Memory for Services {
    async fn recall(
        &self,
        r: Request<pb::RecallRequest>,
    ) -> Result<Response<pb::RecallResponse>, Status> {
        let state = self.admit(&r, "Memory.Recall", Some("memory"))?;
        let req = r.get_ref();
        let (entities, relations) = state.graph.recall(&req.keywords, req.depth);
        Ok(Response::new(pb::RecallResponse {
            entities: entities
                .into_iter()
                .map(|e| pb::Entity {
                    name: e.name,
                    r#type: e.r#type,
                    mention_count: e.mention_count,
                })
                .collect(),
            relations: relations
                .into_iter()
                .map(|x| pb::Relation {
                    source_name: x.source_name,
                    target_name: x.target_name,
                    relation_type: x.relation_type,
                })
                .collect(),
        }))
    }

    async fn commit(
        &self,
        r: Request<pb::CommitRequest>,
    ) -> Result<Response<pb::CommitResponse>, Status> {
        let mut state = self.admit(&r, "Memory.Commit", Some("memory"))?;
        let triples = r
            .into_inner()
            .triples
            .into_iter()
            .map(|t| Triple {
                subject: t.subject,
                relation: t.relation,
                object: t.object,
                subject_type: t.subject_type,
                object_type: t.object_type,
                session_id: t.session_id,
            })
            .collect();
        let added = state.graph.commit(triples)?;
        Ok(Response::new(pb::CommitResponse {
            committed: added.min(u64::from(u32::MAX)) as u32,
        }))
    }

    async fn introspect(
        &self,
        r: Request<pb::Empty>,
    ) -> Result<Response<pb::IntrospectResponse>, Status> {
        let state = self.admit(&r, "Memory.Introspect", Some("memory"))?;
        Ok(Response::new(pb::IntrospectResponse {
            stats_json: state.graph.introspect().to_string(),
        }))
    }

    async fn merge_entities(
        &self,
        r: Request<pb::MergeRequest>,
    ) -> Result<Response<pb::CountResponse>, Status> {
        let mut state = self.admit(&r, "Memory.MergeEntities", Some("memory"))?;
        let req = r.get_ref();
        let moved = state.graph.merge(&req.source, &req.target)?;
        Ok(Response::new(pb::CountResponse {
            count: moved as i64,
        }))
    }

    async fn purge(
        &self,
        r: Request<pb::PurgeRequest>,
    ) -> Result<Response<pb::CountResponse>, Status> {
        let mut state = self.admit(&r, "Memory.Purge", Some("memory"))?;
        let req = r.into_inner();
        let criteria = req.criteria.into_iter().collect();
        let n = state.graph.purge(&criteria, &req.mode)?;
        Ok(Response::new(pb::CountResponse { count: n as i64 }))
    }
}

#[tonic::async_trait]
impl pb::text_memory_server::TextMemory for Services {
    async fn append(&self, r: Request<pb::TextEvent>) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "TextMemory.Append", Some("memory"))?;
        let e = r.into_inner();
        if e.role.trim().is_empty() {
            return Err(Status::invalid_argument(
                "TextMemory.Append: `role` is empty (system, user or assistant)",
            ));
        }
        state.text.push(TextEvent {
            role: e.role,
            content: e.content,
            timestamp: if e.timestamp == 0 {
                unix_now()
            } else {
                e.timestamp
            },
            channel: e.channel,
        });
        Ok(empty())
    }
}

#[tonic::async_trait]
impl pb::doc_memory_server::DocMemory for Services {
    async fn query(&self, r: Request<pb::DocQuery>) -> Result<Response<pb::DocsResponse>, Status> {
        let state = self.admit(&r, "DocMemory.Query", Some("memory"))?;
        let req = r.get_ref();
        Ok(Response::new(pb::DocsResponse {
            docs: state
                .docs
                .query(&req.text, req.top_k)
                .into_iter()
                .map(|d| pb::Doc {
                    id: d.id,
                    title: d.title,
                    content: d.content,
                    score: d.score,
                })
                .collect(),
        }))
    }

    async fn insert(&self, r: Request<pb::Doc>) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "DocMemory.Insert", Some("memory"))?;
        let d = r.into_inner();
        state.docs.insert(Doc {
            id: d.id,
            title: d.title,
            content: d.content,
            score: 0.0,
        })?;
        Ok(empty())
    }

    async fn remove(&self, r: Request<pb::IdRequest>) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "DocMemory.Remove", Some("memory"))?;
        state.docs.remove(&r.get_ref().id)?;
        Ok(empty())
    }

    async fn stats(&self, r: Request<pb::Empty>) -> Result<Response<pb::StatsResponse>, Status> {
        let state = self.admit(&r, "DocMemory.Stats", Some("memory"))?;
        Ok(Response::new(pb::StatsResponse {
            stats_json: state.docs.stats().to_string(),
        }))
    }
}

#[tonic::async_trait]
impl pb::knowledge_server::Knowledge for Services {
    async fn search(
        &self,
        r: Request<pb::KnowledgeQuery>,
    ) -> Result<Response<pb::KnowledgeResponse>, Status> {
        let state = self.admit(&r, "Knowledge.Search", Some("knowledge"))?;
        let req = r.get_ref();
        Ok(Response::new(pb::KnowledgeResponse {
            entries: state
                .knowledge
                .search(&req.query, req.top_k)
                .into_iter()
                .map(|k| pb::KnowledgeEntry {
                    name: k.name,
                    content: k.content,
                    score: k.score,
                })
                .collect(),
        }))
    }

    async fn add(&self, r: Request<pb::KnowledgeEntry>) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "Knowledge.Add", Some("knowledge"))?;
        let e = r.get_ref();
        state.knowledge.add(&e.name, &e.content)?;
        Ok(empty())
    }

    async fn list(&self, r: Request<pb::Empty>) -> Result<Response<pb::KeysResponse>, Status> {
        let state = self.admit(&r, "Knowledge.List", Some("knowledge"))?;
        Ok(keys(state.knowledge.list()))
    }
}

#[tonic::async_trait]
impl pb::llm_server::Llm for Services {
    async fn list_sources(
        &self,
        r: Request<pb::Empty>,
    ) -> Result<Response<pb::KeysResponse>, Status> {
        let state = self.admit(&r, "Llm.ListSources", Some("llm"))?;
        Ok(keys(state.llm_sources.clone()))
    }

    async fn set_source(
        &self,
        r: Request<pb::SourceRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let mut state = self.admit(&r, "Llm.SetSource", Some("llm"))?;
        let name = &r.get_ref().name;
        if !state.llm_sources.contains(name) {
            return Err(Status::not_found(format!(
                "plugin {}: set_source: unknown LLM source `{name}` (known: {})",
                state.plugin,
                state.llm_sources.join(", ")
            )));
        }
        state.llm_current = Some(name.clone());
        Ok(empty())
    }

    async fn current_source(
        &self,
        r: Request<pb::Empty>,
    ) -> Result<Response<pb::SourceRequest>, Status> {
        let state = self.admit(&r, "Llm.CurrentSource", Some("llm"))?;
        let name = state
            .llm_current
            .clone()
            .or_else(|| state.llm_sources.first().cloned())
            .unwrap_or_default();
        Ok(Response::new(pb::SourceRequest { name }))
    }
}

#[tonic::async_trait]
impl pb::mcp_server::Mcp for Services {
    async fn request(
        &self,
        r: Request<pb::McpRequest>,
    ) -> Result<Response<pb::McpResponse>, Status> {
        let mut state = self.admit(&r, "Mcp.Request", Some("mcp"))?;
        let req = r.get_ref();
        let result = state
            .mcp
            .request(&req.server, &req.method, &req.params_json)?;
        Ok(Response::new(pb::McpResponse {
            result_json: result.to_string(),
        }))
    }
}

impl Services {
    /// `Input.*`: the broker's checks (capability `input`, non-empty text, speaking as
    /// someone else needs `input_as_user`), then the input recorded.
    fn inject(
        &self,
        r: Request<pb::InjectRequest>,
        kind: InjectKind,
    ) -> Result<Response<pb::Empty>, Status> {
        let method = match kind {
            InjectKind::Interrupt => "Input.InjectInterruptText",
            InjectKind::NoMemory => "Input.InjectTextNoMemory",
            InjectKind::Text => "Input.InjectText",
        };
        let mut state = self.admit(&r, method, Some("input"))?;
        let req = r.into_inner();
        let plugin = state.plugin.clone();
        if req.text.trim().is_empty() {
            return Err(Status::invalid_argument(format!(
                "plugin {plugin}: inject: text is empty"
            )));
        }
        let priority = match Priority::try_from(req.priority) {
            Ok(Priority::Unspecified) => Priority::Background,
            Ok(p) => p,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                "priority {} is not a level: 1 background, 2 message, 3 interactive, 4 critical",
                req.priority
            )))
            }
        };
        let as_user = state.capabilities.contains(INPUT_AS_USER);
        let identity = format!("plugin:{plugin}");
        let own = |s: &str| s.is_empty() || s == plugin || s == identity;
        for (field, value) in [("source", &req.source), ("user_id", &req.user_id)] {
            if !as_user && !own(value) {
                return Err(Status::permission_denied(format!(
                    "plugin {plugin}: {method}: `{field}` {value:?} is not this plugin ({identity}); injecting as another user or source needs capability `{INPUT_AS_USER}`; add it to `capabilities` in its plugin.json, or leave `{field}` empty"
                )));
            }
        }
        let source = if own(&req.source) {
            identity.clone()
        } else {
            req.source.clone()
        };
        let user_id = match req.user_id {
            u if u.is_empty() => source.clone(),
            u if own(&u) => identity,
            u => u,
        };
        let channel = if req.channel.is_empty() {
            plugin
        } else {
            req.channel
        };
        state.injected.push(Injected {
            kind,
            source,
            user_id,
            group_id: req.group_id,
            channel,
            text: req.text,
            priority,
        });
        Ok(empty())
    }
}

#[tonic::async_trait]
impl pb::input_server::Input for Services {
    async fn inject_text(
        &self,
        r: Request<pb::InjectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.inject(r, InjectKind::Text)
    }

    async fn inject_text_no_memory(
        &self,
        r: Request<pb::InjectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.inject(r, InjectKind::NoMemory)
    }

    async fn inject_interrupt_text(
        &self,
        r: Request<pb::InjectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.inject(r, InjectKind::Interrupt)
    }
}
