//! The state shared by the pool handle, its workers, scopes and exit hooks,
//! and what every part of the pool needs of it (running a job on a thread
//! that is not a worker; the test-only pause points).
//!
//! The mechanisms live in their own modules and work on this state:
//! submitting and shutting down (`submit`), waking an idle worker (`wake`),
//! starting one (`grow`), the worker's loop (`worker`), retirement
//! (`retire`), the exit bookkeeping (`exit_hook`), the counters (`stats`).
//! The slot table and idle stack are `idle`; the public facade is `pool`.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(test)]
use std::sync::Arc;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;

use super::config::Config;
use super::idle::Slots;
use super::job::{run_counted, Job};

/// Where a test hook runs (unit tests only): the tests in `pool/tests.rs`
/// pause a thread at one of these points to force an interleaving.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HookPoint {
    /// In `push_and_wake`, after `enter`, before the job is queued.
    BeforePush,
    /// In `notify_slot`: slot `i` was popped off the idle stack, its state
    /// not yet read.
    Popped(u32),
    /// In `notify_slot`: done with popped slot `i` (notified it or not).
    Checked(u32),
    /// In `worker::idle_wait`: the keep-alive of the worker on slot `i`
    /// expired, the worker still `IDLE`, before it begins to retire.
    KeepAliveExpired(u32),
}

/// A test hook; called with the pool's `Inner` at each `HookPoint`.
#[cfg(test)]
pub(super) type Hook = Arc<dyn Fn(&Inner, HookPoint) + Send + Sync>;

/// State shared by the pool handle, its workers, scopes and exit hooks.
pub(crate) struct Inner {
    pub(super) queue: SegQueue<Job>,
    pub(super) slots: Slots,
    /// `SHUTDOWN` bit + submitters in flight: the word and its state table
    /// are in `submit.rs`.
    pub(super) submit_state: CachePadded<AtomicUsize>,
    /// Available workers (RUNNING / IDLE / NOTIFIED / RETIRING slots).
    /// Every RMW is SeqCst: the count is one side of a Dekker pair
    /// (`wake.rs` docs, "No job is stranded").
    pub(super) workers: CachePadded<AtomicUsize>,
    /// Threads whose exit bookkeeping has not run yet.
    pub(super) threads: AtomicUsize,
    /// Workers polling the queue before they park (see `spin_for_job`).
    pub(super) spinning: CachePadded<AtomicUsize>,
    /// Workers notified (or just spawned) that have not yet looked at the
    /// queue. While one is on its way, submits wake nobody else: it takes
    /// the job, and wakes the next worker itself if more are queued. This
    /// ramps parallelism up one wake-up at a time (paced by how fast the
    /// woken threads get a CPU) instead of waking every idle worker at the
    /// start of a burst.
    pub(super) waking: CachePadded<AtomicUsize>,
    /// Retirement tokens (see `retire.rs`).
    pub(super) retire_tokens: AtomicUsize,
    pub(super) spawned: AtomicU64,
    pub(super) spawn_failures: AtomicU64,
    pub(super) retired_idle: AtomicU64,
    pub(super) retired_shutdown: AtomicU64,
    pub(super) retire_deferred: AtomicU64,
    pub(super) peak_workers: AtomicUsize,
    pub(super) ran_on_caller: AtomicU64,
    pub(super) last_spawn_error: Mutex<Option<String>>,
    /// The last diagnosis of a creation failure (`grow.rs`).
    pub(super) spawn_diagnosis: crate::limits::Recent,
    /// Test-only pause points (see `HookPoint`).
    #[cfg(test)]
    pub(super) hook: Mutex<Option<Hook>>,
    /// Runs each worker's exit bookkeeping after its thread is gone.
    pub(super) domain: crate::Domain,
    /// Shutdown waits here for `threads == 0`; only the last exit hook
    /// after a shutdown takes the lock.
    pub(super) exited: (Mutex<()>, Condvar),
    pub(super) epoch: Instant,
    pub(super) cfg: Config,
    /// The fork generation the pool was built in (`crate::fork`).
    fork_gen: u64,
}

impl Inner {
    /// A pool with no worker yet; `OutOfMemory` if its slot table (one
    /// slot per `max_workers`) cannot be allocated.
    pub(super) fn new(cfg: Config, domain: crate::Domain) -> io::Result<Self> {
        let slots = Slots::try_new(cfg.max_workers).map_err(|e| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "no memory for the slots of {} workers (max_workers): {e}",
                    cfg.max_workers
                ),
            )
        })?;
        Ok(Inner {
            queue: SegQueue::new(),
            slots,
            submit_state: CachePadded::new(AtomicUsize::new(0)),
            workers: CachePadded::new(AtomicUsize::new(0)),
            threads: AtomicUsize::new(0),
            spinning: CachePadded::new(AtomicUsize::new(0)),
            waking: CachePadded::new(AtomicUsize::new(0)),
            retire_tokens: AtomicUsize::new(cfg.retire_batch),
            spawned: AtomicU64::new(0),
            spawn_failures: AtomicU64::new(0),
            retired_idle: AtomicU64::new(0),
            retired_shutdown: AtomicU64::new(0),
            retire_deferred: AtomicU64::new(0),
            peak_workers: AtomicUsize::new(0),
            ran_on_caller: AtomicU64::new(0),
            last_spawn_error: Mutex::new(None),
            spawn_diagnosis: Default::default(),
            #[cfg(test)]
            hook: Mutex::new(None),
            domain,
            exited: (Mutex::new(()), Condvar::new()),
            epoch: Instant::now(),
            cfg,
            fork_gen: crate::fork::generation(),
        })
    }

    /// Whether this process is a `fork()` child of the one that built the
    /// pool: its workers do not exist here.
    pub(super) fn forked(&self) -> bool {
        crate::fork::is_child(self.fork_gen)
    }

    /// Panics in the child of a `fork()` (see the pool's docs, "fork()").
    pub(super) fn check_fork(&self) {
        if self.forked() {
            forked_panic();
        }
    }

    /// Runs a job on a thread that is not a worker (caller-runs).
    pub(super) fn run_on_caller(&self, job: Job) {
        self.ran_on_caller.fetch_add(1, Ordering::Relaxed);
        if job.scoped {
            // The scoped wrapper catches and records its own panics.
            job.run();
            self.slots.get(0).completed.fetch_add(1, Ordering::Relaxed);
        } else {
            // Counted against slot 0 so `stats` sees it.
            run_counted(self.slots.get(0), job);
        }
    }

    /// Runs the test hook, if one is installed, at `at`.
    #[cfg(test)]
    pub(super) fn run_hook(&self, at: HookPoint) {
        let hook = self.hook.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(h) = hook {
            h(self, at);
        }
    }
}

#[cold]
fn forked_panic() -> ! {
    panic!(
        "exitq: a Pool was used in the child of fork(); its workers do not exist \
         here. Build a new Pool in the child."
    )
}
