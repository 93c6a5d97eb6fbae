//! Reaching a site's MAAS: the narrow [`MaasProbe`] trait the credential write, the probe
//! route and the preflight go through, and [`LiveProbe`], its implementation over the
//! `drover-maas` client.
//!
//! A probe proves two things: MAAS answers (`GET /version/`, anonymous, which also gives its
//! capabilities) and the token is accepted (`GET /rackcontrollers/`, which needs it and lists
//! the rack controllers an operator wants to see). The version endpoint alone would accept
//! any token, since it never looks at one.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Where and how to probe.
#[derive(Clone, Copy)]
pub struct ProbeTarget<'a> {
    /// MAAS's base URL (`…/MAAS`).
    pub base_url: &'a str,
    /// PEM CA for an HTTPS MAAS with a private CA.
    pub ca_pem: Option<&'a str>,
    /// `consumer_key:token_key:token_secret`.
    pub api_key: &'a str,
    /// Bound on each call.
    pub timeout: Duration,
}

impl<'a> ProbeTarget<'a> {
    /// `site`'s MAAS (its URL and CA) with `api_key`.
    pub fn for_site(site: &'a crate::store::Site, api_key: &'a str, timeout: Duration) -> ProbeTarget<'a> {
        ProbeTarget { base_url: &site.config.api_base_url, ca_pem: site.config.maas_ca_pem.as_deref(), api_key, timeout }
    }
}

impl std::fmt::Debug for ProbeTarget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeTarget").field("base_url", &self.base_url).field("api_key", &"<redacted>").finish_non_exhaustive()
    }
}

/// One rack controller, and what a successful probe learned: the API's own types.
pub use drover_proto::api::sites::{ProbeReport, RackController as RackSummary};

/// Why a probe failed. Messages never carry the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// MAAS did not answer, answered 5xx, or timed out: try again later.
    #[error("MAAS is unreachable: {message}")]
    Unreachable {
        /// What happened.
        message: String,
    },
    /// MAAS answered, and refused the token (401/403).
    #[error("MAAS refused the API token: {message}")]
    CredentialsRefused {
        /// MAAS's words.
        message: String,
    },
    /// The token is not `consumer_key:token_key:token_secret`, or the URL or CA is unusable.
    #[error("{message}")]
    Config {
        /// What is wrong.
        message: String,
    },
    /// MAAS answered something that is not MAAS's API.
    #[error("MAAS answered unexpectedly: {message}")]
    Protocol {
        /// What was wrong with it.
        message: String,
    },
}

/// The future a probe returns.
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = Result<ProbeReport, ProbeError>> + Send + 'a>>;

/// Reaches a MAAS region with a token.
pub trait MaasProbe: Send + Sync {
    /// Version and capabilities, then rack controllers with the token.
    fn probe<'a>(&'a self, target: ProbeTarget<'a>) -> ProbeFuture<'a>;
}

/// [`MaasProbe`] over the real client.
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveProbe;

impl MaasProbe for LiveProbe {
    fn probe<'a>(&'a self, target: ProbeTarget<'a>) -> ProbeFuture<'a> {
        Box::pin(async move {
            let api_key: drover_maas::ApiKey =
                target.api_key.parse().map_err(|e: drover_maas::MaasError| ProbeError::Config { message: e.to_string() })?;
            let config = drover_maas::ClientConfig {
                base_url: target.base_url.to_owned(),
                api_key,
                timeout: target.timeout,
                ca_pem: target.ca_pem.map(|p| p.as_bytes().to_vec()),
                retries: 1,
            };
            let client = drover_maas::MaasClient::new(config).map_err(|e| ProbeError::Config { message: e.to_string() })?;
            let version = client.version().await.map_err(classify)?;
            let racks = client.rack_controllers().await.map_err(classify)?;
            Ok(ProbeReport {
                version: version.version,
                capabilities: version.capabilities,
                rack_controllers: racks
                    .into_iter()
                    .map(|r| RackSummary { system_id: r.system_id, hostname: r.hostname, version: r.version })
                    .collect(),
            })
        })
    }
}

fn classify(e: drover_maas::MaasError) -> ProbeError {
    use drover_maas::ErrorClass;
    let message = e.to_string();
    match e.class() {
        ErrorClass::Credentials => ProbeError::CredentialsRefused { message },
        ErrorClass::Transient => ProbeError::Unreachable { message },
        ErrorClass::Config => ProbeError::Config { message },
        _ => ProbeError::Protocol { message },
    }
}
