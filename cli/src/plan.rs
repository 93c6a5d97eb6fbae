//! `drover plan`: a dry run of the rollout planner. Verifies a release directory against
//! trust roots at `--now` (exactly as `drover verify` does), joins it with an `observed.json`
//! (the observed part of the planner's input, [`Observed`]) and prints the plan —
//! `{"actions": […], "report": […]}` — as pretty JSON on stdout.
//!
//! With `--from-coordinator` the release and the observed state come from a live
//! coordinator (`GET /v1/plan-input`, viewer role) instead of files, and `--now` defaults to
//! the coordinator's clock at the snapshot. The release is verified here, against the
//! operator's own `--trust`: nothing is believed for having been served.

use std::path::{Path, PathBuf};

use clap::Args;
use drover_planner::observed::{Observed, PlanInputResponse, plan_input};
use drover_proto::release::ReleaseFiles;
use drover_proto::release::verify_release;
use drover_proto::trust::TrustRoots;
use drover_proto::verify::{VerifyContext, VerifyError};

use crate::client::{self, ConnectArgs};
use crate::clock;
use crate::exit::{CliError, codes};
use crate::fsio::{load_release, read_file, write_stdout};

/// Arguments of `drover plan`.
#[derive(Args)]
pub struct PlanArgs {
    /// The release directory (as `drover release` writes it).
    #[arg(long, value_name = "DIR", required_unless_present = "from_coordinator", conflicts_with = "from_coordinator")]
    release: Option<PathBuf>,
    /// Trust roots (`trust.json`) the release is verified against.
    #[arg(long, value_name = "FILE")]
    trust: PathBuf,
    /// The observed fleet state (`observed.json`: rollouts, hosts, lastRolledRef, held).
    #[arg(long, value_name = "FILE", required_unless_present = "from_coordinator", conflicts_with = "from_coordinator")]
    observed: Option<PathBuf>,
    /// The instant to verify and plan at (RFC 3339); with `--from-coordinator`, the
    /// coordinator's clock by default.
    #[arg(long, value_name = "RFC3339", required_unless_present = "from_coordinator")]
    now: Option<String>,
    /// Take the release and the observed state from the coordinator (`GET /v1/plan-input`).
    #[arg(long)]
    from_coordinator: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Parses `observed.json`, naming the JSON path of the first problem.
fn parse_observed(path: &Path, bytes: &[u8]) -> Result<Observed, CliError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let observed: Observed = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| CliError::data(format!("{} at {}: {}", path.display(), e.path(), e.inner())))?;
    de.end().map_err(|e| CliError::data(format!("{}: trailing data after the document: {e}", path.display())))?;
    Ok(observed)
}

/// Fetches the coordinator's plan input.
fn fetch(args: &PlanArgs) -> Result<PlanInputResponse, CliError> {
    let target = args.connect.resolve()?;
    let client = client::connect(&target)?;
    crate::client::block_on(client.get_json("/v1/plan-input"))
}

/// Runs `drover plan`.
pub fn run(args: &PlanArgs) -> Result<(), CliError> {
    let trust_bytes = read_file(&args.trust)?;
    let trust = TrustRoots::from_json(&trust_bytes).map_err(|e| {
        let ve = VerifyError::from(e);
        CliError::new(codes::DATA, format!("{} ({}): {ve}", args.trust.display(), ve.rule()))
    })?;
    let (now, files, observed, what) = match (&args.release, &args.observed) {
        (Some(dir), Some(obs)) => {
            let now = clock::given_or_now("--now", args.now.as_deref())?;
            let files = load_release(dir)?;
            (now, files, parse_observed(obs, &read_file(obs)?)?, (dir.display().to_string(), obs.display().to_string()))
        }
        _ => {
            let live = fetch(args)?;
            let now = match &args.now {
                Some(given) => clock::given_or_now("--now", Some(given))?,
                None => live.now,
            };
            let files = ReleaseFiles { files: live.release.into_iter().map(|(p, t)| (p, t.into_bytes())).collect() };
            let version = live.release_version;
            (
                now,
                files,
                live.observed,
                (format!("the coordinator's release version {version}"), "the coordinator's observed state".to_owned()),
            )
        }
    };
    let release = verify_release(&files, &trust, &VerifyContext::at(now))
        .map_err(|e| CliError::refused(format!("REFUSED {} ({}): {e}", what.0, e.rule())))?;
    let input = plan_input(&release, observed).map_err(|e| CliError::data(format!("{}: {e}", what.1)))?;
    let plan = drover_planner::plan(&input, now);
    let mut out = serde_json::to_vec_pretty(&plan).map_err(|e| CliError::new(codes::SOFTWARE, format!("internal error: {e}")))?;
    out.push(b'\n');
    write_stdout(&out)
}
