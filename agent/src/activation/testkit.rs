//! Test helpers: a fake Nix toolchain in a temporary root, a process-spawning [`Systemd`]
//! double, a scripted coordinator and a fake clock — so the activation tests run the real
//! executor, the real [`SystemRunner`](crate::exec::SystemRunner) and real processes.
//!
//! Layout of one kit (`base` is a temporary directory):
//!
//! - `base/root/` — the fake `/`: `nix/store/<hash>-nixos-system-<name>/` closures with
//!   `kernel`, `initrd`, `systemd`, `sw` links and a `bin/switch-to-configuration` script,
//!   `nix/var/nix/profiles/system` (→ `system-N-link` → closure), `run/current-system`;
//! - `base/bin/nix-store`, `base/bin/nix-env` — fake tools, the kit's paths baked into their
//!   text (no environment variable is set, tests run in parallel);
//! - `base/kit/calls.log` — one line per tool call (`nix-store …`, `nix-env …`,
//!   `<closure> switch`);
//! - `base/kit/markers/<closure basename>.{fail,hang,cut-network,fail-boot}` and
//!   `base/kit/markers/nix-env.fail` — what a fake tool is told to do;
//! - `base/kit/release` — a FIFO a hanging `switch-to-configuration` blocks on;
//!   `base/kit/network-cut` — created by a "cut-network" switch, read by [`NetConfirmer`];
//! - `base/kit/units/` — the transient units of [`ProcessSystemd`] (`<unit>.started`,
//!   `<unit>.exit`, `<unit>.log`), readable by any process, so a restarted agent (a new
//!   process) sees the units a killed one started;
//! - `base/state/` — the agent's state directory.

use std::collections::VecDeque;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::{ActivationSettings, Clock, ConfirmAnswer, ConfirmRequest, Confirmer, GateRefusal, HealthGate, Time};
use crate::state::StateDir;
use crate::systemd::{Systemd, SystemdError, UnitStatus};

/// How long any bounded wait in the tests may take.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `cond` until it holds or [`WAIT`] passes; returns whether it held.
pub fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// What a closure's fake `switch-to-configuration` is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// `switch` repoints `/run/current-system`, then exits 4 (units failed).
    Fail,
    /// `switch` blocks on the release FIFO before switching.
    Hang,
    /// `switch` switches, then "cuts the network" ([`NetConfirmer`] answers Unreachable).
    CutNetwork,
    /// `boot` fails.
    FailBoot,
}

impl Behaviour {
    fn suffix(self) -> &'static str {
        match self {
            Behaviour::Fail => "fail",
            Behaviour::Hang => "hang",
            Behaviour::CutNetwork => "cut-network",
            Behaviour::FailBoot => "fail-boot",
        }
    }
}

/// The parts of a closure the switch inhibitors look at (versions of the packages linked).
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    /// Kernel version.
    pub kernel: &'static str,
    /// initrd build.
    pub initrd: &'static str,
    /// systemd version.
    pub systemd: &'static str,
    /// dbus version.
    pub dbus: &'static str,
}

impl Default for Parts {
    fn default() -> Self {
        Parts { kernel: "6.6.60", initrd: "1", systemd: "256.8", dbus: "1.14.10" }
    }
}

/// A fake NixOS host in a temporary directory.
pub struct Kit {
    _tmp: Option<tempfile::TempDir>,
    /// The kit's base directory.
    pub base: PathBuf,
    /// The fake `/`.
    pub root: PathBuf,
    /// Call log, markers, FIFO, units.
    pub kit: PathBuf,
    /// Settings pointing at the fake root and tools.
    pub settings: ActivationSettings,
    /// The state directory.
    pub state: StateDir,
}

/// `/nix/store/<32 nix-base-32 chars>-<name>`, the hash derived from the name.
pub fn store_path(name: &str) -> String {
    const NIX32: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";
    let digest = Sha256::digest(name.as_bytes());
    let hash: String = digest.iter().take(32).map(|b| NIX32[usize::from(*b) % 32] as char).collect();
    format!("/nix/store/{hash}-{name}")
}

fn write_script(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write script");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Single-quotes `p` for a shell script.
fn sq(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

impl Kit {
    /// A new kit with the fake tools installed and an empty root (no profile yet).
    pub fn new() -> Kit {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = tmp.path().to_owned();
        let mut kit = Kit::open(&base);
        kit._tmp = Some(tmp);
        for dir in ["nix/store", "nix/var/nix/profiles", "run"] {
            fs::create_dir_all(kit.root.join(dir)).expect("mkdir");
        }
        fs::create_dir_all(kit.kit.join("markers")).expect("mkdir");
        fs::create_dir_all(kit.kit.join("units")).expect("mkdir");
        fs::write(kit.kit.join("calls.log"), "").expect("log");
        nix::unistd::mkfifo(&kit.kit.join("release"), nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
        let (r, k) = (sq(&kit.root), sq(&kit.kit));
        write_script(
            &kit.settings.nix_store,
            &format!(
                r#"#!/bin/sh
R={r}; K={k}
echo "nix-store $*" >> "$K/calls.log"
if [ "$#" -ne 2 ] || [ "$1" != --realise ]; then echo "fake nix-store: unsupported: $*" >&2; exit 2; fi
if [ -e "$R$2" ]; then echo "$2"; else echo "error: path '$2' is not valid" >&2; exit 1; fi
"#
            ),
        );
        write_script(
            &kit.settings.nix_env,
            &format!(
                r#"#!/bin/sh
R={r}; K={k}
echo "nix-env $*" >> "$K/calls.log"
if [ "$#" -ne 4 ] || [ "$1" != -p ] || [ "$3" != --set ]; then echo "fake nix-env: unsupported: $*" >&2; exit 2; fi
if [ -e "$K/markers/nix-env.fail" ]; then echo "error: opening lock file '$2.lock': Permission denied" >&2; exit 1; fi
if [ ! -e "$R$4" ]; then echo "error: path '$4' is not valid" >&2; exit 1; fi
dir=$(dirname "$2"); base=$(basename "$2"); n=1
while [ -e "$dir/$base-$n-link" ] || [ -L "$dir/$base-$n-link" ]; do n=$((n+1)); done
ln -s "$4" "$dir/$base-$n-link"
ln -sfn "$base-$n-link" "$dir/.$base.tmp" && mv -T "$dir/.$base.tmp" "$2"
"#
            ),
        );
        kit
    }

    /// The kit at `base`, made by [`Kit::new`] (in another process: the child of a kill test).
    pub fn open(base: &Path) -> Kit {
        let root = base.join("root");
        let kit = base.join("kit");
        let settings = ActivationSettings {
            root: root.clone(),
            nix_store: base.join("bin/nix-store"),
            nix_env: base.join("bin/nix-env"),
            switch_timeout_secs: 30,
            quarantine_secs: 3600,
            confirm_retry_secs: 5,
            ..ActivationSettings::default()
        };
        let state = StateDir::open(&base.join("state")).expect("state dir");
        Kit { _tmp: None, base: base.to_owned(), root, kit, settings, state }
    }

    fn on_disk(&self, abs: &str) -> PathBuf {
        self.settings.rooted(abs)
    }

    /// Creates a fake NixOS closure `nixos-system-<name>` and returns its store path.
    pub fn closure(&self, name: &str, parts: Parts) -> String {
        let mk = |pkg: String, file: Option<&str>| -> String {
            let sp = store_path(&pkg);
            let dir = self.on_disk(&sp);
            fs::create_dir_all(&dir).expect("mkdir");
            match file {
                Some(f) => {
                    fs::create_dir_all(dir.join(f).parent().expect("parent")).expect("mkdir");
                    fs::write(dir.join(f), "x").expect("write");
                    format!("{sp}/{f}")
                }
                None => sp,
            }
        };
        let kernel = mk(format!("linux-{}", parts.kernel), Some("bzImage"));
        let initrd = mk(format!("initrd-linux-{}-{}", parts.kernel, parts.initrd), Some("initrd"));
        let systemd = mk(format!("systemd-{}", parts.systemd), None);
        let dbus = mk(format!("dbus-{}", parts.dbus), Some("bin/dbus-daemon"));
        let sw = store_path(&format!("system-path-{name}"));
        fs::create_dir_all(self.on_disk(&sw).join("bin")).expect("mkdir");
        symlink(&dbus, self.on_disk(&sw).join("bin/dbus-daemon")).expect("link");
        let top = store_path(&format!("nixos-system-{name}"));
        let dir = self.on_disk(&top);
        fs::create_dir_all(dir.join("bin")).expect("mkdir");
        for (link, to) in [("kernel", &kernel), ("initrd", &initrd), ("systemd", &systemd), ("sw", &sw)] {
            symlink(to, dir.join(link)).expect("link");
        }
        let (r, k) = (sq(&self.root), sq(&self.kit));
        write_script(
            &dir.join("bin/switch-to-configuration"),
            &format!(
                r#"#!/bin/sh
R={r}; K={k}; P='{top}'
echo "$P $*" >> "$K/calls.log"
m="$K/markers/$(basename "$P")"
case "$1" in
  switch)
    if [ -e "$m.hang" ]; then timeout 120 sh -c 'read -r _ < "$1"' _ "$K/release" || exit 9; fi
    ln -sfn "$P" "$R/run/.current-system.tmp" && mv -T "$R/run/.current-system.tmp" "$R/run/current-system"
    if [ -e "$m.cut-network" ]; then : > "$K/network-cut"; fi
    if [ -e "$m.fail" ]; then echo "warning: the following units failed: gpu-exporter.service" >&2; exit 4; fi
    ;;
  boot)
    if [ -e "$m.fail-boot" ]; then echo "Failed to install bootloader" >&2; exit 1; fi
    ;;
  *) echo "usage: switch-to-configuration [switch|boot|test|dry-activate]" >&2; exit 1 ;;
esac
"#
            ),
        );
        top
    }

    /// Makes `closure` the running system and the profile's first generation.
    pub fn install_running(&self, closure: &str) {
        let profiles = self.on_disk("/nix/var/nix/profiles");
        symlink(closure, profiles.join("system-1-link")).expect("link");
        symlink("system-1-link", profiles.join("system")).expect("link");
        symlink(closure, self.on_disk("/run/current-system")).expect("link");
    }

    /// What `/run/current-system` resolves to.
    pub fn running(&self) -> Option<String> {
        super::inspect::closure_of(&self.root, super::CURRENT_SYSTEM)
    }

    /// What the system profile resolves to.
    pub fn profile(&self) -> Option<String> {
        super::inspect::closure_of(&self.root, super::SYSTEM_PROFILE)
    }

    /// The tool calls so far.
    pub fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.kit.join("calls.log")).expect("log").lines().map(str::to_owned).collect()
    }

    /// The `switch-to-configuration` calls of `closure` (`"switch"`, `"boot"`).
    pub fn stc_calls(&self, closure: &str) -> Vec<String> {
        self.calls().iter().filter_map(|l| l.strip_prefix(closure).map(|a| a.trim().to_owned())).collect()
    }

    /// Tells `closure`'s `switch-to-configuration` to misbehave.
    pub fn mark(&self, closure: &str, b: Behaviour) {
        let base = closure.rsplit('/').next().expect("basename");
        fs::write(self.kit.join("markers").join(format!("{base}.{}", b.suffix())), "").expect("marker");
    }

    /// Makes `nix-env` fail.
    pub fn fail_nix_env(&self) {
        fs::write(self.kit.join("markers/nix-env.fail"), "").expect("marker");
    }

    /// Lets a hanging `switch-to-configuration` go on (waits, bounded, for it to be there).
    pub fn release_hang(&self) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let fifo = self.kit.join("release");
        let mut opened = None;
        // Opening a FIFO for writing without blocking fails (ENXIO) until a reader is there.
        assert!(
            wait_for(|| {
                opened = fs::OpenOptions::new().write(true).custom_flags(nix::libc::O_NONBLOCK).open(&fifo).ok();
                opened.is_some()
            }),
            "no hanging switch-to-configuration reads the release FIFO"
        );
        opened.expect("opened").write_all(b"go\n").expect("release");
    }

    /// The network-cut marker.
    pub fn network_cut_marker(&self) -> PathBuf {
        self.kit.join("network-cut")
    }

    /// A systemd double over this kit's unit directory.
    pub fn systemd(&self) -> ProcessSystemd {
        ProcessSystemd { dir: self.kit.join("units") }
    }
}

/// A [`Systemd`] whose transient units are real child processes: the unit's argv runs under
/// a `sh` wrapper that records its exit status in `<dir>/<unit>.exit`; the unit's state is
/// read from those files, so any process sees the units of any other (like systemd's).
pub struct ProcessSystemd {
    dir: PathBuf,
}

const WRAPPER: &str = r#""$@"; c=$?; echo "$c" > "$D/$U.exit.tmp"; mv "$D/$U.exit.tmp" "$D/$U.exit""#;

impl Systemd for ProcessSystemd {
    fn start_transient_service(&self, unit: &str, _description: &str, argv: &[String]) -> Result<(), SystemdError> {
        let started = self.dir.join(format!("{unit}.started"));
        let call_err = |message: String| SystemdError::Call { method: "StartTransientUnit", unit: unit.to_owned(), message };
        if started.exists() {
            return Err(call_err(format!("Unit {unit} already exists.")));
        }
        fs::write(&started, "").map_err(|e| call_err(e.to_string()))?;
        let log = fs::File::create(self.dir.join(format!("{unit}.log"))).map_err(|e| call_err(e.to_string()))?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("sh")
            .args(argv)
            .env("D", &self.dir)
            .env("U", unit)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| call_err(e.to_string()))?)
            .stderr(log)
            .spawn()
            .map_err(|e| call_err(e.to_string()))?;
        // Reaped by a thread; the unit's state comes from the wrapper's files, not from here.
        std::thread::spawn(move || child.wait());
        Ok(())
    }

    fn unit_status(&self, unit: &str) -> Result<Option<UnitStatus>, SystemdError> {
        let status = |a: &str, s: &str, r: &str| UnitStatus { active_state: a.into(), sub_state: s.into(), result: r.into() };
        if let Ok(code) = fs::read_to_string(self.dir.join(format!("{unit}.exit"))) {
            return Ok(Some(if code.trim() == "0" {
                status("inactive", "dead", "success")
            } else {
                status("failed", "failed", "exit-code")
            }));
        }
        Ok(self.dir.join(format!("{unit}.started")).exists().then(|| status("active", "running", "")))
    }

    fn wait_finished(&self, unit: &str, timeout: Duration) -> Result<UnitStatus, SystemdError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.unit_status(unit)? {
                Some(st) if !st.is_running() => return Ok(st),
                None => return Err(SystemdError::Call { method: "GetUnit", unit: unit.into(), message: "no such unit".into() }),
                Some(st) if Instant::now() >= deadline => {
                    return Err(SystemdError::Timeout { unit: unit.into(), state: st.active_state, secs: timeout.as_secs() });
                }
                Some(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    fn failed_units(&self) -> Result<Vec<String>, SystemdError> {
        Ok(Vec::new())
    }

    fn restart_unit(&self, _unit: &str) -> Result<(), SystemdError> {
        Ok(())
    }
}

/// The coordinator as seen from the host: Unreachable while the network-cut marker exists,
/// otherwise the scripted answers in order, then `default`.
pub struct NetConfirmer {
    cut: PathBuf,
    script: Mutex<VecDeque<ConfirmAnswer>>,
    default: ConfirmAnswer,
    /// Every request received.
    pub requests: Mutex<Vec<ConfirmRequest>>,
}

impl NetConfirmer {
    /// Answers `default` (unless the network is cut).
    pub fn new(kit: &Kit, default: ConfirmAnswer) -> Self {
        NetConfirmer { cut: kit.network_cut_marker(), script: Mutex::new(VecDeque::new()), default, requests: Mutex::new(Vec::new()) }
    }

    /// Answers `script` first.
    pub fn scripted(kit: &Kit, script: Vec<ConfirmAnswer>, default: ConfirmAnswer) -> Self {
        NetConfirmer { script: Mutex::new(script.into()), ..Self::new(kit, default) }
    }

    /// How many confirmations were attempted.
    pub fn attempts(&self) -> usize {
        self.requests.lock().expect("lock").len()
    }
}

impl Confirmer for NetConfirmer {
    fn confirm(&self, request: &ConfirmRequest) -> ConfirmAnswer {
        self.requests.lock().expect("lock").push(request.clone());
        if self.cut.exists() {
            return ConfirmAnswer::Unreachable("connect: network is unreachable".into());
        }
        self.script.lock().expect("lock").pop_front().unwrap_or_else(|| self.default.clone())
    }
}

/// A gate with a fixed verdict.
pub struct FixedGate(pub Result<(), GateRefusal>);

impl HealthGate for FixedGate {
    fn check(&self) -> Result<(), GateRefusal> {
        match &self.0 {
            Ok(()) => Ok(()),
            // The same verdict every time, as its reason.
            Err(refusal) => Err(GateRefusal::Reason(refusal.to_string())),
        }
    }
}

/// A clock that only moves when slept on (or set).
pub struct FakeClock(AtomicI64);

/// 2026-11-21T10:00:00Z.
pub const T0: i64 = 1_795_255_200;

impl FakeClock {
    /// At `unix` seconds.
    pub fn at(unix: i64) -> Self {
        FakeClock(AtomicI64::new(unix))
    }

    /// Moves it forward.
    pub fn advance(&self, secs: i64) {
        self.0.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Time {
        Time::from_unix(self.0.load(Ordering::SeqCst)).expect("time")
    }

    fn sleep(&self, d: Duration) {
        self.advance(i64::try_from(d.as_secs()).expect("secs"));
    }
}
