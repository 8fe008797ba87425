//! The kernel lock-contention profile (`--contention`): which locks were
//! waited on, for how long, and by which kernel function. A bar chart of
//! the callers with the most total wait, the tables `perf lock
//! contention` prints (by caller, and `-l` by lock), the process's
//! `mmap_lock` found by address, and the accounting (samples, pairs,
//! losses) that says how far to trust it. In a comparison, one table of
//! the top callers with each configuration's wait per run.

use std::fmt::Write as _;

use super::gather::Gathered;
use super::markup::{esc, fmt_ns, para, Cell, Table};
use crate::perf::contention::{ContentionReport, WaitStat};

/// Callers in the bar chart.
const BARS: usize = 15;
/// Rows per table (the JSON keeps up to 100).
const ROWS: usize = 40;

/// What a by-lock row's lock is, in words.
fn lock_name(s: &WaitStat) -> String {
    match (s.symbol.is_empty(), s.region.as_str()) {
        (false, _) => s.symbol.clone(),
        (true, "kernel image") => "(static: kernel image or module; unnamed)".into(),
        _ => "(in a heap object)".into(),
    }
}

/// Horizontal bars of the callers' total wait.
fn bars(rows: &[WaitStat], per_run: f64) -> String {
    let rows: Vec<&WaitStat> = rows.iter().take(BARS).collect();
    let max = rows.iter().map(|r| r.total_ns).max().unwrap_or(0) as f64;
    if rows.is_empty() || max <= 0.0 {
        return String::new();
    }
    let (label_w, bar_w, row_h) = (300.0, 330.0, 20.0);
    let h = row_h * rows.len() as f64 + 8.0;
    let w = label_w + bar_w + 90.0;
    let mut body = String::new();
    for (i, r) in rows.iter().enumerate() {
        let y = 4.0 + row_h * i as f64;
        let len = (r.total_ns as f64 / max * bar_w).max(1.0);
        let name = format!("{} {}", r.symbol, r.class);
        let _ = write!(
            body,
            "<text class=\"tk\" x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect class=\"d\" x=\"{label_w}\" y=\"{:.1}\" width=\"{len:.1}\" height=\"14\" fill=\"#0072B2\">\
             <title>{}: {} waits, total {}, max {}</title></rect>\
             <text class=\"tk\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            label_w - 6.0,
            y + 11.0,
            esc(&truncate(&name, 46)),
            y,
            esc(&name),
            r.contended,
            fmt_ns(r.total_ns as f64),
            fmt_ns(r.max_ns as f64),
            label_w + len + 4.0,
            y + 11.0,
            esc(&fmt_ns(r.total_ns as f64 / per_run))
        );
    }
    format!(
        "<figure class=\"chart\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" \
         height=\"{h}\" role=\"img\" aria-label=\"total lock wait by caller\">{body}</svg><figcaption><b>Total wait by \
         caller</b> (kernel function and lock class){}, the {} largest.</figcaption></figure>\n",
        if per_run > 1.0 { ", per run" } else { "" },
        rows.len()
    )
}

/// `s` cut to `n` characters with an ellipsis.
fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// A `perf lock contention`-style table of `rows`, last column `what`.
fn table(
    rows: &[WaitStat],
    what: &str,
    name: impl Fn(&WaitStat) -> String,
    by_lock: bool,
) -> String {
    let mut head = vec!["contended", "total wait", "max wait", "avg wait", "type"];
    if by_lock {
        head.push("address");
    }
    head.push(what);
    let mut t = Table::new(&head);
    for s in rows.iter().take(ROWS) {
        let mut cells = vec![
            Cell::num(s.contended as f64),
            Cell::num_as(s.total_ns as f64, fmt_ns(s.total_ns as f64)),
            Cell::num_as(s.max_ns as f64, fmt_ns(s.max_ns as f64)),
            Cell::num_as(s.avg_ns() as f64, fmt_ns(s.avg_ns() as f64)),
            Cell::text(&s.class),
        ];
        if by_lock {
            cells.push(Cell::html(format!(
                "<span class=\"mono\">{}</span>",
                esc(&s.address)
            )));
        }
        cells.push(Cell::html(format!(
            "<span class=\"mono\">{}</span>",
            esc(&name(s))
        )));
        t.row(cells);
    }
    let mut out = t.render();
    if rows.len() > ROWS {
        out.push_str(&para(
            "note",
            &format!("… {} more rows in the JSON.", rows.len() - ROWS),
        ));
    }
    out
}

/// The accounting under the tables.
fn accounting(c: &ContentionReport) -> String {
    let mut s = format!(
        "samples: {}; waits paired: {}; total wait: {}; max wait: {}; unpaired: {} begins still waiting \
         at the end, {} ends whose begin preceded counting; lost: {} samples dropped by the kernel \
         (ring buffers full; {} x {} KiB), {} over herd's memory cap",
        c.samples,
        c.pairs,
        fmt_ns(c.total_wait_ns as f64),
        fmt_ns(c.max_wait_ns as f64),
        c.unfinished,
        c.unmatched_ends,
        c.lost,
        c.ring_buffers,
        c.ring_kib,
        c.dropped
    );
    if c.broken_by_loss > 0 {
        let _ = write!(s, "; {} waits spanning a loss left out", c.broken_by_loss);
    }
    if c.kallsyms_hidden {
        s.push_str("; /proc/kallsyms hides addresses, so callers are unnamed");
    }
    s.push('.');
    s
}

/// The contention section of one configuration's runs.
pub(crate) fn section(g: &Gathered) -> String {
    let mut out = String::from("<h2>Lock contention</h2>\n");
    let Some(c) = &g.contention else {
        out.push_str(&para(
            "note",
            "No contention profile in this result (taken with --contention; if it was asked for, \
             the reason it could not be taken is under Failures and unavailable counters).",
        ));
        return out;
    };
    let runs = g.contention_runs.max(1) as f64;
    if g.contention_runs > 1 {
        out.push_str(&para(
            "note",
            &format!(
                "Profiles of {} runs merged by caller and by lock (lock addresses are per process, \
                 so unnamed locks of different runs stay apart).",
                g.contention_runs
            ),
        ));
    }
    if c.by_caller.is_empty() && c.by_lock.is_empty() {
        out.push_str(&para("note", "No completed lock waits were recorded."));
    }
    out.push_str(&bars(&c.by_caller, runs));
    if let Some(m) = &c.mmap_lock {
        out.push_str(&para(
            "note",
            &format!(
                "The process's mmap_lock (found by address): {} waits ({} for reading), total {}; {} of them \
                 by callers that also take other locks (such as do_exit), which the by-caller table cannot \
                 attribute.",
                m.waits,
                m.read_waits,
                fmt_ns(m.wait_ns as f64),
                m.other_callers
            ),
        ));
    }
    if !c.by_caller.is_empty() {
        out.push_str("<h3>By caller</h3>");
        out.push_str(&table(&c.by_caller, "caller", |s| s.symbol.clone(), false));
    }
    if !c.by_lock.is_empty() {
        out.push_str("<h3>By lock</h3>");
        out.push_str(&table(&c.by_lock, "symbol", lock_name, true));
    }
    out.push_str(&para("note", &accounting(c)));
    out
}

/// The callers with the most wait in any configuration, each
/// configuration's wait and waits per run (`gathered[i]` is `labels[i]`'s).
pub(crate) fn by_config(labels: &[String], gathered: &[Gathered]) -> String {
    let profiles: Vec<Option<(&ContentionReport, f64)>> = gathered
        .iter()
        .map(|g| {
            g.contention
                .as_ref()
                .map(|c| (c, g.contention_runs.max(1) as f64))
        })
        .collect();
    if profiles.iter().all(Option::is_none) {
        return String::new();
    }
    let mut keys: Vec<(String, String, f64)> = Vec::new();
    for (c, runs) in profiles.iter().flatten() {
        for s in &c.by_caller {
            let per = s.total_ns as f64 / runs;
            match keys.iter_mut().find(|k| k.0 == s.symbol && k.1 == s.class) {
                Some(k) => k.2 = k.2.max(per),
                None => keys.push((s.symbol.clone(), s.class.clone(), per)),
            }
        }
    }
    keys.sort_by(|a, b| b.2.total_cmp(&a.2));
    keys.truncate(25);
    let mut head = vec!["caller".to_string(), "type".to_string()];
    for l in labels {
        head.push(format!("{l}: wait/run"));
        head.push(format!("{l}: waits/run"));
    }
    let mut t = Table::new(&head);
    for (sym, class, _) in &keys {
        let mut cells = vec![
            Cell::html(format!("<span class=\"mono\">{}</span>", esc(sym))),
            Cell::text(class),
        ];
        for p in &profiles {
            let row = p.and_then(|(c, runs)| {
                c.by_caller
                    .iter()
                    .find(|s| &s.symbol == sym && &s.class == class)
                    .map(|s| (s, runs))
            });
            match row {
                Some((s, runs)) => {
                    let w = s.total_ns as f64 / runs;
                    cells.push(Cell::num_as(w, fmt_ns(w)));
                    cells.push(Cell::num(s.contended as f64 / runs));
                }
                None => cells.extend([Cell::none(), Cell::none()]),
            }
        }
        t.row(cells);
    }
    let mut out = String::from(
        "<h2>Lock contention by configuration</h2>\n\
         <p class=\"note\">The callers with the most wait in any configuration; n/a: no such wait (or no profile).</p>\n",
    );
    out.push_str(&t.render());
    for (l, p) in labels.iter().zip(&profiles) {
        match p {
            Some((c, _)) => out.push_str(&para("note", &format!("{l}: {}", accounting(c)))),
            None => out.push_str(&para("note", &format!("{l}: no contention profile."))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> ContentionReport {
        let row = |sym: &str, n, total| WaitStat {
            symbol: sym.into(),
            class: "rwsem:R".into(),
            contended: n,
            total_ns: total,
            max_ns: total / 2,
            min_ns: 10,
            ..WaitStat::default()
        };
        ContentionReport {
            by_caller: vec![
                row("madvise_do_behavior+0x23f", 511, 2_860_597_361),
                row("do_exit+0x15e", 370, 1_351_807_381),
            ],
            by_lock: vec![WaitStat {
                address: "ffff88812333d1f8".into(),
                region: "dynamic".into(),
                ..row("", 881, 4_212_404_742)
            }],
            samples: 2782,
            pairs: 1391,
            ..ContentionReport::default()
        }
    }

    #[test]
    fn profile_has_bars_tables_and_accounting() {
        let g = Gathered {
            runs: 1,
            contention: Some(profile()),
            contention_runs: 1,
            ..Gathered::default()
        };
        let s = section(&g);
        assert_eq!(s.matches("<rect class=\"d\"").count(), 2, "{s}");
        assert!(s.contains("madvise_do_behavior+0x23f") && s.contains("(in a heap object)"));
        assert!(s.contains("2.86 s"), "{s}");
        assert!(s.contains("samples: 2782; waits paired: 1391"));
        assert!(section(&Gathered::default()).contains("No contention profile"));
    }

    #[test]
    fn configurations_side_by_side() {
        let with = Gathered {
            contention: Some(profile()),
            contention_runs: 2,
            ..Gathered::default()
        };
        let s = by_config(&["a".into(), "b".into()], &[with, Gathered::default()]);
        assert!(s.contains("1.43 s"), "per run: {s}");
        assert!(s.contains("b: no contention profile"));
        assert_eq!(by_config(&["a".into()], &[Gathered::default()]), "");
    }
}
