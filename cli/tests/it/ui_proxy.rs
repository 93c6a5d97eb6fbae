//! `drover ui`'s proxy as a process, in front of a fake coordinator over real mutual TLS 1.3
//! that records every request line it is sent: a dashboard request whose path the URL parser
//! would take out of `/v1` (a `\`, a tab, a line feed, their percent-encodings, encoded dots,
//! and mixes of them) is refused, and the fake is never asked for anything but the `/v1`
//! paths of the requests that mean themselves.
//!
//! The attacks go over a raw socket, byte for byte: an HTTP client would normalise the very
//! paths under test before sending them.

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use common::Scratch;
use common::mtls::{self, Pki};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The proxy process, killed when the test ends however it ends.
struct Proxy {
    child: Child,
    /// `127.0.0.1:PORT`, the address it listens on.
    addr: String,
    /// The session token it printed.
    token: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `drover ui` on a free loopback port in front of `coordinator`, with the operator
/// credentials [`Pki::write_operator`] wrote into `sc`; waits (bounded) for its URL.
fn start_proxy(sc: &Scratch, coordinator: &str) -> Proxy {
    let mut command = Command::new(env!("CARGO_BIN_EXE_drover"));
    for var in common::DROVER_ENV {
        command.env_remove(var);
    }
    let mut child = command
        .args(["ui", "--listen", "127.0.0.1:0"])
        .args(mtls::operator_flags(coordinator))
        .current_dir(sc.path())
        .env("XDG_CONFIG_HOME", sc.join(".config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("drover ui starts");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    // Read on a thread of its own so the wait for the URL is bounded; it then drains the rest,
    // so the proxy never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(rest) = line.trim().strip_prefix("http://") {
                let _ = tx.send(rest.to_owned());
            }
        }
    });
    let printed = match rx.recv_timeout(common::DEADLINE) {
        Ok(printed) => printed,
        Err(_) => {
            let _ = child.kill();
            panic!("drover ui printed no URL within {:?}", common::DEADLINE);
        }
    };
    let (addr, token) = printed.split_once("/#token=").expect("URL of the form http://ADDR/#token=T");
    Proxy { child, addr: addr.to_owned(), token: token.to_owned() }
}

/// Sends `GET /api/<path>` (raw bytes, as given) with the session's token and `Host`, and
/// returns the status the proxy answered (0 when it closed without an answer).
async fn get_raw(proxy: &Proxy, path: &[u8]) -> u16 {
    let mut tcp = tokio::net::TcpStream::connect(&proxy.addr).await.expect("connect to the proxy");
    let mut request = b"GET /api/".to_vec();
    request.extend_from_slice(path);
    request.extend_from_slice(
        format!(" HTTP/1.1\r\nHost: {}\r\nX-Drover-Token: {}\r\nConnection: close\r\n\r\n", proxy.addr, proxy.token).as_bytes(),
    );
    tcp.write_all(&request).await.expect("send");
    let mut answer = Vec::new();
    // A reset after a refusal counts as an answer: the status line, if any, was read first.
    let _ = tokio::time::timeout(common::DEADLINE, tcp.read_to_end(&mut answer)).await.expect("the proxy answers in time");
    let head = String::from_utf8_lossy(&answer);
    head.strip_prefix("HTTP/1.1 ").and_then(|rest| rest.get(..3)).and_then(|code| code.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backslash_or_control_character_cannot_take_the_proxy_out_of_v1() {
    let sc = Scratch::new();
    let pki = Pki::new();
    pki.write_operator(&sc);
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = Arc::clone(&asked);
    let addr = mtls::serve(&pki, move |head, _body| {
        log.lock().expect("lock").push(head.lines().next().unwrap_or_default().to_owned());
        (200, br#"{"ok":true}"#.to_vec())
    })
    .await;
    let proxy = start_proxy(&sc, &format!("https://{addr}"));

    // What the proxy forwards at all: the fake sees it as /v1/…, so the log below is proof.
    assert_eq!(get_raw(&proxy, b"whoami").await, 200);

    let attacks: &[&[u8]] = &[
        // The reported one: a percent-encoded backslash that the parser would read as `/`.
        b"..%5cmetrics",
        b"..%5C..%5Cmetrics",
        b"hosts/..%5c..%5cmetrics",
        b"%5c..%5cmetrics",
        // Raw backslashes, tabs and line feeds (the HTTP layer or the proxy refuses them).
        b"..\\metrics",
        b"hosts\\..\\..\\metrics",
        b".\t./metrics",
        b"..\t/metrics",
        b".\n./metrics",
        // Their percent-encodings: dropped by a decoder, then by the parser.
        b".%09./metrics",
        b"%2e%09%2e/metrics",
        b".%0a./metrics",
        b".%0d./metrics",
        // Encoded dots and slashes.
        b"%2e%2e/metrics",
        b"%2E%2E/metrics",
        b".%2e/metrics",
        b"hosts/%2e%2e/%2e%2e/metrics",
        b"..%2fmetrics",
        b"%2e%2e%2fmetrics",
        // Mixes.
        b"%2e%2e%5cmetrics",
        b".%2e%5c%2e%2e%5cmetrics",
        b"%2e%09%2e%5cmetrics",
        b"hosts/.%0a.%5c..%2fmetrics",
        b"..\\%2e%2e/metrics",
        // Plain ones, for completeness: dot segments and an empty segment.
        b"../metrics",
        b"hosts/../../metrics",
        b"/metrics",
        b"hosts//x",
    ];
    for attack in attacks {
        let status = get_raw(&proxy, attack).await;
        assert!(status == 0 || (400..500).contains(&status), "{:?} was answered {status}, not refused", String::from_utf8_lossy(attack));
    }

    // A legitimate path with an encoded byte still goes through, exactly as asked.
    assert_eq!(get_raw(&proxy, b"rollouts/gpu%40c0ffee/status").await, 200);
    let seen = asked.lock().expect("lock").clone();
    // Complete: each answer above came after the upstream call it needed, if any.
    assert_eq!(
        seen,
        ["GET /v1/whoami HTTP/1.1", "GET /v1/rollouts/gpu%40c0ffee/status HTTP/1.1"],
        "only /v1 paths reached the coordinator"
    );
}
