//! The `fake-shelf` binary as a process, driven over real HTTPS by reqwest (independent of
//! Drover's Redfish client) with a throwaway self-signed certificate: TLS 1.2 and 1.3, Basic
//! authentication, the resource tree from the service root down to the outlets' action
//! targets, `PowerControl` with its refusals, every control call, firmware updates
//! (`SimpleUpdate` → 202 → task monitor 202 → 200, the failure switch, refused bodies), and
//! the optional `ComputerSystem`s (`Reset` converging after the delay, a stuck system that
//! never changes, refused `ResetType`s, Basic authentication). Waiting for a state is
//! bounded polling, never a sleep sized to the delay.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use drover_devkit::fake_shelf::{FakeShelf, FakeShelfOptions};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

const ROOT: &str = "/redfish/v1/";
const SHELF: &str = "/redfish/v1/PowerEquipment/PowerShelves/1";
const A1: &str = "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1";
const A1_TARGET: &str = "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1/Actions/Outlet.PowerControl";
const B1_TARGET: &str = "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/B1/Actions/Outlet.PowerControl";
const SIMPLE_UPDATE: &str = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate";
const MONITOR_1: &str = "/redfish/v1/TaskService/TaskMonitors/1";

struct Shelf {
    fake: FakeShelf,
    http: reqwest::Client,
    user: String,
    password: String,
    _dir: tempfile::TempDir,
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

/// A client that trusts `cert` and speaks only `version` (None: 1.2 and 1.3).
fn client(cert: &Path, version: Option<&'static rustls::SupportedProtocolVersion>) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(cert).unwrap();
    for c in CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        version.map_or_else(|| vec![&rustls::version::TLS13, &rustls::version::TLS12], |v| vec![v]);
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder().use_preconfigured_tls(tls).timeout(Duration::from_secs(20)).build().unwrap()
}

impl Shelf {
    fn start(configure: impl FnOnce(&mut FakeShelfOptions)) -> Shelf {
        let dir = tempfile::tempdir().unwrap();
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, certified.cert.pem()).unwrap();
        std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
        let mut options = FakeShelfOptions::new(&cert, &key);
        options.binary = env!("CARGO_BIN_EXE_fake-shelf").into();
        configure(&mut options);
        let fake = FakeShelf::start(&options).expect("fake-shelf starts");
        assert!(fake.url().starts_with("https://127.0.0.1:"), "{}", fake.url());
        let http = client(&cert, None);
        Shelf { fake, http, user: options.user, password: options.password, _dir: dir }
    }

    async fn send(&self, method: &str, path: &str, auth: Option<(&str, &str)>, body: Option<(&str, &str)>) -> Answer {
        let url = format!("{}{path}", self.fake.url());
        let mut req = self.http.request(method.parse().unwrap(), url);
        if let Some((user, password)) = auth {
            req = req.basic_auth(user, Some(password));
        }
        if let Some((content_type, text)) = body {
            req = req.header("content-type", content_type).body(text.to_owned());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let body =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}")) };
        if !body.is_null() {
            assert_eq!(headers["content-type"], "application/json", "{method} {path}");
        }
        Answer { status, headers, body }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, Some((&self.user, &self.password)), None).await
    }

    async fn control(&self, target: &str, power_state: &str) -> Answer {
        let body = json!({ "PowerState": power_state }).to_string();
        self.send("POST", target, Some((&self.user, &self.password)), Some(("application/json", &body))).await
    }

    async fn update(&self, body: &Value) -> Answer {
        self.send("POST", SIMPLE_UPDATE, Some((&self.user, &self.password)), Some(("application/json", &body.to_string()))).await
    }

    /// Follows a task monitor until it stops answering 202 (every 202 must read `Running`
    /// with `Retry-After: 1`), within 20 s.
    async fn follow(&self, monitor: &str) -> Answer {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let a = self.get(monitor).await;
            if a.status != 202 {
                return a;
            }
            assert_eq!((a.body["TaskState"].as_str(), a.headers["retry-after"].to_str().ok()), (Some("Running"), Some("1")));
            assert!(std::time::Instant::now() < deadline, "{monitor} still 202 after 20 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn reset(&self, target: &str, reset_type: &str) -> Answer {
        let body = json!({ "ResetType": reset_type }).to_string();
        self.send("POST", target, Some((&self.user, &self.password)), Some(("application/json", &body))).await
    }

    /// Reads `uri` until its `PowerState` is `want` (every other reading must be one of
    /// `passing`), within 20 s.
    async fn until_power(&self, uri: &str, want: &str, passing: &[&str]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let a = self.get(uri).await;
            let state = a.body["PowerState"].as_str().unwrap_or_default().to_owned();
            if state == want {
                return;
            }
            assert!(passing.contains(&state.as_str()), "{uri} read {state:?} on the way to {want}");
            assert!(std::time::Instant::now() < deadline, "{uri} still {state} after 20 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn fake(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.fake.control(method, path, body.as_ref()).unwrap()
    }
}

fn code(a: &Answer) -> &str {
    a.body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn fake_shelf_serves_tls_12_and_13_and_guards_all_but_the_root() {
    let shelf = Shelf::start(|_| {});
    let cert = shelf._dir.path().join("cert.pem");
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let only = client(&cert, Some(version));
        let root: Value = only.get(format!("{}{ROOT}", shelf.fake.url())).send().await.unwrap().json().await.unwrap();
        assert_eq!(root["@odata.type"], "#ServiceRoot.v1_20_0.ServiceRoot", "{version:?}");
    }
    assert_eq!(shelf.send("GET", "/redfish/v1", None, None).await.status, 200);
    let denied = shelf.send("GET", SHELF, None, None).await;
    assert_eq!(denied.status, 401);
    assert!(denied.headers["www-authenticate"].to_str().unwrap().starts_with("Basic realm=\""));
    assert_eq!(code(&denied), "Base.1.0.NoValidSession");
    assert_eq!(shelf.send("GET", SHELF, Some((&shelf.user, "wrong")), None).await.status, 401);
    assert_eq!(shelf.send("GET", "/redfish/v1/Systems", None, None).await.status, 401);
    let missing = shelf.get("/redfish/v1/Systems").await;
    assert_eq!((missing.status, code(&missing)), (404, "Base.1.0.ResourceMissingAtURI"));

    // From the root to the action target by links only.
    let root = shelf.get(ROOT).await.body;
    let equipment = shelf.get(root["PowerEquipment"]["@odata.id"].as_str().unwrap()).await.body;
    assert_eq!(equipment["@odata.type"], "#PowerEquipment.v1_2_0.PowerEquipment");
    let shelves = shelf.get(equipment["PowerShelves"]["@odata.id"].as_str().unwrap()).await.body;
    assert_eq!(shelves["Members@odata.count"], 1);
    let one = shelf.get(shelves["Members"][0]["@odata.id"].as_str().unwrap()).await.body;
    assert_eq!(
        (one["@odata.type"].as_str(), one["EquipmentType"].as_str()),
        (Some("#PowerDistribution.v1_6_0.PowerDistribution"), Some("PowerShelf"))
    );
    assert!(one["SerialNumber"].is_string() && one["FirmwareVersion"].is_string() && one["Status"]["Health"] == "OK");
    let outlets = shelf.get(one["Outlets"]["@odata.id"].as_str().unwrap()).await.body;
    let ids: Vec<&str> = outlets["Members"].as_array().unwrap().iter().map(|m| m["@odata.id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![A1, "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/B1"]);
    let a1 = shelf.get(ids[0]).await.body;
    assert_eq!(a1["@odata.type"], "#Outlet.v1_4_4.Outlet");
    assert_eq!((a1["PowerState"].as_str(), a1["PowerEnabled"].as_bool()), (Some("On"), Some(true)));
    assert_eq!(a1["Actions"]["#Outlet.PowerControl"]["target"], A1_TARGET);
    let chassis = shelf.get(root["Chassis"]["@odata.id"].as_str().unwrap()).await;
    assert_eq!(chassis.status, 200);
}

#[tokio::test]
async fn fake_shelf_power_control_moves_outlets_after_the_delay_and_refuses_bad_requests() {
    let shelf = Shelf::start(|o| o.delay_ms = 600_000);
    let auth = Some((shelf.user.as_str(), shelf.password.as_str()));
    assert_eq!(shelf.control(A1_TARGET, "Off").await.status, 204);
    assert_eq!(shelf.get(A1).await.body["PowerState"], "PoweringOff");
    assert_eq!(shelf.control(A1_TARGET, "Off").await.status, 204);
    assert_eq!(shelf.get(A1).await.body["PowerState"], "PoweringOff");

    let form = shelf.send("POST", B1_TARGET, auth, Some(("text/plain", r#"{"PowerState":"Off"}"#))).await;
    assert_eq!(form.status, 415);
    let malformed = shelf.send("POST", B1_TARGET, auth, Some(("application/json", "{"))).await;
    assert_eq!((malformed.status, code(&malformed)), (400, "Base.1.0.MalformedJSON"));
    let missing = shelf.send("POST", B1_TARGET, auth, Some(("application/json", r#"{"ResetType":"On"}"#))).await;
    assert_eq!((missing.status, code(&missing)), (400, "Base.1.0.ActionParameterMissing"));
    let wrong = shelf.control(B1_TARGET, "ForceOff").await;
    assert_eq!((wrong.status, code(&wrong)), (400, "Base.1.0.PropertyValueNotInList"));
    assert_eq!(shelf.get(B1_TARGET).await.status, 405);
    assert_eq!(shelf.control(&B1_TARGET.replace("B1", "Z9"), "Off").await.status, 404);
    assert_eq!(shelf.send("POST", B1_TARGET, None, Some(("application/json", r#"{"PowerState":"Off"}"#))).await.status, 401);

    assert_eq!(shelf.fake("POST", "lock", Some(json!({"outlet": "B1", "locked": true}))), json!({"outlet": "B1", "locked": true}));
    let locked = shelf.control(B1_TARGET, "Off").await;
    assert_eq!((locked.status, code(&locked)), (409, "Base.1.0.ResourceInUse"));
    assert_eq!(shelf.get("/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/B1").await.body["PowerControlLocked"], true);
    shelf.fake("POST", "lock", Some(json!({"outlet": "B1", "locked": false})));
    shelf.fake("POST", "/_fake/stuck", Some(json!({"outlet": "B1", "stuck": true})));
    assert_eq!(shelf.control(B1_TARGET, "PowerCycle").await.status, 204);

    let state = shelf.fake("GET", "state", None);
    assert_eq!(state["outlets"], json!({"A1": "PoweringOff", "B1": "On"}));
    assert_eq!(
        state["actions"],
        json!([
            {"outlet": "A1", "powerState": "Off"},
            {"outlet": "A1", "powerState": "Off"},
            {"outlet": "B1", "powerState": "PowerCycle"},
        ])
    );
    assert!(shelf.fake.control("GET", "nope", None).is_err());
}

#[tokio::test]
async fn fake_shelf_with_no_delay_converges_at_once_and_busy_answers_503() {
    let shelf = Shelf::start(|o| {
        o.delay_ms = 0;
        o.start_off = true;
        o.outlets = vec!["P1".into()];
        o.serial = Some("SN-42".into());
    });
    let p1 = "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/P1";
    assert_eq!(shelf.get(p1).await.body["PowerState"], "Off");
    assert_eq!(shelf.get(SHELF).await.body["SerialNumber"], "SN-42");
    assert_eq!(shelf.control(&format!("{p1}/Actions/Outlet.PowerControl"), "On").await.status, 204);
    assert_eq!(shelf.get(p1).await.body["PowerState"], "On");

    assert_eq!(shelf.fake("POST", "busy", Some(json!({"count": 2, "retryAfter": 3}))), json!({"count": 2, "retryAfter": 3}));
    for path in [ROOT, p1] {
        let busy = shelf.get(path).await;
        assert_eq!((busy.status, code(&busy)), (503, "Base.1.0.ServiceTemporarilyUnavailable"));
        assert_eq!(busy.headers["retry-after"], "3");
    }
    assert_eq!(shelf.get(p1).await.status, 200);
}

fn image(uri: &str) -> Value {
    json!({ "ImageURI": uri, "Targets": [SHELF] })
}

#[tokio::test]
async fn fake_shelf_simple_update_answers_202_and_its_monitor_202_until_completed() {
    let shelf = Shelf::start(|o| o.update_ms = 50);
    let root = shelf.get(ROOT).await.body;
    let service = shelf.get(root["UpdateService"]["@odata.id"].as_str().unwrap()).await.body;
    assert_eq!(
        (service["@odata.type"].as_str(), service["ServiceEnabled"].as_bool()),
        (Some("#UpdateService.v1_11_0.UpdateService"), Some(true))
    );
    let action = &service["Actions"]["#UpdateService.SimpleUpdate"];
    assert_eq!(action["target"], SIMPLE_UPDATE);
    assert_eq!(action["TransferProtocol@Redfish.AllowableValues"], json!(["HTTP", "HTTPS"]));
    let inventory = shelf.get(service["FirmwareInventory"]["@odata.id"].as_str().unwrap()).await.body;
    let firmware_uri = inventory["Members"][0]["@odata.id"].as_str().unwrap().to_owned();
    assert_eq!(shelf.get(&firmware_uri).await.body["Version"], "1.0.0");
    assert_eq!(shelf.get(SHELF).await.body["FirmwareVersion"], "1.0.0");

    let accepted = shelf.update(&image("https://fw.example/ps-fw-2.1.bin")).await;
    assert_eq!(accepted.status, 202);
    assert_eq!(accepted.headers["location"], MONITOR_1);
    assert_eq!((accepted.body["@odata.type"].as_str(), accepted.body["TaskState"].as_str()), (Some("#Task.v1_7_0.Task"), Some("Running")));
    let done = shelf.follow(MONITOR_1).await;
    assert_eq!(done.status, 200);
    assert_eq!((done.body["TaskState"].as_str(), done.body["TaskStatus"].as_str()), (Some("Completed"), Some("OK")));
    assert_eq!(shelf.get(SHELF).await.body["FirmwareVersion"], "ps-fw-2.1");
    assert_eq!(shelf.get(&firmware_uri).await.body["Version"], "ps-fw-2.1");
    let task = shelf.get(done.body["@odata.id"].as_str().unwrap()).await;
    assert_eq!((task.status, task.body["Id"].as_str(), task.body["TaskState"].as_str()), (200, Some("1"), Some("Completed")));
    let state = shelf.fake("GET", "state", None);
    assert_eq!(state["firmwareVersion"], "ps-fw-2.1");
    assert_eq!(state["updates"], json!([{"imageUri": "https://fw.example/ps-fw-2.1.bin", "targets": [SHELF]}]));
}

#[tokio::test]
async fn fake_shelf_update_runs_for_update_ms_and_refuses_bad_bodies() {
    let shelf = Shelf::start(|o| o.update_ms = 600_000);
    let auth = Some((shelf.user.as_str(), shelf.password.as_str()));
    assert_eq!(shelf.update(&image("https://fw.example/ps-fw-2.1.bin")).await.status, 202);
    for _ in 0..2 {
        let running = shelf.get(MONITOR_1).await;
        assert_eq!((running.status, running.body["TaskState"].as_str()), (202, Some("Running")));
        assert_eq!(running.headers["retry-after"], "1");
    }
    assert_eq!(shelf.get("/redfish/v1/TaskService/Tasks/1").await.body["TaskState"], "Running");
    assert_eq!(shelf.get("/redfish/v1/TaskService/Tasks").await.body["Members@odata.count"], 1);
    assert_eq!(shelf.get(SHELF).await.body["FirmwareVersion"], "1.0.0");
    assert_eq!(shelf.send("GET", MONITOR_1, None, None).await.status, 401);
    assert_eq!(shelf.get("/redfish/v1/TaskService/TaskMonitors/2").await.status, 404);

    let missing = shelf.update(&json!({ "ImageURI": "https://fw.example/x.bin" })).await;
    assert_eq!((missing.status, code(&missing)), (400, "Base.1.0.ActionParameterMissing"));
    let missing = shelf.update(&json!({ "Targets": [SHELF] })).await;
    assert_eq!((missing.status, code(&missing)), (400, "Base.1.0.ActionParameterMissing"));
    let elsewhere = "/redfish/v1/Chassis/PowerShelf";
    let wrong = shelf.update(&json!({ "ImageURI": "https://fw.example/x.bin", "Targets": [SHELF, elsewhere] })).await;
    assert_eq!((wrong.status, code(&wrong)), (400, "Base.1.0.ActionParameterValueNotInList"));
    assert!(wrong.body["error"]["message"].as_str().unwrap().contains(elsewhere), "{}", wrong.body);
    let empty = shelf.update(&json!({ "ImageURI": "https://fw.example/x.bin", "Targets": [] })).await;
    assert_eq!(empty.status, 400);
    let ftp = shelf.update(&image("ftp://fw.example/x.bin")).await;
    assert_eq!((ftp.status, code(&ftp)), (400, "Base.1.0.ActionParameterValueFormatError"));
    let typed = shelf.update(&json!({ "ImageURI": ["https://fw.example/x.bin"], "Targets": [SHELF] })).await;
    assert_eq!((typed.status, code(&typed)), (400, "Base.1.0.ActionParameterValueTypeError"));
    let malformed = shelf.send("POST", SIMPLE_UPDATE, auth, Some(("application/json", "{"))).await;
    assert_eq!((malformed.status, code(&malformed)), (400, "Base.1.0.MalformedJSON"));
    let body = image("https://fw.example/x.bin").to_string();
    assert_eq!(shelf.send("POST", SIMPLE_UPDATE, auth, Some(("text/plain", &body))).await.status, 415);
    assert_eq!(shelf.send("POST", SIMPLE_UPDATE, None, Some(("application/json", &body))).await.status, 401);
    assert_eq!(shelf.get(SIMPLE_UPDATE).await.status, 405);
    assert_eq!(shelf.fake("GET", "state", None)["updates"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn fake_shelf_failing_updates_end_in_exception_and_keep_the_version() {
    let shelf = Shelf::start(|o| o.update_ms = 0);
    let fail = json!({"fail": true, "message": "image signature invalid"});
    assert_eq!(shelf.fake("POST", "update-fail", Some(fail.clone())), fail);
    let accepted = shelf.update(&image("https://fw.example/ps-fw-6.6.bin")).await;
    assert_eq!(accepted.status, 202);
    let location = accepted.headers["location"].to_str().unwrap().to_owned();
    let ended = shelf.follow(&location).await;
    assert_eq!(ended.status, 200);
    assert_eq!((ended.body["TaskState"].as_str(), ended.body["TaskStatus"].as_str()), (Some("Exception"), Some("Critical")));
    assert_eq!(ended.body["Messages"][0]["MessageId"], "Update.1.0.ApplyFailed");
    assert_eq!(ended.body["Messages"][0]["Message"], "image signature invalid");
    assert_eq!(shelf.get(SHELF).await.body["FirmwareVersion"], "1.0.0");

    assert_eq!(shelf.fake("POST", "update-fail", Some(json!({"fail": false}))), json!({"fail": false}));
    let accepted = shelf.update(&image("http://fw.example/images/ps-fw-2.2.bin")).await;
    assert_eq!(accepted.headers["location"], "/redfish/v1/TaskService/TaskMonitors/2");
    let done = shelf.follow("/redfish/v1/TaskService/TaskMonitors/2").await;
    assert_eq!((done.status, done.body["TaskState"].as_str()), (200, Some("Completed")));
    assert_eq!(shelf.get(SHELF).await.body["FirmwareVersion"], "ps-fw-2.2");
    // The failed task still reads as it ended.
    assert_eq!(shelf.get(MONITOR_1).await.body["TaskState"], "Exception");
    let state = shelf.fake("GET", "state", None);
    assert_eq!(state["firmwareVersion"], "ps-fw-2.2");
    assert_eq!(state["updates"][0]["imageUri"], "https://fw.example/ps-fw-6.6.bin");
    assert_eq!(state["updates"][1]["targets"], json!([SHELF]));
    assert!(shelf.fake.control("POST", "update-fail", Some(&json!({"fail": "yes"}))).is_err());
}

const NODE_1: &str = "/redfish/v1/Systems/node-1";
const NODE_1_RESET: &str = "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset";

#[tokio::test]
async fn fake_shelf_systems_reset_after_the_delay_and_refuse_bad_requests() {
    let shelf = Shelf::start(|o| {
        o.delay_ms = 500;
        o.systems = vec!["node-1".into(), "node-2".into()];
    });
    let auth = Some((shelf.user.as_str(), shelf.password.as_str()));
    let root = shelf.send("GET", ROOT, None, None).await.body;
    assert_eq!(root["Systems"], json!({"@odata.id": "/redfish/v1/Systems"}));
    let systems = shelf.get("/redfish/v1/Systems").await.body;
    assert_eq!(systems["@odata.type"], "#ComputerSystemCollection.ComputerSystemCollection");
    let ids: Vec<&str> = systems["Members"].as_array().unwrap().iter().map(|m| m["@odata.id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![NODE_1, "/redfish/v1/Systems/node-2"]);
    let node = shelf.get(NODE_1).await.body;
    assert_eq!(
        (node["@odata.type"].as_str(), node["Id"].as_str(), node["PowerState"].as_str()),
        (Some("#ComputerSystem.v1_13_0.ComputerSystem"), Some("node-1"), Some("On"))
    );
    assert!(node["Name"].is_string());
    let action = &node["Actions"]["#ComputerSystem.Reset"];
    assert_eq!(action["target"], NODE_1_RESET);
    assert_eq!(action["ResetType@Redfish.AllowableValues"], json!(["On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"]));

    // Refused: nothing logged, nothing moves.
    let denied = shelf.send("POST", NODE_1_RESET, None, Some(("application/json", r#"{"ResetType":"ForceOff"}"#))).await;
    assert_eq!((denied.status, code(&denied)), (401, "Base.1.0.NoValidSession"));
    assert!(denied.headers["www-authenticate"].to_str().unwrap().starts_with("Basic realm=\""));
    assert_eq!(shelf.send("GET", NODE_1, Some((&shelf.user, "wrong")), None).await.status, 401);
    let wrong = shelf.reset(NODE_1_RESET, "Nmi").await;
    assert_eq!((wrong.status, code(&wrong)), (400, "Base.1.0.ActionParameterValueNotInList"));
    assert!(wrong.body["error"]["message"].as_str().unwrap().contains("Nmi"), "{}", wrong.body);
    assert_eq!(code(&shelf.reset(NODE_1_RESET, "PushPowerButton").await), "Base.1.0.ActionParameterValueNotInList");
    let missing = shelf.send("POST", NODE_1_RESET, auth, Some(("application/json", r#"{"PowerState":"Off"}"#))).await;
    assert_eq!((missing.status, code(&missing)), (400, "Base.1.0.ActionParameterMissing"));
    let malformed = shelf.send("POST", NODE_1_RESET, auth, Some(("application/json", "{"))).await;
    assert_eq!((malformed.status, code(&malformed)), (400, "Base.1.0.MalformedJSON"));
    assert_eq!(shelf.send("POST", NODE_1_RESET, auth, Some(("text/plain", r#"{"ResetType":"ForceOff"}"#))).await.status, 415);
    assert_eq!(shelf.get(NODE_1_RESET).await.status, 405);
    assert_eq!(shelf.reset(&NODE_1_RESET.replace("node-1", "node-9"), "ForceOff").await.status, 404);
    assert_eq!(shelf.fake("GET", "state", None)["resets"], json!([]));

    // ForceOff: PoweringOff for the delay, then Off; again is a no-op; then a restart.
    assert_eq!(shelf.reset(NODE_1_RESET, "ForceOff").await.status, 204);
    assert_eq!(shelf.get(NODE_1).await.body["PowerState"], "PoweringOff");
    shelf.until_power(NODE_1, "Off", &["PoweringOff"]).await;
    assert_eq!(shelf.reset(NODE_1_RESET, "GracefulShutdown").await.status, 204);
    assert_eq!(shelf.get(NODE_1).await.body["PowerState"], "Off");
    assert_eq!(shelf.reset(NODE_1_RESET, "ForceRestart").await.status, 204);
    shelf.until_power(NODE_1, "On", &["PoweringOn"]).await;
    let state = shelf.fake("GET", "state", None);
    assert_eq!(state["systems"], json!({"node-1": "On", "node-2": "On"}));
    assert_eq!(
        state["resets"],
        json!([
            {"system": "node-1", "resetType": "ForceOff"},
            {"system": "node-1", "resetType": "GracefulShutdown"},
            {"system": "node-1", "resetType": "ForceRestart"},
        ])
    );
    assert_eq!(state["actions"], json!([]), "resets are not outlet actions");
}

#[tokio::test]
async fn fake_shelf_stuck_system_accepts_resets_and_never_changes() {
    // No delay: a system that is not stuck reads its target on the very next request, so a
    // reading that stays put is the stuck switch, not a clock that has not run out.
    let shelf = Shelf::start(|o| {
        o.delay_ms = 0;
        o.systems = vec!["node-1".into()];
        o.systems_off = true;
    });
    assert_eq!(shelf.get(NODE_1).await.body["PowerState"], "Off");
    let stuck = json!({"system": "node-1", "stuck": true});
    assert_eq!(shelf.fake("POST", "stuck", Some(stuck.clone())), stuck);
    for reset_type in ["On", "ForceRestart", "On"] {
        assert_eq!(shelf.reset(NODE_1_RESET, reset_type).await.status, 204, "{reset_type}");
        assert_eq!(shelf.get(NODE_1).await.body["PowerState"], "Off", "{reset_type}");
    }
    let state = shelf.fake("GET", "state", None);
    assert_eq!(state["systems"], json!({"node-1": "Off"}));
    assert_eq!(state["resets"].as_array().map(Vec::len), Some(3));
    assert_eq!(state["resets"][1], json!({"system": "node-1", "resetType": "ForceRestart"}));
    assert!(shelf.fake.control("POST", "stuck", Some(&json!({"system": "node-9", "stuck": true}))).is_err());
    assert!(shelf.fake.control("POST", "stuck", Some(&json!({"system": "node-1", "outlet": "A1", "stuck": true}))).is_err());

    shelf.fake("POST", "stuck", Some(json!({"system": "node-1", "stuck": false})));
    assert_eq!(shelf.reset(NODE_1_RESET, "On").await.status, 204);
    assert_eq!(shelf.get(NODE_1).await.body["PowerState"], "On");
    // The outlets are untouched by all of it.
    assert_eq!(shelf.fake("GET", "state", None)["outlets"], json!({"A1": "On", "B1": "On"}));
}
