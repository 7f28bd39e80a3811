//! Thin gRPC service implementations: decode and authenticate, hand the work to the
//! supervisor, map the outcome to a `Status` (through `crate::error`).

mod admin;
mod plugin_host;

pub use admin::AdminService;
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
