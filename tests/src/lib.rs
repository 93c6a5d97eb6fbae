//! End-to-end scenarios for Drover: real processes, real TLS, attack cases, and (later) the
//! fleet simulator with its `drover-bench` binary. Today the scenarios drive the `drover`
//! binary's release tooling; see `cli/tests/` for them.

#![forbid(unsafe_code)]
