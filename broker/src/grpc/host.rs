//! The HomeAgent host services for plugins (seed homeagent-plugin-sdk-api.md, PluginSDK
//! `Settings()`, `Memory()`, `TextMemory()`, `DocMemory()`, `Knowledge()`): decode,
//! check the caller's capability, call storage, map errors (NOT_FOUND for a missing
//! key, INVALID_ARGUMENT for bad input naming the method and field).
//!
//! Capabilities (see [`crate::manifest::CAPABILITIES`]): a plugin's own settings
//! (secrets included, in clear) and `Settings.Plugins` need none; core settings
//! (`Settings.GetCore`, `ListCore`, `SetCore`) need `settings_core`; other plugins'
//! settings and `Settings.Dump` need `settings_cross`; `Memory`, `TextMemory` and
//! `DocMemory` need `memory`; `Knowledge` needs `knowledge`.
//!
//! Secrets (a key whose def says `secret`, or a core key named like a credential, see
//! [`crate::storage::secret_by_name`]) of the core or of another plugin are a
//! capability of their own, `settings_secrets`: without it `GetCore`/`GetPlugin`
//! answer the JSON string [`SECRET_MASK`](crate::storage::SECRET_MASK) (`"••••••"`)
//! for a secret key, and `SetCore`/`SetPlugin` of a secret key are PERMISSION_DENIED.
//! `Settings.Dump` masks secrets for every caller; `ListCore`/`ListPlugin` return keys
//! only. A plugin naming itself in `GetPlugin`/`SetPlugin` is served as for its own
//! settings.
//! Setting values are never logged.

use std::sync::Arc;

use hearth_proto::v1::{
    doc_memory_server::{DocMemory as DocMemoryRpc, DocMemoryServer},
    knowledge_server::{Knowledge as KnowledgeRpc, KnowledgeServer},
    mcp_server::{Mcp as McpRpc, McpServer},
    memory_server::{Memory as MemoryRpc, MemoryServer},
    settings_server::{Settings as SettingsRpc, SettingsServer},
    text_memory_server::{TextMemory as TextMemoryRpc, TextMemoryServer},
    CommitRequest, CommitResponse, ConfigDef as WireDef, CountResponse, DefsResponse,
    Doc as WireDoc, DocQuery, DocsResponse, DumpResponse, Empty, Entity as WireEntity, IdRequest,
    IntrospectResponse, KeyRequest, KeysResponse, KnowledgeEntry, KnowledgeQuery,
    KnowledgeResponse, MergeRequest, PrefixRequest, PurgeRequest, RecallRequest, RecallResponse,
    Relation as WireRelation, SetRequest, StatsResponse, TextEvent as WireTextEvent, ValueResponse,
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use super::plugin_caller;
use crate::storage::{
    ConfigDef, Doc, DocMemory, GraphMemory, Knowledge, PurgeCriteria, PurgeMode, Scope, Secrets,
    Settings, TextEvent, TextMemory, Triple,
};
use crate::supervisor::Supervisor;

/// Everything the host services serve from; cheap to clone (one per service).
#[derive(Debug, Clone)]
pub struct HostServices {
    supervisor: Arc<Supervisor>,
    settings: Settings,
    memory: GraphMemory,
    text_memory: TextMemory,
    docs: DocMemory,
    knowledge: Knowledge,
}

impl HostServices {
    /// Host services of `supervisor`'s plugins over these stores.
    pub fn new(
        supervisor: Arc<Supervisor>,
        settings: Settings,
        memory: GraphMemory,
        text_memory: TextMemory,
        docs: DocMemory,
        knowledge: Knowledge,
    ) -> HostServices {
        HostServices {
            supervisor,
            settings,
            memory,
            text_memory,
            docs,
            knowledge,
        }
    }

    /// These services, `input` and `llm` as tonic routes, each behind `auth` (the plugin
    /// token check): what plugins call, served on the broker's listeners and called in
    /// process for plugins on plugin hosts ([`crate::remote::relay`]).
    pub fn routes(
        &self,
        input: super::InputService,
        llm: super::LlmService,
        auth: super::PluginAuth,
    ) -> tonic::service::Routes {
        use hearth_proto::v1::{input_server::InputServer, llm_server::LlmServer};
        use tonic::service::interceptor::InterceptedService;
        let max = hearth_proto::MAX_MESSAGE_BYTES;
        tonic::service::Routes::new(InterceptedService::new(
            SettingsServer::new(self.clone()),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            MemoryServer::new(self.clone()),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            TextMemoryServer::new(self.clone()),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            DocMemoryServer::new(self.clone()).max_decoding_message_size(max),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            KnowledgeServer::new(self.clone()).max_decoding_message_size(max),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            McpServer::new(self.clone()),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            InputServer::new(input),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(LlmServer::new(llm), auth))
    }

    fn caller<T>(
        &self,
        request: &Request<T>,
        method: &str,
        cap: Option<&str>,
    ) -> Result<String, Status> {
        plugin_caller(&self.supervisor, request, method, cap)
    }

    /// How `plugin` reads secrets of `scope`: in clear when they are its own or it
    /// holds `settings_secrets`, else masked.
    fn secrets_for(&self, plugin: &str, scope: &Scope) -> Secrets {
        let own = matches!(scope, Scope::Plugin(p) if p == plugin);
        if own || super::holds(&self.supervisor, plugin, SETTINGS_SECRETS) {
            Secrets::Clear
        } else {
            Secrets::Masked
        }
    }

    /// Refuses a write by `plugin` (in `method`) of the secret `key` of `scope` unless
    /// it may overwrite secrets there ([`HostServices::secrets_for`]).
    async fn check_secret_write(
        &self,
        plugin: &str,
        method: &str,
        scope: &Scope,
        key: &str,
    ) -> Result<(), Status> {
        if self.secrets_for(plugin, scope) == Secrets::Clear
            || !self.settings.is_secret(scope, key).await?
        {
            return Ok(());
        }
        tracing::warn!(plugin = %plugin, key = %key, "{method} refused: secret of {scope}, capability `{SETTINGS_SECRETS}` not granted");
        Err(Status::permission_denied(format!(
            "plugin {plugin}: {method}: `{key}` of {scope} is secret; overwriting it needs capability `{SETTINGS_SECRETS}`; add it to `capabilities` in its plugin.json"
        )))
    }
}

/// The capability to read and overwrite secrets of the core and of other plugins.
const SETTINGS_SECRETS: &str = "settings_secrets";

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

fn value_response(v: Value) -> Response<ValueResponse> {
    Response::new(ValueResponse {
        value_json: v.to_string(),
    })
}

fn keys(keys: Vec<String>) -> Response<KeysResponse> {
    Response::new(KeysResponse { keys })
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

#[tonic::async_trait]
impl SettingsRpc for HostServices {
    async fn get(&self, r: Request<KeyRequest>) -> Result<Response<ValueResponse>, Status> {
        let me = self.caller(&r, "Settings.Get", None)?;
        let v = self
            .settings
            .get(&Scope::Plugin(me), &r.get_ref().key)
            .await?;
        Ok(value_response(v))
    }

    async fn set(&self, r: Request<SetRequest>) -> Result<Response<Empty>, Status> {
        let me = self.caller(&r, "Settings.Set", None)?;
        let req = r.into_inner();
        let v = value("Settings.Set", &req.value_json)?;
        self.settings.set(&Scope::Plugin(me), &req.key, v).await?;
        Ok(Response::new(Empty {}))
    }

    async fn list(&self, r: Request<PrefixRequest>) -> Result<Response<KeysResponse>, Status> {
        let me = self.caller(&r, "Settings.List", None)?;
        Ok(keys(
            self.settings
                .list(&Scope::Plugin(me), &r.get_ref().prefix)
                .await?,
        ))
    }

    async fn get_core(&self, r: Request<KeyRequest>) -> Result<Response<ValueResponse>, Status> {
        let me = self.caller(&r, "Settings.GetCore", Some("settings_core"))?;
        let secrets = self.secrets_for(&me, &Scope::Core);
        let v = self
            .settings
            .read(&Scope::Core, &r.get_ref().key, secrets)
            .await?;
        Ok(value_response(v))
    }

    async fn set_core(&self, r: Request<SetRequest>) -> Result<Response<Empty>, Status> {
        let me = self.caller(&r, "Settings.SetCore", Some("settings_core"))?;
        let req = r.into_inner();
        let v = value("Settings.SetCore", &req.value_json)?;
        self.check_secret_write(&me, "Settings.SetCore", &Scope::Core, &req.key)
            .await?;
        self.settings.set(&Scope::Core, &req.key, v).await?;
        tracing::info!(plugin = %me, key = %req.key, "core setting written");
        Ok(Response::new(Empty {}))
    }

    async fn list_core(&self, r: Request<PrefixRequest>) -> Result<Response<KeysResponse>, Status> {
        self.caller(&r, "Settings.ListCore", Some("settings_core"))?;
        Ok(keys(
            self.settings
                .list(&Scope::Core, &r.get_ref().prefix)
                .await?,
        ))
    }

    async fn get_plugin(&self, r: Request<KeyRequest>) -> Result<Response<ValueResponse>, Status> {
        let me = self.caller(&r, "Settings.GetPlugin", Some("settings_cross"))?;
        let req = r.get_ref();
        let scope = other("Settings.GetPlugin", &req.plugin)?;
        let v = self
            .settings
            .read(&scope, &req.key, self.secrets_for(&me, &scope))
            .await?;
        Ok(value_response(v))
    }

    async fn set_plugin(&self, r: Request<SetRequest>) -> Result<Response<Empty>, Status> {
        let me = self.caller(&r, "Settings.SetPlugin", Some("settings_cross"))?;
        let req = r.into_inner();
        let scope = other("Settings.SetPlugin", &req.plugin)?;
        let v = value("Settings.SetPlugin", &req.value_json)?;
        self.check_secret_write(&me, "Settings.SetPlugin", &scope, &req.key)
            .await?;
        self.settings.set(&scope, &req.key, v).await?;
        tracing::info!(plugin = %me, key = %req.key, "setting of {scope} written");
        Ok(Response::new(Empty {}))
    }

    async fn list_plugin(
        &self,
        r: Request<PrefixRequest>,
    ) -> Result<Response<KeysResponse>, Status> {
        self.caller(&r, "Settings.ListPlugin", Some("settings_cross"))?;
        let req = r.get_ref();
        let scope = other("Settings.ListPlugin", &req.plugin)?;
        Ok(keys(self.settings.list(&scope, &req.prefix).await?))
    }

    async fn register_def(&self, r: Request<WireDef>) -> Result<Response<Empty>, Status> {
        let me = self.caller(&r, "Settings.RegisterDef", None)?;
        let def = ConfigDef::from_wire(r.into_inner())
            .map_err(|e| Status::invalid_argument(format!("Settings.RegisterDef: {e}")))?;
        self.settings.register_def(&Scope::Plugin(me), def).await?;
        Ok(Response::new(Empty {}))
    }

    async fn defs(&self, r: Request<PrefixRequest>) -> Result<Response<DefsResponse>, Status> {
        let me = self.caller(&r, "Settings.Defs", None)?;
        let defs = self
            .settings
            .defs(&Scope::Plugin(me), &r.get_ref().prefix)
            .await?;
        Ok(Response::new(DefsResponse {
            defs: defs.into_iter().map(ConfigDef::into_wire).collect(),
        }))
    }

    async fn dump(&self, r: Request<Empty>) -> Result<Response<DumpResponse>, Status> {
        self.caller(&r, "Settings.Dump", Some("settings_cross"))?;
        Ok(Response::new(DumpResponse {
            dump_json: self.settings.dump().await?.to_string(),
        }))
    }

    async fn plugins(&self, r: Request<Empty>) -> Result<Response<KeysResponse>, Status> {
        self.caller(&r, "Settings.Plugins", None)?;
        Ok(keys(self.settings.plugins().await?))
    }
}

#[tonic::async_trait]
impl MemoryRpc for HostServices {
    async fn recall(&self, r: Request<RecallRequest>) -> Result<Response<RecallResponse>, Status> {
        self.caller(&r, "Memory.Recall", Some("memory"))?;
        let req = r.into_inner();
        let g = self.memory.recall(req.keywords, req.depth).await?;
        Ok(Response::new(RecallResponse {
            entities: g
                .entities
                .into_iter()
                .map(|e| WireEntity {
                    name: e.name,
                    r#type: e.r#type,
                    mention_count: e.mention_count,
                })
                .collect(),
            relations: g
                .relations
                .into_iter()
                .map(|r| WireRelation {
                    source_name: r.source_name,
                    target_name: r.target_name,
                    relation_type: r.relation_type,
                })
                .collect(),
        }))
    }

    async fn commit(&self, r: Request<CommitRequest>) -> Result<Response<CommitResponse>, Status> {
        self.caller(&r, "Memory.Commit", Some("memory"))?;
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
        let added = self.memory.commit(triples).await?;
        Ok(Response::new(CommitResponse {
            committed: added.min(u32::MAX as u64) as u32,
        }))
    }

    async fn introspect(&self, r: Request<Empty>) -> Result<Response<IntrospectResponse>, Status> {
        self.caller(&r, "Memory.Introspect", Some("memory"))?;
        let stats = self.memory.introspect().await?;
        Ok(Response::new(IntrospectResponse {
            stats_json: serde_json::to_string(&stats).unwrap_or_default(),
        }))
    }

    async fn merge_entities(
        &self,
        r: Request<MergeRequest>,
    ) -> Result<Response<CountResponse>, Status> {
        self.caller(&r, "Memory.MergeEntities", Some("memory"))?;
        let req = r.get_ref();
        let moved = self.memory.merge_entities(&req.source, &req.target).await?;
        Ok(Response::new(CountResponse {
            count: moved as i64,
        }))
    }

    async fn purge(&self, r: Request<PurgeRequest>) -> Result<Response<CountResponse>, Status> {
        self.caller(&r, "Memory.Purge", Some("memory"))?;
        let req = r.into_inner();
        let criteria = PurgeCriteria::from_map(req.criteria)?;
        let mode: PurgeMode = req.mode.parse()?;
        let n = self.memory.purge(&criteria, mode).await?;
        Ok(Response::new(CountResponse { count: n as i64 }))
    }
}

#[tonic::async_trait]
impl TextMemoryRpc for HostServices {
    async fn append(&self, r: Request<WireTextEvent>) -> Result<Response<Empty>, Status> {
        self.caller(&r, "TextMemory.Append", Some("memory"))?;
        let e = r.into_inner();
        if e.role.trim().is_empty() {
            return Err(Status::invalid_argument(
                "TextMemory.Append: `role` is empty (system, user or assistant)",
            ));
        }
        self.text_memory
            .append(&TextEvent {
                role: e.role,
                content: e.content,
                timestamp: e.timestamp,
                channel: e.channel,
                injected_by: String::new(),
            })
            .await?;
        Ok(Response::new(Empty {}))
    }
}

fn wire_doc(d: Doc) -> WireDoc {
    WireDoc {
        id: d.id,
        title: d.title,
        content: d.content,
        score: d.score,
    }
}

#[tonic::async_trait]
impl DocMemoryRpc for HostServices {
    async fn query(&self, r: Request<DocQuery>) -> Result<Response<DocsResponse>, Status> {
        self.caller(&r, "DocMemory.Query", Some("memory"))?;
        let req = r.get_ref();
        let docs = self.docs.query(&req.text, req.top_k).await?;
        Ok(Response::new(DocsResponse {
            docs: docs.into_iter().map(wire_doc).collect(),
        }))
    }

    async fn insert(&self, r: Request<WireDoc>) -> Result<Response<Empty>, Status> {
        self.caller(&r, "DocMemory.Insert", Some("memory"))?;
        let d = r.into_inner();
        self.docs
            .insert(Doc {
                id: d.id,
                title: d.title,
                content: d.content,
                score: 0.0,
            })
            .await?;
        Ok(Response::new(Empty {}))
    }

    async fn remove(&self, r: Request<IdRequest>) -> Result<Response<Empty>, Status> {
        self.caller(&r, "DocMemory.Remove", Some("memory"))?;
        self.docs.remove(&r.get_ref().id).await?;
        Ok(Response::new(Empty {}))
    }

    async fn stats(&self, r: Request<Empty>) -> Result<Response<StatsResponse>, Status> {
        self.caller(&r, "DocMemory.Stats", Some("memory"))?;
        Ok(Response::new(StatsResponse {
            stats_json: self.docs.stats().await?.to_string(),
        }))
    }
}

#[tonic::async_trait]
impl KnowledgeRpc for HostServices {
    async fn search(
        &self,
        r: Request<KnowledgeQuery>,
    ) -> Result<Response<KnowledgeResponse>, Status> {
        self.caller(&r, "Knowledge.Search", Some("knowledge"))?;
        let req = r.get_ref();
        let found = self.knowledge.search(&req.query, req.top_k).await?;
        Ok(Response::new(KnowledgeResponse {
            entries: found
                .into_iter()
                .map(|k| KnowledgeEntry {
                    name: k.name,
                    content: k.content,
                    score: k.score,
                })
                .collect(),
        }))
    }

    async fn add(&self, r: Request<KnowledgeEntry>) -> Result<Response<Empty>, Status> {
        let me = self.caller(&r, "Knowledge.Add", Some("knowledge"))?;
        let e = r.into_inner();
        self.knowledge.add(&e.name, &e.content).await?;
        tracing::info!(plugin = %me, entry = %e.name, "knowledge entry added");
        Ok(Response::new(Empty {}))
    }

    async fn list(&self, r: Request<Empty>) -> Result<Response<KeysResponse>, Status> {
        self.caller(&r, "Knowledge.List", Some("knowledge"))?;
        Ok(keys(self.knowledge.list().await?))
    }
}

/// `Mcp`: MCP servers' resources and prompts for plugins with capability `mcp`.
#[tonic::async_trait]
impl McpRpc for HostServices {
    async fn request(
        &self,
        request: Request<hearth_proto::v1::McpRequest>,
    ) -> Result<Response<hearth_proto::v1::McpResponse>, Status> {
        self.caller(&request, "Mcp.Request", Some("mcp"))?;
        let req = request.into_inner();
        let result =
            crate::mcp::host::request(&self.supervisor, &req.server, &req.method, &req.params_json)
                .await?;
        Ok(Response::new(hearth_proto::v1::McpResponse {
            result_json: result.to_string(),
        }))
    }
}
