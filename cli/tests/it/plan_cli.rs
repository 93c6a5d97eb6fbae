//! `drover plan`: the offline dry run of the planner, run as the real binary on a release made
//! by `drover release` and the example `examples/observed.json` the README shows.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{NOW, Run, Scratch, s};

/// The example observed state shipped in the repository and shown in the README: nothing
/// rolled yet, every host online but `gpu-b-02`.
fn example_observed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/observed.json")
}

fn plan(sc: &Scratch, observed: &str, now: &str) -> Run {
    sc.drover(&["plan", "--release", "rel", "--trust", "trust.json", "--observed", observed, "--now", now])
}

fn actions_of<'a>(plan: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    plan["actions"].as_array().expect("actions array").iter().filter(|a| a["kind"] == kind).collect()
}

/// `(rolloutId, from, to)` of every rollout transition.
fn rollout_transitions(plan: &serde_json::Value) -> Vec<(String, String, String)> {
    actions_of(plan, "rolloutTransition")
        .iter()
        .map(|a| {
            (
                a["rolloutId"].as_str().expect("id").to_owned(),
                a["from"].as_str().expect("from").to_owned(),
                a["to"].as_str().expect("to").to_owned(),
            )
        })
        .collect()
}

fn dispatched(plan: &serde_json::Value) -> Vec<(String, u64)> {
    let mut d: Vec<(String, u64)> = actions_of(plan, "dispatch")
        .iter()
        .map(|a| {
            assert_eq!(a["from"], "Pending", "{a}");
            assert!(a["target"].as_str().expect("target").starts_with("/nix/store/"), "{a}");
            (a["host"].as_str().expect("host").to_owned(), a["waveIndex"].as_u64().expect("wave"))
        })
        .collect();
    d.sort();
    d
}

fn planned(run: &Run) -> serde_json::Value {
    let out: serde_json::Value = serde_json::from_slice(&run.ok().stdout_bytes).expect("stdout is JSON");
    assert_eq!(out.as_object().map(|o| o.len()), Some(2), "exactly actions and report: {out}");
    out
}

#[test]
fn nothing_rolled_yet_opens_infra_dispatches_its_wave_0_and_holds_gpu_behind_the_channel_edge() {
    let sc = Scratch::signed_release();
    let example = example_observed();
    let out = planned(&plan(&sc, s(&example), NOW));

    let opened: Vec<&str> = actions_of(&out, "openRollout").iter().map(|a| a["rolloutId"].as_str().expect("id")).collect();
    assert_eq!(opened, ["infra@c0ffee"], "{out}");
    assert!(actions_of(&out, "openRollout")[0]["reason"].as_str().expect("reason").contains("never been rolled"));
    assert_eq!(rollout_transitions(&out), [("infra@c0ffee".to_owned(), "Opening".to_owned(), "Active".to_owned())]);
    assert_eq!(dispatched(&out), [("infra-01".to_owned(), 0)]);

    // examples/fleet.json orders infra before gpu (channelEdges, taken from the verified
    // fleet.resolved): gpu's ref waits, and the report says why.
    let deferred = actions_of(&out, "rolloutDeferred");
    assert_eq!(deferred.len(), 1, "{out}");
    assert_eq!(deferred[0]["channel"], "gpu");
    assert_eq!(deferred[0]["blockedBy"], "infra");
    let report = out["report"].as_array().expect("report array");
    assert!(report.iter().any(|w| w["channel"] == "gpu" && w["reason"].as_str().expect("reason").contains("infra")), "{out}");
    assert!(report.iter().any(|w| w["host"] == "infra-01"), "the dispatched host awaits confirmation: {out}");
}

#[test]
fn once_infra_has_converged_gpu_opens_and_dispatches_only_its_canary_wave() {
    let sc = Scratch::signed_release();
    let timestamp: serde_json::Value = serde_json::from_slice(&fs::read(sc.join("rel/timestamp.json")).expect("read")).expect("json");
    let infra_sha = timestamp["channels"]["infra"]["manifestSha256"].as_str().expect("infra sha").to_owned();
    let mut observed: serde_json::Value = serde_json::from_slice(&fs::read(example_observed()).expect("read")).expect("json");
    observed["lastRolledRef"] = serde_json::json!({ "infra": "c0ffee" });
    observed["rollouts"] = serde_json::json!({
        "infra@c0ffee": {
            "state": "Converged", "since": "2025-01-01T00:50:00Z", "manifestSha256": infra_sha,
            "hosts": { "infra-01": { "state": "Converged", "since": "2025-01-01T00:50:00Z" } }
        }
    });
    sc.write("observed.json", serde_json::to_vec(&observed).expect("serialise"));
    let out = planned(&plan(&sc, "observed.json", NOW));

    let opened: Vec<&str> = actions_of(&out, "openRollout").iter().map(|a| a["rolloutId"].as_str().expect("id")).collect();
    assert_eq!(opened, ["gpu@c0ffee"], "{out}");
    assert_eq!(rollout_transitions(&out), [("gpu@c0ffee".to_owned(), "Opening".to_owned(), "Active".to_owned())]);
    assert_eq!(dispatched(&out), [("gpu-a-01".to_owned(), 0)], "wave 0 of canary-then-racks is the canary alone");
    let report = out["report"].as_array().expect("report array");
    for host in ["gpu-a-02", "gpu-b-01", "gpu-b-02"] {
        let w = report.iter().find(|w| w["host"] == host).unwrap_or_else(|| panic!("{host} reported: {out}"));
        assert!(w["reason"].as_str().expect("reason").contains("waiting for wave"), "{w}");
    }
}

#[test]
fn a_plan_is_deterministic() {
    let sc = Scratch::signed_release();
    let example = example_observed();
    let a = plan(&sc, s(&example), NOW);
    let b = plan(&sc, s(&example), NOW);
    a.ok();
    assert_eq!(a.stdout_bytes, b.ok().stdout_bytes);
}

#[test]
fn an_already_rolled_ref_opens_nothing() {
    let sc = Scratch::signed_release();
    sc.write("observed.json", r#"{"schemaVersion":1,"lastRolledRef":{"gpu":"c0ffee","infra":"c0ffee"}}"#);
    let run = plan(&sc, "observed.json", NOW);
    let out: serde_json::Value = serde_json::from_slice(&run.ok().stdout_bytes).expect("stdout is JSON");
    assert_eq!(out["actions"], serde_json::json!([]), "{out}");
}

#[test]
fn a_tampered_release_is_refused_before_planning() {
    let sc = Scratch::signed_release();
    let path = sc.join("rel/rollouts/gpu@c0ffee.json");
    let mut bytes = fs::read(&path).expect("read");
    let at = bytes.windows(11).position(|w| w == b"/nix/store/").expect("a closure") + 11;
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    fs::write(&path, &bytes).expect("write");
    let example = example_observed();
    let run = plan(&sc, s(&example), NOW);
    // The same code and message as `drover verify`: 1, REFUSED naming the rule.
    run.fails_with(1).stderr_has(&["REFUSED rel (", "):"]);
    assert!(run.stdout.is_empty(), "nothing planned: {}", run.stdout);
}

#[test]
fn a_stale_release_is_refused_at_now() {
    let sc = Scratch::signed_release();
    let example = example_observed();
    let run = plan(&sc, s(&example), "2030-01-01T00:00:00Z");
    run.fails_with(1).stderr_has(&["REFUSED", "Stale"]);
    assert!(run.stdout.is_empty());
}

#[test]
fn malformed_observed_json_names_the_json_path() {
    let sc = Scratch::signed_release();
    sc.write("observed.json", r#"{"schemaVersion":1,"hosts":{"gpu-a-01":{"connectivity":"sideways"}},"lastRolledRef":{}}"#);
    plan(&sc, "observed.json", NOW).fails_with(65).stderr_has(&["observed.json", "hosts.gpu-a-01.connectivity", "sideways"]);

    sc.write("unknown.json", r#"{"schemaVersion":1,"channels":{}}"#);
    plan(&sc, "unknown.json", NOW).fails_with(65).stderr_has(&["unknown.json", "channels"]);

    sc.write("notjson.json", "{ this is not json");
    plan(&sc, "notjson.json", NOW).fails_with(65).stderr_has(&["notjson.json"]);

    sc.write("trailing.json", r#"{"schemaVersion":1} {}"#);
    plan(&sc, "trailing.json", NOW).fails_with(65).stderr_has(&["trailing.json", "trailing"]);

    sc.write("future.json", r#"{"schemaVersion":2}"#);
    plan(&sc, "future.json", NOW).fails_with(65).stderr_has(&["future.json", "schemaVersion 2"]);
}

#[test]
fn missing_inputs_exit_66() {
    let sc = Scratch::signed_release();
    plan(&sc, "absent.json", NOW).fails_with(66).stderr_has(&["absent.json"]);
    let example = example_observed();
    let run = sc.drover(&["plan", "--release", "no-such-dir", "--trust", "trust.json", "--observed", s(&example), "--now", NOW]);
    run.fails_with(66).stderr_has(&["no-such-dir"]);
    let run = sc.drover(&["plan", "--release", "rel", "--trust", "absent-trust.json", "--observed", s(&example), "--now", NOW]);
    run.fails_with(66).stderr_has(&["absent-trust.json"]);
}

#[test]
fn usage_errors_exit_64() {
    let sc = Scratch::signed_release();
    let example = example_observed();
    plan(&sc, s(&example), "tomorrow").fails_with(64).stderr_has(&["--now"]);
    // --now is required: a dry run is as of a stated instant.
    let run = sc.drover(&["plan", "--release", "rel", "--trust", "trust.json", "--observed", s(&example)]);
    assert_eq!(run.code, 64, "{}", run.stderr);
}

#[test]
fn the_readme_shows_the_example_observed_json_verbatim() {
    let example = fs::read_to_string(example_observed()).expect("examples/observed.json");
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).expect("README.md");
    // Inside the `drover plan` list item, so indented by two spaces.
    let indented: String = example.lines().map(|l| if l.is_empty() { "\n".to_owned() } else { format!("  {l}\n") }).collect();
    assert!(
        readme.contains(&format!("  ```json\n{indented}  ```\n")),
        "README's observed.json example differs from examples/observed.json"
    );
    assert!(readme.contains("- `drover plan --release DIR --trust trust.json --observed observed.json --now RFC3339`"));
}
