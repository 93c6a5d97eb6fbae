//! MAAS API keys and OAuth 1.0a PLAINTEXT signing (0-legged: the consumer secret is empty).
//!
//! MAAS's own client signs every request with a fresh nonce and the current time, and the
//! server refuses a reused nonce or a timestamp more than 300 s off (facts §3), so the header is
//! rebuilt for every attempt, retries included. The building is a pure function of key, nonce
//! and timestamp so its bytes can be pinned by tests.

use std::fmt;
use std::str::FromStr;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use rand::Rng;

use crate::error::MaasError;

/// RFC 5849 §3.6: everything but ALPHA, DIGIT, `-`, `.`, `_`, `~` is percent-encoded.
const OAUTH_ENCODE: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A MAAS API key, `consumer_key:token_key:token_secret`. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// The consumer key (public).
    pub consumer_key: String,
    /// The token key (not a credential, but it names one: scrubbed from MAAS's errors all the same).
    pub token_key: String,
    /// The token secret: the actual credential.
    pub token_secret: String,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("consumer_key", &self.consumer_key)
            .field("token_key", &self.token_key)
            .field("token_secret", &"<redacted>")
            .finish()
    }
}

impl FromStr for ApiKey {
    type Err = MaasError;

    /// Parses `consumer_key:token_key:token_secret`. Surrounding whitespace (a key file's final
    /// newline) is ignored; errors say what is wrong without echoing any part of the key.
    fn from_str(s: &str) -> Result<ApiKey, MaasError> {
        let bad = |reason: String| MaasError::BadApiKey { reason };
        let parts: Vec<&str> = s.trim().split(':').collect();
        if parts.len() != 3 {
            return Err(bad(format!("expected three parts consumer_key:token_key:token_secret separated by ':', found {}", parts.len())));
        }
        for (name, part) in ["consumer_key", "token_key", "token_secret"].iter().zip(&parts) {
            if part.is_empty() {
                return Err(bad(format!("the {name} part is empty")));
            }
            if part.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad(format!("the {name} part contains whitespace or control characters")));
            }
        }
        Ok(ApiKey { consumer_key: parts[0].to_owned(), token_key: parts[1].to_owned(), token_secret: parts[2].to_owned() })
    }
}

/// Percent-encodes an OAuth parameter value (RFC 5849 §3.6).
pub fn oauth_encode(value: &str) -> String {
    utf8_percent_encode(value, OAUTH_ENCODE).to_string()
}

/// The `Authorization` header value for one request, exactly as MAAS's own client writes it:
/// parameters in its order, values percent-encoded, the PLAINTEXT signature `&<secret>` thus
/// arriving as `%26<secret>`.
pub fn authorization_header(key: &ApiKey, nonce: &str, timestamp: u64) -> String {
    format!(
        "OAuth oauth_nonce=\"{}\", oauth_timestamp=\"{timestamp}\", oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", \
         oauth_consumer_key=\"{}\", oauth_token=\"{}\", oauth_signature=\"%26{}\"",
        oauth_encode(nonce),
        oauth_encode(&key.consumer_key),
        oauth_encode(&key.token_key),
        oauth_encode(&key.token_secret),
    )
}

/// A fresh nonce: 32 random alphanumerics, so a reuse (which MAAS refuses) is never a concern.
pub fn fresh_nonce() -> String {
    rand::thread_rng().sample_iter(&rand::distributions::Alphanumeric).take(32).map(char::from).collect()
}

/// The current Unix time in seconds (0 if the clock is before 1970, which MAAS then refuses as
/// stale: an honest failure rather than a panic).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorClass;

    fn key() -> ApiKey {
        "CK:TK:TS".parse().expect("key")
    }

    #[test]
    fn header_bytes_are_exact() {
        let h = authorization_header(&key(), "abc123", 1767322800);
        assert_eq!(
            h,
            "OAuth oauth_nonce=\"abc123\", oauth_timestamp=\"1767322800\", oauth_version=\"1.0\", \
             oauth_signature_method=\"PLAINTEXT\", oauth_consumer_key=\"CK\", oauth_token=\"TK\", oauth_signature=\"%26TS\""
        );
    }

    #[test]
    fn secret_and_keys_are_percent_encoded() {
        let k = ApiKey { consumer_key: "a b".into(), token_key: "t/k".into(), token_secret: "s&c=r+t~._-%\"é".into() };
        let h = authorization_header(&k, "n", 1);
        assert!(h.contains("oauth_consumer_key=\"a%20b\""), "{h}");
        assert!(h.contains("oauth_token=\"t%2Fk\""), "{h}");
        assert!(h.ends_with("oauth_signature=\"%26s%26c%3Dr%2Bt~._-%25%22%C3%A9\""), "{h}");
        assert_eq!(oauth_encode("AZaz09-._~"), "AZaz09-._~");
    }

    #[test]
    fn key_parses_and_trims() {
        let k: ApiKey = " CK:TK:TS\n".parse().expect("key");
        assert_eq!((k.consumer_key.as_str(), k.token_key.as_str(), k.token_secret.as_str()), ("CK", "TK", "TS"));
    }

    #[test]
    fn bad_keys_say_why_without_echoing() {
        for (input, want) in [
            ("onlyonepart-secretish", "found 1"),
            ("a:b:c:secretish", "found 4"),
            ("a::secretish", "token_key part is empty"),
            ("a:b:", "token_secret part is empty"),
            ("a:b:sec retish", "token_secret part contains whitespace"),
        ] {
            let e = input.parse::<ApiKey>().expect_err(input);
            assert_eq!(e.class(), ErrorClass::Config);
            let shown = format!("{e} {e:?}");
            assert!(shown.contains(want), "{input}: {shown}");
            assert!(!shown.contains("secretish"), "{input}: {shown}");
        }
    }

    #[test]
    fn debug_redacts_the_secret() {
        let k: ApiKey = "CK:TK:supersecret".parse().expect("key");
        let shown = format!("{k:?} {k:#?}");
        assert!(!shown.contains("supersecret"), "{shown}");
        assert!(shown.contains("CK") && shown.contains("TK") && shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn nonces_are_fresh() {
        let (a, b) = (fresh_nonce(), fresh_nonce());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(unix_now() > 1_600_000_000);
    }
}
