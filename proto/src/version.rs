//! Release versions as the CLI, the coordinator and the agent compare them: how many minor
//! releases apart two builds are, for `drover version`'s warning and the coordinator's
//! agent-skew event and metric.
//!
//! Only `MAJOR.MINOR` counts: patch releases and pre-release or build suffixes are
//! compatible by definition of the project's versioning, so they never raise a warning.

/// This build's version (the workspace's, shared by every Drover binary).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Agents may lag the coordinator (or lead it) by this many minor releases during an
/// upgrade; beyond it the coordinator raises `host.version_skew`.
pub const AGENT_MINOR_SKEW: u64 = 1;

/// How many minor releases apart `a` and `b` are; a different major is as far apart as
/// there is (`u64::MAX`). `None` when either is not `MAJOR.MINOR[.PATCH…]`, which is unknown
/// rather than skewed.
pub fn minor_releases_apart(a: &str, b: &str) -> Option<u64> {
    let (a_major, a_minor) = major_minor(a)?;
    let (b_major, b_minor) = major_minor(b)?;
    Some(if a_major == b_major { a_minor.abs_diff(b_minor) } else { u64::MAX })
}

/// Whether an agent of `agent` version is further from a coordinator of `coordinator`
/// version than [`AGENT_MINOR_SKEW`] allows.
pub fn agent_is_skewed(coordinator: &str, agent: &str) -> bool {
    minor_releases_apart(coordinator, agent).is_some_and(|n| n > AGENT_MINOR_SKEW)
}

fn major_minor(v: &str) -> Option<(u64, u64)> {
    let v = v.strip_prefix('v').unwrap_or(v);
    let core = v.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let number = |s: Option<&str>| s.filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).and_then(|s| s.parse().ok());
    let major = number(parts.next())?;
    let minor = number(parts.next())?;
    // A patch, when present, must be a number too: "1.2.x" is not a version.
    match parts.next() {
        None => {}
        Some(p) => {
            number(Some(p))?;
        }
    }
    parts.next().is_none().then_some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minor_releases_apart_counts_minors_only() {
        assert_eq!(minor_releases_apart("0.1.0", "0.1.7"), Some(0));
        assert_eq!(minor_releases_apart("0.3.0", "0.1.0"), Some(2));
        assert_eq!(minor_releases_apart("v1.4.2-rc.1", "1.5.0+build.7"), Some(1));
        assert_eq!(minor_releases_apart("1.4.0", "2.4.0"), Some(u64::MAX));
        for bad in ["", "1", "1.x", "1.2.x", "1.2.3.4", "one.two"] {
            assert_eq!(minor_releases_apart(bad, "1.2.0"), None, "{bad:?}");
        }
    }

    #[test]
    fn an_agent_one_minor_away_is_allowed_and_two_are_skew() {
        assert!(!agent_is_skewed("0.5.0", "0.4.9"));
        assert!(!agent_is_skewed("0.5.0", "0.6.0"));
        assert!(agent_is_skewed("0.5.0", "0.3.0"));
        assert!(agent_is_skewed("1.0.0", "0.9.0"));
        assert!(!agent_is_skewed("0.5.0", "a custom build"), "unknown is not skew");
    }
}
