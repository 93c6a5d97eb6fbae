//! Every background loop of the coordinator in one table, with one shape: whether it runs on
//! this replica, when it started and stopped, how many passes it made, when the last one ended
//! and the last error. `/metrics` renders it (`drover_loop_*`), and `GET /v1/loops` answers it
//! (a reader certificate), so "is the reconciler alive on the leader?" has one place to look.
//!
//! A loop is started through [`Loops::spawn`], which marks it running and marks it stopped
//! when its task ends or is aborted (a replica that stops leading aborts the leader's loops);
//! each pass reports through [`Loops::ran`]. The names are [`ALL`]: a loop not started on
//! this replica (the leader's work on a follower, `releases_dir` unset) is listed as not
//! running, never missing.

use std::fmt::{Display, Write as _};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use drover_proto::api::admin::{LoopList, LoopView};
use drover_proto::time::Time;
use tokio::task::JoinHandle;

/// One of the coordinator's background loops: a closed set, so a pass can only be recorded
/// under a loop the table has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Loop {
    /// See [`EXECUTOR`].
    Executor,
    /// See [`JOB_TICK`].
    JobTick,
    /// See [`ONBOARDING`].
    Onboarding,
    /// See [`RECONCILER`].
    Reconciler,
    /// See [`DEVICES`].
    Devices,
    /// See [`OFFLINE_SWEEP`].
    OfflineSweep,
    /// See [`LEASE_SWEEP`].
    LeaseSweep,
    /// See [`CHECKIN_FLUSH`].
    CheckinFlush,
    /// See [`LEADER_SUPERVISION`].
    LeaderSupervision,
    /// See [`RELEASES_DIR`].
    ReleasesDir,
    /// See [`READINESS`].
    Readiness,
    /// See [`CRL_REFRESH`].
    CrlRefresh,
    /// See [`MEMORY_TRIM`].
    MemoryTrim,
}

impl Loop {
    /// Its name in `/v1/loops` and in the `loop` label of `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Loop::Executor => "executor",
            Loop::JobTick => "job_tick",
            Loop::Onboarding => "onboarding",
            Loop::Reconciler => "reconciler",
            Loop::Devices => "devices",
            Loop::OfflineSweep => "offline_sweep",
            Loop::LeaseSweep => "lease_sweep",
            Loop::CheckinFlush => "checkin_flush",
            Loop::LeaderSupervision => "leader_supervision",
            Loop::ReleasesDir => "releases_dir",
            Loop::Readiness => "readiness",
            Loop::CrlRefresh => "crl_refresh",
            Loop::MemoryTrim => "memory_trim",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The rollout executor's tick (leader).
pub const EXECUTOR: Loop = Loop::Executor;
/// The job engine's tick, run after each executor tick (leader).
pub const JOB_TICK: Loop = Loop::JobTick;
/// MAAS onboardings, reimages and decommissions (leader).
pub const ONBOARDING: Loop = Loop::Onboarding;
/// The MAAS drift reconciler (leader).
pub const RECONCILER: Loop = Loop::Reconciler;
/// The power-shelf and rack controllers (leader).
pub const DEVICES: Loop = Loop::Devices;
/// Silent hosts marked offline (leader).
pub const OFFLINE_SWEEP: Loop = Loop::OfflineSweep;
/// Lapsed task leases requeued (leader).
pub const LEASE_SWEEP: Loop = Loop::LeaseSweep;
/// Buffered check-ins written (every replica).
pub const CHECKIN_FLUSH: Loop = Loop::CheckinFlush;
/// Watching the election and starting or stopping the leader's loops (every replica).
pub const LEADER_SUPERVISION: Loop = Loop::LeaderSupervision;
/// Polling `releases_dir` (every replica where it is set).
pub const RELEASES_DIR: Loop = Loop::ReleasesDir;
/// `/readyz`'s background check (every replica).
pub const READINESS: Loop = Loop::Readiness;
/// Re-signing the CRL (every replica).
pub const CRL_REFRESH: Loop = Loop::CrlRefresh;
/// Handing memory freed by anonymous bodies back to the system (every replica).
pub const MEMORY_TRIM: Loop = Loop::MemoryTrim;

/// Every loop, in the order they are listed.
pub const ALL: [Loop; 13] = [
    EXECUTOR,
    JOB_TICK,
    ONBOARDING,
    RECONCILER,
    DEVICES,
    OFFLINE_SWEEP,
    LEASE_SWEEP,
    CHECKIN_FLUSH,
    LEADER_SUPERVISION,
    RELEASES_DIR,
    READINESS,
    CRL_REFRESH,
    MEMORY_TRIM,
];

/// The longest last-error message kept, in characters.
const MAX_ERROR_CHARS: usize = 512;

/// One loop's record.
#[derive(Default)]
struct Record {
    running: AtomicBool,
    runs: AtomicU64,
    failures: AtomicU64,
    times: Mutex<Times>,
}

#[derive(Default, Clone)]
struct Times {
    started_at: Option<Time>,
    stopped_at: Option<Time>,
    last_run_at: Option<Time>,
    last_error: Option<(Time, String)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The table of loops (owned by [`crate::app::AppState`]), one record per [`Loop`].
#[derive(Default)]
pub struct Loops {
    table: [Record; ALL.len()],
}

/// Marks its loop stopped when dropped: when the task returns, panics or is aborted.
struct Stopped {
    loops: Arc<Loops>,
    name: Loop,
    clock: Arc<dyn crate::app::Clock>,
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let r = self.loops.record(self.name);
        r.running.store(false, Ordering::SeqCst);
        lock(&r.times).stopped_at = Some(self.clock.now());
    }
}

impl Loops {
    fn record(&self, name: Loop) -> &Record {
        &self.table[name.index()]
    }

    /// Starts loop `name` as a task (in the caller's fencing term, like every leader task),
    /// marked running until the task ends or is aborted.
    pub fn spawn<F>(self: &Arc<Self>, name: Loop, clock: Arc<dyn crate::app::Clock>, work: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let r = self.record(name);
        r.running.store(true, Ordering::SeqCst);
        {
            let mut t = lock(&r.times);
            t.started_at = Some(clock.now());
            t.stopped_at = None;
        }
        let guard = Stopped { loops: self.clone(), name, clock };
        crate::store::fence::spawn(async move {
            let _guard = guard;
            work.await;
        })
    }

    /// Records one pass of loop `name`, ended at `now`: a success, or the error it met.
    pub fn ran<E: Display>(&self, name: Loop, now: Time, outcome: Result<(), E>) {
        let r = self.record(name);
        r.runs.fetch_add(1, Ordering::Relaxed);
        let mut t = lock(&r.times);
        t.last_run_at = Some(now);
        if let Err(e) = outcome {
            r.failures.fetch_add(1, Ordering::Relaxed);
            let message = e.to_string();
            t.last_error = Some((now, drover_proto::text::bounded(&message, MAX_ERROR_CHARS).into_owned()));
        }
    }

    /// Whether loop `name` runs on this replica now.
    pub fn running(&self, name: Loop) -> bool {
        self.record(name).running.load(Ordering::SeqCst)
    }

    /// Passes loop `name` made since start.
    pub fn runs(&self, name: Loop) -> u64 {
        self.record(name).runs.load(Ordering::Relaxed)
    }

    /// The table, as `GET /v1/loops` answers it.
    pub fn list(&self) -> LoopList {
        let loops = ALL
            .iter()
            .map(|&name| {
                let r = self.record(name);
                let t = lock(&r.times).clone();
                LoopView {
                    name: name.name().to_owned(),
                    running: r.running.load(Ordering::SeqCst),
                    started_at: t.started_at,
                    stopped_at: t.stopped_at,
                    runs: r.runs.load(Ordering::Relaxed),
                    failures: r.failures.load(Ordering::Relaxed),
                    last_run_at: t.last_run_at,
                    last_error_at: t.last_error.as_ref().map(|(at, _)| *at),
                    last_error: t.last_error.map(|(_, m)| m),
                }
            })
            .collect();
        LoopList { loops }
    }

    /// The `drover_loop_*` families of `/metrics`.
    pub fn render_into(&self, out: &mut String) {
        let families: [(&str, &str, &str); 4] = [
            ("drover_loop_running", "gauge", "Whether each background loop runs on this replica (1) or not (0)."),
            ("drover_loop_runs_total", "counter", "Passes each background loop made since this process started."),
            ("drover_loop_failures_total", "counter", "Passes of each background loop that ended in an error."),
            ("drover_loop_last_run_timestamp_seconds", "gauge", "When each background loop's last pass ended (Unix seconds)."),
        ];
        for (i, (family, kind, help)) in families.iter().enumerate() {
            let _ = writeln!(out, "# HELP {family} {help}\n# TYPE {family} {kind}");
            for name in ALL {
                let r = self.record(name);
                let value = match i {
                    0 => u64::from(r.running.load(Ordering::SeqCst)),
                    1 => r.runs.load(Ordering::Relaxed),
                    2 => r.failures.load(Ordering::Relaxed),
                    _ => match lock(&r.times).last_run_at {
                        Some(at) => u64::try_from(at.unix()).unwrap_or(0),
                        None => continue,
                    },
                };
                let _ = writeln!(out, "{family}{{loop=\"{}\"}} {value}", name.name());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Time);
    impl crate::app::Clock for Fixed {
        fn now(&self) -> Time {
            self.0
        }
    }

    fn t(secs: i64) -> Time {
        Time::from_unix(1_800_000_000 + secs).expect("time")
    }

    #[test]
    fn each_loop_has_its_own_record_and_name() {
        for (i, l) in ALL.iter().enumerate() {
            assert_eq!(l.index(), i, "{l:?} is at its place in ALL, so its record is its own");
        }
        let mut names: Vec<&str> = ALL.iter().map(|l| l.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "no two loops share a name");
    }

    #[test]
    fn every_loop_is_listed_running_or_not() {
        let loops = Loops::default();
        let list = loops.list();
        assert_eq!(list.loops.len(), ALL.len());
        assert!(list.loops.iter().all(|l| !l.running && l.runs == 0 && l.started_at.is_none()));
    }

    #[test]
    fn a_pass_and_a_failure_are_counted_and_the_last_error_kept_bounded() {
        let loops = Loops::default();
        loops.ran(RECONCILER, t(1), Ok::<(), String>(()));
        loops.ran(RECONCILER, t(2), Err("x".repeat(10_000)));
        let view = loops.list().loops.into_iter().find(|l| l.name == RECONCILER.name()).expect("listed");
        assert_eq!((view.runs, view.failures, view.last_run_at, view.last_error_at), (2, 1, Some(t(2)), Some(t(2))));
        // Cut to the bound, with the cut marked and the length it had.
        assert!(view.last_error.expect("kept").starts_with(&format!("{}… (10000 bytes)", "x".repeat(MAX_ERROR_CHARS))));
        let mut text = String::new();
        loops.render_into(&mut text);
        assert!(text.contains("drover_loop_runs_total{loop=\"reconciler\"} 2"), "{text}");
        assert!(text.contains("drover_loop_failures_total{loop=\"reconciler\"} 1"), "{text}");
        assert!(!text.contains("drover_loop_last_run_timestamp_seconds{loop=\"executor\"}"), "no pass, no timestamp: {text}");
    }

    #[tokio::test]
    async fn an_aborted_loop_is_marked_stopped() {
        let loops = Arc::new(Loops::default());
        let clock: Arc<dyn crate::app::Clock> = Arc::new(Fixed(t(5)));
        let task = loops.spawn(DEVICES, clock, std::future::pending());
        assert!(loops.running(DEVICES));
        task.abort();
        let _ = task.await;
        assert!(!loops.running(DEVICES), "the leader stepping down aborts its loops: they show as stopped");
        let view = loops.list().loops.into_iter().find(|l| l.name == DEVICES.name()).expect("listed");
        assert_eq!((view.started_at, view.stopped_at), (Some(t(5)), Some(t(5))));
    }
}
