//! Drover's local fleet, for `drover dev` and the end-to-end tests: a real
//! `drover-coordinator serve` on loopback and real `drover-agent run` processes, each in a
//! sandbox root that stands in for a bare-metal GPU host.
//!
//! Only the edge of the machine is faked, and each fake behaves like the tool it replaces
//! (arguments, output formats, exit codes): the Nix toolchain and NixOS closures
//! ([`nixkit`]), `nvidia-smi`, `userdel`, `loginctl` and the drain hook ([`hostroot`]), and
//! systemd's D-Bus API (`fake-systemd` on a private `dbus-daemon`, [`bus`]); so are the
//! services outside the host that its lifecycle drives: a MAAS region ([`fake_maas`], the
//! `fake-maas` binary) and a Redfish power shelf ([`fake_shelf`], `fake-shelf`). Everything else —
//! enrollment through the bootstrap script and `curl`, mutual TLS, signed releases, the
//! rollout and job executors, activation with magic rollback, the maintenance tasks — is the
//! real code path. [`confine`] proves before an agent starts that every path its
//! configuration names lies inside its sandbox, so a demo can never touch the machine it
//! runs on. [`fleet`] is the fleet itself (the coordinator and its agents), [`spec`] its CI
//! side (keys, trust roots, the demo fleet spec, signed releases). [`openbao`], [`postgres`]
//! and [`sushy`] start real OpenBao and PostgreSQL servers and OpenStack's Redfish emulator for
//! tests.

#![forbid(unsafe_code)]

pub mod bus;
pub mod confine;
pub mod fake_maas;
pub mod fake_shelf;
pub mod fleet;
pub mod hostroot;
mod listening;
pub mod nixkit;
pub mod openbao;
pub mod postgres;
pub mod spec;
pub mod sushy;

use std::path::PathBuf;

/// Why the local fleet could not be set up or driven.
#[derive(Debug, thiserror::Error)]
pub enum DevkitError {
    /// A file or directory could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A binary the fleet needs is not where it was looked for.
    #[error("{path} is missing: build the workspace's binaries first (`cargo build --release --bins`)")]
    MissingBinary {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A helper process failed or said something unexpected.
    #[error("{what}: {message}")]
    Process {
        /// Which process.
        what: String,
        /// What went wrong (its stderr's tail where there is one).
        message: String,
    },
    /// A path an agent would touch is outside its sandbox.
    #[error("sandbox check failed for {host}: {key} = {path} is outside {root}")]
    Escapes {
        /// The host.
        host: String,
        /// The configuration key.
        key: String,
        /// The path.
        path: PathBuf,
        /// The sandbox root.
        root: PathBuf,
    },
    /// The coordinator refused a call or could not be reached.
    #[error("coordinator: {0}")]
    Api(#[from] drover_client::ClientError),
    /// Something did not happen in time.
    #[error("timed out after {secs} s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The bound.
        secs: u64,
    },
    /// Building or signing the release failed.
    #[error("release: {0}")]
    Release(String),
}

/// Maps an I/O error to [`DevkitError::Io`] naming `path`.
pub(crate) fn io_at(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DevkitError {
    let path = path.into();
    move |source| DevkitError::Io { path, source }
}

/// Writes `text` to `path` (creating its parent) with mode `mode`.
pub(crate) fn write_file(path: &std::path::Path, text: &str, mode: u32) -> Result<(), DevkitError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io_at(parent))?;
    }
    std::fs::write(path, text).map_err(io_at(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_at(path))
}

/// Single-quotes `p` for a POSIX shell script.
pub(crate) fn sq(p: &std::path::Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}
