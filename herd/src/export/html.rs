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

/// Writes the page of `sections` to `path` ([`write_replacing`]: the
/// file is whole or as it was, never half-written).
pub fn write(path: &Path, sections: &[Section]) -> Result<()> {
    write_replacing(path, page(sections).as_bytes())
        .with_context(|| format!("cannot write the report {}", path.display()))
}

/// Writes `bytes` to `path` safely: to a new temporary file in the same
/// directory (synced), then renamed over `path`. A failure while writing
/// leaves `path` as it was (absent, or its old content), never empty or
/// half-written. An existing file keeps its permissions; a symbolic link
/// is followed (its target is replaced).
pub(crate) fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);

    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let old_mode = std::fs::metadata(&target).ok().map(|m| m.permissions());
    let tmp = temp_name(&target, SEQ.fetch_add(1, Ordering::Relaxed));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if let Some(perm) = old_mode {
            f.set_permissions(perm)?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &target)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow::Error::new(e).context(format!("cannot write {}", path.display())));
    }
    Ok(())
}

/// A temporary file's name beside `target`: `.NAME.herd-PID-SEQ.tmp`.
fn temp_name(target: &Path, seq: u32) -> PathBuf {
    let name = target
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let dir = parent_dir(target);
    dir.join(format!(".{name}.herd-{}-{seq}.tmp", std::process::id()))
}

/// The directory `path` is in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Checks, without creating or changing it, that an output file can be
/// written at `path` the way [`write_replacing`] writes it: `path` is not
/// a directory, and a file can be created in its directory (tried with a
/// temporary file, removed at once). The error says what is wrong.
pub(crate) fn check_writable(path: &Path) -> std::result::Result<(), String> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err("an empty file name".into());
    }
    if path.is_dir() || path.as_os_str().to_string_lossy().ends_with('/') {
        return Err(format!("{shown} names a directory, not a file"));
    }
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = parent_dir(&target);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "cannot write {shown}: {} is not a directory",
                dir.display()
            ))
        }
        Err(e) => return Err(format!("cannot write {shown}: {}: {e}", dir.display())),
    }
    // root may write anywhere by the mode bits (access(W_OK) says yes even
    // in /proc): only creating a file tells.
    let probe = temp_name(&target, u32::MAX);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!(
            "cannot write {shown}: cannot create a file in {}: {e}",
            dir.display()
        )),
    }
}

/// Whether `a` and `b` name the same existing file (device and inode).
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// clap's parser for a `--report FILE` value: checks that the page can be
/// written there ([`check_writable`]), so that a path that cannot be
/// written fails before the run, not after it. Nothing is created or
/// emptied: the file is written when the report is, after the run.
pub fn report_path(s: &str) -> std::result::Result<PathBuf, String> {
    let p = PathBuf::from(s);
    check_writable(&p)?;
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

    /// Every string a result carries (labels, metric names and units,
    /// arguments, host and config, warnings, failed checks, notes, the
    /// command) is escaped wherever the page shows it: a tag in any of
    /// them never reaches the page as a tag.
    #[test]
    fn hostile_strings_are_escaped_everywhere() {
        const TAG: &str = "<q id=x>";
        let hostile = |s: &str| format!("{s}{TAG}\"'&");
        let mk = |label: &str, v: f64| {
            let mut r = RunResult::new(
                "storm",
                vec!["--waves".into(), hostile("w")],
                serde_json::json!({ hostile("key"): hostile("value") }),
                serde_json::json!({"hostname": hostile("h"), "kernel": hostile("k")}),
            );
            r.push(Metric::lower(&hostile("metric"), &hostile("unit"), v));
            r.warnings.push(hostile("warning"));
            if v > 2.0 {
                r.checks_failed.push(hostile("check"));
            }
            RunSet {
                schema: 1,
                label: hostile(label),
                runs: vec![r],
            }
        };
        let set = |label: &str| {
            let mut s = mk(label, 1.0);
            s.runs.extend(mk(label, 1.1).runs);
            s.runs.extend(mk(label, 3.0).runs);
            s
        };
        let mut c = crate::export::comparison::Comparison::build(
            &hostile("scenario"),
            vec![hostile("common")],
            vec![hostile("--varied")],
            vec![set("a"), set("b")],
            0.05,
            &[],
        );
        c.notes.push(hostile("note"));
        c.command = vec!["compare".into(), hostile("arg")];
        let mut runs = set("r");
        runs.runs.truncate(1);
        let sections = [
            Section::new(
                &hostile("origin"),
                &hostile("kind"),
                Content::Comparison(c.clone()),
            ),
            Section::new(&hostile("o2"), "run", Content::Runs(runs)),
            Section::new(&hostile("o3"), "set", Content::Runs(set("s"))),
            Section::new(
                "d",
                "diff",
                Content::Diff {
                    a: hostile("a.json"),
                    b: hostile("b.json"),
                    pairs: vec![c],
                },
            ),
        ];
        let p = page(&sections);
        assert!(!p.contains(TAG), "an unescaped tag: {}", {
            let i = p.find(TAG).unwrap();
            &p[i.saturating_sub(200)..i + 20]
        });
        assert!(p.contains("&lt;q id=x&gt;"));
    }

    #[test]
    fn report_path_fails_early() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("r.html");
        assert!(report_path(fresh.to_str().unwrap()).is_ok());
        assert!(!fresh.exists(), "checking creates nothing");
        let e = report_path("/nonexistent-dir/r.html").unwrap_err();
        assert!(e.contains("cannot write /nonexistent-dir/r.html"), "{e}");
        let e = report_path(dir.path().to_str().unwrap()).unwrap_err();
        assert!(e.contains("names a directory"), "{e}");
        assert!(report_path("/proc/herd-no-such/x").is_err());
        assert!(report_path("/proc/x").is_err());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no probe left"
        );
    }

    #[test]
    fn checking_keeps_and_writing_replaces_whole() {
        let dir = tempfile::tempdir().unwrap();
        let keep = dir.path().join("keep.html");
        std::fs::write(&keep, "precious").unwrap();
        assert!(report_path(keep.to_str().unwrap()).is_ok());
        assert_eq!(std::fs::read_to_string(&keep).unwrap(), "precious");
        write_replacing(&keep, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&keep).unwrap(), "new");
        // Only the file itself: no temporary file left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // A symbolic link: its target is written, the link stays.
        let link = dir.path().join("link.html");
        std::os::unix::fs::symlink(&keep, &link).unwrap();
        write_replacing(&link, b"via link").unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&keep).unwrap(), "via link");
        assert!(same_file(&link, &keep));
        assert!(!same_file(&keep, &dir.path().join("none")));
        // A failure (a directory where the file should be) changes nothing.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(write_replacing(&sub, b"x").is_err());
        assert!(sub.is_dir());
    }
}
