//! A response body sent within the bytes-a-second budget every anonymous answer shares
//! ([`crate::rate_limit::BytePacer`], `connections.anonymous_bytes_per_sec`).
//!
//! An anonymous client can ask for the agent binary (tens of MB) as often as its rate limit
//! lets it, and at loopback or datacenter speed encrypting those bytes keeps a core busy: the
//! operators' and agents' requests would wait behind it. Wrapping the answer in [`Paced`]
//! cuts it into [`PIECE`]-byte frames and holds each until the shared budget allows it, so
//! all anonymous downloads together cost a bounded share of the CPU. The length is unchanged
//! (`Content-Length` still holds), and nothing is copied: pieces are slices of the same
//! bytes.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, SizeHint};

use crate::rate_limit::BytePacer;

/// Bytes sent in one frame.
pub const PIECE: usize = 64 << 10;

/// `inner`, sent in pieces within `pacer`'s budget.
pub struct Paced {
    inner: Body,
    pacer: Arc<Mutex<BytePacer>>,
    /// Bytes of an inner frame not sent yet.
    rest: Bytes,
    /// The wait before the next piece, once reserved.
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The piece the wait is for.
    next: Option<Bytes>,
}

impl Paced {
    /// Wraps `inner`.
    pub fn new(inner: Body, pacer: Arc<Mutex<BytePacer>>) -> Paced {
        Paced { inner, pacer, rest: Bytes::new(), wait: None, next: None }
    }
}

impl HttpBody for Paced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(sleep) = this.wait.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                this.wait = None;
            }
            if let Some(piece) = this.next.take() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if this.rest.is_empty() {
                match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                    None => return Poll::Ready(None),
                    Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => this.rest = data,
                        // Trailers pass as they are.
                        Err(frame) => return Poll::Ready(Some(Ok(frame))),
                    },
                }
                continue;
            }
            let piece = this.rest.split_to(this.rest.len().min(PIECE));
            let now = tokio::time::Instant::now();
            let wait = this.pacer.lock().unwrap_or_else(|p| p.into_inner()).reserve(piece.len() as u64, now.into_std());
            if wait.is_zero() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            this.next = Some(piece);
            this.wait = Some(Box::pin(tokio::time::sleep_until(now + wait)));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.next.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let pending = (self.rest.len() + self.next.as_ref().map_or(0, Bytes::len)) as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + pending);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + pending);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_large_answer_is_sent_whole_at_the_shared_rate() {
        let pacer = Arc::new(Mutex::new(BytePacer::new(1 << 20, 256 << 10)));
        let bytes = Bytes::from(vec![7u8; 3 << 20]);
        let body = Paced::new(Body::from(bytes.clone()), pacer);
        assert_eq!(body.size_hint().exact(), Some(3 << 20), "Content-Length still holds");
        let started = tokio::time::Instant::now();
        let got = body.collect().await.expect("body").to_bytes();
        assert_eq!(got, bytes);
        let took = started.elapsed().as_secs_f64();
        // 3 MiB less the 256 KiB burst, at 1 MiB/s.
        assert!((2.7..2.8).contains(&took), "{took}");
    }
}
