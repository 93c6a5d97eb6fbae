//! The fleet spec, its projection into release artifacts, and the per-host wire messages.
//!
//! Each test is named after the rule it pins down: validation errors name the JSON path of
//! the offending field, resolution is deterministic and sorted, budgets count as DESIGN says,
//! every message survives a serde round trip with stable canonical bytes, secrets never reach
//! `Debug`, and the state enums keep their string forms and transition tables.

use std::collections::BTreeSet;
use std::fmt::Debug;

use drover_proto::artifacts::{FleetResolved, FrozenBudget, RolloutManifest, TimestampDoc};
use drover_proto::canonical;
use drover_proto::intent::Intent;
use drover_proto::keys::KeySigner;
use drover_proto::names::RolloutId;
use drover_proto::release::{self, ReleaseParams};
use drover_proto::report::{
    ActivationPhase, ActivationStatus, ApiError, ApiErrorBody, CheckinRequest, CheckinResponse, ConfirmRequest, GpuSummary, HealthReport,
    HwSyncState, ProbeOutcome, ProbeResult, ReportEvent, StepOutcome, StepResult, TaskOutcome, TaskResult,
};
use drover_proto::resolve::{ReleaseMeta, Resolved, resolve};
use drover_proto::selector::Selector;
use drover_proto::sig::Envelope;
use drover_proto::spec::{FleetSpec, Mode, SpecError};
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState, RolloutState, WaveState};
use drover_proto::task::{ComputeProcessPolicy, GpuVendor, Secret, StorageScope, Task, TaskKind};
use drover_proto::time::Time;
use ed25519_dalek::SigningKey;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

const FLEET_JSON: &[u8] = include_bytes!("../../examples/fleet.json");
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn t(s: &str) -> Time {
    Time::parse_strict(s).expect("fixture time")
}

fn meta(commit: &str) -> ReleaseMeta {
    ReleaseMeta { ci_commit: commit.to_owned(), created_at: t("2026-11-21T10:00:00Z") }
}

fn example_spec() -> FleetSpec {
    FleetSpec::from_json(FLEET_JSON).expect("examples/fleet.json is valid")
}

fn example_value() -> Value {
    serde_json::from_slice(FLEET_JSON).expect("examples/fleet.json is JSON")
}

fn spec_of(v: &Value) -> FleetSpec {
    FleetSpec::from_json(&serde_json::to_vec(v).expect("json")).expect("fixture spec is valid")
}

fn resolved_example() -> Resolved {
    resolve(&example_spec(), &meta(COMMIT)).expect("example resolves")
}

fn signer() -> KeySigner {
    KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))
}

/// A small valid spec that the validation tests break one field at a time.
fn base() -> Value {
    json!({
        "hosts": {
            "h-1": { "system": "x86_64-linux", "tags": ["canary", "gpu"], "channel": "c", "closure": "/nix/store/aaaa-nixos-system-h-1" },
            "h-2": { "system": "x86_64-linux", "tags": ["gpu"], "channel": "c", "closure": "/nix/store/bbbb-nixos-system-h-2" },
            "h-3": { "system": "x86_64-linux", "tags": ["gpu"], "channel": "c", "closure": "/nix/store/cccc-nixos-system-h-3" }
        },
        "channels": {
            "c": {
                "rolloutPolicy": "p",
                "freshnessWindowSecs": "1d",
                "signingIntervalSecs": "4h",
                "probes": [ { "name": "up", "kind": "exec", "command": ["true"], "timeoutSecs": 5 } ]
            }
        },
        "rolloutPolicies": {
            "p": {
                "waves": [
                    { "selector": { "tags": ["canary"] }, "soakSecs": "15m" },
                    { "selector": { "all": true }, "soakSecs": 0 }
                ],
                "healthGate": { "requiredProbes": ["up"] }
            }
        }
    })
}

fn spec_error(v: &Value) -> SpecError {
    FleetSpec::from_json(&serde_json::to_vec(v).expect("json")).expect_err("the spec must be refused")
}

/// Asserts the spec is refused as `Invalid` at exactly `want` and that the displayed error
/// names the path; returns the message.
fn invalid_at(v: &Value, want: &str) -> String {
    let err = spec_error(v);
    let shown = err.to_string();
    match err {
        SpecError::Invalid { path, message } => {
            assert_eq!(path, want, "wrong path; error: {shown}");
            assert!(shown.contains(want), "the displayed error must name the path {want}: {shown}");
            message
        }
        SpecError::Malformed { .. } => panic!("expected Invalid at {want}, got {shown}"),
    }
}

/// Asserts the spec is refused as `Malformed`; returns the displayed error.
fn malformed(v: &Value) -> String {
    let err = spec_error(v);
    let shown = err.to_string();
    assert!(matches!(err, SpecError::Malformed { .. }), "expected Malformed, got {shown}");
    shown
}

fn sel(json: Value) -> Selector {
    serde_json::from_value(json).expect("selector")
}

/// Serialises, parses back and checks equality and canonical-byte stability; returns the
/// value's JSON form for shape checks.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T) -> Value {
    let json = serde_json::to_vec(value).expect("serialise");
    let back: T = serde_json::from_slice(&json).expect("parse back");
    assert_eq!(&back, value, "serde round trip");
    let c1 = canonical::to_vec_of(value).expect("canonical");
    let c2 = canonical::to_vec_of(&back).expect("canonical");
    assert_eq!(c1, c2, "canonical bytes stable across a round trip");
    assert!(canonical::is_canonical(&c1));
    let from_canonical: T = serde_json::from_slice(&c1).expect("parse canonical bytes");
    assert_eq!(&from_canonical, value, "canonical bytes parse to the same value");
    assert_eq!(canonical::to_vec_of(&from_canonical).expect("canonical"), c1);
    serde_json::to_value(value).expect("value")
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().expect("object").keys().map(String::as_str).collect()
}

// ---------------------------------------------------------------------------------------------
// examples/fleet.json
// ---------------------------------------------------------------------------------------------

#[test]
fn example_fleet_parses_validates_and_converts_durations_to_seconds() {
    let spec = example_spec();
    assert_eq!(spec.hosts.len(), 5);
    let gpu = &spec.channels["gpu"];
    assert_eq!(gpu.freshness_window_secs, 86_400, "\"1d\"");
    assert_eq!(gpu.signing_interval_secs, 4 * 3600, "\"4h\"");
    assert_eq!(gpu.reconcile_interval_secs, Some(30));
    let tcp = gpu.probes.iter().find(|p| p.name == "scheduler-port").expect("probe");
    assert_eq!(tcp.timeout_secs, 5, "\"5s\"");
    assert_eq!(tcp.mode, Mode::Observe);
    let policy = &spec.rollout_policies["canary-then-racks"];
    let soaks: Vec<u64> = policy.waves.iter().map(|w| w.soak_secs).collect();
    assert_eq!(soaks, [900, 600, 0], "\"15m\", \"10m\", 0");
    assert_eq!(spec.rollout_policies["all-at-once"].waves[0].soak_secs, 300);
    assert_eq!(spec.channels["infra"].reconcile_interval_secs, None);
}

#[test]
fn example_resolves_first_matching_wave_wins() {
    let r = resolved_example();
    let gpu = &r.fleet.channels["gpu"];
    let waves: Vec<(u32, u64, Vec<&str>)> =
        gpu.waves.iter().map(|w| (w.index, w.soak_secs, w.hosts.iter().map(String::as_str).collect())).collect();
    assert_eq!(
        waves,
        [(0, 900, vec!["gpu-a-01"]), (1, 600, vec!["gpu-a-02"]), (2, 0, vec!["gpu-b-01", "gpu-b-02"])],
        "gpu-a-01 is canary (wave 0) although it is also rack-a; gpu-a-02 is rack-a; the rest fall to `all`"
    );
    let infra = &r.fleet.channels["infra"];
    assert_eq!(infra.waves.len(), 1);
    assert_eq!(infra.waves[0].hosts, ["infra-01"]);
    assert_eq!(infra.waves[0].soak_secs, 300);
    assert_eq!(infra.reconcile_interval_secs, 30, "default reconcile interval");
    assert_eq!(infra.freshness_window_secs, 86_400);
    assert_eq!(gpu.signing_interval_secs, 14_400);

    let (m, _) = &r.manifests["gpu"];
    let set: Vec<(&str, u32)> = m.host_set.iter().map(|e| (e.hostname.as_str(), e.wave_index)).collect();
    assert_eq!(set, [("gpu-a-01", 0), ("gpu-a-02", 1), ("gpu-b-01", 2), ("gpu-b-02", 2)]);
    let soaks: Vec<(u32, u64)> = m.waves.iter().map(|w| (w.index, w.soak_secs)).collect();
    assert_eq!(soaks, [(0, 900), (1, 600), (2, 0)]);
    assert_eq!(m.probes.iter().find(|p| p.name == "scheduler-port").map(|p| p.timeout_secs), Some(5));
}

#[test]
fn example_host_set_is_sorted_by_hostname_with_spec_closures() {
    let r = resolved_example();
    let spec = example_spec();
    for (channel, (m, _)) in &r.manifests {
        assert!(m.check_sorted(), "{channel}");
        let names: Vec<&str> = m.host_set.iter().map(|e| e.hostname.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "{channel}: host set sorted by hostname");
        for e in &m.host_set {
            let host = &spec.hosts[&e.hostname];
            assert_eq!(host.channel, *channel, "only the channel's hosts");
            assert_eq!(e.target_closure, host.closure);
            assert_eq!(m.host(&e.hostname), Some(e));
        }
        let expected: Vec<&str> = spec.hosts.iter().filter(|(_, h)| h.channel == *channel).map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, expected, "{channel}: every host of the channel, none other");
    }
    assert_eq!(r.manifests["infra"].0.host_set.len(), 1);
    assert!(r.manifests["infra"].0.host("gpu-a-01").is_none());
}

#[test]
fn example_budgets_are_frozen_with_sorted_host_lists() {
    let r = resolved_example();
    let budgets = &r.fleet.disruption_budgets;
    assert_eq!(budgets.len(), 2);
    assert_eq!(budgets[0].hosts, ["gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02"]);
    assert_eq!(budgets[0].max_in_flight_pct, Some(50));
    assert_eq!(budgets[0].max_in_flight, None);
    assert_eq!(budgets[0].allowed(), 2);
    assert_eq!(budgets[1].hosts, ["gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02", "infra-01"], "tagsAny rack-a/rack-b spans channels");
    assert_eq!(budgets[1].max_in_flight, Some(2));
    for b in budgets {
        assert!(b.hosts.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        assert_eq!(b.selector, b.selector.normalized(), "the frozen selector is in normal form");
    }
    // A manifest carries the budgets covering any of its hosts, frozen across the fleet.
    let gpu = &r.manifests["gpu"].0;
    assert_eq!(gpu.disruption_budgets, *budgets);
    let infra = &r.manifests["infra"].0;
    assert_eq!(infra.disruption_budgets, [budgets[1].clone()], "the gpu-only budget does not touch infra");
}

#[test]
fn example_manifest_edges_are_restricted_to_the_channels_hosts() {
    let r = resolved_example();
    let gpu = &r.manifests["gpu"].0;
    let edges: Vec<(&str, &str)> = gpu.edges.iter().map(|e| (e.before.as_str(), e.after.as_str())).collect();
    assert_eq!(edges, [("gpu-b-01", "gpu-b-02")]);
    assert!(r.manifests["infra"].0.edges.is_empty());
    assert_eq!(r.fleet.channel_edges.len(), 1, "channel edges stay in fleet.resolved");

    // An edge across channels is kept in fleet.resolved but lands in neither manifest.
    let mut v = example_value();
    v["edges"].as_array_mut().expect("edges").push(json!({ "before": "infra-01", "after": "gpu-a-01", "reason": "cache" }));
    let r = resolve(&spec_of(&v), &meta(COMMIT)).expect("resolves");
    assert_eq!(r.fleet.edges.len(), 2);
    assert_eq!(r.manifests["gpu"].0.edges.len(), 1);
    assert_eq!(r.manifests["gpu"].0.edges[0].before, "gpu-b-01");
    assert!(r.manifests["infra"].0.edges.is_empty());
}

#[test]
fn example_rollout_id_is_channel_at_ref() {
    let r = resolved_example();
    for (channel, (m, _)) in &r.manifests {
        assert_eq!(m.rollout_id.as_str(), format!("{channel}@{COMMIT}"), "default ref is the CI commit");
        assert_eq!(m.rollout_id, RolloutId::new(&m.channel, &m.channel_ref).expect("id"));
        assert_eq!(m.channel, *channel);
        assert_eq!(m.channel_ref, COMMIT);
        assert_eq!(r.fleet.channels[channel].channel_ref, COMMIT);
    }
    // An explicit ref wins over the commit.
    let mut v = example_value();
    v["channels"]["gpu"]["ref"] = json!("v1.2.3");
    let r = resolve(&spec_of(&v), &meta(COMMIT)).expect("resolves");
    assert_eq!(r.manifests["gpu"].0.rollout_id.as_str(), "gpu@v1.2.3");
    assert_eq!(r.manifests["infra"].0.rollout_id.as_str(), format!("infra@{COMMIT}"));
}

#[test]
fn example_fleet_resolved_hash_is_sha256_of_fleet_bytes() {
    let r = resolved_example();
    let digest = hex::encode(Sha256::digest(&r.fleet_bytes));
    assert_eq!(r.fleet_sha256, digest);
    assert_eq!(r.fleet_bytes, canonical::to_vec_of(&r.fleet).expect("canonical"), "fleet bytes are JCS of the fleet");
    for (channel, (m, bytes)) in &r.manifests {
        assert_eq!(m.fleet_resolved_hash, digest, "{channel}");
        assert_eq!(*bytes, canonical::to_vec_of(m).expect("canonical"), "{channel}");
        assert_eq!(m.created_at, t("2026-11-21T10:00:00Z"));
    }
    assert_eq!(r.fleet.meta.ci_commit, COMMIT);
    // Deterministic: the same inputs give the same bytes.
    let again = resolved_example();
    assert_eq!(again.fleet_bytes, r.fleet_bytes);
    assert_eq!(again.manifests["gpu"].1, r.manifests["gpu"].1);
}

// ---------------------------------------------------------------------------------------------
// Validation: each error names its JSON path
// ---------------------------------------------------------------------------------------------

#[test]
fn base_fixture_is_valid() {
    let spec = spec_of(&base());
    let r = resolve(&spec, &meta("c0ffee")).expect("resolves");
    assert_eq!(r.fleet.channels["c"].waves[0].hosts, ["h-1"]);
    assert_eq!(r.fleet.channels["c"].waves[1].hosts, ["h-2", "h-3"]);
}

#[test]
fn unknown_channel_on_a_host_is_refused() {
    let mut v = base();
    v["hosts"]["h-2"]["channel"] = json!("nope");
    let msg = invalid_at(&v, "hosts.h-2.channel");
    assert!(msg.contains("nope"), "{msg}");
}

#[test]
fn host_in_no_wave_is_refused() {
    let mut v = base();
    v["rolloutPolicies"]["p"]["waves"] = json!([{ "selector": { "tags": ["canary"] }, "soakSecs": 60 }]);
    let msg = invalid_at(&v, "hosts.h-2");
    assert!(msg.contains("no wave"), "{msg}");
}

#[test]
fn cycle_in_edges_is_refused_with_its_path() {
    let mut v = base();
    v["edges"] = json!([
        { "before": "h-1", "after": "h-2" },
        { "before": "h-2", "after": "h-3" },
        { "before": "h-3", "after": "h-1" }
    ]);
    let msg = invalid_at(&v, "edges");
    assert!(msg.contains("cycle"), "{msg}");
    assert!(msg.contains("h-1 -> h-2 -> h-3 -> h-1"), "the cycle's path through the nodes: {msg}");

    // A diamond is not a cycle.
    v["edges"] = json!([
        { "before": "h-1", "after": "h-2" },
        { "before": "h-1", "after": "h-3" },
        { "before": "h-2", "after": "h-3" }
    ]);
    spec_of(&v);
}

#[test]
fn cycle_in_channel_edges_is_refused_with_its_path() {
    let mut v = base();
    v["channels"]["d"] = v["channels"]["c"].clone();
    v["channelEdges"] = json!([{ "before": "c", "after": "d" }, { "before": "d", "after": "c" }]);
    let msg = invalid_at(&v, "channelEdges");
    assert!(msg.contains("cycle"), "{msg}");
    assert!(msg.contains("c -> d -> c"), "{msg}");
}

#[test]
fn self_edge_is_refused() {
    let mut v = base();
    v["edges"] = json!([{ "before": "h-1", "after": "h-2" }, { "before": "h-3", "after": "h-3" }]);
    let msg = invalid_at(&v, "edges[1]");
    assert!(msg.contains("h-3"), "{msg}");
    let mut v = base();
    v["channelEdges"] = json!([{ "before": "c", "after": "c" }]);
    invalid_at(&v, "channelEdges[0]");
}

#[test]
fn edge_naming_an_unknown_host_is_refused() {
    let mut v = base();
    v["edges"] = json!([{ "before": "h-1", "after": "ghost" }]);
    let msg = invalid_at(&v, "edges[0].after");
    assert!(msg.contains("ghost"), "{msg}");
    v["edges"] = json!([{ "before": "ghost", "after": "h-1" }]);
    invalid_at(&v, "edges[0].before");
    let mut v = base();
    v["channelEdges"] = json!([{ "before": "c", "after": "nochannel" }]);
    invalid_at(&v, "channelEdges[0].after");
}

#[test]
fn budget_with_neither_limit_is_refused() {
    let mut v = base();
    v["disruptionBudgets"] = json!([{ "selector": { "all": true }, "maxInFlight": 1 }, { "selector": { "tags": ["gpu"] } }]);
    let msg = invalid_at(&v, "disruptionBudgets[1]");
    assert!(msg.contains("maxInFlight"), "{msg}");
}

#[test]
fn budget_max_in_flight_zero_is_refused() {
    let mut v = base();
    v["disruptionBudgets"] = json!([{ "selector": { "all": true }, "maxInFlight": 0 }]);
    invalid_at(&v, "disruptionBudgets[0].maxInFlight");
}

#[test]
fn budget_max_in_flight_pct_outside_1_to_100_is_refused() {
    for bad in [0, 101] {
        let mut v = base();
        v["disruptionBudgets"] = json!([{ "selector": { "all": true }, "maxInFlightPct": bad }]);
        invalid_at(&v, "disruptionBudgets[0].maxInFlightPct");
    }
    for good in [1, 100] {
        let mut v = base();
        v["disruptionBudgets"] = json!([{ "selector": { "all": true }, "maxInFlightPct": good, "maxInFlight": 3 }]);
        spec_of(&v);
    }
}

#[test]
fn freshness_window_under_twice_the_signing_interval_is_refused() {
    let mut v = base();
    v["channels"]["c"]["freshnessWindowSecs"] = json!("7h");
    let msg = invalid_at(&v, "channels.c.freshnessWindowSecs");
    assert!(msg.contains("25200") && msg.contains("14400"), "{msg}");
    v["channels"]["c"]["freshnessWindowSecs"] = json!("8h");
    spec_of(&v);
}

#[test]
fn bad_channel_name_characters_are_refused() {
    let mut v = base();
    let ch = v["channels"]["c"].take();
    v["channels"] = json!({ "a/b": ch });
    for h in ["h-1", "h-2", "h-3"] {
        v["hosts"][h]["channel"] = json!("a/b");
    }
    let msg = invalid_at(&v, "channels.a/b");
    assert!(msg.contains("A-Za-z0-9._-"), "{msg}");
}

#[test]
fn bad_channel_ref_is_refused() {
    for bad in ["../x", "a b", "", "x@y"] {
        let mut v = base();
        v["channels"]["c"]["ref"] = json!(bad);
        invalid_at(&v, "channels.c.ref");
    }
    let mut v = base();
    v["channels"]["c"]["ref"] = json!("release-2026.11_rc1");
    spec_of(&v);
}

#[test]
fn bad_hostname_is_refused() {
    let mut v = base();
    let h = v["hosts"]["h-3"].take();
    v["hosts"].as_object_mut().expect("hosts").remove("h-3");
    v["hosts"]["GPU-3"] = h;
    let msg = invalid_at(&v, "hosts.GPU-3");
    assert!(msg.contains("GPU-3"), "{msg}");
}

#[test]
fn closure_not_under_nix_store_is_refused() {
    for bad in ["/usr/lib/nixos-system", "/nix/store/", "nix/store/aaaa-x", ""] {
        let mut v = base();
        v["hosts"]["h-1"]["closure"] = json!(bad);
        invalid_at(&v, "hosts.h-1.closure");
    }
}

#[test]
fn required_probe_that_is_not_defined_is_refused() {
    let mut v = base();
    v["rolloutPolicies"]["p"]["healthGate"]["requiredProbes"] = json!(["up", "missing"]);
    let msg = invalid_at(&v, "rolloutPolicies.p.healthGate.requiredProbes");
    assert!(msg.contains("missing"), "{msg}");
}

#[test]
fn duplicate_probe_names_are_refused() {
    let mut v = base();
    v["channels"]["c"]["probes"]
        .as_array_mut()
        .expect("probes")
        .push(json!({ "name": "up", "kind": "tcp", "host": "127.0.0.1", "port": 22, "timeoutSecs": 1 }));
    let msg = invalid_at(&v, "channels.c.probes[1].name");
    assert!(msg.contains("duplicate"), "{msg}");
}

#[test]
fn exec_probe_without_command_is_refused() {
    for probe in [
        json!({ "name": "up", "kind": "exec", "timeoutSecs": 5 }),
        json!({ "name": "up", "kind": "exec", "command": [], "timeoutSecs": 5 }),
    ] {
        let mut v = base();
        v["channels"]["c"]["probes"] = json!([probe]);
        invalid_at(&v, "channels.c.probes[0].command");
    }
}

#[test]
fn http_probe_with_a_port_is_refused() {
    let mut v = base();
    v["channels"]["c"]["probes"]
        .as_array_mut()
        .expect("probes")
        .push(json!({ "name": "web", "kind": "http", "url": "http://127.0.0.1:8080/healthz", "port": 8080, "timeoutSecs": 5 }));
    let msg = invalid_at(&v, "channels.c.probes[1].port");
    assert!(msg.contains("does not apply"), "{msg}");
}

#[test]
fn tcp_probe_without_port_is_refused() {
    let mut v = base();
    v["channels"]["c"]["probes"]
        .as_array_mut()
        .expect("probes")
        .push(json!({ "name": "ssh", "kind": "tcp", "host": "127.0.0.1", "timeoutSecs": 5 }));
    invalid_at(&v, "channels.c.probes[1].port");
}

#[test]
fn unknown_field_anywhere_is_malformed() {
    type Poke = fn(&mut Value);
    let pokes: [(&str, Poke); 10] = [
        ("top level", |v| v["bogusField"] = json!(1)),
        ("host", |v| v["hosts"]["h-1"]["bogusField"] = json!(1)),
        ("channel", |v| v["channels"]["c"]["bogusField"] = json!(1)),
        ("probe", |v| v["channels"]["c"]["probes"][0]["bogusField"] = json!(1)),
        ("compliance", |v| v["channels"]["c"]["compliance"] = json!({ "bogusField": 1 })),
        ("policy", |v| v["rolloutPolicies"]["p"]["bogusField"] = json!(1)),
        ("wave", |v| v["rolloutPolicies"]["p"]["waves"][0]["bogusField"] = json!(1)),
        ("selector", |v| v["rolloutPolicies"]["p"]["waves"][0]["selector"]["bogusField"] = json!(1)),
        ("health gate", |v| v["rolloutPolicies"]["p"]["healthGate"]["bogusField"] = json!(1)),
        ("budget", |v| v["disruptionBudgets"] = json!([{ "selector": { "all": true }, "maxInFlight": 1, "bogusField": 1 }])),
    ];
    for (where_, poke) in pokes {
        let mut v = base();
        poke(&mut v);
        let shown = malformed(&v);
        assert!(shown.contains("bogusField"), "{where_}: {shown}");
    }
    let mut v = base();
    v["edges"] = json!([{ "before": "h-1", "after": "h-2", "bogusField": 1 }]);
    malformed(&v);
}

#[test]
fn bad_duration_string_is_malformed_and_names_the_unit() {
    let mut v = base();
    v["channels"]["c"]["freshnessWindowSecs"] = json!("15x");
    let shown = malformed(&v);
    assert!(shown.contains("unit"), "{shown}");
    assert!(shown.contains("15x"), "{shown}");
    assert!(shown.contains("channels.c.freshnessWindowSecs"), "the error names the JSON path: {shown}");
    let mut v = base();
    v["rolloutPolicies"]["p"]["waves"][0]["soakSecs"] = json!("m");
    let shown = malformed(&v);
    assert!(shown.contains("rolloutPolicies.p.waves[0].soakSecs"), "{shown}");
    let mut v = base();
    v["channels"]["c"]["probes"][0]["timeoutSecs"] = json!(-5);
    malformed(&v);
}

#[test]
fn empty_selector_is_refused() {
    let mut v = base();
    v["rolloutPolicies"]["p"]["waves"][1]["selector"] = json!({});
    let msg = invalid_at(&v, "rolloutPolicies.p.waves[1].selector");
    assert!(msg.contains("empty"), "{msg}");
    let mut v = base();
    v["disruptionBudgets"] = json!([{ "selector": {}, "maxInFlight": 1 }]);
    invalid_at(&v, "disruptionBudgets[0].selector");
    // Selectors that can match nothing are reported at the selector, not at the hosts they
    // failed to place.
    for bad in [json!({ "all": false }), json!({ "tagsAny": [] }), json!({ "not": {} })] {
        let mut v = base();
        v["rolloutPolicies"]["p"]["waves"][1]["selector"] = bad;
        invalid_at(&v, "rolloutPolicies.p.waves[1].selector");
    }
}

#[test]
fn policy_with_zero_waves_is_refused() {
    let mut v = base();
    v["rolloutPolicies"]["p"]["waves"] = json!([]);
    let msg = invalid_at(&v, "rolloutPolicies.p.waves");
    assert!(msg.contains("at least one wave"), "{msg}");
    // Also for a policy no channel uses.
    let mut v = base();
    v["rolloutPolicies"]["unused"] = json!({ "waves": [] });
    invalid_at(&v, "rolloutPolicies.unused.waves");
}

// ---------------------------------------------------------------------------------------------
// Budgets and selectors
// ---------------------------------------------------------------------------------------------

fn budget(n: usize, max_in_flight: Option<u32>, pct: Option<u32>) -> FrozenBudget {
    FrozenBudget {
        selector: sel(json!({ "all": true })),
        hosts: (0..n).map(|i| format!("h-{i:03}")).collect(),
        max_in_flight,
        max_in_flight_pct: pct,
    }
}

#[test]
fn frozen_budget_allowed_pct_is_floor_of_pct_times_n_at_least_one() {
    for (pct, n, want) in [(50, 3, 1), (50, 4, 2), (10, 5, 1), (34, 3, 1), (10, 100, 10), (99, 100, 99), (100, 7, 7), (1, 10, 1), (1, 0, 1)]
    {
        assert_eq!(budget(n, None, Some(pct)).allowed(), want, "{pct}% of {n}");
    }
    assert_eq!(budget(10, Some(3), None).allowed(), 3);
}

#[test]
fn frozen_budget_allowed_is_the_min_of_both_limits() {
    assert_eq!(budget(10, Some(3), Some(50)).allowed(), 3, "3 < 5");
    assert_eq!(budget(10, Some(8), Some(50)).allowed(), 5, "5 < 8");
    assert_eq!(budget(3, Some(2), Some(10)).allowed(), 1, "pct floor 0 becomes 1, then min with 2");
}

#[test]
fn selector_canonical_ignores_order_and_duplicates() {
    let a = sel(json!({ "tags": ["b", "a", "a"], "hosts": ["z", "y"], "not": { "tagsAny": ["x", "w", "x"] } }));
    let b = sel(json!({ "not": { "tagsAny": ["w", "x"] }, "hosts": ["y", "z", "y"], "tags": ["a", "b"] }));
    assert_ne!(a, b);
    assert_eq!(a.canonical(), b.canonical());
    assert_eq!(a.normalized(), b.normalized());
    assert!(canonical::is_canonical(a.canonical().as_bytes()));
    assert_eq!(
        sel(json!({ "and": [{ "tags": ["q", "p"] }] })).canonical(),
        sel(json!({ "and": [{ "tags": ["p", "q", "p"] }] })).canonical()
    );
    // Different meaning, different canonical form.
    assert_ne!(sel(json!({ "tags": ["a"] })).canonical(), sel(json!({ "tagsAny": ["a"] })).canonical());
    assert_ne!(sel(json!({ "tags": ["a"] })).canonical(), sel(json!({ "tags": ["a", "b"] })).canonical());
}

#[test]
fn budgets_from_different_releases_match_by_canonical_selector() {
    let a = resolved_example();
    // Another release: other commit, other closures, one more host, and the budget
    // selectors spelled in another order with duplicates.
    let mut v = example_value();
    v["disruptionBudgets"][0]["selector"] = json!({ "tags": ["gpu", "gpu"] });
    v["disruptionBudgets"][1]["selector"] = json!({ "tagsAny": ["rack-b", "rack-a", "rack-b"] });
    v["hosts"]["gpu-a-01"]["closure"] = json!("/nix/store/zzzz-nixos-system-gpu-a-01-25.11");
    v["hosts"]["gpu-c-01"] = json!({ "system": "x86_64-linux", "tags": ["gpu", "rack-b"], "channel": "gpu", "closure": "/nix/store/cccc-nixos-system-gpu-c-01" });
    let b = resolve(&spec_of(&v), &meta("fedcba9876543210")).expect("resolves");
    let (ma, mb) = (&a.manifests["gpu"].0, &b.manifests["gpu"].0);
    assert_ne!(ma.rollout_id, mb.rollout_id);
    assert_ne!(ma.fleet_resolved_hash, mb.fleet_resolved_hash);
    assert_eq!(ma.disruption_budgets.len(), mb.disruption_budgets.len());
    for ba in &ma.disruption_budgets {
        let same: Vec<&FrozenBudget> =
            mb.disruption_budgets.iter().filter(|bb| bb.selector.canonical() == ba.selector.canonical()).collect();
        assert_eq!(same.len(), 1, "exactly one budget of the other rollout matches {}", ba.selector.canonical());
        assert_eq!(same[0].selector, ba.selector, "frozen selectors are stored normalised");
        assert_eq!(same[0].hosts.len(), ba.hosts.len() + 1, "the frozen host lists differ: gpu-c-01 is new");
    }
}

// ---------------------------------------------------------------------------------------------
// Serde round trips
// ---------------------------------------------------------------------------------------------

fn intent() -> Intent {
    Intent {
        intent_id: "7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned(),
        host_id: "0f0e0d0c-0b0a-4909-8807-060504030201".to_owned(),
        hostname: "gpu-a-01".to_owned(),
        rollout_id: RolloutId::new("gpu", COMMIT).expect("id"),
        manifest_sha256: "ab".repeat(32),
        wave_index: 0,
        target_closure: "/nix/store/1a2b3c4d5e6f7g8h9i0jklmnpqrsvwxy-nixos-system-gpu-a-01-25.05".to_owned(),
        issued_at: t("2026-11-21T10:00:00Z"),
        expires_at: t("2026-11-21T11:00:00Z"),
        confirm_window_secs: 120,
    }
}

const CK: &str = "CK-secret-consumer-9f8e7d";
const TK: &str = "TK-secret-token-6c5b4a";
const TS: &str = "TS-secret-tokensecret-3a2b1c";

fn task(kind: TaskKind) -> Task {
    Task {
        task_id: "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f".to_owned(),
        host_id: "0f0e0d0c-0b0a-4909-8807-060504030201".to_owned(),
        job_id: Some("job-42".to_owned()),
        issued_at: t("2026-11-21T10:00:00Z"),
        expires_at: t("2026-11-21T10:30:00Z"),
        kind,
    }
}

fn reseed() -> TaskKind {
    TaskKind::HwSyncReseed {
        maas_url: "http://maas.example:5240/MAAS".to_owned(),
        system_id: "abc123".to_owned(),
        consumer_key: Secret::new(CK),
        token_key: Secret::new(TK),
        token_secret: Secret::new(TS),
    }
}

fn every_task_kind() -> Vec<(TaskKind, &'static str)> {
    vec![
        (
            TaskKind::GpuScrub {
                vendor: GpuVendor::Nvidia,
                compute_processes: ComputeProcessPolicy::StopTenant,
                memory_used_threshold_mib: 64,
                dcgm_diag_level: Some(2),
            },
            "node.gpu_scrub",
        ),
        (TaskKind::StorageCleanup { scope: StorageScope::All }, "node.storage_cleanup"),
        (TaskKind::ValidateClean { check_gpu: false }, "node.validate_clean"),
        (reseed(), "node.hw_sync_reseed"),
        (TaskKind::Drain { timeout_secs: 600 }, "node.drain"),
        (TaskKind::RevokeUser { users: Some(vec!["alice".to_owned(), "bob".to_owned()]) }, "allocation.revoke_user"),
        (TaskKind::Uninstall { purge_state: true }, "node.uninstall"),
    ]
}

#[test]
fn intent_round_trips_with_design_field_names() {
    let v = round_trip(&intent());
    let want: BTreeSet<&str> = [
        "intentId",
        "hostId",
        "hostname",
        "rolloutId",
        "manifestSha256",
        "waveIndex",
        "targetClosure",
        "issuedAt",
        "expiresAt",
        "confirmWindowSecs",
    ]
    .into();
    assert_eq!(keys(&v), want);
    assert_eq!(v["rolloutId"], json!(format!("gpu@{COMMIT}")));
    assert_eq!(v["issuedAt"], json!("2026-11-21T10:00:00Z"));
    let mut bad = v.clone();
    bad["extra"] = json!(true);
    assert!(serde_json::from_value::<Intent>(bad).is_err(), "unknown fields are refused");
    let mut bad = v;
    bad["rolloutId"] = json!("gpu@../x");
    assert!(serde_json::from_value::<Intent>(bad).is_err(), "a bad rollout id is refused");
}

#[test]
fn task_round_trips_for_every_kind_with_catalog_type_tags() {
    let kinds = every_task_kind();
    let tags: BTreeSet<&str> = kinds.iter().map(|(_, tag)| *tag).collect();
    assert_eq!(tags.len(), 7, "every variant, distinct tags");
    for (kind, tag) in kinds {
        assert_eq!(kind.type_name(), tag);
        let v = round_trip(&task(kind));
        assert_eq!(v["kind"]["type"], json!(tag), "{v}");
        assert_eq!(v["taskId"], json!("c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"));
        assert_eq!(v["jobId"], json!("job-42"));
    }
    let mut no_job = task(TaskKind::Drain { timeout_secs: 1 });
    no_job.job_id = None;
    assert!(round_trip(&no_job).get("jobId").is_none());
}

#[test]
fn task_kind_fields_are_camel_case_with_defaults() {
    let v = serde_json::to_value(task(every_task_kind().swap_remove(0).0)).expect("json");
    assert_eq!(
        v["kind"],
        json!({ "type": "node.gpu_scrub", "vendor": "nvidia", "computeProcesses": "stop-tenant", "memoryUsedThresholdMib": 64, "dcgmDiagLevel": 2 })
    );
    let v = serde_json::to_value(reseed()).expect("json");
    assert_eq!(v["maasUrl"], json!("http://maas.example:5240/MAAS"));
    assert_eq!(v["tokenSecret"], json!(TS), "the wire form carries the secret to the agent");
    let k: TaskKind = serde_json::from_value(json!({ "type": "node.validate_clean" })).expect("parse");
    assert_eq!(k, TaskKind::ValidateClean { check_gpu: true });
    let k: TaskKind = serde_json::from_value(json!({ "type": "node.gpu_scrub", "memoryUsedThresholdMib": 10 })).expect("parse");
    assert_eq!(
        k,
        TaskKind::GpuScrub {
            vendor: GpuVendor::Auto,
            compute_processes: ComputeProcessPolicy::Refuse,
            memory_used_threshold_mib: 10,
            dcgm_diag_level: None
        }
    );
    let k: TaskKind = serde_json::from_value(json!({ "type": "allocation.revoke_user" })).expect("parse");
    assert_eq!(k, TaskKind::RevokeUser { users: None });
    assert!(serde_json::from_value::<TaskKind>(json!({ "type": "node.storage_cleanup", "scope": "nfs" })).is_err());
    assert!(serde_json::from_value::<TaskKind>(json!({ "type": "node.drain", "timeoutSecs": 5, "force": true })).is_err());
}

fn checkin_request() -> CheckinRequest {
    CheckinRequest {
        agent_version: "0.1.0".to_owned(),
        boot_id: "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9".to_owned(),
        current_generation: Some("/nix/store/1a2b3c4d5e6f7g8h9i0jklmnpqrsvwxy-nixos-system-gpu-a-01-25.05".to_owned()),
        health: Some(HealthReport {
            collected_at: t("2026-11-21T10:05:00Z"),
            uptime_secs: 86_400,
            load_avg_1m: 0.37,
            mem_total_bytes: 1 << 40,
            mem_available_bytes: 3 << 38,
            failed_units: vec!["nvidia-fabricmanager.service".to_owned()],
            gpu: Some(GpuSummary { vendor: "nvidia".to_owned(), count: 8, unhealthy: 1 }),
            hw_sync: Some(HwSyncState { creds_present: true, timer_active: false }),
        }),
        probe_results: vec![
            ProbeResult {
                name: "nvidia-persistenced".to_owned(),
                outcome: ProbeOutcome::Passed,
                mode: Mode::Enforce,
                message: "exit 0".to_owned(),
                duration_ms: 12,
                observed_at: t("2026-11-21T10:05:01Z"),
            },
            ProbeResult {
                name: "scheduler-port".to_owned(),
                outcome: ProbeOutcome::ProbeError,
                mode: Mode::Observe,
                message: "timed out after 5s".to_owned(),
                duration_ms: 5000,
                observed_at: t("2026-11-21T10:05:06Z"),
            },
            ProbeResult {
                name: "api-up".to_owned(),
                outcome: ProbeOutcome::Failed,
                mode: Mode::Enforce,
                message: "status 503".to_owned(),
                duration_ms: 40,
                observed_at: t("2026-11-21T10:05:07Z"),
            },
        ],
        task_results: vec![TaskResult {
            task_id: "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f".to_owned(),
            outcome: TaskOutcome::Failed,
            steps: vec![
                StepResult {
                    name: "unmount-weka".to_owned(),
                    outcome: StepOutcome::Skipped,
                    message: "no tenant wekafs mounts".to_owned(),
                    data: Value::Null,
                },
                StepResult {
                    name: "clean-roots".to_owned(),
                    outcome: StepOutcome::Ok,
                    message: String::new(),
                    data: json!({ "bytesFreed": 123_456_789, "roots": ["/scratch", "/var/tmp/tenant"], "ratio": 0.25 }),
                },
                StepResult {
                    name: "validate".to_owned(),
                    outcome: StepOutcome::Error,
                    message: "residue found".to_owned(),
                    data: json!({ "residues": [{ "kind": "process", "pid": 4242, "uid": 100_001 }] }),
                },
            ],
            started_at: t("2026-11-21T10:01:00Z"),
            finished_at: t("2026-11-21T10:02:30Z"),
        }],
        activation: Some(ActivationStatus {
            intent_id: "7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned(),
            rollout_id: RolloutId::new("gpu", COMMIT).expect("id"),
            target_closure: "/nix/store/1a2b3c4d5e6f7g8h9i0jklmnpqrsvwxy-nixos-system-gpu-a-01-25.05".to_owned(),
            phase: ActivationPhase::AwaitingConfirm,
            message: "switched".to_owned(),
        }),
        events: vec![
            ReportEvent::ManifestMismatch {
                rollout_id: "gpu@evil".to_owned(),
                reason: "rollout id differs from channel@channelRef".to_owned(),
            },
            ReportEvent::VerificationFailed { artifact: "timestamp.json".to_owned(), reason: "stale".to_owned() },
            ReportEvent::TaskRefused { task_id: "t-1".to_owned(), reason: "replayed".to_owned() },
            ReportEvent::ClockSteppedBack { last_seen: t("2026-11-21T10:00:00Z"), now: t("2026-11-20T10:00:00Z") },
            ReportEvent::RolledBack {
                rollout_id: format!("gpu@{COMMIT}"),
                restored_closure: "/nix/store/0000-previous".to_owned(),
                reason: "confirm window missed".to_owned(),
            },
            ReportEvent::NoActivationBackend { rollout_id: format!("gpu@{COMMIT}") },
        ],
        known_intent_id: Some("7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned()),
    }
}

#[test]
fn checkin_request_round_trips_with_camel_case_and_typed_events() {
    let req = checkin_request();
    let v = round_trip(&req);
    let text = serde_json::to_string(&req).expect("json");
    assert!(text.contains(r#""type":"ManifestMismatch""#), "{text}");
    assert_eq!(
        v["events"][0],
        json!({ "type": "ManifestMismatch", "rolloutId": "gpu@evil", "reason": "rollout id differs from channel@channelRef" })
    );
    assert_eq!(v["events"][3]["lastSeen"], json!("2026-11-21T10:00:00Z"));
    assert_eq!(v["events"][4]["restoredClosure"], json!("/nix/store/0000-previous"));
    assert_eq!(v["events"][5]["type"], json!("NoActivationBackend"));
    for k in
        ["agentVersion", "bootId", "currentGeneration", "health", "probeResults", "taskResults", "activation", "events", "knownIntentId"]
    {
        assert!(v.get(k).is_some(), "{k} in {v}");
    }
    assert_eq!(v["health"]["loadAvg1m"], json!(0.37));
    assert_eq!(v["health"]["hwSync"], json!({ "credsPresent": true, "timerActive": false }));
    assert_eq!(v["health"]["failedUnits"], json!(["nvidia-fabricmanager.service"]));
    assert_eq!(v["probeResults"][1]["outcome"], json!("probe-error"));
    assert_eq!(v["probeResults"][1]["mode"], json!("observe"));
    assert_eq!(v["probeResults"][1]["durationMs"], json!(5000));
    assert_eq!(v["taskResults"][0]["steps"][1]["data"]["bytesFreed"], json!(123_456_789));
    assert_eq!(v["taskResults"][0]["steps"][0]["outcome"], json!("skipped"));
    assert_eq!(v["taskResults"][0]["finishedAt"], json!("2026-11-21T10:02:30Z"));
    assert_eq!(v["activation"]["phase"], json!("awaiting-confirm"));

    // A minimal check-in is valid too; absent optionals are omitted, not null.
    let minimal: CheckinRequest = serde_json::from_value(json!({ "agentVersion": "0.1.0", "bootId": "b" })).expect("parse");
    let v = round_trip(&minimal);
    assert_eq!(keys(&v), ["agentVersion", "bootId", "events", "probeResults", "taskResults"].into());
    assert!(serde_json::from_value::<CheckinRequest>(json!({ "agentVersion": "0.1.0", "bootId": "b", "hostId": "spoof" })).is_err());
}

#[test]
fn checkin_response_with_envelopes_round_trips() {
    let s = signer();
    let intent_env = Envelope::seal(&intent(), std::slice::from_ref(&s)).expect("seal");
    let task_env = Envelope::seal(&task(TaskKind::StorageCleanup { scope: StorageScope::Local }), std::slice::from_ref(&s)).expect("seal");
    let resp = CheckinResponse { intent: Some(intent_env.clone()), tasks: vec![task_env], next_checkin_secs: 30 };
    let v = round_trip(&resp);
    assert_eq!(keys(&v), ["intent", "nextCheckinSecs", "tasks"].into());
    assert_eq!(keys(&v["intent"]), ["signatures", "signed"].into());
    assert_eq!(v["intent"]["signatures"][0]["alg"], json!("ed25519"));
    assert_eq!(v["intent"]["signatures"][0]["keyId"], json!(s_key_id(&s)));
    let back: CheckinResponse = serde_json::from_value(v).expect("parse");
    let env = back.intent.expect("intent");
    assert_eq!(env.payload::<Intent>().expect("intent payload"), intent());
    assert_eq!(env.signed_bytes().expect("bytes"), canonical::to_vec_of(&intent()).expect("canonical"));
    assert_eq!(back.tasks[0].payload::<Task>().expect("task").kind.type_name(), "node.storage_cleanup");

    let idle: CheckinResponse = serde_json::from_value(json!({ "nextCheckinSecs": 60 })).expect("parse");
    assert_eq!(idle, CheckinResponse { intent: None, tasks: vec![], next_checkin_secs: 60 });
    assert_eq!(keys(&round_trip(&idle)), ["nextCheckinSecs", "tasks"].into());
}

fn s_key_id(s: &KeySigner) -> String {
    use drover_proto::keys::Signer as _;
    s.key_id().as_str().to_owned()
}

#[test]
fn confirm_request_round_trips() {
    let c = ConfirmRequest {
        intent_id: "7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned(),
        rollout_id: RolloutId::new("gpu", COMMIT).expect("id"),
        closure: "/nix/store/1a2b3c4d5e6f7g8h9i0jklmnpqrsvwxy-nixos-system-gpu-a-01-25.05".to_owned(),
        boot_id: "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9".to_owned(),
    };
    let v = round_trip(&c);
    assert_eq!(keys(&v), ["bootId", "closure", "intentId", "rolloutId"].into());
    let mut bad = v;
    bad["hostId"] = json!("spoof");
    assert!(serde_json::from_value::<ConfirmRequest>(bad).is_err());
}

#[test]
fn api_error_has_the_error_code_message_shape() {
    let e = ApiError { error: ApiErrorBody { code: "not_found".to_owned(), message: "no rollout gpu@abc".to_owned() } };
    let v = round_trip(&e);
    assert_eq!(v, json!({ "error": { "code": "not_found", "message": "no rollout gpu@abc" } }));
    assert_eq!(canonical::to_vec_of(&e).expect("canonical"), br#"{"error":{"code":"not_found","message":"no rollout gpu@abc"}}"#);
    assert!(serde_json::from_value::<ApiError>(json!({ "error": { "code": "x", "message": "y", "detail": 1 } })).is_err());
    assert!(serde_json::from_value::<ApiError>(json!({ "code": "x", "message": "y" })).is_err());
}

#[test]
fn release_artifacts_round_trip_byte_for_byte() {
    let r = resolved_example();
    // fleet.resolved
    round_trip(&r.fleet);
    let fleet: FleetResolved = serde_json::from_slice(&r.fleet_bytes).expect("parse fleet.resolved");
    assert_eq!(fleet, r.fleet);
    assert_eq!(canonical::to_vec_of(&fleet).expect("canonical"), r.fleet_bytes);
    // manifests
    for (channel, (m, bytes)) in &r.manifests {
        round_trip(m);
        let back: RolloutManifest = serde_json::from_slice(bytes).expect("parse manifest");
        assert_eq!(back, *m, "{channel}");
        assert_eq!(canonical::to_vec_of(&back).expect("canonical"), *bytes, "{channel}");
        assert!(canonical::is_canonical(bytes));
    }
    let mv = serde_json::to_value(&r.manifests["gpu"].0).expect("json");
    for k in
        ["schemaVersion", "rolloutId", "channel", "channelRef", "fleetResolvedHash", "createdAt", "hostSet", "waves", "disruptionBudgets"]
    {
        assert!(mv.get(k).is_some(), "{k}");
    }
    assert_eq!(mv["onHealthFailure"], json!("rollback-and-halt"));
    assert_eq!(
        mv["hostSet"][0],
        json!({ "hostname": "gpu-a-01", "waveIndex": 0, "targetClosure": r.manifests["gpu"].0.host_set[0].target_closure })
    );

    // timestamp.json, as `drover release` writes it.
    let params = ReleaseParams { meta: meta(COMMIT), version: 7, previous: None };
    let files = release::build_release(&example_spec(), &params, &[signer()]).expect("release");
    let ts_bytes = files.get(release::TIMESTAMP).expect("timestamp.json");
    let ts: TimestampDoc = serde_json::from_slice(ts_bytes).expect("parse timestamp");
    round_trip(&ts);
    assert_eq!(canonical::to_vec_of(&ts).expect("canonical"), ts_bytes);
    assert_eq!(ts.version, 7);
    assert_eq!(ts.fleet_resolved_sha256, r.fleet_sha256);
    assert_eq!(files.get(release::FLEET_RESOLVED), Some(r.fleet_bytes.as_slice()));
    for (channel, entry) in &ts.channels {
        let (m, bytes) = &r.manifests[channel];
        assert_eq!(entry.rollout_id, m.rollout_id);
        assert_eq!(entry.manifest_sha256, hex::encode(Sha256::digest(bytes)));
        assert_eq!(entry.freshness_window_secs, 86_400);
        assert!(entry.revertable.is_empty());
        assert_eq!(files.get(&release::manifest_path(&m.rollout_id)), Some(bytes.as_slice()));
        assert!(ts.lists(&m.rollout_id, &entry.manifest_sha256));
    }
    assert_eq!(ts.tightest_window().map(|(_, w)| w), Some(86_400));
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

fn assert_no_secret(shown: &str) {
    for secret in [CK, TK, TS] {
        assert!(!shown.contains(secret), "secret {secret:?} leaked into {shown}");
    }
}

#[test]
fn secrets_never_appear_in_debug_of_a_task() {
    let task = task(reseed());
    let shown = format!("{task:?}");
    assert_no_secret(&shown);
    assert!(shown.contains("abc123"), "non-secret fields still show: {shown}");
    assert_no_secret(&format!("{task:#?}"));
    assert_no_secret(&format!("{:?}", reseed()));
    let TaskKind::HwSyncReseed { token_secret, .. } = reseed() else { unreachable!() };
    assert_no_secret(&token_secret.to_string());
    assert_eq!(token_secret.expose(), TS);
}

#[test]
fn secrets_never_appear_in_debug_of_a_checkin_response_or_its_task_payload() {
    let env = Envelope::seal(&task(reseed()), &[signer()]).expect("seal");
    let resp = CheckinResponse { intent: None, tasks: vec![env], next_checkin_secs: 30 };
    let wire = serde_json::to_vec(&resp).expect("json");
    assert!(String::from_utf8_lossy(&wire).contains(TS), "the wire form carries the secret to the agent");
    let back: CheckinResponse = serde_json::from_slice(&wire).expect("parse");
    let parsed: Task = back.tasks[0].payload().expect("task payload");
    let TaskKind::HwSyncReseed { ref token_secret, .. } = parsed.kind else { panic!("wrong kind {parsed:?}") };
    assert_eq!(token_secret.expose(), TS);
    assert_no_secret(&format!("{parsed:?}"));
    assert_no_secret(&format!("{parsed:#?}"));
    assert_no_secret(&format!("{:?}", back.tasks[0]));
    assert_no_secret(&format!("{back:?}"));
    assert_no_secret(&format!("{back:#?}"));
}

// ---------------------------------------------------------------------------------------------
// State tables
// ---------------------------------------------------------------------------------------------

fn strings<T: Copy + std::fmt::Display + Serialize>(all: &[T]) -> Vec<String> {
    for s in all {
        assert_eq!(serde_json::to_value(s).expect("json"), json!(s.to_string()), "serde form = Display form");
    }
    all.iter().map(ToString::to_string).collect()
}

#[test]
fn state_string_forms_are_exactly_the_documented_names() {
    assert_eq!(
        strings(RolloutState::ALL),
        ["Opening", "Active", "Converging", "Converged", "Halted", "Reverting", "Reverted", "Failed", "Superseded", "Cancelled", "Pruned"]
    );
    assert_eq!(strings(WaveState::ALL), ["Pending", "WaveActive", "WaveSoaking", "WavePromoted"]);
    assert_eq!(
        strings(HostRolloutState::ALL),
        ["Pending", "Activating", "Soaking", "Converged", "Failed", "Reverted", "Deferred", "Skipped"]
    );
    assert_eq!(
        strings(HostLifecycle::ALL),
        ["bootstrap_issued", "enrolling", "active", "offline", "quarantined", "draining", "retired", "removing", "deleted"]
    );
    assert_eq!(
        strings(JobState::ALL),
        ["pending", "running", "completed", "failed_retryable", "failed_manual_intervention", "cancelled", "compensating", "reconciled"]
    );
    // Parsing is exact: the other case is refused.
    assert_eq!("failed_manual_intervention".parse::<JobState>(), Ok(JobState::FailedManualIntervention));
    assert!("FailedManualIntervention".parse::<JobState>().is_err());
    assert!("active".parse::<RolloutState>().is_err());
    assert!("Active".parse::<HostLifecycle>().is_err());
    assert_eq!(serde_json::from_value::<HostRolloutState>(json!("Deferred")).expect("parse"), HostRolloutState::Deferred);
    assert!(serde_json::from_value::<HostRolloutState>(json!("deferred")).is_err());
    let err = "Sleeping".parse::<WaveState>().expect_err("unknown");
    assert!(err.to_string().contains("Sleeping"), "{err}");
}

fn refused<T: Copy + Debug + std::fmt::Display>(from: T, to: T, r: Result<T, drover_proto::states::IllegalTransition>) {
    let err = r.expect_err("illegal transition");
    let shown = err.to_string();
    assert!(shown.contains(&from.to_string()) && shown.contains(&to.to_string()), "names both states: {shown}");
    assert_eq!(err.from, from.to_string());
    assert_eq!(err.to, to.to_string());
}

#[test]
fn rollout_state_transitions() {
    use RolloutState::*;
    assert_eq!(Opening.transition(Active), Ok(Active));
    assert_eq!(Active.transition(Halted), Ok(Halted));
    assert_eq!(Halted.transition(Active), Ok(Active));
    assert_eq!(Reverting.transition(Reverted), Ok(Reverted));
    refused(Converged, Active, Converged.transition(Active));
    refused(Opening, Converged, Opening.transition(Converged));
    refused(Reverted, Active, Reverted.transition(Active));
    assert!(Pruned.is_terminal());
    let err = Cancelled.transition(Active).expect_err("illegal");
    assert_eq!(err.to_string(), "illegal rollout transition Cancelled -> Active");
}

#[test]
fn wave_state_transitions() {
    use WaveState::*;
    assert_eq!(Pending.transition(WaveActive), Ok(WaveActive));
    assert_eq!(WaveActive.transition(WaveSoaking), Ok(WaveSoaking));
    assert_eq!(WaveSoaking.transition(WavePromoted), Ok(WavePromoted));
    refused(Pending, WavePromoted, Pending.transition(WavePromoted));
    refused(WavePromoted, WaveActive, WavePromoted.transition(WaveActive));
    assert!(WavePromoted.is_terminal());
}

#[test]
fn host_rollout_state_transitions() {
    use HostRolloutState::*;
    assert_eq!(Pending.transition(Activating), Ok(Activating));
    assert_eq!(Activating.transition(Deferred), Ok(Deferred));
    assert_eq!(Pending.transition(Skipped), Ok(Skipped));
    assert_eq!(Skipped.transition(Activating), Ok(Activating));
    assert_eq!(Failed.transition(Reverted), Ok(Reverted));
    refused(Pending, Converged, Pending.transition(Converged));
    refused(Reverted, Activating, Reverted.transition(Activating));
    refused(Failed, Converged, Failed.transition(Converged));
}

#[test]
fn host_lifecycle_transitions_are_exactly_node_state_model() {
    use HostLifecycle::*;
    // node-state-model.md §3.2, verbatim.
    let legal = [
        (BootstrapIssued, Enrolling),
        (Enrolling, Active),
        (Enrolling, Quarantined),
        (Active, Offline),
        (Offline, Active),
        (Active, Quarantined),
        (Offline, Quarantined),
        (Quarantined, Active),
        (Quarantined, Draining),
        (Active, Draining),
        (Offline, Draining),
        (Draining, Retired),
        (Draining, Offline),
        (Retired, Active),
        (Retired, Removing),
        (Removing, Retired),
        (Removing, Deleted),
    ];
    for &from in HostLifecycle::ALL {
        for &to in HostLifecycle::ALL {
            if legal.contains(&(from, to)) {
                assert_eq!(from.transition(to), Ok(to), "{from} -> {to}");
            } else {
                refused(from, to, from.transition(to));
            }
        }
    }
    let err = Deleted.transition(Active).expect_err("illegal");
    assert_eq!(err.to_string(), "illegal host lifecycle transition deleted -> active");
}

#[test]
fn host_lifecycle_deleted_is_terminal() {
    assert!(HostLifecycle::Deleted.is_terminal());
    assert!(HostLifecycle::Deleted.successors().is_empty());
    let terminal: Vec<HostLifecycle> = HostLifecycle::ALL.iter().copied().filter(|s| s.is_terminal()).collect();
    assert_eq!(terminal, [HostLifecycle::Deleted], "deleted is the only terminal lifecycle state");
}

#[test]
fn job_state_transitions() {
    use JobState::*;
    assert_eq!(Pending.transition(Running), Ok(Running));
    assert_eq!(Running.transition(Completed), Ok(Completed));
    assert_eq!(Running.transition(FailedRetryable), Ok(FailedRetryable));
    assert_eq!(FailedRetryable.transition(Running), Ok(Running));
    assert_eq!(FailedManualIntervention.transition(Reconciled), Ok(Reconciled));
    assert_eq!(Compensating.transition(Pending), Ok(Pending));
    refused(Completed, Running, Completed.transition(Running));
    refused(Pending, Completed, Pending.transition(Completed));
    refused(Cancelled, Running, Cancelled.transition(Running));
    assert!(Completed.is_terminal());
    assert!(Cancelled.is_terminal());
    let err = Completed.transition(Running).expect_err("illegal");
    assert_eq!(err.to_string(), "illegal job transition completed -> running");
}
