//! Fuzz targets for the HTTP/1.1 request decoder ([`drover_engine::http1::decode`]),
//! run by bolero: under `cargo test` over the checked-in corpus (`__fuzz__/…/corpus`, one raw
//! byte stream per file) plus a bounded number of generated inputs; under `cargo bolero test`
//! as coverage-guided fuzzers, unbounded.
//!
//! - `the_decoder_gives_one_answer_however_the_bytes_arrive`: no panic, no step that spends
//!   nothing, and the same requests (or the same refusal) whether the stream arrives whole,
//!   a byte at a time, or in pieces of 7.
//! - `the_decoder_and_hypers_parser_agree_on_framing`: the same stream fed to the decoder and
//!   to hyper's HTTP/1 server: both accept or both refuse, and they agree on every request's
//!   method, target and body. Where Drover is stricter by design, the difference is one of
//!   the named [`Rule`]s below, each checked against the bytes themselves (an independent
//!   parse of the refused head), never a blanket skip.
//!
//! Inputs are raw bytes, with one twist that lets generated inputs reach deep states: a byte
//! from 0xE0 up stands for one of [`FRAGMENTS`] (request lines, framing fields, chunk
//! lines). Corpus files are plain HTTP text, which the twist leaves as it is.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::Version;
use drover_engine::http1::decode::{BodyDecoder, BodyEnd, BodyStep, READ_CHUNK, decode_head};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The body limit and drain allowance the coordinator applies to every route but releases.
const LIMIT: usize = drover_engine::api::MAX_BODY_BYTES;
const DRAIN: usize = drover_engine::api::MAX_DRAIN_BYTES;
/// How [`decode_stream`] names a stream that ends inside a request.
const CUT_SHORT: &str = "closed mid-request";
/// Generated inputs per target under `cargo test`: bounded, so CI's run is too.
const ITERATIONS: usize = 3000;

/// What a byte from 0xE0 up expands to.
const FRAGMENTS: [&[u8]; 32] = [
    b"GET / HTTP/1.1\r\n",
    b"POST /v1/agent/checkin HTTP/1.1\r\n",
    b"PUT /x?y=1 HTTP/1.0\r\n",
    b"Host: coordinator\r\n",
    b"Content-Length: ",
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: ",
    b"Connection: close\r\n",
    b"Connection: keep-alive\r\n",
    b"Expect: 100-continue\r\n",
    b"\r\n",
    b"\r\n\r\n",
    b"0\r\n\r\n",
    b"5\r\nhello\r\n",
    b"1;ext=\"v\"\r\nx\r\n",
    b"chunked",
    b"gzip, chunked",
    b"Content-Length: 5\r\n",
    b"Content-Length: 0\r\n",
    b"Trailer-Field: t\r\n",
    b"hello",
    b" HTTP/1.1\r\n",
    b"OPTIONS * HTTP/1.1\r\n",
    b"Host: a\r\nHost: b\r\n",
    b"X-Fold: a\r\n b\r\n",
    b"\n",
    b"\r",
    b"\t",
    b"ffffffffffffffff",
    b"12",
    b", ",
    b"0\r\nTrailer: x\r\n\r\n",
];

fn expand(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() * 2);
    for &b in input {
        match b {
            0xE0.. => out.extend_from_slice(FRAGMENTS[usize::from(b - 0xE0)]),
            _ => out.push(b),
        }
    }
    out
}

/// One request as a server hands it to its handler.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Req {
    method: String,
    target: String,
    body: Vec<u8>,
}

/// How a stream of requests ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// At the end of the stream between requests, or after a request that closes.
    Clean,
    /// A request was refused (or cut short); the message says why.
    Refused(String),
}

/// What the decoder made of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decoded {
    requests: Vec<Req>,
    end: End,
    /// Where each request began in the stream, the refused one last.
    starts: Vec<usize>,
    /// The stream stopped after a request of this version because it asks to close.
    closed_after: Option<Version>,
}

/// A socket that hands out at most `piece` bytes per read.
struct Socket<'a> {
    rest: &'a [u8],
    piece: usize,
}

impl Socket<'_> {
    fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> usize {
        let n = self.rest.len().min(max).min(self.piece);
        buf.extend_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        n
    }
}

/// The decoder driven the way the coordinator's connection loop drives it, reads of at most
/// `piece` bytes. Panics where a step breaks the decoder's contract.
fn decode_stream(input: &[u8], piece: usize) -> Decoded {
    let mut socket = Socket { rest: input, piece };
    let mut buf = Vec::new();
    let mut out = Decoded { requests: Vec::new(), end: End::Clean, starts: Vec::new(), closed_after: None };
    let refused = |mut out: Decoded, why: String| {
        out.end = End::Refused(why);
        out
    };
    loop {
        if buf.is_empty() && socket.read(&mut buf, READ_CHUNK) == 0 {
            return out;
        }
        out.starts.push(input.len() - socket.rest.len() - buf.len());
        let head = loop {
            match decode_head(&buf) {
                Err(e) => return refused(out, e.to_string()),
                Ok(Some((head, used))) => {
                    assert!(used > 0 && used <= buf.len(), "a head spans {used} of {} bytes", buf.len());
                    buf.drain(..used);
                    break head;
                }
                Ok(None) => {
                    if socket.read(&mut buf, READ_CHUNK) == 0 {
                        return refused(out, CUT_SHORT.into());
                    }
                }
            }
        };
        let mut decoder = BodyDecoder::new(head.framing, LIMIT, DRAIN);
        let mut body = Vec::new();
        let outcome = loop {
            match decoder.decode(&buf) {
                Err(e) => return refused(out, e.to_string()),
                Ok(BodyStep::NeedMore { max }) => {
                    assert!(max > 0, "asked to read nothing");
                    if socket.read(&mut buf, max) == 0 {
                        return refused(out, CUT_SHORT.into());
                    }
                }
                Ok(BodyStep::Spent { used, keep }) => {
                    // A step that spends nothing would be asked again for ever: a hang.
                    assert!(used > 0 && used <= buf.len() && keep.end <= used, "spent {used} of {}, keeping {keep:?}", buf.len());
                    body.extend_from_slice(&buf[keep]);
                    buf.drain(..used);
                }
                Ok(BodyStep::End { used, keep, outcome }) => {
                    assert!(used <= buf.len() && keep.end <= used, "ended spending {used} of {}, keeping {keep:?}", buf.len());
                    body.extend_from_slice(&buf[keep]);
                    buf.drain(..used);
                    break outcome;
                }
            }
        };
        if let BodyEnd::TooLarge { .. } = outcome {
            return refused(out, "body over the limit".into());
        }
        out.requests.push(Req { method: head.parts.method.to_string(), target: head.parts.uri.to_string(), body });
        if head.close {
            out.closed_after = Some(head.parts.version);
            return out;
        }
    }
}

#[test]
fn the_decoder_gives_one_answer_however_the_bytes_arrive() {
    bolero::check!().with_iterations(ITERATIONS).with_max_len(4096).for_each(|input: &[u8]| {
        let stream = expand(input);
        let whole = decode_stream(&stream, usize::MAX);
        for piece in [1, 2, 7, 4099] {
            assert_eq!(decode_stream(&stream, piece), whole, "read {piece} bytes at a time");
        }
    });
}

/// What hyper's HTTP/1 server made of a stream: the requests whose bodies its handler read
/// whole, and whether the connection ended cleanly.
#[derive(Debug)]
struct HyperSaw {
    requests: Vec<Req>,
    clean: bool,
}

fn hyper_serves(runtime: &tokio::runtime::Runtime, stream: &[u8]) -> HyperSaw {
    runtime.block_on(async {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let seen: Arc<Mutex<Vec<Req>>> = Arc::default();
        let bodies_failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, f) = (seen.clone(), bodies_failed.clone());
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let (s, f) = (s.clone(), f.clone());
            async move {
                let (parts, body) = req.into_parts();
                match body.collect().await {
                    Ok(b) => s.lock().unwrap().push(Req {
                        method: parts.method.to_string(),
                        target: parts.uri.to_string(),
                        body: b.to_bytes().to_vec(),
                    }),
                    Err(_) => f.store(true, std::sync::atomic::Ordering::SeqCst),
                }
                Ok::<_, Infallible>(hyper::Response::new(Empty::<Bytes>::new()))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        // The stream's end is the client's half-close: answers still go out after it.
        builder.timer(TokioTimer::new()).half_close(true);
        let conn = tokio::spawn(builder.serve_connection(TokioIo::new(server), service));
        let (mut rx, mut tx) = tokio::io::split(client);
        let bytes = stream.to_vec();
        let writer = tokio::spawn(async move {
            let _ = tx.write_all(&bytes).await;
            let _ = tx.shutdown().await;
        });
        let mut answers = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), rx.read_to_end(&mut answers)).await;
        assert!(read.is_ok(), "hyper hung on {:?}", String::from_utf8_lossy(stream));
        let _ = writer.await;
        let served = tokio::time::timeout(Duration::from_secs(10), conn).await.expect("hyper's connection ends").expect("no panic");
        let requests = seen.lock().unwrap().clone();
        HyperSaw { requests, clean: served.is_ok() && !bodies_failed.load(std::sync::atomic::Ordering::SeqCst) }
    })
}

/// A difference between Drover's decoder and hyper's by design: one refuses a request the
/// other serves. Each is checked against the refused request's own bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// `Content-Length` beside `Transfer-Encoding`: hyper drops the length and reads chunked
    /// (RFC 9112 §6.1 allows either); Drover refuses, since a front proxy that picked the
    /// length would frame a different request (smuggling).
    LengthWithTransferEncoding,
    /// An HTTP/1.1 request without exactly one `Host`: RFC 9112 §3.2 says a server must
    /// refuse it; hyper does not check.
    ExactlyOneHost,
    /// Drover's head is at most 16 KiB and 64 fields; hyper's about 400 KiB and 100.
    HeadBounds,
    /// A transfer coding other than a lone `chunked` (`gzip, chunked`): hyper passes the body
    /// on still encoded; Drover decodes nothing else and refuses.
    OnlyChunked,
    /// An `Expect` other than `100-continue`: hyper ignores it; Drover answers 417 (RFC 9110
    /// §10.1.1).
    OnlyContinueExpected,
    /// Control characters (other than HTAB) anywhere in a chunk line or a trailer line, a
    /// chunk line over 1 KiB, or a chunk size of more than 15 hex digits: hyper tolerates
    /// some; Drover refuses, since a bare CR or LF there is where parsers come to disagree.
    StrictChunkLines,
    /// A request target with no path (authority form, outside `OPTIONS`): no Drover route
    /// takes one.
    OriginForm,
    /// A body over the route's limit: answered 413 by Drover; hyper has no limit of its own.
    BodyLimit,
    /// hyper refuses a `Content-Length` that lists one value several times (`5, 5`); Drover
    /// takes it as that value, as RFC 9110 §8.6 allows. Both would read the same length, so
    /// no request is framed differently.
    RepeatedLength,
    /// hyper parses a chunked body's trailer section as fields and refuses a line that is not
    /// one; Drover reads the section to its empty line and discards it unparsed (RFC 9112
    /// §7.1.2 lets a recipient discard trailers). The section ends at the same empty line for
    /// both, so the framing is the same.
    TrailersDiscarded,
}

/// The rule that explains hyper refusing the request at the start of `bytes`, which Drover
/// served.
fn hyper_refuses(bytes: &[u8]) -> Option<Rule> {
    let RawHead { fields, .. } = raw_head(bytes)?;
    let repeated = fields.iter().filter(|(n, _)| n == "content-length").any(|(_, v)| {
        let items: Vec<&[u8]> = v.split(|b| *b == b',').map(<[u8]>::trim_ascii).collect();
        items.len() > 1 && items.windows(2).all(|w| w[0] == w[1])
    });
    if repeated {
        return Some(Rule::RepeatedLength);
    }
    // The lines after the last chunk (a size of zero) up to the empty line.
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l)).collect();
    let head_end = lines.iter().position(|l| l.is_empty())?;
    let last_chunk = lines
        .iter()
        .enumerate()
        .skip(head_end + 1)
        .find(|(_, l)| l.split(|b| *b == b';').next().is_some_and(|z| !z.is_empty() && z.iter().all(|b| *b == b'0')))?
        .0;
    let not_a_field = lines[last_chunk + 1..].iter().take_while(|l| !l.is_empty()).any(|l| {
        let mut one = [httparse::EMPTY_HEADER; 1];
        let line = [*l, b"\r\n\r\n"].concat();
        !matches!(httparse::parse_headers(&line, &mut one), Ok(httparse::Status::Complete(_)))
    });
    not_a_field.then_some(Rule::TrailersDiscarded)
}

/// A head as written: method, target, minor version, and fields (names lowercased).
struct RawHead {
    method: String,
    target: String,
    version: u8,
    fields: Vec<(String, Vec<u8>)>,
}

/// The head at the start of `bytes`, by httparse with room for any count of fields.
fn raw_head(bytes: &[u8]) -> Option<RawHead> {
    let mut fields = vec![httparse::EMPTY_HEADER; 4096];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(_)) | Ok(httparse::Status::Partial) => {}
        Err(_) => return None,
    }
    let fields = req.headers.iter().filter(|h| !h.name.is_empty()).map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())).collect();
    Some(RawHead { method: req.method?.to_owned(), target: req.path?.to_owned(), version: req.version?, fields })
}

/// The rule that explains Drover refusing (`why`) the request at the start of `bytes`.
fn drover_refuses(why: &str, bytes: &[u8]) -> Option<Rule> {
    let head_len = bytes.windows(4).position(|w| w == b"\r\n\r\n").map_or(bytes.len(), |at| at + 4);
    let RawHead { method, target, version, fields } = raw_head(bytes)?;
    let has = |name: &str| fields.iter().any(|(n, _)| n == name);
    let values = |name: &str| fields.iter().filter(|(n, _)| n == name).map(|(_, v)| v.clone()).collect::<Vec<_>>();
    if why.contains("both Content-Length and Transfer-Encoding") && has("content-length") && has("transfer-encoding") {
        return Some(Rule::LengthWithTransferEncoding);
    }
    if why.contains("exactly one Host") && version == 1 && values("host").len() != 1 {
        return Some(Rule::ExactlyOneHost);
    }
    if why.starts_with("request head larger than") && (head_len > 16 * 1024 || fields.len() > 64) {
        return Some(Rule::HeadBounds);
    }
    if why.starts_with("transfer coding") {
        let codings: Vec<String> = values("transfer-encoding")
            .iter()
            .flat_map(|v| String::from_utf8_lossy(v).split(',').map(|c| c.trim().to_ascii_lowercase()).collect::<Vec<_>>())
            .filter(|c| !c.is_empty())
            .collect();
        if codings != ["chunked"] {
            return Some(Rule::OnlyChunked);
        }
    }
    if why.starts_with("expectation") && values("expect").iter().any(|v| !v.eq_ignore_ascii_case(b"100-continue")) {
        return Some(Rule::OnlyContinueExpected);
    }
    if (why.contains("chunk size line")
        || why.contains("chunk framing line")
        || why.contains("trailer field")
        || why.contains("invalid chunk size"))
        && values("transfer-encoding").iter().any(|v| String::from_utf8_lossy(v).to_ascii_lowercase().contains("chunked"))
    {
        let body = &bytes[head_len.min(bytes.len())..];
        let odd_line = body
            .split(|b| *b == b'\n')
            .any(|line| line.len() > 1024 || line.strip_suffix(b"\r").unwrap_or(line).iter().any(|b| b.is_ascii_control() && *b != b'\t'));
        let long_size = body.split(|b| *b == b'\n').any(|line| line.iter().take_while(|b| b.is_ascii_hexdigit()).count() > 15);
        if odd_line || long_size {
            return Some(Rule::StrictChunkLines);
        }
    }
    if why.contains("has no path") && method != "OPTIONS" && !target.starts_with('/') {
        return Some(Rule::OriginForm);
    }
    if why == "body over the limit" {
        return Some(Rule::BodyLimit);
    }
    None
}

/// Feeds `stream` to both parsers: Ok with the rule that explains where they part (None
/// where they agree), Err naming a disagreement no rule explains.
fn compare(runtime: &tokio::runtime::Runtime, stream: &[u8]) -> Result<Option<Rule>, String> {
    let ours = decode_stream(stream, usize::MAX);
    let theirs = hyper_serves(runtime, stream);
    let shown = String::from_utf8_lossy(stream);
    let (served, they_served) = (ours.requests.len(), theirs.requests.len());
    let both = served.min(they_served);
    if theirs.requests[..both] != ours.requests[..both] {
        return Err(format!("the requests of {shown:?} differ: hyper {theirs:?}; Drover {ours:?}"));
    }
    if they_served < served {
        return hyper_refuses(&stream[ours.starts[they_served]..]).map(Some).ok_or_else(|| {
            format!("hyper refused a request Drover served, with no rule for it: {shown:?}; hyper: {theirs:?}; Drover: {ours:?}")
        });
    }
    match &ours.end {
        // Drover ends every HTTP/1.0 connection after its first request (no keep-alive for
        // 1.0); hyper may go on, so only what came before is compared.
        End::Clean if ours.closed_after == Some(Version::HTTP_10) => Ok(None),
        End::Clean if theirs.clean && they_served == served => Ok(None),
        End::Clean => Err(format!("Drover accepted {shown:?} whole, hyper did not: {theirs:?}; Drover: {ours:?}")),
        // Both refused the same request, or the stream ended inside one (or after stray line
        // ends) and neither served it: hyper calls that end clean when no request had begun;
        // Drover answers nothing either way.
        End::Refused(why) if they_served == served && (!theirs.clean || why == CUT_SHORT) => Ok(None),
        End::Refused(why) => drover_refuses(why, &stream[ours.starts[served]..])
            .map(Some)
            .ok_or_else(|| format!("Drover refused ({why}) a request hyper served, with no rule for it: {shown:?}; hyper: {theirs:?}")),
    }
}

#[test]
fn the_decoder_and_hypers_parser_agree_on_framing() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    bolero::check!().with_iterations(ITERATIONS).with_max_len(2048).for_each(|input: &[u8]| {
        if let Err(disagreement) = compare(&runtime, &expand(input)) {
            panic!("{disagreement}");
        }
    });
}

/// Every named difference is one the corpus actually shows: a rule no input needs would be a
/// skip in disguise.
#[test]
fn every_known_difference_is_seen_in_the_corpus() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/__fuzz__/the_decoder_and_hypers_parser_agree_on_framing/corpus");
    let mut seen = std::collections::BTreeSet::new();
    let mut streams: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("the corpus")
        .map(|entry| {
            let path = entry.expect("a corpus entry").path();
            (path.display().to_string(), expand(&std::fs::read(&path).expect("a corpus file")))
        })
        .collect();
    // A body one byte over the limit is a megabyte: made here rather than checked in.
    let mut over = format!("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n", LIMIT + 1).into_bytes();
    over.resize(over.len() + LIMIT + 1, b'x');
    streams.push(("a body one byte over the limit".to_owned(), over));
    for (path, stream) in streams {
        match compare(&runtime, &stream) {
            Ok(Some(rule)) => {
                seen.insert(format!("{rule:?}"));
            }
            Ok(None) => {}
            Err(disagreement) => panic!("{path}: {disagreement}"),
        }
    }
    let all = [
        Rule::LengthWithTransferEncoding,
        Rule::ExactlyOneHost,
        Rule::HeadBounds,
        Rule::OnlyChunked,
        Rule::OnlyContinueExpected,
        Rule::StrictChunkLines,
        Rule::OriginForm,
        Rule::BodyLimit,
        Rule::RepeatedLength,
        Rule::TrailersDiscarded,
    ];
    let missing: Vec<String> = all.iter().map(|r| format!("{r:?}")).filter(|r| !seen.contains(r)).collect();
    assert!(missing.is_empty(), "no corpus input shows {missing:?} (seen: {seen:?})");
}
