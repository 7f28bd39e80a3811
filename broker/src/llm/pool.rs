//! The sources in use, their health, and failover (DESIGN.md "LLM loop": sources are
//! tried in priority order; 401/403 takes a source out, other failures put it in a
//! growing cooldown). What a failure means is [`Failure::of`]: the API's own errors are
//! read by status and type, so an overloaded or rate-limited source cools down while the
//! next one is tried, and a request the API rejects as invalid is not retried at all.
//!
//! The order of a request: the source chosen with `SetSource` / `hearth llm use`
//! first, then the others by `priority`; sources taken out are skipped, sources in
//! cooldown are tried only when no other is left (the one whose cooldown ends first).
//!
//! Load: a source with `max_concurrent` N has N slots; a request holds one while it
//! runs ([`SourcePool::slot`]) and waits, in arrival order, when all are taken. The
//! pool counts requests in flight and waiting per source for `hearth llm list`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{LlmError, Source};
use crate::adapters::UpstreamError;

/// First cooldown after a failure; doubles per consecutive failure.
const COOLDOWN_INITIAL: Duration = Duration::from_secs(5);
/// Longest cooldown.
const COOLDOWN_MAX: Duration = Duration::from_secs(300);

/// What a failed request means for its source and for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The source refused the key (401/403, an authentication or permission error): it is
    /// taken out; the next source is tried.
    Auth,
    /// Rate-limited or out of quota (429, `rate_limit_error`, `RESOURCE_EXHAUSTED`): a
    /// cooldown (`Retry-After` when given); the next source is tried.
    RateLimited,
    /// Overloaded or failing (5xx, 529, `overloaded_error`, `UNAVAILABLE`), unreachable, a
    /// broken stream or a failing adapter: a cooldown; the next source is tried.
    Unavailable,
    /// The API rejected the request itself (400, 413, 422, `invalid_request_error`,
    /// `INVALID_ARGUMENT`): not retried anywhere, the source stays healthy.
    InvalidRequest,
}

impl Failure {
    /// Reads `error`: the HTTP status first, then the API's error type and code.
    pub fn of(error: &LlmError) -> Failure {
        match error {
            LlmError::Upstream { error, .. } => Self::of_upstream(error),
            _ => Failure::Unavailable,
        }
    }

    fn of_upstream(e: &UpstreamError) -> Failure {
        match e.status {
            Some(401 | 403) => return Failure::Auth,
            Some(429) => return Failure::RateLimited,
            Some(s) if s >= 500 => return Failure::Unavailable,
            _ => {}
        }
        let kind = e.kind.to_ascii_lowercase();
        let code = e.code.to_ascii_lowercase();
        let named = |names: &[&str]| names.iter().any(|n| kind == *n || code == *n);
        if named(&[
            "authentication_error",
            "permission_error",
            "unauthenticated",
            "permission_denied",
            "invalid_api_key",
        ]) {
            Failure::Auth
        } else if named(&[
            "rate_limit_error",
            "rate_limit_exceeded",
            "resource_exhausted",
            "insufficient_quota",
        ]) {
            Failure::RateLimited
        } else if named(&[
            "overloaded_error",
            "api_error",
            "server_error",
            "unavailable",
            "internal",
            "service_unavailable",
        ]) {
            Failure::Unavailable
        } else if matches!(e.status, Some(400 | 413 | 422))
            || named(&[
                "invalid_request_error",
                "invalid_argument",
                "request_too_large",
            ])
        {
            Failure::InvalidRequest
        } else {
            Failure::Unavailable
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Health {
    /// Taken out (auth failure), with the reason.
    out: Option<String>,
    cooldown_until: Option<Instant>,
    failures: u32,
    last_error: String,
}

/// A source and how it is doing, as `hearth llm list` shows it.
#[derive(Debug, Clone)]
pub struct SourceStatus {
    /// The source.
    pub source: Source,
    /// Chosen with `SetSource`.
    pub current: bool,
    /// "ok", "cooldown" or "out".
    pub state: &'static str,
    /// Remaining cooldown.
    pub cooldown: Option<Duration>,
    /// Consecutive failures.
    pub failures: u32,
    /// The last error, empty when none.
    pub last_error: String,
    /// Requests in flight to it.
    pub in_flight: u32,
    /// Requests waiting for one of its `max_concurrent` slots.
    pub waiting: u32,
}

/// One source's load: its slots (when it has `max_concurrent`) and counters.
#[derive(Debug, Default)]
struct Load {
    slots: Option<Arc<Semaphore>>,
    in_flight: Arc<AtomicU32>,
    waiting: AtomicU32,
}

/// A request's hold on a source: counts as in flight until dropped, and holds one of
/// the source's `max_concurrent` slots when it has a limit.
#[derive(Debug)]
pub struct SourceSlot {
    _permit: Option<OwnedSemaphorePermit>,
    in_flight: Arc<AtomicU32>,
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a waiter while it lives.
struct Waiting<'a>(&'a AtomicU32);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sources with their health and load.
#[derive(Debug)]
pub struct SourcePool {
    sources: Vec<Source>,
    state: Mutex<(Option<String>, Vec<Health>)>,
    load: Vec<Load>,
}

impl SourcePool {
    /// A pool of `sources` (sorted by priority already).
    pub fn new(sources: Vec<Source>) -> SourcePool {
        let n = sources.len();
        let load = sources
            .iter()
            .map(|s| Load {
                slots: (s.max_concurrent > 0)
                    .then(|| Arc::new(Semaphore::new(s.max_concurrent as usize))),
                ..Load::default()
            })
            .collect();
        SourcePool {
            sources,
            state: Mutex::new((None, vec![Health::default(); n])),
            load,
        }
    }

    /// A slot of source `name`: at once when it has no limit or a free slot, else the
    /// first one freed within `wait` (waiters are served in arrival order). `None`
    /// when `wait` passed (or the source is unknown).
    pub async fn slot(&self, name: &str, wait: Duration) -> Option<SourceSlot> {
        let load = &self.load[self.index(name)?];
        let permit = match &load.slots {
            None => None,
            Some(slots) => match slots.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) if wait.is_zero() => return None,
                Err(_) => {
                    load.waiting.fetch_add(1, Ordering::Relaxed);
                    let _waiting = Waiting(&load.waiting);
                    match tokio::time::timeout(wait, slots.clone().acquire_owned()).await {
                        Ok(Ok(p)) => Some(p),
                        _ => return None,
                    }
                }
            },
        };
        load.in_flight.fetch_add(1, Ordering::Relaxed);
        Some(SourceSlot {
            _permit: permit,
            in_flight: load.in_flight.clone(),
        })
    }

    /// One line per source of `names` on its load, for errors: `a: 4 in flight (max
    /// 4), 7 waiting`.
    pub fn load_report(&self, names: &[&str]) -> String {
        names
            .iter()
            .filter_map(|n| {
                let i = self.index(n)?;
                let l = &self.load[i];
                Some(format!(
                    "{n}: {} in flight (max_concurrent {}), {} waiting",
                    l.in_flight.load(Ordering::Relaxed),
                    self.sources[i].max_concurrent,
                    l.waiting.load(Ordering::Relaxed)
                ))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Names of every source, in priority order.
    pub fn names(&self) -> Vec<String> {
        self.sources.iter().map(|s| s.name.clone()).collect()
    }

    /// The source requests go to first: the chosen one, else the first by priority
    /// that is not out. Empty when there is none.
    pub fn current(&self) -> String {
        self.order()
            .first()
            .map(|s| s.name.clone())
            .unwrap_or_default()
    }

    /// Chooses `name` to go first (and brings it back if it was taken out). Errors
    /// name the unknown source and the known ones.
    pub fn set_current(&self, name: &str) -> Result<(), String> {
        let Some(i) = self.sources.iter().position(|s| s.name == name) else {
            return Err(format!(
                "unknown LLM source `{name}` (known: {})",
                self.names().join(", ")
            ));
        };
        let mut state = self.state.lock().unwrap();
        state.0 = Some(name.to_string());
        state.1[i] = Health::default();
        Ok(())
    }

    /// Sources in the order a request tries them (see the module docs).
    pub fn order(&self) -> Vec<Source> {
        let state = self.state.lock().unwrap();
        let now = Instant::now();
        let mut ready = Vec::new();
        let mut cooling: Vec<(Instant, usize)> = Vec::new();
        for (i, h) in state.1.iter().enumerate() {
            if h.out.is_some() {
                continue;
            }
            match h.cooldown_until {
                Some(t) if t > now => cooling.push((t, i)),
                _ => ready.push(i),
            }
        }
        if let Some(cur) = &state.0 {
            if let Some(pos) = ready.iter().position(|&i| &self.sources[i].name == cur) {
                let i = ready.remove(pos);
                ready.insert(0, i);
            }
        }
        cooling.sort();
        if ready.is_empty() {
            ready.extend(cooling.first().map(|&(_, i)| i));
        }
        ready.into_iter().map(|i| self.sources[i].clone()).collect()
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.sources.iter().position(|s| s.name == name)
    }

    /// A request to `name` succeeded: its failures are forgotten.
    pub fn succeeded(&self, name: &str) {
        if let Some(i) = self.index(name) {
            let mut state = self.state.lock().unwrap();
            let h = &mut state.1[i];
            h.failures = 0;
            h.cooldown_until = None;
        }
    }

    /// A request to `name` failed with `error` ([`Failure::of`]): an auth failure takes it
    /// out; an invalid request leaves it as it is (the request was wrong, not the
    /// source); anything else starts a cooldown (`Retry-After` when the API gave one,
    /// else 5 s doubling per consecutive failure up to 5 min). Returns the log line.
    pub fn failed(&self, name: &str, error: &LlmError) -> String {
        let Some(i) = self.index(name) else {
            return String::new();
        };
        let mut state = self.state.lock().unwrap();
        let h = &mut state.1[i];
        h.last_error = error.to_string();
        match Failure::of(error) {
            Failure::Auth => {
                h.failures += 1;
                h.out = Some(error.to_string());
                format!("LLM source {name} taken out (authentication failed): {error}")
            }
            Failure::InvalidRequest => {
                format!("LLM source {name} rejected the request (not retried): {error}")
            }
            Failure::RateLimited | Failure::Unavailable => {
                h.failures += 1;
                let retry_after = match error {
                    LlmError::Upstream { error, .. } => error.retry_after_s,
                    _ => None,
                };
                let cooldown = match retry_after {
                    Some(s) => Duration::from_secs(s),
                    None => {
                        (COOLDOWN_INITIAL * 2u32.saturating_pow(h.failures - 1)).min(COOLDOWN_MAX)
                    }
                };
                h.cooldown_until = Some(Instant::now() + cooldown);
                format!(
                    "LLM source {name} failed ({error}); cooling down for {} s",
                    cooldown.as_secs()
                )
            }
        }
    }

    /// Every source with its health.
    pub fn statuses(&self) -> Vec<SourceStatus> {
        let state = self.state.lock().unwrap();
        let now = Instant::now();
        self.sources
            .iter()
            .zip(&state.1)
            .zip(&self.load)
            .map(|((s, h), l)| {
                let cooldown = h.cooldown_until.filter(|t| *t > now).map(|t| t - now);
                SourceStatus {
                    in_flight: l.in_flight.load(Ordering::Relaxed),
                    waiting: l.waiting.load(Ordering::Relaxed),
                    source: s.clone(),
                    current: state.0.as_deref() == Some(s.name.as_str()),
                    state: if h.out.is_some() {
                        "out"
                    } else if cooldown.is_some() {
                        "cooldown"
                    } else {
                        "ok"
                    },
                    cooldown,
                    failures: h.failures,
                    last_error: h.last_error.clone(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str) -> Source {
        Source {
            name: name.into(),
            base_url: "http://x".into(),
            model: String::new(),
            api_key: None,
            api_key_env: None,
            adapter: "openai".into(),
            priority: 0,
            timeout: Duration::from_secs(1),
            max_concurrent: 0,
        }
    }

    fn status(code: u16, retry: Option<u64>) -> LlmError {
        upstream(Some(code), "", "", retry)
    }

    fn upstream(status: Option<u16>, kind: &str, code: &str, retry: Option<u64>) -> LlmError {
        let mut error = UpstreamError::message("m");
        error.status = status;
        error.kind = kind.into();
        error.code = code.into();
        error.retry_after_s = retry;
        LlmError::Upstream {
            source_name: "x".into(),
            url: "u".into(),
            error: Box::new(error),
        }
    }

    /// The captures in `../shared/wire` (and the statuses around them), read by status
    /// first, then type and code.
    #[test]
    fn failures_read_the_apis_errors() {
        use Failure::*;
        for (error, want) in [
            // anthropic overloaded: as a 529, and as an error event after 200 (no status).
            (
                upstream(Some(529), "overloaded_error", "", None),
                Unavailable,
            ),
            (upstream(None, "overloaded_error", "", None), Unavailable),
            (upstream(None, "rate_limit_error", "", None), RateLimited),
            (
                upstream(Some(400), "invalid_request_error", "", None),
                InvalidRequest,
            ),
            (
                upstream(None, "invalid_request_error", "", None),
                InvalidRequest,
            ),
            // groq's tool_use_failed event names its status.
            (
                upstream(Some(400), "invalid_request_error", "tool_use_failed", None),
                InvalidRequest,
            ),
            // gemini
            (
                upstream(Some(429), "RESOURCE_EXHAUSTED", "", Some(35)),
                RateLimited,
            ),
            (upstream(None, "RESOURCE_EXHAUSTED", "", None), RateLimited),
            (
                upstream(Some(400), "INVALID_ARGUMENT", "", None),
                InvalidRequest,
            ),
            (upstream(Some(503), "UNAVAILABLE", "", None), Unavailable),
            // openai quota (429 whatever the type), a 401 that says invalid_request_error.
            (
                upstream(Some(429), "insufficient_quota", "insufficient_quota", None),
                RateLimited,
            ),
            (upstream(Some(401), "invalid_request_error", "", None), Auth),
            (upstream(None, "authentication_error", "", None), Auth),
            // ollama's bare error line: nothing to read but the message.
            (upstream(None, "", "", None), Unavailable),
            (upstream(Some(404), "", "", None), Unavailable),
            (upstream(Some(422), "", "", None), InvalidRequest),
            (LlmError::Cancelled, Unavailable),
        ] {
            assert_eq!(Failure::of(&error), want, "{error}");
        }
        // An invalid request leaves the source as it was.
        let p = SourcePool::new(vec![source("a"), source("b")]);
        let line = p.failed("a", &upstream(Some(400), "invalid_request_error", "", None));
        assert!(
            line.contains("rejected the request (not retried)"),
            "{line}"
        );
        assert_eq!(names(&p), ["a", "b"]);
        assert_eq!(p.statuses()[0].state, "ok");
        // Overloaded after 200: a cooldown; a body's retry delay is honoured.
        assert!(p
            .failed("a", &upstream(None, "overloaded_error", "", None))
            .contains("5 s"));
        assert!(p
            .failed(
                "b",
                &upstream(Some(429), "RESOURCE_EXHAUSTED", "", Some(35))
            )
            .contains("35 s"));
    }

    fn names(p: &SourcePool) -> Vec<String> {
        p.order().into_iter().map(|s| s.name).collect()
    }

    #[test]
    fn auth_failures_take_a_source_out_and_others_cool_down() {
        let p = SourcePool::new(vec![source("a"), source("b"), source("c")]);
        assert_eq!(names(&p), ["a", "b", "c"]);
        assert!(p.failed("a", &status(401, None)).contains("taken out"));
        assert!(p
            .failed("b", &status(500, None))
            .contains("cooling down for 5 s"));
        assert_eq!(names(&p), ["c"]);
        assert!(p.failed("c", &status(429, Some(30))).contains("30 s"));
        // Only cooling sources left: the one whose cooldown ends first.
        assert_eq!(names(&p), ["b"]);
        p.succeeded("b");
        assert_eq!(names(&p), ["b"]);
        assert!(p.failed("b", &status(503, None)).contains("5 s"));
        assert!(p.failed("b", &status(503, None)).contains("10 s"));
        // Choosing a source brings it back and puts it first.
        p.set_current("a").unwrap();
        assert_eq!(names(&p)[0], "a");
        assert!(p.set_current("zz").unwrap_err().contains("known: a, b, c"));
    }

    #[tokio::test]
    async fn slots_cap_requests_in_flight_and_count_waiters() {
        let mut limited = source("a");
        limited.max_concurrent = 2;
        let p = Arc::new(SourcePool::new(vec![limited, source("b")]));
        let one = p.slot("a", Duration::ZERO).await.unwrap();
        let _two = p.slot("a", Duration::ZERO).await.unwrap();
        assert!(p.slot("a", Duration::ZERO).await.is_none());
        // A waiter is counted, and served when a slot frees.
        let waiter = {
            let p = p.clone();
            tokio::spawn(async move { p.slot("a", Duration::from_secs(10)).await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let a = &p.statuses()[0];
        assert_eq!((a.in_flight, a.waiting), (2, 1));
        drop(one);
        assert!(waiter.await.unwrap());
        // The waiter's task ended and let its slot go.
        let a = &p.statuses()[0];
        assert_eq!((a.in_flight, a.waiting), (1, 0));
        let _three = p.slot("a", Duration::ZERO).await.unwrap();
        // A wait that passes gives no slot; an unlimited source always has one.
        assert!(p.slot("a", Duration::from_millis(50)).await.is_none());
        assert_eq!(p.statuses()[0].waiting, 0);
        let _b: Vec<_> =
            futures_util::future::join_all((0..10).map(|_| p.slot("b", Duration::ZERO))).await;
        assert_eq!(p.statuses()[1].in_flight, 10);
    }
}
