//! Typed host-service APIs with the seed's names (HomeAgent `SettingsAPI`, `MemoryAPI`,
//! `TextMemoryAPI`, `DocMemoryAPI`, `KnowledgeAPI`, `LLMAPI`), plus [`Mcp`] (MCP servers'
//! resources and prompts), over the generated clients of [`Host`].
//!
//! [`Host::settings`] gives a [`Settings`], [`Host::memory`] a [`Memory`], and so on.
//! Methods are `async`, take the seed's arguments and return plain values:
//! settings values as [`serde_json::Value`] with their JSON type, records with the
//! seed's JSON field names ([`ConfigDef`], [`Entity`], [`Relation`], [`Doc`],
//! [`KnowledgeEntry`]), counts as integers. Every failure is a [`HostError`] carrying
//! the gRPC code and the broker's message.

use std::fmt;

use hearth_proto::v1 as pb;
use hearth_proto::v1::{
    doc_memory_client::DocMemoryClient, knowledge_client::KnowledgeClient, llm_client::LlmClient,
    mcp_client::McpClient, memory_client::MemoryClient, settings_client::SettingsClient,
    text_memory_client::TextMemoryClient,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::host::{Host, HostChannel};

/// A host-service call failed: the method, the gRPC code and the broker's message.
///
/// Displays as `plugin P: settings.get: NOT_FOUND: no `k` in config_p`.
#[derive(Debug, Clone)]
pub struct HostError {
    plugin: String,
    method: String,
    code: tonic::Code,
    message: String,
}

impl HostError {
    /// An error of `method` (e.g. `settings.get`) of plugin `plugin`.
    pub fn new(
        plugin: impl Into<String>,
        method: impl Into<String>,
        code: tonic::Code,
        message: impl Into<String>,
    ) -> HostError {
        HostError {
            plugin: plugin.into(),
            method: method.into(),
            code,
            message: message.into(),
        }
    }

    fn from_status(host: &Host, method: &str, status: tonic::Status) -> HostError {
        let mut message = status.message().to_string();
        if status.code() == tonic::Code::Unimplemented {
            message.push_str(" (the broker does not serve this host service)");
        }
        HostError::new(host.plugin(), method, status.code(), message)
    }

    /// The gRPC status code.
    pub fn code(&self) -> tonic::Code {
        self.code
    }

    /// The status name as the gRPC spec writes it: `NOT_FOUND`, `PERMISSION_DENIED`, …
    pub fn code_name(&self) -> &'static str {
        code_name(self.code)
    }

    /// The broker's message (or the SDK's, for errors raised before the call).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The method that failed, e.g. `settings.get_core`.
    pub fn method(&self) -> &str {
        &self.method
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plugin {}: {}: {}: {}",
            self.plugin,
            self.method,
            self.code_name(),
            self.message
        )
    }
}

impl std::error::Error for HostError {}

/// `NOT_FOUND` for [`tonic::Code::NotFound`], and so on.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

// ---------------------------------------------------------------- records

/// A setting's definition (seed `ConfigDef`). Serializes with the seed's JSON names,
/// empty fields left out (the seed's `omitempty`; `min`/`max`/`step` when `Some`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigDef {
    /// The key it defines in this plugin's table.
    pub key: String,
    /// Written as the value when the key is unset at registration; `None` = no default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// `string` (sent when empty), `number`, `integer` or `boolean`: the broker refuses
    /// to set the key to a value of another JSON type (INVALID_ARGUMENT; `null` always
    /// fits). Any other type is a hint for a settings UI.
    pub r#type: String,
    /// Label in a settings UI.
    pub display_name: String,
    /// Longer help text.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Group in a settings UI.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub category: String,
    /// Allowed values (a drop-down; not checked by the broker).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Smallest allowed number (not checked by the broker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest allowed number (not checked by the broker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Step of a number input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
    /// The plugin needs a value to work.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// Sensitive (an API key …): masked in `dump`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
}

impl ConfigDef {
    pub(crate) fn to_wire(&self) -> pb::ConfigDef {
        pb::ConfigDef {
            key: self.key.clone(),
            default_json: self
                .default
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
            r#type: if self.r#type.is_empty() {
                "string".into()
            } else {
                self.r#type.clone()
            },
            display_name: self.display_name.clone(),
            description: self.description.clone(),
            category: self.category.clone(),
            options: self.options.clone(),
            min: self.min,
            max: self.max,
            step: self.step,
            required: self.required,
            secret: self.secret,
        }
    }

    pub(crate) fn from_wire(w: pb::ConfigDef) -> Result<ConfigDef, serde_json::Error> {
        Ok(ConfigDef {
            default: if w.default_json.is_empty() {
                None
            } else {
                Some(serde_json::from_str(&w.default_json)?)
            },
            key: w.key,
            r#type: w.r#type,
            display_name: w.display_name,
            description: w.description,
            category: w.category,
            options: w.options,
            min: w.min,
            max: w.max,
            step: w.step,
            required: w.required,
            secret: w.secret,
        })
    }
}

/// A graph-memory node (seed `Entity`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entity {
    /// Name, as first written.
    pub name: String,
    /// Person / Location / Concept …; empty if no triple gave one.
    pub r#type: String,
    /// How many committed triples named it.
    pub mention_count: i64,
}

/// A graph-memory edge (seed `Relation`): `source_name` —`relation_type`→ `target_name`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relation {
    /// Subject entity.
    pub source_name: String,
    /// Object entity.
    pub target_name: String,
    /// likes / works_at / friend_of …
    pub relation_type: String,
}

/// A fact to commit (seed `Triple`, plus the optional types and session of the wire).
/// `("Alice", "likes", "tea").into()` makes one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Triple {
    /// Subject entity name.
    pub subject: String,
    /// Relation type.
    pub relation: String,
    /// Object entity name.
    pub object: String,
    /// Subject's type; empty = leave it as it is.
    pub subject_type: String,
    /// Object's type; empty = leave it as it is.
    pub object_type: String,
    /// Session the fact came from (for purging by session).
    pub session_id: String,
}

impl Triple {
    /// A triple without types or session.
    pub fn new(
        subject: impl Into<String>,
        relation: impl Into<String>,
        object: impl Into<String>,
    ) -> Triple {
        Triple {
            subject: subject.into(),
            relation: relation.into(),
            object: object.into(),
            ..Triple::default()
        }
    }
}

impl<S: Into<String>, R: Into<String>, O: Into<String>> From<(S, R, O)> for Triple {
    fn from((s, r, o): (S, R, O)) -> Triple {
        Triple::new(s, r, o)
    }
}

/// A TextMemory line (seed `TextEvent`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TextEvent {
    /// system / user / assistant.
    pub role: String,
    /// What was said.
    pub content: String,
    /// Unix seconds; 0 = the time of the append.
    pub timestamp: i64,
    /// Source channel.
    pub channel: String,
}

/// A DocMemory document (seed `Doc`); `score` is set in query results (> 0, higher =
/// better).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Doc {
    /// Unique id; empty on insert = generated.
    pub id: String,
    /// Short title.
    pub title: String,
    /// The text.
    pub content: String,
    /// Relevance to the query.
    pub score: f64,
}

/// A knowledge entry (seed `Knowledge`) with its search `score`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KnowledgeEntry {
    /// Entry name.
    pub name: String,
    /// Its text.
    pub content: String,
    /// Relevance to the query (> 0, higher = better); 0 outside search results.
    pub score: f64,
}

// ---------------------------------------------------------------- helpers

/// JSON text of a value for the wire.
fn to_json(host: &Host, method: &str, value: impl Serialize) -> Result<String, HostError> {
    serde_json::to_string(&value).map_err(|e| {
        HostError::new(
            host.plugin(),
            method,
            tonic::Code::InvalidArgument,
            format!("value is not JSON: {e}"),
        )
    })
}

/// A value from the broker's JSON text (empty = null).
fn from_json(host: &Host, method: &str, text: &str) -> Result<Value, HostError> {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text).map_err(|e| {
        HostError::new(
            host.plugin(),
            method,
            tonic::Code::Internal,
            format!("the broker sent invalid JSON: {e}"),
        )
    })
}

macro_rules! rpc {
    ($self:ident, $method:literal, $call:expr) => {
        $call
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| HostError::from_status(&$self.host, $method, s))
    };
}

// ---------------------------------------------------------------- services

/// HomeAgent `SettingsAPI` ([`Host::settings`]): this plugin's settings, core settings
/// (`*_core`; `set_core` needs capability `settings_core`), other plugins' settings
/// (`*_plugin` and `dump` need `settings_cross`), definitions and plugins.
#[derive(Debug, Clone)]
pub struct Settings {
    pub(crate) host: Host,
}

impl Settings {
    /// The generated client, for wire-level calls.
    pub fn client(&self) -> SettingsClient<HostChannel> {
        self.host.settings_client()
    }

    /// The value of `key` in this plugin's table, with its JSON type; `NOT_FOUND`
    /// when unset.
    pub async fn get(&self, key: &str) -> Result<Value, HostError> {
        let req = pb::KeyRequest {
            key: key.into(),
            plugin: String::new(),
        };
        let r = rpc!(self, "settings.get", self.client().get(req))?;
        from_json(&self.host, "settings.get", &r.value_json)
    }

    /// Sets `key` to any JSON value (`null` included).
    pub async fn set(&self, key: &str, value: impl Serialize) -> Result<(), HostError> {
        let value_json = to_json(&self.host, "settings.set", value)?;
        let req = pb::SetRequest {
            key: key.into(),
            value_json,
            plugin: String::new(),
        };
        rpc!(self, "settings.set", self.client().set(req)).map(drop)
    }

    /// Keys of this plugin's table starting with `prefix` (`""` = all), sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, HostError> {
        let req = pb::PrefixRequest {
            prefix: prefix.into(),
            plugin: String::new(),
        };
        rpc!(self, "settings.list", self.client().list(req)).map(|r| r.keys)
    }

    /// A core setting (`core.daemon.data_dir` …; capability `settings_core`). A secret
    /// reads as `"••••••"` without capability `settings_secrets`.
    pub async fn get_core(&self, key: &str) -> Result<Value, HostError> {
        let req = pb::KeyRequest {
            key: key.into(),
            plugin: String::new(),
        };
        let r = rpc!(self, "settings.get_core", self.client().get_core(req))?;
        from_json(&self.host, "settings.get_core", &r.value_json)
    }

    /// Sets a core setting (capability `settings_core`; a secret one also needs
    /// `settings_secrets`).
    pub async fn set_core(&self, key: &str, value: impl Serialize) -> Result<(), HostError> {
        let value_json = to_json(&self.host, "settings.set_core", value)?;
        let req = pb::SetRequest {
            key: key.into(),
            value_json,
            plugin: String::new(),
        };
        rpc!(self, "settings.set_core", self.client().set_core(req)).map(drop)
    }

    /// Core keys starting with `prefix`, sorted (capability `settings_core`).
    pub async fn list_core(&self, prefix: &str) -> Result<Vec<String>, HostError> {
        let req = pb::PrefixRequest {
            prefix: prefix.into(),
            plugin: String::new(),
        };
        rpc!(self, "settings.list_core", self.client().list_core(req)).map(|r| r.keys)
    }

    /// `key` of plugin `plugin`'s table (capability `settings_cross`). A secret reads as
    /// `"••••••"` without capability `settings_secrets`.
    pub async fn get_plugin(&self, plugin: &str, key: &str) -> Result<Value, HostError> {
        let req = pb::KeyRequest {
            key: key.into(),
            plugin: plugin.into(),
        };
        let r = rpc!(self, "settings.get_plugin", self.client().get_plugin(req))?;
        from_json(&self.host, "settings.get_plugin", &r.value_json)
    }

    /// Sets `key` of plugin `plugin`'s table (capability `settings_cross`; a secret key
    /// also needs `settings_secrets`).
    pub async fn set_plugin(
        &self,
        plugin: &str,
        key: &str,
        value: impl Serialize,
    ) -> Result<(), HostError> {
        let value_json = to_json(&self.host, "settings.set_plugin", value)?;
        let req = pb::SetRequest {
            key: key.into(),
            value_json,
            plugin: plugin.into(),
        };
        rpc!(self, "settings.set_plugin", self.client().set_plugin(req)).map(drop)
    }

    /// Keys of plugin `plugin`'s table starting with `prefix` (capability
    /// `settings_cross`).
    pub async fn list_plugin(&self, plugin: &str, prefix: &str) -> Result<Vec<String>, HostError> {
        let req = pb::PrefixRequest {
            prefix: prefix.into(),
            plugin: plugin.into(),
        };
        rpc!(self, "settings.list_plugin", self.client().list_plugin(req)).map(|r| r.keys)
    }

    /// Declares a setting of this plugin; its default is written only when the key is
    /// unset (a value already set is kept).
    pub async fn register_def(&self, def: ConfigDef) -> Result<(), HostError> {
        if def.key.is_empty() {
            return Err(HostError::new(
                self.host.plugin(),
                "settings.register_def",
                tonic::Code::InvalidArgument,
                "ConfigDef needs a key",
            ));
        }
        let req = def.to_wire();
        rpc!(
            self,
            "settings.register_def",
            self.client().register_def(req)
        )
        .map(drop)
    }

    /// This plugin's definitions whose key starts with `prefix`, sorted by key.
    pub async fn defs(&self, prefix: &str) -> Result<Vec<ConfigDef>, HostError> {
        let req = pb::PrefixRequest {
            prefix: prefix.into(),
            plugin: String::new(),
        };
        let r = rpc!(self, "settings.defs", self.client().defs(req))?;
        r.defs
            .into_iter()
            .map(|w| {
                ConfigDef::from_wire(w).map_err(|e| {
                    HostError::new(
                        self.host.plugin(),
                        "settings.defs",
                        tonic::Code::Internal,
                        format!("the broker sent an invalid default: {e}"),
                    )
                })
            })
            .collect()
    }

    /// Every setting, secrets masked: `{"core": {…}, "plugins": {name: {…}}}`
    /// (capability `settings_cross`).
    pub async fn dump(&self) -> Result<Value, HostError> {
        let r = rpc!(self, "settings.dump", self.client().dump(pb::Empty {}))?;
        from_json(&self.host, "settings.dump", &r.dump_json)
    }

    /// Names of the plugins that have settings.
    pub async fn plugins(&self) -> Result<Vec<String>, HostError> {
        rpc!(
            self,
            "settings.plugins",
            self.client().plugins(pb::Empty {})
        )
        .map(|r| r.keys)
    }
}

/// HomeAgent `MemoryAPI` ([`Host::memory`]): graph memory (capability `memory`).
#[derive(Debug, Clone)]
pub struct Memory {
    pub(crate) host: Host,
}

impl Memory {
    /// The generated client, for wire-level calls.
    pub fn client(&self) -> MemoryClient<HostChannel> {
        self.host.memory_client()
    }

    /// The entities whose names contain any of `keywords` (case-insensitively) and
    /// what lies within `depth` relations of them: `(entities, relations)`.
    pub async fn recall<K: Into<String>>(
        &self,
        keywords: impl IntoIterator<Item = K>,
        depth: u32,
    ) -> Result<(Vec<Entity>, Vec<Relation>), HostError> {
        let req = pb::RecallRequest {
            keywords: keywords.into_iter().map(Into::into).collect(),
            depth,
        };
        let r = rpc!(self, "memory.recall", self.client().recall(req))?;
        Ok((
            r.entities
                .into_iter()
                .map(|e| Entity {
                    name: e.name,
                    r#type: e.r#type,
                    mention_count: e.mention_count,
                })
                .collect(),
            r.relations
                .into_iter()
                .map(|x| Relation {
                    source_name: x.source_name,
                    target_name: x.target_name,
                    relation_type: x.relation_type,
                })
                .collect(),
        ))
    }

    /// Stores triples; returns how many relations were added (duplicates of active ones
    /// are not).
    pub async fn commit<T: Into<Triple>>(
        &self,
        triples: impl IntoIterator<Item = T>,
    ) -> Result<u32, HostError> {
        let triples = triples
            .into_iter()
            .map(|t| {
                let t = t.into();
                pb::Triple {
                    subject: t.subject,
                    relation: t.relation,
                    object: t.object,
                    subject_type: t.subject_type,
                    object_type: t.object_type,
                    session_id: t.session_id,
                }
            })
            .collect();
        let req = pb::CommitRequest { triples };
        rpc!(self, "memory.commit", self.client().commit(req)).map(|r| r.committed)
    }

    /// Counts of the graph as a JSON object (entities, relations, …).
    pub async fn introspect(&self) -> Result<Value, HostError> {
        let r = rpc!(
            self,
            "memory.introspect",
            self.client().introspect(pb::Empty {})
        )?;
        from_json(&self.host, "memory.introspect", &r.stats_json)
    }

    /// Merges entity `source` into `target`; returns how many relations moved.
    pub async fn merge_entities(&self, source: &str, target: &str) -> Result<i64, HostError> {
        let req = pb::MergeRequest {
            source: source.into(),
            target: target.into(),
        };
        rpc!(
            self,
            "memory.merge_entities",
            self.client().merge_entities(req)
        )
        .map(|r| r.count)
    }

    /// Removes the relations matching every criterion (`subject_contains`,
    /// `target_contains`, `relation_type`, `session_id`); `mode` `"soft"` marks them
    /// inactive, `"hard"` deletes them. Returns how many.
    pub async fn purge<K: Into<String>, V: Into<String>>(
        &self,
        criteria: impl IntoIterator<Item = (K, V)>,
        mode: &str,
    ) -> Result<i64, HostError> {
        let req = pb::PurgeRequest {
            criteria: criteria
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            mode: mode.into(),
        };
        rpc!(self, "memory.purge", self.client().purge(req)).map(|r| r.count)
    }
}

/// HomeAgent `TextMemoryAPI` ([`Host::text_memory`]; capability `memory`).
#[derive(Debug, Clone)]
pub struct TextMemory {
    pub(crate) host: Host,
}

impl TextMemory {
    /// The generated client, for wire-level calls.
    pub fn client(&self) -> TextMemoryClient<HostChannel> {
        self.host.text_memory_client()
    }

    /// Appends an event to the text log.
    pub async fn append(&self, event: TextEvent) -> Result<(), HostError> {
        let req = pb::TextEvent {
            role: event.role,
            content: event.content,
            timestamp: event.timestamp,
            channel: event.channel,
        };
        rpc!(self, "text_memory.append", self.client().append(req)).map(drop)
    }
}

/// HomeAgent `DocMemoryAPI` ([`Host::doc_memory`]; capability `memory`).
#[derive(Debug, Clone)]
pub struct DocMemory {
    pub(crate) host: Host,
}

impl DocMemory {
    /// The generated client, for wire-level calls.
    pub fn client(&self) -> DocMemoryClient<HostChannel> {
        self.host.doc_memory_client()
    }

    /// The documents that best match `text`, best first, with their scores.
    pub async fn query(&self, text: &str, top_k: u32) -> Result<Vec<Doc>, HostError> {
        let req = pb::DocQuery {
            text: text.into(),
            top_k,
        };
        let r = rpc!(self, "doc_memory.query", self.client().query(req))?;
        Ok(r.docs
            .into_iter()
            .map(|d| Doc {
                id: d.id,
                title: d.title,
                content: d.content,
                score: d.score,
            })
            .collect())
    }

    /// Stores a document; the same id replaces, an empty id gets a generated one.
    pub async fn insert(&self, doc: Doc) -> Result<(), HostError> {
        let req = pb::Doc {
            id: doc.id,
            title: doc.title,
            content: doc.content,
            score: 0.0,
        };
        rpc!(self, "doc_memory.insert", self.client().insert(req)).map(drop)
    }

    /// Deletes document `id` (`NOT_FOUND` if there is none).
    pub async fn remove(&self, id: &str) -> Result<(), HostError> {
        let req = pb::IdRequest { id: id.into() };
        rpc!(self, "doc_memory.remove", self.client().remove(req)).map(drop)
    }

    /// Counts and sizes as a JSON object (docs, text_bytes, …).
    pub async fn stats(&self) -> Result<Value, HostError> {
        let r = rpc!(self, "doc_memory.stats", self.client().stats(pb::Empty {}))?;
        from_json(&self.host, "doc_memory.stats", &r.stats_json)
    }
}

/// HomeAgent `KnowledgeAPI` ([`Host::knowledge`]; capability `knowledge`).
#[derive(Debug, Clone)]
pub struct Knowledge {
    pub(crate) host: Host,
}

impl Knowledge {
    /// The generated client, for wire-level calls.
    pub fn client(&self) -> KnowledgeClient<HostChannel> {
        self.host.knowledge_client()
    }

    /// The entries that best match `query`, best first, with their scores.
    pub async fn search(&self, query: &str, top_k: u32) -> Result<Vec<KnowledgeEntry>, HostError> {
        let req = pb::KnowledgeQuery {
            query: query.into(),
            top_k,
        };
        let r = rpc!(self, "knowledge.search", self.client().search(req))?;
        Ok(r.entries
            .into_iter()
            .map(|e| KnowledgeEntry {
                name: e.name,
                content: e.content,
                score: e.score,
            })
            .collect())
    }

    /// Adds (or replaces) entry `name`.
    pub async fn add(&self, name: &str, content: &str) -> Result<(), HostError> {
        let req = pb::KnowledgeEntry {
            name: name.into(),
            content: content.into(),
            score: 0.0,
        };
        rpc!(self, "knowledge.add", self.client().add(req)).map(drop)
    }

    /// Names of all entries.
    pub async fn list(&self) -> Result<Vec<String>, HostError> {
        rpc!(self, "knowledge.list", self.client().list(pb::Empty {})).map(|r| r.keys)
    }
}

/// HomeAgent `LLMAPI` ([`Host::llm`]; capability `llm`).
#[derive(Debug, Clone)]
pub struct Llm {
    pub(crate) host: Host,
}

impl Llm {
    /// The generated client, for wire-level calls.
    pub fn client(&self) -> LlmClient<HostChannel> {
        self.host.llm_client()
    }

    /// Names of the LLM sources, in priority order.
    pub async fn list_sources(&self) -> Result<Vec<String>, HostError> {
        rpc!(
            self,
            "llm.list_sources",
            self.client().list_sources(pb::Empty {})
        )
        .map(|r| r.keys)
    }

    /// Makes `name` the source requests go to first.
    pub async fn set_source(&self, name: &str) -> Result<(), HostError> {
        let req = pb::SourceRequest { name: name.into() };
        rpc!(self, "llm.set_source", self.client().set_source(req)).map(drop)
    }

    /// The source requests go to first (empty when there is none).
    pub async fn current_source(&self) -> Result<String, HostError> {
        rpc!(
            self,
            "llm.current_source",
            self.client().current_source(pb::Empty {})
        )
        .map(|r| r.name)
    }
}

/// The MCP methods [`Mcp::request`] may send; the broker refuses others
/// (`INVALID_ARGUMENT`).
pub const MCP_METHODS: &[&str] = &[
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
];

/// Most pages a listing helper of [`Mcp`] follows (`nextCursor`).
const MCP_MAX_PAGES: usize = 1000;

/// Resources and prompts of the MCP servers the broker runs as plugins (`"runtime":
/// "mcp"`), each named by its plugin name ([`Host::mcp`]; capability `mcp`). Read-only:
/// the methods of [`MCP_METHODS`].
///
/// Results are MCP's JSON as [`serde_json::Value`]s, with MCP's field names (`uri`,
/// `mimeType`, `text`, `messages`, …). The listing helpers follow `nextCursor` and return
/// every page's items. Errors are [`HostError`]s of method `mcp.request`: `NOT_FOUND` (no
/// MCP plugin of that name), `INVALID_ARGUMENT` (a method outside [`MCP_METHODS`], params
/// not an object), `UNAVAILABLE` (the server is not connected), `FAILED_PRECONDITION`
/// (the server's own error, its message in [`HostError::message`]), `PERMISSION_DENIED`
/// (no capability `mcp`).
#[derive(Debug, Clone)]
pub struct Mcp {
    pub(crate) host: Host,
}

impl Mcp {
    /// The generated client, for wire-level calls.
    pub fn client(&self) -> McpClient<HostChannel> {
        self.host.mcp_client()
    }

    /// Sends `method` (one of [`MCP_METHODS`]) with `params` (a JSON object, e.g.
    /// `json!({"uri": "…"})`; `()` or `Value::Null` = `{}`) to MCP server `server`;
    /// returns its result object.
    pub async fn request(
        &self,
        server: &str,
        method: &str,
        params: impl Serialize,
    ) -> Result<Value, HostError> {
        let params = serde_json::to_value(params).map_err(|e| {
            HostError::new(
                self.host.plugin(),
                "mcp.request",
                tonic::Code::InvalidArgument,
                format!("params are not JSON: {e}"),
            )
        })?;
        let req = pb::McpRequest {
            server: server.into(),
            method: method.into(),
            params_json: if params.is_null() {
                String::new()
            } else {
                params.to_string()
            },
        };
        let r = rpc!(self, "mcp.request", self.client().request(req))?;
        from_json(&self.host, "mcp.request", &r.result_json).map(|v| {
            if v.is_null() {
                json!({})
            } else {
                v
            }
        })
    }

    /// Every item of `key` over the pages of list method `method`.
    async fn items(&self, server: &str, method: &str, key: &str) -> Result<Vec<Value>, HostError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MCP_MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => Value::Null,
            };
            let mut result = self.request(server, method, params).await?;
            match result.get_mut(key).map(Value::take) {
                Some(Value::Array(page)) => items.extend(page),
                None | Some(Value::Null) => {}
                Some(_) => {
                    return Err(HostError::new(
                        self.host.plugin(),
                        "mcp.request",
                        tonic::Code::Internal,
                        format!("{method} of MCP server {server}: no `{key}` list in the result"),
                    ))
                }
            }
            let next = match result.get("nextCursor") {
                Some(Value::String(c)) if !c.is_empty() => c.clone(),
                _ => break,
            };
            if cursor.as_deref() == Some(next.as_str()) {
                break;
            }
            cursor = Some(next);
        }
        Ok(items)
    }

    /// The server's resources (`resources/list`): objects with `uri`, `name`,
    /// `mimeType`, …
    pub async fn resources(&self, server: &str) -> Result<Vec<Value>, HostError> {
        self.items(server, "resources/list", "resources").await
    }

    /// The server's resource templates (`resources/templates/list`): objects with
    /// `uriTemplate`, `name`, …
    pub async fn resource_templates(&self, server: &str) -> Result<Vec<Value>, HostError> {
        self.items(server, "resources/templates/list", "resourceTemplates")
            .await
    }

    /// The contents of resource `uri` (`resources/read`): objects with `uri`,
    /// `mimeType` and `text` (or `blob`, base64).
    pub async fn read_resource(&self, server: &str, uri: &str) -> Result<Vec<Value>, HostError> {
        let mut result = self
            .request(server, "resources/read", json!({ "uri": uri }))
            .await?;
        Ok(match result.get_mut("contents").map(Value::take) {
            Some(Value::Array(contents)) => contents,
            _ => Vec::new(),
        })
    }

    /// The server's prompts (`prompts/list`): objects with `name`, `description`,
    /// `arguments`, …
    pub async fn prompts(&self, server: &str) -> Result<Vec<Value>, HostError> {
        self.items(server, "prompts/list", "prompts").await
    }

    /// Prompt `name` filled with `arguments` (a JSON object of strings, e.g.
    /// `json!({"name": "Ann"})`; `()` = none) (`prompts/get`): the result, with
    /// `description` and `messages` (each with `role` and `content`).
    pub async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: impl Serialize,
    ) -> Result<Value, HostError> {
        let arguments = match serde_json::to_value(arguments) {
            Ok(Value::Null) => json!({}),
            Ok(v) => v,
            Err(e) => {
                return Err(HostError::new(
                    self.host.plugin(),
                    "mcp.request",
                    tonic::Code::InvalidArgument,
                    format!("arguments are not JSON: {e}"),
                ))
            }
        };
        self.request(
            server,
            "prompts/get",
            json!({ "name": name, "arguments": arguments }),
        )
        .await
    }
}

#[cfg(test)]
#[path = "apis_tests.rs"]
mod tests;
