//! `allocation.revoke_user` and `node.drain` against fake tools and real processes: `loginctl`
//! and `userdel` doubles that record their argv and answer with the real tools' exit codes and
//! messages (userdel edits the fake passwd file, so a second run sees its work), real tenant
//! processes started with `setpriv` under uids no other test uses, and real drain hooks.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drover_agent::exec::SystemRunner;
use drover_agent::systemd::fake::FakeSystemd;
use drover_agent::tasks::{TaskEnv, TaskSettings, drain, steps, users};
use drover_agent::timekeeping::SystemClock;
use drover_proto::report::{StepOutcome, StepResult, TaskOutcome};

/// No task here talks to systemd: a manager with no units (every call is `NoSuchUnit`).
static NO_SYSTEMD: std::sync::LazyLock<FakeSystemd> = std::sync::LazyLock::new(FakeSystemd::new);

fn env<'a>(settings: &'a TaskSettings, state: &'a Path) -> TaskEnv<'a> {
    TaskEnv { settings, runner: &SystemRunner, systemd: &*NO_SYSTEMD, clock: &SystemClock, state_dir: state }
}

/// An executable written by a `cp` child (never through a descriptor of this process, which a
/// concurrently forking test thread could inherit: ETXTBSY).
fn executable(dir: &Path, name: &str, script: &str) -> PathBuf {
    let source = dir.join(format!("{name}.src"));
    std::fs::write(&source, script).expect("write script");
    let path = dir.join(name);
    assert!(Command::new("cp").arg(&source).arg(&path).status().expect("cp").success());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A fake host for revoke_user: `passwd` with root, system users and the given tenants; fake
/// `loginctl` (sessions only for the names in `with_session`) and `userdel`, both logging to
/// `tools.log`; the real `/proc`. The tenant range is narrowed to the 100 uids around the
/// tenants' (each test its own), so that no other test's processes are ever tenants here.
fn revoke_host(root: &Path, tenants: &[(&str, u32)], with_session: &[&str]) -> TaskSettings {
    let mut passwd = String::from(
        "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
         ops:x:1000:1000:Operator:/home/ops:/bin/bash\nsvc:x:998:998::/var/lib/svc:/usr/sbin/nologin\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    );
    for (name, uid) in tenants {
        passwd.push_str(&format!("{name}:x:{uid}:{uid}::/home/{name}:/bin/bash\n"));
    }
    std::fs::write(root.join("passwd"), passwd).expect("passwd");
    let log = root.join("tools.log");
    let sessions = with_session.join(" ");
    // logind's answer for a user without session: exit 1, "Could not terminate user: User ID
    // N is not logged in or lingering" (loginctl terminate-user over TerminateUser).
    let loginctl = executable(
        root,
        "loginctl",
        &format!(
            "#!/bin/sh\necho \"loginctl $*\" >> '{log}'\nname=\"$3\"\nfor s in {sessions}; do [ \"$s\" = \"$name\" ] && exit 0; done\n\
             echo \"Could not terminate user: User ID 4711 is not logged in or lingering\" >&2\nexit 1\n",
            log = log.display()
        ),
    );
    // userdel: exit 6 "user 'x' does not exist", else the line leaves the passwd file.
    let userdel = executable(
        root,
        "userdel",
        &format!(
            "#!/bin/sh\necho \"userdel $*\" >> '{log}'\nname=\"$3\"\nif ! grep -q \"^$name:\" '{pw}'; then echo \"userdel: user '$name' does not exist\" >&2; exit 6; fi\n\
             grep -v \"^$name:\" '{pw}' > '{pw}.new'; mv '{pw}.new' '{pw}'\n",
            log = log.display(),
            pw = root.join("passwd").display()
        ),
    );
    TaskSettings {
        passwd_file: root.join("passwd"),
        proc_dir: "/proc".into(),
        loginctl,
        userdel,
        process_stop_grace_secs: 1,
        tenant_uid_min: tenants[0].1 / 100 * 100,
        tenant_uid_max: tenants[0].1 / 100 * 100 + 99,
        ..TaskSettings::default()
    }
}

fn tool_log(root: &Path) -> Vec<String> {
    std::fs::read_to_string(root.join("tools.log")).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// `argv` as `uid` (real and effective), no supplementary groups.
fn spawn_as(uid: u32, argv: &[&str]) -> Child {
    let id = uid.to_string();
    Command::new("setpriv")
        .args([format!("--reuid={id}"), format!("--regid={id}"), "--clear-groups".to_owned()])
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("setpriv")
}

/// Waits until `child`'s uid is `uid` in `/proc` (setpriv has exec'd).
fn wait_uid(child: &Child, uid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if drover_agent::tasks::host_facts::process(Path::new("/proc"), child.id() as i32).is_some_and(|p| p.uid == uid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("pid {} never ran as uid {uid}", child.id());
}

fn outcomes(steps: &[StepResult]) -> Vec<(&str, StepOutcome)> {
    steps.iter().map(|s| (s.name.as_str(), s.outcome)).collect()
}

#[test]
fn revoke_user_never_touches_root_or_system_users() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let settings = revoke_host(root, &[("t1", 47101)], &[]);
    let env = env(&settings, root);

    // Naming root (even beside a tenant) refuses the whole task before anything runs.
    for req in [vec!["root".to_owned()], vec!["t1".to_owned(), "svc".to_owned()], vec!["ops".to_owned()]] {
        let steps = users::run(Some(&req), &env);
        assert_eq!(steps.len(), 1, "{steps:#?}");
        assert_eq!(steps[0].outcome, StepOutcome::Error);
        assert!(steps[0].message.starts_with("refusing to remove uid "), "{}", steps[0].message);
    }
    let steps = users::run(Some(&["root".to_owned()]), &env);
    assert_eq!(steps[0].message, "refusing to remove uid 0 user root");
    assert!(tool_log(root).is_empty(), "no tool ran: {:?}", tool_log(root));

    // A system-uid process stays up while every tenant user goes.
    let mut system_proc = is_root().then(|| spawn_as(1000, &["sleep", "300"]));
    if let Some(c) = &system_proc {
        wait_uid(c, 1000);
    }
    let steps = users::run(None, &env);
    assert_eq!(steps::outcome(&steps), TaskOutcome::Succeeded, "{steps:#?}");
    assert_eq!(tool_log(root), ["loginctl terminate-user -- t1", "userdel --remove -- t1"]);
    let passwd = std::fs::read_to_string(&settings.passwd_file).expect("passwd");
    for kept in ["root:", "daemon:", "ops:", "svc:", "nobody:"] {
        assert!(passwd.contains(kept), "{kept} kept");
    }
    if let Some(c) = system_proc.as_mut() {
        assert!(c.try_wait().expect("try_wait").is_none(), "the uid-1000 process was not signalled");
        c.kill().expect("kill");
        c.wait().expect("reap");
    }
}

#[test]
fn revoke_user_ends_sessions_kills_processes_and_removes_tenant_users() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let settings = revoke_host(root, &[("ta", 47201), ("tb", 47202)], &["ta"]);
    let env = env(&settings, root);
    let mut procs = Vec::new();
    if is_root() {
        // Two polite processes of ta, and one of tb that ignores SIGTERM (only SIGKILL ends it).
        procs.push(spawn_as(47201, &["sleep", "300"]));
        procs.push(spawn_as(47201, &["sleep", "300"]));
        procs.push(spawn_as(47202, &["sh", "-c", "trap '' TERM; sleep 300; sleep 300"]));
        // And one of a tenant uid no passwd entry names any more (an orphan).
        procs.push(spawn_as(47250, &["sleep", "300"]));
        for (c, uid) in procs.iter().zip([47201, 47201, 47202, 47250]) {
            wait_uid(c, uid);
        }
    }
    let mut bystander = Command::new("sleep").arg("300").spawn().expect("root's sleep");

    let started = Instant::now();
    let steps = users::run(None, &env);
    assert_eq!(steps::outcome(&steps), TaskOutcome::Succeeded, "{steps:#?}");
    let expected_stop = if is_root() { StepOutcome::Ok } else { StepOutcome::Skipped };
    let orphan = if is_root() { &[("stop-processes uid 47250", StepOutcome::Ok)][..] } else { &[] };
    assert_eq!(
        outcomes(&steps),
        [
            &[
                ("end-sessions ta", StepOutcome::Ok),
                ("stop-processes ta", expected_stop),
                ("remove ta", StepOutcome::Ok),
                ("end-sessions tb", StepOutcome::Skipped),
                ("stop-processes tb", expected_stop),
                ("remove tb", StepOutcome::Ok),
            ][..],
            orphan,
        ]
        .concat()
    );
    assert_eq!(
        tool_log(root),
        ["loginctl terminate-user -- ta", "userdel --remove -- ta", "loginctl terminate-user -- tb", "userdel --remove -- tb"]
    );
    assert!(!std::fs::read_to_string(&settings.passwd_file).expect("passwd").contains("47"), "tenant lines gone");

    if is_root() {
        assert_eq!(steps[1].data["sigkill"], serde_json::json!([]), "ta's processes left on SIGTERM: {:?}", steps[1].data);
        // tb's shell and its sleep both ignore SIGTERM: only SIGKILL ends them.
        let tb = &steps[4].data;
        assert!(tb["sigkill"].as_array().is_some_and(|k| !k.is_empty() && k.contains(&tb["pids"][0])), "{tb:?}");
        assert_eq!(tb["left"], serde_json::json!([]));
        assert!(started.elapsed() < Duration::from_secs(30));
        for mut c in procs {
            let status = c.wait().expect("reap");
            assert!(status.signal().is_some(), "ended by a signal: {status:?}");
        }
    }
    assert!(bystander.try_wait().expect("try_wait").is_none(), "root's process was not signalled");
    bystander.kill().expect("kill");
    bystander.wait().expect("reap");
}

#[test]
fn revoke_user_second_run_finds_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let settings = revoke_host(root, &[("tc", 47301), ("td", 47302)], &[]);
    let env = env(&settings, root);

    let first = users::run(None, &env);
    assert_eq!(steps::outcome(&first), TaskOutcome::Succeeded, "{first:#?}");
    let calls = tool_log(root).len();
    assert_eq!(calls, 4);

    let second = users::run(None, &env);
    assert_eq!(outcomes(&second), [("revoke-users", StepOutcome::Skipped)]);
    assert_eq!(second[0].message, "no tenant users in uid range 47300-47399");
    assert_eq!(tool_log(root).len(), calls, "no tool ran again");

    let named = users::run(Some(&["tc".to_owned()]), &env);
    assert_eq!(outcomes(&named), [("remove tc", StepOutcome::Skipped)]);
    assert_eq!(steps::outcome(&named), TaskOutcome::Succeeded);

    // passwd still lists a user userdel no longer knows (exit 6): already removed, skipped.
    let gone = TaskSettings {
        userdel: executable(root, "userdel6", "#!/bin/sh\necho \"userdel: user '$3' does not exist\" >&2\nexit 6\n"),
        ..settings.clone()
    };
    std::fs::write(&settings.passwd_file, "root:x:0:0:root:/root:/bin/bash\nte:x:47303:47303::/home/te:/bin/sh\n").expect("passwd");
    let steps = users::run(None, &self::env(&gone, root));
    assert_eq!(steps.last().map(|s| (s.name.as_str(), s.outcome)), Some(("remove te", StepOutcome::Skipped)), "{steps:#?}");
}

/// A fake host for drain: an empty `/proc` (no tenant processes) and a nested cordon path.
fn drain_host(root: &Path, hook: Vec<String>) -> TaskSettings {
    std::fs::create_dir_all(root.join("proc")).expect("proc");
    TaskSettings { proc_dir: root.join("proc"), cordon_file: root.join("run/drover/cordoned"), drain_hook: hook, ..TaskSettings::default() }
}

#[test]
fn drain_cordons_and_runs_the_hook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let marker = root.join("hook-ran");
    let hook = executable(root, "stop-tenant-workloads", &format!("#!/bin/sh\necho \"$@\" > '{}'\n", marker.display()));
    let settings = drain_host(root, vec![hook.display().to_string(), "--all".to_owned(), "a b".to_owned()]);

    let steps = drain::run(60, &env(&settings, root));
    assert_eq!(steps::outcome(&steps), TaskOutcome::Succeeded, "{steps:#?}");
    assert_eq!(outcomes(&steps), [("cordon", StepOutcome::Ok), ("drain-hook", StepOutcome::Ok), ("tenant-processes", StepOutcome::Ok)]);
    let cordon: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&settings.cordon_file).expect("cordoned")).expect("json");
    assert_eq!(cordon["by"], "node.drain");
    assert!(cordon["cordonedAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{cordon}");
    assert_eq!(std::fs::read_to_string(&marker).expect("hook ran"), "--all a b\n", "argv passed without a shell");
    assert_eq!(steps[2].data["tenantPids"], serde_json::json!([]));

    // No hook: cordon only, the hook step skipped.
    let no_hook = drain_host(root, Vec::new());
    let steps = drain::run(60, &env(&no_hook, root));
    assert_eq!(steps[1].outcome, StepOutcome::Skipped);
    assert_eq!(steps[1].message, "no drain hook configured");
    assert_eq!(steps::outcome(&steps), TaskOutcome::Succeeded);

    // A failing hook fails the drain, quoting its stderr.
    let failing = executable(root, "failing-hook", "#!/bin/sh\necho 'slurm: cannot drain node' >&2\nexit 3\n");
    let settings = drain_host(root, vec![failing.display().to_string()]);
    let steps = drain::run(60, &env(&settings, root));
    assert_eq!(outcomes(&steps)[1..], [("drain-hook", StepOutcome::Error), ("tenant-processes", StepOutcome::Skipped)]);
    assert!(steps[1].message.contains("exited 3") && steps[1].message.contains("slurm: cannot drain node"), "{}", steps[1].message);
}

#[test]
fn drain_hook_that_hangs_is_bounded_by_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let hook = executable(root, "hanging-hook", "#!/bin/sh\necho 'waiting for jobs' >&2\nexec sleep 300\n");
    let settings = drain_host(root, vec![hook.display().to_string()]);

    let started = Instant::now();
    let steps = drain::run(1, &env(&settings, root));
    assert!(started.elapsed() < Duration::from_secs(15), "bounded: {:?}", started.elapsed());
    assert_eq!(
        outcomes(&steps),
        [("cordon", StepOutcome::Ok), ("drain-hook", StepOutcome::Error), ("tenant-processes", StepOutcome::Skipped)]
    );
    assert!(steps[1].message.contains("timed out"), "{}", steps[1].message);
    assert!(settings.cordon_file.exists(), "the host stays cordoned");
}
