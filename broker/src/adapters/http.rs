//! `http_get` / `http_post` for adapter scripts: a bounded, blocking HTTP call that is
//! safe to make from any thread, inside a tokio runtime or not.
//!
//! The request runs on a short-lived helper thread with its own current-thread runtime,
//! so it never blocks inside (or drops a runtime inside) the caller's async context. The
//! calling thread waits for it: through `tokio::task::block_in_place` on a multi-thread
//! runtime's worker (other tasks move to other workers meanwhile), plainly elsewhere. On a
//! current-thread runtime the wait stalls that runtime for up to the timeout: adapters
//! should call out rarely (e.g. to fetch a token), never per chunk.

use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};

/// The two methods scripts can use.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Method {
    Get,
    Post,
}

/// Fetches `url`; returns the body text of a 2xx response. Anything else (bad URL, not
/// http(s), connect error, timeout, non-2xx status, body over `max_body` bytes) is an
/// error message naming the method and URL. `http_post` sends `Content-Type:
/// application/json`.
pub(crate) fn fetch(
    method: Method,
    url: &str,
    body: Option<Vec<u8>>,
    timeout: Duration,
    max_body: usize,
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

    let job = move || -> Result<String, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        rt.block_on(async move {
            let client = reqwest::Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout)
                .build()
                .map_err(|e| e.to_string())?;
            let request = match method {
                Method::Get => client.get(parsed),
                Method::Post => client
                    .post(parsed)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.unwrap_or_default()),
            };
            let mut response = request.send().await.map_err(|e| describe(&e))?;
            let status = response.status();
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
