//! What the model checker itself must see for exitq's loom models to
//! prove anything, run by scripts/test.d/20-loom.sh:
//!
//! ```text
//! RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p exitq --release --test loom_sees --target-dir target/loom
//! ```
//!
//! A thread that loads a word and then writes it (a claim's load before
//! its CAS, a reader's nested entry's load before its store) races other
//! threads' loads of that word with its write. Upstream loom's search let
//! the thread's own load hide those races (tokio-rs/loom#166), and a model
//! of `replace`'s check passed on a broken check because of it; the
//! workspace builds loom with the fix (`third_party/loom/PATCHED.md`).
//! This fails on upstream loom 0.7.3.
//!
//! And the model checker must not try what C++ forbids: a model that fails
//! on an impossible execution is no evidence against the code. Loom keeps
//! each word's modification order as a partial order, and upstream loom
//! left a store unordered with a read-modify-write made before it whose
//! read it had seen: a later load could then return the RMW's older value
//! after the store happened before it (write-read coherence). A red-team
//! model of two cache writers failed at 3 preemptions on that alone
//! (2026-12-06); the patched loom orders such a store after the RMW
//! ([`rmw_atomicity_keeps_write_read_coherence`]). This also fails on
//! upstream loom 0.7.3.
#![cfg(exitq_loom)]

use std::collections::BTreeSet;
use std::sync::Mutex;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Every outcome of one thread's two loads, against another thread that
/// loads the first word, then writes it with `write`, then stores the
/// second.
fn outcomes(write: fn(&AtomicUsize)) -> BTreeSet<(usize, usize)> {
    let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let out = seen.clone();
    loom::model(move || {
        let w = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let other = w.clone();
        let writer = thread::spawn(move || {
            assert_eq!(other.0.load(Ordering::Relaxed), 0);
            write(&other.0);
            other.1.store(1, Ordering::Relaxed);
        });
        let a = w.0.load(Ordering::Relaxed);
        let b = w.1.load(Ordering::Relaxed);
        writer.join().unwrap();
        seen.lock().unwrap().insert((a, b));
    });
    let all = out.lock().unwrap().clone();
    all
}

fn every_outcome() -> BTreeSet<(usize, usize)> {
    [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().collect()
}

/// A load, then a CAS of the same word (a claim).
#[test]
fn a_cas_after_its_threads_load_races_other_loads() {
    let seen = outcomes(|x| {
        x.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .unwrap();
    });
    assert_eq!(seen, every_outcome(), "loom did not try the CAS first");
}

/// A load, then a plain store of the same word (a reader's nested entry).
#[test]
fn a_store_after_its_threads_load_races_other_loads() {
    let seen = outcomes(|x| x.store(1, Ordering::Release));
    assert_eq!(seen, every_outcome(), "loom did not try the store first");
}

/// Thread 1 swaps a word that thread 2 stores meanwhile, then makes an
/// AcqRel read-modify-write of a second word (a fence) and loads the
/// first. If its swap read the initial value, thread 2's store is later in
/// the word's order than the swap (a swap reads the value just before its
/// own); if its fence read thread 2's fence, that store happens before the
/// load, which must then return it. Upstream loom returns the swap's value
/// (found by a red-team review, 2026-12-06).
#[test]
fn rmw_atomicity_keeps_write_read_coherence() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let word = Arc::new(AtomicUsize::new(1));
        let fence = Arc::new(AtomicUsize::new(0));
        let (w1, f1) = (word.clone(), fence.clone());
        let t1 = thread::spawn(move || {
            let was = w1.swap(0, Ordering::Acquire);
            let order = f1.fetch_add(1, Ordering::AcqRel);
            (was, order, w1.load(Ordering::Relaxed))
        });
        word.store(2, Ordering::Release);
        let order2 = fence.fetch_add(1, Ordering::AcqRel);
        let (was, order1, last) = t1.join().unwrap();
        if was == 1 && order1 > order2 {
            assert_eq!(
                last, 2,
                "the load returned a value older than a store that happens before it"
            );
        }
    });
}
