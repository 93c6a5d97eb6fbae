//! Connection exhaustion, with real sockets against a coordinator whose caps are
//! small: a client without a certificate can complete the TLS handshake (enrollment needs it),
//! so idle anonymous connections must neither lock agents and operators out nor be held past
//! their deadlines.
//!
//! - `an_anonymous_flood_from_one_address_does_not_lock_out_an_agent_or_an_operator_at_that_address`:
//!   40 idle anonymous TLS connections from 127.0.0.1 (per-source cap 4): every handshake
//!   completes, the oldest idle ones are evicted to make room, an agent, an operator and a
//!   new anonymous client from the same address are served; `/metrics` counts the evictions.
//! - `stalled_handshakes_wait_for_their_sources_slots_and_are_dropped_at_their_deadline`: raw
//!   TCP connections that never start TLS wait (never refused) and go at the deadline.
//! - `behind_a_proxy_protocol_balancer_the_caps_see_each_client_and_an_operator_is_served`:
//!   the same flood through a PROXY v2 sender; the caps count the client the header names.
//! - `a_proxy_header_from_an_address_that_is_not_a_balancer_is_refused`.
//! - `an_idle_h2_connection_without_a_certificate_is_closed`: hyper's HTTP/2 server has no idle
//!   deadline of its own; the listener's watch closes it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_engine::config::ConnectionsConfig;
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
async fn an_anonymous_flood_from_one_address_does_not_lock_out_an_agent_or_an_operator_at_that_address() {
    let h = flooded().await;
    let to = addr(&h);
    let (_, agent, _) = h.host_credentials("flood-agent");
    let tls = tokio_rustls::TlsConnector::from(tls_config(&h, &[b"http/1.1"]));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let started = Instant::now();
    let mut flood = Vec::new();
    // Idle anonymous TLS connections from the address the agent and the operator use (a
    // NAT, a load balancer without PROXY protocol): ten times the per-source cap.
    for _ in 0..40 {
        let tcp = tcp_from("127.0.0.1", to).await;
        if let Ok(stream) = tls.connect(name.clone(), tcp).await {
            flood.push(tokio::spawn(closed_after(stream, started, Duration::from_secs(30))));
        }
    }
    assert_eq!(flood.len(), 40, "every anonymous handshake completes: none is refused before it could authenticate");
    // A client with a certificate from the same address is served: its handshake never
    // counted against the anonymous caps.
    for _ in 0..3 {
        let (code, body) = h.call(Some(&h.viewer), "GET", "/v1/hosts", None).await;
        assert_eq!(code, "200", "{body}");
        let (code, body) = h.call(Some(&agent), "GET", "/v1/rollouts/canary-0000000000000000/proof", None).await;
        assert!(code.starts_with('4'), "the agent's request reached its route (000 would be a refused connection): {code} {body}");
    }
    // So is a new anonymous client (enrollment): the oldest idle one made room for it.
    let (code, body) = h.call(None, "GET", "/v1/ca.crt", None).await;
    assert_eq!(code, "200", "{body}");
    let mut times = Vec::new();
    for f in flood {
        times.push(f.await.expect("join").expect("every flood connection is closed within 30 s"));
    }
    times.sort();
    let prompt = times.iter().filter(|t| **t < Duration::from_millis(800)).count();
    assert!(prompt >= 36, "all but the per-source cap's four were evicted at once: {times:?}");
    assert!(times.iter().all(|t| *t < Duration::from_secs(5)), "the rest by the first-request deadline (1 s): {times:?}");
    let metrics = metrics(&h).await;
    assert!(sample(&metrics, "drover_connections_evicted_total{cap=\"per_source\"}") >= 36.0, "{metrics}");
    assert_eq!(sample(&metrics, "drover_connections_refused_total{reason=\"per_source\"}"), 0.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_handshakes_wait_for_their_sources_slots_and_are_dropped_at_their_deadline() {
    let h = flooded().await;
    let to = addr(&h);
    let started = Instant::now();
    let mut stalled = Vec::new();
    // Raw TCP that never starts TLS, more than the source's four handshake slots.
    for _ in 0..6 {
        stalled.push(tokio::spawn(closed_after(tcp_from("127.0.0.7", to).await, started, Duration::from_secs(30))));
    }
    let (code, body) = h.call(Some(&h.admin), "GET", "/v1/hosts", None).await;
    assert_eq!(code, "200", "an operator from another address is served beside stalled handshakes: {body}");
    let mut times: Vec<Duration> = Vec::new();
    for s in stalled {
        times.push(s.await.expect("join").expect("closed within 30 s"));
    }
    assert!(
        times.iter().all(|t| *t >= Duration::from_millis(800) && *t < Duration::from_secs(5)),
        "none refused at once; all dropped at the handshake deadline (1 s), waiting included: {times:?}"
    );
    let metrics = metrics(&h).await;
    assert!(sample(&metrics, "drover_connections_timed_out_total{deadline=\"handshake\"}") >= 6.0, "{metrics}");
}

/// A PROXY protocol v2 header naming `client`, as a load balancer sends it.
fn proxy_header(client: SocketAddr, to: SocketAddr) -> Vec<u8> {
    use ppp::v2::{Builder, Command, IPv4, Protocol, Version};
    let (SocketAddr::V4(c), SocketAddr::V4(t)) = (client, to) else { panic!("IPv4 only") };
    Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, IPv4::new(*c.ip(), *t.ip(), c.port(), t.port()))
        .build()
        .expect("header")
}

/// A TLS connection through the "balancer" at 127.0.0.50 on behalf of `client`.
async fn through_balancer(
    h: &Harness,
    client: &str,
    tls: &tokio_rustls::TlsConnector,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use tokio::io::AsyncWriteExt as _;
    let to = addr(h);
    let mut tcp = tcp_from("127.0.0.50", to).await;
    tcp.write_all(&proxy_header(client.parse().expect("client"), to)).await?;
    tls.connect(rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name"), tcp).await
}

/// One HTTP/1.1 GET on `stream`; the status code.
async fn get_status<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S, path: &str) -> Option<u16> {
    use tokio::io::AsyncWriteExt as _;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await.ok()?;
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut all)).await.ok()?.ok()?;
    std::str::from_utf8(all.get(9..12)?).ok()?.parse().ok()
}

fn operator_tls(h: &Harness) -> tokio_rustls::TlsConnector {
    let pem = std::fs::read(h.endpoint().ca).expect("ca");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("pem")).expect("root");
    }
    let chain: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(&h.admin.0).expect("cert").map(|c| c.expect("pem")).collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&h.admin.1).expect("key");
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client auth");
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn behind_a_proxy_protocol_balancer_the_caps_see_each_client_and_an_operator_is_served() {
    let h = Harness::start_with_config(|_, c| {
        c.connections = ConnectionsConfig {
            max_unauthenticated: 8,
            max_unauthenticated_per_source: 4,
            handshake_secs: 2,
            first_request_secs: 5,
            unauthenticated_idle_secs: 5,
            proxy_protocol_from: vec!["127.0.0.50".parse().expect("ip")],
            ..ConnectionsConfig::default()
        };
    })
    .await;
    let anonymous = tokio_rustls::TlsConnector::from(tls_config(&h, &[b"http/1.1"]));
    let started = Instant::now();
    // Four idle anonymous clients behind the balancer at 203.0.113.10 ...
    let mut quiet = Vec::new();
    for i in 0..4 {
        let s = through_balancer(&h, &format!("203.0.113.10:{}", 40_000 + i), &anonymous).await.expect("handshake");
        quiet.push(tokio::spawn(closed_after(s, started, Duration::from_secs(30))));
    }
    // ... and a flood from 203.0.113.9 through the same balancer.
    let mut flood = Vec::new();
    for i in 0..20 {
        let s = through_balancer(&h, &format!("203.0.113.9:{}", 41_000 + i), &anonymous).await.expect("handshake");
        flood.push(tokio::spawn(closed_after(s, started, Duration::from_secs(30))));
    }
    // An operator behind the balancer, from the flooding client's own address, is served.
    let op = through_balancer(&h, "203.0.113.9:50000", &operator_tls(&h)).await.expect("operator handshake");
    assert_eq!(get_status(op, "/v1/hosts").await, Some(200));
    let mut flood_times = Vec::new();
    for f in flood {
        flood_times.push(f.await.expect("join").expect("closed"));
    }
    let evicted_at_once = flood_times.iter().filter(|t| **t < Duration::from_secs(2)).count();
    assert!(evicted_at_once >= 16, "the flooding client's own oldest idle connections made room: {flood_times:?}");
    for q in quiet {
        let t = q.await.expect("join").expect("closed at the first-request deadline");
        assert!(t >= Duration::from_secs(4), "the other client's connections were not touched by the flood: {t:?}");
    }
    let metrics = metrics(&h).await;
    assert!(sample(&metrics, "drover_connections_evicted_total{cap=\"per_source\"}") >= 16.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proxy_header_from_an_address_that_is_not_a_balancer_is_refused() {
    use tokio::io::AsyncWriteExt as _;
    let h = Harness::start_with_config(|_, c| {
        c.connections.proxy_protocol_from = vec!["127.0.0.50".parse().expect("ip")];
    })
    .await;
    let to = addr(&h);
    let started = Instant::now();
    // Anyone else claiming an address is closed before the handshake.
    let mut forged = tcp_from("127.0.0.60", to).await;
    forged.write_all(&proxy_header("198.51.100.1:1234".parse().expect("a"), to)).await.expect("write");
    assert!(closed_after(forged, started, Duration::from_secs(10)).await.is_some_and(|t| t < Duration::from_secs(2)));
    // The balancer itself must send one: a bare TLS hello from it is refused.
    let anonymous = tokio_rustls::TlsConnector::from(tls_config(&h, &[b"http/1.1"]));
    let bare = tcp_from("127.0.0.50", to).await;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    assert!(anonymous.connect(name, bare).await.is_err(), "no handshake without the header");
    let metrics = metrics(&h).await;
    assert_eq!(sample(&metrics, "drover_connections_refused_total{reason=\"proxy_protocol\"}"), 2.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_source_past_its_anonymous_rate_is_answered_429_and_an_operator_at_that_address_is_not() {
    let h = Harness::start_with_config(|_, c| {
        c.connections.anonymous_requests_per_sec = 1;
        c.connections.anonymous_burst = 3;
    })
    .await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(h.call(None, "GET", "/healthz", None).await.0);
    }
    assert_eq!(codes, ["200", "200", "200"], "the burst is served");
    // The next, well within the second the bucket needs for another token.
    let out = h.curl(vec!["-sS".into(), "-D".into(), "-".into(), "-o".into(), "/dev/null".into(), format!("{}/v1/ca.crt", h.url)]).await;
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 429"), "then the source waits for its bucket: {head}");
    assert!(head.contains("retry-after: 1"), "a 429 says when to come back: {head}");
    let (code, body) = h.call(Some(&h.viewer), "GET", "/v1/hosts", None).await;
    assert_eq!(code, "200", "requests with a certificate never meet the anonymous limit: {body}");
    let metrics = metrics(&h).await;
    assert!(sample(&metrics, "drover_anonymous_requests_limited_total") >= 1.0, "{metrics}");
}

async fn metrics(h: &Harness) -> String {
    let (code, metrics) = h.call(Some(&h.viewer), "GET", "/metrics", None).await;
    assert_eq!(code, "200");
    metrics
}

fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{name} not in the metrics:\n{metrics}"))
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
