//! The plugin itself (Cyrene `Plugin`) and the [`Registrar`] it registers HomeAgent-style
//! tools on.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use hearth_proto::v1::{Stage, StageContext, StageHook};

use crate::event::Event;
use crate::linkzone::{AiInject, AiTool, Trigger};
use crate::tool::{Args, CallContext, Tool, ToolDefinition, ToolResult};
use crate::{BoxError, Error, Host};

/// Metadata of a plugin (Cyrene `PluginMetadata`, the fields of `plugin.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginMetadata {
    /// Plugin name; when empty the SDK uses the name the broker gave (`HEARTH_PLUGIN`).
    pub name: String,
    /// Plugin version, e.g. `1.0.0`.
    pub version: String,
    /// Author.
    #[serde(default)]
    pub author: String,
    /// One-line description.
    #[serde(default)]
    pub description: String,
}

/// What [`Plugin::init`] receives (Cyrene `PluginConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PluginConfig {
    /// Name the broker knows this plugin by (`HEARTH_PLUGIN`).
    pub plugin: String,
}

impl PluginConfig {
    /// A config for plugin `plugin`.
    pub fn new(plugin: impl Into<String>) -> Self {
        PluginConfig {
            plugin: plugin.into(),
        }
    }
}

/// A plugin (Cyrene `Plugin`, with HomeAgent's `Start(sdk)` and `Stop`).
///
/// [`serve`](crate::serve) dials the broker, then calls `init`, `start`, `tools`, and
/// registers the tools from `tools` and from `start`'s [`Registrar`]. `stop` runs on
/// `Shutdown` or when the broker goes away.
#[async_trait]
pub trait Plugin: Send + 'static {
    /// Name, version, author and description.
    fn metadata(&self) -> PluginMetadata;

    /// Prepares the plugin. An error ends [`serve`](crate::serve) before registration.
    async fn init(&mut self, _config: &PluginConfig) -> Result<(), BoxError> {
        Ok(())
    }

    /// Registers tools HomeAgent style on `host` (e.g. with
    /// [`Registrar::register_tool`]). An error ends [`serve`](crate::serve).
    async fn start(&mut self, _host: &mut Registrar) -> Result<(), BoxError> {
        Ok(())
    }

    /// The plugin's Cyrene-style tools.
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Cleans up: closes connections, stops background tasks. Bounded by the
    /// broker's grace period; an error is logged to stderr.
    async fn stop(&mut self) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A HomeAgent tool definition: what the LLM sees besides the name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// What the LLM reads to decide whether to call the tool.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// LinkZone `ai.tool` policies (call limits, confirmation, cooldown, timeout), if
    /// any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ai_tool: Option<AiTool>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type Handler = dyn Fn(CallContext, Value) -> BoxFuture<Result<Value, String>> + Send + Sync;
/// A stage handler as the session runs it.
pub(crate) type StageHandler =
    dyn Fn(StageContext) -> BoxFuture<Result<StageContext, String>> + Send + Sync;

/// A registered stage hook: its wire form and its handler.
pub(crate) struct StageEntry {
    pub(crate) hook: StageHook,
    pub(crate) handler: Arc<StageHandler>,
}

/// An event handler as the session runs it.
pub(crate) type EventHandler = dyn Fn(Event) -> BoxFuture<Result<(), String>> + Send + Sync;

/// Everything a [`Registrar`] collected, for the session.
pub(crate) struct Registrations {
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) stages: Vec<StageEntry>,
    /// Triggers in registration order, each with its handler.
    pub(crate) triggers: Vec<(Trigger, Arc<EventHandler>)>,
    pub(crate) inject: Option<AiInject>,
}

/// Options of a stage hook ([`Registrar::register_stage_with`]).
#[derive(Debug, Clone, Copy)]
pub struct StageOptions {
    /// `before_toolcall` / `after_toolcall` see only this plugin's own tools.
    pub own_tools_only: bool,
    /// The hook reads `context_msgs` (default true).
    pub context_msgs: bool,
}

impl Default for StageOptions {
    fn default() -> Self {
        StageOptions {
            own_tools_only: false,
            context_msgs: true,
        }
    }
}

/// Where a plugin registers tools in [`Plugin::start`] (HomeAgent's `PluginSDK`).
pub struct Registrar {
    plugin: String,
    tools: Vec<Arc<dyn Tool>>,
    names: Vec<String>,
    stages: Vec<StageEntry>,
    triggers: Vec<(Trigger, Arc<EventHandler>)>,
    inject: Option<AiInject>,
    host: Option<Host>,
}

impl std::fmt::Debug for Registrar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registrar")
            .field("plugin", &self.plugin)
            .field("tools", &self.names)
            .field(
                "stages",
                &self
                    .stages
                    .iter()
                    .map(|s| &s.hook.hook_id)
                    .collect::<Vec<_>>(),
            )
            .field(
                "triggers",
                &self.triggers.iter().map(|(t, _)| t).collect::<Vec<_>>(),
            )
            .field("inject", &self.inject)
            .finish()
    }
}

impl Registrar {
    /// An empty registrar for plugin `plugin`.
    pub fn new(plugin: impl Into<String>) -> Self {
        Registrar {
            plugin: plugin.into(),
            tools: Vec::new(),
            names: Vec::new(),
            stages: Vec::new(),
            triggers: Vec::new(),
            inject: None,
            host: None,
        }
    }

    pub(crate) fn with_host(mut self, host: Host) -> Self {
        self.host = Some(host);
        self
    }

    /// The broker's host services (settings, memory, input, …); `None` for a registrar
    /// made with [`Registrar::new`] outside [`serve`](crate::serve).
    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }

    /// Name the broker knows this plugin by (`HEARTH_PLUGIN`).
    pub fn plugin_name(&self) -> &str {
        &self.plugin
    }

    /// Names of the tools registered so far.
    pub fn tool_names(&self) -> &[String] {
        &self.names
    }

    /// Registers a Cyrene-style [`Tool`]. Fails when the name is already taken.
    pub fn add_tool(&mut self, tool: Arc<dyn Tool>) -> Result<(), Error> {
        let name = tool.definition().name;
        if self.names.contains(&name) {
            return Err(Error::DuplicateTool {
                plugin: self.plugin.clone(),
                tool: name,
            });
        }
        self.names.push(name);
        self.tools.push(tool);
        Ok(())
    }

    /// Registers a tool HomeAgent style (`RegisterTool(name, def, handler)`).
    ///
    /// `handler` gets the arguments object and returns a value: a string is the
    /// result text as is; any other value is sent as JSON text and as structured data;
    /// a map with `"isError": true` is a failed result whose error is its `content`;
    /// `Err(e)` is a failed result with `e`'s text. Fails when the name is taken.
    pub fn register_tool<F, Fut, E>(
        &mut self,
        name: impl Into<String>,
        def: ToolDef,
        handler: F,
    ) -> Result<(), Error>
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        self.register_tool_with_context(name, def, move |_ctx, args| handler(args))
    }

    /// Like [`register_tool`](Self::register_tool), for handlers that want the
    /// [`CallContext`] (cancellation, progress, caller).
    pub fn register_tool_with_context<F, Fut, E>(
        &mut self,
        name: impl Into<String>,
        def: ToolDef,
        handler: F,
    ) -> Result<(), Error>
    where
        F: Fn(CallContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let handler: Arc<Handler> = Arc::new(move |ctx, args| {
            let fut = handler(ctx, args);
            Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
        });
        self.add_tool(Arc::new(FnTool {
            definition: ToolDefinition {
                name: name.into(),
                description: def.description,
                parameters: def.parameters,
            },
            ai_tool: def.ai_tool,
            handler,
        }))
    }

    /// Registers a LinkZone event handler for `trigger` (LinkZone `triggers` +
    /// `handleEvent(sender)`): a message that matches it reaches `handler` as an
    /// [`Event`], whose [`reply`](Event::reply) sends text to the user and whose
    /// [`param`](Event::param) gives the parsed parameters. `Err(e)` (or a panic) is
    /// reported to the broker, which logs it. Register the same handler for several
    /// triggers by cloning it (or a function name).
    ///
    /// Fails when the same trigger (type and pattern) is already registered. Patterns
    /// are checked by the broker (an empty pattern, an invalid regex or an unknown event
    /// name is rejected there, by name).
    pub fn register_trigger<F, Fut, E>(&mut self, trigger: Trigger, handler: F) -> Result<(), Error>
    where
        F: Fn(Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        if self.triggers.iter().any(|(t, _)| *t == trigger) {
            return Err(Error::DuplicateTrigger {
                plugin: self.plugin.clone(),
                trigger: trigger.to_string(),
            });
        }
        let handler: Arc<EventHandler> = Arc::new(move |event| {
            let fut = handler(event);
            Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
        });
        self.triggers.push((trigger, handler));
        Ok(())
    }

    /// Sets the plugin's LinkZone `ai.inject` spec (replacing an earlier one): the
    /// command format the LLM is told about; a command line it writes is matched
    /// against the triggers of [`register_trigger`](Self::register_trigger).
    pub fn set_inject(&mut self, inject: AiInject) {
        self.inject = Some(inject);
    }

    /// Registers a pipeline stage hook (HomeAgent `RegisterStage`).
    ///
    /// `handler` gets the stage's [`StageContext`] and returns it, changed or not; the
    /// broker keeps only the fields that stage may write (see the permission matrix)
    /// and runs one stage's hooks in registration order. Setting `response`
    /// short-circuits to `after_output`. `Err(e)` (or a panic) is logged by the broker
    /// and the pipeline goes on without this hook's writes. JSON-shaped fields are JSON
    /// text (`context_msgs_json`, `extra_json`, `arguments_json`, …).
    pub fn register_stage<F, Fut, E>(&mut self, stage: Stage, handler: F)
    where
        F: Fn(StageContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<StageContext, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        self.add_stage(stage, false, handler)
    }

    /// Like [`register_stage`](Self::register_stage), but `before_toolcall` /
    /// `after_toolcall` hooks see only calls of this plugin's own tools
    /// (HomeAgent `RegisterStageOwnTools`); other stages behave as `register_stage`.
    pub fn register_stage_own_tools<F, Fut, E>(&mut self, stage: Stage, handler: F)
    where
        F: Fn(StageContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<StageContext, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        self.add_stage(stage, true, handler)
    }

    /// [`register_stage`](Self::register_stage) with [`StageOptions`]: own-tools scope,
    /// and whether the hook reads `context_msgs` (a pre_action hook that does not gets
    /// them empty, and what it leaves there is ignored: the history is not sent).
    pub fn register_stage_with<F, Fut, E>(
        &mut self,
        stage: Stage,
        options: StageOptions,
        handler: F,
    ) where
        F: Fn(StageContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<StageContext, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        self.add_stage_with(stage, options, handler)
    }

    fn add_stage<F, Fut, E>(&mut self, stage: Stage, own_tools_only: bool, handler: F)
    where
        F: Fn(StageContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<StageContext, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let options = StageOptions {
            own_tools_only,
            ..StageOptions::default()
        };
        self.add_stage_with(stage, options, handler)
    }

    fn add_stage_with<F, Fut, E>(&mut self, stage: Stage, options: StageOptions, handler: F)
    where
        F: Fn(StageContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<StageContext, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let hook_id = format!("{}#{}", hearth_proto::stage_name(stage), self.stages.len());
        let handler: Arc<StageHandler> = Arc::new(move |ctx| {
            let fut = handler(ctx);
            Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
        });
        self.stages.push(StageEntry {
            hook: StageHook {
                stage: stage.into(),
                own_tools_only: options.own_tools_only,
                hook_id,
                no_context_msgs: !options.context_msgs,
            },
            handler,
        });
    }

    pub(crate) fn into_parts(self) -> Registrations {
        Registrations {
            tools: self.tools,
            stages: self.stages,
            triggers: self.triggers,
            inject: self.inject,
        }
    }
}

/// A HomeAgent-style handler as a [`Tool`].
struct FnTool {
    definition: ToolDefinition,
    ai_tool: Option<AiTool>,
    handler: Arc<Handler>,
}

#[async_trait]
impl Tool for FnTool {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn ai_tool(&self) -> Option<AiTool> {
        self.ai_tool.clone()
    }

    async fn execute(&self, ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
        let value = (self.handler)(ctx.clone(), Value::Object(args)).await;
        Ok(homeagent_result(value))
    }
}

/// Maps a HomeAgent handler's outcome onto a [`ToolResult`].
pub(crate) fn homeagent_result(value: Result<Value, String>) -> ToolResult {
    match value {
        Err(e) => ToolResult::err(e),
        Ok(Value::String(s)) => ToolResult::ok(s),
        Ok(Value::Object(map)) if map.get("isError") == Some(&Value::Bool(true)) => {
            let error = match map.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => Value::Object(map.clone()).to_string(),
            };
            ToolResult::err(error).with_data(Value::Object(map))
        }
        Ok(other) => ToolResult::ok(other.to_string()).with_data(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn homeagent_values_map_onto_results() {
        let r = homeagent_result(Ok(json!("晴")));
        assert_eq!((r.success, r.output.as_str(), r.data), (true, "晴", None));

        let r = homeagent_result(Ok(json!({"temp": 25})));
        assert!(r.success);
        assert_eq!(r.output, r#"{"temp":25}"#);
        assert_eq!(r.data, Some(json!({"temp": 25})));

        let r = homeagent_result(Ok(json!({"isError": true, "content": "城市不存在"})));
        assert!(!r.success);
        assert_eq!(r.error, "城市不存在");

        let r = homeagent_result(Err("boom".into()));
        assert_eq!((r.success, r.error.as_str()), (false, "boom"));
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut reg = Registrar::new("p");
        let def = ToolDef::default();
        reg.register_tool("t", def.clone(), |_| async { Ok::<_, String>(Value::Null) })
            .unwrap();
        let err = reg
            .register_tool("t", def, |_| async { Ok::<_, String>(Value::Null) })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"plugin p: tool name "t" is registered twice"#
        );
    }
}
