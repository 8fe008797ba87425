//! The epoch word and the steps of a grace period made on it, one
//! function each: step 1 and 2 (`start_grace_period`; `publish_epoch`
//! alone for a poll's start, `barrier_after` when the heavy barrier comes
//! after the store), the sealer's and the leader's fence pair around
//! `started` (`snapshot_of`, `claim_started`), and step 4's check of a
//! reader word (`holds_grace_period`). The steps, why one pass is enough
//! and who calls each: [`grace`](crate::grace) and [`past`](crate::past);
//! the loom models call these functions through `model.rs`.
use crate::expedite::Fences;
use crate::record::{NEST_BITS, NEST_MASK};
use crate::sync::{self, AtomicU64, Ordering};

/// The epoch word of grace period `g` (what readers copy): epoch `g + 1`
/// above a nesting count of 1. 48 bits of epoch do not wrap in practice
/// (2^48 grace periods at one per microsecond is 8.9 years; a normal grace
/// period takes at least its 25 µs first-check delay).
#[inline]
pub(crate) const fn epoch_word(g: u64) -> u64 {
    ((g + 1) << NEST_BITS) | 1
}

/// Steps 1 and 2 of grace period `g` (see `grace`'s module docs).
#[inline]
pub(crate) fn start_grace_period(gp_ctr: &AtomicU64, g: u64, fences: Fences) {
    // Step 1: every reader passes a full barrier (pairs with the readers'
    // light fence; see expedite.rs).
    fences.heavy();
    publish_epoch(gp_ctr, g);
}

/// Step 2 of grace period `g` alone (a poll's start in membarrier mode,
/// `past.rs`).
#[inline]
pub(crate) fn publish_epoch(gp_ctr: &AtomicU64, g: u64) {
    // Release: pairs with the readers' Acquire load of the epoch: a reader
    // that sees g + 1 sees every removal ordered before this grace period
    // (by the heavy barrier, or by `claim_started`'s fence).
    gp_ctr.store(epoch_word(g), Ordering::Release);
}

/// The heavy barrier after grace period `g`'s epoch store, which may have
/// been made by another thread (`GracePeriods::ensure_barrier`).
#[inline]
pub(crate) fn barrier_after(gp_ctr: &AtomicU64, g: u64, fences: Fences) {
    // AcqRel read-modify-write of the epoch, which leaves it as it is
    // (`g`'s store is the newest while `g` has not completed): a write of
    // it sequenced before our barrier, so a reader whose entry the barrier
    // orders after it loads `g`'s epoch or a newer one.
    gp_ctr.fetch_max(epoch_word(g), Ordering::AcqRel);
    fences.heavy();
}

/// The grace period a batch sealed now waits for, from the mirror of
/// `started` (`GracePeriods::snapshot`).
#[inline]
pub(crate) fn snapshot_of(started: &AtomicU64) -> u64 {
    // Full fence, then the load: pairs with the fence `claim_started`
    // makes between its store and the epoch's (`grace`'s module docs, and
    // `past.rs`, "The seal and the start"): if ours comes second in the
    // fences' single total order, the load reads the new `started` and we
    // wait for the grace period after; if first, a reader that loads the
    // new epoch (ordered after the leader's fence) cannot read a value
    // older than our removals. Not a read-modify-write of `started`: every
    // producer's seal would bounce its cache line.
    sync::full_fence();
    // Relaxed: ordered by the fence above.
    started.load(Ordering::Relaxed) + 1
}

/// A leader's claim of grace period `g` in the mirror of `started`
/// (`GracePeriods::begin`, under the lock, so the mirror only grows),
/// and the fence between it and the epoch's store.
#[inline]
pub(crate) fn claim_started(started: &AtomicU64, g: u64) {
    // Relaxed: ordered by the fence below.
    started.store(g, Ordering::Relaxed);
    // Full fence: pairs with `snapshot_of`'s.
    sync::full_fence();
}

/// Step 4: whether the reader with word `ctr` still holds grace period `g`
/// (it is inside a section that started before step 2). Trusts a word
/// that shows no section: only after the heavy barrier (`past.rs`).
#[inline]
pub(crate) fn holds_grace_period(ctr: &AtomicU64, g: u64) -> bool {
    // Acquire: pairs with the reader's Release store of its idle word when
    // it leaves its outermost section (`reader_exit`): the section's
    // accesses happen-before whatever the grace period's caller does next.
    let c = ctr.load(Ordering::Acquire);
    c & NEST_MASK != 0 && (c >> NEST_BITS) <= g
}
