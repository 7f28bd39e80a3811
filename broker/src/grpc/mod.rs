//! Thin gRPC service implementations (`PluginHost`, `Admin`, `Agent`, and the host
//! services `Settings`, `Memory`, `TextMemory`, `DocMemory`, `Knowledge`, `Input` and
//! `Llm`): decode and authenticate, hand the work to the supervisor or storage, map
//! the outcome to a `Status` (through `crate::error`).
//!
//! Host-service calls carry the calling plugin's spawn token (`x-hearth-token`); each
//! method needs a capability from the plugin's manifest ([`crate::manifest::CAPABILITIES`]).
//! Tokens are checked before a body is read ([`AdminAuth`], [`PluginAuth`]); a refused
//! plugin session is answered once the plugin's handshake writes are in
//! ([`SessionGate`]), so the plugin sees UNAUTHENTICATED and why.

mod admin;
mod agent;
mod host;
mod plugin_host;
mod session_gate;

pub use admin::AdminService;
pub use agent::{AgentService, InputService, LlmService};
pub use host::HostServices;
pub use plugin_host::PluginHostService;
pub use session_gate::SessionGate;

use crate::supervisor::Supervisor;

use tonic::{Request, Status};

/// The value of ASCII metadata `key`, or UNAUTHENTICATED naming it.
fn metadata<'a, T>(request: &'a Request<T>, key: &str) -> Result<&'a str, Status> {
    request
        .metadata()
        .get(key)
        .ok_or_else(|| Status::unauthenticated(format!("missing metadata `{key}`")))?
        .to_str()
        .map_err(|_| Status::unauthenticated(format!("metadata `{key}` is not ASCII")))
}

/// The plugin a [`PluginAuth`] interceptor found for a call's token, handed to the
/// handler in the request's extensions.
#[derive(Debug, Clone)]
struct Caller(String);

/// A plugin on a plugin host (`hearth node`) whose host-service call its node relayed
/// over NATS ([`crate::remote::relay`]): who it is and what it may do here. Its calls
/// carry no token; [`as_remote_caller`] makes them its calls.
#[derive(Debug, Clone)]
pub struct RemoteCaller {
    /// The plugin's name.
    pub plugin: String,
    /// The node that relayed the call (from the NATS subject).
    pub node: String,
    /// What its manifest asks for, cut by `[nats.nodes.<node>] capabilities`.
    pub capabilities: std::sync::Arc<[String]>,
}

tokio::task_local! {
    static REMOTE_CALLER: RemoteCaller;
}

/// Runs `fut` (an in-process call of the host services) as `caller`: the token check
/// admits it, and capability checks use `caller.capabilities` instead of a local
/// plugin's manifest.
pub async fn as_remote_caller<F: std::future::Future>(caller: RemoteCaller, fut: F) -> F::Output {
    REMOTE_CALLER.scope(caller, fut).await
}

/// The remote caller of the host call being served, if it is one.
fn remote_caller() -> Option<RemoteCaller> {
    REMOTE_CALLER.try_with(|c| c.clone()).ok()
}

/// The plugin calling host-service `method` (e.g. `Settings.GetPlugin`), found by its
/// spawn token, once it is known to hold `capability` (`None`: any plugin may call).
/// Errors: UNAUTHENTICATED for a missing or unknown token; PERMISSION_DENIED naming
/// the method and the capability the manifest lacks.
fn plugin_caller<T>(
    supervisor: &Supervisor,
    request: &Request<T>,
    method: &str,
    capability: Option<&str>,
) -> Result<String, Status> {
    // The interceptor ([`PluginAuth`]) found the caller already: one token lookup per call.
    let plugin = match request.extensions().get::<Caller>() {
        Some(Caller(plugin)) => plugin.clone(),
        None => {
            let token = metadata(request, hearth_proto::TOKEN_METADATA)?;
            supervisor.plugin_for_token(token).ok_or_else(|| {
                Status::unauthenticated("x-hearth-token does not match any running plugin")
            })?
        }
    };
    if let Some(cap) = capability {
        let granted = holds(supervisor, &plugin, cap);
        if !granted {
            tracing::warn!(plugin = %plugin, "{method} refused: capability `{cap}` not granted");
            return Err(Status::permission_denied(format!(
                "plugin {plugin}: {method} needs capability `{cap}`; add it to `capabilities` in its plugin.json"
            )));
        }
    }
    Ok(plugin)
}

/// Whether the running plugin `plugin` holds `capability` (for calls whose answer, not
/// admission, depends on one: masked secrets, speaking as a user).
fn holds(supervisor: &Supervisor, plugin: &str, capability: &str) -> bool {
    if let Some(remote) = remote_caller().filter(|c| c.plugin == plugin) {
        return remote.capabilities.iter().any(|c| c == capability);
    }
    supervisor
        .plugin(plugin)
        .is_some_and(|p| p.spec().capabilities.iter().any(|c| c == capability))
}

/// Checks the admin token (`<data_dir>/admin.token`) of a client call.
fn authorize_admin<T>(request: &Request<T>, token: &str) -> Result<(), Status> {
    let given = metadata(request, hearth_proto::ADMIN_TOKEN_METADATA)?;
    if crate::supervisor::same_secret(given, token) {
        Ok(())
    } else {
        Err(Status::unauthenticated(
            "admin token does not match <data_dir>/admin.token of the running broker",
        ))
    }
}

/// The admin-token check of `Admin` and `Agent` as a tonic interceptor: it runs on the
/// request headers, before tonic reads and decodes the body, so an unauthenticated
/// call costs no more than its headers (a 60 MB `Admin.CallTool` without the token is
/// refused without being read). Same status as the handlers' own check, which stays.
#[derive(Debug, Clone)]
pub struct AdminAuth {
    token: std::sync::Arc<str>,
}

impl AdminAuth {
    /// Admits calls carrying `token`.
    pub fn new(token: &str) -> AdminAuth {
        AdminAuth {
            token: token.into(),
        }
    }
}

impl tonic::service::Interceptor for AdminAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        authorize_admin(&request, &self.token)?;
        Ok(request)
    }
}

/// The plugin-token check of the plugin-facing services as a tonic interceptor (before
/// the body is read, as [`AdminAuth`]): admits a call whose `x-hearth-token` is the
/// token of a running plugin. Which plugin it is and whether it holds the method's
/// capability is still decided per method by the handler.
///
/// A refused call is UNAUTHENTICATED with a message that says what to do (the admin
/// token is named as such: a plugin started by hand with it gets more than "no") and
/// a warning in the broker log, at most one a second of each kind (`RefusalLog`).
#[derive(Debug, Clone)]
pub struct PluginAuth {
    supervisor: std::sync::Arc<Supervisor>,
    /// The UNAUTHENTICATED message for a token no plugin has (as the handler says it).
    unknown: &'static str,
    /// Also admit attach tokens (`hearth plugins attach-token`), valid or not: the
    /// session handler says what is wrong with one.
    attach_tokens: bool,
    /// The broker's admin token, to recognize it when a plugin sends it.
    admin_token: Option<std::sync::Arc<str>>,
    /// `session` or `host service`, for the log.
    what: &'static str,
    log: std::sync::Arc<RefusalLog>,
}

/// What a process started by hand needs: one line appended to token refusals.
const ATTACH_HINT: &str =
    "a plugin started by hand needs HEARTH_TOKEN from `hearth plugins attach-token NAME`";

/// Warnings for refused plugin tokens, at most one a second of each kind (no token,
/// the admin token, an unknown token …): the first refusal of a kind in a second is
/// logged, later ones are counted and the count is told with the next one logged (a
/// plugin retrying in a loop cannot flood the log).
#[derive(Debug, Default)]
struct RefusalLog {
    /// Per kind: second (since `started`) of its last warning, refusals not logged since.
    kinds: std::sync::Mutex<std::collections::HashMap<&'static str, (u64, u64)>>,
    started: std::sync::OnceLock<std::time::Instant>,
}

impl RefusalLog {
    fn warn(&self, what: &str, kind: &'static str, detail: &str) {
        let second = self
            .started
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs();
        let skipped = {
            let mut kinds = self.kinds.lock().unwrap();
            match kinds.get_mut(kind) {
                Some((last, skipped)) if *last == second => {
                    *skipped += 1;
                    return;
                }
                Some((last, skipped)) => {
                    *last = second;
                    std::mem::take(skipped)
                }
                None => {
                    kinds.insert(kind, (second, 0));
                    0
                }
            }
        };
        if skipped > 0 {
            tracing::warn!("plugin {what} refused: {kind}{detail} ({skipped} more not logged)");
        } else {
            tracing::warn!("plugin {what} refused: {kind}{detail}");
        }
    }
}

impl PluginAuth {
    /// For the host services (`Settings`, `Memory`, …, `Input`, `Llm`).
    pub fn host_services(supervisor: std::sync::Arc<Supervisor>) -> PluginAuth {
        PluginAuth {
            supervisor,
            unknown: "x-hearth-token does not match any running plugin",
            attach_tokens: false,
            admin_token: None,
            what: "host-service call",
            log: Default::default(),
        }
    }

    /// For `PluginHost.Attach` (whether the token already has a session is the
    /// supervisor's to say).
    pub fn session(supervisor: std::sync::Arc<Supervisor>) -> PluginAuth {
        PluginAuth {
            supervisor,
            unknown:
                "x-hearth-token does not match any plugin the broker started (wrong or stale token)",
            attach_tokens: true,
            admin_token: None,
            what: "session (PluginHost.Attach)",
            log: Default::default(),
        }
    }

    /// Knows `token` as the broker's admin token, to say so when a plugin sends it.
    pub fn admin_token(self, token: &str) -> PluginAuth {
        PluginAuth {
            admin_token: Some(token.into()),
            ..self
        }
    }

    /// UNAUTHENTICATED for `token` (`None`: no `x-hearth-token` at all), logged.
    fn refuse(&self, token: Option<&str>) -> Status {
        let (kind, detail, message) = match token {
            None => (
                "no x-hearth-token",
                String::new(),
                format!(
                    "missing metadata `{}`: {ATTACH_HINT}",
                    hearth_proto::TOKEN_METADATA
                ),
            ),
            Some(t)
                if self
                    .admin_token
                    .as_deref()
                    .is_some_and(|admin| crate::supervisor::same_secret(t, admin)) =>
            {
                (
                    "the admin token was sent as a plugin token",
                    String::new(),
                    "this is the admin token (<data_dir>/admin.token); plugins need a spawn or attach token: see `hearth plugins attach-token NAME`".to_string(),
                )
            }
            Some(t) => (
                "unknown token",
                format!(" ({} characters)", t.chars().count()),
                format!("{}; {ATTACH_HINT}", self.unknown),
            ),
        };
        self.log.warn(self.what, kind, &detail);
        Status::unauthenticated(message)
    }
}

impl tonic::service::Interceptor for PluginAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        // A host call a plugin host relayed: its node checked the token.
        if let Some(remote) = remote_caller() {
            let mut request = request;
            request.extensions_mut().insert(Caller(remote.plugin));
            return Ok(request);
        }
        let token = match metadata(&request, hearth_proto::TOKEN_METADATA) {
            Ok(token) => token,
            Err(status) => {
                let present = request.metadata().get(hearth_proto::TOKEN_METADATA);
                if present.is_none() {
                    return Err(self.refuse(None));
                }
                self.log.warn(self.what, "x-hearth-token is not ASCII", "");
                return Err(status);
            }
        };
        let Some(plugin) = self.supervisor.plugin_for_token(token) else {
            if self.attach_tokens && self.supervisor.is_attach_token(token) {
                return Ok(request);
            }
            return Err(self.refuse(Some(token)));
        };
        let mut request = request;
        request.extensions_mut().insert(Caller(plugin));
        Ok(request)
    }
}
