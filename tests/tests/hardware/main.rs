//! The machines under the fleet: MAAS (the client against `fake-maas`, sites, onboarding,
//! drift, a deployment that boots), the rack inventory, rack maintenance on sushy-emulator,
//! power shelves and the device controllers across a coordinator restart.
//!
//! One test binary of `drover-tests` (each links the coordinator, the agent and the devkit, so
//! there are a few rather than one a file); each file is a module, and a test's name is
//! `file::test`: `cargo nextest run -p drover-tests -E 'test(/^device_restart::/)'` runs one file.

mod device_restart;
mod maas_boot;
mod maas_client;
mod maas_drift;
mod maas_onboarding;
mod maas_onboarding_restart;
mod maas_sites;
mod power_shelves;
mod rack_maintenance;
mod racks_api;
