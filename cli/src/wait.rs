//! `--wait [--timeout SECS]`: block until what a verb started is finished, printing each
//! change once, and exit by how it ended.
//!
//! One bounded polling loop ([`poll_until`]) serves both kinds of thing waited for:
//! - jobs ([`wait_jobs`]: `decommission`, `job ACTION`): `GET /v1/jobs/{id}` until the job is
//!   completed or reconciled (exit 0), or failed or cancelled (exit 2, [`codes::FAILED`];
//!   after `job cancel --wait`, cancelled is the success);
//! - rollouts ([`wait_rollouts`]: `release publish`): the ids the publish answer named, which
//!   open a moment after publishing, so a rollout not yet listed by `GET /v1/rollouts` is
//!   waited for rather than taken as done; Converged is exit 0, Halted, Reverted, Failed,
//!   Cancelled, Superseded or Pruned exit 2.
//!
//! With several items, the first to fail ends the wait (the rest may never move: a halted
//! rollout holds back the channels behind it); success needs every one.
//!
//! A timeout is exit 75 (EX_TEMPFAIL), as `--watch`'s; Ctrl-C ends the wait with 75 too,
//! since nothing was seen to finish.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use drover_planner::observed::PlanInputResponse;
use drover_proto::api::Page;
use drover_proto::api::jobs::{JobDetail, JobJson};
use drover_proto::api::rollouts::{RolloutStatus, RolloutView};
use drover_proto::states::JobState;

use crate::client::Session;
use crate::exit::{CliError, codes};
use crate::output::clean;

/// Time between two reads of what is waited for.
const INTERVAL: Duration = Duration::from_millis(500);

/// The `--wait` flags a verb flattens in.
#[derive(Args, Debug, Clone, Copy)]
pub struct WaitArgs {
    /// Wait until what this started is finished: exit 0 on success, 2 when it failed, was
    /// halted or cancelled, 75 on timeout.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits at most, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600, requires = "wait")]
    pub timeout: u64,
}

impl WaitArgs {
    /// The bound.
    pub fn limit(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }
}

/// Where the progress lines go: stdout, or stderr when stdout carries JSON (`-o json`) so
/// that it stays one document.
pub fn progress_sink(json: bool) -> Box<dyn Write> {
    if json { Box::new(std::io::stderr()) } else { Box::new(std::io::stdout()) }
}

/// How one awaited thing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Still moving.
    Open,
    /// Finished well.
    Succeeded,
    /// Finished badly, or stopped until a person acts.
    Failed,
}

/// A job state's standing: failed_retryable and failed_manual_intervention wait for an
/// operator, so nothing more happens on its own and the wait ends there.
pub fn job_standing(state: JobState) -> Standing {
    match state {
        JobState::Completed | JobState::Reconciled => Standing::Succeeded,
        JobState::FailedRetryable | JobState::FailedManualIntervention | JobState::Cancelled => Standing::Failed,
        JobState::Pending | JobState::Running | JobState::Compensating => Standing::Open,
    }
}

/// A rollout state's standing: Halted counts as failed because it stays halted until an
/// operator resumes it, which a CI gate must not wait out.
pub fn rollout_standing(state: &str) -> Standing {
    match state {
        "Converged" => Standing::Succeeded,
        "Halted" | "Reverted" | "Failed" | "Cancelled" | "Superseded" | "Pruned" => Standing::Failed,
        _ => Standing::Open,
    }
}

/// The combined outcome of every awaited item: failed as soon as one has failed (a halted
/// rollout holds back the channels behind it, so waiting for them would only time out),
/// succeeded once all have, `None` while any is still open.
pub fn outcome(standings: &[Standing]) -> Option<Standing> {
    if standings.contains(&Standing::Failed) {
        Some(Standing::Failed)
    } else if standings.contains(&Standing::Open) {
        None
    } else {
        Some(Standing::Succeeded)
    }
}

/// The rollouts a release opens: each channel's current rollout in its `timestamp.json`
/// (65 when that does not decode). Its revertable rollouts were opened by earlier releases.
pub fn current_rollouts(timestamp: &[u8]) -> Result<Vec<String>, CliError> {
    let doc: drover_proto::artifacts::TimestampDoc =
        serde_json::from_slice(timestamp).map_err(|e| CliError::data(format!("{}: {e}", drover_proto::release::TIMESTAMP)))?;
    let mut out: Vec<String> = Vec::new();
    for channel in doc.channels.values() {
        let id = channel.rollout_id.to_string();
        if !out.contains(&id) {
            out.push(id);
        }
    }
    Ok(out)
}

/// The rollouts release `version` opens, from the coordinator's latest release
/// (`GET /v1/plan-input`). The coordinator serves only its latest release's files, so a
/// release that is not the latest is refused (65), naming the latest.
pub fn release_rollouts(session: &Session, version: u64) -> Result<Vec<String>, CliError> {
    let input: PlanInputResponse = session.get("/v1/plan-input")?;
    if input.release_version != version {
        let latest = input.release_version;
        return Err(CliError::data(format!("release {version} is not the coordinator's latest release (latest: {latest})")));
    }
    let timestamp = input.release.get(drover_proto::release::TIMESTAMP).map(String::as_str).unwrap_or_default();
    current_rollouts(timestamp.as_bytes())
}

/// Remembers the last line printed per item, so each change is printed once.
#[derive(Default)]
pub struct Changes(BTreeMap<String, String>);

impl Changes {
    /// `Some(line)` when `line` differs from the last one for `key`.
    pub fn note(&mut self, key: &str, line: String) -> Option<String> {
        if self.0.get(key) == Some(&line) {
            return None;
        }
        self.0.insert(key.to_owned(), line.clone());
        Some(line)
    }
}

/// The line a job's progress prints: `JOB_ID STATE stage STAGE (N/M)`.
pub fn job_line(job: &JobJson) -> String {
    let stage = match (job.stage.as_str(), job.stage_index) {
        ("", _) => String::new(),
        (s, i) if i < job.stages.len() => format!(" stage {} ({}/{})", clean(s, 64), i + 1, job.stages.len()),
        (s, _) => format!(" stage {}", clean(s, 64)),
    };
    format!("{} {}{stage}", clean(&job.job_id, 64), job.state.as_str())
}

/// Polls `read` every [`INTERVAL`] until it answers `Some`, `limit` passes (75, naming
/// `what`) or SIGINT (75). An unreachable coordinator after the first read is retried.
fn poll_until<T>(
    session: &Session,
    limit: Duration,
    what: &str,
    mut read: impl FnMut(bool) -> Result<Option<T>, CliError>,
) -> Result<T, CliError> {
    let started = Instant::now();
    let mut sigint = crate::client::Interrupt::new(&session.runtime);
    let mut first = true;
    loop {
        match read(first) {
            Ok(Some(done)) => return Ok(done),
            Ok(None) => {}
            Err(e) if e.code() == codes::UNAVAILABLE && !first => eprintln!("drover: {e} (retrying)"),
            Err(e) => return Err(e),
        }
        first = false;
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(CliError::new(codes::TEMP_FAIL, format!("--wait: {what} still not finished after {} s", limit.as_secs())));
        }
        if sigint.sleep(&session.runtime, INTERVAL.min(left)) {
            return Err(CliError::new(codes::TEMP_FAIL, format!("--wait: interrupted before {what} finished")));
        }
    }
}

fn finish(standing: Standing, what: &str) -> Result<(), CliError> {
    match standing {
        Standing::Succeeded => Ok(()),
        _ => Err(CliError::new(codes::FAILED, format!("{what} did not succeed"))),
    }
}

/// Waits for the jobs `ids` (see the module doc), printing each state or stage change to `out`.
/// With `cancelling`, a cancelled job is what was asked for (`job cancel --wait`), a success.
pub fn wait_jobs(session: &Session, ids: &[String], cancelling: bool, limit: Duration, out: &mut dyn Write) -> Result<(), CliError> {
    wait_each(session, "job", ids, cancelling, limit, out, |id| {
        let path = format!("/v1/jobs/{}", crate::arg_checks::check_job_id(id)?);
        let job: JobDetail = session.get(&path)?;
        Ok((job_line(&job.job), job.job.state))
    })
}

/// Waits for the MAAS onboardings `ids` as [`wait_jobs`] waits for jobs: an onboarding runs
/// on the job engine and goes through the same states.
pub fn wait_onboardings(session: &Session, ids: &[String], cancelling: bool, limit: Duration, out: &mut dyn Write) -> Result<(), CliError> {
    wait_each(session, "onboarding", ids, cancelling, limit, out, |id| {
        let path = format!("/v1/maas/onboardings/{}", crate::onboarding_view::parse_id("ID", id)?);
        let one: crate::onboarding_view::OneJson = session.get(&path)?;
        Ok((onboarding_line(&one.onboarding), one.onboarding.state))
    })
}

/// The line an onboarding's progress prints: `ID STATE stage STAGE (N/M)`, like a job's.
pub fn onboarding_line(o: &crate::onboarding_view::OnboardingJson) -> String {
    let stage = match o.stage_index {
        _ if o.stage.is_empty() => String::new(),
        i if i < o.stages.len() => format!(" stage {} ({}/{})", clean(&o.stage, 64), i + 1, o.stages.len()),
        _ => format!(" stage {}", clean(&o.stage, 64)),
    };
    format!("{} {}{stage}", clean(&o.onboarding_id, 64), o.state.as_str())
}

/// The loop of [`wait_jobs`] and [`wait_onboardings`]: `read` gives one item's progress line
/// and job state.
fn wait_each(
    session: &Session,
    kind: &str,
    ids: &[String],
    cancelling: bool,
    limit: Duration,
    out: &mut dyn Write,
    read: impl Fn(&str) -> Result<(String, JobState), CliError>,
) -> Result<(), CliError> {
    let mut changes = Changes::default();
    let what = if ids.len() == 1 { format!("{kind} {}", clean(&ids[0], 64)) } else { format!("{} {kind}s", ids.len()) };
    let standing = poll_until(session, limit, &what, |_| {
        let mut standings = Vec::new();
        for id in ids {
            let (line, state) = read(id)?;
            if let Some(line) = changes.note(id, line) {
                crate::output::write_to(out, &format!("{line}\n"))?;
            }
            standings.push(if cancelling && state == JobState::Cancelled { Standing::Succeeded } else { job_standing(state) });
        }
        Ok(outcome(&standings))
    })?;
    finish(standing, &what)
}

/// Waits for the rollouts `ids` (see the module doc), printing each one's progress line when
/// it changes, as `--watch` does in a pipe.
pub fn wait_rollouts(session: &Session, ids: &[String], limit: Duration, out: &mut dyn Write) -> Result<(), CliError> {
    let mut changes = Changes::default();
    let mut manifests = BTreeMap::new();
    let what = if ids.len() == 1 { format!("rollout {}", clean(&ids[0], 80)) } else { format!("{} rollouts", ids.len()) };
    let standing = poll_until(session, limit, &what, |_| {
        let rows = session.get::<Page<RolloutView>>("/v1/rollouts")?.items;
        let mut standings = Vec::new();
        for id in ids {
            if !rows.iter().any(|r| r.rollout.rollout_id == *id) {
                if let Some(line) = changes.note(id, format!("{} not opened yet", clean(id, 80))) {
                    crate::output::write_to(out, &format!("{line}\n"))?;
                }
                standings.push(Standing::Open);
                continue;
            }
            if !manifests.contains_key(id) {
                manifests = crate::watch::manifests(&session.client, &session.runtime);
            }
            let status: RolloutStatus = session.get(&format!("/v1/rollouts/{}/status", crate::listing::encode(id)))?;
            let progress = crate::watch::progress_of(&status, manifests.get(id));
            if let Some(line) = changes.note(id, crate::watch::summary_line(&progress)) {
                crate::output::write_to(out, &format!("{line}\n"))?;
            }
            standings.push(rollout_standing(&progress.state));
        }
        Ok(outcome(&standings))
    })?;
    finish(standing, &what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standings_follow_the_state_machines() {
        use JobState as J;
        assert_eq!(job_standing(J::Completed), Standing::Succeeded);
        assert_eq!(job_standing(J::Reconciled), Standing::Succeeded);
        for s in [J::FailedRetryable, J::FailedManualIntervention, J::Cancelled] {
            assert_eq!(job_standing(s), Standing::Failed, "{s}");
        }
        for s in [J::Pending, J::Running, J::Compensating] {
            assert_eq!(job_standing(s), Standing::Open, "{s}");
        }
        assert_eq!(rollout_standing("Converged"), Standing::Succeeded);
        for s in ["Halted", "Reverted", "Failed", "Cancelled", "Superseded", "Pruned"] {
            assert_eq!(rollout_standing(s), Standing::Failed, "{s}");
        }
        assert_eq!(rollout_standing("Active"), Standing::Open);
    }

    #[test]
    fn the_outcome_waits_for_every_item() {
        use Standing::*;
        assert_eq!(outcome(&[Succeeded, Open]), None);
        assert_eq!(outcome(&[Failed, Open]), Some(Failed));
        assert_eq!(outcome(&[Succeeded, Failed]), Some(Failed));
        assert_eq!(outcome(&[Succeeded, Succeeded]), Some(Succeeded));
        assert_eq!(outcome(&[]), Some(Succeeded));
    }

    #[test]
    fn each_change_is_printed_once() {
        let mut c = Changes::default();
        assert_eq!(c.note("j", "j running stage drain (1/3)".into()).as_deref(), Some("j running stage drain (1/3)"));
        assert_eq!(c.note("j", "j running stage drain (1/3)".into()), None);
        assert!(c.note("k", "j running stage drain (1/3)".into()).is_some());
        assert!(c.note("j", "j running stage wipe (2/3)".into()).is_some());
    }

    #[test]
    fn a_release_opens_its_current_rollouts_not_its_revertable_ones() {
        let sha = "0".repeat(64);
        let doc = serde_json::json!({
            "schemaVersion": 1, "version": 7, "signedAt": "2026-01-01T00:00:00Z", "fleetResolvedSha256": sha,
            "channels": {
                "gpu": {"rolloutId": "gpu@b", "manifestSha256": sha, "freshnessWindowSecs": 600,
                        "revertable": [{"rolloutId": "gpu@a", "manifestSha256": sha}]},
                "infra": {"rolloutId": "infra@b", "manifestSha256": sha, "freshnessWindowSecs": 600, "revertable": []}
            }
        });
        let ids = current_rollouts(&serde_json::to_vec(&doc).expect("json")).expect("decodes");
        assert_eq!(ids, vec!["gpu@b".to_owned(), "infra@b".to_owned()]);
        assert_eq!(current_rollouts(b"{}").expect_err("not a timestamp").code(), codes::DATA);
    }

    #[test]
    fn a_job_line_names_its_stage() {
        let job: JobJson = crate::answer::decode::<JobDetail>("/", &crate::fixtures::sample_job()).expect("decode").job;
        let line = job_line(&job);
        assert!(line.starts_with("job-7 failed_retryable"), "{line}");
    }
}
