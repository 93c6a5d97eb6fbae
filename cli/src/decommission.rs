//! `drover decommission HOST --mode soft-reset|storage-cleanup|full|reimage [--storage
//! none|local|weka|all] [--force-release] [--erase none|quick|secure] [--remove-maas-record]
//! [--profile NAME] --reason TEXT`: start a decommission job for one host (a hostname or an
//! id, [`crate::resolve`]) through the coordinator's admin route `POST
//! /v1/hosts/{id}/decommission`.
//!
//! `--mode storage-cleanup` needs a storage other than `none`; `--force-release` and
//! `--remove-maas-record` only apply to `--mode full`, `--erase` to `full` and `reimage`,
//! `--profile` to `reimage`; all are refused here (64) before any request. The coordinator refuses an
//! unknown host id (404; an unknown hostname is refused here) and a host that is deleted or held by another unfinished job (409, the
//! message names the job), both exit 65. On success stdout carries `JOB_ID KIND STATE`, or the
//! job's JSON with `-o json`; follow it with `drover job describe JOB_ID`, or pass `--wait`
//! ([`crate::wait`]) to wait for the job to finish.
//!
//! `--mode full` takes the host out of the fleet for good, so it asks first: a y/N prompt on
//! a terminal, and without one (a script, a pipe) it is refused (64) unless `--yes` is given.
//! `--dry-run` (any mode) sends the request with `dryRun`: the coordinator runs every check a
//! real request passes (so a held or deleted host is refused the same way) and answers the
//! host, its state and the stages the job would run; nothing is started, written or audited.

use std::io::{BufRead, IsTerminal, Write};

use clap::{Args, ValueEnum};
use drover_proto::api::jobs::{DryRunView, JobJson};
use serde::Serialize;

use crate::answer::{decode, print_answer};
use crate::arg_checks::check_reason;
use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::output::{OutputArgs, clean};
use crate::resolve::HostName;

/// What a decommission does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Reset the host's software state; the host stays in the fleet.
    #[value(alias = "soft_reset")]
    SoftReset,
    /// Clean the host's storage (needs --storage local, weka or all).
    #[value(alias = "storage_cleanup")]
    StorageCleanup,
    /// Take the host out of service entirely (and release it in MAAS when MAAS holds it).
    Full,
    /// A fresh OS through MAAS on the same hardware; the host keeps its id and re-enrolls.
    Reimage,
}

impl Mode {
    fn wire(self) -> &'static str {
        match self {
            Mode::SoftReset => "soft_reset",
            Mode::StorageCleanup => "storage_cleanup",
            Mode::Full => "full",
            Mode::Reimage => "reimage",
        }
    }
}

/// Which storage a decommission cleans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Storage {
    /// No storage.
    None,
    /// The host's local disks.
    Local,
    /// The host's WEKA data.
    Weka,
    /// Local and WEKA.
    All,
}

impl Storage {
    /// The wire name.
    pub fn wire(self) -> &'static str {
        match self {
            Storage::None => "none",
            Storage::Local => "local",
            Storage::Weka => "weka",
            Storage::All => "all",
        }
    }
}

/// How MAAS erases a released machine's disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Erase {
    /// No erase.
    None,
    /// MAAS's quick erase.
    Quick,
    /// Secure erase where the disks support it.
    Secure,
}

impl Erase {
    fn wire(self) -> &'static str {
        match self {
            Erase::None => "none",
            Erase::Quick => "quick",
            Erase::Secure => "secure",
        }
    }
}

/// Arguments of `drover decommission`.
#[derive(Args)]
pub struct DecommissionArgs {
    /// The host: its hostname or its id.
    #[arg(value_name = "HOST")]
    host: String,
    /// What to do.
    #[arg(long, value_enum)]
    mode: Mode,
    /// Which storage to clean (the coordinator's default: none, except that storage-cleanup
    /// needs one).
    #[arg(long, value_enum)]
    storage: Option<Storage>,
    /// Release the host even where a holder has not let go of it (--mode full only).
    #[arg(long)]
    force_release: bool,
    /// How MAAS erases the disks when it releases the machine (--mode full or reimage; the
    /// coordinator's default: none).
    #[arg(long, value_enum)]
    erase: Option<Erase>,
    /// Delete the machine from MAAS at the end (--mode full only; the default keeps it).
    #[arg(long)]
    remove_maas_record: bool,
    /// The site profile to redeploy with (--mode reimage; the default: the site's default).
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Why (required; recorded in the job's events and the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: String,
    /// Do not ask for confirmation (--mode full asks; without a terminal it needs --yes).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Print the host, its state and the job's stages; start nothing.
    #[arg(long, conflicts_with = "wait")]
    dry_run: bool,
    #[command(flatten)]
    wait: crate::wait::WaitArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// The body of `POST /v1/hosts/{id}/decommission`.
#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DecommissionRequest<'a> {
    /// soft_reset, storage_cleanup or full.
    pub mode: &'static str,
    /// none, local, weka or all; the coordinator's default when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<&'static str>,
    /// Sent only when set.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub force_release: bool,
    /// none, quick or secure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erase: Option<&'static str>,
    /// Sent only when set.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub remove_maas_record: bool,
    /// Reimage's profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<&'a str>,
    /// Why.
    pub reason: &'a str,
    /// Sent only when set: check and describe the job, start nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// The body of the request, or the usage error (64) that stops it before any request.
fn request(args: &DecommissionArgs) -> Result<DecommissionRequest<'_>, CliError> {
    HostName::parse("HOST", &args.host)?;
    if args.mode == Mode::StorageCleanup && matches!(args.storage, None | Some(Storage::None)) {
        return Err(CliError::usage("--mode storage-cleanup needs --storage local, weka or all"));
    }
    if args.force_release && args.mode != Mode::Full {
        return Err(CliError::usage("--force-release only applies to --mode full"));
    }
    if args.remove_maas_record && args.mode != Mode::Full {
        return Err(CliError::usage("--remove-maas-record only applies to --mode full"));
    }
    if args.erase.is_some() && !matches!(args.mode, Mode::Full | Mode::Reimage) {
        return Err(CliError::usage("--erase only applies to --mode full and --mode reimage"));
    }
    if args.profile.is_some() && args.mode != Mode::Reimage {
        return Err(CliError::usage("--profile only applies to --mode reimage"));
    }
    let reason = check_reason(&args.reason)?;
    Ok(DecommissionRequest {
        mode: args.mode.wire(),
        storage: args.storage.map(Storage::wire),
        force_release: args.force_release,
        erase: args.erase.map(Erase::wire),
        remove_maas_record: args.remove_maas_record,
        profile: args.profile.as_deref(),
        reason,
        dry_run: args.dry_run,
    })
}

/// The line `drover decommission` prints: `JOB_ID KIND STATE`.
fn render(job: &JobJson) -> String {
    format!("{} {} {}\n", clean(&job.job_id, 64), clean(&job.kind, 32), job.state.as_str())
}

/// What `--dry-run` prints, from the coordinator's answer.
fn render_dry_run(answer: &DryRunView) -> String {
    let f = |s: &str| clean(s, 64);
    let mut out = format!(
        "dry run: would start a {} job on {} ({}), now {}\n  stages:\n",
        f(&answer.kind),
        f(&answer.hostname),
        f(&answer.host_id),
        answer.host_state.as_str()
    );
    for (i, stage) in answer.stages.iter().enumerate() {
        out.push_str(&format!("    {}. {}\n", i + 1, clean(stage, 120)));
    }
    out.push_str("nothing was started\n");
    out
}

/// Whether an answer to the y/N prompt is a yes.
pub fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// Asks before a full decommission (see the module doc): 64 without a terminal and without
/// `--yes`, 1 when the operator declines.
fn confirm(args: &DecommissionArgs, hostname: &str, interactive: bool) -> Result<(), CliError> {
    if args.mode != Mode::Full || args.yes || args.dry_run {
        return Ok(());
    }
    if !interactive {
        return Err(CliError::usage(format!(
            "decommission --mode full removes {} from the fleet for good; stdin is not a terminal, so pass --yes to confirm",
            clean(hostname, 64)
        )));
    }
    eprint!("Decommission {} fully (it leaves the fleet for good)? [y/N] ", clean(hostname, 64));
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(|e| CliError::new(crate::exit::codes::IO, format!("stdin: {e}")))?;
    if is_yes(&answer) { Ok(()) } else { Err(CliError::refused("not confirmed; nothing was started")) }
}

/// Runs `drover decommission`.
pub fn run(args: &DecommissionArgs) -> Result<(), CliError> {
    let body = request(args)?;
    // Refused before connecting, so a script without --yes learns it at once.
    if args.mode == Mode::Full && !args.yes && !args.dry_run && !std::io::stdin().is_terminal() {
        confirm(args, &args.host, false)?;
    }
    let session = Session::open(&args.connect)?;
    let host = crate::resolve::host(&session, "HOST", &args.host)?;
    let path = format!("/v1/hosts/{}/decommission", host.id);
    if args.dry_run {
        let answer: serde_json::Value = session.post(&path, &body)?;
        return print_answer(args.output.output, &path, &answer, render_dry_run);
    }
    confirm(args, &host.hostname, std::io::stdin().is_terminal())?;
    let value: serde_json::Value = session.post(&path, &body)?;
    print_answer(args.output.output, &path, &value, render)?;
    if args.wait.wait {
        let started: JobJson = decode(&path, &value)?;
        crate::wait::wait_jobs(
            &session,
            &[started.job_id],
            false,
            args.wait.limit(),
            &mut crate::wait::progress_sink(args.output.output.is_json()),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use drover_proto::api::jobs::JobDetail;

    use super::*;
    use crate::exit::codes;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: DecommissionArgs,
    }

    const HOST: &str = "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10";

    fn parse(extra: &[&str]) -> DecommissionArgs {
        let argv = ["decommission", HOST].into_iter().chain(extra.iter().copied());
        Wrap::try_parse_from(argv).expect("parse").args
    }

    #[test]
    fn modes_and_storage_go_on_the_wire_in_snake_case() {
        let a = parse(&["--mode", "soft-reset", "--reason", " reimage "]);
        let body = request(&a).expect("ok");
        assert_eq!(serde_json::to_value(&body).expect("json"), serde_json::json!({"mode": "soft_reset", "reason": "reimage"}));
        let a = parse(&["--mode", "storage-cleanup", "--storage", "weka", "--reason", "r"]);
        let body = serde_json::to_value(request(&a).expect("ok")).expect("json");
        assert_eq!(body, serde_json::json!({"mode": "storage_cleanup", "storage": "weka", "reason": "r"}));
        let a = parse(&["--mode", "full", "--storage", "all", "--force-release", "--reason", "r"]);
        let body = serde_json::to_value(request(&a).expect("ok")).expect("json");
        assert_eq!(body, serde_json::json!({"mode": "full", "storage": "all", "forceRelease": true, "reason": "r"}));
        let a = parse(&["--mode", "full", "--storage", "none", "--reason", "r"]);
        let body = serde_json::to_value(request(&a).expect("ok")).expect("json");
        assert_eq!(body, serde_json::json!({"mode": "full", "storage": "none", "reason": "r"}));
        let a = parse(&["--mode", "reimage", "--erase", "quick", "--profile", "gpu", "--reason", "os drift"]);
        let body = serde_json::to_value(request(&a).expect("ok")).expect("json");
        assert_eq!(body, serde_json::json!({"mode": "reimage", "erase": "quick", "profile": "gpu", "reason": "os drift"}));
        let a = parse(&["--mode", "full", "--erase", "secure", "--remove-maas-record", "--reason", "r"]);
        let body = serde_json::to_value(request(&a).expect("ok")).expect("json");
        assert_eq!(body, serde_json::json!({"mode": "full", "erase": "secure", "removeMaasRecord": true, "reason": "r"}));
    }

    #[test]
    fn bad_combinations_are_refused_before_connecting() {
        for extra in [
            &["--mode", "storage-cleanup", "--reason", "r"][..],
            &["--mode", "storage-cleanup", "--storage", "none", "--reason", "r"],
            &["--mode", "soft-reset", "--force-release", "--reason", "r"],
            &["--mode", "soft-reset", "--erase", "quick", "--reason", "r"],
            &["--mode", "reimage", "--remove-maas-record", "--reason", "r"],
            &["--mode", "full", "--profile", "p", "--reason", "r"],
            &["--mode", "full", "--reason", "  "],
        ] {
            let e = run(&parse(extra)).expect_err("refused");
            assert_eq!(e.code(), codes::USAGE, "{extra:?}: {e}");
        }
        let a = Wrap::try_parse_from(["decommission", "gpu a/01", "--mode", "full", "--reason", "r"]).expect("parse").args;
        let e = run(&a).expect_err("no hostname");
        assert_eq!((e.code(), e.to_string()), (codes::USAGE, "HOST \"gpu a/01\" is not a hostname or a host id".to_owned()));
        assert!(Wrap::try_parse_from(["decommission", HOST, "--mode", "full"]).is_err(), "--reason is required");
        assert!(Wrap::try_parse_from(["decommission", HOST, "--mode", "nuke", "--reason", "r"]).is_err());
    }

    #[test]
    fn a_full_decommission_asks_first() {
        let full = parse(&["--mode", "full", "--reason", "r"]);
        let e = confirm(&full, "gpu-a-01", false).expect_err("no terminal, no --yes");
        assert_eq!(e.code(), codes::USAGE);
        assert!(e.to_string().contains("--yes") && e.to_string().contains("gpu-a-01"), "{e}");
        confirm(&parse(&["--mode", "full", "--yes", "--reason", "r"]), "h", false).expect("--yes confirms");
        confirm(&parse(&["--mode", "full", "--dry-run", "--reason", "r"]), "h", false).expect("a dry run starts nothing");
        confirm(&parse(&["--mode", "soft-reset", "--reason", "r"]), "h", false).expect("only full asks");
        assert!(is_yes(" y\n") && is_yes("YES\n") && !is_yes("\n") && !is_yes("no\n") && !is_yes("yess"));
        assert!(Wrap::try_parse_from(["decommission", HOST, "--mode", "full", "--dry-run", "--wait", "--reason", "r"]).is_err());
    }

    #[test]
    fn a_dry_run_prints_the_coordinators_stages() {
        let answer = serde_json::json!({"dryRun": true, "hostId": HOST, "hostname": "gpu-a-01", "hostState": "active",
            "kind": "full_decommission", "stages": ["cordon", "drain", "maas_workflow (nothing to do: the host has no MAAS binding)", "delete"]});
        let text = render_dry_run(&decode("/", &answer).expect("a dry run answer"));
        assert!(
            text.starts_with(&format!(
                "dry run: would start a full_decommission job on gpu-a-01 ({HOST}), now active\n  stages:\n    1. cordon\n"
            )),
            "{text}"
        );
        assert!(text.contains("    3. maas_workflow (nothing to do: the host has no MAAS binding)\n"), "{text}");
        assert!(text.ends_with("4. delete\nnothing was started\n"), "{text}");
        let sent =
            serde_json::to_value(request(&parse(&["--mode", "full", "--dry-run", "--reason", "r"])).expect("request")).expect("json");
        assert_eq!(sent["dryRun"], true, "{sent}");
        let sent = serde_json::to_value(request(&parse(&["--mode", "full", "--yes", "--reason", "r"])).expect("request")).expect("json");
        assert!(sent.get("dryRun").is_none(), "a real request sends no dryRun: {sent}");
    }

    #[test]
    fn prints_job_kind_state() {
        let job: JobJson = decode::<JobDetail>("/", &crate::fixtures::sample_job()).expect("decode").job;
        assert_eq!(render(&job), "job-7 full_decommission failed_retryable\n");
    }
}
