//! `drover`: the CI side of Drover (keygen, trust, release, verify, plan, canonicalize) and
//! the operator side against a coordinator: kubectl-like reads (`get hosts|rollouts|jobs|tasks|
//! events|onboardings|drift`, `describe host|rollout|job|onboarding`, `events --follow`,
//! `explain host`, `--watch` live rollout progress; `audit`, `tokens`, `releases`,
//! `operator-cert list`, `evidence`, `version`), each with `-o table|wide|json`, and the actions
//! (enroll, host, rollout, decommission, maintenance, job, plan --from-coordinator, site,
//! onboard, onboarding, reconcile, drift resolve, rack, switch, power-shelf, component). Also
//! the web dashboard's local proxy (`ui`), the local demo (`dev`, with the `dev` feature) and
//! the shell completion and manual pages (`completion`, `man`).
//!
//! Where the coordinator is and which operator credentials to present come from flags, then
//! `DROVER_*` variables, then the config file (`--config`, `$DROVER_CONFIG`, or
//! `$XDG_CONFIG_HOME/drover/config.toml`; see [`cliconfig`]).
//!
//! Exit codes follow sysexits: 0 ok, 1 verification refused, 2 what `--wait` awaited failed
//! (a job failed or was cancelled, a rollout halted, reverted or failed), 64 usage, 65 bad input data
//! (or a 4xx from the coordinator), 66 missing input, 69 coordinator unreachable or failing,
//! 70 internal, 73 cannot create output, 74 I/O error, 75 a `--watch` or `--wait`
//! timed out, 76 a
//! coordinator answer that is not the API's, 77 credentials refused (401/403).

#![forbid(unsafe_code)]

mod answer;
mod arg_checks;
mod audit;
mod cliconfig;
mod client;
mod clock;
mod completion;
mod decommission;
mod describe;
#[cfg(feature = "dev")]
mod dev;
#[cfg(feature = "dev")]
mod dev_maas;
mod drift;
mod enroll;
mod events;
mod evidence;
mod exit;
mod explain;
#[cfg(test)]
mod fixtures;
mod fsio;
mod get;
mod host;
mod job;
mod job_view;
mod keygen;
mod listing;
mod maintenance;
mod onboarding_create;
mod onboarding_manage;
mod onboarding_view;
mod operator_certs;
mod output;
mod plan;
mod rack_inventory;
mod rack_maintenance;
mod release_ci;
mod release_list;
mod resolve;
mod rollout;
mod sign_cmd;
mod site_record;
mod site_request;
mod site_subresources;
mod tokens;
mod trust;
mod ui;
mod verify;
mod version;
mod wait;
mod watch;
mod workflow;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

use crate::exit::{CliError, codes};

/// Drover: safe, wave-by-wave rollouts and maintenance for bare-metal GPU fleets.
#[derive(Parser)]
#[command(name = "drover", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate an Ed25519 key pair: NAME.key (PKCS#8 PEM, 0600) and NAME.pub (SPKI PEM).
    Keygen(keygen::KeygenArgs),
    /// Build and sign a release directory from a fleet spec (see also `release timestamp`,
    /// `release publish`).
    Release(Box<release_ci::ReleaseArgs>),
    /// Write a trust.json (the CI trust roots agents and coordinators verify against).
    Trust(trust::TrustArgs),
    /// Verify a release directory, or single artifacts, against trust roots.
    Verify(verify::VerifyArgs),
    /// Dry-run the rollout planner offline: verify a release, join it with an observed.json
    /// and print the planned actions and the report as JSON.
    Plan(Box<plan::PlanArgs>),
    /// Create a host on the coordinator and print the bootstrap command to run on it.
    Enroll(Box<enroll::EnrollArgs>),
    /// Drive a host through its lifecycle: quarantine, unquarantine, retire, reactivate,
    /// remove, cordon, uncordon (admin); retire and remove print the job that carries them out.
    Host(Box<host::HostArgs>),
    /// Act on a rollout: halt, resume, cancel, rollback (admin); or show its status.
    Rollout(Box<rollout::RolloutArgs>),
    /// Start a decommission job for a host: soft reset, storage cleanup or full (admin).
    Decommission(Box<decommission::DecommissionArgs>),
    /// Request maintenance on a group of hosts or given hosts (admin); get or list requests.
    Maintenance(Box<maintenance::MaintenanceArgs>),
    /// Show jobs (get, describe) or act on one: retry, resume, rerun, restart-clean, cancel,
    /// adopt, mark-manual (admin).
    Job(Box<job::JobArgs>),
    /// MAAS sites: create, list, get, update, credentials, probe, preflight, disable, enable;
    /// RoCE assignments, BMC credential overrides and profiles.
    Site(Box<site_record::SiteArgs>),
    /// Onboard bare-metal nodes through MAAS: one (HOSTNAME IPMI_IP) or a batch (--csv FILE)
    /// (admin).
    Onboard(Box<onboarding_create::OnboardArgs>),
    /// Act on a MAAS onboarding: retry, resume, rerun, restart-clean, cancel, adopt,
    /// mark-manual (admin); see `get onboardings`, `describe onboarding`.
    Onboarding(Box<onboarding_manage::OnboardingArgs>),
    /// MAAS drift reconciliation: run a pass now (admin) or show each site's status.
    Reconcile(Box<drift::ReconcileArgs>),
    /// MAAS drift: resolve a host's open drift (admin); see `get drift`.
    Drift(Box<drift::DriftArgs>),
    /// Racks: create, list, get, delete, maintenance, place, bmc, firmware (admin writes,
    /// viewer reads).
    Rack(Box<rack_inventory::RackArgs>),
    /// Switches of racks: create, list, get, delete.
    Switch(Box<rack_inventory::DeviceArgs>),
    /// Power shelves of racks: create, list, get, delete, maintenance power-on|power-off (alias
    /// fix).
    PowerShelf(Box<rack_inventory::DeviceArgs>),
    /// Component firmware: update compute trays or switches through their rack's maintenance.
    Component(Box<rack_maintenance::ComponentArgs>),
    #[cfg(feature = "dev")]
    /// The local demo (NOT for production): a coordinator and sandboxed agents on loopback,
    /// a signed release rolled out in waves, a soft reset; serves until Ctrl-C.
    Dev(Box<dev::DevArgs>),
    /// List hosts, rollouts, jobs, tasks, events, onboardings or MAAS drift (-o table|wide|json).
    Get(Box<get::GetArgs>),
    /// Show one host, rollout, job or onboarding in full (-o json for the coordinator's JSON).
    Describe(Box<describe::DescribeArgs>),
    /// Print the coordinator's events; --follow keeps printing new ones.
    Events(Box<events::EventsArgs>),
    /// Host-signed evidence: get what a host or job holds on the coordinator; verify a file
    /// offline with the CA certificate.
    Evidence(Box<evidence::EvidenceArgs>),
    /// Explain why a host is or is not on its channel's target, from the planner's report.
    Explain(Box<explain::ExplainArgs>),
    /// The coordinator's audit log of operator actions: who, what, on what, why (admin or viewer).
    Audit(Box<audit::AuditArgs>),
    /// Enrollment tokens: list (id, host, state, created, expires, used; never the token itself), revoke.
    Tokens(Box<tokens::TokensArgs>),
    /// Stored releases: list (version, signed at, publisher, rollouts, channels, artifacts).
    Releases(Box<release_list::ReleasesArgs>),
    /// Operator certificates: list them, revoke one by serial (admin).
    OperatorCert(Box<operator_certs::OperatorCertArgs>),
    /// Print this client's version and the coordinator's, warning when they are a minor
    /// release or more apart.
    Version(Box<version::VersionArgs>),
    /// The web dashboard: a local proxy on loopback that holds your credentials and serves
    /// the pages (fleet, rollouts, jobs, maintenance, live events, hosts); prints the URL.
    Ui(Box<ui::UiArgs>),
    #[command(flatten)]
    Docs(completion::DocsCommand),
    /// Print the RFC 8785 canonical form of a JSON file (or stdin).
    Canonicalize {
        /// The JSON file; stdin when absent or "-".
        file: Option<PathBuf>,
    },
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Keygen(args) => keygen::run(&args),
        Command::Release(args) => release_ci::run(*args),
        Command::Trust(args) => trust::run(&args),
        Command::Verify(args) => verify::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Enroll(args) => enroll::run(&args),
        Command::Host(args) => host::run(&args),
        Command::Rollout(args) => rollout::run(&args),
        Command::Decommission(args) => decommission::run(&args),
        Command::Maintenance(args) => maintenance::run(&args),
        Command::Job(args) => job::run(&args),
        Command::Site(args) => site_record::run(&args),
        Command::Onboard(args) => onboarding_create::run(&args),
        Command::Onboarding(args) => onboarding_manage::run(&args),
        Command::Reconcile(args) => drift::run_reconcile(&args),
        Command::Drift(args) => drift::run_drift(&args),
        Command::Rack(args) => rack_inventory::run_rack(&args),
        Command::Switch(args) => rack_inventory::run_device(&args, false),
        Command::PowerShelf(args) => rack_inventory::run_device(&args, true),
        Command::Component(args) => rack_maintenance::run_component(&args),
        #[cfg(feature = "dev")]
        Command::Dev(args) => dev::run(&args),
        Command::Get(args) => get::run(&args),
        Command::Describe(args) => describe::run(&args),
        Command::Events(args) => events::run(&args),
        Command::Evidence(args) => evidence::run(&args),
        Command::Explain(args) => explain::run(&args),
        Command::Audit(args) => audit::run(&args),
        Command::Tokens(args) => tokens::run(&args),
        Command::Releases(args) => release_list::run(&args),
        Command::OperatorCert(args) => operator_certs::run(&args),
        Command::Version(args) => version::run(&args),
        Command::Ui(args) => ui::run(&args),
        Command::Docs(docs) => completion::run(&docs, <Cli as clap::CommandFactory>::command()),
        Command::Canonicalize { file } => {
            let (name, bytes) = fsio::read_input(file.as_deref())?;
            let out = drover_proto::canonical::canonicalize(&bytes).map_err(|e| CliError::data(format!("{name}: {e}")))?;
            fsio::write_stdout(&out)
        }
    }
}

fn main() -> ExitCode {
    // clap's own exit code for a usage error is 2; the documented one is 64 (EX_USAGE).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout; errors, with their usage line, to stderr.
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(codes::USAGE),
            };
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drover: {e}");
            ExitCode::from(e.code())
        }
    }
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
