//! Throughput of short jobs: exitq::pool against a fixed-size pool.
//!
//! Each iteration submits a batch of `BATCH` short jobs from one thread and
//! waits until the last one has run (`iter_custom`: the time from the first
//! submit to the last job's completion, per batch). Pools are built and
//! warmed up once per benchmark, outside the timing, with as many workers
//! as CPUs:
//!
//! * `fixed_mutex`: a fixed-size pool with one mutex and a condition
//!   variable (herd's mutex pool with a keep-alive of an hour, so it never
//!   shrinks) — the classic fixed thread pool;
//! * `exitq_fixed`: exitq::pool with min = max = CPUs;
//! * `exitq_elastic`: exitq::pool with min = 0, max = CPUs, a keep-alive
//!   of 10 ms: it may retire workers between batches and grow again.
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use exitq::pool::Pool;
use herd::scenario::MutexPool;

const BATCH: usize = 1_000;

/// Counts finished jobs; the last one of a batch unparks the waiter.
struct Done {
    n: AtomicUsize,
    waiter: Thread,
}

fn short_job(done: &Done, target: usize) {
    // A few hundred ns of work.
    let mut x = 0u64;
    for i in 0..100u64 {
        x = black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    black_box(x);
    // AcqRel: the last increment publishes every job to the waiter's
    // Acquire load.
    if done.n.fetch_add(1, Ordering::AcqRel) + 1 == target {
        done.waiter.unpark();
    }
}

fn wait(done: &Done, target: usize) {
    while done.n.load(Ordering::Acquire) < target {
        thread::park_timeout(Duration::from_millis(1));
    }
}

fn run_batches<S: Fn(Box<dyn FnOnce() + Send>)>(iters: u64, submit: S) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let done = Arc::new(Done {
            n: AtomicUsize::new(0),
            waiter: thread::current(),
        });
        let t0 = Instant::now();
        for _ in 0..BATCH {
            let d = done.clone();
            submit(Box::new(move || short_job(&d, BATCH)));
        }
        wait(&done, BATCH);
        total += t0.elapsed();
    }
    total
}

fn pools(c: &mut Criterion) {
    let n = thread::available_parallelism().map_or(2, |n| n.get());
    let mut g = c.benchmark_group("pool_short_jobs");
    g.throughput(Throughput::Elements(BATCH as u64));

    let fixed = MutexPool::new(n, Duration::from_secs(3600));
    g.bench_function("fixed_mutex", |b| {
        b.iter_custom(|iters| run_batches(iters, |f| fixed.execute(f)))
    });
    fixed.shutdown().expect("fixed pool shuts down");

    let exitq_fixed = Pool::builder()
        .min_workers(n)
        .max_workers(n)
        .build()
        .expect("workers start");
    g.bench_function("exitq_fixed", |b| {
        b.iter_custom(|iters| {
            run_batches(iters, |f| {
                exitq_fixed.execute(f).expect("pool is running");
            })
        })
    });
    exitq_fixed.shutdown();

    let elastic = Pool::builder()
        .min_workers(0)
        .max_workers(n)
        .keep_alive(Duration::from_millis(10))
        .build()
        .expect("pool builds");
    g.bench_function("exitq_elastic", |b| {
        b.iter_custom(|iters| {
            run_batches(iters, |f| {
                elastic.execute(f).expect("pool is running");
            })
        })
    });
    elastic.shutdown();
    g.finish();
}

criterion_group!(benches, pools);
