//! The baseline pool of `herd agent --mode mutex-pool`: one mutex over all
//! the bookkeeping, one condition variable, a plain keep-alive.
//!
//! This is the shape of tokio's blocking pool (`tokio/src/runtime/blocking/
//! pool.rs`: `Mutex<Shared>` with the queue, `num_idle`, `num_notify`,
//! `num_th`, and a `Condvar` waited on with the keep-alive as timeout) and of
//! Java's `ThreadPoolExecutor` (a `mainLock` taken by every exiting worker in
//! `processWorkerExit`). Every idle worker times out after exactly
//! `keep_alive` and takes the lock to leave, so workers started by one
//! burst leave together.
//!
//! A worker that cannot be created is counted and explained (which limit,
//! with its numbers: [`exitq::limits::explain_thread_error`]), but the
//! explanation reads `/proc` (the limits, `/proc/self/maps`, every task
//! for `RLIMIT_NPROC`): done under the pool's lock it would stall every
//! worker and submitter and skew the baseline this pool is. So the lock
//! only counts the failure and notes whether its error number is new to
//! the run; the submitter that saw a new one explains it after releasing
//! the lock, right away (while the limit is still at its ceiling: after
//! the run the workers are gone and nothing would be). Later failures of
//! the same error number are counted only. Given a room to claim
//! ([`MutexPool::with_room`]: forced runs under a finite `RLIMIT_AS` or
//! `RLIMIT_DATA`), a worker that might get its stack but not std's signal
//! stack is not created: a failure like the others, its refusal the
//! explanation (no OS error number: one group of its own).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Counters reported by the scenario.
#[derive(Debug, Clone, Default)]
pub struct MutexPoolStats {
    /// Worker threads created.
    pub spawned: u64,
    /// Thread creations that failed.
    pub spawn_failures: u64,
    /// The first failed creation of each error number: when it happened
    /// and its explanation (the error, the limit at its ceiling and its
    /// numbers). Later failures of the same error number are counted only.
    pub spawn_errors: Vec<(Instant, String)>,
    /// When each idle worker decided to leave.
    pub retirements: Vec<Instant>,
    /// Jobs run on the submitter because no worker could be created.
    pub ran_on_caller: u64,
}

struct Shared {
    queue: VecDeque<Job>,
    num_th: usize,
    num_idle: usize,
    num_notify: usize,
    shutdown: bool,
    stats: MutexPoolStats,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// A worker joined before `shutdown` had panicked.
    panicked: bool,
    /// Error numbers of failed creations seen so far (each is explained
    /// once, off the lock).
    failed_errnos: Vec<Option<i32>>,
}

struct Inner {
    shared: Mutex<Shared>,
    condvar: Condvar,
    max: usize,
    keep_alive: Duration,
    room: Option<exitq::limits::ThreadRoom>,
}

/// A pool with mutex bookkeeping and a plain keep-alive.
pub struct MutexPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MutexPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexPool")
            .field("max", &self.inner.max)
            .finish()
    }
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MutexPool {
    /// A pool of at most `max` workers that retire after `keep_alive` idle.
    pub fn new(max: usize, keep_alive: Duration) -> Self {
        Self::with_room(max, keep_alive, None)
    }

    /// As [`MutexPool::new`], each worker created after claiming `room`
    /// if given ([`exitq::limits::ThreadRoom`]).
    pub fn with_room(
        max: usize,
        keep_alive: Duration,
        room: Option<exitq::limits::ThreadRoom>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                shared: Mutex::new(Shared {
                    queue: VecDeque::new(),
                    num_th: 0,
                    num_idle: 0,
                    num_notify: 0,
                    shutdown: false,
                    stats: MutexPoolStats::default(),
                    workers: Vec::new(),
                    panicked: false,
                    failed_errnos: Vec::new(),
                }),
                condvar: Condvar::new(),
                max,
                keep_alive,
                room,
            }),
        }
    }

    /// Queues `job`: notify an idle worker, else start one below `max`.
    pub fn execute(&self, job: Job) {
        let mut g = lock(&self.inner.shared);
        g.queue.push_back(job);
        if g.num_idle > 0 {
            g.num_idle -= 1;
            g.num_notify += 1;
            self.inner.condvar.notify_one();
        } else if g.num_th < self.inner.max {
            let id = g.stats.spawned;
            let inner = self.inner.clone();
            let b = std::thread::Builder::new().name(format!("mutex-pool-{id}"));
            let room = self.inner.room.as_ref();
            match exitq::limits::spawn_std(room, b, None, move || worker(inner)) {
                Ok(h) => {
                    g.num_th += 1;
                    g.stats.spawned += 1;
                    // Joined at shutdown; finished handles are joined here
                    // (after the lock) so the list does not grow without
                    // end. Not dropped: a drop is `pthread_detach`, and
                    // glibc's detach of a thread still on its way out
                    // (finished means its closure returned) can read its
                    // descriptor after another exit unmapped it (herd's
                    // `spawn::detach`).
                    let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut g.workers)
                        .into_iter()
                        .partition(|w| w.is_finished());
                    g.workers = running;
                    g.workers.push(h);
                    drop(g);
                    let panicked = done
                        .into_iter()
                        .fold(false, |any, w| w.join().is_err() | any);
                    if panicked {
                        // Reported by `shutdown`, as a panic of a worker
                        // still listed is.
                        lock(&self.inner.shared).panicked = true;
                    }
                }
                Err(e) => {
                    let at = Instant::now();
                    // Under the lock only what is cheap: count, and note
                    // whether this error number is new to the run.
                    g.stats.spawn_failures += 1;
                    let new_errno = !g.failed_errnos.contains(&e.raw_os_error());
                    if new_errno {
                        g.failed_errnos.push(e.raw_os_error());
                    }
                    // No worker at all: run the job here rather than
                    // strand it.
                    let job = if g.num_th == 0 {
                        g.stats.ran_on_caller += 1;
                        g.queue.pop_back()
                    } else {
                        None
                    };
                    drop(g);
                    if new_errno {
                        // Off the lock, right after the failure (the limit
                        // is still at its ceiling). std's default stack.
                        let why = exitq::limits::explain_thread_error(&e, None);
                        lock(&self.inner.shared).stats.spawn_errors.push((at, why));
                    }
                    if let Some(job) = job {
                        job();
                    }
                }
            }
        }
    }

    /// Runs what is queued, stops every worker, joins them and returns the
    /// counters.
    pub fn shutdown(self) -> io::Result<MutexPoolStats> {
        let handles = {
            let mut g = lock(&self.inner.shared);
            g.shutdown = true;
            self.inner.condvar.notify_all();
            std::mem::take(&mut g.workers)
        };
        // Every worker joined, then any panic reported.
        let panicked = handles
            .into_iter()
            .fold(false, |any, h| h.join().is_err() | any);
        if panicked || lock(&self.inner.shared).panicked {
            return Err(io::Error::other("a mutex-pool worker panicked"));
        }
        let mut g = lock(&self.inner.shared);
        while let Some(job) = g.queue.pop_front() {
            g.stats.ran_on_caller += 1;
            drop(g);
            job();
            g = lock(&self.inner.shared);
        }
        Ok(std::mem::take(&mut g.stats))
    }
}

fn worker(inner: Arc<Inner>) {
    let mut g = lock(&inner.shared);
    'outer: loop {
        while let Some(job) = g.queue.pop_front() {
            drop(g);
            // Jobs of the scenario do not panic; a panic would end the
            // worker like in tokio's pool (and be reported at join).
            job();
            g = lock(&inner.shared);
        }
        if g.shutdown {
            break;
        }
        g.num_idle += 1;
        loop {
            let (ng, timeout) = inner
                .condvar
                .wait_timeout(g, inner.keep_alive)
                .unwrap_or_else(|e| e.into_inner());
            g = ng;
            if g.num_notify > 0 {
                g.num_notify -= 1;
                continue 'outer;
            }
            if g.shutdown {
                g.num_idle -= 1;
                break 'outer;
            }
            if timeout.timed_out() {
                // Plain keep-alive: leave now, under the pool's lock.
                g.num_idle -= 1;
                g.num_th -= 1;
                g.stats.retirements.push(Instant::now());
                return;
            }
        }
    }
    g.num_th -= 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn runs_every_job_and_retires_idle_workers() {
        let pool = MutexPool::new(4, Duration::from_millis(5));
        let n = Arc::new(AtomicUsize::new(0));
        for _ in 0..1000 {
            let n = n.clone();
            pool.execute(Box::new(move || {
                n.fetch_add(1, Ordering::SeqCst);
            }));
        }
        std::thread::sleep(Duration::from_millis(100));
        let stats = pool.shutdown().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1000);
        assert!((1..=4).contains(&stats.spawned), "{stats:?}");
        assert_eq!(stats.retirements.len() as u64, stats.spawned);
    }
}
