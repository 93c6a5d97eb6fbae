//! `drover-agent run`: wires the real parts into the pull loop — the state directory, the
//! mTLS client, systemd over D-Bus, the NixOS activation backend, health and probes — and
//! speaks the systemd service protocol (`READY=1` once running, watchdog pings at the
//! interval the unit asks for, `STOPPING=1` on SIGTERM or SIGINT).
//!
//! systemd is reached lazily: an agent on a host whose bus is not reachable still checks in
//! and reports health (without failed units); an intent then fails with the bus error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_client::{ClientError, ClientIdentity, CoordinatorClient};
use drover_proto::report::{ActivationPhase, ActivationStatus, ConfirmRequest, HealthReport, ProbeOutcome, ProbeResult, TaskResult};
use drover_proto::spec::{Mode, ProbeSpec};
use drover_proto::task::TaskKind;
use tokio::sync::watch;

use crate::activation::{self, ActivationSettings, Activator, ConfirmAnswer, Confirmer, GateRefusal, HealthGate};
use crate::admit::Admitted;
use crate::config::Config;
use crate::exec::SystemRunner;
use crate::exit::{ExitStatus, codes};
use crate::pull::{ActivationOutcome, Agent, ClientFactory, HostOps, SharedClient, SystemClock};
use crate::state::{StateDir, StateError};
use crate::systemd::dbus::DbusSystemd;
use crate::systemd::notify::{Notifier, watchdog_interval_from_env};
use crate::systemd::{Systemd, SystemdError};

/// The confirmation route.
pub const CONFIRM_PATH: &str = "/v1/agent/confirm";
/// Where the kernel publishes this boot's id.
pub const BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The state directory is unusable or not enrolled.
    #[error(transparent)]
    State(#[from] StateError),
    /// The host has not been enrolled.
    #[error("{dir} holds no enrollment: run `drover-agent enroll` first", dir = dir.display())]
    NotEnrolled {
        /// The state directory.
        dir: std::path::PathBuf,
    },
    /// The TLS client could not be set up from the stored credentials.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The loop stopped with an error.
    #[error(transparent)]
    Pull(#[from] crate::pull::PullError),
    /// Signal handling could not be set up.
    #[error("cannot handle signals: {0}")]
    Signals(std::io::Error),
}

impl ExitStatus for RunError {
    fn exit_code(&self) -> u8 {
        match self {
            RunError::State(e) => e.exit_code(),
            RunError::NotEnrolled { .. } => codes::NO_INPUT,
            RunError::Client(e) => e.exit_code(),
            RunError::Pull(_) | RunError::Signals(_) => codes::SOFTWARE,
        }
    }
}

/// Logs as JSON lines on stderr (journald keeps them), filtered by `DROVER_LOG` (default
/// `info`).
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("DROVER_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// systemd, connected on first use and reconnected after a failure.
struct LazySystemd {
    address: Option<String>,
    bus: Mutex<Option<Arc<DbusSystemd>>>,
}

impl LazySystemd {
    fn get(&self) -> Result<Arc<DbusSystemd>, SystemdError> {
        let mut bus = self.bus.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = bus.as_ref() {
            return Ok(b.clone());
        }
        let connected = Arc::new(match &self.address {
            Some(a) => DbusSystemd::at_address(a)?,
            None => DbusSystemd::system()?,
        });
        *bus = Some(connected.clone());
        Ok(connected)
    }

    /// Runs `f` on the bus; a failure drops the connection so the next call reconnects.
    fn with<T>(&self, f: impl FnOnce(&DbusSystemd) -> Result<T, SystemdError>) -> Result<T, SystemdError> {
        let r = f(&*self.get()?);
        if r.is_err() {
            *self.bus.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        r
    }
}

impl Systemd for LazySystemd {
    fn start_transient_service(&self, unit: &str, description: &str, argv: &[String]) -> Result<(), SystemdError> {
        self.with(|s| s.start_transient_service(unit, description, argv))
    }
    fn unit_status(&self, unit: &str) -> Result<Option<crate::systemd::UnitStatus>, SystemdError> {
        self.with(|s| s.unit_status(unit))
    }
    fn wait_finished(&self, unit: &str, timeout: Duration) -> Result<crate::systemd::UnitStatus, SystemdError> {
        self.with(|s| s.wait_finished(unit, timeout))
    }
    fn failed_units(&self) -> Result<Vec<String>, SystemdError> {
        self.with(|s| s.failed_units())
    }
    fn restart_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.with(|s| s.restart_unit(unit))
    }
    fn start_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.with(|s| s.start_unit(unit))
    }
    fn stop_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.with(|s| s.stop_unit(unit))
    }
    fn disable_unit_files(&self, units: &[&str]) -> Result<Vec<String>, SystemdError> {
        self.with(|s| s.disable_unit_files(units))
    }
}

/// Confirms over the agent's client, from the blocking thread the activation runs on.
struct ClientConfirmer {
    client: SharedClient,
    handle: tokio::runtime::Handle,
}

impl Confirmer for ClientConfirmer {
    fn confirm(&self, request: &ConfirmRequest) -> ConfirmAnswer {
        let client = self.client.get();
        match self.handle.block_on(client.post_for_status(CONFIRM_PATH, request)) {
            Ok(_) => ConfirmAnswer::Confirmed,
            Err(e) if e.status() == Some(410) => ConfirmAnswer::Gone,
            Err(e) => ConfirmAnswer::Unreachable(e.to_string()),
        }
    }
}

/// The health gate after a switch: no failed units, and every enforce probe of the manifest
/// passes.
struct Gate<'a> {
    host: &'a RealHost,
    probes: Vec<ProbeSpec>,
}

impl HealthGate for Gate<'_> {
    fn check(&self) -> Result<(), GateRefusal> {
        let failed = self.host.systemd.failed_units().map_err(|source| GateRefusal::FailedUnitsUnknown { source })?;
        if !failed.is_empty() {
            return Err(GateRefusal::FailedUnits { units: failed });
        }
        let enforced: Vec<ProbeSpec> = self.probes.iter().filter(|p| p.mode == Mode::Enforce).cloned().collect();
        let bad: Vec<String> = self
            .host
            .probes(&enforced)
            .into_iter()
            .filter(|r| r.outcome != ProbeOutcome::Passed)
            .map(|r| format!("probe {} {:?}: {}", r.name, r.outcome, r.message))
            .collect();
        if bad.is_empty() { Ok(()) } else { Err(GateRefusal::Probes { probes: bad }) }
    }
}

/// The real host side of the pull loop.
pub struct RealHost {
    state: StateDir,
    activation: ActivationSettings,
    health: crate::health::HealthSettings,
    systemd: LazySystemd,
    runner: SystemRunner,
    confirmer: ClientConfirmer,
    tasks: crate::tasks::TaskSettings,
    /// The evidence key, when this host enrolled with one.
    evidence: Option<crate::host_keys::EvidenceSigner>,
}

impl RealHost {
    fn task_env(&self) -> crate::tasks::TaskEnv<'_> {
        crate::tasks::TaskEnv {
            settings: &self.tasks,
            runner: &self.runner,
            systemd: &self.systemd,
            clock: &activation::SystemClock,
            state_dir: self.state.path(),
        }
    }

    fn activator<'a>(&'a self, gate: &'a dyn HealthGate) -> Activator<'a> {
        Activator {
            settings: &self.activation,
            state: &self.state,
            runner: &self.runner,
            systemd: &self.systemd,
            confirmer: &self.confirmer,
            gate,
            clock: &activation::SystemClock,
        }
    }

    fn outcome(
        result: Result<activation::ActivationReport, activation::ActivationError>,
        admitted: Option<&Admitted>,
    ) -> ActivationOutcome {
        match result {
            Ok(report) => ActivationOutcome { status: report.status, events: report.events },
            Err(e) => {
                tracing::error!(error = %e, "activation could not run");
                let status = match admitted {
                    Some(a) => ActivationStatus {
                        intent_id: a.intent.intent_id.clone(),
                        rollout_id: a.intent.rollout_id.clone(),
                        target_closure: a.intent.target_closure.clone(),
                        phase: ActivationPhase::Failed,
                        message: e.to_string(),
                    },
                    None => return ActivationOutcome { status: failed_resume_status(&e), events: Vec::new() },
                };
                ActivationOutcome { status, events: Vec::new() }
            }
        }
    }
}

fn failed_resume_status(e: &activation::ActivationError) -> ActivationStatus {
    ActivationStatus {
        intent_id: String::new(),
        rollout_id: drover_proto::names::RolloutId::new("unknown", "unknown").expect("a valid id"),
        target_closure: String::new(),
        phase: ActivationPhase::Failed,
        message: format!("resuming the pending activation failed: {e}"),
    }
}

impl HostOps for RealHost {
    fn health(&self) -> Option<HealthReport> {
        Some(crate::health::collect(&self.health, &self.state, &self.systemd, &self.runner))
    }

    fn current_generation(&self) -> Option<String> {
        activation::inspect::closure_of(&self.activation.root, activation::CURRENT_SYSTEM)
    }

    fn probes(&self, probes: &[ProbeSpec]) -> Vec<ProbeResult> {
        crate::probes::run_all_blocking(probes, &self.runner)
    }

    fn activate(&self, admitted: &Admitted) -> ActivationOutcome {
        let gate = Gate { host: self, probes: admitted.root.root.probes.clone() };
        Self::outcome(self.activator(&gate).activate(&admitted.intent), Some(admitted))
    }

    fn resume(&self) -> Option<ActivationOutcome> {
        // The gate of a resumed activation has no manifest at hand: failed units only.
        let gate = Gate { host: self, probes: Vec::new() };
        match self.activator(&gate).resume() {
            Ok(Some(report)) => Some(ActivationOutcome { status: report.status, events: report.events }),
            Ok(None) => None,
            Err(e) => Some(Self::outcome(Err(e), None)),
        }
    }

    fn run_task(&self, task: &drover_proto::task::Task) -> TaskResult {
        let mut result = crate::tasks::run_task(task, &self.task_env());
        // What a tenant or auditor may ask the host itself to vouch for: that it is clean.
        if matches!(task.kind, TaskKind::ValidateClean { .. } | TaskKind::GpuScrub { .. }) {
            let subject = drover_proto::evidence::Subject::Task {
                task_id: task.task_id.clone(),
                job_id: task.job_id.clone(),
                task_type: task.kind.type_name().to_owned(),
                outcome: result.outcome,
                steps: result.steps.clone(),
                started_at: result.started_at,
                finished_at: result.finished_at,
            };
            result.evidence = self.evidence(result.finished_at, subject);
        }
        result
    }

    fn evidence(&self, at: drover_proto::time::Time, subject: drover_proto::evidence::Subject) -> Option<drover_proto::evidence::Evidence> {
        let signer = self.evidence.as_ref()?;
        match signer.sign(at, subject) {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::warn!(error = %e, "cannot sign evidence; the report goes without it");
                None
            }
        }
    }

    fn finish_uninstall(&self) -> Result<(), crate::systemd::SystemdError> {
        crate::tasks::uninstall::finish(&self.task_env())
    }
}

/// The host's evidence key, if it enrolled with one; a host without (enrolled before) or
/// with an unreadable one runs on and signs nothing, saying so once.
fn load_evidence_signer(state: &StateDir) -> Option<crate::host_keys::EvidenceSigner> {
    let host_id = match state.read_identity() {
        Ok(identity) => identity.host_id,
        Err(e) => {
            tracing::warn!(error = %e, "no identity to sign evidence as; no evidence will be signed");
            return None;
        }
    };
    match crate::host_keys::EvidenceSigner::load(state.path(), &host_id) {
        Ok(Some(signer)) => Some(signer),
        Ok(None) => {
            tracing::warn!("this host has no evidence key (it enrolled before evidence existed); its reports go unsigned");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "the evidence key cannot be read; reports go unsigned");
            None
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<(), RunError> {
    let state = StateDir::open(&config.state_dir)?;
    if !state.is_enrolled() {
        return Err(RunError::NotEnrolled { dir: config.state_dir.clone() });
    }
    let ca = drover_client::tls::load_ca(&config.ca_file)?;
    let timeout = Duration::from_secs(config.checkin.request_timeout_secs);
    let urls = config.coordinator_urls.clone();
    let make_client: ClientFactory =
        Arc::new(move |identity: ClientIdentity| CoordinatorClient::new(crate::USER_AGENT, &urls, &ca, Some(identity), timeout));
    let identity = ClientIdentity::from_pem(&state.read(crate::state::CERT)?, &state.read(crate::state::KEY)?)?;
    let client = SharedClient::new(make_client(identity)?);
    let boot_id = std::fs::read_to_string(BOOT_ID_FILE).map(|s| s.trim().to_owned()).unwrap_or_default();
    let host = Arc::new(RealHost {
        state: state.clone(),
        activation: config.activation.clone(),
        health: config.health.clone(),
        systemd: LazySystemd { address: config.systemd_bus.clone(), bus: Mutex::new(None) },
        runner: SystemRunner,
        confirmer: ClientConfirmer { client: client.clone(), handle: tokio::runtime::Handle::current() },
        tasks: config.tasks.clone(),
        evidence: load_evidence_signer(&state),
    });
    let local = crate::probes::observe_only(config.probes.clone());
    let notifier = Arc::new(Notifier::from_env().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "NOTIFY_SOCKET unusable; not notifying systemd");
        Notifier::disabled()
    }));
    // What the loop says of itself (a coordinator that has no record of this host) shows in
    // `systemctl status`.
    let status = notifier.clone();
    let agent = Agent::new(state, client, make_client, host, Arc::new(SystemClock), config.checkin.clone(), boot_id, local)?
        .reporting_status(Arc::new(move |line: &str| {
            let _ = status.status(line);
        }));

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(RunError::Signals)?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).map_err(RunError::Signals)?;
    let watchdog = watchdog_interval_from_env();
    // Ready before the loop starts, so a status the loop sets is never overwritten by this one.
    let _ = notifier.ready(crate::host_unknown::CHECKING_IN_STATUS);
    let loop_task = tokio::spawn(agent.run(stop_rx));
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "agent running");
    let mut ping = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
    let mut loop_task = loop_task;
    let result = loop {
        tokio::select! {
            _ = term.recv() => break None,
            _ = int.recv() => break None,
            _ = ping.tick(), if watchdog.is_some() => { let _ = notifier.watchdog(); }
            r = &mut loop_task => break Some(r),
        }
    };
    let _ = notifier.stopping();
    let _ = stop_tx.send(true);
    let finished = match result {
        Some(r) => r,
        None => loop_task.await,
    };
    tracing::info!("agent stopped");
    match finished {
        Ok(r) => Ok(r?),
        Err(e) => Err(RunError::Pull(crate::pull::PullError::Host(e.to_string()))),
    }
}
