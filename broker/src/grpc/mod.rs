//! Thin gRPC service implementations (`PluginHost`, `Admin`, `Agent`, and the host
//! services `Input` and `Llm`): decode and authenticate, hand the work to the
//! supervisor, map the outcome to a `Status` (through `crate::error`).

mod admin;
mod agent;
mod plugin_host;

pub use admin::AdminService;
pub use agent::{AgentService, InputService, LlmService};
pub use plugin_host::PluginHostService;

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
