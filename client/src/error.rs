//! Why a request to the coordinator failed: [`ClientError`], and the helpers that turn what a
//! server or a library said into safe, complete text ([`error_from_body`], [`printable`],
//! [`error_chain`]).

use std::fmt;

/// How many characters of a server's text [`printable`] keeps.
const PRINTABLE_CHARS: usize = 300;

/// Why a request to the coordinator failed.
///
/// The `Display` text is complete on its own (it names the URL where there is one); a binary
/// may word some variants its own way, and picks the exit code for each.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA file could not be read.
    #[error("cannot read CA file {file}: {source}", file = file.display())]
    ReadCa {
        /// The file.
        file: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate or key input is not usable PEM.
    #[error("{what}: {message}")]
    BadPem {
        /// Which input (as the caller named it).
        what: String,
        /// What is wrong.
        message: String,
    },
    /// A CA certificate parsed as PEM but cannot be a trust root.
    #[error("CA: not a usable CA certificate: {message}")]
    UnusableCa {
        /// What rustls said.
        message: String,
    },
    /// The client certificate and key parsed but are not a usable identity (e.g. they do not
    /// belong together).
    #[error("client identity: {message}")]
    UnusableIdentity {
        /// What rustls said.
        message: String,
    },
    /// Building the TLS or HTTP client, or encoding a request, failed.
    #[error("cannot set up the TLS client: {message}")]
    Setup {
        /// What failed.
        message: String,
    },
    /// No coordinator URL could be connected to.
    #[error("coordinator unreachable: {}", join(attempts))]
    Unreachable {
        /// The route requested (appended to each URL).
        path: String,
        /// Each URL tried, in order, with why connecting failed.
        attempts: Vec<ConnectFailure>,
    },
    /// The request failed after the connection was made (reset, timeout, …).
    #[error("{url}: {message}")]
    Transport {
        /// The full URL.
        url: String,
        /// What happened.
        message: String,
    },
    /// The coordinator refused the request with a JSON error.
    #[error("{url}: coordinator refused ({status} {code}): {message}")]
    Api {
        /// The full URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The error code from the body, [`printable`].
        code: String,
        /// The message from the body, [`printable`].
        message: String,
    },
    /// A non-2xx answer without the API's error body.
    #[error("{url}: HTTP {status}: {body}")]
    Http {
        /// The full URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the body, [`printable`].
        body: String,
    },
    /// An answer longer than the client reads.
    #[error("{url}: unexpected response: response larger than {limit} bytes")]
    TooLarge {
        /// The full URL.
        url: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// A 2xx answer whose body is not the JSON the route promises.
    #[error("{url}: unexpected response: at `{path}`: {message}")]
    Decode {
        /// The full URL.
        url: String,
        /// Where in the document decoding failed (`.` for the whole document).
        path: String,
        /// What the JSON decoder said.
        message: String,
    },
}

impl ClientError {
    /// The HTTP status of a refusal (an answer that was not 2xx); `None` for every other error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } | ClientError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether a retry with backoff may succeed: the coordinator could not be reached, the
    /// exchange broke off, or it answered a server error (5xx: its database restarting, a
    /// replica going away) — as opposed to a refusal of the request itself (4xx), which a
    /// retry would only repeat.
    pub fn is_transient(&self) -> bool {
        matches!(self, ClientError::Unreachable { .. } | ClientError::Transport { .. }) || self.status().is_some_and(|s| s >= 500)
    }
}

/// One coordinator URL that could not be connected to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectFailure {
    /// The coordinator's base URL, as configured (without a trailing `/`).
    pub url: String,
    /// Why connecting failed ([`error_chain`] of the cause).
    pub cause: String,
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.url, self.cause)
    }
}

fn join(attempts: &[ConnectFailure]) -> String {
    attempts.iter().map(ConnectFailure::to_string).collect::<Vec<_>>().join("; ")
}

/// The typed error for a non-2xx answer from `url` with `status` and `body`:
/// [`ClientError::Api`] for the API's `{"error":{"code","message"}}` body, else
/// [`ClientError::Http`]; the server's text is made [`printable`].
pub fn error_from_body(url: &str, status: u16, body: &[u8]) -> ClientError {
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: ApiError,
    }
    #[derive(serde::Deserialize)]
    struct ApiError {
        code: String,
        message: String,
    }
    match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope { error }) => {
            ClientError::Api { url: url.to_owned(), status, code: printable(&error.code), message: printable(&error.message) }
        }
        Err(_) => ClientError::Http { url: url.to_owned(), status, body: printable(&String::from_utf8_lossy(body)) },
    }
}

/// At most 300 characters of `s` (then `…`), control characters replaced by spaces: a
/// hostile server's text must not drive the terminal.
pub fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(PRINTABLE_CHARS).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if s.chars().count() > PRINTABLE_CHARS {
        out.push('…');
    }
    out
}

/// An error and its sources, `: `-joined, each source left out when the text so far already
/// contains it (reqwest's own message omits the cause, e.g. which certificate check failed).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn server_errors_are_worth_a_retry_and_refusals_are_not() {
        let api = |status| ClientError::Api { url: "u".into(), status, code: "c".into(), message: "m".into() };
        assert!(api(500).is_transient() && api(503).is_transient(), "a database restarting under the coordinator");
        assert!(!api(400).is_transient() && !api(404).is_transient() && !api(410).is_transient());
        assert!(ClientError::Http { url: "u".into(), status: 502, body: String::new() }.is_transient());
    }

    use super::*;

    #[test]
    fn json_errors_become_typed_errors() {
        let e = error_from_body("https://c/v1/enroll", 401, br#"{"error":{"code":"token_invalid","message":"token expired"}}"#);
        match &e {
            ClientError::Api { status, code, message, .. } => {
                assert_eq!((*status, code.as_str(), message.as_str()), (401, "token_invalid", "token expired"));
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("401") && e.to_string().contains("token expired"), "{e}");
        let e = error_from_body("https://c/x", 502, b"<html>bad\x1b[31m gateway</html>");
        assert!(matches!(&e, ClientError::Http { status: 502, body, .. } if body.contains("bad") && !body.contains('\x1b')), "{e:?}");
        let e = error_from_body("https://c/x", 500, br#"{"error":{"code":"x\u001b[2J","message":"why"}}"#);
        assert!(matches!(&e, ClientError::Api { code, .. } if code == "x [2J"), "{e:?}");
    }

    #[test]
    fn printable_truncates_and_drops_control_characters() {
        assert_eq!(printable("a\nb\x1bc"), "a b c");
        let long = "é".repeat(301);
        let shown = printable(&long);
        assert_eq!(shown.chars().count(), 301);
        assert!(shown.ends_with("é…"), "{shown}");
        assert_eq!(printable(&"x".repeat(300)), "x".repeat(300));
    }

    #[test]
    fn unreachable_names_every_url_in_order() {
        let e = ClientError::Unreachable {
            path: "/v1/trust.json".to_owned(),
            attempts: vec![
                ConnectFailure { url: "https://a:1".to_owned(), cause: "refused".to_owned() },
                ConnectFailure { url: "https://b:2".to_owned(), cause: "timed out".to_owned() },
            ],
        };
        assert_eq!(e.to_string(), "coordinator unreachable: https://a:1: refused; https://b:2: timed out");
    }

    #[test]
    fn error_chain_adds_only_new_causes() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl fmt::Display for E {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E("connect failed: refused", Some(Box::new(E("refused", Some(Box::new(E("bad certificate", None)))))));
        assert_eq!(error_chain(&e), "connect failed: refused: bad certificate");
    }
}
