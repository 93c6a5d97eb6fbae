//! Magic-rollback tests: the real executor, the real command runner and real processes,
//! against the fake Nix toolchain of [`testkit`](super::testkit) in a temporary root.
//!
//! "Killed" means killed: the kill tests re-run this test binary as a child (`--exact
//! <test>` and an environment variable naming the kit), the child starts the activation and
//! SIGKILLs itself at a chosen point, and the parent resumes from what the child left.

use std::path::Path;
use std::process::Command;

use drover_proto::intent::Intent;
use drover_proto::names::RolloutId;

use super::machine::{Answered, AwaitingConfirm, Begin, HostFacts, Job, Pending, ProfileSet, Recovery, Requested, UnitOutcome};
use super::record::{self, Step};
use super::testkit::{Behaviour, FakeClock, FixedGate, Kit, NetConfirmer, Parts, ProcessSystemd, T0, wait_for};
use super::{ActivationError, ActivationPhase, ActivationReport, ActivationSettings, Activator, ConfirmAnswer, ReportEvent, Time};
use crate::exec::SystemRunner;

const CHILD_ENV: &str = "DROVER_ACTIVATION_TEST_CHILD";

fn intent(target: &str, window: u64) -> Intent {
    Intent {
        intent_id: uuid::Uuid::new_v4().to_string(),
        host_id: "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10".into(),
        hostname: "gpu-a-01".into(),
        rollout_id: RolloutId::parse("main@abc123").expect("rollout id"),
        manifest_sha256: "0".repeat(64),
        wave_index: 0,
        target_closure: target.into(),
        issued_at: Time::from_unix(T0).expect("time"),
        expires_at: Time::from_unix(T0 + 3600).expect("time"),
        confirm_window_secs: window,
    }
}

/// A host running `old`, with `new` (same kernel, initrd, systemd, dbus) in the store.
fn host() -> (Kit, String, String) {
    let kit = Kit::new();
    let old = kit.closure("old", Parts::default());
    let new = kit.closure("new", Parts::default());
    kit.install_running(&old);
    (kit, old, new)
}

fn activator<'a>(
    kit: &'a Kit,
    systemd: &'a ProcessSystemd,
    confirmer: &'a NetConfirmer,
    gate: &'a FixedGate,
    clock: &'a FakeClock,
) -> Activator<'a> {
    Activator { settings: &kit.settings, state: &kit.state, runner: &SystemRunner, systemd, confirmer, gate, clock }
}

/// Runs one activation of `target` with the given coordinator and gate.
fn activate(kit: &Kit, target: &str, confirmer: &NetConfirmer, gate: &FixedGate, clock: &FakeClock) -> ActivationReport {
    let systemd = kit.systemd();
    activator(kit, &systemd, confirmer, gate, clock).activate(&intent(target, 60)).expect("activate")
}

fn assert_rolled_back(kit: &Kit, report: &ActivationReport, old: &str, new: &str, reason: &str) {
    assert_eq!(report.status.phase, ActivationPhase::RolledBack, "{report:?}");
    assert!(report.status.message.contains(reason), "{report:?}");
    assert_eq!(kit.running().as_deref(), Some(old), "the previous closure runs again");
    assert_eq!(kit.profile().as_deref(), Some(old), "the profile points at the previous closure again");
    assert_eq!(kit.stc_calls(new), vec!["switch"]);
    assert_eq!(kit.stc_calls(old), vec!["switch"], "the recorded previous closure was switched to");
    assert!(!kit.calls().iter().any(|c| c.contains("--rollback")), "never nix-env --rollback");
    match report.events.as_slice() {
        [ReportEvent::RolledBack { restored_closure, reason: why, .. }] => {
            assert_eq!(restored_closure, old);
            assert!(why.contains(reason), "{why}");
        }
        other => panic!("expected one RolledBack event, got {other:?}"),
    }
    let rec = record::load_record(&kit.state).expect("load").expect("record");
    assert_eq!((rec.step, rec.phase), (Step::Done, ActivationPhase::RolledBack));
}

fn quarantined(kit: &Kit, target: &str, clock: &FakeClock) -> bool {
    record::load_quarantine(&kit.state).expect("quarantine").active(target, super::Clock::now(clock)).is_some()
}

#[test]
fn activation_switches_in_a_transient_unit_confirms_and_passes_the_gate() {
    let (kit, old, new) = host();
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_eq!(report.status.phase, ActivationPhase::Confirmed, "{report:?}");
    assert!(report.events.is_empty());
    assert_eq!(kit.running().as_deref(), Some(new.as_str()));
    assert_eq!(kit.profile().as_deref(), Some(new.as_str()));
    assert!(kit.root.join("nix/var/nix/profiles/system-2-link").symlink_metadata().is_ok(), "a new generation");
    let calls = kit.calls();
    assert_eq!(calls[0], format!("nix-store --realise {new}"));
    assert!(calls[1].starts_with("nix-env -p ") && calls[1].ends_with(&format!("/nix/var/nix/profiles/system --set {new}")), "{calls:?}");
    assert_eq!(calls[2], format!("{new} switch"));
    assert!(kit.stc_calls(&old).is_empty());
    let requests = confirmer.requests.lock().expect("lock");
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].closure, new);
    // The switch ran in a transient unit (a process of its own), not as the agent's child.
    let units: Vec<_> = std::fs::read_dir(kit.kit.join("units")).expect("units").filter_map(Result::ok).collect();
    assert!(units.iter().any(|e| e.file_name().to_string_lossy().starts_with("drover-switch-")), "{units:?}");
}

#[test]
fn activation_coordinator_unreachable_after_the_switch_is_rolled_back_inside_the_window() {
    let (kit, old, new) = host();
    kit.mark(&new, Behaviour::CutNetwork);
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_rolled_back(&kit, &report, &old, &new, "confirmation missed");
    // Asked every 5 s from the switch (t=0) until the window's end (t=60), then rolled back at
    // the end of the window, not later.
    assert_eq!(confirmer.attempts(), 12, "attempts at t=0,5,…,55");
    assert_eq!(super::Clock::now(&clock).secs_since(Time::from_unix(T0).expect("time")), 60);
    assert!(quarantined(&kit, &new, &clock), "a closure that lost the coordinator is quarantined");
}

#[test]
fn activation_410_is_rolled_back_without_quarantine() {
    let (kit, old, new) = host();
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Gone), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_rolled_back(&kit, &report, &old, &new, "410");
    assert!(!quarantined(&kit, &new, &clock), "a withdrawn intent is not the closure's failure");
}

#[test]
fn activation_unreachable_then_confirmed_within_the_window_keeps_the_target() {
    let (kit, _old, new) = host();
    let flaky = vec![ConfirmAnswer::Unreachable("timeout".into()), ConfirmAnswer::Unreachable("timeout".into())];
    let (confirmer, gate, clock) = (NetConfirmer::scripted(&kit, flaky, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_eq!(report.status.phase, ActivationPhase::Confirmed, "{report:?}");
    assert_eq!(confirmer.attempts(), 3);
    assert_eq!(kit.running().as_deref(), Some(new.as_str()));
}

#[test]
fn activation_failed_health_gate_is_rolled_back_and_the_closure_quarantined() {
    let (kit, old, new) = host();
    let (confirmer, gate, clock) =
        (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Err("2 failed units".into())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_rolled_back(&kit, &report, &old, &new, "health gate failed: 2 failed units");
    assert!(quarantined(&kit, &new, &clock));
}

#[test]
fn activation_quarantined_closure_is_refused_until_the_quarantine_expires() {
    let (kit, old, new) = host();
    let (confirmer, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &FixedGate(Err("gpu lost".into())), &clock);
    assert_eq!(report.status.phase, ActivationPhase::RolledBack);
    let calls_before = kit.calls().len();

    // A new intent for the same closure is refused with the reason, touching nothing.
    clock.advance(600);
    let refused = activate(&kit, &new, &confirmer, &FixedGate(Ok(())), &clock);
    assert_eq!(refused.status.phase, ActivationPhase::Failed);
    let msg = &refused.status.message;
    assert!(msg.contains("quarantined until") && msg.contains("gpu lost") && msg.contains(&new), "{msg}");
    assert_eq!(kit.calls().len(), calls_before, "nothing was realised, set or switched");
    assert_eq!(kit.running().as_deref(), Some(old.as_str()));

    // Once it expires (quarantine_secs = 3600), the closure may be tried again.
    clock.advance(3600);
    let retried = activate(&kit, &new, &confirmer, &FixedGate(Ok(())), &clock);
    assert_eq!(retried.status.phase, ActivationPhase::Confirmed, "{retried:?}");
    assert_eq!(kit.running().as_deref(), Some(new.as_str()));
}

#[test]
fn activation_failing_switch_to_configuration_is_rolled_back() {
    let (kit, old, new) = host();
    kit.mark(&new, Behaviour::Fail);
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_rolled_back(&kit, &report, &old, &new, "switch failed");
    assert_eq!(confirmer.attempts(), 0, "a failed switch is never confirmed");
    assert!(quarantined(&kit, &new, &clock));
}

#[test]
fn activation_every_switch_inhibitor_stages_with_boot_and_defers_without_switching() {
    let changes = [
        ("kernel", Parts { kernel: "6.12.1", ..Parts::default() }),
        ("initrd", Parts { initrd: "2", ..Parts::default() }),
        ("systemd", Parts { systemd: "257.1", ..Parts::default() }),
        ("dbus", Parts { dbus: "1.16.0", ..Parts::default() }),
    ];
    for (name, parts) in changes {
        let kit = Kit::new();
        let old = kit.closure("old", Parts::default());
        let new = kit.closure("new", parts);
        kit.install_running(&old);
        let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
        let report = activate(&kit, &new, &confirmer, &gate, &clock);
        assert_eq!(report.status.phase, ActivationPhase::Deferred, "{name}: {report:?}");
        assert!(report.status.message.contains(&format!("{name}: ")), "{name}: {}", report.status.message);
        assert_eq!(kit.stc_calls(&new), vec!["boot"], "{name}: boot, never switch");
        assert_eq!(kit.running().as_deref(), Some(old.as_str()), "{name}: nothing switched live");
        assert_eq!(kit.profile().as_deref(), Some(new.as_str()), "{name}: staged in the profile for the next boot");
        assert_eq!(confirmer.attempts(), 0);
    }
}

#[test]
fn activation_failing_boot_staging_restores_the_previous_boot_entry() {
    let kit = Kit::new();
    let old = kit.closure("old", Parts::default());
    let new = kit.closure("new", Parts { kernel: "6.12.1", ..Parts::default() });
    kit.install_running(&old);
    kit.mark(&new, Behaviour::FailBoot);
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_eq!(report.status.phase, ActivationPhase::RolledBack, "{report:?}");
    assert_eq!(kit.stc_calls(&old), vec!["boot"], "only the boot entry is restored; the running system was never touched");
    assert_eq!(kit.profile().as_deref(), Some(old.as_str()));
    assert_eq!(kit.running().as_deref(), Some(old.as_str()));
}

#[test]
fn activation_without_a_system_profile_reports_no_backend() {
    let kit = Kit::new();
    let new = kit.closure("new", Parts::default());
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_eq!(report.status.phase, ActivationPhase::NoBackend);
    assert_eq!(
        report.status.message,
        "no activation backend: this host is not NixOS (no /nix/var/nix/profiles/system); the intent was refused and nothing was changed"
    );
    assert!(matches!(report.events.as_slice(), [ReportEvent::NoActivationBackend { rollout_id }] if rollout_id == "main@abc123"));
    assert!(kit.calls().is_empty(), "no tool was run");
    assert!(kit.stc_calls(&new).is_empty(), "nothing was switched");
}

#[test]
fn activation_unrealisable_closure_fails_and_switches_nothing() {
    let (kit, old, _new) = host();
    let missing = super::testkit::store_path("nixos-system-missing");
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &missing, &confirmer, &gate, &clock);
    assert_eq!(report.status.phase, ActivationPhase::Failed);
    assert!(report.status.message.contains(&format!("error: path '{missing}' is not valid")), "{report:?}");
    assert_eq!(kit.calls(), vec![format!("nix-store --realise {missing}")]);
    assert_eq!((kit.running(), kit.profile()), (Some(old.clone()), Some(old)));
}

#[test]
fn activation_realise_failure_is_retried_for_the_same_intent() {
    let (kit, _old, new) = host();
    let systemd = kit.systemd();
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let a = activator(&kit, &systemd, &confirmer, &gate, &clock);
    // The substituter is "down": the closure is not in the store yet.
    let parked = kit.base.join("parked");
    std::fs::rename(kit.settings.rooted(&new), &parked).expect("park");
    let intent = intent(&new, 60);
    assert_eq!(a.activate(&intent).expect("first").status.phase, ActivationPhase::Failed);
    std::fs::rename(&parked, kit.settings.rooted(&new)).expect("unpark");
    assert_eq!(a.activate(&intent).expect("again").status.phase, ActivationPhase::Confirmed, "retried, not answered from the record");
}

#[test]
fn activation_failing_profile_set_fails_and_switches_nothing() {
    let (kit, old, new) = host();
    kit.fail_nix_env();
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let report = activate(&kit, &new, &confirmer, &gate, &clock);
    assert_eq!(report.status.phase, ActivationPhase::Failed, "{report:?}");
    assert!(report.status.message.contains("Permission denied"), "{report:?}");
    assert!(kit.stc_calls(&new).is_empty() && kit.stc_calls(&old).is_empty());
    assert_eq!((kit.running(), kit.profile()), (Some(old.clone()), Some(old)));
}

#[test]
fn activation_repeated_intent_returns_the_recorded_outcome_without_acting_again() {
    let (kit, _old, new) = host();
    let systemd = kit.systemd();
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let a = activator(&kit, &systemd, &confirmer, &gate, &clock);
    let intent = intent(&new, 60);
    let first = a.activate(&intent).expect("first");
    let calls = kit.calls().len();
    assert_eq!(a.activate(&intent).expect("again"), first);
    assert_eq!(kit.calls().len(), calls);
    assert_eq!(a.last_report().expect("last"), Some(first));
}

#[test]
fn activation_refuses_a_bad_target_and_an_unfinished_record_and_a_held_lock() {
    let (kit, _old, new) = host();
    let systemd = kit.systemd();
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0));
    let a = activator(&kit, &systemd, &confirmer, &gate, &clock);
    assert!(matches!(a.activate(&intent("/etc/passwd", 60)), Err(ActivationError::BadTarget { .. })));
    let _held = nix::fcntl::Flock::lock(
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(kit.state.file(super::LOCK_FILE)).expect("open"),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .expect("lock");
    assert!(matches!(a.activate(&intent(&new, 60)), Err(ActivationError::Locked { .. })));
    drop(_held);
    let mut rec = record::ActivationRecord {
        intent_id: "other".into(),
        rollout_id: RolloutId::parse("main@abc123").expect("id"),
        target: new.clone(),
        previous: None,
        confirm_window_secs: 60,
        step: Step::Switching,
        phase: ActivationPhase::Activating,
        message: String::new(),
        unit: None,
        confirm_deadline: None,
        rollback: None,
        events: Vec::new(),
        retryable: false,
        updated_at: Time::from_unix(T0).expect("t"),
    };
    record::store_record(&kit.state, &rec).expect("store");
    assert!(matches!(a.activate(&intent(&new, 60)), Err(ActivationError::Unfinished { .. })));
    // …and a record a resume cannot use is reported as corrupt, not guessed at.
    assert!(matches!(a.resume(), Err(ActivationError::Corrupt { .. })));
    rec.step = Step::Done;
    record::store_record(&kit.state, &rec).expect("store");
    assert!(a.activate(&intent(&new, 60)).is_ok());
}

#[test]
fn activation_settings_default_and_refuse_unknown_keys() {
    let s: ActivationSettings = toml::from_str("").expect("empty");
    assert_eq!(s, ActivationSettings::default());
    assert_eq!(s.root, Path::new("/"));
    assert_eq!(s.nix_store, Path::new("nix-store"));
    let s: ActivationSettings = toml::from_str("root = \"/mnt\"\nquarantine_secs = 60").expect("parse");
    assert_eq!((s.root.as_path(), s.quarantine_secs, s.confirm_retry_secs), (Path::new("/mnt"), 60, 5));
    assert_eq!(s.system_profile(), Path::new("/mnt/nix/var/nix/profiles/system"));
    assert!(toml::from_str::<ActivationSettings>("rollback = true").is_err());
}

#[test]
fn activation_machine_retries_never_past_the_deadline() {
    let t = |s: i64| Time::from_unix(T0 + s).expect("time");
    let job = Job {
        intent_id: "i".into(),
        rollout_id: RolloutId::parse("main@r").expect("id"),
        target: "/nix/store/t".into(),
        confirm_window_secs: 12,
    };
    let facts = HostFacts { has_profile: true, running: Some("/nix/store/t".into()), profile: None, quarantined: None };
    // The target already runs: confirmed without a rollback target.
    let Begin::AlreadyRunning(a) = Requested::new(job).begin(facts, t(0)) else { panic!("already running") };
    assert_eq!(a.deadline(), t(12));
    let unreachable = || ConfirmAnswer::Unreachable("down".into());
    let Answered::Retry { state, wake_at } = a.answered(unreachable(), t(0), 5) else { panic!("retry") };
    assert_eq!(wake_at, t(5));
    let Answered::Retry { state, wake_at } = state.answered(unreachable(), t(10), 5) else { panic!("retry") };
    assert_eq!(wake_at, t(12), "the last attempt is at the deadline, never after");
    let running = Some("/nix/store/t".to_owned());
    let Err(Recovery::Finished(f)) = AwaitingConfirm::check(state, running, t(12)) else { panic!("missed") };
    assert_eq!(f.phase(), ActivationPhase::Failed, "nothing to roll back to when the target already ran");
    assert!(f.quarantine().is_none());
}

#[test]
fn activation_machine_records_turn_back_into_the_states_they_were_written_from() {
    let t = |s: i64| Time::from_unix(T0 + s).expect("time");
    let (target, previous) = ("/nix/store/t".to_owned(), "/nix/store/p".to_owned());
    let job =
        Job { intent_id: "i".into(), rollout_id: RolloutId::parse("main@r").expect("id"), target: target.clone(), confirm_window_secs: 30 };
    let facts = HostFacts { has_profile: true, running: Some(previous.clone()), profile: None, quarantined: None };
    let Begin::Realise(r) = Requested::new(job).begin(facts, t(0)) else { panic!("realise") };
    let staged = r.realised(Ok(())).expect("realised").stage(Vec::new(), "drover-switch-x.service".into());
    let back = |rec: record::ActivationRecord| {
        let json = serde_json::to_string(&rec).expect("json");
        let parsed: record::ActivationRecord = serde_json::from_str(&json).expect("parse");
        assert_eq!(parsed, rec);
        Pending::from_record(parsed).expect("pending")
    };
    assert!(matches!(back(staged.record(t(0))), Pending::Switching(s) if s.unit() == "drover-switch-x.service"));
    let ProfileSet::Switch(s) = staged.profile_set(Ok(())) else { panic!("switch") };
    // systemd forgot the unit, but the target runs: the switch happened.
    let a = s.switched(UnitOutcome::Unknown, Some(target.clone()), t(3)).expect("switched");
    assert!(matches!(back(a.record(t(3))), Pending::AwaitingConfirm(a) if a.deadline() == t(33)));
    let Answered::Confirmed(g) = a.answered(ConfirmAnswer::Confirmed, t(4), 5) else { panic!("confirmed") };
    assert!(matches!(back(g.record(t(4))), Pending::Gating(_)));
    let Err(Recovery::RollBack(rb)) = g.gated(Err("ecc errors".into()), Some(target)) else { panic!("roll back") };
    let rb = rb.with_unit("drover-rollback-x.service".into());
    assert!(
        matches!(back(rb.record(t(5))), Pending::RollingBack(rb) if rb.unit() == Some("drover-rollback-x.service") && rb.previous() == "/nix/store/p")
    );
    let f = rb.rolled_back(Ok(()), Ok(()), Some(previous), t(6), 100);
    assert_eq!(f.phase(), ActivationPhase::RolledBack);
    assert_eq!(f.quarantine().map(|q| q.until), Some(t(106)));
    assert!(matches!(back(f.record(t(6))), Pending::Done(rec) if rec.events.len() == 1));
}

// --- killed mid-activation -------------------------------------------------------------

/// The child's role, when [`CHILD_ENV`] names a kit: start the activation written by the
/// parent and SIGKILL itself at the point `kill_at` names.
fn child_role(test: &str) -> bool {
    let Some(base) = std::env::var_os(CHILD_ENV) else { return false };
    let kit = Kit::open(Path::new(&base));
    let intent: Intent = serde_json::from_slice(&std::fs::read(kit.base.join("intent.json")).expect("intent")).expect("parse");
    let kill_at = std::fs::read_to_string(kit.base.join("kill-at")).expect("kill-at");
    let systemd = KillAfterSwitchStarts { inner: kit.systemd(), kit: &kit, armed: kill_at == "switch-running" };
    let confirmer = KillOnConfirm { armed: kill_at == "confirming" };
    let runner = KillAfterProfileSet { armed: kill_at == "profile-set" };
    let (gate, clock) = (FixedGate(Ok(())), FakeClock::at(T0));
    let a = Activator {
        settings: &kit.settings,
        state: &kit.state,
        runner: &runner,
        systemd: &systemd,
        confirmer: &confirmer,
        gate: &gate,
        clock: &clock,
    };
    let outcome = a.activate(&intent);
    panic!("{test}: the child should have been killed, but the activation ended: {outcome:?}");
}

fn kill_self() -> ! {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
    unreachable!("SIGKILL cannot be caught")
}

/// Kills the process once the switch unit runs `switch-to-configuration`.
struct KillAfterSwitchStarts<'a> {
    inner: ProcessSystemd,
    kit: &'a Kit,
    armed: bool,
}

impl crate::systemd::Systemd for KillAfterSwitchStarts<'_> {
    fn start_transient_service(&self, unit: &str, description: &str, argv: &[String]) -> Result<(), crate::systemd::SystemdError> {
        self.inner.start_transient_service(unit, description, argv)?;
        if self.armed {
            assert!(wait_for(|| self.kit.calls().iter().any(|c| c.ends_with(" switch"))), "the switch never started");
            kill_self();
        }
        Ok(())
    }
    fn unit_status(&self, unit: &str) -> Result<Option<crate::systemd::UnitStatus>, crate::systemd::SystemdError> {
        self.inner.unit_status(unit)
    }
    fn wait_finished(&self, unit: &str, timeout: std::time::Duration) -> Result<crate::systemd::UnitStatus, crate::systemd::SystemdError> {
        self.inner.wait_finished(unit, timeout)
    }
    fn failed_units(&self) -> Result<Vec<String>, crate::systemd::SystemdError> {
        self.inner.failed_units()
    }
    fn restart_unit(&self, unit: &str) -> Result<(), crate::systemd::SystemdError> {
        self.inner.restart_unit(unit)
    }
    fn start_unit(&self, unit: &str) -> Result<(), crate::systemd::SystemdError> {
        self.inner.start_unit(unit)
    }
    fn stop_unit(&self, unit: &str) -> Result<(), crate::systemd::SystemdError> {
        self.inner.stop_unit(unit)
    }
    fn disable_unit_files(&self, units: &[&str]) -> Result<Vec<String>, crate::systemd::SystemdError> {
        self.inner.disable_unit_files(units)
    }
}

/// Kills the process right after `nix-env --set` succeeded (before the switch unit starts).
struct KillAfterProfileSet {
    armed: bool,
}

impl crate::exec::CommandRunner for KillAfterProfileSet {
    fn run(&self, cmd: &crate::exec::CommandSpec) -> Result<crate::exec::CommandOutput, crate::exec::ExecError> {
        let out = crate::exec::CommandRunner::run(&SystemRunner, cmd)?;
        if self.armed && cmd.args.iter().any(|a| a == "--set") {
            kill_self();
        }
        Ok(out)
    }
}

/// Kills the process at the first confirmation attempt.
struct KillOnConfirm {
    armed: bool,
}

impl super::Confirmer for KillOnConfirm {
    fn confirm(&self, _request: &super::ConfirmRequest) -> ConfirmAnswer {
        if self.armed {
            kill_self();
        }
        ConfirmAnswer::Confirmed
    }
}

/// Runs `test` in a child process playing the agent, which kills itself at `kill_at`.
fn run_killed_child(kit: &Kit, test: &str, intent: &Intent, kill_at: &str) {
    std::fs::write(kit.base.join("intent.json"), serde_json::to_vec(intent).expect("json")).expect("write");
    std::fs::write(kit.base.join("kill-at"), kill_at).expect("write");
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &kit.base)
        .output()
        .expect("run child");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(9),
        "the child must die by SIGKILL: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn activation_agent_killed_while_the_switch_runs_resumes_waits_for_the_unit_and_confirms() {
    const NAME: &str = "activation::tests::activation_agent_killed_while_the_switch_runs_resumes_waits_for_the_unit_and_confirms";
    if child_role(NAME) {
        return;
    }
    let (kit, old, new) = host();
    kit.mark(&new, Behaviour::Hang);
    run_killed_child(&kit, NAME, &intent(&new, 60), "switch-running");

    // What the killed agent left: the switch step on record, its unit still running.
    let rec = record::load_record(&kit.state).expect("load").expect("record");
    assert_eq!((rec.step, rec.previous.as_deref()), (Step::Switching, Some(old.as_str())));
    let unit = rec.unit.clone().expect("unit");
    let systemd = kit.systemd();
    assert!(crate::systemd::Systemd::unit_status(&systemd, &unit).expect("status").expect("known").is_running());
    assert_eq!(kit.running().as_deref(), Some(old.as_str()), "the switch hangs before switching");

    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0 + 30));
    let a = activator(&kit, &systemd, &confirmer, &gate, &clock);
    let report = std::thread::scope(|s| {
        let resumed = s.spawn(|| a.resume());
        kit.release_hang();
        resumed.join().expect("join")
    })
    .expect("resume")
    .expect("a pending activation");
    assert_eq!(report.status.phase, ActivationPhase::Confirmed, "{report:?}");
    assert_eq!(kit.running().as_deref(), Some(new.as_str()));
    assert_eq!(kit.stc_calls(&new), vec!["switch"], "the switch ran once, in the unit the killed agent started");
    assert_eq!(confirmer.attempts(), 1);
    assert_eq!(record::load_record(&kit.state).expect("load").expect("record").step, Step::Done);
}

#[test]
fn activation_agent_killed_while_unconfirmed_resumes_after_the_deadline_and_rolls_back() {
    const NAME: &str = "activation::tests::activation_agent_killed_while_unconfirmed_resumes_after_the_deadline_and_rolls_back";
    if child_role(NAME) {
        return;
    }
    let (kit, old, new) = host();
    run_killed_child(&kit, NAME, &intent(&new, 60), "confirming");

    let rec = record::load_record(&kit.state).expect("load").expect("record");
    assert_eq!(rec.step, Step::AwaitingConfirm);
    assert_eq!(rec.confirm_deadline, Some(Time::from_unix(T0 + 60).expect("t")));
    assert_eq!(kit.running().as_deref(), Some(new.as_str()), "the switch completed before the kill");

    // The agent comes back after the window closed.
    let systemd = kit.systemd();
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0 + 61));
    let report = activator(&kit, &systemd, &confirmer, &gate, &clock).resume().expect("resume").expect("pending");
    assert_rolled_back(&kit, &report, &old, &new, "confirmation missed");
    assert_eq!(confirmer.attempts(), 0, "too late to confirm");
}

#[test]
fn activation_agent_killed_while_unconfirmed_resumes_in_time_and_a_410_rolls_back() {
    const NAME: &str = "activation::tests::activation_agent_killed_while_unconfirmed_resumes_in_time_and_a_410_rolls_back";
    if child_role(NAME) {
        return;
    }
    let (kit, old, new) = host();
    run_killed_child(&kit, NAME, &intent(&new, 60), "confirming");
    let systemd = kit.systemd();
    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Gone), FixedGate(Ok(())), FakeClock::at(T0 + 20));
    let report = activator(&kit, &systemd, &confirmer, &gate, &clock).resume().expect("resume").expect("pending");
    assert_eq!(confirmer.attempts(), 1, "still in the window: confirmation attempted");
    assert_rolled_back(&kit, &report, &old, &new, "410");
    // A second resume finds the finished record and does nothing more.
    let again = activator(&kit, &systemd, &confirmer, &gate, &clock).resume().expect("resume").expect("record");
    assert_eq!(again, report);
}

#[test]
fn activation_agent_killed_after_setting_the_profile_resumes_and_restores_the_previous_closure() {
    const NAME: &str = "activation::tests::activation_agent_killed_after_setting_the_profile_resumes_and_restores_the_previous_closure";
    if child_role(NAME) {
        return;
    }
    let (kit, old, new) = host();
    run_killed_child(&kit, NAME, &intent(&new, 60), "profile-set");

    // Half done: the profile points at the target, the switch never started.
    let rec = record::load_record(&kit.state).expect("load").expect("record");
    assert_eq!(rec.step, Step::Switching);
    let systemd = kit.systemd();
    assert_eq!(crate::systemd::Systemd::unit_status(&systemd, rec.unit.as_deref().expect("unit")).expect("status"), None);
    assert_eq!((kit.profile().as_deref(), kit.running().as_deref()), (Some(new.as_str()), Some(old.as_str())));

    let (confirmer, gate, clock) = (NetConfirmer::new(&kit, ConfirmAnswer::Confirmed), FixedGate(Ok(())), FakeClock::at(T0 + 5));
    let report = activator(&kit, &systemd, &confirmer, &gate, &clock).resume().expect("resume").expect("pending");
    assert_eq!(report.status.phase, ActivationPhase::RolledBack, "{report:?}");
    assert!(report.status.message.contains("switch did not complete"), "{report:?}");
    assert_eq!((kit.profile().as_deref(), kit.running().as_deref()), (Some(old.as_str()), Some(old.as_str())));
    assert!(kit.stc_calls(&new).is_empty(), "the target was never switched to");
    assert!(!quarantined(&kit, &new, &clock), "an agent killed mid-way is not the closure's failure");
}
