//! The store backed up while a real `drover-coordinator serve` process serves it, and
//! restored into its state directory after the store was lost (issue 23, point 5, first part).
//!
//! - `a_backup_taken_while_serving_restores_to_what_it_held`: hosts created before the backup
//!   come back, the one created after it does not; a backup never replaces a file, a restore
//!   never replaces a store (exit 73).

use std::process::Command;

use drover_tests::procs::fixed_port_site;
use drover_tests::workspace_binary;
use serde_json::{Value, json};

fn coordinator(args: &[&str]) -> std::process::Output {
    Command::new(workspace_binary("drover-coordinator")).args(args).output().expect("drover-coordinator runs")
}

async fn hostnames(e: &drover_tests::Endpoint) -> Vec<String> {
    let (code, text) = e.call(Some(&e.admin), "GET", "/v1/hosts?limit=1000", None).await;
    assert_eq!(code, "200", "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    let mut names: Vec<String> =
        v["items"].as_array().expect("items").iter().filter_map(|h| h["hostname"].as_str().map(str::to_owned)).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_serving_restores_to_what_it_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (paths, e) = fixed_port_site(dir.path(), "");
    let mut server = paths.serve();
    for i in 0..5 {
        let body = json!({ "hostname": format!("before-{i}"), "trustSha256": e.trust_sha256 }).to_string();
        assert_eq!(e.call(Some(&e.admin), "POST", "/v1/hosts", Some(&body)).await.0, "201");
    }
    let backup = dir.path().join("backup.db");
    let state = paths.state.display().to_string();
    let out = coordinator(&["backup", "--state-dir", &state, "--out", &backup.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let again = coordinator(&["backup", "--state-dir", &state, "--out", &backup.display().to_string()]);
    assert_eq!(again.status.code(), Some(73), "an existing backup is never replaced: {}", String::from_utf8_lossy(&again.stderr));
    let body = json!({ "hostname": "after-0", "trustSha256": e.trust_sha256 }).to_string();
    assert_eq!(e.call(Some(&e.admin), "POST", "/v1/hosts", Some(&body)).await.0, "201");

    // The store is lost with the process.
    server.child.kill().expect("SIGKILL");
    let _ = server.child.wait();
    let refused = coordinator(&["restore", "--state-dir", &state, "--from", &backup.display().to_string()]);
    assert_eq!(refused.status.code(), Some(73), "a store in place is never replaced: {}", String::from_utf8_lossy(&refused.stderr));
    for f in ["coordinator.db", "coordinator.db-wal", "coordinator.db-shm"] {
        let _ = std::fs::remove_file(paths.state.join(f));
    }
    let out = coordinator(&["restore", "--state-dir", &state, "--from", &backup.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _server = paths.serve();
    assert_eq!(hostnames(&e).await, ["before-0", "before-1", "before-2", "before-3", "before-4"]);
}
