//! Settings as the broker keeps them (`broker/src/storage/settings.rs`), in memory:
//! core keys, one table per plugin (created on its first write), the `ConfigDef`s, and
//! secrets (a def's `secret`, or a core key named like a credential) masked where the
//! broker masks them.
//!
//! A key whose def has type `string`, `number`, `integer` or `boolean` only takes
//! values of that JSON type (or `null`); another value is INVALID_ARGUMENT naming the
//! key, the expected type and the value (not quoted for a secret).

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use tonic::Status;

use crate::apis::ConfigDef;

/// What a masked secret reads as (the broker's `SECRET_MASK`).
pub(crate) const SECRET_MASK: &str = "••••••";

/// Endings of core key names that make a key secret without a def.
const SECRET_KEY_SUFFIXES: &[&str] = &["api_key", "apikey", "token", "secret", "password"];

/// Most characters of a plugin name kept in its table name.
const MAX_NAME_CHARS: usize = 48;

/// Whether a core key is secret by its name alone.
fn secret_by_name(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace('-', "_");
    SECRET_KEY_SUFFIXES.iter().any(|end| key.ends_with(end))
}

/// Whose settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Scope {
    /// Core keys.
    Core,
    /// A plugin's own keys.
    Plugin(String),
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Core => f.write_str("core"),
            Scope::Plugin(name) => write!(f, "plugin {name}"),
        }
    }
}

/// How a read treats secret values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Secrets {
    Masked,
    Clear,
}

/// One scope's keys and defs.
#[derive(Debug, Default, Clone)]
struct Table {
    values: BTreeMap<String, Value>,
    defs: BTreeMap<String, ConfigDef>,
}

/// Every scope's settings.
#[derive(Debug, Default, Clone)]
pub(crate) struct SettingsStore {
    core: Table,
    /// Plugins with a table (they wrote a key or registered a def).
    plugins: BTreeMap<String, Table>,
}

fn invalid(what: &str, reason: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{what}: {reason}"))
}

fn check_scope(scope: &Scope) -> Result<(), Status> {
    match scope {
        Scope::Plugin(name) if name.is_empty() => Err(invalid("settings", "empty plugin name")),
        _ => Ok(()),
    }
}

fn check_key(key: &str) -> Result<(), Status> {
    if key.is_empty() {
        return Err(invalid("settings", "empty key"));
    }
    Ok(())
}

/// `config` or `config_<sanitized name>` (without the broker's collision suffixes).
fn table_name(scope: &Scope) -> String {
    match scope {
        Scope::Core => "config".into(),
        Scope::Plugin(plugin) => {
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
    }
}

/// Whether `value` fits `def`'s type (the broker's `ConfigDef::check`): `string`,
/// `number`, `integer` and `boolean` are checked, `null` always fits, any other type
/// is a hint. `Err` says what the def expects and what `value` is, quoting it unless
/// the def is secret.
fn check(def: &ConfigDef, value: &Value) -> Result<(), String> {
    let fits = match def.r#type.as_str() {
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
    let expected = match def.r#type.as_str() {
        "string" => "a string",
        "number" => "a number",
        "integer" => "an integer",
        _ => "a boolean (true or false)",
    };
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number with a fraction",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    if def.secret {
        return Err(format!(
            "expected {expected} (its def's type is `{}`), got {kind} (a secret: value not shown)",
            def.r#type
        ));
    }
    let mut shown = value.to_string();
    if shown.chars().count() > 60 {
        shown = shown.chars().take(60).collect::<String>() + "…";
    }
    Err(format!(
        "expected {expected} (its def's type is `{}`), got {shown} ({kind})",
        def.r#type
    ))
}

impl SettingsStore {
    fn table(&self, scope: &Scope) -> Option<&Table> {
        match scope {
            Scope::Core => Some(&self.core),
            Scope::Plugin(p) => self.plugins.get(p),
        }
    }

    fn table_mut(&mut self, scope: &Scope) -> &mut Table {
        match scope {
            Scope::Core => &mut self.core,
            Scope::Plugin(p) => self.plugins.entry(p.clone()).or_default(),
        }
    }

    fn not_found(scope: &Scope, key: &str) -> Status {
        Status::not_found(format!("no `{key}` in {}", table_name(scope)))
    }

    /// The value of `key`, in clear. NOT_FOUND when unset.
    pub(crate) fn get(&self, scope: &Scope, key: &str) -> Result<Value, Status> {
        self.read(scope, key, Secrets::Clear)
    }

    /// The value of `key`; a secret reads as [`SECRET_MASK`] with [`Secrets::Masked`].
    pub(crate) fn read(&self, scope: &Scope, key: &str, secrets: Secrets) -> Result<Value, Status> {
        check_scope(scope)?;
        check_key(key)?;
        let value = self
            .table(scope)
            .and_then(|t| t.values.get(key))
            .ok_or_else(|| Self::not_found(scope, key))?;
        if secrets == Secrets::Masked && self.is_secret(scope, key) {
            return Ok(Value::String(SECRET_MASK.into()));
        }
        Ok(value.clone())
    }

    /// Whether `key` of `scope` is secret, set or not.
    pub(crate) fn is_secret(&self, scope: &Scope, key: &str) -> bool {
        (*scope == Scope::Core && secret_by_name(key))
            || self
                .table(scope)
                .and_then(|t| t.defs.get(key))
                .is_some_and(|d| d.secret)
    }

    /// Sets `key` (any JSON); refused when its def declares another JSON type.
    pub(crate) fn set(&mut self, scope: &Scope, key: &str, value: Value) -> Result<(), Status> {
        check_scope(scope)?;
        check_key(key)?;
        if let Some(def) = self.table(scope).and_then(|t| t.defs.get(key)) {
            check(def, &value)
                .map_err(|reason| invalid(&format!("setting `{key}` of {scope}"), reason))?;
        }
        self.table_mut(scope).values.insert(key.into(), value);
        Ok(())
    }

    /// Keys starting with `prefix`, sorted.
    pub(crate) fn list(&self, scope: &Scope, prefix: &str) -> Result<Vec<String>, Status> {
        check_scope(scope)?;
        Ok(self
            .table(scope)
            .map(|t| {
                t.values
                    .keys()
                    .filter(|k| k.starts_with(prefix))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Records `def` (replacing one of the same key) and writes its default when the
    /// key is unset.
    pub(crate) fn register_def(&mut self, scope: &Scope, def: ConfigDef) -> Result<(), Status> {
        check_scope(scope)?;
        check_key(&def.key)?;
        let table = self.table_mut(scope);
        if let Some(default) = &def.default {
            table
                .values
                .entry(def.key.clone())
                .or_insert_with(|| default.clone());
        }
        table.defs.insert(def.key.clone(), def);
        Ok(())
    }

    /// The defs of `scope` whose key starts with `prefix`, by key.
    pub(crate) fn defs(&self, scope: &Scope, prefix: &str) -> Result<Vec<ConfigDef>, Status> {
        check_scope(scope)?;
        Ok(self
            .table(scope)
            .map(|t| {
                t.defs
                    .values()
                    .filter(|d| d.key.starts_with(prefix))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `{"core": {…}, "plugins": {name: {…}}}`, secrets masked.
    pub(crate) fn dump(&self) -> Value {
        let table = |scope: &Scope, t: &Table| -> Value {
            let map: Map<String, Value> = t
                .values
                .iter()
                .map(|(k, v)| {
                    let v = if self.is_secret(scope, k) {
                        Value::String(SECRET_MASK.into())
                    } else {
                        v.clone()
                    };
                    (k.clone(), v)
                })
                .collect();
            Value::Object(map)
        };
        let plugins: Map<String, Value> = self
            .plugins
            .iter()
            .map(|(p, t)| (p.clone(), table(&Scope::Plugin(p.clone()), t)))
            .collect();
        serde_json::json!({"core": table(&Scope::Core, &self.core), "plugins": plugins})
    }

    /// Plugins with a settings table, sorted.
    pub(crate) fn plugins(&self) -> Vec<String> {
        self.plugins.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn me() -> Scope {
        Scope::Plugin("weather".into())
    }

    #[test]
    fn values_keep_their_type_and_unset_keys_name_the_table() {
        let mut s = SettingsStore::default();
        let err = s.get(&me(), "n").unwrap_err();
        assert_eq!(
            (err.code(), err.message()),
            (tonic::Code::NotFound, "no `n` in config_weather")
        );
        assert!(s.list(&me(), "").unwrap().is_empty());
        assert!(s.plugins().is_empty(), "reads create no table");
        s.set(&me(), "n", json!(3)).unwrap();
        s.set(&me(), "o", json!({"a": null})).unwrap();
        assert_eq!(s.get(&me(), "n").unwrap(), json!(3));
        assert_eq!(s.list(&me(), "").unwrap(), ["n", "o"]);
        assert_eq!(s.plugins(), ["weather"]);
        assert_eq!(
            s.get(&me(), "").unwrap_err().message(),
            "settings: empty key"
        );
    }

    #[test]
    fn defs_check_types_write_defaults_once_and_mask_secrets() {
        let mut s = SettingsStore::default();
        s.set(&me(), "units", json!("metric")).unwrap();
        let def = |key: &str, ty: &str, default: Value, secret: bool| ConfigDef {
            key: key.into(),
            r#type: ty.into(),
            default: Some(default),
            secret,
            ..Default::default()
        };
        s.register_def(&me(), def("units", "string", json!("imperial"), false))
            .unwrap();
        s.register_def(&me(), def("days", "number", json!(3), false))
            .unwrap();
        s.register_def(&me(), def("api_key", "string", json!("k-1"), true))
            .unwrap();
        // A default never overwrites a value already set.
        assert_eq!(s.get(&me(), "units").unwrap(), json!("metric"));
        assert_eq!(s.get(&me(), "days").unwrap(), json!(3));
        let err = s.set(&me(), "days", json!("three")).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            err.message(),
            r#"setting `days` of plugin weather: expected a number (its def's type is `number`), got "three" (a string)"#
        );
        assert_eq!(s.get(&me(), "days").unwrap(), json!(3), "nothing written");
        s.set(&me(), "days", Value::Null).unwrap();
        s.register_def(&me(), def("n", "integer", json!(1), false))
            .unwrap();
        let err = s.set(&me(), "n", json!(1.5)).unwrap_err();
        assert!(err.message().contains("expected an integer"), "{err}");
        s.set(&me(), "n", json!(2.0)).unwrap();
        let err = s.set(&me(), "api_key", json!(7)).unwrap_err();
        assert!(
            err.message()
                .ends_with("got a number (a secret: value not shown)"),
            "{err}"
        );
        // Secrets: in clear for the owner, masked in dump and masked reads.
        assert_eq!(s.get(&me(), "api_key").unwrap(), json!("k-1"));
        assert_eq!(
            s.read(&me(), "api_key", Secrets::Masked).unwrap(),
            json!(SECRET_MASK)
        );
        s.set(&Scope::Core, "llm.openai.api_key", json!("sk"))
            .unwrap();
        let dump = s.dump();
        assert_eq!(dump["plugins"]["weather"]["api_key"], json!(SECRET_MASK));
        assert_eq!(dump["plugins"]["weather"]["days"], Value::Null);
        assert_eq!(dump["core"]["llm.openai.api_key"], json!(SECRET_MASK));
        assert_eq!(
            s.defs(&me(), "")
                .unwrap()
                .iter()
                .map(|d| d.key.as_str())
                .collect::<Vec<_>>(),
            ["api_key", "days", "n", "units"]
        );
    }

    /// `tests/golden/setting-types.json`: the broker's `ConfigDef::check` on each case.
    #[test]
    fn setting_types_match_the_broker_golden() {
        let Some(golden) = crate::testing::golden_file("setting-types.json") else {
            return;
        };
        let cases = golden["cases"].as_array().unwrap();
        assert!(cases.len() > 20);
        let mut wrong = Vec::new();
        for case in cases {
            let def = ConfigDef {
                key: "k".into(),
                r#type: case["type"].as_str().unwrap().into(),
                secret: case["secret"].as_bool().unwrap(),
                ..Default::default()
            };
            let text = case["value_json"].as_str().unwrap();
            let value: Value = serde_json::from_str(text).unwrap();
            let got = check(&def, &value).err();
            if got.as_deref() != case["error"].as_str() {
                wrong.push(format!("{case}: got {got:?}"));
            }
            // Through the store: INVALID_ARGUMENT naming key and scope, nothing written.
            for scope in [Scope::Core, me()] {
                let mut s = SettingsStore::default();
                s.register_def(&scope, def.clone()).unwrap();
                match (s.set(&scope, "k", value.clone()), &got) {
                    (Ok(()), None) => assert_eq!(s.get(&scope, "k").unwrap(), value),
                    (Err(e), Some(reason)) => {
                        assert_eq!(e.code(), tonic::Code::InvalidArgument);
                        assert_eq!(e.message(), format!("setting `k` of {scope}: {reason}"));
                        assert!(s.get(&scope, "k").is_err(), "nothing written");
                    }
                    (r, _) => wrong.push(format!("{case} in {scope}: set answered {r:?}")),
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
