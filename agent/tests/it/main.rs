//! drover-agent's integration tests, one test binary: the pull loop against scripted and
//! hostile coordinators, enrollment and director-key rotation, the tasks against fake tools
//! and real files, probes, `check-config`, the state directory under `kill -9` and on a full
//! disk, and the configuration's fuzz target. Each file is a module (a test's name is
//! `file::test`); `common` holds the pull-loop tests' fixtures.

mod common;

mod check_config;
mod director_rotation;
mod enroll_fake_coordinator;
mod full_disk;
mod fuzz_config;
mod gpu_fake_nvidia_smi;
mod probes_local_listeners;
mod pull_hostile;
mod pull_loop;
mod state_crash;
mod task_gpu_scrub;
mod task_storage;
mod task_users_drain;
mod task_validate;
mod task_validate_gpu;
