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
