//! The pool's counters: [`PoolStats`], summed from the pool's and the
//! slots' counters on demand. Each is read separately: a snapshot, exact
//! only once the pool is quiet (after [`Pool::shutdown`](super::Pool::shutdown)).

use std::sync::atomic::Ordering;

use super::idle::IDLE;
use super::inner::Inner;

/// Counters of a pool; see [`Pool::stats`](super::Pool::stats). Monotonic
/// counters count since the pool was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Workers available now (not retiring): never more than `max_workers`.
    pub workers: usize,
    /// Worker threads alive or exiting whose exit bookkeeping has not run.
    pub live_threads: usize,
    /// Workers parked idle right now (approximate while jobs flow).
    pub idle: usize,
    /// Jobs queued and not yet started.
    pub queued: usize,
    /// Jobs that finished (including those that panicked).
    pub completed: u64,
    /// Jobs that panicked.
    pub panicked: u64,
    /// Worker threads created.
    pub spawned: u64,
    /// Thread creations that failed (see
    /// [`Pool::last_spawn_error`](super::Pool::last_spawn_error)).
    pub spawn_failures: u64,
    /// Workers that retired after their keep-alive.
    pub retired_idle: u64,
    /// Workers that left at shutdown.
    pub retired_shutdown: u64,
    /// Times a worker whose keep-alive expired was told to wait for a
    /// retirement token (the stagger at work).
    pub retire_deferred: u64,
    /// Most workers available at once.
    pub peak_workers: usize,
    /// Jobs run on a submitting or shutting-down thread (no worker existed).
    pub ran_on_caller: u64,
}

impl Inner {
    /// Sum of counters.
    pub(super) fn stats(&self) -> PoolStats {
        let (mut completed, mut panicked, mut idle_now) = (0, 0, 0);
        for s in self.slots.iter() {
            completed += s.completed.load(Ordering::Relaxed);
            panicked += s.panicked.load(Ordering::Relaxed);
            if s.state.load(Ordering::Relaxed) == IDLE {
                idle_now += 1;
            }
        }
        PoolStats {
            // SeqCst: pairs with the SeqCst RMWs of `workers`; stronger than
            // needed (a snapshot: nothing is read through it).
            workers: self.workers.load(Ordering::SeqCst),
            // SeqCst: pairs with the AcqRel decrement in `worker_exited`, so
            // the retirement counters read below include that worker's;
            // Acquire would do (stronger than needed).
            live_threads: self.threads.load(Ordering::SeqCst),
            idle: idle_now,
            queued: self.queue.len(),
            completed,
            panicked,
            spawned: self.spawned.load(Ordering::Relaxed),
            spawn_failures: self.spawn_failures.load(Ordering::Relaxed),
            retired_idle: self.retired_idle.load(Ordering::Relaxed),
            retired_shutdown: self.retired_shutdown.load(Ordering::Relaxed),
            retire_deferred: self.retire_deferred.load(Ordering::Relaxed),
            peak_workers: self.peak_workers.load(Ordering::Relaxed),
            ran_on_caller: self.ran_on_caller.load(Ordering::Relaxed),
        }
    }
}
