//! The Drover coordinator: the fleet's one server.
//!
//! It will hold the PKI (CA, server and client certificates, CRL), the store (SQLite by
//! default, PostgreSQL for HA), the mTLS API for agents and operators, the executor of the
//! planner's plans and the durable job workflows. None of that is built yet (issues
//! "Coordinator core" and "Coordinator API"); what exists today is the contract it will serve,
//! in `drover-proto`, which it re-exports so its users see one vocabulary.
//!
//! The coordinator holds no CI key: it verifies releases with the same
//! `drover_proto::release::verify_release` the CLI and agents use.

#![forbid(unsafe_code)]

pub use drover_proto as proto;
