//! PROXY protocol version 2 in front of the TLS handshake, from the load balancers the
//! configuration names (`connections.proxy_protocol_from`), and only from them.
//!
//! Behind a TCP load balancer every connection comes from the balancer's address, so the
//! per-source caps and rate limits would see one source for the whole fleet and logs would
//! name the balancer. A balancer that speaks PROXY v2 (HAProxy `send-proxy-v2`, AWS NLB,
//! Envoy, nginx `proxy_protocol on`) puts the client's address in a binary header before the
//! client's first byte; the coordinator reads it and uses that address from then on.
//!
//! The header is trusted only from the configured addresses: a connection from anywhere else
//! that starts with a PROXY header (v2's signature or v1's `PROXY `) is refused, since
//! anyone could otherwise claim any address and slip past the per-source caps. A connection
//! from a configured balancer must carry one (v2 only: v1's text form is refused); its
//! `LOCAL` command (the balancer's own health checks) keeps the balancer's address. The
//! header is parsed by the `ppp` crate; this module only reads exactly its bytes off the
//! socket, so the TLS handshake starts at the client's first byte.

use std::net::{IpAddr, SocketAddr};

use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;

/// v2's 12-byte signature.
pub const SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The longest header accepted past its fixed 16 bytes (addresses plus TLVs). Balancers send
/// a few dozen bytes of TLVs at most; the field allows 64 KiB, which no client should make the
/// coordinator read before the handshake.
pub const MAX_ADDRESS_AND_TLV_BYTES: usize = 1024;

/// Why a connection's PROXY header was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A PROXY header from an address that is not a configured balancer.
    #[error("a PROXY protocol header from {from}, which is not in connections.proxy_protocol_from")]
    Untrusted {
        /// Where it came from.
        from: IpAddr,
    },
    /// A configured balancer's connection did not start with a v2 header.
    #[error("connection from load balancer {from} did not start with a PROXY protocol v2 header")]
    Missing {
        /// The balancer.
        from: IpAddr,
    },
    /// The header does not parse, or is longer than [`MAX_ADDRESS_AND_TLV_BYTES`].
    #[error("PROXY protocol v2 header from {from}: {reason}")]
    Malformed {
        /// The balancer.
        from: IpAddr,
        /// What is wrong.
        reason: String,
    },
    /// Reading the header failed.
    #[error("reading the PROXY protocol header: {source}")]
    Io {
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Whether `ip` is one of the configured balancers.
pub fn is_balancer(balancers: &[IpAddr], ip: IpAddr) -> bool {
    balancers.iter().any(|b| canonical(*b) == canonical(ip))
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (a dual-stack listener reports
/// IPv4 clients that way).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Refuses a connection from a non-balancer whose first bytes are a PROXY header. Peeks
/// only: what a TLS client sent stays in the socket for the handshake.
pub async fn refuse_unexpected_header(tcp: &TcpStream, from: IpAddr) -> Result<(), ProxyError> {
    let mut first = [0u8; 12];
    let n = tcp.peek(&mut first).await.map_err(|source| ProxyError::Io { source })?;
    let seen = &first[..n];
    if (n == SIGNATURE.len() && seen == SIGNATURE) || seen.starts_with(b"PROXY ") {
        return Err(ProxyError::Untrusted { from });
    }
    Ok(())
}

/// Reads a configured balancer's v2 header off `tcp` and answers the client's address
/// (`None` for `LOCAL`, or an address family without one: keep the balancer's).
pub async fn read_v2(tcp: &mut TcpStream, from: IpAddr) -> Result<Option<SocketAddr>, ProxyError> {
    let io = |source| ProxyError::Io { source };
    let mut fixed = [0u8; 16];
    let mut got = 0;
    // The signature is checked as it arrives, so a client that is not sending one (v1, or
    // TLS straight away) is refused without waiting for 16 bytes it may never send.
    while got < fixed.len() {
        let n = tcp.read(&mut fixed[got..]).await.map_err(io)?;
        if n == 0 {
            return Err(ProxyError::Missing { from });
        }
        got += n;
        let sig = got.min(SIGNATURE.len());
        if fixed[..sig] != SIGNATURE[..sig] {
            return Err(ProxyError::Missing { from });
        }
    }
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if len > MAX_ADDRESS_AND_TLV_BYTES {
        return Err(ProxyError::Malformed {
            from,
            reason: format!("{len} bytes of addresses and TLVs (at most {MAX_ADDRESS_AND_TLV_BYTES})"),
        });
    }
    let mut header = Vec::with_capacity(16 + len);
    header.extend_from_slice(&fixed);
    header.resize(16 + len, 0);
    tcp.read_exact(&mut header[16..]).await.map_err(io)?;
    client_address(&header).map_err(|reason| ProxyError::Malformed { from, reason })
}

/// The client's address in a whole v2 header.
pub fn client_address(header: &[u8]) -> Result<Option<SocketAddr>, String> {
    use ppp::v2::{Addresses, Command, Header};
    let parsed = Header::try_from(header).map_err(|e| e.to_string())?;
    if parsed.command == Command::Local {
        return Ok(None);
    }
    Ok(match parsed.addresses {
        Addresses::IPv4(a) => Some(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port)),
        Addresses::IPv6(a) => Some(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port)),
        Addresses::Unspecified => None,
        Addresses::Unix(_) => return Err("a Unix-socket address (the coordinator listens on TCP only)".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ppp::v2::{Builder, Command, Protocol, Version};

    fn header(command: Command, addresses: ppp::v2::Addresses) -> Vec<u8> {
        Builder::with_addresses(Version::Two | command, Protocol::Stream, addresses).build().expect("header")
    }

    #[test]
    fn a_proxy_header_names_the_client_and_local_keeps_the_balancer() {
        let v4 = header(Command::Proxy, ppp::v2::IPv4::new([192, 0, 2, 7], [192, 0, 2, 1], 40_000, 443).into());
        assert_eq!(client_address(&v4).expect("parses"), Some("192.0.2.7:40000".parse().expect("addr")));
        let local = header(Command::Local, ppp::v2::Addresses::Unspecified);
        assert_eq!(client_address(&local).expect("parses"), None);
        assert!(client_address(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n").is_err(), "v1 is not v2");
    }

    #[test]
    fn an_ipv4_mapped_balancer_address_is_the_same_balancer() {
        let lb: IpAddr = "10.1.0.5".parse().expect("ip");
        assert!(is_balancer(&[lb], "::ffff:10.1.0.5".parse().expect("ip")));
        assert!(!is_balancer(&[lb], "10.1.0.6".parse().expect("ip")));
    }
}
