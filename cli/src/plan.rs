//! `drover plan`: an offline dry run of the rollout planner. Verifies a release directory
//! against trust roots at `--now` (exactly as `drover verify` does), joins it with an
//! `observed.json` (the observed part of the planner's input, [`Observed`]) and prints the
//! plan — `{"actions": […], "report": […]}` — as pretty JSON on stdout.

use std::path::{Path, PathBuf};

use clap::Args;
use drover_planner::observed::{Observed, plan_input};
use drover_proto::release::verify_release;
use drover_proto::trust::TrustRoots;
use drover_proto::verify::{VerifyContext, VerifyError};

use crate::clock;
use crate::exit::{CliError, codes};
use crate::fsio::{load_release, read_file, write_stdout};

/// Arguments of `drover plan`.
#[derive(Args)]
pub struct PlanArgs {
    /// The release directory (as `drover release` writes it).
    #[arg(long, value_name = "DIR")]
    release: PathBuf,
    /// Trust roots (`trust.json`) the release is verified against.
    #[arg(long, value_name = "FILE")]
    trust: PathBuf,
    /// The observed fleet state (`observed.json`: rollouts, hosts, lastRolledRef, held).
    #[arg(long, value_name = "FILE")]
    observed: PathBuf,
    /// The instant to verify and plan at (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    now: String,
}

/// Parses `observed.json`, naming the JSON path of the first problem.
fn parse_observed(path: &Path, bytes: &[u8]) -> Result<Observed, CliError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let observed: Observed = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| CliError::data(format!("{} at {}: {}", path.display(), e.path(), e.inner())))?;
    de.end().map_err(|e| CliError::data(format!("{}: trailing data after the document: {e}", path.display())))?;
    Ok(observed)
}

/// Runs `drover plan`.
pub fn run(args: &PlanArgs) -> Result<(), CliError> {
    let now = clock::given_or_now("--now", Some(&args.now))?;
    let trust_bytes = read_file(&args.trust)?;
    let trust = TrustRoots::from_json(&trust_bytes).map_err(|e| {
        let ve = VerifyError::from(e);
        CliError::new(codes::DATA, format!("{} ({}): {ve}", args.trust.display(), ve.rule()))
    })?;
    let files = load_release(&args.release)?;
    let release = verify_release(&files, &trust, &VerifyContext::at(now))
        .map_err(|e| CliError::refused(format!("REFUSED {} ({}): {e}", args.release.display(), e.rule())))?;
    let observed = parse_observed(&args.observed, &read_file(&args.observed)?)?;
    let input = plan_input(&release, observed).map_err(|e| CliError::data(format!("{}: {e}", args.observed.display())))?;
    let plan = drover_planner::plan(&input, now);
    let mut out = serde_json::to_vec_pretty(&plan).map_err(|e| CliError::new(codes::SOFTWARE, format!("internal error: {e}")))?;
    out.push(b'\n');
    write_stdout(&out)
}
