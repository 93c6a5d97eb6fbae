//! Interoperability of the real `drover` binary with OpenSSL 3, both ways: drover's keys and
//! signatures are readable and checkable by `openssl`, keys made by `openssl genpkey` work in
//! `drover release` and `drover trust`, and `--sign-cmd` drives an external signer (here
//! `openssl pkeyutl`), refusing a signer that fails, prints garbage or signs with another key.

use crate::common;

use std::fs;
use std::path::Path;

use base64::Engine as _;
use common::{Scratch, openssl, openssl_run, read_json, s};

/// Every artifact of the example release made with commit `c0ffee`.
const ARTIFACTS: [&str; 6] = [
    "fleet.resolved.json",
    "rollouts/gpu@c0ffee.json",
    "rollouts/infra@c0ffee.json",
    "roots/gpu@c0ffee.json",
    "roots/infra@c0ffee.json",
    "timestamp.json",
];

/// `openssl genpkey -algorithm ed25519` into NAME.pem, and its public key into NAME.pub.pem.
fn openssl_key(sc: &Scratch, name: &str) {
    let pem = sc.join(&format!("{name}.pem"));
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", s(&pem)]);
    openssl(&["pkey", "-in", s(&pem), "-pubout", "-out", s(&sc.join(&format!("{name}.pub.pem")))]);
}

/// A `--sign-cmd` that signs stdin with `key` through `openssl pkeyutl -rawin` (which needs a
/// file, not a pipe) and records `$DROVER_KEY_ID` in `key_id_log`.
fn openssl_sign_cmd(key: &Path, key_id_log: &Path) -> String {
    format!(
        "f=$(mktemp); cat > \"$f\"; printf '%s\\n' \"$DROVER_KEY_ID\" >> '{log}'; \
         openssl pkeyutl -sign -inkey '{key}' -rawin -in \"$f\" | base64 -w0; rc=$?; rm -f \"$f\"; exit $rc",
        log = s(key_id_log),
        key = s(key),
    )
}

/// The raw 64-byte signature in `<artifact>.sig` (one signature expected).
fn raw_sig(sig_file: &Path) -> Vec<u8> {
    let doc = read_json(sig_file);
    let sigs = doc["signatures"].as_array().expect("signatures");
    assert_eq!(sigs.len(), 1, "{sigs:?}");
    assert_eq!(sigs[0]["alg"], "ed25519");
    let raw = base64::engine::general_purpose::STANDARD.decode(sigs[0]["sig"].as_str().expect("sig")).expect("base64");
    assert_eq!(raw.len(), 64);
    raw
}

#[test]
fn drover_signatures_verify_with_openssl_pkeyutl() {
    let sc = Scratch::signed_release();
    for artifact in ARTIFACTS {
        let file = sc.join("rel").join(artifact);
        let sig = sc.join(&format!("{artifact}.rawsig").replace('/', "_"));
        fs::write(&sig, raw_sig(&sc.join("rel").join(format!("{artifact}.sig")))).expect("write sig");
        // The artifact file is its own canonical bytes.
        let ok = openssl_run(
            &["pkeyutl", "-verify", "-pubin", "-inkey", s(&sc.join("ci.pub")), "-rawin", "-in", s(&file), "-sigfile", s(&sig)],
            b"",
        );
        assert_eq!(ok.code, 0, "openssl refused drover's signature on {artifact}: {} {}", ok.stdout, ok.stderr);
        assert!(ok.stdout.contains("Signature Verified Successfully"), "{}", ok.stdout);

        // And openssl is not just saying yes: one flipped byte fails.
        let mut bytes = fs::read(&file).expect("read");
        bytes[10] ^= 1;
        let flipped = sc.write("flipped.json", &bytes);
        let bad = openssl_run(
            &["pkeyutl", "-verify", "-pubin", "-inkey", s(&sc.join("ci.pub")), "-rawin", "-in", s(&flipped), "-sigfile", s(&sig)],
            b"",
        );
        assert_ne!(bad.code, 0, "openssl accepted a tampered {artifact}");
    }
}

#[test]
fn drover_keygen_keys_are_readable_by_openssl() {
    let sc = Scratch::new();
    sc.keygen("ci");
    // The private key parses and yields exactly drover's public key.
    let derived = openssl(&["pkey", "-in", s(&sc.join("ci.key")), "-pubout"]);
    assert_eq!(derived, fs::read(sc.join("ci.pub")).expect("read"), "openssl derives a different public key");
    let text = String::from_utf8(openssl(&["pkey", "-in", s(&sc.join("ci.key")), "-noout", "-text"])).expect("text");
    assert!(text.contains("ED25519"), "{text}");
    // OpenSSL can sign with it, and drover accepts that signature (through --sign-cmd).
    sc.trust("trust.json", &["ci.pub"]);
    let cmd = openssl_sign_cmd(&sc.join("ci.key"), &sc.join("ids.log"));
    sc.release("rel", "ci.pub", &["--sign-cmd", &cmd]).ok();
    sc.verify("trust.json", &[], &["rel"]).ok();
}

#[test]
fn an_openssl_generated_key_signs_releases_and_makes_trust_roots() {
    let sc = Scratch::new();
    openssl_key(&sc, "k");
    sc.release("rel", "k.pem", &[]).ok();
    sc.trust("trust.json", &["k.pub.pem"]);
    sc.verify("trust.json", &[], &["rel"]).ok();
    // The key id in trust.json is sha256 of the raw public key, as openssl sees it.
    let der = openssl(&["pkey", "-pubin", "-in", s(&sc.join("k.pub.pem")), "-outform", "DER"]);
    let key_id = read_json(&sc.join("trust.json"))["ci"]["keys"][0]["keyId"].as_str().expect("keyId").to_owned();
    assert_eq!(key_id, common::sha256_hex(&der[der.len() - 32..]));
    // And the signatures name that key.
    assert_eq!(read_json(&sc.join("rel/timestamp.json.sig"))["signatures"][0]["keyId"], key_id.as_str());
}

#[test]
fn sign_cmd_with_openssl_makes_a_release_verify_accepts_and_gets_the_key_id() {
    let sc = Scratch::new();
    openssl_key(&sc, "k");
    sc.trust("trust.json", &["k.pub.pem"]);
    let log = sc.join("ids.log");
    let cmd = openssl_sign_cmd(&sc.join("k.pem"), &log);
    sc.release("rel", "k.pub.pem", &["--sign-cmd", &cmd]).ok();
    sc.verify("trust.json", &[], &["rel"]).ok();

    let key_id = read_json(&sc.join("trust.json"))["ci"]["keys"][0]["keyId"].as_str().expect("keyId").to_owned();
    let seen = fs::read_to_string(&log).expect("the sign command ran");
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), ARTIFACTS.len(), "one signature per artifact: {seen:?}");
    assert!(lines.iter().all(|l| *l == key_id), "DROVER_KEY_ID must be the key id {key_id}: {seen:?}");

    // Identical bytes to a release signed with the private key directly (Ed25519 is
    // deterministic).
    sc.release("direct", "k.pem", &[]).ok();
    assert_eq!(common::tree(&sc.join("rel")), common::tree(&sc.join("direct")));

    // `release timestamp` goes through the signer too.
    sc.drover(&["release", "timestamp", "rel", "--key", "k.pub.pem", "--sign-cmd", &cmd, "--signed-at", "2025-01-01T00:30:00Z"]).ok();
    assert_eq!(fs::read_to_string(&log).expect("log").lines().count(), ARTIFACTS.len() + 1);
    sc.verify("trust.json", &[], &["rel"]).ok();
}

#[test]
fn a_sign_cmd_that_exits_non_zero_fails_the_release() {
    let sc = Scratch::new();
    openssl_key(&sc, "k");
    let r = sc.release("rel", "k.pub.pem", &["--sign-cmd", "cat >/dev/null; echo 'token not present' >&2; exit 3"]);
    r.fails_with(70).stderr_has(&["sign command", "exit status: 3", "token not present"]);
    assert!(!sc.join("rel").exists(), "no release may be written");
}

#[test]
fn a_sign_cmd_that_prints_garbage_fails_the_release() {
    let sc = Scratch::new();
    openssl_key(&sc, "k");
    for garbage in ["cat >/dev/null; echo 'not base64!'", "cat >/dev/null; printf 'aGVsbG8='", "true"] {
        let r = sc.release("rel", "k.pub.pem", &["--sign-cmd", garbage]);
        r.fails_with(70).stderr_has(&["did not print a base64 Ed25519 signature"]);
        assert!(!sc.join("rel").exists(), "no release may be written");
    }
}

/// A copy of the example spec with 800 more hosts, so that fleet.resolved (the first
/// thing signed) is larger than a pipe buffer (64 KiB on Linux).
fn big_spec(sc: &Scratch) -> std::path::PathBuf {
    let mut spec = read_json(&common::example_spec());
    let hosts = spec["hosts"].as_object_mut().expect("hosts");
    let template = hosts["gpu-a-02"].clone();
    for i in 0..800 {
        hosts.insert(format!("gpu-z-{i:04}"), template.clone());
    }
    sc.write("big.json", serde_json::to_vec(&spec).expect("json"))
}

#[test]
fn a_sign_cmd_that_ignores_its_large_stdin_fails_cleanly() {
    let sc = Scratch::new();
    openssl_key(&sc, "k");
    let spec = big_spec(&sc);
    let r = sc.drover(&["release", "--fleet", s(&spec), "--key", "k.pub.pem", "--sign-cmd", "echo garbage", "--out", "rel"]);
    r.fails_with(70).stderr_has(&["did not print a base64 Ed25519 signature"]);
}

#[test]
fn a_sign_cmd_that_writes_a_lot_before_reading_stdin_does_not_deadlock() {
    let sc = Scratch::new();
    openssl_key(&sc, "k");
    let spec = big_spec(&sc);
    // 200 KB of output before it reads its (large) input: drover must drain stdout while it
    // feeds stdin. (It used to write all of stdin first and hang forever.)
    let chatty = "head -c 200000 /dev/zero | tr '\\0' A; cat >/dev/null";
    let r = sc.drover(&["release", "--fleet", s(&spec), "--key", "k.pub.pem", "--sign-cmd", chatty, "--out", "rel"]);
    r.fails_with(70).stderr_has(&["did not print a base64 Ed25519 signature"]);
    // And a well-behaved signer on the same large input works.
    sc.trust("trust.json", &["k.pub.pem"]);
    let cmd = openssl_sign_cmd(&sc.join("k.pem"), &sc.join("ids.log"));
    sc.drover(&[
        "release",
        "--fleet",
        s(&spec),
        "--key",
        "k.pub.pem",
        "--sign-cmd",
        &cmd,
        "--signed-at",
        common::SIGNED_AT,
        "--out",
        "big",
    ])
    .ok();
    sc.verify("trust.json", &[], &["big"]).ok();
}

#[test]
fn a_sign_cmd_signing_with_another_key_is_caught_before_anything_is_written() {
    let sc = Scratch::new();
    openssl_key(&sc, "k");
    openssl_key(&sc, "impostor");
    let cmd = openssl_sign_cmd(&sc.join("impostor.pem"), &sc.join("ids.log"));
    let r = sc.release("rel", "k.pub.pem", &["--sign-cmd", &cmd]);
    r.fails_with(70).stderr_has(&["does not verify under key"]);
    assert!(!sc.join("rel").exists(), "no release may be written");
}

#[test]
fn a_failing_sign_cmd_does_not_echo_its_pin_or_a_flood_of_stderr() {
    // A sign command may carry a PIN or a token; CI logs keep drover's stderr.
    let sc = Scratch::new();
    openssl_key(&sc, "k");
    let failing = "PIN_ENV=s3cr3t-env false --pin 123456 --token hunter2";
    let r = sc.release("rel", "k.pub.pem", &["--sign-cmd", failing]);
    r.fails_with(70).stderr_has(&["sign command", "\"false\""]);
    for secret in ["123456", "hunter2", "s3cr3t-env", "--pin"] {
        assert!(!r.stderr.contains(secret), "{secret:?} leaked into stderr: {}", r.stderr);
    }
    // Garbage output and a signer that cannot be run are reported the same way.
    let r = sc.release("rel", "k.pub.pem", &["--sign-cmd", "echo garbage --pin 123456"]);
    r.fails_with(70).stderr_has(&["\"echo\"", "did not print a base64 Ed25519 signature"]);
    assert!(!r.stderr.contains("123456"), "{}", r.stderr);
    // A signer that writes 100 KB to stderr does not flood drover's.
    let chatty = "cat >/dev/null; head -c 100000 /dev/zero | tr '\\0' E >&2; exit 1";
    let r = sc.release("rel", "k.pub.pem", &["--sign-cmd", chatty]);
    r.fails_with(70).stderr_has(&["EEEE", "…"]);
    assert!(r.stderr.len() < 1000, "stderr should be cut short, got {} bytes", r.stderr.len());
    assert!(!sc.join("rel").exists(), "no release may be written");
}
