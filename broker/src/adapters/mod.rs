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
//! Each VM of an adapter has the `string` (no `string.dump`), `table`, `math`
//! and `utf8` libraries and the base library without `dofile`/`loadfile`; `load` compiles
//! text only; `print` goes to the log. No `os`, `io`, `debug`, `package`/`require`,
//! `coroutine`. Every call (and the script's top level) has an instruction budget —
//! [`Limits::instructions`]; `pcall` cannot swallow running out of it — and the VM a memory
//! bound, [`Limits::memory`]. A script error, a spent budget or an out-of-memory becomes an
//! [`AdapterError`] naming the adapter, the function and (for script errors) the Lua line.
//!
//! Every call is also bounded in wall time, [`Limits::timeout`] (`[llm] adapter_timeout_ms`
//! in hearth.toml, default 2000): the budget cannot interrupt a C function such as
//! `string.find` with a pathological pattern, so calls run on VM threads their caller can
//! stop waiting for. A call past the bound fails alone ([`AdapterError::Timeout`]) and its
//! VM is abandoned (`pool.rs`).
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
//!   Only to the host of the source the call serves ([`Adapter::session_for`]) and the hosts of
//!   [`Limits::http_allow`]; loopback, LAN and link-local addresses only when listed there;
//!   no redirects (see `http.rs`).
//! - `raise_api_error{status, type, code, message, retry_after, request_id}`: raises the
//!   LLM API's own error (an error body, an error event in a stream), typed: the broker
//!   shows it as the provider's error and fails over by it ([`UpstreamError`]).
//!
//! An [`Adapter`] is `Send + Sync`: async tasks share it through an `Arc`. It keeps a pool
//! of VMs, each on a thread of its own; one completion ([`Session`]) holds one VM from its
//! request to its last stream chunk, so completions run at once and never see each other's
//! script state.

mod error;
mod http;
mod pool;
mod sandbox;
mod types;
mod upstream;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_anthropic;
#[cfg(test)]
mod tests_compat;
#[cfg(test)]
mod tests_gemini;
#[cfg(test)]
mod tests_host;
#[cfg(test)]
mod tests_toolcalls;
#[cfg(test)]
mod tests_wire;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use mlua::{ChunkMode, Function, Table, Value as LuaValue};
use serde_json::Value;

pub mod check;
pub use error::AdapterError;
pub use http::HostPort;
pub use types::{CompletionResponse, StreamChunk, TokenUsage, ToolCall, ToolCallDelta};
pub use upstream::UpstreamError;

use sandbox::{CallState, Vm};

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
    /// Bytes of memory for each VM of an adapter (one per completion running at once).
    /// Default 64 MiB.
    pub memory: usize,
    /// Timeout of one `http_get` / `http_post`, connect included. Default 30 s.
    pub http_timeout: Duration,
    /// Largest response body `http_get` / `http_post` accept. Default 16 MiB.
    pub http_max_body: usize,
    /// Wall time of one call (and of the script's top level), `[llm] adapter_timeout_ms`
    /// in hearth.toml. Time spent in `http_get` / `http_post` does not count (they have
    /// [`Limits::http_timeout`]). Default 2 s.
    pub timeout: Duration,
    /// Hosts scripts may reach besides the source's, `[adapters] http_allow` in
    /// hearth.toml; the only way to reach a loopback, LAN or link-local address.
    pub http_allow: Vec<HostPort>,
    /// Idle VMs kept per adapter for the next completions (more are built when more
    /// completions run at once, and dropped when they end). Default 8.
    pub idle_vms: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            instructions: 10_000_000,
            memory: 64 << 20,
            http_timeout: Duration::from_secs(30),
            http_max_body: 16 << 20,
            timeout: Duration::from_millis(2000),
            http_allow: Vec::new(),
            idle_vms: 8,
        }
    }
}

/// An adapter's script as each of its VMs loads it.
struct Script {
    file: String,
    /// The file's stem: tags `log` output, names the threads.
    stem: String,
    source: String,
    limits: Limits,
    /// Compiled (with line info) by the first VM; later VMs load this.
    bytecode: OnceLock<Vec<u8>>,
}

/// The three transforms.
#[derive(Debug, Clone, Copy)]
enum Transform {
    Request,
    Response,
    StreamChunk,
}

impl Transform {
    fn name(self) -> &'static str {
        match self {
            Transform::Request => TRANSFORM_REQUEST,
            Transform::Response => TRANSFORM_RESPONSE,
            Transform::StreamChunk => TRANSFORM_STREAM_CHUNK,
        }
    }
}

/// One VM with the script's functions; lives on its VM thread (`pool.rs`).
struct Loaded {
    vm: Vm,
    transform_request: Function,
    transform_response: Function,
    transform_stream_chunk: Option<Function>,
}

/// What the script's table says besides its functions.
struct Fields {
    name: String,
    version: String,
    endpoint: String,
    stream_endpoint: Option<String>,
    headers: BTreeMap<String, String>,
    auth_header: String,
    streaming: bool,
    stream_format: StreamFormat,
    samples: Samples,
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
    streaming: bool,
    stream_format: StreamFormat,
    samples: Samples,
    script: Arc<Script>,
    pool: pool::Pool,
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

impl Fields {
    /// The adapter's fields from the table its script returned; every error names `file`
    /// and the field.
    fn read(table: &Table, file: &str) -> Result<Fields, AdapterError> {
        let load_err = |message: String| AdapterError::Load {
            file: file.to_owned(),
            message,
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

        let function = |key: &str, required: bool| function_field(table, key, required, file);
        function(TRANSFORM_REQUEST, true)?;
        function(TRANSFORM_RESPONSE, true)?;
        let streaming = function(TRANSFORM_STREAM_CHUNK, false)?.is_some();
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

        Ok(Fields {
            name,
            version,
            endpoint,
            stream_endpoint,
            headers,
            auth_header,
            streaming,
            stream_format,
            samples,
        })
    }
}

/// `adapter.<key>` as a function (`None`: absent and not `required`).
fn function_field(
    table: &Table,
    key: &str,
    required: bool,
    file: &str,
) -> Result<Option<Function>, AdapterError> {
    let load_err = |message: String| AdapterError::Load {
        file: file.to_owned(),
        message,
    };
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
}

impl Loaded {
    /// A new VM for `script` that has run its top level: the VM and the returned table.
    /// The first VM compiles the source and keeps the bytecode; later ones load that.
    fn open(script: &Script, call: Arc<CallState>) -> Result<(Vm, Table), AdapterError> {
        let file = &script.file;
        let load_err = |message: String| AdapterError::Load {
            file: file.to_owned(),
            message,
        };
        let vm = Vm::new(&script.limits, &script.stem, call)
            .map_err(|e| load_err(format!("cannot create the Lua VM: {e}")))?;

        vm.start_call();
        let compiled = match script.bytecode.get() {
            Some(code) => vm
                .lua
                .load(&code[..])
                .set_name(format!("@{file}"))
                .set_mode(ChunkMode::Binary)
                .into_function(),
            None => {
                // As `Chunk::eval` did: the source as an expression if it is one, else
                // as a block.
                let text = |source: &str| {
                    vm.lua
                        .load(source)
                        .set_name(format!("@{file}"))
                        .set_mode(ChunkMode::Text)
                        .into_function()
                };
                let f =
                    text(&format!("return {}", script.source)).or_else(|_| text(&script.source));
                if let Ok(f) = &f {
                    let _ = script.bytecode.set(f.dump(false));
                }
                f
            }
        };
        let limits = &script.limits;
        let returned: LuaValue = compiled.and_then(|f| f.call(())).map_err(|e| {
            let e = classify(
                &vm,
                &e,
                &script.stem,
                "load",
                limits.instructions,
                limits.memory,
            );
            match e {
                AdapterError::Script { message, .. } => load_err(message),
                other => other,
            }
        })?;
        match returned {
            LuaValue::Table(t) => Ok((vm, t)),
            other => Err(load_err(format!(
                "the script must return the adapter table, it returned {}",
                other.type_name()
            ))),
        }
    }

    /// The VM with the functions of its script's table.
    fn from_table(vm: Vm, table: &Table, file: &str) -> Result<Loaded, AdapterError> {
        let required = |key| function_field(table, key, true, file).map(|f| f.expect("required"));
        Ok(Loaded {
            transform_request: required(TRANSFORM_REQUEST)?,
            transform_response: required(TRANSFORM_RESPONSE)?,
            transform_stream_chunk: function_field(table, TRANSFORM_STREAM_CHUNK, false, file)?,
            vm,
        })
    }

    /// A VM for a call: opened, with its functions.
    fn build(script: &Script, call: Arc<CallState>) -> Result<Loaded, AdapterError> {
        let (vm, table) = Self::open(script, call)?;
        Self::from_table(vm, &table, &script.file)
    }

    /// Calls one transform of adapter `adapter` with a JSON string. `None`: it returned
    /// `""` or nil.
    fn call(
        &self,
        script: &Script,
        adapter: &str,
        transform: Transform,
        input: &str,
    ) -> Result<Option<Value>, AdapterError> {
        let function = transform.name();
        let output_error = |message: String| output_error(adapter, function, "", &message);
        let picked = match transform {
            Transform::Request => &self.transform_request,
            Transform::Response => &self.transform_response,
            Transform::StreamChunk => match &self.transform_stream_chunk {
                Some(f) => f,
                None => {
                    return Err(AdapterError::StreamingUnsupported {
                        adapter: adapter.to_owned(),
                    })
                }
            },
        };
        let vm = &self.vm;
        vm.start_call();
        let returned: LuaValue = picked.call(input).map_err(|e| {
            classify(
                vm,
                &e,
                adapter,
                function,
                script.limits.instructions,
                script.limits.memory,
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
                    .map_err(|e| output_error(format!("not valid JSON: {e}")))
            }
            LuaValue::Table(_) => sandbox::from_lua(&vm.lua, returned)
                .map(Some)
                .map_err(|e| output_error(format!("table is not JSON: {e}"))),
            other => Err(output_error(format!(
                "expected JSON text or a table, got {}",
                other.type_name()
            ))),
        }
    }
}

fn output_error(adapter: &str, function: &str, field: &str, message: &str) -> AdapterError {
    AdapterError::Output {
        adapter: adapter.to_owned(),
        function: function.to_owned(),
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

const TRANSFORM_REQUEST: &str = "transform_request";
const TRANSFORM_RESPONSE: &str = "transform_response";
const TRANSFORM_STREAM_CHUNK: &str = "transform_stream_chunk";

impl Adapter {
    /// Loads an adapter from Lua source. `file` names the script in errors and Lua
    /// messages (`openai.lua:12: …`); its stem tags the script's `log` output.
    ///
    /// The script's top level runs in the adapter's first VM, on its thread, within
    /// [`Limits::timeout`]; the adapter's fields come from the table it returns.
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
        let script = Arc::new(Script {
            file: file.to_owned(),
            stem: stem.clone(),
            source: source.to_owned(),
            limits: limits.clone(),
            bytecode: OnceLock::new(),
        });
        let pool = pool::Pool::new(&stem, limits);
        // A new pool has nothing stuck: only a timeout or a lost thread can happen here.
        let overran = |e| {
            match e {
            pool::Overran::Timeout | pool::Overran::Stuck(_) => load_err(format!(
                "the script's top level did not finish within {} ms (`[llm] adapter_timeout_ms` in hearth.toml)",
                pool.timeout_ms()
            )),
            pool::Overran::Gone(m) => load_err(m),
        }
        };
        let first = pool.checkout().map_err(overran)?;
        let job_script = script.clone();
        let (first, fields) = pool
            .run(first, None, move |slot, call| {
                let (vm, table) = Loaded::open(&job_script, call.clone())?;
                let fields = Fields::read(&table, &job_script.file)?;
                *slot = Some(Loaded::from_table(vm, &table, &job_script.file)?);
                Ok::<_, AdapterError>(fields)
            })
            .map_err(overran)?;
        let fields = fields?;
        pool.checkin(first);
        Ok(Adapter {
            name: fields.name,
            version: fields.version,
            endpoint: fields.endpoint,
            stream_endpoint: fields.stream_endpoint,
            headers: fields.headers,
            auth_header: fields.auth_header,
            file: file.to_owned(),
            streaming: fields.streaming,
            stream_format: fields.stream_format,
            samples: fields.samples,
            script,
            pool,
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

    /// A session for one completion against the source at `base_url`: the calls for its
    /// request, its response or its stream go through it, to one VM (see [`Session`]);
    /// `http_get` / `http_post` may reach that source's host.
    pub fn session_for(&self, base_url: &str) -> Session<'_> {
        Session::new(self, HostPort::of_url(base_url))
    }

    /// A session that serves no source (checks, replays of captures): scripts may reach
    /// only the hosts of [`Limits::http_allow`].
    pub fn session(&self) -> Session<'_> {
        Session::new(self, None)
    }

    /// The unified CompletionRequest JSON → the body to send to the API (in a session of
    /// its own that serves no source; see [`Session::transform_request`]).
    pub fn transform_request<T: serde::Serialize + ?Sized>(
        &self,
        request: &T,
    ) -> Result<Value, AdapterError> {
        Session::new(self, None).transform_request(request)
    }

    /// The API's response body → the unified response (in a session of its own; see
    /// [`Session::transform_response`]).
    pub fn transform_response(&self, body: &str) -> Result<CompletionResponse, AdapterError> {
        Session::new(self, None).transform_response(body)
    }

    /// One SSE `data:` payload → a unified chunk (in a session of its own; see
    /// [`Session::transform_stream_chunk`]). The chunks of one stream belong in one
    /// session: a script may keep state across them in its VM.
    pub fn transform_stream_chunk(&self, data: &str) -> Result<Option<StreamChunk>, AdapterError> {
        let session = Session::new(self, None);
        let chunk = session.transform_stream_chunk(data);
        // One chunk at a time (tests, checks): the VM goes back to the pool with what
        // the script keeps, for the next chunk of the same stream.
        session.stream_ended();
        chunk
    }

    /// The error for a call that got no answer from its VM.
    fn overran(&self, function: &str, e: pool::Overran) -> AdapterError {
        let (adapter, function) = (self.name.clone(), function.to_owned());
        let limit_ms = self.pool.timeout_ms();
        match e {
            pool::Overran::Timeout => AdapterError::Timeout {
                adapter,
                function,
                limit_ms,
            },
            pool::Overran::Stuck(stuck) => AdapterError::Stuck {
                adapter,
                function,
                stuck,
                limit_ms,
            },
            pool::Overran::Gone(message) => AdapterError::Script {
                adapter,
                function,
                message,
            },
        }
    }

    fn output_error(&self, function: &str, field: &str, message: &str) -> AdapterError {
        output_error(&self.name, function, field, message)
    }
}

/// One completion's use of an adapter ([`Adapter::session_for`]): its calls go to one VM,
/// held from the first call until the session is dropped — so state a script keeps across
/// the chunks of a stream stays with that stream, and other completions run on other VMs
/// meanwhile. `http_get` / `http_post` in its calls may reach the source's host (and
/// [`Limits::http_allow`]). A call past [`Limits::timeout`] fails with
/// [`AdapterError::Timeout`]; the session's next call gets a fresh VM.
pub struct Session<'a> {
    adapter: &'a Adapter,
    source: Option<HostPort>,
    worker: Mutex<Option<pool::Worker>>,
    /// A stream went through this session and did not end cleanly (see
    /// [`Session::stream_ended`]): its VM may hold that stream's state, so it is not
    /// given back to the pool.
    stream_open: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("adapter", &self.adapter.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl<'a> Session<'a> {
    fn new(adapter: &'a Adapter, source: Option<HostPort>) -> Session<'a> {
        Session {
            adapter,
            source,
            worker: Mutex::new(None),
            stream_open: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The adapter this session uses.
    pub fn adapter(&self) -> &'a Adapter {
        self.adapter
    }

    /// The unified CompletionRequest JSON → the body to send to the API.
    pub fn transform_request<T: serde::Serialize + ?Sized>(
        &self,
        request: &T,
    ) -> Result<Value, AdapterError> {
        let adapter = self.adapter;
        let input = serde_json::to_string(request).map_err(|e| AdapterError::Input {
            adapter: adapter.name.clone(),
            function: TRANSFORM_REQUEST.to_owned(),
            message: e.to_string(),
        })?;
        let out = self.call(Transform::Request, input)?;
        out.ok_or_else(|| {
            adapter.output_error(
                TRANSFORM_REQUEST,
                "",
                "expected JSON text or a table, got an empty string",
            )
        })
    }

    /// The API's response body → the unified response.
    pub fn transform_response(&self, body: &str) -> Result<CompletionResponse, AdapterError> {
        let adapter = self.adapter;
        let out = self
            .call(Transform::Response, body.to_owned())?
            .ok_or_else(|| {
                adapter.output_error(
                    TRANSFORM_RESPONSE,
                    "",
                    "expected JSON text or a table, got an empty string",
                )
            })?;
        CompletionResponse::from_json(&out)
            .map_err(|(field, message)| adapter.output_error(TRANSFORM_RESPONSE, &field, &message))
    }

    /// One SSE `data:` payload → a unified chunk, or `None` when the script skips it
    /// (returns `""` or nil). An adapter without `transform_stream_chunk` answers
    /// [`AdapterError::StreamingUnsupported`].
    pub fn transform_stream_chunk(&self, data: &str) -> Result<Option<StreamChunk>, AdapterError> {
        let adapter = self.adapter;
        self.stream_open
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if !adapter.streaming {
            return Err(AdapterError::StreamingUnsupported {
                adapter: adapter.name.clone(),
            });
        }
        let out = self.call(Transform::StreamChunk, data.to_owned())?;
        match out {
            None => Ok(None),
            Some(v) => StreamChunk::from_json(&v)
                .map(Some)
                .map_err(|(field, message)| {
                    adapter.output_error(TRANSFORM_STREAM_CHUNK, &field, &message)
                }),
        }
    }

    /// Runs one transform on the session's VM (checked out at the first call, built on
    /// its thread when new), within the wall-time bound.
    fn call(&self, transform: Transform, input: String) -> Result<Option<Value>, AdapterError> {
        let adapter = self.adapter;
        let function = transform.name();
        // Calls of one session come one after another; the lock is never contended.
        let mut held = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        let worker = match held.take() {
            Some(worker) => worker,
            None => adapter
                .pool
                .checkout()
                .map_err(|e| adapter.overran(function, e))?,
        };
        let (script, name) = (adapter.script.clone(), adapter.name.clone());
        let (worker, out) = adapter
            .pool
            .run(worker, self.source.clone(), move |slot, call| {
                let loaded = match slot {
                    Some(loaded) => loaded,
                    None => slot.insert(Loaded::build(&script, call.clone())?),
                };
                loaded.call(&script, &name, transform, &input)
            })
            .map_err(|e| adapter.overran(function, e))?;
        *held = Some(worker);
        out
    }
}

impl Session<'_> {
    /// Says the stream read through this session ended cleanly (its last chunk was
    /// transformed and the script has let go of its state). Until then, and for a
    /// stream that was cut or failed, the VM is dropped with the session instead of
    /// serving the next completion with whatever the script kept.
    pub fn stream_ended(&self) {
        self.stream_open
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let held = self.worker.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(worker) = held.take() {
            if !self.stream_open.load(std::sync::atomic::Ordering::Relaxed) {
                self.adapter.pool.checkin(worker);
            }
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
    if let Some(error) = upstream::find(e) {
        return AdapterError::Upstream {
            adapter: adapter.to_owned(),
            function: function.to_owned(),
            error: Box::new(error),
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
