//! The executor: drives the [`machine`](super::machine) through real I/O — the switch lock,
//! `nix-store`, `nix-env`, `switch-to-configuration`, transient systemd units, the
//! coordinator's confirmation, the health gate and the clock — each behind a trait, so tests
//! run this very code against a fake Nix toolchain in a temporary root.
//!
//! Its only decisions are about I/O itself (which command, which unit, in what order); every
//! "what next" is a transition of the current state. The record is written before each
//! irreversible step, so [`Activator::resume`] can always finish what a killed agent began.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use drover_proto::intent::Intent;
use drover_proto::names::check_store_path;

use super::inspect::{changed_inhibitors, closure_of};
use super::machine::{
    AwaitingConfirm, Begin, Finished, Gating, HostFacts, Job, Pending, ProfileSet, Recovery, Requested, RollingBack, Staged, Switching,
    UnitOutcome,
};
use super::record::{self, Step, SwitchMode};
use super::{
    ActivationError, ActivationReport, ActivationSettings, CURRENT_SYSTEM, Clock, Confirmer, HealthGate, LOCK_FILE, SYSTEM_PROFILE,
    StepError, UnitFailure, exists,
};
use crate::exec::{CommandRunner, CommandSpec};
use crate::state::StateDir;
use crate::systemd::Systemd;

/// Where the kernel publishes the current boot's id (read as it is, not under the root).
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Everything an activation needs; build one per call or keep one around.
pub struct Activator<'a> {
    /// The `[activation]` settings.
    pub settings: &'a ActivationSettings,
    /// The agent's state directory (`activation.json`, `quarantine.json`, `switch.lock`).
    pub state: &'a StateDir,
    /// Runs `nix-store`, `nix-env`, `switch-to-configuration boot`.
    pub runner: &'a dyn CommandRunner,
    /// Starts and watches the transient switch and rollback units.
    pub systemd: &'a dyn Systemd,
    /// Confirms with the coordinator.
    pub confirmer: &'a dyn Confirmer,
    /// The post-switch health gate.
    pub gate: &'a dyn HealthGate,
    /// The time.
    pub clock: &'a dyn Clock,
}

impl Activator<'_> {
    /// Activates a verified intent's target and returns the outcome to report. Blocks until
    /// the activation is finished (confirmed, deferred, rolled back, failed or refused). An
    /// intent already acted on (the last record's intent) returns its recorded outcome
    /// without acting again — unless that outcome changed nothing and may go otherwise now
    /// (no backend, quarantine, realise or profile failure: `retryable`).
    pub fn activate(&self, intent: &Intent) -> Result<ActivationReport, ActivationError> {
        let _lock = self.lock()?;
        if check_store_path(&intent.target_closure).is_err() {
            return Err(ActivationError::BadTarget { intent_id: intent.intent_id.clone(), target: intent.target_closure.clone() });
        }
        if let Some(last) = record::load_record(self.state)? {
            if last.step != Step::Done {
                return Err(ActivationError::Unfinished { intent_id: last.intent_id, target: last.target });
            }
            if last.intent_id == intent.intent_id && !last.retryable {
                return Ok(last.report());
            }
        }
        let now = self.clock.now();
        let facts = HostFacts {
            has_profile: exists(&self.settings.system_profile()),
            running: self.running(),
            profile: closure_of(&self.settings.root, SYSTEM_PROFILE),
            quarantined: record::load_quarantine(self.state)?.active(&intent.target_closure, now).cloned(),
        };
        match Requested::new(Job::from_intent(intent)).begin(facts, now) {
            Begin::Finished(f) => self.finish(f),
            Begin::AlreadyRunning(a) => {
                record::store_record(self.state, &a.record(now))?;
                self.confirm_and_gate(a)
            }
            Begin::Realise(r) => {
                let result = self.realise(r.target());
                let realised = match r.realised(result) {
                    Ok(realised) => realised,
                    Err(f) => return self.finish(f),
                };
                let inhibitors = changed_inhibitors(&self.settings.root, realised.previous(), realised.target());
                self.run_staged(realised.stage(inhibitors, unit_name("switch")))
            }
        }
    }

    /// Finishes the activation a killed agent left (call at start-up, before the loop):
    /// waits for a switch unit still running, confirms a running target whose deadline has
    /// not passed, and otherwise rolls back. `None` when there is no record at all; a
    /// finished record returns its outcome unchanged.
    pub fn resume(&self) -> Result<Option<ActivationReport>, ActivationError> {
        let _lock = self.lock()?;
        let Some(rec) = record::load_record(self.state)? else { return Ok(None) };
        let pending = Pending::from_record(rec)
            .map_err(|e| ActivationError::Corrupt { file: self.state.file(super::RECORD_FILE), message: e.to_string() })?;
        let report = match pending {
            Pending::Done(rec) => rec.report(),
            Pending::Booting(staged) => self.run_staged(staged)?,
            Pending::Switching(s) => self.finish_switch(s)?,
            Pending::AwaitingConfirm(a) => self.confirm_and_gate(a)?,
            Pending::Gating(g) => self.gate(g)?,
            Pending::RollingBack(rb) => {
                // A rollback unit still running is let finish before the rollback is redone.
                if let Some(unit) = rb.unit() {
                    let _ = self.wait_unit(unit);
                }
                self.roll_back(rb)?
            }
        };
        Ok(Some(report))
    }

    /// The last recorded outcome (or the step under way), for the check-in.
    pub fn last_report(&self) -> Result<Option<ActivationReport>, ActivationError> {
        Ok(record::load_record(self.state)?.map(|r| r.report()))
    }

    /// The closure `/run/current-system` resolves to (the check-in's `currentGeneration`).
    pub fn running(&self) -> Option<String> {
        closure_of(&self.settings.root, CURRENT_SYSTEM)
    }

    fn lock(&self) -> Result<Flock<File>, ActivationError> {
        let lock = self.state.file(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock)
            .map_err(|e| ActivationError::Lock { lock: lock.clone(), message: e.to_string() })?;
        Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| match errno {
            Errno::EWOULDBLOCK => ActivationError::Locked { lock },
            other => ActivationError::Lock { lock, message: other.desc().to_owned() },
        })
    }

    fn store(&self, rec: &super::ActivationRecord) -> Result<(), ActivationError> {
        record::store_record(self.state, rec)
    }

    /// Record, set the profile, then boot or switch.
    fn run_staged(&self, staged: Staged) -> Result<ActivationReport, ActivationError> {
        self.store(&staged.record(self.clock.now()))?;
        let result = self.set_profile(staged.target());
        match staged.profile_set(result) {
            ProfileSet::Failed(f) => self.finish(f),
            ProfileSet::Boot(b) => {
                let result = self.run_tool(CommandSpec::new(self.stc(b.target()), &[SwitchMode::Boot.arg()], self.switch_timeout()));
                match b.booted(result) {
                    Ok(f) => self.finish(f),
                    Err(r) => self.recover(r),
                }
            }
            ProfileSet::Switch(s) => {
                let argv = vec![self.stc(s.target()).display().to_string(), SwitchMode::Switch.arg().to_owned()];
                let description = format!("drover: switch to {}", s.target());
                if let Err(e) = self.systemd.start_transient_service(s.unit(), &description, &argv) {
                    return self.recover(s.start_failed(e));
                }
                self.finish_switch(s)
            }
        }
    }

    /// Waits for the switch unit (if systemd still knows it) and decides from the result and
    /// from what runs.
    fn finish_switch(&self, s: Switching) -> Result<ActivationReport, ActivationError> {
        let outcome = self.wait_unit(s.unit());
        match s.switched(outcome, self.running(), self.clock.now()) {
            Ok(a) => {
                self.store(&a.record(self.clock.now()))?;
                self.confirm_and_gate(a)
            }
            Err(r) => self.recover(r),
        }
    }

    /// Confirms until the deadline, then runs the gate.
    fn confirm_and_gate(&self, mut awaiting: AwaitingConfirm) -> Result<ActivationReport, ActivationError> {
        let boot_id = std::fs::read_to_string(BOOT_ID).map(|s| s.trim().to_owned()).unwrap_or_default();
        loop {
            awaiting = match awaiting.check(self.running(), self.clock.now()) {
                Ok(a) => a,
                Err(r) => return self.recover(r),
            };
            let answer = self.confirmer.confirm(&awaiting.request(&boot_id));
            match awaiting.answered(answer, self.clock.now(), self.settings.confirm_retry_secs) {
                super::machine::Answered::Confirmed(g) => {
                    self.store(&g.record(self.clock.now()))?;
                    return self.gate(g);
                }
                super::machine::Answered::Retry { state, wake_at } => {
                    let wait = wake_at.secs_since(self.clock.now()).max(0);
                    self.clock.sleep(Duration::from_secs(wait.unsigned_abs()));
                    awaiting = state;
                }
                super::machine::Answered::Recover(r) => return self.recover(r),
            }
        }
    }

    fn gate(&self, g: Gating) -> Result<ActivationReport, ActivationError> {
        let verdict = self.gate.check();
        match g.gated(verdict, self.running()) {
            Ok(f) => self.finish(f),
            Err(r) => self.recover(r),
        }
    }

    fn recover(&self, r: Recovery) -> Result<ActivationReport, ActivationError> {
        match r {
            Recovery::Finished(f) => self.finish(f),
            Recovery::RollBack(rb) => self.roll_back(rb),
        }
    }

    /// Back to the recorded previous closure: profile, then its `switch-to-configuration`
    /// (live in a transient unit, or `boot` when the target was only staged).
    fn roll_back(&self, rb: RollingBack) -> Result<ActivationReport, ActivationError> {
        let rb = match rb.mode() {
            SwitchMode::Switch => rb.with_unit(unit_name("rollback")),
            SwitchMode::Boot => rb,
        };
        self.store(&rb.record(self.clock.now()))?;
        let previous = rb.previous().to_owned();
        let profile = self.set_profile(&previous);
        // The previous system is applied even when the profile could not be set back: the
        // running system matters more than the boot default.
        let apply = match (rb.mode(), rb.unit()) {
            (SwitchMode::Switch, Some(unit)) => {
                let argv = vec![self.stc(&previous).display().to_string(), SwitchMode::Switch.arg().to_owned()];
                match self.systemd.start_transient_service(unit, &format!("drover: roll back to {previous}"), &argv) {
                    Err(source) => Err(StepError::RollbackUnit { source }),
                    Ok(()) => match self.wait_unit(unit) {
                        UnitOutcome::Succeeded | UnitOutcome::Unknown => Ok(()),
                        UnitOutcome::Failed(e) => Err(StepError::Unit(e)),
                    },
                }
            }
            _ => self.run_tool(CommandSpec::new(self.stc(&previous), &[SwitchMode::Boot.arg()], self.switch_timeout())),
        };
        let f = rb.rolled_back(profile, apply, self.running(), self.clock.now(), self.settings.quarantine_secs);
        self.finish(f)
    }

    /// Quarantines if the outcome says so, records the outcome, returns the report.
    fn finish(&self, f: Finished) -> Result<ActivationReport, ActivationError> {
        let now = self.clock.now();
        if let Some(q) = f.quarantine() {
            record::quarantine(self.state, q.clone(), now)?;
        }
        let rec = f.record(now);
        self.store(&rec)?;
        tracing::info!(intent = %rec.intent_id, target = %rec.target, phase = ?rec.phase, message = %rec.message, "activation finished");
        Ok(rec.report())
    }

    /// How `unit` ended: waited for while it runs; [`UnitOutcome::Unknown`] when systemd does
    /// not know it (never started, or garbage-collected after it finished).
    fn wait_unit(&self, unit: &str) -> UnitOutcome {
        let status = match self.systemd.unit_status(unit) {
            Ok(None) => return UnitOutcome::Unknown,
            Ok(Some(status)) if !status.is_running() => status,
            Ok(Some(_)) => match self.systemd.wait_finished(unit, self.switch_timeout()) {
                Ok(status) => status,
                Err(e) => return UnitOutcome::Failed(UnitFailure::Systemd(e)),
            },
            Err(e) => return UnitOutcome::Failed(UnitFailure::Systemd(e)),
        };
        if status.succeeded() {
            UnitOutcome::Succeeded
        } else {
            UnitOutcome::Failed(UnitFailure::Ended {
                unit: unit.to_owned(),
                active_state: status.active_state,
                sub_state: status.sub_state,
                result: status.result,
            })
        }
    }

    fn realise(&self, target: &str) -> Result<(), StepError> {
        let timeout = Duration::from_secs(self.settings.realise_timeout_secs);
        self.run_tool(CommandSpec::new(&self.settings.nix_store, &["--realise", target], timeout))
    }

    fn set_profile(&self, closure: &str) -> Result<(), StepError> {
        let profile = self.settings.system_profile().display().to_string();
        self.run_tool(CommandSpec::new(&self.settings.nix_env, &["-p", &profile, "--set", closure], Duration::from_secs(300)))
    }

    /// Runs a tool; `Err` carries the command, its exit and its stderr.
    fn run_tool(&self, cmd: CommandSpec) -> Result<(), StepError> {
        match self.runner.run(&cmd) {
            Ok(out) if out.success() => Ok(()),
            Ok(out) => {
                let ended = out.code.map_or_else(|| "a signal".to_owned(), |c| format!("exit {c}"));
                Err(StepError::Tool { command: cmd.display(), ended, stderr: out.stderr.trim().to_owned() })
            }
            Err(e) => Err(StepError::Exec(e)),
        }
    }

    /// `<closure>/bin/switch-to-configuration`, under the root.
    fn stc(&self, closure: &str) -> std::path::PathBuf {
        self.settings.rooted(closure).join("bin/switch-to-configuration")
    }

    fn switch_timeout(&self) -> Duration {
        Duration::from_secs(self.settings.switch_timeout_secs)
    }
}

/// A fresh transient unit name (`drover-switch-<uuid>.service`), unique so a failed unit
/// systemd keeps loaded never blocks the next one.
fn unit_name(kind: &str) -> String {
    format!("drover-{kind}-{}.service", uuid::Uuid::new_v4().simple())
}
