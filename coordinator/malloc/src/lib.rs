//! The coordinator's allocator settings, applied once at start.
//!
//! glibc gives each thread that contends for the allocator an arena of its own (up to eight
//! per core) and returns little of an arena's freed memory to the system. The coordinator
//! allocates in bursts — a rollout wave's check-in answers and bundle fetches on the runtime's
//! workers, plans and store reads on the blocking pool — and each burst leaves its high-water
//! mark in the arena of the thread that made it, so RSS follows the sum of the threads' worst
//! moments rather than what is live. Measured with `drover-bench fleet` at 3,000 agents, one
//! build: a peak of 217 MiB with glibc's default, 117 MiB with `MALLOC_ARENA_MAX=1` (and, a
//! later build, 373 MiB with mimalloc as the global allocator, tried as the alternative). One arena keeps RSS near
//! what is live plus one heap's slack; allocations that miss glibc's per-thread cache take one
//! lock, which the coordinator's I/O-bound work did not show (the rollout's CPU was 8.7 s
//! before and after).
//!
//! This (with [`trim`]) is the workspace's only `unsafe`, kept in a crate of its own so every other crate
//! keeps `forbid(unsafe_code)`.
#![deny(unsafe_code)]

/// Arenas the allocator may create.
pub const ARENAS: i32 = 1;

/// Limits glibc's allocator to [`ARENAS`] arenas. Call it first thing in `main`, before any
/// thread exists, so that no thread has an arena of its own yet. False if the allocator
/// refused, or is not glibc's (nothing to do there).
pub fn limit_arenas() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt takes two ints and returns one; it reads and writes only glibc's own
        // allocator settings, never memory Rust owns, and M_ARENA_MAX is a documented option
        // that may be set at any time.
        #[allow(unsafe_code)]
        let accepted = unsafe { libc::mallopt(libc::M_ARENA_MAX, ARENAS) };
        accepted == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Hands the allocator's free pages back to the system (glibc's `malloc_trim(0)`): what a
/// burst of short-lived buffers left free inside the arena stops counting in RSS. The
/// coordinator calls it after anonymous request bodies released a few MiB, so that memory
/// comes back after a body flood. True if anything was returned; false elsewhere than glibc.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a size and returns an int; it walks glibc's own heaps
        // under their locks and unmaps free pages, never memory that is allocated, and is
        // documented as safe to call at any time from any thread.
        #[allow(unsafe_code)]
        let released = unsafe { libc::malloc_trim(0) };
        released == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_accepts_the_arena_limit() {
        assert!(super::limit_arenas(), "mallopt(M_ARENA_MAX) refused");
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn trimming_after_freeing_many_buffers_does_not_disturb_live_ones() {
        let live: Vec<u8> = vec![7; 4096];
        let freed: Vec<Vec<u8>> = (0..256).map(|i| vec![i as u8; 64 * 1024]).collect();
        drop(freed);
        let _ = super::trim();
        assert!(live.iter().all(|b| *b == 7));
    }
}
