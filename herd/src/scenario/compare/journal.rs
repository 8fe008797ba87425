//! compare's journal: every finished child run written as it finishes, so
//! a child that fails (or a Ctrl-C, or a reboot) an hour in loses nothing,
//! and `herd compare ... --resume FILE` runs only what is missing.
//!
//! The file is JSON Lines: a header (the plan: scenario, every
//! configuration's label and arguments, runs, warm-up rounds), then one
//! line per finished run (round, configuration, its [`RunResult`]). Each
//! line is flushed and synced before the next child starts. A resume must
//! be of the same plan (the header is compared, a mismatch is a usage
//! error naming it); a last line cut short by a crash is ignored. A
//! journal larger than 1 GiB ([`MAX_INPUT_BYTES`](crate::scenario::diff::MAX_INPUT_BYTES),
//! the bound of every input herd reads) is refused, exit 2.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::Config;
use crate::error::usage;
use crate::result::RunResult;
use crate::scenario::diff::read_input;

/// Value of [`Header::kind`].
pub const KIND: &str = "herd-compare-journal";

/// What the journal is a record of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`KIND`].
    pub kind: String,
    /// The scenario.
    pub scenario: String,
    /// Every configuration: label and complete arguments.
    pub configs: Vec<(String, Vec<String>)>,
    /// Measured rounds.
    pub runs: usize,
    /// Warm-up rounds (run first, discarded).
    pub warmup: usize,
}

impl Header {
    /// The header of a plan.
    pub fn new(scenario: &str, configs: &[Config], runs: usize, warmup: usize) -> Header {
        Header {
            kind: KIND.into(),
            scenario: scenario.into(),
            configs: configs
                .iter()
                .map(|c| (c.label.clone(), c.args.clone()))
                .collect(),
            runs,
            warmup,
        }
    }
}

/// One finished run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// Round, warm-up rounds first (0-based).
    pub round: usize,
    /// Configuration index.
    pub config: usize,
    /// What the child reported.
    pub result: RunResult,
}

/// An open journal.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    /// Runs it holds (finished before a resume, and recorded since).
    runs: usize,
}

impl Journal {
    /// Starts a new journal at `path` (truncated) for `header`. A `path`
    /// that cannot be created is a usage error naming `--journal` (exit
    /// 2), except herd's own default name ([`default_name`]), whose
    /// failure the caller handles (another directory).
    pub fn create(path: &Path, header: &Header) -> Result<Journal> {
        let file = File::create(path).map_err(|e| {
            let msg = format!("cannot create the journal {}: {e}", path.display());
            if path.file_name() == Some(default_name().as_ref()) {
                anyhow::anyhow!(msg)
            } else {
                usage("--journal", msg)
            }
        })?;
        let mut j = Journal {
            file,
            path: path.to_path_buf(),
            runs: 0,
        };
        j.line(&serde_json::to_string(header)?)?;
        Ok(j)
    }

    /// Reopens the journal at `path` to continue `header`'s plan: its
    /// finished runs, and the journal to append to.
    pub fn resume(path: &Path, header: &Header) -> Result<(Journal, Vec<Entry>)> {
        // Bounded as every input herd reads (1 GiB): a runaway file or
        // `/dev/zero` is refused, not read into memory.
        let bytes = read_input(path, "--resume", "a herd compare journal")?;
        let text = String::from_utf8(bytes).map_err(|_| {
            usage(
                "--resume",
                format!(
                    "{}: not text (UTF-8): not a herd compare journal",
                    path.display()
                ),
            )
        })?;
        let mut lines = text.split_inclusive('\n');
        let first = lines
            .next()
            .ok_or_else(|| usage("--resume", format!("{} is empty", path.display())))?;
        let found: Header = serde_json::from_str(first.trim_end()).map_err(|e| {
            usage(
                "--resume",
                format!("{} is not a herd compare journal: {e}", path.display()),
            )
        })?;
        if let Some(diff) = difference(&found, header) {
            return Err(usage(
                "--resume",
                format!(
                    "{} is the journal of another comparison ({diff}); give the same \
                     command line as the run it records",
                    path.display()
                ),
            ));
        }
        let mut done = Vec::new();
        let mut valid = first.len();
        for line in lines {
            // A line cut short by a crash is the run that did not finish:
            // it and anything after it are cut off before appending.
            match serde_json::from_str::<Entry>(line.trim_end()) {
                Ok(e) if line.ends_with('\n') && e.config < header.configs.len() => {
                    done.push(e);
                    valid += line.len();
                }
                _ => break,
            }
        }
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .with_context(|| format!("cannot append to {}", path.display()))?;
        file.set_len(valid as u64)
            .with_context(|| format!("cannot truncate {}", path.display()))?;
        Ok((
            Journal {
                file,
                path: path.to_path_buf(),
                runs: done.len(),
            },
            done,
        ))
    }

    /// Records one finished run (flushed and synced).
    pub fn record(&mut self, e: &Entry) -> Result<()> {
        self.line(&serde_json::to_string(e)?)?;
        self.runs += 1;
        Ok(())
    }

    /// The runs it holds.
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// Where the journal is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn line(&mut self, s: &str) -> Result<()> {
        writeln!(self.file, "{s}")
            .and_then(|_| self.file.sync_data())
            .with_context(|| format!("cannot write the journal {}", self.path.display()))
    }
}

/// The file name of compare's own journal when `--journal` is not given
/// (`herd-compare-PID.journal.jsonl`, in the current directory or else
/// the temporary directory).
pub fn default_name() -> String {
    format!("herd-compare-{}.journal.jsonl", std::process::id())
}

/// What differs between two plans, for the error message.
fn difference(found: &Header, want: &Header) -> Option<String> {
    if found.kind != want.kind {
        Some(format!("kind {}", found.kind))
    } else if found.scenario != want.scenario {
        Some(format!("scenario {} vs {}", found.scenario, want.scenario))
    } else if found.configs != want.configs {
        let labels = |h: &Header| {
            h.configs
                .iter()
                .map(|(l, a)| format!("{l}: {}", a.join(" ")))
                .collect::<Vec<_>>()
                .join("; ")
        };
        Some(format!(
            "configurations [{}] vs [{}]",
            labels(found),
            labels(want)
        ))
    } else if (found.runs, found.warmup) != (want.runs, want.warmup) {
        Some(format!(
            "-r {} --warmup {} vs -r {} --warmup {}",
            found.runs, found.warmup, want.runs, want.warmup
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(label: &str) -> Config {
        Config {
            label: label.into(),
            args: vec![format!("--{label}")],
        }
    }

    #[test]
    fn records_resume_and_refuse_another_plan() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("j.jsonl");
        let h = Header::new("storm", &[cfg("a"), cfg("b")], 3, 1);
        let mut j = Journal::create(&path, &h).unwrap();
        let r = RunResult::new("storm", vec![], Default::default(), Default::default());
        for (round, config) in [(0, 0), (0, 1), (1, 1)] {
            j.record(&Entry {
                round,
                config,
                result: r.clone(),
            })
            .unwrap();
        }
        drop(j);
        // A crash mid-line: the torn line is not a run.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        write!(f, "{{\"round\":2,\"con").unwrap();
        drop(f);
        let (mut j, done) = Journal::resume(&path, &h).unwrap();
        let got: Vec<(usize, usize)> = done.iter().map(|e| (e.round, e.config)).collect();
        assert_eq!(got, [(0, 0), (0, 1), (1, 1)]);
        // Appending after the cut: the next resume sees every run.
        j.record(&Entry {
            round: 1,
            config: 0,
            result: r.clone(),
        })
        .unwrap();
        drop(j);
        let (_, done) = Journal::resume(&path, &h).unwrap();
        assert_eq!(done.len(), 4);
        assert_eq!((done[3].round, done[3].config), (1, 0));
        // Another plan: refused with exit 2, naming the difference.
        let other = Header::new("storm", &[cfg("a"), cfg("b")], 5, 1);
        let e = Journal::resume(&path, &other).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 2);
        assert!(
            format!("{e:#}").contains("-r 3 --warmup 1 vs -r 5"),
            "{e:#}"
        );
        let e = Journal::resume(&t.path().join("none"), &h).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 2, "{e:#}");
    }

    #[test]
    fn an_unwritable_journal_is_a_usage_error() {
        let t = tempfile::tempdir().unwrap();
        let h = Header::new("storm", &[cfg("a"), cfg("b")], 1, 0);
        for bad in [
            t.path().to_path_buf(),
            t.path().join("no-dir/j.jsonl"),
            PathBuf::from("/proc/x"),
        ] {
            let e = Journal::create(&bad, &h).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{e:#}");
            let m = format!("{e:#}");
            assert!(
                m.starts_with("invalid --journal: cannot create the journal"),
                "{m}"
            );
            assert!(m.contains(&bad.display().to_string()), "{m}");
        }
        // herd's own name: the caller tries elsewhere, not a usage error.
        let e = Journal::create(&t.path().join("no-dir").join(default_name()), &h).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 1, "{e:#}");
    }
}
