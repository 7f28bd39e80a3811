//! The unified wire between the broker and its adapters (HomeAgent's ADAPTER contract):
//! what `transform_response` and `transform_stream_chunk` return, parsed leniently.
//!
//! Lenient means: a missing field or a JSON `null` takes its default, the seed's single
//! `tool_call` object is accepted beside a `tool_calls` array, tool-call `arguments` may
//! come as an object or as JSON text. A field of the wrong type is an error naming the
//! field (`tool_calls[1].name: expected string, got number`), never a silent default.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Token counts of one completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenUsage {
    /// Prompt (input) tokens.
    pub prompt: u64,
    /// Completion (output) tokens, reasoning included.
    pub completion: u64,
    /// Total as the API reports it (not recomputed).
    pub total: u64,
}

/// One complete tool call of a response (flat shape: `arguments` is an object).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolCall {
    /// The API's call id (`call_…`, `toolu_…`); empty when the API gives none (the broker
    /// then makes one up: [`CompletionResponse::settle_tool_calls`]).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, always a JSON object (`{}` when the model sent none).
    pub arguments: Value,
    /// Gemini's `thoughtSignature` of the call, to be sent back with it on the next
    /// request (the broker keeps it on the assistant message's tool call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
}

/// A complete (non-streamed) completion in the unified shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionResponse {
    /// The reply text (empty when the model only called tools).
    pub content: String,
    /// Chain of thought, when the API returns it.
    pub reasoning_content: String,
    /// `stop`, `tool_calls`, `length`, … as the adapter reports it; may be empty.
    pub finish_reason: String,
    /// Token counts (zeros when the API reports none).
    pub token_usage: TokenUsage,
    /// Tool calls of this turn, in order.
    pub tool_calls: Vec<ToolCall>,
}

/// A fragment of a streamed tool call. Fragments with the same `index` belong to one call:
/// `id` and `name` usually come with the first, `arguments` is JSON text to concatenate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolCallDelta {
    /// Which call of the turn this fragment belongs to (position in its chunk when the
    /// API gives none). A fragment with another id than the call at its index, or another
    /// name, starts a new call there (APIs that reuse `index: 0` for parallel calls).
    pub index: u32,
    /// The call id, when this fragment carries it.
    pub id: Option<String>,
    /// The tool name, when this fragment carries it.
    pub name: Option<String>,
    /// A piece of the arguments' JSON text (possibly empty, possibly not valid JSON alone).
    pub arguments: String,
    /// Gemini's `thoughtSignature`, when this fragment carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
}

/// One streamed chunk in the unified shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamChunk {
    /// Text delta.
    pub content: String,
    /// Reasoning delta.
    pub reasoning_content: String,
    /// The model finished this turn (a usage-only chunk may still follow).
    pub done: bool,
    /// Tool-call fragments in this chunk.
    pub tool_calls: Vec<ToolCallDelta>,
    /// Why the turn ended, on the chunk that ends it.
    pub finish_reason: Option<String>,
    /// Token counts, on the chunk that carries them (often the last).
    pub token_usage: Option<TokenUsage>,
}

/// Prefix of the ids the broker makes up for tool calls that came without one (see
/// [`CompletionResponse::settle_tool_calls`]). Adapters whose API must not get such an id
/// back (Gemini matches calls by name and order) recognize it by this prefix.
pub(crate) const SYNTHESIZED_ID_PREFIX: &str = "call_hearth_";

/// A fresh tool-call id: [`SYNTHESIZED_ID_PREFIX`] and 16 random hex digits, so it is
/// unique across the calls of a conversation, broker restarts and sources (an id made
/// from a per-response counter, `call_0`, comes back every turn).
pub(crate) fn synthesized_call_id() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    let mut id = String::from(SYNTHESIZED_ID_PREFIX);
    for b in bytes {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// Finish reasons that say the model ended its turn normally; with tool calls the
/// unified reason is then `tool_calls` (Ollama says `stop`, so do some OpenAI-compatible
/// servers).
const NORMAL_ENDS: &[&str] = &[
    "",
    "stop",
    "end_turn",
    "stop_sequence",
    "tool_use",
    "function_call",
    "eos",
];

impl CompletionResponse {
    /// The broker's rules for the tool calls of every response, streamed or not, whatever
    /// the adapter:
    /// - each call has an id, unique in this response: a call without one (Ollama,
    ///   Gemini, an OpenAI-compatible server sending `"id": ""`) or repeating an earlier
    ///   call's id gets a fresh one (`call_hearth_` and 16 random hex digits), which its
    ///   result then answers;
    /// - with at least one call, a normal end (`stop`, `end_turn`, none, …) is reported as
    ///   `tool_calls`; `length`, `content_filter` and other reasons stay (a call cut off by
    ///   the token limit must be seen as such).
    pub fn settle_tool_calls(&mut self) {
        if self.tool_calls.is_empty() {
            return;
        }
        let mut seen = std::collections::HashSet::new();
        for call in &mut self.tool_calls {
            if call.id.is_empty() || !seen.insert(call.id.clone()) {
                call.id = synthesized_call_id();
                seen.insert(call.id.clone());
            }
        }
        let reason = self.finish_reason.to_ascii_lowercase();
        if NORMAL_ENDS.contains(&reason.as_str()) {
            self.finish_reason = "tool_calls".to_owned();
        }
    }
}

/// A wrong field: its path and what is wrong.
pub(crate) type FieldError = (String, String);

impl CompletionResponse {
    /// Parses the unified response JSON leniently (see the module docs).
    pub(crate) fn from_json(v: &Value) -> Result<Self, FieldError> {
        let o = object(v, "")?;
        let mut tool_calls = Vec::new();
        for (path, item) in calls(o)? {
            let c = object(item, &path)?;
            tool_calls.push(ToolCall {
                id: string(c, &path, "id")?.unwrap_or_default(),
                name: string(c, &path, "name")?.unwrap_or_default(),
                arguments: arguments_object(c.get("arguments"), &join(&path, "arguments"))?,
                thought_signature: string(c, &path, "thought_signature")?,
            });
        }
        Ok(CompletionResponse {
            content: string(o, "", "content")?.unwrap_or_default(),
            reasoning_content: string(o, "", "reasoning_content")?.unwrap_or_default(),
            finish_reason: string(o, "", "finish_reason")?.unwrap_or_default(),
            token_usage: usage(o, "")?.unwrap_or_default(),
            tool_calls,
        })
    }
}

impl StreamChunk {
    /// Parses the unified chunk JSON leniently (see the module docs). An empty
    /// `finish_reason` counts as absent.
    pub(crate) fn from_json(v: &Value) -> Result<Self, FieldError> {
        let o = object(v, "")?;
        let mut tool_calls = Vec::new();
        for (position, (path, item)) in calls(o)?.into_iter().enumerate() {
            let c = object(item, &path)?;
            let index = match c.get("index") {
                None | Some(Value::Null) => position as u32,
                Some(i) => uint(i, &join(&path, "index")).and_then(|n| {
                    u32::try_from(n).map_err(|_| (join(&path, "index"), "out of range".to_owned()))
                })?,
            };
            tool_calls.push(ToolCallDelta {
                index,
                id: string(c, &path, "id")?,
                name: string(c, &path, "name")?,
                arguments: arguments_text(c.get("arguments"), &join(&path, "arguments"))?,
                thought_signature: string(c, &path, "thought_signature")?,
            });
        }
        Ok(StreamChunk {
            content: string(o, "", "content")?.unwrap_or_default(),
            reasoning_content: string(o, "", "reasoning_content")?.unwrap_or_default(),
            done: match o.get("done") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => return Err(("done".to_owned(), expected("boolean", other))),
            },
            tool_calls,
            finish_reason: string(o, "", "finish_reason")?.filter(|s| !s.is_empty()),
            token_usage: usage(o, "")?,
        })
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn expected(what: &str, got: &Value) -> String {
    format!("expected {what}, got {}", kind(got))
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, FieldError> {
    v.as_object()
        .ok_or_else(|| (path.to_owned(), expected("object", v)))
}

/// An optional string field: missing or null → `None`.
fn string(o: &Map<String, Value>, path: &str, key: &str) -> Result<Option<String>, FieldError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err((join(path, key), expected("string", other))),
    }
}

/// A non-negative integer; an integral float (Lua arithmetic makes those) is accepted.
fn uint(v: &Value, path: &str) -> Result<u64, FieldError> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    match v.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 => Ok(f as u64),
        Some(_) => Err((
            path.to_owned(),
            "expected a non-negative integer".to_owned(),
        )),
        None => Err((path.to_owned(), expected("integer", v))),
    }
}

fn usage(o: &Map<String, Value>, path: &str) -> Result<Option<TokenUsage>, FieldError> {
    let path = join(path, "token_usage");
    let u = match o.get("token_usage") {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => object(v, &path)?,
    };
    let field = |key: &str| match u.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => uint(v, &join(&path, key)),
    };
    Ok(Some(TokenUsage {
        prompt: field("prompt")?,
        completion: field("completion")?,
        total: field("total")?,
    }))
}

/// The tool calls of a response or chunk, with their paths: a `tool_calls` array and/or
/// the seed's single `tool_call` object (appended after the array's).
fn calls(o: &Map<String, Value>) -> Result<Vec<(String, &Value)>, FieldError> {
    let mut out = Vec::new();
    match o.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            out.extend(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("tool_calls[{i}]"), v)),
            );
        }
        // A Lua table with no entries encodes as `{}`: an empty list, not an error.
        Some(Value::Object(m)) if m.is_empty() => {}
        Some(other) => return Err(("tool_calls".to_owned(), expected("array", other))),
    }
    match o.get("tool_call") {
        None | Some(Value::Null) => {}
        Some(v) => out.push(("tool_call".to_owned(), v)),
    }
    Ok(out)
}

/// Complete arguments: an object, or JSON text of an object; missing, null or "" → `{}`.
fn arguments_object(v: Option<&Value>, path: &str) -> Result<Value, FieldError> {
    match v {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(Value::Object(_)) => Ok(v.cloned().unwrap_or_default()),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Value::Object(Map::new())),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(parsed @ Value::Object(_)) => Ok(parsed),
            Ok(other) => Err((
                path.to_owned(),
                format!("JSON text of {}, expected an object", kind(&other)),
            )),
            Err(e) => Err((path.to_owned(), format!("not valid JSON text: {e}"))),
        },
        // `{}` built in Lua encodes as an object already; `[]` (an empty array) means none.
        Some(Value::Array(a)) if a.is_empty() => Ok(Value::Object(Map::new())),
        Some(other) => Err((path.to_owned(), expected("object or JSON text", other))),
    }
}

/// A streamed arguments fragment: text as is; an object is serialized to JSON text.
fn arguments_text(v: Option<&Value>, path: &str) -> Result<String, FieldError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(o @ Value::Object(_)) => Ok(o.to_string()),
        Some(other) => Err((path.to_owned(), expected("string or object", other))),
    }
}
