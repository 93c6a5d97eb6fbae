//! The coordinator's transport (the crate `drover-http`): the one listener, TLS 1.3 accept with
//! the peer's identity attached to every request, the coordinator's own HTTP/1.1 layer and
//! hyper's HTTP/2, and what a connection may hold before it authenticates. It is generic over
//! the router it serves (an axum `Router`) and that router's body policy
//! ([`body::BodyLimit`]): no route, handler or store is known here.
//!
//! - [`server`]: accept, PROXY protocol, handshake, ALPN into HTTP/1.1 or HTTP/2.
//! - [`http1`]: HTTP/1.1 with strict framing and no buffer held while a long-poll waits.
//! - [`body`]: request bodies read whole before the router, bounded and within deadlines; the
//!   one error shape the transport answers in.
//! - [`conn_limits`]: caps and deadlines for connections without a certificate, their
//!   request rate ([`rate_limit`]) and their answers' shared byte rate ([`paced_body`]).
//! - [`proxy_protocol`]: the client's address from a load balancer's PROXY v2 header.
//! - [`config`]: `[connections]` in `coordinator.toml`.

#![forbid(unsafe_code)]

pub mod body;
pub mod config;
pub mod conn_limits;
pub mod http1;
pub mod paced_body;
pub mod proxy_protocol;
pub mod rate_limit;
pub mod server;
