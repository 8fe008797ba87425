//! perf counters around exactly the measured phase of a scenario.
//!
//! ```ignore
//! let mut s = perf::Session::open(&args.perf, &cpus)?;   // never fails for an
//! s.enable()?;                                            // unavailable counter
//! /* measured phase */                                    // unless --require-perf
//! s.disable()?;
//! let report = s.finish()?;
//! result.perf = report.to_json();
//! for m in report.metrics(threads_exited) { result.push(m) }
//! for line in report.notes() { eprintln!("{line}") }      // unavailable counters: reason + fix
//! if let Some(t) = report.contention_table() { println!("{t}") }
//! ```
//!
//! # What is counted
//! The event set is [`events::catalog`]: the futex syscalls (old and, where
//! the kernel has them, the futex2 ones), `lock:contention_begin`, thread
//! exits (`sched:sched_process_exit`, which fires once per thread) and
//! creations (`task:task_newtask`), context switches, migrations, page
//! faults, task-clock, and hardware cycles/instructions where a PMU exists.
//! Tracepoint ids come from tracefs (see [`sys::Kernel::tracepoint_id`]);
//! every counter includes kernel events (perf-event2 excludes them by
//! default, which would make every tracepoint read 0).
//!
//! # Scopes
//! * [`Scope::Process`]: every thread of this process. Preferred method
//!   ([`Method::Cgroup`]): the process moves into a cgroup of its own
//!   ([`sys::CgroupScope`]) and each event gets one counter per online CPU
//!   on that cgroup, which costs nothing per thread. Fallback
//!   ([`Method::Inherit`], with a note): one counter per event per thread
//!   at `open` time, `inherit`ed by every thread those create afterwards;
//!   so open the session *before* the scenario creates its threads (the
//!   contract above does). That is what `perf stat <cmd>` does, and for a
//!   thread storm it is expensive: the kernel copies every counter into
//!   each new thread and folds it back at exit under the parent counter's
//!   mutex (+137% system time measured on a storm, against +9% or less
//!   for the cgroup counters; docs/results-herd.md).
//! * [`Scope::System`]: one counter per event per CPU of the run's CPU list
//!   (`pid = -1`), so kernel work done for us by other tasks (kworkers,
//!   RCU callbacks) counts too, and so does everything else running there.
//!
//! Per-thread inherited counters miss every thread exit on kernels whose
//! `do_exit()` detaches them before `sched_process_exit` fires (stable
//! backports of "perf: Fix sample vs do_exit()", e.g. Debian's 6.1); a
//! probe at open finds out, and `task_exits` is then reported unavailable
//! with the reason, never as 0 (see `inherited_exits_counted`).
//!
//! Counters are independent (not a perf group): `inherit` and group reads
//! do not mix on many kernels, and software/tracepoint events never
//! multiplex anyway. Each counter reports `time_enabled`/`time_running`;
//! when a hardware counter was multiplexed (running < enabled) its value is
//! scaled as `perf stat` does and a note says by how much.
//!
//! # Per-CPU values
//! Every counter that is one descriptor per CPU (system scope, and process
//! scope through the cgroup) keeps each CPU's value, scaled for
//! multiplexing on its own; the totals are their sums. The table shows a
//! summary over the CPUs, `--no-aggregate` (`-A`) every CPU; see
//! [`percpu`].
//!
//! # When a counter cannot be opened
//! The run goes on; the counter is reported unavailable with the reason and
//! the fix ([`sys::explain_open_error`]), and its metrics are left out
//! (never written as 0). `--require-perf` turns that into an error, except
//! for events the machine does not have at all (hardware counters in a VM
//! without a PMU, futex2 tracepoints on kernels before 6.7).

pub mod contention;
pub mod events;
pub mod kallsyms;
pub mod percpu;
pub mod sampler;
pub mod sys;

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use perf_event::events::Tracepoint;
use perf_event::{Builder, Counter};
use serde::{Deserialize, Serialize};

use crate::result::Metric;
use contention::{ContentionReport, Layout};
use events::{EventSpec, Source};
use kallsyms::Symbols;
use sampler::{ContentionSampler, Drain};
use sys::{CgroupScope, Kernel, RealKernel, Target, Unavailable};

/// Which tasks the counters follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This process and every thread it creates (inherited counters).
    #[default]
    Process,
    /// One counter per CPU, any task: includes kernel work done for us elsewhere.
    System,
}

/// perf flags shared by every scenario (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
pub struct PerfArgs {
    /// Counter scope: this process (inherited by its threads) or every CPU.
    #[arg(long, value_enum, default_value_t = Scope::Process)]
    pub perf_scope: Scope,
    /// Open no perf counters at all.
    #[arg(long, conflicts_with_all = ["require_perf", "contention", "no_aggregate"])]
    pub no_perf: bool,
    /// Fail (exit 1) when any counter cannot be opened, instead of reporting it unavailable.
    #[arg(long)]
    pub require_perf: bool,
    /// Sample lock:contention_begin/end and report a per-lock contention profile.
    #[arg(long)]
    pub contention: bool,
    /// Table output: every CPU's counter values, one row per CPU (as `perf
    /// stat -A`), instead of the per-counter summary over CPUs. The JSON
    /// always has every CPU (`perf.counters[].per_cpu`).
    #[arg(short = 'A', long)]
    #[serde(default)]
    pub no_aggregate: bool,
}

/// One event's open file descriptors (one per thread or per CPU).
#[derive(Debug)]
struct Open {
    spec: EventSpec,
    counters: Vec<Counter>,
    /// The CPU of each counter; empty for per-thread (inherited) counters.
    cpus: Vec<usize>,
}

/// Counters opened for one measured phase.
#[derive(Debug)]
pub struct Session {
    args: PerfArgs,
    cpus: Vec<usize>,
    targets: usize,
    open: Vec<Open>,
    unavailable: Vec<(EventSpec, Unavailable)>,
    sampler: Option<ContentionSampler>,
    contention_unavailable: Option<Unavailable>,
    syms: Arc<Symbols>,
    enabled_at: Option<Instant>,
    enabled_s: f64,
    method: Method,
    method_fallback: Option<Unavailable>,
    /// Declared last: dropped after the counters, it moves the process back.
    cgroup: Option<CgroupScope>,
}

/// How the counters are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Nothing opened (`--no-perf`).
    #[default]
    None,
    /// Process scope: per-CPU counters on the process's own cgroup.
    Cgroup,
    /// Process scope: per-thread counters inherited by new threads.
    Inherit,
    /// System scope: per-CPU counters on any task.
    PerCpu,
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
        let cpus: Vec<usize> = if cpus.is_empty() {
            sys::online_cpus()
        } else {
            cpus.to_vec()
        };
        let mut s = Session {
            args: args.clone(),
            cpus,
            targets: 0,
            open: Vec::new(),
            unavailable: Vec::new(),
            sampler: None,
            contention_unavailable: None,
            syms: Arc::new(Symbols::default()),
            enabled_at: None,
            enabled_s: 0.0,
            method: Method::None,
            method_fallback: None,
            cgroup: None,
        };
        if args.no_perf {
            return Ok(s);
        }
        raise_fd_limit();
        let system = args.perf_scope == Scope::System;

        // The drain thread must exist before any counter is opened, so
        // that it does not inherit them (see sampler.rs).
        let mut drain = None;
        let mut layout = None;
        if args.contention {
            s.syms = Arc::new(Symbols::load());
            match contention_layout(kernel) {
                Ok(l) => {
                    layout = Some(l);
                    drain = Some(Drain::spawn(s.syms.clone())?);
                }
                Err(u) => s.contention_unavailable = Some(u),
            }
        }
        let drain_tid = drain.as_ref().map(Drain::tid);

        // Who is watched. Process scope: this process's own cgroup, one
        // counter per CPU (cheap), or else every thread of ours (but the
        // drain thread) with inherited counters (a cost per thread
        // creation and exit). System scope: any task on the run's CPUs.
        let pids: Vec<i32> = {
            let mut t = sys::own_threads();
            t.retain(|&tid| Some(tid) != drain_tid);
            if t.is_empty() {
                t.push(sys::gettid());
            }
            t
        };
        let online = sys::online_cpus();
        if !system {
            match kernel.process_cgroup() {
                Ok(cg) => {
                    let (open, unavailable) =
                        open_all(kernel, args.perf_scope, Target::Cgroup(&cg.file), &online);
                    // A cgroup counter is a per-CPU counter: where those are
                    // not permitted (paranoid 1), inherited ones may still be.
                    // A required event the machine has but the cgroup cannot
                    // count (ENOENT: no perf_event state in the cgroup) falls
                    // back too, rather than leaving the run without counters.
                    if let Some(u) = cgroup_failure(&cg.mount, &cg.dir, &unavailable) {
                        s.method_fallback = Some(u);
                        drop(open);
                        drop(cg);
                    } else {
                        s.open = open;
                        s.unavailable = unavailable;
                        s.method = Method::Cgroup;
                        s.cgroup = Some(cg);
                    }
                }
                Err(u) => s.method_fallback = Some(u),
            }
        }
        let target = match (&s.cgroup, system) {
            (_, true) => Target::AnyTask,
            (Some(cg), false) => Target::Cgroup(&cg.file),
            (None, false) => Target::Threads(&pids),
        };
        if system {
            s.method = Method::PerCpu;
            let (open, unavailable) = open_all(kernel, args.perf_scope, target, &s.cpus);
            s.open = open;
            s.unavailable = unavailable;
        } else if s.cgroup.is_none() {
            s.method = Method::Inherit;
            s.targets = pids.len();
            // Before the counters: the probe's own thread must not count.
            let exits_counted = inherited_exits_counted(kernel);
            let (mut open, mut unavailable) = open_all(kernel, args.perf_scope, target, &online);
            if exits_counted == Some(false) {
                if let Some(i) = open.iter().position(|o| o.spec.metric == EXITS_METRIC) {
                    let o = open.remove(i);
                    unavailable.push((o.spec, inherited_exits_missed()));
                }
            }
            s.open = open;
            s.unavailable = unavailable;
        }

        if let (Some(drain), Some(layout)) = (drain, layout) {
            // Process scope: our threads may run on any online CPU.
            let sample_cpus = if system { &s.cpus } else { &online };
            let callchain = !s.syms.is_empty();
            match ContentionSampler::open(kernel, drain, layout, sample_cpus, target, callchain) {
                Ok(sampler) => s.sampler = Some(sampler),
                Err(u) => s.contention_unavailable = Some(u),
            }
        }

        if args.require_perf {
            let mut fatal: Vec<String> = s
                .unavailable
                .iter()
                .filter(|(spec, u)| !(u.absent && spec.optional))
                .map(|(spec, u)| note_for(spec.event, u))
                .collect();
            if let Some(u) = &s.contention_unavailable {
                fatal.push(note_for("contention profile", u));
            }
            if !fatal.is_empty() {
                bail!(
                    "--require-perf: {} counter(s) unavailable:\n  {}",
                    fatal.len(),
                    fatal.join("\n  ")
                );
            }
        }
        Ok(s)
    }

    /// Starts (or resumes) counting. `enable`/`disable` may alternate any
    /// number of times: counts accumulate over the enabled periods only
    /// (counters are created disabled, at zero).
    pub fn enable(&mut self) -> Result<()> {
        if self.enabled_at.is_some() {
            return Ok(());
        }
        for o in &mut self.open {
            for c in &mut o.counters {
                c.enable()
                    .with_context(|| format!("perf: cannot enable {}", o.spec.event))?;
            }
        }
        if let Some(sm) = &self.sampler {
            sm.enable()
                .context("perf: cannot enable contention sampling")?;
        }
        self.enabled_at = Some(Instant::now());
        Ok(())
    }

    /// Stops (pauses) counting; a second call is a no-op.
    pub fn disable(&mut self) -> Result<()> {
        if self.enabled_at.is_none() {
            return Ok(());
        }
        if let Some(sm) = &self.sampler {
            sm.disable()
                .context("perf: cannot disable contention sampling")?;
        }
        for o in &mut self.open {
            for c in &mut o.counters {
                c.disable()
                    .with_context(|| format!("perf: cannot disable {}", o.spec.event))?;
            }
        }
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
        let mut counters = Vec::new();
        for o in &mut self.open {
            let mut samples = Vec::with_capacity(o.counters.len());
            for c in &mut o.counters {
                let d = c
                    .read_full()
                    .with_context(|| format!("perf: cannot read {}", o.spec.event))?;
                samples.push(percpu::Sample {
                    count: d.count(),
                    enabled_ns: d.time_enabled().map_or(0, |t| t.as_nanos() as u64),
                    running_ns: d.time_running().map_or(0, |t| t.as_nanos() as u64),
                });
            }
            // perf stat's scaling, per descriptor (per CPU): a counter that
            // ran part of the time is extrapolated to its enabled time; the
            // total is the sum, so the per-CPU values add up to it.
            let a = percpu::aggregate(&samples, &o.cpus, o.spec.scale);
            counters.push(CounterReading {
                metric: o.spec.metric.into(),
                event: o.spec.event.into(),
                unit: o.spec.unit.into(),
                raw: Some(a.raw),
                value: Some(a.value),
                time_enabled_ns: a.enabled_ns,
                time_running_ns: a.running_ns,
                fds: o.counters.len(),
                optional: o.spec.optional,
                unavailable: None,
                per_cpu: a.per_cpu,
            });
        }
        for (spec, u) in &self.unavailable {
            counters.push(CounterReading {
                metric: spec.metric.into(),
                event: spec.event.into(),
                unit: spec.unit.into(),
                raw: None,
                value: None,
                time_enabled_ns: 0,
                time_running_ns: 0,
                fds: 0,
                optional: spec.optional,
                unavailable: Some(u.clone()),
                per_cpu: Vec::new(),
            });
        }
        // Display order is the catalog's.
        let order = events::catalog(self.args.perf_scope);
        counters.sort_by_key(|c| order.iter().position(|e| e.metric == c.metric));

        let contention = self.sampler.take().map(|sm| {
            let rings = sm.rings;
            let mut collected = sm.finish();
            let mut r = contention::analyse(&mut collected.events, &self.syms);
            r.lost = collected.lost;
            r.dropped = collected.dropped;
            r.ring_buffers = rings;
            r.ring_kib = sampler::RING_BYTES >> 10;
            r
        });
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
        })
    }
}

/// Opens every event of the catalog for `target`.
fn open_all(
    kernel: &dyn Kernel,
    scope: Scope,
    target: Target<'_>,
    cpus: &[usize],
) -> (Vec<Open>, Vec<(EventSpec, Unavailable)>) {
    let (mut open, mut unavailable) = (Vec::new(), Vec::new());
    for spec in events::catalog(scope) {
        match open_event(kernel, &spec, target, cpus) {
            Ok(counters) => {
                let cpus = match target {
                    Target::Threads(_) => Vec::new(),
                    Target::Cgroup(_) | Target::AnyTask => cpus.to_vec(),
                };
                open.push(Open {
                    spec,
                    counters,
                    cpus,
                })
            }
            Err(u) => unavailable.push((spec, u)),
        }
    }
    (open, unavailable)
}

/// Opens one event for every thread (inherited, any CPU) or on every CPU
/// (a cgroup, or any task).
fn open_event(
    kernel: &dyn Kernel,
    spec: &EventSpec,
    target: Target<'_>,
    cpus: &[usize],
) -> Result<Vec<Counter>, Unavailable> {
    let mut builder = match spec.source {
        Source::Tracepoint(sys_name, name) => {
            Builder::new(Tracepoint::with_id(kernel.tracepoint_id(sys_name, name)?))
        }
        Source::Software(e) => Builder::new(e),
        Source::Hardware(e) => Builder::new(e),
    };
    builder.include_kernel().exclude_user(false);
    let per_cpu = !matches!(target, Target::Threads(_));
    let explain = |e: &std::io::Error| {
        sys::explain_open_error(e, spec.kind(), per_cpu, kernel.paranoid(), kernel.is_root())
    };
    let mut counters = Vec::new();
    match target {
        Target::Threads(pids) => {
            builder.inherit(true).any_cpu();
            for &pid in pids {
                builder.observe_pid(pid);
                match kernel.open(&builder) {
                    Ok(c) => counters.push(c),
                    // A thread that exited between listing and opening.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) && pid != pids[0] => {}
                    Err(e) => return Err(explain(&e)),
                }
            }
        }
        Target::Cgroup(_) | Target::AnyTask => {
            match target {
                Target::Cgroup(f) => builder.observe_cgroup(f),
                _ => builder.any_pid(),
            };
            for &cpu in cpus {
                builder.one_cpu(cpu);
                counters.push(kernel.open(&builder).map_err(|e| explain(&e))?);
            }
        }
    }
    Ok(counters)
}

/// The metric counting thread exits (`sched:sched_process_exit`).
const EXITS_METRIC: &str = "task_exits";

/// Why the cgroup method cannot be used, from the counters that failed on
/// the cgroup; `None` when every event the machine has was opened.
fn cgroup_failure(
    mount: &std::path::Path,
    dir: &std::path::Path,
    failed: &[(EventSpec, Unavailable)],
) -> Option<Unavailable> {
    let (spec, u) = failed
        .iter()
        .find(|(spec, u)| !u.absent || !spec.optional)?;
    if u.absent {
        // ENOENT for events that exist (they open on a CPU or a thread):
        // the cgroup has no perf_event state. Seen on 6.1 with a cgroup v2
        // hierarchy in which no controller was ever enabled (a bare
        // initramfs): enabling any one recomputes the root's controller
        // mask, and new cgroups then get perf_event (an implicit controller).
        let root = mount.join("cgroup.subtree_control");
        return Some(Unavailable::fixable(
            format!(
                "the kernel has no perf_event state for cgroup {} ({}: {}); seen where no \
                 cgroup v2 controller was ever enabled",
                dir.display(),
                spec.event,
                u.reason
            ),
            format!(
                "enable any controller once, e.g. `echo +pids > {}`, or use --perf-scope system",
                root.display()
            ),
        ));
    }
    Some(Unavailable::fixable(
        format!(
            "per-CPU cgroup counters could not be opened ({}: {})",
            spec.event, u.reason
        ),
        "run as root, or: sudo sysctl kernel.perf_event_paranoid=0",
    ))
}

/// Whether this kernel counts a thread's `sched:sched_process_exit` on a
/// counter the thread inherited: `Some(false)` when a probe thread's exit
/// was not counted, `None` when the probe could not run.
///
/// Upstream 4f6fc7821283 ("perf: Fix sample vs do_exit()", 6.16) moved
/// `perf_event_exit_task()`, which detaches a thread's inherited counters
/// and folds them into the parent's, ahead of `exit_mm()` in `do_exit()`;
/// mainline also fires `sched_process_exit` before it (6.18 here counts
/// every exit), but its stable backports left the tracepoint after
/// `exit_mm()` (Debian's 6.1.0-57, the guest of scripts/vm-run.sh, behaves
/// so: found in the guest tests, cause read from the sources), so it fires
/// when the thread has no counters any more and every inherited
/// `task_exits` reads 0. Per-CPU counters (a cgroup, or system scope) are
/// not the thread's own and still count it.
fn inherited_exits_counted(kernel: &dyn Kernel) -> Option<bool> {
    let id = kernel.tracepoint_id("sched", "sched_process_exit").ok()?;
    let mut b = Builder::new(Tracepoint::with_id(id));
    b.include_kernel()
        .exclude_user(false)
        .inherit(true)
        .any_cpu()
        .observe_pid(sys::gettid())
        .enabled(true);
    let mut counter = kernel.open(&b).ok()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let probe = std::thread::Builder::new()
        .name("herd-exit-probe".into())
        .spawn(move || {
            let _ = tx.send(sys::gettid());
        })
        .ok()?;
    let tid = rx.recv().ok()?;
    probe.join().ok()?;
    // join returns when the kernel clears the thread's tid (in exit_mm), on
    // older kernels before the tracepoint; /proc/self/task/<tid> goes only
    // when the thread is released, after its counters were folded back.
    let task = std::path::PathBuf::from(format!("/proc/self/task/{tid}"));
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    while task.exists() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Some(counter.read().ok()? > 0)
}

/// The note for `task_exits` where inherited counters miss every exit.
fn inherited_exits_missed() -> Unavailable {
    Unavailable::fixable(
        "this kernel detaches a thread's inherited counters before sched:sched_process_exit \
         fires (a probe thread's exit counted 0; stable backports of upstream 4f6fc7821283 \
         \"perf: Fix sample vs do_exit()\"; seen on Debian 6.1.0-57), so inherited per-thread \
         counters cannot count exits",
        "let process scope count through a cgroup instead (needs cgroup v2 mounted, e.g. \
         `mount -t cgroup2 none /sys/fs/cgroup`; see the note on the cgroup method), \
         or use --perf-scope system",
    )
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

/// Raises the soft RLIMIT_NOFILE to the hard limit: system scope opens one
/// descriptor per event per CPU (14 x 128 CPUs is past the usual 1024).
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

fn note_for(what: &str, u: &Unavailable) -> String {
    if u.fix.is_empty() {
        format!("perf: {what} unavailable: {}", u.reason)
    } else {
        format!("perf: {what} unavailable: {}; fix: {}", u.reason, u.fix)
    }
}

/// One counter's reading, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterReading {
    /// Metric name (e.g. `sys_futex`).
    pub metric: String,
    /// The perf event (e.g. `syscalls:sys_enter_futex`).
    pub event: String,
    /// Unit of `value`.
    pub unit: String,
    /// Raw count summed over all descriptors; `None` when unavailable.
    pub raw: Option<u64>,
    /// The metric value: raw scaled for multiplexing, in `unit`.
    pub value: Option<f64>,
    /// Sum of time_enabled over the descriptors, ns.
    pub time_enabled_ns: u64,
    /// Sum of time_running over the descriptors, ns (< enabled: multiplexed).
    pub time_running_ns: u64,
    /// Descriptors summed (threads in process scope, CPUs in system scope).
    pub fds: usize,
    /// True when the machine may legitimately lack the event.
    pub optional: bool,
    /// Why the counter could not be opened, and the fix.
    pub unavailable: Option<Unavailable>,
    /// Every CPU's value, when the counter is one descriptor per CPU
    /// (system scope, and process scope through a cgroup); empty for
    /// per-thread inherited counters. The values sum to `value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_cpu: Vec<percpu::CpuValue>,
}

impl CounterReading {
    /// Fraction of the enabled time the counter was actually counting.
    pub fn running_fraction(&self) -> Option<f64> {
        (self.time_enabled_ns > 0)
            .then(|| self.time_running_ns as f64 / self.time_enabled_ns as f64)
    }
}

/// What a [`Session`] measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// False with `--no-perf` (nothing was opened).
    pub enabled: bool,
    /// Counter scope.
    pub scope: Scope,
    /// CPUs watched (system scope only).
    pub cpus: Vec<usize>,
    /// Threads the inherited counters were attached to at open (0 otherwise).
    pub threads_at_open: usize,
    /// How the counters were attached.
    #[serde(default)]
    pub method: Method,
    /// Why process scope fell back to inherited counters, if it did.
    #[serde(default)]
    pub method_fallback: Option<Unavailable>,
    /// Seconds the counters were enabled.
    pub counted_s: f64,
    /// Every counter of the event set, available or not, in display order.
    pub counters: Vec<CounterReading>,
    /// True when `--contention` was given.
    pub contention_requested: bool,
    /// The contention profile (`--contention`).
    pub contention: Option<ContentionReport>,
    /// Why the contention profile could not be taken.
    pub contention_unavailable: Option<Unavailable>,
    /// `--no-aggregate`: the table shows every CPU, not the summary.
    #[serde(default)]
    pub no_aggregate: bool,
}

impl Report {
    /// The whole report as JSON for `RunResult::perf`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Reads a report back from `RunResult::perf` (`None` for null or foreign JSON).
    pub fn from_json(v: &serde_json::Value) -> Option<Report> {
        serde_json::from_value(v.clone()).ok()
    }

    /// The reading of counter `metric`, if it was opened.
    pub fn value(&self, metric: &str) -> Option<f64> {
        self.counters
            .iter()
            .find(|c| c.metric == metric)
            .and_then(|c| c.value)
    }

    /// Flat metrics (totals, and per thread exit when `exits > 0`).
    /// Unavailable counters are left out, never written as 0.
    pub fn metrics(&self, exits: u64) -> Vec<Metric> {
        let mut out = Vec::new();
        let per_exit = |v: f64| v / exits as f64;
        let futex: Vec<f64> = self
            .counters
            .iter()
            .filter(|c| c.event.contains("futex"))
            .filter_map(|c| c.value)
            .collect();
        if !futex.is_empty() {
            let total: f64 = futex.iter().sum();
            out.push(Metric::lower("futex_calls", "calls", total));
            if exits > 0 {
                out.push(Metric::lower("futex_per_exit", "calls", per_exit(total)));
            }
        }
        let catalog = events::catalog(self.scope);
        for c in &self.counters {
            let Some(v) = c.value else { continue };
            let m = match c.metric.as_str() {
                "task_exits" | "tasks_created" => Metric::info(&c.metric, &c.unit, v),
                _ => Metric::lower(&c.metric, &c.unit, v),
            };
            out.push(m);
            let spec = catalog.iter().find(|e| e.metric == c.metric);
            if let (Some(name), true) = (spec.and_then(|e| e.per_exit), exits > 0) {
                // Clocks per exit are in us (the total is in ms).
                let (unit, v) = if c.unit == "ms" {
                    ("us", per_exit(v) * 1e3)
                } else {
                    (c.unit.as_str(), per_exit(v))
                };
                out.push(Metric::lower(name, unit, v));
            }
        }
        if let (Some(i), Some(c)) = (self.value("instructions"), self.value("cycles")) {
            if c > 0.0 {
                out.push(Metric::higher("ipc", "insn/cycle", i / c));
            }
        }
        if let Some(r) = &self.contention {
            out.push(Metric::lower("lock_waits", "waits", r.pairs as f64));
            out.push(Metric::lower(
                "lock_wait_total_ms",
                "ms",
                r.total_wait_ns as f64 / 1e6,
            ));
            out.push(Metric::lower(
                "lock_wait_max_us",
                "us",
                r.max_wait_ns as f64 / 1e3,
            ));
            if exits > 0 {
                out.push(Metric::lower(
                    "lock_wait_us_per_exit",
                    "us",
                    r.total_wait_ns as f64 / 1e3 / exits as f64,
                ));
            }
            out.push(Metric::info(
                "contention_lost_samples",
                "samples",
                (r.lost + r.dropped) as f64,
            ));
        }
        out
    }

    /// One line per counter that could not be opened (reason and fix), per
    /// multiplexed counter, and for lost contention samples.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.enabled {
            return notes;
        }
        // Counters that failed for the same reason share one line.
        let mut failed: Vec<(&Unavailable, Vec<&str>)> = Vec::new();
        for c in &self.counters {
            if let Some(u) = &c.unavailable {
                match failed.iter_mut().find(|(r, _)| *r == u) {
                    Some((_, events)) => events.push(&c.event),
                    None => failed.push((u, vec![&c.event])),
                }
            }
        }
        for (u, events) in failed {
            notes.push(note_for(&events.join(", "), u));
        }
        for c in &self.counters {
            if c.unavailable.is_some() {
                continue;
            } else if let Some(f) = c.running_fraction() {
                if f < 0.999 {
                    notes.push(format!(
                        "perf: {} was multiplexed: counted {:.1}% of the time, value scaled up",
                        c.event,
                        f * 100.0
                    ));
                }
            }
        }
        if let (Method::Inherit, Some(u)) = (self.method, &self.method_fallback) {
            notes.push(note_for(
                "process scope via a cgroup (inherited per-thread counters used instead; \
                 they cost every thread creation and exit)",
                u,
            ));
        }
        if let Some(u) = &self.contention_unavailable {
            notes.push(note_for("--contention profile", u));
        }
        if let Some(r) = &self.contention {
            if r.lost + r.dropped > 0 {
                notes.push(format!(
                    "perf: contention profile lost {} samples (kernel ring buffers full) and dropped {} (herd's cap); waits are undercounted",
                    r.lost, r.dropped
                ));
            }
        }
        notes
    }

    /// The per-CPU section of the table output: a summary per counter over
    /// the CPUs (min/median/max, imbalance, busiest CPUs), or every CPU with
    /// `--no-aggregate`. `None` when there is nothing per CPU to show.
    pub fn per_cpu_table(&self) -> Option<String> {
        percpu::section(self)
    }

    /// The `--contention` profile rendered like `perf lock contention`.
    pub fn contention_table(&self) -> Option<String> {
        self.contention.as_ref().map(ContentionReport::render)
    }

    /// Every counter as a table (`metric  value  unit  event  running`),
    /// unavailable ones with their reason. For scenarios without their own table.
    pub fn counter_table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for c in &self.counters {
            match (&c.value, &c.unavailable) {
                (Some(v), _) => {
                    let run = c
                        .running_fraction()
                        .filter(|f| *f < 0.999)
                        .map(|f| format!("  ({:.1}% running)", f * 100.0))
                        .unwrap_or_default();
                    let _ = writeln!(out, "{:>16.2} {:<12} {}{run}", v, c.unit, c.event);
                }
                (None, Some(u)) => {
                    let _ = writeln!(
                        out,
                        "{:>16} {:<12} {}  ({})",
                        "<unavailable>", "", c.event, u.reason
                    );
                }
                (None, None) => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(metric: &str, event: &str, unit: &str, v: Option<f64>) -> CounterReading {
        CounterReading {
            metric: metric.into(),
            event: event.into(),
            unit: unit.into(),
            raw: v.map(|v| v as u64),
            value: v,
            time_enabled_ns: 100,
            time_running_ns: 100,
            fds: 1,
            optional: false,
            unavailable: v.is_none().then(|| Unavailable::absent("nope")),
            per_cpu: Vec::new(),
        }
    }

    #[test]
    fn metrics_sum_futex_and_divide_per_exit_and_skip_unavailable() {
        let r = Report {
            enabled: true,
            counters: vec![
                reading(
                    "sys_futex",
                    "syscalls:sys_enter_futex",
                    "calls",
                    Some(300.0),
                ),
                reading(
                    "sys_futex_wake",
                    "syscalls:sys_enter_futex_wake",
                    "calls",
                    Some(100.0),
                ),
                reading(
                    "task_exits",
                    "sched:sched_process_exit",
                    "tasks",
                    Some(100.0),
                ),
                reading("task_clock_ms", "task-clock", "ms", Some(50.0)),
                reading("cycles", "cycles", "cycles", None),
            ],
            ..Default::default()
        };
        let m = r.metrics(100);
        let get = |n: &str| m.iter().find(|x| x.name == n).map(|x| x.value);
        assert_eq!(get("futex_calls"), Some(400.0));
        assert_eq!(get("futex_per_exit"), Some(4.0));
        assert_eq!(get("task_clock_us_per_exit"), Some(500.0));
        assert_eq!(get("cycles"), None, "unavailable is left out, not 0");
        assert_eq!(get("cycles_per_exit"), None);
        assert!(r.metrics(0).iter().all(|x| !x.name.ends_with("_per_exit")));
        let notes = r.notes();
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("cycles unavailable: nope"), "{notes:?}");
    }

    #[test]
    fn json_round_trips() {
        let r = Report {
            enabled: true,
            counters: vec![reading(
                "sys_futex",
                "syscalls:sys_enter_futex",
                "calls",
                Some(3.0),
            )],
            ..Default::default()
        };
        assert_eq!(Report::from_json(&r.to_json()), Some(r));
    }

    #[test]
    fn cgroup_failures_choose_the_fallback_and_explain_it() {
        let (mount, dir) = (
            std::path::Path::new("/sys/fs/cgroup"),
            std::path::Path::new("/sys/fs/cgroup/herd-perf-7"),
        );
        let spec = |metric: &str| {
            *events::catalog(Scope::Process)
                .iter()
                .find(|e| e.metric == metric)
                .unwrap()
        };
        // Absent optional events (no PMU, no futex2) are no reason to fall back.
        let absent = vec![
            (spec("cycles"), Unavailable::absent("no PMU")),
            (spec("sys_futex_wake"), Unavailable::absent("old kernel")),
        ];
        assert_eq!(cgroup_failure(mount, dir, &absent), None);
        // ENOENT for a required event: no perf_event state in the cgroup.
        let mut enoent = absent.clone();
        enoent.push((spec("task_exits"), Unavailable::absent("ENOENT")));
        let u = cgroup_failure(mount, dir, &enoent).unwrap();
        assert!(
            u.reason
                .contains("no perf_event state for cgroup /sys/fs/cgroup/herd-perf-7"),
            "{u:?}"
        );
        assert!(
            u.reason.contains("sched:sched_process_exit: ENOENT"),
            "{u:?}"
        );
        assert!(
            u.fix
                .contains("echo +pids > /sys/fs/cgroup/cgroup.subtree_control"),
            "{u:?}"
        );
        // Permission: the paranoid fix.
        let denied = vec![(spec("sys_futex"), Unavailable::fixable("EACCES", "root"))];
        let u = cgroup_failure(mount, dir, &denied).unwrap();
        assert!(
            u.reason
                .contains("could not be opened (syscalls:sys_enter_futex: EACCES)"),
            "{u:?}"
        );
        assert!(u.fix.contains("perf_event_paranoid"), "{u:?}");
        assert!(!inherited_exits_missed().fix.is_empty());
    }

    #[test]
    fn multiplexed_counters_are_noted() {
        let mut c = reading("cycles", "cycles", "cycles", Some(10.0));
        c.time_running_ns = 50;
        let r = Report {
            enabled: true,
            counters: vec![c],
            ..Default::default()
        };
        assert!(
            r.notes()[0].contains("multiplexed: counted 50.0%"),
            "{:?}",
            r.notes()
        );
    }
}
