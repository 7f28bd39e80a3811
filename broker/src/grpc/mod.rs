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
    let token = metadata(request, hearth_proto::TOKEN_METADATA)?;
    let plugin = supervisor.plugin_for_token(token).ok_or_else(|| {
        Status::unauthenticated("x-hearth-token does not match any running plugin")
    })?;
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
