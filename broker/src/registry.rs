//! The registry: which plugin owns which tool (with its compiled schema), which
//! stage hooks each plugin registered, and each plugin's LinkZone triggers and
//! `ai.inject` spec.
//!
//! One lock owns each map. A plugin's registration replaces all of its previous
//! tools (and hooks) in one step, so callers never see a half-registered plugin.
//!
//! What every turn reads is kept ready-made and rebuilt only when a registration
//! changes it: the tool definitions the LLM is offered ([`Registry::llm_tools`]), the
//! hooks of each stage in run order ([`Registry::stage_hooks`]) and the trigger sets
//! in plugin load order ([`Registry::trigger_sets`]). So a turn does no work for a
//! stage no plugin hooks, and never rebuilds the tool list per LLM round.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::{json, Value};

use hearth_proto::v1::{
    AiTool, InjectSpec, RejectedItem, Stage, StageHook, ToolAnnotations, ToolSpec, Trigger,
};
use tokio::sync::watch;

use crate::schema::{linkzone_description, linkzone_schema, ArgsSchema};
use crate::triggers::TriggerSet;

/// A registered tool.
#[derive(Debug)]
pub struct Tool {
    /// Unique tool name.
    pub name: String,
    /// Owning plugin.
    pub plugin: String,
    /// What the LLM reads.
    pub description: String,
    /// Compiled argument schema.
    pub schema: ArgsSchema,
    /// LinkZone policies, when the tool came from `ai.tool`.
    pub ai_tool: Option<AiTool>,
    /// Must not run concurrently with other calls of a turn.
    pub serial: bool,
    /// Display name for people (MCP `title`); empty = none.
    pub title: String,
    /// JSON Schema of the structured result (MCP `outputSchema`).
    pub output_schema: Option<Value>,
    /// MCP behaviour hints as registered, if any.
    pub annotations: Option<ToolAnnotations>,
}

impl Tool {
    /// The MCP annotations to show for this tool: the registered ones, else derived
    /// from `ai.tool` (`confirm` → `destructiveHint`: the user must approve it because
    /// it changes something); `None` when neither says anything.
    pub fn effective_annotations(&self) -> Option<ToolAnnotations> {
        if let Some(a) = &self.annotations {
            return Some(*a);
        }
        let ai = self.ai_tool.as_ref().filter(|ai| ai.confirm)?;
        Some(ToolAnnotations {
            read_only_hint: Some(false),
            destructive_hint: Some(ai.confirm),
            ..Default::default()
        })
    }
}

impl Tool {
    /// The tool as a wire spec again (what a plugin host announces to brokers): the
    /// compiled schema as `parameters_json`, so an `ai.tool` tool's derived schema and
    /// description travel as they are.
    pub fn to_spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters_json: self.schema.schema().to_string(),
            ai_tool: self.ai_tool.clone(),
            serial: self.serial,
            title: self.title.clone(),
            output_schema_json: self
                .output_schema
                .as_ref()
                .map(|v| v.to_string())
                .unwrap_or_default(),
            annotations: self.annotations,
        }
    }
}

/// Tool names must be usable as LLM function names (OpenAI, Anthropic, Gemini all
/// accept this set).
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("tool name is empty".into());
    }
    if name.len() > 64 {
        return Err(format!("tool name is {} bytes; at most 64", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "tool name contains {c:?}; use letters, digits, `_` and `-`"
        ));
    }
    Ok(())
}

fn rejected(name: &str, reason: String) -> RejectedItem {
    RejectedItem {
        kind: "tool".into(),
        name: name.into(),
        reason,
    }
}

/// Builds a [`Tool`] from its wire spec (without the uniqueness check).
fn build(plugin: &str, spec: &ToolSpec) -> Result<Tool, String> {
    check_name(&spec.name)?;
    let output_schema = match spec.output_schema_json.trim() {
        "" => None,
        json => match serde_json::from_str::<Value>(json) {
            Ok(v) if v.is_object() => Some(v),
            Ok(_) => return Err("output schema must be a JSON object".into()),
            Err(e) => return Err(format!("output schema is not JSON: {e}")),
        },
    };
    let (schema, description) = match (&spec.ai_tool, spec.parameters_json.trim()) {
        (Some(ai), "") => {
            let schema = ArgsSchema::from_value(linkzone_schema(ai)?)?;
            let description = if spec.description.is_empty() {
                linkzone_description(ai)
            } else {
                spec.description.clone()
            };
            (schema, description)
        }
        (_, json) => (ArgsSchema::compile(json)?, spec.description.clone()),
    };
    Ok(Tool {
        name: spec.name.clone(),
        plugin: plugin.to_string(),
        description,
        schema,
        ai_tool: spec.ai_tool.clone(),
        serial: spec.serial,
        title: spec.title.clone(),
        output_schema,
        annotations: spec.annotations,
    })
}

/// Whether two registrations of a tool say the same to callers (LLM, MCP clients).
fn same_tool(a: &Tool, b: &Tool) -> bool {
    a.description == b.description
        && a.schema.schema() == b.schema.schema()
        && a.ai_tool == b.ai_tool
        && a.serial == b.serial
        && a.title == b.title
        && a.output_schema == b.output_schema
        && a.annotations == b.annotations
}

/// A registered stage hook (HomeAgent `RegisterStage` / `RegisterStageOwnTools`).
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    /// Owning plugin.
    pub plugin: String,
    /// The stage it runs at.
    pub stage: Stage,
    /// The plugin's id for it, echoed in `RunStage`.
    pub hook_id: String,
    /// Sees `before_toolcall`/`after_toolcall` only for its plugin's own tools.
    pub own_tools_only: bool,
    /// Declared it does not read `context_msgs`: they are not sent to it.
    pub no_context_msgs: bool,
}

/// All tools of all plugins, by name, and every plugin's stage hooks.
#[derive(Debug)]
pub struct Registry {
    tools: RwLock<HashMap<String, Arc<Tool>>>,
    /// The tool set's revision: grows by one with each change ([`Registry::watch_tools`]).
    revision: watch::Sender<u64>,
    /// Hooks by plugin, in registration order.
    hooks: RwLock<HashMap<String, Vec<Hook>>>,
    /// Triggers and inject spec by plugin.
    triggers: RwLock<HashMap<String, Arc<TriggerSet>>>,
    /// Plugin names in load order (hooks and triggers run in it).
    order: RwLock<Vec<String>>,
    /// Plugins served only by plugin hosts over NATS, sorted by name: their hooks and
    /// triggers run after the local plugins', in this order (the same on every broker).
    remote: RwLock<Vec<String>>,
    /// Views rebuilt on change; `None` = stale.
    cache: RwLock<Cache>,
}

/// Ready-made views of the registry (see the module docs).
#[derive(Debug, Default)]
struct Cache {
    llm_tools: Option<Arc<Value>>,
    /// Indexed by `Stage as usize`.
    stage_hooks: Option<Arc<[Arc<[Hook]>; 8]>>,
    trigger_sets: Option<TriggerSets>,
}

/// Every plugin's trigger set, in plugin load order.
pub type TriggerSets = Arc<[(String, Arc<TriggerSet>)]>;

/// Outcome of [`Registry::replace_plugin_tools`].
#[derive(Debug, Default)]
pub struct Registration {
    /// Names that registered, in the order given.
    pub accepted: Vec<String>,
    /// Items refused, each named with its reason.
    pub rejected: Vec<RejectedItem>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            tools: RwLock::default(),
            revision: watch::Sender::new(0),
            hooks: RwLock::default(),
            triggers: RwLock::default(),
            order: RwLock::default(),
            remote: RwLock::default(),
            cache: RwLock::default(),
        }
    }
}

impl Registry {
    /// Watches the tool set: the receiver's value is the revision, which grows by one
    /// each time a tool is added, removed or replaced (a plugin registered, crashed
    /// into `failed`, reloaded, unloaded, or an MCP server's list changed).
    pub fn watch_tools(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    fn invalidate(&self, tools: bool, hooks: bool, triggers: bool) {
        let mut c = self.cache.write().unwrap();
        if tools {
            c.llm_tools = None;
            self.revision.send_modify(|r| *r += 1);
        }
        if hooks {
            c.stage_hooks = None;
        }
        if triggers {
            c.trigger_sets = None;
        }
    }

    /// Sets the plugin load order (the supervisor's plugin list); hooks and triggers
    /// run in it.
    pub fn set_plugin_order(&self, names: Vec<String>) {
        *self.order.write().unwrap() = names;
        self.invalidate(false, true, true);
    }

    /// Sets the plugins served only remotely (see [`crate::remote`]); sorted here.
    pub fn set_remote_plugins(&self, mut names: Vec<String>) {
        names.sort();
        names.dedup();
        if *self.remote.read().unwrap() == names {
            return;
        }
        *self.remote.write().unwrap() = names;
        self.invalidate(false, true, true);
    }

    /// Local plugins in load order, then remote-only ones by name.
    fn run_order(&self) -> Vec<String> {
        let mut order = self.order.read().unwrap().clone();
        let remote = self.remote.read().unwrap();
        let extra: Vec<String> = remote
            .iter()
            .filter(|r| !order.contains(r))
            .cloned()
            .collect();
        order.extend(extra);
        order
    }

    /// The tools as the LLM is offered them: a JSON array of
    /// `{"type": "function", "function": {name, description, parameters}}`, sorted by
    /// name. Built once per change of the tool set.
    pub fn llm_tools(&self) -> Arc<Value> {
        if let Some(t) = &self.cache.read().unwrap().llm_tools {
            return t.clone();
        }
        let tools: Vec<Value> = self
            .list()
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.schema.schema(),
                }})
            })
            .collect();
        let tools = Arc::new(Value::Array(tools));
        self.cache.write().unwrap().llm_tools = Some(tools.clone());
        tools
    }

    /// The hooks of `stage` in run order: plugin load order, then each plugin's
    /// registration order. Empty when no plugin hooks the stage.
    pub fn stage_hooks(&self, stage: Stage) -> Arc<[Hook]> {
        if let Some(all) = &self.cache.read().unwrap().stage_hooks {
            return all[stage as usize].clone();
        }
        let order = self.run_order();
        let hooks = self.hooks.read().unwrap();
        let all: [Arc<[Hook]>; 8] = std::array::from_fn(|i| {
            order
                .iter()
                .filter_map(|p| hooks.get(p))
                .flat_map(|v| v.iter().filter(|h| h.stage as usize == i).cloned())
                .collect::<Vec<_>>()
                .into()
        });
        let all = Arc::new(all);
        let out = all[stage as usize].clone();
        self.cache.write().unwrap().stage_hooks = Some(all);
        out
    }

    /// Every plugin's triggers and inject spec, in plugin load order.
    pub fn trigger_sets(&self) -> TriggerSets {
        if let Some(t) = &self.cache.read().unwrap().trigger_sets {
            return t.clone();
        }
        let order = self.run_order();
        let triggers = self.triggers.read().unwrap();
        let sets: TriggerSets = order
            .iter()
            .filter_map(|p| Some((p.clone(), triggers.get(p)?.clone())))
            .collect::<Vec<_>>()
            .into();
        self.cache.write().unwrap().trigger_sets = Some(sets.clone());
        sets
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<Arc<Tool>> {
        self.tools.read().unwrap().get(name).cloned()
    }

    /// Every tool, sorted by name.
    pub fn list(&self) -> Vec<Arc<Tool>> {
        let mut v: Vec<_> = self.tools.read().unwrap().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Names of `plugin`'s tools, sorted.
    pub fn plugin_tools(&self, plugin: &str) -> Vec<String> {
        let mut v: Vec<_> = self
            .tools
            .read()
            .unwrap()
            .values()
            .filter(|t| t.plugin == plugin)
            .map(|t| t.name.clone())
            .collect();
        v.sort();
        v
    }

    /// Replaces every tool of `plugin` with `specs`, atomically. A spec that is
    /// invalid or whose name another plugin owns is rejected (naming both plugins);
    /// the others register. With `all_or_nothing`, any rejection keeps the plugin's
    /// previous tools and registers none of `specs`.
    pub fn replace_plugin_tools(
        &self,
        plugin: &str,
        specs: &[ToolSpec],
        all_or_nothing: bool,
    ) -> Registration {
        let built: Vec<_> = specs.iter().map(|s| (s, build(plugin, s))).collect();
        let mut tools = self.tools.write().unwrap();
        let mut out = Registration::default();
        let mut fresh: HashMap<String, Arc<Tool>> = HashMap::new();
        for (spec, result) in built {
            let tool = match result {
                Ok(t) => t,
                Err(reason) => {
                    out.rejected.push(rejected(&spec.name, reason));
                    continue;
                }
            };
            if let Some(other) = tools.get(&tool.name).filter(|t| t.plugin != plugin) {
                out.rejected.push(rejected(
                    &tool.name,
                    format!(
                        "tool `{}` of plugin {plugin} is already registered by plugin {}",
                        tool.name, other.plugin
                    ),
                ));
                continue;
            }
            if fresh.contains_key(&tool.name) {
                out.rejected.push(rejected(
                    &tool.name,
                    format!("plugin {plugin} registers tool `{}` twice", tool.name),
                ));
                continue;
            }
            out.accepted.push(tool.name.clone());
            fresh.insert(tool.name.clone(), Arc::new(tool));
        }
        if all_or_nothing && !out.rejected.is_empty() {
            out.accepted.clear();
            return out;
        }
        // A restart that registers the same tools changes nothing: no new revision, so
        // watchers (MCP clients) are not told of a change that did not happen.
        let old = tools.values().filter(|t| t.plugin == plugin).count();
        let unchanged = old == fresh.len()
            && fresh.iter().all(|(name, t)| {
                tools
                    .get(name)
                    .is_some_and(|o| o.plugin == plugin && same_tool(o, t))
            });
        tools.retain(|_, t| t.plugin != plugin);
        tools.extend(fresh);
        drop(tools);
        if !unchanged {
            self.invalidate(true, false, false);
        }
        out
    }

    /// Adds one tool of `plugin` at run time (`RegisterTool`).
    pub fn add_tool(&self, plugin: &str, spec: &ToolSpec) -> Result<(), String> {
        let tool = build(plugin, spec)?;
        let mut tools = self.tools.write().unwrap();
        if let Some(other) = tools.get(&tool.name) {
            return Err(format!(
                "tool `{}` is already registered by plugin {}",
                tool.name, other.plugin
            ));
        }
        tools.insert(tool.name.clone(), Arc::new(tool));
        drop(tools);
        self.invalidate(true, false, false);
        Ok(())
    }

    /// Removes one tool of `plugin` (`UnregisterTool`).
    pub fn remove_tool(&self, plugin: &str, name: &str) -> Result<(), String> {
        let mut tools = self.tools.write().unwrap();
        match tools.get(name) {
            Some(t) if t.plugin == plugin => {
                tools.remove(name);
                drop(tools);
                self.invalidate(true, false, false);
                Ok(())
            }
            Some(t) => Err(format!("tool `{name}` belongs to plugin {}", t.plugin)),
            None => Err(format!("tool `{name}` is not registered")),
        }
    }

    /// Removes every tool and hook of `plugin`.
    pub fn remove_plugin(&self, plugin: &str) {
        self.tools
            .write()
            .unwrap()
            .retain(|_, t| t.plugin != plugin);
        self.hooks.write().unwrap().remove(plugin);
        self.triggers.write().unwrap().remove(plugin);
        self.invalidate(true, true, true);
    }

    /// Replaces `plugin`'s triggers and inject spec; bad items are left out and
    /// returned, named (see [`TriggerSet::compile`]).
    pub fn replace_plugin_triggers(
        &self,
        plugin: &str,
        triggers: &[Trigger],
        inject: Option<InjectSpec>,
    ) -> Vec<RejectedItem> {
        let (set, rejected) = TriggerSet::compile(triggers, inject);
        let mut map = self.triggers.write().unwrap();
        if set.is_empty() {
            map.remove(plugin);
        } else {
            map.insert(plugin.into(), Arc::new(set));
        }
        drop(map);
        self.invalidate(false, false, true);
        rejected
    }

    /// Replaces `plugin`'s stage hooks with `hooks` (registration order kept). A hook
    /// without a stage or with an empty or repeated id is rejected, named.
    pub fn replace_plugin_hooks(&self, plugin: &str, hooks: &[StageHook]) -> Vec<RejectedItem> {
        let mut rejected = Vec::new();
        let mut fresh: Vec<Hook> = Vec::new();
        for h in hooks {
            let reject = |reason: String| RejectedItem {
                kind: "stage".into(),
                name: h.hook_id.clone(),
                reason,
            };
            let stage = match Stage::try_from(h.stage) {
                Ok(Stage::Unspecified) | Err(_) => {
                    rejected.push(reject(format!(
                        "hook `{}`: unknown stage {}",
                        h.hook_id, h.stage
                    )));
                    continue;
                }
                Ok(s) => s,
            };
            if h.hook_id.is_empty() {
                rejected.push(reject(format!(
                    "a {} hook has an empty hook_id",
                    hearth_proto::stage_name(stage)
                )));
                continue;
            }
            if fresh.iter().any(|f| f.hook_id == h.hook_id) {
                rejected.push(reject(format!("hook_id `{}` is used twice", h.hook_id)));
                continue;
            }
            fresh.push(Hook {
                plugin: plugin.into(),
                stage,
                hook_id: h.hook_id.clone(),
                own_tools_only: h.own_tools_only,
                no_context_msgs: h.no_context_msgs,
            });
        }
        self.hooks.write().unwrap().insert(plugin.into(), fresh);
        self.invalidate(false, true, false);
        rejected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, params: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: "d".into(),
            parameters_json: params.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_revision_moves_only_when_the_tools_change() {
        let r = Registry::default();
        let rev = r.watch_tools();
        let obj = r#"{"type":"object"}"#;
        r.replace_plugin_tools("p", &[spec("a", obj), spec("b", obj)], false);
        let first = *rev.borrow();
        assert!(first > 0);
        // A restart registering the same tools: no change to tell anyone about.
        r.replace_plugin_tools("p", &[spec("b", obj), spec("a", obj)], false);
        assert_eq!(*rev.borrow(), first);
        // A changed description, a tool more or less, a new title: each is a change.
        let mut b = spec("b", obj);
        b.title = "B".into();
        r.replace_plugin_tools("p", &[spec("a", obj), b.clone()], false);
        assert_eq!(*rev.borrow(), first + 1);
        r.replace_plugin_tools("p", &[spec("a", obj)], false);
        assert_eq!(*rev.borrow(), first + 2);
        r.remove_plugin("p");
        assert_eq!(*rev.borrow(), first + 3);
        assert!(r.list().is_empty());
    }

    #[test]
    fn ready_made_views_follow_load_order_and_every_change() {
        let r = Registry::default();
        let hook = |id: &str| StageHook {
            stage: Stage::OnInput as i32,
            hook_id: id.into(),
            ..Default::default()
        };
        r.replace_plugin_hooks("a", &[hook("a1"), hook("a2")]);
        r.replace_plugin_hooks("b", &[hook("b1")]);
        r.set_plugin_order(vec!["b".into(), "a".into()]);
        let ids = |r: &Registry| -> Vec<String> {
            r.stage_hooks(Stage::OnInput)
                .iter()
                .map(|h| h.hook_id.clone())
                .collect()
        };
        assert_eq!(ids(&r), ["b1", "a1", "a2"]);
        assert!(r.stage_hooks(Stage::PreAction).is_empty());
        r.replace_plugin_hooks("a", &[hook("a3")]);
        assert_eq!(ids(&r), ["b1", "a3"]);
        r.remove_plugin("b");
        assert_eq!(ids(&r), ["a3"]);

        r.replace_plugin_tools("a", &[spec("t1", ""), spec("t2", "")], false);
        let names = |r: &Registry| -> Vec<String> {
            r.llm_tools()
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&r), ["t1", "t2"]);
        r.remove_tool("a", "t1").unwrap();
        assert_eq!(names(&r), ["t2"]);
        r.add_tool("a", &spec("t0", "")).unwrap();
        assert_eq!(names(&r), ["t0", "t2"]);
    }

    #[test]
    fn one_bad_tool_does_not_sink_the_others() {
        let r = Registry::default();
        let reg = r.replace_plugin_tools(
            "p",
            &[
                spec("good", ""),
                spec("bad", r#"{"type": 12}"#),
                spec("bad name", ""),
            ],
            false,
        );
        assert_eq!(reg.accepted, vec!["good"]);
        assert_eq!(reg.rejected.len(), 2);
        assert_eq!(reg.rejected[0].name, "bad");
        assert!(r.get("good").is_some());
    }

    #[test]
    fn duplicates_name_both_plugins_and_reregistration_replaces() {
        let r = Registry::default();
        r.replace_plugin_tools("a", &[spec("x", ""), spec("y", "")], false);
        let reg = r.replace_plugin_tools("b", &[spec("x", "")], false);
        let reason = &reg.rejected[0].reason;
        assert!(
            reason.contains("plugin a") && reason.contains("plugin b"),
            "{reason}"
        );
        // a re-registers without y: y is gone, x stays a's.
        r.replace_plugin_tools("a", &[spec("x", "")], false);
        assert!(r.get("y").is_none());
        assert_eq!(r.get("x").unwrap().plugin, "a");
        // all-or-nothing keeps the old tools on any rejection.
        let reg = r.replace_plugin_tools("a", &[spec("z", ""), spec("w", "[")], true);
        assert!(reg.accepted.is_empty());
        assert!(r.get("x").is_some() && r.get("z").is_none());
    }
}
