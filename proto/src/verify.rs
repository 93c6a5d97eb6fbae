//! Verification: each check is named after the rule it enforces, and each refusal is a
//! variant of [`VerifyError`] naming that rule.
//!
//! Order matters and is fixed: bytes must be canonical, and carry only safe integers (a rule
//! of the artifact schema), before anything is parsed; signatures
//! must reach the threshold before any field is trusted; only then are dates, versions and
//! cross-artifact anchors checked. Time is always the caller's `now`.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;

use crate::artifacts::{self, FleetResolved, HostSetEntry, RolloutManifest, SCHEMA_VERSION, SchemaError, TimestampDoc};
use crate::canonical;
use crate::intent::Intent;
use crate::keys::KeyId;
use crate::names::{RolloutId, check_store_path};
use crate::resolve::sha256_hex;
use crate::sig::{Envelope, SignatureEntry, SignatureFile};
use crate::task::Task;
use crate::time::Time;
use crate::trust::{KeySet, TrustError, TrustRoots};

/// The most signature entries read from one signature file or envelope; more is refused
/// rather than verified one by one.
pub const MAX_SIGNATURES: usize = 64;

/// How far in the future a signing time may lie before it is refused (clock skew).
pub const DEFAULT_MAX_FUTURE_SKEW_SECS: u64 = 300;

/// Every way verification refuses, named after the rule broken.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Received bytes are not their own RFC 8785 canonical form.
    #[error("{artifact}: bytes are not RFC 8785 canonical JSON")]
    NotCanonical {
        /// Which artifact.
        artifact: String,
    },
    /// Schema rule: a signed document carries an integer beyond ±(2^53 − 1), whose value
    /// depends on who reads it (see [`crate::artifacts::check_safe_integers`]).
    #[error("{artifact}: {source}")]
    UnsafeInteger {
        /// Which artifact.
        artifact: String,
        /// Where, and which number.
        #[source]
        source: SchemaError,
    },
    /// The artifact or its signature file does not parse as its type.
    #[error("{artifact}: malformed: {message}")]
    Malformed {
        /// Which artifact.
        artifact: String,
        /// What the parser reported.
        message: String,
    },
    /// A schema version this build does not understand.
    #[error("{artifact}: schemaVersion {found} is not supported (expected {SCHEMA_VERSION})")]
    UnsupportedSchemaVersion {
        /// Which artifact.
        artifact: String,
        /// The version found.
        found: u64,
    },
    /// A signature that does not verify under its key.
    #[error("{artifact}: signature by key {key_id} does not verify")]
    BadSignature {
        /// Which artifact.
        artifact: String,
        /// The key named.
        key_id: KeyId,
    },
    /// A signature by a key the trust roots do not list.
    #[error("{artifact}: signed by unknown key {key_id}")]
    UnknownKey {
        /// Which artifact.
        artifact: String,
        /// The key named.
        key_id: KeyId,
    },
    /// A trust set that lists one key twice.
    #[error("trust roots list key {key_id} more than once")]
    DuplicateKey {
        /// The key.
        key_id: KeyId,
    },
    /// The trust roots themselves are unusable.
    #[error("trust roots: {message}")]
    BadTrust {
        /// What is wrong with them.
        message: String,
    },
    /// A signature by a trusted key outside its validity window.
    #[error("{artifact}: key {key_id} is not valid at {at}")]
    KeyNotValidAt {
        /// Which artifact.
        artifact: String,
        /// The key.
        key_id: KeyId,
        /// The verification time.
        at: Time,
    },
    /// An algorithm other than ed25519.
    #[error("{artifact}: signature algorithm {alg:?} is not supported")]
    UnsupportedAlgorithm {
        /// Which artifact.
        artifact: String,
        /// The algorithm named.
        alg: String,
    },
    /// Fewer distinct valid keys than the threshold.
    #[error("{artifact}: {valid} distinct valid signature(s), threshold is {threshold}")]
    BelowThreshold {
        /// Which artifact.
        artifact: String,
        /// Distinct valid keys.
        valid: usize,
        /// Required.
        threshold: usize,
    },
    /// Older than its freshness window.
    #[error("{artifact}: signed at {signed_at}, older than the {window_secs}s freshness window of channel {channel:?} at {now}")]
    Stale {
        /// Which artifact.
        artifact: String,
        /// When signed.
        signed_at: Time,
        /// The verification time.
        now: Time,
        /// The window.
        window_secs: u64,
        /// The channel whose window it is.
        channel: String,
    },
    /// Dated in the future beyond the allowed skew.
    #[error("{artifact}: dated {signed_at}, in the future of {now} by more than {skew_secs}s")]
    FutureDated {
        /// Which artifact.
        artifact: String,
        /// Its date.
        signed_at: Time,
        /// The verification time.
        now: Time,
        /// The allowed skew.
        skew_secs: u64,
    },
    /// Signed before the trust's rejectBefore.
    #[error("{artifact}: signed at {signed_at}, before the trust roots' rejectBefore {reject_before}")]
    RejectedBefore {
        /// Which artifact.
        artifact: String,
        /// When signed.
        signed_at: Time,
        /// The cut-off.
        reject_before: Time,
    },
    /// A timestamp version below the highest accepted (or equal to it, where it must exceed it).
    #[error("timestamp version {version} {}", rollback_said(*.version, *.floor, *.equal_allowed))]
    VersionRollback {
        /// The version received.
        version: u64,
        /// The highest accepted so far.
        floor: u64,
        /// Whether an equal version would have passed.
        equal_allowed: bool,
    },
    /// The manifest's rolloutId is not `{channel}@{channelRef}`, or not the id asked for.
    #[error("rollout id mismatch: advertised {advertised}, manifest fields give {computed}")]
    RolloutIdMismatch {
        /// The id claimed.
        advertised: String,
        /// The id recomputed.
        computed: String,
    },
    /// The manifest was not projected from this fleet.resolved.
    #[error("rollout {rollout_id}: fleetResolvedHash {manifest_hash} does not match fleet.resolved {fleet_hash}")]
    FleetResolvedHashMismatch {
        /// The rollout.
        rollout_id: RolloutId,
        /// The anchor inside the manifest.
        manifest_hash: String,
        /// The fleet.resolved it was paired with.
        fleet_hash: String,
    },
    /// The fleet.resolved is not the one the timestamp lists.
    #[error("fleet.resolved.json has sha256 {actual}, the timestamp lists {listed}")]
    FleetResolvedNotInTimestamp {
        /// The sha256 in the timestamp.
        listed: String,
        /// The sha256 of the file given.
        actual: String,
    },
    /// The timestamp does not list this manifest (id and sha256).
    #[error("rollout {rollout_id} with manifest sha256 {manifest_sha256} is not listed in the timestamp")]
    ManifestNotInTimestamp {
        /// The rollout.
        rollout_id: RolloutId,
        /// Its manifest's sha256.
        manifest_sha256: String,
    },
    /// A timestamp channel whose manifest the release does not contain.
    #[error("timestamp lists rollout {rollout_id} for channel {channel:?} but the release has no such manifest")]
    ManifestMissing {
        /// The channel.
        channel: String,
        /// The rollout listed.
        rollout_id: RolloutId,
    },
    /// Host-set or budget host lists out of producer order.
    #[error("rollout {rollout_id}: hostSet, waves or budget host lists are not in canonical order")]
    UnsortedManifest {
        /// The rollout.
        rollout_id: RolloutId,
    },
    /// The host is not in the manifest's host set.
    #[error("host {hostname:?} is not in rollout {rollout_id}")]
    HostNotInManifest {
        /// The host.
        hostname: String,
        /// The rollout.
        rollout_id: RolloutId,
    },
    /// The intent's wave is not the manifest's wave for the host.
    #[error("host {hostname:?}: intent says wave {intent_wave}, manifest says {manifest_wave}")]
    WaveMismatch {
        /// The host.
        hostname: String,
        /// Claimed.
        intent_wave: u32,
        /// Signed by CI.
        manifest_wave: u32,
    },
    /// The intent's target is not the manifest's target for the host.
    #[error("host {hostname:?}: intent target {intent_target} is not the manifest's {manifest_target}")]
    TargetMismatch {
        /// The host.
        hostname: String,
        /// Claimed.
        intent_target: String,
        /// Signed by CI.
        manifest_target: String,
    },
    /// The intent names another manifest than the one verified.
    #[error("intent names manifest sha256 {intent_sha256}, the verified manifest is {manifest_sha256}")]
    ManifestHashMismatch {
        /// Claimed.
        intent_sha256: String,
        /// Verified.
        manifest_sha256: String,
    },
    /// A per-host message for another host.
    #[error("{artifact} is for host {addressed}, this host is {actual}")]
    WrongHost {
        /// intent or task.
        artifact: String,
        /// Host id in the message.
        addressed: String,
        /// This host's id.
        actual: String,
    },
    /// A host's entry and audit path do not lead to the signed root (`docs/manifest-proofs.md`).
    #[error("rollout {rollout_id}: the proof of host {hostname:?} does not hold: {source}")]
    ProofInvalid {
        /// The host the entry names.
        hostname: String,
        /// The rollout.
        rollout_id: RolloutId,
        /// Which proof rule failed (boxed: it is rare, and keeps every `Result` small).
        #[source]
        source: Box<crate::merkle::ProofError>,
    },
    /// A manifest in a release without its signed root.
    #[error("rollout {rollout_id}: the release has no signed root roots/{rollout_id}.json for its manifest")]
    RootMissing {
        /// The rollout.
        rollout_id: RolloutId,
    },
    /// A signed root that is not its manifest's projection.
    #[error("rollout {rollout_id}: roots/{rollout_id}.json is not the root of its manifest ({reason})")]
    RootMismatch {
        /// The rollout.
        rollout_id: RolloutId,
        /// What differs.
        reason: String,
    },
    /// A per-host message past its expiry.
    #[error("{artifact} expired at {expires_at} (now {now})")]
    Expired {
        /// intent or task.
        artifact: String,
        /// Its expiry.
        expires_at: Time,
        /// The verification time.
        now: Time,
    },
}

/// What a [`VerifyError::VersionRollback`] says after "timestamp version N": true for an
/// equal version as much as for a lower one.
fn rollback_said(version: u64, floor: u64, equal_allowed: bool) -> String {
    match (version == floor, equal_allowed) {
        (true, _) => format!("was already accepted: a new release must have a version above {floor}"),
        (false, true) => format!("is below the highest accepted ({floor})"),
        (false, false) => format!("is below the highest accepted ({floor}), and must exceed it"),
    }
}

impl VerifyError {
    /// The name of the rule broken (the variant's name), stable for events and metrics.
    pub fn rule(&self) -> &'static str {
        match self {
            VerifyError::NotCanonical { .. } => "NotCanonical",
            VerifyError::UnsafeInteger { .. } => "UnsafeInteger",
            VerifyError::Malformed { .. } => "Malformed",
            VerifyError::UnsupportedSchemaVersion { .. } => "UnsupportedSchemaVersion",
            VerifyError::BadSignature { .. } => "BadSignature",
            VerifyError::UnknownKey { .. } => "UnknownKey",
            VerifyError::DuplicateKey { .. } => "DuplicateKey",
            VerifyError::BadTrust { .. } => "BadTrust",
            VerifyError::KeyNotValidAt { .. } => "KeyNotValidAt",
            VerifyError::UnsupportedAlgorithm { .. } => "UnsupportedAlgorithm",
            VerifyError::BelowThreshold { .. } => "BelowThreshold",
            VerifyError::Stale { .. } => "Stale",
            VerifyError::FutureDated { .. } => "FutureDated",
            VerifyError::RejectedBefore { .. } => "RejectedBefore",
            VerifyError::VersionRollback { .. } => "VersionRollback",
            VerifyError::RolloutIdMismatch { .. } => "RolloutIdMismatch",
            VerifyError::FleetResolvedHashMismatch { .. } => "FleetResolvedHashMismatch",
            VerifyError::FleetResolvedNotInTimestamp { .. } => "FleetResolvedNotInTimestamp",
            VerifyError::ManifestNotInTimestamp { .. } => "ManifestNotInTimestamp",
            VerifyError::ManifestMissing { .. } => "ManifestMissing",
            VerifyError::UnsortedManifest { .. } => "UnsortedManifest",
            VerifyError::HostNotInManifest { .. } => "HostNotInManifest",
            VerifyError::WaveMismatch { .. } => "WaveMismatch",
            VerifyError::TargetMismatch { .. } => "TargetMismatch",
            VerifyError::ManifestHashMismatch { .. } => "ManifestHashMismatch",
            VerifyError::WrongHost { .. } => "WrongHost",
            VerifyError::Expired { .. } => "Expired",
            VerifyError::ProofInvalid { .. } => "ProofInvalid",
            VerifyError::RootMissing { .. } => "RootMissing",
            VerifyError::RootMismatch { .. } => "RootMismatch",
        }
    }
}

impl From<TrustError> for VerifyError {
    fn from(e: TrustError) -> Self {
        match e {
            TrustError::DuplicateKey { key_id } => VerifyError::DuplicateKey { key_id },
            other => VerifyError::BadTrust { message: other.to_string() },
        }
    }
}

fn malformed(artifact: &str, message: impl ToString) -> VerifyError {
    VerifyError::Malformed { artifact: artifact.to_owned(), message: message.to_string() }
}

/// Rule: received bytes are their own canonical form. Returns the parsed value, to be typed
/// only once the signatures hold.
pub fn check_canonical(artifact: &str, bytes: &[u8]) -> Result<serde_json::Value, VerifyError> {
    canonical::parse_if_canonical(bytes).ok_or_else(|| VerifyError::NotCanonical { artifact: artifact.to_owned() })
}

/// Rule (artifact schema): no integer beyond ±(2^53 − 1). Checked on the parsed value before
/// the signatures, like canonical form: it is a property of the bytes, not of who signed them.
pub fn check_safe_integers(artifact: &str, value: &serde_json::Value) -> Result<(), VerifyError> {
    artifacts::check_safe_integers(value).map_err(|source| VerifyError::UnsafeInteger { artifact: artifact.to_owned(), source })
}

/// Types a value whose signatures already verified.
fn parse_signed<T: DeserializeOwned>(artifact: &str, value: serde_json::Value) -> Result<T, VerifyError> {
    serde_json::from_value(value).map_err(|e| malformed(artifact, e))
}

/// Rule: distinct valid keys reach the threshold. A key listed twice in `signatures` counts
/// once. Returns the keys that counted. When the threshold is missed, the first specific
/// failure (bad signature, unknown key, key outside its window) is reported in preference to
/// the bare count, so a single-key setup always learns the real reason.
pub fn check_threshold(
    artifact: &str,
    message: &[u8],
    signatures: &[SignatureEntry],
    keys: &KeySet,
    now: Time,
) -> Result<BTreeSet<KeyId>, VerifyError> {
    if signatures.len() > MAX_SIGNATURES {
        return Err(malformed(artifact, format!("{} signatures; at most {MAX_SIGNATURES} are read", signatures.len())));
    }
    let mut valid = BTreeSet::new();
    let mut tried = BTreeSet::new();
    let mut first_failure = None;
    for entry in signatures {
        // Each key is tried once: a repeated entry never counts twice, nor costs twice.
        if !tried.insert(&entry.key_id) {
            continue;
        }
        let failure = if entry.alg != "ed25519" {
            Some(VerifyError::UnsupportedAlgorithm { artifact: artifact.to_owned(), alg: entry.alg.clone() })
        } else if let Some(key) = keys.get(&entry.key_id) {
            match entry.decode() {
                Some(sig) if key.key.verify_strict(message, &sig).is_ok() => {
                    if key.valid_at(now) {
                        valid.insert(entry.key_id.clone());
                        None
                    } else {
                        Some(VerifyError::KeyNotValidAt { artifact: artifact.to_owned(), key_id: entry.key_id.clone(), at: now })
                    }
                }
                _ => Some(VerifyError::BadSignature { artifact: artifact.to_owned(), key_id: entry.key_id.clone() }),
            }
        } else {
            Some(VerifyError::UnknownKey { artifact: artifact.to_owned(), key_id: entry.key_id.clone() })
        };
        if first_failure.is_none() {
            first_failure = failure;
        }
    }
    if valid.len() >= keys.threshold() {
        return Ok(valid);
    }
    Err(first_failure.unwrap_or(VerifyError::BelowThreshold {
        artifact: artifact.to_owned(),
        valid: valid.len(),
        threshold: keys.threshold(),
    }))
}

/// Rule: a detached signature file reaches the threshold over `bytes`.
pub fn check_detached(artifact: &str, bytes: &[u8], sig_bytes: &[u8], keys: &KeySet, now: Time) -> Result<BTreeSet<KeyId>, VerifyError> {
    let sig_artifact = format!("{artifact}.sig");
    let file: SignatureFile = serde_json::from_slice(sig_bytes).map_err(|e| malformed(&sig_artifact, e))?;
    check_threshold(artifact, bytes, &file.signatures, keys, now)
}

/// Rule: nothing signed before the trust's rejectBefore counts.
pub fn check_reject_before(artifact: &str, signed_at: Time, keys: &KeySet) -> Result<(), VerifyError> {
    match keys.reject_before() {
        Some(cut) if signed_at < cut => Err(VerifyError::RejectedBefore { artifact: artifact.to_owned(), signed_at, reject_before: cut }),
        _ => Ok(()),
    }
}

/// Rule: not dated in the future beyond the skew.
pub fn check_not_future(artifact: &str, at: Time, now: Time, skew_secs: u64) -> Result<(), VerifyError> {
    if at > now.plus_secs(skew_secs) {
        return Err(VerifyError::FutureDated { artifact: artifact.to_owned(), signed_at: at, now, skew_secs });
    }
    Ok(())
}

fn check_schema(artifact: &str, found: u64) -> Result<(), VerifyError> {
    if found != SCHEMA_VERSION {
        return Err(VerifyError::UnsupportedSchemaVersion { artifact: artifact.to_owned(), found });
    }
    Ok(())
}

/// How the caller's persisted highest timestamp version bounds the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VersionFloor {
    /// Nothing accepted yet.
    #[default]
    None,
    /// The same version may be seen again (an agent re-fetching), lower may not.
    AtLeast(u64),
    /// Must be strictly newer (a coordinator accepting a publish).
    Above(u64),
}

/// What [`verify_timestamp`] does with a timestamp older than a channel's freshness window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Freshness {
    /// Refuse it (`Stale`): the safe default, for agents, `drover verify` and `drover plan`.
    #[default]
    Enforce,
    /// Accept it and leave staleness to the caller: the coordinator, whose planner keeps a
    /// stale channel from opening, dispatching or rolling back while soak, health gates and
    /// confirm deadlines go on (RFC-0002 §4 step 0) — and raises the alert. Every other check
    /// (signatures, canonical bytes, rejectBefore, future date, version floor) still applies.
    ReportStale,
}

/// The time and version context of a verification.
#[derive(Debug, Clone, Copy)]
pub struct VerifyContext {
    /// The verification time.
    pub now: Time,
    /// Allowed future skew.
    pub max_future_skew_secs: u64,
    /// The timestamp version floor.
    pub version_floor: VersionFloor,
    /// Whether a stale timestamp is refused ([`Freshness::Enforce`]) or reported.
    pub freshness: Freshness,
}

impl VerifyContext {
    /// `now`, default skew, no version floor, staleness refused.
    pub fn at(now: Time) -> Self {
        VerifyContext {
            now,
            max_future_skew_secs: DEFAULT_MAX_FUTURE_SKEW_SECS,
            version_floor: VersionFloor::None,
            freshness: Freshness::Enforce,
        }
    }

    /// The same context, accepting a stale timestamp ([`Freshness::ReportStale`]).
    pub fn reporting_stale(self) -> Self {
        VerifyContext { freshness: Freshness::ReportStale, ..self }
    }

    /// The same context with a version floor.
    pub fn with_floor(self, version_floor: VersionFloor) -> Self {
        VerifyContext { version_floor, ..self }
    }
}

/// The rules every CI-signed artifact shares, in their fixed order: canonical bytes, safe
/// integers, the CI threshold, the typed shape, the schema version, rejectBefore and no future date.
/// `dated` gives the artifact's schema version and signing time.
fn open_ci_artifact<T: DeserializeOwned>(
    artifact: &str,
    bytes: &[u8],
    sig: &[u8],
    trust: &TrustRoots,
    ctx: &VerifyContext,
    dated: impl Fn(&T) -> (u64, Time),
) -> Result<T, VerifyError> {
    let value = check_canonical(artifact, bytes)?;
    check_safe_integers(artifact, &value)?;
    check_detached(artifact, bytes, sig, &trust.ci, ctx.now)?;
    let parsed: T = parse_signed(artifact, value)?;
    let (schema_version, signed_at) = dated(&parsed);
    check_schema(artifact, schema_version)?;
    check_reject_before(artifact, signed_at, &trust.ci)?;
    check_not_future(artifact, signed_at, ctx.now, ctx.max_future_skew_secs)?;
    Ok(parsed)
}

/// Held by every `Verified*` value: its field is private, so outside this crate such a value
/// exists only because a verification function returned it (fields stay readable).
///
/// ```compile_fail
/// use drover_proto::verify::{Proof, VerifiedManifest};
/// // A forged "verified" manifest does not compile: `Proof`'s field is private.
/// fn forge(manifest: drover_proto::artifacts::RolloutManifest) -> VerifiedManifest {
///     VerifiedManifest { manifest, sha256: String::new(), _proof: Proof(()) }
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Proof(pub(crate) ());

/// A verified `fleet.resolved.json`.
#[derive(Debug, Clone)]
pub struct VerifiedFleet {
    /// Its content.
    pub fleet: FleetResolved,
    /// sha256 (hex) of its bytes.
    pub sha256: String,
    /// Only verification makes one.
    _proof: Proof,
}

/// Verifies `fleet.resolved.json`: canonical, signed, schema, rejectBefore, not future-dated.
pub fn verify_fleet_resolved(bytes: &[u8], sig: &[u8], trust: &TrustRoots, ctx: &VerifyContext) -> Result<VerifiedFleet, VerifyError> {
    const A: &str = "fleet.resolved.json";
    let fleet: FleetResolved = open_ci_artifact(A, bytes, sig, trust, ctx, |f: &FleetResolved| (f.meta.schema_version, f.meta.created_at))?;
    Ok(VerifiedFleet { fleet, sha256: sha256_hex(bytes), _proof: Proof(()) })
}

/// A verified `timestamp.json`.
#[derive(Debug, Clone)]
pub struct VerifiedTimestamp {
    /// Its content.
    pub doc: TimestampDoc,
    /// sha256 (hex) of its bytes.
    pub sha256: String,
    /// Only verification makes one.
    _proof: Proof,
}

/// Verifies `timestamp.json`: canonical, signed, schema, rejectBefore, not future-dated,
/// fresh for every channel it lists, and not a version rollback.
pub fn verify_timestamp(bytes: &[u8], sig: &[u8], trust: &TrustRoots, ctx: &VerifyContext) -> Result<VerifiedTimestamp, VerifyError> {
    const A: &str = "timestamp.json";
    let doc: TimestampDoc = open_ci_artifact(A, bytes, sig, trust, ctx, |d: &TimestampDoc| (d.schema_version, d.signed_at))?;
    // A channel's entry (current and revertable) names rollouts of that channel only, so a
    // verified release can never file one channel's manifest under another.
    // Freshness is per channel: a timestamp listing none would never go stale.
    if doc.channels.is_empty() {
        return Err(malformed(A, "lists no channels"));
    }
    for (name, c) in &doc.channels {
        let mut ids = BTreeSet::new();
        for id in std::iter::once(&c.rollout_id).chain(c.revertable.iter().map(|r| &r.rollout_id)) {
            if id.channel() != name {
                return Err(malformed(A, format!("channel {name:?} lists rollout {id}, which belongs to another channel")));
            }
            // One id, one manifest: an id listed twice could pin two different sha256.
            if !ids.insert(id) {
                return Err(malformed(A, format!("channel {name:?} lists rollout {id} more than once")));
            }
        }
    }

    // Every channel's window must hold; CI re-signs within the tightest one.
    if let Some((channel, window)) = doc.tightest_window().filter(|_| ctx.freshness == Freshness::Enforce) {
        if ctx.now.secs_since(doc.signed_at) > i64::try_from(window).unwrap_or(i64::MAX) {
            return Err(VerifyError::Stale {
                artifact: A.to_owned(),
                signed_at: doc.signed_at,
                now: ctx.now,
                window_secs: window,
                channel: channel.to_owned(),
            });
        }
    }
    match ctx.version_floor {
        VersionFloor::AtLeast(floor) if doc.version < floor => {
            return Err(VerifyError::VersionRollback { version: doc.version, floor, equal_allowed: true });
        }
        VersionFloor::Above(floor) if doc.version <= floor => {
            return Err(VerifyError::VersionRollback { version: doc.version, floor, equal_allowed: false });
        }
        _ => {}
    }
    Ok(VerifiedTimestamp { doc, sha256: sha256_hex(bytes), _proof: Proof(()) })
}

/// A verified rollout manifest.
#[derive(Debug, Clone)]
pub struct VerifiedManifest {
    /// Its content.
    pub manifest: RolloutManifest,
    /// sha256 (hex) of its bytes.
    pub sha256: String,
    /// Only verification makes one.
    _proof: Proof,
}

/// What a manifest is checked against besides the trust roots.
#[derive(Debug, Clone, Copy)]
pub struct ManifestAnchors<'a> {
    /// The id the manifest was asked for under (the URL or file name), if any.
    pub advertised_id: Option<&'a RolloutId>,
    /// A verified timestamp that must list the manifest.
    pub timestamp: &'a VerifiedTimestamp,
    /// A verified fleet.resolved the manifest must be projected from (when verifying a whole
    /// release). Without it, the current rollout of a channel is anchored to the timestamp's
    /// `fleetResolvedSha256`; a revertable one is anchored by its listed sha256 alone.
    pub fleet: Option<&'a VerifiedFleet>,
}

/// Verifies a rollout manifest: canonical, signed, schema, rejectBefore, rolloutId recomputed
/// from its fields, sorted, listed in the fresh timestamp, anchored to its fleet.resolved.
pub fn verify_manifest(
    bytes: &[u8],
    sig: &[u8],
    trust: &TrustRoots,
    ctx: &VerifyContext,
    anchors: ManifestAnchors<'_>,
) -> Result<VerifiedManifest, VerifyError> {
    let artifact = match anchors.advertised_id {
        Some(id) => format!("rollouts/{id}.json"),
        None => "rollout manifest".to_owned(),
    };
    let manifest: RolloutManifest =
        open_ci_artifact(&artifact, bytes, sig, trust, ctx, |m: &RolloutManifest| (m.schema_version, m.created_at))?;
    let computed = check_rollout_id(&artifact, &manifest.rollout_id, &manifest.channel, &manifest.channel_ref, anchors.advertised_id)?;
    if !manifest.check_sorted() {
        return Err(VerifyError::UnsortedManifest { rollout_id: computed });
    }
    let sha256 = sha256_hex(bytes);
    check_listed_and_anchored(&computed, &manifest.channel, &sha256, &manifest.fleet_resolved_hash, &anchors)?;
    Ok(VerifiedManifest { manifest, sha256, _proof: Proof(()) })
}

/// Rule: a rollout's id is `{channel}@{channelRef}`, recomputed from the document's fields,
/// and both the id the document claims and the one it was asked for under are that id.
fn check_rollout_id(
    artifact: &str,
    claimed: &RolloutId,
    channel: &str,
    channel_ref: &str,
    advertised: Option<&RolloutId>,
) -> Result<RolloutId, VerifyError> {
    let computed = RolloutId::new(channel, channel_ref).map_err(|e| malformed(artifact, e))?;
    for advertised in [Some(claimed), advertised].into_iter().flatten() {
        if *advertised != computed {
            return Err(VerifyError::RolloutIdMismatch { advertised: advertised.to_string(), computed: computed.to_string() });
        }
    }
    Ok(computed)
}

/// Rules: the fresh timestamp lists `(rollout, manifest_sha256)`, and the document is anchored
/// to its fleet.resolved — the one given, or for a channel's current rollout the timestamp's
/// (a revertable one is anchored by its listed sha256 alone).
fn check_listed_and_anchored(
    rollout: &RolloutId,
    channel: &str,
    manifest_sha256: &str,
    fleet_resolved_hash: &str,
    anchors: &ManifestAnchors<'_>,
) -> Result<(), VerifyError> {
    let ts = &anchors.timestamp.doc;
    if !ts.lists(rollout, manifest_sha256) {
        return Err(VerifyError::ManifestNotInTimestamp { rollout_id: rollout.clone(), manifest_sha256: manifest_sha256.to_owned() });
    }
    let is_current = ts.channels.get(channel).is_some_and(|c| c.rollout_id == *rollout);
    let expected_fleet = match anchors.fleet {
        Some(f) => Some(f.sha256.as_str()),
        None if is_current => Some(ts.fleet_resolved_sha256.as_str()),
        None => None,
    };
    if let Some(fleet_hash) = expected_fleet.filter(|h| *h != fleet_resolved_hash) {
        return Err(VerifyError::FleetResolvedHashMismatch {
            rollout_id: rollout.clone(),
            manifest_hash: fleet_resolved_hash.to_owned(),
            fleet_hash: fleet_hash.to_owned(),
        });
    }
    Ok(())
}

/// Rule: a per-host message is for this host and within its validity window.
fn check_per_host(
    artifact: &str,
    host_id: &str,
    expected_host_id: &str,
    issued_at: Time,
    expires_at: Time,
    ctx: &VerifyContext,
) -> Result<(), VerifyError> {
    if host_id != expected_host_id {
        return Err(VerifyError::WrongHost {
            artifact: artifact.to_owned(),
            addressed: host_id.to_owned(),
            actual: expected_host_id.to_owned(),
        });
    }
    check_not_future(artifact, issued_at, ctx.now, ctx.max_future_skew_secs)?;
    if ctx.now > expires_at {
        return Err(VerifyError::Expired { artifact: artifact.to_owned(), expires_at, now: ctx.now });
    }
    Ok(())
}

fn open_envelope<T: DeserializeOwned>(artifact: &str, env: &Envelope, director: &KeySet, now: Time) -> Result<T, VerifyError> {
    check_safe_integers(artifact, &env.signed)?;
    let bytes = env.signed_bytes().map_err(|e| malformed(artifact, e))?;
    check_threshold(artifact, &bytes, &env.signatures, director, now)?;
    env.payload().map_err(|e| malformed(artifact, e))
}

/// Who this host is, from its certificate (never from a message).
#[derive(Debug, Clone, Copy)]
pub struct HostIdentity<'a> {
    /// The host id (UUID).
    pub host_id: &'a str,
    /// The hostname, as in manifests' host sets.
    pub hostname: &'a str,
}

/// Verifies an intent against the director keys, the verified manifest and the fresh
/// timestamp: signed, for this host (id **and** hostname), in its window, naming this
/// manifest, the manifest still listed by the timestamp, and agreeing with it on this host's
/// wave and target.
pub fn verify_intent(
    env: &Envelope,
    director: &KeySet,
    host: HostIdentity<'_>,
    manifest: &VerifiedManifest,
    timestamp: &VerifiedTimestamp,
    ctx: &VerifyContext,
) -> Result<Intent, VerifyError> {
    let m = &manifest.manifest;
    let entry = |hostname: &str| {
        m.host(hostname).ok_or_else(|| VerifyError::HostNotInManifest { hostname: hostname.to_owned(), rollout_id: m.rollout_id.clone() })
    };
    check_intent(env, director, host, (&m.rollout_id, &manifest.sha256), entry, timestamp, ctx)
}

/// Verifies an intent against the director keys, this host's place proven under a signed
/// root ([`root::verify_place`]) and the fresh timestamp: the same rules as [`verify_intent`],
/// with the proven entry in the manifest's stead.
pub fn verify_intent_at(
    env: &Envelope,
    director: &KeySet,
    host: HostIdentity<'_>,
    place: &VerifiedPlace,
    timestamp: &VerifiedTimestamp,
    ctx: &VerifyContext,
) -> Result<Intent, VerifyError> {
    let entry = |hostname: &str| {
        if place.entry.hostname == hostname {
            Ok(&place.entry)
        } else {
            Err(VerifyError::HostNotInManifest { hostname: hostname.to_owned(), rollout_id: place.rollout_id.clone() })
        }
    };
    check_intent(env, director, host, (&place.rollout_id, &place.manifest_sha256), entry, timestamp, ctx)
}

/// The intent rules, over a manifest's `(rolloutId, sha256)` and a lookup of a host's entry.
fn check_intent<'m>(
    env: &Envelope,
    director: &KeySet,
    host: HostIdentity<'_>,
    (rollout_id, manifest_sha256): (&RolloutId, &str),
    entry_of: impl FnOnce(&str) -> Result<&'m HostSetEntry, VerifyError>,
    timestamp: &VerifiedTimestamp,
    ctx: &VerifyContext,
) -> Result<Intent, VerifyError> {
    const A: &str = "intent";
    let intent: Intent = open_envelope(A, env, director, ctx.now)?;
    check_per_host(A, &intent.host_id, host.host_id, intent.issued_at, intent.expires_at, ctx)?;
    // The manifest entry consulted below must be this host's own: otherwise a director could
    // hand a host another host's (validly signed) target and wave.
    if intent.hostname != host.hostname {
        return Err(VerifyError::WrongHost {
            artifact: A.to_owned(),
            addressed: intent.hostname.clone(),
            actual: host.hostname.to_owned(),
        });
    }
    if intent.rollout_id != *rollout_id {
        return Err(VerifyError::RolloutIdMismatch { advertised: intent.rollout_id.to_string(), computed: rollout_id.to_string() });
    }
    if intent.manifest_sha256 != manifest_sha256 {
        return Err(VerifyError::ManifestHashMismatch {
            intent_sha256: intent.manifest_sha256,
            manifest_sha256: manifest_sha256.to_owned(),
        });
    }
    // A cached manifest is acted on only while the fresh timestamp still lists it.
    if !timestamp.doc.lists(rollout_id, manifest_sha256) {
        return Err(VerifyError::ManifestNotInTimestamp { rollout_id: rollout_id.clone(), manifest_sha256: manifest_sha256.to_owned() });
    }
    let entry = entry_of(&intent.hostname)?;
    if entry.wave_index != intent.wave_index {
        return Err(VerifyError::WaveMismatch {
            hostname: intent.hostname,
            intent_wave: intent.wave_index,
            manifest_wave: entry.wave_index,
        });
    }
    // The target becomes an argument of commands run as root: whatever signed it, it must
    // be a plain store path.
    check_store_path(&intent.target_closure).map_err(|e| malformed(A, e))?;
    if entry.target_closure != intent.target_closure {
        return Err(VerifyError::TargetMismatch {
            hostname: intent.hostname,
            intent_target: intent.target_closure,
            manifest_target: entry.target_closure.clone(),
        });
    }
    Ok(intent)
}

/// Verifies a task: director-signed, for this host, in its window. Replay is the caller's
/// journal's rule (it is stateful).
pub fn verify_task(env: &Envelope, director: &KeySet, host_id: &str, ctx: &VerifyContext) -> Result<Task, VerifyError> {
    const A: &str = "task";
    let task: Task = open_envelope(A, env, director, ctx.now)?;
    check_per_host(A, &task.host_id, host_id, task.issued_at, task.expires_at, ctx)?;
    Ok(task)
}

pub mod root;

pub use root::{VerifiedPlace, VerifiedRoot, verify_place, verify_root};

#[cfg(test)]
mod tests;
