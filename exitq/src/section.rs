//! Read sections on a record's reader word: entering and leaving.
//!
//! A reader's word (`Record::ctr`) packs the epoch it saw at its outermost
//! entry (48 bits) above its nesting depth (16 bits), like liburcu's `ctr`,
//! so entering and leaving a section are one load and one store each. The
//! read-side fast path is: a load of the domain's epoch word, one store of
//! it into the record, and a fence that is only a compiler fence when the
//! writer side uses membarrier(2) (see [`expedite`](crate::expedite)).
//! Leaving the outermost section is a Release store of the word with its
//! nesting at 0 (idle; the epoch stays, see [`past`](crate::past)). Grace
//! periods read the word: [`grace`](crate::grace).
use crate::expedite::Fences;
use crate::record::NEST_MASK;
use crate::sync::{AtomicU64, Ordering};

/// The ordering of a reader's outermost entry store (the epoch into its
/// word). Release, not Relaxed: a grace period that finds a reader already
/// in a *later* section (its word shows a newer epoch) must also be ordered
/// after the end of the section before, whose accesses to what the grace
/// period frees came first. The Release store of the idle word that ended
/// it heads no release sequence the next plain store continues (C++20), so
/// reading the newer value synchronizes with nothing unless that store is a
/// Release itself. Miri reported the race this closes: a value freed by
/// `RcuCell::replace` after a reader's `check` of it, the reader seen in
/// its next section. On x86 and most targets a Release store is a plain
/// store.
pub(crate) const ENTRY: Ordering = Ordering::Release;

/// The ordering of a nested entry's and exit's stores. Release, not
/// Relaxed, for the same reason as [`ENTRY`]: a scan that reads the word
/// of a reader nested inside a *later* section (its epoch newer than the
/// grace period) takes the earlier sections as ended, and that load
/// synchronizes only with the store it reads. Under C++20 a Relaxed store
/// continues no release sequence, so the earlier section's reads would not
/// happen-before the free; loom reports that race (a scan reading the
/// nested store of the reader's next section) in
/// `a_grace_period_without_the_barrier_completes_only_on_readers_past_it`
/// at a preemption bound of 3. Nesting is rare; on x86 the store is a
/// plain store either way.
pub(crate) const NESTED: Ordering = Ordering::Release;

/// Enters a read section (`Domain::read`). The reader word `ctr` holds the
/// epoch seen at the outermost entry and the nesting depth (as in
/// liburcu), so entering and leaving are one load and one store each.
#[inline(always)]
pub(crate) fn reader_enter(gp_ctr: &AtomicU64, ctr: &AtomicU64, fences: Fences) {
    // Relaxed: only this thread writes its reader word.
    let tmp = ctr.load(Ordering::Relaxed);
    if tmp & NEST_MASK == 0 {
        entry_store(gp_ctr, ctr);
        // Orders the store above before the section's loads: a compiler
        // fence paired with the leader's membarrier, or a full fence paired
        // with the leader's fence (fallback).
        fences.light();
    } else {
        if tmp & NEST_MASK == NEST_MASK {
            nested_too_deep();
        }
        // Release, as every store of the word (`NESTED`).
        ctr.store(tmp + 1, NESTED);
    }
}

/// An outermost entry's store, before its light fence: the current
/// epoch word (nesting 1) into the reader word. Returns it.
#[inline(always)]
pub(crate) fn entry_store(gp_ctr: &AtomicU64, ctr: &AtomicU64) -> u64 {
    // Acquire: pairs with the leader's Release store of the epoch
    // (`start_grace_period`, `publish_epoch`); free on x86. Release (the
    // store): see `ENTRY`.
    let word = gp_ctr.load(Ordering::Acquire);
    ctr.store(word, ENTRY);
    word
}

#[cold]
fn nested_too_deep() -> ! {
    panic!("exitq: read guards nested {NEST_MASK} deep (leaked guards?)")
}

/// Leaves a read section; true if it was the outermost one.
#[inline(always)]
pub(crate) fn reader_exit(ctr: &AtomicU64) -> bool {
    // Relaxed: only this thread writes its reader word.
    let tmp = ctr.load(Ordering::Relaxed);
    if tmp & NEST_MASK == 1 {
        // Idle: nesting 0, the epoch kept (`past.rs`). Release: the
        // section's accesses happen-before a grace period's Acquire load
        // that sees it (`holds_grace_period`, `past::standing`).
        ctr.store(tmp - 1, Ordering::Release);
        true
    } else {
        ctr.store(tmp - 1, NESTED);
        false
    }
}
