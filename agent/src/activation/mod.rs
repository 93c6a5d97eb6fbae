//! NixOS activation with magic rollback: how an intent's target closure becomes the running
//! system, and how it stops being one when the coordinator cannot confirm it or the host is
//! not healthy on it.
//!
//! One activation, in order (see DESIGN.md "Agent"):
//!
//! 1. take the switch lock (`flock` on `switch.lock` in the state directory), so two
//!    activations (or an activation and a start-up [`Activator::resume`]) never interleave;
//! 2. refuse a target under quarantine (a closure that failed here before, for
//!    [`ActivationSettings::quarantine_secs`]), and report [`ActivationPhase::NoBackend`] on a
//!    host without `<root>/nix/var/nix/profiles/system`;
//! 3. record the **previous** closure — what `<root>/run/current-system` resolves to (the
//!    system profile's target when there is no running system link) — never relying on
//!    `nix-env --rollback`, whose "previous generation" may not be what was running;
//! 4. `nix-store --realise <target>` (failure: [`ActivationPhase::Failed`], nothing touched);
//! 5. compare the switch inhibitors (kernel, initrd, systemd, dbus; see [`inspect`]);
//! 6. write `activation.json` (the durable pending activation) — nothing irreversible happens
//!    before it is on disk;
//! 7. `nix-env -p <root>/nix/var/nix/profiles/system --set <target>`;
//! 8. with an inhibitor: `<target>/bin/switch-to-configuration boot`, phase
//!    [`ActivationPhase::Deferred`]; otherwise `switch-to-configuration switch` in a transient
//!    systemd unit (so a restart of the agent or of the network cannot kill it), wait for it
//!    and for `<root>/run/current-system` to resolve to the target;
//! 9. confirm within the intent's `confirmWindowSecs` ([`Confirmer`]), retrying an
//!    unreachable coordinator every [`ActivationSettings::confirm_retry_secs`];
//! 10. the health gate ([`HealthGate`]);
//! 11. on a missed confirm, a 410, a failed switch or a failed gate: `nix-env --set <previous>`
//!     and the previous closure's `switch-to-configuration switch` in a transient unit,
//!     [`ActivationPhase::RolledBack`] and [`ReportEvent::RolledBack`]; a closure that failed
//!     on its own (switch, boot, gate, missed confirm) is quarantined. A 410 is the
//!     coordinator withdrawing the intent, not the closure failing: rolled back, not
//!     quarantined.
//!
//! The decisions live in [`machine`], a state machine without I/O (states are types,
//! transitions consume them, the clock is a `now` argument); [`executor`] is the small executor
//! doing the I/O through traits ([`CommandRunner`](crate::exec::CommandRunner),
//! [`Systemd`](crate::systemd::Systemd), [`Confirmer`], [`HealthGate`], [`Clock`]); [`record`]
//! is what survives a crash. Tests run the real executor against a fake Nix toolchain in a
//! temporary root (`testkit`).

pub mod executor;
pub mod inspect;
pub mod machine;
pub mod record;

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use drover_proto::report::{ActivationPhase, ActivationStatus, ConfirmRequest, ReportEvent};
pub use drover_proto::time::Time;
pub use executor::Activator;
pub use record::{ActivationRecord, QuarantineEntry, Step};

use crate::exec::ExecError;
use crate::state::StateError;
use crate::systemd::SystemdError;

/// The `[activation]` table of `agent.toml`. Every field has a default, so the table (and
/// any of its keys) may be left out.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActivationSettings {
    /// The file-system root every absolute Nix path is taken under (`/nix/store/…`,
    /// `/nix/var/nix/profiles/system`, `/run/current-system`). `/` in production; tests point
    /// it at a temporary directory.
    pub root: PathBuf,
    /// `nix-store` (a bare name is looked up on `PATH`).
    pub nix_store: PathBuf,
    /// `nix-env` (a bare name is looked up on `PATH`).
    pub nix_env: PathBuf,
    /// How long `nix-store --realise` may take (it may download the whole closure).
    pub realise_timeout_secs: u64,
    /// How long `switch-to-configuration` (switch, boot, or a rollback's switch) may take.
    pub switch_timeout_secs: u64,
    /// How long a closure that failed here is refused.
    pub quarantine_secs: u64,
    /// How often an unreachable coordinator is asked again for the confirmation.
    pub confirm_retry_secs: u64,
}

impl Default for ActivationSettings {
    fn default() -> Self {
        ActivationSettings {
            root: PathBuf::from("/"),
            nix_store: PathBuf::from("nix-store"),
            nix_env: PathBuf::from("nix-env"),
            realise_timeout_secs: 3600,
            switch_timeout_secs: 900,
            quarantine_secs: 24 * 3600,
            confirm_retry_secs: 5,
        }
    }
}

impl ActivationSettings {
    /// `abs` (an absolute path such as `/nix/store/…`) under [`ActivationSettings::root`].
    pub fn rooted(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// `<root>/nix/var/nix/profiles/system`.
    pub fn system_profile(&self) -> PathBuf {
        self.rooted(SYSTEM_PROFILE)
    }

    /// `<root>/run/current-system`.
    pub fn current_system_link(&self) -> PathBuf {
        self.rooted(CURRENT_SYSTEM)
    }
}

/// The NixOS system profile, as an absolute path (taken under the root).
pub const SYSTEM_PROFILE: &str = "/nix/var/nix/profiles/system";
/// The running system's link, as an absolute path (taken under the root).
pub const CURRENT_SYSTEM: &str = "/run/current-system";
/// The durable pending (or last finished) activation, in the state directory.
pub const RECORD_FILE: &str = "activation.json";
/// Quarantined closures, in the state directory.
pub const QUARANTINE_FILE: &str = "quarantine.json";
/// The switch lock, in the state directory.
pub const LOCK_FILE: &str = "switch.lock";

/// The coordinator's answer to a confirmation (`POST /v1/agent/confirm`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfirmAnswer {
    /// 204: confirmed; the host keeps the target.
    Confirmed,
    /// 410: the intent is gone (superseded, rollout halted, window over on the server's
    /// side); the host rolls back.
    Gone,
    /// No answer (network, TLS, 5xx); asked again until the confirm window ends.
    Unreachable(String),
}

/// Sends the confirmation. The real one posts a [`ConfirmRequest`] over the agent's mTLS
/// client; tests answer from a script.
pub trait Confirmer: Send + Sync {
    /// One attempt; it must return (bounded by its own timeout), never retry by itself.
    fn confirm(&self, request: &ConfirmRequest) -> ConfirmAnswer;
}

/// The post-activation health gate (failed units, GPU state, gating probes, …).
pub trait HealthGate: Send + Sync {
    /// `Ok` when the host is healthy on the new system; `Err` says why not.
    fn check(&self) -> Result<(), GateRefusal>;
}

/// Why the health gate refused the new system (the rollback's reason).
#[derive(Debug, thiserror::Error)]
pub enum GateRefusal {
    /// The failed units could not be listed.
    #[error("cannot list failed units: {source}")]
    FailedUnitsUnknown {
        /// systemd's error.
        #[source]
        source: SystemdError,
    },
    /// Units failed.
    #[error("failed units: {}", units.join(", "))]
    FailedUnits {
        /// The failed units.
        units: Vec<String>,
    },
    /// Enforced probes did not pass: one line each (name, outcome, message).
    #[error("{}", probes.join("; "))]
    Probes {
        /// The probes that did not pass.
        probes: Vec<String>,
    },
    /// A gate's own reason, as text (the gates of tests).
    #[error("{0}")]
    Reason(String),
}

impl From<&str> for GateRefusal {
    fn from(reason: &str) -> Self {
        GateRefusal::Reason(reason.to_owned())
    }
}

/// Why a step of an activation failed: the reason the state machine writes into the record
/// (and the report) of the outcome it leads to.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A tool (`nix-store`, `nix-env`, `switch-to-configuration`) ran and failed.
    #[error("{command} failed ({ended}): {stderr}")]
    Tool {
        /// The command line.
        command: String,
        /// `exit N`, or `a signal`.
        ended: String,
        /// Its stderr, trimmed.
        stderr: String,
    },
    /// A tool could not be run, or ran past its timeout.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The rollback's transient unit could not be started.
    #[error("cannot start the rollback unit: {source}")]
    RollbackUnit {
        /// systemd's error.
        #[source]
        source: SystemdError,
    },
    /// The rollback's unit failed, or could not be watched.
    #[error(transparent)]
    Unit(#[from] UnitFailure),
}

/// How a transient unit failed, or why it could not be watched.
#[derive(Debug, thiserror::Error)]
pub enum UnitFailure {
    /// systemd could not be asked, or the wait for the unit failed.
    #[error(transparent)]
    Systemd(#[from] SystemdError),
    /// The unit ended, not successfully.
    #[error("unit {unit} ended {active_state}/{sub_state} (result {result:?})")]
    Ended {
        /// The unit.
        unit: String,
        /// Its `ActiveState`.
        active_state: String,
        /// Its `SubState`.
        sub_state: String,
        /// Its `Result`.
        result: String,
    },
}

pub use crate::timekeeping::{Clock, SystemClock};

/// What an activation (or a resumed one) ended with: the status for the next check-in and
/// the typed events to report with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationReport {
    /// The activation status.
    pub status: ActivationStatus,
    /// Events ([`ReportEvent::RolledBack`], [`ReportEvent::NoActivationBackend`]).
    pub events: Vec<ReportEvent>,
}

/// Why the activation module could not do its job at all (as opposed to an activation that
/// ended Failed or RolledBack, which is an [`ActivationReport`]).
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// Another activation holds the switch lock.
    #[error("another activation holds the switch lock {lock}", lock = lock.display())]
    Locked {
        /// The lock file.
        lock: PathBuf,
    },
    /// The lock file could not be opened or locked.
    #[error("switch lock {lock}: {message}", lock = lock.display())]
    Lock {
        /// The lock file.
        lock: PathBuf,
        /// The OS error.
        message: String,
    },
    /// The state directory failed (the pending activation could not be recorded, so nothing
    /// irreversible was done after the failure).
    #[error("activation state: {source}")]
    State {
        /// The state directory's error.
        #[source]
        source: StateError,
    },
    /// `activation.json` or `quarantine.json` does not parse.
    #[error("{file}: {message}", file = file.display())]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The intent's target is not a Nix store path.
    #[error("intent {intent_id}: target {target:?} is not a Nix store path")]
    BadTarget {
        /// The intent.
        intent_id: String,
        /// The target given.
        target: String,
    },
    /// An unfinished activation of another intent is on record: [`Activator::resume`] it
    /// first (the agent does at start-up).
    #[error("activation of intent {intent_id} ({target}) is unfinished: resume it first")]
    Unfinished {
        /// The unfinished activation's intent.
        intent_id: String,
        /// Its target.
        target: String,
    },
}

impl From<StateError> for ActivationError {
    fn from(source: StateError) -> Self {
        ActivationError::State { source }
    }
}

/// Whether `p` exists as a directory entry (a dangling symlink counts).
pub(crate) fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}
