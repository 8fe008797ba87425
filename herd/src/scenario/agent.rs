//! `herd agent`: the workload of a service agent. Bursts of short jobs
//! arrive in waves separated by idle gaps; each job is run by
//!
//! * `--mode thread`: a new thread per job (joined at the end of the wave);
//! * `--mode mutex-pool`: a pool with mutex bookkeeping and a plain
//!   keep-alive, shaped like tokio's blocking pool ([`mutex_pool`]);
//! * `--mode exitq-pool`: [`exitq::pool::Pool`]: lock-free queue and idle
//!   stack, jittered keep-alive, at most K retirements per grace period,
//!   exit bookkeeping deferred to exitq's reclaimer.
//!
//! With a keep-alive shorter than the gap, both pools shrink in every gap
//! and grow again in every burst, so the idle workers of a burst retire in
//! every gap: the exit herd, once per wave.
//!
//! The measured phase is every wave's burst *and* its gap (the retirements
//! happen in the gaps); the pool is built before and shut down after it.
//! Figures: wall time, user and sys CPU (getrusage of the process, which is
//! a child of its own per measurement under `-r`), jobs/s over the bursts,
//! sys and futex calls per job, thread creations and exits, how the exits
//! bunch up (`max_exits_per_ms`: the most exits within any 1 ms), and the
//! queueing latency of jobs.

mod mutex_pool;

pub use mutex_pool::{MutexPool, MutexPoolStats};

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::error::{usage, EXIT_INTERRUPTED};
use crate::export::run::{emit, repeat, OutputArgs};
use crate::perf::{self, PerfArgs};
use crate::result::{Metric, RunResult};
use crate::runner;
use crate::stats::Summary;

/// How jobs are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// A new thread per job.
    Thread,
    /// A pool with one mutex over its bookkeeping and a plain keep-alive.
    MutexPool,
    /// exitq::pool: lock-free, staggered retirement through exitq.
    ExitqPool,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Thread => "thread",
            Mode::MutexPool => "mutex-pool",
            Mode::ExitqPool => "exitq-pool",
        }
    }
}

/// Flags of `herd agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How jobs are run.
    #[arg(long, value_enum, default_value_t = Mode::ExitqPool)]
    pub mode: Mode,
    /// Number of waves (bursts).
    #[arg(long, default_value_t = 20)]
    pub waves: usize,
    /// Jobs per wave.
    #[arg(long, default_value_t = 1000)]
    pub jobs: usize,
    /// Busy work per job, in microseconds (0: an empty job).
    #[arg(long, default_value_t = 20)]
    pub job_us: u64,
    /// Idle gap after each wave, in milliseconds.
    #[arg(long, default_value_t = 60)]
    pub gap_ms: u64,
    /// Threads submitting each wave's jobs concurrently.
    #[arg(long, default_value_t = 1)]
    pub submitters: usize,
    /// Pools: most workers at once.
    #[arg(long, default_value_t = 64)]
    pub max_workers: usize,
    /// exitq-pool: workers kept when idle (the mutex pool has none).
    #[arg(long, default_value_t = 0)]
    pub min_workers: usize,
    /// Pools: idle time before a worker retires, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub keep_alive_ms: u64,
    /// exitq-pool: keep-alive jitter in milliseconds (default: half the keep-alive).
    #[arg(long)]
    pub jitter_ms: Option<u64>,
    /// exitq-pool: at most this many retirements per grace period.
    #[arg(long, default_value_t = 2)]
    pub retire_batch: usize,
    /// exitq-pool: how often (ms) the exitq reclaimer looks for exited workers
    /// to clean up; paces retirement together with --retire-batch (default:
    /// exitq's default, 10 ms).
    #[arg(long)]
    pub exit_poll_ms: Option<u64>,
    /// exitq-pool: microseconds a worker polls the queue before parking (0: never).
    #[arg(long, default_value_t = 50)]
    pub spin_us: u64,
    /// Output format and repetitions.
    #[command(flatten)]
    pub out: OutputArgs,
    /// perf counters.
    #[command(flatten)]
    pub perf: PerfArgs,
}

/// The validated configuration (serialized into `RunResult::config`).
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// See [`Args::mode`].
    pub mode: Mode,
    /// See [`Args::waves`].
    pub waves: usize,
    /// See [`Args::jobs`].
    pub jobs: usize,
    /// See [`Args::job_us`].
    pub job_us: u64,
    /// See [`Args::gap_ms`].
    pub gap_ms: u64,
    /// See [`Args::submitters`].
    pub submitters: usize,
    /// See [`Args::max_workers`].
    pub max_workers: usize,
    /// See [`Args::min_workers`].
    pub min_workers: usize,
    /// See [`Args::keep_alive_ms`].
    pub keep_alive_ms: u64,
    /// Effective jitter.
    pub jitter_ms: u64,
    /// See [`Args::retire_batch`].
    pub retire_batch: usize,
    /// See [`Args::spin_us`].
    pub spin_us: u64,
    /// See [`Args::exit_poll_ms`].
    pub exit_poll_ms: Option<u64>,
}

impl Args {
    /// Checks every flag; a usage error names the flag.
    pub fn validate(&self) -> Result<Config> {
        if self.waves == 0 || self.waves > 1_000_000 {
            return Err(usage("--waves", "must be between 1 and 1000000"));
        }
        if self.jobs == 0 || self.jobs > 10_000_000 {
            return Err(usage("--jobs", "must be between 1 and 10000000"));
        }
        if self.job_us > 1_000_000 {
            return Err(usage("--job-us", "must be at most 1000000 (1 s)"));
        }
        if self.gap_ms > 600_000 {
            return Err(usage("--gap-ms", "must be at most 600000 (10 min)"));
        }
        if self.submitters == 0 || self.submitters > 1024 {
            return Err(usage("--submitters", "must be between 1 and 1024"));
        }
        if self.submitters > self.jobs {
            return Err(usage("--submitters", "must not exceed --jobs"));
        }
        if self.max_workers == 0 || self.max_workers > 100_000 {
            return Err(usage("--max-workers", "must be between 1 and 100000"));
        }
        if self.min_workers > self.max_workers {
            return Err(usage("--min-workers", "must not exceed --max-workers"));
        }
        if self.keep_alive_ms == 0 || self.keep_alive_ms > 3_600_000 {
            return Err(usage("--keep-alive-ms", "must be between 1 and 3600000"));
        }
        if let Some(j) = self.jitter_ms {
            if j > 3_600_000 {
                return Err(usage("--jitter-ms", "must be at most 3600000"));
            }
        }
        if let Some(p) = self.exit_poll_ms {
            if p == 0 || p > 60_000 {
                return Err(usage("--exit-poll-ms", "must be between 1 and 60000"));
            }
        }
        if self.spin_us > 1_000_000 {
            return Err(usage("--spin-us", "must be at most 1000000"));
        }
        if self.retire_batch == 0 {
            return Err(usage("--retire-batch", "must be at least 1"));
        }
        Ok(Config {
            mode: self.mode,
            waves: self.waves,
            jobs: self.jobs,
            job_us: self.job_us,
            gap_ms: self.gap_ms,
            submitters: self.submitters,
            max_workers: self.max_workers,
            min_workers: self.min_workers,
            keep_alive_ms: self.keep_alive_ms,
            jitter_ms: self.jitter_ms.unwrap_or(self.keep_alive_ms / 2),
            retire_batch: self.retire_batch,
            spin_us: self.spin_us,
            exit_poll_ms: self.exit_poll_ms,
        })
    }

    /// The arguments that reproduce this configuration (for child runs).
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "--mode".into(),
            self.mode.name().into(),
            format!("--waves={}", self.waves),
            format!("--jobs={}", self.jobs),
            format!("--job-us={}", self.job_us),
            format!("--gap-ms={}", self.gap_ms),
            format!("--submitters={}", self.submitters),
            format!("--max-workers={}", self.max_workers),
            format!("--min-workers={}", self.min_workers),
            format!("--keep-alive-ms={}", self.keep_alive_ms),
            format!("--retire-batch={}", self.retire_batch),
            format!("--spin-us={}", self.spin_us),
        ];
        if let Some(j) = self.jitter_ms {
            v.push(format!("--jitter-ms={j}"));
        }
        if let Some(p) = self.exit_poll_ms {
            v.push(format!("--exit-poll-ms={p}"));
        }
        let p = &self.perf;
        if p.perf_scope != perf::Scope::Process {
            v.push("--perf-scope=system".into());
        }
        if p.no_perf {
            v.push("--no-perf".into());
        }
        if p.require_perf {
            v.push("--require-perf".into());
        }
        if p.contention {
            v.push("--contention".into());
        }
        v
    }
}

/// Runs `herd agent`.
pub fn run(args: &Args) -> Result<u8> {
    let cfg = args.validate()?;
    runner::install_interrupt_handler();
    if args.out.runs > 1 && !runner::is_child() {
        return repeat("agent", &args.out);
    }
    let result = measure(args, &cfg)?;
    emit(&result, &args.out, |_| String::new())?;
    Ok(if result.interrupted {
        EXIT_INTERRUPTED
    } else {
        0
    })
}

/// Exit and spawn bookkeeping gathered by one run.
#[derive(Debug, Default)]
struct Churn {
    spawned: u64,
    spawn_failures: u64,
    last_spawn_error: Option<String>,
    /// Exit (or retirement decision) times, ns since the run's start.
    exits_ns: Vec<u64>,
    ran_on_caller: u64,
}

/// Per-job timing, shared by the jobs of a run: preallocated, one slot per
/// job, so recording takes no lock in any mode.
struct JobLog {
    /// ns since start at which each job began (0 = not run).
    started_ns: Vec<AtomicU64>,
    /// ns since start at which each job finished.
    ended_ns: Vec<AtomicU64>,
    /// Jobs finished in the current wave, and who waits for the last one.
    done: AtomicUsize,
    waiter: Mutex<Option<Thread>>,
    t0: Instant,
}

impl JobLog {
    fn ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }
}

/// The job body: record, spin `job_us`, record, count.
fn job(log: &JobLog, idx: usize, job_us: u64, wave_jobs: usize) {
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
enum Runner {
    Thread(Mutex<Vec<thread::JoinHandle<()>>>, Mutex<Churn>),
    MutexPool(MutexPool),
    ExitqPool(exitq::pool::Pool, Arc<Mutex<Vec<Instant>>>),
}

impl Runner {
    fn submit(&self, f: Box<dyn FnOnce() + Send + 'static>) {
        match self {
            Runner::Thread(handles, churn) => match spawn_or_return(f) {
                Ok(h) => handles.lock().unwrap_or_else(|e| e.into_inner()).push(h),
                Err((f, e)) => {
                    // A failed creation is counted and explained, and the
                    // job runs here instead of being lost.
                    let mut c = churn.lock().unwrap_or_else(|e| e.into_inner());
                    c.spawn_failures += 1;
                    c.last_spawn_error = Some(explain(&e));
                    c.ran_on_caller += 1;
                    drop(c);
                    f();
                }
            },
            Runner::MutexPool(p) => p.execute(f),
            Runner::ExitqPool(p, _) => {
                if let Err(rejected) = p.execute(f) {
                    (rejected.0)();
                }
            }
        }
    }
}

fn explain(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EAGAIN) => format!(
            "{e} (EAGAIN: RLIMIT_NPROC, kernel.threads-max, pid_max or a cgroup pids.max limit)"
        ),
        Some(libc::ENOMEM) => {
            format!("{e} (ENOMEM: stack memory or vm.max_map_count exhausted)")
        }
        _ => e.to_string(),
    }
}

/// One measurement in this process.
fn measure(args: &Args, cfg: &Config) -> Result<RunResult> {
    let ncpu = thread::available_parallelism().map_or(1, |n| n.get());
    let cpus: Vec<usize> = (0..ncpu).collect();
    let total = cfg.waves * cfg.jobs;
    let log = Arc::new(JobLog {
        started_ns: (0..total).map(|_| AtomicU64::new(0)).collect(),
        ended_ns: (0..total).map(|_| AtomicU64::new(0)).collect(),
        done: AtomicUsize::new(0),
        waiter: Mutex::new(Some(thread::current())),
        t0: Instant::now(),
    });
    let submitted_ns: Arc<Vec<AtomicU64>> =
        Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());

    let runner = Arc::new(match cfg.mode {
        Mode::Thread => Runner::Thread(Mutex::new(Vec::new()), Mutex::new(Churn::default())),
        Mode::MutexPool => Runner::MutexPool(MutexPool::new(
            cfg.max_workers,
            Duration::from_millis(cfg.keep_alive_ms),
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
    });

    // Submitter threads live for the whole run (not part of the churn).
    let start_wave = Arc::new(Barrier::new(cfg.submitters));
    let end_wave = Arc::new(Barrier::new(cfg.submitters));
    let wave_no = Arc::new(AtomicUsize::new(0));
    let helpers: Vec<_> = (1..cfg.submitters)
        .map(|s| {
            let (runner, log, sub, start, end, wave_no) = (
                runner.clone(),
                log.clone(),
                submitted_ns.clone(),
                start_wave.clone(),
                end_wave.clone(),
                wave_no.clone(),
            );
            let cfg = cfg.clone();
            thread::Builder::new()
                .name(format!("submitter-{s}"))
                .spawn(move || loop {
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

    let mut session = perf::Session::open(&args.perf, &cpus)?;
    let ru0 = rusage();
    let t0 = Instant::now();
    let mut busy = Duration::ZERO;
    let mut wave_starts_ns = Vec::with_capacity(cfg.waves);
    let mut waves_done = 0;
    session.enable()?;
    for w in 0..cfg.waves {
        if runner::interrupted() {
            break;
        }
        log.done.store(0, Ordering::SeqCst);
        wave_no.store(w, Ordering::SeqCst);
        let tb = Instant::now();
        wave_starts_ns.push(log.ns());
        start_wave.wait();
        submit_share(&runner, &log, &submitted_ns, cfg, w, 0);
        end_wave.wait();
        // Acquire pairs with the jobs' AcqRel increments.
        while log.done.load(Ordering::Acquire) < cfg.jobs {
            thread::park_timeout(Duration::from_millis(5));
        }
        if let Runner::Thread(handles, _) = &*runner {
            let hs = std::mem::take(&mut *handles.lock().unwrap_or_else(|e| e.into_inner()));
            for h in hs {
                let _ = h.join();
            }
        }
        busy += tb.elapsed();
        waves_done += 1;
        thread::sleep(Duration::from_millis(cfg.gap_ms));
    }
    session.disable()?;
    let wall = t0.elapsed();
    let ru1 = rusage();
    let interrupted = waves_done < cfg.waves;

    wave_no.store(usize::MAX, Ordering::SeqCst);
    start_wave.wait();
    for h in helpers {
        let _ = h.join();
    }
    let runner = Arc::try_unwrap(runner)
        .map_err(|_| anyhow::anyhow!("a submitter still holds the runner"))?;
    let churn = finish(runner, &log)?;
    let report = session.finish()?;

    let jobs = (waves_done * cfg.jobs) as u64;
    let mut r = RunResult::new(
        "agent",
        args.to_args(),
        serde_json::to_value(cfg)?,
        serde_json::json!({ "cpus": ncpu }),
    );
    r.interrupted = interrupted;
    let user = ru1.0 - ru0.0;
    let sys = ru1.1 - ru0.1;
    let per_job = |v: f64| if jobs > 0 { v / jobs as f64 } else { 0.0 };
    r.push(Metric::lower("wall_s", "s", wall.as_secs_f64()));
    r.push(Metric::lower("busy_s", "s", busy.as_secs_f64()));
    r.push(Metric::higher(
        "jobs_per_s",
        "/s",
        jobs as f64 / busy.as_secs_f64().max(1e-9),
    ));
    r.push(Metric::lower("user_s", "s", user));
    r.push(Metric::lower("sys_s", "s", sys));
    r.push(Metric::lower("sys_us_per_job", "us", per_job(sys) * 1e6));
    r.push(Metric::lower(
        "cpu_us_per_job",
        "us",
        per_job(user + sys) * 1e6,
    ));

    // Queueing latency (submit to start) over all jobs that ran.
    let mut lat = hdrhistogram::Histogram::<u64>::new(3)?;
    let mut missing = 0u64;
    for i in 0..(waves_done * cfg.jobs) {
        let s = log.started_ns[i].load(Ordering::Relaxed);
        let q = submitted_ns[i].load(Ordering::Relaxed);
        if s == 0 {
            missing += 1;
        } else {
            lat.record(s.saturating_sub(q) / 1000)?;
        }
    }
    if missing > 0 {
        anyhow::bail!(
            "{missing} jobs never ran (a bug in the {} runner)",
            cfg.mode.name()
        );
    }
    if !lat.is_empty() {
        r.push(Metric::lower(
            "latency_p50_us",
            "us",
            lat.value_at_quantile(0.5) as f64,
        ));
        r.push(Metric::lower(
            "latency_p99_us",
            "us",
            lat.value_at_quantile(0.99) as f64,
        ));
    }

    r.push(Metric::info(
        "threads_spawned",
        "threads",
        churn.spawned as f64,
    ));
    r.push(Metric::info(
        "thread_exits",
        "threads",
        churn.exits_ns.len() as f64,
    ));
    r.push(Metric::lower(
        "spawns_per_wave",
        "threads",
        churn.spawned as f64 / waves_done.max(1) as f64,
    ));
    let (burst, spread) = exit_shape(&churn.exits_ns, &wave_starts_ns, Duration::from_millis(1));
    r.push(Metric::lower("max_exits_per_ms", "exits", burst as f64));
    if let Some(s) = spread {
        r.push(Metric::info("exit_spread_p50_ms", "ms", s));
    }
    if churn.spawn_failures > 0 {
        r.push(Metric::lower(
            "spawn_failures",
            "threads",
            churn.spawn_failures as f64,
        ));
        r.warnings.push(format!(
            "{} thread creations failed ({} jobs ran on the submitter instead); last: {}",
            churn.spawn_failures,
            churn.ran_on_caller,
            churn.last_spawn_error.as_deref().unwrap_or("?")
        ));
    }

    let perf_metrics = report.metrics(0);
    for m in &perf_metrics {
        r.push(m.clone());
    }
    for (total_name, name) in [
        ("futex_calls", "futex_per_job"),
        ("lock_contentions", "contentions_per_job"),
    ] {
        if let Some(m) = perf_metrics.iter().find(|m| m.name == total_name) {
            r.push(Metric::lower(name, "calls", per_job(m.value)));
        }
    }
    r.perf = report.to_json();
    r.warnings.extend(report.notes());
    if let Some(t) = report.contention_table() {
        r.details = serde_json::json!({ "contention_table": t });
    }
    for w in &r.warnings {
        if !args.out.json && !args.out.csv && !runner::is_child() {
            eprintln!("warning: {w}");
        }
    }
    Ok(r)
}

/// Submitter `s` of `cfg.submitters` queues its share of wave `w`.
fn submit_share(
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
        runner.submit(f);
    }
}

/// Spawns a thread for `f`, or hands `f` back with the error.
#[allow(clippy::type_complexity)]
fn spawn_or_return(
    f: Box<dyn FnOnce() + Send>,
) -> std::result::Result<thread::JoinHandle<()>, (Box<dyn FnOnce() + Send>, std::io::Error)> {
    // The closure is parked in a slot the thread takes it from, so a failed
    // spawn (which drops the thread's closure) does not lose the job.
    let slot = Arc::new(Mutex::new(Some(f)));
    let s2 = slot.clone();
    match thread::Builder::new().spawn(move || {
        let f = s2.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(f) = f {
            f();
        }
    }) {
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

/// Shuts the runner down and gathers its churn figures.
fn finish(runner: Runner, log: &JobLog) -> Result<Churn> {
    let base = log.t0;
    let ns = |t: Instant| t.saturating_duration_since(base).as_nanos() as u64;
    Ok(match runner {
        Runner::Thread(handles, churn) => {
            for h in handles.into_inner().unwrap_or_else(|e| e.into_inner()) {
                let _ = h.join();
            }
            let mut c = churn.into_inner().unwrap_or_else(|e| e.into_inner());
            // Each job's thread exited right after the job ended. (Jobs run
            // on the submitter after a failed creation, reported as
            // spawn_failures, are included: their end is as close as we get.)
            c.exits_ns = log
                .ended_ns
                .iter()
                .map(|e| e.load(Ordering::Relaxed))
                .filter(|&e| e != 0)
                .collect();
            c.spawned = (c.exits_ns.len() as u64).saturating_sub(c.ran_on_caller);
            c
        }
        Runner::MutexPool(p) => {
            let s = p.shutdown()?;
            Churn {
                spawned: s.spawned,
                spawn_failures: s.spawn_failures,
                last_spawn_error: s.last_spawn_error,
                exits_ns: s.retirements.into_iter().map(ns).collect(),
                ran_on_caller: s.ran_on_caller,
            }
        }
        Runner::ExitqPool(p, exits) => {
            let report = p.shutdown();
            let exits = exits.lock().unwrap_or_else(|e| e.into_inner());
            Churn {
                spawned: report.stats.spawned,
                spawn_failures: report.stats.spawn_failures,
                last_spawn_error: p.last_spawn_error(),
                exits_ns: exits.iter().map(|&t| ns(t)).collect(),
                ran_on_caller: report.stats.ran_on_caller,
            }
        }
    })
}

/// The most exits within any `window`, and the median over waves of how
/// long each wave's exits took from first to last (ms). Wave `i` owns the
/// exits from its start to the next wave's start (its burst and its gap);
/// waves with fewer than two exits are left out.
fn exit_shape(exits_ns: &[u64], wave_starts_ns: &[u64], window: Duration) -> (usize, Option<f64>) {
    let mut v = exits_ns.to_vec();
    v.sort_unstable();
    let w = window.as_nanos() as u64;
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..v.len() {
        while v[hi] - v[lo] >= w {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    let mut spreads = Vec::new();
    for (i, &start) in wave_starts_ns.iter().enumerate() {
        let end = wave_starts_ns.get(i + 1).copied().unwrap_or(u64::MAX);
        let mine: Vec<u64> = v
            .iter()
            .copied()
            .filter(|&t| t >= start && t < end)
            .collect();
        if let (Some(first), Some(last)) = (mine.first(), mine.last()) {
            if mine.len() >= 2 {
                spreads.push((last - first) as f64 / 1e6);
            }
        }
    }
    (best, Summary::of(&spreads).map(|s| s.median))
}

/// (user, sys) CPU seconds of this process.
fn rusage() -> (f64, f64) {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // SAFETY: `ru` is a plain C struct that getrusage fills in completely;
    // RUSAGE_SELF is always valid, so the call cannot fail.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_shape_counts_the_densest_millisecond_and_wave_spread() {
        let ms = 1_000_000;
        // Wave 0 (from 0): 5 exits within 0.5 ms; wave 1 (from 40 ms): 3
        // exits over 6 ms; wave 2 (from 100 ms): one exit (no spread).
        let v = [
            0,
            100_000,
            200_000,
            300_000,
            400_000,
            50 * ms,
            53 * ms,
            56 * ms,
            120 * ms,
        ];
        let (burst, spread) = exit_shape(&v, &[0, 40 * ms, 100 * ms], Duration::from_millis(1));
        assert_eq!(burst, 5);
        // Spreads 0.4 ms and 6 ms: median 3.2.
        assert!((spread.unwrap() - 3.2).abs() < 1e-9);
        assert_eq!(exit_shape(&[], &[0], Duration::from_millis(1)), (0, None));
    }
}
