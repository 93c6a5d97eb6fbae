//! Disruption-budget accounting (RFC-0002 §4.2, DESIGN "Formats").
//!
//! A host is in flight when it is `Activating` or `Soaking` in any live rollout, or held by
//! a job or maintenance request. Budgets are the frozen snapshots in each rollout's manifest
//! and match across rollouts by equality of their canonical selector:
//! the in-flight set of a budget is every in-flight host listed by any live rollout's budget
//! with the same canonical selector. The cap is the dispatching rollout's own
//! [`FrozenBudget::allowed`] (`floor(pct × n / 100)`, at least 1).

use std::collections::{BTreeMap, BTreeSet};

use drover_proto::artifacts::FrozenBudget;
use drover_proto::names::RolloutId;
use drover_proto::states::{HostRolloutState, RolloutState};

use crate::input::Snapshot;

/// Whether a rollout in `state` is still live (not finished: Converged, Reverted, Failed,
/// Superseded, Cancelled and Pruned are; the proto table lets most of them go on to Pruned,
/// so `is_terminal` alone is not the test).
pub fn is_live(state: RolloutState) -> bool {
    matches!(
        state,
        RolloutState::Opening | RolloutState::Active | RolloutState::Converging | RolloutState::Halted | RolloutState::Reverting
    )
}

/// The live rollout other than `except` in which `host` is in flight, if any (a host has one
/// owner of disruptive work at a time).
pub fn in_flight_elsewhere<'a, S: Snapshot + ?Sized>(input: &'a S, except: &RolloutId, host: &str) -> Option<&'a RolloutId> {
    input
        .rollouts()
        .iter()
        .find(|(id, r)| *id != except && is_live(r.state) && r.hosts.get(host).is_some_and(|p| is_in_flight_state(p.state)))
        .map(|(id, _)| id)
}

/// Whether a host in `state` is in flight.
pub fn is_in_flight_state(state: HostRolloutState) -> bool {
    matches!(state, HostRolloutState::Activating | HostRolloutState::Soaking)
}

/// Every host in flight across the live rollouts of `input`, plus every held host.
pub fn in_flight_hosts<S: Snapshot + ?Sized>(input: &S) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = input.held().keys().cloned().collect();
    for r in input.rollouts().values().filter(|r| is_live(r.state)) {
        out.extend(r.hosts.iter().filter(|(_, p)| is_in_flight_state(p.state)).map(|(h, _)| h.clone()));
    }
    out
}

/// Whether `host` is held or in flight in any live rollout of `input` (one host's share of
/// [`in_flight_hosts`]).
pub fn in_flight_hosts_of<S: Snapshot + ?Sized>(input: &S, host: &str) -> bool {
    input.held().contains_key(host)
        || input.rollouts().values().any(|r| is_live(r.state) && r.hosts.get(host).is_some_and(|p| is_in_flight_state(p.state)))
}

/// The hosts each canonical selector covers, unioned over the live rollouts' frozen budgets.
pub fn budget_members<S: Snapshot + ?Sized>(input: &S) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (id, r) in input.rollouts() {
        if !is_live(r.state) {
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
    /// "budget gpu-a 3/3 in flight".
    pub fn describe(&self) -> String {
        format!("budget {} {}/{} in flight", self.name, self.in_flight, self.allowed)
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
    /// Per live rollout, per budget (by position in its manifest): the hosts it lists.
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
            if let Some(m) = input.manifest_of(id).filter(|_| is_live(r.state)) {
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
