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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
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
    coordinator: String,
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

/// `/api/{*path}`: forwarded to `/v1/{path}` (see the module doc).
async fn forward(
    State(p): State<Arc<Proxy>>,
    method: Method,
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (query_token, rest) = split_token(query.as_deref());
    let stream = method == Method::GET && path == "events/stream";
    if let Err((status, why)) = check(&p, &headers, query_token.as_deref().filter(|_| stream)) {
        return refuse(status, why);
    }
    if path.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..") {
        return refuse(StatusCode::BAD_REQUEST, "not a coordinator path");
    }
    let url = if rest.is_empty() { format!("{}/v1/{path}", p.coordinator) } else { format!("{}/v1/{path}?{rest}", p.coordinator) };
    let req = match method {
        Method::GET => p.http.get(&url),
        Method::POST => {
            let json = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
            if !json {
                return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "actions are JSON");
            }
            if body.len() > MAX_BODY {
                return refuse(StatusCode::PAYLOAD_TOO_LARGE, "action body too large");
            }
            p.http.post(&url).header(header::CONTENT_TYPE, "application/json").body(body)
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
        let proxy = Arc::new(Proxy { http, coordinator: target.url.clone(), token: new_token(), hosts: host_names(addr) });
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
}
