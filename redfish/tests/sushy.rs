//! The Redfish client against a real third-party Redfish service: OpenStack's
//! `sushy-emulator --fake` (PyPI `sushy-tools`; the README's test command installs it), with
//! HTTP Basic authentication from a bcrypt htpasswd file, each test on its own port and state
//! directory.
//!
//! - `power_on_then_off_converges_through_the_allowed_reset_types`
//! - `a_wrong_password_is_refused_and_changes_nothing`
//! - `an_unknown_system_is_refused_naming_it`
//! - `a_bmc_that_refuses_power_off_is_reported_as_refused`
//! - `https_with_the_bmcs_own_certificate_works_and_an_untrusted_one_is_refused`
//! - `simple_update_reaches_the_emulators_handler_which_has_no_firmware_in_fake_mode`
//! - `power_cycle_without_an_advertised_power_cycle_is_off_then_on`

use std::time::{Duration, Instant};

use drover_devkit::sushy::{SUSHY_PASSWORD as PASS, SUSHY_USER as USER, Sushy, SushyOptions, SushySystem, loopback_certificate};
use drover_redfish::{PowerTarget, RedfishClient, RedfishConfig, RedfishError};

const OFF: &str = "11111111-2222-3333-4444-000000000001";
const ON: &str = "11111111-2222-3333-4444-000000000002";

fn systems() -> Vec<SushySystem> {
    vec![
        SushySystem { uuid: OFF.into(), name: "gpu-off".into(), power_state: "Off".into() },
        SushySystem { uuid: ON.into(), name: "gpu-on".into(), power_state: "On".into() },
    ]
}

fn start(extra: &str) -> Sushy {
    Sushy::start(&SushyOptions { systems: systems(), tls: None, extra: extra.into() }).expect("sushy-emulator")
}

fn client(e: &Sushy, password: &str) -> RedfishClient {
    let mut c = RedfishConfig::new(e.url(), USER, password);
    c.allow_plain_http = true;
    // The emulator applies a change 0–11 s after accepting it.
    c.converge_timeout = Duration::from_secs(40);
    c.poll_interval = Duration::from_millis(250);
    RedfishClient::new(c).expect("client")
}

#[tokio::test]
async fn power_on_then_off_converges_through_the_allowed_reset_types() {
    let e = start("");
    let c = client(&e, PASS);
    let systems = c.systems().await.expect("systems");
    assert_eq!(systems.len(), 2, "{systems:?}");
    let uri = format!("/redfish/v1/Systems/{OFF}");
    let before = c.system(&uri).await.expect("read");
    assert_eq!(before.power_state, "Off");
    assert!(before.allowed.iter().any(|a| a == "On"), "{:?}", before.allowed);
    let on = c.set_power(&uri, PowerTarget::On).await.expect("power on");
    assert_eq!(on.power_state, "On");
    assert_eq!(c.system(&uri).await.expect("read").power_state, "On", "the BMC itself says On");
    let off = c.set_power(&uri, PowerTarget::Off).await.expect("power off");
    assert_eq!(off.power_state, "Off");
    // Already there: nothing is sent, the answer is immediate.
    let t = Instant::now();
    assert_eq!(c.set_power(&uri, PowerTarget::Off).await.expect("no-op").power_state, "Off");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_wrong_password_is_refused_and_changes_nothing() {
    let e = start("");
    let uri = format!("/redfish/v1/Systems/{ON}");
    let err = client(&e, "not-the-password").set_power(&uri, PowerTarget::Off).await.expect_err("refused");
    assert!(matches!(err, RedfishError::Refused { status: 401, .. }), "{err}");
    assert!(!err.to_string().contains("not-the-password"), "no credential in an error: {err}");
    assert_eq!(client(&e, PASS).system(&uri).await.expect("read").power_state, "On");
}

#[tokio::test]
async fn an_unknown_system_is_refused_naming_it() {
    let e = start("");
    let err = client(&e, PASS).set_power("/redfish/v1/Systems/no-such-machine", PowerTarget::On).await.expect_err("404");
    match &err {
        RedfishError::Refused { uri, status: 404, message } => {
            assert!(uri.ends_with("/Systems/no-such-machine") && message.contains("no-such-machine"), "{err}");
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_bmc_that_refuses_power_off_is_reported_as_refused() {
    let e = start("SUSHY_EMULATOR_DISABLE_POWER_OFF = True");
    let c = client(&e, PASS);
    let uri = format!("/redfish/v1/Systems/{ON}");
    let err = c.set_power(&uri, PowerTarget::Off).await.expect_err("refused");
    assert!(matches!(err, RedfishError::Refused { status: 400, .. }), "{err}");
    assert_eq!(c.system(&uri).await.expect("read").power_state, "On", "a refusal changes nothing");
}

#[tokio::test]
async fn https_with_the_bmcs_own_certificate_works_and_an_untrusted_one_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key, pem) = loopback_certificate(dir.path()).expect("cert");
    let e = Sushy::start(&SushyOptions { systems: systems(), tls: Some((cert, key)), extra: String::new() }).expect("sushy");
    assert!(e.url().starts_with("https://"));
    let mut config = RedfishConfig::new(e.url(), USER, PASS);
    config.ca_pem = Some(pem.into_bytes());
    let c = RedfishClient::new(config).expect("client");
    // The emulator speaks TLS 1.2 only; the client allows it for BMCs.
    assert_eq!(c.system(&format!("/redfish/v1/Systems/{ON}")).await.expect("read over TLS 1.2").power_state, "On");
    let other = loopback_certificate(tempfile::tempdir().expect("tempdir").path()).expect("cert").2;
    let mut config = RedfishConfig::new(e.url(), USER, PASS);
    config.ca_pem = Some(other.into_bytes());
    let err = RedfishClient::new(config).expect("client").systems().await.expect_err("untrusted");
    assert!(matches!(err, RedfishError::Unreachable { .. }), "{err}");
}

#[tokio::test]
async fn simple_update_reaches_the_emulators_handler_which_has_no_firmware_in_fake_mode() {
    // The fake driver keeps no firmware versions: the emulator checks the body, finds the
    // target system, then answers 500 "Failed fetching BIOS information". The client reports
    // that as the BMC's refusal, with its message; the success path and the 202 task monitor
    // are tested against Drover's fake shelf (`shelf.rs`).
    let e = start("");
    let c = client(&e, PASS);
    let uri = format!("/redfish/v1/Systems/{ON}");
    let err = c.simple_update("https://fw.example/bios-2.1.bin", std::slice::from_ref(&uri)).await.expect_err("no firmware in fake mode");
    assert!(matches!(&err, RedfishError::Refused { status: 500, message, .. } if message.contains("BIOS")), "{err}");
    let err = c.simple_update("https://fw.example/x.bin", &[]).await.expect_err("no targets");
    assert!(matches!(err, RedfishError::Refused { status: 400, .. }), "{err}");
}

#[tokio::test]
async fn power_cycle_without_an_advertised_power_cycle_is_off_then_on() {
    // The emulator advertises no PowerCycle (and 501s it): the client powers off, then on.
    let e = start("");
    let c = client(&e, PASS);
    let uri = format!("/redfish/v1/Systems/{ON}");
    assert!(!c.system(&uri).await.expect("read").allowed.iter().any(|a| a == "PowerCycle"));
    assert_eq!(c.power_cycle(&uri).await.expect("cycle").power_state, "On");
    // An off system is simply powered on.
    let off = format!("/redfish/v1/Systems/{OFF}");
    assert_eq!(c.power_cycle(&off).await.expect("on").power_state, "On");
}
