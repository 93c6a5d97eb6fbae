//! The client's one error type: what went wrong, with which URI; never a credential.

/// Why a Redfish call did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum RedfishError {
    /// The configuration cannot work (a bad URL or CA, plain HTTP not allowed).
    #[error("redfish client configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
    /// The BMC could not be reached, or did not answer in time.
    #[error("{uri}: unreachable: {source}")]
    Unreachable {
        /// The request's URI.
        uri: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The BMC refused the request (4xx, 5xx): nothing changed (DSP0266 §7.11).
    #[error("{uri}: the BMC answered {status}: {message}")]
    Refused {
        /// The request's URI.
        uri: String,
        /// The HTTP status.
        status: u16,
        /// The Redfish error message, or the body's start.
        message: String,
    },
    /// The answer is not the Redfish JSON expected.
    #[error("{uri}: unexpected answer: {reason}")]
    Protocol {
        /// The request's URI.
        uri: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The system allows no reset type that reaches the target state.
    #[error("{uri}: no allowed ResetType powers it {target} (allowed: {allowed:?})")]
    NoResetType {
        /// The system.
        uri: String,
        /// On or Off.
        target: String,
        /// What the BMC advertises.
        allowed: Vec<String>,
    },
    /// The reset was accepted but `PowerState` did not reach the target in time.
    #[error("{uri}: PowerState is still {last} after {waited_secs} s (wanted {target})")]
    NotConverged {
        /// The system.
        uri: String,
        /// On or Off.
        target: String,
        /// The last state read.
        last: String,
        /// How long it waited.
        waited_secs: u64,
    },
}
