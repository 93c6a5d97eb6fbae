//! The artifact schema's safe-integer rule: a signed document (release artifact, intent,
//! task) carries no integer beyond ±(2^53 − 1). RFC 8785 writes such an integer as the
//! double nearest to it, so its value depends on the reader (Rust reads
//! `1152921504606847000` as that u64, a JavaScript or Python JCS reader as 2^60); verifiers
//! refuse it with `VerifyError::UnsafeInteger` even when a trusted key signed it, and CI and
//! the director refuse to sign it. The canonicaliser itself takes every number.

use crate::common;

use common::*;
use drover_proto::artifacts::{MAX_SAFE_INTEGER, SchemaError, check_safe_integers};
use drover_proto::canonical;
use drover_proto::keys::KeySigner;
use drover_proto::release::{
    FLEET_RESOLVED, ReleaseError, ReleaseFiles, TIMESTAMP, build_release, manifest_path, sig_path, verify_release,
};
use drover_proto::resolve::ResolveError;
use drover_proto::sig::{Envelope, SignError, sign_bytes};
use drover_proto::task::{Task, TaskKind};
use drover_proto::trust::KeySet;
use drover_proto::verify::{HostIdentity, VerifyContext, VerifyError, verify_fleet_resolved, verify_intent, verify_task, verify_timestamp};
use serde_json::{Value, json};

/// 2^60: written by RFC 8785 as `1152921504606847000`, which Rust reads as another integer.
const TWO_POW_60: u64 = 1 << 60;

const HOST_ID: &str = "0f0e0d0c-0b0a-4909-8807-060504030201";

/// Re-signs `path` of a release after `edit` changed its JSON: canonical bytes, a valid
/// signature by `by`. Returns the new bytes.
fn resign(files: &mut ReleaseFiles, path: &str, by: &KeySigner, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(files.get(path).expect("artifact")).expect("artifact parses");
    edit(&mut value);
    let bytes = canonical::to_vec(&value).expect("the canonicaliser takes every number");
    assert!(canonical::is_canonical(&bytes), "the forged artifact is canonical, so only the schema rule can refuse it");
    let sig = canonical::to_vec_of(&sign_bytes(&bytes, std::slice::from_ref(by)).expect("sign")).expect("sig file");
    files.files.insert(sig_path(path), sig);
    files.files.insert(path.to_owned(), bytes.clone());
    bytes
}

/// Asserts a refusal under the safe-integer rule, at `pointer`, naming `number`.
fn assert_unsafe_integer(e: &VerifyError, pointer: &str, number: &str) {
    let VerifyError::UnsafeInteger { source: SchemaError::UnsafeInteger { pointer: p, number: n }, .. } = e else {
        panic!("expected UnsafeInteger, got {e:?} ({e})");
    };
    assert_eq!((p.as_str(), n.as_str()), (pointer, number), "{e}");
    assert_eq!(e.rule(), "UnsafeInteger");
    assert!(e.to_string().contains("outside ±(2^53 - 1)"), "the message names the rule: {e}");
}

#[test]
fn unsafe_integer_in_a_signed_manifest_is_refused() {
    let ci = signer(1);
    let mut files = small_release(std::slice::from_ref(&ci));
    let trust = trust_of(&[&ci]);
    let id = current_id(&files, "stable");
    let path = manifest_path(&id);
    let bytes = resign(&mut files, &path, &ci, |m| m["waves"][1]["soakSecs"] = json!(TWO_POW_60));
    assert!(String::from_utf8_lossy(&bytes).contains("\"soakSecs\":1152921504606847000"), "RFC 8785 writes 2^60 as a double");
    // A Rust reader would take this soak time as 1152921504606847000 s, a JavaScript one as 2^60 s.
    let ts = verified_timestamp(&files, &trust, t0_plus(60));
    let e = refused!(verify_manifest_in(&files, &id, &ts, &trust, t0_plus(60)), VerifyError::UnsafeInteger { .. });
    assert_unsafe_integer(&e, "/waves/1/soakSecs", "1152921504606847000");
    assert!(e.to_string().starts_with(&format!("{path}: ")), "the message names the artifact: {e}");
    refused!(verify_release(&files, &trust, &VerifyContext::at(t0_plus(60))), VerifyError::UnsafeInteger { .. });
}

#[test]
fn unsafe_integer_in_a_signed_timestamp_is_refused() {
    let ci = signer(1);
    let mut files = small_release(std::slice::from_ref(&ci));
    let trust = trust_of(&[&ci]);
    // 2^53 itself is out: the range is ±(2^53 − 1), where every integer is exactly a double.
    resign(&mut files, TIMESTAMP, &ci, |t| t["version"] = json!(MAX_SAFE_INTEGER + 1));
    let ctx = VerifyContext::at(t0_plus(60));
    let e = refused!(verify_timestamp(files.get(TIMESTAMP).expect("ts"), files.get(&sig_path(TIMESTAMP)).expect("sig"), &trust, &ctx), _);
    assert_unsafe_integer(&e, "/version", "9007199254740992");
}

#[test]
fn unsafe_integer_in_a_signed_fleet_resolved_is_refused() {
    let ci = signer(1);
    let mut files = small_release(std::slice::from_ref(&ci));
    let trust = trust_of(&[&ci]);
    // A negative one too, and as a double written without a fraction: still that integer.
    resign(&mut files, FLEET_RESOLVED, &ci, |f| f["channels"]["stable"]["waves"][0]["soakSecs"] = json!(-1e17));
    let (bytes, sig) = (files.get(FLEET_RESOLVED).expect("fleet"), files.get(&sig_path(FLEET_RESOLVED)).expect("sig"));
    let e = refused!(verify_fleet_resolved(bytes, sig, &trust, &VerifyContext::at(t0_plus(60))), _);
    assert_unsafe_integer(&e, "/channels/stable/waves/0/soakSecs", "-100000000000000000");
}

/// A director-signed envelope whose `signed` part is `message` edited by `edit`, signed
/// as is (bypassing `Envelope::seal`, which refuses).
fn forged_envelope<T: serde::Serialize>(message: &T, director: &KeySigner, edit: impl FnOnce(&mut Value)) -> Envelope {
    let mut signed = serde_json::to_value(message).expect("value");
    edit(&mut signed);
    let bytes = canonical::to_vec(&signed).expect("canonical");
    Envelope { signed, signatures: sign_bytes(&bytes, std::slice::from_ref(director)).expect("sign").signatures }
}

fn director_keys(director: &KeySigner) -> KeySet {
    trust_of(&[director]).ci
}

fn drain_task(timeout_secs: u64) -> Task {
    Task {
        task_id: "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f".to_owned(),
        host_id: HOST_ID.to_owned(),
        job_id: None,
        issued_at: at(T0),
        expires_at: t0_plus(3600),
        kind: TaskKind::Drain { timeout_secs },
    }
}

#[test]
fn unsafe_integer_in_a_signed_task_is_refused() {
    let director = signer(7);
    let keys = director_keys(&director);
    let ctx = VerifyContext::at(t0_plus(60));
    let good = forged_envelope(&drain_task(600), &director, |_| {});
    verify_task(&good, &keys, HOST_ID, &ctx).expect("the same task with a safe timeout verifies");
    let env = forged_envelope(&drain_task(600), &director, |t| t["kind"]["timeoutSecs"] = json!(TWO_POW_60));
    let e = refused!(verify_task(&env, &keys, HOST_ID, &ctx), _);
    assert_unsafe_integer(&e, "/kind/timeoutSecs", "1152921504606846976");
    // Through the wire form too: the agent parses the envelope from bytes.
    let wire = serde_json::to_vec(&env).expect("json");
    let back: Envelope = serde_json::from_slice(&wire).expect("envelope parses");
    refused!(verify_task(&back, &keys, HOST_ID, &ctx), VerifyError::UnsafeInteger { .. });
}

#[test]
fn unsafe_integer_in_a_signed_intent_is_refused() {
    let ci = signer(1);
    let files = small_release(std::slice::from_ref(&ci));
    let trust = trust_of(&[&ci]);
    let now = t0_plus(60);
    let ts = verified_timestamp(&files, &trust, now);
    let id = current_id(&files, "stable");
    let manifest = verify_manifest_in(&files, &id, &ts, &trust, now).expect("manifest verifies");
    let director = signer(7);
    let intent = json!({
        "intentId": "7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a",
        "hostId": HOST_ID,
        "hostname": "gpu-01",
        "rolloutId": id.to_string(),
        "manifestSha256": manifest.sha256,
        "waveIndex": 0,
        "targetClosure": "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system-gpu-01",
        "issuedAt": T0,
        "expiresAt": "2026-11-21T11:00:00Z",
        "confirmWindowSecs": 120
    });
    let host = HostIdentity { host_id: HOST_ID, hostname: "gpu-01" };
    let keys = director_keys(&director);
    let ctx = VerifyContext::at(now);
    let good = forged_envelope(&intent, &director, |_| {});
    verify_intent(&good, &keys, host, &manifest, &ts, &ctx).expect("the same intent with a safe window verifies");
    let env = forged_envelope(&intent, &director, |i| i["confirmWindowSecs"] = json!(u64::MAX));
    let e = refused!(verify_intent(&env, &keys, host, &manifest, &ts, &ctx), _);
    assert_unsafe_integer(&e, "/confirmWindowSecs", "18446744073709551615");
}

#[test]
fn ci_refuses_to_sign_a_release_with_an_unsafe_integer() {
    let ci = signer(1);
    // The largest safe soak time releases and verifies.
    let mut json = small_spec_json();
    json["rolloutPolicies"]["canary-first"]["waves"][1]["soakSecs"] = json!(MAX_SAFE_INTEGER);
    let files = release(&spec_from(&json), &params("c0ffee1", at(T0), 1, None), std::slice::from_ref(&ci));
    verify_release(&files, &trust_of(&[&ci]), &VerifyContext::at(t0_plus(60))).expect("2^53 - 1 is safe");

    json["rolloutPolicies"]["canary-first"]["waves"][1]["soakSecs"] = json!(MAX_SAFE_INTEGER + 1);
    let e = refused!(
        build_release(&spec_from(&json), &params("c0ffee1", at(T0), 1, None), std::slice::from_ref(&ci)),
        ReleaseError::Resolve(ResolveError::Schema { .. })
    );
    let text = e.to_string();
    assert!(
        text.starts_with("fleet.resolved.json: refusing to sign: integer 9007199254740992 at \"/channels/stable/waves/1/soakSecs\""),
        "{text}"
    );

    let e = refused!(
        build_release(&small_spec(), &params("c0ffee1", at(T0), TWO_POW_60, None), std::slice::from_ref(&ci)),
        ReleaseError::Resolve(ResolveError::Schema { .. })
    );
    assert!(e.to_string().starts_with("timestamp.json: refusing to sign: integer 1152921504606846976 at \"/version\""), "{e}");
}

#[test]
fn the_director_refuses_to_seal_an_unsafe_integer() {
    let director = signer(7);
    let e = refused!(Envelope::seal(&drain_task(TWO_POW_60), std::slice::from_ref(&director)), SignError::Schema(_));
    assert!(e.to_string().contains("integer 1152921504606846976 at \"/kind/timeoutSecs\""), "{e}");
    Envelope::seal(&drain_task(MAX_SAFE_INTEGER), std::slice::from_ref(&director)).expect("2^53 - 1 is safe");
}

/// The rule itself: integers (and doubles without a fraction) within ±(2^53 − 1) pass,
/// anything beyond is reported at its JSON pointer (RFC 6901 escapes), first in key order.
#[test]
fn the_safe_integer_rule_reports_the_first_offender_by_json_pointer() {
    for ok in ["0", "-9007199254740991", "9007199254740991", "1.5", "-0.0", "4503599627370495.5", "[1,{\"a\":null}]", "\"1e30\""] {
        let value: Value = serde_json::from_str(ok).expect("json");
        check_safe_integers(&value).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for (text, pointer, number) in [
        ("9007199254740992", "", "9007199254740992"),
        ("-9007199254740992", "", "-9007199254740992"),
        ("1e300", "", "1e+300"),
        ("[0,[1,18446744073709551616]]", "/1/1", "1.8446744073709552e+19"),
        ("{\"b\":[1e20],\"a/b\":{\"c~d\":[0,-9223372036854775808]}}", "/a~1b/c~0d/1", "-9223372036854775808"),
    ] {
        let value: Value = serde_json::from_str(text).expect("json");
        let SchemaError::UnsafeInteger { pointer: p, number: n } = check_safe_integers(&value).expect_err(text);
        assert_eq!((p.as_str(), n.as_str()), (pointer, number), "{text}");
    }
    // A pointer built from a huge key is cut to a bound with its length.
    let value = json!({ "k".repeat(100_000): TWO_POW_60 });
    let SchemaError::UnsafeInteger { pointer, .. } = check_safe_integers(&value).expect_err("unsafe");
    assert!(pointer.len() < 400 && pointer.ends_with("(100001 bytes)"), "{}", pointer.len());
}
