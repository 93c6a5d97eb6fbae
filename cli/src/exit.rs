//! The CLI's one error type and its sysexits-style exit codes.

use std::fmt;

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    code: u8,
    message: String,
}

/// sysexits-style codes.
pub mod codes {
    /// Verification refused the input (not a usage or I/O problem).
    pub const REFUSED: u8 = 1;
    /// What `--wait` awaited ended badly: a job failed or was cancelled, a rollout halted,
    /// reverted, failed or was cancelled.
    pub const FAILED: u8 = 2;
    /// EX_USAGE.
    pub const USAGE: u8 = 64;
    /// EX_DATAERR: input data malformed.
    pub const DATA: u8 = 65;
    /// EX_NOINPUT: an input file is missing or unreadable.
    pub const NO_INPUT: u8 = 66;
    /// EX_UNAVAILABLE: the coordinator is unreachable, or failed (5xx).
    pub const UNAVAILABLE: u8 = 69;
    /// EX_SOFTWARE: a bug or a failing external signer.
    pub const SOFTWARE: u8 = 70;
    /// EX_CANTCREAT: an output cannot be created.
    pub const CANT_CREATE: u8 = 73;
    /// EX_IOERR.
    pub const IO: u8 = 74;
    /// EX_TEMPFAIL: a `--watch` timed out before what it watched finished.
    pub const TEMP_FAIL: u8 = 75;
    /// EX_PROTOCOL: the coordinator answered with something that is not its API.
    pub const PROTOCOL: u8 = 76;
    /// EX_NOPERM: the coordinator refused the operator's credentials (401, 403).
    pub const NO_PERM: u8 = 77;
}

impl CliError {
    /// With an explicit code.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        CliError { code, message: message.into() }
    }
    /// Malformed input data.
    pub fn data(message: impl Into<String>) -> Self {
        Self::new(codes::DATA, message)
    }
    /// Verification refused.
    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(codes::REFUSED, message)
    }
    /// Bad usage.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(codes::USAGE, message)
    }
    /// The exit code.
    pub fn code(&self) -> u8 {
        self.code
    }
}

// So that the errors of modules that ask the coordinator can carry it as their `#[source]`.
impl std::error::Error for CliError {}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
