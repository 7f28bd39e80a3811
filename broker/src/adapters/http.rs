//! `http_get` / `http_post` for adapter scripts: a bounded, blocking HTTP call that is
//! safe to make from any thread, inside a tokio runtime or not.
//!
//! The request runs on a short-lived helper thread with its own current-thread runtime,
//! so it never blocks inside (or drops a runtime inside) the caller's async context. The
//! calling thread waits for it: through `tokio::task::block_in_place` on a multi-thread
//! runtime's worker (other tasks move to other workers meanwhile), plainly elsewhere. On a
//! current-thread runtime the wait stalls that runtime for up to the timeout: adapters
//! should call out rarely (e.g. to fetch a token), never per chunk. (The broker calls
//! scripts on VM threads of their own, see `pool.rs`, so the wait is a plain one there.)
//!
//! # Where a script may call
//! - By default only the host and port of the LLM source the adapter is serving in this
//!   call (its `base_url`); more through `[adapters] http_allow = ["host:port", …]` in
//!   hearth.toml ([`HostPort`]). Anything else is refused, naming the host and the setting.
//! - A loopback, LAN, link-local or otherwise non-public address — an IP literal, or what a
//!   name resolves to — is refused unless that `host:port` is listed in `http_allow`: being
//!   the source's host is not enough (a name can be made to resolve to `169.254.169.254`).
//!   The connection goes to exactly the addresses that were checked.
//! - Redirects are not followed: a 3xx is an error naming its `Location`.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};

/// The two methods scripts can use.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Method {
    Get,
    Post,
}

/// A host and port adapter scripts may reach: an entry of `[adapters] http_allow` in
/// hearth.toml (`"api.example.com:443"`, `"10.0.0.5:8080"`, `"[fd00::1]:80"`), or the host
/// of the source an adapter serves. Names compare lower-cased, as URLs carry them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// As a URL's host: a lower-cased name, an IPv4 address, or an IPv6 one in brackets.
    host: String,
    port: u16,
}

impl HostPort {
    /// The host and port of `url` (the scheme's default port when it names none); `None`
    /// when it is not a URL with a host.
    pub fn of_url(url: &str) -> Option<HostPort> {
        Self::of_parsed(&reqwest::Url::parse(url).ok()?)
    }

    fn of_parsed(url: &reqwest::Url) -> Option<HostPort> {
        Some(HostPort {
            host: url.host_str().filter(|h| !h.is_empty())?.to_owned(),
            port: url.port_or_known_default()?,
        })
    }

    /// The address, when the host is an IP literal.
    fn ip(&self) -> Option<IpAddr> {
        self.host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok()
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// `host:port`; the port is required (`example.com` alone is an error that says so).
impl FromStr for HostPort {
    type Err = String;

    fn from_str(entry: &str) -> Result<HostPort, String> {
        let entry = entry.trim();
        let bad =
            |why: &str| format!("`{entry}`: {why} (expected host:port, e.g. api.example.com:443)");
        let (host, port) = entry.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if host.is_empty() || host.contains('/') || (host.contains(':') && !host.starts_with('[')) {
            return Err(bad("not a host"));
        }
        let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
        let url = reqwest::Url::parse(&format!("http://{host}:{port}/"))
            .map_err(|e| bad(&format!("not a host: {e}")))?;
        let host = url.host_str().ok_or_else(|| bad("not a host"))?.to_owned();
        Ok(HostPort { host, port })
    }
}

/// Where one call may go: the host of the source the adapter serves (if any) and the
/// `[adapters] http_allow` entries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub(crate) source: Option<&'a HostPort>,
    pub(crate) allow: &'a [HostPort],
}

/// Whether `ip` is a public unicast address; loopback, private (LAN), link-local, shared
/// (CGNAT), unspecified, multicast, documentation and reserved ranges are not.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (18..20).contains(&b)))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            // NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits.
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [_, _, _, _, _, _, hi, lo] = s;
                return is_public(IpAddr::V4(std::net::Ipv4Addr::from(
                    (u32::from(hi) << 16) | u32::from(lo),
                )));
            }
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                || s[..6] == [0, 0, 0, 0, 0, 0])
        }
    }
}

/// The error for a destination that is not public and not listed in `http_allow`.
fn not_public(target: &HostPort, ip: IpAddr) -> String {
    let what = match target.ip() {
        Some(_) => format!("host {target} is a loopback, LAN, link-local or reserved address"),
        None => format!(
            "host {target} resolves to {ip}, a loopback, LAN, link-local or reserved address"
        ),
    };
    format!("{what}: refused unless listed in `[adapters] http_allow` in hearth.toml (add \"{target}\")")
}

/// Fetches `url`; returns the body text of a 2xx response. Anything else (bad URL, not
/// http(s), a host `scope` does not allow, connect error, timeout, a redirect, non-2xx
/// status, body over `max_body` bytes) is an error message naming the method and URL.
/// `http_post` sends `Content-Type: application/json`.
pub(crate) fn fetch(
    method: Method,
    url: &str,
    body: Option<Vec<u8>>,
    timeout: Duration,
    max_body: usize,
    scope: Scope<'_>,
) -> Result<String, String> {
    let name = match method {
        Method::Get => "http_get",
        Method::Post => "http_post",
    };
    let fail = |what: String| format!("{name} {url}: {what}");
    let parsed = reqwest::Url::parse(url).map_err(|e| fail(format!("invalid URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(fail("only http and https URLs are allowed".to_owned()));
    }
    let target =
        HostPort::of_parsed(&parsed).ok_or_else(|| fail("the URL has no host".to_owned()))?;
    let listed = scope.allow.contains(&target);
    if !listed && scope.source != Some(&target) {
        let allowed = match scope.source {
            Some(source) => format!("the host of the source this adapter serves ({source}) and the entries of `[adapters] http_allow` in hearth.toml"),
            None => "the entries of `[adapters] http_allow` in hearth.toml (this call serves no source)".to_owned(),
        };
        return Err(fail(format!(
            "host {target} is not allowed: scripts may reach {allowed}"
        )));
    }
    let literal = target.ip();
    if let Some(ip) = literal.filter(|ip| !listed && !is_public(*ip)) {
        return Err(fail(not_public(&target, ip)));
    }

    let job = move || -> Result<String, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        rt.block_on(async move {
            let mut client = reqwest::Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout)
                .redirect(reqwest::redirect::Policy::none());
            if literal.is_none() {
                // Resolve here, check every address, and connect only to those.
                let lookup = tokio::net::lookup_host((target.host.as_str(), target.port));
                let addrs: Vec<SocketAddr> = tokio::time::timeout(timeout, lookup)
                    .await
                    .map_err(|_| format!("resolving {} timed out", target.host))?
                    .map_err(|e| format!("cannot resolve {}: {e}", target.host))?
                    .collect();
                if !listed {
                    if let Some(a) = addrs.iter().find(|a| !is_public(a.ip())) {
                        return Err(not_public(&target, a.ip()));
                    }
                }
                client = client.resolve_to_addrs(&target.host, &addrs);
            }
            let client = client.build().map_err(|e| e.to_string())?;
            let request = match method {
                Method::Get => client.get(parsed),
                Method::Post => client
                    .post(parsed)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.unwrap_or_default()),
            };
            let mut response = request.send().await.map_err(|e| describe(&e))?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned())
                    .unwrap_or_else(|| "(no Location)".to_owned());
                return Err(format!(
                    "HTTP {status}: redirect to {location} not followed (adapter scripts' HTTP calls follow no redirects)"
                ));
            }
            let mut buf = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e))? {
                if buf.len() + chunk.len() > max_body {
                    return Err(format!("response body larger than {max_body} bytes"));
                }
                buf.extend_from_slice(&chunk);
            }
            let text = String::from_utf8_lossy(&buf).into_owned();
            if !status.is_success() {
                let snippet: String = text.chars().take(300).collect();
                return Err(format!("HTTP {status}: {snippet}"));
            }
            Ok(text)
        })
    };

    let thread = std::thread::Builder::new()
        .name("hearth-adapter-http".to_owned())
        .spawn(job)
        .map_err(|e| fail(format!("cannot start the request thread: {e}")))?;
    let wait = move || {
        thread
            .join()
            .unwrap_or_else(|_| Err("the request thread panicked".to_owned()))
    };
    let result = match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    };
    result.map_err(fail)
}

/// reqwest's error with its causes (the top level alone says little: "error sending request").
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
