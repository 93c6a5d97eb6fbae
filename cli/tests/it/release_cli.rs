//! End-to-end tests of the real `drover` binary on the happy path and against the attacks a
//! verifier exists for: keygen's files and key id, deterministic releases, verify's
//! refusals (unknown key, stale, rollback, tampering, mix-and-match, smuggled manifests),
//! `release timestamp` and `--previous`.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::{COMMIT, NOW, SIGNED_AT, Scratch, example_spec, openssl, read_json, s, sha256_hex, tree};

const GPU_MANIFEST: &str = "rel/rollouts/gpu@c0ffee.json";

#[test]
fn keygen_writes_0600_private_key_and_public_key_and_prints_sha256_of_raw_public_key() {
    let sc = Scratch::new();
    let key_id = sc.keygen("ci");

    let key = sc.join("ci.key");
    let public = sc.join("ci.pub");
    assert_eq!(fs::metadata(&key).expect("ci.key").permissions().mode() & 0o777, 0o600, "private key must be 0600");
    let pub_mode = fs::metadata(&public).expect("ci.pub").permissions().mode() & 0o777;
    assert_eq!(pub_mode & 0o022, 0, "public key must not be group/world writable: {pub_mode:o}");
    assert!(fs::read_to_string(&key).expect("read").starts_with("-----BEGIN PRIVATE KEY-----"));
    assert!(fs::read_to_string(&public).expect("read").starts_with("-----BEGIN PUBLIC KEY-----"));

    assert_eq!(key_id.len(), 64, "key id {key_id:?}");
    assert!(key_id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "lowercase hex: {key_id:?}");
    // Independently: the SPKI DER of an Ed25519 key ends with the 32 raw bytes.
    let der = openssl(&["pkey", "-pubin", "-in", s(&public), "-outform", "DER"]);
    assert_eq!(der.len(), 44, "Ed25519 SPKI DER is 44 bytes");
    assert_eq!(key_id, sha256_hex(&der[der.len() - 32..]));
}

#[test]
fn keygen_refuses_to_overwrite_an_existing_key() {
    let sc = Scratch::new();
    sc.keygen("ci");
    let before_key = fs::read(sc.join("ci.key")).expect("read");
    let before_pub = fs::read(sc.join("ci.pub")).expect("read");

    sc.drover(&["keygen", "--out", "ci"]).fails_with(73).stderr_has(&["ci.key", "refusing to overwrite"]);
    assert_eq!(fs::read(sc.join("ci.key")).expect("read"), before_key, "private key changed");
    assert_eq!(fs::read(sc.join("ci.pub")).expect("read"), before_pub, "public key changed");

    // Only the .pub present (say, copied from elsewhere): still refused, nothing written.
    sc.write("lone.pub", "not mine");
    sc.drover(&["keygen", "--out", "lone"]).fails_with(73).stderr_has(&["lone.pub"]);
    assert!(!sc.join("lone.key").exists(), "no private key may be left behind");
    assert_eq!(fs::read(sc.join("lone.pub")).expect("read"), b"not mine");
}

#[test]
fn keygen_appends_extensions_to_a_dotted_name() {
    let sc = Scratch::new();
    sc.keygen("ci.2025");
    assert!(sc.join("ci.2025.key").exists() && sc.join("ci.2025.pub").exists(), "NAME.key and NAME.pub, NAME kept whole");
    assert!(!sc.join("ci.key").exists(), "the part after the dot must not be replaced");
}

#[test]
fn release_is_deterministic_byte_for_byte() {
    let sc = Scratch::new();
    sc.keygen("ci");
    let pinned = ["--version", "42"];
    let a = sc.release("a", "ci.key", &pinned);
    a.ok();
    sc.release("b", "ci.key", &pinned).ok();
    let (ta, tb) = (tree(&sc.join("a")), tree(&sc.join("b")));
    assert_eq!(ta, tb, "same inputs must give identical trees");
    let names: Vec<&str> = ta.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "fleet.resolved.json",
            "fleet.resolved.json.sig",
            "rollouts/gpu@c0ffee.json",
            "rollouts/gpu@c0ffee.json.sig",
            "rollouts/infra@c0ffee.json",
            "rollouts/infra@c0ffee.json.sig",
            "roots/gpu@c0ffee.json",
            "roots/gpu@c0ffee.json.sig",
            "roots/infra@c0ffee.json",
            "roots/infra@c0ffee.json.sig",
            "timestamp.json",
            "timestamp.json.sig",
        ]
    );
    // The printed sha256 of each artifact is the sha256 of its bytes.
    let ts = &ta.iter().find(|(n, _)| n == "timestamp.json").expect("timestamp").1;
    a.stdout_has(&format!("timestamp.json  sha256 {}", sha256_hex(ts)));
    assert_eq!(read_json(&sc.join("a/timestamp.json"))["version"], 42);
}

#[test]
fn release_defaults_are_deterministic_too() {
    // No --version and no --ci-commit: the version is the signing time, the commit derives
    // from the signing time and the spec's canonical hash.
    let sc = Scratch::new();
    sc.keygen("ci");
    let spec = example_spec();
    for out in ["a", "b"] {
        sc.drover(&["release", "--fleet", s(&spec), "--key", "ci.key", "--signed-at", SIGNED_AT, "--out", out]).ok();
    }
    assert_eq!(tree(&sc.join("a")), tree(&sc.join("b")));
    let ts = read_json(&sc.join("a/timestamp.json"));
    assert_eq!(ts["version"], 1_735_689_600u64, "default version = signing time in Unix seconds");
    let id = ts["channels"]["gpu"]["rolloutId"].as_str().expect("rolloutId");
    let rest = id.strip_prefix("gpu@20250101T000000Z-").unwrap_or_else(|| panic!("default ref is <signedAt>-<hex>: {id}"));
    assert_eq!(rest.len(), 12, "{id}");
}

#[test]
fn release_refuses_a_non_empty_out_dir() {
    let sc = Scratch::new();
    sc.keygen("ci");
    fs::create_dir(sc.join("out")).expect("mkdir");
    sc.write("out/keep.txt", "precious");
    sc.release("out", "ci.key", &[]).fails_with(73).stderr_has(&["not empty"]);
    assert_eq!(tree(&sc.join("out")), vec![("keep.txt".to_owned(), b"precious".to_vec())], "out must be untouched");

    // An empty existing directory is fine.
    fs::create_dir(sc.join("empty")).expect("mkdir");
    sc.release("empty", "ci.key", &[]).ok();
    // A file where the directory should go is not.
    sc.write("file", "x");
    sc.release("file", "ci.key", &[]).fails_with(73);
}

#[test]
fn release_then_verify_accepts() {
    let sc = Scratch::signed_release();
    sc.verify("trust.json", &[], &["rel"])
        .ok()
        .stdout_has("OK rel")
        .stdout_has("gpu@c0ffee")
        .stdout_has("infra@c0ffee")
        .stdout_has("recomputed from the manifest");
}

#[test]
fn verify_refuses_a_release_whose_manifest_lost_its_signed_root() {
    // Agents verify the root, not the manifest: a release without it, or with a root that is
    // not its manifest's, is refused whole.
    let sc = Scratch::signed_release();
    std::fs::remove_file(sc.join("rel/roots/gpu@c0ffee.json")).expect("rm");
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["RootMissing", "gpu@c0ffee"]);
}

#[test]
fn verify_refuses_a_release_signed_by_a_key_not_in_trust() {
    let sc = Scratch::signed_release();
    sc.keygen("other");
    sc.trust("other-trust.json", &["other.pub"]);
    sc.verify("other-trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["REFUSED", "UnknownKey"]);
}

#[test]
fn verify_refuses_a_stale_timestamp() {
    let sc = Scratch::signed_release();
    let r = sc.drover(&["verify", "--trust", "trust.json", "--now", "2030-01-01T00:00:00Z", "rel"]);
    r.fails_with(1).stderr_has(&["REFUSED", "Stale"]);
    // Without --now the real clock is used, which is long past a 2025 signature's window.
    sc.drover(&["verify", "--trust", "trust.json", "rel"]).fails_with(1).stderr_has(&["Stale"]);
}

#[test]
fn verify_refuses_a_timestamp_from_the_future() {
    let sc = Scratch::signed_release();
    let r = sc.drover(&["verify", "--trust", "trust.json", "--now", "2024-12-31T00:00:00Z", "rel"]);
    r.fails_with(1).stderr_has(&["FutureDated"]);
}

#[test]
fn release_timestamp_increments_the_version_and_still_verifies() {
    let sc = Scratch::signed_release();
    let before = read_json(&sc.join("rel/timestamp.json"));
    let manifest_before = fs::read(sc.join(GPU_MANIFEST)).expect("read");
    let v = before["version"].as_u64().expect("version");

    sc.drover(&["release", "timestamp", "rel", "--key", "ci.key", "--signed-at", "2025-01-01T00:30:00Z"]).ok();
    let after = read_json(&sc.join("rel/timestamp.json"));
    assert_eq!(after["version"].as_u64(), Some(v + 1));
    assert_eq!(after["signedAt"], "2025-01-01T00:30:00Z");
    assert_eq!(after["channels"], before["channels"], "only version and signedAt change");
    assert_eq!(fs::read(sc.join(GPU_MANIFEST)).expect("read"), manifest_before, "manifests are immutable");
    sc.verify("trust.json", &["--min-version", &(v + 1).to_string()], &["rel"]).ok();

    // An explicit version must still go up.
    sc.drover(&["release", "timestamp", "rel", "--key", "ci.key", "--version", &v.to_string()])
        .fails_with(65)
        .stderr_has(&["must be greater"]);
    // A key that did not sign the existing timestamp refuses to re-sign it.
    sc.keygen("rogue");
    sc.drover(&["release", "timestamp", "rel", "--key", "rogue.key", "--signed-at", "2025-01-01T00:40:00Z"])
        .fails_with(65)
        .stderr_has(&["CI only re-signs or builds on its own", "signed by unknown key"]);
    sc.verify("trust.json", &[], &["rel"]).ok();
}

#[test]
fn release_timestamp_refuses_a_timestamp_pointing_at_swapped_artifacts() {
    // Someone with write access to the release directory swaps a manifest: CI must not
    // re-sign a timestamp whose listed artifacts are not the ones present.
    let sc = Scratch::signed_release();
    let mut bytes = fs::read(sc.join(GPU_MANIFEST)).expect("read");
    let pos = bytes.iter().position(|b| *b == b'1').expect("a digit");
    bytes[pos] = b'2';
    fs::write(sc.join(GPU_MANIFEST), bytes).expect("write");
    sc.drover(&["release", "timestamp", "rel", "--key", "ci.key", "--signed-at", "2025-01-01T00:30:00Z"])
        .fails_with(65)
        .stderr_has(&["sha256", "the timestamp lists"]);
}

#[test]
fn verify_refuses_a_version_below_min_version() {
    let sc = Scratch::signed_release();
    let v = read_json(&sc.join("rel/timestamp.json"))["version"].as_u64().expect("version");
    sc.verify("trust.json", &["--min-version", &v.to_string()], &["rel"]).ok();
    sc.verify("trust.json", &["--min-version", &(v + 1).to_string()], &["rel"]).fails_with(1).stderr_has(&["VersionRollback"]);
}

#[test]
fn verify_a_single_manifest_file_against_its_release_timestamp() {
    let sc = Scratch::signed_release();
    sc.verify("trust.json", &[], &[GPU_MANIFEST]).ok().stdout_has("rollout gpu@c0ffee");
    sc.verify("trust.json", &[], &["rel/timestamp.json", "rel/fleet.resolved.json"]).ok();
    // From inside rollouts/, the timestamp is ../timestamp.json.
    let inside =
        common::drover_in(&sc.join("rel/rollouts"), &["verify", "--trust", "../../trust.json", "--now", NOW, "gpu@c0ffee.json"], b"");
    inside.ok();
    // The manifest's freshness comes from the timestamp: a stale timestamp refuses it.
    sc.drover(&["verify", "--trust", "trust.json", "--now", "2030-01-01T00:00:00Z", GPU_MANIFEST]).fails_with(1).stderr_has(&["Stale"]);
}

#[test]
fn a_tampered_manifest_byte_is_refused() {
    let sc = Scratch::signed_release();
    let path = sc.join(GPU_MANIFEST);
    let mut bytes = fs::read(&path).expect("read");
    // Point a host at another closure: change one character of a store path.
    let at = bytes.windows(11).position(|w| w == b"/nix/store/").expect("a closure") + 11;
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    fs::write(&path, &bytes).expect("write");
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["REFUSED"]);
    sc.verify("trust.json", &[], &[GPU_MANIFEST]).fails_with(1).stderr_has(&["REFUSED"]);
}

#[test]
fn a_re_formatted_but_equal_artifact_is_refused_as_not_canonical() {
    let sc = Scratch::signed_release();
    let path = sc.join("rel/timestamp.json");
    let doc = read_json(&path);
    fs::write(&path, serde_json::to_vec_pretty(&doc).expect("json")).expect("write");
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["NotCanonical"]);
}

#[test]
fn a_signature_from_another_artifact_is_refused() {
    let sc = Scratch::signed_release();
    // Valid CI signature, wrong file: the infra manifest's sig next to the gpu manifest.
    fs::copy(sc.join("rel/rollouts/infra@c0ffee.json.sig"), sc.join("rel/rollouts/gpu@c0ffee.json.sig")).expect("copy");
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["REFUSED"]);
}

#[test]
fn a_timestamp_from_another_release_is_refused() {
    let sc = Scratch::signed_release();
    sc.release("other", "ci.key", &["--ci-commit", "beef", "--version", "7"]).ok();
    for f in ["timestamp.json", "timestamp.json.sig"] {
        fs::copy(sc.join("other").join(f), sc.join("rel").join(f)).expect("copy");
    }
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["FleetResolvedNotInTimestamp"]);
}

#[test]
fn a_manifest_the_timestamp_does_not_list_is_refused() {
    let sc = Scratch::signed_release();
    // A correctly signed manifest smuggled in under another id.
    sc.release("other", "ci.key", &["--ci-commit", "beef"]).ok();
    for f in ["gpu@beef.json", "gpu@beef.json.sig"] {
        fs::copy(sc.join("other/rollouts").join(f), sc.join("rel/rollouts").join(f)).expect("copy");
    }
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["ManifestNotInTimestamp"]);
}

#[test]
fn a_missing_manifest_is_refused() {
    let sc = Scratch::signed_release();
    fs::remove_file(sc.join(GPU_MANIFEST)).expect("rm");
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["gpu@c0ffee"]);
}

#[test]
fn a_symlinked_release_file_is_refused() {
    let sc = Scratch::signed_release();
    let ts = sc.join("rel/timestamp.json");
    fs::rename(&ts, sc.join("elsewhere.json")).expect("mv");
    std::os::unix::fs::symlink(sc.join("elsewhere.json"), &ts).expect("symlink");
    sc.verify("trust.json", &[], &["rel"]).fails_with(65).stderr_has(&["symlink"]);
}

#[test]
fn previous_fills_revertable_in_the_new_timestamp() {
    let sc = Scratch::signed_release();
    let old = read_json(&sc.join("rel/timestamp.json"));
    let r = sc.release("next", "ci.key", &["--ci-commit", "d00d", "--signed-at", "2025-01-01T00:10:00Z", "--previous", "rel"]);
    r.ok();
    let new = read_json(&sc.join("next/timestamp.json"));
    assert!(new["version"].as_u64() > old["version"].as_u64(), "version must increase over the previous");
    for channel in ["gpu", "infra"] {
        let revertable = new["channels"][channel]["revertable"].as_array().expect("revertable list");
        assert_eq!(revertable.len(), 1, "{channel}: {revertable:?}");
        assert_eq!(revertable[0]["rolloutId"], old["channels"][channel]["rolloutId"]);
        assert_eq!(revertable[0]["manifestSha256"], old["channels"][channel]["manifestSha256"]);
    }
    sc.verify("trust.json", &[], &["next"]).ok();

    // A third release lists both, newest first.
    sc.release("third", "ci.key", &["--ci-commit", "e1e1", "--signed-at", "2025-01-01T00:20:00Z", "--previous", "next"]).ok();
    let third = read_json(&sc.join("third/timestamp.json"));
    let ids: Vec<&str> =
        third["channels"]["gpu"]["revertable"].as_array().expect("list").iter().map(|e| e["rolloutId"].as_str().expect("id")).collect();
    assert_eq!(ids, ["gpu@d00d", &format!("gpu@{COMMIT}")]);

    // Without --previous the list is empty.
    assert_eq!(old["channels"]["gpu"]["revertable"], serde_json::json!([]));
}

#[test]
fn re_releasing_the_same_spec_later_opens_new_rollout_ids() {
    // Without --ci-commit, a manifest's bytes carry its creation time, so the same spec
    // released twice must not reuse a rollout id (that would change bytes under the id).
    let sc = Scratch::new();
    sc.keygen("ci");
    let spec = example_spec();
    sc.drover(&["release", "--fleet", s(&spec), "--key", "ci.key", "--signed-at", SIGNED_AT, "--out", "first"]).ok();
    sc.drover(&[
        "release",
        "--fleet",
        s(&spec),
        "--key",
        "ci.key",
        "--signed-at",
        "2025-01-01T00:30:00Z",
        "--previous",
        "first",
        "--out",
        "second",
    ])
    .ok();
    let first = read_json(&sc.join("first/timestamp.json"));
    let second = read_json(&sc.join("second/timestamp.json"));
    assert_ne!(first["channels"]["gpu"]["rolloutId"], second["channels"]["gpu"]["rolloutId"]);
    assert_eq!(second["channels"]["gpu"]["revertable"][0]["rolloutId"], first["channels"]["gpu"]["rolloutId"]);
}

#[test]
fn previous_with_a_version_that_does_not_increase_is_refused() {
    let sc = Scratch::signed_release();
    let r = sc.release("next", "ci.key", &["--ci-commit", "d00d", "--previous", "rel", "--version", "5"]);
    r.fails_with(65).stderr_has(&["must be greater"]);
    assert!(!sc.join("next").exists(), "nothing written on refusal");
}

#[test]
fn a_threshold_of_two_needs_two_distinct_keys() {
    let sc = Scratch::new();
    sc.keygen("a");
    sc.keygen("b");
    sc.drover(&["trust", "--pub", "a.pub", "--pub", "b.pub", "--threshold", "2", "--out", "trust2.json"]).ok();
    sc.release("both", "a.key", &["--key", "b.key"]).ok();
    sc.verify("trust2.json", &[], &["both"]).ok();
    sc.release("one", "a.key", &[]).ok();
    sc.verify("trust2.json", &[], &["one"]).fails_with(1).stderr_has(&["BelowThreshold"]);
    // The same key twice is not two signatures.
    sc.release("twice", "a.key", &["--key", "a.key"]).fails_with(64).stderr_has(&["given twice"]);
}

#[test]
fn reject_before_refuses_releases_signed_earlier() {
    let sc = Scratch::signed_release();
    sc.drover(&["trust", "--pub", "ci.pub", "--reject-before", "2025-01-01T00:05:00Z", "--out", "killed.json"]).ok();
    sc.verify("killed.json", &[], &["rel"]).fails_with(1).stderr_has(&["RejectedBefore"]);
    sc.drover(&["release", "timestamp", "rel", "--key", "ci.key", "--signed-at", "2025-01-01T00:30:00Z"]).ok();
    // The manifests and fleet.resolved still carry the old signing time: still refused.
    sc.verify("killed.json", &[], &["rel"]).fails_with(1).stderr_has(&["RejectedBefore", "fleet.resolved.json"]);
}

/// The release `rel`'s timestamp, edited by `edit` and written back in canonical form (so
/// that only the signature, not the formatting, can give the edit away).
fn edit_timestamp(sc: &Scratch, dir: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = sc.join(&format!("{dir}/timestamp.json"));
    let mut doc = read_json(&path);
    edit(&mut doc);
    let canonical = common::drover_in(sc.path(), &["canonicalize"], &serde_json::to_vec(&doc).expect("json"));
    fs::write(&path, &canonical.ok().stdout_bytes).expect("write");
}

#[test]
fn tampered_previous_timestamp_is_not_carried_forward() {
    // Someone able to write the previous release directory plants a rollback target of their
    // choosing in its timestamp: CI must not sign it into the next release's revertable list.
    let sc = Scratch::signed_release();
    edit_timestamp(&sc, "rel", |ts| {
        let planted = serde_json::json!({"rolloutId": "gpu@evil", "manifestSha256": "00".repeat(32)});
        ts["channels"]["gpu"]["revertable"].as_array_mut().expect("revertable").push(planted);
    });
    let r = sc.release("next", "ci.key", &["--ci-commit", "d00d", "--signed-at", "2025-01-01T00:10:00Z", "--previous", "rel"]);
    r.fails_with(65).stderr_has(&["--previous rel", "does not verify"]);
    assert!(!sc.join("next").exists(), "nothing written on refusal");

    // A timestamp left as it is but in a non-canonical form is not CI's output either.
    let sc = Scratch::signed_release();
    let doc = read_json(&sc.join("rel/timestamp.json"));
    fs::write(sc.join("rel/timestamp.json"), serde_json::to_vec_pretty(&doc).expect("json")).expect("write");
    sc.release("next", "ci.key", &["--ci-commit", "d00d", "--previous", "rel"]).fails_with(65).stderr_has(&["--previous rel"]);
    assert!(!sc.join("next").exists());
}

#[test]
fn previous_with_a_swapped_manifest_is_refused() {
    // The timestamp is intact but a manifest it lists was replaced: the previous release is
    // not what CI signed, so nothing of it is carried forward.
    let sc = Scratch::signed_release();
    let mut bytes = fs::read(sc.join(GPU_MANIFEST)).expect("read");
    let at = bytes.windows(11).position(|w| w == b"/nix/store/").expect("a closure") + 11;
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    fs::write(sc.join(GPU_MANIFEST), bytes).expect("write");
    let r = sc.release("next", "ci.key", &["--ci-commit", "d00d", "--previous", "rel"]);
    r.fails_with(65).stderr_has(&["--previous rel", "sha256", "the timestamp lists"]);
    assert!(!sc.join("next").exists());
    // And a previous release missing a manifest it lists is missing input.
    fs::remove_file(sc.join(GPU_MANIFEST)).expect("rm");
    sc.release("next", "ci.key", &["--ci-commit", "d00d", "--previous", "rel"]).fails_with(66).stderr_has(&["gpu@c0ffee"]);
    assert!(!sc.join("next").exists());
}

#[test]
fn previous_signed_by_another_key_is_refused() {
    // A validly signed release, but by a key that is not signing now: its timestamp is not
    // ours to carry forward (it could be anyone's).
    let sc = Scratch::signed_release();
    sc.keygen("other");
    sc.release("foreign", "other.key", &["--ci-commit", "f00"]).ok();
    let r = sc.release("next", "ci.key", &["--ci-commit", "d00d", "--signed-at", "2025-01-01T00:10:00Z", "--previous", "foreign"]);
    r.fails_with(65).stderr_has(&["--previous foreign", "does not verify", "unknown key"]);
    assert!(!sc.join("next").exists());
    // Signing with both keys now accepts either's previous release.
    sc.release("both", "ci.key", &["--key", "other.key", "--ci-commit", "d00d", "--previous", "foreign"]).ok();
}

#[test]
fn release_timestamp_refuses_a_signing_time_before_the_current_one() {
    // Re-signing "in the past" would make a timestamp look older than the one it replaces.
    let sc = Scratch::signed_release();
    let before = fs::read(sc.join("rel/timestamp.json")).expect("read");
    sc.drover(&["release", "timestamp", "rel", "--key", "ci.key", "--signed-at", "2024-12-31T23:59:59Z"])
        .fails_with(65)
        .stderr_has(&["rel", "before the previous"]);
    assert_eq!(fs::read(sc.join("rel/timestamp.json")).expect("read"), before, "timestamp untouched");
    // The same instant is not going backwards.
    sc.drover(&["release", "timestamp", "rel", "--key", "ci.key", "--signed-at", SIGNED_AT]).ok();
}

#[test]
fn re_releasing_a_commit_with_other_bytes_is_refused_as_rollout_id_reused() {
    // Same --ci-commit, later --signed-at: the manifests' bytes change (they carry their
    // creation time) under the same rollout ids, which agents and the coordinator cache by id.
    let sc = Scratch::signed_release();
    let r = sc.release("again", "ci.key", &["--signed-at", "2025-01-01T00:30:00Z", "--previous", "rel"]);
    r.fails_with(65).stderr_has(&["already released with other bytes", "@c0ffee"]);
    assert!(!sc.join("again").exists(), "nothing written on refusal");
    // The very same bytes again are not a reuse.
    sc.release("same", "ci.key", &["--previous", "rel"]).ok();
}

#[test]
fn a_symlinked_rollouts_directory_is_refused() {
    // A `rollouts` link would pull manifests from anywhere into the release.
    let sc = Scratch::signed_release();
    fs::rename(sc.join("rel/rollouts"), sc.join("elsewhere")).expect("mv");
    std::os::unix::fs::symlink(sc.join("elsewhere"), sc.join("rel/rollouts")).expect("symlink");
    sc.verify("trust.json", &[], &["rel"]).fails_with(65).stderr_has(&["rollouts", "symlink"]);
    sc.drover(&["release", "timestamp", "rel", "--key", "ci.key", "--signed-at", "2025-01-01T00:30:00Z"])
        .fails_with(65)
        .stderr_has(&["symlink"]);
    sc.release("next", "ci.key", &["--ci-commit", "d00d", "--previous", "rel"]).fails_with(65).stderr_has(&["symlink"]);
    assert!(!sc.join("next").exists());
    // The release directory itself may be reached through a symlink.
    fs::remove_file(sc.join("rel/rollouts")).expect("rm link");
    fs::rename(sc.join("elsewhere"), sc.join("rel/rollouts")).expect("mv back");
    std::os::unix::fs::symlink(sc.join("rel"), sc.join("rel-link")).expect("symlink");
    sc.verify("trust.json", &[], &["rel-link"]).ok();
}

#[test]
fn a_lone_fleet_resolved_verifies_with_freshness_unknown() {
    // A fleet.resolved alone carries no freshness; its OK must not read as "current".
    let sc = Scratch::signed_release();
    let r = sc.drover(&["verify", "--trust", "trust.json", "--now", "2030-01-01T00:00:00Z", "rel/fleet.resolved.json"]);
    r.ok().stdout_has("(signature and rules only: not checked against a timestamp, freshness unknown)");
    // The timestamp and a manifest do carry it.
    sc.verify("trust.json", &[], &["rel/timestamp.json", GPU_MANIFEST]).ok();
    assert!(!sc.verify("trust.json", &[], &["rel/timestamp.json"]).stdout.contains("freshness unknown"));
}

#[test]
fn key_rotation_with_trust_windows_accepts_each_key_only_inside_its_window() {
    // The old key counts until 2025-01-02, the new one from 2025-01-01T12:00: a release
    // signed by either verifies during the overlap; after it, only the new key's does.
    let sc = Scratch::new();
    sc.keygen("old");
    sc.keygen("new");
    sc.drover(&["trust", "--pub", "old.pub@..2025-01-02T00:00:00Z", "--pub", "new.pub@2025-01-01T12:00:00Z..", "--out", "trust.json"]).ok();
    let trust = read_json(&sc.join("trust.json"));
    assert_eq!(trust["ci"]["keys"][0]["notAfter"], "2025-01-02T00:00:00Z");
    assert_eq!(trust["ci"]["keys"][1]["notBefore"], "2025-01-01T12:00:00Z");
    let signed_at = "2025-01-01T18:00:00Z";
    sc.release("by-old", "old.key", &["--signed-at", signed_at]).ok();
    sc.release("by-new", "new.key", &["--signed-at", signed_at, "--ci-commit", "c0ffee2"]).ok();
    let verify_at = |now: &str, dir: &str| sc.drover(&["verify", "--trust", "trust.json", "--now", now, dir]);
    verify_at("2025-01-01T20:00:00Z", "by-old").ok();
    verify_at("2025-01-01T20:00:00Z", "by-new").ok();
    verify_at("2025-01-02T06:00:00Z", "by-old").fails_with(1).stderr_has(&["KeyNotValidAt"]);
    verify_at("2025-01-02T06:00:00Z", "by-new").ok();
    // Before its window the new key does not count either.
    verify_at("2025-01-01T11:00:00Z", "by-new").fails_with(1).stderr_has(&["KeyNotValidAt"]);
    // A window that ends before it starts is refused when the trust file is written.
    sc.drover(&["trust", "--pub", "new.pub@2025-02-01T00:00:00Z..2025-01-01T00:00:00Z", "--out", "bad.json"]).fails_with(65);
    assert!(!sc.join("bad.json").exists());
}
