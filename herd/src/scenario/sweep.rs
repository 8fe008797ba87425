//! `herd sweep`: one flag over a range of values, for one or several
//! configurations, with one SVG line chart per metric.
//!
//! `--over FLAG=SPEC` names the swept flag and its values:
//! * `A..B` with `--steps N` (default 5) points from A to B inclusive,
//!   spaced evenly, or geometrically with `--scale log` (the default when
//!   B/A >= 20, e.g. `per-wave=10..1000` gives 10, 32, 100, 316, 1000);
//! * `A..B:S`: A, A+S, A+2S, ... up to B;
//! * `V1,V2,...`: exactly these values.
//!
//! Values are numbers (integers when A, B and S are): the x axis of the
//! charts. The configurations (the lines of each chart) are given as in
//! `herd compare` (`--cleanup locked,exitq`, `--vary`, `--config`). Every
//! measurement is one child process; `-r N` rounds each run every (value,
//! configuration) pair once, interleaved.
//!
//! `--out DIR` receives `data.json` (every run), `data.csv` (one line per
//! metric, configuration and value) and `<metric>.svg` per metric (mean,
//! with bars from the smallest to the largest run). The table printed at
//! the end has, per metric, one row per value and per configuration
//! `mean ±%stddev` with %change and significance against the first
//! configuration. Every file goes through [`crate::export::write_file`]
//! (temporary file, renamed over the old one: never left cut short); when
//! data.json cannot be written, the measurements are saved elsewhere and
//! the sweep fails saying where ([`rescue`]).

use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

mod doc;
mod rescue;
mod shape;

pub use doc::{SweepDoc, SweepPoint};

use crate::error::{usage, EXIT_INTERRUPTED};
use crate::export::progress::Progress;
use crate::export::run::print_out;
use crate::result::checks_code;
use crate::scenario::compare::{
    check_common, check_plan_size, check_run_options, check_varied_flag, flag_name, knobs, parse,
    run_interleaved, runs_parser, Config, Plan, ScenarioFlags, VaryArgs,
};
use crate::stats::DEFAULT_ALPHA;

/// Spacing of generated values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Log when B/A >= 20, else linear.
    Auto,
    /// Evenly spaced.
    Lin,
    /// Geometrically spaced (log x axis).
    Log,
}

/// Flags of `herd sweep`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_long_help = SWEEP_HELP,
    mut_arg("args", |a| a.help("The scenario's own flags, shared by every point"))
)]
pub struct Args {
    /// The swept flag and its values: FLAG=A..B, FLAG=A..B:STEP or FLAG=V1,V2,...
    #[arg(long, value_name = "FLAG=SPEC")]
    pub over: String,
    /// Number of values for FLAG=A..B.
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    /// Spacing of the values for FLAG=A..B (and the x axis).
    #[arg(long, value_enum, default_value_t = Scale::Auto)]
    pub scale: Scale,
    /// The scenario to run (storm, unregister, gp, membarrier, agent).
    #[arg(long, default_value = "storm")]
    pub scenario: String,
    /// Repetitions of every point (interleaved), 1..=10000.
    #[arg(short = 'r', long = "runs", default_value_t = 3, value_parser = runs_parser())]
    pub runs: usize,
    /// The configurations (one line per configuration in every chart).
    #[command(flatten)]
    pub vary: VaryArgs,
    /// Significance level of Welch's t-test (table marks).
    #[arg(long, default_value_t = DEFAULT_ALPHA)]
    pub alpha: f64,
    /// Only these metrics (comma-separated names; `prefix*` matches a prefix).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Output directory for data.json, data.csv and one SVG per metric
    /// (default: `sweep-<flag>`). Each is written whole (a temporary file
    /// renamed over the old one): a failed write leaves the old file, and
    /// the measurements go to $TMPDIR (or stdout) instead of data.json.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the sweep document as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML page of the sweep (`herd report`).
    #[arg(long, value_name = "FILE", value_parser = crate::export::html::report_path)]
    pub report: Option<PathBuf>,
    /// The scenario's own flags, shared by every point.
    #[command(flatten)]
    pub scenario_flags: ScenarioFlags,
}

const SWEEP_HELP: &str = "\
Examples:
  herd sweep --over per-wave=10..1000 --cleanup locked,exitq -r 3 --out docs/sweep
  herd sweep --over waves=10..50:10 --config '--cleanup sync' --config '--cleanup exitq'
  herd sweep --over lag=1,2,4,8 --stacks glibc,recycled -- --spin 0

Writes DIR/data.json, DIR/data.csv and DIR/<metric>.svg (mean per point,
bars from the smallest to the largest run); prints a table per metric.";

/// The swept values.
#[derive(Debug, Clone, PartialEq)]
pub struct Values {
    /// The flag, normalised (`--per-wave`).
    pub flag: String,
    /// Values as passed to the scenario.
    pub text: Vec<String>,
    /// The same as numbers (x axis).
    pub x: Vec<f64>,
    /// Log x axis.
    pub log: bool,
}

fn number(flag: &str, s: &str) -> Result<f64> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| usage("--over", format!("{flag}: `{s}` is not a number")))?;
    if !v.is_finite() {
        return Err(usage(
            "--over",
            format!("{flag}: `{s}` is not a finite number"),
        ));
    }
    Ok(v)
}

fn is_int(s: &str) -> bool {
    s.trim().parse::<i64>().is_ok()
}

fn show(v: f64, int: bool) -> String {
    if int {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Parses `--over FLAG=SPEC` with `--steps` and `--scale`.
pub fn parse_values(over: &str, steps: usize, scale: Scale) -> Result<Values> {
    let (flag, spec) = over.split_once('=').ok_or_else(|| {
        usage(
            "--over",
            format!("`{over}`: expected FLAG=A..B or FLAG=V1,V2,..."),
        )
    })?;
    let flag = flag_name(flag, "--over")?;
    check_varied_flag(&flag, "--over")?;
    let (text, x, log) = if let Some((a, rest)) = spec.split_once("..") {
        let (b, step) = match rest.split_once(':') {
            Some((b, s)) => (b, Some(s)),
            None => (rest, None),
        };
        let int = is_int(a) && is_int(b) && !matches!(step, Some(s) if !is_int(s));
        let (lo, hi) = (number(&flag, a)?, number(&flag, b)?);
        if lo >= hi {
            return Err(usage(
                "--over",
                format!("{flag}: range {a}..{b} is empty (A must be < B)"),
            ));
        }
        let mut xs = Vec::new();
        let log;
        if let Some(step) = step {
            let st = number(&flag, step)?;
            if st <= 0.0 {
                return Err(usage(
                    "--over",
                    format!("{flag}: step {step} must be positive"),
                ));
            }
            let n = ((hi - lo) / st).floor() as usize;
            if n >= 10_000 {
                return Err(usage(
                    "--over",
                    format!("{flag}: {} points is too many", n + 1),
                ));
            }
            xs.extend((0..=n).map(|i| lo + st * i as f64));
            log = scale == Scale::Log && lo > 0.0;
        } else {
            if !(2..=1000).contains(&steps) {
                return Err(usage("--steps", format!("{steps}: must be 2..=1000")));
            }
            log = match scale {
                Scale::Lin => false,
                Scale::Log => {
                    if lo <= 0.0 {
                        return Err(usage("--scale", "log needs a range above 0"));
                    }
                    true
                }
                Scale::Auto => lo > 0.0 && hi / lo >= 20.0,
            };
            for i in 0..steps {
                let f = i as f64 / (steps - 1) as f64;
                xs.push(if log {
                    lo * (hi / lo).powf(f)
                } else {
                    lo + (hi - lo) * f
                });
            }
        }
        let mut text: Vec<String> = xs.iter().map(|&v| show(v, int)).collect();
        text.dedup();
        let x = text.iter().map(|t| t.parse().unwrap_or(f64::NAN)).collect();
        (text, x, log)
    } else {
        let text: Vec<String> = spec.split(',').map(|s| s.trim().to_string()).collect();
        let x = text
            .iter()
            .map(|t| number(&flag, t))
            .collect::<Result<Vec<f64>>>()?;
        if x.windows(2).any(|w| w[0] >= w[1]) {
            return Err(usage(
                "--over",
                format!("{flag}: values must increase: {spec}"),
            ));
        }
        let log = match scale {
            Scale::Lin => false,
            Scale::Log => x[0] > 0.0,
            Scale::Auto => x[0] > 0.0 && x[x.len() - 1] / x[0] >= 20.0,
        };
        (text, x, log)
    };
    if text.len() < 2 {
        return Err(usage(
            "--over",
            format!("{flag}: a sweep needs at least 2 values"),
        ));
    }
    Ok(Values { flag, text, x, log })
}

/// Runs `herd sweep`.
pub fn run(args: &Args) -> Result<u8> {
    check_run_options(&args.scenario, args.runs, args.alpha)?;
    let values = parse_values(&args.over, args.steps, args.scale)?;
    let plan = Plan::new(&args.vary, &args.scenario_flags.args, None)?;
    if plan
        .configs
        .iter()
        .any(|c| c.args.iter().any(|a| a == &values.flag))
    {
        return Err(usage(
            "--over",
            format!(
                "{} is swept and also given as a flag; give it once",
                values.flag
            ),
        ));
    }
    check_common(
        &args.scenario_flags.args,
        std::slice::from_ref(&values.flag),
    )?;
    // Every (configuration, value) pair is one child configuration.
    check_plan_size(
        plan.configs.len().saturating_mul(values.text.len()),
        args.runs,
        "--over",
    )?;
    let series: Vec<String> = plan.configs.iter().map(|c| c.label.clone()).collect();
    // Every (configuration, value) pair is one configuration of compare's
    // interleaved rounds.
    let bare = values.flag.trim_start_matches('-');
    let mut configs: Vec<Config> = Vec::new();
    let mut at: Vec<(usize, String, f64)> = Vec::new();
    for (s, cfg) in plan.configs.iter().enumerate() {
        for (v, &x) in values.text.iter().zip(&values.x) {
            let mut child_args = cfg.args.clone();
            child_args.extend([values.flag.clone(), v.clone()]);
            configs.push(Config {
                label: format!("{} {bare}={v}", cfg.label),
                args: child_args,
            });
            at.push((s, v.clone(), x));
        }
    }
    // A flag value the scenario refuses: now, before --out is made and
    // before the runs of the configurations ahead of it.
    parse::check_configs(&args.scenario, &configs)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("sweep-{}", values.flag.trim_start_matches('-'))));
    std::fs::create_dir_all(&dir)
        .map_err(|e| usage("--out", format!("cannot create {}: {e}", dir.display())))?;
    let knob_notes = knobs::warn_ignored_knobs("sweep", &args.scenario, &configs);
    let progress = Progress::new((configs.len() * args.runs) as u64, "runs");
    let (sets, interrupted) = run_interleaved(
        &args.scenario,
        &configs,
        args.runs,
        0,
        &progress,
        Default::default(),
    )?;
    progress.finish();
    // 4 when a child run failed its own checks (its figures are kept).
    let checks = checks_code(&sets);
    let points = at
        .into_iter()
        .zip(sets)
        .map(|((series, value, x), set)| SweepPoint {
            series,
            value,
            x,
            set,
        })
        .collect();
    let mut doc = SweepDoc::build(
        &args.scenario,
        plan.common.clone(),
        &values,
        series,
        points,
        args.alpha,
        &args.metrics,
    );
    doc.notes.extend(knob_notes);
    if interrupted {
        doc.notes
            .push("interrupted by Ctrl-C: figures cover the runs that completed".into());
    }
    doc.command = std::env::args().skip(1).collect();
    let svgs = doc.write_dir(&dir)?;
    if let Some(path) = &args.report {
        let content = crate::export::html::Content::Sweep(Box::new(doc.report_view()));
        let s = crate::export::html::Section::new(&dir.display().to_string(), "sweep", content);
        crate::export::html::write(path, &[s])?;
    }
    let text = if args.json {
        serde_json::to_string_pretty(&doc)? + "\n"
    } else {
        format!(
            "{}\nwrote {}/data.json, data.csv and {} SVG chart(s)\n",
            doc.to_table(),
            dir.display(),
            svgs.len()
        )
    };
    print_out(&text)?;
    Ok(if interrupted {
        EXIT_INTERRUPTED
    } else {
        checks
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_lists_and_steps() {
        let v = parse_values("per-wave=10..1000", 5, Scale::Auto).unwrap();
        assert_eq!(v.flag, "--per-wave");
        assert_eq!(v.text, ["10", "32", "100", "316", "1000"]);
        assert!(v.log);
        let v = parse_values("--waves=10..50", 5, Scale::Auto).unwrap();
        assert_eq!(v.text, ["10", "20", "30", "40", "50"]);
        assert!(!v.log);
        let v = parse_values("lag=1..8:2", 5, Scale::Auto).unwrap();
        assert_eq!(v.text, ["1", "3", "5", "7"]);
        let v = parse_values("spin=0.5..1.5", 3, Scale::Lin).unwrap();
        assert_eq!(v.text, ["0.5", "1", "1.5"]);
        assert_eq!(v.x, [0.5, 1.0, 1.5]);
        let v = parse_values("lag=1,2,4,8", 5, Scale::Auto).unwrap();
        assert_eq!(v.x, [1.0, 2.0, 4.0, 8.0]);
        // Rounding to integers never repeats a value.
        let v = parse_values("lag=1..3", 9, Scale::Auto).unwrap();
        assert_eq!(v.text, ["1", "2", "3"]);
    }

    #[test]
    fn refuses_bad_specs() {
        for bad in [
            "per-wave",
            "per-wave=10..10",
            "per-wave=100..10",
            "per-wave=a..b",
            "per-wave=1..10:0",
            "per-wave=3,2",
            "per-wave=5",
            "=1..2",
            "cleanup=locked,exitq",
        ] {
            let e = parse_values(bad, 5, Scale::Auto).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{bad}: {e}");
        }
        assert!(parse_values("x=0..10", 5, Scale::Log).is_err());
        assert!(parse_values("x=1..10", 1, Scale::Auto).is_err());
    }
}
