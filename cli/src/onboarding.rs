//! MAAS onboardings on the coordinator (`/v1/maas/onboardings…`): the JSON shapes, the routes,
//! the renderings, and the verbs that read and act on them.
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
//! `drover onboard` (creating them) is [`crate::onboard`]. Every verb takes `-o json` to print
//! the coordinator's JSON as it came. Answers decode as the coordinator's own types
//! ([`drover_proto::api::onboardings`]; unknown fields are ignored) and everything shown
//! passes through [`clean`].

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use drover_proto::time::Time;
use uuid::Uuid;

use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::get::with_query;
use crate::host::check_reason;
use crate::job::{Action, JobState, ReasonBody, clean, decode, print_answer};
use crate::output::{Output, OutputArgs, age_of, dash, indented_table, pretty, print, table};

/// The onboardings route.
pub const ONBOARDINGS: &str = "/v1/maas/onboardings";
/// How many characters of any one coordinator string a human view shows.
const TEXT_CHARS: usize = 300;
/// How many characters of MAAS's answer (the upstream snippet) `describe` shows.
const SNIPPET_CHARS: usize = 600;
/// How many characters of a message the wide table shows.
const TABLE_MESSAGE_CHARS: usize = 60;
/// The states in lifecycle order (the batch summary lists them so).
const STATE_ORDER: [&str; 8] =
    ["pending", "running", "compensating", "completed", "failed_retryable", "failed_manual_intervention", "cancelled", "reconciled"];

pub use drover_proto::api::onboardings::{
    BatchView as BatchJson, CreatedBatch as CreatedBatchJson, OnboardingActionResponse as ActionJson, OnboardingList as ListJson,
    OnboardingView as OnboardingJson, OneOnboarding as OneJson,
};

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

/// Parses an id that goes into a URL path (64 otherwise, `what` naming the argument).
pub fn parse_id(what: &str, id: &str) -> Result<Uuid, CliError> {
    Uuid::parse_str(id.trim()).map_err(|_| CliError::usage(format!("{what} {:?} is not an onboarding id (a UUID)", clean(id, 80))))
}

/// `GET /v1/maas/onboardings/{id}`.
pub fn one_path(id: &str) -> Result<String, CliError> {
    Ok(format!("{ONBOARDINGS}/{}", parse_id("ID", id)?))
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

fn parse_batch(b: &str) -> Result<Uuid, CliError> {
    Uuid::parse_str(b.trim()).map_err(|_| CliError::usage(format!("--batch {:?} is not a batch id (a UUID)", clean(b, 80))))
}

/// `GET /v1/maas/onboardings/batches/{id}`.
pub fn batch_path(batch: &str) -> Result<String, CliError> {
    Ok(format!("{ONBOARDINGS}/batches/{}", parse_batch(batch)?))
}

/// `POST /v1/maas/onboardings/{id}/{action}`.
pub fn action_path(id: &str, action: Action) -> Result<String, CliError> {
    Ok(format!("{}/{}", one_path(id)?, action.path_segment()))
}

fn t(s: &str) -> String {
    clean(s, TEXT_CHARS)
}

fn opt(s: Option<&str>) -> String {
    t(dash(s.unwrap_or("")))
}

/// The table `drover onboard` prints of what it created: `ID HOSTNAME IPMI STATE STAGE`.
pub fn render_created(onboardings: &[OnboardingJson]) -> String {
    let rows: Vec<Vec<String>> = onboardings
        .iter()
        .map(|o| {
            vec![
                clean(&o.onboarding_id, 40),
                clean(&o.hostname, 64),
                clean(&o.ipmi_ip, 48),
                o.state.as_str().to_owned(),
                clean(dash(&o.stage), 32),
            ]
        })
        .collect();
    table(&["ID", "HOSTNAME", "IPMI", "STATE", "STAGE"], &rows)
}

/// The table of `drover get onboardings`, ages seen from `now`.
pub fn render_list(now: Time, onboardings: &[OnboardingJson], wide: bool) -> String {
    let rows: Vec<Vec<String>> = onboardings
        .iter()
        .map(|o| {
            let mut row = vec![
                clean(&o.onboarding_id, 40),
                clean(&o.hostname, 64),
                clean(&o.site, 64),
                o.state.as_str().to_owned(),
                clean(dash(&o.stage), 32),
                clean(dash(o.failure_class.as_deref().unwrap_or("")), 32),
                age_of(now, o.created_at),
            ];
            if wide {
                row.extend([
                    clean(&o.ipmi_ip, 48),
                    clean(&o.profile, 64),
                    o.attempt.to_string(),
                    clean(dash(o.batch_id.as_deref().unwrap_or("")), 40),
                    age_of(now, o.updated_at),
                    clean(dash(&o.message), TABLE_MESSAGE_CHARS),
                ]);
            }
            row
        })
        .collect();
    let mut header = vec!["ID", "HOSTNAME", "SITE", "STATE", "STAGE", "CLASS", "AGE"];
    if wide {
        header.extend(["IPMI", "PROFILE", "ATTEMPT", "BATCH", "UPDATED", "MESSAGE"]);
    }
    table(&header, &rows)
}

/// The batch's summary line: `Batch ID (site S): N onboardings: running 3, completed 2`,
/// states in lifecycle order, states with no onboarding left out.
pub fn render_batch_summary(b: &BatchJson) -> String {
    let rank = |s: &str| STATE_ORDER.iter().position(|x| *x == s).unwrap_or(STATE_ORDER.len());
    let mut counts: Vec<(&str, &u64)> = b.counts.iter().filter(|(_, n)| **n > 0).map(|(s, n)| (s.as_str(), n)).collect();
    counts.sort_by(|a, b| (rank(a.0), a.0).cmp(&(rank(b.0), b.0)));
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    let counts = if counts.is_empty() { "none".to_owned() } else { counts.join(", ") };
    let site = if b.site.is_empty() { String::new() } else { format!(" (site {})", clean(&b.site, 64)) };
    format!("Batch {}{site}: {} onboardings: {counts}\n", clean(&b.batch_id, 40), b.total)
}

/// The index of the current stage: `stageIndex` when in range, else where `stage` is.
fn current_stage(o: &OnboardingJson) -> Option<usize> {
    Some(o.stage_index).filter(|i| *i < o.stages.len()).or_else(|| o.stages.iter().position(|s| *s == o.stage))
}

/// The human view of `drover describe onboarding`.
pub fn render_describe(o: &OnboardingJson) -> String {
    fn field(out: &mut String, name: &str, value: String) {
        let _ = writeln!(out, "{:<15}{value}", format!("{name}:"));
    }
    let mut out = String::new();
    field(&mut out, "Onboarding", t(&o.onboarding_id));
    field(&mut out, "Hostname", t(dash(&o.hostname)));
    field(&mut out, "IPMI", t(dash(&o.ipmi_ip)));
    if let Some(mac) = &o.pxe_mac {
        field(&mut out, "PXE MAC", t(dash(mac)));
    }
    field(&mut out, "Site", t(dash(&o.site)));
    field(&mut out, "Profile", t(dash(&o.profile)));
    field(&mut out, "SKU", opt(o.sku.as_deref()));
    field(&mut out, "Batch", opt(o.batch_id.as_deref()));
    field(&mut out, "State", o.state.as_str().to_owned());
    let current = current_stage(o);
    let stage = match current {
        Some(i) => format!("{} ({}/{})", t(dash(&o.stage)), i + 1, o.stages.len()),
        None => t(dash(&o.stage)),
    };
    field(&mut out, "Stage", stage);
    field(&mut out, "Attempt", o.attempt.to_string());
    field(&mut out, "MAAS system", opt(o.system_id.as_deref()));
    field(&mut out, "Host", opt(o.host_id.as_deref()));
    field(&mut out, "Failure class", opt(o.failure_class.as_deref()));
    field(&mut out, "Message", t(dash(&o.message)));
    field(&mut out, "Next action", opt(o.recommended_action.as_deref()));
    match &o.diagnostics {
        None => field(&mut out, "Diagnostics", "-".to_owned()),
        Some(d) => {
            out.push_str("Diagnostics:\n");
            field(&mut out, "  MAAS status", opt(d.maas_status.as_deref()));
            field(&mut out, "  Power", opt(d.power_state.as_deref()));
            let ips: Vec<String> = d.ip_addresses.iter().map(|a| clean(a, 64)).collect();
            field(&mut out, "  IPs", if ips.is_empty() { "-".to_owned() } else { t(&ips.join(", ")) });
            field(&mut out, "  Upstream", clean(dash(d.upstream_snippet.as_deref().unwrap_or("")), SNIPPET_CHARS));
        }
    }
    field(&mut out, "Requester", opt(o.requester.as_deref()));
    let when = |at: Option<Time>| at.map_or_else(|| "-".to_owned(), |at| at.to_string());
    field(&mut out, "Created", when(Some(o.created_at)));
    field(&mut out, "Started", when(o.started_at));
    field(&mut out, "Completed", when(o.completed_at));
    field(&mut out, "Updated", when(Some(o.updated_at)));
    out.push_str("Stages:\n");
    if o.stages.is_empty() {
        out.push_str("  (none)\n");
    }
    for (i, stage) in o.stages.iter().enumerate() {
        let marker = if Some(i) == current { "->" } else { "  " };
        let _ = writeln!(out, "  {marker} {}. {}", i + 1, t(stage));
    }
    out.push_str("Events:\n");
    let rows: Vec<Vec<String>> = o
        .events
        .iter()
        .map(|e| vec![e.at.to_string(), t(dash(&e.stage)), e.attempt.to_string(), t(dash(&e.status)), t(dash(&e.details))])
        .collect();
    out.push_str(&indented_table(&["AT", "STAGE", "ATTEMPT", "STATUS", "DETAILS"], &rows));
    out
}

/// The line an action prints: `ID STATE (stage STAGE): MESSAGE`.
pub fn render_action(a: &ActionJson) -> String {
    let o = &a.onboarding;
    format!("{} {} (stage {}): {}\n", clean(&o.onboarding_id, 40), o.state.as_str(), clean(dash(&o.stage), 32), t(dash(&a.message)))
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
    let value = crate::job::post(&a.connect, &path, &body)?;
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
#[path = "onboarding_tests.rs"]
pub(crate) mod tests;
