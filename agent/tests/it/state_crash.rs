//! The state directory survives `kill -9` at any point of a write: a child process (this test
//! binary re-executed in the writer role) rewrites every durable record in a loop and says
//! after each round how far it got; the parent kills it with SIGKILL after a random number of
//! rounds — so the kill lands somewhere inside a round's writes — and then checks, as a
//! restarting agent would, that every record reads back whole, holds a round at least as new
//! as the last one announced, and can be written again.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use drover_agent::records::{CachedRoot, Journal, JournalEntry, Records, Seen};
use drover_agent::state::StateDir;
use drover_proto::names::RolloutId;
use drover_proto::report::{TaskOutcome, TaskResult};
use drover_proto::time::Time;

const ROLE: &str = "DROVER_TEST_STATE_WRITER";

fn t(secs: u64) -> Time {
    Time::from_unix(1_800_000_000).expect("time").plus_secs(secs)
}

/// Writes every record for round `n`, each a little bigger than the last so a torn write
/// could not pass for a whole one.
fn write_round(state: &StateDir, n: u64) {
    state
        .put_seen(&Seen {
            highest_timestamp_version: n,
            latest_time: Some(t(n)),
            last_intent_id: Some(format!("intent-{n}")),
            acted_intent_id: None,
            highest_release: None,
        })
        .expect("seen");
    let mut journal = Journal::default();
    for i in 0..(n % 50) {
        let result = TaskResult {
            task_id: format!("task-{i}"),
            outcome: TaskOutcome::Refused,
            steps: Vec::new(),
            started_at: t(i),
            finished_at: t(i),
            evidence: None,
        };
        journal.tasks.insert(format!("task-{i}"), JournalEntry { expires_at: t(n + 3600), unacknowledged: Some(result), running: false });
    }
    journal.tasks.insert(format!("round-{n}"), JournalEntry { expires_at: t(n), unacknowledged: None, running: false });
    state.put_journal(&journal).expect("journal");
    let id = RolloutId::new("gpu", &format!("c{}", n % 4)).expect("id");
    let manifest = format!("{{\"round\":{n},\"pad\":\"{}\"}}", "x".repeat((n % 97) as usize * 100));
    state.put_root(&CachedRoot { rollout_id: id, sha256: format!("{n:064x}"), root: manifest, root_sig: "{}".into() }).expect("manifest");
}

/// The writer role: rounds forever, announcing each finished round on stdout.
fn writer(dir: &str) -> ! {
    let state = StateDir::open(std::path::Path::new(dir)).expect("open");
    let start = state.seen().expect("seen").highest_timestamp_version + 1;
    let mut out = std::io::stdout();
    for n in start.. {
        write_round(&state, n);
        use std::io::Write;
        writeln!(out, "{n}").expect("announce");
        out.flush().expect("flush");
    }
    unreachable!()
}

#[test]
fn state_survives_kill_9_at_random_points_during_writes() {
    if let Ok(dir) = std::env::var(ROLE) {
        writer(&dir);
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("state");
    let exe = std::env::current_exe().expect("exe");
    // This test's libtest name: its path less the crate's (the test binary holds every file).
    let this = concat!(module_path!(), "::state_survives_kill_9_at_random_points_during_writes");
    let this = this.split_once("::").map_or(this, |(_, path)| path);
    let mut last_announced = 0u64;
    for kill in 0..25 {
        let mut child = Command::new(&exe)
            .args(["--exact", this, "--nocapture", "--test-threads", "1"])
            .env(ROLE, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("writer starts");
        let rounds = 1 + rand::random::<u64>() % 40;
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut seen_rounds = 0;
        while seen_rounds < rounds {
            let Some(Ok(line)) = lines.next() else { panic!("writer died on its own (kill {kill})") };
            // The harness prints its own lines too; rounds are the bare numbers.
            if let Ok(n) = line.trim().parse::<u64>() {
                last_announced = n;
                seen_rounds += 1;
            }
        }
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL).expect("kill -9");
        child.wait().expect("reaped");

        // What a restarting agent does first: open and read every record.
        let state = StateDir::open(&dir).expect("reopen");
        let seen = state.seen().unwrap_or_else(|e| panic!("seen.json unreadable after kill {kill}: {e}"));
        assert!(
            seen.highest_timestamp_version >= last_announced,
            "kill {kill}: seen went back to {} < {last_announced}",
            seen.highest_timestamp_version
        );
        assert_eq!(seen.last_intent_id, Some(format!("intent-{}", seen.highest_timestamp_version)), "kill {kill}: a torn seen.json");
        let journal = state.journal().unwrap_or_else(|e| panic!("journal.json unreadable after kill {kill}: {e}"));
        assert!(journal.tasks.keys().any(|k| k.starts_with("round-")), "kill {kill}: journal lost its round marker");
        for c in 0..4 {
            let id = RolloutId::new("gpu", &format!("c{c}")).expect("id");
            if let Some(m) = state.cached_root(&id).unwrap_or_else(|e| panic!("manifest {id} unreadable after kill {kill}: {e}")) {
                let v: serde_json::Value = serde_json::from_str(&m.root).expect("root JSON whole");
                assert_eq!(
                    format!("{:064x}", v["round"].as_u64().expect("round")),
                    m.sha256,
                    "kill {kill}: manifest and sha256 torn apart"
                );
            }
        }
        // And it resumes: the next write lands.
        write_round(&state, seen.highest_timestamp_version + 1);
        last_announced = seen.highest_timestamp_version + 1;
    }
    // Temporary files of killed writers are swept when the directory is opened again.
    StateDir::open(&dir).expect("reopen");
    let temps: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(temps.is_empty(), "temporary files left behind: {temps:?}");
}
