//! Drover's HTTPS client for the coordinator, shared by `drover-agent` and `drover` (the
//! coordinator itself uses only its CA loading, [`load_ca`]).
//!
//! - **Trust**: rustls (ring) with exactly the coordinator CA as its root store; no system
//!   roots, no proxy CA, no fallback. TLS 1.3 only. ALPN offers `h2` and `http/1.1`
//!   ([`tls_config`]).
//! - **Identity**: optional; a client certificate chain and key ([`ClientIdentity`]) for the
//!   routes that need one (agent and operator routes), none for enrollment.
//! - **Fail-over**: a [`CoordinatorClient`] tries its URLs in order; the next one is tried only
//!   when a connection (TCP or TLS handshake) to the current one fails. Once a request reached
//!   a coordinator, its answer stands: a refusal is not retried elsewhere.
//! - **Errors**: one [`ClientError`]. A non-2xx answer with the API's
//!   `{"error":{"code","message"}}` body becomes [`ClientError::Api`] with the status, code and
//!   message; any other non-2xx becomes [`ClientError::Http`]; server text is made
//!   [`printable`] and truncated. Redirects are not followed and plain `http://` is never used.
//! - **Bounds**: a body is read up to [`MAX_RESPONSE_BYTES`] (an error body up to
//!   [`MAX_ERROR_BODY_BYTES`]); a longer one is refused.
//!
//! Exit codes are not decided here: each binary maps [`ClientError`] to its own sysexits code.
//!
//! - [`error`]: [`ClientError`], [`error_from_body`], [`printable`], [`error_chain`].
//! - [`tls`]: CA loading, PEM parsing, [`ClientIdentity`], the rustls configuration.
//! - [`coordinator`]: [`CoordinatorClient`], fail-over and bounded reads.

#![forbid(unsafe_code)]

pub mod coordinator;
pub mod error;
pub mod tls;

/// HTTP methods for [`CoordinatorClient::request_json`].
pub use reqwest::Method;
/// The rustls this crate's API speaks (certificates, keys, the client configuration).
pub use rustls;

pub use coordinator::{CONNECT_TIMEOUT, CoordinatorClient, MAX_ERROR_BODY_BYTES, MAX_RESPONSE_BYTES, REQUEST_TIMEOUT};
pub use error::{ClientError, ConnectFailure, error_chain, error_from_body, printable};
pub use tls::{ClientIdentity, load_ca, parse_certificates, parse_private_key, tls_config};
