//! The workflow preflight (`bare-metal-lifecycle.md` §4.14) over a real SQLite store and a
//! real file secret store, with a scripted [`MaasProbe`] standing in for MAAS so every
//! failure class can be produced on demand: each check names the class it must yield.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_engine::secrets::{FileSecretStore, SecretPath, SecretStore, SecretValue};
use drover_engine::sites::preflight::{PreflightClass, preflight};
use drover_engine::sites::probe::{MaasProbe, ProbeError, ProbeFuture, ProbeReport, ProbeTarget, RackSummary};
use drover_store::{SiteStatus, Store};
use drover_store_conformance::{change, site_fixture, t};
use drover_store_sqlite::SqliteStore;
use tempfile::TempDir;

/// Answers what it is told to, and remembers the token it was given.
struct Scripted {
    answer: Mutex<Result<ProbeReport, ProbeError>>,
    seen_token: Mutex<Option<String>>,
}

impl Scripted {
    fn new(answer: Result<ProbeReport, ProbeError>) -> Scripted {
        Scripted { answer: Mutex::new(answer), seen_token: Mutex::new(None) }
    }
    fn set(&self, answer: Result<ProbeReport, ProbeError>) {
        *self.answer.lock().expect("lock") = answer;
    }
}

impl MaasProbe for Scripted {
    fn probe<'a>(&'a self, target: ProbeTarget<'a>) -> ProbeFuture<'a> {
        *self.seen_token.lock().expect("lock") = Some(target.api_key.to_owned());
        let answer = self.answer.lock().expect("lock").clone();
        Box::pin(async move { answer })
    }
}

fn healthy() -> ProbeReport {
    ProbeReport {
        version: "3.7.0".into(),
        capabilities: vec!["networks-management".into(), "storage-deployment-ubuntu".into()],
        rack_controllers: vec![RackSummary { system_id: "4y3h7n".into(), hostname: "rack-1".into(), version: Some("3.7.0".into()) }],
    }
}

struct World {
    _dir: TempDir,
    store: Arc<dyn Store>,
    secrets: FileSecretStore,
    site: drover_store::Site,
}

fn world() -> World {
    let dir = TempDir::new().expect("tempdir");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("drover.db")).expect("store"));
    let secrets = FileSecretStore::open(dir.path().join("secrets")).expect("secrets");
    let (site, profile) = site_fixture("dc1");
    let site = store.create_site(&site, &profile, &change("maas.site.created", site.id, t(0))).expect("site");
    World { _dir: dir, store, secrets, site }
}

async fn write_token(w: &World, token: &str) {
    let path = SecretPath::new(&w.site.secrets.api_token_path).expect("path");
    w.secrets.write(&path, &SecretValue::from_pairs([("token", token)])).await.expect("write");
}

async fn run(w: &World, probe: &Scripted, needed: &[&str]) -> Result<(), PreflightClass> {
    preflight(w.store.clone(), &w.secrets, probe, w.site.id, None, needed, Duration::from_secs(1)).await.map(|_| ()).map_err(|f| f.class)
}

#[tokio::test]
async fn each_prerequisite_fails_with_its_class() {
    let w = world();
    let probe = Scripted::new(Ok(healthy()));
    assert_eq!(run(&w, &probe, &[]).await, Err(PreflightClass::InputConfigError), "no token written");
    write_token(&w, "ck:tk:first").await;
    assert_eq!(run(&w, &probe, &[]).await, Ok(()));
    assert_eq!(probe.seen_token.lock().expect("lock").as_deref(), Some("ck:tk:first"));

    // Rotation: the next preflight reads the new token, no cache in between.
    write_token(&w, "ck:tk:second").await;
    assert_eq!(run(&w, &probe, &[]).await, Ok(()));
    assert_eq!(probe.seen_token.lock().expect("lock").as_deref(), Some("ck:tk:second"));

    assert_eq!(run(&w, &probe, &["devices-management"]).await, Err(PreflightClass::SiteCapabilityMissing));
    probe.set(Ok(ProbeReport { rack_controllers: vec![], ..healthy() }));
    assert_eq!(run(&w, &probe, &[]).await, Err(PreflightClass::SiteCapabilityMissing), "no rack controller");
    probe.set(Err(ProbeError::Unreachable { message: "connection refused".into() }));
    assert_eq!(run(&w, &probe, &[]).await, Err(PreflightClass::UpstreamTransient));
    probe.set(Err(ProbeError::CredentialsRefused { message: "401".into() }));
    assert_eq!(run(&w, &probe, &[]).await, Err(PreflightClass::InputConfigError));
    probe.set(Ok(healthy()));

    // A disabled site takes no new work.
    let mut disabled = w.site.clone();
    disabled.status = SiteStatus::Disabled;
    w.store.update_site(&disabled, 1, &change("maas.site.disabled", w.site.id, t(1))).expect("disable");
    assert_eq!(run(&w, &probe, &[]).await, Err(PreflightClass::InputConfigError));
}

#[tokio::test]
async fn unknown_site_and_foreign_profile_are_input_errors() {
    let w = world();
    let probe = Scripted::new(Ok(healthy()));
    write_token(&w, "ck:tk:ts").await;
    let unknown = preflight(w.store.clone(), &w.secrets, &probe, uuid::Uuid::new_v4(), None, &[], Duration::from_secs(1)).await;
    assert_eq!(unknown.expect_err("unknown site").class, PreflightClass::InputConfigError);
    let (other, other_profile) = site_fixture("dc2");
    w.store.create_site(&other, &other_profile, &change("maas.site.created", other.id, t(0))).expect("other site");
    let foreign = preflight(w.store.clone(), &w.secrets, &probe, w.site.id, Some(other_profile.id), &[], Duration::from_secs(1)).await;
    let e = foreign.expect_err("another site's profile");
    assert_eq!(e.class, PreflightClass::InputConfigError);
    assert!(e.message.contains("not a profile of site dc1"), "{e}");
    assert!(probe.seen_token.lock().expect("lock").is_none(), "MAAS was called although the input was wrong");
}
