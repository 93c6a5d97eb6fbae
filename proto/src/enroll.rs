//! Enrollment and distribution messages: creating a host (operator), enrolling it (agent,
//! token + CSR), renewing its certificate, and fetching a rollout's artifacts byte-exact.

use serde::{Deserialize, Serialize};

use crate::task::Secret;
use crate::time::Time;

/// `POST /v1/hosts` body (admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateHostRequest {
    /// The host's name (RFC 1123, lowercase).
    pub hostname: String,
    /// sha256 (hex) of the operator's own `trust.json`: the agent refuses to enroll if the
    /// coordinator's copy differs.
    pub trust_sha256: String,
    /// Token lifetime; the coordinator's default (2 h) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ttl_secs: Option<u64>,
}

/// `POST /v1/hosts` response: the only time the token is ever shown.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateHostResponse {
    /// The new host id (UUID).
    pub host_id: String,
    /// Its name.
    pub hostname: String,
    /// The one-time enrollment token.
    pub token: Secret,
    /// When the token expires.
    pub expires_at: Time,
    /// The command to run on the host (`curl … | sudo sh -s -- …`).
    pub command: Secret,
}

/// `POST /v1/enroll` body (no client certificate; the token authorises).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnrollRequest {
    /// The host id the bootstrap command names; the token must have been issued for it.
    pub host_id: String,
    /// The one-time token.
    pub token: Secret,
    /// A PEM certificate signing request; only its public key is used.
    pub csr: String,
    /// The host's X25519 public key (base64 of 32 bytes): task secrets are sealed to it
    /// ([`crate::seal`]). A host without one receives no task that carries a secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal_key: Option<String>,
    /// A PEM CSR for the host's Ed25519 evidence key ([`crate::evidence`]); only its public
    /// key is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_csr: Option<String>,
}

/// `POST /v1/enroll` response.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnrollResponse {
    /// The host id the certificate names.
    pub host_id: String,
    /// The hostname the certificate names.
    pub hostname: String,
    /// The client certificate (PEM).
    pub certificate: String,
    /// The coordinator CA (PEM).
    pub ca_certificate: String,
    /// The director's public key (SPKI PEM), pinned by the agent for intents and tasks.
    pub director_public_key: String,
    /// Where to reach the coordinator.
    pub coordinator_urls: Vec<String>,
    /// The evidence key's certificate (PEM), when the request carried an `evidenceCsr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_certificate: Option<String>,
}

/// `POST /v1/agent/renew` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenewRequest {
    /// A PEM CSR for the new key.
    pub csr: String,
}

/// `POST /v1/agent/renew` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenewResponse {
    /// The new certificate (PEM).
    pub certificate: String,
}

/// `GET /v1/rollouts/{rolloutId}` response: every artifact as the exact text CI produced, so
/// the agent verifies the bytes CI signed (strings carry UTF-8 JSON byte for byte).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutBundle {
    /// The manifest's bytes.
    pub manifest: String,
    /// Its `.sig` file's bytes.
    pub manifest_sig: String,
    /// The current `timestamp.json` bytes.
    pub timestamp: String,
    /// Its `.sig` file's bytes.
    pub timestamp_sig: String,
}

/// `GET /v1/rollouts/{rolloutId}/proof` response (`docs/manifest-proofs.md`): the calling
/// host's entry with its inclusion proof, the rollout's CI-signed root and the current
/// timestamp, the signed files as the exact text CI produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProofBundle {
    /// This host's entry, its leaf index and its audit path.
    pub proof: crate::merkle::EntryProof,
    /// `roots/<rolloutId>.json`'s bytes.
    pub root: String,
    /// Its `.sig` file's bytes.
    pub root_sig: String,
    /// The current `timestamp.json` bytes.
    pub timestamp: String,
    /// Its `.sig` file's bytes.
    pub timestamp_sig: String,
}

/// The command an operator runs on a new host. The script is fetched whole (pinned to the
/// coordinator's key) before anything runs, and only if the fetch succeeded; the token goes in
/// on stdin through the shell's `printf` builtin, so it is in no process's arguments. Every
/// interpolated value has a closed alphabet (see [`check_command_parts`]), so single quotes
/// suffice. The coordinator builds it; `drover enroll` rebuilds it to check what it received.
pub fn bootstrap_command(url: &str, pin: &str, host_id: &str, token: &str, trust_sha256: &str) -> String {
    format!(
        "s=$(curl -fsS --proto '=https' --tlsv1.3 --insecure --pinnedpubkey '{pin}' '{url}/v1/bootstrap.sh') && \
         printf '%s\\n' '{token}' | sudo sh -c \"$s\" drover-bootstrap --url '{url}' --pin '{pin}' --host-id '{host_id}' --trust-sha256 '{trust_sha256}'"
    )
}

/// Whether a coordinator URL may be interpolated into a bootstrap command and an agent's TOML:
/// `https://` + host, port and path characters only, no trailing slash.
pub fn is_command_safe_url(url: &str) -> bool {
    url.strip_prefix("https://").is_some_and(|rest| {
        !rest.is_empty() && !rest.ends_with('/') && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]/_".contains(&b))
    })
}

/// Checks that every value interpolated into a bootstrap command keeps to its alphabet:
/// `https://` + host/port/path characters, `sha256//` + base64, a UUID, a base64url token,
/// 64 lowercase hex digits.
pub fn check_command_parts(url: &str, pin: &str, host_id: &str, token: &str, trust_sha256: &str) -> Result<(), CommandPartError> {
    let url_ok = is_command_safe_url(url);
    let pin_ok = pin
        .strip_prefix("sha256//")
        .is_some_and(|b64| !b64.is_empty() && b64.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)));
    let id_ok = host_id.len() == 36 && host_id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    let token_ok = !token.is_empty() && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let hash_ok = crate::names::is_sha256_hex(trust_sha256);
    for (ok, what) in [(url_ok, "url"), (pin_ok, "pin"), (id_ok, "host id"), (token_ok, "token"), (hash_ok, "trust hash")] {
        if !ok {
            return Err(CommandPartError { part: what });
        }
    }
    Ok(())
}

/// A value of a bootstrap command with characters outside its alphabet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bootstrap command {part} has characters outside its alphabet")]
pub struct CommandPartError {
    /// Which value: url, pin, host id, token, trust hash.
    pub part: &'static str,
}
