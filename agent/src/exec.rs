//! External commands behind one narrow trait ([`CommandRunner`]), so every module that runs a
//! tool (`nix-store`, `nix-env`, `switch-to-configuration`, `nvidia-smi`, a probe's command)
//! runs the same code path in production and in tests — tests point it at fake tools that
//! print the real tools' formats and fail the way they fail.
//!
//! [`SystemRunner`] is the real one: no shell (arguments are passed as they are, so a store
//! path or a GPU id can never be reinterpreted), a bounded wait, and a kill of the whole
//! process on timeout. Output is captured whole but bounded, so a tool that floods cannot
//! grow the agent without limit.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Most bytes kept of each of stdout and stderr; the rest is read and dropped.
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The program: a bare name is looked up on `PATH`, a path is run as it is.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables (the agent's own environment is inherited).
    pub env: Vec<(String, String)>,
    /// How long it may run before it is killed.
    pub timeout: Duration,
}

impl CommandSpec {
    /// `program args…` with a timeout and no extra environment.
    pub fn new(program: impl Into<PathBuf>, args: &[&str], timeout: Duration) -> Self {
        CommandSpec { program: program.into(), args: args.iter().map(|a| (*a).to_owned()).collect(), env: Vec::new(), timeout }
    }

    /// The command line, for logs and error messages.
    pub fn display(&self) -> String {
        std::iter::once(self.program.display().to_string()).chain(self.args.iter().cloned()).collect::<Vec<_>>().join(" ")
    }
}

/// What a finished command left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// Its exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// stdout (lossy UTF-8, at most [`MAX_OUTPUT_BYTES`]).
    pub stdout: String,
    /// stderr (lossy UTF-8, at most [`MAX_OUTPUT_BYTES`]).
    pub stderr: String,
}

impl CommandOutput {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Why a command did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The program does not exist (or is not executable).
    #[error("{program}: not found")]
    NotFound {
        /// The program.
        program: String,
    },
    /// It could not be started.
    #[error("{program}: cannot start: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It ran past its timeout and was killed.
    #[error("{command}: no answer within {secs} s (killed)")]
    TimedOut {
        /// The command line.
        command: String,
        /// The timeout.
        secs: u64,
    },
}

/// Runs external commands.
pub trait CommandRunner: Send + Sync {
    /// Runs `cmd` to completion (or its timeout) and returns what it left.
    fn run(&self, cmd: &CommandSpec) -> Result<CommandOutput, ExecError>;
}

/// The real [`CommandRunner`].
#[derive(Debug, Clone, Default)]
pub struct SystemRunner;

fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        kept
    })
}

impl CommandRunner for SystemRunner {
    fn run(&self, cmd: &CommandSpec) -> Result<CommandOutput, ExecError> {
        let program = cmd.program.display().to_string();
        let mut child = Command::new(&cmd.program)
            .args(&cmd.args)
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => ExecError::NotFound { program: program.clone() },
                _ => ExecError::Spawn { program: program.clone(), source },
            })?;
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
        // The wait happens on its own thread so this one can give up at the deadline.
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = match rx.recv_timeout(cmd.timeout) {
            Ok(Ok(status)) => status,
            Ok(Err(source)) => return Err(ExecError::Spawn { program, source }),
            Err(_) => {
                // SIGKILL by pid: the waiting thread still owns the child and reaps it.
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
                let _ = rx.recv();
                return Err(ExecError::TimedOut { command: cmd.display(), secs: cmd.timeout.as_secs() });
            }
        };
        let text = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
            h.and_then(|h| h.join().ok()).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
        };
        Ok(CommandOutput { code: status.code(), stdout: text(out), stderr: text(err) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_exit_code_are_captured() {
        let out = SystemRunner.run(&CommandSpec::new("sh", &["-c", "echo out; echo err >&2; exit 3"], Duration::from_secs(10))).unwrap();
        assert_eq!((out.code, out.stdout.as_str(), out.stderr.as_str()), (Some(3), "out\n", "err\n"));
        assert!(!out.success());
    }

    #[test]
    fn arguments_are_not_interpreted_by_a_shell() {
        let out = SystemRunner.run(&CommandSpec::new("echo", &["$(id)", "a;b"], Duration::from_secs(10))).unwrap();
        assert_eq!(out.stdout, "$(id) a;b\n");
    }

    #[test]
    fn a_hanging_command_is_killed_at_its_timeout() {
        let started = std::time::Instant::now();
        let err = SystemRunner.run(&CommandSpec::new("sleep", &["30"], Duration::from_millis(200))).unwrap_err();
        assert!(matches!(err, ExecError::TimedOut { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_missing_program_is_not_found() {
        let err = SystemRunner.run(&CommandSpec::new("/nonexistent/drover-tool", &[], Duration::from_secs(1))).unwrap_err();
        assert!(matches!(err, ExecError::NotFound { .. }), "{err}");
    }

    #[test]
    fn flooding_output_is_bounded() {
        let out = SystemRunner.run(&CommandSpec::new("head", &["-c", "3000000", "/dev/zero"], Duration::from_secs(20))).unwrap();
        assert_eq!(out.stdout.len(), MAX_OUTPUT_BYTES);
    }
}
