//! The coordinator's trust material (the crate `drover-pki`): nothing here serves a request or
//! reads the store.
//!
//! - [`identity`]: who a client certificate proves (host id and hostname, or operator role), and
//!   [`Peer`]: what the TLS layer learned about a connection's peer.
//! - [`pki`]: the CA: server, host (from a CSR) and operator certificates, the CRL.
//! - [`tls`]: TLS 1.3 only, optional client certificates checked against the CA and CRL.
//! - [`state_dir`]: the state directory's files (CA, server credential, director key), `init` and `open`.
//! - [`director`]: the director key and its signed rotations.

#![forbid(unsafe_code)]

pub mod director;
pub mod identity;
pub mod peer;
pub mod pki;
pub mod state_dir;
pub mod tls;

pub use peer::Peer;
