//! A full disk under a real `drover-coordinator serve` process: its state
//! directory is a small tmpfs in a private mount namespace, filled by a filler file beside the
//! store.
//!
//! - `a_full_disk_refuses_writes_by_name_goes_not_ready_and_loses_nothing`: while the disk is
//!   full every write through the API (a host, a cordon, a rack, a release) is a 507 that says
//!   the disk is full — never an opaque 500 — `/readyz` is a 503 `disk_full`, and reads still
//!   work; once the filler is gone writes succeed and readiness returns; the store then passes
//!   SQLite's `integrity_check` and holds none of what the refused writes would have made,
//!   and all of what the later ones did.
//!
//! The outer test re-runs this binary's `#[ignore]`d inner test under `unshare`, so the tmpfs
//! is never mounted in the namespace the tests run in.

use std::path::Path;
use std::time::{Duration, Instant};

#[path = "../../../agent/tests/it/common/mount_ns.rs"]
mod mount_ns;

use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_tests::procs::{fixed_port_site, log_tail};
use drover_tests::{CI_KEY, Endpoint, wall_now};
use mount_ns::{fill, in_private_mount_namespace, inside_private_mount_namespace, run};
use serde_json::{Value, json};

/// Release `version` (commit `commit`) of a fleet of `hostname` alone, signed with the CI
/// key the site trusts, as a publish request body.
fn release_body(hostname: &str, commit: &str, version: u64) -> String {
    let spec = json!({
        "hosts": { hostname: { "system": "x86_64-linux", "tags": ["gpu"], "channel": "base",
            "closure": "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-nixos-system-gpu-25.05" } },
        "channels": { "base": { "rolloutPolicy": "all", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" } },
        "rolloutPolicies": { "all": { "waves": [ { "selector": { "all": true }, "soakSecs": 0 } ] } }
    });
    let spec = FleetSpec::from_json(spec.to_string().as_bytes()).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: commit.into(), created_at: wall_now() }, version, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&CI_KEY))]).expect("release");
    serde_json::to_string(&PublishRequest::from_files(&files, Some("test".into())).expect("utf-8")).expect("json")
}

/// The writes the test drives, as (what, path, body): each makes something named with `tag`.
fn writes(e: &Endpoint, host: &str, tag: &str) -> Vec<(&'static str, String, String)> {
    vec![
        ("create a host", "/v1/hosts".into(), json!({ "hostname": format!("{tag}-host"), "trustSha256": e.trust_sha256 }).to_string()),
        ("cordon a host", format!("/v1/hosts/{host}/cordon"), json!({ "reason": format!("{tag} cordon") }).to_string()),
        (
            "create a rack",
            "/v1/racks".into(),
            json!({ "name": format!("{tag}-rack"), "hardwareType": "gb200-nvl72", "reason": format!("{tag} rack") }).to_string(),
        ),
        ("publish a release", "/v1/releases".into(), release_body("before-host", "dec0de", 2)),
    ]
}

/// Polls `/readyz` until it answers `code`, for at most 30 s; returns its body.
async fn readiness(e: &Endpoint, code: &str, log: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (got, text) = e.call(None, "GET", "/readyz", None).await;
        if got == code {
            return serde_json::from_str(&text).unwrap_or_else(|err| panic!("/readyz is not JSON ({err}): {text}"));
        }
        assert!(Instant::now() < deadline, "/readyz never answered {code} (last {got}: {text}); log:\n{}", log_tail(log, 40));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_full_disk_refuses_writes_by_name_goes_not_ready_and_loses_nothing() {
    in_private_mount_namespace(concat!(module_path!(), "::a_full_disk_refuses_writes_by_name_goes_not_ready_and_loses_nothing_inner"));
}

#[test]
#[ignore = "runs inside a private mount namespace, started by a_full_disk_refuses_writes_by_name_goes_not_ready_and_loses_nothing"]
fn a_full_disk_refuses_writes_by_name_goes_not_ready_and_loses_nothing_inner() {
    if !inside_private_mount_namespace() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir state");
    run("mount", &["-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", state.to_str().expect("utf-8")]);
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime").block_on(scenario(dir.path()));
    run("umount", &[state.to_str().expect("utf-8")]);
}

async fn scenario(dir: &Path) {
    let (paths, e) = fixed_port_site(dir, "");
    let log = dir.join("coordinator.log");
    let mut server = paths.serve();
    let host = e.create_host("before-host").await["hostId"].as_str().expect("hostId").to_owned();
    let (code, text) = e.call(Some(&e.admin), "POST", "/v1/releases", Some(&release_body("before-host", "c0ffee", 1))).await;
    assert_eq!(code, "201", "{text}");
    assert_eq!(readiness(&e, "200", &log).await["ready"], true);

    let filler = paths.state.join("filler");
    let took = fill(&filler);
    let free = nix::sys::statvfs::statvfs(&paths.state).expect("statvfs").blocks_available();
    assert_eq!(free, 0, "the filler took {took} bytes and left {free} blocks");

    // Readiness says why, before any write has failed.
    let body = readiness(&e, "503", &log).await;
    assert_eq!(body["error"]["code"], "disk_full", "{body}");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(message.contains("disk") && message.contains("full"), "{message}");
    assert!(!message.contains(&*paths.state.to_string_lossy()), "an anonymous route names no path: {message}");

    // Every write is refused by name; nothing of it is kept.
    for (what, path, body) in writes(&e, &host, "during") {
        let (code, text) = e.call(Some(&e.admin), "POST", &path, Some(&body)).await;
        assert_eq!(code, "507", "{what} on a full disk: {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{what}: not JSON ({err}): {text}"));
        assert_eq!(v["error"]["code"], "insufficient_storage", "{what}: {v}");
        let message = v["error"]["message"].as_str().expect("message");
        assert!(message.contains("disk is full") && message.contains("nothing was written"), "{what}: {message}");
    }
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.contains("no space left"), "the log names the cause:\n{}", log_tail(&log, 40));

    // Reads keep working.
    let (code, text) = e.call(Some(&e.admin), "GET", "/v1/hosts?limit=1000", None).await;
    assert_eq!(code, "200", "{text}");
    let (code, text) = e.call(Some(&e.admin), "GET", &format!("/v1/hosts/{host}"), None).await;
    assert_eq!(code, "200", "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["schedulable"], true, "the refused cordon left the host as it was: {v}");
    let body = readiness(&e, "503", &log).await;
    assert_eq!(body["error"]["code"], "disk_full", "still not ready after the failed writes: {body}");

    // Space returns: readiness comes back, and the same writes succeed.
    std::fs::remove_file(&filler).expect("remove the filler");
    assert_eq!(readiness(&e, "200", &log).await["ready"], true);
    for (what, path, body) in writes(&e, &host, "after") {
        let (code, text) = e.call(Some(&e.admin), "POST", &path, Some(&body)).await;
        assert!(code == "200" || code == "201", "{what} once space returned: {code} {text}");
    }

    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
    check_store(&paths.state.join("coordinator.db"));
}

/// The store after the run: SQLite finds it sound, and each write is either whole or absent —
/// the refused writes' rows are nowhere (not as hosts, racks, events or audit records), the
/// later ones' are all there.
fn check_store(db: &Path) {
    let c = rusqlite::Connection::open(db).expect("open the store");
    let check: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
    assert_eq!(check, "ok");
    let count = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap_or_else(|e| panic!("{sql}: {e}")) };
    for (what, sql) in [
        ("hosts", "SELECT count(*) FROM hosts WHERE hostname LIKE 'during%'"),
        ("racks", "SELECT count(*) FROM racks WHERE name LIKE 'during%'"),
        ("events", "SELECT count(*) FROM events WHERE message LIKE '%during%' OR data LIKE '%during%'"),
        ("audit", "SELECT count(*) FROM audit WHERE reason LIKE 'during%' OR target LIKE 'during%'"),
    ] {
        assert_eq!(count(sql), 0, "{what}: a refused write left rows behind");
    }
    assert_eq!(count("SELECT count(*) FROM hosts WHERE hostname = 'after-host'"), 1);
    assert_eq!(count("SELECT count(*) FROM racks WHERE name = 'after-rack'"), 1);
    assert_eq!(count("SELECT count(*) FROM hosts WHERE hostname = 'before-host' AND schedulable = 0"), 1);
    assert_eq!(count("SELECT count(*) FROM audit WHERE reason IN ('after cordon', 'after rack')"), 2);
    // Release 2 was refused, then published whole once: its row and every one of its files.
    assert_eq!(count("SELECT count(*) FROM releases WHERE version = 2"), 1);
    assert_eq!(
        count("SELECT count(*) FROM release_files WHERE version = 2"),
        count("SELECT count(*) FROM release_files WHERE version = 1")
    );
}
