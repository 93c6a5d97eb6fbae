//! A private D-Bus for tests: a `dbus-daemon` of its own (a session-type bus on a socket in a
//! temporary directory) with the `fake-systemd` test service (the devkit's `fake-systemd`, on the devkit's [`PrivateBus`](drover_devkit::bus::PrivateBus))
//! serving systemd's Manager API on it. The agent's [`DbusSystemd`] talks to it exactly as to
//! the system bus; the real `drover-agent` process does too, given the address as its
//! `systemd_bus`.
//!
//! Needs `/usr/bin/dbus-daemon` (CI installs it); [`TestBus::start`] fails loudly without it.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

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
    // The bus before its directory: stopped before the directory is removed.
    bus: drover_devkit::bus::PrivateBus,
    dir: tempfile::TempDir,
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
        let bus = drover_devkit::bus::PrivateBus::start_with(dir.path(), &workspace_binary("fake-systemd"), units)
            .unwrap_or_else(|e| panic!("cannot start the test bus: {e}"));
        TestBus { bus, dir }
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
        self.bus.address()
    }

    /// The agent's systemd client on this bus.
    pub fn systemd(&self) -> DbusSystemd {
        DbusSystemd::at_address(self.address()).expect("connect to the test bus")
    }

    /// A raw connection, for what the agent's client does not read.
    pub fn raw(&self) -> zbus::blocking::Connection {
        zbus::blocking::connection::Builder::address(self.address()).expect("address").build().expect("connect")
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
