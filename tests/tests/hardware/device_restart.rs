//! The device controllers survive a coordinator killed mid-work (SIGKILL, a real
//! `drover-coordinator serve` process on its state dir): nothing about device work in flight
//! is kept in memory only that matters, so the restarted process picks up where the store
//! says the devices are.
//!
//! - `a_shelf_killed_mid_maintenance_finishes_it_after_the_restart`: the shelf is in
//!   `maintenance` (power_off) when the coordinator dies; the new process powers the outlets
//!   off (re-issuing an idempotent operation) and the shelf ends `ready`.
//! - `a_rack_killed_mid_power_sequence_resumes_at_its_step`: the rack dies after some steps
//!   of its power sequence are committed; the restarted process goes on from the step it was
//!   on — a finished step is not repeated (each shelf's outlets go off once and on once) — and
//!   the rack validates and is `ready`.

use drover_tests::procs::fixed_port_site;
use drover_tests::racks::{DEVICES_SECTION, Pmc, add_shelf, call, rack, until};
use serde_json::json;

fn switches(p: &Pmc) -> Vec<String> {
    p.actions().iter().map(|a| format!("{}:{}", a["outlet"].as_str().unwrap_or(""), a["powerState"].as_str().unwrap_or(""))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shelf_killed_mid_maintenance_finishes_it_after_the_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (paths, e) = fixed_port_site(dir.path(), DEVICES_SECTION);
    let mut server = paths.serve();
    // Slow outlets: the operation is still running when the process dies.
    let p = Pmc::start(4000);
    rack(&e, "c07").await;
    let id = add_shelf(&e, "c07", &p, "c07-ps1", None).await;
    let path = format!("/v1/power-shelves/{id}");
    until(&e, &path, "ready", |c, v| c == "200" && v["state"] == "ready").await;
    let (code, v) =
        call(&e, "POST", "/v1/power-shelves/maintenance", Some(json!({ "powerShelfIds": [id], "operation": "power_off" }))).await;
    assert_eq!(code, "200", "{v}");
    until(&e, &path, "in maintenance", |c, v| c == "200" && v["state"] == "maintenance").await;
    server.child.kill().expect("SIGKILL");
    let _ = server.child.wait();
    assert_ne!(p.outlets(), json!({ "A1": "Off", "B1": "Off" }), "killed before the outlets were off");
    let _server = paths.serve();
    until(&e, &path, "ready again", |c, v| c == "200" && v["state"] == "ready" && v["maintenanceRequested"].is_null()).await;
    assert_eq!(p.outlets(), json!({ "A1": "Off", "B1": "Off" }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_killed_mid_power_sequence_resumes_at_its_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (paths, e) = fixed_port_site(dir.path(), DEVICES_SECTION);
    let mut server = paths.serve();
    let (a, b) = (Pmc::start(1500), Pmc::start(1500));
    rack(&e, "c07").await;
    for (p, name) in [(&a, "c07-psa"), (&b, "c07-psb")] {
        let id = add_shelf(&e, "c07", p, name, None).await;
        until(&e, &format!("/v1/power-shelves/{id}"), "ready", |c, v| c == "200" && v["state"] == "ready").await;
    }
    let (code, v) = call(&e, "POST", "/v1/racks/c07/maintenance", Some(json!({ "activities": [{ "activity": "power_sequence" }] }))).await;
    assert_eq!(code, "202", "{v}");
    // Both shelves off (two steps committed), the third step running: kill.
    let at_kill = until(&e, "/v1/racks/c07", "two steps in", |c, v| c == "200" && v["maintenance"]["step"].as_u64() >= Some(2)).await;
    server.child.kill().expect("SIGKILL");
    let _ = server.child.wait();
    assert_eq!(at_kill["state"], "maintenance", "{at_kill}");
    let _server = paths.serve();
    until(&e, "/v1/racks/c07", "ready", |c, v| c == "200" && v["state"] == "ready" && v["maintenance"].is_null()).await;
    for p in [&a, &b] {
        assert_eq!(p.outlets(), json!({ "A1": "On", "B1": "On" }));
        let seq = switches(p);
        assert_eq!(seq.iter().filter(|s| s.ends_with(":Off")).count(), 2, "a finished step is not repeated: {seq:?}");
        assert_eq!(seq.last().map(String::as_str).map(|s| s.ends_with(":On")), Some(true), "{seq:?}");
    }
}
