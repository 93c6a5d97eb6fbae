//! Scenario tests of the stage decisions: each stage is status-aware, converges when its goal
//! already holds, and fails closed on what it does not expect.

use drover_maas::{BlockDevice, Machine, NodeStatus, Subnet};
use serde_json::json;

use super::*;
use crate::maasflow::discovery::{Candidate, Wanted};

fn machine(status: NodeStatus, extra: serde_json::Value) -> Machine {
    let mut v = json!({
        "system_id": "abc123", "hostname": "gpu-001", "status": status.code(),
        "status_name": format!("{status:?}"), "interface_set": [], "blockdevice_set": [],
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, val) in e {
            o.insert(k.clone(), val.clone());
        }
    }
    serde_json::from_value(v).expect("machine")
}

fn disk(id: i64, name: &str, model: &str) -> BlockDevice {
    serde_json::from_value(json!({ "id": id, "name": name, "model": model, "size": 480_000_000_000u64, "type": "physical" })).expect("disk")
}

fn iface(id: i64, name: &str, links: serde_json::Value) -> serde_json::Value {
    json!({ "id": id, "name": name, "type": "physical", "mac_address": "52:54:00:00:00:01", "links": links })
}

fn link(id: i64, mode: &str, subnet: Option<(i64, &str)>, ip: Option<&str>) -> serde_json::Value {
    json!({ "id": id, "mode": mode, "subnet": subnet.map(|(id, cidr)| json!({"id": id, "name": cidr, "cidr": cidr})), "ip_address": ip })
}

#[test]
fn discovery_claims_by_hostname_and_an_adoption_must_exist() {
    let c = Candidate {
        system_id: "abc123".into(),
        hostname: "gpu-001".into(),
        power_address: Some("10.0.0.1".into()),
        macs: vec![],
        is_new: false,
        appeared_this_run: false,
    };
    let wanted = Wanted { hostname: "gpu-001", ipmi_ip: "10.0.0.1", pxe_mac: None };
    assert!(
        matches!(create_or_find(std::slice::from_ref(&c), &wanted, false, false, None), StageStep::Claim { ref system_id, .. } if system_id == "abc123")
    );
    assert_eq!(create_or_find(&[], &wanted, false, false, None), StageStep::Act(MaasAct::Create));
    assert!(matches!(create_or_find(&[], &wanted, true, false, None), StageStep::Wait(_)));
    assert!(matches!(
        create_or_find(&[], &wanted, false, false, Some("zzz999")),
        StageStep::Fail { class: MaasFailureClass::StateAmbiguity, .. }
    ));
}

#[test]
fn commissioning_is_status_aware() {
    assert_eq!(commission(&machine(NodeStatus::New, json!({})), "gpu-001"), StageStep::Act(MaasAct::Accept));
    assert!(matches!(commission(&machine(NodeStatus::Ready, json!({})), "gpu-001"), StageStep::Done { skipped: true, .. }));
    assert_eq!(
        commission(&machine(NodeStatus::Ready, json!({"hostname": "maas-picked"})), "gpu-001"),
        StageStep::Act(MaasAct::SetHostname)
    );
    assert!(matches!(commission(&machine(NodeStatus::Commissioning, json!({})), "gpu-001"), StageStep::Done { skipped: false, .. }));
    assert_eq!(commission(&machine(NodeStatus::FailedCommissioning, json!({})), "gpu-001"), StageStep::Act(MaasAct::Commission));
    // MAAS refuses to commission from Failed testing or Missing (400): never asked.
    for s in [NodeStatus::FailedTesting, NodeStatus::Missing] {
        assert!(
            matches!(commission(&machine(s, json!({})), "gpu-001"), StageStep::Fail { class: MaasFailureClass::StateAmbiguity, .. }),
            "{s:?}"
        );
    }
    assert!(matches!(
        commission(&machine(NodeStatus::Deployed, json!({})), "gpu-001"),
        StageStep::Fail { class: MaasFailureClass::StateAmbiguity, .. }
    ));
}

#[test]
fn a_failed_commissioning_is_retried_within_the_bound() {
    let m = machine(NodeStatus::FailedCommissioning, json!({"status_message": "BMC unreachable"}));
    assert_eq!(wait_ready(&m, 1, 3), StageStep::Act(MaasAct::Commission));
    let tested = machine(NodeStatus::FailedTesting, json!({"status_message": "smartctl failed"}));
    assert!(matches!(wait_ready(&tested, 1, 3), StageStep::Fail { class: MaasFailureClass::BmcPowerFailure, .. }), "not recommissioned");
    match wait_ready(&m, 3, 3) {
        StageStep::Fail { class, message } => {
            assert_eq!(class, MaasFailureClass::BmcPowerFailure);
            assert!(message.contains("BMC unreachable"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn storage_picks_the_boss_disk_then_the_layout() {
    let m = machine(NodeStatus::Ready, json!({}));
    let disks = [disk(1, "sda", "SAMSUNG MZ7L3960"), disk(2, "sdb", "Dell BOSS-N1")];
    assert_eq!(configure_storage(&m, &disks, "boss", false), StageStep::Act(MaasAct::SetBootDisk { id: 2, name: "sdb".into() }));
    let m = machine(NodeStatus::Ready, json!({"boot_disk": {"id": 2, "name": "sdb", "size": 1}}));
    assert_eq!(configure_storage(&m, &disks, "boss", false), StageStep::Act(MaasAct::SetFlatLayout));
    assert!(matches!(configure_storage(&m, &disks, "boss", true), StageStep::Done { .. }));
}

#[test]
fn no_boss_disk_is_a_hardware_mismatch() {
    let m = machine(NodeStatus::Ready, json!({}));
    let disks = [disk(1, "sda", "SAMSUNG MZ7L3960"), disk(3, "nvme0n1", "Micron 7450")];
    assert!(matches!(configure_storage(&m, &disks, "boss", false), StageStep::Fail { class: MaasFailureClass::HardwareMismatch, .. }));
}

#[test]
fn roce_creates_the_subnet_then_links_and_converges() {
    let wants = [RoceWant { interface: "enp62s0np0".into(), ipv4_cidr: "172.30.9.61/31".into() }];
    let m = machine(NodeStatus::Ready, json!({"interface_set": [iface(7, "enp62s0np0", json!([]))]}));
    assert_eq!(roce_phase2(&m, &wants, &[], true), StageStep::Act(MaasAct::CreateSubnet { cidr: "172.30.9.60/31".into() }));
    let subnet: Subnet = serde_json::from_value(json!({"id": 9, "name": "r", "cidr": "172.30.9.60/31"})).expect("subnet");
    assert_eq!(
        roce_phase2(&m, &wants, std::slice::from_ref(&subnet), true),
        StageStep::Act(MaasAct::LinkStatic {
            interface_id: 7,
            interface: "enp62s0np0".into(),
            cidr: "172.30.9.60/31".into(),
            ip: "172.30.9.61".into()
        })
    );
    let linked = machine(
        NodeStatus::Ready,
        json!({"interface_set": [iface(7, "enp62s0np0", json!([link(1, "static", Some((9, "172.30.9.60/31")), Some("172.30.9.61"))]))]}),
    );
    assert!(matches!(roce_phase2(&linked, &wants, &[subnet], true), StageStep::Done { skipped: false, .. }));
    assert!(matches!(roce_phase2(&m, &[], &[], true), StageStep::Done { skipped: true, .. }));
    let missing = machine(NodeStatus::Ready, json!({}));
    assert!(matches!(roce_phase2(&missing, &wants, &[], true), StageStep::Fail { class: MaasFailureClass::HardwareMismatch, .. }));
}

#[test]
fn networks_of_addresses() {
    assert_eq!(network_of("172.30.9.61/31").as_deref(), Some("172.30.9.60/31"));
    assert_eq!(network_of("10.1.2.3/24").as_deref(), Some("10.1.2.0/24"));
    assert_eq!(network_of("10.1.2.3/33"), None);
    assert_eq!(network_of("nope"), None);
}

#[test]
fn pxe_interface_is_relinked_auto_and_needs_a_subnet() {
    let m = machine(
        NodeStatus::Ready,
        json!({"interface_set": [iface(3, "eno1", json!([link(11, "link_up", Some((4, "10.0.0.0/24")), None)]))]}),
    );
    assert_eq!(pxe_interface_auto(&m, Some("eno1")), StageStep::Act(MaasAct::Unlink { interface_id: 3, link_id: 11 }));
    let bare = machine(NodeStatus::Ready, json!({"interface_set": [iface(3, "eno1", json!([]))]}));
    assert!(matches!(pxe_interface_auto(&bare, Some("eno1")), StageStep::Fail { class: MaasFailureClass::HardwareMismatch, .. }));
    let ok =
        machine(NodeStatus::Ready, json!({"interface_set": [iface(3, "eno1", json!([link(12, "auto", Some((4, "10.0.0.0/24")), None)]))]}));
    assert!(matches!(pxe_interface_auto(&ok, Some("eno1")), StageStep::Done { .. }));
    assert!(matches!(pxe_interface_auto(&ok, Some("eno9")), StageStep::Fail { class: MaasFailureClass::HardwareMismatch, .. }));
}

#[test]
fn deploy_is_never_blind() {
    assert_eq!(deploy(&machine(NodeStatus::Ready, json!({})), false), StageStep::Act(MaasAct::Deploy));
    assert!(matches!(deploy(&machine(NodeStatus::Deploying, json!({})), false), StageStep::Done { skipped: true, .. }));
    assert!(matches!(deploy(&machine(NodeStatus::Deployed, json!({})), false), StageStep::Done { skipped: true, .. }));
    assert!(matches!(deploy(&machine(NodeStatus::Releasing, json!({})), true), StageStep::Wait(_)));
    assert!(matches!(
        deploy(&machine(NodeStatus::Broken, json!({})), false),
        StageStep::Fail { class: MaasFailureClass::StateAmbiguity, .. }
    ));
    // A decided redeploy releases the failed deployment first; without one it is left for
    // WaitDeployed to classify.
    use crate::maasflow::onboard::EraseMode;
    let failed = machine(NodeStatus::FailedDeployment, json!({}));
    assert_eq!(deploy(&failed, true), StageStep::Act(MaasAct::Release { erase: EraseMode::None, force: false }));
    assert!(matches!(deploy(&failed, false), StageStep::Done { skipped: true, .. }));
}

#[test]
fn a_datasource_failure_is_redeployed_within_the_bound() {
    let failed = machine(NodeStatus::FailedDeployment, json!({"status_message": "cloud-init: no datasource found"}));
    assert!(matches!(wait_deployed(&failed, &[], 0, true, 1), StageStep::RetryDeploy { .. }));
    assert!(matches!(wait_deployed(&failed, &[], 1, true, 1), StageStep::Fail { class: MaasFailureClass::DeployCloudInitFailure, .. }));
    assert!(matches!(wait_deployed(&failed, &[], 0, false, 1), StageStep::Fail { .. }));
    let generic = machine(NodeStatus::FailedDeployment, json!({"status_message": "Failed to power on"}));
    assert!(matches!(wait_deployed(&generic, &[], 0, true, 1), StageStep::Fail { class: MaasFailureClass::DeployCloudInitFailure, .. }));
}

#[test]
fn hardware_sync_waits_for_the_token_then_seeds_it_then_health() {
    let m = machine(NodeStatus::Deployed, json!({"enable_hw_sync": true}));
    assert!(matches!(ensure_hw_sync(&m, false, true, &Reseed::NotIssued, 1, 3), StageStep::Wait(_)));
    assert_eq!(ensure_hw_sync(&m, true, true, &Reseed::NotIssued, 1, 3), StageStep::IssueReseed);
    assert!(matches!(ensure_hw_sync(&m, true, true, &Reseed::Live, 1, 3), StageStep::Wait(_)));
    assert!(matches!(ensure_hw_sync(&m, true, true, &Reseed::Succeeded, 1, 3), StageStep::Done { skipped: false, .. }));
    assert!(matches!(ensure_hw_sync(&m, true, true, &Reseed::Failed("no bus".into()), 1, 3), StageStep::Retry(_)));
    assert!(matches!(
        ensure_hw_sync(&m, true, true, &Reseed::Failed("no bus".into()), 3, 3),
        StageStep::Fail { class: MaasFailureClass::HardwareSyncFailure, .. }
    ));
    let off = machine(NodeStatus::Deployed, json!({"enable_hw_sync": false}));
    assert!(matches!(
        ensure_hw_sync(&off, true, true, &Reseed::NotIssued, 1, 3),
        StageStep::Fail { class: MaasFailureClass::HardwareSyncFailure, .. }
    ));
    assert!(matches!(ensure_hw_sync(&off, true, false, &Reseed::NotIssued, 1, 3), StageStep::Done { skipped: true, .. }));
    assert!(matches!(wait_hw_sync_healthy(&m, false, true), StageStep::Wait(_)));
    assert!(matches!(wait_hw_sync_healthy(&m, true, true), StageStep::Done { .. }));
}

#[test]
fn enrollment_waits_for_an_active_host_on_a_deployed_machine() {
    let m = machine(NodeStatus::Deployed, json!({}));
    assert!(matches!(wait_enrollment(&m, false, "bootstrap_issued"), StageStep::Wait(_)));
    assert!(matches!(wait_enrollment(&m, true, "active"), StageStep::Done { .. }));
    let released = machine(NodeStatus::Ready, json!({}));
    assert!(matches!(wait_enrollment(&released, true, "active"), StageStep::Fail { class: MaasFailureClass::StateAmbiguity, .. }));
}

#[test]
fn release_erases_and_falls_back_once_when_allowed() {
    use crate::maasflow::onboard::EraseMode;
    let deployed = machine(NodeStatus::Deployed, json!({}));
    assert_eq!(release_machine(&deployed, EraseMode::Quick), StageStep::Act(MaasAct::Release { erase: EraseMode::Quick, force: false }));
    assert!(matches!(release_machine(&machine(NodeStatus::Ready, json!({})), EraseMode::Quick), StageStep::Done { skipped: true, .. }));
    let failed = machine(NodeStatus::FailedDiskErasing, json!({"status_message": "wipe failed"}));
    assert_eq!(wait_released(&failed, true, false), StageStep::Act(MaasAct::Release { erase: EraseMode::None, force: true }));
    assert!(matches!(wait_released(&failed, true, true), StageStep::Fail { class: MaasFailureClass::StateAmbiguity, .. }));
    assert!(matches!(wait_released(&failed, false, false), StageStep::Fail { class: MaasFailureClass::StateAmbiguity, .. }));
    assert!(matches!(wait_released(&machine(NodeStatus::DiskErasing, json!({})), true, false), StageStep::Wait(_)));
    assert!(matches!(wait_released(&machine(NodeStatus::Ready, json!({})), true, false), StageStep::Done { .. }));
}

#[test]
fn power_off_asks_once_then_waits_and_the_record_is_kept_by_default() {
    let on = machine(NodeStatus::Ready, json!({"power_state": "on"}));
    assert_eq!(power_off(&on, false), StageStep::Act(MaasAct::PowerOff));
    assert!(matches!(power_off(&on, true), StageStep::Wait(_)));
    assert!(matches!(power_off(&machine(NodeStatus::Ready, json!({"power_state": "off"})), true), StageStep::Done { .. }));
    assert!(matches!(remove_maas_record(Some(&on), false), StageStep::Done { skipped: true, .. }));
    assert_eq!(remove_maas_record(Some(&on), true), StageStep::Act(MaasAct::DeleteMachine));
    assert!(matches!(remove_maas_record(None, true), StageStep::Done { skipped: false, .. }));
}
