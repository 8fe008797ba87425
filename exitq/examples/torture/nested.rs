//! Barriers nested across domains: a callback of domain A defers into B
//! and waits for B's barrier; B's callback, when it runs nested inside
//! that callback of A on the same thread, calls A's barrier, which must
//! panic (it would wait for the run of A it is part of) rather than hang
//! (the watchdog) or return.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread;
use std::time::Duration;

use crate::world::{inc, not_in_child, world, Rng};

std::thread_local! {
    /// The slot whose callback `outer` this thread is running (MAX: none).
    static NESTED_IN: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// A's callback: defer `inner` into B and wait for B's barrier.
fn outer(a: usize, b: usize) {
    not_in_child();
    let previous = NESTED_IN.replace(a);
    let domain = &world().slots[b].domain;
    domain.defer(move || inner(a));
    // Panics (caught) if this thread is inside a section of B: the
    // callback ran at the end of some other work of this thread.
    let _ = catch_unwind(AssertUnwindSafe(|| domain.barrier()));
    NESTED_IN.set(previous);
}

/// B's callback: A's barrier, if nested inside A's callback here.
fn inner(a: usize) {
    not_in_child();
    if NESTED_IN.get() != a {
        // Run elsewhere (B's reclaimer, another thread): A's barrier here
        // could wait for the callback that waits for us, a cycle across
        // threads that no implementation can break. Not the case tested.
        return;
    }
    let w = world();
    match catch_unwind(AssertUnwindSafe(|| w.slots[a].domain.barrier())) {
        Err(_) => inc(&w.ops.nested_barriers_refused),
        Ok(()) => inc(&w.v.nested_barrier_returned),
    }
}

/// Defers `outer` into a domain A and, most of the time, runs A's
/// barrier itself. B always comes after A in the slots' order, as locks
/// are taken in one order: a callback of A waits for B's barrier, never
/// the reverse, so no two callbacks wait for each other's domains across
/// threads (a deadlock of the test's own making). A is never the domain
/// with a small backlog limit (its producers would wait for the callback
/// that waits for B).
pub(crate) fn nester(seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0x4E57);
    let n = w.shared();
    let outers: Vec<usize> = (0..n - 1)
        .filter(|&i| !w.slots[i].name.contains("backlog"))
        .collect();
    while !w.stop.load(std::sync::atomic::Ordering::Relaxed) {
        let a = outers[rng.below(outers.len() as u64) as usize];
        let b = a + 1 + rng.below((n - a - 1) as u64) as usize;
        w.slots[a].domain.defer(move || outer(a, b));
        if rng.chance(70) {
            w.slots[a].domain.barrier();
        }
        inc(&w.ops.nested_rounds);
        thread::sleep(Duration::from_micros(rng.below(500)));
    }
}
