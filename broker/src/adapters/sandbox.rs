//! The sandboxed Lua 5.4 VM an adapter runs in, and its built-ins.
//!
//! - Libraries: base (without `dofile`, `loadfile`, `print` → `log("debug")`, and a
//!   `collectgarbage` that only counts and collects), `string` (without `string.dump`),
//!   `table`, `math`, `utf8`. No `os`, `io`, `debug`, `package`/`require`, `coroutine`.
//! - `load` compiles text only (mode `"t"`): bytecode is refused.
//! - An instruction budget per call (a count hook every [`HOOK_STEP`] instructions) and a
//!   memory bound for the whole VM. `pcall`/`xpcall` re-raise once the budget is spent, so
//!   a script cannot swallow the bound and loop on.
//! - `json.encode`, `json.decode`, `json.null`, `json.array(t)` (mark `t` as an array, so an
//!   empty one encodes as `[]`), `log(level, message)`, `http_get(url)`,
//!   `http_post(url, body)`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mlua::{
    HookTriggers, Lua, LuaOptions, LuaSerdeExt, MultiValue, StdLib, Table, Value as LuaValue,
    VmState,
};
use serde_json::{Map, Value};

use super::{http, Limits};

/// The count hook fires every this many VM instructions (at most): fine enough for the
/// bound, rare enough to cost nothing measurable.
pub(crate) const HOOK_STEP: u64 = 1000;

/// Runs after the libraries load, before the memory bound is set. Gets the budget check.
const PRELUDE: &str = r#"
local check = ...
local raw_pcall, raw_xpcall, raw_load, raw_collect = pcall, xpcall, load, collectgarbage
pcall = function(...) return check(raw_pcall(...)) end
xpcall = function(...) return check(raw_xpcall(...)) end
load = function(chunk, name, mode, ...)
  if mode ~= nil and mode ~= "t" then
    error("load: only text chunks are allowed (mode \"t\")", 2)
  end
  return raw_load(chunk, name, "t", ...)
end
collectgarbage = function(opt, ...)
  if opt == nil or opt == "collect" or opt == "count" or opt == "step" or opt == "isrunning" then
    return raw_collect(opt, ...)
  end
  error("collectgarbage: option '" .. tostring(opt) .. "' is not allowed", 2)
end
dofile, loadfile = nil, nil
string.dump = nil
"#;

/// The per-call instruction budget, shared with the count hook.
struct Budget {
    used: AtomicU64,
    limit: u64,
    exceeded: AtomicBool,
}

impl Budget {
    fn error(&self) -> mlua::Error {
        mlua::Error::runtime(format!("exceeded {} instructions", self.limit))
    }
}

/// One adapter's Lua VM with its bounds. Not shared: the adapter keeps it behind a mutex.
pub(crate) struct Vm {
    pub(crate) lua: Lua,
    budget: Arc<Budget>,
}

impl Vm {
    /// A fresh sandboxed VM; `log_name` tags its `log` and `print` output.
    pub(crate) fn new(limits: &Limits, log_name: &str) -> mlua::Result<Vm> {
        let libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        let budget = Arc::new(Budget {
            used: AtomicU64::new(0),
            limit: limits.instructions,
            exceeded: AtomicBool::new(false),
        });

        let step = HOOK_STEP.min(limits.instructions).max(1);
        let hook_budget = budget.clone();
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(step as u32),
            move |_, _| {
                let used = hook_budget.used.fetch_add(step, Ordering::Relaxed) + step;
                if used >= hook_budget.limit {
                    hook_budget.exceeded.store(true, Ordering::Relaxed);
                    return Err(hook_budget.error());
                }
                Ok(VmState::Continue)
            },
        )?;

        let check_budget = budget.clone();
        let check = lua.create_function(move |_, args: MultiValue| {
            if check_budget.exceeded.load(Ordering::Relaxed) {
                return Err(check_budget.error());
            }
            Ok(args)
        })?;
        lua.load(PRELUDE)
            .set_name("=hearth sandbox")
            .call::<()>(check)?;
        install_builtins(&lua, limits, log_name)?;
        lua.set_memory_limit(limits.memory)?;
        Ok(Vm { lua, budget })
    }

    /// Resets the instruction budget: call before each entry into Lua.
    pub(crate) fn start_call(&self) {
        self.budget.used.store(0, Ordering::Relaxed);
        self.budget.exceeded.store(false, Ordering::Relaxed);
    }

    /// Whether the last call ran out of instructions.
    pub(crate) fn budget_exceeded(&self) -> bool {
        self.budget.exceeded.load(Ordering::Relaxed)
    }
}

fn install_builtins(lua: &Lua, limits: &Limits, log_name: &str) -> mlua::Result<()> {
    let globals = lua.globals();

    let json = lua.create_table()?;
    json.set(
        "encode",
        lua.create_function(|lua, v: LuaValue| encode(lua, v))?,
    )?;
    json.set(
        "decode",
        lua.create_function(|lua, text: mlua::String| {
            let parsed: Value = serde_json::from_slice(&text.as_bytes())
                .map_err(|e| mlua::Error::runtime(format!("json.decode: {e}")))?;
            to_lua(lua, &parsed)
        })?,
    )?;
    json.set("null", lua.null())?;
    json.set(
        "array",
        lua.create_function(|lua, t: Option<Table>| {
            let t = match t {
                Some(t) => t,
                None => lua.create_table()?,
            };
            t.set_metatable(Some(lua.array_metatable()))?;
            Ok(t)
        })?,
    )?;
    globals.set("json", json)?;

    let name: Arc<str> = Arc::from(log_name);
    let log_as = name.clone();
    globals.set(
        "log",
        lua.create_function(move |_, (level, message): (String, LuaValue)| {
            let message = message.to_string()?;
            match level.as_str() {
                "error" => tracing::error!(adapter = %log_as, "{message}"),
                "warn" | "warning" => tracing::warn!(adapter = %log_as, "{message}"),
                "debug" => tracing::debug!(adapter = %log_as, "{message}"),
                "trace" => tracing::trace!(adapter = %log_as, "{message}"),
                _ => tracing::info!(adapter = %log_as, "{message}"),
            }
            Ok(())
        })?,
    )?;
    let print_as = name;
    globals.set(
        "print",
        lua.create_function(move |_, args: MultiValue| {
            let parts = args
                .iter()
                .map(|v| v.to_string())
                .collect::<mlua::Result<Vec<_>>>()?;
            tracing::debug!(adapter = %print_as, "{}", parts.join("\t"));
            Ok(())
        })?,
    )?;

    // `builtin(name)`: a fresh copy of a built-in adapter's table, so a script for an
    // OpenAI-compatible API can start from `builtin("openai")` and change only what
    // differs instead of copying the whole script.
    globals.set(
        "builtin",
        lua.create_function(|lua, name: String| {
            let Some((_, source)) = super::BUILTINS.iter().find(|(n, _)| *n == name) else {
                let known: Vec<_> = super::BUILTINS.iter().map(|(n, _)| *n).collect();
                return Err(mlua::Error::runtime(format!(
                    "builtin: no built-in adapter `{name}` (built-in: {})",
                    known.join(", ")
                )));
            };
            lua.load(*source)
                .set_name(format!("={name}.lua"))
                .set_mode(mlua::ChunkMode::Text)
                .call::<Table>(())
        })?,
    )?;

    let (timeout, max_body) = (limits.http_timeout, limits.http_max_body);
    globals.set(
        "http_get",
        lua.create_function(move |_, url: String| {
            http::fetch(http::Method::Get, &url, None, timeout, max_body)
                .map_err(mlua::Error::runtime)
        })?,
    )?;
    globals.set(
        "http_post",
        lua.create_function(move |_, (url, body): (String, mlua::String)| {
            let body = body.as_bytes().to_vec();
            http::fetch(http::Method::Post, &url, Some(body), timeout, max_body)
                .map_err(mlua::Error::runtime)
        })?,
    )?;
    Ok(())
}

/// `json.encode`: a Lua value → JSON text.
fn encode(lua: &Lua, v: LuaValue) -> mlua::Result<String> {
    let value = from_lua(lua, v).map_err(|e| mlua::Error::runtime(format!("json.encode: {e}")))?;
    serde_json::to_string(&value).map_err(|e| mlua::Error::runtime(format!("json.encode: {e}")))
}

/// Deeper nesting than this is refused (it is almost surely a table that contains itself).
const MAX_DEPTH: usize = 200;

/// A Lua value → JSON. Tables: one with the array metatable (every array `json.decode`
/// made, and `json.array(t)`) is an array; one whose keys are all positive integers is an
/// array (holes become `null`; very sparse ones are refused); one whose keys are all
/// strings, and the empty table, an object. Mixed keys, functions, NaN, cycles are errors
/// naming the path (`messages[2].content`). `json.null` → `null`. Object keys come out sorted.
pub(crate) fn from_lua(lua: &Lua, v: LuaValue) -> Result<Value, String> {
    let array_mt = lua.array_metatable().to_pointer();
    convert(&v, array_mt, &mut String::new(), 0)
}

fn convert(
    v: &LuaValue,
    array_mt: *const std::ffi::c_void,
    path: &mut String,
    depth: usize,
) -> Result<Value, String> {
    let at = |path: &str| {
        if path.is_empty() {
            String::new()
        } else {
            format!("at `{path}`: ")
        }
    };
    Ok(match v {
        LuaValue::Nil => Value::Null,
        LuaValue::LightUserData(p) if p.0.is_null() => Value::Null,
        LuaValue::Boolean(b) => Value::Bool(*b),
        LuaValue::Integer(i) => Value::from(*i),
        LuaValue::Number(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => Value::Number(n),
            None => {
                return Err(format!(
                    "{}cannot encode {f} (not a finite number)",
                    at(path)
                ))
            }
        },
        LuaValue::String(s) => Value::String(s.to_string_lossy()),
        LuaValue::Table(t) => {
            if depth >= MAX_DEPTH {
                return Err(format!(
                    "{}nested more than {MAX_DEPTH} deep (a table that contains itself?)",
                    at(path)
                ));
            }
            let mut ints: Vec<(i64, LuaValue)> = Vec::new();
            let mut strings: Vec<(String, LuaValue)> = Vec::new();
            for pair in t.pairs::<LuaValue, LuaValue>() {
                let (k, item) = pair.map_err(|e| format!("{}{e}", at(path)))?;
                match k {
                    LuaValue::Integer(i) if i >= 1 => ints.push((i, item)),
                    LuaValue::String(s) => strings.push((s.to_string_lossy(), item)),
                    other => {
                        return Err(format!(
                            "{}cannot encode a table key of type {}",
                            at(path),
                            other.type_name()
                        ))
                    }
                }
            }
            let is_array = t.metatable().is_some_and(|m| m.to_pointer() == array_mt);
            if !strings.is_empty() && (!ints.is_empty() || is_array) {
                return Err(format!(
                    "{}table mixes array items and named keys",
                    at(path)
                ));
            }
            if is_array || !ints.is_empty() {
                ints.sort_by_key(|(i, _)| *i);
                let len = ints.last().map_or(0, |(i, _)| *i as usize);
                if len > 2 * ints.len() + 10 {
                    return Err(format!(
                        "{}array too sparse ({} items, highest index {len})",
                        at(path),
                        ints.len()
                    ));
                }
                let mut out = vec![Value::Null; len];
                let base = path.len();
                for (i, item) in ints {
                    path.push_str(&format!("[{}]", i - 1));
                    out[i as usize - 1] = convert(&item, array_mt, path, depth + 1)?;
                    path.truncate(base);
                }
                Value::Array(out)
            } else {
                strings.sort_by(|a, b| a.0.cmp(&b.0));
                let mut out = Map::new();
                let base = path.len();
                for (k, item) in strings {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(&k);
                    let converted = convert(&item, array_mt, path, depth + 1)?;
                    path.truncate(base);
                    out.insert(k, converted);
                }
                Value::Object(out)
            }
        }
        other => return Err(format!("{}cannot encode a {}", at(path), other.type_name())),
    })
}

/// JSON → a Lua value. Arrays get the array metatable, so `[]` and `{}` come back as they
/// came; integers stay integers. A `null` member of an object is left out (the field reads
/// as nil, as with HomeAgent's gopher-lua JSON); a `null` array element is `json.null`, so
/// positions hold.
pub(crate) fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<LuaValue> {
    Ok(match v {
        Value::Null => lua.null(),
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => LuaValue::Integer(i),
            None => LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            t.set_metatable(Some(lua.array_metatable()))?;
            LuaValue::Table(t)
        }
        Value::Object(members) => LuaValue::Table(object_to_lua(lua, members)?),
    })
}

fn object_to_lua(lua: &Lua, members: &Map<String, Value>) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, members.len())?;
    for (k, v) in members {
        if !v.is_null() {
            t.raw_set(k.as_str(), to_lua(lua, v)?)?;
        }
    }
    Ok(t)
}
