//! Helpers of the rack and power-shelf end-to-end tests: real device services on loopback
//! (Drover's fake Redfish power shelf, OpenStack's sushy-emulator), each behind its own
//! self-signed certificate that the device's credentials trust, and calls against a
//! coordinator's API (in-process [`crate::Harness`] or a process, through [`Endpoint`]).

use std::time::{Duration, Instant};

use drover_devkit::fake_shelf::{DEFAULT_PASSWORD, DEFAULT_USER, FakeShelf, FakeShelfOptions};
use drover_devkit::sushy::{SUSHY_PASSWORD, SUSHY_USER, Sushy, SushyOptions, SushySystem, loopback_certificate};
use serde_json::{Value, json};

use crate::Endpoint;

/// How long a device may take to reach a state through the controllers.
pub const DEVICE_WAIT: Duration = Duration::from_secs(120);

/// The `[devices]` section of a test coordinator's configuration: fast ticks, short bounds.
pub const DEVICES_SECTION: &str = "[devices]\ntick_ms = 100\nrequest_timeout_secs = 5\nconverge_timeout_secs = 15\npoll_ms = 100\n";

/// A fake power shelf (PMC) and the certificate it presents.
pub struct Pmc {
    /// The fake.
    pub fake: FakeShelf,
    /// Its certificate (what its credentials' `caPem` trusts).
    pub pem: String,
    _dir: tempfile::TempDir,
}

impl Pmc {
    /// A fake shelf whose outlets take `delay_ms` to switch.
    pub fn start(delay_ms: u64) -> Pmc {
        Pmc::start_with_systems(delay_ms, &[])
    }

    /// Like [`Pmc::start`], also serving ComputerSystems `systems` (a BMC that can be told
    /// never to converge).
    pub fn start_with_systems(delay_ms: u64, systems: &[&str]) -> Pmc {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key, pem) = loopback_certificate(dir.path()).expect("cert");
        let fake = FakeShelf::start(&FakeShelfOptions {
            delay_ms,
            name: Some("PS-9000".into()),
            serial: Some("SN-4711".into()),
            systems: systems.iter().map(|s| (*s).to_owned()).collect(),
            ..FakeShelfOptions::new(cert, key)
        })
        .expect("fake shelf");
        Pmc { fake, pem, _dir: dir }
    }

    /// The outlets' power states as the fake reads them.
    pub fn outlets(&self) -> Value {
        self.fake.control("GET", "state", None).expect("fake state")["outlets"].clone()
    }

    /// Every PowerControl the fake accepted, in order.
    pub fn actions(&self) -> Vec<Value> {
        self.fake.control("GET", "state", None).expect("fake state")["actions"].as_array().cloned().unwrap_or_default()
    }
}

/// A sushy-emulator over HTTPS with `systems` (uuid, power state), and its certificate.
pub struct Bmcs {
    /// The emulator.
    pub sushy: Sushy,
    /// Its certificate.
    pub pem: String,
    _dir: tempfile::TempDir,
}

impl Bmcs {
    /// Starts it; `extra` is more emulator configuration.
    pub fn start(systems: &[(&str, &str)], extra: &str) -> Bmcs {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key, pem) = loopback_certificate(dir.path()).expect("cert");
        let systems = systems
            .iter()
            .map(|(uuid, state)| SushySystem {
                uuid: (*uuid).into(),
                name: format!("sys-{}", &uuid[uuid.len() - 4..]),
                power_state: (*state).into(),
            })
            .collect();
        let sushy = Sushy::start(&SushyOptions { systems, tls: Some((cert, key)), extra: extra.into() }).expect("sushy-emulator");
        Bmcs { sushy, pem, _dir: dir }
    }

    /// A system's `PowerState` as the emulator reads it.
    pub async fn power_state(&self, uuid: &str) -> String {
        let mut c = drover_redfish::RedfishConfig::new(self.sushy.url(), SUSHY_USER, SUSHY_PASSWORD);
        c.ca_pem = Some(self.pem.clone().into_bytes());
        let client = drover_redfish::RedfishClient::new(c).expect("client");
        client.system(&format!("/redfish/v1/Systems/{uuid}")).await.expect("read").power_state
    }
}

/// An admin call; the answer as JSON (or the text as a JSON string).
pub async fn call(e: &Endpoint, method: &str, path: &str, body: Option<Value>) -> (String, Value) {
    let body = body.map(|b| b.to_string());
    let (code, text) = e.call(Some(&e.admin), method, path, body.as_deref()).await;
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Creates a rack (or finds it there already).
pub async fn rack(e: &Endpoint, name: &str) {
    let (code, v) = call(e, "POST", "/v1/racks", Some(json!({ "name": name, "hardwareType": "nvl72", "reason": "inventory" }))).await;
    assert!(code == "201" || code == "409", "{v}");
}

/// Adds a power shelf to `rack` at the fake, with credentials (`password` may be wrong).
pub async fn add_shelf(e: &Endpoint, rack: &str, p: &Pmc, name: &str, password: Option<&str>) -> String {
    let body = json!({ "rack": rack, "name": name, "endpoint": p.fake.url(), "credentialsPath": format!("racks/{rack}/{name}"),
        "credentials": { "username": DEFAULT_USER, "password": password.unwrap_or(DEFAULT_PASSWORD), "caPem": p.pem }, "reason": "inventory" });
    let (code, v) = call(e, "POST", "/v1/power-shelves", Some(body)).await;
    assert_eq!(code, "201", "{v}");
    v["id"].as_str().expect("id").to_owned()
}

/// A machine's BMC as a test gives it: the system's URL and the account.
pub struct MachineBmc<'a> {
    /// `https://…/redfish/v1/Systems/ID`.
    pub endpoint: String,
    /// The account.
    pub username: &'a str,
    /// Its password.
    pub password: &'a str,
    /// The BMC's certificate.
    pub pem: &'a str,
}

impl Bmcs {
    /// The BMC of the emulator's system `uuid`.
    pub fn machine(&self, uuid: &str) -> MachineBmc<'_> {
        MachineBmc {
            endpoint: format!("{}/redfish/v1/Systems/{uuid}", self.sushy.url()),
            username: SUSHY_USER,
            password: SUSHY_PASSWORD,
            pem: &self.pem,
        }
    }
}

impl Pmc {
    /// The BMC of the fake's system `id` (started with `systems`).
    pub fn machine(&self, id: &str) -> MachineBmc<'_> {
        MachineBmc {
            endpoint: format!("{}/redfish/v1/Systems/{id}", self.fake.url()),
            username: DEFAULT_USER,
            password: DEFAULT_PASSWORD,
            pem: &self.pem,
        }
    }
}

/// Creates a host, places it in `rack` and gives it `bmc`.
pub async fn add_machine(e: &Endpoint, rack: &str, hostname: &str, bmc: MachineBmc<'_>) -> String {
    let (code, v) = call(e, "POST", "/v1/hosts", Some(json!({ "hostname": hostname, "trustSha256": e.trust_sha256 }))).await;
    assert_eq!(code, "201", "{v}");
    let id = v["hostId"].as_str().or(v["id"].as_str()).expect("host id").to_owned();
    let (code, v) = call(e, "POST", &format!("/v1/hosts/{id}/rack"), Some(json!({ "rack": rack, "reason": "racked" }))).await;
    assert_eq!(code, "200", "{v}");
    let body = json!({ "endpoint": bmc.endpoint, "credentialsPath": format!("bmc/{hostname}"),
        "credentials": { "username": bmc.username, "password": bmc.password, "caPem": bmc.pem }, "reason": "cabled" });
    let (code, v) = call(e, "PUT", &format!("/v1/hosts/{id}/bmc"), Some(body)).await;
    assert_eq!(code, "200", "{v}");
    id
}

/// Reads `path` until `pred` holds on (status, body), bounded by [`DEVICE_WAIT`].
pub async fn until(e: &Endpoint, path: &str, what: &str, pred: impl Fn(&str, &Value) -> bool) -> Value {
    let deadline = Instant::now() + DEVICE_WAIT;
    loop {
        let (code, v) = call(e, "GET", path, None).await;
        if pred(&code, &v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{path} never {what}: {code} {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Events of one kind, oldest first.
pub async fn events(e: &Endpoint, kind: &str) -> Vec<Value> {
    let (code, v) = call(e, "GET", &format!("/v1/events?kind={kind}&limit=1000"), None).await;
    assert_eq!(code, "200", "{v}");
    v["items"].as_array().cloned().unwrap_or_default()
}
