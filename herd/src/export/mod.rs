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

use anyhow::Result;

/// Writes `text` to `path` the way `--save` and `--report` write theirs
/// ([`html::write_replacing`]: a temporary file beside it, synced, renamed
/// over it), so a write that fails or is interrupted leaves the file as
/// it was, never cut short. The error names the file.
pub(crate) fn write_file(path: &Path, text: &str) -> Result<()> {
    html::write_replacing(path, text.as_bytes())
}
