//! Renderers. One file per format family:
//! * `run`: one [`crate::result::RunResult`] or a [`crate::result::RunSet`]
//!   as a table, JSON or CSV (storm and every scenario);
//! * `comparison`: compare/diff tables (table, JSON, CSV, Markdown);
//! * `svg`: sweep charts (plotters);
//! * `progress`: progress bars for long runs (indicatif), terminal only.

pub mod comparison;
pub mod progress;
pub mod run;
pub mod svg;

use std::path::Path;

use anyhow::{Context, Result};

/// Writes `text` to `path`, naming the file in the error.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
