//! Honest TLS errors from `drover`, as an operator meets them: the real binary against a real
//! coordinator over mutual TLS. A `--ca` that did not sign the coordinator's certificate, an
//! operator certificate past its validity, and one the coordinator does not trust are each
//! named with their file and exit 77 (EX_NOPERM), not "cannot reach the coordinator" (69).

use std::path::{Path, PathBuf};

use drover_engine::identity::Role;
use drover_engine::pki::San;
use drover_engine::state_dir::StateDir;
use drover_proto::time::Time;
use drover_tests::{Harness, wall_now, workspace_binary};

use drover_tests::output_text as text;

/// `drover get hosts` against `h` with these credentials, as typed; it must exit 77 with
/// nothing on stdout. Its stderr.
async fn refused(h: &Harness, cert: &Path, key: &Path, ca: &Path) -> String {
    let args: Vec<String> = ["get", "hosts", "--coordinator", &h.url]
        .into_iter()
        .map(str::to_owned)
        .chain(["--cert", "--key", "--ca"].into_iter().zip([cert, key, ca]).flat_map(|(f, p)| [f.to_owned(), p.display().to_string()]))
        .collect();
    let bin = workspace_binary("drover");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin).args(&args).stdin(std::process::Stdio::null()).output().expect("drover runs")
    })
    .await
    .expect("join");
    assert_eq!(out.status.code(), Some(77), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    assert!(!err.contains("cannot reach"), "{err}");
    err
}

/// Another site: its own state dir, CA and an admin credential from it.
fn other_site(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let state = StateDir::init(&dir.join("state"), &[San::parse("127.0.0.1").expect("san")], wall_now()).expect("init");
    let cred = state.ca().issue_operator("mallory", Role::Admin, wall_now()).expect("operator cert");
    let (ca, crt, key) = (dir.join("other-ca.crt"), dir.join("mallory.crt"), dir.join("mallory.key"));
    std::fs::write(&ca, state.ca().cert_pem()).expect("write");
    std::fs::write(&crt, &cred.cert.pem).expect("write");
    std::fs::write(&key, &cred.key_pem).expect("write");
    (ca, crt, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_problems_are_named_with_their_files() {
    let h = Harness::start().await;
    let other = tempfile::tempdir().expect("tempdir");
    let (other_ca, stranger_crt, stranger_key) = other_site(other.path());
    let (crt, key) = &h.admin;

    // The right credentials work: what follows fails for the reason it names.
    let out = h.drover_as(&h.admin, &["get", "hosts"]).await;
    assert!(out.status.success(), "{}", text(&out));

    // Another site's CA as --ca: the coordinator's certificate is not signed by it.
    let err = refused(&h, crt, key, &other_ca).await;
    assert!(err.contains(&format!("not signed by the CA in {}", other_ca.display())), "{err}");
    assert_eq!(err.matches(&h.url).count(), 1, "{err}");

    // An operator certificate issued by the site's own CA two years ago: refused before
    // connecting, with its file and when it expired.
    let two_years_ago = Time::from_unix(wall_now().unix() - 2 * 365 * 86_400).expect("time");
    let state = StateDir::open(&h.dir.path().join("state")).expect("open the state dir");
    let old = state.ca().issue_operator("olga", Role::Admin, two_years_ago).expect("operator cert");
    let (old_crt, old_key) = (h.dir.path().join("olga.crt"), h.dir.path().join("olga.key"));
    std::fs::write(&old_crt, &old.cert.pem).expect("write");
    std::fs::write(&old_key, &old.key_pem).expect("write");
    let err = refused(&h, &old_crt, &old_key, &h.ca).await;
    assert!(err.contains(&format!("operator certificate {} expired at ", old_crt.display())), "{err}");
    assert!(!err.contains(&h.url), "{err}");

    // Another site's operator certificate with the right CA: the coordinator refuses it in
    // the handshake, and the alert is named.
    let err = refused(&h, &stranger_crt, &stranger_key, &h.ca).await;
    assert!(err.contains(&format!("refused the operator certificate {}", stranger_crt.display())), "{err}");
    assert_eq!(err.matches(&h.url).count(), 1, "{err}");
}
