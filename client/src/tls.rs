//! What the TLS client trusts and presents: the coordinator CA (the only root), an optional
//! client identity, and the rustls configuration every Drover client uses.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::ClientError;

/// A client certificate chain and its private key, for the routes that need one.
pub struct ClientIdentity {
    /// The certificate (first) and any intermediates.
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key.
    pub key: PrivateKeyDer<'static>,
}

impl ClientIdentity {
    /// Parses a PEM certificate chain and a PEM private key (PKCS#8, SEC1 or PKCS#1); errors
    /// name them "client certificate" and "client key".
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientIdentity, ClientError> {
        let chain = parse_certificates("client certificate", cert_pem)?;
        let key = parse_private_key("client key", key_pem)?;
        Ok(ClientIdentity { chain, key })
    }
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity").field("chain", &self.chain.len()).field("key", &"<redacted>").finish()
    }
}

/// Parses every certificate in `pem`; at least one is required. `what` names the input in
/// errors ([`ClientError::BadPem`]).
pub fn parse_certificates(what: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ClientError::BadPem { what: what.to_owned(), message: format!("malformed PEM: {e}") })?;
    if certs.is_empty() {
        return Err(ClientError::BadPem { what: what.to_owned(), message: "no PEM certificate found".to_owned() });
    }
    Ok(certs)
}

/// Parses the first private key in `pem` (PKCS#8, SEC1 or PKCS#1). `what` names the input in
/// errors ([`ClientError::BadPem`]).
pub fn parse_private_key(what: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, ClientError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| ClientError::BadPem { what: what.to_owned(), message: format!("no usable private key: {e}") })
}

/// Reads and parses the CA file ([`ClientError::ReadCa`], or [`ClientError::BadPem`] naming
/// "CA file FILE").
pub fn load_ca(file: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let pem = std::fs::read(file).map_err(|source| ClientError::ReadCa { file: file.to_owned(), source })?;
    parse_certificates(&format!("CA file {}", file.display()), &pem)
}

/// The rustls configuration every Drover client uses: ring, TLS 1.3 only, `ca` as the only
/// roots, an optional client identity, ALPN `h2` then `http/1.1`.
pub fn tls_config(ca: &[CertificateDer<'static>], identity: Option<ClientIdentity>) -> Result<rustls::ClientConfig, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in ca {
        roots.add(cert.clone()).map_err(|e| ClientError::UnusableCa { message: e.to_string() })?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ClientError::Setup { message: e.to_string() })?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(id) => {
            builder.with_client_auth_cert(id.chain, id.key).map_err(|e| ClientError::UnusableIdentity { message: e.to_string() })?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_problems_are_named() {
        let e = parse_certificates("CA file /x", b"not pem").expect_err("refused");
        assert!(matches!(e, ClientError::BadPem { .. }), "{e:?}");
        assert!(e.to_string().starts_with("CA file /x: "), "{e}");
        let e = ClientIdentity::from_pem(b"", b"").expect_err("refused");
        assert!(matches!(e, ClientError::BadPem { .. }), "{e:?}");
        assert!(e.to_string().starts_with("client certificate: "), "{e}");
        let e = parse_private_key("/etc/op.key", b"not a key").expect_err("refused");
        assert!(e.to_string().starts_with("/etc/op.key: no usable private key: "), "{e}");
    }

    #[test]
    fn a_missing_ca_file_is_a_read_error() {
        let e = load_ca(Path::new("/nonexistent/drover-ca.crt")).expect_err("missing");
        assert!(matches!(&e, ClientError::ReadCa { source, .. } if source.kind() == std::io::ErrorKind::NotFound), "{e:?}");
        assert!(e.to_string().starts_with("cannot read CA file /nonexistent/drover-ca.crt: "), "{e}");
    }

    #[test]
    fn an_identity_whose_key_is_not_its_certificates_is_refused() {
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("ca");
        let other = rcgen::KeyPair::generate().expect("key");
        let identity = ClientIdentity::from_pem(ca.cert.pem().as_bytes(), other.serialize_pem().as_bytes()).expect("parses");
        let config = tls_config(&[ca.cert.der().clone()], Some(identity));
        assert!(matches!(&config, Err(ClientError::UnusableIdentity { .. })), "{:?}", config.err());
        let config = tls_config(&[ca.cert.der().clone()], None).expect("config");
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    }
}
