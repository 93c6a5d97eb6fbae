//! One BMC's connection settings and the JSON requests every operation is made of.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION, RETRY_AFTER};
use serde_json::Value;

use crate::error::RedfishError;

/// How many times a 503 is retried before it counts as a refusal.
const RETRIES_ON_503: u32 = 3;
/// The longest `Retry-After` honoured; a longer one is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// One BMC.
#[derive(Clone)]
pub struct RedfishConfig {
    /// `https://bmc.example` (the service root is `/redfish/v1/` below it).
    pub base_url: String,
    /// The account.
    pub username: String,
    /// Its password (never logged; not in `Debug`).
    pub password: String,
    /// PEM of the CA (or the self-signed leaf) the BMC's certificate chains to.
    pub ca_pem: Option<Vec<u8>>,
    /// Allow `http://` (tests against a local emulator only: Basic auth in clear text).
    pub allow_plain_http: bool,
    /// Bound on each request (connect and read).
    pub timeout: Duration,
    /// Bound on a power change reaching its state.
    pub converge_timeout: Duration,
    /// Pause between two reads of `PowerState`.
    pub poll_interval: Duration,
}

impl std::fmt::Debug for RedfishConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedfishConfig").field("base_url", &self.base_url).field("username", &self.username).finish_non_exhaustive()
    }
}

impl RedfishConfig {
    /// A configuration with the defaults: 10 s per request, 60 s to converge, reads every
    /// second, HTTPS only.
    pub fn new(base_url: &str, username: &str, password: &str) -> RedfishConfig {
        RedfishConfig {
            base_url: base_url.trim_end_matches('/').to_owned(),
            username: username.to_owned(),
            password: password.to_owned(),
            ca_pem: None,
            allow_plain_http: false,
            timeout: Duration::from_secs(10),
            converge_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// A client for one BMC.
#[derive(Clone)]
pub struct RedfishClient {
    pub(crate) http: reqwest::Client,
    pub(crate) config: Arc<RedfishConfig>,
}

impl RedfishClient {
    /// Checks the configuration and builds the client; nothing is sent yet.
    pub fn new(config: RedfishConfig) -> Result<RedfishClient, RedfishError> {
        let bad = |reason: String| RedfishError::Config { reason };
        let scheme_ok = config.base_url.starts_with("https://") || (config.allow_plain_http && config.base_url.starts_with("http://"));
        if !scheme_ok {
            return Err(bad(format!("{}: a BMC is reached over https:// (Basic authentication sends the password)", config.base_url)));
        }
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &config.ca_pem {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| bad(format!("the BMC CA is not PEM: {e}")))?;
                roots.add(cert).map_err(|e| bad(format!("the BMC CA: {e}")))?;
            }
            if roots.is_empty() {
                return Err(bad("the BMC CA PEM holds no certificate".into()));
            }
        } else if config.base_url.starts_with("https://") {
            return Err(bad("an https BMC needs its CA (ca_pem): this client has no built-in roots".into()));
        }
        // BMCs often speak TLS 1.2 only (the DMTF emulator does): both versions are allowed.
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(format!("TLS setup: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            // Some BMCs redirect a name to its id (307): follow, within the same service.
            .redirect(reqwest::redirect::Policy::limited(3))
            .connect_timeout(config.timeout)
            .timeout(config.timeout)
            .user_agent(concat!("drover-redfish/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| bad(format!("HTTP client: {e}")))?;
        Ok(RedfishClient { http, config: Arc::new(config) })
    }

    /// The absolute URL of `path` (an `@odata.id` or an action `target`).
    pub(crate) fn url(&self, path: &str) -> String {
        if path.starts_with("http://") || path.starts_with("https://") {
            path.to_owned()
        } else {
            format!("{}{path}", self.config.base_url)
        }
    }

    /// `GET path` as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, RedfishError> {
        self.send(reqwest::Method::GET, path, None).await.map(|(_, v, _)| v)
    }

    /// `POST path` with a JSON body; the status and the body (`Null` when empty).
    pub async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value), RedfishError> {
        self.send(reqwest::Method::POST, path, Some(body)).await.map(|(s, v, _)| (s, v))
    }

    /// `POST path`, also returning the `Location` header (a 202's task monitor).
    pub(crate) async fn post_with_location(&self, path: &str, body: &Value) -> Result<(u16, Value, Option<String>), RedfishError> {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    /// `GET path` with its status (a task monitor answers 202 while the task runs).
    pub(crate) async fn get_status(&self, path: &str) -> Result<(u16, Value), RedfishError> {
        self.send(reqwest::Method::GET, path, None).await.map(|(s, v, _)| (s, v))
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<(u16, Value, Option<String>), RedfishError> {
        let uri = self.url(path);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut req = self
                .http
                .request(method.clone(), &uri)
                .header(ACCEPT, "application/json")
                .basic_auth(&self.config.username, Some(&self.config.password));
            if let Some(b) = body {
                req = req.header(CONTENT_TYPE, "application/json").body(b.to_string());
            }
            let resp = req.send().await.map_err(|source| RedfishError::Unreachable { uri: uri.clone(), source })?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
            let location = resp.headers().get(LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let bytes = resp.bytes().await.map_err(|source| RedfishError::Unreachable { uri: uri.clone(), source })?;
            if status == 503 && attempt <= RETRIES_ON_503 {
                // Starting up after a reboot, or overloaded (DSP0266): wait as told, then again.
                tokio::time::sleep(retry_after.unwrap_or(Duration::from_secs(1))).await;
                continue;
            }
            if !(200..300).contains(&status) {
                return Err(RedfishError::Refused { uri, status, message: error_message(&bytes) });
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok((status, Value::Null, location));
            }
            let value = serde_json::from_slice(&bytes)
                .map_err(|e| RedfishError::Protocol { uri: uri.clone(), reason: format!("not JSON: {e}") })?;
            return Ok((status, value, location));
        }
    }
}

/// The Redfish error message of a refusal, or the start of its body.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    if let Some(m) = parsed.as_ref().and_then(|v| v["error"]["message"].as_str()) {
        return m.chars().take(300).collect();
    }
    String::from_utf8_lossy(body).chars().take(300).map(|c| if c.is_control() { ' ' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_and_https_without_a_ca_are_refused_and_the_password_stays_hidden() {
        let c = RedfishConfig::new("http://10.0.0.1", "root", "s3cret-pw");
        assert!(matches!(RedfishClient::new(c.clone()), Err(RedfishError::Config { .. })));
        let https = RedfishConfig::new("https://10.0.0.1", "root", "s3cret-pw");
        let e = RedfishClient::new(https).err().expect("no CA");
        assert!(e.to_string().contains("CA"), "{e}");
        assert!(!format!("{c:?}").contains("s3cret-pw"));
        let mut ok = c;
        ok.allow_plain_http = true;
        assert!(RedfishClient::new(ok).is_ok());
    }

    #[test]
    fn refusals_carry_the_redfish_message() {
        let body = br#"{"error": {"code": "Base.1.0.GeneralError", "message": "Fake system X was not found"}}"#;
        assert_eq!(error_message(body), "Fake system X was not found");
        assert_eq!(error_message(b"<html>oops</html>"), "<html>oops</html>");
    }
}
