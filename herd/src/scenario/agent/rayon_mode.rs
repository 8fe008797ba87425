//! `herd agent --mode rayon`: a rayon `ThreadPool` of `--max-workers`
//! threads, each job queued with `ThreadPool::spawn` from the submitters
//! (rayon's injector queue, lock-free; sleeping workers are woken through
//! rayon's sleep module).
//!
//! rayon's pool has a fixed size and no keep-alive: its workers start once
//! with the pool and sleep through the gaps, so there is no retirement and
//! no exit herd, and `--keep-alive-ms` does not apply. It is the reference
//! for a pool that never shrinks: no churn at all, at the price of keeping
//! every thread (and its stack) for the whole run. Workers started and
//! stopped are counted in `start_handler` / `exit_handler` (atomics).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::churn::Churn;
use super::Config;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A rayon pool and its worker counts.
pub(super) struct RayonPool {
    pool: rayon::ThreadPool,
    started: Arc<AtomicU64>,
    stopped: Arc<AtomicU64>,
}

impl RayonPool {
    /// Builds the pool; rayon starts every worker now.
    pub(super) fn start(cfg: &Config) -> Result<RayonPool> {
        let started = Arc::new(AtomicU64::new(0));
        let stopped = Arc::new(AtomicU64::new(0));
        let (s, e) = (started.clone(), stopped.clone());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.max_workers)
            .thread_name(|i| format!("agent-rayon-{i}"))
            .start_handler(move |_| {
                s.fetch_add(1, Ordering::Relaxed);
            })
            .exit_handler(move |_| {
                // Release: pairs with `finish`'s Acquire load, so the
                // counts it reads after seeing every stop are complete.
                e.fetch_add(1, Ordering::Release);
            })
            .build()
            .with_context(|| {
                format!(
                    "cannot build a rayon pool of {} threads (a thread could not be created: \
                     RLIMIT_NPROC, kernel.threads-max, a cgroup pids.max or memory)",
                    cfg.max_workers
                )
            })?;
        Ok(RayonPool {
            pool,
            started,
            stopped,
        })
    }

    /// Queues `job` on the pool.
    pub(super) fn execute(&self, job: Job) {
        self.pool.spawn(job);
    }

    /// Drops the pool (its workers finish what is queued and exit) and
    /// waits for every worker to stop, at most 30 s.
    pub(super) fn finish(self) -> Result<Churn> {
        let threads = self.pool.current_num_threads() as u64;
        drop(self.pool);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.stopped.load(Ordering::Acquire) < threads {
            if Instant::now() > deadline {
                anyhow::bail!(
                    "rayon: {} of {threads} workers stopped 30 s after the pool was dropped",
                    self.stopped.load(Ordering::Acquire)
                );
            }
            thread::sleep(Duration::from_millis(1));
        }
        Ok(Churn {
            spawned: self.started.load(Ordering::Relaxed),
            // No keep-alive: the only exits are the shutdown's.
            exits_ns: Vec::new(),
            ..Churn::default()
        })
    }
}
