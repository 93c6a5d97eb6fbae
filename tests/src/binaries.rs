//! The workspace binaries an end-to-end test runs (`drover-coordinator`, `drover-agent`,
//! `drover`, the fakes), never older than their sources.
//!
//! `cargo test -p drover-tests` rebuilds this crate's own binaries only, so after a change to
//! another crate the `drover-coordinator` in `target/` would be the one from before it. Each
//! binary is therefore judged, the first time a process asks for it, against the dep-info file
//! cargo writes beside it (`NAME.d`: every local source file rustc read for it). When one of
//! them is newer than the binary, or gone, and the process runs under cargo (`CARGO` is set for
//! `cargo test`, `cargo nextest`, `cargo bench` and `cargo run`), it runs `cargo build --workspace
//! --bins` once, with the profile, target directory and target triple the running executable was
//! built with, and then trusts cargo's own fingerprints. Outside cargo (`drover-bench` started from
//! `target/release/`) a stale binary is refused with the command that rebuilds it.
//!
//! Judging first, rather than always building, matters: `cargo test --workspace` builds the
//! binaries with its dev-dependencies' features (tokio's `test-util`), so an unconditional
//! `cargo build --workspace --bins` inside it would compile a second copy of the dependency
//! graph. Cargo rebuilds whenever a source is newer than its last build, so a binary that cargo
//! calls fresh is never older than the sources in its dep-info; the judgement and cargo agree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

/// Why a binary could not be judged or built.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    /// A file's metadata or contents could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// cargo could not be started.
    #[error("cannot run {cargo}: {source}")]
    Spawn {
        /// The cargo binary.
        cargo: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `cargo build` failed.
    #[error("`{command}` failed ({status}):\n{stderr}")]
    Build {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The end of its standard error.
        stderr: String,
    },
}

/// Where a test or bench executable's build keeps the workspace's binaries, and how cargo made
/// them: the directory above `deps/` (or the executable's own directory), cargo's target
/// directory, the profile and the target triple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildLayout {
    /// Where the binaries are (`TARGET[/TRIPLE]/PROFILE_DIR`).
    pub bin_dir: PathBuf,
    /// Cargo's target directory, when `bin_dir` sits in one (it holds `CACHEDIR.TAG`).
    pub target_dir: Option<PathBuf>,
    /// The `--profile` that builds into `bin_dir` (`debug` is the `dev` profile's directory).
    pub profile: String,
    /// The `--target` triple, when the build named one.
    pub triple: Option<String>,
}

/// The layout for the running executable `exe`.
pub fn layout_of(exe: &Path) -> BuildLayout {
    let parent = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let bin_dir =
        if parent.file_name().is_some_and(|n| n == "deps") { parent.parent().map(Path::to_path_buf).unwrap_or_default() } else { parent };
    let profile = match bin_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    };
    let tagged = |d: &Path| d.join("CACHEDIR.TAG").is_file();
    let above = bin_dir.parent();
    let (target_dir, triple) = match (above, above.and_then(Path::parent)) {
        // `--target T` builds into TARGET/T/PROFILE, and cargo tags both TARGET and TARGET/T.
        (Some(t), Some(root)) if tagged(root) => (Some(root.to_path_buf()), t.file_name().and_then(|n| n.to_str()).map(str::to_owned)),
        (Some(root), _) if tagged(root) => (Some(root.to_path_buf()), None),
        _ => (None, None),
    };
    BuildLayout { bin_dir, target_dir, profile, triple }
}

/// What a binary's dep-info says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// Every source it was built from is older than it.
    Fresh,
    /// These sources are newer than it, or gone.
    Stale(Vec<PathBuf>),
    /// There is no binary.
    Missing,
    /// There is a binary but no dep-info beside it (not cargo's layout): taken as it is.
    Unrecorded,
}

/// The files a cargo dep-info file (`TARGET: DEP DEP…`, spaces in names escaped as `\ `) names
/// as dependencies.
pub fn dep_info_sources(text: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.lines() {
        // Comments (`# env-dep:…`) and blank lines name no file.
        if line.starts_with('#') {
            continue;
        }
        let Some(deps) = split_rule(line) else { continue };
        let mut current = String::new();
        let mut chars = deps.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => current.extend(chars.next()),
                c if c.is_whitespace() => {
                    if !current.is_empty() {
                        out.push(PathBuf::from(std::mem::take(&mut current)));
                    }
                }
                c => current.push(c),
            }
        }
        if !current.is_empty() {
            out.push(PathBuf::from(current));
        }
    }
    out
}

/// The dependency list of a `TARGET: DEPS` rule: after the first `: ` that no backslash escapes.
fn split_rule(line: &str) -> Option<&str> {
    let bytes = line.as_bytes();
    (0..bytes.len().saturating_sub(1))
        .find(|&i| bytes[i] == b':' && bytes[i + 1].is_ascii_whitespace() && (i == 0 || bytes[i - 1] != b'\\'))
        .map(|i| &line[i + 1..])
}

fn modified(path: &Path) -> Result<SystemTime, BinaryError> {
    std::fs::metadata(path).and_then(|m| m.modified()).map_err(|source| BinaryError::Read { path: path.to_path_buf(), source })
}

/// Judges `binary` against the sources in its dep-info file (`BINARY.d` beside it).
pub fn judge(binary: &Path) -> Result<Freshness, BinaryError> {
    if !binary.is_file() {
        return Ok(Freshness::Missing);
    }
    let mut dep_info = binary.as_os_str().to_owned();
    dep_info.push(".d");
    let dep_info = PathBuf::from(dep_info);
    let text = match std::fs::read_to_string(&dep_info) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match rustc_dep_info(binary)? {
            Some(text) => text,
            None => return Ok(Freshness::Unrecorded),
        },
        Err(source) => return Err(BinaryError::Read { path: dep_info, source }),
    };
    let built = modified(binary)?;
    let mut newer = Vec::new();
    // rustc's own dep-info names the workspace's files relative to the directory cargo runs
    // it in, the workspace root (this crate's parent); cargo's `NAME.d` names them absolute.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new("/"));
    for source in dep_info_sources(&text) {
        let source = root.join(source);
        // The rule's own target is the binary; anything else gone or newer makes it stale.
        if source == binary {
            continue;
        }
        match std::fs::metadata(&source).and_then(|m| m.modified()) {
            Ok(t) if t <= built => {}
            _ => newer.push(source),
        }
    }
    Ok(if newer.is_empty() { Freshness::Fresh } else { Freshness::Stale(newer) })
}

/// The dep-info rustc wrote for the file `binary` was copied from. Cargo builds a binary as
/// `deps/CRATE-HASH` (with `deps/CRATE-HASH.d` beside it) and hard-links it up as `NAME`;
/// only `cargo build` also writes `NAME.d`, so for a binary that `cargo test` built, the
/// original is found in `deps/` by its inode. `None` when there is no such file.
fn rustc_dep_info(binary: &Path) -> Result<Option<String>, BinaryError> {
    use std::os::unix::fs::MetadataExt as _;
    let (Some(dir), Some(name)) = (binary.parent(), binary.file_name().and_then(|n| n.to_str())) else { return Ok(None) };
    let meta = std::fs::metadata(binary).map_err(|source| BinaryError::Read { path: binary.to_path_buf(), source })?;
    let prefix = format!("{}-", name.replace('-', "_"));
    let Ok(entries) = std::fs::read_dir(dir.join("deps")) else { return Ok(None) };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        if !file.starts_with(&prefix) || file.contains('.') {
            continue;
        }
        let same = entry.metadata().is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino());
        if !same {
            continue;
        }
        let path = dir.join("deps").join(format!("{file}.d"));
        return match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(BinaryError::Read { path, source }),
        };
    }
    Ok(None)
}

/// The `cargo build` that rebuilds every binary of the workspace (`manifest` is a member's or
/// the workspace's `Cargo.toml`) into `layout`.
pub fn build_command(cargo: &Path, manifest: &Path, layout: &BuildLayout) -> Command {
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--workspace", "--bins", "--profile", &layout.profile]).arg("--manifest-path").arg(manifest);
    if let Some(triple) = &layout.triple {
        cmd.args(["--target", triple]);
    }
    if let Some(target) = &layout.target_dir {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    cmd
}

/// Runs [`build_command`] to the end.
pub fn build(cargo: &Path, manifest: &Path, layout: &BuildLayout) -> Result<(), BinaryError> {
    let mut cmd = build_command(cargo, manifest, layout);
    let command = format!("{} {}", cargo.display(), cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" "));
    let out =
        cmd.stdin(std::process::Stdio::null()).output().map_err(|source| BinaryError::Spawn { cargo: cargo.to_path_buf(), source })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
    Err(BinaryError::Build { command, status: out.status, stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n") })
}

/// What this process has done so far: the build it ran (its error, if it failed), and which
/// binaries it judged.
struct Seen {
    build: Option<Result<(), String>>,
    judged: BTreeSet<String>,
}

static SEEN: Mutex<Seen> = Mutex::new(Seen { build: None, judged: BTreeSet::new() });

/// The binary `name` of this build (see the module's documentation), built first when it is
/// missing or older than its sources and cargo runs this process; panics with the reason
/// otherwise.
pub fn fresh_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let layout = layout_of(&exe);
    let path = layout.bin_dir.join(name);
    // A poisoned lock only means another test panicked here; what it recorded still holds.
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.judged.contains(name) {
        return path;
    }
    let verdict = judge(&path).unwrap_or_else(|e| panic!("cannot judge {}: {e}", path.display()));
    let why = match &verdict {
        Freshness::Fresh | Freshness::Unrecorded => None,
        Freshness::Missing => Some(format!("{} is missing", path.display())),
        Freshness::Stale(newer) => {
            Some(format!("{} is older than {} of its sources (first: {})", path.display(), newer.len(), newer[0].display()))
        }
    };
    if let Some(why) = why {
        let cargo = std::env::var_os("CARGO").map(PathBuf::from);
        let rebuild = format!("cargo build --workspace --bins --profile {}", layout.profile);
        match (&cargo, seen.build.clone()) {
            // Once per process: after that build cargo's fingerprints are the authority, and a
            // failed one is not tried again by every test that follows.
            (_, Some(Ok(()))) => {}
            (_, Some(Err(e))) => panic!("{why}; the build this process ran failed: {e}"),
            (Some(cargo), None) if layout.target_dir.is_some() => {
                let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
                eprintln!("{why}: running `{rebuild}`");
                let result = build(cargo, &manifest, &layout).map_err(|e| e.to_string());
                seen.build = Some(result.clone());
                if let Err(e) = result {
                    // Released first, so the tests that follow read the failure, not a poison.
                    drop(seen);
                    panic!("{why}; rebuilding it: {e}");
                }
            }
            _ => panic!("{why}: run `{rebuild}` first"),
        }
        assert!(path.is_file(), "{} is still missing after `{rebuild}`", path.display());
    }
    seen.judged.insert(name.to_owned());
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::time::Duration;

    fn touch(path: &Path, at: SystemTime) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let f = File::options().create(true).append(true).open(path).expect("create");
        f.set_modified(at).expect("set mtime");
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    /// A binary built at t=100 from `a.rs` and `dir with space/b.rs`, with its dep-info.
    fn built_tree() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("src/a.rs"), dir.path().join("src/dir with space/b.rs"));
        touch(&a, at(10));
        touch(&b, at(20));
        let bin = dir.path().join("target/debug/drover-coordinator");
        touch(&bin, at(100));
        let escape = |p: &Path| p.display().to_string().replace(' ', "\\ ");
        let rule = format!("{}: {} {}\n\n# env-dep:CARGO_PKG_NAME=x\n", escape(&bin), escape(&a), escape(&b));
        std::fs::write(dir.path().join("target/debug/drover-coordinator.d"), rule).expect("dep-info");
        (dir, bin, a, b)
    }

    #[test]
    fn a_binary_built_after_all_its_sources_is_fresh() {
        let (_dir, bin, _, _) = built_tree();
        assert_eq!(judge(&bin).expect("judge"), Freshness::Fresh);
    }

    #[test]
    fn a_source_edited_after_the_build_makes_the_binary_stale() {
        let (_dir, bin, _, b) = built_tree();
        touch(&b, at(101));
        assert_eq!(judge(&bin).expect("judge"), Freshness::Stale(vec![b]));
    }

    #[test]
    fn a_source_removed_since_the_build_makes_the_binary_stale() {
        let (_dir, bin, a, _) = built_tree();
        std::fs::remove_file(&a).expect("rm");
        assert_eq!(judge(&bin).expect("judge"), Freshness::Stale(vec![a]));
    }

    #[test]
    fn no_binary_is_missing_and_no_dep_info_is_unrecorded() {
        let (dir, bin, _, _) = built_tree();
        assert_eq!(judge(&dir.path().join("target/debug/drover")).expect("judge"), Freshness::Missing);
        std::fs::remove_file(dir.path().join("target/debug/drover-coordinator.d")).expect("rm");
        assert_eq!(judge(&bin).expect("judge"), Freshness::Unrecorded);
    }

    #[test]
    fn a_binary_cargo_test_uplifted_is_judged_by_rustcs_dep_info_in_deps() {
        let (dir, bin, a, _) = built_tree();
        std::fs::remove_file(dir.path().join("target/debug/drover-coordinator.d")).expect("rm");
        // What `cargo test` leaves: deps/CRATE-HASH and its dep-info, NAME a hard link to it.
        let original = dir.path().join("target/debug/deps/drover_coordinator-0123abcd");
        std::fs::create_dir_all(original.parent().expect("deps")).expect("mkdir");
        std::fs::remove_file(&bin).expect("rm");
        touch(&original, at(100));
        std::fs::hard_link(&original, &bin).expect("link");
        // A library of the same crate name with its own dep-info is not the binary.
        touch(&dir.path().join("target/debug/deps/drover_coordinator-ffff0000"), at(100));
        std::fs::write(dir.path().join("target/debug/deps/drover_coordinator-ffff0000.d"), "x: \n").expect("other");
        let rule = format!("{}: {}\n", original.display(), a.display());
        std::fs::write(dir.path().join("target/debug/deps/drover_coordinator-0123abcd.d"), rule).expect("dep-info");
        assert_eq!(judge(&bin).expect("judge"), Freshness::Fresh);
        touch(&a, at(101));
        assert_eq!(judge(&bin).expect("judge"), Freshness::Stale(vec![a]));
    }

    #[test]
    fn layouts_of_test_bench_and_cross_builds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = dir.path().join("target");
        touch(&t.join("CACHEDIR.TAG"), at(0));
        touch(&t.join("x86_64-unknown-linux-gnu/CACHEDIR.TAG"), at(0));
        let test = layout_of(&t.join("debug/deps/tls_scan-0123abcd"));
        assert_eq!(test, BuildLayout { bin_dir: t.join("debug"), target_dir: Some(t.clone()), profile: "dev".into(), triple: None });
        let bench = layout_of(&t.join("release/drover-bench"));
        assert_eq!(bench, BuildLayout { bin_dir: t.join("release"), target_dir: Some(t.clone()), profile: "release".into(), triple: None });
        let cross = layout_of(&t.join("x86_64-unknown-linux-gnu/release/deps/x-1"));
        assert_eq!(cross.target_dir.as_deref(), Some(t.as_path()));
        assert_eq!(cross.triple.as_deref(), Some("x86_64-unknown-linux-gnu"));
        assert_eq!(cross.profile, "release");
        let copied = layout_of(&dir.path().join("opt/drover/drover-bench"));
        assert_eq!(copied.target_dir, None, "no CACHEDIR.TAG above: not cargo's, never built into");
    }

    #[test]
    fn the_build_uses_the_running_executables_profile_target_dir_and_triple() {
        let layout = BuildLayout {
            bin_dir: PathBuf::from("/t/aarch64-unknown-linux-gnu/release"),
            target_dir: Some(PathBuf::from("/t")),
            profile: "release".into(),
            triple: Some("aarch64-unknown-linux-gnu".into()),
        };
        let cmd = build_command(Path::new("cargo"), Path::new("/w/Cargo.toml"), &layout);
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "build",
                "--workspace",
                "--bins",
                "--profile",
                "release",
                "--manifest-path",
                "/w/Cargo.toml",
                "--target",
                "aarch64-unknown-linux-gnu"
            ]
        );
        let env: Vec<_> = cmd.get_envs().collect();
        assert_eq!(env, [(std::ffi::OsStr::new("CARGO_TARGET_DIR"), Some(std::ffi::OsStr::new("/t")))]);
    }

    #[test]
    fn every_binary_a_test_gets_is_not_older_than_its_sources() {
        for name in ["drover-coordinator", "drover-agent", "drover", "fake-systemd", "fake-maas", "fake-shelf", "drover-bench"] {
            let path = fresh_binary(name);
            // Under cargo, whether `cargo build` (NAME.d) or `cargo test` (deps/CRATE-HASH.d)
            // built it, the binary's sources are on record.
            assert_eq!(judge(&path).expect("judge"), Freshness::Fresh, "{} handed out", path.display());
        }
    }
}
