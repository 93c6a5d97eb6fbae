//! MAAS's node status codes, their exact `status_name` labels and lowercase filter constants,
//! and machine power states (facts §5).
//!
//! The codes are not in lifecycle order (Deployed 6 < Deploying 9 < Allocated 10), so callers
//! compare variants, never numbers. A code this client does not know (a newer MAAS) is kept as
//! [`NodeStatus::Unknown`] instead of failing the whole machine list.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A machine's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeStatus {
    /// 0, `New`.
    New,
    /// 1, `Commissioning`.
    Commissioning,
    /// 2, `Failed commissioning`.
    FailedCommissioning,
    /// 3, `Missing`.
    Missing,
    /// 4, `Ready`.
    Ready,
    /// 5, `Reserved`.
    Reserved,
    /// 6, `Deployed`.
    Deployed,
    /// 7, `Retired`.
    Retired,
    /// 8, `Broken`.
    Broken,
    /// 9, `Deploying`.
    Deploying,
    /// 10, `Allocated`.
    Allocated,
    /// 11, `Failed deployment`.
    FailedDeployment,
    /// 12, `Releasing`.
    Releasing,
    /// 13, `Releasing failed`.
    FailedReleasing,
    /// 14, `Disk erasing`.
    DiskErasing,
    /// 15, `Failed disk erasing`.
    FailedDiskErasing,
    /// 16, `Rescue mode`.
    RescueMode,
    /// 17, `Entering rescue mode`.
    EnteringRescueMode,
    /// 18, `Failed to enter rescue mode`.
    FailedEnteringRescueMode,
    /// 19, `Exiting rescue mode`.
    ExitingRescueMode,
    /// 20, `Failed to exit rescue mode`.
    FailedExitingRescueMode,
    /// 21, `Testing`.
    Testing,
    /// 22, `Failed testing`.
    FailedTesting,
    /// A code this client does not know.
    Unknown(i64),
}

/// (code, variant, `status_name`, filter constant) for every known status.
const TABLE: [(i64, NodeStatus, &str, &str); 23] = [
    (0, NodeStatus::New, "New", "new"),
    (1, NodeStatus::Commissioning, "Commissioning", "commissioning"),
    (2, NodeStatus::FailedCommissioning, "Failed commissioning", "failed_commissioning"),
    (3, NodeStatus::Missing, "Missing", "missing"),
    (4, NodeStatus::Ready, "Ready", "ready"),
    (5, NodeStatus::Reserved, "Reserved", "reserved"),
    (6, NodeStatus::Deployed, "Deployed", "deployed"),
    (7, NodeStatus::Retired, "Retired", "retired"),
    (8, NodeStatus::Broken, "Broken", "broken"),
    (9, NodeStatus::Deploying, "Deploying", "deploying"),
    (10, NodeStatus::Allocated, "Allocated", "allocated"),
    (11, NodeStatus::FailedDeployment, "Failed deployment", "failed_deployment"),
    (12, NodeStatus::Releasing, "Releasing", "releasing"),
    (13, NodeStatus::FailedReleasing, "Releasing failed", "failed_releasing"),
    (14, NodeStatus::DiskErasing, "Disk erasing", "disk_erasing"),
    (15, NodeStatus::FailedDiskErasing, "Failed disk erasing", "failed_disk_erasing"),
    (16, NodeStatus::RescueMode, "Rescue mode", "rescue_mode"),
    (17, NodeStatus::EnteringRescueMode, "Entering rescue mode", "entering_rescue_mode"),
    (18, NodeStatus::FailedEnteringRescueMode, "Failed to enter rescue mode", "failed_entering_rescue_mode"),
    (19, NodeStatus::ExitingRescueMode, "Exiting rescue mode", "exiting_rescue_mode"),
    (20, NodeStatus::FailedExitingRescueMode, "Failed to exit rescue mode", "failed_exiting_rescue_mode"),
    (21, NodeStatus::Testing, "Testing", "testing"),
    (22, NodeStatus::FailedTesting, "Failed testing", "failed_testing"),
];

impl NodeStatus {
    /// Every known status, in code order.
    pub fn all() -> impl Iterator<Item = NodeStatus> {
        TABLE.iter().map(|row| row.1)
    }

    /// The status for a code (unknown codes kept as [`NodeStatus::Unknown`]).
    pub fn from_code(code: i64) -> NodeStatus {
        TABLE.iter().find(|row| row.0 == code).map(|row| row.1).unwrap_or(NodeStatus::Unknown(code))
    }

    /// MAAS's numeric code.
    pub fn code(self) -> i64 {
        match self {
            NodeStatus::Unknown(code) => code,
            known => TABLE.iter().find(|row| row.1 == known).map(|row| row.0).unwrap_or(-1),
        }
    }

    /// MAAS's exact `status_name` (`None` for an unknown code).
    pub fn status_name(self) -> Option<&'static str> {
        TABLE.iter().find(|row| row.1 == self).map(|row| row.2)
    }

    /// The lowercase constant the machine list's `status=` filter takes (`None` for an unknown
    /// code, which cannot be filtered on).
    pub fn filter_name(self) -> Option<&'static str> {
        TABLE.iter().find(|row| row.1 == self).map(|row| row.3)
    }

    /// The status whose filter constant is `name` (case-insensitive).
    pub fn from_filter_name(name: &str) -> Option<NodeStatus> {
        TABLE.iter().find(|row| row.3.eq_ignore_ascii_case(name)).map(|row| row.1)
    }

    /// The status whose `status_name` is exactly `name`.
    pub fn from_status_name(name: &str) -> Option<NodeStatus> {
        TABLE.iter().find(|row| row.2 == name).map(|row| row.1)
    }

    /// Whether MAAS's `release` moves a machine in this status (its `RELEASABLE_STATUSES`);
    /// Ready and Releasing are no-ops, anything else is a 409.
    pub fn is_releasable(self) -> bool {
        matches!(
            self,
            NodeStatus::Allocated
                | NodeStatus::Reserved
                | NodeStatus::Broken
                | NodeStatus::Deploying
                | NodeStatus::Deployed
                | NodeStatus::FailedDeployment
                | NodeStatus::FailedDiskErasing
                | NodeStatus::FailedReleasing
        )
    }

    /// Whether this is one of MAAS's in-flight statuses that end by themselves (or time out
    /// into their failure status).
    pub fn is_transitional(self) -> bool {
        matches!(
            self,
            NodeStatus::Commissioning
                | NodeStatus::Deploying
                | NodeStatus::Releasing
                | NodeStatus::DiskErasing
                | NodeStatus::EnteringRescueMode
                | NodeStatus::ExitingRescueMode
                | NodeStatus::Testing
        )
    }
}

impl std::fmt::Display for NodeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status_name() {
            Some(name) => f.write_str(name),
            None => write!(f, "unknown status {}", self.code()),
        }
    }
}

impl Serialize for NodeStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(self.code())
    }
}

impl<'de> Deserialize<'de> for NodeStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NodeStatus, D::Error> {
        Ok(NodeStatus::from_code(i64::deserialize(d)?))
    }
}

/// A machine's `power_state`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum PowerState {
    /// `on`.
    On,
    /// `off`.
    Off,
    /// `unknown` (new machines, unqueryable power types).
    #[default]
    Unknown,
    /// `error` (the BMC could not be queried).
    Error,
    /// Any other string a future MAAS may send.
    Other(String),
}

impl PowerState {
    /// The state for MAAS's string.
    pub fn parse(s: &str) -> PowerState {
        match s {
            "on" => PowerState::On,
            "off" => PowerState::Off,
            "unknown" => PowerState::Unknown,
            "error" => PowerState::Error,
            other => PowerState::Other(other.to_owned()),
        }
    }

    /// MAAS's string.
    pub fn as_str(&self) -> &str {
        match self {
            PowerState::On => "on",
            PowerState::Off => "off",
            PowerState::Unknown => "unknown",
            PowerState::Error => "error",
            PowerState::Other(s) => s,
        }
    }
}

impl Serialize for PowerState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PowerState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PowerState, D::Error> {
        // A null power_state is read as unknown rather than failing the machine.
        Ok(Option::<String>::deserialize(d)?.map(|s| PowerState::parse(&s)).unwrap_or(PowerState::Unknown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_round_trips_every_code() {
        assert_eq!(NodeStatus::all().count(), 23);
        for (i, status) in NodeStatus::all().enumerate() {
            let code = i64::try_from(i).expect("small");
            assert_eq!(status.code(), code);
            assert_eq!(NodeStatus::from_code(code), status);
            let name = status.status_name().expect("name");
            assert_eq!(NodeStatus::from_status_name(name), Some(status));
            let filter = status.filter_name().expect("filter");
            assert_eq!(filter, filter.to_lowercase());
            assert_eq!(NodeStatus::from_filter_name(filter), Some(status));
            let json = serde_json::to_string(&status).expect("json");
            assert_eq!(serde_json::from_str::<NodeStatus>(&json).expect("back"), status);
        }
    }

    #[test]
    fn exact_labels_of_the_traps() {
        assert_eq!(NodeStatus::from_code(13).status_name(), Some("Releasing failed"));
        assert_eq!(NodeStatus::from_code(18).status_name(), Some("Failed to enter rescue mode"));
        assert_eq!(NodeStatus::from_code(20).status_name(), Some("Failed to exit rescue mode"));
        assert_eq!(NodeStatus::from_code(13).filter_name(), Some("failed_releasing"));
        assert_eq!(NodeStatus::from_code(6), NodeStatus::Deployed);
        assert_eq!(NodeStatus::from_code(9), NodeStatus::Deploying);
        assert_eq!(NodeStatus::from_code(10), NodeStatus::Allocated);
        assert_eq!(NodeStatus::from_filter_name("READY"), Some(NodeStatus::Ready));
    }

    #[test]
    fn unknown_codes_are_kept() {
        let s: NodeStatus = serde_json::from_str("23").expect("tolerated");
        assert_eq!(s, NodeStatus::Unknown(23));
        assert_eq!(s.code(), 23);
        assert_eq!(s.status_name(), None);
        assert_eq!(s.filter_name(), None);
        assert_eq!(s.to_string(), "unknown status 23");
        assert!(serde_json::from_str::<NodeStatus>("\"Ready\"").is_err());
    }

    #[test]
    fn releasable_set_matches_maas() {
        let releasable: Vec<i64> = NodeStatus::all().filter(|s| s.is_releasable()).map(NodeStatus::code).collect();
        assert_eq!(releasable, [5, 6, 8, 9, 10, 11, 13, 15]);
    }

    #[test]
    fn power_states_parse() {
        for s in ["on", "off", "unknown", "error"] {
            let p: PowerState = serde_json::from_str(&format!("\"{s}\"")).expect("parse");
            assert_eq!(p.as_str(), s);
            assert!(!matches!(p, PowerState::Other(_)));
        }
        assert_eq!(serde_json::from_str::<PowerState>("null").expect("null"), PowerState::Unknown);
        assert_eq!(PowerState::parse("flickering"), PowerState::Other("flickering".into()));
    }
}
