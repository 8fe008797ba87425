//! An elastic thread pool whose idle workers retire without a herd.
//!
//! [`Pool`] grows on demand up to `max_workers` when jobs arrive faster than
//! its workers finish them, and shrinks back to `min_workers` when they sit
//! idle longer than their keep-alive. That is what tokio's blocking pool
//! and Java's `ThreadPoolExecutor` do too; the difference is how workers
//! leave:
//!
//! * **No lock on the exit path.** A worker that retires takes no pool
//!   lock: it gives up its slot with one atomic read-modify-write on that
//!   slot's own flags word (see `pool/idle.rs`) and leaves. Its
//!   bookkeeping (live thread count, statistics, the retirement record, the
//!   shutdown hand-shake) is handed to an [`exitq`](crate) thread-exit hook:
//!   a preallocated node pushed with one CAS at thread exit and run by the
//!   reclaimer after a grace period, in a batch with other exits.
//! * **Staggered retirement.** Workers started by one burst go idle
//!   together; with a plain keep-alive they would all time out in the same
//!   instant and exit as a herd. Here the keep-alive of each idle period is
//!   jittered (`keep_alive + uniform[0, keep_alive_jitter)`), and at most
//!   `retire_batch` workers may be between "decided to retire" and "cleaned
//!   up by the reclaimer" at once: a retirement token is taken by the worker
//!   and only given back by its exit hook, after a grace period. So at most
//!   K workers exit per grace period; a worker denied a token stays idle
//!   (and available) and tries again a little later.
//! * **LIFO wake-ups.** The idle worker woken for a new job is the one that
//!   went idle last, so under a trickle of work the surplus workers really
//!   stay idle and reach their keep-alive. Each idle worker sleeps on its
//!   own futex word: a submit wakes exactly one worker.
//!
//! * **Few wake-ups.** The job queue is a lock-free
//!   [`crossbeam_queue::SegQueue`]; submitting takes no lock. A worker that
//!   runs dry polls the queue for [`PoolBuilder::spin`] before parking, and
//!   while one does a submit makes no syscall. At most one wake-up is in
//!   flight: while a notified (or just started) worker is on its way to the
//!   queue, submits wake nobody else, and that worker wakes the next one if
//!   jobs are still queued. A burst thus ramps the pool up at the pace the
//!   woken threads get a CPU, rather than waking every idle worker at once.
//!
//! Why a worker-side chain and not a wake per submit: idle workers are
//! retained longer here (they retire K at a time), so a burst finds many
//! of them; waking all at once on a machine with few CPUs buys nothing but
//! context switches (measured with `herd agent`: `docs/results-agent.md`).
//!
//! # Layout
//! One mechanism per file; the protocol reasoning is in each file's docs.
//!
//! | file | what |
//! |---|---|
//! | `pool.rs` | this facade: [`Pool`] and [`PoolBuilder::build`] |
//! | `pool/config.rs` | [`PoolBuilder`], the validated settings, the shared default domain |
//! | `pool/inner.rs` | the state shared by the handle, workers, scopes and exit hooks |
//! | `pool/submit.rs` | submitting and shutting down (the `submit_state` word) |
//! | `pool/wake.rs` | getting a worker to each job: spinners, the chained wake-up, the Dekker pairs |
//! | `pool/grow.rs` | starting a worker: reserve, claim a slot, create the thread |
//! | `pool/worker.rs` | a worker's loop, idle wait and keep-alive |
//! | `pool/retire.rs` | staggered retirement: jittered keep-alive, retirement tokens |
//! | `pool/exit_hook.rs` | a worker's exit bookkeeping, run by exitq after the thread is gone |
//! | `pool/idle.rs` | the slot table: slot states, the idle stack, who frees a slot |
//! | `pool/futex.rs` | the futex an idle worker sleeps on |
//! | `pool/job.rs`, `join.rs`, `scope.rs` | jobs, joinable jobs, scoped jobs |
//! | `pool/stats.rs` | [`PoolStats`] |
//!
//! # Examples
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use exitq::pool::Pool;
//!
//! let pool = Pool::builder()
//!     .min_workers(1)
//!     .max_workers(4)
//!     .keep_alive(Duration::from_millis(200))
//!     .build()
//!     .expect("threads can be created");
//!
//! // Fire-and-forget jobs.
//! let done = Arc::new(AtomicUsize::new(0));
//! for _ in 0..100 {
//!     let done = done.clone();
//!     pool.execute(move || {
//!         done.fetch_add(1, Ordering::Relaxed);
//!     })
//!     .expect("pool is running");
//! }
//!
//! // A joinable job.
//! let answer = pool.spawn(|| 6 * 7).expect("pool is running");
//! assert_eq!(answer.join().unwrap(), 42);
//!
//! // Scoped jobs may borrow from the stack.
//! let mut parts = [0u64; 4];
//! pool.scope(|s| {
//!     for (i, p) in parts.iter_mut().enumerate() {
//!         s.execute(move || *p = (i as u64 + 1) * 10);
//!     }
//! });
//! assert_eq!(parts, [10, 20, 30, 40]);
//!
//! // Graceful shutdown runs every queued job and waits for the workers.
//! let report = pool.shutdown();
//! assert_eq!(done.load(Ordering::Relaxed), 100);
//! assert_eq!(report.stats.live_threads, 0);
//! ```
//!
//! # Shutdown
//! * [`Pool::shutdown`] stops accepting jobs, lets the workers run every
//!   job already queued, waits until every worker thread has exited and
//!   its exit hook has run, and returns the final statistics. Jobs left in
//!   the queue with no worker to run them (every spawn failed) run on the
//!   calling thread: nothing submitted is lost.
//! * [`Pool::shutdown_now`] stops accepting jobs and returns the queued
//!   jobs that have not started ([`Job`]s you may run or drop; a dropped
//!   joinable job makes its [`JoinHandle::join`] return
//!   [`JoinError::Cancelled`]). Scoped jobs are run, not returned, because
//!   their scope is waiting for them. Jobs already running finish.
//! * Dropping the [`Pool`] starts a graceful shutdown without waiting: the
//!   workers finish the queue and exit on their own.
//!
//! After shutdown, [`Pool::execute`] and [`Pool::spawn`] return
//! [`Rejected`] with the job, and [`Scope::execute`] runs the job inline.
//!
//! # Panics in jobs
//! A panicking job is caught; the worker survives and the panic is counted
//! in [`PoolStats::panicked`]. [`Pool::spawn`] hands the payload to
//! [`JoinHandle::join`]; [`Pool::scope`] re-raises the first one.
//!
//! # fork()
//! A pool's workers do not exist in the child of `fork()`. There, a pool
//! built in the parent panics with a message from every entry point
//! ([`Pool::execute`], [`Pool::spawn`], [`Pool::scope`], [`Pool::shutdown`],
//! [`Pool::shutdown_now`]), as the [`Domain`](crate::Domain)'s do, instead
//! of queueing jobs no worker runs or waiting for workers forever; dropping
//! it leaves it alone (its queued jobs belong to the parent, which runs
//! them). A job that forks and returns in the child ends the child when it
//! returns (`_exit(0)`: the worker is the child's only thread, and the
//! queue it would go on with is the parent's). A child that wants a pool
//! builds a new one (on its own shared domain, built in the child; `build`
//! refuses a domain built in the parent). Proven by `tests/fork.rs` and
//! `tests/red_pool.rs`.
//!
//! # Limits
//! At most `max_workers` workers are available at once
//! ([`PoolStats::workers`]); up to `retire_batch` more threads may still be
//! finishing their exit ([`PoolStats::live_threads`] counts them until their
//! exit hook ran). A thread that cannot be created is counted in
//! [`PoolStats::spawn_failures`] with the OS error and the limit that
//! stopped it, with its numbers ([`Pool::last_spawn_error`], e.g.
//! `... (EAGAIN: RLIMIT_NPROC 7 reached: user 65534 has 7 tasks)`: see
//! [`crate::limits`]); if the pool then has no worker at all, the job runs
//! on the submitting thread so it is not stranded.

mod config;
mod exit_hook;
mod futex;
mod grow;
mod idle;
mod inner;
mod job;
mod join;
mod retire;
mod scope;
mod stats;
mod submit;
#[cfg(test)]
mod tests;
mod wake;
mod worker;

/// The slot table's steps, for the loom model in `tests/loom_pool.rs` (only
/// built with `--cfg exitq_loom`).
#[cfg(exitq_loom)]
#[doc(hidden)]
pub use idle::model as slot_model;

pub use config::{PoolBuilder, RetireReason, Retirement};
pub use job::{Job, Rejected};
pub use join::{JoinError, JoinHandle};
pub use scope::Scope;
pub use stats::PoolStats;
pub use submit::ShutdownReport;

use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use inner::Inner;

impl PoolBuilder {
    /// Builds the pool and starts `min_workers` workers.
    ///
    /// # Errors
    /// `InvalidInput` for inconsistent settings (`max_workers == 0`,
    /// `min_workers > max_workers`, `retire_batch == 0`, a zero keep-alive,
    /// a keep-alive plus jitter above 365 days, a thread name with a NUL
    /// byte, `max_workers` above 2^22, a [`domain`](PoolBuilder::domain)
    /// built before a `fork()`, in the child); `OutOfMemory` when the slot
    /// table (128 bytes per `max_workers`) cannot be allocated;
    /// the OS error, with the limit that stopped the thread and its
    /// numbers ([`crate::limits`]), when a minimum worker cannot be created
    /// or (for the first pool on the shared domain) the shared domain's
    /// reclaimer thread cannot.
    pub fn build(self) -> io::Result<Pool> {
        let (cfg, domain) = self.into_config()?;
        let inner = Arc::new(Inner::new(cfg, domain)?);
        for _ in 0..inner.cfg.min_workers {
            if let Err(e) = inner.try_spawn() {
                inner.begin_shutdown();
                // The pool is dropped with its `last_spawn_error`: the
                // error says the same, the limit that stopped the thread.
                return Err(e);
            }
        }
        Ok(Pool { inner })
    }
}

/// An elastic thread pool; see the [module docs](self).
pub struct Pool {
    inner: Arc<Inner>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("min_workers", &self.inner.cfg.min_workers)
            .field("max_workers", &self.inner.cfg.max_workers)
            .field("stats", &self.inner.stats())
            .finish()
    }
}

impl Pool {
    /// A pool with the default settings (see [`PoolBuilder`]).
    ///
    /// # Errors
    /// Starts no worker (`min_workers` is 0), but the first pool built on
    /// the shared domain starts that domain's reclaimer thread: that fails
    /// when no thread can be created (as [`PoolBuilder::build`] says).
    pub fn new() -> io::Result<Pool> {
        PoolBuilder::default().build()
    }

    /// A [`PoolBuilder`] with the default settings.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// Runs `f` on a worker. Returns `f` back if the pool is shut down.
    ///
    /// Wakes the most recently idle worker, or starts one if none is idle
    /// and fewer than `max_workers` exist, or else leaves the job queued
    /// for the next worker that finishes.
    pub fn execute<F>(&self, f: F) -> Result<(), Rejected<F>>
    where
        F: FnOnce() + Send + 'static,
    {
        if !self.inner.enter() {
            return Err(Rejected(f));
        }
        self.inner.push_and_wake(Job::owned(Box::new(f)));
        self.inner.leave();
        Ok(())
    }

    /// Runs `f` on a worker and returns a handle to wait for its value.
    /// Returns `f` back if the pool is shut down.
    pub fn spawn<F, T>(&self, f: F) -> Result<JoinHandle<T>, Rejected<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if !self.inner.enter() {
            return Err(Rejected(f));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job = move || {
            let r = panic::catch_unwind(AssertUnwindSafe(f));
            let panicked = r.is_err();
            let _ = tx.send(r);
            if panicked {
                // Let the worker count it too.
                panic::resume_unwind(Box::new("joinable job panicked"));
            }
        };
        self.inner.push_and_wake(Job::owned(Box::new(job)));
        self.inner.leave();
        Ok(JoinHandle { rx })
    }

    /// Runs `f` with a [`Scope`] whose jobs may borrow from the caller, and
    /// returns once all of them have finished. While it waits, the calling
    /// thread runs queued jobs itself, so a scope opened inside a job of
    /// the same pool cannot deadlock. Re-raises `f`'s panic, else the first
    /// panic of a scoped job (after all of them finished).
    pub fn scope<'env, F, T>(&self, f: F) -> T
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
    {
        scope::run(&self.inner, f)
    }

    /// Current counters.
    pub fn stats(&self) -> PoolStats {
        self.inner.stats()
    }

    /// The last thread-creation failure, with the limit that stopped it
    /// and its numbers ([`crate::limits`]).
    pub fn last_spawn_error(&self) -> Option<String> {
        self.inner
            .last_spawn_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Graceful shutdown: stop accepting jobs, run every queued job, wait
    /// until every worker has exited and its exit bookkeeping has run.
    ///
    /// # Panics
    /// If called from one of this pool's own jobs (it would wait for
    /// itself); in a `fork()` child (module docs); and with
    /// [`Domain::exit_barrier`](crate::Domain::exit_barrier)'s message when
    /// it must wait for a worker's exit bookkeeping while the calling
    /// thread is inside a read section, or a callback, of the pool's
    /// [`domain`](PoolBuilder::domain) (that bookkeeping needs the
    /// domain's grace periods and reclaimer: it would wait for ever).
    pub fn shutdown(&self) -> ShutdownReport {
        assert!(
            !exit_hook::on_worker_of(&self.inner),
            "Pool::shutdown called from a job of the same pool"
        );
        self.inner.shutdown()
    }

    /// Immediate shutdown: stop accepting jobs and return the queued jobs
    /// that have not started. Scoped jobs are run here instead (their scope
    /// waits for them). Running jobs finish; workers exit on their own.
    pub fn shutdown_now(&self) -> Vec<Job> {
        self.inner.shutdown_now()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.inner.forked() {
            // A fork() child: the workers (and their submitters) are the
            // parent's; waiting for them would hang. Left alone.
            return;
        }
        // Graceful and non-blocking: workers drain the queue and exit.
        self.inner.begin_shutdown();
    }
}
