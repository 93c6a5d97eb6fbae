//! The Drover node agent, one per host.
//!
//! It will enroll with a hash-pinned trust file, pull intents and tasks, verify every
//! signature and its own wave membership (`drover_proto::verify`), activate NixOS closures
//! with magic rollback, run maintenance tasks and report health and probes. None of that is
//! built yet (issues "Agent" and "Agent maintenance tasks"); the verification it will rely on
//! is complete in `drover-proto`, re-exported here.

#![forbid(unsafe_code)]

pub use drover_proto as proto;
