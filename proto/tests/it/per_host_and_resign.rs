//! Director-signed per-host messages and the release lifecycle after the first build.
//!
//! Intents and tasks are checked against the director key, the addressed host, their validity
//! window and (for intents) the verified manifest, each refusal asserting its `VerifyError`
//! variant; CI re-signs only its own, untampered timestamps with an increasing version;
//! releases carry a bounded, newest-first list of revertable rollouts; and `build_release` is
//! deterministic.

use crate::common;

use common::*;
use drover_proto::artifacts::TimestampDoc;
use drover_proto::intent::Intent;
use drover_proto::keys::{KeySigner, Signer as _};
use drover_proto::names::RolloutId;
use drover_proto::release::{
    FLEET_RESOLVED, MAX_REVERTABLE, ReleaseError, ReleaseFiles, build_release, manifest_path, resign_timestamp, root_path, sig_path,
    verify_release,
};
use drover_proto::resolve::sha256_hex;
use drover_proto::sig::Envelope;
use drover_proto::task::{StorageScope, Task, TaskKind};
use drover_proto::trust::KeySet;
use drover_proto::verify::{
    HostIdentity, ManifestAnchors, VerifiedManifest, VerifiedTimestamp, VerifyContext, VerifyError, VersionFloor, verify_intent,
    verify_manifest, verify_task,
};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Director-signed intents and tasks.
// ---------------------------------------------------------------------------------------

const HOST_ID: &str = "5b0f2c7e-4d4e-4f51-9a36-0d6c1f4f3a10";
const OTHER_HOST_ID: &str = "c1a9d3b2-8f1e-4b7a-a2c4-6e5d7f8a9b01";

fn director() -> KeySigner {
    signer(50)
}

/// The verified manifest of the small release, and an intent for gpu-02 (wave 1) matching it.
fn intent_fixture() -> (VerifiedManifest, VerifiedTimestamp, Intent) {
    let files = small_release(&[signer(1)]);
    let verified = verify_release(&files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))).expect("release");
    let manifest = verified.manifests["stable"].clone();
    let timestamp = verified.timestamp.clone();
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
    (manifest, timestamp, intent)
}

/// The host the fixture's intent is for, as its certificate names it.
const ME: HostIdentity<'static> = HostIdentity { host_id: HOST_ID, hostname: "gpu-02" };

fn seal<T: serde::Serialize>(message: &T, by: &KeySigner) -> Envelope {
    Envelope::seal(message, std::slice::from_ref(by)).expect("seal")
}

#[test]
fn intents_are_checked_against_the_director_key_and_the_manifest() {
    let (manifest, ts, intent) = intent_fixture();
    let keys = KeySet::single(director().verifying_key());
    let ctx = VerifyContext::at(t0_plus(180));
    let check = |i: &Intent| verify_intent(&seal(i, &director()), &keys, ME, &manifest, &ts, &ctx);

    assert_eq!(check(&intent).unwrap_or_else(|e| panic!("valid intent refused: {e}")), intent);

    let other_wave = Intent { wave_index: 0, ..intent.clone() };
    let err = refused!(check(&other_wave), VerifyError::WaveMismatch { .. });
    assert!(matches!(err, VerifyError::WaveMismatch { intent_wave: 0, manifest_wave: 1, .. }), "{err:?}");

    let other_target =
        Intent { target_closure: "/nix/store/55555555555555555555555555555555-nixos-system-evil".to_owned(), ..intent.clone() };
    refused!(check(&other_target), VerifyError::TargetMismatch { .. });
    // gpu-01's (validly signed) target is still not gpu-02's.
    let neighbours_target =
        Intent { target_closure: manifest.manifest.host("gpu-01").expect("gpu-01").target_closure.clone(), ..intent.clone() };
    refused!(check(&neighbours_target), VerifyError::TargetMismatch { .. });
    // A target that is not a plain store path never reaches a command line.
    let injected = Intent { target_closure: "/nix/store/x; rm -rf /".to_owned(), ..intent.clone() };
    refused!(check(&injected), VerifyError::Malformed { .. });

    // A host the manifest does not list at all.
    let stranger = Intent { hostname: "gpu-99".to_owned(), ..intent.clone() };
    let gpu_99 = HostIdentity { hostname: "gpu-99", ..ME };
    let err =
        refused!(verify_intent(&seal(&stranger, &director()), &keys, gpu_99, &manifest, &ts, &ctx), VerifyError::HostNotInManifest { .. });
    assert!(matches!(&err, VerifyError::HostNotInManifest { hostname, .. } if hostname == "gpu-99"), "{err:?}");

    let err = refused!(
        verify_intent(&seal(&intent, &director()), &keys, HostIdentity { host_id: OTHER_HOST_ID, ..ME }, &manifest, &ts, &ctx),
        VerifyError::WrongHost { .. }
    );
    assert!(matches!(&err, VerifyError::WrongHost { addressed, actual, .. } if addressed == HOST_ID && actual == OTHER_HOST_ID), "{err:?}");

    let expires = intent.expires_at;
    verify_intent(&seal(&intent, &director()), &keys, ME, &manifest, &ts, &VerifyContext::at(expires))
        .unwrap_or_else(|e| panic!("at expiry: {e}"));
    refused!(
        verify_intent(&seal(&intent, &director()), &keys, ME, &manifest, &ts, &VerifyContext::at(expires.plus_secs(1))),
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
fn intent_naming_another_hosts_entry_is_refused() {
    // A compromised director sends gpu-02 an intent that names gpu-01 with gpu-01's
    // (validly CI-signed) wave and target: every field agrees with the manifest, but it is
    // not this host's entry.
    let (manifest, ts, intent) = intent_fixture();
    let keys = KeySet::single(director().verifying_key());
    let ctx = VerifyContext::at(t0_plus(180));
    let gpu_01 = manifest.manifest.host("gpu-01").expect("gpu-01").clone();
    let borrowed =
        Intent { hostname: "gpu-01".to_owned(), wave_index: gpu_01.wave_index, target_closure: gpu_01.target_closure, ..intent.clone() };
    let err = refused!(verify_intent(&seal(&borrowed, &director()), &keys, ME, &manifest, &ts, &ctx), VerifyError::WrongHost { .. });
    assert!(matches!(&err, VerifyError::WrongHost { addressed, actual, .. } if addressed == "gpu-01" && actual == "gpu-02"), "{err:?}");
}

#[test]
fn intent_for_a_manifest_the_fresh_timestamp_no_longer_lists_is_refused() {
    // The agent caches manifests by sha256; once CI's timestamp moves on to another
    // rollout (and does not list this one as revertable), the cached one is not acted on.
    let (manifest, _, intent) = intent_fixture();
    let keys = KeySet::single(director().verifying_key());
    let next = release(&spec_with_ref("next"), &params("c2", t0_plus(100), 2, None), &[signer(1)]);
    let newer_ts = verified_timestamp(&next, &trust_of(&[&signer(1)]), t0_plus(180));
    refused!(
        verify_intent(&seal(&intent, &director()), &keys, ME, &manifest, &newer_ts, &VerifyContext::at(t0_plus(180))),
        VerifyError::ManifestNotInTimestamp { .. }
    );
}

#[test]
fn intent_signed_by_a_non_director_key_is_refused() {
    let (manifest, ts, intent) = intent_fixture();
    let keys = KeySet::single(director().verifying_key());
    let ctx = VerifyContext::at(t0_plus(180));
    // Neither a random key nor the CI release key may sign intents.
    for by in [signer(51), signer(1)] {
        let err = refused!(verify_intent(&seal(&intent, &by), &keys, ME, &manifest, &ts, &ctx), VerifyError::UnknownKey { .. });
        assert!(matches!(&err, VerifyError::UnknownKey { key_id, .. } if key_id == by.key_id()), "{err:?}");
    }
    // An envelope with no signature at all.
    let mut bare = seal(&intent, &director());
    bare.signatures.clear();
    refused!(verify_intent(&bare, &keys, ME, &manifest, &ts, &ctx), VerifyError::BelowThreshold { .. });
}

#[test]
fn intent_tampered_after_sealing_is_refused() {
    let (manifest, ts, intent) = intent_fixture();
    let keys = KeySet::single(director().verifying_key());
    let ctx = VerifyContext::at(t0_plus(180));
    let tampers: [(&str, Value); 4] = [
        ("targetClosure", json!("/nix/store/55555555555555555555555555555555-nixos-system-evil")),
        ("expiresAt", json!("2027-11-21T10:00:00Z")),
        ("hostId", json!(OTHER_HOST_ID)),
        ("extraField", json!(true)),
    ];
    for (field, value) in tampers {
        let mut env = seal(&intent, &director());
        env.signed[field] = value;
        let err = refused!(verify_intent(&env, &keys, ME, &manifest, &ts, &ctx), VerifyError::BadSignature { .. });
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
    let root = root_path(&r7);
    for p in [path.clone(), sig_path(&path), root.clone(), sig_path(&root)] {
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

    // Releasing again under an id already listed (here revertable r5, built at another
    // time, so other bytes) is refused: a manifest never changes bytes under its id.
    let err = build_release(&spec_with_ref("r5"), &params("c9", t0_plus(9 * 3600), 9, Some(timestamp_doc(last))), &[signer(1)])
        .expect_err("id reused with other bytes");
    assert!(matches!(&err, ReleaseError::RolloutIdReused { rollout_id, .. } if rollout_id.as_str() == "stable@r5"), "{err:?}");
    // Re-releasing the very same bytes under the current id is harmless and keeps the list.
    let same = build_release(&spec_with_ref("r8"), &params("c8", t0_plus(8 * 3600), 9, Some(timestamp_doc(last))), &[signer(1)])
        .unwrap_or_else(|e| panic!("identical re-release refused: {e}"));
    assert_eq!(timestamp_doc(&same).channels["stable"].revertable, timestamp_doc(last).channels["stable"].revertable);

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

#[test]
fn envelope_with_duplicate_keys_in_signed_is_refused() {
    // `{"hostname":"gpu-99","hostname":"gpu-02"}`: a lenient parser keeps the last value,
    // another tool might keep the first; two readers disagreeing about what was signed is
    // how signature checks get bypassed, so the envelope does not parse at all.
    let (_, _, intent) = intent_fixture();
    let env = seal(&intent, &director());
    let text = serde_json::to_string(&env).expect("json");
    let doubled = text.replacen("\"hostname\":\"gpu-02\"", "\"hostname\":\"gpu-99\",\"hostname\":\"gpu-02\"", 1);
    assert_ne!(doubled, text);
    let err = serde_json::from_str::<Envelope>(&doubled).expect_err("duplicate key");
    assert!(err.to_string().contains("duplicate object key"), "{err}");
    // Also when the envelope travels inside a check-in response.
    let response = format!(r#"{{"intent":{doubled},"tasks":[],"nextCheckinSecs":30}}"#);
    assert!(serde_json::from_str::<drover_proto::report::CheckinResponse>(&response).is_err());
    assert_eq!(serde_json::from_str::<Envelope>(&text).expect("clean envelope parses"), env);
}

#[test]
fn resigning_with_an_earlier_signing_time_is_refused() {
    let mut files = small_release(&[signer(1)]);
    let before = timestamp_doc(&files);
    assert!(before.signed_at > t0_minus(60));
    let err = resign_timestamp(&mut files, None, t0_minus(60), &[signer(1)]).expect_err("backwards");
    assert!(matches!(err, ReleaseError::TimeGoesBackwards { .. }), "{err:?}");
    assert_eq!(timestamp_doc(&files), before, "nothing re-signed");
}

#[test]
fn building_on_a_previous_release_signed_later_is_refused() {
    // A new release dated before the one it follows would sort before it in time while
    // claiming a higher version.
    let prev = small_release(&[signer(1)]);
    let prev_doc = timestamp_doc(&prev);
    let err = build_release(&spec_with_ref("later"), &params("c2", t0_minus(60), prev_doc.version + 1, Some(prev_doc)), &[signer(1)])
        .expect_err("backwards");
    assert!(matches!(err, ReleaseError::TimeGoesBackwards { .. }), "{err:?}");
}
