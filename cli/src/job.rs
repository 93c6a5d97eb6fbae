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
//! prints the answer as it came, after it decoded. The rendering helpers are shared with
//! `drover decommission` and `drover maintenance`.

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::client::{self, ConnectArgs};
use crate::exit::{CliError, codes};
use crate::host::check_reason;

/// How many characters of a message a table shows.
const TABLE_MESSAGE_CHARS: usize = 60;
/// How many characters of any one coordinator string a human view shows.
const TEXT_CHARS: usize = 300;

pub use crate::output::{Output, OutputArgs, pretty, print, table};

/// A job's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobKind {
    /// `drover decommission --mode soft-reset`.
    #[value(name = "soft_reset", alias = "soft-reset")]
    SoftReset,
    /// `drover decommission --mode storage-cleanup`.
    #[value(name = "storage_cleanup", alias = "storage-cleanup")]
    StorageCleanup,
    /// `drover decommission --mode full`.
    #[value(name = "full_decommission", alias = "full-decommission")]
    FullDecommission,
    /// One host's share of a `drover maintenance request`.
    #[value(name = "maintenance")]
    Maintenance,
    /// `drover host retire`: the drain that owns `draining`.
    #[value(name = "retire")]
    Retire,
    /// `drover host remove`: the uninstall that owns `removing`.
    #[value(name = "remove")]
    Remove,
}

impl JobKind {
    pub fn wire(self) -> &'static str {
        match self {
            JobKind::SoftReset => "soft_reset",
            JobKind::StorageCleanup => "storage_cleanup",
            JobKind::FullDecommission => "full_decommission",
            JobKind::Maintenance => "maintenance",
            JobKind::Retire => "retire",
            JobKind::Remove => "remove",
        }
    }
}

/// A job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobState {
    /// Not started yet.
    #[value(name = "pending")]
    Pending,
    /// A stage is in progress.
    #[value(name = "running")]
    Running,
    /// Every stage is done.
    #[value(name = "completed")]
    Completed,
    /// A stage failed; it may be retried.
    #[value(name = "failed_retryable", alias = "failed-retryable")]
    FailedRetryable,
    /// A stage failed in a way that needs a person.
    #[value(name = "failed_manual_intervention", alias = "failed-manual-intervention")]
    FailedManualIntervention,
    /// Cancelled by an operator.
    #[value(name = "cancelled")]
    Cancelled,
    /// Compensating (undoing) what the job did.
    #[value(name = "compensating")]
    Compensating,
    /// Closed by reconciliation with the host's observed state.
    #[value(name = "reconciled")]
    Reconciled,
}

impl JobState {
    pub fn wire(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::FailedRetryable => "failed_retryable",
            JobState::FailedManualIntervention => "failed_manual_intervention",
            JobState::Cancelled => "cancelled",
            JobState::Compensating => "compensating",
            JobState::Reconciled => "reconciled",
        }
    }
}

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

/// An operator action on a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `retry_stage`.
    RetryStage,
    /// `resume`.
    Resume,
    /// `rerun`.
    Rerun,
    /// `restart_clean`.
    RestartClean,
    /// `cancel`.
    Cancel,
    /// `adopt_observed_state`.
    AdoptObservedState,
    /// `mark_manual_intervention_required`.
    MarkManualInterventionRequired,
}

impl Action {
    /// The action's name in its route.
    pub fn path_segment(self) -> &'static str {
        match self {
            Action::RetryStage => "retry_stage",
            Action::Resume => "resume",
            Action::Rerun => "rerun",
            Action::RestartClean => "restart_clean",
            Action::Cancel => "cancel",
            Action::AdoptObservedState => "adopt_observed_state",
            Action::MarkManualInterventionRequired => "mark_manual_intervention_required",
        }
    }
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

/// The body of every admin POST on jobs.
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct ReasonBody<'a> {
    /// Why.
    pub reason: &'a str,
}

pub use drover_proto::api::jobs::{ActionResponse, DryRunView, JobDetail, JobJson};

/// Checks a job id before it goes into a URL path (64 otherwise).
pub fn check_job_id(id: &str) -> Result<&str, CliError> {
    check_id("JOB_ID", "job id", id)
}

/// Checks a coordinator id (1 to 128 of `A-Za-z0-9-_.:`) before it goes into a URL path (64
/// otherwise, `what` naming the argument and `noun` what it should be).
pub fn check_id<'a>(what: &str, noun: &str, id: &'a str) -> Result<&'a str, CliError> {
    let ok = !id.is_empty() && id.len() <= 128 && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if ok { Ok(id) } else { Err(CliError::usage(format!("{what} {:?} is not a {noun}", clean(id, 80)))) }
}

/// Parses a host id (64 otherwise), `what` naming the argument.
pub fn parse_host_id(what: &str, id: &str) -> Result<Uuid, CliError> {
    Uuid::parse_str(id).map_err(|_| CliError::usage(format!("{what} {:?} is not a UUID", clean(id, 80))))
}

/// The path of `drover job get`: one job, or the list with its filters, `--host` checked and
/// then turned into an id by `host_id` (which may ask the coordinator).
fn get_path(args: &GetArgs, host_id: impl FnOnce(&str) -> Result<Uuid, CliError>) -> Result<String, CliError> {
    match &args.job_id {
        Some(id) => Ok(format!("/v1/jobs/{}", check_job_id(id)?)),
        None => Ok(crate::get::with_query("/v1/jobs", &list_query(args, host_id)?)),
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

/// `s` with control characters replaced by spaces and at most `max` characters (then `…`):
/// a coordinator's text must not drive the terminal.
pub fn clean(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

fn or_dash(s: Option<&str>) -> &str {
    match s {
        Some(s) if !s.is_empty() => s,
        _ => "-",
    }
}

/// The host column: the hostname, else the id.
pub fn host_of(job: &JobJson) -> String {
    let name = job.hostname.as_deref().filter(|n| !n.is_empty());
    clean(or_dash(name.or(job.host_id.as_deref())), 64)
}

/// The jobs table of `drover job get`.
pub fn render_job_table(jobs: &[JobJson]) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                clean(&j.job_id, 64),
                clean(&j.kind, 32),
                host_of(j),
                j.state.as_str().to_owned(),
                clean(or_dash(Some(&j.stage)), 32),
                j.attempt.to_string(),
                clean(or_dash(Some(&j.message)), TABLE_MESSAGE_CHARS),
            ]
        })
        .collect();
    table(&["JOB", "KIND", "HOST", "STATE", "STAGE", "ATTEMPT", "MESSAGE"], &rows)
}

/// The index of the current stage: `stageIndex` when it is in range, else where `stage` is.
fn current_stage(job: &JobJson) -> Option<usize> {
    Some(job.stage_index).filter(|i| *i < job.stages.len()).or_else(|| job.stages.iter().position(|x| *x == job.stage))
}

/// The human view of `drover job describe`.
pub fn render_describe(detail: &JobDetail) -> String {
    use std::fmt::Write as _;
    let job = &detail.job;
    let mut out = String::new();
    let t = |s: &str| clean(s, TEXT_CHARS);
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "{:<15}{value}", format!("{name}:"));
    };
    field("Job", t(&job.job_id));
    field("Kind", t(&job.kind));
    let name = job.hostname.as_deref().filter(|n| !n.is_empty());
    let host = match (name, job.host_id.as_deref()) {
        (Some(n), Some(id)) => format!("{} ({})", t(n), t(id)),
        (Some(n), None) => t(n),
        (None, id) => t(or_dash(id)),
    };
    field("Host", host);
    field("State", job.state.as_str().to_owned());
    if let Some(r) = &job.request_id {
        field("Request", t(r));
    }
    field("Attempt", job.attempt.to_string());
    field("Task", t(or_dash(job.task_id.as_deref())));
    field("Failure class", t(or_dash(job.failure_class.as_deref())));
    field("Message", t(or_dash(Some(&job.message))));
    field("Requester", t(or_dash(job.requester.as_deref())));
    if let Some(e) = &job.error {
        let class = e.class.as_deref().unwrap_or("-");
        field("Last error", t(&format!("{class} at {} (attempt {}): {}", e.stage, e.attempt, e.message)));
    }
    if let Some(a) = &job.recommended_action {
        field("Next action", t(a));
    }
    let when = |at: Option<drover_proto::time::Time>| at.map_or_else(|| "-".to_owned(), |at| at.to_string());
    field("Created", when(Some(job.created_at)));
    field("Started", when(job.started_at));
    field("Completed", when(job.completed_at));
    field("Updated", when(Some(job.updated_at)));
    out.push_str("Stages:\n");
    if job.stages.is_empty() {
        out.push_str("  (none)\n");
    }
    let current = current_stage(job);
    for (i, stage) in job.stages.iter().enumerate() {
        let marker = if Some(i) == current { "->" } else { "  " };
        let _ = writeln!(out, "  {marker} {}. {}", i + 1, t(stage));
    }
    out.push_str("History:\n");
    if job.history.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let rows: Vec<Vec<String>> = job
            .history
            .iter()
            .map(|h| vec![h.at.to_string(), t(&h.stage), h.attempt.to_string(), t(&h.status), t(or_dash(Some(&h.message)))])
            .collect();
        for line in table(&["AT", "STAGE", "ATTEMPT", "STATUS", "MESSAGE"], &rows).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out.push_str("Events:\n");
    if detail.events.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let rows: Vec<Vec<String>> =
            detail.events.iter().map(|e| vec![e.at.to_string(), t(&e.kind), t(or_dash(Some(&e.message)))]).collect();
        for line in table(&["AT", "KIND", "MESSAGE"], &rows).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// The one line an action prints: `JOB_ID STATE (PROGRESS_CHANGE; task TASK)`.
pub fn render_action(resp: &ActionResponse) -> String {
    let progress = if resp.outcome.progress_change.is_empty() { "no change" } else { &resp.outcome.progress_change };
    let task = if resp.outcome.task.is_empty() { "none" } else { &resp.outcome.task };
    format!("{} {} ({}; task {})\n", clean(&resp.job.job_id, 64), resp.job.state.as_str(), clean(progress, 80), clean(task, 80))
}

/// Decodes a coordinator answer already read as JSON (76 when it is not the API's).
pub fn decode<T: DeserializeOwned>(path: &str, value: &Value) -> Result<T, CliError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        CliError::new(codes::PROTOCOL, format!("{path}: unexpected answer: {} (at {at})", clean(&e.inner().to_string(), 200)))
    })
}

/// Decodes every row of a listing read as JSON (76 when one is not the API's).
pub fn decode_all<T: DeserializeOwned>(path: &str, rows: &[Value]) -> Result<Vec<T>, CliError> {
    rows.iter().map(|r| decode(path, r)).collect()
}

/// Prints a coordinator answer `value` (from `path`) as `output` asks: the JSON unchanged, or
/// `render` of it decoded as `T`. It is decoded either way, so an answer that is not the API's
/// exits 76 even with `-o json`.
pub fn print_answer<T: DeserializeOwned>(
    output: Output,
    path: &str,
    value: &Value,
    render: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    let decoded: T = decode(path, value)?;
    print(&match output {
        Output::Json => pretty(value)?,
        Output::Table | Output::Wide => render(&decoded),
    })
}

/// `GET path` as JSON.
pub fn get(connect: &ConnectArgs, path: &str) -> Result<Value, CliError> {
    let target = connect.resolve()?;
    let client = client::connect(&target)?;
    client::block_on(client.get_json(path))
}

/// `POST path` with `body`, the answer as JSON.
pub fn post<B: Serialize>(connect: &ConnectArgs, path: &str, body: &B) -> Result<Value, CliError> {
    let target = connect.resolve()?;
    let client = client::connect(&target)?;
    client::block_on(client.post_json(path, body))
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
    let items = crate::get::list_all(&session, base, &query, None)?;
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
    let value = get(&args.connect, &path)?;
    print_answer(args.output.output, &path, &value, render_describe)
}

#[cfg(test)]
#[path = "job_tests.rs"]
pub(crate) mod tests;
