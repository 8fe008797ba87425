//! `herd storm` (and plain `herd`): the thread-exit thundering herd.
//!
//! The classic micro, reproduced and measured: spawn waves of threads that
//! spin and then sleep; after spawning wave `i`, retire wave `i - lag`
//! (cancel it, then join/detach/leak its threads); wave handles live in a
//! ring of `slots` wave slots. Threads therefore exit in bursts of
//! `per_wave`, all at once, across every CPU: the herd.
//!
//! The wave loop is [`storm`]; flags and validation are in [`options`],
//! the limits check in [`preflight`], the thread body and backends in
//! [`crate::spawn`].
//!
//! # Measured, per run (see [`storm`])
//! wall time of the measured phase (waves + drain), user/sys time and
//! context switches (getrusage deltas), peak RSS, threads created /
//! failed (by errno and the limit that explains it) / cancelled / exited /
//! reaped, create rate, and histograms (p50/p90/p99/max) of
//! * create latency: the `pthread_create` (or `Builder::spawn`) call;
//! * start latency: creation request to the thread's first instruction;
//! * exit latency: the stop request (cancel or flag, or for a thread that
//!   ended on its own, the end of its sleep) to its exit destructor;
//! * placement: the CPU at start and at exit (`sched_getcpu`), summarised
//!   per CPU with CPUs used and imbalance.
//!
//! # Extension points (kept small on purpose)
//! * Per-thread hooks: [`make_hooks`] builds the [`Hooks`] every thread
//!   runs at start and in its exit destructor. Exit-cleanup strategies add
//!   their flag to [`Args`] and their hooks there.
//! * Stacks/attributes: [`crate::spawn::pthread::StackChoice`], created in
//!   [`Spawner::new`] from the config.

pub mod options;
pub mod preflight;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde_json::json;

pub use options::{Args, Config, Pin, Preset};

use crate::error::{usage, EXIT_INTERRUPTED};
use crate::export::run::{child_args, emit, fmt_value, repeat};
use crate::host::{allowed_cpus, format_cpu_list, CpuMask, HostFacts};
use crate::perf;
use crate::result::{Metric, RunResult};
use crate::runner;
use crate::spawn::failure::{DiagContext, Failures};
use crate::spawn::recycled::{Recycled, Stacks};
use crate::spawn::{now_ns, Body, Cancel, Handle, Hooks, Reap, Spawner, ThreadRec, NO_PIN};

/// Runs `herd storm`.
pub fn run(args: &Args) -> Result<u8> {
    if args.out.runs > 1 && !runner::is_child() {
        // Validate here so a bad flag fails once, not once per child.
        let facts = HostFacts::read();
        let cfg = Config::from_args(args, &facts)?;
        // Each child prints the warnings of its own pre-flight.
        refuse_or_warn(&cfg, &preflight::check(&cfg, &facts), false)?;
        return repeat("storm", &args.out);
    }
    runner::install_interrupt_handler();
    let facts = HostFacts::read();
    let cfg = Config::from_args(args, &facts)?;
    let pre = preflight::check(&cfg, &facts);
    refuse_or_warn(&cfg, &pre, true)?;
    let result = storm(&cfg, &pre, &facts, &args.perf, child_args("storm"))?;
    if !args.out.json && !args.out.csv {
        crate::export::run::print_out(&(cfg.describe() + "\n"))?;
    }
    emit(&result, &args.out, extra_sections)?;
    Ok(if result.interrupted {
        EXIT_INTERRUPTED
    } else {
        0
    })
}

fn refuse_or_warn(cfg: &Config, pre: &preflight::Preflight, print: bool) -> Result<()> {
    if print {
        for w in &pre.warnings {
            eprintln!("herd: warning: {w}");
        }
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
    Err(usage(
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

/// Latency histograms and placement, filled from exited threads' records.
struct Collector {
    create: Histogram<u64>,
    start: Histogram<u64>,
    exit: Histogram<u64>,
    exit_hook: Histogram<u64>,
    per_cpu_start: BTreeMap<i32, u64>,
    per_cpu_exit: BTreeMap<i32, u64>,
    ended_by_request: u64,
    ended_on_own: u64,
    harvested: u64,
}

fn histogram() -> Histogram<u64> {
    // 1 ns .. 1 hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Collector {
    fn new() -> Self {
        Collector {
            create: histogram(),
            start: histogram(),
            exit: histogram(),
            exit_hook: histogram(),
            per_cpu_start: BTreeMap::new(),
            per_cpu_exit: BTreeMap::new(),
            ended_by_request: 0,
            ended_on_own: 0,
            harvested: 0,
        }
    }

    /// Adds an exited thread's record.
    fn add(&mut self, r: &ThreadRec) {
        let exit = r.exit_ns.load(Ordering::Acquire);
        let create = r.create_ns.load(Ordering::Relaxed);
        let start = r.start_ns.load(Ordering::Relaxed);
        if start != 0 {
            self.start
                .saturating_record(start.saturating_sub(create).max(1));
            *self
                .per_cpu_start
                .entry(r.start_cpu.load(Ordering::Relaxed))
                .or_default() += 1;
        }
        *self
            .per_cpu_exit
            .entry(r.exit_cpu.load(Ordering::Relaxed))
            .or_default() += 1;
        let own = r.self_end_ns.load(Ordering::Relaxed);
        let req = r.cancel_ns.load(Ordering::Relaxed);
        let from = if own != 0 {
            self.ended_on_own += 1;
            own
        } else {
            self.ended_by_request += 1;
            req
        };
        if from != 0 {
            self.exit
                .saturating_record(exit.saturating_sub(from).max(1));
        }
        if r.body.hooks.on_exit.is_some() {
            self.exit_hook
                .saturating_record(r.exit_hook_ns.load(Ordering::Relaxed).max(1));
        }
        self.harvested += 1;
    }
}

/// Adds a wave's records to the collector once every thread of it has
/// exited, and frees them; a wave with threads still running is kept
/// whole in `pending` (its records must not move or be freed yet).
fn harvest(c: &mut Collector, recs: Vec<ThreadRec>, pending: &mut Vec<Vec<ThreadRec>>) {
    if recs.iter().all(ThreadRec::exited) {
        recs.iter().for_each(|r| c.add(r));
    } else {
        pending.push(recs);
    }
}

/// Counters the wave loop keeps.
#[derive(Default)]
struct Counts {
    created: u64,
    cancel_requests: u64,
    cancel_errors: u64,
    detached: u64,
    leaked: u64,
}

/// Retires a wave: stop request to each thread, then reap its handle.
fn retire(
    wave: &mut Wave,
    cfg: &Config,
    counts: &mut Counts,
    reaper: Option<&std::sync::mpsc::Sender<Vec<Handle>>>,
) {
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
            if let Some(tx) = reaper {
                // The reaper outlives the loop; a send cannot fail before
                // we drop the sender.
                let _ = tx.send(handles);
            }
        }
        Reap::Detach => {
            counts.detached += handles.len() as u64;
            handles.into_iter().for_each(Handle::detach);
        }
        Reap::Leak => {
            counts.leaked += handles.len() as u64;
            handles.into_iter().for_each(Handle::leak);
        }
    }
}

fn rusage() -> libc::rusage {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid `who` and a writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru
}

fn tv_s(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

fn hist_json(h: &Histogram<u64>) -> serde_json::Value {
    if h.is_empty() {
        return json!({"count": 0});
    }
    json!({
        "count": h.len(),
        "unit": "ns",
        "min": h.min(),
        "mean": h.mean(),
        "p50": h.value_at_quantile(0.50),
        "p90": h.value_at_quantile(0.90),
        "p99": h.value_at_quantile(0.99),
        "max": h.max(),
    })
}

fn push_hist(r: &mut RunResult, name: &str, h: &Histogram<u64>) {
    if h.is_empty() {
        return;
    }
    for (q, label) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
        r.push(Metric::lower(
            &format!("{name}_{label}_us"),
            "us",
            h.value_at_quantile(q) as f64 / 1e3,
        ));
    }
    r.push(Metric::lower(
        &format!("{name}_max_us"),
        "us",
        h.max() as f64 / 1e3,
    ));
}

/// Placement summary: per-CPU counts at start and exit, CPUs used,
/// imbalance (largest per-CPU start count over the mean across the
/// requested CPUs; 1.0 is perfectly even).
fn placement(cfg: &Config, c: &Collector) -> serde_json::Value {
    let pairs = |m: &BTreeMap<i32, u64>| -> Vec<(i64, u64)> {
        m.iter().map(|(&k, &v)| (k as i64, v)).collect()
    };
    let mut used: Vec<i32> = c
        .per_cpu_start
        .keys()
        .chain(c.per_cpu_exit.keys())
        .copied()
        .filter(|&k| k >= 0)
        .collect();
    used.sort_unstable();
    used.dedup();
    let total: u64 = c.per_cpu_start.values().sum();
    let max = c.per_cpu_start.values().copied().max().unwrap_or(0);
    let mean = total as f64 / cfg.cpus.len().max(1) as f64;
    let imbalance = if total > 0 { max as f64 / mean } else { 0.0 };
    // Threads seen (at start or exit) on a CPU outside --cpus: should be 0.
    let outside = |m: &BTreeMap<i32, u64>| -> u64 {
        m.iter()
            .filter(|(&k, _)| k < 0 || cfg.cpus.binary_search(&(k as usize)).is_err())
            .map(|(_, &v)| v)
            .sum()
    };
    json!({
        "cpus_requested": cfg.cpus,
        "per_cpu_start": pairs(&c.per_cpu_start),
        "per_cpu_exit": pairs(&c.per_cpu_exit),
        "cpus_used": used.len(),
        "cpus_used_list": used,
        "imbalance": imbalance,
        "outside_requested_start": outside(&c.per_cpu_start),
        "outside_requested_exit": outside(&c.per_cpu_exit),
    })
}

/// The storm itself: one measured run of `cfg`.
pub fn storm(
    cfg: &Config,
    pre: &preflight::Preflight,
    facts: &HostFacts,
    perf_args: &perf::PerfArgs,
    argv: Vec<String>,
) -> Result<RunResult> {
    let pin_masks = match cfg.pin {
        Pin::None => Vec::new(),
        Pin::RoundRobin => cfg.cpus.iter().map(|&c| CpuMask::of(&[c])).collect(),
    };
    // Exit-cleanup machinery (registry, pool, monitor, exitq domain).
    let cleanup = crate::cleanup::Cleanup::start(&cfg.cleanup)?;
    let body = Body {
        spin: cfg.spin,
        sleep_ns: cfg.sleep_ms * 1_000_000,
        cancel: cfg.cancel,
        pin_masks,
        hooks: make_hooks(cfg, cleanup.as_ref()),
        exits: Default::default(),
    }
    .leak();
    let mut spawner = Spawner::new(cfg.spawn, cfg.stack_size.map(|s| s as usize))
        .with_context(|| format!("cannot prepare thread attributes ({:?})", cfg.stack_size))?;
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
    let diag = DiagContext {
        facts: facts.clone(),
        stack_bytes: pre.stack_bytes,
    };
    // Opened before anything is started, so a --require-perf failure
    // leaves nothing behind.
    let mut session = perf::Session::open(perf_args, &cfg.cpus)?;

    // Threads inherit the spawning thread's mask: bind it to --cpus for
    // the run, restore afterwards.
    let saved_mask = allowed_cpus();
    CpuMask::of(&cfg.cpus)
        .apply_to_current_thread()
        .context("cannot bind to --cpus")?;

    // The reaper: joins retired threads in the background so the wave
    // loop never waits for an exit (as the micro, which never joins).
    let reaped = Arc::new(AtomicU64::new(0));
    let reap_failed = Arc::new(AtomicU64::new(0));
    let (tx, reaper) = if cfg.reap == Reap::Join {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<Handle>>();
        let (ok, bad) = (Arc::clone(&reaped), Arc::clone(&reap_failed));
        let h = std::thread::Builder::new()
            .name("herd-reaper".into())
            .spawn(move || {
                for batch in rx {
                    for h in batch {
                        // Relaxed: read after this thread is joined.
                        if h.join() {
                            ok.fetch_add(1, Ordering::Relaxed);
                        } else {
                            bad.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
            .context("cannot start the reaper thread")?;
        (Some(tx), Some(h))
    } else {
        (None, None)
    };

    let slots = cfg.slots as usize;
    let mut ring: Vec<Option<Wave>> = (0..slots).map(|_| None).collect();
    let mut collector = Collector::new();
    let mut pending = Vec::new();
    let mut failures = Failures::default();
    let mut counts = Counts::default();
    let mut interrupted = false;
    let mut next_pin = 0usize;
    let npins = cfg.cpus.len();

    let progress = crate::export::progress::Progress::new(cfg.waves, "waves");
    let ru0 = rusage();
    session.enable()?;
    let t0 = now_ns();
    let mut waves_run = 0;
    for w in 0..cfg.waves {
        if runner::interrupted() {
            interrupted = true;
            break;
        }
        let slot = (w % cfg.slots) as usize;
        if let Some(mut old) = ring[slot].take() {
            // lag < slots, so this wave was retired already.
            retire(&mut old, cfg, &mut counts, tx.as_ref());
            harvest(&mut collector, old.recs, &mut pending);
        }
        let mut wave = Wave {
            index: w,
            recs: Vec::with_capacity(cfg.per_wave as usize),
            handles: Vec::with_capacity(cfg.per_wave as usize),
            retired: false,
        };
        for _ in 0..cfg.per_wave {
            let pin = if cfg.pin == Pin::RoundRobin {
                let p = next_pin;
                next_pin = (next_pin + 1) % npins;
                p as u32
            } else {
                NO_PIN
            };
            debug_assert!(
                wave.recs.len() < wave.recs.capacity(),
                "records must not move"
            );
            wave.recs.push(ThreadRec::new(body, w as u32, pin));
            let rec = wave.recs.last().expect("just pushed");
            let c0 = now_ns();
            rec.create_ns.store(c0, Ordering::Relaxed);
            // SAFETY: the record sits in `wave.recs`, preallocated to
            // per_wave entries, so it never moves; the wave's records are
            // freed only once every one has exited (`harvest`), or leaked.
            match unsafe { spawner.spawn(rec) } {
                Ok(h) => {
                    collector
                        .create
                        .saturating_record(now_ns().saturating_sub(c0).max(1));
                    counts.created += 1;
                    wave.handles.push(h);
                }
                Err(errno) => {
                    // No thread uses the record: drop it.
                    wave.recs.pop();
                    failures.record(errno, w as u32, counts.created, &diag);
                }
            }
        }
        ring[slot] = Some(wave);
        if w >= cfg.lag {
            let old = ((w - cfg.lag) % cfg.slots) as usize;
            if let Some(wv) = ring[old].as_mut() {
                retire(wv, cfg, &mut counts, tx.as_ref());
            }
        }
        waves_run += 1;
        progress.inc();
    }
    let t_waves = now_ns();
    progress.set_message("draining");

    // Drain: retire what is left, oldest first, and wait for every
    // created thread's exit destructor.
    let mut left: Vec<&mut Wave> = ring.iter_mut().flatten().collect();
    left.sort_by_key(|w| w.index);
    for w in left {
        retire(w, cfg, &mut counts, tx.as_ref());
    }
    // Threads still spinning finish their spin first; uncancelled ones
    // (--cancel none) sleep to the end. After Ctrl-C, wait at most a few
    // seconds more: what has not exited by then is reported, not awaited.
    let deadline = now_ns() + (cfg.sleep_ms + 60_000) * 1_000_000;
    let mut patience_from_interrupt: Option<u64> = None;
    // Acquire pairs with the Release increment in the exit destructor.
    while body.exits.load(Ordering::Acquire) < counts.created && now_ns() < deadline {
        if runner::interrupted() {
            let since = *patience_from_interrupt.get_or_insert_with(now_ns);
            if now_ns() - since > 5_000_000_000 {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(tx);
    if let Some(h) = reaper {
        let _ = h.join();
    }
    // Inside the measured phase: deferred cleanups still queued are work
    // the strategy owes (exitq: exit_barrier).
    let cleanup_report = cleanup.map(|c| c.finish());
    if let Some(r) = spawner.recycled_stacks() {
        // Every thread joined (reaper or pool reclaimer), every stack
        // unmapped: measured, as glibc's unmaps are.
        r.drain(std::time::Duration::from_secs(60));
    }
    let t1 = now_ns();
    session.disable()?;
    progress.finish();
    let ru1 = rusage();
    if let Some(m) = saved_mask {
        let _ = CpuMask::of(&m).apply_to_current_thread();
    }
    interrupted |= runner::interrupted();

    for w in ring.into_iter().flatten() {
        harvest(&mut collector, w.recs, &mut pending);
    }
    let mut never_exited = 0u64;
    for recs in pending {
        let stuck = recs.iter().filter(|r| !r.exited()).count() as u64;
        recs.iter()
            .filter(|r| r.exited())
            .for_each(|r| collector.add(r));
        if stuck > 0 {
            never_exited += stuck;
            // Threads still running use these records: never free them.
            std::mem::forget(recs);
        }
    }
    let exits = body.exits.load(Ordering::Acquire);
    let report = session.finish()?;

    let mut r = RunResult::new("storm", argv, serde_json::to_value(cfg)?, facts.to_json());
    r.interrupted = interrupted;
    let wall = (t1 - t0) as f64 / 1e9;
    let waves_s = (t_waves - t0) as f64 / 1e9;
    r.push(Metric::lower("wall_s", "s", wall));
    r.push(Metric::lower("waves_s", "s", waves_s));
    r.push(Metric::lower("drain_s", "s", (t1 - t_waves) as f64 / 1e9));
    r.push(Metric::lower(
        "user_s",
        "s",
        tv_s(ru1.ru_utime) - tv_s(ru0.ru_utime),
    ));
    r.push(Metric::lower(
        "sys_s",
        "s",
        tv_s(ru1.ru_stime) - tv_s(ru0.ru_stime),
    ));
    r.push(Metric::lower(
        "ctx_voluntary",
        "switches",
        (ru1.ru_nvcsw - ru0.ru_nvcsw) as f64,
    ));
    r.push(Metric::lower(
        "ctx_involuntary",
        "switches",
        (ru1.ru_nivcsw - ru0.ru_nivcsw) as f64,
    ));
    r.push(Metric::info(
        "threads_created",
        "threads",
        counts.created as f64,
    ));
    r.push(Metric::lower(
        "threads_failed",
        "threads",
        failures.total() as f64,
    ));
    r.push(Metric::info(
        "threads_cancelled",
        "threads",
        counts.cancel_requests as f64,
    ));
    r.push(Metric::info("threads_exited", "threads", exits as f64));
    let reaped_n = match cfg.reap {
        Reap::Join => reaped.load(Ordering::Relaxed),
        Reap::Detach => counts.detached,
        Reap::Leak => 0,
    };
    r.push(Metric::info("threads_reaped", "threads", reaped_n as f64));
    if waves_s > 0.0 {
        r.push(Metric::higher(
            "create_rate",
            "threads/s",
            counts.created as f64 / waves_s,
        ));
    }
    push_hist(&mut r, "create", &collector.create);
    push_hist(&mut r, "start", &collector.start);
    push_hist(&mut r, "exit", &collector.exit);
    if !collector.exit_hook.is_empty() {
        push_hist(&mut r, "exit_hook", &collector.exit_hook);
    }
    r.push(Metric::lower("peak_rss_kib", "KiB", ru1.ru_maxrss as f64));
    r.push(Metric::lower(
        "minor_faults",
        "faults",
        (ru1.ru_minflt - ru0.ru_minflt) as f64,
    ));
    if let Some(s) = spawner.recycled_stacks() {
        for m in s.metrics() {
            r.push(m);
        }
        r.warnings.extend(s.warnings());
    }
    let place = placement(cfg, &collector);
    r.push(Metric::info(
        "cpus_used",
        "cpus",
        place["cpus_used"].as_u64().unwrap_or(0) as f64,
    ));
    for m in report.metrics(exits) {
        r.push(m);
    }
    if let Some(c) = &cleanup_report {
        for m in c.metrics(exits) {
            r.push(m);
        }
        r.warnings.extend(c.problems());
    }
    r.perf = report.to_json();
    for m in crate::spawn::recycled::mmap_lock_metrics(&r.perf) {
        r.push(m);
    }
    for line in report.notes() {
        eprintln!("{line}");
    }

    let groups = failures.groups();
    for g in &groups {
        r.warnings.push(format!(
            "{} thread creations failed with {} ({}): {}; first in wave {} after {} threads created",
            g.count, g.errno_name, g.limit_name, g.evidence, g.first_wave, g.created_before
        ));
    }
    r.warnings.extend(pre.warnings.iter().cloned());
    if never_exited > 0 {
        r.warnings.push(format!(
            "{never_exited} threads did not reach their exit destructor within the drain timeout"
        ));
    }
    if counts.cancel_errors > 0 {
        r.warnings.push(format!(
            "{} pthread_cancel calls failed",
            counts.cancel_errors
        ));
    }
    let reap_bad = reap_failed.load(Ordering::Relaxed);
    if reap_bad > 0 {
        r.warnings.push(format!("{reap_bad} joins failed"));
    }
    r.details = json!({
        "waves_run": waves_run,
        "threads_requested": cfg.total_threads(),
        "ended_by_request": collector.ended_by_request,
        "ended_on_own": collector.ended_on_own,
        "never_exited": never_exited,
        "detached": counts.detached,
        "leaked": counts.leaked,
        "failures": groups,
        "histograms": {
            "create": hist_json(&collector.create),
            "start": hist_json(&collector.start),
            "exit": hist_json(&collector.exit),
            "exit_hook": hist_json(&collector.exit_hook),
        },
        "placement": place,
        "preflight": pre,
        "cleanup": cleanup_report,
        "stacks": spawner.recycled_stacks().map(|s| s.to_json()),
    });
    if runner::is_child() {
        // Children print JSON only; the parent shows stderr as is.
        for w in &r.warnings {
            eprintln!("herd: {w}");
        }
    }
    Ok(r)
}

/// The storm's own sections below the metrics table: the `--contention`
/// profile, placement, failures, warnings.
pub fn extra_sections(r: &RunResult) -> String {
    let mut out = String::new();
    if let Some(t) = perf::Report::from_json(&r.perf).and_then(|p| p.contention_table()) {
        let _ = writeln!(out, "\n{t}");
    }
    let p = &r.details["placement"];
    if let Some(starts) = p["per_cpu_start"].as_array() {
        let requested: Vec<usize> = p["cpus_requested"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_u64())
                    .map(|v| v as usize)
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "\nplacement: {} CPUs used of {} requested ({}), imbalance {} (max/mean threads per CPU at start)",
            p["cpus_used"],
            requested.len(),
            format_cpu_list(&requested),
            fmt_value(p["imbalance"].as_f64().unwrap_or(0.0))
        );
        let (os, oe) = (
            p["outside_requested_start"].as_u64().unwrap_or(0),
            p["outside_requested_exit"].as_u64().unwrap_or(0),
        );
        if os + oe > 0 {
            let _ = writeln!(
                out,
                "  threads seen outside the requested CPUs: {os} at start, {oe} at exit"
            );
        }
        for (label, list) in [
            ("start", starts),
            ("exit", p["per_cpu_exit"].as_array().unwrap_or(starts)),
        ] {
            let items: Vec<String> = list
                .iter()
                .filter_map(|e| Some(format!("cpu{}:{}", e.get(0)?, e.get(1)?)))
                .collect();
            let _ = write!(out, "  threads per CPU at {label}:");
            for (i, it) in items.iter().enumerate() {
                if i % 8 == 0 {
                    let _ = write!(out, "\n    ");
                } else {
                    out.push_str("  ");
                }
                out.push_str(it);
            }
            out.push('\n');
        }
    }
    let pre = &r.details["preflight"];
    if pre.is_object() {
        let _ = writeln!(
            out,
            "\npre-flight: stack {} per thread, peak live threads {}{}, peak mappings {}{}",
            crate::host::human_bytes(pre["stack_bytes"].as_u64().unwrap_or(0)),
            if pre["peak_is_lower_bound"] == true {
                ">= "
            } else {
                "~"
            },
            pre["peak_live_threads"],
            pre["peak_mappings"],
            match pre["leak_thread_capacity"].as_u64() {
                Some(c) => format!(", room for ~{c} leaked threads"),
                None => String::new(),
            }
        );
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(out, "\nwarnings:");
        for w in &r.warnings {
            let _ = writeln!(out, "  - {w}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg_with_cpus(cpus: Vec<usize>) -> Config {
        Config {
            preset: Preset::Default,
            waves: 1,
            per_wave: 1,
            lag: 0,
            slots: 1,
            spin: 0,
            sleep_ms: 0,
            spawn: crate::spawn::Backend::Pthread,
            stack_size: None,
            stacks: Default::default(),
            stack_release: Default::default(),
            cancel: Cancel::Pthread,
            reap: Reap::Join,
            cpus,
            pin: Pin::RoundRobin,
            force: false,
            cleanup: Default::default(),
        }
    }

    /// Placement on a simulated 384-CPU machine: ids above 128 and 256,
    /// no fixed-size tables anywhere.
    #[test]
    fn placement_beyond_128_cpus() {
        let requested: Vec<usize> = (0..128).chain(256..384).collect();
        let cfg = cfg_with_cpus(requested.clone());
        let mut c = Collector::new();
        for &cpu in &requested {
            let n = if cpu == 300 { 4 } else { 2 };
            c.per_cpu_start.insert(cpu as i32, n);
            c.per_cpu_exit.insert(cpu as i32, n);
        }
        let p = placement(&cfg, &c);
        assert_eq!(p["cpus_used"], 256);
        assert_eq!(p["cpus_requested"].as_array().unwrap().len(), 256);
        assert_eq!(p["per_cpu_start"][200], serde_json::json!([328, 2]));
        let total = 2.0 * 255.0 + 4.0;
        assert!((p["imbalance"].as_f64().unwrap() - 4.0 / (total / 256.0)).abs() < 1e-9);
        let r = {
            let mut r = RunResult::new("storm", vec![], Default::default(), Default::default());
            r.details = json!({ "placement": p });
            r
        };
        let text = extra_sections(&r);
        assert!(
            text.contains("256 CPUs used of 256 requested (0-127,256-383)"),
            "{text}"
        );
        assert!(text.contains("cpu383:2"), "{text}");
    }

    #[test]
    fn placement_counts_unused_requested_cpus_in_the_imbalance() {
        // 10 threads all on CPU 1 of 0-4: imbalance 5 (max 10 / mean 2).
        let cfg = cfg_with_cpus(vec![0, 1, 2, 3, 4]);
        let mut c = Collector::new();
        c.per_cpu_start.insert(1, 10);
        c.per_cpu_exit.insert(1, 10);
        let p = placement(&cfg, &c);
        assert_eq!(p["cpus_used"], 1);
        assert_eq!(p["imbalance"], 5.0);
        assert_eq!(p["outside_requested_start"], 0);
        // A thread that exited on CPU 7, outside 0-4, is reported.
        c.per_cpu_exit.insert(7, 1);
        let p = placement(&cfg, &c);
        assert_eq!(p["outside_requested_exit"], 1);
    }
}
