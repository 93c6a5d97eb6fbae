//! `drover rollout VERB ROLLOUT`: the operator's rollout actions against the coordinator's
//! admin routes `POST /v1/rollouts/{id}/<verb>` — halt, resume, cancel, rollback (each with a
//! required `--reason`, recorded in the events and the audit log) — and `status` (viewer),
//! the rollout with every host's state. ROLLOUT is a rollout id (`CHANNEL@REF`), a unique
//! prefix of one, or a channel, meaning its current rollout ([`crate::resolve`]): `drover
//! rollout status training`.
//!
//! The coordinator decides legality and answers a refusal with a 409 naming the states the
//! action needs (exit 65); a viewer certificate gets 403 (exit 77). On success an action
//! prints one line, `ROLLOUT_ID STATE`; `status` prints a table (`-o table|wide`: the rollout,
//! its current wave, how many hosts converged and were skipped; wide adds every host state's
//! count), the coordinator's JSON (`-o json`), or with `--watch` the live progress view of
//! [`crate::watch`].

use std::io::Write;

use clap::{Args, ValueEnum};
use drover_proto::api::rollouts::{RolloutStateResponse, RolloutStatus};
use drover_proto::states::HostRolloutState;
use serde::Serialize;
use serde_json::Value;

use crate::arg_checks::check_reason;
use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use crate::output::{Output, OutputArgs, age_of, clean, pretty, table};
use crate::watch::{RolloutProgress, progress_of, state_label};

/// What to do with a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Verb {
    /// Active, Converging or Reverting → Halted: nothing new is dispatched; in-flight hosts finish.
    Halt,
    /// Halted → Active (the health gate is evaluated again).
    Resume,
    /// Any live state → Cancelled; unconfirmed intents are withdrawn.
    Cancel,
    /// Active, Converging or Halted → Reverting: touched hosts go back to the channel's
    /// newest revertable rollout.
    Rollback,
    /// Print the rollout and its hosts' progress (viewer).
    Status,
}

impl Verb {
    fn path_segment(self) -> &'static str {
        match self {
            Verb::Halt => "halt",
            Verb::Resume => "resume",
            Verb::Cancel => "cancel",
            Verb::Rollback => "rollback",
            Verb::Status => "status",
        }
    }
}

/// Arguments of `drover rollout`.
#[derive(Args)]
pub struct RolloutArgs {
    /// What to do.
    #[arg(value_enum)]
    verb: Verb,
    /// The rollout: its id (CHANNEL@REF), a unique prefix of it, or a channel (the channel's
    /// newest live rollout, else its newest).
    #[arg(value_name = "ROLLOUT")]
    rollout: String,
    /// Why (required for every verb but `status`; recorded in the events and the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// With `status`: the live progress view (waves, hosts per state) until the rollout
    /// finishes or --timeout passes.
    #[arg(short = 'w', long)]
    watch: bool,
    /// With --watch: give up after this many seconds (exit 75).
    #[arg(long, value_name = "SECS", default_value_t = 3600, requires = "watch")]
    timeout: u64,
    /// With `status`: table, wide (adds every host state's count) or json (the coordinator's
    /// answer).
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Serialize)]
struct ActionRequest<'a> {
    reason: &'a str,
}

/// Runs `drover rollout`.
pub fn run(args: &RolloutArgs) -> Result<(), CliError> {
    let reason = match (args.verb, args.reason.as_deref()) {
        (Verb::Status, _) => None,
        (_, Some(r)) => Some(check_reason(r)?),
        (_, None) => return Err(CliError::usage("--reason must say why (it is recorded in the events and the audit log)")),
    };
    if args.watch && args.verb != Verb::Status {
        return Err(CliError::usage("--watch goes with `status` only"));
    }
    if args.output.output != Output::Table && args.verb != Verb::Status {
        return Err(CliError::usage("-o/--output goes with `status` only"));
    }
    let session = Session::open(&args.connect)?;
    let id = crate::resolve::rollout(&session, "ROLLOUT", &args.rollout)?;
    if args.watch {
        let opts = crate::watch::WatchOptions::new(Some(id), true, std::time::Duration::from_secs(args.timeout));
        return crate::watch::watch_stdout(&session, &opts);
    }
    let path = format!("/v1/rollouts/{id}/{}", args.verb.path_segment());
    let line = match reason {
        None => {
            let raw: Value = session.get(&path)?;
            let status: RolloutStatus = crate::answer::decode(&path, &raw)?;
            if args.output.output.is_json() {
                return crate::output::print(&pretty(&raw)?);
            }
            // Manifest hosts with no recorded state yet are Pending: without them the total
            // would count only the hosts already touched.
            let manifests = crate::watch::manifests(&session.client, &session.runtime);
            let progress = progress_of(&status, manifests.get(&id.to_string()));
            let now = crate::clock::now()?;
            return crate::output::print(&render_status(now, &status, &progress, args.output.output == Output::Wide));
        }
        Some(reason) => {
            let r: RolloutStateResponse = session.post(&path, &ActionRequest { reason })?;
            format!("{} {}", r.rollout_id, r.state)
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| CliError::new(codes::IO, format!("cannot write stdout: {e}")))
}

/// How many of `p`'s hosts are in `state`, over every wave.
fn count(p: &RolloutProgress, state: &str) -> usize {
    p.waves.iter().map(|w| w.counts.get(state).copied().unwrap_or(0)).sum()
}

/// The wave in progress: the first with a host neither Converged nor Skipped; `-` when
/// every wave is through (or the rollout has no hosts).
fn current_wave(p: &RolloutProgress) -> String {
    p.waves
        .iter()
        .find(|w| w.counts.iter().any(|(s, n)| *n > 0 && s != "Converged" && s != "Skipped"))
        .map_or_else(|| "-".to_owned(), |w| format!("{}/{}", w.index, p.waves.len()))
}

/// The `rollout status` table: one row for the rollout; `wide` adds the last change and the
/// count of every host state.
fn render_status(now: drover_proto::time::Time, status: &RolloutStatus, p: &RolloutProgress, wide: bool) -> String {
    let skipped = count(p, "Skipped");
    let total: usize = p.waves.iter().flat_map(|w| w.counts.values()).sum();
    let mut row = vec![
        clean(&p.rollout_id, 80),
        clean(&status.rollout.channel, 64),
        state_label(&p.state, skipped),
        current_wave(p),
        format!("{}/{total}", count(p, "Converged")),
        skipped.to_string(),
        age_of(now, status.rollout.opened_at),
    ];
    let mut header = vec!["ROLLOUT", "CHANNEL", "STATE", "WAVE", "HOSTS", "SKIPPED", "AGE"];
    if wide {
        let mut states: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
        for w in &p.waves {
            for (s, n) in &w.counts {
                *states.entry(s.clone()).or_default() += n;
            }
        }
        let known: Vec<&str> = HostRolloutState::ALL.iter().map(|s| s.as_str()).collect();
        let mut cells: Vec<String> = known.iter().filter_map(|k| states.get(*k).map(|n| format!("{k}={n}"))).collect();
        cells.extend(states.iter().filter(|(k, _)| !known.contains(&k.as_str())).map(|(k, n)| format!("{}={n}", clean(k, 32))));
        row.extend([age_of(now, status.rollout.updated_at), if cells.is_empty() { "-".to_owned() } else { cells.join(",") }]);
        header.extend(["CHANGED", "HOST-STATES"]);
    }
    table(&header, &[row])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn now() -> drover_proto::time::Time {
        drover_proto::time::Time::parse_lenient("2025-01-01T01:00:00Z").expect("time")
    }

    #[test]
    fn status_renders_one_row_with_wave_and_counts() {
        let host = |name: &str, wave: u32, state: &str| json!({"hostname": name, "waveIndex": wave, "state": state, "since": "2025-01-01T00:30:00Z"});
        let status: RolloutStatus = serde_json::from_value(json!({"rolloutId": "gpu@c0ffee", "channel": "gpu", "state": "Converged",
            "manifestSha256": "ab", "openedAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:58:00Z", "hosts": [
                host("a", 0, "Converged"), host("b", 0, "Skipped"), host("c", 1, "Converged")]}))
        .expect("a rollout status");
        let p = progress_of(&status, None);
        assert_eq!(
            render_status(now(), &status, &p, false),
            "ROLLOUT     CHANNEL  STATE                  WAVE  HOSTS  SKIPPED  AGE\n\
             gpu@c0ffee  gpu      Converged (1 skipped)  -     2/3    1        60m\n"
        );
        let wide = render_status(now(), &status, &p, true);
        assert!(wide.lines().next().expect("header").ends_with("AGE  CHANGED  HOST-STATES"), "{wide}");
        assert!(wide.contains("60m  2m       Converged=2,Skipped=1"), "{wide}");
        // A manifest host not yet touched counts as Pending and holds its wave open.
        let manifest = std::collections::BTreeMap::from([("d".to_owned(), 1)]);
        let p = progress_of(&status, Some(&manifest));
        let out = render_status(now(), &status, &p, false);
        assert!(out.contains("Converged (1 skipped)  1/2   2/4    1"), "{out}");
    }
}
