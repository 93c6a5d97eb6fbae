//! `drover keygen --out NAME`: an Ed25519 key pair in openssl's formats.

use std::path::PathBuf;

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

/// Runs `drover keygen`.
pub fn run(args: &KeygenArgs) -> Result<(), CliError> {
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let key_path = args.out.with_extension("key");
    let pub_path = args.out.with_extension("pub");
    for p in [&key_path, &pub_path] {
        if p.symlink_metadata().is_ok() {
            return Err(CliError::new(codes::CANT_CREATE, format!("{} already exists; refusing to overwrite a key", p.display())));
        }
    }
    let internal = |e: drover_proto::keys::KeyError| CliError::new(codes::SOFTWARE, e.to_string());
    let private_pem = signing_key_to_pem(&key).map_err(internal)?;
    let public_pem = verifying_key_to_pem(&key.verifying_key()).map_err(internal)?;
    write_atomic(&key_path, private_pem.as_bytes(), 0o600, true)?;
    write_atomic(&pub_path, public_pem.as_bytes(), 0o644, true)?;
    println!("{}", KeyId::of(&key.verifying_key()));
    Ok(())
}
