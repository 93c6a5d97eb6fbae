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
        facts: None,
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

fn ev(kind: &str, at: i64) -> crate::store::NewEvent {
    change(kind, Uuid::nil(), t(at)).event
}

/// A shelf controller step applies only from the state it was planned from; it clears the
/// request when asked and keeps fetched facts; the final delete removes the record.
pub fn shelf_steps_are_compare_and_set(make: super::Factory<'_>) {
    use crate::store::ShelfStep;
    let s = make();
    let r = s.create_rack(&rack("c08"), &change("rack.created", Uuid::nil(), t(1))).expect("rack");
    let shelf = s.create_device(&device(DeviceKind::PowerShelf, r.id, "c08-ps1"), &change("x", r.id, t(2))).expect("shelf");
    let step = |from, to, facts: Option<serde_json::Value>, clear| ShelfStep {
        id: shelf.id,
        from,
        to,
        operation: None,
        clear_request: clear,
        facts,
    };
    use PowerShelfState as P;
    assert!(s.shelf_step(&step(P::Initializing, Some(P::FetchingData), None, false), &ev("power_shelf.transition", 3)).unwrap());
    // Planned from a state it has left: nothing is written.
    assert!(!s.shelf_step(&step(P::Initializing, Some(P::FetchingData), None, false), &ev("power_shelf.transition", 3)).unwrap());
    let facts = serde_json::json!({"model": "PS-9"});
    assert!(s.shelf_step(&step(P::FetchingData, Some(P::Configuring), Some(facts.clone()), false), &ev("x", 4)).unwrap());
    assert!(s.shelf_step(&step(P::Configuring, Some(P::Ready), None, false), &ev("x", 5)).unwrap());
    let req = serde_json::json!({"operation": "power_off", "initiator": "ops", "requestedAt": "2026-11-26T10:00:00Z"});
    s.set_shelf_maintenance(&[shelf.id], &req, &change("x", r.id, t(6))).expect("request");
    let mut m = step(P::Ready, Some(P::Maintenance), None, false);
    m.operation = Some("power_off".into());
    assert!(s.shelf_step(&m, &ev("x", 7)).unwrap());
    let d = s.get_device(shelf.id).unwrap().unwrap();
    assert_eq!(
        (d.shelf_state, d.operation.as_deref(), d.maintenance_requested.as_ref()),
        (Some(P::Maintenance), Some("power_off"), Some(&req))
    );
    assert_eq!(d.facts.as_ref(), Some(&facts), "facts survive later steps");
    assert!(s.shelf_step(&step(P::Maintenance, Some(P::Ready), None, true), &ev("x", 8)).unwrap());
    let d = s.get_device(shelf.id).unwrap().unwrap();
    assert_eq!((d.operation, d.maintenance_requested), (None, None));
    // The final delete only from deleting.
    assert!(s.shelf_step(&step(P::Ready, None, None, false), &ev("x", 9)).is_err());
    assert!(s.shelf_step(&step(P::Ready, Some(P::Deleting), None, false), &ev("x", 9)).unwrap());
    assert!(s.shelf_step(&step(P::Deleting, None, None, false), &ev("power_shelf.deleted", 10)).unwrap());
    assert!(s.get_device(shelf.id).unwrap().is_none());
}

/// A rack maintenance request is taken only on a ready or errored rack with none pending; a
/// rack step is compare-and-set on state and maintenance; host BMCs and firmware records.
pub fn rack_maintenance_bmcs_and_firmware(make: super::Factory<'_>) {
    use crate::store::{FirmwareRecord, HostBmc};
    let s = make();
    let r = s.create_rack(&rack("c09"), &change("rack.created", Uuid::nil(), t(1))).expect("rack");
    let m = serde_json::json!({"request": {"initiator": "ops"}});
    let r2 = s.request_rack_maintenance(r.id, &m, &change("rack.maintenance.requested", r.id, t(2))).expect("request");
    assert_eq!(r2.maintenance.as_ref(), Some(&m));
    assert!(matches!(s.request_rack_maintenance(r.id, &m, &change("x", r.id, t(2))), Err(StoreError::Conflict { .. })));
    assert!(matches!(s.request_rack_maintenance(Uuid::new_v4(), &m, &change("x", r.id, t(2))), Err(StoreError::NotFound { .. })));
    assert!(s.rack_step(&r2, RackState::Maintenance, Some(&m), &ev("rack.transition", 3)).unwrap());
    // Planned from the rack as it was: refused.
    assert!(!s.rack_step(&r2, RackState::Error, None, &ev("rack.transition", 3)).unwrap());
    let now = s.get_rack(r.id).unwrap().unwrap();
    assert!(matches!(s.request_rack_maintenance(r.id, &m, &change("x", r.id, t(4))), Err(StoreError::Conflict { .. })));
    assert!(s.rack_step(&now, RackState::Error, None, &ev("rack.transition", 4)).unwrap());
    assert!(s.request_rack_maintenance(r.id, &m, &change("x", r.id, t(5))).is_ok(), "an errored rack takes a new request");

    let h = super::host(&*s, "gpu-b");
    let bmc = HostBmc { host_id: h.id, endpoint: "https://10.9.8.1".into(), credentials_path: "bmc/gpu-b".into() };
    s.set_host_bmc(h.id, Some(&bmc), &change("host.bmc", h.id, t(6))).expect("bmc");
    assert_eq!(s.host_bmcs(&[h.id, Uuid::new_v4()]).unwrap(), vec![bmc]);
    assert!(matches!(s.set_host_bmc(Uuid::new_v4(), None, &change("x", h.id, t(6))), Err(StoreError::NotFound { .. })));
    s.set_host_bmc(h.id, None, &change("host.bmc", h.id, t(7))).expect("remove");
    assert!(s.host_bmcs(&[h.id]).unwrap().is_empty());

    let fw = |id: &str, default| FirmwareRecord {
        id: id.into(),
        hardware_type: "gb200-nvl72".into(),
        image_uri: format!("https://fw.example/{id}.bin"),
        available: true,
        default,
        created_at: t(8),
    };
    s.create_firmware(&fw("fw-1", true), &change("x", Uuid::nil(), t(8))).expect("fw");
    assert!(matches!(s.create_firmware(&fw("fw-1", false), &change("x", Uuid::nil(), t(8))), Err(StoreError::Conflict { .. })));
    assert!(matches!(s.create_firmware(&fw("fw-2", true), &change("x", Uuid::nil(), t(8))), Err(StoreError::Conflict { .. })));
    s.create_firmware(&fw("fw-2", false), &change("x", Uuid::nil(), t(8))).expect("fw-2");
    assert_eq!(s.list_firmware().unwrap().iter().map(|f| f.id.as_str()).collect::<Vec<_>>(), ["fw-1", "fw-2"]);
}

/// A rack in a maintenance cycle holds its scoped machines in the plan snapshot (counted
/// against budgets, never dispatched), and releases them when the cycle ends.
pub fn rack_maintenance_holds_its_machines(make: super::Factory<'_>) {
    let s = make();
    let r = s.create_rack(&rack("c10"), &change("rack.created", Uuid::nil(), t(1))).expect("rack");
    let a = super::host(&*s, "gpu-c");
    let b = super::host(&*s, "gpu-d");
    let m = serde_json::json!({"initiator": "ops", "requestedAt": "2026-11-26T10:00:00Z",
        "targets": {"machines": [a.id], "switches": [], "powerShelves": [], "activities": ["power_sequence"]}});
    let pending = s.request_rack_maintenance(r.id, &m, &change("x", r.id, t(2))).expect("request");
    assert!(s.plan_snapshot().unwrap().held.is_empty(), "a request not yet taken up holds nothing");
    assert!(s.rack_step(&pending, RackState::Maintenance, Some(&m), &ev("rack.transition", 3)).unwrap());
    let held = s.plan_snapshot().unwrap().held;
    assert_eq!(held.keys().copied().collect::<Vec<_>>(), vec![a.id]);
    assert_eq!(held[&a.id], "rack c10 maintenance");
    assert!(!held.contains_key(&b.id));
    let now = s.get_rack(r.id).unwrap().unwrap();
    assert!(s.rack_step(&now, RackState::Validating, Some(&m), &ev("rack.transition", 4)).unwrap());
    assert!(s.plan_snapshot().unwrap().held.contains_key(&a.id));
    let now = s.get_rack(r.id).unwrap().unwrap();
    assert!(s.rack_step(&now, RackState::Ready, None, &ev("rack.transition", 5)).unwrap());
    assert!(s.plan_snapshot().unwrap().held.is_empty());
}
