//! The unified chat messages and completion request (seed `homeagent-lua-adapter.md`,
//! "CompletionRequest" and "Message"), typed: a turn keeps its messages in these types
//! and serializes them once per LLM round, into the request the adapter reads.
//!
//! Fields this broker does not know (a hook may add them, an older history row may
//! hold them) are kept in `extra` and written back as they came.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One message of a conversation: `{role, content, reasoning_content?, tool_calls?,
/// tool_call_id?}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Text, or an array of content blocks (multimodal); `null` when absent.
    #[serde(default)]
    pub content: Value,
    /// Chain of thought of an assistant message, sent back to reasoning models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<MessageToolCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Any other field, kept as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool call inside an assistant message, in the OpenAI wire shape the seed
/// prescribes: `{id, type: "function", function: {name, arguments}}` with
/// `arguments` as JSON text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageToolCall {
    /// The call's id.
    #[serde(default)]
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    /// Name and arguments.
    #[serde(default)]
    pub function: FunctionCall,
    /// Gemini's `thoughtSignature`, sent back with the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
    /// Any other field, kept as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn function() -> String {
    "function".into()
}

/// The function part of a [`MessageToolCall`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Tool name.
    #[serde(default)]
    pub name: String,
    /// Arguments as JSON text.
    #[serde(default)]
    pub arguments: String,
}

impl Message {
    /// A message of `role` with text `content`.
    pub fn text(role: &str, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: Value::String(content.into()),
            ..Default::default()
        }
    }

    /// A `tool` message answering call `call_id` with `content`.
    pub fn tool_result(call_id: &str, content: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(call_id.into()),
            ..Message::text("tool", content)
        }
    }

    /// The text of `content`: the string itself, the `text` of text blocks joined
    /// by newlines, or empty.
    pub fn content_text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }
}

/// The unified completion request one LLM round sends to an adapter (borrowing the
/// turn's messages and the registry's tool list; serialized once).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CompletionRequest<'a> {
    /// Filled with the source's model.
    pub model: &'a str,
    /// The conversation.
    pub messages: &'a [Message],
    /// Ask for SSE streaming.
    pub stream: bool,
    /// The tool definitions (`[{"type": "function", "function": {…}}]`), when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<&'a Value>,
    /// `auto`, or `none` when the model must answer without calling tools; only sent
    /// with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_and_block_content_survive_a_round_trip() {
        let raw = json!({"role": "user", "content": [{"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "u"}}], "name": "ann"});
        let m: Message = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(m.content_text(), "hi");
        assert_eq!(serde_json::to_value(&m).unwrap(), raw);
        let call = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"},
             "thought_signature": "s"}]});
        let m: Message = serde_json::from_value(call.clone()).unwrap();
        assert_eq!(m.tool_calls[0].thought_signature.as_deref(), Some("s"));
        assert_eq!(serde_json::to_value(&m).unwrap(), call);
    }

    #[test]
    fn a_request_serializes_tools_only_when_there_are_some() {
        let msgs = [Message::text("user", "hi")];
        let r = CompletionRequest {
            model: "m",
            messages: &msgs,
            stream: true,
            tools: None,
            tool_choice: None,
        };
        assert_eq!(
            serde_json::to_value(r).unwrap(),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true})
        );
    }
}
