//! The async side of store calls, which the store crates leave out so that they need no async
//! runtime: [`blocking`] and [`read_now`] (tokio's blocking pool), [`inline`], and the leader
//! term's task-local half ([`scope`], [`spawn`], [`current`]). The engine reaches them as
//! `store::blocking`, `store::read_now`, `store::inline` and `store::fence::{scope, spawn,
//! current}` (the `store` module).
//!
//! The term travels with the work, not with a store handle: leader work runs inside [`scope`]
//! (a tokio task-local), [`spawn`] carries it into the tasks that work starts, and
//! [`blocking`] carries it onto the blocking thread a store call runs on
//! (`drover_store::fence::on_thread`), where the PostgreSQL backend reads it
//! (`drover_store::fence::current`) and refuses a write whose term has ended.

use std::future::Future;
use std::sync::Arc;

use drover_store::fence::{self, Fence};
use drover_store::{Store, StoreError};

tokio::task_local! {
    static TERM: Fence;
}

/// Runs `work` in `fence`'s term.
pub fn scope<F: Future>(fence: Fence, work: F) -> impl Future<Output = F::Output> {
    TERM.scope(fence, work)
}

/// The term the calling code runs in, if any: set on this thread by
/// `drover_store::fence::on_thread`, or by the task being polled here.
pub fn current() -> Option<Fence> {
    fence::current().or_else(|| TERM.try_with(Clone::clone).ok())
}

/// `tokio::spawn`, carrying the caller's term into the new task.
pub fn spawn<F>(work: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match current() {
        Some(fence) => tokio::spawn(scope(fence, work)),
        None => tokio::spawn(work),
    }
}

/// Runs `f` against the store on tokio's blocking pool and awaits it, so no store call ever
/// blocks a runtime worker thread. A panic inside `f` becomes a backend error rather than
/// tearing down the caller's task.
pub async fn blocking<T: Send + 'static>(
    store: Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    // Leader work's term goes with the call, so its writes are fenced: the backend reads it
    // on the blocking thread (`drover_store::fence::current`), where `on_thread` puts it.
    let term = current();
    match tokio::task::spawn_blocking(move || fence::on_thread(term, || f(&*store))).await {
        Ok(result) => result,
        Err(join) if join.is_panic() => Err(StoreError::backend("store call panicked")),
        Err(join) => Err(StoreError::backend(format!("store call did not finish: {join}"))),
    }
}

/// Runs `f` against the store on the calling thread, for the one call the check-in hot path
/// makes ([`Store::checkin_view`]): a few indexed reads on a WAL snapshot, which never wait
/// for the writer. Handing them to the blocking pool cost more than the reads themselves —
/// two thread wake-ups per check-in, measured as a third of the coordinator's CPU under load
/// (BENCHMARKS.md). Anything that writes, scans or may wait on a lock uses [`blocking`]. A
/// panic inside `f` becomes a backend error, as with [`blocking`].
pub fn inline<T>(store: &dyn Store, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(store))).unwrap_or_else(|_| Err(StoreError::backend("store call panicked")))
}

/// A short read, [`inline`] where the backend allows it ([`Store::reads_inline`]), else on
/// the blocking pool ([`blocking`]): a read that waits on the network must not hold an async
/// worker, and the PostgreSQL client refuses to run on one.
pub async fn read_now<T: Send + 'static>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    if store.reads_inline() { inline(&**store, f) } else { blocking(store.clone(), f).await }
}

#[cfg(test)]
mod tests {
    use drover_store::fence::on_thread;
    use drover_store_sqlite::SqliteStore;

    use super::*;

    fn term(token: i64) -> Fence {
        Fence { lease: "leader".into(), holder: "a".into(), token }
    }

    #[tokio::test]
    async fn the_term_follows_spawned_tasks_and_blocking_calls_but_not_outside_code() {
        assert_eq!(current(), None);
        let seen = scope(term(7), async {
            let spawned = spawn(async { current() }).await.expect("joins");
            let carried = current();
            let blocking = tokio::task::spawn_blocking(move || on_thread(carried, current)).await.expect("joins");
            (current(), spawned, blocking)
        })
        .await;
        assert_eq!(seen, (Some(term(7)), Some(term(7)), Some(term(7))));
        assert_eq!(current(), None, "a term never outlives its scope");
        assert_eq!(tokio::spawn(async { current() }).await.expect("joins"), None);
    }

    /// What the PostgreSQL backend reads on the blocking thread is the term of the task that
    /// made the call, and no term for a call made outside one.
    #[tokio::test]
    async fn blocking_hands_the_task_term_to_the_backend_thread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("drover.db")).expect("opens"));
        let seen = scope(term(3), blocking(store.clone(), |_| Ok(fence::current()))).await.expect("runs");
        assert_eq!(seen, Some(term(3)));
        let spawned = scope(term(4), async { spawn(blocking(store.clone(), |_| Ok(fence::current()))).await.expect("joins") });
        assert_eq!(spawned.await.expect("runs"), Some(term(4)));
        assert_eq!(blocking(store.clone(), |_| Ok(fence::current())).await.expect("runs"), None);
        let panicked = blocking(store, |_| -> Result<(), StoreError> { panic!("deliberate panic") }).await;
        assert!(matches!(&panicked, Err(e) if e.kind() == drover_store::ErrorKind::Backend), "{panicked:?}");
    }
}
