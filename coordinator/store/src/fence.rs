//! Fencing: every write a leader's work makes carries the term it was started in, and the
//! PostgreSQL backend refuses it ([`super::StoreError::NotLeader`], nothing written) once that
//! term's lease token is no longer the database's.
//!
//! The term travels with the work, not with a store handle: leader work runs inside
//! [`scope`] (a tokio task-local), [`spawn`] carries it into the tasks that work starts, and
//! [`super::blocking`] carries it onto the blocking thread a store call runs on. So every
//! store method the executor, the job engine, the sweeps and the reconcilers call is fenced
//! without each of them passing a token along — and an API request on the same replica,
//! outside any term, is not. SQLite has one process and ignores it.

use std::cell::RefCell;
use std::future::Future;

/// The term a write is made in: lease `lease`, held by `holder` with fencing token `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The lease's name.
    pub lease: String,
    /// The replica holding it.
    pub holder: String,
    /// The fencing token: it rises every time the lease changes hands.
    pub token: i64,
}

tokio::task_local! {
    static TERM: Fence;
}

thread_local! {
    static ON_THREAD: RefCell<Option<Fence>> = const { RefCell::new(None) };
}

/// Runs `work` in `fence`'s term.
pub fn scope<F: Future>(fence: Fence, work: F) -> impl Future<Output = F::Output> {
    TERM.scope(fence, work)
}

/// The term the calling code runs in, if any: set on this thread by [`on_thread`], or by the
/// task being polled here.
pub fn current() -> Option<Fence> {
    ON_THREAD.with(|t| t.borrow().clone()).or_else(|| TERM.try_with(Clone::clone).ok())
}

/// Runs `f` on this thread in `fence`'s term (for a blocking thread serving a task's call).
pub fn on_thread<T>(fence: Option<Fence>, f: impl FnOnce() -> T) -> T {
    /// Puts back what was there, even when `f` panics, so a pooled thread never keeps a term.
    struct Restore(Option<Fence>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            ON_THREAD.with(|t| *t.borrow_mut() = previous);
        }
    }
    let previous = ON_THREAD.with(|t| std::mem::replace(&mut *t.borrow_mut(), fence));
    let _restore = Restore(previous);
    f()
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

#[cfg(test)]
mod tests {
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

    #[test]
    fn a_pooled_thread_gives_the_term_back_even_after_a_panic() {
        let r = std::panic::catch_unwind(|| on_thread(Some(term(1)), || panic!("boom")));
        assert!(r.is_err());
        assert_eq!(current(), None);
    }
}
