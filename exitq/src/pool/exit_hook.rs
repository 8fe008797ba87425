//! A worker's exit bookkeeping: registered with exitq when the worker
//! starts ([`crate::Domain::register_exit`]), run by the domain's reclaimer
//! after the worker thread has exited and a grace period has passed.
//!
//! This is why a worker's exit takes no pool lock: the live thread count,
//! the retirement counters, the [`PoolBuilder::on_retire`](super::PoolBuilder::on_retire)
//! record, the retirement token (`retire.rs`) and the shutdown hand-shake are
//! all updated here, on the reclaimer, in a batch with other exits. The
//! worker itself only writes its [`ExitRecord`] and returns.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{RetireReason, Retirement};
use super::inner::Inner;
use crate::batch::drop_payload;

/// `ExitRecord::reason`: not written yet (the worker unwound out of its
/// loop, which it cannot: jobs are caught).
const UNSET: u8 = 0;
/// `ExitRecord::reason`: [`RetireReason::Idle`].
const IDLE: u8 = 1;
/// `ExitRecord::reason`: [`RetireReason::Shutdown`].
const SHUTDOWN: u8 = 2;

/// What the worker tells its exit hook: written once just before it
/// returns from its main loop.
#[derive(Debug)]
pub(crate) struct ExitRecord {
    pub(crate) slot: u32,
    reason: AtomicU8,
    decided_ns: AtomicU64,
    keep_alive_ns: AtomicU64,
}

impl ExitRecord {
    /// Records why and when (since the pool's epoch) the worker leaves,
    /// and the keep-alive it drew for its last idle period (zero at
    /// shutdown).
    pub(crate) fn set(&self, reason: RetireReason, at: Duration, keep_alive: Duration) {
        self.decided_ns.store(saturating_ns(at), Ordering::Relaxed);
        self.keep_alive_ns
            .store(saturating_ns(keep_alive), Ordering::Relaxed);
        let r = match reason {
            RetireReason::Idle => IDLE,
            RetireReason::Shutdown => SHUTDOWN,
        };
        // Release pairs with the Acquire in `reason` (the hook runs on
        // another thread, after this one exited).
        self.reason.store(r, Ordering::Release);
    }

    /// Why the worker left. A worker that unwound out of its loop (it
    /// cannot: jobs are caught) would report `Shutdown`.
    pub(crate) fn reason(&self) -> RetireReason {
        // Acquire: pairs with the Release store in `set`.
        match self.reason.load(Ordering::Acquire) {
            IDLE => RetireReason::Idle,
            // `SHUTDOWN`, or `UNSET`.
            _ => RetireReason::Shutdown,
        }
    }

    /// When the worker decided to leave, in ns since the pool's epoch.
    pub(crate) fn decided_ns(&self) -> u64 {
        self.decided_ns.load(Ordering::Relaxed)
    }

    /// The keep-alive of the worker's last idle period.
    pub(crate) fn keep_alive(&self) -> Duration {
        Duration::from_nanos(self.keep_alive_ns.load(Ordering::Relaxed))
    }
}

/// `d` in nanoseconds, `u64::MAX` beyond 584 years.
fn saturating_ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
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
        reason: AtomicU8::new(UNSET),
        decided_ns: AtomicU64::new(0),
        keep_alive_ns: AtomicU64::new(0),
    });
    let inner = Arc::clone(inner);
    let rec = Arc::clone(&record);
    // The closure (and exitq's node for it) is allocated now; at exit the
    // thread's exitq destructor pushes it with one CAS, and the reclaimer
    // runs it after a grace period.
    let domain = inner.domain.clone();
    domain.register_exit(move || worker_exited(&inner, &rec));
    record
}

/// The exit bookkeeping of one worker: runs after its thread exited.
fn worker_exited(inner: &Inner, record: &ExitRecord) {
    let cleaned_at = Instant::now();
    let reason = record.reason();
    match reason {
        RetireReason::Idle => inner.retired_idle.fetch_add(1, Ordering::Relaxed),
        RetireReason::Shutdown => inner.retired_shutdown.fetch_add(1, Ordering::Relaxed),
    };
    if let Some(cb) = &inner.cfg.on_retire {
        let r = Retirement {
            slot: record.slot as usize,
            reason,
            decided_at: inner.epoch + Duration::from_nanos(record.decided_ns()),
            cleaned_at,
            keep_alive: record.keep_alive(),
        };
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| cb(&r))) {
            // Under `catch_unwind` too: the rest of the bookkeeping must run.
            drop_payload(payload);
        }
    }
    if reason == RetireReason::Idle {
        // The token taken in `try_retire` comes back only now, after the
        // exit's grace period: at most K retirements in flight. Release:
        // pairs with the Acquire CAS in `try_retire` (retire.rs docs).
        inner.retire_tokens.fetch_add(1, Ordering::Release);
    }
    // AcqRel: the Release half publishes the counters above to the Acquire
    // loads of `threads` in `Inner::shutdown` and `Inner::stats`.
    if inner.threads.fetch_sub(1, Ordering::AcqRel) == 1 && inner.is_shutdown() {
        let _g = inner.exited.0.lock().unwrap_or_else(|e| e.into_inner());
        inner.exited.1.notify_all();
    }
}
