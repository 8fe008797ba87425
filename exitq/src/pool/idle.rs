//! Worker slots, the LIFO stack of idle workers, and the futex each idle
//! worker sleeps on.
//!
//! # Slots
//! The pool owns `max_workers` slots, allocated once when it is built (sized
//! at run time). A worker owns one slot for its whole life; the slot's
//! `state` word is both its state machine and the futex it sleeps on, so a
//! wake-up targets exactly one worker and no two workers share a futex word.
//! When a worker leaves, its slot is freed and a later worker reuses it: a
//! slot has a series of *incarnations*, one per worker.
//!
//! State table of `Slot::state` (who may make each transition):
//!
//! | from       | to         | by                                               |
//! |------------|------------|--------------------------------------------------|
//! | `FREE`     | `RUNNING`  | a spawner that claimed the slot (CAS)            |
//! | `RUNNING`  | `IDLE`     | the worker, when the queue is empty              |
//! | `IDLE`     | `NOTIFIED` | a popper, a submitter or shutdown (CAS), then futex wake |
//! | `IDLE`     | `RUNNING`  | the worker, when its re-check finds work (CAS)   |
//! | `IDLE`     | `RETIRING` | the worker, when its keep-alive expired (CAS)    |
//! | `NOTIFIED` | `RUNNING`  | the worker, after waking                         |
//! | `RETIRING` | `RUNNING`  | the worker, when retirement was denied or work arrived |
//! | `RETIRING` | `RETIRED`  | the worker, when it leaves after its keep-alive  |
//! | `RUNNING`  | `RETIRED`  | the worker, when it leaves at shutdown           |
//! | `RUNNING`  | `FREE`     | a spawner whose thread could not be created      |
//! | `RETIRED`  | `FREE`     | exactly one party, chosen by `Slot::flags` (below) |
//!
//! # The idle stack
//! Idle workers are kept in a lock-free LIFO (a Treiber stack over slot
//! indices, with a tag in the head word against ABA). LIFO matters for an
//! elastic pool: the worker woken is the one that went idle last, so under
//! a trickle of work the same few workers stay busy and the rest really
//! stay idle long enough to reach their keep-alive. A FIFO (or a condition
//! variable that wakes in arrival order) rotates through every worker and
//! none ever retires.
//!
//! Entries are never removed from the middle. A worker that stops being idle
//! leaves a stale entry behind; whoever pops an entry checks the slot's
//! state and skips it unless it is `IDLE`. `IN_STACK` in `Slot::flags` says
//! whether an entry for the slot is in the stack, so a slot is never pushed
//! twice (a double push would make the list cyclic): only the worker that
//! sets the bit pushes, and only the popper of the entry clears it.
//!
//! # Who frees a retired slot
//! Invariant: **a slot whose entry is in the idle stack is never `FREE`**
//! (so `FREE` implies `flags == 0` and no entry). A leaving worker cannot
//! free its slot while its entry is in the stack, and a popper cannot tell
//! from the state alone whose `RETIRED` it sees: between its pop and its
//! look at the state, the worker it popped may have left, freed the slot,
//! and a *later* worker may have taken the slot, parked (pushing a new
//! entry) and left too. A popper that freed on seeing `RETIRED` (as this
//! module once did) then freed a slot whose new entry was still in the
//! stack (test `pool::tests::a_stale_pop_does_not_free_a_reused_slot`).
//!
//! So the decision is not made by looking at the state: both parties do one
//! read-modify-write on `Slot::flags`, and their order on that one word
//! picks exactly one freer per incarnation:
//!
//! * the leaving worker stores `RETIRED`, then sets `GONE`. If `IN_STACK`
//!   was clear, no entry exists and no popper will ever act on this
//!   incarnation: the worker frees the slot.
//! * a popper clears `IN_STACK` right after taking the entry off the stack
//!   (one RMW). If `GONE` was set, the worker already left with its entry
//!   in the stack: the popper frees the slot. Otherwise it frees nothing,
//!   whatever state it sees afterwards.
//!
//! A stale popper can still find a *later* incarnation `IDLE` and notify
//! it. That is harmless: the worker is really idle, and waking an idle
//! worker is what the popper was after.
//!
//! What the old free-on-`RETIRED` rule broke, precisely: only this
//! invariant. `RETIRED` is always its worker's last word on the slot, so
//! the early free never gave one slot to two workers; the slot then sat
//! `FREE` with its (new) entry stacked and its in-stack bit set, and the
//! entry either stood in for the next worker of the slot (which found the
//! bit set and pushed nothing) or was popped and skipped as `FREE`. No
//! double push, no lost wake-up, no count drift, no job left unrun. But any
//! reasoning of the form "a `FREE` slot is out of the stack" (the
//! spawn-failure path, or per-worker data kept in the slot) was unsound.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// No worker holds the slot.
pub(crate) const FREE: u32 = 0;
/// The worker is running jobs (or looking for one).
pub(crate) const RUNNING: u32 = 1;
/// The worker is parked (or about to park) on `state`.
pub(crate) const IDLE: u32 = 2;
/// Someone handed the idle worker work (or shutdown) and woke it.
pub(crate) const NOTIFIED: u32 = 3;
/// The worker's keep-alive expired; it is deciding whether to leave.
pub(crate) const RETIRING: u32 = 4;
/// The worker left; the slot is free once it is out of the idle stack.
pub(crate) const RETIRED: u32 = 5;

/// `Slot::flags`: an entry for the slot is in the idle stack (set by the
/// worker before it pushes, cleared by the entry's popper).
const IN_STACK: u32 = 1;
/// `Slot::flags`: the slot's worker left (`RETIRED`); whoever of the worker
/// and the entry's popper comes second to the word frees the slot.
const GONE: u32 = 2;

/// End of the idle stack.
const NIL: u32 = u32::MAX;

/// An invariant check: `debug_assert!` that also holds in the (release
/// mode) loom models, where a double free must fail the model.
macro_rules! invariant {
    ($($t:tt)*) => {
        if cfg!(any(debug_assertions, exitq_loom)) {
            assert!($($t)*);
        }
    };
}

/// One worker's slot. Padded: each is written by its own worker.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The state machine above; also the futex word the worker sleeps on.
    pub(crate) state: AtomicU32,
    /// Link to the next slot in the idle stack.
    next: AtomicU32,
    /// `IN_STACK | GONE` (see the module docs); 0 while the slot is `FREE`.
    flags: AtomicU32,
    /// Jobs this slot's workers completed.
    pub(crate) completed: AtomicU64,
    /// Jobs this slot's workers ran that panicked.
    pub(crate) panicked: AtomicU64,
}

impl Slot {
    fn new() -> Self {
        Self {
            state: AtomicU32::new(FREE),
            next: AtomicU32::new(NIL),
            flags: AtomicU32::new(0),
            completed: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
        }
    }
}

/// All slots and the idle stack over them.
#[derive(Debug)]
pub(crate) struct Slots {
    slots: Box<[CachePadded<Slot>]>,
    /// Low 32 bits: index of the top slot (or `NIL`); high 32 bits: a tag
    /// bumped by every push and pop, so a pop that read a stale `next`
    /// fails its CAS instead of corrupting the list (ABA). Wrapping the tag
    /// needs 2^32 stack operations inside one pop's read-CAS window.
    head: CachePadded<AtomicU64>,
    /// Where the next free-slot search starts.
    hint: AtomicU32,
}

impl Slots {
    /// `n` free slots (`1 <= n < u32::MAX`).
    pub(crate) fn new(n: usize) -> Self {
        assert!(n >= 1 && n < NIL as usize, "slot count out of range");
        Self {
            slots: (0..n).map(|_| CachePadded::new(Slot::new())).collect(),
            head: CachePadded::new(AtomicU64::new(u64::from(NIL))),
            hint: AtomicU32::new(0),
        }
    }

    /// Slot `i`.
    #[inline]
    pub(crate) fn get(&self, i: u32) -> &Slot {
        &self.slots[i as usize]
    }

    /// Number of slots (the pool's maximum).
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Iterates over every slot.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().map(|s| &**s)
    }

    /// The worker of slot `i` goes idle (`RUNNING -> IDLE`) and makes sure
    /// an entry for its slot is in the idle stack (it may still have one
    /// from an earlier idle period: no second push). The caller re-checks
    /// the queue afterwards (after a full fence). True if it pushed.
    pub(crate) fn enter_idle(&self, i: u32) -> bool {
        let slot = self.get(i);
        // SeqCst store and RMW: Dekker with `pop_idle` + `notify` (clear
        // `IN_STACK`, then read the state): if our RMW finds `IN_STACK`
        // set and pushes nothing, the popper that clears it later reads
        // `IDLE` (or later) and notifies us. An idle worker is always in
        // the stack or being notified.
        slot.state.store(IDLE, Ordering::SeqCst);
        let pushed = slot.flags.fetch_or(IN_STACK, Ordering::SeqCst) & IN_STACK == 0;
        if pushed {
            self.push_idle(i);
        }
        pushed
    }

    /// Pushes slot `i` on the idle stack. The caller has just set
    /// `IN_STACK`, so `i` is not in the stack.
    fn push_idle(&self, i: u32) {
        let slot = self.get(i);
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            slot.next.store(head as u32, Ordering::Relaxed);
            let new = (((head >> 32) + 1) << 32) | u64::from(i);
            // SeqCst: Release publishes the `next` store to the Acquire load
            // of `head` in `pop_idle`; SeqCst also puts the push in the
            // single order the worker's queue re-check (Dekker with
            // `Pool::execute`'s fence) relies on.
            match self
                .head
                .compare_exchange_weak(head, new, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Pops the top entry of the idle stack, clears its `IN_STACK` and
    /// returns its index. If the slot's worker already left (`GONE`), frees
    /// the slot. The entry may be stale: the caller checks the state, and
    /// must not act on a `RETIRED` it sees (see the module docs).
    pub(crate) fn pop_idle(&self) -> Option<u32> {
        // Acquire pairs with the SeqCst (Release) CAS in `push_idle`, so the
        // `next` we read is at least the one written before that push.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == NIL {
                return None;
            }
            // Possibly stale if `top` was popped and pushed again since we
            // read `head`; then the tag changed and the CAS below fails.
            let next = self.get(top).next.load(Ordering::Relaxed);
            let new = (((head >> 32) + 1) << 32) | u64::from(next);
            // SeqCst on success: ordered before the `IN_STACK` clear and the
            // state inspection that follow; Acquire on failure pairs with
            // `push_idle` as above.
            match self
                .head
                .compare_exchange_weak(head, new, Ordering::SeqCst, Ordering::Acquire)
            {
                Ok(_) => {
                    let slot = self.get(top);
                    // SeqCst: Dekker with `enter_idle` (store IDLE, then set
                    // `IN_STACK`): one of us sees the other. Acquire (part
                    // of SeqCst) pairs with the Release `GONE` RMW in
                    // `retire`: if we free the slot, its worker's last
                    // writes happen-before our free.
                    let prev = slot.flags.fetch_and(!IN_STACK, Ordering::SeqCst);
                    invariant!(prev & IN_STACK != 0, "popped slot {top} without IN_STACK");
                    if prev & GONE != 0 {
                        // The worker left with this entry in the stack and
                        // left the free to us; no one else frees it.
                        self.release(top);
                    }
                    return Some(top);
                }
                Err(h) => head = h,
            }
        }
    }

    /// True when the idle stack has no entry (stale entries count).
    #[cfg(test)]
    pub(crate) fn idle_is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst) as u32 == NIL
    }

    /// True if popped slot `i` is `IDLE`: worth notifying. Read after the
    /// `IN_STACK` clear in `pop_idle`; a false answer is final for this
    /// pop (the worker pushed a new entry, is running, or is leaving).
    pub(crate) fn is_idle(&self, i: u32) -> bool {
        // SeqCst: the state read of the Dekker with `enter_idle` (store
        // IDLE, then set `IN_STACK`), after our `IN_STACK` clear.
        self.get(i).state.load(Ordering::SeqCst) == IDLE
    }

    /// Hands an idle worker work or shutdown: `IDLE -> NOTIFIED`. The caller
    /// then wakes it (`futex_wake`). `Err` holds the state found instead.
    pub(crate) fn notify(&self, i: u32) -> Result<(), u32> {
        // SeqCst: ordered after the job push (the fence in `push_and_wake`)
        // and the `IN_STACK` clear (Dekker with `enter_idle`); the worker's
        // Acquire load after waking pairs with it and sees the job.
        self.get(i)
            .state
            .compare_exchange(IDLE, NOTIFIED, Ordering::SeqCst, Ordering::SeqCst)
            .map(drop)
    }

    /// The worker of slot `i`, idle, found work in its re-check and takes
    /// itself back: `IDLE -> RUNNING`. False if it was notified meanwhile
    /// (the caller then takes the notification). Its entry stays stacked.
    pub(crate) fn leave_idle(&self, i: u32) -> bool {
        // SeqCst: the other side of `notify`'s CAS; exactly one of the two
        // leaves `IDLE`.
        self.get(i)
            .state
            .compare_exchange(IDLE, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The worker of slot `i`, its keep-alive expired, leaves the
    /// notifiable state: `IDLE -> RETIRING`. False if it was notified.
    pub(crate) fn begin_retire(&self, i: u32) -> bool {
        // SeqCst: the other side of `notify`'s CAS; exactly one of the two
        // leaves `IDLE`.
        self.get(i)
            .state
            .compare_exchange(IDLE, RETIRING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The worker of slot `i` leaves (`RETIRING` or `RUNNING` ->
    /// `RETIRED`), its last access to the slot. Frees the slot now if no
    /// entry of it is in the idle stack; else the entry's popper frees it.
    pub(crate) fn retire(&self, i: u32) {
        let slot = self.get(i);
        slot.state.store(RETIRED, Ordering::Relaxed);
        // Release: publishes `RETIRED` (and everything this worker did) to
        // the popper whose `IN_STACK` clear sees `GONE` (its Acquire RMW).
        // Being RMWs of one word, this and that clear are totally ordered:
        // exactly one of us sees the other's bit (module docs).
        let prev = slot.flags.fetch_or(GONE, Ordering::Release);
        invariant!(prev & GONE == 0, "slot {i} retired twice");
        if prev & IN_STACK == 0 {
            self.release(i);
        }
    }

    /// `RETIRED -> FREE` by the one party `flags` chose; the slot is out
    /// of the idle stack for good (its worker is gone and no one else
    /// pushes it), so its flags start again from 0.
    fn release(&self, i: u32) {
        let slot = self.get(i);
        slot.flags.store(0, Ordering::Relaxed);
        // Release pairs with the Acquire in `claim_free`: the next worker
        // of the slot sees `flags == 0` and the last one's writes.
        let prev = slot.state.swap(FREE, Ordering::Release);
        invariant!(
            prev == RETIRED,
            "slot {i} freed in state {prev}, not RETIRED"
        );
    }

    /// Gives back a slot claimed by `claim_free` whose thread could not be
    /// created (`RUNNING -> FREE`). It never went idle: no entry, flags 0.
    pub(crate) fn unclaim(&self, i: u32) {
        let slot = self.get(i);
        invariant!(
            slot.flags.load(Ordering::Relaxed) == 0,
            "slot {i}: stale flags"
        );
        // Release pairs with the Acquire in `claim_free`.
        slot.state.store(FREE, Ordering::Release);
    }

    /// Claims a `FREE` slot (`FREE -> RUNNING`), starting at a rotating hint.
    pub(crate) fn claim_free(&self) -> Option<u32> {
        let n = self.slots.len() as u32;
        let start = self.hint.load(Ordering::Relaxed) % n;
        for k in 0..n {
            let i = (start + k) % n;
            let slot = self.get(i);
            // Acquire pairs with the Release store of `FREE` (`release`,
            // `unclaim`): the previous owner is completely done with the
            // slot, and we see its `flags` reset.
            if slot.state.load(Ordering::Relaxed) == FREE
                && slot
                    .state
                    .compare_exchange(FREE, RUNNING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // FREE implies no entry in the idle stack (module docs).
                invariant!(
                    slot.flags.load(Ordering::Relaxed) == 0,
                    "slot {i}: stale flags"
                );
                self.hint.store(i + 1, Ordering::Relaxed);
                return Some(i);
            }
        }
        None
    }

    /// True if slot `i` has an entry in the idle stack (or a popper is
    /// between taking it and clearing the bit). For tests and models.
    #[cfg(any(test, exitq_loom))]
    pub(crate) fn in_stack(&self, i: u32) -> bool {
        self.get(i).flags.load(Ordering::SeqCst) & IN_STACK != 0
    }
}

/// Sleeps while `word == expected`, at most `timeout` (forever if `None`).
/// Returns on a wake, a timeout, a signal or a changed word; callers always
/// re-check the state.
#[cfg(not(exitq_loom))]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY:
    //   * `word` is a live, aligned u32 for the duration of the call (we
    //     borrow it); FUTEX_WAIT only reads it.
    //   * `ts_ptr` is null or points at `ts`, which outlives the call.
    //   * Errors (EAGAIN when the word changed, ETIMEDOUT, EINTR) are all
    //     handled by the caller re-checking the state.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        );
    }
}

/// Wakes one thread sleeping on `word`.
#[cfg(not(exitq_loom))]
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; `word` is live.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1i32,
        );
    }
}

/// Under loom (which has no futex): a wait is a yield, as a spurious
/// wake-up would be; callers re-check the state anyway.
#[cfg(exitq_loom)]
pub(crate) fn futex_wait(_word: &AtomicU32, _expected: u32, _timeout: Option<Duration>) {
    crate::sync::yield_now();
}

/// Under loom: waiters only yield, so there is nothing to wake.
#[cfg(exitq_loom)]
pub(crate) fn futex_wake(_word: &AtomicU32) {}

/// Entry points for the loom model of the slot protocol
/// (`tests/loom_pool.rs`, only built with `--cfg exitq_loom`).
#[cfg(exitq_loom)]
pub mod model {
    use super::*;

    /// The slot table, with the steps the pool runs on it.
    #[derive(Debug)]
    pub struct SlotTable(Slots);

    impl SlotTable {
        /// `n` free slots.
        pub fn new(n: usize) -> Self {
            Self(Slots::new(n))
        }
        /// A spawner claims a free slot.
        pub fn claim_free(&self) -> Option<u32> {
            self.0.claim_free()
        }
        /// The worker of `i` goes idle (pushes an entry if it has none).
        pub fn enter_idle(&self, i: u32) -> bool {
            self.0.enter_idle(i)
        }
        /// A waker pops an entry (freeing the slot if its worker left).
        pub fn pop_idle(&self) -> Option<u32> {
            self.0.pop_idle()
        }
        /// A waker's look at popped slot `i`: worth notifying?
        pub fn is_idle(&self, i: u32) -> bool {
            self.0.is_idle(i)
        }
        /// A waker notifies popped slot `i` if it is idle.
        pub fn notify(&self, i: u32) -> Result<(), u32> {
            self.0.notify(i)
        }
        /// The idle worker of `i` found work itself (`IDLE -> RUNNING`).
        pub fn leave_idle(&self, i: u32) -> bool {
            self.0.leave_idle(i)
        }
        /// The worker of `i` takes a notification (`NOTIFIED -> RUNNING`).
        pub fn take_notification(&self, i: u32) {
            assert_eq!(self.state(i), NOTIFIED);
            self.0.get(i).state.store(RUNNING, Ordering::Relaxed);
        }
        /// The worker of `i`, keep-alive expired: `IDLE -> RETIRING`.
        pub fn begin_retire(&self, i: u32) -> bool {
            self.0.begin_retire(i)
        }
        /// The worker of `i` leaves.
        pub fn retire(&self, i: u32) {
            self.0.retire(i)
        }
        /// Slot `i`'s state word.
        pub fn state(&self, i: u32) -> u32 {
            self.0.get(i).state.load(Ordering::SeqCst)
        }
        /// True if slot `i` has an entry in the idle stack.
        pub fn in_stack(&self, i: u32) -> bool {
            self.0.in_stack(i)
        }
    }

    /// `Slot::state` values.
    pub const FREE: u32 = super::FREE;
    /// See [`FREE`].
    pub const RUNNING: u32 = super::RUNNING;
    /// See [`FREE`].
    pub const IDLE: u32 = super::IDLE;
    /// See [`FREE`].
    pub const NOTIFIED: u32 = super::NOTIFIED;
    /// See [`FREE`].
    pub const RETIRED: u32 = super::RETIRED;
}

#[cfg(all(test, not(exitq_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn idle_stack_is_lifo_and_skips_nothing() {
        let s = Slots::new(4);
        for i in 0..4 {
            assert_eq!(s.claim_free(), Some(i));
            assert!(s.enter_idle(i));
            // A second idle period with the entry still in: no push.
            assert!(!s.enter_idle(i));
        }
        let popped: Vec<u32> = std::iter::from_fn(|| s.pop_idle()).collect();
        assert_eq!(popped, vec![3, 2, 1, 0]);
        assert!(s.idle_is_empty());
        assert!((0..4).all(|i| !s.in_stack(i)));
    }

    #[test]
    fn idle_stack_concurrent_push_pop_loses_nothing() {
        const ROUNDS: usize = if cfg!(miri) { 50 } else { 20_000 };
        let s = Arc::new(Slots::new(8));
        for i in 0..8 {
            assert_eq!(s.claim_free(), Some(i));
        }
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    // Each thread owns slots 2t and 2t+1 and cycles them.
                    let mine = [2 * t, 2 * t + 1];
                    let (mut pushes, mut pops) = (0usize, 0usize);
                    for r in 0..ROUNDS {
                        if s.enter_idle(mine[r % 2]) {
                            pushes += 1;
                        }
                        if s.pop_idle().is_some() {
                            pops += 1;
                        }
                    }
                    (pushes, pops)
                })
            })
            .collect();
        let (pushes, pops) = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .fold((0, 0), |(a, b), (p, q)| (a + p, b + q));
        let rest: Vec<u32> = std::iter::from_fn(|| s.pop_idle()).collect();
        // Every push was popped exactly once, by a thread or the drain, and
        // the stack never held a slot twice.
        assert_eq!(pushes, pops + rest.len());
        let mut sorted = rest.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), rest.len(), "duplicate entry: {rest:?}");
        assert!(pushes >= ROUNDS);
        assert!((0..8).all(|i| !s.in_stack(i)));
    }

    #[test]
    fn futex_wait_times_out_and_wakes() {
        let w = AtomicU32::new(7);
        let t0 = std::time::Instant::now();
        futex_wait(&w, 7, Some(Duration::from_millis(20)));
        assert!(t0.elapsed() >= Duration::from_millis(15));
        // Mismatched value: returns at once.
        futex_wait(&w, 8, None);
        futex_wake(&w);
    }

    #[test]
    fn a_worker_without_an_entry_frees_its_slot_when_it_leaves() {
        let s = Slots::new(2);
        let a = s.claim_free().unwrap();
        let b = s.claim_free().unwrap();
        assert_ne!(a, b);
        assert!(s.claim_free().is_none());
        s.retire(a);
        assert_eq!(s.get(a).state.load(Ordering::SeqCst), FREE);
        assert_eq!(s.claim_free(), Some(a));
        s.unclaim(b);
        assert_eq!(s.claim_free(), Some(b));
    }

    #[test]
    fn a_worker_leaving_with_its_entry_in_the_stack_is_freed_by_the_popper() {
        let s = Slots::new(1);
        assert_eq!(s.claim_free(), Some(0));
        s.enter_idle(0);
        assert!(s.begin_retire(0));
        s.retire(0);
        // Not free while the entry is in the stack.
        assert_eq!(s.get(0).state.load(Ordering::SeqCst), RETIRED);
        assert!(s.claim_free().is_none());
        // Its popper frees it (and does not notify).
        assert_eq!(s.pop_idle(), Some(0));
        assert_eq!(s.notify(0), Err(FREE));
        assert_eq!(s.claim_free(), Some(0));
    }

    /// The interleaving of `pool::tests::a_stale_pop_does_not_free_a_reused_slot`
    /// on the slot table alone, step by step.
    #[test]
    fn a_stale_popper_acts_on_no_later_worker_of_the_slot() {
        let s = Slots::new(1);
        // Worker 1 idle; a popper takes its entry and stalls.
        assert_eq!(s.claim_free(), Some(0));
        assert!(s.enter_idle(0));
        assert_eq!(s.pop_idle(), Some(0));
        // Worker 1 leaves: no entry in the stack, so it frees the slot.
        assert!(s.begin_retire(0));
        s.retire(0);
        assert_eq!(s.get(0).state.load(Ordering::SeqCst), FREE);
        // Worker 2 takes the slot, parks (new entry) and leaves.
        assert_eq!(s.claim_free(), Some(0));
        assert!(s.enter_idle(0), "a new entry for worker 2");
        assert!(s.begin_retire(0));
        s.retire(0);
        // The stale popper resumes: it sees worker 2's RETIRED and may not
        // free the slot; its `notify` fails and it is done.
        assert_eq!(s.notify(0), Err(RETIRED));
        assert_eq!(s.get(0).state.load(Ordering::SeqCst), RETIRED);
        assert!(s.in_stack(0) && !s.idle_is_empty());
        // Worker 2's entry's popper frees it.
        assert_eq!(s.pop_idle(), Some(0));
        assert_eq!(s.get(0).state.load(Ordering::SeqCst), FREE);
        assert!(s.idle_is_empty() && !s.in_stack(0));
        assert_eq!(s.claim_free(), Some(0));
    }

    /// Workers cycle through incarnations of two slots (claim, park, get
    /// notified or leave) while a waker pops and notifies. A slot is never
    /// held by two workers at once; a claimed slot has `flags == 0` (no
    /// entry of an earlier worker was left in the stack); and at the end
    /// every slot is free (a double free trips the assertion in `release`,
    /// a missed one leaves a slot `RETIRED`).
    #[test]
    fn retire_and_pop_races_free_each_slot_once() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        const ROUNDS: usize = if cfg!(miri) { 30 } else { 20_000 };
        let s = Arc::new(Slots::new(2));
        let holders: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let stop = Arc::new(AtomicBool::new(false));
        let woke = Arc::new(AtomicUsize::new(0));
        let pop_and_notify = |s: &Slots, woke: &AtomicUsize| {
            if let Some(i) = s.pop_idle() {
                if s.notify(i).is_ok() {
                    woke.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        let waker = {
            let (s, stop, woke) = (s.clone(), stop.clone(), woke.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    pop_and_notify(&s, &woke);
                }
            })
        };
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (s, holders, woke) = (s.clone(), holders.clone(), woke.clone());
                std::thread::spawn(move || {
                    let mut left = 0;
                    for round in 0..ROUNDS {
                        let Some(i) = s.claim_free() else {
                            // Both slots held, or retired with an entry in
                            // the stack: a pop frees such a slot.
                            pop_and_notify(&s, &woke);
                            continue;
                        };
                        assert_eq!(holders[i as usize].fetch_add(1, Ordering::SeqCst), 0);
                        assert_eq!(s.get(i).flags.load(Ordering::SeqCst), 0, "stale flags");
                        loop {
                            s.enter_idle(i);
                            // Stay idle a moment now and then: a waker
                            // gets to notify us.
                            if round % 4 == 0 {
                                std::thread::yield_now();
                            }
                            if s.begin_retire(i) {
                                break;
                            }
                            // Notified: take it, "run", park again.
                            assert_eq!(s.get(i).state.load(Ordering::SeqCst), NOTIFIED);
                            s.get(i).state.store(RUNNING, Ordering::Relaxed);
                        }
                        assert_eq!(holders[i as usize].fetch_sub(1, Ordering::SeqCst), 1);
                        s.retire(i);
                        left += 1;
                    }
                    left
                })
            })
            .collect();
        let left: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        waker.join().unwrap();
        assert!(left >= ROUNDS, "workers left {left} times");
        let woke = woke.load(Ordering::Relaxed);
        assert!(woke > 0, "no waker ever found an idle worker");
        // Drain the stack: the popper of each remaining entry frees it.
        while s.pop_idle().is_some() {}
        for i in 0..2 {
            assert_eq!(s.get(i).state.load(Ordering::SeqCst), FREE, "slot {i}");
            assert_eq!(s.get(i).flags.load(Ordering::SeqCst), 0, "slot {i}");
        }
    }
}
