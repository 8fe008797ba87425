//! Worker slots, the LIFO stack of idle workers, and the futex each idle
//! worker sleeps on.
//!
//! # Slots
//! The pool owns `max_workers` slots, allocated once when it is built (sized
//! at run time). A worker owns one slot for its whole life; the slot's
//! `state` word is both its state machine and the futex it sleeps on, so a
//! wake-up targets exactly one worker and no two workers share a futex word.
//!
//! State table of `Slot::state` (who may make each transition):
//!
//! | from       | to         | by                                              |
//! |------------|------------|-------------------------------------------------|
//! | `FREE`     | `RUNNING`  | a spawner that claimed the slot (CAS)           |
//! | `RUNNING`  | `IDLE`     | the worker, when the queue is empty             |
//! | `IDLE`     | `NOTIFIED` | a submitter or shutdown (CAS), then futex wake  |
//! | `IDLE`     | `RUNNING`  | the worker, when its re-check finds work (CAS)  |
//! | `IDLE`     | `RETIRING` | the worker, when its keep-alive expired (CAS)   |
//! | `NOTIFIED` | `RUNNING`  | the worker, after waking                        |
//! | `RETIRING` | `IDLE`     | the worker, when retirement was denied          |
//! | `RETIRING` | `RETIRED`  | the worker, when it leaves                      |
//! | `RETIRED`  | `FREE`     | whoever sees it last outside the idle stack (CAS)|
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
//! state and skips it unless it is `IDLE`. `Slot::in_idle` says whether an
//! entry for the slot is in the stack, so a slot is never pushed twice (a
//! double push would make the list cyclic). A slot whose entry is still in
//! the stack is never `FREE`: a `RETIRED` slot is freed only by the one who
//! observes it outside the stack.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;

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

/// End of the idle stack.
const NIL: u32 = u32::MAX;

/// One worker's slot. Padded: each is written by its own worker.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The state machine above; also the futex word the worker sleeps on.
    pub(crate) state: AtomicU32,
    /// Link to the next slot in the idle stack.
    next: AtomicU32,
    /// True while an entry for this slot is in the idle stack.
    pub(crate) in_idle: AtomicBool,
    /// Jobs this slot's workers completed (single writer at a time).
    pub(crate) completed: AtomicU64,
    /// Jobs this slot's workers ran that panicked.
    pub(crate) panicked: AtomicU64,
}

impl Slot {
    fn new() -> Self {
        Self {
            state: AtomicU32::new(FREE),
            next: AtomicU32::new(NIL),
            in_idle: AtomicBool::new(false),
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
            head: CachePadded::new(AtomicU64::new(NIL as u64)),
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

    /// Pushes slot `i` on the idle stack. The caller has just set
    /// `in_idle` from false to true, so `i` is not in the stack.
    pub(crate) fn push_idle(&self, i: u32) {
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

    /// Pops the top entry of the idle stack, clears its `in_idle` flag and
    /// returns its index. The entry may be stale: the caller checks state.
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
            // SeqCst on success: ordered before the `in_idle` clear and the
            // state inspection that follow (see `Slot` state table); Acquire
            // on failure pairs with `push_idle` as above.
            match self
                .head
                .compare_exchange_weak(head, new, Ordering::SeqCst, Ordering::Acquire)
            {
                Ok(_) => {
                    // SeqCst: Dekker with the worker, which stores its state
                    // and then swaps `in_idle`; one of us sees the other.
                    self.get(top).in_idle.store(false, Ordering::SeqCst);
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

    /// Claims a `FREE` slot (`FREE -> RUNNING`), starting at a rotating hint.
    pub(crate) fn claim_free(&self) -> Option<u32> {
        let n = self.slots.len() as u32;
        let start = self.hint.load(Ordering::Relaxed) % n;
        for k in 0..n {
            let i = (start + k) % n;
            let slot = self.get(i);
            // Acquire pairs with the Release in the `RETIRED -> FREE` CAS: the
            // previous owner is completely done with the slot.
            if slot.state.load(Ordering::Relaxed) == FREE
                && slot
                    .state
                    .compare_exchange(FREE, RUNNING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                self.hint.store(i + 1, Ordering::Relaxed);
                return Some(i);
            }
        }
        None
    }

    /// Frees a `RETIRED` slot that is outside the idle stack. Called by both
    /// the retiring worker and poppers; only one CAS succeeds.
    pub(crate) fn free_retired(&self, i: u32) {
        // Release pairs with the Acquire in `claim_free`.
        let _ =
            self.get(i)
                .state
                .compare_exchange(RETIRED, FREE, Ordering::Release, Ordering::Relaxed);
    }
}

/// Sleeps while `word == expected`, at most `timeout` (forever if `None`).
/// Returns on a wake, a timeout, a signal or a changed word; callers always
/// re-check the state.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_stack_is_lifo_and_skips_nothing() {
        let s = Slots::new(4);
        for i in 0..4 {
            assert!(!s.get(i).in_idle.swap(true, Ordering::SeqCst));
            s.push_idle(i);
        }
        let popped: Vec<u32> = std::iter::from_fn(|| s.pop_idle()).collect();
        assert_eq!(popped, vec![3, 2, 1, 0]);
        assert!(s.idle_is_empty());
        assert!((0..4).all(|i| !s.get(i).in_idle.load(Ordering::SeqCst)));
    }

    #[test]
    fn idle_stack_concurrent_push_pop_loses_nothing() {
        const ROUNDS: usize = if cfg!(miri) { 50 } else { 20_000 };
        let s = std::sync::Arc::new(Slots::new(8));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    // Each thread owns slots 2t and 2t+1 and cycles them.
                    let mine = [2 * t, 2 * t + 1];
                    let (mut pushes, mut pops) = (0usize, 0usize);
                    for r in 0..ROUNDS {
                        let i = mine[r % 2];
                        if !s.get(i).in_idle.swap(true, Ordering::SeqCst) {
                            s.push_idle(i);
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
        assert!((0..8).all(|i| !s.get(i).in_idle.load(Ordering::SeqCst)));
    }

    #[test]
    fn claim_and_free() {
        let s = Slots::new(2);
        let a = s.claim_free().unwrap();
        let b = s.claim_free().unwrap();
        assert_ne!(a, b);
        assert!(s.claim_free().is_none());
        s.get(a).state.store(RETIRED, Ordering::SeqCst);
        s.free_retired(a);
        assert_eq!(s.claim_free(), Some(a));
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
}
