//! The statistics and output flags of `herd compare` and `herd diff`, and
//! what they print: a table, JSON, CSV or Markdown of one or several
//! [`Comparison`]s, and the `--save`d document.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::error::usage;
use crate::export::comparison::Comparison;
use crate::export::html::{check_writable, same_file, write_replacing};
use crate::export::run::print_out;
use crate::result::RunSet;
use crate::stats::DEFAULT_ALPHA;

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
    /// Also write a self-contained HTML page of it (`herd report`).
    #[arg(long, value_name = "FILE", value_parser = crate::export::html::report_path)]
    pub report: Option<PathBuf>,
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
            "report" => "Also write a self-contained HTML page of the diff (`herd report`)",
            _ => return arg,
        };
        arg.help(help)
    }

    /// Checks the values clap cannot: `--alpha` in (0, 1), and that
    /// `--save` can be written ([`ComparisonOutput::check_save`]).
    pub fn check(&self) -> Result<()> {
        check_alpha(self.alpha)?;
        if self.metrics.iter().any(|m| m.trim().is_empty()) {
            return Err(usage("--metrics", "an empty name in the list"));
        }
        self.check_save()
    }

    /// Checks that the `--save` file can be written, so that a path that
    /// cannot fails before the runs (exit 2 naming `--save` and the path)
    /// rather than after them; and that `--save` and `--report` are not
    /// one file. Nothing is created or emptied: the file is written by
    /// [`ComparisonOutput::emit`], whole or not at all.
    pub fn check_save(&self) -> Result<()> {
        let Some(path) = &self.save else {
            return Ok(());
        };
        check_writable(path).map_err(|e| usage("--save", e))?;
        if let Some(report) = &self.report {
            if path == report || same_file(path, report) {
                return Err(usage(
                    "--save",
                    format!("{} is also the --report file", path.display()),
                ));
            }
        }
        Ok(())
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
            write_replacing(path, document.as_bytes()).context("--save")?;
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

#[cfg(test)]
mod tests {
    use clap::{Args as _, FromArgMatches as _};

    use super::*;
    use crate::export::comparison::tests::sample;

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
        std::fs::write(&path, "precious").unwrap();
        let o = output(&["--json", "--save", path.to_str().unwrap()]);
        o.check_save().unwrap();
        o.check().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "precious",
            "checking empties nothing"
        );
        o.emit("{}", &[]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
        for bad in ["/nonexistent-dir/doc.json", "/proc/x"] {
            let e = output(&["--save", bad]).check().unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{e:#}");
            assert!(
                format!("{e:#}").starts_with(&format!("invalid --save: cannot write {bad}")),
                "{e:#}"
            );
        }
        let d = dir.path().to_str().unwrap();
        let e = output(&["--save", d]).check().unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 2, "{e:#}");
        let p = path.to_str().unwrap();
        let e = output(&["--save", p, "--report", p]).check().unwrap_err();
        assert!(format!("{e:#}").contains("also the --report file"), "{e:#}");
    }
}
