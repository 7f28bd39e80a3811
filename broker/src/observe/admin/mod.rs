//! The admin page at `/` on the `--http-listen` server (see [`super::http`]): plugins
//! with restart/reload/unload, a plugin's live log and settings, LLM sources, and a
//! chat box — for an operator's browser, over the broker's own objects in process
//! (the supervisor, settings, source pool and agent the gRPC services use).
//!
//! Server-rendered HTML (`format!` with one escaping helper, `html::esc`), one
//! stylesheet and one small script embedded in the binary, no inline script (the
//! `Content-Security-Policy` forbids it). Live parts: the plugin log as Server-Sent
//! Events, a chat turn as a streamed NDJSON answer to its POST (both in `live`).
//!
//! | route | what |
//! | --- | --- |
//! | `GET /login`, `POST /login`, `POST /logout` | session from the admin token (`auth.rs`) |
//! | `GET /` | plugins table |
//! | `GET /plugins/{name}` | one plugin: status, tools, settings form, live log |
//! | `GET /plugins/{name}/logs` | its log lines (tail, then live) as SSE |
//! | `POST /plugins/{name}/restart` · `reload` · `unload` | the supervisor's operations |
//! | `POST /plugins/{name}/settings` | save its settings (validated by their defs) |
//! | `GET /llm`, `POST /llm/use` | LLM sources with state and cooldowns; pick one |
//! | `GET /chat`, `POST /chat` | the chat box; a turn's events as NDJSON |
//! | `GET /static/admin.css`, `GET /static/admin.js` | the embedded assets |
//!
//! Security (details in `auth.rs`): every request needs a loopback `Host`; pages need a
//! session (else a redirect to `/login`); every POST needs the session's CSRF token
//! and a same-origin `Origin`/`Referer` when the browser sends one; every answer has
//! `Content-Security-Policy: default-src 'self'; frame-ancestors 'none'`,
//! `X-Content-Type-Options: nosniff`, `Referrer-Policy: same-origin` and
//! `Cache-Control: no-store`. (`same-origin`, not `no-referrer`: under `no-referrer`
//! browsers send `Origin: null` with every POST, and the origin check could not tell
//! the page's own forms from another site's; `same-origin` still sends nothing to
//! other sites.) `/metrics`, `/healthz` and `/readyz` are not routed
//! here and need no login.

mod actions;
pub(crate) mod auth;
mod html;
mod live;
mod pages;
mod settings;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::http::HttpState;
use auth::{SessionView, Sessions};
use html::{Flash, Nav};

/// The admin page's state: the HTTP server's objects and the sessions.
#[derive(Debug)]
struct Admin {
    http: Arc<HttpState>,
    sessions: Sessions,
}

type AdminState = State<Arc<Admin>>;

/// The admin page's routes, merged into the HTTP server's router.
pub fn router(state: Arc<HttpState>) -> axum::Router {
    let admin = Arc::new(Admin {
        http: state,
        sessions: Sessions::default(),
    });
    axum::Router::new()
        .route("/", get(pages::plugins))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/plugins/{name}", get(pages::plugin))
        .route("/plugins/{name}/logs", get(live::logs))
        .route("/plugins/{name}/restart", post(actions::restart))
        .route("/plugins/{name}/reload", post(actions::reload))
        .route("/plugins/{name}/unload", post(actions::unload))
        .route("/plugins/{name}/settings", post(settings::save))
        .route("/llm", get(pages::llm))
        .route("/llm/use", post(actions::use_source))
        .route("/chat", get(pages::chat).post(live::chat))
        .route("/static/admin.css", get(css))
        .route("/static/admin.js", get(js))
        .layer(axum::middleware::from_fn(guard))
        .with_state(admin)
}

/// Refuses a non-loopback `Host` (DNS rebinding) and adds the security headers to
/// every answer.
async fn guard(request: Request, next: Next) -> Response {
    let mut response = match auth::loopback_host(request.headers()) {
        Ok(_) => next.run(request).await,
        Err(why) => refused(StatusCode::FORBIDDEN, &why),
    };
    let h = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// A plain-text refusal (403 for a failed check, 401 …).
fn refused(status: StatusCode, why: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{why}\n"),
    )
        .into_response()
}

/// A POST's form fields, its origin, session and CSRF token checked.
struct Post {
    session: SessionView,
    fields: Vec<(String, String)>,
}

impl Post {
    /// The first value of field `name`.
    fn field(&self, name: &str) -> Option<&str> {
        field(&self.fields, name)
    }
}

fn field<'f>(fields: &'f [(String, String)], name: &str) -> Option<&'f str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn parse_form(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body).into_owned().collect()
}

/// Why a request is not served.
#[derive(Debug)]
enum Denied {
    /// No live session: to the login page.
    Login,
    /// A failed check (403 with the reason).
    Forbidden(String),
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Denied::Login => Redirect::to("/login").into_response(),
            Denied::Forbidden(why) => refused(StatusCode::FORBIDDEN, &why),
        }
    }
}

impl Admin {
    /// The session of a page request; else [`Denied::Login`].
    fn page_session(&self, headers: &HeaderMap) -> Result<SessionView, Denied> {
        self.sessions.get(headers).ok_or(Denied::Login)
    }

    /// Checks a POST: same origin (when the browser says), a live session (else to the
    /// login page), the session's CSRF token in field `csrf` (else 403).
    fn post(&self, headers: &HeaderMap, body: &[u8]) -> Result<Post, Denied> {
        let host = auth::loopback_host(headers).map_err(Denied::Forbidden)?;
        auth::same_origin(headers, host).map_err(Denied::Forbidden)?;
        let session = self.page_session(headers)?;
        let fields = parse_form(body);
        if !auth::is_csrf(field(&fields, "csrf"), &session) {
            return Err(Denied::Forbidden(
                "the form's CSRF token is missing or not this session's: reload the page and try again".into(),
            ));
        }
        Ok(Post { session, fields })
    }

    /// A page of the session: `body` in the frame, with the flash kept for it.
    fn render(&self, session: &SessionView, title: &str, nav: Nav, body: &str) -> Html<String> {
        let flash = self.sessions.take_flash(&session.id);
        Html(html::page(
            title,
            nav,
            Some(&session.csrf),
            flash.as_ref(),
            body,
        ))
    }

    /// After a POST: `flash` for the next page, and a redirect to `to`.
    fn done(&self, session: &SessionView, flash: Flash, to: &str) -> Response {
        self.sessions.set_flash(&session.id, flash);
        Redirect::to(to).into_response()
    }
}

fn login_form(admin: &Admin, error: Option<&str>) -> String {
    let flash = error.map(Flash::error);
    let token_file = admin.http.data_dir.join("admin.token");
    html::page(
        "Log in",
        Nav::None,
        None,
        flash.as_ref(),
        &format!(
            r#"<form method="post" action="/login" class="login">
<label for="token">Admin token</label>
<input type="password" id="token" name="token" autocomplete="off" required autofocus>
<p class="help">The content of <code>{}</code> (new at every broker start).</p>
<button type="submit">Log in</button>
</form>"#,
            html::esc(&token_file.display().to_string())
        ),
    )
}

async fn login_page(State(admin): AdminState, headers: HeaderMap) -> Response {
    if admin.sessions.get(&headers).is_some() {
        return Redirect::to("/").into_response();
    }
    Html(login_form(&admin, None)).into_response()
}

async fn login(State(admin): AdminState, headers: HeaderMap, body: Bytes) -> Response {
    let host = match auth::loopback_host(&headers) {
        Ok(h) => h,
        Err(e) => return refused(StatusCode::FORBIDDEN, &e),
    };
    if let Err(e) = auth::same_origin(&headers, host) {
        return refused(StatusCode::FORBIDDEN, &e);
    }
    let fields = parse_form(&body);
    let given = field(&fields, "token").unwrap_or("");
    if !auth::is_admin_token(given, &admin.http.admin_token) {
        tracing::warn!("admin page: a login with a wrong token was refused");
        return (
            StatusCode::UNAUTHORIZED,
            Html(login_form(
                &admin,
                Some("That is not the admin token of this broker."),
            )),
        )
            .into_response();
    }
    let id = admin.sessions.create();
    tracing::info!("admin page: logged in");
    (
        [(header::SET_COOKIE, auth::session_cookie(&id))],
        Redirect::to("/"),
    )
        .into_response()
}

async fn logout(State(admin): AdminState, headers: HeaderMap, body: Bytes) -> Response {
    let post = match admin.post(&headers, &body) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    admin.sessions.remove(&post.session.id);
    (
        [(header::SET_COOKIE, auth::cleared_cookie())],
        Redirect::to("/login"),
    )
        .into_response()
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("static/admin.css"),
    )
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("static/admin.js"),
    )
        .into_response()
}
