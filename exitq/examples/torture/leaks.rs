//! Leaks on threads that end (the leak model): a guard, a `Reader` and
//! its guard, or an online `QsbrReader`, `mem::forget`ten by an exiting or
//! cancelled thread, or by a thread-local destructor that runs after
//! exitq's own (a temporary record). Also an online `QsbrReader` not
//! leaked but kept in a thread-local, dropped at the thread's teardown
//! (before or after exitq's own). Each leaked section must stop holding grace periods once its
//! thread is gone (else the watchdog sees writers stop), and the freed
//! records must pass to their next owners clean (else a reader sees a
//! poisoned object: a use after free).

use std::cell::RefCell;
use std::mem;

use exitq::QsbrReader;

use crate::workers::{check_cell, check_current};
use crate::world::{inc, world, Rng};

/// What a thread leaks.
#[derive(Clone, Copy)]
enum Leak {
    /// A `Domain::read` guard.
    Guard,
    /// A `Reader` and its guard.
    Reader,
    /// An online `QsbrReader`, loaded through.
    Qsbr,
    /// An online `QsbrReader` left in a thread-local (`HELD`), dropped at
    /// the thread's teardown: not a leak.
    Held,
}

/// A leak left to a thread-local destructor that runs after exitq's.
struct Late {
    slot: usize,
    what: Leak,
    seed: u64,
}

impl Drop for Late {
    fn drop(&mut self) {
        leak_now(self.slot, self.what, &Rng::new(self.seed));
    }
}

std::thread_local! {
    /// Initialised first (`arm_late`), so destroyed after exitq's own
    /// thread-local.
    static LATE: RefCell<Option<Late>> = const { RefCell::new(None) };
    /// An online QSBR reader the thread's teardown drops.
    static HELD: RefCell<Option<QsbrReader>> = const { RefCell::new(None) };
}

/// Call first in a thread that may leak during its teardown.
pub(crate) fn arm_late() {
    LATE.with(|_| ());
}

/// Checks the current object of slot `i` inside a section of the kind
/// `what`, then leaks that section.
fn leak_now(i: usize, what: Leak, rng: &Rng) {
    let w = world();
    let slot = &w.slots[i];
    match what {
        Leak::Guard => {
            let g = slot.domain.read();
            check_current(slot, rng);
            mem::forget(g);
            inc(&w.ops.leaked_guards);
        }
        Leak::Reader => {
            let mut r = slot.domain.reader();
            let g = r.read();
            check_current(slot, rng);
            mem::forget(g);
            mem::forget(r);
            inc(&w.ops.leaked_readers);
        }
        Leak::Qsbr => {
            let q = slot.domain.qsbr_reader();
            check_cell(slot, &q, rng);
            check_current(slot, rng);
            mem::forget(q);
            inc(&w.ops.leaked_qsbr_readers);
        }
        Leak::Held => {
            let q = slot.domain.qsbr_reader();
            check_cell(slot, &q, rng);
            // Dropped with HELD at the thread's teardown (at once if this
            // runs from it already: the thread-local is gone).
            let _ = HELD.try_with(|h| h.borrow_mut().replace(q));
        }
    }
}

/// With a small chance, leaks a section of a random slot's domain (never
/// `avoid`'s: the thread still waits for that one's grace periods), now
/// or from a late thread-local destructor (if `arm_late` ran).
pub(crate) fn maybe_leak(rng: &Rng, avoid: Option<usize>) {
    let n = world().slots.len() as u64;
    let what = match rng.below(100) {
        0..=4 => Leak::Guard,
        5..=9 => Leak::Reader,
        10..=14 => Leak::Qsbr,
        15..=19 => Leak::Held,
        _ => return,
    };
    let mut i = rng.below(n) as usize;
    if Some(i) == avoid {
        i = (i + 1) % n as usize;
    }
    if rng.chance(30) {
        let late = Late {
            slot: i,
            what,
            seed: rng.next(),
        };
        // A late leak armed before by this thread happens now instead.
        let earlier = LATE.with(|l| l.borrow_mut().replace(late));
        drop(earlier);
        return;
    }
    leak_now(i, what, rng);
}
