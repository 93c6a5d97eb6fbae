//! The file secret backend: round trips, modes (0600 files, 0700 directories), atomic
//! overwrite, refusal of traversal, of symbolic links (the secret, a directory above it, the
//! root) and of files open to group or others, and values that never print.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::sync::Arc;

use drover_engine::config::{Config, SecretsBackend, SecretsConfig};
use drover_engine::secrets::{self, FileSecretStore, SecretError, SecretPath, SecretStore, SecretValue};
use tempfile::TempDir;

const SECRET: &str = "s3cr3t-Pa55w0rd-never-shown";

fn path(p: &str) -> SecretPath {
    SecretPath::new(p).expect("valid path")
}

fn power(pass: &str) -> SecretValue {
    SecretValue::from_pairs([("user", "root"), ("pass", pass)])
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).expect("metadata").permissions().mode() & 0o7777
}

/// A store rooted at `<tmp>/secrets` (created by the store).
fn fresh() -> (TempDir, FileSecretStore) {
    let dir = TempDir::new().expect("tempdir");
    let store = FileSecretStore::open(dir.path().join("secrets")).expect("open");
    (dir, store)
}

/// Every way an error can be shown, checked for the secret.
fn assert_no_secret(e: &SecretError) {
    let mut shown = format!("{e} {e:?}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        shown.push_str(&format!(" {s} {s:?}"));
        source = s.source();
    }
    assert!(!shown.contains(SECRET), "an error shows the secret: {shown}");
}

#[tokio::test]
async fn round_trip_with_modes() {
    let (dir, store) = fresh();
    let p = path("maas-sites/6f1c2d3e-0000-4000-8000-000000000001/power/default");
    assert_eq!(store.backend(), "file");
    assert_eq!(store.read(&p).await.expect("read"), None);
    store.write(&p, &power(SECRET)).await.expect("write");
    let back = store.read(&p).await.expect("read").expect("present");
    assert_eq!((back.get("user"), back.get("pass")), (Some("root"), Some(SECRET)));
    assert_eq!(back, power(SECRET));

    let root = dir.path().join("secrets");
    let file = root.join("maas-sites/6f1c2d3e-0000-4000-8000-000000000001/power/default.json");
    assert_eq!(store.file_of(&p), file);
    assert_eq!(mode(&file), 0o600);
    for d in ["", "maas-sites", "maas-sites/6f1c2d3e-0000-4000-8000-000000000001", "maas-sites/6f1c2d3e-0000-4000-8000-000000000001/power"]
    {
        assert_eq!(mode(&root.join(d)), 0o700, "directory {d:?}");
    }
    let json: BTreeMap<String, String> = serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("a JSON object of strings");
    assert_eq!(json.get("pass").map(String::as_str), Some(SECRET));

    store.delete(&p).await.expect("delete");
    assert_eq!(store.read(&p).await.expect("read"), None);
    assert!(!file.exists());
    store.delete(&p).await.expect("deleting an absent secret is fine");
    store.delete(&path("never/written/here")).await.expect("deleting under absent directories is fine");
}

#[tokio::test]
async fn overwrite_is_atomic_and_seen_at_once() {
    let (dir, store) = fresh();
    let p = path("maas-sites/s1/api-token");
    store.write(&p, &SecretValue::from_pairs([("token", "a:b:c")])).await.expect("write");
    // A second store on the same root (another workflow step, another coordinator process)
    // sees a rotation at once: nothing is cached.
    let other: Arc<dyn SecretStore> = Arc::new(FileSecretStore::open(dir.path().join("secrets")).expect("open"));
    assert_eq!(other.read(&p).await.expect("read").expect("present").get("token"), Some("a:b:c"));
    let file = store.file_of(&p);
    let before = std::fs::metadata(&file).expect("metadata");
    store.write(&p, &SecretValue::from_pairs([("token", "d:e:f")])).await.expect("rotate");
    let after = std::fs::metadata(&file).expect("metadata");
    // A new inode renamed over the old one, never a rewrite in place.
    use std::os::unix::fs::MetadataExt;
    assert_ne!(before.ino(), after.ino());
    assert_eq!(other.read(&p).await.expect("read").expect("present").get("token"), Some("d:e:f"));
    assert_eq!(store.read(&p).await.expect("read").expect("present").get("token"), Some("d:e:f"));
    assert_eq!(mode(&file), 0o600);
    // No temporary file is left behind.
    let names: Vec<String> = std::fs::read_dir(file.parent().expect("parent"))
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["api-token.json".to_owned()]);
    // Many concurrent writers: every read sees one whole value.
    let mut tasks = Vec::new();
    for i in 0..16 {
        let s = other.clone();
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            s.write(&p, &SecretValue::from_pairs([("token", format!("k{i}:t{i}:s{i}"))])).await.expect("write");
            let v = s.read(&p).await.expect("read").expect("present");
            let t = v.get("token").expect("token").to_owned();
            assert!(t.starts_with('k') && t.split(':').count() == 3, "torn value");
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}

#[test]
fn traversal_paths_are_refused() {
    for bad in
        ["../outside", "a/../../outside", "/etc/shadow", "a//b", "a/./b", "a/", "", ".tmp", "a/.hidden", "a\\..\\b", "a/b c", "a/%2e%2e"]
    {
        match SecretPath::new(bad) {
            Err(SecretError::InvalidPath { reason, .. }) => assert!(!reason.is_empty()),
            other => panic!("{bad:?} accepted: {other:?}"),
        }
    }
    let e = SecretPath::new("../x").expect_err("refused").to_string();
    assert!(e.contains("\"../x\""), "{e}");
}

#[tokio::test]
async fn a_symlinked_secret_is_refused() {
    let (dir, store) = fresh();
    let outside = dir.path().join("outside.json");
    std::fs::write(&outside, format!("{{\"pass\":\"{SECRET}\"}}")).expect("write");
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let p = path("site/power/default");
    store.write(&path("site/power/other"), &power("x")).await.expect("write");
    symlink(&outside, store.file_of(&p)).expect("symlink");
    let e = store.read(&p).await.expect_err("a symlink is not followed");
    assert!(matches!(e, SecretError::NotFollowed { .. }), "{e:?}");
    assert!(e.to_string().contains("default.json") && e.to_string().contains("symbolic link"), "{e}");
    assert_no_secret(&e);
    // Writing replaces the link itself; the file it pointed to is untouched.
    store.write(&p, &power("new")).await.expect("write replaces the link");
    assert!(std::fs::read_to_string(&outside).expect("read").contains(SECRET));
    assert_eq!(store.read(&p).await.expect("read").expect("present").get("pass"), Some("new"));

    // A directory above the secret that is a link out of the root.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    symlink(&elsewhere, store.root().join("linked")).expect("symlink");
    for e in [
        store.read(&path("linked/x")).await.expect_err("read through a linked directory"),
        store.write(&path("linked/x"), &power(SECRET)).await.expect_err("write through a linked directory"),
        store.delete(&path("linked/x")).await.expect_err("delete through a linked directory"),
    ] {
        assert!(matches!(e, SecretError::NotFollowed { .. }), "{e:?}");
        assert_no_secret(&e);
    }
    assert_eq!(std::fs::read_dir(&elsewhere).expect("list").count(), 0, "nothing written through the link");

    // A root that is a link.
    let link_root = dir.path().join("root-link");
    symlink(store.root(), &link_root).expect("symlink");
    let e = FileSecretStore::open(&link_root).expect_err("a linked root is refused");
    assert!(matches!(e, SecretError::NotFollowed { .. }), "{e:?}");
}

#[tokio::test]
async fn group_or_world_readable_files_and_directories_are_refused() {
    let (_dir, store) = fresh();
    let p = path("site/power/default");
    store.write(&p, &power(SECRET)).await.expect("write");
    let file = store.file_of(&p);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let e = store.read(&p).await.expect_err("0644 refused");
    match &e {
        SecretError::InsecureMode { file: f, mode, .. } => assert_eq!((f, *mode), (&file, 0o644)),
        other => panic!("{other:?}"),
    }
    let shown = e.to_string();
    assert!(shown.contains("default.json") && shown.contains("0644"), "{shown}");
    assert_no_secret(&e);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    store.read(&p).await.expect("0600 is fine").expect("present");

    let parent = file.parent().expect("parent").to_owned();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let e = store.read(&p).await.expect_err("0755 directory refused");
    assert!(matches!(e, SecretError::InsecureMode { mode: 0o755, .. }), "{e:?}");
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700)).expect("chmod");

    std::fs::set_permissions(store.root(), std::fs::Permissions::from_mode(0o750)).expect("chmod");
    let e = FileSecretStore::open(store.root()).expect_err("0750 root refused");
    assert!(matches!(e, SecretError::InsecureMode { mode: 0o750, .. }), "{e:?}");
}

#[tokio::test]
async fn malformed_files_and_values_never_show_content() {
    let (_dir, store) = fresh();
    let p = path("site/api-token");
    store.write(&p, &SecretValue::from_pairs([("token", "x")])).await.expect("write");
    let file = store.file_of(&p);
    for text in [format!("{{\"token\": \"{SECRET}\""), format!("{{\"token\": [\"{SECRET}\"]}}"), format!("\"{SECRET}\"")] {
        std::fs::write(&file, text).expect("write");
        let e = store.read(&p).await.expect_err("malformed");
        assert!(matches!(e, SecretError::Malformed { backend: "file", .. }), "{e:?}");
        assert!(e.to_string().contains("site/api-token"), "{e}");
        assert_no_secret(&e);
    }
    let e = store.write(&p, &SecretValue::default()).await.expect_err("empty value");
    assert!(matches!(e, SecretError::InvalidValue { .. }), "{e:?}");
    let e = store.write(&p, &SecretValue::from_pairs([("bad field", SECRET)])).await.expect_err("bad field name");
    assert_no_secret(&e);
}

#[test]
fn debug_and_display_redact() {
    let v = power(SECRET);
    for shown in [format!("{v:?}"), format!("{v:#?}"), format!("{v}")] {
        assert!(!shown.contains(SECRET) && !shown.contains("root"), "{shown}");
    }
    assert_eq!(v.fields().collect::<Vec<_>>(), vec!["pass", "user"]);
}

#[tokio::test]
async fn from_config_defaults_to_files_under_the_state_dir() {
    let dir = TempDir::new().expect("tempdir");
    let text = format!(
        "listen = \"127.0.0.1:8443\"\nstate_dir = {:?}\npublic_urls = [\"https://c.example:8443\"]\ntrust_file = \"t.json\"\nagent_binary = \"a\"\n",
        dir.path().display().to_string()
    );
    let config = Config::parse(Path::new("coordinator.toml"), &text).expect("valid");
    assert_eq!(config.secrets, SecretsConfig::default());
    assert_eq!(config.secrets.backend, SecretsBackend::File);
    let store = secrets::from_config(&config).expect("store");
    assert_eq!(store.backend(), "file");
    store.write(&path("a/b"), &power("x")).await.expect("write");
    assert!(dir.path().join("secrets/a/b.json").is_file());
    assert_eq!(mode(&dir.path().join("secrets")), 0o700);

    let custom = dir.path().join("custom");
    let config = Config::parse(Path::new("coordinator.toml"), &format!("{text}[secrets]\ndir = {:?}\n", custom.display().to_string()))
        .expect("valid");
    secrets::from_config(&config).expect("store").write(&path("c"), &power("y")).await.expect("write");
    assert!(custom.join("c.json").is_file());
}
