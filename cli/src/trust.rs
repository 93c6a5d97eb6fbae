//! `drover trust`: writes a `trust.json` from public keys, so operators never hand-edit key
//! ids or validity windows.
//!
//! Key rotation is overlapping windows: `--pub old.pub@..2026-12-31T00:00:00Z --pub
//! new.pub@2026-12-01T00:00:00Z..` lists the outgoing key until the end of the year and the
//! incoming one from December; each counts only inside its window.

use std::path::{Path, PathBuf};

use clap::Args;
use drover_proto::canonical;
use drover_proto::keys::{KeyId, verifying_key_from_text, verifying_key_to_pem};
use drover_proto::time::Time;
use drover_proto::trust::{KeySetDoc, TrustDoc, TrustKeyDoc, TrustRoots};

use crate::exit::{CliError, codes};
use crate::fsio::{read_text, write_atomic, write_stdout};

/// Arguments of `drover trust`.
#[derive(Args)]
pub struct TrustArgs {
    /// A CI public key (SPKI PEM, as `drover keygen` writes NAME.pub); repeat for several.
    /// Append `@NOTBEFORE..NOTAFTER` (RFC 3339, either side may be empty) to give the key a
    /// validity window, e.g. `new.pub@2026-12-01T00:00:00Z..`.
    #[arg(long = "pub", value_name = "FILE[@FROM..UNTIL]", required = true)]
    keys: Vec<String>,
    /// Distinct signatures required (default 1).
    #[arg(long, default_value_t = 1)]
    threshold: u32,
    /// Refuse anything signed before this instant (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    reject_before: Option<String>,
    /// Write here (0644) instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Splits `FILE[@FROM..UNTIL]`. The window is recognised only after the last `@` and only
/// when it contains `..`, so a file name with an `@` still works.
fn parse_key_arg(arg: &str) -> Result<(&Path, Option<Time>, Option<Time>), CliError> {
    let Some((file, window)) = arg.rsplit_once('@').filter(|(_, w)| w.contains("..")) else {
        return Ok((Path::new(arg), None, None));
    };
    let (from, until) = window.split_once("..").unwrap_or((window, ""));
    let when = |s: &str| -> Result<Option<Time>, CliError> {
        if s.is_empty() {
            return Ok(None);
        }
        Time::parse_lenient(s).map(Some).map_err(|e| CliError::usage(format!("--pub {arg}: {e}")))
    };
    let (nb, na) = (when(from)?, when(until)?);
    if nb.is_none() && na.is_none() {
        return Err(CliError::usage(format!("--pub {arg}: a window needs a start, an end, or both")));
    }
    Ok((Path::new(file), nb, na))
}

/// Runs `drover trust`.
pub fn run(args: &TrustArgs) -> Result<(), CliError> {
    let mut keys = Vec::new();
    for arg in &args.keys {
        let (path, not_before, not_after) = parse_key_arg(arg)?;
        let key = verifying_key_from_text(&read_text(path)?).map_err(|e| CliError::data(format!("{}: {e}", path.display())))?;
        keys.push(TrustKeyDoc {
            key_id: KeyId::of(&key),
            alg: "ed25519".to_owned(),
            public_key: verifying_key_to_pem(&key).map_err(|e| CliError::new(codes::SOFTWARE, e.to_string()))?,
            not_before,
            not_after,
        });
    }
    let reject_before = match &args.reject_before {
        Some(s) => Some(Time::parse_lenient(s).map_err(|e| CliError::usage(format!("--reject-before: {e}")))?),
        None => None,
    };
    let doc = TrustDoc { schema_version: 1, ci: KeySetDoc { threshold: args.threshold, keys, reject_before } };
    // The same rules an agent applies: no duplicate key, a reachable threshold.
    TrustRoots::from_doc(&doc).map_err(|e| CliError::data(e.to_string()))?;
    let mut bytes = canonical::to_vec_of(&doc).map_err(|e| CliError::new(codes::SOFTWARE, e.to_string()))?;
    bytes.push(b'\n');
    match &args.out {
        Some(p) => write_atomic(p, &bytes, 0o644, true),
        None => write_stdout(&bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_arguments_with_and_without_windows() {
        let (p, nb, na) = parse_key_arg("ci.pub").expect("plain");
        assert_eq!((p, nb, na), (Path::new("ci.pub"), None, None));
        let (p, nb, na) = parse_key_arg("keys/new@2026.pub@2026-12-01T00:00:00Z..").expect("from");
        assert_eq!(p, Path::new("keys/new@2026.pub"));
        assert_eq!(nb.map(|t| t.to_string()).as_deref(), Some("2026-12-01T00:00:00Z"));
        assert_eq!(na, None);
        let (_, nb, na) = parse_key_arg("old.pub@..2026-12-31T00:00:00Z").expect("until");
        assert_eq!((nb, na.map(|t| t.to_string())), (None, Some("2026-12-31T00:00:00Z".to_owned())));
        assert!(parse_key_arg("old.pub@..").is_err());
        assert!(parse_key_arg("old.pub@yesterday..").is_err());
    }
}
