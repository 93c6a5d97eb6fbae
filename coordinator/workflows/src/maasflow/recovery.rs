//! The operator actions on an onboarding (§4.9, §4.15), pure: one action, the onboarding as
//! stored, and what the store shows of its host in; its new state and read model out, or a
//! refusal naming the states the action is allowed from.
//!
//! The names and their meaning are the jobs' (`retry_stage`, `resume`, `rerun`,
//! `restart_clean`, `cancel`, `adopt_observed_state`, `mark_manual_intervention_required`):
//!
//! - `retry_stage`: the failed stage again, attempt + 1, its clock restarted.
//! - `resume`: continue from the current stage with a fresh clock; every stage reads MAAS
//!   before acting, so what moved meanwhile is taken as it is.
//! - `rerun`: from the first stage; what is already true is found, not redone (§4.9: the
//!   primary recovery path of onboarding).
//! - `restart_clean`: forget the claimed machine and progress; a machine this onboarding
//!   deployed (or left deploying) is released back to Ready first (`compensating`).
//! - `cancel`: stop; a deployment in flight is released first.
//! - `adopt_observed_state`: accept what is observed — a host that enrolled late completes
//!   the onboarding (`reconciled`); an operator-named machine ends an ambiguous discovery.
//! - `mark_manual_intervention_required`: freeze automation.

use drover_proto::states::JobState;
use drover_proto::time::Time;

use super::onboard::{EventStatus, OnboardProgress, PendingCompensation};
use super::taxonomy::{Compensation, MaasStage};
use crate::jobs::OperatorAction;

/// What the action needs to know beyond the onboarding itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionContext {
    /// The onboarding's host is active (its agent enrolled).
    pub host_active: bool,
    /// For `adopt_observed_state`: the MAAS machine an operator says is the one.
    pub adopt_system_id: Option<String>,
}

/// An accepted action's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The state after.
    pub state: JobState,
    /// The read model after.
    pub progress: OnboardProgress,
    /// One line on what happens now.
    pub message: String,
}

/// A refused action: nothing changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    /// Why.
    pub message: String,
}

const FAILED: [JobState; 2] = [JobState::FailedRetryable, JobState::FailedManualIntervention];

fn allowed(action: OperatorAction, state: JobState, from: &[JobState]) -> Result<(), Refused> {
    if from.contains(&state) {
        return Ok(());
    }
    let names: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    Err(Refused { message: format!("{} is allowed from {}; the onboarding is {state}", action.as_str(), names.join(", ")) })
}

/// Decides an operator action. `now` stamps the history.
pub fn act(action: OperatorAction, state: JobState, p: &OnboardProgress, ctx: &ActionContext, now: Time) -> Result<Accepted, Refused> {
    let mut p = p.clone();
    let deploying = p.system_id.is_some() && p.stage.compensation() == Compensation::ReleaseToReady;
    let out = |state, p, message: &str| Ok(Accepted { state, progress: p, message: message.to_owned() });
    match action {
        OperatorAction::RetryStage => {
            allowed(action, state, &FAILED)?;
            p.clear_failure();
            p.attempt += 1;
            p.stage_started_at = Some(now);
            p.record(EventStatus::Started, now, "retry_stage by an operator");
            out(JobState::Running, p, "the stage runs again")
        }
        OperatorAction::Resume => {
            allowed(action, state, &FAILED)?;
            p.clear_failure();
            p.stage_started_at = Some(now);
            p.record(EventStatus::Started, now, "resumed by an operator");
            out(JobState::Running, p, "resumes from the current stage after reading MAAS again")
        }
        OperatorAction::Rerun => {
            allowed(action, state, &[JobState::FailedRetryable, JobState::FailedManualIntervention, JobState::Cancelled])?;
            if state == JobState::Cancelled {
                // Cancelled is terminal in the job state machine: a fresh onboarding is the
                // way back, which keeps the cancelled record as it was.
                return Err(Refused { message: "a cancelled onboarding cannot be rerun; start a new one".into() });
            }
            p.clear_failure();
            p.adopt_system_id = None;
            p.deploy_retries = 0;
            p.enter(MaasStage::LoadSite, now);
            out(JobState::Running, p, "reruns from the first stage; what is already done is found, not repeated")
        }
        OperatorAction::RestartClean => {
            allowed(action, state, &FAILED)?;
            p.clear_failure();
            // Always through `compensating` (the job state machine's way back to pending):
            // the executor releases a machine this onboarding deployed, then starts over.
            p.compensation = Some(PendingCompensation::ThenRestart);
            p.record(EventStatus::Started, now, "restart_clean by an operator: releasing what this run deployed, then starting over");
            out(JobState::Compensating, p, "releases a deployment if there is one, then starts over from the first stage")
        }
        OperatorAction::Cancel => {
            allowed(action, state, &[JobState::Pending, JobState::Running, JobState::FailedRetryable, JobState::FailedManualIntervention])?;
            if deploying && state == JobState::Running {
                p.compensation = Some(PendingCompensation::ThenCancel);
                p.record(EventStatus::Started, now, "cancel: releasing the deployment in flight first");
                return out(JobState::Compensating, p, "releases the machine, then ends cancelled");
            }
            p.record(EventStatus::Skipped, now, "cancelled by an operator");
            out(JobState::Cancelled, p, "cancelled")
        }
        OperatorAction::AdoptObservedState => {
            allowed(action, state, &FAILED)?;
            if ctx.host_active && p.host_id.is_some() {
                p.clear_failure();
                p.record(EventStatus::Succeeded, now, "adopted: the host's agent enrolled (a late success)");
                p.message = "reconciled: the node enrolled".into();
                return out(JobState::Reconciled, p, "reconciled with the observed state");
            }
            match &ctx.adopt_system_id {
                Some(id) if p.stage == MaasStage::CreateOrFind => {
                    p.clear_failure();
                    p.adopt_system_id = Some(id.clone());
                    p.stage_started_at = Some(now);
                    p.record(EventStatus::Started, now, format!("adopting machine {id} as an operator chose"));
                    out(JobState::Running, p, "claims the named machine and continues")
                }
                Some(_) => Err(Refused { message: "a machine can be adopted only while discovery (create_or_find) is stopped".into() }),
                None => Err(Refused {
                    message: "nothing to adopt: the host has not enrolled, and no systemId was given for a stopped discovery".into(),
                }),
            }
        }
        OperatorAction::MarkManualInterventionRequired => {
            allowed(action, state, &[JobState::Pending, JobState::Running, JobState::FailedRetryable])?;
            p.recommended_action = Some("inspect the node and MAAS, then retry, resume, rerun or restart clean".into());
            p.record(EventStatus::Failed, now, "marked for manual intervention by an operator");
            out(JobState::FailedManualIntervention, p, "automation is frozen until an operator acts")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maasflow::taxonomy::MaasFailureClass;

    fn t() -> Time {
        Time::from_unix(1_800_000_000).expect("time")
    }

    fn failed_at(stage: MaasStage) -> OnboardProgress {
        let mut p = OnboardProgress::default();
        p.enter(stage, t());
        p.system_id = Some("abc123".into());
        p.failure_class = Some(MaasFailureClass::StateAmbiguity);
        p
    }

    #[test]
    fn retry_needs_a_failure_and_counts_the_attempt() {
        let p = failed_at(MaasStage::ConfigureStorage);
        let a = act(OperatorAction::RetryStage, JobState::FailedManualIntervention, &p, &ActionContext::default(), t()).expect("ok");
        assert_eq!((a.state, a.progress.attempt, a.progress.failure_class), (JobState::Running, 2, None));
        let refused = act(OperatorAction::RetryStage, JobState::Running, &p, &ActionContext::default(), t()).expect_err("refused");
        assert!(refused.message.contains("failed_retryable"), "{refused}");
    }

    #[test]
    fn rerun_starts_from_the_top_keeping_what_it_knows() {
        let p = failed_at(MaasStage::WaitAgentEnrollment);
        let a = act(OperatorAction::Rerun, JobState::FailedRetryable, &p, &ActionContext::default(), t()).expect("ok");
        assert_eq!(a.progress.stage, MaasStage::LoadSite);
        assert_eq!(a.progress.system_id.as_deref(), Some("abc123"));
    }

    #[test]
    fn restart_clean_releases_a_deployment_first() {
        let p = failed_at(MaasStage::WaitDeployed);
        let a = act(OperatorAction::RestartClean, JobState::FailedManualIntervention, &p, &ActionContext::default(), t()).expect("ok");
        assert_eq!(a.state, JobState::Compensating);
        assert_eq!(a.progress.compensation, Some(PendingCompensation::ThenRestart));
    }

    #[test]
    fn adopt_reconciles_a_late_enrollment_or_claims_a_named_machine() {
        let mut p = failed_at(MaasStage::WaitAgentEnrollment);
        p.host_id = Some(uuid::Uuid::nil());
        let ctx = ActionContext { host_active: true, adopt_system_id: None };
        assert_eq!(
            act(OperatorAction::AdoptObservedState, JobState::FailedRetryable, &p, &ctx, t()).expect("ok").state,
            JobState::Reconciled
        );
        let p = failed_at(MaasStage::CreateOrFind);
        let ctx = ActionContext { host_active: false, adopt_system_id: Some("xyz789".into()) };
        let a = act(OperatorAction::AdoptObservedState, JobState::FailedManualIntervention, &p, &ctx, t()).expect("ok");
        assert_eq!(a.progress.adopt_system_id.as_deref(), Some("xyz789"));
        assert!(act(OperatorAction::AdoptObservedState, JobState::FailedManualIntervention, &p, &ActionContext::default(), t()).is_err());
    }

    #[test]
    fn cancel_of_a_deploy_in_flight_releases_it() {
        let p = failed_at(MaasStage::WaitDeployed);
        assert_eq!(
            act(OperatorAction::Cancel, JobState::Running, &p, &ActionContext::default(), t()).expect("ok").state,
            JobState::Compensating
        );
        assert_eq!(
            act(OperatorAction::Cancel, JobState::Pending, &p, &ActionContext::default(), t()).expect("ok").state,
            JobState::Cancelled
        );
        assert!(act(OperatorAction::Cancel, JobState::Completed, &p, &ActionContext::default(), t()).is_err());
    }
}
