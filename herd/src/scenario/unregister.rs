//! `herd unregister`: the cost of paying for a grace period per operation.
//!
//! `--updaters N` threads each, per operation, register a new object in a
//! registry (a table of `--objects` slots) and unregister the one it
//! replaces, while `--readers M` threads walk the whole registry inside exitq
//! read sections. The unregistered object may only be freed once no reader
//! can hold it, i.e. after a grace period of the domain. `--sync` says how
//! that grace period is paid for:
//!
//! * `per-op`: `synchronize()` per operation, then free (the kernel change
//!   that made an unregistration wait for a full SRCU grace period);
//! * `expedited`: `synchronize_expedited()` per operation (membarrier IPIs,
//!   spin instead of sleep: lower latency, more CPU);
//! * `deferred`: `defer(free)`; the callbacks are batched per thread and run
//!   after one grace period per batch (call_rcu instead of synchronize_rcu);
//! * `none`: free at once, no grace period. Wrong on purpose: it shows that
//!   the use-after-free check below catches what a missing grace period does.
//!
//! Use-after-free check: "freeing" an object poisons it (`magic = POISON`)
//! and returns it to a free list from which updaters reuse it (bumping its
//! generation), like a type-stable slab. Memory is never returned to the
//! allocator while threads run, so a reader that holds a freed object reads
//! valid memory and sees the poison or a new generation instead of
//! undefined behaviour. Each read section records every object it saw and
//! re-checks all of them just before it ends; any mismatch is a violation.
//! With a working domain the count is 0 in every mode but `none`.
//!
//! The measured phase ends when every update is reclaimed (`barrier()` in
//! deferred mode), so deferred work is not hidden from the rate.

use std::hint::black_box;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use serde::Serialize;

use super::gpkit::{self, fmt_ns, fmt_rate, format_duration, CpuTime, Latency, OutputArgs};
use super::load::{self, LoadThreads};
use crate::error::usage;
use crate::export::format::fmt_value;
use crate::perf::{self, PerfArgs};
use crate::result::{Metric, RunResult};
use crate::runner;

/// How an unregistration waits for readers before freeing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// `synchronize()` per operation.
    PerOp,
    /// `synchronize_expedited()` per operation.
    Expedited,
    /// `defer()` the free: batched, one grace period per batch.
    Deferred,
    /// No grace period at all (unsafe on purpose: shows the checker works).
    None,
}

impl SyncMode {
    fn name(self) -> &'static str {
        match self {
            SyncMode::PerOp => "per-op",
            SyncMode::Expedited => "expedited",
            SyncMode::Deferred => "deferred",
            SyncMode::None => "none",
        }
    }
}

/// Flags of `herd unregister`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How an unregistered object waits for readers before it is freed.
    #[arg(long, value_enum, default_value_t = SyncMode::Deferred)]
    pub sync: SyncMode,
    /// Updater threads (each registers and unregisters objects).
    #[arg(long, default_value_t = 1)]
    pub updaters: usize,
    /// Reader threads walking the registry [default: online CPUs - 1, at least 1].
    #[arg(long)]
    pub readers: Option<usize>,
    /// Slots in the registry (objects registered at any time).
    #[arg(long, default_value_t = 64)]
    pub objects: usize,
    /// How long the updaters run.
    #[arg(long, default_value = "1s", value_parser = gpkit::parse_duration)]
    pub duration: Duration,
    /// exitq: callbacks per thread-local batch (deferred mode) [default: exitq's].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// exitq: sleep before the first check of readers in a normal grace
    /// period [default: exitq's].
    #[arg(long, value_parser = gpkit::parse_duration)]
    pub first_check_delay: Option<Duration>,
    /// perf counters.
    #[command(flatten)]
    pub perf: PerfArgs,
    /// Output format and repetitions.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Most threads of one role (a typo guard).
const MAX_THREADS: usize = 65_536;

impl Args {
    fn validate(&self) -> Result<()> {
        if !(1..=MAX_THREADS).contains(&self.updaters) {
            return Err(usage(
                "--updaters",
                format!("must be between 1 and {MAX_THREADS}"),
            ));
        }
        if let Some(r) = self.readers {
            if r > MAX_THREADS {
                return Err(usage("--readers", format!("must be at most {MAX_THREADS}")));
            }
        }
        if !(1..=1 << 24).contains(&self.objects) {
            return Err(usage("--objects", "must be between 1 and 16777216"));
        }
        if self.objects < self.updaters {
            return Err(usage(
                "--objects",
                format!(
                    "must be at least --updaters ({}): each updater owns its own slots",
                    self.updaters
                ),
            ));
        }
        if self.duration < Duration::from_millis(1) || self.duration > gpkit::MAX_RUN {
            return Err(usage("--duration", "must be between 1ms and 24h"));
        }
        if let Some(b) = self.batch_size {
            if !(1..=1 << 20).contains(&b) {
                return Err(usage("--batch-size", "must be between 1 and 1048576"));
            }
            if self.sync != SyncMode::Deferred {
                return Err(usage(
                    "--batch-size",
                    "only applies to --sync deferred (the other modes defer nothing)",
                ));
            }
        }
        if let Some(d) = self.first_check_delay {
            if d > Duration::from_secs(1) {
                return Err(usage("--first-check-delay", "must be at most 1s"));
            }
        }
        Ok(())
    }

    fn reader_count(&self, online: usize) -> usize {
        self.readers
            .unwrap_or_else(|| online.saturating_sub(1).max(1))
    }

    /// The arguments that reproduce this configuration (no output flags).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--sync".into(),
            self.sync.name().into(),
            "--updaters".into(),
            self.updaters.to_string(),
            "--objects".into(),
            self.objects.to_string(),
            "--duration".into(),
            format_duration(self.duration),
        ];
        if let Some(r) = self.readers {
            a.extend(["--readers".into(), r.to_string()]);
        }
        if let Some(b) = self.batch_size {
            a.extend(["--batch-size".into(), b.to_string()]);
        }
        if let Some(d) = self.first_check_delay {
            a.extend(["--first-check-delay".into(), format_duration(d)]);
        }
        a.extend(gpkit::perf_args(&self.perf));
        a
    }
}

/// `magic` of a registered object.
const LIVE: u64 = 0x4c49_5645_4f42_4a31;
/// `magic` of a freed object.
const POISON: u64 = 0xdead_dead_dead_dead;

/// A registered object. All fields are atomics: a reader may read an object
/// while it is being freed (that is the bug we detect), never a data race.
#[derive(Debug)]
struct Obj {
    magic: AtomicU64,
    generation: AtomicU64,
    key: AtomicU64,
    payload: [AtomicU64; 4],
}

/// A pointer to an [`Obj`] that can move between threads.
#[derive(Debug, Clone, Copy)]
struct ObjPtr(*mut Obj);
// SAFETY: an `Obj` is only atomics; who may poison or reuse it is decided by
// the registry protocol (slot ownership, grace periods), not by the pointer.
unsafe impl Send for ObjPtr {}

/// The registry: slots readers walk, and the free list of poisoned objects.
#[derive(Debug)]
struct Registry {
    slots: Box<[CachePadded<AtomicPtr<Obj>>]>,
    free: SegQueue<ObjPtr>,
    allocated: AtomicU64,
}

impl Registry {
    fn new(n: usize) -> Registry {
        Registry {
            slots: (0..n)
                .map(|_| CachePadded::new(AtomicPtr::new(ptr::null_mut())))
                .collect(),
            free: SegQueue::new(),
            allocated: AtomicU64::new(0),
        }
    }

    /// An object to register: a freed one if any, else a new allocation.
    fn obtain(&self, key: u64) -> *mut Obj {
        let p = match self.free.pop() {
            Some(ObjPtr(p)) => p,
            None => {
                // Relaxed: a count read after every thread is joined.
                self.allocated.fetch_add(1, Ordering::Relaxed);
                Box::into_raw(Box::new(Obj {
                    magic: AtomicU64::new(POISON),
                    generation: AtomicU64::new(0),
                    key: AtomicU64::new(0),
                    payload: Default::default(),
                }))
            }
        };
        // SAFETY: `p` came from Box::into_raw and is only freed by `Drop for
        // Registry`, after every thread is joined.
        let o = unsafe { &*p };
        // Relaxed: all three are published by the Release store of the slot
        // (register), which readers load with Acquire.
        o.generation.fetch_add(1, Ordering::Relaxed);
        o.key.store(key, Ordering::Relaxed);
        o.payload[0].store(key.wrapping_mul(31), Ordering::Relaxed);
        o.magic.store(LIVE, Ordering::Relaxed);
        p
    }

    /// Frees an unregistered object: poison it and put it on the free list.
    fn release(&self, p: *mut Obj) {
        // SAFETY: as in `obtain`: the memory lives until the registry drops.
        let o = unsafe { &*p };
        // Release: keeps the poison after this thread's earlier accesses to
        // `o`; pairs with the readers' Acquire loads of `magic` in `walk`.
        o.magic.store(POISON, Ordering::Release);
        self.free.push(ObjPtr(p));
    }

    /// Every object, in a slot or on the free list, counted once.
    fn count_accounted(&self) -> u64 {
        let in_slots = self
            .slots
            .iter()
            // Relaxed: called after every thread is joined and the domain's
            // barrier() returned; both synchronise with the writers.
            .filter(|s| !s.load(Ordering::Relaxed).is_null())
            .count() as u64;
        in_slots + self.free.len() as u64
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for s in self.slots.iter() {
            // Relaxed: `&mut self`, no other thread can touch the slots.
            let p = s.swap(ptr::null_mut(), Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: every thread is joined (the registry is dropped when
                // the last Arc goes, after the domain ran every callback), and
                // each object is in exactly one place: one slot or the list.
                drop(unsafe { Box::from_raw(p) });
            }
        }
        while let Some(ObjPtr(p)) = self.free.pop() {
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// One reader's walk of the registry inside one read section; returns the
/// number of violations found (objects seen freed or reused).
fn walk(reg: &Registry, seen: &mut Vec<(*mut Obj, u64)>) -> (u64, u64) {
    seen.clear();
    let mut violations = 0;
    let mut sum = 0u64;
    for s in reg.slots.iter() {
        // Acquire: pairs with the updater's Release swap that published it.
        let p = s.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: memory of every object stays valid until the registry drops.
        let o = unsafe { &*p };
        let generation = o.generation.load(Ordering::Relaxed);
        // Acquire: pairs with `release`'s Release store of the poison.
        if o.magic.load(Ordering::Acquire) != LIVE {
            violations += 1;
        }
        sum = sum
            .wrapping_add(o.key.load(Ordering::Relaxed))
            .wrapping_add(o.payload[0].load(Ordering::Relaxed));
        seen.push((p, generation));
    }
    // Re-check everything seen, still inside the section: a grace period
    // guarantees none of it was freed (poisoned or reused) meanwhile.
    for &(p, generation) in seen.iter() {
        // SAFETY: as above.
        let o = unsafe { &*p };
        // Acquire: pairs with `release`'s Release store of the poison.
        if o.magic.load(Ordering::Acquire) != LIVE
            || o.generation.load(Ordering::Relaxed) != generation
        {
            violations += 1;
        }
    }
    (violations, sum)
}

/// Runs `herd unregister`.
pub fn run(args: &Args) -> Result<u8> {
    args.validate()?;
    let (code, _) = gpkit::run_scenario(
        "unregister",
        &args.output,
        || {
            let mut r = run_once(args)?;
            let violations = r.metric("violations").unwrap_or(0.0);
            if violations > 0.0 && args.sync != SyncMode::None {
                // The run's own check: exit 4, the result written in full.
                r.checks_failed.push(format!(
                    "{violations} read(s) saw a freed object with --sync {}: the grace period \
                     did not protect the readers (an exitq bug)",
                    args.sync.name()
                ));
            }
            Ok(r)
        },
        render,
    )?;
    Ok(code)
}

/// One operation in this many is timed for the latency histogram: every
/// one when it waits for a grace period (microseconds; two clock reads do
/// not matter), one in 64 when it does not (a clock read costs as much as
/// the operation).
fn sample_every(sync: SyncMode) -> u64 {
    match sync {
        SyncMode::PerOp | SyncMode::Expedited => 1,
        SyncMode::Deferred | SyncMode::None => 64,
    }
}

/// What the updaters did in total.
#[derive(Debug, Default, Clone, Copy, Serialize)]
struct UpdaterTotals {
    ops: u64,
    cpu: CpuTime,
}

fn run_once(args: &Args) -> Result<RunResult> {
    runner::install_interrupt_handler();
    let cpus = gpkit::usable_cpus();
    let nreaders = args.reader_count(cpus.len());
    let mut builder = exitq::Domain::builder();
    if let Some(b) = args.batch_size {
        builder = builder.batch_size(b);
    }
    if let Some(d) = args.first_check_delay {
        builder = builder.first_check_delay(d);
    }
    // Counters first: process-scope counters are inherited only by threads
    // created after they are opened (the reclaimer, readers, updaters).
    let mut session = perf::Session::open(&args.perf, &cpus)?;
    let domain = builder.build();
    let reg = Arc::new(Registry::new(args.objects));
    let mut result = RunResult::new(
        "unregister",
        args.to_args(),
        serde_json::json!({
            "sync": args.sync,
            "updaters": args.updaters,
            "readers": nreaders,
            "objects": args.objects,
            "duration_s": args.duration.as_secs_f64(),
            "batch_size": args.batch_size,
            "first_check_delay_s": args.first_check_delay.map(|d| d.as_secs_f64()),
            "uses_membarrier": domain.uses_membarrier(),
        }),
        gpkit::host_facts(),
    );

    // Fill the registry so readers have something to walk from the start.
    for (i, s) in reg.slots.iter().enumerate() {
        // Release: publishes the object's fields to readers' Acquire loads.
        s.store(reg.obtain(i as u64), Ordering::Release);
    }

    // Readers.
    let violations = Arc::new(AtomicU64::new(0));
    let (d2, r2, v2) = (domain.clone(), Arc::clone(&reg), Arc::clone(&violations));
    let readers = LoadThreads::start("reader", nreaders, move |_, stop| {
        let mut seen = Vec::with_capacity(r2.slots.len());
        let (mut sections, mut bad, mut acc) = (0u64, 0u64, 0u64);
        // At least one section, however late the scheduler runs us: a
        // reader that never read would make the run say nothing.
        loop {
            let g = d2.read();
            let (v, sum) = walk(&r2, &mut seen);
            drop(g);
            bad += v;
            acc = acc.wrapping_add(sum);
            sections += 1;
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        black_box(acc);
        // Relaxed: read after the thread is joined.
        v2.fetch_add(bad, Ordering::Relaxed);
        sections
    })?;

    let s0 = domain.stats();
    let proc0 = CpuTime::process();
    session.enable()?;
    let start = Instant::now();

    // Updaters: updater u owns slots u, u + N, u + 2N, ...
    let nupd = args.updaters;
    let (d3, r3, sync) = (domain.clone(), Arc::clone(&reg), args.sync);
    let op_latency = Arc::new(Mutex::new(gpkit::new_histogram()));
    let lat3 = Arc::clone(&op_latency);
    let every = sample_every(sync);
    let updaters = LoadThreads::start("updater", nupd, move |u, stop| {
        let mine: Vec<usize> = (u..r3.slots.len()).step_by(nupd).collect();
        let mut ops = 0u64;
        let mut next = 0usize;
        let mut hist = gpkit::new_histogram();
        // At least one operation per updater, however late the scheduler
        // runs it after the start (a loaded machine can spend a short
        // --duration on thread start-up): the stop is checked after it.
        loop {
            let timed = ops.is_multiple_of(every);
            let t = if timed { Some(Instant::now()) } else { None };
            let i = mine[next];
            next = if next + 1 == mine.len() { 0 } else { next + 1 };
            let new = r3.obtain(ops);
            // AcqRel: Release publishes `new`'s fields to readers (pairs with
            // `walk`'s Acquire load); Acquire orders our later poisoning of
            // `old` after its registration by whoever stored it.
            let old = r3.slots[i].swap(new, Ordering::AcqRel);
            match sync {
                SyncMode::PerOp => {
                    d3.synchronize();
                    r3.release(old);
                }
                SyncMode::Expedited => {
                    d3.synchronize_expedited();
                    r3.release(old);
                }
                SyncMode::Deferred => {
                    let (r, p) = (Arc::clone(&r3), ObjPtr(old));
                    d3.defer(move || {
                        let p = p;
                        r.release(p.0)
                    });
                }
                SyncMode::None => r3.release(old),
            }
            if let Some(t) = t {
                gpkit::record(&mut hist, t.elapsed());
            }
            ops += 1;
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        // Publish this thread's partial batch before it stops.
        d3.flush();
        let _ = lat3.lock().map(|mut h| h.add(&hist));
        ops
    })?;

    let completed = gpkit::wait_until(start + args.duration);
    let upd_reports = updaters.stop();
    let stopped = start.elapsed();
    // Everything unregistered so far is freed before the clock stops.
    domain.barrier();
    let elapsed = start.elapsed();
    session.disable()?;
    let proc_cpu = CpuTime::process().since(proc0);
    let s1 = domain.stats();
    let rd_reports = readers.stop();
    let report = session.finish()?;

    let upd = upd_reports
        .iter()
        .fold(UpdaterTotals::default(), |a, r| UpdaterTotals {
            ops: a.ops + r.iterations,
            cpu: a.cpu.plus(r.cpu),
        });
    let rd = load::totals(&rd_reports);
    // CPU of neither updaters nor readers: the reclaimer (deferred callbacks,
    // grace periods run for them) and the main thread.
    let other_cpu = proc_cpu.since(upd.cpu).since(rd.cpu);
    let violations = violations.load(Ordering::Relaxed);
    let op_latency = op_latency
        .lock()
        .map(|h| Latency::of(&h))
        .unwrap_or_default();

    // Nothing lost: every object is in exactly one place.
    let allocated = reg.allocated.load(Ordering::Relaxed);
    let accounted = reg.count_accounted();
    if accounted != allocated {
        bail!(
            "{allocated} objects allocated but {accounted} accounted for after barrier(): \
             some deferred frees did not run"
        );
    }

    let gps = s1.grace_periods - s0.grace_periods;
    let secs = elapsed.as_secs_f64();
    let ops = upd.ops;
    result.interrupted = !completed;
    result.push(Metric::higher("ops_per_s", "/s", ops as f64 / secs));
    if ops > 0 {
        result.push(Metric::lower(
            "ns_per_op",
            "ns",
            secs * 1e9 * args.updaters as f64 / ops as f64,
        ));
        let update_cpu = upd.cpu.plus(other_cpu);
        result.push(Metric::lower(
            "update_cpu_ns_per_op",
            "ns",
            update_cpu.total() * 1e9 / ops as f64,
        ));
        result.push(Metric::lower(
            "update_sys_ns_per_op",
            "ns",
            update_cpu.sys_s * 1e9 / ops as f64,
        ));
    }
    if op_latency.count > 0 {
        result.push(Metric::lower("op_p50_ns", "ns", op_latency.p50_ns as f64));
        result.push(Metric::lower("op_p99_ns", "ns", op_latency.p99_ns as f64));
        result.push(Metric::lower("op_max_ns", "ns", op_latency.max_ns as f64));
    }
    result.push(Metric::info("ops", "ops", ops as f64));
    result.push(Metric::info("grace_periods", "GPs", gps as f64));
    result.push(Metric::info("grace_periods_per_s", "/s", gps as f64 / secs));
    result.push(Metric::info(
        "expedited",
        "GPs",
        (s1.expedited - s0.expedited) as f64,
    ));
    if gps > 0 {
        result.push(Metric::info(
            "frees_per_gp",
            "frees",
            ops as f64 / gps as f64,
        ));
    }
    let cbs = s1.callbacks_run - s0.callbacks_run;
    if args.sync == SyncMode::Deferred {
        result.push(Metric::info("callbacks_run", "callbacks", cbs as f64));
        result.push(Metric::info("max_batch", "callbacks", s1.max_batch as f64));
        if cbs != ops {
            bail!("{ops} frees deferred but {cbs} callbacks ran: callbacks lost or run twice");
        }
    }
    result.push(Metric::higher(
        "reader_sections_per_s",
        "/s",
        rd.iterations as f64 / stopped.as_secs_f64(),
    ));
    result.push(Metric::lower("violations", "reads", violations as f64));
    result.push(Metric::lower("user_s", "s", proc_cpu.user_s));
    result.push(Metric::lower("sys_s", "s", proc_cpu.sys_s));
    result.push(Metric::info(
        "objects_allocated",
        "objects",
        allocated as f64,
    ));
    for m in report.metrics(0) {
        result.push(m);
    }
    result.warnings.extend(report.notes());
    if args.sync == SyncMode::None && violations == 0 {
        result.warnings.push(
            "--sync none found no violation this time: the readers never caught a free \
             (try a longer --duration or more --objects)"
                .into(),
        );
    }
    result.perf = report.to_json();
    result.details = serde_json::json!({
        "elapsed_s": secs,
        "op_latency": op_latency,
        "op_latency_sampled_every": sample_every(args.sync),
        "updaters_stopped_s": stopped.as_secs_f64(),
        "process_cpu": proc_cpu,
        "updater_cpu": upd.cpu,
        "reader_cpu": rd.cpu,
        "other_cpu": other_cpu,
        "updaters": upd_reports,
        "readers": rd_reports,
        "reader_sections": rd.iterations,
        "domain": stats_delta(&s0, &s1),
    });
    drop(domain);
    Ok(result)
}

fn stats_delta(a: &exitq::DomainStats, b: &exitq::DomainStats) -> serde_json::Value {
    serde_json::json!({
        "grace_periods": b.grace_periods - a.grace_periods,
        "expedited": b.expedited - a.expedited,
        "synchronize_calls": b.synchronize_calls - a.synchronize_calls,
        "callbacks_run": b.callbacks_run - a.callbacks_run,
        "callbacks_panicked": b.callbacks_panicked - a.callbacks_panicked,
        "batches": b.batches - a.batches,
        "passes": b.passes - a.passes,
        "stolen_batches": b.stolen_batches - a.stolen_batches,
        "backlog_waits": b.backlog_waits - a.backlog_waits,
        "stalls": b.stalls - a.stalls,
        "max_batch": b.max_batch,
        "pending_after_barrier": b.pending,
    })
}

fn render(r: &RunResult) -> String {
    let m = |n: &str| r.metric(n).unwrap_or(0.0);
    let c = &r.config;
    let d = &r.details;
    let cpu = |k: &str| {
        let v = &d[k];
        format!(
            "user {}s sys {}s",
            fmt_value(v["user_s"].as_f64().unwrap_or(0.0)),
            fmt_value(v["sys_s"].as_f64().unwrap_or(0.0))
        )
    };
    let mut s = format!(
        "\nunregister --sync {}: {} updater(s), {} reader(s), {} objects, {:.2}s{}\n",
        c["sync"].as_str().unwrap_or("?"),
        c["updaters"],
        c["readers"],
        c["objects"],
        d["elapsed_s"].as_f64().unwrap_or(0.0),
        if r.interrupted { " (interrupted)" } else { "" }
    );
    s += &format!(
        "  ops {}  {}  {} per op per updater\n",
        fmt_value(m("ops")),
        fmt_rate(m("ops_per_s")),
        fmt_ns(m("ns_per_op"))
    );
    let lat = &d["op_latency"];
    let l = |k: &str| fmt_ns(lat[k].as_f64().unwrap_or(0.0));
    s += &format!(
        "  op latency p50 {}  p99 {}  max {} ({})\n",
        l("p50_ns"),
        l("p99_ns"),
        l("max_ns"),
        match d["op_latency_sampled_every"].as_u64() {
            Some(1) => "every op timed".to_string(),
            Some(n) => format!("one op in {n} timed"),
            None => "not timed".to_string(),
        }
    );
    s += &format!(
        "  grace periods {} ({}, {} expedited), {} frees per grace period\n",
        fmt_value(m("grace_periods")),
        fmt_rate(m("grace_periods_per_s")),
        fmt_value(m("expedited")),
        fmt_value(r.metric("frees_per_gp").unwrap_or(0.0))
    );
    s += &format!(
        "  update-side CPU {} per op ({} in the kernel)\n",
        fmt_ns(m("update_cpu_ns_per_op")),
        fmt_ns(m("update_sys_ns_per_op"))
    );
    s += &format!(
        "  CPU: process {}; updaters {}; readers {}; reclaimer+main {}\n",
        cpu("process_cpu"),
        cpu("updater_cpu"),
        cpu("reader_cpu"),
        cpu("other_cpu")
    );
    s += &format!(
        "  readers {} sections; use-after-free violations: {}\n",
        fmt_rate(m("reader_sections_per_s")),
        fmt_value(m("violations"))
    );
    s
}
