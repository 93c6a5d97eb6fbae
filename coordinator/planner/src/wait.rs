//! Why something did not advance in a tick, as a typed value: the planner's report says
//! what holds each host, rollout or channel (a budget, an edge, a soak, the health gate, a
//! hold…) with the figures that decide it, so the dashboard and `drover explain` render it
//! and tests match on the kind instead of on words. Its [`Display`](std::fmt::Display) is the
//! sentence the report has always carried (`Wait::reason`).

use std::fmt;

use drover_proto::names::RolloutId;
use drover_proto::states::RolloutState;
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};

/// Why a host, a rollout or a channel waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum WaitReason {
    /// A disruption budget is full.
    Budget {
        /// The budget's name.
        budget: String,
        /// Hosts in flight under it.
        in_flight: usize,
        /// How many it allows.
        allowed: usize,
    },
    /// A host edge: the predecessor has not converged.
    Edge {
        /// The host that must converge first.
        before: String,
    },
    /// The host's wave soaks until a time.
    Soak {
        /// The wave.
        wave: u32,
        /// Until when.
        until: Time,
    },
    /// The health gate: a required probe has not reported passed.
    Gate {
        /// The probe.
        probe: String,
    },
    /// A job holds the host.
    Hold {
        /// What holds it.
        by: String,
    },
    /// The host is in flight in another rollout.
    InFlightElsewhere {
        /// That rollout.
        rollout: RolloutId,
    },
    /// The host's wave has not started.
    Wave {
        /// The host's wave.
        wave: u32,
        /// The wave in progress.
        current: u32,
        /// Whether the host was skipped before.
        skipped: bool,
    },
    /// Dispatched, and not confirmed yet.
    Confirm {
        /// Activating since.
        since: Time,
        /// When the confirmation window ends.
        deadline: Time,
    },
    /// The host went offline while soaking: its health is unknown.
    OfflineWhileSoaking,
    /// A skipped host is offline.
    Offline,
    /// A skipped host will take the channel's current rollout.
    Skipped,
    /// The release timestamp is stale: no new dispatch until CI re-signs it.
    Stale {
        /// When it was signed.
        signed_at: Time,
        /// The channel's freshness window, seconds.
        window_secs: u64,
    },
    /// The rollout is halted.
    Halted {
        /// Since when.
        since: Time,
    },
    /// The channel's next ref waits behind its live rollout.
    Queued {
        /// The ref.
        target_ref: String,
        /// The rollout it waits behind.
        behind: RolloutId,
        /// That rollout's state.
        state: RolloutState,
    },
    /// A channel edge: the channel waits for another.
    ChannelEdge {
        /// The channel waited for.
        channel: String,
        /// What of it is live ("rollout X Active", "ref Y not yet rolled").
        held: String,
        /// The edge's reason, if it has one.
        because: String,
    },
    /// The rollout's manifest is missing.
    ManifestMissing {
        /// The rollout.
        rollout: RolloutId,
        /// Whether what waits is its stragglers (returning hosts) only.
        stragglers: bool,
    },
    /// A static compliance control failed, in observe mode (not enforced).
    Compliance {
        /// The rollout.
        rollout: RolloutId,
        /// The failed required controls.
        controls: Vec<String>,
    },
    /// The host is not in the rollout being reverted to.
    NotRevertable {
        /// The revert target.
        rollout: RolloutId,
    },
    /// The host is reverting and not confirmed yet.
    Reverting {
        /// The revert target.
        to: RolloutId,
    },
    /// The rollout reverts its touched hosts (rollback-and-halt).
    RollingBack {
        /// The revert target.
        to: RolloutId,
    },
}

impl WaitReason {
    /// The kind, as serialised (`budget`, `edge`, `soak`, `gate`, `hold`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            WaitReason::Budget { .. } => "budget",
            WaitReason::Edge { .. } => "edge",
            WaitReason::Soak { .. } => "soak",
            WaitReason::Gate { .. } => "gate",
            WaitReason::Hold { .. } => "hold",
            WaitReason::InFlightElsewhere { .. } => "inFlightElsewhere",
            WaitReason::Wave { .. } => "wave",
            WaitReason::Confirm { .. } => "confirm",
            WaitReason::OfflineWhileSoaking => "offlineWhileSoaking",
            WaitReason::Offline => "offline",
            WaitReason::Skipped => "skipped",
            WaitReason::Stale { .. } => "stale",
            WaitReason::Halted { .. } => "halted",
            WaitReason::Queued { .. } => "queued",
            WaitReason::ChannelEdge { .. } => "channelEdge",
            WaitReason::ManifestMissing { .. } => "manifestMissing",
            WaitReason::Compliance { .. } => "compliance",
            WaitReason::NotRevertable { .. } => "notRevertable",
            WaitReason::Reverting { .. } => "reverting",
            WaitReason::RollingBack { .. } => "rollingBack",
        }
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Budget { budget, in_flight, allowed } => write!(f, "budget {budget} {in_flight}/{allowed} in flight"),
            WaitReason::Edge { before } => write!(f, "edge predecessor {before} not converged"),
            WaitReason::Soak { wave, until } => write!(f, "wave {wave} soaking until {until}"),
            WaitReason::Gate { probe } => write!(f, "required probe {probe} has not reported passed"),
            WaitReason::Hold { by } => write!(f, "held by {by}"),
            WaitReason::InFlightElsewhere { rollout } => write!(f, "in flight in rollout {rollout}"),
            WaitReason::Wave { wave, current, skipped } => {
                let skipped = if *skipped { "skipped; " } else { "" };
                write!(f, "{skipped}waiting for wave {wave} (wave {current} in progress)")
            }
            WaitReason::Confirm { since, deadline } => {
                write!(f, "activating since {since} (awaiting confirmation; confirm deadline {deadline})")
            }
            WaitReason::OfflineWhileSoaking => f.write_str("offline while soaking; health unknown"),
            WaitReason::Offline => f.write_str("offline (skipped)"),
            WaitReason::Skipped => f.write_str("skipped; will take the channel's current rollout"),
            WaitReason::Stale { signed_at, window_secs } => {
                write!(f, "timestamp signed at {signed_at} is stale (window {window_secs}s); no new dispatch until CI re-signs")
            }
            WaitReason::Halted { since } => write!(f, "rollout halted since {since}; operator must resume, cancel or roll back"),
            WaitReason::Queued { target_ref, behind, state } => write!(f, "ref {target_ref} queued behind rollout {behind} ({state})"),
            WaitReason::ChannelEdge { channel, held, because } => {
                let because = if because.is_empty() { String::new() } else { format!("; {because}") };
                write!(f, "channel edge: waits for channel {channel} ({held}){because}")
            }
            WaitReason::ManifestMissing { rollout, stragglers } => {
                let what = if *stragglers { "its stragglers cannot advance" } else { "nothing can advance" };
                write!(f, "manifest of {rollout} missing; {what}")
            }
            WaitReason::Compliance { rollout, controls } => {
                let s = if controls.len() == 1 { "" } else { "s" };
                write!(f, "static compliance gate (observe, not enforced): required control{s} {} failed in {rollout}", controls.join(", "))
            }
            WaitReason::NotRevertable { rollout } => write!(f, "not in revertable rollout {rollout}; cannot revert"),
            WaitReason::Reverting { to } => write!(f, "reverting to {to} (awaiting confirmation)"),
            WaitReason::RollingBack { to } => write!(f, "rollback-and-halt: reverting touched hosts to {to}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_serialises_by_kind_with_its_figures_and_reads_back() {
        let r = WaitReason::Budget { budget: "gpu-a".into(), in_flight: 3, allowed: 3 };
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(v, serde_json::json!({ "kind": "budget", "budget": "gpu-a", "inFlight": 3, "allowed": 3 }));
        assert_eq!(serde_json::from_value::<WaitReason>(v).expect("back"), r);
        assert_eq!(r.to_string(), "budget gpu-a 3/3 in flight");
        let r = WaitReason::Wave { wave: 2, current: 1, skipped: true };
        assert_eq!(r.to_string(), "skipped; waiting for wave 2 (wave 1 in progress)");
        assert_eq!(
            serde_json::to_value(WaitReason::OfflineWhileSoaking).expect("json"),
            serde_json::json!({ "kind": "offlineWhileSoaking" })
        );
        assert!(serde_json::from_value::<WaitReason>(serde_json::json!({ "kind": "budget", "budget": "x" })).is_err());
        // `kind()` is the serialised tag, for every kind.
        let t = Time::from_unix(0).expect("time");
        let id = RolloutId::parse("gpu@c0ffee").expect("id");
        for r in [
            WaitReason::Edge { before: "a".into() },
            WaitReason::Soak { wave: 0, until: t },
            WaitReason::Gate { probe: "p".into() },
            WaitReason::Hold { by: "j".into() },
            WaitReason::InFlightElsewhere { rollout: id.clone() },
            WaitReason::Confirm { since: t, deadline: t },
            WaitReason::Offline,
            WaitReason::Skipped,
            WaitReason::Stale { signed_at: t, window_secs: 1 },
            WaitReason::Halted { since: t },
            WaitReason::Queued { target_ref: "r".into(), behind: id.clone(), state: RolloutState::Active },
            WaitReason::ChannelEdge { channel: "c".into(), held: "h".into(), because: String::new() },
            WaitReason::ManifestMissing { rollout: id.clone(), stragglers: false },
            WaitReason::Compliance { rollout: id.clone(), controls: vec!["x".into()] },
            WaitReason::NotRevertable { rollout: id.clone() },
            WaitReason::Reverting { to: id.clone() },
            WaitReason::RollingBack { to: id },
        ] {
            assert_eq!(serde_json::to_value(&r).expect("json")["kind"], r.kind(), "{r:?}");
        }
    }
}
