//! MCP ↔ Hearth shapes: an MCP server's tools as registry [`ToolSpec`]s, a
//! `tools/call` result as a [`ToolResult`], and a Hearth tool as an MCP tool.
//!
//! Results keep everything: text blocks become `content` (what the LLM reads),
//! `structuredContent` becomes `data_json`, and when the result holds more than text
//! (images, audio, embedded resources, resource links) the blocks travel as
//! `content_blocks_json`, with a one-line description of each in `content`.

use std::collections::HashMap;

use hearth_proto::v1::{AiTool, ToolAnnotations, ToolResult, ToolSpec};
use serde_json::Value;

use crate::manifest::McpSpec;

/// Longest tool name the registry takes (LLM function names).
const MAX_TOOL_NAME: usize = 64;

/// The registry name of MCP tool `name` with `prefix`: characters outside
/// `[A-Za-z0-9_-]` become `_` (MCP allows `.` and `/`; LLM function names do not), cut
/// to 64 bytes.
pub fn tool_name(prefix: &str, name: &str) -> String {
    let mut out: String = prefix
        .chars()
        .chain(name.chars())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    out.truncate(MAX_TOOL_NAME);
    out
}

/// The registry specs of an MCP server's `tools` (each a `tools/list` entry as JSON),
/// and the map from registry name back to the server's own name. A tool without
/// `name` or `inputSchema` object is skipped with the reason in the third value.
pub fn tool_specs(
    tools: &[Value],
    mcp: &McpSpec,
) -> (Vec<ToolSpec>, HashMap<String, String>, Vec<String>) {
    let mut specs = Vec::with_capacity(tools.len());
    let mut names = HashMap::with_capacity(tools.len());
    let mut skipped = Vec::new();
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            skipped.push(format!("a tool without a name: {tool}"));
            continue;
        };
        let schema = match tool.get("inputSchema") {
            Some(s @ Value::Object(_)) => s.to_string(),
            _ => {
                skipped.push(format!(
                    "tool `{name}`: inputSchema is missing or not an object"
                ));
                continue;
            }
        };
        let registered = tool_name(&mcp.tool_prefix, name);
        let title = tool
            .get("title")
            .or_else(|| tool.pointer("/annotations/title"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let description = tool
            .get("description")
            .and_then(Value::as_str)
            .filter(|d| !d.trim().is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| {
                if title.is_empty() {
                    name.to_string()
                } else {
                    title.clone()
                }
            });
        let annotations = tool.get("annotations").map(|a| {
            let hint = |key: &str| a.get(key).and_then(Value::as_bool);
            ToolAnnotations {
                read_only_hint: hint("readOnlyHint"),
                destructive_hint: hint("destructiveHint"),
                idempotent_hint: hint("idempotentHint"),
                open_world_hint: hint("openWorldHint"),
            }
        });
        let ai_tool =
            (mcp.confirm_destructive && is_destructive(annotations.as_ref())).then(|| AiTool {
                confirm: true,
                ..Default::default()
            });
        names.insert(registered.clone(), name.to_string());
        specs.push(ToolSpec {
            name: registered,
            description,
            parameters_json: schema,
            ai_tool,
            serial: false,
            title,
            output_schema_json: tool
                .get("outputSchema")
                .filter(|s| s.is_object())
                .map(Value::to_string)
                .unwrap_or_default(),
            annotations,
        });
    }
    (specs, names, skipped)
}

/// MCP's reading of the hints: a tool is destructive unless it says it is read-only
/// or says `destructiveHint: false` (the spec's default for `destructiveHint` is true,
/// but a server that gives no annotations at all is not treated as destructive).
pub fn is_destructive(a: Option<&ToolAnnotations>) -> bool {
    match a {
        None => false,
        Some(a) if a.read_only_hint == Some(true) => false,
        Some(a) => a.destructive_hint == Some(true),
    }
}

/// A `tools/call` result (as JSON: `content`, `structuredContent`, `isError`) as the
/// Hearth result of call `call_id`. `isError: true` is a tool error whose text is the
/// text content.
pub fn tool_result(call_id: u64, result: &Value) -> ToolResult {
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut lines = Vec::with_capacity(blocks.len());
    let mut rich = false;
    for block in &blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => lines.push(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            kind => {
                rich = true;
                lines.push(describe_block(kind.unwrap_or("?"), block));
            }
        }
    }
    let text = lines.join("\n");
    let structured = result
        .get("structuredContent")
        .filter(|v| !v.is_null())
        .map(Value::to_string)
        .unwrap_or_default();
    let failed = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    ToolResult {
        call_id,
        success: !failed,
        content: if failed { String::new() } else { text.clone() },
        data_json: structured,
        error: if failed {
            if text.is_empty() {
                "the MCP server reported an error without text".into()
            } else {
                text
            }
        } else {
            String::new()
        },
        content_blocks_json: if rich {
            Value::Array(blocks).to_string()
        } else {
            String::new()
        },
    }
}

/// One line for a non-text content block, so the LLM knows it is there.
fn describe_block(kind: &str, block: &Value) -> String {
    let s = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default();
    match kind {
        "image" | "audio" => {
            let bytes = s("data").len() / 4 * 3;
            format!("[{kind} {}, {bytes} bytes]", s("mimeType"))
        }
        "resource_link" => {
            let name = s("name");
            format!(
                "[resource link {}{}]",
                s("uri"),
                if name.is_empty() {
                    String::new()
                } else {
                    format!(" ({name})")
                }
            )
        }
        "resource" => {
            let r = block.get("resource").cloned().unwrap_or_default();
            match r.get("text").and_then(Value::as_str) {
                Some(text) => text.to_string(),
                None => format!(
                    "[resource {}]",
                    r.get("uri").and_then(Value::as_str).unwrap_or_default()
                ),
            }
        }
        other => format!("[{other} content]"),
    }
}

/// A Hearth result as the JSON of an MCP `CallToolResult`: `content_blocks_json` when
/// present, else one text block; `data_json` (an object, or any value for 2026
/// clients) as `structuredContent`; a failure as `isError` with its text.
pub fn call_result(
    success: bool,
    content: &str,
    data_json: &str,
    error: &str,
    blocks_json: &str,
) -> Value {
    if !success {
        return serde_json::json!({
            "content": [{"type": "text", "text": error}],
            "isError": true,
        });
    }
    let content = match serde_json::from_str::<Value>(blocks_json) {
        Ok(v @ Value::Array(_)) => v,
        _ => serde_json::json!([{"type": "text", "text": content}]),
    };
    let mut out = serde_json::json!({ "content": content, "isError": false });
    if let Ok(data) = serde_json::from_str::<Value>(data_json) {
        out["structuredContent"] = data;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{McpProtocol, McpTransport};
    use serde_json::json;

    fn spec(prefix: &str, confirm_destructive: bool) -> McpSpec {
        McpSpec {
            transport: McpTransport::Http {
                url: "http://x/mcp".into(),
                headers: Default::default(),
            },
            tool_prefix: prefix.into(),
            confirm_destructive,
            protocol: McpProtocol::Auto,
        }
    }

    #[test]
    fn names_are_prefixed_and_made_llm_safe() {
        assert_eq!(tool_name("gh_", "repos.list/all"), "gh_repos_list_all");
        assert_eq!(tool_name("", &"x".repeat(80)).len(), 64);
    }

    #[test]
    fn tools_keep_schema_title_output_schema_and_annotations() {
        let tools = vec![
            json!({"name": "add", "title": "Add", "description": "Add two",
                   "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}}},
                   "outputSchema": {"type": "object", "properties": {"total": {"type": "integer"}}},
                   "annotations": {"readOnlyHint": true, "idempotentHint": true}}),
            json!({"name": "rm.all", "inputSchema": {"type": "object"},
                   "annotations": {"destructiveHint": true}}),
            json!({"name": "bad"}),
        ];
        let (specs, names, skipped) = tool_specs(&tools, &spec("p_", true));
        assert_eq!(specs.len(), 2);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert_eq!(specs[0].name, "p_add");
        assert_eq!(specs[0].title, "Add");
        assert!(specs[0].output_schema_json.contains("total"));
        assert_eq!(specs[0].annotations.unwrap().read_only_hint, Some(true));
        assert!(specs[0].ai_tool.is_none());
        assert_eq!(specs[1].name, "p_rm_all");
        assert_eq!(specs[1].description, "rm.all");
        assert!(
            specs[1].ai_tool.as_ref().unwrap().confirm,
            "confirm_destructive maps destructiveHint to confirm"
        );
        assert_eq!(names["p_rm_all"], "rm.all");
        let (specs, _, _) = tool_specs(&tools, &spec("", false));
        assert!(specs[1].ai_tool.is_none());
    }

    #[test]
    fn results_map_text_structured_rich_and_errors() {
        let r = tool_result(
            7,
            &json!({"content": [{"type": "text", "text": "5"}], "structuredContent": {"total": 5}}),
        );
        assert!(r.success);
        assert_eq!(
            (r.content.as_str(), r.data_json.as_str()),
            ("5", r#"{"total":5}"#)
        );
        assert!(r.content_blocks_json.is_empty());
        let r = tool_result(
            7,
            &json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"},
                                                   {"type": "resource_link", "uri": "test://doc/1", "name": "doc1"}]}),
        );
        assert_eq!(
            r.content,
            "[image image/png, 3 bytes]\n[resource link test://doc/1 (doc1)]"
        );
        assert!(r.content_blocks_json.contains("resource_link"));
        let r = tool_result(
            7,
            &json!({"content": [{"type": "text", "text": "nope"}], "isError": true}),
        );
        assert!(!r.success);
        assert_eq!(r.error, "nope");
        let back = call_result(true, "5", r#"{"total":5}"#, "", "");
        assert_eq!(
            back,
            json!({"content": [{"type": "text", "text": "5"}], "isError": false, "structuredContent": {"total": 5}})
        );
    }
}
