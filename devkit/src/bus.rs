//! A private system bus for one sandboxed agent: a real `dbus-daemon` listening on a socket
//! inside the sandbox, with `fake-systemd` owning `org.freedesktop.systemd1` on it, so the
//! agent's transient switch units, failed-unit listings, timer restarts and its own
//! uninstall go through real D-Bus calls without touching the machine's systemd.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{DevkitError, io_at, write_file};

/// Where Debian installs `dbus-daemon`.
pub const DBUS_DAEMON: &str = "/usr/bin/dbus-daemon";

/// How long either process may take to say it is ready.
const READY_SECS: u64 = 20;

/// The bus and its systemd stand-in, both stopped when dropped.
pub struct PrivateBus {
    address: String,
    socket: PathBuf,
    daemon: Child,
    fake: Child,
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        // fake-systemd first: it stops its units' processes on SIGTERM.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.fake.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let _ = self.fake.wait();
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn lines_of(from: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(lines: &mpsc::Receiver<String>, what: &str, want: impl Fn(&str) -> bool) -> Result<String, DevkitError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(READY_SECS);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if want(&line) => return Ok(line),
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(DevkitError::Timeout { what: what.to_owned(), secs: READY_SECS }),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(DevkitError::Process { what: what.to_owned(), message: "exited before it was ready".to_owned() });
            }
        }
    }
}

impl PrivateBus {
    /// Starts the bus with its socket and configuration in `dir` and `fake_systemd` on it;
    /// returns once fake-systemd serves.
    pub fn start(dir: &Path, fake_systemd: &Path) -> Result<PrivateBus, DevkitError> {
        PrivateBus::start_with(dir, fake_systemd, &[])
    }

    /// Like [`PrivateBus::start`], fake-systemd also given units with unit files, each
    /// `NAME;TYPE;STATE[;SCRIPT]` (its `--unit`).
    pub fn start_with(dir: &Path, fake_systemd: &Path, units: &[String]) -> Result<PrivateBus, DevkitError> {
        if !Path::new(DBUS_DAEMON).is_file() {
            return Err(DevkitError::MissingBinary { path: DBUS_DAEMON.into() });
        }
        let socket = dir.join("bus.sock");
        let config = dir.join("bus.conf");
        // Only this sandbox's agent and fake-systemd connect: the socket lives in its root. A
        // session-type bus: the system type's default policy drops replies to unprivileged peers.
        write_file(
            &config,
            &format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\" \
                 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
                 <busconfig><type>session</type><listen>unix:path={}</listen>\
                 <policy context=\"default\"><allow send_destination=\"*\"/><allow receive_sender=\"*\"/><allow own=\"*\"/></policy></busconfig>\n",
                socket.display()
            ),
            0o644,
        )?;
        let mut daemon = Command::new(DBUS_DAEMON)
            .arg("--config-file")
            .arg(&config)
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io_at(DBUS_DAEMON))?;
        let daemon_out =
            lines_of(daemon.stdout.take().ok_or_else(|| DevkitError::Process { what: "dbus-daemon".into(), message: "no stdout".into() })?);
        let address = match wait_for_line(&daemon_out, "dbus-daemon's address", |l| l.starts_with("unix:")) {
            Ok(a) => a.trim().to_owned(),
            Err(e) => {
                let _ = daemon.kill();
                let _ = daemon.wait();
                return Err(e);
            }
        };
        let mut fake = match Command::new(fake_systemd)
            .args(["--address", &address])
            .args(units.iter().flat_map(|u| ["--unit", u.as_str()]))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(f) => f,
            Err(e) => {
                let _ = daemon.kill();
                let _ = daemon.wait();
                return Err(DevkitError::Io { path: fake_systemd.to_path_buf(), source: e });
            }
        };
        let fake_out = fake.stdout.take();
        // From here on the bus owns both children: an early return stops them.
        let bus = PrivateBus { address, socket, daemon, fake };
        let fake_out = lines_of(fake_out.ok_or_else(|| DevkitError::Process { what: "fake-systemd".into(), message: "no stdout".into() })?);
        wait_for_line(&fake_out, "fake-systemd's `ready`", |l| l == "ready")?;
        Ok(bus)
    }

    /// The bus address, for the agent's `systemd_bus`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The socket file.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}
