//! drover-proto's integration tests, one test binary: canonical JSON (properties, the
//! cross-check against Python's `rfc8785`, fuzzing), release, proof and integer attacks,
//! per-host messages, the fleet spec, and the signed artifacts' fuzz targets. Each file is a
//! module (a test's name is `file::test`). `common` (first, for its `refused!` macro) and
//! `spec_fixtures` hold fixtures; `fuzzing` is shared with other crates' fuzz targets, so it
//! stays at `tests/fuzzing/`.

#[macro_use]
mod common;
#[path = "../fuzzing/mod.rs"]
mod fuzzing;
mod spec_fixtures;

mod canonical_crosscheck;
mod canonical_props;
mod fuzz_canonical;
mod fuzz_signed;
mod messages;
mod per_host_and_resign;
mod proof_attacks;
mod release_attacks;
mod spec_validation;
mod unsafe_integers;
