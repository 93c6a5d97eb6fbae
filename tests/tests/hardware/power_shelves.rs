//! Power shelves driven for real: a coordinator whose shelf controller reaches Drover's fake
//! Redfish power shelf (`fake-shelf`, after the DMTF power-shelf mockup) over HTTPS with HTTP
//! Basic authentication, the shelf's own certificate trusted through the credentials' `caPem`.
//!
//! - `a_shelf_is_brought_up_powered_off_and_on_then_deleted`: initializing → fetching_data →
//!   configuring → ready with the PMC's data; `SetPowerShelfMaintenance` power_off and power_on
//!   switch every outlet (read back from the fake), each transition an event with its reason
//!   and the initiator; a marked shelf goes through deleting and is gone.
//! - `an_outlet_that_never_switches_sends_the_shelf_to_error_naming_it`: the fake's stuck
//!   outlet accepts PowerControl but never changes; the operation fails after the bounded wait
//!   and the shelf is in error, the event naming the outlet, the request cleared.
//! - `wrong_credentials_keep_the_shelf_fetching_and_no_secret_is_shown`.
//! - `shelf_firmware_goes_straight_to_the_pmc_and_a_failed_update_is_reported`: the
//!   component-firmware entry point sends `UpdateService.SimpleUpdate` to the PMC (202, task
//!   monitor followed to the end), the outcome an event naming the shelf.

use std::time::{Duration, Instant};

use drover_devkit::fake_shelf::DEFAULT_PASSWORD;
use drover_tests::racks::{Pmc, add_shelf, call, events, rack, until};
use drover_tests::{Endpoint, Harness};
use serde_json::{Value, json};

async fn shelf(e: &Endpoint, p: &Pmc, name: &str, password: Option<&str>) -> String {
    rack(e, "c07").await;
    add_shelf(e, "c07", p, name, password).await
}

async fn state_is(e: &Endpoint, id: &str, state: &str) -> Value {
    until(e, &format!("/v1/power-shelves/{id}"), state, |code, v| code == "200" && v["state"] == state).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shelf_is_brought_up_powered_off_and_on_then_deleted() {
    let h = Harness::start().await;
    let e = h.endpoint();
    let p = Pmc::start(300);
    let id = shelf(&e, &p, "c07-ps1", None).await;
    let ready = state_is(&e, &id, "ready").await;
    assert_eq!(
        (ready["facts"]["equipmentType"].as_str(), ready["facts"]["serialNumber"].as_str()),
        (Some("PowerShelf"), Some("SN-4711")),
        "{ready}"
    );
    assert_eq!(ready["facts"]["outlets"].as_array().map(Vec::len), Some(2), "{ready}");
    let moves: Vec<String> =
        events(&e, "power_shelf.transition").await.iter().map(|e| format!("{}>{}", e["data"]["from"], e["data"]["to"])).collect();
    assert_eq!(moves, ["\"initializing\">\"fetching_data\"", "\"fetching_data\">\"configuring\"", "\"configuring\">\"ready\""]);

    // A second shelf by the same name is refused before its credentials are written: the
    // first shelf's secret (same path) is untouched, as the power-off below shows.
    let dup = json!({ "rack": "c07", "name": "c07-ps1", "endpoint": p.fake.url(), "credentialsPath": "racks/c07/c07-ps1",
        "credentials": { "username": "intruder", "password": "overwritten" }, "reason": "typo" });
    assert_eq!(call(&e, "POST", "/v1/power-shelves", Some(dup)).await.0, "409");
    let req = json!({ "powerShelfIds": [id], "operation": "power_off", "reference": "https://tracker/MAINT-123" });
    let (code, v) = call(&e, "POST", "/v1/power-shelves/maintenance", Some(req)).await;
    assert_eq!(code, "200", "{v}");
    until(&e, &format!("/v1/power-shelves/{id}"), "in maintenance and back", |code, v| {
        code == "200" && v["state"] == "ready" && v["maintenanceRequested"].is_null()
    })
    .await;
    assert_eq!(p.outlets(), json!({ "A1": "Off", "B1": "Off" }), "every outlet is off at the PMC");
    let last: Vec<Value> = events(&e, "power_shelf.transition").await;
    let reasons: Vec<&str> = last.iter().filter_map(|e| e["data"]["reason"].as_str()).collect();
    assert!(reasons.iter().any(|r| r.contains("maintenance requested: power_off by alice (https://tracker/MAINT-123)")), "{reasons:?}");
    assert!(reasons.contains(&"BMC operation complete: power_off"), "{reasons:?}");

    let (code, v) =
        call(&e, "POST", "/v1/power-shelves/maintenance", Some(json!({ "powerShelfIds": [id], "operation": "power_on" }))).await;
    assert_eq!(code, "200", "{v}");
    until(&e, &format!("/v1/power-shelves/{id}"), "powered on", |code, v| {
        code == "200" && v["state"] == "ready" && v["maintenanceRequested"].is_null()
    })
    .await;
    assert_eq!(p.outlets(), json!({ "A1": "On", "B1": "On" }));
    let actions = p.actions();
    assert_eq!(actions.len(), 4, "each outlet switched once per operation, nothing resent: {actions:?}");

    let (code, v) = call(&e, "DELETE", &format!("/v1/power-shelves/{id}?reason=decommissioned"), None).await;
    assert_eq!(code, "200", "{v}");
    until(&e, &format!("/v1/power-shelves/{id}"), "gone", |code, _| code == "404").await;
    let deleted = events(&e, "power_shelf.deleted").await;
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(events(&e, "power_shelf.transition").await.iter().any(|e| e["data"]["to"] == "deleting"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outlet_that_never_switches_sends_the_shelf_to_error_naming_it() {
    let h = Harness::start().await;
    let e = h.endpoint();
    let p = Pmc::start(200);
    let id = shelf(&e, &p, "c07-ps2", None).await;
    state_is(&e, &id, "ready").await;
    p.fake.control("POST", "stuck", Some(&json!({ "outlet": "B1", "stuck": true }))).expect("arm");
    let (code, v) =
        call(&e, "POST", "/v1/power-shelves/maintenance", Some(json!({ "powerShelfIds": [id], "operation": "power_off" }))).await;
    assert_eq!(code, "200", "{v}");
    let err = state_is(&e, &id, "error").await;
    assert!(err["maintenanceRequested"].is_null(), "the failed request is cleared: {err}");
    let failed = events(&e, "power_shelf.transition").await.into_iter().find(|e| e["data"]["to"] == "error").expect("error event");
    let why = failed["data"]["reason"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("BMC operation failed: power_off") && why.contains("Outlets/B1") && why.contains("PowerState is still"),
        "{why}"
    );
    assert_eq!(p.outlets()["A1"], "Off", "the healthy outlet did switch");
    // An errored shelf takes no new maintenance until an operator deletes it (the seed's rule).
    let (code, _) =
        call(&e, "POST", "/v1/power-shelves/maintenance", Some(json!({ "powerShelfIds": [id], "operation": "power_on" }))).await;
    assert_eq!(code, "200");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(call(&e, "GET", &format!("/v1/power-shelves/{id}"), None).await.1["state"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_keep_the_shelf_fetching_and_no_secret_is_shown() {
    let h = Harness::start().await;
    let e = h.endpoint();
    let p = Pmc::start(100);
    let id = shelf(&e, &p, "c07-ps3", Some("not-the-pmc-password")).await;
    let v = state_is(&e, &id, "fetching_data").await;
    // The fetch is refused (401) and asked again each tick; the shelf stays where it is.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let (_, v) = call(&e, "GET", &format!("/v1/power-shelves/{id}"), None).await;
        assert_eq!(v["state"], "fetching_data", "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!v.to_string().contains("not-the-pmc-password"));
    let all = call(&e, "GET", "/v1/events?limit=500", None).await.1.to_string();
    assert!(!all.contains("not-the-pmc-password") && !all.contains(DEFAULT_PASSWORD), "no password in any event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shelf_firmware_goes_straight_to_the_pmc_and_a_failed_update_is_reported() {
    let h = Harness::start().await;
    let e = h.endpoint();
    let p = Pmc::start(100);
    let id = shelf(&e, &p, "c07-ps4", None).await;
    state_is(&e, &id, "ready").await;
    let body = json!({ "id": "ps-fw-2.1", "hardwareType": "nvl72", "imageUri": "https://fw.example/ps-fw-2.1.bin", "reason": "catalogue" });
    assert_eq!(call(&e, "POST", "/v1/rack-firmware", Some(body)).await.0, "201");
    let update = json!({ "powerShelves": [id], "targetVersion": "ps-fw-2.1", "reference": "https://tracker/FW-1" });
    let (code, v) = call(&e, "POST", "/v1/components/firmware", Some(update.clone())).await;
    assert_eq!(code, "202", "{v}");
    until(&e, "/v1/events?kind=power_shelf.firmware.completed", "applied", |c, v| {
        c == "200" && v["items"].as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    assert_eq!(p.fake.control("GET", "state", None).expect("state")["firmwareVersion"], "ps-fw-2.1");
    // The PMC fails the next one: the event names the shelf and carries the PMC's words.
    p.fake.control("POST", "update-fail", Some(&json!({ "fail": true, "message": "image signature invalid" }))).expect("arm");
    assert_eq!(call(&e, "POST", "/v1/components/firmware", Some(update)).await.0, "202");
    let failed = until(&e, "/v1/events?kind=power_shelf.firmware.failed", "reported", |c, v| {
        c == "200" && v["items"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    let msg = failed["items"][0]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("power shelf c07-ps4") && msg.contains("image signature invalid"), "{msg}");
    // Unknown firmware: nothing is started.
    let (code, v) = call(&e, "POST", "/v1/components/firmware", Some(json!({ "powerShelves": [id], "targetVersion": "ps-fw-9" }))).await;
    assert_eq!(code, "422", "{v}");
    assert_eq!(p.fake.control("GET", "state", None).expect("state")["updates"].as_array().map(Vec::len), Some(2));
}
