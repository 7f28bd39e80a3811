//! One completion across the LLM sources (DESIGN.md "LLM loop"): sources are tried in
//! the pool's order; a source that fails before any output is marked (taken out on
//! 401/403, else cooled down) and the next is tried. A failure after text was already
//! streamed to the client is returned as it is (the client saw part of an answer), and so
//! is a request the API rejected as invalid ([`Failure::InvalidRequest`]): another source
//! would reject it too. The API's errors are read by [`Failure::of`]: an overloaded or
//! rate-limited source — also one that says so inside a stream after HTTP 200 — cools
//! down while the next is tried.
//!
//! Sources at their `max_concurrent`: a request first takes a free slot of the first
//! source in order that has one; when every source is full it waits up to
//! `source_queue_timeout` for each in turn, and then for whichever source frees a slot
//! first. Waiting has no bound of its own: the turn's deadline (`[agent]
//! turn_timeout_s`) and cancellation end it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{
    CompletionRequest, Delta, Failure, LlmClient, LlmError, Source, SourcePool, SourceSlot,
};
use crate::adapters::CompletionResponse;

/// Longest single wait for a slot in the "any source" phase (the caller's deadline or
/// cancellation comes first in practice).
const ANY_SOURCE_WAIT: Duration = Duration::from_secs(24 * 3600);

/// Runs `request` on the pool's sources in order (see the module docs). Deltas go to
/// `on_delta` as they stream. Errors: [`LlmError::NoSource`] when none is configured or
/// usable, [`LlmError::Cancelled`] when `cancel` fires, else the last source's error.
pub async fn complete(
    pool: &SourcePool,
    client: &LlmClient,
    request: &CompletionRequest<'_>,
    on_delta: &mut (dyn FnMut(Delta) + Send),
    cancel: &CancellationToken,
    queue_timeout: Duration,
) -> Result<CompletionResponse, LlmError> {
    let mut remaining = pool.order();
    let mut last = LlmError::NoSource;
    while !remaining.is_empty() {
        let (source, slot) = tokio::select! {
            picked = pick(pool, &remaining, queue_timeout) => picked,
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
        };
        remaining.retain(|s| s.name != source.name);
        let mut emitted = false;
        let result = client
            .complete_request(
                &source,
                request,
                |d| {
                    emitted = true;
                    on_delta(d)
                },
                cancel,
            )
            .await;
        drop(slot);
        match result {
            Ok(r) => {
                pool.succeeded(&source.name);
                return Ok(r);
            }
            Err(LlmError::Cancelled) => return Err(LlmError::Cancelled),
            Err(e) => {
                tracing::warn!("{}", pool.failed(&source.name, &e));
                if emitted || Failure::of(&e) == Failure::InvalidRequest {
                    return Err(e);
                }
                last = e;
            }
        }
    }
    Err(last)
}

/// The source to use among `candidates` (in order) and its slot.
async fn pick(
    pool: &SourcePool,
    candidates: &[Source],
    queue_timeout: Duration,
) -> (Source, SourceSlot) {
    for s in candidates {
        if let Some(slot) = pool.slot(&s.name, Duration::ZERO).await {
            return (s.clone(), slot);
        }
    }
    for s in candidates {
        if let Some(slot) = pool.slot(&s.name, queue_timeout).await {
            return (s.clone(), slot);
        }
        tracing::debug!(source = %s.name, "no LLM slot within {} ms; trying the next source", queue_timeout.as_millis());
    }
    let names: Vec<&str> = candidates.iter().map(|s| s.name.as_str()).collect();
    tracing::warn!(
        "every LLM source is at its max_concurrent; waiting for the first free slot ({})",
        pool.load_report(&names)
    );
    loop {
        let waits = candidates
            .iter()
            .map(|s| Box::pin(async move { (s, pool.slot(&s.name, ANY_SOURCE_WAIT).await) }));
        let ((s, slot), _, _) = futures_util::future::select_all(waits).await;
        if let Some(slot) = slot {
            return (s.clone(), slot);
        }
    }
}
