//! Planner benchmark: one `plan()` tick over fleets of 1k, 10k and 100k hosts (3 channels of
//! 4 waves, 20 fleet-wide disruption budgets, one active rollout per channel with 10 % of the
//! hosts in flight), against a baseline measured in the same run: cloning the `PlanInput` — a
//! walk over the same data that decides nothing (`plan` itself clones only the rollouts).
//!
//! Run: `cargo bench -p drover-planner --bench plan` (options after `--`: `--sizes 1000,10000`,
//! `--iters K` (default 11; the largest size runs at least 3), `--max-secs S` (default 60: stop
//! timing a size after S seconds and report the samples taken)).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use drover_planner::{
    ChannelInput, Connectivity, HostObserved, HostProgress, HostRolloutState as H, PlanInput, RolloutObserved, RolloutState, plan,
};
use drover_proto::artifacts::{FrozenBudget, HostSetEntry, ManifestWave, RevertableRollout, RolloutManifest};
use drover_proto::names::RolloutId;
use drover_proto::report::{ActivationPhase, ActivationStatus, ProbeOutcome};
use drover_proto::selector::Selector;
use drover_proto::spec::{HealthGate, OnHealthFailure};
use drover_proto::time::Time;

const CHANNELS: usize = 3;
const WAVES: u32 = 4;
const BUDGETS: usize = 20;

fn t(secs: i64) -> Time {
    Time::from_unix(1_800_000_000 + secs).expect("time")
}

/// Wave of host `i` (of its channel's `k`-th host out of `n`): 5 %, 15 %, 40 %, 40 %.
fn wave_of(k: usize, n: usize) -> u32 {
    match k * 100 / n.max(1) {
        0..=4 => 0,
        5..=19 => 1,
        20..=59 => 2,
        _ => 3,
    }
}

/// The fleet: `hosts` hosts round-robin over 3 channels; budget `b` covers the hosts with
/// `i % 20 == b` (a rack), capped at 10 % (`maxInFlightPct`). Each channel has an Active
/// rollout at `r2` (revertable `r1`): wave 0 converged; of wave 1 (15 % of the channel) two
/// thirds in flight (10 % of the fleet, half Activating awaiting confirmation, half Soaking
/// with probes passed, soak not over) and one third Pending — blocked by full budgets —;
/// waves 2 and 3 Pending. A tenth of a percent of hosts is held, a percent offline.
fn fleet(hosts: usize) -> PlanInput {
    let names: Vec<String> = (0..hosts).map(|i| format!("host-{i:06}")).collect();
    let budgets: Vec<FrozenBudget> = (0..BUDGETS)
        .map(|b| {
            let mut members: Vec<String> = names.iter().enumerate().filter(|(i, _)| i % BUDGETS == b).map(|(_, h)| h.clone()).collect();
            members.sort();
            FrozenBudget {
                selector: Selector { tags: Some(vec![format!("rack-{b:02}")]), ..Selector::default() },
                hosts: members,
                max_in_flight: None,
                max_in_flight_pct: Some(10),
            }
        })
        .collect();
    let mut input = PlanInput::empty();
    for (i, h) in names.iter().enumerate() {
        input.hosts.insert(
            h.clone(),
            HostObserved {
                last_checkin: Some(t(0)),
                connectivity: if i % 100 == 37 { Connectivity::Offline } else { Connectivity::Online },
                failed_units: 0,
                probes: BTreeMap::from([("ssh".to_owned(), ProbeOutcome::Passed)]),
                activation: None,
            },
        );
        if i % 1000 == 501 {
            input.held.insert(h.clone(), "job-7".to_owned());
        }
    }
    for c in 0..CHANNELS {
        let channel = format!("ch{c}");
        let mine: Vec<&String> = names.iter().enumerate().filter(|(i, _)| i % CHANNELS == c).map(|(_, h)| h).collect();
        let manifest = |r: &str| {
            let mut host_set: Vec<HostSetEntry> = mine
                .iter()
                .enumerate()
                .map(|(k, h)| HostSetEntry {
                    hostname: (*h).clone(),
                    wave_index: wave_of(k, mine.len()),
                    target_closure: format!("/nix/store/{r}-nixos-system-{h}"),
                })
                .collect();
            host_set.sort_by(|a, b| a.hostname.cmp(&b.hostname));
            RolloutManifest {
                schema_version: 1,
                rollout_id: RolloutId::new(&channel, r).expect("id"),
                channel: channel.clone(),
                channel_ref: r.to_owned(),
                fleet_resolved_hash: "0".repeat(64),
                created_at: t(-3600),
                host_set,
                waves: (0..WAVES).map(|i| ManifestWave { index: i, soak_secs: 900 }).collect(),
                health_gate: HealthGate { max_failed_units: 0, required_probes: vec!["ssh".to_owned()], max_failures: 2 },
                on_health_failure: OnHealthFailure::Halt,
                probes: vec![],
                compliance_frameworks: vec![],
                edges: vec![],
                disruption_budgets: budgets.clone(),
            }
        };
        let prev = manifest("r1");
        let cur = manifest("r2");
        let id = cur.rollout_id.clone();
        let sha = format!("{:064x}", c + 2);
        let mut progress = BTreeMap::new();
        let wave1: Vec<&String> = mine.iter().enumerate().filter(|(k, _)| wave_of(*k, mine.len()) == 1).map(|(_, h)| *h).collect();
        for (k, h) in mine.iter().enumerate() {
            if wave_of(k, mine.len()) == 0 {
                progress.insert(
                    (*h).clone(),
                    HostProgress { state: H::Converged, since: t(-1800), intent: Some(format!("/nix/store/r2-nixos-system-{h}")) },
                );
            }
        }
        let in_flight = wave1.len() * 2 / 3;
        for (j, h) in wave1.iter().take(in_flight).enumerate() {
            let target = format!("/nix/store/r2-nixos-system-{h}");
            let (state, phase) =
                if j % 2 == 0 { (H::Activating, ActivationPhase::AwaitingConfirm) } else { (H::Soaking, ActivationPhase::Confirmed) };
            progress.insert((*h).clone(), HostProgress { state, since: t(-60), intent: Some(target.clone()) });
            input.hosts.get_mut(*h).expect("host").activation = Some(ActivationStatus {
                intent_id: format!("intent-{h}"),
                rollout_id: id.clone(),
                target_closure: target,
                phase,
                message: String::new(),
            });
        }
        input.rollouts.insert(
            id.clone(),
            RolloutObserved { state: RolloutState::Active, since: t(-1800), manifest_sha256: sha.clone(), hosts: progress },
        );
        let prev_id = prev.rollout_id.clone();
        input.rollouts.insert(
            prev_id.clone(),
            RolloutObserved {
                state: RolloutState::Converged,
                since: t(-86_400),
                manifest_sha256: format!("{:064x}", c + 100),
                hosts: BTreeMap::new(),
            },
        );
        input.manifests.insert(prev_id.clone(), prev);
        input.last_rolled_ref.insert(channel.clone(), "r2".to_owned());
        input.channels.insert(
            channel,
            ChannelInput {
                manifest: cur,
                manifest_sha256: sha,
                revertable: vec![RevertableRollout { rollout_id: prev_id, manifest_sha256: format!("{:064x}", c + 100) }],
                signed_at: t(-60),
                freshness_window_secs: 3600,
                compliance: Default::default(),
            },
        );
    }
    input
}

/// Median of up to `iters` timed runs (after one warm-up), stopping after `max` elapsed.
fn median(iters: usize, max: Duration, mut f: impl FnMut()) -> (Duration, usize) {
    let start = Instant::now();
    f();
    let mut samples = Vec::new();
    while samples.len() < iters && (samples.is_empty() || start.elapsed() < max) {
        let t0 = Instant::now();
        f();
        samples.push(t0.elapsed());
    }
    samples.sort();
    (samples[samples.len() / 2], samples.len())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let sizes: Vec<usize> =
        opt("--sizes").map_or(vec![1_000, 10_000, 100_000], |s| s.split(',').map(|x| x.trim().parse().expect("size")).collect());
    let iters: usize = opt("--iters").and_then(|v| v.parse().ok()).unwrap_or(11).max(1);
    let max = Duration::from_secs(opt("--max-secs").and_then(|v| v.parse().ok()).unwrap_or(60));

    println!(
        "| hosts | in flight | pending blocked | actions | waits | baseline: clone PlanInput ms | plan ms | × baseline | plan growth per 10× | runs |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut prev: Option<(usize, f64)> = None;
    for &n in &sizes {
        let input = fleet(n);
        let now = t(0);
        let p = plan(&input, now);
        let in_flight =
            input.rollouts.values().flat_map(|r| r.hosts.values()).filter(|h| matches!(h.state, H::Activating | H::Soaking)).count();
        let budget_waits = p.report.iter().filter(|w| w.reason.starts_with("budget")).count();
        let (base, _) = median(iters, max, || {
            black_box(black_box(&input).clone());
        });
        let (planned, runs) = median(iters, max, || {
            black_box(plan(black_box(&input), now));
        });
        let growth = prev.map_or("—".to_owned(), |(pn, pms)| {
            let g = ms(planned) / pms;
            let per10 = g.powf(1.0 / ((n as f64 / pn as f64).log10()));
            format!("{per10:.1}×")
        });
        println!(
            "| {n} | {in_flight} | {budget_waits} | {} | {} | {:.3} | {:.3} | {:.1} | {growth} | {runs} |",
            p.actions.len(),
            p.report.len(),
            ms(base),
            ms(planned),
            ms(planned) / ms(base),
        );
        prev = Some((n, ms(planned)));
    }
}
