//! The agent against a real coordinator: enrollment, the agent routes, `drover-agent run`
//! as a process, certificate renewal, systemd over D-Bus, maintenance and lifecycle tasks,
//! evidence and sealing, the agent on a plain Ubuntu host and its uninstall.
//!
//! One test binary of `drover-tests` (each links the coordinator, the agent and the devkit, so
//! there are a few rather than one a file); each file is a module, and a test's name is
//! `file::test`: `cargo nextest run -p drover-tests -E 'test(/^agent_renewal::/)'` runs one file.

mod agent_renewal;
mod agent_routes;
mod agent_run;
mod agent_systemd;
mod agent_tasks;
mod agent_ubuntu;
mod agent_uninstall;
mod enrollment;
mod evidence_and_sealing;
mod lifecycle;
mod lifecycle_tasks;
mod task_hw_sync_dbus;
