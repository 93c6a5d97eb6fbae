//! `drover ui`: the web dashboard, served on loopback by a local proxy that holds the
//! operator's credentials, as `kubectl proxy` does: no browser needs a client certificate, and
//! the coordinator keeps mutual TLS only.
//!
//! - `/` and `/assets/*` are the dashboard's static files, built into this binary (no CDN:
//!   it works offline).
//! - `/api/*` is forwarded to the coordinator's `/v1/*` with the operator's certificate: GET
//!   for the pages, POST for the actions the coordinator allows the role (and audits as from
//!   the CLI). Answers, their status and `text/event-stream` included, come back as they are.
//!
//! What stops another local user or a web page from using the credentials through it:
//! - every `/api` request must carry the session's token (printed with the URL, a fragment
//!   the browser never sends on; the page sends it in `X-Drover-Token`, and the event stream,
//!   whose `EventSource` cannot send headers, as `?token=`) — compared in constant time;
//! - a `Host` other than the address it listens on is refused (DNS rebinding);
//! - only GET and POST reach the coordinator, POST with a JSON body only, and no CORS
//!   header is ever sent, so a page of another origin can neither read an answer nor send a
//!   POST that a browser would let through without a preflight.
//!
//! What keeps a request inside `/v1`: the path is checked as the URL parser leaves it, not as
//! it arrived ([`upstream_url`]). The parser reads `\` as `/`, drops tabs and line feeds and
//! resolves `.`/`..` (percent-encoded ones too), so a check of the raw path let
//! `/api/..%5cmetrics` out to the coordinator's `/metrics`. The URL that is checked is the one
//! that is sent.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use rand::RngCore as _;

use crate::client::ConnectArgs;
use crate::exit::{CliError, codes};

/// `drover ui` arguments.
#[derive(Args, Debug, Clone)]
pub struct UiArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Where the dashboard listens: a loopback address (the proxy holds your credentials).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub listen: SocketAddr,
}

/// The static files, built in.
const INDEX_HTML: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const APP_CSS: &str = include_str!("ui/app.css");

/// Largest POST body forwarded (an action carries a reason).
const MAX_BODY: usize = 64 * 1024;

/// What every handler shares.
struct Proxy {
    http: reqwest::Client,
    /// The coordinator's `/v1/`, parsed: every forwarded URL must stay under it.
    root: reqwest::Url,
    token: String,
    /// The `Host` values a browser sends to this listener.
    hosts: Vec<String>,
}

/// A fresh token: 32 random bytes, hex.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Equal in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `Host` values that name `addr` (a loopback address: [`run`] refuses any other).
fn host_names(addr: SocketAddr) -> Vec<String> {
    vec![addr.to_string(), format!("localhost:{}", addr.port())]
}

/// Whether the request names this listener (not a rebound name).
fn host_ok(p: &Proxy, headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    p.hosts.iter().any(|h| h == host)
}

const REBOUND: &str = "this dashboard answers only on the address it listens on";

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": { "code": "ui_refused", "message": message } });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// The checks every request passes (see the module doc); `query_token` is the `token=` of
/// the query string, accepted for the event stream only.
fn check(p: &Proxy, headers: &HeaderMap, query_token: Option<&str>) -> Result<(), (StatusCode, &'static str)> {
    if !host_ok(p, headers) {
        return Err((StatusCode::FORBIDDEN, REBOUND));
    }
    let given = headers.get("x-drover-token").and_then(|v| v.to_str().ok()).or(query_token);
    match given {
        Some(t) if same(t, &p.token) => Ok(()),
        _ => Err((StatusCode::UNAUTHORIZED, "missing or wrong dashboard token: open the URL drover ui printed")),
    }
}

fn asset(content_type: &'static str, text: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], text).into_response()
}

async fn index(State(p): State<Arc<Proxy>>, headers: HeaderMap) -> Response {
    // The page itself holds no data, but a rebinding check here too keeps a foreign name
    // from even loading the script.
    if !host_ok(&p, &headers) {
        return refuse(StatusCode::FORBIDDEN, REBOUND);
    }
    let mut resp = asset("text/html; charset=utf-8", INDEX_HTML);
    // No framing by other pages, no scripts but ours.
    let h = resp.headers_mut();
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static("default-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    );
    resp
}

/// Splits `token=` out of a query string; the rest is forwarded.
fn split_token(query: Option<&str>) -> (Option<String>, String) {
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.strip_prefix("token=") {
            Some(t) => token = Some(t.to_owned()),
            None => rest.push(pair),
        }
    }
    (token, rest.join("&"))
}

/// Why a dashboard path is not forwarded. Each names what the URL parser made of the path:
/// that, not the bytes that arrived, is what the coordinator would be asked for.
#[derive(Debug, thiserror::Error)]
pub enum NotACoordinatorPath {
    /// The coordinator's URL with the path appended does not parse.
    #[error("{asked:?} does not parse as a coordinator path")]
    Unparsable {
        /// The path after `/api/`, as it arrived.
        asked: String,
        /// The URL parser's reason.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Once parsed, the URL is no longer under the coordinator's `/v1/`.
    #[error("{asked:?} leads to {parsed:?}, outside the coordinator's /v1/")]
    OutsideV1 {
        /// The path after `/api/`, as it arrived.
        asked: String,
        /// Where the parser took it.
        parsed: String,
    },
    /// The parser changed the path (read `\` as `/`, dropped a tab or line feed, resolved a
    /// dot segment): only paths that mean themselves are forwarded.
    #[error("{asked:?} reads as {parsed:?} once parsed (a `\\`, tab, line feed or dot segment in it)")]
    Rewritten {
        /// The path after `/api/`, as it arrived.
        asked: String,
        /// What the parser made of it.
        parsed: String,
    },
    /// A segment that is empty, `.` or `..`, percent-decoded.
    #[error("{asked:?}: segment {segment:?} is empty, `.` or `..`")]
    DotOrEmptySegment {
        /// The path after `/api/`, as it arrived.
        asked: String,
        /// The segment, as parsed.
        segment: String,
    },
    /// A segment whose percent-encoding hides a `/`, a `\` or a control character: the
    /// coordinator decodes it into a path parameter, where it must not act as a separator.
    #[error("{asked:?}: segment {segment:?} encodes a `/`, `\\` or control character")]
    HiddenSeparator {
        /// The path after `/api/`, as it arrived.
        asked: String,
        /// The segment, as parsed.
        segment: String,
    },
}

/// `%XX` decoded (a malformed escape is kept as it is, as the URL parser keeps it).
fn percent_decoded(segment: &str) -> Vec<u8> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b)))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// The URL `asked` (the request's path after `/api/`, still percent-encoded) is forwarded
/// to, with `query`: built by the URL parser, then checked as parsed — under `root`, exactly
/// the path asked for, no empty, `.` or `..` segment, and no segment hiding a separator or
/// control character behind percent-encoding.
pub fn upstream_url(root: &reqwest::Url, asked: &str, query: &str) -> Result<reqwest::Url, NotACoordinatorPath> {
    let text = if query.is_empty() { format!("{root}{asked}") } else { format!("{root}{asked}?{query}") };
    let url = reqwest::Url::parse(&text).map_err(|e| NotACoordinatorPath::Unparsable { asked: asked.to_owned(), source: Box::new(e) })?;
    let parsed = url.path();
    let Some(rest) = parsed.strip_prefix(root.path()).filter(|_| url.origin() == root.origin()) else {
        return Err(NotACoordinatorPath::OutsideV1 { asked: asked.to_owned(), parsed: parsed.to_owned() });
    };
    if rest != asked {
        return Err(NotACoordinatorPath::Rewritten { asked: asked.to_owned(), parsed: parsed.to_owned() });
    }
    for segment in rest.split('/') {
        let decoded = percent_decoded(segment);
        if decoded.is_empty() || decoded == b"." || decoded == b".." {
            return Err(NotACoordinatorPath::DotOrEmptySegment { asked: asked.to_owned(), segment: segment.to_owned() });
        }
        if decoded.iter().any(|b| matches!(b, b'/' | b'\\') || b.is_ascii_control()) {
            return Err(NotACoordinatorPath::HiddenSeparator { asked: asked.to_owned(), segment: segment.to_owned() });
        }
    }
    Ok(url)
}

/// `/api/{*path}`: forwarded to `/v1/{path}` (see the module doc).
async fn forward(
    State(p): State<Arc<Proxy>>,
    method: Method,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // The path as it arrived, percent-encoding and all: axum's `Path` would decode it, and a
    // decoded `%5c` is a `\` the URL parser then reads as `/`.
    let asked = uri.path().strip_prefix("/api/").unwrap_or_default();
    let (query_token, rest) = split_token(query.as_deref());
    let stream = method == Method::GET && asked == "events/stream";
    if let Err((status, why)) = check(&p, &headers, query_token.as_deref().filter(|_| stream)) {
        return refuse(status, why);
    }
    let url = match upstream_url(&p.root, asked, &rest) {
        Ok(url) => url,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &format!("not a coordinator path: {e}")),
    };
    let req = match method {
        Method::GET => p.http.get(url),
        Method::POST => {
            let json = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
            if !json {
                return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "actions are JSON");
            }
            if body.len() > MAX_BODY {
                return refuse(StatusCode::PAYLOAD_TOO_LARGE, "action body too large");
            }
            p.http.post(url).header(header::CONTENT_TYPE, "application/json").body(body)
        }
        _ => return refuse(StatusCode::METHOD_NOT_ALLOWED, "the dashboard reads (GET) and acts (POST) only"),
    };
    let req = match headers.get("last-event-id") {
        Some(v) => req.header("last-event-id", v.clone()),
        None => req,
    };
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return refuse(StatusCode::BAD_GATEWAY, &format!("the coordinator did not answer: {}", drover_client::error_chain(&e))),
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
    let chunks = futures_util::stream::unfold(resp, |mut r| async move {
        match r.chunk().await {
            Ok(Some(bytes)) => Some((Ok::<Bytes, std::io::Error>(bytes), r)),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), r)),
        }
    });
    let mut out = Response::new(Body::from_stream(chunks));
    *out.status_mut() = status;
    if let Some(ct) = content_type {
        out.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    out.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    out
}

/// The dashboard's router over `proxy`.
fn router(proxy: Arc<Proxy>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/assets/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
        .route("/api/{*path}", axum::routing::any(forward))
        .with_state(proxy)
}

/// Runs `drover ui` until Ctrl-C.
pub fn run(args: &UiArgs) -> Result<(), CliError> {
    if !args.listen.ip().is_loopback() {
        return Err(CliError::usage(format!(
            "--listen {}: the dashboard holds your credentials; it listens on loopback only (127.0.0.1 or ::1)",
            args.listen
        )));
    }
    let target = args.connect.resolve()?;
    let tls = crate::client::tls_for(&target)?;
    let root = reqwest::Url::parse(&format!("{}/v1/", target.url))
        .map_err(|e| CliError::usage(format!("--coordinator {:?} is not a URL: {e}", target.url)))?;
    // No overall deadline: the event stream stays open; a silent coordinator is noticed by
    // the stream's keep-alives missing (the read timeout).
    let http = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .https_only(true)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .user_agent(crate::client::USER_AGENT)
        .build()
        .map_err(|e| CliError::new(codes::SOFTWARE, format!("cannot build the HTTPS client: {e}")))?;
    let rt = crate::client::runtime()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| CliError::new(codes::CANT_CREATE, format!("cannot listen on {}: {e}", args.listen)))?;
        let addr = listener.local_addr().map_err(|e| CliError::new(codes::SOFTWARE, e.to_string()))?;
        let proxy = Arc::new(Proxy { http, root, token: new_token(), hosts: host_names(addr) });
        // Written, not printed: a reader that closed its end must not stop the dashboard.
        use std::io::Write as _;
        let mut out = std::io::stdout();
        let _ = writeln!(out, "drover ui: the dashboard of {} is at", target.url);
        let _ = writeln!(out, "  http://{addr}/#token={}", proxy.token);
        let _ = writeln!(out, "(Ctrl-C stops it; the token is this session's only)");
        let _ = out.flush();
        let interrupt = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        axum::serve(listener, router(proxy))
            .with_graceful_shutdown(interrupt)
            .await
            .map_err(|e| CliError::new(codes::SOFTWARE, format!("the dashboard stopped: {e}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_compared_whole_and_split_out_of_the_query() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd") && !same("abc", "ab") && !same("", "a"));
        assert_eq!(
            split_token(Some("kind=host.transition&token=t0k&after=5")),
            (Some("t0k".into()), "kind=host.transition&after=5".into())
        );
        assert_eq!(split_token(None), (None, String::new()));
        assert_eq!(new_token().len(), 64);
        assert_ne!(new_token(), new_token());
    }

    #[test]
    fn only_the_listening_address_is_a_host() {
        assert_eq!(host_names("127.0.0.1:8765".parse().expect("addr")), ["127.0.0.1:8765", "localhost:8765"]);
        assert_eq!(host_names("[::1]:8765".parse().expect("addr")), ["[::1]:8765", "localhost:8765"]);
    }

    fn root() -> reqwest::Url {
        reqwest::Url::parse("https://coord.example:8443/v1/").expect("url")
    }

    /// What `upstream_url` refuses, with the path the parser would have sent instead.
    fn refused(asked: &str) -> String {
        match upstream_url(&root(), asked, "") {
            Ok(url) => panic!("{asked:?} was forwarded to {url}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_raw_backslash_tab_or_line_feed_cannot_take_the_url_out_of_v1() {
        // Raw: hyper refuses most of these on the wire, but the check must not rely on it.
        for asked in ["..\\metrics", "hosts\\..\\..\\metrics", ".\t./metrics", "..\t/metrics", ".\n./metrics", "..\r/metrics", "\\metrics"]
        {
            let why = refused(asked);
            assert!(why.contains("outside the coordinator's /v1/") || why.contains("once parsed"), "{asked:?}: {why}");
        }
        // The parser would have sent the first to the coordinator's /metrics: that is named.
        assert!(refused("..\\metrics").contains("\"/metrics\""), "{}", refused("..\\metrics"));
    }

    #[test]
    fn percent_encoded_backslashes_controls_and_dots_cannot_take_the_proxy_out_of_v1() {
        for asked in [
            "..%5cmetrics",
            "..%5C..%5Cmetrics",
            "%5c..%5cmetrics",
            ".%09./metrics",
            "%2e%09%2e/metrics",
            ".%0a./metrics",
            ".%0d./metrics",
            "%2e%2e/metrics",
            "%2E%2E/metrics",
            ".%2e/metrics",
            "hosts/%2e%2e/%2e%2e/metrics",
            "hosts/%2e%2e/whoami",
            "..%2fmetrics",
            "%2e%2e%2fmetrics",
            "%2e%2e%5cmetrics",
            ".%2e%5c%2e%2e%5cmetrics",
            "hosts/.%0a.%5c..%2fmetrics",
            "..\\%2e%2e/metrics",
            "hosts/a%00b",
            "hosts/%7f",
            "../metrics",
            "/metrics",
            "hosts//x",
            "hosts/",
            "",
        ] {
            refused(asked);
        }
        assert!(refused("..%5cmetrics").contains("segment \"..%5cmetrics\" encodes"), "{}", refused("..%5cmetrics"));
        assert!(refused("%2e%2e/metrics").contains("outside"), "{}", refused("%2e%2e/metrics"));
    }

    #[test]
    fn paths_that_mean_themselves_are_forwarded_as_asked() {
        let url = upstream_url(&root(), "rollouts/gpu%40c0ffee/halt", "").expect("forwarded");
        assert_eq!(url.as_str(), "https://coord.example:8443/v1/rollouts/gpu%40c0ffee/halt");
        let url = upstream_url(&root(), "events/stream", "kind=host.transition&after=5").expect("forwarded");
        assert_eq!(url.as_str(), "https://coord.example:8443/v1/events/stream?kind=host.transition&after=5");
        // A coordinator under a path prefix keeps it.
        let prefixed = reqwest::Url::parse("https://coord.example/drover/v1/").expect("url");
        assert_eq!(upstream_url(&prefixed, "whoami", "").expect("forwarded").path(), "/drover/v1/whoami");
        assert!(upstream_url(&prefixed, "../../metrics", "").is_err());
    }
}
