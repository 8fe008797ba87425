//! Welch's unequal-variances t-test of two [`Summary`]s.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::summary::Summary;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
