//! LKP's rule: whether `lkp compare` would call a stat changed.

use super::summary::Summary;

/// The smallest change LKP reports: the centres differ by more than 5%.
pub const LKP_MIN_RATIO: f64 = 1.05;

/// LKP's rule, as `lkp compare` decides a stat changed (default options):
/// on the trimmed sides ([`LkpSide`](super::summary::LkpSide)), b's smallest
/// value above a's centre and b's centre above a's largest value, or the
/// mirror; at least 3 runs on one side (LKP skips a stat with fewer on
/// both); and the larger centre more than [`LKP_MIN_RATIO`] times the
/// smaller (a zero centre counts as a large ratio, as LKP's).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::LkpSide;

    fn s(v: &[f64]) -> Summary {
        Summary::of(v).unwrap()
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
}
