//! `herd storm` (and plain `herd`): the thread-exit thundering herd.
//!
//! The classic micro, reproduced and measured: spawn waves of threads that
//! spin and then sleep; after spawning wave `i`, retire wave `i - lag`
//! (cancel it, then join/detach/leak its threads); wave handles live in a
//! ring of `slots` wave slots. Threads therefore exit in bursts of
//! `per_wave`, all at once, across every CPU: the herd.
//!
//! # A run, phase by phase ([`storm`])
//! 1. [`StormRun::set_up`]: the thread body and its hooks (the `--cleanup`
//!    strategy), the spawner and its stacks, the perf session (opened
//!    before any thread exists), the CPU binding, the reaper thread.
//! 2. [`StormRun::start`]: rusage and counters on, the clock starts.
//! 3. [`StormRun::waves`]: the wave loop, on one screen; a wave is spawned
//!    by [`StormRun::spawn_wave`] and retired by [`retire`].
//! 4. [`StormRun::drain`]: retire what is left, wait for every exit, join
//!    the reaper, let the cleanup strategy and the stack pool finish what
//!    they owe: all inside the measured phase.
//! 5. [`StormRun::stop`]: the clock stops, counters and rusage off, and the
//!    records of the exited threads are harvested into [`Measured`];
//!    [`report::build`] turns that into the run result.
//!
//! Flags and validation are in [`options`], the limits check in
//! [`preflight`], histograms and placement in [`collect`], the run result
//! and the storm's table sections in [`report`], the thread body and
//! backends in [`crate::spawn`].
//!
//! # Measured, per run
//! wall time of the measured phase (waves + drain), user/sys time and
//! context switches (getrusage deltas), peak RSS, threads created /
//! failed (by errno and the limit that explains it) / cancelled / exited /
//! reaped, create rate, and histograms (p50/p90/p99/max) of
//! * create latency: the `pthread_create` (or `Builder::spawn`) call;
//! * start latency: creation request to the thread's first instruction;
//! * exit latency: the stop request (cancel or flag, or for a thread that
//!   ended on its own, the end of its sleep) to its exit destructor;
//! * placement: the CPU at start and at exit (`sched_getcpu`), summarised
//!   per CPU with CPUs used and imbalance, and per NUMA node
//!   (`host/numa.rs`: threads per node at start and exit).
//!
//! # Extension points (kept small on purpose)
//! * Per-thread hooks: [`make_hooks`] builds the [`Hooks`] every thread
//!   runs at start and in its exit destructor. Exit-cleanup strategies add
//!   their flag to [`Args`] and their hooks there.
//! * Stacks/attributes: [`crate::spawn::pthread::StackChoice`], created in
//!   [`Spawner::new`] from the config.

mod collect;
pub mod options;
pub mod preflight;
mod reaper;
mod report;

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};

pub use options::{Args, Config, Pin};
pub use report::extra_sections;

use crate::cleanup::{self, Cleanup};
use crate::error::resource;
use crate::export::progress::Progress;
use crate::export::run::{child_args, emit, print_out, repeat};
use crate::host::{allowed_cpus, CpuMask, HostFacts};
use crate::perf;
use crate::result::run_code;
use crate::runner;
use crate::spawn::detach::Detacher;
use crate::spawn::failure::{DiagContext, Failures};
use crate::spawn::recycled::{Recycled, Stacks};
use crate::spawn::{now_ns, Body, Cancel, Failed, Handle, Hooks, Reap, Spawner, ThreadRec, NO_PIN};
use crate::usage::Usage;
use collect::{harvest, Collector};
use reaper::Reaper;

/// Runs `herd storm`.
pub fn run(args: &Args) -> Result<u8> {
    if args.out.runs > 1 && !runner::is_child() {
        // Validate here so a bad flag fails once, not once per child.
        let facts = HostFacts::read();
        let cfg = Config::from_args(args, &facts)?;
        // Each child prints the warnings of its own pre-flight; a flag
        // the strategy ignores is said here, once.
        refuse_or_warn(&cfg, &preflight::check(&cfg, &facts), false)?;
        let notes = cfg.cleanup.warn_ignored_knobs();
        return repeat("storm", &args.out, &notes);
    }
    runner::install_interrupt_handler();
    let facts = HostFacts::read();
    let cfg = Config::from_args(args, &facts)?;
    let pre = preflight::check(&cfg, &facts);
    refuse_or_warn(&cfg, &pre, true)?;
    let notes = cfg.cleanup.warn_ignored_knobs();
    let mut result = storm(&cfg, &pre, &facts, &args.perf, child_args("storm"))?;
    result.warnings.extend(notes);
    if !args.out.json && !args.out.csv {
        print_out(&(cfg.describe() + "\n"))?;
    }
    emit(&result, &args.out, extra_sections)?;
    for c in &result.checks_failed {
        eprintln!("herd: check failed: {c}");
    }
    Ok(run_code(&result))
}

fn refuse_or_warn(cfg: &Config, pre: &preflight::Preflight, print: bool) -> Result<()> {
    if print {
        for w in &pre.warnings {
            eprintln!("herd: warning: {w}");
        }
    }
    if !pre.fatal.is_empty() {
        return Err(resource(
            "",
            format!(
                "pre-flight: this storm cannot run on this host:\n  - {}",
                pre.fatal
                    .iter()
                    .chain(&pre.problems)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n  - ")
            ),
        ));
    }
    if pre.problems.is_empty() {
        return Ok(());
    }
    if cfg.force {
        if print {
            for p in &pre.problems {
                eprintln!("herd: warning (--force): {p}");
            }
        }
        return Ok(());
    }
    Err(resource(
        "",
        format!(
            "pre-flight: this storm cannot run on this host:\n  - {}\n\
             Lower --per-wave or --lag, raise the limit, or pass --force to run anyway \
             (failed creations are then counted and named).",
            pre.problems.join("\n  - ")
        ),
    ))
}

/// The per-thread hooks for this run: the exit-cleanup strategy's
/// (`--cleanup`, see [`crate::cleanup`]), or none.
pub fn make_hooks(_cfg: &Config, cleanup: Option<&crate::cleanup::Cleanup>) -> Hooks {
    cleanup.map(|c| c.spawn_hooks()).unwrap_or_default()
}

/// One wave: the records (kept until harvested) and the handles (until
/// the wave is retired).
struct Wave {
    index: u64,
    /// Records of the threads created, preallocated to `per_wave` so they
    /// never move while their threads use them (see [`ThreadRec`]).
    recs: Vec<ThreadRec>,
    handles: Vec<Handle>,
    retired: bool,
}

/// What retired threads' handles go to (`--reap`).
struct Reaping {
    /// `--reap join`: the reaper thread.
    reaper: Option<Reaper>,
    /// `--reap detach` ([`Detacher`]).
    detacher: Detacher,
}

/// Counters the wave loop keeps.
#[derive(Debug, Default)]
struct Counts {
    created: u64,
    cancel_requests: u64,
    cancel_errors: u64,
    detached: u64,
    /// Of `detached`: threads whose exit destructor ran before their
    /// retire, joined once gone (`spawn::detach`), and those still
    /// exiting when the drain gave up (left unjoined).
    detached_after_exit: u64,
    detach_left: u64,
    leaked: u64,
}

/// The storm itself: one measured run of `cfg`, phase by phase.
pub fn storm(
    cfg: &Config,
    pre: &preflight::Preflight,
    facts: &HostFacts,
    perf_args: &perf::PerfArgs,
    argv: Vec<String>,
) -> Result<crate::result::RunResult> {
    let mut run = StormRun::set_up(cfg, pre, facts, perf_args)?;
    run.start()?;
    run.waves();
    run.drain();
    let (measured, perf) = run.stop(argv)?;
    report::build(&measured, &perf)
}

/// A storm in progress: what [`StormRun::set_up`] prepared and what the
/// wave loop and the drain keep.
struct StormRun<'a> {
    cfg: &'a Config,
    pre: &'a preflight::Preflight,
    facts: &'a HostFacts,
    body: &'static Body,
    spawner: Spawner,
    cleanup: Option<Cleanup>,
    cleanup_report: Option<cleanup::Report>,
    session: perf::Session,
    saved_mask: Option<Vec<usize>>,
    reaping: Reaping,
    /// Threads the reaper joined, and joins that failed.
    reaped: u64,
    reap_failed: u64,
    diag: DiagContext,
    /// The ring of wave slots.
    ring: Vec<Option<Wave>>,
    collector: Collector,
    /// Retired waves with threads still running: their records must stay.
    pending: Vec<Vec<ThreadRec>>,
    failures: Failures,
    counts: Counts,
    next_pin: usize,
    waves_run: u64,
    interrupted: bool,
    progress: Progress,
    ru0: Usage,
    t0: u64,
    t_waves: u64,
}

/// What a finished storm measured, for [`report::build`].
struct Measured<'a> {
    cfg: &'a Config,
    pre: &'a preflight::Preflight,
    facts: &'a HostFacts,
    argv: Vec<String>,
    spawner: Spawner,
    cleanup: Option<cleanup::Report>,
    collector: Collector,
    failures: Failures,
    counts: Counts,
    waves_run: u64,
    interrupted: bool,
    never_exited: u64,
    exits: u64,
    reaped: u64,
    reap_failed: u64,
    ru0: Usage,
    ru1: Usage,
    t0: u64,
    t_waves: u64,
    t1: u64,
}

impl<'a> StormRun<'a> {
    /// Everything the first wave needs, before the clock starts.
    fn set_up(
        cfg: &'a Config,
        pre: &'a preflight::Preflight,
        facts: &'a HostFacts,
        perf_args: &perf::PerfArgs,
    ) -> Result<StormRun<'a>> {
        let pin_masks = match cfg.pin {
            Pin::None => Vec::new(),
            Pin::RoundRobin => cfg.cpus.iter().map(|&c| CpuMask::of(&[c])).collect(),
        };
        // The futex hash the storm runs on (before its threads exist).
        crate::host::futex_hash::apply(cfg.futex_hash)
            .map_err(|why| crate::error::resource("--futex-hash", why))?;
        // Exit-cleanup machinery (registry, pool, monitor, exitq domain).
        let cleanup = Cleanup::start(&cfg.cleanup)?;
        let body = Body {
            spin: cfg.spin,
            sleep_ns: cfg.sleep_ms * 1_000_000,
            cancel: cfg.cancel,
            pin_masks,
            hooks: make_hooks(cfg, cleanup.as_ref()),
            exits: Default::default(),
        }
        .leak();
        let spawner = spawner(cfg)?;
        let diag = DiagContext::new(pre.stack_bytes);
        // Its drawing thread must exist before the counters open, to be
        // left out of them (export/progress.rs).
        let progress = Progress::new(cfg.waves, "waves");
        // Opened before anything is started, so a --require-perf failure
        // leaves nothing behind.
        let session = perf::Session::open(perf_args, &cfg.cpus)?;
        // Threads inherit the spawning thread's mask: bind it to --cpus for
        // the run, restore afterwards.
        let saved_mask = allowed_cpus();
        CpuMask::of(&cfg.cpus)
            .apply_to_current_thread()
            .context("cannot bind to --cpus")?;
        let reaping = Reaping {
            reaper: match cfg.reap {
                // Claims its room as the storm's std threads do.
                Reap::Join => Some(Reaper::start(if cfg.force {
                    exitq::limits::ThreadRoom::new()
                } else {
                    None
                })?),
                Reap::Detach | Reap::Leak => None,
            },
            detacher: Detacher::default(),
        };
        Ok(StormRun {
            cfg,
            pre,
            facts,
            body,
            spawner,
            cleanup,
            cleanup_report: None,
            session,
            saved_mask,
            reaping,
            reaped: 0,
            reap_failed: 0,
            diag,
            ring: (0..cfg.slots).map(|_| None).collect(),
            collector: Collector::new(),
            pending: Vec::new(),
            failures: Failures::default(),
            counts: Counts::default(),
            next_pin: 0,
            waves_run: 0,
            interrupted: false,
            progress,
            ru0: Usage::default(),
            t0: 0,
            t_waves: 0,
        })
    }

    /// The measured phase begins: rusage snapshot, counters on, clock.
    fn start(&mut self) -> Result<()> {
        self.ru0 = Usage::process();
        self.session.enable()?;
        self.t0 = now_ns();
        Ok(())
    }

    /// The wave loop: spawn wave `w` into its slot (whose previous wave was
    /// retired `slots - lag` waves ago: harvest it), then retire wave
    /// `w - lag`. Ctrl-C stops between waves.
    fn waves(&mut self) {
        let cfg = self.cfg;
        for w in 0..cfg.waves {
            if runner::interrupted() {
                self.interrupted = true;
                break;
            }
            let slot = (w % cfg.slots) as usize;
            if let Some(mut old) = self.ring[slot].take() {
                // lag < slots, so this wave was retired already.
                retire(&mut old, cfg, &mut self.counts, &mut self.reaping);
                harvest(&mut self.collector, old.recs, &mut self.pending);
            }
            self.ring[slot] = Some(self.spawn_wave(w));
            if w >= cfg.lag {
                let old = ((w - cfg.lag) % cfg.slots) as usize;
                if let Some(wave) = self.ring[old].as_mut() {
                    retire(wave, cfg, &mut self.counts, &mut self.reaping);
                }
            }
            self.waves_run += 1;
            self.progress.inc();
        }
        self.t_waves = now_ns();
    }

    /// Spawns wave `w`: `per_wave` threads, each timed, each with its
    /// record in the wave; a creation that fails is counted and diagnosed.
    fn spawn_wave(&mut self, w: u64) -> Wave {
        let per_wave = self.cfg.per_wave as usize;
        let mut wave = Wave {
            index: w,
            recs: Vec::with_capacity(per_wave),
            handles: Vec::with_capacity(per_wave),
            retired: false,
        };
        for _ in 0..per_wave {
            let pin = self.next_pin();
            debug_assert!(
                wave.recs.len() < wave.recs.capacity(),
                "records must not move"
            );
            wave.recs.push(ThreadRec::new(self.body, pin));
            let rec = wave.recs.last().expect("just pushed");
            let c0 = now_ns();
            rec.create_ns.store(c0, Ordering::Relaxed);
            // SAFETY: the record sits in `wave.recs`, preallocated to
            // per_wave entries, so it never moves; the wave's records are
            // freed only once every one has exited (`harvest`), or leaked.
            match unsafe { self.spawner.spawn(rec) } {
                Ok(h) => {
                    self.collector
                        .create
                        .saturating_record(now_ns().saturating_sub(c0).max(1));
                    self.counts.created += 1;
                    wave.handles.push(h);
                }
                Err(failed) => {
                    // No thread uses the record: drop it.
                    wave.recs.pop();
                    let (wave_no, created) = (w as u32, self.counts.created);
                    match failed {
                        Failed::Errno(errno) => {
                            self.failures.record(errno, wave_no, created, &self.diag)
                        }
                        Failed::NoRoom(r) => self.failures.record_refused(&r, wave_no, created),
                    }
                }
            }
        }
        wave
    }

    /// The CPU the next thread is bound to under `--pin round-robin`.
    fn next_pin(&mut self) -> u32 {
        if self.cfg.pin != Pin::RoundRobin {
            return NO_PIN;
        }
        let p = self.next_pin;
        self.next_pin = (p + 1) % self.cfg.cpus.len();
        p as u32
    }

    /// Retires what is left, oldest first, and waits for every created
    /// thread's exit destructor, the reaper's joins, the cleanups the
    /// strategy still owes and the stack pool's unmaps: all measured.
    fn drain(&mut self) {
        self.progress.set_message("draining");
        let cfg = self.cfg;
        let mut left: Vec<&mut Wave> = self.ring.iter_mut().flatten().collect();
        left.sort_by_key(|w| w.index);
        for w in left {
            retire(w, cfg, &mut self.counts, &mut self.reaping);
        }
        // Threads still spinning finish their spin first; uncancelled ones
        // (--cancel none) sleep to the end. After Ctrl-C, wait at most a few
        // seconds more: what has not exited by then is reported, not awaited.
        let deadline = now_ns() + (cfg.sleep_ms + 60_000) * 1_000_000;
        let mut patience_from_interrupt: Option<u64> = None;
        // Acquire pairs with the Release increment in the exit destructor.
        while self.body.exits.load(Ordering::Acquire) < self.counts.created && now_ns() < deadline {
            if runner::interrupted() {
                let since = *patience_from_interrupt.get_or_insert_with(now_ns);
                if now_ns() - since > 5_000_000_000 {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Acquire: as the loop's.
        let every_thread_exited = self.body.exits.load(Ordering::Acquire) >= self.counts.created;
        if let Some(r) = self.reaping.reaper.as_mut() {
            (self.reaped, self.reap_failed) = r.finish(every_thread_exited);
        }
        // Detached threads that exited before their retire, joined once
        // gone (`spawn::detach`); all have run their exit destructor by now
        // unless the wait above gave up.
        let d = &mut self.reaping.detacher;
        self.counts.detach_left = d.finish(now_ns() + 5_000_000_000);
        self.counts.detached_after_exit = d.after_exit;
        self.reap_failed += d.failed;
        // Deferred cleanups still queued are work the strategy owes (exitq:
        // exit_barrier).
        self.cleanup_report = self.cleanup.take().map(Cleanup::finish);
        if let Some(r) = self.spawner.recycled_stacks() {
            // Every thread joined (reaper or pool reclaimer), every stack
            // unmapped: measured, as glibc's unmaps are.
            r.drain(Duration::from_secs(60));
        }
    }

    /// The measured phase ends; every exited thread's record is harvested.
    fn stop(mut self, argv: Vec<String>) -> Result<(Measured<'a>, perf::Report)> {
        let t1 = now_ns();
        self.session.disable()?;
        self.progress.finish();
        let ru1 = Usage::process();
        if let Some(m) = &self.saved_mask {
            let _ = CpuMask::of(m).apply_to_current_thread();
        }
        self.interrupted |= runner::interrupted();
        for w in std::mem::take(&mut self.ring).into_iter().flatten() {
            harvest(&mut self.collector, w.recs, &mut self.pending);
        }
        let mut never_exited = 0u64;
        for recs in std::mem::take(&mut self.pending) {
            let stuck = recs.iter().filter(|r| !r.exited()).count() as u64;
            recs.iter()
                .filter(|r| r.exited())
                .for_each(|r| self.collector.add(r));
            if stuck > 0 {
                never_exited += stuck;
                // Threads still running use these records: never free them.
                std::mem::forget(recs);
            }
        }
        let exits = self.body.exits.load(Ordering::Acquire);
        let perf = self.session.finish()?;
        Ok((
            Measured {
                cfg: self.cfg,
                pre: self.pre,
                facts: self.facts,
                argv,
                spawner: self.spawner,
                cleanup: self.cleanup_report,
                collector: self.collector,
                failures: self.failures,
                counts: self.counts,
                waves_run: self.waves_run,
                interrupted: self.interrupted,
                never_exited,
                exits,
                reaped: self.reaped,
                reap_failed: self.reap_failed,
                ru0: self.ru0,
                ru1,
                t0: self.t0,
                t_waves: self.t_waves,
                t1,
            },
            perf,
        ))
    }
}

/// The spawner for `cfg`: the backend, its attributes and, with
/// `--stacks recycled`, the stack pool.
fn spawner(cfg: &Config) -> Result<Spawner> {
    let mut spawner = Spawner::new(cfg.spawn, cfg.stack_size.map(|s| s as usize))
        .with_context(|| format!("cannot prepare thread attributes ({:?})", cfg.stack_size))?;
    // Forced under a finite RLIMIT_AS or RLIMIT_DATA, std threads claim
    // their room first: one that might get its stack but not std's signal
    // stack is counted as a failure instead of aborting the process.
    if cfg.force {
        spawner.check_room(exitq::limits::ThreadRoom::new());
    }
    if cfg.stacks == Stacks::Recycled {
        // Keep every stack the ring (and a reaper running behind) can hand
        // back at once, so the steady state does not unmap and remap.
        let keep = cfg.per_wave.saturating_mul(cfg.slots).saturating_mul(2) as usize;
        let pool = Recycled::new(
            cfg.stack_size.map(|s| s as usize),
            keep,
            cfg.stack_release,
            cfg.reap,
        )
        .context("cannot create the stack pool (--stacks recycled)")?;
        spawner.use_recycled_stacks(pool)?;
    }
    Ok(spawner)
}

/// Retires a wave: stop request to each thread, then reap its handle.
fn retire(wave: &mut Wave, cfg: &Config, counts: &mut Counts, reap: &mut Reaping) {
    if wave.retired {
        return;
    }
    wave.retired = true;
    match cfg.cancel {
        Cancel::Pthread => {
            for (h, r) in wave.handles.iter().zip(&wave.recs) {
                r.cancel_ns.store(now_ns(), Ordering::Relaxed);
                if h.cancel() == 0 {
                    counts.cancel_requests += 1;
                } else {
                    counts.cancel_errors += 1;
                }
            }
        }
        Cancel::Flag => {
            for r in &wave.recs {
                r.cancel_ns.store(now_ns(), Ordering::Relaxed);
                r.request_stop();
                counts.cancel_requests += 1;
            }
        }
        Cancel::None => {}
    }
    let handles = std::mem::take(&mut wave.handles);
    match cfg.reap {
        Reap::Join => {
            if let Some(r) = &reap.reaper {
                r.reap(handles);
            }
        }
        Reap::Detach => {
            counts.detached += handles.len() as u64;
            for (h, r) in handles.into_iter().zip(&wave.recs) {
                reap.detacher.detach(h, r);
            }
            reap.detacher.sweep();
        }
        Reap::Leak => {
            counts.leaked += handles.len() as u64;
            handles.into_iter().for_each(Handle::leak);
        }
    }
}
