//! One way to name things on `drover`'s command line, the same in every verb.
//!
//! - A host is its hostname or its id. An id is used as the operator typed it; a hostname is
//!   looked up in the coordinator's host listing (`GET /v1/hosts`, every page), compared
//!   without regard to case because hostnames are stored in lowercase. [`host_id`] is for the
//!   verbs whose route refuses an unknown id itself (`host VERB`, `decommission`, `maintenance
//!   --host`, `rack place|bmc`); [`host`] also checks that an id exists and returns the
//!   hostname, for filters and views (`get`, `describe`, `events`, `explain`, `evidence`).
//! - A rollout is its id (`CHANNEL@REF`), a unique prefix of its id, or its channel's name,
//!   which means the channel's current rollout: the newest one still live (opening, active,
//!   converging, halted, reverting), else the newest one. An exact id wins over a channel,
//!   and a channel over a prefix; a prefix that starts several ids is refused with the ids.
//!
//! A name that fits nothing on the coordinator is exit 65, like any other datum the
//! coordinator does not hold; one that could never be a name is exit 64 before any request.

use drover_proto::api::hosts::{HostDetail, HostView};
use drover_proto::api::rollouts::RolloutView;
use drover_proto::names::RolloutId;
use drover_proto::states::RolloutState;
use uuid::Uuid;

use crate::client::Session;
use crate::exit::{CliError, codes};
use crate::listing::{all_hosts, list_all};
use crate::output::clean;

/// How many candidates an ambiguous prefix lists before it says how many more there are.
const MAX_CANDIDATES: usize = 10;
/// The longest name accepted: a hostname (253) and a rollout id (64 + 1 + 64) fit.
const MAX_NAME: usize = 253;

/// Why a name on the command line names no single host or rollout.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Could never be a hostname or an id (exit 64).
    #[error("{what} {given:?} is not a hostname or a host id")]
    NotAHostName {
        /// The argument (`HOST`, `--host`).
        what: String,
        /// What was typed, cleaned for the terminal.
        given: String,
    },
    /// No host has this hostname (exit 65).
    #[error("unknown host {given:?}: no host of that name on the coordinator")]
    UnknownHostName {
        /// What was typed, cleaned for the terminal.
        given: String,
    },
    /// No host has this id (exit 65).
    #[error("unknown host {id}: no host with that id on the coordinator")]
    UnknownHostId {
        /// The id typed.
        id: Uuid,
    },
    /// Could never be a rollout id, a prefix of one or a channel (exit 64).
    #[error("{what} {given:?} is not a rollout id (CHANNEL@REF), a prefix of one or a channel")]
    NotARolloutName {
        /// The argument (`ROLLOUT`).
        what: String,
        /// What was typed, cleaned for the terminal.
        given: String,
    },
    /// No rollout id starts with it and no channel has that name (exit 65).
    #[error("unknown rollout {given:?}: no rollout id starts with it and no channel has that name")]
    UnknownRollout {
        /// What was typed.
        given: String,
    },
    /// It starts several rollout ids (exit 65).
    #[error("rollout {given:?} is ambiguous: it starts {} rollout ids: {}; give more of the id", candidates.len(), shown(candidates))]
    AmbiguousRollout {
        /// What was typed.
        given: String,
        /// Every rollout id it starts, oldest first.
        candidates: Vec<String>,
    },
    /// The coordinator's listing is not what its API answers (exit 76).
    #[error("{path}: unexpected answer: {what}")]
    Protocol {
        /// The listing.
        path: &'static str,
        /// What is wrong with it.
        what: String,
    },
    /// The coordinator could not be asked (its own exit code).
    #[error(transparent)]
    Coordinator(#[from] CliError),
}

impl From<ResolveError> for CliError {
    fn from(e: ResolveError) -> CliError {
        let code = match &e {
            ResolveError::NotAHostName { .. } | ResolveError::NotARolloutName { .. } => codes::USAGE,
            ResolveError::UnknownHostName { .. }
            | ResolveError::UnknownHostId { .. }
            | ResolveError::UnknownRollout { .. }
            | ResolveError::AmbiguousRollout { .. } => codes::DATA,
            ResolveError::Protocol { .. } => codes::PROTOCOL,
            ResolveError::Coordinator(inner) => return CliError::new(inner.code(), inner.to_string()),
        };
        CliError::new(code, e.to_string())
    }
}

/// The first [`MAX_CANDIDATES`] of `ids`, then how many more.
fn shown(ids: &[String]) -> String {
    let mut out = ids.iter().take(MAX_CANDIDATES).map(|i| clean(i, 130)).collect::<Vec<_>>().join(", ");
    if ids.len() > MAX_CANDIDATES {
        out.push_str(&format!(" and {} more", ids.len() - MAX_CANDIDATES));
    }
    out
}

/// A host as the coordinator knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRef {
    /// Its id.
    pub id: Uuid,
    /// Its hostname.
    pub hostname: String,
}

/// What the operator typed for a host: an id, or a name to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostName {
    /// A UUID.
    Id(Uuid),
    /// A hostname, lowercased.
    Name(String),
}

impl HostName {
    /// Reads `given` (the argument `what`) without asking the coordinator: a UUID, or
    /// something a hostname could be (64 otherwise).
    pub fn parse(what: &str, given: &str) -> Result<HostName, ResolveError> {
        let given = given.trim();
        if let Ok(id) = Uuid::parse_str(given) {
            return Ok(HostName::Id(id));
        }
        let ok = !given.is_empty()
            && given.len() <= MAX_NAME
            && given.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if ok {
            Ok(HostName::Name(given.to_ascii_lowercase()))
        } else {
            Err(ResolveError::NotAHostName { what: what.to_owned(), given: clean(given, 80) })
        }
    }
}

/// The host named `name` among `hosts` (the rows of `GET /v1/hosts`).
fn pick_host(name: &str, hosts: &[HostView]) -> Result<HostRef, ResolveError> {
    let row = hosts.iter().find(|h| h.hostname == name).ok_or_else(|| ResolveError::UnknownHostName { given: clean(name, 80) })?;
    let id = Uuid::parse_str(&row.id)
        .map_err(|_| ResolveError::Protocol { path: "/v1/hosts", what: format!("host {} has no id", clean(name, 80)) })?;
    Ok(HostRef { id, hostname: row.hostname.clone() })
}

/// The id of the host `given` names (the argument `what`): an id as typed, without a request;
/// a hostname through the host listing.
pub fn host_id(s: &Session, what: &str, given: &str) -> Result<Uuid, ResolveError> {
    match HostName::parse(what, given)? {
        HostName::Id(id) => Ok(id),
        HostName::Name(name) => Ok(pick_host(&name, &all_hosts(s)?)?.id),
    }
}

/// The ids of the hosts `given` names, in order, duplicates dropped; the host listing is read
/// once, and only when a hostname is among them. Every argument is checked before any request.
pub fn host_ids(s: &Session, what: &str, given: &[String]) -> Result<Vec<Uuid>, ResolveError> {
    let names: Vec<HostName> = given.iter().map(|g| HostName::parse(what, g)).collect::<Result<_, _>>()?;
    let listing = if names.iter().any(|n| matches!(n, HostName::Name(_))) { all_hosts(s)? } else { Vec::new() };
    let mut ids = Vec::with_capacity(names.len());
    for name in names {
        let id = match name {
            HostName::Id(id) => id,
            HostName::Name(n) => pick_host(&n, &listing)?.id,
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// The host `given` names (the argument `what`), checked to exist: an id through `GET
/// /v1/hosts/{id}`, a hostname through the host listing.
pub fn host(s: &Session, what: &str, given: &str) -> Result<HostRef, ResolveError> {
    match HostName::parse(what, given)? {
        HostName::Id(id) => {
            let row: HostDetail = s
                .get(&format!("/v1/hosts/{id}"))
                .map_err(|e| if e.code() == codes::DATA { ResolveError::UnknownHostId { id } } else { ResolveError::Coordinator(e) })?;
            Ok(HostRef { id, hostname: row.host.hostname })
        }
        HostName::Name(name) => pick_host(&name, &all_hosts(s)?),
    }
}

/// Checks that `given` could name a rollout (64 otherwise): `CHANNEL@REF` or a prefix of it,
/// in the characters ids are made of. Returns the channel when the `@` is there.
fn rollout_syntax<'a>(what: &str, given: &'a str) -> Result<Option<&'a str>, ResolveError> {
    let token = |s: &str| s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    let bad = || ResolveError::NotARolloutName { what: what.to_owned(), given: clean(given, 80) };
    match given.split_once('@') {
        _ if given.is_empty() => Err(bad()),
        Some((channel, reference)) if !channel.is_empty() && token(channel) && token(reference) => Ok(Some(channel)),
        Some(_) => Err(bad()),
        None if token(given) => Ok(None),
        None => Err(bad()),
    }
}

/// Whether a rollout in `state` may still change (the channel's current one if it is newest).
fn is_live(state: RolloutState) -> bool {
    matches!(
        state,
        RolloutState::Opening | RolloutState::Active | RolloutState::Converging | RolloutState::Halted | RolloutState::Reverting
    )
}

/// The rollout `given` names among `rollouts` (the rows of `GET /v1/rollouts`, oldest first).
fn pick_rollout(given: &str, rollouts: &[RolloutView]) -> Result<RolloutId, ResolveError> {
    let parse = |id: &str| {
        RolloutId::parse(id)
            .map_err(|_| ResolveError::Protocol { path: "/v1/rollouts", what: format!("{} is not a rollout id", clean(id, 130)) })
    };
    let ids: Vec<&str> = rollouts.iter().map(|r| r.rollout.rollout_id.as_str()).collect();
    if ids.contains(&given) {
        return parse(given);
    }
    if !given.contains('@') {
        let of_channel: Vec<&RolloutView> = rollouts.iter().filter(|r| r.rollout.channel == given).collect();
        let current = of_channel.iter().rev().find(|r| is_live(r.rollout.state)).or(of_channel.last());
        if let Some(r) = current {
            return parse(&r.rollout.rollout_id);
        }
    }
    let candidates: Vec<String> = ids.iter().filter(|id| id.starts_with(given)).map(|id| (*id).to_owned()).collect();
    match candidates.as_slice() {
        [] => Err(ResolveError::UnknownRollout { given: clean(given, 80) }),
        [one] => parse(one),
        _ => Err(ResolveError::AmbiguousRollout { given: clean(given, 80), candidates }),
    }
}

/// The rollout `given` names (the argument `what`): its id, a unique prefix of it, or a
/// channel (its current rollout). With an `@` only that channel's rollouts are listed.
pub fn rollout(s: &Session, what: &str, given: &str) -> Result<RolloutId, ResolveError> {
    let given = given.trim();
    let query: Vec<(&str, String)> = match rollout_syntax(what, given)? {
        Some(channel) => vec![("channel", channel.to_owned())],
        None => Vec::new(),
    };
    let rows = list_all(s, "/v1/rollouts", &query, None)?;
    pick_rollout(given, &crate::answer::decode_all("/v1/rollouts", &rows)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10";

    fn rollout_row(id: &str, state: &str) -> RolloutView {
        crate::fixtures::rollout(id, state.parse().expect("a rollout state"))
    }

    #[test]
    fn a_host_is_an_id_or_what_a_hostname_could_be() {
        assert_eq!(HostName::parse("HOST", ID).expect("id"), HostName::Id(Uuid::parse_str(ID).expect("uuid")));
        assert_eq!(HostName::parse("HOST", " Dev-05 ").expect("name"), HostName::Name("dev-05".to_owned()));
        for bad in ["", "a/b", "gpu 01", "x\u{1b}[2J", &"a".repeat(254)] {
            let e = HostName::parse("--host", bad).expect_err(bad);
            assert!(e.to_string().starts_with("--host "), "{e}");
            assert_eq!(CliError::from(e).code(), codes::USAGE, "{bad:?}");
        }
    }

    #[test]
    fn a_hostname_is_looked_up_and_an_unknown_one_is_named() {
        let hosts = [crate::fixtures::host(ID, "dev-05"), crate::fixtures::host("not-a-uuid", "dev-06")];
        assert_eq!(
            pick_host("dev-05", &hosts).expect("found"),
            HostRef { id: Uuid::parse_str(ID).expect("uuid"), hostname: "dev-05".into() }
        );
        let e = CliError::from(pick_host("dev-07", &hosts).expect_err("unknown"));
        assert_eq!((e.code(), e.to_string()), (codes::DATA, "unknown host \"dev-07\": no host of that name on the coordinator".to_owned()));
        assert_eq!(CliError::from(pick_host("dev-06", &hosts).expect_err("no id")).code(), codes::PROTOCOL);
    }

    #[test]
    fn a_rollout_is_its_id_a_unique_prefix_or_its_channel() {
        let rows = [
            rollout_row("training@aaa111", "Superseded"),
            rollout_row("training@bbb222", "Halted"),
            rollout_row("training@bbb333", "Failed"),
            rollout_row("infra@c0ffee", "Converged"),
            rollout_row("infra@c0ffee2", "Converged"),
        ];
        let pick = |g: &str| pick_rollout(g, &rows).map(|r| r.to_string());
        assert_eq!(pick("training@aaa").expect("prefix"), "training@aaa111");
        // The channel's newest live rollout, not merely its newest.
        assert_eq!(pick("training").expect("channel"), "training@bbb222");
        // No live rollout: the newest.
        assert_eq!(pick("infra").expect("channel"), "infra@c0ffee2");
        // An exact id wins over the longer id it is a prefix of.
        assert_eq!(pick("infra@c0ffee").expect("exact"), "infra@c0ffee");
        // A prefix without `@` that is no channel.
        assert_eq!(
            pick("inf").expect_err("ambiguous").to_string(),
            "rollout \"inf\" is ambiguous: it starts 2 rollout ids: infra@c0ffee, infra@c0ffee2; give more of the id"
        );
        assert_eq!(pick("tr").expect_err("ambiguous").to_string().matches("training@").count(), 3);
        let e = CliError::from(pick_rollout("gpu", &rows).expect_err("unknown"));
        assert_eq!(
            (e.code(), e.to_string()),
            (codes::DATA, "unknown rollout \"gpu\": no rollout id starts with it and no channel has that name".to_owned())
        );
        assert_eq!(CliError::from(pick_rollout("training@b", &rows).expect_err("ambiguous")).code(), codes::DATA);
    }

    #[test]
    fn an_ambiguous_prefix_lists_ten_candidates_then_counts() {
        let rows: Vec<RolloutView> = (0..13).map(|i| rollout_row(&format!("gpu@r{i:02}"), "Cancelled")).collect();
        let msg = pick_rollout("gpu@r", &rows).expect_err("ambiguous").to_string();
        assert!(msg.contains("it starts 13 rollout ids: gpu@r00, ") && msg.contains("gpu@r09 and 3 more;"), "{msg}");
    }

    #[test]
    fn what_could_never_name_a_rollout_is_refused_before_asking() {
        assert_eq!(rollout_syntax("ROLLOUT", "infra@c0").expect("ok"), Some("infra"));
        assert_eq!(rollout_syntax("ROLLOUT", "infra@").expect("ok"), Some("infra"));
        assert_eq!(rollout_syntax("ROLLOUT", "infra").expect("ok"), None);
        for bad in ["", "@c0ffee", "a@b@c", "in/fra", "infra@c0 ffee", &"x".repeat(65)] {
            let e = rollout_syntax("ROLLOUT", bad).expect_err(bad);
            assert_eq!(CliError::from(e).code(), codes::USAGE, "{bad:?}");
        }
    }
}
