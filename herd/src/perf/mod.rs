//! perf counters around the measured phase of a scenario.
//!
//! API contract (stable; the implementation is being built in the perf
//! counters issue):
//!
//! ```ignore
//! let mut s = perf::Session::open(&args.perf, &cpus)?;   // never fails for an
//! s.enable()?;                                            // unavailable counter
//! /* measured phase */                                    // unless --require-perf
//! s.disable()?;
//! let report = s.finish()?;
//! result.perf = report.to_json();
//! for m in report.metrics(threads_exited) { result.push(m) }
//! for line in report.notes() { eprintln!("{line}") }      // unavailable counters: reason + fix
//! if let Some(t) = report.contention_table() { println!("{t}") }
//! ```

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::result::Metric;

/// Which tasks the counters follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This process and every thread it creates (inherited counters).
    #[default]
    Process,
    /// One counter per CPU, any task: includes kernel work done for us elsewhere.
    System,
}

/// perf flags shared by every scenario (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
pub struct PerfArgs {
    /// Counter scope: this process (inherited by its threads) or every CPU.
    #[arg(long, value_enum, default_value_t = Scope::Process)]
    pub perf_scope: Scope,
    /// Open no perf counters at all.
    #[arg(long, conflicts_with_all = ["require_perf", "contention"])]
    pub no_perf: bool,
    /// Fail (exit 1) when any counter cannot be opened, instead of reporting it unavailable.
    #[arg(long)]
    pub require_perf: bool,
    /// Sample lock:contention_begin/end and report a per-lock contention profile.
    #[arg(long)]
    pub contention: bool,
}

/// Counters opened for one measured phase.
#[derive(Debug)]
pub struct Session {
    enabled: bool,
}

impl Session {
    /// Opens every counter `args` asks for on `cpus` (system scope) or this
    /// process. Counters that cannot be opened are recorded as unavailable.
    pub fn open(args: &PerfArgs, cpus: &[usize]) -> Result<Session> {
        let _ = (args, cpus);
        Ok(Session { enabled: false })
    }

    /// Starts counting.
    pub fn enable(&mut self) -> Result<()> {
        self.enabled = true;
        Ok(())
    }

    /// Stops counting.
    pub fn disable(&mut self) -> Result<()> {
        self.enabled = false;
        Ok(())
    }

    /// Reads every counter and the contention samples.
    pub fn finish(self) -> Result<Report> {
        Ok(Report::default())
    }
}

/// What a [`Session`] measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {}

impl Report {
    /// The whole report as JSON for `RunResult::perf`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Flat metrics (totals, and per thread exit when `exits > 0`).
    pub fn metrics(&self, exits: u64) -> Vec<Metric> {
        let _ = exits;
        Vec::new()
    }

    /// One line per counter that could not be opened: reason and fix.
    pub fn notes(&self) -> Vec<String> {
        vec!["perf counters: not built yet".to_string()]
    }

    /// The `--contention` profile rendered like `perf lock contention`.
    pub fn contention_table(&self) -> Option<String> {
        None
    }
}
