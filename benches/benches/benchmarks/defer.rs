//! Deferred-callback throughput, every callback counted as run.
//!
//! Timed (`iter_custom`): from the moment `threads` producers are released
//! (they are spawned and parked on a barrier before the clock starts) until
//! every one of the `iters` callbacks has run, as counted by the callbacks
//! themselves. Each callback does the same work everywhere: one relaxed
//! `fetch_add` on a counter (a leaked `&'static`, so producers touch no
//! shared reference count).
//!
//! * `exitq`: `Domain::defer` from every producer, then `Domain::barrier`.
//! * `crossbeam-epoch`: `pin()` + `Guard::defer` per callback (the way a
//!   data structure uses it), each producer flushes at the end, then the
//!   main thread pins and flushes until the count is complete (epochs must
//!   advance twice before garbage is collected).
//! * `mutex-vec`: `Mutex<Vec<Box<dyn FnOnce() + Send>>>`: push under the
//!   lock; the main thread swaps the vector out and runs it.
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh counter that callbacks can capture without an `Arc` clone.
fn counter() -> &'static AtomicU64 {
    Box::leak(Box::new(AtomicU64::new(0)))
}
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};

use super::THREADS;

/// Runs `producer(thread_index, count)` on `threads` threads started
/// together; returns the time from the start until `finish` returned.
fn timed(
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
    finish();
    t0.elapsed()
}

fn defer_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("defer");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(4));
    group.sample_size(20);
    let domain = exitq::Domain::new();
    for &threads in &THREADS {
        group.bench_with_input(
            BenchmarkId::new("exitq", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let ran = counter();
                    let d = domain.clone();
                    let elapsed = timed(
                        threads,
                        iters,
                        move |_, n| {
                            for _ in 0..n {
                                d.defer(move || {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                });
                            }
                        },
                        || domain.barrier(),
                    );
                    assert_eq!(ran.load(Ordering::Relaxed), iters);
                    elapsed
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("crossbeam-epoch", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let ran = counter();
                    let elapsed = timed(
                        threads,
                        iters,
                        move |_, n| {
                            for _ in 0..n {
                                let guard = crossbeam_epoch::pin();
                                guard.defer(move || {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                });
                            }
                            crossbeam_epoch::pin().flush();
                        },
                        || {
                            while ran.load(Ordering::Relaxed) < iters {
                                crossbeam_epoch::pin().flush();
                            }
                        },
                    );
                    assert_eq!(ran.load(Ordering::Relaxed), iters);
                    elapsed
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("mutex-vec", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let ran = counter();
                    type Queue = Mutex<Vec<Box<dyn FnOnce() + Send>>>;
                    let queue: Arc<Queue> = Arc::new(Mutex::new(Vec::new()));
                    let q = queue.clone();
                    let elapsed = timed(
                        threads,
                        iters,
                        move |_, n| {
                            for _ in 0..n {
                                q.lock().unwrap().push(Box::new(move || {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                }));
                            }
                        },
                        || {
                            let all = std::mem::take(&mut *queue.lock().unwrap());
                            for f in all {
                                f();
                            }
                        },
                    );
                    assert_eq!(ran.load(Ordering::Relaxed), iters);
                    elapsed
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, defer_throughput);
