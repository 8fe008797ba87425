//! Exit-hook cost: register a cleanup, then hand it over as a thread exit
//! does, against a mutex-protected registry (register = insert under the
//! lock; exit = lock and remove, run the cleanup).
//!
//! Timed (`iter_custom`): `threads` threads, started together, each doing
//! its share of `iters` register + exit cycles; then until every cleanup has
//! run (`exit_barrier` for exitq).
//!
//! * `exitq-retire`: `register_exit` (allocates the node) and
//!   `retire_thread` (the exact thread-exit procedure: one CAS push, one
//!   CAS release), then the reclaimer runs the hook after a grace period;
//! * `mutex-unregister`: `Mutex<HashMap<id, Box<dyn FnOnce>>>`; exit takes
//!   the lock, removes the entry and runs it.
//!
//! `*-threads` variants measure real thread exits: each iteration spawns a
//! thread that registers and exits (thread creation dominates; shown so the
//! hook cost can be read against it).
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion};

use super::THREADS;

/// A fresh counter that hooks can capture without an `Arc` clone.
fn counter() -> &'static AtomicU64 {
    Box::leak(Box::new(AtomicU64::new(0)))
}

type Registry = Mutex<HashMap<u64, Box<dyn FnOnce() + Send>>>;

fn run_threads(
    threads: usize,
    iters: u64,
    work: impl Fn(usize, u64) + Send + Sync + 'static,
) -> Instant {
    let work = Arc::new(work);
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (work, start) = (work.clone(), start.clone());
            let n = iters / threads as u64 + u64::from((t as u64) < iters % threads as u64);
            thread::spawn(move || {
                start.wait();
                work(t, n);
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    t0
}

fn exit_hooks(c: &mut Criterion) {
    let mut group = c.benchmark_group("exit_hook");
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(20);
    let domain = exitq::Domain::new();
    for &threads in &THREADS {
        group.bench_with_input(
            BenchmarkId::new("exitq-retire", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let ran = counter();
                    let d = domain.clone();
                    let t0 = run_threads(threads, iters, move |_, n| {
                        for _ in 0..n {
                            d.register_exit(move || {
                                ran.fetch_add(1, Ordering::Relaxed);
                            });
                            d.retire_thread();
                        }
                    });
                    domain.exit_barrier();
                    let elapsed = t0.elapsed();
                    assert_eq!(ran.load(Ordering::Relaxed), iters);
                    elapsed
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("mutex-unregister", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let ran = counter();
                    let registry: Arc<Registry> = Arc::new(Mutex::new(HashMap::new()));
                    let reg = registry.clone();
                    let t0 = run_threads(threads, iters, move |t, n| {
                        for i in 0..n {
                            let key = (t as u64) << 40 | i;
                            reg.lock().unwrap().insert(
                                key,
                                Box::new(move || {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                }),
                            );
                            let hook = reg.lock().unwrap().remove(&key).unwrap();
                            hook();
                        }
                    });
                    let elapsed = t0.elapsed();
                    assert_eq!(ran.load(Ordering::Relaxed), iters);
                    elapsed
                })
            },
        );
    }
    // Real thread exits, `threads` spawning concurrently.
    for &threads in &THREADS {
        group.bench_with_input(
            BenchmarkId::new("exitq-threads", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let ran = counter();
                    let d = domain.clone();
                    let t0 = run_threads(threads, iters, move |_, n| {
                        for _ in 0..n {
                            let d = d.clone();
                            thread::spawn(move || {
                                d.register_exit(move || {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                });
                            })
                            .join()
                            .unwrap();
                        }
                    });
                    domain.exit_barrier();
                    let elapsed = t0.elapsed();
                    assert_eq!(ran.load(Ordering::Relaxed), iters);
                    elapsed
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("mutex-threads", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let ran = counter();
                    let registry: Arc<Registry> = Arc::new(Mutex::new(HashMap::new()));
                    let next = Arc::new(AtomicU64::new(0));
                    let reg = registry.clone();
                    let t0 = run_threads(threads, iters, move |_, n| {
                        for _ in 0..n {
                            let (reg, next) = (reg.clone(), next.clone());
                            thread::spawn(move || {
                                let key = next.fetch_add(1, Ordering::Relaxed);
                                reg.lock().unwrap().insert(
                                    key,
                                    Box::new(move || {
                                        ran.fetch_add(1, Ordering::Relaxed);
                                    }),
                                );
                                // What a thread-exit destructor does with a locked registry.
                                struct Unregister(Arc<Registry>, u64);
                                impl Drop for Unregister {
                                    fn drop(&mut self) {
                                        let hook = self.0.lock().unwrap().remove(&self.1);
                                        if let Some(hook) = hook {
                                            hook();
                                        }
                                    }
                                }
                                let _on_exit = Unregister(reg, key);
                            })
                            .join()
                            .unwrap();
                        }
                    });
                    let elapsed = t0.elapsed();
                    assert_eq!(ran.load(Ordering::Relaxed), iters);
                    elapsed
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, exit_hooks);
