//! `hearth settings get|set|list|defs`: core settings (`config`) or, with `--plugin P`,
//! plugin P's table (`config_<p>`), read and written in `<data_dir>/hearth.db`
//! directly — no broker needed, and safe while one runs (SQLite WAL with a busy
//! timeout). Secret values — keys defined `secret` (by a plugin's def, or by
//! `hearth settings set --secret` for any key) and core keys named like a credential
//! (`…api_key`, `…token`, `…secret`, `…password`; see
//! [`secret_by_name`](crate::storage::secret_by_name)) — are printed as
//! [`SECRET_MASK`](crate::storage::SECRET_MASK) unless `--show-secrets` is given.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, bail};
use serde_json::Value;

use crate::storage::{ConfigDef, Db, Scope, Secrets, Settings, SECRET_MASK};

/// `hearth settings …`
#[derive(Debug, clap::Subcommand)]
pub enum SettingsCommand {
    /// Print one value as JSON (secrets masked unless --show-secrets).
    Get {
        /// The key.
        key: String,
        /// A plugin's table instead of the core one.
        #[arg(long)]
        plugin: Option<String>,
        /// Print a secret value in clear.
        #[arg(long)]
        show_secrets: bool,
        /// Print JSON: key, value (the value is JSON either way; this form is not
        /// escaped on a terminal).
        #[arg(long)]
        json: bool,
    },
    /// Write one value: VALUE is JSON (`3`, `true`, `"text"`, `{"a":1}`), else taken
    /// as a string. A key with a def (`hearth settings defs`) must get a value of its
    /// type (`string`, `number`, `integer`, `boolean`); for a `string` key VALUE is
    /// always text.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// A plugin's table instead of the core one.
        #[arg(long)]
        plugin: Option<String>,
        /// Also define the key as secret (masked for plugins and in listings). A
        /// plugin's own def of its key replaces this at its next start.
        #[arg(long)]
        secret: bool,
        /// Print JSON: key, table, secret (whether the key is secret).
        #[arg(long)]
        json: bool,
    },
    /// Keys starting with PREFIX and their values (secrets masked unless
    /// --show-secrets).
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
        /// Print secret values in clear.
        #[arg(long)]
        show_secrets: bool,
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
        /// Print the defaults of secret keys in clear.
        #[arg(long)]
        show_secrets: bool,
    },
}

fn scope(plugin: Option<String>) -> Scope {
    plugin.map(Scope::Plugin).unwrap_or(Scope::Core)
}

fn secrets(show: bool) -> Secrets {
    if show {
        Secrets::Clear
    } else {
        Secrets::Masked
    }
}

/// Defines `key` of `scope` as secret: its def (a new one with only the key if it has
/// none) with `secret` set.
async fn define_secret(settings: &Settings, scope: &Scope, key: &str) -> anyhow::Result<()> {
    let def = settings
        .defs(scope, key)
        .await?
        .into_iter()
        .find(|d| d.key == key)
        .unwrap_or_else(|| ConfigDef {
            key: key.to_string(),
            ..ConfigDef::default()
        });
    settings
        .register_def(
            scope,
            ConfigDef {
                secret: true,
                ..def
            },
        )
        .await?;
    Ok(())
}

/// Runs `hearth settings …` on `<data_dir>/hearth.db`, or on the PostgreSQL database
/// the data dir's broker uses (`storage_url`, `HEARTH_STORAGE_URL`, `[storage] url`; a
/// data dir whose broker runs on PostgreSQL given otherwise is refused, see
/// [`Db::configured`]). Reading SQLite needs the file to exist; `set` creates it (to
/// configure a broker before its first run).
pub async fn run(
    data_dir: &Path,
    storage_url: Option<String>,
    command: SettingsCommand,
) -> anyhow::Result<ExitCode> {
    let writes = matches!(command, SettingsCommand::Set { .. });
    let storage = Db::configured(data_dir, storage_url)?;
    let url = storage.connection_url().map_err(|e| anyhow!(e))?;
    if url.is_none() && !writes && !data_dir.join("hearth.db").exists() {
        bail!(
            "no hearth.db in {} (start `hearth run` once, or pass the right --data-dir)",
            data_dir.display()
        );
    }
    let db = match url {
        Some(url) => Db::postgres_with(&url, storage.ca.as_deref()).await?,
        None => Db::open(data_dir).await?,
    };
    let settings = Settings::new(db);
    match command {
        SettingsCommand::Get {
            key,
            plugin,
            show_secrets,
            json,
        } => {
            let value = settings
                .read(&scope(plugin), &key, secrets(show_secrets))
                .await?;
            if json {
                println!("{}", serde_json::json!({"key": key, "value": value}));
            } else {
                // Escaped on a terminal (plugin-written keys and values; crate::term).
                println!(
                    "{}",
                    crate::term::Printer::stdout().line(&value.to_string())
                );
            }
        }
        SettingsCommand::Set {
            key,
            value,
            plugin,
            secret,
            json,
        } => {
            let scope = scope(plugin);
            // A key defined as a string takes VALUE as text even when it reads as
            // JSON (`123`, `true`); a JSON string literal (`"123"`) still works.
            let string_def = settings
                .defs(&scope, &key)
                .await?
                .iter()
                .any(|d| d.key == key && d.r#type == "string");
            let parsed = match serde_json::from_str::<Value>(&value) {
                Ok(v) if v.is_string() || !string_def => v,
                _ => Value::String(value),
            };
            settings.set(&scope, &key, parsed).await?;
            if secret {
                define_secret(&settings, &scope, &key).await?;
            }
            let table = settings
                .table_name(&scope)
                .await?
                .ok_or_else(|| anyhow!("{scope}: no table after the write"))?;
            let is_secret = settings.is_secret(&scope, &key).await?;
            if json {
                let v = serde_json::json!({"key": key, "table": table, "secret": is_secret});
                println!("{v}");
            } else {
                let marked = if is_secret { " (secret)" } else { "" };
                println!("set {key} in {table}{marked}");
            }
        }
        SettingsCommand::List {
            prefix,
            plugin,
            json,
            show_secrets,
        } => {
            let scope = scope(plugin);
            let mut all = serde_json::Map::new();
            for key in settings.list(&scope, &prefix).await? {
                let value = settings.read(&scope, &key, secrets(show_secrets)).await?;
                all.insert(key, value);
            }
            if json {
                println!("{}", Value::Object(all));
            } else {
                let out = crate::term::Printer::stdout();
                for (k, v) in all {
                    println!("{}", out.line(&format!("{k} = {v}")));
                }
            }
        }
        SettingsCommand::Defs {
            prefix,
            plugin,
            json,
            show_secrets,
        } => {
            let mut defs = settings.defs(&scope(plugin), &prefix).await?;
            if !show_secrets {
                for d in defs.iter_mut().filter(|d| d.secret) {
                    if let Some(default) = d.default.as_mut() {
                        *default = Value::String(SECRET_MASK.into());
                    }
                }
            }
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
                    let default = match &d.default {
                        Some(v) => format!(" (default {v})"),
                        None => String::new(),
                    };
                    let line = format!(
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
                    println!("{}", crate::term::Printer::stdout().line(&line));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
