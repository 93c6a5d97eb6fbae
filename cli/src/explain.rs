//! `drover explain host H [--trust FILE] [--now RFC3339] [-o json]`: why a host is, or is not,
//! on its channel's target — from the planner's own report.
//!
//! It does what `drover plan --from-coordinator` does — `GET /v1/plan-input`, verify the
//! release, join it with the observed state, run the planner (`drover-planner`) at the
//! coordinator's clock — and then picks out the one host: its channel, the channel's current
//! target (rollout, wave, closure), what it runs (its last check-in's generation and
//! activation report), its state in the target's rollout, and the plan's actions for it and
//! the report's reasons it (or its rollout, or its channel) waits.
//!
//! The release is verified against `--trust` when given. Without it, against the trust.json
//! the coordinator serves (`GET /v1/trust.json`), and the output says so: explaining is a
//! read-only diagnosis, and an operator should not need the CI trust file at hand for it;
//! deciding anything on a release still goes through `drover plan --trust` or `verify`.
//!
//! An unknown host (in no manifest and unknown to the coordinator) is 65.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use drover_planner::action::{Action, Wait};
use drover_planner::observed::{PlanInputResponse, plan_input};
use drover_proto::api::events::EventView;
use drover_proto::api::hosts::{HostDetail, HostView};
use drover_proto::names::RolloutId;
use drover_proto::release::{ReleaseFiles, verify_release};
use drover_proto::report::ActivationStatus;
use drover_proto::time::Time;
use drover_proto::trust::TrustRoots;
use drover_proto::verify::{VerifyContext, VerifyError};
use serde::Serialize;
use serde_json::Value;

use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use crate::listing::all_hosts;
use crate::output::{OutputArgs, clean, pretty, print};
use crate::resolve::HostName;

/// Arguments of `drover explain`.
#[derive(Args)]
pub struct ExplainArgs {
    #[command(subcommand)]
    what: ExplainWhat,
}

#[derive(Subcommand)]
enum ExplainWhat {
    /// Why a host is or is not on its channel's target: its rollout state and the planner's
    /// reasons (hostname or host id).
    Host(HostArgs),
}

/// Arguments of `drover explain host`.
#[derive(Args)]
struct HostArgs {
    /// The host: its hostname or its id.
    host: String,
    /// Trust roots to verify the release against (default: the coordinator's trust.json).
    #[arg(long, value_name = "FILE")]
    trust: Option<PathBuf>,
    /// Plan at this instant (RFC 3339) instead of the coordinator's clock.
    #[arg(long, value_name = "RFC3339")]
    now: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// The host's place in its channel's target.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TargetView {
    /// The channel's current rollout, `CHANNEL@REF`.
    pub rollout_id: RolloutId,
    /// The host's wave in it.
    pub wave_index: u32,
    /// The closure it must run.
    pub target_closure: String,
}

/// The host's state in the target's rollout.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    /// The rollout's state.
    pub state: String,
    /// The host's state in it (`Pending` when it has none recorded yet).
    pub host_state: String,
    /// Since when (absent for Pending).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}

/// Everything `explain host` says, as `-o json` prints it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The hostname.
    pub host: String,
    /// Its id on the coordinator (absent: in the release, never enrolled).
    pub host_id: Option<String>,
    /// Its lifecycle state on the coordinator.
    pub lifecycle: Option<String>,
    /// online | offline, as the planner sees it (absent: never checked in).
    pub connectivity: Option<String>,
    /// Its last check-in.
    pub last_checkin: Option<Time>,
    /// The generation it reported running.
    pub running: Option<String>,
    /// Its last activation report.
    pub activation: Option<ActivationStatus>,
    /// Held by a job or maintenance request: why.
    pub held: Option<String>,
    /// Its channel (absent: in no channel of the release).
    pub channel: Option<String>,
    /// The channel's current target for it.
    pub target: Option<TargetView>,
    /// Its state in the target's rollout (absent: that rollout is not opened).
    pub rollout: Option<RolloutView>,
    /// Whether it has converged on the target.
    pub on_target: bool,
    /// One sentence: where it stands.
    pub verdict: String,
    /// What the planner would do about it now.
    pub planned: Vec<Action>,
    /// Why it (its rollout, its channel) waits, from the planner's report.
    pub waits: Vec<Wait>,
    /// When its state in the target's rollout is `Skipped`: why the planner skipped it (the
    /// reason of the `rollout.host` event that moved it there), with when. A skipped host of a
    /// finished rollout is in no wait of the planner's report, so only the event says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The instant planned at.
    pub now: Time,
    /// The release planned against.
    pub release_version: u64,
    /// What the release was verified against: a file, or the coordinator's trust.json.
    pub verified_against: String,
}

/// What the coordinator knows of the host (from its listing).
#[derive(Debug, Default, Clone)]
pub struct HostRecord {
    /// Its id.
    pub id: Option<String>,
    /// Its lifecycle state.
    pub lifecycle: Option<String>,
    /// Its reported generation.
    pub running: Option<String>,
}

/// Whether an action concerns `host` in `channel` (`rollout`: its target's rollout).
fn action_concerns(a: &Action, host: &str, channel: &str, rollout: Option<&RolloutId>) -> bool {
    match a {
        Action::Dispatch { host: h, .. } | Action::HostTransition { host: h, .. } | Action::Rollback { host: h, .. } => h == host,
        Action::RolloutTransition { rollout_id, .. } | Action::OpenRollout { rollout_id, .. } => Some(rollout_id) == rollout,
        Action::RolloutDeferred { channel: c, .. } | Action::RefSuperseded { channel: c, .. } | Action::ReleaseStale { channel: c, .. } => {
            c == channel
        }
    }
}

/// Whether a report line concerns `host`: about it, or about its rollout or channel as a whole.
fn wait_concerns(w: &Wait, host: &str, channel: &str, rollout: Option<&RolloutId>) -> bool {
    match (&w.host, &w.rollout_id) {
        (Some(h), _) => h == host,
        (None, Some(r)) => Some(r) == rollout,
        (None, None) => w.channel == channel,
    }
}

/// Explains `host` from a planned snapshot (pure: unit-tested without a coordinator).
pub fn explain(
    host: &str,
    record: &HostRecord,
    input: &drover_planner::input::PlanInput,
    plan: &drover_planner::action::Plan,
    now: Time,
    release_version: u64,
    verified_against: String,
) -> Explanation {
    let observed = input.hosts.get(host);
    let found = input.channels.iter().find_map(|(name, ch)| ch.manifest.host(host).map(|e| (name.clone(), ch, e)));
    let mut x = Explanation {
        host: host.to_owned(),
        host_id: record.id.clone(),
        lifecycle: record.lifecycle.clone(),
        connectivity: observed.map(|o| if o.is_online() { "online" } else { "offline" }.to_owned()),
        last_checkin: observed.and_then(|o| o.last_checkin),
        running: record.running.clone(),
        activation: observed.and_then(|o| o.activation.clone()),
        held: input.held.get(host).cloned(),
        channel: None,
        target: None,
        rollout: None,
        on_target: false,
        verdict: String::new(),
        planned: Vec::new(),
        waits: Vec::new(),
        skipped: None,
        now,
        release_version,
        verified_against,
    };
    let Some((channel, ch, entry)) = found else {
        x.verdict = format!("in no channel of release {release_version}: there is nothing to roll to it");
        return x;
    };
    let rid = ch.manifest.rollout_id.clone();
    x.target = Some(TargetView { rollout_id: rid.clone(), wave_index: entry.wave_index, target_closure: entry.target_closure.clone() });
    x.planned = plan.actions.iter().filter(|a| action_concerns(a, host, &channel, Some(&rid))).cloned().collect();
    x.waits = plan.report.iter().filter(|w| wait_concerns(w, host, &channel, Some(&rid))).cloned().collect();
    x.verdict = match input.rollouts.get(&rid) {
        None => format!("not on target: the channel's target {rid} has no rollout opened yet"),
        Some(r) => {
            let progress = r.hosts.get(host);
            let host_state = progress.map_or("Pending", |p| p.state.as_str());
            x.rollout = Some(RolloutView {
                state: r.state.as_str().to_owned(),
                host_state: host_state.to_owned(),
                since: progress.map(|p| p.since),
            });
            x.on_target = host_state == "Converged";
            if x.on_target {
                format!("on target: Converged in {rid} (rollout {})", r.state.as_str())
            } else {
                format!("not on target: {host_state} in {rid} (rollout {})", r.state.as_str())
            }
        }
    };
    x.channel = Some(channel);
    x
}

/// The human view of an explanation.
pub fn render(x: &Explanation) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let t = |s: &str| clean(s, 300);
    let mut line = |name: &str, value: String| {
        let _ = writeln!(out, "{:<13}{value}", format!("{name}:"));
    };
    let mut about = vec![x.lifecycle.clone().unwrap_or_else(|| "not enrolled".to_owned())];
    about.extend(x.connectivity.clone());
    if let Some(at) = x.last_checkin {
        about.push(format!("last check-in {at}"));
    }
    line("Host", format!("{} ({})", t(&x.host), t(&about.join(", "))));
    if let Some(id) = &x.host_id {
        line("ID", t(id));
    }
    line("Channel", t(x.channel.as_deref().unwrap_or("-")));
    if let Some(target) = &x.target {
        line("Target", format!("{} wave {} {}", target.rollout_id, target.wave_index, t(&target.target_closure)));
    }
    line("Runs", t(x.running.as_deref().unwrap_or("unknown (no generation reported)")));
    if let Some(a) = &x.activation {
        line(
            "Activation",
            format!(
                "{:?} of {} for {}{}",
                a.phase,
                t(&a.target_closure),
                a.rollout_id,
                if a.message.is_empty() { String::new() } else { format!(": {}", t(&a.message)) }
            ),
        );
    }
    if let Some(r) = &x.rollout {
        let since = r.since.map(|s| format!(" since {s}")).unwrap_or_default();
        line("Rollout", format!("{}; this host {}{since}", t(&r.state), t(&r.host_state)));
    }
    if let Some(h) = &x.held {
        line("Held", t(h));
    }
    line("Verdict", t(&x.verdict));
    if let Some(why) = &x.skipped {
        line("Skipped", t(why));
    }
    out.push_str("Planned now:\n");
    if x.planned.is_empty() {
        out.push_str("  (nothing)\n");
    }
    for a in &x.planned {
        let what = serde_json::to_value(a).ok().and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned)).unwrap_or_default();
        let _ = writeln!(out, "  - {}: {}", t(&what), t(a.reason()));
    }
    out.push_str("Waiting because:\n");
    if x.waits.is_empty() {
        out.push_str(if x.skipped.is_some() {
            "  (nothing in the planner's report: skipped hosts wait for nothing; see Skipped)\n"
        } else {
            "  (nothing: the planner reports no wait)\n"
        });
    }
    for w in &x.waits {
        let about = match (&w.host, &w.rollout_id) {
            (Some(_), _) => "host".to_owned(),
            (None, Some(r)) => format!("rollout {r}"),
            (None, None) => format!("channel {}", t(&w.channel)),
        };
        let _ = writeln!(out, "  - [{about}] {} ({})", t(&w.reason), w.why.kind());
    }
    let _ = writeln!(out, "Planned at {} against release {} ({}).", x.now, x.release_version, t(&x.verified_against));
    out
}

/// Runs `drover explain`.
pub fn run(args: &ExplainArgs) -> Result<(), CliError> {
    let ExplainWhat::Host(a) = &args.what;
    let s = Session::open(&a.connect)?;
    let live: PlanInputResponse = s.get("/v1/plan-input")?;
    let (trust_bytes, verified_against) = match &a.trust {
        Some(p) => (crate::fsio::read_file(p)?, format!("verified against {}", p.display())),
        None => (s.get_bytes("/v1/trust.json")?, "verified against the coordinator's trust.json; pass --trust to use your own".to_owned()),
    };
    let trust = TrustRoots::from_json(&trust_bytes).map_err(|e| {
        let ve = VerifyError::from(e);
        CliError::data(format!("trust roots ({}): {ve}", ve.rule()))
    })?;
    let now = match &a.now {
        Some(given) => crate::clock::given_or_now("--now", Some(given))?,
        None => live.now,
    };
    let files = ReleaseFiles { files: live.release.into_iter().map(|(p, t)| (p, t.into_bytes())).collect() };
    let release = verify_release(&files, &trust, &VerifyContext::at(now)).map_err(|e| {
        CliError::refused(format!("REFUSED the coordinator's release version {} ({}): {e}", live.release_version, e.rule()))
    })?;
    let input = plan_input(&release, live.observed).map_err(|e| CliError::data(format!("the coordinator's observed state: {e}")))?;
    let plan = drover_planner::plan(&input, now);

    // The host by id or by name; a name in a manifest but unknown to the coordinator is
    // still explained (it was never enrolled).
    let (hostname, record) = match HostName::parse("HOST", &a.host)? {
        HostName::Id(_) => {
            let host = crate::resolve::host(&s, "HOST", &a.host)?;
            (host.hostname, record_of(&s.get::<HostDetail>(&format!("/v1/hosts/{}", host.id))?.host))
        }
        HostName::Name(name) => {
            let listed = all_hosts(&s)?.into_iter().find(|h| h.hostname == name);
            let record = listed.as_ref().map(record_of).unwrap_or_default();
            (name, record)
        }
    };
    let in_release = input.channels.values().any(|c| c.manifest.host(&hostname).is_some());
    if record.id.is_none() && !in_release && !input.hosts.contains_key(&hostname) {
        return Err(CliError::data(format!(
            "unknown host {:?}: not on the coordinator and in no channel of the release",
            clean(&a.host, 80)
        )));
    }
    let mut x = explain(&hostname, &record, &input, &plan, now, live.release_version, verified_against);
    if let (Some(id), Some(target)) = (&x.host_id, &x.target)
        && x.rollout.as_ref().is_some_and(|r| r.host_state == "Skipped")
    {
        let q = [("host", id.clone()), ("rollout", target.rollout_id.to_string()), ("kind", "rollout.host".to_owned())];
        let events = crate::answer::decode_all("/v1/events", &crate::listing::list_all(&s, "/v1/events", &q, None)?)?;
        x.skipped = Some(skip_reason(&events, target.rollout_id.as_str()));
    }
    if a.output.output.is_json() {
        let v = serde_json::to_value(&x).map_err(|e| CliError::new(codes::SOFTWARE, format!("internal error: {e}")))?;
        return print(&pretty(&v)?);
    }
    print(&render(&x))
}

/// Why a host was skipped in rollout `rollout_id`, from its `rollout.host` events (oldest
/// first): the reason of the latest one that moved it to `Skipped`, with when.
pub fn skip_reason(events: &[EventView], rollout_id: &str) -> String {
    // `data` is the kind's own detail: a `rollout.host` event's carries its transition and why.
    let text = |e: &EventView, k: &str| e.data.get(k).and_then(Value::as_str).map(str::to_owned);
    let skip = events
        .iter()
        .rev()
        .find(|e| e.rollout_id.as_deref() == Some(rollout_id) && text(e, "transition").is_some_and(|t| t.ends_with("-> Skipped")));
    match skip {
        Some(e) => {
            let reason = text(e, "reason").unwrap_or_else(|| e.message.clone());
            format!("{} (at {}, event {})", if reason.is_empty() { "no reason recorded" } else { &reason }, e.at, e.id)
        }
        None => "no event records why (the events may have been pruned)".to_owned(),
    }
}

/// What the listing or `GET /v1/hosts/{id}` says of a host.
fn record_of(h: &HostView) -> HostRecord {
    HostRecord {
        id: Some(h.id.clone()),
        lifecycle: Some(h.state.as_str().to_owned()),
        running: h.last_checkin.as_ref().and_then(|c| c.current_generation.clone()),
    }
}

#[cfg(test)]
#[path = "explain_tests.rs"]
mod tests;
