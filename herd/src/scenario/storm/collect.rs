//! What the storm learns from its threads' records once they have exited:
//! the create/start/exit latency histograms and where each thread started
//! and exited (placement), and their shapes in the run result.
//!
//! Exit latency is three histograms, because three different paths end a
//! storm thread and mixing them made the percentiles meaningless:
//! * `exit`: stopped while asleep (the request found the thread blocked
//!   in its sleep): request to exit destructor, the exit path proper;
//! * `exit_spinning`: the request came while the thread still spun; a
//!   deferred cancel (or the stop flag) acts only at the sleep, so this
//!   latency includes the rest of the spin;
//! * `exit_own`: the sleep ran out before any request: end of the sleep to
//!   exit destructor.
//!
//! And `exit_done`: for the threads of `exit`, the request to the end of
//! the exit destructor, so the exit hook's time included. It is the one
//! exit latency that compares every `--cleanup` strategy: some do their
//! exit work in the hook (after `exit`'s end point), others in
//! thread-local destructors (before it).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use hdrhistogram::Histogram;
use serde_json::json;

use super::Config;
use crate::host::numa::NodeMap;
use crate::result::{Metric, RunResult};
use crate::spawn::ThreadRec;

/// Latency histograms and placement, filled from exited threads' records.
pub(super) struct Collector {
    pub(super) create: Histogram<u64>,
    pub(super) start: Histogram<u64>,
    pub(super) exit: Histogram<u64>,
    pub(super) exit_spinning: Histogram<u64>,
    pub(super) exit_own: Histogram<u64>,
    pub(super) exit_hook: Histogram<u64>,
    pub(super) exit_done: Histogram<u64>,
    pub(super) per_cpu_start: BTreeMap<i32, u64>,
    pub(super) per_cpu_exit: BTreeMap<i32, u64>,
    pub(super) ended_by_request: u64,
    /// Of `ended_by_request`, those asked while still spinning.
    pub(super) ended_spinning: u64,
    pub(super) ended_on_own: u64,
    pub(super) harvested: u64,
}

fn histogram() -> Histogram<u64> {
    // 1 ns .. 1 hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Collector {
    pub(super) fn new() -> Self {
        Collector {
            create: histogram(),
            start: histogram(),
            exit: histogram(),
            exit_spinning: histogram(),
            exit_own: histogram(),
            exit_hook: histogram(),
            exit_done: histogram(),
            per_cpu_start: BTreeMap::new(),
            per_cpu_exit: BTreeMap::new(),
            ended_by_request: 0,
            ended_spinning: 0,
            ended_on_own: 0,
            harvested: 0,
        }
    }

    /// Adds an exited thread's record.
    pub(super) fn add(&mut self, r: &ThreadRec) {
        let exit = r.exit_ns.load(Ordering::Acquire);
        let create = r.create_ns.load(Ordering::Relaxed);
        let start = r.start_ns.load(Ordering::Relaxed);
        if start != 0 {
            self.start
                .saturating_record(start.saturating_sub(create).max(1));
            *self
                .per_cpu_start
                .entry(r.start_cpu.load(Ordering::Relaxed))
                .or_default() += 1;
        }
        *self
            .per_cpu_exit
            .entry(r.exit_cpu.load(Ordering::Relaxed))
            .or_default() += 1;
        let own = r.self_end_ns.load(Ordering::Relaxed);
        let req = r.cancel_ns.load(Ordering::Relaxed);
        let spin_end = r.spin_end_ns.load(Ordering::Relaxed);
        let hook_ns = r.exit_hook_ns.load(Ordering::Relaxed);
        let (hist, from) = if own != 0 {
            self.ended_on_own += 1;
            (&mut self.exit_own, own)
        } else if spin_end == 0 || req < spin_end {
            // Asked while spinning (or a spin that never ended).
            self.ended_by_request += 1;
            self.ended_spinning += 1;
            (&mut self.exit_spinning, req)
        } else {
            self.ended_by_request += 1;
            if req != 0 {
                self.exit_done
                    .saturating_record((exit.saturating_sub(req) + hook_ns).max(1));
            }
            (&mut self.exit, req)
        };
        if from != 0 {
            hist.saturating_record(exit.saturating_sub(from).max(1));
        }
        if r.body.hooks.on_exit.is_some() {
            self.exit_hook.saturating_record(hook_ns.max(1));
        }
        self.harvested += 1;
    }
}

/// Adds a wave's records to the collector once every thread of it has
/// exited, and frees them; a wave with threads still running is kept
/// whole in `pending` (its records must not move or be freed yet).
pub(super) fn harvest(c: &mut Collector, recs: Vec<ThreadRec>, pending: &mut Vec<Vec<ThreadRec>>) {
    if recs.iter().all(ThreadRec::exited) {
        recs.iter().for_each(|r| c.add(r));
    } else {
        pending.push(recs);
    }
}

pub(super) fn push_hist(r: &mut RunResult, name: &str, h: &Histogram<u64>) {
    if h.is_empty() {
        return;
    }
    for (q, label) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
        r.push(Metric::lower(
            &format!("{name}_{label}_us"),
            "us",
            h.value_at_quantile(q) as f64 / 1e3,
        ));
    }
    r.push(Metric::lower(
        &format!("{name}_max_us"),
        "us",
        h.max() as f64 / 1e3,
    ));
}

/// Placement summary: per-CPU counts at start and exit, CPUs used,
/// imbalance (largest per-CPU start count over the mean across the
/// requested CPUs; 1.0 is perfectly even), and the same per NUMA node of
/// `nodes` (see [`per_node`]).
pub(super) fn placement(cfg: &Config, c: &Collector, nodes: &NodeMap) -> serde_json::Value {
    let pairs = |m: &BTreeMap<i32, u64>| -> Vec<(i64, u64)> {
        m.iter().map(|(&k, &v)| (k as i64, v)).collect()
    };
    let mut used: Vec<i32> = c
        .per_cpu_start
        .keys()
        .chain(c.per_cpu_exit.keys())
        .copied()
        .filter(|&k| k >= 0)
        .collect();
    used.sort_unstable();
    used.dedup();
    let total: u64 = c.per_cpu_start.values().sum();
    let max = c.per_cpu_start.values().copied().max().unwrap_or(0);
    let mean = total as f64 / cfg.cpus.len().max(1) as f64;
    let imbalance = if total > 0 { max as f64 / mean } else { 0.0 };
    // Threads seen (at start or exit) on a CPU outside --cpus: should be 0.
    let outside = |m: &BTreeMap<i32, u64>| -> u64 {
        m.iter()
            .filter(|(&k, _)| k < 0 || cfg.cpus.binary_search(&(k as usize)).is_err())
            .map(|(_, &v)| v)
            .sum()
    };
    json!({
        "cpus_requested": cfg.cpus,
        "per_cpu_start": pairs(&c.per_cpu_start),
        "per_cpu_exit": pairs(&c.per_cpu_exit),
        "cpus_used": used.len(),
        "cpus_used_list": used,
        "imbalance": imbalance,
        "outside_requested_start": outside(&c.per_cpu_start),
        "outside_requested_exit": outside(&c.per_cpu_exit),
        "per_node": per_node(cfg, c, nodes),
    })
}

/// Threads per NUMA node at start and at exit: `[{node, cpus,
/// cpus_requested, start, exit}]` by node id (`cpus`: the requested CPUs
/// in the node), for every node with a requested CPU or a thread. A
/// thread whose CPU is unknown (-1) is in no node (it is counted in
/// `outside_requested_*`).
pub(super) fn per_node(cfg: &Config, c: &Collector, nodes: &NodeMap) -> serde_json::Value {
    let mut rows: BTreeMap<usize, (Vec<usize>, u64, u64)> = BTreeMap::new();
    for &cpu in &cfg.cpus {
        rows.entry(nodes.node_of(cpu)).or_default().0.push(cpu);
    }
    for (m, start) in [(&c.per_cpu_start, true), (&c.per_cpu_exit, false)] {
        for (&cpu, &n) in m {
            let Ok(cpu) = usize::try_from(cpu) else {
                continue;
            };
            let row = rows.entry(nodes.node_of(cpu)).or_default();
            if start {
                row.1 += n;
            } else {
                row.2 += n;
            }
        }
    }
    rows.into_iter()
        .map(|(node, (cpus, start, exit))| {
            json!({
                "node": node,
                "cpus": cpus,
                "cpus_requested": cpus.len(),
                "start": start,
                "exit": exit,
            })
        })
        .collect()
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::{Body, Cancel};

    fn rec(body: &'static Body, spin_end: u64, cancel: u64, own: u64, exit: u64) -> ThreadRec {
        let r = ThreadRec::new(body, crate::spawn::NO_PIN);
        r.create_ns.store(1, Ordering::Relaxed);
        r.start_ns.store(2, Ordering::Relaxed);
        r.spin_end_ns.store(spin_end, Ordering::Relaxed);
        r.cancel_ns.store(cancel, Ordering::Relaxed);
        r.self_end_ns.store(own, Ordering::Relaxed);
        r.exit_ns.store(exit, Ordering::Release);
        r
    }

    #[test]
    fn exit_latencies_of_the_three_paths_are_kept_apart() {
        let body = Body {
            spin: 0,
            sleep_ns: 0,
            cancel: Cancel::Pthread,
            pin_masks: Vec::new(),
            hooks: Default::default(),
            exits: Default::default(),
        }
        .leak();
        let mut c = Collector::new();
        // Asleep when cancelled: 1 us exit path.
        c.add(&rec(body, 100, 1_000, 0, 2_000));
        c.add(&rec(body, 100, 1_000, 0, 2_000));
        // Cancelled mid-spin: 5 ms, most of it the rest of the spin.
        c.add(&rec(body, 5_000_000, 1_000, 0, 5_001_000));
        // Ended on its own: 3 us after its sleep ran out.
        c.add(&rec(body, 100, 0, 10_000, 13_000));
        assert_eq!(
            (c.exit.len(), c.exit_spinning.len(), c.exit_own.len()),
            (2, 1, 1)
        );
        assert!(
            c.exit.max() < 1_100,
            "the mid-spin 5 ms is not in exit: {}",
            c.exit.max()
        );
        assert!(c.exit_spinning.min() >= 4_990_000);
        assert_eq!(
            (c.ended_by_request, c.ended_spinning, c.ended_on_own),
            (3, 1, 1)
        );
    }
}
