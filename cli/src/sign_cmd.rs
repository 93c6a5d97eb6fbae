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

/// Why the external signer failed. Messages name only the program the command runs
/// ([`program_of`]), never the whole command line, which may carry a PIN or a token, and
/// carry at most [`STDERR_SHOWN`] characters of what the signer wrote to stderr.
#[derive(Debug, thiserror::Error)]
pub enum SignCmdError {
    /// It could not be started or talked to.
    #[error("cannot run sign command {cmd:?}: {source}")]
    Spawn {
        /// The command's program.
        cmd: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It exited non-zero.
    #[error("sign command {cmd:?} exited with {status}: {stderr}")]
    Failed {
        /// The command's program.
        cmd: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its stderr, trimmed and cut to [`STDERR_SHOWN`] characters.
        stderr: String,
    },
    /// It printed something other than a base64 64-byte signature.
    #[error("sign command {cmd:?} did not print a base64 Ed25519 signature")]
    BadOutput {
        /// The command's program.
        cmd: String,
    },
    /// The signature does not verify under the public key.
    #[error("sign command {cmd:?} returned a signature that does not verify under key {key_id}")]
    WrongSignature {
        /// The command's program.
        cmd: String,
        /// The key expected.
        key_id: KeyId,
    },
}

/// At most this many characters of the signer's stderr go into an error message.
pub const STDERR_SHOWN: usize = 300;

/// What names the command in messages: its program, the first whitespace-separated word that
/// is not a shell variable assignment (`PIN=1234 signer --pin 1234` → `signer`), so that
/// neither its arguments nor its environment are echoed.
pub fn program_of(cmd: &str) -> String {
    let is_assignment = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
                && !name.starts_with(|c: char| c.is_ascii_digit())
        })
    };
    cmd.split_whitespace().find(|w| !is_assignment(w)).unwrap_or("<sign command>").to_owned()
}

/// `text` trimmed, and cut to [`STDERR_SHOWN`] characters (the last one `…`) if longer.
fn shown_stderr(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= STDERR_SHOWN {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(STDERR_SHOWN - 1).collect();
    out.push('…');
    out
}

/// A signer that shells out (through `sh -c`) for every signature.
pub struct CommandSigner {
    cmd: String,
    program: String,
    key: VerifyingKey,
    id: KeyId,
}

impl CommandSigner {
    /// A signer for `key`'s private half, reached through `cmd`.
    pub fn new(cmd: String, key: VerifyingKey) -> Self {
        let id = KeyId::of(&key);
        let program = program_of(&cmd);
        CommandSigner { cmd, program, key, id }
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
        let spawn = |source| SignCmdError::Spawn { cmd: self.program.clone(), source };
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
                cmd: self.program.clone(),
                status: out.status,
                stderr: shown_stderr(&String::from_utf8_lossy(&out.stderr)),
            });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| SignCmdError::BadOutput { cmd: self.program.clone() })?;
        let raw: [u8; 64] = raw.try_into().map_err(|_| SignCmdError::BadOutput { cmd: self.program.clone() })?;
        let sig = Signature::from_bytes(&raw);
        self.key
            .verify_strict(message, &sig)
            .map_err(|_| SignCmdError::WrongSignature { cmd: self.program.clone(), key_id: self.id.clone() })?;
        Ok(sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_program_names_the_command() {
        assert_eq!(program_of("yubihsm-sign --pin 123456"), "yubihsm-sign");
        assert_eq!(program_of("  PIN=123456 TOKEN=x /usr/bin/signer --slot 9c"), "/usr/bin/signer");
        assert_eq!(program_of("signer a=b"), "signer");
        assert_eq!(program_of(""), "<sign command>");
        assert_eq!(program_of("A=1"), "<sign command>");
    }

    #[test]
    fn stderr_is_cut_to_a_bounded_length() {
        assert_eq!(shown_stderr("  short\n"), "short");
        let long = "é".repeat(1000);
        let shown = shown_stderr(&long);
        assert_eq!(shown.chars().count(), STDERR_SHOWN);
        assert!(shown.ends_with('…'));
    }
}
