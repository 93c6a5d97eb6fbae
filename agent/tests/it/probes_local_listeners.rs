//! HTTP and TCP probes against real local listeners: a tiny HTTP responder, an HTTPS one with
//! a throwaway CA, a listener that accepts and never answers, a refused port, and a full
//! accept queue (the kernel drops the SYN, so the connect really hangs).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use drover_agent::exec::SystemRunner;
use drover_agent::probes::ProbeRunner;
use drover_proto::report::ProbeOutcome;
use drover_proto::spec::{Mode, ProbeKind, ProbeSpec};

fn runner() -> ProbeRunner {
    ProbeRunner::with_roots(Arc::new(SystemRunner), Vec::new()).expect("runner")
}

fn http_spec(url: String, expect_status: Option<u16>, timeout_secs: u64) -> ProbeSpec {
    ProbeSpec {
        name: "http".to_owned(),
        kind: ProbeKind::Http,
        command: None,
        url: Some(url),
        expect_status,
        host: None,
        port: None,
        timeout_secs,
        mode: Mode::Enforce,
    }
}

fn tcp_spec(addr: SocketAddr, timeout_secs: u64) -> ProbeSpec {
    ProbeSpec {
        name: "tcp".to_owned(),
        kind: ProbeKind::Tcp,
        command: None,
        url: None,
        expect_status: None,
        host: Some(addr.ip().to_string()),
        port: Some(addr.port()),
        timeout_secs,
        mode: Mode::Observe,
    }
}

/// Reads one request head (up to the blank line) and writes `response`.
fn answer(mut conn: impl Read + Write, response: &str) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let _ = conn.write_all(response.as_bytes());
    let _ = conn.flush();
}

/// An HTTP responder on 127.0.0.1 answering one request with `status_line`.
fn responder(status_line: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        if let Ok((conn, _)) = listener.accept() {
            answer(conn, &format!("HTTP/1.1 {status_line}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
        }
    });
    addr
}

/// A port nothing listens on (bound, then released).
fn refused_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

#[tokio::test]
async fn http_probe_getting_the_default_expected_200_passes() {
    let addr = responder("200 OK");
    let r = runner().run(&http_spec(format!("http://{addr}/healthz"), None, 10)).await;
    assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::Passed, "status 200"));
}

#[tokio::test]
async fn http_probe_getting_another_status_fails() {
    let addr = responder("503 Service Unavailable");
    let r = runner().run(&http_spec(format!("http://{addr}/"), None, 10)).await;
    assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::Failed, "status 503 (expected 200)"));
}

#[tokio::test]
async fn http_probe_passes_on_its_configured_expected_status() {
    let addr = responder("204 No Content");
    let r = runner().run(&http_spec(format!("http://{addr}/"), Some(204), 10)).await;
    assert_eq!(r.outcome, ProbeOutcome::Passed, "{r:?}");
}

#[tokio::test]
async fn http_probe_does_not_follow_redirects() {
    let addr = responder("302 Found\r\nLocation: http://127.0.0.1:1/");
    let r = runner().run(&http_spec(format!("http://{addr}/"), None, 10)).await;
    assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::Failed, "status 302 (expected 200)"));
}

#[tokio::test]
async fn http_probe_to_a_server_that_accepts_but_never_answers_is_a_probe_error() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            // Hold the connection open without answering until the client gives up.
            let mut sink = Vec::new();
            let _ = conn.read_to_end(&mut sink);
        }
    });
    let r = runner().run(&http_spec(format!("http://{addr}/"), None, 1)).await;
    assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::ProbeError, "no answer within 1 s"));
    assert!((1000..10_000).contains(&r.duration_ms), "{r:?}");
}

#[tokio::test]
async fn http_probe_to_a_refused_port_is_a_probe_error() {
    let addr = refused_port();
    let r = runner().run(&http_spec(format!("http://{addr}/"), None, 5)).await;
    assert_eq!(r.outcome, ProbeOutcome::ProbeError, "{r:?}");
    assert!(r.message.contains("Connection refused") || r.message.contains("connection refused"), "{r:?}");
}

#[tokio::test]
async fn https_probe_is_verified_against_the_given_roots() {
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("self-signed certificate");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key_pair.serialize_der().into());
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        // Two connections: the trusting probe's, then the untrusting one's (its handshake fails).
        for _ in 0..2 {
            let Ok((tcp, _)) = listener.accept().await else { return };
            if let Ok(tls) = acceptor.accept(tcp).await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut tls = tls;
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
                let _ = tls.shutdown().await;
            }
        }
    });
    let url = format!("https://localhost:{port}/");
    let trusting = ProbeRunner::with_roots(Arc::new(SystemRunner), vec![cert.der().clone()]).expect("runner");
    let r = trusting.run(&http_spec(url.clone(), None, 10)).await;
    assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::Passed, "status 200"), "{r:?}");

    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("other CA");
    let untrusting = ProbeRunner::with_roots(Arc::new(SystemRunner), vec![other.cert.der().clone()]).expect("runner");
    let r = untrusting.run(&http_spec(url, None, 10)).await;
    assert_eq!(r.outcome, ProbeOutcome::ProbeError, "{r:?}");
}

#[tokio::test]
async fn tcp_probe_to_a_listening_port_passes_and_keeps_observe_mode() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let r = runner().run(&tcp_spec(listener.local_addr().expect("addr"), 5)).await;
    assert_eq!((r.outcome, r.mode), (ProbeOutcome::Passed, Mode::Observe), "{r:?}");
}

#[tokio::test]
async fn tcp_probe_to_a_refused_port_fails() {
    let r = runner().run(&tcp_spec(refused_port(), 5)).await;
    assert_eq!(r.outcome, ProbeOutcome::Failed, "{r:?}");
    assert!(r.message.ends_with("connection refused"), "{r:?}");
}

#[tokio::test]
async fn tcp_probe_to_a_listener_whose_accept_queue_is_full_times_out_as_a_probe_error() {
    // Backlog 0: the kernel queues one connection; further SYNs are dropped, not refused.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let listener = socket.listen(0).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let mut held = Vec::new();
    let mut queue_full = false;
    for _ in 0..16 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(conn) => held.push(conn),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock => {
                queue_full = true;
                break;
            }
            Err(e) => panic!("unexpected connect error: {e}"),
        }
    }
    assert!(queue_full, "the accept queue never filled after {} connections", held.len());
    let r = runner().run(&tcp_spec(addr, 1)).await;
    assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::ProbeError, "no answer within 1 s"));
    drop(listener);
}
