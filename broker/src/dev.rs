//! `hearth dev …`: developer tools — the scripted LLM server (crate `hearth-scripted`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use hearth_scripted::Script;

/// `hearth dev …`
#[derive(Debug, clap::Subcommand)]
pub enum DevCommand {
    /// Serve a scripted LLM API (OpenAI, DeepSeek, Anthropic, Gemini, Ollama wire
    /// formats) on loopback for offline tests and demos.
    ///
    /// Answers from the script in the wire format the request's path names, plain or
    /// streamed: OpenAI/DeepSeek `POST …/chat/completions`, Anthropic `POST
    /// …/v1/messages`, Gemini `POST …/models/{model}:generateContent` and
    /// `:streamGenerateContent[?alt=sse]`, Ollama `POST …/api/chat`. `GET /requests`
    /// lists the request bodies received, `GET /exchanges` each with its family, path,
    /// headers and the tool calls answered. Prints `listening on http://ADDR/v1`: the
    /// base URL of OpenAI sources; the other families' sources use `http://ADDR`.
    LlmServer {
        /// Script file (JSON; format in docs/llm-script.md).
        #[arg(long, value_name = "FILE")]
        script: PathBuf,
        /// Address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
        listen: SocketAddr,
    },
}

/// Runs a `hearth dev` command (the CLI's entry point into this module).
///
/// # Errors
/// The script does not load (the message names the file and what is wrong), or the
/// listen address cannot be bound.
pub fn dev_command(command: DevCommand) -> anyhow::Result<ExitCode> {
    match command {
        DevCommand::LlmServer { script, listen } => {
            let script = Script::load(&script)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(hearth_scripted::serve_until_signal(script, listen))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
