//! What runs `herd agent`'s jobs: a thread per job ([`ThreadPerJob`]),
//! the mutex pool, exitq::pool, tokio's blocking pool or a rayon pool
//! ([`Runner`]), the job body and its timing log, the
//! submitters' share of a wave, and the [`Churn`] each runner reports when
//! it is shut down.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use exitq::limits::ThreadRoom;

use super::churn::{Churn, SpawnNote};
use super::per_job::ThreadPerJob;
use super::rayon_mode::RayonPool;
use super::tokio_blocking::TokioBlocking;
use super::{Config, Mode, MutexPool};

/// Per-job timing, shared by the jobs of a run: preallocated, one slot per
/// job, so recording takes no lock in any mode.
pub(super) struct JobLog {
    /// ns since start at which each job began (0 = not run).
    pub(super) started_ns: Vec<AtomicU64>,
    /// ns since start at which each job finished.
    pub(super) ended_ns: Vec<AtomicU64>,
    /// Jobs finished in the current wave, and who waits for the last one.
    pub(super) done: AtomicUsize,
    pub(super) waiter: Mutex<Option<Thread>>,
    pub(super) t0: Instant,
}

impl JobLog {
    pub(super) fn ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }
}

/// The job body: record, spin `job_us`, record, count.
pub(super) fn job(log: &JobLog, idx: usize, job_us: u64, wave_jobs: usize) {
    log.started_ns[idx].store(log.ns().max(1), Ordering::Relaxed);
    if job_us > 0 {
        let t = Instant::now();
        let d = Duration::from_micros(job_us);
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }
    log.ended_ns[idx].store(log.ns().max(1), Ordering::Relaxed);
    // AcqRel: the last job's increment publishes every job's stores to the
    // waiter, which reads `done` with Acquire.
    if log.done.fetch_add(1, Ordering::AcqRel) + 1 == wave_jobs {
        if let Some(t) = log
            .waiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            t.unpark();
        }
    }
}

/// Something that runs jobs.
pub(super) enum Runner {
    /// Thread per job; the hooks of `--cleanup` run on each job thread.
    Thread(ThreadPerJob),
    MutexPool(MutexPool),
    ExitqPool(exitq::pool::Pool, Arc<Mutex<Vec<Instant>>>),
    TokioBlocking(TokioBlocking),
    Rayon(RayonPool),
}

impl Runner {
    /// Runs `f`, a job of wave `wave`.
    pub(super) fn submit(&self, f: Box<dyn FnOnce() + Send + 'static>, wave: usize) {
        match self {
            Runner::Thread(t) => t.submit(f, wave),
            Runner::MutexPool(p) => p.execute(f),
            Runner::ExitqPool(p, _) => {
                if let Err(rejected) = p.execute(f) {
                    (rejected.0)();
                }
            }
            Runner::TokioBlocking(p) => p.execute(f),
            Runner::Rayon(p) => p.execute(f),
        }
    }
}

impl Runner {
    /// The runner of `cfg.mode`, started (the pools' minimum workers too).
    /// Each std thread it creates claims `room` first, if given (tokio's
    /// pool never runs with one: `--force` is refused there).
    pub(super) fn start(
        cfg: &Config,
        hooks: Option<crate::cleanup::Hooks>,
        room: Option<ThreadRoom>,
    ) -> Result<Runner> {
        Ok(match cfg.mode {
            Mode::Thread => Runner::Thread(ThreadPerJob::new(hooks, room)),
            Mode::MutexPool => Runner::MutexPool(MutexPool::with_room(
                cfg.max_workers,
                Duration::from_millis(cfg.keep_alive_ms),
                room,
            )),
            Mode::ExitqPool => {
                let exits = Arc::new(Mutex::new(Vec::new()));
                let e2 = exits.clone();
                let mut builder = exitq::pool::Pool::builder();
                if let Some(p) = cfg.exit_poll_ms {
                    let domain = exitq::Domain::builder()
                        .thread_name("agent-reclaim")
                        .exit_poll(Some(Duration::from_millis(p)))
                        .try_build()
                        .context("cannot build the exitq domain")?;
                    builder = builder.domain(domain);
                }
                if let Some(room) = room {
                    builder = builder.thread_room(room);
                }
                let pool = builder
                    .min_workers(cfg.min_workers)
                    .max_workers(cfg.max_workers)
                    .keep_alive(Duration::from_millis(cfg.keep_alive_ms))
                    .keep_alive_jitter(Duration::from_millis(cfg.jitter_ms))
                    .retire_batch(cfg.retire_batch)
                    .spin(Duration::from_micros(cfg.spin_us))
                    .thread_name("agent")
                    .on_retire(move |r| {
                        if r.reason == exitq::pool::RetireReason::Idle {
                            e2.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(r.decided_at);
                        }
                    })
                    .build()
                    .context("cannot start the exitq pool's minimum workers")?;
                Runner::ExitqPool(pool, exits)
            }
            Mode::TokioBlocking => Runner::TokioBlocking(TokioBlocking::start(cfg)?),
            Mode::Rayon => Runner::Rayon(RayonPool::start(cfg, room)?),
        })
    }

    /// Joins the threads of a finished wave (thread per job only).
    pub(super) fn join_wave(&self) {
        if let Runner::Thread(t) = self {
            t.join_wave();
        }
    }
}

/// Submitter `s` of `cfg.submitters` queues its share of wave `w`.
pub(super) fn submit_share(
    runner: &Arc<Runner>,
    log: &Arc<JobLog>,
    submitted: &Arc<Vec<AtomicU64>>,
    cfg: &Config,
    w: usize,
    s: usize,
) {
    let (job_us, wave_jobs) = (cfg.job_us, cfg.jobs);
    for j in (s..cfg.jobs).step_by(cfg.submitters) {
        let idx = w * cfg.jobs + j;
        submitted[idx].store(log.ns(), Ordering::Relaxed);
        let log = log.clone();
        let f: Box<dyn FnOnce() + Send> = Box::new(move || job(&log, idx, job_us, wave_jobs));
        runner.submit(f, w);
    }
}

/// Shuts the runner down and gathers its churn figures.
pub(super) fn finish(runner: Runner, log: &JobLog) -> Result<Churn> {
    let base = log.t0;
    let ns = |t: Instant| t.saturating_duration_since(base).as_nanos() as u64;
    Ok(match runner {
        Runner::Thread(t) => t.finish(&log.ended_ns),
        Runner::MutexPool(p) => {
            let s = p.shutdown()?;
            // The last error number's first failure: with one error
            // number (the usual case) the first failure of the run.
            let spawn_note = s.spawn_errors.last().map(|(at, why)| SpawnNote {
                which: format!(
                    "the first failure of its error number ({:.3} s into the run; later ones \
                     of that number are counted, not explained)",
                    ns(*at) as f64 / 1e9
                ),
                why: why.clone(),
            });
            Churn {
                spawned: s.spawned,
                spawn_failures: s.spawn_failures,
                spawn_note,
                exits_ns: s.retirements.into_iter().map(ns).collect(),
                ran_on_caller: s.ran_on_caller,
                ..Churn::default()
            }
        }
        Runner::ExitqPool(p, exits) => {
            let report = p.shutdown();
            let exits = exits.lock().unwrap_or_else(|e| e.into_inner());
            Churn {
                spawned: report.stats.spawned,
                spawn_failures: report.stats.spawn_failures,
                spawn_note: p.last_spawn_error().map(|why| SpawnNote {
                    which: "the last failure (exitq's pool explains each when it happens)".into(),
                    why,
                }),
                exits_ns: exits.iter().map(|&t| ns(t)).collect(),
                ran_on_caller: report.stats.ran_on_caller,
                ..Churn::default()
            }
        }
        Runner::TokioBlocking(p) => p.finish(ns)?,
        Runner::Rayon(p) => p.finish()?,
    })
}

/// The submitter threads (all but the first, which is the measuring
/// thread itself): they live for the whole run, so they are not part of
/// the churn, and queue their share of each wave between two barriers.
pub(super) struct Submitters {
    start: Arc<Barrier>,
    end: Arc<Barrier>,
    wave_no: Arc<AtomicUsize>,
    helpers: Vec<thread::JoinHandle<()>>,
}

impl Submitters {
    /// Starts `cfg.submitters - 1` helper threads, each after claiming
    /// `room` if given.
    pub(super) fn start(
        cfg: &Config,
        runner: &Arc<Runner>,
        log: &Arc<JobLog>,
        submitted: &Arc<Vec<AtomicU64>>,
        room: Option<&ThreadRoom>,
    ) -> Result<Submitters> {
        let start = Arc::new(Barrier::new(cfg.submitters));
        let end = Arc::new(Barrier::new(cfg.submitters));
        let wave_no = Arc::new(AtomicUsize::new(0));
        let helpers = (1..cfg.submitters)
            .map(|s| {
                let (runner, log, sub, start, end, wave_no) = (
                    runner.clone(),
                    log.clone(),
                    submitted.clone(),
                    start.clone(),
                    end.clone(),
                    wave_no.clone(),
                );
                let cfg = cfg.clone();
                let b = thread::Builder::new().name(format!("submitter-{s}"));
                exitq::limits::spawn_std(room, b, None, move || loop {
                    start.wait();
                    let w = wave_no.load(Ordering::SeqCst);
                    if w == usize::MAX {
                        return;
                    }
                    submit_share(&runner, &log, &sub, &cfg, w, s);
                    end.wait();
                })
                .context("cannot create a submitter thread")
            })
            .collect::<Result<_>>()?;
        Ok(Submitters {
            start,
            end,
            wave_no,
            helpers,
        })
    }

    /// Every submitter (this thread as number 0) queues its share of wave `w`.
    pub(super) fn submit_wave(
        &self,
        w: usize,
        cfg: &Config,
        runner: &Arc<Runner>,
        log: &Arc<JobLog>,
        submitted: &Arc<Vec<AtomicU64>>,
    ) {
        self.wave_no.store(w, Ordering::SeqCst);
        self.start.wait();
        submit_share(runner, log, submitted, cfg, w, 0);
        self.end.wait();
    }

    /// Stops and joins the helpers.
    pub(super) fn stop(self) {
        self.wave_no.store(usize::MAX, Ordering::SeqCst);
        self.start.wait();
        for h in self.helpers {
            let _ = h.join();
        }
    }
}
