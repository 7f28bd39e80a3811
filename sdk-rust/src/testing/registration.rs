//! What the broker makes of a plugin's `Hello` and `Register` (mirrored from
//! `broker/src/supervisor/handshake.rs` and `broker/src/registry.rs`): the protocol
//! version check, each tool built and checked (name, JSON Schema, LinkZone `ai.tool`),
//! stage hooks, triggers and inject spec, `ConfigDef`s stored; rejected items named.

use std::collections::HashMap;

use hearth_proto::v1::{self as pb, RejectedItem, Stage};
use serde_json::Value;

use super::host::FakeHost;
use super::schema::{linkzone_description, linkzone_schema, ArgsSchema};
use super::triggers::TriggerSet;
use crate::apis::ConfigDef;
use crate::linkzone::{AiInject, AiTool, Trigger};

/// Features the broker implements (`Registered.features` = those the plugin lists too).
const BROKER_FEATURES: &[&str] = &["cancel", "progress", "register_tool"];

/// A registered tool as the broker keeps it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolInfo {
    /// Tool name.
    pub name: String,
    /// What the LLM reads: the definition's description, or for a tool with `ai.tool`
    /// and no description, its `usage` and `when_to_use`.
    pub description: String,
    /// The JSON Schema arguments are checked against (the definition's, or `{"type":
    /// "object", "properties": {}}` for a tool without parameters).
    pub parameters: Value,
    /// LinkZone `ai.tool` policies, if the tool has them.
    pub ai_tool: Option<AiTool>,
}

/// A registered stage hook.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HookInfo {
    /// The plugin's id for it (`<stage>#<n>` in this SDK).
    pub hook_id: String,
    /// The stage it runs at.
    pub stage: Stage,
    /// It sees `before_toolcall` / `after_toolcall` only for the plugin's own tools.
    pub own_tools_only: bool,
    /// It is sent `context_msgs` (false when it declared it does not read them).
    pub context_msgs: bool,
}

/// A registration as the broker accepted it.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) tools: Vec<ToolInfo>,
    pub(crate) schemas: HashMap<String, ArgsSchema>,
    pub(crate) hooks: Vec<HookInfo>,
    pub(crate) triggers: Vec<Trigger>,
    pub(crate) trigger_set: TriggerSet,
    pub(crate) inject: Option<AiInject>,
    pub(crate) rejected: Vec<RejectedItem>,
}

/// The registration refused as a whole (`Rejected`).
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) reason: String,
    pub(crate) items: Vec<RejectedItem>,
}

fn rejected(kind: &str, name: &str, reason: String) -> RejectedItem {
    RejectedItem {
        kind: kind.into(),
        name: name.into(),
        reason,
    }
}

/// Tool names must be usable as LLM function names.
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

/// A tool from its wire spec: `(info, schema)` or the reason it is refused.
fn build(spec: &pb::ToolSpec) -> Result<(ToolInfo, ArgsSchema), String> {
    check_name(&spec.name)?;
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
    let info = ToolInfo {
        name: spec.name.clone(),
        description,
        parameters: schema.schema().clone(),
        ai_tool: spec.ai_tool.as_ref().map(AiTool::from_wire),
    };
    Ok((info, schema))
}

/// Checks `hello` and `register` as the broker would; stores the `ConfigDef`s in
/// `host`. `Err` = the whole registration is refused.
pub(crate) fn check(
    plugin: &str,
    hello: &pb::Hello,
    register: &pb::Register,
    host: &FakeHost,
) -> Result<Accepted, Refused> {
    let major = hello.protocol_version.split('.').next().unwrap_or("");
    let ours = hearth_proto::PROTOCOL_VERSION
        .split('.')
        .next()
        .unwrap_or("");
    if major != ours {
        return Err(Refused {
            reason: format!(
                "protocol version `{}` is not supported; this broker speaks {}",
                hello.protocol_version,
                hearth_proto::PROTOCOL_VERSION
            ),
            items: Vec::new(),
        });
    }
    let mut out = Accepted {
        tools: Vec::new(),
        schemas: HashMap::new(),
        hooks: Vec::new(),
        triggers: Vec::new(),
        trigger_set: TriggerSet::default(),
        inject: None,
        rejected: Vec::new(),
    };
    for spec in &register.tools {
        match build(spec) {
            Err(reason) => out.rejected.push(rejected("tool", &spec.name, reason)),
            Ok(_) if out.schemas.contains_key(&spec.name) => out.rejected.push(rejected(
                "tool",
                &spec.name,
                format!("plugin {plugin} registers tool `{}` twice", spec.name),
            )),
            Ok((info, schema)) => {
                out.schemas.insert(info.name.clone(), schema);
                out.tools.push(info);
            }
        }
    }
    for h in &register.stages {
        let reject = |reason: String| rejected("stage", &h.hook_id, reason);
        let stage = match Stage::try_from(h.stage) {
            Ok(Stage::Unspecified) | Err(_) => {
                out.rejected.push(reject(format!(
                    "hook `{}`: unknown stage {}",
                    h.hook_id, h.stage
                )));
                continue;
            }
            Ok(s) => s,
        };
        if h.hook_id.is_empty() {
            out.rejected.push(reject(format!(
                "a {} hook has an empty hook_id",
                hearth_proto::stage_name(stage)
            )));
            continue;
        }
        if out.hooks.iter().any(|x| x.hook_id == h.hook_id) {
            out.rejected
                .push(reject(format!("hook_id `{}` is used twice", h.hook_id)));
            continue;
        }
        out.hooks.push(HookInfo {
            hook_id: h.hook_id.clone(),
            stage,
            own_tools_only: h.own_tools_only,
            context_msgs: !h.no_context_msgs,
        });
    }
    let (set, trigger_rejections) =
        TriggerSet::compile(&register.triggers, register.inject.clone());
    out.rejected.extend(trigger_rejections);
    out.triggers = set
        .triggers
        .iter()
        .filter_map(|t| Trigger::from_wire(&t.trigger))
        .collect();
    out.inject = set.inject.as_ref().map(AiInject::from_wire);
    out.trigger_set = set;
    for def in &register.config_defs {
        let outcome = ConfigDef::from_wire(def.clone())
            .map_err(|e| format!("def `{}`: default_json is not JSON: {e}", def.key))
            .and_then(|d| host.register_def(d).map_err(|e| e.to_string()));
        if let Err(reason) = outcome {
            out.rejected.push(rejected("config_def", &def.key, reason));
        }
    }
    if register.all_or_nothing && !out.rejected.is_empty() {
        return Err(Refused {
            reason: format!(
                "{} rejected and the plugin asked for all-or-nothing",
                items(out.rejected.len())
            ),
            items: out.rejected,
        });
    }
    Ok(out)
}

/// The `Registered` answer to `hello` for `accepted`.
pub(crate) fn registered(plugin: &str, hello: &pb::Hello, accepted: &Accepted) -> pb::Registered {
    pb::Registered {
        plugin: plugin.into(),
        tools: accepted.tools.iter().map(|t| t.name.clone()).collect(),
        rejected: accepted.rejected.clone(),
        protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
        features: hello
            .features
            .iter()
            .filter(|f| BROKER_FEATURES.contains(&f.as_str()))
            .cloned()
            .collect(),
    }
}

/// `1 item` / `N items`.
pub(crate) fn items(n: usize) -> String {
    format!("{n} {}", if n == 1 { "item" } else { "items" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> pb::Hello {
        pb::Hello {
            protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
            ..Default::default()
        }
    }

    fn tool(name: &str, params: &str) -> pb::ToolSpec {
        pb::ToolSpec {
            name: name.into(),
            parameters_json: params.into(),
            ..Default::default()
        }
    }

    #[test]
    fn bad_items_are_named_and_the_rest_registers() {
        let register = pb::Register {
            tools: vec![
                tool("ok", r#"{"type":"object"}"#),
                tool("bad.name", ""),
                tool("str", r#"{"type":"string"}"#),
                tool("ok", ""),
                tool("none", ""),
            ],
            triggers: vec![pb::Trigger {
                r#type: 2,
                pattern: "(".into(),
            }],
            ..Default::default()
        };
        let a = check("p", &hello(), &register, &FakeHost::new("p")).unwrap();
        let names: Vec<_> = a.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["ok", "none"]);
        assert_eq!(
            a.tools[1].parameters,
            serde_json::json!({"type": "object", "properties": {}})
        );
        let reasons: Vec<_> = a
            .rejected
            .iter()
            .map(|r| format!("{} {}: {}", r.kind, r.name, r.reason))
            .collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(reasons[0].starts_with("tool bad.name: tool name contains '.'"));
        assert!(reasons[1].contains("must describe an object"));
        assert!(reasons[2].contains("registers tool `ok` twice"));
        assert!(reasons[3].starts_with("trigger (: invalid regex"));
    }

    #[test]
    fn another_major_protocol_version_is_refused_whole() {
        let mut h = hello();
        h.protocol_version = "2.0.0".into();
        let refused = check("p", &h, &pb::Register::default(), &FakeHost::new("p")).unwrap_err();
        assert!(refused.reason.contains("`2.0.0` is not supported"));
    }
}
