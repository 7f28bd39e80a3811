//! A refused `PluginHost.Attach` answered after the plugin's handshake writes, so the
//! plugin sees the refusal and not a transport error.
//!
//! A plugin writes `Hello` and `Register` as soon as it opens its session. A refusal
//! (a wrong, stale or admin token; a used attach token) is a trailers-only response,
//! and when it arrives while one of those writes is still in flight, Python's
//! grpcio (asyncio) replaces the broker's status by "INTERNAL: Internal error from
//! Core" (measured: 4 runs in 10 with a wrong token). So a refusal waits until the
//! handshake's two messages have arrived (or [`DRAIN_WAIT`] passed, or
//! [`DRAIN_BYTES`] were read), reading them as raw gRPC frames and throwing them
//! away: nothing of an unauthenticated caller is decoded or kept, as with the
//! interceptors (`PluginAuth`) that refuse before the body is read.
//!
//! [`SessionGate`] wraps the whole `PluginHost` service (interceptor included): the
//! request body goes in wrapped, and when the answer is a refusal the gate takes the
//! body back from wherever it was dropped and reads the rest of the handshake.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::{http, Bytes, Service};
use tonic::server::NamedService;

/// Messages a plugin writes before it waits for the broker: `Hello`, `Register`.
const HANDSHAKE_MESSAGES: u32 = 2;
/// Longest wait for the handshake of a refused session.
const DRAIN_WAIT: Duration = Duration::from_secs(1);
/// Most bytes read (and dropped) from a refused session.
const DRAIN_BYTES: u64 = 16 * 1024 * 1024;

/// Counts complete gRPC messages (5-byte prefix: flag, big-endian length) in a
/// byte stream without keeping them.
#[derive(Debug, Default, Clone, Copy)]
struct Frames {
    /// Prefix bytes of the current message seen so far (0–5).
    prefix: [u8; 5],
    prefix_len: usize,
    /// Payload bytes of the current message still to come.
    payload_left: u64,
    /// Messages complete.
    messages: u32,
    /// Bytes seen.
    bytes: u64,
}

impl Frames {
    fn feed(&mut self, mut data: &[u8]) {
        self.bytes += data.len() as u64;
        while !data.is_empty() {
            if self.prefix_len < 5 {
                let take = (5 - self.prefix_len).min(data.len());
                self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
                self.prefix_len += take;
                data = &data[take..];
                if self.prefix_len == 5 {
                    let len = u32::from_be_bytes(self.prefix[1..5].try_into().unwrap());
                    self.payload_left = len.into();
                    if len == 0 {
                        self.message_done();
                    }
                }
                continue;
            }
            let take = (self.payload_left as usize).min(data.len());
            self.payload_left -= take as u64;
            data = &data[take..];
            if self.payload_left == 0 {
                self.message_done();
            }
        }
    }

    fn message_done(&mut self) {
        self.messages += 1;
        self.prefix_len = 0;
        self.payload_left = 0;
    }

    fn handshake_done(&self) -> bool {
        self.messages >= HANDSHAKE_MESSAGES || self.bytes >= DRAIN_BYTES
    }
}

/// The request body as the service sees it: counts the messages passing through and,
/// when dropped unfinished, hands itself back to the gate that is waiting for it.
struct Watched {
    inner: Option<Body>,
    frames: Frames,
    back: Option<tokio::sync::oneshot::Sender<(Body, Frames)>>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let (Some(body), Some(back)) = (self.inner.take(), self.back.take()) {
            if !tonic::codegen::Body::is_end_stream(&body) {
                let _ = back.send((body, self.frames));
            }
        }
    }
}

impl tonic::codegen::Body for Watched {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        // Only a refusal reads the count, and a refusal comes before the handshake is
        // through: a session's later messages pass without being counted.
        if this.frames.messages < HANDSHAKE_MESSAGES {
            if let Poll::Ready(Some(Ok(frame))) = &polled {
                if let Some(data) = frame.data_ref() {
                    this.frames.feed(data);
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(tonic::codegen::Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner
            .as_ref()
            .map(tonic::codegen::Body::size_hint)
            .unwrap_or_default()
    }
}

/// Reads and drops what is left of a refused session's handshake (module docs).
async fn drain(mut body: Body, mut frames: Frames, until: tokio::time::Instant) {
    let read = async {
        while !frames.handshake_done() {
            let next = std::future::poll_fn(|cx| {
                tonic::codegen::Body::poll_frame(Pin::new(&mut body), cx)
            })
            .await;
            match next {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        frames.feed(data);
                    }
                }
                Some(Err(_)) | None => return,
            }
        }
    };
    let _ = tokio::time::timeout_at(until, read).await;
}

/// Whether `response` refuses the call: a trailers-only response (its status in the
/// headers) with a code other than OK.
fn refused<B>(response: &http::Response<B>) -> bool {
    response
        .headers()
        .get("grpc-status")
        .is_some_and(|code| code.as_bytes() != b"0")
}

/// Wraps the `PluginHost` service (module docs).
#[derive(Debug, Clone)]
pub struct SessionGate<S> {
    inner: S,
}

impl<S> SessionGate<S> {
    /// Gates `inner`.
    pub fn new(inner: S) -> SessionGate<S> {
        SessionGate { inner }
    }
}

impl<S: NamedService> NamedService for SessionGate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<Body>> for SessionGate<S>
where
    S: Service<http::Request<Body>, Response = http::Response<B>, Error = Infallible>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<B>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let (back, taken) = tokio::sync::oneshot::channel();
        let request = request.map(|body| {
            Body::new(Watched {
                inner: Some(body),
                frames: Frames::default(),
                back: Some(back),
            })
        });
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            if refused(&response) {
                // The service dropped the body with its refusal (a body kept alive
                // elsewhere is not waited for beyond DRAIN_WAIT).
                let started = tokio::time::Instant::now();
                if let Ok(Ok((body, frames))) = tokio::time::timeout(DRAIN_WAIT, taken).await {
                    drain(body, frames, started + DRAIN_WAIT).await;
                }
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len as usize));
        m
    }

    #[test]
    fn counts_messages_across_any_split() {
        let mut bytes = message(3);
        bytes.extend(message(0));
        bytes.extend(message(70_000));
        for split in [1, 2, 4, 5, 6, 7, 4096] {
            let mut f = Frames::default();
            for chunk in bytes.chunks(split) {
                f.feed(chunk);
            }
            assert_eq!(f.messages, 3, "split {split}");
            assert_eq!(f.bytes, bytes.len() as u64);
        }
        let mut f = Frames::default();
        f.feed(&message(10)[..9]);
        assert_eq!(f.messages, 0);
        assert!(!f.handshake_done());
    }
}
