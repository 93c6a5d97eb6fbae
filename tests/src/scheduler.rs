//! A fake tenant scheduler behind the coordinator's `jobs.scheduler_webhook_url`: plain HTTP on
//! loopback (the coordinator allows http only there), one thread, runtime-agnostic (the
//! in-process harness and a `drover-coordinator serve` fleet both use it).
//!
//! It speaks the webhook protocol of `force_release`: a `host.force_release` notice is
//! answered `200 {}`; a `host.allocations_query` gets the next scripted answer (status and
//! body), the last one repeating once the script runs out. Every request body is kept.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

/// One scripted answer to an allocations query.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Body (JSON or not).
    pub body: String,
}

impl Answer {
    /// `200 {"allocations": n}`.
    pub fn count(n: u64) -> Answer {
        Answer { status: 200, body: format!(r#"{{"allocations": {n}}}"#) }
    }

    /// `status` with a plain-text body.
    pub fn status(status: u16) -> Answer {
        Answer { status, body: "scheduler unavailable".into() }
    }

    /// `200` with `body` as it is.
    pub fn raw(body: &str) -> Answer {
        Answer { status: 200, body: body.into() }
    }
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Answer>,
    notice_status: u16,
    requests: Vec<Value>,
}

/// The running fake.
#[derive(Clone)]
pub struct FakeScheduler {
    /// Its webhook URL (`http://127.0.0.1:PORT/drover`).
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

impl FakeScheduler {
    /// Listens on a fresh loopback port; allocation queries get `script` in order (the last
    /// answer repeats; an empty script answers 0).
    pub fn start(script: Vec<Answer>) -> FakeScheduler {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake scheduler");
        let url = format!("http://127.0.0.1:{}/drover", listener.local_addr().expect("addr").port());
        let inner = Arc::new(Mutex::new(Inner { script: script.into(), notice_status: 200, requests: Vec::new() }));
        let state = inner.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                serve(stream, &state);
            }
        });
        FakeScheduler { url, inner }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces the remaining script.
    pub fn script(&self, script: Vec<Answer>) {
        self.lock().script = script.into();
    }

    /// The status the release notice is answered with (200 unless set).
    pub fn notice_status(&self, status: u16) {
        self.lock().notice_status = status;
    }

    /// Every request body received, oldest first (a body that is not JSON as a string).
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// The requests with `event` (`host.force_release`, `host.allocations_query`).
    pub fn events(&self, event: &str) -> Vec<Value> {
        self.requests().into_iter().filter(|r| r["event"] == event).collect()
    }
}

fn serve(stream: std::net::TcpStream, state: &Mutex<Inner>) {
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let mut reader = BufReader::new(stream);
    // One request per connection (answered with `connection: close`).
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length.min(1 << 20)];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let answer = {
        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
        s.requests.push(request.clone());
        if request["event"] == "host.allocations_query" {
            let a = if s.script.len() > 1 { s.script.pop_front() } else { s.script.front().cloned() };
            a.unwrap_or_else(|| Answer::count(0))
        } else {
            Answer { status: s.notice_status, body: "{}".into() }
        }
    };
    let head = format!(
        "HTTP/1.1 {} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        answer.status,
        answer.body.len()
    );
    let mut stream = reader.into_inner();
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(answer.body.as_bytes());
    let _ = stream.flush();
}
