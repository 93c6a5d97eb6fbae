//! MAAS's OAuth 1.0a PLAINTEXT check, 0-legged: an API key is `consumer:token:secret`, the
//! consumer secret is empty, so the signature must be `&<token secret>` (it usually arrives
//! percent-encoded as `%26<secret>`; the header values are percent-decoded and unquoted
//! first). The six `oauth_*` parameters may come from the `Authorization` header, the query
//! string or the form body; a request without all six is anonymous, and it is the route's
//! business whether anonymous callers get an answer, a 400 or a 401.
//!
//! Each API key is its own admin user, named after its consumer key. A machine's metadata
//! token (the hardware-sync credential minted at deploy) is known here too, but MAAS refuses
//! it on the REST API with 403.

use std::collections::HashMap;

use super::forms::Params;
use super::reply::{Millis, Reply};

/// One API key and the user it authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// The consumer key, also the username.
    pub consumer_key: String,
    /// The token key.
    pub token_key: String,
    /// The token secret.
    pub token_secret: String,
}

impl ApiKey {
    /// Parses `consumer_key:token_key:token_secret`.
    pub fn parse(text: &str) -> Result<ApiKey, ApiKeyError> {
        let parts: Vec<&str> = text.trim().split(':').collect();
        match parts.as_slice() {
            [ck, tk, ts] if !ck.is_empty() && !tk.is_empty() && !ts.is_empty() => {
                Ok(ApiKey { consumer_key: (*ck).to_owned(), token_key: (*tk).to_owned(), token_secret: (*ts).to_owned() })
            }
            _ => Err(ApiKeyError { parts: parts.len() }),
        }
    }

    /// The username this key authenticates as.
    pub fn username(&self) -> &str {
        &self.consumer_key
    }
}

/// An API key that is not three non-empty `:`-separated parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an API key is CONSUMER_KEY:TOKEN_KEY:TOKEN_SECRET, got {parts} part(s)")]
pub struct ApiKeyError {
    /// How many parts it has.
    pub parts: usize,
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No (complete) OAuth credentials.
    Anonymous,
    /// An authenticated admin user.
    User(String),
}

/// How far a timestamp may be from now (MAAS's OAuth store), in seconds.
pub const TIMESTAMP_WINDOW_SECS: i64 = 300;

/// The nonces seen within the timestamp window, per consumer and token.
#[derive(Debug, Default)]
pub struct Nonces {
    seen: HashMap<(String, String, String), Millis>,
}

impl Nonces {
    /// Records a nonce; false when it was already used. Forgets nonces older than twice the
    /// window (their timestamps are refused anyway).
    fn record(&mut self, ck: &str, tk: &str, nonce: &str, now: Millis) -> bool {
        self.seen.retain(|_, at| now - *at <= 2 * TIMESTAMP_WINDOW_SECS * 1000);
        self.seen.insert((ck.to_owned(), tk.to_owned(), nonce.to_owned()), now).is_none()
    }
}

const NECESSARY: [&str; 6] =
    ["oauth_consumer_key", "oauth_token", "oauth_signature", "oauth_signature_method", "oauth_timestamp", "oauth_nonce"];

/// Splits an `Authorization: OAuth k="v", …` header into percent-decoded, unquoted pairs;
/// a part naming `realm` is ignored.
pub fn parse_header(value: &str) -> Vec<(String, String)> {
    let Some(rest) = value.trim().strip_prefix("OAuth").or_else(|| value.trim().strip_prefix("oauth")) else {
        return Vec::new();
    };
    rest.split(',')
        .filter_map(|part| {
            let (k, v) = part.trim().split_once('=')?;
            let k = k.trim();
            if k.contains("realm") {
                return None;
            }
            let v = v.trim().trim_matches('"');
            let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned();
            Some((k.to_owned(), v))
        })
        .collect()
}

fn unauthorized(reason: String) -> Reply {
    Reply::text(401, format!("Authorization Error: {reason}")).with_header("www-authenticate", "OAuth realm=\"OAuth\"")
}

/// A known consumer/token pair: an API key's user or a machine's own token.
pub enum Principal<'a> {
    /// An API user.
    User(&'a ApiKey),
    /// A machine's metadata token (`consumer_key`, `token_key`, `token_secret`).
    Machine(&'a str, &'a str, &'a str),
}

/// Checks a request's credentials. `header` is the `Authorization` header, `params` the
/// query and form parameters, `machine_tokens` every machine's metadata token.
pub fn authenticate(
    header: Option<&str>,
    params: &Params,
    keys: &[ApiKey],
    machine_tokens: &[(String, String, String)],
    nonces: &mut Nonces,
    now: Millis,
) -> Result<Caller, Reply> {
    let mut oauth: HashMap<String, String> = HashMap::new();
    for (k, v) in params.pairs().iter().filter(|(k, _)| k.starts_with("oauth_")) {
        oauth.entry(k.clone()).or_insert_with(|| v.clone());
    }
    // The header wins over parameters of the same name.
    for (k, v) in header.map(parse_header).unwrap_or_default() {
        oauth.insert(k, v);
    }
    if !NECESSARY.iter().all(|k| oauth.contains_key(*k)) {
        return Ok(Caller::Anonymous);
    }
    let get = |k: &str| oauth.get(k).map(String::as_str).unwrap_or_default();
    let Ok(timestamp) = get("oauth_timestamp").parse::<i64>() else {
        return Err(Reply::text(400, format!("Invalid OAuth timestamp: {}", get("oauth_timestamp"))));
    };
    let (ck, tk) = (get("oauth_consumer_key"), get("oauth_token"));
    let consumer_known = keys.iter().any(|k| k.consumer_key == ck) || machine_tokens.iter().any(|(mck, _, _)| mck == ck);
    if !consumer_known {
        return Err(unauthorized("Invalid API key.".into()));
    }
    let principal = keys
        .iter()
        .find(|k| k.consumer_key == ck && k.token_key == tk)
        .map(Principal::User)
        .or_else(|| machine_tokens.iter().find(|(mck, mtk, _)| mck == ck && mtk == tk).map(|(a, b, c)| Principal::Machine(a, b, c)));
    let Some(principal) = principal else {
        return Err(unauthorized(format!("'Invalid access token: {tk}'")));
    };
    if let Some(version) = oauth.get("oauth_version").filter(|v| *v != "1.0") {
        return Err(unauthorized(format!("'OAuth version {version} not supported.'")));
    }
    let method = get("oauth_signature_method");
    if method != "PLAINTEXT" {
        return Err(unauthorized(format!("'Signature method {method} not supported try one of the following: PLAINTEXT'")));
    }
    let now_secs = now.div_euclid(1000);
    if (now_secs - timestamp).abs() > TIMESTAMP_WINDOW_SECS {
        return Err(unauthorized(format!(
            "'Expired timestamp: given {timestamp} and now {now_secs} has a greater difference than threshold {TIMESTAMP_WINDOW_SECS}'"
        )));
    }
    let nonce = get("oauth_nonce");
    if !nonces.record(ck, tk, nonce, now) {
        return Err(unauthorized(format!("'Nonce already used: {nonce}'")));
    }
    let secret = match &principal {
        Principal::User(k) => k.token_secret.as_str(),
        Principal::Machine(_, _, s) => s,
    };
    let signature = get("oauth_signature");
    let encoded = percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC).to_string();
    if signature != format!("&{secret}") && signature != format!("&{encoded}") {
        return Err(unauthorized("'Invalid signature.'".into()));
    }
    match principal {
        Principal::User(k) => Ok(Caller::User(k.username().to_owned())),
        // A machine's own token is a valid OAuth identity but has no rights on the REST API.
        Principal::Machine(..) => Err(Reply::text(403, "")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_767_322_800_000;

    fn keys() -> Vec<ApiKey> {
        vec![ApiKey::parse("ck:tk:sec").unwrap()]
    }

    fn header(nonce: &str, ts: i64, sig: &str) -> String {
        format!(
            "OAuth realm=\"\", oauth_nonce=\"{nonce}\", oauth_timestamp=\"{ts}\", oauth_version=\"1.0\", \
             oauth_signature_method=\"PLAINTEXT\", oauth_consumer_key=\"ck\", oauth_token=\"tk\", oauth_signature=\"{sig}\""
        )
    }

    fn check(h: &str, nonces: &mut Nonces) -> Result<Caller, Reply> {
        authenticate(Some(h), &Params::default(), &keys(), &[("mck".into(), "mtk".into(), "ms".into())], nonces, NOW)
    }

    fn body(r: &Reply) -> String {
        String::from_utf8(r.body.clone()).unwrap()
    }

    #[test]
    fn api_keys() {
        assert_eq!(ApiKey::parse("a:b:c").unwrap().username(), "a");
        assert!(ApiKey::parse("a:b").is_err());
        assert!(ApiKey::parse("a::c").is_err());
    }

    #[test]
    fn good_signatures_plain_or_encoded() {
        let mut n = Nonces::default();
        assert_eq!(check(&header("n1", NOW / 1000, "%26sec"), &mut n), Ok(Caller::User("ck".into())));
        assert_eq!(check(&header("n2", NOW / 1000 - 200, "&sec"), &mut n), Ok(Caller::User("ck".into())));
    }

    #[test]
    fn refusals() {
        let mut n = Nonces::default();
        let ts = NOW / 1000;
        let r = check(&header("a", ts, "&wrong"), &mut n).unwrap_err();
        assert_eq!(r.status, 401);
        assert!(body(&r).starts_with("Authorization Error: '"));
        assert!(r.headers.iter().any(|(k, v)| *k == "www-authenticate" && v == "OAuth realm=\"OAuth\""));
        let r = check(&header("b", ts - 301, "&sec"), &mut n).unwrap_err();
        assert!(body(&r).contains("Expired timestamp"), "{}", body(&r));
        check(&header("c", ts, "&sec"), &mut n).unwrap();
        let r = check(&header("c", ts, "&sec"), &mut n).unwrap_err();
        assert_eq!((r.status, body(&r)), (401, "Authorization Error: 'Nonce already used: c'".to_owned()));
        let r = check(&header("d", ts, "&sec").replace("oauth_token=\"tk\"", "oauth_token=\"nope\""), &mut n).unwrap_err();
        assert_eq!(body(&r), "Authorization Error: 'Invalid access token: nope'");
        let r = check(&header("e", ts, "&sec").replace("consumer_key=\"ck\"", "consumer_key=\"x\""), &mut n).unwrap_err();
        assert_eq!(body(&r), "Authorization Error: Invalid API key.");
        let r = check(&header("f", 0, "&sec").replace("oauth_timestamp=\"0\"", "oauth_timestamp=\"soon\""), &mut n).unwrap_err();
        assert_eq!(r.status, 400);
        let r = check(&header("g", ts, "&sec").replace("PLAINTEXT", "HMAC-SHA1"), &mut n).unwrap_err();
        assert_eq!(r.status, 401);
        let r = check(&header("h", ts, "&sec").replace("\"1.0\"", "\"2.0\""), &mut n).unwrap_err();
        assert_eq!(r.status, 401);
    }

    #[test]
    fn incomplete_credentials_are_anonymous_and_machine_tokens_forbidden() {
        let mut n = Nonces::default();
        assert_eq!(check("OAuth oauth_consumer_key=\"ck\"", &mut n), Ok(Caller::Anonymous));
        assert_eq!(authenticate(None, &Params::default(), &keys(), &[], &mut n, NOW), Ok(Caller::Anonymous));
        let h = header("m", NOW / 1000, "&ms").replace("\"ck\"", "\"mck\"").replace("\"tk\"", "\"mtk\"");
        assert_eq!(check(&h, &mut n).unwrap_err().status, 403);
        // Credentials as query parameters work too.
        let q = Params::from_query(&format!(
            "oauth_consumer_key=ck&oauth_token=tk&oauth_signature=%26sec&oauth_signature_method=PLAINTEXT&oauth_timestamp={}&oauth_nonce=q",
            NOW / 1000
        ));
        assert_eq!(authenticate(None, &q, &keys(), &[], &mut n, NOW), Ok(Caller::User("ck".into())));
    }
}
