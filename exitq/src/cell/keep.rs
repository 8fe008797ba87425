//! The values a cell's caches keep ([`CellCache`](crate::CellCache)):
//! one hazard pointer per cache, and the values retired while a cache
//! still kept them.
//!
//! A cache reads through the pointer it kept at its last miss, whatever
//! the cell holds by then, and announces nothing per read: no grace period
//! waits for it. What keeps its value alive is its *slot*: the value's
//! address, published before the cache first reads through it. A value a
//! writer takes out of a cell that has caches is freed only once, after
//! its grace period, no slot holds it (`release_or_park`); else it waits
//! on the *parked* list until the cache that kept it moves on (its next
//! miss, or its drop) and collects it.
//!
//! # The handshakes
//!
//! Adoption (`adopt`, a cache's miss) against the check (`release_or_park`,
//! the retired value's callback after its grace period):
//!
//! ```text
//! cache                                  writer / its callback
//! p = cell.load (Acquire)                W: cell.swap(q) (p out)
//! K: slot.kept = p                       ... defer -> grace period -> callback
//! F1: full fence                         F2: full fence
//! R: cell.load == p ? keep p : retry     L: any slot.kept == p ? park : free
//! ```
//!
//! If R read `p`, R is coherence-ordered before W; F1 happens before R and
//! W happens before F2 (the domain orders a `defer` before its callback),
//! so F1 precedes F2 in the single order of sequentially consistent
//! operations (C++20 \[atomics.order\] p4, the fence-fence case). Had L read
//! a value older than K, then F2 (before L) would precede F1 (after K):
//! so L reads K or a later store of the same slot, made once the cache no
//! longer reads through `p` (its next adoption stores first and reads
//! through the new value only after its own R; a drop stores null). If R
//! read anything else, the cache never reads through `p`. The value is
//! freed only when no slot holds it. A later store that L finds is a
//! Release and L an Acquire: the cache's reads through `p`, before that
//! store, happen before the free (without it they would race with it:
//! the free is ordered after the store the scan saw, not after the reads
//! before it; the loom model found this).
//!
//! # One look per run
//!
//! A writer at full speed retires a value per store, and the check above
//! loads every slot for each value: lines the caches write at each miss,
//! so one miss per value on the writer's side (13% of the writer's
//! samples in a profile with one cache reading, `docs/results-exitq.md`).
//! Callbacks run in *runs* (`run.rs`): a run's callbacks are fixed before
//! it starts, each deferred after its value's W, so every W of a run's
//! values happens before the run starts (a run's callbacks are ready
//! when it starts: their grace periods over, or, in the run of a domain's
//! shutdown, no reader and no cache left). So a callback inside a run makes F2 and
//! the slots' loads once per cell and run, and keeps what they found in a
//! [`Look`] (the distinct values kept); the run's later callbacks of the
//! same cell read the look instead of the slots. The proof above holds
//! for each of them with that fence and those loads: it needs F2 after
//! W and L after F2, nothing more, and the look's Acquire loads order a
//! cache's reads before a free the look allows, as L's do. A look serves
//! its own run only: a value retired after the look could be adopted by
//! a cache after it (the loom model `a_later_run_looks_again` fails with
//! looks reused across runs). A look that finds more than [`LOOK`]
//! distinct values remembers none, and the run scans the slots for each
//! value, after the look's fence. A value the look saw kept is parked and
//! looked at again in the live slots, as below. Outside a run (no frame:
//! the loom models' plain callbacks) each value makes its own fence and
//! scan.
//!
//! Parking against moving on: the callback pushes the value on `parked`,
//! sets the *flag* of every slot that holds it, makes a full fence and
//! looks at the slots again; a cache moving on stores its slot, makes a
//! full fence (F1 of its adoption, or its drop's) and loads its slot's
//! flag. Store, fence, load on both sides, per slot (Dekker): for each
//! slot that held the value, either the look after the fence sees the
//! cache's new store, or the cache sees the flag; the one that sees the
//! other collects (`collect`: take the whole list, free what no slot
//! holds after a fence, park the rest again the same way, and repeat
//! while one of those is found free). A slot the look finds holding the
//! value that was not flagged before the fence (an adoption that stored
//! the value, raced the swap and will retry) is flagged in turn and the
//! look repeated (`park_all`). Only the caches that kept a parked value
//! collect: before the flags, every cache collected at every miss while
//! anything was parked, and with three threads on two CPUs one reader,
//! preempted keeping a value, made the other re-park that value at each
//! of its misses, a fence pair and a node allocation per write
//! (`docs/results-exitq.md`). A value parked behind a cache that never loads
//! again stays parked (as an `Arc` a `Cache` of `arc-swap` holds), until
//! the cell and every callback of it are gone, when the last handle of
//! the `Keepers` frees what is left.
//!
//! The cell's writer finds the `Keepers` after its swap: the swap and the
//! load of `Keepers`' address are `SeqCst`, and a cache publishes the
//! address (a `SeqCst` compare-and-swap) before its first adoption's F1:
//! if the cache's R read the old value, its F1 precedes the swap in the
//! single order, so the load after the swap finds the address (module docs
//! of `cell/raw.rs`).
//!
//! Slots are never freed while the `Keepers` lives: a cache's drop clears
//! its slot and gives it back for the next cache to claim; a scan walks a
//! list that only grows.
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;
use std::time::{Duration, Instant};

use crate::backoff::WaitBackoff;
use crate::run::current_run;
use crate::sync::{full_fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// One cache's hazard pointer, on lines of its own: its cache writes it
/// at every miss, and two caches' slots on one line would make their
/// misses contend.
#[repr(align(128))]
pub(crate) struct Slot<T> {
    /// The value the cache reads through; null while it keeps none.
    kept: AtomicPtr<T>,
    /// The thread of the live cache that claimed the slot
    /// ([`this_thread`], never 0), or 0 while it is free. One word, so
    /// `replace`'s check (`kept_here`) cannot take another thread's cache
    /// for one of this thread's: only this thread writes its own id, and
    /// after its own store of 0 it reads 0 or another thread's id. (With
    /// a claim flag beside an owner word, a check whose loads straddled
    /// another thread's claim of a slot this thread gave back saw the
    /// slot taken, this thread's old id and the other cache's value, and
    /// `replace` panicked "would deadlock": a torture cache reader died of
    /// it once, 2026-12-06.)
    owner: AtomicUsize,
    /// Set by a parker that saw this slot hold a value it parked; the
    /// cache collects when it moves on only if set (module docs).
    flagged: AtomicBool,
    /// The kernel tid of the thread that claimed the slot, for a stall
    /// report of `replace` ([`Keepers::wait_unkept`]). Relaxed, and a
    /// std atomic under loom too: no handshake reads it.
    tid: std::sync::atomic::AtomicI32,
    /// The next slot; set before the slot is published, never changed.
    next: *mut Slot<T>,
}

/// Distinct values one [`Look`] remembers; a look that finds more
/// remembers none, and its run scans the slots for each value.
const LOOK: usize = 8;
/// `Look::len` of a look that found more than [`LOOK`] distinct values.
const OVERFLOW: usize = LOOK + 1;

/// One look at a `Keepers`' slots inside a run of callbacks (module docs:
/// one look per run): the distinct non-null values they held, as
/// addresses (only compared, never followed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Look {
    /// The run (`run::current_run`; 0: none yet).
    run: u64,
    /// The `Keepers` looked at, by address: alive for the whole run (the
    /// run's callbacks hold it), so no other one has it meanwhile.
    keepers: usize,
    /// Values in `kept`, or [`OVERFLOW`].
    len: usize,
    kept: [usize; LOOK],
}

impl Look {
    pub(crate) const fn new() -> Look {
        Look {
            run: 0,
            keepers: 0,
            len: 0,
            kept: [0; LOOK],
        }
    }

    /// Whether the look saw `value` in a slot; `None` after an overflow.
    fn holds(&self, value: usize) -> Option<bool> {
        (self.len <= LOOK).then(|| self.kept[..self.len].contains(&value))
    }
}

std::thread_local! {
    /// This thread's last look (no destructor: `Look` is plain words).
    static LAST_LOOK: Cell<Look> = const { Cell::new(Look::new()) };
}

/// A retired value waiting for the caches that keep it.
struct Parked<T> {
    value: *mut T,
    next: *mut Parked<T>,
}

/// The slots of one cell's caches and its parked values (module docs).
/// Aligned so that the `Arc`'s counts, which every retire of a cell with
/// caches changes, are not on the line the caches read at each miss
/// (`parked`): sharing it cost the writer a third of its time, the
/// read-mostly benchmark at full speed.
#[repr(align(128))]
pub(crate) struct Keepers<T> {
    slots: AtomicPtr<Slot<T>>,
    parked: AtomicPtr<Parked<T>>,
    /// Owns boxed `T`s (the parked values).
    _owns: PhantomData<Box<T>>,
}

// SAFETY: the raw pointers are the list nodes this structure owns (slots,
// parked nodes) and the parked values, boxed `T`s it owns and drops on
// whichever thread collects them (`T: Send`); a shared `Keepers` only
// compares slot addresses with values, never reads a `T` (`T: Sync` is the
// cell's business).
unsafe impl<T: Send> Send for Keepers<T> {}
// SAFETY: as `Send`; every shared field is atomic.
unsafe impl<T: Send> Sync for Keepers<T> {}

/// [`Slot::owner`] of a free slot.
const FREE: usize = 0;

/// This thread's identity for [`Slot::owner`]: a number no other thread
/// of the process has had (never [`FREE`]). Not the address of a
/// thread-local, which a later thread gets again (glibc reuses a joined
/// thread's stack and its TLS): a cache leaked by a thread that exited
/// would then be taken for one of the later thread's, and its `replace`
/// would panic "would deadlock" with no cache of its own.
fn this_thread() -> usize {
    use std::sync::atomic::AtomicUsize as Counter;
    /// The next identity to give (a process-wide counter, outside loom's
    /// models: only its uniqueness matters).
    static NEXT: Counter = Counter::new(FREE + 1);
    #[cfg(not(exitq_loom))]
    thread_local! {
        static ME: Cell<usize> = const { Cell::new(FREE) };
    }
    // Loom's threads share one OS thread's thread-locals.
    #[cfg(exitq_loom)]
    loom::thread_local! {
        static ME: Cell<usize> = Cell::new(FREE);
    }
    ME.with(|me| {
        if me.get() == FREE {
            // Relaxed: a read-modify-write, so every thread gets its own
            // number; nothing else is ordered by it.
            me.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        me.get()
    })
}

impl<T> Keepers<T> {
    pub(crate) fn new() -> Keepers<T> {
        Keepers {
            slots: AtomicPtr::new(ptr::null_mut()),
            parked: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// The slots, newest first.
    fn slots(&self) -> impl Iterator<Item = &Slot<T>> {
        // Acquire: pairs with `claim`'s Release push, so a slot's `next`
        // (set before it was published) is seen.
        let mut p = self.slots.load(Ordering::Acquire);
        std::iter::from_fn(move || {
            // SAFETY: slots are freed only when `self` drops (module docs).
            let s = unsafe { p.as_ref() }?;
            p = s.next;
            Some(s)
        })
    }

    /// Whether a slot holds `value`. The caller made a full fence since
    /// the value left its cell (module docs: F2). Null (an empty
    /// `RcuOption`) is nothing to keep, and free slots hold it too.
    fn kept(&self, value: *mut T) -> bool {
        // After the caller's full fence (module docs). Acquire: pairs with
        // the Release of the slot store that moved a cache off `value`
        // (`adopt`, `release_slot`), so the cache's reads through `value`
        // happen before the free that follows.
        !value.is_null()
            && self
                .slots()
                .any(|s| s.kept.load(Ordering::Acquire) == value)
    }

    /// A slot for a new cache on this thread: a free one, or a new one.
    pub(crate) fn claim(&self) -> &Slot<T> {
        let me = this_thread();
        let tid = crate::record::Owner::current().tid;
        for s in self.slots() {
            // Acquire: pairs with `release_slot`'s Release, so the last
            // owner's stores come before ours.
            if s.owner.load(Ordering::Relaxed) == FREE
                && s.owner
                    .compare_exchange(FREE, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Relaxed: for stall reports only.
                s.tid.store(tid, Ordering::Relaxed);
                return s;
            }
        }
        let slot = Box::into_raw(Box::new(Slot {
            kept: AtomicPtr::new(ptr::null_mut()),
            owner: AtomicUsize::new(me),
            flagged: AtomicBool::new(false),
            tid: std::sync::atomic::AtomicI32::new(tid),
            next: ptr::null_mut(),
        }));
        // Relaxed: the head is only a starting point; the CAS below
        // publishes.
        let mut head = self.slots.load(Ordering::Relaxed);
        loop {
            // SAFETY: `slot` is ours until the CAS publishes it.
            unsafe { (*slot).next = head };
            // Release: pairs with `slots`' Acquire (the node's fields).
            match self
                .slots
                .compare_exchange_weak(head, slot, Ordering::Release, Ordering::Relaxed)
            {
                // SAFETY: published, freed only when `self` drops.
                Ok(_) => return unsafe { &*slot },
                Err(h) => head = h,
            }
        }
    }

    /// A cache's miss: publishes in `slot` the value `load` returns (the
    /// cell's Acquire load) and returns it once a load after a full fence
    /// still finds it in the cell (module docs: K, F1, R). Then collects
    /// parked values, should any wait (the cache may have moved off one).
    pub(crate) fn adopt(
        &self,
        slot: &Slot<T>,
        load: impl Fn() -> *mut T,
        free: impl FnMut(*mut T),
    ) -> *mut T {
        let mut p = load();
        let adopted = loop {
            // K, before F1 (module docs). Release: the reads through the
            // value kept until now happen before a free that finds this
            // store (`kept`'s Acquire).
            slot.kept.store(p, Ordering::Release);
            full_fence();
            let again = load();
            if again == p {
                break p;
            }
            p = again;
        };
        self.collect_if_flagged(slot, free);
        adopted
    }

    /// A cache's drop: clears its slot and gives it back; collects parked
    /// values (the cache may have kept one).
    pub(crate) fn release_slot(&self, slot: &Slot<T>, free: impl FnMut(*mut T)) {
        // Before the fence (Dekker with `park`). Release: as `adopt`'s
        // store, for the reads through the value kept until now.
        slot.kept.store(ptr::null_mut(), Ordering::Release);
        full_fence();
        self.collect_if_flagged(slot, free);
        // Release: pairs with `claim`'s Acquire.
        slot.owner.store(FREE, Ordering::Release);
    }

    /// A cache moving on (its slot stored, then a full fence): collects
    /// if a parker flagged its slot, and clears the flag.
    fn collect_if_flagged(&self, slot: &Slot<T>, free: impl FnMut(*mut T)) {
        // Relaxed load: after the caller's full fence, the load of the
        // Dekker pair with `park_all`'s flag store, fence and look (module
        // docs). The swap's Acquire pairs with that store's Release, so
        // the parker's push is seen by `collect`'s swap of the list.
        if slot.flagged.load(Ordering::Relaxed) && slot.flagged.swap(false, Ordering::Acquire) {
            self.collect(free);
        }
    }

    /// The callback of a value retired from the cell, after its grace
    /// period: `free`s it unless a cache keeps it, else parks it. Inside
    /// a run of callbacks, one look at the slots serves every value of
    /// this cell the run frees (module docs: one look per run).
    pub(crate) fn release_or_park(&self, value: *mut T, free: impl FnMut(*mut T)) {
        let run = current_run();
        let kept = if run == 0 {
            // Full fence: F2 (module docs).
            full_fence();
            self.kept(value)
        } else {
            // `with` cannot fail: a const thread-local with no destructor
            // is never torn down.
            LAST_LOOK.with(|last| {
                let mut look = last.get();
                let kept = self.kept_in_run(value, run, &mut look);
                last.set(look);
                kept
            })
        };
        self.free_or_park(value, kept, free);
    }

    /// `release_or_park` in run `run` (not 0), with `last` as the
    /// thread's last look.
    #[cfg_attr(not(exitq_loom), allow(dead_code))] // the loom models' entry
    pub(crate) fn release_or_park_in(
        &self,
        value: *mut T,
        run: u64,
        last: &mut Look,
        free: impl FnMut(*mut T),
    ) {
        let kept = self.kept_in_run(value, run, last);
        self.free_or_park(value, kept, free);
    }

    /// Whether a slot holds `value`, taken out of the cell before run
    /// `run` (not 0) started: from `last` if it is this run's look at
    /// these slots, else from a new one (F2 and the slots' loads), kept in
    /// `last` for the run's next values.
    fn kept_in_run(&self, value: *mut T, run: u64, last: &mut Look) -> bool {
        if value.is_null() {
            return false;
        }
        let me = self as *const Keepers<T> as usize;
        if last.run != run || last.keepers != me {
            *last = self.look(run, me);
        }
        match last.holds(value as usize) {
            Some(kept) => kept,
            // More distinct values than a look remembers: scan (after the
            // look's fence, which came after `value` left its cell).
            None => self.kept(value),
        }
    }

    /// F2 (module docs), then the distinct values the slots hold.
    fn look(&self, run: u64, me: usize) -> Look {
        full_fence();
        let mut look = Look {
            run,
            keepers: me,
            len: 0,
            kept: [0; LOOK],
        };
        for s in self.slots() {
            // Acquire: as in `kept`, for every value the look clears.
            let v = s.kept.load(Ordering::Acquire) as usize;
            if v == 0 || look.kept[..look.len].contains(&v) {
                continue;
            }
            if look.len == LOOK {
                look.len = OVERFLOW;
                break;
            }
            look.kept[look.len] = v;
            look.len += 1;
        }
        look
    }

    /// Frees `value` if no slot held it at the look that found `kept`,
    /// else parks it.
    fn free_or_park(&self, value: *mut T, kept: bool, mut free: impl FnMut(*mut T)) {
        if !kept {
            free(value);
            return;
        }
        if self.park_all(&[value]) {
            self.collect(free);
        }
    }

    /// Parks `values` (each held by a slot at the caller's look), flags
    /// every slot that holds one of them, makes a full fence and looks
    /// again (module docs): returns whether one of them may be free now
    /// (the caller collects). A slot seen holding one only at the look
    /// after the fence (a cache's adoption that stored it and will retry)
    /// is flagged in turn, and the look repeated, until every slot that
    /// holds one was flagged before the last fence: each cache does so at
    /// most once per value (its next load of the cell no longer returns
    /// it), so the loop ends.
    fn park_all(&self, values: &[*mut T]) -> bool {
        for &v in values {
            self.park(v);
        }
        // The slots flagged, sorted: a value many idle caches keep has as
        // many holders, and every one of them that moves on parks it again.
        let mut flagged: Vec<*const Slot<T>> = Vec::new();
        loop {
            flagged.clear();
            for s in self.slots() {
                // Relaxed: which slots to flag; the look after the fence
                // decides.
                if values.contains(&s.kept.load(Ordering::Relaxed)) {
                    // Release: pairs with `collect_if_flagged`'s Acquire
                    // swap (the push above). Before the fence: the store
                    // of the Dekker pair. Flagging a slot again costs its
                    // cache at most one collect for nothing.
                    s.flagged.store(true, Ordering::Release);
                    flagged.push(s as *const Slot<T>);
                }
            }
            flagged.sort_unstable();
            // Full fence: Dekker with a cache moving on (module docs).
            full_fence();
            let mut unflagged = false;
            for &v in values {
                let mut held = false;
                for s in self.slots() {
                    // Acquire: as in `kept`.
                    if s.kept.load(Ordering::Acquire) == v {
                        held = true;
                        unflagged |= flagged.binary_search(&(s as *const Slot<T>)).is_err();
                    }
                }
                if !held {
                    return true;
                }
            }
            if !unflagged {
                return false;
            }
        }
    }

    /// Pushes `value` on the parked list.
    fn park(&self, value: *mut T) {
        let node = Box::into_raw(Box::new(Parked {
            value,
            next: ptr::null_mut(),
        }));
        // Relaxed: the CAS below publishes.
        let mut head = self.parked.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours until the CAS publishes it.
            unsafe { (*node).next = head };
            // Release: pairs with `collect`'s Acquire swap (the node).
            match self.parked.compare_exchange_weak(
                head,
                node,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Takes the parked list, `free`s every value no slot holds, parks the
    /// others again (`park_all`); repeats while one parked again is found
    /// free after the fence that follows its push (module docs). A `free`
    /// that panics (a value's `Drop`, in a callback) loses nothing: the
    /// values not yet freed are parked again as the panic unwinds, no slot
    /// flagged for them (none holds them), freed by the next collect of
    /// the cell's caches or writers, or when the `Keepers` drops.
    fn collect(&self, mut free: impl FnMut(*mut T)) {
        loop {
            // Acquire: pairs with `park`'s Release.
            let mut p = self.parked.swap(ptr::null_mut(), Ordering::Acquire);
            if p.is_null() {
                return;
            }
            // Full fence: F2 for every value taken (their callbacks'
            // fences, then `park`'s Release to our Acquire, happen before).
            full_fence();
            let (mut unkept, mut again) = (Vec::new(), Vec::new());
            while !p.is_null() {
                // SAFETY: taken from the list, ours alone; boxed by `park`.
                let node = unsafe { Box::from_raw(p) };
                p = node.next;
                if self.kept(node.value) {
                    again.push(node.value);
                } else {
                    unkept.push(node.value);
                }
            }
            let again_free = !again.is_empty() && self.park_all(&again);
            let mut rest = Repark {
                keepers: self,
                values: unkept.into_iter(),
            };
            for v in rest.values.by_ref() {
                free(v);
            }
            if !again_free {
                return;
            }
        }
    }

    /// Whether a cache of this thread keeps `value` (`replace` would wait
    /// for itself). Never null: an empty cell keeps nothing alive.
    pub(crate) fn kept_here(&self, value: *mut T) -> bool {
        let me = this_thread();
        // Relaxed: this thread's own stores. A slot whose owner word is
        // ours is ours (only we store our id, and our own later store of
        // `FREE` hides it from us), and its `kept` is our cache's.
        !value.is_null()
            && self.slots().any(|s| {
                s.owner.load(Ordering::Relaxed) == me && s.kept.load(Ordering::Relaxed) == value
            })
    }

    /// Waits until no slot holds `value`, which left its cell before a
    /// grace period that has passed (`replace`). Once it has waited
    /// `stall_timeout`, tells `report` which thread's cache keeps it and
    /// for how long (once; the wait goes on).
    pub(crate) fn wait_unkept(
        &self,
        value: *mut T,
        stall_timeout: Duration,
        report: impl FnOnce(i32, Duration),
    ) {
        let mut backoff = WaitBackoff::new(false);
        let start = Instant::now();
        let mut report = Some(report);
        loop {
            // Full fence: F2 (module docs), again before every look.
            full_fence();
            if !self.kept(value) {
                return;
            }
            let waited = start.elapsed();
            if waited >= stall_timeout {
                if let Some(tid) = self.keeper_tid(value) {
                    if let Some(report) = report.take() {
                        report(tid, waited);
                    }
                }
            }
            backoff.wait();
        }
    }

    /// The thread of a cache that keeps `value`, for a stall report: a
    /// slot's `tid`, read without ordering (the slot may change hands
    /// meanwhile; a report may then name the cache's next thread).
    fn keeper_tid(&self, value: *mut T) -> Option<i32> {
        self.slots()
            .find(|s| s.kept.load(Ordering::Relaxed) == value)
            .map(|s| s.tid.load(Ordering::Relaxed))
    }
}

/// The values a `collect` has yet to free, parked again if a `free`
/// panics.
struct Repark<'a, T> {
    keepers: &'a Keepers<T>,
    values: std::vec::IntoIter<*mut T>,
}

impl<T> Drop for Repark<'_, T> {
    fn drop(&mut self) {
        for v in self.values.by_ref() {
            self.keepers.park(v);
        }
    }
}

impl<T> Keepers<T> {
    /// Drops the parked values and frees the nodes and slots, each once:
    /// a value is unlinked before it is dropped, so a call after a
    /// panicking drop goes on with the rest.
    fn free_all(&mut self) {
        // No cache is left (each borrows the cell), nor any callback of the
        // cell (each holds a handle): the parked values are ours. Relaxed
        // (here and below): `&mut self` orders every earlier access before
        // this drop (loom's atomics have no `get_mut`).
        loop {
            let p = self.parked.load(Ordering::Relaxed);
            if p.is_null() {
                break;
            }
            // SAFETY: parked nodes are boxed by `park`; ours alone now,
            // and unlinked here before anything can panic.
            let node = unsafe { Box::from_raw(p) };
            self.parked.store(node.next, Ordering::Relaxed);
            // SAFETY: a parked value is a boxed `T` the cell gave up,
            // owned by the list (module docs); no cache keeps it.
            unsafe { super::boxed::drop_raw(node.value) };
        }
        let mut s = self.slots.swap(ptr::null_mut(), Ordering::Relaxed);
        while !s.is_null() {
            // SAFETY: slots are boxed by `claim`; no cache is left.
            let slot = unsafe { Box::from_raw(s) };
            s = slot.next;
        }
    }
}

impl<T> Drop for Keepers<T> {
    fn drop(&mut self) {
        /// Goes on freeing while unwinding from a parked value's panicking
        /// drop, as a `Vec` drops its other elements (a second panic then
        /// aborts, as there).
        struct Rest<'a, T>(&'a mut Keepers<T>);
        impl<T> Drop for Rest<'_, T> {
            fn drop(&mut self) {
                self.0.free_all();
            }
        }
        Rest(self).0.free_all();
    }
}

#[cfg(test)]
mod tests;
