//! The rack inventory over the real API (mTLS, curl): racks, switches and power shelves with
//! their refusals, viewer reads, hosts placed in racks, and `SetPowerShelfMaintenance` refused
//! whole when one shelf is unknown or marked for deletion, with the seed's initiator string.

use drover_tests::Harness;
use serde_json::{Value, json};

async fn call(
    h: &Harness,
    who: &(std::path::PathBuf, std::path::PathBuf),
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (String, Value) {
    let body = body.map(|b| b.to_string());
    let (code, text) = h.call(Some(who), method, path, body.as_deref()).await;
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn shelf_body(rack: &str, name: &str) -> Value {
    json!({ "rack": rack, "name": name, "endpoint": "https://10.9.7.21", "credentialsPath": format!("racks/{name}"), "reason": "inventory" })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racks_switches_and_shelves_are_inventoried_with_their_rules() {
    let h = Harness::start().await;
    let a = &h.admin;
    let (code, rack) = call(
        &h,
        a,
        "POST",
        "/v1/racks",
        Some(json!({ "name": "C07", "hardwareType": "gb200-nvl72", "labels": {"row": "c"}, "reason": "new rack" })),
    )
    .await;
    assert_eq!(code, "201", "{rack}");
    assert_eq!((rack["name"].as_str(), rack["state"].as_str()), (Some("c07"), Some("ready")));
    let (code, v) = call(&h, a, "POST", "/v1/racks", Some(json!({ "name": "c07", "hardwareType": "x", "reason": "again" }))).await;
    assert_eq!(code, "409", "{v}");
    let (code, v) = call(&h, &h.viewer, "POST", "/v1/racks", Some(json!({ "name": "c08", "hardwareType": "x", "reason": "viewer" }))).await;
    assert_eq!(code, "403", "a viewer reads only: {v}");

    let (code, sw) = call(
        &h,
        a,
        "POST",
        "/v1/switches",
        Some(json!({ "rack": "c07", "name": "c07-leaf1", "endpoint": "https://10.9.7.2",
        "credentialsPath": "racks/c07-leaf1", "reason": "inventory" })),
    )
    .await;
    assert_eq!(code, "201", "{sw}");
    let (code, v) = call(
        &h,
        a,
        "POST",
        "/v1/switches",
        Some(json!({ "rack": "c07", "name": "c07-leaf2", "endpoint": "http://10.9.7.3",
        "credentialsPath": "racks/x", "reason": "plain http" })),
    )
    .await;
    assert_eq!(code, "400", "a BMC is reached over https only: {v}");
    let (code, v) = call(&h, a, "POST", "/v1/power-shelves", Some(shelf_body("c99", "ps-x"))).await;
    assert_eq!(code, "404", "{v}");
    let mut bad = shelf_body("c07", "ps-bad");
    bad["credentialsPath"] = json!("../etc/shadow");
    let (code, v) = call(&h, a, "POST", "/v1/power-shelves", Some(bad)).await;
    assert_eq!(code, "400", "{v}");
    let (_, ps1) = call(&h, a, "POST", "/v1/power-shelves", Some(shelf_body("c07", "c07-ps1"))).await;
    let (code, ps2) = call(&h, a, "POST", "/v1/power-shelves", Some(shelf_body("c07", "c07-ps2"))).await;
    assert_eq!((code.as_str(), ps2["state"].as_str()), ("201", Some("initializing")), "{ps2}");
    let (id1, id2) = (ps1["id"].as_str().expect("id").to_owned(), ps2["id"].as_str().expect("id").to_owned());

    // A host placed in the rack is the rack's data.
    let (code, host) = call(&h, a, "POST", "/v1/hosts", Some(json!({ "hostname": "gpu-1", "trustSha256": h.trust.1 }))).await;
    assert_eq!(code, "201", "{host}");
    let host_id = host["hostId"].as_str().or(host["id"].as_str()).expect("host id").to_owned();
    let (code, v) = call(&h, a, "POST", &format!("/v1/hosts/{host_id}/rack"), Some(json!({ "rack": "c07", "reason": "racked" }))).await;
    assert_eq!(code, "200", "{v}");
    let (code, r) = call(&h, &h.viewer, "GET", "/v1/racks/c07", None).await;
    assert_eq!(code, "200", "{r}");
    assert_eq!((r["devices"].as_array().map(Vec::len), r["hosts"][0].as_str()), (Some(3), Some(host_id.as_str())), "{r}");
    let (code, v) = call(&h, a, "DELETE", "/v1/racks/c07?reason=decommissioned", None).await;
    assert_eq!(code, "409", "a rack with devices and hosts stays: {v}");

    // SetPowerShelfMaintenance: checked, then all or nothing.
    let path = "/v1/power-shelves/maintenance";
    let (code, v) = call(&h, a, "POST", path, Some(json!({ "powerShelfIds": [id1], "operation": "unspecified" }))).await;
    assert_eq!(code, "400", "{v}");
    let (code, v) = call(&h, a, "POST", path, Some(json!({ "powerShelfIds": [], "operation": "power_on" }))).await;
    assert_eq!(code, "400", "{v}");
    let ghost = uuid::Uuid::new_v4().to_string();
    let (code, v) = call(&h, a, "POST", path, Some(json!({ "powerShelfIds": [id1, ghost], "operation": "power_off" }))).await;
    assert_eq!(code, "404", "one unknown shelf refuses the request: {v}");
    let (_, s1) = call(&h, a, "GET", &format!("/v1/power-shelves/{id1}"), None).await;
    assert!(s1["maintenanceRequested"].is_null(), "nothing changed: {s1}");
    let (code, v) = call(
        &h,
        a,
        "POST",
        path,
        Some(json!({ "powerShelfIds": [id1, id2], "operation": "power_off", "reference": "https://tracker/MAINT-123" })),
    )
    .await;
    assert_eq!(code, "200", "{v}");
    assert_eq!(v["initiator"], "alice (https://tracker/MAINT-123)");
    assert!(v["items"].as_array().expect("items").iter().all(|d| d["maintenanceRequested"]["operation"] == "power_off"), "{v}");
    let (code, v) = call(&h, a, "DELETE", &format!("/v1/power-shelves/{id2}?reason=removed"), None).await;
    assert_eq!((code.as_str(), v["markedForDeletion"].as_bool()), ("200", Some(true)), "{v}");
    let (code, v) = call(&h, a, "POST", path, Some(json!({ "powerShelfIds": [id1, id2], "operation": "power_on" }))).await;
    assert_eq!(code, "409", "a shelf marked for deletion refuses the request: {v}");
    let (_, s1) = call(&h, a, "GET", &format!("/v1/power-shelves/{id1}"), None).await;
    assert_eq!(s1["maintenanceRequested"]["operation"], "power_off", "the earlier request stands: {s1}");
    let (code, list) = call(&h, &h.viewer, "GET", "/v1/power-shelves?rack=c07", None).await;
    assert_eq!((code.as_str(), list["items"].as_array().map(Vec::len)), ("200", Some(2)), "{list}");

    // The CLI as the seed's: `fix`, `--id` with space-separated ids, `--ref`; repeated flags.
    let out = h
        .drover_as(
            a,
            &[
                "power-shelf",
                "create",
                "c07-ps3",
                "--rack",
                "c07",
                "--endpoint",
                "https://10.9.7.23",
                "--credentials-path",
                "racks/c07-ps3",
                "--reason",
                "inventory",
                "-o",
                "json",
            ],
        )
        .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id3 = serde_json::from_slice::<Value>(&out.stdout).expect("json")["id"].as_str().expect("id").to_owned();
    let ids = format!("{id1} {id3}");
    let out = h.drover_as(a, &["power-shelf", "fix", "power-on", "--id", &ids, "--ref", "https://tracker/MAINT-9"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("power_on requested on 2 power shelf(s) by alice (https://tracker/MAINT-9)"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = h.drover_as(a, &["power-shelf", "maintenance", "power-off", "--power-shelf-id", &id1, "--power-shelf-id", &id2]).await;
    assert_eq!(out.status.code(), Some(65), "a marked shelf refuses the request: {}", String::from_utf8_lossy(&out.stderr));
    let out = h.drover_as(&h.viewer, &["rack", "get", "c07"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("c07-leaf1") && stdout.contains("hosts: 1"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Rack maintenance as a user types it.
    let ok = |out: &std::process::Output| format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let out = h
        .drover_as(
            a,
            &[
                "rack",
                "firmware",
                "create",
                "fw-2.0",
                "--hardware-type",
                "gb200-nvl72",
                "--image-uri",
                "https://fw.example/fw-2.0.bin",
                "--default",
                "--reason",
                "catalogue",
            ],
        )
        .await;
    assert!(out.status.success(), "{}", ok(&out));
    let out = h.drover_as(&h.viewer, &["rack", "firmware", "list"]).await;
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("fw-2.0"), "{}", ok(&out));
    // Power and firmware drive the machines' BMCs: a machine without one is refused up front.
    let out = h.drover_as(a, &["rack", "maintenance", "c07", "--ref", "https://tracker/RACK-1"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", ok(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without a BMC"), "{}", ok(&out));
    let out = h
        .drover_as(
            a,
            &[
                "rack",
                "maintenance",
                "c07",
                "--machine-id",
                &host_id,
                "--activity",
                "configure-nmx-cluster",
                "--ref",
                "https://tracker/RACK-1",
            ],
        )
        .await;
    assert!(out.status.success(), "{}", ok(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("maintenance requested on rack c07 by alice (https://tracker/RACK-1): 1 machine(s)"),
        "{}",
        ok(&out)
    );
    let out = h
        .drover_as(a, &["rack", "bmc", &host_id, "--endpoint", "http://10.9.8.1", "--credentials-path", "bmc/gpu-1", "--reason", "cabled"])
        .await;
    assert_eq!(out.status.code(), Some(65), "a BMC is reached over https only: {}", ok(&out));
    let out = h.drover_as(a, &["component", "firmware", "update", "--power-shelves", &id1, "--target-version", "fw-2.0"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", ok(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was started"), "{}", ok(&out));
}

/// A rack written straight to the store, as one named before names were checked could be.
fn store_rack_named(h: &Harness, name: &str) -> String {
    use drover_engine::store::{ChangeLog, NewAudit, NewEvent, Rack};
    let at = drover_engine::app::Clock::now(&*h.clock);
    let rack = Rack {
        id: uuid::Uuid::new_v4(),
        name: name.to_owned(),
        hardware_type: "gb200-nvl72".to_owned(),
        labels: Default::default(),
        state: drover_proto::states::RackState::Ready,
        maintenance: None,
        created_at: at,
        updated_at: at,
    };
    let log = ChangeLog {
        event: NewEvent {
            at,
            kind: "rack.created".into(),
            host_id: None,
            rollout_id: None,
            job_id: None,
            message: "an old rack".into(),
            data: json!({}),
        },
        audit: NewAudit {
            at,
            actor: "legacy".into(),
            role: "admin".into(),
            action: "rack.created".into(),
            target: rack.id.to_string(),
            reason: "an old rack".into(),
            prior_state: None,
            expected_state: None,
        },
    };
    h.running.app.store.create_rack(&rack, &log).expect("stored").id.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_named_with_another_racks_id_is_refused_and_deleting_by_id_deletes_that_rack() {
    let h = Harness::start().await;
    let a = &h.admin;
    let (code, rack) =
        call(&h, a, "POST", "/v1/racks", Some(json!({ "name": "zz-a", "hardwareType": "gb200-nvl72", "reason": "new" }))).await;
    assert_eq!(code, "201", "{rack}");
    let id = rack["rackId"].as_str().expect("rackId").to_owned();

    // Its id, in any form an id is read in, is refused as another rack's name.
    for name in [id.clone(), id.to_ascii_uppercase(), id.replace('-', "")] {
        let (code, v) = call(&h, a, "POST", "/v1/racks", Some(json!({ "name": name, "hardwareType": "x", "reason": "shadow" }))).await;
        assert_eq!(code, "400", "{name}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("rack name") && message.contains("names must not parse as ids, which are resolved first"), "{v}");
    }
    let (code, v) = call(
        &h,
        a,
        "POST",
        "/v1/switches",
        Some(json!({ "rack": "zz-a", "name": id, "endpoint": "https://10.9.7.2",
        "credentialsPath": "racks/leaf", "reason": "shadow" })),
    )
    .await;
    assert_eq!(code, "400", "{v}");
    assert!(v["error"]["message"].as_str().unwrap_or_default().contains("switch name"), "{v}");
    let (_, racks) = call(&h, &h.viewer, "GET", "/v1/racks", None).await;
    assert_eq!(racks["racks"].as_array().map(Vec::len), Some(1), "nothing was created: {racks}");

    // A rack already stored under that name (from before the rule) sorts first by name, where
    // the old lookup found it; every route given the id still acts on the rack with the id.
    let shadow = store_rack_named(&h, &id);
    let (code, host) = call(&h, a, "POST", "/v1/hosts", Some(json!({ "hostname": "gpu-1", "trustSha256": h.trust.1 }))).await;
    assert_eq!(code, "201", "{host}");
    let host_id = host["hostId"].as_str().expect("hostId").to_owned();
    let (code, v) = call(&h, a, "POST", &format!("/v1/hosts/{host_id}/rack"), Some(json!({ "rack": id, "reason": "racked" }))).await;
    assert_eq!((code.as_str(), v["rack"].as_str()), ("200", Some("zz-a")), "placed by id in the rack with the id: {v}");
    let (code, r) = call(&h, &h.viewer, "GET", &format!("/v1/racks/{id}"), None).await;
    assert_eq!((code.as_str(), r["name"].as_str(), r["hosts"][0].as_str()), ("200", Some("zz-a"), Some(host_id.as_str())), "{r}");
    // Maintenance by id: refused for that rack's own machine (it has no BMC); the shadow
    // rack, empty, has no machine to name.
    let (code, v) = call(&h, a, "POST", &format!("/v1/racks/{id}/maintenance"), Some(json!({}))).await;
    assert_eq!(code, "422", "{v}");
    assert!(v["error"]["message"].as_str().unwrap_or_default().contains(&host_id), "{v}");
    let (code, v) = call(&h, a, "POST", &format!("/v1/hosts/{host_id}/rack"), Some(json!({ "rack": null, "reason": "unracked" }))).await;
    assert_eq!(code, "200", "{v}");

    let (code, gone) = call(&h, a, "DELETE", &format!("/v1/racks/{id}?reason=retired"), None).await;
    assert_eq!((code.as_str(), gone["rackId"].as_str(), gone["name"].as_str()), ("200", Some(id.as_str()), Some("zz-a")), "{gone}");
    let (_, racks) = call(&h, &h.viewer, "GET", "/v1/racks", None).await;
    let left: Vec<&str> = racks["racks"].as_array().expect("racks").iter().filter_map(|r| r["rackId"].as_str()).collect();
    assert_eq!(left, vec![shadow.as_str()], "the shadow rack is left: {racks}");
    // The id no longer names a rack, and does not fall back to the rack of that name.
    let (code, v) = call(&h, &h.viewer, "GET", &format!("/v1/racks/{id}"), None).await;
    assert_eq!(code, "404", "{v}");
    let (code, v) = call(&h, &h.viewer, "GET", &format!("/v1/racks/{shadow}"), None).await;
    assert_eq!((code.as_str(), v["name"].as_str()), ("200", Some(id.as_str())), "{v}");
}
