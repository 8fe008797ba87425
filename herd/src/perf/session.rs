//! A [`Session`]: the counters of one measured phase, from open to the
//! [`Report`].
//!
//! Opening goes in phases, each a function below: the contention drain
//! thread first (it must not inherit the counters), then the event catalog
//! through the counting method ([`super::method::attach`]), then the
//! contention sampler on the same target, then the `--require-perf` check.
//! Nothing here stops a run for a counter that cannot be opened unless
//! `--require-perf` asked for it.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::budget::FdBudget;
use super::cgroup::CgroupScope;
use super::closer;
use super::contention;
use super::events;
use super::group::CounterSet;
use super::kallsyms::Symbols;
use super::lock_sample::Layout;
use super::method::{self, Attached, Method};
use super::report::{note_for, CounterReading, Report};
use super::sampler::{self, ContentionSampler, Drain};
use super::sys::{Kernel, RealKernel, Unavailable};
use super::{PerfArgs, Scope};

/// Counters opened for one measured phase.
#[derive(Debug)]
pub struct Session {
    args: PerfArgs,
    cpus: Vec<usize>,
    targets: usize,
    open: CounterSet,
    unavailable: Vec<(events::EventSpec, Unavailable)>,
    sampler: Option<ContentionSampler>,
    contention_unavailable: Option<Unavailable>,
    syms: Arc<Symbols>,
    enabled_at: Option<Instant>,
    enabled_s: f64,
    method: Method,
    method_fallback: Option<Unavailable>,
    budget: FdBudget,
    helpers_excluded: usize,
    helpers_counted: Option<String>,
    /// Time to open every counter and the sampler, µs.
    open_us: u64,
    /// Time spent enabling, and disabling, the counters (every call), µs.
    enable_us: u64,
    disable_us: u64,
    /// Declared last: dropped after the counters, it moves the process back.
    cgroup: Option<CgroupScope>,
}

/// The contention profile's parts made before any counter is opened.
struct ContentionSetup {
    drain: Drain,
    layout: Layout,
}

impl Session {
    /// Opens every counter `args` asks for on `cpus` (system scope) or this
    /// process. Counters that cannot be opened are recorded as unavailable;
    /// with `--require-perf` that is an error instead.
    pub fn open(args: &PerfArgs, cpus: &[usize]) -> Result<Session> {
        Session::open_with(args, cpus, &RealKernel)
    }

    /// [`Session::open`] against any [`Kernel`] (tests fake failures here).
    pub fn open_with(args: &PerfArgs, cpus: &[usize], kernel: &dyn Kernel) -> Result<Session> {
        let mut s = Session::closed(args, cpus);
        if args.no_perf {
            return Ok(s);
        }
        // Before any counter: no closer of an earlier run closes while we
        // open (see closer.rs).
        closer::hold_session_lock();
        let t0 = Instant::now();
        s.budget = s.fd_budget().ensure();
        // A run that would lose counters to EMFILE is refused (exit 3).
        if let Some(why) = s.budget.refusal(kernel.is_root()) {
            return Err(crate::error::resource("", why));
        }
        let contention = s.prepare_contention(kernel)?;
        let attached = method::attach(kernel, args.perf_scope, &s.cpus, &s.budget);
        if let Some(c) = contention {
            s.open_sampler(kernel, c, &attached);
        }
        s.keep(attached);
        // --per-node sums per-CPU values: per-thread counters have none.
        if args.per_node && s.method == Method::Inherit {
            let why = s
                .method_fallback
                .as_ref()
                .map_or(String::new(), |u| format!(" ({})", u.reason));
            return Err(crate::error::usage(
                "--per-node",
                format!(
                    "needs per-CPU counters, and process scope fell back to per-thread \
                     inherited counters{why}, which have no CPU; --perf-scope system counts \
                     per CPU"
                ),
            ));
        }
        s.open_us = t0.elapsed().as_micros() as u64;
        s.check_required()?;
        Ok(s)
    }

    /// A session with nothing open (yet).
    fn closed(args: &PerfArgs, cpus: &[usize]) -> Session {
        Session {
            args: args.clone(),
            cpus: if cpus.is_empty() {
                crate::host::online_cpus()
            } else {
                cpus.to_vec()
            },
            targets: 0,
            open: CounterSet::default(),
            unavailable: Vec::new(),
            sampler: None,
            contention_unavailable: None,
            syms: Arc::new(Symbols::default()),
            enabled_at: None,
            enabled_s: 0.0,
            method: Method::None,
            method_fallback: None,
            budget: FdBudget::default(),
            helpers_excluded: 0,
            helpers_counted: None,
            open_us: 0,
            enable_us: 0,
            disable_us: 0,
            cgroup: None,
        }
    }

    /// The descriptors this session will open (before opening any): every
    /// event on every CPU it counts on (or on every thread, for inherited
    /// counters), and with `--contention` two sampling events per CPU.
    fn fd_budget(&self) -> FdBudget {
        let online = crate::host::online_cpus().len() as u64;
        let cpus = match self.args.perf_scope {
            Scope::System => self.cpus.len() as u64,
            Scope::Process => online,
        };
        let threads = crate::host::own_threads().len() as u64;
        let per_event = match self.args.perf_scope {
            Scope::System => cpus,
            Scope::Process => cpus.max(threads),
        };
        let sampling = if self.args.contention { 2 * cpus } else { 0 };
        FdBudget::plan(
            events::catalog(self.args.perf_scope).len() as u64,
            per_event,
            sampling,
            super::budget::open_now(),
        )
    }

    /// `--contention`: symbols, the tracepoints' layout and the drain
    /// thread, which must exist before any counter is opened so that it
    /// does not inherit them (see sampler.rs).
    fn prepare_contention(&mut self, kernel: &dyn Kernel) -> Result<Option<ContentionSetup>> {
        if !self.args.contention {
            return Ok(None);
        }
        self.syms = Arc::new(Symbols::load());
        match contention_layout(kernel) {
            Ok(layout) => Ok(Some(ContentionSetup {
                drain: Drain::spawn(self.syms.clone())?,
                layout,
            })),
            Err(u) => {
                self.contention_unavailable = Some(u);
                Ok(None)
            }
        }
    }

    /// Opens the contention sampler on what the counters watch.
    fn open_sampler(&mut self, kernel: &dyn Kernel, c: ContentionSetup, attached: &Attached) {
        // Process scope: our threads may run on any online CPU.
        let online = crate::host::online_cpus();
        let sample_cpus = if attached.method == Method::PerCpu {
            &self.cpus
        } else {
            &online
        };
        let callchain = !self.syms.is_empty();
        match ContentionSampler::open(
            kernel,
            c.drain,
            c.layout,
            sample_cpus,
            attached.target(),
            callchain,
        ) {
            Ok(sampler) => self.sampler = Some(sampler),
            Err(u) => self.contention_unavailable = Some(u),
        }
    }

    /// Takes over what [`method::attach`] opened.
    fn keep(&mut self, a: Attached) {
        self.method = a.method;
        self.method_fallback = a.fallback;
        self.targets = a.pids.len();
        self.helpers_excluded = a.helpers_excluded;
        self.helpers_counted = a.helpers_counted;
        self.open = a.open;
        self.unavailable = a.unavailable;
        self.cgroup = a.cgroup;
    }

    /// `--require-perf`: any counter that could have been opened but was
    /// not is an error (events the machine does not have never are).
    fn check_required(&self) -> Result<()> {
        if !self.args.require_perf {
            return Ok(());
        }
        let mut fatal: Vec<String> = self
            .unavailable
            .iter()
            .filter(|(spec, u)| !(u.absent && spec.optional))
            .map(|(spec, u)| note_for(spec.event, u))
            .collect();
        if let Some(u) = &self.contention_unavailable {
            fatal.push(note_for("contention profile", u));
        }
        if !fatal.is_empty() {
            // A resource refusal before the run (exit 3).
            return Err(crate::error::resource(
                "--require-perf",
                format!(
                    "{} counter(s) unavailable:\n  {}",
                    fatal.len(),
                    fatal.join("\n  ")
                ),
            ));
        }
        Ok(())
    }

    /// Starts (or resumes) counting. `enable`/`disable` may alternate any
    /// number of times: counts accumulate over the enabled periods only
    /// (counters are created disabled, at zero).
    pub fn enable(&mut self) -> Result<()> {
        if self.enabled_at.is_some() {
            return Ok(());
        }
        let t0 = Instant::now();
        // One ioctl per CPU group, one per ungrouped counter (group.rs).
        self.open.enable()?;
        if let Some(sm) = &self.sampler {
            sm.enable()
                .context("perf: cannot enable contention sampling")?;
        }
        let now = Instant::now();
        self.enable_us += (now - t0).as_micros() as u64;
        self.enabled_at = Some(now);
        Ok(())
    }

    /// Stops (pauses) counting; a second call is a no-op.
    pub fn disable(&mut self) -> Result<()> {
        if self.enabled_at.is_none() {
            return Ok(());
        }
        let t0 = Instant::now();
        if let Some(sm) = &self.sampler {
            sm.disable()
                .context("perf: cannot disable contention sampling")?;
        }
        self.open.disable()?;
        self.disable_us += t0.elapsed().as_micros() as u64;
        if let Some(t) = self.enabled_at.take() {
            self.enabled_s += t.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// True when at least one counter is open.
    pub fn is_counting(&self) -> bool {
        !self.open.is_empty() || self.sampler.is_some()
    }

    /// Reads every counter and the contention samples.
    pub fn finish(mut self) -> Result<Report> {
        if self.enabled_at.is_some() {
            self.disable()?;
        }
        let t_read = Instant::now();
        // One read() per CPU group, one per ungrouped counter (group.rs).
        let readings = self.open.read()?;
        let read_us = t_read.elapsed().as_micros() as u64;
        let groups = self.open.groups.len();
        let mut counters: Vec<CounterReading> = self
            .open
            .events
            .iter()
            .zip(&readings.samples)
            .map(|(p, samples)| CounterReading::counted(&p.spec, samples, &p.cpus))
            .collect();
        for (spec, u) in &self.unavailable {
            counters.push(CounterReading::unavailable(spec, u));
        }
        // Display order is the catalog's.
        let order = events::catalog(self.args.perf_scope);
        counters.sort_by_key(|c| order.iter().position(|e| e.metric == c.metric));
        let nodes = crate::host::numa::NodeMap::read();
        super::report::fill_per_node(&mut counters, &nodes);

        let mut fds = Vec::new();
        let contention = self.sampler.take().map(|sm| {
            let rings = sm.rings;
            let (mut collected, redirected) = sm.finish();
            fds.extend(redirected);
            let mut r = contention::analyse(&mut collected.events, &self.syms);
            r.lost = collected.lost;
            r.dropped = collected.dropped;
            r.buffer_growths = collected.growths;
            r.ring_buffers = rings;
            r.ring_kib = sampler::RING_BYTES >> 10;
            r
        });
        self.close(fds);
        Ok(Report {
            enabled: !self.args.no_perf,
            scope: self.args.perf_scope,
            cpus: if self.args.perf_scope == Scope::System {
                self.cpus.clone()
            } else {
                Vec::new()
            },
            threads_at_open: self.targets,
            method: self.method,
            method_fallback: self.method_fallback.clone(),
            counted_s: self.enabled_s,
            counters,
            contention_requested: self.args.contention,
            contention,
            contention_unavailable: self.contention_unavailable.clone(),
            no_aggregate: self.args.no_aggregate,
            per_node: self.args.per_node,
            nodes: nodes.nodes().to_vec(),
            fd_budget: Some(self.budget.clone()),
            open_us: self.open_us,
            enable_us: self.enable_us,
            disable_us: self.disable_us,
            read_us,
            reads: readings.reads,
            groups,
            helpers_excluded: self.helpers_excluded,
            helpers_counted: self.helpers_counted.clone(),
            allow_lost_samples: self.args.allow_lost_samples,
        })
    }
}

impl Session {
    /// Closes every counter (and `more` descriptors), through a closer
    /// process where [`closer::plan`] says so, which then also removes
    /// the cgroup (see closer.rs: the last close of a tracepoint waits
    /// for a grace period).
    fn close(&mut self, mut more: Vec<OwnedFd>) {
        // Group members before their leaders (group.rs).
        more.extend(std::mem::take(&mut self.open).into_fds());
        let cgroup = self.cgroup.take();
        if closer::plan() != closer::Plan::Deferred {
            drop(more);
            drop(cgroup);
            return;
        }
        let leftover = cgroup.as_ref().map(|cg| closer::CgroupLeftover {
            dirs: cg.dirs(),
            back: cg.original.clone(),
        });
        if closer::hand_off(more, leftover.as_ref()) {
            if let Some(cg) = cgroup {
                cg.leave_to_closer();
            }
        }
    }
}

/// Reads both contention tracepoints' ids and formats.
fn contention_layout(kernel: &dyn Kernel) -> Result<Layout, Unavailable> {
    let (bs, bn) = events::CONTENTION_BEGIN;
    let (es, en) = events::CONTENTION_END;
    let begin_id = kernel.tracepoint_id(bs, bn)?;
    let end_id = kernel.tracepoint_id(es, en)?;
    let begin_fmt = kernel.tracepoint_file(bs, bn, "format")?;
    let end_fmt = kernel.tracepoint_file(es, en, "format")?;
    Layout::new(begin_id, &begin_fmt, end_id, &end_fmt).map_err(|m| Unavailable::fixable(m, ""))
}
