//! `drover job`: the coordinator's jobs (decommissions and maintenance, one per host), read
//! and acted on.
//!
//! - `drover job get [JOB_ID] [--host HOST] [--state STATE] [--kind KIND]` (viewer):
//!   `GET /v1/jobs/{id}` or `GET /v1/jobs?host=…&state=…&kind=…`, printed as a table
//!   (`JOB KIND HOST STATE STAGE ATTEMPT MESSAGE`).
//! - `drover job describe JOB_ID` (viewer): the job with its stages (the current one marked),
//!   attempt, task, failure class, message, history and events, one field a line.
//! - `drover job retry|resume|rerun|restart-clean|cancel|adopt|mark-manual JOB_ID --reason
//!   TEXT` (admin): `POST /v1/jobs/{id}/{retry_stage|resume|rerun|restart_clean|cancel|
//!   adopt_observed_state|mark_manual_intervention_required}`; prints `JOB_ID STATE
//!   (PROGRESS_CHANGE; task TASK)`; with `--wait [--timeout SECS]` it then waits for the job
//!   to finish ([`crate::wait`]).
//!
//! Every verb takes `-o json` to print the coordinator's JSON instead, unchanged. The
//! coordinator decides legality: an action the job's state does not allow is a 409 naming the
//! allowed states (exit 65); a viewer certificate gets 403 (exit 77).
//!
//! Answers are decoded as the coordinator's own types ([`drover_proto::api::jobs`]); `-o json`
//! prints the answer as it came, after it decoded. The renderings are [`crate::job_view`]'s
//! (shared with `drover get jobs`, `describe job` and `maintenance`), the kinds, states and
//! actions [`crate::workflow`]'s.

use clap::{Args, Subcommand};
use drover_proto::api::jobs::{JobDetail, JobJson};
use serde_json::Value;
use uuid::Uuid;

use crate::answer::{decode, print_answer};
use crate::arg_checks::{check_job_id, check_reason};
use crate::client::{self, ConnectArgs};
use crate::exit::CliError;
use crate::job_view::{render_action, render_describe, render_job_table};
use crate::listing::{list_all, with_query};
use crate::output::{Output, OutputArgs, pretty, print};
use crate::workflow::{Action, JobKind, JobState, ReasonBody};

/// Arguments of `drover job`.
#[derive(Args)]
pub struct JobArgs {
    #[command(subcommand)]
    command: JobCommand,
}

#[derive(Subcommand)]
enum JobCommand {
    /// List jobs (filtered by host, state, kind) or show one, as a table (viewer).
    Get(GetArgs),
    /// Show one job in full: stages, attempt, task, failure, history and events (viewer).
    Describe(DescribeArgs),
    /// Rerun the current stage with a fresh retry budget (retry_stage).
    Retry(ActionArgs),
    /// Continue from the current stage, reusing what is still valid (resume).
    Resume(ActionArgs),
    /// Re-enter the workflow from the top; stages already achieved advance at once (rerun).
    Rerun(ActionArgs),
    /// Compensate, then start again from pending (restart_clean).
    RestartClean(ActionArgs),
    /// Stop the job, compensating where possible (cancel).
    Cancel(ActionArgs),
    /// Accept the externally advanced state: the current stage counts as done
    /// (adopt_observed_state).
    Adopt(ActionArgs),
    /// Freeze the job until a person resolves it (mark_manual_intervention_required).
    MarkManual(ActionArgs),
}

/// Arguments of `drover job get`.
#[derive(Args)]
struct GetArgs {
    /// One job; all jobs (matching the filters) when absent.
    job_id: Option<String>,
    /// Only this host's jobs (hostname or id).
    #[arg(long, value_name = "HOST", conflicts_with = "job_id")]
    host: Option<String>,
    /// Only jobs in this state.
    #[arg(long, value_enum, conflicts_with = "job_id")]
    state: Option<JobState>,
    /// Only jobs of this kind.
    #[arg(long, value_enum, conflicts_with = "job_id")]
    kind: Option<JobKind>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover job describe`.
#[derive(Args)]
struct DescribeArgs {
    /// The job.
    job_id: String,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of the job actions.
#[derive(Args)]
struct ActionArgs {
    /// The job.
    job_id: String,
    /// Why (required; recorded in the job's events and the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: String,
    #[command(flatten)]
    wait: crate::wait::WaitArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// The path of `drover job get`: one job, or the list with its filters, `--host` checked and
/// then turned into an id by `host_id` (which may ask the coordinator).
fn get_path(args: &GetArgs, host_id: impl FnOnce(&str) -> Result<Uuid, CliError>) -> Result<String, CliError> {
    match &args.job_id {
        Some(id) => Ok(format!("/v1/jobs/{}", check_job_id(id)?)),
        None => Ok(with_query("/v1/jobs", &list_query(args, host_id)?)),
    }
}

/// The filters of `GET /v1/jobs` (every value is URL-safe as validated), `--host` resolved to
/// its id by `host_id`.
fn list_query(args: &GetArgs, host_id: impl FnOnce(&str) -> Result<Uuid, CliError>) -> Result<Vec<(&'static str, String)>, CliError> {
    let mut query = Vec::new();
    if let Some(h) = args.host.as_deref() {
        crate::resolve::HostName::parse("--host", h)?;
        query.push(("host", host_id(h)?.to_string()));
    }
    if let Some(s) = args.state {
        query.push(("state", s.wire().to_owned()));
    }
    if let Some(k) = args.kind {
        query.push(("kind", k.wire().to_owned()));
    }
    Ok(query)
}

/// The path of an action.
pub fn action_path(job_id: &str, action: Action) -> Result<String, CliError> {
    Ok(format!("/v1/jobs/{}/{}", check_job_id(job_id)?, action.path_segment()))
}

/// Runs `drover job`.
pub fn run(args: &JobArgs) -> Result<(), CliError> {
    let (action, a) = match &args.command {
        JobCommand::Get(a) => return run_get(a),
        JobCommand::Describe(a) => return run_describe(a),
        JobCommand::Retry(a) => (Action::RetryStage, a),
        JobCommand::Resume(a) => (Action::Resume, a),
        JobCommand::Rerun(a) => (Action::Rerun, a),
        JobCommand::RestartClean(a) => (Action::RestartClean, a),
        JobCommand::Cancel(a) => (Action::Cancel, a),
        JobCommand::Adopt(a) => (Action::AdoptObservedState, a),
        JobCommand::MarkManual(a) => (Action::MarkManualInterventionRequired, a),
    };
    let path = action_path(&a.job_id, action)?;
    let reason = check_reason(&a.reason)?;
    let session = client::Session::open(&a.connect)?;
    let value: Value = session.post(&path, &ReasonBody { reason })?;
    print_answer(a.output.output, &path, &value, render_action)?;
    if a.wait.wait {
        crate::wait::wait_jobs(
            &session,
            std::slice::from_ref(&a.job_id),
            action == Action::Cancel,
            a.wait.limit(),
            &mut crate::wait::progress_sink(a.output.output.is_json()),
        )?;
    }
    Ok(())
}

fn run_get(args: &GetArgs) -> Result<(), CliError> {
    let session = client::Session::open(&args.connect)?;
    let resolve = |h: &str| Ok(crate::resolve::host(&session, "--host", h)?.id);
    if args.job_id.is_some() {
        let path = get_path(args, resolve)?;
        let value: Value = session.get(&path)?;
        let job = decode::<JobDetail>(&path, &value)?.job;
        return print(&match args.output.output {
            Output::Json => pretty(&value)?,
            Output::Table | Output::Wide => render_job_table(std::slice::from_ref(&job)),
        });
    }
    // Every page, as `drover get jobs` reads them; JSON is the array of jobs.
    let (base, query) = ("/v1/jobs", list_query(args, resolve)?);
    let items = list_all(&session, base, &query, None)?;
    let jobs: Vec<JobJson> = items.iter().map(|j| decode(base, j)).collect::<Result<_, _>>()?;
    print(&match args.output.output {
        Output::Json => pretty(&Value::Array(items))?,
        Output::Table | Output::Wide if jobs.is_empty() => String::new(),
        Output::Table | Output::Wide => render_job_table(&jobs),
    })?;
    if jobs.is_empty() && !args.output.output.is_json() {
        eprintln!("no jobs");
    }
    Ok(())
}

fn run_describe(args: &DescribeArgs) -> Result<(), CliError> {
    let path = format!("/v1/jobs/{}", check_job_id(&args.job_id)?);
    let value = client::get_once(&args.connect, &path)?;
    print_answer(args.output.output, &path, &value, render_describe)
}

#[cfg(test)]
#[path = "job_tests.rs"]
pub(crate) mod tests;
