//! Errors the LLM API itself reported, typed: a script that reads an error body, or an
//! error event inside a stream, raises it with the VM built-in
//! `raise_api_error{status, type, code, message, retry_after, request_id}` instead of a
//! plain `error(...)`. The broker then shows it as the provider's error (not as a script
//! failure) and failover reads its status and type: rate limits and overload move on to
//! the next source, an invalid request is not retried (see `llm::pool::Failure`).
//!
//! The built-in raises a Rust error through Lua, so it survives a script's `pcall` and
//! re-`error` unchanged; [`find`] takes it back out of the call's error.

use std::fmt;

use mlua::{Lua, Table, Value as LuaValue};

/// An error of the LLM API: an error status's body, an error body with 200, or an error
/// event inside a stream. Every field but `message` may be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct UpstreamError {
    /// The HTTP status: the response's when it was an error status, else the one the
    /// error names (Groq's `status_code`, Google's `code`); `None` when unknown (an
    /// Anthropic error event after 200).
    pub status: Option<u16>,
    /// The API's error type (`invalid_request_error`, `overloaded_error`,
    /// `RESOURCE_EXHAUSTED`); empty when it names none.
    pub kind: String,
    /// The API's error code (`tool_use_failed`, `insufficient_quota`); empty when none.
    pub code: String,
    /// The API's message.
    pub message: String,
    /// How long the API asks to wait before retrying, in seconds (`Retry-After`,
    /// Google's `RetryInfo`).
    pub retry_after_s: Option<u64>,
    /// The API's request id, for its support.
    pub request_id: String,
}

impl UpstreamError {
    /// An error known only by its message (a body no adapter could read).
    pub fn message(message: impl Into<String>) -> UpstreamError {
        UpstreamError {
            message: message.into(),
            ..UpstreamError::default()
        }
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = if self.message.is_empty() {
            "(no message)"
        } else {
            &self.message
        };
        write!(f, "API error: {message}")?;
        let mut details = Vec::new();
        if let Some(s) = self.status {
            details.push(format!("HTTP {s}"));
        }
        if !self.kind.is_empty() {
            details.push(format!("type {}", self.kind));
        }
        if !self.code.is_empty() && self.code != self.kind {
            details.push(format!("code {}", self.code));
        }
        if let Some(s) = self.retry_after_s {
            details.push(format!("retry after {s} s"));
        }
        if !self.request_id.is_empty() {
            details.push(format!("request_id {}", self.request_id));
        }
        if !details.is_empty() {
            write!(f, " ({})", details.join(", "))?;
        }
        Ok(())
    }
}

const FIELDS: &str = "status, type, code, message, retry_after, request_id";

/// Installs `raise_api_error(fields)` in `lua`.
pub(crate) fn install(lua: &Lua) -> mlua::Result<()> {
    let raise = lua.create_function(|_, fields: LuaValue| -> mlua::Result<()> {
        let error = match fields {
            LuaValue::Table(t) => from_table(&t)?,
            LuaValue::String(s) => UpstreamError::message(s.to_string_lossy()),
            other => {
                return Err(mlua::Error::runtime(format!(
                    "raise_api_error: expected a table ({FIELDS}), got {}",
                    other.type_name()
                )))
            }
        };
        Err(mlua::Error::external(error))
    })?;
    lua.globals().set("raise_api_error", raise)
}

fn from_table(t: &Table) -> mlua::Result<UpstreamError> {
    let bad = |key: &str, want: &str, got: &LuaValue| {
        mlua::Error::runtime(format!(
            "raise_api_error: field `{key}`: expected {want}, got {}",
            got.type_name()
        ))
    };
    let mut out = UpstreamError::default();
    for pair in t.pairs::<LuaValue, LuaValue>() {
        let (key, value) = pair?;
        let LuaValue::String(key) = key else {
            return Err(mlua::Error::runtime(format!(
                "raise_api_error: keys must be field names ({FIELDS}), got a {} key",
                key.type_name()
            )));
        };
        let key = key.to_string_lossy();
        // Text of a string or a number (codes come as either).
        let text = |v: &LuaValue| -> Option<String> {
            match v {
                LuaValue::String(s) => Some(s.to_string_lossy()),
                LuaValue::Integer(i) => Some(i.to_string()),
                LuaValue::Number(n) if n.fract() == 0.0 => Some(format!("{n:.0}")),
                LuaValue::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        let number = |v: &LuaValue| -> Option<f64> {
            match v {
                LuaValue::Integer(i) => Some(*i as f64),
                LuaValue::Number(n) => Some(*n),
                LuaValue::String(s) => s.to_str().ok()?.trim().parse().ok(),
                _ => None,
            }
        };
        if matches!(value, LuaValue::Nil) || value.is_null() {
            continue;
        }
        match key.as_str() {
            "status" => {
                let n = number(&value).ok_or_else(|| bad(&key, "an HTTP status", &value))?;
                out.status = (100.0..1000.0).contains(&n).then_some(n as u16);
            }
            "type" => out.kind = text(&value).ok_or_else(|| bad(&key, "string", &value))?,
            "code" => out.code = text(&value).ok_or_else(|| bad(&key, "string", &value))?,
            "message" => out.message = text(&value).ok_or_else(|| bad(&key, "string", &value))?,
            "request_id" => {
                out.request_id = text(&value).ok_or_else(|| bad(&key, "string", &value))?
            }
            "retry_after" => {
                let s = number(&value).ok_or_else(|| bad(&key, "seconds", &value))?;
                out.retry_after_s = (s.is_finite() && s >= 0.0).then(|| s.ceil() as u64);
            }
            other => {
                return Err(mlua::Error::runtime(format!(
                    "raise_api_error: unknown field `{other}` (known: {FIELDS})"
                )))
            }
        }
    }
    Ok(out)
}

/// The API error a script raised with `raise_api_error`, if `e` carries one.
pub(crate) fn find(e: &mlua::Error) -> Option<UpstreamError> {
    e.chain()
        .find_map(|e| e.downcast_ref::<UpstreamError>())
        .cloned()
}
