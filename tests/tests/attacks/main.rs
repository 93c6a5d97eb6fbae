//! Attacks on a real coordinator: hostile and malformed requests, connection floods,
//! anonymous hammering and body floods, TLS rules and an outside TLS scan, secrets kept out
//! of logs, and a full disk.
//!
//! One test binary of `drover-tests` (each links the coordinator, the agent and the devkit, so
//! there are a few rather than one a file); each file is a module, and a test's name is
//! `file::test`: `cargo nextest run -p drover-tests -E 'test(/^anonymous_attacks::/)'` runs one file.

mod anonymous_attacks;
mod connection_flood;
mod full_disk;
mod hostile_input;
mod secrets;
mod tls_and_isolation;
mod tls_scan;
