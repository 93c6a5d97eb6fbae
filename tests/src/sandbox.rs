//! Sandboxed host roots for tests that run the real agent: the devkit's [`HostRoot`] (scratch
//! with tenant files, a passwd with a tenant, `userdel`, `loginctl`, the drain hook and the
//! fake `nvidia-smi` as scripts that behave like the real ones), with the `[tasks]` table these
//! tests use — no GPU tool until [`gpu_tools`] points the agent at the fake one.

use std::path::{Path, PathBuf};

use drover_devkit::hostroot::HostRoot;

/// Lays out a sandboxed host root; returns the agent's `[tasks]` table for it (its
/// `nvidia_smi` names a tool that is not there).
pub fn sandbox(root: &Path) -> String {
    let host = HostRoot::create(root).unwrap_or_else(|e| panic!("sandbox root: {e}"));
    let p = |rel: &str| host.path(rel).display().to_string();
    format!(
        "[tasks]\nstorage_roots = [\"{scratch}\"]\npasswd_file = \"{passwd}\"\nproc_dir = \"{proc}\"\nmountinfo_file = \"{mi}\"\n\
         userdel = \"{ud}\"\nloginctl = \"{lc}\"\ndrain_hook = [\"{hook}\"]\ncordon_file = \"{cordon}\"\nnvidia_smi = \"{nv}\"\n",
        scratch = p("scratch"),
        passwd = p("etc/passwd"),
        proc = p("proc"),
        mi = p("mountinfo"),
        ud = p("bin/userdel"),
        lc = p("bin/loginctl"),
        hook = p("bin/drain-hook"),
        cordon = p("run/drover/cordoned"),
        nv = p("bin/no-nvidia-smi"),
    )
}

/// Points `extra` (from [`sandbox`]) at the root's fake `nvidia-smi` (real csv formats from
/// the fixtures); returns the fake's state dir (its scenario files and the `log` of every
/// invocation).
pub fn gpu_tools(root: &Path, extra: &mut String) -> PathBuf {
    let host = HostRoot { root: root.to_path_buf() };
    *extra = extra.replace(
        &format!("nvidia_smi = \"{}\"", host.path("bin/no-nvidia-smi").display()),
        &format!("nvidia_smi = \"{}\"", host.path("gpu/bin/nvidia-smi").display()),
    );
    host.path("gpu/state")
}
