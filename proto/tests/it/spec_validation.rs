//! The fleet spec and its projection into release artifacts.
//!
//! Each test is named after the rule it pins down: `examples/fleet.json` parses and resolves
//! deterministically (sorted host sets, first matching wave wins, `channel@ref` rollout ids,
//! fleet.resolved hashed into every manifest), validation errors name the JSON path of the
//! offending field, and disruption budgets and selectors count and compare as DESIGN says.

use crate::spec_fixtures;

use drover_proto::artifacts::FrozenBudget;
use drover_proto::canonical;
use drover_proto::names::RolloutId;
use drover_proto::resolve::resolve;
use drover_proto::selector::Selector;
use drover_proto::spec::{FleetSpec, Mode, SpecError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use spec_fixtures::*;

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

fn example_value() -> Value {
    serde_json::from_slice(FLEET_JSON).expect("examples/fleet.json is JSON")
}

fn spec_of(v: &Value) -> FleetSpec {
    FleetSpec::from_json(&serde_json::to_vec(v).expect("json")).expect("fixture spec is valid")
}

/// A small valid spec that the validation tests break one field at a time.
fn base() -> Value {
    json!({
        "hosts": {
            "h-1": { "system": "x86_64-linux", "tags": ["canary", "gpu"], "channel": "c", "closure": "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system-h-1" },
            "h-2": { "system": "x86_64-linux", "tags": ["gpu"], "channel": "c", "closure": "/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nixos-system-h-2" },
            "h-3": { "system": "x86_64-linux", "tags": ["gpu"], "channel": "c", "closure": "/nix/store/cccccccccccccccccccccccccccccccc-nixos-system-h-3" }
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
    for bad in [
        "/usr/lib/nixos-system",
        "/nix/store/",
        "nix/store/aaaa-x",
        "",
        "/nix/store/aaaa-x",
        "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-x/../../../etc/shadow",
        "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-x;reboot",
    ] {
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
    v["hosts"]["gpu-a-01"]["closure"] = json!("/nix/store/zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-nixos-system-gpu-a-01-25.11");
    v["hosts"]["gpu-c-01"] = json!({ "system": "x86_64-linux", "tags": ["gpu", "rack-b"], "channel": "gpu", "closure": "/nix/store/cccccccccccccccccccccccccccccccc-nixos-system-gpu-c-01" });
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
