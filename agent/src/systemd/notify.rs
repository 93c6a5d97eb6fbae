//! The agent's side of its own unit's service protocol (`Type=notify`, `WatchdogSec=`),
//! without libsystemd: `sd_notify` is one datagram of newline-separated `KEY=value`
//! assignments sent to the socket named by `$NOTIFY_SOCKET` (a path, or `@name` for a
//! Linux abstract socket). When the variable is unset (the agent run by hand, or in tests)
//! every message is a no-op.
//!
//! The environment parsing is pure ([`parse_notify_socket`], [`watchdog_interval`]): the
//! callers pass the values in, so tests never touch the process environment.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::time::Duration;

/// Why a notification could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// `$NOTIFY_SOCKET` names nothing this implementation can send to.
    #[error("NOTIFY_SOCKET={value:?}: {reason}")]
    Address {
        /// The variable's value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The datagram could not be sent.
    #[error("sd_notify to {socket}: {source}")]
    Send {
        /// The socket, as `$NOTIFY_SOCKET` named it.
        socket: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Where notifications go, as parsed from `$NOTIFY_SOCKET`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyTarget {
    /// A socket file.
    Path(PathBuf),
    /// A Linux abstract socket (`@name`; the name without the `@`).
    Abstract(Vec<u8>),
}

/// Parses `$NOTIFY_SOCKET`'s value: `None` or empty → no target (notifications are no-ops);
/// `/path` → a socket file; `@name` → an abstract socket. Anything else (systemd's `vsock:`
/// addresses, relative paths) is an error.
pub fn parse_notify_socket(value: Option<&str>) -> Result<Option<NotifyTarget>, NotifyError> {
    let Some(value) = value.filter(|v| !v.is_empty()) else { return Ok(None) };
    let bad = |reason: &str| NotifyError::Address { value: value.to_owned(), reason: reason.to_owned() };
    if let Some(name) = value.strip_prefix('@') {
        if name.is_empty() {
            return Err(bad("empty abstract socket name"));
        }
        return Ok(Some(NotifyTarget::Abstract(name.as_bytes().to_vec())));
    }
    if value.starts_with('/') {
        return Ok(Some(NotifyTarget::Path(PathBuf::from(value))));
    }
    Err(bad("neither an absolute path nor an abstract socket (@name)"))
}

/// How often to send `WATCHDOG=1`: half of `$WATCHDOG_USEC`, when the watchdog is meant for
/// this process (`$WATCHDOG_PID` unset, or equal to `our_pid`). `None` when the watchdog is
/// off, the values do not parse, or it is meant for another process.
pub fn watchdog_interval(watchdog_usec: Option<&str>, watchdog_pid: Option<&str>, our_pid: u32) -> Option<Duration> {
    let usec: u64 = watchdog_usec?.trim().parse().ok()?;
    if usec == 0 {
        return None;
    }
    if let Some(pid) = watchdog_pid.filter(|p| !p.is_empty()) {
        let pid: u32 = pid.trim().parse().ok()?;
        if pid != our_pid {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

/// The watchdog interval from this process's environment (see [`watchdog_interval`]).
pub fn watchdog_interval_from_env() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id())
}

/// One `KEY=value` line's value made safe: a newline would start another assignment.
fn one_line(text: &str) -> String {
    text.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect()
}

/// Sends service notifications to systemd (or nowhere, when not run under a notify unit).
#[derive(Debug)]
pub struct Notifier {
    /// The socket and its address; `None`: notifications are no-ops.
    target: Option<(UnixDatagram, SocketAddr, String)>,
}

impl Notifier {
    /// A notifier that sends nothing.
    pub fn disabled() -> Self {
        Notifier { target: None }
    }

    /// A notifier for `$NOTIFY_SOCKET`'s value (see [`parse_notify_socket`]).
    pub fn from_value(notify_socket: Option<&str>) -> Result<Self, NotifyError> {
        let Some(target) = parse_notify_socket(notify_socket)? else { return Ok(Self::disabled()) };
        let shown = notify_socket.unwrap_or_default().to_owned();
        let addr_err = |source: std::io::Error| NotifyError::Address { value: shown.clone(), reason: source.to_string() };
        let addr = match &target {
            NotifyTarget::Path(path) => SocketAddr::from_pathname(path).map_err(addr_err)?,
            NotifyTarget::Abstract(name) => SocketAddr::from_abstract_name(name).map_err(addr_err)?,
        };
        let socket = UnixDatagram::unbound().map_err(|source| NotifyError::Send { socket: shown.clone(), source })?;
        Ok(Notifier { target: Some((socket, addr, shown)) })
    }

    /// A notifier for this process's `$NOTIFY_SOCKET`.
    pub fn from_env() -> Result<Self, NotifyError> {
        let value = std::env::var("NOTIFY_SOCKET").ok();
        Self::from_value(value.as_deref())
    }

    /// Whether messages go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends one message of `KEY=value` assignments as a single datagram.
    pub fn notify(&self, assignments: &[(&str, &str)]) -> Result<(), NotifyError> {
        let Some((socket, addr, shown)) = &self.target else { return Ok(()) };
        let message: String = assignments.iter().map(|(k, v)| format!("{k}={}\n", one_line(v))).collect();
        let sent = socket.send_to_addr(message.as_bytes(), addr).map_err(|source| NotifyError::Send { socket: shown.clone(), source })?;
        if sent != message.len() {
            let source = std::io::Error::other(format!("short send: {sent} of {} bytes", message.len()));
            return Err(NotifyError::Send { socket: shown.clone(), source });
        }
        Ok(())
    }

    /// `READY=1`: start-up finished (with a status line).
    pub fn ready(&self, status: &str) -> Result<(), NotifyError> {
        self.notify(&[("READY", "1"), ("STATUS", status)])
    }

    /// `STATUS=…`: a one-line status for `systemctl status`.
    pub fn status(&self, status: &str) -> Result<(), NotifyError> {
        self.notify(&[("STATUS", status)])
    }

    /// `WATCHDOG=1`: still alive.
    pub fn watchdog(&self) -> Result<(), NotifyError> {
        self.notify(&[("WATCHDOG", "1")])
    }

    /// `STOPPING=1`: shutting down.
    pub fn stopping(&self) -> Result<(), NotifyError> {
        self.notify(&[("STOPPING", "1")])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(socket: &UnixDatagram) -> String {
        socket.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).expect("a datagram arrives");
        String::from_utf8(buf[..n].to_vec()).expect("utf8")
    }

    #[test]
    fn parses_notify_socket_values() {
        assert_eq!(parse_notify_socket(None).unwrap(), None);
        assert_eq!(parse_notify_socket(Some("")).unwrap(), None);
        assert_eq!(parse_notify_socket(Some("/run/systemd/notify")).unwrap(), Some(NotifyTarget::Path("/run/systemd/notify".into())));
        assert_eq!(parse_notify_socket(Some("@sd-notify")).unwrap(), Some(NotifyTarget::Abstract(b"sd-notify".to_vec())));
        assert!(matches!(parse_notify_socket(Some("@")), Err(NotifyError::Address { .. })));
        assert!(matches!(parse_notify_socket(Some("vsock:2:1234")), Err(NotifyError::Address { .. })));
        assert!(matches!(parse_notify_socket(Some("relative/path")), Err(NotifyError::Address { .. })));
    }

    #[test]
    fn watchdog_interval_is_half_and_only_for_us() {
        assert_eq!(watchdog_interval(Some("30000000"), None, 42), Some(Duration::from_secs(15)));
        assert_eq!(watchdog_interval(Some("30000000"), Some(""), 42), Some(Duration::from_secs(15)));
        assert_eq!(watchdog_interval(Some("30000000"), Some("42"), 42), Some(Duration::from_secs(15)));
        assert_eq!(watchdog_interval(Some("30000000"), Some("43"), 42), None);
        assert_eq!(watchdog_interval(Some("30000000"), Some("x"), 42), None);
        assert_eq!(watchdog_interval(Some("0"), None, 42), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 42), None);
        assert_eq!(watchdog_interval(None, Some("42"), 42), None);
        assert_eq!(watchdog_interval(Some("1001"), None, 1), Some(Duration::from_micros(500)));
    }

    #[test]
    fn unset_socket_is_a_no_op() {
        let n = Notifier::from_value(None).expect("no socket is fine");
        assert!(!n.is_enabled());
        n.ready("up").expect("no-op");
        n.watchdog().expect("no-op");
        n.stopping().expect("no-op");
        assert!(!Notifier::disabled().is_enabled());
    }

    #[test]
    fn messages_reach_a_path_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).expect("bind");
        let n = Notifier::from_value(Some(path.to_str().expect("utf8 path"))).expect("notifier");
        assert!(n.is_enabled());
        n.ready("serving generation 7").expect("send");
        assert_eq!(receive(&systemd), "READY=1\nSTATUS=serving generation 7\n");
        n.status("two\nlines").expect("send");
        assert_eq!(receive(&systemd), "STATUS=two lines\n");
        n.watchdog().expect("send");
        assert_eq!(receive(&systemd), "WATCHDOG=1\n");
        n.stopping().expect("send");
        assert_eq!(receive(&systemd), "STOPPING=1\n");
    }

    #[test]
    fn messages_reach_an_abstract_socket() {
        let name = format!("drover-notify-test-{}-{}", std::process::id(), rand::random::<u64>());
        let systemd = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).expect("addr")).expect("bind");
        let n = Notifier::from_value(Some(&format!("@{name}"))).expect("notifier");
        n.watchdog().expect("send");
        assert_eq!(receive(&systemd), "WATCHDOG=1\n");
    }

    #[test]
    fn a_missing_socket_is_a_send_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nobody-listens");
        let n = Notifier::from_value(Some(path.to_str().expect("utf8 path"))).expect("notifier");
        assert!(matches!(n.ready("up"), Err(NotifyError::Send { .. })));
    }
}
