//! MAAS onboarding end to end: a real coordinator, the fake MAAS process booting the rendered
//! user data into sandbox roots (so real `drover-agent` processes enroll over mTLS), a private
//! D-Bus with fake-systemd for the agents' `node.hw_sync_reseed`.
//!
//! - `a_batch_of_ten_onboards_eight_and_stops_two_for_operators`: ten enlisted machines; one
//!   has no BOSS disk (→ `hardware_mismatch`), one is ambiguous (its hostname and its BMC
//!   address point at different machines → `state_ambiguity`), one fails its first
//!   deployment with a datasource error and is redeployed once. Eight end `completed` with an
//!   active host whose MAAS hardware sync is healthy; two stop in
//!   `failed_manual_intervention` with the right class. Then the ambiguity is fixed in MAAS
//!   and the onboarding rerun: it converges, and no machine that had finished was deployed
//!   again (the MAAS request log counts every state-changing call).
//!
//! Needs `dbus-daemon` and `curl` (CI installs them).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drover_tests::Harness;
use drover_tests::maas::{API_KEY, DEPLOY_PASS, Env, POWER_PASS, WAIT, call, enlist, state_changes, wait_settled};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_of_ten_onboards_eight_and_stops_two_for_operators() {
    let env = Env::start().await;
    let (h, maas) = (&env.h, &env.maas);
    // Ten nodes, enlisted (PXE-booted into MAAS as New) with their BMC addresses.
    let mut ids = BTreeMap::new();
    for i in 0..10 {
        let host = format!("gpu-{i:02}");
        let bmc = format!("10.9.0.{}", 10 + i);
        let disks = (i == 3).then(|| json!([{ "name": "nvme0n1", "model": "Micron 7450" }, { "name": "nvme1n1", "model": "Micron 7450" }]));
        if i == 7 {
            // Ambiguous: a machine named gpu-07 and another one with gpu-07's BMC address.
            ids.insert(host.clone(), enlist(maas, &host, "10.9.9.99", None));
            enlist(maas, "decoy", &bmc, None);
            continue;
        }
        ids.insert(host.clone(), enlist(maas, &host, &bmc, disks));
    }
    // gpu-05's first deployment fails like a missing datasource.
    maas.control(
        "POST",
        &format!("machines/{}/fail", ids["gpu-05"]),
        Some(&json!({ "stage": "deployment", "message": "cloud-init: no datasource found" })),
    )
    .expect("arm failure");

    let nodes: Vec<Value> = (0..10).map(|i| json!({ "hostname": format!("gpu-{i:02}"), "ipmiIp": format!("10.9.0.{}", 10 + i) })).collect();
    let (code, v) =
        call(h, "POST", "/v1/maas/onboardings/batch", Some(json!({ "site": "dc1", "profile": "default", "nodes": nodes }))).await;
    assert_eq!(code, "201", "{v}");
    let batch = v["batchId"].as_str().expect("batch").to_owned();

    let rows = wait_settled(h, &batch, maas).await;
    let by_host: BTreeMap<String, Value> =
        rows.iter().map(|o| (o["hostname"].as_str().unwrap_or_default().to_owned(), o.clone())).collect();
    for (host, o) in &by_host {
        match host.as_str() {
            "gpu-03" => {
                assert_eq!(o["state"], "failed_manual_intervention", "{o:#}");
                assert_eq!(o["failureClass"], "hardware_mismatch", "{o:#}");
                assert_eq!(o["stage"], "configure_storage");
                assert!(o["recommendedAction"].is_string());
            }
            "gpu-07" => {
                assert_eq!(o["state"], "failed_manual_intervention", "{o:#}");
                assert_eq!(o["failureClass"], "state_ambiguity", "{o:#}");
                assert_eq!(o["stage"], "create_or_find");
            }
            _ => {
                assert_eq!(o["state"], "completed", "{host}: {o:#}");
                let host_id = o["hostId"].as_str().expect("host id");
                let (code, host_json) = call(h, "GET", &format!("/v1/hosts/{host_id}"), None).await;
                assert_eq!(code, "200");
                assert_eq!(host_json["state"], "active", "{host_json}");
            }
        }
    }
    // The datasource failure was redeployed once, with a compensation event.
    let ds = &by_host["gpu-05"];
    let events = ds["events"].as_array().expect("events");
    assert!(events.iter().any(|e| e["status"] == "compensated" && e["stage"] == "wait_deployed"), "{ds:#}");
    let calls = state_changes(maas);
    assert_eq!(calls[&ids["gpu-05"]].iter().filter(|c| *c == "deploy").count(), 2, "{calls:#?}");
    // Everything else was deployed exactly once; nothing touched the failed ones past their stage.
    for (host, id) in &ids {
        let deploys = calls.get(id).map_or(0, |c| c.iter().filter(|c| *c == "deploy").count());
        let want = match host.as_str() {
            "gpu-05" => 2,
            "gpu-03" | "gpu-07" => 0,
            _ => 1,
        };
        assert_eq!(deploys, want, "{host}: {calls:#?}");
    }
    // Domain events, and no secret in any event.
    let mut all = Vec::new();
    let mut after = 0i64;
    loop {
        let (code, page) = call(h, "GET", &format!("/v1/events?limit=1000&after={after}"), None).await;
        assert_eq!(code, "200", "{page}");
        all.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next"].as_i64() {
            Some(n) => after = n,
            None => break,
        }
    }
    let count = |kind: &str| all.iter().filter(|e| e["kind"] == kind).count();
    assert_eq!(count("node.onboarding.started"), 10);
    assert_eq!(count("node.onboarding.completed"), 8);
    assert_eq!(count("node.onboarding.manual_intervention_required"), 2);
    assert!(count("onboarding.stage") >= 8 * 14, "every stage of every node has its events");
    let text = serde_json::to_string(&all).expect("json");
    for secret in [DEPLOY_PASS, POWER_PASS, "onboarding-token-secret"] {
        assert!(!text.contains(secret), "an event holds a secret");
    }

    // Fix the ambiguity in MAAS (the decoy goes), then rerun: it converges; the others'
    // state-changing calls do not repeat.
    let before = state_changes(maas);
    let client = drover_maas::MaasClient::new(drover_maas::ClientConfig::new(maas.url(), API_KEY.parse().expect("key"))).expect("client");
    let machines = client.list_machines(&drover_maas::MachineFilter::default()).await.expect("machines");
    let decoy = machines.iter().find(|m| m.hostname == "decoy").expect("decoy listed");
    client.delete_machine(&decoy.system_id).await.expect("delete the decoy");
    let id7 = by_host["gpu-07"]["onboardingId"].as_str().expect("id").to_owned();
    let (code, v) = call(h, "POST", &format!("/v1/maas/onboardings/{id7}/rerun"), Some(json!({ "reason": "decoy removed" }))).await;
    assert_eq!(code, "200", "{v}");
    // gpu-07's machine also has the wrong BMC address: its hostname now matches alone.
    let rows = wait_settled(h, &batch, maas).await;
    let o7 = rows.iter().find(|o| o["hostname"] == "gpu-07").expect("gpu-07");
    assert_eq!(o7["state"], "completed", "{o7:#}");
    let after = state_changes(maas);
    for (host, id) in &ids {
        if host != "gpu-07" {
            assert_eq!(before.get(id), after.get(id), "{host}'s MAAS calls changed after another node's rerun");
        }
    }
    // A refused action names the states it is allowed from and writes nothing.
    let (code, v) = call(h, "POST", &format!("/v1/maas/onboardings/{id7}/retry_stage"), Some(json!({ "reason": "again" }))).await;
    assert_eq!(code, "409", "{v}");
}

/// Waits (bounded) until the job is completed; panics with the job and its MAAS child.
async fn wait_job(h: &Harness, job_id: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let (code, job) = call(h, "GET", &format!("/v1/jobs/{job_id}"), None).await;
        assert_eq!(code, "200", "{job}");
        match job["state"].as_str() {
            Some("completed") => return job,
            Some("failed_retryable" | "failed_manual_intervention" | "cancelled") => panic!("job {job_id} stopped: {job:#}"),
            _ => {}
        }
        if Instant::now() > deadline {
            let child = match job["childJobId"].as_str() {
                Some(c) => call(h, "GET", &format!("/v1/maas/onboardings/{c}"), None).await.1,
                None => Value::Null,
            };
            panic!("job {job_id} did not complete: {job:#}\nchild: {child:#}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reimage_keeps_the_host_and_re_enrolls_and_a_full_decommission_releases_it_in_maas() {
    let env = Env::start().await;
    let (h, maas) = (&env.h, &env.maas);
    let a = enlist(maas, "gpu-a", "10.9.1.10", None);
    let b = enlist(maas, "gpu-b", "10.9.1.11", None);
    let nodes = json!([{ "hostname": "gpu-a", "ipmiIp": "10.9.1.10" }, { "hostname": "gpu-b", "ipmiIp": "10.9.1.11" }]);
    let (code, v) =
        call(h, "POST", "/v1/maas/onboardings/batch", Some(json!({ "site": "dc1", "profile": "default", "nodes": nodes }))).await;
    assert_eq!(code, "201", "{v}");
    let rows = wait_settled(h, v["batchId"].as_str().expect("batch"), maas).await;
    assert!(rows.iter().all(|o| o["state"] == "completed"), "{rows:#?}");
    let host_of = |name: &str| rows.iter().find(|o| o["hostname"] == name).and_then(|o| o["hostId"].as_str()).expect("host").to_owned();
    let (host_a, host_b) = (host_of("gpu-a"), host_of("gpu-b"));
    let certs_before = h.running.app.store.list_certs(Some(host_a.parse().expect("uuid"))).expect("certs");

    // A reimage: the same host id, a fresh OS through MAAS, the agent enrolled again.
    let (code, job) = call(
        h,
        "POST",
        &format!("/v1/hosts/{host_a}/decommission"),
        Some(json!({ "mode": "reimage", "erase": "quick", "reason": "OS drift" })),
    )
    .await;
    assert_eq!(code, "201", "{job}");
    assert_eq!(job["kind"], "reimage");
    let done = wait_job(h, job["jobId"].as_str().expect("job id")).await;
    let stages: Vec<&str> = done["stages"].as_array().expect("stages").iter().filter_map(Value::as_str).collect();
    assert_eq!(stages, ["cordon", "drain", "revoke_users", "maas_workflow", "uncordon"]);
    let child = done["childJobId"].as_str().expect("child").to_owned();
    let (_, c) = call(h, "GET", &format!("/v1/maas/onboardings/{child}"), None).await;
    assert_eq!((c["onboarding"]["workflow"].as_str(), c["onboarding"]["state"].as_str()), (Some("reimage"), Some("completed")), "{c:#}");
    let (_, host) = call(h, "GET", &format!("/v1/hosts/{host_a}"), None).await;
    assert_eq!((host["state"].as_str(), host["schedulable"].as_bool()), (Some("active"), Some(true)), "{host}");
    let (_, listed) = call(h, "GET", "/v1/maas/onboardings?workflow=reimage&host=gpu-a", None).await;
    assert_eq!(listed["onboardings"].as_array().map(Vec::len), Some(1), "{listed}");
    let (_, listed) = call(h, "GET", "/v1/maas/onboardings?host=gpu-a", None).await;
    assert_eq!(listed["onboardings"][0]["workflow"], "onboard", "the default lists onboardings only: {listed}");
    // The binding keeps what MAAS last reported.
    let binding = h.running.app.store.get_maas_binding(host_a.parse().expect("uuid")).expect("read").expect("bound");
    assert_eq!(binding.system_id, a);
    assert_eq!(binding.observed.as_ref().map(|o| o.status.as_str()), Some("Deployed"), "{binding:?}");
    // The old certificate was revoked; a new one was issued to the fresh OS.
    let certs_after = h.running.app.store.list_certs(Some(host_a.parse().expect("uuid"))).expect("certs");
    assert!(certs_after.len() > certs_before.len(), "a new certificate");
    assert!(
        certs_before.iter().all(|old| certs_after.iter().any(|c| c.cert.serial == old.cert.serial && c.revoked.is_some())),
        "old revoked"
    );
    // MAAS saw one release with a quick erase and a second deploy.
    let calls = state_changes(maas);
    assert_eq!(calls[&a].iter().filter(|c| *c == "deploy").count(), 2, "{calls:#?}");
    assert_eq!(calls[&a].iter().filter(|c| *c == "release").count(), 1, "{calls:#?}");
    let log = maas.control("GET", "requests", None).expect("requests");
    let release = log
        .as_array()
        .expect("log")
        .iter()
        .find(|r| r["query"].as_str().is_some_and(|q| q.contains("op=release")) && r["path"].as_str().is_some_and(|p| p.contains(&a)))
        .expect("release request")
        .clone();
    let body = release["body"].as_str().unwrap_or_default();
    assert!(body.contains("erase=true") && body.contains("quick_erase=true"), "{release}");

    // A full decommission of B: the agent uninstalls itself, MAAS releases (erasing) and
    // powers the machine off, the record is removed as asked, the host is deleted.
    let (code, job) = call(
        h,
        "POST",
        &format!("/v1/hosts/{host_b}/decommission"),
        Some(json!({ "mode": "full", "erase": "quick", "removeMaasRecord": true, "reason": "hardware returned" })),
    )
    .await;
    assert_eq!(code, "201", "{job}");
    let done = wait_job(h, job["jobId"].as_str().expect("job id")).await;
    assert!(done["stages"].as_array().expect("stages").iter().any(|s| s == "maas_workflow"));
    let (_, host) = call(h, "GET", &format!("/v1/hosts/{host_b}"), None).await;
    assert_eq!(host["state"], "deleted", "{host}");
    let client = drover_maas::MaasClient::new(drover_maas::ClientConfig::new(maas.url(), API_KEY.parse().expect("key"))).expect("client");
    let gone = client.read_machine(&b).await.expect_err("removed from MAAS");
    assert_eq!(gone.class(), drover_maas::ErrorClass::Gone);
    assert!(h.running.app.store.get_maas_binding(host_b.parse().expect("uuid")).expect("binding").is_none());
    // Domain events: each decommission job started and completed once; the MAAS halves add none.
    let (_, ev) = call(h, "GET", "/v1/events?limit=1000&kind=node.decommission.completed", None).await;
    assert_eq!(ev["items"].as_array().map(Vec::len), Some(2), "{ev}");
    let (_, ev) = call(h, "GET", "/v1/events?limit=1000&kind=node.decommission.started", None).await;
    assert_eq!(ev["items"].as_array().map(Vec::len), Some(2), "{ev}");
    // A reimage of a host MAAS does not know is refused.
    let (code, v) = call(h, "POST", &format!("/v1/hosts/{host_b}/decommission"), Some(json!({ "mode": "reimage", "reason": "r" }))).await;
    assert!(code == "409" || code == "404", "{code} {v}");
}
