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
use serde::Serialize;
use serde_json::Value;

use crate::client::ConnectArgs;
use crate::exit::{CliError, codes};
use crate::get::with_query;
use crate::host::check_reason;
use crate::job::{clean, get, post};
use crate::output::{Output, OutputArgs, dash, field, pretty, print, table};

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

fn text(v: &Value, name: &str) -> String {
    clean(dash(field(v, name)), CELL)
}

fn items<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a Vec<Value>, CliError> {
    v.get(key).and_then(Value::as_array).ok_or_else(|| CliError::new(codes::PROTOCOL, format!("{path}: unexpected answer: no {key} list")))
}

/// Renders `GET …/drift`.
pub fn render_drift(v: &Value, wide: bool) -> Result<String, CliError> {
    let rows = items(v, "drift", ROUTE)?;
    if rows.is_empty() {
        return Ok("no drift: every bound host agrees with MAAS\n".to_owned());
    }
    let mut header = vec!["HOSTNAME", "SITE", "STATE", "RULE", "SEVERITY", "MAAS", "DETECTED"];
    if wide {
        header.extend(["SYSTEM_ID", "EXPECTED", "OBSERVED", "ACTION"]);
    }
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let d = r.get("driftDetails").cloned().unwrap_or(Value::Null);
            let mut row = vec![
                text(r, "hostname"),
                text(r, "site"),
                text(r, "state"),
                text(&d, "rule"),
                text(&d, "severity"),
                text(r, "lastMaasStatus"),
                text(r, "driftDetectedAt"),
            ];
            if wide {
                let action = d.get("action").and_then(|a| a.get("action")).and_then(Value::as_str).unwrap_or("-");
                row.extend([text(r, "systemId"), text(&d, "expected"), text(&d, "observed"), clean(action, CELL)]);
            }
            row
        })
        .collect();
    Ok(table(&header, &body))
}

/// Runs `drover get drift`.
pub fn run_list(args: &DriftListArgs) -> Result<(), CliError> {
    let mut q = Vec::new();
    if let Some(s) = &args.site {
        q.push(("site", s.clone()));
    }
    let v = get(&args.connect, &with_query(&format!("{ROUTE}/drift"), &q))?;
    let text = match args.output.output {
        Output::Json => pretty(&v)?,
        o => render_drift(&v, o == Output::Wide)?,
    };
    print(&text)
}

fn run_line(r: &Value) -> String {
    let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut line = format!(
        "{}: {} in {} ms — {} machines, {} hosts, {} unmanaged; {} detected, {} healed, {} quarantined; {} changes in {} transaction(s)",
        text(r, "site"),
        text(r, "outcome"),
        n("durationMs"),
        n("machines"),
        n("hosts"),
        n("unmanaged"),
        n("detected"),
        n("healed"),
        n("quarantined"),
        n("changes"),
        n("batches"),
    );
    if let Some(m) = r.get("message").and_then(Value::as_str).filter(|m| !m.is_empty()) {
        line.push_str(&format!(": {}", clean(m, 300)));
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
            let v = post(&a.connect, &format!("{ROUTE}/run"), &Body { site: a.site.as_deref() })?;
            let runs = items(&v, "runs", ROUTE)?;
            let text = match a.output.output {
                Output::Json => pretty(&v)?,
                _ if runs.is_empty() => "no active site to reconcile\n".to_owned(),
                _ => runs.iter().map(|r| run_line(r) + "\n").collect(),
            };
            print(&text)?;
            let outcomes: Vec<&str> = runs.iter().map(|r| field(r, "outcome")).collect();
            if outcomes.contains(&"upstream_transient") {
                return Err(CliError::new(codes::UNAVAILABLE, "a pass could not see its site's MAAS; nothing was changed for that site"));
            }
            if outcomes.iter().any(|o| *o != "ok") {
                return Err(CliError::new(codes::SOFTWARE, "a pass failed; see its message"));
            }
            Ok(())
        }
        ReconcileCommand::Status(a) => {
            let v = get(&a.connect, &format!("{ROUTE}/status"))?;
            let sites = items(&v, "sites", ROUTE)?;
            let text = match a.output.output {
                Output::Json => pretty(&v)?,
                _ => {
                    let rows: Vec<Vec<String>> = sites
                        .iter()
                        .map(|s| {
                            let last = s.get("lastRun").cloned().unwrap_or(Value::Null);
                            let n = |k: &str| s.get(k).and_then(Value::as_u64).unwrap_or(0).to_string();
                            vec![
                                text(s, "site"),
                                text(s, "status"),
                                n("ok"),
                                n("drifted"),
                                n("unreconciled"),
                                text(&last, "startedAt"),
                                last.get("durationMs").and_then(Value::as_u64).map_or("-".into(), |d| format!("{d} ms")),
                                text(&last, "outcome"),
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
            let v = post(&a.connect, &path, &Body { reason, action })?;
            let text = match a.output.output {
                Output::Json => pretty(&v)?,
                _ => format!("{}: drift resolved ({action}); host is {}\n", text(&v, "hostname"), text(&v, "state")),
            };
            print(&text)
        }
    }
}
