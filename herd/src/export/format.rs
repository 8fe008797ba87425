//! The text shapes herd builds on its one value rule ([`fmt_value`],
//! `crate::format`): `mean
//! ±%stddev`, `%change` with its significance mark, aligned grids and
//! Markdown cells.
//!
//! A table crate (comfy-table, tabled) was weighed against [`render_grid`]:
//! their borderless styles pad every cell on both sides, which would
//! change the layout of every table herd prints for thirty lines saved.

use std::fmt::Write as _;

pub use crate::format::fmt_value;
use crate::result::Better;
use crate::stats::{Change, Summary, Verdict};

/// `mean ±%stddev` (only the mean for a single run; `n/a` without runs).
pub fn summary_text(summary: Option<&Summary>) -> String {
    match summary {
        None => "n/a".to_string(),
        Some(s) if s.n < 2 => fmt_value(s.mean),
        Some(s) => format!("{} ±{:.1}%", fmt_value(s.mean), s.pct_stddev()),
    }
}

/// `%change` with its significance mark (`+12.3% **R`), and with `verdict`
/// the word better/worse/changed; empty without a change.
pub fn change_text(change: Option<&Change>, verdict: bool) -> String {
    let Some(c) = change else {
        return String::new();
    };
    let mut s = match c.pct {
        Some(p) => format!("{p:+.1}%"),
        None => "n/a".to_string(),
    };
    let mark = c.mark();
    if !mark.is_empty() {
        s.push(' ');
        s.push_str(&mark);
    }
    if verdict {
        match c.verdict {
            Verdict::Same => {}
            v => {
                s.push(' ');
                s.push_str(verdict_name(v));
            }
        }
    }
    s
}

pub fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Pads a grid of cells into aligned columns two spaces apart: the first
/// `left` left-aligned (names), the rest right-aligned (numbers).
pub fn render_grid(grid: &[Vec<String>], left: usize) -> String {
    let cols = grid.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: usize| {
        grid.iter()
            .filter_map(|r| r.get(c))
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..cols).map(width).collect();
    let mut out = String::new();
    for row in grid {
        let mut line = String::new();
        for (c, w) in widths.iter().enumerate() {
            let cell = row.get(c).map(String::as_str).unwrap_or("");
            if c > 0 {
                line.push_str("  ");
            }
            if c < left {
                let _ = write!(line, "{cell:<w$}");
            } else {
                let _ = write!(line, "{cell:>w$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn better_name(b: Better) -> &'static str {
    match b {
        Better::Lower => "lower",
        Better::Higher => "higher",
        Better::Neither => "neither",
    }
}

pub fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Better => "better",
        Verdict::Worse => "worse",
        Verdict::Changed => "changed",
        Verdict::Same => "same",
    }
}
