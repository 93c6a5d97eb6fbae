//! The coordinator's TLS: 1.3 only, the private CA as the only root, client certificates
//! optional at the handshake (enrollment has none) but checked against the CRL whenever one
//! is presented, so a revoked certificate never completes a handshake.
//!
//! Revocation changes the CRL, and rustls fixes its verifier at construction, so the server
//! config is rebuilt and swapped atomically; connections already established keep theirs,
//! every new handshake sees the new CRL.

use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM input did not hold what it should.
    #[error("{what}: {message}")]
    Pem {
        /// Which input.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {source}")]
    Rustls {
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
    /// The client verifier could not be built (bad CA or CRL).
    #[error("client certificate verifier: {message}")]
    Verifier {
        /// What is wrong.
        message: String,
    },
}

/// The certificates and key the server presents, and the CA it trusts for clients.
pub struct TlsMaterial {
    ca: CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl TlsMaterial {
    /// From PEM: the CA certificate, the server certificate and its private key.
    pub fn from_pem(ca_pem: &[u8], server_cert_pem: &[u8], server_key_pem: &[u8]) -> Result<Self, TlsError> {
        let pem = |what, e: rustls::pki_types::pem::Error| TlsError::Pem { what, message: e.to_string() };
        let ca = CertificateDer::from_pem_slice(ca_pem).map_err(|e| pem("CA certificate", e))?;
        let mut chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(server_cert_pem).collect::<Result<_, _>>().map_err(|e| pem("server certificate", e))?;
        if chain.is_empty() {
            return Err(TlsError::Pem { what: "server certificate", message: "no certificate found".to_owned() });
        }
        chain.push(ca.clone());
        let key = PrivateKeyDer::from_pem_slice(server_key_pem).map_err(|e| pem("server key", e))?;
        Ok(TlsMaterial { ca, chain, key })
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds a TLS 1.3-only server config that accepts clients with or without a certificate;
/// a presented certificate must chain to the CA and not be on the CRL.
pub fn server_config(material: &TlsMaterial, crl_der: Option<&[u8]>) -> Result<ServerConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    roots.add(material.ca.clone()).map_err(|source| TlsError::Rustls { source })?;
    let mut builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).allow_unauthenticated();
    if let Some(crl) = crl_der {
        builder = builder.with_crls([CertificateRevocationListDer::from(crl.to_vec())]);
    }
    let verifier = builder.build().map_err(|e| TlsError::Verifier { message: e.to_string() })?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|source| TlsError::Rustls { source })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(material.chain.clone(), material.key.clone_key())
        .map_err(|source| TlsError::Rustls { source })?;
    // The server's order wins: HTTP/1.1 first, whose connections cost nothing while a
    // long-poll waits (see `http1`); h2 for clients that offer only h2.
    config.alpn_protocols = vec![b"http/1.1".to_vec(), b"h2".to_vec()];
    Ok(config)
}

/// The live server config, swapped when the CRL changes.
pub struct TlsState {
    material: TlsMaterial,
    current: RwLock<Arc<ServerConfig>>,
}

impl TlsState {
    /// The server certificate (DER), the first of the chain served.
    pub fn server_cert_der(&self) -> &[u8] {
        self.material.chain.first().map_or(&[], |c| c.as_ref())
    }

    /// Starts with `crl_der` (None before anything was revoked).
    pub fn new(material: TlsMaterial, crl_der: Option<&[u8]>) -> Result<Self, TlsError> {
        let config = Arc::new(server_config(&material, crl_der)?);
        Ok(TlsState { material, current: RwLock::new(config) })
    }

    /// An acceptor for the next handshake.
    pub fn acceptor(&self) -> TlsAcceptor {
        // A poisoned lock only means a writer panicked mid-swap; the Arc inside is whole.
        let config = self.current.read().unwrap_or_else(|e| e.into_inner()).clone();
        TlsAcceptor::from(config)
    }

    /// Installs a new CRL for every handshake from now on.
    pub fn set_crl(&self, crl_der: &[u8]) -> Result<(), TlsError> {
        let config = Arc::new(server_config(&self.material, Some(crl_der))?);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }
}
