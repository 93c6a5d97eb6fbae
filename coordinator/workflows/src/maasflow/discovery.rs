//! Which MAAS machine an onboarding claims (`bare-metal-lifecycle.md` §4.3 CreateOrFind,
//! §4.16): a pure decision over what MAAS lists, safe by default.
//!
//! Order: a machine with the requested hostname, else the requested BMC address, else the
//! PXE MAC when one is known. A level with several matches, or two levels pointing at
//! different machines, is ambiguous and fails closed ([`Discovery::Ambiguous`], class
//! `state_ambiguity`): claiming the wrong machine would deploy over someone's server. With no
//! match and no machine created yet, the workflow creates one. After that, a machine that
//! appeared during this run is claimed only when it is the only one; the sole `New` machine
//! of the site is claimed only when the profile opts in (`auto_claim_single_new_machine`,
//! off by default). Otherwise the workflow keeps polling until its discovery timeout.

use serde::Serialize;

/// One machine as MAAS lists it, reduced to what the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// MAAS's id.
    pub system_id: String,
    /// Its hostname (lowercase).
    pub hostname: String,
    /// Its BMC address, when its power parameters were read.
    pub power_address: Option<String>,
    /// Its MAC addresses (lowercase, colons).
    pub macs: Vec<String>,
    /// Its status is New.
    pub is_new: bool,
    /// It was not in MAAS when this run started.
    pub appeared_this_run: bool,
}

/// What the onboarding asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// The requested hostname (lowercase).
    pub hostname: &'a str,
    /// The requested BMC address.
    pub ipmi_ip: &'a str,
    /// The PXE MAC, when observed.
    pub pxe_mac: Option<&'a str>,
}

/// How a machine was matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchedBy {
    /// Its hostname.
    Hostname,
    /// Its BMC address.
    PowerAddress,
    /// Its PXE MAC.
    PxeMac,
    /// It is the only machine that appeared during this run.
    AppearedThisRun,
    /// It is the site's only New machine (policy opt-in).
    SoleNewMachine,
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "decision")]
pub enum Discovery {
    /// Claim this machine.
    Claim {
        /// MAAS's id.
        system_id: String,
        /// Why this one.
        by: MatchedBy,
    },
    /// Nothing matches and nothing was created yet: create the machine.
    Create,
    /// Nothing matches yet after creating: poll again (until the discovery timeout).
    KeepWaiting,
    /// More than one machine could be the one: stop for an operator.
    Ambiguous {
        /// The candidates' ids.
        candidates: Vec<String>,
        /// Why it is ambiguous.
        reason: String,
    },
}

fn ids(ms: &[&Candidate]) -> Vec<String> {
    ms.iter().map(|m| m.system_id.clone()).collect()
}

/// Decides which machine to claim. `created` is whether this run already asked MAAS to
/// create the machine (or power-cycled it into discovery); `auto_claim_sole_new` the
/// profile's opt-in.
pub fn decide(machines: &[Candidate], wanted: &Wanted<'_>, created: bool, auto_claim_sole_new: bool) -> Discovery {
    let host = wanted.hostname.to_ascii_lowercase();
    let levels: [(MatchedBy, Vec<&Candidate>); 3] = [
        (MatchedBy::Hostname, machines.iter().filter(|m| m.hostname.eq_ignore_ascii_case(&host)).collect()),
        (
            MatchedBy::PowerAddress,
            machines.iter().filter(|m| m.power_address.as_deref().is_some_and(|a| a.trim() == wanted.ipmi_ip.trim())).collect(),
        ),
        (
            MatchedBy::PxeMac,
            match wanted.pxe_mac {
                Some(mac) => machines.iter().filter(|m| m.macs.iter().any(|x| x.eq_ignore_ascii_case(mac))).collect(),
                None => Vec::new(),
            },
        ),
    ];
    let mut claimed: Option<(&Candidate, MatchedBy)> = None;
    for (by, matches) in &levels {
        match matches.as_slice() {
            [] => {}
            [one] => match claimed {
                None => claimed = Some((one, *by)),
                Some((first, first_by)) if first.system_id != one.system_id => {
                    return Discovery::Ambiguous {
                        candidates: vec![first.system_id.clone(), one.system_id.clone()],
                        reason: format!(
                            "the {} matches {} but the {} matches {}",
                            describe(first_by),
                            first.system_id,
                            describe(*by),
                            one.system_id
                        ),
                    };
                }
                Some(_) => {}
            },
            many => {
                return Discovery::Ambiguous {
                    candidates: ids(many),
                    reason: format!("{} machines match the {}", many.len(), describe(*by)),
                };
            }
        }
    }
    if let Some((m, by)) = claimed {
        return Discovery::Claim { system_id: m.system_id.clone(), by };
    }
    if !created {
        return Discovery::Create;
    }
    let appeared: Vec<&Candidate> = machines.iter().filter(|m| m.appeared_this_run).collect();
    match appeared.as_slice() {
        [one] => return Discovery::Claim { system_id: one.system_id.clone(), by: MatchedBy::AppearedThisRun },
        [] => {}
        many => {
            return Discovery::Ambiguous {
                candidates: ids(many),
                reason: format!("{} machines appeared in MAAS during this onboarding", many.len()),
            };
        }
    }
    if auto_claim_sole_new {
        let new: Vec<&Candidate> = machines.iter().filter(|m| m.is_new).collect();
        if let [one] = new.as_slice() {
            return Discovery::Claim { system_id: one.system_id.clone(), by: MatchedBy::SoleNewMachine };
        }
    }
    Discovery::KeepWaiting
}

fn describe(by: MatchedBy) -> &'static str {
    match by {
        MatchedBy::Hostname => "hostname",
        MatchedBy::PowerAddress => "BMC address",
        MatchedBy::PxeMac => "PXE MAC",
        MatchedBy::AppearedThisRun => "new arrival",
        MatchedBy::SoleNewMachine => "sole New machine",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, host: &str, bmc: Option<&str>, mac: &str) -> Candidate {
        Candidate {
            system_id: id.into(),
            hostname: host.into(),
            power_address: bmc.map(str::to_owned),
            macs: vec![mac.into()],
            is_new: false,
            appeared_this_run: false,
        }
    }

    const WANT: Wanted<'static> = Wanted { hostname: "gpu-07", ipmi_ip: "10.9.0.7", pxe_mac: Some("aa:bb:cc:00:00:07") };

    #[test]
    fn hostname_wins_then_bmc_then_mac() {
        let all = vec![m("aaa111", "gpu-07", Some("10.9.0.7"), "aa:bb:cc:00:00:07"), m("bbb222", "other", None, "x")];
        assert_eq!(decide(&all, &WANT, false, false), Discovery::Claim { system_id: "aaa111".into(), by: MatchedBy::Hostname });
        let by_bmc = vec![m("ccc333", "random-name", Some("10.9.0.7"), "x")];
        assert_eq!(decide(&by_bmc, &WANT, false, false), Discovery::Claim { system_id: "ccc333".into(), by: MatchedBy::PowerAddress });
        let by_mac = vec![m("ddd444", "random-name", None, "AA:BB:CC:00:00:07")];
        assert_eq!(decide(&by_mac, &WANT, false, false), Discovery::Claim { system_id: "ddd444".into(), by: MatchedBy::PxeMac });
    }

    #[test]
    fn hostname_and_bmc_on_different_machines_is_ambiguous() {
        let all = vec![m("aaa111", "gpu-07", None, "x"), m("ccc333", "other", Some("10.9.0.7"), "y")];
        match decide(&all, &WANT, false, false) {
            Discovery::Ambiguous { candidates, reason } => {
                assert_eq!(candidates, ["aaa111", "ccc333"]);
                assert!(reason.contains("hostname") && reason.contains("BMC address"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn two_machines_with_one_bmc_address_is_ambiguous() {
        let all = vec![m("ccc333", "a", Some("10.9.0.7"), "x"), m("eee555", "b", Some("10.9.0.7"), "y")];
        assert!(matches!(decide(&all, &WANT, false, false), Discovery::Ambiguous { .. }));
    }

    #[test]
    fn nothing_found_creates_then_claims_only_a_sole_arrival() {
        let mut all = vec![m("fff666", "unrelated", None, "x")];
        assert_eq!(decide(&all, &WANT, false, false), Discovery::Create);
        assert_eq!(decide(&all, &WANT, true, false), Discovery::KeepWaiting);
        let mut arrival = m("ggg777", "calm-otter", None, "z");
        arrival.appeared_this_run = true;
        all.push(arrival.clone());
        assert_eq!(decide(&all, &WANT, true, false), Discovery::Claim { system_id: "ggg777".into(), by: MatchedBy::AppearedThisRun });
        arrival.system_id = "hhh888".into();
        all.push(arrival);
        assert!(matches!(decide(&all, &WANT, true, false), Discovery::Ambiguous { .. }), "two arrivals fail closed");
    }

    #[test]
    fn the_sole_new_machine_is_claimed_only_on_opt_in() {
        let mut lone = m("kkk999", "enlisted", None, "q");
        lone.is_new = true;
        let all = vec![lone];
        assert_eq!(decide(&all, &WANT, true, false), Discovery::KeepWaiting, "off by default");
        assert_eq!(decide(&all, &WANT, true, true), Discovery::Claim { system_id: "kkk999".into(), by: MatchedBy::SoleNewMachine });
    }
}
