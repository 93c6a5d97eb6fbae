//! The fleet simulator as CI runs it: `drover-bench fleet` with 200 simulated agents (each
//! enrolled through the API, each on its own mTLS connection) against a real
//! `drover-coordinator serve` process, every scripted behaviour present — slow switches, hosts
//! failing the health gate's probe, hosts dropping off when the rollout starts and rejoining
//! — and a disruption budget of a quarter of the fleet, split over two simulator processes
//! (each from its own loopback address) and admitting every intent through its per-host proof,
//! must converge: every rollout `Converged`, every host confirmed, nothing refused, and each
//! host sent a few KB for its intent.
//! A `--nodelay` setting other than `on` or `off` is refused before any coordinator starts
//! (that `off` reaches the coordinator's config is `fleet::run`'s unit test).

use std::process::Command;

use drover_tests::workspace_binary;

#[test]
fn two_hundred_simulated_agents_converge_through_every_behaviour() {
    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("report.json");
    let runs = dir.path().join("runs");
    let out = Command::new(workspace_binary("drover-bench"))
        .args([
            "fleet",
            "--agents",
            "200",
            "--channels",
            "3",
            "--waves",
            "4",
            "--soak-secs",
            "1",
            "--idle-secs",
            "2",
            "--max-in-flight",
            "25%",
            // Split over two simulator processes, each from its own loopback address.
            "--processes",
            "2",
        ])
        .args(["--slow", "2%", "--slow-secs", "1", "--failing", "2", "--offline", "1%", "--rejoin-secs", "2", "--timeout-secs", "240"])
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(&runs)
        .output()
        .expect("drover-bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "drover-bench failed ({}):\n{stderr}\ncoordinator log tail:\n{}",
        out.status,
        drover_tests::procs::log_tail(&runs.join("agents-200-http1.1-nodelay-on").join("coordinator/coordinator.log"), 30)
    );
    let reports: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("report written")).expect("JSON");
    let r = &reports[0];
    assert_eq!(r["agents"], 200);
    assert_eq!(r["tcpNodelay"], true, "TCP_NODELAY is on unless --nodelay off");
    assert_eq!(r["connected"], 200, "every agent held a long-poll before the rollout");
    let rollouts = r["rollouts"].as_array().expect("rollouts");
    assert_eq!(rollouts.len(), 3, "{rollouts:?}");
    assert!(rollouts.iter().all(|pair| pair[1] == "Converged"), "{rollouts:?}");
    assert_eq!(r["refused"], serde_json::json!([]), "admission refused something");
    assert_eq!(r["rejoined"], 2, "both offline hosts came back");
    // Every host but the two that left is measured, each dispatch once per host.
    assert_eq!(r["dispatches"], 198, "{r}");
    let p50 = r["dispatchP50Ms"].as_f64().expect("p50");
    let p99 = r["dispatchP99Ms"].as_f64().expect("p99");
    assert!(p50 > 0.0 && p50 <= p99, "latencies are measured: p50 {p50} ms, p99 {p99} ms");
    // The shared cache verified each channel's bundle once (a few more if agents raced to
    // the first), not once per host.
    let full = r["fullVerifications"].as_u64().expect("count");
    assert!((3..50).contains(&full), "{full} full verifications");
    assert!(r["eventsWritten"].as_u64().expect("events") >= 600, "at least three transitions per host: {r}");
    // Through the proof path: a host's share of the rollout is its check-in answer and its
    // proof bundle, a few KB, never the channel's manifest.
    let bytes = r["bytesPerHostP50"].as_f64().expect("bytes");
    assert!(bytes > 1000.0 && bytes < 4096.0, "median bytes per host for its intent: {bytes}");
    assert!(stderr.contains("[200] converged in"), "{stderr}");
}

#[test]
fn a_nodelay_setting_other_than_on_or_off_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs");
    let out = Command::new(workspace_binary("drover-bench"))
        .args(["fleet", "--agents", "10", "--nodelay", "off,nagle", "--dir"])
        .arg(&runs)
        .output()
        .expect("drover-bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--nodelay nagle: expected on or off"), "{stderr}");
    assert!(!runs.exists(), "no run was started");
}
