//! Whether a sweep document agrees with itself: herd writes, for every
//! metric, one row of figures per configuration (`series`) and in each
//! row one entry per swept value (`values`, with `x` their numbers),
//! `null` where nothing was measured; every point is of a configuration
//! and a value of the sweep. A hand-edited or damaged `data.json` that
//! breaks this would be drawn with cells and points silently missing or
//! placed at no value (`NaN` in the table), so `herd report` refuses it
//! (exit 2), naming the first part that does not agree.

use super::SweepDoc;

impl SweepDoc {
    /// The first inconsistency of the document, in words; `None` when its
    /// parts agree.
    pub fn inconsistency(&self) -> Option<String> {
        inconsistency(self)
    }
}

fn inconsistency(doc: &SweepDoc) -> Option<String> {
    let (nv, ns) = (doc.values.len(), doc.series.len());
    let flag = &doc.flag;
    if nv == 0 || ns == 0 {
        return Some(format!(
            "it has {nv} values of {flag} (`values`) and {ns} configurations (`series`); a sweep \
             has at least one of each"
        ));
    }
    if doc.x.len() != nv {
        return Some(format!(
            "it has {} numbers (`x`) for {nv} values of {flag} (`values`)",
            doc.x.len()
        ));
    }
    for m in &doc.metrics {
        for (part, rows) in [
            ("summaries", rows_of(&m.summaries)),
            ("changes", rows_of(&m.changes)),
        ] {
            if rows.len() != ns {
                return Some(format!(
                    "metric `{}`: `{part}` has rows for {} configurations, the sweep has {ns} \
                     (`series`)",
                    m.name,
                    rows.len()
                ));
            }
            if let Some((s, len)) = rows.iter().enumerate().find(|(_, &len)| len != nv) {
                return Some(format!(
                    "metric `{}`, configuration `{}`: `{part}` has {len} entries for {nv} values \
                     of {flag} (`values`)",
                    m.name, doc.series[s]
                ));
            }
        }
    }
    for (i, p) in doc.points.iter().enumerate() {
        if p.series >= ns {
            return Some(format!(
                "point {i} is of configuration {} (counted from 0), the sweep has {ns} (`series`)",
                p.series
            ));
        }
        if !doc.values.contains(&p.value) {
            return Some(format!(
                "point {i} is at {flag} = {}, which is not one of the sweep's values ({})",
                p.value,
                doc.values.join(", ")
            ));
        }
    }
    None
}

/// The length of each row.
fn rows_of<T>(rows: &[Vec<T>]) -> Vec<usize> {
    rows.iter().map(Vec::len).collect()
}
