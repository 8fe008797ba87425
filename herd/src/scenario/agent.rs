//! `herd agent`: the workload of a service agent. Bursts of short jobs
//! arrive in waves separated by idle gaps; each job is run by
//!
//! * `--mode thread`: a new thread per job (joined at the end of the wave);
//! * `--mode mutex-pool`: a pool with mutex bookkeeping and a plain
//!   keep-alive, shaped like tokio's blocking pool ([`mutex_pool`]);
//! * `--mode exitq-pool`: [`exitq::pool::Pool`]: lock-free queue and idle
//!   stack, jittered keep-alive, at most K retirements per grace period,
//!   exit bookkeeping deferred to exitq's reclaimer;
//! * `--mode tokio-blocking`: tokio's blocking pool (`spawn_blocking`),
//!   the pool people run ([`tokio_blocking`]);
//! * `--mode rayon`: a rayon pool of `--max-workers` threads, fixed size,
//!   no retirement ([`rayon_mode`]).
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
//!
//! # A run, phase by phase ([`measure`])
//! [`AgentRun::set_up`] starts the job log, the runner ([`runner::Runner`])
//! and the submitter threads; then the perf session and getrusage frame
//! [`AgentRun::waves`], the loop of bursts and gaps; [`AgentRun::finish`]
//! shuts the runner down and gathers its churn; [`report::build`] turns
//! the figures into the run result.

mod churn;
mod mutex_pool;
mod per_job;
mod rayon_mode;
mod report;
mod runner;
mod settle;
mod spawn_panic;
mod tokio_blocking;

pub use mutex_pool::MutexPool;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::cleanup::{Cleanup, CleanupArgs, Strategy};
use crate::error::usage;
use crate::export::run::{emit, repeat, OutputArgs};
use crate::perf::{self, PerfArgs};
use crate::result::RunResult;
use crate::runner as child;
use crate::usage::Usage;
use churn::Churn;
use runner::{JobLog, Runner, Submitters};

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
    /// tokio's blocking pool: `spawn_blocking`, plain keep-alive.
    TokioBlocking,
    /// A rayon pool of --max-workers threads (fixed size, no keep-alive).
    Rayon,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Thread => "thread",
            Mode::MutexPool => "mutex-pool",
            Mode::ExitqPool => "exitq-pool",
            Mode::TokioBlocking => "tokio-blocking",
            Mode::Rayon => "rayon",
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
    /// Pools: most workers at once (rayon: its fixed size) [default: 64].
    /// Refused with --mode thread.
    #[arg(long)]
    pub max_workers: Option<usize>,
    /// exitq-pool: workers kept when idle [default: 0]. Refused in the
    /// other modes (the mutex pool has none).
    #[arg(long)]
    pub min_workers: Option<usize>,
    /// Pools with a keep-alive (mutex-pool, exitq-pool, tokio-blocking):
    /// idle time before a worker retires, in milliseconds [default: 20].
    #[arg(long)]
    pub keep_alive_ms: Option<u64>,
    /// exitq-pool: keep-alive jitter in milliseconds (default: half the keep-alive).
    #[arg(long)]
    pub jitter_ms: Option<u64>,
    /// exitq-pool: at most this many retirements per grace period [default: 2].
    #[arg(long)]
    pub retire_batch: Option<usize>,
    /// exitq-pool: how often (ms) the exitq reclaimer looks for exited workers
    /// to clean up; paces retirement together with --retire-batch (default:
    /// exitq's default, 10 ms).
    #[arg(long)]
    pub exit_poll_ms: Option<u64>,
    /// exitq-pool: microseconds a worker polls the queue before parking
    /// (0: never) [default: 50].
    #[arg(long)]
    pub spin_us: Option<u64>,
    /// Run although the thread pre-flight predicts that the threads will
    /// not fit (RLIMIT_AS, RLIMIT_NPROC, vm.max_map_count, ...): failed
    /// creations are then counted and explained. Not with --mode
    /// tokio-blocking (tokio neither reports nor survives them).
    #[arg(long)]
    pub force: bool,
    /// Thread per job: each job thread's exit cleanup (`--cleanup` and its
    /// flags, as `herd storm`'s).
    #[command(flatten)]
    pub cleanup: CleanupArgs,
    /// Output format and repetitions.
    #[command(flatten)]
    pub out: OutputArgs,
    /// perf counters.
    #[command(flatten)]
    pub perf: PerfArgs,
}

/// `--max-workers` when not given.
const DEFAULT_MAX_WORKERS: usize = 64;
/// Largest `--max-workers` (a typo guard; the pre-flight checks the host).
const MAX_WORKERS: usize = 65_536;
/// `--keep-alive-ms` when not given.
const DEFAULT_KEEP_ALIVE_MS: u64 = 20;
/// `--retire-batch` when not given.
const DEFAULT_RETIRE_BATCH: usize = 2;
/// `--spin-us` when not given.
const DEFAULT_SPIN_US: u64 = 50;

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
    /// See [`Args::cleanup`] (its fields at top level).
    #[serde(flatten)]
    pub cleanup: CleanupArgs,
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
        self.refuse_flags_of_other_modes()?;
        if self.force && self.mode == Mode::TokioBlocking {
            return Err(usage(
                "--force",
                "--mode tokio-blocking cannot run past its pre-flight: tokio neither reports a \
                 thread it could not create (the job waits for a running one) nor survives \
                 one it created without room for its signal stack (the process aborts)",
            ));
        }
        let max_workers = self.max_workers.unwrap_or(DEFAULT_MAX_WORKERS);
        let min_workers = self.min_workers.unwrap_or(0);
        let keep_alive_ms = self.keep_alive_ms.unwrap_or(DEFAULT_KEEP_ALIVE_MS);
        if max_workers == 0 || max_workers > MAX_WORKERS {
            return Err(usage(
                "--max-workers",
                format!("must be between 1 and {MAX_WORKERS}"),
            ));
        }
        if min_workers > max_workers {
            return Err(usage("--min-workers", "must not exceed --max-workers"));
        }
        if keep_alive_ms == 0 || keep_alive_ms > 3_600_000 {
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
        let spin_us = self.spin_us.unwrap_or(DEFAULT_SPIN_US);
        if spin_us > 1_000_000 {
            return Err(usage("--spin-us", "must be at most 1000000"));
        }
        let retire_batch = self.retire_batch.unwrap_or(DEFAULT_RETIRE_BATCH);
        if retire_batch == 0 {
            return Err(usage("--retire-batch", "must be at least 1"));
        }
        self.cleanup.validate()?;
        if self.cleanup.cleanup != Strategy::None && self.mode != Mode::Thread {
            return Err(usage(
                "--cleanup",
                "needs --mode thread (the pools keep their threads' state in the pool)",
            ));
        }
        Ok(Config {
            mode: self.mode,
            waves: self.waves,
            jobs: self.jobs,
            job_us: self.job_us,
            gap_ms: self.gap_ms,
            submitters: self.submitters,
            max_workers,
            min_workers,
            keep_alive_ms,
            jitter_ms: self.jitter_ms.unwrap_or(keep_alive_ms / 2),
            retire_batch,
            spin_us,
            exit_poll_ms: self.exit_poll_ms,
            cleanup: self.cleanup.clone(),
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
        ];
        // Only the flags given: the others do not apply to every mode.
        if let Some(n) = self.max_workers {
            v.push(format!("--max-workers={n}"));
        }
        if let Some(n) = self.min_workers {
            v.push(format!("--min-workers={n}"));
        }
        if let Some(n) = self.keep_alive_ms {
            v.push(format!("--keep-alive-ms={n}"));
        }
        if let Some(n) = self.retire_batch {
            v.push(format!("--retire-batch={n}"));
        }
        if let Some(n) = self.spin_us {
            v.push(format!("--spin-us={n}"));
        }
        if let Some(j) = self.jitter_ms {
            v.push(format!("--jitter-ms={j}"));
        }
        if let Some(p) = self.exit_poll_ms {
            v.push(format!("--exit-poll-ms={p}"));
        }
        if self.force {
            v.push("--force".into());
        }
        let c = &self.cleanup;
        if c.cleanup != Strategy::None {
            v.extend([
                format!("--cleanup={}", c.cleanup.name()),
                format!("--cleanup-work={}", c.cleanup_work),
                format!("--cleanup-monitor-us={}", c.cleanup_monitor_us),
                format!("--cleanup-poll-ms={}", c.cleanup_poll_ms),
            ]);
            if let Some(b) = c.seize_batch {
                v.push(format!("--seize-batch={b}"));
            }
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
        if p.allow_lost_samples {
            v.push("--allow-lost-samples".into());
        }
        v
    }
}

impl Args {
    /// Refuses (exit 2) a flag given for a mode that does not use it:
    /// silently ignoring it would measure something else than asked. Not
    /// in a child run: `herd compare --vary mode=...` (or a sweep) gives
    /// every configuration the same flags, and each mode takes those it
    /// uses (the parent's own run, direct or `-r N`, is checked).
    fn refuse_flags_of_other_modes(&self) -> Result<()> {
        use Mode::*;
        if crate::runner::is_child() {
            return Ok(());
        }
        let given: [(&str, bool, &[Mode]); 7] = [
            (
                "--max-workers",
                self.max_workers.is_some(),
                &[MutexPool, ExitqPool, TokioBlocking, Rayon],
            ),
            ("--min-workers", self.min_workers.is_some(), &[ExitqPool]),
            (
                "--keep-alive-ms",
                self.keep_alive_ms.is_some(),
                &[MutexPool, ExitqPool, TokioBlocking],
            ),
            ("--jitter-ms", self.jitter_ms.is_some(), &[ExitqPool]),
            ("--retire-batch", self.retire_batch.is_some(), &[ExitqPool]),
            ("--exit-poll-ms", self.exit_poll_ms.is_some(), &[ExitqPool]),
            ("--spin-us", self.spin_us.is_some(), &[ExitqPool]),
        ];
        for (flag, is_given, modes) in given {
            if is_given && !modes.contains(&self.mode) {
                let names: Vec<_> = modes.iter().map(|m| m.name()).collect();
                return Err(usage(
                    flag,
                    format!(
                        "--mode {} does not use it (only --mode {} does)",
                        self.mode.name(),
                        names.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The threads a run holds at once: each wave's job threads (thread
    /// per job: a wave's threads are joined at its end) or the pool's
    /// workers, plus the submitters and a few helpers (tokio's runtime,
    /// exitq's reclaimer, the cleanup monitor).
    fn peak_threads(cfg: &Config) -> usize {
        let workers = match cfg.mode {
            Mode::Thread => cfg.jobs,
            // Every worker starts with the pool.
            Mode::Rayon => cfg.max_workers,
            // An elastic pool grows to at most one worker per queued job.
            _ => cfg.max_workers.min(cfg.jobs).max(cfg.min_workers),
        };
        workers + cfg.submitters + 4
    }
}

/// Bytes of bookkeeping per job of the run: its submit, start and end
/// times in the job log, and with `--mode thread` its exit time.
const LOG_BYTES_PER_JOB: u64 = 32;

/// Refuses (exit 3, about `--jobs`) a run whose job log, allocated before
/// the first wave (`--waves` x `--jobs` slots), would take more than half
/// of the machine's memory: 10^6 waves of 10^7 jobs aborted on a failed
/// allocation of 80 TB.
fn check_job_log(cfg: &Config, mem_total: Option<u64>) -> Result<()> {
    let jobs = (cfg.waves as u64).saturating_mul(cfg.jobs as u64);
    let need = jobs.saturating_mul(LOG_BYTES_PER_JOB);
    match mem_total {
        Some(mem) if need > mem / 2 => Err(crate::error::resource(
            "--jobs",
            format!(
                "--waves {} x --jobs {} = {jobs} jobs: their log needs {} ({LOG_BYTES_PER_JOB} \
                 bytes per job), more than half of this machine's memory ({}); run fewer waves \
                 or jobs",
                cfg.waves,
                cfg.jobs,
                crate::host::human_bytes(need),
                crate::host::human_bytes(mem)
            ),
        )),
        _ => Ok(()),
    }
}

/// Runs `herd agent`.
pub fn run(args: &Args) -> Result<u8> {
    let cfg = args.validate()?;
    check_job_log(&cfg, crate::host::HostFacts::read().mem_total_bytes)?;
    let flag = if cfg.mode == Mode::Thread {
        "--jobs"
    } else {
        "--max-workers"
    };
    let what = format!(
        "--mode {} with {flag} {}",
        cfg.mode.name(),
        match cfg.mode {
            Mode::Thread => cfg.jobs,
            _ => cfg.max_workers,
        }
    );
    // Every mode, tokio's pool too: past RLIMIT_AS (or the mapping wall)
    // a thread that was created cannot map its signal stack and std
    // aborts the process, and tokio hides the creations it cannot make.
    // `--force` runs past every limit but the mapping wall, where the
    // abort is the likely outcome, not a counted failure.
    let forced =
        match crate::scenario::gpkit::preflight_threads_problem(&what, Args::peak_threads(&cfg)) {
            None => None,
            Some(p) if args.force && !p.mapping_wall => Some(format!(
                "--force: run past the pre-flight, whose refusal was: {}; failed creations are \
             counted and explained",
                p.text
            )),
            Some(p) if args.force => {
                return Err(crate::error::resource(
                    flag,
                    format!(
                        "{} (--force does not run past vm.max_map_count: there a thread that was \
                     created most likely cannot map the signal stack std gives it, and std \
                     aborts the whole process; `herd storm --force`, whose default pthread backend \
                     maps no signal stack, measures creations failing at that wall)",
                        p.text
                    ),
                ))
            }
            Some(p) => {
                return Err(crate::error::resource(
                    flag,
                    format!(
                        "{} (--force runs it anyway, counting the failures, but not past \
                     vm.max_map_count, nor with --mode tokio-blocking)",
                        p.text
                    ),
                ))
            }
        };
    child::install_interrupt_handler();
    // A `--cleanup` flag the strategy ignores: said once, before the run.
    let mut notes = cfg.cleanup.warn_ignored_knobs();
    if let Some(f) = forced {
        if !child::is_child() {
            eprintln!("herd: warning: {f}");
        }
        notes.push(f);
    }
    if args.out.runs > 1 && !child::is_child() {
        return repeat("agent", &args.out, &notes);
    }
    // Forced under a finite RLIMIT_AS or RLIMIT_DATA: every std thread
    // of the run claims its room first (`exitq::limits::ThreadRoom`), so
    // one that might get its stack but not std's signal stack is counted
    // as a failure instead of aborting the process.
    let room = if args.force {
        exitq::limits::ThreadRoom::new()
    } else {
        None
    };
    let mut result = measure(args, &cfg, room)?;
    result.warnings.extend(notes);
    if let Some(p) = perf::Report::from_json(&result.perf) {
        result.checks_failed.extend(p.checks());
    }
    emit(&result, &args.out, |_| String::new())?;
    for c in &result.checks_failed {
        eprintln!("herd: check failed: {c}");
    }
    Ok(crate::result::run_code(&result))
}

/// One measurement in this process: set up, the waves inside the counters
/// and getrusage, the runner's shutdown, the report.
fn measure(
    args: &Args,
    cfg: &Config,
    room: Option<exitq::limits::ThreadRoom>,
) -> Result<RunResult> {
    // The CPUs this process may run on (not 0..count: `taskset -c 4-7`
    // gives 4 CPUs that are not 0-3), for system-scope counters.
    let cpus = crate::host::allowed_cpus().unwrap_or_else(crate::host::online_cpus);
    let ncpu = cpus.len();
    let cleanup = Cleanup::start(&cfg.cleanup)?;
    let run = AgentRun::set_up(cfg, cleanup.as_ref().map(Cleanup::hooks), room)?;
    let mut session = perf::Session::open(&args.perf, &cpus)?;
    let ru0 = Usage::process();
    let t0 = Instant::now();
    session.enable()?;
    let mut waves = run.waves();
    session.disable()?;
    waves.wall = t0.elapsed();
    let ru1 = Usage::process();
    let (log, submitted, churn) = run.finish()?;
    // Every job thread is joined: what the strategy still owes is done here.
    let cleanup = cleanup.map(Cleanup::finish);
    let perf = session.finish()?;
    report::build(&report::Measured {
        args,
        cfg,
        ncpu,
        waves: &waves,
        churn: &churn,
        log: &log,
        submitted: &submitted,
        ru0,
        ru1,
        perf: &perf,
        cleanup: cleanup.as_ref(),
    })
}

/// The longest uninterrupted sleep of a gap (Ctrl-C is checked between).
const GAP_SLICE: Duration = Duration::from_millis(50);

/// An agent run in progress: the job log, the runner and the submitters.
struct AgentRun<'a> {
    cfg: &'a Config,
    log: Arc<JobLog>,
    /// When each job was submitted, ns since the log's start.
    submitted: Arc<Vec<AtomicU64>>,
    runner: Arc<Runner>,
    submitters: Submitters,
}

/// What the wave loop measured.
struct Waves {
    /// Waves that ran (fewer than asked after Ctrl-C).
    done: usize,
    /// Time in bursts (submit to the wave's last job), gaps excluded.
    busy: Duration,
    /// The measured phase: every burst and its gap.
    wall: Duration,
    /// When each wave started, ns since the log's start.
    starts_ns: Vec<u64>,
}

impl<'a> AgentRun<'a> {
    /// The job log (one preallocated slot per job), the runner, the
    /// submitter threads.
    fn set_up(
        cfg: &'a Config,
        hooks: Option<crate::cleanup::Hooks>,
        room: Option<exitq::limits::ThreadRoom>,
    ) -> Result<AgentRun<'a>> {
        let total = cfg.waves * cfg.jobs;
        let log = Arc::new(JobLog {
            started_ns: (0..total).map(|_| AtomicU64::new(0)).collect(),
            ended_ns: (0..total).map(|_| AtomicU64::new(0)).collect(),
            done: AtomicUsize::new(0),
            waiter: Mutex::new(Some(thread::current())),
            t0: Instant::now(),
        });
        let submitted: Arc<Vec<AtomicU64>> =
            Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
        let runner = Arc::new(Runner::start(cfg, hooks, room)?);
        let submitters = Submitters::start(cfg, &runner, &log, &submitted, room.as_ref())?;
        Ok(AgentRun {
            cfg,
            log,
            submitted,
            runner,
            submitters,
        })
    }

    /// The wave loop: submit a burst, wait for its last job, join its
    /// threads (thread per job), sleep the gap. Ctrl-C stops between waves.
    fn waves(&self) -> Waves {
        let cfg = self.cfg;
        let mut waves = Waves {
            done: 0,
            busy: Duration::ZERO,
            wall: Duration::ZERO,
            starts_ns: Vec::with_capacity(cfg.waves),
        };
        for w in 0..cfg.waves {
            if child::interrupted() {
                break;
            }
            self.log.done.store(0, Ordering::SeqCst);
            let tb = Instant::now();
            waves.starts_ns.push(self.log.ns());
            self.submitters
                .submit_wave(w, cfg, &self.runner, &self.log, &self.submitted);
            // Acquire pairs with the jobs' AcqRel increments.
            while self.log.done.load(Ordering::Acquire) < cfg.jobs {
                thread::park_timeout(Duration::from_millis(5));
            }
            self.runner.join_wave();
            waves.busy += tb.elapsed();
            waves.done += 1;
            // The gap, in short slices: Ctrl-C stops it (and the run)
            // within one slice instead of after up to 10 minutes.
            let gap_end = Instant::now() + Duration::from_millis(cfg.gap_ms);
            loop {
                let now = Instant::now();
                if now >= gap_end || child::interrupted() {
                    break;
                }
                thread::sleep((gap_end - now).min(GAP_SLICE));
            }
        }
        waves
    }

    /// Stops the submitters, shuts the runner down and gathers its churn.
    fn finish(self) -> Result<(Arc<JobLog>, Arc<Vec<AtomicU64>>, Churn)> {
        self.submitters.stop();
        let runner = Arc::try_unwrap(self.runner)
            .map_err(|_| anyhow::anyhow!("a submitter still holds the runner"))?;
        let churn = runner::finish(runner, &self.log)?;
        Ok((self.log, self.submitted, churn))
    }
}
