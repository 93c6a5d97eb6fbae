//! The one error type of the MAAS client, and the classes callers act on.
//!
//! Callers (the coordinator's workflows) decide on the *class* — retry later, ask an operator
//! for credentials, treat the machine as gone, wait for a state to change — so [`MaasError::class`]
//! is the contract and the variants carry the detail for logs. Nothing here ever holds the
//! Authorization header, any part of the API key or a power password: errors name the method,
//! the API path (no query values), the op, the HTTP status and MAAS's own message — scrubbed of
//! the secrets the client knows and of any `oauth_…=` value, then cut to [`MAX_MESSAGE`] bytes
//! with the answer's length noted.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What a caller should do about a [`MaasError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// 401 or 403: the API key is wrong, revoked, or lacks the right (admin, owner).
    Credentials,
    /// 404 with MAAS's `No <Kind> matches the given query.`: the machine (or sub-object) does
    /// not exist (any more). A 404 with any other body is [`ErrorClass::Protocol`]: a wrong
    /// base URL or a proxy answered, and the machine must not be forgotten over it.
    Gone,
    /// 409, or commission's 400 `__all__` "not available because of the current state": the
    /// machine is in a state that does not allow the operation; wait or act differently.
    IllegalState,
    /// 400: MAAS refused the parameters ([`MaasError::field_errors`] says which).
    BadRequest,
    /// 5xx, connection failures, timeouts: try again later.
    Transient,
    /// MAAS answered something this client cannot understand.
    Protocol,
    /// The client's own configuration is wrong (URL, API key, CA).
    Config,
}

/// The request an error is about: method, API path (never query values) and op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLine {
    /// `GET`, `POST`, `PUT` or `DELETE`.
    pub method: &'static str,
    /// The path under the base URL, e.g. `/api/2.0/machines/abc123/`.
    pub path: String,
    /// The `op=` of the call, if any.
    pub op: Option<&'static str>,
}

impl fmt::Display for RequestLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Some(op) => write!(f, "{} {}?op={op}", self.method, self.path),
            None => write!(f, "{} {}", self.method, self.path),
        }
    }
}

/// Everything that can go wrong talking to MAAS.
#[derive(Debug, thiserror::Error)]
pub enum MaasError {
    /// The API key is not `consumer_key:token_key:token_secret` (the key itself is never shown).
    #[error("MAAS API key: {reason}")]
    BadApiKey {
        /// What is wrong with it.
        reason: String,
    },
    /// The base URL cannot be used.
    #[error("MAAS base URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given (it holds no secret: keys never go into URLs).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The extra CA for an https MAAS cannot be used.
    #[error("MAAS CA certificate: {reason}")]
    BadCa {
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("MAAS HTTP client setup")]
    Setup {
        /// reqwest's reason.
        #[source]
        source: reqwest::Error,
    },
    /// A value the caller passed cannot be sent (e.g. filtering by an unknown status code).
    #[error("{what}")]
    InvalidInput {
        /// What is wrong.
        what: String,
    },
    /// MAAS could not be reached, or the connection broke.
    #[error("{request}: cannot reach MAAS")]
    Connect {
        /// The request.
        request: RequestLine,
        /// The transport's reason (its URL stripped).
        #[source]
        source: reqwest::Error,
    },
    /// MAAS's TLS certificate was refused (wrong CA, wrong name, expired): a configuration
    /// problem, not a transient one — retrying cannot succeed.
    #[error("{request}: MAAS's TLS certificate was refused: {reason}")]
    Tls {
        /// The request.
        request: RequestLine,
        /// rustls's reason.
        reason: String,
    },
    /// No complete answer within the configured timeout.
    #[error("{request}: no answer from MAAS within {after:?}")]
    Timeout {
        /// The request.
        request: RequestLine,
        /// The timeout that ran out.
        after: Duration,
    },
    /// MAAS answered with an error status.
    #[error("{request}: MAAS answered {status}: {message}")]
    Status {
        /// The request.
        request: RequestLine,
        /// The HTTP status.
        status: u16,
        /// MAAS's message (text body, or the field errors flattened), bounded in length.
        message: String,
        /// Field errors of a JSON 400 body `{"field": ["msg", …]}` (`__all__` for form-wide ones).
        field_errors: BTreeMap<String, Vec<String>>,
        /// The `Retry-After` of a 503, when MAAS sent one in seconds.
        retry_after: Option<Duration>,
    },
    /// MAAS answered 2xx with a body this client cannot read.
    #[error("{request}: unexpected answer from MAAS: {reason}")]
    Protocol {
        /// The request.
        request: RequestLine,
        /// What was wrong with it.
        reason: String,
        /// The JSON error, when that was it.
        #[source]
        source: Option<serde_json::Error>,
    },
}

/// The text MAAS's commission gives (as a 400 `__all__` error) when the machine's state forbids it.
const STATE_REFUSAL: &str = "because of the current state";

impl MaasError {
    /// What the caller should do about this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            MaasError::BadApiKey { .. }
            | MaasError::BadUrl { .. }
            | MaasError::BadCa { .. }
            | MaasError::Setup { .. }
            | MaasError::Tls { .. } => ErrorClass::Config,
            MaasError::InvalidInput { .. } => ErrorClass::BadRequest,
            MaasError::Connect { .. } | MaasError::Timeout { .. } => ErrorClass::Transient,
            MaasError::Protocol { .. } => ErrorClass::Protocol,
            MaasError::Status { status, message, field_errors, .. } => classify_status(*status, message, field_errors),
        }
    }

    /// The HTTP status MAAS answered, for [`MaasError::Status`].
    pub fn status(&self) -> Option<u16> {
        match self {
            MaasError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// MAAS's message, for [`MaasError::Status`].
    pub fn message(&self) -> Option<&str> {
        match self {
            MaasError::Status { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The field errors of a 400 (empty otherwise).
    pub fn field_errors(&self) -> &BTreeMap<String, Vec<String>> {
        static EMPTY: BTreeMap<String, Vec<String>> = BTreeMap::new();
        match self {
            MaasError::Status { field_errors, .. } => field_errors,
            _ => &EMPTY,
        }
    }

    /// How long MAAS asked to wait before trying again (a 503's `Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            MaasError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The class of an error status with its (text) `message`. Split out so it is testable
/// without a request.
pub fn classify_status(status: u16, message: &str, field_errors: &BTreeMap<String, Vec<String>>) -> ErrorClass {
    match status {
        401 | 403 => ErrorClass::Credentials,
        // MAAS's API answers a missing object with Django's `No <Kind> matches the given query.`
        // (facts §2); a URL MAAS does not route gets Django's or a proxy's page instead.
        404 if is_not_found_text(message) => ErrorClass::Gone,
        404 => ErrorClass::Protocol,
        409 => ErrorClass::IllegalState,
        400 => {
            // Commission refuses a wrong state with a form-wide 400 rather than a 409 (facts §0e);
            // callers should not have to know which op does which.
            let state = field_errors.get("__all__").is_some_and(|msgs| msgs.iter().any(|m| m.contains(STATE_REFUSAL)));
            if state { ErrorClass::IllegalState } else { ErrorClass::BadRequest }
        }
        500..=599 => ErrorClass::Transient,
        _ => ErrorClass::Protocol,
    }
}

/// Whether `message` is MAAS's text for a missing object: `No Machine matches the given query.`
/// (`No BlockDevice …`, `No Interface …`, `No Subnet …`).
fn is_not_found_text(message: &str) -> bool {
    let m = message.trim();
    m.strip_prefix("No ").and_then(|rest| rest.strip_suffix(" matches the given query.")).is_some_and(|kind| !kind.is_empty())
}

/// The longest message kept from an error body, in bytes: enough for MAAS's sentences,
/// bounded against a proxy's HTML page and against an echo of whatever the request carried.
pub const MAX_MESSAGE: usize = 512;

/// How much of an error answer was read (the client stops reading at a bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyRead {
    /// All of it.
    Whole,
    /// Only the first bytes given: the answer was longer.
    Cut,
}

/// Builds a [`MaasError::Status`] from an error answer: a JSON object of field errors becomes
/// `field_errors` (and a flattened message), anything else is kept as text. `secrets` (the
/// parts of the API key in use, a call's own secrets) and any `oauth_…=` value are replaced by
/// `<redacted>` before anything is stored — MAAS's 401 names the token it refused — and then
/// every text is cut to [`MAX_MESSAGE`] bytes, the cut saying how long the answer was.
pub(crate) fn status_error(
    request: RequestLine,
    status: u16,
    body: &[u8],
    read: BodyRead,
    retry_after: Option<Duration>,
    secrets: &[&str],
) -> MaasError {
    let text = String::from_utf8_lossy(body);
    let field_errors = parse_field_errors(&text);
    let message = if field_errors.is_empty() {
        text.trim().to_owned()
    } else {
        field_errors.iter().map(|(field, msgs)| format!("{field}: {}", msgs.join(" "))).collect::<Vec<_>>().join("; ")
    };
    let message = bounded(&scrub(&message, secrets), body.len(), read);
    let field_errors = field_errors
        .into_iter()
        .map(|(k, v)| {
            let k = scrub(&k, secrets);
            (
                bounded(&k, k.len(), BodyRead::Whole),
                v.iter().map(|m| scrub(m, secrets)).map(|m| bounded(&m, m.len(), BodyRead::Whole)).collect(),
            )
        })
        .collect();
    MaasError::Status { request, status, message, field_errors, retry_after }
}

/// Parses MAAS's form-error body `{"field": ["msg", …]}`; a bare string value is taken as one
/// message. Anything else gives an empty map (the body is then treated as text).
fn parse_field_errors(text: &str) -> BTreeMap<String, Vec<String>> {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for (field, value) in map {
        let msgs = match value {
            serde_json::Value::Array(items) => {
                items.into_iter().map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())).collect()
            }
            serde_json::Value::String(s) => vec![s],
            other => vec![other.to_string()],
        };
        out.insert(field, msgs);
    }
    out
}

/// `text` cut before any "expected signature base string", with every non-empty secret, and
/// the value of every `oauth_…=` parameter, replaced by `<redacted>`. Longer secrets go first, so one that contains another is not left half
/// shown; each is also looked for percent-encoded, as it travels in the Authorization header.
pub(crate) fn scrub(text: &str, secrets: &[&str]) -> String {
    // python-oauth, which MAAS's API layer (django-piston3) bundles, explains a signature
    // mismatch as "Invalid signature. Expected signature base string: <base>": with PLAINTEXT
    // signing the base is `&` and the token secret MAAS holds, the real one, which the client
    // does not know and so could not scrub by value. Nothing after that phrase is kept.
    let text = match text.to_ascii_lowercase().find("expected signature base string") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut all: Vec<String> = secrets.iter().filter(|s| !s.is_empty()).map(|s| (*s).to_owned()).collect();
    all.extend(secrets.iter().filter(|s| !s.is_empty()).map(|s| crate::auth::oauth_encode(s)));
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    all.dedup();
    let mut out = text.to_owned();
    for secret in &all {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "<redacted>");
        }
    }
    scrub_oauth_values(&out)
}

/// Replaces the value of every `oauth_<name>=` (case-insensitive, quoted or not, as in an
/// Authorization header or a query string) by `<redacted>`: whatever MAAS or a proxy echoes of
/// a signed request, the token and consumer keys and the signature go with it.
fn scrub_oauth_values(text: &str) -> String {
    const MARK: &str = "oauth_";
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find(MARK) {
        let name_start = from + found + MARK.len();
        let mut i = name_start;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        let mut j = i;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        if i == name_start || bytes.get(j) != Some(&b'=') {
            from = name_start;
            continue;
        }
        j += 1;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        let quote = bytes.get(j).copied().filter(|b| matches!(b, b'"' | b'\''));
        if quote.is_some() {
            j += 1;
        }
        let value_start = j;
        while j < bytes.len() {
            let b = bytes[j];
            let ends = match quote {
                Some(q) => b == q,
                None => b.is_ascii_whitespace() || matches!(b, b',' | b'&' | b';' | b'"' | b'\'' | b')' | b'<' | b'>'),
            };
            if ends {
                break;
            }
            j += 1;
        }
        if j > value_start {
            // Every boundary is an ASCII byte, so these are character boundaries.
            out.push_str(&text[copied..value_start]);
            out.push_str("<redacted>");
            copied = j;
        }
        from = j.max(name_start);
    }
    out.push_str(&text[copied..]);
    out
}

/// `text` cut to at most [`MAX_MESSAGE`] bytes on a character boundary; a cut says how much
/// is shown of how long an answer (`total` bytes, more when `read` was cut).
fn bounded(text: &str, total: usize, read: BodyRead) -> String {
    if text.len() <= MAX_MESSAGE && read == BodyRead::Whole {
        return text.to_owned();
    }
    let mut end = text.len().min(MAX_MESSAGE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let of = match read {
        BodyRead::Whole => format!("{total} bytes"),
        BodyRead::Cut => format!("more than {total} bytes"),
    };
    format!("{}… (the first {end} bytes of an answer of {of})", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> RequestLine {
        RequestLine { method: "POST", path: "/api/2.0/machines/abc123/".into(), op: Some("deploy") }
    }

    fn class_of(status: u16, body: &str) -> ErrorClass {
        status_error(req(), status, body.as_bytes(), BodyRead::Whole, None, &[]).class()
    }

    #[test]
    fn a_signature_mismatch_never_shows_the_secret_maas_expected() {
        let body = "Authorization Error: 'Invalid signature. Expected signature base string: &the-real-token-secret'";
        let shown = scrub(body, &["ck", "tk", "the-wrong-secret"]);
        assert!(!shown.contains("the-real-token-secret"), "{shown}");
        assert!(shown.starts_with("Authorization Error: 'Invalid signature. "), "the reason stays: {shown}");
    }

    #[test]
    fn statuses_map_to_classes() {
        assert_eq!(class_of(401, "Authorization Error: 'Invalid signature'"), ErrorClass::Credentials);
        assert_eq!(class_of(403, ""), ErrorClass::Credentials);
        assert_eq!(class_of(404, "No Machine matches the given query."), ErrorClass::Gone);
        assert_eq!(class_of(404, "No BlockDevice matches the given query.\n"), ErrorClass::Gone);
        assert_eq!(class_of(409, "Can't deploy a machine that is in the 'New' state"), ErrorClass::IllegalState);
        assert_eq!(class_of(400, r#"{"limit": ["No such constraint."]}"#), ErrorClass::BadRequest);
        assert_eq!(class_of(400, "Unrecognised signature: method=GET op=None"), ErrorClass::BadRequest);
        assert_eq!(class_of(500, "boom"), ErrorClass::Transient);
        assert_eq!(class_of(503, "No rack controllers connected"), ErrorClass::Transient);
        assert_eq!(class_of(504, ""), ErrorClass::Transient);
        assert_eq!(class_of(405, ""), ErrorClass::Protocol);
        assert_eq!(class_of(302, ""), ErrorClass::Protocol);
    }

    #[test]
    fn only_maas_not_found_texts_are_gone() {
        // A wrong base URL or a proxy also answers 404: that must not make callers forget the
        // machine.
        for body in [
            "Not Found",
            "",
            "<h1>Not Found</h1><p>The requested resource was not found on this server.</p>",
            "No  matches the given query.",
        ] {
            assert_eq!(class_of(404, body), ErrorClass::Protocol, "{body:?}");
        }
        assert_eq!(classify_status(404, "No Subnet matches the given query.", &BTreeMap::new()), ErrorClass::Gone);
    }

    #[test]
    fn commission_state_refusal_is_illegal_state() {
        let body = r#"{"__all__": ["Commission is not available because of the current state of the node."]}"#;
        let e = status_error(req(), 400, body.as_bytes(), BodyRead::Whole, None, &[]);
        assert_eq!(e.class(), ErrorClass::IllegalState);
        assert!(e.message().unwrap_or_default().contains("not available"), "{e}");
        let other = r#"{"__all__": ["Subnet 10.0.0.0/24 would overlap with existing subnets."]}"#;
        assert_eq!(class_of(400, other), ErrorClass::BadRequest);
    }

    #[test]
    fn field_errors_are_parsed_and_flattened() {
        let e =
            status_error(req(), 400, br#"{"mac_address": ["'zz' is not a valid MAC address."], "x": "one"}"#, BodyRead::Whole, None, &[]);
        assert_eq!(e.field_errors()["mac_address"], vec!["'zz' is not a valid MAC address.".to_owned()]);
        assert_eq!(e.field_errors()["x"], vec!["one".to_owned()]);
        assert_eq!(e.message(), Some("mac_address: 'zz' is not a valid MAC address.; x: one"));
        assert_eq!(e.status(), Some(400));
    }

    #[test]
    fn text_bodies_are_kept_trimmed_and_bounded() {
        let e = status_error(req(), 409, b"Can't deploy a machine that is in the 'New' state\n", BodyRead::Whole, None, &[]);
        assert_eq!(e.message(), Some("Can't deploy a machine that is in the 'New' state"));
        let long = "é".repeat(2000);
        let e = status_error(req(), 500, long.as_bytes(), BodyRead::Whole, None, &[]);
        let shown = e.message().unwrap_or_default();
        assert!(shown.starts_with(&"é".repeat(MAX_MESSAGE / 2)) && !shown.starts_with(&"é".repeat(MAX_MESSAGE / 2 + 1)), "{shown}");
        assert!(shown.ends_with("… (the first 512 bytes of an answer of 4000 bytes)"), "{shown}");
        let e = status_error(req(), 502, b"<html>a proxy's page", BodyRead::Cut, None, &[]);
        assert_eq!(e.message(), Some("<html>a proxy's page… (the first 20 bytes of an answer of more than 20 bytes)"));
    }

    /// A refused token: MAAS's 401 names the token key, and a proxy may echo the whole
    /// Authorization header. Neither key, nor the secret (plain or percent-encoded), nor any
    /// `oauth_…` value reaches the error.
    #[test]
    fn a_refused_token_is_not_echoed_from_maas_errors() {
        let secrets = ["tS3cr3t/with+chars", "tokenKEY1234567890", "consumerKEY0987654"];
        let body = "Authorization Error: Invalid access token: tokenKEY1234567890 (consumer consumerKEY0987654); \
                    Authorization: OAuth oauth_nonce=\"n1\", oauth_consumer_key=\"other-ck\", oauth_token=\"other-tk\", \
                    oauth_signature=\"%26tS3cr3t%2Fwith%2Bchars\"; retried with ?OAUTH_TOKEN=qs-token&oauth_signature = 'q%26s' tail";
        let e = status_error(req(), 401, body.as_bytes(), BodyRead::Whole, None, &secrets);
        let shown = format!("{e} {e:?}");
        for leak in ["tS3cr3t", "tokenKEY", "consumerKEY", "other-ck", "other-tk", "qs-token", "q%26s", "%26tS3"] {
            assert!(!shown.contains(leak), "{leak} in {shown}");
        }
        assert_eq!(e.class(), ErrorClass::Credentials);
        let message = e.message().unwrap_or_default();
        assert!(message.starts_with("Authorization Error: Invalid access token: <redacted> (consumer <redacted>)"), "{message}");
        assert!(message.contains("oauth_token=\"<redacted>\"") && message.contains("OAUTH_TOKEN=<redacted>&"), "{message}");
        assert!(message.ends_with("tail"), "{message}");
        // Field errors are scrubbed and bounded the same way.
        let long = format!(r#"{{"token": ["bad token tokenKEY1234567890 {}"]}}"#, "x".repeat(2000));
        let e = status_error(req(), 400, long.as_bytes(), BodyRead::Whole, None, &secrets);
        let field = &e.field_errors()["token"][0];
        assert!(field.starts_with("bad token <redacted> x") && field.len() < MAX_MESSAGE + 100, "{field}");
        assert!(!format!("{e:?}").contains("tokenKEY"));
    }

    #[test]
    fn oauth_values_are_redacted_wherever_they_stand() {
        assert_eq!(scrub_oauth_values("oauth_token=abc"), "oauth_token=<redacted>");
        assert_eq!(scrub_oauth_values("x oauth_token=\"a b\" y"), "x oauth_token=\"<redacted>\" y");
        assert_eq!(scrub_oauth_values("a=1&oauth_consumer_key=ck&b=2"), "a=1&oauth_consumer_key=<redacted>&b=2");
        // No value, no name, or not a parameter: left as it is.
        assert_eq!(scrub_oauth_values("oauth_token= ,oauth_=x, oauth_token is missing"), "oauth_token= ,oauth_=x, oauth_token is missing");
        assert_eq!(scrub_oauth_values("é oauth_token=é… end"), "é oauth_token=<redacted> end");
        assert_eq!(scrub_oauth_values(""), "");
    }

    #[test]
    fn secrets_are_scrubbed_from_messages() {
        let e = status_error(req(), 400, br#"{"power_parameters": ["bad value hunter2"]}"#, BodyRead::Whole, None, &["hunter2", ""]);
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn display_names_request_and_status() {
        let e = status_error(req(), 404, b"No Machine matches the given query.", BodyRead::Whole, None, &[]);
        assert_eq!(e.to_string(), "POST /api/2.0/machines/abc123/?op=deploy: MAAS answered 404: No Machine matches the given query.");
        let e = MaasError::Timeout { request: req(), after: Duration::from_secs(3) };
        assert_eq!(e.class(), ErrorClass::Transient);
        assert_eq!(e.field_errors().len(), 0);
    }
}
