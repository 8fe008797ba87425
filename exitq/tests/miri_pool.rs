//! `exitq::pool` under miri (scripts/test.d/30-miri.sh): a small pool whose
//! workers run owned, joinable and scoped jobs, retire after a short
//! keep-alive and are replaced by new ones, then `shutdown_now` and
//! `shutdown`. The workers' exit bookkeeping runs through exitq's exit
//! hooks, and a retiring worker's exitq record is claimed again by the
//! worker that replaces it: miri found the exit walk reading such a record
//! after releasing it (a data race with the new worker's claim; fixed, and
//! pinned by `exit_walk.rs`). Natively it is one more quick pool test.
//!
//! Miri needs `-Zmiri-ignore-leaks`: the pools' shared domain keeps its
//! reclaimer thread for the life of the process.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use exitq::pool::Pool;

#[test]
fn jobs_retirement_and_respawn_under_miri() {
    let pool = Pool::builder()
        .max_workers(2)
        .keep_alive(Duration::from_millis(5))
        .keep_alive_jitter(Duration::ZERO)
        .spin(Duration::ZERO)
        .retire_batch(2)
        .build()
        .unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let burst = |n: usize| {
        for _ in 0..n {
            let d = done.clone();
            pool.execute(move || {
                d.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
    };
    for round in 0..2 {
        burst(4);
        let h = pool.spawn(move || 6 * 7 + round).unwrap();
        assert_eq!(h.join().unwrap(), 42 + round);
        let mut parts = [0u64; 3];
        pool.scope(|s| {
            for (i, p) in parts.iter_mut().enumerate() {
                s.execute(move || *p = i as u64 + 1);
            }
        });
        assert_eq!(parts, [1, 2, 3]);
        // Let the workers retire (their exit hooks run on the shared
        // domain's reclaimer); the next round starts new ones.
        let start = Instant::now();
        while pool.stats().live_threads > 0 && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let s = pool.stats();
        assert_eq!(
            (s.workers, s.live_threads),
            (0, 0),
            "every worker retired: {s:?}"
        );
    }
    assert!(
        pool.stats().spawned >= 2,
        "the second round started new workers"
    );
    burst(4);
    for job in pool.shutdown_now() {
        job.run();
    }
    let report = pool.shutdown();
    assert_eq!(done.load(Ordering::Relaxed), 12);
    assert_eq!(report.stats.live_threads, 0);
}
