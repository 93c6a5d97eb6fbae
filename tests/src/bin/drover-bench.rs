//! `drover-bench fleet`: thousands of simulated agents against a real `drover-coordinator
//! serve` on loopback — enrollment, ramp-up, an idle fleet on long-polls, then a full rollout
//! to convergence — at one or more fleet sizes, HTTP stacks and socket settings, the first run
//! being the baseline the others are compared with; and on SQLite (one coordinator) or on
//! PostgreSQL (several replicas sharing the fleet). See BENCHMARKS.md, "The coordinator under
//! a simulated fleet".

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use drover_tests::fleet::run::{Binaries, Report, run};
use drover_tests::fleet::scenario::{Http, Scenario, StoreBackend, nodelay_str, parse_nodelay};

/// Drover's scale benchmarks.
#[derive(Parser)]
#[command(name = "drover-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Simulated agents against a real coordinator: enrollment, ramp-up, idle, a rollout.
    Fleet(Box<FleetArgs>),
    /// The anonymous attacks against a real coordinator: every anonymous route
    /// hammered while an admin's latency is timed, then a flood of pinned request bodies while
    /// its memory is watched (BENCHMARKS.md, "Anonymous clients").
    Anonymous(AnonymousArgs),
    /// One share of a fleet's agents, run by `fleet --processes N` (not for direct use): the
    /// plan file says which agents and where; commands come on stdin, receipts go to stdout.
    #[command(hide = true)]
    SwarmPart {
        /// The plan `fleet` wrote.
        plan: PathBuf,
    },
}

#[derive(Args)]
struct AnonymousArgs {
    /// Hosts in the published release.
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Hammering connections (spread over --sources addresses).
    #[arg(long, default_value_t = 16)]
    hammer_connections: usize,
    /// Loopback source addresses of the hammer.
    #[arg(long, default_value_t = 4)]
    sources: usize,
    /// Admin requests timed quiet and again under the hammer.
    #[arg(long, default_value_t = 500)]
    admin_requests: usize,
    /// Connections of the body flood (from four addresses).
    #[arg(long, default_value_t = 1000)]
    body_connections: usize,
    /// How long memory is watched after the flood, at most, seconds.
    #[arg(long, default_value_t = 60)]
    settle_secs: u64,
    /// The coordinator binary (default: beside this one).
    #[arg(long)]
    coordinator: Option<PathBuf>,
    /// The agent binary it serves (default: beside this one).
    #[arg(long)]
    agent: Option<PathBuf>,
}

fn anonymous(args: AnonymousArgs) -> anyhow::Result<ExitCode> {
    let coordinator = args.coordinator.clone().map_or_else(|| beside_me("drover-coordinator"), Ok)?;
    let agent = args.agent.clone().map_or_else(|| beside_me("drover-agent"), Ok)?;
    let _ = drover_engine::run::raise_open_files_limit();
    let dir = tempfile::tempdir().context("temporary directory")?;
    let opts = drover_tests::anonymous::AttackOptions {
        hosts: args.hosts,
        hammer_connections: args.hammer_connections,
        sources: args.sources,
        admin_requests: args.admin_requests,
        body_connections: args.body_connections,
        settle_secs: args.settle_secs,
        connections: String::new(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("runtime")?;
    let report = runtime.block_on(drover_tests::anonymous::run(&opts, &coordinator, &agent, dir.path()))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
struct FleetArgs {
    /// Fleet sizes to run, one after another, each against a fresh coordinator; the first is
    /// the baseline of the ratio column.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    agents: Vec<usize>,
    /// HTTP stacks, each run at every size: `1.1` (ALPN `h2, http/1.1`, as `drover-agent`
    /// sends; the coordinator's own HTTP/1.1 serves), `2` (ALPN `h2` only: hyper's HTTP/2), or
    /// `1.1-hyper` (as `1.1`, the coordinator configured with `connections.http1 = "hyper"`).
    #[arg(long, value_delimiter = ',', default_value = "1.1")]
    http: Vec<String>,
    /// The coordinator's `[connections] tcp_nodelay`, each run at every size and HTTP stack:
    /// `on` (the default: accepted sockets set `TCP_NODELAY`) or `off` (Nagle's algorithm,
    /// the sockets as they were before; put it first to make it the baseline).
    #[arg(long, value_delimiter = ',', default_value = "on")]
    nodelay: Vec<String>,
    /// The coordinator's store, each run with every other setting: `sqlite` (one coordinator,
    /// the baseline) or `postgres-N` (N replicas, 1 to 8, on one PostgreSQL started for the
    /// run from Debian's `postgresql` binaries; the agents are dealt across the replicas, each
    /// listing the others to fail over to). CPU and memory are summed over the replicas, the
    /// database's processes reported apart.
    #[arg(long, value_delimiter = ',', default_value = "sqlite")]
    store: Vec<String>,
    /// Channels (one rollout each).
    #[arg(long, default_value_t = 3)]
    channels: usize,
    /// Waves per rollout (sizes 1 : 2 : 4 : …).
    #[arg(long, default_value_t = 4)]
    waves: usize,
    /// Each wave's soak, seconds.
    #[arg(long, default_value_t = 5)]
    soak_secs: u64,
    /// The fleet's disruption budget: at most this share of hosts activating or soaking at
    /// once, like `10%`; `none` dispatches every wave whole (the worst case for dispatch).
    #[arg(long, default_value = "10%")]
    max_in_flight: String,
    /// The coordinator's long-poll, seconds.
    #[arg(long, default_value_t = 60)]
    long_poll_secs: u64,
    /// How long the connected, idle fleet is watched, seconds (0: not at all).
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// Hosts that switch slowly: a count, or a share of the fleet like `1%`.
    #[arg(long, default_value = "1%")]
    slow: String,
    /// How long a slow host's switch takes, seconds.
    #[arg(long, default_value_t = 3)]
    slow_secs: u64,
    /// Hosts that fail the health gate's probe (the gate tolerates this many per wave).
    #[arg(long, default_value = "0.2%")]
    failing: String,
    /// Hosts that drop their connection when the rollout starts and rejoin later.
    #[arg(long, default_value = "0.5%")]
    offline: String,
    /// How long offline hosts stay away, seconds.
    #[arg(long, default_value_t = 10)]
    rejoin_secs: u64,
    /// Hosts created and enrolled at once (over the admin's and the hosts' own connections)
    /// before the agents start.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    enroll_concurrency: u16,
    /// Agents started per second during the ramp-up.
    #[arg(long, default_value_t = 500)]
    ramp_per_sec: usize,
    /// Split the simulated agents over this many child processes, each connecting from its
    /// own loopback address (127.0.0.11, .12, …), so that neither one process's open-files
    /// limit nor one address's ephemeral ports bound the fleet; 0 runs them in this process.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=64))]
    processes: u16,
    /// The longest a rollout may take to converge, seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Keep each run's directory (coordinator log, store) under this one, which must be empty
    /// or missing; by default they are temporary.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Also write the reports as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Exit 2 when a goal (every agent connected, dispatch p99 < 1 s, peak RSS < 300 MiB per
    /// 10,000 agents, idle CPU < 25 % of a core, a median under 4 KiB sent per host for its
    /// intent) is missed.
    #[arg(long)]
    check_goals: bool,
    /// The coordinator binary (default: beside this one).
    #[arg(long, value_name = "PATH")]
    coordinator: Option<PathBuf>,
    /// The agent binary the coordinator serves (default: beside this one).
    #[arg(long, value_name = "PATH")]
    agent: Option<PathBuf>,
}

/// `N` or `P%` of `agents`.
fn count(flag: &str, value: &str, agents: usize) -> anyhow::Result<usize> {
    match value.strip_suffix('%') {
        Some(p) => {
            let p: f64 = p.trim().parse().with_context(|| format!("--{flag} {value}: not a percentage"))?;
            anyhow::ensure!((0.0..=100.0).contains(&p), "--{flag} {value}: between 0% and 100%");
            Ok((agents as f64 * p / 100.0).round() as usize)
        }
        None => value.trim().parse().with_context(|| format!("--{flag} {value}: not a count (or a percentage like 1%)")),
    }
}

/// `P%` or `none`.
fn budget(value: &str) -> anyhow::Result<Option<u32>> {
    if value == "none" {
        return Ok(None);
    }
    let p = value.strip_suffix('%').and_then(|p| p.trim().parse::<u32>().ok());
    anyhow::ensure!(p.is_some_and(|p| (1..=100).contains(&p)), "--max-in-flight {value}: a percentage from 1% to 100%, or none");
    Ok(p)
}

fn beside_me(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find this executable")?;
    Ok(exe.parent().map(|d| d.join(name)).unwrap_or_default())
}

/// One goal: the name, whether it holds, and the figure.
fn goals(r: &Report) -> Vec<(&'static str, bool, String)> {
    vec![
        ("every agent held a long-poll", r.connected >= r.agents as u64, format!("{} of {}", r.connected, r.agents)),
        ("dispatch latency p99 < 1 s", r.dispatch_p99_ms < 1000.0, format!("{:.0} ms", r.dispatch_p99_ms)),
        // 300 MiB was the goal at 10,000 agents; a larger fleet gets as much per agent.
        (
            "coordinator peak RSS < 300 MiB per 10,000 agents",
            r.peak_rss_mib < 300.0 * (r.agents.max(10_000) as f64 / 10_000.0),
            format!("{:.0} MiB", r.peak_rss_mib),
        ),
        ("idle CPU < 25 % of a core", r.idle_cpu_pct < 25.0, format!("{:.1} %", r.idle_cpu_pct)),
        ("bytes per host for its intent, median < 4 KiB", r.bytes_per_host_p50 < 4096.0, format!("{:.0} B", r.bytes_per_host_p50)),
    ]
}

/// A run's column heading: agents, HTTP stack, the socket setting, and the store.
fn label(r: &Report) -> String {
    format!("{} / {} / {} / {}", r.agents, r.http, nodelay_str(r.tcp_nodelay), r.store)
}

/// The reports side by side, with each figure's ratio to the first run's.
fn table(reports: &[Report]) -> String {
    type Row = (&'static str, fn(&Report) -> f64, &'static str);
    let rows: [Row; 26] = [
        ("enroll (s)", |r| r.enroll_secs, "{:.1}"),
        ("ramp-up (s)", |r| r.ramp_secs, "{:.1}"),
        ("idle check-ins/s", |r| r.idle_checkins_per_sec, "{:.0}"),
        ("idle views from cache (%)", |r| r.idle_views_cached_pct, "{:.1}"),
        ("idle CPU (% of a core)", |r| r.idle_cpu_pct, "{:.1}"),
        ("idle RSS (MiB)", |r| r.idle_rss_mib, "{:.0}"),
        ("idle database CPU (%)", |r| r.idle_database_cpu_pct, "{:.1}"),
        ("idle CPU with database (%)", |r| r.idle_total_cpu_pct, "{:.1}"),
        ("rollout (s)", |r| r.rollout_secs, "{:.1}"),
        ("  beyond soak (s)", |r| r.beyond_soak_secs, "{:.1}"),
        ("rollout check-ins/s", |r| r.rollout_checkins_per_sec, "{:.0}"),
        ("rollout views from cache (%)", |r| r.rollout_views_cached_pct, "{:.1}"),
        ("rollout CPU (s)", |r| r.rollout_cpu_secs, "{:.1}"),
        ("rollout database CPU (s)", |r| r.rollout_database_cpu_secs, "{:.1}"),
        ("dispatch p50 (ms)", |r| r.dispatch_p50_ms, "{:.0}"),
        ("dispatch p99 (ms)", |r| r.dispatch_p99_ms, "{:.0}"),
        ("dispatch max (ms)", |r| r.dispatch_max_ms, "{:.0}"),
        ("bytes per host for its intent, p50", |r| r.bytes_per_host_p50, "{:.0}"),
        ("coordinator CPU, whole run (s)", |r| r.coordinator_cpu_secs, "{:.1}"),
        ("database CPU, whole run (s)", |r| r.database_cpu_secs, "{:.1}"),
        ("CPU with database, whole run (s)", |r| r.total_cpu_secs, "{:.1}"),
        ("peak RSS after enroll (MiB)", |r| r.enroll_peak_rss_mib, "{:.0}"),
        ("peak RSS after ramp-up (MiB)", |r| r.ramp_peak_rss_mib, "{:.0}"),
        ("coordinator peak RSS (MiB)", |r| r.peak_rss_mib, "{:.0}"),
        ("database PSS at the end (MiB)", |r| r.database_mib, "{:.0}"),
        ("events written", |r| r.events_written as f64, "{:.0}"),
    ];
    let fmt = |spec: &str, v: f64| if spec == "{:.1}" { format!("{v:.1}") } else { format!("{v:.0}") };
    let width = reports.iter().map(|r| label(r).len() + 2).max().unwrap_or(0).max(18);
    let mut out = format!("{:<32}", "agents / HTTP / NODELAY / store");
    for r in reports {
        out.push_str(&format!("{:>width$}", label(r)));
    }
    if reports.len() > 1 {
        out.push_str("   × first run (last / first)");
    }
    out.push('\n');
    for (name, get, spec) in rows {
        out.push_str(&format!("{name:<32}"));
        for r in reports {
            out.push_str(&format!("{:>width$}", fmt(spec, get(r))));
        }
        if let (Some(first), Some(last), true) = (reports.first(), reports.last(), reports.len() > 1) {
            let (a, b) = (get(first), get(last));
            out.push_str(&if a.abs() > f64::EPSILON { format!("   {:.2}×", b / a) } else { "   -".to_owned() });
        }
        out.push('\n');
    }
    out
}

fn fleet(args: FleetArgs) -> anyhow::Result<ExitCode> {
    let bins = Binaries {
        coordinator: args.coordinator.clone().map_or_else(|| beside_me("drover-coordinator"), Ok)?,
        agent: args.agent.clone().map_or_else(|| beside_me("drover-agent"), Ok)?,
        bench: std::env::current_exe().context("cannot find this executable")?,
    };
    for (what, path) in [("coordinator", &bins.coordinator), ("agent", &bins.agent)] {
        anyhow::ensure!(
            path.is_file(),
            "{}: the {what} binary is missing (build with `cargo build --release --bins`, or pass --{what})",
            path.display()
        );
    }
    match drover_engine::run::raise_open_files_limit() {
        // One connection per agent here, and as many in the coordinator (its own limit).
        // One connection per agent here (unless split over processes), and as many in the
        // coordinator (its own limit).
        Ok((soft, hard)) if hard < args.agents.iter().max().copied().unwrap_or(0) as u64 + 256 => {
            eprintln!("warning: open-files limit {hard} (was {soft}) may be too low for the largest fleet");
        }
        Ok(_) => {}
        Err(e) => eprintln!("warning: cannot raise the open-files limit: {e}"),
    }
    let https = args
        .http
        .iter()
        .map(|h| Http::parse(h).with_context(|| format!("--http {h}: expected 1.1, 2 or 1.1-hyper")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let nodelays = args
        .nodelay
        .iter()
        .map(|n| parse_nodelay(n).with_context(|| format!("--nodelay {n}: expected on or off")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let stores = args
        .store
        .iter()
        .map(|s| {
            StoreBackend::parse(s)
                .with_context(|| format!("--store {s}: expected sqlite or postgres-N (N replicas, 1 to {})", StoreBackend::MAX_REPLICAS))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let scenarios = args
        .agents
        .iter()
        .flat_map(|&agents| https.iter().map(move |&http| (agents, http)))
        .flat_map(|(agents, http)| nodelays.iter().map(move |&tcp_nodelay| (agents, http, tcp_nodelay)))
        .flat_map(|(agents, http, tcp_nodelay)| stores.iter().map(move |&store| (agents, http, tcp_nodelay, store)))
        .map(|(agents, http, tcp_nodelay, store)| {
            Ok(Scenario {
                http,
                tcp_nodelay,
                store,
                enroll_concurrency: usize::from(args.enroll_concurrency),
                agents,
                channels: args.channels,
                waves: args.waves,
                soak_secs: args.soak_secs,
                max_in_flight_pct: budget(&args.max_in_flight)?,
                long_poll_secs: args.long_poll_secs,
                idle_secs: args.idle_secs,
                slow: count("slow", &args.slow, agents)?,
                slow_secs: args.slow_secs,
                failing: count("failing", &args.failing, agents)?,
                offline: count("offline", &args.offline, agents)?,
                rejoin_secs: args.rejoin_secs,
                ramp_per_sec: args.ramp_per_sec,
                timeout_secs: args.timeout_secs,
                processes: usize::from(args.processes),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for s in &scenarios {
        s.validate()?;
    }
    let keep = args.dir.clone();
    if let Some(dir) = &keep {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
        anyhow::ensure!(std::fs::read_dir(dir)?.next().is_none(), "{}: not empty", dir.display());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    let mut reports = Vec::new();
    for s in &scenarios {
        let tmp = tempfile::tempdir().context("temporary directory")?;
        let dir = match &keep {
            Some(k) => {
                let mut name = format!("agents-{}-http{}-nodelay-{}", s.agents, s.http.as_str(), nodelay_str(s.tcp_nodelay));
                if s.store != StoreBackend::Sqlite {
                    name.push_str(&format!("-{}", s.store.as_string()));
                }
                k.join(name)
            }
            None => tmp.path().to_path_buf(),
        };
        std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
        let budget = s.max_in_flight_pct.map_or("no budget".to_owned(), |p| format!("at most {p}% in flight"));
        eprintln!(
            "== {} agents over HTTP/{}, TCP_NODELAY {}, store {}, {} channels, {} waves, {budget} ({} slow, {} failing, {} offline)",
            s.agents,
            s.http.as_str(),
            nodelay_str(s.tcp_nodelay),
            s.store.as_string(),
            s.channels,
            s.waves,
            s.slow,
            s.failing,
            s.offline
        );
        let agents = s.agents;
        let report = runtime.block_on(run(s, &bins, &dir, &mut |line| eprintln!("[{agents}] {line}"))).with_context(|| {
            let log = match s.store {
                StoreBackend::Sqlite => "coordinator/coordinator.log",
                StoreBackend::Postgres { .. } => "coordinator/r*.log",
            };
            format!("{agents} agents, store {} (log: {})", s.store.as_string(), dir.join(log).display())
        });
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                // The directory is the evidence: keep it.
                let _ = tmp.keep();
                return Err(e);
            }
        };
        if !report.refused.is_empty() {
            eprintln!("[{agents}] admission refused {} intents or tasks, e.g. {}", report.refused.len(), report.refused[0]);
        }
        reports.push(report);
    }
    println!("{}", table(&reports));
    let mut missed = false;
    for r in &reports {
        for (goal, met, figure) in goals(r) {
            println!(
                "{:>6} agents, HTTP/{}, TCP_NODELAY {}, {}: {goal}: {figure} — {}",
                r.agents,
                r.http,
                nodelay_str(r.tcp_nodelay),
                r.store,
                if met { "met" } else { "MISSED" }
            );
            missed |= !met;
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&reports)?).with_context(|| format!("{}", path.display()))?;
    }
    Ok(if missed && args.check_goals { ExitCode::from(2) } else { ExitCode::SUCCESS })
}

/// `swarm-part PLAN`: this process's share of the agents, until the parent says stop.
fn swarm_part(plan: &std::path::Path) -> anyhow::Result<ExitCode> {
    if let Err(e) = drover_engine::run::raise_open_files_limit() {
        eprintln!("warning: cannot raise the open-files limit: {e}");
    }
    let bytes = std::fs::read(plan).with_context(|| format!("{}", plan.display()))?;
    let plan: drover_tests::fleet::parts::PartPlan = serde_json::from_slice(&bytes).with_context(|| format!("{}", plan.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(drover_tests::fleet::parts::run_part(plan))?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Cmd::Fleet(args) => fleet(*args),
        Cmd::Anonymous(args) => anonymous(args),
        Cmd::SwarmPart { plan } => swarm_part(&plan),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("drover-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
