//! `hearth mcp …`: MCP servers as plugins (list, import, resources, prompts) and Hearth
//! as an MCP server (serve).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use clap::Subcommand;
use hearth_proto::v1::{ListMcpServersRequest, LoadPluginRequest, McpRequestMessage, PluginState};
use serde_json::{json, Value};

use crate::cli::AdminConn;

/// `hearth mcp …`
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// MCP plugins of the running broker: transport, negotiated protocol, server, state.
    List {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Write one plugin folder per server of an MCP client's config file (Claude
    /// Desktop, Claude Code `.mcp.json` / `~/.claude.json`, Cursor `mcp.json`, VS Code
    /// `.vscode/mcp.json`) into `<data_dir>/plugins/`; a running broker loads them.
    Import {
        /// The config file (`mcpServers` or `servers`).
        file: PathBuf,
        /// Replace MCP plugin folders of the same names.
        #[arg(long)]
        force: bool,
        /// Show what would be written; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON object: `servers` (server, name, dir, manifest), `warnings`,
        /// `skipped`, and, when a running broker loaded them, `loaded` (name, tools)
        /// and `failed` (name, error).
        #[arg(long)]
        json: bool,
    },
    /// Serve every tool of the running broker over MCP on stdin/stdout, for an MCP
    /// client's config: {"command": "hearth", "args": ["mcp", "serve", "--data-dir", "…"]}.
    Serve,
    /// Resources (and resource templates) an MCP plugin's server offers.
    Resources {
        /// The MCP plugin.
        server: String,
        /// JSON output (the servers' own results).
        #[arg(long)]
        json: bool,
    },
    /// Read one resource of an MCP plugin's server.
    Read {
        /// The MCP plugin.
        server: String,
        /// The resource URI.
        uri: String,
        /// JSON output (the server's own result).
        #[arg(long)]
        json: bool,
    },
    /// Prompts of an MCP plugin's server; with --get, one prompt's messages.
    Prompts {
        /// The MCP plugin.
        server: String,
        /// Get this prompt.
        #[arg(long, value_name = "NAME")]
        get: Option<String>,
        /// A prompt argument, KEY=VALUE (repeatable).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
        /// JSON output (the server's own result).
        #[arg(long)]
        json: bool,
    },
}

/// Runs `command` against the broker of `data_dir` (import also works without one).
pub async fn run(data_dir: &Path, command: McpCommand) -> anyhow::Result<ExitCode> {
    match command {
        McpCommand::Serve => {
            crate::mcp::serve::serve_stdio(data_dir).await?;
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Import {
            file,
            force,
            dry_run,
            json,
        } => import(data_dir, &file, force, dry_run, json).await,
        McpCommand::List { json } => list(data_dir, json).await,
        McpCommand::Resources { server, json } => {
            let mut conn = AdminConn::connect(data_dir).await?;
            let resources = request(&mut conn, &server, "resources/list", json!({})).await?;
            let templates = request(&mut conn, &server, "resources/templates/list", json!({}))
                .await
                .unwrap_or_else(|_| json!({"resourceTemplates": []}));
            if json {
                let v = json!({"resources": resources["resources"], "resourceTemplates": templates["resourceTemplates"]});
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!("{:<40} {:<24} {:<14} DESCRIPTION", "URI", "NAME", "MIME");
            for r in resources["resources"].as_array().into_iter().flatten() {
                row(r, "uri");
            }
            for t in templates["resourceTemplates"]
                .as_array()
                .into_iter()
                .flatten()
            {
                row(t, "uriTemplate");
            }
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Read { server, uri, json } => {
            let mut conn = AdminConn::connect(data_dir).await?;
            let r = request(&mut conn, &server, "resources/read", json!({"uri": uri})).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(ExitCode::SUCCESS);
            }
            for c in r["contents"].as_array().into_iter().flatten() {
                match (c["text"].as_str(), c["blob"].as_str()) {
                    (Some(text), _) => println!("{text}"),
                    (None, Some(blob)) => println!(
                        "[{} bytes of {}; --json shows the base64]",
                        blob.len() / 4 * 3,
                        c["mimeType"].as_str().unwrap_or("binary data")
                    ),
                    _ => {}
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Prompts {
            server,
            get,
            args,
            json,
        } => {
            let mut conn = AdminConn::connect(data_dir).await?;
            let Some(name) = get else {
                let r = request(&mut conn, &server, "prompts/list", json!({})).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&r)?);
                    return Ok(ExitCode::SUCCESS);
                }
                println!("{:<24} {:<24} DESCRIPTION", "NAME", "ARGUMENTS");
                for p in r["prompts"].as_array().into_iter().flatten() {
                    let args: Vec<String> = p["arguments"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            let n = a["name"].as_str().unwrap_or("?");
                            if a["required"].as_bool() == Some(true) {
                                n.to_string()
                            } else {
                                format!("[{n}]")
                            }
                        })
                        .collect();
                    println!(
                        "{:<24} {:<24} {}",
                        p["name"].as_str().unwrap_or(""),
                        args.join(" "),
                        p["description"].as_str().unwrap_or("")
                    );
                }
                return Ok(ExitCode::SUCCESS);
            };
            let mut arguments = serde_json::Map::new();
            for a in args {
                let (k, v) = a
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--arg {a}: expected KEY=VALUE"))?;
                arguments.insert(k.to_string(), json!(v));
            }
            let r = request(
                &mut conn,
                &server,
                "prompts/get",
                json!({"name": name, "arguments": arguments}),
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(ExitCode::SUCCESS);
            }
            for m in r["messages"].as_array().into_iter().flatten() {
                let text = match m["content"]["text"].as_str() {
                    Some(t) => t.to_string(),
                    None => m["content"].to_string(),
                };
                println!("{}: {text}", m["role"].as_str().unwrap_or("?"));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn row(r: &Value, uri_key: &str) {
    println!(
        "{:<40} {:<24} {:<14} {}",
        r[uri_key].as_str().unwrap_or(""),
        r["name"].as_str().unwrap_or(""),
        r["mimeType"].as_str().unwrap_or("-"),
        r["description"]
            .as_str()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
    );
}

async fn request(
    conn: &mut AdminConn,
    server: &str,
    method: &str,
    params: Value,
) -> anyhow::Result<Value> {
    let req = conn.with_token(McpRequestMessage {
        plugin: server.to_string(),
        method: method.into(),
        params_json: params.to_string(),
    });
    let r = conn
        .client()
        .mcp_request(req)
        .await
        .map_err(crate::cli::status_error)?
        .into_inner();
    serde_json::from_str(&r.result_json)
        .with_context(|| format!("{method}: the result is not JSON"))
}

async fn list(data_dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let mut conn = AdminConn::connect(data_dir).await?;
    let req = conn.with_token(ListMcpServersRequest {});
    let servers = conn
        .client()
        .list_mcp_servers(req)
        .await
        .map_err(crate::cli::status_error)?
        .into_inner()
        .servers;
    let state = |s: i32| {
        PluginState::try_from(s)
            .map(|s| {
                s.as_str_name()
                    .trim_start_matches("PLUGIN_STATE_")
                    .to_lowercase()
            })
            .unwrap_or_else(|_| "unknown".into())
    };
    if json {
        let v: Vec<_> = servers
            .iter()
            .map(|s| {
                json!({
                    "plugin": s.plugin, "transport": s.transport, "target": s.target,
                    "protocol_version": s.protocol_version, "server_name": s.server_name,
                    "server_version": s.server_version, "state": state(s.state), "tools": s.tools,
                    "resources": s.resources, "prompts": s.prompts,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<16} {:<9} {:<11} {:<10} {:<24} {:>5}  TARGET",
        "PLUGIN", "TRANSPORT", "PROTOCOL", "STATE", "SERVER", "TOOLS"
    );
    for s in &servers {
        println!(
            "{:<16} {:<9} {:<11} {:<10} {:<24} {:>5}  {}",
            s.plugin,
            s.transport,
            if s.protocol_version.is_empty() {
                "-"
            } else {
                &s.protocol_version
            },
            state(s.state),
            format!("{} {}", s.server_name, s.server_version).trim(),
            s.tools.len(),
            s.target
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn import(
    data_dir: &Path,
    file: &Path,
    force: bool,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let plan = crate::mcp::import::parse(&text, file)?;
    if !json {
        for w in &plan.warnings {
            eprintln!("warning: {w}");
        }
        for s in &plan.skipped {
            eprintln!("skipped: {s}");
        }
    }
    if plan.servers.is_empty() {
        return Err(anyhow!(
            "{}: no MCP server could be imported",
            file.display()
        ));
    }
    let plugins = data_dir.join("plugins");
    // The --json report, completed as the import goes.
    let mut report = json!({
        "servers": plan.servers.iter().map(|s| json!({
            "server": s.server, "name": s.name, "dir": plugins.join(&s.name),
            "manifest": s.manifest,
        })).collect::<Vec<_>>(),
        "warnings": plan.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "skipped": plan.skipped.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "dry_run": dry_run,
    });
    let skipped = if plan.skipped.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if dry_run {
        if json {
            println!("{report}");
            return Ok(skipped);
        }
        for s in &plan.servers {
            println!("{}/plugin.json:", plugins.join(&s.name).display());
            println!("{}", serde_json::to_string_pretty(&s.manifest)?);
        }
        return Ok(skipped);
    }
    let written = crate::mcp::import::write(&plan, &plugins, force)?;
    if !json {
        for (s, dir) in plan.servers.iter().zip(&written) {
            println!(
                "imported {} as plugin {} ({})",
                s.server,
                s.name,
                dir.display()
            );
        }
    }
    // A running broker loads them now; without one they load at its next start.
    let Ok(mut conn) = AdminConn::connect(data_dir).await else {
        if json {
            report["broker"] = json!(false);
            println!("{report}");
        } else {
            println!("no broker running: `hearth run` will load them");
        }
        return Ok(skipped);
    };
    report["broker"] = json!(true);
    let (mut loaded_now, mut failed_now) = (Vec::new(), Vec::new());
    let mut failed = !plan.skipped.is_empty();
    let req = conn.with_token(hearth_proto::v1::ListPluginsRequest {});
    let loaded: Vec<String> = conn
        .client()
        .list_plugins(req)
        .await
        .map_err(crate::cli::status_error)?
        .into_inner()
        .plugins
        .into_iter()
        .map(|p| p.name)
        .collect();
    for s in &plan.servers {
        let dir = plugins.join(&s.name);
        // Already loaded (a re-import with --force): reload it with the new manifest.
        let reload = |conn: &AdminConn| {
            let mut conn = conn.clone();
            let req = conn.with_token(hearth_proto::v1::ReloadPluginRequest {
                name: s.name.clone(),
            });
            async move {
                conn.client()
                    .reload_plugin(req)
                    .await
                    .map(|r| r.into_inner().plugin)
            }
        };
        let outcome = if loaded.contains(&s.name) {
            reload(&conn).await
        } else {
            let req = conn.with_token(LoadPluginRequest {
                path: dir.display().to_string(),
            });
            match conn.client().load_plugin(req).await {
                // A broker that was starting found the new folder itself meanwhile:
                // restart that one with this manifest.
                Err(e) if e.message().contains("is already used by") => reload(&conn).await,
                other => other.map(|r| r.into_inner().plugin),
            }
        };
        match outcome {
            Ok(p) => {
                let p = p.unwrap_or_default();
                if !json {
                    println!("loaded {}: {} tools", p.name, p.tools.len());
                }
                loaded_now.push(json!({"name": p.name, "tools": p.tools}));
            }
            Err(status) => {
                failed = true;
                if !json {
                    eprintln!("error: {} did not start: {}", s.name, status.message());
                }
                failed_now.push(json!({"name": s.name, "error": status.message()}));
            }
        }
    }
    if json {
        report["loaded"] = json!(loaded_now);
        report["failed"] = json!(failed_now);
        println!("{report}");
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
