//! What the storm learns from its threads' records once they have exited:
//! the create/start/exit latency histograms and where each thread started
//! and exited (placement), and their shapes in the run result.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use hdrhistogram::Histogram;
use serde_json::json;

use super::Config;
use crate::result::{Metric, RunResult};
use crate::spawn::ThreadRec;

/// Latency histograms and placement, filled from exited threads' records.
pub(super) struct Collector {
    pub(super) create: Histogram<u64>,
    pub(super) start: Histogram<u64>,
    pub(super) exit: Histogram<u64>,
    pub(super) exit_hook: Histogram<u64>,
    pub(super) per_cpu_start: BTreeMap<i32, u64>,
    pub(super) per_cpu_exit: BTreeMap<i32, u64>,
    pub(super) ended_by_request: u64,
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
            exit_hook: histogram(),
            per_cpu_start: BTreeMap::new(),
            per_cpu_exit: BTreeMap::new(),
            ended_by_request: 0,
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
        let from = if own != 0 {
            self.ended_on_own += 1;
            own
        } else {
            self.ended_by_request += 1;
            req
        };
        if from != 0 {
            self.exit
                .saturating_record(exit.saturating_sub(from).max(1));
        }
        if r.body.hooks.on_exit.is_some() {
            self.exit_hook
                .saturating_record(r.exit_hook_ns.load(Ordering::Relaxed).max(1));
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

pub(super) fn hist_json(h: &Histogram<u64>) -> serde_json::Value {
    if h.is_empty() {
        return json!({"count": 0});
    }
    json!({
        "count": h.len(),
        "unit": "ns",
        "min": h.min(),
        "mean": h.mean(),
        "p50": h.value_at_quantile(0.50),
        "p90": h.value_at_quantile(0.90),
        "p99": h.value_at_quantile(0.99),
        "max": h.max(),
    })
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
/// requested CPUs; 1.0 is perfectly even).
pub(super) fn placement(cfg: &Config, c: &Collector) -> serde_json::Value {
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
    })
}
