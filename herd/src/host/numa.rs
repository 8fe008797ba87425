//! The NUMA node map: which node each CPU belongs to, read from
//! `/sys/devices/system/node/node<N>/cpulist`.
//!
//! Rules, so that every CPU lands in exactly one node:
//! * the nodes are the `node<N>` directories that exist; their ids may be
//!   sparse (nodes 0 and 2 only, or a memory-only node with an empty
//!   cpulist), and no CPU mask of fixed width is assumed anywhere;
//! * a node's CPUs are its `cpulist` as the kernel shows it now: an offline
//!   CPU may or may not be listed, so per-node figures count the CPUs that
//!   actually have a value, never the list's length;
//! * a CPU that no node lists (no NUMA sysfs at all, a kernel built without
//!   `CONFIG_NUMA`, a CPU brought online after the read) belongs to node 0,
//!   as the kernel itself puts every CPU of a non-NUMA machine in node 0.
//!   Without NUMA sysfs the whole machine is thus the single node 0.
//!
//! [`NodeMap::read_from`] takes the sysfs root so that tests build 2- and
//! 4-node layouts in a temporary directory; [`NodeMap::from_nodes`] takes
//! a parsed map.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::cpus::parse_cpu_list;
use super::NumaNode;

/// Where the kernel shows the NUMA nodes.
pub const NODE_SYSFS: &str = "/sys/devices/system/node";

/// CPU -> node, and the nodes in id order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMap {
    /// Every node with its listed CPUs, by id (empty without NUMA sysfs).
    nodes: Vec<NumaNode>,
    /// CPU -> node id, for the CPUs some node lists.
    of: BTreeMap<usize, usize>,
}

impl NodeMap {
    /// The machine's map ([`NODE_SYSFS`]).
    pub fn read() -> NodeMap {
        Self::read_from(Path::new(NODE_SYSFS))
    }

    /// The map under `root` (a directory with `node<N>/cpulist` files).
    /// A missing root or unreadable list gives fewer listed CPUs, never an
    /// error: those CPUs fall into node 0.
    pub fn read_from(root: &Path) -> NodeMap {
        let mut nodes = Vec::new();
        if let Ok(dir) = fs::read_dir(root) {
            for e in dir.flatten() {
                let name = e.file_name();
                let Some(id) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("node"))
                    .and_then(|n| n.parse::<usize>().ok())
                else {
                    continue;
                };
                let cpus = fs::read_to_string(e.path().join("cpulist"))
                    .ok()
                    .and_then(|l| parse_cpu_list(l.trim()).ok())
                    .unwrap_or_default();
                nodes.push(NumaNode { id, cpus });
            }
        }
        Self::from_nodes(nodes)
    }

    /// The map of already parsed nodes (sorted by id here). A CPU listed
    /// by two nodes stays in the first.
    pub fn from_nodes(mut nodes: Vec<NumaNode>) -> NodeMap {
        nodes.sort_by_key(|n| n.id);
        let mut of = BTreeMap::new();
        for n in &nodes {
            for &c in &n.cpus {
                of.entry(c).or_insert(n.id);
            }
        }
        NodeMap { nodes, of }
    }

    /// The node of `cpu` (node 0 when no node lists it).
    pub fn node_of(&self, cpu: usize) -> usize {
        self.of.get(&cpu).copied().unwrap_or(0)
    }

    /// The nodes as sysfs shows them, by id.
    pub fn nodes(&self) -> &[NumaNode] {
        &self.nodes
    }

    /// `cpus` grouped by node: node id -> its CPUs among `cpus`, ascending;
    /// only nodes with at least one of them.
    pub fn group(&self, cpus: &[usize]) -> BTreeMap<usize, Vec<usize>> {
        let mut g: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &c in cpus {
            g.entry(self.node_of(c)).or_default().push(c);
        }
        for v in g.values_mut() {
            v.sort_unstable();
            v.dedup();
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(layout: &[(usize, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (id, list) in layout {
            let n = d.path().join(format!("node{id}"));
            fs::create_dir(&n).unwrap();
            fs::write(n.join("cpulist"), format!("{list}\n")).unwrap();
        }
        // Files the kernel puts beside the node directories.
        fs::write(d.path().join("online"), "0-1\n").unwrap();
        fs::create_dir(d.path().join("power")).unwrap();
        d
    }

    #[test]
    fn two_nodes_from_sysfs() {
        let d = fake(&[(0, "0-7"), (1, "8-15")]);
        let m = NodeMap::read_from(d.path());
        assert_eq!(m.nodes().len(), 2);
        assert_eq!((m.node_of(3), m.node_of(8), m.node_of(15)), (0, 1, 1));
        let g = m.group(&(0..16).collect::<Vec<_>>());
        assert_eq!(g[&0], (0..8).collect::<Vec<_>>());
        assert_eq!(g[&1], (8..16).collect::<Vec<_>>());
        assert_eq!(m.group(&[0, 8]).len(), 2);
        assert_eq!(m.group(&[0, 7]).len(), 1);
    }

    #[test]
    fn four_interleaved_sparse_nodes_and_an_empty_one() {
        // Nodes 0, 2, 5, 7 (sparse ids), CPUs interleaved as some BIOSes
        // number SMT siblings, beyond 128, and a memory-only node 9.
        let d = fake(&[
            (7, "3,7,131"),
            (0, "0,4,128"),
            (2, "1,5,129"),
            (5, "2,6,130"),
            (9, ""),
        ]);
        let m = NodeMap::read_from(d.path());
        let ids: Vec<usize> = m.nodes().iter().map(|n| n.id).collect();
        assert_eq!(ids, [0, 2, 5, 7, 9]);
        assert_eq!(m.node_of(131), 7);
        assert_eq!(m.node_of(129), 2);
        let g = m.group(&[0, 1, 2, 3, 128, 131]);
        assert_eq!(g.keys().copied().collect::<Vec<_>>(), [0, 2, 5, 7]);
        assert_eq!(g[&7], [3, 131]);
    }

    #[test]
    fn unlisted_and_offline_cpus_and_no_sysfs() {
        // CPU 5 is offline and its node does not list it; CPU 6 came online
        // after the read: both count in node 0.
        let d = fake(&[(0, "0-3"), (1, "4,7")]);
        let m = NodeMap::read_from(d.path());
        assert_eq!((m.node_of(5), m.node_of(6), m.node_of(7)), (0, 0, 1));
        // No NUMA sysfs: one node 0 holding every CPU.
        let none = NodeMap::read_from(&d.path().join("absent"));
        assert!(none.nodes().is_empty());
        let g = none.group(&[0, 300, 511]);
        assert_eq!(g.len(), 1);
        assert_eq!(g[&0], [0, 300, 511]);
    }

    #[test]
    fn parsed_maps_work_the_same_and_a_cpu_listed_twice_stays_first() {
        let m = NodeMap::from_nodes(vec![
            NumaNode {
                id: 3,
                cpus: vec![2, 3],
            },
            NumaNode {
                id: 1,
                cpus: vec![0, 1, 2],
            },
        ]);
        assert_eq!(m.nodes()[0].id, 1);
        assert_eq!((m.node_of(2), m.node_of(3)), (1, 3));
    }
}
