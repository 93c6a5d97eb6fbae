//! HTTP/1.1 on the one listener, sized for a fleet that holds long-polls.
//!
//! Every agent keeps a connection open, and nearly all of that time its check-in is parked
//! in the coordinator waiting for something to happen. A general-purpose HTTP stack keeps its
//! read and write buffers (HTTP/2 adds frame and header-table buffers) for as long as the
//! connection lives: about 30 KB a connection, 300 MB for 10,000 agents, all of it idle.
//! Here a connection owns a buffer only while bytes are in flight: the head and body are
//! read into one that is freed before the request reaches the router, and the answer is
//! written from the response itself. A parked check-in costs its TLS state and the
//! handler's future.
//!
//! This is the edge hostile tenants reach, so the framing rules of RFC 9112 are applied
//! strictly and each refusal is a 4xx naming what was wrong, then a close:
//! a head is at most [`MAX_HEAD_BYTES`] and must arrive within [`HEADER_READ_TIMEOUT`] of its
//! first byte, a body within [`BODY_TIMEOUT`] and never [`BODY_STALL_TIMEOUT`] without progress,
//! and an answer the client stops reading for that long ends the connection;
//! `Content-Length` and `Transfer-Encoding` together, differing lengths, a
//! coding other than `chunked`, or a missing `Host` are refused (request smuggling lives in
//! those gaps); bodies are bounded by the router's body limit ([`crate::body::BodyLimit`]) before they are buffered.
//! While a handler runs, the connection watches for the client going away and drops the
//! handler when it does, so an abandoned long-poll does not stay parked.
//!
//! The framing rules live in [`decode`], which does no I/O and keeps no clock; this module
//! is the socket loop around it: reads (each within its deadline) into the connection's
//! buffer, the decoder's steps applied to that buffer, `100 Continue`, the handler, the answer.

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::http::{HeaderMap, Method, Request, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::time::{Instant, timeout, timeout_at};
use tower::ServiceExt as _;

use crate::conn_limits::{AnonConn, ConnLimits, Deadline};
use decode::{BodyDecoder, BodyEnd, BodyStep, DecodeError, Framing, Head, READ_CHUNK};
use drover_pki::Peer;

pub mod decode;

pub use decode::{MAX_HEAD_BYTES, MAX_HEADERS};
/// How long a request head may take once its first byte arrived.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may sit between requests. Longer than HTTP clients keep idle
/// pooled connections (reqwest: 90 s), so the client, not the coordinator, closes first and
/// never sends a request into a connection that is closing.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a body may stall between two reads, or an answer between two writes.
pub const BODY_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a whole request body (trailers included) may take: a client trickling a byte
/// just inside the stall timeout must not hold a connection for ever.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(300);
/// The same for a connection without a certificate: its body is at most
/// [`crate::body::MAX_ANONYMOUS_BODY_BYTES`] and holds part of a budget every anonymous client
/// shares, so a trickle must not keep that budget for long.
pub const ANONYMOUS_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long, after an error answer, the connection keeps reading (and dropping) what the
/// client is still sending, so that closing does not reset the answer away.
const LINGER: Duration = Duration::from_secs(2);
/// Answers are written in pieces of this size, each within [`BODY_STALL_TIMEOUT`].
const WRITE_CHUNK: usize = 64 * 1024;
/// Bodies of known length up to this are written in one piece with the head.
const COALESCE_BYTES: usize = 64 * 1024;

/// Why a request was refused before it reached the router, or the connection ended.
#[derive(Debug, thiserror::Error)]
pub enum Http1Error {
    /// The client closed the connection in the middle of a request.
    #[error("the client closed the connection mid-request")]
    Closed,
    /// Reading or writing failed.
    #[error("connection I/O failed")]
    Io {
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not an acceptable request.
    #[error(transparent)]
    Decode {
        /// Which rule they break.
        #[from]
        source: DecodeError,
    },
    /// The client was too slow.
    #[error("timed out {during}")]
    TimedOut {
        /// Which part of the request was late.
        during: &'static str,
    },
    /// The client stopped reading the answer.
    #[error("the client stopped reading the answer")]
    WriteStalled,
}

impl Http1Error {
    /// The answer sent before closing; None where there is nobody left to answer.
    fn answer(&self) -> Option<Response> {
        let (status, code) = match self {
            Http1Error::Closed | Http1Error::Io { .. } | Http1Error::WriteStalled => return None,
            Http1Error::Decode { source: DecodeError::HeadTooLarge { .. } } => {
                (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large")
            }
            Http1Error::Decode { source: DecodeError::Malformed { .. } } => (StatusCode::BAD_REQUEST, "bad_request"),
            Http1Error::TimedOut { .. } => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            // RFC 9112 suggests 501; a 4xx, because the request is what cannot be served
            // (Drover answers bad input with a 4xx naming it, never a 5xx).
            Http1Error::Decode { source: DecodeError::UnsupportedCoding { .. } } => {
                (StatusCode::BAD_REQUEST, "unsupported_transfer_coding")
            }
            Http1Error::Decode { source: DecodeError::Expectation { .. } } => (StatusCode::EXPECTATION_FAILED, "expectation_failed"),
        };
        Some(crate::body::error_response(status, code, self.to_string()))
    }
}

fn io_error(source: std::io::Error) -> Http1Error {
    Http1Error::Io { source }
}

/// A request body as read.
enum BodyRead {
    Whole(Vec<u8>),
    /// Over the limit: answered with 413; `drained` says whether the connection is still
    /// in step (the whole body was read and thrown away) or must close.
    TooLarge {
        drained: bool,
    },
}

/// Serves HTTP/1.1 requests on `io` into `router` until the client closes, a request
/// asks to close, or one is refused. Every request carries `peer` and `remote`. A connection
/// without a certificate passes its place under the caps (`anon`): its requests are
/// rate-limited, its bodies budgeted, and it closes when the caps evict it while idle.
pub fn serve_connection<S>(
    io: S,
    remote: SocketAddr,
    peer: Peer,
    router: Router,
    waits: crate::server::Waits,
    limits: Arc<ConnLimits>,
    anon: Option<Arc<AnonConn>>,
) -> impl Future<Output = ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Not an `async fn`: its arguments would stay in the future beside the connection they
    // are moved into, a second copy of the TLS stream (1.2 KB) in every parked connection.
    let mut conn = Conn { io, buf: Vec::new(), waits, served: false, limits, anon };
    async move {
        let linger = match conn.serve(remote, peer, router).await {
            Ok(linger) => linger,
            Err(e) => {
                tracing::debug!(%remote, error = %e, "HTTP/1.1 connection ended");
                match e.answer() {
                    Some(answer) => Box::pin(conn.write_response(answer.into_response(), false, true, Version::HTTP_11)).await.is_ok(),
                    None => false,
                }
            }
        };
        let _ = timeout(BODY_STALL_TIMEOUT, conn.io.shutdown()).await;
        if linger {
            Box::pin(conn.linger()).await;
        }
    }
}

/// One connection: the stream and the bytes read from it but not yet used (empty, and
/// without an allocation, between requests unless the client pipelined).
struct Conn<S> {
    io: S,
    buf: Vec<u8>,
    /// How long to wait for the first request, then between requests.
    waits: crate::server::Waits,
    /// A request has been read (the idle wait applies from now on).
    served: bool,
    /// Where deadlines that close the connection are counted.
    limits: Arc<ConnLimits>,
    /// Its place under the anonymous caps, for a connection without a certificate.
    anon: Option<Arc<AnonConn>>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Every await but the handler's is boxed: a future is as large as its largest state,
    /// and only the handler's is held while a long-poll is parked.
    /// Ok(true) when it answered a request it did not read whole: the caller lingers.
    async fn serve(&mut self, remote: SocketAddr, peer: Peer, router: Router) -> Result<bool, Http1Error> {
        loop {
            let Some(Head { mut parts, framing, close, expect_continue }) = Box::pin(self.read_head()).await? else {
                return Ok(false);
            };
            let is_head = parts.method == Method::HEAD;
            let version = parts.version;
            let _busy = self.anon.as_ref().map(AnonConn::busy);
            if self.anon.is_some()
                && let Err(refusal) = Box::pin(self.limits.admit_anonymous(remote.ip())).await
            {
                // A body the client may be sending is not read: the connection closes.
                let keep = matches!(framing, Framing::Empty | Framing::Length(0)) && !close;
                Box::pin(self.write_response(refusal, is_head, !keep, version)).await?;
                if keep {
                    continue;
                }
                return Ok(true);
            }
            parts.extensions.insert(peer.clone());
            parts.extensions.insert(axum::extract::ConnectInfo(remote));
            let limit = (self.limits.body_limit())(&parts);
            // An anonymous body holds room in the budget every anonymous client shares, from
            // before it is read until its answer is written.
            let reserve = match framing {
                Framing::Length(n) if n > 0 && n <= limit as u64 => Some(n as usize),
                Framing::Chunked => Some(limit),
                _ => None,
            };
            let _budget = match reserve.filter(|_| self.anon.is_some()) {
                Some(bytes) => match self.limits.anonymous_body(bytes).await {
                    Some(p) => Some(p),
                    None => {
                        Box::pin(self.write_response(crate::conn_limits::body_budget_full(), is_head, true, version)).await?;
                        return Ok(true);
                    }
                },
                None => None,
            };
            if expect_continue {
                if matches!(framing, Framing::Length(n) if n > limit as u64) {
                    // The client waits before sending the body: answer without reading it.
                    Box::pin(self.write_response(crate::body::too_large(limit), is_head, true, version)).await?;
                    return Ok(true);
                }
                Box::pin(self.write_raw(b"HTTP/1.1 100 Continue\r\n\r\n")).await?;
            }
            let body = match Box::pin(self.read_body(framing, limit)).await? {
                BodyRead::Whole(body) => body,
                BodyRead::TooLarge { drained } => {
                    let close = close || !drained;
                    Box::pin(self.write_response(crate::body::too_large(limit), is_head, close, version)).await?;
                    if close {
                        return Ok(!drained);
                    }
                    continue;
                }
            };
            self.release_buffer();
            let request = Request::from_parts(parts, Body::from(body));
            // Boxed: it is most of what a parked long-poll holds, and a box is sized to it
            // rather than to the largest of this loop's states.
            let Some(response) = self.respond(Box::pin(router.clone().oneshot(request))).await else {
                return Ok(false);
            };
            let mut response = response.unwrap_or_else(|e| match e {});
            if self.anon.is_some() {
                response = Box::pin(self.limits.anonymous_answer(remote.ip(), is_head, response)).await;
            }
            Box::pin(self.write_response(response, is_head, close, version)).await?;
            if close {
                return Ok(false);
            }
        }
    }

    /// Reads more bytes into `buf`; 0 at the end of the stream. Cancel-safe: bytes land in
    /// `buf` only when the read completes.
    async fn read_more(&mut self) -> Result<usize, Http1Error> {
        self.read_at_most(READ_CHUNK).await
    }

    /// As [`Conn::read_more`], reading at most `max` bytes (a body's remainder: nothing of
    /// a pipelined request behind it is pulled in with it).
    async fn read_at_most(&mut self, max: usize) -> Result<usize, Http1Error> {
        self.buf.reserve(max.min(READ_CHUNK));
        (&mut self.io).take(max as u64).read_buf(&mut self.buf).await.map_err(io_error)
    }

    /// The next request's head, or None when the client closed (or idled out, or the caps
    /// evicted it) between requests.
    async fn read_head(&mut self) -> Result<Option<Head>, Http1Error> {
        if self.buf.is_empty() {
            let wait = if self.served { self.waits.idle } else { self.waits.first };
            let anon = self.anon.clone();
            let evicted = async move {
                match anon {
                    Some(a) => a.evicted().await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                biased;
                () = evicted => return Ok(None),
                next = timeout(wait, self.read_more()) => next,
            };
            match next {
                Err(_) => {
                    self.limits.timed_out(if self.served { Deadline::Idle } else { Deadline::FirstRequest });
                    return Ok(None);
                }
                Ok(Ok(0)) => return Ok(None),
                Ok(Ok(_)) => {}
                // A reset between requests is how clients often leave.
                Ok(Err(_)) => return Ok(None),
            }
        }
        let deadline = Instant::now() + HEADER_READ_TIMEOUT;
        loop {
            if let Some((head, used)) = decode::decode_head(&self.buf)? {
                self.buf.drain(..used);
                self.served = true;
                return Ok(Some(head));
            }
            match timeout_at(deadline, self.read_more()).await {
                Err(_) => return Err(Http1Error::TimedOut { during: "reading the request head" }),
                Ok(Ok(0)) => return Err(Http1Error::Closed),
                Ok(r) => r.map(|_| ())?,
            }
        }
    }

    /// Reads at most `max` more bytes, within the stall timeout and the body's `deadline`;
    /// the end of the stream is an error.
    async fn read_body_bytes(&mut self, max: usize, deadline: Instant) -> Result<(), Http1Error> {
        let by = deadline.min(Instant::now() + BODY_STALL_TIMEOUT);
        match timeout_at(by, self.read_at_most(max)).await {
            Err(_) => Err(Http1Error::TimedOut { during: "reading the request body" }),
            Ok(Ok(0)) => Err(Http1Error::Closed),
            Ok(r) => r.map(|_| ()),
        }
    }

    /// The body [`decode::BodyDecoder`] delimits, read within [`BODY_TIMEOUT`]
    /// ([`ANONYMOUS_BODY_TIMEOUT`] without a certificate; an oversized one drains at most its
    /// limit again, not [`crate::body::MAX_DRAIN_BYTES`]).
    async fn read_body(&mut self, framing: Framing, limit: usize) -> Result<BodyRead, Http1Error> {
        let (within, drain) =
            if self.anon.is_some() { (ANONYMOUS_BODY_TIMEOUT, limit) } else { (BODY_TIMEOUT, crate::body::MAX_DRAIN_BYTES) };
        let deadline = Instant::now() + within;
        if let Framing::Length(n) = framing
            && n <= limit as u64
        {
            // It is handed over whole: read it into a buffer of its exact size.
            self.buf.reserve_exact((n as usize).saturating_sub(self.buf.len()));
        }
        let mut decoder = BodyDecoder::new(framing, limit, drain);
        let mut body = Vec::new();
        loop {
            match decoder.decode(&self.buf)? {
                BodyStep::NeedMore { max } => self.read_body_bytes(max, deadline).await?,
                BodyStep::Spent { used, keep } => {
                    body.extend_from_slice(&self.buf[keep]);
                    self.buf.drain(..used);
                }
                BodyStep::End { used, keep, outcome } => {
                    if body.is_empty() && used > 0 && keep == (0..used) {
                        // The whole body is the front of the buffer: keep that allocation.
                        let rest = self.buf.split_off(used);
                        body = std::mem::replace(&mut self.buf, rest);
                    } else {
                        body.extend_from_slice(&self.buf[keep]);
                        self.buf.drain(..used);
                    }
                    return Ok(match outcome {
                        BodyEnd::Whole => BodyRead::Whole(body),
                        BodyEnd::TooLarge { drained } => BodyRead::TooLarge { drained },
                    });
                }
            }
        }
    }

    /// Frees the read buffer unless it holds the start of a pipelined request.
    fn release_buffer(&mut self) {
        if self.buf.is_empty() {
            self.buf = Vec::new();
        } else {
            self.buf.shrink_to_fit();
        }
    }

    /// Runs the handler; None if the client went away first (the handler is dropped, which
    /// is how an abandoned long-poll is let go).
    async fn respond<F, T>(&mut self, mut handler: F) -> Option<T>
    where
        F: Future<Output = T> + Unpin,
    {
        // One byte at a time, so nothing but the pipelined bytes themselves is held.
        let mut byte = [0u8; 1];
        loop {
            tokio::select! {
                biased;
                answer = &mut handler => return Some(answer),
                read = self.io.read(&mut byte), if self.buf.len() < MAX_HEAD_BYTES => match read {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => self.buf.push(byte[0]),
                },
            }
        }
    }

    /// Writes `bytes` in pieces, each within the stall timeout: a client that stops reading
    /// loses its connection instead of holding it (and its buffers) for ever.
    async fn write_bounded(&mut self, bytes: &[u8]) -> Result<(), Http1Error> {
        for piece in bytes.chunks(WRITE_CHUNK) {
            match timeout(BODY_STALL_TIMEOUT, self.io.write_all(piece)).await {
                Err(_) => return Err(Http1Error::WriteStalled),
                Ok(r) => r.map_err(io_error)?,
            }
        }
        Ok(())
    }

    async fn write_raw(&mut self, bytes: &[u8]) -> Result<(), Http1Error> {
        self.write_bounded(bytes).await?;
        match timeout(BODY_STALL_TIMEOUT, self.io.flush()).await {
            Err(_) => Err(Http1Error::WriteStalled),
            Ok(r) => r.map_err(io_error),
        }
    }

    /// Reads and drops what the client still sends, for at most [`LINGER`] and 1 MiB.
    async fn linger(&mut self) {
        let mut sink = vec![0u8; READ_CHUNK];
        let mut dropped = 0usize;
        let until = Instant::now() + LINGER;
        while dropped < (1 << 20) {
            match timeout_at(until, self.io.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => dropped += n,
                _ => break,
            }
        }
    }

    /// Writes `response`: `Content-Length` when the body's size is known, chunked when not,
    /// no body for HEAD, 1xx, 204 and 304.
    async fn write_response(&mut self, response: Response, is_head: bool, close: bool, version: Version) -> Result<(), Http1Error> {
        // HTTP/1.0 has no chunked coding: a body of unknown length ends where the connection
        // does (a 1.0 request's head always asks for the close; see [`decode::decode_head`]).
        let (parts, mut body) = response.into_parts();
        let status = parts.status;
        let bodiless_status = status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        let exact = HttpBody::size_hint(&body).exact();
        let mut out = Vec::with_capacity(256);
        let _ = write!(out, "HTTP/1.1 {} {}\r\n", status.as_str(), status.canonical_reason().unwrap_or(""));
        // A HEAD answer repeats the length GET would have: the router already dropped
        // the body and left that length in the fields.
        write_fields(&mut out, &parts.headers, is_head);
        let chunked = !bodiless_status && exact.is_none() && version != Version::HTTP_10;
        if !bodiless_status && !is_head {
            match exact {
                Some(n) => {
                    let _ = write!(out, "content-length: {n}\r\n");
                }
                None if chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
                None => {}
            }
        }
        if close {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if is_head || bodiless_status {
            return self.write_raw(&out).await;
        }
        let coalesce = exact.is_some_and(|n| n as usize <= COALESCE_BYTES);
        if !coalesce {
            self.write_bounded(&out).await?;
            out = Vec::new();
        }
        let mut written: u64 = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| io_error(std::io::Error::other(e.to_string())))?;
            let Ok(data) = frame.into_data() else { continue };
            if data.is_empty() {
                continue;
            }
            written += data.len() as u64;
            if exact.is_some_and(|n| written > n) {
                return Err(io_error(std::io::Error::other("response body longer than its declared length")));
            }
            if coalesce {
                out.extend_from_slice(&data);
            } else if chunked {
                let mut size = Vec::with_capacity(18);
                let _ = write!(size, "{:x}\r\n", data.len());
                self.write_bounded(&size).await?;
                self.write_bounded(&data).await?;
                self.write_bounded(b"\r\n").await?;
            } else {
                self.write_bounded(&data).await?;
            }
        }
        if exact.is_some_and(|n| written != n) {
            return Err(io_error(std::io::Error::other("response body shorter than its declared length")));
        }
        if chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        self.write_raw(&out).await
    }
}

/// Response header fields, less the ones that frame the message on this hop (set here;
/// a HEAD answer keeps the `Content-Length` its GET would have had).
fn write_fields(out: &mut Vec<u8>, headers: &HeaderMap, keep_length: bool) {
    for (name, value) in headers {
        if (name == header::CONTENT_LENGTH && !keep_length) || name == header::TRANSFER_ENCODING || name == header::CONNECTION {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}
