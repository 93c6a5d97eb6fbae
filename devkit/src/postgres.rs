//! A real PostgreSQL server for tests: Debian's `postgresql` binaries run on a fresh cluster
//! in a temporary directory (`initdb`, then `pg_ctl start`), listening on a free loopback port
//! with password (SCRAM) authentication over TCP, trust over its own unix socket, and TLS with
//! a throwaway CA when asked. It can be restarted, stopped, crashed (`SIGKILL`) and started
//! again on the same port and data, and it is stopped and its directory removed when dropped.
//!
//! The binaries are found in `$DROVER_PG_BIN` (a directory), else next to the `initdb` on
//! `PATH`, else in the highest-versioned `/usr/lib/postgresql/*/bin` (Debian's package keeps
//! them off `PATH`). PostgreSQL refuses to run as root, so as root every server-side command
//! runs as the `postgres` system user (which Debian's package creates) through `setpriv`, and
//! the directory is owned by that user.
//!
//! Every call blocks (each is a child process with a bound); from async code, call it on a
//! blocking thread where other tasks of the same runtime must keep running meanwhile.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::{Gid, Pid, Uid, User};
use rand::Rng as _;

use crate::{DevkitError, io_at};

/// The superuser `initdb` creates, and the owner of the `drover` database.
pub const USER: &str = "drover";
/// The database created for the tests.
pub const DATABASE: &str = "drover";
/// Where Debian's package installs each major version's binaries.
const DEBIAN_LIB: &str = "/usr/lib/postgresql";
/// What `pg_ctl` may take to start or stop the server (its `-t`).
const PG_CTL_WAIT_SECS: u64 = 60;
/// What a whole command may take: `pg_ctl`'s own wait plus slack, or an `initdb` on a busy machine.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// What the processes of a killed server may take to disappear.
const KILL_TIMEOUT: Duration = Duration::from_secs(30);
/// How many lines of a command's stderr or of the server log an error quotes.
const TAIL_LINES: usize = 30;

/// How to set the server up.
#[derive(Debug, Clone, Default)]
pub struct PgOptions {
    /// Serve TLS with a certificate (for `127.0.0.1` and `localhost`) from a throwaway CA, and
    /// refuse TCP connections without it.
    pub tls: bool,
    /// `max_connections`; PostgreSQL's default (100) when unset.
    pub max_connections: Option<u32>,
}

/// The user the server-side commands run as, when this process is root.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: Uid,
    gid: Gid,
}

/// A running (or stopped, or killed) PostgreSQL server with its own cluster.
pub struct PostgresServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    run_as: Option<RunAs>,
    port: u16,
    password: String,
    ca_file: Option<PathBuf>,
    running: bool,
}

fn process_error(what: impl Into<String>, message: impl Into<String>) -> DevkitError {
    DevkitError::Process { what: what.into(), message: message.into() }
}

/// The directory holding the server binaries (`initdb`, `pg_ctl`, `postgres`, `psql`).
pub fn bin_dir() -> Result<PathBuf, DevkitError> {
    find_bin_dir(std::env::var_os("DROVER_PG_BIN"), std::env::var_os("PATH"), Path::new(DEBIAN_LIB))
}

/// [`bin_dir`] with its inputs spelled out.
fn find_bin_dir(explicit: Option<OsString>, path: Option<OsString>, debian_lib: &Path) -> Result<PathBuf, DevkitError> {
    if let Some(dir) = explicit {
        let dir = PathBuf::from(dir);
        if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
            return Ok(dir);
        }
        return Err(process_error(
            "PostgreSQL",
            format!("DROVER_PG_BIN={} has no initdb and pg_ctl: point it at a PostgreSQL bin directory", dir.display()),
        ));
    }
    // `initdb` on PATH may be a symbolic link into the real bin directory, which is where
    // `postgres` and `psql` (not Debian's `psql` wrapper) are.
    let on_path = path.and_then(|p| std::env::split_paths(&p).map(|d| d.join("initdb")).find(|p| p.is_file()));
    if let Some(initdb) = on_path {
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        if let Some(dir) = real.parent().filter(|d| d.join("pg_ctl").is_file()) {
            return Ok(dir.to_path_buf());
        }
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(debian_lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name.split('.').map(str::parse).collect::<Result<Vec<u32>, _>>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        process_error(
            "PostgreSQL",
            format!(
                "no server binaries (initdb, pg_ctl) in DROVER_PG_BIN, on PATH or in {}/*/bin: `apt-get install postgresql` installs them",
                debian_lib.display()
            ),
        )
    })
}

/// A loopback port nothing listens on now.
fn free_port() -> Result<u16, DevkitError> {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).map_err(io_at("127.0.0.1:0"))
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A single-quoted string for `postgresql.conf`.
fn conf_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "''"))
}

/// Runs `cmd` to completion within `timeout`: its stdout on success, else why (with its stderr's tail).
fn run_bounded(mut cmd: Command, what: &str, timeout: Duration) -> Result<String, DevkitError> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| process_error(what, format!("cannot start {}: {e}", Path::new(cmd.get_program()).display())))?;
    // Drained on their own threads so a chatty command never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(process_error(what, format!("still running after {} s; killed", timeout.as_secs())));
            }
            Err(e) => return Err(process_error(what, format!("waiting for it: {e}"))),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        Err(process_error(what, format!("{status}:\n{}", tail(&format!("{stdout}{stderr}"), TAIL_LINES))))
    }
}

/// The state letter and parent of process `pid` (`/proc/PID/stat`), `None` when it is gone.
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (in parentheses) may itself hold spaces and parentheses.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The processes whose parent is `pid`.
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| proc_stat(p).is_some_and(|(_, ppid)| ppid == pid))
        .collect()
}

impl PostgresServer {
    /// Creates a cluster in a fresh temporary directory, starts the server and creates the
    /// `drover` database owned by the `drover` superuser.
    pub fn start(opts: PgOptions) -> Result<PostgresServer, DevkitError> {
        let bin = bin_dir()?;
        let run_as = if Uid::effective().is_root() {
            let user = User::from_name("postgres")
                .map_err(|e| process_error("PostgreSQL", format!("looking up the postgres user: {e}")))?
                .ok_or_else(|| {
                    process_error(
                        "PostgreSQL",
                        "running as root needs the `postgres` system user to run the server as: `apt-get install postgresql` creates it",
                    )
                })?;
            Some(RunAs { uid: user.uid, gid: user.gid })
        } else {
            None
        };
        let dir = tempfile::Builder::new().prefix("drover-pg-").tempdir().map_err(io_at(std::env::temp_dir()))?;
        let password: String = rand::thread_rng().sample_iter(&rand::distributions::Alphanumeric).take(32).map(char::from).collect();
        let mut server = PostgresServer { dir, bin, run_as, port: 0, password, ca_file: None, running: false };
        server.prepare_dir()?;
        server.init(&opts)?;
        server.start_on_free_port()?;
        server.psql_in("postgres", &format!("CREATE DATABASE {DATABASE} OWNER {USER}"))?;
        Ok(server)
    }

    /// As root: the directory belongs to the server's user, and every directory above it lets
    /// that user through.
    fn prepare_dir(&self) -> Result<(), DevkitError> {
        let Some(run_as) = self.run_as else { return Ok(()) };
        let dir = self.dir.path();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(io_at(dir))?;
        self.give(dir)?;
        for parent in dir.ancestors().skip(1) {
            let mode = std::fs::metadata(parent).map_err(io_at(parent))?.permissions().mode();
            if mode & 0o001 == 0 {
                return Err(process_error(
                    "PostgreSQL",
                    format!(
                        "{} is not traversable by the postgres user (uid {}): set TMPDIR to a directory that is",
                        parent.display(),
                        run_as.uid
                    ),
                ));
            }
        }
        Ok(())
    }

    /// As root, hands `path` to the server's user.
    fn give(&self, path: &Path) -> Result<(), DevkitError> {
        if let Some(run_as) = self.run_as {
            nix::unistd::chown(path, Some(run_as.uid), Some(run_as.gid))
                .map_err(|e| DevkitError::Io { path: path.to_owned(), source: e.into() })?;
        }
        Ok(())
    }

    /// Writes `text` to `path` with `mode`, owned by the server's user.
    fn write_owned(&self, path: &Path, text: &str, mode: u32) -> Result<(), DevkitError> {
        crate::write_file(path, text, mode)?;
        self.give(path)
    }

    /// A command for the server binary `program`, run as the server's user.
    fn command(&self, program: &str) -> Command {
        let mut cmd = match self.run_as {
            Some(run_as) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={}", run_as.uid)).arg(format!("--regid={}", run_as.gid)).arg("--init-groups").arg("--");
                c.arg(self.bin.join(program));
                c
            }
            None => Command::new(self.bin.join(program)),
        };
        // The caller's working directory may be closed to the server's user.
        cmd.current_dir(self.dir.path());
        cmd
    }

    /// `initdb`, then the test settings and the client authentication rules.
    fn init(&mut self, opts: &PgOptions) -> Result<(), DevkitError> {
        let pwfile = self.password_file();
        self.write_owned(&pwfile, &self.password, 0o600)?;
        let mut initdb = self.command("initdb");
        initdb.arg("-D").arg(self.data_dir()).args([
            "-U",
            USER,
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        initdb.arg(format!("--pwfile={}", pwfile.display()));
        run_bounded(initdb, "initdb", COMMAND_TIMEOUT)?;

        let data = self.data_dir();
        // Tests only: without fsync and full-page writes a power loss could corrupt the
        // cluster, which a throwaway cluster does not care about, and every commit is far
        // cheaper. synchronous_commit stays on: a commit then reaches the kernel before it
        // returns, so killing the server (not the machine) loses nothing that was committed,
        // as crash tests require.
        let mut conf = format!(
            "\n# Added by drover-devkit: a throwaway test cluster.\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = {}\nfsync = off\nfull_page_writes = off\n",
            conf_quote(self.dir.path())
        );
        if let Some(n) = opts.max_connections {
            conf.push_str(&format!("max_connections = {n}\n"));
        }
        let host = if opts.tls {
            self.make_certificates()?;
            conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
            // Only TLS connections over TCP: a client that silently went without it fails.
            "hostssl"
        } else {
            "host"
        };
        let conf_path = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).map_err(io_at(&conf_path))?;
        text.push_str(&conf);
        std::fs::write(&conf_path, text).map_err(io_at(&conf_path))?;
        let hba = format!(
            "# Written by drover-devkit: trust on the private unix socket, a password over TCP.\nlocal all all trust\n{host} all all 127.0.0.1/32 scram-sha-256\n"
        );
        self.write_owned(&data.join("pg_hba.conf"), &hba, 0o600)
    }

    /// A throwaway CA (`ca.pem`, for clients) and a server certificate it signs, for
    /// `127.0.0.1` and `localhost`, in the data directory (the key mode 0600, as PostgreSQL demands).
    fn make_certificates(&mut self) -> Result<(), DevkitError> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
        let err = |e: rcgen::Error| process_error("PostgreSQL TLS certificate", e.to_string());
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.distinguished_name.push(DnType::CommonName, "drover-devkit PostgreSQL test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca = ca_params.self_signed(&ca_key).map_err(err)?;
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &ca, &ca_key).map_err(err)?;
        let data = self.data_dir();
        self.write_owned(&data.join("server.crt"), &cert.pem(), 0o644)?;
        self.write_owned(&data.join("server.key"), &key.serialize_pem(), 0o600)?;
        let ca_file = self.dir.path().join("ca.pem");
        self.write_owned(&ca_file, &ca.pem(), 0o644)?;
        self.ca_file = Some(ca_file);
        Ok(())
    }

    /// Starts the new cluster on a free port, choosing another when one was taken meanwhile.
    fn start_on_free_port(&mut self) -> Result<(), DevkitError> {
        let conf_path = self.data_dir().join("postgresql.conf");
        let mut last = None;
        for _ in 0..3 {
            self.port = free_port()?;
            // A later `port` line wins over an earlier one.
            let mut text = std::fs::read_to_string(&conf_path).map_err(io_at(&conf_path))?;
            text.push_str(&format!("port = {}\n", self.port));
            std::fs::write(&conf_path, text).map_err(io_at(&conf_path))?;
            let log_before = self.log().len();
            match self.start_again() {
                Ok(()) => return Ok(()),
                Err(e) if self.log().get(log_before..).is_some_and(|new| new.contains("could not bind")) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| process_error("pg_ctl start", "no free port")))
    }

    /// Runs `pg_ctl` with `args` on the cluster; a failure quotes the server log's tail.
    fn pg_ctl(&self, args: &[&str]) -> Result<(), DevkitError> {
        let what = format!("pg_ctl {}", args.first().copied().unwrap_or_default());
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D").arg(self.data_dir()).args(args).args(["-w", "-t", &PG_CTL_WAIT_SECS.to_string()]);
        run_bounded(cmd, &what, COMMAND_TIMEOUT).map(drop).map_err(|e| match e {
            DevkitError::Process { what, message } => {
                DevkitError::Process { what, message: format!("{message}\nserver log:\n{}", tail(&self.log(), TAIL_LINES)) }
            }
            other => other,
        })
    }

    /// Starts the server on its data and port (after [`kill`](Self::kill) or [`stop`](Self::stop)),
    /// waiting until it accepts connections.
    pub fn start_again(&mut self) -> Result<(), DevkitError> {
        let log = self.dir.path().join("server.log");
        self.pg_ctl(&["start", "-l", &log.display().to_string()])?;
        self.running = true;
        Ok(())
    }

    /// Restarts the server (`pg_ctl restart -m fast`): clients are disconnected, and the
    /// server accepts connections again once this returns.
    pub fn restart(&mut self) -> Result<(), DevkitError> {
        let log = self.dir.path().join("server.log");
        self.pg_ctl(&["restart", "-m", "fast", "-l", &log.display().to_string()])?;
        self.running = true;
        Ok(())
    }

    /// Stops the server cleanly (`pg_ctl stop -m fast`).
    pub fn stop(&mut self) -> Result<(), DevkitError> {
        self.pg_ctl(&["stop", "-m", "fast"])?;
        self.running = false;
        Ok(())
    }

    /// Crashes the server: `SIGKILL` to the postmaster and to every process it started, then
    /// waits (bounded) until they are gone, as after the machine's OOM killer or a `kill -9`
    /// of the service. Nothing is shut down cleanly; [`start_again`](Self::start_again)
    /// recovers from the write-ahead log.
    pub fn kill(&mut self) -> Result<(), DevkitError> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).map_err(io_at(&pid_file))?;
        let pid: i32 = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| process_error("killing PostgreSQL", format!("{} has no process id", pid_file.display())))?;
        let sig = |p: i32, s: Signal| match signal::kill(Pid::from_raw(p), s) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(process_error("killing PostgreSQL", format!("{s} to {p}: {e}"))),
        };
        // Stopped first, so that it starts no new child between the listing and the kill.
        sig(pid, Signal::SIGSTOP)?;
        let mut victims = children_of(pid);
        victims.push(pid);
        for &p in &victims {
            sig(p, Signal::SIGKILL)?;
        }
        self.running = false;
        let deadline = Instant::now() + KILL_TIMEOUT;
        // A zombie holds no shared memory or port any more, so it counts as gone.
        while victims.iter().any(|&p| proc_stat(p).is_some_and(|(state, _)| state != 'Z')) {
            if Instant::now() > deadline {
                return Err(DevkitError::Timeout {
                    what: format!("PostgreSQL's processes {victims:?} to die"),
                    secs: KILL_TIMEOUT.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The postmaster may linger as a zombie where nothing reaps orphans (a container's
        // init may not), and PostgreSQL takes a live process id in its lock file for a
        // running server. Every process of the server is dead now, so both its locks (the
        // data directory's and the unix socket's) are stale.
        let socket_lock = self.dir.path().join(format!(".s.PGSQL.{}.lock", self.port));
        for lock in [pid_file, socket_lock] {
            match std::fs::remove_file(&lock) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(DevkitError::Io { path: lock, source: e }),
                _ => {}
            }
        }
        Ok(())
    }

    /// Runs `sql` as the superuser in the `drover` database over the unix socket; its output
    /// (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> Result<String, DevkitError> {
        self.psql_in(DATABASE, sql)
    }

    /// [`psql`](Self::psql) in database `db`.
    fn psql_in(&self, db: &str, sql: &str) -> Result<String, DevkitError> {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]);
        cmd.arg(format!("host={} port={} user={USER} dbname={db}", self.dir.path().display(), self.port));
        cmd.current_dir(self.dir.path());
        run_bounded(cmd, "psql", COMMAND_TIMEOUT).map_err(|e| match e {
            DevkitError::Process { what, message } => {
                DevkitError::Process { what, message: format!("{message}\nserver log:\n{}", tail(&self.log(), TAIL_LINES)) }
            }
            other => other,
        })
    }

    /// `postgres://drover@127.0.0.1:PORT/drover` (the password is not in it: see [`password`](Self::password)).
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// The `drover` user's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A file (mode 0600) holding the password alone, without a newline.
    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("password")
    }

    /// The loopback TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The CA (PEM) the server's certificate chains to, with TLS.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// The server log so far, for test failure messages.
    pub fn log(&self) -> String {
        std::fs::read(self.dir.path().join("server.log")).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The directory of the server binaries (`psql` is there too).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.running && self.pg_ctl(&["stop", "-m", "immediate"]).is_err() {
            let _ = self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `psql` over TCP as `drover` with `password` and the extra connection settings `extra`:
    /// its output, or its stderr on failure.
    fn psql_tcp(pg: &PostgresServer, password: &str, extra: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(pg.bin_dir().join("psql"))
            .args(["-X", "-A", "-t", "-c", sql])
            .arg(format!("host=127.0.0.1 port={} user={USER} dbname={DATABASE} connect_timeout=10 {extra}", pg.port()))
            .env("PGPASSWORD", password)
            .stdin(Stdio::null())
            .output()
            .expect("psql runs");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    #[test]
    fn serves_over_tcp_survives_restart_and_kill_and_is_removed_on_drop() {
        let mut pg = PostgresServer::start(PgOptions::default()).expect("PostgreSQL starts");
        let pw = pg.password().to_owned();
        assert_eq!(psql_tcp(&pg, &pw, "sslmode=disable", "SELECT 1"), Ok("1".to_owned()), "log:\n{}", pg.log());
        assert!(pg.url().ends_with(&format!("127.0.0.1:{}/drover", pg.port())) && !pg.url().contains(&pw));
        assert_eq!(std::fs::read_to_string(pg.password_file()).expect("password file"), pw);
        let refused = psql_tcp(&pg, "not-the-password", "sslmode=disable", "SELECT 1").expect_err("a wrong password is refused");
        assert!(refused.contains("password authentication failed"), "{refused}");

        psql_tcp(&pg, &pw, "", "CREATE TABLE t (n int); INSERT INTO t VALUES (7)").expect("writes");
        pg.restart().expect("restarts");
        assert_eq!(psql_tcp(&pg, &pw, "", "SELECT n FROM t"), Ok("7".to_owned()));

        psql_tcp(&pg, &pw, "", "INSERT INTO t VALUES (8)").expect("writes");
        let pid = std::fs::read_to_string(pg.data_dir().join("postmaster.pid")).expect("pid file");
        let pid: i32 = pid.lines().next().and_then(|l| l.parse().ok()).expect("pid");
        pg.kill().expect("kills");
        assert!(proc_stat(pid).is_none_or(|(state, _)| state == 'Z'), "the postmaster is gone");
        assert!(psql_tcp(&pg, &pw, "", "SELECT 1").is_err(), "nothing answers after the kill");
        pg.start_again().expect("starts again after the kill");
        // Committed before the kill, so recovered from the write-ahead log.
        assert_eq!(psql_tcp(&pg, &pw, "", "SELECT sum(n) FROM t"), Ok("15".to_owned()), "log:\n{}", pg.log());

        pg.stop().expect("stops");
        assert!(psql_tcp(&pg, &pw, "", "SELECT 1").is_err(), "nothing answers after the stop");
        pg.start_again().expect("starts again after the stop");
        assert_eq!(pg.psql("SELECT count(*) FROM t").expect("unix socket"), "2\n");

        let pid = std::fs::read_to_string(pg.data_dir().join("postmaster.pid")).expect("pid file");
        let pid: i32 = pid.lines().next().and_then(|l| l.parse().ok()).expect("pid");
        let dir = pg.data_dir().parent().expect("parent").to_path_buf();
        drop(pg);
        assert!(!dir.exists(), "{} is removed", dir.display());
        assert!(proc_stat(pid).is_none_or(|(state, _)| state == 'Z'), "the server is stopped");
    }

    #[test]
    fn tls_verifies_against_the_ca_and_plain_tcp_is_refused() {
        let pg = PostgresServer::start(PgOptions { tls: true, max_connections: Some(20) }).expect("PostgreSQL starts");
        let ca = pg.ca_file().expect("a CA with TLS").display().to_string();
        let pw = pg.password().to_owned();
        for host in ["", "host=localhost"] {
            let got = psql_tcp(
                &pg,
                &pw,
                &format!("sslmode=verify-full sslrootcert={ca} {host}"),
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            );
            assert_eq!(got, Ok("t".to_owned()), "{host}; log:\n{}", pg.log());
        }
        assert_eq!(pg.psql("SHOW max_connections").expect("psql"), "20\n");
        let plain = psql_tcp(&pg, &pw, "sslmode=disable", "SELECT 1").expect_err("plain TCP is refused");
        assert!(plain.contains("no encryption"), "{plain}");
        // A CA that did not sign the server's certificate is not trusted.
        let other = pg.data_dir().parent().expect("dir").join("other-ca.pem");
        let stranger = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("cert");
        std::fs::write(&other, stranger.cert.pem()).expect("write");
        let untrusted = psql_tcp(&pg, &pw, &format!("sslmode=verify-full sslrootcert={}", other.display()), "SELECT 1");
        assert!(untrusted.expect_err("an unknown CA is refused").contains("certificate verify failed"));
    }

    #[test]
    fn finds_the_highest_debian_version_and_names_the_package_when_none() {
        let root = tempfile::tempdir().expect("tempdir");
        let lib = root.path().join("lib");
        let empty = root.path().join("empty");
        std::fs::create_dir_all(&empty).expect("mkdir");
        let err = find_bin_dir(None, Some(empty.clone().into_os_string()), &lib).expect_err("nothing installed");
        assert!(err.to_string().contains("apt-get install postgresql"), "{err}");
        for v in ["9.6", "13", "15", "100-broken"] {
            let bin = lib.join(v).join("bin");
            std::fs::create_dir_all(&bin).expect("mkdir");
            if v != "100-broken" {
                std::fs::write(bin.join("initdb"), "").expect("write");
            }
        }
        assert_eq!(find_bin_dir(None, Some(empty.into_os_string()), &lib).expect("found"), lib.join("15/bin"));
        let explicit = find_bin_dir(Some(lib.join("13/bin").into_os_string()), None, &lib).expect_err("13 has no pg_ctl");
        assert!(explicit.to_string().contains("DROVER_PG_BIN"), "{explicit}");
        std::fs::write(lib.join("13/bin/pg_ctl"), "").expect("write");
        assert_eq!(find_bin_dir(Some(lib.join("13/bin").into_os_string()), None, &lib).expect("explicit"), lib.join("13/bin"));
        // initdb on PATH (a link, as some images make) leads to its real directory.
        let path_dir = root.path().join("path");
        std::fs::create_dir_all(&path_dir).expect("mkdir");
        std::os::unix::fs::symlink(lib.join("13/bin/initdb"), path_dir.join("initdb")).expect("link");
        assert_eq!(find_bin_dir(None, Some(path_dir.into_os_string()), &lib).expect("on PATH"), lib.join("13/bin"));
    }
}
