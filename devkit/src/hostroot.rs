//! A sandbox root that stands in for one GPU host: scratch storage holding a tenant's files,
//! a `passwd` with a tenant user, and the tools at the edge of the machine as scripts that
//! behave like the real ones — `userdel` (exit 6 for an unknown user), `loginctl` (logind's
//! "not logged in" answer, exit 1), a scheduler drain hook, `nvidia-smi` (the agent's own test
//! fake: the real CSV formats and exit codes, from fixtures captured off real GPUs), and
//! `node-check`, the host-local health check a fleet spec's exec probe runs.
//!
//! [`HostRoot::tasks_toml`] is the agent's `[tasks]` and `[health]` configuration for it:
//! every path in it is inside the root, and paths for tools the sandbox lacks (AMD, DCGM,
//! `umount`) name files that do not exist there, so the agent reports them absent rather
//! than reaching for the machine's own.

use std::path::{Path, PathBuf};

use crate::{DevkitError, io_at, sq, write_file};

/// The fake `nvidia-smi`: the same script the agent's task tests run.
const NVIDIA_SMI: &str = include_str!("../../agent/tests/fake-tools/nvidia-smi");
/// Its scenario files: two healthy GPUs before and after a reset, no remapped rows pending.
const GPU_FIXTURES: [(&str, &str); 3] = [
    ("gpus", include_str!("../../agent/tests/fixtures/gpu/nvidia-query-gpu.csv")),
    ("gpus.after", include_str!("../../agent/tests/fixtures/gpu/nvidia-query-gpu.after.csv")),
    ("remapped", include_str!("../../agent/tests/fixtures/gpu/nvidia-remapped.csv")),
];

/// One host's sandbox root.
#[derive(Debug, Clone)]
pub struct HostRoot {
    /// The root directory; nothing of this host lives outside it.
    pub root: PathBuf,
}

impl HostRoot {
    /// Lays out the root: tenant data, users, fake tools.
    pub fn create(root: &Path) -> Result<HostRoot, DevkitError> {
        let h = HostRoot { root: root.to_path_buf() };
        let scratch = h.path("scratch");
        std::fs::create_dir_all(scratch.join("job-1/out")).map_err(io_at(&scratch))?;
        std::fs::write(scratch.join("job-1/out/weights.bin"), vec![7u8; 4096]).map_err(io_at(&scratch))?;
        write_file(&scratch.join("notes.txt"), "tenant data", 0o644)?;
        write_file(
            &h.path("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\nsyslog:x:104:110::/home/syslog:/usr/sbin/nologin\nalice:x:10001:10001:tenant:/home/alice:/bin/bash\n",
            0o644,
        )?;
        std::fs::create_dir_all(h.path("proc")).map_err(io_at(h.path("proc")))?;
        write_file(&h.path("mountinfo"), "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n", 0o644)?;
        let passwd = sq(&h.path("etc/passwd"));
        write_file(
            &h.path("bin/userdel"),
            &format!(
                "#!/bin/sh\nfor last; do :; done\ngrep -q \"^$last:\" {passwd} || {{ echo \"userdel: user '$last' does not exist\" >&2; exit 6; }}\n\
                 sed -i \"/^$last:/d\" {passwd}\necho \"$@\" >> {log}\n",
                log = sq(&h.path("userdel.log"))
            ),
            0o755,
        )?;
        write_file(
            &h.path("bin/loginctl"),
            &format!(
                "#!/bin/sh\nfor last; do :; done\nuid=$(grep \"^$last:\" {passwd} | cut -d: -f3)\n\
                 echo \"Could not terminate user: User ID $uid is not logged in or lingering\" >&2\nexit 1\n"
            ),
            0o755,
        )?;
        write_file(&h.path("bin/drain-hook"), &format!("#!/bin/sh\necho drained > {}\n", sq(&h.path("drained"))), 0o755)?;
        write_file(
            &h.path("bin/node-check"),
            &format!(
                "#!/bin/sh\n# The host-local health check: fails while the running system carries a `broken` mark.\n\
                 # The link names an absolute store path: it is resolved under the root, never on this machine.\n\
                 R={root}; cur=$(readlink \"$R/run/current-system\") || {{ echo \"node-check: no running system\" >&2; exit 1; }}\n\
                 if [ -e \"$R$cur/broken\" ]; then echo \"node-check: $(cat \"$R$cur/broken\")\" >&2; exit 1; fi\necho ok\n",
                root = sq(&h.root)
            ),
            0o755,
        )?;
        write_file(&h.path("gpu/bin/nvidia-smi"), NVIDIA_SMI, 0o755)?;
        for (name, text) in GPU_FIXTURES {
            write_file(&h.path("gpu/state").join(name), text, 0o644)?;
        }
        std::fs::create_dir_all(h.path("var/lib/drover")).map_err(io_at(h.path("var/lib/drover")))?;
        Ok(h)
    }

    /// `rel` under the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The fake `nvidia-smi`'s log of every invocation (arguments, one per line).
    pub fn gpu_log(&self) -> PathBuf {
        self.path("gpu/state/log")
    }

    /// The directory a fleet spec's exec probes find their tools in (put first on the agent's
    /// `PATH`).
    pub fn bin(&self) -> PathBuf {
        self.path("bin")
    }

    /// The agent's `[health]` and `[tasks]` tables for this root.
    pub fn tasks_toml(&self) -> String {
        let p = |rel: &str| toml_str(&self.path(rel));
        format!(
            "[health]\nnvidia_smi = {nv}\nmaas_creds_file = {maas}\ndisks = [{scratch}]\n\n\
             [tasks]\nstorage_roots = [{scratch}]\npasswd_file = {passwd}\nproc_dir = {proc}\nmountinfo_file = {mi}\n\
             userdel = {ud}\nloginctl = {lc}\numount = {um}\ndrain_hook = [{hook}]\ncordon_file = {cordon}\n\
             nvidia_smi = {nv}\namd_smi = {amd}\nrocm_smi = {rocm}\ndcgmi = {dcgmi}\nmaas_creds_file = {maas}\n\
             uninstall_paths = [{unit}, {bin}, {conf}]\n",
            nv = p("gpu/bin/nvidia-smi"),
            maas = p("etc/maas/maas-machine-creds.yml"),
            scratch = p("scratch"),
            passwd = p("etc/passwd"),
            proc = p("proc"),
            mi = p("mountinfo"),
            ud = p("bin/userdel"),
            lc = p("bin/loginctl"),
            um = p("bin/umount"),
            hook = p("bin/drain-hook"),
            cordon = p("run/drover/cordoned"),
            amd = p("bin/amd-smi"),
            rocm = p("bin/rocm-smi"),
            dcgmi = p("bin/dcgmi"),
            unit = p("etc/systemd/system/drover-agent.service"),
            bin = p("usr/local/bin/drover-agent"),
            conf = p("etc/drover/agent.toml"),
        )
    }
}

/// A path as a TOML basic string.
pub fn toml_str(p: &Path) -> String {
    serde_json::to_string(&p.display().to_string()).unwrap_or_else(|_| "\"\"".to_owned())
}
