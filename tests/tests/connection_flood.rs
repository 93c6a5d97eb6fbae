//! Connection exhaustion (issue 23), with real sockets against a coordinator whose caps are
//! small: a client without a certificate can complete the TLS handshake (enrollment needs it),
//! so idle anonymous connections must neither lock agents and operators out nor be held past
//! their deadlines.
//!
//! - `an_idle_unauthenticated_flood_does_not_lock_out_operators_and_every_flood_connection_closes`:
//!   40 anonymous TLS connections from 10 source addresses: past the unauthenticated cap the
//!   newest are closed at once, the rest within the first-request deadline; an operator is
//!   served throughout; `/metrics` counts both.
//! - `stalled_handshakes_are_capped_per_source_and_dropped_at_their_deadline`: raw TCP
//!   connections that never start TLS.
//! - `an_idle_h2_connection_without_a_certificate_is_closed`: hyper's HTTP/2 server has no idle
//!   deadline of its own; the listener's watch closes it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_coordinator::config::ConnectionsConfig;
use drover_tests::Harness;
use rustls::pki_types::pem::PemObject as _;
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpSocket, TcpStream};

async fn flooded() -> Harness {
    Harness::start_with_config(|_, c| {
        c.connections = ConnectionsConfig {
            max_unauthenticated: 8,
            max_unauthenticated_per_source: 4,
            handshake_secs: 1,
            first_request_secs: 1,
            unauthenticated_idle_secs: 1,
            ..ConnectionsConfig::default()
        };
    })
    .await
}

fn addr(h: &Harness) -> SocketAddr {
    h.url.trim_start_matches("https://").parse().expect("addr")
}

async fn tcp_from(source: &str, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().expect("socket");
    s.bind(format!("{source}:0").parse().expect("source")).expect("bind");
    s.connect(to).await.expect("connect")
}

fn tls_config(h: &Harness, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let pem = std::fs::read(h.endpoint().ca).expect("ca");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("pem")).expect("root");
    }
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

/// How long until the server closes `stream` (EOF or reset), bounded by `within`.
async fn closed_after<S: tokio::io::AsyncRead + Unpin>(mut stream: S, started: Instant, within: Duration) -> Option<Duration> {
    let mut buf = [0u8; 512];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_unauthenticated_flood_does_not_lock_out_operators_and_every_flood_connection_closes() {
    let h = flooded().await;
    let to = addr(&h);
    let tls = tokio_rustls::TlsConnector::from(tls_config(&h, &[b"http/1.1"]));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let started = Instant::now();
    let mut flood = Vec::new();
    for i in 0..40 {
        let source = format!("127.0.0.{}", 10 + i % 10);
        let tcp = tcp_from(&source, to).await;
        // The handshake completes (no certificate is needed for it); then the client idles.
        if let Ok(stream) = tls.connect(name.clone(), tcp).await {
            flood.push(tokio::spawn(closed_after(stream, started, Duration::from_secs(30))));
        }
    }
    // Operators are served while the flood holds every unauthenticated slot.
    for _ in 0..3 {
        let (code, body) = h.call(Some(&h.viewer), "GET", "/v1/hosts", None).await;
        assert_eq!(code, "200", "{body}");
    }
    let mut times = Vec::new();
    for f in flood {
        times.push(f.await.expect("join").expect("every flood connection is closed within 30 s"));
    }
    times.sort();
    let late = times.iter().filter(|t| **t > Duration::from_millis(800)).count();
    assert!(late <= 8, "at most the unauthenticated cap waits for its deadline: {times:?}");
    assert!(times.iter().all(|t| *t < Duration::from_secs(5)), "closed by the first-request deadline (1 s): {times:?}");
    let (code, metrics) = h.call(Some(&h.viewer), "GET", "/metrics", None).await;
    assert_eq!(code, "200");
    let refused: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("drover_connections_refused_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(refused >= 32, "the newest past the cap are refused and counted: {refused}\n{metrics}");
    assert!(metrics.contains("drover_connections_timed_out_total{deadline=\"first_request\"}"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_handshakes_are_capped_per_source_and_dropped_at_their_deadline() {
    let h = flooded().await;
    let to = addr(&h);
    let started = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..6 {
        stalled.push(tokio::spawn(closed_after(tcp_from("127.0.0.7", to).await, started, Duration::from_secs(30))));
    }
    let (code, body) = h.call(Some(&h.admin), "GET", "/v1/hosts", None).await;
    assert_eq!(code, "200", "an operator is served beside stalled handshakes: {body}");
    let mut times: Vec<Duration> = Vec::new();
    for s in stalled {
        times.push(s.await.expect("join").expect("closed within 30 s"));
    }
    times.sort();
    assert!(times[1] < Duration::from_millis(800), "past the per-source cap (4) the newest are closed at once: {times:?}");
    assert!(
        times[2..].iter().all(|t| *t >= Duration::from_millis(800) && *t < Duration::from_secs(5)),
        "the rest at the handshake deadline (1 s): {times:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_h2_connection_without_a_certificate_is_closed() {
    let h = flooded().await;
    let tls = tokio_rustls::TlsConnector::from(tls_config(&h, &[b"h2"]));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let stream = tls.connect(name, tcp_from("127.0.0.1", addr(&h)).await).await.expect("handshake");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let started = Instant::now();
    let closed = closed_after(stream, started, Duration::from_secs(30)).await.expect("closed within 30 s");
    assert!(
        closed >= Duration::from_millis(800) && closed < Duration::from_secs(10),
        "held until the first-request deadline (1 s), closed within the shutdown grace: {closed:?}"
    );
}
