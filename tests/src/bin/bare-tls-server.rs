//! The baseline the coordinator's HTTP benchmark is measured against: hyper over
//! tokio-rustls with the coordinator's own TLS configuration (TLS 1.3, the same CA, client
//! certificates verified when presented), answering every request with fixed bytes and doing
//! nothing else. Whatever the coordinator costs beyond this is its own work.
//!
//! `bare-tls-server --state-dir DIR --body FILE` prints `listening on ADDR`.

#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::sync::Arc;

use drover_engine::state_dir::StateDir;
use drover_engine::tls::{TlsMaterial, server_config};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};

fn arg(name: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| {
        eprintln!("usage: bare-tls-server --state-dir DIR --body FILE");
        std::process::exit(64)
    })
}

fn main() {
    let state = StateDir::open(std::path::Path::new(&arg("--state-dir"))).unwrap_or_else(|e| {
        eprintln!("bare-tls-server: {e}");
        std::process::exit(66)
    });
    let body = Bytes::from(std::fs::read(arg("--body")).unwrap_or_else(|e| {
        eprintln!("bare-tls-server: {e}");
        std::process::exit(66)
    }));
    let material =
        TlsMaterial::from_pem(state.ca().cert_pem().as_bytes(), state.server_cert_pem().as_bytes(), state.server_key_pem().as_bytes())
            .unwrap_or_else(|e| {
                eprintln!("bare-tls-server: {e}");
                std::process::exit(65)
            });
    let config = Arc::new(server_config(&material, None).unwrap_or_else(|e| {
        eprintln!("bare-tls-server: {e}");
        std::process::exit(65)
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| {
        eprintln!("bare-tls-server: {e}");
        std::process::exit(70)
    });
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| {
            eprintln!("bare-tls-server: {e}");
            std::process::exit(70)
        });
        println!("listening on {}", listener.local_addr().map(|a| a.to_string()).unwrap_or_default());
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let (acceptor, body) = (acceptor.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(move |_req| {
                    let body = body.clone();
                    async move {
                        let mut resp = hyper::Response::new(Full::new(body));
                        resp.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(tls), service).await;
            });
        }
    });
}
