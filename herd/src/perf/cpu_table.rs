//! The per-CPU and per-NUMA-node sections of herd's table output, from a
//! [`Report`]'s per-CPU values ([`super::percpu`]) and their per-node sums
//! ([`super::pernode`]).
//!
//! Per CPU: a compact view per counter (total, min, median, max over the
//! CPUs, imbalance = max/mean, how many CPUs saw any, and the busiest
//! CPUs), not a column per CPU: on a 104-CPU server that is what shows
//! whether the contention was spread out or piled onto a few CPUs.
//! `--no-aggregate` (`-A`, perf stat's name) prints one row per CPU instead.
//!
//! Per node, by default on a machine with more than one node: below the
//! per-CPU summary, a small table with one row per counter and one column
//! per node. At 4-8 nodes x ~10 counters that is ten lines of at most
//! about 100 columns, in the same row order as the summary just above, and
//! a skew across sockets reads along one row; `perf stat --per-node`'s
//! layout (a row per node per counter) would be 40-80 lines, and pairs
//! like `N0:12 N1:9` appended to the summary rows do not line up. With
//! `--per-node`: exactly `perf stat --per-node`'s layout, one row per node
//! per counter (node, CPUs in it, value, counter), grouped by node, plus
//! each node's share of the counter's total, in place of the per-CPU
//! summary.

use std::fmt::Write as _;

use super::percpu::Spread;
use super::{CounterReading, Method, Report, Scope};
use crate::format::fmt_value;
use crate::host::format_cpu_list;
use crate::host::numa::NodeMap;

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
            legend(&all, &r.nodes)
        );
        out.push_str(&per_node_table(&busy));
    } else {
        let _ = writeln!(
            out,
            "\nperf per CPU ({}), {ncpus} CPUs; imbalance = max/mean; every CPU: -A/--no-aggregate or the JSON",
            scope_words(r)
        );
        out.push_str(&summary_table(&busy));
    }
    // Below the summary and its notes on a multi-node host: the node totals.
    let node_totals = (!r.no_aggregate && !r.per_node && multi_node(&busy))
        .then(|| totals_table(&busy, &r.nodes));
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

/// The node ids any of `counters` has a value on, ascending.
fn node_ids(counters: &[&CounterReading]) -> Vec<usize> {
    let mut ids: Vec<usize> = counters
        .iter()
        .flat_map(|c| c.per_node.iter().map(|n| n.node))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// True when the counters were counted on more than one node.
pub fn multi_node(counters: &[&CounterReading]) -> bool {
    node_ids(counters).len() > 1
}

/// `N0 0-7, N1 8-15`: which CPUs each node holds, from the map the
/// run read (`perf.nodes`), for the nodes the counters were on.
pub fn legend(counters: &[&CounterReading], nodes: &[crate::host::NumaNode]) -> String {
    let map = NodeMap::from_nodes(nodes.to_vec());
    let parts: Vec<String> = map
        .group(&counted_cpus(counters))
        .iter()
        .map(|(n, members)| format!("N{n} {}", format_cpu_list(members)))
        .collect();
    parts.join(", ")
}

/// Below the per-CPU summary: one row per counter, one column per node.
pub fn totals_table(counters: &[&CounterReading], nodes: &[crate::host::NumaNode]) -> String {
    let ids = node_ids(counters);
    let head: Vec<String> = std::iter::once("per node".to_string())
        .chain(ids.iter().map(|n| format!("N{n}")))
        .collect();
    let rows: Vec<Vec<String>> = counters
        .iter()
        .map(|c| {
            std::iter::once(c.metric.clone())
                .chain(ids.iter().map(|id| {
                    c.per_node
                        .iter()
                        .find(|n| n.node == *id)
                        .map_or("-".into(), |n| fmt_value(n.value))
                }))
                .collect()
        })
        .collect();
    let mut w: Vec<usize> = head.iter().map(String::len).collect();
    for r in &rows {
        for (i, cell) in r.iter().enumerate() {
            w[i] = w[i].max(cell.len());
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "  nodes: {}", legend(counters, nodes));
    for r in std::iter::once(&head).chain(&rows) {
        let _ = write!(out, "  {:<w0$}", r[0], w0 = w[0]);
        for (cell, wi) in r.iter().zip(&w).skip(1) {
            let _ = write!(out, "  {cell:>wi$}");
        }
        out.push('\n');
    }
    out
}

/// `perf stat --per-node`: one row per node per counter, grouped by node:
/// node, CPUs counted in it, value, share of the counter's total, counter.
pub fn per_node_table(counters: &[&CounterReading]) -> String {
    let mut rows: Vec<[String; 5]> = Vec::new();
    for id in node_ids(counters) {
        for c in counters {
            let Some(n) = c.per_node.iter().find(|n| n.node == id) else {
                continue;
            };
            let total: f64 = c.per_node.iter().map(|n| n.value).sum();
            let share = if total > 0.0 {
                format!("{:.1}%", 100.0 * n.value / total)
            } else {
                "-".into()
            };
            rows.push([
                format!("N{id}"),
                n.cpus.to_string(),
                fmt_value(n.value),
                share,
                c.metric.clone(),
            ]);
        }
    }
    let head = ["node", "CPUs", "value", "share", "counter"].map(String::from);
    let mut w = [0usize; 5];
    for r in std::iter::once(&head).chain(&rows) {
        for (i, cell) in r.iter().enumerate() {
            w[i] = w[i].max(cell.len());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&head).chain(&rows) {
        let _ = writeln!(
            out,
            "  {:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::NumaNode;
    use crate::perf::percpu::CpuValue;
    use crate::perf::pernode::per_node;
    use crate::perf::report::fill_per_node;

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
            per_cpu: values
                .iter()
                .enumerate()
                .map(|(i, &v)| CpuValue::exact(i, v))
                .collect(),
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
        let nodes = vec![NumaNode::of(0, 0..2), NumaNode::of(1, 2..4)];
        let map = NodeMap::from_nodes(nodes.clone());
        let mut counters = vec![counter("sys_futex", &[1.0, 2.0, 3.0, 4.0])];
        fill_per_node(&mut counters, &map);
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
        fill_per_node(&mut one, &Default::default());
        assert!(!section(&report(false, one)).unwrap().contains("nodes:"));
    }

    fn reading(metric: &str, per_cpu: Vec<CpuValue>, map: &NodeMap) -> CounterReading {
        let total = per_cpu.iter().map(|c| c.value).sum();
        CounterReading {
            metric: metric.into(),
            event: format!("ev:{metric}"),
            unit: "calls".into(),
            raw: Some(total as u64),
            value: Some(total),
            not_counted: false,
            time_enabled_ns: 1,
            time_running_ns: 1,
            fds: per_cpu.len(),
            optional: false,
            unavailable: None,
            per_node: per_node(&per_cpu, map),
            per_cpu,
        }
    }

    #[test]
    fn tables_node_columns_and_perf_stat_rows() {
        let nodes = vec![NumaNode::of(0, 0..4), NumaNode::of(2, 4..8)];
        let map = NodeMap::from_nodes(nodes.clone());
        let futex = reading(
            "sys_futex",
            (0..8)
                .map(|c| CpuValue::exact(c, 10.0 * c as f64))
                .collect(),
            &map,
        );
        let exits = reading(
            "task_exits",
            (0..8).map(|c| CpuValue::exact(c, 1.0)).collect(),
            &map,
        );
        let cs = [&futex, &exits];
        assert!(multi_node(&cs));
        let t = totals_table(&cs, &nodes);
        eprintln!("{t}");
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["nodes:", "N0", "0-3,", "N2", "4-7"]);
        assert_eq!(lines[1], ["per", "node", "N0", "N2"]);
        assert_eq!(lines[2], ["sys_futex", "60", "220"]);
        assert_eq!(lines[3], ["task_exits", "4", "4"]);

        let p = per_node_table(&cs);
        eprintln!("{p}");
        let rows: Vec<Vec<&str>> = p.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["node", "CPUs", "value", "share", "counter"]);
        assert_eq!(rows[1], ["N0", "4", "60", "21.4%", "sys_futex"]);
        assert_eq!(rows[2], ["N0", "4", "4", "50.0%", "task_exits"]);
        assert_eq!(rows[3], ["N2", "4", "220", "78.6%", "sys_futex"]);
        assert_eq!(rows[4], ["N2", "4", "4", "50.0%", "task_exits"]);
        assert_eq!(rows.len(), 5);

        let single = NodeMap::default();
        let one = reading(
            "sys_futex",
            vec![CpuValue::exact(0, 1.0), CpuValue::exact(1, 2.0)],
            &single,
        );
        assert!(!multi_node(&[&one]));
    }
}
