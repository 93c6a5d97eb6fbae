//! `drover keygen --out NAME`: an Ed25519 key pair in openssl's formats.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Args;
use drover_proto::keys::{KeyId, signing_key_to_pem, verifying_key_to_pem};
use ed25519_dalek::SigningKey;

use crate::exit::{CliError, codes};
use crate::fsio::write_atomic;

/// Arguments of `drover keygen`.
#[derive(Args)]
pub struct KeygenArgs {
    /// Writes NAME.key (private, 0600) and NAME.pub (public).
    #[arg(long, value_name = "NAME")]
    out: PathBuf,
}

/// `NAME` + `.ext`, keeping any dot already in NAME (`ci.2025` → `ci.2025.key`, not
/// `ci.key`).
fn with_suffix(name: &Path, ext: &str) -> PathBuf {
    let mut s = OsString::from(name.as_os_str());
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Runs `drover keygen`.
pub fn run(args: &KeygenArgs) -> Result<(), CliError> {
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let key_path = with_suffix(&args.out, "key");
    let pub_path = with_suffix(&args.out, "pub");
    for p in [&key_path, &pub_path] {
        if p.symlink_metadata().is_ok() {
            return Err(CliError::new(codes::CANT_CREATE, format!("{} already exists; refusing to overwrite a key", p.display())));
        }
    }
    let internal = |e: drover_proto::keys::KeyError| CliError::new(codes::SOFTWARE, e.to_string());
    let private_pem = signing_key_to_pem(&key).map_err(internal)?;
    let public_pem = verifying_key_to_pem(&key.verifying_key()).map_err(internal)?;
    write_atomic(&key_path, private_pem.as_bytes(), 0o600, true)?;
    if let Err(e) = write_atomic(&pub_path, public_pem.as_bytes(), 0o644, true) {
        // Leave no half pair behind: a lone NAME.key would block the retry.
        let _ = std::fs::remove_file(&key_path);
        return Err(e);
    }
    println!("{}", KeyId::of(&key.verifying_key()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffix_is_appended_not_substituted() {
        assert_eq!(with_suffix(Path::new("ci"), "key"), PathBuf::from("ci.key"));
        assert_eq!(with_suffix(Path::new("keys/ci.2025"), "pub"), PathBuf::from("keys/ci.2025.pub"));
    }
}
