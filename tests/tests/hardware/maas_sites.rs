//! MAAS sites end to end: a real coordinator (mutual TLS, `curl` and the `drover` binary as
//! clients), a real OpenBao dev server holding the secrets (KV v2 over HTTPS), and the fake
//! MAAS process (`fake-maas`) as the region.
//!
//! - `site_secrets_live_in_openbao_and_rotation_needs_no_restart`: credentials go to OpenBao,
//!   the probe and the preflight read them at use time (a token changed in OpenBao behind the
//!   coordinator's back is used on the next call), and no secret reaches a listing, an event,
//!   the audit log or the coordinator's logs.
//! - `credential_write_refused_by_maas_or_dead_maas_writes_nothing` (file secret store).
//! - `bad_site_input_is_a_4xx_naming_the_field`.
//! - `disabled_site_fails_the_preflight_and_delete_only_disables`.
//! - `overrides_roce_and_profiles_through_the_api`.
//! - `a_site_or_profile_named_with_another_ones_id_is_refused_and_the_id_still_finds_that_one`.
//! - `drover_site_cli_end_to_end`.
//!
//! Every test installs (once) the process-wide log capture, so every test's coordinator logs
//! are searched for every test's secrets.

use std::path::Path;

use drover_devkit::fake_maas::{FakeMaas, FakeMaasOptions};
use drover_devkit::openbao::OpenBao;
use drover_engine::config::{SecretsBackend, VaultConfig};
use drover_tests::Harness;
use drover_tests::logcapture::global as logs;
use serde_json::{Value, json};

const TOKEN_SECRET: &str = "Mx7-token-secret-never-shown";
const POWER_PASS: &str = "bmc-Pa55-never-shown";
const DEPLOY_PASS: &str = "deploy-Pa55-never-shown";
const OVERRIDE_PASS: &str = "override-Pa55-never-shown";

fn api_key() -> String {
    format!("drover-consumer:drover-token:{TOKEN_SECRET}")
}

fn assert_no_secret(what: &str, text: &str) {
    for s in [TOKEN_SECRET, POWER_PASS, DEPLOY_PASS, OVERRIDE_PASS] {
        assert!(!text.contains(s), "{what} holds a secret ({s}):\n{text}");
    }
}

fn fake_maas() -> FakeMaas {
    FakeMaas::start(&FakeMaasOptions { api_key: api_key(), ..FakeMaasOptions::default() }).expect("fake MAAS starts")
}

async fn call(h: &Harness, method: &str, path: &str, body: Option<Value>) -> (String, Value) {
    let body = body.map(|b| b.to_string());
    let (code, text) = h.call(Some(&h.admin), method, path, body.as_deref()).await;
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn site_body(name: &str, url: &str) -> Value {
    json!({
        "name": name, "regionCode": "eu-1", "apiBaseUrl": url, "pxeIface": "ens19", "pxeVlanVid": 46,
        "nodePxeIface": "eno8303", "reason": "new region",
    })
}

async fn create_site(h: &Harness, name: &str, url: &str) -> Value {
    let (code, site) = call(h, "POST", "/v1/maas/sites", Some(site_body(name, url))).await;
    assert_eq!(code, "201", "{site}");
    site
}

/// Everything an operator can list about sites, joined, for searching.
async fn everything_listed(h: &Harness, site: &str) -> String {
    let mut out = String::new();
    for path in [
        "/v1/maas/sites".to_owned(),
        format!("/v1/maas/sites/{site}"),
        format!("/v1/maas/sites/{site}/overrides"),
        format!("/v1/maas/sites/{site}/profiles"),
        "/v1/events?limit=1000".to_owned(),
        "/v1/audit?limit=1000".to_owned(),
    ] {
        let (code, text) = h.call(Some(&h.viewer), "GET", &path, None).await;
        assert_eq!(code, "200", "{path}: {text}");
        out.push_str(&text);
    }
    out
}

async fn vault_harness(bao: &OpenBao) -> Harness {
    let token_file = bao.root_token_file().expect("token file");
    let (addr, ca) = (bao.addr.clone(), bao.ca_file.clone());
    Harness::start_with_config(move |_, config| {
        config.secrets.backend = SecretsBackend::Vault;
        config.secrets.vault = Some(VaultConfig {
            addr,
            mount: "secret".into(),
            prefix: "drover".into(),
            ca_file: ca,
            token_file: Some(token_file),
            approle_role_id_file: None,
            approle_secret_id_file: None,
            timeout_secs: 10,
            connect_timeout_secs: 10,
            allow_insecure_http: false,
        });
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_secrets_live_in_openbao_and_rotation_needs_no_restart() {
    let logs = logs();
    let bao = OpenBao::start(true).await.expect("OpenBao starts");
    let maas = fake_maas();
    let h = vault_harness(&bao).await;
    let site = create_site(&h, "dc1", maas.url()).await;
    let id = site["id"].as_str().expect("id").to_owned();
    assert_eq!(site["credentials"]["apiToken"]["setAt"], Value::Null);

    // Roles: a viewer reads, only an admin writes.
    let (code, _) = h.call(Some(&h.viewer), "POST", "/v1/maas/sites", Some(&site_body("dc9", maas.url()).to_string())).await;
    assert_eq!(code, "403");
    let (code, _) =
        h.call(Some(&h.viewer), "POST", "/v1/maas/sites/dc1/credentials", Some(&json!({ "apiToken": api_key() }).to_string())).await;
    assert_eq!(code, "403");

    let creds = json!({
        "apiToken": api_key(), "defaultPower": { "user": "root", "pass": POWER_PASS }, "deployPassword": DEPLOY_PASS,
        "reason": "initial seed",
    });
    let (code, written) = call(&h, "POST", "/v1/maas/sites/dc1/credentials", Some(creds)).await;
    assert_eq!(code, "200", "{written}");
    for which in ["apiToken", "defaultPower", "deployPassword"] {
        assert!(written["credentials"][which]["setAt"].is_string(), "{which} not recorded: {written}");
    }
    // The values are in OpenBao, at the paths the site lists, and nowhere else.
    let stored = bao.kv_read(&format!("drover/maas-sites/{id}/api-token")).await.expect("kv").expect("token written");
    assert_eq!(stored, json!({ "token": api_key() }));
    let power = bao.kv_read(&format!("drover/maas-sites/{id}/power/default")).await.expect("kv").expect("power written");
    assert_eq!(power, json!({ "user": "root", "pass": POWER_PASS }));

    let (code, probe) = call(&h, "POST", "/v1/maas/sites/dc1/probe", None).await;
    assert_eq!(code, "200", "{probe}");
    assert_eq!(probe["ok"], true, "{probe}");
    assert!(probe["version"].as_str().is_some_and(|v| !v.is_empty()), "{probe}");
    assert!(!probe["rackControllers"].as_array().expect("racks").is_empty(), "{probe}");
    let (_, pre) = call(&h, "POST", "/v1/maas/sites/dc1/preflight", None).await;
    assert_eq!(pre["ok"], true, "{pre}");

    // Rotation behind the coordinator's back: the next call reads the new value.
    bao.kv_write(&format!("drover/maas-sites/{id}/api-token"), json!({ "token": "drover-consumer:drover-token:wrong" })).await.expect("kv");
    let (_, probe) = call(&h, "POST", "/v1/maas/sites/dc1/probe", None).await;
    assert_eq!((probe["ok"].clone(), probe["failure"]["class"].clone()), (json!(false), json!("input_config_error")), "{probe}");
    let (_, pre) = call(&h, "POST", "/v1/maas/sites/dc1/preflight", None).await;
    assert_eq!(pre["failure"]["class"], "input_config_error", "{pre}");
    bao.kv_write(&format!("drover/maas-sites/{id}/api-token"), json!({ "token": api_key() })).await.expect("kv");
    let (_, probe) = call(&h, "POST", "/v1/maas/sites/dc1/probe", None).await;
    assert_eq!(probe["ok"], true, "no restart was needed: {probe}");

    // An override's credentials too.
    let body = json!({ "selectorType": "ipmi_ip", "selectorValue": "10.9.0.7", "credentials": { "user": "admin", "pass": OVERRIDE_PASS } });
    let (code, o) = call(&h, "POST", "/v1/maas/sites/dc1/overrides", Some(body)).await;
    assert_eq!(code, "201", "{o}");
    let opath = o["secretPath"].as_str().expect("path");
    assert_eq!(bao.kv_read(&format!("drover/{opath}")).await.expect("kv").expect("override written")["pass"], OVERRIDE_PASS);

    assert_no_secret("the operator listings, events and audit", &everything_listed(&h, "dc1").await);
    let captured = logs.text();
    // The capture must have seen this coordinator's own lines, or the search below proves nothing.
    assert!(captured.contains(&h.url.replace("https://", "")), "the log capture did not see this coordinator start");
    assert_no_secret("the coordinator's logs", &captured);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_write_refused_by_maas_or_dead_maas_writes_nothing() {
    logs();
    let maas = fake_maas();
    let h = Harness::start().await;
    create_site(&h, "dc1", maas.url()).await;
    let secrets_dir = h.dir.path().join("state").join("secrets");

    let bad = json!({ "apiToken": "drover-consumer:drover-token:not-the-secret", "defaultPower": { "user": "root", "pass": POWER_PASS } });
    let (code, e) = call(&h, "POST", "/v1/maas/sites/dc1/credentials", Some(bad)).await;
    assert_eq!(code, "422", "{e}");
    assert_eq!(e["error"]["code"], "maas_token_refused", "{e}");
    assert!(!e.to_string().contains("not-the-secret"), "the refusal echoes the token: {e}");

    // A MAAS that is not there: a port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    create_site(&h, "dc2", &format!("http://127.0.0.1:{dead}/MAAS")).await;
    let (code, e) = call(&h, "POST", "/v1/maas/sites/dc2/credentials", Some(json!({ "apiToken": api_key() }))).await;
    assert_eq!(code, "422", "{e}");
    assert_eq!(e["error"]["code"], "maas_unreachable", "{e}");

    // Nothing written: no secret file, no setAt, no credentials event.
    let files = walk(&secrets_dir);
    assert!(files.is_empty(), "secrets were written: {files:?}");
    for site in ["dc1", "dc2"] {
        let (_, s) = call(&h, "GET", &format!("/v1/maas/sites/{site}"), None).await;
        assert_eq!(s["credentials"]["apiToken"]["setAt"], Value::Null, "{s}");
        assert_eq!(s["credentials"]["defaultPower"]["setAt"], Value::Null, "{s}");
    }
    let (_, events) = call(&h, "GET", "/v1/events?kind=maas.site.credentials", None).await;
    assert_eq!(events["items"].as_array().map(Vec::len), Some(0), "{events}");

    // The good token is accepted, and the file store keeps it 0600.
    let (code, _) = call(&h, "POST", "/v1/maas/sites/dc1/credentials", Some(json!({ "apiToken": api_key() }))).await;
    assert_eq!(code, "200");
    let files = walk(&secrets_dir);
    assert_eq!(files.len(), 1, "{files:?}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&files[0]).expect("stat").permissions().mode() & 0o777, 0o600);
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_site_input_is_a_4xx_naming_the_field() {
    logs();
    let h = Harness::start().await;
    create_site(&h, "dc1", "http://127.0.0.1:9/MAAS").await;
    let cases: Vec<(&str, String, Value, &str, &str)> = vec![
        ("GET", "/v1/maas/sites/nowhere".into(), Value::Null, "404", "nowhere"),
        ("POST", "/v1/maas/sites/nowhere/probe".into(), json!({}), "404", "nowhere"),
        ("POST", "/v1/maas/sites".into(), site_body("dc1", "http://127.0.0.1:9/MAAS"), "409", "dc1"),
        ("POST", "/v1/maas/sites".into(), json!({ "name": "x", "apiBaseUrl": "http://m/MAAS" }), "400", "regionCode"),
        (
            "POST",
            "/v1/maas/sites".into(),
            {
                let mut b = site_body("dc3", "http://u:p@m/MAAS");
                b["reason"] = json!("x");
                b
            },
            "400",
            "apiBaseUrl",
        ),
        (
            "POST",
            "/v1/maas/sites".into(),
            {
                let mut b = site_body("dc3", "http://m/MAAS");
                b["pxeVlanVid"] = json!(5000);
                b
            },
            "400",
            "pxeVlanVid",
        ),
        (
            "POST",
            "/v1/maas/sites".into(),
            {
                let mut b = site_body("dc3", "http://m/MAAS");
                b["colour"] = json!("red");
                b
            },
            "400",
            "colour",
        ),
        ("POST", "/v1/maas/sites".into(), site_body("bad name", "http://m/MAAS"), "400", "name"),
        (
            "POST",
            "/v1/maas/sites/dc1/roce-assignments".into(),
            json!({ "items": [{ "hostname": "c07u31", "interface": "enp28s0np0", "ipv4_cidr": "172.30.9.61/40" }] }),
            "400",
            "items[0].ipv4Cidr",
        ),
        (
            "POST",
            "/v1/maas/sites/dc1/roce-assignments".into(),
            json!({ "items": [{ "hostname": "c07u31", "interface": "enp28s0np0", "ipv4Cidr": "172.30.9.61/31" }, { "hostname": "c07u31", "interface": "enp28s0np0", "ipv4Cidr": "172.30.9.63/31" }] }),
            "400",
            "items[1]",
        ),
        (
            "POST",
            "/v1/maas/sites/dc1/overrides".into(),
            json!({ "selectorType": "serial", "selectorValue": "x", "credentials": { "user": "a", "pass": "b" } }),
            "400",
            "selectorType",
        ),
        (
            "POST",
            "/v1/maas/sites/dc1/overrides".into(),
            json!({ "selectorType": "pxe_mac", "selectorValue": "zz:zz", "credentials": { "user": "a", "pass": "b" } }),
            "400",
            "selectorValue",
        ),
        ("POST", "/v1/maas/sites/dc1/credentials".into(), json!({ "apiToken": "only-two:parts" }), "400", "apiToken"),
        ("POST", "/v1/maas/sites/dc1/credentials".into(), json!({}), "400", "nothing to write"),
        ("PATCH", "/v1/maas/sites/dc1".into(), json!({ "defaultProfile": "ghost" }), "404", "ghost"),
        ("PATCH", "/v1/maas/sites/dc1/profiles/default".into(), json!({ "policy": { "batchMaxParallel": 0 } }), "400", "batchMaxParallel"),
        ("PATCH", "/v1/maas/sites/dc1/profiles/default".into(), json!({ "policy": { "noSuchKnob": 1 } }), "400", "noSuchKnob"),
        ("PATCH", "/v1/maas/sites/dc1/profiles/default".into(), json!({ "status": "disabled" }), "409", "default"),
        ("DELETE", "/v1/maas/sites/dc1/roce-assignments/not-a-uuid".into(), Value::Null, "400", "not-a-uuid"),
    ];
    for (method, path, body, want, needle) in cases {
        let body = if body.is_null() { None } else { Some(body) };
        let (code, e) = call(&h, method, &path, body.clone()).await;
        assert_eq!(code, want, "{method} {path} {body:?}: {e}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{method} {path}: the refusal does not name {needle:?}: {e}");
    }
    // Nothing was changed by any refusal.
    let (_, sites) = call(&h, "GET", "/v1/maas/sites", None).await;
    assert_eq!(sites["items"].as_array().map(Vec::len), Some(1), "{sites}");
    let (_, roce) = call(&h, "GET", "/v1/maas/sites/dc1/roce-assignments", None).await;
    assert_eq!(roce["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_site_fails_the_preflight_and_delete_only_disables() {
    logs();
    let maas = fake_maas();
    let h = Harness::start().await;
    create_site(&h, "dc1", maas.url()).await;
    let (_, pre) = call(&h, "POST", "/v1/maas/sites/dc1/preflight", None).await;
    assert_eq!(pre["failure"]["class"], "input_config_error", "no token yet: {pre}");
    call(&h, "POST", "/v1/maas/sites/dc1/credentials", Some(json!({ "apiToken": api_key() }))).await;
    let (_, pre) = call(&h, "POST", "/v1/maas/sites/dc1/preflight", Some(json!({ "capabilities": ["no-such-capability"] }))).await;
    assert_eq!(pre["failure"]["class"], "site_capability_missing", "{pre}");
    let (_, pre) = call(&h, "POST", "/v1/maas/sites/dc1/preflight", None).await;
    assert_eq!(pre["ok"], true, "{pre}");

    let (code, s) = call(&h, "POST", "/v1/maas/sites/dc1/disable", Some(json!({ "reason": "rack move" }))).await;
    assert_eq!((code.as_str(), s["status"].as_str()), ("200", Some("disabled")), "{s}");
    let (_, pre) = call(&h, "POST", "/v1/maas/sites/dc1/preflight", None).await;
    assert_eq!(pre["failure"]["class"], "input_config_error", "{pre}");
    assert!(pre["failure"]["message"].as_str().is_some_and(|m| m.contains("disabled")), "{pre}");
    let (_, s) = call(&h, "POST", "/v1/maas/sites/dc1/enable", None).await;
    assert_eq!(s["status"], "active");
    let (_, pre) = call(&h, "POST", "/v1/maas/sites/dc1/preflight", None).await;
    assert_eq!(pre["ok"], true, "{pre}");

    // DELETE is the seed's soft delete: the site stays, disabled, with its history.
    let (code, s) = call(&h, "DELETE", "/v1/maas/sites/dc1", None).await;
    assert_eq!((code.as_str(), s["status"].as_str()), ("200", Some("disabled")), "{s}");
    let (code, _) = call(&h, "GET", "/v1/maas/sites/dc1", None).await;
    assert_eq!(code, "200");
    let (_, audit) = call(&h, "GET", "/v1/audit?limit=1000", None).await;
    let actions: Vec<&str> = audit["items"].as_array().expect("items").iter().filter_map(|a| a["action"].as_str()).collect();
    for want in ["maas.site.created", "maas.site.credentials", "maas.site.disabled", "maas.site.enabled"] {
        assert!(actions.contains(&want), "{want} not audited: {actions:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_roce_and_profiles_through_the_api() {
    logs();
    let h = Harness::start().await;
    create_site(&h, "dc1", "http://127.0.0.1:9/MAAS").await;
    let secrets_dir = h.dir.path().join("state").join("secrets");

    // Overrides: the secret lands in the store under the override's path and leaves with it.
    let body = json!({ "selectorType": "pxe_mac", "selectorValue": "AA-BB-CC-DD-EE-01", "credentials": { "user": "admin", "pass": OVERRIDE_PASS } });
    let (code, o) = call(&h, "POST", "/v1/maas/sites/dc1/overrides", Some(body.clone())).await;
    assert_eq!(code, "201", "{o}");
    assert_eq!(o["selectorValue"], "aa:bb:cc:dd:ee:01");
    let (code, _) = call(&h, "POST", "/v1/maas/sites/dc1/overrides", Some(body)).await;
    assert_eq!(code, "409", "one override per selector");
    assert_eq!(walk(&secrets_dir).len(), 1, "the refused duplicate left its secret behind");
    let (code, _) = call(&h, "DELETE", &format!("/v1/maas/sites/dc1/overrides/{}", o["id"].as_str().expect("id")), None).await;
    assert_eq!(code, "200");
    assert!(walk(&secrets_dir).is_empty(), "the override's secret outlived it");

    // RoCE: upsert counts, per-host listing, delete.
    let rows = json!({ "items": [
        { "hostname": "c07u31", "interface": "enp28s0np0", "ipv4_cidr": "172.30.9.61/31" },
        { "hostname": "c07u31", "interface": "enp29s0np0", "ipv4_cidr": "172.29.1.219/31" },
        { "hostname": "c07u33", "interface": "enp28s0np0", "ipv4_cidr": "172.30.9.65/31" },
    ] });
    let (_, r) = call(&h, "POST", "/v1/maas/sites/dc1/roce-assignments", Some(rows)).await;
    assert_eq!((r["created"].as_u64(), r["updated"].as_u64()), (Some(3), Some(0)), "{r}");
    let again = json!({ "items": [{ "hostname": "c07u31", "interface": "enp29s0np0", "ipv4Cidr": "172.29.1.221/31" }] });
    let (_, r) = call(&h, "POST", "/v1/maas/sites/dc1/roce-assignments", Some(again)).await;
    assert_eq!((r["created"].as_u64(), r["updated"].as_u64()), (Some(0), Some(1)), "{r}");
    let (_, listed) = call(&h, "GET", "/v1/maas/sites/dc1/roce-assignments?hostname=c07u31", None).await;
    let cidrs: Vec<&str> = listed["items"].as_array().expect("items").iter().filter_map(|r| r["ipv4Cidr"].as_str()).collect();
    assert_eq!(cidrs, ["172.30.9.61/31", "172.29.1.221/31"]);

    // Profiles: created with defaults, patched field by field, made the default.
    let (code, p) =
        call(&h, "POST", "/v1/maas/sites/dc1/profiles", Some(json!({ "name": "strict", "policy": { "batchMaxParallel": 2 } }))).await;
    assert_eq!(code, "201", "{p}");
    assert_eq!((p["policy"]["batchMaxParallel"].as_u64(), p["policy"]["requireHwSync"].as_bool()), (Some(2), Some(true)), "{p}");
    let (_, p) =
        call(&h, "PATCH", "/v1/maas/sites/dc1/profiles/strict", Some(json!({ "policy": { "distroSeries": "ubuntu/jammy" } }))).await;
    assert_eq!((p["policy"]["batchMaxParallel"].as_u64(), p["policy"]["distroSeries"].as_str()), (Some(2), Some("ubuntu/jammy")), "{p}");
    let (_, s) = call(&h, "PATCH", "/v1/maas/sites/dc1", Some(json!({ "defaultProfile": "strict" }))).await;
    assert_eq!(s["defaultProfileId"], p["id"], "{s}");
    let (code, _) = call(&h, "PATCH", "/v1/maas/sites/dc1/profiles/default", Some(json!({ "status": "disabled" }))).await;
    assert_eq!(code, "200", "the old default may be disabled now");
}

/// A profile written straight to the store, as one named before names were checked could be.
fn store_profile_named(h: &Harness, site_id: &str, name: &str) -> String {
    use drover_engine::store::{ChangeLog, NewAudit, NewEvent, Profile, SiteStatus};
    let at = drover_engine::app::Clock::now(&*h.clock);
    let profile = Profile {
        id: uuid::Uuid::new_v4(),
        site_id: uuid::Uuid::parse_str(site_id).expect("site id"),
        name: name.to_owned(),
        description: None,
        status: SiteStatus::Active,
        policy: Default::default(),
        revision: 1,
        created_at: at,
        updated_at: at,
    };
    let log = ChangeLog {
        event: NewEvent {
            at,
            kind: "maas.profile.created".into(),
            host_id: None,
            rollout_id: None,
            job_id: None,
            message: "an old profile".into(),
            data: json!({ "siteId": site_id }),
        },
        audit: NewAudit {
            at,
            actor: "legacy".into(),
            role: "admin".into(),
            action: "maas.profile.created".into(),
            target: profile.id.to_string(),
            reason: "an old profile".into(),
            prior_state: None,
            expected_state: None,
        },
    };
    h.running.app.store.create_profile(&profile, &log).expect("stored").id.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_or_profile_named_with_another_ones_id_is_refused_and_the_id_still_finds_that_one() {
    logs();
    let h = Harness::start().await;
    let site = create_site(&h, "dc1", "http://127.0.0.1:9/MAAS").await;
    let site_id = site["id"].as_str().expect("id").to_owned();
    let default_id = site["defaultProfileId"].as_str().expect("defaultProfileId").to_owned();
    let (code, p) = call(&h, "POST", "/v1/maas/sites/dc1/profiles", Some(json!({ "name": "zz-gpu" }))).await;
    assert_eq!(code, "201", "{p}");
    let profile_id = p["id"].as_str().expect("id").to_owned();

    let named = |name: &str| {
        let mut b = site_body("dc2", "http://127.0.0.1:9/MAAS");
        b["name"] = json!(name);
        b
    };
    let mut default_named = site_body("dc2", "http://127.0.0.1:9/MAAS");
    default_named["defaultProfileName"] = json!(default_id);
    let cases: Vec<(&str, String, Value, &str)> = vec![
        ("POST", "/v1/maas/sites".into(), named(&site_id), "site name"),
        ("POST", "/v1/maas/sites".into(), default_named, "profile name"),
        ("PATCH", "/v1/maas/sites/dc1".into(), json!({ "name": site_id.to_ascii_uppercase() }), "site name"),
        ("POST", "/v1/maas/sites/dc1/profiles".into(), json!({ "name": profile_id }), "profile name"),
        ("PATCH", "/v1/maas/sites/dc1/profiles/default".into(), json!({ "name": profile_id.replace('-', "") }), "profile name"),
    ];
    for (method, path, body, what) in cases {
        let (code, e) = call(&h, method, &path, Some(body.clone())).await;
        assert_eq!(code, "400", "{method} {path} {body}: {e}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(what) && message.contains("names must not parse as ids, which are resolved first"), "{e}");
    }
    let (_, sites) = call(&h, "GET", "/v1/maas/sites", None).await;
    assert_eq!(sites["items"].as_array().map(Vec::len), Some(1), "{sites}");
    let (_, profiles) = call(&h, "GET", "/v1/maas/sites/dc1/profiles", None).await;
    assert_eq!(profiles["items"].as_array().map(Vec::len), Some(2), "{profiles}");

    // A profile already stored under zz-gpu's id (from before the rule) sorts first by name,
    // where the old lookup found it; reads and writes by the id reach zz-gpu.
    let shadow = store_profile_named(&h, &site_id, &profile_id);
    let (code, p) = call(&h, "GET", &format!("/v1/maas/sites/dc1/profiles/{profile_id}"), None).await;
    assert_eq!((code.as_str(), p["id"].as_str(), p["name"].as_str()), ("200", Some(profile_id.as_str()), Some("zz-gpu")), "{p}");
    let (code, p) =
        call(&h, "PATCH", &format!("/v1/maas/sites/dc1/profiles/{profile_id}"), Some(json!({ "description": "changed by id" }))).await;
    assert_eq!((code.as_str(), p["id"].as_str()), ("200", Some(profile_id.as_str())), "{p}");
    let (code, s) = call(&h, "PATCH", &format!("/v1/maas/sites/{site_id}"), Some(json!({ "defaultProfile": profile_id }))).await;
    assert_eq!((code.as_str(), s["defaultProfileId"].as_str()), ("200", Some(profile_id.as_str())), "{s}");
    let (_, other) = call(&h, "GET", &format!("/v1/maas/sites/dc1/profiles/{shadow}"), None).await;
    assert_eq!((other["name"].as_str(), other["description"].as_str()), (Some(profile_id.as_str()), None), "left alone: {other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drover_site_cli_end_to_end() {
    logs();
    let maas = fake_maas();
    let h = Harness::start().await;
    let dir = h.dir.path();
    let out = h
        .drover_as(
            &h.admin,
            &[
                "site",
                "create",
                "dc1",
                "--region",
                "eu-1",
                "--maas-url",
                maas.url(),
                "--pxe-iface",
                "ens19",
                "--pxe-vlan",
                "46",
                "--node-pxe-iface",
                "eno8303",
            ],
        )
        .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(" dc1 active"), "{}", String::from_utf8_lossy(&out.stdout));

    let token = dir.join("maas.token");
    std::fs::write(&token, format!("{}\n", api_key())).expect("write");
    let out = h.drover_as(&h.admin, &["site", "credentials", "dc1", "--api-token-file", token.to_str().expect("utf8")]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_no_secret("drover site credentials' output", &String::from_utf8_lossy(&out.stdout));

    let out = h.drover_as(&h.admin, &["site", "probe", "dc1"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("MAAS ") && stdout.contains("RACK CONTROLLER"), "{stdout}");

    let csv = dir.join("roce.csv");
    std::fs::write(&csv, "hostname,interface,ipv4_cidr\nc07u31,enp28s0np0,172.30.9.61/31\nc07u31,enp29s0np0,172.29.1.219/31\n")
        .expect("write");
    let out = h.drover_as(&h.admin, &["site", "roce", "import", "dc1", csv.to_str().expect("utf8")]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "created 2, updated 0, unchanged 0");
    let out = h.drover_as(&h.viewer, &["site", "roce", "list", "dc1", "-o", "json"]).await;
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2));

    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "hostname,interface,ipv4_cidr\nc07u31,enp28s0np0,172.30.9.61\n").expect("write");
    let out = h.drover_as(&h.admin, &["site", "roce", "import", "dc1", bad.to_str().expect("utf8")]).await;
    assert_eq!(out.status.code(), Some(65), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"), "{}", String::from_utf8_lossy(&out.stderr));

    let out = h.drover_as(&h.viewer, &["site", "list", "-o", "json"]).await;
    let sites: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(sites["items"][0]["name"], "dc1");
    let out = h.drover_as(&h.viewer, &["site", "disable", "dc1"]).await;
    assert_eq!(out.status.code(), Some(77), "a viewer may not disable");

    // A MAAS that went away: the probe says so with exit 69.
    drop(maas);
    let out = h.drover_as(&h.admin, &["site", "probe", "dc1"]).await;
    assert_eq!(out.status.code(), Some(69), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("upstream_transient"), "{}", String::from_utf8_lossy(&out.stderr));
}
