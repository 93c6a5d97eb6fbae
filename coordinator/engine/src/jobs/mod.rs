//! Coordinator jobs as the engine runs them: the pure decision core is the crate
//! `drover-workflows` (`drover_workflows::jobs`, re-exported here under its old paths); this
//! module persists its decisions and does the work they name.
//!
//! - [`maas_child`]: the child MAAS workflow of reimage and full decommission.
//! - [`exec`]: the executor that persists decisions — one store transaction per step —
//!   and [`local`]: the host changes, webhook and credentials of the local stages.

pub mod exec;
pub mod local;
pub mod maas_child;

pub use drover_workflows::jobs::*;
