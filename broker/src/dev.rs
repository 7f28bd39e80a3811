//! `hearth dev …`: the plugin author's inner loop.
//!
//! `hearth dev PLUGIN_DIR` runs a broker in this process on a temp data dir (0700,
//! removed at exit; `--data DIR` keeps one) with that one plugin (a Python plugin runs
//! on the folder's `.venv` when it has one and neither the manifest nor
//! `HEARTH_PYTHON` names a Python) and a scripted LLM
//! (crate `hearth-scripted`, script format in `docs/llm-script.md`) as its LLM source,
//! prints the broker's and the plugin's log on stderr, and reloads the plugin when a
//! file in its folder changes (a Rust plugin — a folder with `Cargo.toml` — is rebuilt
//! with `cargo build` first, and a failed build keeps the running version; a plugin
//! whose manifest has a `build` step — a Go plugin from `hearth new go` — is built by the
//! broker itself, see `supervisor::build`). `--trace`
//! prints every message on the plugin's session, decoded, one line each. Stops on
//! Ctrl-C / SIGTERM like `hearth run`.
//!
//! `hearth dev llm-server` serves a scripted LLM alone.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use hearth_scripted::{Script, ScriptedLlm};

use crate::manifest::{PluginSpec, Runtime};

/// The script `hearth dev` answers with when given none: echoes the user, calls no tool.
const DEFAULT_SCRIPT: &str = r#"{
  "_comment": "hearth dev's default script: pass --script FILE (docs/llm-script.md) to call tools",
  "default": { "content": "(scripted LLM) you said: {user}" }
}"#;

/// `hearth dev` arguments: a plugin folder, or a subcommand.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DevArgs {
    /// Developer tool other than the inner loop.
    #[command(subcommand)]
    pub command: Option<DevCommand>,
    /// The plugin folder to run (plugin.json, or an entry the broker infers).
    #[arg(value_name = "PLUGIN_DIR", required = true)]
    pub plugin_dir: Option<PathBuf>,
    /// LLM script (JSON, docs/llm-script.md); default: a reply that echoes the user.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Print every message on the plugin's session, decoded, one line each.
    #[arg(long)]
    pub trace: bool,
    /// Data dir to use and keep (default: a new temp dir, removed at exit). The global
    /// `--data-dir` / `HEARTH_DATA_DIR` is not used: `hearth dev` never touches the data
    /// of a broker you run with `hearth run`.
    #[arg(long = "data", value_name = "DIR")]
    pub data: Option<PathBuf>,
}

/// `hearth dev …` subcommands.
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
/// The script does not load (the message names the file and what is wrong), the
/// listen address cannot be bound, the plugin folder does not exist or has no valid
/// manifest, a Rust plugin's first build fails, or the broker cannot start.
pub fn dev_command(args: DevArgs) -> anyhow::Result<ExitCode> {
    let command = match (args.command, args.plugin_dir) {
        (Some(command), _) => command,
        (None, Some(dir)) => return inner_loop(&dir, args.script, args.trace, args.data),
        (None, None) => bail!("hearth dev: give a PLUGIN_DIR, or `hearth dev llm-server`"),
    };
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

/// `hearth dev PLUGIN_DIR`.
fn inner_loop(
    dir: &Path,
    script: Option<PathBuf>,
    trace: bool,
    data: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    if !dir.exists() {
        bail!("{}: does not exist", dir.display());
    }
    let dir = std::fs::canonicalize(dir).with_context(|| format!("{}", dir.display()))?;
    let script = match &script {
        Some(file) => Script::load(file)?,
        None => Script::from_json(DEFAULT_SCRIPT).expect("the default script parses"),
    };
    // A Rust plugin is built before its manifest is read: its entry is the build's output.
    // A manifest with a `build` step builds itself (the broker runs it at each start).
    let manifest_builds = PluginSpec::load(&dir).is_ok_and(|s| s.build.is_some());
    let cargo = dir.join("Cargo.toml").is_file() && !manifest_builds;
    if cargo && !cargo_build(&dir) {
        bail!(
            "{}: cargo build failed (its output is above)",
            dir.display()
        );
    }
    let spec = PluginSpec::load(&dir).map_err(|e| {
        let hint = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(t) if cargo => format!(
                " (CARGO_TARGET_DIR={} puts the build there: point plugin.json's `entry` at it, or unset it)",
                t.to_string_lossy()
            ),
            _ => String::new(),
        };
        anyhow::anyhow!("{}: {e}{hint}", dir.display())
    })?;
    let cargo = cargo && spec.runtime == Runtime::Exec;
    // `hearth new python` tells the author to make `.venv` in the plugin's folder: use its
    // Python unless the manifest or HEARTH_PYTHON names one.
    let venv_python = dir.join(".venv/bin/python");
    if spec.runtime == Runtime::Python
        && spec.python.is_none()
        && std::env::var_os("HEARTH_PYTHON").is_none()
        && venv_python.is_file()
    {
        // SAFETY: no other thread runs yet (the runtime is built below).
        unsafe { std::env::set_var("HEARTH_PYTHON", &venv_python) };
        eprintln!("hearth dev: Python from {}", venv_python.display());
    }
    if trace {
        crate::supervisor::trace::enable();
    }
    let (data_dir, temporary) = match data {
        Some(d) => (d, false),
        None => (temp_data_dir()?, true),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let llm = ScriptedLlm::start(script);
        let shown = data_dir.display();
        eprintln!(
            "hearth dev: plugin {} ({}) from {}",
            spec.name,
            spec.runtime.as_str(),
            dir.display()
        );
        eprintln!("  data dir   {shown}");
        eprintln!(
            "  LLM        scripted, {} (model \"scripted\")",
            llm.base_url()
        );
        eprintln!(
            "  reload     on every saved file{}",
            if cargo {
                ", after cargo build"
            } else if spec.build.is_some() {
                ", after its build (plugin.json `build`)"
            } else {
                ""
            }
        );
        eprintln!("  try, in another terminal:");
        eprintln!("    export HEARTH_DATA_DIR={shown}");
        eprintln!("    hearth tools list; hearth chat \"hello\"");
        eprintln!(
            "    eval \"$(hearth plugins attach-token {})\"   # run your own copy under a debugger",
            spec.name
        );
        if cargo {
            let data_dir = data_dir.clone();
            let dir = dir.clone();
            let name = spec.name.clone();
            std::thread::Builder::new()
                .name("hearth-dev-cargo".into())
                .spawn(move || rebuild_on_change(&dir, &data_dir, &name))?;
        }
        crate::server::run(crate::server::RunOptions {
            mcp_listen: None,
            http_listen: None,
            data_dir: data_dir.clone(),
            plugin_dirs: Vec::new(),
            plugin_paths: vec![dir.clone()],
            listen: None,
            shutdown_grace: Duration::from_millis(2000),
            restart_wait: Duration::from_millis(5000),
            drain_timeout: Duration::from_millis(3000),
            watch: !cargo,
            quick: crate::llm::config::QuickSource {
                url: Some(llm.base_url()),
                model: Some("scripted".into()),
                adapter: None,
            },
            nats: None,
            storage_url: None,
            admin_token_file: None,
        })
        .await
    });
    if temporary {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    result.map(|()| ExitCode::SUCCESS)
}

/// A new private (0700) folder under the temp dir for the broker's data.
fn temp_data_dir() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let suffix: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let dir = std::env::temp_dir().join(format!("hearth-dev-{suffix}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// `cargo build` in `dir`, its output on our stderr; true when it succeeded.
fn cargo_build(dir: &Path) -> bool {
    eprintln!("hearth dev: cargo build in {}", dir.display());
    match std::process::Command::new("cargo")
        .arg("build")
        .current_dir(dir)
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit())
        .status()
    {
        Ok(status) => status.success(),
        Err(e) => {
            eprintln!("hearth dev: cannot run cargo: {e}");
            false
        }
    }
}

/// Watches a Rust plugin's folder (not `target/`): after each quiet spell of changes,
/// `cargo build`, then asks the broker to reload `name` when the build succeeded.
fn rebuild_on_change(dir: &Path, data_dir: &Path, name: &str) {
    use notify::Watcher;
    let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            if matches!(
                event.kind,
                notify::EventKind::Create(_)
                    | notify::EventKind::Modify(_)
                    | notify::EventKind::Remove(_)
            ) {
                for path in event.paths {
                    let _ = tx.send(path);
                }
            }
        }
    });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => return eprintln!("hearth dev: cannot watch {}: {e}", dir.display()),
    };
    if let Err(e) = watcher.watch(dir, notify::RecursiveMode::Recursive) {
        return eprintln!("hearth dev: cannot watch {}: {e}", dir.display());
    }
    let relevant = |p: &Path| !crate::watch::ignored(p.strip_prefix(dir).unwrap_or(p));
    while let Ok(first) = rx.recv() {
        let mut changed = relevant(&first);
        while let Ok(p) = rx.recv_timeout(crate::watch::DEBOUNCE) {
            changed |= relevant(&p);
        }
        if !changed {
            continue;
        }
        if !cargo_build(dir) {
            eprintln!("hearth dev: build failed; the running version keeps serving");
            continue;
        }
        let reload = async {
            let mut conn = crate::cli::AdminConn::connect(data_dir).await?;
            let req = conn.with_token(hearth_proto::v1::ReloadPluginRequest {
                name: name.to_string(),
            });
            conn.client()
                .reload_plugin(req)
                .await
                .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
            anyhow::Ok(())
        };
        let done = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(reload));
        match done {
            Ok(()) => eprintln!("hearth dev: rebuilt and reloaded {name}"),
            Err(e) => eprintln!("hearth dev: reload of {name} failed: {e}"),
        }
    }
}
