//! `herd report`'s page: one self-contained HTML file of saved results,
//! to look at and to attach to a bug report or a mail.
//!
//! Self-contained means: every style and script is inline, every chart is
//! inline SVG, no font, image or script is loaded from anywhere, and a
//! Content-Security-Policy (`style.rs`) forbids the page any fetch at
//! all, so it opens the same from a mail attachment, offline, as on the
//! machine that made it. It reads fully without JavaScript (the script
//! only sorts tables).
//!
//! One [`Section`] per input, in order: a run or a set of repetitions
//! (`runs.rs`), a comparison or a compare journal (`compare.rs`), a sweep
//! (`sweep.rs`), a diff (one comparison section per pair). Each begins
//! with its headline (`headline.rs`: the command line that reproduces
//! it, the host, when, whether every check passed) and its failures
//! (`problems.rs`), then what fits the input: latency distributions
//! (`latency.rs`), per-CPU heat maps (`heatmap.rs`), the lock-contention
//! profile (`contention.rs`), metrics by configuration. Several runs of
//! one configuration are added up first (`gather.rs`). Charts are small
//! hand-written SVG (`chart.rs`), the HTML helpers are `markup.rs`.
//!
//! Size: every part is bounded whatever the input (a heat map draws at
//! most [`heatmap::MAX_CELLS`] cells, tables of callers and locks 40
//! rows, histograms ~170 buckets), so a 512-CPU storm's page is a few
//! hundred KiB; docs/herd-guide.md has the measured figures.

mod chart;
mod compare;
mod contention;
mod gather;
mod headline;
mod heatmap;
mod latency;
mod markup;
mod problems;
mod runs;
mod style;
pub mod sweep;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::export::comparison::Comparison;
use crate::result::RunSet;
use markup::esc;
pub use sweep::{SweepLine, SweepView};

/// What one input holds.
#[derive(Debug, Clone)]
pub enum Content {
    /// The runs of one configuration: one run, or `-r N` repetitions.
    Runs(RunSet),
    /// A comparison (`herd compare`, a compare journal).
    Comparison(Comparison),
    /// A sweep.
    Sweep(Box<SweepView>),
    /// A diff: one comparison per paired configuration.
    Diff {
        /// The baseline file.
        a: String,
        /// The candidate file.
        b: String,
        /// One comparison per pair.
        pairs: Vec<Comparison>,
    },
}

/// One input of the page.
#[derive(Debug, Clone)]
pub struct Section {
    /// Where it was read from (a file name, or `this run`).
    pub origin: String,
    /// What kind of document it is, in words (`storm run`, `compare journal`).
    pub kind: String,
    /// Its content.
    pub content: Content,
    /// What is missing from it or could not be read: said on the page.
    pub gaps: Vec<String>,
    /// When the input file was written, for results that record no time.
    pub file_time: Option<String>,
}

impl Section {
    /// A section of `content` from `origin`.
    pub fn new(origin: &str, kind: &str, content: Content) -> Section {
        Section {
            origin: origin.into(),
            kind: kind.into(),
            content,
            gaps: Vec::new(),
            file_time: None,
        }
    }

    /// The section's title, for the table of contents.
    fn title(&self) -> String {
        match &self.content {
            Content::Runs(set) => {
                let scenario = set
                    .runs
                    .first()
                    .map_or("(no runs)", |r| r.scenario.as_str());
                format!("herd {scenario} ({})", self.origin)
            }
            Content::Comparison(c) => format!("{} ({})", c.title, self.origin),
            Content::Sweep(v) => format!("herd sweep over {} ({})", v.flag, self.origin),
            Content::Diff { a, b, .. } => format!("herd diff {a} {b}"),
        }
    }

    /// The section's HTML; `id` prefixes its anchors.
    fn html(&self, id: &str) -> String {
        match &self.content {
            Content::Runs(set) => runs::section(self, set, id),
            Content::Comparison(c) => compare::section(self, c, id, None),
            Content::Sweep(v) => sweep::section(self, v, id),
            Content::Diff { a, b, pairs } => {
                let cmd = markup::shell_line(&["herd".into(), "diff".into(), a.clone(), b.clone()]);
                pairs
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        compare::section(self, c, &format!("{id}-{i}"), Some(cmd.clone()))
                    })
                    .collect()
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn test(origin: &str, kind: &str) -> Section {
        Section::new(
            origin,
            kind,
            Content::Runs(RunSet {
                schema: crate::result::SCHEMA_VERSION,
                label: String::new(),
                runs: vec![],
            }),
        )
    }
}

/// The whole page of `sections`.
pub fn page(sections: &[Section]) -> String {
    let titles: Vec<String> = sections.iter().map(Section::title).collect();
    let title = match titles.as_slice() {
        [one] => format!("herd report: {one}"),
        _ => format!("herd report: {} results", titles.len()),
    };
    let mut out = String::with_capacity(256 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\
         <meta name=\"generator\" content=\"herd {}\"><title>{}</title><style>{}</style></head>\n<body><main>\n",
        style::CSP,
        env!("CARGO_PKG_VERSION"),
        esc(&title),
        style::CSS
    );
    if sections.len() > 1 {
        out.push_str("<nav class=\"toc\"><b>Results:</b> ");
        for (i, t) in titles.iter().enumerate() {
            let _ = write!(out, "<a href=\"#s{i}\">{}</a>", esc(t));
        }
        out.push_str("</nav>\n");
    }
    for (i, s) in sections.iter().enumerate() {
        out.push_str(&s.html(&format!("s{i}")));
    }
    let _ = write!(
        out,
        "<footer>Made by <code>herd report</code> (herd {}) at {}. This page is self-contained: it loads \
         nothing from anywhere (no script, style, font or image), and reads without JavaScript; the inline \
         script only sorts tables (click a column heading).</footer>\n</main><script>{}</script></body></html>\n",
        env!("CARGO_PKG_VERSION"),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        style::JS
    );
    out
}

/// Writes the page of `sections` to `path`.
pub fn write(path: &Path, sections: &[Section]) -> Result<()> {
    std::fs::write(path, page(sections))
        .with_context(|| format!("cannot write the report {}", path.display()))
}

/// clap's parser for a `--report FILE` value: the file is created (or
/// emptied) at once, so that a path that cannot be written fails before
/// the run, not after it.
pub fn report_path(s: &str) -> std::result::Result<PathBuf, String> {
    let p = PathBuf::from(s);
    std::fs::File::create(&p).map_err(|e| format!("cannot write {s}: {e}"))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{Metric, RunResult};

    #[test]
    fn a_page_is_self_contained_and_escaped() {
        let mut r = RunResult::new(
            "storm",
            vec!["--waves".into(), "<3>".into()],
            serde_json::json!({}),
            serde_json::json!({"hostname": "<b>"}),
        );
        r.push(Metric::lower("wall_s", "s", 1.5));
        let set = RunSet {
            schema: 1,
            label: String::new(),
            runs: vec![r],
        };
        let p = page(&[Section::new("x.json", "storm run", Content::Runs(set))]);
        assert!(p.starts_with("<!DOCTYPE html>"));
        assert!(p.contains("default-src &#39;none&#39;") || p.contains("default-src 'none'"));
        assert!(!p.contains("<b>\""), "host name escaped");
        assert!(
            p.contains("herd storm --waves &#39;&lt;3&gt;&#39;"),
            "command escaped and quoted"
        );
        for external in ["src=\"http", "href=\"http", "url(http", "@import", "<link"] {
            assert!(!p.contains(external), "{external}");
        }
        assert!(p.contains("every check passed"));
    }

    #[test]
    fn report_path_fails_early() {
        let dir = tempfile::tempdir().unwrap();
        assert!(report_path(dir.path().join("r.html").to_str().unwrap()).is_ok());
        let e = report_path("/nonexistent-dir/r.html").unwrap_err();
        assert!(e.contains("cannot write /nonexistent-dir/r.html"), "{e}");
    }
}
