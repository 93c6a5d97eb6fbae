//! Starting the `fake-maas` binary from tests and `drover dev`: [`FakeMaasOptions`] names
//! the binary, the API key and the delays, [`FakeMaas::start`] spawns it on a free
//! loopback port and waits (bounded) for its `listening …` line, and [`FakeMaas::control`]
//! calls the `/_fake/` API over a minimal blocking HTTP/1.1 client, so the library needs no
//! HTTP client crate. Dropping the handle stops the process (SIGTERM, so it can stop the
//! agents of machines it booted; SIGKILL if it has not exited within a few seconds) and
//! reaps it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::Value;

use super::boot::BootOptions;
use crate::DevkitError;

/// The API key the launcher gives the fake unless told otherwise (`consumer:token:secret`).
pub const DEFAULT_API_KEY: &str = "drover:fake-token:fake-secret";

/// How long the fake may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one control call may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the fake may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How to run the fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeMaasOptions {
    /// The `fake-maas` binary.
    pub bin: PathBuf,
    /// The one API key it accepts (`consumer:token:secret`).
    pub api_key: String,
    /// Seconds Commissioning lasts; 0 = until `/_fake/advance`.
    pub commission_secs: u64,
    /// Seconds Deploying lasts; 0 = until `/_fake/advance`.
    pub deploy_secs: u64,
    /// Seconds Releasing lasts; 0 = until `/_fake/advance` (or the power goes off).
    pub release_secs: u64,
    /// Seconds Disk erasing lasts; 0 = until `/_fake/advance`.
    pub erase_secs: u64,
    /// Where to persist its state (`--state`).
    pub state_file: Option<PathBuf>,
    /// Boot deployed machines' user data (`--boot-dir`, `--agent-extra-config`).
    pub boot: Option<BootOptions>,
}

impl Default for FakeMaasOptions {
    fn default() -> FakeMaasOptions {
        FakeMaasOptions {
            bin: default_binary(),
            api_key: DEFAULT_API_KEY.to_owned(),
            commission_secs: 0,
            deploy_secs: 0,
            release_secs: 0,
            erase_secs: 0,
            state_file: None,
            boot: None,
        }
    }
}

/// `fake-maas` next to the current executable, or in its parent when the executable lives
/// in cargo's `deps/` (a test binary).
pub fn default_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let parent = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let dir =
        if parent.file_name().is_some_and(|n| n == "deps") { parent.parent().map(Path::to_path_buf).unwrap_or_default() } else { parent };
    dir.join("fake-maas")
}

/// A running fake MAAS, killed when dropped.
#[derive(Debug)]
pub struct FakeMaas {
    child: Child,
    url: String,
    authority: String,
    api_key: String,
}

fn process_error(message: impl Into<String>) -> DevkitError {
    DevkitError::Process { what: "fake-maas".into(), message: message.into() }
}

impl FakeMaas {
    /// Spawns the fake on `127.0.0.1:0` and waits for it to listen.
    pub fn start(options: &FakeMaasOptions) -> Result<FakeMaas, DevkitError> {
        if !options.bin.is_file() {
            return Err(DevkitError::MissingBinary { path: options.bin.clone() });
        }
        let mut cmd = Command::new(&options.bin);
        cmd.args(["--listen", "127.0.0.1:0", "--api-key", &options.api_key]);
        for (flag, secs) in [
            ("--commission-secs", options.commission_secs),
            ("--deploy-secs", options.deploy_secs),
            ("--release-secs", options.release_secs),
            ("--erase-secs", options.erase_secs),
        ] {
            cmd.args([flag, &secs.to_string()]);
        }
        if let Some(state) = &options.state_file {
            cmd.arg("--state").arg(state);
        }
        if let Some(boot) = &options.boot {
            cmd.arg("--boot-dir").arg(&boot.dir);
            if let Some(extra) = &boot.agent_extra_config {
                cmd.arg("--agent-extra-config").arg(extra);
            }
        }
        let (child, url) = crate::listening::spawn_listening(&mut cmd, "fake-maas", "listening ", START_TIMEOUT)?;
        let authority = url.trim_start_matches("http://").split('/').next().unwrap_or_default().to_owned();
        Ok(FakeMaas { child, url, authority, api_key: options.api_key.clone() })
    }

    /// `http://127.0.0.1:PORT/MAAS`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The API key it accepts.
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// Calls the control API (`path` relative to `/_fake/`, e.g. `machines` or
    /// `machines/abc123/fail`) and answers its JSON; a non-2xx answer is an error.
    pub fn control(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, DevkitError> {
        self.controller().control(method, path, body)
    }

    /// A handle on the control API that another thread may own (the fake stays this value's).
    pub fn controller(&self) -> Controller {
        Controller { authority: self.authority.clone() }
    }

    /// Calls the control API and answers the status and raw body (e.g. for `user_data`).
    pub fn control_raw(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Vec<u8>), DevkitError> {
        self.controller().control_raw(method, path, body)
    }
}

/// The control API of a running fake, detached from its process handle.
#[derive(Debug, Clone)]
pub struct Controller {
    authority: String,
}

impl Controller {
    /// Like [`FakeMaas::control`]: the status must be 2xx; the answer is parsed as JSON.
    pub fn control(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, DevkitError> {
        let (status, bytes) = self.control_raw(method, path, body)?;
        let target = format!("/_fake/{}", path.trim_start_matches('/'));
        if !(200..300).contains(&status) {
            return Err(process_error(format!("{method} {target}: {status} {}", String::from_utf8_lossy(&bytes))));
        }
        serde_json::from_slice(&bytes).map_err(|e| process_error(format!("{method} {target}: bad JSON: {e}")))
    }

    /// Calls the control API and answers the status and raw body.
    pub fn control_raw(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Vec<u8>), DevkitError> {
        let payload = body.map(Value::to_string).unwrap_or_default();
        let target = format!("/_fake/{}", path.trim_start_matches('/'));
        http_call(&self.authority, method, &target, &payload).map_err(|e| process_error(format!("{method} {target}: {e}")))
    }
}

impl Drop for FakeMaas {
    fn drop(&mut self) {
        // SIGTERM first: the fake then kills the bootstraps and agents it started.
        let pid = i32::try_from(self.child.id()).map(nix::unistd::Pid::from_raw);
        if let Ok(pid) = pid {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = std::time::Instant::now() + STOP_TIMEOUT;
            while std::time::Instant::now() < deadline {
                if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request with `Connection: close`; answers the status and the body.
fn http_call(authority: &str, method: &str, target: &str, body: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(authority)?;
    stream.set_read_timeout(Some(CONTROL_TIMEOUT))?;
    stream.set_write_timeout(Some(CONTROL_TIMEOUT))?;
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad("no status"))?;
    let mut body = raw[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok((status, body))
}

/// Decodes a chunked body.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&data[..eol]).ok()?.split(';').next()?.trim(), 16).ok()?;
        data = &data[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_chunks() {
        let o = FakeMaasOptions::default();
        assert_eq!(o.bin.file_name().unwrap(), "fake-maas");
        assert_eq!(o.api_key.split(':').count(), 3);
        assert_eq!(dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(), b"abcde");
        assert!(matches!(
            FakeMaas::start(&FakeMaasOptions { bin: "/nonexistent/fake-maas".into(), ..o }),
            Err(DevkitError::MissingBinary { .. })
        ));
    }
}
