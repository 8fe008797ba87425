//! What the hand-off waves (`handoffs.rs`) and the dropped-domain waves
//! (`handoff_drops.rs`) share: a thread's tally of its exit hooks and
//! its check after a barrier, the counted payload callback, and the
//! exit's timing. A file of its own, so that neither of the two imports
//! the other back.
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use exitq::Domain;

use crate::exits::register_hook_then;
use crate::world::{inc, not_in_child, world, Rng};

/// A thread's hooks on one domain: how many it registered, how many ran.
pub(crate) struct Tally {
    pub(crate) slot: usize,
    pub(crate) registered: u32,
    pub(crate) ran: Arc<AtomicU32>,
    /// Set when the hooks registered so far may run (the thread ended, or
    /// is about to `retire_thread`).
    pub(crate) finished: Arc<AtomicBool>,
}

/// A new tally of hooks on slot `slot`.
pub(crate) fn tally(slot: usize) -> Tally {
    Tally {
        slot,
        registered: 0,
        ran: Arc::new(AtomicU32::new(0)),
        finished: Arc::new(AtomicBool::new(false)),
    }
}

/// Registers a hook on `domain` counted in `t`.
pub(crate) fn hook(domain: &Domain, t: &mut Tally) {
    t.registered += 1;
    let ran = t.ran.clone();
    register_hook_then(domain, &t.finished, move || {
        ran.fetch_add(1, Ordering::Release);
    });
}

/// Counts the hooks of joined threads that had not run: call after an
/// `exit_barrier`, `barrier` or drop that started after the joins.
pub(crate) fn verify(tallies: impl IntoIterator<Item = Tally>) {
    for t in tallies {
        // Acquire: pairs with the hooks' Release.
        if t.ran.load(Ordering::Acquire) < t.registered {
            inc(&world().v.hook_after_barrier);
        }
    }
}

/// Defers a callback that owns a heap payload (1 to 64 words of a
/// pattern): it checks the pattern, then calls `ran`.
pub(crate) fn payload_defer(domain: &Domain, rng: &Rng, ran: impl FnOnce() + Send + 'static) {
    let tag = rng.next();
    let payload: Vec<u64> = (0..1 + rng.below(64)).map(|k| tag ^ k).collect();
    domain.defer(move || {
        not_in_child();
        if (0..).zip(&payload).any(|(k, &v)| v != tag ^ k) {
            inc(&world().v.payload_corrupt);
        }
        ran();
    });
}

/// The exit's timing: at once, after a spin, or after a sleep around the
/// flush latency (the idle steal's age) or up to a millisecond.
pub(crate) fn exit_delay(rng: &Rng) {
    match rng.below(4) {
        0 => {}
        1 => (0..rng.below(3000)).for_each(|_| std::hint::spin_loop()),
        2 => thread::sleep(Duration::from_micros(80 + rng.below(100))),
        _ => thread::sleep(Duration::from_micros(rng.below(1000))),
    }
}
