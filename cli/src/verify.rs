//! `drover verify`: the offline auditor. Verifies a release directory as a whole, or single
//! artifacts (each with its `.sig` beside it), against operator-held trust roots.

use std::path::{Path, PathBuf};

use clap::Args;
use drover_proto::names::RolloutId;
use drover_proto::release::{FLEET_RESOLVED, TIMESTAMP, sig_path, verify_release};
use drover_proto::trust::TrustRoots;
use drover_proto::verify::{
    ManifestAnchors, VerifyContext, VerifyError, VersionFloor, verify_fleet_resolved, verify_manifest, verify_timestamp,
};

use crate::clock;
use crate::exit::{CliError, codes};
use crate::fsio::{load_release, read_file};

/// Arguments of `drover verify`.
#[derive(Args)]
pub struct VerifyArgs {
    /// Trust roots (`trust.json`).
    #[arg(long, value_name = "FILE")]
    trust: PathBuf,
    /// Verify as of this instant instead of now (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    now: Option<String>,
    /// Refuse a timestamp whose version is below N (the highest one you accepted).
    #[arg(long, value_name = "N")]
    min_version: Option<u64>,
    /// Release directories or artifact files. A manifest is checked against its release's
    /// `../timestamp.json`; a lone `fleet.resolved.json` against nothing but its signature and
    /// the rules (its freshness is unknown: that lives in the timestamp).
    #[arg(required = true, value_name = "DIR|FILE")]
    paths: Vec<PathBuf>,
}

fn refused(path: &Path, e: &VerifyError) -> CliError {
    CliError::refused(format!("REFUSED {} ({}): {e}", path.display(), e.rule()))
}

fn read_sig(path: &Path) -> Result<Vec<u8>, CliError> {
    let sig = PathBuf::from(sig_path(&path.to_string_lossy()));
    read_file(&sig)
}

/// Runs `drover verify`.
pub fn run(args: &VerifyArgs) -> Result<(), CliError> {
    let trust_bytes = read_file(&args.trust)?;
    let trust = TrustRoots::from_json(&trust_bytes).map_err(|e| {
        let ve = VerifyError::from(e);
        CliError::new(codes::DATA, format!("{} ({}): {ve}", args.trust.display(), ve.rule()))
    })?;
    let now = clock::given_or_now("--now", args.now.as_deref())?;
    let floor = args.min_version.map_or(VersionFloor::None, VersionFloor::AtLeast);
    let ctx = VerifyContext::at(now).with_floor(floor);
    for path in &args.paths {
        if path.is_dir() {
            let files = load_release(path)?;
            let release = verify_release(&files, &trust, &ctx).map_err(|e| refused(path, &e))?;
            println!(
                "OK {}: timestamp version {} signed at {}, fleet.resolved sha256 {}",
                path.display(),
                release.timestamp.doc.version,
                release.timestamp.doc.signed_at,
                release.fleet.sha256
            );
            for (channel, m) in &release.manifests {
                println!(
                    "   channel {channel}: rollout {} ({} hosts in {} waves), manifest sha256 {}",
                    m.manifest.rollout_id,
                    m.manifest.host_set.len(),
                    m.manifest.waves.len(),
                    m.sha256
                );
                if let Some(r) = release.roots.get(&m.manifest.rollout_id) {
                    println!(
                        "   channel {channel}: signed root {} over {} hosts, recomputed from the manifest",
                        r.root.root_hash, r.root.tree_size
                    );
                }
            }
        } else {
            verify_file(path, &trust, &ctx)?;
        }
    }
    Ok(())
}

/// What a single file given to `verify` is, by its name.
enum Artifact {
    Timestamp,
    FleetResolved,
    Manifest(RolloutId),
}

/// One artifact, recognised by its file name. A manifest needs the timestamp of its release
/// (`../timestamp.json` in the release layout) because freshness lives there.
fn verify_file(path: &Path, trust: &TrustRoots, ctx: &VerifyContext) -> Result<(), CliError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let bytes = read_file(path)?;
    // Recognise the artifact by its name before looking for its signature, so that a file
    // that is no artifact is reported as such rather than as a missing `.sig`.
    let kind = match name.as_str() {
        TIMESTAMP => Artifact::Timestamp,
        FLEET_RESOLVED => Artifact::FleetResolved,
        _ => {
            let Some(stem) = name.strip_suffix(".json") else {
                return Err(CliError::usage(format!(
                    "{}: not an artifact (expected timestamp.json, fleet.resolved.json or rollouts/<rolloutId>.json)",
                    path.display()
                )));
            };
            Artifact::Manifest(RolloutId::parse(stem).map_err(|e| CliError::usage(format!("{}: not an artifact: {e}", path.display())))?)
        }
    };
    let sig = read_sig(path)?;
    match kind {
        Artifact::Timestamp => {
            let ts = verify_timestamp(&bytes, &sig, trust, ctx).map_err(|e| refused(path, &e))?;
            println!("OK {}: timestamp version {} signed at {}", path.display(), ts.doc.version, ts.doc.signed_at);
        }
        Artifact::FleetResolved => {
            let f = verify_fleet_resolved(&bytes, &sig, trust, ctx).map_err(|e| refused(path, &e))?;
            // Freshness lives in the timestamp, which a lone fleet.resolved is not checked
            // against: say so, so that this OK is not read as "current".
            println!(
                "OK {}: fleet.resolved for commit {}, sha256 {} (signature and rules only: not checked against a timestamp, freshness unknown)",
                path.display(),
                f.fleet.meta.ci_commit,
                f.sha256
            );
        }
        Artifact::Manifest(id) => {
            let ts_path = release_timestamp_of(path);
            let ts_bytes = read_file(&ts_path)
                .map_err(|e| CliError::new(e.code(), format!("{e} (a manifest is verified against its release's timestamp)")))?;
            let ts = verify_timestamp(&ts_bytes, &read_sig(&ts_path)?, trust, ctx).map_err(|e| refused(&ts_path, &e))?;
            let anchors = ManifestAnchors { advertised_id: Some(&id), timestamp: &ts, fleet: None };
            let m = verify_manifest(&bytes, &sig, trust, ctx, anchors).map_err(|e| refused(path, &e))?;
            println!(
                "OK {}: rollout {} ({} hosts), listed in timestamp version {}",
                path.display(),
                m.manifest.rollout_id,
                m.manifest.host_set.len(),
                ts.doc.version
            );
        }
    }
    Ok(())
}

/// `../timestamp.json` seen from a manifest at `path` (`DIR/rollouts/<id>.json` →
/// `DIR/timestamp.json`), also when `path` is a bare file name inside `rollouts/`.
fn release_timestamp_of(path: &Path) -> PathBuf {
    let non_empty = |p: &Path| !p.as_os_str().is_empty();
    match path.parent().filter(|p| non_empty(p)) {
        Some(rollouts) => match rollouts.parent().filter(|p| non_empty(p)) {
            Some(release) => release.join(TIMESTAMP),
            None if rollouts.file_name().is_some() => PathBuf::from(TIMESTAMP),
            None => rollouts.join("..").join(TIMESTAMP),
        },
        None => Path::new("..").join(TIMESTAMP),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_is_checked_against_the_timestamp_one_level_up() {
        assert_eq!(release_timestamp_of(Path::new("rel/rollouts/a@b.json")), PathBuf::from("rel/timestamp.json"));
        assert_eq!(release_timestamp_of(Path::new("rollouts/a@b.json")), PathBuf::from("timestamp.json"));
        assert_eq!(release_timestamp_of(Path::new("a@b.json")), PathBuf::from("../timestamp.json"));
        assert_eq!(release_timestamp_of(Path::new("/rollouts/a@b.json")), PathBuf::from("/timestamp.json"));
        assert_eq!(release_timestamp_of(Path::new("./a@b.json")), PathBuf::from("./../timestamp.json"));
    }
}
