//! `allocation.revoke_user`: remove the tenant users (uid in `[tenant_uid_min,
//! tenant_uid_max]`) from the host — all of them, or only the ones named — after ending their
//! sessions and stopping their processes.
//!
//! The plan is a pure function of the request, the passwd file and the settings
//! ([`plan`]); per user it is `end-sessions NAME`, `stop-processes NAME`, `remove NAME`, run
//! by [`super::steps::execute`] (the first failure stops the task; the coordinator sees which
//! user is left).
//!
//! Decisions:
//! - A named user outside the tenant range (root, a system account) refuses the **whole** task
//!   before anything is done: one error step "refusing to remove uid 0 user root". A named
//!   user that does not exist is a skipped step (already removed).
//! - `loginctl terminate-user NAME`: exit 1 with "is not logged in or lingering" (logind's
//!   `NoSuchUser` error, which loginctl prints as "Could not terminate user: User ID N is not
//!   logged in or lingering") means there is no session: skipped. No `loginctl` at all, or
//!   "System has not been booted with systemd" (a host without logind), is skipped as well;
//!   any other failure (the bus down on a systemd host, …) is an error.
//! - Processes still running with the user's uid get SIGTERM, up to
//!   `process_stop_grace_secs` to exit, then SIGKILL, repeated for whatever is (or was
//!   forked) still there until none is left or 5 s pass (then an error); the uid is read
//!   again from `<proc_dir>/<pid>/status` right before each signal so a recycled pid of
//!   another user is never signalled. Zombies count as gone.
//! - `userdel --remove -- NAME`: exit 6 (no such user) is skipped (already removed), exit 8
//!   (still logged in) and any other failure an error.
//! - When all users are revoked, tenant-uid processes without a passwd entry (a user removed
//!   earlier) are stopped as well: `stop-processes uid N`.
//! - A malformed passwd line is reported by a last `passwd` error step after every
//!   well-formed tenant user was handled: it may hide a tenant user this task cannot remove.
//! - Idempotent: a second run finds no tenant user and reports one skipped step.

use std::time::Duration;

use drover_proto::report::StepResult;
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use super::TaskEnv;
use super::host_facts::{self, HostFactsError, Passwd};
use super::steps::{self, Done, Step};
use crate::exec::{CommandSpec, ExecError};

/// How long `loginctl` and `userdel` may run.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long killed processes get to disappear after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Poll interval while waiting for processes to exit.
const POLL: Duration = Duration::from_millis(100);
/// `userdel`: the user does not exist.
pub const USERDEL_NO_SUCH_USER: i32 = 6;
/// `userdel`: the user is logged in.
pub const USERDEL_LOGGED_IN: i32 = 8;

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Refuse the task (a named user is not a tenant).
    Refuse(String),
    /// Nothing to do (reported skipped).
    Nothing(String),
    /// `loginctl terminate-user`.
    EndSessions {
        /// Login name.
        name: String,
    },
    /// SIGTERM, grace, SIGKILL every process of `uid`.
    StopProcesses {
        /// Its uid.
        uid: u32,
    },
    /// `userdel --remove`.
    Remove {
        /// Login name.
        name: String,
    },
    /// Report the malformed passwd lines.
    Malformed(Vec<String>),
}

/// The plan for `requested` (all tenant users when `None`) over what passwd holds.
/// `orphan_uids`: tenant uids with running processes but no passwd entry (a user removed
/// earlier, by hand or by a run that failed half-way); their processes are stopped too when
/// all users are revoked.
pub fn plan(requested: Option<&[String]>, passwd: &Passwd, orphan_uids: &[u32], settings: &super::TaskSettings) -> Vec<Step<Action>> {
    let mut targets = Vec::new();
    let mut plan = Vec::new();
    match requested {
        None => targets.extend(passwd.users.iter().filter(|u| settings.is_tenant_uid(u.uid))),
        Some(names) => {
            for name in names {
                match passwd.find(name) {
                    Some(u) if !settings.is_tenant_uid(u.uid) => {
                        return vec![Step::new(
                            format!("refuse {name}"),
                            Action::Refuse(format!("refusing to remove uid {} user {}", u.uid, u.name)),
                        )];
                    }
                    Some(u) => targets.push(u),
                    None => plan.push(Step::new(format!("remove {name}"), Action::Nothing(format!("no user {name}: already removed")))),
                }
            }
        }
    }
    for u in targets {
        plan.push(Step::new(format!("end-sessions {}", u.name), Action::EndSessions { name: u.name.clone() }));
        plan.push(Step::new(format!("stop-processes {}", u.name), Action::StopProcesses { uid: u.uid }));
        plan.push(Step::new(format!("remove {}", u.name), Action::Remove { name: u.name.clone() }));
    }
    if requested.is_none() {
        for &uid in orphan_uids.iter().filter(|uid| settings.is_tenant_uid(**uid) && !passwd.users.iter().any(|u| u.uid == **uid)) {
            plan.push(Step::new(format!("stop-processes uid {uid}"), Action::StopProcesses { uid }));
        }
    }
    if plan.is_empty() {
        let range = format!("{}-{}", settings.tenant_uid_min, settings.tenant_uid_max);
        plan.push(Step::new("revoke-users", Action::Nothing(format!("no tenant users in uid range {range}"))));
    }
    if !passwd.malformed.is_empty() {
        plan.push(Step::new("passwd", Action::Malformed(passwd.malformed_lines())));
    }
    plan
}

/// Runs the task.
pub fn run(users: Option<&[String]>, env: &TaskEnv<'_>) -> Vec<StepResult> {
    let passwd = match host_facts::read_passwd(env.settings) {
        Ok(p) => p,
        Err(e) => return steps::not_planned("read-passwd", e.to_string()),
    };
    let mut orphans = Vec::new();
    if users.is_none() {
        match host_facts::tenant_processes(&env.settings.proc_dir, env.settings) {
            Ok(procs) => orphans.extend(procs.iter().filter(|p| !p.zombie).map(|p| p.uid)),
            Err(e) => return steps::not_planned("list-processes", e.to_string()),
        }
        orphans.sort_unstable();
        orphans.dedup();
    }
    let plan = plan(users, &passwd, &orphans, env.settings);
    steps::execute(&plan, |a| act(a, env))
}

fn act(action: &Action, env: &TaskEnv<'_>) -> Done {
    match action {
        Action::Refuse(m) => Done::error(m.clone()),
        Action::Nothing(m) => Done::skipped(m.clone()),
        Action::EndSessions { name } => end_sessions(name, env),
        Action::StopProcesses { uid } => stop_processes(*uid, env),
        Action::Remove { name } => remove(name, env),
        Action::Malformed(lines) => Done::error(format!("{} malformed passwd line(s): may hide a tenant user", lines.len()))
            .with_data(json!({ "malformed": lines })),
    }
}

fn end_sessions(name: &str, env: &TaskEnv<'_>) -> Done {
    let spec = CommandSpec::new(&env.settings.loginctl, &["terminate-user", "--", name], TOOL_TIMEOUT);
    match env.runner.run(&spec) {
        Ok(out) if out.success() => Done::ok(format!("sessions of {name} ended")),
        Ok(out) if out.code == Some(1) && out.stderr.contains("not logged in or lingering") => {
            Done::skipped(format!("{name} has no session"))
        }
        Ok(out) if out.stderr.contains("has not been booted with systemd") => {
            Done::skipped("systemd is not running: no logind sessions to end")
        }
        Ok(out) => Done::error(format!("{} exited {:?}: {}", spec.display(), out.code, host_facts::tail(&out.stderr, 500))),
        Err(ExecError::NotFound { program }) => Done::skipped(format!("{program} not found: no logind sessions to end")),
        Err(e) => Done::error(e.to_string()),
    }
}

/// The live (not zombie) processes of `uid`.
fn live_pids(uid: u32, env: &TaskEnv<'_>) -> Result<Vec<i32>, HostFactsError> {
    Ok(host_facts::processes(&env.settings.proc_dir)?.into_iter().filter(|p| p.uid == uid && !p.zombie).map(|p| p.pid).collect())
}

/// Sends `sig` to each pid still owned by `uid` (checked right before); returns the pids
/// signalled.
fn signal_all(pids: &[i32], uid: u32, sig: Signal, env: &TaskEnv<'_>) -> Vec<i32> {
    let mut sent = Vec::new();
    for &pid in pids {
        let still = host_facts::process(&env.settings.proc_dir, pid).is_some_and(|p| p.uid == uid && !p.zombie);
        // Belt and braces: never signal outside the tenant range, whatever was planned.
        if still && env.settings.is_tenant_uid(uid) {
            match kill(Pid::from_raw(pid), sig) {
                Ok(()) => sent.push(pid),
                Err(Errno::ESRCH) => {}
                Err(e) => tracing::warn!(pid, %e, "cannot signal tenant process"),
            }
        }
    }
    sent
}

/// Polls until `uid` has no live process or `limit` passes; with `kill`, every process still
/// there at each poll gets SIGKILL (a process forking meanwhile cannot outrun it). Returns
/// the processes left and the ones killed.
fn wait_gone(uid: u32, limit: Duration, kill: bool, env: &TaskEnv<'_>) -> Result<(Vec<i32>, Vec<i32>), HostFactsError> {
    let mut waited = Duration::ZERO;
    let mut killed = Vec::new();
    loop {
        let left = live_pids(uid, env)?;
        if left.is_empty() || waited >= limit {
            return Ok((left, killed));
        }
        if kill {
            for pid in signal_all(&left, uid, Signal::SIGKILL, env) {
                if !killed.contains(&pid) {
                    killed.push(pid);
                }
            }
        }
        env.clock.sleep(POLL);
        waited += POLL;
    }
}

fn stop_processes(uid: u32, env: &TaskEnv<'_>) -> Done {
    let run = || -> Result<Done, HostFactsError> {
        let pids = live_pids(uid, env)?;
        if pids.is_empty() {
            return Ok(Done::skipped(format!("no process of uid {uid}")));
        }
        let termed = signal_all(&pids, uid, Signal::SIGTERM, env);
        let (left, _) = wait_gone(uid, Duration::from_secs(env.settings.process_stop_grace_secs), false, env)?;
        let (left, killed) = if left.is_empty() { (left, Vec::new()) } else { wait_gone(uid, KILL_WAIT, true, env)? };
        let data = json!({ "uid": uid, "pids": pids, "sigterm": termed, "sigkill": killed, "left": left });
        Ok(if left.is_empty() {
            Done::ok(format!("{} process(es) of uid {uid} stopped ({} killed)", pids.len(), killed.len())).with_data(data)
        } else {
            Done::error(format!("{} process(es) of uid {uid} survived SIGKILL", left.len())).with_data(data)
        })
    };
    run().unwrap_or_else(|e| Done::error(e.to_string()))
}

fn remove(name: &str, env: &TaskEnv<'_>) -> Done {
    let spec = CommandSpec::new(&env.settings.userdel, &["--remove", "--", name], TOOL_TIMEOUT);
    match env.runner.run(&spec) {
        Ok(out) if out.success() => Done::ok(format!("{name} removed")),
        Ok(out) if out.code == Some(USERDEL_NO_SUCH_USER) => Done::skipped(format!("no user {name}: already removed")),
        Ok(out) if out.code == Some(USERDEL_LOGGED_IN) => {
            Done::error(format!("{name} is still logged in: {}", host_facts::tail(&out.stderr, 500)))
        }
        Ok(out) => Done::error(format!("{} exited {:?}: {}", spec.display(), out.code, host_facts::tail(&out.stderr, 500))),
        Err(e) => Done::error(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::TaskSettings;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\nsvc:x:998:998::/:/sbin/nologin\na:x:10001:10001::/home/a:/bin/sh\nb:x:10002:10002::/home/b:/bin/sh\n";

    #[test]
    fn all_tenant_users_are_planned_and_no_one_else() {
        let p = plan(None, &host_facts::parse_passwd(PASSWD), &[], &TaskSettings::default());
        let names: Vec<&str> = p.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["end-sessions a", "stop-processes a", "remove a", "end-sessions b", "stop-processes b", "remove b"]);
    }

    #[test]
    fn orphan_tenant_processes_are_stopped_only_when_all_users_are_revoked() {
        let pw = host_facts::parse_passwd(PASSWD);
        let p = plan(None, &pw, &[0, 998, 10001, 20000], &TaskSettings::default());
        let last = p.last().expect("steps");
        assert_eq!((last.name.as_str(), &last.action), ("stop-processes uid 20000", &Action::StopProcesses { uid: 20000 }));
        assert_eq!(p.len(), 7, "root's, the system's and a user's own uid are not orphans");
    }

    #[test]
    fn naming_a_system_user_refuses_everything() {
        let req = vec!["a".to_owned(), "root".to_owned()];
        let p = plan(Some(&req), &host_facts::parse_passwd(PASSWD), &[10001, 20000], &TaskSettings::default());
        assert_eq!(p, vec![Step::new("refuse root", Action::Refuse("refusing to remove uid 0 user root".into()))]);
    }

    #[test]
    fn a_named_user_that_is_gone_is_skipped() {
        let req = vec!["zed".to_owned()];
        let p = plan(Some(&req), &host_facts::parse_passwd(PASSWD), &[10001, 20000], &TaskSettings::default());
        assert!(matches!(&p[..], [Step { action: Action::Nothing(_), .. }]));
    }
}
