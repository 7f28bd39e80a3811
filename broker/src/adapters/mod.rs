//! The Lua adapter host: one sandboxed Lua 5.4 script per LLM API family turns the
//! broker's unified completion request into that API's JSON, and the API's responses and
//! stream chunks back into the unified shape ([`CompletionResponse`], [`StreamChunk`]).
//!
//! The contract is HomeAgent's ADAPTER doc: the script returns a table with `name`,
//! `version`, `endpoint` (path appended to the source's `base_url`), `headers` (extra HTTP
//! headers; the caller adds authentication, e.g. `Authorization: Bearer <key>`, from the
//! source's key), `transform_request(json)`, `transform_response(json)` and optionally
//! `transform_stream_chunk(data)` (the text after an SSE `data:`; returning `""` skips the
//! chunk). Each function takes a JSON string and returns a JSON string or a table.
//!
//! Built-in adapters come from the top-level `adapters/` folder, compiled into the binary
//! ([`BUILTINS`]); `<data_dir>/adapters/<name>.lua` overrides the built-in of that name.
//!
//! # Sandbox
//! Each adapter has its own Lua VM with the `string` (no `string.dump`), `table`, `math`
//! and `utf8` libraries and the base library without `dofile`/`loadfile`; `load` compiles
//! text only; `print` goes to the log. No `os`, `io`, `debug`, `package`/`require`,
//! `coroutine`. Every call (and the script's top level) has an instruction budget —
//! [`Limits::instructions`]; `pcall` cannot swallow running out of it — and the VM a memory
//! bound, [`Limits::memory`]. A script error, a spent budget or an out-of-memory becomes an
//! [`AdapterError`] naming the adapter, the function and (for script errors) the Lua line.
//!
//! # Built-ins of the VM
//! - `json.encode(value)`, `json.decode(text)`: arrays and objects round-trip exactly
//!   (`[]` stays `[]`, `{}` stays `{}`, integers stay integers). A decoded `null` object
//!   member reads as nil; `json.null` is JSON `null` (and a `null` array element);
//!   `json.array(t?)` marks a table as an array, so an empty one encodes as `[]`. A table
//!   built in Lua is an array if its keys are 1..n, an object if they are strings (the
//!   empty table: an object).
//! - `log(level, message)`: `tracing` at `error`/`warn`/`info`/`debug`/`trace`, tagged
//!   with the adapter.
//! - `http_get(url)`, `http_post(url, body)`: the body of a 2xx response as a string, any
//!   failure a Lua error; bounded by [`Limits::http_timeout`] and [`Limits::http_max_body`].
//!   Safe from any thread, inside a tokio runtime or not (see `http.rs`).
//!
//! An [`Adapter`] is `Send + Sync`: async tasks share it through an `Arc`; calls into one
//! adapter are serialized by a mutex around its VM (a transform costs microseconds; an
//! `http_get` in a script holds that adapter for its duration).

mod error;
mod http;
mod sandbox;
mod types;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_anthropic;
#[cfg(test)]
mod tests_compat;
#[cfg(test)]
mod tests_gemini;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mlua::{ChunkMode, Function, Value as LuaValue};
use serde_json::Value;

pub mod check;
pub use error::AdapterError;
pub use types::{CompletionResponse, StreamChunk, TokenUsage, ToolCall, ToolCallDelta};

use sandbox::Vm;

/// The built-in adapters: (name, source), embedded from the top-level `adapters/` folder.
pub const BUILTINS: &[(&str, &str)] = &[
    ("openai", include_str!("../../../adapters/openai.lua")),
    ("gemini", include_str!("../../../adapters/gemini.lua")),
    ("anthropic", include_str!("../../../adapters/anthropic.lua")),
    ("deepseek", include_str!("../../../adapters/deepseek.lua")),
    ("mistral", include_str!("../../../adapters/mistral.lua")),
    ("groq", include_str!("../../../adapters/groq.lua")),
    ("github", include_str!("../../../adapters/github.lua")),
    ("ollama", include_str!("../../../adapters/ollama.lua")),
];

/// How a streamed answer is framed (`adapter.stream_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamFormat {
    /// Server-sent events: `transform_stream_chunk` gets each `data:` payload.
    #[default]
    Sse,
    /// Newline-delimited JSON: `transform_stream_chunk` gets each non-empty line.
    Ndjson,
}

/// Bounds for adapter scripts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Lua VM instructions per call (and for loading the script). Default 10 million
    /// (roughly 0.1 s of Lua; a transform of a long conversation takes a few thousand).
    pub instructions: u64,
    /// Bytes of memory for one adapter's whole VM. Default 64 MiB.
    pub memory: usize,
    /// Timeout of one `http_get` / `http_post`, connect included. Default 30 s.
    pub http_timeout: Duration,
    /// Largest response body `http_get` / `http_post` accept. Default 16 MiB.
    pub http_max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            instructions: 10_000_000,
            memory: 64 << 20,
            http_timeout: Duration::from_secs(30),
            http_max_body: 16 << 20,
        }
    }
}

/// The script's functions, kept with the VM they live in.
struct Loaded {
    vm: Vm,
    transform_request: Function,
    transform_response: Function,
    transform_stream_chunk: Option<Function>,
}

/// One loaded adapter script.
pub struct Adapter {
    name: String,
    version: String,
    endpoint: String,
    stream_endpoint: Option<String>,
    headers: BTreeMap<String, String>,
    auth_header: String,
    file: String,
    memory_limit: usize,
    instruction_limit: u64,
    streaming: bool,
    stream_format: StreamFormat,
    samples: Samples,
    loaded: Mutex<Loaded>,
}

/// Sample API payloads a script may carry for `hearth adapters check`
/// (`adapter.samples = {response = "<API JSON>", stream = {"<data payload>", …}}`).
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// A response body of the API.
    pub response: Option<String>,
    /// Streamed payloads (SSE `data:` fields or NDJSON lines).
    pub stream: Vec<String>,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("endpoint", &self.endpoint)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

const TRANSFORM_REQUEST: &str = "transform_request";
const TRANSFORM_RESPONSE: &str = "transform_response";
const TRANSFORM_STREAM_CHUNK: &str = "transform_stream_chunk";

impl Adapter {
    /// Loads an adapter from Lua source. `file` names the script in errors and Lua
    /// messages (`openai.lua:12: …`); its stem tags the script's `log` output.
    pub fn from_source(file: &str, source: &str, limits: &Limits) -> Result<Adapter, AdapterError> {
        let load_err = |message: String| AdapterError::Load {
            file: file.to_owned(),
            message,
        };
        let stem = Path::new(file)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(file)
            .to_owned();
        let vm = Vm::new(limits, &stem)
            .map_err(|e| load_err(format!("cannot create the Lua VM: {e}")))?;

        vm.start_call();
        let chunk = vm
            .lua
            .load(source)
            .set_name(format!("@{file}"))
            .set_mode(ChunkMode::Text);
        let returned: LuaValue = chunk.eval().map_err(|e| {
            let e = classify(&vm, &e, &stem, "load", limits.instructions, limits.memory);
            match e {
                AdapterError::Script { message, .. } => load_err(message),
                other => other,
            }
        })?;
        let table = match returned {
            LuaValue::Table(t) => t,
            other => {
                return Err(load_err(format!(
                    "the script must return the adapter table, it returned {}",
                    other.type_name()
                )))
            }
        };

        let text_field = |key: &str, required: bool| -> Result<String, AdapterError> {
            match table.raw_get::<LuaValue>(key) {
                Ok(LuaValue::String(s)) => Ok(s.to_str().map(|s| s.to_owned()).unwrap_or_default()),
                Ok(LuaValue::Nil) if !required => Ok(String::new()),
                Ok(LuaValue::Nil) => Err(load_err(format!(
                    "adapter.{key} is missing (a string is required)"
                ))),
                Ok(other) => Err(load_err(format!(
                    "adapter.{key}: expected string, got {}",
                    other.type_name()
                ))),
                Err(e) => Err(load_err(format!("adapter.{key}: {e}"))),
            }
        };
        let name = text_field("name", true)?;
        let version = text_field("version", false)?;
        let endpoint = text_field("endpoint", false)?;
        let stream_endpoint = Some(text_field("stream_endpoint", false)?).filter(|e| !e.is_empty());
        let auth_header = text_field("auth_header", false)?;
        let stream_format = match text_field("stream_format", false)?.as_str() {
            "" | "sse" => StreamFormat::Sse,
            "ndjson" => StreamFormat::Ndjson,
            other => {
                return Err(load_err(format!(
                    "adapter.stream_format: expected \"sse\" or \"ndjson\", got {other:?}"
                )))
            }
        };

        let mut headers = BTreeMap::new();
        match table.raw_get::<LuaValue>("headers") {
            Ok(LuaValue::Nil) => {}
            Ok(LuaValue::Table(h)) => {
                for pair in h.pairs::<LuaValue, LuaValue>() {
                    let (k, v) = pair.map_err(|e| load_err(format!("adapter.headers: {e}")))?;
                    match (k, v) {
                        (LuaValue::String(k), LuaValue::String(v)) => {
                            headers.insert(k.to_string_lossy(), v.to_string_lossy());
                        }
                        (k, v) => {
                            return Err(load_err(format!(
                                "adapter.headers: expected string = string, got {} = {}",
                                k.type_name(),
                                v.type_name()
                            )))
                        }
                    }
                }
            }
            Ok(other) => {
                return Err(load_err(format!(
                    "adapter.headers: expected table, got {}",
                    other.type_name()
                )))
            }
            Err(e) => return Err(load_err(format!("adapter.headers: {e}"))),
        }

        let function = |key: &str, required: bool| -> Result<Option<Function>, AdapterError> {
            match table.raw_get::<LuaValue>(key) {
                Ok(LuaValue::Function(f)) => Ok(Some(f)),
                Ok(LuaValue::Nil) if !required => Ok(None),
                Ok(LuaValue::Nil) => Err(load_err(format!(
                    "adapter.{key} is missing (a function is required)"
                ))),
                Ok(other) => Err(load_err(format!(
                    "adapter.{key}: expected function, got {}",
                    other.type_name()
                ))),
                Err(e) => Err(load_err(format!("adapter.{key}: {e}"))),
            }
        };
        let transform_request = function(TRANSFORM_REQUEST, true)?.expect("required");
        let transform_response = function(TRANSFORM_RESPONSE, true)?.expect("required");
        let transform_stream_chunk = function(TRANSFORM_STREAM_CHUNK, false)?;
        let samples = match table.raw_get::<LuaValue>("samples") {
            Ok(LuaValue::Table(t)) => Samples {
                response: t
                    .raw_get::<Option<String>>("response")
                    .map_err(|e| load_err(format!("adapter.samples.response: {e}")))?,
                stream: t
                    .raw_get::<Option<Vec<String>>>("stream")
                    .map_err(|e| load_err(format!("adapter.samples.stream: {e}")))?
                    .unwrap_or_default(),
            },
            Ok(LuaValue::Nil) => Samples::default(),
            Ok(other) => {
                return Err(load_err(format!(
                    "adapter.samples: expected table, got {}",
                    other.type_name()
                )))
            }
            Err(e) => return Err(load_err(format!("adapter.samples: {e}"))),
        };

        Ok(Adapter {
            name,
            version,
            endpoint,
            stream_endpoint,
            headers,
            auth_header,
            file: file.to_owned(),
            memory_limit: limits.memory,
            instruction_limit: limits.instructions,
            streaming: transform_stream_chunk.is_some(),
            stream_format,
            samples,
            loaded: Mutex::new(Loaded {
                vm,
                transform_request,
                transform_response,
                transform_stream_chunk,
            }),
        })
    }

    /// `adapter.name`: the name configuration refers to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `adapter.version` (empty when the script sets none).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `adapter.endpoint`: the path appended to the source's `base_url`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `adapter.stream_endpoint`: the path for a streamed request, when it differs from
    /// [`Adapter::endpoint`] (Gemini's `:streamGenerateContent?alt=sse`); `None` when the
    /// script sets none (stream through `endpoint`).
    pub fn stream_endpoint(&self) -> Option<&str> {
        self.stream_endpoint.as_deref()
    }

    /// `adapter.headers`: extra HTTP headers. Authentication is not among them: the caller
    /// adds it from the source's key.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    /// `adapter.auth_header`: the header that carries the source's key as is (e.g.
    /// `x-api-key` for Anthropic), or `None` (the script sets none): `Authorization: Bearer`.
    pub fn auth_header(&self) -> Option<&str> {
        Some(self.auth_header.as_str()).filter(|h| !h.is_empty())
    }

    /// The file the script came from (`adapters/openai.lua (built-in)` or a data-dir path).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The sample payloads the script carries (`adapter.samples`), for checks.
    pub fn samples(&self) -> &Samples {
        &self.samples
    }

    /// Whether the script has `transform_stream_chunk`.
    pub fn supports_streaming(&self) -> bool {
        self.streaming
    }

    /// `adapter.stream_format`: how a streamed answer is framed — SSE (the default; each
    /// `data:` payload goes to `transform_stream_chunk`) or NDJSON (Ollama; each line does).
    pub fn stream_format(&self) -> StreamFormat {
        self.stream_format
    }

    /// The unified CompletionRequest JSON → the body to send to the API.
    pub fn transform_request<T: serde::Serialize + ?Sized>(
        &self,
        request: &T,
    ) -> Result<Value, AdapterError> {
        let input = serde_json::to_string(request).map_err(|e| AdapterError::Input {
            adapter: self.name.clone(),
            function: TRANSFORM_REQUEST.to_owned(),
            message: e.to_string(),
        })?;
        let out = self.call(TRANSFORM_REQUEST, &input, |l| &l.transform_request)?;
        out.ok_or_else(|| {
            self.output_error(
                TRANSFORM_REQUEST,
                "",
                "expected JSON text or a table, got an empty string",
            )
        })
    }

    /// The API's response body → the unified response.
    pub fn transform_response(&self, body: &str) -> Result<CompletionResponse, AdapterError> {
        let out = self
            .call(TRANSFORM_RESPONSE, body, |l| &l.transform_response)?
            .ok_or_else(|| {
                self.output_error(
                    TRANSFORM_RESPONSE,
                    "",
                    "expected JSON text or a table, got an empty string",
                )
            })?;
        CompletionResponse::from_json(&out)
            .map_err(|(field, message)| self.output_error(TRANSFORM_RESPONSE, &field, &message))
    }

    /// One SSE `data:` payload → a unified chunk, or `None` when the script skips it
    /// (returns `""` or nil). An adapter without `transform_stream_chunk` answers
    /// [`AdapterError::StreamingUnsupported`].
    pub fn transform_stream_chunk(&self, data: &str) -> Result<Option<StreamChunk>, AdapterError> {
        if !self.streaming {
            return Err(AdapterError::StreamingUnsupported {
                adapter: self.name.clone(),
            });
        }
        let out = self.call(TRANSFORM_STREAM_CHUNK, data, |l| {
            l.transform_stream_chunk
                .as_ref()
                .expect("checked by `streaming`")
        })?;
        match out {
            None => Ok(None),
            Some(v) => StreamChunk::from_json(&v)
                .map(Some)
                .map_err(|(field, message)| {
                    self.output_error(TRANSFORM_STREAM_CHUNK, &field, &message)
                }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Loaded> {
        // A panic while the lock was held cannot leave the VM half-updated in a way that
        // matters here (each call starts afresh), so a poisoned lock is taken as is.
        self.loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Calls one transform with a JSON string. `None`: it returned `""` or nil.
    fn call(
        &self,
        function: &str,
        input: &str,
        pick: impl Fn(&Loaded) -> &Function,
    ) -> Result<Option<Value>, AdapterError> {
        let loaded = self.lock();
        let vm = &loaded.vm;
        vm.start_call();
        let returned: LuaValue = pick(&loaded).call(input).map_err(|e| {
            classify(
                vm,
                &e,
                &self.name,
                function,
                self.instruction_limit,
                self.memory_limit,
            )
        })?;
        match returned {
            LuaValue::Nil => Ok(None),
            LuaValue::String(s) => {
                let bytes = s.as_bytes();
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| self.output_error(function, "", &format!("not valid JSON: {e}")))
            }
            LuaValue::Table(_) => sandbox::from_lua(&vm.lua, returned)
                .map(Some)
                .map_err(|e| self.output_error(function, "", &format!("table is not JSON: {e}"))),
            other => Err(self.output_error(
                function,
                "",
                &format!("expected JSON text or a table, got {}", other.type_name()),
            )),
        }
    }

    fn output_error(&self, function: &str, field: &str, message: &str) -> AdapterError {
        AdapterError::Output {
            adapter: self.name.clone(),
            function: function.to_owned(),
            field: field.to_owned(),
            message: message.to_owned(),
        }
    }
}

/// Maps a Lua error of a call into the adapter's error: the bounds first (a spent budget
/// or an out-of-memory anywhere in the cause chain), else the Lua message.
fn classify(
    vm: &Vm,
    e: &mlua::Error,
    adapter: &str,
    function: &str,
    instructions: u64,
    memory: usize,
) -> AdapterError {
    if vm.budget_exceeded() {
        return AdapterError::InstructionLimit {
            adapter: adapter.to_owned(),
            function: function.to_owned(),
            limit: instructions,
        };
    }
    if is_memory_error(e) {
        return AdapterError::MemoryLimit {
            adapter: adapter.to_owned(),
            function: function.to_owned(),
            limit: memory,
        };
    }
    AdapterError::Script {
        adapter: adapter.to_owned(),
        function: function.to_owned(),
        message: lua_message(e),
    }
}

fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
            is_memory_error(cause)
        }
        _ => false,
    }
}

/// The Lua message without mlua's stack traceback. An error raised by a built-in (e.g.
/// `json.decode`) carries no script line of its own: the first script frame of the
/// traceback is appended (`… (at openai.lua:12)`).
fn lua_message(e: &mlua::Error) -> String {
    fn strip(m: &str) -> &str {
        m.split("\nstack traceback:").next().unwrap_or(m).trim_end()
    }
    match e {
        mlua::Error::RuntimeError(m) | mlua::Error::MemoryError(m) => strip(m).to_owned(),
        mlua::Error::SyntaxError { message, .. } => strip(message).to_owned(),
        mlua::Error::CallbackError { traceback, cause } => {
            let message = lua_message(cause);
            match script_frame(traceback) {
                Some(at) if !message.contains(&at) => format!("{message} (at {at})"),
                _ => message,
            }
        }
        mlua::Error::WithContext { context, cause } => format!("{context}: {}", lua_message(cause)),
        other => strip(&other.to_string()).to_owned(),
    }
}

/// The first `file:line` of a Lua traceback that is in a script (not `[C]`, not the sandbox).
fn script_frame(traceback: &str) -> Option<String> {
    traceback.lines().map(str::trim).find_map(|line| {
        if line.starts_with('[') {
            return None;
        }
        let mut parts = line.splitn(3, ':');
        let (file, number) = (parts.next()?, parts.next()?);
        (parts.next().is_some() && !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
            .then(|| format!("{file}:{number}"))
    })
}

/// Every adapter the broker can use: the built-ins, overridden by the data dir's scripts.
#[derive(Debug, Default)]
pub struct AdapterSet {
    adapters: BTreeMap<String, Arc<Adapter>>,
    errors: BTreeMap<String, AdapterError>,
}

impl AdapterSet {
    /// Loads the built-ins and `<data_dir>/adapters/*.lua` with default [`Limits`].
    pub fn load(data_dir: &Path) -> AdapterSet {
        Self::load_with(data_dir, &Limits::default())
    }

    /// Loads the built-ins, then every `<data_dir>/adapters/<name>.lua` (replacing the
    /// built-in `<name>`). A script that fails to load — or whose `adapter.name` is not its
    /// file name — is recorded as that name's error (and logged); it never stops the rest.
    /// A broken data-dir script does not fall back to the built-in it was meant to replace.
    pub fn load_with(data_dir: &Path, limits: &Limits) -> AdapterSet {
        let mut set = AdapterSet::default();
        for (name, source) in BUILTINS {
            set.insert(
                name,
                &format!("adapters/{name}.lua (built-in)"),
                source,
                limits,
            );
        }
        let dir = data_dir.join("adapters");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return set,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "cannot read the adapters folder: {e}");
                return set;
            }
        };
        let mut files: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "lua") && p.is_file())
            .collect();
        files.sort();
        for path in files {
            let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            let file = path.display().to_string();
            match std::fs::read_to_string(&path) {
                Ok(source) => set.insert(name, &file, &source, limits),
                Err(e) => set.fail(
                    name,
                    AdapterError::Load {
                        file,
                        message: format!("cannot read: {e}"),
                    },
                ),
            }
        }
        set
    }

    fn insert(&mut self, name: &str, file: &str, source: &str, limits: &Limits) {
        match Adapter::from_source(file, source, limits) {
            Ok(adapter) if adapter.name() != name => self.fail(
                name,
                AdapterError::NameMismatch {
                    file: file.to_owned(),
                    expected: name.to_owned(),
                    declared: adapter.name().to_owned(),
                },
            ),
            Ok(adapter) => {
                tracing::debug!(adapter = name, file, "adapter loaded");
                self.errors.remove(name);
                self.adapters.insert(name.to_owned(), Arc::new(adapter));
            }
            Err(e) => self.fail(name, e),
        }
    }

    fn fail(&mut self, name: &str, error: AdapterError) {
        tracing::warn!(adapter = name, "{error}");
        self.adapters.remove(name);
        self.errors.insert(name.to_owned(), error);
    }

    /// The adapter `name`, or why it cannot be had: its load error, or not found.
    pub fn get(&self, name: &str) -> Result<Arc<Adapter>, AdapterError> {
        if let Some(adapter) = self.adapters.get(name) {
            return Ok(adapter.clone());
        }
        if let Some(error) = self.errors.get(name) {
            return Err(error.clone());
        }
        Err(AdapterError::NotFound {
            name: name.to_owned(),
            available: self.names().join(", "),
        })
    }

    /// Names of the adapters that loaded, sorted.
    pub fn names(&self) -> Vec<String> {
        self.adapters.keys().cloned().collect()
    }

    /// Adapters that failed to load: name → error, sorted by name.
    pub fn errors(&self) -> &BTreeMap<String, AdapterError> {
        &self.errors
    }
}
