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
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{criterion_group, Criterion, Throughput};

use super::{bench_counted, count_into, THREADS};

fn defer_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("defer");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(4));
    group.sample_size(20);
    let domain = &exitq::Domain::new();
    for &threads in &THREADS {
        bench_counted(&mut group, "exitq", threads, |ran, _| {
            let d = domain.clone();
            let producer = move |_, n| {
                for _ in 0..n {
                    d.defer(count_into(ran));
                }
            };
            (producer, move || domain.barrier())
        });
        bench_counted(&mut group, "crossbeam-epoch", threads, |ran, iters| {
            let producer = move |_, n| {
                for _ in 0..n {
                    let guard = crossbeam_epoch::pin();
                    guard.defer(count_into(ran));
                }
                crossbeam_epoch::pin().flush();
            };
            let finish = move || {
                while ran.load(Ordering::Relaxed) < iters {
                    crossbeam_epoch::pin().flush();
                }
            };
            (producer, finish)
        });
        bench_counted(&mut group, "mutex-vec", threads, |ran, _| {
            type Queue = Mutex<Vec<Box<dyn FnOnce() + Send>>>;
            let queue: Arc<Queue> = Arc::default();
            let q = queue.clone();
            let producer = move |_, n| {
                for _ in 0..n {
                    q.lock().unwrap().push(Box::new(count_into(ran)));
                }
            };
            let finish = move || {
                let all = std::mem::take(&mut *queue.lock().unwrap());
                for f in all {
                    f();
                }
            };
            (producer, finish)
        });
    }
    group.finish();
}

criterion_group!(benches, defer_throughput);
