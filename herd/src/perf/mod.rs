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
//!   ([`cgroup::CgroupScope`]) and each event gets one counter per online CPU
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
//! Per-CPU counters form one perf group per CPU, enabled, disabled and
//! read through its leader (`group.rs`: one ioctl and one `read()` per CPU
//! instead of one per counter); hardware events and inherited per-thread
//! counters stay ungrouped (a group is scheduled on the PMU all or nothing,
//! and `inherit` and group reads do not mix on many kernels). Each counter reports `time_enabled`/`time_running`;
//! when a hardware counter was multiplexed (running < enabled) its value is
//! scaled as `perf stat` does and a note says by how much.
//!
//! # Per-CPU values
//! Every counter that is one descriptor per CPU (system scope, and process
//! scope through the cgroup) keeps each CPU's value, scaled for
//! multiplexing on its own; the totals are their sums. The table shows a
//! summary over the CPUs, `--no-aggregate` (`-A`) every CPU; see
//! [`percpu`]. They are also summed per NUMA node (JSON always, the table
//! on a multi-node machine and with `--per-node`); see [`pernode`].
//!
//! # When a counter cannot be opened
//! The run goes on; the counter is reported unavailable with the reason and
//! the fix ([`sys::explain_open_error`]), and its metrics are left out
//! (never written as 0). `--require-perf` turns that into an error, except
//! for events the machine does not have at all (hardware counters in a VM
//! without a PMU, futex2 tracepoints on kernels before 6.7).
//!
//! # Files
//! [`session`] opens, enables, disables and reads the counters of one
//! measured phase; [`method`] attaches them (cgroup, inherited, per CPU);
//! [`report`] turns the readings into metrics, notes and tables;
//! [`events`] is the event catalog, [`sys`] the kernel seam, [`percpu`]
//! the per-CPU values, [`sampler`], [`lock_sample`], [`contention`] and
//! [`kallsyms`] the
//! contention profile.

pub mod budget;
pub mod cgroup;
pub(crate) mod closer;
pub(crate) mod contention;
pub(crate) mod cpu_table;
pub mod events;
mod group;
pub mod helpers;
pub(crate) mod kallsyms;
pub(crate) mod keeper;
pub(crate) mod kprobe;
pub(crate) mod lock_kinds;
pub(crate) mod lock_sample;
pub(crate) mod method;
pub(crate) mod mm_lock;
pub(crate) mod percpu;
pub(crate) mod pernode;
pub(crate) mod report;
pub(crate) mod sampler;
pub(crate) mod session;
pub mod sys;
pub(crate) mod tracefs;
pub(crate) mod unavailable;

use serde::{Deserialize, Serialize};

pub use method::Method;
pub use report::{CounterReading, Report};
pub use session::Session;

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
    #[arg(long, conflicts_with_all = ["perf_scope", "require_perf", "contention", "allow_lost_samples", "no_aggregate", "per_node"])]
    pub no_perf: bool,
    /// Refuse the run (exit 3) when any counter cannot be opened, instead of reporting it unavailable.
    #[arg(long)]
    pub require_perf: bool,
    /// Sample lock:contention_begin/end and report a per-lock contention profile.
    #[arg(long)]
    pub contention: bool,
    /// Accept a contention profile that lost samples (the kernel's ring
    /// buffers were full): without it, lost samples fail the run's checks
    /// (exit 4, results still written).
    #[arg(long, requires = "contention")]
    #[serde(default)]
    pub allow_lost_samples: bool,
    /// Table output: every CPU's counter values, one row per CPU (as `perf
    /// stat -A`), instead of the per-counter summary over CPUs. The JSON
    /// always has every CPU (`perf.counters[].per_cpu`).
    #[arg(short = 'A', long, conflicts_with = "per_node")]
    #[serde(default)]
    pub no_aggregate: bool,
    /// Table output: the counters summed per NUMA node, one row per node
    /// per counter (as `perf stat --per-node`), and the storm's placement
    /// per node. The JSON always has them (`perf.counters[].per_node`).
    #[arg(long)]
    #[serde(default)]
    pub per_node: bool,
}
