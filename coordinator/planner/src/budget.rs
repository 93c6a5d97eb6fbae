//! Disruption-budget accounting (RFC-0002 §4.2, DESIGN "Formats").
//!
//! A host is in flight when it is `Activating` or `Soaking` in any rollout not yet `Pruned`
//! (a live one, or a finished one still landing a host: a straggler of a `Converged` rollout,
//! RFC-0002 §5.2), or held by a job or maintenance request (or lent by one for activation). Budgets are the frozen snapshots
//! in each rollout's manifest and match across rollouts by equality of their canonical
//! selector: the in-flight set of a budget is every in-flight host listed by the budget of
//! any rollout that [takes part](shares_budgets) with the same canonical selector. The cap is
//! the dispatching rollout's own [`FrozenBudget::allowed`] (`floor(pct × n / 100)`, at least 1).

use std::collections::{BTreeMap, BTreeSet};

use drover_proto::artifacts::FrozenBudget;
use drover_proto::names::RolloutId;
use drover_proto::states::{HostRolloutState, RolloutState};

use crate::input::{RolloutObserved, Snapshot};

/// Whether a rollout in `state` is still live (not finished: Converged, Reverted, Failed,
/// Superseded, Cancelled and Pruned are; the proto table lets most of them go on to Pruned,
/// so `is_terminal` alone is not the test).
pub fn is_live(state: RolloutState) -> bool {
    matches!(
        state,
        RolloutState::Opening | RolloutState::Active | RolloutState::Converging | RolloutState::Halted | RolloutState::Reverting
    )
}

/// Whether a rollout in `state` may have hosts in flight: every state but `Pruned` (a
/// finished rollout may still be landing a host — a straggler dispatched after it converged,
/// or a host caught in flight when it was superseded or cancelled).
pub fn may_hold_in_flight(state: RolloutState) -> bool {
    state != RolloutState::Pruned
}

/// Whether rollout `r` has a host in flight.
pub fn has_in_flight(r: &RolloutObserved) -> bool {
    r.hosts.values().any(|p| is_in_flight_state(p.state))
}

/// Whether rollout `id` is its channel's current rollout (the channel's current manifest's).
pub fn is_current<S: Snapshot + ?Sized>(input: &S, id: &RolloutId) -> bool {
    input.channels().get(id.channel()).is_some_and(|c| c.manifest.rollout_id == *id)
}

/// Whether rollout `id` may dispatch stragglers (RFC-0002 §5.2): it is `Converged`, its
/// channel's current rollout, and has a `Skipped` host (one that was offline when its wave ran
/// and gets the channel's current target when it returns).
pub fn may_dispatch_stragglers<S: Snapshot + ?Sized>(input: &S, id: &RolloutId, r: &RolloutObserved) -> bool {
    r.state == RolloutState::Converged && is_current(input, id) && r.hosts.values().any(|p| p.state == HostRolloutState::Skipped)
}

/// Whether the frozen budgets of rollout `id` take part in the accounting (the sharing by
/// canonical selector): a live rollout's; a finished one's with a host in flight (until it
/// lands); a `Converged` current rollout's that [may dispatch stragglers](may_dispatch_stragglers).
pub fn shares_budgets<S: Snapshot + ?Sized>(input: &S, id: &RolloutId, r: &RolloutObserved) -> bool {
    is_live(r.state) || (may_hold_in_flight(r.state) && (has_in_flight(r) || may_dispatch_stragglers(input, id, r)))
}

/// The rollout other than `except` (live, or finished and not pruned) in which `host` is in
/// flight, if any (a host has one owner of disruptive work at a time).
pub fn in_flight_elsewhere<'a, S: Snapshot + ?Sized>(input: &'a S, except: &RolloutId, host: &str) -> Option<&'a RolloutId> {
    input
        .rollouts()
        .iter()
        .find(|(id, r)| *id != except && may_hold_in_flight(r.state) && r.hosts.get(host).is_some_and(|p| is_in_flight_state(p.state)))
        .map(|(id, _)| id)
}

/// Whether a host in `state` is in flight.
pub fn is_in_flight_state(state: HostRolloutState) -> bool {
    matches!(state, HostRolloutState::Activating | HostRolloutState::Soaking)
}

/// Every host in flight across the rollouts of `input` (any not pruned), plus every held host.
pub fn in_flight_hosts<S: Snapshot + ?Sized>(input: &S) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = input.held().keys().cloned().collect();
    out.extend(input.lent().iter().cloned());
    for r in input.rollouts().values().filter(|r| may_hold_in_flight(r.state)) {
        out.extend(r.hosts.iter().filter(|(_, p)| is_in_flight_state(p.state)).map(|(h, _)| h.clone()));
    }
    out
}

/// Whether `host` is held or in flight in any rollout of `input` not pruned (one host's
/// share of [`in_flight_hosts`]).
pub fn in_flight_hosts_of<S: Snapshot + ?Sized>(input: &S, host: &str) -> bool {
    input.held().contains_key(host)
        || input.lent().contains(host)
        || input.rollouts().values().any(|r| may_hold_in_flight(r.state) && r.hosts.get(host).is_some_and(|p| is_in_flight_state(p.state)))
}

/// The hosts each canonical selector covers, unioned over the frozen budgets of the rollouts
/// that [take part](shares_budgets).
pub fn budget_members<S: Snapshot + ?Sized>(input: &S) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (id, r) in input.rollouts() {
        if !shares_budgets(input, id, r) {
            continue;
        }
        if let Some(m) = input.manifest_of(id) {
            for b in &m.disruption_budgets {
                out.entry(b.selector.canonical()).or_default().extend(b.hosts.iter().cloned());
            }
        }
    }
    out
}

/// A short human name for a budget: its normalized selector's tags, else its channel, else
/// its canonical text.
pub fn budget_name(b: &FrozenBudget) -> String {
    let s = b.selector.normalized();
    if let Some(t) = s.tags.as_ref().filter(|t| !t.is_empty()) {
        return t.join("+");
    }
    if let Some(t) = s.tags_any.as_ref().filter(|t| !t.is_empty()) {
        return t.join("|");
    }
    if let Some(c) = &s.channel {
        return format!("channel:{c}");
    }
    b.selector.canonical()
}

/// A budget that would be exceeded by one more host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetFull {
    /// The budget's short name.
    pub name: String,
    /// Hosts in flight (held counted).
    pub in_flight: usize,
    /// Hosts allowed.
    pub allowed: usize,
}

impl BudgetFull {
    /// As the planner's report gives it ("budget gpu-a 3/3 in flight").
    pub fn reason(&self) -> crate::wait::WaitReason {
        crate::wait::WaitReason::Budget { budget: self.name.clone(), in_flight: self.in_flight, allowed: self.allowed }
    }
}

/// The budget accounting of one planning pass, built once and kept current as dispatches are
/// emitted, so asking "is a budget full for this host?" costs a few set look-ups instead of a
/// walk over the fleet (which made a tick quadratic in the fleet's size).
#[derive(Debug, Clone, Default)]
pub struct BudgetIndex {
    in_flight: BTreeSet<String>,
    members: BTreeMap<String, BTreeSet<String>>,
    counts: BTreeMap<String, usize>,
    /// Per rollout that [takes part](shares_budgets), per budget (by position in its
    /// manifest): the hosts it lists.
    own: BTreeMap<RolloutId, Vec<BTreeSet<String>>>,
}

impl BudgetIndex {
    /// The accounting of `input` as it stands.
    pub fn build<S: Snapshot + ?Sized>(input: &S) -> BudgetIndex {
        let in_flight = in_flight_hosts(input);
        let members = budget_members(input);
        let counts = members.iter().map(|(k, m)| (k.clone(), m.iter().filter(|h| in_flight.contains(*h)).count())).collect();
        let mut own = BTreeMap::new();
        for (id, r) in input.rollouts() {
            if let Some(m) = input.manifest_of(id).filter(|_| shares_budgets(input, id, r)) {
                own.insert(id.clone(), m.disruption_budgets.iter().map(|b| b.hosts.iter().cloned().collect()).collect());
            }
        }
        BudgetIndex { in_flight, members, counts, own }
    }

    /// The first budget of rollout `id` covering `host` that has no free slot, if any.
    pub fn first_full<S: Snapshot + ?Sized>(&self, input: &S, id: &RolloutId, host: &str) -> Option<BudgetFull> {
        let manifest = input.manifest_of(id)?;
        let own = self.own.get(id)?;
        for (b, listed) in manifest.disruption_budgets.iter().zip(own) {
            if !listed.contains(host) {
                continue;
            }
            let key = b.selector.canonical();
            let members = self.members.get(&key);
            let counted_self = self.in_flight.contains(host) && members.is_some_and(|m| m.contains(host));
            let count = self.counts.get(&key).copied().unwrap_or(0) - usize::from(counted_self);
            let allowed = b.allowed();
            if count + 1 > allowed {
                return Some(BudgetFull { name: budget_name(b), in_flight: count, allowed });
            }
        }
        None
    }

    /// `host` is no longer in flight (landed, failed, skipped) and not held.
    pub fn note_landed(&mut self, host: &str) {
        if self.in_flight.remove(host) {
            for (key, m) in &self.members {
                if m.contains(host) {
                    if let Some(c) = self.counts.get_mut(key) {
                        *c = c.saturating_sub(1);
                    }
                }
            }
        }
    }

    /// `host` was just dispatched (it is in flight now).
    pub fn note_dispatched(&mut self, host: &str) {
        if self.in_flight.insert(host.to_owned()) {
            for (key, m) in &self.members {
                if m.contains(host) {
                    *self.counts.entry(key.clone()).or_default() += 1;
                }
            }
        }
    }
}
