//! Starting a fake service binary and learning where it listens: spawn it with stdout piped,
//! wait (bounded) for its first line, which must start with the given prefix (`listening on `,
//! `listening `), and keep draining the pipe afterwards so the process never blocks on a full
//! one. A process that prints something else, or nothing in time, is killed and reaped, and the
//! error names it (its stderr, inherited, says why).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::DevkitError;

fn failed(mut child: Child, what: &str, message: String) -> DevkitError {
    let _ = child.kill();
    let _ = child.wait();
    DevkitError::Process { what: what.to_owned(), message }
}

/// Spawns `cmd` (named `what` in errors) and returns it with the rest of its first stdout line
/// after `prefix` (e.g. the URL after `listening on `).
pub(crate) fn spawn_listening(cmd: &mut Command, what: &str, prefix: &str, timeout: Duration) -> Result<(Child, String), DevkitError> {
    let program = std::path::PathBuf::from(cmd.get_program());
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().map_err(crate::io_at(program))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(failed(child, what, "no stdout".into()));
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = tx.send(reader.read_line(&mut line).map(|_| line));
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let line = match rx.recv_timeout(timeout) {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => return Err(failed(child, what, format!("reading its stdout: {e}"))),
        Err(_) => return Err(failed(child, what, format!("no listening line within {} s", timeout.as_secs()))),
    };
    match line.trim().strip_prefix(prefix) {
        Some(rest) => Ok((child, rest.to_owned())),
        None => Err(failed(child, what, format!("unexpected first line {line:?} (its stderr says why)"))),
    }
}

/// Kills and reaps `child`, returning an error about it.
pub(crate) fn kill_with(child: Child, what: &str, message: String) -> DevkitError {
    failed(child, what, message)
}
