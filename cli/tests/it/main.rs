//! drover-cli's integration tests, one test binary: the real `drover` binary on bad input,
//! releases and their attacks, `plan`, `enroll`, `onboard`, the job verbs, OpenSSL interop
//! and `drover ui`'s proxy. Each file is a module (a test's name is `file::test`); `common`
//! holds what they share.

mod common;

mod bad_input;
mod enroll_cli;
mod jobs_cli;
mod onboard_cli;
mod openssl_interop;
mod plan_cli;
mod release_cli;
mod ui_proxy;
