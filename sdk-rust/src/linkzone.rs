//! LinkZone metadata (seed `linkzone-ai-tool-plugins.md`): a tool's `ai.tool` policies
//! ([`AiTool`]), the plugin's `ai.inject` spec ([`AiInject`]) and its [`Trigger`]s, with
//! their wire forms.

use std::collections::BTreeMap;
use std::fmt;

use hearth_proto::v1 as pb;
use serde::{Deserialize, Serialize};

/// LinkZone `ai.tool`: how the agent may call a tool (policies the broker enforces) and
/// how the LLM is told about it.
///
/// Attach it with [`Tool::ai_tool`](crate::Tool::ai_tool) (Cyrene style) or
/// [`ToolDef::ai_tool`](crate::ToolDef::ai_tool) (HomeAgent style). The tool's JSON
/// Schema stays the one of its definition; `usage` and `when_to_use` are what the LLM
/// reads when the definition's description is empty. Serializes with LinkZone's JSON
/// names (`continue`, `max_calls`, `cooldown` and `timeout` in seconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AiTool {
    /// What the tool does, for the LLM.
    pub usage: String,
    /// When the LLM should call it.
    pub when_to_use: String,
    /// `continue`: keep the conversation going after the call.
    #[serde(rename = "continue")]
    pub continue_conversation: bool,
    /// `chainable`: `None` or `Some(true)` = the loop may go on after the call;
    /// `Some(false)` ends the agentic loop after it.
    pub chainable: Option<bool>,
    /// Calls allowed per conversation; 0 = unlimited.
    pub max_calls: u32,
    /// The user must approve each call.
    pub confirm: bool,
    /// Seconds a user waits between calls; 0 = none.
    pub cooldown: f64,
    /// Seconds a call may take; 0 = the plugin's `call_timeout_s`.
    pub timeout: f64,
}

impl AiTool {
    /// The wire form (`ToolSpec.ai_tool`; no LinkZone parameter list: the schema is
    /// the tool's `parameters`).
    pub(crate) fn to_wire(&self) -> pb::AiTool {
        pb::AiTool {
            parameters: Vec::new(),
            usage: self.usage.clone(),
            when_to_use: self.when_to_use.clone(),
            continue_conversation: self.continue_conversation,
            chainable: self.chainable,
            max_calls: self.max_calls,
            confirm: self.confirm,
            cooldown_s: self.cooldown,
            timeout_s: self.timeout,
        }
    }

    /// From the wire form (its parameter list, if any, is not kept).
    pub fn from_wire(w: &pb::AiTool) -> AiTool {
        AiTool {
            usage: w.usage.clone(),
            when_to_use: w.when_to_use.clone(),
            continue_conversation: w.continue_conversation,
            chainable: w.chainable,
            max_calls: w.max_calls,
            confirm: w.confirm,
            cooldown: w.cooldown_s,
            timeout: w.timeout_s,
        }
    }
}

/// LinkZone `ai.inject` (injection mode): a command format the LLM may write on a line
/// of its reply; the broker matches such a line against the plugin's [`Trigger`]s and
/// delivers it as an [`Event`](crate::Event). Set it with
/// [`Registrar::set_inject`](crate::Registrar::set_inject).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AiInject {
    /// What the command does, for the LLM.
    pub usage: String,
    /// The command as the LLM writes it, e.g. `/weather {city}`; required (the broker
    /// rejects an inject spec without one).
    pub format: String,
    /// Argument name → one-sentence description for the LLM.
    pub args: BTreeMap<String, String>,
}

impl AiInject {
    pub(crate) fn to_wire(&self) -> pb::InjectSpec {
        pb::InjectSpec {
            usage: self.usage.clone(),
            format: self.format.clone(),
            args: self.args.clone().into_iter().collect(),
        }
    }

    /// From the wire form.
    pub fn from_wire(w: &pb::InjectSpec) -> AiInject {
        AiInject {
            usage: w.usage.clone(),
            format: w.format.clone(),
            args: w.args.clone().into_iter().collect(),
        }
    }
}

/// A LinkZone trigger: which input reaches an event handler
/// ([`Registrar::register_trigger`](crate::Registrar::register_trigger)), numbered on the
/// wire as LinkZone numbers them.
///
/// | variant | matches when | the event's params |
/// |---|---|---|
/// | `Command("/weather")` (0) | the message is the command or starts with it and a space | the words after it |
/// | `Keyword("天气")` (1) | the message contains it, case-insensitively | the other words |
/// | `Regex(r"^(\d+)\+(\d+)$")` (2) | the regular expression finds a match | its groups, else the match |
/// | `Segment("weather")` (3) | one segment (split at spaces and punctuation) equals it | the other segments |
/// | `Event("message")` (4) | the broker emits that event (`message`, `reply`, `*` = all) | the event's text |
///
/// Words split at whitespace; a double-quoted run is one word.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Type 0: a command such as `/weather`.
    Command(String),
    /// Type 1: a keyword anywhere in the message.
    Keyword(String),
    /// Type 2: a regular expression (Rust `regex` syntax).
    Regex(String),
    /// Type 3: a whole segment of the message.
    Segment(String),
    /// Type 4: a broker event, `message`, `reply` or `*`.
    Event(String),
}

impl Trigger {
    /// The pattern (command, keyword, expression, segment or event name).
    pub fn pattern(&self) -> &str {
        match self {
            Trigger::Command(p)
            | Trigger::Keyword(p)
            | Trigger::Regex(p)
            | Trigger::Segment(p)
            | Trigger::Event(p) => p,
        }
    }

    /// The LinkZone type number (0 command … 4 event).
    pub fn type_number(&self) -> i32 {
        self.wire_type() as i32
    }

    fn wire_type(&self) -> pb::TriggerType {
        match self {
            Trigger::Command(_) => pb::TriggerType::TriggerCommand,
            Trigger::Keyword(_) => pb::TriggerType::TriggerKeyword,
            Trigger::Regex(_) => pb::TriggerType::TriggerRegex,
            Trigger::Segment(_) => pb::TriggerType::TriggerSegment,
            Trigger::Event(_) => pb::TriggerType::TriggerEvent,
        }
    }

    /// The wire form (`Register.triggers`, `HandleEvent.trigger`).
    pub fn to_wire(&self) -> pb::Trigger {
        pb::Trigger {
            r#type: self.type_number(),
            pattern: self.pattern().to_string(),
        }
    }

    /// From the wire form; `None` for an unknown type number.
    pub fn from_wire(w: &pb::Trigger) -> Option<Trigger> {
        let p = w.pattern.clone();
        Some(match pb::TriggerType::try_from(w.r#type).ok()? {
            pb::TriggerType::TriggerCommand => Trigger::Command(p),
            pb::TriggerType::TriggerKeyword => Trigger::Keyword(p),
            pb::TriggerType::TriggerRegex => Trigger::Regex(p),
            pb::TriggerType::TriggerSegment => Trigger::Segment(p),
            pb::TriggerType::TriggerEvent => Trigger::Event(p),
        })
    }
}

/// `command /weather`, `keyword 天气`, `regex ^a`, `segment weather`, `event message`.
impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Trigger::Command(_) => "command",
            Trigger::Keyword(_) => "keyword",
            Trigger::Regex(_) => "regex",
            Trigger::Segment(_) => "segment",
            Trigger::Event(_) => "event",
        };
        write!(f, "{kind} {}", self.pattern())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_round_trip_through_the_wire_with_linkzone_numbers() {
        let all = [
            (Trigger::Command("/w".into()), 0),
            (Trigger::Keyword("k".into()), 1),
            (Trigger::Regex("r".into()), 2),
            (Trigger::Segment("s".into()), 3),
            (Trigger::Event("message".into()), 4),
        ];
        for (t, n) in all {
            let w = t.to_wire();
            assert_eq!(w.r#type, n);
            assert_eq!(Trigger::from_wire(&w), Some(t));
        }
        assert_eq!(
            Trigger::from_wire(&pb::Trigger {
                r#type: 9,
                pattern: "x".into()
            }),
            None
        );
        assert_eq!(Trigger::Command("/w".into()).to_string(), "command /w");
    }

    #[test]
    fn ai_tool_uses_linkzone_json_names() {
        let ai: AiTool = serde_json::from_str(
            r#"{"usage":"u","continue":true,"chainable":false,"max_calls":2,"cooldown":1.5}"#,
        )
        .unwrap();
        assert!(ai.continue_conversation);
        assert_eq!(ai.chainable, Some(false));
        let w = ai.to_wire();
        assert_eq!((w.max_calls, w.cooldown_s), (2, 1.5));
        assert_eq!(AiTool::from_wire(&w), ai);
    }
}
