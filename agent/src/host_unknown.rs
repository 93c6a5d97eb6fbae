//! The coordinator saying it has no record of this host (`403 host_unknown_reenroll`,
//! [`HOST_UNKNOWN_REENROLL`]): its store was restored from a backup older than this host's
//! enrollment. The certificate is still the CA's, so the TLS handshake passes, but no agent
//! route will serve it again; nothing the agent can do fixes that — an operator enrolls the
//! host again under a new id (the coordinator's message names the steps).
//!
//! Retrying at the usual backoff would repeat the same warning every few minutes for ever,
//! each one looking like a network fault. Instead, [`HostUnknown`]:
//!
//! - logs it **once** at error level, with the coordinator's message (the host id and
//!   hostname it has no record of, and the way back), then at debug level only;
//! - sets the service status (`systemctl status drover-agent`) to not ready, naming the fix;
//! - asks again every [`RECHECK_SECS`] (jittered), not at the backoff's pace: the answer
//!   can change only by an operator's hand (a newer backup restored over the wrong one);
//! - when a check-in succeeds again, says so once and puts the status back.
//!
//! The agent keeps running its current generation meanwhile, as it does while the
//! coordinator is unreachable. The message comes from the coordinator and is logged as the
//! client cleaned it (control characters replaced, bounded); it names no secret.

use std::sync::Arc;
use std::time::Duration;

use drover_client::ClientError;
use drover_proto::report::HOST_UNKNOWN_REENROLL;

use crate::pull::PullError;

/// How often an agent its coordinator does not know asks again, in seconds (before jitter).
pub const RECHECK_SECS: u64 = 300;

/// The service status while the coordinator has no record of this host.
pub const NOT_READY_STATUS: &str = "not ready: the coordinator has no record of this host; enroll it again (see the log)";

/// The service status once the coordinator knows this host (again).
pub const CHECKING_IN_STATUS: &str = "checking in";

/// Where a one-line service status goes (systemd's `STATUS=`, in production).
pub type StatusSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Whether the coordinator has said it does not know this host, and what to do about it.
#[derive(Default)]
pub struct HostUnknown {
    /// Set from the first such answer until a check-in succeeds.
    unknown: bool,
    status: Option<StatusSink>,
}

impl std::fmt::Debug for HostUnknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostUnknown").field("unknown", &self.unknown).field("status", &self.status.is_some()).finish()
    }
}

/// The coordinator's message when `e` is its answer that it has no record of this host.
pub fn recognise(e: &PullError) -> Option<&str> {
    match e {
        PullError::Client(ClientError::Api { code, message, .. }) if code == HOST_UNKNOWN_REENROLL => Some(message),
        _ => None,
    }
}

/// The wait before asking again: [`RECHECK_SECS`], ±10 % by `jitter` (in `[0, 1]`), so a
/// fleet restored together does not come back in step.
pub fn recheck_wait(jitter: f64) -> Duration {
    Duration::from_secs(RECHECK_SECS).mul_f64(0.9 + 0.2 * jitter.clamp(0.0, 1.0))
}

impl HostUnknown {
    /// One that reports its status to `sink`.
    pub fn reporting_to(sink: StatusSink) -> HostUnknown {
        HostUnknown { unknown: false, status: Some(sink) }
    }

    /// Whether the last answer was that the coordinator has no record of this host.
    pub fn is_unknown(&self) -> bool {
        self.unknown
    }

    fn set_status(&self, status: &str) {
        if let Some(sink) = &self.status {
            sink(status);
        }
    }

    /// After a failed pass: the wait before the next one when `e` is the coordinator's "no
    /// record of this host" (said once; then quietly), or `None` for any other failure, which
    /// the usual backoff handles.
    pub fn failed(&mut self, e: &PullError, jitter: f64) -> Option<Duration> {
        let message = recognise(e)?;
        let wait = recheck_wait(jitter);
        if self.unknown {
            tracing::debug!(
                code = HOST_UNKNOWN_REENROLL,
                recheck_in_secs = wait.as_secs(),
                "the coordinator still has no record of this host"
            );
        } else {
            self.unknown = true;
            tracing::error!(
                code = HOST_UNKNOWN_REENROLL,
                coordinator_says = %message,
                recheck_every_secs = RECHECK_SECS,
                "the coordinator has no record of this host (its state was restored from an older backup?): this host must be \
                 enrolled again as the message says; the agent keeps the current system and asks again every few minutes"
            );
            self.set_status(NOT_READY_STATUS);
        }
        Some(wait)
    }

    /// After a pass that succeeded: the coordinator knows this host (again).
    pub fn succeeded(&mut self) {
        if self.unknown {
            self.unknown = false;
            tracing::info!("the coordinator knows this host again");
            self.set_status(CHECKING_IN_STATUS);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn refusal(code: &str) -> PullError {
        PullError::Client(ClientError::Api {
            url: "https://coordinator.example/v1/agent/checkin".into(),
            status: 403,
            code: code.into(),
            message: "this coordinator has no record of host 5b0f2c7e-4d4e-4f51-9a36-0d6c1f4f3a10 (gpu-02)".into(),
        })
    }

    fn recording() -> (HostUnknown, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        (HostUnknown::reporting_to(Arc::new(move |s: &str| sink.lock().expect("lock").push(s.to_owned()))), seen)
    }

    #[test]
    fn a_forgotten_host_is_told_once_and_asks_again_in_minutes_not_seconds() {
        let (mut h, statuses) = recording();
        for (i, jitter) in [0.0, 0.5, 1.0, 0.3].into_iter().enumerate() {
            let wait = h.failed(&refusal(HOST_UNKNOWN_REENROLL), jitter).expect("recognised");
            assert!(wait >= Duration::from_secs(270) && wait <= Duration::from_secs(330), "attempt {i}: {wait:?}");
            assert!(h.is_unknown());
        }
        assert_eq!(*statuses.lock().expect("lock"), [NOT_READY_STATUS], "the status is set once, not on every attempt");

        // Known again: said once, the status back.
        h.succeeded();
        h.succeeded();
        assert!(!h.is_unknown());
        assert_eq!(*statuses.lock().expect("lock"), [NOT_READY_STATUS, CHECKING_IN_STATUS]);
    }

    #[test]
    fn other_refusals_and_network_faults_keep_the_usual_backoff() {
        let (mut h, statuses) = recording();
        assert_eq!(h.failed(&refusal("not_found"), 0.5), None);
        assert_eq!(h.failed(&refusal("forbidden"), 0.5), None);
        let unreachable = PullError::Client(ClientError::Unreachable { path: "/v1/agent/checkin".into(), attempts: Vec::new() });
        assert_eq!(h.failed(&unreachable, 0.5), None);
        assert!(!h.is_unknown());
        h.succeeded();
        assert!(statuses.lock().expect("lock").is_empty(), "nothing to say: {:?}", statuses.lock().expect("lock"));
    }

    #[test]
    fn the_coordinators_message_is_what_is_recognised() {
        let e = refusal(HOST_UNKNOWN_REENROLL);
        assert!(recognise(&e).is_some_and(|m| m.contains("(gpu-02)")));
        assert_eq!(recognise(&refusal("unauthenticated")), None);
    }
}
