pub mod defer;
pub mod defer_free;
pub mod exit_hook;
pub mod pool;
pub mod read_guard;
pub mod synchronize;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId};

/// Thread counts every contended benchmark runs at.
pub const THREADS: [usize; 3] = [1, 2, 4];

/// A fresh counter that callbacks can capture without an `Arc` clone.
pub fn counter() -> &'static AtomicU64 {
    Box::leak(Box::new(AtomicU64::new(0)))
}

/// A callback that counts into `ran` (the same work in every variant: one
/// relaxed `fetch_add`).
pub fn count_into(ran: &'static AtomicU64) -> impl FnOnce() + Send + 'static {
    move || {
        ran.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `producer(thread_index, count)` on `threads` threads started
/// together (spawned and parked on a barrier before the clock starts), the
/// counts adding up to `iters`; returns the time from the start until
/// `finish` returned.
pub fn timed(
    threads: usize,
    iters: u64,
    producer: impl Fn(usize, u64) + Send + Sync + 'static,
    finish: impl FnOnce(),
) -> Duration {
    let producer = Arc::new(producer);
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (producer, start) = (producer.clone(), start.clone());
            let n = iters / threads as u64 + u64::from((t as u64) < iters % threads as u64);
            thread::spawn(move || {
                start.wait();
                producer(t, n);
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    // The producer's captures (e.g. reference counts `finish` waits on)
    // go before `finish` runs.
    drop(producer);
    finish();
    t0.elapsed()
}

/// The harness of the counted benchmarks: `name` at `threads` threads, timed
/// with `iter_custom` by [`timed`]. For each measurement `setup(ran, iters)`
/// gives the producer (its share of `iters` callbacks, each counting into
/// `ran`, e.g. with [`count_into`]) and `finish` (returns once every
/// callback has run); the count is then checked: every callback ran once.
pub fn bench_counted<P, F>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    threads: usize,
    setup: impl Fn(&'static AtomicU64, u64) -> (P, F),
) where
    P: Fn(usize, u64) + Send + Sync + 'static,
    F: FnOnce(),
{
    group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
        b.iter_custom(|iters| {
            let ran = counter();
            let (producer, finish) = setup(ran, iters);
            let elapsed = timed(threads, iters, producer, finish);
            assert_eq!(ran.load(Ordering::Relaxed), iters, "{name}/{threads}");
            elapsed
        })
    });
}
