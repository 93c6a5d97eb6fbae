//! The real `drover` binary on bad input: every case exits with its sysexits code, names the
//! problem on stderr, writes nothing, and never panics.

use crate::common;

use std::fs;

use common::{Scratch, drover_in, example_spec, read_json, s};

/// The example spec, edited by `edit`, written to `name`; returns the path as a string.
fn edited_spec(sc: &Scratch, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut spec = read_json(&example_spec());
    edit(&mut spec);
    s(&sc.write(name, serde_json::to_vec(&spec).expect("json"))).to_owned()
}

fn release_of(sc: &Scratch, spec: &str, key: &str) -> common::Run {
    sc.drover(&["release", "--fleet", spec, "--key", key, "--out", "rel"])
}

#[test]
fn a_missing_spec_file_exits_66() {
    let sc = Scratch::new();
    sc.keygen("ci");
    release_of(&sc, "no-such-spec.json", "ci.key").fails_with(66).stderr_has(&["no-such-spec.json"]);
    assert!(!sc.join("rel").exists());
}

#[test]
fn a_malformed_json_spec_exits_65() {
    let sc = Scratch::new();
    sc.keygen("ci");
    sc.write("bad.json", "{\"hosts\": {");
    release_of(&sc, "bad.json", "ci.key").fails_with(65).stderr_has(&["bad.json", "malformed"]);
    sc.write("empty.json", "");
    release_of(&sc, "empty.json", "ci.key").fails_with(65);
    sc.write("binary.json", [0xff, 0xfe, 0x00, 0x01]);
    release_of(&sc, "binary.json", "ci.key").fails_with(65);
    assert!(!sc.join("rel").exists());
}

#[test]
fn a_spec_failing_validation_exits_65_and_names_the_json_path() {
    let sc = Scratch::new();
    sc.keygen("ci");
    let unknown_policy = edited_spec(&sc, "policy.json", |v| v["channels"]["gpu"]["rolloutPolicy"] = "nope".into());
    release_of(&sc, &unknown_policy, "ci.key").fails_with(65).stderr_has(&["channels.gpu.rolloutPolicy", "nope"]);
    let unknown_channel = edited_spec(&sc, "channel.json", |v| v["hosts"]["gpu-a-01"]["channel"] = "nowhere".into());
    release_of(&sc, &unknown_channel, "ci.key").fails_with(65).stderr_has(&["hosts.gpu-a-01.channel", "nowhere"]);
    let bad_duration = edited_spec(&sc, "duration.json", |v| v["channels"]["gpu"]["freshnessWindowSecs"] = "10 parsecs".into());
    release_of(&sc, &bad_duration, "ci.key").fails_with(65).stderr_has(&["10 parsecs"]);
    assert!(!sc.join("rel").exists());
}

#[test]
fn a_public_key_given_as_the_signing_key_exits_65() {
    let sc = Scratch::new();
    sc.keygen("ci");
    release_of(&sc, s(&example_spec()), "ci.pub").fails_with(65).stderr_has(&["ci.pub", "private key"]);
    sc.write("junk.key", "hello");
    release_of(&sc, s(&example_spec()), "junk.key").fails_with(65).stderr_has(&["junk.key"]);
    release_of(&sc, s(&example_spec()), "absent.key").fails_with(66).stderr_has(&["absent.key"]);
    // With --sign-cmd a private key is not needed, but the key must still be a key.
    sc.drover(&["release", "--fleet", s(&example_spec()), "--key", "junk.key", "--sign-cmd", "false", "--out", "rel"])
        .fails_with(65)
        .stderr_has(&["junk.key"]);
    assert!(!sc.join("rel").exists());
}

#[test]
fn a_nonexistent_trust_file_exits_66() {
    let sc = Scratch::signed_release();
    sc.verify("no-trust.json", &[], &["rel"]).fails_with(66).stderr_has(&["no-trust.json"]);
}

#[test]
fn a_malformed_trust_file_exits_65() {
    let sc = Scratch::signed_release();
    sc.write("bad-trust.json", "{\"schemaVersion\":1,");
    sc.verify("bad-trust.json", &[], &["rel"]).fails_with(65).stderr_has(&["bad-trust.json", "BadTrust"]);
    sc.write("wrong-shape.json", "[1,2,3]");
    sc.verify("wrong-shape.json", &[], &["rel"]).fails_with(65);
}

#[test]
fn a_trust_file_listing_the_same_key_twice_exits_65_duplicate_key() {
    let sc = Scratch::signed_release();
    let mut trust = read_json(&sc.join("trust.json"));
    let key = trust["ci"]["keys"][0].clone();
    trust["ci"]["keys"].as_array_mut().expect("keys").push(key);
    sc.write("dup.json", serde_json::to_vec(&trust).expect("json"));
    sc.verify("dup.json", &[], &["rel"]).fails_with(65).stderr_has(&["DuplicateKey"]);
    // `drover trust` refuses to write such a file in the first place.
    sc.drover(&["trust", "--pub", "ci.pub", "--pub", "ci.pub", "--out", "dup2.json"]).fails_with(65).stderr_has(&["more than once"]);
    assert!(!sc.join("dup2.json").exists());
}

#[test]
fn trust_refuses_an_impossible_threshold_and_a_private_key_as_pub() {
    let sc = Scratch::new();
    sc.keygen("ci");
    sc.drover(&["trust", "--pub", "ci.pub", "--threshold", "2"]).fails_with(65).stderr_has(&["threshold"]);
    sc.drover(&["trust", "--pub", "ci.pub", "--threshold", "0"]).fails_with(65).stderr_has(&["threshold"]);
    sc.drover(&["trust", "--pub", "ci.key"]).fails_with(65).stderr_has(&["ci.key"]);
    sc.drover(&["trust", "--pub", "ci.pub", "--reject-before", "last week"]).fails_with(64).stderr_has(&["--reject-before"]);
    // And never overwrites an existing trust file.
    sc.write("trust.json", "precious");
    sc.drover(&["trust", "--pub", "ci.pub", "--out", "trust.json"]).fails_with(73);
    assert_eq!(fs::read(sc.join("trust.json")).expect("read"), b"precious");
}

#[test]
fn verify_on_a_directory_missing_timestamp_json_exits_1() {
    let sc = Scratch::signed_release();
    fs::remove_file(sc.join("rel/timestamp.json")).expect("rm");
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["REFUSED", "timestamp.json", "missing"]);
    // A manifest checked on its own needs that timestamp too.
    sc.verify("trust.json", &[], &["rel/rollouts/gpu@c0ffee.json"]).fails_with(66).stderr_has(&["timestamp.json"]);
}

#[test]
fn verify_on_missing_or_unrecognised_paths() {
    let sc = Scratch::signed_release();
    sc.verify("trust.json", &[], &["no-such-release"]).fails_with(66).stderr_has(&["no-such-release"]);
    sc.write("notes.txt", "hello");
    sc.verify("trust.json", &[], &["notes.txt"]).fails_with(64).stderr_has(&["not an artifact"]);
    fs::remove_file(sc.join("rel/fleet.resolved.json.sig")).expect("rm");
    sc.verify("trust.json", &[], &["rel/fleet.resolved.json"]).fails_with(66).stderr_has(&["fleet.resolved.json.sig"]);
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["fleet.resolved.json.sig"]);
    fs::write(sc.join("rel/timestamp.json.sig"), "{").expect("write");
    sc.verify("trust.json", &[], &["rel"]).fails_with(1).stderr_has(&["REFUSED"]);
}

#[test]
fn signed_at_that_is_not_rfc3339_exits_64() {
    let sc = Scratch::new();
    sc.keygen("ci");
    let spec = example_spec();
    sc.drover(&["release", "--fleet", s(&spec), "--key", "ci.key", "--signed-at", "yesterday", "--out", "rel"])
        .fails_with(64)
        .stderr_has(&["--signed-at", "yesterday"]);
    assert!(!sc.join("rel").exists());
    let sc = Scratch::signed_release();
    sc.drover(&["verify", "--trust", "trust.json", "--now", "tomorrow", "rel"]).fails_with(64).stderr_has(&["--now"]);
    sc.drover(&["release", "timestamp", "rel", "--key", "ci.key", "--signed-at", "soon"]).fails_with(64);
}

#[test]
fn release_timestamp_on_a_directory_that_is_not_a_release() {
    let sc = Scratch::new();
    sc.keygen("ci");
    fs::create_dir(sc.join("empty")).expect("mkdir");
    sc.drover(&["release", "timestamp", "empty", "--key", "ci.key"]).fails_with(66).stderr_has(&["timestamp.json"]);
    sc.drover(&["release", "timestamp", "absent", "--key", "ci.key"]).fails_with(66).stderr_has(&["absent"]);
    fs::write(sc.join("empty/timestamp.json"), "not json").expect("write");
    sc.drover(&["release", "timestamp", "empty", "--key", "ci.key"]).fails_with(66).stderr_has(&["timestamp.json.sig"]);
    fs::write(sc.join("empty/timestamp.json.sig"), r#"{"signatures":[]}"#).expect("write");
    sc.drover(&["release", "timestamp", "empty", "--key", "ci.key"])
        .fails_with(65)
        .stderr_has(&["timestamp.json", "CI only re-signs or builds on its own"]);
    // --previous pointing at a non-release.
    sc.drover(&["release", "--fleet", s(&example_spec()), "--key", "ci.key", "--previous", "absent", "--out", "rel"])
        .fails_with(66)
        .stderr_has(&["absent"]);
    assert!(!sc.join("rel").exists());
}

#[test]
fn canonicalize_a_malformed_file_exits_65() {
    let sc = Scratch::new();
    sc.write("bad.json", "{\"a\": [1, 2,");
    sc.drover(&["canonicalize", "bad.json"]).fails_with(65).stderr_has(&["bad.json", "not valid JSON"]);
    sc.write("huge.json", "[1e400]");
    sc.drover(&["canonicalize", "huge.json"]).fails_with(65);
    sc.write("dup.json", r#"{"a":1,"a":2}"#);
    sc.drover(&["canonicalize", "dup.json"]).fails_with(65).stderr_has(&["duplicate object key \"a\""]);
    sc.drover(&["canonicalize", "absent.json"]).fails_with(66).stderr_has(&["absent.json"]);
    drover_in(sc.path(), &["canonicalize"], b"\xff\xfe").fails_with(65).stderr_has(&["<stdin>"]);
}

#[test]
fn canonicalize_stdin_prints_the_canonical_form() {
    let sc = Scratch::new();
    let r = drover_in(sc.path(), &["canonicalize"], br#"{"b":1, "a":[1.0,2e3]}"#);
    r.ok();
    assert_eq!(r.stdout, r#"{"a":[1,2000],"b":1}"#);
    // Every number as RFC 8785 writes the double it denotes, integers beyond 2^53 included.
    let r = drover_in(sc.path(), &["canonicalize"], b"[9007199254740993, 1e21, 18446744073709551616, -0.0]");
    r.ok();
    assert_eq!(r.stdout, "[9007199254740992,1e+21,18446744073709552000,0]");
    let r = drover_in(sc.path(), &["canonicalize", "-"], b" { \"\\u00e9\" : \"\\u20ac\\n\", \"z\": null } ");
    r.ok();
    assert_eq!(r.stdout, "{\"z\":null,\"\u{e9}\":\"\u{20ac}\\n\"}");
    // A file gives the same as stdin, and the canonical form is a fixed point.
    sc.write("in.json", r#"{"b":1, "a":[1.0,2e3]}"#);
    let from_file = sc.drover(&["canonicalize", "in.json"]);
    assert_eq!(from_file.ok().stdout, r#"{"a":[1,2000],"b":1}"#);
    sc.write("canon.json", &from_file.stdout_bytes);
    assert_eq!(sc.drover(&["canonicalize", "canon.json"]).ok().stdout, from_file.stdout);
}

#[test]
fn usage_errors_exit_64_not_clap_s_2() {
    let sc = Scratch::new();
    let cases: [&[&str]; 9] = [
        &[],
        &["release"],
        &["verify"],
        &["keygen"],
        &["trust"],
        &["release", "timestamp"],
        &["frobnicate"],
        &["keygen", "--out", "k", "--bogus"],
        &["trust", "--pub", "p", "--threshold", "many"],
    ];
    for args in cases {
        let r = sc.drover(args);
        r.no_panic();
        assert_eq!(r.code, 64, "EX_USAGE for {args:?}: {}", r.stderr);
        // clap's error (or, for a bare `drover`, the help) goes to stderr, nothing to stdout.
        assert!(r.stderr.starts_with("error:") || r.stderr.contains("Usage:"), "{args:?}: {:?}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: nothing on stdout: {:?}", r.stdout);
    }
}

#[test]
fn help_and_version_exit_0_on_stdout() {
    let sc = Scratch::new();
    for args in [&["--help"][..], &["-h"], &["help"], &["release", "--help"], &["verify", "-h"], &["help", "trust"]] {
        let r = sc.drover(args);
        r.ok();
        assert!(r.stdout.contains("Usage"), "{args:?}: help on stdout: {:?}", r.stdout);
    }
    let r = sc.drover(&["--version"]);
    r.ok().stdout_has(env!("CARGO_PKG_VERSION"));
}
