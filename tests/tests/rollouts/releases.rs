//! Publishing releases against a real coordinator: `POST /v1/releases` stores only what
//! verifies against the operator's trust roots and answers every refusal with the rule
//! broken; `releases_dir` goes through the same path; `drover release publish` end to end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drover_engine::app::Clock as _;
use drover_engine::identity::Role;
use drover_engine::store::{AuditFilter, EventFilter};
use drover_proto::enroll::RolloutBundle;
use drover_proto::keys::KeySigner;
use drover_proto::names::RolloutId;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseFiles, ReleaseParams, build_release, manifest_path};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::time::Time;
use drover_tests::{Harness, run_blocking, workspace_binary};
use ed25519_dalek::SigningKey;

/// A release of the example fleet signed by `key` (the harness trusts `[9u8; 32]`).
fn release_signed_by(key: [u8; 32], created_at: Time, version: u64, commit: &str) -> ReleaseFiles {
    let spec = FleetSpec::from_json(include_bytes!("../../../examples/fleet.json")).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: commit.into(), created_at }, version, previous: None };
    build_release(&spec, &params, &[KeySigner::new(SigningKey::from_bytes(&key))]).expect("release")
}

fn release(created_at: Time, version: u64, commit: &str) -> ReleaseFiles {
    release_signed_by([9u8; 32], created_at, version, commit)
}

fn body(files: &ReleaseFiles) -> String {
    serde_json::to_string(&PublishRequest::from_files(files, Some("test".into())).expect("utf-8")).expect("json")
}

/// A publisher operator's certificate and key, issued by the harness's CA.
fn publisher(h: &Harness) -> (PathBuf, PathBuf) {
    let cred = h.running.app.ca.issue_operator("pat", Role::Publisher, h.clock.now()).expect("publisher cert");
    let (crt, key) = (h.dir.path().join("pat.crt"), h.dir.path().join("pat.key"));
    std::fs::write(&crt, cred.cert.pem.as_bytes()).expect("write");
    std::fs::write(&key, cred.key_pem.as_bytes()).expect("write");
    (crt, key)
}

/// Asserts an API error with this status and code.
fn assert_refused(code: &str, text: &str, status: &str, rule: &str) {
    assert_eq!(code, status, "{text}");
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("not the API error shape: {text:?}"));
    assert_eq!(v["error"]["code"], rule, "{text}");
    assert!(v["error"]["message"].is_string(), "{text}");
}

fn write_release(dir: &Path, files: &ReleaseFiles) {
    for (path, bytes) in &files.files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, bytes).expect("write");
    }
}

/// Waits (bounded) until `done` holds, checking every 50 ms.
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_release_is_stored_byte_exact_and_served() {
    let h = Harness::start().await;
    let pat = publisher(&h);
    let files = release(h.clock.now(), 7, "c0ffee");
    let (code, text) = h.call(Some(&pat), "POST", "/v1/releases", Some(&body(&files))).await;
    assert_eq!(code, "201", "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["version"], 7);
    let id = RolloutId::new("gpu", "c0ffee").expect("id");
    assert!(v["rollouts"].as_array().expect("rollouts").iter().any(|r| r == id.as_str()), "{text}");

    let stored = h.running.app.store.get_release(7).expect("store").expect("stored");
    assert_eq!(stored.files, files, "stored bytes differ from the published ones");
    let audit = h.running.app.store.list_audit(&AuditFilter { target: Some("7".into()), ..Default::default() }).expect("audit");
    assert!(audit.iter().any(|a| a.audit.action == "release.publish" && a.audit.actor == "pat" && a.audit.role == "publisher"));

    let (_, cert, _) = h.host_credentials("gpu-01");
    let (code, text) = h.call(Some(&cert), "GET", &format!("/v1/rollouts/{id}"), None).await;
    assert_eq!(code, "200", "{text}");
    let bundle: RolloutBundle = serde_json::from_str(&text).expect("bundle");
    assert_eq!(bundle.manifest.as_bytes(), files.get(&manifest_path(&id)).expect("manifest"));

    // An admin may publish too; the next version is accepted.
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body(&release(h.clock.now(), 8, "c0ffee2")))).await;
    assert_eq!(code, "201", "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_release_is_refused() {
    let h = Harness::start().await;
    let pat = publisher(&h);
    let files = release(h.clock.now(), 7, "c0ffee");
    let (code, first) = h.call(Some(&pat), "POST", "/v1/releases", Some(&body(&files))).await;
    assert_eq!(code, "201", "{first}");
    let audit_of =
        |h: &Harness| h.running.app.store.list_audit(&AuditFilter { target: Some("7".into()), ..Default::default() }).expect("audit");
    let published =
        || h.running.app.store.list_events(&EventFilter { kind: Some("release.published".into()), ..Default::default() }).expect("events");
    let (audits, events) = (audit_of(&h).len(), published().len());
    // The same release again, byte-for-byte (a retried publish): a no-op success answering the
    // stored release, writing nothing.
    let (code, again) = h.call(Some(&pat), "POST", "/v1/releases", Some(&body(&files))).await;
    assert_eq!(code, "200", "{again}");
    assert_eq!(again, first, "the answer is the stored release");
    assert_eq!((audit_of(&h).len(), published().len()), (audits, events), "a no-op writes no audit record or event");
    assert_eq!(h.running.app.store.list_releases().expect("list").len(), 1);
    // Still a no-op once its timestamp has gone stale: it is already what is served.
    h.clock.advance(30 * 86_400);
    let (code, again) = h.call(Some(&pat), "POST", "/v1/releases", Some(&body(&files))).await;
    assert_eq!((code.as_str(), again.as_str()), ("200", first.as_str()));
    // The same version with other content is refused, saying so.
    let (code, text) = h.call(Some(&pat), "POST", "/v1/releases", Some(&body(&release(h.clock.now(), 7, "c0ffee7")))).await;
    assert_refused(&code, &text, "422", "VersionRollback");
    let said: serde_json::Value = serde_json::from_str(&text).expect("json");
    let said = said["error"]["message"].as_str().expect("message");
    assert!(said.contains("version 7 was already accepted with different content") && !said.contains("below"), "{said}");
    assert_eq!(h.running.app.store.get_release(7).expect("store").expect("stored").files, files, "the stored release is untouched");
    // An older version — a replay of an earlier release, or a new one — is refused as a rollback.
    let (code, text) = h.call(Some(&pat), "POST", "/v1/releases", Some(&body(&release(h.clock.now(), 6, "old")))).await;
    assert_refused(&code, &text, "422", "VersionRollback");
    assert!(text.contains("version 6 is below the highest accepted (7)"), "{text}");
    let events =
        h.running.app.store.list_events(&EventFilter { kind: Some("release.refused".into()), ..Default::default() }).expect("events");
    assert!(events.iter().any(|e| e.event.data["rule"] == "VersionRollback"), "refusals are recorded as events");
    // And counted by reason in /metrics.
    let (code, metrics) = h.call(Some(&h.admin), "GET", "/metrics", None).await;
    assert_eq!(code, "200");
    assert!(metrics.contains("drover_verification_failures_total{reason=\"VersionRollback\"} 2"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_release_is_refused() {
    let h = Harness::start().await;
    let long_ago = Time::from_unix(h.clock.now().unix() - 30 * 86_400).expect("time");
    let (code, text) = h.call(Some(&publisher(&h)), "POST", "/v1/releases", Some(&body(&release(long_ago, 7, "c0ffee")))).await;
    assert_refused(&code, &text, "422", "Stale");
    assert!(h.running.app.store.latest_release().expect("store").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_release_is_refused() {
    let h = Harness::start().await;
    let mut files = release(h.clock.now(), 7, "c0ffee");
    // One byte, keeping the JSON canonical: only the signature can tell.
    let fleet = files.files.get_mut("fleet.resolved.json").expect("fleet");
    let at = fleet.windows(6).position(|w| w == b"c0ffee").expect("commit in fleet.resolved");
    fleet[at + 5] = b'f';
    let (code, text) = h.call(Some(&publisher(&h)), "POST", "/v1/releases", Some(&body(&files))).await;
    assert_refused(&code, &text, "422", "BadSignature");
    assert!(h.running.app.store.latest_release().expect("store").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_signed_by_unknown_key_is_refused() {
    let h = Harness::start().await;
    let files = release_signed_by([7u8; 32], h.clock.now(), 7, "c0ffee");
    let (code, text) = h.call(Some(&publisher(&h)), "POST", "/v1/releases", Some(&body(&files))).await;
    assert_refused(&code, &text, "422", "UnknownKey");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewer_cannot_publish() {
    let h = Harness::start().await;
    let files = release(h.clock.now(), 7, "c0ffee");
    let (code, text) = h.call(Some(&h.viewer), "POST", "/v1/releases", Some(&body(&files))).await;
    assert_refused(&code, &text, "403", "forbidden");
    assert!(h.running.app.store.latest_release().expect("store").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_certificate_cannot_publish() {
    let h = Harness::start().await;
    let (_, cert, _) = h.host_credentials("gpu-01");
    let files = release(h.clock.now(), 7, "c0ffee");
    let (code, text) = h.call(Some(&cert), "POST", "/v1/releases", Some(&body(&files))).await;
    assert_refused(&code, &text, "403", "forbidden");
    let (code, text) = h.call(None, "POST", "/v1/releases", Some(&body(&files))).await;
    assert_refused(&code, &text, "401", "unauthenticated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_traversal_in_release_paths_is_refused() {
    let h = Harness::start().await;
    let pat = publisher(&h);
    let files = release(h.clock.now(), 7, "c0ffee");
    for evil in ["../x", "rollouts/../../x.json", "/etc/passwd", "rollouts/gpu@c1/../../x.json"] {
        let mut req = PublishRequest::from_files(&files, None).expect("utf-8");
        req.files.insert(evil.into(), "{}".into());
        let (code, text) = h.call(Some(&pat), "POST", "/v1/releases", Some(&serde_json::to_string(&req).expect("json"))).await;
        assert_refused(&code, &text, "422", "Malformed");
    }
    assert!(h.running.app.store.latest_release().expect("store").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_dropped_into_releases_dir_is_published() {
    let h = Harness::start_with_config(|dir, config| {
        let releases = dir.join("releases");
        std::fs::create_dir(&releases).expect("mkdir");
        config.releases_dir = Some(releases);
        config.releases_poll_secs = 1;
    })
    .await;
    let releases = h.dir.path().join("releases");
    // Written under a dot-name and renamed into place, as CI should.
    let files = release(h.clock.now(), 7, "c0ffee");
    write_release(&releases.join(".r7"), &files);
    std::fs::rename(releases.join(".r7"), releases.join("r7")).expect("rename");
    let store = h.running.app.store.clone();
    wait_for("the release to be published", || store.get_release(7).expect("store").is_some()).await;
    assert_eq!(store.get_release(7).expect("store").expect("stored").files, files, "stored byte-exact");

    // A stale one is refused with its rule recorded as an event; the loop goes on.
    let long_ago = Time::from_unix(h.clock.now().unix() - 30 * 86_400).expect("time");
    write_release(&releases.join("r8"), &release(long_ago, 8, "stale"));
    let refused = || {
        store
            .list_events(&EventFilter { kind: Some("release.refused".into()), ..Default::default() })
            .expect("events")
            .iter()
            .any(|e| e.event.data["rule"] == "Stale")
    };
    wait_for("the stale release to be refused", refused).await;
    write_release(&releases.join("r9"), &release(h.clock.now(), 9, "c0ffee9"));
    wait_for("the next release to be published", || store.get_release(9).expect("store").is_some()).await;
    assert!(store.get_release(8).expect("store").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_publishes_a_release_directory() {
    let h = Harness::start().await;
    let (crt, key) = publisher(&h);
    let dir = h.dir.path().join("release");
    let files = release(h.clock.now(), 7, "c0ffee");
    write_release(&dir, &files);
    let drover = workspace_binary("drover");
    let args = |dir: &Path| {
        vec![
            "release".to_owned(),
            "publish".to_owned(),
            dir.display().to_string(),
            "--coordinator".to_owned(),
            h.url.clone(),
            "--cert".to_owned(),
            crt.display().to_string(),
            "--key".to_owned(),
            key.display().to_string(),
            "--ca".to_owned(),
            h.ca.display().to_string(),
        ]
    };
    let program: &'static str = Box::leak(drover.display().to_string().into_boxed_str());
    let out = run_blocking(program, args(&dir), Vec::new()).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("published release version 7"), "{stdout}");
    assert!(stdout.contains("rollout gpu@c0ffee"), "{stdout}");
    assert_eq!(h.running.app.store.get_release(7).expect("store").expect("stored").files, files);

    // The same again: a no-op success, as the first time.
    let out = run_blocking(program, args(&dir), Vec::new()).await;
    let again = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{again}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(again, stdout, "the same answer");
    // The same version with other content: the coordinator's refusal, named, with exit 65
    // (EX_DATAERR).
    let other = h.dir.path().join("other");
    write_release(&other, &release(h.clock.now(), 7, "c0ffee7"));
    let out = run_blocking(program, args(&other), Vec::new()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{stderr}");
    assert!(stderr.contains("VersionRollback") && stderr.contains("version 7 was already accepted with different content"), "{stderr}");
    assert_eq!(h.running.app.store.get_release(7).expect("store").expect("stored").files, files);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_megabyte_file_name_is_echoed_bounded_in_the_answer_and_the_event() {
    let h = Harness::start().await;
    let pat = publisher(&h);
    let files = release(h.clock.now(), 9, "c0ffee9");
    let mut req = PublishRequest::from_files(&files, Some("test".into())).expect("utf-8");
    let huge = format!("rollouts/{}.json", "x".repeat(3 << 20));
    req.files.insert(huge, "{}".into());
    let (code, text) = h.call(Some(&pat), "POST", "/v1/releases", Some(&serde_json::to_string(&req).expect("json"))).await;
    assert_eq!(code, "422", "refused by verification, naming the file: {}", &text[..text.len().min(300)]);
    assert!(text.len() < 4096, "the answer is bounded: {} bytes", text.len());
    assert!(text.contains("bytes)"), "the cut says how long the name was: {text}");
    let refused =
        h.running.app.store.list_events(&EventFilter { kind: Some("release.refused".into()), ..Default::default() }).expect("events");
    assert!(!refused.is_empty() && refused.iter().all(|e| e.event.message.len() < 4096), "the event is bounded");
}
