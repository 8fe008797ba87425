//! Per-NUMA-node counter values: the per-CPU values ([`super::percpu`])
//! summed over each node's CPUs, which is what a two-socket user asks
//! first (is the contention on one socket, or across both?).
//!
//! Node membership is [`crate::host::numa::NodeMap`] (sysfs
//! `node<N>/cpulist`; a CPU no node lists is node 0, so a machine without
//! NUMA sysfs is the single node 0). A node's `cpus` is the number of its
//! CPUs that have a value, as `perf stat --per-node` prints it, so an
//! offline CPU (no counter on it) is not counted; a node none of whose
//! CPUs was counted has no entry. The node values sum to the total,
//! because every CPU is in exactly one node.
//!
//! Output:
//! * JSON, always: `perf.counters[i].per_node` (`[{node, cpus, value}]`)
//!   and the node map itself (`perf.nodes`).
//! * Table, by default on a machine with more than one node: below the
//!   per-CPU summary, a small table with one row per counter and one column
//!   per node. At 4-8 nodes x ~10 counters that is ten lines of at most
//!   about 100 columns, in the same row order as the summary just above, and
//!   a skew across sockets reads along one row; `perf stat --per-node`'s
//!   layout (a row per node per counter) would be 40-80 lines, and pairs
//!   like `N0:12 N1:9` appended to the summary rows do not line up.
//! * Table with `--per-node`: exactly `perf stat --per-node`'s layout,
//!   one row per node per counter (node, CPUs in it, value, counter),
//!   grouped by node, plus each node's share of the counter's total, in
//!   place of the per-CPU summary.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::percpu::{counted_cpus, CpuValue};
use super::CounterReading;
use crate::format::fmt_value;
use crate::host::format_cpu_list;
use crate::host::numa::NodeMap;

/// One node's sum of one counter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeValue {
    /// The node id (`/sys/devices/system/node/node<N>`).
    pub node: usize,
    /// Its CPUs that have a value (summed here).
    pub cpus: usize,
    /// The sum of their values, in the counter's unit.
    pub value: f64,
}

/// `per_cpu` summed per node of `map`, by node id; nodes without a
/// counted CPU are left out.
pub fn per_node(per_cpu: &[CpuValue], map: &NodeMap) -> Vec<NodeValue> {
    let mut out: Vec<NodeValue> = Vec::new();
    let cpus: Vec<usize> = per_cpu.iter().map(|c| c.cpu).collect();
    for (node, members) in map.group(&cpus) {
        let value = per_cpu
            .iter()
            .filter(|c| members.binary_search(&c.cpu).is_ok())
            .map(|c| c.value)
            .sum();
        out.push(NodeValue {
            node,
            cpus: members.len(),
            value,
        });
    }
    out
}

/// Fills every counter's `per_node` from its `per_cpu`.
pub fn fill(counters: &mut [CounterReading], map: &NodeMap) {
    for c in counters {
        c.per_node = per_node(&c.per_cpu, map);
    }
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

    fn cv(cpu: usize, value: f64) -> CpuValue {
        CpuValue {
            cpu,
            raw: value as u64,
            value,
            running: None,
        }
    }

    fn node(id: usize, cpus: impl IntoIterator<Item = usize>) -> NumaNode {
        NumaNode {
            id,
            cpus: cpus.into_iter().collect(),
        }
    }

    fn sum(v: &[NodeValue]) -> f64 {
        v.iter().map(|n| n.value).sum()
    }

    #[test]
    fn two_nodes_sum_to_the_total() {
        let map = NodeMap::from_nodes(vec![node(0, 0..8), node(1, 8..16)]);
        let pc: Vec<CpuValue> = (0..16).map(|c| cv(c, (c + 1) as f64)).collect();
        let n = per_node(&pc, &map);
        assert_eq!(
            n,
            vec![
                NodeValue {
                    node: 0,
                    cpus: 8,
                    value: 36.0
                },
                NodeValue {
                    node: 1,
                    cpus: 8,
                    value: 100.0
                }
            ]
        );
        assert_eq!(sum(&n), pc.iter().map(|c| c.value).sum::<f64>());
    }

    #[test]
    fn four_sparse_interleaved_nodes_at_512_cpus() {
        // Nodes 0, 2, 4, 6; CPU c in node 2 * (c % 4); 512 CPUs.
        let map = NodeMap::from_nodes(
            (0..4)
                .map(|k| node(2 * k, (0..512).filter(move |c| c % 4 == k)))
                .collect(),
        );
        let pc: Vec<CpuValue> = (0..512)
            .map(|c| cv(c, if c % 4 == 3 { 5.0 } else { 1.0 }))
            .collect();
        let n = per_node(&pc, &map);
        let ids: Vec<usize> = n.iter().map(|n| n.node).collect();
        assert_eq!(ids, [0, 2, 4, 6]);
        assert!(n.iter().all(|n| n.cpus == 128));
        assert_eq!(n[3].value, 640.0);
        assert_eq!(n[0].value, 128.0);
        assert_eq!(sum(&n), 128.0 * 3.0 + 640.0);
    }

    #[test]
    fn offline_cpus_unlisted_cpus_and_nodes_never_counted() {
        // Node 1 lists CPUs 4-7 but 6 and 7 are offline (no counter on
        // them); CPU 9 is in no node (node 0); node 3 has no counted CPU.
        let map = NodeMap::from_nodes(vec![node(0, 0..4), node(1, 4..8), node(3, 10..12)]);
        let pc = [cv(0, 1.0), cv(3, 2.0), cv(4, 10.0), cv(5, 20.0), cv(9, 4.0)];
        let n = per_node(&pc, &map);
        assert_eq!(n.len(), 2, "node 3 was never counted: {n:?}");
        assert_eq!((n[0].node, n[0].cpus, n[0].value), (0, 3, 7.0));
        assert_eq!((n[1].node, n[1].cpus, n[1].value), (1, 2, 30.0));
        // No NUMA sysfs: everything is node 0.
        let one = per_node(&pc, &NodeMap::default());
        assert_eq!(
            (one.len(), one[0].node, one[0].cpus, one[0].value),
            (1, 0, 5, 37.0)
        );
        assert!(per_node(&[], &map).is_empty());
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
        let nodes = vec![node(0, 0..4), node(2, 4..8)];
        let map = NodeMap::from_nodes(nodes.clone());
        let futex = reading(
            "sys_futex",
            (0..8).map(|c| cv(c, 10.0 * c as f64)).collect(),
            &map,
        );
        let exits = reading("task_exits", (0..8).map(|c| cv(c, 1.0)).collect(), &map);
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
        let one = reading("sys_futex", vec![cv(0, 1.0), cv(1, 2.0)], &single);
        assert!(!multi_node(&[&one]));
    }
}
