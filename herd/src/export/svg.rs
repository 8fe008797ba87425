//! SVG line charts for `herd sweep` (plotters): one chart per metric, one
//! line per configuration, the swept flag on the x axis, the mean on the y
//! axis and a vertical bar from the smallest to the largest run at every
//! point (so the reader sees the spread, not just the mean).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// One point of a series: x, mean, smallest and largest run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The swept flag's value.
    pub x: f64,
    /// Mean over the runs.
    pub mean: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
}

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label (the configuration).
    pub label: String,
    /// Points in increasing x.
    pub points: Vec<Point>,
}

/// What a chart shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title (e.g. the metric name and the scenario).
    pub title: String,
    /// x axis label (the swept flag).
    pub x_label: String,
    /// y axis label (metric and unit).
    pub y_label: String,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// The lines.
    pub series: Vec<Series>,
}

/// Chart size in pixels.
const SIZE: (u32, u32) = (900, 560);

fn bounds(chart: &Chart) -> Option<((f64, f64), (f64, f64))> {
    let pts = chart.series.iter().flat_map(|s| &s.points);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for p in pts {
        x0 = x0.min(p.x);
        x1 = x1.max(p.x);
        y0 = y0.min(p.min);
        y1 = y1.max(p.max);
    }
    if x0 > x1 {
        return None;
    }
    if x0 == x1 {
        (x0, x1) = (x0 - 1.0, x1 + 1.0);
    }
    // Start the y axis at 0 for non-negative data: ratios stay honest.
    let y0 = if y0 >= 0.0 { 0.0 } else { y0 };
    // All values equal: a span of their tenth (1 when they are all 0),
    // not of f64::EPSILON, whose axis labelled 0 to 2.2e-16.
    let flat = y1 == y0;
    let pad = if flat {
        if y1 == 0.0 {
            1.0
        } else {
            y1.abs() * 0.1
        }
    } else {
        ((y1 - y0) * 0.08).max(y1.abs() * 0.01)
    };
    // A flat negative line sits in the middle, not on the bottom edge.
    let y0 = if flat && y0 < 0.0 { y0 - pad } else { y0 };
    Some(((x0, x1), (y0, y1 + pad)))
}

macro_rules! draw_chart {
    ($root:expr, $chart:expr, $xrange:expr, $yrange:expr) => {{
        let chart: &Chart = $chart;
        let mut ctx = ChartBuilder::on(&$root)
            .caption(&chart.title, ("sans-serif", 22))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(78)
            .build_cartesian_2d($xrange, $yrange)
            .map_err(|e| anyhow!("chart: {e}"))?;
        ctx.configure_mesh()
            .x_desc(chart.x_label.as_str())
            .y_desc(chart.y_label.as_str())
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .draw()
            .map_err(|e| anyhow!("chart mesh: {e}"))?;
        for (i, s) in chart.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            ctx.draw_series(LineSeries::new(
                s.points.iter().map(|p| (p.x, p.mean)),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow!("chart line: {e}"))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
            ctx.draw_series(
                s.points
                    .iter()
                    .map(|p| ErrorBar::new_vertical(p.x, p.min, p.mean, p.max, color.filled(), 8)),
            )
            .map_err(|e| anyhow!("chart error bars: {e}"))?;
            ctx.draw_series(
                s.points
                    .iter()
                    .map(|p| Circle::new((p.x, p.mean), 3, color.filled())),
            )
            .map_err(|e| anyhow!("chart points: {e}"))?;
        }
        ctx.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| anyhow!("chart legend: {e}"))?;
    }};
}

/// An axis tick label: about four significant digits, no trailing zeros.
fn tick(v: f64) -> String {
    let s = crate::export::format::fmt_value(v);
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Renders `chart` as an SVG document.
pub fn render(chart: &Chart) -> Result<String> {
    let ((x0, x1), (y0, y1)) =
        bounds(chart).ok_or_else(|| anyhow!("chart `{}` has no points", chart.title))?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("chart: {e}"))?;
        if chart.log_x && x0 > 0.0 {
            draw_chart!(root, chart, (x0..x1).log_scale(), y0..y1);
        } else {
            draw_chart!(root, chart, x0..x1, y0..y1);
        }
        root.present().map_err(|e| anyhow!("chart: {e}"))?;
    }
    Ok(svg)
}

/// Renders `chart` into the file `path`.
pub fn write(chart: &Chart, path: &Path) -> Result<()> {
    let svg = render(chart)?;
    super::write_file(path, &svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(log_x: bool) -> Chart {
        let pts = |k: f64| {
            [10.0, 100.0, 1000.0]
                .iter()
                .map(|&x| Point {
                    x,
                    mean: k * x,
                    min: k * x * 0.9,
                    max: k * x * 1.1,
                })
                .collect()
        };
        Chart {
            title: "futex_per_exit".into(),
            x_label: "--per-wave".into(),
            y_label: "futex_per_exit (calls)".into(),
            log_x,
            series: vec![
                Series {
                    label: "cleanup=locked".into(),
                    points: pts(2.0),
                },
                Series {
                    label: "cleanup=exitq".into(),
                    points: pts(0.5),
                },
            ],
        }
    }

    #[test]
    fn svg_has_lines_bars_and_legend() {
        for log_x in [false, true] {
            let svg = render(&chart(log_x)).unwrap();
            assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
            assert!(svg.contains("cleanup=locked") && svg.contains("cleanup=exitq"));
            assert!(svg.contains("futex_per_exit (calls)") && svg.contains("--per-wave"));
            // Two lines (one polyline each, plus the legend samples).
            assert!(svg.matches("<polyline").count() >= 2, "log_x={log_x}");
            // Six points drawn as circles.
            assert!(svg.matches("<circle").count() >= 6, "log_x={log_x}");
        }
    }

    #[test]
    fn tick_labels() {
        assert_eq!(tick(10.0), "10");
        assert_eq!(tick(500.0), "500");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(12345.0), "12345");
    }

    #[test]
    fn refuses_empty_chart() {
        let mut c = chart(false);
        c.series.clear();
        assert!(render(&c).is_err());
    }

    /// A metric 0 at every point (no failed creations, no contention):
    /// a flat line on an axis of round ticks. The axis used to span 0 to
    /// f64::EPSILON, its ticks labelled like 4.441e-17.
    #[test]
    fn all_equal_values_get_a_readable_axis() {
        for v in [0.0, 7.0, -3.0] {
            let mut c = chart(false);
            for s in &mut c.series {
                for p in &mut s.points {
                    (p.mean, p.min, p.max) = (v, v, v);
                }
            }
            let (_, (y0, y1)) = bounds(&c).unwrap();
            assert!(y0 <= v && v < y1, "{v}: {y0}..{y1}");
            assert!(y1 - y0 > 0.099 * v.abs().max(1.0), "{v}: {y0}..{y1}");
            let svg = render(&c).unwrap();
            assert!(!svg.contains("e-1"), "{v}: exponent ticks");
        }
    }

    #[test]
    fn bounds_start_at_zero_and_widen_single_x() {
        let mut c = chart(false);
        c.series.truncate(1);
        c.series[0].points.truncate(1);
        let ((x0, x1), (y0, y1)) = bounds(&c).unwrap();
        assert_eq!((x0, x1), (9.0, 11.0));
        assert_eq!(y0, 0.0);
        assert!(y1 > 22.0);
    }
}
