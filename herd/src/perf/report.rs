//! What a [`super::Session`] measured: every counter's reading (or why
//! there is none), the flat metrics a run result gets, the notes for the
//! user (unavailable counters with their fix, multiplexing, lost samples),
//! and the tables.

use serde::{Deserialize, Serialize};

use super::budget::FdBudget;
use super::contention::ContentionReport;
use super::events::{self, EventSpec};
use super::method::Method;
use super::sys::Unavailable;
use super::Scope;
use super::{percpu, pernode};
use crate::host::numa::NodeMap;
use crate::result::Metric;

pub(super) fn note_for(what: &str, u: &Unavailable) -> String {
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
    pub(crate) unit: String,
    /// Raw count summed over all descriptors; `None` when unavailable.
    pub raw: Option<u64>,
    /// The metric value: raw (a hardware counter scaled for multiplexing), in `unit`; `None`
    /// when unavailable or not counted.
    pub value: Option<f64>,
    /// A hardware counter opened but never running while enabled
    /// (time_running 0): the value is unknown, not 0 (`perf stat` prints
    /// `<not counted>`). Never set for a software or tracepoint counter,
    /// whose count is exact ([`CounterReading::counted`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_counted: bool,
    /// Sum of time_enabled over the descriptors, ns.
    pub(crate) time_enabled_ns: u64,
    /// Sum of time_running over the descriptors, ns (< enabled: multiplexed).
    pub(crate) time_running_ns: u64,
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
    /// `per_cpu` summed per NUMA node ([`pernode`]), one entry per node
    /// with a CPU in it; empty when `per_cpu` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_node: Vec<pernode::NodeValue>,
}

impl CounterReading {
    /// The reading of an open counter from its descriptors' samples (one
    /// per CPU of `cpus`, or per thread when `cpus` is empty), with perf
    /// stat's scaling per descriptor: a counter that ran part of the time
    /// is extrapolated to its enabled time; the total is the sum, so the
    /// per-CPU values add up to it.
    pub(super) fn counted(spec: &EventSpec, samples: &[percpu::Sample], cpus: &[usize]) -> Self {
        let multiplexes = spec.kind() == super::sys::EventKind::Hardware;
        let a = percpu::aggregate(samples, cpus, spec.scale, multiplexes);
        // perf stat's rule, no running time at all and no value, holds for
        // a counter that competes for the PMU: it may never have been
        // scheduled. A software or tracepoint counter never competes (the
        // software PMU takes every event), so its count is exact whatever
        // its times say: 0 running time means nothing it counts ran there,
        // and on a loaded machine the kernel reported cgroup counters with
        // their counts right (64 exits of 64) and both times 0 (the
        // cgroup's clock not advanced), which this rule had turned into
        // <not counted> (perf_counters.rs flaked so under load).
        let not_counted = multiplexes && a.running_ns == 0;
        CounterReading {
            metric: spec.metric.into(),
            event: spec.event.into(),
            unit: spec.unit.into(),
            raw: Some(a.raw),
            value: (!not_counted).then_some(a.value),
            not_counted,
            time_enabled_ns: a.enabled_ns,
            time_running_ns: a.running_ns,
            fds: samples.len(),
            optional: spec.optional,
            unavailable: None,
            per_cpu: a.per_cpu,
            per_node: Vec::new(),
        }
    }

    /// A counter that could not be opened, and why.
    pub(super) fn unavailable(spec: &EventSpec, u: &Unavailable) -> Self {
        CounterReading {
            metric: spec.metric.into(),
            event: spec.event.into(),
            unit: spec.unit.into(),
            raw: None,
            value: None,
            not_counted: false,
            time_enabled_ns: 0,
            time_running_ns: 0,
            fds: 0,
            optional: spec.optional,
            unavailable: Some(u.clone()),
            per_cpu: Vec::new(),
            per_node: Vec::new(),
        }
    }

    /// Fraction of the enabled time the counter was actually counting.
    pub(crate) fn running_fraction(&self) -> Option<f64> {
        (self.time_enabled_ns > 0)
            .then(|| self.time_running_ns as f64 / self.time_enabled_ns as f64)
    }
}

/// Fills every counter's `per_node` from its `per_cpu`, summed per node of
/// `map` ([`pernode::per_node`]).
pub fn fill_per_node(counters: &mut [CounterReading], map: &NodeMap) {
    for c in counters {
        c.per_node = pernode::per_node(&c.per_cpu, map);
    }
}

/// What a [`super::Session`] measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// False with `--no-perf` (nothing was opened).
    pub(crate) enabled: bool,
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
    pub(crate) counted_s: f64,
    /// Every counter of the event set, available or not, in display order.
    pub counters: Vec<CounterReading>,
    /// True when `--contention` was given.
    pub(crate) contention_requested: bool,
    /// The contention profile (`--contention`).
    pub contention: Option<ContentionReport>,
    /// Why the contention profile could not be taken.
    pub contention_unavailable: Option<Unavailable>,
    /// `--no-aggregate`: the table shows every CPU, not the summary.
    #[serde(default)]
    pub(crate) no_aggregate: bool,
    /// `--per-node`: the table shows the counters per NUMA node.
    #[serde(default)]
    pub per_node: bool,
    /// The NUMA nodes at the run, as sysfs listed them (`per_node` of the
    /// counters is grouped by these; see `host/numa.rs` for the rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<crate::host::NumaNode>,
    /// The descriptors the counters took and the limit (see `budget.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd_budget: Option<FdBudget>,
    /// Time to open every counter (and the sampler), µs: with one
    /// descriptor per event per CPU it grows with the CPUs.
    #[serde(default)]
    pub open_us: u64,
    /// Time to enable every counter (and the sampler), µs, summed over
    /// the enable calls: one ioctl per CPU group and per ungrouped counter.
    #[serde(default)]
    pub enable_us: u64,
    /// Time to disable them, µs, summed over the disable calls.
    #[serde(default)]
    pub disable_us: u64,
    /// Time to read every counter at the end, µs.
    #[serde(default)]
    pub read_us: u64,
    /// `read()` calls that took the counters' values at the end: one per
    /// CPU group, one per ungrouped counter (hardware events, per-thread
    /// counters; see `group.rs`).
    #[serde(default)]
    pub reads: usize,
    /// Per-CPU perf groups (one per CPU counted; 0 for per-thread counters).
    #[serde(default)]
    pub groups: usize,
    /// herd's helper threads (progress bar, contention drain) left out of
    /// process-scope counting (`helpers.rs`).
    #[serde(default)]
    pub helpers_excluded: usize,
    /// Why helper threads were counted after all, when they were.
    #[serde(default)]
    pub helpers_counted: Option<String>,
    /// `--allow-lost-samples`: lost contention samples do not fail the run.
    #[serde(default)]
    pub(crate) allow_lost_samples: bool,
}

impl Report {
    /// The whole report as JSON for `RunResult::perf`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Reads a report back from `RunResult::perf` (`None` for null or foreign JSON).
    pub(crate) fn from_json(v: &serde_json::Value) -> Option<Report> {
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
        let catalog = events::catalog(self.scope);
        // The futex system calls (not the do_futex kprobe).
        let futex: Vec<f64> = self
            .counters
            .iter()
            .filter(|c| catalog.iter().any(|e| e.metric == c.metric && e.futex))
            .filter_map(|c| c.value)
            .collect();
        if !futex.is_empty() {
            let total: f64 = futex.iter().sum();
            out.push(Metric::lower("futex_calls", "calls", total));
            if exits > 0 {
                out.push(Metric::lower("futex_per_exit", "calls", per_exit(total)));
            }
        }
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
        // do_futex() calls not entered from futex(2): the clear-tid wakes
        // of exiting threads (kprobe.rs). Only where exits are counted: a
        // kernel that detaches inherited counters before a thread's exit
        // (task_exits unavailable) misses its clear-tid wake as well (seen
        // on Debian's 6.1: 2 do_futex calls for 2 futex(2) and 64 exits).
        let exits_counted = self.value("task_exits").is_some();
        if let (Some(k), Some(f), true) = (
            self.value("kernel_futex_calls"),
            self.value("sys_futex"),
            exits_counted,
        ) {
            let wakes = (k - f).max(0.0);
            out.push(Metric::lower("exit_futex_wakes", "wakes", wakes));
            if exits > 0 {
                out.push(Metric::lower(
                    "exit_futex_wakes_per_exit",
                    "wakes",
                    per_exit(wakes),
                ));
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
            // Which locks: the profile in stable rows (lock_kinds.rs).
            out.extend(super::lock_kinds::metrics(r, exits));
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
        let not_counted: Vec<&str> = self
            .counters
            .iter()
            .filter(|c| c.not_counted)
            .map(|c| c.event.as_str())
            .collect();
        if !not_counted.is_empty() {
            notes.push(format!(
                "perf: {} <not counted>: opened but never on the PMU while enabled \
                 (time_running 0, as perf stat marks it); left out, the value is unknown, not 0",
                not_counted.join(", ")
            ));
        }
        let catalog = events::catalog(self.scope);
        let hardware = |c: &CounterReading| {
            catalog
                .iter()
                .any(|e| e.metric == c.metric && e.kind() == super::sys::EventKind::Hardware)
        };
        for c in &self.counters {
            // Only hardware counters multiplex (percpu::Sample::scaled).
            if c.unavailable.is_some() || c.not_counted || !hardware(c) {
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
        if let Some(why) = &self.helpers_counted {
            notes.push(format!(
                "perf: herd's helper threads (progress bar, contention drain) are counted: {why}"
            ));
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

    /// The run's own checks on the counters that failed: a contention
    /// profile that lost samples, unless `--allow-lost-samples` (the waits are
    /// undercounted, and the pairs around a loss were left out).
    pub(crate) fn checks(&self) -> Vec<String> {
        let mut failed = Vec::new();
        // Counters lost to a descriptor shortage: the run is incomplete.
        let short: Vec<&str> = self
            .counters
            .iter()
            .filter(|c| {
                c.unavailable
                    .as_ref()
                    .is_some_and(|u| u.is_descriptor_shortage())
            })
            .map(|c| c.event.as_str())
            .collect();
        if !short.is_empty() {
            failed.push(format!(
                "perf: counters incomplete: {} could not be opened (out of file descriptors)",
                short.join(", ")
            ));
        }
        if let Some(u) = self
            .method_fallback
            .as_ref()
            .filter(|u| u.is_descriptor_shortage())
        {
            failed.push(format!(
                "perf: counters incomplete: the cgroup counters ran out of file descriptors \
                 ({})",
                u.reason
            ));
        }
        if let Some(r) = &self.contention {
            if r.lost + r.dropped > 0 && !self.allow_lost_samples {
                failed.push(format!(
                    "perf: the contention profile lost {} samples and dropped {} (waits are \
                     undercounted); --allow-lost-samples accepts that",
                    r.lost, r.dropped
                ));
            }
        }
        failed
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
                (None, None) if c.not_counted => {
                    let _ = writeln!(out, "{:>16} {:<12} {}", "<not counted>", "", c.event);
                }
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
mod tests;
