//! Renderers. One file per format family:
//! * `run`: one [`crate::result::RunResult`] or a [`crate::result::RunSet`]
//!   as a table, JSON or CSV (storm and every scenario);
//! * `comparison`: the compare/diff document and its renderings (table,
//!   JSON, CSV, Markdown); `comparison_output`: the flags choosing them;
//! * `format`: the one rule for printing a metric's value, and the text
//!   shapes (grids, `mean ±%stddev`, `%change`) built on it;
//! * `svg`: sweep charts (plotters);
//! * `histogram`: a latency histogram's JSON shape, written and read back;
//! * `html`: `herd report`'s self-contained page (a folder of small files);
//! * `progress`: progress bars for long runs (indicatif), terminal only.

pub mod comparison;
pub(crate) mod comparison_output;
pub(crate) mod format;
pub(crate) mod histogram;
pub(crate) mod html;
pub(crate) mod progress;
pub(crate) mod run;
pub(crate) mod svg;

use std::path::Path;

use anyhow::{Context, Result};

/// Writes `text` to `path`, naming the file in the error.
pub(crate) fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
