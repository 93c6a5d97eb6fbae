//! drover-devkit's integration tests, one test binary: `fake-maas` (with and without its
//! boot directory), `fake-shelf` and the private bus with `fake-systemd`, each as a
//! process. Each file is a module (a test's name is `file::test`).

mod fake_maas;
mod fake_maas_boot;
mod fake_shelf;
mod private_bus;
