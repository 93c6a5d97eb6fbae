//! The anonymous attacks, small and seeded, against a real coordinator process
//! (`drover_tests::anonymous`; `drover-bench anonymous` runs them at full size, BENCHMARKS.md):
//!
//! - `an_anonymous_hammer_on_every_route_leaves_an_admins_p99_within_twice_the_quiet_one`:
//!   16 connections from four addresses send every anonymous route as fast as they are
//!   answered; `/readyz` answers from a kept verdict, enrollment's CSR check runs off the
//!   workers, each source is rate-limited (large answers paid by their size) — the admin's
//!   p99 stays within 2× of the quiet figure (with a 10 ms floor: a 2-core runner's scheduling
//!   jitter is of that order, and a quiet p99 of 3 ms would otherwise fail on noise alone).
//! - `memory_pinned_by_a_body_flood_comes_back_after_it`: 400 connections each holding an
//!   almost complete 64 KiB enrollment body; memory is back within 25 % of before within a
//!   minute of the flood closing.

use drover_tests::anonymous::{AttackOptions, run};
use drover_tests::workspace_binary;

fn options() -> AttackOptions {
    AttackOptions {
        hosts: 2_000,
        hammer_connections: 16,
        sources: 4,
        admin_requests: 300,
        body_connections: 0,
        settle_secs: 0,
        connections: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_hammer_on_every_route_leaves_an_admins_p99_within_twice_the_quiet_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = run(&options(), &workspace_binary("drover-coordinator"), &workspace_binary("drover-agent"), dir.path())
        .await
        .expect("the attack runs");
    eprintln!("{report:#?}");
    assert!(report.hammer_answers.get(&200).copied().unwrap_or(0) > 0, "the hammer was served: {:?}", report.hammer_answers);
    // Every answer is a route's own (200, 403 for the wrong token, 404 for the package no
    // one configured), the limiter's 429 or the download cap's 503 with Retry-After — never
    // another 5xx or a refused connection.
    assert!(report.hammer_answers.keys().all(|c| [200, 403, 404, 429, 503].contains(c)), "{:?}", report.hammer_answers);
    assert!(
        report.loaded_p99_ms <= (2.0 * report.quiet_p99_ms).max(report.quiet_p99_ms + 10.0),
        "admin p99 {:.1} ms under the hammer against {:.1} ms quiet",
        report.loaded_p99_ms,
        report.quiet_p99_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_pinned_by_a_body_flood_comes_back_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = AttackOptions { hosts: 10, hammer_connections: 0, admin_requests: 10, body_connections: 400, settle_secs: 60, ..options() };
    let report = run(&opts, &workspace_binary("drover-coordinator"), &workspace_binary("drover-agent"), dir.path()).await.expect("runs");
    eprintln!("{report:#?}");
    assert!(report.bodies_sent >= 300, "the flood got its bodies in: {report:?}");
    let back = report.rss_back_secs.unwrap_or_else(|| panic!("memory never came back within 25 % of before: {report:?}"));
    assert!(back <= 60.0, "{report:?}");
}
