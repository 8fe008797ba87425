//! What went wrong or could not be measured, in the words the terminal
//! output uses: the run's own checks that failed (`herd: check failed:
//! ...`, exit 4), interrupted runs, thread creations that failed with the
//! limit that stopped them, pre-flight warnings, perf counters that could
//! not be opened with the reason and the fix, and what the report could
//! not read. The headline's badge is decided here too ([`Findings::status`]).

use std::fmt::Write as _;

use serde_json::Value;

use super::markup::{esc, para, Cell, Status, Table};
use crate::result::RunResult;

/// Each message once, with the number of runs that gave it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Counted(pub(crate) Vec<(String, usize)>);

impl Counted {
    fn add(&mut self, msg: &str) {
        match self.0.iter_mut().find(|(m, _)| m == msg) {
            Some((_, n)) => *n += 1,
            None => self.0.push((msg.to_string(), 1)),
        }
    }

    fn html(&self, runs: usize, class: &str) -> String {
        let mut out = format!("<ul class=\"plain {class}\">");
        for (m, n) in &self.0 {
            let times = if runs > 1 {
                format!(" <span class=\"mute\">({n} of {runs} runs)</span>")
            } else {
                String::new()
            };
            let _ = write!(out, "<li><code>{}</code>{times}</li>", esc(m));
        }
        out.push_str("</ul>\n");
        out
    }
}

/// The failures and gaps of a set of runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Findings {
    runs: usize,
    checks: Counted,
    warnings: Counted,
    perf: Counted,
    interrupted: usize,
    threads_failed: f64,
    failure_groups: Vec<Value>,
    /// What the report could not find or read.
    pub(crate) gaps: Vec<String>,
}

impl Findings {
    /// The findings of `runs`, with perf's notes already gathered
    /// (`(note, runs)`) and the reader's `gaps`.
    pub(crate) fn of(
        runs: &[&RunResult],
        perf_notes: &[(String, usize)],
        gaps: Vec<String>,
    ) -> Findings {
        let mut f = Findings {
            runs: runs.len(),
            gaps,
            ..Findings::default()
        };
        for r in runs {
            for c in &r.checks_failed {
                f.checks.add(c);
            }
            for w in &r.warnings {
                // perf's notes are among an agent's warnings: said once, below.
                if !perf_notes.iter().any(|(n, _)| n == w) {
                    f.warnings.add(w);
                }
            }
            f.interrupted += usize::from(r.interrupted);
            f.threads_failed += r.metric("threads_failed").unwrap_or(0.0);
            if let Some(groups) = r.details.get("failures").and_then(Value::as_array) {
                f.failure_groups.extend(groups.iter().cloned());
            }
        }
        f.perf = Counted(perf_notes.to_vec());
        f
    }

    /// The badge: red when a check failed, amber for an interrupted run,
    /// failed thread creations or something missing, else green.
    pub(crate) fn status(&self) -> (Status, String) {
        let checks: usize = self.checks.0.iter().map(|c| c.1).sum();
        if checks > 0 {
            return (
                Status::Bad,
                format!("{checks} check(s) FAILED: figures not to be trusted"),
            );
        }
        let mut warn = Vec::new();
        if self.interrupted > 0 {
            warn.push(format!("{} run(s) interrupted", self.interrupted));
        }
        if self.threads_failed > 0.0 {
            warn.push(format!("{} thread creations failed", self.threads_failed));
        }
        if !self.gaps.is_empty() {
            warn.push("incomplete input".to_string());
        }
        if warn.is_empty() {
            (Status::Ok, "every check passed".into())
        } else {
            (Status::Warn, format!("checks passed; {}", warn.join(", ")))
        }
    }

    /// The section.
    pub(crate) fn section(&self) -> String {
        let mut out = String::from("<h2>Failures and unavailable counters</h2>\n");
        let mut any = false;
        if !self.gaps.is_empty() {
            any = true;
            out.push_str("<h3>Missing from this input</h3><div class=\"gap\">");
            for g in &self.gaps {
                out.push_str(&para("", g));
            }
            out.push_str("</div>");
        }
        if !self.checks.0.is_empty() {
            any = true;
            out.push_str(
                "<h3>Checks FAILED (exit 4: the figures are written in full, but not to be trusted)</h3><div class=\"fail\">",
            );
            out.push_str(&self.checks.html(self.runs, ""));
            out.push_str("</div>");
        }
        if self.interrupted > 0 {
            any = true;
            out.push_str(&para(
                "gap",
                &format!(
                    "{} of {} run(s) interrupted (Ctrl-C): their figures cover the part that ran.",
                    self.interrupted, self.runs
                ),
            ));
        }
        if !self.failure_groups.is_empty() {
            any = true;
            out.push_str("<h3>Thread creations that failed</h3>");
            out.push_str(&failure_table(&self.failure_groups));
        }
        if !self.warnings.0.is_empty() {
            any = true;
            out.push_str("<h3>Warnings</h3>");
            out.push_str(&self.warnings.html(self.runs, ""));
        }
        if !self.perf.0.is_empty() {
            any = true;
            out.push_str("<h3>perf counters unavailable or partial</h3>");
            out.push_str(&self.perf.html(self.runs, ""));
        }
        if !any {
            out.push_str(&para(
                "note",
                "None: every check passed, no thread creation failed, every counter opened.",
            ));
        }
        out
    }
}

/// Creation failures by errno and limit (`details.failures`).
fn failure_table(groups: &[Value]) -> String {
    let mut t = Table::new(&[
        "threads",
        "errno",
        "limit",
        "first in wave",
        "after threads created",
        "evidence",
    ]);
    for g in groups {
        let num = |k: &str| g[k].as_f64().map_or_else(Cell::none, Cell::num);
        let text = |k: &str| Cell::text(g[k].as_str().unwrap_or(""));
        t.row(vec![
            num("count"),
            text("errno_name"),
            text("limit_name"),
            num("first_wave"),
            num("created_before"),
            text("evidence"),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunResult {
        RunResult::new("storm", vec![], Value::Null, Value::Null)
    }

    #[test]
    fn badge_follows_the_worst_finding() {
        let ok = run();
        assert_eq!(Findings::of(&[&ok], &[], vec![]).status().0, Status::Ok);
        let mut partial = run();
        partial.interrupted = true;
        let (s, text) = Findings::of(&[&ok, &partial], &[], vec![]).status();
        assert_eq!(s, Status::Warn);
        assert!(text.contains("1 run(s) interrupted"), "{text}");
        assert_eq!(
            Findings::of(&[&ok], &[], vec!["round 2 missing".into()])
                .status()
                .0,
            Status::Warn
        );
        let mut bad = run();
        bad.checks_failed
            .push("cleanup: 3 cleanups ran twice".into());
        assert_eq!(
            Findings::of(&[&ok, &bad], &[], vec![]).status().0,
            Status::Bad
        );
    }

    #[test]
    fn messages_are_counted_once_each_in_the_terminals_words() {
        let mut a = run();
        a.warnings
            .push("67256 thread creations failed with EAGAIN (vm.max_map_count): x".into());
        a.warnings
            .push("perf: cycles unavailable: not supported".into());
        a.details = serde_json::json!({"failures": [{"count": 67256, "errno_name": "EAGAIN",
            "limit_name": "vm.max_map_count", "first_wave": 327, "created_before": 32744, "evidence": "<65530>"}]});
        let notes = vec![("perf: cycles unavailable: not supported".to_string(), 2)];
        let f = Findings::of(&[&a, &a], &notes, vec![]);
        let s = f.section();
        assert!(s.contains("(2 of 2 runs)"));
        assert_eq!(s.matches("perf: cycles unavailable").count(), 1, "{s}");
        assert!(s.contains("&lt;65530&gt;") && s.contains("EAGAIN"));
        assert!(Findings::of(&[&run()], &[], vec![])
            .section()
            .contains("None: every check passed"));
    }
}
