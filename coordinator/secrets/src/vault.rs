//! The Vault backend: HashiCorp Vault or OpenBao, KV version 2, over HTTPS.
//!
//! - read: `GET {addr}/v1/{mount}/data/{prefix}/{path}` → `data.data` (404: no secret);
//! - write: `POST` to the same URL with `{"data": {...}}` (a new version);
//! - delete: `DELETE {addr}/v1/{mount}/metadata/{prefix}/{path}` (every version and the
//!   metadata; an absent path is fine).
//!
//! Authentication is a token file, read at every call so a token renewed on disk (by Vault
//! Agent, by an operator) is used at once, or AppRole: the role and secret id files are read at
//! each login, the client token is kept only until half its TTL and dropped on a 403 (one fresh
//! login and one retry). No secret value is cached. Every call has a connect and a total
//! timeout. Errors carry the address, the operation, the path and a status code — never the
//! token, a value, or a response body (Vault's error text can echo request data).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::HeaderValue;
use reqwest::{Method, StatusCode};

use super::{SecretError, SecretFuture, SecretPath, SecretStore, SecretValue, check_path};
use crate::config::VaultConfig;

/// The largest response body read, in bytes.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The largest credential file read, in bytes.
const MAX_CREDENTIAL_BYTES: u64 = 64 * 1024;
/// The longest an AppRole client token is kept, whatever its TTL.
const MAX_TOKEN_KEEP: Duration = Duration::from_secs(3600);

/// A Vault token: never printed.
#[derive(Clone)]
struct Token(HeaderValue);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// How the store authenticates.
#[derive(Debug)]
enum Auth {
    /// A token file, read at every call.
    TokenFile(PathBuf),
    /// AppRole: role and secret id files, read at each login.
    AppRole { role_id_file: PathBuf, secret_id_file: PathBuf, cached: Mutex<Option<(Token, Instant)>> },
}

/// Secrets in a Vault (or OpenBao) KV v2 mount.
pub struct VaultSecretStore {
    addr: String,
    mount: String,
    prefix: String,
    auth: Auth,
    client: reqwest::Client,
}

impl std::fmt::Debug for VaultSecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            Auth::TokenFile(file) => format!("token file {}", file.display()),
            Auth::AppRole { role_id_file, .. } => format!("AppRole ({})", role_id_file.display()),
        };
        f.debug_struct("VaultSecretStore")
            .field("addr", &self.addr)
            .field("mount", &self.mount)
            .field("prefix", &self.prefix)
            .field("auth", &auth)
            .finish()
    }
}

/// Checks `[secrets.vault]`; `Err` is the dotted key and what is wrong with it. Used by
/// `Config::parse` and by [`VaultSecretStore::new`].
pub fn validate(c: &VaultConfig) -> Result<(), (&'static str, String)> {
    let url = reqwest::Url::parse(&c.addr).map_err(|e| ("secrets.vault.addr", format!("{:?} is not a URL: {e}", c.addr)))?;
    match url.scheme() {
        "https" => {}
        "http" if c.allow_insecure_http => {}
        "http" => {
            return Err((
                "secrets.vault.addr",
                format!(
                    "{:?} is plain http:// — the token and the secrets would cross the network unencrypted; use https:// \
                     (or set secrets.vault.allow_insecure_http = true for a test server)",
                    c.addr
                ),
            ));
        }
        _ => return Err(("secrets.vault.addr", format!("{:?} must be an https:// URL", c.addr))),
    }
    if url.host_str().is_none_or(str::is_empty)
        || !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
        || url.path() != "/"
    {
        return Err(("secrets.vault.addr", format!("{:?} must be SCHEME://HOST[:PORT] with no user, path, query or fragment", c.addr)));
    }
    if check_path(&c.mount).is_err() || c.mount.contains('/') {
        return Err(("secrets.vault.mount", format!("{:?} must be one segment of A-Z a-z 0-9 . _ - (not starting with .)", c.mount)));
    }
    if !c.prefix.is_empty()
        && let Err(reason) = check_path(&c.prefix)
    {
        return Err(("secrets.vault.prefix", format!("{:?} {reason}", c.prefix)));
    }
    match (&c.token_file, &c.approle_role_id_file, &c.approle_secret_id_file) {
        (Some(_), None, None) | (None, Some(_), Some(_)) => {}
        (Some(_), _, _) => {
            return Err(("secrets.vault.token_file", "set either token_file or the AppRole pair, not both".to_owned()));
        }
        (None, Some(_), None) => {
            return Err(("secrets.vault.approle_secret_id_file", "required with approle_role_id_file".to_owned()));
        }
        (None, None, Some(_)) => {
            return Err(("secrets.vault.approle_role_id_file", "required with approle_secret_id_file".to_owned()));
        }
        (None, None, None) => {
            return Err((
                "secrets.vault.token_file",
                "Vault needs credentials: set token_file, or approle_role_id_file and approle_secret_id_file".to_owned(),
            ));
        }
    }
    if url.scheme() == "https" && c.ca_file.is_none() {
        return Err((
            "secrets.vault.ca_file",
            "required with an https:// addr: the CA (PEM) the Vault server's certificate chains to".to_owned(),
        ));
    }
    if !(1..=300).contains(&c.timeout_secs) {
        return Err(("secrets.vault.timeout_secs", "must be between 1 and 300 seconds".to_owned()));
    }
    if !(1..=300).contains(&c.connect_timeout_secs) {
        return Err(("secrets.vault.connect_timeout_secs", "must be between 1 and 300 seconds".to_owned()));
    }
    Ok(())
}

impl VaultSecretStore {
    /// Checks the configuration ([`validate`]), loads the CA and builds the HTTP client. Reads
    /// no credential yet.
    pub fn new(c: &VaultConfig) -> Result<VaultSecretStore, SecretError> {
        validate(c).map_err(|(key, message)| SecretError::Config { key, message })?;
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = &c.ca_file {
            let config_error = |message: String| SecretError::Config { key: "secrets.vault.ca_file", message };
            for cert in drover_client::load_ca(ca).map_err(|e| config_error(e.to_string()))? {
                roots.add(cert).map_err(|e| config_error(format!("{}: unusable certificate: {e}", ca.display())))?;
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| SecretError::Config { key: "secrets.vault", message: format!("TLS setup: {e}") })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .https_only(!c.allow_insecure_http)
            .connect_timeout(Duration::from_secs(c.connect_timeout_secs))
            .timeout(Duration::from_secs(c.timeout_secs))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(|e| SecretError::Config { key: "secrets.vault", message: format!("HTTP client setup: {e}") })?;
        let auth = match (&c.token_file, &c.approle_role_id_file, &c.approle_secret_id_file) {
            (Some(file), _, _) => Auth::TokenFile(file.clone()),
            (None, Some(role), Some(secret)) => {
                Auth::AppRole { role_id_file: role.clone(), secret_id_file: secret.clone(), cached: Mutex::new(None) }
            }
            _ => unreachable!("validate requires credentials"),
        };
        let addr = reqwest::Url::parse(&c.addr).map(|u| u.as_str().trim_end_matches('/').to_owned()).unwrap_or_default();
        Ok(VaultSecretStore { addr, mount: c.mount.clone(), prefix: c.prefix.clone(), auth, client })
    }

    /// The server's address, as used in URLs and errors.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn url(&self, kind: &str, path: &SecretPath) -> String {
        if self.prefix.is_empty() {
            format!("{}/v1/{}/{kind}/{path}", self.addr, self.mount)
        } else {
            format!("{}/v1/{}/{kind}/{}/{path}", self.addr, self.mount, self.prefix)
        }
    }

    /// The token to use: the token file's current content, or the cached AppRole token
    /// (logging in when there is none, it is past half its TTL, or `fresh`).
    async fn token(&self, fresh: bool) -> Result<Token, SecretError> {
        match &self.auth {
            Auth::TokenFile(file) => read_credential(file, "token"),
            Auth::AppRole { role_id_file, secret_id_file, cached } => {
                if !fresh
                    && let Some((token, until)) = cached.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
                    && Instant::now() < *until
                {
                    return Ok(token.clone());
                }
                let (token, keep) = self.login(role_id_file, secret_id_file).await?;
                *cached.lock().unwrap_or_else(|p| p.into_inner()) = Some((token.clone(), Instant::now() + keep));
                Ok(token)
            }
        }
    }

    /// `POST /v1/auth/approle/login`: the client token and how long to keep it.
    async fn login(&self, role_id_file: &Path, secret_id_file: &Path) -> Result<(Token, Duration), SecretError> {
        let role_id = read_credential(role_id_file, "AppRole role_id")?;
        let secret_id = read_credential(secret_id_file, "AppRole secret_id")?;
        let as_str = |t: &Token| t.0.to_str().unwrap_or_default().to_owned();
        let body = serde_json::json!({ "role_id": as_str(&role_id), "secret_id": as_str(&secret_id) });
        let url = format!("{}/v1/auth/approle/login", self.addr);
        let request = self.client.post(url).json(&body);
        let (status, bytes) = self.send("login", None, request).await?;
        match status.as_u16() {
            200 => {}
            400 | 401 | 403 => {
                return Err(SecretError::Denied { addr: self.addr.clone(), op: "login", path: None, status: status.as_u16() });
            }
            _ => return Err(self.status_error("login", None, status)),
        }
        let protocol =
            |message: &str| SecretError::Protocol { addr: self.addr.clone(), op: "login", path: None, message: message.to_owned() };
        let answer: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| protocol(&super::redacted_json_error(e)))?;
        let auth = answer.get("auth").ok_or_else(|| protocol("no `auth` in the login answer"))?;
        let token = auth.get("client_token").and_then(|t| t.as_str()).ok_or_else(|| protocol("no `auth.client_token` string"))?;
        let mut header = HeaderValue::from_str(token).map_err(|_| protocol("`auth.client_token` is not a valid header value"))?;
        header.set_sensitive(true);
        let lease = auth.get("lease_duration").and_then(|d| d.as_u64()).unwrap_or(0);
        let keep = if lease == 0 { MAX_TOKEN_KEEP } else { Duration::from_secs(lease / 2).clamp(Duration::from_secs(1), MAX_TOKEN_KEEP) };
        Ok((Token(header), keep))
    }

    /// One authenticated call; with AppRole, a 403 drops the cached token, logs in again and
    /// retries once.
    async fn call(
        &self,
        op: &'static str,
        path: &SecretPath,
        method: Method,
        url: String,
        body: Option<&serde_json::Value>,
    ) -> Result<(StatusCode, Vec<u8>), SecretError> {
        let mut fresh = false;
        loop {
            let token = self.token(fresh).await?;
            let mut request = self.client.request(method.clone(), &url).header("X-Vault-Token", token.0);
            if let Some(body) = body {
                request = request.json(body);
            }
            let (status, bytes) = self.send(op, Some(path), request).await?;
            if status == StatusCode::FORBIDDEN && !fresh && matches!(self.auth, Auth::AppRole { .. }) {
                if let Auth::AppRole { cached, .. } = &self.auth {
                    *cached.lock().unwrap_or_else(|p| p.into_inner()) = None;
                }
                fresh = true;
                continue;
            }
            return Ok((status, bytes));
        }
    }

    /// Sends `request` and reads the body (bounded).
    async fn send(
        &self,
        op: &'static str,
        path: Option<&SecretPath>,
        request: reqwest::RequestBuilder,
    ) -> Result<(StatusCode, Vec<u8>), SecretError> {
        let mut response = request.send().await.map_err(|e| self.transport_error(op, path, e))?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport_error(op, path, e))? {
            if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(SecretError::Protocol {
                    addr: self.addr.clone(),
                    op,
                    path: path.cloned(),
                    message: format!("answer larger than {MAX_BODY_BYTES} bytes"),
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((status, bytes))
    }

    fn transport_error(&self, op: &'static str, path: Option<&SecretPath>, e: reqwest::Error) -> SecretError {
        let (addr, path) = (self.addr.clone(), path.cloned());
        if let Some(message) = tls_cause(&e) {
            return SecretError::Tls { addr, op, path, message };
        }
        let message = if e.is_timeout() {
            "timed out".to_owned()
        } else if e.is_connect() {
            "cannot connect".to_owned()
        } else {
            "request failed".to_owned()
        };
        SecretError::Unavailable { addr, op, path, message, source: Some(e.without_url()) }
    }

    /// The error for an unexpected status: 429 and 5xx are transient, 401/403 a refusal, the
    /// rest a protocol error. The body is not quoted.
    fn status_error(&self, op: &'static str, path: Option<&SecretPath>, status: StatusCode) -> SecretError {
        let (addr, path) = (self.addr.clone(), path.cloned());
        let code = status.as_u16();
        if code == 401 || code == 403 {
            SecretError::Denied { addr, op, path, status: code }
        } else if code == 429 || status.is_server_error() {
            SecretError::Unavailable { addr, op, path, message: format!("HTTP {status}"), source: None }
        } else {
            SecretError::Protocol { addr, op, path, message: format!("HTTP {status}") }
        }
    }

    async fn read_secret(&self, path: &SecretPath) -> Result<Option<SecretValue>, SecretError> {
        let (status, bytes) = self.call("read", path, Method::GET, self.url("data", path), None).await?;
        match status.as_u16() {
            200 => {}
            404 => return Ok(None),
            _ => return Err(self.status_error("read", Some(path), status)),
        }
        let protocol = |message: String| SecretError::Protocol { addr: self.addr.clone(), op: "read", path: Some(path.clone()), message };
        let mut answer: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| protocol(super::redacted_json_error(e)))?;
        let data = answer.get_mut("data").and_then(|d| d.get_mut("data")).map(serde_json::Value::take);
        match data {
            None => Err(protocol("no `data.data` in the answer".to_owned())),
            // A deleted (soft) version.
            Some(serde_json::Value::Null) => Ok(None),
            Some(value) => SecretValue::from_json_value(value).map(Some).map_err(|message| SecretError::Malformed {
                path: path.clone(),
                backend: "vault",
                message,
            }),
        }
    }

    async fn write_secret(&self, path: &SecretPath, value: &SecretValue) -> Result<(), SecretError> {
        value.check(path)?;
        let body = serde_json::json!({ "data": value.expose() });
        let (status, _) = self.call("write", path, Method::POST, self.url("data", path), Some(&body)).await?;
        match status.as_u16() {
            200 | 204 => Ok(()),
            _ => Err(self.status_error("write", Some(path), status)),
        }
    }

    async fn delete_secret(&self, path: &SecretPath) -> Result<(), SecretError> {
        let (status, _) = self.call("delete", path, Method::DELETE, self.url("metadata", path), None).await?;
        match status.as_u16() {
            200 | 204 | 404 => Ok(()),
            _ => Err(self.status_error("delete", Some(path), status)),
        }
    }
}

impl SecretStore for VaultSecretStore {
    fn read<'a>(&'a self, path: &'a SecretPath) -> SecretFuture<'a, Option<SecretValue>> {
        Box::pin(self.read_secret(path))
    }

    fn write<'a>(&'a self, path: &'a SecretPath, value: &'a SecretValue) -> SecretFuture<'a, ()> {
        Box::pin(self.write_secret(path, value))
    }

    fn delete<'a>(&'a self, path: &'a SecretPath) -> SecretFuture<'a, ()> {
        Box::pin(self.delete_secret(path))
    }

    fn backend(&self) -> &'static str {
        "vault"
    }
}

/// Reads a credential file (bounded), trimmed; it must be a non-empty single header value.
fn read_credential(file: &Path, what: &'static str) -> Result<Token, SecretError> {
    use std::io::Read;
    let refuse = |message: &str, source| SecretError::Credential { file: file.to_owned(), what, message: message.to_owned(), source };
    let mut text = String::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_CREDENTIAL_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| refuse("cannot read", Some(e)))?;
    if text.len() as u64 > MAX_CREDENTIAL_BYTES {
        return Err(refuse("is larger than 64 KiB", None));
    }
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(refuse("is empty", None));
    }
    let mut header = HeaderValue::from_str(trimmed).map_err(|_| refuse("holds characters not allowed in an HTTP header", None))?;
    header.set_sensitive(true);
    Ok(Token(header))
}

/// The TLS library's reason, when `e` comes from a failed handshake.
fn tls_cause(e: &reqwest::Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        // io::Error's `source` skips the error it wraps (often another io::Error): look inside.
        next = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)).or_else(|| err.source()),
            None => err.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> VaultConfig {
        VaultConfig {
            addr: "https://vault.example:8200".to_owned(),
            mount: "secret".to_owned(),
            prefix: "drover".to_owned(),
            ca_file: Some(PathBuf::from("ca.pem")),
            token_file: Some(PathBuf::from("token")),
            approle_role_id_file: None,
            approle_secret_id_file: None,
            timeout_secs: 10,
            connect_timeout_secs: 10,
            allow_insecure_http: false,
        }
    }

    #[test]
    fn validation_names_the_key() {
        validate(&config()).expect("valid");
        let key = |c: VaultConfig| validate(&c).expect_err("refused").0;
        assert_eq!(key(VaultConfig { addr: "http://vault:8200".into(), ..config() }), "secrets.vault.addr");
        validate(&VaultConfig { addr: "http://vault:8200".into(), allow_insecure_http: true, ..config() }).expect("allowed");
        assert_eq!(key(VaultConfig { addr: "https://vault:8200/x?y".into(), ..config() }), "secrets.vault.addr");
        assert_eq!(key(VaultConfig { addr: "ftp://vault".into(), ..config() }), "secrets.vault.addr");
        assert_eq!(key(VaultConfig { mount: "a/b".into(), ..config() }), "secrets.vault.mount");
        assert_eq!(key(VaultConfig { prefix: "../x".into(), ..config() }), "secrets.vault.prefix");
        validate(&VaultConfig { prefix: String::new(), ..config() }).expect("no prefix");
        assert_eq!(key(VaultConfig { token_file: None, ..config() }), "secrets.vault.token_file");
        assert_eq!(key(VaultConfig { approle_role_id_file: Some("r".into()), ..config() }), "secrets.vault.token_file");
        let approle = VaultConfig { token_file: None, approle_role_id_file: Some("r".into()), ..config() };
        assert_eq!(key(approle.clone()), "secrets.vault.approle_secret_id_file");
        validate(&VaultConfig { approle_secret_id_file: Some("s".into()), ..approle }).expect("AppRole");
        assert_eq!(key(VaultConfig { ca_file: None, ..config() }), "secrets.vault.ca_file");
        assert_eq!(key(VaultConfig { timeout_secs: 0, ..config() }), "secrets.vault.timeout_secs");
        assert_eq!(key(VaultConfig { connect_timeout_secs: 301, ..config() }), "secrets.vault.connect_timeout_secs");
    }

    #[test]
    fn urls_follow_kv_v2() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = VaultConfig { addr: "http://127.0.0.1:8200/".into(), allow_insecure_http: true, ca_file: None, ..config() };
        let store = VaultSecretStore::new(&c).expect("store");
        let p = SecretPath::new("maas-sites/s1/api-token").expect("valid");
        assert_eq!(store.url("data", &p), "http://127.0.0.1:8200/v1/secret/data/drover/maas-sites/s1/api-token");
        assert_eq!(store.url("metadata", &p), "http://127.0.0.1:8200/v1/secret/metadata/drover/maas-sites/s1/api-token");
        let bare = VaultSecretStore::new(&VaultConfig { prefix: String::new(), ..c }).expect("store");
        assert_eq!(bare.url("data", &p), "http://127.0.0.1:8200/v1/secret/data/maas-sites/s1/api-token");
        let token = dir.path().join("token");
        std::fs::write(&token, "  s.abcdef\n").expect("write");
        let t = read_credential(&token, "token").expect("token");
        assert_eq!(t.0.to_str().expect("ascii"), "s.abcdef");
        assert!(!format!("{t:?} {store:?}").contains("abcdef"));
        std::fs::write(&token, "\n").expect("write");
        assert!(read_credential(&token, "token").expect_err("empty").to_string().contains("is empty"));
    }
}
