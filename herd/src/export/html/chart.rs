//! Small inline SVG charts, written by hand: two axes (linear or
//! logarithmic, ticks at round values), lines, dots and error bars, the
//! legend as HTML under the chart.
//!
//! Hand-written rather than plotters' SVG (which `herd sweep` keeps for
//! its stand-alone files) so that a chart is a few KiB, scales with the
//! page (`viewBox`), carries tooltips (`<title>`), and marks every element
//! that draws data with the class `d`: the browser test fails a chart in
//! which no `.d` element has a size. A chart with nothing to draw is not
//! made at all (its caller says why in words instead).
//!
//! Colours: the Okabe–Ito palette (distinguishable with the common colour
//! vision deficiencies), dashed from the eighth series on.

use std::fmt::Write as _;

use super::markup::esc;

/// Series colours, in order.
pub(crate) const PALETTE: [&str; 7] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];

/// The colour of series `i`.
pub(crate) fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// The dash pattern of series `i` (`None`: solid).
pub(crate) fn dash(i: usize) -> Option<&'static str> {
    match (i / PALETTE.len()) % 3 {
        0 => None,
        1 => Some("6 3"),
        _ => Some("2 3"),
    }
}

/// One axis: its data range, linear or log, and where it lies in pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Axis {
    /// An axis over `lo..hi` (widened when empty; a log axis over whole
    /// decades, from above 0).
    pub(crate) fn new(lo: f64, hi: f64, log: bool) -> Axis {
        let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() && lo <= hi {
            (lo, hi)
        } else {
            (0.0, 1.0)
        };
        if log {
            lo = lo.max(f64::MIN_POSITIVE * 1e10);
            hi = hi.max(lo);
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil());
            if hi <= lo {
                hi = lo * 10.0;
            }
        } else if hi <= lo {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo, hi) = (lo - pad, hi + pad);
        }
        Axis {
            lo,
            hi,
            log,
            from: 0.0,
            to: 1.0,
        }
    }

    /// The data range.
    #[cfg(test)]
    pub(crate) fn range(&self) -> (f64, f64) {
        (self.lo, self.hi)
    }

    fn placed(self, from: f64, to: f64) -> Axis {
        Axis { from, to, ..self }
    }

    fn unit(&self, v: f64) -> Option<f64> {
        if !v.is_finite() {
            return None;
        }
        if self.log {
            if v <= 0.0 {
                return None;
            }
            Some((v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10()))
        } else {
            Some((v - self.lo) / (self.hi - self.lo))
        }
    }

    /// The pixel position of `v` (clamped to the axis); `None` for a value
    /// a log axis cannot show (0 or below) or not a number.
    pub(crate) fn px(&self, v: f64) -> Option<f64> {
        let u = self.unit(v)?.clamp(-0.02, 1.02);
        Some(self.from + u * (self.to - self.from))
    }

    /// Tick values: round numbers (1, 2, 5 times a power of ten) about
    /// five to a linear axis; decades on a log axis, with 2 and 5 between
    /// them when it spans fewer than three.
    pub(crate) fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().round() as i32,
                self.hi.log10().round() as i32,
            );
            let dense = b - a < 3;
            let mut t = Vec::new();
            for e in a..=b {
                let base = 10f64.powi(e);
                t.push(base);
                if dense && e < b {
                    t.extend([2.0 * base, 5.0 * base]);
                }
            }
            return t;
        }
        let (m, e) = nice_step((self.hi - self.lo) / 5.0);
        // v = k * m * 10^e, computed so that 3 x 0.2 is 0.6.
        let at = |k: f64| {
            if e < 0 {
                k * m / 10f64.powi(-e)
            } else {
                k * m * 10f64.powi(e)
            }
        };
        let step = at(1.0);
        let mut t = Vec::new();
        let mut k = (self.lo / step).ceil();
        while at(k) <= self.hi + step * 1e-9 && t.len() < 50 {
            t.push(at(k) + 0.0);
            k += 1.0;
        }
        t
    }
}

/// The round step nearest above `raw`: `(m, e)` for m x 10^e, m 1, 2 or 5.
fn nice_step(raw: f64) -> (f64, i32) {
    if raw.is_nan() || raw <= 0.0 || !raw.is_finite() {
        return (1.0, 0);
    }
    let e = raw.log10().floor() as i32;
    let m = raw / 10f64.powi(e);
    match m {
        m if m <= 1.0 => (1.0, e),
        m if m <= 2.0 => (2.0, e),
        m if m <= 5.0 => (5.0, e),
        _ => (1.0, e + 1),
    }
}

/// Margins around the plotting area, px: left (y tick labels), right, top, bottom.
const MARGIN: (f64, f64, f64, f64) = (66.0, 30.0, 12.0, 44.0);

/// A chart being drawn: the axes placed in a `w` x `h` picture, and the
/// SVG body so far.
#[derive(Debug, Clone)]
pub(crate) struct Plot {
    w: f64,
    h: f64,
    x: Axis,
    y: Axis,
    body: String,
    marks: usize,
}

impl Plot {
    /// A `w` x `h` chart of `x` against `y`.
    pub(crate) fn new(w: f64, h: f64, x: Axis, y: Axis) -> Plot {
        let (l, r, t, b) = MARGIN;
        Plot {
            w,
            h,
            x: x.placed(l, w - r),
            y: y.placed(h - b, t),
            body: String::new(),
            marks: 0,
        }
    }

    /// Grid lines, ticks with their labels (`xf`, `yf`), axis titles.
    pub(crate) fn frame(
        &mut self,
        x_title: &str,
        y_title: &str,
        xf: &dyn Fn(f64) -> String,
        yf: &dyn Fn(f64) -> String,
    ) {
        let (l, r, t, b) = MARGIN;
        let (x0, x1, y0, y1) = (l, self.w - r, self.h - b, t);
        let b = &mut self.body;
        for v in self.x.ticks() {
            if let Some(px) = self.x.px(v) {
                let _ = write!(
                    b,
                    "<line class=\"gr\" x1=\"{px:.1}\" y1=\"{y1}\" x2=\"{px:.1}\" y2=\"{y0}\"/>\
                     <text class=\"tk\" x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                    y0 + 15.0,
                    esc(&xf(v))
                );
            }
        }
        for v in self.y.ticks() {
            if let Some(py) = self.y.px(v) {
                let _ = write!(
                    b,
                    "<line class=\"gr\" x1=\"{x0}\" y1=\"{py:.1}\" x2=\"{x1}\" y2=\"{py:.1}\"/>\
                     <text class=\"tk\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                    x0 - 6.0,
                    py + 4.0,
                    esc(&yf(v))
                );
            }
        }
        let _ = write!(
            b,
            "<line class=\"ax\" x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\"/>\
             <line class=\"ax\" x1=\"{x0}\" y1=\"{y0}\" x2=\"{x0}\" y2=\"{y1}\"/>\
             <text class=\"lb\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text class=\"lb\" transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            (x0 + x1) / 2.0,
            self.h - 8.0,
            esc(x_title),
            (y0 + y1) / 2.0,
            esc(y_title)
        );
    }

    /// A line through `pts` (points a log axis cannot show are skipped);
    /// a dot when they all fall on one place (a line there has no size).
    pub(crate) fn line(&mut self, pts: &[(f64, f64)], series: usize, title: &str) {
        let px: Vec<(f64, f64)> = pts
            .iter()
            .filter_map(|&(x, y)| Some((self.x.px(x)?, self.y.px(y)?)))
            .collect();
        let Some(&(x0, y0)) = px.first() else {
            return;
        };
        let coords: Vec<String> = px.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let dash = dash(series)
            .map(|d| format!(" stroke-dasharray=\"{d}\""))
            .unwrap_or_default();
        let _ = write!(
            self.body,
            "<polyline class=\"d\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash} \
             stroke-linejoin=\"round\" points=\"{}\"><title>{}</title></polyline>",
            color(series),
            coords.join(" "),
            esc(title)
        );
        if coords.iter().all(|c| *c == coords[0]) {
            let _ = write!(
                self.body,
                "<circle class=\"d\" cx=\"{x0:.1}\" cy=\"{y0:.1}\" r=\"3\" fill=\"{}\"><title>{}</title></circle>",
                color(series),
                esc(title)
            );
        }
        self.marks += 1;
    }

    fn dot_svg(&self, x: f64, y: f64, r: f64, series: usize, title: &str) -> String {
        match (self.x.px(x), self.y.px(y)) {
            (Some(px), Some(py)) => format!(
                "<circle class=\"d\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"{r}\" fill=\"{}\">\
                 <title>{}</title></circle>",
                color(series),
                esc(title)
            ),
            _ => String::new(),
        }
    }

    /// A dot at `(x, y)` with a tooltip.
    pub(crate) fn dot(&mut self, x: f64, y: f64, series: usize, title: &str) {
        let s = self.dot_svg(x, y, 3.5, series, title);
        if !s.is_empty() {
            self.body.push_str(&s);
            self.marks += 1;
        }
    }

    /// A vertical error bar at `x` from `lo` to `hi`, with caps.
    pub(crate) fn error_bar(&mut self, x: f64, lo: f64, hi: f64, series: usize, title: &str) {
        let (Some(px), Some(a), Some(b)) = (self.x.px(x), self.y.px(lo), self.y.px(hi)) else {
            return;
        };
        let c = color(series);
        let _ = write!(
            self.body,
            "<path class=\"d\" stroke=\"{c}\" stroke-width=\"1.5\" fill=\"none\" \
             d=\"M{px:.1} {a:.1}V{b:.1}M{:.1} {a:.1}h8M{:.1} {b:.1}h8\"><title>{}</title></path>",
            px - 4.0,
            px - 4.0,
            esc(title)
        );
        self.marks += 1;
    }

    /// Text (escaped) at data point `(x, y)`, `dy` pixels below it.
    pub(crate) fn note(&mut self, x: f64, y: f64, dy: f64, series: usize, text: &str) {
        if let (Some(px), Some(py)) = (self.x.px(x), self.y.px(y)) {
            let _ = write!(
                self.body,
                "<text class=\"tk\" x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
                 fill=\"{}\" style=\"fill:{}\">{}</text>",
                py + dy,
                color(series),
                color(series),
                esc(text)
            );
        }
    }

    /// Data elements drawn so far.
    pub(crate) fn marks(&self) -> usize {
        self.marks
    }

    /// The chart as a `<figure>`: the SVG (`label` for screen readers),
    /// then `caption` (HTML: the legend and a line of text).
    pub(crate) fn finish(self, label: &str, caption: &str) -> String {
        format!(
            "<figure class=\"chart\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" \
             width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{}\">{}</svg>\
             <figcaption>{caption}</figcaption></figure>\n",
            esc(label),
            self.body,
            w = self.w,
            h = self.h
        )
    }
}

/// The legend: one key per series, `(label, series index)`.
pub(crate) fn legend(items: &[(String, usize)]) -> String {
    let mut out = String::new();
    for (label, i) in items {
        let style = match dash(*i) {
            None => format!("background:{}", color(*i)),
            Some(_) => format!(
                "background:repeating-linear-gradient(90deg,{} 0 5px,transparent 5px 8px)",
                color(*i)
            ),
        };
        let _ = write!(
            out,
            "<span class=\"key\"><i style=\"{style}\"></i>{}</span>",
            esc(label)
        );
    }
    out
}

/// A strip of dots for a table cell: one row per series, each value a
/// dot, the series' mean a tick, every row on one scale from the
/// smallest value to the largest (given in the tooltip: the cell has no
/// axis). `labels[i]` names series `i`.
pub(crate) fn strip(labels: &[String], series: &[Vec<f64>], unit: &str) -> String {
    let all = series.iter().flatten().copied().filter(|v| v.is_finite());
    let (lo, hi) = all.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return String::new();
    }
    let (w, row) = (170.0, 11.0);
    let x = Axis::new(lo, hi, false).placed(6.0, w - 6.0);
    let mut body = String::new();
    for (i, values) in series.iter().enumerate() {
        let y = 6.0 + row * i as f64;
        let label = labels.get(i).map(String::as_str).unwrap_or("");
        let mut tip: Vec<String> = values
            .iter()
            .map(|v| crate::format::fmt_value(*v))
            .collect();
        tip.truncate(40);
        let _ = write!(
            body,
            "<g class=\"d\" fill=\"{}\" fill-opacity=\"0.7\"><title>{}: {}</title>",
            color(i),
            esc(label),
            esc(&tip.join(", "))
        );
        for v in values {
            if let Some(px) = x.px(*v) {
                let _ = write!(body, "<circle cx=\"{px:.1}\" cy=\"{y:.1}\" r=\"2.6\"/>");
            }
        }
        let n = values.len().max(1) as f64;
        if let Some(px) = x.px(values.iter().sum::<f64>() / n) {
            let _ = write!(
                body,
                "<path d=\"M{px:.1} {:.1}v9\" stroke=\"{}\" stroke-width=\"2\"/>",
                y - 4.5,
                color(i)
            );
        }
        body.push_str("</g>");
    }
    let h = 2.0 + row * series.len() as f64;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\">\
         <title>each run a dot, the mean a tick; scale {} to {} {}</title>{body}</svg>",
        esc(&crate::format::fmt_value(lo)),
        esc(&crate::format::fmt_value(hi)),
        esc(unit)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axis_spans_whole_decades() {
        let a = Axis::new(340.0, 41_000_000.0, true);
        assert_eq!(a.range(), (100.0, 100_000_000.0));
        assert_eq!(a.ticks().len(), 7);
        let narrow = Axis::new(120.0, 800.0, true);
        assert_eq!(narrow.ticks(), [100.0, 200.0, 500.0, 1000.0]);
    }

    #[test]
    fn linear_ticks_are_round() {
        assert_eq!(
            Axis::new(0.0, 1.0, false).ticks(),
            [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
        );
        assert_eq!(Axis::new(0.0, 37.0, false).ticks(), [0.0, 10.0, 20.0, 30.0]);
        // Degenerate and hostile ranges do not loop or divide by zero.
        assert!(!Axis::new(5.0, 5.0, false).ticks().is_empty());
        assert!(!Axis::new(f64::NAN, 1.0, false).ticks().is_empty());
        assert!(!Axis::new(0.0, 0.0, true).ticks().is_empty());
        assert!(Axis::new(0.0, 1e300, false).ticks().len() <= 50);
    }

    #[test]
    fn a_plot_marks_its_data_and_skips_what_log_cannot_show() {
        let mut p = Plot::new(
            400.0,
            240.0,
            Axis::new(1.0, 1000.0, true),
            Axis::new(0.0, 1.0, false),
        );
        p.frame("x", "y", &|v| format!("{v}"), &|v| format!("{v}"));
        p.line(&[(0.0, 0.0), (-5.0, 0.5)], 0, "nothing drawable");
        assert_eq!(p.marks(), 0);
        p.line(&[(-1.0, 0.5), (5.0, 0.5), (5.0, 0.5)], 0, "one place");
        assert_eq!(p.marks(), 1);
        p.line(&[(1.0, 0.0), (100.0, 1.0)], 1, "a <b>");
        p.error_bar(10.0, 0.2, 0.4, 1, "bar");
        p.dot(10.0, 0.3, 1, "dot");
        assert_eq!(p.marks(), 4);
        let svg = p.finish("label", "cap");
        assert_eq!(
            svg.matches("class=\"d\"").count(),
            5,
            "the lone point's line and dot"
        );
        assert!(svg.contains("a &lt;b&gt;"));
        assert!(svg.contains("viewBox=\"0 0 400 240\""));
    }

    #[test]
    fn strips_put_every_run_on_one_scale() {
        let s = strip(&["a".into(), "b".into()], &[vec![1.0, 2.0], vec![3.0]], "s");
        assert_eq!(s.matches("<circle").count(), 3);
        assert_eq!(s.matches("class=\"d\"").count(), 2);
        assert!(s.contains("scale 1 to 3 s"));
        assert_eq!(strip(&[], &[vec![]], "s"), "");
    }
}
