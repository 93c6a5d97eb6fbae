//! Managing MAAS onboardings that exist on the coordinator (`/v1/maas/onboardings…`): the
//! verbs that list, show and act on them. Creating them (`drover onboard`) is
//! [`crate::onboarding_create`]'s.
//!
//! - `drover get onboardings [--batch ID] [--host HOSTNAME] [--state STATE] [--site SITE]`
//!   (viewer): `GET /v1/maas/onboardings?batch=…&host=…&state=…&site=…` as a table (`ID
//!   HOSTNAME SITE STATE STAGE CLASS AGE`; `-o wide` adds IPMI, profile, attempt, batch,
//!   updated and message); with `--batch`, a summary line of the batch's counts by state
//!   first (`GET /v1/maas/onboardings/batches/{id}`).
//! - `drover describe onboarding ID` (viewer): `GET /v1/maas/onboardings/{id}`, every field:
//!   the request, state, stage i/n, attempt, MAAS system id, host id, failure class, message,
//!   recommended action, diagnostics, requester and times, the stages (the current one
//!   marked) and the per-stage event history.
//! - `drover onboarding retry|resume|rerun|restart-clean|cancel|adopt|mark-manual ID --reason
//!   TEXT` (admin): `POST /v1/maas/onboardings/{id}/{retry_stage|resume|rerun|restart_clean|
//!   cancel|adopt_observed_state|mark_manual_intervention_required}` with `{"reason"}`;
//!   prints `ID STATE (stage STAGE): MESSAGE`. The coordinator decides legality: a refused
//!   action is a 409 (exit 65) with its message.
//!
//! The JSON shapes, ids and renderings are [`crate::onboarding_view`]'s. Every verb takes `-o
//! json` to print the coordinator's JSON as it came.

use clap::{Args, Subcommand};

use crate::answer::{decode, print_answer};
use crate::arg_checks::check_reason;
use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::listing::with_query;
use crate::onboarding_view::{
    ListJson, ONBOARDINGS, OneJson, batch_path, one_path, parse_batch, render_action, render_batch_summary, render_describe, render_list,
};
use crate::output::{Output, OutputArgs, pretty, print};
use crate::workflow::{Action, JobState, ReasonBody};

/// The filters of `drover get onboardings`.
#[derive(Args, Debug, Clone, Default)]
pub struct Filters {
    /// Only this batch's onboardings (the id `drover onboard --csv` printed); also prints the
    /// batch's counts by state.
    #[arg(long, value_name = "BATCH_ID")]
    pub batch: Option<String>,
    /// Only the onboardings of this hostname.
    #[arg(long, value_name = "HOSTNAME")]
    pub host: Option<String>,
    /// Only onboardings in this state.
    #[arg(long, value_enum)]
    pub state: Option<JobState>,
    /// Only this MAAS site's onboardings (name or id).
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
}

/// Arguments of `drover get onboardings`.
#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    filters: Filters,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover describe onboarding`.
#[derive(Args)]
pub struct DescribeArgs {
    /// The onboarding's id.
    #[arg(value_name = "ID")]
    id: String,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover onboarding`.
#[derive(Args)]
pub struct OnboardingArgs {
    #[command(subcommand)]
    command: OnboardingCommand,
}

#[derive(Subcommand)]
enum OnboardingCommand {
    /// Rerun the failed stage with a fresh retry budget (retry_stage).
    Retry(ActionArgs),
    /// Continue from the current stage, reusing what MAAS already did (resume).
    Resume(ActionArgs),
    /// Re-enter the workflow from the top; stages already achieved advance at once (rerun).
    Rerun(ActionArgs),
    /// Undo what was done in MAAS, then start again from pending (restart_clean).
    RestartClean(ActionArgs),
    /// Stop the onboarding, compensating where possible (cancel).
    Cancel(ActionArgs),
    /// Accept the machine's state as MAAS shows it: the current stage counts as done
    /// (adopt_observed_state).
    Adopt(ActionArgs),
    /// Freeze the onboarding until a person resolves it (mark_manual_intervention_required).
    MarkManual(ActionArgs),
}

/// Arguments of the onboarding actions.
#[derive(Args)]
struct ActionArgs {
    /// The onboarding's id.
    #[arg(value_name = "ID")]
    id: String,
    /// Why (required; recorded in the onboarding's events and the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: String,
    /// `adopt` only: the MAAS machine (system id) to claim, ending a discovery that stopped as
    /// ambiguous.
    #[arg(long, value_name = "SYSTEM_ID")]
    system_id: Option<String>,
    #[command(flatten)]
    wait: crate::wait::WaitArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// The listing with its filters, values percent-encoded (the batch must be a UUID).
pub fn list_path(f: &Filters) -> Result<String, CliError> {
    let mut q: Vec<(&str, String)> = Vec::new();
    if let Some(b) = &f.batch {
        q.push(("batch", parse_batch(b)?.to_string()));
    }
    if let Some(h) = &f.host {
        q.push(("host", h.trim().to_owned()));
    }
    if let Some(s) = f.state {
        q.push(("state", s.wire().to_owned()));
    }
    if let Some(s) = &f.site {
        q.push(("site", s.trim().to_owned()));
    }
    Ok(with_query(ONBOARDINGS, &q))
}

/// `POST /v1/maas/onboardings/{id}/{action}`.
pub fn action_path(id: &str, action: Action) -> Result<String, CliError> {
    Ok(format!("{}/{}", one_path(id)?, action.path_segment()))
}

/// Runs `drover get onboardings`.
pub fn run_list(args: &ListArgs) -> Result<(), CliError> {
    let path = list_path(&args.filters)?;
    let summary_path = args.filters.batch.as_deref().map(batch_path).transpose()?;
    let s = Session::open(&args.connect)?;
    let value: serde_json::Value = s.get(&path)?;
    let list: ListJson = decode(&path, &value)?;
    if args.output.output.is_json() {
        return print(&pretty(&value)?);
    }
    let mut out = String::new();
    if let Some(p) = summary_path {
        out.push_str(&render_batch_summary(&s.get(&p)?));
    }
    if list.onboardings.is_empty() {
        print(&out)?;
        eprintln!("no onboardings");
        return Ok(());
    }
    out.push_str(&render_list(crate::clock::now()?, &list.onboardings, args.output.output == Output::Wide));
    print(&out)
}

/// Runs `drover describe onboarding`.
pub fn run_describe(args: &DescribeArgs) -> Result<(), CliError> {
    let path = one_path(&args.id)?;
    let s = Session::open(&args.connect)?;
    let value: serde_json::Value = s.get(&path)?;
    print_answer(args.output.output, &path, &value, |one: &OneJson| render_describe(&one.onboarding))
}

/// The action a verb of `drover onboarding` asks for, with its arguments.
fn action_of(command: &OnboardingCommand) -> (Action, &ActionArgs) {
    match command {
        OnboardingCommand::Retry(a) => (Action::RetryStage, a),
        OnboardingCommand::Resume(a) => (Action::Resume, a),
        OnboardingCommand::Rerun(a) => (Action::Rerun, a),
        OnboardingCommand::RestartClean(a) => (Action::RestartClean, a),
        OnboardingCommand::Cancel(a) => (Action::Cancel, a),
        OnboardingCommand::Adopt(a) => (Action::AdoptObservedState, a),
        OnboardingCommand::MarkManual(a) => (Action::MarkManualInterventionRequired, a),
    }
}

/// Runs `drover onboarding`: the id and the reason are checked before anything is sent.
pub fn run(args: &OnboardingArgs) -> Result<(), CliError> {
    let (action, a) = action_of(&args.command);
    let path = action_path(&a.id, action)?;
    let reason = check_reason(&a.reason)?;
    let body = action_body(action, reason, a.system_id.as_deref())?;
    let value = crate::client::post_once(&a.connect, &path, &body)?;
    print_answer(a.output.output, &path, &value, render_action)?;
    if !a.wait.wait {
        return Ok(());
    }
    let session = Session::open(&a.connect)?;
    let mut out = crate::wait::progress_sink(a.output.output.is_json());
    crate::wait::wait_onboardings(&session, std::slice::from_ref(&a.id), action == Action::Cancel, a.wait.limit(), &mut out)
}

/// The body of an action: the reason, and for `adopt` the machine to claim (MAAS's system ids
/// are short alphanumeric strings; anything else is refused before a request).
fn action_body(action: Action, reason: &str, system_id: Option<&str>) -> Result<serde_json::Value, CliError> {
    let mut body = serde_json::to_value(ReasonBody { reason }).map_err(|e| CliError::usage(e.to_string()))?;
    if let Some(id) = system_id {
        if action != Action::AdoptObservedState {
            return Err(CliError::usage("--system-id only applies to adopt"));
        }
        if id.is_empty() || id.len() > 32 || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(CliError::usage(format!("--system-id {id:?} is not a MAAS system id (letters and digits)")));
        }
        body["systemId"] = serde_json::Value::String(id.to_owned());
    }
    Ok(body)
}

#[cfg(test)]
#[path = "onboarding_manage_tests.rs"]
pub(crate) mod tests;
