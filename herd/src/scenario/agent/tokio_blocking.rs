//! `herd agent --mode tokio-blocking`: tokio's blocking pool as its users
//! run it, `Handle::spawn_blocking` from the submitters on a runtime built
//! with `max_blocking_threads(--max-workers)` and
//! `thread_keep_alive(--keep-alive-ms)`.
//!
//! The runtime is a current-thread one that nobody drives: `spawn_blocking`
//! needs no async worker, so the only threads are the blocking pool's,
//! which it starts on demand (a job finding no idle thread starts one, up
//! to the cap) and which retire after exactly the keep-alive idle, each
//! taking the pool's mutex to leave (`tokio/src/runtime/blocking/pool.rs`):
//! the threads a burst started retire together in the gap. exitq plays no
//! part here.
//!
//! Threads started are counted in `on_thread_start`, retirements in
//! `on_thread_stop` (before the runtime's shutdown; the stops of the
//! shutdown are not retirements), with an atomic and a lock-free queue, so
//! the counting adds no lock to tokio's exit path.
//!
//! tokio has no spawn handler, so its failures cannot be diagnosed where
//! they happen, and one it cannot see aborts the process: a thread created
//! in the last room under `RLIMIT_AS` cannot map the signal stack std
//! gives every thread, and std aborts ("failed to allocate an alternative
//! stack"). So this mode runs only when the pre-flight
//! (`gpkit::preflight_threads_problem`, as for the other modes) finds room
//! for the pool at its largest, and never with `--force`: a run that
//! would not fit is refused (exit 3, the limit named).
//!
//! A thread creation tokio cannot make while it has other threads is
//! invisible: the job waits for a running thread. With no thread at all,
//! `spawn_blocking` panics ("OS can't spawn worker thread"): that is
//! counted as a spawn failure and the job runs on the submitter, taken
//! back from the slot it was handed over in (an uncontended mutex per
//! job, the price of losing nothing). The panic is caught, and kept off
//! stderr while the runtime lives (`spawn_panic.rs`): herd's warning
//! gives tokio's message, where Rust's panic hook printed `thread ...
//! panicked at` once per failed job.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_queue::SegQueue;

use super::churn::{Churn, SpawnNote};
use super::spawn_panic::{self, QuietSpawnFailure};
use super::Config;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The job's hand-over slot: whoever takes it first runs it.
type Slot = Arc<Mutex<Option<Job>>>;

fn take(slot: &Slot) -> Option<Job> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// A tokio runtime used for its blocking pool, and its thread counts.
pub(super) struct TokioBlocking {
    rt: tokio::runtime::Runtime,
    started: Arc<AtomicU64>,
    /// When each blocking thread retired (before the shutdown).
    retired: Arc<SegQueue<Instant>>,
    shutting_down: Arc<AtomicBool>,
    spawn_failures: AtomicU64,
    ran_on_caller: AtomicU64,
    /// The last failure: when, and tokio's message.
    last_spawn_error: Mutex<Option<(Instant, String)>>,
    /// tokio's panic at a failure kept off stderr until the runtime is
    /// shut down (dropped last, after `rt`).
    _quiet: QuietSpawnFailure,
}

impl TokioBlocking {
    /// The runtime, with no thread started yet.
    pub(super) fn start(cfg: &Config) -> Result<TokioBlocking> {
        let started = Arc::new(AtomicU64::new(0));
        let retired = Arc::new(SegQueue::new());
        let shutting_down = Arc::new(AtomicBool::new(false));
        let (s, r, down) = (started.clone(), retired.clone(), shutting_down.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(cfg.max_workers)
            .thread_keep_alive(Duration::from_millis(cfg.keep_alive_ms))
            .thread_name("agent-tokio")
            .on_thread_start(move || {
                s.fetch_add(1, Ordering::Relaxed);
            })
            .on_thread_stop(move || {
                // Relaxed: the flag is set before the runtime's shutdown
                // starts stopping threads, on the thread that then waits
                // for them; a stop racing it is a retirement anyway.
                if !down.load(Ordering::Relaxed) {
                    r.push(Instant::now());
                }
            })
            .build()
            .context("cannot build the tokio runtime")?;
        Ok(TokioBlocking {
            rt,
            started,
            retired,
            shutting_down,
            spawn_failures: AtomicU64::new(0),
            ran_on_caller: AtomicU64::new(0),
            last_spawn_error: Mutex::new(None),
            _quiet: QuietSpawnFailure::install(),
        })
    }

    /// Hands `job` to the blocking pool (the job's `JoinHandle` is
    /// dropped: detached, as fire-and-forget users do).
    pub(super) fn execute(&self, job: Job) {
        let slot: Slot = Arc::new(Mutex::new(Some(job)));
        let theirs = slot.clone();
        let spawned = spawn_panic::catch(|| {
            drop(self.rt.handle().spawn_blocking(move || {
                if let Some(job) = take(&theirs) {
                    job();
                }
            }));
        });
        if let Err(payload) = spawned {
            self.spawn_failures.fetch_add(1, Ordering::Relaxed);
            *self
                .last_spawn_error
                .lock()
                .unwrap_or_else(|e| e.into_inner()) =
                Some((Instant::now(), spawn_panic::message(&*payload)));
            if let Some(job) = take(&slot) {
                self.ran_on_caller.fetch_add(1, Ordering::Relaxed);
                job();
            }
        }
    }

    /// Shuts the runtime down (its blocking threads stop) and returns the
    /// churn; `ns` converts an instant to the run's clock.
    pub(super) fn finish(self, ns: impl Fn(Instant) -> u64) -> Result<Churn> {
        // Relaxed: the runtime's shutdown below signals the threads through
        // its own mutex, which orders this store before their stops.
        self.shutting_down.store(true, Ordering::Relaxed);
        self.rt.shutdown_timeout(Duration::from_secs(30));
        let mut exits_ns = Vec::with_capacity(self.retired.len());
        while let Some(t) = self.retired.pop() {
            exits_ns.push(ns(t));
        }
        Ok(Churn {
            spawned: self.started.load(Ordering::Relaxed),
            spawn_failures: self.spawn_failures.into_inner(),
            spawn_note: self
                .last_spawn_error
                .into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .map(|(at, why)| SpawnNote {
                    which: format!(
                        "the last failure ({:.3} s into the run; tokio's `spawn_blocking` with \
                         no thread left)",
                        ns(at) as f64 / 1e9
                    ),
                    why,
                }),
            exits_ns,
            ran_on_caller: self.ran_on_caller.into_inner(),
            ..Churn::default()
        })
    }
}
