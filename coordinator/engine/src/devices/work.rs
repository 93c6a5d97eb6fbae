//! Device work in flight, beside the controller loops: a task per device (a shelf or a rack),
//! tagged with the stage that asked for it (a state, or a rack's phase and step). A tick asks
//! where its stage's work stands ([`WorkTable::take`]): not started, running, or finished —
//! and a finished outcome is handed over once. Work of a stage the device has left is
//! dropped. Nothing here is stored: after a restart every device's work reads "not started"
//! and is asked for again, which the idempotent device calls make safe.

use std::collections::HashMap;
use std::future::Future as _;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use serde_json::Value;
use tokio::task::{JoinError, JoinHandle};
use uuid::Uuid;

use super::shelf::Work;

/// What a finished device task yields: data it read (if any), or the failure in the device's
/// words.
pub type Outcome = Result<Option<Value>, String>;

/// Device work in flight, by device.
#[derive(Default)]
pub struct WorkTable {
    running: Mutex<HashMap<Uuid, (String, JoinHandle<Outcome>)>>,
}

impl WorkTable {
    /// Where the work of `id` at `stage` stands; a finished task's outcome is taken (this
    /// tick consumes it), a task of another stage is aborted and forgotten.
    pub fn take(&self, id: Uuid, stage: &str) -> (Work, Option<Value>) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(&id) {
            None => return (Work::NotStarted, None),
            Some((s, _)) if s != stage => {
                if let Some((_, old)) = running.remove(&id) {
                    old.abort();
                }
                return (Work::NotStarted, None);
            }
            Some((_, h)) if !h.is_finished() => return (Work::Running, None),
            Some(_) => {}
        }
        let Some((_, handle)) = running.remove(&id) else {
            return (Work::NotStarted, None);
        };
        match finished(handle) {
            Some(Ok(Ok(data))) => (Work::Done, data),
            Some(Ok(Err(why))) => (Work::Failed(why), None),
            Some(Err(join)) => (Work::Failed(format!("device task ended abnormally: {join}")), None),
            None => (Work::Running, None),
        }
    }

    /// Records the task doing `id`'s work at `stage` (replacing, and aborting, any other).
    pub fn start(&self, id: Uuid, stage: &str, handle: JoinHandle<Outcome>) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, old)) = running.insert(id, (stage.to_owned(), handle)) {
            old.abort();
        }
    }

    /// Devices with work in flight.
    pub fn in_flight(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The result of a handle that `is_finished`, without blocking: one poll yields it.
fn finished(mut handle: JoinHandle<Outcome>) -> Option<Result<Outcome, JoinError>> {
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::Pin::new(&mut handle).poll(&mut cx) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn settled(t: &WorkTable, id: Uuid, stage: &str) -> (Work, Option<Value>) {
        // A task that has returned is finished once the runtime has run it; yield until then.
        for _ in 0..1000 {
            match t.take(id, stage) {
                (Work::Running, _) => tokio::task::yield_now().await,
                other => return other,
            }
        }
        panic!("the task never finished");
    }

    #[tokio::test]
    async fn outcomes_are_handed_over_once_and_other_stages_are_dropped() {
        let t = WorkTable::default();
        let id = Uuid::new_v4();
        assert_eq!(t.take(id, "fetching_data"), (Work::NotStarted, None));
        t.start(id, "fetching_data", tokio::spawn(async { Ok(Some(serde_json::json!({"model": "PS-9"}))) }));
        assert_eq!(settled(&t, id, "fetching_data").await, (Work::Done, Some(serde_json::json!({"model": "PS-9"}))));
        assert_eq!(t.take(id, "fetching_data"), (Work::NotStarted, None), "taken once");
        t.start(id, "maintenance", tokio::spawn(async { Err("outlet A1 stuck".to_owned()) }));
        assert_eq!(settled(&t, id, "maintenance").await.0, Work::Failed("outlet A1 stuck".into()));
        t.start(id, "maintenance", tokio::spawn(std::future::pending()));
        assert_eq!(t.take(id, "maintenance").0, Work::Running);
        assert_eq!(t.take(id, "ready").0, Work::NotStarted, "a stage left behind drops its work");
        assert_eq!(t.in_flight(), 0);
    }
}
