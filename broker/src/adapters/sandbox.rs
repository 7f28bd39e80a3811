//! The sandboxed Lua 5.4 VM an adapter runs in, and its built-ins.
//!
//! - Libraries: base (without `dofile`, `loadfile`, `print` → `log("debug")`, and a
//!   `collectgarbage` that only counts and collects), `string` (without `string.dump`),
//!   `table`, `math`, `utf8`. No `os`, `io`, `debug`, `package`/`require`, `coroutine`.
//! - `load` compiles text only (mode `"t"`): bytecode is refused.
//! - An instruction budget per call (a count hook every [`HOOK_STEP`] instructions) and a
//!   memory bound for the whole VM. `pcall`/`xpcall` re-raise once the budget is spent, so
//!   a script cannot swallow the bound and loop on. The same hook ends a call its caller
//!   abandoned ([`CallState::abandoned`]) as soon as the script is back in Lua code.
//! - `json.encode`, `json.decode`, `json.null`, `json.array(t)` (mark `t` as an array, so an
//!   empty one encodes as `[]`), `log(level, message)`, `http_get(url)`,
//!   `http_post(url, body)`, `raise_api_error{…}` (see `upstream.rs`).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlua::{
    ffi, HookTriggers, Lua, LuaOptions, LuaSerdeExt, MultiValue, StdLib, Table, Value as LuaValue,
    VmState,
};
use serde_json::{Map, Value};

use super::{http, HostPort, Limits};

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

/// What the host and a VM's thread share about the call the VM is running.
#[derive(Debug, Default)]
pub(crate) struct CallState {
    /// Set when the caller gave up on the call (it ran past the wall-time bound): the
    /// count hook then fails the script as soon as it runs Lua code again, and `pcall`
    /// cannot catch that.
    pub(crate) abandoned: AtomicBool,
    /// The host of the source the current call serves: `http_get`'s default allowance.
    source: Mutex<Option<HostPort>>,
    /// Time the current call spent in `http_get` / `http_post`.
    http: Mutex<HttpWait>,
}

#[derive(Debug, Default)]
struct HttpWait {
    total: Duration,
    since: Option<Instant>,
}

impl CallState {
    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Before a call: the source it serves; no HTTP wait yet.
    pub(crate) fn begin_call(&self, source: Option<HostPort>) {
        *Self::lock(&self.source) = source;
        *Self::lock(&self.http) = HttpWait::default();
    }

    /// How long the current call has waited in `http_get` / `http_post` so far (each is
    /// bounded by [`Limits::http_timeout`] instead of the call's bound).
    pub(crate) fn http_wait(&self, now: Instant) -> Duration {
        let wait = Self::lock(&self.http);
        wait.total
            + wait
                .since
                .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    fn http_begin(&self) {
        Self::lock(&self.http).since = Some(Instant::now());
    }

    fn http_end(&self) {
        let mut wait = Self::lock(&self.http);
        if let Some(t) = wait.since.take() {
            wait.total += t.elapsed();
        }
    }
}

/// One adapter's Lua VM with its bounds. Not shared: one VM thread owns it (`pool.rs`).
pub(crate) struct Vm {
    pub(crate) lua: Lua,
    budget: Arc<Budget>,
}

impl Vm {
    /// A fresh sandboxed VM; `log_name` tags its `log` and `print` output; `call` is
    /// what its host says about the running call.
    pub(crate) fn new(limits: &Limits, log_name: &str, call: Arc<CallState>) -> mlua::Result<Vm> {
        let libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        let budget = Arc::new(Budget {
            used: AtomicU64::new(0),
            limit: limits.instructions,
            exceeded: AtomicBool::new(false),
        });

        let step = HOOK_STEP.min(limits.instructions).max(1);
        let hook_budget = budget.clone();
        let hook_call = call.clone();
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(step as u32),
            move |_, _| {
                if hook_call.abandoned.load(Ordering::Relaxed) {
                    return Err(mlua::Error::runtime(
                        "abandoned: the call ran past its wall-time bound",
                    ));
                }
                let used = hook_budget.used.fetch_add(step, Ordering::Relaxed) + step;
                if used >= hook_budget.limit {
                    hook_budget.exceeded.store(true, Ordering::Relaxed);
                    return Err(hook_budget.error());
                }
                Ok(VmState::Continue)
            },
        )?;

        let check_budget = budget.clone();
        let check_call = call.clone();
        let check = lua.create_function(move |_, args: MultiValue| {
            if check_budget.exceeded.load(Ordering::Relaxed) {
                return Err(check_budget.error());
            }
            if check_call.abandoned.load(Ordering::Relaxed) {
                return Err(mlua::Error::runtime(
                    "abandoned: the call ran past its wall-time bound",
                ));
            }
            Ok(args)
        })?;
        lua.load(PRELUDE)
            .set_name("=hearth sandbox")
            .call::<()>(check)?;
        install_builtins(&lua, limits, log_name, call)?;
        super::upstream::install(&lua)?;
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

fn install_builtins(
    lua: &Lua,
    limits: &Limits,
    log_name: &str,
    call: Arc<CallState>,
) -> mlua::Result<()> {
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
    let allow: Arc<[HostPort]> = limits.http_allow.clone().into();
    // One request, its wait recorded as HTTP time (see `CallState::http_wait`).
    let fetch = move |method, url: &str, body| {
        let source = CallState::lock(&call.source).clone();
        let scope = http::Scope {
            source: source.as_ref(),
            allow: &allow,
        };
        call.http_begin();
        let out = http::fetch(method, url, body, timeout, max_body, scope);
        call.http_end();
        out.map_err(mlua::Error::runtime)
    };
    let get = fetch.clone();
    globals.set(
        "http_get",
        lua.create_function(move |_, url: String| get(http::Method::Get, &url, None))?,
    )?;
    globals.set(
        "http_post",
        lua.create_function(move |_, (url, body): (String, mlua::String)| {
            fetch(http::Method::Post, &url, Some(body.as_bytes().to_vec()))
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

// The JSON bridge works on the Lua stack directly (`Lua::exec_raw`, one protected call per
// conversion) rather than through mlua's `Table`/`Value` handles: those take a lock, a
// registry reference and often a protected call per value, which made `json.decode` +
// `json.encode` of a 4 KB request cost ~150 µs. Errors are built only when something fails.

/// Why a value cannot be encoded, and where: `path` holds the segments from the failing
/// value up to the root (innermost first), added while the error travels up.
struct EncodeError {
    message: String,
    path: Vec<Segment>,
}

enum Segment {
    Index(i64),
    Key(String),
}

impl EncodeError {
    fn new(message: String) -> Self {
        EncodeError {
            message,
            path: Vec::new(),
        }
    }

    fn at(mut self, segment: Segment) -> Self {
        self.path.push(segment);
        self
    }

    /// `at `messages[2].content`: <message>`, or the message alone at the root.
    fn render(self) -> String {
        let mut path = String::new();
        for segment in self.path.iter().rev() {
            match segment {
                Segment::Index(i) => path.push_str(&format!("[{i}]")),
                Segment::Key(k) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                }
            }
        }
        if path.is_empty() {
            self.message
        } else {
            format!("at `{path}`: {}", self.message)
        }
    }
}

/// A Lua value → JSON. Tables: one with the array metatable (every array `json.decode`
/// made, and `json.array(t)`) is an array; one whose keys are all positive integers is an
/// array (holes become `null`; very sparse ones are refused); one whose keys are all
/// strings, and the empty table, an object. Mixed keys, functions, NaN, cycles are errors
/// naming the path (`messages[2].content`). `json.null` → `null`. Object keys come out sorted.
pub(crate) fn from_lua(lua: &Lua, v: LuaValue) -> Result<Value, String> {
    let array_mt = lua.array_metatable().to_pointer();
    let mut out = None;
    // SAFETY: `v` is the only argument, at stack index 1. `read_json` calls only Lua API
    // functions that raise no error (type queries, `lua_to*` on values of the matching
    // type, `lua_next` over a table nobody modifies meanwhile, `lua_checkstack`,
    // `lua_getmetatable`, pops), so no Lua error can unwind through its frames.
    let ran = unsafe {
        lua.exec_raw::<()>(v, |state| {
            out = Some(read_json(state, 1, array_mt, 0));
            ffi::lua_settop(state, 0);
        })
    };
    ran.map_err(|e| e.to_string())?;
    out.expect("exec_raw ran the closure")
        .map_err(EncodeError::render)
}

/// The type name of the value at `idx`, as mlua's `Value::type_name` says it.
unsafe fn type_name(state: *mut ffi::lua_State, idx: c_int) -> &'static str {
    match ffi::lua_type(state, idx) {
        ffi::LUA_TNIL => "nil",
        ffi::LUA_TBOOLEAN => "boolean",
        ffi::LUA_TLIGHTUSERDATA => "lightuserdata",
        ffi::LUA_TNUMBER if ffi::lua_isinteger(state, idx) != 0 => "integer",
        ffi::LUA_TNUMBER => "number",
        ffi::LUA_TSTRING => "string",
        ffi::LUA_TTABLE => "table",
        ffi::LUA_TFUNCTION => "function",
        ffi::LUA_TTHREAD => "thread",
        ffi::LUA_TUSERDATA => "userdata",
        _ => "other",
    }
}

/// The string at `idx` (which must be a string: `lua_tolstring` then converts nothing).
unsafe fn string_at(state: *mut ffi::lua_State, idx: c_int) -> String {
    let mut len = 0usize;
    let ptr = ffi::lua_tolstring(state, idx, &mut len);
    let bytes = std::slice::from_raw_parts(ptr as *const u8, len);
    String::from_utf8_lossy(bytes).into_owned()
}

/// The value at absolute stack index `idx` → JSON (see [`from_lua`]).
unsafe fn read_json(
    state: *mut ffi::lua_State,
    idx: c_int,
    array_mt: *const c_void,
    depth: usize,
) -> Result<Value, EncodeError> {
    Ok(match ffi::lua_type(state, idx) {
        ffi::LUA_TNIL => Value::Null,
        ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(state, idx).is_null() => Value::Null,
        ffi::LUA_TBOOLEAN => Value::Bool(ffi::lua_toboolean(state, idx) != 0),
        ffi::LUA_TNUMBER if ffi::lua_isinteger(state, idx) != 0 => {
            Value::from(ffi::lua_tointegerx(state, idx, std::ptr::null_mut()))
        }
        ffi::LUA_TNUMBER => {
            let f = ffi::lua_tonumberx(state, idx, std::ptr::null_mut());
            match serde_json::Number::from_f64(f) {
                Some(n) => Value::Number(n),
                None => {
                    return Err(EncodeError::new(format!(
                        "cannot encode {f} (not a finite number)"
                    )))
                }
            }
        }
        ffi::LUA_TSTRING => Value::String(string_at(state, idx)),
        ffi::LUA_TTABLE => read_table(state, idx, array_mt, depth)?,
        _ => {
            return Err(EncodeError::new(format!(
                "cannot encode a {}",
                type_name(state, idx)
            )))
        }
    })
}

unsafe fn read_table(
    state: *mut ffi::lua_State,
    idx: c_int,
    array_mt: *const c_void,
    depth: usize,
) -> Result<Value, EncodeError> {
    if depth >= MAX_DEPTH {
        return Err(EncodeError::new(format!(
            "nested more than {MAX_DEPTH} deep (a table that contains itself?)"
        )));
    }
    // Key and value of the traversal, plus what reading a nested table needs at first.
    if ffi::lua_checkstack(state, 4) == 0 {
        return Err(EncodeError::new("out of Lua stack space".to_owned()));
    }
    let is_array = ffi::lua_getmetatable(state, idx) != 0 && {
        let same = ffi::lua_topointer(state, -1) == array_mt;
        ffi::lua_pop(state, 1);
        same
    };
    let mut ints: Vec<(i64, Value)> = Vec::new();
    let mut strings: Vec<(String, Value)> = Vec::new();
    ffi::lua_pushnil(state);
    while ffi::lua_next(state, idx) != 0 {
        // Key at -2, value at -1 (absolute: top).
        let value_idx = ffi::lua_gettop(state);
        let key_type = ffi::lua_type(state, -2);
        let positive_int = key_type == ffi::LUA_TNUMBER
            && ffi::lua_isinteger(state, -2) != 0
            && ffi::lua_tointegerx(state, -2, std::ptr::null_mut()) >= 1;
        if positive_int {
            let i = ffi::lua_tointegerx(state, -2, std::ptr::null_mut());
            let item = read_json(state, value_idx, array_mt, depth + 1)
                .map_err(|e| e.at(Segment::Index(i - 1)));
            match item {
                Ok(item) => ints.push((i, item)),
                Err(e) => {
                    ffi::lua_pop(state, 2);
                    return Err(e);
                }
            }
        } else if key_type == ffi::LUA_TSTRING {
            let key = string_at(state, -2);
            match read_json(state, value_idx, array_mt, depth + 1) {
                Ok(item) => strings.push((key, item)),
                Err(e) => {
                    ffi::lua_pop(state, 2);
                    return Err(e.at(Segment::Key(key)));
                }
            }
        } else {
            let message = format!("cannot encode a table key of type {}", type_name(state, -2));
            ffi::lua_pop(state, 2);
            return Err(EncodeError::new(message));
        }
        ffi::lua_pop(state, 1); // the value; the key stays for `lua_next`
    }
    if !strings.is_empty() && (!ints.is_empty() || is_array) {
        return Err(EncodeError::new(
            "table mixes array items and named keys".to_owned(),
        ));
    }
    Ok(if is_array || !ints.is_empty() {
        ints.sort_unstable_by_key(|(i, _)| *i);
        let len = ints.last().map_or(0, |(i, _)| *i as usize);
        if len > 2 * ints.len() + 10 {
            return Err(EncodeError::new(format!(
                "array too sparse ({} items, highest index {len})",
                ints.len()
            )));
        }
        if len == ints.len() {
            Value::Array(ints.into_iter().map(|(_, v)| v).collect())
        } else {
            let mut out = vec![Value::Null; len];
            for (i, item) in ints {
                out[i as usize - 1] = item;
            }
            Value::Array(out)
        }
    } else {
        strings.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Value::Object(strings.into_iter().collect::<Map<String, Value>>())
    })
}

/// JSON → a Lua value. Arrays get the array metatable, so `[]` and `{}` come back as they
/// came; integers stay integers. A `null` member of an object is left out (the field reads
/// as nil, as with HomeAgent's gopher-lua JSON); a `null` array element is `json.null`, so
/// positions hold.
pub(crate) fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<LuaValue> {
    // SAFETY: the array metatable is the only argument, at stack index 1. A Lua error in
    // `push_json` (out of memory, or of stack) unwinds to `exec_raw`'s protected call as a
    // longjmp; the frames it skips own nothing (they only borrow `v` and iterate it), as
    // with mlua's own protected closures.
    unsafe {
        lua.exec_raw(lua.array_metatable(), |state| {
            push_json(state, v);
            ffi::lua_replace(state, 1); // the result takes the argument's place
        })
    }
}

/// Pushes `v` onto the stack; the array metatable is at stack index 1. Nesting is bounded
/// by serde_json's recursion limit (128), and the stack is grown per level.
unsafe fn push_json(state: *mut ffi::lua_State, v: &Value) {
    match v {
        Value::Null => ffi::lua_pushlightuserdata(state, std::ptr::null_mut()),
        Value::Bool(b) => ffi::lua_pushboolean(state, c_int::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => ffi::lua_pushinteger(state, i),
            None => ffi::lua_pushnumber(state, n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => {
            ffi::lua_pushlstring(state, s.as_ptr() as *const c_char, s.len());
        }
        Value::Array(items) => {
            grow_stack(state);
            ffi::lua_createtable(state, c_int::try_from(items.len()).unwrap_or(0), 0);
            for (i, item) in items.iter().enumerate() {
                push_json(state, item);
                ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
            }
            ffi::lua_pushvalue(state, 1);
            ffi::lua_setmetatable(state, -2);
        }
        Value::Object(members) => {
            grow_stack(state);
            let fields = members.values().filter(|v| !v.is_null()).count();
            ffi::lua_createtable(state, 0, c_int::try_from(fields).unwrap_or(0));
            for (k, item) in members {
                if item.is_null() {
                    continue;
                }
                ffi::lua_pushlstring(state, k.as_ptr() as *const c_char, k.len());
                push_json(state, item);
                ffi::lua_rawset(state, -3);
            }
        }
    }
}

/// Room for a table, a key and a value at this level; a Lua error if the stack cannot grow.
unsafe fn grow_stack(state: *mut ffi::lua_State) {
    if ffi::lua_checkstack(state, 3) == 0 {
        ffi::luaL_error(
            state,
            c"json.decode: nested too deep (out of Lua stack space)".as_ptr(),
        );
    }
}
