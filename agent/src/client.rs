//! The agent's HTTPS client for the coordinator.
//!
//! - **Trust**: rustls (ring) with exactly the coordinator CA from `ca_file` as its root
//!   store; no system roots, no proxy CA, no fallback. TLS 1.3 only. ALPN offers `h2` and
//!   `http/1.1`.
//! - **Identity**: none for the enrollment routes; the agent's certificate and key for every
//!   agent route ([`ClientIdentity`]).
//! - **Fail-over**: the configured URLs are tried in order; the next one is tried only when a
//!   connection (TCP or TLS handshake) to the current one fails. Once a request reached a
//!   coordinator, its answer stands: a refusal is not retried elsewhere.
//! - **Errors**: a non-2xx answer with the API's `{"error":{"code","message"}}` body becomes
//!   [`ClientError::Api`] with the status, code and message; any other non-2xx becomes
//!   [`ClientError::Http`]. Redirects are not followed and plain `http://` is never used.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::exit::{ExitStatus, codes};

/// The largest response body read (the biggest answer is a rollout bundle).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// How long a TCP connect plus TLS handshake may take before the next URL is tried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default limit on a whole request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a request to the coordinator failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA file could not be read.
    #[error("cannot read CA file {file}: {source}", file = file.display())]
    ReadCa {
        /// The file.
        file: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The CA or the client identity is not usable PEM.
    #[error("{what}: {message}")]
    BadPem {
        /// Which input.
        what: String,
        /// What is wrong.
        message: String,
    },
    /// Building the TLS or HTTP client failed.
    #[error("cannot set up the TLS client: {message}")]
    Setup {
        /// What failed.
        message: String,
    },
    /// No configured coordinator URL could be connected to.
    #[error("coordinator unreachable: {}", attempts.join("; "))]
    Unreachable {
        /// `URL: cause` for each URL tried.
        attempts: Vec<String>,
    },
    /// The request failed after the connection was made (reset, timeout, …).
    #[error("{url}: {message}")]
    Transport {
        /// The full URL.
        url: String,
        /// What happened.
        message: String,
    },
    /// The coordinator refused the request with a JSON error.
    #[error("{url}: coordinator refused ({status} {code}): {message}")]
    Api {
        /// The full URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The error code from the body.
        code: String,
        /// The message from the body.
        message: String,
    },
    /// A non-2xx answer without the API's error body.
    #[error("{url}: HTTP {status}: {body}")]
    Http {
        /// The full URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the body, printable characters only.
        body: String,
    },
    /// A 2xx answer whose body is not what the route promises.
    #[error("{url}: unexpected response: {message}")]
    Decode {
        /// The full URL.
        url: String,
        /// What is wrong.
        message: String,
    },
}

impl ExitStatus for ClientError {
    fn exit_code(&self) -> u8 {
        match self {
            ClientError::ReadCa { .. } => codes::NO_INPUT,
            ClientError::BadPem { .. } => codes::DATA,
            ClientError::Setup { .. } => codes::SOFTWARE,
            ClientError::Unreachable { .. }
            | ClientError::Transport { .. }
            | ClientError::Api { .. }
            | ClientError::Http { .. }
            | ClientError::Decode { .. } => codes::UNAVAILABLE,
        }
    }
}

/// A client certificate chain and its private key, for agent routes.
pub struct ClientIdentity {
    /// The certificate (first) and any intermediates.
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key.
    pub key: PrivateKeyDer<'static>,
}

impl ClientIdentity {
    /// Parses a PEM certificate chain and a PEM private key (PKCS#8, SEC1 or PKCS#1).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientIdentity, ClientError> {
        let chain = parse_certificates("client certificate", cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| ClientError::BadPem { what: "client key".to_owned(), message: format!("no usable private key: {e}") })?;
        Ok(ClientIdentity { chain, key })
    }
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity").field("chain", &self.chain.len()).field("key", &"<redacted>").finish()
    }
}

/// Parses every certificate in `pem`; at least one is required. `what` names the input in errors.
pub fn parse_certificates(what: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ClientError::BadPem { what: what.to_owned(), message: format!("malformed PEM: {e}") })?;
    if certs.is_empty() {
        return Err(ClientError::BadPem { what: what.to_owned(), message: "no PEM certificate found".to_owned() });
    }
    Ok(certs)
}

/// Reads and parses the CA file.
pub fn load_ca(file: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let pem = std::fs::read(file).map_err(|source| ClientError::ReadCa { file: file.to_owned(), source })?;
    parse_certificates(&format!("CA file {}", file.display()), &pem)
}

/// The rustls configuration every Drover client uses: ring, TLS 1.3 only, `ca` as the only
/// roots, an optional client identity, ALPN `h2` then `http/1.1`.
pub fn tls_config(ca: &[CertificateDer<'static>], identity: Option<ClientIdentity>) -> Result<rustls::ClientConfig, ClientError> {
    let setup = |message: String| ClientError::Setup { message };
    let mut roots = rustls::RootCertStore::empty();
    for cert in ca {
        roots
            .add(cert.clone())
            .map_err(|e| ClientError::BadPem { what: "CA".to_owned(), message: format!("not a usable CA certificate: {e}") })?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| setup(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(id) => builder
            .with_client_auth_cert(id.chain, id.key)
            .map_err(|e| ClientError::BadPem { what: "client identity".to_owned(), message: e.to_string() })?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// An HTTPS client for one coordinator (several URLs, tried in order).
#[derive(Debug, Clone)]
pub struct CoordinatorClient {
    http: reqwest::Client,
    urls: Vec<String>,
}

impl CoordinatorClient {
    /// A client for `urls` trusting only `ca`, with `identity` for agent routes, each request
    /// limited to `timeout`.
    pub fn new(
        urls: &[String],
        ca: &[CertificateDer<'static>],
        identity: Option<ClientIdentity>,
        timeout: Duration,
    ) -> Result<CoordinatorClient, ClientError> {
        if urls.is_empty() {
            return Err(ClientError::Setup { message: "no coordinator URL".to_owned() });
        }
        let tls = tls_config(ca, identity)?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(timeout)
            .user_agent(concat!("drover-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Setup { message: error_chain(&e) })?;
        Ok(CoordinatorClient { http, urls: urls.iter().map(|u| u.trim_end_matches('/').to_owned()).collect() })
    }

    /// The URLs, in the order they are tried.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// `GET path`: the body's bytes, exactly as sent.
    pub async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        let (url, resp) = self.send(reqwest::Method::GET, path, None).await?;
        read_ok(&url, resp).await
    }

    /// `GET path`, decoded from JSON.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let (url, resp) = self.send(reqwest::Method::GET, path, None).await?;
        let body = read_ok(&url, resp).await?;
        decode(&url, &body)
    }

    /// `POST path` with a JSON body, the answer decoded from JSON.
    pub async fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ClientError::Setup { message: format!("cannot encode request: {e}") })?;
        let (url, resp) = self.send(reqwest::Method::POST, path, Some(bytes)).await?;
        let body = read_ok(&url, resp).await?;
        decode(&url, &body)
    }

    /// Sends one request, failing over to the next URL only on a connection failure.
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Vec<u8>>) -> Result<(String, reqwest::Response), ClientError> {
        let mut attempts = Vec::new();
        for base in &self.urls {
            let url = format!("{base}{path}");
            let mut req = self.http.request(method.clone(), &url).header(reqwest::header::ACCEPT, "application/json");
            if let Some(b) = &body {
                req = req.header(reqwest::header::CONTENT_TYPE, "application/json").body(b.clone());
            }
            match req.send().await {
                Ok(resp) => return Ok((url, resp)),
                Err(e) if e.is_connect() => attempts.push(format!("{base}: {}", error_chain(&e))),
                Err(e) => return Err(ClientError::Transport { url, message: error_chain(&e) }),
            }
        }
        Err(ClientError::Unreachable { attempts })
    }
}

/// The body of a 2xx answer, or the error the answer carries.
async fn read_ok(url: &str, resp: reqwest::Response) -> Result<Vec<u8>, ClientError> {
    let status = resp.status();
    if status.is_success() {
        return read_limited(url, resp, MAX_RESPONSE_BYTES).await;
    }
    let body = read_limited(url, resp, 64 * 1024).await.unwrap_or_default();
    Err(error_from_body(url, status.as_u16(), &body))
}

/// The typed error for a non-2xx answer with `body`.
pub fn error_from_body(url: &str, status: u16, body: &[u8]) -> ClientError {
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: ApiError,
    }
    #[derive(serde::Deserialize)]
    struct ApiError {
        code: String,
        message: String,
    }
    match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope { error }) => {
            ClientError::Api { url: url.to_owned(), status, code: printable(&error.code), message: printable(&error.message) }
        }
        Err(_) => ClientError::Http { url: url.to_owned(), status, body: printable(&String::from_utf8_lossy(body)) },
    }
}

/// At most 300 characters of `s`, control characters replaced (a hostile server's text must
/// not drive the terminal).
fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(300).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if s.chars().count() > 300 {
        out.push('…');
    }
    out
}

async fn read_limited(url: &str, mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| ClientError::Transport { url: url.to_owned(), message: error_chain(&e) })? {
        if out.len() + chunk.len() > limit {
            return Err(ClientError::Decode { url: url.to_owned(), message: format!("response larger than {limit} bytes") });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn decode<T: DeserializeOwned>(url: &str, body: &[u8]) -> Result<T, ClientError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de)
        .map_err(|e| ClientError::Decode { url: url.to_owned(), message: format!("at `{}`: {}", e.path(), e.inner()) })
}

/// An error and its sources, `: `-joined (reqwest's own message omits the cause, e.g. which
/// certificate check failed).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_become_typed_errors() {
        let e = error_from_body("https://c/v1/enroll", 401, br#"{"error":{"code":"token_invalid","message":"token expired"}}"#);
        match &e {
            ClientError::Api { status, code, message, .. } => {
                assert_eq!((*status, code.as_str(), message.as_str()), (401, "token_invalid", "token expired"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(e.exit_code(), codes::UNAVAILABLE);
        assert!(e.to_string().contains("401") && e.to_string().contains("token expired"), "{e}");
        let e = error_from_body("https://c/x", 502, b"<html>bad\x1b[31m gateway</html>");
        assert!(matches!(&e, ClientError::Http { status: 502, body, .. } if body.contains("bad") && !body.contains('\x1b')), "{e:?}");
    }

    #[tokio::test]
    async fn every_url_is_tried_in_order_and_all_are_named_when_none_answers() {
        let ports: Vec<u16> =
            (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()).collect();
        let urls: Vec<String> = ports.iter().map(|p| format!("https://127.0.0.1:{p}")).collect();
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("ca");
        let client = CoordinatorClient::new(&urls, &[ca.cert.der().clone()], None, REQUEST_TIMEOUT).expect("client");
        let e = client.get_bytes("/v1/trust.json").await.expect_err("nothing listens");
        assert_eq!(e.exit_code(), codes::UNAVAILABLE);
        match &e {
            ClientError::Unreachable { attempts } => {
                assert_eq!(attempts.len(), 2);
                assert!(attempts[0].starts_with(&urls[0]) && attempts[1].starts_with(&urls[1]), "{attempts:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pem_problems_are_named() {
        let e = parse_certificates("CA file /x", b"not pem").expect_err("refused");
        assert!(e.to_string().starts_with("CA file /x: "), "{e}");
        assert_eq!(e.exit_code(), codes::DATA);
        let e = ClientIdentity::from_pem(b"", b"").expect_err("refused");
        assert_eq!(e.exit_code(), codes::DATA);
    }
}
