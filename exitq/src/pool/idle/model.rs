//! Entry points for the loom model of the slot protocol
//! (`tests/loom_pool.rs`, only built with `--cfg exitq_loom`): the slot
//! table's own steps, forwarded one to one, so the model runs the code the
//! pool runs.

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
        // SeqCst: model code, no pair (the strongest read keeps the
        // models' assertions simple).
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
