//! The wire: a rustls server (TLS 1.2 and 1.3, ALPN `http/1.1`, the certificate chain and key
//! from PEM files) in front of hyper's HTTP/1.1, one task per connection. Each request's body
//! is read whole (at most [`MAX_BODY`] bytes), then [`api::handle`] answers it under the one
//! mutex that holds the [`Shelf`], at the instant it was read. Every answer with a body is
//! `application/json` and every answer carries `OData-Version: 4.0`.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::api::{self, Credentials, Reply};
use super::shelf::Shelf;

/// The largest request body read.
pub const MAX_BODY: usize = 1 << 20;

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the shelf's TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file is not PEM.
    #[error("{}: not a PEM certificate: {source}", path.display())]
    Certificate {
        /// The file.
        path: std::path::PathBuf,
        /// The PEM error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{}: no certificate", path.display())]
    NoCertificate {
        /// The file.
        path: std::path::PathBuf,
    },
    /// The key file holds no PEM private key.
    #[error("{}: not a PEM private key: {source}", path.display())]
    Key {
        /// The file.
        path: std::path::PathBuf,
        /// The PEM error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the protocol versions.
    #[error(transparent)]
    Versions(rustls::Error),
    /// The certificate and the key do not make a pair rustls takes.
    #[error("certificate and key: {source}")]
    Pair {
        /// rustls's error.
        #[source]
        source: rustls::Error,
    },
}

/// The TLS server configuration from a PEM certificate chain and a PEM private key.
pub fn tls_config(cert_pem: &Path, key_pem: &Path) -> Result<ServerConfig, TlsError> {
    let read = |p: &Path| std::fs::read(p).map_err(|source| TlsError::Read { path: p.to_owned(), source });
    let cert_bytes = read(cert_pem)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_bytes)
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Certificate { path: cert_pem.to_owned(), source })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert_pem.to_owned() });
    }
    let key = PrivateKeyDer::from_pem_slice(&read(key_pem)?).map_err(|source| TlsError::Key { path: key_pem.to_owned(), source })?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Versions)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|source| TlsError::Pair { source })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

struct Shared {
    shelf: Mutex<Shelf>,
    creds: Credentials,
}

/// Serves until the process ends; a failed accept or handshake is reported and skipped.
pub async fn serve(listener: TcpListener, tls: ServerConfig, shelf: Shelf, creds: Credentials) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let shared = Arc::new(Shared { shelf: Mutex::new(shelf), creds });
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // E.g. out of file descriptors: back off briefly rather than spin.
                eprintln!("fake-shelf: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return eprintln!("fake-shelf: TLS handshake: {e}"),
                Err(_) => return eprintln!("fake-shelf: TLS handshake timed out"),
            };
            let service = hyper::service::service_fn(move |req| answer(Arc::clone(&shared), req));
            let io = hyper_util::rt::TokioIo::new(tls);
            if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                if !e.is_incomplete_message() {
                    eprintln!("fake-shelf: connection: {e}");
                }
            }
        });
    }
}

async fn answer(shared: Arc<Shared>, req: hyper::Request<Incoming>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = req.into_parts();
    let header = |name: HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Ok(into_response(api::control_error(400, format!("could not read the body: {e}")))),
    };
    let request = api::Request {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        authorization: header(AUTHORIZATION),
        content_type: header(CONTENT_TYPE),
        body: &body,
    };
    let reply = {
        let mut shelf = shared.shelf.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        api::handle(&mut shelf, &shared.creds, &request, Instant::now())
    };
    Ok(into_response(reply))
}

fn into_response(reply: Reply) -> Response<Full<Bytes>> {
    let body = reply.body.as_ref().map(|v| Bytes::from(v.to_string())).unwrap_or_default();
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    if reply.body.is_some() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    headers.insert(HeaderName::from_static("odata-version"), HeaderValue::from_static("4.0"));
    for (name, value) in reply.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.append(HeaderName::from_static(name), value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_become_json_responses() {
        let r = into_response(Reply::json(401, serde_json::json!({"error": {}})).with_header("www-authenticate", "Basic realm=\"x\""));
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(r.headers()["odata-version"], "4.0");
        assert_eq!(r.headers()["www-authenticate"], "Basic realm=\"x\"");
        let empty = into_response(Reply::no_content());
        assert_eq!(empty.status(), 204);
        assert!(empty.headers().get("content-type").is_none());
    }

    #[test]
    fn tls_config_names_the_file_it_could_not_use() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        assert!(tls_config(&missing, &missing).unwrap_err().to_string().contains("missing.pem"));
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not pem").unwrap();
        assert!(tls_config(&junk, &junk).unwrap_err().to_string().contains("junk.pem"));
    }
}
