//! The realistic deferred callback (issue "exitq core v2"): each operation
//! enters a read section, allocates a 32-byte node, and defers a callback
//! that frees it and drops a clone of a shared `Arc`: the job RCU exists
//! for, freeing memory the deferring thread allocated.
//!
//! Timed (`iter_custom`): from the moment `threads` producers are released
//! until every callback has run (the shared `Arc`'s count is back to what
//! it was: each callback dropped its clone exactly once).
//!
//! * `exitq`: a `Reader` per producer, `Domain::defer` inside its guard,
//!   then `Domain::barrier`.
//! * `crossbeam-epoch`: its best configuration, a registered `LocalHandle`
//!   per producer, `pin` + `Guard::defer`; each producer flushes at the
//!   end, then the main thread pins and flushes until every callback ran.
//! * `floor`: the same loop freeing at once (a read section, no
//!   reclamation): the throughput no deferred scheme can beat.
//!
//! liburcu (`call_rcu` and `defer_rcu`, urcu-memb and urcu-qsbr) is a C
//! program; `scripts/bench-defer-free.sh` times it against these as whole
//! processes, interleaved.
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};

use super::{timed, THREADS};

/// The object a producer allocates and a callback frees.
#[allow(dead_code)] // the fields give the node its size
struct Node {
    key: u64,
    value: u64,
    next: usize,
    seq: u64,
}

#[inline(always)]
fn node(i: u64) -> Box<Node> {
    black_box(Box::new(Node {
        key: i,
        value: i ^ 0x5555,
        next: 0,
        seq: i,
    }))
}

fn free(n: Box<Node>, a: Arc<u64>) {
    drop(black_box(n));
    drop(a);
}

fn defer_free(c: &mut Criterion) {
    let mut group = c.benchmark_group("defer_free");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(4));
    group.sample_size(20);
    let domain = exitq::Domain::new();
    for &threads in &THREADS {
        let shared = Arc::new(0u64);
        let check = |name: &str, shared: &Arc<u64>| {
            assert_eq!(
                Arc::strong_count(shared),
                1,
                "{name}/{threads}: every callback ran once"
            );
        };
        group.bench_with_input(
            BenchmarkId::new("exitq", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let (d, s) = (domain.clone(), shared.clone());
                    let producer = move |_, n: u64| {
                        let mut reader = d.reader();
                        for i in 0..n {
                            let _g = reader.read();
                            let (node, a) = (node(i), s.clone());
                            d.defer(move || free(node, a));
                        }
                    };
                    let elapsed = timed(threads, iters, producer, || domain.barrier());
                    check("exitq", &shared);
                    elapsed
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("crossbeam-epoch", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let s = shared.clone();
                    let producer = move |_, n: u64| {
                        let handle = crossbeam_epoch::default_collector().register();
                        for i in 0..n {
                            let g = handle.pin();
                            let (node, a) = (node(i), s.clone());
                            g.defer(move || free(node, a));
                        }
                        handle.pin().flush();
                    };
                    let sh = shared.clone();
                    let elapsed = timed(threads, iters, producer, move || {
                        let handle = crossbeam_epoch::default_collector().register();
                        // `shared` and `sh`: every other clone was dropped.
                        while Arc::strong_count(&sh) > 2 {
                            handle.pin().flush();
                        }
                    });
                    check("crossbeam-epoch", &shared);
                    elapsed
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("floor", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let (d, s) = (domain.clone(), shared.clone());
                    let producer = move |_, n: u64| {
                        let mut reader = d.reader();
                        for i in 0..n {
                            let _g = reader.read();
                            free(node(i), s.clone());
                        }
                    };
                    let elapsed = timed(threads, iters, producer, || {});
                    check("floor", &shared);
                    elapsed
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, defer_free);
