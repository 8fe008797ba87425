//! One run of `herd unregister`: set-up (counters, the domain, a filled
//! registry, the readers), the measured phase (the updaters until the
//! deadline, then `barrier()` so deferred frees are inside the clock), and
//! tear-down. What it saw is a [`Measured`]; `report.rs` turns that into a
//! result.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use hdrhistogram::Histogram;

use super::registry::{walk, ObjPtr, Registry};
use super::{sample_every, Args, SyncMode};
use crate::perf;
use crate::runner;
use crate::scenario::gpkit::{self, CpuTime, Latency};
use crate::scenario::load::{LoadReport, LoadThreads};

/// Everything one run measured.
pub(super) struct Measured {
    /// Reader threads run.
    pub(super) readers: usize,
    /// The domain used membarrier(2) for its expedited grace periods.
    pub(super) uses_membarrier: bool,
    /// The deadline passed (not interrupted by Ctrl-C).
    pub(super) completed: bool,
    /// From the start until the updaters stopped.
    pub(super) stopped: Duration,
    /// From the start until `barrier()` returned: the measured phase.
    pub(super) elapsed: Duration,
    /// CPU time of the whole process over the measured phase.
    pub(super) proc_cpu: CpuTime,
    /// Domain statistics before and after the measured phase.
    pub(super) s0: exitq::DomainStats,
    pub(super) s1: exitq::DomainStats,
    /// Per updater and per reader thread.
    pub(super) updaters: Vec<LoadReport>,
    pub(super) readers_run: Vec<LoadReport>,
    /// Reads that saw a freed object.
    pub(super) violations: u64,
    /// Operation latency (sampled, `sample_every`).
    pub(super) op_latency: Latency,
    /// Objects ever allocated (all accounted for at the end).
    pub(super) allocated: u64,
    /// The perf counters.
    pub(super) perf: perf::Report,
}

/// Runs the scenario once.
pub(super) fn run_once(args: &Args) -> Result<Measured> {
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
    // Fill the registry so readers have something to walk from the start.
    for (i, s) in reg.slots.iter().enumerate() {
        // Release: publishes the object's fields to readers' Acquire loads.
        s.store(reg.obtain(i as u64), Ordering::Release);
    }
    let violations = Arc::new(AtomicU64::new(0));
    let readers = start_readers(&domain, &reg, nreaders, &violations)?;

    let s0 = domain.stats();
    let proc0 = CpuTime::process();
    session.enable()?;
    let start = Instant::now();
    let op_latency = Arc::new(Mutex::new(gpkit::new_histogram()));
    let updaters = start_updaters(args, &domain, &reg, &op_latency)?;
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
    let perf = session.finish()?;

    // Nothing lost: every object is in exactly one place.
    let allocated = reg.allocated.load(Ordering::Relaxed);
    let accounted = reg.count_accounted();
    if accounted != allocated {
        bail!(
            "{allocated} objects allocated but {accounted} accounted for after barrier(): \
             some deferred frees did not run"
        );
    }
    let op_latency = op_latency
        .lock()
        .map(|h| Latency::of(&h))
        .unwrap_or_default();
    Ok(Measured {
        readers: nreaders,
        uses_membarrier: domain.uses_membarrier(),
        completed,
        stopped,
        elapsed,
        proc_cpu,
        s0,
        s1,
        updaters: upd_reports,
        readers_run: rd_reports,
        // Relaxed: every reader has been joined.
        violations: violations.load(Ordering::Relaxed),
        op_latency,
        allocated,
        perf,
    })
}

/// Starts the readers: each walks the whole registry inside read sections
/// until stopped, and adds the violations it saw to `violations`.
fn start_readers(
    domain: &exitq::Domain,
    reg: &Arc<Registry>,
    n: usize,
    violations: &Arc<AtomicU64>,
) -> Result<LoadThreads> {
    let (d2, r2, v2) = (domain.clone(), Arc::clone(reg), Arc::clone(violations));
    LoadThreads::start("reader", n, move |_, stop| {
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
    })
}

/// Starts the updaters: updater `u` owns slots `u, u + N, u + 2N, ...` and
/// replaces them round-robin, paying for each grace period as `--sync`
/// says, until stopped.
fn start_updaters(
    args: &Args,
    domain: &exitq::Domain,
    reg: &Arc<Registry>,
    op_latency: &Arc<Mutex<Histogram<u64>>>,
) -> Result<LoadThreads> {
    let nupd = args.updaters;
    let (d3, r3, sync) = (domain.clone(), Arc::clone(reg), args.sync);
    let lat3 = Arc::clone(op_latency);
    let every = sample_every(sync);
    LoadThreads::start("updater", nupd, move |u, stop| {
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
            unregister_one(&d3, &r3, i, ops, sync);
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
    })
}

/// One operation: register a new object in slot `i` and unregister the one
/// it replaces, freeing it after a grace period paid as `sync` says.
fn unregister_one(d: &exitq::Domain, reg: &Arc<Registry>, i: usize, key: u64, sync: SyncMode) {
    let new = reg.obtain(key);
    // AcqRel: Release publishes `new`'s fields to readers (pairs with
    // `walk`'s Acquire load); Acquire orders our later poisoning of `old`
    // after its registration by whoever stored it.
    let old = reg.slots[i].swap(new, Ordering::AcqRel);
    match sync {
        SyncMode::PerOp => {
            d.synchronize();
            reg.release(old);
        }
        SyncMode::Expedited => {
            d.synchronize_expedited();
            reg.release(old);
        }
        SyncMode::Deferred => {
            let (r, p) = (Arc::clone(reg), ObjPtr(old));
            d.defer(move || {
                let p = p;
                r.release(p.0)
            });
        }
        SyncMode::None => reg.release(old),
    }
}
