//! Submitting and shutting down: the `submit_state` word that lets a
//! shutdown know when no job can enter the queue any more.
//!
//! # `Inner::submit_state`
//! Bit 0 is [`SHUTDOWN`]; the rest counts submitters between `enter` and
//! `leave`, in units of [`SUBMITTER`].
//!
//! | value                    | meaning                                            |
//! |--------------------------|----------------------------------------------------|
//! | `n * SUBMITTER`          | open; `n` submitters are queueing a job            |
//! | `SHUTDOWN + n*SUBMITTER` | closed; `n` submitters that entered before the bit are still queueing (one that sees the bit backs out) |
//! | `SHUTDOWN`               | closed and drained: no job can enter the queue any more |
//!
//! | transition           | by                                                 |
//! |----------------------|----------------------------------------------------|
//! | `+ SUBMITTER`        | `enter` (undone at once if it saw `SHUTDOWN`)      |
//! | `- SUBMITTER`        | `leave`, after the job is queued and a worker is on its way |
//! | `\| SHUTDOWN`        | `close` (idempotent; the bit is never cleared)     |
//!
//! `close` sets the bit and waits for the count to reach 0. Being RMWs of
//! one word, `enter` and `close` are totally ordered: either the submitter
//! sees the bit and backs out, or `close` sees it counted and waits for its
//! `leave`, whose Release makes the queued job visible to `close`'s Acquire
//! load. After `close`, the queue only shrinks.
//!
//! Except for the calling thread's own submitters: with no worker, a
//! submitter runs the queued jobs itself before its `leave` (`grow.rs`),
//! and such a job may shut the pool down. `close` then waits for the
//! others only ([`Inner::while_submitting`] marks them); its own jobs are
//! queued already (program order).
//!
//! # Shutdown
//! `begin_shutdown` is `close`, then every idle worker is notified (a worker
//! between states re-checks the bit: the Dekker pair of `go_idle`, see
//! `is_shutdown`), and if no worker exists at all the queue runs on the
//! calling thread. Workers drain the queue and leave; `shutdown` then waits
//! until every worker's exit hook has run. `shutdown_now` takes the queue
//! between `close` and the notifications, so the workers find it empty.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;

use super::inner::Inner;
use super::job::Job;
use super::stats::PoolStats;

/// `submit_state`: the pool is shut down (never cleared).
const SHUTDOWN: usize = 1;
/// `submit_state`: one submitter inside `enter`..`leave`.
const SUBMITTER: usize = 2;

/// What [`Pool::shutdown`](super::Pool::shutdown) observed.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Final counters (every worker gone, every exit hook run).
    pub stats: PoolStats,
    /// Time from the call until the last worker's exit hook ran.
    pub took: Duration,
}

/// A submitter of one pool on this thread, between `enter` and `leave`,
/// that may run jobs itself (module docs); on the stack of
/// [`Inner::while_submitting`], linked to the one it runs inside.
struct Submitting {
    pool: *const Inner,
    outer: *const Submitting,
}

thread_local! {
    /// The innermost [`Submitting`] of this thread (null: none).
    static SUBMITTING: Cell<*const Submitting> = const { Cell::new(ptr::null()) };
}

/// Unlinks a [`Submitting`] frame when dropped (also when unwinding).
struct Unlink(*const Submitting);

impl Drop for Unlink {
    fn drop(&mut self) {
        SUBMITTING.set(self.0);
    }
}

impl Inner {
    /// Runs `f` (which may run queued jobs on this thread) marked as one of
    /// this pool's submitters: a job that shuts the pool down does not wait
    /// for it (module docs). Call it between `enter` and `leave`.
    pub(super) fn while_submitting<R>(&self, f: impl FnOnce() -> R) -> R {
        let frame = Submitting {
            pool: self,
            outer: SUBMITTING.get(),
        };
        SUBMITTING.set(&frame);
        let _unlink = Unlink(frame.outer);
        f()
    }

    /// This thread's submitters of this pool ([`Inner::while_submitting`]).
    fn own_submitters(&self) -> usize {
        let mut n = 0;
        let mut p = SUBMITTING.get();
        while !p.is_null() {
            // SAFETY: a linked frame lives on this thread's stack, in a
            // `while_submitting` call that has not returned (it unlinks
            // the frame before returning or unwinding, `Unlink`).
            let f = unsafe { &*p };
            n += usize::from(ptr::eq(f.pool, self));
            p = f.outer;
        }
        n
    }

    pub(super) fn is_shutdown(&self) -> bool {
        // SeqCst: pairs with `close`'s SeqCst `fetch_or`; the read side of
        // the Dekker pair of a worker going idle (store IDLE, fence, this
        // load, in `go_idle`) with `begin_shutdown` (set the bit, then the
        // notify CAS of every slot): one of them sees the other.
        self.submit_state.load(Ordering::SeqCst) & SHUTDOWN != 0
    }

    /// Registers a submitter unless shut down. Panics in a `fork()` child.
    pub(super) fn enter(&self) -> bool {
        self.check_fork();
        // SeqCst: pairs with `close`'s SeqCst `fetch_or` of the bit. The RMW
        // order on this one word alone decides which of us sees the other,
        // and `leave`'s Release publishes the job: stronger than needed.
        let prev = self.submit_state.fetch_add(SUBMITTER, Ordering::SeqCst);
        if prev & SHUTDOWN != 0 {
            // SeqCst: as above (an undo; nothing was queued).
            self.submit_state.fetch_sub(SUBMITTER, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Ends what `enter` began.
    pub(super) fn leave(&self) {
        // Release: pairs with the Acquire load in `close`: our queue push
        // happens-before it reads a submitter count of 0.
        self.submit_state.fetch_sub(SUBMITTER, Ordering::Release);
    }

    /// `enter`, `push_and_wake`, `leave`; hands the job back after shutdown.
    pub(super) fn submit(self: &Arc<Self>, job: Job) -> Result<(), Job> {
        if !self.enter() {
            return Err(job);
        }
        self.push_and_wake(job);
        self.leave();
        Ok(())
    }

    /// Sets the shutdown bit and waits until no submitter is inside
    /// `enter`..`leave`: from then on no job enters the queue. Idempotent.
    fn close(&self) {
        // SeqCst: pairs with the SeqCst fence a worker going idle runs
        // before its `is_shutdown` load (`go_idle`): either it sees the bit,
        // or the notify CAS in `begin_shutdown` (after this) sees it IDLE.
        self.submit_state.fetch_or(SHUTDOWN, Ordering::SeqCst);
        // Called from a job this thread runs as a submitter: those
        // submitters leave only after we return (module docs).
        let own = self.own_submitters();
        let backoff = Backoff::new();
        // Acquire: pairs with the Release decrement in `leave`: their queue
        // pushes are visible once the count is 0 (or ours alone).
        while self.submit_state.load(Ordering::Acquire) >= SUBMITTER * (own + 1) {
            backoff.snooze();
        }
    }

    /// `close`, then notifies every idle worker. Idempotent.
    pub(super) fn begin_shutdown(&self) {
        self.close();
        // Every idle worker (in the stack or not) gets notified; a worker
        // between states re-checks the shutdown bit after its SeqCst store
        // of IDLE (Dekker with the bit, see `close`).
        for i in 0..self.slots.len() as u32 {
            self.notify_if_idle(i);
        }
        // No worker at all (or every spawn failed): run the rest here.
        // SeqCst: pairs with the SeqCst decrements of `workers` (a worker
        // leaves at shutdown only after finding the queue empty, and one
        // still counted drains it).
        if self.workers.load(Ordering::SeqCst) == 0 {
            while let Some(job) = self.queue.pop() {
                self.run_on_caller(job);
            }
        }
    }

    /// [`Pool::shutdown`](super::Pool::shutdown): `begin_shutdown`, then
    /// waits until every worker has exited and its exit hook has run.
    pub(super) fn shutdown(&self) -> ShutdownReport {
        self.check_fork();
        let t0 = Instant::now();
        self.begin_shutdown();
        let (lock, cv) = &self.exited;
        // Acquire: pairs with the AcqRel decrement in `worker_exited`.
        while self.threads.load(Ordering::Acquire) != 0 {
            // Workers that have exited get cleaned up now rather than at the
            // reclaimer's next poll. SeqCst: pairs with the decrements of
            // `workers`; stronger than needed (a hint: a stale count only
            // delays the barrier by one 1 ms wait below).
            if self.workers.load(Ordering::SeqCst) == 0 {
                self.domain.exit_barrier();
            }
            let g = lock.lock().unwrap_or_else(|e| e.into_inner());
            // Acquire: as above.
            if self.threads.load(Ordering::Acquire) == 0 {
                break;
            }
            drop(
                cv.wait_timeout(g, Duration::from_millis(1))
                    .unwrap_or_else(|e| e.into_inner()),
            );
        }
        // A job queued after the last worker left (none can be: submitters
        // drained before the workers were told) would run here.
        while let Some(job) = self.queue.pop() {
            self.run_on_caller(job);
        }
        ShutdownReport {
            stats: self.stats(),
            took: t0.elapsed(),
        }
    }

    /// [`Pool::shutdown_now`](super::Pool::shutdown_now): `close` so no new
    /// job enters, take the queue (running scoped jobs here), and only then
    /// wake the workers, so they find it empty.
    pub(super) fn shutdown_now(&self) -> Vec<Job> {
        self.check_fork();
        self.close();
        let mut out = Vec::new();
        while let Some(job) = self.queue.pop() {
            if job.scoped {
                self.run_on_caller(job);
            } else {
                out.push(job);
            }
        }
        self.begin_shutdown();
        out
    }
}
