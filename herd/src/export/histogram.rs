//! A latency histogram in a run result: its JSON shape (written by the
//! scenarios, `details.histograms.<name>`) and the [`Distribution`] read
//! back from it (by `herd report`).
//!
//! The shape: `count`, `unit` (`ns` or `us`: what was recorded), `min`,
//! `mean`, `p50`, `p90`, `p99`, `max`, and `log_buckets`: the whole
//! distribution as `[upper, count]` pairs, four buckets per power of two
//! (bucket k holds the values in [2^(k/4), 2^((k+1)/4)), its `upper` is
//! 2^((k+1)/4) rounded up), non-empty buckets only. About 170 pairs at
//! most for 1 ns to an hour, so a storm's five histograms stay a few KiB,
//! and buckets of two runs (same bounds) add up: that is how a report
//! merges the runs of a set or a configuration. Results written before
//! the buckets existed have the quantiles only; [`Distribution`] then
//! draws from those five points and says so.

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// Buckets per power of two.
pub const PER_OCTAVE: f64 = 4.0;

/// The bucket a value falls into (values below 1 go to bucket 0).
fn bucket_of(v: u64) -> i32 {
    ((v.max(1) as f64).log2() * PER_OCTAVE).floor() as i32
}

/// The upper bound of bucket `k`, rounded up to an integer.
fn upper_of(k: i32) -> u64 {
    (2f64.powf(f64::from(k + 1) / PER_OCTAVE)).ceil() as u64
}

/// The JSON shape of `h`, whose values were recorded in `unit` (`ns`,
/// `us`): `{"count": 0}` when it is empty.
pub fn to_json(h: &Histogram<u64>, unit: &str) -> Value {
    if h.is_empty() {
        return json!({"count": 0});
    }
    let mut buckets: Vec<(i32, u64)> = Vec::new();
    for v in h.iter_recorded() {
        let k = bucket_of(v.value_iterated_to());
        match buckets.last_mut() {
            Some((last, n)) if *last == k => *n += v.count_at_value(),
            _ => buckets.push((k, v.count_at_value())),
        }
    }
    let pairs: Vec<[u64; 2]> = buckets.iter().map(|&(k, n)| [upper_of(k), n]).collect();
    json!({
        "count": h.len(),
        "unit": unit,
        "min": h.min(),
        "mean": h.mean(),
        "p50": h.value_at_quantile(0.50),
        "p90": h.value_at_quantile(0.90),
        "p99": h.value_at_quantile(0.99),
        "max": h.max(),
        "log_buckets": pairs,
    })
}

/// A latency distribution read back from a result, in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// Values recorded.
    pub count: u64,
    /// Smallest, p50, p90, p99, largest (ns); `None` where absent.
    pub quantiles: [Option<f64>; 5],
    /// Mean (ns).
    pub mean: Option<f64>,
    /// `(upper bound ns, count)` in increasing order; empty for a result
    /// without buckets (then only the quantiles are known).
    pub buckets: Vec<(f64, u64)>,
}

/// The quantile each of [`Distribution::quantiles`] is.
pub const QUANTILES: [(f64, &str); 5] = [
    (0.0, "min"),
    (0.5, "p50"),
    (0.9, "p90"),
    (0.99, "p99"),
    (1.0, "max"),
];

impl Distribution {
    /// Reads the JSON shape; `None` for an empty histogram or something
    /// that is not one (an unknown unit, no count).
    pub fn from_json(v: &Value) -> Option<Distribution> {
        let count = v.get("count")?.as_u64()?;
        if count == 0 {
            return None;
        }
        let scale = match v.get("unit").and_then(Value::as_str) {
            Some("ns") => 1.0,
            Some("us") => 1e3,
            Some("ms") => 1e6,
            Some("s") => 1e9,
            _ => return None,
        };
        let num = |k: &str| v.get(k).and_then(Value::as_f64).map(|x| x * scale);
        let quantiles = [num("min"), num("p50"), num("p90"), num("p99"), num("max")];
        let mut buckets: Vec<(f64, u64)> = v
            .get("log_buckets")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| Some((p.get(0)?.as_f64()? * scale, p.get(1)?.as_u64()?)))
                    .filter(|&(u, n)| u.is_finite() && u > 0.0 && n > 0)
                    .collect()
            })
            .unwrap_or_default();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Some(Distribution {
            count,
            quantiles,
            mean: num("mean"),
            buckets,
        })
    }

    /// True when the whole distribution is known (buckets), not only
    /// five quantiles.
    pub fn has_buckets(&self) -> bool {
        !self.buckets.is_empty()
    }

    /// The points of its cumulative distribution, `(ns, fraction <= ns)`:
    /// from the buckets, or else from the quantiles.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        if self.has_buckets() {
            let total: u64 = self.buckets.iter().map(|b| b.1).sum();
            let mut seen = 0u64;
            let mut pts = Vec::with_capacity(self.buckets.len() + 1);
            if let Some(min) = self.quantiles[0] {
                pts.push((min.max(1.0), 0.0));
            }
            for &(upper, n) in &self.buckets {
                seen += n;
                pts.push((upper, seen as f64 / total.max(1) as f64));
            }
            return pts;
        }
        QUANTILES
            .iter()
            .zip(&self.quantiles)
            .filter_map(|(&(q, _), v)| v.map(|v| (v.max(1.0), q)))
            .collect()
    }

    /// Several runs' distributions of one histogram as one: counts and
    /// buckets added, the extremes kept; the middle quantiles are left out
    /// unless every part has buckets (then they are read off the sum, to
    /// the bucket's precision). `None` when `parts` is empty.
    pub fn merge(parts: &[Distribution]) -> Option<Distribution> {
        match parts {
            [] => return None,
            [one] => return Some(one.clone()),
            _ => {}
        }
        let count = parts.iter().map(|d| d.count).sum();
        let fold = |i: usize, f: fn(f64, f64) -> f64| {
            parts
                .iter()
                .map(|d| d.quantiles[i])
                .collect::<Option<Vec<f64>>>()
                .and_then(|v| v.into_iter().reduce(f))
        };
        let mean = parts
            .iter()
            .map(|d| d.mean.map(|m| m * d.count as f64))
            .sum::<Option<f64>>()
            .map(|s| s / count as f64);
        let mut merged = Distribution {
            count,
            quantiles: [fold(0, f64::min), None, None, None, fold(4, f64::max)],
            mean,
            buckets: Vec::new(),
        };
        if parts.iter().all(Distribution::has_buckets) {
            let mut all: Vec<(f64, u64)> = parts.iter().flat_map(|d| d.buckets.clone()).collect();
            all.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (u, n) in all {
                match merged.buckets.last_mut() {
                    Some((last, m)) if *last == u => *m += n,
                    _ => merged.buckets.push((u, n)),
                }
            }
            for (i, &(q, _)) in QUANTILES.iter().enumerate().take(4).skip(1) {
                merged.quantiles[i] = merged.bucket_quantile(q);
            }
        }
        Some(merged)
    }

    /// The upper bound of the bucket where the cumulative count reaches `q`.
    fn bucket_quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.buckets.iter().map(|b| b.1).sum();
        let want = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for &(u, n) in &self.buckets {
            seen += n;
            if seen >= want {
                return Some(u);
            }
        }
        self.buckets.last().map(|b| b.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for &v in values {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn buckets_hold_every_value_four_per_octave() {
        let values: Vec<u64> = (0..1000).map(|i| 1000 + i * 37).collect();
        let j = to_json(&hist(&values), "ns");
        let pairs = j["log_buckets"].as_array().unwrap();
        let total: u64 = pairs.iter().map(|p| p[1].as_u64().unwrap()).sum();
        assert_eq!(total, 1000);
        // 1000 .. 37963 ns: log2 spans 5.2 octaves, so ~21 buckets.
        assert!((20..=23).contains(&pairs.len()), "{}", pairs.len());
        // Each bound is 2^(1/4) times the previous.
        let u: Vec<f64> = pairs.iter().map(|p| p[0].as_f64().unwrap()).collect();
        for w in u.windows(2) {
            let r = w[1] / w[0];
            assert!((r - 2f64.powf(0.25)).abs() < 0.01, "{w:?}");
        }
        assert!(u[0] >= 1000.0 && *u.last().unwrap() >= 37963.0);
        assert_eq!(to_json(&hist(&[]), "ns"), json!({"count": 0}));
    }

    #[test]
    fn reads_back_in_ns_and_draws_a_cdf() {
        let j = to_json(&hist(&[10, 20, 30, 40]), "us");
        let d = Distribution::from_json(&j).unwrap();
        assert_eq!(d.count, 4);
        assert_eq!(d.quantiles[0], Some(10_000.0));
        let cdf = d.cdf();
        assert_eq!(cdf.first().unwrap().1, 0.0);
        assert_eq!(cdf.last().unwrap().1, 1.0);
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        // An old result: quantiles only.
        let old = json!({"count": 5, "unit": "ns", "min": 1, "p50": 5, "p90": 9,
                         "p99": 10, "max": 10, "mean": 5.0});
        let d = Distribution::from_json(&old).unwrap();
        assert!(!d.has_buckets());
        assert_eq!(d.cdf().len(), 5);
        assert_eq!(d.cdf()[1], (5.0, 0.5));
        for bad in [
            json!({"count": 0}),
            json!({"count": 3, "unit": "parsec"}),
            json!(7),
        ] {
            assert!(Distribution::from_json(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn merging_adds_buckets() {
        let a = Distribution::from_json(&to_json(&hist(&[100; 10]), "ns")).unwrap();
        let b = Distribution::from_json(&to_json(&hist(&[10_000; 30]), "ns")).unwrap();
        let m = Distribution::merge(&[a.clone(), b]).unwrap();
        assert_eq!(m.count, 40);
        assert_eq!(m.buckets.iter().map(|x| x.1).sum::<u64>(), 40);
        assert_eq!(m.quantiles[0], Some(100.0));
        // The largest value as hdrhistogram keeps it: 3 significant digits.
        assert!(
            (10_000.0..10_010.0).contains(&m.quantiles[4].unwrap()),
            "{m:?}"
        );
        // p50 falls in the 10 us bucket.
        assert!(m.quantiles[1].unwrap() >= 10_000.0, "{m:?}");
        let mean = (100.0 * 10.0 + 10_000.0 * 30.0) / 40.0;
        assert!((m.mean.unwrap() - mean).abs() < mean * 1e-3, "{m:?}");
        assert_eq!(Distribution::merge(std::slice::from_ref(&a)), Some(a));
        assert_eq!(Distribution::merge(&[]), None);
    }
}
