//! The anonymous attacks, measured against a real `drover-coordinator serve`
//! process (its own CPU and memory, apart from the attacker's):
//!
//! 1. **The hammer**: `hammer_connections` TLS connections without a certificate, spread over
//!    `sources` loopback addresses, each sending every anonymous route in turn as fast as it
//!    is answered (`/healthz`, `/readyz`, the OpenAPI description, the bootstrap script, the
//!    agent binary and package, the CA, the trust roots, and enrollments with a real CSR and a
//!    wrong token), reconnecting when closed. Meanwhile an admin lists hosts over its own
//!    connection; its latency is compared with the same requests made before, quiet.
//! 2. **The body flood**: `body_connections` anonymous connections from four addresses, each
//!    sending an enrollment's head and all but the last byte of the largest body allowed, then
//!    holding it. The coordinator's resident memory is read before, at the peak, and every
//!    second after the flood's connections close, until it is back within 25 % of before.
//!
//! `drover-bench anonymous` runs it at the sizes (BENCHMARKS.md); the CI test
//! `tests/attacks/anonymous_attacks.rs` runs a small seeded version and holds the goals.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use drover_client::CoordinatorClient;
use drover_devkit::fleet::Coordinator;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

use crate::fleet::FleetError;
use crate::fleet::scenario::Scenario;

/// What to run.
#[derive(Debug, Clone)]
pub struct AttackOptions {
    /// Hosts in the published release (what a full verification of it costs grows with it).
    pub hosts: usize,
    /// Hammering connections.
    pub hammer_connections: usize,
    /// Source addresses they are spread over.
    pub sources: usize,
    /// Admin requests timed quiet, then again under the hammer.
    pub admin_requests: usize,
    /// Connections of the body flood.
    pub body_connections: usize,
    /// How long memory is watched after the flood, at most (the watch ends once it is back).
    pub settle_secs: u64,
    /// Extra `[connections]` settings for the coordinator (empty: its defaults).
    pub connections: String,
}

/// What was measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AttackReport {
    /// Admin latency before the hammer (ms).
    pub quiet_p50_ms: f64,
    /// The same, 99th percentile.
    pub quiet_p99_ms: f64,
    /// Admin latency under the hammer (ms).
    pub loaded_p50_ms: f64,
    /// The same, 99th percentile.
    pub loaded_p99_ms: f64,
    /// The hammer's answers by status code (0: the connection closed instead).
    pub hammer_answers: BTreeMap<u16, u64>,
    /// Coordinator CPU seconds during the hammer.
    pub hammer_cpu_secs: f64,
    /// The hammer's length (s).
    pub hammer_secs: f64,
    /// Resident memory before the body flood (MiB).
    pub rss_before_mib: f64,
    /// The highest seen during it (MiB).
    pub rss_flood_mib: f64,
    /// At the end of the watch (MiB).
    pub rss_after_mib: f64,
    /// Seconds after the flood closed until memory was within 25 % of before, if it was.
    pub rss_back_secs: Option<f64>,
    /// The flood's connections whose body was all sent.
    pub bodies_sent: usize,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs the attacks in `dir` against a coordinator started from `coordinator`, serving
/// `agent`.
pub async fn run(opts: &AttackOptions, coordinator: &Path, agent: &Path, dir: &Path) -> Result<AttackReport, FleetError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| FleetError::Io { path: path.clone(), source }
    };
    let trust_file = dir.join("trust.json");
    std::fs::write(&trust_file, crate::ci_trust_json()).map_err(io(&trust_file))?;
    let sections = if opts.connections.is_empty() { String::new() } else { format!("[connections]\n{}\n", opts.connections) };
    let server = Coordinator::start(dir, coordinator, agent, &trust_file, &sections).map_err(|e| FleetError::Setup(e.to_string()))?;
    let ca_pem = std::fs::read(&server.ca).map_err(io(&server.ca))?;
    let ca = drover_client::parse_certificates("ca", &ca_pem).map_err(FleetError::client("ca.crt"))?;
    let read = |p: &Path| std::fs::read(p).map_err(io(p));
    let identity = drover_client::ClientIdentity::from_pem(&read(&server.admin.0)?, &read(&server.admin.1)?)
        .map_err(FleetError::client("admin credential"))?;
    let admin = CoordinatorClient::new("drover-bench", std::slice::from_ref(&server.url), &ca, Some(identity), Duration::from_secs(60))
        .map_err(FleetError::client("admin client"))?;

    // A release of `hosts` hosts, so that verifying it costs what it would in that fleet.
    let scenario = Scenario::of(opts.hosts);
    let signer = KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&crate::CI_KEY));
    let files = scenario.release(&scenario.hosts(), 1, &signer, crate::wall_now())?;
    let request =
        PublishRequest::from_files(&files, Some("drover-bench".into())).ok_or_else(|| FleetError::Setup("release not UTF-8".into()))?;
    let _: serde_json::Value = admin.post_json("/v1/releases", &request).await.map_err(FleetError::client("publish"))?;

    let mut report = AttackReport::default();
    // Quiet.
    let _: serde_json::Value = admin.get_json("/v1/hosts?limit=10").await.map_err(FleetError::client("warm-up"))?;
    let quiet = admin_latencies(&admin, opts.admin_requests).await?;
    report.quiet_p50_ms = percentile(&quiet, 0.5);
    report.quiet_p99_ms = percentile(&quiet, 0.99);

    // Under the hammer.
    let tls = anonymous_tls(&ca_pem);
    let to: std::net::SocketAddr = server.url.trim_start_matches("https://").parse().map_err(|e| FleetError::Setup(format!("url: {e}")))?;
    let (_, csr) = crate::key_and_csr("hammer");
    let enroll =
        serde_json::json!({ "hostId": uuid::Uuid::new_v4().to_string(), "token": "not-a-real-token-000000000000", "csr": csr }).to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = crate::procs::cpu_secs(server.pid(), false);
    let started = Instant::now();
    let mut hammers = Vec::new();
    for i in 0..opts.hammer_connections {
        let source = format!("127.0.0.{}", 30 + i % opts.sources.max(1));
        hammers.push(tokio::spawn(hammer(tls.clone(), source, to, enroll.clone(), stop.clone())));
    }
    let loaded = admin_latencies(&admin, opts.admin_requests).await?;
    stop.store(true, Ordering::Relaxed);
    for h in hammers {
        for (code, n) in h.await.map_err(|e| FleetError::Setup(format!("hammer: {e}")))? {
            *report.hammer_answers.entry(code).or_insert(0) += n;
        }
    }
    report.hammer_secs = started.elapsed().as_secs_f64();
    report.hammer_cpu_secs = crate::procs::cpu_secs(server.pid(), false) - cpu_before;
    report.loaded_p50_ms = percentile(&loaded, 0.5);
    report.loaded_p99_ms = percentile(&loaded, 0.99);

    // The body flood.
    let (rss, _) = crate::procs::rss_kib(server.pid());
    report.rss_before_mib = rss as f64 / 1024.0;
    let release = Arc::new(tokio::sync::Notify::new());
    let (sent, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut flood = Vec::new();
    for i in 0..opts.body_connections {
        let source = format!("127.0.0.{}", 50 + i % 4);
        flood.push(tokio::spawn(pin_a_body(tls.clone(), source, to, release.clone(), sent.clone(), done.clone())));
    }
    // Sampled while they are sent, until every one has sent its body or failed to.
    let mut peak = report.rss_before_mib;
    let flood_started = Instant::now();
    while done.load(Ordering::Acquire) < opts.body_connections {
        let (rss, _) = crate::procs::rss_kib(server.pid());
        peak = peak.max(rss as f64 / 1024.0);
        tokio::time::sleep(Duration::from_millis(100)).await;
        if flood_started.elapsed() > Duration::from_secs(600) {
            return Err(FleetError::Setup("the body flood did not finish within 600 s".into()));
        }
    }
    // Held a little longer: bodies wait for the budget, and are answered, meanwhile.
    for _ in 0..20 {
        let (rss, _) = crate::procs::rss_kib(server.pid());
        peak = peak.max(rss as f64 / 1024.0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report.bodies_sent = sent.load(Ordering::Acquire);
    report.rss_flood_mib = peak;
    release.notify_waiters();
    for f in flood {
        let _ = f.await;
    }
    let closed = Instant::now();
    loop {
        let (rss, _) = crate::procs::rss_kib(server.pid());
        report.rss_after_mib = rss as f64 / 1024.0;
        if report.rss_back_secs.is_none() && report.rss_after_mib <= report.rss_before_mib * 1.25 {
            report.rss_back_secs = Some(closed.elapsed().as_secs_f64());
        }
        if report.rss_back_secs.is_some() || closed.elapsed() >= Duration::from_secs(opts.settle_secs) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(report)
}

/// `n` admin requests one after another; their latencies (ms), sorted.
async fn admin_latencies(admin: &CoordinatorClient, n: usize) -> Result<Vec<f64>, FleetError> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _: serde_json::Value = admin.get_json("/v1/hosts?limit=10").await.map_err(FleetError::client("admin list"))?;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

fn anonymous_tls(ca_pem: &[u8]) -> TlsConnector {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem).flatten() {
        let _ = roots.add(cert);
    }
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 is supported")
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(c))
}

async fn connect(tls: &TlsConnector, source: &str, to: std::net::SocketAddr) -> Option<tokio_rustls::client::TlsStream<TcpStream>> {
    let s = TcpSocket::new_v4().ok()?;
    s.bind(format!("{source}:0").parse().ok()?).ok()?;
    let tcp = tokio::time::timeout(Duration::from_secs(10), s.connect(to)).await.ok()?.ok()?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
    tokio::time::timeout(Duration::from_secs(10), tls.connect(name, tcp)).await.ok()?.ok()
}

/// Every anonymous route in turn until `stop`; answers by status code.
async fn hammer(tls: TlsConnector, source: String, to: std::net::SocketAddr, enroll: String, stop: Arc<AtomicBool>) -> BTreeMap<u16, u64> {
    let gets = [
        "/healthz",
        "/readyz",
        "/v1/openapi.json",
        "/v1/bootstrap.sh",
        "/v1/agent/binary",
        "/v1/agent/package.deb",
        "/v1/ca.crt",
        "/v1/trust.json",
    ];
    let mut answers = BTreeMap::new();
    let mut conn = None;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            conn = connect(&tls, &source, to).await;
            if conn.is_none() {
                *answers.entry(0).or_insert(0) += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        }
        let Some(stream) = conn.as_mut() else { continue };
        let request = match gets.get(i % (gets.len() + 1)) {
            Some(path) => format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
            None => format!(
                "POST /v1/enroll HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{enroll}",
                enroll.len()
            ),
        };
        i += 1;
        match exchange(stream, request.as_bytes()).await {
            Some((code, keep)) => {
                *answers.entry(code).or_insert(0) += 1;
                if !keep {
                    conn = None;
                }
            }
            None => {
                *answers.entry(0).or_insert(0) += 1;
                conn = None;
            }
        }
    }
    answers
}

/// Sends `request` and reads one answer (its body read and dropped); the status and whether
/// the connection stays open.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, request: &[u8]) -> Option<(u16, bool)> {
    stream.write_all(request).await.ok()?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 64 * 1024];
    let deadline = Duration::from_secs(30);
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut fields);
        if let Ok(httparse::Status::Complete(n)) = resp.parse(&buf) {
            let code = resp.code?;
            let header = |name: &str| {
                resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| String::from_utf8_lossy(h.value).to_string())
            };
            let len: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            let keep = header("connection").is_none_or(|v| !v.eq_ignore_ascii_case("close"));
            let mut have = buf.len() - n;
            while have < len {
                let got = tokio::time::timeout(deadline, stream.read(&mut chunk)).await.ok()?.ok()?;
                if got == 0 {
                    return None;
                }
                have += got;
            }
            return Some((code, keep));
        }
        let got = tokio::time::timeout(deadline, stream.read(&mut chunk)).await.ok()?.ok()?;
        if got == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..got]);
    }
}

/// One connection of the body flood: an enrollment's head and all but its body's last byte,
/// then held until `release` (or the coordinator answers). Counts itself in `done` once it
/// tried, and in `sent` if the body was all sent.
async fn pin_a_body(
    tls: TlsConnector,
    source: String,
    to: std::net::SocketAddr,
    release: Arc<tokio::sync::Notify>,
    sent: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
) {
    let released = release.notified();
    tokio::pin!(released);
    released.as_mut().enable();
    let Some(mut stream) = connect(&tls, &source, to).await else {
        done.fetch_add(1, Ordering::AcqRel);
        return;
    };
    let len = drover_engine::api::MAX_ANONYMOUS_BODY_BYTES;
    let head = format!("POST /v1/enroll HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n");
    let body = vec![b' '; len - 1];
    if stream.write_all(head.as_bytes()).await.is_ok() && stream.write_all(&body).await.is_ok() {
        sent.fetch_add(1, Ordering::AcqRel);
    }
    done.fetch_add(1, Ordering::AcqRel);
    // Held open (its part of the budget with it) until the flood ends or the coordinator
    // gives up on it; the caller samples memory meanwhile.
    let mut sink = [0u8; 512];
    tokio::select! {
        () = released => {}
        _ = stream.read(&mut sink) => {}
    }
}
