//! Validated identifiers: channel names, channel refs, rollout ids, hostnames, tags, and the
//! rule that keeps names and object ids apart.
//!
//! These strings end up in file names (`rollouts/<rolloutId>.json`), URLs and log lines, so
//! their alphabets are closed: nothing in them can traverse a path or break a query.
//!
//! Racks, sites, profiles and hosts are named on the API and the command line by "id or
//! name". [`as_id`] is what such an argument is tried as first, everywhere; [`check_not_an_id`]
//! refuses, at every create and rename, a name that would parse as one — so no name can
//! stand for another object's id, and no lookup has two answers.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// A channel name or ref outside `[A-Za-z0-9._-]{1,64}`.
    #[error("{what} {value:?} must match [A-Za-z0-9._-]{{1,64}}")]
    BadToken {
        /// "channel name" or "channel ref".
        what: &'static str,
        /// The text given.
        value: String,
    },
    /// A rollout id that is not `channel@ref`.
    #[error("rollout id {value:?} must be \"<channel>@<ref>\", each matching [A-Za-z0-9._-]{{1,64}}")]
    BadRolloutId {
        /// The text given.
        value: String,
    },
    /// A hostname outside RFC 1123's shape.
    #[error("hostname {value:?} must be 1-253 characters of dot-separated labels [a-z0-9-] (no leading or trailing '-')")]
    BadHostname {
        /// The text given.
        value: String,
    },
    /// Not a Nix store path `/nix/store/<32 nix32 chars>-<name>`.
    #[error("{value:?} is not a Nix store path (/nix/store/<32-character hash>-<name>, name of [A-Za-z0-9+._?=-])")]
    BadStorePath {
        /// The text given.
        value: String,
    },
    /// A tag outside `[A-Za-z0-9._:=/-]{1,128}`.
    #[error("tag {value:?} must match [A-Za-z0-9._:=/-]{{1,128}}")]
    BadTag {
        /// The text given.
        value: String,
    },
    /// A name that parses as an object id ([`as_id`]): lookups by "id or name" try the id
    /// first, so the object would be unreachable by its name — or, worse, its name would be
    /// read as another object's id.
    #[error("{what} {value:?} is a UUID; names must not parse as ids, which are resolved first")]
    NameIsAnId {
        /// "rack name", "site name", "hostname", …
        what: &'static str,
        /// The text given.
        value: String,
    },
}

/// `key` as an object id, when it is one: a UUID in any form the `uuid` crate reads
/// (hyphenated, simple, braced, URN; either case), surrounding whitespace ignored. Every
/// "id or name" lookup calls this first and, when it answers, looks up that id and only that
/// id: a key shaped like an id never falls back to a name.
pub fn as_id(key: &str) -> Option<uuid::Uuid> {
    uuid::Uuid::parse_str(key.trim()).ok()
}

/// Refuses a name (of a rack, switch, power shelf, site, profile or host — `what` says which)
/// that [`as_id`] would read as an id. Called by every create and rename, after the name's own
/// syntax check, on the name as it will be stored.
pub fn check_not_an_id(what: &'static str, name: &str) -> Result<(), NameError> {
    match as_id(name) {
        Some(_) => Err(NameError::NameIsAnId { what, value: crate::text::echo(name).into_owned() }),
        None => Ok(()),
    }
}

fn is_token(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether `s` is a sha256 digest as Drover writes them everywhere: 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a channel name.
pub fn check_channel(s: &str) -> Result<(), NameError> {
    if is_token(s) { Ok(()) } else { Err(NameError::BadToken { what: "channel name", value: crate::text::echo(s).into_owned() }) }
}

/// Checks a channel ref.
pub fn check_ref(s: &str) -> Result<(), NameError> {
    if is_token(s) { Ok(()) } else { Err(NameError::BadToken { what: "channel ref", value: crate::text::echo(s).into_owned() }) }
}

/// Checks a hostname (lowercase RFC 1123).
pub fn check_hostname(s: &str) -> Result<(), NameError> {
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if (1..=253).contains(&s.len()) && s.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(NameError::BadHostname { value: crate::text::echo(s).into_owned() })
    }
}

/// Checks a Nix store path: `/nix/store/`, a 32-character hash in Nix's base-32 alphabet,
/// `-`, and a name of `[A-Za-z0-9+._?=-]` not starting with `.`. Closures end up as
/// arguments of `nix-store` and `nix-env` run as root, so nothing else is let through.
pub fn check_store_path(s: &str) -> Result<(), NameError> {
    const NIX32: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";
    let bad = || NameError::BadStorePath { value: crate::text::echo(s).into_owned() };
    let rest = s.strip_prefix("/nix/store/").ok_or_else(bad)?;
    let (hash, name) = rest.split_at_checked(32).ok_or_else(bad)?;
    let name = name.strip_prefix('-').ok_or_else(bad)?;
    let name_ok = (1..=211).contains(&name.len())
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.' | b'_' | b'?' | b'='));
    if hash.bytes().all(|b| NIX32.contains(&b)) && name_ok { Ok(()) } else { Err(bad()) }
}

/// Checks a host tag.
pub fn check_tag(s: &str) -> Result<(), NameError> {
    let ok = (1..=128).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'=' | b'/'));
    if ok { Ok(()) } else { Err(NameError::BadTag { value: crate::text::echo(s).into_owned() }) }
}

/// `"{channel}@{channelRef}"`: the key of one rollout, recomputed from a manifest's own fields
/// before anything acts on it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RolloutId(String);

impl RolloutId {
    /// Builds the id from its parts, validating both.
    pub fn new(channel: &str, channel_ref: &str) -> Result<Self, NameError> {
        check_channel(channel)?;
        check_ref(channel_ref)?;
        Ok(RolloutId(format!("{channel}@{channel_ref}")))
    }

    /// Parses `channel@ref`.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        let bad = || NameError::BadRolloutId { value: crate::text::echo(s).into_owned() };
        let (channel, channel_ref) = s.split_once('@').ok_or_else(bad)?;
        Self::new(channel, channel_ref).map_err(|_| bad())
    }

    /// The channel part.
    pub fn channel(&self) -> &str {
        self.0.split_once('@').map_or("", |(c, _)| c)
    }

    /// The ref part.
    pub fn channel_ref(&self) -> &str {
        self.0.split_once('@').map_or("", |(_, r)| r)
    }

    /// The whole id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RolloutId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RolloutId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Serialize for RolloutId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RolloutId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        RolloutId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollout_id_round_trips() {
        let id = RolloutId::new("stable", "abc123").expect("valid");
        assert_eq!(id.as_str(), "stable@abc123");
        assert_eq!(RolloutId::parse("stable@abc123").expect("valid"), id);
        assert_eq!(id.channel(), "stable");
        assert_eq!(id.channel_ref(), "abc123");
    }

    #[test]
    fn path_traversal_in_names_is_refused() {
        for bad in ["../etc", "a/b", "", "a b", "x@y", &"a".repeat(65)] {
            assert!(check_channel(bad).is_err(), "{bad:?}");
        }
        for bad in ["stable", "stable@", "@ref", "stable@../x", "a@b@c"] {
            assert!(RolloutId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn store_paths_are_nix_store_paths() {
        assert!(check_store_path("/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-nixos-system-gpu-a-01-25.05").is_ok());
        for bad in [
            "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2",
            "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-",
            "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zse2-x",
            "/nix/store/eeee643dzvlxxpkgbg5kzmwj47sam9zs-x",
            "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-a/../../etc",
            "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-x y",
            "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-.hidden",
            "/usr/bin/env",
        ] {
            assert!(check_store_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_name_shaped_like_any_uuid_form_is_refused_and_reads_as_an_id() {
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        for shaped in
            [id.to_owned(), id.to_ascii_uppercase(), id.replace('-', ""), format!("{{{id}}}"), format!("urn:uuid:{id}"), format!(" {id} ")]
        {
            assert_eq!(as_id(&shaped).map(|u| u.to_string()).as_deref(), Some(id), "{shaped:?}");
            let e = check_not_an_id("rack name", &shaped).expect_err("refused");
            assert!(e.to_string().contains("names must not parse as ids, which are resolved first"), "{e}");
        }
        for fine in ["c07", "67e55044-10b1-426f-9247", "67e55044-10b1-426f-9247-bb680e5fe0c8x", "rack-67e55044"] {
            assert_eq!(as_id(fine), None, "{fine:?}");
            check_not_an_id("rack name", fine).expect("a name");
        }
        let e = check_not_an_id("rack name", id).expect_err("refused");
        assert_eq!(e.to_string(), format!("rack name {id:?} is a UUID; names must not parse as ids, which are resolved first"));
    }

    #[test]
    fn hostnames_follow_rfc1123() {
        assert!(check_hostname("gpu-a-01.dc1").is_ok());
        for bad in ["GPU", "-a", "a-", "a..b", "", "a_b"] {
            assert!(check_hostname(bad).is_err(), "{bad:?}");
        }
    }
}
