//! `drover dev`, the README's main command, run as a process the way a newcomer runs it:
//! it must bring up the coordinator and sandboxed agents, roll the demo release out, run a
//! soft reset, print the commands to poke at the fleet (which must work against it), serve
//! until Ctrl-C, and leave nothing behind.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use drover_tests::workspace_binary;

/// Stops the demo if the test fails half-way: SIGTERM first, so `drover dev` stops the
/// coordinator and agents it started (a SIGKILL would orphan them), then SIGKILL if it
/// has not exited within a bound.
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn drover(env: &[(String, String)], args: &[&str]) -> std::process::Output {
    Command::new(workspace_binary("drover"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env_remove("DROVER_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("drover runs")
}

#[test]
fn drover_dev_rolls_out_resets_a_host_serves_and_cleans_up() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut demo = Demo(
        Command::new(workspace_binary("drover"))
            .args(["dev", "--soak-secs", "1", "--next-soak-secs", "5"])
            .env("TMPDIR", tmp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("drover dev starts"),
    );
    let stderr = demo.0.stderr.take().expect("stderr");
    let banner = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let (tx, lines) = mpsc::channel();
    let stdout = demo.0.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut out = Vec::new();
    while out.last().is_none_or(|l: &String| l != "serving until Ctrl-C") {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => out.push(line),
            Err(_) => panic!("drover dev never got to serving:\n{}", out.join("\n")),
        }
    }
    let text = out.join("\n");
    for needle in [
        "coordinator listening on https://127.0.0.1:",
        "dev-01   enrolled via bootstrap.sh + curl",
        "(confined: ok)",
        "5 agents active",
        "every host switched to its new closure and passed node-check",
        "soft_reset of dev-05 completed",
        "cordon → drain → revoke_users → cleanup_storage → scrub_gpu → validate_clean → uncordon",
        "release 2 (demo0003) signed and published, left rolling",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    // Every host on the demo release's generation (or already on the second's), active,
    // schedulable again after the reset.
    for host in ["dev-01", "dev-02", "dev-03", "dev-04", "dev-05"] {
        let on_new = |l: &String| l.contains(&format!("{host}-g2")) || l.contains(&format!("{host}-g3"));
        let row = out.iter().find(|l| l.starts_with(host) && on_new(l)).unwrap_or_else(|| panic!("{host} row in:\n{text}"));
        assert!(row.contains(" active ") && row.contains(" yes "), "{row}");
    }

    // The printed commands work against the running demo.
    let env: Vec<(String, String)> = out
        .iter()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .flat_map(|l| l.split(' ').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    assert_eq!(env.len(), 5, "{text}");
    let hosts = drover(&env, &["get", "hosts", "-o", "json"]);
    assert!(hosts.status.success(), "{}", String::from_utf8_lossy(&hosts.stderr));
    let hosts: serde_json::Value = serde_json::from_slice(&hosts.stdout).expect("json");
    assert_eq!(hosts.as_array().map(Vec::len), Some(5), "{hosts}");
    let rollout = drover(&env, &["describe", "rollout", "training@demo0002"]);
    assert!(rollout.status.success(), "{}", String::from_utf8_lossy(&rollout.stderr));
    assert!(String::from_utf8_lossy(&rollout.stdout).contains("Converged"), "{}", String::from_utf8_lossy(&rollout.stdout));

    cheat_sheet_runs_against(&env);

    // Ctrl-C stops everything and removes the temporary state.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(demo.0.id() as i32), nix::sys::signal::Signal::SIGINT).expect("signal");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = demo.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "drover dev did not stop on Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let banner = banner.join().expect("stderr");
    assert!(banner.contains("NOT FOR PRODUCTION"), "{banner}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).expect("ls").filter_map(Result::ok).map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    let url = env.iter().find(|(k, _)| k == "DROVER_COORDINATOR").map(|(_, v)| v.trim_start_matches("https://").to_owned()).expect("url");
    assert!(std::net::TcpStream::connect(url).is_err(), "the coordinator still listens");
}

#[test]
fn drover_dev_refuses_a_dir_that_is_not_empty() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(tmp.path().join("precious"), "keep me").expect("write");
    let out = Command::new(workspace_binary("drover")).args(["dev", "--exit-when-done", "--dir"]).arg(tmp.path()).output().expect("runs");
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
    assert_eq!(std::fs::read_to_string(tmp.path().join("precious")).expect("kept"), "keep me");
    assert!(!Path::new(&tmp.path().join("hosts")).exists());
}

/// Splits a cheat-sheet line like a shell would for these simple commands: words, and
/// double-quoted strings; a `#` outside quotes starts a comment.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '#' if !quoted => break,
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// Every command of the README's operator cheat-sheet, run as written, in its order, against
/// the serving demo (`$DROVER_DEV_DIR` expanded as a shell would, `JOB_ID` the demo's soft
/// reset): each must succeed — halting and resuming the second release while it rolls,
/// watching it to the end, a soft reset and a maintenance request that pass, signing and
/// publishing another release from the kept fleet spec.
fn cheat_sheet_runs_against(env: &[(String, String)]) {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).expect("README");
    let section = readme.split("## Operator cheat-sheet").nth(1).expect("cheat-sheet section");
    let block = section.split("```sh").nth(1).and_then(|b| b.split("```").next()).expect("its sh block");
    let jobs = drover(env, &["get", "jobs", "-o", "json"]);
    let jobs: serde_json::Value = serde_json::from_slice(&jobs.stdout).expect("jobs json");
    let job_id = jobs[0]["jobId"].as_str().expect("job id").to_owned();
    let dev_dir = env.iter().find(|(k, _)| k == "DROVER_DEV_DIR").map(|(_, v)| v.clone()).expect("DROVER_DEV_DIR exported");
    let mut ran = Vec::new();
    for line in block.lines() {
        for command in line.split(';') {
            let mut w = words(command);
            if w.is_empty() {
                continue;
            }
            assert_eq!(w[0], "drover", "{command}");
            for word in &mut w {
                *word = word.replace("JOB_ID", &job_id).replace("$DROVER_DEV_DIR", &dev_dir);
            }
            let args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
            if args.contains(&"--follow") {
                continue; // exercised with a bounded wait in operator_cli.rs
            }
            let out = drover(env, &args);
            let why =
                format!("{command}: {}\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{why}");
            if args.starts_with(&["rollout", "status"]) {
                assert!(String::from_utf8_lossy(&out.stdout).contains("Halted"), "the halted rollout: {why}");
            }
            ran.push(args.join(" "));
        }
    }
    assert!(ran.len() >= 16, "only {} cheat-sheet commands found: {ran:?}", ran.len());
    for verb in ["rollout halt", "rollout resume", "release publish", "maintenance request"] {
        assert!(ran.iter().any(|c| c.starts_with(verb)), "the cheat-sheet lost `{verb}`: {ran:?}");
    }
    // The rollouts the last line published converged: the kept spec signs a working release.
    let rollouts = drover(env, &["get", "rollouts", "-o", "json"]);
    let rollouts: serde_json::Value = serde_json::from_slice(&rollouts.stdout).expect("rollouts json");
    let demo4: Vec<&str> = rollouts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["rolloutId"].as_str().is_some_and(|id| id.ends_with("@demo0004")))
        .filter_map(|r| r["state"].as_str())
        .collect();
    assert_eq!(demo4, vec!["Converged", "Converged"], "{rollouts}");
}

/// `drover dev --maas`: the banner prints the fake MAAS's URL and API key; the MAAS hosts are
/// onboarded through it (real agents booted from the rendered user data); an admin's release in
/// MAAS is caught as drift; the cheat-sheet's onboarding listing works against it; nothing is left
/// running at exit.
#[test]
fn drover_dev_maas_onboards_hosts_through_a_fake_maas_and_prints_its_key() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("demo");
    let out = Command::new(workspace_binary("drover"))
        .args(["dev", "--maas", "--maas-nodes", "2", "--agents", "1", "--exit-when-done", "--dir"])
        .arg(&dir)
        .env_remove("DROVER_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let line = |prefix: &str| stdout.lines().find_map(|l| l.trim().strip_prefix(prefix).map(|v| v.trim().to_owned()));
    let url = line("fake MAAS:").expect("the banner names the fake MAAS");
    let key = line("API key:").expect("the banner prints its API key");
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/MAAS"), "{url}");
    assert_eq!(key.split(':').count(), 3, "{key}");
    assert!(stdout.contains("maas-01, maas-02 onboarded through MAAS"), "{stdout}");
    // An admin's release in MAAS is caught by the reconciler: quarantined, not schedulable.
    let caught = stdout.lines().find(|l| l.contains("drift caught")).unwrap_or_else(|| panic!("no drift caught: {stdout}"));
    assert!(
        caught.contains("maas-02 released_outside_workflow (critical)") && caught.contains("host now quarantined, schedulable false"),
        "{caught}"
    );
    // The coordinator's store saw both enroll through their booted user data.
    let log = std::fs::read_to_string(dir.join("coordinator/coordinator.log")).unwrap_or_default();
    assert!(log.matches("host enrolled").count() >= 3, "one dev agent and two MAAS hosts enrolled");
    // Nothing keeps running once the demo exits: the fake MAAS's agents went with it.
    let addr = url.trim_start_matches("http://").trim_end_matches("/MAAS").to_owned();
    assert!(std::net::TcpStream::connect(addr).is_err(), "the fake MAAS still listens");
    let ps = Command::new("ps").args(["-eo", "args"]).output().expect("ps");
    let leftover: Vec<String> =
        String::from_utf8_lossy(&ps.stdout).lines().filter(|l| l.contains(dir.to_str().expect("utf8"))).map(str::to_owned).collect();
    assert!(leftover.is_empty(), "still running: {leftover:?}");
}

/// The direct children of `pid` (Linux `/proc/PID/task/*/children`).
fn children_of(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.filter_map(Result::ok).collect::<Vec<_>>()).unwrap_or_default();
    let mut kids: Vec<u32> = tasks
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| s.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect();
    kids.sort_unstable();
    kids.dedup();
    kids
}

/// The command line of `pid`, NUL-separated arguments joined with spaces.
fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline")).map(|b| String::from_utf8_lossy(&b).replace('\0', " ")).unwrap_or_default()
}

/// `drover dev` supervises what it started: the coordinator dying under the serving demo
/// stops it at once with a non-zero exit naming the coordinator, and leaves no process behind.
#[test]
fn drover_dev_stops_with_an_error_when_its_coordinator_dies() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("dev");
    let mut demo = Demo(
        Command::new(workspace_binary("drover"))
            .args(["dev", "--agents", "1", "--soak-secs", "1", "--dir"])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("drover dev starts"),
    );
    let stderr = demo.0.stderr.take().expect("stderr");
    let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let stdout = BufReader::new(demo.0.stdout.take().expect("stdout"));
    let mut out = Vec::new();
    for line in stdout.lines().map_while(Result::ok) {
        let serving = line == "serving until Ctrl-C";
        out.push(line);
        if serving {
            break;
        }
    }
    assert_eq!(out.last().map(String::as_str), Some("serving until Ctrl-C"), "drover dev never served:\n{}", out.join("\n"));

    let dev_pid = demo.0.id();
    let before = children_of(dev_pid);
    let coordinator = *before.iter().find(|p| cmdline(**p).contains("drover-coordinator serve")).expect("a coordinator child");
    let agents: Vec<u32> = before.iter().copied().filter(|p| cmdline(*p).contains("drover-agent")).collect();
    assert!(!agents.is_empty(), "no agent child among {before:?}");

    // An agent that dies is reaped by `drover dev` (its parent, still serving): no zombie.
    let agent = agents[0];
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent as i32), nix::sys::signal::Signal::SIGKILL).expect("kill agent");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{agent}")).exists() {
        assert!(Instant::now() < deadline, "the killed agent {agent} was never reaped (a zombie under the serving demo)");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(demo.0.try_wait().expect("wait").is_none(), "drover dev stopped when only an agent died");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(coordinator as i32), nix::sys::signal::Signal::SIGKILL).expect("kill");

    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = demo.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "drover dev still runs 20 s after its coordinator died");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(69), "{status}");
    let errors = errors.join().expect("stderr");
    assert!(errors.contains(&format!("the coordinator (drover-coordinator serve, pid {coordinator}) exited")), "{errors}");
    assert!(errors.contains(&format!("(drover-agent run, pid {agent}) exited")), "{errors}");
    let deadline = Instant::now() + Duration::from_secs(10);
    for pid in before {
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "child {pid} left behind: {}", cmdline(pid));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
