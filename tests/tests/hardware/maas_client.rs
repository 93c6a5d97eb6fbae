//! `drover-maas` against the `fake-maas` binary over real HTTP: every client op, every error
//! class (401 wrong secret, 404, 409, 400 with field errors, transient 503 and hang), the
//! form-encoded wire format as the fake recorded it, hardware-sync fields and the token.
//!
//! The fake must be built first (`cargo test --workspace` builds it; alone:
//! `cargo build -p drover-devkit --bin fake-maas`).

#![forbid(unsafe_code)]

use std::time::Duration;

use drover_devkit::fake_maas::{FakeMaas, FakeMaasOptions};
use drover_maas::{
    ApiKey, ClientConfig, CommissionOptions, DeployOptions, ErrorClass, EventLevel, EventQuery, LinkMode, LinkSubnet, MaasClient,
    MaasError, MachineFilter, MachineUpdate, NewMachine, NewSubnet, NodeStatus, PowerParameters, PowerState, ReleaseOptions, StopMode,
    format_maas_datetime,
};
use serde_json::{Value, json};
use time::OffsetDateTime;

fn start() -> FakeMaas {
    let options = FakeMaasOptions { bin: drover_tests::workspace_binary("fake-maas"), ..FakeMaasOptions::default() };
    FakeMaas::start(&options).expect("fake-maas starts")
}

fn client_with(fake: &FakeMaas, key: &str, timeout: Duration, retries: u32) -> MaasClient {
    let key: ApiKey = key.parse().expect("key");
    let mut config = ClientConfig::new(fake.url(), key);
    config.timeout = timeout;
    config.retries = retries;
    MaasClient::new(config).expect("client")
}

fn client(fake: &FakeMaas) -> MaasClient {
    client_with(fake, fake.api_key(), Duration::from_secs(10), 0)
}

/// Calls the control API (blocking; the fake is another process, so this cannot deadlock).
fn ctl(fake: &FakeMaas, method: &str, path: &str, body: Value) -> Value {
    fake.control(method, path, Some(&body)).unwrap_or_else(|e| panic!("{method} /_fake/{path}: {e}"))
}

/// Enlists a machine through the control API (as if it had PXE-booted) and answers its id.
fn enlist(fake: &FakeMaas, body: Value) -> String {
    let m = ctl(fake, "POST", "machines", body);
    m["system_id"].as_str().expect("system_id").to_owned()
}

/// The API requests the fake recorded since the last [`clear_requests`].
fn requests(fake: &FakeMaas) -> Vec<Value> {
    fake.control("GET", "requests", None).expect("requests").as_array().cloned().unwrap_or_default()
}

fn clear_requests(fake: &FakeMaas) {
    fake.control_raw("DELETE", "requests", None).expect("clear");
}

fn advance(fake: &FakeMaas, id: &str) {
    ctl(fake, "POST", "advance", json!({ "system_id": id }));
}

fn assert_class(result: Result<impl std::fmt::Debug, MaasError>, class: ErrorClass) -> MaasError {
    let e = result.expect_err("an error");
    assert_eq!(e.class(), class, "{e}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_probe_and_request_errors() {
    let fake = start();
    let maas = client(&fake);
    let v = maas.version().await.expect("version");
    assert!(!v.version.is_empty());
    assert!(v.capabilities.iter().any(|c| c == "authenticate-api"), "{v:?}");
    let racks = maas.rack_controllers().await.expect("rack controllers");
    assert!(!racks.is_empty() && !racks[0].system_id.is_empty());

    // A wrong secret: version still answers (anonymous), the authenticated probe is refused.
    let (ck, tk, _) = {
        let k: ApiKey = fake.api_key().parse().expect("key");
        (k.consumer_key, k.token_key, k.token_secret)
    };
    let wrong = client_with(&fake, &format!("{ck}:{tk}:not-the-secret"), Duration::from_secs(10), 0);
    wrong.version().await.expect("anonymous version");
    let e = assert_class(wrong.rack_controllers().await, ErrorClass::Credentials);
    assert_eq!(e.status(), Some(401));
    assert!(!format!("{e} {e:?}").contains("not-the-secret"), "{e:?}");
    let e = assert_class(wrong.list_machines(&MachineFilter::default()).await, ErrorClass::Credentials);
    assert!(e.message().unwrap_or_default().starts_with("Authorization Error"), "{e}");

    let e = assert_class(maas.read_machine("nosuch").await, ErrorClass::Gone);
    assert_eq!(e.message(), Some("No Machine matches the given query."));
    // A base URL without MAAS's `/MAAS` prefix also meets 404s, but not MAAS's: nothing is gone.
    let misrouted =
        MaasClient::new(ClientConfig::new(fake.url().trim_end_matches("/MAAS"), fake.api_key().parse().expect("key"))).expect("client");
    let e = assert_class(misrouted.read_machine("nosuch").await, ErrorClass::Protocol);
    assert_eq!(e.status(), Some(404));
    assert_class(maas.deploy("nosuch", &DeployOptions::default()).await, ErrorClass::Gone);

    // MAAS's list takes no paging parameters and checks MACs.
    let bad = MachineFilter { extra: vec![("limit".into(), "10".into())], ..MachineFilter::default() };
    let e = assert_class(maas.list_machines(&bad).await, ErrorClass::BadRequest);
    assert_eq!(e.field_errors()["limit"], ["No such constraint."]);
    let bad_mac = MachineFilter { mac_address: vec!["zz".into()], ..MachineFilter::default() };
    let e = assert_class(maas.list_machines(&bad_mac).await, ErrorClass::BadRequest);
    assert!(e.field_errors().contains_key("mac_address"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enlist_accept_commission_and_storage_network_setup() {
    let fake = start();
    let maas = client(&fake);
    let id = enlist(
        &fake,
        json!({
            "hostname": "gpu-01", "power_address": "10.0.0.5", "status": "New",
            "interfaces": [{"name": "eno1", "mac_address": "52:54:00:00:00:01"}],
            "block_devices": [{"name": "sda", "model": "DELLBOSS VD", "serial": "B1", "size": 240057409536u64},
                              {"name": "nvme0n1", "model": "PM9A3", "serial": "N1", "size": 3840755982336u64}],
        }),
    );
    enlist(&fake, json!({ "hostname": "gpu-02", "power_address": "10.0.0.6", "status": "Ready" }));

    // Filters.
    let by_name = maas.list_machines(&MachineFilter { hostname: vec!["gpu-01".into()], ..MachineFilter::default() }).await.expect("list");
    assert_eq!(by_name.iter().map(|m| m.system_id.as_str()).collect::<Vec<_>>(), [id.as_str()]);
    let by_mac = maas
        .list_machines(&MachineFilter { mac_address: vec!["52:54:00:00:00:01".into()], ..MachineFilter::default() })
        .await
        .expect("mac");
    assert_eq!(by_mac.len(), 1);
    let new = maas.list_machines(&MachineFilter { status: vec![NodeStatus::New], ..MachineFilter::default() }).await.expect("status");
    assert!(new.iter().all(|m| m.status == NodeStatus::New) && new.iter().any(|m| m.system_id == id));
    let by_id = maas.list_machines(&MachineFilter { id: vec![id.clone()], ..MachineFilter::default() }).await.expect("id");
    assert_eq!(by_id.len(), 1);
    assert_eq!(maas.list_machines(&MachineFilter::default()).await.expect("all").len(), 2);

    // The BMC address is not a MAAS filter: the helper reads power parameters.
    let found = maas.find_by_power_address("10.0.0.5", &MachineFilter::default()).await.expect("find");
    assert_eq!(found.iter().map(|m| m.hostname.as_str()).collect::<Vec<_>>(), ["gpu-01"]);
    assert!(maas.find_by_power_address("10.9.9.9", &MachineFilter::default()).await.expect("none").is_empty());
    assert_eq!(maas.power_parameters(&id).await.expect("params").power_address(), Some("10.0.0.5"));

    // New: deploy is a 409, accept starts commissioning, commissioning again is MAAS's 400 state error.
    let e = assert_class(maas.deploy(&id, &DeployOptions::default()).await, ErrorClass::IllegalState);
    assert_eq!(e.status(), Some(409));
    assert!(e.message().unwrap_or_default().contains("'New'"), "{e}");
    let moved = maas.accept(std::slice::from_ref(&id)).await.expect("accept");
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].status, NodeStatus::Commissioning);
    let e = assert_class(maas.commission(&id, &CommissionOptions::default()).await, ErrorClass::IllegalState);
    assert_eq!(e.status(), Some(400));
    advance(&fake, &id);
    let m = maas.read_machine(&id).await.expect("read");
    assert_eq!((m.status, m.status_name.as_str(), m.owner.as_deref()), (NodeStatus::Ready, "Ready", None));

    // Release of a Ready machine is a 200 no-op.
    let m = maas.release(&id, &ReleaseOptions::default()).await.expect("release of Ready");
    assert_eq!(m.status, NodeStatus::Ready);

    // Storage.
    maas.set_storage_layout(&id, "flat").await.expect("layout");
    let disks = maas.list_block_devices(&id).await.expect("disks");
    let nvme = disks.iter().find(|d| d.name == "nvme0n1").expect("nvme");
    assert_eq!(nvme.size, 3_840_755_982_336);
    let by_serial = maas.find_block_device(&id, "N1").await.expect("find").expect("by serial");
    assert_eq!(by_serial.id, nvme.id);
    assert_eq!(maas.find_block_device(&id, "nope").await.expect("find"), None);
    maas.set_boot_disk(&id, nvme.id).await.expect("boot disk");
    assert_eq!(maas.read_machine(&id).await.expect("read").boot_disk.map(|d| d.id), Some(nvme.id));
    assert_class(maas.set_boot_disk(&id, 999_999).await, ErrorClass::Gone);

    // Network: a /31 subnet, a static link, then unlink.
    let subnet = maas
        .create_subnet(&NewSubnet { cidr: "10.77.0.0/31".into(), name: Some("p2p-01".into()), ..NewSubnet::default() })
        .await
        .expect("/31 subnet");
    assert_eq!(subnet.cidr, "10.77.0.0/31");
    assert!(maas.list_subnets().await.expect("subnets").iter().any(|s| s.id == subnet.id));
    let e = assert_class(maas.create_subnet(&NewSubnet::default()).await, ErrorClass::BadRequest);
    assert!(e.field_errors().contains_key("cidr"), "{e:?}");
    let ifaces = maas.list_interfaces(&id).await.expect("interfaces");
    let eno1 = ifaces.iter().find(|i| i.name == "eno1").expect("eno1");
    let mut link = LinkSubnet::new(LinkMode::Static, Some(&subnet.id.to_string()));
    link.ip_address = Some("10.77.0.1".into());
    let linked = maas.link_subnet(&id, eno1.id, &link).await.expect("link");
    let l = linked.links.iter().find(|l| l.ip_address.as_deref() == Some("10.77.0.1")).expect("static link");
    assert_eq!(l.mode, "static");
    let unlinked = maas.unlink_subnet(&id, eno1.id, l.id).await.expect("unlink");
    assert!(unlinked.links.iter().all(|x| x.id != l.id));

    // Commission a Ready machine with checkbox flags: sent as `true` or not at all.
    clear_requests(&fake);
    let opts = CommissionOptions { enable_ssh: true, skip_bmc_config: true, ..CommissionOptions::default() };
    assert_eq!(maas.commission(&id, &opts).await.expect("commission").status, NodeStatus::Commissioning);
    let seen = requests(&fake);
    let post = seen.iter().find(|r| r["method"] == "POST").expect("the commission POST");
    assert_eq!(post["query"], "op=commission");
    assert_eq!(post["content_type"], "application/x-www-form-urlencoded");
    assert_eq!(post["body"], "enable_ssh=true&skip_bmc_config=true");
    // Abort: Commissioning → New (the answer may still show the old status).
    maas.abort(&id, Some("changed my mind")).await.expect("abort");
    assert_eq!(maas.read_machine(&id).await.expect("read").status, NodeStatus::New);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_hw_sync_token_power_events_release() {
    let fake = start();
    let maas = client(&fake);
    let id = enlist(&fake, json!({ "hostname": "gpu-03", "power_address": "10.0.0.7", "status": "Ready" }));
    assert_eq!(maas.get_token(&id).await.expect("token"), None, "no token before deploy");

    clear_requests(&fake);
    let user_data = b"#cloud-config\nruncmd: [echo drover]\n".to_vec();
    let deploy = DeployOptions {
        user_data: Some(user_data.clone()),
        distro_series: Some("jammy".into()),
        enable_hw_sync: true,
        agent_name: Some("drover".into()),
        comment: Some("wave canary".into()),
        ..DeployOptions::default()
    };
    let m = maas.deploy(&id, &deploy).await.expect("deploy");
    assert_eq!(m.status, NodeStatus::Deploying);
    let post = requests(&fake).into_iter().find(|r| r["method"] == "POST").expect("deploy POST");
    assert_eq!(post["path"], format!("/MAAS/api/2.0/machines/{id}/"));
    assert_eq!(post["query"], "op=deploy");
    assert_eq!(post["content_type"], "application/x-www-form-urlencoded");
    assert!(post["body"].as_str().unwrap_or_default().contains("enable_hw_sync=true&agent_name=drover"), "{post}");
    let (status, stored) = fake.control_raw("GET", &format!("machines/{id}/user_data"), None).expect("user_data");
    assert_eq!((status, stored), (200, user_data), "user data arrives base64 and decodes to the bytes given");

    // The token exists from deploy on and never shows its secret.
    let token = maas.get_token(&id).await.expect("token").expect("minted at deploy");
    assert!(!token.token_secret.is_empty());
    assert!(!format!("{token:?}").contains(&token.token_secret));

    advance(&fake, &id);
    let m = maas.read_machine(&id).await.expect("read");
    assert_eq!((m.status, m.status_name.as_str()), (NodeStatus::Deployed, "Deployed"));
    assert!(m.owner.is_some());
    assert_eq!(m.distro_series, "jammy");
    assert!(m.enable_hw_sync);
    let interval = m.sync_interval.expect("sync_interval set with hw sync");
    assert!(interval > 0);

    // Hardware sync: a fresh report is healthy, one older than 1.5 intervals is not.
    let now = OffsetDateTime::now_utc();
    ctl(&fake, "POST", &format!("machines/{id}/hw_sync"), json!({ "last_sync": format_maas_datetime(now) }));
    let h = maas.read_machine(&id).await.expect("read").hw_sync();
    assert!(h.enabled && h.last_sync.is_some(), "{h:?}");
    assert!(h.is_healthy(now + Duration::from_secs(interval)), "{h:?}");
    let next = h.next_sync.expect("next_sync");
    assert_eq!(next, h.last_sync.expect("last") + Duration::from_secs(interval));
    let stale = now - Duration::from_secs(interval * 2);
    ctl(&fake, "POST", &format!("machines/{id}/hw_sync"), json!({ "last_sync": format_maas_datetime(stale) }));
    assert!(!maas.read_machine(&id).await.expect("read").hw_sync().is_healthy(now));
    ctl(&fake, "POST", &format!("machines/{id}/hw_sync"), json!({ "last_sync": null }));
    assert!(!maas.read_machine(&id).await.expect("read").hw_sync().is_healthy(now));

    // Power.
    ctl(&fake, "POST", &format!("machines/{id}/power"), json!({ "state": "off" }));
    assert_eq!(maas.query_power_state(&id).await.expect("power"), PowerState::Off);
    maas.power_on(&id, Some("bring it up")).await.expect("power on");
    ctl(&fake, "POST", &format!("machines/{id}/power"), json!({ "state": "on" }));
    assert_eq!(maas.query_power_state(&id).await.expect("power"), PowerState::On);
    maas.power_off(&id, StopMode::Soft, None).await.expect("power off");
    let off = requests(&fake).into_iter().rev().find(|r| r["query"] == "op=power_off").expect("power_off POST");
    assert_eq!(off["body"], "stop_mode=soft");

    // Events: a GET with op=query, paged by id.
    let page = maas
        .events(&EventQuery { system_ids: vec![id.clone()], level: Some(EventLevel::Debug), limit: Some(100), ..EventQuery::default() })
        .await
        .expect("events");
    assert!(page.count > 0 && page.events.len() as u64 == page.count, "{page:?}");
    assert!(page.events.iter().all(|e| e.node == id));
    assert!(page.events.iter().all(|e| e.created_at().is_some()), "created parses: {:?}", page.events[0].created);
    assert!(page.events.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    let older = maas
        .events(&EventQuery { system_ids: vec![id.clone()], level: Some(EventLevel::Debug), limit: Some(1), ..EventQuery::default() })
        .await
        .expect("one");
    assert_eq!(older.events.len(), 1);
    let q = requests(&fake).into_iter().rev().find(|r| r["path"] == "/MAAS/api/2.0/events/").expect("events GET");
    assert_eq!(q["method"], "GET");
    assert!(q["query"].as_str().unwrap_or_default().starts_with("op=query&id="), "{q}");
    let e =
        assert_class(maas.events(&EventQuery { before: Some(10), after: Some(1), ..EventQuery::default() }).await, ErrorClass::BadRequest);
    assert_eq!(e.status(), Some(400));

    // Release with a quick erase: Disk erasing, then Ready, hardware sync cleared. Flags that
    // are off are absent from the body.
    clear_requests(&fake);
    let m = maas.release(&id, &ReleaseOptions { quick_erase: true, ..ReleaseOptions::default() }).await.expect("release");
    assert_eq!(m.status, NodeStatus::DiskErasing);
    let post = requests(&fake).into_iter().find(|r| r["method"] == "POST").expect("release POST");
    assert_eq!(post["body"], "quick_erase=true");
    assert_class(maas.set_storage_layout(&id, "flat").await, ErrorClass::IllegalState);
    advance(&fake, &id);
    let m = maas.read_machine(&id).await.expect("read");
    assert_eq!(m.status, NodeStatus::Ready);
    assert!(!m.enable_hw_sync && m.last_sync.is_none() && m.owner.is_none(), "{m:?}");
    assert_class(maas.mark_fixed(&id, None).await, ErrorClass::IllegalState);

    // A failed deployment, then broken and fixed (mark_broken needs the owner: deploy first).
    maas.deploy(&id, &DeployOptions::default()).await.expect("deploy again");
    ctl(&fake, "POST", &format!("machines/{id}/fail"), json!({ "stage": "deployment" }));
    let m = maas.read_machine(&id).await.expect("read");
    assert_eq!((m.status, m.status_name.as_str()), (NodeStatus::FailedDeployment, "Failed deployment"));
    let m = maas.mark_broken(&id, Some("PSU fault")).await.expect("mark broken");
    assert_eq!(m.status, NodeStatus::Broken);
    assert_eq!(maas.read_machine(&id).await.expect("read").error_description.as_deref(), Some("PSU fault"));
    maas.mark_fixed(&id, Some("PSU swapped")).await.expect("mark fixed");
    assert_eq!(maas.read_machine(&id).await.expect("read").status, NodeStatus::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_update_delete_with_a_secret_power_password() {
    let fake = start();
    let maas = client(&fake);
    let new = NewMachine {
        hostname: Some("gpu-10".into()),
        architecture: Some("amd64/generic".into()),
        mac_addresses: vec!["52:54:00:00:10:01".into(), "52:54:00:00:10:02".into()],
        power_type: "ipmi".into(),
        power_parameters: PowerParameters::ipmi("10.0.1.10", "admin", "bmc-p4ss&word"),
        commission: Some(false),
        description: Some("rack 3".into()),
        domain: None,
    };
    clear_requests(&fake);
    let m = maas.create_machine(&new).await.expect("create");
    assert_eq!((m.hostname.as_str(), m.status), ("gpu-10", NodeStatus::New));
    assert_eq!(m.power_type.as_deref(), Some("ipmi"));
    let post = requests(&fake).into_iter().find(|r| r["method"] == "POST").expect("create POST");
    assert_eq!(post["path"], "/MAAS/api/2.0/machines/");
    assert_eq!(post["content_type"], "application/x-www-form-urlencoded");
    let body = post["body"].as_str().unwrap_or_default();
    assert!(body.contains("mac_addresses=52%3A54%3A00%3A00%3A10%3A01&mac_addresses=52%3A54%3A00%3A00%3A10%3A02"), "{body}");
    assert!(body.contains("power_parameters_power_pass=bmc-p4ss%26word"), "{body}");
    assert!(body.contains("commission=false"), "{body}");
    let params = maas.power_parameters(&m.system_id).await.expect("params");
    assert_eq!(params.get("power_pass"), Some("bmc-p4ss&word"));
    assert!(!format!("{params:?}").contains("bmc-p4ss"));
    let all = maas.power_parameters_of(&[]).await.expect("all params");
    assert_eq!(all[&m.system_id].power_address(), Some("10.0.1.10"));

    // A refused create never echoes the password.
    let e = assert_class(maas.create_machine(&new).await, ErrorClass::BadRequest);
    assert!(e.field_errors().contains_key("mac_addresses"), "{e:?}");
    assert!(!format!("{e} {e:?}").contains("bmc-p4ss"), "{e:?}");

    let update = MachineUpdate { hostname: Some("gpu-10b".into()), description: Some("rack 4".into()), ..MachineUpdate::default() };
    let m2 = maas.update_machine(&m.system_id, &update).await.expect("update");
    assert_eq!(m2.hostname, "gpu-10b");
    let put = requests(&fake).into_iter().find(|r| r["method"] == "PUT").expect("PUT");
    assert_eq!(put["body"], "hostname=gpu-10b&description=rack+4");

    // mark_broken belongs to the owner alone, admins included: a New machine has none.
    let e = assert_class(maas.mark_broken(&m.system_id, None).await, ErrorClass::Credentials);
    assert_eq!(e.status(), Some(403));

    maas.delete_machine(&m.system_id).await.expect("delete");
    assert_class(maas.read_machine(&m.system_id).await, ErrorClass::Gone);
    assert_class(maas.delete_machine(&m.system_id).await, ErrorClass::Gone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_are_transient_and_only_gets_are_retried() {
    let fake = start();
    let id = enlist(&fake, json!({ "hostname": "gpu-20", "status": "Ready" }));
    let patient = client_with(&fake, fake.api_key(), Duration::from_millis(300), 1);

    ctl(&fake, "POST", "outage", json!({ "mode": "503" }));
    clear_requests(&fake);
    let e = assert_class(patient.read_machine(&id).await, ErrorClass::Transient);
    assert_eq!(e.status(), Some(503));
    assert_eq!(e.retry_after(), Some(Duration::from_secs(10)));
    assert_eq!(requests(&fake).len(), 2, "the GET was tried twice");
    clear_requests(&fake);
    assert_class(patient.deploy(&id, &DeployOptions::default()).await, ErrorClass::Transient);
    assert_eq!(requests(&fake).len(), 1, "the POST was not retried");

    ctl(&fake, "POST", "outage", json!({ "mode": "hang" }));
    clear_requests(&fake);
    let e = assert_class(patient.read_machine(&id).await, ErrorClass::Transient);
    assert!(matches!(e, MaasError::Timeout { .. }), "{e:?}");
    assert_class(patient.release(&id, &ReleaseOptions::default()).await, ErrorClass::Transient);
    assert_eq!(requests(&fake).len(), 3, "two GET attempts, one POST");

    ctl(&fake, "POST", "outage", json!({ "mode": "none" }));
    assert_eq!(patient.read_machine(&id).await.expect("back").status, NodeStatus::Ready);
}
