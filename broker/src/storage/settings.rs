//! Settings in `hearth.db` (seed `homeagent-plugin-sdk-api.md`, "配置管理 / SettingsAPI"
//! and "ConfigDef"): core keys in the `config` table, each plugin's own keys in its
//! own table `config_<name>`, and the [`ConfigDef`]s plugins register for a settings
//! UI.
//!
//! Values are JSON and keep their JSON type: a number set is a number read back, an
//! object an object, `null` a stored `null` (not a missing key). A key that was never
//! set is [`StorageError::NotFound`] naming the key and the table, not an empty value.
//! A key with a [`ConfigDef`] of type `string`, `number`, `integer` or `boolean` only
//! takes values of that type (or `null`), whoever writes it: the `hearth settings`
//! CLI, a plugin through the `Settings` host service, the broker itself.
//!
//! [`Settings`] addresses a [`Scope`] (core or a named plugin); [`PluginSettings`] is
//! one plugin's view with the seed's methods (`Get`/`Set`/`List` on its own table,
//! `*Core`, `*Plugin`, `RegisterDef`, `Defs`, `Dump`, `Plugins`), one method per rpc
//! of `hearth.v1.Settings`.
//!
//! # Plugin table names
//! A plugin's table is created on its first write (a set or a registered def) and
//! recorded in `settings_tables`; reads never create one. Its name is `config_`
//! followed by the plugin name with every ASCII letter lower-cased, every ASCII digit
//! kept and every other character (including `_`, `-`, `.`, spaces, quotes and any
//! non-ASCII character) replaced by `_`, cut to [`MAX_NAME_CHARS`] characters. If that
//! name is already taken (by another plugin whose name sanitizes the same, e.g.
//! `my-plugin` and `my_plugin`, or `Foo` and `foo`), `_2`, `_3` … is appended until it
//! is free. So a table name only ever holds `[a-z0-9_]` (no SQL can be smuggled in),
//! and distinct plugin names always get distinct tables; the first plugin to write
//! keeps the plain name. Examples: `qq` → `config_qq`, `my-plugin.v2` →
//! `config_my_plugin_v2`, `x; DROP TABLE config` → `config_x__drop_table_config`.
//!
//! # Secrets
//! A key is secret when its [`ConfigDef::secret`] is set (plugin keys and core keys
//! alike: core defs live in `settings_defs` under the table `config`), and a core key
//! is secret by its name alone when it ends like a credential ([`secret_by_name`]:
//! `…api_key`, `…apikey`, `…token`, `…secret`, `…password`, any case, `-` as `_`) —
//! so an LLM source key kept in core settings (`llm.openai.api_key`) is secret with no
//! def. A def can make any key secret but never makes a credential-named core key
//! public.
//!
//! A secret value is shown as [`SECRET_MASK`] (the JSON string `"••••••"`, whatever the
//! value's type) in [`Settings::dump`] and wherever a read asks for
//! [`Secrets::Masked`] ([`Settings::read`]); which callers see it in clear is decided
//! by whoever serves them (the `Settings` host service by capability, the
//! `hearth settings` CLI by `--show-secrets`). Values are never logged.
//! [`Settings::get`] returns the real value: the plugin needs its API key.
//!
//! # Durability
//! Every write is one transaction, committed (WAL fsynced, see [`Db`]) before the call
//! returns.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Db, StorageError};

/// What [`Settings::dump`] and masked reads show instead of a secret value (as a
/// JSON string).
pub const SECRET_MASK: &str = "••••••";

/// Endings of core key names that make a key secret without a def (compared in ASCII
/// lower case, with `-` read as `_`); see [`secret_by_name`].
pub const SECRET_KEY_SUFFIXES: &[&str] = &["api_key", "apikey", "token", "secret", "password"];

/// Whether a core key is secret by its name alone: it ends with one of
/// [`SECRET_KEY_SUFFIXES`] (`llm.openai.api_key`, `core.bot_token`, `Smtp-Password`),
/// whether or not a def says so.
pub fn secret_by_name(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace('-', "_");
    SECRET_KEY_SUFFIXES.iter().any(|end| key.ends_with(end))
}

/// How a read treats secret values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// A secret value reads as [`SECRET_MASK`].
    Masked,
    /// Every value reads as stored.
    Clear,
}

/// Most characters of a plugin name kept in its table name (after `config_`).
pub const MAX_NAME_CHARS: usize = 48;

/// The core settings table.
pub(super) const CORE_TABLE: &str = "config";

/// Whose settings: the core `config` table or one plugin's `config_<name>` table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Core keys, e.g. `core.daemon.data_dir`.
    Core,
    /// A plugin's own keys; the plugin's name as registered (not sanitized).
    Plugin(String),
}

/// `core` or `plugin <name>`.
impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Core => f.write_str("core"),
            Scope::Plugin(name) => write!(f, "plugin {name}"),
        }
    }
}

/// A setting's definition, for a settings UI (seed "ConfigDef"). Serialized with the
/// seed's JSON names; empty optional fields are left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigDef {
    /// The key it defines, in the registering scope's table.
    pub key: String,
    /// Written as the value when the key is unset at registration; `None` = no
    /// default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// `string`, `number`, `integer` or `boolean`: a value set for the key must be of
    /// that JSON type, or `null` ([`ConfigDef::check`]). Any other type is a hint for a
    /// settings UI and not checked.
    pub r#type: String,
    /// Label in a settings UI.
    pub display_name: String,
    /// Longer help text.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Group in a settings UI.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub category: String,
    /// Allowed values (a drop-down).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Smallest allowed number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest allowed number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Step of a number input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
    /// The plugin needs a value to work.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// Sensitive (an API key …): masked in [`Settings::dump`] and input fields.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
}

impl ConfigDef {
    /// Whether `value` fits the def's `type` (`null` always does: no value). Err says
    /// what the def expects and what `value` is, quoting it unless the def is secret.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        let fits = match self.r#type.as_str() {
            "string" => value.is_string(),
            "number" => value.is_number(),
            "integer" => {
                value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if fits || value.is_null() {
            return Ok(());
        }
        let expected = match self.r#type.as_str() {
            "string" => "a string",
            "number" => "a number",
            "integer" => "an integer",
            _ => "a boolean (true or false)",
        };
        Err(self.mismatch(expected, value))
    }

    fn mismatch(&self, expected: &str, value: &Value) -> String {
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(n) if n.is_f64() => "a number with a fraction",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        if self.secret {
            return format!(
                "expected {expected} (its def's type is `{}`), got {kind} (a secret: value not shown)",
                self.r#type
            );
        }
        let mut shown = value.to_string();
        if shown.chars().count() > 60 {
            shown = shown.chars().take(60).collect::<String>() + "…";
        }
        format!(
            "expected {expected} (its def's type is `{}`), got {shown} ({kind})",
            self.r#type
        )
    }

    /// The wire `ConfigDef` (`default_json` empty when there is no default).
    pub fn into_wire(self) -> hearth_proto::v1::ConfigDef {
        hearth_proto::v1::ConfigDef {
            key: self.key,
            default_json: self.default.map(|v| v.to_string()).unwrap_or_default(),
            r#type: self.r#type,
            display_name: self.display_name,
            description: self.description,
            category: self.category,
            options: self.options,
            min: self.min,
            max: self.max,
            step: self.step,
            required: self.required,
            secret: self.secret,
        }
    }

    /// From the wire `ConfigDef`: an empty `default_json` is no default. Errors: a
    /// `default_json` that is not JSON (the message names the key).
    pub fn from_wire(d: hearth_proto::v1::ConfigDef) -> Result<ConfigDef, String> {
        let default = match d.default_json.trim() {
            "" => None,
            json => Some(
                serde_json::from_str(json)
                    .map_err(|e| format!("def `{}`: default_json is not JSON: {e}", d.key))?,
            ),
        };
        Ok(ConfigDef {
            key: d.key,
            default,
            r#type: d.r#type,
            display_name: d.display_name,
            description: d.description,
            category: d.category,
            options: d.options,
            min: d.min,
            max: d.max,
            step: d.step,
            required: d.required,
            secret: d.secret,
        })
    }
}

/// Settings in a [`Db`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Settings {
    db: Db,
}

impl Settings {
    /// Settings stored in `db`.
    pub fn new(db: Db) -> Settings {
        Settings { db }
    }

    /// Whether the settings live in a database shared with other brokers
    /// (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        self.db.pg().is_some()
    }

    /// The view of the plugin `caller` (the one a spawn token names), with the seed's
    /// methods.
    pub fn for_plugin(&self, caller: impl Into<String>) -> PluginSettings {
        PluginSettings {
            settings: self.clone(),
            caller: caller.into(),
        }
    }

    /// The value of `key` in `scope`, with its JSON type.
    ///
    /// Errors: [`StorageError::NotFound`] (table, key) if it was never set;
    /// [`StorageError::Invalid`] for an empty key or plugin name.
    pub async fn get(&self, scope: &Scope, key: &str) -> Result<Value, StorageError> {
        check_scope(scope)?;
        check_key(key)?;
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::read(pg, scope, key, Secrets::Clear).await;
        }
        let (scope, key) = (scope.clone(), key.to_string());
        self.db
            .call(format!("read setting `{key}` of {scope}"), move |conn| {
                let Some(table) = table_of(conn, &scope)? else {
                    return Ok(Err(not_found(&scope, key)));
                };
                let value = conn
                    .prepare_cached(&format!("SELECT value FROM \"{table}\" WHERE key = ?1"))?
                    .query_row([&key], |row| json_column(row, 0))
                    .optional()?;
                Ok(value.ok_or(StorageError::NotFound { table, key }))
            })
            .await?
    }

    /// The value of `key` in `scope` like [`Settings::get`], but with
    /// [`Secrets::Masked`] a secret key (module docs, "Secrets") reads as the string
    /// [`SECRET_MASK`]. Errors as [`Settings::get`].
    pub async fn read(
        &self,
        scope: &Scope,
        key: &str,
        secrets: Secrets,
    ) -> Result<Value, StorageError> {
        check_scope(scope)?;
        check_key(key)?;
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::read(pg, scope, key, secrets).await;
        }
        let (scope, key) = (scope.clone(), key.to_string());
        self.db
            .call(format!("read setting `{key}` of {scope}"), move |conn| {
                let Some(table) = table_of(conn, &scope)? else {
                    return Ok(Err(not_found(&scope, key)));
                };
                let row = conn
                    .prepare_cached(&format!(
                        "SELECT t.value, coalesce(d.secret, 0) FROM \"{table}\" t
                         LEFT JOIN settings_defs d ON d.table_name = ?1 AND d.key = t.key
                         WHERE t.key = ?2"
                    ))?
                    .query_row([&table, &key], |row| {
                        let defined: bool = row.get(1)?;
                        let secret = defined || (table == CORE_TABLE && secret_by_name(&key));
                        if secret && secrets == Secrets::Masked {
                            Ok(Value::String(SECRET_MASK.into()))
                        } else {
                            json_column(row, 0)
                        }
                    })
                    .optional()?;
                Ok(row.ok_or(StorageError::NotFound { table, key }))
            })
            .await?
    }

    /// Whether `key` of `scope` is secret (module docs, "Secrets"), set or not: its def
    /// says `secret`, or it is a core key named like a credential.
    ///
    /// Errors: [`StorageError::Invalid`] for an empty key or plugin name.
    pub async fn is_secret(&self, scope: &Scope, key: &str) -> Result<bool, StorageError> {
        check_scope(scope)?;
        check_key(key)?;
        if *scope == Scope::Core && secret_by_name(key) {
            return Ok(true);
        }
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::is_secret(pg, scope, key).await;
        }
        let (scope, key) = (scope.clone(), key.to_string());
        self.db
            .call(
                format!("check whether `{key}` of {scope} is secret"),
                move |conn| {
                    let Some(table) = table_of(conn, &scope)? else {
                        return Ok(false);
                    };
                    Ok(conn
                        .prepare_cached(
                            "SELECT secret FROM settings_defs WHERE table_name = ?1 AND key = ?2",
                        )?
                        .query_row([&table, &key], |row| row.get::<_, bool>(0))
                        .optional()?
                        .unwrap_or(false))
                },
            )
            .await
    }

    /// Sets `key` in `scope` to `value` (any JSON, `null` included), creating the
    /// plugin's table on its first write. A key with a def must get a value of the
    /// def's type ([`ConfigDef::check`]). Returns once committed.
    ///
    /// Errors: [`StorageError::Invalid`] for an empty key or plugin name, or a value
    /// of another type than the key's def names (the message names the key, the
    /// expected type and the value); nothing is written then.
    pub async fn set(&self, scope: &Scope, key: &str, value: Value) -> Result<(), StorageError> {
        check_scope(scope)?;
        check_key(key)?;
        let (scope, key) = (scope.clone(), key.to_string());
        let what = format!("setting `{key}` of {scope}");
        let refused = if let Some(pg) = self.db.pg() {
            super::pg::settings::set(pg, &scope, &key, &value).await?
        } else {
            self.sqlite_set(scope, key, value).await?
        };
        match refused {
            Some(reason) => Err(StorageError::Invalid { what, reason }),
            None => Ok(()),
        }
    }

    async fn sqlite_set(
        &self,
        scope: Scope,
        key: String,
        value: Value,
    ) -> Result<Option<String>, StorageError> {
        self.db
            .call(format!("write setting `{key}` of {scope}"), move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let table = table_for_write(&tx, &scope)?;
                if let Some(def) = def_of(&tx, &table, &key)? {
                    if let Err(reason) = def.check(&value) {
                        // Dropping `tx` rolls back (a table made for this write too).
                        return Ok(Some(reason));
                    }
                }
                tx.prepare_cached(&format!(
                    "INSERT INTO \"{table}\" (key, value, updated_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (key) DO UPDATE
                     SET value = excluded.value, updated_at = excluded.updated_at"
                ))?
                .execute(params![key, value.to_string(), now()])?;
                tx.commit()?;
                Ok(None)
            })
            .await
    }

    /// The keys set in `scope` that start with `prefix` (`""` = all), sorted. A plugin
    /// with no table has none.
    ///
    /// Errors: [`StorageError::Invalid`] for an empty plugin name.
    pub async fn list(&self, scope: &Scope, prefix: &str) -> Result<Vec<String>, StorageError> {
        check_scope(scope)?;
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::list(pg, scope, prefix).await;
        }
        let (scope, prefix) = (scope.clone(), prefix.to_string());
        self.db
            .call(format!("list settings of {scope}"), move |conn| {
                let Some(table) = table_of(conn, &scope)? else {
                    return Ok(Vec::new());
                };
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT key FROM \"{table}\"
                     WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key"
                ))?;
                let keys = stmt.query_map([&prefix], |row| row.get(0))?;
                keys.collect()
            })
            .await
    }

    /// Records `def` for `scope` (replacing an earlier def of the same key) and, if the
    /// def has a default and the key is unset, writes the default; a value already
    /// set is never overwritten. One transaction.
    ///
    /// Errors: [`StorageError::Invalid`] for an empty `def.key` or plugin name.
    pub async fn register_def(&self, scope: &Scope, def: ConfigDef) -> Result<(), StorageError> {
        check_scope(scope)?;
        check_key(&def.key)?;
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::register_def(pg, scope, &def).await;
        }
        let scope = scope.clone();
        let json = serde_json::to_string(&def).expect("a ConfigDef serializes");
        let default = def.default.as_ref().map(Value::to_string);
        self.db
            .call(
                format!("register def `{}` of {scope}", def.key),
                move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let table = table_for_write(&tx, &scope)?;
                    tx.prepare_cached(
                        "INSERT INTO settings_defs (table_name, key, def, secret)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (table_name, key) DO UPDATE
                     SET def = excluded.def, secret = excluded.secret",
                    )?
                    .execute(params![table, def.key, json, def.secret])?;
                    if let Some(default) = default {
                        tx.prepare_cached(&format!(
                            "INSERT INTO \"{table}\" (key, value, updated_at) VALUES (?1, ?2, ?3)
                         ON CONFLICT (key) DO NOTHING"
                        ))?
                        .execute(params![def.key, default, now()])?;
                    }
                    tx.commit()
                },
            )
            .await
    }

    /// The defs registered for `scope` whose key starts with `prefix` (`""` = all),
    /// sorted by key.
    ///
    /// Errors: [`StorageError::Invalid`] for an empty plugin name.
    pub async fn defs(&self, scope: &Scope, prefix: &str) -> Result<Vec<ConfigDef>, StorageError> {
        check_scope(scope)?;
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::defs(pg, scope, prefix).await;
        }
        let (scope, prefix) = (scope.clone(), prefix.to_string());
        self.db
            .call(format!("list defs of {scope}"), move |conn| {
                let Some(table) = table_of(conn, &scope)? else {
                    return Ok(Vec::new());
                };
                let mut stmt = conn.prepare_cached(
                    "SELECT def FROM settings_defs
                     WHERE table_name = ?1 AND substr(key, 1, length(?2)) = ?2
                     ORDER BY key",
                )?;
                let defs = stmt.query_map([&table, &prefix], |row| {
                    let text: String = row.get(0)?;
                    serde_json::from_str(&text).map_err(|e| {
                        rusqlite::Error::FromSqlConversionFailure(0, Type::Text, Box::new(e))
                    })
                })?;
                defs.collect()
            })
            .await
    }

    /// Every setting, secrets masked:
    /// `{"core": {key: value, …}, "plugins": {plugin: {key: value, …}, …}}`, with each
    /// secret value (its def has `secret`, or a core key named like a credential)
    /// replaced by the string [`SECRET_MASK`].
    /// Plugins are keyed by their real names, and listed even with no keys set.
    pub async fn dump(&self) -> Result<Value, StorageError> {
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::dump(pg).await;
        }
        self.db
            .call("dump settings", |conn| {
                // One read transaction: one snapshot across all tables.
                let tx = conn.transaction()?;
                let core = dump_table(&tx, CORE_TABLE)?;
                let mut plugins = Map::new();
                for (plugin, table) in registered_tables(&tx)? {
                    plugins.insert(plugin, Value::Object(dump_table(&tx, &table)?));
                }
                tx.commit()?;
                let mut dump = Map::new();
                dump.insert("core".into(), Value::Object(core));
                dump.insert("plugins".into(), Value::Object(plugins));
                Ok(Value::Object(dump))
            })
            .await
    }

    /// Names of the plugins that have a settings table (they set a key or registered
    /// a def), sorted.
    pub async fn plugins(&self) -> Result<Vec<String>, StorageError> {
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::plugins(pg).await;
        }
        self.db
            .call("list plugins with settings", |conn| {
                Ok(registered_tables(conn)?
                    .into_iter()
                    .map(|(plugin, _)| plugin)
                    .collect())
            })
            .await
    }

    /// The table holding `scope`'s keys: `config` for core, the plugin's
    /// `config_<name>` once it exists, `None` before the plugin's first write.
    pub async fn table_name(&self, scope: &Scope) -> Result<Option<String>, StorageError> {
        check_scope(scope)?;
        if let Some(pg) = self.db.pg() {
            return super::pg::settings::table_name(pg, scope).await;
        }
        let scope = scope.clone();
        self.db
            .call(format!("find the settings table of {scope}"), move |conn| {
                table_of(conn, &scope)
            })
            .await
    }
}

/// One plugin's settings, shaped after `hearth.v1.Settings` and the seed's
/// `SettingsAPI`: the plain methods use the caller's own table. Errors as on
/// [`Settings`]. Cheap to clone.
///
/// This is the storage view: values read in clear and nothing is refused. Which
/// plugin may call what, and whose secrets it sees masked, is the `Settings` host
/// service's business (`grpc/host.rs`, with [`Settings::read`]).
#[derive(Debug, Clone)]
pub struct PluginSettings {
    settings: Settings,
    caller: String,
}

impl PluginSettings {
    fn own(&self) -> Scope {
        Scope::Plugin(self.caller.clone())
    }

    /// The calling plugin's name.
    pub fn caller(&self) -> &str {
        &self.caller
    }

    /// `Get(key)`: a key of the caller's own table.
    pub async fn get(&self, key: &str) -> Result<Value, StorageError> {
        self.settings.get(&self.own(), key).await
    }

    /// `Set(key, value)` in the caller's own table.
    pub async fn set(&self, key: &str, value: Value) -> Result<(), StorageError> {
        self.settings.set(&self.own(), key, value).await
    }

    /// `List(prefix)`: keys of the caller's own table.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.settings.list(&self.own(), prefix).await
    }

    /// `GetCore(key)`.
    pub async fn get_core(&self, key: &str) -> Result<Value, StorageError> {
        self.settings.get(&Scope::Core, key).await
    }

    /// `SetCore(key, value)`.
    pub async fn set_core(&self, key: &str, value: Value) -> Result<(), StorageError> {
        self.settings.set(&Scope::Core, key, value).await
    }

    /// `ListCore(prefix)`.
    pub async fn list_core(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.settings.list(&Scope::Core, prefix).await
    }

    /// `GetPlugin(plugin, key)`: a key of another plugin's table.
    pub async fn get_plugin(&self, plugin: &str, key: &str) -> Result<Value, StorageError> {
        self.settings.get(&Scope::Plugin(plugin.into()), key).await
    }

    /// `SetPlugin(plugin, key, value)`.
    pub async fn set_plugin(
        &self,
        plugin: &str,
        key: &str,
        value: Value,
    ) -> Result<(), StorageError> {
        self.settings
            .set(&Scope::Plugin(plugin.into()), key, value)
            .await
    }

    /// `ListPlugin(plugin, prefix)`.
    pub async fn list_plugin(
        &self,
        plugin: &str,
        prefix: &str,
    ) -> Result<Vec<String>, StorageError> {
        self.settings
            .list(&Scope::Plugin(plugin.into()), prefix)
            .await
    }

    /// `RegisterDef(def)` for a key of the caller's own table.
    pub async fn register_def(&self, def: ConfigDef) -> Result<(), StorageError> {
        self.settings.register_def(&self.own(), def).await
    }

    /// `Defs(prefix)`: the caller's own defs.
    pub async fn defs(&self, prefix: &str) -> Result<Vec<ConfigDef>, StorageError> {
        self.settings.defs(&self.own(), prefix).await
    }

    /// `Dump()`: every setting, secrets masked (see [`Settings::dump`]).
    pub async fn dump(&self) -> Result<Value, StorageError> {
        self.settings.dump().await
    }

    /// `Plugins()`: plugins that have settings.
    pub async fn plugins(&self) -> Result<Vec<String>, StorageError> {
        self.settings.plugins().await
    }
}

fn check_scope(scope: &Scope) -> Result<(), StorageError> {
    match scope {
        Scope::Plugin(name) if name.is_empty() => Err(StorageError::Invalid {
            what: "settings".into(),
            reason: "empty plugin name".into(),
        }),
        _ => Ok(()),
    }
}

fn check_key(key: &str) -> Result<(), StorageError> {
    if key.is_empty() {
        return Err(StorageError::Invalid {
            what: "settings".into(),
            reason: "empty key".into(),
        });
    }
    Ok(())
}

pub(super) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The not-found error for a plugin that has no table yet: it names the table the
/// plugin's first write would most likely create.
pub(super) fn not_found(scope: &Scope, key: String) -> StorageError {
    let table = match scope {
        Scope::Core => CORE_TABLE.to_string(),
        Scope::Plugin(name) => base_table_name(name),
    };
    StorageError::NotFound { table, key }
}

/// `config_` + the sanitized plugin name, before any collision suffix (module docs).
pub(super) fn base_table_name(plugin: &str) -> String {
    let mut table = String::from("config_");
    table.extend(plugin.chars().take(MAX_NAME_CHARS).map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        }
    }));
    table
}

/// Only names this module made are put in SQL text; a registry row edited by hand to
/// something else is refused rather than spliced into a statement.
fn checked(table: String) -> rusqlite::Result<String> {
    let safe = table == CORE_TABLE
        || table.strip_prefix("config_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        });
    if safe {
        Ok(table)
    } else {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some(format!("settings_tables: unsafe table name {table:?}")),
        ))
    }
}

/// The existing table of `scope`, if any.
fn table_of(conn: &Connection, scope: &Scope) -> rusqlite::Result<Option<String>> {
    match scope {
        Scope::Core => Ok(Some(CORE_TABLE.to_string())),
        Scope::Plugin(plugin) => conn
            .prepare_cached("SELECT table_name FROM settings_tables WHERE plugin = ?1")?
            .query_row([plugin], |row| row.get(0))
            .optional()?
            .map(checked)
            .transpose(),
    }
}

/// The table of `scope`, created (and registered) if the plugin has none yet.
fn table_for_write(tx: &Transaction<'_>, scope: &Scope) -> rusqlite::Result<String> {
    if let Some(table) = table_of(tx, scope)? {
        return Ok(table);
    }
    let Scope::Plugin(plugin) = scope else {
        unreachable!("the core table always exists");
    };
    let base = base_table_name(plugin);
    let mut table = base.clone();
    let mut n = 1;
    while table_taken(tx, &table)? {
        n += 1;
        table = format!("{base}_{n}");
    }
    tx.execute_batch(&format!(
        "CREATE TABLE \"{table}\" (
             key        TEXT PRIMARY KEY,
             value      TEXT NOT NULL,
             updated_at INTEGER NOT NULL
         ) STRICT, WITHOUT ROWID;"
    ))?;
    tx.prepare_cached("INSERT INTO settings_tables (plugin, table_name) VALUES (?1, ?2)")?
        .execute([plugin, &table])?;
    Ok(table)
}

/// Whether a plugin or anything else in the schema (table, index, view …) already
/// uses the name. SQLite compares names case-insensitively; ours are lower case.
fn table_taken(tx: &Transaction<'_>, table: &str) -> rusqlite::Result<bool> {
    tx.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM settings_tables WHERE table_name = ?1)
             OR EXISTS (SELECT 1 FROM sqlite_schema WHERE lower(name) = ?1)",
    )?
    .query_row([table], |row| row.get(0))
}

/// The def of `key` in `table`, if one was registered.
fn def_of(conn: &Connection, table: &str, key: &str) -> rusqlite::Result<Option<ConfigDef>> {
    conn.prepare_cached("SELECT def FROM settings_defs WHERE table_name = ?1 AND key = ?2")?
        .query_row([table, key], |row| {
            let text: String = row.get(0)?;
            serde_json::from_str(&text)
                .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, Type::Text, Box::new(e)))
        })
        .optional()
}

/// `(plugin, table)` of every plugin with a table, sorted by plugin name.
fn registered_tables(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt =
        conn.prepare_cached("SELECT plugin, table_name FROM settings_tables ORDER BY plugin")?;
    let rows = stmt.query_map([], |row| Ok((row.get(0)?, checked(row.get(1)?)?)))?;
    rows.collect()
}

/// All keys of `table` with their values, secret ones (by def, or by name in the core
/// table) replaced by [`SECRET_MASK`].
fn dump_table(conn: &Connection, table: &str) -> rusqlite::Result<Map<String, Value>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT t.key, t.value, coalesce(d.secret, 0) FROM \"{table}\" t
         LEFT JOIN settings_defs d ON d.table_name = ?1 AND d.key = t.key
         ORDER BY t.key"
    ))?;
    let rows = stmt.query_map([table], |row| {
        let key: String = row.get(0)?;
        let secret: bool = row.get(2)?;
        let value = if secret || (table == CORE_TABLE && secret_by_name(&key)) {
            Value::String(SECRET_MASK.into())
        } else {
            json_column(row, 1)?
        };
        Ok((key, value))
    })?;
    rows.collect()
}

fn json_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Value> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(index, Type::Text, Box::new(e)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::storage::test_db::{on_both_backends, TestDb};

    on_both_backends!(
        values_keep_their_json_type,
        set_overwrites_and_a_missing_key_is_not_found_naming_key_and_table,
        empty_keys_and_plugin_names_are_invalid,
        table_names_are_sanitized_safe_and_distinct,
        list_filters_by_prefix_and_sorts,
        register_def_writes_the_default_only_when_unset,
        a_value_must_have_the_type_of_its_def,
        defs_by_prefix_per_scope_round_trip,
        dump_masks_secrets_and_lists_every_scope,
        masked_reads_hide_secrets_by_def_and_core_keys_by_name,
        plugin_view_maps_the_seed_methods,
    );

    async fn open(t: &TestDb) -> Settings {
        Settings::new(t.open().await)
    }

    fn plugin(name: &str) -> Scope {
        Scope::Plugin(name.into())
    }

    async fn values_keep_their_json_type(t: TestDb) {
        let settings = open(&t).await;
        let cases = [
            ("int", json!(42)),
            ("negative", json!(-7)),
            ("big", json!(u64::MAX)),
            ("float", json!(1.5)),
            ("whole float", json!(2.0)),
            ("bool", json!(true)),
            ("string", json!("42")),
            ("unicode", json!("北京 🌧")),
            (
                "object",
                json!({"a": 1, "b": [true, null, "x"], "c": {"d": 0.25}}),
            ),
            ("array", json!([1, "two", 3.0, false, null])),
            ("null", Value::Null),
            ("empty string", json!("")),
        ];
        for scope in [Scope::Core, plugin("typed")] {
            for (key, value) in &cases {
                settings.set(&scope, key, value.clone()).await.unwrap();
            }
        }
        // Read back through a fresh connection: what is on disk, not a cache.
        drop(settings);
        let settings = open(&t).await;
        for scope in [Scope::Core, plugin("typed")] {
            for (key, value) in &cases {
                let got = settings.get(&scope, key).await.unwrap();
                assert_eq!(&got, value, "{scope}: {key}");
                // Same JSON type, not only an equal-looking value.
                assert_eq!(got.is_i64(), value.is_i64(), "{key}");
                assert_eq!(got.is_u64(), value.is_u64(), "{key}");
                assert_eq!(got.is_f64(), value.is_f64(), "{key}");
            }
        }
        assert!(settings
            .get(&Scope::Core, "whole float")
            .await
            .unwrap()
            .is_f64());
        assert!(settings
            .get(&Scope::Core, "string")
            .await
            .unwrap()
            .is_string());
    }

    async fn set_overwrites_and_a_missing_key_is_not_found_naming_key_and_table(t: TestDb) {
        let settings = open(&t).await;
        settings.set(&Scope::Core, "k", json!(1)).await.unwrap();
        settings.set(&Scope::Core, "k", json!("one")).await.unwrap();
        assert_eq!(settings.get(&Scope::Core, "k").await.unwrap(), json!("one"));

        let err = settings.get(&Scope::Core, "nope").await.unwrap_err();
        assert!(
            matches!(&err, StorageError::NotFound { table, key } if table == "config" && key == "nope"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "no `nope` in config");

        // A plugin with a table, and one that never wrote anything.
        settings
            .set(&plugin("qq"), "napcat_url", json!("ws://x"))
            .await
            .unwrap();
        let err = settings.get(&plugin("qq"), "token").await.unwrap_err();
        assert_eq!(err.to_string(), "no `token` in config_qq");
        let err = settings
            .get(&plugin("my-plugin"), "token")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StorageError::NotFound { table, key } if table == "config_my_plugin" && key == "token"),
            "{err:?}"
        );
        // Reads do not create tables.
        assert_eq!(
            settings.table_name(&plugin("my-plugin")).await.unwrap(),
            None
        );
        assert_eq!(settings.plugins().await.unwrap(), ["qq"]);

        // A stored null is a value, not a missing key.
        settings
            .set(&Scope::Core, "nothing", Value::Null)
            .await
            .unwrap();
        assert_eq!(
            settings.get(&Scope::Core, "nothing").await.unwrap(),
            Value::Null
        );
    }

    async fn empty_keys_and_plugin_names_are_invalid(t: TestDb) {
        let settings = open(&t).await;
        for err in [
            settings.get(&Scope::Core, "").await.unwrap_err(),
            settings.set(&Scope::Core, "", json!(1)).await.unwrap_err(),
            settings.get(&plugin(""), "k").await.unwrap_err(),
            settings.list(&plugin(""), "").await.unwrap_err(),
            settings
                .register_def(&Scope::Core, ConfigDef::default())
                .await
                .unwrap_err(),
        ] {
            assert!(matches!(err, StorageError::Invalid { .. }), "{err:?}");
        }
    }

    async fn table_names_are_sanitized_safe_and_distinct(t: TestDb) {
        let settings = open(&t).await;
        let names = [
            ("qq", "config_qq"),
            ("my-plugin.v2", "config_my_plugin_v2"),
            ("my_plugin_v2", "config_my_plugin_v2_2"),
            ("My-Plugin.V2", "config_my_plugin_v2_3"),
            ("x; DROP TABLE config", "config_x__drop_table_config"),
            (
                "x\"; DROP TABLE config; --",
                "config_x___drop_table_config____",
            ),
            (
                "Robert'); DROP TABLE settings_tables;--",
                "config_robert____drop_table_settings_tables___",
            ),
            ("天气", "config___"),
            ("🌧", "config__"),
            ("a_", "config_a_"),
            // Sanitizes like `a_`, which came first: suffixed.
            ("a.", "config_a__2"),
        ];
        for (i, (name, _)) in names.iter().enumerate() {
            settings
                .set(&plugin(name), "who", json!(name))
                .await
                .unwrap();
            settings.set(&plugin(name), "n", json!(i)).await.unwrap();
        }
        for (i, (name, table)) in names.iter().enumerate() {
            assert_eq!(
                settings.table_name(&plugin(name)).await.unwrap().as_deref(),
                Some(*table),
                "{name}"
            );
            assert_eq!(
                settings.get(&plugin(name), "who").await.unwrap(),
                json!(name)
            );
            assert_eq!(settings.get(&plugin(name), "n").await.unwrap(), json!(i));
        }
        // Nothing was dropped or clobbered: the meta tables and core keys are intact.
        settings
            .set(&Scope::Core, "still", json!("here"))
            .await
            .unwrap();
        assert_eq!(
            settings.get(&Scope::Core, "still").await.unwrap(),
            json!("here")
        );
        let mut expected: Vec<String> = names.iter().map(|(n, _)| n.to_string()).collect();
        expected.sort();
        assert_eq!(settings.plugins().await.unwrap(), expected);

        // A long name is cut to MAX_NAME_CHARS; two long names with the same start
        // still get distinct tables.
        let long_a = format!("{}a", "p".repeat(60));
        let long_b = format!("{}b", "p".repeat(60));
        settings
            .set(&plugin(&long_a), "k", json!("a"))
            .await
            .unwrap();
        settings
            .set(&plugin(&long_b), "k", json!("b"))
            .await
            .unwrap();
        let table_a = settings
            .table_name(&plugin(&long_a))
            .await
            .unwrap()
            .unwrap();
        let table_b = settings
            .table_name(&plugin(&long_b))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(table_a, format!("config_{}", "p".repeat(MAX_NAME_CHARS)));
        assert_eq!(table_b, format!("{table_a}_2"));
        assert_eq!(
            settings.get(&plugin(&long_a), "k").await.unwrap(),
            json!("a")
        );
        assert_eq!(
            settings.get(&plugin(&long_b), "k").await.unwrap(),
            json!("b")
        );

        // Table names survive a reopen (the registry, not the order of writes, decides).
        drop(settings);
        let settings = open(&t).await;
        assert_eq!(
            settings
                .table_name(&plugin("My-Plugin.V2"))
                .await
                .unwrap()
                .as_deref(),
            Some("config_my_plugin_v2_3")
        );
    }

    #[test]
    fn base_table_names_follow_the_rule() {
        assert_eq!(base_table_name("qq"), "config_qq");
        assert_eq!(base_table_name("Web_Search-2"), "config_web_search_2");
        assert_eq!(
            base_table_name("x; DROP TABLE config"),
            "config_x__drop_table_config"
        );
        assert_eq!(base_table_name("é"), "config__");
        assert!(checked(base_table_name("a\"b")).is_ok());
        assert!(checked("config_a\"; --".into()).is_err());
        assert!(checked("config_".into()).is_err());
        assert!(checked("settings_defs".into()).is_err());
    }

    async fn list_filters_by_prefix_and_sorts(t: TestDb) {
        let settings = open(&t).await;
        for key in ["b.x", "a.y", "a.x", "a%", "a_", "c"] {
            settings.set(&Scope::Core, key, json!(1)).await.unwrap();
        }
        assert_eq!(
            settings.list(&Scope::Core, "a.").await.unwrap(),
            ["a.x", "a.y"]
        );
        // No LIKE wildcards: `%` and `_` are plain characters.
        assert_eq!(settings.list(&Scope::Core, "a%").await.unwrap(), ["a%"]);
        assert_eq!(settings.list(&Scope::Core, "a_").await.unwrap(), ["a_"]);
        assert_eq!(
            settings.list(&Scope::Core, "").await.unwrap(),
            ["a%", "a.x", "a.y", "a_", "b.x", "c"]
        );
        assert!(settings.list(&Scope::Core, "z").await.unwrap().is_empty());
        assert!(settings.list(&plugin("none"), "").await.unwrap().is_empty());
    }

    async fn register_def_writes_the_default_only_when_unset(t: TestDb) {
        let settings = open(&t).await;
        let qq = settings.for_plugin("qq");
        qq.set("napcat_url", json!("ws://mine")).await.unwrap();
        qq.register_def(ConfigDef {
            key: "napcat_url".into(),
            default: Some(json!("ws://default")),
            r#type: "string".into(),
            ..ConfigDef::default()
        })
        .await
        .unwrap();
        qq.register_def(ConfigDef {
            key: "retries".into(),
            default: Some(json!(3)),
            r#type: "number".into(),
            min: Some(0.0),
            max: Some(10.0),
            step: Some(1.0),
            ..ConfigDef::default()
        })
        .await
        .unwrap();
        qq.register_def(ConfigDef {
            key: "nickname".into(),
            r#type: "string".into(),
            ..ConfigDef::default()
        })
        .await
        .unwrap();
        assert_eq!(qq.get("napcat_url").await.unwrap(), json!("ws://mine"));
        assert_eq!(qq.get("retries").await.unwrap(), json!(3));
        assert!(qq.get("retries").await.unwrap().is_u64());
        // No default: nothing written.
        assert!(matches!(
            qq.get("nickname").await.unwrap_err(),
            StorageError::NotFound { .. }
        ));
        // Registering again (the next start) keeps the value set since.
        qq.set("retries", json!(5)).await.unwrap();
        qq.register_def(ConfigDef {
            key: "retries".into(),
            default: Some(json!(3)),
            r#type: "number".into(),
            description: "how often to retry".into(),
            ..ConfigDef::default()
        })
        .await
        .unwrap();
        assert_eq!(qq.get("retries").await.unwrap(), json!(5));
        // ... and the def itself is the newest one.
        let defs = qq.defs("retries").await.unwrap();
        assert_eq!(defs.len(), 1);
        assert_eq!(defs[0].description, "how often to retry");
        assert_eq!(defs[0].min, None);
    }

    async fn a_value_must_have_the_type_of_its_def(t: TestDb) {
        let settings = open(&t).await;
        let def = |key: &str, ty: &str| ConfigDef {
            key: key.into(),
            r#type: ty.into(),
            ..ConfigDef::default()
        };
        for scope in [Scope::Core, plugin("weather")] {
            for (key, ty) in [
                ("days", "number"),
                ("name", "string"),
                ("on", "boolean"),
                ("n", "integer"),
                ("pick", "select"),
            ] {
                settings.register_def(&scope, def(key, ty)).await.unwrap();
            }
            let e = settings
                .set(&scope, "days", json!("abc"))
                .await
                .unwrap_err();
            assert!(matches!(e, StorageError::Invalid { .. }), "{e:?}");
            assert_eq!(
                e.to_string(),
                format!("setting `days` of {scope}: expected a number (its def's type is `number`), got \"abc\" (a string)")
            );
            assert!(
                settings.get(&scope, "days").await.is_err(),
                "nothing written"
            );
            let e = settings.set(&scope, "on", json!(1)).await.unwrap_err();
            assert!(e.to_string().contains("expected a boolean"), "{e}");
            let e = settings.set(&scope, "name", json!(3)).await.unwrap_err();
            assert!(e.to_string().contains("got 3 (a number)"), "{e}");
            let e = settings.set(&scope, "n", json!(1.5)).await.unwrap_err();
            assert!(e.to_string().contains("expected an integer"), "{e}");
            for (key, ok) in [
                ("days", json!(2.5)),
                ("days", Value::Null),
                ("name", json!("x")),
                ("on", json!(false)),
                ("n", json!(4)),
                ("pick", json!({"any": "thing"})),
                ("undefined", json!([1])),
            ] {
                settings.set(&scope, key, ok.clone()).await.unwrap();
                assert_eq!(settings.get(&scope, key).await.unwrap(), ok);
            }
        }
        // A secret's value is not quoted back.
        settings
            .register_def(
                &Scope::Core,
                ConfigDef {
                    secret: true,
                    ..def("port", "integer")
                },
            )
            .await
            .unwrap();
        let e = settings
            .set(&Scope::Core, "port", json!("hunter2"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a secret: value not shown") && !e.contains("hunter2"),
            "{e}"
        );
    }

    async fn defs_by_prefix_per_scope_round_trip(t: TestDb) {
        let settings = open(&t).await;
        let full = ConfigDef {
            key: "llm.api_key".into(),
            default: Some(json!("")),
            r#type: "string".into(),
            display_name: "API Key".into(),
            description: "第三方服务 API 密钥".into(),
            category: "llm".into(),
            options: vec!["a".into(), "b".into()],
            min: Some(0.5),
            max: Some(2.0),
            step: Some(0.5),
            required: true,
            secret: true,
        };
        let web = settings.for_plugin("web");
        web.register_def(full.clone()).await.unwrap();
        for key in ["llm.model", "ui.theme", "llm"] {
            web.register_def(ConfigDef {
                key: key.into(),
                ..ConfigDef::default()
            })
            .await
            .unwrap();
        }
        settings
            .register_def(
                &Scope::Core,
                ConfigDef {
                    key: "llm.core_only".into(),
                    ..ConfigDef::default()
                },
            )
            .await
            .unwrap();
        let keys = |defs: Vec<ConfigDef>| defs.into_iter().map(|d| d.key).collect::<Vec<_>>();
        assert_eq!(
            keys(web.defs("llm.").await.unwrap()),
            ["llm.api_key", "llm.model"]
        );
        assert_eq!(
            keys(web.defs("").await.unwrap()),
            ["llm", "llm.api_key", "llm.model", "ui.theme"]
        );
        assert_eq!(
            keys(settings.defs(&Scope::Core, "").await.unwrap()),
            ["llm.core_only"]
        );
        assert!(settings
            .for_plugin("other")
            .defs("")
            .await
            .unwrap()
            .is_empty());
        assert_eq!(web.defs("llm.api").await.unwrap(), [full]);
        // The seed's JSON names, empty fields left out.
        let json = serde_json::to_value(ConfigDef {
            key: "k".into(),
            r#type: "boolean".into(),
            display_name: "K".into(),
            ..ConfigDef::default()
        })
        .unwrap();
        assert_eq!(
            json,
            json!({"key": "k", "type": "boolean", "display_name": "K"})
        );
    }

    async fn dump_masks_secrets_and_lists_every_scope(t: TestDb) {
        let settings = open(&t).await;
        let secret = "sk-live-0123456789";
        let llm = settings.for_plugin("llm-proxy");
        llm.register_def(ConfigDef {
            key: "provider_key".into(),
            r#type: "string".into(),
            display_name: "API Key".into(),
            secret: true,
            required: true,
            ..ConfigDef::default()
        })
        .await
        .unwrap();
        llm.set("provider_key", json!(secret)).await.unwrap();
        llm.set("model", json!("gpt")).await.unwrap();
        llm.set_core("core.admin_token", json!("core-secret"))
            .await
            .unwrap();
        settings
            .register_def(
                &Scope::Core,
                ConfigDef {
                    key: "core.admin_token".into(),
                    secret: true,
                    ..ConfigDef::default()
                },
            )
            .await
            .unwrap();
        llm.set_core("core.daemon.data_dir", json!("/data"))
            .await
            .unwrap();
        // A secret with a default that is never set is masked too.
        settings
            .for_plugin("empty")
            .register_def(ConfigDef {
                key: "token".into(),
                default: Some(json!("default-token")),
                secret: true,
                ..ConfigDef::default()
            })
            .await
            .unwrap();
        settings
            .for_plugin("defs-only")
            .register_def(ConfigDef {
                key: "x".into(),
                ..ConfigDef::default()
            })
            .await
            .unwrap();

        let dump = llm.dump().await.unwrap();
        assert_eq!(
            dump,
            json!({
                "core": {
                    "core.admin_token": "••••••",
                    "core.daemon.data_dir": "/data",
                },
                "plugins": {
                    "defs-only": {},
                    "empty": {"token": "••••••"},
                    "llm-proxy": {"model": "gpt", "provider_key": "••••••"},
                },
            })
        );
        let text = dump.to_string();
        assert!(
            !text.contains(secret) && !text.contains("core-secret"),
            "{text}"
        );
        assert!(!text.contains("default-token"), "{text}");
        // The plugin itself still reads its real key.
        assert_eq!(llm.get("provider_key").await.unwrap(), json!(secret));
        assert_eq!(SECRET_MASK, "••••••");
    }

    #[test]
    fn core_keys_named_like_credentials_are_secret() {
        for key in [
            "llm.openai.api_key",
            "core.llm.API_KEY",
            "weather.apikey",
            "telegram.bot_token",
            "token",
            "oauth.client_secret",
            "smtp-password",
            "Mail.Password",
            "db.api-key",
        ] {
            assert!(secret_by_name(key), "{key}");
        }
        for key in [
            "llm.max_tokens",
            "core.daemon.data_dir",
            "token_limit",
            "secrets_dir",
            "password_hint",
        ] {
            assert!(!secret_by_name(key), "{key}");
        }
    }

    async fn masked_reads_hide_secrets_by_def_and_core_keys_by_name(t: TestDb) {
        let settings = open(&t).await;
        let llm = plugin("llm-proxy");
        settings
            .register_def(
                &llm,
                ConfigDef {
                    key: "provider_key".into(),
                    secret: true,
                    ..ConfigDef::default()
                },
            )
            .await
            .unwrap();
        settings
            .set(&llm, "provider_key", json!({"k": "sk-1"}))
            .await
            .unwrap();
        settings.set(&llm, "model", json!("gpt")).await.unwrap();
        // A plugin key named like a credential is not secret without its def: the
        // plugin says what its secrets are.
        settings.set(&llm, "token", json!("t-1")).await.unwrap();
        settings
            .set(&Scope::Core, "llm.openai.api_key", json!("sk-core"))
            .await
            .unwrap();
        settings
            .set(&Scope::Core, "core.plain", json!(3))
            .await
            .unwrap();
        settings
            .set(&Scope::Core, "core.admin_pin", json!(1234))
            .await
            .unwrap();
        settings
            .register_def(
                &Scope::Core,
                ConfigDef {
                    key: "core.admin_pin".into(),
                    secret: true,
                    ..ConfigDef::default()
                },
            )
            .await
            .unwrap();
        // A def cannot make a credential-named core key public.
        settings
            .register_def(
                &Scope::Core,
                ConfigDef {
                    key: "llm.openai.api_key".into(),
                    secret: false,
                    ..ConfigDef::default()
                },
            )
            .await
            .unwrap();

        let mask = json!(SECRET_MASK);
        let cases = [
            (&llm, "provider_key", mask.clone(), json!({"k": "sk-1"})),
            (&llm, "model", json!("gpt"), json!("gpt")),
            (&llm, "token", json!("t-1"), json!("t-1")),
            (
                &Scope::Core,
                "llm.openai.api_key",
                mask.clone(),
                json!("sk-core"),
            ),
            (&Scope::Core, "core.admin_pin", mask.clone(), json!(1234)),
            (&Scope::Core, "core.plain", json!(3), json!(3)),
        ];
        for (scope, key, masked, clear) in cases {
            assert_eq!(
                settings.read(scope, key, Secrets::Masked).await.unwrap(),
                masked,
                "{scope} {key}"
            );
            assert_eq!(
                settings.read(scope, key, Secrets::Clear).await.unwrap(),
                clear,
                "{scope} {key}"
            );
            assert_eq!(settings.get(scope, key).await.unwrap(), clear);
            assert_eq!(
                settings.is_secret(scope, key).await.unwrap(),
                masked == mask,
                "{scope} {key}"
            );
        }
        // Secret whether set or not; a missing key is still NOT_FOUND when masked.
        assert!(settings
            .is_secret(&Scope::Core, "x.bot_token")
            .await
            .unwrap());
        assert!(!settings.is_secret(&plugin("none"), "k").await.unwrap());
        assert!(matches!(
            settings
                .read(&Scope::Core, "x.bot_token", Secrets::Masked)
                .await
                .unwrap_err(),
            StorageError::NotFound { .. }
        ));
        assert!(matches!(
            settings
                .read(&plugin("none"), "k", Secrets::Masked)
                .await
                .unwrap_err(),
            StorageError::NotFound { .. }
        ));
        // Dump masks core credentials by name too.
        let dump = settings.dump().await.unwrap();
        assert_eq!(dump["core"]["llm.openai.api_key"], mask);
        assert_eq!(dump["core"]["core.admin_pin"], mask);
        assert_eq!(dump["core"]["core.plain"], json!(3));
        assert!(!dump.to_string().contains("sk-"), "{dump}");
    }

    async fn plugin_view_maps_the_seed_methods(t: TestDb) {
        let settings = open(&t).await;
        let a = settings.for_plugin("a");
        let b = settings.for_plugin("b");
        assert_eq!(a.caller(), "a");
        a.set("k", json!("a's")).await.unwrap();
        b.set("k", json!("b's")).await.unwrap();
        assert_eq!(a.get("k").await.unwrap(), json!("a's"));
        assert_eq!(b.get_plugin("a", "k").await.unwrap(), json!("a's"));
        b.set_plugin("a", "from_b", json!(1)).await.unwrap();
        assert_eq!(a.list("").await.unwrap(), ["from_b", "k"]);
        assert_eq!(b.list_plugin("a", "from").await.unwrap(), ["from_b"]);
        assert_eq!(b.list("").await.unwrap(), ["k"]);
        a.set_core("core.x", json!(false)).await.unwrap();
        assert_eq!(b.get_core("core.x").await.unwrap(), json!(false));
        assert_eq!(b.list_core("core.").await.unwrap(), ["core.x"]);
        assert!(matches!(
            a.get_core("k").await.unwrap_err(),
            StorageError::NotFound { .. }
        ));
        assert_eq!(a.plugins().await.unwrap(), ["a", "b"]);
        // A plugin named like a core key prefix or "core" is still just a plugin.
        settings
            .for_plugin("core")
            .set("k", json!(0))
            .await
            .unwrap();
        assert!(matches!(
            settings.get(&Scope::Core, "k").await.unwrap_err(),
            StorageError::NotFound { .. }
        ));
    }

    #[tokio::test]
    async fn every_acknowledged_write_is_on_disk_for_another_connection() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings::new(Db::open(dir.path()).await.unwrap());
        for i in 0..20 {
            settings
                .set(&plugin("p"), &format!("k{i}"), json!(i))
                .await
                .unwrap();
        }
        // A second, independent connection (as after a crash: no shared cache) sees
        // every acknowledged write without the first one being closed.
        let other = Connection::open(dir.path().join("hearth.db")).unwrap();
        let n: i64 = other
            .query_row("SELECT count(*) FROM config_p", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 20);
        drop(settings);
    }
}
