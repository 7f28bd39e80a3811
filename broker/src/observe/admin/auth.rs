//! Who may use the admin page, and which requests are really theirs.
//!
//! - **Login**: `POST /login` with the admin token (`<data_dir>/admin.token`, new random
//!   bytes at each broker start), compared in constant time. Success makes a session:
//!   a random 32-byte id in the cookie `hearth_session` (`HttpOnly`, `SameSite=Strict`,
//!   `Path=/`; no `Secure`: the listener is plain HTTP on loopback). Sessions live in
//!   memory, expire after [`IDLE`] without a request, and are all gone when the broker
//!   restarts.
//! - **CSRF**: every state change is a POST carrying the session's own random token
//!   in the field `csrf` (forms) — without it, or with another, 403. The browser also
//!   tells where a POST comes from: an `Origin` (else `Referer`) that is not this
//!   page's own origin is refused.
//! - **DNS rebinding**: every request must name a loopback host in `Host`
//!   (`localhost`, `127.x.y.z`, `[::1]`); a page of another site that rebinds its name
//!   to 127.0.0.1 sends its own name and is refused.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};

use super::html::Flash;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "hearth_session";

/// A session ends after this long without a request.
pub(crate) const IDLE: Duration = Duration::from_secs(30 * 60);

/// Most sessions kept at once; a new login beyond it ends the least recently used.
const MAX_SESSIONS: usize = 64;

/// One logged-in browser.
#[derive(Debug)]
struct Session {
    csrf: String,
    last_seen: Instant,
    flash: Option<Flash>,
}

/// What a request of a live session may use.
#[derive(Debug, Clone)]
pub(crate) struct SessionView {
    /// The cookie value (to log out).
    pub(crate) id: String,
    /// The session's CSRF token.
    pub(crate) csrf: String,
}

/// The live sessions (one lock; nothing awaits while holding it).
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// A new session; returns its id (the cookie value).
    pub(crate) fn create(&self) -> String {
        let id = random_hex();
        let mut map = self.map.lock().unwrap();
        sweep(&mut map);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            id.clone(),
            Session {
                csrf: random_hex(),
                last_seen: Instant::now(),
                flash: None,
            },
        );
        id
    }

    /// The session named by the request's cookie, if it is live (and now seen).
    pub(crate) fn get(&self, headers: &HeaderMap) -> Option<SessionView> {
        let id = cookie(headers, COOKIE)?;
        let mut map = self.map.lock().unwrap();
        sweep(&mut map);
        let s = map.get_mut(id)?;
        s.last_seen = Instant::now();
        Some(SessionView {
            id: id.to_string(),
            csrf: s.csrf.clone(),
        })
    }

    /// Ends session `id`.
    pub(crate) fn remove(&self, id: &str) {
        self.map.lock().unwrap().remove(id);
    }

    /// Keeps `flash` for the session's next page.
    pub(crate) fn set_flash(&self, id: &str, flash: Flash) {
        if let Some(s) = self.map.lock().unwrap().get_mut(id) {
            s.flash = Some(flash);
        }
    }

    /// The flash kept for the session, taken.
    pub(crate) fn take_flash(&self, id: &str) -> Option<Flash> {
        self.map.lock().unwrap().get_mut(id)?.flash.take()
    }
}

fn sweep(map: &mut HashMap<String, Session>) {
    map.retain(|_, s| s.last_seen.elapsed() < IDLE);
}

/// 32 random bytes, hex.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The `Set-Cookie` value that starts session `id`.
pub(crate) fn session_cookie(id: &str) -> String {
    format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/")
}

/// The `Set-Cookie` value that ends the session in the browser.
pub(crate) fn cleared_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

/// Whether `given` is the admin token (constant time; surrounding blanks ignored, as a
/// pasted token often has a newline).
pub(crate) fn is_admin_token(given: &str, token: &str) -> bool {
    let (given, token) = (given.trim(), token.trim());
    !given.is_empty() && crate::supervisor::same_secret(given, token)
}

/// Whether `given` is the session's CSRF token (constant time).
pub(crate) fn is_csrf(given: Option<&str>, session: &SessionView) -> bool {
    given.is_some_and(|g| crate::supervisor::same_secret(g, &session.csrf))
}

/// The request's `Host` when it names a loopback host; else why not.
pub(crate) fn loopback_host(headers: &HeaderMap) -> Result<&str, String> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or("the request has no Host header")?;
    let name = match host.strip_prefix('[') {
        // `[::1]:8080`
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let loopback = name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(host)
    } else {
        Err(format!(
            "Host `{host}` is not a loopback name: the admin page answers only to \
             localhost, 127.0.0.1 or [::1] (a guard against DNS rebinding)"
        ))
    }
}

/// Whether a POST comes from this page: its `Origin` (else its `Referer`), when the
/// browser sent one, is `http://<host>` (or `https://`). Err says why not.
pub(crate) fn same_origin(headers: &HeaderMap, host: &str) -> Result<(), String> {
    let own = |o: &str| o == format!("http://{host}") || o == format!("https://{host}");
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        return if own(origin) {
            Ok(())
        } else {
            Err(format!(
                "cross-site request refused: Origin `{origin}` is not http://{host}"
            ))
        };
    }
    if let Some(referer) = headers.get(header::REFERER) {
        let referer = referer.to_str().unwrap_or("");
        let origin = referer
            .find("://")
            .map(|scheme| {
                let after = scheme + 3;
                let end = referer[after..]
                    .find('/')
                    .map_or(referer.len(), |i| after + i);
                &referer[..end]
            })
            .unwrap_or(referer);
        return if own(origin) {
            Ok(())
        } else {
            Err(format!(
                "cross-site request refused: Referer `{referer}` is not of http://{host}"
            ))
        };
    }
    // Neither (a client that is not a browser): the CSRF token still decides.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn hosts_must_be_loopback() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:1",
            "LOCALHOST",
            "[::1]:9",
            "127.3.4.5",
        ] {
            assert!(
                loopback_host(&headers(&[(header::HOST, ok)])).is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "evil.example:8080",
            "10.0.0.1:80",
            "localhost.evil.example",
            "[::2]:1",
        ] {
            assert!(
                loopback_host(&headers(&[(header::HOST, bad)])).is_err(),
                "{bad}"
            );
        }
        assert!(loopback_host(&HeaderMap::new()).is_err());
    }

    #[test]
    fn origin_and_referer_must_be_ours() {
        let host = "127.0.0.1:8080";
        assert!(same_origin(&headers(&[(header::ORIGIN, "http://127.0.0.1:8080")]), host).is_ok());
        assert!(same_origin(&headers(&[(header::ORIGIN, "http://evil.example")]), host).is_err());
        assert!(same_origin(&headers(&[(header::ORIGIN, "null")]), host).is_err());
        assert!(same_origin(
            &headers(&[(header::REFERER, "http://127.0.0.1:8080/plugins/x")]),
            host
        )
        .is_ok());
        assert!(same_origin(
            &headers(&[(header::REFERER, "http://127.0.0.1:8080.evil.example/")]),
            host
        )
        .is_err());
        assert!(same_origin(&HeaderMap::new(), host).is_ok());
    }

    #[test]
    fn sessions_carry_a_csrf_token_and_end() {
        let sessions = Sessions::default();
        let id = sessions.create();
        let h = headers(&[(header::COOKIE, &format!("a=b; {COOKIE}={id}"))]);
        let view = sessions.get(&h).expect("live");
        assert_eq!(view.id, id);
        assert_eq!(view.csrf.len(), 64);
        assert!(is_csrf(Some(&view.csrf), &view));
        assert!(!is_csrf(None, &view));
        assert!(!is_csrf(Some("x"), &view));
        sessions.set_flash(&id, Flash::ok("done"));
        assert_eq!(sessions.take_flash(&id).unwrap().text, "done");
        assert!(sessions.take_flash(&id).is_none());
        sessions.remove(&id);
        assert!(sessions.get(&h).is_none());
        let other = headers(&[(header::COOKIE, &format!("{COOKIE}=nope"))]);
        assert!(sessions.get(&other).is_none());
    }

    #[test]
    fn the_token_compares_trimmed() {
        assert!(is_admin_token("abc\n", "abc"));
        assert!(!is_admin_token("abd", "abc"));
        assert!(!is_admin_token("", "abc"));
    }
}
