//! On-demand rack maintenance driven for real: machines are OpenStack sushy-emulator systems
//! reached over HTTPS (TLS 1.2, the emulator's own certificate trusted by the credentials),
//! power shelves are Drover's fake Redfish power shelf, on a rack of 3 machines, 2 switches
//! and 2 power shelves.
//!
//! - `a_full_rack_power_sequence_runs_in_the_safe_order_and_validates`: machines off, shelves
//!   off, shelves on, machines on — each device read back from its service — then validating
//!   and ready; every step an event.
//! - `scope_activities_and_firmware_resolution_decide_what_is_driven`: a one-machine scope
//!   drives only it; an unknown firmware id sends the rack to error, an unavailable one is
//!   skipped; the firmware upgrade reaches the emulator's UpdateService, which refuses it in
//!   fake mode, and the rack fails naming the machine; the component-firmware entry point
//!   resolves the rack from its first compute tray, and sends a power shelf's straight to its
//!   PMC; the request's refusals.
//! - `a_machine_whose_bmc_refuses_power_off_fails_the_rack_before_any_shelf_goes_off`.
//! - `a_shelf_outlet_that_never_switches_fails_the_rack_naming_the_shelf`.
//! - `a_machine_that_never_reaches_its_power_state_fails_the_rack_naming_it`: sushy-emulator
//!   cannot make one (every accepted reset lands within 11 s), so machine 2's BMC is the fake's
//!   system with its stuck switch on.

use drover_tests::Harness;
use drover_tests::racks::{Bmcs, MachineBmc, Pmc, add_machine, add_shelf, call, events, rack, until};
use serde_json::{Value, json};

const M: [&str; 3] =
    ["5e1f0000-0000-4000-8000-000000000001", "5e1f0000-0000-4000-8000-000000000002", "5e1f0000-0000-4000-8000-000000000003"];

struct Rack {
    machines: Vec<String>,
    shelves: Vec<String>,
}

/// The rack: machines 0 and 1 are `bmcs`' systems, machine 2 is `third` (default: `bmcs`').
async fn build(e: &drover_tests::Endpoint, bmcs: &Bmcs, third: Option<MachineBmc<'_>>, pmcs: &[Pmc]) -> Rack {
    rack(e, "c07").await;
    let mut machines = Vec::new();
    machines.push(add_machine(e, "c07", "gpu-0", bmcs.machine(M[0])).await);
    machines.push(add_machine(e, "c07", "gpu-1", bmcs.machine(M[1])).await);
    machines.push(add_machine(e, "c07", "gpu-2", third.unwrap_or_else(|| bmcs.machine(M[2]))).await);
    for i in 0..2 {
        let body = json!({ "rack": "c07", "name": format!("c07-leaf{i}"), "endpoint": format!("https://10.9.7.{}", 21 + i),
            "credentialsPath": format!("racks/c07/leaf{i}"), "reason": "inventory" });
        assert_eq!(call(e, "POST", "/v1/switches", Some(body)).await.0, "201");
    }
    let mut shelves = Vec::new();
    for (i, p) in pmcs.iter().enumerate() {
        let id = add_shelf(e, "c07", p, &format!("c07-ps{i}"), None).await;
        until(e, &format!("/v1/power-shelves/{id}"), "ready", |c, v| c == "200" && v["state"] == "ready").await;
        shelves.push(id);
    }
    Rack { machines, shelves }
}

async fn settled(e: &drover_tests::Endpoint, state: &str) -> Value {
    until(e, "/v1/racks/c07", state, |c, v| c == "200" && v["state"] == state && v["maintenance"].is_null()).await
}

fn reasons(evs: &[Value]) -> Vec<String> {
    evs.iter().filter_map(|e| e["data"]["reason"].as_str()).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_rack_power_sequence_runs_in_the_safe_order_and_validates() {
    let h = Harness::start().await;
    let e = h.endpoint();
    let bmcs = Bmcs::start(&[(M[0], "On"), (M[1], "On"), (M[2], "On")], "");
    let pmcs = [Pmc::start(200), Pmc::start(200)];
    let r = build(&e, &bmcs, None, &pmcs).await;
    let body = json!({ "activities": [{ "activity": "power_sequence" }], "reference": "https://tracker/RACK-7" });
    let (code, v) = call(&e, "POST", "/v1/racks/c07/maintenance", Some(body.clone())).await;
    assert_eq!(code, "202", "{v}");
    assert_eq!(v["maintenance"]["initiator"], "alice (https://tracker/RACK-7)");
    // A second request while one is pending is refused whole.
    let (code, v) = call(&e, "POST", "/v1/racks/c07/maintenance", Some(body)).await;
    assert_eq!(code, "409", "{v}");
    settled(&e, "ready").await;

    let progress = reasons(&events(&e, "rack.maintenance.progress").await);
    let steps: Vec<&str> = progress.iter().filter(|r| r.starts_with("power_sequence: ")).map(String::as_str).collect();
    assert_eq!(steps.len(), 10, "{progress:?}");
    let pos = |needle: &str| steps.iter().position(|s| s.contains(needle)).unwrap_or_else(|| panic!("{needle} in {steps:?}"));
    for m in &r.machines {
        for s in &r.shelves {
            assert!(pos(&format!("machine {m} off")) < pos(&format!("power shelf {s} off")), "machines off before shelves off");
            assert!(pos(&format!("power shelf {s} on")) < pos(&format!("machine {m} on")), "shelves on before machines on");
        }
    }
    let transitions = reasons(&events(&e, "rack.transition").await);
    assert!(transitions.first().is_some_and(|r| r.starts_with("maintenance requested by alice")), "{transitions:?}");
    assert_eq!(transitions.last().map(String::as_str), Some("validation passed: maintenance complete"), "{transitions:?}");
    for uuid in M {
        assert_eq!(bmcs.power_state(uuid).await, "On", "{uuid} is back on");
    }
    for p in &pmcs {
        assert_eq!(p.outlets(), json!({ "A1": "On", "B1": "On" }));
        let seq: Vec<String> = p
            .actions()
            .iter()
            .map(|a| format!("{}:{}", a["outlet"].as_str().unwrap_or(""), a["powerState"].as_str().unwrap_or("")))
            .collect();
        assert_eq!(seq, ["A1:Off", "B1:Off", "A1:On", "B1:On"], "each outlet off once, then on once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scope_activities_and_firmware_resolution_decide_what_is_driven() {
    let h = Harness::start().await;
    let e = h.endpoint();
    let bmcs = Bmcs::start(&[(M[0], "On"), (M[1], "On"), (M[2], "On")], "");
    let pmcs = [Pmc::start(100), Pmc::start(100)];
    let r = build(&e, &bmcs, None, &pmcs).await;

    // Refusals change nothing: an unknown device, a device of another kind, bad activities.
    for bad in [
        json!({ "machineIds": [uuid::Uuid::new_v4()] }),
        json!({ "switchIds": [r.machines[0]] }),
        json!({ "machineIds": ["not-a-uuid"] }),
        json!({ "activities": [{ "activity": "reboot_everything" }] }),
    ] {
        let (code, v) = call(&e, "POST", "/v1/racks/c07/maintenance", Some(bad.clone())).await;
        assert!(code == "400" || code == "422", "{bad}: {code} {v}");
    }
    let (code, _) = h.call(Some(&h.viewer), "POST", "/v1/racks/c07/maintenance", Some("{}")).await;
    assert_eq!(code, "403", "a viewer cannot request maintenance");
    assert!(call(&e, "GET", "/v1/racks/c07", None).await.1["maintenance"].is_null());

    // One machine, power only: nothing else is touched.
    let body = json!({ "machineIds": [r.machines[1]], "activities": [{ "activity": "power_sequence" }] });
    assert_eq!(call(&e, "POST", "/v1/racks/c07/maintenance", Some(body)).await.0, "202");
    settled(&e, "ready").await;
    let steps: Vec<String> =
        reasons(&events(&e, "rack.maintenance.progress").await).into_iter().filter(|r| r.starts_with("power_sequence: ")).collect();
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(steps.iter().all(|s| s.contains(&r.machines[1])), "{steps:?}");
    assert!(pmcs.iter().all(|p| p.actions().is_empty()), "no shelf was touched");

    // Firmware: an unknown id fails the rack; an unavailable one is skipped.
    for (id, available, default) in [("fw-2.0", true, true), ("fw-3.0-beta", false, false)] {
        let body = json!({ "id": id, "hardwareType": "nvl72", "imageUri": format!("https://fw.example/{id}.bin"), "available": available,
            "default": default, "reason": "catalogue" });
        assert_eq!(call(&e, "POST", "/v1/rack-firmware", Some(body)).await.0, "201");
    }
    let fw = |v: &str| json!({ "machineIds": [r.machines[0]], "activities": [{ "activity": "firmware_upgrade", "firmwareVersion": v }] });
    assert_eq!(call(&e, "POST", "/v1/racks/c07/maintenance", Some(fw("fw-9"))).await.0, "202");
    settled(&e, "error").await;
    assert_eq!(reasons(&events(&e, "rack.transition").await).last().map(String::as_str), Some("firmware fw-9 does not exist"));
    assert_eq!(
        call(&e, "POST", "/v1/racks/c07/maintenance", Some(fw("fw-3.0-beta"))).await.0,
        "202",
        "an errored rack takes a new request"
    );
    settled(&e, "ready").await;
    let all = reasons(&events(&e, "rack.transition").await);
    assert!(all.iter().any(|r| r.contains("fw-3.0-beta is not marked available: upgrade skipped")), "{all:?}");

    // The default firmware reaches the emulator's UpdateService, which has no firmware in
    // fake mode and refuses: the rack fails naming the machine and the BMC's words.
    let (code, v) = call(&e, "POST", "/v1/components/firmware", Some(json!({ "computeTrays": [r.machines[0]] }))).await;
    assert_eq!(code, "202", "{v}");
    assert_eq!(v["maintenance"]["targets"]["activities"], json!(["firmware_upgrade"]));
    settled(&e, "error").await;
    let why = reasons(&events(&e, "rack.transition").await).pop().unwrap_or_default();
    assert!(why.starts_with("firmware_upgrade failed") && why.contains(&r.machines[0]) && why.contains("BIOS"), "{why}");
    // Power shelves go straight to their PMC, not through the rack.
    let (code, v) = call(&e, "POST", "/v1/components/firmware", Some(json!({ "powerShelves": [r.shelves[0]] }))).await;
    assert_eq!((code.as_str(), v["firmware"].as_str()), ("202", Some("fw-2.0")), "{v}");
    until(&e, "/v1/events?kind=power_shelf.firmware.completed", "applied", |c, v| {
        c == "200" && v["items"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    assert_eq!(pmcs[0].fake.control("GET", "state", None).expect("state")["firmwareVersion"], "fw-2.0");
    assert_eq!(call(&e, "GET", "/v1/racks/c07", None).await.1["state"], "error", "the rack was not involved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_machine_whose_bmc_refuses_power_off_fails_the_rack_before_any_shelf_goes_off() {
    let h = Harness::start().await;
    let e = h.endpoint();
    let bmcs = Bmcs::start(&[(M[0], "On"), (M[1], "On")], "");
    let stubborn = Bmcs::start(&[(M[2], "On")], "SUSHY_EMULATOR_DISABLE_POWER_OFF = True");
    let pmcs = [Pmc::start(100), Pmc::start(100)];
    let r = build(&e, &bmcs, Some(stubborn.machine(M[2])), &pmcs).await;
    let body = json!({ "activities": [{ "activity": "power_sequence" }] });
    assert_eq!(call(&e, "POST", "/v1/racks/c07/maintenance", Some(body)).await.0, "202");
    settled(&e, "error").await;
    let why = reasons(&events(&e, "rack.transition").await).pop().unwrap_or_default();
    assert!(why.starts_with("power_sequence failed") && why.contains(&format!("machine gpu-2 ({})", r.machines[2])), "{why}");
    assert!(pmcs.iter().all(|p| p.actions().is_empty()), "no shelf went off under a machine still on");
    assert_eq!(stubborn.power_state(M[2]).await, "On");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shelf_outlet_that_never_switches_fails_the_rack_naming_the_shelf() {
    let h = Harness::start().await;
    let e = h.endpoint();
    rack(&e, "c07").await;
    let (a, b) = (Pmc::start(100), Pmc::start(100));
    let ida = add_shelf(&e, "c07", &a, "c07-psa", None).await;
    let idb = add_shelf(&e, "c07", &b, "c07-psb", None).await;
    for id in [&ida, &idb] {
        until(&e, &format!("/v1/power-shelves/{id}"), "ready", |c, v| c == "200" && v["state"] == "ready").await;
    }
    b.fake.control("POST", "stuck", Some(&json!({ "outlet": "A1", "stuck": true }))).expect("arm");
    assert_eq!(
        call(&e, "POST", "/v1/racks/c07/maintenance", Some(json!({ "activities": [{ "activity": "power_sequence" }] }))).await.0,
        "202"
    );
    settled(&e, "error").await;
    let why = reasons(&events(&e, "rack.transition").await).pop().unwrap_or_default();
    assert!(why.contains("power shelf c07-psb") && why.contains("Outlets/A1") && why.contains("PowerState is still"), "{why}");
    assert_eq!(a.outlets(), json!({ "A1": "Off", "B1": "Off" }), "the first shelf did go off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_machine_that_never_reaches_its_power_state_fails_the_rack_naming_it() {
    // sushy-emulator lands every accepted reset within 11 s; a machine that never converges
    // is the fake BMC's system with its stuck switch on (it answers 204 and stays On).
    let h = Harness::start().await;
    let e = h.endpoint();
    let bmcs = Bmcs::start(&[(M[0], "On"), (M[1], "On")], "");
    let bmc = Pmc::start_with_systems(100, &["node-2"]);
    bmc.fake.control("POST", "stuck", Some(&json!({ "system": "node-2", "stuck": true }))).expect("arm");
    let pmcs = [Pmc::start(100)];
    let r = build(&e, &bmcs, Some(bmc.machine("node-2")), &pmcs).await;
    assert_eq!(
        call(&e, "POST", "/v1/racks/c07/maintenance", Some(json!({ "activities": [{ "activity": "power_sequence" }] }))).await.0,
        "202"
    );
    settled(&e, "error").await;
    let why = reasons(&events(&e, "rack.transition").await).pop().unwrap_or_default();
    assert!(
        why.starts_with("power_sequence failed")
            && why.contains(&format!("machine gpu-2 ({})", r.machines[2]))
            && why.contains("PowerState is still On"),
        "{why}"
    );
    let resets = bmc.fake.control("GET", "state", None).expect("state")["resets"].clone();
    assert_eq!(resets.as_array().map(Vec::len), Some(1), "one reset sent, then read until the bound: {resets}");
    assert!(pmcs[0].actions().is_empty(), "no shelf went off under a machine still on");
}
