//! Request bodies as the transport reads them, before any handler runs: bounded by the
//! router's [`BodyLimit`] and by deadlines, answered 413 or 408 in the API's one error shape
//! (`{"error":{"code","message"}}`, [`error_response`]) when they break either.

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use drover_pki::Peer;
use drover_proto::report::{ApiError as WireError, ApiErrorBody};

/// The router's body policy: the most a request with these parts (its path and its peer's
/// certificate) may carry. The transport applies it before buffering, on both HTTP stacks.
pub type BodyLimit = fn(&axum::http::request::Parts) -> usize;

/// Largest request body accepted from a connection without a client certificate: an
/// enrollment (token, CSRs, a sealing key) is a few KiB. These bodies also share one budget
/// ([`crate::conn_limits`]), so anonymous clients cannot make the coordinator buffer more
/// than `connections.anonymous_body_budget_bytes` in all.
pub const MAX_ANONYMOUS_BODY_BYTES: usize = 64 << 10;

/// The longest error message the transport sends, in characters (the API's bound too).
pub const MAX_MESSAGE_CHARS: usize = 2048;

/// An error answer in the one shape every route uses: `status`, and the body
/// `{"error":{"code","message"}}` with the message cut to [`MAX_MESSAGE_CHARS`].
pub fn error_response(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let message = message.into();
    // Already within the bound (every `ApiError` is): sent as it is, not copied.
    let message = match drover_proto::text::bounded(&message, MAX_MESSAGE_CHARS) {
        std::borrow::Cow::Borrowed(_) => message,
        std::borrow::Cow::Owned(cut) => cut,
    };
    (status, axum::Json(WireError { error: ApiErrorBody { code: code.to_owned(), message } })).into_response()
}

/// How much of an oversized body is read and thrown away before answering 413, so that the
/// client (which is still sending) sees the answer instead of a reset stream.
pub const MAX_DRAIN_BYTES: usize = 16 << 20;

/// Reads the request body (bounded) before any handler runs; each connection layer does
/// this before the router sees the request ([`crate::http1`] as it parses, the HTTP/2 path
/// here). A handler that refuses early (no certificate, wrong role) would otherwise answer
/// before the body was read, and over HTTP/2 the stream reset that follows makes some
/// clients (curl 7.88) drop the answer. Doing it outside the router also keeps a middleware
/// future out of every parked long-poll.
///
/// The same deadlines as HTTP/1.1's bound the read: no progress for
/// [`crate::http1::BODY_STALL_TIMEOUT`], or more than [`crate::http1::BODY_TIMEOUT`] in all
/// ([`crate::http1::ANONYMOUS_BODY_TIMEOUT`] without a certificate), answers 408 — a body
/// that never ends cannot hold its stream, and its buffer, for ever.
pub async fn read_whole_body(req: Request, body_limit: BodyLimit) -> Result<Request, Response> {
    use http_body_util::BodyExt as _;
    let (parts, mut body) = req.into_parts();
    let limit = body_limit(&parts);
    let anonymous = !matches!(parts.extensions.get::<Peer>(), Some(Peer::Verified { .. }));
    let (within, drain) =
        if anonymous { (crate::http1::ANONYMOUS_BODY_TIMEOUT, limit) } else { (crate::http1::BODY_TIMEOUT, MAX_DRAIN_BYTES) };
    let mut buf: Vec<u8> = Vec::new();
    let mut seen = 0usize;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let next = tokio::time::timeout_at(deadline.min(tokio::time::Instant::now() + crate::http1::BODY_STALL_TIMEOUT), body.frame());
        let frame = match next.await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(_) => {
                return Err(error_response(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!("the request body did not arrive in time (30 s without progress, {} s in all)", within.as_secs()),
                ));
            }
        };
        let Ok(frame) = frame else { return Err(too_large(limit)) };
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen <= limit {
                buf.extend_from_slice(&data);
            } else if seen > limit + drain {
                // Past what is worth draining: answer now; the client may see a reset.
                return Err(too_large(limit));
            }
        }
    }
    if seen > limit {
        return Err(too_large(limit));
    }
    Ok(Request::from_parts(parts, Body::from(buf)))
}

/// The 413 answer for a body over `limit` (also sent by [`crate::http1`] before buffering).
pub fn too_large(limit: usize) -> Response {
    error_response(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", format!("request body is unreadable or larger than {limit} bytes"))
}

#[cfg(test)]
mod body_deadline_tests {
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use axum::body::{Body, Bytes, HttpBody};
    use hyper::body::Frame;

    use super::*;

    fn limit(_: &axum::http::request::Parts) -> usize {
        1 << 20
    }

    /// A body whose next frame never comes: a client that stopped sending mid-body.
    struct Stalled;

    impl HttpBody for Stalled {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Pending
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_body_that_never_ends_is_answered_408_at_the_stall_deadline() {
        let host = Peer::Verified {
            identity: Ok(drover_pki::identity::Identity::Host { host_id: uuid::Uuid::nil(), hostname: "h1".into() }),
            serial: "01".into(),
        };
        let req = Request::builder().method("POST").uri("/v1/agent/checkin").extension(host).body(Body::new(Stalled)).expect("request");
        let started = tokio::time::Instant::now();
        let answer = read_whole_body(req, limit).await.expect_err("refused");
        assert_eq!(answer.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), crate::http1::BODY_STALL_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn an_anonymous_body_trickled_in_is_answered_408_at_the_anonymous_deadline() {
        let req = Request::builder().method("POST").uri("/v1/enroll").body(Body::new(Stalled)).expect("request");
        let started = tokio::time::Instant::now();
        let answer = read_whole_body(req, limit).await.expect_err("refused");
        assert_eq!(answer.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), crate::http1::ANONYMOUS_BODY_TIMEOUT, "not the 300 s an authenticated body gets");
    }
}
