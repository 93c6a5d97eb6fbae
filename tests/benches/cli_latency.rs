//! What an operator waits for a CLI read: the real `drover get hosts` run against a real
//! `drover-coordinator serve`, whole process, over and over. The baseline is the same
//! coordinator build with `[connections] tcp_nodelay = false` (the sockets without `TCP_NODELAY`),
//! measured in the same run, calls alternating between the two: with Nagle's
//! algorithm on the accepted socket, a response written in more than one piece waits for the
//! client's delayed ACK, about 40 ms.
//!
//! Run: `cargo bench -p drover-tests --bench cli_latency` (options after `--`: `--calls N`
//! (100 per coordinator), `--hosts H` (50)).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use drover_tests::procs::{Proc, SitePaths, init_site};
use drover_tests::workspace_binary;

/// One coordinator site and how to call it.
struct Site {
    name: &'static str,
    paths: SitePaths,
    server: Proc,
}

impl Site {
    fn start(dir: &Path, name: &'static str, nodelay: bool) -> Site {
        let paths = init_site(dir);
        paths.write_config("127.0.0.1:0", "https://127.0.0.1:1", &format!("[connections]\ntcp_nodelay = {nodelay}\n"));
        let server = paths.serve();
        Site { name, paths, server }
    }

    fn drover(&self, args: &[&str]) -> Command {
        let ops = &self.paths.ops;
        let mut cmd = Command::new(workspace_binary("drover"));
        cmd.args(args)
            .env("DROVER_COORDINATOR", &self.server.url)
            .env("DROVER_CERT", ops.join("alice.crt"))
            .env("DROVER_KEY", ops.join("alice.key"))
            .env("DROVER_CA", ops.join("ca.crt"));
        cmd
    }

    /// Runs `drover ARGS` to the end; returns its wall time.
    fn time(&self, args: &[&str]) -> Duration {
        let started = Instant::now();
        let out = self.drover(args).output().expect("drover runs");
        let took = started.elapsed();
        assert!(out.status.success(), "drover {args:?} against {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        took
    }
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (calls, hosts) = (arg(&args, "--calls", 100), arg(&args, "--hosts", 50));
    let dir = tempfile::tempdir().expect("tempdir");
    let sites =
        [Site::start(&dir.path().join("nodelay"), "TCP_NODELAY", true), Site::start(&dir.path().join("nagle"), "Nagle (baseline)", false)];
    for site in &sites {
        std::fs::write(site.paths.dir.join("trust.json"), &site.paths.trust).expect("trust");
        let trust = site.paths.dir.join("trust.json");
        for i in 0..hosts {
            let name = format!("gpu-{i:03}");
            let out = site.drover(&["enroll", &name, "--trust", trust.to_str().expect("utf8")]).output().expect("enroll");
            assert!(out.status.success(), "enroll {name}: {}", String::from_utf8_lossy(&out.stderr));
        }
        // One call each to warm the page cache and the binary.
        site.time(&["get", "hosts"]);
    }
    let mut times = [Vec::with_capacity(calls), Vec::with_capacity(calls)];
    for _ in 0..calls {
        for (i, site) in sites.iter().enumerate() {
            times[i].push(site.time(&["get", "hosts"]));
        }
    }
    println!("drover get hosts ({hosts} hosts), {calls} calls against each coordinator, alternating:");
    println!("{:<18} {:>8} {:>8} {:>8} {:>14}", "sockets", "p50 ms", "p90 ms", "max ms", "calls > 30 ms");
    let mut medians = Vec::new();
    for (site, t) in sites.iter().zip(times.iter_mut()) {
        t.sort();
        let slow = t.iter().filter(|d| d.as_millis() > 30).count();
        println!(
            "{:<18} {:>8.1} {:>8.1} {:>8.1} {:>13.0}%",
            site.name,
            ms(percentile(t, 0.5)),
            ms(percentile(t, 0.9)),
            ms(*t.last().expect("calls")),
            100.0 * slow as f64 / t.len() as f64
        );
        medians.push(percentile(t, 0.5));
    }
    println!("median ratio TCP_NODELAY / Nagle: {:.2}", medians[0].as_secs_f64() / medians[1].as_secs_f64());
}
