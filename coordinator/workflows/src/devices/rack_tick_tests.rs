//! The rack controller's tick driven through whole cycles on a rack of 3 machines, 2 switches
//! and 2 power shelves: every move is a legal transition, the activities asked for are the
//! only ones run, the firmware table decides, a failed step names its device, and a cycle
//! resumes at its step.

use super::*;
use crate::devices::rack::{RackDevices, Scope, admit};

fn ids(n: u128, k: usize) -> Vec<Uuid> {
    (0..k as u128).map(|i| Uuid::from_u128(n * 100 + i)).collect()
}

fn rack() -> RackDevices {
    RackDevices { machines: ids(1, 3), switches: ids(2, 2), power_shelves: ids(3, 2) }
}

fn table() -> Vec<Firmware> {
    vec![
        Firmware { id: "fw-2.0".into(), hardware_type: "nvl72".into(), available: true, default: true },
        Firmware { id: "fw-2.1".into(), hardware_type: "nvl72".into(), available: true, default: false },
        Firmware { id: "fw-3.0-beta".into(), hardware_type: "nvl72".into(), available: false, default: false },
    ]
}

fn cx(fw: &[Firmware]) -> Context<'_> {
    Context { hardware_type: "nvl72", firmware: fw, budget: Ok(()) }
}

fn request(scope: Scope) -> RackMaintenance {
    let targets = admit(RackState::Ready, false, &scope, &rack()).expect("admitted");
    RackMaintenance {
        initiator: "ops (MAINT-1)".into(),
        requested_at: Time::from_unix(1).unwrap(),
        targets,
        phase: None,
        step: 0,
        firmware: None,
        waiting: None,
    }
}

fn activities(a: &[super::super::rack::ActivityConfig]) -> Scope {
    Scope { activities: a.to_vec(), ..Scope::default() }
}

/// Drives a rack from `ready` with `m` pending until it waits with nothing to do, every
/// device step succeeding unless `fail` names it. Returns the device steps run and the moves.
type Driven = (RackState, Option<RackMaintenance>, Vec<DeviceStep>, Vec<(RackState, String)>);

fn drive(m: RackMaintenance, fail: Option<&str>) -> Driven {
    let (mut state, mut m) = (RackState::Ready, Some(m));
    let (mut acts, mut moves) = (Vec::new(), Vec::new());
    let mut work = Work::NotStarted;
    let fw = table();
    for _ in 0..200 {
        match tick(state, m.as_ref(), &work, cx(&fw)) {
            RackStep::Wait(_) => return (state, m, acts, moves),
            RackStep::Act(s) => {
                work = match fail {
                    Some(f) if s.label() == f => Work::Failed(format!("{}: PowerState is still On after 120 s", s.label())),
                    _ => Work::Done,
                };
                acts.push(s);
            }
            RackStep::Move { to, maintenance, reason } => {
                assert!(to == state || state.successors().contains(&to), "illegal move {state} -> {to} ({reason})");
                state = to;
                m = maintenance.map(|b| *b);
                moves.push((to, reason));
                work = Work::NotStarted;
            }
        }
    }
    panic!("the cycle never settled");
}

#[test]
fn a_full_rack_cycle_runs_every_activity_in_order_then_validates() {
    let (state, m, acts, moves) = drive(request(Scope::default()), None);
    assert_eq!((state, m), (RackState::Ready, None));
    let r = rack();
    let mut want: Vec<DeviceStep> = r.machines.iter().map(|x| DeviceStep::Firmware { machine: *x, firmware: "fw-2.0".into() }).collect();
    want.extend(r.machines.iter().map(|x| DeviceStep::Power(PowerStep::MachineOff(*x))));
    want.extend(r.power_shelves.iter().map(|x| DeviceStep::Power(PowerStep::ShelfOff(*x))));
    want.extend(r.power_shelves.iter().map(|x| DeviceStep::Power(PowerStep::ShelfOn(*x))));
    want.extend(r.machines.iter().map(|x| DeviceStep::Power(PowerStep::MachineOn(*x))));
    want.push(DeviceStep::Validate);
    assert_eq!(acts, want);
    let reasons: Vec<&str> = moves.iter().map(|(_, r)| r.as_str()).collect();
    assert!(reasons[0].starts_with("maintenance requested by ops (MAINT-1)"), "{reasons:?}");
    assert!(reasons[1].contains("firmware upgrade with fw-2.0") && reasons[1].contains("no NMX backend"), "{reasons:?}");
    assert!(reasons[1].contains("switch firmware is not driven"), "{reasons:?}");
    assert_eq!(*reasons.last().unwrap(), "validation passed: maintenance complete");
}

#[test]
fn only_the_requested_activity_runs() {
    use super::super::rack::ActivityConfig as A;
    let (state, _, acts, moves) = drive(request(activities(&[A::PowerSequence {}])), None);
    assert_eq!(state, RackState::Ready);
    assert!(acts.iter().all(|a| matches!(a, DeviceStep::Power(_) | DeviceStep::Validate)), "{acts:?}");
    assert_eq!(acts.len(), 3 + 2 + 2 + 3 + 1);
    assert!(moves[1].1.starts_with("firmware upgrade not requested"), "{moves:?}");
    let (_, _, acts, _) = drive(request(activities(&[A::FirmwareUpgrade { firmware_version: Some("fw-2.1".into()) }])), None);
    assert_eq!(acts.len(), 3 + 1);
    assert!(acts.iter().take(3).all(|a| matches!(a, DeviceStep::Firmware { firmware, .. } if firmware == "fw-2.1")));
}

#[test]
fn a_partial_scope_powers_only_its_devices() {
    let r = rack();
    let scope = Scope { machine_ids: vec![r.machines[1].to_string()], ..Scope::default() };
    let (_, _, acts, _) = drive(request(scope), None);
    let power: Vec<&DeviceStep> = acts.iter().filter(|a| matches!(a, DeviceStep::Power(_))).collect();
    assert_eq!(power, [&DeviceStep::Power(PowerStep::MachineOff(r.machines[1])), &DeviceStep::Power(PowerStep::MachineOn(r.machines[1]))]);
}

#[test]
fn unknown_firmware_fails_the_rack_and_unavailable_firmware_is_skipped() {
    use super::super::rack::ActivityConfig as A;
    let (state, m, acts, moves) = drive(request(activities(&[A::FirmwareUpgrade { firmware_version: Some("fw-9".into()) }])), None);
    assert_eq!((state, m, acts), (RackState::Error, None, vec![]));
    assert_eq!(moves.last().unwrap().1, "firmware fw-9 does not exist");
    let (state, _, acts, moves) = drive(request(activities(&[A::FirmwareUpgrade { firmware_version: Some("fw-3.0-beta".into()) }])), None);
    assert_eq!((state, acts), (RackState::Ready, vec![DeviceStep::Validate]));
    assert!(moves[1].1.contains("upgrade skipped"), "{moves:?}");
}

#[test]
fn a_device_that_does_not_converge_fails_the_rack_naming_it_and_clears_the_request() {
    let r = rack();
    let stuck = DeviceStep::Power(PowerStep::MachineOff(r.machines[2])).label();
    let (state, m, acts, moves) = drive(request(Scope::default()), Some(&stuck));
    assert_eq!((state, m), (RackState::Error, None));
    assert_eq!(acts.last().unwrap().label(), stuck);
    assert!(!acts.iter().any(|a| matches!(a, DeviceStep::Power(PowerStep::ShelfOff(_)))), "no shelf goes off under a machine still on");
    let why = &moves.last().unwrap().1;
    assert!(why.starts_with("power_sequence failed") && why.contains(&r.machines[2].to_string()), "{why}");
    // An errored rack with no request waits; a new request takes it back into maintenance.
    assert!(matches!(tick(RackState::Error, None, &Work::NotStarted, cx(&table())), RackStep::Wait(_)));
    let (state, ..) = drive(request(Scope::default()), None);
    assert_eq!(state, RackState::Ready);
}

#[test]
fn a_cycle_resumes_at_its_step_after_a_restart() {
    let mut m = request(Scope::default());
    m.phase = Some(Phase::Running(Activity::PowerSequence));
    m.step = 5;
    // No work remembered (a fresh coordinator): the tick re-issues step 5, not step 0.
    let want = steps(Activity::PowerSequence, &m)[5].clone();
    assert!(matches!(want, DeviceStep::Power(PowerStep::ShelfOn(_))), "{want:?}");
    assert_eq!(tick(RackState::Maintenance, Some(&m), &Work::NotStarted, cx(&table())), RackStep::Act(want));
    // Re-planning while the step runs changes nothing.
    assert!(matches!(tick(RackState::Maintenance, Some(&m), &Work::Running, cx(&table())), RackStep::Wait(_)));
}

#[test]
fn the_stored_record_round_trips() {
    let mut m = request(Scope::default());
    m.phase = Some(Phase::Running(Activity::FirmwareUpgrade));
    m.firmware = Some("fw-2.0".into());
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(serde_json::from_value::<RackMaintenance>(v).unwrap(), m);
}

#[test]
fn a_full_budget_holds_the_request_and_says_which_once() {
    let m = request(Scope::default());
    let fw = table();
    let full = Context { budget: Err("budget rack-c07 2/2 in flight"), ..cx(&fw) };
    let RackStep::Move { to, maintenance: Some(waiting), reason } = tick(RackState::Ready, Some(&m), &Work::NotStarted, full) else {
        panic!("the wait is recorded");
    };
    assert_eq!((to, reason.as_str()), (RackState::Ready, "waits for a disruption-budget slot: budget rack-c07 2/2 in flight"));
    // Unchanged input: nothing to write.
    assert!(matches!(tick(RackState::Ready, Some(&waiting), &Work::NotStarted, full), RackStep::Wait(_)));
    // Room again: the cycle starts and the wait is forgotten.
    let RackStep::Move { to, maintenance: Some(started), .. } = tick(RackState::Ready, Some(&waiting), &Work::NotStarted, cx(&fw)) else {
        panic!("starts");
    };
    assert_eq!((to, started.waiting, started.phase), (RackState::Maintenance, None, Some(Phase::Start)));
}
