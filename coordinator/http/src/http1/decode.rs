//! The request decoder of [`crate::http1`], without I/O: bytes in; a head, body bytes, "read
//! more" or a refusal out. No socket, no runtime, no clock — the deadlines are the connection
//! loop's — so every framing rule can be exercised byte by byte, split anywhere, and compared
//! with another parser (`coordinator/engine/tests/http1_framing.rs`).
//!
//! The buffer is the caller's: each step says how many bytes at its front are spent, and the
//! caller removes exactly those before the next step (it may append in between). Nothing here
//! keeps a copy, so a connection still owns a buffer only while bytes are in flight.
//!
//! The rules are RFC 9112's, applied strictly, because request smuggling lives in the gaps
//! between two parsers' leniencies: `Content-Length` and `Transfer-Encoding` together,
//! differing lengths, a coding other than `chunked`, a missing `Host`, and control characters
//! in chunk framing are all refused; heads are bounded by [`MAX_HEAD_BYTES`] and
//! [`MAX_HEADERS`].

use std::ops::Range;

use axum::http::{self, HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version, header};

/// Largest request head (request line and header fields).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header fields in one request.
pub const MAX_HEADERS: usize = 64;
/// Longest chunk-size line of a chunked body (size and extensions).
pub const MAX_CHUNK_LINE: usize = 1024;
/// How much a read is asked for at a time when the decoder cannot tell what comes next.
pub const READ_CHUNK: usize = 4096;

/// Why the bytes are not an acceptable request.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
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

fn malformed(what: impl Into<String>) -> DecodeError {
    DecodeError::Malformed { what: what.into() }
}

/// How a request's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// The chunked coding, then trailers.
    Chunked,
}

/// A parsed request head and what it says about the connection.
#[derive(Debug)]
pub struct Head {
    /// Method, target, version and fields (no extensions yet).
    pub parts: http::request::Parts,
    /// How the body is delimited.
    pub framing: Framing,
    /// The connection ends after this request's answer.
    pub close: bool,
    /// The client waits for `100 Continue` before sending the body.
    pub expect_continue: bool,
}

/// The head at the start of `buf` and its length; None while it is incomplete and still
/// within [`MAX_HEAD_BYTES`].
pub fn decode_head(buf: &[u8]) -> Result<Option<(Head, usize)>, DecodeError> {
    match parse_head(buf)? {
        Some(done) => Ok(Some(done)),
        None if buf.len() >= MAX_HEAD_BYTES => Err(DecodeError::HeadTooLarge { limit: MAX_HEAD_BYTES }),
        None => Ok(None),
    }
}

/// How a body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// Read whole, within the limit.
    Whole,
    /// Over the limit (answered 413); `drained`: every byte of it was read and dropped, so
    /// the connection is still in step; otherwise it must close.
    TooLarge {
        /// The connection is in step.
        drained: bool,
    },
}

/// One step of a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyStep {
    /// Nothing can be decoded until more bytes arrive; reading at most `max` does not pull
    /// in bytes of a pipelined request behind this body.
    NeedMore {
        /// The most to read.
        max: usize,
    },
    /// `buf[..used]` is spent; the part `keep` of it is body the request keeps.
    Spent {
        /// Bytes to remove from the front of the buffer.
        used: usize,
        /// Body bytes, within `..used`.
        keep: Range<usize>,
    },
    /// As `Spent`, and the body is over.
    End {
        /// Bytes to remove from the front of the buffer.
        used: usize,
        /// Body bytes, within `..used`.
        keep: Range<usize>,
        /// How it ended.
        outcome: BodyEnd,
    },
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// A body of known length within the limit: handed over in one piece once it is all in.
    Whole(u64),
    /// Over the limit, within what is worth draining: this many bytes still to drop.
    Drain(u64),
    ChunkLine,
    ChunkData(u64),
    ChunkEnd,
    /// The trailer section, and its size so far.
    Trailers(usize),
    Done(BodyEnd),
}

/// Decodes one request body of a given framing, keeping at most `limit` bytes.
#[derive(Debug)]
pub struct BodyDecoder {
    state: State,
    limit: u64,
    /// Past this, an oversized body is not worth draining: answer and close.
    ceiling: u64,
    /// Chunk bytes announced so far.
    seen: u64,
    /// Where the search for a line's CRLF resumes: bytes trickling in one at a time are not
    /// scanned again from the start each time.
    scanned: usize,
}

impl BodyDecoder {
    /// The body after a head with `framing`, kept if at most `limit` bytes long; oversized
    /// bodies up to `limit + drain` bytes are read and dropped.
    pub fn new(framing: Framing, limit: usize, drain: usize) -> BodyDecoder {
        let limit = limit as u64;
        let ceiling = limit.saturating_add(drain as u64);
        let state = match framing {
            Framing::Empty => State::Done(BodyEnd::Whole),
            Framing::Length(n) if n > ceiling => State::Done(BodyEnd::TooLarge { drained: false }),
            Framing::Length(n) if n > limit => State::Drain(n),
            Framing::Length(n) => State::Whole(n),
            Framing::Chunked => State::ChunkLine,
        };
        BodyDecoder { state, limit, ceiling, seen: 0, scanned: 0 }
    }

    /// The next step over `buf`, the bytes not yet spent.
    pub fn decode(&mut self, buf: &[u8]) -> Result<BodyStep, DecodeError> {
        let spent = |used| BodyStep::Spent { used, keep: 0..0 };
        match self.state {
            State::Done(outcome) => Ok(BodyStep::End { used: 0, keep: 0..0, outcome }),
            State::Whole(n) => {
                // n <= limit, which the caller bounds: it fits in memory.
                let n = n as usize;
                if buf.len() < n {
                    return Ok(BodyStep::NeedMore { max: n - buf.len() });
                }
                Ok(self.end(n, 0..n, BodyEnd::Whole))
            }
            State::Drain(left) => {
                if buf.is_empty() {
                    return Ok(BodyStep::NeedMore { max: left.min(READ_CHUNK as u64) as usize });
                }
                let take = left.min(buf.len() as u64);
                if take == left {
                    return Ok(self.end(take as usize, 0..0, BodyEnd::TooLarge { drained: true }));
                }
                self.state = State::Drain(left - take);
                Ok(spent(take as usize))
            }
            State::ChunkLine => {
                let Some((line, used)) = self.line(buf, MAX_CHUNK_LINE)? else {
                    return Ok(BodyStep::NeedMore { max: READ_CHUNK });
                };
                let size = parse_chunk_size(line)?;
                if size == 0 {
                    self.state = State::Trailers(0);
                    return Ok(spent(used));
                }
                self.seen = self.seen.saturating_add(size);
                if self.seen > self.ceiling {
                    return Ok(self.end(used, 0..0, BodyEnd::TooLarge { drained: false }));
                }
                self.state = State::ChunkData(size);
                Ok(spent(used))
            }
            State::ChunkData(left) => {
                if buf.is_empty() {
                    return Ok(BodyStep::NeedMore { max: left.min(READ_CHUNK as u64) as usize });
                }
                let take = left.min(buf.len() as u64) as usize;
                self.state = if take as u64 == left { State::ChunkEnd } else { State::ChunkData(left - take as u64) };
                // Past the limit the rest is only drained; what was kept is dropped at the end.
                let keep = if self.seen <= self.limit { 0..take } else { 0..0 };
                Ok(BodyStep::Spent { used: take, keep })
            }
            State::ChunkEnd => {
                if buf.len() < 2 {
                    return Ok(BodyStep::NeedMore { max: 2 - buf.len() });
                }
                if !buf.starts_with(b"\r\n") {
                    return Err(malformed("chunk data longer than its size"));
                }
                self.state = State::ChunkLine;
                Ok(spent(2))
            }
            State::Trailers(so_far) => {
                let Some((line, used)) = self.line(buf, MAX_HEAD_BYTES)? else {
                    return Ok(BodyStep::NeedMore { max: READ_CHUNK });
                };
                if line.iter().any(|b| b.is_ascii_control() && *b != b'\t') {
                    return Err(malformed("control character in a trailer field"));
                }
                let total = so_far + used;
                if total > MAX_HEAD_BYTES {
                    return Err(DecodeError::HeadTooLarge { limit: MAX_HEAD_BYTES });
                }
                if line.is_empty() {
                    let outcome = if self.seen > self.limit { BodyEnd::TooLarge { drained: true } } else { BodyEnd::Whole };
                    return Ok(self.end(used, 0..0, outcome));
                }
                self.state = State::Trailers(total);
                Ok(spent(used))
            }
        }
    }

    fn end(&mut self, used: usize, keep: Range<usize>, outcome: BodyEnd) -> BodyStep {
        self.state = State::Done(outcome);
        BodyStep::End { used, keep, outcome }
    }

    /// One CRLF-terminated line of at most `max` bytes at the front of `buf` (without its
    /// CRLF) and the bytes it spans; None while incomplete.
    fn line<'b>(&mut self, buf: &'b [u8], max: usize) -> Result<Option<(&'b [u8], usize)>, DecodeError> {
        let from = self.scanned.min(buf.len());
        if let Some(at) = buf[from..].windows(2).position(|w| w == b"\r\n").map(|at| at + from) {
            if at > max {
                return Err(malformed("chunk framing line too long"));
            }
            self.scanned = 0;
            return Ok(Some((&buf[..at], at + 2)));
        }
        if buf.len() > max + 1 {
            return Err(malformed("chunk framing line too long"));
        }
        self.scanned = buf.len().saturating_sub(1);
        Ok(None)
    }
}

/// Parses a complete head at the start of `buf`: the head and its length, None while
/// incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, DecodeError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut fields);
    let used = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(DecodeError::HeadTooLarge { limit: MAX_HEAD_BYTES }),
        Err(e) => return Err(malformed(e.to_string())),
    };
    if used > MAX_HEAD_BYTES {
        return Err(DecodeError::HeadTooLarge { limit: MAX_HEAD_BYTES });
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
        Some(v) => return Err(DecodeError::Expectation { value: String::from_utf8_lossy(v.as_bytes()).into_owned() }),
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
fn framing(headers: &HeaderMap, version: Version) -> Result<Framing, DecodeError> {
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
            _ => Err(DecodeError::UnsupportedCoding { coding: codings.join(", ") }),
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
fn parse_chunk_size(line: &[u8]) -> Result<u64, DecodeError> {
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
