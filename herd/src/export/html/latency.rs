//! Latency distributions: for each group of histograms (creation and
//! start; exit, split by the path that ended the thread; a pool's
//! queueing and completion) two charts, the cumulative distribution on a
//! log latency axis (where the bulk lies) and the percentile spectrum
//! (latency against 90%, 99%, 99.9%, ...: where the tail lies, as
//! HdrHistogram plots it), and a table of the quantiles. In a comparison
//! each histogram gets the pair with one line per configuration.
//!
//! A result written before herd kept histogram buckets has five
//! quantiles per histogram: those are drawn as points joined by lines, and
//! the caption says so.

use std::fmt::Write as _;

use super::chart::{legend, Axis, Plot};
use super::markup::{esc, fmt_ns, para, Cell, Table};
use crate::export::histogram::{Distribution, QUANTILES};

/// What a histogram measures, for titles and legends.
pub(crate) fn describe(name: &str) -> (&str, &str) {
    match name {
        "create" => ("create", "the pthread_create (or spawn) call"),
        "start" => (
            "start",
            "creation request to the thread's first instruction",
        ),
        "exit" => (
            "exit, asleep when asked",
            "stop request to the exit destructor",
        ),
        "exit_done" => (
            "exit done, asleep when asked",
            "stop request to the end of the exit destructor, the exit hook included",
        ),
        "exit_spinning" => (
            "exit, asked while spinning",
            "stop request to the exit destructor; includes the rest of the spin",
        ),
        "exit_own" => (
            "exit, sleep ran out",
            "end of the sleep to the exit destructor",
        ),
        "exit_hook" => (
            "exit hook",
            "the exit-cleanup strategy's work in the destructor",
        ),
        "latency" => ("queueing", "job submitted to job started"),
        "completion" => ("completion", "job submitted to job finished"),
        other => (other, "recorded by the scenario"),
    }
}

/// The group a histogram is drawn in: `(order, title)`.
fn group(name: &str) -> (u8, &'static str) {
    match name {
        "create" | "start" => (0, "Thread creation and start"),
        "exit" | "exit_done" | "exit_spinning" | "exit_own" | "exit_hook" => {
            (1, "Exit latency by exit path")
        }
        "latency" | "completion" => (2, "Job queueing and completion"),
        _ => (3, "Other latencies"),
    }
}

/// Percentile-spectrum position of cumulative fraction `f`: -log10(1-f),
/// so 90% is 1, 99% is 2; the last value of `count` sits at log10(count).
fn nines(f: f64, count: u64) -> f64 {
    let floor = 1.0 / count.max(1) as f64;
    -(1.0 - f).max(floor).log10()
}

/// A spectrum tick: `0%`, `90%`, `99%`, `99.9%`, ...
fn nines_label(x: f64) -> String {
    let q = (1.0 - 10f64.powf(-x)) * 100.0;
    let decimals = (x.ceil() as i32 - 2).clamp(0, 6) as usize;
    format!("{q:.decimals$}%")
}

/// The staircase of a distribution on the spectrum: `(position, ns)`.
fn spectrum(d: &Distribution) -> Vec<(f64, f64)> {
    if !d.has_buckets() {
        return QUANTILES
            .iter()
            .zip(&d.quantiles)
            .filter_map(|(&(q, _), v)| v.map(|v| (nines(q, d.count), v)))
            .collect();
    }
    let total: u64 = d.buckets.iter().map(|b| b.1).sum();
    let mut pts = Vec::with_capacity(2 * d.buckets.len());
    let mut seen = 0u64;
    for &(upper, n) in &d.buckets {
        pts.push((nines(seen as f64 / total as f64, total), upper));
        seen += n;
        pts.push((nines(seen as f64 / total as f64, total), upper));
    }
    pts
}

/// The CDF and spectrum charts of `series` (label, distribution), titled
/// `title`; `None` when none has a point.
pub(crate) fn charts(title: &str, series: &[(String, &Distribution)]) -> Option<String> {
    let cdfs: Vec<Vec<(f64, f64)>> = series.iter().map(|(_, d)| d.cdf()).collect();
    let xs = cdfs.iter().flatten().map(|p| p.0);
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    if lo > hi {
        return None;
    }
    let only_quantiles = series.iter().any(|(_, d)| !d.has_buckets());
    let mut cdf = Plot::new(
        560.0,
        300.0,
        Axis::new(lo, hi, true),
        Axis::new(0.0, 1.0, false),
    );
    cdf.frame(
        "latency (log scale)",
        "share at or below",
        &|v| fmt_ns(v),
        &|v| format!("{:.0}%", v * 100.0),
    );
    let max_pos = series
        .iter()
        .map(|(_, d)| nines(1.0, d.count))
        .fold(1.0, f64::max)
        .ceil();
    let mut tail = Plot::new(
        560.0,
        300.0,
        Axis::new(0.0, max_pos, false),
        Axis::new(lo, hi, true),
    );
    tail.frame("percentile", "latency (log scale)", &nines_label, &|v| {
        fmt_ns(v)
    });
    let mut keys = Vec::new();
    for (i, ((label, d), pts)) in series.iter().zip(&cdfs).enumerate() {
        let tip = format!("{label}: {} values, p50 {}", d.count, q_text(d, 1));
        cdf.line(pts, i, &tip);
        tail.line(&spectrum(d), i, &tip);
        if !d.has_buckets() {
            for &(x, y) in pts {
                cdf.dot(
                    x,
                    y,
                    i,
                    &format!("{label}: {} at {:.0}%", fmt_ns(x), y * 100.0),
                );
            }
        }
        keys.push((format!("{label} (n={})", d.count), i));
    }
    if cdf.marks() == 0 {
        return None;
    }
    let note = if only_quantiles {
        " Drawn from five quantiles (min, p50, p90, p99, max): this result has no histogram buckets."
    } else {
        ""
    };
    let key = legend(&keys);
    let mut out = format!("<h3>{}</h3><div class=\"grid\">", esc(title));
    out.push_str(&cdf.finish(
        &format!("{title}: cumulative distribution"),
        &format!("{key}<br><b>Cumulative distribution</b>: share of values at or below each latency.{note}"),
    ));
    out.push_str(&tail.finish(
        &format!("{title}: percentile spectrum"),
        &format!("{key}<br><b>Percentile spectrum</b>: the latency at each percentile; the tail to the right.{note}"),
    ));
    out.push_str("</div>\n");
    Some(out)
}

/// Quantile `i` of `d` as text (`n/a` when unknown).
fn q_text(d: &Distribution, i: usize) -> String {
    d.quantiles[i].map(fmt_ns).unwrap_or_else(|| "n/a".into())
}

/// The quantile table: one row per `(label, what, distribution)`.
fn table(rows: &[(String, String, &Distribution)]) -> String {
    let mut t = Table::new(&[
        "histogram",
        "measures",
        "count",
        "min",
        "p50",
        "p90",
        "p99",
        "max",
        "mean",
    ]);
    for (label, what, d) in rows {
        let mut cells = vec![
            Cell::text(label),
            Cell::text(what),
            Cell::num(d.count as f64),
        ];
        for v in d.quantiles.iter().chain([&d.mean]) {
            cells.push(match v {
                Some(v) => Cell::num_as(*v, fmt_ns(*v)),
                None => Cell::none(),
            });
        }
        t.row(cells);
    }
    t.render()
}

/// A group of histograms drawn together: its order, title and series.
type Group<'a> = (u8, &'static str, Vec<(String, &'a Distribution)>);

/// The latency section of one configuration's runs.
pub(crate) fn section(dists: &[(String, Distribution)], runs: usize) -> String {
    let mut out = String::from("<h2>Latency distributions</h2>\n");
    if dists.is_empty() {
        out.push_str(&para(
            "note",
            "This result has no latency histograms (the scenario records none, or no thread got that far).",
        ));
        return out;
    }
    if runs > 1 {
        out.push_str(&para(
            "note",
            &format!("Histograms of the {runs} runs added together."),
        ));
    }
    let mut groups: Vec<Group<'_>> = Vec::new();
    for (name, d) in dists {
        let (order, title) = group(name);
        let label = describe(name).0.to_string();
        match groups.iter_mut().find(|g| g.0 == order) {
            Some(g) => g.2.push((label, d)),
            None => groups.push((order, title, vec![(label, d)])),
        }
    }
    groups.sort_by_key(|g| g.0);
    for (_, title, series) in &groups {
        if let Some(c) = charts(title, series) {
            out.push_str(&c);
        }
    }
    let rows: Vec<(String, String, &Distribution)> = dists
        .iter()
        .map(|(n, d)| {
            let (label, what) = describe(n);
            (label.to_string(), what.to_string(), d)
        })
        .collect();
    out.push_str(&table(&rows));
    out
}

/// The latency section of a comparison: per histogram, one line per
/// configuration (`per_config[i]` is configuration `labels[i]`'s).
pub(crate) fn by_config(labels: &[String], per_config: &[Vec<(String, Distribution)>]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for dists in per_config {
        for (n, _) in dists {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    if names.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Latency distributions by configuration</h2>\n\
         <p class=\"note\">Each configuration's runs added together.</p>\n",
    );
    let mut rows = Vec::new();
    for name in names {
        let (label, what) = describe(name);
        let series: Vec<(String, &Distribution)> = labels
            .iter()
            .zip(per_config)
            .filter_map(|(l, dists)| {
                let d = dists.iter().find(|(n, _)| n == name)?;
                Some((l.clone(), &d.1))
            })
            .collect();
        if let Some(c) = charts(&format!("{label}: {what}"), &series) {
            out.push_str(&c);
        }
        for (l, d) in series {
            rows.push((format!("{label} · {l}"), what.to_string(), d));
        }
    }
    let _ = write!(out, "{}", table(&rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(buckets: Vec<(f64, u64)>) -> Distribution {
        let count = buckets.iter().map(|b| b.1).sum();
        Distribution {
            count,
            quantiles: [
                Some(buckets[0].0 / 2.0),
                None,
                None,
                None,
                buckets.last().map(|b| b.0),
            ],
            mean: None,
            buckets,
        }
    }

    #[test]
    fn spectrum_positions() {
        assert_eq!(nines(0.0, 100), 0.0);
        assert!((nines(0.9, 100) - 1.0).abs() < 1e-12);
        assert!((nines(1.0, 1000) - 3.0).abs() < 1e-12);
        assert_eq!(nines_label(0.0), "0%");
        assert_eq!(nines_label(2.0), "99%");
        assert_eq!(nines_label(3.0), "99.9%");
        let s = spectrum(&dist(vec![(100.0, 90), (1000.0, 9), (10_000.0, 1)]));
        assert_eq!(s.len(), 6);
        assert_eq!(s[0], (0.0, 100.0));
        assert!((s[5].0 - 2.0).abs() < 1e-12 && s[5].1 == 10_000.0);
    }

    #[test]
    fn charts_draw_every_series_or_nothing() {
        let a = dist(vec![(100.0, 5), (200.0, 5)]);
        let b = dist(vec![(1000.0, 1)]);
        let html = charts("t", &[("a".into(), &a), ("b".into(), &b)]).unwrap();
        assert_eq!(html.matches("<figure class=\"chart\">").count(), 2);
        assert!(html.matches("class=\"d\"").count() >= 4, "{html}");
        assert!(charts("t", &[]).is_none());
        let s = section(&[("exit".into(), a), ("weird<x>".into(), b)], 3);
        assert!(
            s.contains("Exit latency by exit path") && s.contains("weird&lt;x&gt;"),
            "{s}"
        );
        assert!(s.contains("3 runs added together"));
        assert!(section(&[], 1).contains("no latency histograms"));
    }
}
