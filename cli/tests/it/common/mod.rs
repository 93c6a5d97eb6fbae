//! Helpers shared by the end-to-end tests of the `drover` binary: running it (and `openssl`)
//! as a subprocess, a scratch directory with keys, trust roots and releases in it, and
//! assertions on exit codes and messages.

#![allow(dead_code)]

pub mod mtls;

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The signing time every fixture release uses.
pub const SIGNED_AT: &str = "2025-01-01T00:00:00Z";
/// An instant one hour after [`SIGNED_AT`]: inside the example spec's 1-day freshness window.
pub const NOW: &str = "2025-01-01T01:00:00Z";
/// A CI commit, so rollout ids are predictable: `gpu@c0ffee`, `infra@c0ffee`.
pub const COMMIT: &str = "c0ffee";

/// The example fleet spec shipped in the repository (2 channels: `gpu`, `infra`).
pub fn example_spec() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet.json")
}

/// What a finished process left behind.
#[derive(Debug)]
pub struct Run {
    /// The command line, for failure messages.
    pub what: String,
    /// The exit code (`-1` when killed by a signal).
    pub code: i32,
    /// Its stdout, lossily decoded.
    pub stdout: String,
    /// Its stderr, lossily decoded.
    pub stderr: String,
    /// Its stdout, raw.
    pub stdout_bytes: Vec<u8>,
}

impl Run {
    fn from_output(what: String, out: Output) -> Run {
        Run {
            what,
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            stdout_bytes: out.stdout,
        }
    }

    /// Asserts exit 0; returns self for chaining.
    #[track_caller]
    pub fn ok(&self) -> &Run {
        assert_eq!(self.code, 0, "{} should succeed\nstdout: {}\nstderr: {}", self.what, self.stdout, self.stderr);
        self
    }

    /// Asserts a non-zero exit `code`, a `drover:` message on stderr and no panic.
    #[track_caller]
    pub fn fails_with(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "{}: wrong exit code\nstdout: {}\nstderr: {}", self.what, self.stdout, self.stderr);
        self.no_panic();
        assert!(self.stderr.starts_with("drover: "), "{}: stderr should carry drover's message, got {:?}", self.what, self.stderr);
        self
    }

    /// Asserts stderr mentions every one of `needles`.
    #[track_caller]
    pub fn stderr_has(&self, needles: &[&str]) -> &Run {
        for n in needles {
            assert!(self.stderr.contains(n), "{}: stderr should mention {n:?}, got {:?}", self.what, self.stderr);
        }
        self
    }

    /// Asserts stdout mentions `needle`.
    #[track_caller]
    pub fn stdout_has(&self, needle: &str) -> &Run {
        assert!(self.stdout.contains(needle), "{}: stdout should mention {needle:?}, got {:?}", self.what, self.stdout);
        self
    }

    /// Asserts the process did not panic.
    #[track_caller]
    pub fn no_panic(&self) -> &Run {
        assert!(!self.stderr.contains("panicked"), "{} panicked: {}", self.what, self.stderr);
        assert_ne!(self.code, 101, "{} exited 101 (a Rust panic): {}", self.what, self.stderr);
        self
    }
}

fn describe(program: &str, args: &[&str]) -> String {
    format!("`{program} {}`", args.join(" "))
}

/// How long one `drover` run may take before the test calls it hung.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Runs `drover ARGS` in `cwd`, with `stdin` piped in; kills it and fails the test if it
/// runs past [`DEADLINE`] (a hang is a bug, and must not hang the test suite).
pub fn drover_in(cwd: &Path, args: &[&str], stdin: &[u8]) -> Run {
    drover_env(cwd, args, stdin, &[])
}

/// The environment variables `drover` reads its coordinator and operator credentials from
/// (and its config file's path); cleared for every test run so the caller's environment
/// cannot leak in.
pub const DROVER_ENV: [&str; 5] = ["DROVER_COORDINATOR", "DROVER_CERT", "DROVER_KEY", "DROVER_CA", "DROVER_CONFIG"];

/// Like [`drover_in`], with [`DROVER_ENV`] cleared, the default config file pointed inside
/// `cwd` (so the caller's `~/.config/drover/config.toml` cannot leak in either), and then
/// `env` set.
pub fn drover_env(cwd: &Path, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
    let what = describe("drover", args);
    let mut command = Command::new(env!("CARGO_BIN_EXE_drover"));
    for var in DROVER_ENV {
        command.env_remove(var);
    }
    command.env("XDG_CONFIG_HOME", cwd.join(".config"));
    command.envs(env.iter().copied());
    let mut child = command
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start drover");
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let mut pipe = child.stdin.take().expect("stdin");
    let input = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for drover") {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = feeder.join();
    let out = Output { status, stdout: stdout.join().expect("stdout"), stderr: stderr.join().expect("stderr") };
    Run::from_output(what, out)
}

/// Runs `openssl ARGS`; panics with its stderr if it fails (the tests need it to work).
#[track_caller]
pub fn openssl(args: &[&str]) -> Vec<u8> {
    openssl_stdin(args, b"")
}

/// Runs `openssl ARGS` with `stdin`; panics with its stderr if it fails.
#[track_caller]
pub fn openssl_stdin(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let run = openssl_run(args, stdin);
    assert_eq!(run.code, 0, "{} failed: {}", run.what, run.stderr);
    run.stdout_bytes
}

/// Runs `openssl ARGS` with `stdin` and returns whatever happened.
pub fn openssl_run(args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start openssl (the interop tests need OpenSSL 3 on PATH)");
    let mut pipe = child.stdin.take().expect("stdin");
    pipe.write_all(stdin).expect("write openssl's stdin");
    drop(pipe);
    let out = child.wait_with_output().expect("wait for openssl");
    Run::from_output(describe("openssl", args), out)
}

/// Lowercase hex sha256 of `bytes`, computed by `openssl dgst` (independently of drover).
pub fn sha256_hex(bytes: &[u8]) -> String {
    let out = openssl_stdin(&["dgst", "-sha256", "-r"], bytes);
    let text = String::from_utf8(out).expect("openssl dgst prints text");
    text.split_whitespace().next().expect("a digest").to_owned()
}

/// A path as `&str` (temp paths are UTF-8).
pub fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> serde_json::Value {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// Lists every file under `dir` (relative path → bytes), sorted.
pub fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("under root").to_string_lossy().into_owned();
                out.push((rel, fs::read(&path).expect("read")));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A scratch directory where keys, trust files and releases are made.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Scratch {
    /// A fresh, empty directory.
    pub fn new() -> Scratch {
        Scratch { dir: tempfile::tempdir().expect("tempdir") }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs `drover ARGS` here.
    pub fn drover(&self, args: &[&str]) -> Run {
        drover_in(self.path(), args, b"")
    }

    /// Writes `bytes` to `name` here and returns the path.
    pub fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.join(name);
        fs::write(&path, bytes).expect("write scratch file");
        path
    }

    /// `drover keygen --out NAME`; returns the key id it printed.
    pub fn keygen(&self, name: &str) -> String {
        let run = self.drover(&["keygen", "--out", name]);
        run.ok();
        run.stdout.trim().to_owned()
    }

    /// `drover trust --pub P… --out NAME` with threshold 1; returns the trust file.
    pub fn trust(&self, name: &str, pubs: &[&str]) -> PathBuf {
        let mut args = vec!["trust"];
        for p in pubs {
            args.extend(["--pub", p]);
        }
        args.extend(["--out", name]);
        self.drover(&args).ok();
        self.join(name)
    }

    /// `drover release` of the example spec into `out`, signed by `key`, plus `extra`
    /// arguments; `--signed-at` [`SIGNED_AT`] and `--ci-commit` [`COMMIT`] unless `extra`
    /// sets them.
    pub fn release(&self, out: &str, key: &str, extra: &[&str]) -> Run {
        let spec = example_spec();
        let mut args = vec!["release", "--fleet", s(&spec), "--key", key, "--out", out];
        for (flag, default) in [("--signed-at", SIGNED_AT), ("--ci-commit", COMMIT)] {
            if !extra.contains(&flag) {
                args.extend([flag, default]);
            }
        }
        args.extend_from_slice(extra);
        self.drover(&args)
    }

    /// A CI key `ci`, its `trust.json` and a release `rel` of the example spec; all verified
    /// to have worked.
    pub fn signed_release() -> Scratch {
        let sc = Scratch::new();
        sc.keygen("ci");
        sc.trust("trust.json", &["ci.pub"]);
        sc.release("rel", "ci.key", &[]).ok();
        sc
    }

    /// `drover verify --trust TRUST --now NOW EXTRA… PATHS…`.
    pub fn verify(&self, trust: &str, extra: &[&str], paths: &[&str]) -> Run {
        let mut args = vec!["verify", "--trust", trust, "--now", NOW];
        args.extend_from_slice(extra);
        args.extend_from_slice(paths);
        self.drover(&args)
    }
}
