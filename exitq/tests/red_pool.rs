//! Defects of `exitq::pool` found by the red-team reviews (after issue 25,
//! and of the pool and stacks later): each test failed before its fix (a
//! hang caught by a watchdog, a panic, or an abort seen from a forked
//! child).
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

/// A thread name with a NUL byte: std's `thread::Builder` panics on it.
/// `build` accepted it (with no minimum worker to start), and the first
/// `execute` panicked inside the pool's spawn, after the worker had been
/// counted and while the submitter was still registered: dropping the pool
/// then waited for that submitter for ever (and `shutdown` for that
/// worker). With a minimum worker, `build` itself panicked. Now `build`
/// refuses the name, as `DomainBuilder::try_build` does.
#[test]
fn a_thread_name_with_a_nul_byte_is_refused_by_build() {
    for min in [0, 1] {
        let e = Pool::builder()
            .thread_name("bad\0name")
            .min_workers(min)
            .build()
            .expect_err("a NUL byte in the thread name is refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("NUL"), "{e}");
    }
}
