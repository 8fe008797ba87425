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
//! Output (the tables are [`super::cpu_table`]'s):
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

use serde::{Deserialize, Serialize};

use super::percpu::CpuValue;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::NumaNode;

    fn sum(v: &[NodeValue]) -> f64 {
        v.iter().map(|n| n.value).sum()
    }

    #[test]
    fn two_nodes_sum_to_the_total() {
        let map = NodeMap::from_nodes(vec![NumaNode::of(0, 0..8), NumaNode::of(1, 8..16)]);
        let pc: Vec<CpuValue> = (0..16)
            .map(|c| CpuValue::exact(c, (c + 1) as f64))
            .collect();
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
                .map(|k| NumaNode::of(2 * k, (0..512).filter(move |c| c % 4 == k)))
                .collect(),
        );
        let pc: Vec<CpuValue> = (0..512)
            .map(|c| CpuValue::exact(c, if c % 4 == 3 { 5.0 } else { 1.0 }))
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
        let map = NodeMap::from_nodes(vec![
            NumaNode::of(0, 0..4),
            NumaNode::of(1, 4..8),
            NumaNode::of(3, 10..12),
        ]);
        let pc = [
            CpuValue::exact(0, 1.0),
            CpuValue::exact(3, 2.0),
            CpuValue::exact(4, 10.0),
            CpuValue::exact(5, 20.0),
            CpuValue::exact(9, 4.0),
        ];
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
}
