//! The client against an https MAAS with a private CA, over real TLS: a throwaway CA issues a
//! certificate for `127.0.0.1` and `localhost`, a small tokio-rustls server answers the version
//! and rack-controller endpoints, and the client must trust exactly the `ca_pem` it was given.
//!
//! The server records the TLS version of every request it answers, so the TLS 1.2 case proves
//! that 1.2 was negotiated rather than merely that the call succeeded.

#![forbid(unsafe_code)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Seen, read_request, write_answer};
use drover_maas::{ClientConfig, ErrorClass, MaasClient, MaasError};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use rustls::ProtocolVersion;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

/// The token secret of the client's key: it must never show in an error.
const SECRET: &str = "tls-token-secret";
/// MAAS's answer to `GET /MAAS/api/2.0/version/` (facts §4).
const VERSION: &str = r#"{"capabilities": ["networks-management", "static-ipaddresses", "ipv6-deployment-ubuntu", "devices-management", "storage-deployment-ubuntu", "network-deployment-ubuntu", "bridging-interface-ubuntu", "bridging-automatic-ubuntu", "authenticate-api"], "version": "3.7.0~beta1", "subversion": ""}"#;
/// A one-rack `GET /MAAS/api/2.0/rackcontrollers/`.
const RACKS: &str = r#"[{"system_id": "rk4p7a", "hostname": "maas-rack-1", "fqdn": "maas-rack-1.maas", "version": "3.7.0~beta1", "ip_addresses": ["10.0.0.2"], "node_type_name": "Region and rack controller"}]"#;

/// A CA: its certificate (PEM) and what signs with it.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    /// A fresh CA. Every CA here has the same name, so a wrong one is refused for its key, not
    /// for its name.
    fn new() -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, "MAAS test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca { cert, key }
    }

    fn pem(&self) -> Vec<u8> {
        self.cert.pem().into_bytes()
    }

    /// A server certificate for `127.0.0.1` and `localhost`, and its key.
    fn issue_server(&self) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("server params");
        params.distinguished_name.push(DnType::CommonName, "maas.test");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("server certificate");
        (cert.der().clone(), PrivatePkcs8KeyDer::from(key.serialize_der()).into())
    }
}

/// A TLS MAAS on 127.0.0.1.
struct Server {
    port: u16,
    /// Every request answered, with the TLS version of its connection.
    seen: Arc<Mutex<Vec<(ProtocolVersion, Seen)>>>,
    /// Why each failed handshake failed, as the server saw it.
    refused: mpsc::UnboundedReceiver<String>,
}

impl Server {
    /// Serves with a certificate from `ca`, offering only `versions`; ready once this returns.
    async fn start(ca: &Ca, versions: &[&'static rustls::SupportedProtocolVersion]) -> Server {
        let (cert, key) = ca.issue_server();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (failures, refused) = mpsc::unbounded_channel();
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (acceptor, log, failures) = (acceptor.clone(), log.clone(), failures.clone());
                tokio::spawn(async move {
                    let mut tls = match acceptor.accept(tcp).await {
                        Ok(tls) => tls,
                        Err(e) => {
                            let _ = failures.send(e.to_string());
                            return;
                        }
                    };
                    let version = tls.get_ref().1.protocol_version().expect("negotiated");
                    let Some(request) = read_request(&mut tls).await else { return };
                    let (status, body) = route(&request);
                    log.lock().expect("lock").push((version, request));
                    write_answer(&mut tls, status, &[("Content-Type", "application/json; charset=utf-8")], body).await;
                });
            }
        });
        Server { port, seen, refused }
    }

    fn url(&self, host: &str) -> String {
        format!("https://{host}:{}/MAAS", self.port)
    }

    /// The next failed handshake's error (the failure reaches the server just after the client).
    async fn next_refusal(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(10), self.refused.recv()).await.expect("a refused handshake").expect("server running")
    }

    fn seen(&self) -> Vec<(ProtocolVersion, Seen)> {
        self.seen.lock().expect("lock").clone()
    }
}

/// MAAS's two endpoints; the rack controllers need a PLAINTEXT OAuth signature.
fn route(request: &Seen) -> (u16, &'static str) {
    match (request.method.as_str(), request.target.as_str()) {
        ("GET", "/MAAS/api/2.0/version/") => (200, VERSION),
        ("GET", "/MAAS/api/2.0/rackcontrollers/") => {
            let signed = request
                .header("authorization")
                .is_some_and(|a| a.starts_with("OAuth ") && a.contains("oauth_signature_method=\"PLAINTEXT\""));
            if signed { (200, RACKS) } else { (401, "Authorization Error: 'Missing or invalid OAuth parameters'") }
        }
        _ => (404, "Not Found"),
    }
}

fn config(url: &str, ca_pem: Option<Vec<u8>>) -> ClientConfig {
    let mut config = ClientConfig::new(url, format!("CK:TK:{SECRET}").parse().expect("key"));
    config.timeout = Duration::from_secs(10);
    config.retries = 0;
    config.ca_pem = ca_pem;
    config
}

fn client(url: &str, ca_pem: Option<Vec<u8>>) -> MaasClient {
    MaasClient::new(config(url, ca_pem)).expect("client")
}

fn assert_no_secret(e: &MaasError) {
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(!shown.contains("oauth_signature"), "{shown}");
}

#[tokio::test]
async fn the_given_ca_is_trusted_over_tls_1_3() {
    let ca = Ca::new();
    let mut server = Server::start(&ca, &[&rustls::version::TLS13, &rustls::version::TLS12]).await;
    let c = client(&server.url("127.0.0.1"), Some(ca.pem()));
    let v = c.version().await.expect("version over https");
    assert_eq!(v.version, "3.7.0~beta1");
    assert_eq!(v.capabilities.len(), 9);
    assert_eq!(v.subversion, "");
    let racks = c.rack_controllers().await.expect("rack controllers over https");
    assert_eq!(racks.len(), 1);
    assert_eq!((racks[0].system_id.as_str(), racks[0].hostname.as_str()), ("rk4p7a", "maas-rack-1"));

    // The DNS name in the certificate works as well as its IP address.
    let by_name = client(&server.url("localhost"), Some(ca.pem()));
    assert_eq!(by_name.version().await.expect("version via localhost").version, "3.7.0~beta1");

    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|(_, r)| r.method == "GET" && r.body.is_empty()), "{seen:?}");
    assert!(seen.iter().all(|(v, _)| *v == ProtocolVersion::TLSv1_3), "both allow 1.3: {seen:?}");
    assert_eq!(seen[0].1.target, "/MAAS/api/2.0/version/");
    assert!(seen[0].1.header("authorization").is_none(), "version is anonymous");
    assert_eq!(seen[1].1.target, "/MAAS/api/2.0/rackcontrollers/");
    let auth = seen[1].1.header("authorization").expect("rack controllers are signed");
    assert!(auth.starts_with("OAuth ") && auth.contains("oauth_signature_method=\"PLAINTEXT\""), "{auth}");
    assert!(server.refused.try_recv().is_err(), "no handshake failed");
}

#[tokio::test]
async fn another_ca_is_refused_before_anything_is_sent() {
    let mut server = Server::start(&Ca::new(), &[&rustls::version::TLS13, &rustls::version::TLS12]).await;
    let c = client(&server.url("127.0.0.1"), Some(Ca::new().pem()));
    for e in [c.rack_controllers().await.expect_err("untrusted server"), c.version().await.expect_err("untrusted server")] {
        // A refused certificate is configuration, not a passing outage: no retry can succeed.
        assert_eq!(e.class(), ErrorClass::Config, "{e:?}");
        assert!(matches!(e, MaasError::Tls { .. }), "{e:?}");
        assert!(e.to_string().to_lowercase().contains("certificate"), "names the cause: {e}");
        assert_no_secret(&e);
    }
    for _ in 0..2 {
        let why = server.next_refusal().await;
        // Same CA name, other key: the signature check fails (rustls alerts DecryptError).
        assert!(why.contains("fatal alert"), "the client aborted the handshake: {why}");
    }
    assert!(server.seen().is_empty(), "no request, so no signed header, reached the server");
}

#[tokio::test]
async fn https_without_a_ca_is_a_configuration_error() {
    let server = Server::start(&Ca::new(), &[&rustls::version::TLS13, &rustls::version::TLS12]).await;
    // Refused when the client is built: there are no built-in roots to fall back on.
    let e = MaasClient::new(config(&server.url("127.0.0.1"), None)).expect_err("no CA");
    assert_eq!(e.class(), ErrorClass::Config, "{e:?}");
    assert!(matches!(e, MaasError::BadCa { .. }), "{e:?}");
    assert_no_secret(&e);
    assert!(server.seen().is_empty());
}

#[tokio::test]
async fn a_tls_1_2_only_maas_is_still_reached() {
    let ca = Ca::new();
    let server = Server::start(&ca, &[&rustls::version::TLS12]).await;
    let c = client(&server.url("127.0.0.1"), Some(ca.pem()));
    assert_eq!(c.version().await.expect("version over TLS 1.2").version, "3.7.0~beta1");
    assert_eq!(c.rack_controllers().await.expect("rack controllers over TLS 1.2").len(), 1);
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|(v, _)| *v == ProtocolVersion::TLSv1_2), "{seen:?}");
    assert!(seen[1].1.header("authorization").is_some_and(|a| a.contains("oauth_signature_method=\"PLAINTEXT\"")));
}
