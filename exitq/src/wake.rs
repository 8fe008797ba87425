//! The reclaimer's state word (`Inner::sleeping`) and both sides of the
//! handshake on it: the reclaimer publishing that it sleeps, the threads
//! publishing work and deciding whether to ring its doorbell.
//!
//! | value     | meaning | set by | a publisher ([`claim`]) |
//! |-----------|---------|--------|-------------------------|
//! | `AWAKE`   | running its loop | the reclaimer, and a waker's CAS | does nothing |
//! | `POLLING` | asleep with a timeout (it has something to watch: batches held by threads, queued work, armed hooks, recent activity) | the reclaimer, before sleeping | wakes it only for [`Wake::Always`] (a backlog; the first batch held or hook armed; shutdown) |
//! | `PARKED`  | asleep without a timeout (nothing to watch) | the reclaimer, before sleeping | wakes it (CAS to `AWAKE`, then the caller rings the doorbell) |
//!
//! # The handshake
//!
//! The reclaimer looks at what it watches ([`Watch`]: batches held, work
//! queued, hooks armed), publishes `POLLING` or `PARKED` (SeqCst), and
//! looks again ([`fall_asleep`]): a `POLLING` sleep's timeout covers what
//! the second look saw, and a `PARKED` one ends before it starts if the
//! second look saw anything. A publisher changes what it publishes (a
//! SeqCst read-modify-write: the batches held, the hooks armed, a queue
//! push, the grace periods asked for) and then loads the state word
//! ([`claim`], SeqCst). A store-buffering pair: in the single total order
//! of SeqCst operations either the reclaimer's second look comes after the
//! publisher's change, and sees it, or the publisher's load comes after
//! the reclaimer's store, and sees it asleep. So every change is covered
//! by the timeout or rings, as long as the publisher rings for the state
//! it sees: `PARKED` always; `POLLING` when the second look may have
//! missed its change and nothing else it saw covers it (below).
//! `tests/loom_wake.rs` models the reclaimer with one and two publishers,
//! through this code; loom treats SeqCst accesses as AcqRel, so each side
//! makes `sync::sc_pair` (a fence under loom, nothing otherwise) between
//! its two accesses.
//!
//! A `POLLING` reclaimer's timeout covers what it watched when it fell
//! asleep: at most `look::DRIVEN` while batches are held (their
//! grace-period requests do not wake it), `exit_poll` while hooks are
//! armed (exits cannot wake it), the pass gap while work is queued. What
//! it did not watch, its timeout does not cover (it may be the rest of an
//! idle window of two flush latencies): the first batch held and the
//! first hook armed therefore wake it whatever it sleeps (2026-12-06:
//! before, only a `PARKED` one was woken for them, and under a flush
//! latency of an hour a batch's grace period and a hook's pass waited that
//! long; `tests/domain.rs`). For the same reason the timeout is made from
//! the second look, not the first (which chose the state), nor from
//! relaxed loads after it.
//!
//! What `Wake::IfParked` is left for is covered by something the
//! publisher's own state implies: a grace period asked for by a thread
//! that holds batches (held, so `look::DRIVEN`), a batch an offloading
//! thread seals (it counts as held until it is on the queue, so a look
//! finds it held or queued: `local::seal`).
use crate::sync::{self, AtomicU32, Ordering};

/// Reclaimer state: running.
pub(crate) const AWAKE: u32 = 0;
/// Reclaimer state: asleep with a timeout.
pub(crate) const POLLING: u32 = 1;
/// Reclaimer state: asleep without a timeout; only a wake-up brings it
/// back.
pub(crate) const PARKED: u32 = 2;

/// Which sleeping reclaimer a publisher wakes (module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Wake {
    /// Only a `PARKED` one: the work is of a kind a `POLLING` one watches
    /// (a grace period asked for by a thread holding batches, a batch
    /// queued while others are), so its timeout covers it.
    IfParked,
    /// A `POLLING` one too: a backlog to take at once, a shutdown, or the
    /// first thing of a kind it may not have watched when it fell asleep
    /// (the first batch held, the first hook armed).
    Always,
}

/// How the first of something a polling reclaimer may not have watched
/// (the first batch held, the first hook armed, a batch queued by a thread
/// that holds none) wakes it.
pub const FIRST: Wake = Wake::Always;

impl Wake {
    /// `Always` for a backlog, else `IfParked`.
    pub(crate) fn backlog(urgent: bool) -> Wake {
        if urgent {
            Wake::Always
        } else {
            Wake::IfParked
        }
    }
}

/// The publisher's side, after it changed what it publishes (SeqCst):
/// true if it took a sleeping reclaimer's wake-up upon itself (the state
/// word is then `AWAKE` and the caller must ring the doorbell).
#[inline]
pub(crate) fn claim(sleeping: &AtomicU32, wake: Wake) -> bool {
    sync::sc_pair();
    // SeqCst: the publisher's load of the store-buffering pair (module
    // docs).
    let state = sleeping.load(Ordering::SeqCst);
    (state == PARKED || (wake == Wake::Always && state == POLLING))
        && sleeping
            .compare_exchange(state, AWAKE, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
}

/// What the reclaimer watches, as one look saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    /// Threads hold batches (`Inner::held`).
    pub held: bool,
    /// Work is queued on the domain (`Inner::queue`).
    pub queued: bool,
    /// Exit hooks are armed and `exit_poll` is set (`Inner::armed_exits`).
    pub armed: bool,
}

impl Watch {
    /// Anything to watch.
    pub fn any(self) -> bool {
        self.held || self.queued || self.armed
    }
}

/// How the reclaimer falls asleep ([`fall_asleep`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asleep {
    /// It published `PARKED` and its second look found something: it must
    /// not sleep without a timeout; it runs its loop again.
    LookAgain,
    /// `POLLING`, its timeout to cover what the second look saw (the rest
    /// rings: module docs).
    Polling(Watch),
    /// `PARKED`, nothing to watch: any work rings.
    Parked,
}

/// The reclaimer's side of the handshake: a first look (what it watches)
/// chooses the state (`POLLING` if anything, or if it was busy lately
/// (`recent`), else `PARKED`), the state is published, and a second look
/// after it decides. `look` makes SeqCst loads.
#[inline]
pub(crate) fn fall_asleep(sleeping: &AtomicU32, recent: bool, look: impl Fn() -> Watch) -> Asleep {
    let first = look();
    let state = if recent || first.any() {
        POLLING
    } else {
        PARKED
    };
    // SeqCst: the reclaimer's store of the store-buffering pair (module
    // docs).
    sleeping.store(state, Ordering::SeqCst);
    sync::sc_pair();
    let second = look();
    match (state, second.any()) {
        (PARKED, true) => Asleep::LookAgain,
        (PARKED, false) => Asleep::Parked,
        _ => Asleep::Polling(second),
    }
}

/// Back to `AWAKE` after a sleep.
#[inline]
pub(crate) fn awake(sleeping: &AtomicU32) {
    // SeqCst: in the same total order as the pair, so a publisher that
    // loads `AWAKE` does not ring while our loop is about to see its work
    // anyway.
    sleeping.store(AWAKE, Ordering::SeqCst);
}
