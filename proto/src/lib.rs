//! Drover's wire contract, shared by the coordinator, the agent and the CLI.
//!
//! - [`canonical`]: RFC 8785 canonical JSON, the bytes every signature covers.
//! - [`keys`], [`trust`], [`sig`]: Ed25519 keys in openssl's formats, trust roots with
//!   thresholds and validity windows, detached signature files and per-host envelopes.
//! - [`spec`], [`selector`], [`resolve`]: the fleet spec CI evaluates and its deterministic
//!   projection into the signed artifacts of [`artifacts`]; [`release`] builds and verifies a
//!   release directory's files.
//! - [`merkle`]: the Merkle tree over a manifest's host set and its inclusion and absence
//!   proofs (`docs/manifest-proofs.md`).
//! - [`verify`]: every verification rule, one [`verify::VerifyError`] variant per rule.
//! - [`intent`], [`task`], [`report`], [`states`]: per-host messages, agent reports and the
//!   state enums with their legal transitions; [`enroll`]: enrollment and distribution;
//!   [`publish`]: publishing a release to the coordinator; [`seal`]: task secrets sealed to
//!   their host (HPKE); [`evidence`]: host-signed statements a tenant verifies offline;
//!   [`rotation`]: the director key handing over to its successor.
//! - [`api`]: the coordinator's operator API as types, written by the coordinator and read by
//!   the CLI with the same definitions; [`event_kinds`]: the kinds of event it records.
//! - [`names`], [`time`], [`duration`], [`text`], [`version`]: validated identifiers, wire
//!   times, the spec's durations, free text a person reads, and release-version skew.
//!
//! No I/O and no clock: time is always a parameter.

#![forbid(unsafe_code)]

pub mod api;
pub mod artifacts;
pub mod canonical;
pub mod duration;
pub mod enroll;
pub mod event_kinds;
pub mod evidence;
pub mod intent;
pub mod keys;
pub mod merkle;
pub mod names;
pub mod publish;
pub mod release;
pub mod report;
pub mod resolve;
pub mod rotation;
pub mod seal;
pub mod selector;
pub mod sig;
pub mod spec;
pub mod states;
pub mod task;
pub mod text;
pub mod time;
pub mod trust;
pub mod verify;
pub mod version;
