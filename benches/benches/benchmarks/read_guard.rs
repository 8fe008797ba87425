//! Read-side cost: entering and leaving a read section, against the
//! baseline the issue sets (an uncontended relaxed load + store pair on a
//! word this thread owns), and against crossbeam-epoch's `pin()`.
//! `exitq-reader` is a registered `Reader` (no thread-local lookup, like
//! pinning through crossbeam's `LocalHandle`).
//!
//! Typed pointers (guard + load + dereference, the value read through
//! `black_box`): `exitq-reader-cell` (`RcuCell::load` under a `Reader`
//! guard) against its baseline `exitq-reader-acquire` (the same guard and
//! a plain Acquire load of an `AtomicPtr`, dereferenced by hand: what the
//! cell replaces); `exitq-read-cell` under `Domain::read`; and
//! crossbeam-epoch's `Atomic::load` under a `LocalHandle` pin.
//!
//! Single-threaded (`iter`): the cost of the fast path itself. Only the
//! domain reference goes through `black_box` (as a caller's `&Domain`
//! would be opaque); the guard itself is not forced to memory, as in real
//! use.
use std::hint::black_box;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use criterion::{criterion_group, Criterion};
use crossbeam_utils::CachePadded;

fn read_guard(c: &mut Criterion) {
    let mut group = c.benchmark_group("read_guard");
    let word = CachePadded::new(AtomicU64::new(0));
    let membarrier = exitq::Domain::builder()
        .expedite(exitq::Expedite::Auto)
        .build();
    let fallback = exitq::Domain::builder()
        .expedite(exitq::Expedite::Fallback)
        .build();
    drop(membarrier.read()); // register this thread outside the timing
    drop(fallback.read());
    group.bench_function("relaxed-load-store", |b| {
        b.iter(|| {
            let w = black_box(&word);
            let v = w.load(Ordering::Relaxed);
            w.store(v + 1, Ordering::Relaxed);
        })
    });
    let label = if membarrier.uses_membarrier() {
        "exitq-membarrier"
    } else {
        "exitq-auto(no-membarrier)"
    };
    group.bench_function(label, |b| {
        b.iter(|| {
            drop(black_box(&membarrier).read());
        })
    });
    group.bench_function("exitq-reader", |b| {
        let mut reader = membarrier.reader();
        b.iter(|| {
            drop(black_box(&mut reader).read());
        })
    });
    let raw = AtomicPtr::new(Box::into_raw(Box::new(7u64)));
    group.bench_function("exitq-reader-acquire", |b| {
        let mut reader = membarrier.reader();
        b.iter(|| {
            let _guard = black_box(&mut reader).read();
            let p = black_box(&raw).load(Ordering::Acquire);
            // SAFETY: `p` is the live box, freed after the benchmarks.
            black_box(unsafe { *p });
        })
    });
    // SAFETY: the benchmark above is done; no reader is left.
    drop(unsafe { Box::from_raw(raw.load(Ordering::Relaxed)) });
    let cell = exitq::RcuCell::new(&membarrier, 7u64);
    group.bench_function("exitq-reader-cell", |b| {
        let mut reader = membarrier.reader();
        b.iter(|| {
            let guard = black_box(&mut reader).read();
            black_box(*black_box(&cell).load(&guard));
        })
    });
    group.bench_function("exitq-read-cell", |b| {
        b.iter(|| {
            let guard = black_box(&membarrier).read();
            black_box(*black_box(&cell).load(&guard));
        })
    });
    let atomic = crossbeam_epoch::Atomic::new(7u64);
    group.bench_function("crossbeam-epoch-atomic", |b| {
        let handle = crossbeam_epoch::default_collector().register();
        b.iter(|| {
            let guard = black_box(&handle).pin();
            let p = black_box(&atomic).load(Ordering::Acquire, &guard);
            // SAFETY: `atomic` holds a live value for the whole benchmark.
            black_box(*unsafe { p.deref() });
        })
    });
    // SAFETY: no guard is left; the value is dropped once.
    drop(unsafe { atomic.into_owned() });
    group.bench_function("exitq-nested", |b| {
        let _outer = membarrier.read();
        b.iter(|| {
            drop(black_box(&membarrier).read());
        })
    });
    group.bench_function("exitq-fence-fallback", |b| {
        b.iter(|| {
            drop(black_box(&fallback).read());
        })
    });
    group.bench_function("crossbeam-epoch-pin", |b| {
        b.iter(|| {
            drop(crossbeam_epoch::pin());
        })
    });
    group.finish();
}

criterion_group!(benches, read_guard);
