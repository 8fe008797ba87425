//! Several configurations side by side: the document `herd compare` and
//! `herd diff` print, and its renderings (table, JSON, CSV, Markdown).
//!
//! A [`Comparison`] is built from one [`RunSet`] per configuration; the
//! first set is the baseline. For every metric that appears in any run
//! there is one [`Row`] with one [`Cell`] per configuration: the
//! [`Summary`] of that metric over the configuration's complete runs and,
//! except for the baseline, the [`Change`] against the baseline (%change,
//! Welch's p-value, LKP's range rule, verdict). Interrupted runs are kept
//! in the document (`sets`) but left out of the statistics.
//!
//! The JSON document keeps the raw runs, so `herd diff` can re-read it and
//! compare it with another one.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::export::run::print_out;
use crate::export::write_file;
use crate::result::{Better, RunResult, RunSet, SCHEMA_VERSION};
use crate::stats::{Change, Summary, Verdict, DEFAULT_ALPHA};

/// Value of [`Comparison::kind`], to recognise the document when read back.
pub const KIND: &str = "herd-comparison";

/// The statistics and output flags of `herd compare` and `herd diff`
/// (`#[command(flatten)]`): which metrics, the significance level, the
/// format printed and the file saved.
///
/// The help texts are compare's (one comparison); `herd diff`, which prints
/// one comparison per paired configuration, rewords four of them with
/// `#[command(mut_args(ComparisonOutput::diff_help))]`.
#[derive(Debug, Clone, clap::Args)]
pub struct ComparisonOutput {
    /// Significance level of Welch's t-test.
    #[arg(long, default_value_t = DEFAULT_ALPHA)]
    pub alpha: f64,
    /// Only these metrics (comma-separated names; `prefix*` matches a prefix).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Print the comparison as JSON (with every run) instead of a table.
    #[arg(long, conflicts_with_all = ["csv", "markdown"])]
    pub json: bool,
    /// Print the comparison as CSV (one line per metric and configuration).
    #[arg(long, conflicts_with = "markdown")]
    pub csv: bool,
    /// Print the comparison as a Markdown table.
    #[arg(long)]
    pub markdown: bool,
    /// Also write the JSON document to FILE (input for `herd diff`).
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
}

impl ComparisonOutput {
    /// `herd diff`'s wording of the flags whose meaning there is "for every
    /// pair" (for `#[command(mut_args(...))]`; other arguments unchanged).
    pub fn diff_help(arg: clap::Arg) -> clap::Arg {
        let help = match arg.get_id().as_str() {
            "json" => r#"Print JSON (`{"kind":"herd-diff","pairs":[comparison, ...]}`)"#,
            "csv" => "Print CSV (one line per pair, metric and side)",
            "markdown" => "Print Markdown tables",
            "save" => "Also write the JSON document to FILE",
            _ => return arg,
        };
        arg.help(help)
    }

    /// Checks the values clap cannot: `--alpha` in (0, 1).
    pub fn check(&self) -> Result<()> {
        check_alpha(self.alpha)
    }

    /// Creates (empties) the `--save` file now, so that a path that cannot
    /// be written fails before the runs rather than after them.
    pub fn check_save(&self) -> Result<()> {
        match &self.save {
            Some(path) => write_file(path, "").context("--save"),
            None => Ok(()),
        }
    }

    /// [`Comparison::build`] with these flags' `--alpha` and `--metrics`.
    pub fn build(
        &self,
        scenario: &str,
        common_args: Vec<String>,
        varied: Vec<String>,
        sets: Vec<RunSet>,
    ) -> Comparison {
        Comparison::build(
            scenario,
            common_args,
            varied,
            sets,
            self.alpha,
            &self.metrics,
        )
    }

    /// Saves `document` (the whole JSON document) to `--save`, then prints
    /// [`ComparisonOutput::render`] (a closed stdout is not an error).
    pub fn emit(&self, document: &str, comparisons: &[Comparison]) -> Result<()> {
        if let Some(path) = &self.save {
            write_file(path, document)?;
        }
        print_out(&self.render(document, comparisons)?)
    }

    /// What [`ComparisonOutput::emit`] prints: with `--json` the whole
    /// `document`, else every comparison as CSV (one header for all),
    /// Markdown or a table (separated by a blank line).
    pub fn render(&self, document: &str, comparisons: &[Comparison]) -> Result<String> {
        if self.json {
            return Ok(format!("{document}\n"));
        }
        let mut out = String::new();
        for (i, c) in comparisons.iter().enumerate() {
            if self.csv {
                let csv = c.to_csv().context("CSV")?;
                if i == 0 {
                    out.push_str(&csv);
                } else {
                    // One header for the whole output.
                    for line in csv.lines().skip(1) {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
                continue;
            }
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&if self.markdown {
                c.to_markdown()
            } else {
                c.to_table()
            });
        }
        Ok(out)
    }
}

/// Checks a significance level: in (0, 1), exit 2 naming `--alpha` if not.
pub fn check_alpha(alpha: f64) -> Result<()> {
    if !(alpha > 0.0 && alpha < 1.0) {
        return Err(usage("--alpha", format!("{alpha} is not in (0, 1)")));
    }
    Ok(())
}

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
    pub unit: String,
    /// Which direction is an improvement.
    pub better: Better,
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
    pub title: String,
    /// The scenario every configuration ran.
    pub scenario: String,
    /// Scenario arguments shared by every configuration.
    #[serde(default)]
    pub common_args: Vec<String>,
    /// Flags that differ between configurations (e.g. `--cleanup`).
    #[serde(default)]
    pub varied: Vec<String>,
    /// Significance level used for Welch's test.
    pub alpha: f64,
    /// Configuration labels; the first is the baseline.
    pub labels: Vec<String>,
    /// One row per metric.
    pub rows: Vec<Row>,
    /// Things the reader must know (interrupted runs, single runs, ...).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The raw runs, one set per configuration (same order as `labels`).
    pub sets: Vec<RunSet>,
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
        let mut notes = Vec::new();
        let order = metric_order(sets.iter().flat_map(|s| &s.runs), metrics);
        for set in &sets {
            let partial = set.runs.iter().filter(|r| r.interrupted).count();
            if partial > 0 {
                notes.push(format!(
                    "{}: {partial} interrupted run(s) left out of the statistics",
                    set.label
                ));
            }
            let complete = set.runs.len() - partial;
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
            .collect();
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
        }
    }

    /// Complete (not interrupted) runs of configuration `i`.
    pub fn complete_runs(&self, i: usize) -> usize {
        self.sets
            .get(i)
            .map_or(0, |s| s.runs.iter().filter(|r| !r.interrupted).count())
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
    pub fn to_csv(&self) -> Result<String> {
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
            "ranges_separate",
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
                    c.map(|c| c.ranges_separate.to_string()).unwrap_or_default(),
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
    pub fn to_table(&self) -> String {
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
    pub fn to_markdown(&self) -> String {
        let mut head = vec!["metric".to_string(), "unit".to_string()];
        for (i, label) in self.labels.iter().enumerate() {
            let n = self.complete_runs(i);
            let base = if i == 0 { " (base)" } else { "" };
            head.push(format!("`{}`{base} n={n}", md_escape(label)));
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
            let mut line = vec![format!("`{}`", row.name), md_escape(&row.unit)];
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

    fn legend(&self) -> String {
        let mut out = format!(
            "\n%change against the base; * p<0.05 ** p<0.01 *** p<0.001 (Welch's t-test); \
             R: ranges separate by more than half the difference of the means (LKP).\n\
             better/worse: significant (p<{} and R), in the metric's good/bad direction.\n",
            self.alpha
        );
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }
}

/// The metrics of `runs` in order of first appearance, with unit and
/// direction, keeping those `patterns` select (all when it is empty; a
/// pattern is a name, or a prefix ending in `*`).
pub fn metric_order<'a>(
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

/// The [`Summary`] of metric `name` over the complete (not interrupted)
/// runs of `set` that have it (`None`: none has).
pub fn complete_summary(set: &RunSet, name: &str) -> Option<Summary> {
    let values: Vec<f64> = set
        .runs
        .iter()
        .filter(|r| !r.interrupted)
        .filter_map(|r| r.metric(name))
        .collect();
    Summary::of(&values)
}

fn metric_selected(name: &str, patterns: &[String]) -> bool {
    patterns.is_empty()
        || patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
}

fn better_name(b: Better) -> &'static str {
    match b {
        Better::Lower => "lower",
        Better::Higher => "higher",
        Better::Neither => "neither",
    }
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Better => "better",
        Verdict::Worse => "worse",
        Verdict::Changed => "changed",
        Verdict::Same => "same",
    }
}

/// Formats a value with about four significant digits, without exponent
/// for the magnitudes herd produces.
pub fn fmt_value(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let mag = v.abs().log10().floor() as i32;
    if mag >= 4 {
        format!("{v:.0}")
    } else if mag >= -6 {
        let decimals = (3 - mag).clamp(0, 9) as usize;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.3e}")
    }
}

/// `mean ±%stddev` (only the mean for a single run; `n/a` without runs).
pub fn summary_text(summary: Option<&Summary>) -> String {
    match summary {
        None => "n/a".to_string(),
        Some(s) if s.n < 2 => fmt_value(s.mean),
        Some(s) => format!("{} ±{:.1}%", fmt_value(s.mean), s.pct_stddev()),
    }
}

/// `%change` with its significance mark (`+12.3% **R`), and with `verdict`
/// the word better/worse/changed; empty without a change.
pub fn change_text(change: Option<&Change>, verdict: bool) -> String {
    let Some(c) = change else {
        return String::new();
    };
    let mut s = match c.pct {
        Some(p) => format!("{p:+.1}%"),
        None => "n/a".to_string(),
    };
    let mark = c.mark();
    if !mark.is_empty() {
        s.push(' ');
        s.push_str(&mark);
    }
    if verdict {
        match c.verdict {
            Verdict::Same => {}
            v => {
                s.push(' ');
                s.push_str(verdict_name(v));
            }
        }
    }
    s
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Pads a grid of cells into aligned columns two spaces apart: the first
/// `left` left-aligned (names), the rest right-aligned (numbers).
pub fn render_grid(grid: &[Vec<String>], left: usize) -> String {
    let cols = grid.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: usize| {
        grid.iter()
            .filter_map(|r| r.get(c))
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..cols).map(width).collect();
    let mut out = String::new();
    for row in grid {
        let mut line = String::new();
        for (c, w) in widths.iter().enumerate() {
            let cell = row.get(c).map(String::as_str).unwrap_or("");
            if c > 0 {
                line.push_str("  ");
            }
            if c < left {
                let _ = write!(line, "{cell:<w$}");
            } else {
                let _ = write!(line, "{cell:>w$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::{Args as _, FromArgMatches as _};

    use super::*;
    use crate::result::{Metric, RunResult};

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

    fn sample() -> Comparison {
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

    #[test]
    fn value_format() {
        assert_eq!(fmt_value(1234567.8), "1234568");
        assert_eq!(fmt_value(12.3456), "12.35");
        assert_eq!(fmt_value(0.00123456), "0.001235");
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_value(-3.0), "-3.000");
    }

    /// The flags as a command line would give them.
    fn output(flags: &[&str]) -> ComparisonOutput {
        let cmd = ComparisonOutput::augment_args(clap::Command::new("t"));
        let m = cmd
            .try_get_matches_from(std::iter::once("t").chain(flags.iter().copied()))
            .unwrap();
        ComparisonOutput::from_arg_matches(&m).unwrap()
    }

    #[test]
    fn output_flags_parse_and_conflict() {
        let o = output(&["--alpha", "0.01", "--metrics", "a,b*", "--csv"]);
        assert_eq!(o.alpha, 0.01);
        assert_eq!(o.metrics, ["a", "b*"]);
        assert!(o.csv && !o.json && !o.markdown && o.save.is_none());
        assert_eq!(output(&[]).alpha, DEFAULT_ALPHA);
        let cmd = || ComparisonOutput::augment_args(clap::Command::new("t"));
        for pair in [
            ["--json", "--csv"],
            ["--json", "--markdown"],
            ["--csv", "--markdown"],
        ] {
            let e = cmd()
                .try_get_matches_from(["t", pair[0], pair[1]])
                .unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{pair:?}"
            );
        }
    }

    #[test]
    fn alpha_outside_0_1_is_a_usage_error() {
        for bad in [0.0, 1.0, -0.1, f64::NAN] {
            let e = output(&[]).check().and(check_alpha(bad)).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{bad}");
            assert!(e.to_string().contains("--alpha"), "{e}");
        }
        assert!(output(&["--alpha", "0.2"]).check().is_ok());
        assert!(output(&["--alpha", "1.5"]).check().is_err());
    }

    #[test]
    fn diff_rewords_only_its_four_flags() {
        let cmd = ComparisonOutput::augment_args(clap::Command::new("t"))
            .mut_args(ComparisonOutput::diff_help);
        let help = |id: &str| {
            cmd.get_arguments()
                .find(|a| a.get_id() == id)
                .and_then(|a| a.get_help())
                .map(|h| h.to_string())
                .unwrap()
        };
        assert_eq!(
            help("csv"),
            "Print CSV (one line per pair, metric and side)"
        );
        assert_eq!(help("markdown"), "Print Markdown tables");
        assert_eq!(help("save"), "Also write the JSON document to FILE");
        assert!(help("json").contains(r#""kind":"herd-diff""#));
        assert_eq!(help("alpha"), "Significance level of Welch's t-test");
    }

    #[test]
    fn renders_one_or_several_comparisons() {
        let (one, two) = (sample(), sample());
        let both = [one.clone(), two];
        let doc = "{\"doc\": 1}";
        // --json prints the whole document, whatever the comparisons.
        assert_eq!(
            output(&["--json"]).render(doc, &both).unwrap(),
            format!("{doc}\n")
        );
        // The default and --markdown: one block per comparison, a blank line between.
        let table = output(&[]).render(doc, &both).unwrap();
        assert_eq!(table, format!("{}\n{}", one.to_table(), one.to_table()));
        assert_eq!(output(&[]).render(doc, &both[..1]).unwrap(), one.to_table());
        let md = output(&["--markdown"]).render(doc, &both).unwrap();
        assert_eq!(md, format!("{}\n{}", one.to_markdown(), one.to_markdown()));
        // --csv: one header for all.
        let csv = output(&["--csv"]).render(doc, &both).unwrap();
        let single = one.to_csv().unwrap();
        assert_eq!(csv.lines().filter(|l| l.starts_with("metric,")).count(), 1);
        assert_eq!(csv.lines().count(), 2 * single.lines().count() - 1);
        assert!(csv.starts_with(&single), "{csv}");
    }

    #[test]
    fn emit_saves_the_document() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.json");
        let o = output(&["--json", "--save", path.to_str().unwrap()]);
        o.check_save().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        o.emit("{}", &[]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
        let bad = output(&["--save", "/nonexistent-dir/doc.json"]);
        let e = bad.check_save().unwrap_err();
        assert!(
            format!("{e:#}").starts_with("--save: cannot write"),
            "{e:#}"
        );
    }
}
