//! [`Summary`]: mean, median, spread of one metric over repetitions, and
//! the same values as LKP sees them ([`LkpSide`]).

use serde::{Deserialize, Serialize};

/// Mean, median, spread of one metric over repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (mean of the two middle values for even n).
    pub median: f64,
    /// Sample standard deviation (0 for n = 1).
    pub stddev: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// The values as LKP sees them (trimmed; [`LkpSide`]).
    #[serde(default)]
    pub lkp: LkpSide,
}

/// One side of a comparison as LKP summarises it: sorted, `n / 32` values
/// (at most 3) trimmed at either end, the middle value of what is left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LkpSide {
    /// Values after trimming (0: no summary, e.g. read from an old file).
    pub n: usize,
    /// Smallest value left.
    pub min: f64,
    /// `sorted[n / 2]` of what is left (LKP's "mean").
    pub center: f64,
    /// Largest value left.
    pub max: f64,
}

impl LkpSide {
    /// LKP's `sort_remove_margin` and `min_mean_max` of sorted values.
    fn of_sorted(sorted: &[f64]) -> LkpSide {
        let margin = (sorted.len() >> 5).min(3);
        let kept = &sorted[margin..sorted.len() - margin];
        LkpSide {
            n: kept.len(),
            min: kept[0],
            center: kept[kept.len() / 2],
            max: kept[kept.len() - 1],
        }
    }
}

impl Summary {
    /// Summarises `values`; `None` if empty or any value is not finite.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let mut sorted = values.to_vec();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let stddev = if n < 2 {
            0.0
        } else {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0)).sqrt()
        };
        Some(Summary {
            n,
            mean,
            median,
            stddev,
            min: sorted[0],
            max: sorted[n - 1],
            lkp: LkpSide::of_sorted(&sorted),
        })
    }

    /// Standard deviation as a percentage of the mean: 0 when every value
    /// is the same, infinite (printed `inf`) when the values spread around
    /// a mean of 0 (values of both signs), where no percentage exists.
    pub fn pct_stddev(&self) -> f64 {
        if self.stddev == 0.0 {
            0.0
        } else if self.mean == 0.0 {
            f64::INFINITY
        } else {
            100.0 * self.stddev / self.mean.abs()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_rng::Rng;

    #[test]
    fn summary_basic() {
        let s = Summary::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(s.n, 4);
        assert_eq!(s.mean, 2.5);
        assert_eq!(s.median, 2.5);
        assert!((s.stddev - 1.2909944487358056).abs() < 1e-12);
        assert_eq!((s.min, s.max), (1.0, 4.0));
    }

    #[test]
    fn summary_rejects_empty_and_nan() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
        assert_eq!(Summary::of(&[5.0]).unwrap().stddev, 0.0);
    }

    /// A spread around a mean of 0 has no percentage: it is not "±0.0%"
    /// (no spread), which it used to print.
    #[test]
    fn pct_stddev_around_a_zero_mean() {
        assert_eq!(Summary::of(&[0.0, 0.0]).unwrap().pct_stddev(), 0.0);
        let s = Summary::of(&[-1.0, 1.0]).unwrap();
        assert_eq!(s.pct_stddev(), f64::INFINITY);
        assert_eq!(
            Summary::of(&[-1.0, -3.0]).unwrap().pct_stddev(),
            100.0 * 2f64.sqrt() / 2.0
        );
    }
    fn s(v: &[f64]) -> Summary {
        Summary::of(v).unwrap()
    }

    #[test]
    fn property_summary_invariants() {
        for seed in 1..2000u64 {
            let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let v = r.sample();
            let sm = s(&v);
            assert_eq!(sm.n, v.len(), "seed {seed}");
            assert!(
                sm.min <= sm.median && sm.median <= sm.max,
                "seed {seed}: {sm:?}"
            );
            assert!(
                sm.min <= sm.mean + 1e-9 && sm.mean <= sm.max + 1e-9,
                "seed {seed}"
            );
            assert!(sm.stddev >= 0.0 && sm.pct_stddev() >= 0.0, "seed {seed}");
            // Shifting every value shifts the location and keeps the spread.
            let shifted: Vec<f64> = v.iter().map(|x| x + 7.5).collect();
            let sh = s(&shifted);
            assert!((sh.mean - sm.mean - 7.5).abs() < 1e-9, "seed {seed}");
            assert!((sh.stddev - sm.stddev).abs() < 1e-6, "seed {seed}");
            // Order does not matter.
            let mut rev = v.clone();
            rev.reverse();
            let sr = s(&rev);
            assert_eq!((sr.median, sr.min, sr.max), (sm.median, sm.min, sm.max));
        }
    }
}
