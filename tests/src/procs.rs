//! Server and agent processes for benchmarks: start one and wait for its `listening on ADDR`
//! line, find a release binary beside the bench, and read a process's CPU time and memory
//! from `/proc`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed and reaped when dropped.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// `https://ADDR` from its `listening on ADDR` line (empty for processes that print none).
    pub url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` and waits (bounded) for its `listening on ADDR` line.
pub fn start_server(cmd: Command) -> Proc {
    start_server_with_stderr(cmd, Stdio::null())
}

/// Like [`start_server`], its standard error going to `stderr` (a log file, to show when a
/// test fails).
pub fn start_server_with_stderr(mut cmd: Command, stderr: Stdio) -> Proc {
    let child = cmd.stdout(Stdio::piped()).stderr(stderr).spawn().expect("server starts");
    // Owned by a `Proc` from here on, so every exit path (panics included) reaps it.
    let mut server = Proc { child, url: String::new() };
    let mut lines = BufReader::new(server.child.stdout.take().expect("stdout")).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.url.is_empty() {
        assert!(Instant::now() < deadline, "server never said where it listens");
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    server.url = format!("https://{}", addr.trim());
                }
            }
            _ => panic!("server exited before listening"),
        }
    }
    server
}

/// A binary of this build's profile (the directory above the running bench's `deps/`).
pub fn release_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    let path = exe.parent().and_then(Path::parent).map(|d| d.join(name)).expect("target dir");
    assert!(path.is_file(), "{} is missing: build it with `cargo build --release` first", path.display());
    path
}

/// Current and peak resident memory of `pid`, in KiB (`VmRSS`, `VmHWM`).
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds `pid` has used so far, user plus system; with `children`, also those of its
/// children it has reaped (a shell loop's `curl`s). From `/proc/PID/stat`, in clock ticks of
/// 1/100 s, the value every Linux build reports through `sysconf(_SC_CLK_TCK)`.
pub fn cpu_secs(pid: u32, children: bool) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime, stime, cutime, cstime are fields 14–17 of the line, 11–14 counted after the name.
    let own = ticks(11) + ticks(12);
    let reaped = if children { ticks(13) + ticks(14) } else { 0 };
    (own + reaped) as f64 / 100.0
}
