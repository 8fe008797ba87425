//! herd: reproduce and measure the thread-exit thundering herd.
//!
//! A run goes: [`cli`] parses, each scenario validates its options into a
//! typed config (usage errors exit 2, see [`error`]), [`host`] reads the
//! machine's facts and limits, the scenario runs with [`perf`] counters
//! around exactly the measured phase, and yields one [`result::RunResult`]
//! per repetition. [`stats`] summarises repetitions and comparisons and
//! [`export`] renders tables, JSON, CSV, Markdown and SVG.
//!
//! Repetitions (`-r N`), `compare` and `sweep` run every measurement in a
//! fresh child process ([`runner`]): a storm that leaks threads, a peak RSS,
//! getrusage totals and inherited perf counters are all per process, so one
//! process per measurement is the only way each figure means one run.
#![warn(unsafe_op_in_unsafe_fn)]

// Public: what the binary ([`cli::main`]), the integration tests and the
// benches use; everything else is crate-private, so rustc reports what
// nothing uses.
pub(crate) mod cleanup;
pub mod cli;
pub mod error;
pub mod export;
pub(crate) mod format;
pub mod host;
pub(crate) mod internal_env;
pub mod perf;
pub mod result;
pub(crate) mod runner;
pub mod scenario;
pub(crate) mod spawn;
pub(crate) mod stats;
pub(crate) mod usage;
