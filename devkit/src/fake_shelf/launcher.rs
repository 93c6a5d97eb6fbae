//! Starting the `fake-shelf` binary from tests and `drover dev`: [`FakeShelfOptions`] names
//! the binary, the certificate and key, the account, the outlets, the delay, the update time
//! and the optional systems;
//! [`FakeShelf::start`] spawns it on a free loopback port and waits (bounded) for its
//! `listening on …` line; [`FakeShelf::control`] calls the `/_fake/` API. The fake's only
//! port is HTTPS, so control calls go over a minimal blocking HTTP/1.1 client on rustls that
//! trusts exactly the certificate(s) in the fake's `cert_pem` (a pin on the DER, so a
//! self-signed leaf and a CA-issued one work alike). Dropping the handle kills and reaps the
//! process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use serde_json::Value;

use super::{DEFAULT_DELAY_MS, DEFAULT_OUTLETS, DEFAULT_UPDATE_MS};
use crate::DevkitError;

/// The account the launcher gives the fake unless told otherwise.
pub const DEFAULT_USER: &str = "drover";
/// Its password.
pub const DEFAULT_PASSWORD: &str = "fake-shelf-pa55";

/// How long the fake may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one control call may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(20);

/// How to run the fake.
#[derive(Clone, PartialEq, Eq)]
pub struct FakeShelfOptions {
    /// The `fake-shelf` binary.
    pub binary: PathBuf,
    /// The PEM certificate chain it serves (`--cert`); control calls trust exactly these.
    pub cert_pem: PathBuf,
    /// Its PEM private key (`--key`).
    pub key_pem: PathBuf,
    /// The account (`--user`).
    pub user: String,
    /// Its password (`--password`; not in `Debug`).
    pub password: String,
    /// The outlet ids (`--outlets`).
    pub outlets: Vec<String>,
    /// How long an outlet takes to change state (`--delay-ms`).
    pub delay_ms: u64,
    /// How long a firmware update takes (`--update-ms`).
    pub update_ms: u64,
    /// The outlets start off (`--off`).
    pub start_off: bool,
    /// The shelf's `Name` (`--name`).
    pub name: Option<String>,
    /// The shelf's `SerialNumber` (`--serial`).
    pub serial: Option<String>,
    /// The `ComputerSystem` ids it also serves (`--systems`; empty: none, no `Systems`).
    pub systems: Vec<String>,
    /// The systems start off (`--systems-off`).
    pub systems_off: bool,
}

impl std::fmt::Debug for FakeShelfOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeShelfOptions")
            .field("binary", &self.binary)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &self.key_pem)
            .field("user", &self.user)
            .field("outlets", &self.outlets)
            .field("delay_ms", &self.delay_ms)
            .field("update_ms", &self.update_ms)
            .field("start_off", &self.start_off)
            .field("name", &self.name)
            .field("serial", &self.serial)
            .field("systems", &self.systems)
            .field("systems_off", &self.systems_off)
            .finish_non_exhaustive()
    }
}

impl FakeShelfOptions {
    /// The defaults with this certificate and key.
    pub fn new(cert_pem: impl Into<PathBuf>, key_pem: impl Into<PathBuf>) -> FakeShelfOptions {
        FakeShelfOptions { cert_pem: cert_pem.into(), key_pem: key_pem.into(), ..FakeShelfOptions::default() }
    }
}

impl Default for FakeShelfOptions {
    /// [`default_binary`], [`DEFAULT_USER`] and [`DEFAULT_PASSWORD`], outlets `A1,B1`,
    /// 1500 ms per outlet move, 1000 ms per update, outlets on, no systems; no certificate or
    /// key yet (set `cert_pem` and `key_pem`).
    fn default() -> FakeShelfOptions {
        FakeShelfOptions {
            binary: default_binary(),
            cert_pem: PathBuf::new(),
            key_pem: PathBuf::new(),
            user: DEFAULT_USER.to_owned(),
            password: DEFAULT_PASSWORD.to_owned(),
            outlets: DEFAULT_OUTLETS.iter().map(|s| (*s).to_owned()).collect(),
            delay_ms: DEFAULT_DELAY_MS,
            update_ms: DEFAULT_UPDATE_MS,
            start_off: false,
            name: None,
            serial: None,
            systems: Vec::new(),
            systems_off: false,
        }
    }
}

/// `fake-shelf` next to the current executable, or in its parent when the executable lives
/// in cargo's `deps/` (a test binary) — where `cargo build`/`cargo test --workspace` put it.
pub fn default_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let parent = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let dir =
        if parent.file_name().is_some_and(|n| n == "deps") { parent.parent().map(Path::to_path_buf).unwrap_or_default() } else { parent };
    dir.join("fake-shelf")
}

fn process_error(message: impl Into<String>) -> DevkitError {
    DevkitError::Process { what: "fake-shelf".into(), message: message.into() }
}

/// A running fake power shelf, killed when dropped.
#[derive(Debug)]
pub struct FakeShelf {
    child: Child,
    url: String,
    authority: String,
    tls: Arc<ClientConfig>,
}

impl FakeShelf {
    /// Spawns the fake on `127.0.0.1:0` and waits for it to listen.
    pub fn start(options: &FakeShelfOptions) -> Result<FakeShelf, DevkitError> {
        if !options.binary.is_file() {
            return Err(DevkitError::MissingBinary { path: options.binary.clone() });
        }
        let tls = Arc::new(pinned_client(&options.cert_pem)?);
        let mut cmd = Command::new(&options.binary);
        cmd.args(["--listen", "127.0.0.1:0"]).arg("--cert").arg(&options.cert_pem).arg("--key").arg(&options.key_pem);
        cmd.args(["--user", &options.user, "--password", &options.password]);
        cmd.args(["--outlets", &options.outlets.join(","), "--delay-ms", &options.delay_ms.to_string()]);
        cmd.args(["--update-ms", &options.update_ms.to_string()]);
        if options.start_off {
            cmd.arg("--off");
        }
        if let Some(name) = &options.name {
            cmd.args(["--name", name]);
        }
        if let Some(serial) = &options.serial {
            cmd.args(["--serial", serial]);
        }
        if !options.systems.is_empty() {
            cmd.args(["--systems", &options.systems.join(",")]);
        }
        if options.systems_off {
            cmd.arg("--systems-off");
        }
        let (child, url) = crate::listening::spawn_listening(&mut cmd, "fake-shelf", "listening on ", START_TIMEOUT)?;
        let Some(authority) = url.strip_prefix("https://").map(str::to_owned) else {
            return Err(crate::listening::kill_with(child, "fake-shelf", format!("not an https URL: {url}")));
        };
        Ok(FakeShelf { child, url, authority, tls })
    }

    /// `https://127.0.0.1:PORT` (the service root is `/redfish/v1/` below it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Calls the control API (`path` relative to `/_fake/`, e.g. `stuck` or `state`; a
    /// leading `/_fake/` is accepted too) and answers its JSON; a non-2xx answer is an error.
    pub fn control(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, DevkitError> {
        let rest = path.trim_start_matches('/');
        let target = format!("/_fake/{}", rest.strip_prefix("_fake/").unwrap_or(rest));
        let payload = body.map(Value::to_string).unwrap_or_default();
        let (status, bytes) = https_call(&self.tls, &self.authority, method, &target, &payload)
            .map_err(|e| process_error(format!("{method} {target}: {e}")))?;
        if !(200..300).contains(&status) {
            return Err(process_error(format!("{method} {target}: {status} {}", String::from_utf8_lossy(&bytes))));
        }
        serde_json::from_slice(&bytes).map_err(|e| process_error(format!("{method} {target}: bad JSON: {e}")))
    }
}

impl Drop for FakeShelf {
    fn drop(&mut self) {
        // It has no children and no state worth a graceful stop.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Accepts a server certificate only if it is byte-for-byte one of `pinned`; handshake
/// signatures are still checked with the provider's algorithms.
#[derive(Debug)]
struct Pinned {
    pinned: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.pinned.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A client configuration that trusts exactly the certificates in `cert_pem`.
fn pinned_client(cert_pem: &Path) -> Result<ClientConfig, DevkitError> {
    let bytes = std::fs::read(cert_pem).map_err(crate::io_at(cert_pem))?;
    let pinned: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| process_error(format!("{}: not a PEM certificate: {e}", cert_pem.display())))?;
    if pinned.is_empty() {
        return Err(process_error(format!("{}: no certificate", cert_pem.display())));
    }
    let provider: CryptoProvider = rustls::crypto::ring::default_provider();
    let algorithms = provider.signature_verification_algorithms;
    let config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| process_error(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { pinned, algorithms }))
        .with_no_client_auth();
    Ok(config)
}

/// One HTTP/1.1 request over TLS with `Connection: close`; answers the status and the body.
fn https_call(tls: &Arc<ClientConfig>, authority: &str, method: &str, target: &str, body: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    let name = ServerName::try_from(host.to_owned()).map_err(|e| bad(format!("server name {host}: {e}")))?;
    let conn = rustls::ClientConnection::new(Arc::clone(tls), name).map_err(|e| bad(e.to_string()))?;
    let tcp = TcpStream::connect(authority)?;
    tcp.set_read_timeout(Some(CONTROL_TIMEOUT))?;
    tcp.set_write_timeout(Some(CONTROL_TIMEOUT))?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => {}
        // A peer that closes without close_notify: the answer is complete if its length says so.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| bad("no end of headers".into()))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad("no status".into()))?;
    let mut payload = raw[split + 4..].to_vec();
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok()).flatten()
    });
    if let Some(length) = length {
        if payload.len() < length {
            return Err(bad(format!("body cut short: {} of {length} bytes", payload.len())));
        }
        payload.truncate(length);
    }
    Ok((status, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_redaction_and_a_missing_binary() {
        let o = FakeShelfOptions::new("/c.pem", "/k.pem");
        assert_eq!(o.binary.file_name().unwrap(), "fake-shelf");
        assert_eq!(o.outlets, vec!["A1", "B1"]);
        assert_eq!(o.delay_ms, 1500);
        assert_eq!(o.update_ms, 1000);
        assert!(o.systems.is_empty() && !o.systems_off);
        assert!(!format!("{o:?}").contains(DEFAULT_PASSWORD));
        assert!(matches!(
            FakeShelf::start(&FakeShelfOptions { binary: "/nonexistent/fake-shelf".into(), ..o.clone() }),
            Err(DevkitError::MissingBinary { .. })
        ));
    }

    #[test]
    fn the_pinned_client_needs_a_pem_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        assert!(pinned_client(&empty).is_err());
        assert!(matches!(pinned_client(&dir.path().join("missing.pem")), Err(DevkitError::Io { .. })));
    }
}
