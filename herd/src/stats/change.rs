//! Everything said about one metric, candidate against baseline:
//! `%change`, Welch's test, LKP's rule, and the verdict ([`Change`]).

use serde::{Deserialize, Serialize};

use super::lkp::lkp_changed;
use super::summary::Summary;
use super::welch::{welch, Welch};
use crate::result::Better;

/// Default significance level for Welch's test.
pub const DEFAULT_ALPHA: f64 = 0.05;

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
    /// [`lkp_changed`] (read as `ranges_separate` from older files).
    #[serde(alias = "ranges_separate")]
    pub lkp: bool,
    /// Welch's p adjusted over the table's tests ([`adjust_family`](super::adjust_family));
    /// until then (a single test) p itself.
    #[serde(default)]
    pub q: Option<f64>,
    /// q < alpha and LKP's rule.
    pub significant: bool,
    /// Direction of a significant change.
    pub verdict: Verdict,
}

impl Change {
    /// Compares `b` against baseline `a` at significance level `alpha`, as a
    /// single test (q = p; [`adjust_family`](super::adjust_family) corrects for the table).
    pub fn between(a: &Summary, b: &Summary, better: Better, alpha: f64) -> Change {
        let welch = welch(a, b);
        let mut c = Change {
            pct: pct_change(a.mean, b.mean),
            welch,
            lkp: lkp_changed(a, b),
            q: welch.map(|w| w.p),
            significant: false,
            verdict: Verdict::Same,
        };
        c.decide(a.mean, b.mean, better, alpha);
        c
    }

    /// Significance and verdict from q and LKP's rule.
    pub(super) fn decide(&mut self, mean_a: f64, mean_b: f64, better: Better, alpha: f64) {
        self.significant = self.lkp && self.q.is_some_and(|q| q < alpha);
        self.verdict = match (self.significant, better) {
            (false, _) => Verdict::Same,
            (true, Better::Neither) => Verdict::Changed,
            (true, Better::Lower) if mean_b < mean_a => Verdict::Better,
            (true, Better::Higher) if mean_b > mean_a => Verdict::Better,
            (true, _) => Verdict::Worse,
        };
    }

    /// The compact mark shown after `%change`: stars from q, Welch's p
    /// adjusted over the table (`*` q < 0.05, `**` q < 0.01, `***` q <
    /// 0.001) and `R` when LKP's rule holds. Empty when neither holds.
    pub fn mark(&self) -> String {
        let mut s = String::new();
        if let Some(q) = self.q {
            s.push_str(match q {
                q if q < 0.001 => "***",
                q if q < 0.01 => "**",
                q if q < 0.05 => "*",
                _ => "",
            });
        }
        if self.lkp {
            s.push('R');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_rng::Rng;

    fn s(v: &[f64]) -> Summary {
        Summary::of(v).unwrap()
    }

    #[test]
    fn pct_change_cases() {
        assert_eq!(pct_change(100.0, 110.0), Some(10.0));
        assert_eq!(pct_change(-100.0, -110.0), Some(-10.0));
        assert_eq!(pct_change(0.0, 0.0), Some(0.0));
        assert_eq!(pct_change(0.0, 1.0), None);
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

    #[test]
    fn property_comparison_invariants() {
        for seed in 1..2000u64 {
            let mut r = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
            let (a, b) = (s(&r.sample()), s(&r.sample()));
            let ab = Change::between(&a, &b, Better::Lower, DEFAULT_ALPHA);
            let ba = Change::between(&b, &a, Better::Lower, DEFAULT_ALPHA);
            // Welch's p and LKP's rule are symmetric; t flips sign.
            assert_eq!(ab.lkp, ba.lkp, "seed {seed}");
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
                ab.lkp && ab.welch.is_some_and(|w| w.p < DEFAULT_ALPHA),
                "seed {seed}"
            );
            assert_eq!(ab.significant, ab.verdict != Verdict::Same, "seed {seed}");
            if ab.significant {
                assert_ne!(ab.verdict, ba.verdict, "seed {seed}");
            }
            // Comparing a sample with itself never reports a change.
            let same = Change::between(&a, &a, Better::Lower, DEFAULT_ALPHA);
            assert!(!same.significant && !same.lkp, "seed {seed}");
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
