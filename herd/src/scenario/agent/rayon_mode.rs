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
//!
//! rayon starts its workers in `build` and gives up at the first that
//! cannot be created. Its own spawn handler is replaced by the same
//! `std::thread::Builder` call plus, on failure, the diagnosis of the
//! limit hit ([`exitq::limits::explain_thread_error`]), read right there:
//! once `build` returns, the workers already started are on their way
//! out and the limit may no longer be at its ceiling. The refusal (exit 3,
//! about `--max-workers`) names that limit with its numbers; the
//! pre-flight (`gpkit::preflight_threads`) does not see every limit
//! (memory, another process taking the last pids), and `--force` skips it.
//!
//! `start` returns when every worker sleeps ([`super::settle`]): rayon's
//! `build` returns while its new workers still look for work, for seconds
//! with thousands of them, and the measurement would include that.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;

use exitq::limits::ThreadRoom;

use super::churn::Churn;
use super::settle;
use super::Config;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The workers' names: `agent-rayon-N`.
const THREAD_PREFIX: &str = "agent-rayon-";

/// The longest wait for a new pool's workers to fall asleep.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// A rayon pool and its worker counts.
pub(super) struct RayonPool {
    pool: rayon::ThreadPool,
    started: Arc<AtomicU64>,
    stopped: Arc<AtomicU64>,
}

impl RayonPool {
    /// Builds the pool; rayon starts every worker now, each after
    /// claiming `room` if given.
    pub(super) fn start(cfg: &Config, room: Option<ThreadRoom>) -> Result<RayonPool> {
        let started = Arc::new(AtomicU64::new(0));
        let stopped = Arc::new(AtomicU64::new(0));
        let (s, e) = (started.clone(), stopped.clone());
        // The first failed creation, explained (see the module docs).
        let failed: Arc<Mutex<Option<String>>> = Arc::default();
        let f2 = failed.clone();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.max_workers)
            .thread_name(|i| format!("{THREAD_PREFIX}{i}"))
            .spawn_handler(move |t| {
                let index = t.index();
                let mut b = thread::Builder::new();
                if let Some(name) = t.name() {
                    b = b.name(name.to_owned());
                }
                if let Some(size) = t.stack_size() {
                    b = b.stack_size(size);
                }
                // Dropping the handle detaches the worker, as rayon's
                // default spawn handler does. With a room to claim, a
                // worker refused for want of it fails as one
                // `pthread_create` refused, its refusal the explanation.
                let stack = t.stack_size().map(|s| s as u64);
                match exitq::limits::spawn_std(room.as_ref(), b, stack, || t.run()) {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        let why = exitq::limits::explain_thread_error(&e, None);
                        let mut slot = f2.lock().unwrap_or_else(|e| e.into_inner());
                        slot.get_or_insert(format!("worker #{index}: {why}"));
                        Err(e)
                    }
                }
            })
            .start_handler(move |_| {
                s.fetch_add(1, Ordering::Relaxed);
            })
            .exit_handler(move |_| {
                // Release: pairs with `finish`'s Acquire load, so the
                // counts it reads after seeing every stop are complete.
                e.fetch_add(1, Ordering::Release);
            })
            .build();
        let pool = match pool {
            Ok(p) => p,
            Err(err) => {
                let why = failed.lock().unwrap_or_else(|e| e.into_inner()).take();
                return Err(match why {
                    Some(why) => crate::error::resource(
                        "--max-workers",
                        format!(
                            "cannot build a rayon pool of {} threads: {why}",
                            cfg.max_workers
                        ),
                    ),
                    None => anyhow::anyhow!(
                        "cannot build a rayon pool of {} threads: {err}",
                        cfg.max_workers
                    ),
                });
            }
        };
        // The measurement starts when every worker sleeps ([`settle`]).
        let count = || started.load(Ordering::Relaxed) as usize;
        if !settle::wait_until_asleep(THREAD_PREFIX, cfg.max_workers, count, SETTLE_LIMIT) {
            eprintln!(
                "herd: warning: {} of {} rayon workers started and {} asleep after {} s; \
                 measuring anyway",
                count(),
                cfg.max_workers,
                settle::asleep(THREAD_PREFIX).unwrap_or(0),
                SETTLE_LIMIT.as_secs()
            );
        }
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
    /// waits for every worker to stop, failing only when none has stopped
    /// for [`STOP_STALL`].
    pub(super) fn finish(self) -> Result<Churn> {
        let threads = self.pool.current_num_threads() as u64;
        drop(self.pool);
        wait_for_stops(|| self.stopped.load(Ordering::Acquire), threads, STOP_STALL)?;
        Ok(Churn {
            spawned: self.started.load(Ordering::Relaxed),
            // No keep-alive: the only exits are the shutdown's.
            exits_ns: Vec::new(),
            ..Churn::default()
        })
    }
}

/// The longest a dropped pool may go without one more worker stopping.
const STOP_STALL: Duration = Duration::from_secs(30);

/// Waits until `stopped()` reaches `threads`; an error when it has not
/// moved for `stall`. Not a deadline on the whole shutdown: rayon wakes
/// every worker to exit and each looks for work on every other first, so
/// 6,000 workers took about 20 s to stop on 2 CPUs and it grows faster
/// than n (docs/herd-guide.md): a fixed 30 s would fail a run of 15,000
/// after its measurement.
fn wait_for_stops(stopped: impl Fn() -> u64, threads: u64, stall: Duration) -> Result<()> {
    let (mut seen, mut since) = (stopped(), Instant::now());
    while seen < threads {
        thread::sleep(Duration::from_millis(1));
        let now = stopped();
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() > stall {
            anyhow::bail!(
                "rayon: {seen} of {threads} workers stopped, none in the {} s after the last \
                 (the pool was dropped)",
                stall.as_secs_f64()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::agent::Mode;

    /// `start` returns a pool whose workers all started and sleep: the
    /// measured phase no longer begins while they still look for work
    /// (rayon's `build` returns before that; the pool was measured so).
    #[test]
    fn a_started_pool_is_asleep() {
        let cfg = Config {
            mode: Mode::Rayon,
            waves: 1,
            jobs: 1,
            job_us: 0,
            gap_ms: 0,
            submitters: 1,
            max_workers: 300,
            min_workers: 0,
            keep_alive_ms: 1,
            jitter_ms: 0,
            retire_batch: 1,
            spin_us: 0,
            exit_poll_ms: None,
            cleanup: Default::default(),
        };
        let pool = RayonPool::start(&cfg, None).unwrap();
        let started = pool.started.load(Ordering::Relaxed);
        let asleep = settle::asleep(THREAD_PREFIX).unwrap();
        assert_eq!((started, asleep), (300, 300));
        let churn = pool.finish().unwrap();
        assert_eq!(churn.spawned, 300);
    }

    /// A shutdown that keeps stopping workers is waited for however long
    /// it takes (here one stop per look, 400 looks of 1 ms and more, with
    /// a stall limit of 50 ms; a fixed deadline of that limit failed it);
    /// one that stops making progress fails, naming the counts.
    #[test]
    fn a_slow_shutdown_is_waited_for_a_stalled_one_fails() {
        let n = std::cell::Cell::new(0);
        let step = || {
            n.set(n.get() + 1);
            n.get()
        };
        wait_for_stops(step, 400, Duration::from_millis(50)).unwrap();
        let e = wait_for_stops(|| 3, 400, Duration::from_millis(50)).unwrap_err();
        assert!(e.to_string().contains("3 of 400 workers stopped"), "{e}");
    }
}
