//! The steal handshake: how another thread takes a thread's batches
//! without the owner paying for a lock or an atomic read-modify-write.
//!
//! A thread that defers a few callbacks and goes idle must not keep them
//! forever (crossbeam-epoch's weakness), and `barrier` must see every
//! callback deferred before it. So other threads can take a thread's open
//! and sealed batches, with an asymmetric handshake that costs the owner
//! only plain stores:
//!
//! * owner, around every access to its batches (`Record::local`):
//!   `busy = 1`; light fence; if `steal` is set, back off (`busy = 0`,
//!   wait until `steal` clears, retry); otherwise use the batches;
//!   `busy = 0` (Release). [`owner_section`] is that loop around a
//!   closure ([`Record::with_local`](crate::record::Record::with_local)
//!   hands it the batches); `defer`'s fast path spells it out inline.
//! * stealer: `steal = 1` on every candidate; one heavy barrier
//!   (membarrier); for each candidate wait until `busy == 0` (Acquire),
//!   take the batches, `steal = 0` (Release).
//!
//! Store-buffering: either the owner sees `steal` (and keeps out), or the
//! stealer sees `busy` (and waits for the Release of `busy = 0`, after which
//! the owner's batch writes are visible). The owner's Acquire load of
//! `steal` seeing 0 after a steal sees the stealer's writes.
//!
//! # One stealer at a time
//!
//! `steal` is one flag, so two stealers at once (the reclaimer's idle
//! steal and a `barrier`, or shutdown) could both pass the handshake and
//! take the same batch: a callback run twice, a node freed twice. Stealers
//! therefore hold the domain's steal lock from marking to the moment the
//! batches they took are on the domain's queue (`reclaim::steal`), which
//! also means a `barrier` that takes the lock sees every batch an earlier
//! stealer took. The owner never takes that lock.
//!
//! # Every move inside one handshake
//!
//! Work moves between places (the open batch, the sealed queue, the
//! domain's queue, a run in progress) only inside one owner section or one
//! steal: a batch is never "in the hands" of a thread outside both, where
//! `barrier` could miss it. So the owner pushes to the domain's queue
//! (thread exit, [`Callbacks::Offload`](crate::Callbacks::Offload)) and
//! marks a run of its own as in progress (`Record::run_seq`) before it
//! clears `busy`.
//!
//! The loom models in `tests/loom.rs` check these steps with two stealers
//! and an owner.
use crate::expedite::Fences;
use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// Owner side, before touching its batches: true if it may; false if a
/// steal is in progress (then `busy` is cleared again and the owner must
/// [`wait_for_stealer`] and retry).
#[inline(always)]
pub(crate) fn owner_begin(busy: &AtomicBool, steal: &AtomicBool, fences: Fences) -> bool {
    // Relaxed: ordered before the load of `steal` by the light fence
    // (paired with the stealer's heavy barrier).
    busy.store(true, Ordering::Relaxed);
    fences.light();
    // Acquire: pairs with the stealer's Release of `steal = false`
    // (`stealer_done`): its batch writes are visible to us.
    if steal.load(Ordering::Acquire) {
        owner_end(busy);
        return false;
    }
    true
}

/// Owner side: done touching the batches.
#[inline(always)]
pub(crate) fn owner_end(busy: &AtomicBool) {
    // Release: our batch writes happen-before a stealer's Acquire load of
    // `busy == false` (`stealer_wait`).
    busy.store(false, Ordering::Release);
}

/// Owner side: one whole section. Enters (waiting out any stealer and
/// retrying), runs `f` with the batches to itself, and leaves. Every owner
/// access but `defer`'s fast path goes through here; that one calls
/// [`owner_begin`] and [`owner_end`] inline and retries the same way.
#[inline]
pub(crate) fn owner_section<R>(
    busy: &AtomicBool,
    steal: &AtomicBool,
    fences: Fences,
    f: impl FnOnce() -> R,
) -> R {
    while !owner_begin(busy, steal, fences) {
        wait_for_stealer(steal);
    }
    let result = f();
    owner_end(busy);
    result
}

/// Owner side: wait until the stealer is done.
#[cold]
pub(crate) fn wait_for_stealer(steal: &AtomicBool) {
    // Acquire: pairs with `stealer_done`'s Release.
    wait_while_set(steal);
}

/// Spins, then yields, while `flag` is set; each load is Acquire (the
/// callers say what it pairs with).
fn wait_while_set(flag: &AtomicBool) {
    let backoff = crossbeam_utils::Backoff::new();
    while flag.load(Ordering::Acquire) {
        if backoff.is_completed() {
            crate::sync::yield_now();
        } else {
            backoff.snooze();
        }
    }
}

/// Stealer side, for each candidate, before one heavy barrier for all.
#[inline]
pub(crate) fn stealer_mark(steal: &AtomicBool) {
    // Relaxed: ordered before our loads of `busy` by the heavy barrier
    // that follows (the owner's store of `busy` before its load of `steal`
    // by its light fence).
    steal.store(true, Ordering::Relaxed);
}

/// Stealer side, after the heavy barrier: wait until the owner is out.
#[inline]
pub(crate) fn stealer_wait(busy: &AtomicBool) {
    // Acquire: pairs with `owner_end`'s Release: the owner's batch writes
    // are visible to us.
    wait_while_set(busy);
}

/// Stealer side: done with the batches.
#[inline]
pub(crate) fn stealer_done(steal: &AtomicBool) {
    // Release: pairs with `owner_begin`'s Acquire load of `steal`.
    steal.store(false, Ordering::Release);
}

/// Owner side, inside its section: it took work out of its record to run
/// after the section (`run_seq` becomes odd).
#[inline]
pub(crate) fn run_begin(seq: &AtomicU64) {
    // Relaxed: only the owner writes it; a stealer reads it under the
    // handshake (its Acquire load of `busy == 0` pairs with `owner_end`).
    seq.store(seq.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Owner side, after running what it took (`run_seq` even again).
#[inline]
pub(crate) fn run_end(seq: &AtomicU64) {
    // Release: the run's effects happen-before a stealer's Acquire load
    // that sees the new value (`run_wait`).
    seq.store(seq.load(Ordering::Relaxed) + 1, Ordering::Release);
}

/// Stealer side, after winning the handshake: the owner's run in progress,
/// if any (the odd value to wait past).
#[inline]
pub(crate) fn run_seen(seq: &AtomicU64) -> Option<u64> {
    // Acquire: an odd value is ordered by the handshake (see `run_begin`);
    // an even one written by `run_end` (Release) means that run finished,
    // and its effects must be visible to the stealer too.
    let s = seq.load(Ordering::Acquire);
    (s % 2 == 1).then_some(s)
}

/// Stealer side: waits until the run seen as `seen` has finished.
pub(crate) fn run_wait(seq: &AtomicU64, seen: u64) {
    let backoff = crossbeam_utils::Backoff::new();
    // Acquire: pairs with `run_end`'s Release.
    while seq.load(Ordering::Acquire) == seen {
        if backoff.is_completed() {
            #[cfg(not(exitq_loom))]
            std::thread::sleep(std::time::Duration::from_micros(50));
            #[cfg(exitq_loom)]
            crate::sync::yield_now();
        } else {
            backoff.snooze();
        }
    }
}
