//! The one listener: TCP accept, TLS 1.3 handshake, then HTTP/1.1 or HTTP/2 (by ALPN) into
//! the router, with the peer's certificate identity attached to every request of the
//! connection.
//!
//! The identity is computed once per connection from the certificate rustls verified; no
//! header or body can change it. A handshake that stalls is dropped after a bound, so slow
//! clients cannot pin connections before they authenticate.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::api::auth::Peer;
use crate::identity::{Identity, cert_serial_hex};
use crate::tls::TlsState;

/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request's headers may take to arrive (HTTP/1.1).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent streams one HTTP/2 connection may open (an agent needs one or two).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16;

/// Serves `router` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, tls: Arc<TlsState>, router: Router) -> std::io::Result<()> {
    loop {
        let (tcp, remote) = match listener.accept().await {
            Ok(c) => c,
            // Out of file descriptors and the like: log, back off briefly so the loop does
            // not spin, keep serving.
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = tls.acceptor();
        let router = router.clone();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, error = %e, "TLS handshake refused");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
            };
            let peer = match stream.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                Some(cert) => Peer::Verified {
                    identity: Identity::from_cert_der(cert.as_ref()),
                    serial: cert_serial_hex(cert.as_ref()).unwrap_or_default(),
                },
                None => Peer::Anonymous,
            };
            serve_connection(stream, remote, peer, router).await;
        });
    }
}

async fn serve_connection<S>(stream: S, remote: SocketAddr, peer: Peer, router: Router)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(peer.clone());
        req.extensions_mut().insert(axum::extract::ConnectInfo(remote));
        let router = router.clone();
        async move { Ok::<_, Infallible>(router.oneshot(req.map(Body::new)).await.unwrap_or_else(|e| match e {})) }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // Bound what a connection can hold before anything is authenticated: headers must
    // arrive promptly, and one connection multiplexes a bounded number of streams.
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    builder.http2().timer(TokioTimer::new()).max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    if let Err(e) = builder.serve_connection(TokioIo::new(stream), service).await {
        tracing::debug!(%remote, error = %e, "connection ended with an error");
    }
}
