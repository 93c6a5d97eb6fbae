//! A small CA and a fake coordinator over real mutual TLS 1.3, for the tests of the verbs that
//! talk to a coordinator (`drover enroll`, `drover job`, …): the fake answers one HTTP/1.1
//! request per connection with whatever the test's handler says.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Run, Scratch, drover_env};

/// A CA, and certificates of it for either end.
pub struct Pki {
    /// The CA certificate.
    pub ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

impl Pki {
    /// A fresh CA.
    pub fn new() -> Pki {
        let ca_key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, "test drover CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        Pki { ca: params.self_signed(&ca_key).expect("ca"), ca_key }
    }

    /// A certificate for `names` with `eku`; returns it and its key.
    pub fn issue(&self, names: &[&str], eku: ExtendedKeyUsagePurpose) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
        params.extended_key_usages = vec![eku];
        (params.signed_by(&key, &self.ca, &self.ca_key).expect("issue"), key)
    }

    /// Writes `ca.crt`, `op.crt` and `op.key` (an operator identity) into `sc`.
    pub fn write_operator(&self, sc: &Scratch) {
        let (cert, key) = self.issue(&["admin.operator"], ExtendedKeyUsagePurpose::ClientAuth);
        sc.write("ca.crt", self.ca.pem());
        sc.write("op.crt", cert.pem());
        sc.write("op.key", key.serialize_pem());
    }
}

/// The flags naming the coordinator at `url` and the operator identity
/// [`Pki::write_operator`] writes.
pub fn operator_flags(url: &str) -> [&str; 8] {
    ["--coordinator", url, "--cert", "op.crt", "--key", "op.key", "--ca", "ca.crt"]
}

/// Runs `drover ARGS` in `dir` off the runtime's threads.
pub async fn drover_blocking(dir: &Path, args: Vec<String>) -> Run {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || drover_env(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>(), b"", &[]))
        .await
        .expect("join")
}

/// Serves mutual TLS 1.3 on a loopback port (a server certificate for `127.0.0.1`, client
/// certificates required and chained to `pki`'s CA): each connection's one request is handed
/// to `respond` as its head (request line and headers, as sent) and body, and its answer
/// `(status, JSON body)` is sent back. Returns the address.
pub async fn serve<H>(pki: &Pki, respond: H) -> SocketAddr
where
    H: Fn(&str, &[u8]) -> (u16, Vec<u8>) + Send + Sync + 'static,
{
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (cert, key) = pki.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca.der().clone()).expect("root");
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().expect("verifier");
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert.der().clone()], rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .expect("config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, respond) = (acceptor.clone(), Arc::clone(&respond));
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    if let Some((head, body)) = read_request(&mut tls).await {
                        let (status, answer) = respond(&head, &body);
                        write_response(&mut tls, status, &answer).await;
                    }
                }
            });
        }
    });
    addr
}

/// Reads one request: its head (lossily decoded) and its `content-length` bytes of body;
/// `None` when the peer stops first.
async fn read_request<S: AsyncRead + Unpin>(io: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let lower = head.to_ascii_lowercase();
    let len: usize = lower.lines().find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0))).unwrap_or(0);
    while buf.len() < head_end + len {
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some((head, buf[head_end..head_end + len].to_vec()))
}

/// Writes a JSON answer and closes the connection.
async fn write_response<S: AsyncWrite + Unpin>(io: &mut S, status: u16, body: &[u8]) {
    let head =
        format!("HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
    let _ = io.write_all(head.as_bytes()).await;
    let _ = io.write_all(body).await;
    let _ = io.shutdown().await;
}
