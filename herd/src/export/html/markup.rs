//! The HTML the report is made of: escaping (every string from a result
//! goes through [`esc`]), tables that read without JavaScript and sort
//! with it (`style.rs`'s script: numeric columns sort by `data-v`), status
//! badges and the number formats of the page.

use std::fmt::Write as _;

use crate::format::fmt_value;

/// `s` escaped for HTML text and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One table cell: its HTML and, for numbers, the value it sorts by.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cell {
    html: String,
    sort: Option<f64>,
    class: &'static str,
}

impl Cell {
    /// Text (escaped).
    pub(crate) fn text(s: &str) -> Cell {
        Cell {
            html: esc(s),
            ..Cell::default()
        }
    }
    /// HTML as is (built by this module's callers from escaped parts).
    pub(crate) fn html(h: String) -> Cell {
        Cell {
            html: h,
            ..Cell::default()
        }
    }
    /// A number printed by herd's one rule, right-aligned, sorting by value.
    pub(crate) fn num(v: f64) -> Cell {
        Cell::num_as(v, fmt_value(v))
    }
    /// A number shown as `text` (escaped), sorting by `v`.
    pub(crate) fn num_as(v: f64, text: String) -> Cell {
        Cell {
            html: esc(&text),
            sort: v.is_finite().then_some(v),
            class: "n",
        }
    }
    /// No value (sorts last).
    pub(crate) fn none() -> Cell {
        Cell {
            html: "<span class=\"na\">n/a</span>".into(),
            sort: None,
            class: "n",
        }
    }
    /// The same cell with a CSS class (`good`, `bad`, `n`, ...).
    pub(crate) fn class(mut self, class: &'static str) -> Cell {
        self.class = class;
        self
    }
}

/// A table: a header row and rows of cells; sortable by clicking a
/// header when the page's script runs, plain HTML otherwise.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    groups: Vec<(String, usize)>,
    head: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these column headings (text).
    pub(crate) fn new<S: AsRef<str>>(head: &[S]) -> Table {
        Table {
            groups: Vec::new(),
            head: head.iter().map(|h| esc(h.as_ref())).collect(),
            rows: Vec::new(),
        }
    }
    /// A header row above the headings: `(text, columns it spans)`.
    pub(crate) fn groups(mut self, groups: Vec<(String, usize)>) -> Table {
        self.groups = groups;
        self
    }
    /// Appends a row.
    pub(crate) fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }
    /// The table's HTML.
    pub(crate) fn render(&self) -> String {
        let mut out = String::from("<div class=\"tw\"><table class=\"sortable\"><thead>");
        if !self.groups.is_empty() {
            out.push_str("<tr class=\"g\">");
            for (g, span) in &self.groups {
                let _ = write!(out, "<th colspan=\"{span}\">{}</th>", esc(g));
            }
            out.push_str("</tr>");
        }
        out.push_str("<tr>");
        for h in &self.head {
            let _ = write!(out, "<th>{h}</th>");
        }
        out.push_str("</tr></thead><tbody>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for c in row {
                out.push_str("<td");
                if !c.class.is_empty() {
                    let _ = write!(out, " class=\"{}\"", c.class);
                }
                if let Some(v) = c.sort {
                    let _ = write!(out, " data-v=\"{v}\"");
                }
                let _ = write!(out, ">{}</td>", c.html);
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table></div>\n");
        out
    }
}

/// How a part of the page came out: the badge's colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Status {
    /// Every check passed.
    Ok,
    /// Something to know (interrupted, creations failed, data missing).
    Warn,
    /// A check failed: the figures are not to be trusted.
    Bad,
}

/// A status badge with `text` (escaped).
pub(crate) fn badge(status: Status, text: &str) -> String {
    let class = match status {
        Status::Ok => "ok",
        Status::Warn => "warn",
        Status::Bad => "bad",
    };
    format!("<span class=\"badge {class}\">{}</span>", esc(text))
}

/// A duration in nanoseconds as people read it: `850 ns`, `3.2 µs`,
/// `41 ms`, `1.5 s` (two or three significant digits).
pub(crate) fn fmt_ns(ns: f64) -> String {
    let (v, unit) = match ns.abs() {
        x if x < 1e3 => (ns, "ns"),
        x if x < 1e6 => (ns / 1e3, "µs"),
        x if x < 1e9 => (ns / 1e6, "ms"),
        _ => (ns / 1e9, "s"),
    };
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{v:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s} {unit}")
}

/// A command line as one shell-quoted string (`herd storm --waves 20`).
pub(crate) fn shell_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            shlex::try_quote(w)
                .map(|q| q.into_owned())
                .unwrap_or_else(|_| w.replace('\0', ""))
        })
        .collect::<Vec<String>>()
        .join(" ")
}

/// A `<details>` block with `summary` (escaped) around `body` (HTML).
pub(crate) fn details(summary: &str, body: &str, open: bool) -> String {
    format!(
        "<details{}><summary>{}</summary>{body}</details>\n",
        if open { " open" } else { "" },
        esc(summary)
    )
}

/// A paragraph of text (escaped) with a CSS class.
pub(crate) fn para(class: &str, text: &str) -> String {
    format!("<p class=\"{class}\">{}</p>\n", esc(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_everything_a_result_can_hold() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
    }

    #[test]
    fn tables_carry_sort_values() {
        let mut t = Table::new(&["metric", "value"]);
        t.row(vec![Cell::text("a<b"), Cell::num(1234.5)]);
        t.row(vec![Cell::text("c"), Cell::none()]);
        let h = t.render();
        assert!(h.contains("<td>a&lt;b</td>"), "{h}");
        assert!(
            h.contains("<td class=\"n\" data-v=\"1234.5\">1234</td>"),
            "{h}"
        );
        assert!(h.contains("n/a"));
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_ns(850.0), "850 ns");
        assert_eq!(fmt_ns(3_200.0), "3.2 µs");
        assert_eq!(fmt_ns(41_000_000.0), "41 ms");
        assert_eq!(fmt_ns(1.5e9), "1.5 s");
        assert_eq!(fmt_ns(123_456.0), "123 µs");
    }

    #[test]
    fn command_lines_are_shell_quoted() {
        let w: Vec<String> = ["herd", "compare", "--config", "--cleanup exitq"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(shell_line(&w), "herd compare --config '--cleanup exitq'");
    }
}
