//! Releases, rollouts and jobs end to end: publishing, the rollout executor, coordinator
//! jobs and their recovery actions, crash safety across a SIGKILLed coordinator, budget
//! pacing at scale, the 20-agent fleet and the 200-agent fleet simulator.
//!
//! One test binary of `drover-tests` (each links the coordinator, the agent and the devkit, so
//! there are a few rather than one a file); each file is a module, and a test's name is
//! `file::test`: `cargo nextest run -p drover-tests -E 'test(/^fleet_e2e::/)'` runs one file.

mod fleet_e2e;
mod fleet_sim;
mod jobs_actions;
mod jobs_e2e;
mod jobs_force_release;
mod jobs_restart;
mod jobs_scale;
mod releases;
mod rollout_engine;
mod rollout_restart;
