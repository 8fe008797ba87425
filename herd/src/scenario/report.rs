//! `herd report RESULT... [-o report.html]`: saved results as one
//! self-contained HTML page ([`crate::export::html`]), to look at and to
//! attach to a bug report or a mail.
//!
//! Each RESULT is a file herd wrote (a run or `-r N` set as `--json`, a
//! `herd compare --save`/`--json` document or its journal, a sweep's
//! `data.json` or its directory, a `herd diff --json` document) or `-`
//! for standard input; each becomes a section of the page, in order.
//! `--diff A B` makes the page of `herd diff A B` instead (with diff's
//! refusal of results that are not comparable, `--force` to override).
//! Reading is tolerant ([`input`]): a file that cannot be read is an
//! error naming it (exit 2); a readable one with parts missing makes a
//! page that says what is missing.
//!
//! `--report FILE` on `storm` (and every scenario), `compare`, `diff`
//! and `sweep` writes the same page as the run's other outputs are
//! written.

mod input;

use std::path::PathBuf;

use anyhow::Result;

use crate::error::usage;
use crate::export::comparison_output::ComparisonOutput;
use crate::export::html::{self, Content, Section};
use crate::scenario::diff;
use crate::stats::DEFAULT_ALPHA;

/// Flags of `herd report`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_long_help = REPORT_HELP)]
pub struct Args {
    /// Saved results: a run or -r N set (--json), a compare result
    /// (--save) or its journal, a sweep's data.json (or directory), a
    /// herd diff --json document; `-` reads standard input.
    #[arg(required = true, value_name = "RESULT")]
    pub inputs: Vec<PathBuf>,
    /// The HTML file to write (`-`: standard output).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "report.html"
    )]
    pub output: PathBuf,
    /// Two results, A and B: the page of `herd diff A B` (A the baseline).
    #[arg(long)]
    pub diff: bool,
    /// With --diff: compare even when scenario, schema or configuration differ.
    #[arg(long, requires = "diff")]
    pub force: bool,
}

const REPORT_HELP: &str = "\
Examples:
  herd storm --waves 300 --contention --json > storm.json; herd report storm.json -o storm.html
  herd compare --cleanup locked,exitq -r 5 --save cmp.json -- --waves 300; herd report cmp.json
  herd report herd-compare-1234.journal.jsonl          # an unfinished compare
  herd report sweep-per-wave/ -o sweep.html             # a sweep's directory
  herd report --diff before.json after.json -o diff.html
  herd storm --waves 50 --report storm.html             # written with the run

One HTML file: no network access, no external script, style or font; it opens
from a mail attachment. Per input: the command line that reproduces it, the
host, when, whether every check passed; failures and unavailable counters;
metrics; latency distributions by exit path; per-CPU heat maps grouped by NUMA
node with the imbalance; the lock-contention profile; for a comparison every
metric per configuration with its significance; for a sweep a chart per metric.";

/// The section of `herd diff A B`.
fn diff_section(args: &Args) -> Result<Section> {
    let [a, b] = args.inputs.as_slice() else {
        return Err(usage(
            "--diff",
            format!("takes two results, A and B ({} given)", args.inputs.len()),
        ));
    };
    let (la, lb) = (diff::load(a)?, diff::load(b)?);
    let dargs = diff::Args {
        a: a.clone(),
        b: b.clone(),
        force: args.force,
        label: None,
        output: ComparisonOutput {
            alpha: DEFAULT_ALPHA,
            metrics: Vec::new(),
            json: false,
            csv: false,
            markdown: false,
            save: None,
            report: None,
        },
    };
    let doc = diff::diff(&la, &lb, &dargs)?;
    Ok(Section::new(
        &format!("{} and {}", a.display(), b.display()),
        "diff",
        Content::Diff {
            a: doc.a,
            b: doc.b,
            pairs: doc.pairs,
        },
    ))
}

/// Runs `herd report`.
pub fn run(args: &Args) -> Result<u8> {
    if args.output.as_os_str() != "-" {
        // Before anything is read: the page must not replace an input.
        if let Some(input) = args
            .inputs
            .iter()
            .find(|i| html::same_file(i, &args.output))
        {
            return Err(usage(
                "--output",
                format!(
                    "{} is also an input ({}): the page would replace it",
                    args.output.display(),
                    input.display()
                ),
            ));
        }
        html::check_writable(&args.output).map_err(|why| usage("--output", why))?;
    }
    let sections = if args.diff {
        vec![diff_section(args)?]
    } else {
        args.inputs
            .iter()
            .map(|p| input::read(p))
            .collect::<Result<Vec<Section>>>()?
    };
    for s in &sections {
        for g in &s.gaps {
            eprintln!("herd report: {}: {g}", s.origin);
        }
    }
    let page = html::page(&sections);
    if args.output.as_os_str() == "-" {
        crate::export::run::print_out(&page)?;
    } else {
        html::write_replacing(&args.output, page.as_bytes())
            .map_err(|e| usage("--output", format!("{e:#}")))?;
        eprintln!(
            "herd report: wrote {} ({} KiB, {} section(s))",
            args.output.display(),
            page.len().div_ceil(1024),
            sections.len()
        );
    }
    Ok(0)
}
