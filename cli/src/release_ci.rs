//! The CI side of a release: `drover release`: fleet spec → signed release directory; `drover
//! release timestamp`: re-sign only the timestamp; `drover release publish`: send a release
//! directory to the coordinator (which verifies all of it before storing it), and with
//! `--wait` follow the rollouts it opens. Listing what the coordinator stores (`drover
//! releases list`) is [`crate::release_list`]'s.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use drover_proto::canonical;
use drover_proto::keys::{KeySigner, Signer, signing_key_from_pem, verifying_key_from_text};
use drover_proto::release::{ReleaseError, ReleaseParams, TIMESTAMP, build_release, open_own_timestamp, resign_timestamp, sig_path};
use drover_proto::resolve::{ReleaseMeta, sha256_hex};
use drover_proto::sig::SignError;
use drover_proto::spec::FleetSpec;
use drover_proto::time::Time;
use ed25519_dalek::Signature;

use crate::clock;
use crate::exit::{CliError, codes};
use crate::fsio::{load_release, read_file, read_text, store_release, write_atomic};
use crate::sign_cmd::{CommandSigner, SignCmdError};

/// Arguments of `drover release`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ReleaseArgs {
    #[command(subcommand)]
    sub: Option<ReleaseSub>,
    /// The fleet spec (JSON, as `nix eval --json .#fleet` prints it).
    #[arg(long, value_name = "SPEC", required = true)]
    fleet: Option<PathBuf>,
    #[command(flatten)]
    signing: SigningArgs,
    /// The CI commit; also each channel's ref unless the spec sets one. Default: the signing
    /// time and 12 hex digits of the spec's canonical sha256, e.g. 20261121T100000Z-3f2a…
    #[arg(long, value_name = "SHA")]
    ci_commit: Option<String>,
    /// The previous release directory: its timestamp's rollouts become revertable, and the
    /// new version must exceed its version. Its timestamp must be signed by one of the keys
    /// signing now, canonical, and match the artifacts beside it.
    #[arg(long, value_name = "DIR")]
    previous: Option<PathBuf>,
    /// Output directory (must not exist, or be empty).
    #[arg(long, value_name = "DIR", required = true)]
    out: Option<PathBuf>,
}

#[derive(Subcommand)]
enum ReleaseSub {
    /// Re-sign only timestamp.json of a release (version + 1 unless --version).
    Timestamp {
        /// The release directory.
        dir: PathBuf,
        #[command(flatten)]
        signing: SigningArgs,
    },
    /// Publish a release directory to the coordinator (publisher or admin certificate).
    Publish {
        /// The release directory, as `drover release` wrote it.
        dir: PathBuf,
        /// Why, for the coordinator's audit log.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[command(flatten)]
        wait: crate::wait::WaitArgs,
        #[command(flatten)]
        connect: crate::client::ConnectArgs,
    },
}

/// How to sign, and what to stamp.
#[derive(Args)]
struct SigningArgs {
    /// Signing key, PKCS#8 PEM; repeat for several keys. With --sign-cmd, the public key
    /// (SPKI PEM) of the key the command signs with.
    #[arg(long = "key", value_name = "FILE", required = true)]
    keys: Vec<PathBuf>,
    /// External signer: gets the canonical bytes on stdin and DROVER_KEY_ID in its
    /// environment, prints the base64 signature (an HSM or YubiKey plugs in here).
    #[arg(long, value_name = "CMD")]
    sign_cmd: Option<String>,
    /// Signing time, RFC 3339 (default: now).
    #[arg(long, value_name = "RFC3339")]
    signed_at: Option<String>,
    /// Timestamp version (default: the signing time in Unix seconds, or previous + 1 if that
    /// is larger).
    #[arg(long, value_name = "N")]
    version: Option<u64>,
}

/// Either kind of signer, so one code path signs.
enum AnySigner {
    Key(KeySigner),
    Cmd(CommandSigner),
}

impl Signer for AnySigner {
    type Error = SignCmdError;
    fn key_id(&self) -> &drover_proto::keys::KeyId {
        match self {
            AnySigner::Key(k) => k.key_id(),
            AnySigner::Cmd(c) => c.key_id(),
        }
    }
    fn verifying_key(&self) -> ed25519_dalek::VerifyingKey {
        match self {
            AnySigner::Key(k) => k.verifying_key(),
            AnySigner::Cmd(c) => c.verifying_key(),
        }
    }
    fn sign(&self, message: &[u8]) -> Result<Signature, SignCmdError> {
        match self {
            AnySigner::Key(k) => {
                let Ok(sig) = k.sign(message);
                Ok(sig)
            }
            AnySigner::Cmd(c) => c.sign(message),
        }
    }
}

fn load_signers(args: &SigningArgs) -> Result<Vec<AnySigner>, CliError> {
    let mut out = Vec::new();
    for path in &args.keys {
        let text = read_text(path)?;
        let signer = match &args.sign_cmd {
            None => {
                AnySigner::Key(KeySigner::new(signing_key_from_pem(&text).map_err(|e| CliError::data(format!("{}: {e}", path.display())))?))
            }
            Some(cmd) => {
                let public = match signing_key_from_pem(&text) {
                    Ok(k) => k.verifying_key(),
                    Err(_) => verifying_key_from_text(&text).map_err(|e| CliError::data(format!("{}: {e}", path.display())))?,
                };
                AnySigner::Cmd(CommandSigner::new(cmd.clone(), public))
            }
        };
        if out.iter().any(|s: &AnySigner| s.key_id() == signer.key_id()) {
            return Err(CliError::usage(format!("{}: key {} given twice", path.display(), signer.key_id())));
        }
        out.push(signer);
    }
    Ok(out)
}

fn signed_at(args: &SigningArgs) -> Result<Time, CliError> {
    clock::given_or_now("--signed-at", args.signed_at.as_deref())
}

fn sign_error(e: impl std::fmt::Display) -> CliError {
    CliError::new(codes::SOFTWARE, e.to_string())
}

/// A [`ReleaseError`] as the CLI reports it, prefixed with `context` (the directory
/// concerned): a failing signer (or no signer, a bug: clap requires `--key`) is 70, a
/// missing file 66, and everything about the input (a timestamp that is not CI's own or not
/// intact, a version or signing time going backwards, a rollout id reused for other bytes, a
/// spec that does not resolve or holds a value with no canonical form) 65.
fn release_error(context: &str, e: ReleaseError) -> CliError {
    let message = if context.is_empty() { e.to_string() } else { format!("{context}: {e}") };
    match e {
        ReleaseError::Sign(SignError::Signer { .. }) | ReleaseError::NoSigner => CliError::new(codes::SOFTWARE, message),
        ReleaseError::Missing { .. } => CliError::new(codes::NO_INPUT, message),
        ReleaseError::Sign(SignError::Canonical(_) | SignError::Schema(_))
        | ReleaseError::Canonical(_)
        | ReleaseError::Resolve(_)
        | ReleaseError::Malformed { .. }
        | ReleaseError::VersionNotIncreasing { .. }
        | ReleaseError::TimeGoesBackwards { .. }
        | ReleaseError::RolloutIdReused { .. }
        | ReleaseError::NotOurs { .. } => CliError::data(message),
    }
}

/// Runs `drover release` or `drover release timestamp`.
pub fn run(args: ReleaseArgs) -> Result<(), CliError> {
    match args.sub {
        Some(ReleaseSub::Timestamp { dir, signing }) => return run_timestamp(&dir, &signing),
        Some(ReleaseSub::Publish { dir, reason, wait, connect }) => return run_publish(&dir, reason, wait, &connect),
        None => {}
    }
    let (Some(fleet), Some(out)) = (args.fleet, args.out) else {
        return Err(CliError::usage("drover release needs --fleet SPEC and --out DIR"));
    };
    let spec_bytes = read_file(&fleet)?;
    let spec = FleetSpec::from_json(&spec_bytes).map_err(|e| CliError::data(format!("{}: {e}", fleet.display())))?;
    let signers = load_signers(&args.signing)?;
    let created_at = signed_at(&args.signing)?;
    let ci_commit = match args.ci_commit {
        Some(c) => c,
        None => {
            // The creation time is part of the default so that a re-release of the same spec
            // opens a new rollout id: a manifest must never change bytes under its id, and
            // its bytes carry the creation time.
            let canon = canonical::to_vec_of(&spec).map_err(sign_error)?;
            let stamp: String = created_at.to_string().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
            format!("{stamp}-{}", &sha256_hex(&canon)[..12])
        }
    };
    // The previous timestamp is signed into the new one (its rollouts become revertable):
    // it must be CI's own and intact, not just any timestamp.json in that directory.
    let previous = match &args.previous {
        Some(dir) => {
            let context = format!("--previous {}", dir.display());
            let files = load_release(dir).map_err(|e| CliError::new(e.code(), format!("{context}: {e}")))?;
            Some(open_own_timestamp(&files, &signers, created_at).map_err(|e| release_error(&context, e))?)
        }
        None => None,
    };
    let default_version = {
        let by_time = u64::try_from(created_at.unix()).unwrap_or(0);
        previous.as_ref().map_or(by_time, |p| by_time.max(p.version.saturating_add(1)))
    };
    let params =
        ReleaseParams { meta: ReleaseMeta { ci_commit, created_at }, version: args.signing.version.unwrap_or(default_version), previous };
    check_out_dir(&out)?;
    let files = build_release(&spec, &params, &signers).map_err(|e| release_error("", e))?;
    store_release(&out, &files)?;
    println!("release written to {}", out.display());
    println!("  timestamp version {} signed at {}", params.version, created_at);
    for path in files.files.keys().filter(|p| !p.ends_with(".sig")) {
        let bytes = files.get(path).unwrap_or_default();
        println!("  {path}  sha256 {}", sha256_hex(bytes));
    }
    Ok(())
}

fn check_out_dir(out: &Path) -> Result<(), CliError> {
    if let Ok(mut entries) = std::fs::read_dir(out) {
        if entries.next().is_some() {
            return Err(CliError::new(codes::CANT_CREATE, format!("{} exists and is not empty; refusing to mix releases", out.display())));
        }
    } else if out.symlink_metadata().is_ok() {
        return Err(CliError::new(codes::CANT_CREATE, format!("{} exists and is not a directory", out.display())));
    }
    Ok(())
}

fn run_timestamp(dir: &Path, signing: &SigningArgs) -> Result<(), CliError> {
    let mut files = load_release(dir)?;
    let signers = load_signers(signing)?;
    let at = signed_at(signing)?;
    let doc = resign_timestamp(&mut files, signing.version, at, &signers).map_err(|e| release_error(&dir.display().to_string(), e))?;
    for path in [TIMESTAMP.to_owned(), sig_path(TIMESTAMP)] {
        write_atomic(&dir.join(&path), files.get(&path).unwrap_or_default(), 0o644, false)?;
    }
    println!("timestamp of {} re-signed: version {} at {}", dir.display(), doc.version, doc.signed_at);
    Ok(())
}

/// The route releases are published to.
const RELEASES_PATH: &str = "/v1/releases";

/// `drover release publish DIR`: the coordinator verifies the release (signatures, threshold,
/// freshness, a version above the stored one, anchors) and answers with the stored version;
/// its refusal names the rule broken and exits 65 (77 for a certificate without the role).
/// With `--wait`, it then waits for the rollouts the answer names ([`crate::wait`]).
fn run_publish(
    dir: &Path,
    reason: Option<String>,
    wait: crate::wait::WaitArgs,
    connect: &crate::client::ConnectArgs,
) -> Result<(), CliError> {
    let files = load_release(dir)?;
    let request = drover_proto::publish::PublishRequest::from_files(&files, reason)
        .ok_or_else(|| CliError::data(format!("{}: a release file is not UTF-8 text", dir.display())))?;
    let session = crate::client::Session::open(connect)?;
    let resp: drover_proto::publish::PublishResponse = session.post(RELEASES_PATH, &request)?;
    println!("published release version {} from {}", resp.version, dir.display());
    for id in &resp.rollouts {
        println!("  rollout {id}");
    }
    if !wait.wait {
        return Ok(());
    }
    let ids = opened_rollouts(&files, &resp.rollouts)?;
    crate::wait::wait_rollouts(&session, &ids, wait.limit(), &mut std::io::stdout().lock())?;
    println!("every rollout of release version {} converged", resp.version);
    Ok(())
}

/// The rollouts a release opens ([`crate::wait::current_rollouts`]), each of which the
/// coordinator's answer must name (76 otherwise: the answer is not the API's). The
/// revertable ones the answer also names were opened by earlier releases (and may well be
/// superseded), so they are not waited for.
fn opened_rollouts(files: &drover_proto::release::ReleaseFiles, answered: &[String]) -> Result<Vec<String>, CliError> {
    let ids = crate::wait::current_rollouts(files.get(TIMESTAMP).unwrap_or_default())?;
    if let Some(id) = ids.iter().find(|id| !answered.contains(id)) {
        return Err(CliError::new(codes::PROTOCOL, format!("the coordinator's answer does not name the release's rollout {id}")));
    }
    Ok(ids)
}
