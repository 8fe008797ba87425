//! The steal handshake: how another thread takes a thread's batches
//! without the owner paying for a lock or an atomic read-modify-write.
//!
//! A thread that defers a few callbacks and goes idle must not keep them
//! forever (crossbeam-epoch's weakness), and `barrier` must see every
//! callback deferred before it. So other threads can take a thread's open,
//! sealed and ready batches, with an asymmetric handshake that costs the
//! owner only plain stores:
//!
//! * owner, around every access to its batches (`Record::local`):
//!   `busy = 1`; light fence; if `steal` is set, back off (`busy = 0`,
//!   wait until `steal` clears, retry); otherwise use the batches;
//!   `busy = 0` (Release). [`owner_section`] is that loop around a
//!   closure ([`Record::with_local`](crate::record::Record::with_local)
//!   hands it the batches); `defer`'s fast path spells it out inline.
//! * stealer: `steal = 1` on every candidate; one heavy barrier
//!   (membarrier); for each candidate wait until `busy == 0` (Acquire),
//!   take the batches, clear `steal` (a Release CAS, which may find that
//!   the owner handed its exit over meanwhile: below, "An owner's exit is
//!   handed off").
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
//! Work moves between places (the open batch, the sealed queue, the ready
//! queue, the domain's queue, a run in progress) only inside one owner
//! section or one steal (a hand-off's work stays in the record until the
//! steal moves it): a batch is never "in the hands" of a thread outside
//! both, where `barrier` could miss it. So the owner pushes to the domain's
//! queue (thread exit, [`Callbacks::Offload`](crate::Callbacks::Offload))
//! and marks a run of its own as in progress (`Record::run_seq`) before it
//! clears `busy`.
//!
//! The loom models in `tests/loom.rs` check these steps with two stealers
//! and an owner.
//!
//! # An owner's exit is handed off, not waited for
//!
//! Anywhere else an owner that finds `steal` set waits for the stealer
//! (it moves a few pointers, but it may first wait for a heavy barrier
//! and for other owners). The thread-exit path must not wait (no lock,
//! no syscall: a wait ends in `sched_yield`s), so an exiting owner that
//! finds `steal` set leaves its exit to the stealer instead:
//!
//! * owner ([`owner_hand_off`]): its exit hooks go into the record's
//!   `handed` slot, then one CAS `STEAL → STEAL | LEFT` (`| RELEASE` if no
//!   guard of the thread still holds the record), and the exit path
//!   returns: the record is no longer the thread's to touch (but for a
//!   kept record's guard, which only releases it, below). The CAS fails
//!   only if the stealer finished meanwhile (`steal` is 0): the owner
//!   takes its hooks back and enters as usual.
//! * stealer ([`stealer_done`]): a CAS `STEAL → 0` that fails on `LEFT`
//!   tells it the owner left; it then takes what it had not taken yet
//!   (every batch, whatever kind of steal it is) and the `handed` hooks,
//!   clears `steal` ([`stealer_finish`]), pushes it all onto the domain's
//!   queue, and, with `RELEASE`, hands the record back, all still under
//!   the steal lock (`reclaim::steal`, `exit::finish_hand_off`).
//!
//! `LEFT` is set once per life (a thread exits once). A record with
//! `LEFT` set is never handed back until the stealer cleared it: with
//! `RELEASE` the stealer is the releaser; without, the guard that kept
//! the record waits for the clear before its release, and a grace period
//! that would release a leaked one leaves it for a later scan
//! ([`hand_off_pending`]). So the `handed` slot is written by an owner
//! only when no stealer is reading it: a later life's owner exists only
//! after the release. What `barrier` relies on holds: the work is in the
//! record until a stealer that holds the steal lock moves it to the
//! queue; `exit_barrier` takes the steal lock once, so that a hand-off of
//! a thread that exited before the call is on the queue when it passes.
use crate::expedite::Fences;
use crate::sync::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// `steal`: a stealer holds or wants the record's batches.
pub(crate) const STEAL: u8 = 1;
/// `steal`, with `STEAL`: the owner exited meanwhile and left its exit to
/// the stealer (module docs).
pub(crate) const LEFT: u8 = 2;
/// `steal`, with `LEFT`: the stealer also hands the record back (no guard
/// of the owner thread holds it).
pub(crate) const RELEASE: u8 = 4;

/// Owner side, before touching its batches: true if it may; false if a
/// steal is in progress (then `busy` is cleared again and the owner must
/// [`wait_for_stealer`] and retry).
#[inline(always)]
pub(crate) fn owner_begin(busy: &AtomicBool, steal: &AtomicU8, fences: Fences) -> bool {
    // Relaxed: ordered before the load of `steal` by the light fence
    // (paired with the stealer's heavy barrier).
    busy.store(true, Ordering::Relaxed);
    fences.light();
    // Acquire: pairs with the stealer's Release of `steal = 0`
    // (`stealer_done`, `stealer_finish`): its batch writes are visible to
    // us.
    if steal.load(Ordering::Acquire) != 0 {
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
    steal: &AtomicU8,
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
pub(crate) fn wait_for_stealer(steal: &AtomicU8) {
    // Acquire: pairs with `stealer_done`'s and `stealer_finish`'s Release.
    wait_until(|| steal.load(Ordering::Acquire) == 0);
}

/// Owner side, at thread exit, after [`owner_begin`] refused: leaves the
/// exit to the stealer (module docs). The caller has put its hooks into
/// the record's `handed` slot; `release` says whether the stealer hands
/// the record back too. True if handed off: the caller returns without
/// touching the record's batches or `handed` again. False if the stealer
/// finished meanwhile: the caller takes its hooks back and enters.
#[inline]
pub(crate) fn owner_hand_off(steal: &AtomicU8, release: bool) -> bool {
    let left = STEAL | LEFT | if release { RELEASE } else { 0 };
    // Release on success: the `handed` hooks (and the owner's last
    // writes) happen-before the stealer's Acquire in `stealer_done`.
    // Acquire on failure: the stealer's Release of `steal = 0`
    // (`stealer_done`): its batch writes are visible to our retry.
    steal
        .compare_exchange(STEAL, left, Ordering::Release, Ordering::Acquire)
        .is_ok()
}

/// Whether a hand-off of the record's current life is still being
/// finished (`LEFT` set): the record must not be handed back yet.
#[inline]
pub(crate) fn hand_off_pending(steal: &AtomicU8) -> bool {
    // Acquire: pairs with `stealer_finish`'s Release: once clear, the
    // stealer's writes to the batches happen-before the release that
    // follows, and so before the next claimant's.
    steal.load(Ordering::Acquire) & LEFT != 0
}

/// A record kept for a guard at a hand-off: its release waits until the
/// stealer has finished the hand-off (it moves a few pointers under the
/// steal lock). Not the exit path: a later destructor's guard drop.
#[cold]
pub(crate) fn wait_hand_off(steal: &AtomicU8) {
    wait_until(|| !hand_off_pending(steal));
}

/// Spins, then yields, until `done()`; its loads are Acquire (the callers
/// say what they pair with).
fn wait_until(done: impl Fn() -> bool) {
    let backoff = crossbeam_utils::Backoff::new();
    while !done() {
        if backoff.is_completed() {
            crate::sync::yield_now();
        } else {
            backoff.snooze();
        }
    }
}

/// Stealer side, for each candidate, before one heavy barrier for all.
#[inline]
pub(crate) fn stealer_mark(steal: &AtomicU8) {
    // Relaxed: ordered before our loads of `busy` by the heavy barrier
    // that follows (the owner's store of `busy` before its load of `steal`
    // by its light fence). Only stealers mark here (one at a time: the
    // steal lock), and only once the last one cleared the word; the other
    // writer, an exiting owner's CAS (`owner_hand_off`), succeeds only
    // while `STEAL` is set, so it never races with this store.
    steal.store(STEAL, Ordering::Relaxed);
}

/// Stealer side, after the heavy barrier: wait until the owner is out.
#[inline]
pub(crate) fn stealer_wait(busy: &AtomicBool) {
    // Acquire: pairs with `owner_end`'s Release: the owner's batch writes
    // are visible to us.
    wait_until(|| !busy.load(Ordering::Acquire));
}

/// What the owner did while a stealer held its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Done {
    /// Nothing the stealer must finish: `steal` is clear again.
    Cleared,
    /// The owner exited and left its exit to the stealer, which takes
    /// every batch and the `handed` hooks, then calls [`stealer_finish`]
    /// (and, with `release`, hands the record back).
    Left { release: bool },
}

/// Stealer side: done with the batches, unless the owner left its exit
/// to us meanwhile.
#[inline]
pub(crate) fn stealer_done(steal: &AtomicU8) -> Done {
    // Release on success: pairs with `owner_begin`'s Acquire load of
    // `steal` (and `owner_hand_off`'s failure). Acquire on failure: pairs
    // with `owner_hand_off`'s Release: the `handed` hooks are visible.
    match steal.compare_exchange(STEAL, 0, Ordering::Release, Ordering::Acquire) {
        Ok(_) => Done::Cleared,
        Err(word) => {
            debug_assert_eq!(word & (STEAL | LEFT), STEAL | LEFT, "steal {word}");
            Done::Left {
                release: word & RELEASE != 0,
            }
        }
    }
}

/// Stealer side, after [`Done::Left`]: the batches and the `handed` hooks
/// are taken; clears `steal`.
#[inline]
pub(crate) fn stealer_finish(steal: &AtomicU8) {
    // Release: pairs with the Acquire loads of a later owner of the record
    // (`owner_begin`; `hand_off_pending` before a kept record's release):
    // our writes to the batches and the slot happen-before their use.
    steal.store(0, Ordering::Release);
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
