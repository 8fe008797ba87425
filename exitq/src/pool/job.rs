//! What the queue holds: a [`Job`], run on a worker with its panic caught
//! and counted; and [`Rejected`], a job handed back after shutdown.

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use super::idle::Slot;
use crate::batch::drop_payload;

/// A job handed back by [`Pool::shutdown_now`](super::Pool::shutdown_now)
/// or [`Rejected`]-free paths. Run it with [`Job::run`] or drop it.
pub struct Job {
    f: Box<dyn FnOnce() + Send + 'static>,
    /// Scoped jobs must run: their scope waits for them and they may borrow.
    pub(super) scoped: bool,
}

impl Job {
    pub(super) fn owned(f: Box<dyn FnOnce() + Send + 'static>) -> Self {
        Self { f, scoped: false }
    }

    pub(super) fn scoped(f: Box<dyn FnOnce() + Send + 'static>) -> Self {
        Self { f, scoped: true }
    }

    /// Runs the job on the current thread (a panic propagates).
    pub fn run(self) {
        (self.f)()
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job").field("scoped", &self.scoped).finish()
    }
}

/// The pool is shut down; the job is handed back unrun.
pub struct Rejected<F>(pub F);

impl<F> fmt::Debug for Rejected<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Rejected(..)")
    }
}

impl<F> fmt::Display for Rejected<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the pool is shut down")
    }
}

impl<F> std::error::Error for Rejected<F> {}

/// Runs `job`, catching a panic; counts it in `slot`'s counters. The
/// payload is dropped under `catch_unwind` too: a payload whose own `Drop`
/// panics must not unwind out of the worker (it would die while the pool
/// still counts it).
pub(super) fn run_counted(slot: &Slot, job: Job) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| job.run())) {
        slot.panicked.fetch_add(1, Ordering::Relaxed);
        drop_payload(payload);
    }
    slot.completed.fetch_add(1, Ordering::Relaxed);
}
