//! `drover maintenance`: maintenance requests, one job per host, through the coordinator.
//!
//! - `drover maintenance request [--group LABEL] [--host HOST]... [--activity A]...
//!   [--storage local|weka|all] [--reference REF] --reason TEXT` (admin): `POST
//!   /v1/maintenance`. The scope is a fleet-spec host tag (`--group`), explicit hosts
//!   (hostnames or ids, [`crate::resolve`]; an unknown hostname is 65 before anything is
//!   sent), or both (the hosts of the group); neither is refused here (64). Activities are `gpu_scrub`,
//!   `storage_cleanup`, `validate_clean`, `hw_sync_reseed`, `activate` (none given: all). The
//!   coordinator is all-or-nothing: any host it refuses is a 409 (exit 65) and nothing starts.
//!   Prints `REQUEST_ID INITIATOR STATE`, then one `JOB_ID HOSTNAME STATE` line per job;
//!   with `--wait [--timeout SECS]` it then waits for every job to finish ([`crate::wait`]).
//! - `drover maintenance get REQUEST_ID` (viewer): `GET /v1/maintenance/{id}`, the request
//!   and a table of its jobs.
//! - `drover maintenance list` (viewer): `GET /v1/maintenance`, one row per request.
//!
//! Every verb takes `-o json` to print the coordinator's JSON instead, unchanged.

use std::fmt::Write as _;

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use uuid::Uuid;

use crate::answer::{decode, print_answer};
use crate::arg_checks::{check_id, check_reason};
use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::job_view::{host_of, render_job_table};
use crate::output::{Output, OutputArgs, clean, pretty, print, table};
use crate::resolve::HostName;

/// One maintenance activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Activity {
    /// Scrub the GPUs.
    #[value(name = "gpu_scrub", alias = "gpu-scrub")]
    GpuScrub,
    /// Clean the storage named by --storage.
    #[value(name = "storage_cleanup", alias = "storage-cleanup")]
    StorageCleanup,
    /// Validate that the host is clean.
    #[value(name = "validate_clean", alias = "validate-clean")]
    ValidateClean,
    /// Re-sync and reseed the hardware inventory.
    #[value(name = "hw_sync_reseed", alias = "hw-sync-reseed")]
    HwSyncReseed,
    /// Return the host to service.
    #[value(name = "activate")]
    Activate,
}

impl Activity {
    fn wire(self) -> &'static str {
        match self {
            Activity::GpuScrub => "gpu_scrub",
            Activity::StorageCleanup => "storage_cleanup",
            Activity::ValidateClean => "validate_clean",
            Activity::HwSyncReseed => "hw_sync_reseed",
            Activity::Activate => "activate",
        }
    }
}

/// Which storage a maintenance cleans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Storage {
    /// The hosts' local disks.
    Local,
    /// The hosts' WEKA data.
    Weka,
    /// Local and WEKA.
    All,
}

impl Storage {
    fn wire(self) -> &'static str {
        match self {
            Storage::Local => "local",
            Storage::Weka => "weka",
            Storage::All => "all",
        }
    }
}

/// Arguments of `drover maintenance`.
#[derive(Args)]
pub struct MaintenanceArgs {
    #[command(subcommand)]
    command: MaintenanceCommand,
}

#[derive(Subcommand)]
enum MaintenanceCommand {
    /// Start maintenance on a group of hosts or on given hosts (admin).
    Request(RequestArgs),
    /// Show one maintenance request and its jobs (viewer).
    Get(GetArgs),
    /// List maintenance requests (viewer).
    List(ListArgs),
}

/// Arguments of `drover maintenance request`.
#[derive(Args)]
struct RequestArgs {
    /// A host tag from the latest release's fleet spec: every host carrying it (or, with
    /// --host, those of them).
    #[arg(long, value_name = "LABEL")]
    group: Option<String>,
    /// A host (its hostname or its id); repeat for more.
    #[arg(long = "host", value_name = "HOST")]
    hosts: Vec<String>,
    /// An activity; repeat for more (none given: all of them).
    #[arg(long = "activity", value_enum, value_name = "ACTIVITY")]
    activities: Vec<Activity>,
    /// Which storage storage_cleanup cleans (the coordinator's default: all).
    #[arg(long, value_enum)]
    storage: Option<Storage>,
    /// A ticket or change reference, recorded with the request.
    #[arg(long, value_name = "REF")]
    reference: Option<String>,
    /// Why (required; recorded in the jobs' events and the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: String,
    #[command(flatten)]
    wait: crate::wait::WaitArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover maintenance get`.
#[derive(Args)]
struct GetArgs {
    /// The request's id (as `drover maintenance request` printed it).
    request_id: String,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover maintenance list`.
#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// The body of `POST /v1/maintenance`.
#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceRequest<'a> {
    /// The host tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<&'a str>,
    /// Host ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Activities.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub activities: Vec<&'static str>,
    /// local, weka or all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<&'static str>,
    /// A ticket reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<&'a str>,
    /// Why.
    pub reason: &'a str,
}

pub use drover_proto::api::maintenance::MaintenanceView as MaintenanceJson;

/// A one-line, printable, non-empty text argument (64 otherwise).
fn check_text<'a>(flag: &str, value: &'a str, max: usize) -> Result<&'a str, CliError> {
    let value = value.trim();
    if value.is_empty() || value.chars().count() > max || value.chars().any(char::is_control) {
        return Err(CliError::usage(format!("{flag} must be 1 to {max} characters on one line")));
    }
    Ok(value)
}

/// The body of `POST /v1/maintenance`, or the error that stops it. Everything is checked
/// (64) before `host_ids` turns the `--host` arguments into ids, which may ask the coordinator.
fn request_body<'a>(
    args: &'a RequestArgs,
    host_ids: impl FnOnce(&[String]) -> Result<Vec<Uuid>, CliError>,
) -> Result<MaintenanceRequest<'a>, CliError> {
    if args.group.is_none() && args.hosts.is_empty() {
        return Err(CliError::usage("say which hosts: --group LABEL, --host HOST (repeatable), or both"));
    }
    let group = args.group.as_deref().map(|g| check_text("--group", g, 128)).transpose()?;
    for h in &args.hosts {
        HostName::parse("--host", h)?;
    }
    let mut activities: Vec<&'static str> = Vec::with_capacity(args.activities.len());
    for a in &args.activities {
        if !activities.contains(&a.wire()) {
            activities.push(a.wire());
        }
    }
    let reference = args.reference.as_deref().map(|r| check_text("--reference", r, 200)).transpose()?;
    let reason = check_reason(&args.reason)?;
    let mut hosts: Vec<String> = Vec::with_capacity(args.hosts.len());
    for id in if args.hosts.is_empty() { Vec::new() } else { host_ids(&args.hosts)? } {
        let id = id.to_string();
        if !hosts.contains(&id) {
            hosts.push(id);
        }
    }
    Ok(MaintenanceRequest { group, hosts, activities, storage: args.storage.map(Storage::wire), reference, reason })
}

/// The path of `drover maintenance get`.
fn get_path(request_id: &str) -> Result<String, CliError> {
    Ok(format!("/v1/maintenance/{}", check_id("REQUEST_ID", "request id", request_id)?))
}

/// What `drover maintenance request` prints: `REQUEST_ID INITIATOR STATE`, then `JOB_ID
/// HOSTNAME STATE` per job.
fn render_created(m: &MaintenanceJson) -> String {
    let mut out = format!("{} {} {}\n", clean(&m.request_id, 64), clean(or_dash(&m.initiator), 128), m.state.as_str());
    for j in &m.jobs {
        let _ = writeln!(out, "{} {} {}", clean(&j.job_id, 64), host_of(j), j.state.as_str());
    }
    out
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

/// The human view of `drover maintenance get`.
fn render_get(m: &MaintenanceJson) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: &str| {
        let _ = writeln!(out, "{:<12}{}", format!("{name}:"), clean(or_dash(value), 300));
    };
    field("Request", &m.request_id);
    field("Initiator", &m.initiator);
    field("State", m.state.as_str());
    field("Group", m.group.as_deref().unwrap_or(""));
    field("Activities", &if m.activities.is_empty() { "all".to_owned() } else { m.activities.join(", ") });
    field("Reason", &m.reason);
    field("Created", &m.created_at.to_string());
    out.push_str("Jobs:\n");
    if m.jobs.is_empty() {
        out.push_str("  (none)\n");
    }
    if !m.jobs.is_empty() {
        for line in render_job_table(&m.jobs).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// The table of `drover maintenance list`.
fn render_list(requests: &[MaintenanceJson]) -> String {
    let rows: Vec<Vec<String>> = requests
        .iter()
        .map(|m| {
            vec![
                clean(&m.request_id, 64),
                clean(or_dash(&m.initiator), 64),
                m.state.as_str().to_owned(),
                clean(or_dash(m.group.as_deref().unwrap_or("")), 64),
                m.jobs.len().to_string(),
                m.created_at.to_string(),
                clean(or_dash(&m.reason), 60),
            ]
        })
        .collect();
    table(&["REQUEST", "INITIATOR", "STATE", "GROUP", "JOBS", "CREATED", "REASON"], &rows)
}

/// Runs `drover maintenance`.
pub fn run(args: &MaintenanceArgs) -> Result<(), CliError> {
    match &args.command {
        MaintenanceCommand::Request(a) => {
            let mut session = None;
            let body = request_body(a, |hosts| {
                let s = session.insert(Session::open(&a.connect)?);
                Ok(crate::resolve::host_ids(s, "--host", hosts)?)
            })?;
            let path = "/v1/maintenance";
            let session = match session {
                Some(s) => s,
                None => Session::open(&a.connect)?,
            };
            let value: serde_json::Value = session.post(path, &body)?;
            print_answer(a.output.output, path, &value, render_created)?;
            if a.wait.wait {
                let created: MaintenanceJson = decode(path, &value)?;
                let ids: Vec<String> = created.jobs.into_iter().map(|j| j.job_id).collect();
                crate::wait::wait_jobs(&session, &ids, false, a.wait.limit(), &mut crate::wait::progress_sink(a.output.output.is_json()))?;
            }
            Ok(())
        }
        MaintenanceCommand::Get(a) => {
            let path = get_path(&a.request_id)?;
            let value = crate::client::get_once(&a.connect, &path)?;
            print_answer(a.output.output, &path, &value, render_get)
        }
        MaintenanceCommand::List(a) => {
            let path = "/v1/maintenance";
            let session = Session::open(&a.connect)?;
            // Every page; JSON is the array of requests.
            let items = crate::listing::list_all(&session, path, &[], None)?;
            let requests: Vec<MaintenanceJson> = items.iter().map(|r| decode(path, r)).collect::<Result<_, _>>()?;
            match a.output.output {
                Output::Json => print(&pretty(&serde_json::Value::Array(items))?),
                Output::Table | Output::Wide if requests.is_empty() => {
                    eprintln!("no maintenance requests");
                    Ok(())
                }
                Output::Table | Output::Wide => print(&render_list(&requests)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::{Value, json};

    use super::*;
    use crate::exit::codes;

    #[derive(Parser)]
    struct Wrap {
        #[command(subcommand)]
        command: MaintenanceCommand,
    }

    fn parse(args: &[&str]) -> MaintenanceCommand {
        Wrap::try_parse_from(std::iter::once("maintenance").chain(args.iter().copied())).expect("parse").command
    }

    fn body_of(args: &[&str]) -> Result<Value, CliError> {
        let MaintenanceCommand::Request(a) = parse(args) else { panic!("request") };
        // Ids stand for themselves here; hostnames are resolved against a coordinator in the
        // end-to-end tests.
        let ids = |hosts: &[String]| Ok(hosts.iter().map(|h| Uuid::parse_str(h).expect("a host id")).collect());
        request_body(&a, ids).map(|b| serde_json::to_value(b).expect("json"))
    }

    const H1: &str = "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10";
    const H2: &str = "0d9e1c7a-2b3c-4d5e-8f90-123456789abc";

    fn pending_job() -> Value {
        let job = crate::fixtures::job("job-8", "maintenance", H2, "gpu-a-02", drover_proto::states::JobState::Pending);
        serde_json::to_value(job).expect("json")
    }

    fn sample() -> Value {
        json!({
            "requestId": "mr-1",
            "initiator": "admin.operator",
            "reason": "quarterly scrub",
            "group": "rack-a1",
            "activities": ["gpu_scrub", "validate_clean"],
            "state": "running",
            "createdAt": "2030-01-01T00:00:00Z",
            "scope": {"group": "rack-a1", "hosts": [H2]},
            "jobs": [crate::fixtures::sample_job(), pending_job()],
            "extra": 1
        })
    }

    #[test]
    fn the_body_carries_the_scope_and_the_activities() {
        let body = body_of(&["request", "--group", "rack-a1", "--reason", "scrub"]).expect("ok");
        assert_eq!(body, json!({"group": "rack-a1", "reason": "scrub"}));
        let args = [
            "request",
            "--host",
            H1,
            "--host",
            H2,
            "--host",
            H1,
            "--activity",
            "gpu_scrub",
            "--activity",
            "storage-cleanup",
            "--storage",
            "weka",
            "--reference",
            "TICKET-1",
            "--reason",
            "scrub",
        ];
        assert_eq!(
            body_of(&args).expect("ok"),
            json!({"hosts": [H1, H2], "activities": ["gpu_scrub", "storage_cleanup"], "storage": "weka",
                   "reference": "TICKET-1", "reason": "scrub"})
        );
        let body = body_of(&["request", "--group", "rack-a1", "--host", H1, "--activity", "activate", "--reason", "r"]).expect("ok");
        assert_eq!(body, json!({"group": "rack-a1", "hosts": [H1], "activities": ["activate"], "reason": "r"}));
    }

    #[test]
    fn without_a_scope_or_a_reason_nothing_is_sent() {
        let e = body_of(&["request", "--activity", "gpu_scrub", "--reason", "r"]).expect_err("no scope");
        assert_eq!(e.code(), codes::USAGE);
        assert!(e.to_string().contains("--group") && e.to_string().contains("--host"), "{e}");
        // The same through `run`, without credentials: the scope is refused first.
        let e = run(&MaintenanceArgs { command: parse(&["request", "--reason", "r"]) }).expect_err("no scope");
        assert_eq!(e.code(), codes::USAGE);
        assert!(e.to_string().contains("--group"), "{e}");
        assert_eq!(body_of(&["request", "--group", "g", "--reason", " "]).expect_err("blank").code(), codes::USAGE);
        let e = body_of(&["request", "--host", "gpu/a-01", "--reason", "r"]).expect_err("no hostname");
        assert_eq!((e.code(), e.to_string()), (codes::USAGE, "--host \"gpu/a-01\" is not a hostname or a host id".to_owned()));
        assert_eq!(body_of(&["request", "--group", "", "--reason", "r"]).expect_err("empty group").code(), codes::USAGE);
        assert!(Wrap::try_parse_from(["maintenance", "request", "--group", "g"]).is_err(), "--reason is required");
        assert!(Wrap::try_parse_from(["maintenance", "request", "--group", "g", "--activity", "dance", "--reason", "r"]).is_err());
        assert!(Wrap::try_parse_from(["maintenance", "request", "--group", "g", "--storage", "none", "--reason", "r"]).is_err());
    }

    #[test]
    fn get_paths_are_checked() {
        assert_eq!(get_path("mr-1").expect("ok"), "/v1/maintenance/mr-1");
        assert_eq!(get_path("../jobs").expect_err("bad").code(), codes::USAGE);
        assert_eq!(get_path("").expect_err("bad").code(), codes::USAGE);
    }

    #[test]
    fn renders_the_request_its_jobs_and_the_list() {
        let m: MaintenanceJson = decode("/v1/maintenance", &sample()).expect("decode");
        assert_eq!(render_created(&m), "mr-1 admin.operator running\njob-7 gpu-a-01 failed_retryable\njob-8 gpu-a-02 pending\n");
        let out = render_get(&m);
        for needle in [
            "Request:    mr-1\n",
            "Initiator:  admin.operator\n",
            "Group:      rack-a1\n",
            "Activities: gpu_scrub, validate_clean\n",
            "Reason:     quarterly scrub\n",
            "Jobs:\n  JOB    KIND               HOST      STATE",
            "\n  job-8  maintenance        gpu-a-02  pending ",
        ] {
            assert!(out.contains(needle), "{needle:?} in\n{out}");
        }
        let list: Vec<MaintenanceJson> = decode("/v1/maintenance", &json!([sample()])).expect("decode");
        let out = render_list(&list);
        assert_eq!(
            out,
            "REQUEST  INITIATOR       STATE    GROUP    JOBS  CREATED               REASON\n\
             mr-1     admin.operator  running  rack-a1  2     2030-01-01T00:00:00Z  quarterly scrub\n"
        );
    }
}
