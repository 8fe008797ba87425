//! Worker slots and the LIFO stack of idle workers: the slot table.
//!
//! One idea that reads better whole: a slot's `state`, its `flags` and its
//! entry in the idle stack are one protocol (who may free a slot depends on
//! whether its entry is still stacked), so they live in one file.
//!
//! # Slots
//! The pool owns `max_workers` slots, allocated once when it is built (sized
//! at run time). A worker owns one slot for its whole life; the slot's
//! `state` word is both its state machine and the futex it sleeps on
//! (`futex.rs`), so a wake-up targets exactly one worker and no two workers
//! share a futex word.
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
//! State table of `Slot::flags` (one incarnation; named bits `IN_STACK`,
//! `GONE`):
//!
//! | from                | to                  | by                                          |
//! |---------------------|---------------------|---------------------------------------------|
//! | `0`                 | `IN_STACK`          | the worker going idle (`enter_idle`), which then pushes the entry |
//! | `IN_STACK`          | `0`                 | the popper of the entry (`pop_idle`)        |
//! | `0`                 | `GONE`              | the leaving worker (`retire`): it frees the slot |
//! | `IN_STACK`          | `IN_STACK \| GONE`  | the leaving worker (`retire`): the popper will free it |
//! | `IN_STACK \| GONE`  | `GONE`              | the popper (`pop_idle`): it frees the slot  |
//! | `GONE`              | `0`                 | the freer (`release`), with `RETIRED -> FREE` |
//!
//! A worker that finds `IN_STACK` already set when it goes idle pushes
//! nothing: its earlier entry still stands for it.
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
//!
//! # Orderings
//! Each non-Relaxed access below names its pair. In short: the
//! `state`/`flags` accesses of `enter_idle` and `pop_idle` + `is_idle` are
//! SeqCst (a store-buffering Dekker pair: each side writes one word and
//! reads the other); a slot leaves `IDLE` by one of three CASes (`notify`,
//! `leave_idle`, `begin_retire`), of which exactly one wins (the RMW order
//! of one word), and a worker that loses to `notify` acquires what the
//! notifier did before; the `GONE` RMW is Release and the popper's clear
//! Acquire, so a slot's freer sees its last worker's writes; `FREE` is
//! stored Release and claimed Acquire.

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

/// `Slots::head`: the low 32 bits hold the top slot's index (or `NIL`).
const HEAD_TOP: u64 = 0xffff_ffff;
/// `Slots::head`: the high 32 bits hold the ABA tag; one step of it.
const HEAD_TAG_ONE: u64 = 1 << 32;

/// The index of the top slot in idle-stack head word `head` (or `NIL`).
#[inline]
fn head_top(head: u64) -> u32 {
    (head & HEAD_TOP) as u32
}

/// The head word after `head` with `top` on top: the tag bumped once.
#[inline]
fn head_with_top(head: u64, top: u32) -> u64 {
    ((head & !HEAD_TOP).wrapping_add(HEAD_TAG_ONE)) | u64::from(top)
}

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
    /// Low 32 bits (`HEAD_TOP`): index of the top slot (or `NIL`); high 32
    /// bits: a tag bumped (`HEAD_TAG_ONE`) by every push and pop, so a pop
    /// that read a stale `next` fails its CAS instead of corrupting the
    /// list (ABA). Wrapping the tag needs 2^32 stack operations inside one
    /// pop's read-CAS window.
    head: CachePadded<AtomicU64>,
    /// Where the next free-slot search starts.
    hint: AtomicU32,
}

impl Slots {
    /// `n` free slots (`1 <= n < u32::MAX`).
    #[cfg(any(test, exitq_loom))]
    pub(crate) fn new(n: usize) -> Self {
        Self::try_new(n).expect("memory for the slots")
    }

    /// `n` free slots (`1 <= n < u32::MAX`), or the allocation error: the
    /// table is allocated at build time, `size_of::<CachePadded<Slot>>()`
    /// (128 bytes on x86-64) per slot, and a pool whose `max_workers`
    /// asks for more memory than there is gets an error from `build`, not
    /// an abort.
    pub(crate) fn try_new(n: usize) -> Result<Self, std::collections::TryReserveError> {
        assert!(n >= 1 && n < NIL as usize, "slot count out of range");
        let mut slots = Vec::new();
        slots.try_reserve_exact(n)?;
        slots.extend((0..n).map(|_| CachePadded::new(Slot::new())));
        Ok(Self {
            slots: slots.into_boxed_slice(),
            head: CachePadded::new(AtomicU64::new(u64::from(NIL))),
            hint: AtomicU32::new(0),
        })
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
        // SeqCst store and RMW: the worker's side of the Dekker pair with
        // `pop_idle` + `is_idle` (clear `IN_STACK`, then read the state):
        // pairs with the popper's SeqCst clear and SeqCst state load. If
        // our RMW finds `IN_STACK` set and pushes nothing, the popper that
        // clears it later reads `IDLE` (or later) and notifies us. An idle
        // worker is always in the stack or being notified.
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
            slot.next.store(head_top(head), Ordering::Relaxed);
            let new = head_with_top(head, i);
            // SeqCst: the Release half pairs with the Acquire load of `head`
            // in `pop_idle` (publishes the `next` store); SeqCst also puts
            // the push in the single total order of the submitter's Dekker
            // pair with the worker going idle (`wake.rs` docs), where it
            // pairs with the submitter's fence before its pop.
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
            let top = head_top(head);
            if top == NIL {
                return None;
            }
            // Possibly stale if `top` was popped and pushed again since we
            // read `head`; then the tag changed and the CAS below fails.
            let next = self.get(top).next.load(Ordering::Relaxed);
            let new = head_with_top(head, next);
            // SeqCst on success: pairs with the SeqCst CAS in `push_idle`
            // (one total order of stack operations), before the `IN_STACK`
            // clear and the state inspection that follow; Acquire on
            // failure pairs with `push_idle`'s CAS as the load above does.
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
        // SeqCst: test code, no pair (the strongest read keeps the tests'
        // reasoning simple).
        head_top(self.head.load(Ordering::SeqCst)) == NIL
    }

    /// True if popped slot `i` is `IDLE`: worth notifying. Read after the
    /// `IN_STACK` clear in `pop_idle`; a false answer is final for this
    /// pop (the worker pushed a new entry, is running, or is leaving).
    pub(crate) fn is_idle(&self, i: u32) -> bool {
        // SeqCst: the popper's state read of the Dekker pair with
        // `enter_idle` (store IDLE, then set `IN_STACK`): pairs with its
        // SeqCst store of IDLE; read after our SeqCst `IN_STACK` clear.
        self.get(i).state.load(Ordering::SeqCst) == IDLE
    }

    /// Hands an idle worker work or shutdown: `IDLE -> NOTIFIED`. The caller
    /// then wakes it (`futex::wake`). `Err` holds the state found instead.
    pub(crate) fn notify(&self, i: u32) -> Result<(), u32> {
        // SeqCst: pairs with the worker's Acquire load of `state` after it
        // wakes (`worker::idle_wait`) and with the Acquire-on-failure of
        // `leave_idle` / `begin_retire`: a worker that finds `NOTIFIED` sees
        // what the notifier did before (its `waking` increment, the job).
        // SeqCst keeps it after the popper's SeqCst `IN_STACK` clear and
        // state read (the Dekker pair with `enter_idle`).
        self.get(i)
            .state
            .compare_exchange(IDLE, NOTIFIED, Ordering::SeqCst, Ordering::SeqCst)
            .map(drop)
    }

    /// The worker of slot `i`, idle, found work in its re-check and takes
    /// itself back: `IDLE -> RUNNING`. False if it was notified meanwhile
    /// (the caller then takes the notification). Its entry stays stacked.
    pub(crate) fn leave_idle(&self, i: u32) -> bool {
        // SeqCst: exactly one of this and `notify`'s CAS leaves `IDLE` (the
        // RMW order of one word). On failure (`NOTIFIED`), the Acquire half
        // pairs with `notify`'s SeqCst CAS: our `arrived` then comes after
        // the notifier's `waking` increment. On success the ordering is
        // stronger than needed: nobody learns anything from `RUNNING`.
        self.get(i)
            .state
            .compare_exchange(IDLE, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The worker of slot `i`, its keep-alive expired, leaves the
    /// notifiable state: `IDLE -> RETIRING`. False if it was notified.
    pub(crate) fn begin_retire(&self, i: u32) -> bool {
        // SeqCst: as in `leave_idle` (pairs with `notify`'s CAS on failure;
        // stronger than needed on success).
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
        // Release: pairs with the Acquire half of the popper's SeqCst
        // `IN_STACK` clear in `pop_idle`: a popper that sees `GONE` (and
        // frees the slot) sees `RETIRED` and everything this worker did.
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
        // SeqCst: test and model code, no pair (the strongest read keeps
        // the models' assertions simple).
        self.get(i).flags.load(Ordering::SeqCst) & IN_STACK != 0
    }
}

/// Entry points for the loom model of the slot protocol
/// (`tests/loom_pool.rs`, only built with `--cfg exitq_loom`).
#[cfg(exitq_loom)]
pub mod model;

#[cfg(all(test, not(exitq_loom)))]
mod tests;
