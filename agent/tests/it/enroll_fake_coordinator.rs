//! `drover-agent enroll` against a fake coordinator over real TLS 1.3 on 127.0.0.1: the
//! library path (with fail-over from a dead URL) and the binary (exit codes, output, files).
//! The fake speaks just enough HTTP/1.1 for `GET /v1/trust.json` and `POST /v1/enroll`; the
//! real coordinator's end-to-end test lives with the coordinator.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use drover_agent::config::Config;
use drover_agent::enroll::{self, EnrollError, HOST_URI_PREFIX};
use drover_agent::state::{self, StateDir};
use drover_proto::enroll::{EnrollRequest, EnrollResponse};
use drover_proto::keys::{KeyId, verifying_key_from_text};
use drover_proto::task::Secret;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ED25519, SanType};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HOST_ID: &str = "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10";
const HOSTNAME: &str = "gpu-a-01";
const TOKEN: &str = "tok-0123456789abcdef";

/// The fake coordinator's keys and what it saw.
struct Fake {
    ca_cert: rcgen::Certificate,
    ca_key: KeyPair,
    trust: Vec<u8>,
    director_pub: String,
    /// Every request line seen, in order.
    seen: Mutex<Vec<String>>,
}

impl Fake {
    fn new() -> Fake {
        let ca_key = KeyPair::generate().expect("ca key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, "fake drover CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = params.self_signed(&ca_key).expect("ca");
        let ci = KeyPair::generate_for(&PKCS_ED25519).expect("ci key").public_key_pem();
        let key_id = KeyId::of(&verifying_key_from_text(&ci).expect("ci"));
        let trust = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 1,
            "ci": {"threshold": 1, "keys": [{"keyId": key_id.as_str(), "alg": "ed25519", "publicKey": ci}]}
        }))
        .expect("json");
        let director_pub = KeyPair::generate_for(&PKCS_ED25519).expect("director").public_key_pem();
        Fake { ca_cert, ca_key, trust, director_pub, seen: Mutex::new(Vec::new()) }
    }

    fn trust_sha256(&self) -> String {
        hex::encode(Sha256::digest(&self.trust))
    }

    /// Starts serving TLS 1.3 on 127.0.0.1:0; returns the address.
    async fn start(self: &Arc<Self>) -> SocketAddr {
        let server_key = KeyPair::generate().expect("server key");
        let server_cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("params")
            .signed_by(&server_key, &self.ca_cert, &self.ca_key)
            .expect("server cert");
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("tls13")
            .with_no_client_auth()
            .with_single_cert(vec![server_cert.der().clone()], rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()))
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let me = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (acceptor, me) = (acceptor.clone(), Arc::clone(&me));
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        me.handle(&mut tls).await;
                    }
                });
            }
        });
        addr
    }

    /// One HTTP/1.1 request, one answer, then close.
    async fn handle<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(&self, io: &mut S) {
        let mut buf = Vec::new();
        let head_end = loop {
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let line = head.lines().next().unwrap_or_default().to_owned();
        let len: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = &buf[head_end..head_end + len];
        self.seen.lock().expect("lock").push(line.clone());
        let (status, bytes) = if line.starts_with("GET /v1/trust.json ") {
            (200, self.trust.clone())
        } else if line.starts_with("POST /v1/enroll ") {
            self.enroll(body)
        } else {
            (404, br#"{"error":{"code":"not_found","message":"no such route"}}"#.to_vec())
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            bytes.len()
        );
        let _ = io.write_all(head.as_bytes()).await;
        let _ = io.write_all(&bytes).await;
        let _ = io.shutdown().await;
    }

    fn enroll(&self, body: &[u8]) -> (u16, Vec<u8>) {
        let req: EnrollRequest = serde_json::from_slice(body).expect("enroll request");
        if req.token.expose() != TOKEN || req.host_id != HOST_ID {
            return (401, br#"{"error":{"code":"invalid_token","message":"enrollment token is invalid, used or expired"}}"#.to_vec());
        }
        let csr = rcgen::CertificateSigningRequestParams::from_pem(&req.csr).expect("csr");
        let mut params = CertificateParams::new(vec![HOSTNAME.to_owned()]).expect("params");
        params.subject_alt_names.push(SanType::URI(format!("{HOST_URI_PREFIX}{HOST_ID}").try_into().expect("ia5")));
        params.distinguished_name.push(DnType::CommonName, HOSTNAME);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&csr.public_key, &self.ca_cert, &self.ca_key).expect("issue");
        // The evidence key's certificate, as the coordinator makes it: documentSigning only.
        let evidence_certificate = req.evidence_csr.as_deref().map(|pem| {
            let csr = rcgen::CertificateSigningRequestParams::from_pem(pem).expect("evidence csr");
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
            params.subject_alt_names.push(SanType::URI(format!("{HOST_URI_PREFIX}{HOST_ID}").try_into().expect("ia5")));
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 36])];
            params.signed_by(&csr.public_key, &self.ca_cert, &self.ca_key).expect("issue").pem()
        });
        let resp = EnrollResponse {
            host_id: HOST_ID.to_owned(),
            hostname: HOSTNAME.to_owned(),
            certificate: cert.pem(),
            ca_certificate: self.ca_cert.pem(),
            director_public_key: self.director_pub.clone(),
            coordinator_urls: vec!["https://127.0.0.1".to_owned()],
            evidence_certificate,
        };
        (200, serde_json::to_vec(&resp).expect("json"))
    }
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Writes `ca.crt` and `agent.toml` (URLs in order) into `dir`; returns the config path.
fn write_config(dir: &Path, fake: &Fake, urls: &[String]) -> PathBuf {
    std::fs::write(dir.join("ca.crt"), fake.ca_cert.pem()).expect("ca");
    let urls: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    // `ca_file` must be absolute (a relative one is refused); `state_dir` may be relative.
    let text = format!("coordinator_urls = [{}]\nstate_dir = \"state\"\nca_file = {:?}\n", urls.join(", "), dir.join("ca.crt"));
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).expect("config");
    path
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

#[tokio::test]
async fn enrolls_after_failing_over_from_a_dead_url_and_stores_everything() {
    let fake = Arc::new(Fake::new());
    let addr = fake.start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let urls = vec![format!("https://127.0.0.1:{}", dead_port()), format!("https://{addr}")];
    let config = Config::load(&write_config(tmp.path(), &fake, &urls)).expect("config");
    let identity = enroll::enroll(&config, HOST_ID, Secret::new(TOKEN), &fake.trust_sha256()).await.expect("enrolled");
    assert_eq!((identity.host_id.as_str(), identity.hostname.as_str()), (HOST_ID, HOSTNAME));
    assert_eq!(*fake.seen.lock().expect("lock"), vec!["GET /v1/trust.json HTTP/1.1", "POST /v1/enroll HTTP/1.1"]);

    let st = StateDir::open(&config.state_dir).expect("state");
    assert!(st.is_enrolled());
    assert_eq!(mode(st.path()), 0o700);
    assert_eq!(mode(&st.file(state::KEY)), 0o600);
    assert_eq!(st.read(state::TRUST).expect("trust"), fake.trust, "the verified bytes, byte for byte");
    assert_eq!(st.read(state::CA).expect("ca"), fake.ca_cert.pem().into_bytes());
    assert_eq!(st.read(state::DIRECTOR).expect("director"), fake.director_pub.clone().into_bytes());
    assert_eq!(st.read_identity().expect("identity"), identity);
    // The stored key is the one the certificate was issued for.
    let key = KeyPair::from_pem(&String::from_utf8(st.read(state::KEY).expect("key")).expect("utf8")).expect("pkcs8");
    let cert = drover_agent::client::parse_certificates("cert", &st.read(state::CERT).expect("cert")).expect("pem");
    enroll::check_public_key(&cert[0], &key.public_key_der()).expect("our key");
    // The sealing and evidence keys are private to the host; the evidence certificate it kept
    // signs statements that verify under the CA.
    for private in [drover_agent::host_keys::SEAL_KEY, drover_agent::host_keys::EVIDENCE_KEY] {
        assert_eq!(mode(&st.file(private)), 0o600, "{private}");
    }
    let signer = drover_agent::host_keys::EvidenceSigner::load(st.path(), HOST_ID).expect("load").expect("an evidence key");
    let at = drover_proto::time::Time::from_unix(1_800_000_000).expect("time");
    let evidence = signer.sign(at, drover_proto::evidence::Subject::Probes { results: vec![] }).expect("sign");
    drover_proto::evidence::verify(&evidence, Some(&fake.ca_cert.pem()), &Default::default()).expect("verifies under the CA");

    // A second run is refused before it talks to anyone.
    let e = enroll::enroll(&config, HOST_ID, Secret::new(TOKEN), &fake.trust_sha256()).await.expect_err("refused");
    assert!(matches!(e, EnrollError::AlreadyEnrolled { .. }), "{e:?}");
    assert_eq!(fake.seen.lock().expect("lock").len(), 2);
}

/// Runs the binary with `args` and `stdin`, off the runtime's worker threads.
async fn agent(args: Vec<String>, stdin: &'static [u8]) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_drover-agent"))
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start drover-agent");
        // A binary that refuses its arguments exits before reading stdin: a broken pipe
        // here is its answer, not the test's failure.
        if let Err(e) = child.stdin.take().expect("stdin").write_all(stdin) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
        child.wait_with_output().expect("wait")
    })
    .await
    .expect("join")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_refuses_a_mismatched_hash_and_a_bad_token_then_enrolls() {
    let fake = Arc::new(Fake::new());
    let addr = fake.start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = write_config(tmp.path(), &fake, &[format!("https://{addr}")]);
    let args = |hash: &str| -> Vec<String> {
        ["enroll", "--config", config.to_str().expect("utf8"), "--host-id", HOST_ID, "--token-stdin", "--trust-sha256", hash]
            .map(str::to_owned)
            .to_vec()
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();

    let wrong = hex::encode(Sha256::digest(b"another trust.json"));
    let out = agent(args(&wrong), b"tok-0123456789abcdef\n").await;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&wrong) && text(&out.stderr).contains(&fake.trust_sha256()), "{}", text(&out.stderr));

    let out = agent(args(&fake.trust_sha256()), b"not-the-token\n").await;
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("401") && !text(&out.stderr).contains("not-the-token"), "{}", text(&out.stderr));
    assert!(!tmp.path().join("state").join(state::KEY).exists(), "nothing written on refusal");

    let out = agent(args("xyz"), b"").await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));

    let out = agent(args(&fake.trust_sha256()), b"tok-0123456789abcdef\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("enrolled as {HOSTNAME} ({HOST_ID})\n"));

    let out = agent(args(&fake.trust_sha256()), b"tok-0123456789abcdef\n").await;
    assert_eq!(out.status.code(), Some(73), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("already enrolled"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn the_binary_maps_missing_config_and_dead_coordinators() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let absent = tmp.path().join("absent.toml");
    let out = agent(
        ["enroll", "--config", absent.to_str().expect("utf8"), "--host-id", HOST_ID, "--token-stdin", "--trust-sha256", &"a".repeat(64)]
            .map(str::to_owned)
            .to_vec(),
        b"t\n",
    )
    .await;
    assert_eq!(out.status.code(), Some(66));
    let fake = Fake::new();
    let config = write_config(tmp.path(), &fake, &[format!("https://127.0.0.1:{}", dead_port())]);
    let base = ["enroll", "--config", config.to_str().expect("utf8"), "--host-id", HOST_ID];
    let out =
        agent([&base[..], &["--token-stdin", "--trust-sha256", &"a".repeat(64)]].concat().iter().map(|s| s.to_string()).collect(), b"t\n")
            .await;
    assert_eq!(out.status.code(), Some(69), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unreachable"));
    // No token source, or both, or a token on the command line, or no host id: usage.
    let no_host_id = ["enroll", "--config", config.to_str().expect("utf8"), "--token-stdin", "--trust-sha256", &"a".repeat(64)];
    let out = agent(no_host_id.iter().map(|s| s.to_string()).collect(), b"").await;
    assert_eq!(out.status.code(), Some(64));
    for extra in [
        &["--trust-sha256", &"a".repeat(64)][..],
        &["--token-stdin", "--token-file", "t", "--trust-sha256", &"a".repeat(64)],
        &["--token", "t"],
    ] {
        let out = agent([&base[..], extra].concat().iter().map(|s| s.to_string()).collect(), b"").await;
        assert_eq!(out.status.code(), Some(64), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
