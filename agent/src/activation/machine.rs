//! The activation's decisions, as a state machine without I/O.
//!
//! Each state is a type; each transition consumes it and takes what the executor observed
//! (a command's result, the unit's outcome, the closure `/run/current-system` resolves to,
//! the coordinator's answer) and the time as a `now` argument, and returns the next state.
//! Nothing here reads a file, runs a command or looks at a clock, so every rule — when to
//! roll back, when to quarantine, when a missed confirmation is missed — is tested by plain
//! function calls, and the executor ([`super::executor`]) cannot skip a step: it can only
//! call the transitions the current type offers.
//!
//! ```text
//! Requested ─begin→ Finished (no backend, quarantined, nothing to roll back to)
//!     │       └────→ AwaitingConfirm (target already running)
//!     └→ Realising ─realised→ Finished(Failed) | Realised ─stage→ Staged
//! Staged ─profile_set→ Finished(Failed) | Switching | Booting
//! Switching ─switched→ AwaitingConfirm | Recovery
//! Booting ─booted→ Finished(Deferred) | Recovery
//! AwaitingConfirm ─check→ AwaitingConfirm | Recovery ; ─answered→ Gating | retry | Recovery
//! Gating ─gated→ Finished(Confirmed) | Recovery
//! Recovery = RollingBack ─rolled_back→ Finished(RolledBack or Failed) | Finished
//! ```
//!
//! Every non-terminal state can write itself as an [`ActivationRecord`]; [`Pending`] turns a
//! record back into the state it was written from, which is how a killed agent resumes.

// Transitions return the next state by value, `Result<Next, Recovery>` where the error side is
// a state too (a few hundred bytes, moved once per transition, never on a hot path): boxing it
// would only obscure the types.
#![allow(clippy::result_large_err)]

use drover_proto::intent::Intent;
use drover_proto::names::RolloutId;
use drover_proto::report::{ActivationPhase, ConfirmRequest, ReportEvent};
use drover_proto::time::Time;

use super::record::{ActivationRecord, QuarantineEntry, RollbackPlan, Step, SwitchMode};
use super::{ConfirmAnswer, GateRefusal, SYSTEM_PROFILE, StepError, UnitFailure};

/// What is being activated (from a verified intent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The intent.
    pub intent_id: String,
    /// Its rollout.
    pub rollout_id: RolloutId,
    /// The target closure.
    pub target: String,
    /// Seconds to confirm in, counted from the end of the switch.
    pub confirm_window_secs: u64,
}

impl Job {
    /// The job an intent asks for.
    pub fn from_intent(intent: &Intent) -> Job {
        Job {
            intent_id: intent.intent_id.clone(),
            rollout_id: intent.rollout_id.clone(),
            target: intent.target_closure.clone(),
            confirm_window_secs: intent.confirm_window_secs,
        }
    }

    fn record(&self, previous: Option<&str>, step: Step, phase: ActivationPhase, now: Time) -> ActivationRecord {
        ActivationRecord {
            intent_id: self.intent_id.clone(),
            rollout_id: self.rollout_id.clone(),
            target: self.target.clone(),
            previous: previous.map(str::to_owned),
            confirm_window_secs: self.confirm_window_secs,
            step,
            phase,
            message: String::new(),
            unit: None,
            confirm_deadline: None,
            rollback: None,
            events: Vec::new(),
            retryable: false,
            updated_at: now,
        }
    }

    fn finish(self, previous: Option<String>, phase: ActivationPhase, message: String) -> Finished {
        Finished { job: self, previous, phase, message, events: Vec::new(), quarantine: None, retryable: false }
    }

    /// An end before anything was changed, worth trying again for the same intent (no
    /// backend yet, quarantine not expired yet, a substituter down).
    fn refuse(self, previous: Option<String>, phase: ActivationPhase, message: String) -> Finished {
        Finished { retryable: true, ..self.finish(previous, phase, message) }
    }
}

/// What the executor saw of the host before starting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// `<root>/nix/var/nix/profiles/system` exists.
    pub has_profile: bool,
    /// The closure `/run/current-system` resolves to.
    pub running: Option<String>,
    /// The closure the system profile resolves to.
    pub profile: Option<String>,
    /// The quarantine entry refusing the target now, if any.
    pub quarantined: Option<QuarantineEntry>,
}

/// A field of `activation.json` the recorded step needs and the record lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step needs `{0}`")]
pub struct MissingField(pub &'static str);

/// How a switch's transient unit ended.
#[derive(Debug)]
pub enum UnitOutcome {
    /// Exited 0.
    Succeeded,
    /// Failed, timed out, or could not be watched; why.
    Failed(UnitFailure),
    /// systemd no longer knows the unit (a finished transient unit is garbage-collected):
    /// only the running system tells what happened.
    Unknown,
}

/// The end of an activation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    job: Job,
    previous: Option<String>,
    phase: ActivationPhase,
    message: String,
    events: Vec<ReportEvent>,
    quarantine: Option<QuarantineEntry>,
    retryable: bool,
}

impl Finished {
    /// The phase reached.
    pub fn phase(&self) -> ActivationPhase {
        self.phase
    }

    /// The closure to quarantine, if any.
    pub fn quarantine(&self) -> Option<&QuarantineEntry> {
        self.quarantine.as_ref()
    }

    /// The record of the outcome ([`Step::Done`]).
    pub fn record(&self, now: Time) -> ActivationRecord {
        let mut r = self.job.record(self.previous.as_deref(), Step::Done, self.phase, now);
        r.message = self.message.clone();
        r.events = self.events.clone();
        r.retryable = self.retryable;
        r
    }
}

/// Why an intent is refused on a host without the NixOS system profile (Ubuntu and every
/// other distribution the bootstrap script installs the agent on): the message the
/// coordinator records for the host's rollout.
pub fn no_backend_reason() -> String {
    format!("no activation backend: this host is not NixOS (no {SYSTEM_PROFILE}); the intent was refused and nothing was changed")
}

/// The first state: an intent to activate.
#[derive(Debug, Clone)]
pub struct Requested {
    job: Job,
}

/// Where [`Requested::begin`] leads.
#[derive(Debug)]
pub enum Begin {
    /// Nothing to do (no backend, quarantined, no previous closure to record).
    Finished(Finished),
    /// Realise the target.
    Realise(Realising),
    /// The target already runs: confirm it (there is nothing to roll back to).
    AlreadyRunning(AwaitingConfirm),
}

impl Requested {
    /// An activation of `job`.
    pub fn new(job: Job) -> Self {
        Requested { job }
    }

    /// Decides from the host's state whether and how to start.
    pub fn begin(self, facts: HostFacts, now: Time) -> Begin {
        let job = self.job;
        if !facts.has_profile {
            let rollout_id = job.rollout_id.to_string();
            let mut f = job.refuse(None, ActivationPhase::NoBackend, no_backend_reason());
            f.events.push(ReportEvent::NoActivationBackend { rollout_id });
            return Begin::Finished(f);
        }
        if let Some(q) = facts.quarantined {
            let message = format!("refused: {} is quarantined until {}: {}", job.target, q.until, q.reason);
            return Begin::Finished(job.refuse(facts.running, ActivationPhase::Failed, message));
        }
        // The rollback target is what runs; a host that runs nothing (first boot of a
        // staged system) returns to what the profile points at.
        let Some(previous) = facts.running.or(facts.profile) else {
            let message = "refused: the running system could not be resolved to a store path, so there would be nothing to roll back to";
            return Begin::Finished(job.refuse(None, ActivationPhase::Failed, message.into()));
        };
        if previous == job.target {
            let deadline = now.plus_secs(job.confirm_window_secs);
            return Begin::AlreadyRunning(AwaitingConfirm { job, previous, deadline });
        }
        Begin::Realise(Realising { job, previous })
    }
}

/// Realising the target (`nix-store --realise`).
#[derive(Debug)]
pub struct Realising {
    job: Job,
    previous: String,
}

impl Realising {
    /// The target.
    pub fn target(&self) -> &str {
        &self.job.target
    }

    /// The realisation's result; a failure ends the activation with nothing touched.
    pub fn realised(self, result: Result<(), StepError>) -> Result<Realised, Finished> {
        match result {
            Ok(()) => Ok(Realised { job: self.job, previous: self.previous }),
            Err(e) => Err(self.job.refuse(Some(self.previous), ActivationPhase::Failed, format!("realise failed: {e}"))),
        }
    }
}

/// The target is in the store; the inhibitors decide between switch and boot.
#[derive(Debug)]
pub struct Realised {
    job: Job,
    previous: String,
}

impl Realised {
    /// The recorded previous closure (what the inhibitors compare against).
    pub fn previous(&self) -> &str {
        &self.previous
    }

    /// The target.
    pub fn target(&self) -> &str {
        &self.job.target
    }

    /// `inhibitors`: the changed switch inhibitors (empty: switch live, in `switch_unit`).
    pub fn stage(self, inhibitors: Vec<String>, switch_unit: String) -> Staged {
        let (mode, unit) = if inhibitors.is_empty() { (SwitchMode::Switch, Some(switch_unit)) } else { (SwitchMode::Boot, None) };
        Staged { job: self.job, previous: self.previous, mode, unit, inhibitors }
    }
}

/// Decided; the record is written before the profile is set.
#[derive(Debug)]
pub struct Staged {
    job: Job,
    previous: String,
    mode: SwitchMode,
    unit: Option<String>,
    inhibitors: Vec<String>,
}

/// Where [`Staged::profile_set`] leads.
#[derive(Debug)]
pub enum ProfileSet {
    /// Run the switch.
    Switch(Switching),
    /// Stage for the next boot.
    Boot(Booting),
    /// `nix-env --set` failed; the profile is unchanged.
    Failed(Finished),
}

impl Staged {
    /// Live switch or boot.
    pub fn mode(&self) -> SwitchMode {
        self.mode
    }

    /// The target.
    pub fn target(&self) -> &str {
        &self.job.target
    }

    /// The record to write before setting the profile.
    pub fn record(&self, now: Time) -> ActivationRecord {
        let step = match self.mode {
            SwitchMode::Switch => Step::Switching,
            SwitchMode::Boot => Step::Booting,
        };
        let mut r = self.job.record(Some(&self.previous), step, ActivationPhase::Activating, now);
        r.unit.clone_from(&self.unit);
        if !self.inhibitors.is_empty() {
            r.message = format!("switch inhibited ({})", self.inhibitors.join("; "));
        }
        r
    }

    /// The result of `nix-env --set <target>`.
    pub fn profile_set(self, result: Result<(), StepError>) -> ProfileSet {
        if let Err(e) = result {
            return ProfileSet::Failed(self.job.finish(
                Some(self.previous),
                ActivationPhase::Failed,
                format!("setting the profile failed: {e}"),
            ));
        }
        match (self.mode, self.unit) {
            (SwitchMode::Switch, Some(unit)) => ProfileSet::Switch(Switching { job: self.job, previous: self.previous, unit }),
            _ => ProfileSet::Boot(Booting { job: self.job, previous: self.previous, inhibitors: self.inhibitors }),
        }
    }
}

/// `switch-to-configuration switch` runs (or ran) in a transient unit.
#[derive(Debug)]
pub struct Switching {
    job: Job,
    previous: String,
    unit: String,
}

impl Switching {
    /// The transient unit.
    pub fn unit(&self) -> &str {
        &self.unit
    }

    /// The target.
    pub fn target(&self) -> &str {
        &self.job.target
    }

    /// The switch's end: success needs the unit not failed *and* the target running.
    pub fn switched(self, outcome: UnitOutcome, running: Option<String>, now: Time) -> Result<AwaitingConfirm, Recovery> {
        let runs_target = running.as_deref() == Some(self.job.target.as_str());
        match outcome {
            UnitOutcome::Failed(why) => Err(recover(self.job, self.previous, format!("switch failed: {why}"), SwitchMode::Switch, true)),
            UnitOutcome::Succeeded | UnitOutcome::Unknown if runs_target => {
                let deadline = now.plus_secs(self.job.confirm_window_secs);
                Ok(AwaitingConfirm { job: self.job, previous: self.previous, deadline })
            }
            UnitOutcome::Succeeded => {
                let why = format!("switch finished but {} runs {}", super::CURRENT_SYSTEM, running.as_deref().unwrap_or("nothing"));
                Err(recover(self.job, self.previous, why, SwitchMode::Switch, true))
            }
            // The agent died before it could see the switch end, and the target does not run:
            // the switch never happened or did not finish. Not the closure's fault.
            UnitOutcome::Unknown => Err(recover(self.job, self.previous, "switch did not complete".into(), SwitchMode::Switch, false)),
        }
    }

    /// The transient unit could not be started.
    pub fn start_failed(self, why: crate::systemd::SystemdError) -> Recovery {
        recover(self.job, self.previous, format!("cannot start the switch unit: {why}"), SwitchMode::Switch, false)
    }
}

/// `switch-to-configuration boot` runs.
#[derive(Debug)]
pub struct Booting {
    job: Job,
    previous: String,
    inhibitors: Vec<String>,
}

impl Booting {
    /// The target.
    pub fn target(&self) -> &str {
        &self.job.target
    }

    /// The result of `switch-to-configuration boot`.
    pub fn booted(self, result: Result<(), StepError>) -> Result<Finished, Recovery> {
        match result {
            Ok(()) => {
                let message = format!("staged for the next boot; switch inhibited ({})", self.inhibitors.join("; "));
                Ok(self.job.finish(Some(self.previous), ActivationPhase::Deferred, message))
            }
            Err(e) => Err(recover(self.job, self.previous, format!("boot staging failed: {e}"), SwitchMode::Boot, true)),
        }
    }
}

/// Switched; the coordinator must confirm by the deadline.
#[derive(Debug)]
pub struct AwaitingConfirm {
    job: Job,
    previous: String,
    deadline: Time,
}

/// Where [`AwaitingConfirm::answered`] leads.
#[derive(Debug)]
pub enum Answered {
    /// 204: on to the health gate.
    Confirmed(Gating),
    /// Unreachable within the window: ask again at `wake_at`.
    Retry {
        /// The same state.
        state: AwaitingConfirm,
        /// When to ask again (never after the deadline).
        wake_at: Time,
    },
    /// 410 or missed: roll back.
    Recover(Recovery),
}

impl AwaitingConfirm {
    /// The confirm deadline.
    pub fn deadline(&self) -> Time {
        self.deadline
    }

    /// The record while waiting.
    pub fn record(&self, now: Time) -> ActivationRecord {
        let mut r = self.job.record(Some(&self.previous), Step::AwaitingConfirm, ActivationPhase::AwaitingConfirm, now);
        r.confirm_deadline = Some(self.deadline);
        r
    }

    /// The confirmation to send.
    pub fn request(&self, boot_id: &str) -> ConfirmRequest {
        ConfirmRequest {
            intent_id: self.job.intent_id.clone(),
            rollout_id: self.job.rollout_id.clone(),
            closure: self.job.target.clone(),
            boot_id: boot_id.to_owned(),
        }
    }

    /// Before each attempt: the target must still run, and the window must be open.
    pub fn check(self, running: Option<String>, now: Time) -> Result<AwaitingConfirm, Recovery> {
        if running.as_deref() != Some(self.job.target.as_str()) {
            let why = format!("{} no longer runs the target (runs {})", super::CURRENT_SYSTEM, running.as_deref().unwrap_or("nothing"));
            return Err(recover(self.job, self.previous, why, SwitchMode::Switch, false));
        }
        if now >= self.deadline {
            let why = format!("confirmation missed: coordinator unreachable until the window ended at {}", self.deadline);
            return Err(recover(self.job, self.previous, why, SwitchMode::Switch, true));
        }
        Ok(self)
    }

    /// The coordinator's answer at `now`; an unreachable coordinator is asked again every
    /// `retry_secs` (at least 1), the last time no later than the deadline.
    pub fn answered(self, answer: ConfirmAnswer, now: Time, retry_secs: u64) -> Answered {
        match answer {
            ConfirmAnswer::Confirmed => Answered::Confirmed(Gating { job: self.job, previous: self.previous }),
            ConfirmAnswer::Gone => Answered::Recover(recover(
                self.job,
                self.previous,
                "the coordinator answered 410: the intent is gone".into(),
                SwitchMode::Switch,
                false,
            )),
            ConfirmAnswer::Unreachable(why) if now >= self.deadline => {
                let why = format!("confirmation missed: coordinator unreachable until the window ended at {} ({why})", self.deadline);
                Answered::Recover(recover(self.job, self.previous, why, SwitchMode::Switch, true))
            }
            ConfirmAnswer::Unreachable(_) => {
                let wake_at = now.plus_secs(retry_secs.max(1)).min(self.deadline);
                Answered::Retry { state: self, wake_at }
            }
        }
    }
}

/// Confirmed; the health gate decides.
#[derive(Debug)]
pub struct Gating {
    job: Job,
    previous: String,
}

impl Gating {
    /// The record while gating.
    pub fn record(&self, now: Time) -> ActivationRecord {
        self.job.record(Some(&self.previous), Step::Gating, ActivationPhase::AwaitingConfirm, now)
    }

    /// The gate's verdict, given while `running` runs (the target, unless something switched
    /// away from it meanwhile).
    pub fn gated(self, result: Result<(), GateRefusal>, running: Option<String>) -> Result<Finished, Recovery> {
        if running.as_deref() != Some(self.job.target.as_str()) {
            let why = format!("{} no longer runs the target (runs {})", super::CURRENT_SYSTEM, running.as_deref().unwrap_or("nothing"));
            return Err(recover(self.job, self.previous, why, SwitchMode::Switch, false));
        }
        match result {
            Ok(()) => Ok(self.job.finish(Some(self.previous), ActivationPhase::Confirmed, "confirmed; health gate passed".into())),
            Err(e) => Err(recover(self.job, self.previous, format!("health gate failed: {e}"), SwitchMode::Switch, true)),
        }
    }
}

/// After a failure: roll back, or end when there is nothing to roll back to.
#[derive(Debug)]
pub enum Recovery {
    /// Return to the recorded previous closure.
    RollBack(RollingBack),
    /// The target was already running before this intent: nothing to return to.
    Finished(Finished),
}

fn recover(job: Job, previous: String, reason: String, mode: SwitchMode, quarantine: bool) -> Recovery {
    if previous == job.target {
        let message = format!("{reason}; the target already ran before this intent, nothing to roll back to");
        return Recovery::Finished(job.finish(Some(previous), ActivationPhase::Failed, message));
    }
    Recovery::RollBack(RollingBack { job, previous, plan: RollbackPlan { reason, mode, quarantine }, unit: None })
}

/// Returning to the recorded previous closure.
#[derive(Debug)]
pub struct RollingBack {
    job: Job,
    previous: String,
    plan: RollbackPlan,
    unit: Option<String>,
}

impl RollingBack {
    /// The closure to return to.
    pub fn previous(&self) -> &str {
        &self.previous
    }

    /// Live or boot entry only.
    pub fn mode(&self) -> SwitchMode {
        self.plan.mode
    }

    /// The transient unit of a live rollback, once chosen.
    pub fn unit(&self) -> Option<&str> {
        self.unit.as_deref()
    }

    /// Names the transient unit of a live rollback (recorded before it starts).
    pub fn with_unit(self, unit: String) -> RollingBack {
        RollingBack { unit: Some(unit), ..self }
    }

    /// The record while rolling back.
    pub fn record(&self, now: Time) -> ActivationRecord {
        let mut r = self.job.record(Some(&self.previous), Step::RollingBack, ActivationPhase::Activating, now);
        r.rollback = Some(self.plan.clone());
        r.unit.clone_from(&self.unit);
        r.message = format!("rolling back to {}: {}", self.previous, self.plan.reason);
        r
    }

    /// The rollback's end: `profile` is `nix-env --set <previous>`, `apply` the previous
    /// closure's `switch-to-configuration`, `running` what runs afterwards (a live rollback
    /// must leave the previous closure running). The target is quarantined for
    /// `quarantine_secs` if the plan says so, whether or not the rollback worked.
    pub fn rolled_back(
        self,
        profile: Result<(), StepError>,
        apply: Result<(), StepError>,
        running: Option<String>,
        now: Time,
        quarantine_secs: u64,
    ) -> Finished {
        let RollingBack { job, previous, plan, .. } = self;
        let quarantine = plan.quarantine.then(|| QuarantineEntry {
            target: job.target.clone(),
            until: now.plus_secs(quarantine_secs),
            reason: plan.reason.clone(),
        });
        let failure = match (profile, apply) {
            (Err(e), _) => Some(format!("setting the profile back failed: {e}")),
            (Ok(()), Err(e)) => Some(format!("switch-to-configuration {} of the previous closure failed: {e}", plan.mode.arg())),
            (Ok(()), Ok(())) if plan.mode == SwitchMode::Switch && running.as_deref() != Some(previous.as_str()) => {
                Some(format!("{} runs {} afterwards", super::CURRENT_SYSTEM, running.as_deref().unwrap_or("nothing")))
            }
            (Ok(()), Ok(())) => None,
        };
        let rollout_id = job.rollout_id.to_string();
        let mut f = match failure {
            Some(failure) => {
                let message = format!("rollback to {previous} failed ({failure}) after: {}", plan.reason);
                job.finish(Some(previous), ActivationPhase::Failed, message)
            }
            None => {
                let message = format!("rolled back to {previous}: {}", plan.reason);
                let mut f = job.finish(Some(previous.clone()), ActivationPhase::RolledBack, message);
                f.events.push(ReportEvent::RolledBack { rollout_id, restored_closure: previous, reason: plan.reason });
                f
            }
        };
        f.quarantine = quarantine;
        f
    }
}

/// A record turned back into the state it was written from.
#[derive(Debug)]
pub enum Pending {
    /// The profile may or may not be set; redo it and `boot`.
    Booting(Staged),
    /// The switch unit may be running, finished, or never started.
    Switching(Switching),
    /// Confirming.
    AwaitingConfirm(AwaitingConfirm),
    /// Gating.
    Gating(Gating),
    /// Rolling back.
    RollingBack(RollingBack),
    /// Finished: nothing to do.
    Done(ActivationRecord),
}

impl Pending {
    /// The state `record` was written from; `Err` names a field the step needs and lacks.
    pub fn from_record(record: ActivationRecord) -> Result<Pending, MissingField> {
        if record.step == Step::Done {
            return Ok(Pending::Done(record));
        }
        let job = Job {
            intent_id: record.intent_id,
            rollout_id: record.rollout_id,
            target: record.target,
            confirm_window_secs: record.confirm_window_secs,
        };
        let previous = record.previous.ok_or(MissingField("previous"))?;
        Ok(match record.step {
            Step::Booting => {
                let inhibitors =
                    record.message.strip_prefix("switch inhibited (").and_then(|m| m.strip_suffix(')')).unwrap_or(&record.message);
                Pending::Booting(Staged { job, previous, mode: SwitchMode::Boot, unit: None, inhibitors: vec![inhibitors.to_owned()] })
            }
            Step::Switching => Pending::Switching(Switching { job, previous, unit: record.unit.ok_or(MissingField("unit"))? }),
            Step::AwaitingConfirm => Pending::AwaitingConfirm(AwaitingConfirm {
                job,
                previous,
                deadline: record.confirm_deadline.ok_or(MissingField("confirmDeadline"))?,
            }),
            Step::Gating => Pending::Gating(Gating { job, previous }),
            Step::RollingBack => Pending::RollingBack(RollingBack {
                job,
                previous,
                plan: record.rollback.ok_or(MissingField("rollback"))?,
                unit: record.unit,
            }),
            Step::Done => unreachable!("handled above"),
        })
    }
}
