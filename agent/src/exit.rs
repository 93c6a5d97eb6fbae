//! The agent's sysexits-style exit codes, shared by every command of `drover-agent` (the same
//! scheme as the `drover` CLI), and the trait each module's error implements to pick one
//! (the shared coordinator client's [`drover_client::ClientError`] included).

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

/// The agent's codes for the coordinator client's errors: an unreadable CA file is 66, unusable
/// PEM or credentials 65, a client that cannot be built 70, and everything that happens once
/// the coordinator is asked (unreachable, refused, an unexpected answer) 69.
impl ExitStatus for drover_client::ClientError {
    fn exit_code(&self) -> u8 {
        use drover_client::ClientError;
        match self {
            ClientError::ReadCa { .. } => codes::NO_INPUT,
            ClientError::BadPem { .. } | ClientError::UnusableCa { .. } | ClientError::UnusableIdentity { .. } => codes::DATA,
            ClientError::Setup { .. } => codes::SOFTWARE,
            ClientError::Unreachable { .. }
            | ClientError::Transport { .. }
            | ClientError::Api { .. }
            | ClientError::Http { .. }
            | ClientError::TooLarge { .. }
            | ClientError::Decode { .. } => codes::UNAVAILABLE,
        }
    }
}

#[cfg(test)]
mod tests {
    use drover_client::{ClientError, error_from_body};

    use super::*;

    #[test]
    fn client_errors_map_to_the_agents_codes() {
        let refused = error_from_body("https://c/v1/enroll", 401, br#"{"error":{"code":"token_invalid","message":"token expired"}}"#);
        assert_eq!(refused.exit_code(), codes::UNAVAILABLE);
        assert_eq!(error_from_body("https://c/x", 502, b"<html>").exit_code(), codes::UNAVAILABLE);
        let unreachable = ClientError::Unreachable { path: "/v1/trust.json".to_owned(), attempts: Vec::new() };
        assert_eq!(unreachable.exit_code(), codes::UNAVAILABLE);
        assert_eq!(ClientError::TooLarge { url: "https://c/x".to_owned(), limit: 1 }.exit_code(), codes::UNAVAILABLE);
        let e = drover_client::parse_certificates("CA file /x", b"not pem").expect_err("refused");
        assert_eq!(e.exit_code(), codes::DATA);
        let e = drover_client::ClientIdentity::from_pem(b"", b"").expect_err("refused");
        assert_eq!(e.exit_code(), codes::DATA);
        let e = drover_client::load_ca(std::path::Path::new("/nonexistent/drover-ca.crt")).expect_err("missing");
        assert_eq!(e.exit_code(), codes::NO_INPUT);
        assert_eq!(ClientError::Setup { message: "x".to_owned() }.exit_code(), codes::SOFTWARE);
    }
}
