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
//! Output: every CPU's value is in the JSON (`perf.counters[i].per_cpu`);
//! the table's per-CPU section is [`super::cpu_table`]'s, the per-node sums
//! [`super::pernode`]'s.

use serde::{Deserialize, Serialize};

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
    /// below 1 because a hardware counter was multiplexed; left out
    /// otherwise (always for a software or tracepoint counter).
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
                // Below 1 by multiplexing only for a hardware counter: a
                // software one runs whenever its context (the task, the
                // cgroup on that CPU) does, so its times say nothing of
                // its count (and -A's <not counted> must not mark it).
                running: s.running_fraction().filter(|_| multiplexes),
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

#[cfg(test)]
impl CpuValue {
    /// An exact (never multiplexed) value of `value` on `cpu`.
    pub(crate) fn exact(cpu: usize, value: f64) -> CpuValue {
        CpuValue {
            cpu,
            raw: value as u64,
            value,
            running: None,
        }
    }
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
        assert_eq!(a.per_cpu[0], CpuValue::exact(4, 100.0));
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
            a.per_cpu[0].running, None,
            "not multiplexed: -A marked such a CPU <not counted> and the table listed it as multiplexed"
        );
        assert_eq!(a.per_cpu[1].running, None);
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
            .map(|(i, &x)| CpuValue::exact(i + 100, x))
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
        let zero = Spread::of(&[CpuValue::exact(0, 0.0), CpuValue::exact(1, 0.0)], 3).unwrap();
        assert_eq!(zero.imbalance, None);
        assert!(zero.top.is_empty());
        assert!(Spread::of(&[], 3).is_none());
        // Everything on one of 128 CPUs: imbalance is the CPU count.
        let mut one: Vec<CpuValue> = (0..128).map(|c| CpuValue::exact(c, 0.0)).collect();
        one[77].value = 5.0;
        assert_eq!(Spread::of(&one, 3).unwrap().imbalance, Some(128.0));
    }
}
