//! `drover dev`: the one-command local demo, like `vault server -dev`. Never for production.
//!
//! On loopback only, in a temporary directory removed at exit: a CI key and trust roots made
//! on the spot, a real `drover-coordinator serve` (its CA and an admin credential from
//! `init` and `operator-cert`), and a few (default 5) real `drover-agent run` processes,
//! each enrolled through the real bootstrap script and `curl` into its own sandbox root
//! with a fake Nix toolchain, fake GPU tools and a private D-Bus (`drover-devkit`), and each
//! proved confined to its sandbox before it starts. Then a demo release — 2 channels, 3
//! waves, a disruption budget of 2 hosts — is signed and published, and rolled out live
//! with the progress view; then a `soft_reset` job runs on one host; a second release (every
//! host to generation 3, slow soaks) is published and left rolling for the cheat-sheet's
//! `rollout halt|resume`, its fleet spec kept to sign another on top; with `--maas`, a fake
//! MAAS site onboards a few more hosts through MAAS (`dev_maas`, its URL and API key in the
//! banner); then a summary with the commands to poke at the fleet. It serves until Ctrl-C, or exits with
//! `--exit-when-done`.
//!
//! The binaries it runs (`drover-coordinator`, `drover-agent`, `fake-systemd`) are taken
//! from the directory `drover` itself is in: `cargo build --release --bins` puts them there.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use drover_devkit::DevkitError;
use drover_devkit::fleet::{Binaries, FleetOptions, LocalFleet};
use drover_devkit::spec::{self, CiKey, FleetHost, Policy};
use drover_proto::api::hosts::HostView;
use drover_proto::api::jobs::{JobDetail, JobJson};
use drover_proto::api::rollouts::RolloutStatus;
use drover_proto::release::ReleaseFiles;
use drover_proto::states::{JobState, RolloutState};
use serde_json::json;

use crate::exit::{CliError, codes};

/// Arguments of `drover dev`.
#[derive(Args, Debug)]
pub struct DevArgs {
    /// Also run a fake MAAS site (its URL and API key are printed) and onboard a few more hosts
    /// through it: enlisted, commissioned, deployed with their first-boot user data, enrolled.
    #[arg(long)]
    maas: bool,
    /// How many hosts `--maas` onboards (1–10).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=10), requires = "maas")]
    maas_nodes: u16,
    /// How many local agents to run (1–20).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=20))]
    agents: u16,
    /// Exit once the demo is done instead of serving until Ctrl-C.
    #[arg(long)]
    exit_when_done: bool,
    /// Keep everything in DIR (created, must be empty) and leave it there at exit, instead
    /// of a temporary directory that is removed.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Seconds each wave soaks before the next starts.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=600))]
    soak_secs: u64,
    /// Seconds each wave of the second release soaks: published as the demo starts serving
    /// and left rolling, so `drover rollout halt|resume` and `--watch` have a live rollout.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    next_soak_secs: u64,
}

const BANNER: &str = "\
==================================================================================
 WARNING: drover dev is a DEMO. NOT FOR PRODUCTION.
 Throwaway CA, CI key and state on loopback; fake Nix, GPU tools and systemd inside
 sandbox directories. Nothing here touches this machine's system.
==================================================================================";

fn dev_error(e: DevkitError) -> CliError {
    let code = match &e {
        DevkitError::MissingBinary { .. } => codes::NO_INPUT,
        DevkitError::Io { .. } => codes::IO,
        DevkitError::Api(_) => codes::UNAVAILABLE,
        _ => codes::SOFTWARE,
    };
    CliError::new(code, format!("dev: {e}"))
}

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
    let _ = out.flush();
}

/// The working directory: the one given (kept) or a fresh temporary one (removed at exit).
enum WorkDir {
    Kept(PathBuf),
    Temporary(PathBuf),
}

impl WorkDir {
    fn path(&self) -> &Path {
        match self {
            WorkDir::Kept(p) | WorkDir::Temporary(p) => p,
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let WorkDir::Temporary(p) = self {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

fn work_dir(given: Option<&Path>) -> Result<WorkDir, CliError> {
    let cant = |p: &Path, e: std::io::Error| CliError::new(codes::CANT_CREATE, format!("{}: {e}", p.display()));
    match given {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| cant(dir, e))?;
            if std::fs::read_dir(dir).map_err(|e| cant(dir, e))?.next().is_some() {
                return Err(CliError::usage(format!("--dir {}: not empty (drover dev starts from nothing)", dir.display())));
            }
            Ok(WorkDir::Kept(std::path::absolute(dir).map_err(|e| cant(dir, e))?))
        }
        None => {
            let dir = std::env::temp_dir().join(format!("drover-dev-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir(&dir).map_err(|e| cant(&dir, e))?;
            Ok(WorkDir::Temporary(dir))
        }
    }
}

/// Runs `drover dev`.
pub fn run(args: &DevArgs) -> Result<(), CliError> {
    let started = Instant::now();
    eprintln!("{BANNER}");
    let exe = std::env::current_exe().map_err(|e| CliError::new(codes::SOFTWARE, format!("cannot find drover's own path: {e}")))?;
    let bin_dir = exe.parent().unwrap_or(Path::new(".")).to_path_buf();
    let binaries = Binaries::in_dir(&bin_dir).map_err(dev_error)?;
    if args.maas && !bin_dir.join("fake-maas").is_file() {
        return Err(dev_error(DevkitError::MissingBinary { path: bin_dir.join("fake-maas") }));
    }
    let work = work_dir(args.dir.as_deref())?;
    let dir = work.path().to_path_buf();
    say(format!("state in {} ({})", dir.display(), if matches!(work, WorkDir::Kept(_)) { "kept" } else { "removed at exit" }));

    let ci = CiKey::create(&dir.join("ci")).map_err(dev_error)?;
    say(format!("CI key {} and trust roots {} made", ci.key_file.display(), ci.trust_file.display()));
    let options = FleetOptions {
        dir: dir.clone(),
        binaries,
        trust_file: ci.trust_file.clone(),
        coordinator_sections: "[agent]\nlong_poll_secs = 10\n\n[rollouts]\ninterval_secs = 1\ndebounce_ms = 50\n\n[maas]\npoll_ms = 300\n"
            .to_owned(),
        agent_log: "info".to_owned(),
    };
    let mut fleet = LocalFleet::start(options).map_err(dev_error)?;
    say(format!("coordinator listening on {} (mutual TLS 1.3, loopback only)", fleet.coordinator.url));

    let hosts = spec::layout("dev", usize::from(args.agents));
    for h in &hosts {
        // Generation 1 runs; 2 is the demo release's; 3 the second release's.
        let generations: Vec<String> = (1..=NEXT_GENERATION).map(|g| spec::closure(&h.hostname, g)).collect();
        let agent = fleet
            .add_agent(&h.hostname, |nix| {
                for g in &generations {
                    nix.closure(g, None)?;
                }
                nix.install_running(&generations[0])
            })
            .map_err(dev_error)?;
        say(format!(
            "  {:<8} enrolled via bootstrap.sh + curl; sandbox {} (confined: ok); channel {}, wave {}",
            h.hostname,
            agent.root.root.display(),
            h.channel,
            h.wave() - 1
        ));
    }
    let n = hosts.len();
    fleet
        .wait_until("every agent's first check-in", 60, |f| {
            let hosts: Vec<HostView> = f.hosts()?.into_iter().filter_map(|h| serde_json::from_value(h).ok()).collect();
            Ok(hosts.iter().filter(|h| h.state == drover_proto::states::HostLifecycle::Active).count() == n)
        })
        .map_err(dev_error)?;
    say(format!("{n} agents active ({:.1} s)", started.elapsed().as_secs_f64()));

    let policy = Policy { soak_secs: args.soak_secs, on_health_failure: "rollback-and-halt", max_in_flight: 2 };
    let release = ci.sign(&spec::fleet_spec(&hosts, 2, &policy), "demo0002", 1, crate::clock::now()?, None).map_err(dev_error)?;
    fleet.publish(&release, "drover dev: the demo release").map_err(dev_error)?;
    say("release 1 signed by the CI key and published: channels training and inference, 3 waves, at most 2 hosts at once");
    let rollout_started = Instant::now();
    let ids: Vec<String> = spec::CHANNELS.iter().map(|c| format!("{c}@demo0002")).collect();
    progress(&mut fleet, &hosts, &ids, Duration::from_secs(120 + 3 * args.soak_secs * 2))?;
    let rollout_secs = rollout_started.elapsed().as_secs_f64();
    for h in &hosts {
        let running = fleet.agent(&h.hostname).and_then(|a| a.nix.running());
        if running.as_deref() != Some(spec::closure(&h.hostname, 2).as_str()) {
            return Err(CliError::new(codes::SOFTWARE, format!("dev: {} does not run its new closure", h.hostname)));
        }
    }
    say(format!("rollout done in {rollout_secs:.1} s: every host switched to its new closure and passed node-check"));

    let target = &hosts[hosts.len() - 1];
    let job = soft_reset(&mut fleet, target)?;
    say(format!("soft_reset of {} completed: {}", target.hostname, job));

    let maas = if args.maas {
        let fake_systemd = fleet.options.binaries.fake_systemd.clone();
        let demo = crate::dev_maas::onboard(&mut fleet, &dir, &bin_dir, &fake_systemd, usize::from(args.maas_nodes), say)?;
        let names: Vec<&str> = demo.hosts.iter().map(|(h, _)| h.as_str()).collect();
        say(format!("{} onboarded through MAAS: deployed, enrolled, hardware sync healthy", names.join(", ")));
        let drifted = crate::dev_maas::show_drift(&mut fleet, &demo, say)?;
        Some((demo, drifted))
    } else {
        None
    };

    let next = if args.exit_when_done { None } else { Some(next_release(&mut fleet, &ci, &hosts, &release, args.next_soak_secs)?) };
    summary(&fleet, &hosts, started.elapsed(), next.as_deref())?;
    if let Some((m, drifted)) = &maas {
        say(format!("  MAAS: {} (API key {}); site {}", m.maas.url(), m.maas.api_key(), crate::dev_maas::SITE));
        say(format!("  drover get drift; drover reconcile status; drover drift resolve {drifted} --reason checked"));
        say(format!("  drover get onboardings --batch {}", m.batch_id));
        say(format!("  drover describe onboarding ID; drover site get {}", crate::dev_maas::SITE));
        if let Some((name, id)) = m.hosts.first() {
            say(format!("  drover decommission {id} --mode reimage --erase quick --reason demo   # {name}: a fresh OS, same id"));
        }
    }
    if args.exit_when_done {
        say("--exit-when-done: stopping the agents and the coordinator");
        return Ok(());
    }
    say("serving until Ctrl-C");
    serve(&mut fleet)?;
    say("stopping");
    Ok(())
}

/// How often the serving demo looks at the processes it started: a death is reported (and
/// the process reaped) within this.
const SUPERVISE_EVERY: Duration = Duration::from_millis(200);

/// Serves until Ctrl-C or SIGTERM, supervising what the demo started: an agent that exits is
/// reported at once on stderr (and reaped); a coordinator that exits ends the demo with an
/// error, since the banner's commands would all fail against it.
fn serve(fleet: &mut LocalFleet) -> Result<(), CliError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(codes::SOFTWARE, format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| CliError::new(codes::SOFTWARE, format!("cannot wait for signals: {e}")))?;
        let mut tick = tokio::time::interval(SUPERVISE_EVERY);
        let mut reported: Vec<u32> = Vec::new();
        loop {
            tokio::select! {
                r = tokio::signal::ctrl_c() => {
                    return r.map_err(|e| CliError::new(codes::SOFTWARE, format!("cannot wait for Ctrl-C: {e}")));
                }
                _ = term.recv() => return Ok(()),
                _ = tick.tick() => supervise(fleet, &mut reported)?,
            }
        }
    })
}

/// One look at the demo's processes; `reported` holds the agents already reported dead.
fn supervise(fleet: &mut LocalFleet, reported: &mut Vec<u32>) -> Result<(), CliError> {
    let pid = fleet.coordinator.pid();
    if let Some(status) = fleet.coordinator.exited() {
        return Err(CliError::new(
            codes::UNAVAILABLE,
            format!("dev: the coordinator (drover-coordinator serve, pid {pid}) exited: {status}; stopping the demo"),
        ));
    }
    for agent in &mut fleet.agents {
        if let Some((pid, status)) = agent.exited()
            && !reported.contains(&pid)
        {
            reported.push(pid);
            eprintln!("drover dev: the agent of {} (drover-agent run, pid {pid}) exited: {status}", agent.hostname);
        }
    }
    Ok(())
}

/// Prints the rollouts' progress (per wave, hosts per state: the `--watch` view's line form)
/// on every change until all of `ids` are Converged; any other end state is an error.
fn progress(fleet: &mut LocalFleet, hosts: &[FleetHost], ids: &[String], bound: Duration) -> Result<(), CliError> {
    // The manifests' wave membership, so hosts not reached yet show as Pending.
    let manifest = |channel: &str| -> std::collections::BTreeMap<String, u32> {
        hosts.iter().filter(|h| h.channel == channel).map(|h| (h.hostname.clone(), h.wave() - 1)).collect()
    };
    let deadline = Instant::now() + bound;
    let mut last = String::new();
    loop {
        let mut lines = Vec::new();
        let mut done = 0;
        for id in ids {
            let path = format!("/v1/rollouts/{id}/status");
            let status: RolloutStatus = match fleet.get(&path) {
                Ok(v) => crate::answer::decode(&path, &v)?,
                // Not opened yet: the executor picks the release up on its next tick.
                Err(DevkitError::Api(e)) if e.status() == Some(404) => {
                    lines.push(format!("  {id} Opening"));
                    continue;
                }
                Err(e) => return Err(dev_error(e)),
            };
            let state = status.rollout.state;
            let channel = id.split('@').next().unwrap_or_default();
            lines.push(format!("  {}", crate::watch::summary_line(&crate::watch::progress_of(&status, Some(&manifest(channel))))));
            match state {
                RolloutState::Converged => done += 1,
                RolloutState::Halted
                | RolloutState::Reverting
                | RolloutState::Reverted
                | RolloutState::Failed
                | RolloutState::Cancelled => {
                    return Err(CliError::new(codes::SOFTWARE, format!("dev: rollout {id} ended {state}")));
                }
                _ => {}
            }
        }
        let frame = lines.join("\n");
        if frame != last {
            say(&frame);
            last = frame;
        }
        if done == ids.len() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CliError::new(codes::SOFTWARE, format!("dev: the rollouts did not converge within {} s", bound.as_secs())));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The closures' generation the second release moves every host to.
const NEXT_GENERATION: u32 = 3;
/// The second release's CI commit, which names its rollouts (`training@demo0003`).
const NEXT_COMMIT: &str = "demo0003";

/// Signs the second release (every host to generation 3, each wave soaking `soak_secs`),
/// keeps its fleet spec and both releases in the demo's directory so a user can sign another
/// on top (`drover release --fleet DIR/fleet.json --previous DIR/releases/demo0003 …`),
/// publishes it and returns once its rollouts are Active: the cheat-sheet's `rollout halt`
/// and `resume` need a rollout in progress. Returns the directory.
fn next_release(fleet: &mut LocalFleet, ci: &CiKey, hosts: &[FleetHost], first: &ReleaseFiles, soak_secs: u64) -> Result<String, CliError> {
    let dir = fleet.options.dir.clone();
    let policy = Policy { soak_secs, on_health_failure: "rollback-and-halt", max_in_flight: 2 };
    let spec = spec::fleet_spec(hosts, NEXT_GENERATION, &policy);
    let now = crate::clock::now()?;
    let previous = ci.timestamp(first, now).map_err(dev_error)?;
    let next = ci.sign(&spec, NEXT_COMMIT, 2, now, Some(previous)).map_err(dev_error)?;
    let text = serde_json::to_string_pretty(&spec).map_err(|e| CliError::new(codes::SOFTWARE, format!("dev: fleet spec: {e}")))?;
    let spec_file = dir.join("fleet.json");
    std::fs::write(&spec_file, text + "\n").map_err(|e| CliError::new(codes::IO, format!("{}: {e}", spec_file.display())))?;
    crate::fsio::store_release(&dir.join("releases/demo0002"), first)?;
    crate::fsio::store_release(&dir.join("releases").join(NEXT_COMMIT), &next)?;
    fleet.publish(&next, "drover dev: the second release, left rolling").map_err(dev_error)?;
    let ids: Vec<String> = spec::CHANNELS.iter().map(|c| format!("{c}@{NEXT_COMMIT}")).collect();
    fleet
        .wait_until("the second release's rollouts to open", 60, |f| {
            for id in &ids {
                match f.get(&format!("/v1/rollouts/{id}/status")).map(serde_json::from_value::<RolloutStatus>) {
                    Ok(Ok(status)) if status.rollout.state != RolloutState::Opening => {}
                    Ok(Ok(_)) => return Ok(false),
                    Ok(Err(e)) => {
                        return Err(DevkitError::Process { what: format!("rollout {id}"), message: format!("unexpected status: {e}") });
                    }
                    // Not opened yet: the executor picks the release up on its next tick.
                    Err(DevkitError::Api(e)) if e.status() == Some(404) => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
            Ok(true)
        })
        .map_err(dev_error)?;
    say(format!(
        "release 2 ({NEXT_COMMIT}) signed and published, left rolling: every host to generation {NEXT_GENERATION}, each wave soaking {soak_secs} s"
    ));
    say(format!("  its fleet spec: {}; the releases: {}", spec_file.display(), dir.join("releases").display()));
    Ok(dir.display().to_string())
}

fn soft_reset(fleet: &mut LocalFleet, host: &FleetHost) -> Result<String, CliError> {
    let id = fleet.agent(&host.hostname).map(|a| a.host_id).ok_or_else(|| CliError::new(codes::SOFTWARE, "dev: no such agent"))?;
    say(format!("soft_reset of {}: cordon, drain, revoke tenant users, clean scratch, scrub GPUs, validate, uncordon", host.hostname));
    let job = fleet
        .post(
            &format!("/v1/hosts/{id}/decommission"),
            &json!({"mode": "soft_reset", "storage": "local", "reason": "drover dev: tenant turnover"}),
        )
        .map_err(dev_error)?;
    let job: JobJson = crate::answer::decode("decommission", &job)?;
    let job_id = job.job_id;
    let mut seen = String::new();
    let mut result = None;
    fleet
        .wait_until("the soft_reset job", 120, |f| {
            let path = format!("/v1/jobs/{job_id}");
            let v = serde_json::from_value::<JobDetail>(f.get(&path)?)
                .map_err(|e| DevkitError::Process { what: path, message: format!("unexpected answer: {e}") })?
                .job;
            let now = format!("{} {}", v.state, v.stage);
            if now != seen {
                say(format!("  job {job_id}: {now}"));
                seen = now;
            }
            let end = matches!(
                v.state,
                JobState::Completed | JobState::FailedRetryable | JobState::FailedManualIntervention | JobState::Cancelled
            );
            result = Some(v);
            Ok(end)
        })
        .map_err(dev_error)?;
    let Some(result) = result.filter(|r| r.state == JobState::Completed) else {
        return Err(CliError::new(codes::SOFTWARE, format!("dev: the soft_reset job {job_id} did not complete")));
    };
    Ok(format!("job {job_id}, stages {}", result.stages.join(" → ")))
}

/// The summary: every host, then how to reach the demo from another shell (`next`: the
/// demo's directory when the second release was left rolling).
fn summary(fleet: &LocalFleet, hosts: &[FleetHost], took: Duration, next: Option<&str>) -> Result<(), CliError> {
    let listed: Vec<HostView> = crate::answer::decode_all("/v1/hosts", &fleet.hosts().map_err(dev_error)?)?;
    say("");
    say(format!("{:<8}  {:<9}  {:<4}  {:<7}  {:<11}  {}", "HOST", "CHANNEL", "WAVE", "STATE", "SCHEDULABLE", "RUNNING"));
    for h in hosts {
        let row = listed.iter().find(|r| r.hostname == h.hostname);
        // The closure's name without its hash: `nixos-system-dev-01-g2`.
        let running = fleet.agents.iter().find(|a| a.hostname == h.hostname).and_then(|a| a.nix.running()).unwrap_or_default();
        let running = running.rsplit('/').next().and_then(|b| b.split_once('-')).map(|(_, name)| name.to_owned()).unwrap_or(running);
        say(format!(
            "{:<8}  {:<9}  {:<4}  {:<7}  {:<11}  {running}",
            h.hostname,
            h.channel,
            h.wave() - 1,
            row.map_or("?", |r| r.state.as_str()),
            row.map_or("?", |r| if r.schedulable { "yes" } else { "no" }),
        ));
    }
    let c = &fleet.coordinator;
    say("");
    say(format!("demo done in {:.1} s. Poke at it from another shell:", took.as_secs_f64()));
    say(format!("  export DROVER_COORDINATOR={}", c.url));
    say(format!("  export DROVER_CA={} DROVER_CERT={} DROVER_KEY={}", c.ca.display(), c.admin.0.display(), c.admin.1.display()));
    if let Some(dir) = next {
        say(format!("  export DROVER_DEV_DIR={dir}"));
    }
    say("  drover get hosts -o wide");
    say("  drover get rollouts");
    say("  drover describe rollout training@demo0002");
    if next.is_some() {
        say(format!(
            "  drover rollout halt training@{NEXT_COMMIT} --reason \"gpu errors on canary\"   # the second release, still rolling"
        ));
        say(format!("  drover rollout resume training@{NEXT_COMMIT} --reason \"driver fixed\""));
        say("  drover get rollouts --watch --timeout 600");
    }
    say(format!("  drover explain host {}", hosts[0].hostname));
    say("  drover get jobs; drover get tasks");
    say("  drover events --follow");
    say(format!("  logs: {} and {}/hosts/*/agent.log", c.log.display(), fleet.options.dir.display()));
    Ok(())
}
