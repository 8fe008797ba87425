//! Multiple comparisons: one table's tests as a family, their p-values
//! turned into Benjamini–Hochberg q-values ([`adjust_family`]).

use super::change::Change;
use crate::result::Better;

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
    use crate::stats::change::{Verdict, DEFAULT_ALPHA};
    use crate::stats::summary::Summary;
    use crate::stats::welch::Welch;

    fn s(v: &[f64]) -> Summary {
        Summary::of(v).unwrap()
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
}
