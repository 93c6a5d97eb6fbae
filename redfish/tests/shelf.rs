//! The Redfish client against Drover's fake power shelf (`drover-devkit`'s `fake-shelf`
//! binary, a PMC's Redfish service with `PowerEquipment`, outlets and `UpdateService`), over
//! HTTPS with a fresh loopback certificate per test that the client trusts through
//! `RedfishConfig::ca_pem`. Each test runs its own fake on its own port and checks what the
//! shelf did through the fake's `/_fake/state` control call, not only through the client.
//!
//! - `shelf_power_off_and_on_switch_every_outlet_and_converge`
//! - `an_outlet_that_never_switches_is_not_converged_naming_it`
//! - `a_locked_outlet_is_refused_before_anything_is_sent`
//! - `a_busy_pmc_is_retried_after_retry_after`
//! - `a_wrong_password_is_refused_without_echoing_it`
//! - `simple_update_follows_the_task_monitor_to_completion`
//! - `an_untrusted_certificate_is_refused`
//! - `power_cycle_uses_an_advertised_power_cycle_and_ends_on`
//!
//! The binary is found the way `FakeShelfOptions`' default does (`default_binary()`):
//! `fake-shelf` in the directory above this test executable's `deps/`, i.e. the target
//! profile directory (`target/debug/fake-shelf`). `cargo test --workspace` builds every
//! binary first, so it is there; `cargo test -p drover-redfish` alone does not build a
//! dev-dependency's binaries, so run `cargo build -p drover-devkit --bins` before it (with
//! the same `CARGO_TARGET_DIR`).

use std::time::{Duration, Instant};

use drover_devkit::fake_shelf::{DEFAULT_PASSWORD as PASS, DEFAULT_USER as USER, FakeShelf, FakeShelfOptions};
use drover_devkit::sushy::loopback_certificate;
use drover_redfish::{PowerTarget, RedfishClient, RedfishConfig, RedfishError};
use serde_json::{Value, json};

const SHELF: &str = "/redfish/v1/PowerEquipment/PowerShelves/1";

/// A running fake and the PEM of the certificate it serves (kept with its directory).
struct Fake {
    shelf: FakeShelf,
    pem: String,
    _dir: tempfile::TempDir,
}

impl Fake {
    /// Starts the fake: outlets `A1`, `B1`, on, 200 ms per outlet move, then `tweak`.
    fn start(tweak: impl FnOnce(&mut FakeShelfOptions)) -> Fake {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key, pem) = loopback_certificate(dir.path()).expect("certificate");
        let mut options = FakeShelfOptions { delay_ms: 200, update_ms: 300, ..FakeShelfOptions::new(cert, key) };
        tweak(&mut options);
        assert!(
            options.binary.is_file(),
            "{} is missing: run `cargo build -p drover-devkit --bins` (same CARGO_TARGET_DIR) before `cargo test -p drover-redfish`",
            options.binary.display()
        );
        let shelf = FakeShelf::start(&options).expect("fake-shelf");
        assert!(shelf.url().starts_with("https://"), "{}", shelf.url());
        Fake { shelf, pem, _dir: dir }
    }

    /// A client that trusts the fake's own certificate.
    fn client(&self, password: &str) -> RedfishClient {
        let mut c = RedfishConfig::new(self.shelf.url(), USER, password);
        c.ca_pem = Some(self.pem.clone().into_bytes());
        c.converge_timeout = Duration::from_secs(20);
        c.poll_interval = Duration::from_millis(50);
        RedfishClient::new(c).expect("client")
    }

    fn control(&self, path: &str, body: &Value) -> Value {
        self.shelf.control("POST", path, Some(body)).unwrap_or_else(|e| panic!("/_fake/{path}: {e}"))
    }

    /// `GET /_fake/state`: the outlets now, every `PowerControl` answered, firmware, updates.
    fn state(&self) -> Value {
        self.shelf.control("GET", "state", None).expect("/_fake/state")
    }
}

fn actions(state: &Value) -> usize {
    state["actions"].as_array().expect("actions").len()
}

#[tokio::test]
async fn shelf_power_off_and_on_switch_every_outlet_and_converge() {
    let fake = Fake::start(|_| {});
    let c = fake.client(PASS);
    let shelves = c.power_shelves().await.expect("power shelves");
    assert_eq!(shelves, vec![SHELF.to_owned()], "found through root → PowerEquipment → PowerShelves");
    let shelf = c.shelf(&shelves[0]).await.expect("read the shelf");
    assert_eq!(shelf.uri, SHELF);
    assert_eq!(shelf.equipment_type, "PowerShelf");
    assert!(shelf.manufacturer.is_some() && shelf.model.is_some(), "{shelf:?}");
    assert_eq!(shelf.serial_number.as_deref(), Some("FS-0000001"));
    assert_eq!(shelf.firmware_version.as_deref(), Some("1.0.0"));
    let ids: Vec<&str> = shelf.outlets.iter().map(|o| o.uri.rsplit('/').next().unwrap_or_default()).collect();
    assert_eq!(ids, ["A1", "B1"]);
    assert!(shelf.outlets.iter().all(|o| !o.locked && o.control_target.is_some()), "{shelf:?}");
    assert_eq!(shelf.power_state(), "On");

    let off = c.set_shelf_power(SHELF, PowerTarget::Off).await.expect("power off");
    assert_eq!(off.power_state(), "Off");
    let state = fake.state();
    assert_eq!(state["outlets"], json!({"A1": "Off", "B1": "Off"}), "the shelf itself says Off");
    assert_eq!(state["actions"], json!([{"outlet": "A1", "powerState": "Off"}, {"outlet": "B1", "powerState": "Off"}]));
    assert_eq!(c.shelf(SHELF).await.expect("read").power_state(), "Off");

    let on = c.set_shelf_power(SHELF, PowerTarget::On).await.expect("power on");
    assert_eq!(on.power_state(), "On");
    let state = fake.state();
    assert_eq!(state["outlets"], json!({"A1": "On", "B1": "On"}));
    assert_eq!(actions(&state), 4);

    // Already there: nothing is sent.
    assert_eq!(c.set_shelf_power(SHELF, PowerTarget::On).await.expect("no-op").power_state(), "On");
    assert_eq!(actions(&fake.state()), 4, "a second On sends no PowerControl");
}

#[tokio::test]
async fn an_outlet_that_never_switches_is_not_converged_naming_it() {
    let fake = Fake::start(|_| {});
    fake.control("stuck", &json!({"outlet": "B1", "stuck": true}));
    let mut config = RedfishConfig::new(fake.shelf.url(), USER, PASS);
    config.ca_pem = Some(fake.pem.clone().into_bytes());
    config.converge_timeout = Duration::from_secs(2);
    config.poll_interval = Duration::from_millis(50);
    let c = RedfishClient::new(config).expect("client");
    let t = Instant::now();
    let err = c.set_shelf_power(SHELF, PowerTarget::Off).await.expect_err("B1 never switches");
    match &err {
        RedfishError::NotConverged { uri, target, last, .. } => {
            assert!(uri.ends_with("/Outlets/B1"), "{err}");
            assert_eq!((target.as_str(), last.as_str()), ("Off", "On"), "{err}");
        }
        other => panic!("{other}"),
    }
    assert!(t.elapsed() >= Duration::from_secs(2), "bounded by converge_timeout, not sooner");
    let state = fake.state();
    assert_eq!(state["outlets"], json!({"A1": "Off", "B1": "On"}));
    assert_eq!(actions(&state), 2, "both outlets were asked");
}

#[tokio::test]
async fn a_locked_outlet_is_refused_before_anything_is_sent() {
    let fake = Fake::start(|_| {});
    fake.control("lock", &json!({"outlet": "A1", "locked": true}));
    let c = fake.client(PASS);
    assert!(c.shelf(SHELF).await.expect("read").outlets[0].locked);
    let err = c.set_shelf_power(SHELF, PowerTarget::Off).await.expect_err("A1 is locked");
    match &err {
        RedfishError::Protocol { uri, reason } => assert!(uri.ends_with("/Outlets/A1") && reason.contains("PowerControlLocked"), "{err}"),
        other => panic!("{other}"),
    }
    let state = fake.state();
    assert_eq!(state["actions"], json!([]), "no outlet was switched (B1 neither)");
    assert_eq!(state["outlets"], json!({"A1": "On", "B1": "On"}));
    // A locked outlet already at the target is no obstacle: nothing needs switching.
    assert_eq!(c.set_shelf_power(SHELF, PowerTarget::On).await.expect("already on").power_state(), "On");
    assert_eq!(actions(&fake.state()), 0);
}

#[tokio::test]
async fn a_busy_pmc_is_retried_after_retry_after() {
    let fake = Fake::start(|_| {});
    let c = fake.client(PASS);
    fake.control("busy", &json!({"count": 2, "retryAfter": 1}));
    let t = Instant::now();
    let shelf = c.shelf(SHELF).await.expect("read after two 503s");
    assert_eq!(shelf.outlets.len(), 2);
    assert!(t.elapsed() >= Duration::from_secs(2), "waited Retry-After (1 s) twice: {:?}", t.elapsed());
    // More 503s than the client retries (3): the BMC's refusal, with its message.
    fake.control("busy", &json!({"count": 4, "retryAfter": 0}));
    let err = c.shelf(SHELF).await.expect_err("still busy");
    assert!(matches!(&err, RedfishError::Refused { status: 503, message, .. } if message.contains("temporarily unavailable")), "{err}");
    assert_eq!(c.shelf(SHELF).await.expect("the spell is over").outlets.len(), 2);
}

#[tokio::test]
async fn a_wrong_password_is_refused_without_echoing_it() {
    let fake = Fake::start(|_| {});
    let wrong = "not-the-shelf-pa55";
    let c = fake.client(wrong);
    let err = c.power_shelves().await.expect_err("401");
    assert!(matches!(err, RedfishError::Refused { status: 401, .. }), "{err}");
    let err = c.set_shelf_power(SHELF, PowerTarget::Off).await.expect_err("401");
    assert!(matches!(err, RedfishError::Refused { status: 401, .. }), "{err}");
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(wrong) && !text.contains(PASS), "no credential in an error: {text}");
    }
    assert_eq!(actions(&fake.state()), 0, "nothing was switched");
}

#[tokio::test]
async fn simple_update_follows_the_task_monitor_to_completion() {
    let fake = Fake::start(|o| o.update_ms = 300);
    let c = fake.client(PASS);
    let target = [SHELF.to_owned()];
    c.simple_update("https://fw.example/ps-fw-2.1.bin", &target).await.expect("update");
    assert_eq!(c.shelf(SHELF).await.expect("read").firmware_version.as_deref(), Some("ps-fw-2.1"));
    assert_eq!(fake.state()["updates"], json!([{"imageUri": "https://fw.example/ps-fw-2.1.bin", "targets": [SHELF]}]));

    fake.control("update-fail", &json!({"fail": true, "message": "image signature invalid"}));
    let err = c.simple_update("https://fw.example/ps-fw-3.0.bin", &target).await.expect_err("the task fails");
    let text = err.to_string();
    assert!(text.contains("Exception") && text.contains("image signature invalid"), "{text}");
    assert!(matches!(&err, RedfishError::Refused { uri, .. } if uri.contains("/TaskService/TaskMonitors/")), "{err}");
    assert_eq!(c.shelf(SHELF).await.expect("read").firmware_version.as_deref(), Some("ps-fw-2.1"), "unchanged");

    let err = c.simple_update("https://fw.example/x.bin", &["/redfish/v1/Systems/1".to_owned()]).await.expect_err("bad target");
    assert!(matches!(&err, RedfishError::Refused { status: 400, message, .. } if message.contains("/redfish/v1/Systems/1")), "{err}");
    assert_eq!(fake.state()["updates"].as_array().map(Vec::len), Some(2), "the refused one was not accepted");
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused() {
    let fake = Fake::start(|_| {});
    let dir = tempfile::tempdir().expect("tempdir");
    let other = loopback_certificate(dir.path()).expect("certificate").2;
    let mut config = RedfishConfig::new(fake.shelf.url(), USER, PASS);
    config.ca_pem = Some(other.into_bytes());
    let err = RedfishClient::new(config).expect("client").power_shelves().await.expect_err("untrusted");
    assert!(matches!(err, RedfishError::Unreachable { .. }), "{err}");
    // The fake's own certificate works on the same service.
    assert_eq!(fake.client(PASS).power_shelves().await.expect("trusted"), vec![SHELF.to_owned()]);
}

#[tokio::test]
async fn power_cycle_uses_an_advertised_power_cycle_and_ends_on() {
    let fake = Fake::start(|o| o.systems = vec!["node-1".into()]);
    let c = fake.client(PASS);
    let uri = "/redfish/v1/Systems/node-1";
    assert!(c.system(uri).await.expect("read").allowed.iter().any(|a| a == "PowerCycle"));
    assert_eq!(c.power_cycle(uri).await.expect("cycle").power_state, "On");
    let resets = fake.state()["resets"].clone();
    assert_eq!(resets, json!([{ "system": "node-1", "resetType": "PowerCycle" }]), "one reset, the advertised one");
}
