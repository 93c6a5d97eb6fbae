//! Maintenance tasks (`bare-metal-lifecycle.md` §5.6): each one is **planned** as a list of
//! steps by a pure function over the task's parameters, the `[tasks]` settings and what was
//! observed on the host, then **executed** step by step by [`steps::execute`], which stops at
//! the first failing step and reports every later one as not run. The plans are unit-tested
//! without I/O; execution reaches the machine only through narrow traits (`CommandRunner`,
//! `Systemd`, `GpuTool`) and the filesystem paths the settings name, so tests run the real
//! code against fakes in a temporary root.
//!
//! - [`settings`]: the `[tasks]` table of `agent.toml`.
//! - [`steps`]: the step executor and the shape of a step's result.
//! - [`gpu_scrub`], [`storage`], [`validate`], [`hw_sync`], [`drain`], [`users`],
//!   [`uninstall`]: one task each.
//! - [`runner`]: from an admitted [`Task`](drover_proto::task::Task) to its
//!   [`TaskResult`](drover_proto::report::TaskResult).

pub mod amd;
pub mod drain;
pub mod fsops;
pub mod gpu_scrub;
pub mod gpu_tools;
pub mod host_facts;
pub mod hw_sync;
pub mod mounts;
pub mod runner;
pub mod settings;
pub mod steps;
pub mod storage;
pub mod uninstall;
pub mod users;
pub mod validate;

pub use runner::{TaskEnv, run_task};
pub use settings::TaskSettings;
