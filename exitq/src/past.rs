//! Grace periods completed without the heavy barrier: a record whose word
//! shows that its owner has already loaded the new epoch.
//!
//! A grace period `g` started by a thread's poll ([`GracePeriods::poll`])
//! stores the epoch with no heavy barrier (membarrier mode; in fence mode
//! the heavy barrier is a plain fence and comes first, as before). Each
//! membarrier(2) interrupts every CPU running one of the process's
//! threads (a VM exit per CPU here), and where producers keep entering
//! sections, each section entered after the store says by itself that its
//! owner is past the grace period. A poll then classifies each record
//! ([`standing`]):
//!
//! * **Past**: its word shows an epoch greater than `g`, whatever its
//!   nesting (a section, or an idle word that keeps the last epoch its
//!   owner loaded, below). The owner loaded that epoch, which `g`'s
//!   leader stored (Release) after ordering every removal `g` waits for
//!   before its store ("The seal and the start", below): the owner's
//!   Acquire load saw it, so what it reads from then on sees those
//!   removals; and every later load of the epoch by the owner returns it
//!   or a newer one (read-read coherence), so no later section on the
//!   record shows an epoch `<= g`. What the owner did before is ordered
//!   by the store we read, a Release (an entry, `section::ENTRY`; an exit;
//!   a refresh): its earlier sections happen-before our Acquire load.
//!   If the record changes hands, the next owner's claim reads the
//!   previous owner's Release of the record, so its own loads of the
//!   epoch are ordered after the one that showed it.
//! * **Held**: a section shows an epoch `<= g`: it started before `g`.
//! * **Unsure**: no section, and no epoch greater than `g`. The owner may
//!   have loaded the old epoch and be entering a section whose store is
//!   still in its CPU's store buffer (a membarrier-mode reader's only
//!   barrier is a compiler fence): only the heavy barrier answers that.
//!   A `FREE` record is settled without it, and counts as past: its next
//!   claim makes a full fence before its owner loads the epoch; if that
//!   fence follows our scan fence, the owner loads the new epoch; if it
//!   precedes it, we read the claim, not `FREE` (a record pushed onto the
//!   registry after our scan is the same case). So that fewer records are
//!   unsure, owners make their idle words show a recent epoch
//!   ([`refresh_idle`], below) or show themselves offline ([`OFFLINE`]).
//!
//! A poll completes `g` when every record is past. While some record is
//! unsure the poll leaves the grace period to a later poll; after
//! `UNSURE_POLLS` such polls, or when a `synchronize` caller adopts the
//! grace period, the heavy barrier comes after the epoch's store
//! ([`GracePeriods::ensure_barrier`]; liburcu's urcu-memb issues its
//! barrier between the epoch's flip and the scan too), and every later
//! scan trusts an idle word as before: an entry whose store the barrier
//! did not make visible comes after the barrier in its owner's program
//! order, so it loaded the new epoch.
//!
//! A registered thread that stays idle without going offline (blocked
//! after using the domain, a `Reader` kept idle) keeps an old idle word: every grace period would wait `UNSURE_POLLS` polls for
//! it and then make the barrier anyway. So a record that showed the same
//! idle word through all the polls that made a grace period need it (the
//! first one found unsure, still unchanged at the last) is remembered, a
//! [`Blocker`]; while it still shows that word, polls start grace periods
//! with the barrier first, as `synchronize` does, and once a grace period
//! completes without one, the next starts without. A producer found
//! between two sections at one poll has moved on by the last, and
//! blocks nothing.
//!
//! # Idle words keep their epoch
//!
//! For a record between sections to say "past" rather than "unsure", its
//! word keeps the epoch of the last section when the section ends (the
//! nesting count drops to 0, the epoch bits stay), and a thread that seals
//! a batch refreshes the idle word of the record it seals on with the
//! epoch it loads now ([`refresh_idle`]): a thread that defers under a
//! [`Reader`](crate::Reader) never enters a section on its main record,
//! whose word would otherwise stay unsure forever. A word is outside any
//! section when its nesting count is 0 (`NEST_MASK`), whatever its epoch.
//!
//! # Offline
//!
//! A thread about to block for a while with no section open (the
//! reclaimer thread before it sleeps: callbacks that defer give it a
//! record; a `QsbrReader` inside its `offline`) shows itself offline
//! instead ([`offline`], [`OFFLINE`]; [`offline_reader`]): every scan finds
//! it past. Going back online stores an idle word and
//! makes a full fence before the thread's next load of the epoch
//! ([`online`]), so a scan that read `OFFLINE` after its own scan fence
//! is followed by that fence (the thread then loads the new epoch), or
//! preceded by it (the scan then reads the new word, not `OFFLINE`): the
//! argument of a free record's claim, as liburcu-qsbr's
//! `rcu_thread_offline`/`rcu_thread_online`. The torture's `polled`
//! domain found it: its callbacks defer, and the reclaimer thread's
//! record, idle between its passes, made every grace period need the
//! barrier once it existed.
//!
//! Any thread may go offline the same way before it blocks
//! (`exitq::thread_offline`, `Domain::thread_offline`; an `exitq::pool`
//! worker before it parks; `Reader::offline`), and that way back comes
//! lazily for a thread's main records: going offline empties the thread's
//! record cache, and the only paths that fill it again are a new claim
//! (its own full fence, above) and `thread::existing_main`, which calls
//! [`online`] first. Every entry into a section on a main record, and every
//! `defer` into one, takes the record from that cache or from those
//! paths, so [`online`]'s fence comes before the owner's next load of the
//! epoch whichever of its uses comes first; and no other store replaces
//! `OFFLINE` on the way ([`refresh_idle`] leaves it: a callback that a
//! seal runs may have gone offline, and the refresh comes after the
//! callbacks). A record inside a section keeps its word ([`offline`]
//! skips it). A reader's own record has a fast path that takes no such
//! turn; `Reader::offline(f)` goes back online when `f` ends, as a
//! `QsbrReader`'s.
//!
//! # The seal and the start
//!
//! A batch sealed while `g` starts must either wait for `g + 1`, or have
//! its removals ordered before `g`'s epoch store. The heavy barrier did
//! that before (`grace.rs`, "The snapshot is safe without the lock");
//! without it, the leader makes a full fence between its claim of `g` in
//! `started` and the epoch's store, pairing with the fence the sealer
//! makes between its removals and its load of `started`. The two fences
//! are totally ordered: if the leader's comes first, the sealer's load
//! reads the new `started` and it waits for the next grace period; if the
//! sealer's comes first, a reader ordered after the leader's fence (it
//! loaded the new epoch) cannot read a value older than the sealer's
//! removals (C++20's rule for seq_cst fences ordered by happens-before).
//! Read-modify-writes of `started` by both would do too, and were the
//! first version: every seal then took the line from the other
//! producers.
//!
//! Loom models (`tests/loom.rs`): a reader whose entry has no fence seen
//! in a later section, a seal racing a start, a claim racing a scan, an
//! idle record refreshed, a thread going offline and back online.
//!
//! [`GracePeriods::poll`]: crate::grace::GracePeriods::poll
//! [`GracePeriods::ensure_barrier`]: crate::grace::GracePeriods::ensure_barrier
use crate::record::{Record, Registry, NEST_BITS, NEST_MASK};
use crate::sync::{AtomicU64, Ordering};

/// Where a record stands against grace period `g` (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Standing {
    /// Its owner has loaded an epoch newer than `g`'s start, or the record
    /// is free.
    Past = 0,
    /// Outside any section, as far as the load shows.
    Unsure = 1,
    /// Inside a section that started before `g`.
    Held = 2,
}

/// Where record `r` stands against grace period `g`, and the word it
/// showed.
#[inline]
pub(crate) fn standing(r: &Record, g: u64) -> (Standing, u64) {
    let (standing, word) = standing_word(&r.ctr, g);
    match standing {
        Standing::Unsure if r.is_free() => (Standing::Past, word),
        s => (s, word),
    }
}

/// Where a record with reader word `ctr` stands against `g`, by the word
/// alone (an `IN_USE` record), and the word.
#[inline]
pub(crate) fn standing_word(ctr: &AtomicU64, g: u64) -> (Standing, u64) {
    // Acquire: pairs with the owner's Release stores of its word (an
    // entry, an exit, a refresh): what it did before happens-before what
    // the grace period's caller does next.
    let c = ctr.load(Ordering::Acquire);
    let standing = if (c >> NEST_BITS) > g {
        Standing::Past
    } else if c & NEST_MASK != 0 {
        Standing::Held
    } else {
        Standing::Unsure
    };
    (standing, c)
}

/// What a scan of the registry found (see [`scan`]).
pub(crate) enum Scan<'r> {
    /// Every record is past.
    Past,
    /// None holds the grace period, but this record (the first found)
    /// showed this idle word.
    Unsure(&'r Record, u64),
    /// A record holds it.
    Held,
}

/// The registry's records against `g`, stopping at the first that holds
/// it. `barriered`: the heavy barrier came after `g`'s epoch store (and
/// the caller's scan fence after that), so an unsure record is past.
pub(crate) fn scan(registry: &Registry, g: u64, barriered: bool) -> Scan<'_> {
    let mut found = Scan::Past;
    for r in registry.iter() {
        match standing(r, g) {
            (Standing::Held, _) => return Scan::Held,
            (Standing::Unsure, word) if !barriered && matches!(found, Scan::Past) => {
                found = Scan::Unsure(r, word)
            }
            _ => {}
        }
    }
    found
}

/// A record that made the last grace period need the heavy barrier (its
/// address and the word it showed): a hint for the next start.
pub(crate) type Blocker = (usize, u64);

/// Whether the blocker still shows the same word: its owner is still idle
/// (an idle registered thread, most likely), so a grace period started
/// now would need the barrier too, 4 polls later. A hint: either answer
/// is safe.
pub(crate) fn still_blocks(registry: &Registry, (addr, word): Blocker) -> bool {
    registry
        .iter()
        .find(|r| std::ptr::addr_eq(*r, addr as *const Record))
        // Relaxed: a hint.
        .is_some_and(|r| r.ctr.load(Ordering::Relaxed) == word)
}

/// The blocker of an unsure scan.
pub(crate) fn blocker(r: &Record, word: u64) -> Blocker {
    (r as *const Record as usize, word)
}
/// A reader word that shows its owner offline: no section (nesting 0) and
/// an epoch above every grace period's, so every scan finds it past
/// ([`standing_word`]) and no wait holds on it ([`holds_grace_period`]).
/// Its owner makes a full fence between leaving it and its next load of
/// the epoch ([`online`]).
///
/// [`holds_grace_period`]: crate::epoch::holds_grace_period
pub(crate) const OFFLINE: u64 = !NEST_MASK;

/// The owner of a record goes offline, if it is outside any section on it
/// (a thread about to block for a while: the reclaimer before it sleeps,
/// `thread_offline`, `Reader::offline`).
/// A grace period then needs no heavy barrier on its account.
#[inline]
pub(crate) fn offline(ctr: &AtomicU64) {
    // Relaxed: only this thread writes its reader word.
    if ctr.load(Ordering::Relaxed) & NEST_MASK == 0 {
        // Release: the sections that ended before happen-before a scan's
        // Acquire load that reads this.
        ctr.store(OFFLINE, Ordering::Release);
    }
}

/// A reader's own record goes offline (`QsbrReader::offline`,
/// `Reader::offline`), whatever its word shows: no guard of the reader is
/// alive (`&mut self`), so a section the word still shows (a QSBR reader's
/// online word, a forgotten guard's section) ends here, as at the
/// reader's next entry.
#[inline]
pub(crate) fn offline_reader(ctr: &AtomicU64) {
    // Release: as a section's exit (`section::reader_exit`): what the
    // reader read before happens-before a scan's Acquire load that reads
    // `OFFLINE` (`epoch::holds_grace_period`, [`standing`]).
    ctr.store(OFFLINE, Ordering::Release);
}

/// Back online after [`offline`]: the word shows an idle epoch again, then
/// a full fence before the owner's next load of the epoch (liburcu-qsbr's
/// `rcu_thread_online`). A scan that read `OFFLINE` made its scan fence
/// after the epoch's store: if our fence comes after that one in the
/// fences' single total order, our next load of the epoch reads the new
/// one; if before, the scan reads the store below (or a later one), not
/// `OFFLINE`.
#[inline]
pub(crate) fn online(gp_ctr: &AtomicU64, ctr: &AtomicU64) {
    // Relaxed: only this thread writes its reader word.
    if ctr.load(Ordering::Relaxed) == OFFLINE {
        // Relaxed (both): ordered by the fence below; the word claims
        // only that we loaded this epoch (an idle word, as an exit's).
        ctr.store(gp_ctr.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        crate::sync::full_fence();
    }
}

/// The owner of a record, outside any section on it (at a seal): its idle
/// word shows the epoch it loads now, so grace periods started before see
/// the record past without the heavy barrier. An `OFFLINE` word stays: the
/// owner went offline (`thread_offline` from a callback the seal ran, say)
/// and comes back through [`online`], whose full fence must not be
/// skipped (a scan may have read `OFFLINE`, and this store orders nothing
/// before the owner's next loads: the loom model
/// `a_thread_back_online_loads_the_new_epoch` finds the freed object read
/// without this check).
#[inline]
pub(crate) fn refresh_idle(gp_ctr: &AtomicU64, ctr: &AtomicU64) {
    // Relaxed: only this thread writes its reader word.
    let c = ctr.load(Ordering::Relaxed);
    if c & NEST_MASK == 0 && c != OFFLINE {
        // Relaxed: the claim is only that this thread has loaded this
        // epoch (its later loads return it or a newer one); nothing is
        // read under it. An epoch word has nesting 1: minus 1 is idle.
        let idle = gp_ctr.load(Ordering::Relaxed) - 1;
        if idle != c {
            // Release: the sections that ended before happen-before a
            // scan's Acquire load that reads this (a later plain store
            // continues no release sequence).
            ctr.store(idle, Ordering::Release);
        }
    }
}
