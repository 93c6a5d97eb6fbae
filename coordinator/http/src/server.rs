//! The one listener: TCP accept, TLS 1.3 handshake, then HTTP/1.1 or HTTP/2 (by ALPN) into
//! the router, with the peer's certificate identity attached to every request of the
//! connection. HTTP/1.1 is the coordinator's own ([`crate::http1`], preferred in ALPN: it
//! holds no buffers while a long-poll waits), or hyper's where `connections.http1 = "hyper"`
//! (kept to measure the one against the other); HTTP/2 is hyper's, for clients that ask only
//! for it.
//!
//! The identity is computed once per connection from the certificate rustls verified; no
//! header or body can change it. What a connection may hold before it authenticates, and for
//! how long, is [`crate::conn_limits`]: the accept loop and handshakes wait at their caps (an
//! agent is never refused for being one too many), connections whose handshake ended without
//! a certificate are capped in all and per source (the oldest idle one closed to make room),
//! and the handshake, the first request and idling have deadlines — on HTTP/2 too, where
//! hyper has no idle deadline and one is watched here. Behind a load balancer the client's
//! address comes from its PROXY protocol v2 header ([`crate::proxy_protocol`]).

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

use drover_pki::Peer;
use drover_pki::identity::{Identity, cert_serial_hex};
use drover_pki::tls::TlsState;

use crate::config::Http1Stack;
use crate::conn_limits::{AnonConn, ConnLimits, Deadline};

/// Concurrent streams one HTTP/2 connection may open (an agent needs one or two).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16;
/// Concurrent streams of an HTTP/2 connection without a client certificate (enrollment and
/// bootstrap need one at a time).
pub const MAX_STREAMS_UNAUTHENTICATED: u32 = 2;
/// After an idle HTTP/2 connection is told to go away (GOAWAY), how long it has to close
/// before it is dropped.
pub const H2_CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long an authenticated connection may idle between requests (an agent's long-poll
/// re-arms well inside it).
pub const AUTHENTICATED_IDLE: Duration = crate::http1::IDLE_TIMEOUT;

/// How long a connection may wait for a request: the first after the handshake, then between
/// requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// Before the first request.
    pub first: Duration,
    /// Between requests.
    pub idle: Duration,
}

/// Serves `router` on `listener` until the task is dropped, within `limits`, HTTP/1.1 with
/// the `http1` stack.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<TlsState>,
    router: Router,
    limits: Arc<ConnLimits>,
    http1: Http1Stack,
) -> std::io::Result<()> {
    loop {
        // At the cap the loop waits here and the kernel queues new connections: nothing is
        // refused for being one too many.
        let open = limits.room().await;
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
        // Every response is written in more than one piece (head, body, TLS records): with
        // Nagle's algorithm the later ones wait for the client's delayed ACK, ~40 ms a call.
        if limits.tcp_nodelay() {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY");
            }
        }
        let acceptor = tls.acceptor();
        let router = router.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _open = open;
            // One deadline for the PROXY header, waiting for a handshake slot and the handshake.
            let deadline = tokio::time::Instant::now() + limits.handshake_timeout();
            let Some((tcp, remote)) = client_of(tcp, remote, &limits, deadline).await else { return };
            let Some((stream, peer)) = handshake(acceptor, tcp, remote, &limits, deadline).await else { return };
            let (slot, waits) = match &peer {
                Peer::Verified { .. } => (None, Waits { first: limits.first_request_timeout(), idle: AUTHENTICATED_IDLE }),
                // Only now does the connection count against the anonymous caps: it can no
                // longer present a certificate.
                Peer::Anonymous => match limits.anonymous(remote.ip()) {
                    Ok(slot) => (Some(slot), Waits { first: limits.first_request_timeout(), idle: limits.unauthenticated_idle() }),
                    Err(_) => return,
                },
            };
            let anon = slot.as_ref().map(|s| s.conn().clone());
            // Set at the handshake from both sides' lists: h2 only when the client offered
            // nothing else. hyper's connection state is boxed: every connection's task is as
            // large as its largest state, and most connections are HTTP/1.1.
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                Box::pin(serve_hyper(Hyper::Http2, stream, remote, peer, router, waits, limits.clone(), anon)).await;
            } else if http1 == Http1Stack::Hyper {
                Box::pin(serve_hyper(Hyper::Http1, stream, remote, peer, router, waits, limits.clone(), anon)).await;
            } else {
                crate::http1::serve_connection(stream, remote, peer, router, waits, limits.clone(), anon).await;
            }
            drop(slot);
        });
    }
}

/// The client behind `tcp`: from a configured load balancer, the address its PROXY v2 header
/// names; from anywhere else, the peer itself, refused if it sends a PROXY header
/// ([`crate::proxy_protocol`]). None when the connection is closed.
async fn client_of(
    mut tcp: TcpStream,
    remote: SocketAddr,
    limits: &ConnLimits,
    deadline: tokio::time::Instant,
) -> Option<(TcpStream, SocketAddr)> {
    use crate::proxy_protocol::{is_balancer, read_v2, refuse_unexpected_header};
    let from_balancer = is_balancer(limits.balancers(), remote.ip());
    let read = async {
        if from_balancer {
            read_v2(&mut tcp, remote.ip()).await.map(|client| client.unwrap_or(remote))
        } else {
            refuse_unexpected_header(&tcp, remote.ip()).await.map(|()| remote)
        }
    };
    match tokio::time::timeout_at(deadline, read).await {
        Ok(Ok(client)) => Some((tcp, client)),
        Ok(Err(e)) => {
            limits.proxy_refused();
            tracing::warn!(%remote, error = %e, "connection refused for its PROXY protocol header");
            None
        }
        Err(_) => {
            limits.timed_out(Deadline::Handshake);
            tracing::debug!(%remote, "no PROXY header or TLS hello before the handshake deadline");
            None
        }
    }
}

/// The TLS handshake, after waiting for one of its source's handshake slots and one of all,
/// all by `deadline`; and the identity of the certificate it verified.
async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    remote: SocketAddr,
    limits: &Arc<ConnLimits>,
    deadline: tokio::time::Instant,
) -> Option<(TlsStream<TcpStream>, Peer)> {
    let shaken = async {
        let _slot = limits.handshake_slot(remote.ip()).await;
        acceptor.accept(tcp).await
    };
    let stream = match tokio::time::timeout_at(deadline, shaken).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%remote, error = %e, "TLS handshake refused");
            return None;
        }
        Err(_) => {
            limits.timed_out(Deadline::Handshake);
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

/// Requests in flight on an HTTP/2 connection and when the last one ended: what its idle
/// deadline is measured from.
#[derive(Default)]
struct Activity {
    in_flight: std::sync::atomic::AtomicUsize,
    served: std::sync::atomic::AtomicBool,
    last: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Activity {
    /// How long the connection may stay as it is now; `None` while a request runs.
    fn deadline(&self, started: tokio::time::Instant, waits: Waits) -> Option<tokio::time::Instant> {
        use std::sync::atomic::Ordering;
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        Some(match last {
            Some(t) if self.served.load(Ordering::Acquire) => t + waits.idle,
            _ => started + waits.first,
        })
    }
}

/// Marks a request in flight until dropped (also when the client resets the stream).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(a: &Arc<Activity>) -> InFlight {
        a.in_flight.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        InFlight(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        *self.0.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokio::time::Instant::now());
        self.0.served.store(true, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Which of hyper's connection types serves a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hyper {
    Http1,
    Http2,
}

/// hyper's HTTP/1.1 server, tuned as far as its builder allows for a fleet of long-polls:
/// the same head and header-count bounds and head deadline as [`crate::http1`], a read
/// buffer capped at the head bound, vectored writes (no flattening buffer), half-closed
/// clients treated as gone (their long-polls dropped).
fn hyper_http1() -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(crate::http1::HEADER_READ_TIMEOUT)
        .keep_alive(true)
        .half_close(false)
        .writev(true)
        .max_headers(crate::http1::MAX_HEADERS)
        // hyper's floor is 8 KiB; the read buffer grows to this only for a large head.
        .max_buf_size(crate::http1::MAX_HEAD_BYTES);
    builder
}

/// One connection served by hyper, with the first-request and idle deadlines watched here:
/// hyper has no idle deadline of its own.
#[allow(clippy::too_many_arguments)]
async fn serve_hyper<S>(
    which: Hyper,
    stream: S,
    remote: SocketAddr,
    peer: Peer,
    router: Router,
    waits: Waits,
    limits: Arc<ConnLimits>,
    anon: Option<Arc<AnonConn>>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let streams = if matches!(peer, Peer::Anonymous) { MAX_STREAMS_UNAUTHENTICATED } else { MAX_STREAMS_PER_CONNECTION };
    let activity = Arc::new(Activity::default());
    let seen = activity.clone();
    let (service_limits, service_anon) = (limits.clone(), anon.clone());
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(peer.clone());
        req.extensions_mut().insert(axum::extract::ConnectInfo(remote));
        let router = router.clone();
        let guard = InFlight::new(&seen);
        let (limits, anon) = (service_limits.clone(), service_anon.clone());
        async move {
            let _guard = guard;
            let _busy = anon.as_ref().map(AnonConn::busy);
            // The same rules as [`crate::http1`]'s for a connection without a certificate:
            // rate-limited per source (answered late), bodies within the shared budget.
            let mut _budget = None;
            if anon.is_some() {
                if let Err(refusal) = limits.admit_anonymous(remote.ip()).await {
                    return Ok(refusal);
                }
                if !hyper::body::Body::is_end_stream(req.body()) {
                    match limits.anonymous_body(crate::body::MAX_ANONYMOUS_BODY_BYTES).await {
                        Some(p) => _budget = Some(p),
                        None => return Ok(crate::conn_limits::body_budget_full()),
                    }
                }
            }
            let head = req.method() == hyper::Method::HEAD;
            let mut answer = match crate::body::read_whole_body(req.map(Body::new), limits.body_limit()).await {
                Ok(req) => router.oneshot(req).await.unwrap_or_else(|e| match e {}),
                Err(refusal) => refusal,
            };
            if anon.is_some() {
                answer = limits.anonymous_answer(remote.ip(), head, answer).await;
            }
            Ok::<_, Infallible>(answer)
        }
    });
    let io = TokioIo::new(stream);
    match which {
        Hyper::Http2 => {
            // One connection multiplexes a bounded number of streams.
            let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new()).max_concurrent_streams(streams);
            let conn = builder.serve_connection(io, service);
            tokio::pin!(conn);
            watch_idle(conn, |c| c.graceful_shutdown(), &activity, remote, waits, &limits, anon.as_deref()).await;
        }
        Hyper::Http1 => {
            let conn = hyper_http1().serve_connection(io, service);
            tokio::pin!(conn);
            watch_idle(conn, |c| c.graceful_shutdown(), &activity, remote, waits, &limits, anon.as_deref()).await;
        }
    }
}

/// Drives `conn` to its end. A connection with no request in flight past its wait is shut
/// down gracefully (HTTP/2: GOAWAY), then dropped if it does not close within the grace; so
/// is an anonymous one the caps evicted (at once: it was idle when chosen).
async fn watch_idle<C>(
    mut conn: std::pin::Pin<&mut C>,
    shutdown: fn(std::pin::Pin<&mut C>),
    activity: &Activity,
    remote: SocketAddr,
    waits: Waits,
    limits: &ConnLimits,
    anon: Option<&AnonConn>,
) where
    C: std::future::Future<Output = Result<(), hyper::Error>>,
{
    let started = tokio::time::Instant::now();
    let mut closing: Option<tokio::time::Instant> = None;
    let evicted = async {
        match anon {
            Some(a) => a.evicted().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(evicted);
    loop {
        let wake = match closing {
            Some(t) => t,
            None => activity.deadline(started, waits).unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1)),
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%remote, error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut evicted, if closing.is_none() => {
                shutdown(conn.as_mut());
                closing = Some(tokio::time::Instant::now() + H2_CLOSE_GRACE);
            }
            () = tokio::time::sleep_until(wake) => {
                if closing.is_some() {
                    return;
                }
                if activity.deadline(started, waits).is_some_and(|d| d <= tokio::time::Instant::now()) {
                    let first = !activity.served.load(std::sync::atomic::Ordering::Acquire);
                    limits.timed_out(if first { Deadline::FirstRequest } else { Deadline::Idle });
                    shutdown(conn.as_mut());
                    closing = Some(tokio::time::Instant::now() + H2_CLOSE_GRACE);
                }
            }
        }
    }
}
