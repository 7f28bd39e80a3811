//! Hearth wire contract v1 (`proto/hearth/v1/*.proto`, package `hearth.v1`).
//!
//! Generated message types and tonic services, plus what broker and SDKs share: the
//! constants (metadata keys, protocol version, environment variable names) and the
//! stage permission matrix ([`permissions`]). No I/O.

/// Generated code of package `hearth.v1`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod v1 {
    tonic::include_proto!("hearth.v1");
}

pub mod permissions;

/// Wire contract version this crate speaks (semver). The broker refuses a plugin
/// whose major version differs.
pub const PROTOCOL_VERSION: &str = "1.0.0";

/// gRPC metadata key carrying a plugin's spawn token on every call.
pub const TOKEN_METADATA: &str = "x-hearth-token";

/// gRPC metadata key carrying the admin token (from `<data_dir>/admin.token`).
pub const ADMIN_TOKEN_METADATA: &str = "x-hearth-admin-token";

/// Environment variable with the broker address (`unix:///…` or `http://127.0.0.1:…`).
pub const ENV_ADDR: &str = "HEARTH_ADDR";
/// Environment variable with the plugin's name.
pub const ENV_PLUGIN: &str = "HEARTH_PLUGIN";
/// Environment variable with the plugin's spawn token, for plugins started by hand
/// (the broker never sets it: see [`ENV_TOKEN_FD`]).
pub const ENV_TOKEN: &str = "HEARTH_TOKEN";
/// Environment variable with the number of an inherited file descriptor (a pipe) from
/// which a plugin reads its spawn token to EOF and then closes; the broker passes the
/// token this way so it never sits in the plugin's environment (`/proc/<pid>/environ`).
/// SDKs read it first and fall back to [`ENV_TOKEN`].
pub const ENV_TOKEN_FD: &str = "HEARTH_TOKEN_FD";
/// Environment variable with the plugin's own writable data directory
/// (`<data_dir>/plugin-data/<name>`, created 0700 by the broker).
pub const ENV_PLUGIN_DATA: &str = "HEARTH_PLUGIN_DATA";

/// Maximum encoded gRPC message size both sides accept, in bytes (64 MiB).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Stage names as the HomeAgent SDK spells them, indexed like [`v1::Stage`].
pub fn stage_name(stage: v1::Stage) -> &'static str {
    use v1::Stage::*;
    match stage {
        Unspecified => "unspecified",
        OnInput => "on_input",
        PreAction => "pre_action",
        PostAction => "post_action",
        BeforeToolcall => "before_toolcall",
        AfterToolcall => "after_toolcall",
        BeforeOutput => "before_output",
        AfterOutput => "after_output",
    }
}
