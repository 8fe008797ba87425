//! Leaks on threads that end (the leak model): a guard, a `Reader` and
//! its guard, or an online `QsbrReader`, `mem::forget`ten by an exiting or
//! cancelled thread, or by the destructor of a pthread key created after
//! the first domain, which glibc runs after exitq's exit path (a temporary
//! record). Also an online `QsbrReader` not leaked but kept in a
//! thread-local, dropped at the thread's teardown (before exitq's exit
//! path). Each leaked section must stop holding grace periods once its
//! thread is gone (else the watchdog sees writers stop), and the freed
//! records must pass to their next owners clean (else a reader sees a
//! poisoned object: a use after free).

use std::cell::RefCell;
use std::ffi::c_void;
use std::mem;
use std::sync::OnceLock;

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

/// A leak left to the late key's destructor: which slot, what, and the
/// seed of its choices.
struct Later {
    slot: usize,
    what: Leak,
    seed: u64,
}

std::thread_local! {
    /// An online QSBR reader the thread's teardown drops.
    static HELD: RefCell<Option<QsbrReader>> = const { RefCell::new(None) };
}

/// Created after the domains (`create_late_key`): its destructor leaks
/// after exitq's exit path.
static LATE_KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
/// A new pthread key with destructor `dtor`.
pub(crate) fn new_key(dtor: extern "C" fn(*mut c_void)) -> libc::pthread_key_t {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is writable; `dtor` does not unwind (extern "C").
    let rc = unsafe { libc::pthread_key_create(&mut key, Some(dtor)) };
    assert_eq!(rc, 0, "torture: pthread_key_create: {rc}");
    key
}

/// Call after the first domain is built.
pub(crate) fn create_late_key() {
    LATE_KEY.get_or_init(|| new_key(late_dtor));
}

/// Takes the calling thread's value of `key` (a box `put` there) out of
/// the key (null: none).
fn take<T>(key: libc::pthread_key_t) -> Option<Box<T>> {
    // SAFETY: a live key of ours.
    let p = unsafe { libc::pthread_getspecific(key) }.cast::<T>();
    if p.is_null() {
        return None;
    }
    // SAFETY: set by `put` from `Box::into_raw`, taken once (cleared
    // below, or by glibc before the destructor).
    unsafe { libc::pthread_setspecific(key, std::ptr::null()) };
    // SAFETY: as above.
    Some(unsafe { Box::from_raw(p) })
}

/// Stores `value` in the calling thread's value of `key`, for its
/// destructor; gives it back if the key cannot be set (the caller then
/// does now what the destructor would).
pub(crate) fn put<T>(key: libc::pthread_key_t, value: T) -> Result<(), Box<T>> {
    let p = Box::into_raw(Box::new(value));
    // SAFETY: a live key of ours; the value is a leaked box taken back by
    // `take` or the destructor.
    if unsafe { libc::pthread_setspecific(key, p.cast()) } == 0 {
        Ok(())
    } else {
        // SAFETY: not stored: still ours.
        Err(unsafe { Box::from_raw(p) })
    }
}

extern "C" fn late_dtor(p: *mut c_void) {
    // SAFETY: the value `put` stored (glibc cleared the slot).
    let l = unsafe { Box::from_raw(p.cast::<Later>()) };
    leak_now(l.slot, l.what, &Rng::new(l.seed));
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
/// or from the late key's destructor.
pub(crate) fn maybe_leak(rng: &Rng, avoid: Option<usize>) {
    let n = world().shared() as u64;
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
        let key = *LATE_KEY.get().expect("created in main");
        // A late leak armed before by this thread happens now instead.
        if let Some(earlier) = take::<Later>(key) {
            leak_now(earlier.slot, earlier.what, &Rng::new(earlier.seed));
        }
        let late = Later {
            slot: i,
            what,
            seed: rng.next(),
        };
        if let Err(l) = put(key, late) {
            leak_now(l.slot, l.what, &Rng::new(l.seed));
        }
        return;
    }
    leak_now(i, what, rng);
}
