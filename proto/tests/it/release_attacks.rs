//! Attacks on release verification. Each test is named after the rule it exercises and
//! asserts the specific `VerifyError` variant that rule refuses with: byte tampering and
//! missing files, stale or future timestamps, the kill switch, version rollback, key rotation
//! windows, unknown keys, thresholds, mix-and-match of artifacts from different releases,
//! forged rollout ids, hand-built manifests that break a rule, and non-canonical bytes.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use drover_proto::artifacts::{RevertableRollout, RolloutManifest, TimestampDoc};
use drover_proto::canonical;
use drover_proto::keys::{KeySigner, Signer as _};
use drover_proto::names::RolloutId;
use drover_proto::release::{FLEET_RESOLVED, ReleaseFiles, TIMESTAMP, manifest_path, resign_timestamp, sig_path, verify_release};
use drover_proto::resolve::sha256_hex;
use drover_proto::sig::{SignatureFile, sign_bytes};
use drover_proto::time::Time;
use drover_proto::trust::{TrustError, TrustRoots};
use drover_proto::verify::{
    DEFAULT_MAX_FUTURE_SKEW_SECS, ManifestAnchors, VerifyContext, VerifyError, VersionFloor, verify_fleet_resolved, verify_manifest,
    verify_timestamp,
};
use serde_json::{Value, json};

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

fn manifest_of(files: &ReleaseFiles, id: &RolloutId) -> RolloutManifest {
    serde_json::from_slice(files.get(&manifest_path(id)).expect("manifest")).expect("manifest parses")
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
        "hosts": { "h1": { "system": "x86_64-linux", "channel": "c", "closure": "/nix/store/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-x" } },
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
    assert_eq!(files.files.len(), 8, "fleet.resolved, one manifest, its root, timestamp, and a .sig each");

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
        let err = refused!(
            verify_release(&cut, &trust, &ctx),
            VerifyError::Malformed { .. } | VerifyError::ManifestMissing { .. } | VerifyError::RootMissing { .. }
        );
        if path.starts_with("roots/") {
            assert!(matches!(&err, VerifyError::RootMissing { rollout_id } if *rollout_id == id), "{err:?}");
        } else if path.starts_with("rollouts/") {
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
    json["hosts"]["gpu-02"]["closure"] = json!("/nix/store/dddddddddddddddddddddddddddddddd-nixos-system-gpu-02-evil");
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
fn timestamp_listing_no_channels_never_goes_stale_so_is_refused() {
    // Freshness is per channel: a signed timestamp with no channels would verify forever.
    let files = release(&two_channel_spec(), &params("c0ffee1", at(T0), 1, None), &[signer(1)]);
    let mut forged = files.clone();
    let mut doc = timestamp_doc(&forged);
    doc.channels.clear();
    put_signed(&mut forged, TIMESTAMP, canonical::to_vec_of(&doc).expect("canonical"), &[signer(1)]);
    let ts = forged.get(TIMESTAMP).expect("ts");
    let sig = forged.get(&sig_path(TIMESTAMP)).expect("sig");
    let far_future = t0_plus(10 * 365 * 86_400);
    let err = refused!(verify_timestamp(ts, sig, &trust_of(&[&signer(1)]), &VerifyContext::at(far_future)), VerifyError::Malformed { .. });
    assert!(err.to_string().contains("no channels"), "{err}");
}

#[test]
fn timestamp_listing_one_rollout_twice_in_a_channel_is_refused() {
    // One id, one manifest: the same id as current and revertable (with another sha256)
    // would make two manifests acceptable under one id.
    let files = release(&two_channel_spec(), &params("c0ffee1", at(T0), 1, None), &[signer(1)]);
    let mut forged = files.clone();
    let mut doc = timestamp_doc(&forged);
    let stable = doc.channels.get_mut("stable").expect("stable");
    let twin = RevertableRollout { rollout_id: stable.rollout_id.clone(), manifest_sha256: "ab".repeat(32) };
    stable.revertable.push(twin);
    put_signed(&mut forged, TIMESTAMP, canonical::to_vec_of(&doc).expect("canonical"), &[signer(1)]);
    let err = refused!(verify_release(&forged, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))), VerifyError::Malformed { .. });
    assert!(err.to_string().contains("more than once"), "{err}");
}

#[test]
fn signature_file_with_too_many_entries_is_refused_unread() {
    // Thousands of entries naming a trusted key would each cost a signature check.
    let mut files = tiny_release();
    rewrite_sigs(&mut files, |f| {
        let first = f.signatures[0].clone();
        f.signatures = vec![first; drover_proto::verify::MAX_SIGNATURES + 1];
    });
    let err = refused!(verify_release(&files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))), VerifyError::Malformed { .. });
    assert!(err.to_string().contains("at most"), "{err}");
}

#[test]
fn files_outside_the_release_layout_are_refused() {
    // A path that escapes the directory or an unknown file must not ride along inside a
    // verified release (whoever stores it writes by path).
    let trust = trust_of(&[&signer(1)]);
    for extra in ["../../etc/cron.d/x", "notes.txt", "rollouts/not-an-id.json", "rollouts/../x@y.json", "timestamp.json.bak"] {
        let mut files = tiny_release();
        files.files.insert(extra.to_owned(), b"{}".to_vec());
        let err = refused!(verify_release(&files, &trust, &VerifyContext::at(t0_plus(60))), VerifyError::Malformed { .. });
        assert!(matches!(&err, VerifyError::Malformed { artifact, .. } if artifact == extra), "{extra}: {err:?}");
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
