//! Defects of `exitq::pool` found by the red-team review after issue 25:
//! each test failed (a hang caught by a watchdog) before its fix.
use std::sync::Arc;
use std::time::Duration;

use exitq::pool::Pool;

mod watch_util;
use watch_util::within;

const LIMIT: Duration = Duration::from_secs(30);

/// A pool that cannot start any worker (the kernel refuses to map a 64 TiB
/// stack), so every job runs on its submitting thread, inside `execute`.
fn workerless_pool() -> Arc<Pool> {
    Arc::new(
        Pool::builder()
            .min_workers(0)
            .max_workers(2)
            .stack_size(1 << 46)
            .build()
            .expect("a pool with no workers yet builds"),
    )
}

/// A job run on its submitting thread (no worker could start) shuts the
/// pool down. That thread is no worker, so nothing refuses the call, and
/// `shutdown` waited for every submitter to leave `execute`, the job's own
/// submitter among them: it never returned.
#[test]
fn shutdown_from_a_job_run_on_its_submitter_returns() {
    let pool = workerless_pool();
    let p = pool.clone();
    let report = within("shutdown inside an inline job", LIMIT, move || {
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        p.execute(move || tx.send(p2.shutdown()).unwrap())
            .expect("the pool runs");
        rx.recv().expect("the job ran before execute returned")
    });
    assert_eq!(report.stats.live_threads, 0);
    assert!(pool.execute(|| ()).is_err(), "the pool is shut down");
}

/// The same with `shutdown_now`.
#[test]
fn shutdown_now_from_a_job_run_on_its_submitter_returns() {
    let pool = workerless_pool();
    let p = pool.clone();
    let left = within("shutdown_now inside an inline job", LIMIT, move || {
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        p.execute(move || tx.send(p2.shutdown_now().len()).unwrap())
            .expect("the pool runs");
        rx.recv().expect("the job ran before execute returned")
    });
    assert_eq!(left, 0, "nothing else was queued");
    assert!(pool.execute(|| ()).is_err(), "the pool is shut down");
}
