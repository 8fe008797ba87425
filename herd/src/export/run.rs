//! One run or a set of repetitions as a table, JSON or CSV, and the
//! output flags every scenario shares ([`OutputArgs`]).
//!
//! A scenario's `run` typically does:
//!
//! ```ignore
//! if args.out.runs > 1 {
//!     return export::run::repeat("storm", &args.out, &[]); // children, summary
//! }
//! let result: RunResult = measure(...)?;
//! export::run::emit(&result, &args.out, |r| my_extra_sections(r))?;
//! ```
//!
//! `repeat` re-runs herd once per repetition through
//! [`crate::runner::run_child`] with the same command line minus `-r`,
//! `--json` and `--csv`, then prints the [`RunSet`] summary (median, mean,
//! %stddev per metric) as a table, JSON (the whole `RunSet`) or CSV. The
//! summary counts the runs that ran to the end and passed their own
//! checks; the table says how many it left out.

use std::fmt::Write as _;

use anyhow::Result;

use crate::error::EXIT_INTERRUPTED;
use crate::export::format::{better_name, fmt_value};
use crate::result::{RunResult, RunSet};
use crate::runner;
use crate::stats::Summary;

/// Output flags shared by every scenario (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct OutputArgs {
    /// Print one JSON document (a RunResult; a RunSet with -r N > 1).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV (name,unit,value,better; with -r N > 1 one row per metric
    /// with n, median, mean, stddev, pct_stddev, min, max).
    #[arg(long)]
    pub csv: bool,
    /// Repetitions, each in a fresh child process, then a summary.
    #[arg(short = 'r', long = "runs", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,
    /// Also write the result as a self-contained HTML page (`herd report`).
    #[arg(long, value_name = "FILE", value_parser = crate::export::html::report_path)]
    pub report: Option<std::path::PathBuf>,
}

/// Writes `text` to stdout. A closed pipe (`herd ... | head`) is not an
/// error: the reader has what it wanted, so herd stops printing quietly
/// instead of panicking like `print!` does.
pub fn print_out(text: &str) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// The metrics of one run as an aligned table: `metric  value  unit`.
pub fn metrics_table(r: &RunResult) -> String {
    let w = r
        .metrics
        .iter()
        .map(|m| m.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let vals: Vec<String> = r.metrics.iter().map(|m| fmt_value(m.value)).collect();
    let vw = vals.iter().map(|v| v.len()).max().unwrap_or(5).max(5);
    let mut out = String::new();
    let _ = writeln!(out, "{:<w$}  {:>vw$}  unit", "metric", "value");
    for (m, v) in r.metrics.iter().zip(&vals) {
        let _ = writeln!(out, "{:<w$}  {:>vw$}  {}", m.name, v, m.unit);
    }
    out
}

/// One run as CSV: `name,unit,value,better`.
pub fn run_csv(r: &RunResult) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(["name", "unit", "value", "better"])?;
    for m in &r.metrics {
        w.write_record([
            m.name.as_str(),
            m.unit.as_str(),
            &m.value.to_string(),
            better_name(m.better),
        ])?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// One metric summarised over a run set.
#[derive(Debug, Clone)]
pub struct MetricSummary {
    /// Metric name.
    pub name: String,
    /// Its unit.
    pub unit: String,
    /// The summary (over the runs that have the metric).
    pub summary: Summary,
}

/// The runs of a set its summary is made of: those that ran to the end
/// and passed their own checks ([`RunResult::counted`]); when there is
/// none of them (Ctrl-C in the first run), every run, and `true`.
fn summarised_runs(set: &RunSet) -> (Vec<&RunResult>, bool) {
    let counted: Vec<&RunResult> = set.runs.iter().filter(|r| r.counted()).collect();
    if counted.is_empty() {
        (set.runs.iter().collect(), !set.runs.is_empty())
    } else {
        (counted, false)
    }
}

/// Every metric of a set, in the order of first appearance, over the runs
/// that ran to the end and passed their checks (an interrupted run covers
/// part of the work and would pull the figures down); over every run
/// when none did.
pub fn summarise(set: &RunSet) -> Vec<MetricSummary> {
    let (runs, _) = summarised_runs(set);
    let mut order: Vec<(String, String)> = Vec::new();
    for r in &runs {
        for m in &r.metrics {
            if !order.iter().any(|(n, _)| n == &m.name) {
                order.push((m.name.clone(), m.unit.clone()));
            }
        }
    }
    order
        .into_iter()
        .filter_map(|(name, unit)| {
            let vals: Vec<f64> = runs.iter().filter_map(|r| r.metric(&name)).collect();
            Summary::of(&vals).map(|summary| MetricSummary {
                name,
                unit,
                summary,
            })
        })
        .collect()
}

/// A run set's summary table: median, mean, ±%stddev, min, max per metric.
pub fn runset_table(set: &RunSet) -> String {
    let rows = summarise(set);
    let w = rows.iter().map(|m| m.name.len()).max().unwrap_or(6).max(6);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} runs{}",
        set.runs.len(),
        if set.label.is_empty() {
            String::new()
        } else {
            format!(" of {}", set.label)
        }
    );
    let (runs, none_counted) = summarised_runs(set);
    let left_out = set.runs.len() - runs.len();
    if none_counted {
        let _ = writeln!(
            out,
            "note: no run ran to the end and passed its own checks: the figures below are of \
             runs that did not (interrupted or failing their checks), not to be trusted"
        );
    } else if left_out > 0 {
        let _ = writeln!(
            out,
            "note: {left_out} run(s) interrupted or failing their own checks left out of the \
             figures below ({} counted)",
            runs.len()
        );
    }
    let _ = writeln!(
        out,
        "{:<w$}  {:>12}  {:>12}  {:>8}  {:>12}  {:>12}  unit",
        "metric", "median", "mean", "%stddev", "min", "max"
    );
    for m in rows {
        let s = &m.summary;
        let _ = writeln!(
            out,
            "{:<w$}  {:>12}  {:>12}  {:>7.1}%  {:>12}  {:>12}  {}",
            m.name,
            fmt_value(s.median),
            fmt_value(s.mean),
            s.pct_stddev(),
            fmt_value(s.min),
            fmt_value(s.max),
            m.unit
        );
    }
    out
}

/// A run set's summary as CSV.
pub fn runset_csv(set: &RunSet) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "name",
        "unit",
        "n",
        "median",
        "mean",
        "stddev",
        "pct_stddev",
        "min",
        "max",
    ])?;
    for m in summarise(set) {
        let s = &m.summary;
        w.write_record([
            m.name,
            m.unit,
            s.n.to_string(),
            s.median.to_string(),
            s.mean.to_string(),
            s.stddev.to_string(),
            s.pct_stddev().to_string(),
            s.min.to_string(),
            s.max.to_string(),
        ])?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// The command-line arguments after `scenario` with `-r/--runs`, `--json`,
/// `--csv` and `--report` removed: what a child repetition runs (it adds
/// `--json`).
pub fn child_args(scenario: &str) -> Vec<String> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    strip_output_args(scenario, &argv)
}

/// [`child_args`] on a given argv (without the program name). The
/// subcommand is the first word when given; plain `herd FLAGS` (the storm
/// without its name) starts with the flags.
pub fn strip_output_args(scenario: &str, argv: &[String]) -> Vec<String> {
    let start = usize::from(argv.first().is_some_and(|a| a == scenario));
    let mut out = Vec::new();
    let mut it = argv[start..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" | "--csv" => {}
            "-r" | "--runs" | "--report" => {
                it.next();
            }
            s if s.starts_with("--runs=") || s.starts_with("--report=") => {}
            s if s.starts_with("-r") && s[2..].bytes().all(|b| b.is_ascii_digit()) => {}
            "--" => {
                out.push(a.clone());
                out.extend(it.by_ref().cloned());
            }
            _ => out.push(a.clone()),
        }
    }
    out
}

/// Prints one run in the format `out` asks for; `extra` renders the
/// scenario's own sections (placement, failures) below the metrics table.
pub fn emit(r: &RunResult, out: &OutputArgs, extra: impl Fn(&RunResult) -> String) -> Result<()> {
    let text = if out.json {
        serde_json::to_string_pretty(r)? + "\n"
    } else if out.csv {
        run_csv(r)?
    } else {
        let per_cpu = crate::perf::Report::from_json(&r.perf)
            .and_then(|p| crate::perf::cpu_table::section(&p));
        let mut t = metrics_table(r) + &per_cpu.unwrap_or_default() + &extra(r);
        if r.interrupted {
            t.push_str("(interrupted: figures cover the part that ran)\n");
        }
        t
    };
    write_report(out, || RunSet {
        schema: crate::result::SCHEMA_VERSION,
        label: String::new(),
        runs: vec![r.clone()],
    })?;
    print_out(&text)
}

/// Writes `--report FILE`, when given, with the runs `set` makes.
fn write_report(out: &OutputArgs, set: impl FnOnce() -> RunSet) -> Result<()> {
    let Some(path) = &out.report else {
        return Ok(());
    };
    let section = crate::export::html::Section::new(
        "this run",
        "run",
        crate::export::html::Content::Runs(set()),
    );
    crate::export::html::write(path, &[section])
}

/// Runs `out.runs` repetitions of `herd <scenario> <this command line>`,
/// each in a child process, and prints the summary; `notes` (the
/// parent's warnings about the command line, said once on stderr) go
/// into every run's warnings. Stops after Ctrl-C (keeping the partial
/// repetition) and returns 130 then.
pub fn repeat(scenario: &str, out: &OutputArgs, notes: &[String]) -> Result<u8> {
    runner::install_interrupt_handler();
    let args = child_args(scenario);
    let mut set = RunSet {
        schema: crate::result::SCHEMA_VERSION,
        label: format!("herd {scenario} {}", args.join(" "))
            .trim()
            .to_string(),
        runs: Vec::new(),
    };
    let progress = crate::export::progress::Progress::new(u64::from(out.runs), "runs");
    // Tracepoints stay registered across the children (perf/keeper.rs).
    let _keepers = crate::perf::keeper::Keepers::for_children(&[args.as_slice()]);
    for _ in 0..out.runs {
        if runner::interrupted() {
            break;
        }
        let mut r = runner::run_child(scenario, &args)?;
        r.warnings.extend(notes.iter().cloned());
        let stop = r.interrupted;
        set.runs.push(r);
        progress.inc();
        if stop {
            break;
        }
    }
    progress.finish();
    let interrupted = runner::interrupted();
    let text = if out.json {
        serde_json::to_string_pretty(&set)? + "\n"
    } else if out.csv {
        runset_csv(&set)?
    } else {
        let mut t = runset_table(&set);
        if interrupted {
            t += &format!(
                "(interrupted after {} of {} runs)\n",
                set.runs.len(),
                out.runs
            );
        }
        t
    };
    write_report(out, || set.clone())?;
    print_out(&text)?;
    let failed: Vec<&str> = set
        .runs
        .iter()
        .flat_map(|r| r.checks_failed.iter().map(String::as_str))
        .collect();
    for c in &failed {
        eprintln!("herd: check failed: {c}");
    }
    Ok(if interrupted {
        EXIT_INTERRUPTED
    } else {
        crate::result::runs_code(&set.runs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::Metric;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn strips_output_flags() {
        let a = s(&[
            "storm",
            "--waves",
            "3",
            "-r",
            "5",
            "--json",
            "--runs=2",
            "-r3",
            "--csv",
            "--lag",
            "1",
            "--report",
            "r.html",
            "--report=x.html",
        ]);
        assert_eq!(
            strip_output_args("storm", &a),
            s(&["--waves", "3", "--lag", "1"])
        );
        assert!(strip_output_args("storm", &[]).is_empty());
        // Plain `herd --waves 3 -r 5`: the storm's flags without its name.
        assert_eq!(
            strip_output_args("storm", &s(&["--waves", "3", "-r", "5", "--cpus", "0"])),
            s(&["--waves", "3", "--cpus", "0"])
        );
    }

    #[test]
    fn summary_and_csv() {
        let mk = |v| {
            let mut r = RunResult::new("storm", vec![], Default::default(), Default::default());
            r.push(Metric::lower("wall_s", "s", v));
            r
        };
        let set = RunSet {
            schema: 1,
            label: "x".into(),
            runs: vec![mk(1.0), mk(2.0), mk(3.0)],
        };
        let t = runset_table(&set);
        assert!(t.contains("wall_s"), "{t}");
        let c = runset_csv(&set).unwrap();
        assert!(
            c.lines()
                .nth(1)
                .unwrap()
                .starts_with("wall_s,s,3,2,2,1,50,1,3"),
            "{c}"
        );
        assert!(run_csv(&mk(1.5)).unwrap().contains("wall_s,s,1.5,lower"));
    }

    /// The summary of `-r N` leaves out a run cut short by Ctrl-C (here a
    /// tenth of the work: wall 0.2 s) and one that failed its checks, and
    /// says so; it used to take their figures into the median and mean.
    #[test]
    fn summary_leaves_out_interrupted_and_failed_runs() {
        let mk = |v| {
            let mut r = RunResult::new("storm", vec![], Default::default(), Default::default());
            r.push(Metric::lower("wall_s", "s", v));
            r
        };
        let mut cut = mk(0.2);
        cut.interrupted = true;
        let mut failed = mk(0.5);
        failed.checks_failed = vec!["cleanup: 10 cleanups missing".into()];
        let set = RunSet {
            schema: 1,
            label: "x".into(),
            runs: vec![mk(2.0), failed, mk(2.0), cut],
        };
        let c = runset_csv(&set).unwrap();
        assert!(
            c.lines()
                .nth(1)
                .unwrap()
                .starts_with("wall_s,s,2,2,2,0,0,2,2"),
            "{c}"
        );
        let t = runset_table(&set);
        assert!(
            t.contains("note: 2 run(s) interrupted or failing their own checks left out"),
            "{t}"
        );
        // Nothing else to show: the figures of the interrupted run, said so.
        let only = RunSet {
            runs: vec![cut_only()],
            ..set
        };
        fn cut_only() -> RunResult {
            let mut r = RunResult::new("storm", vec![], Default::default(), Default::default());
            r.push(Metric::lower("wall_s", "s", 0.2));
            r.interrupted = true;
            r
        }
        let t = runset_table(&only);
        assert!(t.contains("not to be trusted"), "{t}");
        assert!(t.lines().any(|l| l.starts_with("wall_s")), "{t}");
    }
}
