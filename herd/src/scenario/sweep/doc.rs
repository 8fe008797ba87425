//! The sweep document (`DIR/data.json`): every run of every (value,
//! configuration) point, the per-metric summaries and changes against the
//! first configuration, and its renderings (table, CSV, one SVG chart per
//! metric).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::Values;
use crate::export::comparison::{complete_summary, metric_order};
use crate::export::format::{change_text, render_grid, summary_text};
use crate::export::html::{SweepLine, SweepView};
use crate::export::{svg, write_file};
use crate::result::{Better, RunSet, SCHEMA_VERSION};
use crate::stats::{Change, Summary};

/// One measured point: a configuration at one value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Index into [`SweepDoc::series`].
    pub series: usize,
    /// The value as passed to the scenario.
    pub value: String,
    /// The same as a number.
    pub x: f64,
    /// Its runs.
    pub set: RunSet,
}

/// One metric over the sweep: `summaries[series][value index]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepMetric {
    /// Metric name.
    pub name: String,
    /// Unit.
    pub unit: String,
    /// Which direction is an improvement.
    pub better: Better,
    /// Per series, per value (`None`: not measured there).
    pub summaries: Vec<Vec<Option<Summary>>>,
    /// Per series, per value: against series 0 at the same value.
    pub changes: Vec<Vec<Option<Change>>>,
}

/// The sweep document (`data.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepDoc {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Always `herd-sweep`.
    pub kind: String,
    /// The scenario.
    pub scenario: String,
    /// Shared scenario flags.
    pub common_args: Vec<String>,
    /// The swept flag.
    pub flag: String,
    /// Its values (as passed).
    pub values: Vec<String>,
    /// Its values (as numbers).
    pub x: Vec<f64>,
    /// Log x axis.
    pub log_x: bool,
    /// Configuration labels (chart lines).
    pub series: Vec<String>,
    /// Significance level.
    pub alpha: f64,
    /// Per metric figures.
    pub metrics: Vec<SweepMetric>,
    /// Every run.
    pub points: Vec<SweepPoint>,
    /// Things the reader must know.
    pub notes: Vec<String>,
    /// The command line that made the document (after `herd`); absent in
    /// documents of herd before 2026-12-03.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
}

impl SweepDoc {
    /// Computes the per-metric summaries of `points`.
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        scenario: &str,
        common_args: Vec<String>,
        values: &Values,
        series: Vec<String>,
        points: Vec<SweepPoint>,
        alpha: f64,
        filter: &[String],
    ) -> SweepDoc {
        let order = metric_order(points.iter().flat_map(|p| &p.set.runs), filter);
        let summary = |s: usize, v: usize, name: &str| -> Option<Summary> {
            let p = points
                .iter()
                .find(|p| p.series == s && p.value == values.text[v])?;
            complete_summary(&p.set, name)
        };
        let metrics = order
            .into_iter()
            .map(|(name, unit, better)| {
                let summaries: Vec<Vec<Option<Summary>>> = (0..series.len())
                    .map(|s| {
                        (0..values.text.len())
                            .map(|v| summary(s, v, &name))
                            .collect()
                    })
                    .collect();
                let changes = summaries
                    .iter()
                    .enumerate()
                    .map(|(s, row)| {
                        row.iter()
                            .enumerate()
                            .map(|(v, b)| match (s, &summaries[0][v], b) {
                                (0, _, _) => None,
                                (_, Some(a), Some(b)) => Some(Change::between(a, b, better, alpha)),
                                _ => None,
                            })
                            .collect()
                    })
                    .collect();
                SweepMetric {
                    name,
                    unit,
                    better,
                    summaries,
                    changes,
                }
            })
            .collect();
        let mut metrics: Vec<SweepMetric> = metrics;
        let tests = adjust_sweep(&mut metrics, alpha);
        SweepDoc {
            schema: SCHEMA_VERSION,
            kind: "herd-sweep".into(),
            scenario: scenario.into(),
            common_args,
            flag: values.flag.clone(),
            values: values.text.clone(),
            x: values.x.clone(),
            log_x: values.log,
            series,
            alpha,
            metrics,
            points,
            notes: vec![crate::stats::family_note(tests, alpha)],
            command: Vec::new(),
        }
    }

    /// What `herd report` shows of this sweep.
    pub fn report_view(&self) -> SweepView {
        let series_args = (0..self.series.len())
            .map(|s| {
                let Some(run) = self
                    .points
                    .iter()
                    .find(|p| p.series == s)
                    .and_then(|p| p.set.runs.first())
                else {
                    return Vec::new();
                };
                // A point's arguments: the shared ones, the series' own, the swept flag.
                let end = run.args.len().saturating_sub(2);
                run.args
                    .get(self.common_args.len().min(end)..end)
                    .unwrap_or_default()
                    .to_vec()
            })
            .collect();
        SweepView {
            scenario: self.scenario.clone(),
            common_args: self.common_args.clone(),
            command: self.command.clone(),
            flag: self.flag.clone(),
            values: self.values.clone(),
            x: self.x.clone(),
            log_x: self.log_x,
            series: self.series.clone(),
            series_args,
            alpha: self.alpha,
            metrics: self
                .metrics
                .iter()
                .map(|m| SweepLine {
                    name: m.name.clone(),
                    unit: m.unit.clone(),
                    summaries: m.summaries.clone(),
                    changes: m.changes.clone(),
                })
                .collect(),
            runs: self
                .points
                .iter()
                .flat_map(|p| p.set.runs.clone())
                .collect(),
            rounds: self
                .points
                .iter()
                .map(|p| p.set.runs.len())
                .max()
                .unwrap_or(0),
            notes: self.notes.clone(),
        }
    }

    /// One chart per metric.
    pub fn charts(&self) -> Vec<(String, svg::Chart)> {
        self.metrics
            .iter()
            .map(|m| {
                let series = self
                    .series
                    .iter()
                    .zip(&m.summaries)
                    .map(|(label, row)| svg::Series {
                        label: label.clone(),
                        points: row
                            .iter()
                            .zip(&self.x)
                            .filter_map(|(s, &x)| {
                                s.as_ref().map(|s| svg::Point {
                                    x,
                                    mean: s.mean,
                                    min: s.min,
                                    max: s.max,
                                })
                            })
                            .collect(),
                    })
                    .filter(|s| !s.points.is_empty())
                    .collect();
                let chart = svg::Chart {
                    title: format!(
                        "herd {} {}: {}",
                        self.scenario,
                        self.common_args.join(" "),
                        m.name
                    ),
                    x_label: self.flag.clone(),
                    y_label: format!("{} ({})", m.name, m.unit),
                    log_x: self.log_x,
                    series,
                };
                (m.name.clone(), chart)
            })
            .collect()
    }

    /// Long-format CSV.
    pub fn to_csv(&self) -> Result<String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "metric",
            "unit",
            "config",
            "flag",
            "value",
            "n",
            "mean",
            "stddev",
            "median",
            "min",
            "max",
            "pct_change",
            "p_value",
            "q_value",
            "significant",
        ])?;
        for m in &self.metrics {
            for (s, label) in self.series.iter().enumerate() {
                for (v, value) in self.values.iter().enumerate() {
                    let Some(sm) = &m.summaries[s][v] else {
                        continue;
                    };
                    let ch = m.changes[s][v];
                    let opt = |x: Option<f64>| x.map(|x| x.to_string()).unwrap_or_default();
                    w.write_record([
                        m.name.clone(),
                        m.unit.clone(),
                        label.clone(),
                        self.flag.clone(),
                        value.clone(),
                        sm.n.to_string(),
                        sm.mean.to_string(),
                        sm.stddev.to_string(),
                        sm.median.to_string(),
                        sm.min.to_string(),
                        sm.max.to_string(),
                        opt(ch.and_then(|c| c.pct)),
                        opt(ch.and_then(|c| c.welch).map(|w| w.p)),
                        opt(ch.and_then(|c| c.q)),
                        ch.map(|c| c.significant.to_string()).unwrap_or_default(),
                    ])?;
                }
            }
        }
        Ok(String::from_utf8(w.into_inner()?)?)
    }

    /// Per metric: one row per value, per configuration `mean ±%stddev`
    /// and (after the first) `%change` with its mark.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        for m in &self.metrics {
            let _ = writeln!(out, "\n{} ({})", m.name, m.unit);
            let mut grid = vec![{
                let mut h = vec![self.flag.clone()];
                for (s, l) in self.series.iter().enumerate() {
                    h.push(l.clone());
                    if s > 0 {
                        h.push("%change".into());
                    }
                }
                h
            }];
            for (v, value) in self.values.iter().enumerate() {
                let mut line = vec![value.clone()];
                for s in 0..self.series.len() {
                    line.push(summary_text(m.summaries[s][v].as_ref()));
                    if s > 0 {
                        line.push(change_text(m.changes[s][v].as_ref(), false));
                    }
                }
                grid.push(line);
            }
            out.push_str(&render_grid(&grid, 1));
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    /// Writes data.json, data.csv and one SVG per metric into `dir`;
    /// returns the SVG paths. When data.json cannot be written the
    /// measurements are saved elsewhere ([`super::rescue`]) and the error
    /// says where.
    pub fn write_dir(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let json = serde_json::to_string_pretty(self)?;
        let data = dir.join("data.json");
        let saved = std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create {}", dir.display()))
            .and_then(|()| write_file(&data, &json));
        if let Err(e) = saved {
            // The only copy of the measurements: kept elsewhere.
            return Err(super::rescue::keep(&json, &data, &e));
        }
        write_file(&dir.join("data.csv"), &self.to_csv()?)?;
        let mut written = Vec::new();
        for (name, chart) in self.charts() {
            if chart.series.is_empty() {
                continue;
            }
            let file: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let path = dir.join(format!("{file}.svg"));
            svg::write(&chart, &path)?;
            written.push(path);
        }
        Ok(written)
    }
}

/// Every change of the sweep is one test of one family (all metrics,
/// values and series): Benjamini–Hochberg over them ([`crate::stats::adjust_family`]).
fn adjust_sweep(metrics: &mut [SweepMetric], alpha: f64) -> usize {
    let mut members = Vec::new();
    for m in metrics.iter_mut() {
        let better = m.better;
        let base: Vec<Option<f64>> = m.summaries[0]
            .iter()
            .map(|s| s.as_ref().map(|s| s.mean))
            .collect();
        for (s, row) in m.changes.iter_mut().enumerate() {
            for (v, ch) in row.iter_mut().enumerate() {
                let mean_b = m.summaries[s][v].as_ref().map(|x| x.mean);
                members.extend(crate::stats::FamilyMember::of(
                    ch.as_mut(),
                    base[v],
                    mean_b,
                    better,
                ));
            }
        }
    }
    crate::stats::adjust_family(&mut members, alpha)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{Metric, RunResult};
    use crate::scenario::sweep::{parse_values, Scale};

    #[test]
    fn document_charts_and_csv() {
        let values = parse_values("per-wave=10,100", 5, Scale::Lin).unwrap();
        let mut points = Vec::new();
        for s in 0..2 {
            for (v, x) in values.text.iter().zip(&values.x) {
                let runs = (0..3)
                    .map(|k| {
                        let mut r = RunResult::new(
                            "storm",
                            vec![],
                            serde_json::json!({}),
                            serde_json::json!({}),
                        );
                        let base = if s == 0 { 2.0 } else { 0.5 };
                        r.push(Metric::lower(
                            "futex_per_exit",
                            "calls",
                            base * x + k as f64 * 0.01,
                        ));
                        r
                    })
                    .collect();
                points.push(SweepPoint {
                    series: s,
                    value: v.clone(),
                    x: *x,
                    set: RunSet {
                        schema: SCHEMA_VERSION,
                        label: String::new(),
                        runs,
                    },
                });
            }
        }
        let doc = SweepDoc::build(
            "storm",
            vec![],
            &values,
            vec!["cleanup=locked".into(), "cleanup=exitq".into()],
            points,
            0.05,
            &[],
        );
        let m = &doc.metrics[0];
        assert!((m.summaries[1][1].as_ref().unwrap().mean - 50.01).abs() < 1e-9);
        let c = m.changes[1][1].unwrap();
        assert!(
            c.significant && (c.pct.unwrap() + 75.0).abs() < 0.1,
            "{c:?}"
        );
        let table = doc.to_table();
        assert!(table.contains("futex_per_exit (calls)"), "{table}");
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("100 ") && l.contains("-75.0% ***R")),
            "{table}"
        );
        let csv = doc.to_csv().unwrap();
        assert_eq!(csv.lines().count(), 1 + 4);
        let dir = tempfile::tempdir().unwrap();
        let svgs = doc.write_dir(dir.path()).unwrap();
        assert_eq!(svgs.len(), 1);
        let svg = std::fs::read_to_string(&svgs[0]).unwrap();
        assert!(svg.contains("cleanup=exitq"));
        let back: SweepDoc =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("data.json")).unwrap())
                .unwrap();
        assert_eq!(back.values, ["10", "100"]);
        assert_eq!(back.points.len(), 4);
    }
}
