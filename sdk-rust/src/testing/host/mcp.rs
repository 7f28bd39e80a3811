//! The Mcp service's fake (`broker/src/mcp/host.rs` `request`): MCP servers (plugins
//! with `"runtime": "mcp"`) with canned resources, prompts and results, answering as the
//! broker does.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use tonic::Status;

use crate::apis::MCP_METHODS;

/// One request a plugin sent through the `Mcp` host service
/// ([`FakeHost::mcp_requests`](super::FakeHost::mcp_requests)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct McpCall {
    /// The MCP plugin's name.
    pub server: String,
    /// The MCP method, e.g. `resources/read`.
    pub method: String,
    /// Its params (`{}` when the plugin sent none).
    pub params: Value,
}

/// One fake MCP server.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) connected: bool,
    resources: Vec<Value>,
    contents: BTreeMap<String, Value>,
    prompts: Vec<Value>,
    prompt_results: BTreeMap<String, Value>,
    results: BTreeMap<String, Value>,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            connected: true,
            resources: Vec::new(),
            contents: BTreeMap::new(),
            prompts: Vec::new(),
            prompt_results: BTreeMap::new(),
            results: BTreeMap::new(),
        }
    }
}

/// Every fake MCP server, by plugin name, and the requests plugins sent.
#[derive(Debug, Default)]
pub(crate) struct McpServers {
    servers: BTreeMap<String, Server>,
    pub(crate) requests: Vec<McpCall>,
}

impl McpServers {
    pub(crate) fn server(&mut self, name: &str) -> &mut Server {
        self.servers.entry(name.to_string()).or_default()
    }

    pub(crate) fn add_resource(&mut self, server: &str, uri: &str, text: &str) {
        let s = self.server(server);
        s.resources.retain(|r| r["uri"] != uri);
        s.resources
            .push(json!({"uri": uri, "name": uri, "mimeType": "text/plain"}));
        s.contents.insert(
            uri.to_string(),
            json!([{"uri": uri, "mimeType": "text/plain", "text": text}]),
        );
    }

    pub(crate) fn add_prompt(
        &mut self,
        server: &str,
        name: &str,
        description: &str,
        result: Value,
    ) {
        let s = self.server(server);
        let mut entry = json!({ "name": name });
        if !description.is_empty() {
            entry["description"] = description.into();
        }
        s.prompts.retain(|p| p["name"] != name);
        s.prompts.push(entry);
        let result = match result {
            Value::String(text) => {
                json!([{"role": "user", "content": {"type": "text", "text": text}}])
            }
            other => other,
        };
        let result = match result {
            Value::Array(messages) if description.is_empty() => json!({ "messages": messages }),
            Value::Array(messages) => json!({ "description": description, "messages": messages }),
            other => other,
        };
        s.prompt_results.insert(name.to_string(), result);
    }

    pub(crate) fn set_result(&mut self, server: &str, method: &str, result: Option<Value>) {
        let s = self.server(server);
        match result {
            Some(r) => s.results.insert(method.to_string(), r),
            None => s.results.remove(method),
        };
    }

    /// Answers one `Mcp.Request` as the broker would.
    pub(crate) fn request(
        &mut self,
        server: &str,
        method: &str,
        params_json: &str,
    ) -> Result<Value, Status> {
        if !self.servers.contains_key(server) {
            return Err(Status::not_found(format!("no MCP plugin named {server}")));
        }
        let params: Value = if params_json.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(params_json)
                .map_err(|e| Status::invalid_argument(format!("params are not JSON: {e}")))?
        };
        if !MCP_METHODS.contains(&method) {
            return Err(Status::invalid_argument(format!(
                "`{method}` is not one of {}",
                MCP_METHODS.join(", ")
            )));
        }
        if !params.is_object() {
            return Err(Status::invalid_argument(format!(
                "params of {method} must be a JSON object, got {params}"
            )));
        }
        self.requests.push(McpCall {
            server: server.into(),
            method: method.into(),
            params: params.clone(),
        });
        let s = self.server(server);
        if !s.connected {
            return Err(Status::unavailable(format!(
                "MCP server {server} is not connected"
            )));
        }
        if let Some(r) = s.results.get(method) {
            return Ok(r.clone());
        }
        let failed = |why: String| {
            Status::failed_precondition(format!("MCP server {server}: {method}: {why}"))
        };
        match method {
            "resources/list" => Ok(json!({ "resources": s.resources })),
            "resources/templates/list" => Ok(json!({ "resourceTemplates": [] })),
            "prompts/list" => Ok(json!({ "prompts": s.prompts })),
            "resources/read" => {
                let uri = params["uri"].as_str().unwrap_or_default();
                s.contents
                    .get(uri)
                    .map(|c| json!({ "contents": c }))
                    .ok_or_else(|| failed(format!("Unknown resource: {uri}")))
            }
            _ => {
                let name = params["name"].as_str().unwrap_or_default();
                s.prompt_results
                    .get(name)
                    .cloned()
                    .ok_or_else(|| failed(format!("Unknown prompt: {name}")))
            }
        }
    }
}
