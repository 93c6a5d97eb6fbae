//! MAAS drift reconciliation from the CLI (`/v1/maas/reconciliation/…`):
//!
//! - `drover get drift [--site S]` (viewer): hosts whose MAAS machine disagrees with Drover,
//!   as `HOSTNAME SITE STATE RULE SEVERITY MAAS DETECTED` (`-o wide` adds the system id,
//!   what was expected and observed, and the action taken).
//! - `drover reconcile status` (viewer): per site, hosts ok / drifted / unreconciled and the
//!   last pass (when, how long, outcome).
//! - `drover reconcile run [--site S]` (admin): a pass now over one site or every active one;
//!   prints each pass's counts; exits 69 (unavailable) when a pass could not see MAAS
//!   (`upstream_transient`), 70 when one failed otherwise.
//! - `drover drift resolve HOST --reason TEXT [--unquarantine]` (admin): closes the host's
//!   open drift (audited); `--unquarantine` also returns an auto-quarantined host to service.
//!
//! Every verb takes `-o json` to print the coordinator's JSON unchanged; everything shown
//! passes through [`clean`].

use clap::{Args, Subcommand};
use drover_proto::api::reconciliation::{DriftDetails, DriftList, DriftResolved, PassOutcome, ReconciliationStatus, RunList, RunRecord};
use drover_proto::time::Time;
use serde::Serialize;

use crate::answer::decode;
use crate::arg_checks::check_reason;
use crate::client::{ConnectArgs, get_once, post_once};
use crate::exit::{CliError, codes};
use crate::listing::with_query;
use crate::output::{Output, OutputArgs, clean, dash, pretty, print, table};

const ROUTE: &str = "/v1/maas/reconciliation";
/// Characters of a coordinator string a table cell shows.
const CELL: usize = 80;

/// Arguments of `drover get drift`.
#[derive(Args)]
pub struct DriftListArgs {
    /// Only this site's hosts.
    #[arg(long, value_name = "SITE")]
    site: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover reconcile`.
#[derive(Args)]
pub struct ReconcileArgs {
    #[command(subcommand)]
    command: ReconcileCommand,
}

#[derive(Subcommand)]
enum ReconcileCommand {
    /// Run a pass now over one site (--site) or every active site (admin).
    Run(RunArgs),
    /// Hosts ok / drifted / unreconciled per site, and each site's last pass.
    Status(StatusArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Only this site.
    #[arg(long, value_name = "SITE")]
    site: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover drift`.
#[derive(Args)]
pub struct DriftArgs {
    #[command(subcommand)]
    command: DriftCommand,
}

#[derive(Subcommand)]
enum DriftCommand {
    /// Close a host's open drift (admin; audited).
    Resolve(ResolveArgs),
}

#[derive(Args)]
struct ResolveArgs {
    /// The host (hostname or id).
    host: String,
    /// Why (recorded in the event and the audit log).
    #[arg(long)]
    reason: String,
    /// Also return the auto-quarantined host to service (quarantined → active, schedulable).
    #[arg(long)]
    unquarantine: bool,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

fn text(s: &str) -> String {
    clean(dash(s), CELL)
}

fn at(t: Option<Time>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

/// Renders `GET …/drift`.
pub fn render_drift(list: &DriftList, wide: bool) -> String {
    let rows = &list.drift;
    if rows.is_empty() {
        return "no drift: every bound host agrees with MAAS\n".to_owned();
    }
    let mut header = vec!["HOSTNAME", "SITE", "STATE", "RULE", "SEVERITY", "MAAS", "DETECTED"];
    if wide {
        header.extend(["SYSTEM_ID", "EXPECTED", "OBSERVED", "ACTION"]);
    }
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let d = r.drift_details.as_ref();
            let detail = |f: fn(&DriftDetails) -> &str| text(d.map_or("", f));
            let mut row = vec![
                text(&r.hostname),
                text(&r.site),
                r.state.as_str().to_owned(),
                detail(|d| &d.rule),
                detail(|d| &d.severity),
                text(r.last_maas_status.as_deref().unwrap_or("")),
                at(r.drift_detected_at),
            ];
            if wide {
                row.extend([text(&r.system_id), detail(|d| &d.expected), detail(|d| &d.observed), detail(|d| d.action.as_str())]);
            }
            row
        })
        .collect();
    table(&header, &body)
}

/// Runs `drover get drift`.
pub fn run_list(args: &DriftListArgs) -> Result<(), CliError> {
    let mut q = Vec::new();
    if let Some(s) = &args.site {
        q.push(("site", s.clone()));
    }
    let path = with_query(&format!("{ROUTE}/drift"), &q);
    let v = get_once(&args.connect, &path)?;
    let list: DriftList = decode(&path, &v)?;
    let text = match args.output.output {
        Output::Json => pretty(&v)?,
        o => render_drift(&list, o == Output::Wide),
    };
    print(&text)
}

fn run_line(r: &RunRecord) -> String {
    let p = &r.report;
    let mut line = format!(
        "{}: {} in {} ms — {} machines, {} hosts, {} unmanaged; {} detected, {} healed, {} quarantined; {} changes in {} transaction(s)",
        text(&r.site),
        r.outcome.as_str(),
        r.duration_ms,
        p.machines,
        p.hosts,
        p.unmanaged,
        p.detected,
        p.healed,
        p.quarantined,
        r.changes,
        r.batches,
    );
    if !r.message.is_empty() {
        line.push_str(&format!(": {}", clean(&r.message, 300)));
    }
    line
}

/// Runs `drover reconcile`.
pub fn run_reconcile(args: &ReconcileArgs) -> Result<(), CliError> {
    match &args.command {
        ReconcileCommand::Run(a) => {
            #[derive(Serialize)]
            struct Body<'a> {
                #[serde(skip_serializing_if = "Option::is_none")]
                site: Option<&'a str>,
            }
            let path = format!("{ROUTE}/run");
            let v = post_once(&a.connect, &path, &Body { site: a.site.as_deref() })?;
            let runs = decode::<RunList>(&path, &v)?.runs;
            let text = match a.output.output {
                Output::Json => pretty(&v)?,
                _ if runs.is_empty() => "no active site to reconcile\n".to_owned(),
                _ => runs.iter().map(|r| run_line(r) + "\n").collect(),
            };
            print(&text)?;
            if runs.iter().any(|r| r.outcome == PassOutcome::UpstreamTransient) {
                return Err(CliError::new(codes::UNAVAILABLE, "a pass could not see its site's MAAS; nothing was changed for that site"));
            }
            if runs.iter().any(|r| r.outcome != PassOutcome::Ok) {
                return Err(CliError::new(codes::SOFTWARE, "a pass failed; see its message"));
            }
            Ok(())
        }
        ReconcileCommand::Status(a) => {
            let path = format!("{ROUTE}/status");
            let v = get_once(&a.connect, &path)?;
            let sites = decode::<ReconciliationStatus>(&path, &v)?.sites;
            let text = match a.output.output {
                Output::Json => pretty(&v)?,
                _ => {
                    let rows: Vec<Vec<String>> = sites
                        .iter()
                        .map(|s| {
                            let last = s.last_run.as_ref();
                            vec![
                                text(&s.site),
                                text(&s.status),
                                s.ok.to_string(),
                                s.drifted.to_string(),
                                s.unreconciled.to_string(),
                                at(last.map(|l| l.started_at)),
                                last.map_or("-".into(), |l| format!("{} ms", l.duration_ms)),
                                last.map_or("-", |l| l.outcome.as_str()).to_owned(),
                            ]
                        })
                        .collect();
                    table(&["SITE", "STATUS", "OK", "DRIFTED", "UNRECONCILED", "LAST_RUN", "DURATION", "OUTCOME"], &rows)
                }
            };
            print(&text)
        }
    }
}

/// Runs `drover drift`.
pub fn run_drift(args: &DriftArgs) -> Result<(), CliError> {
    match &args.command {
        DriftCommand::Resolve(a) => {
            let reason = check_reason(&a.reason)?;
            if a.host.trim().is_empty() || a.host.chars().any(char::is_control) || a.host.contains('/') {
                return Err(CliError::usage("HOST must be a hostname or a host id"));
            }
            #[derive(Serialize)]
            struct Body<'a> {
                reason: &'a str,
                action: &'a str,
            }
            let action = if a.unquarantine { "unquarantine" } else { "acknowledge" };
            let path = format!("{ROUTE}/drift/{}/resolve", a.host.trim());
            let v = post_once(&a.connect, &path, &Body { reason, action })?;
            let resolved: DriftResolved = decode(&path, &v)?;
            let text = match a.output.output {
                Output::Json => pretty(&v)?,
                _ => format!("{}: drift resolved ({action}); host is {}\n", text(&resolved.hostname), resolved.state),
            };
            print(&text)
        }
    }
}
