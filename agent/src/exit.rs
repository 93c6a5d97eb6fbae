//! The agent's sysexits-style exit codes, shared by every command of `drover-agent` (the same
//! scheme as the `drover` CLI), and the trait each module's error implements to pick one.

/// sysexits-style codes.
pub mod codes {
    /// Success.
    pub const OK: u8 = 0;
    /// EX_USAGE: a bad flag or value, a missing argument, an unknown command.
    pub const USAGE: u8 = 64;
    /// EX_DATAERR: input data malformed or refused (a bad config, a trust file whose hash
    /// does not match, a certificate that is not ours).
    pub const DATA: u8 = 65;
    /// EX_NOINPUT: an input file is missing or unreadable.
    pub const NO_INPUT: u8 = 66;
    /// EX_UNAVAILABLE: the coordinator is unreachable, or refused the request.
    pub const UNAVAILABLE: u8 = 69;
    /// EX_SOFTWARE: a bug, or a failing library call that should not fail.
    pub const SOFTWARE: u8 = 70;
    /// EX_CANTCREAT: an output cannot be created (or would overwrite enrolled state).
    pub const CANT_CREATE: u8 = 73;
}

/// An error that knows which exit code it maps to.
pub trait ExitStatus {
    /// The sysexits code for this error.
    fn exit_code(&self) -> u8;
}
