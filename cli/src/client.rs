//! The operator's HTTPS client for the coordinator's operator routes.
//!
//! Mutual TLS, TLS 1.3 only (rustls with ring): the coordinator's certificate must chain to
//! the CA from `--ca` (no system roots), and the operator authenticates with the certificate
//! and key `drover-coordinator operator-cert` issued. Where to connect and with what comes from
//! flags or the environment ([`ConnectArgs`]); a CLI config file is a later addition.
//!
//! Errors map to sysexits: a refused connection or a 5xx is 69 (EX_UNAVAILABLE), a 401/403 is
//! 77 (EX_NOPERM), any other 4xx is 65 (EX_DATAERR) with the server's `{"error":{"code",
//! "message"}}` message, an answer that is not the API's is 76 (EX_PROTOCOL).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::exit::{CliError, codes};
use crate::fsio::read_file;

/// How long connecting (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest answer read.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Where the coordinator is and the operator credentials to present, from flags or the
/// environment.
#[derive(Args, Debug, Clone, Default)]
pub struct ConnectArgs {
    /// The coordinator's URL (https://HOST:PORT).
    #[arg(long, value_name = "URL", env = "DROVER_COORDINATOR")]
    pub coordinator: Option<String>,
    /// The operator certificate (PEM), from `drover-coordinator operator-cert`.
    #[arg(long, value_name = "FILE", env = "DROVER_CERT")]
    pub cert: Option<PathBuf>,
    /// The operator's private key (PEM).
    #[arg(long, value_name = "FILE", env = "DROVER_KEY")]
    pub key: Option<PathBuf>,
    /// The coordinator CA (PEM): the only root trusted for the coordinator's certificate.
    #[arg(long, value_name = "FILE", env = "DROVER_CA")]
    pub ca: Option<PathBuf>,
}

/// [`ConnectArgs`] with everything present.
#[derive(Debug, Clone)]
pub struct Target {
    /// The coordinator's base URL, without a trailing `/`.
    pub url: String,
    /// The operator certificate file.
    pub cert: PathBuf,
    /// The operator key file.
    pub key: PathBuf,
    /// The CA file.
    pub ca: PathBuf,
}

impl ConnectArgs {
    /// Checks that everything is given (64, naming each missing flag and its variable) and
    /// that the URL is `https://`; reads no file.
    pub fn resolve(&self) -> Result<Target, CliError> {
        let missing: Vec<&str> = [
            (self.coordinator.is_none(), "--coordinator URL (or DROVER_COORDINATOR)"),
            (self.cert.is_none(), "--cert FILE (or DROVER_CERT)"),
            (self.key.is_none(), "--key FILE (or DROVER_KEY)"),
            (self.ca.is_none(), "--ca FILE (or DROVER_CA)"),
        ]
        .into_iter()
        .filter_map(|(absent, what)| absent.then_some(what))
        .collect();
        if !missing.is_empty() {
            return Err(CliError::usage(format!("no coordinator or operator credentials given: missing {}", missing.join(", "))));
        }
        let (Some(url), Some(cert), Some(key), Some(ca)) = (&self.coordinator, &self.cert, &self.key, &self.ca) else {
            return Err(CliError::usage("missing coordinator or credentials"));
        };
        check_url(url).map_err(|why| CliError::usage(format!("--coordinator {url:?} {why}")))?;
        Ok(Target { url: url.trim_end_matches('/').to_owned(), cert: cert.clone(), key: key.clone(), ca: ca.clone() })
    }
}

fn check_url(url: &str) -> Result<(), &'static str> {
    let parsed = reqwest::Url::parse(url).map_err(|_| "is not a URL")?;
    if parsed.scheme() != "https" {
        return Err("is not an https:// URL");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    if parsed.query().is_some() || parsed.fragment().is_some() || !parsed.username().is_empty() {
        return Err("must be https://HOST[:PORT][/PATH] only");
    }
    Ok(())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, CliError> {
    let pem = read_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::data(format!("{}: malformed PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(CliError::data(format!("{}: no PEM certificate found", path.display())));
    }
    Ok(certs)
}

/// A connected-on-demand client for one coordinator.
pub struct OperatorClient {
    http: reqwest::Client,
    url: String,
}

impl OperatorClient {
    /// Reads the credentials (66 missing, 65 malformed) and builds the mTLS client.
    pub fn new(target: &Target) -> Result<OperatorClient, CliError> {
        let ca = certificates(&target.ca)?;
        let chain = certificates(&target.cert)?;
        let key = PrivateKeyDer::from_pem_slice(&read_file(&target.key)?)
            .map_err(|e| CliError::data(format!("{}: no usable private key: {e}", target.key.display())))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in ca {
            roots.add(cert).map_err(|e| CliError::data(format!("{}: not a usable CA certificate: {e}", target.ca.display())))?;
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| CliError::new(codes::SOFTWARE, format!("TLS setup: {e}")))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| {
                CliError::data(format!("{} and {} are not a usable certificate and key: {e}", target.cert.display(), target.key.display()))
            })?;
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("drover/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::new(codes::SOFTWARE, format!("HTTP client setup: {}", error_chain(&e))))?;
        Ok(OperatorClient { http, url: target.url.clone() })
    }

    /// `POST path` with a JSON body; the answer decoded from JSON.
    pub async fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.url);
        let resp = self.http.post(&url).header(reqwest::header::ACCEPT, "application/json").json(body).send().await.map_err(|e| {
            let message = error_chain(&e);
            if e.is_connect() {
                ClientError::Unreachable { url: url.clone(), message }
            } else {
                ClientError::Transport { url: url.clone(), message }
            }
        })?;
        let status = resp.status().as_u16();
        let ok = resp.status().is_success();
        let body = read_limited(&url, resp, if ok { MAX_RESPONSE_BYTES } else { 64 * 1024 }).await?;
        if !ok {
            return Err(error_from_body(&url, status, &body));
        }
        serde_json::from_slice(&body).map_err(|e| ClientError::Decode { url, message: e.to_string() })
    }
}

async fn read_limited(url: &str, mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| ClientError::Transport { url: url.to_owned(), message: error_chain(&e) })? {
        if out.len() + chunk.len() > limit {
            return Err(ClientError::Decode { url: url.to_owned(), message: format!("answer larger than {limit} bytes") });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection (TCP or TLS handshake) could be made.
    #[error("cannot reach the coordinator at {url}: {message}")]
    Unreachable {
        /// The URL.
        url: String,
        /// The cause.
        message: String,
    },
    /// The request failed after connecting.
    #[error("{url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// The cause.
        message: String,
    },
    /// The coordinator refused the request with a JSON error.
    #[error("coordinator refused ({status} {code}): {message}")]
    Api {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The error code.
        code: String,
        /// The server's message.
        message: String,
    },
    /// A non-2xx answer without the API's error body.
    #[error("{url}: HTTP {status}: {body}")]
    Http {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the body, printable characters only.
        body: String,
    },
    /// A 2xx answer that is not what the route promises.
    #[error("{url}: unexpected answer: {message}")]
    Decode {
        /// The URL.
        url: String,
        /// What is wrong.
        message: String,
    },
}

impl ClientError {
    /// The exit code: 77 for 401/403, 65 for another 4xx, 76 for an answer that is not the
    /// API's, 69 for everything else (unreachable, 5xx).
    pub fn code(&self) -> u8 {
        match self {
            ClientError::Api { status, .. } | ClientError::Http { status, .. } => match status {
                401 | 403 => codes::NO_PERM,
                400..=499 => codes::DATA,
                _ => codes::UNAVAILABLE,
            },
            ClientError::Decode { .. } => codes::PROTOCOL,
            ClientError::Unreachable { .. } | ClientError::Transport { .. } => codes::UNAVAILABLE,
        }
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> CliError {
        CliError::new(e.code(), e.to_string())
    }
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

/// At most 300 characters, control characters replaced: a server's text must not drive the
/// operator's terminal.
fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(300).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if s.chars().count() > 300 {
        out.push('…');
    }
    out
}

/// An error and its sources, `: `-joined (reqwest's own message omits the cause).
fn error_chain(e: &dyn std::error::Error) -> String {
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
    fn statuses_map_to_sysexits() {
        let api = |status| error_from_body("https://c/v1/hosts", status, br#"{"error":{"code":"x","message":"why"}}"#);
        assert_eq!(api(401).code(), codes::NO_PERM);
        assert_eq!(api(403).code(), codes::NO_PERM);
        assert_eq!(api(400).code(), codes::DATA);
        assert_eq!(api(409).code(), codes::DATA);
        assert_eq!(api(500).code(), codes::UNAVAILABLE);
        assert_eq!(api(503).code(), codes::UNAVAILABLE);
        assert!(api(409).to_string().contains("why"));
        let e = error_from_body("https://c/v1/hosts", 404, b"<html>\x1b[2J</html>");
        assert!(matches!(&e, ClientError::Http { body, .. } if !body.contains('\x1b')), "{e:?}");
        assert_eq!(e.code(), codes::DATA);
    }

    #[test]
    fn missing_pieces_are_named_with_their_variables() {
        let e = ConnectArgs::default().resolve().expect_err("missing");
        assert_eq!(e.code(), codes::USAGE);
        for needle in ["--coordinator", "DROVER_COORDINATOR", "--cert", "DROVER_CERT", "--key", "DROVER_KEY", "--ca", "DROVER_CA"] {
            assert!(e.to_string().contains(needle), "{needle}: {e}");
        }
        let args =
            ConnectArgs { coordinator: Some("http://c:1".into()), cert: Some("c".into()), key: Some("k".into()), ca: Some("a".into()) };
        assert_eq!(args.resolve().expect_err("http").code(), codes::USAGE);
        let ok = ConnectArgs { coordinator: Some("https://c:1/".into()), ..args }.resolve().expect("ok");
        assert_eq!(ok.url, "https://c:1");
    }
}
