//! `releases_dir`: a directory of release directories, polled every `releases_poll_secs`.
//!
//! Layout: each entry of `releases_dir` that is a real directory (not a symlink) and whose
//! name does not start with `.` is one release directory exactly as `drover release` writes
//! it (`fleet.resolved.json`, `timestamp.json`, `rollouts/<id>.json`, each with `.sig`).
//! CI should write a release under a dot-name and rename it into place, so a half-written
//! release is never read; one read half-written is simply refused and retried once its
//! contents change.
//!
//! Every new or changed release directory goes through [`publish_release`], the same
//! verification and store path as `POST /v1/releases`. Releases found together are tried in
//! ascending timestamp version, so CI dropping several at once does not refuse its own older
//! ones as rollbacks. A refusal is logged with its rule and recorded as an event (by
//! `publish_release`) once per distinct content, never retried until the content changes,
//! and never stops the loop. A release the store already holds byte-exact (e.g. after a
//! restart) is skipped silently.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use drover_proto::release::{ROLLOUTS_DIR, ROOTS_DIR, ReleaseFiles, TIMESTAMP};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::api::releases::{Actor, MAX_RELEASE_BODY_BYTES, PublishError, publish_release};
use crate::app::AppState;
use crate::store::{self, NewEvent};

/// The actor name audit records and events give the watcher.
pub const ACTOR: &str = "releases_dir";

/// One release directory as read: its files, or why it could not be read.
struct Found {
    dir: PathBuf,
    fingerprint: [u8; 32],
    files: Result<ReleaseFiles, String>,
}

/// Polls `dir` forever (spawned by [`crate::run::start_on`]).
pub async fn watch(app: Arc<AppState>, dir: PathBuf) {
    let mut seen: HashMap<PathBuf, [u8; 32]> = HashMap::new();
    let mut every = tokio::time::interval(Duration::from_secs(app.config.releases_poll_secs));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(dir = %dir.display(), every_secs = app.config.releases_poll_secs, "watching releases_dir");
    loop {
        every.tick().await;
        poll_once(&app, &dir, &mut seen).await;
        // A poll's failures (an unreadable directory, a refused release) are logged and
        // recorded as events where they are met; the pass itself always ends.
        app.loops.ran(crate::loops::RELEASES_DIR, app.clock.now(), Ok::<(), std::convert::Infallible>(()));
    }
}

/// One poll: reads every release directory, publishes those not seen with this content.
pub async fn poll_once(app: &Arc<AppState>, dir: &Path, seen: &mut HashMap<PathBuf, [u8; 32]>) {
    let scan_dir = dir.to_owned();
    let found = match tokio::task::spawn_blocking(move || scan(&scan_dir)).await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot read releases_dir");
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "releases_dir scan did not finish");
            return;
        }
    };
    for f in found {
        if seen.get(&f.dir) == Some(&f.fingerprint) {
            continue;
        }
        seen.insert(f.dir.clone(), f.fingerprint);
        let files = match f.files {
            Ok(files) => files,
            Err(message) => {
                tracing::warn!(dir = %f.dir.display(), %message, "release directory refused");
                record_unreadable(app, &f.dir, message).await;
                continue;
            }
        };
        if already_stored(app, &files).await {
            continue;
        }
        let actor = Actor { name: ACTOR.to_owned(), role: "system".to_owned() };
        let reason = format!("found in releases_dir at {}", f.dir.display());
        match publish_release(app, files, actor, reason).await {
            Ok(p) => tracing::info!(dir = %f.dir.display(), version = p.version, "release from releases_dir published"),
            // publish_release already logged the rule and recorded the event.
            Err(PublishError::Refused(_)) => {}
            Err(PublishError::Store(e)) => {
                tracing::warn!(dir = %f.dir.display(), error = %e, "release from releases_dir not stored");
                // A backend failure is worth another try on the next poll.
                if e.kind() == store::ErrorKind::Backend {
                    seen.remove(&f.dir);
                }
            }
        }
    }
}

/// Whether the store holds a release with the version these files' timestamp claims and
/// exactly these bytes: nothing to do, and nothing worth an event.
async fn already_stored(app: &Arc<AppState>, files: &ReleaseFiles) -> bool {
    let Some(version) = claimed_version(files) else { return false };
    let files = files.clone();
    store::blocking(app.store.clone(), move |s| Ok(s.get_release(version)?.is_some_and(|r| r.files == files))).await.unwrap_or(false)
}

/// The version `timestamp.json` claims, unverified: used only to order and to compare with
/// what is stored, never to decide what is trusted.
fn claimed_version(files: &ReleaseFiles) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_slice(files.get(TIMESTAMP)?).ok()?;
    value.get("version")?.as_u64()
}

async fn record_unreadable(app: &Arc<AppState>, dir: &Path, message: String) {
    let event = NewEvent {
        at: app.clock.now(),
        kind: "release.refused".to_owned(),
        host_id: None,
        rollout_id: None,
        job_id: None,
        message: format!("release directory {} refused: Unreadable: {message}", dir.display()),
        data: json!({ "rule": "Unreadable", "actor": ACTOR, "dir": dir.display().to_string() }),
    };
    if let Err(e) = store::blocking(app.store.clone(), move |s| s.append_event(&event)).await {
        tracing::error!(error = %e, "cannot record a refused release directory");
    }
}

/// Reads every release directory under `root`, ordered by claimed version, then name.
fn scan(root: &Path) -> std::io::Result<Vec<Found>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        // file_type() does not follow symlinks: a link to a directory is not a release here.
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let dir = entry.path();
        let files = load(&dir);
        let mut hash = Sha256::new();
        match &files {
            Ok(files) => {
                for (path, bytes) in &files.files {
                    hash.update((path.len() as u64).to_le_bytes());
                    hash.update(path.as_bytes());
                    hash.update((bytes.len() as u64).to_le_bytes());
                    hash.update(bytes);
                }
            }
            Err(message) => {
                hash.update(b"unreadable:");
                hash.update(message.as_bytes());
            }
        }
        found.push(Found { dir, fingerprint: hash.finalize().into(), files });
    }
    found.sort_by_key(|f| (f.files.as_ref().ok().and_then(claimed_version).unwrap_or(0), f.dir.clone()));
    Ok(found)
}

/// Reads one release directory: regular files at the top level and in `rollouts/` and `roots/`, nothing
/// else. A symlink, a device, or any other directory refuses the whole release, so no file
/// from outside it is ever read; unknown file names are left to `verify_release`'s layout rule.
pub fn load(dir: &Path) -> Result<ReleaseFiles, String> {
    let mut files = ReleaseFiles::default();
    let mut total = 0usize;
    read_level(dir, "", &mut files, &mut total)?;
    Ok(files)
}

fn read_level(dir: &Path, prefix: &str, files: &mut ReleaseFiles, total: &mut usize) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        let name = entry.file_name().into_string().map_err(|_| format!("{}: file name is not UTF-8", path.display()))?;
        let kind = entry.file_type().map_err(|e| format!("{}: {e}", path.display()))?;
        if kind.is_dir() && prefix.is_empty() && (name == ROLLOUTS_DIR || name == ROOTS_DIR) {
            read_level(&path, &format!("{name}/"), files, total)?;
        } else if kind.is_file() {
            let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            // The same bound as the API's body: a release is never larger than what may be posted.
            *total = total.saturating_add(bytes.len());
            if *total > MAX_RELEASE_BODY_BYTES {
                return Err(format!("{}: release is larger than {MAX_RELEASE_BODY_BYTES} bytes", dir.display()));
            }
            files.files.insert(format!("{prefix}{name}"), bytes);
        } else {
            return Err(format!("{}: not a regular file (symlinks and other directories are refused)", path.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_of_the_layout_levels_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rel = dir.path().join("r1");
        fs::create_dir_all(rel.join("rollouts")).expect("mkdir");
        fs::write(rel.join("timestamp.json"), b"{\"version\":3}").expect("write");
        fs::write(rel.join("rollouts/gpu@c1.json"), b"{}").expect("write");
        let files = load(&rel).expect("loads");
        assert_eq!(files.files.keys().collect::<Vec<_>>(), ["rollouts/gpu@c1.json", "timestamp.json"]);
        assert_eq!(claimed_version(&files), Some(3));

        std::os::unix::fs::symlink("/etc/passwd", rel.join("fleet.resolved.json")).expect("symlink");
        assert!(load(&rel).expect_err("symlink").contains("not a regular file"));
        fs::remove_file(rel.join("fleet.resolved.json")).expect("rm");
        fs::create_dir(rel.join("rollouts/nested")).expect("mkdir");
        assert!(load(&rel).is_err(), "nested directories are refused");
    }
}
