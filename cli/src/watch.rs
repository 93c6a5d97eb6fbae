//! The live progress view of rollouts (`drover get rollouts --watch`, `drover describe rollout
//! R --watch`, `drover rollout status R --watch`; also the entry point `drover dev` uses):
//! every rollout watched, its state, and per wave how many hosts are in each state, with a
//! bar.
//!
//! Entry point: [`watch_rollouts`]`(client, runtime, &WatchOptions, out)`. It polls
//! `GET /v1/rollouts` (or only `GET /v1/rollouts/{id}/status` for one rollout) and each
//! watched rollout's `/status` every `interval`, and
//! - with `redraw` (a terminal) clears the screen and redraws the frame ([`render`]);
//! - otherwise prints one line per rollout whose progress changed ([`summary_line`]), so a
//!   log or a pipe gets a readable history instead of escape codes.
//!
//! It returns `Ok` when every watched rollout is finished (Converged, Reverted, Failed,
//! Superseded, Cancelled, Pruned) and `until_done` is set, on SIGINT, or when `timeout`
//! passes without `until_done`; with `until_done`, a timeout is exit 75 (EX_TEMPFAIL).
//! Watching all rollouts watches those not finished at the start plus any opened later; when
//! none is in progress at the first poll it says so on stderr ([`NOTHING_TO_WATCH`]) and
//! returns at once (exit 0: nothing was asked to be awaited).
//!
//! Also the state label every rollout table shows ([`state_label`]: `Converged (2 skipped)`).
//!
//! The status route lists only hosts with a recorded state; the hosts still Pending come
//! from the rollout's manifest, read once from `GET /v1/plan-input`'s release files. Those
//! files are not verified here: they only count hosts on a screen (`drover plan` and
//! `explain` verify the release before believing it). Without a manifest (an old rollout no
//! longer in the latest release), only recorded hosts are counted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write;
use std::time::{Duration, Instant};

use drover_client::CoordinatorClient;
use drover_planner::observed::PlanInputResponse;
use drover_proto::api::Page;
use drover_proto::api::rollouts::{RolloutStatus, RolloutView};
use drover_proto::names::RolloutId;
use drover_proto::states::HostRolloutState;

use crate::client::Session;
use crate::exit::{CliError, codes};
use crate::output::clean;

/// What `--watch` says when it finds nothing to watch.
pub const NOTHING_TO_WATCH: &str = "drover: no rollout is in progress, so nothing was watched; a release's rollouts open a \
     moment after it is published: wait for them with `get rollouts --watch --release VERSION` or `release publish --wait`";

/// The width of a wave's bar, in characters.
const BAR: usize = 20;

/// A rollout's state as tables show it: `Converged (2 skipped)` when hosts were skipped, so a
/// rollout that converged without some of its hosts never reads as a complete one.
pub fn state_label(state: &str, skipped: usize) -> String {
    let state = clean(state, 32);
    if skipped == 0 { state } else { format!("{state} ({skipped} skipped)") }
}

/// What [`watch_rollouts`] watches and how it shows it.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// One rollout, or every rollout not finished (and any opened while watching).
    pub only: Option<RolloutId>,
    /// Return once every watched rollout is finished (else run until `timeout` or SIGINT).
    pub until_done: bool,
    /// How long to watch at most.
    pub timeout: Duration,
    /// Time between polls.
    pub interval: Duration,
    /// Clear the screen and redraw each frame (a terminal); else one line per change.
    pub redraw: bool,
}

impl WatchOptions {
    /// One-second polls, redrawing when stdout is a terminal.
    pub fn new(only: Option<RolloutId>, until_done: bool, timeout: Duration) -> WatchOptions {
        use std::io::IsTerminal as _;
        WatchOptions { only, until_done, timeout, interval: Duration::from_secs(1), redraw: std::io::stdout().is_terminal() }
    }
}

/// One wave's hosts, counted by state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaveProgress {
    /// The wave's index.
    pub index: u32,
    /// Host state (`Pending`, `Activating`, …) → how many hosts are in it.
    pub counts: BTreeMap<String, usize>,
}

impl WaveProgress {
    fn total(&self) -> usize {
        self.counts.values().sum()
    }
    fn count(&self, state: &str) -> usize {
        self.counts.get(state).copied().unwrap_or(0)
    }
}

/// One rollout's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloutProgress {
    /// `CHANNEL@REF`.
    pub rollout_id: String,
    /// Its state.
    pub state: String,
    /// Its waves, in order.
    pub waves: Vec<WaveProgress>,
}

/// What one frame shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// When it was taken (RFC 3339).
    pub at: String,
    /// The rollouts watched.
    pub rollouts: Vec<RolloutProgress>,
}

/// Whether a rollout in `state` is finished: nothing more will happen to it on its own.
pub fn is_finished(state: &str) -> bool {
    matches!(state, "Converged" | "Reverted" | "Failed" | "Superseded" | "Cancelled" | "Pruned")
}

/// Host states in the order the view lists them (the state machine's), unknown ones after.
fn ordered(counts: &BTreeMap<String, usize>) -> Vec<(&str, usize)> {
    let known: Vec<&str> = HostRolloutState::ALL.iter().map(|s| s.as_str()).collect();
    let mut out: Vec<(&str, usize)> = known.iter().filter_map(|k| counts.get(*k).filter(|n| **n > 0).map(|n| (*k, *n))).collect();
    out.extend(counts.iter().filter(|(k, n)| **n > 0 && !known.contains(&k.as_str())).map(|(k, n)| (k.as_str(), *n)));
    out
}

/// A wave's bar: `#` converged, `~` in flight (activating, soaking, deferred), `!` failed or
/// reverted, `-` the rest (pending, skipped).
pub fn bar(w: &WaveProgress) -> String {
    let total = w.total();
    if total == 0 {
        return format!("[{}]", " ".repeat(BAR));
    }
    let groups = [
        ('#', w.count("Converged")),
        ('~', w.count("Activating") + w.count("Soaking") + w.count("Deferred")),
        ('!', w.count("Failed") + w.count("Reverted")),
    ];
    let mut out = String::from("[");
    let (mut cum, mut drawn) = (0usize, 0usize);
    for (c, n) in groups {
        cum += n;
        // Cumulative rounding: the bar's segments always add up to its width.
        let end = (cum * BAR + total / 2) / total;
        out.extend(std::iter::repeat_n(c, end.saturating_sub(drawn)));
        drawn = drawn.max(end);
    }
    out.extend(std::iter::repeat_n('-', BAR.saturating_sub(drawn)));
    out.push(']');
    out
}

/// One frame of the view (pure: tests and `drover dev` render snapshots without a network).
pub fn render(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Rollouts at {}  (# converged, ~ in flight, ! failed, - pending)", clean(&snapshot.at, 40));
    if snapshot.rollouts.is_empty() {
        out.push_str("  no rollouts in progress\n");
    }
    for r in &snapshot.rollouts {
        let total: usize = r.waves.iter().map(WaveProgress::total).sum();
        let converged: usize = r.waves.iter().map(|w| w.count("Converged")).sum();
        let done = if is_finished(&r.state) { "  (finished)" } else { "" };
        let _ = writeln!(out, "{}  {}  {converged}/{total} hosts converged{done}", clean(&r.rollout_id, 80), clean(&r.state, 32));
        for w in &r.waves {
            let states: Vec<String> = ordered(&w.counts).iter().map(|(s, n)| format!("{} {n}", clean(s, 32))).collect();
            let _ = writeln!(out, "  wave {}  {}  {}/{}  {}", w.index, bar(w), w.count("Converged"), w.total(), states.join(", "));
        }
    }
    out
}

/// One rollout's progress on one line (the view when stdout is not a terminal).
pub fn summary_line(r: &RolloutProgress) -> String {
    let mut line = format!("{} {}", clean(&r.rollout_id, 80), clean(&r.state, 32));
    for w in &r.waves {
        let states: Vec<String> = ordered(&w.counts).iter().map(|(s, n)| format!("{}={n}", clean(s, 32))).collect();
        let _ = write!(line, " | wave {}: {}", w.index, if states.is_empty() { "-".to_owned() } else { states.join(" ") });
    }
    line
}

/// A rollout's progress from its `/status` answer and, when known, its manifest's hosts
/// (hostname → wave): manifest hosts with no recorded state count as Pending.
pub fn progress_of(status: &RolloutStatus, manifest: Option<&BTreeMap<String, u32>>) -> RolloutProgress {
    let mut waves: BTreeMap<u32, WaveProgress> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for h in &status.hosts {
        let wave = h.wave_index;
        let entry = waves.entry(wave).or_insert_with(|| WaveProgress { index: wave, ..Default::default() });
        *entry.counts.entry(h.state.as_str().to_owned()).or_default() += 1;
        seen.insert(h.hostname.as_str());
    }
    for (host, wave) in manifest.into_iter().flatten() {
        if !seen.contains(host.as_str()) {
            let entry = waves.entry(*wave).or_insert_with(|| WaveProgress { index: *wave, ..Default::default() });
            *entry.counts.entry("Pending".to_owned()).or_default() += 1;
        }
    }
    RolloutProgress {
        rollout_id: status.rollout.rollout_id.clone(),
        state: status.rollout.state.as_str().to_owned(),
        waves: waves.into_values().collect(),
    }
}

/// Each manifest of the coordinator's latest release (`rollouts/<id>.json` in
/// `GET /v1/plan-input`), as hostname → wave. Unverified: see the module doc.
pub fn manifests(client: &CoordinatorClient, rt: &tokio::runtime::Runtime) -> BTreeMap<String, BTreeMap<String, u32>> {
    let Ok(input) = rt.block_on(client.get_json::<PlanInputResponse>("/v1/plan-input")) else { return BTreeMap::new() };
    let mut out = BTreeMap::new();
    for (path, text) in &input.release {
        let Some(id) = path.strip_prefix("rollouts/").and_then(|p| p.strip_suffix(".json")) else { continue };
        let Ok(m) = serde_json::from_str::<drover_proto::artifacts::RolloutManifest>(text) else {
            continue;
        };
        out.insert(id.to_owned(), m.host_set.iter().map(|h| (h.hostname.clone(), h.wave_index)).collect());
    }
    out
}

/// The state the view keeps between polls.
#[derive(Default)]
struct Watcher {
    /// Rollouts watched (all mode): those unfinished at the start and any opened since.
    watched: BTreeSet<String>,
    /// Rollouts known at the start (all mode): finished ones among them are not shown.
    known_at_start: Option<BTreeSet<String>>,
    manifests: BTreeMap<String, BTreeMap<String, u32>>,
    manifests_tried: BTreeSet<String>,
    last_lines: BTreeMap<String, String>,
}

impl Watcher {
    /// Polls the coordinator once.
    fn poll(&mut self, client: &CoordinatorClient, rt: &tokio::runtime::Runtime, only: Option<&RolloutId>) -> Result<Snapshot, CliError> {
        let ids: Vec<String> = match only {
            Some(id) => vec![id.to_string()],
            None => {
                let rows = rt.block_on(client.get_json::<Page<RolloutView>>("/v1/rollouts"))?.items;
                let all: BTreeSet<String> = rows.iter().map(|r| r.rollout.rollout_id.clone()).collect();
                let start = self.known_at_start.get_or_insert_with(|| all.clone()).clone();
                for r in &rows {
                    if !is_finished(r.rollout.state.as_str()) || !start.contains(&r.rollout.rollout_id) {
                        self.watched.insert(r.rollout.rollout_id.clone());
                    }
                }
                self.watched.iter().filter(|id| all.contains(*id)).cloned().collect()
            }
        };
        let fresh: Vec<String> = ids.iter().filter(|id| !self.manifests_tried.contains(*id)).cloned().collect();
        if !fresh.is_empty() {
            self.manifests.extend(manifests(client, rt));
            self.manifests_tried.extend(fresh);
        }
        let mut rollouts = Vec::new();
        for id in &ids {
            let path = format!("/v1/rollouts/{}/status", crate::listing::encode(id));
            let status: RolloutStatus = rt.block_on(client.get_json(&path))?;
            rollouts.push(progress_of(&status, self.manifests.get(id)));
        }
        Ok(Snapshot { at: crate::clock::now()?.to_string(), rollouts })
    }

    /// Shows `snap`: the whole frame, or the lines that changed.
    fn show(&mut self, snap: &Snapshot, redraw: bool, out: &mut dyn Write) -> Result<(), CliError> {
        let text = if redraw {
            format!("\x1b[H\x1b[2J{}", render(snap))
        } else {
            let mut text = String::new();
            if snap.rollouts.is_empty() && self.last_lines.is_empty() {
                self.last_lines.insert(String::new(), String::new());
                let _ = writeln!(text, "{} no rollouts in progress", snap.at);
            }
            for r in &snap.rollouts {
                let line = summary_line(r);
                if self.last_lines.get(&r.rollout_id) != Some(&line) {
                    let _ = writeln!(text, "{} {line}", snap.at);
                    self.last_lines.insert(r.rollout_id.clone(), line);
                }
            }
            text
        };
        crate::output::write_to(out, &text)
    }
}

/// Watches rollouts until they finish, `timeout` passes or SIGINT, writing the view to
/// `out` (see the module doc). `client` and `rt` are the caller's: `drover dev` shares its
/// own. Call it outside any async context (it blocks on `rt`). It listens for SIGINT while it
/// runs (see [`crate::client::Interrupt`]): Ctrl-C ends the watch with `Ok`. Errors: a rollout
/// that does not exist is 65, a timeout with `until_done` 75, the coordinator unreachable 69
/// (after the first poll, unreachable polls are retried until the timeout), stdout 74.
pub fn watch_rollouts(
    client: &CoordinatorClient,
    rt: &tokio::runtime::Runtime,
    opts: &WatchOptions,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let started = Instant::now();
    let mut w = Watcher::default();
    let mut first = true;
    let mut sigint = crate::client::Interrupt::new(rt);
    loop {
        match w.poll(client, rt, opts.only.as_ref()) {
            Ok(snap) => {
                w.show(&snap, opts.redraw, out)?;
                if first && opts.until_done && opts.only.is_none() && snap.rollouts.is_empty() {
                    // Nothing was asked to be awaited and nothing is moving: say so, rather than
                    // let a CI gate read exit 0 as "watched and converged".
                    eprintln!("{}", NOTHING_TO_WATCH);
                    return Ok(());
                }
                let done = snap.rollouts.iter().all(|r| is_finished(&r.state));
                if opts.until_done && done {
                    return Ok(());
                }
            }
            Err(e) if e.code() == codes::UNAVAILABLE && !first => eprintln!("drover: {e} (retrying)"),
            Err(e) => return Err(e),
        }
        first = false;
        let left = opts.timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return if opts.until_done {
                Err(CliError::new(codes::TEMP_FAIL, format!("--watch: still not finished after {} s", opts.timeout.as_secs())))
            } else {
                Ok(())
            };
        }
        let pause = opts.interval.min(left);
        if sigint.sleep(rt, pause) {
            return Ok(());
        }
    }
}

/// [`watch_rollouts`] on a [`Session`], to stdout.
pub fn watch_stdout(s: &Session, opts: &WatchOptions) -> Result<(), CliError> {
    watch_rollouts(&s.client, &s.runtime, opts, &mut std::io::stdout().lock())
}

#[cfg(test)]
mod tests {

    use super::*;

    fn wave(index: u32, counts: &[(&str, usize)]) -> WaveProgress {
        WaveProgress { index, counts: counts.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect() }
    }

    #[test]
    fn skipped_hosts_show_beside_the_state() {
        assert_eq!(state_label("Converged", 0), "Converged");
        assert_eq!(state_label("Converged", 2), "Converged (2 skipped)");
        assert_eq!(state_label("Act\u{1b}[2Jive", 1), "Act [2Jive (1 skipped)");
    }

    #[test]
    fn bars_add_up_to_their_width() {
        assert_eq!(bar(&wave(0, &[("Converged", 1), ("Activating", 1)])), "[##########~~~~~~~~~~]");
        assert_eq!(bar(&wave(0, &[("Pending", 3)])), "[--------------------]");
        assert_eq!(bar(&wave(0, &[("Converged", 1), ("Failed", 1), ("Pending", 1)])), "[#######!!!!!!-------]");
        assert_eq!(bar(&wave(0, &[])), format!("[{}]", " ".repeat(20)));
        for n in 1..9 {
            let b = bar(&wave(0, &[("Converged", 1), ("Soaking", n), ("Reverted", 2), ("Skipped", 1)]));
            assert_eq!(b.chars().count(), 22, "{b}");
        }
    }

    #[test]
    fn a_frame_shows_rollouts_waves_and_states() {
        let snap = Snapshot {
            at: "2025-01-01T00:00:00Z".into(),
            rollouts: vec![
                RolloutProgress {
                    rollout_id: "gpu@c0ffee".into(),
                    state: "Active".into(),
                    waves: vec![wave(0, &[("Converged", 1), ("Soaking", 1)]), wave(1, &[("Pending", 2)])],
                },
                RolloutProgress { rollout_id: "infra@c0ffee".into(), state: "Converged".into(), waves: vec![wave(0, &[("Converged", 1)])] },
            ],
        };
        assert_eq!(
            render(&snap),
            "Rollouts at 2025-01-01T00:00:00Z  (# converged, ~ in flight, ! failed, - pending)\n\
             gpu@c0ffee  Active  1/4 hosts converged\n\
             \x20 wave 0  [##########~~~~~~~~~~]  1/2  Soaking 1, Converged 1\n\
             \x20 wave 1  [--------------------]  0/2  Pending 2\n\
             infra@c0ffee  Converged  1/1 hosts converged  (finished)\n\
             \x20 wave 0  [####################]  1/1  Converged 1\n"
        );
        assert!(render(&Snapshot::default()).contains("no rollouts in progress"));
        assert_eq!(summary_line(&snap.rollouts[0]), "gpu@c0ffee Active | wave 0: Soaking=1 Converged=1 | wave 1: Pending=2");
    }

    #[test]
    fn manifest_hosts_without_a_state_are_pending() {
        let rollout = crate::fixtures::rollout("gpu@c0ffee", drover_proto::states::RolloutState::Active).rollout;
        let host = drover_proto::api::rollouts::RolloutHostView {
            hostname: "a".to_owned(),
            wave_index: 0,
            state: HostRolloutState::Activating,
            since: crate::fixtures::at(0),
            intent_target: None,
        };
        let status = RolloutStatus { rollout, hosts: vec![host] };
        let manifest = BTreeMap::from([("a".to_owned(), 0), ("b".to_owned(), 0), ("c".to_owned(), 1)]);
        let p = progress_of(&status, Some(&manifest));
        assert_eq!(p.waves, vec![wave(0, &[("Activating", 1), ("Pending", 1)]), wave(1, &[("Pending", 1)])]);
        assert_eq!(progress_of(&status, None).waves, vec![wave(0, &[("Activating", 1)])]);
        assert!(is_finished("Converged") && is_finished("Cancelled") && !is_finished("Halted") && !is_finished("Active"));
    }

    #[test]
    fn lines_are_printed_only_when_progress_changes() {
        let mut w = Watcher::default();
        let snap = Snapshot {
            at: "t1".into(),
            rollouts: vec![RolloutProgress { rollout_id: "r@1".into(), state: "Active".into(), waves: vec![wave(0, &[("Pending", 1)])] }],
        };
        let mut out = Vec::new();
        w.show(&snap, false, &mut out).expect("show");
        w.show(&Snapshot { at: "t2".into(), ..snap.clone() }, false, &mut out).expect("show");
        assert_eq!(String::from_utf8(out).expect("utf8"), "t1 r@1 Active | wave 0: Pending=1\n");
        let mut out = Vec::new();
        w.show(&snap, true, &mut out).expect("show");
        assert!(String::from_utf8(out).expect("utf8").starts_with("\x1b[H\x1b[2JRollouts at t1"));
    }
}
