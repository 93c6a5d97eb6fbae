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
//! those gaps); bodies are bounded by [`crate::api::body_limit`] before they are buffered.
//! While a handler runs, the connection watches for the client going away and drops the
//! handler when it does, so an abandoned long-poll does not stay parked.

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::http::{self, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::time::{Instant, timeout, timeout_at};
use tower::ServiceExt as _;

use crate::api::auth::Peer;
use crate::api::error::ApiError;
use crate::conn_limits::{ConnLimits, Deadline};

/// Largest request head (request line and header fields).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header fields in one request.
pub const MAX_HEADERS: usize = 64;
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
/// How long, after an error answer, the connection keeps reading (and dropping) what the
/// client is still sending, so that closing does not reset the answer away.
const LINGER: Duration = Duration::from_secs(2);
/// Answers are written in pieces of this size, each within [`BODY_STALL_TIMEOUT`].
const WRITE_CHUNK: usize = 64 * 1024;
/// Bodies of known length up to this are written in one piece with the head.
const COALESCE_BYTES: usize = 64 * 1024;
/// How much a read asks for at a time.
const READ_CHUNK: usize = 4096;
/// Longest chunk-size line of a chunked body (size and extensions).
const MAX_CHUNK_LINE: usize = 1024;

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
    /// The request head (or a chunked body's trailer section) exceeded its bound.
    #[error("request head larger than {limit} bytes or more than {MAX_HEADERS} header fields")]
    HeadTooLarge {
        /// The bound.
        limit: usize,
    },
    /// The request is not valid HTTP/1.1.
    #[error("malformed request: {what}")]
    Malformed {
        /// What is wrong with it.
        what: String,
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
    /// A transfer coding this server does not decode.
    #[error("transfer coding {coding:?} is not supported (only chunked)")]
    UnsupportedCoding {
        /// The coding named.
        coding: String,
    },
    /// An `Expect` other than `100-continue`.
    #[error("expectation {value:?} cannot be met (only 100-continue)")]
    Expectation {
        /// The value sent.
        value: String,
    },
}

impl Http1Error {
    /// The answer sent before closing; None where there is nobody left to answer.
    fn api_error(&self) -> Option<ApiError> {
        let (status, code) = match self {
            Http1Error::Closed | Http1Error::Io { .. } | Http1Error::WriteStalled => return None,
            Http1Error::HeadTooLarge { .. } => (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large"),
            Http1Error::Malformed { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            Http1Error::TimedOut { .. } => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            // RFC 9112 suggests 501; a 4xx, because the request is what cannot be served
            // (Drover answers bad input with a 4xx naming it, never a 5xx).
            Http1Error::UnsupportedCoding { .. } => (StatusCode::BAD_REQUEST, "unsupported_transfer_coding"),
            Http1Error::Expectation { .. } => (StatusCode::EXPECTATION_FAILED, "expectation_failed"),
        };
        Some(ApiError::new(status, code, self.to_string()))
    }
}

fn malformed(what: impl Into<String>) -> Http1Error {
    Http1Error::Malformed { what: what.into() }
}

fn io_error(source: std::io::Error) -> Http1Error {
    Http1Error::Io { source }
}

/// How a request's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
}

/// A parsed request head and what it says about the connection.
#[derive(Debug)]
struct Head {
    parts: http::request::Parts,
    framing: Framing,
    /// The connection ends after this request's answer.
    close: bool,
    expect_continue: bool,
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
/// asks to close, or one is refused. Every request carries `peer` and `remote`.
pub fn serve_connection<S>(
    io: S,
    remote: SocketAddr,
    peer: Peer,
    router: Router,
    waits: crate::server::Waits,
    limits: Arc<ConnLimits>,
) -> impl Future<Output = ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Not an `async fn`: its arguments would stay in the future beside the connection they
    // are moved into, a second copy of the TLS stream (1.2 KB) in every parked connection.
    let mut conn = Conn { io, buf: Vec::new(), waits, served: false, limits };
    async move {
        let linger = match conn.serve(remote, peer, router).await {
            Ok(linger) => linger,
            Err(e) => {
                tracing::debug!(%remote, error = %e, "HTTP/1.1 connection ended");
                match e.api_error() {
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
            parts.extensions.insert(peer.clone());
            parts.extensions.insert(axum::extract::ConnectInfo(remote));
            let limit = crate::api::body_limit(&parts);
            if expect_continue {
                if matches!(framing, Framing::Length(n) if n > limit as u64) {
                    // The client waits before sending the body: answer without reading it.
                    Box::pin(self.write_response(crate::api::too_large(limit), is_head, true, version)).await?;
                    return Ok(true);
                }
                Box::pin(self.write_raw(b"HTTP/1.1 100 Continue\r\n\r\n")).await?;
            }
            let body = match Box::pin(self.read_body(framing, limit)).await? {
                BodyRead::Whole(body) => body,
                BodyRead::TooLarge { drained } => {
                    let close = close || !drained;
                    Box::pin(self.write_response(crate::api::too_large(limit), is_head, close, version)).await?;
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
            let response = response.unwrap_or_else(|e| match e {});
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

    /// The next request's head, or None when the client closed (or idled out) between
    /// requests.
    async fn read_head(&mut self) -> Result<Option<Head>, Http1Error> {
        if self.buf.is_empty() {
            let wait = if self.served { self.waits.idle } else { self.waits.first };
            match timeout(wait, self.read_more()).await {
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
            if let Some((head, used)) = parse_head(&self.buf)? {
                self.buf.drain(..used);
                self.served = true;
                return Ok(Some(head));
            }
            if self.buf.len() >= MAX_HEAD_BYTES {
                return Err(Http1Error::HeadTooLarge { limit: MAX_HEAD_BYTES });
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

    async fn read_body(&mut self, framing: Framing, limit: usize) -> Result<BodyRead, Http1Error> {
        let ceiling = limit.saturating_add(crate::api::MAX_DRAIN_BYTES) as u64;
        let deadline = Instant::now() + BODY_TIMEOUT;
        match framing {
            Framing::Empty => Ok(BodyRead::Whole(Vec::new())),
            Framing::Length(n) if n > ceiling => Ok(BodyRead::TooLarge { drained: false }),
            Framing::Length(n) if n > limit as u64 => {
                let mut left = n;
                while left > 0 {
                    if self.buf.is_empty() {
                        self.read_body_bytes(left.min(READ_CHUNK as u64) as usize, deadline).await?;
                    }
                    let take = left.min(self.buf.len() as u64) as usize;
                    self.buf.drain(..take);
                    left -= take as u64;
                }
                Ok(BodyRead::TooLarge { drained: true })
            }
            Framing::Length(n) => {
                // n <= limit, which the caller's role already bounds.
                let n = n as usize;
                self.buf.reserve_exact(n.saturating_sub(self.buf.len()));
                while self.buf.len() < n {
                    self.read_body_bytes(n - self.buf.len(), deadline).await?;
                }
                let rest = self.buf.split_off(n);
                Ok(BodyRead::Whole(std::mem::replace(&mut self.buf, rest)))
            }
            Framing::Chunked => self.read_chunked(limit, ceiling, deadline).await,
        }
    }

    /// A chunked body (RFC 9112 §7.1): sizes in hex, extensions ignored, trailers read and
    /// dropped (bounded like a head).
    async fn read_chunked(&mut self, limit: usize, ceiling: u64, deadline: Instant) -> Result<BodyRead, Http1Error> {
        let mut body = Vec::new();
        let mut seen: u64 = 0;
        loop {
            let line = self.read_line(MAX_CHUNK_LINE, deadline).await?;
            let size = parse_chunk_size(&line)?;
            if size == 0 {
                break;
            }
            seen = seen.saturating_add(size);
            if seen > ceiling {
                return Ok(BodyRead::TooLarge { drained: false });
            }
            let mut left = size;
            while left > 0 {
                if self.buf.is_empty() {
                    self.read_body_bytes(left.min(READ_CHUNK as u64) as usize, deadline).await?;
                }
                let take = left.min(self.buf.len() as u64) as usize;
                if seen <= limit as u64 {
                    body.extend_from_slice(&self.buf[..take]);
                }
                self.buf.drain(..take);
                left -= take as u64;
            }
            while self.buf.len() < 2 {
                self.read_body_bytes(2 - self.buf.len(), deadline).await?;
            }
            if !self.buf.starts_with(b"\r\n") {
                return Err(malformed("chunk data longer than its size"));
            }
            self.buf.drain(..2);
        }
        let mut trailers = 0usize;
        loop {
            let line = self.read_line(MAX_HEAD_BYTES, deadline).await?;
            if line.iter().any(|b| b.is_ascii_control() && *b != b'\t') {
                return Err(malformed("control character in a trailer field"));
            }
            trailers += line.len() + 2;
            if trailers > MAX_HEAD_BYTES {
                return Err(Http1Error::HeadTooLarge { limit: MAX_HEAD_BYTES });
            }
            if line.is_empty() {
                break;
            }
        }
        if seen > limit as u64 { Ok(BodyRead::TooLarge { drained: true }) } else { Ok(BodyRead::Whole(body)) }
    }

    /// One CRLF-terminated line of at most `max` bytes, without its CRLF.
    async fn read_line(&mut self, max: usize, deadline: Instant) -> Result<Vec<u8>, Http1Error> {
        // Where the search for CRLF resumes: bytes trickling in one at a time are not
        // scanned again from the start each time.
        let mut scanned = 0;
        loop {
            if let Some(at) = self.buf[scanned..].windows(2).position(|w| w == b"\r\n").map(|at| at + scanned) {
                if at > max {
                    return Err(malformed("chunk framing line too long"));
                }
                let line = self.buf[..at].to_vec();
                self.buf.drain(..at + 2);
                return Ok(line);
            }
            if self.buf.len() > max + 1 {
                return Err(malformed("chunk framing line too long"));
            }
            scanned = self.buf.len().saturating_sub(1);
            self.read_body_bytes(READ_CHUNK, deadline).await?;
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
        // does (a 1.0 request's head always asks for the close; see `parse_head`).
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

/// Parses a complete head at the start of `buf`: the head and its length, None while
/// incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, Http1Error> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut fields);
    let used = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Http1Error::HeadTooLarge { limit: MAX_HEAD_BYTES }),
        Err(e) => return Err(malformed(e.to_string())),
    };
    if used > MAX_HEAD_BYTES {
        return Err(Http1Error::HeadTooLarge { limit: MAX_HEAD_BYTES });
    }
    let method = parsed.method.ok_or_else(|| malformed("no method"))?;
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| malformed("invalid method"))?;
    let target = parsed.path.ok_or_else(|| malformed("no request target"))?;
    let uri: Uri = target.parse().map_err(|_| malformed("invalid request target"))?;
    if uri.path_and_query().is_none() && method != Method::OPTIONS {
        return Err(malformed("request target has no path"));
    }
    let version = match parsed.version {
        Some(1) => Version::HTTP_11,
        Some(0) => Version::HTTP_10,
        _ => return Err(malformed("unsupported HTTP version")),
    };
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| malformed("invalid header field name"))?;
        let value = HeaderValue::from_bytes(field.value).map_err(|_| malformed(format!("invalid value of {name}")))?;
        headers.append(name, value);
    }
    let framing = framing(&headers, version)?;
    let close = version == Version::HTTP_10 || has_token(&headers, header::CONNECTION, "close");
    let expect_continue = match headers.get(header::EXPECT) {
        None => false,
        Some(v) if v.as_bytes().eq_ignore_ascii_case(b"100-continue") => version == Version::HTTP_11,
        Some(v) => return Err(Http1Error::Expectation { value: String::from_utf8_lossy(v.as_bytes()).into_owned() }),
    };
    if version == Version::HTTP_11 && headers.get_all(header::HOST).iter().count() != 1 {
        return Err(malformed("an HTTP/1.1 request needs exactly one Host field"));
    }
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = version;
    parts.headers = headers;
    Ok(Some((Head { parts, framing, close, expect_continue }, used)))
}

/// The body's framing; the ambiguous combinations request smuggling relies on are refused.
fn framing(headers: &HeaderMap, version: Version) -> Result<Framing, Http1Error> {
    let mut codings = Vec::new();
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let value = value.to_str().map_err(|_| malformed("invalid Transfer-Encoding"))?;
        codings.extend(value.split(',').map(|c| c.trim().to_ascii_lowercase()).filter(|c| !c.is_empty()));
    }
    let lengths = headers.get_all(header::CONTENT_LENGTH).iter().count();
    if headers.contains_key(header::TRANSFER_ENCODING) {
        if lengths > 0 {
            return Err(malformed("both Content-Length and Transfer-Encoding"));
        }
        if codings.is_empty() {
            return Err(malformed("an empty Transfer-Encoding"));
        }
        if version == Version::HTTP_10 {
            return Err(malformed("Transfer-Encoding in an HTTP/1.0 request"));
        }
        return match codings.as_slice() {
            [only] if only == "chunked" => Ok(Framing::Chunked),
            _ => Err(Http1Error::UnsupportedCoding { coding: codings.join(", ") }),
        };
    }
    let mut length: Option<u64> = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for item in value.as_bytes().split(|b| *b == b',') {
            let item = item.trim_ascii();
            if item.is_empty() || item.len() > 19 || !item.iter().all(u8::is_ascii_digit) {
                return Err(malformed("invalid Content-Length"));
            }
            let n: u64 = std::str::from_utf8(item).ok().and_then(|s| s.parse().ok()).ok_or_else(|| malformed("invalid Content-Length"))?;
            if length.is_some_and(|l| l != n) {
                return Err(malformed("differing Content-Length values"));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        None | Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
    })
}

fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The size of a chunk from its line (`1a3f;name=value`).
fn parse_chunk_size(line: &[u8]) -> Result<u64, Http1Error> {
    // Only SP and HTAB may stand between the size and its extensions, and no control
    // character anywhere: a bare CR or LF is how two parsers come to disagree on framing.
    if line.iter().any(|b| b.is_ascii_control() && *b != b'\t') {
        return Err(malformed("control character in a chunk size line"));
    }
    let size = line.split(|b| *b == b';').next().unwrap_or_default();
    let digits = &size[..size.iter().rposition(|b| *b != b' ' && *b != b'\t').map_or(0, |i| i + 1)];
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(malformed("invalid chunk size"));
    }
    std::str::from_utf8(digits).ok().and_then(|s| u64::from_str_radix(s, 16).ok()).ok_or_else(|| malformed("invalid chunk size"))
}
