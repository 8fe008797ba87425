//! The registry of live threads that every `--cleanup` strategy but
//! `none` maintains, and the shared half of a cleanup: an intrusive doubly
//! linked list whose writers serialise on one lock and whose readers walk
//! the `next` pointers without it (the kernel's `list_del_rcu` shape), a
//! pool of returned buffers, the global statistics, and the monitor's walk
//! that checks every entry it reaches.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::args::Strategy;
use crate::spawn::now_ns;

/// A thread's own cleanup state, from start to cleanup.
#[derive(Debug)]
pub(super) struct ThreadState {
    pub(super) entry: EntryRef,
    pub(super) buffer: Box<[u64]>,
    pub(super) stats: Vec<u64>,
}

/// Entry state: linked in the registry.
pub const LIVE: u32 = 1;
/// Entry state: unlinked, readers that found it earlier may still hold it.
pub const UNLINKED: u32 = 2;
/// Entry state: freed; a reader reaching it is a violation.
pub const FREE: u32 = 3;

/// One registry entry (one live thread).
#[derive(Debug)]
pub(super) struct Entry {
    /// Next entry; readers follow it without the lock.
    pub(super) next: AtomicPtr<Entry>,
    /// Previous entry (writers only, under the writer lock).
    pub(super) prev: AtomicPtr<Entry>,
    /// [`LIVE`], [`UNLINKED`] or [`FREE`].
    pub(super) state: AtomicU32,
    /// Thread serial number.
    pub(super) id: u64,
    /// Times this entry's cleanup ran (must end at 1).
    pub(super) cleaned: AtomicU32,
    /// When the thread's exit work began ([`now_ns`]; 0: not yet). The
    /// timeline of the entry (this, `released_ns`, `freed_ns`) is read
    /// once the run is over, for the cleanup-to-free latency and the
    /// memory held (`report.rs`); Relaxed throughout, ordered by the
    /// run's end (see `report::of`).
    pub(super) exit_ns: AtomicU64,
    /// Time the exiting thread itself spent in its exit work, ns (0: its
    /// work ran elsewhere, exitq).
    pub(super) exit_work_ns: AtomicU64,
    /// When the buffer went back to the pool and the statistics were merged.
    pub(super) released_ns: AtomicU64,
    /// When the entry was freed (state [`FREE`]).
    pub(super) freed_ns: AtomicU64,
}

impl Entry {
    /// A fresh, live entry for thread `id`.
    pub(super) fn new(id: u64) -> Entry {
        Entry {
            next: AtomicPtr::new(std::ptr::null_mut()),
            prev: AtomicPtr::new(std::ptr::null_mut()),
            state: AtomicU32::new(LIVE),
            id,
            cleaned: AtomicU32::new(0),
            exit_ns: AtomicU64::new(0),
            exit_work_ns: AtomicU64::new(0),
            released_ns: AtomicU64::new(0),
            freed_ns: AtomicU64::new(0),
        }
    }
}

/// A pointer to an entry owned by [`Writer::entries`].
#[derive(Debug, Clone, Copy)]
pub(super) struct EntryRef(pub(super) NonNull<Entry>);

// SAFETY: an EntryRef points into a Box owned by `Writer::entries`, which
// is never shrunk while the `Shared` lives; every field of `Entry` is
// either immutable after creation or atomic, so it may be used from any
// thread.
unsafe impl Send for EntryRef {}
// SAFETY: as above; shared access goes through atomics only.
unsafe impl Sync for EntryRef {}

impl EntryRef {
    pub(super) fn get(&self) -> &Entry {
        // SAFETY: see the `Send` impl: the entry lives as long as `Shared`,
        // and every holder of an EntryRef holds an `Arc<Shared>`.
        unsafe { self.0.as_ref() }
    }
}

/// What the writer lock (or, for `locked`, the one lock) protects.
#[derive(Debug)]
pub(super) struct Writer {
    /// First entry (readers load it with Acquire, see `walk`).
    pub(super) head: *mut Entry,
    /// Every entry ever created: owns them until the run is dropped. Boxed
    /// so an entry's address stays put when the Vec grows (readers hold
    /// raw pointers to entries).
    #[allow(clippy::vec_box)]
    pub(super) entries: Vec<Box<Entry>>,
    /// Returned buffers.
    pub(super) pool: Vec<Box<[u64]>>,
    /// Global statistics: the sum of every cleaned thread's counters.
    pub(super) stats: Vec<u64>,
}

// SAFETY: `head` points into `entries` (or is null) and is only used under
// the mutex that owns this struct.
unsafe impl Send for Writer {}

/// State shared by the hooks, the monitor and the reclaimer.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) strategy: Strategy,
    pub(super) work: usize,
    pub(super) monitor_pause: Duration,
    /// Lock-free read side: the published head (mirrors `Writer::head`).
    pub(super) head: AtomicPtr<Entry>,
    pub(super) writer: Mutex<Writer>,
    pub(super) domain: Option<exitq::Domain>,
    pub(super) next_id: AtomicU64,
    pub(super) registered: AtomicU64,
    pub(super) cleaned: AtomicU64,
    pub(super) repeated: AtomicU64,
    /// Sum of every registered thread's statistics (what the global
    /// counters must add up to once all are cleaned).
    pub(super) expected_sum: AtomicU64,
    pub(super) violations: AtomicU64,
    /// Entries freed (Release increments, see [`free_entry`]).
    pub(super) freed: AtomicU64,
    /// Of `freed`, those freed while `Cleanup::finish` drove the
    /// strategy's reclaimer to completion.
    pub(super) freed_at_finish: AtomicU64,
    /// Library strategies: threads whose exit work (retire included) has
    /// returned (Release increments; `Cleanup::finish` checks that none is
    /// still inside the library before seize's `reclaim_all`).
    pub(super) lib_exits: AtomicU64,
    pub(super) walks: AtomicU64,
    pub(super) walked_entries: AtomicU64,
    pub(super) stop: AtomicBool,
}

pub(super) fn lock(m: &Mutex<Writer>) -> MutexGuard<'_, Writer> {
    // A panic while holding the lock is a bug that aborts herd (hooks must
    // not panic); poisoning carries no extra information here.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The per-thread contribution to statistics counter `i` of thread `id`.
pub(super) fn contribution(id: u64, i: usize) -> u64 {
    1 + (id.wrapping_add(i as u64) % 7)
}

/// Links `entry` at the head of the registry, under the writer lock, and
/// takes a returned buffer from the pool if there is one.
pub(super) fn link(s: &Shared, entry: Box<Entry>) -> Option<Box<[u64]>> {
    let mut w = lock(&s.writer);
    let p: *mut Entry = NonNull::from(&*entry).as_ptr();
    let old = w.head;
    entry.next.store(old, Ordering::Relaxed);
    if let Some(old) = NonNull::new(old) {
        // SAFETY: `old` is an entry owned by `w.entries`, alive.
        unsafe { old.as_ref() }.prev.store(p, Ordering::Relaxed);
    }
    w.head = p;
    w.entries.push(entry);
    // Counted before the entry is published (the Release store
    // below), so a reader that reaches it also sees the count: a
    // walk is never longer than `registered` (see `walk`).
    // Relaxed: ordered by that Release store.
    s.registered.fetch_add(1, Ordering::Relaxed);
    // Release: publishes the entry's fields (and `next`) to readers
    // that load the head with Acquire in `walk`.
    s.head.store(p, Ordering::Release);
    w.pool.pop()
}

/// The part of a cleanup that touches only the thread's own memory: done
/// before taking any shared lock, in every strategy.
pub(super) fn prepare(state: &mut ThreadState) {
    for word in state.buffer.iter_mut() {
        *word = 0;
    }
}

/// Adds one thread's (or one batch's) statistics into the global counters.
fn merge(w: &mut Writer, stats: &[u64]) {
    for (g, v) in w.stats.iter_mut().zip(stats) {
        *g = g.wrapping_add(*v);
    }
}

/// Under the writer lock: unlink the entry, return the buffer, count.
fn unlink_and_return(s: &Shared, w: &mut Writer, mut state: ThreadState) {
    let e = state.entry.get();
    let p = state.entry.0.as_ptr();
    let next = e.next.load(Ordering::Relaxed);
    let prev = e.prev.load(Ordering::Relaxed);
    if let Some(n) = NonNull::new(next) {
        // SAFETY: entries are owned by `w.entries` and never freed.
        unsafe { n.as_ref() }.prev.store(prev, Ordering::Relaxed);
    }
    match NonNull::new(prev) {
        // Release: a reader that reaches `prev` and then loads its `next`
        // with Acquire sees `next`'s fields (it was linked already).
        // SAFETY: as above.
        Some(pv) => unsafe { pv.as_ref() }.next.store(next, Ordering::Release),
        None => {
            debug_assert_eq!(w.head, p);
            w.head = next;
            // Release: pairs with the Acquire head load in `walk`.
            s.head.store(next, Ordering::Release);
        }
    }
    // The unlinked entry keeps its `next` so readers standing on it can
    // continue the walk (list_del_rcu does the same).
    e.state.store(UNLINKED, Ordering::Relaxed);
    e.released_ns.store(now_ns(), Ordering::Relaxed);
    w.pool.push(std::mem::take(&mut state.buffer));
    // Relaxed: counts read in `finish` after every cleanup happened-before.
    if e.cleaned.fetch_add(1, Ordering::Relaxed) == 0 {
        s.cleaned.fetch_add(1, Ordering::Relaxed);
    } else {
        s.repeated.fetch_add(1, Ordering::Relaxed);
    }
}

/// One thread's whole cleanup under the writer lock (locked, sync,
/// expedited): unlink, return the buffer, merge the statistics.
pub(super) fn do_cleanup(s: &Shared, w: &mut Writer, state: ThreadState) {
    merge(w, &state.stats);
    unlink_and_return(s, w, state);
}

/// One walk of the registry: counts entries and violations.
pub(super) fn walk(s: &Shared) -> (u64, u64) {
    // A walk can never be longer than the number of entries ever
    // registered; more means a cycle. Every entry reached was counted
    // before it was published (thread_start), and we reached it through
    // Acquire loads, so a fresh load of the count includes it.
    let mut bound = s.registered.load(Ordering::Relaxed);
    let (mut seen, mut bad) = (0u64, 0u64);
    // Acquire: pairs with the Release stores of head/next in thread_start
    // and do_cleanup, so an entry's fields are visible once reached.
    let mut p = s.head.load(Ordering::Acquire);
    while let Some(e) = NonNull::new(p) {
        // SAFETY: every pointer in the registry points into an entry owned
        // by `Writer::entries`, never deallocated while `s` lives; reading
        // a freed (recycled) entry is detected through its state, not UB.
        let e = unsafe { e.as_ref() };
        seen += 1;
        if e.state.load(Ordering::Relaxed) == FREE || e.id == 0 {
            bad += 1;
        }
        if seen > bound {
            bound = s.registered.load(Ordering::Relaxed);
            if seen > bound {
                bad += 1;
                break;
            }
        }
        p = e.next.load(Ordering::Acquire);
    }
    (seen, bad)
}

/// Frees an unlinked entry: no reader can reach it any more (the
/// strategy's grace period, lock or reclaimer made sure). The entry's
/// memory stays owned by [`Writer::entries`]; the state says it is freed,
/// so a reader that still reaches it is counted as a violation.
pub(super) fn free_entry(s: &Shared, entry: EntryRef) {
    let e = entry.get();
    e.freed_ns.store(now_ns(), Ordering::Relaxed);
    e.state.store(FREE, Ordering::Relaxed);
    // Release: pairs with the Acquire load in `Cleanup::finish`, which
    // then reads the entry's timeline.
    s.freed.fetch_add(1, Ordering::Release);
}
