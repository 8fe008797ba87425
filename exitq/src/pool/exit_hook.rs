//! A worker's exit bookkeeping: registered with exitq when the worker
//! starts ([`crate::Domain::register_exit`]), run by the domain's reclaimer
//! after the worker thread has exited and a grace period has passed.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Inner, RetireReason};

/// What the worker tells its exit hook: written once just before it
/// returns from its main loop.
#[derive(Debug)]
pub(crate) struct ExitRecord {
    pub(crate) slot: u32,
    reason: AtomicU8,
    decided_ns: AtomicU64,
}

impl ExitRecord {
    /// Records why and when (since the pool's epoch) the worker leaves.
    pub(crate) fn set(&self, reason: RetireReason, at: Duration) {
        self.decided_ns.store(
            at.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
        let r = match reason {
            RetireReason::Idle => 1,
            RetireReason::Shutdown => 2,
        };
        // Release pairs with the Acquire in `reason` (the hook runs on
        // another thread, after this one exited).
        self.reason.store(r, Ordering::Release);
    }

    /// Why the worker left. A worker that unwound out of its loop (it
    /// cannot: jobs are caught) would report `Shutdown`.
    pub(crate) fn reason(&self) -> RetireReason {
        match self.reason.load(Ordering::Acquire) {
            1 => RetireReason::Idle,
            _ => RetireReason::Shutdown,
        }
    }

    /// When the worker decided to leave, in ns since the pool's epoch.
    pub(crate) fn decided_ns(&self) -> u64 {
        self.decided_ns.load(Ordering::Relaxed)
    }
}

thread_local! {
    /// The pool this thread is a worker of (address of its `Inner`).
    static WORKER_OF: Cell<usize> = const { Cell::new(0) };
}

/// True when the current thread is a worker of `inner`.
pub(crate) fn on_worker_of(inner: &Inner) -> bool {
    WORKER_OF.with(|w| w.get() == inner as *const Inner as usize)
}

/// Registers the current worker thread's exit bookkeeping. Everything it
/// needs is allocated here, at start, so the exit path allocates nothing.
pub(crate) fn register(inner: &Arc<Inner>, slot: u32) -> Arc<ExitRecord> {
    WORKER_OF.with(|w| w.set(Arc::as_ptr(inner) as usize));
    let record = Arc::new(ExitRecord {
        slot,
        reason: AtomicU8::new(0),
        decided_ns: AtomicU64::new(0),
    });
    let inner = Arc::clone(inner);
    let rec = Arc::clone(&record);
    // The closure (and exitq's node for it) is allocated now; at exit the
    // thread's exitq destructor pushes it with one CAS, and the reclaimer
    // runs it after a grace period.
    let domain = inner.domain.clone();
    domain.register_exit(move || inner.worker_exited(&rec));
    record
}
