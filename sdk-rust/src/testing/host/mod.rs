//! The fake host services: in-memory stores that answer the plugin's host-service calls
//! as the broker does (`broker/src/grpc/host.rs`, `grpc/agent.rs` and
//! `broker/src/storage/`), with the broker's capability checks, error codes and
//! messages.
//!
//! - `settings`: core and per-plugin settings, `ConfigDef`s, secrets.
//! - `graph`: graph memory.
//! - `search`: DocMemory and Knowledge (a simpler ranking than the broker's bm25).
//! - `mcp`: MCP servers with canned resources, prompts and results (the Mcp service).
//! - `services`: the tonic services over [`FakeHost`], one per `hearth.v1` host
//!   service, checking the token and the capabilities.

mod graph;
mod mcp;
mod search;
mod services;
mod settings;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use crate::apis::{ConfigDef, Doc, Entity, KnowledgeEntry, Relation, TextEvent, Triple};
use crate::testing::HarnessError;
use hearth_proto::v1::Priority;

pub use mcp::McpCall;
pub(crate) use services::add_services;
pub(crate) use settings::SECRET_MASK;
use settings::{Scope, Secrets, SettingsStore};

/// Capabilities a plugin gets when its manifest has no `capabilities` field (the
/// broker's `DEFAULT_CAPABILITIES`).
pub const DEFAULT_CAPABILITIES: &[&str] = &["memory", "knowledge", "llm", "input"];

/// Every capability the broker knows (`broker/src/manifest.rs`, `CAPABILITIES`).
pub const ALL_CAPABILITIES: &[&str] = &[
    "memory",
    "knowledge",
    "mcp",
    "llm",
    "input",
    "input_as_user",
    "settings_core",
    "settings_cross",
    "settings_secrets",
];

/// Which `Input` method a plugin used ([`Injected::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectKind {
    /// `InjectText`: queued, remembered.
    Text,
    /// `InjectTextNoMemory`: queued, left out of memory.
    NoMemory,
    /// `InjectInterruptText`: cuts into the running turn.
    Interrupt,
}

/// One input a plugin injected through the `Input` host service, as the broker would
/// queue it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Injected {
    /// Which method.
    pub kind: InjectKind,
    /// Who it speaks as: `plugin:<name>` unless the plugin named someone else (which
    /// needs capability `input_as_user`).
    pub source: String,
    /// Whose private conversation (or who in the group): `plugin:<name>` by default.
    pub user_id: String,
    /// The group, empty for a private chat.
    pub group_id: String,
    /// The channel; the plugin's name when it gave none.
    pub channel: String,
    /// The text.
    pub text: String,
    /// Scheduling priority; `Background` when the plugin gave none.
    pub priority: Priority,
}

/// Everything the fake host keeps.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Name of the plugin the token stands for.
    pub(crate) plugin: String,
    pub(crate) capabilities: BTreeSet<String>,
    pub(crate) settings: SettingsStore,
    pub(crate) graph: graph::Graph,
    pub(crate) docs: search::Docs,
    pub(crate) knowledge: search::KnowledgeBase,
    pub(crate) text: Vec<TextEvent>,
    pub(crate) injected: Vec<Injected>,
    pub(crate) llm_sources: Vec<String>,
    pub(crate) llm_current: Option<String>,
    pub(crate) mcp: mcp::McpServers,
    /// Host-service methods called, in order (`Settings.Get`, …).
    pub(crate) calls: Vec<String>,
}

/// In-memory host services for one plugin: what the broker's `Settings`, `Memory`,
/// `TextMemory`, `DocMemory`, `Knowledge`, `Llm`, `Input` and `Mcp` services would store
/// and answer (MCP servers: canned, see [`add_mcp_resource`](Self::add_mcp_resource)). Cheap to clone (one shared state).
///
/// A [`Harness`](super::Harness) serves one to its plugin;
/// [`host`](super::Harness::host) gives it back to look at what the plugin stored or to
/// change what it will read. The plugin sees the broker's behaviour: the same error codes and
/// messages, capabilities checked per method (the broker's defaults, `memory`,
/// `knowledge`, `llm` and `input`, unless set otherwise), secrets masked where the
/// broker masks them, a setting whose `ConfigDef` has type `string`, `number`,
/// `integer` or `boolean` refusing values of another JSON type (INVALID_ARGUMENT). One
/// deliberate difference: DocMemory and Knowledge rank matches with a simpler score
/// than the broker's bm25 (the same documents match; close scores may order
/// differently, and English words are not stemmed).
///
/// The methods here act as the host itself (no capability checks) and never fail
/// unless they say so. Settings methods without a scope address the plugin's own
/// table.
#[derive(Debug, Clone)]
pub struct FakeHost {
    state: Arc<Mutex<State>>,
}

impl FakeHost {
    /// A fake host for plugin `plugin`, with the default capabilities and nothing
    /// stored.
    pub fn new(plugin: impl Into<String>) -> FakeHost {
        let state = State {
            plugin: plugin.into(),
            capabilities: DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()).collect(),
            ..State::default()
        };
        FakeHost {
            state: Arc::new(Mutex::new(state)),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data: keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Name of the plugin this host serves.
    pub fn plugin(&self) -> String {
        self.lock().plugin.clone()
    }

    /// Replaces the plugin's capabilities (manifest `capabilities`), e.g.
    /// `["settings_core"]`; see [`ALL_CAPABILITIES`].
    pub fn set_capabilities<C: Into<String>>(&self, capabilities: impl IntoIterator<Item = C>) {
        self.lock().capabilities = capabilities.into_iter().map(Into::into).collect();
    }

    /// The plugin's capabilities, sorted.
    pub fn capabilities(&self) -> Vec<String> {
        self.lock().capabilities.iter().cloned().collect()
    }

    /// Host-service methods the plugin called so far, in order, named as the broker
    /// names them: `Settings.Get`, `Memory.Commit`, `Input.InjectText`, … (refused
    /// calls included).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    // ------------------------------------------------------------ settings

    fn own(&self) -> Scope {
        Scope::Plugin(self.plugin())
    }

    /// Sets `key` of the plugin's own settings, as if the user had.
    ///
    /// Errors: [`HarnessError::Host`] when `value` is not JSON, its JSON type is not
    /// the one the key's `ConfigDef` declares (`string`, `number`, `integer`,
    /// `boolean`; `null` always fits), or `key` is empty.
    pub fn set_setting(&self, key: &str, value: impl Serialize) -> Result<(), HarnessError> {
        let scope = self.own();
        self.set_in("set_setting", &scope, key, value)
    }

    /// Sets core setting `key` (e.g. `llm.openai.api_key`). Errors as
    /// [`set_setting`](Self::set_setting).
    pub fn set_core_setting(&self, key: &str, value: impl Serialize) -> Result<(), HarnessError> {
        self.set_in("set_core_setting", &Scope::Core, key, value)
    }

    /// Sets `key` of another plugin's settings. Errors as
    /// [`set_setting`](Self::set_setting), and for an empty `plugin`.
    pub fn set_plugin_setting(
        &self,
        plugin: &str,
        key: &str,
        value: impl Serialize,
    ) -> Result<(), HarnessError> {
        self.set_in(
            "set_plugin_setting",
            &Scope::Plugin(plugin.into()),
            key,
            value,
        )
    }

    fn set_in(
        &self,
        method: &str,
        scope: &Scope,
        key: &str,
        value: impl Serialize,
    ) -> Result<(), HarnessError> {
        let value = serde_json::to_value(value).map_err(|e| HarnessError::Host {
            detail: format!("{method}: `{key}`: value is not JSON: {e}"),
        })?;
        self.lock()
            .settings
            .set(scope, key, value)
            .map_err(|s| HarnessError::Host {
                detail: s.message().to_string(),
            })
    }

    /// The plugin's own setting `key` in clear, `None` when unset.
    pub fn setting(&self, key: &str) -> Option<Value> {
        let scope = self.own();
        self.lock().settings.get(&scope, key).ok()
    }

    /// Core setting `key` in clear, `None` when unset.
    pub fn core_setting(&self, key: &str) -> Option<Value> {
        self.lock().settings.get(&Scope::Core, key).ok()
    }

    /// Setting `key` of plugin `plugin` in clear, `None` when unset.
    pub fn plugin_setting(&self, plugin: &str, key: &str) -> Option<Value> {
        self.lock()
            .settings
            .get(&Scope::Plugin(plugin.into()), key)
            .ok()
    }

    /// Declares a `ConfigDef` for the plugin's own `key`, as `Settings.RegisterDef`
    /// does: recorded, and its default written when the key is unset.
    ///
    /// Errors: [`HarnessError::Host`] for an empty key.
    pub fn register_def(&self, def: ConfigDef) -> Result<(), HarnessError> {
        let scope = self.own();
        self.lock()
            .settings
            .register_def(&scope, def)
            .map_err(|s| HarnessError::Host {
                detail: s.message().to_string(),
            })
    }

    /// The plugin's own `ConfigDef`s, by key.
    pub fn defs(&self) -> Vec<ConfigDef> {
        let scope = self.own();
        self.lock().settings.defs(&scope, "").unwrap_or_default()
    }

    /// Every setting as `Settings.Dump` answers it: `{"core": {…}, "plugins": {name:
    /// {…}}}`, each secret value shown as `"••••••"`.
    pub fn dump(&self) -> Value {
        self.lock().settings.dump()
    }

    /// Whether the plugin's own `key` is secret (its `ConfigDef` says so).
    pub fn is_secret(&self, key: &str) -> bool {
        let scope = self.own();
        self.lock().settings.is_secret(&scope, key)
    }

    /// The plugin's own `key` as another plugin without `settings_secrets` would read
    /// it: `"••••••"` for a secret. `None` when unset.
    pub fn masked_setting(&self, key: &str) -> Option<Value> {
        let scope = self.own();
        self.lock().settings.read(&scope, key, Secrets::Masked).ok()
    }

    // ------------------------------------------------------------ memory

    /// Commits triples to graph memory as `Memory.Commit` does; returns how many
    /// relations were added.
    ///
    /// Errors: [`HarnessError::Host`] naming a triple with an empty subject, relation
    /// or object (then nothing is stored).
    pub fn commit<T: Into<Triple>>(
        &self,
        triples: impl IntoIterator<Item = T>,
    ) -> Result<u64, HarnessError> {
        self.lock()
            .graph
            .commit(triples.into_iter().map(Into::into).collect())
            .map_err(|s| HarnessError::Host {
                detail: s.message().to_string(),
            })
    }

    /// Every graph entity, oldest first.
    pub fn entities(&self) -> Vec<Entity> {
        self.lock().graph.entities()
    }

    /// Every active graph relation, oldest first.
    pub fn relations(&self) -> Vec<Relation> {
        self.lock().graph.relations()
    }

    /// The events the plugin appended to TextMemory, in order (a timestamp of 0 is
    /// replaced by the time of the append, as the broker does).
    pub fn text_events(&self) -> Vec<TextEvent> {
        self.lock().text.clone()
    }

    /// Stores a DocMemory document (the same id replaces; an empty id gets a
    /// generated one, returned).
    ///
    /// Errors: [`HarnessError::Host`] when title and content are both blank.
    pub fn insert_doc(&self, doc: Doc) -> Result<String, HarnessError> {
        self.lock()
            .docs
            .insert(doc)
            .map_err(|s| HarnessError::Host {
                detail: s.message().to_string(),
            })
    }

    /// Every DocMemory document, in insertion order.
    pub fn docs(&self) -> Vec<Doc> {
        self.lock().docs.all()
    }

    /// Adds (or replaces) knowledge entry `name`; returns the name it is stored under
    /// (sanitized as the broker does: `天气/北京` → `天气_北京`).
    ///
    /// Errors: [`HarnessError::Host`] for a name with nothing left once sanitized.
    pub fn add_knowledge(&self, name: &str, content: &str) -> Result<String, HarnessError> {
        self.lock()
            .knowledge
            .add(name, content)
            .map_err(|s| HarnessError::Host {
                detail: s.message().to_string(),
            })
    }

    /// Every knowledge entry, by name.
    pub fn knowledge(&self) -> Vec<KnowledgeEntry> {
        self.lock().knowledge.all()
    }

    // ------------------------------------------------------------ llm, input

    /// Sets the LLM sources, in priority order (none by default); the first is
    /// current until the plugin chooses another.
    pub fn set_llm_sources<S: Into<String>>(&self, names: impl IntoIterator<Item = S>) {
        let mut state = self.lock();
        state.llm_sources = names.into_iter().map(Into::into).collect();
        state.llm_current = None;
    }

    /// The source requests go to first (`Llm.CurrentSource`); empty when there is none.
    pub fn current_llm_source(&self) -> String {
        let state = self.lock();
        state
            .llm_current
            .clone()
            .or_else(|| state.llm_sources.first().cloned())
            .unwrap_or_default()
    }

    /// The inputs the plugin injected, in order.
    pub fn injected(&self) -> Vec<Injected> {
        self.lock().injected.clone()
    }

    // ------------------------------------------------------------ mcp

    /// Declares MCP plugin `server` (connected, nothing listed) for the `Mcp` service
    /// (`Host::mcp`); the other `*_mcp_*` seeding methods declare it too. A server never
    /// declared answers `NOT_FOUND`, as the broker does for a name that is no MCP plugin.
    pub fn add_mcp_server(&self, server: &str) {
        self.lock().mcp.server(server);
    }

    /// A text resource of MCP server `server` (`text/plain`, named by its URI): listed by
    /// `resources/list`, `text` read by `resources/read`. An unknown URI answers the
    /// server's error, `FAILED_PRECONDITION`.
    pub fn add_mcp_resource(&self, server: &str, uri: &str, text: &str) {
        self.lock().mcp.add_resource(server, uri, text);
    }

    /// A prompt of MCP server `server`: listed by `prompts/list` (with `description`
    /// unless empty), answered by `prompts/get` with `result`: a string (the text of one
    /// user message), an array (the messages) or a whole result object. An unknown name
    /// answers `FAILED_PRECONDITION`.
    pub fn add_mcp_prompt(&self, server: &str, name: &str, description: &str, result: Value) {
        self.lock()
            .mcp
            .add_prompt(server, name, description, result);
    }

    /// Answers `method` of MCP server `server` with `result` from now on, instead of the
    /// seeded resources and prompts (`None` removes it), e.g. `resources/templates/list`.
    ///
    /// Errors: [`HarnessError::Host`] for a method the broker never passes on (not one
    /// of [`MCP_METHODS`](crate::MCP_METHODS)).
    pub fn set_mcp_result(
        &self,
        server: &str,
        method: &str,
        result: Option<Value>,
    ) -> Result<(), HarnessError> {
        if !crate::MCP_METHODS.contains(&method) {
            return Err(HarnessError::Host {
                detail: format!(
                    "set_mcp_result: `{method}` is not one of {}",
                    crate::MCP_METHODS.join(", ")
                ),
            });
        }
        self.lock().mcp.set_result(server, method, result);
        Ok(())
    }

    /// Connects or disconnects MCP server `server`: a disconnected one answers
    /// `UNAVAILABLE` (as while the broker restarts it).
    pub fn set_mcp_connected(&self, server: &str, connected: bool) {
        self.lock().mcp.server(server).connected = connected;
    }

    /// The requests the plugin sent through the `Mcp` service, in order.
    pub fn mcp_requests(&self) -> Vec<McpCall> {
        self.lock().mcp.requests.clone()
    }
}

/// Now, in Unix seconds.
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
