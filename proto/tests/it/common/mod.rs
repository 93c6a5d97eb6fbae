//! Shared fixtures for drover-proto's integration tests: fixed-seed keys, trust roots, a
//! small fleet spec built from JSON, releases built with `build_release`, and the helpers the
//! verification tests share (the `refused!` assertion, timestamp and manifest look-ups).
//!
//! Everything here is deterministic (keys from fixed seeds, times given explicitly), so a
//! test that builds the same release twice gets the same bytes.

#![allow(dead_code)]

use drover_proto::artifacts::TimestampDoc;
use drover_proto::keys::{KeySigner, Signer as _, verifying_key_to_pem};
use drover_proto::names::RolloutId;
use drover_proto::release::{ReleaseFiles, ReleaseParams, TIMESTAMP, build_release, manifest_path, sig_path};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::time::Time;
use drover_proto::trust::{KeySetDoc, TrustDoc, TrustKeyDoc, TrustRoots};
use drover_proto::verify::{
    ManifestAnchors, VerifiedManifest, VerifiedTimestamp, VerifyContext, VerifyError, verify_manifest, verify_timestamp,
};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};

/// The reference instant most fixtures are built at.
pub const T0: &str = "2026-11-21T10:00:00Z";

/// Parses a strict RFC 3339 time (`2026-11-21T10:00:00Z`).
pub fn at(s: &str) -> Time {
    Time::parse_strict(s).unwrap_or_else(|e| panic!("bad fixture time {s:?}: {e}"))
}

/// [`T0`] plus `secs` seconds.
pub fn t0_plus(secs: u64) -> Time {
    at(T0).plus_secs(secs)
}

/// [`T0`] minus `secs` seconds.
pub fn t0_minus(secs: i64) -> Time {
    Time::from_unix(at(T0).unix() - secs).expect("in range")
}

/// An Ed25519 signer from the fixed seed `[seed; 32]`.
pub fn signer(seed: u8) -> KeySigner {
    KeySigner::new(SigningKey::from_bytes(&[seed; 32]))
}

/// A trust-file key entry for `signer` (SPKI PEM), with an optional validity window.
pub fn trust_key(signer: &KeySigner, not_before: Option<Time>, not_after: Option<Time>) -> TrustKeyDoc {
    TrustKeyDoc {
        key_id: signer.key_id().clone(),
        alg: "ed25519".to_owned(),
        public_key: verifying_key_to_pem(&signer.verifying_key()).expect("encode public key"),
        not_before,
        not_after,
    }
}

/// A `trust.json` document with these keys and threshold, no rejectBefore.
pub fn trust_doc(threshold: u32, keys: Vec<TrustKeyDoc>) -> TrustDoc {
    TrustDoc { schema_version: 1, ci: KeySetDoc { threshold, keys, reject_before: None } }
}

/// Validated trust roots from a document (panics if the document is refused).
pub fn trust_from(doc: &TrustDoc) -> TrustRoots {
    TrustRoots::from_doc(doc).unwrap_or_else(|e| panic!("fixture trust refused: {e}"))
}

/// Trust roots listing `signers` without windows, threshold 1.
pub fn trust_of(signers: &[&KeySigner]) -> TrustRoots {
    trust_from(&trust_doc(1, signers.iter().map(|s| trust_key(s, None, None)).collect()))
}

/// A small valid fleet spec as JSON, for tests to tweak before [`spec_from`]: one channel
/// `stable` (freshness 1d, signing 4h) with two hosts in a two-wave policy, `gpu-01` in wave 0
/// (tag `canary`) and `gpu-02` in wave 1.
pub fn small_spec_json() -> Value {
    json!({
        "hosts": {
            "gpu-01": { "system": "x86_64-linux", "tags": ["canary"], "channel": "stable", "closure": "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system-gpu-01" },
            "gpu-02": { "system": "x86_64-linux", "channel": "stable", "closure": "/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nixos-system-gpu-02" }
        },
        "channels": {
            "stable": { "rolloutPolicy": "canary-first", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" }
        },
        "rolloutPolicies": {
            "canary-first": {
                "waves": [
                    { "selector": { "tags": ["canary"] }, "soakSecs": "5m" },
                    { "selector": { "all": true }, "soakSecs": 0 }
                ]
            }
        }
    })
}

/// Parses and validates a spec given as JSON (panics if it is refused).
pub fn spec_from(json: &Value) -> FleetSpec {
    let bytes = serde_json::to_vec(json).expect("serialise spec");
    FleetSpec::from_json(&bytes).unwrap_or_else(|e| panic!("fixture spec refused: {e}"))
}

/// [`small_spec_json`], parsed.
pub fn small_spec() -> FleetSpec {
    spec_from(&small_spec_json())
}

/// Release parameters: CI commit, creation (and signing) time, timestamp version, previous
/// timestamp.
pub fn params(ci_commit: &str, created_at: Time, version: u64, previous: Option<TimestampDoc>) -> ReleaseParams {
    ReleaseParams { meta: ReleaseMeta { ci_commit: ci_commit.to_owned(), created_at }, version, previous }
}

/// Builds and signs a release (panics if building fails).
pub fn release(spec: &FleetSpec, params: &ReleaseParams, signers: &[KeySigner]) -> ReleaseFiles {
    build_release(spec, params, signers).unwrap_or_else(|e| panic!("fixture release failed: {e}"))
}

/// The small spec released at [`T0`] as commit `c0ffee1`, version 1, signed by `signers`.
pub fn small_release(signers: &[KeySigner]) -> ReleaseFiles {
    release(&small_spec(), &params("c0ffee1", at(T0), 1, None), signers)
}

/// Asserts that `$result` is an `Err` matching `$pat` and yields the error; on any other
/// outcome the panic message names what came back. (`main.rs` declares `#[macro_use] mod common;`
/// before the test modules.)
macro_rules! refused {
    ($result:expr, $pat:pat) => {
        match $result {
            Ok(_) => panic!("expected refusal {}, but it was accepted", stringify!($pat)),
            Err(e) => {
                assert!(matches!(e, $pat), "expected {}, got {e:?} ({e})", stringify!($pat));
                e
            }
        }
    };
}

/// The parsed `timestamp.json` of a release.
pub fn timestamp_doc(files: &ReleaseFiles) -> TimestampDoc {
    serde_json::from_slice(files.get(TIMESTAMP).expect("timestamp")).expect("timestamp parses")
}

/// The current rollout id of `channel` in a release's timestamp.
pub fn current_id(files: &ReleaseFiles, channel: &str) -> RolloutId {
    timestamp_doc(files).channels.get(channel).unwrap_or_else(|| panic!("no channel {channel}")).rollout_id.clone()
}

/// A release's `timestamp.json` verified at `now` (panics if it is refused).
pub fn verified_timestamp(files: &ReleaseFiles, trust: &TrustRoots, now: Time) -> VerifiedTimestamp {
    verify_timestamp(files.get(TIMESTAMP).expect("ts"), files.get(&sig_path(TIMESTAMP)).expect("ts sig"), trust, &VerifyContext::at(now))
        .unwrap_or_else(|e| panic!("timestamp should verify: {e}"))
}

/// Verifies the manifest of `id` inside `files` against `ts` alone (no fleet.resolved).
pub fn verify_manifest_in(
    files: &ReleaseFiles,
    id: &RolloutId,
    ts: &VerifiedTimestamp,
    trust: &TrustRoots,
    now: Time,
) -> Result<VerifiedManifest, VerifyError> {
    let path = manifest_path(id);
    let anchors = ManifestAnchors { advertised_id: Some(id), timestamp: ts, fleet: None };
    verify_manifest(files.get(&path).expect("manifest"), files.get(&sig_path(&path)).expect("sig"), trust, &VerifyContext::at(now), anchors)
}

/// The small spec with the `stable` channel pinned to `channel_ref`.
pub fn spec_with_ref(channel_ref: &str) -> FleetSpec {
    let mut json = small_spec_json();
    json["channels"]["stable"]["ref"] = json!(channel_ref);
    spec_from(&json)
}

/// The small spec plus a second channel `fast` (freshness 1h, signing 30m) with host `gpu-03`.
pub fn two_channel_spec() -> FleetSpec {
    let mut json = small_spec_json();
    json["channels"]["fast"] = json!({ "rolloutPolicy": "canary-first", "freshnessWindowSecs": "1h", "signingIntervalSecs": "30m" });
    json["hosts"]["gpu-03"] = json!({ "system": "x86_64-linux", "channel": "fast", "closure": "/nix/store/cccccccccccccccccccccccccccccccc-nixos-system-gpu-03" });
    spec_from(&json)
}
