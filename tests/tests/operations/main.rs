//! Running Drover: `drover-coordinator` as a process, the operator API, OpenAPI and the
//! dashboard, backups and restores, replicas on PostgreSQL, the Debian packages, the NixOS
//! modules, the observability kit, `drover dev` and the CLI's crate layering.
//!
//! One test binary of `drover-tests` (each links the coordinator, the agent and the devkit, so
//! there are a few rather than one a file); each file is a module, and a test's name is
//! `file::test`: `cargo nextest run -p drover-tests -E 'test(/^backup_restore::/)'` runs one file.

mod backup_restore;
mod dashboard_api;
mod dashboard_browser;
mod dev_demo;
mod layering;
mod nixos_modules;
mod observability_kit;
mod openapi;
mod operator_api;
mod packaging_deb;
mod replicas_database_faults;
mod replicas_failover;
mod replicas_shared;
mod restore_older_than_fleet;
mod serve_process;
