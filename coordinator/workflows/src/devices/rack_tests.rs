//! Rack maintenance's rules on a rack of 3 machines, 2 switches and 2 power shelves: scope and
//! activity filtering, preconditions, firmware resolution, activity order, power order.

use super::*;

fn ids(n: u128, k: usize) -> Vec<Uuid> {
    (0..k as u128).map(|i| Uuid::from_u128(n * 100 + i)).collect()
}

fn rack() -> RackDevices {
    RackDevices { machines: ids(1, 3), switches: ids(2, 2), power_shelves: ids(3, 2) }
}

fn s(v: &[Uuid]) -> Vec<String> {
    v.iter().map(Uuid::to_string).collect()
}

#[test]
fn an_empty_scope_is_the_full_rack_with_every_activity() {
    let t = admit(RackState::Ready, false, &Scope::default(), &rack()).expect("admitted");
    let r = rack();
    assert_eq!((t.machines, t.switches, t.power_shelves), (r.machines, r.switches, r.power_shelves));
    assert_eq!(t.activities, Activity::ALL.to_vec());
    assert_eq!(t.firmware_version, None);
}

#[test]
fn listed_devices_and_activities_are_all_that_is_worked_on() {
    let r = rack();
    let scope = Scope {
        machine_ids: s(&r.machines[..1]),
        switch_ids: s(&r.switches[1..]),
        power_shelf_ids: vec![],
        activities: vec![ActivityConfig::PowerSequence {}, ActivityConfig::FirmwareUpgrade { firmware_version: Some("fw-v2.1".into()) }],
    };
    let t = admit(RackState::Error, false, &scope, &r).expect("admitted from error too");
    assert_eq!(
        (t.machines, t.switches, t.power_shelves.len()),
        (vec![r.machines[0]], vec![r.switches[1]], 0),
        "mixed scope: shelves skipped"
    );
    assert_eq!(t.activities, vec![Activity::FirmwareUpgrade, Activity::PowerSequence], "run in the cycle's order");
    assert_eq!(t.firmware_version.as_deref(), Some("fw-v2.1"));
}

#[test]
fn requests_are_refused_outside_ready_or_error_while_pending_or_with_bad_ids() {
    let r = rack();
    for state in [RackState::Discovering, RackState::Maintenance, RackState::Validating] {
        assert_eq!(admit(state, false, &Scope::default(), &r), Err(RackRequestError::WrongState { state }));
    }
    assert_eq!(admit(RackState::Ready, true, &Scope::default(), &r), Err(RackRequestError::AlreadyPending));
    let bad = Scope { machine_ids: vec!["machine-001".into()], ..Scope::default() };
    assert!(matches!(admit(RackState::Ready, false, &bad, &r), Err(RackRequestError::BadId { kind: "machine", .. })));
    let elsewhere = Scope { switch_ids: vec![Uuid::from_u128(999).to_string()], ..Scope::default() };
    assert!(matches!(admit(RackState::Ready, false, &elsewhere, &r), Err(RackRequestError::NotInRack { kind: "switch", .. })));
    let twice = Scope { activities: vec![ActivityConfig::PowerSequence {}, ActivityConfig::PowerSequence {}], ..Scope::default() };
    assert!(matches!(admit(RackState::Ready, false, &twice, &r), Err(RackRequestError::DuplicateActivity { .. })));
}

#[test]
fn firmware_resolves_as_the_seeds_table_says() {
    let table = vec![
        Firmware { id: "fw-default".into(), hardware_type: "gb200".into(), available: true, default: true },
        Firmware { id: "fw-v2.1".into(), hardware_type: "gb200".into(), available: true, default: false },
        Firmware { id: "fw-beta".into(), hardware_type: "gb200".into(), available: false, default: false },
    ];
    assert_eq!(resolve_firmware(None, "gb200", &table), FirmwareChoice::Use("fw-default".into()));
    assert_eq!(resolve_firmware(Some("fw-v2.1"), "gb200", &table), FirmwareChoice::Use("fw-v2.1".into()));
    assert!(matches!(resolve_firmware(Some("fw-nope"), "gb200", &table), FirmwareChoice::Fail(_)), "unknown id: the rack goes to error");
    assert!(matches!(resolve_firmware(Some("fw-beta"), "gb200", &table), FirmwareChoice::Skip(_)), "not available: skipped");
    assert!(matches!(resolve_firmware(None, "h100", &table), FirmwareChoice::Fail(_)));
}

#[test]
fn the_cycle_enters_at_the_firmware_upgrade_and_skips_what_was_not_asked() {
    let only_power = [Activity::PowerSequence];
    assert_eq!(next_activity(&only_power, None), Some(Activity::PowerSequence));
    assert_eq!(next_activity(&only_power, Some(Activity::PowerSequence)), None, "then validating");
    let all = Activity::ALL;
    assert_eq!(next_activity(&all, None), Some(Activity::FirmwareUpgrade));
    assert_eq!(next_activity(&all, Some(Activity::FirmwareUpgrade)), Some(Activity::ConfigureNmxCluster));
    assert_eq!(
        next_activity(&[Activity::FirmwareUpgrade, Activity::PowerSequence], Some(Activity::FirmwareUpgrade)),
        Some(Activity::PowerSequence)
    );
}

#[test]
fn machines_go_off_before_shelves_and_shelves_come_on_before_machines() {
    let t = admit(RackState::Ready, false, &Scope::default(), &rack()).expect("admitted");
    let seq = power_sequence(&t);
    let pos = |f: &dyn Fn(&PowerStep) -> bool| seq.iter().position(f).expect("present");
    let rpos = |f: &dyn Fn(&PowerStep) -> bool| seq.iter().rposition(f).expect("present");
    assert!(rpos(&|s| matches!(s, PowerStep::MachineOff(_))) < pos(&|s| matches!(s, PowerStep::ShelfOff(_))));
    assert!(rpos(&|s| matches!(s, PowerStep::ShelfOn(_))) < pos(&|s| matches!(s, PowerStep::MachineOn(_))));
    assert_eq!(seq.len(), 2 * (3 + 2));
}

#[test]
fn rack_transitions_follow_the_seed() {
    use RackState::*;
    assert!(Ready.can_transition_to(Maintenance) && Error.can_transition_to(Maintenance));
    assert!(Maintenance.can_transition_to(Validating) && Validating.can_transition_to(Ready));
    assert!(Maintenance.can_transition_to(Error));
    assert!(Maintenance.transition(Ready).is_err(), "a cycle ends through validating");
    assert!(Error.transition(Ready).is_err(), "an errored rack needs a new request");
}
