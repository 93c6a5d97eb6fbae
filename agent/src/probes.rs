//! Health probes: run a [`ProbeSpec`] within its timeout and report a [`ProbeResult`].
//!
//! - **exec**: the argv as it is (no shell) through the [`CommandRunner`] on a blocking
//!   thread; exit 0 passes, another exit code (or a signal) fails, a program that cannot be
//!   started or runs past the timeout (it is killed) is a probe-error.
//! - **http**: one `GET`, no redirects followed, no proxy; the expected status (default 200)
//!   passes, another status fails, no response within the timeout or no connection at all is
//!   a probe-error. `https://` URLs are verified against the system CA bundle
//!   (`$SSL_CERT_FILE`, else the first of [`CA_BUNDLE_PATHS`] that exists) or roots given to
//!   [`ProbeRunner::with_roots`]; with no roots at all an https probe is a probe-error.
//! - **tcp**: a connection within the timeout passes, a refused one fails, no answer (or
//!   an unresolvable name, an unreachable network) is a probe-error.
//!
//! The probe's mode (enforce / observe) is carried into its result. Probes that gate a rollout
//! come from the signed fleet spec only: probes from the agent's own configuration go through
//! [`observe_only`] first.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use drover_proto::report::{ProbeOutcome, ProbeResult};
use drover_proto::spec::{Mode, ProbeKind, ProbeSpec};
use drover_proto::time::Time;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::exec::{CommandRunner, CommandSpec, ExecError};

/// Where the system CA bundle usually is (Debian, Ubuntu, NixOS, Arch; RHEL, Fedora; SUSE;
/// Alpine), tried in order when `$SSL_CERT_FILE` is not set.
pub const CA_BUNDLE_PATHS: &[&str] =
    &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"];

/// Extra time an exec probe's blocking thread gets past the probe's own timeout before the
/// probe gives up on it (the runner kills the command at the timeout itself).
const EXEC_GRACE: Duration = Duration::from_secs(5);

/// Why a probe could not decide (its outcome is then probe-error), or why a runner could not
/// be built.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The spec lacks a field its kind needs (a manifest that skipped validation).
    #[error("{kind} probe has no {field}")]
    MissingField {
        /// The probe kind.
        kind: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// The command could not be started or was killed at the timeout.
    #[error("{source}")]
    Exec {
        /// The runner's error.
        #[source]
        source: ExecError,
    },
    /// No answer within the timeout.
    #[error("no answer within {secs} s")]
    TimedOut {
        /// The timeout.
        secs: u64,
    },
    /// The HTTP request failed before a response arrived.
    #[error("GET {url}: {message}")]
    Http {
        /// The URL.
        url: String,
        /// The error chain.
        message: String,
    },
    /// An https URL and no CA roots to check it against.
    #[error("no CA roots for https probes (set SSL_CERT_FILE or install a CA bundle)")]
    NoRoots,
    /// The TCP connection failed otherwise than by a refusal.
    #[error("connect {target}: {source}")]
    Tcp {
        /// `host:port`.
        target: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("cannot set up the HTTP probe client: {message}")]
    Setup {
        /// What went wrong.
        message: String,
    },
}

/// Runs probes. Cheap to clone (shared command runner and HTTP client).
#[derive(Clone)]
pub struct ProbeRunner {
    runner: Arc<dyn CommandRunner>,
    http: reqwest::Client,
    has_roots: bool,
}

impl std::fmt::Debug for ProbeRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeRunner").field("has_roots", &self.has_roots).finish_non_exhaustive()
    }
}

impl ProbeRunner {
    /// A runner whose https probes trust the system CA bundle (none found: https probes are
    /// probe-errors, the other kinds work).
    pub fn new(runner: Arc<dyn CommandRunner>) -> Result<Self, ProbeError> {
        Self::with_roots(runner, system_roots())
    }

    /// A runner whose https probes trust exactly `roots`.
    pub fn with_roots(runner: Arc<dyn CommandRunner>, roots: Vec<CertificateDer<'static>>) -> Result<Self, ProbeError> {
        let mut store = rustls::RootCertStore::empty();
        store.add_parsable_certificates(roots);
        let has_roots = !store.is_empty();
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| ProbeError::Setup { message: e.to_string() })?
            .with_root_certificates(store)
            .with_no_client_auth();
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_max_idle_per_host(0)
            .user_agent(crate::USER_AGENT)
            .build()
            .map_err(|e| ProbeError::Setup { message: error_chain(&e) })?;
        Ok(ProbeRunner { runner, http, has_roots })
    }

    /// Runs one probe within its timeout.
    pub async fn run(&self, spec: &ProbeSpec) -> ProbeResult {
        let observed_at = wall_clock();
        let started = Instant::now();
        let timeout = Duration::from_secs(spec.timeout_secs);
        let verdict = match spec.kind {
            ProbeKind::Exec => self.exec(spec, timeout).await,
            ProbeKind::Http => self.http(spec, timeout).await,
            ProbeKind::Tcp => tcp(spec, timeout).await,
        };
        let (outcome, message) = match verdict {
            Ok(v) => (v.outcome, v.message),
            Err(e) => (ProbeOutcome::ProbeError, e.to_string()),
        };
        ProbeResult {
            name: spec.name.clone(),
            outcome,
            mode: spec.mode,
            message,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            observed_at,
        }
    }

    /// Runs every probe, concurrently; results in the order of `specs`.
    pub async fn run_all(&self, specs: &[ProbeSpec]) -> Vec<ProbeResult> {
        let mut set = tokio::task::JoinSet::new();
        for (i, spec) in specs.iter().enumerate() {
            let (this, spec) = (self.clone(), spec.clone());
            set.spawn(async move { (i, this.run(&spec).await) });
        }
        let mut results: Vec<Option<ProbeResult>> = vec![None; specs.len()];
        while let Some(joined) = set.join_next().await {
            if let Ok((i, r)) = joined {
                results[i] = Some(r);
            }
        }
        // A probe task can only be missing if it panicked: report it rather than drop it.
        results
            .into_iter()
            .zip(specs)
            .map(|(r, spec)| {
                r.unwrap_or_else(|| ProbeResult {
                    name: spec.name.clone(),
                    outcome: ProbeOutcome::ProbeError,
                    mode: spec.mode,
                    message: "probe task panicked".to_owned(),
                    duration_ms: 0,
                    observed_at: wall_clock(),
                })
            })
            .collect()
    }

    async fn exec(&self, spec: &ProbeSpec, timeout: Duration) -> Result<Verdict, ProbeError> {
        let argv = spec.command.as_deref().filter(|c| !c.is_empty()).ok_or(ProbeError::MissingField { kind: "exec", field: "command" })?;
        let cmd = CommandSpec { program: argv[0].clone().into(), args: argv[1..].to_vec(), env: Vec::new(), timeout };
        let runner = Arc::clone(&self.runner);
        let task = tokio::task::spawn_blocking(move || runner.run(&cmd));
        let out = match tokio::time::timeout(timeout + EXEC_GRACE, task).await {
            Err(_) => return Err(ProbeError::TimedOut { secs: spec.timeout_secs }),
            Ok(Err(join)) => return Err(ProbeError::Setup { message: format!("exec probe thread: {join}") }),
            Ok(Ok(Err(ExecError::TimedOut { .. }))) => return Err(ProbeError::TimedOut { secs: spec.timeout_secs }),
            Ok(Ok(Err(source))) => return Err(ProbeError::Exec { source }),
            Ok(Ok(Ok(out))) => out,
        };
        let last_line = |s: &str| s.lines().rev().map(str::trim).find(|l| !l.is_empty()).map(|l| l.chars().take(200).collect::<String>());
        let detail = last_line(&out.stderr).or_else(|| last_line(&out.stdout));
        Ok(match out.code {
            Some(0) => Verdict::passed("exit 0".to_owned()),
            Some(code) => Verdict::failed(detail.map_or(format!("exit {code}"), |d| format!("exit {code}: {d}"))),
            None => Verdict::failed("killed by a signal".to_owned()),
        })
    }

    async fn http(&self, spec: &ProbeSpec, timeout: Duration) -> Result<Verdict, ProbeError> {
        let url = spec.url.as_deref().ok_or(ProbeError::MissingField { kind: "http", field: "url" })?;
        if url.starts_with("https://") && !self.has_roots {
            return Err(ProbeError::NoRoots);
        }
        let expected = spec.expect_status.unwrap_or(200);
        let resp = self.http.get(url).timeout(timeout).send().await.map_err(|e| {
            if e.is_timeout() {
                ProbeError::TimedOut { secs: spec.timeout_secs }
            } else {
                ProbeError::Http { url: url.to_owned(), message: error_chain(&e) }
            }
        })?;
        let status = resp.status().as_u16();
        Ok(if status == expected {
            Verdict::passed(format!("status {status}"))
        } else {
            Verdict::failed(format!("status {status} (expected {expected})"))
        })
    }
}

/// How a probe that ran came out.
struct Verdict {
    outcome: ProbeOutcome,
    message: String,
}

impl Verdict {
    fn passed(message: String) -> Self {
        Verdict { outcome: ProbeOutcome::Passed, message }
    }
    fn failed(message: String) -> Self {
        Verdict { outcome: ProbeOutcome::Failed, message }
    }
}

async fn tcp(spec: &ProbeSpec, timeout: Duration) -> Result<Verdict, ProbeError> {
    let host = spec.host.as_deref().filter(|h| !h.is_empty()).ok_or(ProbeError::MissingField { kind: "tcp", field: "host" })?;
    let port = spec.port.ok_or(ProbeError::MissingField { kind: "tcp", field: "port" })?;
    // A bare IPv6 address needs brackets in `host:port` form; (host, port) avoids that.
    let target = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await {
        Err(_) => Err(ProbeError::TimedOut { secs: spec.timeout_secs }),
        Ok(Ok(_stream)) => Ok(Verdict::passed(format!("connected to {target}"))),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(Verdict::failed(format!("{target}: connection refused"))),
        Ok(Err(source)) => Err(ProbeError::Tcp { target, source }),
    }
}

/// The system CA roots, read once per process.
static SYSTEM_ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();

/// Runs every probe from blocking code (a `spawn_blocking` thread, never an async task): a
/// private current-thread runtime drives [`ProbeRunner::run_all`] with the system CA roots.
pub fn run_all_blocking<R: CommandRunner + Clone + 'static>(specs: &[ProbeSpec], runner: &R) -> Vec<ProbeResult> {
    if specs.is_empty() {
        return Vec::new();
    }
    let roots = SYSTEM_ROOTS.get_or_init(system_roots).clone();
    let setup = ProbeRunner::with_roots(Arc::new(runner.clone()), roots).and_then(|probes| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ProbeError::Setup { message: format!("cannot start the probe runtime: {e}") })?;
        Ok(rt.block_on(probes.run_all(specs)))
    });
    setup.unwrap_or_else(|e| {
        let observed_at = wall_clock();
        let message = e.to_string();
        specs
            .iter()
            .map(|spec| ProbeResult {
                name: spec.name.clone(),
                outcome: ProbeOutcome::ProbeError,
                mode: spec.mode,
                message: message.clone(),
                duration_ms: 0,
                observed_at,
            })
            .collect()
    })
}

/// Probes from the agent's own configuration, made observe-only: only the signed fleet spec
/// may define probes that gate a rollout.
pub fn observe_only(local: Vec<ProbeSpec>) -> Vec<ProbeSpec> {
    local.into_iter().map(|spec| ProbeSpec { mode: Mode::Observe, ..spec }).collect()
}

/// The system CA bundle's certificates: `$SSL_CERT_FILE`, else the first of
/// [`CA_BUNDLE_PATHS`] that exists; empty if none can be read.
pub fn system_roots() -> Vec<CertificateDer<'static>> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let candidates = from_env.into_iter().chain(CA_BUNDLE_PATHS.iter().map(std::path::PathBuf::from));
    for path in candidates {
        if let Ok(pem) = std::fs::read(&path) {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok).collect();
            if !certs.is_empty() {
                return certs;
            }
        }
    }
    Vec::new()
}

/// The wall clock as a wire [`Time`] (the epoch if the clock is before it).
pub(crate) fn wall_clock() -> Time {
    let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Time::from_unix(i64::try_from(secs).unwrap_or(i64::MAX)).unwrap_or(Time::EPOCH)
}

/// An error and its sources, `: `-joined (reqwest's own message hides the cause).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::SystemRunner;

    fn exec_spec(name: &str, argv: &[&str], timeout_secs: u64) -> ProbeSpec {
        ProbeSpec {
            name: name.to_owned(),
            kind: ProbeKind::Exec,
            command: Some(argv.iter().map(|a| (*a).to_owned()).collect()),
            url: None,
            expect_status: None,
            host: None,
            port: None,
            timeout_secs,
            mode: Mode::Enforce,
        }
    }

    fn runner() -> ProbeRunner {
        ProbeRunner::with_roots(Arc::new(SystemRunner), Vec::new()).expect("runner")
    }

    #[test]
    fn local_probes_are_forced_to_observe_mode() {
        let specs = observe_only(vec![exec_spec("a", &["true"], 1), ProbeSpec { mode: Mode::Observe, ..exec_spec("b", &["true"], 1) }]);
        assert!(specs.iter().all(|s| s.mode == Mode::Observe));
        assert_eq!(specs[0].name, "a");
    }

    #[tokio::test]
    async fn an_exec_probe_exiting_zero_passes_and_keeps_its_mode() {
        let r = runner().run(&ProbeSpec { mode: Mode::Observe, ..exec_spec("ok", &["true"], 10) }).await;
        assert_eq!((r.outcome, r.mode, r.message.as_str()), (ProbeOutcome::Passed, Mode::Observe, "exit 0"));
    }

    #[tokio::test]
    async fn an_exec_probe_exiting_non_zero_fails_with_its_last_stderr_line() {
        let r = runner().run(&exec_spec("bad", &["sh", "-c", "echo checking; echo 'disk full' >&2; exit 3"], 10)).await;
        assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::Failed, "exit 3: disk full"));
    }

    #[tokio::test]
    async fn an_exec_probe_whose_program_is_missing_is_a_probe_error() {
        let r = runner().run(&exec_spec("missing", &["/nonexistent/drover-probe"], 10)).await;
        assert_eq!(r.outcome, ProbeOutcome::ProbeError, "{r:?}");
        assert!(r.message.contains("not found"), "{r:?}");
    }

    #[tokio::test]
    async fn an_exec_probe_past_its_timeout_is_killed_and_a_probe_error() {
        let r = runner().run(&exec_spec("slow", &["sleep", "30"], 1)).await;
        assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::ProbeError, "no answer within 1 s"));
        assert!(r.duration_ms < 10_000, "{r:?}");
    }

    #[tokio::test]
    async fn an_exec_probe_is_not_run_through_a_shell() {
        let r = runner().run(&exec_spec("literal", &["test", "$(echo x)", "=", "x"], 10)).await;
        assert_eq!(r.outcome, ProbeOutcome::Failed, "{r:?}");
    }

    #[tokio::test]
    async fn a_spec_missing_its_fields_is_a_probe_error_not_a_panic() {
        let spec = ProbeSpec { command: None, ..exec_spec("empty", &[], 1) };
        let r = runner().run(&spec).await;
        assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::ProbeError, "exec probe has no command"));
        let r = runner().run(&ProbeSpec { kind: ProbeKind::Tcp, ..spec }).await;
        assert_eq!((r.outcome, r.message.as_str()), (ProbeOutcome::ProbeError, "tcp probe has no host"));
    }

    #[tokio::test]
    async fn an_https_probe_without_roots_is_a_probe_error() {
        let spec =
            ProbeSpec { kind: ProbeKind::Http, command: None, url: Some("https://127.0.0.1:1/".to_owned()), ..exec_spec("tls", &[], 1) };
        let r = runner().run(&spec).await;
        assert_eq!(r.outcome, ProbeOutcome::ProbeError);
        assert!(r.message.starts_with("no CA roots"), "{r:?}");
    }

    #[tokio::test]
    async fn run_all_blocking_works_from_a_blocking_pool_thread() {
        let specs = vec![exec_spec("ok", &["true"], 10), ProbeSpec { mode: Mode::Observe, ..exec_spec("bad", &["false"], 10) }];
        let results = tokio::task::spawn_blocking(move || run_all_blocking(&specs, &SystemRunner)).await.expect("join");
        let got: Vec<(&str, ProbeOutcome, Mode)> = results.iter().map(|r| (r.name.as_str(), r.outcome, r.mode)).collect();
        assert_eq!(got, vec![("ok", ProbeOutcome::Passed, Mode::Enforce), ("bad", ProbeOutcome::Failed, Mode::Observe)]);
    }

    #[tokio::test]
    async fn run_all_keeps_the_order_of_the_specs() {
        let specs = vec![exec_spec("first", &["sh", "-c", "exit 1"], 10), exec_spec("second", &["true"], 10)];
        let results = runner().run_all(&specs).await;
        let got: Vec<(&str, ProbeOutcome)> = results.iter().map(|r| (r.name.as_str(), r.outcome)).collect();
        assert_eq!(got, vec![("first", ProbeOutcome::Failed), ("second", ProbeOutcome::Passed)]);
    }
}
