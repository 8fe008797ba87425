//! Summaries of repeated measurements, and whether two of them differ.
//!
//! Invariants: a [`Summary`] is built from at least one finite value; NaN
//! and infinite values are rejected (a metric that could not be measured
//! is absent from a run, never NaN). The standard deviation printed
//! (`±%stddev`) is the *sample* standard deviation (n - 1), the one
//! Welch's test uses; LKP prints the population one (n), which is smaller
//! by sqrt((n-1)/n) (11% at n = 5). With one value it is 0.
//!
//! Comparing a baseline `a` with a candidate `b` ([`Change::between`]):
//! * `%change` = 100 (mean_b - mean_a) / |mean_a| ([`pct_change`]);
//! * Welch's t-test ([`welch`]): unequal variances, two-sided p-value from
//!   Student's t with the Welch–Satterthwaite degrees of freedom;
//! * LKP's rule ([`lkp_changed`]), computed as `lkp compare` does
//!   (lkp-tests `lib/stats.rb`, `lib/changed_stat.rb`): each side sorted
//!   and trimmed by n/32 values at either end (at most 3; none below 32
//!   runs), its centre the middle value of what is left (LKP calls it the
//!   mean; it is the upper median); changed when b's smallest value is
//!   above a's centre and b's centre above a's largest (or the mirror), at
//!   least one side has 3 runs or more, and the centres differ by more
//!   than 5% (LKP skips smaller changes);
//! * with ~60 metrics per comparison, some p-values fall under 0.05 by
//!   chance alone: [`adjust_family`] turns the p-values of every test in
//!   one table into Benjamini–Hochberg q-values (the false discovery rate
//!   over the table), and the stars and verdicts use q, not p;
//! * a change is *significant* only when both hold (q < alpha and LKP's
//!   rule). Never a verdict from one run: with fewer than two values on
//!   either side there is no p-value and nothing is significant.

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

/// The smallest change LKP reports: the centres differ by more than 5%.
pub const LKP_MIN_RATIO: f64 = 1.05;

/// LKP's rule, as `lkp compare` decides a stat changed (default options):
/// on the trimmed sides ([`LkpSide`]), b's smallest value above a's centre
/// and b's centre above a's largest value, or the mirror; at least 3 runs
/// on one side (LKP skips a stat with fewer on both); and the larger
/// centre more than [`LKP_MIN_RATIO`] times the smaller (a zero centre
/// counts as a large ratio, as LKP's).
pub fn lkp_changed(a: &Summary, b: &Summary) -> bool {
    let (x, y) = (a.lkp, b.lkp);
    if x.n == 0 || y.n == 0 || (a.n < 3 && b.n < 3) {
        return false;
    }
    let up = y.min > x.center && y.center > x.max;
    let down = x.min > y.center && x.center > y.max;
    let (high, low) = if up {
        (y.center, x.center)
    } else if down {
        (x.center, y.center)
    } else {
        return false;
    };
    // LKP's ratio: high / low when low > 0, else its cap (5).
    let ratio = if low > 0.0 { high / low } else { 5.0 };
    ratio > LKP_MIN_RATIO
}

/// Benjamini–Hochberg: the q-value of each p-value in one family of tests
/// (the false discovery rate at which it would be called a discovery):
/// `q_(i) = min over j >= i of p_(j) m / j`, p sorted ascending, capped
/// at one. It controls the expected share of false discoveries among the
/// changes called significant at q < alpha (valid for independent or
/// positively dependent tests, which metrics of the same runs mostly are).
pub fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let mut q = vec![1.0; m];
    let mut running = 1.0f64;
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min(p[i] * m as f64 / (rank + 1) as f64);
        q[i] = running.min(1.0);
    }
    q
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
    /// Welch's p adjusted over the table's tests ([`adjust_family`]);
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
    /// single test (q = p; [`adjust_family`] corrects for the table).
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
    fn decide(&mut self, mean_a: f64, mean_b: f64, better: Better, alpha: f64) {
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

/// One test of a family, for [`adjust_family`]: the change and the two
/// means and direction it was decided with.
#[derive(Debug)]
pub struct FamilyMember<'a> {
    /// The change to correct.
    pub change: &'a mut Change,
    /// Baseline mean.
    pub mean_a: f64,
    /// Candidate mean.
    pub mean_b: f64,
    /// The metric's direction.
    pub better: Better,
}

impl<'a> FamilyMember<'a> {
    /// A member when there is a change and both means.
    pub fn of(
        change: Option<&'a mut Change>,
        mean_a: Option<f64>,
        mean_b: Option<f64>,
        better: Better,
    ) -> Option<FamilyMember<'a>> {
        Some(FamilyMember {
            change: change?,
            mean_a: mean_a?,
            mean_b: mean_b?,
            better,
        })
    }
}

/// Corrects every change of one table for multiple comparisons: their
/// Welch p-values become Benjamini–Hochberg q-values over the tests that
/// have one, and significance and verdict are decided again. Returns the
/// number of tests in the family.
pub fn adjust_family(members: &mut [FamilyMember<'_>], alpha: f64) -> usize {
    let tested: Vec<usize> = (0..members.len())
        .filter(|&i| members[i].change.welch.is_some())
        .collect();
    let p: Vec<f64> = tested
        .iter()
        .map(|&i| members[i].change.welch.unwrap().p)
        .collect();
    let q = benjamini_hochberg(&p);
    for (k, &i) in tested.iter().enumerate() {
        let m = &mut members[i];
        m.change.q = Some(q[k]);
        m.change.decide(m.mean_a, m.mean_b, m.better, alpha);
    }
    tested.len()
}

/// The note every comparison table carries about its family of tests.
pub fn family_note(tests: usize, alpha: f64) -> String {
    format!(
        "{tests} tests in this table: at p<{alpha} about {:.1} would be \"significant\" by \
         chance alone; stars and verdicts use Benjamini-Hochberg q-values (expected share of \
         false findings among those called significant < {alpha})",
        tests as f64 * alpha
    )
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
    fn lkp_rule_as_lkp_computes_it() {
        // b's min (19) above a's centre (10), b's centre (20) above a's max.
        assert!(lkp_changed(&s(&[9.0, 10.0, 11.0]), &s(&[19.0, 20.0, 21.0])));
        // Symmetric in direction.
        assert!(lkp_changed(&s(&[19.0, 20.0, 21.0]), &s(&[9.0, 10.0, 11.0])));
        // Overlapping ranges still count when b's min clears a's centre and
        // b's centre clears a's max (the old half-gap rule said no).
        assert!(lkp_changed(&s(&[5.0, 10.0, 14.0]), &s(&[11.0, 20.0, 25.0])));
        // b's centre not above a's max.
        assert!(!lkp_changed(
            &s(&[5.0, 10.0, 30.0]),
            &s(&[11.0, 20.0, 25.0])
        ));
        // Fewer than 3 runs on both sides: LKP does not compare.
        assert!(!lkp_changed(&s(&[1.0, 1.1]), &s(&[10.0, 10.1])));
        // 3 on one side is enough.
        assert!(lkp_changed(&s(&[1.0, 1.1, 1.05]), &s(&[10.0, 10.1])));
        // Separate but under 5%: skipped, as LKP skips small changes.
        assert!(!lkp_changed(
            &s(&[100.0, 100.1, 100.2]),
            &s(&[104.0, 104.1, 104.2])
        ));
        assert!(lkp_changed(
            &s(&[100.0, 100.1, 100.2]),
            &s(&[106.0, 106.1, 106.2])
        ));
        // The centre is the upper median (sorted[n/2]), not the mean: an
        // outlier in b does not move it.
        let b = s(&[20.0, 21.0, 22.0, 1000.0]);
        assert_eq!(b.lkp.center, 22.0);
        // Trimming: n/32 at either end, at most 3 (none below 32 runs).
        let mut v: Vec<f64> = (0..64).map(f64::from).collect();
        assert_eq!(
            s(&v).lkp,
            LkpSide {
                n: 60,
                min: 2.0,
                center: 32.0,
                max: 61.0
            }
        );
        v.truncate(31);
        assert_eq!(s(&v).lkp.n, 31);
        let many: Vec<f64> = (0..200).map(f64::from).collect();
        assert_eq!(s(&many).lkp.n, 194, "at most 3 trimmed per end");
        // One run says nothing.
        assert!(!lkp_changed(&s(&[1.0]), &s(&[100.0])));
    }

    #[test]
    fn benjamini_hochberg_matches_reference_values() {
        // R: p.adjust(c(0.01, 0.04, 0.03, 0.005, 0.5), "BH")
        //    0.025 0.050 0.050 0.025 0.500
        let q = benjamini_hochberg(&[0.01, 0.04, 0.03, 0.005, 0.5]);
        let want = [0.025, 0.05, 0.05, 0.025, 0.5];
        for (x, y) in q.iter().zip(want) {
            assert!((x - y).abs() < 1e-12, "{q:?}");
        }
        assert!(benjamini_hochberg(&[]).is_empty());
        assert_eq!(benjamini_hochberg(&[0.3]), vec![0.3]);
    }

    #[test]
    fn a_family_of_sixty_tests_keeps_chance_findings_out() {
        // 59 metrics that did not change (p spread evenly over (0, 1)) and
        // one that did: alone, 2 of the 59 have p < 0.05; over the table,
        // only the real change stays significant.
        let a = s(&[10.0, 10.1, 9.9, 10.0]);
        let b = s(&[5.0, 5.1, 4.9, 5.0]);
        let mut changes: Vec<Change> = (1..60)
            .map(|i| Change {
                pct: Some(1.0),
                welch: Some(Welch {
                    t: 1.0,
                    df: 6.0,
                    p: i as f64 / 60.0,
                }),
                lkp: true,
                q: Some(i as f64 / 60.0),
                significant: true,
                verdict: Verdict::Worse,
            })
            .collect();
        changes.push(Change::between(&a, &b, Better::Lower, DEFAULT_ALPHA));
        let alone = changes
            .iter()
            .filter(|c| c.welch.unwrap().p < DEFAULT_ALPHA)
            .count();
        assert_eq!(alone, 2 + 1);
        let mut members: Vec<FamilyMember> = changes
            .iter_mut()
            .map(|c| FamilyMember {
                change: c,
                mean_a: 10.0,
                mean_b: 5.0,
                better: Better::Lower,
            })
            .collect();
        assert_eq!(adjust_family(&mut members, DEFAULT_ALPHA), 60);
        let kept: Vec<usize> = (0..60).filter(|&i| changes[i].significant).collect();
        assert_eq!(kept, vec![59], "only the real change");
        assert_eq!(changes[59].verdict, Verdict::Better);
        assert!(changes[0].q.unwrap() > changes[0].welch.unwrap().p);
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
