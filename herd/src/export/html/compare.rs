//! A section for a comparison (`herd compare --save`, a compare journal,
//! each pair of `herd diff`): every metric per configuration with its
//! spread, the %change against the baseline (named) with the terminal's
//! significance marks and verdict, and each run as a dot on a shared
//! scale; then latency, per-CPU counters and lock contention by
//! configuration, and the configurations' arguments.

use super::gather::{gather, Gathered};
use super::headline::{self, Headline};
use super::markup::{esc, para, shell_line, Cell, Table};
use super::problems::Findings;
use super::{chart, contention, heatmap, latency, Section};
use crate::export::comparison::Comparison;
use crate::export::format::{change_text, summary_text};
use crate::result::RunResult;
use crate::stats::Verdict;

/// The equivalent `herd compare` command of a document that records
/// none: each configuration's own arguments as a `--config`.
fn reconstructed(c: &Comparison) -> String {
    let runs = c.sets.iter().map(|s| s.runs.len()).max().unwrap_or(0);
    let mut w = vec![
        "herd".to_string(),
        "compare".into(),
        "--scenario".into(),
        c.scenario.clone(),
    ];
    w.extend(["-r".to_string(), runs.to_string()]);
    for s in &c.sets {
        if let Some(r) = s.runs.first() {
            let own: Vec<String> = match r.args.strip_prefix(c.common_args.as_slice()) {
                Some(rest) => rest.to_vec(),
                None => r.args.clone(),
            };
            w.extend(["--config".to_string(), shell_line(&own)]);
        }
    }
    w.push("--".into());
    w.extend(c.common_args.iter().cloned());
    shell_line(&w)
}

/// The metric table: per configuration `mean ±%stddev`, `%change` with
/// its marks against the baseline, and the runs as dots.
fn table(c: &Comparison) -> String {
    let mut head = vec!["metric".to_string(), "unit".to_string()];
    let mut groups = vec![(String::new(), 2)];
    for (i, l) in c.labels.iter().enumerate() {
        let n = c.complete_runs(i);
        head.push(format!("mean ±%stddev (n={n})"));
        if i == 0 {
            groups.push((format!("{l} (base)"), 1));
        } else {
            head.push("%change".into());
            groups.push((l.clone(), 2));
        }
    }
    head.push("each run".into());
    groups.push((String::new(), 1));
    let mut t = Table::new(&head).groups(groups);
    for row in &c.rows {
        let mut cells = vec![Cell::text(&row.name), Cell::text(&row.unit)];
        for (i, cell) in row.cells.iter().enumerate() {
            let text = summary_text(cell.summary.as_ref());
            cells.push(match &cell.summary {
                Some(s) => Cell::num_as(s.mean, text),
                None => Cell::none(),
            });
            if i > 0 {
                let ch = cell.change.as_ref();
                let class = match ch.map(|c| c.verdict) {
                    Some(Verdict::Better) => "n good",
                    Some(Verdict::Worse) => "n bad",
                    _ => "n",
                };
                let pct = ch.and_then(|c| c.pct).unwrap_or(f64::NAN);
                cells.push(Cell::num_as(pct, change_text(ch, true)).class(class));
            }
        }
        let values: Vec<Vec<f64>> = c
            .sets
            .iter()
            .map(|s| {
                s.runs
                    .iter()
                    .filter(|r| r.counted())
                    .filter_map(|r| r.metric(&row.name))
                    .collect()
            })
            .collect();
        cells.push(Cell::html(chart::strip(&c.labels, &values, &row.unit)).class("dots"));
        t.row(cells);
    }
    t.render()
}

/// Each configuration's label and arguments.
fn configurations(c: &Comparison) -> String {
    let mut t = Table::new(&["configuration", "runs", "arguments of its runs"]);
    for (i, s) in c.sets.iter().enumerate() {
        let label = if i == 0 {
            format!("{} (base)", s.label)
        } else {
            s.label.clone()
        };
        let args = s
            .runs
            .first()
            .map(|r| shell_line(&r.args))
            .unwrap_or_default();
        t.row(vec![
            Cell::html(format!(
                "<span class=\"key\"><i style=\"background:{}\"></i>{}</span>",
                chart::color(i),
                esc(&label)
            )),
            Cell::num(s.runs.len() as f64),
            Cell::html(format!("<code>{}</code>", esc(&args))),
        ]);
    }
    t.render()
}

/// The section of `s` for comparison `c`; `command` overrides the
/// command line shown (a diff's pair).
pub(crate) fn section(s: &Section, c: &Comparison, id: &str, command: Option<String>) -> String {
    let all: Vec<&RunResult> = c.sets.iter().flat_map(|s| &s.runs).collect();
    let gathered: Vec<Gathered> = c
        .sets
        .iter()
        .map(|s| gather(&s.runs.iter().collect::<Vec<_>>()))
        .collect();
    let mut notes: Vec<(String, usize)> = Vec::new();
    for g in &gathered {
        for (n, k) in &g.perf_notes {
            match notes.iter_mut().find(|(m, _)| m == n) {
                Some((_, j)) => *j += k,
                None => notes.push((n.clone(), *k)),
            }
        }
    }
    let findings = Findings::of(&all, &notes, s.gaps.clone());
    let (command, note) = match command {
        Some(cmd) => (cmd, None),
        None if !c.command.is_empty() => {
            let mut w = vec!["herd".to_string()];
            w.extend(c.command.iter().cloned());
            (shell_line(&w), None)
        }
        None => (
            reconstructed(c),
            Some(
                "Reconstructed: this document records no command line (herd before 2026-12-03); \
                  the command above runs the same configurations."
                    .to_string(),
            ),
        ),
    };
    let base = c.labels.first().cloned().unwrap_or_default();
    let facts = vec![
        ("baseline".to_string(), base),
        ("configurations".to_string(), c.labels.len().to_string()),
        ("significance".to_string(), format!("alpha {}", c.alpha)),
    ];
    let h = Headline {
        title: c.title.clone(),
        id: id.to_string(),
        origin: format!("{} ({})", s.origin, s.kind),
        command,
        command_note: note,
        when: headline::when(&all, s.file_time.as_deref()),
        version: headline::version(&all),
        status: findings.status(),
        facts,
    };
    let host = all
        .first()
        .map_or_else(Vec::new, |r| headline::host_facts(&r.host, &r.config));
    let mut out = headline::render(&h, &host);
    out.push_str(&findings.section());
    out.push_str("<h2>Metrics by configuration</h2>\n");
    out.push_str(&configurations(c));
    out.push_str(&table(c));
    out.push_str(&format!(
        "<pre class=\"note\">{}</pre>\n",
        esc(c.legend().trim())
    ));
    let dists: Vec<_> = gathered.iter().map(|g| g.dists.clone()).collect();
    out.push_str(&latency::by_config(&c.labels, &dists));
    out.push_str(&heatmap::by_config(&c.labels, &gathered));
    let contention = contention::by_config(&c.labels, &gathered);
    if contention.is_empty() {
        out.push_str("<h2>Lock contention by configuration</h2>");
        out.push_str(&para(
            "note",
            "No contention profile in these runs (taken with --contention).",
        ));
    } else {
        out.push_str(&contention);
    }
    out.push_str("</section>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::comparison::tests::sample;

    #[test]
    fn table_marks_verdicts_and_names_the_baseline() {
        let c = sample();
        let t = table(&c);
        assert!(
            t.contains("<th colspan=\"1\">cleanup=locked (base)</th>"),
            "{t}"
        );
        assert!(t.contains("<th>mean ±%stddev (n=4)</th>"), "{t}");
        assert!(t.contains("class=\"n good\""), "{t}");
        assert!(t.contains("-87.7% ***R better"), "{t}");
        assert_eq!(
            t.matches("<circle").count(),
            2 * 8,
            "every run of both metrics"
        );
    }

    #[test]
    fn a_command_is_reconstructed_when_not_recorded() {
        let mut c = sample();
        c.common_args = vec![];
        for s in &mut c.sets {
            for r in &mut s.runs {
                r.args = vec![
                    "--cleanup".into(),
                    s.label.trim_start_matches("cleanup=").into(),
                ];
            }
        }
        assert_eq!(
            reconstructed(&c),
            "herd compare --scenario storm -r 4 --config '--cleanup locked' --config '--cleanup exitq' --"
        );
    }
}
