//! Capturing the coordinator's tracing output in a test, to search it for secrets.
//!
//! The server runs on the runtime's worker threads, which a thread-local `set_default` would
//! not reach, so the capture is the process-wide subscriber; it can be set once per process,
//! hence [`global`]: every test of a process shares one buffer (under `cargo test` a test binary's
//! every test, and a secret-search then covers every test's coordinator, which only makes it
//! stricter; under nextest each test is a process of its own).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// A `MakeWriter` appending every log line to a shared buffer.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Installs (on first use) the process-wide subscriber at TRACE — the most the coordinator
/// could ever write, so nothing hides below the level — and returns its buffer.
pub fn global() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Captured::default();
        tracing_subscriber::fmt().with_writer(logs.clone()).with_max_level(tracing::Level::TRACE).with_ansi(false).init();
        logs
    })
}
