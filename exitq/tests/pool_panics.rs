//! exitq::pool and a panic payload whose own `Drop` panics, in each place
//! the pool drops a caught payload: a job's, a scoped job's, an
//! `on_retire` callback's (issue 25). Each failed before the fix: the
//! worker died, the scope or the shutdown never returned (a watchdog
//! turns a hang into a failure).
use std::time::Duration;

use exitq::pool::Pool;

mod watch_util;
use watch_util::{within, Bomb};

/// Issue 25, fifth case: a job panics with a payload whose `Drop` panics
/// too. Before: the worker dropped the payload outside `catch_unwind` and
/// died, the pool kept counting it, and the next joinable job never ran.
#[test]
fn a_payload_whose_drop_panics_does_not_kill_the_worker() {
    let pool = Pool::builder()
        .min_workers(1)
        .max_workers(1)
        .build()
        .unwrap();
    pool.execute(|| std::panic::panic_any(Bomb)).unwrap();
    let pool = within("a job after the bomb", Duration::from_secs(60), move || {
        assert_eq!(pool.spawn(|| 42).unwrap().join().unwrap(), 42);
        pool
    });
    let report = pool.shutdown();
    assert_eq!(report.stats.panicked, 1, "{:?}", report.stats);
    assert_eq!(report.stats.spawned, 1, "the one worker survived");
}

/// The same in a scope, with two such jobs (the second payload is dropped,
/// the first re-raised): `scope` returns (raising the first payload) only
/// once both jobs are done. Before: the second payload's drop unwound out
/// of the job before it was counted as done, and `scope` never returned.
#[test]
fn a_scope_with_payloads_whose_drop_panics_returns() {
    let pool = Pool::builder().max_workers(2).build().unwrap();
    let pool = within("a scope of two bombs", Duration::from_secs(60), move || {
        let raised = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.scope(|s| {
                s.execute(|| std::panic::panic_any(Bomb));
                s.execute(|| std::panic::panic_any(Bomb));
            })
        }));
        let payload = raised.expect_err("the scope re-raises a job's panic");
        assert!(payload.is::<Bomb>(), "the first job's payload is re-raised");
        std::mem::forget(payload); // its drop would panic
        pool
    });
    assert_eq!(pool.spawn(|| 7).unwrap().join().unwrap(), 7);
    pool.shutdown();
}

/// An `on_retire` callback that panics with such a payload: the worker's
/// exit bookkeeping still completes, so `shutdown` returns. Before: the
/// payload's drop unwound out of the bookkeeping, the thread was never
/// counted as gone, and `shutdown` waited forever.
#[test]
fn an_on_retire_payload_whose_drop_panics_does_not_stop_shutdown() {
    let pool = Pool::builder()
        .min_workers(1)
        .max_workers(2)
        .on_retire(|_| std::panic::panic_any(Bomb))
        .build()
        .unwrap();
    assert_eq!(pool.spawn(|| 1).unwrap().join().unwrap(), 1);
    let report = within("shutdown", Duration::from_secs(60), move || pool.shutdown());
    assert_eq!(report.stats.live_threads, 0);
}
