//! Per-worker state for the pool examples (`tokio_pool`, `rayon_pool`): a
//! shard of statistics per worker thread, kept in a thread-local for the
//! worker's jobs and in an RCU registry ([`RcuCell`]) that any thread reads
//! without a lock. A worker's cleanup (merge its counts into the totals,
//! unregister the shard) is registered with exitq when the worker starts,
//! so nothing is allocated and no lock is taken when it exits.
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use exitq::{Domain, RcuCell};

/// One worker's counts.
#[derive(Default)]
pub struct Shard {
    jobs: AtomicU64,
}

/// The shards of the live workers and the totals of retired ones.
pub struct Shards {
    pub domain: Domain,
    live: RcuCell<Vec<Arc<Shard>>>,
    retired_jobs: AtomicU64,
    pub started: AtomicU64,
    pub stopped: AtomicU64,
    pub cleanups: AtomicU64,
}

thread_local! {
    static SHARD: RefCell<Option<Arc<Shard>>> = const { RefCell::new(None) };
}

impl Shards {
    pub fn new() -> Arc<Shards> {
        let domain = Domain::new();
        Arc::new(Shards {
            live: RcuCell::new(&domain, Vec::new()),
            domain,
            retired_jobs: AtomicU64::new(0),
            started: AtomicU64::new(0),
            stopped: AtomicU64::new(0),
            cleanups: AtomicU64::new(0),
        })
    }

    /// The pool's thread-start hook: a shard for this worker, and its
    /// cleanup registered with exitq (allocated now, run after the worker
    /// exits, on exitq's reclaimer).
    pub fn worker_start(self: &Arc<Shards>) {
        let shard = Arc::new(Shard::default());
        self.live
            .update(|v| v.iter().cloned().chain([shard.clone()]).collect());
        let (shards, mine) = (self.clone(), shard.clone());
        self.domain.register_exit(move || {
            shards.live.update(|v| {
                v.iter()
                    .filter(|s| !Arc::ptr_eq(s, &mine))
                    .cloned()
                    .collect()
            });
            let jobs = mine.jobs.load(Ordering::Relaxed);
            shards.retired_jobs.fetch_add(jobs, Ordering::Relaxed);
            shards.cleanups.fetch_add(1, Ordering::Relaxed);
        });
        SHARD.set(Some(shard));
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// The pool's thread-stop hook: hand this worker's cleanup to exitq now
    /// (one compare-and-swap; leaving it to the thread's exit does the
    /// same a little later). Release: pairs with `wait_stopped`.
    pub fn worker_stop(&self) {
        self.domain.retire_thread();
        self.stopped.fetch_add(1, Ordering::Release);
    }

    /// Counts a job on the calling worker's shard.
    pub fn count_job() {
        SHARD.with_borrow(|s| {
            if let Some(s) = s {
                s.jobs.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// Jobs of live and retired workers, read without a lock.
    pub fn total_jobs(&self) -> u64 {
        let live: u64 = self
            .live
            .with(|v| v.iter().map(|s| s.jobs.load(Ordering::Relaxed)).sum());
        live + self.retired_jobs.load(Ordering::Relaxed)
    }

    /// Live shards.
    pub fn live_workers(&self) -> usize {
        self.live.with(|v| v.len())
    }

    /// Waits until `n` workers have stopped (a pool retires them on its
    /// own schedule), then until their cleanups have run.
    pub fn wait_stopped(&self, n: u64) {
        while self.stopped.load(Ordering::Acquire) < n {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.domain.exit_barrier();
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
