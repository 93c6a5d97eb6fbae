//! `drover trust`: writes a `trust.json` from public keys, so operators never hand-edit key
//! ids.

use std::path::PathBuf;

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
    #[arg(long = "pub", value_name = "FILE", required = true)]
    keys: Vec<PathBuf>,
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

/// Runs `drover trust`.
pub fn run(args: &TrustArgs) -> Result<(), CliError> {
    let mut keys = Vec::new();
    for path in &args.keys {
        let key = verifying_key_from_text(&read_text(path)?).map_err(|e| CliError::data(format!("{}: {e}", path.display())))?;
        keys.push(TrustKeyDoc {
            key_id: KeyId::of(&key),
            alg: "ed25519".to_owned(),
            public_key: verifying_key_to_pem(&key).map_err(|e| CliError::new(codes::SOFTWARE, e.to_string()))?,
            not_before: None,
            not_after: None,
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
