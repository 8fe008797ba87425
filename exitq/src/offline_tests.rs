//! Unit tests of going offline (`thread::offline`, `past::offline`): the
//! thread's record cache is emptied and the next lookup comes back online,
//! and a seal's refresh leaves `OFFLINE` alone. Beside both modules, not
//! in `thread.rs`, whose module must not import `Domain` (no import
//! circles: the domain imports the thread's side).
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::past;
use crate::record::NEST_MASK;
use crate::sync::Ordering;
use crate::thread as this_thread;
use crate::Domain;

/// The calling thread's main record's word in `d`.
fn word(d: &Domain) -> u64 {
    this_thread::main_word(&d.inner).expect("the thread has a main record in the domain")
}

/// `offline` leaves the thread's main record `OFFLINE` and the cache
/// empty, so the next use finds the record through `existing_main`, which
/// brings it back online (an idle word of the current epoch) before the
/// cache hands it out again. Another domain's record is left alone by
/// `Domain::thread_offline`, taken by `thread_offline`.
#[test]
fn offline_empties_the_cache_and_the_next_use_comes_back_online() {
    let (a, b) = (Domain::new(), Domain::new());
    drop(b.read());
    drop(a.read());
    a.thread_offline();
    assert_eq!(word(&a), past::OFFLINE);
    assert_ne!(word(&b), past::OFFLINE, "only the domain asked");
    assert!(
        this_thread::cached(&a.inner).is_none(),
        "the cache would skip the way back"
    );
    let r = this_thread::existing_main(&a.inner).unwrap();
    let idle = a.inner.gp.hot.gp_ctr.load(Ordering::Relaxed) - 1;
    assert_eq!(
        r.ctr.load(Ordering::Relaxed),
        idle,
        "back online: an idle word"
    );
    assert_eq!(idle & NEST_MASK, 0);
    assert!(this_thread::cached(&a.inner).is_some());

    crate::thread_offline();
    assert_eq!((word(&a), word(&b)), (past::OFFLINE, past::OFFLINE));
    // A section on a record keeps it online: `offline` skips it.
    let g = b.read();
    crate::thread_offline();
    assert_ne!(word(&b), past::OFFLINE, "a held section stays held");
    drop(g);
    drop(a.read());
    assert_ne!(word(&a), past::OFFLINE);
}

/// `thread_offline` called by a callback that the thread's own seal runs:
/// the seal's refresh of the idle word, which comes after the callbacks,
/// leaves `OFFLINE` in place, so the way back still makes `online`'s fence
/// (`past::refresh_idle`).
#[test]
fn offline_from_a_callback_stays_offline_through_the_seal() {
    let d = Domain::builder()
        .batch_size(1)
        .flush_latency(Duration::from_secs(600))
        .build();
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = ran.clone();
    d.defer(move || {
        crate::thread_offline();
        r2.store(true, Ordering::Relaxed);
    });
    d.synchronize();
    d.defer(|| ()); // seals, runs the first callback, refreshes, polls
    assert!(
        ran.load(Ordering::Relaxed),
        "the seal ran the ready callback"
    );
    assert_eq!(
        word(&d),
        past::OFFLINE,
        "the seal's refresh overwrote OFFLINE"
    );
    drop(d.read());
    d.barrier();
}
