//! Signing through an external command (`--sign-cmd`): the seam where an HSM or a YubiKey
//! plugs in. The command gets the canonical bytes on stdin and the key id in
//! `DROVER_KEY_ID`, and prints the base64 Ed25519 signature. The signature is checked
//! against the public key before it is used, so a misbehaving signer cannot produce a
//! release that fails later, far from its cause.

use std::io::Write;
use std::process::{Command, Stdio};

use base64::Engine as _;
use drover_proto::keys::{KeyId, Signer};
use ed25519_dalek::{Signature, VerifyingKey};

/// Why the external signer failed.
#[derive(Debug, thiserror::Error)]
pub enum SignCmdError {
    /// It could not be started or talked to.
    #[error("cannot run sign command {cmd:?}: {source}")]
    Spawn {
        /// The command.
        cmd: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It exited non-zero.
    #[error("sign command {cmd:?} exited with {status}: {stderr}")]
    Failed {
        /// The command.
        cmd: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its stderr, trimmed.
        stderr: String,
    },
    /// It printed something other than a base64 64-byte signature.
    #[error("sign command {cmd:?} did not print a base64 Ed25519 signature")]
    BadOutput {
        /// The command.
        cmd: String,
    },
    /// The signature does not verify under the public key.
    #[error("sign command {cmd:?} returned a signature that does not verify under key {key_id}")]
    WrongSignature {
        /// The command.
        cmd: String,
        /// The key expected.
        key_id: KeyId,
    },
}

/// A signer that shells out (through `sh -c`) for every signature.
pub struct CommandSigner {
    cmd: String,
    key: VerifyingKey,
    id: KeyId,
}

impl CommandSigner {
    /// A signer for `key`'s private half, reached through `cmd`.
    pub fn new(cmd: String, key: VerifyingKey) -> Self {
        let id = KeyId::of(&key);
        CommandSigner { cmd, key, id }
    }
}

impl Signer for CommandSigner {
    type Error = SignCmdError;

    fn key_id(&self) -> &KeyId {
        &self.id
    }

    fn verifying_key(&self) -> VerifyingKey {
        self.key
    }

    fn sign(&self, message: &[u8]) -> Result<Signature, SignCmdError> {
        let spawn = |source| SignCmdError::Spawn { cmd: self.cmd.clone(), source };
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.cmd)
            .env("DROVER_KEY_ID", self.id.as_str())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn)?;
        let stdin = child.stdin.take();
        // Feed stdin from another thread while this one drains stdout and stderr: a signer
        // that writes more than a pipe buffer before it has read all its input would
        // otherwise deadlock against us.
        let out = std::thread::scope(|scope| {
            if let Some(mut stdin) = stdin {
                scope.spawn(move || {
                    // A signer that exits without reading all of stdin is judged by its output.
                    let _ = stdin.write_all(message);
                });
            }
            child.wait_with_output()
        })
        .map_err(spawn)?;
        if !out.status.success() {
            return Err(SignCmdError::Failed {
                cmd: self.cmd.clone(),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let raw =
            base64::engine::general_purpose::STANDARD.decode(text.trim()).map_err(|_| SignCmdError::BadOutput { cmd: self.cmd.clone() })?;
        let raw: [u8; 64] = raw.try_into().map_err(|_| SignCmdError::BadOutput { cmd: self.cmd.clone() })?;
        let sig = Signature::from_bytes(&raw);
        self.key
            .verify_strict(message, &sig)
            .map_err(|_| SignCmdError::WrongSignature { cmd: self.cmd.clone(), key_id: self.id.clone() })?;
        Ok(sig)
    }
}
