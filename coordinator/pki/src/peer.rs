//! The peer of a connection as the TLS layer learned it: no certificate, or one that chained
//! to the CA — with the identity its SAN URIs name, or why they name none. The listener
//! attaches it to every request of the connection; no header or body can change it.

use crate::identity::{Identity, IdentityError};

/// What the TLS layer learned about the peer of this connection.
#[derive(Debug, Clone)]
pub enum Peer {
    /// No client certificate (enrollment routes only).
    Anonymous,
    /// A certificate that chained to the CA and was not revoked at the handshake.
    Verified {
        /// Its identity.
        identity: Result<Identity, IdentityError>,
        /// Its serial (lowercase hex).
        serial: String,
    },
}
