//! The `hearth` command line: `run` starts the broker; the other commands are
//! clients of a running broker, found through `<data_dir>/hearth.sock` and
//! authenticated with `<data_dir>/admin.token`.
//!
//! Errors are one line on stderr (`error: …`); the exit status says what kind of
//! failure it was ([`exit`], listed in `hearth --help`). Every command that prints
//! something a script would read takes `--json`.
//!
//! Text that came from plugins or the LLM (tool results, names and descriptions,
//! plugin output, chat text, errors they wrote) is printed with control and bidi
//! characters escaped when the stream is a terminal, as it is on a pipe, a file or with
//! `--raw` (see [`crate::term`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::{CommandFactory, Parser, Subcommand};
use hearth_proto::v1::admin_client::AdminClient;
use hearth_proto::v1::agent_client::AgentClient;
use hearth_proto::v1::{
    call_tool_event, CallToolRequest, CallToolResponse, ListPluginsRequest, ListToolsRequest,
    LoadPluginRequest, PluginLogsRequest, PluginState, PluginStatus, ReloadPluginRequest,
    RestartPluginRequest, ToolProgress, UnloadPluginRequest,
};
use serde_json::json;
use tonic::transport::{Channel, Endpoint};

use crate::server::{RunOptions, ADMIN_TOKEN_FILE, SOCKET_FILE};
use crate::term::Printer;

/// Exit statuses of `hearth`, the one place they are defined (listed in `hearth
/// --help` and the README's "Exit codes"). A script can tell what went wrong without
/// reading the message.
pub mod exit {
    /// The command did what was asked.
    pub const OK: u8 = 0;
    /// Any other error: a file that cannot be read, a plugin folder that does not load,
    /// a chat turn that failed, a conversation too busy to take input.
    pub const ERROR: u8 = 1;
    /// Usage: an unknown command or flag, a missing or malformed argument (clap's own
    /// status), tool arguments that are not JSON.
    pub const USAGE: u8 = 2;
    /// Not found: no such plugin, tool, LLM source, MCP server or setting.
    pub const NOT_FOUND: u8 = 3;
    /// Refused by policy: the tool's `cooldown` or `max_calls`, a `confirm` the user
    /// declined (or could not be asked), a hook or the permission matrix said no.
    pub const REFUSED: u8 = 4;
    /// Plugin error: the tool answered with an error (also arguments its schema
    /// rejects), or the plugin failed, crashed or is not ready.
    pub const PLUGIN_ERROR: u8 = 5;
    /// Timeout: no answer within the call's timeout (or no free slot of the plugin's
    /// `max_concurrency` in that time).
    pub const TIMEOUT: u8 = 6;
    /// Broker unreachable: no broker runs for the data dir (no socket), the connection
    /// was refused or lost, or the admin token does not match.
    pub const UNREACHABLE: u8 = 7;
    /// Interrupted by Ctrl-C (128 + SIGINT); a tool call in flight is cancelled.
    pub const INTERRUPTED: u8 = 130;
}

/// The exit statuses as `hearth --help` lists them.
const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    ok
  1    other error (a file, a plugin folder that does not load, a failed chat turn)
  2    usage: unknown command or flag, bad argument, tool arguments not JSON
  3    not found: no such plugin, tool, LLM source, MCP server or setting
  4    refused by policy: cooldown, max_calls, confirm declined, a hook or permission
  5    plugin error: the tool answered with an error, or the plugin failed
  6    timeout: no answer within the call's timeout
  7    broker unreachable: no broker for the data dir, connection refused, bad token
  130  interrupted (Ctrl-C)";

/// `hearth --version`: the crate version and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HEARTH_BUILD_COMMIT"),
    ")"
);

/// An error that ends `hearth` with a particular [`exit`] status; its text is the
/// message alone (no gRPC code or metadata).
#[derive(Debug)]
pub struct CliError {
    /// One of [`exit`]'s statuses.
    pub code: u8,
    message: String,
}

impl CliError {
    /// An error with exit status `code`.
    pub fn new(code: u8, message: impl Into<String>) -> CliError {
        CliError {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// The exit status for a `Status` the broker (or the connection to it) gave.
///
/// The connection's own failures (refused, reset, the broker gone mid-call) are told
/// apart from the broker's answers by their source: tonic keeps the transport error
/// underneath, while a status the broker sent arrives bare.
pub fn exit_code_of(s: &tonic::Status) -> u8 {
    use tonic::Code;
    if std::error::Error::source(s).is_some() {
        return exit::UNREACHABLE;
    }
    match s.code() {
        Code::NotFound => exit::NOT_FOUND,
        Code::PermissionDenied => exit::REFUSED,
        // The broker's CallError::NotReady / PluginGone and PluginError::Failed.
        Code::Unavailable => exit::PLUGIN_ERROR,
        Code::DeadlineExceeded => exit::TIMEOUT,
        Code::Unauthenticated => exit::UNREACHABLE,
        _ => exit::ERROR,
    }
}

/// A broker's `Status` as an error carrying its exit status; the text is the message.
pub fn status_error(s: tonic::Status) -> anyhow::Error {
    let code = exit_code_of(&s);
    let message = if code == exit::UNREACHABLE && s.code() != tonic::Code::Unauthenticated {
        format!("broker unreachable: {}", s.message())
    } else {
        s.message().to_string()
    };
    CliError::new(code, message).into()
}

/// The exit status for an error of a command: the first [`CliError`] in its chain, a
/// missing setting (not found), else [`exit::ERROR`].
pub fn exit_code(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| {
            if let Some(c) = c.downcast_ref::<CliError>() {
                return Some(c.code);
            }
            if let Some(crate::storage::StorageError::NotFound { .. }) = c.downcast_ref() {
                return Some(exit::NOT_FOUND);
            }
            None
        })
        .unwrap_or(exit::ERROR)
}

/// Hearth: an out-of-process plugin broker for LLM agents.
#[derive(Debug, Parser)]
#[command(name = "hearth", version = VERSION, about, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// Data directory (socket, admin token, plugins/).
    #[arg(
        long,
        global = true,
        env = "HEARTH_DATA_DIR",
        default_value = "./hearth-data"
    )]
    pub data_dir: PathBuf,
    /// Print text from plugins and the LLM as it is. By default its control and bidi
    /// characters are shown escaped (`\x1b`, `\u{202e}`) when the output is a terminal.
    #[arg(long, global = true)]
    pub raw: bool,
    /// Log lines on stderr: `text` (for people) or `json` (one JSON object per line, with
    /// plugin, tool, call_id, conversation and trace_id fields where they apply).
    #[arg(
        long,
        global = true,
        env = "HEARTH_LOG_FORMAT",
        value_enum,
        default_value_t = crate::observe::logs::LogFormat::Text
    )]
    pub log_format: crate::observe::logs::LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the broker in the foreground (Ctrl-C / SIGTERM stops every plugin).
    Run {
        /// Extra directory whose subdirectories are plugins (repeatable).
        #[arg(long = "plugins", value_name = "DIR")]
        plugins: Vec<PathBuf>,
        /// Also serve on this TCP loopback address, e.g. 127.0.0.1:7777.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// Serve every tool over MCP (Streamable HTTP at http://ADDR/mcp) on this loopback
        /// address, e.g. 127.0.0.1:8765; clients send `Authorization: Bearer <token>`
        /// with the token from `<data_dir>/mcp.token`.
        #[arg(long, value_name = "ADDR")]
        mcp_listen: Option<std::net::SocketAddr>,
        /// Serve the operator's HTTP endpoints on this loopback address, e.g.
        /// 127.0.0.1:9090: Prometheus metrics at /metrics, /healthz and /readyz (no token),
        /// and the admin page at / (login with the token from `<data_dir>/admin.token`).
        #[arg(long, value_name = "ADDR")]
        http_listen: Option<std::net::SocketAddr>,
        /// Milliseconds a plugin gets after `Shutdown` before SIGTERM.
        #[arg(long, default_value_t = 2000, value_name = "MS")]
        shutdown_grace_ms: u64,
        /// Milliseconds a call waits for a restarting plugin.
        #[arg(long, default_value_t = 5000, value_name = "MS")]
        restart_wait_ms: u64,
        /// Milliseconds restart, reload and unload let calls in flight finish, and running
        /// turns may finish when the broker stops (then they are cancelled).
        #[arg(long, default_value_t = 10000, value_name = "MS")]
        drain_timeout_ms: u64,
        /// Reload a plugin when files in its directory change.
        #[arg(long)]
        watch: bool,
        /// Quick start: an OpenAI-compatible base URL used as the first LLM source
        /// (key from $HEARTH_LLM_API_KEY), e.g. https://api.openai.com/v1.
        #[arg(long, env = "HEARTH_LLM_URL", value_name = "URL")]
        llm_url: Option<String>,
        /// Model for --llm-url.
        #[arg(long, env = "HEARTH_LLM_MODEL", value_name = "MODEL")]
        llm_model: Option<String>,
        /// Adapter for --llm-url (default openai).
        #[arg(long, env = "HEARTH_LLM_ADAPTER", value_name = "NAME")]
        llm_adapter: Option<String>,
        /// Use plugins of plugin hosts (`hearth node`) through this NATS server, e.g.
        /// tls://nats.example.com:4222 (over `[nats] url`; credentials and TLS in
        /// `[nats]` of hearth.toml).
        #[arg(long, env = "HEARTH_NATS_URL", value_name = "URL")]
        nats: Option<String>,
        /// Keep state in this PostgreSQL database, shared with other brokers, e.g.
        /// postgres://hearth@db.example.com/hearth (over `[storage] url` of hearth.toml;
        /// default: <data_dir>/hearth.db).
        #[arg(long, env = "HEARTH_STORAGE_URL", value_name = "URL")]
        storage_url: Option<String>,
        /// Use the admin token in FILE (one word, 32+ characters, mode 600) instead of
        /// a new random one: brokers behind one load balancer share it.
        #[arg(long, env = "HEARTH_ADMIN_TOKEN_FILE", value_name = "FILE")]
        admin_token_file: Option<PathBuf>,
    },
    /// Run a plugin host: supervise the plugins in --plugins DIR (and
    /// `<data_dir>/plugins`) as `hearth run` does, with no agent, and serve their tools,
    /// stage hooks and triggers to brokers over NATS. `hearth plugins …` and
    /// `hearth tools …` work against it with its --data-dir.
    Node(crate::remote::node::NodeArgs),
    /// Settings in the database of the data dir's broker (core, or a plugin's with
    /// --plugin): `<data_dir>/hearth.db`, or PostgreSQL with --storage-url,
    /// `HEARTH_STORAGE_URL` or `[storage] url`. No broker needed; secrets are masked.
    Settings {
        /// The PostgreSQL database, as `hearth run --storage-url` got it.
        #[arg(long, global = true, value_name = "URL")]
        storage_url: Option<String>,
        /// Settings operation.
        #[command(subcommand)]
        command: crate::settings_cli::SettingsCommand,
    },
    /// The broker's database: copy a SQLite data dir into PostgreSQL (`migrate --to
    /// URL`), or check the configured database (`check`).
    Storage {
        /// Storage operation.
        #[command(subcommand)]
        command: crate::storage_cli::StorageCommand,
    },
    /// LLM adapters (built-in and `<data_dir>/adapters/*.lua`), read locally: no broker needed.
    Adapters {
        /// Adapter operation.
        #[command(subcommand)]
        command: AdaptersCommand,
    },
    /// LLM sources: list them with their health, or choose the one to use first.
    Llm {
        /// Source operation.
        #[command(subcommand)]
        command: LlmCommand,
    },
    /// Talk to the agent: one exchange with MESSAGE, else a REPL (line editing, history).
    Chat(crate::chat::ChatArgs),
    /// Queue input for the agent as a plugin would (InjectText and friends).
    Inject(crate::chat::InjectArgs),
    /// Internal: the companion process that cleans up plugin groups if the broker dies.
    #[command(name = "__reaper", hide = true)]
    Reaper,
    /// Inspect and operate plugins.
    Plugins {
        /// Plugin operation.
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// List and call tools.
    Tools {
        /// Tool operation.
        #[command(subcommand)]
        command: ToolsCommand,
    },
    /// The plugin author's inner loop: `hearth dev PLUGIN_DIR` runs a broker on a temp
    /// data dir with that plugin and a scripted LLM, prints its log, reloads it on save;
    /// `hearth dev llm-server` serves a scripted LLM alone.
    Dev(crate::dev::DevArgs),
    /// Write a new plugin folder: plugin.json, code, README and a test that passes with
    /// only the SDK installed (`pytest`, `node --test`, `cargo test`, `go test ./...`).
    New(crate::scaffold::NewArgs),
    /// MCP: servers as plugins (list, import, resources, read, prompts) and Hearth's
    /// tools served to MCP clients (serve).
    Mcp {
        /// MCP operation.
        #[command(subcommand)]
        command: crate::mcp::cli::McpCommand,
    },
    /// Print a shell completion script (bash, zsh, fish) on stdout.
    ///
    /// `hearth completions bash > ~/.local/share/bash-completion/completions/hearth`,
    /// `hearth completions zsh > ~/.zfunc/_hearth` (with `~/.zfunc` in `fpath`),
    /// `hearth completions fish > ~/.config/fish/completions/hearth.fish`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `hearth plugins …`
#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// Name, runtime, state, pid, restarts and tools of every plugin.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Restart a plugin (also a failed one) and wait until it is ready.
    Restart {
        /// Plugin name.
        name: String,
        /// Print the plugin's status as JSON (as `plugins list --json` does).
        #[arg(long)]
        json: bool,
    },
    /// Load a plugin directory into the running broker and wait until it is ready.
    Load {
        /// Plugin directory.
        path: PathBuf,
        /// Print the plugin's status as JSON (as `plugins list --json` does).
        #[arg(long)]
        json: bool,
    },
    /// Stop a plugin (calls in flight finish first) and forget it and its tools.
    Unload {
        /// Plugin name.
        name: String,
        /// Print JSON: `unloaded` (the name) and `was` (its status before, as
        /// `plugins list --json` shows it; null if unknown).
        #[arg(long)]
        json: bool,
    },
    /// Start the new code and manifest in a plugin's directory beside the running
    /// process, and switch to it once it is ready; if it fails, say why and keep the
    /// running one.
    Reload {
        /// Plugin name.
        name: String,
        /// Print the plugin's status as JSON (as `plugins list --json` does).
        #[arg(long)]
        json: bool,
    },
    /// A one-time token for a process started by hand (a debugger, an IDE) to attach
    /// as plugin NAME: prints `export HEARTH_ADDR=… HEARTH_TOKEN=… HEARTH_PLUGIN=…`
    /// lines, so `eval "$(hearth plugins attach-token NAME)"` then starting the plugin
    /// in that shell attaches it. A loaded NAME's own process makes room while it runs
    /// and comes back when it disconnects; any other NAME is an ad-hoc plugin.
    AttachToken {
        /// Plugin name.
        name: String,
        /// Print JSON (addr, token, env, …) instead of shell lines.
        #[arg(long)]
        json: bool,
        /// Seconds the token stays valid unused (default 600).
        #[arg(long, value_name = "S")]
        ttl_s: Option<u32>,
    },
    /// Say that DIR is the plugin NAME (its settings, secrets and data follow the
    /// name): needed when a plugin folder moved, or a new folder takes over a name.
    /// Works without a running broker; a running one loads DIR at once.
    Adopt {
        /// Plugin name.
        name: String,
        /// Its folder from now on.
        dir: PathBuf,
        /// Print JSON: name, dir, previous_dir (null if none), and `loaded` (the
        /// plugin's status when a running broker loaded it, else null).
        #[arg(long)]
        json: bool,
    },
    /// Print the last lines a plugin wrote to stdout/stderr.
    ///
    /// Each line starts with the time the broker read it (local time, RFC 3339 with
    /// milliseconds), then `!` for stderr; a line `── pid 1234 started (restart 2;
    /// last exit: exit status 1) ──` marks where each new process of the plugin
    /// begins.
    Logs {
        /// Plugin name.
        name: String,
        /// Keep printing new lines as they come, until Ctrl-C (or the plugin is
        /// unloaded).
        #[arg(long, short = 'f')]
        follow: bool,
        /// How many past lines to print (0 = all kept).
        #[arg(long, short = 'n', default_value_t = 100)]
        tail: u32,
        /// Print one JSON object per line: plugin, stream (`stdout`, `stderr` or
        /// `broker`), text, time (RFC 3339), unix_ms, pid, generation (the plugin's
        /// process: 1 for its first, +1 for each start; 0 when unknown).
        #[arg(long)]
        json: bool,
    },
}

/// `hearth adapters …`
#[derive(Debug, Subcommand)]
pub enum AdaptersCommand {
    /// Every adapter the broker would load, and scripts that fail to load (with the line).
    List {
        /// Print JSON: `adapters` (name, version, streaming, endpoint, file) and
        /// `errors` (name, error).
        #[arg(long)]
        json: bool,
    },
    /// Load NAME and run its transforms on sample data, reporting each step; with
    /// `--response` or `--stream`, replay a capture of your provider instead and print
    /// what the broker would make of it: text, each tool call (id, name, arguments),
    /// the finish reason and the usage.
    Check {
        /// Adapter name.
        name: String,
        /// A recorded non-streamed response body, as the API sent it.
        #[arg(long, value_name = "FILE", conflicts_with = "stream")]
        response: Option<PathBuf>,
        /// A recorded stream (SSE or NDJSON bytes, as the API sent them).
        #[arg(long, value_name = "FILE")]
        stream: Option<PathBuf>,
        /// Print JSON: adapter, ok, each step (step, ok, detail) and, for a replay,
        /// the completion (text, tool calls, finish reason, usage).
        #[arg(long)]
        json: bool,
    },
}

/// `hearth llm …`
#[derive(Debug, Subcommand)]
pub enum LlmCommand {
    /// Sources in order, with state (ok, cooldown, out) and last error.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Send requests to NAME first (brings it back if it was taken out).
    Use {
        /// Source name.
        name: String,
        /// Print the sources afterwards as JSON (as `llm list --json` does).
        #[arg(long)]
        json: bool,
    },
}

/// `hearth tools …`
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Every registered tool with its plugin and description.
    List {
        /// Print JSON (with parameter schemas) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Call a tool and print its result.
    ///
    /// ARGS is a JSON object, `-` to read it from stdin, or `@FILE` to read it from
    /// FILE. Progress the tool reports is shown on a terminal (a progress bar on
    /// stderr); with --json each progress event is a JSON line
    /// (`{"type":"progress",…}`) before the result's line (`{"type":"result",…}`);
    /// piped without --json only the result is printed. Ctrl-C cancels the call. A
    /// tool that answered with an error exits 5, a refusal by its policies 4, an
    /// unknown tool 3, a timeout 6 (see `hearth --help`).
    ///
    /// Without --policies the tool's `ai.tool` policies are NOT applied: the call runs
    /// even when its `cooldown`, `max_calls` or `confirm` would stop it in a chat (an
    /// operator's call; its `timeout` still applies unless --timeout-ms says
    /// otherwise). With --policies the call is checked as a chat's would be, as a
    /// conversation of its own by user `cli` (or --user): `cooldown` (per user, shared
    /// with that user's chats), `confirm` (asked on the terminal; --yes approves),
    /// `timeout`, and `max_calls` (per conversation: one call never reaches it).
    Call {
        /// Tool name.
        name: String,
        /// Arguments as a JSON object; `-` reads them from stdin, `@FILE` from FILE.
        #[arg(default_value = "{}")]
        args: String,
        /// Timeout in milliseconds (default: the tool's `ai.tool` timeout, else the
        /// plugin's call_timeout_s).
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u32>,
        /// Print JSON lines: each progress event, then the whole result.
        #[arg(long)]
        json: bool,
        /// Apply the tool's `ai.tool` policies (cooldown, confirm, max_calls, timeout)
        /// as a chat would; without it they are not applied.
        #[arg(long)]
        policies: bool,
        /// The user the call is made as (cooldowns are per user); default `cli` with
        /// --policies, else $USER.
        #[arg(long)]
        user: Option<String>,
        /// With --policies: approve a tool whose policy is `confirm` without asking.
        #[arg(long, requires = "policies")]
        yes: bool,
    },
}

/// Parses the command line, runs it and maps errors to one line and exit status 1.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::term::set_raw(cli.raw);
    crate::observe::logs::init(cli.log_format);
    // Output piped into `head` and closed: a command that only prints ends quietly, as
    // other Unix tools do, instead of panicking on EPIPE. Not the broker (`run`, `dev`),
    // which writes to plugin pipes, nor the MCP server on stdio.
    if !matches!(
        cli.command,
        Command::Run { .. }
            | Command::Node(_)
            | Command::Dev(_)
            | Command::Reaper
            | Command::Mcp { .. }
    ) {
        // SAFETY: restoring the default disposition before any threads exist.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.command {
        Command::Reaper => return crate::supervisor::reaper::reaper_main(),
        Command::Dev(args) => crate::dev::dev_command(args),
        Command::Node(args) => crate::remote::node::node_command(cli.data_dir, args),
        Command::New(args) => crate::scaffold::new_command(args),
        Command::Completions { shell } => {
            // Into a buffer, then out: piped into `head`, a closed stdout ends quietly
            // (clap_complete panics on a write error).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "hearth", &mut script);
            let mut out = std::io::stdout().lock();
            match std::io::Write::write_all(&mut out, &script)
                .and_then(|()| std::io::Write::flush(&mut out))
            {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(ExitCode::SUCCESS),
            }
        }
        Command::Plugins {
            command: PluginsCommand::Adopt { name, dir, json },
        } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(adopt(&cli.data_dir, &name, &dir, json))),
        Command::Settings {
            storage_url,
            command,
        } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                rt.block_on(crate::settings_cli::run(
                    &cli.data_dir,
                    storage_url,
                    command,
                ))
            }),
        Command::Storage { command } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(crate::storage_cli::run(&cli.data_dir, command))),
        Command::Mcp { command } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(crate::mcp::cli::run(&cli.data_dir, command))),
        Command::Adapters { command } => {
            use crate::adapters::check::Report;
            let (report, json, listing) = match command {
                AdaptersCommand::List { json } => {
                    (crate::adapters::check::list(&cli.data_dir), json, true)
                }
                AdaptersCommand::Check {
                    name,
                    response: Some(file),
                    json,
                    ..
                } => (
                    crate::adapters::check::replay(
                        &cli.data_dir,
                        &name,
                        crate::adapters::check::Capture::Response(file),
                    ),
                    json,
                    false,
                ),
                AdaptersCommand::Check {
                    name,
                    stream: Some(file),
                    json,
                    ..
                } => (
                    crate::adapters::check::replay(
                        &cli.data_dir,
                        &name,
                        crate::adapters::check::Capture::Stream(file),
                    ),
                    json,
                    false,
                ),
                AdaptersCommand::Check { name, json, .. } => (
                    crate::adapters::check::check(&cli.data_dir, &name),
                    json,
                    false,
                ),
            };
            let Report {
                text,
                json: value,
                ok,
                not_found,
            } = report;
            if json {
                println!("{value}");
            } else {
                print!("{}", crate::term::Printer::stdout().text(&text));
            }
            // A listing with scripts that fail to load still lists the others.
            Ok(match (ok || listing, not_found) {
                (true, _) => ExitCode::SUCCESS,
                (false, true) => ExitCode::from(exit::NOT_FOUND),
                (false, false) => ExitCode::FAILURE,
            })
        }
        Command::Run {
            plugins,
            listen,
            mcp_listen,
            http_listen,
            shutdown_grace_ms,
            restart_wait_ms,
            drain_timeout_ms,
            watch,
            llm_url,
            llm_model,
            llm_adapter,
            nats,
            storage_url,
            admin_token_file,
        } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build();
            runtime.map_err(anyhow::Error::from).and_then(|rt| {
                rt.block_on(crate::server::run(RunOptions {
                    data_dir: cli.data_dir,
                    plugin_dirs: plugins,
                    plugin_paths: Vec::new(),
                    listen,
                    mcp_listen,
                    http_listen,
                    shutdown_grace: Duration::from_millis(shutdown_grace_ms),
                    restart_wait: Duration::from_millis(restart_wait_ms),
                    drain_timeout: Duration::from_millis(drain_timeout_ms),
                    watch,
                    quick: crate::llm::config::QuickSource {
                        url: llm_url,
                        model: llm_model,
                        adapter: llm_adapter,
                    },
                    nats,
                    storage_url,
                    admin_token_file,
                }))
                .map(|()| ExitCode::SUCCESS)
            })
        }
        other => {
            // Client output piped into `head` and closed: end quietly, like other
            // Unix tools, instead of panicking on EPIPE.
            // SAFETY: restoring the default disposition before any threads exist.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            runtime
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(client_command(&cli.data_dir, other)))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", Printer::stderr().line(&one_line(&e)));
            ExitCode::from(exit_code(&e))
        }
    }
}

fn one_line(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
        .replace('\n', " ")
}

/// A connected admin client with the token attached to every call.
#[derive(Debug, Clone)]
pub struct AdminConn {
    client: AdminClient<Channel>,
    agent: AgentClient<Channel>,
    token: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
}

impl AdminConn {
    /// Connects to the broker of `data_dir`. Errors name the missing socket or token,
    /// and end the CLI with [`exit::UNREACHABLE`].
    pub async fn connect(data_dir: &Path) -> anyhow::Result<AdminConn> {
        let unreachable =
            |e: anyhow::Error| anyhow::Error::from(CliError::new(exit::UNREACHABLE, one_line(&e)));
        let socket = std::path::absolute(data_dir.join(SOCKET_FILE))?;
        let token_path = data_dir.join(ADMIN_TOKEN_FILE);
        if !socket.exists() {
            return Err(CliError::new(
                exit::UNREACHABLE,
                format!(
                    "no broker running for data dir {}: {} not found (start one with `hearth run`)",
                    data_dir.display(),
                    socket.display()
                ),
            )
            .into());
        }
        let token = std::fs::read_to_string(&token_path)
            .with_context(|| format!("reading admin token {}", token_path.display()))
            .map_err(unreachable)?;
        let path = socket.clone();
        let channel = Endpoint::try_from("http://localhost")?
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .with_context(|| format!("connecting to {}", socket.display()))
            .map_err(unreachable)?;
        Ok(AdminConn {
            agent: AgentClient::new(channel.clone())
                .max_decoding_message_size(hearth_proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(hearth_proto::MAX_MESSAGE_BYTES),
            client: AdminClient::new(channel)
                .max_decoding_message_size(hearth_proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(hearth_proto::MAX_MESSAGE_BYTES),
            token: token.trim().parse().context("admin token is not ASCII")?,
        })
    }

    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut()
            .insert(hearth_proto::ADMIN_TOKEN_METADATA, self.token.clone());
        r
    }

    /// The admin client; build requests with [`AdminConn::with_token`].
    pub fn client(&mut self) -> &mut AdminClient<Channel> {
        &mut self.client
    }

    /// The agent client (chat, inject) on the same connection; requests need
    /// [`AdminConn::with_token`] too.
    pub fn agent(&mut self) -> &mut AgentClient<Channel> {
        &mut self.agent
    }

    /// Wraps `msg` in a request carrying the admin token.
    pub fn with_token<T>(&self, msg: T) -> tonic::Request<T> {
        self.request(msg)
    }
}

/// `1h02m`, `3m05s`, `12s`, `850ms`; empty for 0.
fn human_duration(ms: u64) -> String {
    let s = ms / 1000;
    match (s / 3600, (s / 60) % 60, s % 60) {
        _ if ms == 0 => String::new(),
        (0, 0, 0) => format!("{ms}ms"),
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// A plugin's status after restart, load or reload: one line, or with `json` the
/// object `plugins list --json` shows for it.
fn print_plugin(p: Option<PluginStatus>, json: bool) {
    if json {
        println!(
            "{}",
            p.as_ref().map_or(serde_json::Value::Null, plugin_json)
        );
    } else {
        print_status(p);
    }
}

fn print_status(p: Option<PluginStatus>) {
    if let Some(p) = p {
        let tools = if p.tools.is_empty() {
            "-".into()
        } else {
            p.tools.join(",")
        };
        let out = Printer::stdout();
        println!(
            "{} {} pid {} tools {}",
            out.line(&p.name),
            state_name(p.state),
            p.pid,
            out.line(&tools)
        );
        for line in rejected_lines(&p) {
            println!("  └ {}", out.line(&line));
        }
    }
}

/// One line per item of a plugin's registration the broker rejected:
/// "tool `calc_add` rejected: … already registered by plugin calc".
fn rejected_lines(p: &PluginStatus) -> Vec<String> {
    p.rejected
        .iter()
        .map(|r| format!("{} `{}` rejected: {}", r.kind, r.name, r.reason))
        .collect()
}

/// How long `hearth tools call --policies` waits for the user to approve a `confirm` tool.
const CONFIRM_WAIT_MS: u32 = 60_000;

/// The arguments of `hearth tools call NAME ARGS` as JSON text: ARGS itself, `-` for
/// stdin, `@FILE` for FILE's content (empty = `{}`). Text that is not JSON is a usage
/// error, said before anything is called.
fn tool_args(arg: &str) -> anyhow::Result<String> {
    let (text, from) = if arg == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading tool arguments from stdin")?;
        (text, " (stdin)".to_string())
    } else if let Some(file) = arg.strip_prefix('@') {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading tool arguments from {file}"))?;
        (text, format!(" ({file})"))
    } else {
        (arg.to_string(), String::new())
    };
    if text.trim().is_empty() {
        return Ok("{}".into());
    }
    // The request around them must fit one gRPC message; a bigger one would reset
    // the stream and read as a broker outage.
    let limit = hearth_proto::MAX_MESSAGE_BYTES - 64 * 1024;
    if text.len() > limit {
        return Err(CliError::new(
            exit::USAGE,
            format!(
                "tool arguments{from}: {} bytes, over the {} MiB message limit",
                text.len(),
                hearth_proto::MAX_MESSAGE_BYTES >> 20
            ),
        )
        .into());
    }
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
        return Err(
            CliError::new(exit::USAGE, format!("tool arguments{from}: not JSON: {e}")).into(),
        );
    }
    Ok(text)
}

/// `hearth tools call`: one call through `Admin.CallToolStream`, its progress shown
/// while it runs, then its result.
struct ToolCall {
    name: String,
    args: String,
    timeout_ms: u32,
    user_id: String,
    policies: bool,
    yes: bool,
    json: bool,
}

impl ToolCall {
    /// Runs the call (asking about a `confirm` policy with --policies), prints the
    /// result and says how it went as the exit status. Ctrl-C cancels the call.
    async fn run(self, conn: &mut AdminConn) -> anyhow::Result<ExitCode> {
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let outcome = tokio::select! {
            outcome = self.call_confirmed(conn) => outcome?,
            _ = &mut ctrl_c => {
                // The stream was dropped with the call: the broker cancels it (the
                // plugin gets `Cancel`). Exit at once: a question on the terminal may
                // still be waiting for a line.
                eprintln!("error: interrupted; tool {} cancelled", Printer::stderr().line(&self.name));
                std::process::exit(i32::from(exit::INTERRUPTED));
            }
        };
        let (r, declined) = outcome;
        if self.json {
            let data = serde_json::from_str::<serde_json::Value>(&r.data_json).ok();
            let v = json!({
                "type": "result", "tool": r.tool, "plugin": r.plugin, "success": r.success,
                "content": r.content, "data": data, "error": r.error, "elapsed_us": r.elapsed_us,
                "needs_confirmation": r.needs_confirmation,
            });
            println!("{v}");
        } else if r.success {
            let out = Printer::stdout();
            if r.content.is_empty() && !r.data_json.is_empty() {
                println!("{}", out.text(&r.data_json));
            } else {
                println!("{}", out.text(&r.content));
            }
        }
        if r.success {
            return Ok(ExitCode::SUCCESS);
        }
        let who = if r.plugin.is_empty() {
            String::new()
        } else {
            format!(" (plugin {})", r.plugin)
        };
        let error = if r.error.is_empty() {
            "failed without an error message"
        } else {
            &r.error
        };
        let line = format!(
            "error: tool {}{who}: {}",
            self.name,
            error.replace('\n', " ")
        );
        eprintln!("{}", Printer::stderr().line(&line));
        Ok(ExitCode::from(
            if declined || refused_by_policy(&r, self.policies) {
                exit::REFUSED
            } else {
                exit::PLUGIN_ERROR
            },
        ))
    }

    /// The call's answer, asking the user first when the tool's `confirm` policy
    /// wants it (with --policies); true when the user declined.
    async fn call_confirmed(
        &self,
        conn: &mut AdminConn,
    ) -> anyhow::Result<(CallToolResponse, bool)> {
        let mut confirmed = self.yes;
        loop {
            let mut r = self.call(conn, confirmed).await?;
            if !r.needs_confirmation || confirmed {
                return Ok((r, false));
            }
            let question = hearth_proto::v1::ConfirmRequest {
                tool: self.name.clone(),
                args_json: self.args.clone(),
                timeout_ms: CONFIRM_WAIT_MS,
                ..Default::default()
            };
            if !crate::chat::ask_confirm(&question, false).await {
                r.error = "not run: its `confirm` policy asks the user, who did not approve it (--yes approves)".into();
                return Ok((r, true));
            }
            confirmed = true;
        }
    }

    /// One `CallToolStream`: progress events shown as they come, then the result.
    async fn call(
        &self,
        conn: &mut AdminConn,
        confirmed: bool,
    ) -> anyhow::Result<CallToolResponse> {
        let req = conn.with_token(CallToolRequest {
            name: self.name.clone(),
            args_json: self.args.clone(),
            timeout_ms: self.timeout_ms,
            user_id: self.user_id.clone(),
            group_id: String::new(),
            policies: self.policies,
            confirmed,
            ..Default::default()
        });
        let mut events = conn
            .client()
            .call_tool_stream(req)
            .await
            .map_err(status_error)?
            .into_inner();
        let mut view = ProgressView::new(&self.name, self.json);
        while let Some(event) = events.message().await.map_err(status_error)? {
            match event.event {
                Some(call_tool_event::Event::Progress(p)) => view.show(&p),
                Some(call_tool_event::Event::Result(r)) => return Ok(r),
                None => {}
            }
        }
        Err(anyhow!(
            "tool {}: the broker ended the call without a result",
            self.name
        ))
    }
}

/// Whether `r` is the broker's refusal of a call by the tool's `ai.tool` policies
/// (`cooldown`, `max_calls`, `confirm`; only with --policies): the text starts with the
/// policy's name and says the call was not run
/// ([`Policies::admit_outside`](crate::pipeline::policy::Policies::admit_outside)).
fn refused_by_policy(r: &CallToolResponse, policies: bool) -> bool {
    r.needs_confirmation
        || (policies
            && ["cooldown: ", "max_calls: ", "confirm: "]
                .iter()
                .any(|p| r.error.starts_with(p))
            && r.error.contains("this call was not run"))
}

/// What `hearth tools call` shows of a call's progress: with --json a JSON line per
/// event on stdout; on a terminal (stderr) a progress bar, or a spinner while the
/// total is unknown, from the first event until the result; else nothing.
struct ProgressView {
    tool: String,
    json: bool,
    tty: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl ProgressView {
    fn new(tool: &str, json: bool) -> ProgressView {
        use std::io::IsTerminal;
        ProgressView {
            tool: Printer::stderr().line(tool).into_owned(),
            json,
            tty: std::io::stderr().is_terminal(),
            bar: None,
        }
    }

    fn show(&mut self, p: &ToolProgress) {
        if self.json {
            let v = json!({"type": "progress", "message": p.message, "progress": p.progress, "total": p.total});
            println!("{v}");
            return;
        }
        if !self.tty {
            return;
        }
        // Configured before it is first drawn (no default-style frame).
        let first = self.bar.is_none();
        let bar = self.bar.get_or_insert_with(|| {
            let bar = indicatif::ProgressBar::hidden();
            bar.set_prefix(self.tool.clone());
            bar
        });
        let message = Printer::stderr().line(&p.message).into_owned();
        let (template, len, pos, message) = progress_shape(p.progress, p.total, message);
        let style = indicatif::ProgressStyle::with_template(template)
            .expect("a valid template")
            .progress_chars("=> ");
        bar.set_style(style);
        if let Some(len) = len {
            bar.set_length(len);
            bar.set_position(pos);
        }
        bar.set_message(message);
        if first {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(120));
        }
    }

    fn clear(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        self.clear();
    }
}

/// How one progress event is drawn: the template, the bar's length and position
/// (none for a spinner), and the message. A total of 1 is a fraction (shown as a
/// percentage); 0 is unknown (a spinner, with the count so far if there is one).
fn progress_shape(
    progress: f64,
    total: f64,
    message: String,
) -> (&'static str, Option<u64>, u64, String) {
    let count = |v: f64| v.max(0.0).round() as u64;
    if total > 0.0 && (total - 1.0).abs() < f64::EPSILON {
        (
            "{spinner} {prefix} [{bar:30}] {percent:>3}% {wide_msg}",
            Some(1000),
            count(progress.clamp(0.0, 1.0) * 1000.0),
            message,
        )
    } else if total > 0.0 {
        (
            "{spinner} {prefix} [{bar:30}] {pos}/{len} {wide_msg}",
            Some(count(total)),
            count(progress.min(total)),
            message,
        )
    } else if progress > 0.0 {
        (
            "{spinner} {prefix} {wide_msg}",
            None,
            0,
            format!("{progress} {message}"),
        )
    } else {
        ("{spinner} {prefix} {wide_msg}", None, 0, message)
    }
}

/// `unloaded NAME (was pid 1234, ready, 2 tools: a, b)` from the status before.
fn unloaded(name: &str, before: Option<&PluginStatus>) -> String {
    let Some(p) = before else {
        return format!("unloaded {name}");
    };
    let mut was = Vec::new();
    if p.pid != 0 {
        was.push(format!("pid {}", p.pid));
    }
    was.push(state_name(p.state));
    let tools = crate::term::count(p.tools.len(), "tool", "tools");
    if p.tools.is_empty() {
        was.push("no tools".into());
    } else {
        was.push(format!("{tools}: {}", p.tools.join(", ")));
    }
    format!("unloaded {name} (was {})", was.join(", "))
}

/// `unix_ms` as local time, RFC 3339 with milliseconds (`2026-12-01T12:00:01.123+01:00`).
fn log_time(unix_ms: u64) -> String {
    let Ok(at) = jiff::Timestamp::from_millisecond(unix_ms as i64) else {
        return "-".into();
    };
    at.to_zoned(jiff::tz::TimeZone::system())
        .strftime("%Y-%m-%dT%H:%M:%S%.3f%:z")
        .to_string()
}

fn state_name(state: i32) -> String {
    PluginState::try_from(state)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("PLUGIN_STATE_")
                .to_lowercase()
        })
        .unwrap_or_else(|_| "unknown".into())
}

fn plugin_json(p: &PluginStatus) -> serde_json::Value {
    json!({
        "name": p.name, "runtime": p.runtime, "pid": p.pid, "state": state_name(p.state),
        "restarts": p.restarts, "tools": p.tools, "dir": p.dir, "uptime_ms": p.uptime_ms,
        "last_exit": p.last_exit, "reason": p.reason, "version": p.version, "sdk": p.sdk,
        "startup_ms": p.startup_ms, "sandbox": p.sandbox, "attached": p.attached,
        "remote": p.remote.iter().map(|r| json!({
            "node": r.node, "version": r.version, "pid": r.pid, "restarts": r.restarts,
            "sdk": r.sdk, "last_seen_ms": r.last_seen_ms,
        })).collect::<Vec<_>>(),
        "rejected": p.rejected.iter().map(|r| json!({
            "kind": r.kind, "name": r.name, "reason": r.reason,
        })).collect::<Vec<_>>(),
    })
}

/// The `plugins list` line under a plugin served by plugin hosts: "on 2 plugin hosts:
/// gpu-1 (pid 812), gpu-2 (pid 77)" ("also on …" when it runs here too).
fn remote_line(p: &PluginStatus) -> Option<String> {
    if p.remote.is_empty() {
        return None;
    }
    let nodes: Vec<String> = p
        .remote
        .iter()
        .map(|r| format!("{} (pid {})", r.node, r.pid))
        .collect();
    Some(format!(
        "{}on {}: {}",
        if p.runtime == "remote" { "" } else { "also " },
        crate::term::count(p.remote.len(), "plugin host", "plugin hosts"),
        nodes.join(", ")
    ))
}

/// The short hints column of `hearth tools list`: MCP annotations and the `confirm`
/// policy, e.g. `read-only,idempotent` or `destructive,confirm`; `-` for none.
fn tool_hints(t: &hearth_proto::v1::ToolInfo) -> String {
    let mut hints = Vec::new();
    if let Some(a) = &t.annotations {
        for (on, name) in [
            (a.read_only_hint, "read-only"),
            (a.destructive_hint, "destructive"),
            (a.idempotent_hint, "idempotent"),
            (a.open_world_hint, "open-world"),
        ] {
            if on == Some(true) {
                hints.push(name);
            }
        }
    }
    if t.ai_tool.as_ref().is_some_and(|ai| ai.confirm) {
        hints.push("confirm");
    }
    if hints.is_empty() {
        "-".into()
    } else {
        hints.join(",")
    }
}

/// `'text'` for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// `hearth plugins attach-token`: shell lines (or JSON) for a process started by hand.
fn print_attach_token(r: &hearth_proto::v1::AttachTokenResponse, json: bool) -> anyhow::Result<()> {
    let env = [
        (hearth_proto::ENV_ADDR, &r.addr),
        (hearth_proto::ENV_TOKEN, &r.token),
        (hearth_proto::ENV_PLUGIN, &r.name),
    ];
    if json {
        let env: serde_json::Map<String, serde_json::Value> =
            env.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let v = json!({
            "name": r.name, "addr": r.addr, "token": r.token,
            "expires_in_ms": r.expires_in_ms, "loaded": r.loaded, "env": env,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    // A token pipe named in the shell would win over HEARTH_TOKEN.
    println!("unset {}", hearth_proto::ENV_TOKEN_FD);
    for (key, value) in env {
        println!("export {key}={}", shell_quote(value));
    }
    let what = if r.loaded {
        "its own process makes room while yours runs and comes back when it disconnects".to_string()
    } else {
        format!(
            "no plugin {} is loaded: yours is an ad-hoc plugin while it runs",
            r.name
        )
    };
    eprintln!(
        "# one use, valid {} s unused; start plugin {} in this shell (`python -m hearth_plugin run main.py`, `node node_modules/hearth-plugin/bin/hearth-node.js run index.js`, or the plugin's binary; under a debugger if you like): {what}",
        r.expires_in_ms / 1000,
        r.name
    );
    Ok(())
}

/// `hearth plugins adopt NAME DIR`: records DIR as NAME's folder, then loads it into
/// a running broker (if one runs).
async fn adopt(data_dir: &Path, name: &str, dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let dir = std::path::absolute(dir)?;
    if !dir.is_dir() {
        anyhow::bail!("{}: not a directory", dir.display());
    }
    let spec = crate::manifest::PluginSpec::load(&dir).map_err(|e| anyhow!("{e}"))?;
    if spec.name != name {
        anyhow::bail!(
            "{} is the plugin `{}`, not `{name}` (its plugin.json `name`, else its folder name)",
            dir.display(),
            spec.name
        );
    }
    let old = crate::supervisor::homes::Homes::new(data_dir)
        .adopt(name, &dir)
        .map_err(|e| anyhow!(e))?;
    let report = |loaded: Option<&PluginStatus>| {
        let v = json!({
            "name": name, "dir": dir, "previous_dir": old,
            "loaded": loaded.map(plugin_json),
        });
        println!("{v}");
    };
    if !json {
        match &old {
            Some(old) => println!("{name}: {} (was {})", dir.display(), old.display()),
            None => println!("{name}: {}", dir.display()),
        }
    }
    let Ok(mut conn) = AdminConn::connect(data_dir).await else {
        if json {
            report(None);
        } else {
            println!(
                "no broker is running on {}; it loads the plugin at its next start",
                data_dir.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let req = conn.with_token(LoadPluginRequest {
        path: dir.display().to_string(),
    });
    match conn.client().load_plugin(req).await {
        Ok(r) => {
            let p = r.into_inner().plugin;
            if json {
                report(p.as_ref());
            } else {
                print_status(p);
            }
        }
        Err(s) => {
            let code = exit_code_of(&s);
            return Err(CliError::new(code, format!(
                "recorded, but the running broker did not load it: {} (if the old folder is still loaded, `hearth plugins unload {name}` first, then `hearth plugins load {}`)",
                s.message(),
                dir.display()
            ))
            .into());
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn client_command(data_dir: &Path, command: Command) -> anyhow::Result<ExitCode> {
    let mut conn = AdminConn::connect(data_dir).await?;
    match command {
        Command::Run { .. }
        | Command::Node(_)
        | Command::Reaper
        | Command::Dev(_)
        | Command::New(_)
        | Command::Adapters { .. }
        | Command::Settings { .. }
        | Command::Storage { .. }
        | Command::Mcp { .. }
        | Command::Completions { .. }
        | Command::Plugins {
            command: PluginsCommand::Adopt { .. },
        } => {
            unreachable!("handled in main")
        }
        Command::Chat(args) => return crate::chat::chat(&mut conn, data_dir, args).await,
        Command::Llm { command } => {
            let (resp, json) = match command {
                LlmCommand::List { json } => {
                    let req = conn.with_token(hearth_proto::v1::ListSourcesRequest {});
                    let r = conn.client().list_sources(req).await;
                    (r.map_err(status_error)?.into_inner(), json)
                }
                LlmCommand::Use { name, json } => {
                    let req = conn.with_token(hearth_proto::v1::UseSourceRequest { name });
                    let r = conn.client().use_source(req).await;
                    (r.map_err(status_error)?.into_inner(), json)
                }
            };
            if json {
                let v: Vec<_> = resp.sources.iter().map(|s| json!({
                    "name": s.name, "base_url": s.base_url, "model": s.model, "adapter": s.adapter,
                    "priority": s.priority, "current": s.name == resp.current, "state": s.state,
                    "cooldown_ms": s.cooldown_ms, "failures": s.failures, "last_error": s.last_error,
                    "max_concurrent": s.max_concurrent, "in_flight": s.in_flight, "waiting": s.waiting,
                })).collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "  {:<16} {:<9} {:<9} {:>7} {:<8} {:<24} URL",
                "NAME", "STATE", "IN FLIGHT", "WAITING", "ADAPTER", "MODEL"
            );
            let out = Printer::stdout();
            for s in &resp.sources {
                let mark = if s.name == resp.current { "*" } else { " " };
                let in_flight = if s.max_concurrent > 0 {
                    format!("{}/{}", s.in_flight, s.max_concurrent)
                } else {
                    s.in_flight.to_string()
                };
                println!(
                    "{mark} {:<16} {:<9} {:<9} {:>7} {:<8} {:<24} {}",
                    out.line(&s.name),
                    s.state,
                    in_flight,
                    s.waiting,
                    out.line(&s.adapter),
                    out.line(&s.model),
                    out.line(&s.base_url)
                );
                if !s.last_error.is_empty() && s.state != "ok" {
                    println!("  {:<16} └ {}", "", out.line(&s.last_error));
                }
            }
        }
        Command::Inject(args) => return crate::chat::inject(&mut conn, args).await,
        Command::Plugins {
            command: PluginsCommand::List { json },
        } => {
            let req = conn.with_token(ListPluginsRequest {});
            let plugins = conn
                .client()
                .list_plugins(req)
                .await
                .map_err(status_error)?
                .into_inner()
                .plugins;
            if json {
                let v: Vec<_> = plugins.iter().map(plugin_json).collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!(
                    "{:<16} {:<7} {:<9} {:>8} {:>8} {:>9}  {:<24} {:<18} TOOLS",
                    "NAME", "RUNTIME", "STATE", "PID", "RESTARTS", "UPTIME", "LAST EXIT", "SANDBOX"
                );
                let out = Printer::stdout();
                for p in &plugins {
                    let dash = |s: String| {
                        if s.is_empty() || s == "0" {
                            "-".into()
                        } else {
                            s
                        }
                    };
                    println!(
                        "{:<16} {:<7} {:<9} {:>8} {:>8} {:>9}  {:<24} {:<18} {}",
                        out.line(&p.name),
                        out.line(&p.runtime),
                        if p.attached {
                            "attached".to_string()
                        } else {
                            state_name(p.state)
                        },
                        dash(p.pid.to_string()),
                        p.restarts,
                        dash(human_duration(p.uptime_ms)),
                        out.line(&dash(p.last_exit.clone())),
                        dash(p.sandbox.clone()),
                        out.line(&p.tools.join(","))
                    );
                    // Also for a ready plugin: why its last reload failed.
                    if !p.reason.is_empty() {
                        println!("{:<16} └ {}", "", out.line(&p.reason));
                    }
                    if let Some(line) = remote_line(p) {
                        println!("{:<16} └ {}", "", out.line(&line));
                    }
                    for line in rejected_lines(p) {
                        println!("{:<16} └ {}", "", out.line(&line));
                    }
                }
            }
        }
        Command::Plugins {
            command: PluginsCommand::Restart { name, json },
        } => {
            let req = conn.with_token(RestartPluginRequest { name });
            let r = conn.client().restart_plugin(req).await;
            print_plugin(r.map_err(status_error)?.into_inner().plugin, json);
        }
        Command::Plugins {
            command: PluginsCommand::Load { path, json },
        } => {
            let path = std::path::absolute(&path)?;
            let req = conn.with_token(LoadPluginRequest {
                path: path.display().to_string(),
            });
            let r = conn.client().load_plugin(req).await;
            print_plugin(r.map_err(status_error)?.into_inner().plugin, json);
        }
        Command::Plugins {
            command: PluginsCommand::Unload { name, json },
        } => {
            // What it was, to say what the unload did (the answer is the stopped plugin).
            let req = conn.with_token(ListPluginsRequest {});
            let before = conn
                .client()
                .list_plugins(req)
                .await
                .map_err(status_error)?
                .into_inner()
                .plugins
                .into_iter()
                .find(|p| p.name == name);
            let req = conn.with_token(UnloadPluginRequest { name: name.clone() });
            conn.client()
                .unload_plugin(req)
                .await
                .map_err(status_error)?;
            if json {
                let v = json!({"unloaded": name, "was": before.as_ref().map(plugin_json)});
                println!("{v}");
            } else {
                println!(
                    "{}",
                    Printer::stdout().line(&unloaded(&name, before.as_ref()))
                );
            }
        }
        Command::Plugins {
            command: PluginsCommand::Reload { name, json },
        } => {
            let req = conn.with_token(ReloadPluginRequest { name });
            let r = conn.client().reload_plugin(req).await;
            print_plugin(r.map_err(status_error)?.into_inner().plugin, json);
        }
        Command::Plugins {
            command: PluginsCommand::AttachToken { name, json, ttl_s },
        } => {
            let req = conn.with_token(hearth_proto::v1::AttachTokenRequest {
                name,
                ttl_s: ttl_s.unwrap_or(0),
            });
            let r = conn
                .client()
                .attach_token(req)
                .await
                .map_err(status_error)?
                .into_inner();
            print_attach_token(&r, json)?;
        }
        Command::Plugins {
            command:
                PluginsCommand::Logs {
                    name,
                    follow,
                    tail,
                    json,
                },
        } => {
            let req = conn.with_token(PluginLogsRequest { name, tail, follow });
            let mut lines = conn
                .client()
                .plugin_logs(req)
                .await
                .map_err(status_error)?
                .into_inner();
            let out = Printer::stdout();
            // The process whose marker came last; a line of another one (the old process
            // of a reload finishing, while the new one runs) carries its pid.
            let mut current_pid = None;
            while let Some(line) = lines.message().await.map_err(status_error)? {
                let time = log_time(line.unix_ms);
                if json {
                    let v = json!({
                        "plugin": line.plugin, "stream": line.stream, "text": line.text,
                        "time": time, "unix_ms": line.unix_ms, "pid": line.pid,
                        "generation": line.generation,
                    });
                    println!("{v}");
                } else if line.stream == "broker" {
                    if line.pid != 0 {
                        current_pid = Some(line.pid);
                    }
                    println!("{time}   ── {} ──", out.line(&line.text));
                } else {
                    let tag = if line.stream == "stderr" { "!" } else { " " };
                    match current_pid {
                        Some(pid) if line.pid != 0 && line.pid != pid => {
                            println!("{time} {tag} [pid {}] {}", line.pid, out.line(&line.text))
                        }
                        _ => println!("{time} {tag} {}", out.line(&line.text)),
                    }
                }
            }
        }
        Command::Tools {
            command: ToolsCommand::List { json },
        } => {
            let req = conn.with_token(ListToolsRequest {});
            let tools = conn
                .client()
                .list_tools(req)
                .await
                .map_err(status_error)?
                .into_inner()
                .tools;
            if json {
                let v: Vec<_> = tools
                    .iter()
                    .map(|t| {
                        let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap_or_default();
                        json!({
                            "name": t.name, "plugin": t.plugin, "title": t.title, "hosts": t.hosts,
                            "description": t.description,
                            "parameters": parse(&t.parameters_json),
                            "output_schema": parse(&t.output_schema_json),
                            "annotations": t.annotations.map(|a| json!({
                                "readOnlyHint": a.read_only_hint, "destructiveHint": a.destructive_hint,
                                "idempotentHint": a.idempotent_hint, "openWorldHint": a.open_world_hint,
                            })),
                            "policies": t.ai_tool.as_ref().map(|ai| json!({
                                "max_calls": ai.max_calls, "cooldown_s": ai.cooldown_s,
                                "confirm": ai.confirm, "timeout_s": ai.timeout_s,
                            })),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                // Where each tool runs, when plugin hosts serve any: "local", node names.
                let remote = tools.iter().any(|t| t.hosts.iter().any(|h| h != "local"));
                if remote {
                    println!(
                        "{:<24} {:<16} {:<22} {:<20} DESCRIPTION",
                        "NAME", "PLUGIN", "HINTS", "HOSTS"
                    );
                } else {
                    println!(
                        "{:<24} {:<16} {:<22} DESCRIPTION",
                        "NAME", "PLUGIN", "HINTS"
                    );
                }
                let out = Printer::stdout();
                for t in &tools {
                    let first = t.description.lines().next().unwrap_or("");
                    let hosts = if remote {
                        format!("{:<20} ", out.line(&t.hosts.join(",")))
                    } else {
                        String::new()
                    };
                    println!(
                        "{:<24} {:<16} {:<22} {hosts}{}",
                        out.line(&t.name),
                        out.line(&t.plugin),
                        tool_hints(t),
                        out.line(first)
                    );
                }
            }
        }
        Command::Tools {
            command:
                ToolsCommand::Call {
                    name,
                    args,
                    timeout_ms,
                    json,
                    policies,
                    user,
                    yes,
                },
        } => {
            let user_id = user.unwrap_or_else(|| {
                if policies {
                    "cli".into()
                } else {
                    std::env::var("USER").unwrap_or_default()
                }
            });
            let call = ToolCall {
                name,
                args: tool_args(&args)?,
                timeout_ms: timeout_ms.unwrap_or(0),
                user_id,
                policies,
                yes,
                json,
            };
            return call.run(&mut conn).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::policy::{Policies, Refusal};
    use hearth_proto::v1::AiTool;
    use tonic::{Code, Status};

    #[test]
    fn broker_statuses_map_to_exit_codes_and_transport_failures_to_unreachable() {
        let cases = [
            (
                Status::from(crate::error::CallError::UnknownTool { tool: "t".into() }),
                exit::NOT_FOUND,
            ),
            (
                Status::from(crate::error::PluginError::Unknown("p".into())),
                exit::NOT_FOUND,
            ),
            (
                Status::from(crate::error::CallError::Timeout {
                    plugin: "p".into(),
                    target: crate::error::Target::Tool("t".into()),
                    after_ms: 5,
                }),
                exit::TIMEOUT,
            ),
            (
                Status::from(crate::error::CallError::PluginGone {
                    plugin: "p".into(),
                    target: crate::error::Target::Tool("t".into()),
                    reason: "exited".into(),
                }),
                exit::PLUGIN_ERROR,
            ),
            (Status::permission_denied("no"), exit::REFUSED),
            (Status::unauthenticated("token"), exit::UNREACHABLE),
            (Status::resource_exhausted("busy"), exit::ERROR),
            (Status::failed_precondition("bad dir"), exit::ERROR),
        ];
        for (status, code) in cases {
            assert_eq!(exit_code_of(&status), code, "{status:?}");
            assert_eq!(exit_code(&status_error(status.clone())), code, "{status:?}");
        }
        // The connection's own failure keeps its cause underneath: unreachable, even
        // though its code (UNAVAILABLE) is the one a plugin's failure has.
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let transport = Status::from_error(Box::new(io));
        assert!(std::error::Error::source(&transport).is_some());
        assert_eq!(exit_code_of(&transport), exit::UNREACHABLE);
        let e = status_error(Status::new(Code::Unavailable, "plugin p is not ready"));
        assert_eq!(
            (exit_code(&e), e.to_string().as_str()),
            (exit::PLUGIN_ERROR, "plugin p is not ready")
        );
        // Context on top keeps the status; a missing setting is not found.
        let e = status_error(Status::not_found("x")).context("loading");
        assert_eq!(exit_code(&e), exit::NOT_FOUND);
        let e = anyhow::Error::from(crate::storage::StorageError::NotFound {
            table: "config".into(),
            key: "k".into(),
        });
        assert_eq!(exit_code(&e), exit::NOT_FOUND);
        assert_eq!(exit_code(&anyhow!("other")), exit::ERROR);
    }

    #[tokio::test]
    async fn the_brokers_policy_refusals_are_recognized_and_tool_errors_are_not() {
        let policies = Policies::default();
        let refusal = |ai: AiTool, confirmed: bool| {
            let policies = &policies;
            async move {
                policies
                    .admit_alone("t", &ai, "u", confirmed)
                    .await
                    .map(|_| ())
                    .unwrap_err()
            }
        };
        let cool = AiTool {
            cooldown_s: 60.0,
            ..Default::default()
        };
        policies.admit_alone("t", &cool, "u", false).await.unwrap();
        let refused = [
            refusal(cool, false).await,
            refusal(
                AiTool {
                    confirm: true,
                    ..Default::default()
                },
                false,
            )
            .await,
        ];
        for r in refused {
            let needs_confirmation = matches!(r, Refusal::NeedsConfirmation(_));
            let response = CallToolResponse {
                error: r.message().to_string(),
                ..Default::default()
            };
            assert!(refused_by_policy(&response, true), "{}", response.error);
            let response = CallToolResponse {
                needs_confirmation,
                ..response
            };
            assert_eq!(refused_by_policy(&response, false), needs_confirmation);
        }
        let mut counts = std::collections::HashMap::new();
        counts.insert("t".to_string(), 1);
        let max = AiTool {
            max_calls: 1,
            ..Default::default()
        };
        let error = policies
            .admit("t", &max, "u", &mut counts)
            .await
            .unwrap_err();
        let response = CallToolResponse {
            error,
            ..Default::default()
        };
        assert!(refused_by_policy(&response, true), "{}", response.error);
        let tool_error = CallToolResponse {
            error: "cooldown: the pump needs a rest".into(),
            ..Default::default()
        };
        assert!(!refused_by_policy(&tool_error, true));
    }

    #[test]
    fn progress_is_drawn_as_a_fraction_a_count_or_a_spinner() {
        let (template, len, pos, _) = progress_shape(0.25, 1.0, "m".into());
        assert!(template.contains("{percent"), "{template}");
        assert_eq!((len, pos), (Some(1000), 250));
        let (template, len, pos, _) = progress_shape(3.0, 10.0, "m".into());
        assert!(template.contains("{pos}/{len}"), "{template}");
        assert_eq!((len, pos), (Some(10), 3));
        let (template, len, _, message) = progress_shape(4.0, 0.0, "files".into());
        assert!(!template.contains("{bar"), "{template}");
        assert_eq!((len, message.as_str()), (None, "4 files"));
    }

    #[test]
    fn help_lists_the_exit_codes_of_the_exit_module() {
        let help = Cli::command().render_long_help().to_string();
        for (code, word) in [
            (exit::USAGE, "usage"),
            (exit::NOT_FOUND, "not found"),
            (exit::REFUSED, "refused by policy"),
            (exit::PLUGIN_ERROR, "plugin error"),
            (exit::TIMEOUT, "timeout"),
            (exit::UNREACHABLE, "broker unreachable"),
            (exit::INTERRUPTED, "interrupted"),
        ] {
            let line = format!("{code:<4} {word}");
            assert!(help.contains(&line), "{line:?} not in\n{help}");
        }
    }
}
