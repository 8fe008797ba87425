//! Each thread's cleanup as a timeline, read once the run is over: when
//! its exit work began, when its buffer and counters were given back
//! (buffer to the pool, counters merged), when its registry entry was
//! freed. From it:
//!
//! * **cleanup-to-free latency**: exit work began -> entry freed, per
//!   thread (p50/p99/max): how long an exited thread's entry waits for
//!   its strategy's grace period or reclaimer;
//! * **memory held**: what exited threads still hold, over time. A thread
//!   holds its buffer and counters (16 bytes per `--cleanup-work` word)
//!   from its exit until they are given back, and its entry until it is
//!   freed; the peak and the time-weighted mean (from the first exit to
//!   the last free) of the sum, the same integrated over time per exit
//!   (KiB x ms: what each exiting thread leaves held, and for how long),
//!   and the peak number of exited threads whose entry is not freed yet. The libraries' own bookkeeping (bags,
//!   batches, queue nodes) is not counted;
//! * **exit work on the thread**: time the exiting thread itself spent in
//!   its cleanup (absent for exitq, whose push happens inside exitq).

use std::sync::atomic::Ordering;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::registry::Entry;

/// The timeline figures of a run (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Threads with an exit time.
    pub exits: u64,
    /// Cleanup-to-free latency, microseconds (None: nothing freed).
    pub to_free_p50_us: Option<f64>,
    /// 99th percentile.
    pub to_free_p99_us: Option<f64>,
    /// Largest.
    pub to_free_max_us: Option<f64>,
    /// Exit work on the exiting thread, 50th percentile, microseconds.
    pub exit_work_p50_us: Option<f64>,
    /// 99th percentile.
    pub exit_work_p99_us: Option<f64>,
    /// Most memory exited threads held at once, KiB.
    pub held_peak_kib: f64,
    /// Mean of it from the first exit to the last free, KiB.
    pub held_mean_kib: f64,
    /// What each exiting thread left held, and for how long: the held
    /// memory integrated over time, per exit, KiB x ms.
    #[serde(default)]
    pub held_kib_ms_per_exit: f64,
    /// Most exited threads whose entry was not freed yet, at once.
    pub pending_peak: u64,
    /// Threads cleaned whose entry was never freed.
    pub frees_missing: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

fn quantile_us(h: &Histogram<u64>, q: f64) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
}

/// The timeline of `entries`; `work`: words per buffer (and counters);
/// `end_ns`: when the run ended (what is never released is held until then).
pub(super) fn of(entries: &[Box<Entry>], work: usize, end_ns: u64) -> Timeline {
    let state_bytes = (work * 2 * std::mem::size_of::<u64>()) as i64;
    let entry_bytes = std::mem::size_of::<Entry>() as i64;
    let mut to_free = histogram();
    let mut exit_work = histogram();
    // (time, bytes delta, pending delta)
    let mut events: Vec<(u64, i64, i64)> = Vec::with_capacity(entries.len() * 3);
    let mut t = Timeline::default();
    for e in entries {
        // Relaxed: every store happened-before the run's end (see report::of).
        let exit = e.exit_ns.load(Ordering::Relaxed);
        let cleaned = e.cleaned.load(Ordering::Relaxed) > 0;
        let freed = e.freed_ns.load(Ordering::Relaxed);
        if cleaned && freed == 0 {
            t.frees_missing += 1;
        }
        if exit == 0 {
            continue;
        }
        t.exits += 1;
        let released = match e.released_ns.load(Ordering::Relaxed) {
            0 => end_ns,
            r => r.max(exit),
        };
        let freed_at = if freed == 0 { end_ns } else { freed.max(exit) };
        events.push((exit, state_bytes + entry_bytes, 1));
        events.push((released, -state_bytes, 0));
        events.push((freed_at, -entry_bytes, -1));
        if freed != 0 {
            to_free.saturating_record((freed_at - exit).max(1));
        }
        let w = e.exit_work_ns.load(Ordering::Relaxed);
        if w > 0 {
            exit_work.saturating_record(w);
        }
    }
    // Frees before allocations at equal times: a peak is never inflated.
    events.sort_unstable_by_key(|&(time, bytes, _)| (time, bytes));
    let (mut bytes, mut pending, mut area) = (0i64, 0i64, 0f64);
    let (mut peak, mut pending_peak) = (0i64, 0i64);
    for w in events.windows(2) {
        bytes += w[0].1;
        pending += w[0].2;
        peak = peak.max(bytes);
        pending_peak = pending_peak.max(pending);
        area += bytes as f64 * (w[1].0 - w[0].0) as f64;
    }
    if let (Some(first), Some(last)) = (events.first(), events.last()) {
        let span = (last.0 - first.0) as f64;
        if span > 0.0 {
            t.held_mean_kib = area / span / 1024.0;
        }
    }
    t.held_peak_kib = peak as f64 / 1024.0;
    if t.exits > 0 {
        t.held_kib_ms_per_exit = area / 1024.0 / 1e6 / t.exits as f64;
    }
    t.pending_peak = pending_peak.max(0) as u64;
    t.to_free_p50_us = quantile_us(&to_free, 0.5);
    t.to_free_p99_us = quantile_us(&to_free, 0.99);
    t.to_free_max_us = (!to_free.is_empty()).then(|| to_free.max() as f64 / 1e3);
    t.exit_work_p50_us = quantile_us(&exit_work, 0.5);
    t.exit_work_p99_us = quantile_us(&exit_work, 0.99);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(exit: u64, released: u64, freed: u64) -> Box<Entry> {
        let e = Box::new(Entry::new(1));
        e.exit_ns.store(exit, Ordering::Relaxed);
        e.released_ns.store(released, Ordering::Relaxed);
        e.freed_ns.store(freed, Ordering::Relaxed);
        e.cleaned.store(1, Ordering::Relaxed);
        e
    }

    #[test]
    fn latency_peak_and_mean_of_overlapping_cleanups() {
        let eb = std::mem::size_of::<Entry>() as f64;
        // work 64: 1 KiB of buffer and counters per thread.
        // Thread A: exit 1000, released 2000, freed 5000.
        // Thread B: exit 1500, released 1500, freed 3000.
        let t = of(
            &[entry(1000, 2000, 5000), entry(1500, 1500, 3000)],
            64,
            9000,
        );
        assert_eq!(t.exits, 2);
        assert_eq!(t.frees_missing, 0);
        assert_eq!(t.pending_peak, 2);
        // Peak at 1500: A whole (1024 + eb); B released at once (eb).
        assert!(
            (t.held_peak_kib * 1024.0 - (1024.0 + 2.0 * eb)).abs() < 1e-9,
            "{t:?}"
        );
        // Mean over 1000..5000: A's buffer 1000 ns, A's entry 4000 ns,
        // B's entry 1500 ns.
        let area = 1024.0 * 1000.0 + eb * 4000.0 + eb * 1500.0;
        assert!(
            (t.held_mean_kib * 1024.0 - area / 4000.0).abs() < 1e-6,
            "{t:?}"
        );
        // 4000 ns, within the histogram's 3 significant digits.
        assert!((t.to_free_max_us.unwrap() - 4.0).abs() < 0.01, "{t:?}");
    }

    #[test]
    fn an_entry_never_freed_is_missing_and_held_to_the_end() {
        let t = of(&[entry(1000, 1000, 0)], 1, 11_000);
        assert_eq!(t.frees_missing, 1);
        assert_eq!(t.to_free_p99_us, None);
        assert_eq!(t.pending_peak, 1);
        assert!(t.held_mean_kib > 0.0);
    }
}
