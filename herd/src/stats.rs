//! Summaries of repeated measurements, and whether two of them differ.
//!
//! Invariants: a [`Summary`] is built from at least one finite value; NaN
//! and infinite values are rejected (a metric that could not be measured
//! is absent from a run, never NaN). Standard deviation is the sample
//! standard deviation (n - 1); with one value it is 0.
//!
//! Comparing a baseline `a` with a candidate `b` ([`Change::between`]), the
//! way LKP (the kernel test robot) reports regressions, with a real test:
//! * `%change` = 100 (mean_b - mean_a) / |mean_a| ([`pct_change`]);
//! * Welch's t-test ([`welch`]): unequal variances, two-sided p-value from
//!   Student's t with the Welch–Satterthwaite degrees of freedom;
//! * LKP's range rule ([`ranges_separate`]): the two ranges [min, max] do
//!   not overlap, and the gap between them is more than half the
//!   difference of the means. It guards against a "significant" p-value
//!   from a few runs with one outlier-free tight cluster;
//! * a change is *significant* only when both hold (p < alpha and the
//!   ranges separate). Never a verdict from one run: with fewer than two
//!   values on either side there is no p-value and nothing is significant.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::result::Better;

/// Default significance level for Welch's test.
pub const DEFAULT_ALPHA: f64 = 0.05;

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
        })
    }

    /// Standard deviation as a percentage of the mean (0 when mean is 0).
    pub fn pct_stddev(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            100.0 * self.stddev / self.mean.abs()
        }
    }
}

/// Percentage change from `base` to `new`: `100 (new - base) / |base|`.
///
/// `None` when `base` is 0 and `new` is not (an infinite change has no
/// useful percentage); `Some(0.0)` when both are 0.
pub fn pct_change(base: f64, new: f64) -> Option<f64> {
    if base == 0.0 {
        return (new == 0.0).then_some(0.0);
    }
    let pct = 100.0 * (new - base) / base.abs();
    pct.is_finite().then_some(pct)
}

/// The outcome of Welch's unequal-variances t-test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Welch {
    /// t statistic, (mean_b - mean_a) / standard error (±`f64::MAX` when
    /// both sides have zero variance and different means: JSON has no
    /// infinity; a `null` read back from older files becomes NaN).
    #[serde(deserialize_with = "f64_or_nan")]
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom (`None`-like NaN never
    /// escapes: with zero variance on both sides it is `n_a + n_b - 2`).
    pub df: f64,
    /// Two-sided p-value: the probability of a |t| at least this large if
    /// the two means were equal.
    pub p: f64,
}

fn f64_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Welch's two-sided t-test of `a` against `b`.
///
/// `None` with fewer than two values on either side (no variance
/// estimate). Two constant samples: p = 1 if their values are equal, else
/// p = 0 (a deterministic difference, e.g. a count fixed by the config).
pub fn welch(a: &Summary, b: &Summary) -> Option<Welch> {
    if a.n < 2 || b.n < 2 {
        return None;
    }
    let (na, nb) = (a.n as f64, b.n as f64);
    let (va, vb) = (a.stddev.powi(2) / na, b.stddev.powi(2) / nb);
    let se2 = va + vb;
    let diff = b.mean - a.mean;
    if se2 == 0.0 {
        let df = na + nb - 2.0;
        return Some(if diff == 0.0 {
            Welch { t: 0.0, df, p: 1.0 }
        } else {
            Welch {
                t: f64::MAX.copysign(diff),
                df,
                p: 0.0,
            }
        });
    }
    let t = diff / se2.sqrt();
    // Welch–Satterthwaite; a side with zero variance contributes 0 to the
    // denominator, the other side's term keeps it positive.
    let df = se2.powi(2) / (va.powi(2) / (na - 1.0) + vb.powi(2) / (nb - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    // sf(|t|) rather than 1 - cdf(|t|): keeps tiny p-values from rounding to 0.
    let p = (2.0 * dist.sf(t.abs())).clamp(0.0, 1.0);
    Some(Welch { t, df, p })
}

/// LKP's range rule: the value ranges `[min, max]` of `a` and `b` are
/// disjoint and the gap between them exceeds half of |mean_b - mean_a|.
///
/// Needs at least two values on each side (one run says nothing about
/// spread). Because every value lies within its range, the gap can never
/// exceed the difference of the means: the rule asks that the runs'
/// scatter eats less than half of the difference.
pub fn ranges_separate(a: &Summary, b: &Summary) -> bool {
    if a.n < 2 || b.n < 2 {
        return false;
    }
    let gap = if b.mean >= a.mean {
        b.min - a.max
    } else {
        a.min - b.max
    };
    gap > 0.0 && gap > (b.mean - a.mean).abs() / 2.0
}

/// Whether a change is an improvement, given the metric's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Significant, in the metric's better direction.
    Better,
    /// Significant, in the metric's worse direction.
    Worse,
    /// Significant change of an informational metric.
    Changed,
    /// Not significant (or not testable).
    Same,
}

/// Everything said about one metric, candidate `b` against baseline `a`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// [`pct_change`] of the means.
    pub pct: Option<f64>,
    /// Welch's test, when both sides have two or more values.
    pub welch: Option<Welch>,
    /// [`ranges_separate`].
    pub ranges_separate: bool,
    /// p < alpha and the ranges separate.
    pub significant: bool,
    /// Direction of a significant change.
    pub verdict: Verdict,
}

impl Change {
    /// Compares `b` against baseline `a` at significance level `alpha`.
    pub fn between(a: &Summary, b: &Summary, better: Better, alpha: f64) -> Change {
        let welch = welch(a, b);
        let separate = ranges_separate(a, b);
        let significant = separate && welch.is_some_and(|w| w.p < alpha);
        let verdict = match (significant, better) {
            (false, _) => Verdict::Same,
            (true, Better::Neither) => Verdict::Changed,
            (true, Better::Lower) if b.mean < a.mean => Verdict::Better,
            (true, Better::Higher) if b.mean > a.mean => Verdict::Better,
            (true, _) => Verdict::Worse,
        };
        Change {
            pct: pct_change(a.mean, b.mean),
            welch,
            ranges_separate: separate,
            significant,
            verdict,
        }
    }

    /// The compact mark shown after `%change`: Welch stars (`*` p < 0.05,
    /// `**` p < 0.01, `***` p < 0.001) and `R` when the ranges separate.
    /// Empty when neither holds.
    pub fn mark(&self) -> String {
        let mut s = String::new();
        if let Some(w) = self.welch {
            s.push_str(match w.p {
                p if p < 0.001 => "***",
                p if p < 0.01 => "**",
                p if p < 0.05 => "*",
                _ => "",
            });
        }
        if self.ranges_separate {
            s.push('R');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn s(v: &[f64]) -> Summary {
        Summary::of(v).unwrap()
    }

    #[test]
    fn welch_matches_reference_values() {
        // Reference values computed independently (sample variances, the
        // Welch–Satterthwaite df, and the t density integrated numerically).
        let w = welch(&s(&[1., 2., 3., 4., 5.]), &s(&[2., 4., 6., 8., 10.])).unwrap();
        assert!((w.t - 1.897_366_596).abs() < 1e-6, "{w:?}");
        assert!((w.df - 5.882_352_941).abs() < 1e-6, "{w:?}");
        assert!((w.p - 0.107_531_195).abs() < 1e-6, "{w:?}");
        let w = welch(&s(&[10.1, 10.3, 9.9, 10.0]), &s(&[12.0, 12.2, 11.9, 12.4])).unwrap();
        assert!((w.t - 14.649_086_82).abs() < 1e-6, "{w:?}");
        assert!((w.df - 5.632_809_18).abs() < 1e-6, "{w:?}");
        assert!((w.p - 1.065_142_65e-5).abs() < 1e-9, "{w:?}");
    }

    #[test]
    fn welch_edge_cases() {
        assert!(welch(&s(&[1.0]), &s(&[1.0, 2.0])).is_none());
        let same = welch(&s(&[3.0, 3.0]), &s(&[3.0, 3.0, 3.0])).unwrap();
        assert_eq!(same.p, 1.0);
        let fixed = welch(&s(&[3.0, 3.0]), &s(&[4.0, 4.0])).unwrap();
        assert_eq!(fixed.p, 0.0);
        assert_eq!(fixed.t, f64::MAX);
        // JSON round trip (no infinities in JSON).
        let back: Welch = serde_json::from_str(&serde_json::to_string(&fixed).unwrap()).unwrap();
        assert_eq!(back, fixed);
        let old: Welch = serde_json::from_str(r#"{"t":null,"df":2.0,"p":0.0}"#).unwrap();
        assert!(old.t.is_nan());
        // One side constant: still a finite test.
        let w = welch(&s(&[5.0, 5.0, 5.0]), &s(&[6.0, 7.0, 8.0])).unwrap();
        assert!(
            w.p > 0.0 && w.p < 0.1 && (w.df - 2.0).abs() < 1e-12,
            "{w:?}"
        );
    }

    #[test]
    fn pct_change_cases() {
        assert_eq!(pct_change(100.0, 110.0), Some(10.0));
        assert_eq!(pct_change(-100.0, -110.0), Some(-10.0));
        assert_eq!(pct_change(0.0, 0.0), Some(0.0));
        assert_eq!(pct_change(0.0, 1.0), None);
    }

    #[test]
    fn lkp_range_rule() {
        // Disjoint, gap 8 > half of the 10 between means.
        assert!(ranges_separate(
            &s(&[9.0, 10.0, 11.0]),
            &s(&[19.0, 20.0, 21.0])
        ));
        // Disjoint but the gap (1) is less than half the difference (5).
        assert!(!ranges_separate(
            &s(&[5.0, 10.0, 14.0]),
            &s(&[15.0, 20.0, 25.0])
        ));
        // Overlapping.
        assert!(!ranges_separate(&s(&[1.0, 5.0]), &s(&[4.0, 8.0])));
        // Symmetric in direction.
        assert!(ranges_separate(
            &s(&[19.0, 20.0, 21.0]),
            &s(&[9.0, 10.0, 11.0])
        ));
        // One run says nothing.
        assert!(!ranges_separate(&s(&[1.0]), &s(&[100.0])));
    }

    #[test]
    fn verdict_follows_direction() {
        let a = s(&[10.0, 10.1, 9.9, 10.0]);
        let b = s(&[5.0, 5.1, 4.9, 5.0]);
        let c = Change::between(&a, &b, Better::Lower, DEFAULT_ALPHA);
        assert!(c.significant);
        assert_eq!(c.verdict, Verdict::Better);
        assert_eq!(c.mark(), "***R");
        assert_eq!(
            Change::between(&a, &b, Better::Higher, 0.05).verdict,
            Verdict::Worse
        );
        assert_eq!(
            Change::between(&a, &b, Better::Neither, 0.05).verdict,
            Verdict::Changed
        );
        let noisy = s(&[4.0, 16.0, 10.0, 6.0]);
        let c = Change::between(&a, &noisy, Better::Lower, DEFAULT_ALPHA);
        assert!(!c.significant);
        assert_eq!(c.verdict, Verdict::Same);
        assert_eq!(c.mark(), "");
    }

    /// A small deterministic generator (xorshift) for property tests: no
    /// extra dependency, reproducible failures (the seed is printed).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn f64(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
        fn sample(&mut self) -> Vec<f64> {
            let n = 1 + (self.next() % 12) as usize;
            let (c, w) = (self.f64(-1e3, 1e3), self.f64(0.0, 50.0));
            (0..n).map(|_| c + self.f64(-w, w)).collect()
        }
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

    #[test]
    fn property_comparison_invariants() {
        for seed in 1..2000u64 {
            let mut r = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
            let (a, b) = (s(&r.sample()), s(&r.sample()));
            let ab = Change::between(&a, &b, Better::Lower, DEFAULT_ALPHA);
            let ba = Change::between(&b, &a, Better::Lower, DEFAULT_ALPHA);
            // Welch's p and the range rule are symmetric; t flips sign.
            assert_eq!(ab.ranges_separate, ba.ranges_separate, "seed {seed}");
            match (ab.welch, ba.welch) {
                (Some(x), Some(y)) => {
                    assert!((0.0..=1.0).contains(&x.p), "seed {seed}: {x:?}");
                    assert!((x.p - y.p).abs() < 1e-9, "seed {seed}");
                    assert!(x.t == -y.t, "seed {seed}");
                }
                (None, None) => assert!(a.n < 2 || b.n < 2, "seed {seed}"),
                _ => panic!("seed {seed}: asymmetric welch"),
            }
            // Significance needs both tests, and a verdict agrees with it.
            assert_eq!(
                ab.significant,
                ab.ranges_separate && ab.welch.is_some_and(|w| w.p < DEFAULT_ALPHA),
                "seed {seed}"
            );
            assert_eq!(ab.significant, ab.verdict != Verdict::Same, "seed {seed}");
            if ab.significant {
                assert_ne!(ab.verdict, ba.verdict, "seed {seed}");
            }
            // Comparing a sample with itself never reports a change.
            let same = Change::between(&a, &a, Better::Lower, DEFAULT_ALPHA);
            assert!(!same.significant && !same.ranges_separate, "seed {seed}");
            assert_eq!(same.pct.unwrap_or(0.0), 0.0, "seed {seed}");
            if let Some(w) = same.welch {
                assert_eq!(w.p, 1.0, "seed {seed}");
            }
            // %change sign follows the means.
            if let Some(p) = ab.pct {
                assert_eq!(
                    p > 0.0,
                    b.mean > a.mean && a.mean != 0.0 && p != 0.0,
                    "seed {seed}"
                );
            }
        }
    }
}
