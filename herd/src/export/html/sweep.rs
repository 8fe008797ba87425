//! A section for a sweep (`herd sweep`'s `data.json`): one chart per
//! metric, the swept flag on the x axis (log when the sweep is), one line
//! per configuration through the means, a bar from the smallest to the
//! largest run at every point, and the significance mark of each point
//! against the first configuration written above it. Metrics that are 0
//! everywhere are listed, not drawn.
//!
//! [`SweepView`] is what the page needs of a sweep document; the sweep
//! module builds it (`SweepDoc::report_view`), so this module needs
//! nothing of the scenario's.

use super::chart::{legend, Axis, Plot};
use super::headline::{self, Headline};
use super::markup::{details, esc, para, shell_line, Cell, Table};
use super::problems::Findings;
use super::Section;
use crate::export::format::{change_text, pct_text};
use crate::format::fmt_value;
use crate::result::RunResult;
use crate::stats::{Change, Summary};

/// One metric over the sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepLine {
    /// Metric name.
    pub name: String,
    /// Unit.
    pub unit: String,
    /// Per series, per value.
    pub summaries: Vec<Vec<Option<Summary>>>,
    /// Per series, per value: against series 0 at that value.
    pub changes: Vec<Vec<Option<Change>>>,
}

impl SweepLine {
    /// Series `s` at value `i` against the first series, if computed.
    fn change(&self, s: usize, i: usize) -> Option<&Change> {
        self.changes.get(s)?.get(i)?.as_ref()
    }
}

/// What the report shows of a sweep.
#[derive(Debug, Clone, Default)]
pub struct SweepView {
    /// The scenario.
    pub scenario: String,
    /// Shared scenario flags.
    pub common_args: Vec<String>,
    /// The command line (after `herd`), when recorded.
    pub command: Vec<String>,
    /// The swept flag.
    pub flag: String,
    /// Its values as passed.
    pub values: Vec<String>,
    /// Its values as numbers.
    pub x: Vec<f64>,
    /// Log x axis.
    pub log_x: bool,
    /// Configuration labels (the lines).
    pub series: Vec<String>,
    /// Each configuration's own arguments (after the shared ones).
    pub series_args: Vec<Vec<String>>,
    /// Significance level.
    pub alpha: f64,
    /// Per metric.
    pub metrics: Vec<SweepLine>,
    /// Every run of every point.
    pub runs: Vec<RunResult>,
    /// Rounds (runs per point).
    pub rounds: usize,
    /// The document's notes.
    pub notes: Vec<String>,
}

impl SweepView {
    /// The command that makes this sweep again.
    fn command(&self) -> (String, Option<String>) {
        if !self.command.is_empty() {
            let mut w = vec!["herd".to_string()];
            w.extend(self.command.iter().cloned());
            return (shell_line(&w), None);
        }
        let mut w: Vec<String> = vec![
            "herd".into(),
            "sweep".into(),
            "--scenario".into(),
            self.scenario.clone(),
        ];
        w.push("--over".into());
        w.push(format!(
            "{}={}",
            self.flag.trim_start_matches('-'),
            self.values.join(",")
        ));
        w.extend(["-r".to_string(), self.rounds.to_string()]);
        for a in &self.series_args {
            if !a.is_empty() {
                w.extend(["--config".to_string(), shell_line(a)]);
            }
        }
        w.push("--".into());
        w.extend(self.common_args.iter().cloned());
        (
            shell_line(&w),
            Some(
                "Reconstructed: this document records no command line (herd before 2026-12-03)."
                    .into(),
            ),
        )
    }
}

/// The chart of one metric; `None` when it has no point.
fn chart(v: &SweepView, m: &SweepLine) -> Option<String> {
    let mut lo = f64::MAX;
    let mut hi = f64::MIN;
    for s in m.summaries.iter().flatten().flatten() {
        lo = lo.min(s.min);
        hi = hi.max(s.max);
    }
    if lo > hi {
        return None;
    }
    let lo = if lo >= 0.0 { 0.0 } else { lo };
    let (x0, x1) =
        v.x.iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let (pad_lo, pad_hi) = if v.log_x {
        (x0 / 1.3, x1 * 1.3)
    } else {
        (x0 - (x1 - x0) * 0.04, x1 + (x1 - x0) * 0.04)
    };
    let mut p = Plot::new(
        560.0,
        300.0,
        Axis::new(pad_lo, pad_hi, v.log_x && x0 > 0.0),
        Axis::new(lo, hi * 1.08, false),
    );
    p.frame(
        &v.flag,
        &format!("{} ({})", m.name, m.unit),
        &|x| fmt_value(x),
        &|y| fmt_value(y),
    );
    let mut keys = Vec::new();
    for (s, row) in m.summaries.iter().enumerate() {
        let label = v.series.get(s).cloned().unwrap_or_default();
        let pts: Vec<(f64, f64)> = row
            .iter()
            .zip(&v.x)
            .filter_map(|(sum, &x)| sum.as_ref().map(|sum| (x, sum.mean)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        p.line(&pts, s, &label);
        for (i, (sum, &x)) in row.iter().zip(&v.x).enumerate() {
            let Some(sum) = sum else { continue };
            let change = m.change(s, i);
            let mark = change.map(Change::mark).unwrap_or_default();
            let pct = change
                .and_then(|c| c.pct)
                .map(|p| format!(", {} {mark}", pct_text(p)))
                .unwrap_or_default();
            let tip = format!(
                "{label} at {}={}: mean {} ±{:.1}% (n={}), {} to {}{pct}",
                v.flag,
                v.values.get(i).map_or("?", String::as_str),
                fmt_value(sum.mean),
                sum.pct_stddev(),
                sum.n,
                fmt_value(sum.min),
                fmt_value(sum.max)
            );
            p.error_bar(x, sum.min, sum.max, s, &tip);
            p.dot(x, sum.mean, s, &tip);
            if !mark.is_empty() {
                p.note(x, sum.max, -6.0, s, &mark);
            }
        }
        keys.push((label, s));
    }
    if p.marks() == 0 {
        return None;
    }
    let caption = format!(
        "{}<br><b>{}</b> ({}): mean per point, bar from the smallest to the largest run; marks against {}.",
        legend(&keys),
        esc(&m.name),
        esc(&m.unit),
        esc(v.series.first().map_or("the first configuration", String::as_str))
    );
    Some(p.finish(&format!("{} over {}", m.name, v.flag), &caption))
}

/// Every point of every metric: one row per metric, configuration and value.
fn table(v: &SweepView) -> String {
    let mut t = Table::new(&[
        "metric",
        "unit",
        "configuration",
        &v.flag,
        "mean",
        "±%stddev",
        "n",
        "min",
        "max",
        "%change",
    ]);
    for m in &v.metrics {
        for (s, row) in m.summaries.iter().enumerate() {
            for (i, sum) in row.iter().enumerate() {
                let Some(sum) = sum else { continue };
                let change = m.change(s, i);
                t.row(vec![
                    Cell::text(&m.name),
                    Cell::text(&m.unit),
                    Cell::text(v.series.get(s).map_or("", String::as_str)),
                    v.x.get(i).map_or_else(Cell::none, |&x| Cell::num(x)),
                    Cell::num(sum.mean),
                    Cell::num_as(sum.pct_stddev(), format!("{:.1}%", sum.pct_stddev())),
                    Cell::num(sum.n as f64),
                    Cell::num(sum.min),
                    Cell::num(sum.max),
                    Cell::num_as(
                        change.and_then(|c| c.pct).unwrap_or(f64::NAN),
                        change_text(change, true),
                    ),
                ]);
            }
        }
    }
    t.render()
}

/// The section of `s` for sweep `v`.
pub(crate) fn section(s: &Section, v: &SweepView, id: &str) -> String {
    let runs: Vec<&RunResult> = v.runs.iter().collect();
    let notes: Vec<(String, usize)> = Vec::new();
    let findings = Findings::of(&runs, &notes, s.gaps.clone());
    let (command, note) = v.command();
    let facts = vec![
        (
            "swept".to_string(),
            format!(
                "{} = {}{}",
                v.flag,
                v.values.join(", "),
                if v.log_x { " (log axis)" } else { "" }
            ),
        ),
        ("configurations".to_string(), v.series.join("; ")),
        ("runs per point".to_string(), v.rounds.to_string()),
        ("significance".to_string(), format!("alpha {}", v.alpha)),
    ];
    let h = Headline {
        title: format!("herd sweep: {} over {}", v.scenario, v.flag),
        id: id.to_string(),
        origin: format!("{} ({})", s.origin, s.kind),
        command,
        command_note: note,
        when: headline::when(&runs, s.file_time.as_deref()),
        version: headline::version(&runs),
        status: findings.status(),
        facts,
    };
    let host = runs
        .first()
        .map_or_else(Vec::new, |r| headline::host_facts(&r.host, &r.config));
    let mut out = headline::render(&h, &host);
    out.push_str(&findings.section());
    out.push_str("<h2>Metrics over the sweep</h2>\n");
    for n in &v.notes {
        out.push_str(&para("note", n));
    }
    out.push_str("<div class=\"grid\">");
    let mut flat = Vec::new();
    for m in &v.metrics {
        let zero = m
            .summaries
            .iter()
            .flatten()
            .flatten()
            .all(|s| s.min == 0.0 && s.max == 0.0);
        if zero {
            flat.push(m.name.as_str());
        } else if let Some(c) = chart(v, m) {
            out.push_str(&c);
        }
    }
    out.push_str("</div>\n");
    out.push_str(&details("Every point as a table", &table(v), false));
    if !flat.is_empty() {
        out.push_str(&para(
            "note",
            &format!("0 at every point: {}.", flat.join(", ")),
        ));
    }
    out.push_str("</section>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(v: f64) -> Option<Summary> {
        Summary::of(&[v * 0.9, v, v * 1.1])
    }

    #[test]
    fn one_chart_per_metric_zero_metrics_listed() {
        let v = SweepView {
            scenario: "storm".into(),
            flag: "--per-wave".into(),
            values: vec!["10".into(), "100".into()],
            x: vec![10.0, 100.0],
            log_x: true,
            series: vec!["cleanup=locked".into(), "cleanup=exitq".into()],
            series_args: vec![
                vec!["--cleanup".into(), "locked".into()],
                vec!["--cleanup".into(), "exitq".into()],
            ],
            rounds: 3,
            metrics: vec![
                SweepLine {
                    name: "futex_per_exit".into(),
                    unit: "calls".into(),
                    summaries: vec![vec![summary(2.0), summary(4.0)], vec![summary(0.5), None]],
                    changes: vec![vec![None, None], vec![None, None]],
                },
                SweepLine {
                    name: "cleanup_violations".into(),
                    unit: "violations".into(),
                    summaries: vec![vec![summary(0.0), summary(0.0)]],
                    changes: vec![],
                },
            ],
            ..SweepView::default()
        };
        let s = Section::test("data.json", "sweep");
        let html = section(&s, &v, "s0");
        assert_eq!(
            html.matches("<figure class=\"chart\">").count(),
            1,
            "{html}"
        );
        assert!(html.contains("0 at every point: cleanup_violations."));
        // 3 points: each an error bar and a dot, plus 2 lines.
        assert_eq!(html.matches("class=\"d\"").count(), 3 * 2 + 2 + 1, "{html}");
        assert!(html.contains(
            "herd sweep --scenario storm --over &#39;per-wave=10,100&#39; -r 3 --config &#39;--cleanup locked&#39;"
        ), "{html}");
    }
}
