//! The coordinator's HTTP/1.1 connection layer against raw bytes: keep-alive and
//! pipelining, bodies by length and chunked, and the framing attacks it must refuse.
//! (The full stack, TLS and curl included, is exercised by the workspace's end-to-end tests.)

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::routing::{get, post};
use drover_engine::api::auth::Peer;
use drover_engine::conn_limits::ConnLimits;
use drover_engine::http1::{HEADER_READ_TIMEOUT, IDLE_TIMEOUT, MAX_HEAD_BYTES, serve_connection};
use drover_engine::server::Waits;
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::Notify;

/// Counts handler runs, and signals when a parked handler is dropped.
#[derive(Default)]
struct Seen {
    calls: AtomicUsize,
    dropped: Notify,
}

struct DropSignal(Arc<Seen>);
impl Drop for DropSignal {
    fn drop(&mut self) {
        self.0.dropped.notify_one();
    }
}

fn router(seen: Arc<Seen>) -> Router {
    let s1 = seen.clone();
    let s2 = seen.clone();
    Router::new()
        .route(
            "/echo",
            post(move |body: Bytes| {
                s1.calls.fetch_add(1, Ordering::SeqCst);
                async move { body }
            }),
        )
        .route("/hello", get(|| async { "hello" }))
        .route("/big", get(|| async { vec![b'x'; 4 << 20] }))
        .route("/nothing", get(|| async { axum::http::StatusCode::NO_CONTENT }))
        .route("/stream", get(|| async { Body::new(Pieces(VecDeque::from(["first,", "second"]))) }))
        .route(
            "/park",
            post(move || {
                let guard = DropSignal(s2.clone());
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                    "never"
                }
            }),
        )
}

/// A body of unknown length (so the answer must be chunked).
struct Pieces(VecDeque<&'static str>);

impl HttpBody for Pieces {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|s| Ok(Frame::data(Bytes::from_static(s.as_bytes())))))
    }
}

fn start(seen: Arc<Seen>) -> DuplexStream {
    start_with_buffer(seen, 1 << 20).0
}

/// The client's end and the server's task, over a pipe of `buffer` bytes each way.
fn start_with_buffer(seen: Arc<Seen>, buffer: usize) -> (DuplexStream, tokio::task::JoinHandle<()>) {
    let (client, server) = tokio::io::duplex(buffer);
    let remote: SocketAddr = "192.0.2.7:40000".parse().expect("addr");
    // The listener's per-connection waits as an authenticated connection has them.
    let waits = Waits { first: IDLE_TIMEOUT, idle: IDLE_TIMEOUT };
    let limits = ConnLimits::new(Default::default(), drover_engine::api::body_limit);
    let task = tokio::spawn(serve_connection(server, remote, Peer::Anonymous, router(seen), waits, limits, None));
    (client, task)
}

/// Sends `request` on a new connection and returns everything the server sent until it
/// closed.
async fn exchange(request: &[u8]) -> String {
    let mut c = start(Arc::new(Seen::default()));
    c.write_all(request).await.expect("write");
    read_to_close(&mut c).await
}

/// Reads until the server closes; everything it sent.
async fn read_to_close(client: &mut DuplexStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut out)).await.expect("server closes").expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one response with a Content-Length (or none), leaving the connection open.
async fn read_response(client: &mut DuplexStream) -> (u16, String, String) {
    let mut buf = Vec::new();
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut fields);
        if let httparse::Status::Complete(n) = resp.parse(&buf).expect("a valid response") {
            let code = resp.code.expect("code");
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let len: usize = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).expect("utf8").parse().expect("number"))
                .unwrap_or(0);
            while buf.len() < n + len {
                read_more(client, &mut buf).await;
            }
            return (code, head, String::from_utf8_lossy(&buf[n..n + len]).into_owned());
        }
        read_more(client, &mut buf).await;
    }
}

/// Appends what the server sends next (bounded in time; the server closing is a failure).
async fn read_more(client: &mut DuplexStream, buf: &mut Vec<u8>) {
    let mut more = [0u8; 4096];
    let got = tokio::time::timeout(Duration::from_secs(30), client.read(&mut more)).await.expect("answer").expect("read");
    assert!(got > 0, "closed before the whole answer: {:?}", String::from_utf8_lossy(buf));
    buf.extend_from_slice(&more[..got]);
}

#[tokio::test]
async fn keep_alive_serves_requests_in_sequence() {
    let seen = Arc::new(Seen::default());
    let mut c = start(seen.clone());
    for body in ["one", "two"] {
        let req = format!("POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        c.write_all(req.as_bytes()).await.expect("write");
        let (code, head, answer) = read_response(&mut c).await;
        assert_eq!(code, 200, "{head}");
        assert_eq!(answer, body);
        assert!(!head.to_ascii_lowercase().contains("connection: close"), "{head}");
    }
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let mut c = start(Arc::new(Seen::default()));
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: 1\r\n\r\naPOST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: 1\r\nConnection: close\r\n\r\nb")
        .await
        .expect("write");
    let all = read_to_close(&mut c).await;
    let first = all.find("\r\n\r\na").expect("first answer");
    let second = all.find("\r\n\r\nb").expect("second answer");
    assert!(first < second, "{all}");
    assert!(all.to_ascii_lowercase().contains("connection: close"), "{all}");
}

#[tokio::test]
async fn content_length_with_transfer_encoding_is_refused_as_smuggling() {
    let seen = Arc::new(Seen::default());
    let mut c = start(seen.clone());
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /hello HTTP/1.1\r\nHost: c\r\n\r\n")
        .await
        .expect("write");
    let all = read_to_close(&mut c).await;
    assert!(all.starts_with("HTTP/1.1 400 "), "{all}");
    assert!(all.contains("both Content-Length and Transfer-Encoding"), "{all}");
    // The smuggled request behind it never ran.
    assert!(!all.contains("hello"), "{all}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn differing_content_lengths_are_refused_as_smuggling() {
    let all = exchange(b"POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab").await;
    assert!(all.starts_with("HTTP/1.1 400 "), "{all}");
    assert!(all.contains("differing Content-Length"), "{all}");
}

#[tokio::test]
async fn signed_content_length_is_refused() {
    let all = exchange(b"POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: +1\r\n\r\na").await;
    assert!(all.starts_with("HTTP/1.1 400 ") && all.contains("invalid Content-Length"), "{all}");
}

#[tokio::test]
async fn unknown_transfer_coding_is_a_4xx_naming_it() {
    let all = exchange(b"POST /echo HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").await;
    assert!(all.starts_with("HTTP/1.1 400 "), "{all}");
    assert!(all.contains("transfer coding \\\"gzip, chunked\\\" is not supported"), "{all}");
}

#[tokio::test]
async fn chunked_body_is_decoded_with_extensions_and_trailers() {
    let mut c = start(Arc::new(Seen::default()));
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n")
        .await
        .expect("write");
    let (code, _, body) = read_response(&mut c).await;
    assert_eq!((code, body.as_str()), (200, "hello, world"));
}

#[tokio::test]
async fn chunk_longer_than_its_size_is_refused() {
    let all = exchange(b"POST /echo HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n").await;
    assert!(all.starts_with("HTTP/1.1 400 ") && all.contains("chunk data longer than its size"), "{all}");
}

#[tokio::test]
async fn oversized_head_is_431() {
    let mut c = start(Arc::new(Seen::default()));
    let req = format!("GET /hello HTTP/1.1\r\nHost: c\r\nX-Junk: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES));
    c.write_all(req.as_bytes()).await.expect("write");
    let all = read_to_close(&mut c).await;
    assert!(all.starts_with("HTTP/1.1 431 "), "{all}");
}

#[tokio::test]
async fn missing_host_is_400() {
    let all = exchange(b"GET /hello HTTP/1.1\r\n\r\n").await;
    assert!(all.starts_with("HTTP/1.1 400 ") && all.contains("Host"), "{all}");
}

#[tokio::test]
async fn garbage_instead_of_a_request_is_400() {
    let all = exchange(b"\x16\x03\x01 not http at all\r\n\r\n").await;
    assert!(all.starts_with("HTTP/1.1 400 "), "{all}");
    assert!(all.contains("\"code\":\"bad_request\""), "the API's error shape: {all}");
}

#[tokio::test(start_paused = true)]
async fn slowloris_head_times_out_with_408() {
    let mut c = start(Arc::new(Seen::default()));
    c.write_all(b"GET /hello HTTP/1.1\r\nHost: c\r\n").await.expect("write");
    // Paused time: the server's deadline passes as soon as everything is idle.
    let all = read_to_close(&mut c).await;
    assert!(all.starts_with("HTTP/1.1 408 "), "{all}");
    assert!(HEADER_READ_TIMEOUT < Duration::from_secs(30));
}

#[tokio::test]
async fn oversized_body_with_expect_continue_is_413_unread() {
    let seen = Arc::new(Seen::default());
    let mut c = start(seen.clone());
    let big = drover_engine::api::MAX_BODY_BYTES + 1;
    let req = format!("POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: {big}\r\nExpect: 100-continue\r\n\r\n");
    c.write_all(req.as_bytes()).await.expect("write");
    let all = read_to_close(&mut c).await;
    assert!(all.starts_with("HTTP/1.1 413 "), "{all}");
    assert!(!all.contains("100 Continue"), "{all}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn expect_continue_gets_an_interim_answer_then_the_response() {
    let mut c = start(Arc::new(Seen::default()));
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n").await.expect("write");
    let mut interim = vec![0u8; 25];
    c.read_exact(&mut interim).await.expect("read");
    assert_eq!(interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    c.write_all(b"ok").await.expect("write");
    let (code, _, body) = read_response(&mut c).await;
    assert_eq!((code, body.as_str()), (200, "ok"));
}

#[tokio::test]
async fn oversized_body_is_drained_and_413_keeps_the_connection() {
    let seen = Arc::new(Seen::default());
    let mut c = start(seen.clone());
    let big = drover_engine::api::MAX_BODY_BYTES + 10;
    let mut req = format!("POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: {big}\r\n\r\n").into_bytes();
    req.resize(req.len() + big, b'x');
    req.extend_from_slice(b"GET /hello HTTP/1.1\r\nHost: c\r\n\r\n");
    let (mut rd, mut wr) = tokio::io::split(c);
    let writer = tokio::spawn(async move { wr.write_all(&req).await.map(|_| wr) });
    let mut joined = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&joined).ends_with("hello") {
        let n = tokio::time::timeout(Duration::from_secs(30), rd.read(&mut buf)).await.expect("answers").expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&joined));
        joined.extend_from_slice(&buf[..n]);
    }
    let all = String::from_utf8_lossy(&joined);
    assert!(all.starts_with("HTTP/1.1 413 "), "{all}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 0);
    c = rd.unsplit(writer.await.expect("join").expect("write"));
    drop(c);
}

#[tokio::test]
async fn head_and_204_carry_no_body_and_unknown_length_is_chunked() {
    let mut c = start(Arc::new(Seen::default()));
    c.write_all(b"HEAD /hello HTTP/1.1\r\nHost: c\r\n\r\nGET /nothing HTTP/1.1\r\nHost: c\r\n\r\nGET /stream HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let all = read_to_close(&mut c).await;
    let answers: Vec<&str> = all.split("HTTP/1.1 ").filter(|s| !s.is_empty()).collect();
    assert_eq!(answers.len(), 3, "{all}");
    assert!(answers[0].starts_with("200 ") && answers[0].contains("content-length: 5") && answers[0].ends_with("\r\n\r\n"), "{all}");
    assert!(answers[1].starts_with("204 ") && !answers[1].contains("content-length"), "{all}");
    assert!(answers[2].contains("transfer-encoding: chunked"), "{all}");
    assert!(answers[2].ends_with("6\r\nfirst,\r\n6\r\nsecond\r\n0\r\n\r\n"), "{all}");
}

#[tokio::test]
async fn abandoned_long_poll_is_dropped_when_the_client_leaves() {
    let seen = Arc::new(Seen::default());
    let c = start(seen.clone());
    let dropped = seen.dropped.notified();
    tokio::pin!(dropped);
    dropped.as_mut().enable();
    let mut c = c;
    c.write_all(b"POST /park HTTP/1.1\r\nHost: c\r\nContent-Length: 0\r\n\r\n").await.expect("write");
    drop(c);
    tokio::time::timeout(Duration::from_secs(30), dropped).await.expect("the parked handler is dropped");
}

#[tokio::test]
async fn truncated_body_never_reaches_the_handler() {
    let seen = Arc::new(Seen::default());
    let mut c = start(seen.clone());
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: c\r\nContent-Length: 10\r\n\r\nabc").await.expect("write");
    c.shutdown().await.expect("half-close");
    let all = read_to_close(&mut c).await;
    assert_eq!(all, "", "nobody left to answer");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn empty_transfer_encoding_beside_content_length_is_refused_as_smuggling() {
    let seen = Arc::new(Seen::default());
    let mut c = start(seen.clone());
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: ,\r\nContent-Length: 5\r\n\r\nhello").await.expect("write");
    let all = read_to_close(&mut c).await;
    assert!(all.starts_with("HTTP/1.1 400 ") && all.contains("both Content-Length and Transfer-Encoding"), "{all}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn bare_cr_in_a_chunk_size_line_is_refused() {
    let all = exchange(b"POST /echo HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\n5\r\r\nhello\r\n0\r\n\r\n").await;
    assert!(all.starts_with("HTTP/1.1 400 ") && all.contains("control character"), "{all}");
}

#[tokio::test]
async fn chunked_body_over_the_limit_is_413() {
    let seen = Arc::new(Seen::default());
    let mut c = start(seen.clone());
    let chunk = vec![b'x'; 64 * 1024];
    let mut req = b"POST /echo HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..(drover_engine::api::MAX_BODY_BYTES / chunk.len() + 1) {
        req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        req.extend_from_slice(&chunk);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    c.write_all(&req).await.expect("write");
    let (code, _, _) = read_response(&mut c).await;
    assert_eq!(code, 413);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn head_over_the_body_limit_gets_a_413_without_a_body_and_the_connection_stays_in_step() {
    let mut c = start(Arc::new(Seen::default()));
    let big = drover_engine::api::MAX_BODY_BYTES + 10;
    let mut req = format!("HEAD /hello HTTP/1.1\r\nHost: c\r\nContent-Length: {big}\r\n\r\n").into_bytes();
    req.resize(req.len() + big, b'x');
    req.extend_from_slice(b"GET /hello HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n");
    c.write_all(&req).await.expect("write");
    let all = read_to_close(&mut c).await;
    let answers: Vec<&str> = all.split("HTTP/1.1 ").filter(|s| !s.is_empty()).collect();
    assert_eq!(answers.len(), 2, "{all}");
    assert!(answers[0].starts_with("413 ") && answers[0].ends_with("\r\n\r\n"), "no body after a HEAD's 413: {all}");
    assert!(answers[1].starts_with("200 ") && answers[1].ends_with("hello"), "{all}");
}

#[tokio::test]
async fn http_1_0_is_answered_and_closed() {
    let all = exchange(b"GET /hello HTTP/1.0\r\n\r\n").await;
    assert!(all.starts_with("HTTP/1.1 200 ") && all.contains("connection: close") && all.ends_with("hello"), "{all}");
}

#[tokio::test(start_paused = true)]
async fn client_that_stops_reading_loses_its_connection() {
    let (mut c, task) = start_with_buffer(Arc::new(Seen::default()), 16 * 1024);
    c.write_all(b"GET /big HTTP/1.1\r\nHost: c\r\n\r\n").await.expect("write");
    // Never read: the 4 MiB answer fills the pipe, the write stalls, and (paused time
    // advancing while all is idle) the stall timeout ends the connection.
    tokio::time::timeout(Duration::from_secs(300), task).await.expect("the connection ends").expect("no panic");
    drop(c);
}
