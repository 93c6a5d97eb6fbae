//! The one listener: TCP accept, TLS 1.3 handshake, then HTTP/1.1 or HTTP/2 (by ALPN) into
//! the router, with the peer's certificate identity attached to every request of the
//! connection. HTTP/1.1 is the coordinator's own ([`crate::http1`], preferred in ALPN: it
//! holds no buffers while a long-poll waits); HTTP/2 is hyper's, for clients that ask only
//! for it.
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
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tower::ServiceExt;

use crate::api::auth::Peer;
use crate::identity::{Identity, cert_serial_hex};
use crate::tls::TlsState;

/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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
            let Some((stream, peer)) = handshake(acceptor, tcp, remote).await else { return };
            // Set at the handshake from both sides' lists: h2 only when the client offered
            // nothing else. The HTTP/2 connection's state is boxed: every connection's task
            // is as large as its largest state, and most connections are HTTP/1.1.
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                Box::pin(serve_http2(stream, remote, peer, router)).await;
            } else {
                crate::http1::serve_connection(stream, remote, peer, router).await;
            }
        });
    }
}

/// The TLS handshake, bounded in time, and the identity of the certificate it verified.
async fn handshake(acceptor: TlsAcceptor, tcp: TcpStream, remote: SocketAddr) -> Option<(TlsStream<TcpStream>, Peer)> {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%remote, error = %e, "TLS handshake refused");
            return None;
        }
        Err(_) => {
            tracing::debug!(%remote, "TLS handshake timed out");
            return None;
        }
    };
    let peer = match stream.get_ref().1.peer_certificates().and_then(|c| c.first()) {
        Some(cert) => {
            Peer::Verified { identity: Identity::from_cert_der(cert.as_ref()), serial: cert_serial_hex(cert.as_ref()).unwrap_or_default() }
        }
        None => Peer::Anonymous,
    };
    Some((stream, peer))
}

async fn serve_http2<S>(stream: S, remote: SocketAddr, peer: Peer, router: Router)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(peer.clone());
        req.extensions_mut().insert(axum::extract::ConnectInfo(remote));
        let router = router.clone();
        async move {
            let answer = match crate::api::read_whole_body(req.map(Body::new)).await {
                Ok(req) => router.oneshot(req).await.unwrap_or_else(|e| match e {}),
                Err(refusal) => refusal,
            };
            Ok::<_, Infallible>(answer)
        }
    });
    // One connection multiplexes a bounded number of streams.
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder.timer(TokioTimer::new()).max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    if let Err(e) = builder.serve_connection(TokioIo::new(stream), service).await {
        tracing::debug!(%remote, error = %e, "connection ended with an error");
    }
}
