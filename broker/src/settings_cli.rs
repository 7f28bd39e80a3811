//! `hearth settings get|set|list|defs`: core settings (`config`) or, with `--plugin P`,
//! plugin P's table (`config_<p>`), read and written in `<data_dir>/hearth.db`
//! directly — no broker needed, and safe while one runs (SQLite WAL with a busy
//! timeout). Values a plugin registered as `secret` are printed as
//! [`SECRET_MASK`](crate::storage::SECRET_MASK), never in clear.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, bail};
use serde_json::{json, Value};

use crate::storage::{Db, Scope, Settings, SECRET_MASK};

/// `hearth settings …`
#[derive(Debug, clap::Subcommand)]
pub enum SettingsCommand {
    /// Print one value as JSON (secrets masked).
    Get {
        /// The key.
        key: String,
        /// A plugin's table instead of the core one.
        #[arg(long)]
        plugin: Option<String>,
    },
    /// Write one value: VALUE is JSON (`3`, `true`, `"text"`, `{"a":1}`), else taken
    /// as a string.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// A plugin's table instead of the core one.
        #[arg(long)]
        plugin: Option<String>,
    },
    /// Keys starting with PREFIX and their values (secrets masked).
    List {
        /// Key prefix.
        #[arg(default_value = "")]
        prefix: String,
        /// A plugin's table instead of the core one.
        #[arg(long)]
        plugin: Option<String>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Setting definitions (ConfigDef) registered for the keys starting with PREFIX.
    Defs {
        /// Key prefix.
        #[arg(default_value = "")]
        prefix: String,
        /// A plugin's table instead of the core one.
        #[arg(long)]
        plugin: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn scope(plugin: Option<String>) -> Scope {
    plugin.map(Scope::Plugin).unwrap_or(Scope::Core)
}

/// Keys defined as `secret` in `scope`.
async fn secrets(settings: &Settings, scope: &Scope) -> anyhow::Result<HashSet<String>> {
    Ok(settings
        .defs(scope, "")
        .await?
        .into_iter()
        .filter(|d| d.secret)
        .map(|d| d.key)
        .collect())
}

fn shown(value: &Value, secret: bool) -> Value {
    if secret {
        json!(SECRET_MASK)
    } else {
        value.clone()
    }
}

/// Runs `hearth settings …` on `<data_dir>/hearth.db`. Reading needs the file to
/// exist; `set` creates it (to configure a broker before its first run).
pub async fn run(data_dir: &Path, command: SettingsCommand) -> anyhow::Result<ExitCode> {
    let writes = matches!(command, SettingsCommand::Set { .. });
    if !writes && !data_dir.join("hearth.db").exists() {
        bail!(
            "no hearth.db in {} (start `hearth run` once, or pass the right --data-dir)",
            data_dir.display()
        );
    }
    let settings = Settings::new(Db::open(data_dir).await?);
    match command {
        SettingsCommand::Get { key, plugin } => {
            let scope = scope(plugin);
            let value = settings.get(&scope, &key).await?;
            let secret = secrets(&settings, &scope).await?.contains(&key);
            println!("{}", shown(&value, secret));
        }
        SettingsCommand::Set { key, value, plugin } => {
            let scope = scope(plugin);
            let parsed = serde_json::from_str::<Value>(&value).unwrap_or(Value::String(value));
            settings.set(&scope, &key, parsed).await?;
            let table = settings
                .table_name(&scope)
                .await?
                .ok_or_else(|| anyhow!("{scope}: no table after the write"))?;
            println!("set {key} in {table}");
        }
        SettingsCommand::List {
            prefix,
            plugin,
            json,
        } => {
            let scope = scope(plugin);
            let secret = secrets(&settings, &scope).await?;
            let mut all = serde_json::Map::new();
            for key in settings.list(&scope, &prefix).await? {
                let value = settings.get(&scope, &key).await?;
                all.insert(key.clone(), shown(&value, secret.contains(&key)));
            }
            if json {
                println!("{}", Value::Object(all));
            } else {
                for (k, v) in all {
                    println!("{k} = {v}");
                }
            }
        }
        SettingsCommand::Defs {
            prefix,
            plugin,
            json,
        } => {
            let defs = settings.defs(&scope(plugin), &prefix).await?;
            if json {
                println!("{}", serde_json::to_string(&defs)?);
            } else {
                for d in defs {
                    let mut flags = Vec::new();
                    if d.required {
                        flags.push("required");
                    }
                    if d.secret {
                        flags.push("secret");
                    }
                    let default = match (&d.default, d.secret) {
                        (Some(_), true) => format!(" (default {SECRET_MASK})"),
                        (Some(v), false) => format!(" (default {v})"),
                        (None, _) => String::new(),
                    };
                    println!(
                        "{}  {}  {}{}{}{}",
                        d.key,
                        if d.r#type.is_empty() { "-" } else { &d.r#type },
                        d.display_name,
                        default,
                        if flags.is_empty() {
                            String::new()
                        } else {
                            format!(" [{}]", flags.join(", "))
                        },
                        if d.description.is_empty() {
                            String::new()
                        } else {
                            format!(" — {}", d.description)
                        }
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
