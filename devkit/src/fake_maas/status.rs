//! MAAS's node statuses as data: the integer codes (not in lifecycle order: Deployed 6 <
//! Deploying 9 < Allocated 10), the exact `status_name` labels (only the first word
//! capitalised, with the odd ones such as "Releasing failed"), the lowercase constants the
//! list filter takes, the table of legal transitions every status change is checked
//! against, the failure map for in-flight statuses and the releasable set.

use serde::{Deserialize, Serialize};

/// A MAAS node status. The discriminant is MAAS's integer code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
#[allow(missing_docs)] // the variants are MAAS's own names, listed with their labels in `ALL`
pub enum Status {
    New = 0,
    Commissioning = 1,
    FailedCommissioning = 2,
    Missing = 3,
    Ready = 4,
    Reserved = 5,
    Deployed = 6,
    Retired = 7,
    Broken = 8,
    Deploying = 9,
    Allocated = 10,
    FailedDeployment = 11,
    Releasing = 12,
    FailedReleasing = 13,
    DiskErasing = 14,
    FailedDiskErasing = 15,
    RescueMode = 16,
    EnteringRescueMode = 17,
    FailedEnteringRescueMode = 18,
    ExitingRescueMode = 19,
    FailedExitingRescueMode = 20,
    Testing = 21,
    FailedTesting = 22,
}

use Status::*;

/// Every status, in code order, with its constant name and its `status_name` label.
const ALL: [(Status, &str, &str); 23] = [
    (New, "NEW", "New"),
    (Commissioning, "COMMISSIONING", "Commissioning"),
    (FailedCommissioning, "FAILED_COMMISSIONING", "Failed commissioning"),
    (Missing, "MISSING", "Missing"),
    (Ready, "READY", "Ready"),
    (Reserved, "RESERVED", "Reserved"),
    (Deployed, "DEPLOYED", "Deployed"),
    (Retired, "RETIRED", "Retired"),
    (Broken, "BROKEN", "Broken"),
    (Deploying, "DEPLOYING", "Deploying"),
    (Allocated, "ALLOCATED", "Allocated"),
    (FailedDeployment, "FAILED_DEPLOYMENT", "Failed deployment"),
    (Releasing, "RELEASING", "Releasing"),
    (FailedReleasing, "FAILED_RELEASING", "Releasing failed"),
    (DiskErasing, "DISK_ERASING", "Disk erasing"),
    (FailedDiskErasing, "FAILED_DISK_ERASING", "Failed disk erasing"),
    (RescueMode, "RESCUE_MODE", "Rescue mode"),
    (EnteringRescueMode, "ENTERING_RESCUE_MODE", "Entering rescue mode"),
    (FailedEnteringRescueMode, "FAILED_ENTERING_RESCUE_MODE", "Failed to enter rescue mode"),
    (ExitingRescueMode, "EXITING_RESCUE_MODE", "Exiting rescue mode"),
    (FailedExitingRescueMode, "FAILED_EXITING_RESCUE_MODE", "Failed to exit rescue mode"),
    (Testing, "TESTING", "Testing"),
    (FailedTesting, "FAILED_TESTING", "Failed testing"),
];

/// Where a machine may go from each status (MAAS's `NODE_TRANSITIONS`), indexed by code.
/// Rows 19 and 21 are written in MAAS as "every status except …"; spelled out here.
const TRANSITIONS: [&[u8]; 23] = [
    /* 0 New */ &[1, 3, 4, 7, 8, 17, 21],
    /* 1 Commissioning */ &[0, 2, 3, 4, 7, 8, 21],
    /* 2 Failed commissioning */ &[1, 3, 7, 8, 17, 21],
    /* 3 Missing */ &[0, 1, 4, 8, 10, 17, 21],
    /* 4 Ready */ &[1, 3, 5, 7, 8, 10, 17, 21],
    /* 5 Reserved */ &[3, 4, 7, 8, 10, 12, 14, 17, 21],
    /* 6 Deployed */ &[3, 4, 8, 10, 12, 14, 17, 21],
    /* 7 Retired */ &[0, 3, 4, 8, 17, 21],
    /* 8 Broken */ &[1, 4, 6, 12, 14, 17, 21],
    /* 9 Deploying */ &[3, 4, 6, 8, 10, 11, 12, 14],
    /* 10 Allocated */ &[3, 4, 7, 8, 9, 12, 14, 17, 21],
    /* 11 Failed deployment */ &[3, 4, 8, 10, 12, 14, 17, 21],
    /* 12 Releasing */ &[0, 3, 4, 5, 6, 8, 10, 11, 13, 15],
    /* 13 Releasing failed */ &[4, 8, 12, 14, 21],
    /* 14 Disk erasing */ &[4, 8, 12, 14, 15],
    /* 15 Failed disk erasing */ &[4, 8, 10, 12, 14, 17, 21],
    /* 16 Rescue mode */ &[8, 19, 21],
    /* 17 Entering rescue mode */ &[4, 6, 8, 16, 18, 19],
    /* 18 Failed to enter rescue mode */ &[8, 17, 19, 21],
    /* 19 Exiting rescue mode */ &[0, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 15, 16, 18, 20, 22],
    /* 20 Failed to exit rescue mode */ &[8, 19, 21],
    /* 21 Testing */ &[0, 1, 3, 4, 5, 6, 7, 8, 10, 11, 13, 15, 18, 20, 22],
    /* 22 Failed testing */ &[1, 3, 4, 6, 8, 17, 21],
];

/// Where a machine may start: a node is created New, Missing or Retired (MAAS's `None` row).
const CREATED: [Status; 3] = [New, Missing, Retired];

/// The statuses `release` acts on (MAAS's `RELEASABLE_STATUSES`).
const RELEASABLE: [Status; 8] = [Allocated, Reserved, Broken, Deploying, Deployed, FailedDeployment, FailedDiskErasing, FailedReleasing];

impl Status {
    /// MAAS's integer code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The status with this code.
    pub fn from_code(code: u8) -> Option<Status> {
        ALL.get(usize::from(code)).map(|(s, _, _)| *s)
    }

    /// The exact `status_name` (e.g. `Failed deployment`).
    pub fn label(self) -> &'static str {
        ALL[usize::from(self.code())].2
    }

    /// The constant's name in lowercase (`failed_deployment`), as the list filter takes it.
    pub fn filter_name(self) -> String {
        ALL[usize::from(self.code())].1.to_ascii_lowercase()
    }

    /// The status a list filter value names (lowercase constant only, as MAAS's form).
    pub fn from_filter_name(name: &str) -> Option<Status> {
        ALL.iter().find(|(_, c, _)| c.to_ascii_lowercase() == name).map(|(s, _, _)| *s)
    }

    /// The status named by a label, a constant or a code, in any case: the control API's
    /// leniency, not MAAS's.
    pub fn parse_loose(text: &str) -> Option<Status> {
        let t = text.trim();
        if let Ok(code) = t.parse::<u8>() {
            return Status::from_code(code);
        }
        ALL.iter().find(|(_, c, l)| c.eq_ignore_ascii_case(t) || l.eq_ignore_ascii_case(t)).map(|(s, _, _)| *s)
    }

    /// Whether MAAS lets a machine go from `self` to `to` (staying put is always allowed).
    pub fn may_become(self, to: Status) -> bool {
        self == to || TRANSITIONS[usize::from(self.code())].contains(&to.code())
    }

    /// Whether a freshly created node may start in `self`.
    pub fn may_start_in(self) -> bool {
        CREATED.contains(&self)
    }

    /// The failed status an in-flight status ends in when it fails or times out.
    pub fn failed(self) -> Option<Status> {
        Some(match self {
            Commissioning => FailedCommissioning,
            Deploying => FailedDeployment,
            Releasing => FailedReleasing,
            DiskErasing => FailedDiskErasing,
            EnteringRescueMode => FailedEnteringRescueMode,
            ExitingRescueMode => FailedExitingRescueMode,
            Testing => FailedTesting,
            _ => return None,
        })
    }

    /// Whether `release` acts on a machine in this status.
    pub fn is_releasable(self) -> bool {
        RELEASABLE.contains(&self)
    }
}

impl From<Status> for u8 {
    fn from(s: Status) -> u8 {
        s.code()
    }
}

/// A status code no MAAS status has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no MAAS status has code {code}")]
pub struct UnknownStatus {
    /// The code.
    pub code: u8,
}

impl TryFrom<u8> for Status {
    type Error = UnknownStatus;
    fn try_from(code: u8) -> Result<Status, UnknownStatus> {
        Status::from_code(code).ok_or(UnknownStatus { code })
    }
}

/// MAAS's `power_state` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)] // MAAS's four values
pub enum Power {
    On,
    Off,
    Unknown,
    Error,
}

impl Power {
    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Power::On => "on",
            Power::Off => "off",
            Power::Unknown => "unknown",
            Power::Error => "error",
        }
    }

    /// Parses one of the four values.
    pub fn parse(text: &str) -> Option<Power> {
        [Power::On, Power::Off, Power::Unknown, Power::Error].into_iter().find(|p| p.as_str() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_labels_and_constants_round_trip() {
        for code in 0..23u8 {
            let s = Status::from_code(code).unwrap();
            assert_eq!(s.code(), code);
            assert_eq!(Status::from_filter_name(&s.filter_name()), Some(s));
            assert_eq!(Status::parse_loose(s.label()), Some(s));
        }
        assert_eq!(Status::from_code(23), None);
        assert_eq!(FailedReleasing.label(), "Releasing failed");
        assert_eq!(FailedEnteringRescueMode.label(), "Failed to enter rescue mode");
        assert_eq!(FailedExitingRescueMode.label(), "Failed to exit rescue mode");
        assert_eq!(FailedDeployment.filter_name(), "failed_deployment");
        assert_eq!(Status::from_filter_name("Ready"), None, "the filter is case-sensitive");
    }

    /// One sampled allowed and one sampled refused target for every row of the table.
    #[test]
    fn every_row_of_the_transition_table() {
        let rows: [(Status, Status, Status); 23] = [
            (New, Commissioning, Deploying),
            (Commissioning, FailedCommissioning, Deployed),
            (FailedCommissioning, Commissioning, Ready),
            (Missing, Allocated, Deployed),
            (Ready, Allocated, Deploying),
            (Reserved, DiskErasing, Deploying),
            (Deployed, Releasing, Deploying),
            (Retired, New, Commissioning),
            (Broken, Deployed, Allocated),
            (Deploying, FailedDeployment, New),
            (Allocated, Deploying, Deployed),
            (FailedDeployment, Releasing, Deploying),
            (Releasing, FailedReleasing, Deploying),
            (FailedReleasing, DiskErasing, Deployed),
            (DiskErasing, FailedDiskErasing, New),
            (FailedDiskErasing, Allocated, Deployed),
            (RescueMode, ExitingRescueMode, Ready),
            (EnteringRescueMode, RescueMode, New),
            (FailedEnteringRescueMode, EnteringRescueMode, Ready),
            (ExitingRescueMode, Deployed, Deploying),
            (FailedExitingRescueMode, ExitingRescueMode, Ready),
            (Testing, Ready, FailedCommissioning),
            (FailedTesting, Deployed, Deploying),
        ];
        for (from, ok, refused) in rows {
            assert!(from.may_become(ok), "{from:?} -> {ok:?}");
            assert!(!from.may_become(refused), "{from:?} -/-> {refused:?}");
            assert!(from.may_become(from), "staying in {from:?}");
        }
        // Only Allocated may go to Deploying.
        for code in 0..23u8 {
            let s = Status::from_code(code).unwrap();
            assert_eq!(s.may_become(Deploying), s == Allocated || s == Deploying, "{s:?}");
        }
        assert!(New.may_start_in() && Missing.may_start_in() && Retired.may_start_in());
        assert!(!Ready.may_start_in());
    }

    #[test]
    fn failure_map_and_releasable_set() {
        let map = [
            (Commissioning, FailedCommissioning),
            (Deploying, FailedDeployment),
            (Releasing, FailedReleasing),
            (DiskErasing, FailedDiskErasing),
            (EnteringRescueMode, FailedEnteringRescueMode),
            (ExitingRescueMode, FailedExitingRescueMode),
            (Testing, FailedTesting),
        ];
        for (s, f) in map {
            assert_eq!(s.failed(), Some(f));
            assert!(s.may_become(f), "the failure is a legal transition: {s:?}");
        }
        for s in [New, Ready, Deployed, Allocated, Broken] {
            assert_eq!(s.failed(), None);
        }
        let releasable: Vec<u8> = (0..23u8).filter(|c| Status::from_code(*c).unwrap().is_releasable()).collect();
        assert_eq!(releasable, vec![5, 6, 8, 9, 10, 11, 13, 15]);
    }

    #[test]
    fn power_states() {
        for p in ["on", "off", "unknown", "error"] {
            assert_eq!(Power::parse(p).unwrap().as_str(), p);
        }
        assert_eq!(Power::parse("ON"), None);
    }
}
