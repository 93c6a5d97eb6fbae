//! The kinds of event the coordinator records (`GET /v1/events`, `drover events --kind`).
//!
//! One list shared by the coordinator, which refuses a filter on a kind it never records, and
//! the CLI, which refuses it before asking: a filter on a misspelt kind would otherwise match
//! nothing and look like a quiet fleet. A kind is `FAMILY.NAME`; a filter may also name a whole
//! family (`host` or `host.*`). A new event kind must be added here.

/// Every event kind the coordinator records, by family.
pub const KINDS: &[&str] = &[
    "agent.ClockSteppedBack",
    "agent.ManifestMismatch",
    "agent.NoActivationBackend",
    "agent.RolledBack",
    "agent.TaskRefused",
    "agent.VerificationFailed",
    "alert.release_stale",
    "alert.release_unverified",
    "cert.revoked",
    "coordinator.leader_elected",
    "coordinator.leader_stepped_down",
    "evidence.refused",
    "host.allocations_query",
    "host.bmc.removed",
    "host.bmc.set",
    "host.created",
    "host.force_release",
    "host.placed",
    "host.schedulable",
    "host.token_revoked",
    "host.token_used",
    "host.transition",
    "host.version_skew",
    "job.action",
    "job.created",
    "job.stage",
    "job.transition",
    "maas.binding",
    "maas.drift.detected",
    "maas.drift.healed",
    "maas.drift.ip_changed",
    "maas.drift.repair_failed",
    "maas.drift.resolved",
    "maas.override.created",
    "maas.override.credentials",
    "maas.override.deleted",
    "maas.profile.created",
    "maas.profile.updated",
    "maas.roce.deleted",
    "maas.roce.upserted",
    "maas.site.created",
    "maas.site.credentials",
    "maas.site.disabled",
    "maas.site.enabled",
    "maas.site.updated",
    "maas.unbind",
    "onboarding.action",
    "onboarding.stage",
    "power_shelf.delete_requested",
    "power_shelf.deleted",
    "power_shelf.firmware.completed",
    "power_shelf.firmware.failed",
    "power_shelf.firmware.requested",
    "power_shelf.maintenance_requested",
    "power_shelf.transition",
    "rack.created",
    "rack.deleted",
    "rack.firmware.created",
    "rack.maintenance.progress",
    "rack.maintenance.requested",
    "rack.transition",
    "release.published",
    "release.refused",
    "rollout.deferred",
    "rollout.host",
    "rollout.opened",
    "rollout.ref_superseded",
    "rollout.transition",
    "switch.deleted",
    "task.completed",
    "task.issued",
];

/// What a `--kind` filter names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindFilter {
    /// One kind, exactly.
    Exact(String),
    /// Every kind of a family: the kinds that start with this (`host.`).
    Family(String),
}

impl KindFilter {
    /// Whether an event of `kind` passes the filter.
    pub fn matches(&self, kind: &str) -> bool {
        match self {
            KindFilter::Exact(k) => k == kind,
            KindFilter::Family(prefix) => kind.starts_with(prefix.as_str()),
        }
    }
}

/// A filter naming no kind the coordinator records.
#[derive(Debug, thiserror::Error)]
#[error("unknown event kind {kind:?}: use one of {} (or a family such as host.*)", families().join(".*, ") + ".*")]
pub struct UnknownKind {
    /// The kind as given.
    pub kind: String,
}

/// The families of [`KINDS`], sorted, each once.
pub fn families() -> Vec<&'static str> {
    let mut f: Vec<&str> = KINDS.iter().filter_map(|k| k.split_once('.').map(|(family, _)| family)).collect();
    f.dedup();
    f
}

/// Parses a `--kind` filter: a kind of [`KINDS`], or a family (`host`, `host.*`).
pub fn parse_filter(s: &str) -> Result<KindFilter, UnknownKind> {
    let s = s.trim();
    if KINDS.contains(&s) {
        return Ok(KindFilter::Exact(s.to_owned()));
    }
    let family = s.strip_suffix(".*").unwrap_or(s);
    if families().contains(&family) {
        return Ok(KindFilter::Family(format!("{family}.")));
    }
    Err(UnknownKind { kind: s.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_sorted_unique_and_dotted() {
        assert!(KINDS.windows(2).all(|w| w[0] < w[1]), "keep KINDS sorted");
        assert!(KINDS.iter().all(|k| k.split_once('.').is_some_and(|(f, n)| !f.is_empty() && !n.is_empty())));
    }

    #[test]
    fn filters_parse() {
        assert_eq!(parse_filter("host.transition").expect("kind"), KindFilter::Exact("host.transition".into()));
        let host = parse_filter("host.*").expect("family");
        assert_eq!(host, KindFilter::Family("host.".into()));
        assert_eq!(parse_filter("host").expect("family"), host);
        assert!(host.matches("host.created") && !host.matches("hostile.x") && !host.matches("rollout.host"));
        let e = parse_filter("host.state").expect_err("host.state is no kind");
        assert_eq!(e.kind, "host.state");
        let msg = e.to_string();
        assert!(msg.contains("\"host.state\"") && msg.contains("host.*") && msg.contains("rollout.*"), "{msg}");
        assert!(parse_filter("nosuch.*").is_err() && parse_filter("").is_err() && parse_filter(".*").is_err());
    }
}
