//! [`CoordinatorClient`]: HTTPS requests to one coordinator reachable at several URLs, tried in
//! order on connection failure, with bounded reads and typed errors.

use std::time::Duration;

use rustls::pki_types::CertificateDer;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{ClientError, ConnectFailure, error_chain, error_from_body};
use crate::tls::{ClientIdentity, tls_config};

/// The largest response body read (the biggest answer is a rollout bundle).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The largest error (non-2xx) body read.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// How long a TCP connect plus TLS handshake may take before the next URL is tried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default limit on a whole request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// An HTTPS client for one coordinator (several URLs, tried in order).
#[derive(Debug, Clone)]
pub struct CoordinatorClient {
    http: reqwest::Client,
    urls: Vec<String>,
}

impl CoordinatorClient {
    /// A client sending `user_agent` to `urls` (a trailing `/` is dropped), trusting only
    /// `ca`, presenting `identity` if given, each request limited to `timeout`.
    pub fn new(
        user_agent: &str,
        urls: &[String],
        ca: &[CertificateDer<'static>],
        identity: Option<ClientIdentity>,
        timeout: Duration,
    ) -> Result<CoordinatorClient, ClientError> {
        Self::with_tls(user_agent, urls, tls_config(ca, identity)?, timeout)
    }

    /// As [`CoordinatorClient::new`], with a TLS configuration built by the caller from
    /// [`tls_config`] (to narrow its ALPN list, say).
    pub fn with_tls(
        user_agent: &str,
        urls: &[String],
        tls: rustls::ClientConfig,
        timeout: Duration,
    ) -> Result<CoordinatorClient, ClientError> {
        Self::with_tls_from(user_agent, urls, tls, timeout, None)
    }

    /// As [`CoordinatorClient::with_tls`], its connections made from the local address
    /// `local` when one is given (a simulator spreading thousands of connections over several
    /// loopback addresses, so that one address's ephemeral ports do not run out).
    pub fn with_tls_from(
        user_agent: &str,
        urls: &[String],
        tls: rustls::ClientConfig,
        timeout: Duration,
        local: Option<std::net::IpAddr>,
    ) -> Result<CoordinatorClient, ClientError> {
        if urls.is_empty() {
            return Err(ClientError::Setup { message: "no coordinator URL".to_owned() });
        }
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            // reqwest's default today; said here because a request written in pieces would
            // otherwise wait on the server's delayed ACK (~40 ms a call).
            .tcp_nodelay(true)
            .timeout(timeout)
            .local_address(local)
            .user_agent(user_agent)
            .build()
            .map_err(|e| ClientError::Setup { message: error_chain(&e) })?;
        Ok(CoordinatorClient { http, urls: urls.iter().map(|u| u.trim_end_matches('/').to_owned()).collect() })
    }

    /// The URLs, in the order they are tried.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// `GET path`: the body's bytes, exactly as sent.
    pub async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        let (url, resp) = self.send(reqwest::Method::GET, path, None).await?;
        read_ok(&url, resp).await
    }

    /// `GET path`, decoded from JSON.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let (url, resp) = self.send(reqwest::Method::GET, path, None).await?;
        let body = read_ok(&url, resp).await?;
        decode(&url, &body)
    }

    /// `POST path` with a JSON body, the answer decoded from JSON.
    pub async fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ClientError::Setup { message: format!("cannot encode request: {e}") })?;
        let (url, resp) = self.send(reqwest::Method::POST, path, Some(bytes)).await?;
        let body = read_ok(&url, resp).await?;
        decode(&url, &body)
    }

    /// `method path` with an optional JSON body (PATCH, DELETE, …), the answer decoded from JSON.
    pub async fn request_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let bytes =
            body.map(serde_json::to_vec).transpose().map_err(|e| ClientError::Setup { message: format!("cannot encode request: {e}") })?;
        let (url, resp) = self.send(method, path, bytes).await?;
        let body = read_ok(&url, resp).await?;
        decode(&url, &body)
    }

    /// `POST path` with a JSON body, for routes that answer a bare status (204): `Ok` on any
    /// 2xx (the body is read, bounded, and ignored); any other status is the error it carries
    /// ([`ClientError::Api`] or [`ClientError::Http`] with the status).
    pub async fn post_for_status<B: Serialize + ?Sized>(&self, path: &str, body: &B) -> Result<u16, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ClientError::Setup { message: format!("cannot encode request: {e}") })?;
        let (url, resp) = self.send(reqwest::Method::POST, path, Some(bytes)).await?;
        let status = resp.status().as_u16();
        read_ok(&url, resp).await?;
        Ok(status)
    }

    /// Sends one request, failing over to the next URL only on a connection failure.
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Vec<u8>>) -> Result<(String, reqwest::Response), ClientError> {
        let mut attempts = Vec::new();
        for base in &self.urls {
            let url = format!("{base}{path}");
            let mut req = self.http.request(method.clone(), &url).header(reqwest::header::ACCEPT, "application/json");
            if let Some(b) = &body {
                req = req.header(reqwest::header::CONTENT_TYPE, "application/json").body(b.clone());
            }
            match req.send().await {
                Ok(resp) => return Ok((url, resp)),
                Err(e) if e.is_connect() => attempts.push(ConnectFailure { url: base.clone(), cause: error_chain(&e) }),
                Err(e) => return Err(ClientError::Transport { url, message: error_chain(&e) }),
            }
        }
        Err(ClientError::Unreachable { path: path.to_owned(), attempts })
    }
}

/// The body of a 2xx answer, or the error the answer carries.
async fn read_ok(url: &str, resp: reqwest::Response) -> Result<Vec<u8>, ClientError> {
    let status = resp.status();
    if status.is_success() {
        return read_limited(url, resp, MAX_RESPONSE_BYTES).await;
    }
    let body = read_limited(url, resp, MAX_ERROR_BODY_BYTES).await?;
    Err(error_from_body(url, status.as_u16(), &body))
}

/// The whole body, refused once it passes `limit` bytes.
async fn read_limited(url: &str, mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| ClientError::Transport { url: url.to_owned(), message: error_chain(&e) })? {
        if out.len() + chunk.len() > limit {
            return Err(ClientError::TooLarge { url: url.to_owned(), limit });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// `body` as one JSON document of type `T`, nothing after it.
fn decode<T: DeserializeOwned>(url: &str, body: &[u8]) -> Result<T, ClientError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| ClientError::Decode {
        url: url.to_owned(),
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })?;
    de.end().map_err(|e| ClientError::Decode { url: url.to_owned(), path: ".".to_owned(), message: e.to_string() })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_url_is_tried_in_order_and_all_are_named_when_none_answers() {
        let ports: Vec<u16> =
            (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()).collect();
        let urls: Vec<String> = ports.iter().map(|p| format!("https://127.0.0.1:{p}")).collect();
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("ca");
        let client = CoordinatorClient::new("drover-test", &urls, &[ca.cert.der().clone()], None, REQUEST_TIMEOUT).expect("client");
        let e = client.get_bytes("/v1/trust.json").await.expect_err("nothing listens");
        match &e {
            ClientError::Unreachable { path, attempts } => {
                assert_eq!(path, "/v1/trust.json");
                assert_eq!(attempts.iter().map(|a| a.url.as_str()).collect::<Vec<_>>(), urls);
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().starts_with(&format!("coordinator unreachable: {}: ", urls[0])), "{e}");
    }

    #[test]
    fn trailing_slashes_are_dropped_and_no_url_is_refused() {
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("ca");
        let ca = [ca.cert.der().clone()];
        let client = CoordinatorClient::new("drover-test", &["https://c:1/".to_owned()], &ca, None, REQUEST_TIMEOUT).expect("client");
        assert_eq!(client.urls(), ["https://c:1"]);
        let e = CoordinatorClient::new("drover-test", &[], &ca, None, REQUEST_TIMEOUT).expect_err("no URL");
        assert!(matches!(e, ClientError::Setup { .. }), "{e:?}");
    }

    #[test]
    fn decode_errors_name_the_path_and_trailing_bytes_are_refused() {
        #[derive(serde::Deserialize, Debug)]
        struct Answer {
            items: Vec<u32>,
        }
        let e = decode::<Answer>("https://c/x", br#"{"items":[1,"two"]}"#).expect_err("bad item");
        assert!(matches!(&e, ClientError::Decode { path, .. } if path == "items[1]"), "{e:?}");
        assert!(e.to_string().starts_with("https://c/x: unexpected response: at `items[1]`: "), "{e}");
        let e = decode::<Answer>("https://c/x", br#"{"items":[]} {}"#).expect_err("trailing");
        assert!(matches!(&e, ClientError::Decode { message, .. } if message.starts_with("trailing characters")), "{e:?}");
        assert_eq!(decode::<Answer>("https://c/x", br#"{"items":[1]} "#).expect("trailing whitespace is fine").items, [1]);
    }
}
