//! Server and agent processes for benchmarks and tests: start one and wait for its `listening
//! on ADDR` line, set up a coordinator's site (state dir, admin credential, trust file,
//! config) with the real `drover-coordinator`, find a release binary beside the bench, and
//! read a process's CPU time and memory from `/proc`.

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

/// Runs `drover-coordinator ARGS` to the end; panics with its stderr unless it succeeds.
pub fn coordinator(args: &[&str]) {
    let out = Command::new(crate::workspace_binary("drover-coordinator")).args(args).output().expect("drover-coordinator runs");
    assert!(out.status.success(), "drover-coordinator {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A coordinator's site, all under one directory: what [`init_site`] made there.
pub struct SitePaths {
    /// The directory.
    pub dir: PathBuf,
    /// `DIR/state`, from `drover-coordinator init --san 127.0.0.1`.
    pub state: PathBuf,
    /// `DIR/ops`, from `operator-cert --role admin --name alice`: `ca.crt`, `alice.crt`,
    /// `alice.key`.
    pub ops: PathBuf,
    /// The CI trust file ([`crate::ci_trust_json`]), as written to `DIR/trust.json`.
    pub trust: Vec<u8>,
}

/// Sets up a coordinator's site in `dir`: a state dir from `init`, an admin credential from
/// `operator-cert` and the CI trust file (see [`SitePaths`]); the config is
/// [`SitePaths::write_config`]'s.
pub fn init_site(dir: &Path) -> SitePaths {
    let state = dir.join("state");
    let state_arg = state.to_str().expect("utf8");
    coordinator(&["init", "--state-dir", state_arg, "--san", "127.0.0.1"]);
    let ops = dir.join("ops");
    coordinator(&["operator-cert", "--state-dir", state_arg, "--role", "admin", "--name", "alice", "--out", ops.to_str().expect("utf8")]);
    let trust = crate::ci_trust_json();
    std::fs::write(dir.join("trust.json"), &trust).expect("trust");
    SitePaths { dir: dir.to_path_buf(), state, ops, trust }
}

impl SitePaths {
    /// Writes `DIR/coordinator.toml`: listening on `listen`, announcing `public_url`, the
    /// site's state dir and trust file, the workspace's agent binary, then `sections` (TOML
    /// tables: intervals and the like).
    pub fn write_config(&self, listen: &str, public_url: &str, sections: &str) {
        let config = format!(
            "listen = \"{listen}\"\nstate_dir = \"{}\"\npublic_urls = [\"{public_url}\"]\ntrust_file = \"{}\"\nagent_binary = \"{}\"\n\n{sections}",
            self.state.display(),
            self.dir.join("trust.json").display(),
            crate::workspace_binary("drover-agent").display()
        );
        std::fs::write(self.dir.join("coordinator.toml"), config).expect("config");
    }

    /// `serve --config DIR/coordinator.toml`, its log appended to `DIR/coordinator.log`.
    pub fn serve(&self) -> Proc {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("coordinator.log")).expect("log");
        let mut cmd = Command::new(crate::workspace_binary("drover-coordinator"));
        cmd.arg("serve").arg("--config").arg(self.dir.join("coordinator.toml"));
        start_server_with_stderr(cmd, Stdio::from(log))
    }
}

/// The last `lines` lines of a log file, for failure messages (empty when it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
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

/// A site from [`init_site`] in `dir` whose coordinator is configured to listen on a port free
/// now, the same one every time it is started (so agents find a restarted process where they
/// left the first), with `sections` appended to its configuration; and the admin endpoint.
pub fn fixed_port_site(dir: &Path, sections: &str) -> (SitePaths, crate::Endpoint) {
    use sha2::Digest as _;
    let paths = init_site(dir);
    // A port free now; the coordinator binds it with SO_REUSEADDR, every time.
    let port = crate::free_loopback_port();
    let url = format!("https://127.0.0.1:{port}");
    paths.write_config(&format!("127.0.0.1:{port}"), &url, sections);
    let endpoint = crate::Endpoint {
        url,
        ca: paths.ops.join("ca.crt"),
        admin: (paths.ops.join("alice.crt"), paths.ops.join("alice.key")),
        trust_sha256: hex::encode(sha2::Sha256::digest(&paths.trust)),
        tmp: paths.dir.clone(),
    };
    (paths, endpoint)
}

/// The processes whose parent is `pid` (from every `/proc/*/stat`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // The parent is the second field after the command name (which may hold spaces).
            let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            rest.split_whitespace().nth(1).and_then(|v| v.parse::<u32>().ok()) == Some(pid)
        })
        .collect()
}

/// CPU seconds of `pid` and its children, living and reaped: what a server made of a parent
/// and the worker processes it forks (PostgreSQL's postmaster and its backends) has used so
/// far. A child that exited and was reaped is in the parent's reaped share; a living child
/// counts with its own (and what it reaped).
pub fn tree_cpu_secs(pid: u32) -> f64 {
    cpu_secs(pid, true) + children_of(pid).into_iter().map(|c| cpu_secs(c, true)).sum::<f64>()
}

/// Proportional resident memory (`Pss` of `/proc/PID/smaps_rollup`) of `pid` and its living
/// children, in KiB: memory they share (PostgreSQL's shared buffers) counted once in all,
/// where summing their RSS would count it in every process that touched it. Falls back to
/// `VmRSS` for a process whose `smaps_rollup` cannot be read.
pub fn tree_pss_kib(pid: u32) -> u64 {
    let pss = |p: u32| {
        std::fs::read_to_string(format!("/proc/{p}/smaps_rollup"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| l.strip_prefix("Pss:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok())
            })
            .unwrap_or_else(|| rss_kib(p).0)
    };
    pss(pid) + children_of(pid).into_iter().map(pss).sum::<u64>()
}

/// The postmaster's process id of the PostgreSQL cluster in `data_dir` (the first line of its
/// `postmaster.pid`), while it runs.
pub fn postmaster_pid(data_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_tree_is_found_through_the_parent_field() {
        // `cat` on a pipe lives until its input closes: a child that is there to be found.
        let mut child = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().expect("cat starts");
        let me = std::process::id();
        assert!(children_of(me).contains(&child.id()), "cat is a child of this test");
        // Read in this order: CPU time only grows, so the tree read after it is never less
        // (the other order raced this process's other threads).
        let own = cpu_secs(me, false);
        assert!(tree_cpu_secs(me) >= own);
        assert!(tree_pss_kib(me) > 0);
        drop(child.stdin.take());
        child.wait().expect("cat exits");
        assert!(!children_of(me).contains(&child.id()));
        assert_eq!(postmaster_pid(Path::new("/nonexistent")), None);
    }
}
