//! The state enums every component shares, with stable string forms and their
//! legal-transition tables. Storage, the API, metrics and the planner all use these strings,
//! so they never change once released.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A state name that is not one of the enum's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} state {value:?}")]
pub struct UnknownState {
    /// Which enum.
    pub kind: &'static str,
    /// The text given.
    pub value: String,
}

/// A transition the table does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal {kind} transition {from} -> {to}")]
pub struct IllegalTransition {
    /// Which enum.
    pub kind: &'static str,
    /// From.
    pub from: &'static str,
    /// To.
    pub to: &'static str,
}

macro_rules! state_enum {
    (
        $(#[$doc:meta])* $name:ident, $kind:literal {
            $( $(#[$vdoc:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
        transitions { $( $from:ident => [ $($to:ident),* ] ),* $(,)? }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$vdoc])* $variant ),+
        }

        impl $name {
            /// Every state, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant ),+ ];

            /// The stable string form.
            pub const fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $text ),+ }
            }

            /// The states reachable in one legal step.
            pub fn successors(self) -> &'static [$name] {
                #[allow(unreachable_patterns)]
                match self {
                    $( $name::$from => &[ $( $name::$to ),* ], )*
                    _ => &[],
                }
            }

            /// Whether `self -> to` is legal.
            pub fn can_transition_to(self, to: $name) -> bool {
                self.successors().contains(&to)
            }

            /// `Ok(to)` when legal, else the typed refusal.
            pub fn transition(self, to: $name) -> Result<$name, IllegalTransition> {
                if self.can_transition_to(to) {
                    Ok(to)
                } else {
                    Err(IllegalTransition { kind: $kind, from: self.as_str(), to: to.as_str() })
                }
            }

            /// True when no transition leaves the state.
            pub fn is_terminal(self) -> bool {
                self.successors().is_empty()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownState;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $text => Ok($name::$variant), )+
                    _ => Err(UnknownState { kind: $kind, value: s.to_owned() }),
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        #[cfg(feature = "schema")]
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string", "enum": [ $( $text ),+ ] })
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

state_enum! {
    /// A rollout's lifecycle (RFC-0008 shape; DESIGN's names).
    RolloutState, "rollout" {
        /// Opened; manifest being verified and static gate evaluated.
        Opening = "Opening",
        /// Waves executing.
        Active = "Active",
        /// Last wave promoted; stragglers finishing.
        Converging = "Converging",
        /// Every host done.
        Converged = "Converged",
        /// Frozen by the health gate or an operator.
        Halted = "Halted",
        /// rollback-and-halt in progress.
        Reverting = "Reverting",
        /// Every touched host back on the previous rollout.
        Reverted = "Reverted",
        /// Blocked: static gate failed, manifest missing or bad.
        Failed = "Failed",
        /// A newer ref of the channel took over.
        Superseded = "Superseded",
        /// Cancelled by an operator.
        Cancelled = "Cancelled",
        /// Garbage-collected from history.
        Pruned = "Pruned",
    }
    transitions {
        Opening => [Active, Failed, Cancelled, Superseded],
        Active => [Converging, Halted, Reverting, Cancelled, Superseded],
        Converging => [Converged, Halted, Reverting, Cancelled, Superseded],
        Halted => [Active, Reverting, Cancelled, Superseded],
        Reverting => [Reverted, Halted],
        Converged => [Superseded, Pruned],
        Reverted => [Pruned],
        Failed => [Pruned],
        Superseded => [Pruned],
        Cancelled => [Pruned],
    }
}

state_enum! {
    /// A wave inside an active rollout.
    WaveState, "wave" {
        /// Not started.
        Pending = "Pending",
        /// Hosts being dispatched.
        WaveActive = "WaveActive",
        /// All online hosts done; soak timer running.
        WaveSoaking = "WaveSoaking",
        /// Soak passed; the next wave may start.
        WavePromoted = "WavePromoted",
    }
    transitions {
        Pending => [WaveActive],
        WaveActive => [WaveSoaking],
        WaveSoaking => [WavePromoted, WaveActive],
    }
}

state_enum! {
    /// One host's participation in one rollout (RFC-0005 shape).
    HostRolloutState, "host rollout" {
        /// Waiting for its wave, an edge or a budget slot.
        Pending = "Pending",
        /// Intent dispatched; switching and confirming.
        Activating = "Activating",
        /// Switched and confirmed; soaking under the health gate.
        Soaking = "Soaking",
        /// Done.
        Converged = "Converged",
        /// Failed the health gate.
        Failed = "Failed",
        /// Back on the previous target.
        Reverted = "Reverted",
        /// Staged for next boot (kernel/init/systemd/dbus change); done for promotion.
        Deferred = "Deferred",
        /// Offline when its wave ran.
        Skipped = "Skipped",
    }
    transitions {
        Pending => [Activating, Skipped],
        Activating => [Soaking, Deferred, Failed, Reverted],
        Soaking => [Converged, Failed, Reverted],
        Converged => [Reverted],
        Deferred => [Converged, Reverted],
        Failed => [Reverted],
        Skipped => [Activating],
    }
}

state_enum! {
    /// The coarse host lifecycle of `node-state-model.md` §3.
    HostLifecycle, "host lifecycle" {
        /// Bootstrap token issued; not enrolled yet.
        BootstrapIssued = "bootstrap_issued",
        /// Enrollment in progress.
        Enrolling = "enrolling",
        /// Healthy and reporting.
        Active = "active",
        /// Expected but silent.
        Offline = "offline",
        /// Blocked pending investigation.
        Quarantined = "quarantined",
        /// Drain in progress.
        Draining = "draining",
        /// Out of service, identity kept.
        Retired = "retired",
        /// Uninstall in progress.
        Removing = "removing",
        /// Gone; the id is never reused.
        Deleted = "deleted",
    }
    transitions {
        // A host that never enrolled (a typo, an expired token) can be deleted outright:
        // nothing was installed, so there is nothing to drain or uninstall.
        BootstrapIssued => [Enrolling, Deleted],
        Enrolling => [Active, Quarantined],
        Active => [Offline, Quarantined, Draining],
        Offline => [Active, Quarantined, Draining],
        Quarantined => [Active, Draining],
        Draining => [Retired, Offline],
        Retired => [Active, Removing],
        Removing => [Retired, Deleted],
    }
}

state_enum! {
    /// A durable job's (workflow's) state, `node-state-model.md` §4–§5.
    JobState, "job" {
        /// Accepted, not started.
        Pending = "pending",
        /// Executing.
        Running = "running",
        /// Finished successfully.
        Completed = "completed",
        /// Failed; a safe recovery path exists.
        FailedRetryable = "failed_retryable",
        /// Blocked pending an operator.
        FailedManualIntervention = "failed_manual_intervention",
        /// Stopped by an operator or the system.
        Cancelled = "cancelled",
        /// Compensating (rollback/cleanup) in progress.
        Compensating = "compensating",
        /// Realigned with observed state after an adopt/reconcile action.
        Reconciled = "reconciled",
    }
    transitions {
        Pending => [Running, Cancelled, FailedManualIntervention],
        Running => [Completed, FailedRetryable, FailedManualIntervention, Cancelled, Compensating],
        FailedRetryable => [Running, FailedManualIntervention, Cancelled, Compensating, Reconciled],
        FailedManualIntervention => [Running, Cancelled, Compensating, Reconciled],
        Compensating => [Pending, Cancelled, FailedManualIntervention],
    }
}

state_enum! {
    /// A power shelf's lifecycle (`power-shelf-state-machine.md`); the operation a
    /// `maintenance` shelf performs (power on or off) is carried beside the state.
    PowerShelfState, "power shelf" {
        /// The record exists; awaiting the controller's first tick.
        Initializing = "initializing",
        /// Reading the shelf's data from its BMC / PMC.
        FetchingData = "fetching_data",
        /// Configuring it (credentials, monitoring).
        Configuring = "configuring",
        /// Ready: may be deleted or driven into maintenance on request.
        Ready = "ready",
        /// Performing an operator-requested power operation.
        Maintenance = "maintenance",
        /// A maintenance operation failed; waits for an operator (or deletion).
        Error = "error",
        /// Being removed; ends with the record's final delete.
        Deleting = "deleting",
    }
    transitions {
        Initializing => [FetchingData],
        FetchingData => [Configuring],
        Configuring => [Ready],
        Ready => [Deleting, Maintenance],
        Maintenance => [Ready, Error],
        Error => [Deleting],
    }
}

state_enum! {
    /// A rack's lifecycle (`rack-on-demand-maintenance.md`); inside `maintenance` the
    /// coordinator records which activity runs.
    RackState, "rack" {
        /// Learning the rack's topology.
        Discovering = "discovering",
        /// Ready: maintenance may be requested.
        Ready = "ready",
        /// Running a maintenance cycle (firmware upgrade, NMX cluster, power sequence).
        Maintenance = "maintenance",
        /// Checking the rack after a cycle.
        Validating = "validating",
        /// A cycle failed; a new request (or nothing) follows.
        Error = "error",
    }
    transitions {
        Discovering => [Maintenance, Ready],
        Ready => [Discovering, Maintenance],
        Maintenance => [Validating, Error],
        Validating => [Ready, Error],
        Error => [Maintenance],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_forms_round_trip() {
        for s in HostLifecycle::ALL {
            assert_eq!(s.as_str().parse::<HostLifecycle>(), Ok(*s));
        }
        for s in RolloutState::ALL {
            assert_eq!(serde_json::to_string(s).expect("json"), format!("\"{}\"", s.as_str()));
        }
        assert!("Draining".parse::<HostLifecycle>().is_err());
    }

    #[test]
    fn lifecycle_follows_node_state_model() {
        use HostLifecycle::*;
        assert!(Retired.can_transition_to(Active));
        assert!(Deleted.is_terminal(), "no reactivation after removal");
        assert!(!Deleted.can_transition_to(Active));
        assert!(BootstrapIssued.transition(Active).is_err());
        assert!(Draining.can_transition_to(Offline));
    }

    #[test]
    fn every_state_is_reachable_from_the_start() {
        fn reach<T: Copy + Ord + 'static>(start: T, succ: impl Fn(T) -> &'static [T]) -> std::collections::BTreeSet<T> {
            let mut seen = std::collections::BTreeSet::from([start]);
            let mut todo = vec![start];
            while let Some(s) = todo.pop() {
                for &n in succ(s) {
                    if seen.insert(n) {
                        todo.push(n);
                    }
                }
            }
            seen
        }
        assert_eq!(reach(RolloutState::Opening, RolloutState::successors).len(), RolloutState::ALL.len());
        assert_eq!(reach(HostRolloutState::Pending, HostRolloutState::successors).len(), HostRolloutState::ALL.len());
        assert_eq!(reach(HostLifecycle::BootstrapIssued, HostLifecycle::successors).len(), HostLifecycle::ALL.len());
        assert_eq!(reach(JobState::Pending, JobState::successors).len(), JobState::ALL.len());
        assert_eq!(reach(WaveState::Pending, WaveState::successors).len(), WaveState::ALL.len());
        assert_eq!(reach(PowerShelfState::Initializing, PowerShelfState::successors).len(), PowerShelfState::ALL.len());
        assert_eq!(reach(RackState::Discovering, RackState::successors).len(), RackState::ALL.len());
    }

    #[test]
    fn power_shelf_transitions_are_exactly_the_seeds() {
        use PowerShelfState::*;
        let legal = [
            (Initializing, FetchingData),
            (FetchingData, Configuring),
            (Configuring, Ready),
            (Ready, Deleting),
            (Ready, Maintenance),
            (Maintenance, Ready),
            (Maintenance, Error),
            (Error, Deleting),
        ];
        for from in PowerShelfState::ALL {
            for to in PowerShelfState::ALL {
                assert_eq!(from.can_transition_to(*to), legal.contains(&(*from, *to)), "{from} -> {to}");
            }
        }
        assert!(Deleting.is_terminal(), "a deleting shelf only ends in its final delete");
        assert!(Error.transition(Ready).is_err(), "an errored shelf waits for an operator, never back to ready by itself");
    }
}
