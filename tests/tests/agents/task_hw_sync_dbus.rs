//! `node.hw_sync_reseed` end to end over systemd's D-Bus API: the real task code with the
//! real [`DbusSystemd`](drover_agent::systemd::dbus::DbusSystemd) against the `fake-systemd` test service on a private `dbus-daemon`
//! (units `maas_hardware_sync.timer` and a oneshot `maas_hardware_sync.service`), writing
//! the credentials into a temporary directory.
//!
//! These tests need `/usr/bin/dbus-daemon` (CI installs it) and fail loudly without it.

#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use drover_agent::exec::SystemRunner;
use drover_agent::systemd::Systemd;
use drover_agent::tasks::{TaskEnv, TaskSettings, hw_sync};
use drover_agent::timekeeping::SystemClock;
use drover_proto::report::{StepOutcome, StepResult};
use drover_proto::task::Secret;
use drover_tests::bus::TestBus;

const TIMER: &str = "maas_hardware_sync.timer";
const SERVICE: &str = "maas_hardware_sync.service";

/// The MAAS units: the timer (stopped), and the oneshot sync running `script`.
fn maas_units(script: &str) -> Vec<String> {
    vec![format!("{TIMER};timer;inactive"), format!("{SERVICE};oneshot;inactive;{script}")]
}

struct Fixture {
    dir: tempfile::TempDir,
    settings: TaskSettings,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = TaskSettings { maas_creds_file: dir.path().join("etc/maas/maas-machine-creds.yml"), ..TaskSettings::default() };
        Fixture { dir, settings }
    }

    fn creds(&self) -> &Path {
        &self.settings.maas_creds_file
    }

    fn run(&self, sd: &dyn Systemd, params: &hw_sync::Params<'_>) -> Vec<StepResult> {
        let env = TaskEnv { settings: &self.settings, runner: &SystemRunner, systemd: sd, clock: &SystemClock, state_dir: self.dir.path() };
        hw_sync::run(params, &env)
    }

    fn marker(&self) -> PathBuf {
        self.dir.path().join("synced")
    }
}

fn outcomes(steps: &[StepResult]) -> Vec<StepOutcome> {
    steps.iter().map(|s| s.outcome).collect()
}

struct Creds {
    ck: Secret,
    tk: Secret,
    ts: Secret,
}

impl Creds {
    fn new() -> Creds {
        Creds { ck: Secret::new("cK9xq7"), tk: Secret::new("tKm2Lp"), ts: Secret::new("tSsecretValue42") }
    }

    fn params<'a>(&'a self, maas_url: &'a str, system_id: &'a str) -> hw_sync::Params<'a> {
        hw_sync::Params { maas_url, system_id, consumer_key: &self.ck, token_key: &self.tk, token_secret: &self.ts }
    }
}

#[test]
fn reseed_writes_the_creds_restarts_the_timer_and_runs_the_sync() {
    let fx = Fixture::new();
    let bus = TestBus::start_with(&maas_units(&format!("echo synced >> '{}'", fx.marker().display())));
    let sd = bus.systemd();
    let creds = Creds::new();
    let steps = fx.run(&sd, &creds.params("http://10.20.0.2:5240/MAAS", "4y3h7r"));
    assert_eq!(outcomes(&steps), [StepOutcome::Ok; 4], "{steps:#?}");
    assert_eq!(
        std::fs::read_to_string(fx.creds()).expect("creds written"),
        "reporting:\n  maas:\n    consumer_key: 'cK9xq7'\n    endpoint: 'http://10.20.0.2:5240/MAAS/metadata/status/4y3h7r'\n    token_key: 'tKm2Lp'\n    token_secret: 'tSsecretValue42'\n"
    );
    let meta = std::fs::metadata(fx.creds()).expect("meta");
    assert!(meta.is_file());
    assert_eq!(meta.mode() & 0o7777, 0o600);
    // The timer was restarted (armed), the sync ran once through StartUnit and succeeded.
    let timer = sd.unit_status(TIMER).expect("status").expect("loaded");
    assert_eq!((timer.active_state.as_str(), timer.sub_state.as_str()), ("active", "waiting"));
    assert_eq!(std::fs::read_to_string(fx.marker()).expect("the sync ran"), "synced\n");
    let service = sd.unit_status(SERVICE).expect("status").expect("loaded");
    assert!(service.succeeded(), "{service:?}");
    assert_eq!(steps[3].data["timer"], "active/waiting");
    // Nothing but the creds file in its directory (the temporary file was renamed).
    assert_eq!(std::fs::read_dir(fx.creds().parent().expect("dir")).expect("ls").count(), 1);
    // The step results carry no secret.
    let json = serde_json::to_string(&steps).expect("json");
    for secret in ["cK9xq7", "tKm2Lp", "tSsecretValue42"] {
        assert!(!json.contains(secret), "{json}");
    }
    // A second run rewrites in place and runs the sync again.
    assert_eq!(outcomes(&fx.run(&sd, &creds.params("http://10.20.0.2:5240/MAAS", "4y3h7r"))), [StepOutcome::Ok; 4]);
    assert_eq!(std::fs::read_to_string(fx.marker()).expect("the sync ran"), "synced\nsynced\n");
}

#[test]
fn a_failing_sync_fails_its_step_and_verify_is_not_run() {
    let fx = Fixture::new();
    let bus = TestBus::start_with(&maas_units("exit 1"));
    let sd = bus.systemd();
    let creds = Creds::new();
    let steps = fx.run(&sd, &creds.params("https://maas.example/MAAS", "abc123"));
    assert_eq!(outcomes(&steps), [StepOutcome::Ok, StepOutcome::Ok, StepOutcome::Error, StepOutcome::Skipped], "{steps:#?}");
    assert_eq!(steps[2].name, format!("start-service {SERVICE}"));
    assert!(steps[2].message.contains("job failed"), "{}", steps[2].message);
    assert_eq!(sd.unit_status(SERVICE).expect("status").expect("loaded").active_state, "failed");
}

#[test]
fn a_host_without_the_timer_fails_with_no_such_unit() {
    let fx = Fixture::new();
    let bus = TestBus::start_with(&[format!("{SERVICE};oneshot;inactive;true")]);
    let creds = Creds::new();
    let steps = fx.run(&bus.systemd(), &creds.params("http://maas/MAAS", "abc123"));
    assert_eq!(outcomes(&steps), [StepOutcome::Ok, StepOutcome::Error, StepOutcome::Skipped, StepOutcome::Skipped], "{steps:#?}");
    assert!(steps[1].message.contains("org.freedesktop.systemd1.NoSuchUnit"), "{}", steps[1].message);
}

#[test]
fn injection_attempts_are_refused_before_anything_is_written_or_started() {
    let fx = Fixture::new();
    let bus = TestBus::start_with(&maas_units(&format!("echo synced >> '{}'", fx.marker().display())));
    let sd = bus.systemd();
    let creds = Creds::new();
    for (url, id) in [
        ("http://maas/MAAS'\n    token_secret: 'x", "abc123"),
        ("http://maas/MAAS\"", "abc123"),
        ("http://maas/MAAS #x", "abc123"),
        ("http://maas/MAAS", "abc123\nreporting: {}"),
        ("http://maas/MAAS", "abc'123"),
        ("http://maas/MAAS", "../../x"),
    ] {
        let steps = fx.run(&sd, &creds.params(url, id));
        assert_eq!(steps.len(), 1, "{url:?} {id:?}: {steps:#?}");
        assert_eq!((steps[0].name.as_str(), steps[0].outcome), ("validate", StepOutcome::Error));
    }
    let evil = Secret::new("abc\nreporting: {}");
    let params = hw_sync::Params { token_secret: &evil, ..creds.params("http://maas/MAAS", "abc123") };
    let steps = fx.run(&sd, &params);
    assert_eq!(outcomes(&steps), [StepOutcome::Error]);
    assert!(!steps[0].message.contains("reporting"), "the secret is not echoed: {}", steps[0].message);
    assert!(!fx.creds().exists() && !fx.creds().parent().expect("dir").exists(), "nothing written");
    assert!(!fx.marker().exists(), "the sync never ran");
    assert_eq!(sd.unit_status(TIMER).expect("status").expect("loaded").active_state, "inactive", "the timer was not touched");
}
