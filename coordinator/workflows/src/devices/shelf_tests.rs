//! The power shelf's controller driven through every legal transition of its seed, the
//! maintenance request's rules, and the initiator table.

use super::*;

fn t(s: i64) -> Time {
    Time::from_unix(1_900_000_000 + s).expect("time")
}

fn shelf(state: S) -> ShelfView {
    ShelfView { state, operation: None, marked_for_deletion: false, requested: None }
}

fn request(op: PowerOp) -> MaintenanceRequest {
    MaintenanceRequest { operation: op, initiator: "alice (https://tracker/MAINT-1)".into(), requested_at: t(0) }
}

/// Applies a step to the view as the controller loop persists it.
fn apply(v: &ShelfView, step: &Step) -> ShelfView {
    let mut next = v.clone();
    if let Step::Move { to, operation, clear_request, .. } = step {
        assert!(v.state.can_transition_to(*to), "{} -> {to} is not in the seed's table", v.state);
        next.state = *to;
        next.operation = *operation;
        if *clear_request {
            next.requested = None;
        }
    }
    next
}

#[test]
fn a_new_shelf_walks_to_ready_one_state_per_tick() {
    let mut v = shelf(S::Initializing);
    let mut seen = vec![v.state];
    // Each device step: asked for, running, done.
    for _ in 0..20 {
        let mut step = tick(&v, &Work::NotStarted);
        if let Step::Act(act) = step {
            assert!(matches!(act, DeviceAct::FetchData | DeviceAct::Configure), "{act:?}");
            assert_eq!(
                tick(&v, &Work::Running),
                Step::Wait(if act == DeviceAct::FetchData { "data fetch in progress" } else { "configuration in progress" }.into())
            );
            assert_eq!(tick(&v, &Work::Failed("timeout".into())), Step::Act(act), "a failed fetch or configuration is asked again");
            step = tick(&v, &Work::Done);
        }
        v = apply(&v, &step);
        if seen.last() != Some(&v.state) {
            seen.push(v.state);
        }
        if v.state == S::Ready {
            break;
        }
    }
    assert_eq!(seen, vec![S::Initializing, S::FetchingData, S::Configuring, S::Ready]);
    assert_eq!(tick(&v, &Work::NotStarted), Step::Wait("ready".into()), "a quiet ready shelf does nothing");
}

#[test]
fn maintenance_drives_the_power_operation_and_returns_to_ready() {
    for op in [PowerOp::PowerOn, PowerOp::PowerOff] {
        let mut v = shelf(S::Ready);
        v.requested = Some(request(op));
        let step = tick(&v, &Work::NotStarted);
        assert!(
            matches!(&step, Step::Move { to: S::Maintenance, operation: Some(o), clear_request: false, reason } if *o == op && reason.contains("alice")),
            "{step:?}"
        );
        v = apply(&v, &step);
        // The hardware is driven for real: the operation is asked for, then awaited.
        assert_eq!(tick(&v, &Work::NotStarted), Step::Act(DeviceAct::Power(op)));
        assert!(matches!(tick(&v, &Work::Running), Step::Wait(_)));
        let done = tick(&v, &Work::Done);
        assert!(matches!(&done, Step::Move { to: S::Ready, clear_request: true, .. }), "{done:?}");
        v = apply(&v, &done);
        assert_eq!((v.state, v.requested.clone(), v.operation), (S::Ready, None, None), "the controller clears the request");
    }
}

#[test]
fn a_failed_operation_ends_in_error_which_only_deletion_leaves() {
    let mut v = shelf(S::Ready);
    v.requested = Some(request(PowerOp::PowerOff));
    v = apply(&v, &tick(&v, &Work::NotStarted));
    let failed = tick(&v, &Work::Failed("PowerState still On after 60 s".into()));
    assert!(matches!(&failed, Step::Move { to: S::Error, clear_request: true, reason, .. } if reason.contains("still On")), "{failed:?}");
    v = apply(&v, &failed);
    assert!(matches!(tick(&v, &Work::NotStarted), Step::Wait(_)), "error waits for an operator");
    v.marked_for_deletion = true;
    v = apply(&v, &tick(&v, &Work::NotStarted));
    assert_eq!(v.state, S::Deleting);
    assert_eq!(tick(&v, &Work::NotStarted), Step::FinalDelete);
}

#[test]
fn deletion_wins_over_a_request_on_a_ready_shelf_and_waits_out_a_running_operation() {
    let mut v = shelf(S::Ready);
    v.marked_for_deletion = true;
    v.requested = Some(request(PowerOp::PowerOn));
    assert!(matches!(tick(&v, &Work::NotStarted), Step::Move { to: S::Deleting, .. }));
    // Marked while in maintenance: the operation finishes first (maintenance → deleting is
    // not in the seed's table), then ready → deleting.
    let mut m = shelf(S::Maintenance);
    m.operation = Some(PowerOp::PowerOn);
    m.marked_for_deletion = true;
    assert_eq!(tick(&m, &Work::NotStarted), Step::Act(DeviceAct::Power(PowerOp::PowerOn)));
    let m = apply(&m, &tick(&m, &Work::Done));
    assert!(matches!(tick(&m, &Work::NotStarted), Step::Move { to: S::Deleting, .. }));
}

#[test]
fn an_illegal_transition_is_refused_by_the_table() {
    // No tick proposes one; the table refuses one made by hand.
    assert!(S::Initializing.transition(S::Ready).is_err());
    assert!(S::Maintenance.transition(S::Deleting).is_err());
    for state in S::ALL {
        for work in [Work::NotStarted, Work::Running, Work::Done, Work::Failed("x".into())] {
            for marked in [false, true] {
                let mut v = shelf(*state);
                v.marked_for_deletion = marked;
                v.operation = (*state == S::Maintenance).then_some(PowerOp::PowerOff);
                v.requested = Some(request(PowerOp::PowerOn));
                if let Step::Move { to, .. } = tick(&v, &work) {
                    assert!(state.can_transition_to(to), "{state} -> {to} proposed");
                }
            }
        }
    }
}

#[test]
fn a_request_is_all_or_nothing() {
    let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
    let ids = vec![a.to_string(), b.to_string(), a.to_string()];
    assert_eq!(parse_request(&ids, "power_off", 10), Ok((vec![a, b], PowerOp::PowerOff)), "repeats collapse");
    assert_eq!(parse_request(&ids, "PowerOn", 10).map(|r| r.1), Ok(PowerOp::PowerOn));
    assert_eq!(parse_request(&[], "power_on", 10), Err(RequestError::NoIds));
    assert_eq!(parse_request(&ids, "power_on", 1), Err(RequestError::TooMany { given: 2, max: 1 }));
    assert!(matches!(parse_request(&ids, "unspecified", 10), Err(RequestError::BadOperation { .. })));
    assert!(matches!(parse_request(&["shelf-1".into()], "power_on", 10), Err(RequestError::BadId { .. })));
    assert_eq!(admit(&[(a, Some(false)), (b, Some(false))]), Ok(()));
    assert_eq!(admit(&[(a, Some(false)), (b, None)]), Err(RequestError::Unknown { id: b }), "one unknown id refuses the whole request");
    assert_eq!(admit(&[(a, Some(true)), (b, Some(false))]), Err(RequestError::MarkedForDeletion { id: a }));
}

#[test]
fn the_initiator_string_follows_the_seeds_table() {
    assert_eq!(initiator(Some("alice"), Some("https://tracker/MAINT-123")), "alice (https://tracker/MAINT-123)");
    assert_eq!(initiator(Some("alice"), None), "alice");
    assert_eq!(initiator(None, Some("https://tracker/MAINT-123")), "https://tracker/MAINT-123");
    assert_eq!(initiator(None, None), "admin-cli");
    assert_eq!(initiator(Some("  "), Some("")), "admin-cli", "blank counts as absent");
}
