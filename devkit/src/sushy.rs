//! Starting OpenStack's `sushy-emulator --fake` (PyPI `sushy-tools`; the README's test command
//! installs it) for tests: a real third-party Redfish service with fake systems, HTTP Basic
//! authentication from a bcrypt htpasswd file (made with the emulator's own Python, which has
//! `bcrypt`), optionally HTTPS (the emulator speaks TLS 1.2 only), each run on its own port
//! and state directory — the emulator keeps power states in SQLite under it, and a stored
//! system ignores its configured state, so a shared directory would leak state between runs.
//! Readiness is the port accepting connections, bounded; dropping the handle kills and reaps
//! the process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{DevkitError, io_at};

/// The account every emulator started here has.
pub const SUSHY_USER: &str = "drover";
/// Its password.
pub const SUSHY_PASSWORD: &str = "bmc-pa55-w0rd";

/// How long the emulator may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One fake system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SushySystem {
    /// Its UUID (the `/redfish/v1/Systems/{uuid}` id).
    pub uuid: String,
    /// Its name.
    pub name: String,
    /// `On` or `Off` at first start.
    pub power_state: String,
}

/// How to run the emulator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SushyOptions {
    /// Its systems.
    pub systems: Vec<SushySystem>,
    /// Serve HTTPS with this certificate and key (PEM paths).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// More configuration lines (Python), e.g. `SUSHY_EMULATOR_DISABLE_POWER_OFF = True`.
    pub extra: String,
}

/// A running emulator.
pub struct Sushy {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Sushy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sushy-emulator` on `PATH` (the virtualenv's `bin/` in CI).
pub fn sushy_binary() -> Result<PathBuf, DevkitError> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("sushy-emulator")).find(|c| c.is_file())).ok_or_else(
        || DevkitError::MissingBinary { path: PathBuf::from("sushy-emulator (install sushy-tools: the README's test command does)") },
    )
}

fn bcrypt_line(python: &Path) -> Result<String, DevkitError> {
    let out = Command::new(python)
        .args(["-c", &format!("import bcrypt; print(bcrypt.hashpw(b'{SUSHY_PASSWORD}', bcrypt.gensalt()).decode())")])
        .output()
        .map_err(io_at(python))?;
    if !out.status.success() {
        return Err(DevkitError::Process { what: "bcrypt".into(), message: String::from_utf8_lossy(&out.stderr).into_owned() });
    }
    Ok(format!("{SUSHY_USER}:{}\n", String::from_utf8_lossy(&out.stdout).trim()))
}

impl Sushy {
    /// Starts the emulator and waits until it listens.
    pub fn start(options: &SushyOptions) -> Result<Sushy, DevkitError> {
        let bin = sushy_binary()?;
        let dir = tempfile::tempdir().map_err(io_at(std::env::temp_dir()))?;
        let python = bin.parent().map(|d| d.join("python3")).filter(|p| p.is_file()).unwrap_or_else(|| PathBuf::from("python3"));
        let htpasswd = dir.path().join("htpasswd");
        std::fs::write(&htpasswd, bcrypt_line(&python)?).map_err(io_at(&htpasswd))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(io_at("127.0.0.1:0"))?.port();
        let systems: Vec<String> = options
            .systems
            .iter()
            .map(|s| format!("{{'uuid': {:?}, 'name': {:?}, 'power_state': {:?}, 'nics': []}}", s.uuid, s.name, s.power_state))
            .collect();
        let conf = format!(
            "SUSHY_EMULATOR_STATE_DIR = {:?}\nSUSHY_EMULATOR_AUTH_FILE = {:?}\nSUSHY_EMULATOR_FAKE_SYSTEMS = [{}]\n{}\n",
            dir.path().join("state").display().to_string(),
            htpasswd.display().to_string(),
            systems.join(", "),
            options.extra
        );
        let conf_path = dir.path().join("conf.py");
        std::fs::write(&conf_path, conf).map_err(io_at(&conf_path))?;
        let mut cmd = Command::new(&bin);
        cmd.args(["--fake", "-i", "127.0.0.1", "-p", &port.to_string(), "--config"]).arg(&conf_path);
        if let Some((cert, key)) = &options.tls {
            cmd.arg("--ssl-certificate").arg(cert).arg("--ssl-key").arg(key);
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(io_at(&bin))?;
        let scheme = if options.tls.is_some() { "https" } else { "http" };
        let mut sushy = Sushy { child, url: format!("{scheme}://127.0.0.1:{port}"), _dir: dir };
        let deadline = Instant::now() + START_TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = sushy.child.try_wait() {
                return Err(DevkitError::Process { what: "sushy-emulator".into(), message: format!("exited at start: {status}") });
            }
            if Instant::now() >= deadline {
                return Err(DevkitError::Timeout { what: "sushy-emulator to listen".into(), secs: START_TIMEOUT.as_secs() });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(sushy)
    }

    /// `http(s)://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// A certificate for a loopback test service: self-signed, **not** a CA (rustls refuses a
/// `CA:TRUE` certificate used as an end entity, which is what `openssl req -x509` makes), with
/// `127.0.0.1` and `localhost` as names. Writes `cert.pem` and `key.pem` under `dir` and
/// returns their paths and the certificate's PEM (what a client trusts).
pub fn loopback_certificate(dir: &Path) -> Result<(PathBuf, PathBuf, String), DevkitError> {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .map_err(|e| DevkitError::Process { what: "certificate".into(), message: e.to_string() })?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let pem = certified.cert.pem();
    std::fs::write(&cert, &pem).map_err(io_at(&cert))?;
    std::fs::write(&key, certified.key_pair.serialize_pem()).map_err(io_at(&key))?;
    Ok((cert, key, pem))
}
