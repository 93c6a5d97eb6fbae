//! Attacks on release and per-host message verification. Each test is named after the rule
//! it exercises and asserts the specific `VerifyError` variant that rule refuses with: byte
//! tampering, stale or future timestamps, rollback, key rotation, thresholds, mix-and-match
//! of artifacts from different releases, forged rollout ids, non-canonical bytes, and
//! director-signed intents and tasks.

mod common;

use std::collections::BTreeMap;

use common::*;
use drover_proto::artifacts::{RevertableRollout, RolloutManifest, TimestampDoc};
use drover_proto::canonical;
use drover_proto::intent::Intent;
use drover_proto::keys::{KeySigner, Signer as _};
use drover_proto::names::RolloutId;
use drover_proto::release::{
    FLEET_RESOLVED, MAX_REVERTABLE, ReleaseError, ReleaseFiles, TIMESTAMP, build_release, manifest_path, resign_timestamp, sig_path,
    verify_release,
};
use drover_proto::resolve::sha256_hex;
use drover_proto::sig::{Envelope, SignatureFile, sign_bytes};
use drover_proto::task::{StorageScope, Task, TaskKind};
use drover_proto::time::Time;
use drover_proto::trust::{KeySet, TrustError, TrustRoots};
use drover_proto::verify::{
    DEFAULT_MAX_FUTURE_SKEW_SECS, ManifestAnchors, VerifiedManifest, VerifiedTimestamp, VerifyContext, VerifyError, VersionFloor,
    verify_fleet_resolved, verify_intent, verify_manifest, verify_task, verify_timestamp,
};
use serde_json::{Value, json};

/// Asserts that `$result` is an `Err` matching `$pat` and yields the error; on any other
/// outcome the panic message names what came back.
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

// ---------------------------------------------------------------------------------------
// Helpers local to these attacks.
// ---------------------------------------------------------------------------------------

/// Canonical bytes of a detached signature file over `bytes`.
fn sig_file(bytes: &[u8], signers: &[KeySigner]) -> Vec<u8> {
    canonical::to_vec_of(&sign_bytes(bytes, signers).expect("sign")).expect("canonical sig file")
}

/// Replaces `path` and its `.sig` in a release with `bytes` signed (as is) by `signers`.
fn put_signed(files: &mut ReleaseFiles, path: &str, bytes: Vec<u8>, signers: &[KeySigner]) {
    files.files.insert(sig_path(path), sig_file(&bytes, signers));
    files.files.insert(path.to_owned(), bytes);
}

/// Copies `path` and its `.sig` from one release into another.
fn copy_signed(from: &ReleaseFiles, to: &mut ReleaseFiles, path: &str) {
    for p in [path.to_owned(), sig_path(path)] {
        to.files.insert(p.clone(), from.get(&p).unwrap_or_else(|| panic!("{p} missing")).to_vec());
    }
}

fn timestamp_doc(files: &ReleaseFiles) -> TimestampDoc {
    serde_json::from_slice(files.get(TIMESTAMP).expect("timestamp")).expect("timestamp parses")
}

/// The current rollout id of `channel` in a release's timestamp.
fn current_id(files: &ReleaseFiles, channel: &str) -> RolloutId {
    timestamp_doc(files).channels.get(channel).unwrap_or_else(|| panic!("no channel {channel}")).rollout_id.clone()
}

fn manifest_of(files: &ReleaseFiles, id: &RolloutId) -> RolloutManifest {
    serde_json::from_slice(files.get(&manifest_path(id)).expect("manifest")).expect("manifest parses")
}

fn verified_timestamp(files: &ReleaseFiles, trust: &TrustRoots, now: Time) -> VerifiedTimestamp {
    verify_timestamp(files.get(TIMESTAMP).expect("ts"), files.get(&sig_path(TIMESTAMP)).expect("ts sig"), trust, &VerifyContext::at(now))
        .unwrap_or_else(|e| panic!("timestamp should verify: {e}"))
}

/// Verifies the manifest of `id` inside `files` against `ts` alone (no fleet.resolved).
fn verify_manifest_in(
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

/// Rewrites every `.sig` file of a release through `f`.
fn rewrite_sigs(files: &mut ReleaseFiles, f: impl Fn(&mut SignatureFile)) {
    for (path, bytes) in files.files.iter_mut() {
        if path.ends_with(".sig") {
            let mut file: SignatureFile = serde_json::from_slice(bytes).expect("sig parses");
            f(&mut file);
            *bytes = canonical::to_vec_of(&file).expect("canonical");
        }
    }
}

/// The small spec with the `stable` channel pinned to `channel_ref`.
fn spec_with_ref(channel_ref: &str) -> drover_proto::spec::FleetSpec {
    let mut json = small_spec_json();
    json["channels"]["stable"]["ref"] = json!(channel_ref);
    spec_from(&json)
}

/// The small spec plus a second channel `fast` (freshness 1h, signing 30m) with host `gpu-03`.
fn two_channel_spec() -> drover_proto::spec::FleetSpec {
    let mut json = small_spec_json();
    json["channels"]["fast"] = json!({ "rolloutPolicy": "canary-first", "freshnessWindowSecs": "1h", "signingIntervalSecs": "30m" });
    json["hosts"]["gpu-03"] = json!({ "system": "x86_64-linux", "channel": "fast", "closure": "/nix/store/cccc-nixos-system-gpu-03" });
    spec_from(&json)
}

// ---------------------------------------------------------------------------------------
// The baseline.
// ---------------------------------------------------------------------------------------

#[test]
fn valid_release_verifies_and_each_manifest_verifies_alone() {
    let files = release(&two_channel_spec(), &params("c0ffee1", at(T0), 1, None), &[signer(1)]);
    let trust = trust_of(&[&signer(1)]);
    let now = t0_plus(60);
    let ctx = VerifyContext::at(now);
    let verified = verify_release(&files, &trust, &ctx).unwrap_or_else(|e| panic!("valid release refused: {e}"));
    assert_eq!(verified.manifests.keys().collect::<Vec<_>>(), ["fast", "stable"]);
    assert_eq!(verified.timestamp.doc.version, 1);
    assert_eq!(verified.fleet.sha256, verified.timestamp.doc.fleet_resolved_sha256);

    for (channel, entry) in &verified.timestamp.doc.channels {
        let path = manifest_path(&entry.rollout_id);
        let (bytes, sig) = (files.get(&path).expect("manifest"), files.get(&sig_path(&path)).expect("sig"));
        for advertised_id in [Some(&entry.rollout_id), None] {
            for fleet in [Some(&verified.fleet), None] {
                let anchors = ManifestAnchors { advertised_id, timestamp: &verified.timestamp, fleet };
                let m = verify_manifest(bytes, sig, &trust, &ctx, anchors)
                    .unwrap_or_else(|e| panic!("{path} refused alone (advertised {advertised_id:?}, fleet {}): {e}", fleet.is_some()));
                assert_eq!(m.sha256, entry.manifest_sha256);
                assert_eq!(m.manifest, verified.manifests[channel].manifest);
                assert_eq!(m.manifest.channel, *channel);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tampering.
// ---------------------------------------------------------------------------------------

/// The smallest valid release: one host, one channel, one wave, short names (about 2 KB
/// over six files), so that walking every byte stays affordable in a debug build, where one
/// Ed25519 verification costs milliseconds.
fn tiny_release() -> ReleaseFiles {
    let json = json!({
        "hosts": { "h1": { "system": "x86_64-linux", "channel": "c", "closure": "/nix/store/x" } },
        "channels": { "c": { "rolloutPolicy": "p", "freshnessWindowSecs": "1h", "signingIntervalSecs": "30m" } },
        "rolloutPolicies": { "p": { "waves": [ { "selector": { "all": true }, "soakSecs": 0 } ] } }
    });
    release(&spec_from(&json), &params("c1", at(T0), 1, None), &[signer(1)])
}

/// Applies each `(path, offset, mask)` XOR to the release, asserts `verify_release` refuses it,
/// and returns how many refusals each rule produced. Work is spread round-robin over threads.
fn assert_every_flip_refused(
    files: &ReleaseFiles,
    trust: &TrustRoots,
    ctx: &VerifyContext,
    cases: &[(&str, usize, u8)],
) -> BTreeMap<&'static str, usize> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let (accepted, rules) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                s.spawn(move || {
                    let mut mine = files.clone();
                    let mut accepted = Vec::new();
                    let mut rules: BTreeMap<&'static str, usize> = BTreeMap::new();
                    for &(path, i, mask) in cases.iter().skip(k).step_by(threads) {
                        mine.files.get_mut(path).expect("path")[i] ^= mask;
                        match verify_release(&mine, trust, ctx) {
                            Ok(_) => accepted.push(format!("{path}[{i}] ^ {mask:#04x}")),
                            Err(e) => *rules.entry(e.rule()).or_default() += 1,
                        }
                        mine.files.get_mut(path).expect("path")[i] ^= mask;
                    }
                    (accepted, rules)
                })
            })
            .collect();
        let mut all_accepted = Vec::new();
        let mut all_rules: BTreeMap<&'static str, usize> = BTreeMap::new();
        for h in handles {
            let (a, r) = h.join().expect("worker panicked");
            all_accepted.extend(a);
            for (k, v) in r {
                *all_rules.entry(k).or_default() += v;
            }
        }
        (all_accepted, all_rules)
    });
    assert!(accepted.is_empty(), "{} tampered release(s) verified: {accepted:?}", accepted.len());
    assert_eq!(rules.values().sum::<usize>(), cases.len());
    rules
}

#[test]
fn flipping_any_byte_of_any_file_is_refused() {
    let files = tiny_release();
    let trust = trust_of(&[&signer(1)]);
    let ctx = VerifyContext::at(t0_plus(60));
    verify_release(&files, &trust, &ctx).unwrap_or_else(|e| panic!("baseline refused: {e}"));
    assert_eq!(files.files.len(), 6, "fleet.resolved, one manifest, timestamp, and a .sig each");

    // XOR 0x01 (a neighbouring ASCII character: a hex digit, a base64 digit, a letter of a
    // field name, a quote or a brace) at every offset of every file, artifacts and .sig files.
    let cases: Vec<(&str, usize, u8)> = files.files.iter().flat_map(|(p, b)| (0..b.len()).map(move |i| (p.as_str(), i, 0x01u8))).collect();
    let rules = assert_every_flip_refused(&files, &trust, &ctx, &cases);
    eprintln!("{} flips (^0x01) refused, by rule: {rules:?}", cases.len());
    for rule in ["NotCanonical", "BadSignature", "UnknownKey", "Malformed"] {
        assert!(rules.contains_key(rule), "expected some flips to trip {rule}: {rules:?}");
    }
}

#[test]
fn setting_the_high_bit_of_any_byte_is_refused() {
    // XOR 0x80 turns an ASCII byte into a lone UTF-8 continuation byte, at every offset of
    // every file (cheap since the crypto crates are optimised in dev builds).
    let files = tiny_release();
    let trust = trust_of(&[&signer(1)]);
    let ctx = VerifyContext::at(t0_plus(60));
    let cases: Vec<(&str, usize, u8)> = files.files.iter().flat_map(|(p, b)| (0..b.len()).map(move |i| (p.as_str(), i, 0x80u8))).collect();
    let rules = assert_every_flip_refused(&files, &trust, &ctx, &cases);
    eprintln!("{} flips (^0x80) refused, by rule: {rules:?}", cases.len());
}

#[test]
fn removing_any_file_is_refused() {
    let files = small_release(&[signer(1)]);
    let trust = trust_of(&[&signer(1)]);
    let ctx = VerifyContext::at(t0_plus(60));
    let id = current_id(&files, "stable");
    for path in files.files.keys() {
        let mut cut = files.clone();
        cut.files.remove(path);
        let err = refused!(verify_release(&cut, &trust, &ctx), VerifyError::Malformed { .. } | VerifyError::ManifestMissing { .. });
        if path.starts_with("rollouts/") {
            assert!(
                matches!(&err, VerifyError::ManifestMissing { channel, rollout_id } if channel == "stable" && *rollout_id == id),
                "{err:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Freshness, skew, kill switch, rollback.
// ---------------------------------------------------------------------------------------

#[test]
fn stale_timestamp_is_refused() {
    // Channels stable (1d) and fast (1h): the tightest window, fast's, decides.
    let files = release(&two_channel_spec(), &params("c0ffee1", at(T0), 1, None), &[signer(1)]);
    let trust = trust_of(&[&signer(1)]);
    verify_release(&files, &trust, &VerifyContext::at(t0_plus(3600))).unwrap_or_else(|e| panic!("at the window's edge: {e}"));
    let err = refused!(verify_release(&files, &trust, &VerifyContext::at(t0_plus(3601))), VerifyError::Stale { .. });
    let VerifyError::Stale { artifact, channel, window_secs, signed_at, .. } = err else { unreachable!() };
    assert_eq!((artifact.as_str(), channel.as_str(), window_secs, signed_at), (TIMESTAMP, "fast", 3600, at(T0)));
    // Two weeks later, still stale (a waking host must fetch a fresh timestamp).
    refused!(verify_release(&files, &trust, &VerifyContext::at(t0_plus(14 * 86_400))), VerifyError::Stale { .. });
}

#[test]
fn future_dated_timestamp_is_refused_beyond_skew_only() {
    let files = small_release(&[signer(1)]);
    let trust = trust_of(&[&signer(1)]);
    let skew = DEFAULT_MAX_FUTURE_SKEW_SECS;
    verify_release(&files, &trust, &VerifyContext::at(t0_minus(skew as i64))).unwrap_or_else(|e| panic!("within skew: {e}"));
    let err = refused!(verify_release(&files, &trust, &VerifyContext::at(t0_minus(skew as i64 + 1))), VerifyError::FutureDated { .. });
    assert!(matches!(&err, VerifyError::FutureDated { artifact, skew_secs, .. } if artifact == TIMESTAMP && *skew_secs == skew), "{err:?}");
    // A verifier with no skew allowance refuses even one second.
    let strict = VerifyContext { max_future_skew_secs: 0, ..VerifyContext::at(t0_minus(1)) };
    refused!(verify_release(&files, &trust, &strict), VerifyError::FutureDated { .. });
}

#[test]
fn signed_before_reject_before_is_refused() {
    let files = small_release(&[signer(1)]);
    let ctx = VerifyContext::at(t0_plus(60));
    let mut doc = trust_doc(1, vec![trust_key(&signer(1), None, None)]);
    doc.ci.reject_before = Some(t0_plus(1));
    let err = refused!(verify_release(&files, &trust_from(&doc), &ctx), VerifyError::RejectedBefore { .. });
    assert!(
        matches!(&err, VerifyError::RejectedBefore { signed_at, reject_before, .. } if *signed_at == at(T0) && *reject_before == t0_plus(1))
    );
    // Signed exactly at the cut-off is not "before" it.
    doc.ci.reject_before = Some(at(T0));
    verify_release(&files, &trust_from(&doc), &ctx).unwrap_or_else(|e| panic!("at the cut-off: {e}"));
    // The kill switch also covers fleet.resolved and manifests, not only the timestamp.
    let mut later = files.clone();
    resign_timestamp(&mut later, None, t0_plus(120), &[signer(1)]).expect("resign");
    doc.ci.reject_before = Some(t0_plus(60));
    let err = refused!(verify_release(&later, &trust_from(&doc), &VerifyContext::at(t0_plus(180))), VerifyError::RejectedBefore { .. });
    assert!(matches!(&err, VerifyError::RejectedBefore { artifact, .. } if artifact == FLEET_RESOLVED), "{err:?}");
}

#[test]
fn version_rollback_is_refused() {
    let files = release(&small_spec(), &params("c0ffee1", at(T0), 5, None), &[signer(1)]);
    let trust = trust_of(&[&signer(1)]);
    let ctx = VerifyContext::at(t0_plus(60));
    // An agent re-fetching: equal passes, lower is refused.
    verify_release(&files, &trust, &ctx.with_floor(VersionFloor::AtLeast(5))).unwrap_or_else(|e| panic!("equal version: {e}"));
    verify_release(&files, &trust, &ctx.with_floor(VersionFloor::AtLeast(4))).unwrap_or_else(|e| panic!("newer version: {e}"));
    let err = refused!(verify_release(&files, &trust, &ctx.with_floor(VersionFloor::AtLeast(6))), VerifyError::VersionRollback { .. });
    assert!(matches!(err, VerifyError::VersionRollback { version: 5, floor: 6, equal_allowed: true }), "{err:?}");
    // A coordinator accepting a publish: equal is refused too.
    verify_release(&files, &trust, &ctx.with_floor(VersionFloor::Above(4))).unwrap_or_else(|e| panic!("newer version: {e}"));
    let err = refused!(verify_release(&files, &trust, &ctx.with_floor(VersionFloor::Above(5))), VerifyError::VersionRollback { .. });
    assert!(matches!(err, VerifyError::VersionRollback { version: 5, floor: 5, equal_allowed: false }), "{err:?}");
}

// ---------------------------------------------------------------------------------------
// Keys: rotation windows, unknown keys, thresholds, duplicates.
// ---------------------------------------------------------------------------------------

/// Old key valid until 12:00, new key from 08:00: they overlap 08:00–12:00 on T0's day.
fn rotation_trust() -> TrustRoots {
    trust_from(&trust_doc(
        1,
        vec![trust_key(&signer(1), None, Some(at("2026-11-21T12:00:00Z"))), trust_key(&signer(2), Some(at("2026-11-21T08:00:00Z")), None)],
    ))
}

fn small_release_at(created_at: Time, signers: &[KeySigner]) -> ReleaseFiles {
    release(&small_spec(), &params("c0ffee1", created_at, 1, None), signers)
}

#[test]
fn during_key_rotation_overlap_old_and_new_keys_are_accepted() {
    let trust = rotation_trust();
    let ctx = VerifyContext::at(t0_plus(300)); // 10:05, inside both windows
    for signers in [vec![signer(1)], vec![signer(2)], vec![signer(1), signer(2)]] {
        let ids: Vec<_> = signers.iter().map(|s| s.key_id().clone()).collect();
        verify_release(&small_release_at(at(T0), &signers), &trust, &ctx).unwrap_or_else(|e| panic!("signed by {ids:?}: {e}"));
    }
}

#[test]
fn old_key_after_its_window_is_refused() {
    let trust = rotation_trust();
    let signed = at("2026-11-21T11:59:00Z");
    let after = VerifyContext::at(at("2026-11-21T12:01:00Z")); // fresh, but the old key has expired
    let err = refused!(verify_release(&small_release_at(signed, &[signer(1)]), &trust, &after), VerifyError::KeyNotValidAt { .. });
    assert!(matches!(&err, VerifyError::KeyNotValidAt { key_id, at: t, .. } if key_id == signer(1).key_id() && *t == after.now), "{err:?}");
    // The successor key, and a release signed by both, still verify.
    verify_release(&small_release_at(signed, &[signer(2)]), &trust, &after).unwrap_or_else(|e| panic!("new key: {e}"));
    verify_release(&small_release_at(signed, &[signer(1), signer(2)]), &trust, &after).unwrap_or_else(|e| panic!("both keys: {e}"));
}

#[test]
fn new_key_before_its_window_is_refused() {
    let trust = rotation_trust();
    let files = small_release_at(at("2026-11-21T07:00:00Z"), &[signer(2)]);
    let err = refused!(verify_release(&files, &trust, &VerifyContext::at(at("2026-11-21T07:30:00Z"))), VerifyError::KeyNotValidAt { .. });
    assert!(matches!(&err, VerifyError::KeyNotValidAt { key_id, .. } if key_id == signer(2).key_id()), "{err:?}");
    verify_release(&files, &trust, &VerifyContext::at(at("2026-11-21T08:00:00Z"))).unwrap_or_else(|e| panic!("at notBefore: {e}"));
}

#[test]
fn expired_key_is_refused() {
    let not_after = t0_plus(3600);
    let trust = trust_from(&trust_doc(1, vec![trust_key(&signer(1), None, Some(not_after))]));
    let files = small_release(&[signer(1)]);
    verify_release(&files, &trust, &VerifyContext::at(not_after)).unwrap_or_else(|e| panic!("at notAfter: {e}"));
    refused!(verify_release(&files, &trust, &VerifyContext::at(not_after.plus_secs(1))), VerifyError::KeyNotValidAt { .. });
}

#[test]
fn unknown_key_is_refused() {
    let files = small_release(&[signer(9)]);
    let err = refused!(verify_release(&files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))), VerifyError::UnknownKey { .. });
    assert!(
        matches!(&err, VerifyError::UnknownKey { key_id, artifact } if key_id == signer(9).key_id() && artifact == TIMESTAMP),
        "{err:?}"
    );
}

#[test]
fn one_signature_below_threshold_two_is_refused() {
    let trust = trust_from(&trust_doc(2, vec![trust_key(&signer(1), None, None), trust_key(&signer(2), None, None)]));
    let ctx = VerifyContext::at(t0_plus(60));
    let err = refused!(verify_release(&small_release(&[signer(1)]), &trust, &ctx), VerifyError::BelowThreshold { .. });
    assert!(matches!(err, VerifyError::BelowThreshold { valid: 1, threshold: 2, .. }), "{err:?}");
    verify_release(&small_release(&[signer(1), signer(2)]), &trust, &ctx).unwrap_or_else(|e| panic!("two distinct keys: {e}"));
}

#[test]
fn duplicated_signature_entry_never_counts_twice() {
    let trust = trust_from(&trust_doc(2, vec![trust_key(&signer(1), None, None), trust_key(&signer(2), None, None)]));
    let ctx = VerifyContext::at(t0_plus(60));
    let mut files = small_release(&[signer(1)]);
    rewrite_sigs(&mut files, |f| {
        let entry = f.signatures[0].clone();
        f.signatures.extend([entry.clone(), entry]);
    });
    assert_eq!(serde_json::from_slice::<SignatureFile>(files.get(&sig_path(TIMESTAMP)).expect("sig")).expect("sig").signatures.len(), 3);
    let err = refused!(verify_release(&files, &trust, &ctx), VerifyError::BelowThreshold { .. });
    assert!(matches!(err, VerifyError::BelowThreshold { valid: 1, threshold: 2, .. }), "{err:?}");
}

#[test]
fn forged_second_signature_does_not_reach_threshold() {
    let trust = trust_from(&trust_doc(2, vec![trust_key(&signer(1), None, None), trust_key(&signer(2), None, None)]));
    let mut files = small_release(&[signer(1)]);
    // Key 2's id with key 1's signature bytes.
    rewrite_sigs(&mut files, |f| {
        let mut forged = f.signatures[0].clone();
        forged.key_id = signer(2).key_id().clone();
        f.signatures.push(forged);
    });
    let err = refused!(verify_release(&files, &trust, &VerifyContext::at(t0_plus(60))), VerifyError::BadSignature { .. });
    assert!(matches!(&err, VerifyError::BadSignature { key_id, .. } if key_id == signer(2).key_id()), "{err:?}");
}

#[test]
fn signature_with_another_algorithm_never_counts() {
    let mut files = small_release(&[signer(1)]);
    rewrite_sigs(&mut files, |f| f.signatures[0].alg = "ed448".to_owned());
    let err = refused!(
        verify_release(&files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))),
        VerifyError::UnsupportedAlgorithm { .. }
    );
    assert!(matches!(&err, VerifyError::UnsupportedAlgorithm { alg, .. } if alg == "ed448"), "{err:?}");
}

#[test]
fn trust_listing_one_key_twice_is_refused() {
    let key = trust_key(&signer(1), None, None);
    // Even with a threshold of 2 that two listings would "meet", and even when the two entries
    // differ in their windows.
    let mut second = key.clone();
    second.not_after = Some(t0_plus(60));
    for doc in [trust_doc(1, vec![key.clone(), key.clone()]), trust_doc(2, vec![key.clone(), second])] {
        let err = refused!(TrustRoots::from_doc(&doc), TrustError::DuplicateKey { .. });
        let TrustError::DuplicateKey { key_id } = &err else { unreachable!() };
        assert_eq!(key_id, signer(1).key_id());
        let err = VerifyError::from(err);
        assert!(matches!(&err, VerifyError::DuplicateKey { key_id } if key_id == signer(1).key_id()), "{err:?}");
        assert_eq!(err.rule(), "DuplicateKey");
    }
    // The same through trust.json bytes.
    let bytes = serde_json::to_vec(&trust_doc(1, vec![key.clone(), key])).expect("json");
    refused!(TrustRoots::from_json(&bytes), TrustError::DuplicateKey { .. });
}

// ---------------------------------------------------------------------------------------
// Mix-and-match across releases, unlisted and missing manifests.
// ---------------------------------------------------------------------------------------

/// Two releases whose `stable` channel has the same ref `v1`, hence the same rollout id
/// `stable@v1`, but different content (gpu-02's closure changed) and fleet.resolved.
fn releases_x_and_y() -> (ReleaseFiles, ReleaseFiles) {
    let x = release(&spec_with_ref("v1"), &params("aaaa111", at(T0), 1, None), &[signer(1)]);
    let mut json = small_spec_json();
    json["channels"]["stable"]["ref"] = json!("v1");
    json["hosts"]["gpu-02"]["closure"] = json!("/nix/store/dddd-nixos-system-gpu-02-evil");
    let y = release(&spec_from(&json), &params("bbbb222", t0_plus(600), 2, None), &[signer(1)]);
    assert_eq!(current_id(&x, "stable"), current_id(&y, "stable"));
    assert_ne!(x.get(&manifest_path(&current_id(&x, "stable"))), y.get(&manifest_path(&current_id(&y, "stable"))));
    (x, y)
}

#[test]
fn manifest_from_another_release_under_the_same_id_is_refused() {
    // Both manifests are validly signed and carry the same rollout id; the timestamp pins the
    // manifest's sha256, and that is checked before fleetResolvedHash, so the swap is refused
    // as not listed (the fleetResolvedHash anchor would refuse it too).
    let (x, mut y) = releases_x_and_y();
    let id = current_id(&y, "stable");
    copy_signed(&x, &mut y, &manifest_path(&id));
    let err = refused!(
        verify_release(&y, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(700))),
        VerifyError::ManifestNotInTimestamp { .. }
    );
    let x_sha = sha256_hex(x.get(&manifest_path(&id)).expect("x manifest"));
    assert!(
        matches!(&err, VerifyError::ManifestNotInTimestamp { rollout_id, manifest_sha256 } if *rollout_id == id && *manifest_sha256 == x_sha)
    );
}

#[test]
fn fleet_resolved_from_another_release_is_refused() {
    let (x, mut y) = releases_x_and_y();
    copy_signed(&x, &mut y, FLEET_RESOLVED);
    refused!(
        verify_release(&y, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(700))),
        VerifyError::FleetResolvedNotInTimestamp { .. }
    );
}

#[test]
fn manifest_paired_with_another_fleet_resolved_is_refused() {
    // Y's manifest is listed by Y's timestamp, but checked against X's fleet.resolved.
    let (x, y) = releases_x_and_y();
    let trust = trust_of(&[&signer(1)]);
    let ctx = VerifyContext::at(t0_plus(700));
    let x_fleet = verify_fleet_resolved(x.get(FLEET_RESOLVED).expect("f"), x.get(&sig_path(FLEET_RESOLVED)).expect("s"), &trust, &ctx)
        .unwrap_or_else(|e| panic!("x fleet: {e}"));
    let ts = verified_timestamp(&y, &trust, ctx.now);
    let id = current_id(&y, "stable");
    let path = manifest_path(&id);
    let anchors = ManifestAnchors { advertised_id: Some(&id), timestamp: &ts, fleet: Some(&x_fleet) };
    let err = refused!(
        verify_manifest(y.get(&path).expect("m"), y.get(&sig_path(&path)).expect("s"), &trust, &ctx, anchors),
        VerifyError::FleetResolvedHashMismatch { .. }
    );
    assert!(matches!(&err, VerifyError::FleetResolvedHashMismatch { fleet_hash, .. } if *fleet_hash == x_fleet.sha256), "{err:?}");
}

#[test]
fn timestamp_listing_a_manifest_of_another_fleet_is_refused() {
    // Defence in depth against a confused (or compromised-then-rotated) signer: a validly
    // signed timestamp that lists X's manifest next to Y's fleet.resolved. The manifest is
    // "listed", but its fleetResolvedHash anchors it to X's fleet.
    let (x, mut y) = releases_x_and_y();
    let trust = trust_of(&[&signer(1)]);
    let id = current_id(&y, "stable");
    copy_signed(&x, &mut y, &manifest_path(&id));
    let mut doc = timestamp_doc(&y);
    doc.channels.get_mut("stable").expect("stable").manifest_sha256 = sha256_hex(x.get(&manifest_path(&id)).expect("x manifest"));
    put_signed(&mut y, TIMESTAMP, canonical::to_vec_of(&doc).expect("canonical"), &[signer(1)]);
    let now = t0_plus(700);
    refused!(verify_release(&y, &trust, &VerifyContext::at(now)), VerifyError::FleetResolvedHashMismatch { .. });
    // Verified alone, the current rollout is anchored to the timestamp's fleetResolvedSha256.
    let ts = verified_timestamp(&y, &trust, now);
    refused!(verify_manifest_in(&y, &id, &ts, &trust, now), VerifyError::FleetResolvedHashMismatch { .. });
}

#[test]
fn timestamp_filing_a_rollout_under_another_channel_is_refused() {
    // A validly signed timestamp whose `stable` entry names the `fast` channel's rollout
    // (current or revertable): without this rule the release verified and its `stable`
    // manifest was fast's.
    let files = release(&two_channel_spec(), &params("c0ffee1", at(T0), 1, None), &[signer(1)]);
    let trust = trust_of(&[&signer(1)]);
    let fast = timestamp_doc(&files).channels["fast"].clone();
    let as_current = |doc: &mut TimestampDoc| {
        doc.channels.insert("stable".to_owned(), fast.clone());
    };
    let as_revertable = |doc: &mut TimestampDoc| {
        let r = RevertableRollout { rollout_id: fast.rollout_id.clone(), manifest_sha256: fast.manifest_sha256.clone() };
        doc.channels.get_mut("stable").expect("stable").revertable.push(r);
    };
    for mutate in [&as_current as &dyn Fn(&mut TimestampDoc), &as_revertable] {
        let mut forged = files.clone();
        let mut doc = timestamp_doc(&forged);
        mutate(&mut doc);
        put_signed(&mut forged, TIMESTAMP, canonical::to_vec_of(&doc).expect("canonical"), &[signer(1)]);
        if doc.channels["stable"].rollout_id == fast.rollout_id {
            // Stable's own manifest is no longer listed; take it out so only the rule can refuse.
            forged.files.retain(|p, _| !p.starts_with("rollouts/stable@"));
        }
        let err = refused!(verify_release(&forged, &trust, &VerifyContext::at(t0_plus(60))), VerifyError::Malformed { .. });
        assert!(matches!(&err, VerifyError::Malformed { artifact, .. } if artifact == TIMESTAMP), "{err:?}");
    }
}

#[test]
fn manifest_the_timestamp_does_not_list_inside_a_release_is_refused() {
    // Default refs (the CI commit): X's manifest is stable@aaaa111, Y lists stable@bbbb222.
    let x = release(&small_spec(), &params("aaaa111", at(T0), 1, None), &[signer(1)]);
    let mut y = release(&small_spec(), &params("bbbb222", t0_plus(600), 2, None), &[signer(1)]);
    let stowaway = current_id(&x, "stable");
    assert_ne!(stowaway, current_id(&y, "stable"));
    copy_signed(&x, &mut y, &manifest_path(&stowaway));
    let err = refused!(
        verify_release(&y, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(700))),
        VerifyError::ManifestNotInTimestamp { .. }
    );
    assert!(matches!(&err, VerifyError::ManifestNotInTimestamp { rollout_id, .. } if *rollout_id == stowaway), "{err:?}");
    // Even without its .sig, and even unsigned garbage, a stray manifest file is refused.
    let mut z = release(&small_spec(), &params("bbbb222", t0_plus(600), 2, None), &[signer(1)]);
    z.files.insert(manifest_path(&stowaway), b"{}".to_vec());
    refused!(verify_release(&z, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(700))), VerifyError::ManifestNotInTimestamp { .. });
}

#[test]
fn missing_manifest_is_refused() {
    let files = small_release(&[signer(1)]);
    let id = current_id(&files, "stable");
    let trust = trust_of(&[&signer(1)]);
    let ctx = VerifyContext::at(t0_plus(60));
    for remove in [manifest_path(&id), sig_path(&manifest_path(&id))] {
        let mut cut = files.clone();
        cut.files.remove(&remove);
        let err = refused!(verify_release(&cut, &trust, &ctx), VerifyError::ManifestMissing { .. });
        assert!(
            matches!(&err, VerifyError::ManifestMissing { channel, rollout_id } if channel == "stable" && *rollout_id == id),
            "{err:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Hand-built, validly signed manifests that break a rule.
// ---------------------------------------------------------------------------------------

/// The small release's manifest changed by `mutate`, signed by the CI key, listed under the
/// real rollout id by a re-signed timestamp. Returns the release with both replaced.
fn forged_release(mutate: impl FnOnce(&mut RolloutManifest)) -> (ReleaseFiles, RolloutId) {
    let mut files = small_release(&[signer(1)]);
    let id = current_id(&files, "stable");
    let mut m = manifest_of(&files, &id);
    mutate(&mut m);
    let bytes = canonical::to_vec_of(&m).expect("canonical");
    let mut doc = timestamp_doc(&files);
    doc.channels.get_mut("stable").expect("stable").manifest_sha256 = sha256_hex(&bytes);
    put_signed(&mut files, &manifest_path(&id), bytes, &[signer(1)]);
    put_signed(&mut files, TIMESTAMP, canonical::to_vec_of(&doc).expect("canonical"), &[signer(1)]);
    (files, id)
}

#[test]
fn rollout_id_field_not_channel_at_ref_is_refused() {
    let trust = trust_of(&[&signer(1)]);
    let now = t0_plus(60);
    // rolloutId forged; channel and channelRef left alone.
    let (files, id) = forged_release(|m| m.rollout_id = RolloutId::new("stable", "forged").expect("id"));
    let ts = verified_timestamp(&files, &trust, now);
    let path = manifest_path(&id);
    let anchors = ManifestAnchors { advertised_id: None, timestamp: &ts, fleet: None };
    let err = refused!(
        verify_manifest(files.get(&path).expect("m"), files.get(&sig_path(&path)).expect("s"), &trust, &VerifyContext::at(now), anchors),
        VerifyError::RolloutIdMismatch { .. }
    );
    assert!(
        matches!(&err, VerifyError::RolloutIdMismatch { advertised, computed } if advertised == "stable@forged" && *computed == id.to_string()),
        "{err:?}"
    );
    refused!(verify_release(&files, &trust, &VerifyContext::at(now)), VerifyError::RolloutIdMismatch { .. });

    // channelRef changed under an unchanged rolloutId: the recomputed id differs.
    let (files, id) = forged_release(|m| m.channel_ref = "other".to_owned());
    let err = refused!(verify_release(&files, &trust, &VerifyContext::at(now)), VerifyError::RolloutIdMismatch { .. });
    assert!(
        matches!(&err, VerifyError::RolloutIdMismatch { advertised, computed } if *advertised == id.to_string() && computed == "stable@other"),
        "{err:?}"
    );
}

#[test]
fn advertised_rollout_id_differing_from_manifest_is_refused() {
    let files = small_release(&[signer(1)]);
    let trust = trust_of(&[&signer(1)]);
    let now = t0_plus(60);
    let ts = verified_timestamp(&files, &trust, now);
    let id = current_id(&files, "stable");
    let path = manifest_path(&id);
    let asked = RolloutId::new("stable", "v2").expect("id");
    let anchors = ManifestAnchors { advertised_id: Some(&asked), timestamp: &ts, fleet: None };
    let err = refused!(
        verify_manifest(files.get(&path).expect("m"), files.get(&sig_path(&path)).expect("s"), &trust, &VerifyContext::at(now), anchors),
        VerifyError::RolloutIdMismatch { .. }
    );
    assert!(matches!(&err, VerifyError::RolloutIdMismatch { advertised, .. } if advertised == "stable@v2"), "{err:?}");

    // Inside a release: the timestamp lists stable@v2, whose file holds the real manifest.
    let mut moved = files.clone();
    for p in [path.clone(), sig_path(&path)] {
        let bytes = moved.files.remove(&p).expect("present");
        moved.files.insert(p.replace(id.as_str(), asked.as_str()), bytes);
    }
    let mut doc = timestamp_doc(&moved);
    doc.channels.get_mut("stable").expect("stable").rollout_id = asked.clone();
    put_signed(&mut moved, TIMESTAMP, canonical::to_vec_of(&doc).expect("canonical"), &[signer(1)]);
    refused!(verify_release(&moved, &trust, &VerifyContext::at(now)), VerifyError::RolloutIdMismatch { .. });
}

#[test]
fn unsorted_host_set_is_refused() {
    let (files, _) = forged_release(|m| m.host_set.reverse());
    refused!(verify_release(&files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))), VerifyError::UnsortedManifest { .. });
}

#[test]
fn unsupported_schema_version_is_refused() {
    let (files, id) = forged_release(|m| m.schema_version = 2);
    let err = refused!(
        verify_release(&files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))),
        VerifyError::UnsupportedSchemaVersion { .. }
    );
    assert!(matches!(&err, VerifyError::UnsupportedSchemaVersion { artifact, found: 2 } if *artifact == manifest_path(&id)), "{err:?}");
}

#[test]
fn non_canonical_bytes_with_a_valid_signature_are_refused() {
    let files = small_release(&[signer(1)]);
    let trust = trust_of(&[&signer(1)]);
    let ctx = VerifyContext::at(t0_plus(60));
    let id = current_id(&files, "stable");
    // Each artifact pretty-printed and signed as is: the signature holds, the bytes are refused.
    for path in [TIMESTAMP.to_owned(), FLEET_RESOLVED.to_owned(), manifest_path(&id)] {
        let value: Value = serde_json::from_slice(files.get(&path).expect("present")).expect("json");
        let mut pretty = files.clone();
        put_signed(&mut pretty, &path, serde_json::to_vec_pretty(&value).expect("pretty"), &[signer(1)]);
        let err = refused!(verify_release(&pretty, &trust, &ctx), VerifyError::NotCanonical { .. });
        assert!(matches!(&err, VerifyError::NotCanonical { artifact } if *artifact == path), "{err:?}");
    }
    // Other spellings of the same manifest, each signed over its own bytes.
    let canonical_bytes = String::from_utf8(files.get(&manifest_path(&id)).expect("m").to_vec()).expect("utf-8");
    assert!(canonical_bytes.contains("\"soakSecs\":300") && canonical_bytes.contains("/nix/store/"));
    let spellings = [
        format!("{canonical_bytes}\n"),
        format!(" {canonical_bytes}"),
        canonical_bytes.replace("\"soakSecs\":300", "\"soakSecs\":3e2"),
        canonical_bytes.replace("\"soakSecs\":300", "\"soakSecs\":300.0"),
        canonical_bytes.replacen("/nix/store/", "\\/nix\\/store\\/", 1),
        canonical_bytes.replacen("stable", "\\u0073table", 1),
        canonical_bytes.replacen('{', "{\"channel\":\"canary\",", 1),
    ];
    let ts = verified_timestamp(&files, &trust, ctx.now);
    for spelling in spellings {
        let bytes = spelling.into_bytes();
        let sig = sig_file(&bytes, &[signer(1)]);
        let anchors = ManifestAnchors { advertised_id: Some(&id), timestamp: &ts, fleet: None };
        let err = refused!(verify_manifest(&bytes, &sig, &trust, &ctx, anchors), VerifyError::NotCanonical { .. });
        assert_eq!(err.rule(), "NotCanonical");
    }
}

// ---------------------------------------------------------------------------------------
// Director-signed intents and tasks.
// ---------------------------------------------------------------------------------------

const HOST_ID: &str = "5b0f2c7e-4d4e-4f51-9a36-0d6c1f4f3a10";
const OTHER_HOST_ID: &str = "c1a9d3b2-8f1e-4b7a-a2c4-6e5d7f8a9b01";

fn director() -> KeySigner {
    signer(50)
}

/// The verified manifest of the small release, and an intent for gpu-02 (wave 1) matching it.
fn intent_fixture() -> (VerifiedManifest, Intent) {
    let files = small_release(&[signer(1)]);
    let verified = verify_release(&files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))).expect("release");
    let manifest = verified.manifests["stable"].clone();
    let entry = manifest.manifest.host("gpu-02").expect("gpu-02").clone();
    assert_eq!(entry.wave_index, 1);
    let intent = Intent {
        intent_id: "0d9a4c4e-2f7b-4e0c-8d53-8e3f0b6a7c21".to_owned(),
        host_id: HOST_ID.to_owned(),
        hostname: "gpu-02".to_owned(),
        rollout_id: manifest.manifest.rollout_id.clone(),
        manifest_sha256: manifest.sha256.clone(),
        wave_index: entry.wave_index,
        target_closure: entry.target_closure,
        issued_at: t0_plus(120),
        expires_at: t0_plus(120 + 900),
        confirm_window_secs: 300,
    };
    (manifest, intent)
}

fn seal<T: serde::Serialize>(message: &T, by: &KeySigner) -> Envelope {
    Envelope::seal(message, std::slice::from_ref(by)).expect("seal")
}

#[test]
fn intents_are_checked_against_the_director_key_and_the_manifest() {
    let (manifest, intent) = intent_fixture();
    let keys = KeySet::single(director().verifying_key());
    let ctx = VerifyContext::at(t0_plus(180));
    let check = |i: &Intent| verify_intent(&seal(i, &director()), &keys, HOST_ID, &manifest, &ctx);

    assert_eq!(check(&intent).unwrap_or_else(|e| panic!("valid intent refused: {e}")), intent);

    let other_wave = Intent { wave_index: 0, ..intent.clone() };
    let err = refused!(check(&other_wave), VerifyError::WaveMismatch { .. });
    assert!(matches!(err, VerifyError::WaveMismatch { intent_wave: 0, manifest_wave: 1, .. }), "{err:?}");

    let other_target = Intent { target_closure: "/nix/store/eeee-nixos-system-evil".to_owned(), ..intent.clone() };
    refused!(check(&other_target), VerifyError::TargetMismatch { .. });
    // gpu-01's (validly signed) target is still not gpu-02's.
    let neighbours_target =
        Intent { target_closure: manifest.manifest.host("gpu-01").expect("gpu-01").target_closure.clone(), ..intent.clone() };
    refused!(check(&neighbours_target), VerifyError::TargetMismatch { .. });

    let stranger = Intent { hostname: "gpu-99".to_owned(), ..intent.clone() };
    let err = refused!(check(&stranger), VerifyError::HostNotInManifest { .. });
    assert!(matches!(&err, VerifyError::HostNotInManifest { hostname, .. } if hostname == "gpu-99"), "{err:?}");

    let err = refused!(verify_intent(&seal(&intent, &director()), &keys, OTHER_HOST_ID, &manifest, &ctx), VerifyError::WrongHost { .. });
    assert!(matches!(&err, VerifyError::WrongHost { addressed, actual, .. } if addressed == HOST_ID && actual == OTHER_HOST_ID), "{err:?}");

    let expires = intent.expires_at;
    verify_intent(&seal(&intent, &director()), &keys, HOST_ID, &manifest, &VerifyContext::at(expires))
        .unwrap_or_else(|e| panic!("at expiry: {e}"));
    refused!(
        verify_intent(&seal(&intent, &director()), &keys, HOST_ID, &manifest, &VerifyContext::at(expires.plus_secs(1))),
        VerifyError::Expired { .. }
    );

    let issued_later = Intent { issued_at: t0_plus(180 + 3600), expires_at: t0_plus(180 + 7200), ..intent.clone() };
    refused!(check(&issued_later), VerifyError::FutureDated { .. });

    let other_manifest = Intent { manifest_sha256: sha256_hex(b"another manifest"), ..intent.clone() };
    refused!(check(&other_manifest), VerifyError::ManifestHashMismatch { .. });

    let other_rollout = Intent { rollout_id: RolloutId::new("stable", "elsewhere").expect("id"), ..intent.clone() };
    refused!(check(&other_rollout), VerifyError::RolloutIdMismatch { .. });
}

#[test]
fn intent_signed_by_a_non_director_key_is_refused() {
    let (manifest, intent) = intent_fixture();
    let keys = KeySet::single(director().verifying_key());
    let ctx = VerifyContext::at(t0_plus(180));
    // Neither a random key nor the CI release key may sign intents.
    for by in [signer(51), signer(1)] {
        let err = refused!(verify_intent(&seal(&intent, &by), &keys, HOST_ID, &manifest, &ctx), VerifyError::UnknownKey { .. });
        assert!(matches!(&err, VerifyError::UnknownKey { key_id, .. } if key_id == by.key_id()), "{err:?}");
    }
    // An envelope with no signature at all.
    let mut bare = seal(&intent, &director());
    bare.signatures.clear();
    refused!(verify_intent(&bare, &keys, HOST_ID, &manifest, &ctx), VerifyError::BelowThreshold { .. });
}

#[test]
fn intent_tampered_after_sealing_is_refused() {
    let (manifest, intent) = intent_fixture();
    let keys = KeySet::single(director().verifying_key());
    let ctx = VerifyContext::at(t0_plus(180));
    let tampers: [(&str, Value); 4] = [
        ("targetClosure", json!("/nix/store/eeee-nixos-system-evil")),
        ("expiresAt", json!("2027-11-21T10:00:00Z")),
        ("hostId", json!(OTHER_HOST_ID)),
        ("extraField", json!(true)),
    ];
    for (field, value) in tampers {
        let mut env = seal(&intent, &director());
        env.signed[field] = value;
        let err = refused!(verify_intent(&env, &keys, HOST_ID, &manifest, &ctx), VerifyError::BadSignature { .. });
        assert!(matches!(&err, VerifyError::BadSignature { key_id, .. } if key_id == director().key_id()), "{field}: {err:?}");
    }
}

fn task_fixture() -> Task {
    Task {
        task_id: "3e6f1a0b-7c2d-4e9f-b8a1-2c3d4e5f6a7b".to_owned(),
        host_id: HOST_ID.to_owned(),
        job_id: None,
        issued_at: at(T0),
        expires_at: t0_plus(600),
        kind: TaskKind::StorageCleanup { scope: StorageScope::Local },
    }
}

#[test]
fn tasks_are_checked_for_signature_host_and_window() {
    let task = task_fixture();
    let keys = KeySet::single(director().verifying_key());
    let env = seal(&task, &director());
    let ctx = VerifyContext::at(t0_plus(60));

    assert_eq!(verify_task(&env, &keys, HOST_ID, &ctx).unwrap_or_else(|e| panic!("valid task refused: {e}")), task);
    refused!(verify_task(&env, &keys, OTHER_HOST_ID, &ctx), VerifyError::WrongHost { .. });
    verify_task(&env, &keys, HOST_ID, &VerifyContext::at(task.expires_at)).unwrap_or_else(|e| panic!("at expiry: {e}"));
    refused!(verify_task(&env, &keys, HOST_ID, &VerifyContext::at(task.expires_at.plus_secs(1))), VerifyError::Expired { .. });
    refused!(verify_task(&seal(&task, &signer(51)), &keys, HOST_ID, &ctx), VerifyError::UnknownKey { .. });

    // Widening the scope (or re-addressing the task) after sealing breaks the signature.
    let mut widened = env.clone();
    widened.signed["kind"]["scope"] = json!("all");
    refused!(verify_task(&widened, &keys, HOST_ID, &ctx), VerifyError::BadSignature { .. });
    let mut readdressed = env;
    readdressed.signed["hostId"] = json!(OTHER_HOST_ID);
    refused!(verify_task(&readdressed, &keys, OTHER_HOST_ID, &ctx), VerifyError::BadSignature { .. });
}

// ---------------------------------------------------------------------------------------
// Re-signing, revertable rollouts, determinism.
// ---------------------------------------------------------------------------------------

#[test]
fn resign_timestamp_increments_version_and_keeps_channels() {
    let mut files = small_release(&[signer(1)]);
    let before = timestamp_doc(&files);
    let trust = trust_of(&[&signer(1)]);
    let later = t0_plus(2 * 86_400);
    refused!(verify_release(&files, &trust, &VerifyContext::at(later)), VerifyError::Stale { .. });

    let doc = resign_timestamp(&mut files, None, later, &[signer(1)]).unwrap_or_else(|e| panic!("resign: {e}"));
    assert_eq!(doc.version, before.version + 1);
    assert_eq!(doc.signed_at, later);
    assert_eq!(doc.channels, before.channels);
    assert_eq!(doc.fleet_resolved_sha256, before.fleet_resolved_sha256);
    assert_eq!(timestamp_doc(&files), doc);
    let ctx = VerifyContext::at(later.plus_secs(60)).with_floor(VersionFloor::Above(before.version));
    let verified = verify_release(&files, &trust, &ctx).unwrap_or_else(|e| panic!("re-signed release refused: {e}"));
    assert_eq!(verified.timestamp.doc.version, 2);

    let err = resign_timestamp(&mut files, Some(2), later.plus_secs(60), &[signer(1)]).expect_err("same version");
    assert!(matches!(err, ReleaseError::VersionNotIncreasing { requested: 2, previous: 2 }), "{err:?}");
    let doc = resign_timestamp(&mut files, Some(10), later.plus_secs(60), &[signer(1)]).unwrap_or_else(|e| panic!("resign: {e}"));
    assert_eq!(doc.version, 10);
}

#[test]
fn resigning_a_timestamp_another_key_signed_is_refused() {
    // CI re-signs only its own timestamp: one signed by another key is not re-signed.
    let mut files = small_release(&[signer(2)]);
    let err = resign_timestamp(&mut files, None, t0_plus(3600), &[signer(1)]).expect_err("not ours");
    assert!(matches!(err, ReleaseError::NotOurs { source: VerifyError::UnknownKey { .. } }), "{err:?}");
}

#[test]
fn resigning_a_timestamp_whose_artifacts_were_swapped_is_refused() {
    // Someone with write access to the directory swaps fleet.resolved for another validly
    // signed one; CI must not bless the mismatch with a fresh signature.
    let mut files = small_release(&[signer(1)]);
    let other = release(&spec_with_ref("other"), &params("c2", t0_plus(60), 2, None), &[signer(1)]);
    for p in [FLEET_RESOLVED.to_owned(), sig_path(FLEET_RESOLVED)] {
        files.files.insert(p.clone(), other.get(&p).expect("fleet").to_vec());
    }
    let err = resign_timestamp(&mut files, None, t0_plus(3600), &[signer(1)]).expect_err("swapped");
    assert!(matches!(&err, ReleaseError::Malformed { path, .. } if path == FLEET_RESOLVED), "{err:?}");
}

#[test]
fn previous_release_carries_revertable_rollouts_newest_first_bounded() {
    let trust = trust_of(&[&signer(1)]);
    let mut releases: Vec<ReleaseFiles> = Vec::new();
    let mut previous: Option<TimestampDoc> = None;
    for i in 1..=8u64 {
        let files =
            release(&spec_with_ref(&format!("r{i}")), &params(&format!("c{i}"), t0_plus(i * 3600), i, previous.take()), &[signer(1)]);
        let doc = timestamp_doc(&files);
        let revertable: Vec<String> = doc.channels["stable"].revertable.iter().map(|r| r.rollout_id.to_string()).collect();
        let expected: Vec<String> = (1..i).rev().take(MAX_REVERTABLE).map(|j| format!("stable@r{j}")).collect();
        assert_eq!(revertable, expected, "release {i}");
        // Each revertable entry pins the sha256 of the manifest that release actually shipped.
        for r in &doc.channels["stable"].revertable {
            let j: usize = r.rollout_id.channel_ref()[1..].parse().expect("rN");
            assert_eq!(r.manifest_sha256, sha256_hex(releases[j - 1].get(&manifest_path(&r.rollout_id)).expect("shipped")));
        }
        previous = Some(doc);
        releases.push(files);
    }
    let last = releases.last().expect("releases");
    let now = t0_plus(8 * 3600 + 60);
    let ts = verified_timestamp(last, &trust, now);

    // A revertable (older) manifest verifies against the new timestamp on the revertable path.
    let r7 = current_id(&releases[6], "stable");
    let m = verify_manifest_in(&releases[6], &r7, &ts, &trust, now).unwrap_or_else(|e| panic!("revertable r7 refused: {e}"));
    assert_eq!(m.manifest.rollout_id, r7);
    let r3 = current_id(&releases[2], "stable");
    verify_manifest_in(&releases[2], &r3, &ts, &trust, now).unwrap_or_else(|e| panic!("revertable r3 refused: {e}"));
    // It was projected from its own fleet.resolved, not the current one.
    let current_fleet = verify_release(last, &trust, &VerifyContext::at(now)).expect("current").fleet;
    let path = manifest_path(&r7);
    let anchors = ManifestAnchors { advertised_id: Some(&r7), timestamp: &ts, fleet: Some(&current_fleet) };
    refused!(
        verify_manifest(
            releases[6].get(&path).expect("m"),
            releases[6].get(&sig_path(&path)).expect("s"),
            &trust,
            &VerifyContext::at(now),
            anchors
        ),
        VerifyError::FleetResolvedHashMismatch { .. }
    );
    // A revertable manifest may travel inside the current release directory; one that is
    // not listed (fallen off the list) may not.
    let mut carrying = last.clone();
    for p in [path.clone(), sig_path(&path)] {
        carrying.files.insert(p.clone(), releases[6].get(&p).expect("shipped").to_vec());
    }
    let verified = verify_release(&carrying, &trust, &VerifyContext::at(now)).unwrap_or_else(|e| panic!("carried revertable refused: {e}"));
    assert_eq!(verified.revertable.keys().collect::<Vec<_>>(), [&r7]);
    let r1_path = manifest_path(&current_id(&releases[0], "stable"));
    for p in [r1_path.clone(), sig_path(&r1_path)] {
        carrying.files.insert(p.clone(), releases[0].get(&p).expect("shipped").to_vec());
    }
    refused!(verify_release(&carrying, &trust, &VerifyContext::at(now)), VerifyError::ManifestNotInTimestamp { .. });
    // Fallen off the bounded list: no longer revertable.
    let r2 = current_id(&releases[1], "stable");
    refused!(verify_manifest_in(&releases[1], &r2, &ts, &trust, now), VerifyError::ManifestNotInTimestamp { .. });

    // Rolling forward to an id that is already revertable drops it from the list.
    let again = release(&spec_with_ref("r5"), &params("c9", t0_plus(9 * 3600), 9, Some(timestamp_doc(last))), &[signer(1)]);
    let revertable: Vec<String> = timestamp_doc(&again).channels["stable"].revertable.iter().map(|r| r.rollout_id.to_string()).collect();
    assert_eq!(revertable, ["stable@r8", "stable@r7", "stable@r6", "stable@r4", "stable@r3"]);

    // The version must exceed the previous one's.
    for version in [8, 7] {
        let err = build_release(&spec_with_ref("r9"), &params("c9", t0_plus(9 * 3600), version, Some(timestamp_doc(last))), &[signer(1)])
            .expect_err("version not increasing");
        assert!(matches!(err, ReleaseError::VersionNotIncreasing { requested, previous: 8 } if requested == version), "{err:?}");
    }
}

#[test]
fn build_release_is_deterministic() {
    let spec = two_channel_spec();
    let p = params("c0ffee1", at(T0), 1, None);
    let a = release(&spec, &p, &[signer(1), signer(2)]);
    let b = release(&spec, &p, &[signer(1), signer(2)]);
    assert_eq!(a, b);
    // And from a freshly parsed spec.
    assert_eq!(a, release(&two_channel_spec(), &p, &[signer(1), signer(2)]));
    // Something that changes the inputs changes the bytes.
    assert_ne!(a, release(&spec, &params("c0ffee1", t0_plus(1), 1, None), &[signer(1), signer(2)]));
}
