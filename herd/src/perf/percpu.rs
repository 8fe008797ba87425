//! Per-CPU counter values: where on the machine the futex calls, lock
//! contentions, exits and context switches happened.
//!
//! System scope (and process scope through a cgroup) opens one counter per
//! CPU, so the kernel already keeps a value per CPU; the totals are their
//! sums. Each CPU's value of a hardware counter is scaled for multiplexing
//! on its own (`raw * time_enabled / time_running`, as `perf stat -A` shows
//! it; software and tracepoint counters never multiplex and are exact), and
//! the total is the sum of those scaled values, so the per-CPU values
//! always add up to the total.
//!
//! Output: every CPU's value is in the JSON (`perf.counters[i].per_cpu`).
//! The table shows a compact view per counter (total, min, median, max over
//! the CPUs, imbalance = max/mean, how many CPUs saw any, and the busiest
//! CPUs), not a column per CPU: on a 104-CPU server that is what shows
//! whether the contention was spread out or piled onto a few CPUs.
//! `--no-aggregate` (`-A`, perf stat's name) prints one row per CPU instead,
//! `--per-node` one row per NUMA node per counter; on a machine with more
//! than one node the summary also gets per-node totals ([`super::pernode`]).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{pernode, CounterReading, Method, Report, Scope};
use crate::format::fmt_value;

/// One CPU's value of one counter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuValue {
    /// The CPU number (as in `/sys/devices/system/cpu/online`).
    pub cpu: usize,
    /// The raw count on this CPU.
    pub raw: u64,
    /// The count scaled for multiplexing on this CPU, in the counter's unit.
    pub value: f64,
    /// Fraction of the enabled time this CPU's counter was running, when
    /// below 1 (multiplexed); left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<f64>,
}

/// One descriptor's reading: the count and its two times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Raw count.
    pub count: u64,
    /// `time_enabled`, ns.
    pub enabled_ns: u64,
    /// `time_running`, ns.
    pub running_ns: u64,
}

impl Sample {
    /// The count extrapolated to the whole enabled time, as `perf stat`
    /// does for a counter that ran only part of it (multiplexed), when
    /// `multiplexes` (a hardware counter). A software or tracepoint counter
    /// is never multiplexed: the software PMU counts whenever its context
    /// (the task, the cgroup on that CPU) is running, so a running time
    /// below the enabled time is time nothing it counts could happen, and
    /// its raw count is exact (scaling it turned 11 exits into 24.17 on a
    /// loaded machine). A counter that never ran keeps its (zero) count.
    pub fn scaled(&self, multiplexes: bool) -> f64 {
        if multiplexes && self.running_ns > 0 && self.running_ns < self.enabled_ns {
            self.count as f64 * self.enabled_ns as f64 / self.running_ns as f64
        } else {
            self.count as f64
        }
    }

    /// Fraction of the enabled time the counter ran, when below 1.
    fn running_fraction(&self) -> Option<f64> {
        (self.enabled_ns > 0 && self.running_ns < self.enabled_ns)
            .then(|| self.running_ns as f64 / self.enabled_ns as f64)
    }
}

/// Sums of one counter's descriptors, and its per-CPU values when each
/// descriptor watched one CPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Aggregate {
    /// Raw counts summed.
    pub raw: u64,
    /// Scaled values summed, divided by the unit's `scale`.
    pub value: f64,
    /// `time_enabled` summed, ns.
    pub enabled_ns: u64,
    /// `time_running` summed, ns.
    pub running_ns: u64,
    /// One entry per CPU (empty for per-thread descriptors).
    pub per_cpu: Vec<CpuValue>,
}

/// Aggregates one counter's descriptors. `cpus[i]` is the CPU descriptor
/// `i` watched; pass an empty slice for per-thread (inherited) descriptors,
/// which have no CPU. `scale` divides raw counts into the metric's unit;
/// `multiplexes` (hardware counters) scales each for multiplexing.
pub fn aggregate(samples: &[Sample], cpus: &[usize], scale: f64, multiplexes: bool) -> Aggregate {
    debug_assert!(cpus.is_empty() || cpus.len() == samples.len());
    let mut a = Aggregate::default();
    let mut scaled_sum = 0.0;
    for (i, s) in samples.iter().enumerate() {
        a.raw += s.count;
        a.enabled_ns += s.enabled_ns;
        a.running_ns += s.running_ns;
        let scaled = s.scaled(multiplexes);
        scaled_sum += scaled;
        if let Some(&cpu) = cpus.get(i) {
            a.per_cpu.push(CpuValue {
                cpu,
                raw: s.count,
                value: scaled / scale,
                running: s.running_fraction(),
            });
        }
    }
    a.value = scaled_sum / scale;
    a
}

/// How one counter's values spread over the CPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    /// CPUs with a value.
    pub cpus: usize,
    /// Sum over the CPUs.
    pub total: f64,
    /// Smallest CPU value.
    pub min: f64,
    /// Median CPU value.
    pub median: f64,
    /// Largest CPU value.
    pub max: f64,
    /// Mean CPU value.
    pub mean: f64,
    /// max/mean: 1.0 is perfectly even, `cpus` means all on one CPU;
    /// `None` when the total is 0.
    pub imbalance: Option<f64>,
    /// CPUs with a non-zero value.
    pub nonzero: usize,
    /// The busiest CPUs, largest first (ties: lower CPU first), non-zero only.
    pub top: Vec<(usize, f64)>,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: &[CpuValue], top: usize) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = values.iter().map(|c| c.value).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let total: f64 = v.iter().sum();
        let mean = total / n as f64;
        let max = v[n - 1];
        let mut busiest: Vec<(usize, f64)> = values
            .iter()
            .filter(|c| c.value > 0.0)
            .map(|c| (c.cpu, c.value))
            .collect();
        busiest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let nonzero = busiest.len();
        busiest.truncate(top);
        Some(Spread {
            cpus: n,
            total,
            min: v[0],
            median,
            max,
            mean,
            imbalance: (mean > 0.0).then(|| max / mean),
            nonzero,
            top: busiest,
        })
    }
}

/// How many busiest CPUs the compact table names per counter.
pub const TOP_CPUS: usize = 3;

/// What the per-CPU values cover, for the section heading.
fn scope_words(r: &Report) -> String {
    match (r.scope, r.method) {
        (Scope::System, _) => "system scope: every task on these CPUs".into(),
        (_, Method::Cgroup) => {
            "process scope: this process's threads, by the CPU they ran on".into()
        }
        _ => format!("{:?} scope", r.scope).to_lowercase(),
    }
}

/// The counters that have per-CPU values, split into those with a non-zero
/// total and those zero on every CPU.
fn counters_with_cpus(r: &Report) -> (Vec<&CounterReading>, Vec<&CounterReading>) {
    r.counters
        .iter()
        .filter(|c| c.value.is_some() && !c.per_cpu.is_empty())
        .partition(|c| c.per_cpu.iter().any(|v| v.value != 0.0))
}

/// The per-CPU section of the table: the compact summary, or with
/// `--no-aggregate` one row per CPU. `None` when there is nothing to show
/// (no per-CPU counters and no `--no-aggregate`).
pub fn section(r: &Report) -> Option<String> {
    if !r.enabled {
        return None;
    }
    let (busy, zero) = counters_with_cpus(r);
    if busy.is_empty() && zero.is_empty() {
        // Per-thread (inherited) counters have no CPU. Say so only when the
        // user asked for the per-CPU table.
        let what = if r.per_node { "node" } else { "CPU" };
        return (r.no_aggregate || r.per_node).then(|| {
            format!(
                "\nperf per {what}: not available: process scope fell back to per-thread \
                 inherited counters, which have no CPU (see the note on stderr); \
                 --perf-scope system counts per CPU\n"
            )
        });
    }
    let ncpus = busy
        .iter()
        .chain(&zero)
        .map(|c| c.per_cpu.len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    if r.no_aggregate {
        let _ = writeln!(out, "\nperf per CPU ({}), {ncpus} CPUs:", scope_words(r));
        out.push_str(&full_table(&busy));
    } else if r.per_node {
        let all: Vec<&CounterReading> = busy.iter().chain(&zero).copied().collect();
        let _ = writeln!(
            out,
            "\nperf per node ({}), {ncpus} CPUs; {}",
            scope_words(r),
            pernode::legend(&all, &r.nodes)
        );
        out.push_str(&pernode::per_node_table(&busy));
    } else {
        let _ = writeln!(
            out,
            "\nperf per CPU ({}), {ncpus} CPUs; imbalance = max/mean; every CPU: -A/--no-aggregate or the JSON",
            scope_words(r)
        );
        out.push_str(&summary_table(&busy));
    }
    // Below the summary and its notes on a multi-node host: the node totals.
    let node_totals = (!r.no_aggregate && !r.per_node && pernode::multi_node(&busy))
        .then(|| pernode::totals_table(&busy, &r.nodes));
    if !zero.is_empty() {
        let names: Vec<&str> = zero.iter().map(|c| c.metric.as_str()).collect();
        let _ = writeln!(out, "  zero on every CPU: {}", names.join(", "));
    }
    let multiplexed: Vec<String> = busy
        .iter()
        .filter_map(|c| {
            let worst = c
                .per_cpu
                .iter()
                .filter_map(|v| v.running)
                .reduce(f64::min)?;
            Some(format!(
                "{} (down to {:.1}% running)",
                c.metric,
                worst * 100.0
            ))
        })
        .collect();
    if !multiplexed.is_empty() {
        let _ = writeln!(
            out,
            "  multiplexed, scaled per CPU: {}",
            multiplexed.join(", ")
        );
    }
    out.extend(node_totals);
    Some(out)
}

/// One row per counter: total, min/median/max over CPUs, imbalance, CPUs
/// with any count, the busiest CPUs.
pub fn summary_table(counters: &[&CounterReading]) -> String {
    let rows: Vec<[String; 8]> = counters
        .iter()
        .filter_map(|c| {
            let s = Spread::of(&c.per_cpu, TOP_CPUS)?;
            let top: Vec<String> = s
                .top
                .iter()
                .map(|(cpu, v)| format!("cpu{cpu}:{}", fmt_value(*v)))
                .collect();
            Some([
                c.metric.clone(),
                fmt_value(s.total),
                fmt_value(s.min),
                fmt_value(s.median),
                fmt_value(s.max),
                s.imbalance.map_or("-".into(), |i| format!("{i:.2}")),
                format!("{}/{}", s.nonzero, s.cpus),
                top.join(" "),
            ])
        })
        .collect();
    let head = [
        "counter",
        "total",
        "min",
        "median",
        "max",
        "imbalance",
        "CPUs>0",
        "busiest CPUs",
    ];
    let mut w = head.map(str::len);
    for r in &rows {
        for (i, cell) in r.iter().enumerate() {
            w[i] = w[i].max(cell.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: [&str; 8]| {
        let _ = write!(out, "  {:<w0$}", cells[0], w0 = w[0]);
        for i in 1..7 {
            let _ = write!(out, "  {:>wi$}", cells[i], wi = w[i]);
        }
        let _ = writeln!(out, "  {}", cells[7]);
    };
    line(&mut out, head);
    for r in &rows {
        line(&mut out, std::array::from_fn(|i| r[i].as_str()));
    }
    out
}

/// The CPUs any of `counters` has a value on, ascending, each once.
pub fn counted_cpus(counters: &[&CounterReading]) -> Vec<usize> {
    let mut cpus: Vec<usize> = counters
        .iter()
        .flat_map(|c| c.per_cpu.iter().map(|v| v.cpu))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// `perf stat -A` as a matrix: one row per CPU, one column per counter
/// (those with a non-zero total), and a total row.
pub fn full_table(counters: &[&CounterReading]) -> String {
    let cpus = counted_cpus(counters);
    let cell = |c: &CounterReading, cpu: usize| {
        c.per_cpu
            .iter()
            .find(|v| v.cpu == cpu)
            .map_or("-".to_string(), |v| match v.running {
                // Enabled on this CPU but never running: unknown, as perf -A.
                Some(0.0) => "<not counted>".to_string(),
                _ => fmt_value(v.value),
            })
    };
    let totals: Vec<String> = counters
        .iter()
        .map(|c| fmt_value(c.per_cpu.iter().map(|v| v.value).sum()))
        .collect();
    let cpu_w = cpus
        .iter()
        .map(|c| format!("cpu{c}").len())
        .max()
        .unwrap_or(3)
        .max("total".len());
    let widths: Vec<usize> = counters
        .iter()
        .zip(&totals)
        .map(|(c, t)| c.metric.len().max(t.len()))
        .collect();
    let mut out = String::new();
    let _ = write!(out, "  {:<cpu_w$}", "CPU");
    for (c, w) in counters.iter().zip(&widths) {
        let _ = write!(out, "  {:>w$}", c.metric);
    }
    out.push('\n');
    for &cpu in &cpus {
        let _ = write!(out, "  {:<cpu_w$}", format!("cpu{cpu}"));
        for (c, w) in counters.iter().zip(&widths) {
            let _ = write!(out, "  {:>w$}", cell(c, cpu));
        }
        out.push('\n');
    }
    let _ = write!(out, "  {:<cpu_w$}", "total");
    for (t, w) in totals.iter().zip(&widths) {
        let _ = write!(out, "  {t:>w$}");
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(count: u64, enabled_ns: u64, running_ns: u64) -> Sample {
        Sample {
            count,
            enabled_ns,
            running_ns,
        }
    }

    fn cv(cpu: usize, value: f64) -> CpuValue {
        CpuValue {
            cpu,
            raw: value as u64,
            value,
            running: None,
        }
    }

    #[test]
    fn aggregate_scales_each_cpu_and_the_cpus_sum_to_the_total() {
        // cpu 4 ran the whole time, cpu 9 half of it (multiplexed), cpu 130
        // never ran (0 stays 0).
        let a = aggregate(
            &[s(100, 1000, 1000), s(50, 1000, 500), s(0, 1000, 0)],
            &[4, 9, 130],
            1.0,
            true,
        );
        assert_eq!(a.raw, 150);
        assert_eq!((a.enabled_ns, a.running_ns), (3000, 1500));
        assert_eq!(a.per_cpu.len(), 3);
        assert_eq!(a.per_cpu[0], cv(4, 100.0));
        assert_eq!(a.per_cpu[1].cpu, 9);
        assert_eq!(a.per_cpu[1].raw, 50);
        assert_eq!(a.per_cpu[1].value, 100.0, "50 counted in half the time");
        assert_eq!(a.per_cpu[1].running, Some(0.5));
        assert_eq!(a.per_cpu[2].value, 0.0);
        assert_eq!(a.per_cpu[2].running, Some(0.0));
        let sum: f64 = a.per_cpu.iter().map(|c| c.value).sum();
        assert_eq!(a.value, sum);
        assert_eq!(a.value, 200.0);
    }

    #[test]
    fn software_and_tracepoint_counts_are_exact_not_scaled() {
        // A cgroup tracepoint counter that ran 5 of 11 ms on a loaded CPU:
        // its 11 exits are all there were.
        let a = aggregate(
            &[s(11, 11_000, 5_000), s(0, 11_000, 0)],
            &[0, 1],
            1.0,
            false,
        );
        assert_eq!(a.value, 11.0);
        assert_eq!(a.per_cpu[0].value, 11.0);
        assert_eq!(
            a.per_cpu[0].running,
            Some(5.0 / 11.0),
            "the times are still reported"
        );
    }

    #[test]
    fn aggregate_divides_by_the_unit_scale_and_threads_have_no_cpu() {
        let a = aggregate(
            &[s(3_000_000, 1, 1), s(1_500_000, 1, 1)],
            &[0, 1],
            1e6,
            true,
        );
        assert_eq!(a.value, 4.5);
        assert_eq!(a.per_cpu[1].value, 1.5);
        let t = aggregate(&[s(3, 1, 1), s(4, 1, 1)], &[], 1.0, true);
        assert_eq!(t.value, 7.0);
        assert!(t.per_cpu.is_empty());
    }

    #[test]
    fn spread_median_imbalance_and_busiest() {
        let v: Vec<CpuValue> = [0.0, 10.0, 2.0, 0.0, 8.0, 10.0]
            .iter()
            .enumerate()
            .map(|(i, &x)| cv(i + 100, x))
            .collect();
        let s = Spread::of(&v, 3).unwrap();
        assert_eq!(s.cpus, 6);
        assert_eq!(s.total, 30.0);
        assert_eq!((s.min, s.median, s.max, s.mean), (0.0, 5.0, 10.0, 5.0));
        assert_eq!(s.imbalance, Some(2.0));
        assert_eq!(s.nonzero, 4);
        // Ties: the lower CPU number first.
        assert_eq!(s.top, vec![(101, 10.0), (105, 10.0), (104, 8.0)]);
        let odd = Spread::of(&v[..5], 10).unwrap();
        assert_eq!(odd.median, 2.0);
        assert_eq!(odd.top.len(), 3, "zero CPUs are not 'busiest'");
        let zero = Spread::of(&[cv(0, 0.0), cv(1, 0.0)], 3).unwrap();
        assert_eq!(zero.imbalance, None);
        assert!(zero.top.is_empty());
        assert!(Spread::of(&[], 3).is_none());
        // Everything on one of 128 CPUs: imbalance is the CPU count.
        let mut one: Vec<CpuValue> = (0..128).map(|c| cv(c, 0.0)).collect();
        one[77].value = 5.0;
        assert_eq!(Spread::of(&one, 3).unwrap().imbalance, Some(128.0));
    }

    fn counter(metric: &str, values: &[f64]) -> CounterReading {
        CounterReading {
            metric: metric.into(),
            event: format!("ev:{metric}"),
            unit: "calls".into(),
            raw: Some(values.iter().sum::<f64>() as u64),
            value: Some(values.iter().sum()),
            not_counted: false,
            time_enabled_ns: 1,
            time_running_ns: 1,
            fds: values.len(),
            optional: false,
            unavailable: None,
            per_cpu: values.iter().enumerate().map(|(i, &v)| cv(i, v)).collect(),
            per_node: Vec::new(),
        }
    }

    fn report(no_aggregate: bool, counters: Vec<CounterReading>) -> Report {
        Report {
            enabled: true,
            scope: Scope::System,
            method: Method::PerCpu,
            no_aggregate,
            counters,
            ..Default::default()
        }
    }

    #[test]
    fn compact_section_has_one_row_per_counter_not_a_column_per_cpu() {
        let mut futex = vec![1.0; 104];
        futex[3] = 900.0;
        futex[17] = 850.5;
        let r = report(
            false,
            vec![
                counter("sys_futex", &futex),
                counter("sys_futex_waitv", &[0.0; 104]),
            ],
        );
        let t = section(&r).unwrap();
        eprintln!("{t}");
        assert!(t.contains("104 CPUs"), "{t}");
        let row = t
            .lines()
            .find(|l| l.trim_start().starts_with("sys_futex "))
            .unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        // counter total min median max imbalance CPUs>0 busiest...
        assert_eq!(
            &cells[..7],
            ["sys_futex", "1852", "1", "1", "900", "50.53", "104/104"]
        );
        assert_eq!(&cells[7..], ["cpu3:900", "cpu17:850.5", "cpu0:1"]);
        assert!(t.contains("zero on every CPU: sys_futex_waitv"), "{t}");
        assert!(t.lines().count() < 8, "compact: {t}");
        assert!(!t.contains("cpu103"), "no per-CPU dump without -A: {t}");
    }

    #[test]
    fn no_aggregate_prints_every_cpu_and_a_total_row() {
        let r = report(
            true,
            vec![
                counter("sys_futex", &[3.0, 0.0, 5.0]),
                counter("task_exits", &[1.0, 2.0, 0.0]),
            ],
        );
        let t = section(&r).unwrap();
        eprintln!("{t}");
        let rows: Vec<Vec<&str>> = t
            .lines()
            .skip(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0], ["CPU", "sys_futex", "task_exits"]);
        assert_eq!(rows[1], ["cpu0", "3", "1"]);
        assert_eq!(rows[2], ["cpu1", "0", "2"]);
        assert_eq!(rows[3], ["cpu2", "5", "0"]);
        assert_eq!(rows[4], ["total", "8", "3"]);
    }

    #[test]
    fn multiplexing_is_named_and_inherited_counters_say_why_there_is_nothing() {
        let mut c = counter("cycles", &[10.0, 20.0]);
        c.per_cpu[1].running = Some(0.25);
        let t = section(&report(false, vec![c])).unwrap();
        assert!(t.contains("cycles (down to 25.0% running)"), "{t}");

        let mut inherit = report(false, vec![counter("sys_futex", &[])]);
        inherit.scope = Scope::Process;
        inherit.method = Method::Inherit;
        assert_eq!(section(&inherit), None, "nothing unless asked for");
        inherit.no_aggregate = true;
        assert!(section(&inherit).unwrap().contains("not available"));
        let off = Report::default();
        assert_eq!(section(&off), None);
    }

    #[test]
    fn json_keeps_every_cpu_and_old_reports_still_parse() {
        let r = report(false, vec![counter("sys_futex", &[1.0, 2.0])]);
        let j = r.to_json();
        let pc = &j["counters"][0]["per_cpu"];
        assert_eq!(pc[1]["cpu"], 1);
        assert_eq!(pc[1]["value"], 2.0);
        assert!(pc[1].get("running").is_none(), "only when multiplexed");
        assert_eq!(Report::from_json(&j), Some(r));
        // A report written before per-CPU values existed.
        let mut old = j.clone();
        old["counters"][0]
            .as_object_mut()
            .unwrap()
            .remove("per_cpu");
        old.as_object_mut().unwrap().remove("no_aggregate");
        let back = Report::from_json(&old).expect("old JSON parses");
        assert!(back.counters[0].per_cpu.is_empty());
    }

    #[test]
    fn multi_node_summary_gets_node_totals_and_per_node_replaces_it() {
        let nodes = vec![
            crate::host::NumaNode {
                id: 0,
                cpus: vec![0, 1],
            },
            crate::host::NumaNode {
                id: 1,
                cpus: vec![2, 3],
            },
        ];
        let map = crate::host::numa::NodeMap::from_nodes(nodes.clone());
        let mut counters = vec![counter("sys_futex", &[1.0, 2.0, 3.0, 4.0])];
        pernode::fill(&mut counters, &map);
        let mut r = report(false, counters);
        r.nodes = nodes;
        let t = section(&r).unwrap();
        eprintln!("{t}");
        assert!(t.contains("imbalance"), "{t}");
        assert!(t.contains("nodes: N0 0-1, N1 2-3"), "{t}");
        let row: Vec<&str> = t
            .lines()
            .filter(|l| l.trim_start().starts_with("sys_futex "))
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(row, ["sys_futex", "3", "7"]);
        r.per_node = true;
        let t = section(&r).unwrap();
        eprintln!("{t}");
        assert!(t.contains("perf per node (system scope"), "{t}");
        assert!(!t.contains("imbalance"), "{t}");
        assert!(
            t.lines().any(|l| l
                .split_whitespace()
                .eq(["N1", "2", "7", "70.0%", "sys_futex"])),
            "{t}"
        );
        // One node: the summary only.
        let mut one = vec![counter("sys_futex", &[1.0, 2.0])];
        pernode::fill(&mut one, &Default::default());
        assert!(!section(&report(false, one)).unwrap().contains("nodes:"));
    }
}
