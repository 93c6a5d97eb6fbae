//! The agent's systemd client ([`DbusSystemd`]) against a real `dbus-daemon` with the
//! `fake-systemd` test service on it: transient units really run, their final state is seen
//! through D-Bus signals, failed units are listed, restarts re-run, a taken name is refused —
//! and a switch started in a transient unit finishes even when the agent that started it is
//! killed with SIGKILL. Units with unit files (a oneshot, a timer, a long-running service)
//! take start/stop/restart jobs that are waited for with a bound, and `DisableUnitFiles`.
//!
//! These tests need `/usr/bin/dbus-daemon` (CI installs it) and fail loudly without it.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use drover_agent::systemd::dbus::DbusSystemd;
use drover_agent::systemd::{Systemd, SystemdError};
use drover_tests::bus::{TestBus, WAIT, lines_of, wait_for_line};

/// Set in the re-executed test process that plays the agent to be killed.
const CHILD_ENV: &str = "DROVER_TEST_SYSTEMD_AGENT_CHILD";

/// Writes `go` into the FIFO a unit is reading; the open blocks until the unit opened its
/// end, so it runs on a thread and is bounded.
fn release(fifo: &Path) {
    let (tx, rx) = mpsc::channel();
    let path = fifo.to_path_buf();
    std::thread::spawn(move || {
        let result = std::fs::OpenOptions::new().write(true).open(&path).and_then(|mut f| f.write_all(b"go\n"));
        let _ = tx.send(result);
    });
    match rx.recv_timeout(WAIT) {
        Ok(result) => result.expect("write to the unit's FIFO"),
        Err(_) => panic!("no unit opened {} within {WAIT:?}", fifo.display()),
    }
}

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

/// The unit command: waits for the FIFO, then writes what it read to `marker`.
fn waits_then_marks(fifo: &Path, marker: &Path) -> Vec<String> {
    sh(&format!("read line < '{}' && echo \"$line\" > '{}'", fifo.display(), marker.display()))
}

#[test]
fn a_transient_unit_runs_and_its_final_state_is_observed() {
    let bus = TestBus::start();
    let sd = bus.systemd();
    let (fifo, marker) = (bus.fifo("go"), bus.path("marker"));
    sd.start_transient_service("drover-t1.service", "test unit", &waits_then_marks(&fifo, &marker)).expect("start");
    let status = sd.unit_status("drover-t1.service").expect("status").expect("the unit is known");
    assert!(status.is_running(), "{status:?}");
    assert_eq!((status.active_state.as_str(), status.sub_state.as_str()), ("active", "running"));
    // A short wait on a running unit runs out with the state it saw.
    match sd.wait_finished("drover-t1.service", Duration::from_millis(300)) {
        Err(SystemdError::Timeout { unit, state, .. }) => {
            assert_eq!((unit.as_str(), state.as_str()), ("drover-t1.service", "active/running"))
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The wait is woken by the unit's signals, not by polling: release the unit while waiting.
    let waiter = std::thread::spawn(move || sd.wait_finished("drover-t1.service", WAIT));
    release(&fifo);
    let status = waiter.join().expect("waiter").expect("the unit finishes");
    assert!(status.succeeded(), "{status:?}");
    assert_eq!((status.active_state.as_str(), status.sub_state.as_str(), status.result.as_str()), ("active", "exited", "success"));
    assert_eq!(std::fs::read_to_string(&marker).expect("marker written"), "go\n");
    // RemainAfterExit: the final state stays queryable, and it is not a failed unit.
    let again = bus.systemd();
    assert_eq!(again.unit_status("drover-t1.service").expect("status"), Some(status));
    assert!(again.failed_units().expect("failed units").is_empty());
}

#[test]
fn a_failing_unit_reports_failure_and_is_listed() {
    let bus = TestBus::start();
    let sd = bus.systemd();
    sd.start_transient_service("drover-fails.service", "fails", &sh("exit 3")).expect("start");
    let status = sd.wait_finished("drover-fails.service", WAIT).expect("finishes");
    assert!(!status.succeeded() && !status.is_running(), "{status:?}");
    assert_eq!((status.active_state.as_str(), status.sub_state.as_str(), status.result.as_str()), ("failed", "failed", "exit-code"));
    sd.start_transient_service("drover-ok.service", "succeeds", &sh("true")).expect("start");
    assert!(sd.wait_finished("drover-ok.service", WAIT).expect("finishes").succeeded());
    assert_eq!(sd.failed_units().expect("failed units"), vec!["drover-fails.service".to_owned()]);
    // A command that cannot be run at all is a failed unit too.
    sd.start_transient_service("drover-missing.service", "missing", &["/nonexistent/switch".to_owned()]).expect("job accepted");
    let status = sd.wait_finished("drover-missing.service", WAIT).expect("finishes");
    assert_eq!(status.active_state, "failed");
    assert_eq!(sd.failed_units().expect("failed units"), vec!["drover-fails.service".to_owned(), "drover-missing.service".to_owned()]);
}

#[test]
fn unknown_units_are_none_and_errors_carry_systemds_names() {
    let bus = TestBus::start();
    let sd = bus.systemd();
    assert_eq!(sd.unit_status("nothing-here.service").expect("status"), None);
    match sd.wait_finished("nothing-here.service", WAIT) {
        Err(SystemdError::Call { method: "GetUnit", message, .. }) => assert!(message.contains("NoSuchUnit"), "{message}"),
        other => panic!("expected NoSuchUnit, got {other:?}"),
    }
    match sd.restart_unit("nothing-here.service") {
        Err(SystemdError::Call { method: "RestartUnit", message, .. }) => {
            assert!(message.starts_with("org.freedesktop.systemd1.NoSuchUnit"), "{message}")
        }
        other => panic!("expected NoSuchUnit, got {other:?}"),
    }
    assert!(matches!(sd.start_transient_service("x.service", "empty", &[]), Err(SystemdError::Call { .. })));
}

#[test]
fn restart_reruns_the_units_command() {
    let bus = TestBus::start();
    let sd = bus.systemd();
    let runs = bus.path("runs");
    sd.start_transient_service("drover-rerun.service", "counts runs", &sh(&format!("echo run >> '{}'", runs.display()))).expect("start");
    assert!(sd.wait_finished("drover-rerun.service", WAIT).expect("finishes").succeeded());
    assert_eq!(std::fs::read_to_string(&runs).expect("runs"), "run\n");
    sd.restart_unit("drover-rerun.service").expect("restart");
    assert!(sd.wait_finished("drover-rerun.service", WAIT).expect("finishes").succeeded());
    assert_eq!(std::fs::read_to_string(&runs).expect("runs"), "run\nrun\n");
}

#[test]
fn a_running_unit_name_cannot_be_started_twice() {
    let bus = TestBus::start();
    let sd = bus.systemd();
    let (fifo, marker) = (bus.fifo("go"), bus.path("marker"));
    sd.start_transient_service("drover-once.service", "first", &waits_then_marks(&fifo, &marker)).expect("start");
    match sd.start_transient_service("drover-once.service", "second", &sh("true")) {
        Err(SystemdError::Call { method: "StartTransientUnit", unit, message }) => {
            assert_eq!(unit, "drover-once.service");
            assert!(message.starts_with("org.freedesktop.systemd1.UnitExists"), "{message}");
        }
        other => panic!("expected UnitExists, got {other:?}"),
    }
    release(&fifo);
    assert!(sd.wait_finished("drover-once.service", WAIT).expect("finishes").succeeded());
    assert_eq!(std::fs::read_to_string(&marker).expect("the first command ran"), "go\n");
}

/// The "agent" process: starts the switch unit, says so, and waits to be killed.
fn play_the_agent(address: &str) {
    let unit = std::env::var("DROVER_TEST_UNIT").expect("unit");
    let fifo = PathBuf::from(std::env::var("DROVER_TEST_FIFO").expect("fifo"));
    let marker = PathBuf::from(std::env::var("DROVER_TEST_MARKER").expect("marker"));
    let sd = DbusSystemd::at_address(address).expect("connect");
    sd.start_transient_service(&unit, "switch-to-configuration (test)", &waits_then_marks(&fifo, &marker)).expect("start");
    let mut out = std::io::stdout();
    writeln!(out, "started {unit}").expect("stdout");
    out.flush().expect("flush");
    // Blocks until the test kills this process (the bound is only a safety net).
    let (_tx, rx) = mpsc::channel::<()>();
    let _ = rx.recv_timeout(WAIT * 3);
    panic!("the agent process was not killed");
}

#[test]
fn the_switch_survives_the_agent() {
    if let Ok(address) = std::env::var(CHILD_ENV) {
        play_the_agent(&address);
        return;
    }
    let bus = TestBus::start();
    let (fifo, marker) = (bus.fifo("go"), bus.path("marker"));
    let unit = "nixos-switch-test.service";
    // This test's libtest name: its path less the crate's (the test binary holds many files).
    let this = concat!(module_path!(), "::the_switch_survives_the_agent");
    let this = this.split_once("::").map_or(this, |(_, path)| path);
    let mut agent = Command::new(std::env::current_exe().expect("current exe"))
        .args(["--exact", this, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, bus.address())
        .env("DROVER_TEST_UNIT", unit)
        .env("DROVER_TEST_FIFO", &fifo)
        .env("DROVER_TEST_MARKER", &marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the agent process");
    let out = lines_of(agent.stdout.take().expect("agent stdout"));
    // libtest prints `test … ` without a newline before the test's own output.
    wait_for_line(&out, "`started` from the agent process", |l| l.ends_with(&format!("started {unit}")));
    agent.kill().expect("SIGKILL the agent");
    let status = agent.wait().expect("reap the agent");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status:?}");

    // A fresh agent finds the switch still running, lets it finish, and sees it succeed.
    let sd = bus.systemd();
    let running = sd.unit_status(unit).expect("status").expect("the unit outlived the agent");
    assert!(running.is_running(), "{running:?}");
    release(&fifo);
    let done = sd.wait_finished(unit, WAIT).expect("the switch finishes");
    assert!(done.succeeded(), "{done:?}");
    assert_eq!(std::fs::read_to_string(&marker).expect("marker written by the switch"), "go\n");
}

/// The agent calls these off its async runtime, on the blocking pool: that must work (each
/// call runs its own short-lived runtime, which tokio refuses inside a runtime's worker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_work_from_the_agents_blocking_pool() {
    let bus = TestBus::start();
    let address = bus.address().to_owned();
    let status = tokio::task::spawn_blocking(move || {
        let sd = DbusSystemd::at_address(&address).expect("connect");
        sd.start_transient_service("drover-pool.service", "from the pool", &sh("true")).expect("start");
        let status = sd.wait_finished("drover-pool.service", WAIT).expect("finishes");
        // Dropped on the blocking pool too.
        drop(sd);
        status
    })
    .await
    .expect("blocking task");
    assert!(status.succeeded(), "{status:?}");
}

fn unit(spec: &str) -> String {
    spec.to_owned()
}

fn state(sd: &DbusSystemd, unit: &str) -> (String, String, String) {
    let st = sd.unit_status(unit).expect("status").expect("the unit is loaded");
    (st.active_state, st.sub_state, st.result)
}

fn triple(a: &str, b: &str, c: &str) -> (String, String, String) {
    (a.to_owned(), b.to_owned(), c.to_owned())
}

#[test]
fn start_waits_for_a_oneshot_and_reports_its_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runs = dir.path().join("runs");
    let bus = TestBus::start_with(&[
        unit(&format!("sync.service;oneshot;inactive;sleep 0.2; echo run >> '{}'", runs.display())),
        unit("broken.service;oneshot;inactive;exit 4"),
    ]);
    let sd = bus.systemd();
    assert_eq!(state(&sd, "sync.service"), triple("inactive", "dead", "success"));
    // The job ends when the command did: the file is there as soon as the call returns.
    sd.start_unit("sync.service").expect("start");
    assert_eq!(std::fs::read_to_string(&runs).expect("the oneshot ran"), "run\n");
    assert_eq!(state(&sd, "sync.service"), triple("inactive", "dead", "success"));
    // A oneshot's unit stays loaded (it has a unit file), and runs again on the next start.
    sd.restart_unit("sync.service").expect("restart");
    assert_eq!(std::fs::read_to_string(&runs).expect("runs"), "run\nrun\n");
    match sd.start_unit("broken.service") {
        Err(SystemdError::Call { method: "StartUnit", unit, message }) => {
            assert_eq!((unit.as_str(), message.as_str()), ("broken.service", "job failed"))
        }
        other => panic!("expected a failed job, got {other:?}"),
    }
    assert_eq!(state(&sd, "broken.service"), triple("failed", "failed", "exit-code"));
    assert_eq!(sd.failed_units().expect("failed units"), vec!["broken.service".to_owned()]);
}

#[test]
fn a_job_wait_is_bounded() {
    // A oneshot that blocks until released: its start job outlasts a short bound.
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo2 = dir.path().join("go");
    nix::unistd::mkfifo(&fifo2, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let bus = TestBus::start_with(&[unit(&format!("slow.service;oneshot;inactive;read line < '{}'", fifo2.display()))]);
    let sd = bus.systemd().with_job_timeout(Duration::from_millis(300));
    match sd.start_unit("slow.service") {
        Err(SystemdError::Timeout { unit, state, .. }) => {
            assert_eq!(unit, "slow.service");
            assert!(state.starts_with("activating/start"), "{state}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    release(&fifo2);
    assert!(sd.wait_finished("slow.service", WAIT).expect("finishes").succeeded());
}

#[test]
fn timers_restart_and_stop() {
    let bus = TestBus::start_with(&[unit("maas_hardware_sync.timer;timer;inactive")]);
    let sd = bus.systemd();
    assert_eq!(state(&sd, "maas_hardware_sync.timer"), triple("inactive", "dead", "success"));
    sd.restart_unit("maas_hardware_sync.timer").expect("restart");
    let st = sd.unit_status("maas_hardware_sync.timer").expect("status").expect("loaded");
    assert!(st.is_active(), "{st:?}");
    assert_eq!((st.sub_state.as_str(), st.result.as_str()), ("waiting", "success"));
    let first = bus.active_enter_timestamp("maas_hardware_sync.timer");
    sd.restart_unit("maas_hardware_sync.timer").expect("restart again");
    assert!(bus.active_enter_timestamp("maas_hardware_sync.timer") > first, "a restart re-enters the active state");
    // Starting an active timer is a no-op job.
    let second = bus.active_enter_timestamp("maas_hardware_sync.timer");
    sd.start_unit("maas_hardware_sync.timer").expect("start");
    assert_eq!(bus.active_enter_timestamp("maas_hardware_sync.timer"), second);
    sd.stop_unit("maas_hardware_sync.timer").expect("stop");
    assert_eq!(state(&sd, "maas_hardware_sync.timer"), triple("inactive", "dead", "success"));
}

#[test]
fn stop_ends_a_running_service_and_waits_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("pid");
    let bus =
        TestBus::start_with(&[unit(&format!("drover-agent.service;simple;active;echo $$ > '{}'; exec sleep 600", pidfile.display()))]);
    let sd = bus.systemd();
    assert_eq!(state(&sd, "drover-agent.service"), triple("active", "running", "success"));
    let deadline = Instant::now() + WAIT;
    let pid = loop {
        if let Ok(text) = std::fs::read_to_string(&pidfile)
            && let Ok(pid) = text.trim().parse::<i32>()
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the service never wrote its pid");
        std::thread::sleep(Duration::from_millis(10));
    };
    sd.stop_unit("drover-agent.service").expect("stop");
    // The job ended when the process did.
    assert_eq!(state(&sd, "drover-agent.service"), triple("inactive", "dead", "success"));
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err(), "the process is gone");
    // Stopping a stopped unit is a no-op job; starting it runs it again.
    sd.stop_unit("drover-agent.service").expect("stop again");
    sd.start_unit("drover-agent.service").expect("start");
    assert_eq!(state(&sd, "drover-agent.service"), triple("active", "running", "success"));
}

#[test]
fn disable_unit_files_unlinks_once_and_unknown_units_are_no_such_unit() {
    let bus = TestBus::start_with(&[unit("drover-agent.service;simple;inactive;true"), unit("maas_hardware_sync.timer;timer;inactive")]);
    let sd = bus.systemd();
    assert_eq!(bus.unit_file_state("drover-agent.service"), "enabled");
    assert_eq!(
        sd.disable_unit_files(&["drover-agent.service"]).expect("disable"),
        vec!["unlink /etc/systemd/system/multi-user.target.wants/drover-agent.service".to_owned()]
    );
    assert_eq!(bus.unit_file_state("drover-agent.service"), "disabled");
    assert!(sd.disable_unit_files(&["drover-agent.service"]).expect("again").is_empty(), "already disabled: no changes");
    assert_eq!(bus.unit_file_state("maas_hardware_sync.timer"), "enabled");
    let no_such = |r: Result<(), SystemdError>, method: &str| match r {
        Err(SystemdError::Call { method: m, message, .. }) => {
            assert_eq!(m, method);
            assert!(message.starts_with("org.freedesktop.systemd1.NoSuchUnit"), "{message}");
        }
        other => panic!("expected NoSuchUnit from {method}, got {other:?}"),
    };
    no_such(sd.start_unit("nothing.service"), "StartUnit");
    no_such(sd.stop_unit("nothing.service"), "StopUnit");
    no_such(sd.restart_unit("nothing.timer"), "RestartUnit");
    no_such(sd.disable_unit_files(&["nothing.service"]).map(|_| ()), "DisableUnitFiles");
}

/// `node.uninstall` over D-Bus: the task disables the agent's unit and removes its files and
/// secrets while the unit keeps running; `finish` then stops it.
#[test]
fn uninstall_disables_the_agent_unit_and_finish_stops_it() {
    use drover_agent::tasks::{TaskEnv, TaskSettings, uninstall};
    use drover_proto::report::StepOutcome;

    let dir = tempfile::tempdir().expect("tempdir");
    let bus = TestBus::start_with(&[unit("drover-agent.service;simple;active;exec sleep 600")]);
    let sd = bus.systemd();
    let paths: Vec<PathBuf> = ["drover-agent.service", "drover-agent", "agent.toml"].iter().map(|f| dir.path().join(f)).collect();
    for p in &paths {
        std::fs::write(p, "x").expect("write");
    }
    let state_dir = dir.path().join("state");
    std::fs::create_dir(&state_dir).expect("mkdir");
    for f in uninstall::SECRET_FILES {
        std::fs::write(state_dir.join(f), "secret").expect("write");
    }
    let settings = TaskSettings { uninstall_paths: paths.clone(), ..TaskSettings::default() };
    let env = TaskEnv {
        settings: &settings,
        runner: &drover_agent::exec::SystemRunner,
        systemd: &sd,
        clock: &drover_agent::timekeeping::SystemClock,
        state_dir: &state_dir,
    };
    let steps = uninstall::run(false, &env);
    let outcomes: Vec<StepOutcome> = steps.iter().map(|s| s.outcome).collect();
    let mut want = vec![StepOutcome::Ok; 7];
    want.push(StepOutcome::Skipped);
    assert_eq!(outcomes, want, "{steps:#?}");
    assert_eq!(steps[7].name, "stop-unit drover-agent.service");
    assert_eq!(bus.unit_file_state("drover-agent.service"), "disabled");
    assert!(paths.iter().all(|p| !p.exists()));
    assert!(uninstall::SECRET_FILES.iter().all(|f| !state_dir.join(f).exists()));
    assert_eq!(state(&sd, "drover-agent.service"), triple("active", "running", "success"), "still running to report");
    uninstall::finish(&env).expect("stop");
    assert_eq!(state(&sd, "drover-agent.service"), triple("inactive", "dead", "success"));
}
