//! Drift between MAAS and Drover (`bare-metal-lifecycle.md` §6.4, §7.3, §9.1): a pure verdict
//! on one host and the machine MAAS lists for it — which rule holds, how loud, what to do.
//!
//! The reconciler lists a site's machines, pairs them with the bound hosts, and asks [`judge`]
//! about each pair (`reconcile::plan`); a rule's action is taken once per drift. A host with a
//! MAAS workflow in flight is judged against what that workflow expects of MAAS (§7.3), never
//! against the steady-state table: a reimaging host in `Deploying` is not drift. Auto-quarantine
//! never releases tenants: it stops new work and raises the alert (§6.4).

use drover_maas::NodeStatus;
use drover_proto::states::HostLifecycle;
use serde::Serialize;

use super::taxonomy::Workflow;

/// How loud a verdict is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth a trace only.
    Debug,
    /// Something changed that Drover followed.
    Info,
    /// Someone should look.
    Warn,
    /// Drover may be scheduling onto a machine that is not there.
    Critical,
}

impl Severity {
    /// The stable name (the serde form).
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Debug => "debug",
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Critical => "critical",
        }
    }
}

/// Which row of §6.4 (or §9.1) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Deployed and active: as it should be.
    Ok,
    /// Deployed, the host offline: the agent is not polling.
    AgentNotPolling,
    /// Ready (released) while the host is active.
    ReleasedOutsideWorkflow,
    /// Failed or Broken while the host is active.
    HardwareFailure,
    /// Commissioning while the host is active.
    Recommissioning,
    /// Deployed with addresses Drover did not know.
    IpChanged,
    /// The machine is gone from MAAS while the host is active.
    DeletedFromMaas,
    /// Deployed while the host is retired.
    RetiredStillDeployed,
    /// A MAAS machine no Drover host is bound to.
    Unmanaged,
    /// Deployed and active, hardware sync unhealthy (§9.1).
    HwSyncUnhealthy,
    /// A workflow is in flight and MAAS shows what it expects (§7.3).
    InWorkflow,
    /// A workflow is in flight and MAAS shows something it does not expect.
    UnexpectedInWorkflow,
    /// The host is quarantined: held for an operator whatever MAAS shows (§7.3 "Drifted");
    /// an open drift stays open, no new one is opened.
    Parked,
    /// Nothing the table names (e.g. an offline host on a Ready machine): reported, no action.
    Unclassified,
}

impl Rule {
    /// The stable name (as in the drift details and the metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Ok => "ok",
            Rule::AgentNotPolling => "agent_not_polling",
            Rule::ReleasedOutsideWorkflow => "released_outside_workflow",
            Rule::HardwareFailure => "hardware_failure",
            Rule::Recommissioning => "recommissioning",
            Rule::IpChanged => "ip_changed",
            Rule::DeletedFromMaas => "deleted_from_maas",
            Rule::RetiredStillDeployed => "retired_still_deployed",
            Rule::Unmanaged => "unmanaged",
            Rule::HwSyncUnhealthy => "hw_sync_unhealthy",
            Rule::InWorkflow => "in_workflow",
            Rule::UnexpectedInWorkflow => "unexpected_in_workflow",
            Rule::Parked => "parked",
            Rule::Unclassified => "unclassified",
        }
    }

    /// The alert's words (§6.4's alert column).
    pub fn alert(self) -> &'static str {
        match self {
            Rule::Ok => "as expected",
            Rule::AgentNotPolling => "agent not polling",
            Rule::ReleasedOutsideWorkflow => "node released outside workflow",
            Rule::HardwareFailure => "hardware failure detected",
            Rule::Recommissioning => "node being recommissioned",
            Rule::IpChanged => "IP change detected",
            Rule::DeletedFromMaas => "machine deleted from MAAS",
            Rule::RetiredStillDeployed => "cleaning up retired node",
            Rule::Unmanaged => "unmanaged MAAS machine",
            Rule::HwSyncUnhealthy => "hardware sync unhealthy",
            Rule::InWorkflow => "in a MAAS workflow",
            Rule::UnexpectedInWorkflow => "MAAS state unexpected for the workflow in flight",
            Rule::Parked => "quarantined",
            Rule::Unclassified => "MAAS and Drover disagree",
        }
    }
}

/// What the reconciler does about it: the API's own type.
pub use drover_proto::api::reconciliation::DriftAction as Action;

/// The verdict on one pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The rule.
    pub rule: Rule,
    /// How loud.
    pub severity: Severity,
    /// What to do (once per drift).
    pub action: Action,
    /// What was expected of MAAS, in words.
    pub expected: String,
    /// What MAAS shows, in words.
    pub observed: String,
}

impl Verdict {
    /// Whether the pair is drifted (anything but the quiet rules).
    pub fn is_drift(&self) -> bool {
        !matches!(self.rule, Rule::Ok | Rule::InWorkflow | Rule::Unmanaged | Rule::Parked)
    }

    /// Whether the verdict leaves a drift open for an operator: an IP change is followed at
    /// once (its action is the whole repair), so it is only noted.
    pub fn opens_drift(&self) -> bool {
        self.is_drift() && self.rule != Rule::IpChanged
    }

    /// Whether the pair is as it should be, so an open drift heals by itself.
    pub fn is_healthy(&self) -> bool {
        matches!(self.rule, Rule::Ok | Rule::IpChanged)
    }
}

/// The machine, as the reconciler read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSide {
    /// Its status.
    pub status: NodeStatus,
    /// MAAS's label of it.
    pub status_name: String,
    /// Its addresses.
    pub ips: Vec<String>,
    /// MAAS's own `is_sync_healthy` rule holds now.
    pub sync_healthy: bool,
}

/// The host, as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSide {
    /// Its lifecycle.
    pub lifecycle: HostLifecycle,
    /// The addresses last recorded for it.
    pub known_ips: Vec<String>,
    /// A MAAS workflow on it that has not finished.
    pub workflow: Option<Workflow>,
}

fn verdict(rule: Rule, severity: Severity, action: Action, expected: &str, observed: String) -> Verdict {
    Verdict { rule, severity, action, expected: expected.to_owned(), observed }
}

/// What a workflow in flight may see MAAS show (§7.3): anything on its way.
fn expected_in(workflow: Workflow, status: Option<NodeStatus>) -> bool {
    use NodeStatus as N;
    let Some(s) = status else { return workflow == Workflow::Decommission };
    match workflow {
        Workflow::Onboard => matches!(
            s,
            N::New
                | N::Commissioning
                | N::Testing
                | N::Ready
                | N::Allocated
                | N::Deploying
                | N::Deployed
                | N::FailedCommissioning
                | N::FailedDeployment
                | N::Releasing
        ),
        Workflow::Reimage => matches!(
            s,
            N::Deployed
                | N::Releasing
                | N::DiskErasing
                | N::Ready
                | N::Allocated
                | N::Deploying
                | N::FailedDeployment
                | N::FailedDiskErasing
        ),
        Workflow::Decommission => matches!(s, N::Deployed | N::Releasing | N::DiskErasing | N::Ready | N::FailedDiskErasing),
        Workflow::Resync => s == N::Deployed,
    }
}

/// Judges one pair. `machine` is `None` when MAAS no longer lists the bound machine; `host`
/// is `None` for a machine no host is bound to.
pub fn judge(machine: Option<&MachineSide>, host: Option<&HostSide>) -> Verdict {
    use HostLifecycle as L;
    use NodeStatus as N;
    let observed = machine.map_or_else(|| "absent from MAAS".to_owned(), |m| format!("{} {:?}", m.status_name, m.ips));
    let Some(host) = host else {
        return verdict(Rule::Unmanaged, Severity::Debug, Action::None, "a Drover host bound to it", observed);
    };
    // A host still enrolling is an onboarding's (§7.3); a host draining or removing is its
    // lifecycle job's, which needs the OS up until it has finished.
    let workflow = host.workflow.or(match host.lifecycle {
        L::BootstrapIssued | L::Enrolling => Some(Workflow::Onboard),
        L::Draining | L::Removing => Some(Workflow::Decommission),
        _ => None,
    });
    if let Some(w) = workflow {
        return if expected_in(w, machine.map(|m| m.status)) {
            verdict(Rule::InWorkflow, Severity::Debug, Action::None, "what the workflow expects", observed)
        } else {
            verdict(Rule::UnexpectedInWorkflow, Severity::Warn, Action::None, "what the workflow expects (§7.3)", observed)
        };
    }
    if host.lifecycle == L::Quarantined {
        return verdict(Rule::Parked, Severity::Debug, Action::None, "an operator's decision", observed);
    }
    let Some(m) = machine else {
        return match host.lifecycle {
            L::Active => verdict(Rule::DeletedFromMaas, Severity::Critical, Action::Quarantine, "Deployed", observed),
            L::Retired => verdict(Rule::Ok, Severity::Debug, Action::None, "released, off or deleted", observed),
            _ => verdict(Rule::Unclassified, Severity::Warn, Action::None, "Deployed", observed),
        };
    };
    match (m.status, host.lifecycle) {
        (N::Deployed, L::Active) => {
            let mut known = host.known_ips.clone();
            let mut now = m.ips.clone();
            known.sort();
            now.sort();
            if !known.is_empty() && !now.is_empty() && known != now {
                verdict(Rule::IpChanged, Severity::Info, Action::UpdateAddresses { ips: m.ips.clone() }, "the recorded addresses", observed)
            } else if !m.sync_healthy {
                verdict(Rule::HwSyncUnhealthy, Severity::Warn, Action::Resync, "hardware sync healthy", observed)
            } else {
                verdict(Rule::Ok, Severity::Debug, Action::None, "Deployed", observed)
            }
        }
        (N::Deployed, L::Offline) => verdict(Rule::AgentNotPolling, Severity::Warn, Action::None, "Deployed, agent polling", observed),
        // Released, or released and being deployed again (an admin's redeploy, §6.2), with no
        // workflow of Drover's: the agent is gone and the tenant's session with it.
        (N::Ready | N::Releasing | N::DiskErasing | N::Allocated | N::Deploying, L::Active) => {
            verdict(Rule::ReleasedOutsideWorkflow, Severity::Critical, Action::Quarantine, "Deployed", observed)
        }
        (
            N::FailedCommissioning | N::FailedDeployment | N::FailedTesting | N::FailedReleasing | N::FailedDiskErasing | N::Broken,
            L::Active,
        ) => verdict(Rule::HardwareFailure, Severity::Critical, Action::Quarantine, "Deployed", observed),
        (N::Commissioning | N::Testing, L::Active) => verdict(Rule::Recommissioning, Severity::Warn, Action::None, "Deployed", observed),
        (N::Deployed, L::Retired) => {
            verdict(Rule::RetiredStillDeployed, Severity::Info, Action::ReleaseAndPowerOff, "released and off", observed)
        }
        (N::Ready | N::New, L::Retired) => verdict(Rule::Ok, Severity::Debug, Action::None, "released and off", observed),
        _ => verdict(Rule::Unclassified, Severity::Warn, Action::None, "the §6.4 table's pairs", observed),
    }
}

/// Whether `now` is a drift not acted on yet: a rule's action is taken once per drift, so the
/// same open rule on the next pass is not new; a different rule, or one after a resolution, is.
pub fn is_new(open_rule: Option<Rule>, now: &Verdict) -> bool {
    now.opens_drift() && open_rule != Some(now.rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(status: NodeStatus, ips: &[&str], sync: bool) -> MachineSide {
        MachineSide { status, status_name: format!("{status:?}"), ips: ips.iter().map(|s| (*s).to_owned()).collect(), sync_healthy: sync }
    }

    fn h(lifecycle: HostLifecycle, ips: &[&str]) -> HostSide {
        HostSide { lifecycle, known_ips: ips.iter().map(|s| (*s).to_owned()).collect(), workflow: None }
    }

    #[test]
    fn every_row_of_the_table() {
        use HostLifecycle as L;
        use NodeStatus as N;
        let ip = ["10.0.0.5"];
        type Case = (Option<MachineSide>, Option<HostSide>, Rule, Severity, Action);
        let cases: Vec<Case> = vec![
            (Some(m(N::Deployed, &ip, true)), Some(h(L::Active, &ip)), Rule::Ok, Severity::Debug, Action::None),
            (Some(m(N::Deployed, &ip, true)), Some(h(L::Offline, &ip)), Rule::AgentNotPolling, Severity::Warn, Action::None),
            (Some(m(N::Ready, &[], true)), Some(h(L::Active, &ip)), Rule::ReleasedOutsideWorkflow, Severity::Critical, Action::Quarantine),
            (
                Some(m(N::Deploying, &[], true)),
                Some(h(L::Active, &ip)),
                Rule::ReleasedOutsideWorkflow,
                Severity::Critical,
                Action::Quarantine,
            ),
            (Some(m(N::Broken, &ip, true)), Some(h(L::Active, &ip)), Rule::HardwareFailure, Severity::Critical, Action::Quarantine),
            (Some(m(N::FailedTesting, &ip, true)), Some(h(L::Active, &ip)), Rule::HardwareFailure, Severity::Critical, Action::Quarantine),
            (Some(m(N::Commissioning, &ip, true)), Some(h(L::Active, &ip)), Rule::Recommissioning, Severity::Warn, Action::None),
            (
                Some(m(N::Deployed, &["10.0.0.9"], true)),
                Some(h(L::Active, &ip)),
                Rule::IpChanged,
                Severity::Info,
                Action::UpdateAddresses { ips: vec!["10.0.0.9".into()] },
            ),
            (None, Some(h(L::Active, &ip)), Rule::DeletedFromMaas, Severity::Critical, Action::Quarantine),
            (
                Some(m(N::Deployed, &ip, true)),
                Some(h(L::Retired, &ip)),
                Rule::RetiredStillDeployed,
                Severity::Info,
                Action::ReleaseAndPowerOff,
            ),
            (Some(m(N::Deployed, &ip, true)), None, Rule::Unmanaged, Severity::Debug, Action::None),
            (Some(m(N::Deployed, &ip, false)), Some(h(L::Active, &ip)), Rule::HwSyncUnhealthy, Severity::Warn, Action::Resync),
        ];
        for (machine, host, rule, severity, action) in cases {
            let v = judge(machine.as_ref(), host.as_ref());
            assert_eq!((v.rule, v.severity, &v.action), (rule, severity, &action), "{machine:?} / {host:?}: {v:?}");
        }
    }

    #[test]
    fn a_host_in_a_workflow_is_judged_against_the_workflow() {
        let mut host = h(HostLifecycle::Offline, &[]);
        host.workflow = Some(Workflow::Reimage);
        // A reimaging host in Deploying, or released to Ready, is not drift.
        for s in [NodeStatus::Deploying, NodeStatus::Ready, NodeStatus::DiskErasing] {
            let v = judge(Some(&m(s, &[], true)), Some(&host));
            assert_eq!(v.rule, Rule::InWorkflow, "{s:?}");
            assert!(!v.is_drift());
        }
        let v = judge(Some(&m(NodeStatus::Commissioning, &[], true)), Some(&host));
        assert_eq!((v.rule, v.action), (Rule::UnexpectedInWorkflow, Action::None));
        host.workflow = Some(Workflow::Decommission);
        assert_eq!(judge(None, Some(&host)).rule, Rule::InWorkflow, "a decommission may delete the record");
    }

    #[test]
    fn an_action_is_taken_once_per_drift() {
        let v = judge(Some(&m(NodeStatus::Ready, &[], true)), Some(&h(HostLifecycle::Active, &[])));
        assert!(is_new(None, &v));
        assert!(!is_new(Some(Rule::ReleasedOutsideWorkflow), &v), "the same open drift is not acted on again");
        assert!(is_new(Some(Rule::Recommissioning), &v), "a different rule is a new drift");
        let ok = judge(Some(&m(NodeStatus::Deployed, &[], true)), Some(&h(HostLifecycle::Active, &[])));
        assert!(!is_new(None, &ok));
    }
}
