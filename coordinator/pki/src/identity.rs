//! Who is on the other end of a TLS connection, as its certificate says — never as a request
//! body says.
//!
//! Identities live in the certificate's subjectAltName as URIs the coordinator's CA alone
//! issues: `urn:drover:host:<uuid>` (with the hostname as the subject CN and a DNS SAN) for
//! agents, `urn:drover:operator:<role>:<name>` for operators. One certificate carries exactly
//! one such URI; anything else is not an identity.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// URI prefix of a host identity.
pub const HOST_URI_PREFIX: &str = "urn:drover:host:";
/// URI prefix of an operator identity.
pub const OPERATOR_URI_PREFIX: &str = "urn:drover:operator:";

/// Why a certificate names no usable identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Not a parsable X.509 certificate.
    #[error("client certificate is not valid X.509")]
    NotX509,
    /// No `urn:drover:` URI, or more than one.
    #[error("client certificate names {found} Drover identities; exactly one is required")]
    NotExactlyOne {
        /// How many were found.
        found: usize,
    },
    /// A `urn:drover:` URI that does not parse.
    #[error("client certificate identity {uri:?} is malformed")]
    Malformed {
        /// The URI.
        uri: String,
    },
    /// A host certificate whose subject CN is not a valid hostname.
    #[error("host certificate has no valid hostname in its subject common name")]
    NoHostname,
}

/// The serial of a DER certificate as lowercase hex, the form revocation goes by.
pub fn cert_serial_hex(der: &[u8]) -> Option<String> {
    X509Certificate::from_der(der).ok().map(|(_, cert)| hex::encode(cert.raw_serial()))
}

/// An operator's role, checked per route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Everything.
    Admin,
    /// Read-only.
    Viewer,
    /// Publishes releases (CI).
    Publisher,
}

impl Role {
    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
            Role::Publisher => "publisher",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Role::Admin),
            "viewer" => Ok(Role::Viewer),
            "publisher" => Ok(Role::Publisher),
            other => Err(format!("unknown role {other:?} (expected admin, viewer or publisher)")),
        }
    }
}

/// An operator name outside `[A-Za-z0-9._-]{1,64}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("operator name {name:?} must match [A-Za-z0-9._-]{{1,64}}")]
pub struct OperatorNameError {
    /// The name given.
    pub name: String,
}

/// Checks an operator name: `[A-Za-z0-9._-]{1,64}` (it appears in audit records and URIs).
pub fn check_operator_name(name: &str) -> Result<(), OperatorNameError> {
    drover_proto::names::check_channel(name).map_err(|_| OperatorNameError { name: name.to_owned() })
}

/// The identity a client certificate proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A host's agent.
    Host {
        /// The host id.
        host_id: Uuid,
        /// Its hostname.
        hostname: String,
    },
    /// An operator (a person, or CI for `publisher`).
    Operator {
        /// Their name.
        name: String,
        /// Their role.
        role: Role,
    },
}

impl Identity {
    /// The SAN URI that encodes this identity.
    pub fn uri(&self) -> String {
        match self {
            Identity::Host { host_id, .. } => format!("{HOST_URI_PREFIX}{host_id}"),
            Identity::Operator { name, role } => format!("{OPERATOR_URI_PREFIX}{role}:{name}"),
        }
    }

    /// Parses the identity of a DER certificate the TLS layer already validated.
    pub fn from_cert_der(der: &[u8]) -> Result<Identity, IdentityError> {
        let (_, cert) = X509Certificate::from_der(der).map_err(|_| IdentityError::NotX509)?;
        let mut uris = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                if let GeneralName::URI(uri) = name {
                    if uri.starts_with("urn:drover:") {
                        uris.push((*uri).to_owned());
                    }
                }
            }
        }
        let [uri] = uris.as_slice() else { return Err(IdentityError::NotExactlyOne { found: uris.len() }) };
        let malformed = || IdentityError::Malformed { uri: uri.clone() };
        if let Some(id) = uri.strip_prefix(HOST_URI_PREFIX) {
            let host_id = Uuid::parse_str(id).map_err(|_| malformed())?;
            let hostname = cert
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .filter(|h| drover_proto::names::check_hostname(h).is_ok())
                .ok_or(IdentityError::NoHostname)?
                .to_owned();
            return Ok(Identity::Host { host_id, hostname });
        }
        if let Some(rest) = uri.strip_prefix(OPERATOR_URI_PREFIX) {
            let (role, name) = rest.split_once(':').ok_or_else(malformed)?;
            let role: Role = role.parse().map_err(|_| malformed())?;
            check_operator_name(name).map_err(|_| malformed())?;
            return Ok(Identity::Operator { name: name.to_owned(), role });
        }
        Err(malformed())
    }
}
