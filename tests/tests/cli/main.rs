//! `drover` as an operator or a CI script types it, the real binary against a real
//! coordinator: reads, names, `--wait`, rollouts, events, tokens, administration, versions
//! and honest TLS errors.
//!
//! One test binary of `drover-tests` (each links the coordinator, the agent and the devkit, so
//! there are a few rather than one a file); each file is a module, and a test's name is
//! `file::test`: `cargo nextest run -p drover-tests -E 'test(/^cli_admin::/)'` runs one file.

mod cli_admin;
mod cli_errors;
mod cli_events;
mod cli_names;
mod cli_reads;
mod cli_rollout_status;
mod cli_tokens;
mod cli_version;
mod cli_wait;
mod operator_cli;
mod rollout_cli;
