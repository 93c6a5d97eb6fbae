//! Conformance checks for racks: unique names, devices only in existing racks, a rack removed
//! only when empty, a power shelf deleted by mark (its controller removes it), hosts placed as
//! data, and the all-or-nothing power shelf maintenance request.

use std::collections::BTreeMap;

use drover_proto::states::{HostLifecycle, PowerShelfState, RackState};
use uuid::Uuid;

use super::sites::change;
use super::t;
use crate::store::{Device, DeviceKind, Rack, StoreError};

fn rack(name: &str) -> Rack {
    Rack {
        id: Uuid::new_v4(),
        name: name.into(),
        hardware_type: "gb200-nvl72".into(),
        labels: BTreeMap::from([("row".to_owned(), "c07".to_owned())]),
        state: RackState::Ready,
        maintenance: None,
        created_at: t(1),
        updated_at: t(1),
    }
}

fn device(kind: DeviceKind, rack: Uuid, name: &str) -> Device {
    Device {
        id: Uuid::new_v4(),
        kind,
        rack_id: rack,
        name: name.into(),
        endpoint: "https://10.9.7.1".into(),
        credentials_path: format!("racks/{name}"),
        shelf_state: (kind == DeviceKind::PowerShelf).then_some(PowerShelfState::Initializing),
        operation: None,
        maintenance_requested: None,
        marked_for_deletion: false,
        created_at: t(2),
        updated_at: t(2),
    }
}

/// Rack and device names are unique; a device needs an existing rack; a rack with devices or
/// hosts is not removed; a switch is deleted at once, a power shelf marked.
pub fn racks_devices_and_placement(make: super::Factory<'_>) {
    let s = make();
    let r = s.create_rack(&rack("c07"), &change("rack.created", Uuid::nil(), t(1))).expect("rack");
    assert_eq!((r.name.as_str(), r.state, r.labels.get("row").map(String::as_str)), ("c07", RackState::Ready, Some("c07")));
    assert!(matches!(s.create_rack(&rack("c07"), &change("x", Uuid::nil(), t(1))), Err(StoreError::Conflict { .. })));
    let sw = s.create_device(&device(DeviceKind::Switch, r.id, "c07-leaf1"), &change("x", r.id, t(2))).expect("switch");
    let shelf = s.create_device(&device(DeviceKind::PowerShelf, r.id, "c07-ps1"), &change("x", r.id, t(2))).expect("shelf");
    assert_eq!(shelf.shelf_state, Some(PowerShelfState::Initializing));
    assert!(matches!(
        s.create_device(&device(DeviceKind::Switch, r.id, "c07-leaf1"), &change("x", r.id, t(2))),
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        s.create_device(&device(DeviceKind::Switch, Uuid::new_v4(), "x"), &change("x", r.id, t(2))),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(s.list_devices(Some(r.id), None).expect("list").len(), 2);
    assert_eq!(s.list_devices(None, Some(DeviceKind::PowerShelf)).expect("list").len(), 1);
    let h = super::drive(&*s, &super::host(&*s, "gpu-a"), &[HostLifecycle::Enrolling, HostLifecycle::Active]);
    s.place_host(h.id, Some(r.id), &change("host.placed", r.id, t(3))).expect("place");
    assert_eq!(s.rack_hosts(r.id).expect("hosts"), vec![h.id]);
    assert!(matches!(s.place_host(h.id, Some(Uuid::new_v4()), &change("x", r.id, t(3))), Err(StoreError::NotFound { .. })));
    assert!(matches!(s.delete_rack(r.id, &change("x", r.id, t(4))), Err(StoreError::Conflict { .. })), "not empty");
    s.place_host(h.id, None, &change("x", r.id, t(4))).expect("unplace");
    assert_eq!(s.delete_device(sw.id, &change("x", r.id, t(4))).expect("switch").id, sw.id);
    assert!(s.get_device(sw.id).expect("get").is_none(), "a switch is deleted at once");
    let marked = s.delete_device(shelf.id, &change("x", r.id, t(4))).expect("shelf");
    assert!(marked.marked_for_deletion && s.get_device(shelf.id).expect("get").is_some(), "a shelf is marked for its controller");
    assert!(matches!(s.delete_rack(r.id, &change("x", r.id, t(5))), Err(StoreError::Conflict { .. })), "the marked shelf is still there");
}

/// `SetPowerShelfMaintenance` is all or nothing: an unknown id (or a switch) or a shelf marked
/// for deletion refuses the whole request and changes no shelf.
pub fn shelf_maintenance_is_all_or_nothing(make: super::Factory<'_>) {
    let s = make();
    let r = s.create_rack(&rack("c08"), &change("x", Uuid::nil(), t(1))).expect("rack");
    let a = s.create_device(&device(DeviceKind::PowerShelf, r.id, "ps-a"), &change("x", r.id, t(2))).expect("a");
    let b = s.create_device(&device(DeviceKind::PowerShelf, r.id, "ps-b"), &change("x", r.id, t(2))).expect("b");
    let sw = s.create_device(&device(DeviceKind::Switch, r.id, "leaf"), &change("x", r.id, t(2))).expect("switch");
    let req = serde_json::json!({"operation": "power_off", "initiator": "alice", "requestedAt": "2030-01-01T00:00:00Z"});
    for bad in [vec![a.id, Uuid::new_v4()], vec![a.id, sw.id]] {
        assert!(matches!(s.set_shelf_maintenance(&bad, &req, &change("x", r.id, t(3))), Err(StoreError::NotFound { .. })));
    }
    assert!(s.get_device(a.id).expect("get").expect("a").maintenance_requested.is_none(), "nothing changed");
    let set = s.set_shelf_maintenance(&[a.id, b.id], &req, &change("power_shelf.maintenance", r.id, t(3))).expect("set");
    assert!(set.iter().all(|d| d.maintenance_requested.as_ref() == Some(&req)));
    s.delete_device(b.id, &change("x", r.id, t(4))).expect("mark b");
    let e = s.set_shelf_maintenance(&[a.id, b.id], &serde_json::json!({"operation": "power_on"}), &change("x", r.id, t(5)));
    assert!(matches!(e, Err(StoreError::Conflict { .. })), "{e:?}");
    assert_eq!(s.get_device(a.id).expect("get").expect("a").maintenance_requested, Some(req), "a kept its request");
}
