//! Which pending jobs may start now: disruption-budget pacing shared with rollouts.
//!
//! A job that starts takes its host out of service (it is cordoned, drained, scrubbed), so a
//! running job's host counts against every disruption budget that lists it, exactly like a
//! host a rollout has in flight (DESIGN "Jobs"). A pending job starts only while every budget
//! listing its host has a free slot once the hosts already disrupted — in flight in a
//! rollout, or held by a started job — are counted. The rollout planner counts the same held
//! hosts from its side, so a rollout and a maintenance request on overlapping hosts under one
//! budget never exceed it together.
//!
//! Pure: the caller passes the budgets (the latest release's, frozen against its hosts), the
//! disrupted hosts and the candidates in the order they should start (oldest job first).

use std::collections::{BTreeMap, BTreeSet};

use drover_proto::artifacts::FrozenBudget;

/// One budget as the pacer sees it: every host it lists and how many may be disrupted at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaceBudget {
    /// Short human name ("gpu-a", "channel:canary").
    pub name: String,
    /// The hosts it lists.
    pub hosts: BTreeSet<String>,
    /// How many of them may be disrupted at once.
    pub allowed: usize,
}

/// The pacer's budgets from a release's frozen budgets. Budgets with the same canonical
/// selector are one budget (their host lists unioned, the smaller cap kept), the rule the
/// rollout planner matches budgets across rollouts by.
pub fn budgets_of(frozen: &[FrozenBudget]) -> Vec<PaceBudget> {
    let mut by_selector: BTreeMap<String, PaceBudget> = BTreeMap::new();
    for b in frozen {
        let entry = by_selector.entry(b.selector.canonical()).or_insert_with(|| PaceBudget {
            name: drover_planner::budget::budget_name(b),
            hosts: BTreeSet::new(),
            allowed: usize::MAX,
        });
        entry.hosts.extend(b.hosts.iter().cloned());
        entry.allowed = entry.allowed.min(b.allowed());
    }
    by_selector.into_values().collect()
}

/// The pacer's answer for one tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission<K> {
    /// Candidates that may start now, in the order given.
    pub admitted: Vec<K>,
    /// Candidates that wait, with why ("budget gpu-a 20/20 in flight").
    pub waiting: Vec<(K, String)>,
}

/// Admits candidates `(key, hostname)` in order while every budget listing the host has a free
/// slot; `disrupted` is every host already out of service (rollout in flight or held). An
/// admitted host counts at once, so a single call never over-admits. A candidate whose host
/// is already disrupted is admitted without taking a second slot (the host is counted once).
pub fn admit<K: Clone>(candidates: &[(K, String)], disrupted: &BTreeSet<String>, budgets: &[PaceBudget]) -> Admission<K> {
    let mut counts: Vec<usize> = budgets.iter().map(|b| b.hosts.iter().filter(|h| disrupted.contains(*h)).count()).collect();
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    let mut out = Admission { admitted: Vec::new(), waiting: Vec::new() };
    for (key, host) in candidates {
        if disrupted.contains(host) || taken.contains(host.as_str()) {
            out.admitted.push(key.clone());
            continue;
        }
        let full = budgets.iter().zip(&counts).find(|(b, n)| b.hosts.contains(host) && **n + 1 > b.allowed);
        if let Some((b, n)) = full {
            out.waiting.push((key.clone(), format!("budget {} {n}/{} in flight", b.name, b.allowed)));
            continue;
        }
        for (b, n) in budgets.iter().zip(counts.iter_mut()) {
            if b.hosts.contains(host) {
                *n += 1;
            }
        }
        taken.insert(host);
        out.admitted.push(key.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(name: &str, hosts: impl IntoIterator<Item = String>, allowed: usize) -> PaceBudget {
        PaceBudget { name: name.into(), hosts: hosts.into_iter().collect(), allowed }
    }

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("gpu-{i:03}")).collect()
    }

    #[test]
    fn a_request_over_200_hosts_under_ten_percent_starts_20_at_a_time() {
        let all = hosts(200);
        let frozen = FrozenBudget {
            selector: drover_proto::selector::Selector { all: Some(true), ..Default::default() },
            hosts: all.clone(),
            max_in_flight: None,
            max_in_flight_pct: Some(10),
        };
        let budgets = budgets_of(&[frozen]);
        assert_eq!(budgets[0].allowed, 20);
        let cands: Vec<(usize, String)> = all.iter().cloned().enumerate().collect();
        let mut disrupted = BTreeSet::new();
        let mut done = BTreeSet::new();
        let mut rounds = 0;
        while done.len() < 200 {
            let pending: Vec<(usize, String)> = cands.iter().filter(|(k, _)| !done.contains(k)).cloned().collect();
            let a = admit(&pending, &disrupted, &budgets);
            assert!(a.admitted.len() <= 20, "round {rounds}: {} admitted", a.admitted.len());
            assert!(a.waiting.iter().all(|(_, why)| why.ends_with("20/20 in flight")), "{:?}", a.waiting.first());
            // Every admitted job runs to completion before the next round.
            for k in a.admitted {
                disrupted.insert(cands[k].1.clone());
                done.insert(k);
            }
            assert!(disrupted.len() <= 20);
            disrupted.clear();
            rounds += 1;
        }
        assert_eq!(rounds, 10);
    }

    #[test]
    fn hosts_a_rollout_has_in_flight_take_slots_first() {
        let all = hosts(10);
        let b = vec![budget("rack-a", all.clone(), 3)];
        let disrupted: BTreeSet<String> = all[..2].iter().cloned().collect();
        let cands: Vec<(u8, String)> = vec![(1, all[5].clone()), (2, all[6].clone()), (3, all[1].clone())];
        let a = admit(&cands, &disrupted, &b);
        // One slot left: job 1 takes it, job 2 waits, job 3's host is already counted.
        assert_eq!(a.admitted, vec![1, 3]);
        assert_eq!(a.waiting, vec![(2, "budget rack-a 3/3 in flight".to_owned())]);
    }

    #[test]
    fn a_host_outside_every_budget_is_never_paced() {
        let b = vec![budget("rack-a", hosts(2), 1)];
        let cands: Vec<(u8, String)> = vec![(1, "other-1".into()), (2, "other-2".into())];
        assert_eq!(admit(&cands, &BTreeSet::new(), &b).admitted, vec![1, 2]);
    }

    #[test]
    fn every_budget_listing_the_host_must_have_room() {
        let b = vec![budget("wide", hosts(10), 5), budget("narrow", hosts(2), 1)];
        let cands: Vec<(u8, String)> = vec![(1, "gpu-000".into()), (2, "gpu-001".into()), (3, "gpu-002".into())];
        let a = admit(&cands, &BTreeSet::new(), &b);
        assert_eq!(a.admitted, vec![1, 3]);
        assert_eq!(a.waiting[0].1, "budget narrow 1/1 in flight");
    }

    #[test]
    fn budgets_with_one_selector_merge_and_keep_the_smaller_cap() {
        let sel = drover_proto::selector::Selector { tags: Some(vec!["rack-a".into()]), ..Default::default() };
        let f = |hosts: &[&str], max| FrozenBudget {
            selector: sel.clone(),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            max_in_flight: Some(max),
            max_in_flight_pct: None,
        };
        let merged = budgets_of(&[f(&["a", "b"], 2), f(&["b", "c"], 1)]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].allowed, 1);
        assert_eq!(merged[0].hosts.len(), 3);
        assert_eq!(merged[0].name, "rack-a");
    }
}
