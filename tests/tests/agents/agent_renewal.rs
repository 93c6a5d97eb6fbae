//! Certificate renewal through the agent's pull loop against a real coordinator: a host
//! enrolled by the real bootstrap command, its agent's clock moved past two thirds of the
//! certificate's life, renews in its next pass — a new certificate for the same key, naming
//! the same host, written atomically — and keeps checking in with it; before that point it
//! does not renew.

use std::sync::{Arc, Mutex};

use drover_agent::admit::Admitted;
use drover_agent::pull::{ActivationOutcome, Agent, Clock, HostOps, PullSettings, SharedClient};
use drover_agent::state::{CERT, KEY, StateDir};
use drover_client::{ClientIdentity, CoordinatorClient};
use drover_proto::report::{HealthReport, ProbeResult};
use drover_proto::spec::ProbeSpec;
use drover_proto::time::Time;
use drover_tests::{Harness, wall_now};

/// A host side that has nothing to report and must never be asked to act.
struct Idle;

impl HostOps for Idle {
    fn health(&self) -> Option<HealthReport> {
        None
    }
    fn current_generation(&self) -> Option<String> {
        None
    }
    fn probes(&self, _: &[ProbeSpec]) -> Vec<ProbeResult> {
        Vec::new()
    }
    fn activate(&self, _: &Admitted) -> ActivationOutcome {
        panic!("nothing was dispatched: nothing may be activated")
    }
    fn resume(&self) -> Option<ActivationOutcome> {
        None
    }
    fn run_task(&self, _: &drover_proto::task::Task) -> drover_proto::report::TaskResult {
        panic!("nothing was queued: no task may run")
    }
    fn finish_uninstall(&self) -> Result<(), drover_agent::systemd::SystemdError> {
        panic!("no uninstall ran")
    }
}

/// The agent's clock, set by the test.
struct Manual(Mutex<Time>);

impl Clock for Manual {
    fn now(&self) -> Time {
        *self.0.lock().expect("clock")
    }
}

fn serial(pem: &[u8]) -> String {
    let der = drover_client::tls::parse_certificates("cert", pem).expect("pem");
    drover_engine::identity::cert_serial_hex(&der[0]).expect("serial")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_renews_its_certificate_at_two_thirds_of_its_life() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root");
    let host = h.bootstrap_host("gpu-renew-01", &root).await;
    let state = StateDir::open(&root.join("var/lib/drover")).expect("state");
    let ca = drover_client::tls::load_ca(&h.ca).expect("ca");
    let make = {
        let (url, ca) = (h.url.clone(), ca.clone());
        Arc::new(move |id: ClientIdentity| {
            CoordinatorClient::new("test", std::slice::from_ref(&url), &ca, Some(id), std::time::Duration::from_secs(30))
        })
    };
    let identity = ClientIdentity::from_pem(&state.read(CERT).expect("cert"), &state.read(KEY).expect("key")).expect("identity");
    let client = SharedClient::new(make(identity).expect("client"));
    let clock = Arc::new(Manual(Mutex::new(wall_now())));
    let mut agent =
        Agent::new(state.clone(), client, make, Arc::new(Idle), clock.clone(), PullSettings::default(), "boot".into(), Vec::new())
            .expect("agent");

    let before = state.read(CERT).expect("cert");
    let key_before = state.read(KEY).expect("key");
    agent.pass().await.expect("a pass at enrollment time");
    assert_eq!(state.read(CERT).expect("cert"), before, "renewed far too early");

    // 25 of 30 days later: past 2/3 (plus the largest jitter) of the life.
    *clock.0.lock().expect("clock") = wall_now().plus_secs(25 * 86_400);
    agent.pass().await.expect("the renewing pass");
    let after = state.read(CERT).expect("cert");
    assert_ne!(after, before, "the certificate was not renewed");
    assert_ne!(serial(&after), serial(&before), "a renewal is a new certificate");
    assert_eq!(state.read(KEY).expect("key"), key_before, "the host's key stays on the host, unchanged");
    drover_agent::enroll::check_names(
        &drover_client::tls::parse_certificates("cert", &after).expect("pem")[0],
        &host.to_string(),
        "gpu-renew-01",
    )
    .expect("the renewed certificate names the same host");

    // The next pass checks in with the renewed certificate (a fresh client, a fresh handshake).
    agent.pass().await.expect("a pass with the renewed certificate");
    let certs = h.running.app.store.list_certs(Some(host)).expect("certs");
    assert!(certs.iter().any(|c| c.cert.serial == serial(&after)), "the coordinator recorded the renewed certificate: {certs:?}");
}
