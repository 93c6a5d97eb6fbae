//! The private bus with the devkit's own `fake-systemd` (this test also makes
//! `cargo test --workspace` build that binary, which the end-to-end tests run).

use drover_agent::systemd::Systemd;
use drover_agent::systemd::dbus::DbusSystemd;
use drover_devkit::bus::PrivateBus;

#[test]
fn the_agents_systemd_client_works_on_a_private_bus() {
    let dir = tempfile::tempdir().expect("tmp");
    let bus = PrivateBus::start_with(
        dir.path(),
        env!("CARGO_BIN_EXE_fake-systemd").as_ref(),
        &["broken.service;oneshot;inactive;exit 3".to_owned()],
    )
    .expect("bus starts");
    assert!(bus.socket().starts_with(dir.path()), "the socket lives in the sandbox");
    let sd = DbusSystemd::at_address(bus.address()).expect("connects");
    assert_eq!(sd.failed_units().expect("lists"), Vec::<String>::new());
    assert!(sd.start_unit("broken.service").is_err(), "a failing oneshot reports its failure");
    assert_eq!(sd.failed_units().expect("lists"), vec!["broken.service".to_owned()]);
}
