//! Grace periods: the global epoch, `synchronize`, the producers' polls.
//! Readers enter and leave sections by [`section`](crate::section).
//!
//! # Grace periods
//!
//! The epoch is a counter, not liburcu's one-bit parity, so a single pass
//! over the registry completes a grace period where urcu-memb needs two
//! parity flips and two waits (48 bits do not wrap in practice, see
//! [`epoch_word`]). Grace period number `g`:
//!
//! 1. heavy barrier (membarrier, or a full fence in fallback mode);
//! 2. store `g + 1` into the epoch (Release);
//! 3. for a normal grace period, sleep `first_check_delay` (a nanosleep,
//!    not a futex wait: an expedited caller that arrives meanwhile checks
//!    the readers itself instead of waking the leader);
//! 4. for every record, wait until its word shows no section (nesting 0)
//!    or an epoch greater than `g` (its section started after step 2).
//!
//! Why one pass is enough: a reader whose section still shows an epoch
//! `<= g` started before step 2 and is waited for; a reader showing `> g`
//! loaded the epoch after step 2, so (by the heavy barrier of step 1 paired
//! with the reader's fence) it also sees every removal made before the grace
//! period started; a reader showing no section that enters later with a
//! stale epoch is ordered the same way by the barrier of step 1. The
//! Acquire load in step 4 pairs with the reader's Release stores of its
//! word, so a section that ended happens-before the grace period completes.
//!
//! That is how a `synchronize` caller runs a grace period. One started by
//! a thread's poll ([`GracePeriods::poll`]), in membarrier mode, skips
//! step 1: it completes when every record shows its owner past the
//! epoch's store, and makes the heavy barrier after the store only when a
//! record cannot show that (the proof, and why the nested stores are
//! Release: [`past`]).
//!
//! # Sharing, and waiting without a lock
//!
//! Callers agree through a small mutex-protected state (writers only;
//! readers never touch it): `started`/`completed` counters. A caller of
//! `synchronize` targets `started + 1`; if no grace period is running it
//! becomes the leader and runs it, otherwise it waits on a condition
//! variable, so any number of concurrent callers share at most two grace
//! periods.
//!
//! Deferred callbacks need the same answer without the lock: a batch
//! sealed now needs grace period [`GracePeriods::snapshot`] (`started + 1`,
//! read after a full fence), and it may run once
//! [`GracePeriods::is_done`] says that grace period completed (one Acquire
//! load of a mirror of `completed`, paired with the leader's Release store
//! of it after step 4). The snapshot is safe without the lock: it is a
//! full fence and a load of the mirror of `started`, and the leader makes
//! a full fence between storing its number there and storing the epoch.
//! If the leader's fence comes first (in the fences' single total order)
//! we read its number and wait for the grace period after; otherwise a
//! reader that loads the new epoch cannot read a value older than what we
//! did before sealing (the removals), with or without a heavy barrier
//! (`past.rs`, "The seal and the start"); before grace periods without
//! the barrier, the leader's heavy barrier played its fence's part.
//! [`GracePeriods::request`] tells the reclaimer someone waits for a
//! grace period.
//!
//! # Stalls
//!
//! While waiting in step 4, a record that holds the grace period for
//! longer than `stall_timeout` is reported once per grace period: the
//! `stalls` counter is incremented and the stall handler (default: one line
//! on stderr naming the thread) is called. Waiting continues: a grace
//! period is never cut short.
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::backoff::{nap, WaitBackoff};
use crate::cancel::NoCancel;
use crate::config::{HeldBy, Stall, StallHandler};
use crate::epoch::{
    barrier_after, claim_started, epoch_word, holds_grace_period, publish_epoch, snapshot_of,
    start_grace_period,
};
use crate::expedite::Fences;
use crate::look::{Look, Seen};
use crate::past::{self, Scan};
use crate::record::{Kind, Record, Registry};
use crate::stats::Counters;
use crate::stuck;
use crate::sync::{self, AtomicBool, AtomicU64, Ordering};

/// Polls (seals) that find no grace period running, while one is asked
/// for, before a poll starts the next: one heavy barrier then serves the
/// batches of that many seals. With 2 producers on 2 CPUs each membarrier
/// IPIs the other CPU (a VM exit here): at 2 idle polls the IPIs took 15%
/// of `defer_free`'s time (4,198 grace periods for 15,625 batches); at 8,
/// about 1,600 grace periods. Once the drain prefetched the callbacks'
/// memory (`prefetch.rs`), cold batches cost less than the barriers: at
/// 16, about 800 grace periods and 3-5% less time per operation at 2
/// threads (32: 460 grace periods, no faster; 2026-12-03), the batches in
/// flight (about 17 per grace period per thread, 1 MB) still within the
/// L2 and L3 caches.
const IDLE_POLLS: u32 = 16;

/// Polls that find a grace period started without the heavy barrier
/// held by no section but not yet shown past by every record (`past.rs`)
/// before a poll makes the barrier after all: a thread that never seals
/// (an idle registered thread that did not go offline) never shows the new
/// epoch (and then the next grace periods start with the barrier first:
/// `past::Blocker`). At 4, a 2-thread `defer_free` run made a heavy
/// barrier for 2 of 264 grace periods (2026-12-04).
const UNSURE_POLLS: u32 = 4;

/// Read-mostly words every reader touches: kept on their own cache line.
pub(crate) struct Hot {
    /// The epoch word readers copy on entry ([`epoch_word`]).
    pub(crate) gp_ctr: AtomicU64,
    pub(crate) fences: Fences,
    /// A reader word's nesting bits outside any section (0), compared with
    /// the word's `NEST_MASK` bits, when an outermost entry needs only a
    /// compiler fence (membarrier mode); in fence mode a value those bits
    /// never hold (`u64::MAX`). One comparison then finds "outermost entry,
    /// and the fast kind", and everything else takes
    /// [`reader_enter`](crate::section::reader_enter).
    pub(crate) fast_idle: u64,
}

/// The grace-period state shared by writers (readers never touch it).
///
/// | `started` vs `completed` | `published` | `leading` | meaning |
/// |---|---|---|---|
/// | equal | - | false | idle: the next caller starts grace period `started + 1` |
/// | `started = completed + 1` | false | any | steps 1-2 of `started` in progress (its starter publishes it) |
/// | `started = completed + 1` | true | true | a leader waits for the readers (steps 3-4) |
/// | `started = completed + 1` | true | false | published and unled (started by [`GracePeriods::poll`]): a `synchronize` caller adopts it; any poll may complete it |
///
/// Whoever finds every reader past grace period `g` completes it
/// (`completed = g`, under the lock, once): the leader at the end of its
/// wait, or a poll that finds the readers done first (the leader then
/// stops waiting).
struct GpState {
    started: u64,
    completed: u64,
    /// Steps 1-2 of grace period `started` are done: readers may be
    /// checked against it.
    published: bool,
    /// A thread is waiting for the readers of grace period `started`.
    leading: bool,
    /// When `completed` completed (the reclaimer steps in when none did
    /// for a while and nobody polls: `stalled`).
    completed_at: Instant,
    /// Polls that got the lock, ever (the reclaimer leaves grace periods
    /// to threads that poll: `stalled`).
    polls: u64,
    /// Polls that found no grace period running while one was asked for,
    /// since the last one started: a poll starts one at the `IDLE_POLLS`th
    /// (so one heavy barrier serves the batches of a few seals).
    idle_polls: u32,
    /// An expedited caller is waiting: the next leader skips its delay.
    expedite: bool,
    /// The heavy barrier of grace period `started` is done.
    barriered: bool,
    /// Polls that found grace period `started` unsure (`past.rs`).
    unsure_polls: u32,
    /// Someone is making the heavy barrier after `started`'s epoch store.
    barriering: bool,
    /// The first record a poll found unsure for grace period `started`,
    /// and the word it showed.
    unsure_first: Option<past::Blocker>,
    /// A record that showed one idle word through all the polls that made
    /// the last grace period a poll started need the heavy barrier after
    /// all (`past.rs`): while it shows that word, polls start grace
    /// periods with the barrier first, as a `synchronize` does.
    blocker: Option<past::Blocker>,
    /// Threads blocked on `cv` (callers waiting for a grace period to be
    /// published or completed): without any, publishing and completing
    /// skip the futex wake.
    waiters: usize,
}

/// The grace-period machinery of one domain.
pub(crate) struct GracePeriods {
    pub(crate) hot: CachePadded<Hot>,
    state: Mutex<GpState>,
    cv: Condvar,
    /// Mirrors of `state.started` / `state.completed` for lock-free
    /// readers ([`snapshot`](Self::snapshot), [`is_done`](Self::is_done)),
    /// and the highest grace period anyone waits for without running it.
    started: CachePadded<AtomicU64>,
    completed: CachePadded<AtomicU64>,
    requested: CachePadded<AtomicU64>,
    first_check_delay: Duration,
    stall_timeout: Duration,
    stall_handler: Option<StallHandler>,
    /// The domain is shutting down ([`stop`](Self::stop)): waits for
    /// readers end.
    stopped: AtomicBool,
}

impl GracePeriods {
    pub(crate) fn new(
        fences: Fences,
        first_check_delay: Duration,
        stall_timeout: Duration,
        stall_handler: Option<StallHandler>,
    ) -> GracePeriods {
        GracePeriods {
            hot: CachePadded::new(Hot {
                gp_ctr: AtomicU64::new(epoch_word(0)),
                fences,
                fast_idle: if fences.membarrier { 0 } else { u64::MAX },
            }),
            state: Mutex::new(GpState {
                started: 0,
                completed: 0,
                published: false,
                leading: false,
                completed_at: Instant::now(),
                polls: 0,
                idle_polls: 0,
                expedite: false,
                barriered: true,
                unsure_polls: 0,
                barriering: false,
                unsure_first: None,
                blocker: None,
                waiters: 0,
            }),
            cv: Condvar::new(),
            started: CachePadded::new(AtomicU64::new(0)),
            completed: CachePadded::new(AtomicU64::new(0)),
            requested: CachePadded::new(AtomicU64::new(0)),
            first_check_delay,
            stall_timeout,
            stall_handler,
            stopped: AtomicBool::new(false),
        }
    }

    /// Shutdown (the last handle dropped): a grace period waiting for
    /// readers stops waiting and completes. No section can be open any
    /// more but leaked ones (a live guard borrows a handle, a `Reader` or
    /// a `QsbrReader` owns one), which nothing can read through; the
    /// reclaimer, which
    /// shutdown joins, would otherwise wait for a section leaked by a
    /// live thread forever (`tests/red2.rs`).
    pub(crate) fn stop(&self) {
        // Release: pairs with `check_readers`' Acquire load (nothing to
        // publish but the flag; kept for clarity of the hand-off).
        self.stopped.store(true, Ordering::Release);
    }

    /// This domain's identity for [`stall`](crate::stall): the address of
    /// its grace-period state.
    pub(crate) fn id(&self) -> *const () {
        (self as *const GracePeriods).cast()
    }

    fn lock(&self) -> MutexGuard<'_, GpState> {
        // A panic while holding the lock leaves plain counters that are
        // still consistent; keep going rather than poison every caller.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a grace period is asked for and nobody drives it, or only
    /// polls drive it and it is stuck: one look of the reclaimer's at the
    /// state (`look.rs` says when each case holds and why).
    pub(crate) fn stalled(&self, lag: Duration, look: &mut Look) -> bool {
        if !self.wanted() {
            return false;
        }
        let st = self.lock();
        let seen = Seen {
            polls: st.polls,
            completed_at: st.completed_at,
            unled: (st.started > st.completed && st.published && !st.leading).then_some(st.started),
        };
        drop(st);
        look.stalled(Instant::now(), seen, lag)
    }

    /// The delay before a normal grace period's first check of the readers.
    pub(crate) fn first_check_delay(&self) -> Duration {
        self.first_check_delay
    }

    /// The grace period that work sealed now must wait for (see the module
    /// docs for why no lock is needed).
    #[inline]
    pub(crate) fn snapshot(&self) -> u64 {
        snapshot_of(&self.started)
    }

    /// Whether grace period `g` has completed.
    #[inline]
    pub(crate) fn is_done(&self, g: u64) -> bool {
        // Acquire: pairs with the leader's Release store after step 4: the
        // read sections it waited for happen-before what we run next.
        self.completed.load(Ordering::Acquire) >= g
    }

    /// The last completed grace period.
    #[inline]
    pub(crate) fn completed(&self) -> u64 {
        // Acquire: as `is_done`.
        self.completed.load(Ordering::Acquire)
    }

    /// Records that someone waits for grace period `g` without running it;
    /// true if that raised the request (the caller then wakes the
    /// reclaimer).
    #[inline]
    pub(crate) fn request(&self, g: u64) -> bool {
        // Relaxed: a hint; raising it is ordered by the SeqCst RMW below.
        if self.requested.load(Ordering::Relaxed) >= g {
            return false;
        }
        // SeqCst: store-buffering pair with the reclaimer's "publish my
        // sleep state (SeqCst); re-check `wanted`" (reclaimer.rs, wake.rs):
        // either it sees this request or the caller sees its sleep state.
        // The caller (`local::finish`) wakes only a `PARKED` one
        // (`Wake::IfParked`); a `POLLING` one sleeps at most
        // `look::DRIVEN` while a thread holds batches, as the requester
        // does (wake.rs, "What `Wake::IfParked` is left for").
        self.requested.fetch_max(g, Ordering::SeqCst);
        true
    }

    /// Whether someone waits for a grace period that has not completed.
    #[inline]
    pub(crate) fn wanted(&self) -> bool {
        // SeqCst: the reclaimer's side of the pair in `request`.
        self.requested.load(Ordering::SeqCst) > self.completed.load(Ordering::SeqCst)
    }

    /// Waits until grace period `g` has completed, running grace periods
    /// as needed.
    pub(crate) fn wait_for(&self, g: u64, registry: &Registry, stats: &Counters) {
        while !self.is_done(g) {
            self.synchronize(registry, stats, false);
        }
    }

    /// One grace period that starts after this call (shared with
    /// concurrent callers). Cancellation is disabled meanwhile
    /// ([`cancel`](crate::cancel)).
    pub(crate) fn synchronize(&self, registry: &Registry, stats: &Counters, expedited: bool) {
        let _no_cancel = NoCancel::new();
        // Full fence: orders the caller's removals before the grace period
        // it will wait for (pairs with the readers' fences / the leader's
        // membarrier; see the module docs, "Why one pass is enough").
        sync::full_fence();
        let mut st = self.lock();
        let target = st.started + 1;
        if expedited && st.started > st.completed {
            st.expedite = true;
        }
        loop {
            if st.completed >= target {
                return;
            }
            let exp = expedited || std::mem::take(&mut st.expedite);
            if st.started == st.completed {
                let g = self.begin(&mut st);
                st.leading = true;
                drop(st);
                self.publish(g, true, stats);
                self.lead(g, exp, registry, stats);
                st = self.lock();
                continue;
            }
            if st.published && !st.leading {
                // Started by a poll and left unled: adopt it.
                st.leading = true;
                let g = st.started;
                drop(st);
                self.lead(g, exp, registry, stats);
                st = self.lock();
                continue;
            }
            if expedited && st.published {
                // Led by a thread that may be napping through its
                // first-check delay (a sleep nobody can cut short): check
                // the readers ourselves, complete it, lead the next.
                let g = st.started;
                drop(st);
                self.check_readers(g, true, registry, stats);
                st = self.lock();
                self.complete(&mut st, g, stats);
                continue;
            }
            st.waiters += 1;
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            st.waiters -= 1;
        }
    }

    /// Claims grace period `started + 1` (under the lock).
    fn begin(&self, st: &mut GpState) -> u64 {
        st.started += 1;
        st.idle_polls = 0;
        st.published = false;
        st.barriered = false;
        st.unsure_polls = 0;
        st.barriering = false;
        st.unsure_first = None;
        claim_started(&self.started, st.started);
        st.started
    }

    /// Steps 1-2 of grace period `g`, then marks it published. `heavy`:
    /// with the heavy barrier first; else (a poll's, membarrier mode) the
    /// epoch's store alone, and the barrier comes later if a scan needs
    /// it (`past.rs`). In fence mode the barrier is a plain fence: always
    /// made.
    fn publish(&self, g: u64, heavy: bool, stats: &Counters) {
        let heavy = heavy || !self.hot.fences.membarrier;
        if heavy {
            start_grace_period(&self.hot.gp_ctr, g, self.hot.fences);
            Counters::add(&stats.heavy_barriers, 1);
        } else {
            publish_epoch(&self.hot.gp_ctr, g);
        }
        let mut st = self.lock();
        st.published = true;
        st.barriered = heavy;
        if st.waiters > 0 {
            self.cv.notify_all();
        }
    }

    /// Completes grace period `g` if nobody did yet (under the lock).
    fn complete(&self, st: &mut GpState, g: u64, stats: &Counters) {
        if st.completed < g {
            st.completed = g;
            st.completed_at = Instant::now();
            // Release: pairs with `is_done`'s Acquire.
            self.completed.store(g, Ordering::Release);
            Counters::add(&stats.grace_periods, 1);
            if st.waiters > 0 {
                self.cv.notify_all();
            }
        }
    }

    /// Steps 3-4 of the published grace period `g`, as its leader: wait for
    /// the readers (stopping early if a poll completed it), complete it.
    fn lead(&self, g: u64, expedited: bool, registry: &Registry, stats: &Counters) {
        // Step 3: let short readers finish, and callers join. A plain
        // sleep (nanosleep), not a timed wait on `cv`: a futex call per
        // grace period is a futex hash bucket lock per grace period, the
        // herd's hottest lock. Nobody needs to cut it short: an expedited
        // caller checks the readers itself (`synchronize`), a poll
        // completes it without the leader.
        let delay = self.first_check_delay;
        if !expedited && !delay.is_zero() && !self.is_done(g) {
            nap(delay);
        }
        self.check_readers(g, expedited, registry, stats);
        let mut st = self.lock();
        self.complete(&mut st, g, stats);
        st.leading = false;
    }

    /// Step 4 of grace period `g`: waits until no reader holds it (or
    /// someone completed it meanwhile), ending the sections of guards
    /// leaked by exited threads and reporting stalls on the way.
    fn check_readers(&self, g: u64, expedited: bool, registry: &Registry, stats: &Counters) {
        // The checker may not be the thread that published `g` (a poll
        // started it and a `synchronize` adopted it; an expedited caller
        // helps the leader).
        self.ensure_barrier(g, stats, true);
        scan_fence();
        let start = Instant::now();
        'records: for r in registry.iter() {
            let mut backoff = WaitBackoff::new(expedited);
            while holds_grace_period(&r.ctr, g) {
                // Acquire: pairs with `stop`.
                if self.is_done(g) || self.stopped.load(Ordering::Acquire) {
                    break 'records; // a poll completed it, or shutdown
                }
                let waited = start.elapsed();
                if waited >= Duration::from_millis(2) && r.release_leaked() {
                    break;
                }
                // Relaxed: a once-per-grace-period report marker.
                if waited >= self.stall_timeout && r.stalled_gp.swap(g, Ordering::Relaxed) != g {
                    self.report_stall(r, g, waited, stats);
                }
                backoff.wait();
            }
        }
    }

    /// Drives grace periods without waiting, from the threads that need
    /// them (a thread whose sealed batches wait, at each seal; possibly
    /// inside one of its read sections): if one is published, checks the
    /// readers once and completes it if they are all past it; if none
    /// runs and someone waits for one, starts one at the `IDLE_POLLS`th
    /// such poll (one heavy barrier for the batches of a few seals) and
    /// checks once. A thread whose polls keep finding one grace period
    /// held yields its CPU now and then (`stuck.rs`).
    /// So grace periods progress as
    /// fast as the threads that need them seal batches, with no thread in
    /// between, as crossbeam-epoch's collect-on-pin and sdd's guards
    /// advance their epochs; the reclaimer thread only takes over when
    /// none completed for a while and nobody polled (nobody seals any
    /// more: `stalled`). True if it completed one.
    pub(crate) fn poll(&self, registry: &Registry, stats: &Counters) -> bool {
        // No cancellation point here (no sleep, no wait): cancellation
        // stays as the caller has it. No clock either: a clock read costs
        // 80-250 ns in this VM, more than the rest of a poll.
        // Never wait for the lock: whoever holds it is making progress.
        let mut st = match self.state.try_lock() {
            Ok(st) => st,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        st.polls += 1;
        let g = if st.started > st.completed {
            if !st.published {
                return false;
            }
            st.started
        } else if self.requested.load(Ordering::Relaxed) > st.completed {
            // Relaxed (`requested`): a hint; the lock orders the rest.
            st.idle_polls += 1;
            if st.idle_polls < IDLE_POLLS {
                return false;
            }
            let g = self.begin(&mut st);
            let blocker = st.blocker;
            drop(st);
            // Without the heavy barrier unless the record that needed it
            // last time is still idle (`past.rs`).
            let heavy = blocker.is_some_and(|b| past::still_blocks(registry, b));
            self.publish(g, heavy, stats);
            st = self.lock();
            g
        } else {
            return false;
        };
        let barriered = st.barriered;
        drop(st);
        scan_fence();
        match past::scan(registry, g, barriered) {
            Scan::Past => {}
            Scan::Held => {
                // A reader preempted in its section, most likely: after a
                // few such polls give it the CPU (`stuck.rs`).
                if stuck::held(g) {
                    Counters::add(&stats.poll_yields, 1);
                }
                return false; // the leader, or a later poll, finishes it
            }
            Scan::Unsure(r, word) => {
                // No section holds it, but some record's owner has not
                // shown the new epoch: a later poll may see it has, or
                // after a few polls the heavy barrier settles it.
                if !self.unsure_poll(g, past::blocker(r, word), registry)
                    || !self.ensure_barrier(g, stats, false)
                {
                    return false;
                }
                scan_fence();
                if !matches!(past::scan(registry, g, true), Scan::Past) {
                    return false;
                }
            }
        }
        let mut st = self.lock();
        if !st.barriered && st.started == g {
            // Completed without the barrier: the next starts without it.
            st.blocker = None;
        }
        self.complete(&mut st, g, stats);
        true
    }

    /// Counts a poll that found grace period `g` unsure (`unsure`: the
    /// first record it found so, and its word); true at the
    /// `UNSURE_POLLS`th (the caller then makes the heavy barrier), or once
    /// someone made it. At the `UNSURE_POLLS`th, the first poll's unsure
    /// record becomes the blocker if it still shows the same word.
    fn unsure_poll(&self, g: u64, unsure: past::Blocker, registry: &Registry) -> bool {
        let mut st = self.lock();
        if st.started != g || st.completed >= g || st.barriered {
            return st.barriered && st.completed < g;
        }
        st.unsure_polls += 1;
        let first = *st.unsure_first.get_or_insert(unsure);
        if st.unsure_polls < UNSURE_POLLS {
            return false;
        }
        st.blocker = Some(first).filter(|&b| past::still_blocks(registry, b));
        true
    }

    /// The heavy barrier after grace period `g`'s epoch store, unless it
    /// was made (before the store, or after it by someone else) or `g`
    /// completed: a scan after it (and after the caller's scan fence)
    /// trusts a word that shows no section (`past.rs`).
    /// A poll (`lead: false`) leaves it to another poll that is making it
    /// (false: the barrier is not made yet); a leader makes its own then.
    pub(crate) fn ensure_barrier(&self, g: u64, stats: &Counters, lead: bool) -> bool {
        let mut st = self.lock();
        if st.started != g || st.barriered {
            return true;
        }
        if st.barriering && !lead {
            return false;
        }
        st.barriering = true;
        drop(st);
        barrier_after(&self.hot.gp_ctr, g, self.hot.fences);
        Counters::add(&stats.heavy_barriers, 1);
        let mut st = self.lock();
        if st.started == g {
            st.barriered = true;
        }
        st.barriering = false;
        true
    }

    #[cold]
    fn report_stall(&self, r: &Record, g: u64, waited: Duration, stats: &Counters) {
        Counters::add(&stats.stalls, 1);
        let (owner, kind) = r.owner();
        let stall = Stall {
            tid: owner.tid,
            thread_name: owner.name(),
            waited,
            grace_period: g,
            held_by: match kind {
                Kind::Main | Kind::Temporary => HeldBy::Guard,
                Kind::Reader => HeldBy::ReaderGuard,
                Kind::Qsbr => HeldBy::QsbrReader,
            },
        };
        self.deliver(&stall);
    }

    /// The stall timeout (`DomainBuilder::stall_timeout`).
    pub(crate) fn stall_timeout(&self) -> Duration {
        self.stall_timeout
    }

    /// Reports a cache of thread `tid` that has held up a `replace` for
    /// `waited` after its grace period (`cell/keep.rs`, `wait_unkept`).
    #[cold]
    pub(crate) fn report_cache_stall(&self, tid: i32, waited: Duration, stats: &Counters) {
        Counters::add(&stats.stalls, 1);
        let owner = crate::record::Owner { tid };
        self.deliver(&Stall {
            tid,
            thread_name: owner.name(),
            waited,
            grace_period: self.completed(),
            held_by: HeldBy::Cache,
        });
    }

    /// Hands a stall report to the handler, or prints it.
    fn deliver(&self, stall: &Stall) {
        match &self.stall_handler {
            // Marked as this domain's handler: waiting for a grace period
            // in it would wait for ourselves (`stall`).
            Some(handler) => crate::stall::run_handler(self.id(), || handler(stall)),
            None => eprintln!("{stall}; still waiting ({})", stall.held_by.hint()),
        }
    }
}

/// A full fence before a scan of the reader words for grace period `g`,
/// by a thread that may have learnt that `g` was published through the
/// state lock rather than by publishing it. A reader's word store, its
/// fence, the publisher's heavy barrier: if the reader's fence comes first
/// in the fences' single total order, its store must be visible to the
/// scan, which the memory model guarantees only to a load sequenced after
/// a fence that follows the publisher's in that order (happening after it
/// through the lock is not enough). In membarrier mode on x86 the heavy
/// barrier has drained every reader's store buffer anyway; the fence costs
/// one `mfence` per scan, not per reader.
#[inline]
fn scan_fence() {
    sync::full_fence();
}
