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

use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, BenchmarkId, Criterion};

use super::THREADS;

/// A fresh counter that hooks can capture without an `Arc` clone.
fn counter() -> &'static AtomicU64 {
    Box::leak(Box::new(AtomicU64::new(0)))
}

/// The cleanup every variant registers: counts that it ran.
fn hook(ran: &'static AtomicU64) -> impl FnOnce() + Send + 'static {
    move || {
        ran.fetch_add(1, Ordering::Relaxed);
    }
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

/// The harness every variant shares: benchmark `name` at `threads` threads
/// whose `iters` cycles are `work(ran)(thread index, its share)`; each cycle
/// registers one [`hook`] counting into `ran`. Timed from the common start
/// until the threads joined and `drain` returned (every hook has run, which
/// is checked).
fn bench_variant<W>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    threads: usize,
    work: impl Fn(&'static AtomicU64) -> W,
    drain: impl Fn(),
) where
    W: Fn(usize, u64) + Send + Sync + 'static,
{
    group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
        b.iter_custom(|iters| {
            let ran = counter();
            let t0 = run_threads(threads, iters, work(ran));
            drain();
            let elapsed = t0.elapsed();
            assert_eq!(ran.load(Ordering::Relaxed), iters);
            elapsed
        })
    });
}

fn exit_hooks(c: &mut Criterion) {
    let mut group = c.benchmark_group("exit_hook");
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(20);
    let domain = exitq::Domain::new();
    let exit_barrier = || domain.exit_barrier();
    for &threads in &THREADS {
        bench_variant(
            &mut group,
            "exitq-retire",
            threads,
            |ran| {
                let d = domain.clone();
                move |_, n| {
                    for _ in 0..n {
                        d.register_exit(hook(ran));
                        d.retire_thread();
                    }
                }
            },
            exit_barrier,
        );
        bench_variant(
            &mut group,
            "mutex-unregister",
            threads,
            |ran| {
                let reg: Arc<Registry> = Arc::default();
                move |t, n| {
                    for i in 0..n {
                        let key = (t as u64) << 40 | i;
                        reg.lock().unwrap().insert(key, Box::new(hook(ran)));
                        let hook = reg.lock().unwrap().remove(&key).unwrap();
                        hook();
                    }
                }
            },
            || {},
        );
    }
    // Real thread exits, `threads` spawning concurrently.
    for &threads in &THREADS {
        bench_variant(
            &mut group,
            "exitq-threads",
            threads,
            |ran| {
                let d = domain.clone();
                move |_, n| {
                    for _ in 0..n {
                        let d = d.clone();
                        thread::spawn(move || d.register_exit(hook(ran)))
                            .join()
                            .unwrap();
                    }
                }
            },
            exit_barrier,
        );
        bench_variant(
            &mut group,
            "mutex-threads",
            threads,
            |ran| {
                let reg: Arc<Registry> = Arc::default();
                let next = Arc::new(AtomicU64::new(0));
                move |_, n| {
                    for _ in 0..n {
                        let (reg, next) = (reg.clone(), next.clone());
                        thread::spawn(move || {
                            let key = next.fetch_add(1, Ordering::Relaxed);
                            reg.lock().unwrap().insert(key, Box::new(hook(ran)));
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
                }
            },
            || {},
        );
    }
    group.finish();
}

criterion_group!(benches, exit_hooks);
