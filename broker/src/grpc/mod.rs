//! Thin gRPC service implementations (`PluginHost`, `Admin`, `Agent`, and the host
//! services `Settings`, `Memory`, `TextMemory`, `DocMemory`, `Knowledge`, `Input` and
//! `Llm`): decode and authenticate, hand the work to the supervisor or storage, map
//! the outcome to a `Status` (through `crate::error`).
//!
//! Host-service calls carry the calling plugin's spawn token (`x-hearth-token`); each
//! method needs a capability from the plugin's manifest ([`crate::manifest::CAPABILITIES`]).

mod admin;
mod agent;
mod host;
mod plugin_host;

pub use admin::AdminService;
pub use agent::{AgentService, InputService, LlmService};
pub use host::HostServices;
pub use plugin_host::PluginHostService;

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
        let granted = supervisor
            .plugin(&plugin)
            .is_some_and(|p| p.spec().capabilities.iter().any(|c| c == cap));
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
#[derive(Debug, Clone)]
pub struct PluginAuth {
    supervisor: std::sync::Arc<Supervisor>,
    /// The UNAUTHENTICATED message for a token no plugin has (as the handler says it).
    unknown: &'static str,
}

impl PluginAuth {
    /// For the host services (`Settings`, `Memory`, …, `Input`, `Llm`).
    pub fn host_services(supervisor: std::sync::Arc<Supervisor>) -> PluginAuth {
        PluginAuth {
            supervisor,
            unknown: "x-hearth-token does not match any running plugin",
        }
    }

    /// For `PluginHost.Attach` (whether the token already has a session is the
    /// supervisor's to say).
    pub fn session(supervisor: std::sync::Arc<Supervisor>) -> PluginAuth {
        PluginAuth {
            supervisor,
            unknown:
                "x-hearth-token does not match any plugin the broker started (wrong or stale token)",
        }
    }
}

impl tonic::service::Interceptor for PluginAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let token = metadata(&request, hearth_proto::TOKEN_METADATA)?;
        let Some(plugin) = self.supervisor.plugin_for_token(token) else {
            return Err(Status::unauthenticated(self.unknown));
        };
        let mut request = request;
        request.extensions_mut().insert(Caller(plugin));
        Ok(request)
    }
}
