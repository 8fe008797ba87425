//! Several configurations side by side: the document `herd compare` and
//! `herd diff` print, and its renderings (table, JSON, CSV, Markdown).
//!
//! A [`Comparison`] is built from one [`RunSet`] per configuration; the
//! first set is the baseline. For every metric that appears in any run
//! there is one [`Row`] with one [`Cell`] per configuration: the
//! [`Summary`] of that metric over the configuration's complete runs and,
//! except for the baseline, the [`Change`] against the baseline (%change,
//! Welch's p-value, LKP's range rule, verdict). Interrupted runs and runs
//! that failed their own checks are kept in the document (`sets`) but left
//! out of the statistics ([`RunResult::counted`]), each set's number of
//! them said in a note.
//!
//! The JSON document keeps the raw runs, so `herd diff` can re-read it and
//! compare it with another one. The flags that choose the format are
//! [`crate::export::comparison_output`]; values print by
//! [`crate::export::format`]'s one rule.

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::export::format::{
    better_name, change_text, md_code, md_escape, render_grid, summary_text, verdict_name,
};
use crate::result::{Better, RunResult, RunSet, SCHEMA_VERSION};
use crate::stats::{Change, Summary};

/// Value of [`Comparison::kind`], to recognise the document when read back.
pub const KIND: &str = "herd-comparison";

/// One configuration's figures for one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Summary over the configuration's complete runs that have the metric
    /// (`None`: no run has it).
    pub summary: Option<Summary>,
    /// Against the baseline (`None` for the baseline itself, or when either
    /// side has no value).
    pub change: Option<Change>,
}

/// One metric across every configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Metric name, e.g. `futex_per_exit`.
    pub name: String,
    /// Unit for display.
    pub(crate) unit: String,
    /// Which direction is an improvement.
    pub(crate) better: Better,
    /// One cell per configuration, in [`Comparison::labels`] order.
    pub cells: Vec<Cell>,
}

/// Several configurations of one scenario, compared against the first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Always [`KIND`].
    pub kind: String,
    /// First line of the table, e.g. `herd compare: storm --waves 50`.
    #[serde(default)]
    pub(crate) title: String,
    /// The scenario every configuration ran.
    pub scenario: String,
    /// Scenario arguments shared by every configuration.
    #[serde(default)]
    pub(crate) common_args: Vec<String>,
    /// Flags that differ between configurations (e.g. `--cleanup`).
    #[serde(default)]
    pub varied: Vec<String>,
    /// Significance level used for Welch's test.
    pub(crate) alpha: f64,
    /// Configuration labels; the first is the baseline.
    pub labels: Vec<String>,
    /// One row per metric.
    pub rows: Vec<Row>,
    /// Things the reader must know (interrupted runs, single runs, ...).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The raw runs, one set per configuration (same order as `labels`).
    pub sets: Vec<RunSet>,
    /// The command line that made the document (after `herd`); absent in
    /// documents of herd before 2026-12-03.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) command: Vec<String>,
}

impl Comparison {
    /// Builds the comparison of `sets` (the first is the baseline).
    ///
    /// `metrics`: when non-empty, only rows whose name matches one of the
    /// patterns (exact, or a prefix ending in `*`).
    pub fn build(
        scenario: &str,
        common_args: Vec<String>,
        varied: Vec<String>,
        sets: Vec<RunSet>,
        alpha: f64,
        metrics: &[String],
    ) -> Comparison {
        let mut notes: Vec<String> = unmatched_patterns(sets.iter().flat_map(|s| &s.runs), metrics)
            .into_iter()
            .map(|p| format!("--metrics: `{p}` matches no metric of these runs"))
            .collect();
        let order = metric_order(sets.iter().flat_map(|s| &s.runs), metrics);
        for set in &sets {
            let partial = set.runs.iter().filter(|r| r.interrupted).count();
            if partial > 0 {
                notes.push(format!(
                    "{}: {partial} interrupted run(s) left out of the statistics",
                    set.label
                ));
            }
            let failed = set
                .runs
                .iter()
                .filter(|r| !r.interrupted && !r.counted())
                .count();
            if failed > 0 {
                notes.push(format!(
                    "{}: {failed} run(s) that failed their own checks left out of the statistics",
                    set.label
                ));
            }
            let complete = set.runs.iter().filter(|r| r.counted()).count();
            if complete < 2 {
                notes.push(format!(
                    "{}: {complete} complete run(s): no significance test (needs at least 2 per side)",
                    set.label
                ));
            }
        }
        let rows = order
            .into_iter()
            .map(|(name, unit, better)| {
                let base = sets.first().and_then(|s| complete_summary(s, &name));
                let cells = sets
                    .iter()
                    .enumerate()
                    .map(|(i, set)| {
                        let summary = complete_summary(set, &name);
                        let change = match (i, &base, &summary) {
                            (0, _, _) => None,
                            (_, Some(a), Some(b)) => Some(Change::between(a, b, better, alpha)),
                            _ => None,
                        };
                        Cell { summary, change }
                    })
                    .collect();
                Row {
                    name,
                    unit,
                    better,
                    cells,
                }
            })
            .collect::<Vec<Row>>();
        let mut rows = rows;
        let tests = adjust_rows(&mut rows, alpha);
        notes.push(crate::stats::family_note(tests, alpha));
        Comparison {
            schema: SCHEMA_VERSION,
            kind: KIND.to_string(),
            title: format!("herd compare: {scenario} {}", common_args.join(" "))
                .trim_end()
                .to_string(),
            scenario: scenario.to_string(),
            common_args,
            varied,
            alpha,
            labels: sets.iter().map(|s| s.label.clone()).collect(),
            rows,
            notes,
            sets,
            command: Vec::new(),
        }
    }

    /// Complete runs of configuration `i`: those the statistics count
    /// ([`RunResult::counted`]).
    pub fn complete_runs(&self, i: usize) -> usize {
        self.sets
            .get(i)
            .map_or(0, |s| s.runs.iter().filter(|r| r.counted()).count())
    }

    /// The row of metric `name`.
    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// The JSON document (pretty-printed).
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Long-format CSV: one line per metric and configuration.
    pub(crate) fn to_csv(&self) -> Result<String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "metric",
            "unit",
            "better",
            "config",
            "n",
            "mean",
            "stddev",
            "pct_stddev",
            "median",
            "min",
            "max",
            "pct_change",
            "p_value",
            "q_value",
            "lkp_changed",
            "significant",
            "verdict",
        ])?;
        for row in &self.rows {
            for (label, cell) in self.labels.iter().zip(&row.cells) {
                let s = cell.summary.as_ref();
                let c = cell.change.as_ref();
                let num = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
                w.write_record([
                    row.name.clone(),
                    row.unit.clone(),
                    better_name(row.better).to_string(),
                    label.clone(),
                    s.map(|s| s.n.to_string()).unwrap_or_default(),
                    num(s.map(|s| s.mean)),
                    num(s.map(|s| s.stddev)),
                    num(s.map(|s| s.pct_stddev())),
                    num(s.map(|s| s.median)),
                    num(s.map(|s| s.min)),
                    num(s.map(|s| s.max)),
                    num(c.and_then(|c| c.pct)),
                    num(c.and_then(|c| c.welch).map(|w| w.p)),
                    num(c.and_then(|c| c.q)),
                    c.map(|c| c.lkp.to_string()).unwrap_or_default(),
                    c.map(|c| c.significant.to_string()).unwrap_or_default(),
                    c.map(|c| verdict_name(c.verdict).to_string())
                        .unwrap_or_default(),
                ])?;
            }
        }
        Ok(String::from_utf8(w.into_inner()?)?)
    }

    /// A plain-text table in the LKP style: per configuration `mean ±
    /// %stddev`, and for the others `%change` with its significance mark.
    pub(crate) fn to_table(&self) -> String {
        let mut header1 = vec![String::new(), String::new()];
        let mut header2 = vec!["metric".to_string(), "unit".to_string()];
        for (i, label) in self.labels.iter().enumerate() {
            let n = self.complete_runs(i);
            header1.push(if i == 0 {
                format!("{label} (base)")
            } else {
                label.clone()
            });
            header2.push(format!("mean ±%stddev (n={n})"));
            if i > 0 {
                header1.push(String::new());
                header2.push("%change".to_string());
            }
        }
        let mut grid = vec![header1, header2];
        for row in &self.rows {
            let mut line = vec![row.name.clone(), row.unit.clone()];
            for (i, cell) in row.cells.iter().enumerate() {
                line.push(summary_text(cell.summary.as_ref()));
                if i > 0 {
                    line.push(change_text(cell.change.as_ref(), true));
                }
            }
            grid.push(line);
        }
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.title);
        out.push_str(&render_grid(&grid, 2));
        out.push_str(&self.legend());
        out
    }

    /// A GitHub-flavoured Markdown table with the same content.
    pub(crate) fn to_markdown(&self) -> String {
        let mut head = vec!["metric".to_string(), "unit".to_string()];
        for (i, label) in self.labels.iter().enumerate() {
            let n = self.complete_runs(i);
            let base = if i == 0 { " (base)" } else { "" };
            head.push(format!("{}{base} n={n}", md_code(label)));
            if i > 0 {
                head.push("%change".to_string());
            }
        }
        let mut out = String::new();
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let align: Vec<&str> = head
            .iter()
            .enumerate()
            .map(|(i, _)| if i < 2 { ":--" } else { "--:" })
            .collect();
        let _ = writeln!(out, "| {} |", align.join(" | "));
        for row in &self.rows {
            let mut line = vec![md_code(&row.name), md_escape(&row.unit)];
            for (i, cell) in row.cells.iter().enumerate() {
                line.push(summary_text(cell.summary.as_ref()));
                if i > 0 {
                    line.push(change_text(cell.change.as_ref(), true));
                }
            }
            let _ = writeln!(out, "| {} |", line.join(" | "));
        }
        out.push('\n');
        for line in self.legend().lines().filter(|l| !l.is_empty()) {
            let _ = writeln!(out, "{}  ", line.trim_start());
        }
        out
    }

    pub(crate) fn legend(&self) -> String {
        let mut out = format!(
            "\n±%stddev: sample standard deviation (n-1) over the runs, as % of the mean.\n\
             %change against the base; * q<0.05 ** q<0.01 *** q<0.001: Welch's t-test p, \
             Benjamini-Hochberg adjusted over every test of this table (q: false discovery rate).\n\
             R: LKP's rule as lkp compare computes it (trimmed medians; min of one side above the \
             other's median, its median above the other's max; >=3 runs; changes under 5% skipped).\n\
             better/worse: significant (q<{} and R), in the metric's good/bad direction.\n",
            self.alpha
        );
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }
}

/// Every change of the table is one test of one family: Benjamini–Hochberg
/// over them ([`crate::stats::adjust_family`]). Returns the number of tests.
fn adjust_rows(rows: &mut [Row], alpha: f64) -> usize {
    let mut members = Vec::new();
    for row in rows.iter_mut() {
        let better = row.better;
        let base = row
            .cells
            .first()
            .and_then(|c| c.summary.as_ref())
            .map(|s| s.mean);
        for cell in row.cells.iter_mut() {
            let mean_b = cell.summary.as_ref().map(|s| s.mean);
            members.extend(crate::stats::FamilyMember::of(
                cell.change.as_mut(),
                base,
                mean_b,
                better,
            ));
        }
    }
    crate::stats::adjust_family(&mut members, alpha)
}

/// The metrics of `runs` in order of first appearance, with unit and
/// direction, keeping those `patterns` select (all when it is empty; a
/// pattern is a name, or a prefix ending in `*`).
pub(crate) fn metric_order<'a>(
    runs: impl IntoIterator<Item = &'a RunResult>,
    patterns: &[String],
) -> Vec<(String, String, Better)> {
    let mut order: Vec<(String, String, Better)> = Vec::new();
    for run in runs {
        for m in &run.metrics {
            if !order.iter().any(|(n, _, _)| *n == m.name) {
                order.push((m.name.clone(), m.unit.clone(), m.better));
            }
        }
    }
    order.retain(|(n, _, _)| metric_selected(n, patterns));
    order
}

/// The [`Summary`] of metric `name` over the complete runs of `set` that
/// have it ([`RunResult::counted`]: not interrupted, checks passed;
/// `None`: none has).
pub(crate) fn complete_summary(set: &RunSet, name: &str) -> Option<Summary> {
    let values: Vec<f64> = set
        .runs
        .iter()
        .filter(|r| r.counted())
        .filter_map(|r| r.metric(name))
        .collect();
    Summary::of(&values)
}

/// The `patterns` (of `--metrics`) that select none of the metrics of
/// `runs`: a typo, or a metric these runs do not have.
pub(crate) fn unmatched_patterns<'a>(
    runs: impl IntoIterator<Item = &'a RunResult>,
    patterns: &[String],
) -> Vec<String> {
    let names = metric_order(runs, &[]);
    patterns
        .iter()
        .filter(|p| {
            !names
                .iter()
                .any(|(n, _, _)| metric_selected(n, std::slice::from_ref(p)))
        })
        .cloned()
        .collect()
}

fn metric_selected(name: &str, patterns: &[String]) -> bool {
    patterns.is_empty()
        || patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::result::{Metric, RunResult};
    use crate::stats::Verdict;

    fn run(wall: f64, futex: f64) -> RunResult {
        let mut r = RunResult::new(
            "storm",
            vec![],
            serde_json::json!({}),
            serde_json::json!({}),
        );
        r.push(Metric::lower("wall_s", "s", wall));
        r.push(Metric::lower("futex_per_exit", "calls", futex));
        r
    }

    fn set(label: &str, runs: Vec<RunResult>) -> RunSet {
        RunSet {
            schema: SCHEMA_VERSION,
            label: label.into(),
            runs,
        }
    }

    pub(crate) fn sample() -> Comparison {
        let a = set(
            "cleanup=locked",
            vec![run(1.0, 4.0), run(1.1, 4.2), run(0.9, 3.9), run(1.0, 4.1)],
        );
        let b = set(
            "cleanup=exitq",
            vec![run(1.0, 0.5), run(1.05, 0.4), run(0.95, 0.6), run(1.1, 0.5)],
        );
        Comparison::build(
            "storm",
            vec![],
            vec!["--cleanup".into()],
            vec![a, b],
            0.05,
            &[],
        )
    }

    #[test]
    fn builds_rows_with_changes() {
        let c = sample();
        assert_eq!(c.labels, ["cleanup=locked", "cleanup=exitq"]);
        let futex = c.row("futex_per_exit").unwrap();
        assert!(futex.cells[0].change.is_none());
        let ch = futex.cells[1].change.unwrap();
        assert!(ch.significant);
        assert_eq!(ch.verdict, Verdict::Better);
        assert!((ch.pct.unwrap() + 87.65).abs() < 0.01, "{ch:?}");
        let wall = c.row("wall_s").unwrap().cells[1].change.unwrap();
        assert!(!wall.significant);
    }

    #[test]
    fn interrupted_runs_are_kept_but_not_counted() {
        let mut partial = run(100.0, 100.0);
        partial.interrupted = true;
        let a = set("a", vec![run(1.0, 1.0), run(1.0, 1.0), partial]);
        let b = set("b", vec![run(2.0, 2.0)]);
        let c = Comparison::build("storm", vec![], vec![], vec![a, b], 0.05, &[]);
        assert_eq!(
            c.row("wall_s").unwrap().cells[0]
                .summary
                .as_ref()
                .unwrap()
                .mean,
            1.0
        );
        assert_eq!(c.sets[0].runs.len(), 3);
        assert!(c.notes.iter().any(|n| n.contains("interrupted")));
        assert!(c.notes.iter().any(|n| n.starts_with("b: 1 complete")));
        assert!(c.row("wall_s").unwrap().cells[1]
            .change
            .unwrap()
            .welch
            .is_none());
    }

    /// A run that failed its own checks (here: cleanups missing, so it
    /// did less work and looks faster) is kept but never averaged in. It
    /// used to be: the failed run below made `b` look 22% faster.
    #[test]
    fn runs_that_failed_their_checks_are_kept_but_not_counted() {
        let mut failed = run(0.1, 0.1);
        failed.checks_failed = vec!["cleanup: 900 cleanups missing".into()];
        let a = set("a", vec![run(1.0, 1.0), run(1.1, 1.0), run(0.9, 1.0)]);
        let b = set(
            "b",
            vec![run(1.0, 1.0), failed, run(1.1, 1.0), run(0.9, 1.0)],
        );
        let c = Comparison::build("storm", vec![], vec![], vec![a, b], 0.05, &[]);
        let wall = c.row("wall_s").unwrap();
        let sb = wall.cells[1].summary.as_ref().unwrap();
        assert_eq!((sb.n, sb.mean, sb.min), (3, 1.0, 0.9), "{sb:?}");
        assert_eq!(wall.cells[1].change.unwrap().pct, Some(0.0));
        assert_eq!(c.complete_runs(1), 3);
        assert_eq!(c.sets[1].runs.len(), 4, "kept in the document");
        assert!(
            c.notes
                .iter()
                .any(|n| n == "b: 1 run(s) that failed their own checks left out of the statistics"),
            "{:?}",
            c.notes
        );
        assert!(c.to_table().contains("(n=3)"));
    }

    /// The saved document is what `herd diff` and `herd report` read back:
    /// every field, every figure to the bit (a seeded loop of random sets;
    /// the values are as a run writes them, any f64).
    #[test]
    fn property_the_json_document_round_trips_exactly() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for seed in 0..300 {
            let mut value = || {
                let mantissa = (next() >> 11) as f64 / (1u64 << 53) as f64;
                let exp = (next() % 40) as i32 - 20;
                mantissa * 10f64.powi(exp)
            };
            let mut sets = Vec::new();
            for label in ["a", "b", "c"] {
                let runs = (0..1 + seed % 6).map(|_| run(value(), value())).collect();
                sets.push(set(label, runs));
            }
            let c = Comparison::build("storm", vec!["--waves".into()], vec![], sets, 0.05, &[]);
            let json = c.to_json().unwrap();
            let back: Comparison = serde_json::from_str(&json).unwrap();
            assert_eq!(back.rows, c.rows, "seed {seed}");
            assert_eq!(back.to_json().unwrap(), json, "seed {seed}");
            for (x, y) in c.sets.iter().zip(&back.sets) {
                for (r, s) in x.runs.iter().zip(&y.runs) {
                    assert_eq!(r.metrics, s.metrics, "seed {seed}");
                }
            }
        }
    }

    /// Labels are user text (diff's are file names): a backtick or a line
    /// break in one keeps the Markdown table whole. The header used to read
    /// `` `a`b` `` (the span ended at the backtick) and break its row.
    #[test]
    fn markdown_keeps_odd_labels_in_their_cells() {
        let mut c = sample();
        c.labels = vec!["A: x`y.json".into(), "B: two\nlines.json".into()];
        let md = c.to_markdown();
        let head = md.lines().next().unwrap();
        assert!(head.contains("| ``A: x`y.json`` (base) n=4 |"), "{md}");
        assert!(head.contains("| `B: two lines.json` n=4 |"), "{md}");
        assert_eq!(
            md.lines().take_while(|l| l.starts_with('|')).count(),
            2 + c.rows.len(),
            "{md}"
        );
    }

    #[test]
    fn metric_filter() {
        let a = set("a", vec![run(1.0, 1.0)]);
        let c = Comparison::build("storm", vec![], vec![], vec![a], 0.05, &["futex*".into()]);
        assert_eq!(c.rows.len(), 1);
        assert_eq!(c.rows[0].name, "futex_per_exit");
    }

    #[test]
    fn renders_every_format() {
        let c = sample();
        let t = c.to_table();
        let line = t.lines().find(|l| l.starts_with("futex_per_exit")).unwrap();
        assert!(line.contains("4.050 ±"), "{t}");
        assert!(line.contains("-87.7% ***R better"), "{t}");
        assert!(t.contains("cleanup=locked (base)"), "{t}");
        let md = c.to_markdown();
        assert!(md.contains("| `futex_per_exit` | calls | 4.050 ±"), "{md}");
        assert!(md.contains("| :-- | :-- | --: | --: | --: |"), "{md}");
        let csv = c.to_csv().unwrap();
        assert_eq!(csv.lines().count(), 1 + 2 * 2);
        assert!(
            csv.lines().any(
                |l| l.starts_with("futex_per_exit,calls,lower,cleanup=exitq,4,0.5,")
                    && l.ends_with(",true,true,better")
            ),
            "{csv}"
        );
        let back: Comparison = serde_json::from_str(&c.to_json().unwrap()).unwrap();
        assert_eq!(back.kind, KIND);
        assert_eq!(back.rows.len(), c.rows.len());
        let p = |c: &Comparison| c.rows[1].cells[1].change.unwrap().welch.unwrap().p;
        assert!((p(&back) - p(&c)).abs() < 1e-15);
        assert_eq!(back.sets.len(), 2);
    }
}
