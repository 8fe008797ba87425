//! Grace-period latency with readers active.
//!
//! `readers` threads loop over short read sections (each section loads a
//! shared word a few times) for the whole benchmark; the timed operation is
//! one grace period:
//!
//! * `exitq-sync`: `Domain::synchronize` (25 µs first-check delay, membarrier);
//! * `exitq-expedited`: `Domain::synchronize_expedited`;
//! * `exitq-fallback-expedited`: expedited, fence-fallback domain;
//! * `crossbeam-epoch`: the closest crossbeam analogue: defer a flag under
//!   `pin()`, then pin and flush until it has run (crossbeam has no
//!   synchronize; this is the time for a deferred function to become
//!   runnable with readers pinning).
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion};

use super::THREADS;

/// Background readers; stopped and joined on drop.
struct Readers {
    stop: Arc<AtomicBool>,
    handles: Vec<thread::JoinHandle<()>>,
}

impl Readers {
    fn start(n: usize, section: impl Fn(&AtomicU64) + Send + Sync + Clone + 'static) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(AtomicU64::new(1));
        let handles = (0..n)
            .map(|_| {
                let (stop, shared, section) = (stop.clone(), shared.clone(), section.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        section(&shared);
                    }
                })
            })
            .collect();
        Readers { stop, handles }
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

fn read_a_bit(shared: &AtomicU64) {
    for _ in 0..8 {
        black_box(shared.load(Ordering::Relaxed));
    }
}

fn synchronize_latency(c: &mut Criterion) {
    let mut group = c.benchmark_group("synchronize");
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(20);
    for &readers in &THREADS {
        let normal = exitq::Domain::new();
        let fallback = exitq::Domain::builder()
            .expedite(exitq::Expedite::Fallback)
            .build();
        {
            let (d1, d2) = (normal.clone(), fallback.clone());
            let _r = Readers::start(readers, move |s| {
                {
                    let _g = d1.read();
                    read_a_bit(s);
                }
                let _g = d2.read();
                read_a_bit(s);
            });
            group.bench_with_input(BenchmarkId::new("exitq-sync", readers), &readers, |b, _| {
                b.iter(|| normal.synchronize())
            });
            group.bench_with_input(
                BenchmarkId::new("exitq-expedited", readers),
                &readers,
                |b, _| b.iter(|| normal.synchronize_expedited()),
            );
            group.bench_with_input(
                BenchmarkId::new("exitq-fallback-expedited", readers),
                &readers,
                |b, _| b.iter(|| fallback.synchronize_expedited()),
            );
        }
        {
            let _r = Readers::start(readers, |s| {
                let _g = crossbeam_epoch::pin();
                read_a_bit(s);
            });
            group.bench_with_input(
                BenchmarkId::new("crossbeam-epoch", readers),
                &readers,
                |b, _| {
                    b.iter(|| {
                        let done = Arc::new(AtomicBool::new(false));
                        let d = done.clone();
                        crossbeam_epoch::pin().defer(move || d.store(true, Ordering::Release));
                        while !done.load(Ordering::Acquire) {
                            crossbeam_epoch::pin().flush();
                        }
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, synchronize_latency);
