//! Per-CPU counters as heat maps, one per counter, CPUs grouped by NUMA
//! node, with the imbalance in numbers beside them.
//!
//! A map is rows of 32 cells, a block of rows per node (labelled with the
//! node and its CPUs), so 512 CPUs in 4 nodes are four blocks of 4 rows:
//! a CPU that took all the futex calls, or a node that did, stands out.
//! Colour is the CPU's value over the counter's largest (light yellow to
//! dark red); a CPU with nothing is grey, so "none" is never read as
//! "little". Each cell's tooltip gives the CPU and its value. Above
//! [`MAX_CELLS`] CPUs (a 10,000-CPU host) a cell is a run of consecutive
//! CPUs of one node and shows their largest value (the tooltip names the
//! run, its largest value and its sum), so the page stays a few hundred
//! KiB whatever the host. The numbers (total, min, median, max,
//! imbalance = max/mean, busiest CPUs) are perf's own per-CPU summary
//! ([`crate::perf::percpu::Spread`]), the same the terminal prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::gather::{cpu_values, CpuSeries, Gathered, Placement};
use super::markup::{esc, para, Cell, Table};
use crate::format::fmt_value;
use crate::host::{format_cpu_list, NumaNode};
use crate::perf::percpu::Spread;

/// Most cells one map draws; above, a cell stands for several CPUs.
pub(crate) const MAX_CELLS: usize = 1024;
/// Most NUMA nodes drawn as blocks of their own (and given a column in
/// the node table); a host with more is drawn as one block.
const MAX_NODE_BLOCKS: usize = 64;
/// Cells per row.
const COLS: usize = 32;
/// Cell pitch and size, px.
const PITCH: usize = 13;
const CELL: usize = 12;
/// Width of the node labels, px.
const LABEL_W: usize = 74;

/// The colour ramp (ColorBrewer YlOrRd), from small to large.
const RAMP: [[u8; 3]; 9] = [
    [255, 255, 204],
    [255, 237, 160],
    [254, 217, 118],
    [254, 178, 76],
    [253, 141, 60],
    [252, 78, 42],
    [227, 26, 28],
    [189, 0, 38],
    [128, 0, 38],
];
/// A CPU with nothing.
const ZERO: &str = "#e6e9ed";

/// The colour of `f` in [0, 1].
fn ramp(f: f64) -> String {
    let f = if f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let pos = f * (RAMP.len() - 1) as f64;
    let i = (pos.floor() as usize).min(RAMP.len() - 2);
    let t = pos - i as f64;
    let c: Vec<u8> = (0..3)
        .map(|k| (f64::from(RAMP[i][k]) * (1.0 - t) + f64::from(RAMP[i + 1][k]) * t).round() as u8)
        .collect();
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

/// The CPUs of `values` grouped by node, `(label, cpus)` by node id;
/// CPUs no node lists go last, as `other`.
fn by_node(values: &[(usize, f64)], nodes: &[NumaNode]) -> Vec<(String, Vec<usize>)> {
    let mut of = BTreeMap::new();
    for n in nodes {
        for &c in &n.cpus {
            of.entry(c).or_insert(n.id);
        }
    }
    let mut groups: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
    for &(cpu, _) in values {
        groups.entry(of.get(&cpu).copied()).or_default().push(cpu);
    }
    let many = nodes.len() > 1 || groups.len() > 1;
    let mut out: Vec<(String, Vec<usize>)> = groups
        .iter()
        .filter_map(|(n, cpus)| Some((format!("node {}", (*n)?), cpus.clone())))
        .collect();
    if let Some(other) = groups.get(&None) {
        out.push((
            if many { "other" } else { "CPUs" }.to_string(),
            other.clone(),
        ));
    }
    out
}

/// One heat map of `values` (`(cpu, value)`), titled `title` (`unit`).
/// `None` when every value is 0 or there are none.
pub(crate) fn heatmap(
    title: &str,
    unit: &str,
    values: &[(usize, f64)],
    nodes: &[NumaNode],
) -> Option<String> {
    let max = values.iter().map(|v| v.1).fold(0.0, f64::max);
    if max.is_nan() || max <= 0.0 {
        return None;
    }
    let per_cell = values.len().div_ceil(MAX_CELLS).max(1);
    let value: BTreeMap<usize, f64> = values.iter().copied().collect();
    let mut groups = by_node(values, nodes);
    let mut cell_note = String::new();
    if groups.len() > MAX_NODE_BLOCKS {
        // A block per node would make the map taller than it is readable.
        cell_note = format!(" {} nodes: drawn as one block of CPUs.", groups.len());
        let mut all: Vec<usize> = groups.drain(..).flat_map(|g| g.1).collect();
        all.sort_unstable();
        groups = vec![("CPUs".to_string(), all)];
    }
    let mut body = String::new();
    let mut y = 0;
    for (label, cpus) in &groups {
        let cells: Vec<&[usize]> = cpus.chunks(per_cell).collect();
        let rows = cells.len().div_ceil(COLS);
        let _ = write!(
            body,
            "<text class=\"lb\" x=\"0\" y=\"{}\">{}</text><text class=\"tk\" x=\"0\" y=\"{}\">{}</text>",
            y + 10,
            esc(label),
            y + 10 + PITCH.max(if rows > 1 { 14 } else { 12 }),
            esc(&short_list(cpus))
        );
        body.push_str("<g class=\"d\">");
        for (i, run) in cells.iter().enumerate() {
            let vals: Vec<f64> = run
                .iter()
                .map(|c| value.get(c).copied().unwrap_or(0.0))
                .collect();
            let top = vals.iter().copied().fold(0.0, f64::max);
            let fill = if top > 0.0 {
                ramp(top / max)
            } else {
                ZERO.to_string()
            };
            let tip = if run.len() == 1 {
                format!("cpu{}: {}", run[0], fmt_value(top))
            } else {
                let sum: f64 = vals.iter().sum();
                format!(
                    "cpus {}: largest {}, sum {}",
                    format_cpu_list(run),
                    fmt_value(top),
                    fmt_value(sum)
                )
            };
            let _ = write!(
                body,
                "<rect x=\"{}\" y=\"{}\" width=\"{CELL}\" height=\"{CELL}\" fill=\"{fill}\"><title>{tip}</title></rect>",
                LABEL_W + (i % COLS) * PITCH,
                y + (i / COLS) * PITCH
            );
        }
        body.push_str("</g>");
        y += rows.max(2) * PITCH + 8;
    }
    let cols = groups
        .iter()
        .map(|(_, c)| c.len().div_ceil(per_cell))
        .max()
        .unwrap_or(1)
        .min(COLS);
    let w = LABEL_W + cols * PITCH + 4;
    let scale = legend_svg(max, unit);
    if per_cell > 1 {
        let of_one = if groups.len() > 1 { " of one node" } else { "" };
        cell_note.push_str(&format!(
            " Each cell is {per_cell} consecutive CPUs{of_one}, coloured by the largest."
        ));
    }
    let summary = Spread::of(&cpu_values(values), 1)
        .map(|s| {
            let busiest = s
                .top
                .first()
                .map(|(c, v)| format!(", busiest cpu{c} ({})", fmt_value(*v)))
                .unwrap_or_default();
            let imb = s
                .imbalance
                .map(|i| format!(", imbalance {i:.2}"))
                .unwrap_or_default();
            format!("total {}{imb}{busiest}", fmt_value(s.total))
        })
        .unwrap_or_default();
    Some(format!(
        "<figure class=\"chart\"><div class=\"mh\"><b>{t}</b> ({u}): {}</div>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {y}\" width=\"{w}\" \
         height=\"{y}\" role=\"img\" aria-label=\"{t} per CPU\">{body}</svg>{scale}\
         <figcaption>Per CPU; grey: none.{cell_note}</figcaption></figure>\n",
        esc(&summary),
        t = esc(title),
        u = esc(unit),
    ))
}

/// A CPU list, cut short when long.
fn short_list(cpus: &[usize]) -> String {
    let s = format_cpu_list(cpus);
    if s.len() > 12 {
        format!("{} CPUs", cpus.len())
    } else {
        s
    }
}

/// The colour scale under a map: grey for none, then 0 to `max` in 20 steps.
fn legend_svg(max: f64, unit: &str) -> String {
    let mut steps = String::new();
    for i in 0..20 {
        let _ = write!(
            steps,
            "<rect x=\"{}\" y=\"2\" width=\"10\" height=\"12\" fill=\"{}\"/>",
            36 + i * 10,
            ramp((f64::from(i) + 0.5) / 20.0)
        );
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 340 18\" width=\"340\" height=\"18\" \
         aria-hidden=\"true\"><rect x=\"0\" y=\"2\" width=\"12\" height=\"12\" fill=\"{ZERO}\"/>\
         <text class=\"tk\" x=\"16\" y=\"12\">0</text>{steps}<text class=\"tk\" x=\"240\" y=\"12\">{} {}</text></svg>",
        esc(&fmt_value(max)),
        esc(unit)
    )
}

/// A counter's per-CPU values: `(name, unit, (cpu, value) pairs)`.
type Named<'a> = (&'a str, &'a str, &'a [(usize, f64)]);

/// The numbers beside the maps: one row per counter.
fn spread_table(series: &[Named<'_>]) -> String {
    let mut t = Table::new(&[
        "counter",
        "unit",
        "total",
        "CPUs",
        "min",
        "median",
        "max",
        "imbalance",
        "CPUs > 0",
        "busiest CPUs",
    ]);
    for (name, unit, values) in series {
        let Some(s) = Spread::of(&cpu_values(values), 3) else {
            continue;
        };
        let busiest: Vec<String> = s
            .top
            .iter()
            .map(|(c, v)| format!("cpu{c}: {}", fmt_value(*v)))
            .collect();
        t.row(vec![
            Cell::text(name),
            Cell::text(unit),
            Cell::num(s.total),
            Cell::num(s.cpus as f64),
            Cell::num(s.min),
            Cell::num(s.median),
            Cell::num(s.max),
            s.imbalance
                .map_or_else(Cell::none, |i| Cell::num_as(i, format!("{i:.2}"))),
            Cell::num(s.nonzero as f64),
            Cell::text(&busiest.join(", ")),
        ]);
    }
    t.render()
}

/// Per-node totals, one row per counter, a column per node, and the
/// node imbalance (largest node over the mean node).
fn node_table(series: &[Named<'_>], nodes: &[NumaNode]) -> String {
    let mut head = vec!["counter".to_string()];
    head.extend(
        nodes
            .iter()
            .map(|n| format!("node {} ({} CPUs)", n.id, n.cpus.len())),
    );
    head.push("node imbalance".into());
    let mut t = Table::new(&head);
    for (name, _, values) in series {
        let v: BTreeMap<usize, f64> = values.iter().copied().collect();
        let sums: Vec<f64> = nodes
            .iter()
            .map(|n| n.cpus.iter().filter_map(|c| v.get(c)).sum())
            .collect();
        let total: f64 = sums.iter().sum();
        let mut cells = vec![Cell::text(name)];
        for &s in &sums {
            let share = if total > 0.0 { 100.0 * s / total } else { 0.0 };
            cells.push(Cell::num_as(s, format!("{} ({share:.0}%)", fmt_value(s))));
        }
        let mean = total / sums.len().max(1) as f64;
        let max = sums.iter().copied().fold(0.0, f64::max);
        cells.push(if mean > 0.0 {
            Cell::num_as(max / mean, format!("{:.2}", max / mean))
        } else {
            Cell::none()
        });
        t.row(cells);
    }
    t.render()
}

/// Maps and tables of `series`, under `heading` (HTML id `id`).
fn block(series: &[Named<'_>], nodes: &[NumaNode]) -> String {
    let mut out = String::from("<div class=\"grid\">");
    for (name, unit, values) in series {
        if let Some(m) = heatmap(name, unit, values, nodes) {
            out.push_str(&m);
        }
    }
    out.push_str("</div>\n");
    out.push_str(&spread_table(series));
    if nodes.len() > MAX_NODE_BLOCKS {
        out.push_str(&para(
            "note",
            &format!(
                "{} NUMA nodes: per-node totals are in the JSON (perf.counters[].per_node).",
                nodes.len()
            ),
        ));
    } else if nodes.len() > 1 {
        out.push_str(&node_table(series, nodes));
    }
    out
}

/// The per-CPU section: counters, then the storm's placement.
pub(crate) fn section(g: &Gathered) -> String {
    let mut out = String::from("<h2>Per-CPU counters</h2>\n");
    if g.per_cpu.is_empty() {
        out.push_str(&para(
            "note",
            "No per-CPU counter values in this result (no perf counters, or per-thread inherited \
             counters, which have no CPU).",
        ));
    } else {
        let mut words = String::from(
            "Imbalance is the busiest CPU's value over the mean per CPU (1.00: even).",
        );
        if let Some(s) = &g.perf_scope {
            let _ = write!(words, " Counted with {s}.");
        }
        if g.runs > 1 {
            let _ = write!(words, " Summed over {} runs.", g.runs);
        }
        words.push_str(&left_out(g));
        out.push_str(&para("note", &words));
        let series: Vec<Named<'_>> = g
            .per_cpu
            .iter()
            .map(|s: &CpuSeries| (s.name.as_str(), s.unit.as_str(), s.values.as_slice()))
            .collect();
        out.push_str(&block(&series, &g.nodes));
    }
    if !g.zero_counters.is_empty() {
        out.push_str(&para(
            "note",
            &format!("Zero on every CPU: {}.", g.zero_counters.join(", ")),
        ));
    }
    if let Some(p) = &g.placement {
        let mut p_html = placement(p, &g.nodes, g.runs);
        if g.per_cpu.is_empty() && g.left_out > 0 {
            p_html.push_str(&para("note", left_out(g).trim()));
        }
        out.push_str(&p_html);
    }
    out
}

/// What the maps leave out: the runs the statistics do not count.
fn left_out(g: &Gathered) -> String {
    if g.left_out == 0 {
        return String::new();
    }
    format!(
        " {} run(s) interrupted or failing their own checks are left out, as from the \
         statistics.",
        g.left_out
    )
}

/// Where the threads started and exited.
fn placement(p: &Placement, nodes: &[NumaNode], runs: usize) -> String {
    let mut out = String::from("<h3>Placement: threads per CPU</h3>\n");
    let started: f64 = p.start.iter().map(|v| v.1).sum();
    let max = p.start.iter().map(|v| v.1).fold(0.0, f64::max);
    let mean = started / p.requested.len().max(1) as f64;
    let mut words = format!(
        "{} CPUs requested ({}); threads started on {} of them; imbalance {} (max/mean threads per requested CPU at start).",
        p.requested.len(),
        format_cpu_list(&p.requested),
        p.start.len(),
        if mean > 0.0 { format!("{:.2}", max / mean) } else { "n/a".into() }
    );
    if p.outside.0 + p.outside.1 > 0 {
        let _ = write!(
            words,
            " Threads seen outside the requested CPUs: {} at start, {} at exit.",
            p.outside.0, p.outside.1
        );
    }
    if runs > 1 {
        let _ = write!(words, " Summed over {runs} runs.");
    }
    out.push_str(&para("note", &words));
    let series = [
        ("threads at start", "threads", p.start.as_slice()),
        ("threads at exit", "threads", p.exit.as_slice()),
    ];
    out.push_str(&block(&series, nodes));
    out
}

/// Cells (CPUs x counters x configurations) up to which a comparison
/// draws each configuration's maps (folded); above, only the table.
const COMPARE_CELLS: usize = 20_000;

/// A counter's values in each configuration (`None`: not measured there).
type PerConfig<'a> = (String, String, Vec<Option<&'a [(usize, f64)]>>);

/// Per-CPU counters of a comparison: per counter and configuration the
/// total per run and the imbalance, then each configuration's maps
/// (folded) when they are not too many.
pub(crate) fn by_config(labels: &[String], gathered: &[Gathered]) -> String {
    let mut names: Vec<(&str, &str)> = Vec::new();
    for g in gathered {
        for s in &g.per_cpu {
            if !names.iter().any(|(n, _)| *n == s.name) {
                names.push((&s.name, &s.unit));
            }
        }
    }
    if names.is_empty() && gathered.iter().all(|g| g.placement.is_none()) {
        return String::new();
    }
    let mut head = vec!["counter".to_string(), "unit".to_string()];
    for l in labels {
        head.push(format!("{l}: total/run"));
        head.push(format!("{l}: imbalance"));
    }
    let mut t = Table::new(&head);
    let mut rows: Vec<PerConfig<'_>> = names
        .iter()
        .map(|(n, u)| {
            let per: Vec<Option<&[(usize, f64)]>> = gathered
                .iter()
                .map(|g| {
                    g.per_cpu
                        .iter()
                        .find(|s| s.name == *n)
                        .map(|s| s.values.as_slice())
                })
                .collect();
            (n.to_string(), u.to_string(), per)
        })
        .collect();
    rows.push((
        "threads at start (placement)".into(),
        "threads".into(),
        gathered
            .iter()
            .map(|g| g.placement.as_ref().map(|p| p.start.as_slice()))
            .collect(),
    ));
    for (name, unit, per) in &rows {
        if per.iter().all(Option::is_none) {
            continue;
        }
        let mut cells = vec![Cell::text(name), Cell::text(unit)];
        for (g, values) in gathered.iter().zip(per) {
            match values.and_then(|v| Spread::of(&cpu_values(v), 0)) {
                Some(s) => {
                    cells.push(Cell::num(s.total / g.runs.max(1) as f64));
                    cells.push(
                        s.imbalance
                            .map_or_else(Cell::none, |i| Cell::num_as(i, format!("{i:.2}"))),
                    );
                }
                None => cells.extend([Cell::none(), Cell::none()]),
            }
        }
        t.row(cells);
    }
    let left: Vec<String> = labels
        .iter()
        .zip(gathered)
        .filter(|(_, g)| g.left_out > 0)
        .map(|(l, g)| format!("{l}: {}", g.left_out))
        .collect();
    let left = if left.is_empty() {
        String::new()
    } else {
        format!(
            " Runs interrupted or failing their own checks are left out, as from the statistics \
             ({}).",
            left.join(", ")
        )
    };
    let mut out = format!(
        "<h2>Per-CPU counters by configuration</h2>\n<p class=\"note\">Imbalance: the busiest CPU's value \
         over the mean per CPU (1.00: even), of each configuration's counted runs summed.{}</p>\n",
        esc(&left)
    );
    out.push_str(&t.render());
    let cells: usize = gathered
        .iter()
        .map(|g| g.per_cpu.iter().map(|s| s.values.len()).sum::<usize>())
        .sum();
    if cells > COMPARE_CELLS {
        out.push_str(&para(
            "note",
            &format!(
                "{cells} per-CPU values in all: too many to draw for every configuration here; \
                 `herd report` on one configuration's runs draws its maps."
            ),
        ));
        return out;
    }
    for (l, g) in labels.iter().zip(gathered) {
        if g.per_cpu.is_empty() {
            continue;
        }
        let series: Vec<Named<'_>> = g
            .per_cpu
            .iter()
            .map(|s| (s.name.as_str(), s.unit.as_str(), s.values.as_slice()))
            .collect();
        out.push_str(&super::markup::details(
            &format!("Per-CPU maps of {l}"),
            &block(&series, &g.nodes),
            false,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize, per: usize) -> Vec<NumaNode> {
        (0..n)
            .map(|id| NumaNode {
                id,
                cpus: (id * per..(id + 1) * per).collect(),
            })
            .collect()
    }

    #[test]
    fn ramp_goes_light_to_dark() {
        assert_eq!(ramp(0.0), "#ffffcc");
        assert_eq!(ramp(1.0), "#800026");
        assert_eq!(ramp(f64::NAN), "#ffffcc");
    }

    #[test]
    fn one_cell_per_cpu_in_node_blocks_at_512() {
        let values: Vec<(usize, f64)> = (0..512).map(|c| (c, (c % 7) as f64)).collect();
        let m = heatmap("sys_futex", "calls", &values, &nodes(4, 128)).unwrap();
        assert_eq!(
            m.matches("<rect").count(),
            512 + 21,
            "cells and the legend's 21"
        );
        for n in 0..4 {
            assert!(m.contains(&format!(">node {n}<")), "{n}");
        }
        assert!(m.contains("<title>cpu511: 0</title>"));
        assert!(m.contains(ZERO));
        assert!(!m.contains("consecutive CPUs"));
    }

    #[test]
    fn ten_thousand_cpus_are_binned() {
        let values: Vec<(usize, f64)> = (0..10_000).map(|c| (c, c as f64)).collect();
        let m = heatmap("x", "u", &values, &nodes(8, 1250)).unwrap();
        let cells = m.matches("<rect").count() - 21;
        assert!(cells <= MAX_CELLS + 8, "{cells}");
        assert!(m.contains("Each cell is 10 consecutive CPUs"));
        assert!(m.len() < 200_000, "{}", m.len());
    }

    #[test]
    fn a_thousand_nodes_are_one_block() {
        let values: Vec<(usize, f64)> = (0..2000).map(|c| (c, 1.0 + c as f64)).collect();
        let m = heatmap("x", "u", &values, &nodes(1000, 2)).unwrap();
        assert!(m.contains("1000 nodes: drawn as one block"), "{m}");
        assert!(!m.contains(">node 999<"));
        let height: usize = m
            .split("height=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(height < 1000, "{height} px");
        let s = block(&[("x", "u", &values)], &nodes(1000, 2));
        assert!(s.contains("1000 NUMA nodes: per-node totals are in the JSON"));
    }

    #[test]
    fn all_zero_draws_nothing_and_unknown_nodes_group_as_other() {
        assert!(heatmap("x", "u", &[(0, 0.0), (1, 0.0)], &[]).is_none());
        let g = by_node(&[(0, 1.0), (5, 1.0)], &nodes(1, 2));
        assert_eq!(
            g,
            [
                ("node 0".to_string(), vec![0]),
                ("other".to_string(), vec![5])
            ]
        );
        assert_eq!(by_node(&[(3, 1.0)], &[]), [("CPUs".to_string(), vec![3])]);
    }

    #[test]
    fn tables_give_imbalance_and_node_shares() {
        let v: Vec<(usize, f64)> = vec![(0, 1.0), (1, 1.0), (2, 1.0), (3, 5.0)];
        let t = spread_table(&[("c", "u", &v)]);
        assert!(t.contains(">2.50<"), "imbalance 5/2: {t}");
        assert!(t.contains("cpu3: 5"), "{t}");
        let n = node_table(&[("c", "u", &v)], &nodes(2, 2));
        assert!(n.contains("2 (25%)") && n.contains("6 (75%)"), "{n}");
        assert!(n.contains(">1.50<"), "{n}");
    }
}
