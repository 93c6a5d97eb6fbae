//! Fencing: every write a leader's work makes carries the term it was started in, and the
//! PostgreSQL backend refuses it ([`super::StoreError::NotLeader`], nothing written) once that
//! term's lease token is no longer the database's.
//!
//! The term travels with the work, not with a store handle. A store call runs on a blocking
//! thread, and this module is that thread's side of it: [`on_thread`] runs the call in a term
//! and [`current`] is what a backend reads there. The async side — running leader work in a
//! term (a tokio task-local), carrying it into the tasks that work starts and onto the
//! blocking thread of each store call — is the engine's (its `store::fence`), so this crate
//! needs no async runtime. Every store method the executor, the job engine, the sweeps and
//! the reconcilers call is fenced without each of them passing a token along — and an API
//! request on the same replica, outside any term, is not. SQLite has one process and ignores
//! it.

use std::cell::RefCell;

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

thread_local! {
    static ON_THREAD: RefCell<Option<Fence>> = const { RefCell::new(None) };
}

/// The term this thread runs in, if any, as [`on_thread`] set it: what a backend's write on a
/// blocking thread is fenced with.
pub fn current() -> Option<Fence> {
    ON_THREAD.with(|t| t.borrow().clone())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn term(token: i64) -> Fence {
        Fence { lease: "leader".into(), holder: "a".into(), token }
    }

    #[test]
    fn the_term_is_the_threads_own_and_only_while_f_runs() {
        assert_eq!(current(), None);
        on_thread(Some(term(2)), || {
            assert_eq!(current(), Some(term(2)));
            assert_eq!(std::thread::spawn(current).join().expect("joins"), None, "another thread has no term");
            on_thread(None, || assert_eq!(current(), None));
            assert_eq!(current(), Some(term(2)), "a nested call puts the outer term back");
        });
        assert_eq!(current(), None);
    }

    #[test]
    fn a_pooled_thread_gives_the_term_back_even_after_a_panic() {
        let r = std::panic::catch_unwind(|| on_thread(Some(term(1)), || panic!("boom")));
        assert!(r.is_err());
        assert_eq!(current(), None);
    }
}
