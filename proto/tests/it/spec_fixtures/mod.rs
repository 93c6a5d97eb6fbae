//! Fixtures shared by the spec-validation and wire-message tests: the example fleet
//! (`examples/fleet.json`), its resolution at a fixed CI commit, and strict fixture times.

#![allow(dead_code)]

use drover_proto::resolve::{ReleaseMeta, Resolved, resolve};
use drover_proto::spec::FleetSpec;
use drover_proto::time::Time;

/// The bytes of `examples/fleet.json`.
pub const FLEET_JSON: &[u8] = include_bytes!("../../../../examples/fleet.json");
/// The CI commit the example is resolved at (and so the default channel ref).
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Parses a strict RFC 3339 fixture time.
pub fn t(s: &str) -> Time {
    Time::parse_strict(s).expect("fixture time")
}

/// Release metadata for `commit`, created at 2026-11-21T10:00:00Z.
pub fn meta(commit: &str) -> ReleaseMeta {
    ReleaseMeta { ci_commit: commit.to_owned(), created_at: t("2026-11-21T10:00:00Z") }
}

/// `examples/fleet.json`, parsed and validated.
pub fn example_spec() -> FleetSpec {
    FleetSpec::from_json(FLEET_JSON).expect("examples/fleet.json is valid")
}

/// The example fleet resolved at [`COMMIT`].
pub fn resolved_example() -> Resolved {
    resolve(&example_spec(), &meta(COMMIT)).expect("example resolves")
}
