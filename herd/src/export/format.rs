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
        Some(p) => pct_text(p),
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

/// A `%change`: one decimal (`+12.3%`), and two significant digits for a
/// change under 0.05% (`+0.012%`, `-2.0e-5%`), which one decimal would show
/// as `+0.0%` beside stars that call it significant.
pub fn pct_text(p: f64) -> String {
    if p == 0.0 || p.abs() >= 0.05 {
        format!("{p:+.1}%")
    } else if p.abs() >= 0.001 {
        let decimals = (1 - p.abs().log10().floor() as i32).max(2) as usize;
        format!("{p:+.decimals$}%")
    } else {
        format!("{p:+.1e}%")
    }
}

/// Text for a Markdown table cell: `|` escaped (it would end the cell),
/// line breaks as spaces (one would end the row).
pub fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// `s` as a Markdown code span in a table cell: fenced by more backticks
/// than its longest run of them (a label or a file name with a backtick
/// would otherwise end the span early), padded with a space when it
/// starts or ends with one, `|` and line breaks as in [`md_escape`].
pub fn md_code(s: &str) -> String {
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{}{pad}{fence}", md_escape(s))
}

/// Pads a grid of cells into aligned columns two spaces apart: the first
/// `left` left-aligned (names), the rest right-aligned (numbers). A line
/// break in a cell (a label, a file name) is printed as a space: one row,
/// one line.
pub fn render_grid(grid: &[Vec<String>], left: usize) -> String {
    let flat: Vec<Vec<String>> = grid
        .iter()
        .map(|r| r.iter().map(|c| c.replace(['\n', '\r'], " ")).collect())
        .collect();
    let grid = flat.as_slice();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A label or a file name (diff's `A: FILE`) with a backtick, a `|` or
    /// a line break keeps its Markdown cell whole. `| `{label}` |` used to
    /// end the code span at the backtick and the row at the line break.
    #[test]
    fn markdown_cells_hold_any_text() {
        assert_eq!(md_code("cleanup=exitq"), "`cleanup=exitq`");
        assert_eq!(md_code("A: a`b.json"), "``A: a`b.json``");
        assert_eq!(md_code("`x``"), "``` `x`` ```");
        assert_eq!(md_code("a|b"), "`a\\|b`");
        assert_eq!(md_code("a\nb"), "`a b`");
        assert_eq!(md_escape("x\r\ny|"), "x  y\\|");
    }

    /// A deterministic change of 0.01% (2000 vs 2000.2 threads in every
    /// run: zero variance, p = 0) printed as "+0.0% ***": stars on a zero.
    #[test]
    fn small_changes_keep_their_digits() {
        assert_eq!(pct_text(12.34), "+12.3%");
        assert_eq!(pct_text(-0.05), "-0.1%");
        assert_eq!(pct_text(0.0), "+0.0%");
        assert_eq!(pct_text(0.01), "+0.010%");
        assert_eq!(pct_text(-0.0123), "-0.012%");
        assert_eq!(pct_text(0.0049), "+0.0049%");
        assert_eq!(pct_text(2.0e-5), "+2.0e-5%");
        let a = Summary::of(&[2000.0, 2000.0]).unwrap();
        let b = Summary::of(&[2000.2, 2000.2]).unwrap();
        let c = Change::between(&a, &b, crate::result::Better::Neither, 0.05);
        assert_eq!(change_text(Some(&c), true), "+0.010% ***");
    }

    /// A label with a line break stays on its row (it used to split the
    /// row in two, shifting every column after it).
    #[test]
    fn grid_rows_stay_one_line() {
        let grid = vec![
            vec!["metric".to_string(), "B: two\nlines.json".to_string()],
            vec!["wall_s".to_string(), "1.5".to_string()],
        ];
        let t = render_grid(&grid, 1);
        assert_eq!(t, "metric  B: two lines.json\nwall_s                1.5\n");
    }

    /// A spread around a mean of 0 prints as such, not as "±0.0%".
    #[test]
    fn summary_text_around_a_zero_mean() {
        let s = Summary::of(&[-1.0, 1.0]).unwrap();
        assert_eq!(summary_text(Some(&s)), "0 ±inf%");
        let flat = Summary::of(&[0.0, 0.0]).unwrap();
        assert_eq!(summary_text(Some(&flat)), "0 ±0.0%");
    }
}
