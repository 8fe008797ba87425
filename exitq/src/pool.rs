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
//!   runs dry polls the queue for [`Builder::spin`] before parking, and
//!   while one does a submit makes no syscall. At most one wake-up is in
//!   flight: while a notified (or just started) worker is on its way to the
//!   queue, submits wake nobody else, and that worker wakes the next one if
//!   jobs are still queued. A burst thus ramps the pool up at the pace the
//!   woken threads get a CPU, rather than waking every idle worker at once.
//!
//! Why a worker-side chain and not a wake per submit: idle workers are
//! retained longer here (they retire K at a time), so a burst finds many
//! of them; waking all at once on a machine with few CPUs buys nothing but
//! context switches (measured with `herd agent`, see the README).
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
//! # Limits
//! At most `max_workers` workers are available at once
//! ([`PoolStats::workers`]); up to `retire_batch` more threads may still be
//! finishing their exit ([`PoolStats::live_threads`] counts them until their
//! exit hook ran). A thread that cannot be created is counted in
//! [`PoolStats::spawn_failures`] with the OS error
//! ([`Pool::last_spawn_error`]); if the pool then has no worker at all, the
//! job runs on the submitting thread so it is not stranded.

mod exit_hook;
mod idle;
mod join;
mod scope;
#[cfg(test)]
mod tests;

/// The slot table's steps, for the loom model in `tests/loom_pool.rs` (only
/// built with `--cfg exitq_loom`).
#[cfg(exitq_loom)]
#[doc(hidden)]
pub use idle::model as slot_model;

use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use crossbeam_utils::{Backoff, CachePadded};

use idle::{Slots, IDLE, NOTIFIED, RUNNING};

pub use join::{JoinError, JoinHandle};
pub use scope::Scope;

/// Why a worker left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetireReason {
    /// It was idle past its (jittered) keep-alive and the pool was above
    /// `min_workers`.
    Idle,
    /// The pool was shut down.
    Shutdown,
}

/// One worker's retirement, passed to [`Builder::on_retire`].
#[derive(Debug, Clone, Copy)]
pub struct Retirement {
    /// Index of the worker's slot (`0..max_workers`).
    pub slot: usize,
    /// Why it left.
    pub reason: RetireReason,
    /// When the worker decided to leave (it then exited at once).
    pub decided_at: Instant,
    /// When its exit bookkeeping ran (on the reclaimer, after the thread
    /// was gone): `cleaned_at - decided_at` is the deferral.
    pub cleaned_at: Instant,
}

/// Counters of a pool; see [`Pool::stats`]. Monotonic counters count since
/// the pool was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
    /// Thread creations that failed (see [`Pool::last_spawn_error`]).
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

/// What [`Pool::shutdown`] observed.
#[derive(Debug, Clone, Copy)]
pub struct ShutdownReport {
    /// Final counters (every worker gone, every exit hook run).
    pub stats: PoolStats,
    /// Time from the call until the last worker's exit hook ran.
    pub took: Duration,
}

/// A job handed back by [`Pool::shutdown_now`] or [`Rejected`]-free paths.
/// Run it with [`Job::run`] or drop it.
pub struct Job {
    f: Box<dyn FnOnce() + Send + 'static>,
    /// Scoped jobs must run: their scope waits for them and they may borrow.
    scoped: bool,
}

impl Job {
    fn owned(f: Box<dyn FnOnce() + Send + 'static>) -> Self {
        Self { f, scoped: false }
    }

    fn scoped(f: Box<dyn FnOnce() + Send + 'static>) -> Self {
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

type RetireCallback = Arc<dyn Fn(&Retirement) + Send + Sync + 'static>;

/// Configures a [`Pool`]; see each setter for its default.
#[derive(Clone)]
pub struct Builder {
    min_workers: usize,
    max_workers: usize,
    keep_alive: Duration,
    keep_alive_jitter: Option<Duration>,
    retire_batch: usize,
    spin: Duration,
    max_spinners: Option<usize>,
    thread_name: String,
    stack_size: Option<usize>,
    on_retire: Option<RetireCallback>,
    domain: Option<crate::Domain>,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("min_workers", &self.min_workers)
            .field("max_workers", &self.max_workers)
            .field("keep_alive", &self.keep_alive)
            .field("keep_alive_jitter", &self.jitter())
            .field("retire_batch", &self.retire_batch)
            .field("spin", &self.spin)
            .field("max_spinners", &self.max_spinners)
            .field("thread_name", &self.thread_name)
            .field("stack_size", &self.stack_size)
            .field("on_retire", &self.on_retire.is_some())
            .field("domain", &self.domain.is_some())
            .finish()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            min_workers: 0,
            max_workers: std::thread::available_parallelism().map_or(4, |n| n.get()),
            keep_alive: Duration::from_secs(10),
            keep_alive_jitter: None,
            retire_batch: 2,
            spin: Duration::from_micros(50),
            max_spinners: None,
            thread_name: "exitq-pool".into(),
            stack_size: None,
            on_retire: None,
            domain: None,
        }
    }
}

impl Builder {
    /// Workers kept even when idle (started by [`Builder::build`]). Default 0.
    pub fn min_workers(mut self, n: usize) -> Self {
        self.min_workers = n;
        self
    }

    /// Most workers at once (at least 1, at least `min_workers`). Default:
    /// the available parallelism. For jobs that block, set it higher.
    pub fn max_workers(mut self, n: usize) -> Self {
        self.max_workers = n;
        self
    }

    /// How long a worker above `min_workers` stays idle before it retires
    /// (plus jitter). Default 10 s.
    pub fn keep_alive(mut self, d: Duration) -> Self {
        self.keep_alive = d;
        self
    }

    /// Each idle period lasts `keep_alive + uniform[0, jitter)`. Default:
    /// half the keep-alive. Zero gives the plain keep-alive of other pools
    /// (retirement is then staggered by `retire_batch` alone).
    pub fn keep_alive_jitter(mut self, d: Duration) -> Self {
        self.keep_alive_jitter = Some(d);
        self
    }

    /// At most this many workers retire per grace period (K >= 1): a
    /// retiring worker holds one of K tokens until its exit bookkeeping has
    /// run on the reclaimer. Default 2.
    pub fn retire_batch(mut self, k: usize) -> Self {
        self.retire_batch = k;
        self
    }

    /// How long a worker that ran out of jobs polls the queue before it
    /// parks (default 50 µs; zero: park at once). While a worker spins, a
    /// submit costs no syscall: the spinner takes the job, and wakes
    /// another worker itself if more jobs are queued. Costs up to this much
    /// CPU per idle transition of a worker.
    pub fn spin(mut self, d: Duration) -> Self {
        self.spin = d;
        self
    }

    /// Most workers spinning at once (default: half the available
    /// parallelism, at least 1, at most `max_workers`).
    pub fn max_spinners(mut self, n: usize) -> Self {
        self.max_spinners = Some(n);
        self
    }

    /// Worker thread names are `<prefix>-<slot>`. Default `exitq-pool`.
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.thread_name = prefix.into();
        self
    }

    /// Stack size of worker threads in bytes. Default: the std default.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Called once per worker that left, from its exit bookkeeping (on the
    /// reclaimer thread, after the worker thread has exited). Keep it short
    /// and do not block; it must not submit to this pool and wait.
    pub fn on_retire(mut self, f: impl Fn(&Retirement) + Send + Sync + 'static) -> Self {
        self.on_retire = Some(Arc::new(f));
        self
    }

    /// The exitq domain whose reclaimer runs the workers' exit bookkeeping.
    /// Default: one domain shared by every pool of the process (built on
    /// first use, its reclaimer thread named `exitq-pool-reclaim`). How
    /// soon an exit is cleaned up, and so the pace of retirement with
    /// [`Builder::retire_batch`], follows the domain's
    /// [`exit_poll`](crate::Builder::exit_poll) and grace periods.
    pub fn domain(mut self, domain: crate::Domain) -> Self {
        self.domain = Some(domain);
        self
    }

    fn jitter(&self) -> Duration {
        self.keep_alive_jitter.unwrap_or(self.keep_alive / 2)
    }

    /// Builds the pool and starts `min_workers` workers.
    ///
    /// # Errors
    /// `InvalidInput` for inconsistent settings (`max_workers == 0`,
    /// `min_workers > max_workers`, `retire_batch == 0`, a zero keep-alive);
    /// the OS error when a minimum worker cannot be created.
    pub fn build(self) -> io::Result<Pool> {
        let invalid = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, m.to_string()));
        if self.max_workers == 0 {
            return invalid("max_workers must be at least 1");
        }
        if self.max_workers >= u32::MAX as usize {
            return invalid("max_workers must be below 2^32 - 1");
        }
        if self.min_workers > self.max_workers {
            return invalid("min_workers must not exceed max_workers");
        }
        if self.retire_batch == 0 {
            return invalid("retire_batch must be at least 1");
        }
        if self.keep_alive.is_zero() {
            return invalid("keep_alive must be positive");
        }
        let jitter = self.jitter();
        let domain = match self.domain {
            Some(d) => d,
            None => shared_domain()?,
        };
        let inner = Arc::new(Inner {
            queue: SegQueue::new(),
            slots: Slots::new(self.max_workers),
            submit_state: CachePadded::new(AtomicUsize::new(0)),
            workers: CachePadded::new(AtomicUsize::new(0)),
            threads: AtomicUsize::new(0),
            spinning: CachePadded::new(AtomicUsize::new(0)),
            waking: CachePadded::new(AtomicUsize::new(0)),
            retire_tokens: AtomicUsize::new(self.retire_batch),
            spawned: AtomicU64::new(0),
            spawn_failures: AtomicU64::new(0),
            retired_idle: AtomicU64::new(0),
            retired_shutdown: AtomicU64::new(0),
            retire_deferred: AtomicU64::new(0),
            peak_workers: AtomicUsize::new(0),
            ran_on_caller: AtomicU64::new(0),
            last_spawn_error: Mutex::new(None),
            #[cfg(test)]
            hook: Mutex::new(None),
            domain,
            exited: (Mutex::new(()), Condvar::new()),
            epoch: Instant::now(),
            cfg: Config {
                min_workers: self.min_workers,
                max_workers: self.max_workers,
                keep_alive: self.keep_alive,
                jitter,
                spin: self.spin,
                max_spinners: self
                    .max_spinners
                    .unwrap_or_else(|| {
                        std::thread::available_parallelism().map_or(1, |n| n.get()) / 2
                    })
                    .clamp(1, self.max_workers),
                thread_name: self.thread_name,
                stack_size: self.stack_size,
                on_retire: self.on_retire,
            },
        });
        for _ in 0..inner.cfg.min_workers {
            if let Err(e) = inner.try_spawn() {
                inner.begin_shutdown();
                return Err(e);
            }
        }
        Ok(Pool { inner })
    }
}

/// The domain shared by pools built without [`Builder::domain`].
///
/// Lock-free (a leaked box behind an atomic pointer), so a `fork()` that
/// happens while another thread builds it cannot leave a lock held in the
/// child; in the child the parent's domain is unusable (see the crate
/// docs), so it is left alone (leaked) and a new one is built.
fn shared_domain() -> io::Result<crate::Domain> {
    use std::sync::atomic::AtomicPtr;
    static SHARED: AtomicPtr<crate::Domain> = AtomicPtr::new(std::ptr::null_mut());
    loop {
        // Acquire: pairs with the Release CAS that installed it.
        let cur = SHARED.load(Ordering::Acquire);
        // SAFETY: installed boxes are leaked, never freed.
        if let Some(d) = unsafe { cur.as_ref() } {
            if !d.forked() {
                return Ok(d.clone());
            }
        }
        let d = crate::Domain::builder()
            .thread_name("exitq-pool-reclaim")
            .try_build()?;
        let fresh = Box::into_raw(Box::new(d.clone()));
        // Release: publishes the box; Acquire on failure as the load above.
        match SHARED.compare_exchange(cur, fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(d),
            Err(_) => {
                // Another thread installed one first: use that one.
                // SAFETY: `fresh` was never published.
                drop(unsafe { Box::from_raw(fresh) });
            }
        }
    }
}

/// Settings fixed at build time.
struct Config {
    min_workers: usize,
    max_workers: usize,
    keep_alive: Duration,
    jitter: Duration,
    spin: Duration,
    max_spinners: usize,
    thread_name: String,
    stack_size: Option<usize>,
    on_retire: Option<RetireCallback>,
}

/// Bit 0 of `submit_state`: shut down. The rest counts submitters inside
/// `submit` (in units of `SUBMITTER`).
const SHUTDOWN: usize = 1;
const SUBMITTER: usize = 2;

/// Where a test hook runs (unit tests only): the tests in `pool/tests.rs`
/// pause a thread at one of these points to force an interleaving.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookPoint {
    /// In `push_and_wake`, after `enter`, before the job is queued.
    BeforePush,
    /// In `notify_slot`: slot `i` was popped off the idle stack, its state
    /// not yet read.
    Popped(u32),
    /// In `notify_slot`: done with popped slot `i` (notified it or not).
    Checked(u32),
}

/// A test hook; called with the pool's `Inner` at each `HookPoint`.
#[cfg(test)]
type Hook = Arc<dyn Fn(&Inner, HookPoint) + Send + Sync>;

/// State shared by the pool handle, its workers, scopes and exit hooks.
pub(crate) struct Inner {
    queue: SegQueue<Job>,
    slots: Slots,
    /// `SHUTDOWN` bit + submitters in flight (see `submit`).
    submit_state: CachePadded<AtomicUsize>,
    /// Available workers (RUNNING / IDLE / NOTIFIED / RETIRING slots).
    workers: CachePadded<AtomicUsize>,
    /// Threads whose exit bookkeeping has not run yet.
    threads: AtomicUsize,
    /// Workers polling the queue before they park (see `spin_for_job`).
    spinning: CachePadded<AtomicUsize>,
    /// Workers notified (or just spawned) that have not yet looked at the
    /// queue. While one is on its way, submits wake nobody else: it takes
    /// the job, and wakes the next worker itself if more are queued. This
    /// ramps parallelism up one wake-up at a time (paced by how fast the
    /// woken threads get a CPU) instead of waking every idle worker at the
    /// start of a burst.
    waking: CachePadded<AtomicUsize>,
    /// Retirement tokens (see `Builder::retire_batch`).
    retire_tokens: AtomicUsize,
    spawned: AtomicU64,
    spawn_failures: AtomicU64,
    retired_idle: AtomicU64,
    retired_shutdown: AtomicU64,
    retire_deferred: AtomicU64,
    peak_workers: AtomicUsize,
    ran_on_caller: AtomicU64,
    last_spawn_error: Mutex<Option<String>>,
    /// Test-only pause points (see `HookPoint`).
    #[cfg(test)]
    hook: Mutex<Option<Hook>>,
    /// Runs each worker's exit bookkeeping after its thread is gone.
    domain: crate::Domain,
    /// Shutdown waits here for `threads == 0`; only the last exit hook
    /// after a shutdown takes the lock.
    exited: (Mutex<()>, Condvar),
    epoch: Instant,
    cfg: Config,
}

impl Inner {
    fn is_shutdown(&self) -> bool {
        self.submit_state.load(Ordering::SeqCst) & SHUTDOWN != 0
    }

    /// Registers a submitter unless shut down. SeqCst: `begin_shutdown`
    /// sets the bit and then waits for the submitter count to drain; after
    /// that no job can enter the queue.
    fn enter(&self) -> bool {
        let prev = self.submit_state.fetch_add(SUBMITTER, Ordering::SeqCst);
        if prev & SHUTDOWN != 0 {
            self.submit_state.fetch_sub(SUBMITTER, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Ends what `enter` began.
    fn leave(&self) {
        // Release: our queue push happens-before `begin_shutdown` reading a
        // submitter count of 0 (its Acquire load).
        self.submit_state.fetch_sub(SUBMITTER, Ordering::Release);
    }

    /// Queues `job` (between `enter` and `leave`) and makes sure a worker
    /// will run it: wake the idle worker on top of the idle stack, else
    /// start a worker if below max, else a busy worker takes it when done.
    fn push_and_wake(self: &Arc<Self>, job: Job) {
        #[cfg(test)]
        self.run_hook(HookPoint::BeforePush);
        self.queue.push(job);
        // Dekker with a worker going idle (state IDLE + idle-stack push,
        // fence, queue re-check) and with a spinner leaving its spin
        // (decrement `spinning`, then the same idle path): either it sees
        // our job, or we see it spinning / idle.
        fence(Ordering::SeqCst);
        if self.spinning.load(Ordering::SeqCst) > 0 || self.waking.load(Ordering::SeqCst) > 0 {
            // A worker is polling the queue right now, or is on its way to
            // it (`waking`): it takes the job without a syscall of ours and
            // wakes help if more work piles up (`found_work`).
            return;
        }
        self.wake_or_grow();
    }

    /// A worker that was notified or spawned starts looking at the queue.
    fn arrived(&self) {
        // SeqCst: Dekker with `push_and_wake` (push, fence, read `waking`):
        // a submitter that saw us on our way skipped its wake-up, and our
        // queue pops after this see its job.
        self.waking.fetch_sub(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// After a woken worker's first job: if more jobs are queued and nobody
    /// else is on the way, wake (or start) the next worker.
    fn found_work(self: &Arc<Self>) {
        if !self.queue.is_empty()
            && self.spinning.load(Ordering::SeqCst) == 0
            && self.waking.load(Ordering::SeqCst) == 0
        {
            self.wake_or_grow();
        }
    }

    /// Wakes an idle worker, else starts one if below max.
    fn wake_or_grow(self: &Arc<Self>) {
        if !self.wake_one() {
            self.grow_for_queued_job();
        }
    }

    /// A worker that ran out of jobs polls the queue for `cfg.spin` before
    /// parking, if fewer than `max_spinners` already do. Returns a job it
    /// found. While it spins, submitters skip their wake-up syscall.
    fn spin_for_job(self: &Arc<Self>) -> Option<Job> {
        if self.cfg.spin.is_zero() {
            return None;
        }
        // SeqCst: see `push_and_wake`.
        if self.spinning.fetch_add(1, Ordering::SeqCst) >= self.cfg.max_spinners {
            self.spinning.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let t0 = Instant::now();
        let mut found = None;
        'spin: loop {
            for _ in 0..64 {
                if let Some(job) = self.queue.pop() {
                    found = Some(job);
                    break 'spin;
                }
                std::hint::spin_loop();
            }
            if t0.elapsed() >= self.cfg.spin || self.is_shutdown() {
                break;
            }
        }
        // SeqCst: after this, submitters wake or spawn instead of relying on
        // us; our caller re-checks the queue (go_idle) after this store.
        self.spinning.fetch_sub(1, Ordering::SeqCst);
        if found.is_some() {
            fence(Ordering::SeqCst);
            if !self.queue.is_empty() {
                // More work than one spinner takes: get help (the chained
                // wake-up keeps parallelism growing during a burst).
                self.wake_or_grow();
            }
        }
        found
    }

    /// `enter`, `push_and_wake`, `leave`; hands the job back after shutdown.
    fn submit(self: &Arc<Self>, job: Job) -> Result<(), Job> {
        if !self.enter() {
            return Err(job);
        }
        self.push_and_wake(job);
        self.leave();
        Ok(())
    }

    /// Pops the idle stack until an idle worker is found and notified.
    fn wake_one(&self) -> bool {
        while let Some(i) = self.slots.pop_idle() {
            if self.notify_slot(i) {
                return true;
            }
        }
        false
    }

    /// Notifies popped slot `i` if it is idle. An entry in any other state
    /// is stale and skipped (`pop_idle` already freed the slot if its
    /// worker left with the entry in the stack).
    fn notify_slot(&self, i: u32) -> bool {
        #[cfg(test)]
        self.run_hook(HookPoint::Popped(i));
        let notified = self.notify_popped(i);
        #[cfg(test)]
        self.run_hook(HookPoint::Checked(i));
        notified
    }

    /// Runs the test hook, if one is installed, at `at`.
    #[cfg(test)]
    fn run_hook(&self, at: HookPoint) {
        let hook = self.hook.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(h) = hook {
            h(self, at);
        }
    }

    /// The body of `notify_slot`.
    fn notify_popped(&self, i: u32) -> bool {
        let slot = self.slots.get(i);
        if !self.slots.is_idle(i) {
            // A stale entry: its worker is running, retiring or gone. Never
            // act on a `RETIRED` seen here: it may be a later worker's
            // (the slot reused since our pop), and `pop_idle` has already
            // freed the slot if the freeing was ours (idle.rs docs).
            return false;
        }
        // Counted before the CAS so the worker's `arrived` cannot run
        // first; undone if the CAS fails. SeqCst: read by submitters after
        // their push and fence (`push_and_wake`).
        self.waking.fetch_add(1, Ordering::SeqCst);
        match self.slots.notify(i) {
            Ok(()) => {
                idle::futex_wake(&slot.state);
                true
            }
            Err(_) => {
                // It found work, or its keep-alive expired, meanwhile.
                self.waking.fetch_sub(1, Ordering::SeqCst);
                false
            }
        }
    }

    /// No idle worker took the job: start one if below `max_workers`. If
    /// that fails and no worker exists at all, run queued work here.
    fn grow_for_queued_job(self: &Arc<Self>) {
        match self.try_spawn() {
            Ok(_) => {}
            Err(_) => {
                if self.workers.load(Ordering::SeqCst) == 0 {
                    if let Some(job) = self.queue.pop() {
                        self.run_on_caller(job);
                    }
                }
            }
        }
    }

    /// Starts one worker if `workers < max_workers`. Ok(false) at max.
    fn try_spawn(self: &Arc<Self>) -> io::Result<bool> {
        let max = self.cfg.max_workers;
        let mut w = self.workers.load(Ordering::Relaxed);
        loop {
            if w >= max {
                return Ok(false);
            }
            // SeqCst: Dekker with a retiring worker (decrement `workers`,
            // fence, re-check queue): either it sees our job or we see the
            // lower count and start a worker for it.
            match self
                .workers
                .compare_exchange_weak(w, w + 1, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        self.peak_workers.fetch_max(w + 1, Ordering::Relaxed);
        let slot = match self.claim_slot() {
            Some(i) => i,
            None => {
                // An idle worker showed up while we looked; it has the job.
                self.workers.fetch_sub(1, Ordering::SeqCst);
                return Ok(false);
            }
        };
        match self.spawn_thread(slot) {
            Ok(()) => {
                self.spawned.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                self.slots.unclaim(slot);
                self.workers.fetch_sub(1, Ordering::SeqCst);
                self.spawn_failures.fetch_add(1, Ordering::Relaxed);
                let why = explain_spawn_error(&e);
                *self
                    .last_spawn_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(why);
                Err(e)
            }
        }
    }

    /// Claims a free slot for a reserved worker. One exists (workers <=
    /// max and each available worker holds one slot), possibly still
    /// `RETIRED` with its entry in the idle stack: popping that entry frees
    /// it, so drain the stack. Returns None if an idle worker was found
    /// (and notified) instead.
    fn claim_slot(&self) -> Option<u32> {
        let backoff = Backoff::new();
        loop {
            if let Some(i) = self.slots.claim_free() {
                return Some(i);
            }
            while let Some(i) = self.slots.pop_idle() {
                if self.notify_slot(i) {
                    return None;
                }
            }
            if let Some(i) = self.slots.claim_free() {
                return Some(i);
            }
            // A leaving worker is between `RETIRED` and freeing its slot,
            // or a popper between taking its entry and freeing it.
            backoff.snooze();
        }
    }

    fn spawn_thread(self: &Arc<Self>, slot: u32) -> io::Result<()> {
        let mut b = std::thread::Builder::new().name(format!("{}-{slot}", self.cfg.thread_name));
        if let Some(s) = self.cfg.stack_size {
            b = b.stack_size(s);
        }
        let me = Arc::clone(self);
        self.threads.fetch_add(1, Ordering::Relaxed);
        // The new worker is on its way to the queue (see `waking`).
        self.waking.fetch_add(1, Ordering::SeqCst);
        match b.spawn(move || worker_main(me, slot)) {
            Ok(_detached) => Ok(()),
            Err(e) => {
                self.waking.fetch_sub(1, Ordering::SeqCst);
                self.threads.fetch_sub(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Runs a job on a thread that is not a worker (caller-runs).
    fn run_on_caller(&self, job: Job) {
        self.ran_on_caller.fetch_add(1, Ordering::Relaxed);
        if job.scoped {
            // The scoped wrapper catches and records its own panics.
            job.run();
        } else if panic::catch_unwind(AssertUnwindSafe(|| job.run())).is_err() {
            // Counted against slot 0's panics so `stats` sees it.
            self.slots.get(0).panicked.fetch_add(1, Ordering::Relaxed);
        }
        self.slots.get(0).completed.fetch_add(1, Ordering::Relaxed);
    }

    /// Sets the shutdown bit, waits until no submitter is inside `submit`,
    /// and notifies every idle worker. Idempotent.
    fn begin_shutdown(&self) {
        // SeqCst: see `submit`.
        self.submit_state.fetch_or(SHUTDOWN, Ordering::SeqCst);
        let backoff = Backoff::new();
        // Acquire pairs with the Release decrement in `submit`: their queue
        // pushes are visible once the count is 0.
        while self.submit_state.load(Ordering::Acquire) >= SUBMITTER {
            backoff.snooze();
        }
        // Every idle worker (in the stack or not) gets notified; a worker
        // between states re-checks the shutdown bit after its SeqCst store
        // of IDLE (Dekker with the bit above).
        for i in 0..self.slots.len() as u32 {
            self.notify_slot_for_shutdown(i);
        }
        // No worker at all (or every spawn failed): run the rest here.
        if self.workers.load(Ordering::SeqCst) == 0 {
            while let Some(job) = self.queue.pop() {
                self.run_on_caller(job);
            }
        }
    }

    fn notify_slot_for_shutdown(&self, i: u32) {
        let slot = self.slots.get(i);
        self.waking.fetch_add(1, Ordering::SeqCst);
        if self.slots.notify(i).is_ok() {
            idle::futex_wake(&slot.state);
        } else {
            self.waking.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Sum of counters.
    fn stats(&self) -> PoolStats {
        let (mut completed, mut panicked, mut idle_now) = (0, 0, 0);
        for s in self.slots.iter() {
            completed += s.completed.load(Ordering::Relaxed);
            panicked += s.panicked.load(Ordering::Relaxed);
            if s.state.load(Ordering::Relaxed) == IDLE {
                idle_now += 1;
            }
        }
        PoolStats {
            workers: self.workers.load(Ordering::SeqCst),
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

    /// The exit bookkeeping of one worker: runs after its thread exited.
    fn worker_exited(&self, record: &exit_hook::ExitRecord) {
        let cleaned_at = Instant::now();
        let reason = record.reason();
        match reason {
            RetireReason::Idle => self.retired_idle.fetch_add(1, Ordering::Relaxed),
            RetireReason::Shutdown => self.retired_shutdown.fetch_add(1, Ordering::Relaxed),
        };
        if let Some(cb) = &self.cfg.on_retire {
            let r = Retirement {
                slot: record.slot as usize,
                reason,
                decided_at: self.epoch + Duration::from_nanos(record.decided_ns()),
                cleaned_at,
            };
            let _ = panic::catch_unwind(AssertUnwindSafe(|| cb(&r)));
        }
        if reason == RetireReason::Idle {
            // The token taken in `try_retire` comes back only now, after the
            // exit's grace period: at most K retirements in flight. Release
            // pairs with the Acquire in `try_retire`.
            self.retire_tokens.fetch_add(1, Ordering::Release);
        }
        // AcqRel: Release publishes the counters above to `shutdown`'s
        // Acquire load of `threads`.
        if self.threads.fetch_sub(1, Ordering::AcqRel) == 1 && self.is_shutdown() {
            let _g = self.exited.0.lock().unwrap_or_else(|e| e.into_inner());
            self.exited.1.notify_all();
        }
    }

    /// Idle timeout for the next idle period.
    fn keep_alive(&self, rng: &mut u64) -> Duration {
        let j = self.cfg.jitter.as_nanos() as u64;
        let extra = if j == 0 { 0 } else { next_rand(rng) % j };
        self.cfg.keep_alive + Duration::from_nanos(extra)
    }

    /// A worker whose keep-alive expired asks to leave: it needs a token
    /// and the pool must stay at or above `min_workers`.
    fn try_retire(&self) -> bool {
        let mut t = self.retire_tokens.load(Ordering::Relaxed);
        loop {
            if t == 0 {
                self.retire_deferred.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            // Acquire pairs with the Release in `worker_exited`.
            match self.retire_tokens.compare_exchange_weak(
                t,
                t - 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => t = now,
            }
        }
        let mut w = self.workers.load(Ordering::Relaxed);
        loop {
            if w <= self.cfg.min_workers {
                self.retire_tokens.fetch_add(1, Ordering::Release);
                return false;
            }
            // SeqCst: Dekker with `try_spawn` (see there).
            match self
                .workers
                .compare_exchange_weak(w, w - 1, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Undoes `try_retire` when work arrived meanwhile; false at max (then
    /// the other workers take the work).
    fn unretire(&self) -> bool {
        let mut w = self.workers.load(Ordering::Relaxed);
        loop {
            if w >= self.cfg.max_workers {
                return false;
            }
            match self
                .workers
                .compare_exchange_weak(w, w + 1, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.retire_tokens.fetch_add(1, Ordering::Release);
                    return true;
                }
                Err(now) => w = now,
            }
        }
    }
}

fn explain_spawn_error(e: &io::Error) -> String {
    let hint = match e.raw_os_error() {
        Some(libc::EAGAIN) => {
            " (EAGAIN: RLIMIT_NPROC, kernel.threads-max, pid_max or a cgroup pids.max limit)"
        }
        Some(libc::ENOMEM) => " (ENOMEM: no memory for the stack, or vm.max_map_count reached)",
        _ => "",
    };
    format!("cannot create a worker thread: {e}{hint}")
}

/// xorshift64*: jitter only, not for anything that needs quality.
fn next_rand(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// What a worker does after its idle wait.
enum AfterIdle {
    /// Found work itself (its re-check, or an un-retire).
    Work,
    /// Was notified: counted in `waking` until it looks at the queue.
    Woken,
    /// Leaves.
    Retire,
}

fn worker_main(inner: Arc<Inner>, slot_idx: u32) {
    let record = exit_hook::register(&inner, slot_idx);
    let slot = inner.slots.get(slot_idx);
    inner.arrived();
    let mut woken = true;
    let mut rng = (u64::from(slot_idx) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ inner.epoch.elapsed().as_nanos() as u64
        | 1;
    loop {
        if woken {
            woken = false;
            if let Some(job) = inner.queue.pop() {
                inner.found_work();
                run_job(slot, job);
            }
        }
        while let Some(job) = inner.queue.pop() {
            run_job(slot, job);
        }
        if let Some(job) = inner.spin_for_job() {
            run_job(slot, job);
            continue;
        }
        if inner.is_shutdown() {
            // Shutdown: queue drained (no submitter can add more once the
            // bit is set and `begin_shutdown` saw them leave).
            if inner.queue.is_empty() {
                // Free the slot (now, or by the popper of its entry): a
                // submitter that entered before the shutdown bit may still
                // need a worker for its job after we left, and claims a
                // slot for it (test `pool::tests::a_job_queued_after_the_
                // last_worker_left_at_shutdown_still_runs`).
                inner.slots.retire(slot_idx);
                inner.workers.fetch_sub(1, Ordering::SeqCst);
                record.set(RetireReason::Shutdown, inner.epoch.elapsed());
                break;
            }
            continue;
        }
        match idle_wait(&inner, slot_idx, &mut rng) {
            AfterIdle::Work => continue,
            AfterIdle::Woken => {
                inner.arrived();
                woken = true;
            }
            AfterIdle::Retire => {
                record.set(RetireReason::Idle, inner.epoch.elapsed());
                break;
            }
        }
    }
    // Nothing else here: the bookkeeping runs from the exit hook, after
    // this thread is gone.
}

fn run_job(slot: &idle::Slot, job: Job) {
    if panic::catch_unwind(AssertUnwindSafe(|| job.run())).is_err() {
        slot.panicked.fetch_add(1, Ordering::Relaxed);
    }
    slot.completed.fetch_add(1, Ordering::Relaxed);
}

/// Marks the worker idle, parks until notified, and handles its
/// keep-alive expiring.
fn idle_wait(inner: &Inner, i: u32, rng: &mut u64) -> AfterIdle {
    let slot = inner.slots.get(i);
    if let Some(after) = go_idle(inner, i) {
        return after;
    }
    let mut deadline = Instant::now() + inner.keep_alive(rng);
    loop {
        let now = Instant::now();
        let wait = deadline.saturating_duration_since(now);
        if !wait.is_zero() {
            idle::futex_wait(&slot.state, IDLE, Some(wait));
        }
        // Acquire pairs with the SeqCst CAS to NOTIFIED (`notify_slot`).
        if slot.state.load(Ordering::Acquire) == NOTIFIED {
            slot.state.store(RUNNING, Ordering::Relaxed);
            return AfterIdle::Woken;
        }
        if Instant::now() < deadline {
            continue; // spurious wake-up or signal
        }
        // Keep-alive expired. Leave the notifiable state first.
        if !inner.slots.begin_retire(i) {
            slot.state.store(RUNNING, Ordering::Relaxed); // was NOTIFIED
            return AfterIdle::Woken;
        }
        if inner.try_retire() {
            // Dekker with `submit` (push, fence, read `workers` in
            // `try_spawn`): a job pushed before our decrement may have seen
            // the old count and started no worker; take it back then.
            fence(Ordering::SeqCst);
            if (!inner.queue.is_empty() || inner.is_shutdown()) && inner.unretire() {
                slot.state.store(RUNNING, Ordering::SeqCst);
                return AfterIdle::Work;
            }
            // Our last access to the slot: frees it now, or leaves that to
            // the popper of our entry if it is still in the stack.
            inner.slots.retire(i);
            return AfterIdle::Retire;
        }
        // Denied (no token, or at min_workers): idle again, retry later.
        slot.state.store(RUNNING, Ordering::Relaxed);
        if let Some(after) = go_idle(inner, i) {
            return after;
        }
        let at_min = inner.workers.load(Ordering::Relaxed) <= inner.cfg.min_workers;
        deadline = if at_min {
            // Re-check only at keep-alive pace; a minimum worker stays.
            Instant::now() + inner.keep_alive(rng)
        } else {
            // Waiting for a token: try again after roughly one grace period.
            let base = (inner.cfg.keep_alive / 16)
                .clamp(Duration::from_millis(1), Duration::from_millis(20));
            Instant::now() + base + Duration::from_nanos(next_rand(rng) % base.as_nanos() as u64)
        };
    }
}

/// RUNNING -> IDLE, onto the idle stack, then re-check for work. `None`:
/// the worker is idle and may park. `Some`: work or shutdown was found and
/// the worker is RUNNING again (`Woken` if a notification came meanwhile).
fn go_idle(inner: &Inner, i: u32) -> Option<AfterIdle> {
    let slot = inner.slots.get(i);
    // IDLE, and an entry in the idle stack unless one is still there: an
    // idle worker is always in the stack or being notified (Dekker with
    // `pop_idle` + `notify_slot`, see `Slots::enter_idle`).
    inner.slots.enter_idle(i);
    // Dekker with `submit` (queue push, fence, pop idle stack) and with
    // `begin_shutdown` (set bit, then notify every IDLE slot).
    fence(Ordering::SeqCst);
    if inner.queue.is_empty() && !inner.is_shutdown() {
        return None;
    }
    // Work arrived: take ourselves back, or accept a notification.
    if inner.slots.leave_idle(i) {
        Some(AfterIdle::Work)
    } else {
        // NOTIFIED: only we leave it.
        slot.state.store(RUNNING, Ordering::Relaxed);
        Some(AfterIdle::Woken)
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
    /// A pool with the default settings (see [`Builder`]).
    ///
    /// # Errors
    /// Never fails with default settings (no minimum workers to start).
    pub fn new() -> io::Result<Pool> {
        Builder::default().build()
    }

    /// A [`Builder`] with the default settings.
    pub fn builder() -> Builder {
        Builder::default()
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

    /// The last thread-creation failure, with the limit that explains it.
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
    /// If called from one of this pool's own jobs (it would wait for itself).
    pub fn shutdown(&self) -> ShutdownReport {
        assert!(
            !exit_hook::on_worker_of(&self.inner),
            "Pool::shutdown called from a job of the same pool"
        );
        let t0 = Instant::now();
        self.inner.begin_shutdown();
        let (lock, cv) = &self.inner.exited;
        // Acquire pairs with the AcqRel decrement in `worker_exited`.
        while self.inner.threads.load(Ordering::Acquire) != 0 {
            // Workers that have exited get cleaned up now rather than at the
            // reclaimer's next poll.
            if self.inner.workers.load(Ordering::SeqCst) == 0 {
                self.inner.domain.exit_barrier();
            }
            let g = lock.lock().unwrap_or_else(|e| e.into_inner());
            if self.inner.threads.load(Ordering::Acquire) == 0 {
                break;
            }
            drop(
                cv.wait_timeout(g, Duration::from_millis(1))
                    .unwrap_or_else(|e| e.into_inner()),
            );
        }
        // A job queued after the last worker left (none can be: submitters
        // drained before the workers were told) would run here.
        while let Some(job) = self.inner.queue.pop() {
            self.inner.run_on_caller(job);
        }
        ShutdownReport {
            stats: self.inner.stats(),
            took: t0.elapsed(),
        }
    }

    /// Immediate shutdown: stop accepting jobs and return the queued jobs
    /// that have not started. Scoped jobs are run here instead (their scope
    /// waits for them). Running jobs finish; workers exit on their own.
    pub fn shutdown_now(&self) -> Vec<Job> {
        // Set the bit first so no new job enters, then take the queue
        // before waking workers so they find it empty.
        self.inner.submit_state.fetch_or(SHUTDOWN, Ordering::SeqCst);
        let backoff = Backoff::new();
        while self.inner.submit_state.load(Ordering::Acquire) >= SUBMITTER {
            backoff.snooze();
        }
        let mut out = Vec::new();
        while let Some(job) = self.inner.queue.pop() {
            if job.scoped {
                self.inner.run_on_caller(job);
            } else {
                out.push(job);
            }
        }
        self.inner.begin_shutdown();
        out
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Graceful and non-blocking: workers drain the queue and exit.
        self.inner.begin_shutdown();
    }
}
