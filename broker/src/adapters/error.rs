//! Errors of the adapter host: each names the adapter (or its file) and the function.

use thiserror::Error;

/// An adapter failed to load, to run, or returned something the broker cannot use.
///
/// `Clone`: [`AdapterSet`](super::AdapterSet) keeps the load error of a broken script and
/// hands it out on every [`get`](super::AdapterSet::get) of that name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AdapterError {
    /// The script did not compile, raised an error while running its top level, or did not
    /// return a usable adapter table. `message` carries the Lua message with file and line.
    #[error("adapter file {file}: {message}")]
    Load {
        /// The script's file (`<data_dir>/adapters/x.lua`, or `adapters/x.lua (built-in)`).
        file: String,
        /// What went wrong, e.g. `openai.lua:12: '=' expected near 'end'`.
        message: String,
    },
    /// The file name (the adapter's name in configuration) differs from `adapter.name`.
    #[error(
        "adapter file {file}: declares name `{declared}`, but the file name says `{expected}`"
    )]
    NameMismatch {
        /// The script's file.
        file: String,
        /// The name the file name gives (`<name>.lua`).
        expected: String,
        /// The script's `adapter.name`.
        declared: String,
    },
    /// No adapter of that name, built in or in the data dir.
    #[error("adapter {name}: not found (available: {available})")]
    NotFound {
        /// The name asked for.
        name: String,
        /// The names that exist, comma separated.
        available: String,
    },
    /// A transform function raised a Lua error (the message carries the script line).
    #[error("adapter {adapter}: {function}: {message}")]
    Script {
        /// The adapter's name.
        adapter: String,
        /// `transform_request`, `transform_response` or `transform_stream_chunk`.
        function: String,
        /// The Lua error message, e.g. `openai.lua:40: OpenAI API error: …`.
        message: String,
    },
    /// The script read an error of the LLM API (an error body, or an error event inside a
    /// stream) and raised it typed, with `raise_api_error{…}`: the provider's error, not a
    /// script failure.
    #[error("adapter {adapter}: {function}: {error}")]
    Upstream {
        /// The adapter's name.
        adapter: String,
        /// The function that read it (`transform_response`, `transform_stream_chunk`).
        function: String,
        /// The API's error (boxed: it is the largest of these).
        error: Box<super::UpstreamError>,
    },
    /// A call ran past the instruction bound (an endless loop, or far too much work).
    #[error("adapter {adapter}: {function} exceeded {limit} instructions")]
    InstructionLimit {
        /// The adapter's name.
        adapter: String,
        /// The function that was running (or `load` for the script's top level).
        function: String,
        /// The bound, in Lua VM instructions per call.
        limit: u64,
    },
    /// The adapter's VM ran past its memory bound.
    #[error("adapter {adapter}: {function} exceeded the memory limit of {limit} bytes")]
    MemoryLimit {
        /// The adapter's name.
        adapter: String,
        /// The function that was running (or `load`).
        function: String,
        /// The bound, in bytes, for the whole VM.
        limit: usize,
    },
    /// A call ran past the wall-time bound (`[llm] adapter_timeout_ms` in hearth.toml).
    /// Only this call fails: its VM is abandoned (it ends as soon as the script is back in
    /// Lua code) and the next call gets another one.
    #[error("adapter {adapter}: {function} did not finish within {limit_ms} ms (`[llm] adapter_timeout_ms` in hearth.toml); the call was abandoned")]
    Timeout {
        /// The adapter's name.
        adapter: String,
        /// The function that was running (or `load` for the script's top level).
        function: String,
        /// The bound, in milliseconds.
        limit_ms: u64,
    },
    /// Too many of this adapter's calls ran past the wall-time bound and are still running
    /// (stuck in a C function such as `string.find` with a pathological pattern): new calls
    /// are refused until some end.
    #[error("adapter {adapter}: {function}: refused: {stuck} earlier calls ran past `[llm] adapter_timeout_ms` ({limit_ms} ms) and are still running")]
    Stuck {
        /// The adapter's name.
        adapter: String,
        /// The function that was to be called.
        function: String,
        /// Abandoned calls still running.
        stuck: usize,
        /// The bound, in milliseconds.
        limit_ms: u64,
    },
    /// The adapter has no `transform_stream_chunk`.
    #[error(
        "adapter {adapter}: streaming is not supported (the script has no transform_stream_chunk)"
    )]
    StreamingUnsupported {
        /// The adapter's name.
        adapter: String,
    },
    /// The request handed to the adapter could not be encoded as JSON.
    #[error("adapter {adapter}: {function}: input: {message}")]
    Input {
        /// The adapter's name.
        adapter: String,
        /// The function that was to be called.
        function: String,
        /// What is wrong with the input.
        message: String,
    },
    /// The function returned something of the wrong shape: not JSON, or a field of the
    /// wrong type. `field` is a path such as `tool_calls[0].arguments` (empty: the whole value).
    #[error("adapter {adapter}: {function}: {}{message}", field_prefix(.field))]
    Output {
        /// The adapter's name.
        adapter: String,
        /// The function that returned it.
        function: String,
        /// Path of the offending field; empty for the returned value itself.
        field: String,
        /// What is wrong, e.g. `expected string, got number`.
        message: String,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        "returned value: ".to_owned()
    } else {
        format!("field `{field}`: ")
    }
}
