//! A plugin's settings form, generated from the `ConfigDef`s it registered, and its
//! POST.
//!
//! Inputs by def: `options` → a drop-down; `boolean` → a checkbox; `number` /
//! `integer` → a number field (with the def's `min`, `max`, `step`); `secret` → a
//! password field that is always empty (the value is never sent to the browser) and
//! replaces the stored value only when something is typed; anything else a text
//! field. Labels are the def's `display_name` (else its key), with its `description`
//! beneath.
//!
//! What is typed becomes JSON as `hearth settings set` makes it: text for a `string`
//! key, else JSON when it parses (`3`, `true`, `{"a":1}`) and text when not; an empty
//! field of another type is `null`. Values are checked with the defs' own rule
//! ([`ConfigDef::check`], the one [`Settings::set`](crate::storage::Settings::set)
//! applies) before anything is written: one wrong value and nothing is saved, the
//! page comes back with what was typed and the reason beside the field. Only changed
//! keys are written.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::auth::SessionView;
use super::html::{esc, seg, Flash, Nav};
use super::{Admin, AdminState};
use crate::storage::{ConfigDef, Scope, Secrets, StorageError};

/// A submission that was refused: what was typed (secrets left out) and why.
#[derive(Debug, Default)]
pub(super) struct Refused {
    /// Field text by key (non-secret keys only; `"true"` / `""` for a checkbox).
    typed: HashMap<String, String>,
    /// Reason by key.
    errors: HashMap<String, String>,
}

/// The value field of `key`.
fn value_field(key: &str) -> String {
    format!("v:{key}")
}

/// The field saying a checkbox of `key` was on the form (an unchecked box sends
/// nothing).
fn bool_field(key: &str) -> String {
    format!("b:{key}")
}

/// The stored value of each def's key, secrets masked; `None` when unset.
async fn current(
    admin: &Admin,
    scope: &Scope,
    defs: &[ConfigDef],
) -> Result<HashMap<String, Value>, StorageError> {
    let mut values = HashMap::new();
    for d in defs {
        match admin
            .http
            .settings
            .read(scope, &d.key, Secrets::Masked)
            .await
        {
            Ok(v) => {
                values.insert(d.key.clone(), v);
            }
            Err(StorageError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(values)
}

/// A value as the text of an input.
fn text_of(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What typed `raw` means for `def` (module docs).
fn value_of(def: &ConfigDef, raw: &str) -> Value {
    if def.r#type == "string" {
        return Value::String(raw.to_string());
    }
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(raw.to_string()))
}

fn num_attr(name: &str, v: Option<f64>) -> String {
    v.map(|v| format!(r#" {name}="{v}""#)).unwrap_or_default()
}

/// The input of one def.
fn input(def: &ConfigDef, id: &str, stored: Option<&Value>, typed: Option<&str>) -> String {
    let name = esc(&value_field(&def.key));
    let text = typed
        .map(str::to_string)
        .or_else(|| stored.map(text_of))
        .unwrap_or_default();
    let required = if def.required && !def.secret {
        " required"
    } else {
        ""
    };
    if def.secret {
        let placeholder = if stored.is_some() {
            "•••••• set — type to replace"
        } else {
            "not set"
        };
        return format!(
            r#"<input type="password" id="{id}" name="{name}" value="" autocomplete="new-password" placeholder="{placeholder}" data-secret="1">"#
        );
    }
    if !def.options.is_empty() {
        let mut options = String::new();
        if !def.options.contains(&text) {
            let _ = write!(
                options,
                r#"<option value="{}" selected>{}</option>"#,
                esc(&text),
                if text.is_empty() {
                    "(not set)".to_string()
                } else {
                    esc(&text)
                }
            );
        }
        for o in &def.options {
            let selected = if *o == text { " selected" } else { "" };
            let _ = write!(
                options,
                r#"<option value="{v}"{selected}>{v}</option>"#,
                v = esc(o)
            );
        }
        return format!(r#"<select id="{id}" name="{name}"{required}>{options}</select>"#);
    }
    match def.r#type.as_str() {
        "boolean" => {
            let checked = if text == "true" { " checked" } else { "" };
            format!(
                r#"<input type="hidden" name="{marker}" value="1"><input type="checkbox" id="{id}" name="{name}" value="true"{checked}>"#,
                marker = esc(&bool_field(&def.key)),
            )
        }
        "number" | "integer" => {
            let step = match (def.step, def.r#type.as_str()) {
                (Some(s), _) => format!(r#" step="{s}""#),
                (None, "integer") => r#" step="1""#.to_string(),
                (None, _) => r#" step="any""#.to_string(),
            };
            // A refused text comes back as typed (a number field would show it empty).
            let kind = match typed {
                Some(t) if !t.trim().is_empty() && t.trim().parse::<f64>().is_err() => "text",
                _ => "number",
            };
            format!(
                r#"<input type="{kind}" id="{id}" name="{name}" value="{}"{}{}{step}{required}>"#,
                esc(&text),
                num_attr("min", def.min),
                num_attr("max", def.max),
            )
        }
        _ => format!(
            r#"<input type="text" id="{id}" name="{name}" value="{}"{required}>"#,
            esc(&text)
        ),
    }
}

/// The settings section of plugin `name`'s page: its form, or a note that it has no
/// defs; with `refused`, what was typed and the reasons.
pub(super) async fn section(
    admin: &Admin,
    session: &SessionView,
    name: &str,
    refused: Option<&Refused>,
) -> String {
    let scope = Scope::Plugin(name.to_string());
    let loaded = async {
        let defs = admin.http.settings.defs(&scope, "").await?;
        let values = current(admin, &scope, &defs).await?;
        Ok::<_, StorageError>((defs, values))
    };
    let (defs, values) = match loaded.await {
        Ok(x) => x,
        Err(e) => {
            return format!(
                r#"<h2>Settings</h2><p class="flash error">{}</p>"#,
                esc(&e.to_string())
            )
        }
    };
    if defs.is_empty() {
        return "<h2>Settings</h2><p>This plugin defines no settings.</p>".into();
    }
    // Grouped by category, in the order defs are listed (by key).
    let mut categories: Vec<(&str, Vec<&ConfigDef>)> = Vec::new();
    for d in &defs {
        match categories.iter_mut().find(|(c, _)| *c == d.category) {
            Some((_, v)) => v.push(d),
            None => categories.push((&d.category, vec![d])),
        }
    }
    let mut fields = String::new();
    let mut n = 0;
    for (category, defs) in categories {
        if !category.is_empty() {
            let _ = write!(fields, "<fieldset><legend>{}</legend>", esc(category));
        }
        for d in defs {
            n += 1;
            let id = format!("setting-{n}");
            let label = if d.display_name.is_empty() {
                &d.key
            } else {
                &d.display_name
            };
            let typed = refused
                .and_then(|r| r.typed.get(&d.key))
                .map(String::as_str);
            let error = refused
                .and_then(|r| r.errors.get(&d.key))
                .map(|e| format!(r#"<p class="field-error" role="alert">{}</p>"#, esc(e)))
                .unwrap_or_default();
            let mut notes = Vec::new();
            if !d.r#type.is_empty() {
                notes.push(esc(&d.r#type));
            }
            if d.required {
                notes.push("required".into());
            }
            if d.secret {
                notes.push("secret".into());
            } else if let Some(default) = &d.default {
                notes.push(format!("default {}", esc(&default.to_string())));
            }
            let description = if d.description.is_empty() {
                String::new()
            } else {
                format!(r#"<p class="help">{}</p>"#, esc(&d.description))
            };
            let _ = write!(
                fields,
                r#"<div class="field{invalid}" data-key="{key}"><label for="{id}">{label}</label> <code class="key">{key}</code> <span class="notes">{notes}</span>{input}{description}{error}</div>"#,
                invalid = if error.is_empty() { "" } else { " invalid" },
                key = esc(&d.key),
                label = esc(label),
                notes = notes.join(" · "),
                input = input(d, &id, values.get(&d.key), typed),
            );
        }
        if !category.is_empty() {
            fields.push_str("</fieldset>");
        }
    }
    format!(
        r#"<h2>Settings</h2>
<form method="post" action="/plugins/{link}/settings" class="settings" id="settings-form" novalidate>{csrf}{fields}<button type="submit">Save settings</button></form>"#,
        link = seg(name),
        csrf = super::html::csrf_field(&session.csrf),
    )
}

/// `POST /plugins/{name}/settings`.
pub(super) async fn save(
    State(admin): AdminState,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let post = match admin.post(&headers, &body) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let back = format!("/plugins/{}", seg(&name));
    let scope = Scope::Plugin(name.clone());
    let settings = &admin.http.settings;
    let loaded = async {
        let defs = settings.defs(&scope, "").await?;
        let values = current(&admin, &scope, &defs).await?;
        Ok::<_, StorageError>((defs, values))
    };
    let (defs, stored) = match loaded.await {
        Ok(x) => x,
        Err(e) => return admin.done(&post.session, Flash::error(e.to_string()), &back),
    };
    let mut refused = Refused::default();
    let mut changes: Vec<(&ConfigDef, Value)> = Vec::new();
    for d in &defs {
        let raw = post.field(&value_field(&d.key));
        let value = if d.r#type == "boolean" && d.options.is_empty() && !d.secret {
            if post.field(&bool_field(&d.key)).is_none() {
                continue; // not on the form that was sent
            }
            refused.typed.insert(
                d.key.clone(),
                if raw.is_some() { "true" } else { "" }.into(),
            );
            Value::Bool(raw.is_some())
        } else {
            let Some(raw) = raw else { continue };
            if d.secret {
                if raw.is_empty() {
                    continue; // left as it is
                }
            } else {
                refused.typed.insert(d.key.clone(), raw.to_string());
            }
            value_of(d, raw)
        };
        let old = stored.get(&d.key);
        let unchanged = match old {
            // A secret reads masked: any typed value replaces it.
            Some(old) => !d.secret && *old == value,
            None => value.is_null() || value == Value::Bool(false) || value == "",
        };
        if unchanged {
            continue;
        }
        if let Err(reason) = d.check(&value) {
            refused.errors.insert(d.key.clone(), reason);
            continue;
        }
        changes.push((d, value));
    }
    if !refused.errors.is_empty() {
        let Some(snapshot) = admin
            .http
            .supervisor
            .snapshots()
            .into_iter()
            .find(|s| s.name == name)
        else {
            return admin.done(
                &post.session,
                Flash::error(format!("plugin {name} is no longer loaded")),
                "/",
            );
        };
        let count = refused.errors.len();
        admin.sessions.set_flash(
            &post.session.id,
            Flash::error(format!(
                "Not saved: {} the definition refuses (see below). Nothing was changed.",
                crate::term::count(count, "value", "values")
            )),
        );
        let section = section(&admin, &post.session, &name, Some(&refused)).await;
        let body = super::pages::plugin_body(&snapshot, &admin, &post.session.csrf, &section);
        let page = admin.render(
            &post.session,
            &format!("Plugin {name}"),
            Nav::Plugins,
            &body,
        );
        return (StatusCode::BAD_REQUEST, page).into_response();
    }
    save_changes(&admin, &post.session, &name, &scope, changes, &back).await
}

async fn save_changes(
    admin: &Arc<Admin>,
    session: &SessionView,
    name: &str,
    scope: &Scope,
    changes: Vec<(&ConfigDef, Value)>,
    back: &str,
) -> Response {
    if changes.is_empty() {
        return admin.done(session, Flash::ok("Nothing changed."), back);
    }
    let mut saved = Vec::new();
    for (d, value) in changes {
        if let Err(e) = admin.http.settings.set(scope, &d.key, value).await {
            let flash = Flash::error(if saved.is_empty() {
                e.to_string()
            } else {
                format!("{e} (saved before it: {})", saved.join(", "))
            });
            return admin.done(session, flash, back);
        }
        saved.push(d.key.clone());
    }
    tracing::info!(plugin = %name, keys = %saved.join(","), "admin page: settings saved");
    admin.done(
        session,
        Flash::ok(format!(
            "Saved {}: {}.",
            crate::term::count(saved.len(), "setting", "settings"),
            saved.join(", ")
        )),
        back,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(ty: &str) -> ConfigDef {
        ConfigDef {
            key: "k".into(),
            r#type: ty.into(),
            ..ConfigDef::default()
        }
    }

    #[test]
    fn typed_text_becomes_json_as_the_cli_makes_it() {
        assert_eq!(value_of(&def("string"), "12"), Value::String("12".into()));
        assert_eq!(value_of(&def("number"), " 12.5 "), serde_json::json!(12.5));
        assert_eq!(value_of(&def("number"), "abc"), Value::String("abc".into()));
        assert_eq!(value_of(&def("integer"), ""), Value::Null);
        assert_eq!(value_of(&def(""), "{\"a\":1}"), serde_json::json!({"a": 1}));
        assert!(def("number")
            .check(&value_of(&def("number"), "abc"))
            .is_err());
    }

    #[test]
    fn secrets_are_never_put_in_the_page() {
        let d = ConfigDef {
            secret: true,
            ..def("string")
        };
        let html = input(&d, "i", Some(&Value::String("••••••".into())), None);
        assert!(html.contains(r#"type="password""#));
        assert!(html.contains(r#"value="""#));
        assert!(!html.contains("value=\"••"));
    }

    #[test]
    fn inputs_follow_the_def() {
        let html = input(
            &ConfigDef {
                min: Some(1.0),
                max: Some(7.0),
                ..def("integer")
            },
            "i",
            Some(&serde_json::json!(3)),
            None,
        );
        assert!(html.contains(r#"type="number""#) && html.contains(r#"min="1""#));
        assert!(html.contains(r#"value="3""#) && html.contains(r#"step="1""#));
        let html = input(&def("boolean"), "i", Some(&Value::Bool(true)), None);
        assert!(html.contains("checkbox") && html.contains("checked"));
        let html = input(
            &ConfigDef {
                options: vec!["a".into(), "<b>".into()],
                ..def("string")
            },
            "i",
            Some(&Value::String("<b>".into())),
            None,
        );
        assert!(html.contains(r#"<option value="&lt;b&gt;" selected>"#));
    }
}
