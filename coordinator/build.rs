//! Records the commit the coordinator binary is built from, for `drover_build_info` and
//! `GET /v1/version`: `DROVER_BUILD_COMMIT` when the builder sets it (a package built from a
//! source tarball has no `.git`), else `git rev-parse HEAD`, else `unknown`. A build never
//! fails for want of git.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=DROVER_BUILD_COMMIT");
    let from_env = std::env::var("DROVER_BUILD_COMMIT").ok().filter(|c| !c.trim().is_empty());
    let commit = from_env.or_else(git_head).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=DROVER_BUILD_COMMIT={commit}");
}

/// HEAD's commit, 40 hex digits, and the files whose change moves it (so a new commit
/// rebuilds this crate's build info and nothing else).
fn git_head() -> Option<String> {
    let out = Command::new("git").args(["rev-parse", "--git-dir", "HEAD"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines = text.lines();
    let git_dir = Path::new(lines.next()?.trim()).to_path_buf();
    let head = lines.next()?.trim().to_owned();
    if head.len() != 40 || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    // HEAD names a branch whose ref file (or packed-refs) moves with each commit. Only
    // files that exist are watched: cargo reruns a script for a missing one on every build.
    let head_file = git_dir.join("HEAD");
    let mut watched = vec![head_file.clone(), git_dir.join("packed-refs")];
    if let Some(reference) = std::fs::read_to_string(&head_file).ok().as_deref().and_then(|t| t.strip_prefix("ref: ")) {
        watched.push(git_dir.join(reference.trim()));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(head)
}
