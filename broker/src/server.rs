//! `hearth run`: the data dir, the listeners, the admin token, plugin discovery and
//! the graceful stop on SIGINT/SIGTERM.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use hearth_proto::v1::admin_server::AdminServer;
use hearth_proto::v1::plugin_host_server::PluginHostServer;
use hearth_proto::MAX_MESSAGE_BYTES;
use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tokio_util::sync::CancellationToken;

use crate::adapters::AdapterSet;
use crate::agent::Agent;
use crate::agent::TurnDeps;
use crate::grpc::{
    AdminService, AgentService, HostServices, InputService, LlmService, PluginHostService,
};
use crate::llm::config::{Config, QuickSource};
use crate::llm::{LlmClient, SourcePool};
use crate::manifest::discover;
use crate::pipeline::memory::MemorySources;
use crate::pipeline::policy::Policies;
use crate::pipeline::Hooks;
use crate::registry::Registry;
use crate::router::ToolRouter;
use crate::storage::{
    Conversations, Db, DocMemory, GraphMemory, HistoryBudget, Knowledge, Settings, TextMemory,
};
use crate::supervisor::process::Interpreters;
use crate::supervisor::reaper::Reaper;
use crate::supervisor::sandbox::Protected;
use crate::supervisor::{Supervisor, SupervisorConfig};
use hearth_proto::v1::agent_server::AgentServer;

/// Longest Unix socket path Linux accepts (`sun_path` is 108 bytes with the NUL).
pub const MAX_SOCKET_PATH: usize = 107;
/// Socket file name inside the data dir.
pub const SOCKET_FILE: &str = "hearth.sock";
/// Concurrent gRPC streams one client connection may open (chats waiting for their
/// turn included).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16_384;
/// The longest `/readyz` and gRPC health wait for the plugins found at start to
/// register or fail (an MCP server fetched by `npx -y` may take most of a minute).
pub const READY_WAIT: Duration = Duration::from_secs(120);
/// Admin token file name inside the data dir (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Options of `hearth run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Data dir; holds `hearth.sock`, `admin.token` and `plugins/`.
    pub data_dir: PathBuf,
    /// Extra plugin roots besides `<data_dir>/plugins`.
    pub plugin_dirs: Vec<PathBuf>,
    /// Single plugin folders to load as well (`hearth dev PLUGIN_DIR`); watched like
    /// the roots with `watch`.
    pub plugin_paths: Vec<PathBuf>,
    /// Optional TCP loopback address to serve on as well.
    pub listen: Option<std::net::SocketAddr>,
    /// Optional TCP loopback address to serve every tool over MCP (Streamable HTTP at
    /// `/mcp`, bearer token in `<data_dir>/mcp.token`).
    pub mcp_listen: Option<std::net::SocketAddr>,
    /// Optional TCP loopback address for `/metrics`, `/healthz`, `/readyz` and the admin
    /// page; metrics are recorded only when it is set.
    pub http_listen: Option<std::net::SocketAddr>,
    /// Grace between `Shutdown` and SIGTERM.
    pub shutdown_grace: Duration,
    /// How long calls wait for a restarting plugin.
    pub restart_wait: Duration,
    /// How long restart, reload and unload let calls in flight finish, and how long
    /// running turns may finish when the broker stops.
    pub drain_timeout: Duration,
    /// Reload a plugin when files in its directory change.
    pub watch: bool,
    /// Quick-start LLM source from flags or environment (goes before hearth.toml's).
    pub quick: QuickSource,
    /// `--nats URL`: the NATS server of plugin hosts (over `[nats] url` of hearth.toml).
    pub nats: Option<String>,
    /// `--storage-url URL`: PostgreSQL shared with other brokers (over `[storage] url`).
    pub storage_url: Option<String>,
    /// `--admin-token-file FILE`: one admin token for every broker behind a load
    /// balancer, instead of a new random one at each start.
    pub admin_token_file: Option<PathBuf>,
}

/// What [`start_agent`] started.
struct Started {
    agent: Agent,
    router: Arc<ToolRouter>,
    sources: Arc<SourcePool>,
    host: HostServices,
    settings: Settings,
    /// `[nats]` with `--nats` over it: plugin hosts to learn and call.
    nats: Option<crate::nats::NatsConfig>,
}

/// Loads adapters, LLM sources, storage and stage hooks, and starts the agent.
async fn start_agent(
    data_dir: &Path,
    opts: &RunOptions,
    supervisor: Arc<Supervisor>,
) -> anyhow::Result<Started> {
    let config = Config::load(data_dir, &opts.quick).map_err(|e| anyhow::anyhow!(e))?;
    let nats = match (config.nats.clone(), &opts.nats) {
        (None, None) => None,
        (config, url) => {
            let mut nats = config.unwrap_or_default();
            if let Some(url) = url {
                nats.url = Some(url.clone());
                nats.urls.clear();
            }
            nats.validate()?;
            Some(nats)
        }
    };
    let adapters = Arc::new(AdapterSet::load_with(data_dir, &config.adapter_limits));
    for (name, e) in adapters.errors() {
        tracing::error!(adapter = %name, "adapter not loaded: {e}");
    }
    match config.sources.first() {
        Some(s) => tracing::info!(source = %s.name, url = %s.base_url, adapter = %s.adapter, "LLM source"),
        None => tracing::warn!("no LLM source configured: chat answers with an error until one is (hearth.toml or --llm-url)"),
    }
    let mut storage = config.storage.clone();
    if let Some(url) = &opts.storage_url {
        storage.url = Some(url.clone());
    }
    let db = match storage.connection_url().map_err(|e| anyhow::anyhow!(e))? {
        Some(url) => Db::postgres_with(&url, storage.ca.as_deref()).await?,
        None => Db::open(data_dir).await.context("opening hearth.db")?,
    };
    db.mark_data_dir(data_dir);
    let leases = match db.pg() {
        Some(pg) => {
            let id = storage.broker_id();
            let ttl = storage.lease_ttl().map_err(|e| anyhow::anyhow!(e))?;
            let leases =
                crate::storage::pg::leases::Leases::start(pg.clone(), id.clone(), ttl).await?;
            tracing::info!(db = %pg.target(), broker = %id, lease_ttl_s = ttl.as_secs_f64(), "storage: PostgreSQL, shared with other brokers");
            Some(leases)
        }
        None => None,
    };
    let budget = HistoryBudget {
        max_messages: Some(config.agent.history_messages),
        ..HistoryBudget::default()
    };
    let sources = Arc::new(SourcePool::new(config.sources));
    let text_memory = TextMemory::for_db(&db, data_dir, config.text_memory)
        .await
        .context("opening TextMemory")?;
    let memory = GraphMemory::new(db.clone());
    let docs = DocMemory::new(db.clone());
    let knowledge = Knowledge::open(db.clone(), data_dir)
        .await
        .context("opening the knowledge folder")?;
    let settings = Settings::new(db.clone());
    let settings_handle = settings.clone();
    supervisor.set_settings(settings.clone());
    let host = HostServices::new(
        supervisor.clone(),
        settings,
        memory.clone(),
        text_memory.clone(),
        docs.clone(),
        knowledge.clone(),
    );
    let top_k = config.agent.memory_top_k;
    let router = Arc::new(ToolRouter::new(supervisor));
    let deps = TurnDeps {
        hooks: Hooks::new(router.clone(), config.agent.hook_timeout),
        router: router.clone(),
        llm: LlmClient::new(adapters),
        sources: sources.clone(),
        settings: Arc::new(config.agent),
        conversations: Some(Conversations::new(db.clone(), budget)),
        text_memory: Some(text_memory),
        policies: {
            let policies = Policies::default();
            if let Some(pg) = db.pg() {
                policies.share_cooldowns(pg.clone());
            }
            Arc::new(policies)
        },
        memory: Some(MemorySources {
            graph: memory,
            docs,
            knowledge,
            top_k,
        }),
        leases,
    };
    Ok(Started {
        agent: Agent::start(deps),
        router,
        sources,
        host,
        settings: settings_handle,
        nats,
    })
}

/// Checks the socket path length and replaces a stale socket file left by a killed
/// broker. Errors: the path is too long for the OS, or a live broker answers on it.
pub fn prepare_socket(path: &Path) -> anyhow::Result<()> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        bail!(
            "socket path {} is {len} bytes, longer than the OS limit of {MAX_SOCKET_PATH} bytes for Unix sockets; use a shorter --data-dir",
            path.display()
        );
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("another broker is already running on {}", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing stale socket {}", path.display()))?;
        tracing::info!("replaced stale socket {}", path.display());
    }
    Ok(())
}

/// The admin token of brokers behind one load balancer (`--admin-token-file`): read
/// from `file` (at least 32 characters, not readable by group or others), and written
/// to `<data_dir>/admin.token` for the local CLI.
fn shared_admin_token(file: &Path, local: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(file)
        .with_context(|| format!("--admin-token-file {}", file.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        anyhow::bail!(
            "--admin-token-file {}: readable by group or others (mode {:o}); chmod 600 it",
            file.display(),
            meta.permissions().mode() & 0o777
        );
    }
    let token = std::fs::read_to_string(file)
        .with_context(|| format!("--admin-token-file {}", file.display()))?
        .trim()
        .to_string();
    if token.len() < 32 || token.contains(char::is_whitespace) {
        anyhow::bail!(
            "--admin-token-file {}: the token must be one word of at least 32 characters (e.g. `openssl rand -hex 32`)",
            file.display()
        );
    }
    write_token(local, &token)?;
    Ok(token)
}

/// The bearer token of `--mcp-listen`, kept across restarts (MCP clients' configs hold
/// it): read from `<data_dir>/mcp.token`, or created there (0600) when missing.
pub const MCP_TOKEN_FILE: &str = "mcp.token";

fn mcp_token(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(t) if t.trim().len() >= 32 => Ok(t.trim().to_string()),
        _ => write_admin_token(path),
    }
}

/// Turns `<data_dir>/mcp.json` (the `mcpServers` format) into plugin folders under
/// `<data_dir>/mcp-json/`, rebuilt at each start; returns that root, or `None` when
/// there is no such file. A bad file or server is logged and skipped.
fn mcp_json_root(data_dir: &Path) -> Option<PathBuf> {
    let file = data_dir.join("mcp.json");
    if !file.exists() {
        return None;
    }
    let root = data_dir.join("mcp-json");
    let plan = match crate::mcp::import::specs_from_file(&file) {
        Ok(plan) => plan,
        Err(e) => {
            tracing::error!("{e}");
            return None;
        }
    };
    for w in &plan.warnings {
        tracing::warn!("{}: {w}", file.display());
    }
    for s in &plan.skipped {
        tracing::error!("{}: {s}", file.display());
    }
    let _ = std::fs::remove_dir_all(&root);
    if let Err(e) = crate::mcp::import::write(&plan, &root, true) {
        tracing::error!("{}: {e}", file.display());
        return None;
    }
    tracing::info!(
        "{}: {}",
        file.display(),
        crate::term::count(plan.servers.len(), "MCP server", "MCP servers")
    );
    Some(root)
}

pub(crate) fn write_admin_token(path: &Path) -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("reading the OS random source: {e}"))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_token(path, &token)?;
    Ok(token)
}

/// Writes `token` to `path` (mode 0600) under a temporary name and renames it: a
/// client never reads a half-written (empty) token.
fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("token.tmp");
    let _ = std::fs::remove_file(&tmp);
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(token.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The supervisor of a broker or plugin host on `data_dir`: plugins dial `socket`; the
/// data dir and every plugin root are protected from plugins' sandboxes;
/// `(restart_wait, shutdown_grace, drain_timeout)` as `hearth run`'s flags.
pub(crate) fn new_supervisor(
    data_dir: &Path,
    socket: &Path,
    plugin_dirs: &[PathBuf],
    plugin_paths: &[PathBuf],
    (restart_wait, shutdown_grace, drain_timeout): (Duration, Duration, Duration),
) -> Arc<Supervisor> {
    let registry = Arc::new(Registry::default());
    Arc::new(Supervisor::new(
        SupervisorConfig {
            addr: format!("unix://{}", socket.display()),
            interpreters: Interpreters::from_env(),
            restart_wait,
            shutdown_grace,
            drain_timeout,
            reaper: Reaper::start().unwrap_or_else(|e| {
                tracing::error!("cannot start the reaper process ({e}); plugin groups will not be cleaned up if the broker is killed");
                Reaper::disabled()
            }),
            data_dir: data_dir.to_path_buf(),
            protected: std::sync::RwLock::new(Protected {
                paths: std::iter::once(data_dir.to_path_buf())
                    .chain(
                        plugin_dirs
                            .iter()
                            .chain(plugin_paths)
                            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone())),
                    )
                    .collect(),
            }),
            settings: std::sync::OnceLock::new(),
            stop_deadline: std::sync::OnceLock::new(),
        },
        registry,
    ))
}

/// What a broker or plugin host does to itself first: everything it creates is its
/// own (umask 077: 0600 files, 0700 folders) while plugins start with the operator's
/// umask; and it is not dumpable: other processes of the same user (plugins included)
/// without CAP_SYS_PTRACE cannot read its `/proc/<pid>/environ` (API keys, NATS
/// secrets) or its memory.
pub(crate) fn harden_process() {
    // SAFETY: umask only swaps the process's file mode mask.
    let operator_umask = unsafe { libc::umask(0o077) };
    // SAFETY: a plain prctl on the calling process.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    crate::supervisor::process::set_plugin_umask(operator_umask as u32);
}

/// Installs the SIGTERM/SIGINT handlers now and returns the future that ends at the
/// first of them: a signal that arrives while the broker is still starting (plugins
/// loading, the watcher walking big folders) is kept, and stops it gracefully once
/// started, instead of killing it with the default action.
pub(crate) fn stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
        }
    }
}

/// Creates the data dir 0700 (tightening an existing one and the files in it, so
/// nothing in it is readable by other local users), and refuses to go on when a
/// folder the broker loads code from is writable by group or others: the data dir,
/// `plugins/`, `adapters/` and each `--plugins` root. Errors name the path, its mode
/// and the `chmod` that fixes it.
pub fn prepare_data_dir(data_dir: &Path, plugin_roots: &[PathBuf]) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let mut code_dirs = vec![
        data_dir.to_path_buf(),
        data_dir.join("plugins"),
        data_dir.join("adapters"),
    ];
    code_dirs.extend(plugin_roots.iter().cloned());
    for dir in &code_dirs {
        if dir.exists() {
            refuse_shared_writable(dir)?;
        }
    }
    tighten(data_dir)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir.join("plugins"))
        .with_context(|| format!("creating {}", data_dir.join("plugins").display()))?;
    Ok(())
}

/// An error when `path` is writable by group or others (as ssh refuses such keys).
pub fn refuse_shared_writable(path: &Path) -> anyhow::Result<()> {
    let mode = std::fs::metadata(path)
        .with_context(|| format!("checking {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o022 != 0 {
        bail!(
            "{} is writable by group or others (mode {:04o}): another local user could add code the broker runs; fix it with `chmod go-w {}`",
            path.display(),
            mode & 0o7777,
            path.display()
        );
    }
    Ok(())
}

/// Takes group and other bits off the data dir and everything in it the broker wrote
/// (plugin folders keep their modes: they are code).
fn tighten(data_dir: &Path) -> anyhow::Result<()> {
    fn walk(path: &Path, top: bool) -> std::io::Result<()> {
        let meta = std::fs::symlink_metadata(path)?;
        if meta.file_type().is_symlink() {
            return Ok(());
        }
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7700))?;
            if top {
                tracing::info!(
                    "data dir {} was mode {:04o}; now {:04o}",
                    path.display(),
                    mode & 0o7777,
                    mode & 0o7700
                );
            }
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(path)? {
                let entry = entry?;
                if top && entry.file_name() == "plugins" {
                    continue;
                }
                walk(&entry.path(), false)?;
            }
        }
        Ok(())
    }
    walk(data_dir, true).with_context(|| format!("restricting {} to its owner", data_dir.display()))
}

/// Runs the broker until SIGINT/SIGTERM, then stops every plugin and returns.
pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    // Checked before anything is created: a bad address leaves no socket or token.
    if let Some(addr) = opts.listen {
        if !addr.ip().is_loopback() {
            bail!("--listen {addr}: only loopback addresses are served (remote plugins need TLS, which is not built yet)");
        }
    }
    if let Some(addr) = opts.http_listen {
        if !addr.ip().is_loopback() {
            bail!("--http-listen {addr}: only loopback addresses are served (put a TLS proxy in front for others)");
        }
    }
    harden_process();
    let stopped = stop_signal();
    let data_dir = std::path::absolute(&opts.data_dir)?;
    prepare_data_dir(&data_dir, &opts.plugin_dirs)?;
    let http_tcp = match opts.http_listen {
        Some(addr) => Some(crate::observe::http::bind(addr).await?),
        None => None,
    };
    let tcp = match opts.listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("--listen: binding {addr}"))?,
        ),
        None => None,
    };
    let socket = data_dir.join(SOCKET_FILE);
    prepare_socket(&socket)?;
    let listener =
        UnixListener::bind(&socket).with_context(|| format!("binding {}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
    let admin_token = match &opts.admin_token_file {
        None => write_admin_token(&data_dir.join(ADMIN_TOKEN_FILE))?,
        Some(file) => shared_admin_token(file, &data_dir.join(ADMIN_TOKEN_FILE))?,
    };
    if crate::supervisor::sandbox::landlock_abi().is_none() {
        tracing::warn!("Landlock is not available (a kernel without it, or a seccomp filter that refuses it): plugins run without their filesystem sandbox (see SECURITY.md)");
    }

    let supervisor = new_supervisor(
        &data_dir,
        &socket,
        &opts.plugin_dirs,
        &opts.plugin_paths,
        (opts.restart_wait, opts.shutdown_grace, opts.drain_timeout),
    );

    match crate::observe::trace::init() {
        Some(Ok(line)) => tracing::info!("{line}"),
        Some(Err(e)) => tracing::error!("{e}; traces are not exported"),
        None => {}
    }
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let readiness = crate::observe::health::Readiness::new(health_reporter).await;
    let Started {
        agent,
        router,
        sources,
        host,
        settings,
        nats,
    } = start_agent(&data_dir, &opts, supervisor.clone()).await?;
    readiness.storage_open(sources.clone());
    if opts.http_listen.is_some() {
        crate::observe::metrics::enable(supervisor.clone(), Some(agent.clone()));
    }

    let stop = CancellationToken::new();
    // Every service checks its token in an interceptor, on the request headers, before
    // tonic reads and decodes the body (AdminAuth, PluginAuth): an unauthenticated call
    // costs its headers, not its (up to 64 MiB) message.
    // The host services plugins call (with their tokens): on every listener, and in
    // process for plugins on plugin hosts over NATS.
    let host_routes = host.routes(
        InputService::new(agent.clone(), supervisor.clone()),
        LlmService::new(sources.clone(), supervisor.clone()),
        crate::grpc::PluginAuth::host_services(supervisor.clone()).admin_token(&admin_token),
    );
    if let Some(nats) = nats {
        // A wrong config, login or certificate stops the start; an unreachable server
        // does not: the broker serves its own plugins and joins NATS once it answers.
        let start = {
            let (nats, supervisor, router, host_routes) = (
                nats.clone(),
                supervisor.clone(),
                router.clone(),
                host_routes.clone(),
            );
            move |client: async_nats::Client, violations: crate::nats::Violations| async move {
                let hub = crate::remote::hub::Hub::start_with(client, &nats, supervisor).await?;
                crate::remote::relay::serve_host_calls(hub.clone(), host_routes)
                    .await
                    .map_err(|e| crate::nats::NatsError::Connect {
                        url: nats.servers().join(", "),
                        detail: format!("subscribing to host calls: {e}"),
                    })?;
                // A refused subscription or publish would leave this broker deaf to
                // replies, nodes or host calls: stop with the subjects instead.
                violations
                    .check(hub.client(), &nats, || {
                        format!(
                            "the broker's NATS user must be allowed what deploy/nats/nats-server.conf grants a broker, for its name {:?} ([nats] name)",
                            hub.id()
                        )
                    })
                    .await?;
                crate::observe::metrics::watch_nats(
                    hub.client().clone(),
                    Some(Box::new({
                        let hub = hub.clone();
                        move || hub.node_count()
                    })),
                );
                router.set_remote(hub);
                Ok::<(), crate::nats::NatsError>(())
            }
        };
        let violations = crate::nats::Violations::default();
        match crate::nats::connect_with_inbox(&nats, None, &violations).await {
            Ok(client) => start(client, violations).await?,
            Err(e @ crate::nats::NatsError::Unreachable { .. }) => {
                tracing::warn!("{e}; serving local plugins, and joining NATS when it answers");
                tokio::spawn(async move {
                    let joined = match crate::nats::connect_retrying(&nats, None, &violations).await
                    {
                        Ok(client) => start(client, violations).await,
                        Err(e) => Err(e),
                    };
                    if let Err(e) = joined {
                        tracing::error!("{e}; plugins on plugin hosts are not used");
                    }
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    let make_router = || {
        use crate::grpc::{AdminAuth, PluginAuth, SessionGate};
        use tonic::service::interceptor::InterceptedService;
        let admin_auth = AdminAuth::new(&admin_token);
        tonic::transport::Server::builder()
            // Every waiting chat is a stream: allow as many as conversations can queue
            // (hyper's default is 200 per connection).
            .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
            .add_routes(host_routes.clone())
            // grpc.health.v1.Health: no token, as load balancers and orchestrators
            // expect; it reveals only the serving status.
            .add_service(health_service.clone())
            // A refused session is answered after the plugin's handshake writes
            // (grpc::session_gate: grpcio would report INTERNAL instead).
            .add_service(SessionGate::new(InterceptedService::new(
                PluginHostServer::new(PluginHostService::new(supervisor.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
                PluginAuth::session(supervisor.clone()).admin_token(&admin_token),
            )))
            .add_service(InterceptedService::new(
                AdminServer::new(
                    AdminService::new(router.clone(), sources.clone(), admin_token.clone())
                        .with_policies(agent.policies()),
                )
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
                admin_auth.clone(),
            ))
            .add_service(InterceptedService::new(
                AgentServer::new(AgentService::new(agent.clone(), admin_token.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
                admin_auth,
            ))
    };
    let mut servers = Vec::new();
    let unix_stop = stop.clone();
    servers.push(tokio::spawn(make_router().serve_with_incoming_shutdown(
        UnixListenerStream::new(listener),
        unix_stop.cancelled_owned(),
    )));
    if let Some(tcp) = tcp {
        let addr = tcp.local_addr()?;
        tracing::info!("listening on http://{addr}");
        let tcp_stop = stop.clone();
        servers.push(tokio::spawn(make_router().serve_with_incoming_shutdown(
            TcpListenerStream::new(tcp),
            tcp_stop.cancelled_owned(),
        )));
    }
    tracing::info!("listening on unix://{}", socket.display());
    let mcp_server = match opts.mcp_listen {
        None => None,
        Some(addr) => {
            if !addr.ip().is_loopback() {
                bail!("--mcp-listen {addr}: only loopback addresses are served (put a TLS proxy in front for others)");
            }
            let token = mcp_token(&data_dir.join(MCP_TOKEN_FILE))?;
            let admin = AdminService::new(router.clone(), sources.clone(), admin_token.clone())
                .with_policies(agent.policies());
            let app =
                crate::mcp::serve::http_router(admin, admin_token.clone().into(), token.into())
                    .await
                    .map_err(|s| anyhow::anyhow!("--mcp-listen: {}", s.message()))?;
            let tcp = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--mcp-listen: binding {addr}"))?;
            tracing::info!(
                "MCP server listening on http://{}/mcp (bearer token in {})",
                tcp.local_addr()?,
                data_dir.join(MCP_TOKEN_FILE).display()
            );
            let mcp_stop = stop.clone();
            Some(tokio::spawn(async move {
                axum::serve(tcp, app)
                    .with_graceful_shutdown(mcp_stop.cancelled_owned())
                    .await
            }))
        }
    };

    let http_server = match http_tcp {
        None => None,
        Some(tcp) => {
            let state = Arc::new(crate::observe::http::HttpState {
                readiness: readiness.clone(),
                supervisor: supervisor.clone(),
                admin: AdminService::new(router.clone(), sources.clone(), admin_token.clone())
                    .with_policies(agent.policies()),
                agent: agent.clone(),
                sources: sources.clone(),
                settings: settings.clone(),
                data_dir: data_dir.clone(),
                admin_token: admin_token.clone().into(),
            });
            let app = crate::observe::http::router(state);
            tracing::info!(
                "HTTP listening on http://{}: /metrics, /healthz, /readyz, admin page at /",
                tcp.local_addr()?
            );
            let http_stop = stop.clone();
            Some(tokio::spawn(async move {
                axum::serve(tcp, app)
                    .with_graceful_shutdown(http_stop.cancelled_owned())
                    .await
            }))
        }
    };

    let mut roots = vec![data_dir.join("plugins")];
    roots.extend(mcp_json_root(&data_dir));
    roots.extend(opts.plugin_dirs.iter().cloned());
    for root in &opts.plugin_dirs {
        if !root.is_dir() {
            tracing::error!("--plugins {}: not a directory", root.display());
        }
    }
    let mut dirs = discover(&roots);
    dirs.extend(opts.plugin_paths.iter().cloned());
    let first_outcomes: Vec<_> = dirs
        .iter()
        .filter_map(|dir| supervisor.load_reporting(dir))
        .collect();
    // Ready once every plugin found at start registered or failed (its
    // `hearth_plugin_up` says which), at most READY_WAIT after start.
    let ready = readiness.clone();
    tokio::spawn(async move {
        if tokio::time::timeout(READY_WAIT, futures_util::future::join_all(first_outcomes))
            .await
            .is_err()
        {
            tracing::warn!(
                "ready after {} s although some plugins are still starting",
                READY_WAIT.as_secs()
            );
        }
        ready.loaded().await;
    });
    tracing::info!(
        "broker ready: {} found",
        crate::term::count(dirs.len(), "plugin dir", "plugin dirs")
    );
    roots.extend(opts.plugin_paths.iter().cloned());
    let _watcher = if opts.watch {
        Some(crate::watch::spawn(supervisor.clone(), &roots).context("--watch")?)
    } else {
        None
    };

    stopped.await;
    // Balancers stop routing here, before anything drains.
    readiness.stopping().await;
    // Running turns finish (or are cancelled after the grace) while plugins still run
    // and clients are still connected to receive their final events; turns and plugin
    // calls share one drain window (what the turns used counts for the calls).
    let drained_by = tokio::time::Instant::now() + opts.drain_timeout;
    agent.shutdown(opts.drain_timeout).await;
    supervisor.shutdown_by(drained_by).await;
    stop.cancel();
    // The servers drain together, 3 s at most (a held stream — a health `Watch`, a
    // live log — does not hold the stop longer); what is left is aborted.
    type Served = tokio::task::JoinHandle<Result<(), String>>;
    fn served<E: std::fmt::Display + Send + 'static>(
        s: tokio::task::JoinHandle<Result<(), E>>,
    ) -> Served {
        tokio::spawn(async move {
            s.await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
        })
    }
    let mut all: Vec<(&str, Served)> = servers.into_iter().map(|s| ("server", served(s))).collect();
    for (what, s) in [("MCP server", mcp_server), ("HTTP server", http_server)] {
        all.extend(s.map(|s| (what, served(s))));
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    for (what, s) in all {
        let abort = s.abort_handle();
        match tokio::time::timeout_at(until, s).await {
            Ok(Ok(Err(e))) => tracing::warn!("{what}: {e}"),
            Err(_) => {
                tracing::warn!("{what} did not drain within 3 s");
                abort.abort();
            }
            _ => {}
        }
    }
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(data_dir.join(ADMIN_TOKEN_FILE));
    // Queued spans go out, 2 s at most (an unreachable collector does not hold the stop).
    let flush = tokio::task::spawn_blocking(crate::observe::trace::shutdown);
    if tokio::time::timeout(Duration::from_secs(2), flush)
        .await
        .is_err()
    {
        tracing::warn!("tracing: spans not flushed within 2 s; dropped");
    }
    tracing::info!("stopped");
    Ok(())
}
