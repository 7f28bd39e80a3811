//! The admin page at `/` on the `--http-listen` server (see [`super::http`]).

use std::sync::Arc;

use super::http::HttpState;

/// The admin page's routes, merged into the HTTP server's router.
pub fn router(_state: Arc<HttpState>) -> axum::Router {
    axum::Router::new()
}
