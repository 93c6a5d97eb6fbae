//! File I/O for the CLI: reading inputs with clear errors, secrets from files or stdin,
//! atomic writes with modes, and loading/storing release directories.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use drover_proto::release::{FLEET_RESOLVED, ROLLOUTS_DIR, ROOTS_DIR, ReleaseFiles, TIMESTAMP};

use crate::exit::{CliError, codes};

/// Reads a file, naming it in the error.
pub fn read_file(path: &Path) -> Result<Vec<u8>, CliError> {
    fs::read(path).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound { codes::NO_INPUT } else { codes::IO };
        CliError::new(code, format!("cannot read {}: {e}", path.display()))
    })
}

/// A secret from a file (`-`: stdin), trailing newline removed; errors name the file, never
/// the contents.
pub fn read_secret(path: &std::path::Path, what: &str) -> Result<String, CliError> {
    let bytes = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .map_err(|e| CliError::new(codes::IO, format!("cannot read {what} from stdin: {e}")))?;
        buf
    } else {
        read_file(path)?
    };
    let text = String::from_utf8(bytes).map_err(|_| CliError::data(format!("{what} in {} is not UTF-8", path.display())))?;
    let text = text.trim_end_matches(['\n', '\r']).to_owned();
    if text.is_empty() {
        return Err(CliError::data(format!("{what} in {} is empty", path.display())));
    }
    Ok(text)
}

/// Reads a UTF-8 text file.
pub fn read_text(path: &Path) -> Result<String, CliError> {
    String::from_utf8(read_file(path)?).map_err(|_| CliError::data(format!("{} is not UTF-8 text", path.display())))
}

/// Reads a file, or stdin for `None` / `-`; returns a display name with the bytes.
pub fn read_input(path: Option<&Path>) -> Result<(String, Vec<u8>), CliError> {
    match path {
        Some(p) if p != Path::new("-") => Ok((p.display().to_string(), read_file(p)?)),
        _ => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).map_err(|e| CliError::new(codes::IO, format!("cannot read stdin: {e}")))?;
            Ok(("<stdin>".to_owned(), buf))
        }
    }
}

/// Writes bytes to stdout.
pub fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes).and_then(|()| out.flush()).map_err(|e| CliError::new(codes::IO, format!("cannot write stdout: {e}")))
}

/// Writes a file atomically (temp file in the same directory, fsync, rename) with `mode`.
/// With `exclusive`, refuses to replace an existing file.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32, exclusive: bool) -> Result<(), CliError> {
    let cant = |e: std::io::Error| CliError::new(codes::CANT_CREATE, format!("cannot write {}: {e}", path.display()));
    if exclusive && path.symlink_metadata().is_ok() {
        return Err(CliError::new(codes::CANT_CREATE, format!("{} already exists; refusing to overwrite", path.display())));
    }
    let mode_of = if exclusive { drover_fsio::Mode::Exclusive } else { drover_fsio::Mode::Replace };
    let result = drover_fsio::write_atomic(path, bytes, mode, mode_of);
    result.map_err(cant)
}

/// Loads a release directory: `fleet.resolved.json`, `timestamp.json`, `rollouts/*.json`,
/// `roots/*.json` and their `.sig` files. Other files are ignored; symlinks inside the
/// directory (a release file, or `rollouts` or `roots` itself) are refused. `dir` itself may be a symlink.
pub fn load_release(dir: &Path) -> Result<ReleaseFiles, CliError> {
    let mut files = ReleaseFiles::default();
    let meta =
        fs::metadata(dir).map_err(|e| CliError::new(codes::NO_INPUT, format!("cannot read release directory {}: {e}", dir.display())))?;
    if !meta.is_dir() {
        return Err(CliError::new(codes::NO_INPUT, format!("{} is not a directory", dir.display())));
    }
    let mut add = |rel: String, path: &Path| -> Result<(), CliError> {
        let lmeta = fs::symlink_metadata(path).map_err(|e| CliError::new(codes::IO, format!("{}: {e}", path.display())))?;
        if lmeta.file_type().is_symlink() {
            return Err(CliError::data(format!("{} is a symlink; release files must be regular files", path.display())));
        }
        files.files.insert(rel, read_file(path)?);
        Ok(())
    };
    for name in ["fleet.resolved.json", "fleet.resolved.json.sig", "timestamp.json", "timestamp.json.sig"] {
        let p = dir.join(name);
        if p.symlink_metadata().is_ok() {
            add(name.to_owned(), &p)?;
        }
    }
    for sub in [ROLLOUTS_DIR, ROOTS_DIR] {
        let subdir = dir.join(sub);
        // symlink_metadata, not is_dir(): that follows a symlink, and a `rollouts` (or
        // `roots`) link would pull artifacts from anywhere into the release.
        let meta = match fs::symlink_metadata(&subdir) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(CliError::new(codes::IO, format!("{}: {e}", subdir.display()))),
        };
        if meta.as_ref().is_some_and(|m| m.file_type().is_symlink()) {
            return Err(CliError::data(format!("{} is a symlink; a release's {sub} must be a real directory", subdir.display())));
        }
        if meta.is_some_and(|m| m.is_dir()) {
            let entries = fs::read_dir(&subdir).map_err(|e| CliError::new(codes::IO, format!("{}: {e}", subdir.display())))?;
            for entry in entries {
                let entry = entry.map_err(|e| CliError::new(codes::IO, format!("{}: {e}", subdir.display())))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".json") || name.ends_with(".json.sig") {
                    add(format!("{sub}/{name}"), &entry.path())?;
                }
            }
        }
    }
    Ok(files)
}

/// Whether `rel` is a path a release may hold: `fleet.resolved.json`, `timestamp.json`,
/// `rollouts/<name>.json` or `roots/<name>.json`, each optionally with `.sig`, where `<name>`
/// is one plain path component (no `/`, no `..`, not empty).
fn is_release_path(rel: &str) -> bool {
    let artifact = rel.strip_suffix(".sig").unwrap_or(rel);
    if artifact == FLEET_RESOLVED || artifact == TIMESTAMP {
        return true;
    }
    let in_dir = |dir: &str| artifact.strip_prefix(dir).and_then(|r| r.strip_prefix('/')).and_then(|r| r.strip_suffix(".json"));
    let Some(name) = in_dir(ROLLOUTS_DIR).or_else(|| in_dir(ROOTS_DIR)) else {
        return false;
    };
    !name.is_empty() && !name.contains('/') && !name.contains("..") && !name.contains('\0')
}

/// Writes a release's files under `dir` (created if absent), each atomically, mode 0644.
/// Every path must be one a release holds ([`is_release_path`]): the paths come from
/// rollout ids, which are validated upstream, but a path that escaped `dir` would be a bug
/// worth stopping at rather than writing through.
pub fn store_release(dir: &Path, files: &ReleaseFiles) -> Result<(), CliError> {
    if let Some(bad) = files.files.keys().find(|rel| !is_release_path(rel)) {
        return Err(CliError::new(codes::SOFTWARE, format!("internal error: refusing to write {bad:?}, not a release path")));
    }
    for (rel, bytes) in &files.files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| CliError::new(codes::CANT_CREATE, format!("cannot create {}: {e}", parent.display())))?;
        }
        write_atomic(&path, bytes, 0o644, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_release_paths_are_release_paths() {
        for ok in [
            "fleet.resolved.json",
            "fleet.resolved.json.sig",
            "timestamp.json",
            "timestamp.json.sig",
            "rollouts/gpu@c0ffee.json",
            "rollouts/gpu@c0ffee.json.sig",
        ] {
            assert!(is_release_path(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../timestamp.json",
            "rollouts/../../x.json",
            "rollouts/a/b.json",
            "rollouts/.json",
            "rollouts/x.txt",
            "rollouts/x.json.sig.sig",
            "rollouts",
            "rollouts/",
            "/rollouts/x.json",
            "other.json",
            "timestamp.json.sig.sig",
            "rollouts/a\0b.json",
        ] {
            assert!(!is_release_path(bad), "{bad:?}");
        }
    }

    #[test]
    fn store_release_refuses_a_path_outside_the_layout_and_writes_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("rel");
        let mut files = ReleaseFiles::default();
        files.files.insert(TIMESTAMP.to_owned(), b"{}".to_vec());
        files.files.insert("rollouts/../../escaped.json".to_owned(), b"{}".to_vec());
        let e = store_release(&out, &files).expect_err("refused");
        assert_eq!(e.code(), codes::SOFTWARE);
        assert!(!out.exists(), "nothing written");
        assert!(!tmp.path().join("escaped.json").exists());
    }
}
