//! A private D-Bus for tests: a `dbus-daemon` of its own (a session-type bus on a socket in a
//! temporary directory) with the `fake-systemd` test service (`src/bin/fake-systemd.rs`)
//! serving systemd's Manager API on it. The agent's [`DbusSystemd`] talks to it exactly as to
//! the system bus; the real `drover-agent` process does too, given the address as its
//! `systemd_bus`.
//!
//! Needs `/usr/bin/dbus-daemon` (CI installs it); [`TestBus::start`] fails loudly without it.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use drover_agent::systemd::dbus::{DESTINATION, DbusSystemd, MANAGER_INTERFACE, MANAGER_PATH, UNIT_INTERFACE};

use crate::workspace_binary;

/// The bus daemon.
pub const DBUS_DAEMON: &str = "/usr/bin/dbus-daemon";

/// The bound on the waits of the bus tests: for a child's line (the bus address, `ready`), a
/// unit to finish, a FIFO to be opened.
pub const WAIT: Duration = Duration::from_secs(20);

/// Lines of a child's stdout, read on a thread, so a test can wait for one with a bound.
pub fn lines_of(from: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (bounded by [`WAIT`]) for a line satisfying `want`, skipping the others; panics
/// naming `what` when none came.
pub fn wait_for_line(lines: &mpsc::Receiver<String>, what: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if want(&line) => return line,
            Ok(_) => {}
            Err(e) => panic!("no {what} within {WAIT:?}: {e}"),
        }
    }
}

/// A private bus with fake-systemd serving on it; both are stopped on drop (fake-systemd
/// with SIGTERM, so it kills the units' processes it still runs).
pub struct TestBus {
    dir: tempfile::TempDir,
    address: String,
    daemon: Child,
    fake: Child,
}

impl TestBus {
    /// A bus with no units with unit files (transient units only).
    pub fn start() -> TestBus {
        TestBus::start_with(&[])
    }

    /// A bus with units that have unit files, each `NAME;TYPE;STATE[;SCRIPT]` (see
    /// fake-systemd's `--unit`). Returns once fake-systemd serves.
    pub fn start_with(units: &[String]) -> TestBus {
        assert!(Path::new(DBUS_DAEMON).is_file(), "{DBUS_DAEMON} is missing: install dbus-daemon (Debian: apt-get install dbus-daemon)");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("bus.conf");
        let socket = dir.path().join("bus.sock");
        let text = format!(
            "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\" \
             \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
             <busconfig><type>session</type><listen>unix:path={}</listen>\
             <policy context=\"default\"><allow send_destination=\"*\" eavesdrop=\"true\"/><allow eavesdrop=\"true\"/><allow own=\"*\"/></policy>\
             </busconfig>\n",
            socket.display()
        );
        std::fs::write(&config, text).expect("write bus config");
        let mut daemon = Command::new(DBUS_DAEMON)
            .arg("--config-file")
            .arg(&config)
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {DBUS_DAEMON}: {e}"));
        let daemon_out = lines_of(daemon.stdout.take().expect("daemon stdout"));
        let address = wait_for_line(&daemon_out, "bus address from dbus-daemon", |l| l.starts_with("unix:")).trim().to_owned();
        let mut fake = match Command::new(workspace_binary("fake-systemd"))
            .args(["--address", &address])
            .args(units.iter().flat_map(|u| ["--unit", u.as_str()]))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
        {
            Ok(fake) => fake,
            Err(e) => {
                let _ = daemon.kill();
                let _ = daemon.wait();
                panic!("start fake-systemd: {e}");
            }
        };
        let fake_out = lines_of(fake.stdout.take().expect("fake stdout"));
        // From here on a panic drops the bus, which stops both children.
        let bus = TestBus { dir, address, daemon, fake };
        wait_for_line(&fake_out, "`ready` from fake-systemd", |l| l == "ready");
        bus
    }

    /// Points a sandboxed agent's config (from `Harness::enroll_sandboxed`, which names a bus
    /// that is not there) at this bus.
    pub fn point_agent_at(&self, config: &std::path::Path) {
        let text = std::fs::read_to_string(config).expect("config");
        let mut replaced = 0;
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with("systemd_bus = ") {
                    replaced += 1;
                    format!("systemd_bus = \"{}\"", self.address())
                } else {
                    l.to_owned()
                }
            })
            .collect();
        assert_eq!(replaced, 1, "one systemd_bus line in {text}");
        std::fs::write(config, lines.join("\n") + "\n").expect("config");
    }

    /// The bus address (`unix:path=…,guid=…`), for `DbusSystemd::at_address` or an agent's
    /// `systemd_bus`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The agent's systemd client on this bus.
    pub fn systemd(&self) -> DbusSystemd {
        DbusSystemd::at_address(&self.address).expect("connect to the test bus")
    }

    /// A raw connection, for what the agent's client does not read.
    pub fn raw(&self) -> zbus::blocking::Connection {
        zbus::blocking::connection::Builder::address(self.address.as_str()).expect("address").build().expect("connect")
    }

    /// `GetUnitFileState` of `unit` (`enabled`, `disabled`).
    pub fn unit_file_state(&self, unit: &str) -> String {
        let reply = self
            .raw()
            .call_method(Some(DESTINATION), MANAGER_PATH, Some(MANAGER_INTERFACE), "GetUnitFileState", &(unit,))
            .expect("GetUnitFileState");
        reply.body().deserialize::<String>().expect("state")
    }

    /// `Unit.ActiveEnterTimestamp` of `unit` (µs): it moves on every activation.
    pub fn active_enter_timestamp(&self, unit: &str) -> u64 {
        let conn = self.raw();
        let path: zbus::zvariant::OwnedObjectPath = conn
            .call_method(Some(DESTINATION), MANAGER_PATH, Some(MANAGER_INTERFACE), "GetUnit", &(unit,))
            .expect("GetUnit")
            .body()
            .deserialize()
            .expect("path");
        let reply = conn
            .call_method(
                Some(DESTINATION),
                &path,
                Some("org.freedesktop.DBus.Properties"),
                "Get",
                &(UNIT_INTERFACE, "ActiveEnterTimestamp"),
            )
            .expect("Get");
        let value: zbus::zvariant::OwnedValue = reply.body().deserialize().expect("value");
        u64::try_from(value).expect("u64")
    }

    /// `name` inside the bus's temporary directory (removed with the bus), for markers.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A FIFO in the bus's directory: a unit's `read line < fifo` blocks until something
    /// writes a line to it.
    pub fn fifo(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        path
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        // SIGTERM: fake-systemd then kills the units' processes it still runs.
        if let Ok(pid) = i32::try_from(self.fake.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        }
        let _ = self.fake.wait();
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}
