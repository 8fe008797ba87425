//! `herd compare`: several configurations of one scenario, repeated and
//! interleaved, with LKP-style statistics.
//!
//! A *configuration* is the scenario's arguments: the flags shared by all
//! (everything after compare's own flags) plus what varies. What varies is
//! given by any mix of:
//! * shorthands for the flags this project compares most:
//!   `--cleanup none,locked,exitq`, `--stacks glibc,recycled`,
//!   `--sync per-op,expedited,deferred`;
//! * `--vary FLAG=V1,V2,...` for any other flag (`--vary per-wave=10,100`);
//! * `--config 'ARGS'`, repeated, one whole set of extra arguments each
//!   (`--config '--cleanup locked' --config '--cleanup exitq --lag 2'`).
//!
//! Several of these multiply (every combination runs); a list with one
//! value just adds that flag to every configuration. The first
//! configuration is the baseline of `%change`.
//!
//! Each measurement is one child process ([`crate::runner::run_child`]):
//! `-r N` rounds, each running every configuration once, their orders a
//! Williams design ([`rounds::order`]: A B C, B C A, C A B, C B A, A C B,
//! B A C), so drift of the machine (other load, thermal, page cache)
//! spreads over all configurations instead of biasing one, and each runs
//! in each position and after each other one equally often.
//! `--warmup K` rounds run first and are discarded.
//!
//! Every finished run is written to a journal as it finishes
//! ([`journal`]); a child that fails keeps what finished, and `--resume
//! FILE` runs only what is missing. Ctrl-C stops after the running child,
//! which reports its partial result; the table is printed for what
//! completed (interrupted runs are kept in the JSON but left out of the
//! statistics), the journal is kept, and the exit code is 130.

use anyhow::Result;

pub mod checks;
pub mod hosts;
pub mod journal;
pub mod knobs;
pub mod parse;
pub mod rounds;

pub use checks::*;
pub use rounds::{run_interleaved, Record};

use crate::error::{usage, EXIT_INTERRUPTED};
use crate::export::comparison_output::ComparisonOutput;
use crate::export::html::{Content, Section};
use crate::export::progress::Progress;
use crate::result::checks_code;

/// What varies between configurations: shared by `compare` and `sweep`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct VaryArgs {
    /// Exit-cleanup strategies to compare (storm, agent --mode thread):
    /// shorthand for `--vary cleanup=LIST`, e.g.
    /// `locked,exitq,crossbeam-epoch,sdd,seize,urcu`.
    #[arg(long, value_name = "LIST")]
    pub cleanup: Option<String>,
    /// Thread-stack providers to compare (storm): shorthand for
    /// `--vary stacks=LIST`, e.g. `glibc,recycled`.
    #[arg(long, value_name = "LIST")]
    pub stacks: Option<String>,
    /// Grace-period modes to compare (unregister): shorthand for
    /// `--vary sync=LIST`, e.g. `per-op,expedited,deferred`.
    #[arg(long, value_name = "LIST")]
    pub sync: Option<String>,
    /// Any scenario flag over a list of values, e.g. `per-wave=10,100,1000`
    /// or `--lag=1,4`. Repeatable; values are separated by commas (use
    /// `--config` for values that contain commas).
    #[arg(long, value_name = "FLAG=V1,V2,...")]
    pub vary: Vec<String>,
    /// One configuration's extra scenario arguments, quoted as one string
    /// (shell-style quoting inside). Repeatable: each is one configuration.
    #[arg(long, value_name = "ARGS")]
    pub config: Vec<String>,
}

/// The scenario's own flags, last on the command line of `compare` and
/// `sweep` (`#[command(flatten)]` as the last field). The help text is
/// compare's; sweep rewords it with `mut_arg("args", ...)`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ScenarioFlags {
    /// The scenario's own flags, shared by every configuration. They come
    /// after compare's flags (optionally after `--`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "SCENARIO FLAGS"
    )]
    pub args: Vec<String>,
}

/// Flags of `herd compare`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_long_help = COMPARE_HELP)]
pub struct Args {
    /// The scenario to run (storm, unregister, gp, membarrier, agent).
    #[arg(long, default_value = "storm")]
    pub scenario: String,
    /// Repetitions of every configuration (interleaved A B C A B C ...),
    /// 1..=10000.
    #[arg(short = 'r', long = "runs", default_value_t = 5, value_parser = runs_parser())]
    pub runs: usize,
    /// Rounds run first and discarded (page cache, CPU frequency, ...),
    /// 0..=10000.
    #[arg(long, default_value_t = 0, value_parser = warmup_parser())]
    pub warmup: usize,
    /// Write every finished run to FILE as it finishes (JSON Lines) and
    /// keep it [default: herd-compare-PID.journal.jsonl in the current
    /// directory, removed when the comparison completes].
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub journal: Option<std::path::PathBuf>,
    /// Continue the comparison recorded in FILE (a journal left by a failed
    /// or interrupted compare, same command line): runs only what is missing.
    /// At most 1 GiB, as every input herd reads.
    #[arg(long, value_name = "FILE")]
    pub resume: Option<std::path::PathBuf>,
    /// What varies between configurations.
    #[command(flatten)]
    pub vary: VaryArgs,
    /// Statistics and output format.
    #[command(flatten)]
    pub output: ComparisonOutput,
    /// The scenario's own flags.
    #[command(flatten)]
    pub scenario_flags: ScenarioFlags,
}

const COMPARE_HELP: &str = "\
Examples:
  herd compare --cleanup locked,exitq,sync,expedited -r 5 --waves 50 --per-wave 100
  herd compare --stacks glibc,recycled -r 5 --spin 0
  herd compare --scenario unregister --sync per-op,expedited,deferred
  herd compare -r 5 --config '--cleanup locked' --config '--cleanup exitq' -- --waves 50
  herd compare --vary per-wave=100,400 --cleanup locked,exitq --save cmp.json

The first configuration is the baseline. Per metric: mean ±%stddev (sample
stddev, n-1) of each configuration, %change against the baseline and its
significance: * q<0.05, ** q<0.01, *** q<0.001 (Welch's t-test, p adjusted
by Benjamini-Hochberg over every test of the table), R when LKP's rule holds
(computed as lkp compare does: trimmed medians, >= 3 runs, changes under 5%
skipped). A change is called better/worse only when both hold.

Rounds run every configuration once, in orders balanced over every n rounds
(2n for odd n): each configuration in each position and right after each
other one equally often (a Williams design). Each
finished run is written to a journal (--journal FILE, or
herd-compare-PID.journal.jsonl, removed on success); after a failed child or
Ctrl-C, the same command with --resume FILE runs only what is missing.

compare's own flags come first; everything from the first flag compare does
not know is passed to the scenario, unchanged, in every configuration.";

/// One configuration: a label and the scenario arguments that produce it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Short human name, e.g. `cleanup=exitq`.
    pub label: String,
    /// Complete scenario arguments (common flags first).
    pub args: Vec<String>,
}

/// Every configuration to run and the flags that differ between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The scenario's shared flags.
    pub common: Vec<String>,
    /// Flags that take more than one value (for the document's `varied`).
    pub varied: Vec<String>,
    /// Configurations, baseline first.
    pub configs: Vec<Config>,
}

/// One dimension of variation: a list of (label, args) alternatives.
struct Dimension {
    flag: Option<String>,
    options: Vec<(String, Vec<String>)>,
}

/// Splits one `--config` string into arguments as a POSIX shell would
/// (whitespace, 'single quotes', "double quotes", backslash escapes; no
/// expansion of any kind), with the shlex crate.
pub fn split_args(s: &str) -> Result<Vec<String>> {
    shlex::split(s).ok_or_else(|| {
        usage(
            "--config",
            format!("`{s}` has an unclosed quote or a trailing backslash"),
        )
    })
}

/// Normalises a flag name: `per-wave`, `--per-wave` -> `--per-wave`.
pub fn flag_name(raw: &str, what: &str) -> Result<String> {
    let name = raw.trim_start_matches('-');
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(usage(what, format!("`{raw}` is not a flag name")));
    }
    if name.len() == 1 {
        Ok(format!("-{name}"))
    } else {
        Ok(format!("--{name}"))
    }
}

/// The values of a comma-separated list (empty items refused).
fn list_values(flag: &str, list: &str) -> Result<Vec<String>> {
    let values: Vec<String> = list.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(usage(
            flag,
            format!("`{list}` has an empty value (expected V1,V2,...)"),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = values.iter().find(|v| !seen.insert(v.as_str())) {
        return Err(usage(flag, format!("`{dup}` is listed twice")));
    }
    Ok(values)
}

impl Plan {
    /// Builds every configuration from `vary` and the shared flags.
    /// `extra` is one more dimension given by the caller (sweep's values).
    pub fn new(
        vary: &VaryArgs,
        common: &[String],
        extra: Option<(&str, &[String])>,
    ) -> Result<Plan> {
        let mut dims: Vec<Dimension> = Vec::new();
        let shorthands = [
            ("--cleanup", &vary.cleanup),
            ("--stacks", &vary.stacks),
            ("--sync", &vary.sync),
        ];
        let mut flag_dims: Vec<(String, Vec<String>, String)> = Vec::new();
        for (flag, list) in shorthands {
            if let Some(list) = list {
                flag_dims.push((flag.to_string(), list_values(flag, list)?, flag.to_string()));
            }
        }
        for spec in &vary.vary {
            let (flag, list) = spec.split_once('=').ok_or_else(|| {
                usage(
                    "--vary",
                    format!("`{spec}`: expected FLAG=V1,V2,... e.g. per-wave=10,100"),
                )
            })?;
            let flag = flag_name(flag, "--vary")?;
            check_varied_flag(&flag, "--vary")?;
            flag_dims.push((flag, list_values("--vary", list)?, "--vary".to_string()));
        }
        if let Some((flag, values)) = extra {
            let flag = flag_name(flag, "--over")?;
            check_varied_flag(&flag, "--over")?;
            flag_dims.push((flag, values.to_vec(), "--over".to_string()));
        }
        let mut varied = Vec::new();
        for (flag, values, origin) in flag_dims {
            if dims
                .iter()
                .any(|d| d.flag.as_deref() == Some(flag.as_str()))
            {
                return Err(usage(&origin, format!("{flag} is varied twice")));
            }
            if values.len() > 1 {
                varied.push(flag.clone());
            }
            let bare = flag.trim_start_matches('-').to_string();
            let options = values
                .into_iter()
                .map(|v| (format!("{bare}={v}"), vec![flag.clone(), v]))
                .collect();
            dims.push(Dimension {
                flag: Some(flag),
                options,
            });
        }
        if !vary.config.is_empty() {
            let mut options = Vec::new();
            for c in &vary.config {
                let args = split_args(c)?;
                if args.is_empty() {
                    return Err(usage("--config", "an empty configuration (give its flags)"));
                }
                check_common(&args, &[])?;
                options.push((args.join(" "), args));
            }
            if options.len() > 1 {
                varied.push("--config".to_string());
            }
            dims.push(Dimension {
                flag: None,
                options,
            });
        }
        let varied_flags: Vec<String> = dims.iter().filter_map(|d| d.flag.clone()).collect();
        check_common(common, &varied_flags)?;
        let count = dims
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(d.options.len()))
            .unwrap_or(usize::MAX);
        check_plan_size(count, 1, "--vary/--config")?;
        // Cartesian product, first dimension slowest (baseline = all firsts).
        let mut configs = vec![(Vec::<String>::new(), common.to_vec())];
        for dim in &dims {
            let label_it = dim.options.len() > 1;
            let mut next = Vec::with_capacity(configs.len() * dim.options.len());
            for (labels, args) in &configs {
                for (label, extra_args) in &dim.options {
                    let mut labels = labels.clone();
                    if label_it {
                        labels.push(label.clone());
                    }
                    let mut args = args.clone();
                    args.extend(extra_args.iter().cloned());
                    next.push((labels, args));
                }
            }
            configs = next;
        }
        let configs: Vec<Config> = configs
            .into_iter()
            .map(|(labels, args)| Config {
                label: if labels.is_empty() {
                    "(shared flags only)".to_string()
                } else {
                    labels.join(" ")
                },
                args,
            })
            .collect();
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = configs.iter().find(|c| !seen.insert(c.args.clone())) {
            return Err(usage(
                "--config",
                format!("configuration `{}` is given twice", dup.label),
            ));
        }
        Ok(Plan {
            common: common.to_vec(),
            varied,
            configs,
        })
    }
}

/// Runs `herd compare`.
pub fn run(args: &Args) -> Result<u8> {
    let out = &args.output;
    check_run_options(&args.scenario, args.runs, out.alpha)?;
    let plan = Plan::new(&args.vary, &args.scenario_flags.args, None)?;
    if plan.configs.len() < 2 {
        return Err(usage(
            "",
            "nothing to compare: give at least two configurations \
             (e.g. --cleanup locked,exitq, --vary FLAG=A,B, or --config twice)",
        ));
    }
    // Fail now rather than after an hour of runs: --metrics with an empty
    // name, a --save that cannot be written.
    out.check()?;
    if args.runs < 2 {
        eprintln!(
            "note: -r {}: no significance test without at least 2 runs per configuration",
            args.runs
        );
    }
    if args.warmup > MAX_WARMUP {
        return Err(usage(
            "--warmup",
            format!("{}: must be 0..={MAX_WARMUP}", args.warmup),
        ));
    }
    let rounds = args.warmup + args.runs;
    check_plan_size(plan.configs.len(), rounds, "--runs")?;
    // A flag value the scenario refuses: now, not after the runs before it.
    parse::check_configs(&args.scenario, &plan.configs)?;
    let knob_notes = knobs::warn_ignored_knobs("compare", &args.scenario, &plan.configs);
    let header = journal::Header::new(&args.scenario, &plan.configs, args.runs, args.warmup);
    let (mut journal, done, temporary) = open_journal(args, &header)?;
    let total = (rounds * plan.configs.len()) as u64;
    let progress = Progress::new(total, "runs");
    let ran = run_interleaved(
        &args.scenario,
        &plan.configs,
        args.runs,
        args.warmup,
        &progress,
        Record {
            done,
            journal: Some(&mut journal),
        },
    );
    // A first child that fails (a value the scenario refuses) leaves
    // nothing to resume: herd's own journal of no run is not left behind.
    if ran.is_err() && temporary && journal.runs() == 0 {
        let _ = std::fs::remove_file(journal.path());
    }
    let (sets, interrupted) = ran?;
    progress.finish();
    if interrupted {
        eprintln!(
            "herd compare: the finished runs are in {}: the same command with --resume {} \
             runs only what is missing",
            journal.path().display(),
            journal.path().display()
        );
    } else if temporary {
        let _ = std::fs::remove_file(journal.path());
    }
    // 4 when a child run failed its own checks (its figures are kept).
    let checks = checks_code(&sets);
    // Runs from elsewhere (a --resume after a reboot into another kernel,
    // on another machine, by another herd build): said, not pooled silently.
    let mixed = hosts::mixed(&sets);
    for n in &mixed {
        eprintln!("herd compare: warning: {n}");
    }
    let mut c = out.build(&args.scenario, plan.common, plan.varied, sets);
    c.notes.extend(knob_notes);
    c.notes.extend(mixed);
    if interrupted {
        c.notes
            .push("interrupted by Ctrl-C: figures cover the runs that completed".into());
    }
    c.command = std::env::args().skip(1).collect();
    out.emit(&c.to_json()?, std::slice::from_ref(&c))?;
    if let Some(path) = &out.report {
        let kind = if interrupted {
            "compare result, interrupted"
        } else {
            "compare result"
        };
        let s = Section::new("this run", kind, Content::Comparison(c));
        crate::export::html::write(path, &[s])?;
    }
    Ok(if interrupted {
        EXIT_INTERRUPTED
    } else {
        checks
    })
}

/// The journal of this comparison: `--resume`'s (with its finished runs),
/// `--journal`'s, or a new one of herd's own naming (`true`: removed when
/// the comparison completes).
fn open_journal(
    args: &Args,
    header: &journal::Header,
) -> Result<(journal::Journal, Vec<journal::Entry>, bool)> {
    if let Some(p) = &args.resume {
        let (j, done) = journal::Journal::resume(p, header)?;
        eprintln!(
            "herd compare: resuming {}: {} finished runs",
            p.display(),
            done.len()
        );
        return Ok((j, done, false));
    }
    if let Some(p) = &args.journal {
        return Ok((journal::Journal::create(p, header)?, Vec::new(), false));
    }
    let name = format!("herd-compare-{}.journal.jsonl", std::process::id());
    let j = journal::Journal::create(std::path::Path::new(&name), header).or_else(|e| {
        let tmp = std::env::temp_dir().join(&name);
        eprintln!("herd compare: {e:#}; the journal goes to {}", tmp.display());
        journal::Journal::create(&tmp, header)
    })?;
    Ok((j, Vec::new(), true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn shell_split() {
        assert_eq!(
            split_args("--cleanup locked").unwrap(),
            s(&["--cleanup", "locked"])
        );
        assert_eq!(
            split_args(r#" --a 'b c'  --d "e \"f\"" g\ h '' "#).unwrap(),
            s(&["--a", "b c", "--d", "e \"f\"", "g h", ""])
        );
        assert!(split_args("--a 'b").is_err());
        assert!(split_args("--a \"b").is_err());
        assert!(split_args("--a b\\").is_err());
    }

    #[test]
    fn shorthand_and_vary_multiply() {
        let vary = VaryArgs {
            cleanup: Some("locked,exitq".into()),
            vary: vec!["per-wave=10,100".into()],
            ..Default::default()
        };
        let p = Plan::new(&vary, &s(&["--waves", "5"]), None).unwrap();
        let labels: Vec<&str> = p.configs.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "cleanup=locked per-wave=10",
                "cleanup=locked per-wave=100",
                "cleanup=exitq per-wave=10",
                "cleanup=exitq per-wave=100"
            ]
        );
        assert_eq!(
            p.configs[3].args,
            s(&["--waves", "5", "--cleanup", "exitq", "--per-wave", "100"])
        );
        assert_eq!(p.varied, s(&["--cleanup", "--per-wave"]));
    }

    #[test]
    fn single_value_is_shared_not_labelled() {
        let vary = VaryArgs {
            cleanup: Some("exitq".into()),
            stacks: Some("glibc,recycled".into()),
            ..Default::default()
        };
        let p = Plan::new(&vary, &[], None).unwrap();
        assert_eq!(p.configs[0].label, "stacks=glibc");
        assert_eq!(
            p.configs[1].args,
            s(&["--cleanup", "exitq", "--stacks", "recycled"])
        );
        assert_eq!(p.varied, s(&["--stacks"]));
    }

    #[test]
    fn configs_are_split_and_labelled() {
        let vary = VaryArgs {
            config: vec![
                "--cleanup locked".into(),
                "--cleanup 'exitq'  --lag 2".into(),
            ],
            ..Default::default()
        };
        let p = Plan::new(&vary, &s(&["--waves", "50"]), None).unwrap();
        assert_eq!(p.configs[1].label, "--cleanup exitq --lag 2");
        assert_eq!(
            p.configs[1].args,
            s(&["--waves", "50", "--cleanup", "exitq", "--lag", "2"])
        );
    }

    #[test]
    fn refuses_bad_plans() {
        let bad = |vary: VaryArgs, common: &[&str]| Plan::new(&vary, &s(common), None).unwrap_err();
        let is_usage = |e: anyhow::Error| crate::error::exit_code_for(&e) == 2;
        assert!(is_usage(bad(
            VaryArgs {
                cleanup: Some("a,,b".into()),
                ..Default::default()
            },
            &[]
        )));
        assert!(is_usage(bad(
            VaryArgs {
                cleanup: Some("a,a".into()),
                ..Default::default()
            },
            &[]
        )));
        assert!(is_usage(bad(
            VaryArgs {
                vary: vec!["per-wave".into()],
                ..Default::default()
            },
            &[]
        )));
        assert!(is_usage(bad(
            VaryArgs {
                vary: vec!["cleanup=a,b".into()],
                cleanup: Some("c".into()),
                ..Default::default()
            },
            &[]
        )));
        // Varied and shared at once.
        let e = bad(
            VaryArgs {
                cleanup: Some("a,b".into()),
                ..Default::default()
            },
            &["--cleanup", "x"],
        );
        assert!(e.to_string().contains("both varied"), "{e}");
        // compare's own flags after the scenario's.
        let e = bad(
            VaryArgs {
                cleanup: Some("a,b".into()),
                ..Default::default()
            },
            &["--waves", "5", "-r", "3"],
        );
        assert!(e.to_string().contains("must come before"), "{e}");
        let e = bad(
            VaryArgs {
                cleanup: Some("a,b".into()),
                ..Default::default()
            },
            &["--json"],
        );
        assert!(is_usage(e));
        // Two identical configurations.
        let e = bad(
            VaryArgs {
                config: vec!["--a 1".into(), "--a  1".into()],
                ..Default::default()
            },
            &[],
        );
        assert!(e.to_string().contains("twice"), "{e}");
    }

    #[test]
    fn run_options() {
        assert!(check_run_options("storm", 5, 0.05).is_ok());
        assert!(check_run_options("nope", 5, 0.05).is_err());
        assert!(check_run_options("storm", 0, 0.05).is_err());
        assert!(check_run_options("storm", MAX_RUNS, 0.05).is_ok());
        assert!(check_run_options("storm", MAX_RUNS + 1, 0.05).is_err());
        assert!(check_run_options("storm", usize::MAX, 0.05).is_err());
        assert!(check_plan_size(2, 2 * MAX_RUNS, "--runs").is_ok());
        assert!(check_plan_size(MAX_CONFIGS + 1, 1, "--vary").is_err());
        assert!(check_plan_size(usize::MAX, usize::MAX, "--runs").is_err());
        assert!(check_run_options("storm", 5, 1.0).is_err());
        assert!(check_run_options("storm", 5, f64::NAN).is_err());
    }
}
