//! `Keepers`' collect and drop when a value's drop panics, driven
//! directly (no cell, no domain): what no cache interleaving shows
//! deterministically. Under miri too (scripts/test.d/30-miri.sh,
//! `--lib cell::keep::tests`), which sees a value leaked.
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::super::boxed;
use super::Keepers;

/// A value that counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_collect_whose_free_panics_parks_the_rest_again() {
    let drops = Arc::new(AtomicUsize::new(0));
    let keepers = Keepers::new();
    for _ in 0..3 {
        keepers.park(boxed::into_raw(Counted(drops.clone())));
    }
    // The first free panics (a value's `Drop` in a callback, as
    // `release_or_park`'s inline free): the two not yet freed must be
    // parked again, not lost with the collect's list.
    let mut first = true;
    let r = panic::catch_unwind(AssertUnwindSafe(|| {
        keepers.collect(|p| {
            // SAFETY: parked by this test, unkept (no slot), freed once.
            unsafe { boxed::drop_raw(p) };
            if std::mem::take(&mut first) {
                panic!("a panicking drop");
            }
        })
    }));
    assert!(r.is_err());
    assert_eq!(drops.load(Ordering::Relaxed), 1, "only the first freed");
    // A later collect frees them, each once.
    keepers.collect(|p| {
        // SAFETY: as above.
        unsafe { boxed::drop_raw(p) }
    });
    assert_eq!(drops.load(Ordering::Relaxed), 3);
    drop(keepers);
    assert_eq!(drops.load(Ordering::Relaxed), 3, "nothing freed twice");
}

/// A value whose drop may panic (after counting).
struct Bomb {
    panics: bool,
    drops: Arc<AtomicUsize>,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
        if self.panics {
            panic!("a bomb's drop");
        }
    }
}

#[test]
fn a_keepers_drop_goes_on_past_a_panicking_drop() {
    let drops = Arc::new(AtomicUsize::new(0));
    let keepers = Keepers::new();
    for panics in [false, true, false] {
        keepers.park(boxed::into_raw(Bomb {
            panics,
            drops: drops.clone(),
        }));
    }
    let r = panic::catch_unwind(AssertUnwindSafe(|| drop(keepers)));
    assert!(r.is_err());
    assert_eq!(
        drops.load(Ordering::Relaxed),
        3,
        "every parked value dropped"
    );
}

/// `replace`'s check (`kept_here`) tells this thread's caches from
/// another thread's, also when the other took over a slot this thread
/// gave back and keeps the same value in it.
#[test]
fn kept_here_sees_only_this_threads_caches() {
    let drops = Arc::new(AtomicUsize::new(0));
    let keepers = Arc::new(Keepers::new());
    let value = boxed::into_raw(Counted(drops.clone()));
    let cell = Shared(value);
    let mine = keepers.claim();
    // The cell, as the loads see it: `value` until the end of the test.
    keepers.adopt(mine, || cell.0, |_| unreachable!("nothing parked"));
    assert!(keepers.kept_here(value));
    keepers.release_slot(mine, |_| unreachable!("nothing parked"));
    assert!(!keepers.kept_here(value));
    let k = keepers.clone();
    let (taken_over, theirs) = std::thread::spawn(move || {
        let cell = cell; // the whole `Shared`, not its field
        let slot = k.claim();
        k.adopt(slot, || cell.0, |_| unreachable!("nothing parked"));
        // Not released: the other thread's cache stays.
        (std::ptr::eq(slot, mine_addr(&k)), k.kept_here(cell.0))
    })
    .join()
    .unwrap();
    assert!(taken_over, "the other thread reused the slot given back");
    assert!(theirs, "the other thread's check sees its own cache");
    assert!(
        !keepers.kept_here(value),
        "another thread's cache taken for ours"
    );
    // SAFETY: no cache reads through it any more; freed once.
    unsafe { boxed::drop_raw(value) };
    assert_eq!(drops.load(Ordering::Relaxed), 1);
}

/// A cache leaked by a thread that has exited is not taken for one of a
/// later thread's, which glibc may give the same stack and thread-locals
/// (`replace` on the later thread would panic "would deadlock").
#[test]
fn a_leaked_cache_of_an_exited_thread_is_not_a_later_threads() {
    let drops = Arc::new(AtomicUsize::new(0));
    let keepers = Arc::new(Keepers::new());
    let cell = Shared(boxed::into_raw(Counted(drops.clone())));
    let k = keepers.clone();
    std::thread::spawn(move || {
        let cell = cell;
        let slot = k.claim();
        k.adopt(slot, || cell.0, |_| unreachable!("nothing parked"));
        assert!(k.kept_here(cell.0));
        // Leaked: the slot is never released.
    })
    .join()
    .unwrap();
    for _ in 0..4 {
        let k = keepers.clone();
        let later = std::thread::spawn(move || {
            let cell = cell;
            k.kept_here(cell.0)
        })
        .join()
        .unwrap();
        assert!(!later, "the exited thread's leaked cache taken for ours");
    }
    // SAFETY: no cache reads through it any more; freed once.
    unsafe { boxed::drop_raw(cell.0) };
    assert_eq!(drops.load(Ordering::Relaxed), 1);
}

/// The test's cell value, shared with its other thread.
#[derive(Clone, Copy)]
struct Shared(*mut Counted);

// SAFETY: the value is only compared and kept, never read, by the other
// thread; the test frees it after joining it.
unsafe impl Send for Shared {}

/// The oldest slot of `k` (the only one, in the test above).
fn mine_addr<T>(k: &Keepers<T>) -> &super::Slot<T> {
    k.slots().last().expect("a slot")
}
