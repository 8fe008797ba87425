//! A section for the runs of one configuration: one run (`herd storm
//! --json`, an agent or any scenario's result) or a set of repetitions
//! (`-r N --json`). Headline and key figures, failures, latency
//! distributions, per-CPU counters and placement, the lock-contention
//! profile, every metric (for a set: median, mean, spread and each run as
//! a dot), and the typed configuration. A set's figures are of the runs
//! that ran to the end and passed their checks ([`RunResult::counted`]),
//! as the terminal's `-r N` summary; the page says how many it left out.

use super::gather::gather;
use super::headline::{self, Headline};
use super::markup::{details, esc, para, shell_line, Cell, Table};
use super::problems::Findings;
use super::{chart, contention, heatmap, latency, Section};
use crate::export::format::better_name;
use crate::result::{RunResult, RunSet};
use crate::stats::Summary;

/// The figures a reader of each scenario looks at first, when present.
const KEY_FIGURES: [&str; 16] = [
    "wall_s",
    "sys_s",
    "threads_failed",
    "exit_p50_us",
    "exit_p99_us",
    "futex_per_exit",
    "contentions_per_exit",
    "lock_wait_us_per_exit",
    "jobs_per_s",
    "latency_p99_us",
    "completion_p99_us",
    "max_exits_per_ms",
    "ops_per_s",
    "ns_per_op",
    "gp_p50_us",
    "calls_per_s",
];

/// The key figures as cards: the value (the median of a set, with its
/// spread), the unit, the name.
fn cards(runs: &[&RunResult]) -> String {
    let Some(first) = runs.first() else {
        return String::new();
    };
    let mut names: Vec<&str> = KEY_FIGURES
        .iter()
        .copied()
        .filter(|k| first.metric(k).is_some())
        .collect();
    if names.len() < 3 {
        names = first
            .metrics
            .iter()
            .take(6)
            .map(|m| m.name.as_str())
            .collect();
    }
    let mut out = String::from("<div class=\"cards\">");
    for name in names.into_iter().take(8) {
        let values: Vec<f64> = runs.iter().filter_map(|r| r.metric(name)).collect();
        let unit = first
            .metrics
            .iter()
            .find(|m| m.name == name)
            .map_or("", |m| m.unit.as_str());
        let Some(s) = Summary::of(&values) else {
            continue;
        };
        let spread = if s.n > 1 {
            format!(" <span class=\"u\">±{:.1}%</span>", s.pct_stddev())
        } else {
            String::new()
        };
        out.push_str(&format!(
            "<div class=\"card\"><div class=\"k\">{}{}</div><span class=\"v\">{}</span><span class=\"u\">{}</span>{spread}</div>",
            esc(name),
            if s.n > 1 { " (median)" } else { "" },
            esc(&crate::format::fmt_value(s.median)),
            esc(unit)
        ));
    }
    out.push_str("</div>\n");
    out
}

/// The metrics of one run.
fn one_run_table(r: &RunResult) -> String {
    let mut t = Table::new(&["metric", "value", "unit", "better"]);
    for m in &r.metrics {
        t.row(vec![
            Cell::text(&m.name),
            Cell::num(m.value),
            Cell::text(&m.unit),
            Cell::text(better_name(m.better)),
        ]);
    }
    t.render()
}

/// The metrics of a set: the summary over the runs and each run as a dot.
fn set_table(runs: &[&RunResult]) -> String {
    let mut order: Vec<(&str, &str)> = Vec::new();
    for r in runs {
        for m in &r.metrics {
            if !order.iter().any(|(n, _)| *n == m.name) {
                order.push((&m.name, &m.unit));
            }
        }
    }
    let mut t = Table::new(&[
        "metric",
        "unit",
        "n",
        "median",
        "mean",
        "±%stddev",
        "min",
        "max",
        "runs",
    ]);
    for (name, unit) in order {
        let values: Vec<f64> = runs.iter().filter_map(|r| r.metric(name)).collect();
        let Some(s) = Summary::of(&values) else {
            continue;
        };
        t.row(vec![
            Cell::text(name),
            Cell::text(unit),
            Cell::num(s.n as f64),
            Cell::num(s.median),
            Cell::num(s.mean),
            Cell::num_as(s.pct_stddev(), format!("{:.1}%", s.pct_stddev())),
            Cell::num(s.min),
            Cell::num(s.max),
            Cell::html(chart::strip(&["runs".to_string()], &[values], unit)).class("dots"),
        ]);
    }
    t.render()
}

/// The command that reproduces `set`.
pub(crate) fn command(set: &RunSet) -> String {
    let Some(r) = set.runs.first() else {
        return String::new();
    };
    let mut words = vec!["herd".to_string(), r.scenario.clone()];
    words.extend(r.args.iter().cloned());
    if set.runs.len() > 1 {
        words.extend(["-r".to_string(), set.runs.len().to_string()]);
    }
    shell_line(&words)
}

/// The typed configuration of a run as a two-column table.
pub(crate) fn config_table(config: &serde_json::Value) -> String {
    let Some(map) = config.as_object() else {
        return String::new();
    };
    let mut t = Table::new(&["option", "value"]);
    for (k, v) in map {
        let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        t.row(vec![
            Cell::text(k),
            Cell::html(format!("<code>{}</code>", esc(&text))),
        ]);
    }
    details(
        "Configuration (the typed options, as herd diff compares them)",
        &t.render(),
        false,
    )
}

/// The section of `s`, whose content is `set`.
pub(crate) fn section(s: &Section, set: &RunSet, id: &str) -> String {
    let runs: Vec<&RunResult> = set.runs.iter().collect();
    let g = gather(&runs);
    let findings = Findings::of(&runs, &g.perf_notes, s.gaps.clone());
    let first = runs.first().copied();
    let scenario = first.map_or("(no runs)", |r| r.scenario.as_str());
    let mut facts = Vec::new();
    if runs.len() > 1 {
        facts.push((
            "runs".to_string(),
            format!("{} (each in its own process)", runs.len()),
        ));
    }
    if g.perf_unreadable > 0 {
        facts.push((
            "perf".to_string(),
            format!(
                "{} run(s) with a perf section this herd cannot read",
                g.perf_unreadable
            ),
        ));
    }
    let h = Headline {
        title: format!(
            "herd {scenario}{}",
            if runs.len() > 1 {
                format!(": {} runs", runs.len())
            } else {
                String::new()
            }
        ),
        id: id.to_string(),
        origin: format!("{} ({})", s.origin, s.kind),
        command: command(set),
        command_note: None,
        when: headline::when(&runs, s.file_time.as_deref()),
        version: headline::version(&runs),
        status: findings.status(),
        facts,
    };
    let host = first.map_or_else(Vec::new, |r| headline::host_facts(&r.host, &r.config));
    let mut out = headline::render(&h, &host);
    // The figures of a set: the runs that count, or all when none does.
    let counted: Vec<&RunResult> = runs.iter().copied().filter(|r| r.counted()).collect();
    let figures: &[&RunResult] = if counted.is_empty() { &runs } else { &counted };
    out.push_str(&cards(figures));
    out.push_str(&findings.section());
    out.push_str(&latency::section(&g.dists, g.runs));
    out.push_str(&heatmap::section(&g));
    out.push_str(&contention::section(&g));
    out.push_str("<h2>Every metric</h2>\n");
    match runs.as_slice() {
        [] => out.push_str("<p class=\"note\">No runs.</p>"),
        [one] => out.push_str(&one_run_table(one)),
        many => {
            if counted.is_empty() {
                out.push_str(&para(
                    "note",
                    "No run ran to the end and passed its own checks: the figures below are \
                     of runs that did not, not to be trusted.",
                ));
            } else if counted.len() < many.len() {
                out.push_str(&para(
                    "note",
                    &format!(
                        "{} run(s) interrupted or failing their own checks are left out of the \
                         figures ({} counted).",
                        many.len() - counted.len(),
                        counted.len()
                    ),
                ));
            }
            out.push_str(&set_table(figures));
        }
    }
    if let Some(r) = first {
        out.push_str(&config_table(&r.config));
    }
    out.push_str("</section>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::Metric;

    #[test]
    fn sets_summarise_and_singles_list() {
        let mk = |v: f64| {
            let mut r = RunResult::new(
                "storm",
                vec!["--waves".into(), "3".into()],
                Default::default(),
                Default::default(),
            );
            r.push(Metric::lower("wall_s", "s", v));
            r
        };
        let set = RunSet {
            schema: 1,
            label: "x".into(),
            runs: vec![mk(1.0), mk(2.0), mk(3.0)],
        };
        assert_eq!(command(&set), "herd storm --waves 3 -r 3");
        let t = set_table(&set.runs.iter().collect::<Vec<_>>());
        assert!(t.contains("<td class=\"n\" data-v=\"2\">2</td>"), "{t}");
        assert_eq!(t.matches("<circle").count(), 3);
        let c = cards(&set.runs.iter().collect::<Vec<_>>());
        assert!(
            c.contains("wall_s (median)") && c.contains(">2<") && c.contains("±50.0%"),
            "{c}"
        );
        // A run cut short is left out of the figures, and said so (it
        // used to count: the median card read 1.5, the mean 1.55).
        let mut cut = mk(0.2);
        cut.interrupted = true;
        let mut partial = set.clone();
        partial.runs.push(cut);
        let page = section(&Section::test("x", "set"), &partial, "s");
        assert!(page.contains("1 run(s) interrupted or failing"), "{page}");
        assert!(
            page.contains("<td class=\"n\" data-v=\"2\">2</td>"),
            "{page}"
        );
        assert!(page.contains("<span class=\"v\">2</span>"), "{page}");
        let one = one_run_table(&set.runs[0]);
        assert!(one.contains(">wall_s<") && one.contains(">lower<"));
    }
}
