//! The detail of one or several runs of one configuration, gathered for
//! the page: latency distributions, per-CPU counter values, placement,
//! the lock-contention profile and the perf notes. Several runs (a `-r N`
//! set, a configuration of a comparison) are added up: histogram buckets
//! and per-CPU values are summed, contention rows merged by caller or
//! lock, so the page shows the whole of what was measured (each section
//! says over how many runs).
//!
//! Only the runs the statistics count ([`RunResult::counted`]: ran to the
//! end and passed their own checks) are added up, as the figures and the
//! `herd compare` statistics take them: a run cut short by Ctrl-C would
//! make its CPUs look idle, one that failed its checks measured something
//! else. The runs left out are counted ([`Gathered::left_out`]) and the
//! sections say so. When no run counts, all are gathered (as the figures
//! then are, marked not to be trusted). perf's notes are of every run.
//!
//! Everything here is read tolerantly: the perf section through its typed
//! reader (a perf section this herd cannot read is counted, not fatal),
//! `details` as plain JSON, anything absent simply absent.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::export::histogram::Distribution;
use crate::host::NumaNode;
use crate::perf::contention::{ContentionReport, WaitStat};
use crate::perf::mm_lock::MmapLock;
use crate::perf::percpu::CpuValue;
use crate::perf::Report;
use crate::result::RunResult;

/// The histograms herd's scenarios write, in the order the page shows them.
pub(crate) const KNOWN_HISTOGRAMS: [&str; 9] = [
    "create",
    "start",
    "exit",
    "exit_done",
    "exit_spinning",
    "exit_own",
    "exit_hook",
    "latency",
    "completion",
];

/// One counter's values per CPU (summed over the runs), by CPU.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CpuSeries {
    /// Metric name (`sys_futex`).
    pub(crate) name: String,
    /// Unit (`calls`).
    pub(crate) unit: String,
    /// `(cpu, value)` in CPU order.
    pub(crate) values: Vec<(usize, f64)>,
}

/// Where the storm's threads ran, summed over the runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Placement {
    /// The requested CPUs (`--cpus`).
    pub(crate) requested: Vec<usize>,
    /// Threads per CPU at start, `(cpu, threads)`.
    pub(crate) start: Vec<(usize, f64)>,
    /// Threads per CPU at exit.
    pub(crate) exit: Vec<(usize, f64)>,
    /// Threads seen outside the requested CPUs (or on no known CPU), at
    /// start and at exit.
    pub(crate) outside: (u64, u64),
}

/// The detail of a set of runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gathered {
    /// Runs gathered (added up).
    pub(crate) runs: usize,
    /// Runs left out: interrupted or failing their own checks (0 when no
    /// run counts: then all are gathered).
    pub(crate) left_out: usize,
    /// Latency distributions by histogram name, in display order.
    pub(crate) dists: Vec<(String, Distribution)>,
    /// Counters with per-CPU values and a non-zero total.
    pub(crate) per_cpu: Vec<CpuSeries>,
    /// Counters with per-CPU values, zero on every CPU.
    pub(crate) zero_counters: Vec<String>,
    /// The NUMA nodes (from the perf section, else the host facts).
    pub(crate) nodes: Vec<NumaNode>,
    /// The storm's placement.
    pub(crate) placement: Option<Placement>,
    /// The contention profile, merged over the runs that have one.
    pub(crate) contention: Option<ContentionReport>,
    /// Runs with a contention profile.
    pub(crate) contention_runs: usize,
    /// perf's notes (unavailable counters with their reason and fix, ...),
    /// each with the number of runs that gave it.
    pub(crate) perf_notes: Vec<(String, usize)>,
    /// Runs whose perf section exists but could not be read.
    pub(crate) perf_unreadable: usize,
    /// What the per-CPU values count (scope and method), when known.
    pub(crate) perf_scope: Option<String>,
}

/// Gathers `all` (one configuration): the counted runs, or every run
/// when none counts (module docs).
pub(crate) fn gather(all: &[&RunResult]) -> Gathered {
    let counted: Vec<&RunResult> = all.iter().copied().filter(|r| r.counted()).collect();
    let runs: &[&RunResult] = if counted.is_empty() { all } else { &counted };
    let mut g = Gathered {
        runs: runs.len(),
        left_out: all.len() - runs.len(),
        ..Gathered::default()
    };
    g.dists = distributions(runs);
    let mut sums: Vec<(String, String, BTreeMap<usize, f64>)> = Vec::new();
    let mut profiles = Vec::new();
    for r in all {
        if r.perf.is_null() {
            continue;
        }
        let Some(p) = Report::from_json(&r.perf) else {
            g.perf_unreadable += 1;
            continue;
        };
        for note in p.notes() {
            match g.perf_notes.iter_mut().find(|(n, _)| *n == note) {
                Some((_, k)) => *k += 1,
                None => g.perf_notes.push((note, 1)),
            }
        }
        if !runs.iter().any(|x| std::ptr::eq(*x, *r)) {
            continue;
        }
        if g.perf_scope.is_none() && p.enabled {
            g.perf_scope =
                Some(format!("{:?} scope, {:?} counters", p.scope, p.method).to_lowercase());
        }
        if g.nodes.is_empty() {
            g.nodes = p.nodes.clone();
        }
        for c in p
            .counters
            .iter()
            .filter(|c| c.value.is_some() && !c.per_cpu.is_empty())
        {
            let i = match sums.iter().position(|(n, _, _)| *n == c.metric) {
                Some(i) => i,
                None => {
                    sums.push((c.metric.clone(), c.unit.clone(), BTreeMap::new()));
                    sums.len() - 1
                }
            };
            for v in &c.per_cpu {
                *sums[i].2.entry(v.cpu).or_default() += v.value;
            }
        }
        if let Some(c) = p.contention {
            profiles.push(c);
        }
    }
    for (name, unit, per_cpu) in sums {
        if per_cpu.values().any(|&v| v != 0.0) {
            g.per_cpu.push(CpuSeries {
                name,
                unit,
                values: per_cpu.into_iter().collect(),
            });
        } else {
            g.zero_counters.push(name);
        }
    }
    if g.nodes.is_empty() {
        if let Some(r) = runs.first() {
            g.nodes = serde_json::from_value(r.host["numa_nodes"].clone()).unwrap_or_default();
        }
    }
    g.contention_runs = profiles.len();
    g.contention = merge_contention(&profiles);
    g.placement = placement(runs);
    g
}

/// The runs' latency histograms, each merged over the runs that have it.
fn distributions(runs: &[&RunResult]) -> Vec<(String, Distribution)> {
    let mut names: Vec<String> = KNOWN_HISTOGRAMS.iter().map(|s| s.to_string()).collect();
    for r in runs {
        if let Some(m) = r.details.get("histograms").and_then(Value::as_object) {
            for k in m.keys() {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
    }
    names
        .into_iter()
        .filter_map(|name| {
            let parts: Vec<Distribution> = runs
                .iter()
                .filter_map(|r| Distribution::from_json(r.details.get("histograms")?.get(&name)?))
                .collect();
            Distribution::merge(&parts).map(|d| (name, d))
        })
        .collect()
}

/// `[[cpu, threads], ...]` from a placement list, summed into `into`.
fn add_pairs(v: &Value, into: &mut BTreeMap<i64, f64>) {
    for e in v.as_array().map_or(&[][..], Vec::as_slice) {
        if let (Some(cpu), Some(n)) = (
            e.get(0).and_then(Value::as_i64),
            e.get(1).and_then(Value::as_f64),
        ) {
            *into.entry(cpu).or_default() += n;
        }
    }
}

/// The storm's placement (`details.placement`) summed over the runs.
fn placement(runs: &[&RunResult]) -> Option<Placement> {
    let mut p = Placement::default();
    let (mut start, mut exit) = (BTreeMap::new(), BTreeMap::new());
    let mut any = false;
    for r in runs {
        let pl = &r.details["placement"];
        if !pl.is_object() {
            continue;
        }
        any = true;
        if p.requested.is_empty() {
            p.requested = serde_json::from_value(pl["cpus_requested"].clone()).unwrap_or_default();
        }
        add_pairs(&pl["per_cpu_start"], &mut start);
        add_pairs(&pl["per_cpu_exit"], &mut exit);
        p.outside.0 += pl["outside_requested_start"].as_u64().unwrap_or(0);
        p.outside.1 += pl["outside_requested_exit"].as_u64().unwrap_or(0);
    }
    let known = |m: BTreeMap<i64, f64>| -> Vec<(usize, f64)> {
        m.into_iter()
            .filter_map(|(c, n)| Some((usize::try_from(c).ok()?, n)))
            .collect()
    };
    p.start = known(start);
    p.exit = known(exit);
    any.then_some(p)
}

/// Adds `s` into the row of `rows` with the same key, or appends it.
fn add_row(rows: &mut Vec<WaitStat>, s: &WaitStat, same: impl Fn(&WaitStat) -> bool) {
    match rows.iter_mut().find(|r| same(r)) {
        Some(r) => {
            if s.contended > 0 && (r.contended == 0 || s.min_ns < r.min_ns) {
                r.min_ns = s.min_ns;
            }
            r.contended += s.contended;
            r.total_ns += s.total_ns;
            r.max_ns = r.max_ns.max(s.max_ns);
        }
        None => rows.push(s.clone()),
    }
}

/// Several runs' contention profiles as one: rows with the same caller
/// (or lock) and class added up, the accounting summed. Lock addresses
/// are per process, so only named locks merge across runs.
pub(crate) fn merge_contention(profiles: &[ContentionReport]) -> Option<ContentionReport> {
    let (first, rest) = profiles.split_first()?;
    if rest.is_empty() {
        return Some(first.clone());
    }
    let mut m = ContentionReport {
        ring_buffers: first.ring_buffers,
        ring_kib: first.ring_kib,
        ..ContentionReport::default()
    };
    let mut mm: Option<MmapLock> = None;
    for p in profiles {
        for s in &p.by_caller {
            add_row(&mut m.by_caller, s, |r| {
                r.symbol == s.symbol && r.class == s.class
            });
        }
        for s in &p.by_lock {
            add_row(&mut m.by_lock, s, |r| {
                r.address == s.address && r.symbol == s.symbol && r.class == s.class
            });
        }
        m.rows_omitted += p.rows_omitted;
        m.samples += p.samples;
        m.begins += p.begins;
        m.ends += p.ends;
        m.pairs += p.pairs;
        m.total_wait_ns += p.total_wait_ns;
        m.max_wait_ns = m.max_wait_ns.max(p.max_wait_ns);
        m.unfinished += p.unfinished;
        m.unmatched_ends += p.unmatched_ends;
        m.lost += p.lost;
        m.dropped += p.dropped;
        m.broken_by_loss += p.broken_by_loss;
        m.buffer_growths += p.buffer_growths;
        m.kallsyms_hidden |= p.kallsyms_hidden;
        m.kallsyms_data |= p.kallsyms_data;
        if let Some(x) = &p.mmap_lock {
            let t = mm.get_or_insert_with(MmapLock::default);
            t.addresses.extend(x.addresses.iter().cloned());
            t.waits += x.waits;
            t.read_waits += x.read_waits;
            t.wait_ns += x.wait_ns;
            t.other_callers += x.other_callers;
        }
    }
    for rows in [&mut m.by_caller, &mut m.by_lock] {
        rows.sort_by_key(|r| std::cmp::Reverse(r.total_ns));
    }
    m.mmap_lock = mm;
    Some(m)
}

/// `values` as perf's per-CPU type (for [`crate::perf::percpu::Spread`]).
pub(crate) fn cpu_values(values: &[(usize, f64)]) -> Vec<CpuValue> {
    values
        .iter()
        .map(|&(cpu, value)| CpuValue {
            cpu,
            raw: value.max(0.0) as u64,
            value,
            running: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(symbol: &str, class: &str, n: u64, total: u64, min: u64, max: u64) -> WaitStat {
        WaitStat {
            symbol: symbol.into(),
            class: class.into(),
            contended: n,
            total_ns: total,
            min_ns: min,
            max_ns: max,
            ..WaitStat::default()
        }
    }

    #[test]
    fn contention_rows_merge_by_caller_and_class() {
        let a = ContentionReport {
            by_caller: vec![stat("do_exit+0x15e", "rwsem:R", 10, 1000, 20, 300)],
            pairs: 10,
            total_wait_ns: 1000,
            max_wait_ns: 300,
            ..ContentionReport::default()
        };
        let b = ContentionReport {
            by_caller: vec![
                stat("madvise+0x1", "rwsem:R", 5, 5000, 100, 2000),
                stat("do_exit+0x15e", "rwsem:R", 2, 100, 10, 60),
            ],
            pairs: 7,
            total_wait_ns: 5100,
            max_wait_ns: 2000,
            lost: 3,
            ..ContentionReport::default()
        };
        let m = merge_contention(&[a.clone(), b]).unwrap();
        assert_eq!(m.by_caller.len(), 2);
        assert_eq!(m.by_caller[0].symbol, "madvise+0x1");
        let exit = &m.by_caller[1];
        assert_eq!(
            (exit.contended, exit.total_ns, exit.min_ns, exit.max_ns),
            (12, 1100, 10, 300)
        );
        assert_eq!(
            (m.pairs, m.total_wait_ns, m.max_wait_ns, m.lost),
            (17, 6100, 2000, 3)
        );
        assert_eq!(merge_contention(std::slice::from_ref(&a)), Some(a));
        assert_eq!(merge_contention(&[]), None);
    }

    #[test]
    fn placement_and_histograms_add_up_over_runs() {
        let mut r = RunResult::new("storm", vec![], Value::Null, Value::Null);
        r.details = serde_json::json!({
            "placement": {"cpus_requested": [0, 1], "per_cpu_start": [[0, 3], [1, 1], [-1, 2]],
                          "per_cpu_exit": [[1, 4]], "outside_requested_start": 2},
            "histograms": {"exit": {"count": 2, "unit": "ns", "min": 10, "max": 20,
                                     "log_buckets": [[12, 1], [23, 1]]},
                           "exit_own": {"count": 0}, "odd": {"count": 1, "unit": "us", "min": 1, "max": 1}},
        });
        let g = gather(&[&r, &r]);
        assert_eq!(g.runs, 2);
        let p = g.placement.unwrap();
        assert_eq!(p.start, [(0, 6.0), (1, 2.0)]);
        assert_eq!(p.outside, (4, 0));
        let names: Vec<&str> = g.dists.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["exit", "odd"]);
        assert_eq!(g.dists[0].1.count, 4);
        assert!(g.per_cpu.is_empty() && g.contention.is_none());
    }

    /// Runs the statistics leave out (interrupted, or failing their own
    /// checks) are left out of the per-CPU sums, the placement and the
    /// histograms too, and counted; they were summed in, so a heat map
    /// showed runs the figures beside it did not count.
    #[test]
    fn only_counted_runs_are_added_up() {
        let mut ok = RunResult::new("storm", vec![], Value::Null, Value::Null);
        ok.details = serde_json::json!({
            "placement": {"cpus_requested": [0], "per_cpu_start": [[0, 3]], "per_cpu_exit": []},
            "histograms": {"exit": {"count": 2, "unit": "ns", "min": 10, "max": 20,
                                     "log_buckets": [[12, 1], [23, 1]]}},
        });
        let mut cut = ok.clone();
        cut.interrupted = true;
        let mut failed = ok.clone();
        failed.checks_failed = vec!["cleanup: 3 cleanups missing".into()];
        let g = gather(&[&ok, &cut, &failed]);
        assert_eq!((g.runs, g.left_out), (1, 2));
        assert_eq!(g.placement.unwrap().start, [(0, 3.0)]);
        assert_eq!(g.dists[0].1.count, 2);
        // None counts: all are gathered, none said to be left out.
        let g = gather(&[&cut, &failed]);
        assert_eq!((g.runs, g.left_out), (2, 0));
        assert_eq!(g.placement.unwrap().start, [(0, 6.0)]);
    }

    #[test]
    fn an_unreadable_perf_section_is_counted() {
        let mut r = RunResult::new("storm", vec![], Value::Null, Value::Null);
        r.perf = serde_json::json!({"enabled": "maybe"});
        let g = gather(&[&r]);
        assert_eq!(g.perf_unreadable, 1);
    }
}
