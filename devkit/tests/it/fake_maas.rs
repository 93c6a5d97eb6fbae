//! The `fake-maas` binary as a process, driven over raw HTTP with hand-built OAuth
//! PLAINTEXT headers (independent of Drover's MAAS client): the lifecycle walk, MAAS's
//! refusals and failure paths, the OAuth checks, filters, events paging, hardware-sync
//! tokens, outages, delays and persistence.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use drover_devkit::fake_maas::{FakeMaas, FakeMaasOptions};
use serde_json::{Value, json};

struct Api {
    fake: FakeMaas,
    http: reqwest::Client,
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The header MAAS's own client sends, signature percent-encoded.
fn oauth_header(key: &str, nonce: &str, timestamp: u64) -> String {
    let parts: Vec<&str> = key.split(':').collect();
    format!(
        "OAuth oauth_nonce=\"{nonce}\", oauth_timestamp=\"{timestamp}\", oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", \
         oauth_consumer_key=\"{}\", oauth_token=\"{}\", oauth_signature=\"%26{}\"",
        parts[0], parts[1], parts[2]
    )
}

fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl Api {
    fn start_with(options: FakeMaasOptions) -> Api {
        // reqwest is built without a default TLS provider in this workspace; plain HTTP
        // still needs one installed to build a client.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let fake = FakeMaas::start(&options).expect("fake-maas starts");
        assert!(fake.url().starts_with("http://127.0.0.1:") && fake.url().ends_with("/MAAS"), "{}", fake.url());
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Api { fake, http }
    }

    fn start() -> Api {
        Api::start_with(FakeMaasOptions::default())
    }

    /// A request under `/MAAS/api/2.0/` with an optional Authorization header.
    async fn raw(&self, method: &str, path: &str, form: &[(&str, &str)], auth: Option<String>) -> Answer {
        let url = format!("{}/api/2.0/{path}", self.fake.url());
        let mut req = self.http.request(method.parse().unwrap(), url);
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        if !form.is_empty() {
            req = req.header("Content-Type", "application/x-www-form-urlencoded").body(serde_urlencoded::to_string(form).unwrap());
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        Answer { status, headers, text: resp.text().await.unwrap() }
    }

    async fn call(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Answer {
        self.raw(method, path, form, Some(oauth_header(self.fake.api_key(), &nonce(), unix_now()))).await
    }

    async fn ok(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
        let a = self.call(method, path, form).await;
        assert_eq!(a.status, 200, "{method} {path}: {}", a.text);
        assert!(a.headers["content-type"].to_str().unwrap().starts_with("application/json"));
        a.json()
    }

    fn control(&self, method: &str, path: &str, body: Value) -> Value {
        self.fake.control(method, path, Some(&body)).expect("control call")
    }

    fn machine(&self, body: Value) -> String {
        self.control("POST", "machines", body)["system_id"].as_str().unwrap().to_owned()
    }

    fn advance(&self, id: &str) {
        self.control("POST", "advance", json!({ "system_id": id }));
    }

    async fn status_of(&self, id: &str) -> String {
        self.ok("GET", &format!("machines/{id}/"), &[]).await["status_name"].as_str().unwrap().to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_lifecycle_with_hardware_sync_tokens() {
    let api = Api::start();
    let v = api.ok("GET", "version/", &[]).await;
    assert_eq!(v.as_object().unwrap().len(), 3);
    let rack = api.ok("GET", "rackcontrollers/", &[]).await;
    assert_eq!((rack[0]["node_type"].as_u64(), rack[0]["node_type_name"].as_str()), (Some(2), Some("Rack controller")));

    let m = api
        .ok(
            "POST",
            "machines/",
            &[
                ("hostname", "gpu-01"),
                ("power_type", "ipmi"),
                ("power_parameters_power_address", "10.0.0.9"),
                ("power_parameters_power_user", "root"),
                ("power_parameters_power_pass", "calvin"),
                ("mac_addresses", "aa:bb:cc:00:00:01"),
            ],
        )
        .await;
    assert_eq!((m["status"].as_u64(), m["status_name"].as_str()), (Some(1), Some("Commissioning")));
    let id = m["system_id"].as_str().unwrap().to_owned();
    assert!(id.len() == 6 && id.bytes().all(|b| b"34678abcdefghkmnpqrstwxy".contains(&b)), "{id}");
    let power = api.ok("GET", &format!("machines/{id}/?op=power_parameters"), &[]).await;
    assert_eq!(power["power_address"], "10.0.0.9");

    api.advance(&id);
    let m = api.ok("GET", &format!("machines/{id}/"), &[]).await;
    assert_eq!((m["status_name"].as_str(), m["owner"].clone(), m["power_state"].as_str()), (Some("Ready"), Value::Null, Some("off")));
    assert_eq!(m["boot_disk"]["model"], "DELLBOSS VD");
    assert_eq!(api.ok("GET", &format!("machines/{id}/?op=get_token"), &[]).await, Value::Null);

    let m = api
        .ok(
            "POST",
            &format!("machines/{id}/?op=deploy"),
            &[("distro_series", "jammy"), ("user_data", "I2Nsb3VkLWNvbmZpZwo="), ("enable_hw_sync", "true")],
        )
        .await;
    assert_eq!((m["status"].as_u64(), m["owner"].as_str()), (Some(9), Some("drover")));
    assert_eq!((m["enable_hw_sync"].as_bool(), m["sync_interval"].as_u64(), m["last_sync"].clone()), (Some(true), Some(900), Value::Null));
    let first = api.ok("GET", &format!("machines/{id}/?op=get_token"), &[]).await;
    assert!(first["token_key"].is_string() && first["token_secret"].is_string() && first["consumer_key"].is_string());
    let (status, bytes) = api.fake.control_raw("GET", &format!("machines/{id}/user_data"), None).unwrap();
    assert_eq!((status, bytes.as_slice()), (200, b"#cloud-config\n".as_slice()));

    api.advance(&id);
    let m = api.ok("GET", &format!("machines/{id}/"), &[]).await;
    assert_eq!(
        (m["status_name"].as_str(), m["distro_series"].as_str(), m["power_state"].as_str()),
        (Some("Deployed"), Some("jammy"), Some("on"))
    );
    assert!(m["last_sync"].as_str().unwrap().ends_with('Z') && m["next_sync"].is_string());
    assert!(!m["ip_addresses"].as_array().unwrap().is_empty());
    // The machine's own token is refused on the REST API.
    let key = format!(
        "{}:{}:{}",
        first["consumer_key"].as_str().unwrap(),
        first["token_key"].as_str().unwrap(),
        first["token_secret"].as_str().unwrap()
    );
    assert_eq!(api.raw("GET", "machines/", &[], Some(oauth_header(&key, &nonce(), unix_now()))).await.status, 403);
    api.control("POST", &format!("machines/{id}/hw_sync"), json!({"last_sync": "2026-01-02T03:04:05.678Z"}));
    assert_eq!(api.ok("GET", &format!("machines/{id}/"), &[]).await["last_sync"], "2026-01-02T03:04:05.678Z");

    let m = api.ok("POST", &format!("machines/{id}/?op=release"), &[]).await;
    assert_eq!(m["status_name"], "Releasing");
    assert_eq!((m["osystem"].as_str(), m["enable_hw_sync"].as_bool(), m["last_sync"].clone()), (Some(""), Some(false), Value::Null));
    api.advance(&id);
    let m = api.ok("GET", &format!("machines/{id}/"), &[]).await;
    assert_eq!((m["status_name"].as_str(), m["owner"].clone()), (Some("Ready"), Value::Null));
    assert_eq!(api.ok("GET", &format!("machines/{id}/?op=get_token"), &[]).await, Value::Null, "the owner changed");

    api.ok("POST", &format!("machines/{id}/?op=deploy"), &[]).await;
    let second = api.ok("GET", &format!("machines/{id}/?op=get_token"), &[]).await;
    assert_ne!(second["token_key"], first["token_key"], "each deployment gets a new token");
    api.advance(&id);
    // erase=0 is a Django checkbox: it means erase.
    assert_eq!(api.ok("POST", &format!("machines/{id}/?op=release"), &[("erase", "0")]).await["status_name"], "Disk erasing");
    api.advance(&id);
    assert_eq!(api.status_of(&id).await, "Ready");

    // Status events are INFO and visible by default; request events are DEBUG.
    let ev = api.ok("GET", &format!("events/?op=query&id={id}&limit=1000"), &[]).await;
    let kinds: Vec<&str> = ev["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
    for k in ["Commissioning", "Deploying", "Deployed", "Releasing", "Released", "Disk erasing"] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    assert!(!kinds.contains(&"User releasing node"));
    let ev = api.ok("GET", &format!("events/?op=query&id={id}&level=DEBUG"), &[]).await;
    assert!(ev["events"].as_array().unwrap().iter().any(|e| e["type"] == "User releasing node"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_maas_shaped() {
    let api = Api::start();
    let new = api.machine(json!({"hostname": "n1"}));
    let ready = api.machine(json!({"hostname": "r1", "status": "Ready"}));
    let deployed = api.machine(json!({"hostname": "d1", "status": "Deployed"}));

    let a = api.call("POST", &format!("machines/{new}/?op=deploy"), &[]).await;
    assert_eq!((a.status, a.text.as_str()), (409, "Can't deploy a machine that is in the 'New' state"));
    assert!(a.headers["content-type"].to_str().unwrap().starts_with("text/plain"));
    assert_eq!(api.ok("POST", &format!("machines/{ready}/?op=release"), &[]).await["status_name"], "Ready", "a no-op");
    let a = api.call("POST", &format!("machines/{new}/?op=release"), &[]).await;
    assert_eq!((a.status, a.text.as_str()), (409, "Machine cannot be released in its current state ('New')."));
    let a = api.call("POST", &format!("machines/{deployed}/?op=commission"), &[]).await;
    assert_eq!(a.status, 400);
    assert_eq!(a.json(), json!({"__all__": ["Commission is not available because of the current state of the node."]}));
    let a = api.call("POST", &format!("nodes/{deployed}/blockdevices/sda/?op=set_boot_disk"), &[]).await;
    assert_eq!((a.status, a.text.as_str()), (409, "Cannot set as boot disk because the machine is not Ready."));
    let disk = api.ok("GET", &format!("nodes/{ready}/blockdevices/"), &[]).await[1]["id"].to_string();
    let a = api.call("POST", &format!("nodes/{ready}/blockdevices/{disk}/?op=set_boot_disk"), &[]).await;
    assert_eq!((a.status, a.text.as_str()), (200, "OK"));
    let a = api.call("POST", &format!("machines/{new}/?op=power_on"), &[]).await;
    assert_eq!((a.status, a.text.as_str()), (409, "Can't start node: it hasn't been allocated."));
    let a = api.call("POST", &format!("machines/{ready}/"), &[("op", "frobnicate")]).await;
    assert_eq!((a.status, a.text.as_str()), (400, "Unrecognised signature: method=POST op=frobnicate"));
    assert_eq!(api.call("PUT", "machines/", &[]).await.status, 405);
    assert_eq!(api.call("POST", "events/?op=query", &[]).await.status, 405);
    let a = api.call("GET", "machines/xxxxxx/", &[]).await;
    assert_eq!((a.status, a.text.as_str()), (404, "No Machine matches the given query."));
    assert_eq!(api.call("GET", "machines", &[]).await.status, 301, "URLs end in a slash");

    let a = api.call("GET", "machines/?limit=10", &[]).await;
    assert_eq!((a.status, a.json()), (400, json!({"limit": ["No such constraint."]})));
    let a = api.call("GET", "machines/?mac_address=zz", &[]).await;
    assert_eq!((a.status, a.json()), (400, json!({"mac_address": ["'zz' is not a valid MAC address."]})));
    let list = api.ok("GET", "machines/?status=ready", &[]).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["system_id"], ready.as_str());
    let all = api.ok("GET", "machines/", &[]).await;
    let ids: Vec<&str> = all.as_array().unwrap().iter().map(|m| m["system_id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![new.as_str(), ready.as_str(), deployed.as_str()], "unpaged, by id");

    let a = api.call("POST", "machines/", &[("mac_addresses", "52:54:00:aa:aa:aa")]).await;
    assert_eq!((a.status, a.json()), (400, json!({"architecture": ["This field is required."]})));
    let mac = api.ok("GET", &format!("machines/{new}/"), &[]).await["interface_set"][0]["mac_address"].as_str().unwrap().to_owned();
    let a = api.call("POST", "machines/", &[("architecture", "amd64"), ("mac_addresses", &mac)]).await;
    assert!(a.status == 400 && a.json()["mac_addresses"][0].as_str().unwrap().contains("already in use"), "{}", a.text);
    let a = api.call("POST", &format!("machines/{ready}/?op=set_storage_layout"), &[("storage_layout", "flat")]).await;
    assert_eq!(a.status, 200);
    let a = api.call("POST", &format!("machines/{deployed}/?op=set_storage_layout"), &[("storage_layout", "flat")]).await;
    assert_eq!(a.status, 409);
    let a = api.call("POST", &format!("machines/{ready}/?op=deploy"), &[("enable_hw_sync", "maybe")]).await;
    assert!(a.status == 400 && a.text.starts_with("Invalid enable_hw_sync"), "{}", a.text);
    assert_eq!(api.call("DELETE", &format!("machines/{new}/"), &[]).await.status, 204);

    // Bulk ops on the collection.
    let a = api.call("POST", "machines/?op=release", &[("machines", &deployed), ("machines", &ready)]).await;
    assert_eq!((a.status, a.json()), (200, json!([deployed])));
    let a = api.call("POST", "machines/?op=accept", &[("machines", "nope00")]).await;
    assert_eq!((a.status, a.text.as_str()), (400, "Unknown machine(s): nope00."));

    // Subnets and links.
    let s = api.ok("POST", "subnets/", &[("cidr", "10.77.0.0/31")]).await;
    assert_eq!(s["cidr"], "10.77.0.0/31");
    let a = api.call("POST", "subnets/", &[("cidr", "10.77.0.0/24")]).await;
    assert_eq!((a.status, a.json()), (400, json!({"__all__": ["Subnet 10.77.0.0/24 would overlap with existing subnets."]})));
    let a = api.call("POST", "subnets/", &[]).await;
    assert_eq!((a.status, a.json()), (400, json!({"cidr": ["This field is required."]})));
    let nic = api.ok("GET", &format!("nodes/{ready}/interfaces/"), &[]).await[0]["id"].to_string();
    let i = api
        .ok(
            "POST",
            &format!("nodes/{ready}/interfaces/{nic}/?op=link_subnet"),
            &[("mode", "STATIC"), ("subnet", "10.77.0.0/31"), ("ip_address", "10.77.0.1")],
        )
        .await;
    assert_eq!((i["links"][0]["mode"].as_str(), i["links"][0]["ip_address"].as_str()), (Some("static"), Some("10.77.0.1")));
    let link = i["links"][0]["id"].to_string();
    let i = api.ok("POST", &format!("nodes/{ready}/interfaces/{nic}/?op=unlink_subnet"), &[("id", &link)]).await;
    assert_eq!(i["links"][0]["mode"], "link_up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_follow_the_failure_map() {
    let api = Api::start();
    let id = api.machine(json!({"hostname": "f1"}));
    api.ok("POST", &format!("machines/{id}/?op=commission"), &[("enable_ssh", "0")]).await;
    let f = api.control("POST", &format!("machines/{id}/fail"), json!({"stage": "commissioning"}));
    assert_eq!((f["failed_now"].as_bool(), f["machine"]["status_name"].as_str()), (Some(true), Some("Failed commissioning")));
    api.ok("POST", &format!("machines/{id}/?op=commission"), &[]).await;
    api.advance(&id);
    api.control("POST", &format!("machines/{id}/fail"), json!({"stage": "deployment"}));
    api.ok("POST", &format!("machines/{id}/?op=deploy"), &[]).await;
    api.advance(&id);
    assert_eq!(api.status_of(&id).await, "Failed deployment");
    let a = api.call("POST", &format!("machines/{id}/?op=deploy"), &[]).await;
    assert_eq!((a.status, a.text.as_str()), (409, "Can't deploy a machine that is in the 'Failed deployment' state"));
    let ev = api.ok("GET", &format!("events/?op=query&id={id}"), &[]).await;
    assert_eq!(ev["events"][0]["type"], "Failed deployment", "newest first");
    api.control("POST", &format!("machines/{id}/fail"), json!({"stage": "disk_erasing"}));
    assert_eq!(api.ok("POST", &format!("machines/{id}/?op=release"), &[("quick_erase", "true")]).await["status_name"], "Disk erasing");
    api.advance(&id);
    assert_eq!(api.status_of(&id).await, "Failed disk erasing");
    // A release with the power already off finishes at once.
    api.control("POST", &format!("machines/{id}/power"), json!({"state": "off"}));
    assert_eq!(api.ok("POST", &format!("machines/{id}/?op=release"), &[]).await["status_name"], "Ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_refusals() {
    let api = Api::start();
    let key = api.fake.api_key().to_owned();
    let now = unix_now();
    let wrong = api.raw("GET", "machines/", &[], Some(oauth_header("drover:fake-token:nope", &nonce(), now))).await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.text.starts_with("Authorization Error: '"), "{}", wrong.text);
    assert_eq!(wrong.headers["www-authenticate"], "OAuth realm=\"OAuth\"");
    let n = nonce();
    assert_eq!(api.raw("GET", "machines/", &[], Some(oauth_header(&key, &n, now))).await.status, 200);
    assert_eq!(api.raw("GET", "machines/", &[], Some(oauth_header(&key, &n, now))).await.status, 401, "replayed nonce");
    assert_eq!(api.raw("GET", "machines/", &[], Some(oauth_header(&key, &nonce(), now - 1000))).await.status, 401, "stale");
    let a = api.raw("GET", "machines/", &[], Some(oauth_header("drover:other-token:x", &nonce(), now))).await;
    assert_eq!((a.status, a.text.as_str()), (401, "Authorization Error: 'Invalid access token: other-token'"));
    let a = api.raw("GET", "machines/", &[], Some(oauth_header("stranger:t:s", &nonce(), now))).await;
    assert_eq!((a.status, a.text.as_str()), (401, "Authorization Error: Invalid API key."));
    let bad_ts = oauth_header(&key, &nonce(), now).replace(&format!("\"{now}\""), "\"soon\"");
    assert_eq!(api.raw("GET", "machines/", &[], Some(bad_ts)).await.status, 400);
    let plain = oauth_header(&key, &nonce(), now).replace("%26", "&");
    assert_eq!(api.raw("GET", "machines/", &[], Some(plain)).await.status, 200, "an unencoded & works too");
    let a = api.raw("GET", "machines/", &[], None).await;
    assert_eq!((a.status, a.text.as_str()), (400, "Unrecognised signature: method=GET op=None"));
    assert_eq!(api.raw("GET", "events/?op=query", &[], None).await.status, 401);
    assert_eq!(api.raw("GET", "version/", &[], None).await.status, 200);
    let v = api.http.get(format!("{}/api/version/", api.fake.url())).send().await.unwrap().text().await.unwrap();
    assert_eq!(v, "2.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_paging() {
    let api = Api::start();
    let id = api.machine(json!({"hostname": "e1", "status": "Ready"}));
    for _ in 0..3 {
        api.ok("POST", &format!("machines/{id}/?op=deploy"), &[]).await;
        api.advance(&id);
        api.ok("POST", &format!("machines/{id}/?op=release"), &[]).await;
        api.advance(&id);
    }
    let all = api.ok("GET", "events/?op=query&hostname=e1&limit=1000", &[]).await;
    let all_ids: Vec<u64> = all["events"].as_array().unwrap().iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(all_ids.len() >= 12 && all_ids.windows(2).all(|w| w[0] > w[1]), "newest first: {all_ids:?}");
    let created = all["events"][0]["created"].as_str().unwrap();
    assert!(created.contains(". 20") && created.contains(", "), "MAAS's event date format: {created}");

    let mut seen = Vec::new();
    let mut page = api.ok("GET", "events/?op=query&hostname=e1&limit=5", &[]).await;
    while page["count"].as_u64() > Some(0) {
        seen.extend(page["events"].as_array().unwrap().iter().map(|e| e["id"].as_u64().unwrap()));
        let prev = page["prev_uri"].as_str().unwrap().trim_start_matches("/MAAS/api/2.0/").to_owned();
        page = api.ok("GET", &prev, &[]).await;
    }
    assert_eq!(seen, all_ids, "walking prev_uri visits every event once");
    let oldest = all_ids.last().unwrap();
    let after = api.ok("GET", &format!("events/?op=query&hostname=e1&limit=2&after={oldest}"), &[]).await;
    let got: Vec<u64> = after["events"].as_array().unwrap().iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert_eq!(got, vec![all_ids[all_ids.len() - 3], all_ids[all_ids.len() - 2]], "after: the oldest ones, newest first");
    let a = api.call("GET", "events/?op=query&limit=1001", &[]).await;
    assert_eq!((a.status, a.text.as_str()), (400, "Requested number of events 1001 is greater than limit: 1000"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_and_request_log() {
    let api = Api::start();
    api.control("POST", "outage", json!({"mode": "503"}));
    let a = api.call("GET", "machines/", &[]).await;
    assert_eq!((a.status, a.headers["retry-after"].to_str().unwrap()), (503, "10"));
    api.control("POST", "outage", json!({"mode": "hang"}));
    let url = format!("{}/api/2.0/version/", api.fake.url());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let quick = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    assert!(quick.get(&url).send().await.unwrap_err().is_timeout(), "a hung request gets no answer");
    api.control("POST", "outage", json!({"mode": "none"}));
    assert_eq!(api.call("GET", "machines/", &[]).await.status, 200);
    let log = api.control("GET", "requests", Value::Null);
    let entry = log.as_array().unwrap().iter().find(|r| r["path"] == "/MAAS/api/2.0/machines/").unwrap();
    assert_eq!(entry["method"], "GET");
    api.call("POST", "machines/?op=accept", &[("machines", "x")]).await;
    let log = api.control("GET", "requests", Value::Null);
    let last = log.as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["query"].as_str(), last["body"].as_str()), (Some("op=accept"), Some("machines=x")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delays_complete_lazily_and_state_persists() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("maas.json");
    let options = FakeMaasOptions { deploy_secs: 1, state_file: Some(state.clone()), ..FakeMaasOptions::default() };
    let api = Api::start_with(options.clone());
    let id = api.machine(json!({"hostname": "p1", "status": "Ready"}));
    api.ok("POST", &format!("machines/{id}/?op=deploy"), &[]).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while api.status_of(&id).await != "Deployed" {
        assert!(Instant::now() < deadline, "Deploying never completed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(api);
    let api = Api::start_with(options);
    assert_eq!(api.status_of(&id).await, "Deployed", "loaded from the state file");
}
