//! The stream of messages to a plugin, batched when the plugin reads batches.
//!
//! A plugin whose `Hello` lists the feature `"batch"` reads `HostBatch`: several
//! messages in one gRPC message. Once the session agreed on it (the broker sets
//! [`Batching`] just before `Registered`), [`Outbound::poll_next`] sends every
//! message that is already queued when the stream is polled in one `HostBatch` — up
//! to [`MAX_MSGS`] messages and [`MAX_BYTES`] bytes — so 16 calls started together
//! cost the plugin one read, not 16. A lone message goes as it is, so one call in
//! flight has no extra cost, and nothing ever waits for a batch to fill.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use hearth_proto::v1::{host_message::Msg as HostMsg, HostBatch, HostMessage};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::Status;

/// Most messages in one `HostBatch`.
pub const MAX_MSGS: usize = 64;
/// Most bytes (encoded) in one `HostBatch`; a larger message always goes alone.
pub const MAX_BYTES: usize = 256 * 1024;

/// Whether the session sends batches: false until the handshake agreed on `"batch"`.
pub type Batching = Arc<AtomicBool>;

type Item = Result<HostMessage, Status>;

/// The session's outbound stream (what `PluginHost.Attach` returns).
pub struct Outbound {
    rx: mpsc::Receiver<Item>,
    batching: Batching,
    /// A message taken from `rx` that did not fit in the last batch.
    held: Option<Item>,
}

impl Outbound {
    /// Messages of `rx`, batched once `batching` is set.
    pub fn new(rx: mpsc::Receiver<Item>, batching: Batching) -> Outbound {
        Outbound {
            rx,
            batching,
            held: None,
        }
    }

    /// The next queued message, without waiting.
    fn ready(&mut self) -> Option<Item> {
        self.held.take().or_else(|| self.rx.try_recv().ok())
    }
}

impl Stream for Outbound {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let this = &mut *self;
        let first = match this.held.take() {
            Some(item) => item,
            None => match ready!(this.rx.poll_recv(cx)) {
                Some(item) => item,
                None => return Poll::Ready(None),
            },
        };
        let first = match first {
            Ok(m) if this.batching.load(Ordering::Relaxed) => m,
            other => return Poll::Ready(Some(other)),
        };
        // Nothing else ready (one call in flight): the message as it is, unmeasured.
        let mut next = match this.ready() {
            None => return Poll::Ready(Some(Ok(first))),
            Some(Ok(m)) => Some(m),
            Some(end) => {
                // The end of the session: after this message.
                this.held = Some(end);
                return Poll::Ready(Some(Ok(first)));
            }
        };
        let mut size = first.encoded_len();
        let mut msgs = vec![first];
        while let Some(m) = next.take() {
            let len = m.encoded_len();
            if size + len > MAX_BYTES {
                this.held = Some(Ok(m));
                break;
            }
            size += len;
            msgs.push(m);
            if msgs.len() == MAX_MSGS {
                break;
            }
            match this.ready() {
                Some(Ok(m)) => next = Some(m),
                Some(end) => this.held = Some(end),
                None => {}
            }
        }
        if msgs.len() == 1 {
            return Poll::Ready(Some(Ok(msgs.remove(0))));
        }
        Poll::Ready(Some(Ok(HostMessage {
            msg: Some(HostMsg::Batch(HostBatch { msgs })),
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_proto::v1::{Cancel, Ping};
    use tokio_stream::StreamExt;

    fn ping(nonce: u64) -> Item {
        Ok(HostMessage {
            msg: Some(HostMsg::Ping(Ping { nonce })),
        })
    }

    fn nonces(m: &HostMessage) -> Vec<u64> {
        match &m.msg {
            Some(HostMsg::Ping(p)) => vec![p.nonce],
            Some(HostMsg::Batch(b)) => b.msgs.iter().flat_map(nonces).collect(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn queued_messages_go_in_order_in_batches_only_once_agreed() {
        let (tx, rx) = mpsc::channel(1024);
        let batching = Batching::default();
        let mut out = Outbound::new(rx, batching.clone());
        for n in 0..3 {
            tx.send(ping(n)).await.unwrap();
        }
        // Not agreed yet: one by one.
        for n in 0..3 {
            let m = out.next().await.unwrap().unwrap();
            assert!(matches!(m.msg, Some(HostMsg::Ping(_))), "{m:?}");
            assert_eq!(nonces(&m), vec![n]);
        }
        batching.store(true, Ordering::Relaxed);
        // A lone message is not wrapped.
        tx.send(ping(3)).await.unwrap();
        let m = out.next().await.unwrap().unwrap();
        assert!(matches!(m.msg, Some(HostMsg::Ping(_))));
        // 150 queued: batches of MAX_MSGS, in order, nothing lost.
        for n in 4..154 {
            tx.send(ping(n)).await.unwrap();
        }
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        while seen.len() < 150 {
            let m = out.next().await.unwrap().unwrap();
            let got = nonces(&m);
            sizes.push(got.len());
            seen.extend(got);
        }
        assert_eq!(seen, (4..154).collect::<Vec<_>>());
        assert_eq!(sizes, vec![MAX_MSGS, MAX_MSGS, 150 - 2 * MAX_MSGS]);
    }

    #[tokio::test]
    async fn large_messages_go_alone_and_the_end_comes_after_the_batch() {
        let (tx, rx) = mpsc::channel(16);
        let mut out = Outbound::new(rx, Arc::new(AtomicBool::new(true)));
        let big = |n: u64| {
            Ok(HostMessage {
                msg: Some(HostMsg::Cancel(Cancel {
                    call_id: n,
                    reason: "x".repeat(MAX_BYTES / 2),
                })),
            })
        };
        tx.send(ping(1)).await.unwrap();
        tx.send(big(2)).await.unwrap();
        tx.send(big(3)).await.unwrap();
        tx.send(Err(Status::cancelled("bye"))).await.unwrap();
        drop(tx);
        let call_ids = |m: &HostMessage| -> Vec<u64> {
            match &m.msg {
                Some(HostMsg::Batch(b)) => b
                    .msgs
                    .iter()
                    .map(|m| match &m.msg {
                        Some(HostMsg::Ping(p)) => p.nonce,
                        Some(HostMsg::Cancel(c)) => c.call_id,
                        _ => 0,
                    })
                    .collect(),
                Some(HostMsg::Cancel(c)) => vec![c.call_id],
                _ => vec![0],
            }
        };
        let first = out.next().await.unwrap().unwrap();
        assert_eq!(
            call_ids(&first),
            vec![1, 2],
            "ping and one half-size message fit"
        );
        assert!(first.encoded_len() <= MAX_BYTES + 64);
        let second = out.next().await.unwrap().unwrap();
        assert_eq!(call_ids(&second), vec![3]);
        assert!(
            matches!(second.msg, Some(HostMsg::Cancel(_))),
            "alone, not wrapped"
        );
        let end = out.next().await.unwrap();
        assert_eq!(end.unwrap_err().message(), "bye");
        assert!(out.next().await.is_none());
    }
}
