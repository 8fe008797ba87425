//! `herd agent --mode thread`: a new `std::thread` per job, with the
//! `--cleanup` hooks around it, joined at the end of its wave.
//!
//! A thread that cannot be created does not lose its job: the job runs on
//! the submitter. The failure is counted by error number and limit
//! ([`crate::spawn::failure::Failures`], as `herd storm` counts its own),
//! and diagnosed (which limit, with its numbers: reading the limits,
//! `/proc/self/maps`, every task for `RLIMIT_NPROC`) only once per error
//! number and wave: past a limit every creation of the wave fails, and a
//! diagnosis per failure (as this mode did) spent the wave reading
//! `/proc`, under the lock the other submitters wait on. The diagnosis
//! runs off that lock, right after the failure (while the limit is still
//! at its ceiling); the lock only counts.
//!
//! In a run forced past its pre-flight under a finite `RLIMIT_AS` or
//! `RLIMIT_DATA`, each creation first claims its room there
//! ([`exitq::limits::ThreadRoom`]): a thread that might get its stack but
//! not std's signal stack (std would abort the process) is not created,
//! and counts as a failure with that refusal as its diagnosis.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use exitq::limits::{NoRoom, ThreadRoom};

use super::churn::Churn;
use crate::spawn::failure::{DiagContext, Failures};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Thread per job: the wave's threads, the failures, the hooks.
pub(super) struct ThreadPerJob {
    /// The current wave's threads (joined at its end).
    handles: Mutex<Vec<thread::JoinHandle<()>>>,
    /// Threads created so far.
    created: AtomicU64,
    /// Failed creations by errno and limit.
    failures: Mutex<Failures>,
    /// Jobs run on a submitter after a failed creation.
    ran_on_caller: AtomicU64,
    hooks: Option<crate::cleanup::Hooks>,
    diag: DiagContext,
    /// The room each creation claims first (forced runs under a finite
    /// limit).
    room: Option<ThreadRoom>,
}

impl ThreadPerJob {
    /// No thread yet; `hooks` run on each job thread, each created after
    /// claiming `room` if given.
    pub(super) fn new(
        hooks: Option<crate::cleanup::Hooks>,
        room: Option<ThreadRoom>,
    ) -> ThreadPerJob {
        ThreadPerJob {
            handles: Mutex::new(Vec::new()),
            created: AtomicU64::new(0),
            failures: Mutex::new(Failures::default()),
            ran_on_caller: AtomicU64::new(0),
            hooks,
            diag: DiagContext::new(crate::spawn::failure::std_stack_bytes()),
            room,
        }
    }

    /// Runs `f` (a job of wave `wave`) on a new thread, or here when the
    /// thread cannot be created.
    pub(super) fn submit(&self, f: Job, wave: usize) {
        match spawn_or_return(f, &self.hooks, self.room.as_ref()) {
            Ok(h) => {
                self.created.fetch_add(1, Ordering::Relaxed);
                self.handles
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(h);
            }
            Err((f, e)) => {
                self.failed(&e, wave as u32);
                self.ran_on_caller.fetch_add(1, Ordering::Relaxed);
                f();
            }
        }
    }

    /// Counts a failed creation; diagnoses it, off the lock, when it is
    /// the first of its errno in this wave.
    fn failed(&self, e: &std::io::Error, wave: u32) {
        let created = self.created.load(Ordering::Relaxed);
        let lock = || self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(refused) = NoRoom::of(e) {
            lock().record_refused(refused, wave, created);
            return;
        }
        let errno = e.raw_os_error().unwrap_or(0);
        let fresh = if lock().needs_diagnosis(errno, wave, created) {
            Some(self.diag.diagnose(errno))
        } else {
            None
        };
        lock().record_with(errno, wave, created, fresh);
    }

    /// Joins the threads of a finished wave.
    pub(super) fn join_wave(&self) {
        let hs = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|e| e.into_inner()));
        for h in hs {
            let _ = h.join();
        }
    }

    /// Joins what is left and returns the churn: each job's thread exited
    /// right after its job ended (`ended_ns`: the job log's end times, 0
    /// for a job that did not run).
    pub(super) fn finish(self, ended_ns: &[AtomicU64]) -> Churn {
        self.join_wave();
        let failures = self
            .failures
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let ran_on_caller = self.ran_on_caller.into_inner();
        // Jobs run on the submitter after a failed creation are included:
        // their end is as close as we get.
        let exits_ns: Vec<u64> = ended_ns
            .iter()
            .map(|e| e.load(Ordering::Relaxed))
            .filter(|&e| e != 0)
            .collect();
        Churn {
            spawned: (exits_ns.len() as u64).saturating_sub(ran_on_caller),
            spawn_failures: failures.total(),
            failure_groups: failures.groups(),
            diagnoses: failures.diagnoses(),
            refused: failures.refused(),
            exits_ns,
            ran_on_caller,
            ..Churn::default()
        }
    }
}

/// Spawns a thread for `f` (with the cleanup hooks around it: start, and
/// for the strategies that exit from a hook, exit), or hands `f` back
/// with the error.
#[allow(clippy::type_complexity)]
fn spawn_or_return(
    f: Job,
    hooks: &Option<crate::cleanup::Hooks>,
    room: Option<&ThreadRoom>,
) -> std::result::Result<thread::JoinHandle<()>, (Job, std::io::Error)> {
    // The closure is parked in a slot the thread takes it from, so a failed
    // spawn (which drops the thread's closure) does not lose the job.
    let slot = Arc::new(Mutex::new(Some(f)));
    let s2 = slot.clone();
    let hooks = hooks.clone();
    let spawned = exitq::limits::spawn_std(room, thread::Builder::new(), None, move || {
        let f = s2.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = &hooks {
            h.thread_start();
        }
        if let Some(f) = f {
            f();
        }
        if let Some(h) = &hooks {
            h.thread_exit();
        }
    });
    match spawned {
        Ok(h) => Ok(h),
        Err(e) => {
            let f = slot
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("a thread that was never created did not take its job");
            Err((f, e))
        }
    }
}
