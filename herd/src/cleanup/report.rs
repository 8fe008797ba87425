//! What a run's cleanup did, checked: the counts every strategy must get
//! right (each cleanup exactly once, no freed entry reached, statistics
//! adding up), exitq's counters, and their metrics and warnings.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::reclaimers::Drive;
use super::registry::{lock, Shared};
use super::timeline::{self, Timeline};
use crate::result::Metric;

/// What a run's cleanup did, checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The strategy.
    pub strategy: String,
    /// `--cleanup-work`.
    pub work: usize,
    /// Threads that registered.
    pub registered: u64,
    /// Cleanups that ran.
    pub cleaned: u64,
    /// Registered threads whose cleanup did not run.
    pub missing: u64,
    /// Cleanups that ran more than once for the same thread.
    pub repeated: u64,
    /// Global counters that differ from the sum of the contributions
    /// (0 or 1: one comparison of the totals).
    pub merge_errors: u64,
    /// Entries reached by a reader after they were freed (or cycles).
    pub violations: u64,
    /// Monitor walks.
    pub walks: u64,
    /// Entries visited per walk, on average.
    pub entries_per_walk: f64,
    /// exitq's counters (exitq, sync, expedited).
    pub exitq: Option<ExitqStats>,
    /// Latency to free, memory held, exit work (`timeline.rs`).
    #[serde(default)]
    pub timeline: Timeline,
    /// Entries freed only while herd drove the library at the end.
    #[serde(default)]
    pub frees_at_finish: u64,
    /// How herd drove a library strategy's reclaimer at the end.
    #[serde(default)]
    pub drive: Option<Drive>,
}

/// The subset of [`exitq::DomainStats`] a comparison shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitqStats {
    /// Grace periods completed.
    pub grace_periods: u64,
    /// synchronize / synchronize_expedited calls.
    pub synchronize_calls: u64,
    /// Exit hooks that ran.
    pub exits_run: u64,
    /// Callbacks and hooks that ran.
    pub callbacks_run: u64,
    /// Reclaim passes that found work.
    pub passes: u64,
    /// Largest batch run after one grace period.
    pub max_batch: u64,
    /// Callbacks that panicked.
    pub callbacks_panicked: u64,
    /// Readers reported for stalling a grace period.
    pub stalls: u64,
}

/// The report of a finished run (every hook, the reclaimer and the
/// monitor happen-before this: see [`super::Cleanup::finish`]; `end_ns`:
/// when the finish began).
pub(super) fn of(s: &Shared, drive: Option<Drive>, end_ns: u64) -> Report {
    // Relaxed loads: the exit hooks, the reclaimer and the monitor
    // happen-before this point (exit_barrier/barrier, join, and the
    // caller's wait for every exit destructor).
    let registered = s.registered.load(Ordering::Relaxed);
    let cleaned = s.cleaned.load(Ordering::Relaxed);
    let repeated = s.repeated.load(Ordering::Relaxed);
    let (missing, sum, timeline) = {
        let w = lock(&s.writer);
        let missing = w
            .entries
            .iter()
            .filter(|e| e.cleaned.load(Ordering::Relaxed) == 0)
            .count() as u64;
        (
            missing,
            w.stats.iter().fold(0u64, |a, &v| a.wrapping_add(v)),
            timeline::of(&w.entries, s.work, end_ns),
        )
    };
    let expected = s.expected_sum.load(Ordering::Relaxed);
    let walks = s.walks.load(Ordering::Relaxed);
    let walked = s.walked_entries.load(Ordering::Relaxed);
    Report {
        strategy: s.strategy.name().into(),
        work: s.work,
        registered,
        cleaned,
        missing,
        repeated,
        merge_errors: u64::from(sum != expected),
        violations: s.violations.load(Ordering::Relaxed),
        walks,
        entries_per_walk: if walks == 0 {
            0.0
        } else {
            walked as f64 / walks as f64
        },
        exitq: s.domain.as_ref().map(|d| {
            let st = d.stats();
            ExitqStats {
                grace_periods: st.grace_periods,
                synchronize_calls: st.synchronize_calls,
                exits_run: st.exits_run,
                callbacks_run: st.callbacks_run,
                passes: st.passes,
                max_batch: st.max_batch,
                callbacks_panicked: st.callbacks_panicked,
                stalls: st.stalls,
            }
        }),
        timeline,
        frees_at_finish: s.freed_at_finish.load(Ordering::Relaxed),
        drive,
    }
}

impl Report {
    /// Flat metrics for the run's result. `exits`: threads that exited
    /// (for per-exit figures).
    pub fn metrics(&self, exits: u64) -> Vec<Metric> {
        let mut m = vec![
            Metric::lower("cleanup_violations", "count", self.violations as f64),
            Metric::lower("cleanups_missing", "count", self.missing as f64),
            Metric::lower("cleanups_repeated", "count", self.repeated as f64),
            Metric::lower("cleanup_merge_errors", "count", self.merge_errors as f64),
            Metric::info("cleanups_run", "count", self.cleaned as f64),
            Metric::info("monitor_walks", "count", self.walks as f64),
            Metric::info("monitor_entries_per_walk", "entries", self.entries_per_walk),
            Metric::lower(
                "cleanup_frees_missing",
                "count",
                self.timeline.frees_missing as f64,
            ),
            Metric::info(
                "cleanup_frees_at_finish",
                "count",
                self.frees_at_finish as f64,
            ),
        ];
        let t = &self.timeline;
        for (name, v) in [
            ("cleanup_to_free_p50_us", t.to_free_p50_us),
            ("cleanup_to_free_p99_us", t.to_free_p99_us),
            ("cleanup_to_free_max_us", t.to_free_max_us),
            ("cleanup_exit_work_p50_us", t.exit_work_p50_us),
            ("cleanup_exit_work_p99_us", t.exit_work_p99_us),
        ] {
            if let Some(v) = v {
                m.push(Metric::lower(name, "us", v));
            }
        }
        if t.exits > 0 {
            for (name, unit, v) in [
                ("cleanup_held_peak_kib", "KiB", t.held_peak_kib),
                ("cleanup_held_mean_kib", "KiB", t.held_mean_kib),
                (
                    "cleanup_held_kib_ms_per_exit",
                    "KiB*ms",
                    t.held_kib_ms_per_exit,
                ),
                ("cleanup_pending_peak", "threads", t.pending_peak as f64),
            ] {
                m.push(Metric::lower(name, unit, v));
            }
        }
        if let Some(x) = &self.exitq {
            m.push(Metric::info(
                "grace_periods",
                "count",
                x.grace_periods as f64,
            ));
            m.push(Metric::info(
                "synchronize_calls",
                "count",
                x.synchronize_calls as f64,
            ));
            m.push(Metric::info(
                "reclaim_max_batch",
                "callbacks",
                x.max_batch as f64,
            ));
            if exits > 0 {
                m.push(Metric::lower(
                    "grace_periods_per_exit",
                    "count",
                    x.grace_periods as f64 / exits as f64,
                ));
            }
        }
        m
    }

    /// Problems to report loudly (each must be zero).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.violations > 0 {
            p.push(format!(
                "cleanup: {} registry reads reached a freed entry",
                self.violations
            ));
        }
        if self.missing > 0 {
            p.push(format!(
                "cleanup: {} threads were never cleaned up",
                self.missing
            ));
        }
        if self.repeated > 0 {
            p.push(format!("cleanup: {} cleanups ran twice", self.repeated));
        }
        if self.merge_errors > 0 {
            p.push("cleanup: the global statistics do not add up".into());
        }
        if self.timeline.frees_missing > 0 {
            p.push(format!(
                "cleanup: {} unlinked registry entries were never freed{}",
                self.timeline.frees_missing,
                match &self.drive {
                    Some(d) => format!(" (after driving the reclaimer: {})", d.how),
                    None => String::new(),
                }
            ));
        }
        if let Some(x) = &self.exitq {
            if x.callbacks_panicked > 0 {
                p.push(format!(
                    "cleanup: {} exitq callbacks panicked",
                    x.callbacks_panicked
                ));
            }
        }
        p
    }
}
