//! The transport: configuration, signing each attempt, timeouts, retries of idempotent calls,
//! and turning answers into values or [`MaasError`]s.
//!
//! Only `GET`s are retried, and only on [`ErrorClass::Transient`] errors: MAAS's POST ops
//! (deploy, release, commission…) change state, and a POST whose answer was lost may well have
//! been applied. Every attempt is bounded by the configured timeout and signed afresh (MAAS
//! refuses a reused nonce). Redirects are not followed: MAAS's API paths are requested with their
//! trailing slash, and a redirect would only be a misconfigured base URL.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::de::DeserializeOwned;

use crate::auth::{ApiKey, authorization_header, fresh_nonce, unix_now};
use crate::error::{BodyRead, ErrorClass, MaasError, RequestLine, scrub, status_error};
use crate::form::Params;
use crate::types::{RackController, Version};

/// The API root under the base URL.
const API: &str = "/api/2.0";
/// The largest success body read (a big fleet's full machine list is tens of MB).
const MAX_BODY: usize = 256 << 20;
/// The largest error body read (messages are a sentence; anything longer is a proxy's page).
const MAX_ERROR_BODY: usize = 64 << 10;
/// The shortest consumer or token key scrubbed from MAAS's errors (see `key_material`).
const MIN_SCRUBBED_KEY: usize = 8;
/// The first retry's wait; it doubles per retry up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest computed backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Characters escaped in a path segment (ids come from callers and must not add segments).
const SEGMENT: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'#').add(b'%').add(b'/').add(b'?').add(b'<').add(b'>').add(b'\\');

/// How to reach MAAS.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Like `http://10.0.0.1:5240/MAAS` (a trailing `/` or `/api/2.0` is tolerated).
    pub base_url: String,
    /// The API key.
    pub api_key: ApiKey,
    /// Bound of each HTTP attempt: connect, send and read the whole answer.
    pub timeout: Duration,
    /// PEM root certificate(s) for an https MAAS (required there: no system roots are built in).
    pub ca_pem: Option<Vec<u8>>,
    /// Extra attempts of idempotent (GET) calls after a transient error.
    pub retries: u32,
}

impl ClientConfig {
    /// A configuration with a 30 s timeout, 2 retries and no CA.
    pub fn new(base_url: &str, api_key: ApiKey) -> ClientConfig {
        ClientConfig { base_url: base_url.to_owned(), api_key, timeout: Duration::from_secs(30), ca_pem: None, retries: 2 }
    }
}

/// A MAAS API 2.0 client. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct MaasClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// The base URL without a trailing slash.
    base: String,
    key: ApiKey,
    timeout: Duration,
    retries: u32,
}

impl fmt::Debug for MaasClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaasClient")
            .field("base", &self.inner.base)
            .field("key", &self.inner.key)
            .field("timeout", &self.inner.timeout)
            .field("retries", &self.inner.retries)
            .finish()
    }
}

/// One API call, before it is sent.
pub(crate) struct Call {
    method: reqwest::Method,
    /// Under [`API`], starting and ending with `/`.
    path: String,
    op: Option<&'static str>,
    query: Params,
    form: Option<Params>,
    anonymous: bool,
    /// Values to scrub from error messages besides the token secret.
    secrets: Vec<String>,
    /// The answer holds credentials: never quote it in parse errors.
    secret_answer: bool,
}

impl Call {
    fn new(method: reqwest::Method, path: String) -> Call {
        Call { method, path, op: None, query: Params::new(), form: None, anonymous: false, secrets: Vec::new(), secret_answer: false }
    }

    /// A GET of `path` (under `/api/2.0`).
    pub(crate) fn get(path: String) -> Call {
        Call::new(reqwest::Method::GET, path)
    }

    /// A POST of `path` with an (initially empty) form body.
    pub(crate) fn post(path: String) -> Call {
        let mut c = Call::new(reqwest::Method::POST, path);
        c.form = Some(Params::new());
        c
    }

    /// A PUT of `path` with `form` as body.
    pub(crate) fn put(path: String, form: Params) -> Call {
        let mut c = Call::new(reqwest::Method::PUT, path);
        c.form = Some(form);
        c
    }

    /// A DELETE of `path`.
    pub(crate) fn delete(path: String) -> Call {
        Call::new(reqwest::Method::DELETE, path)
    }

    /// Sets `op=` (sent in the query string for every method).
    pub(crate) fn op(mut self, op: &'static str) -> Call {
        self.op = Some(op);
        self
    }

    /// Sets the query parameters (GET filters).
    pub(crate) fn query(mut self, query: Params) -> Call {
        self.query = query;
        self
    }

    /// Sets the form body (POST/PUT).
    pub(crate) fn form(mut self, form: Params) -> Call {
        self.form = Some(form);
        self
    }

    /// Sends no Authorization header.
    pub(crate) fn anonymous(mut self) -> Call {
        self.anonymous = true;
        self
    }

    /// Scrubs these values from any error message of this call.
    pub(crate) fn secrets<'a>(mut self, values: impl Iterator<Item = &'a str>) -> Call {
        self.secrets.extend(values.map(str::to_owned));
        self
    }

    /// The answer holds credentials.
    pub(crate) fn secret_answer(mut self) -> Call {
        self.secret_answer = true;
        self
    }

    fn line(&self) -> RequestLine {
        let method = match self.method.as_str() {
            "GET" => "GET",
            "POST" => "POST",
            "PUT" => "PUT",
            "DELETE" => "DELETE",
            _ => "OTHER",
        };
        RequestLine { method, path: format!("{API}{}", self.path), op: self.op }
    }
}

/// A path segment from a caller-supplied id.
pub(crate) fn seg(id: &str) -> String {
    utf8_percent_encode(id, SEGMENT).to_string()
}

/// A successful answer.
pub(crate) struct Answer {
    /// The status (2xx).
    pub(crate) status: u16,
    /// The body.
    pub(crate) body: Vec<u8>,
}

impl MaasClient {
    /// Checks the configuration and builds the client; nothing is sent yet.
    pub fn new(config: ClientConfig) -> Result<MaasClient, MaasError> {
        let base = normalise_base(&config.base_url)?;
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &config.ca_pem {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<_, _>>()
                .map_err(|e| MaasError::BadCa { reason: format!("not PEM certificates: {e}") })?;
            if certs.is_empty() {
                return Err(MaasError::BadCa { reason: "no certificate in the PEM".to_owned() });
            }
            for cert in certs {
                roots.add(cert).map_err(|e| MaasError::BadCa { reason: e.to_string() })?;
            }
        } else if base.starts_with("https:") {
            return Err(MaasError::BadCa { reason: "an https MAAS needs ca_pem: this client has no built-in roots".to_owned() });
        }
        // MAAS's own TLS may be 1.2, so both versions are allowed (unlike the coordinator's).
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| MaasError::BadCa { reason: format!("TLS setup: {e}") })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout)
            .user_agent(concat!("drover-maas/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| MaasError::Setup { source })?;
        Ok(MaasClient { inner: Arc::new(Inner { http, base, key: config.api_key, timeout: config.timeout, retries: config.retries }) })
    }

    /// The base URL in use (without a trailing slash).
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// `GET /api/2.0/version/`. Anonymous in MAAS: it shows MAAS is reachable, not that the key
    /// works (use [`MaasClient::rack_controllers`] for that).
    pub async fn version(&self) -> Result<Version, MaasError> {
        self.json(Call::get("/version/".to_owned()).anonymous()).await
    }

    /// `GET /api/2.0/rackcontrollers/`: authenticated, so a success proves the API key.
    pub async fn rack_controllers(&self) -> Result<Vec<RackController>, MaasError> {
        self.json(Call::get("/rackcontrollers/".to_owned())).await
    }

    /// `POST /maas/?op=set_config`: sets a server setting (admin); MAAS answers `OK` text, and
    /// a 400 naming the setting for an unknown name or a value its form refuses.
    pub async fn set_config(&self, name: &str, value: &str) -> Result<(), MaasError> {
        let mut p = Params::new();
        p.text("name", name).text("value", value);
        self.empty(Call::post("/maas/".to_owned()).op("set_config").form(p)).await.map(drop)
    }

    /// `GET /maas/?op=get_config`: a server setting's value, as MAAS's JSON.
    pub async fn get_config(&self, name: &str) -> Result<serde_json::Value, MaasError> {
        let mut p = Params::new();
        p.text("name", name);
        self.json(Call::get("/maas/".to_owned()).op("get_config").query(p)).await
    }

    /// Sends `call` and parses the JSON answer as `T`.
    pub(crate) async fn json<T: DeserializeOwned>(&self, call: Call) -> Result<T, MaasError> {
        let line = call.line();
        let secret_answer = call.secret_answer;
        let answer = self.execute(call).await?;
        serde_json::from_slice(&answer.body).map_err(|e| {
            if secret_answer {
                // serde's message may quote the value it choked on: a credential here.
                MaasError::Protocol { request: line, reason: "the answer is not the expected JSON".to_owned(), source: None }
            } else {
                let reason = scrub(&format!("the answer is not the expected JSON: {e}"), &self.key_material());
                MaasError::Protocol { request: line, reason, source: Some(e) }
            }
        })
    }

    /// Sends `call`, expecting no meaningful body (204 deletes, `OK` texts).
    pub(crate) async fn empty(&self, call: Call) -> Result<u16, MaasError> {
        Ok(self.execute(call).await?.status)
    }

    /// Sends `call`, retrying idempotent ones on transient errors.
    pub(crate) async fn execute(&self, call: Call) -> Result<Answer, MaasError> {
        let idempotent = call.method == reqwest::Method::GET;
        let attempts = if idempotent { self.inner.retries.saturating_add(1) } else { 1 };
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.attempt(&call).await {
                Ok(answer) => return Ok(answer),
                Err(e) if attempt < attempts && e.class() == ErrorClass::Transient => {
                    let wait = backoff(attempt, e.retry_after(), self.inner.timeout);
                    tracing::warn!(error = %e, attempt, wait_ms = wait.as_millis() as u64, "MAAS call failed; retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Every part of the API key in use, scrubbed from whatever MAAS answers: the secret is
    /// the credential, and the two keys name the token (MAAS's 401 quotes the one it refused)
    /// — none belongs in an error an operator, a log or an event sees. A key shorter than
    /// [`MIN_SCRUBBED_KEY`] is left out: MAAS's are 18 characters, and replacing every `ck` of a
    /// test key would garble the message while hiding nothing a guess would not find.
    fn key_material(&self) -> Vec<&str> {
        let key = &self.inner.key;
        let mut parts = vec![key.token_secret.as_str()];
        parts.extend([key.token_key.as_str(), key.consumer_key.as_str()].into_iter().filter(|k| k.len() >= MIN_SCRUBBED_KEY));
        parts
    }

    /// One signed attempt, bounded by the timeout.
    async fn attempt(&self, call: &Call) -> Result<Answer, MaasError> {
        let line = call.line();
        let mut query = Params::new();
        if let Some(op) = call.op {
            query.text("op", op);
        }
        let mut url = format!("{}{}{}", self.inner.base, API, call.path);
        let q = [query.encode(), call.query.encode()].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join("&");
        if !q.is_empty() {
            url.push('?');
            url.push_str(&q);
        }
        let mut req = self.inner.http.request(call.method.clone(), &url).header(ACCEPT, "application/json");
        if !call.anonymous {
            let mut auth = HeaderValue::from_str(&authorization_header(&self.inner.key, &fresh_nonce(), unix_now()))
                .map_err(|_| MaasError::BadApiKey { reason: "it cannot be sent in an HTTP header".to_owned() })?;
            // Keeps it out of any HTTP-level debug output.
            auth.set_sensitive(true);
            req = req.header(AUTHORIZATION, auth);
        }
        if let Some(form) = &call.form {
            req = req.header(CONTENT_TYPE, "application/x-www-form-urlencoded").body(form.encode());
        }
        tracing::debug!(request = %line, params = ?call.form.as_ref().map(|f| f.keys().collect::<Vec<_>>()), "MAAS call");
        let timeout = self.inner.timeout;
        let exchange = async {
            let resp = req.send().await.map_err(|e| transport_error(&line, e, timeout))?;
            let status = resp.status().as_u16();
            let retry_after = resp.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
            let success = (200..300).contains(&status);
            let (body, read) = read_limited(resp, if success { MAX_BODY } else { MAX_ERROR_BODY }, &line, timeout).await?;
            Ok::<_, MaasError>((status, retry_after, body, read, success))
        };
        let (status, retry_after, body, read, success) =
            tokio::time::timeout(timeout, exchange).await.map_err(|_| MaasError::Timeout { request: line.clone(), after: timeout })??;
        if success {
            return Ok(Answer { status, body });
        }
        let mut secrets = self.key_material();
        secrets.extend(call.secrets.iter().map(String::as_str));
        let error = status_error(line, status, &body, read, retry_after.map(Duration::from_secs), &secrets);
        tracing::debug!(error = %error, "MAAS refused");
        Err(error)
    }
}

/// Reads at most `limit` bytes of body; a longer success body is a protocol error, a longer
/// error body is cut (only its start is shown anyway), and says so.
async fn read_limited(
    mut resp: reqwest::Response,
    limit: usize,
    line: &RequestLine,
    timeout: Duration,
) -> Result<(Vec<u8>, BodyRead), MaasError> {
    let success = resp.status().is_success();
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport_error(line, e, timeout))? {
        if body.len() + chunk.len() > limit {
            if success {
                return Err(MaasError::Protocol {
                    request: line.clone(),
                    reason: format!("answer larger than {limit} bytes"),
                    source: None,
                });
            }
            body.extend_from_slice(&chunk[..limit - body.len()]);
            return Ok((body, BodyRead::Cut));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, BodyRead::Whole))
}

/// A reqwest failure as a transient error, without its URL.
fn transport_error(line: &RequestLine, e: reqwest::Error, timeout: Duration) -> MaasError {
    if e.is_timeout() {
        return MaasError::Timeout { request: line.clone(), after: timeout };
    }
    if let Some(reason) = tls_refusal(&e) {
        return MaasError::Tls { request: line.clone(), reason };
    }
    MaasError::Connect { request: line.clone(), source: e.without_url() }
}

/// rustls's reason when the failure was a refused handshake (somewhere in the error's source
/// chain, possibly wrapped in `io::Error`s).
fn tls_refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(t.to_string());
        }
        // An io::Error wrapping another error reports that error's *source* as its own, so
        // step into what it wraps instead, or the rustls error in the middle is skipped.
        current = match err.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// The wait before retry number `attempt` (1-based): MAAS's `Retry-After` when it sent one,
/// else a doubling backoff; never longer than the per-call timeout, so a retry loop stays
/// proportional to what the caller configured.
fn backoff(attempt: u32, retry_after: Option<Duration>, timeout: Duration) -> Duration {
    let computed = FIRST_BACKOFF.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(MAX_BACKOFF);
    retry_after.unwrap_or(computed).min(timeout)
}

/// Checks and normalises the base URL: http or https, a host, no query, fragment or
/// credentials; trailing `/` and `/api/2.0` removed.
fn normalise_base(raw: &str) -> Result<String, MaasError> {
    let shown = |u: &reqwest::Url| format!("{}://{}{}", u.scheme(), u.host_str().unwrap_or(""), u.path());
    let url = reqwest::Url::parse(raw.trim())
        .map_err(|e| MaasError::BadUrl { url: "<unparseable>".to_owned(), reason: format!("not a URL: {e}") })?;
    let bad = |reason: &str| MaasError::BadUrl { url: shown(&url), reason: reason.to_owned() };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("credentials do not belong in the URL: give the API key"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("no query or fragment allowed"));
    }
    let mut s = url.as_str().trim_end_matches('/').to_owned();
    for suffix in ["/api/2.0", "/api"] {
        if let Some(stripped) = s.strip_suffix(suffix) {
            s = stripped.to_owned();
            break;
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ApiKey {
        "CK:TK:TS".parse().expect("key")
    }

    #[test]
    fn base_urls_are_normalised() {
        for (input, want) in [
            ("http://10.0.0.1:5240/MAAS", "http://10.0.0.1:5240/MAAS"),
            ("http://10.0.0.1:5240/MAAS/", "http://10.0.0.1:5240/MAAS"),
            ("http://10.0.0.1:5240/MAAS/api/2.0/", "http://10.0.0.1:5240/MAAS"),
            ("http://maas.example:5240/MAAS/api", "http://maas.example:5240/MAAS"),
            ("https://maas.example/", "https://maas.example"),
        ] {
            assert_eq!(normalise_base(input).expect(input), want);
        }
    }

    #[test]
    fn bad_urls_are_config_errors_without_credentials() {
        for input in ["ftp://x/MAAS", "not a url", "http://user:pw-secret@x/MAAS", "http://x/MAAS?a=b"] {
            let e = normalise_base(input).expect_err(input);
            assert_eq!(e.class(), ErrorClass::Config, "{input}");
            assert!(!e.to_string().contains("pw-secret"), "{e}");
        }
    }

    #[test]
    fn https_needs_a_usable_ca() {
        let e = MaasClient::new(ClientConfig::new("https://maas.example/MAAS", key())).expect_err("no CA");
        assert_eq!(e.class(), ErrorClass::Config);
        let mut c = ClientConfig::new("https://maas.example/MAAS", key());
        c.ca_pem = Some(b"not pem".to_vec());
        assert_eq!(MaasClient::new(c).expect_err("bad CA").class(), ErrorClass::Config);
    }

    #[test]
    fn client_debug_hides_the_secret() {
        let k: ApiKey = "CK:TK:very-secret-ts".parse().expect("key");
        let c = MaasClient::new(ClientConfig::new("http://127.0.0.1:5240/MAAS", k)).expect("client");
        let shown = format!("{c:?}");
        assert!(!shown.contains("very-secret-ts"), "{shown}");
        assert_eq!(c.base_url(), "http://127.0.0.1:5240/MAAS");
    }

    #[test]
    fn segments_cannot_add_path_parts() {
        assert_eq!(seg("abc123"), "abc123");
        assert_eq!(seg("../x?y#z"), "..%2Fx%3Fy%23z");
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let t = Duration::from_secs(30);
        assert_eq!(backoff(1, None, t), Duration::from_millis(200));
        assert_eq!(backoff(2, None, t), Duration::from_millis(400));
        assert_eq!(backoff(40, None, t), MAX_BACKOFF);
        assert_eq!(backoff(1, Some(Duration::from_secs(10)), t), Duration::from_secs(10));
        assert_eq!(backoff(1, Some(Duration::from_secs(10)), Duration::from_secs(2)), Duration::from_secs(2));
    }

    #[test]
    fn request_lines_show_path_and_op_only() {
        let mut q = Params::new();
        q.text("hostname", "gpu-01");
        let c = Call::get("/machines/".to_owned()).op("power_parameters").query(q);
        assert_eq!(c.line().to_string(), "GET /api/2.0/machines/?op=power_parameters");
    }
}
