//! File I/O for the CLI: reading inputs with clear errors, atomic writes with modes, and
//! loading/storing release directories.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use drover_proto::release::{ROLLOUTS_DIR, ReleaseFiles};

use crate::exit::{CliError, codes};

/// Reads a file, naming it in the error.
pub fn read_file(path: &Path) -> Result<Vec<u8>, CliError> {
    fs::read(path).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound { codes::NO_INPUT } else { codes::IO };
        CliError::new(code, format!("cannot read {}: {e}", path.display()))
    })
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
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
        if exclusive {
            // link(2) fails if the target exists, so a file created after the check above is
            // not replaced either (rename(2) would silently replace it).
            fs::hard_link(&tmp, path)?;
            fs::remove_file(&tmp)?;
        } else {
            fs::rename(&tmp, path)?;
        }
        if let Ok(d) = fs::File::open(dir) {
            d.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(cant)
}

/// Loads a release directory: `fleet.resolved.json`, `timestamp.json`, `rollouts/*.json`
/// and their `.sig` files. Other files are ignored; symlinks are refused.
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
    let rollouts = dir.join(ROLLOUTS_DIR);
    if rollouts.is_dir() {
        let entries = fs::read_dir(&rollouts).map_err(|e| CliError::new(codes::IO, format!("{}: {e}", rollouts.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| CliError::new(codes::IO, format!("{}: {e}", rollouts.display())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") || name.ends_with(".json.sig") {
                add(format!("{ROLLOUTS_DIR}/{name}"), &entry.path())?;
            }
        }
    }
    Ok(files)
}

/// Writes a release's files under `dir` (created if absent), each atomically, mode 0644.
pub fn store_release(dir: &Path, files: &ReleaseFiles) -> Result<(), CliError> {
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
